/* data_internal.h - what the readers of training data share (private to common/ml/: defined in
 * data_read.c, used by data_idx.c, data_csv.c and data_libsvm.c; the public API is
 * psflow/data.h): reading a file whole, number fields, lines, growing rows, labels, and the
 * sink that turns the ids of a line into a sparse example.
 *
 * The readers all parse from memory, so the fuzz targets and tests reach the same code as a
 * file does. Every error names the input (`what`), the line and the byte offset.
 */
#ifndef PSFLOW_ML_DATA_INTERNAL_H
#define PSFLOW_ML_DATA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/data.h"
#include "psflow/model.h"

/* Reads all of `path` into a new buffer (*data, caller pf_frees; never NULL on success),
 * gunzipping it when it is gzip data. Errors: PF_ERR_IO (open/read failed), PF_ERR_FORMAT
 * (corrupt or truncated gzip data, more than 256 MiB decompressed), PF_ERR_NOMEM. */
pf_status data_read_file(const char *path, uint8_t **data, size_t *len, pf_error *err);

/* --- fields and lines ------------------------------------------------------------------------ */

typedef enum {
    FIELD_OK,
    FIELD_EMPTY,
    FIELD_NOT_NUMBER,
    FIELD_NOT_FINITE, /* nan, inf */
    FIELD_RANGE       /* beyond double (1e400) or, for floats, beyond float32 */
} data_field;

static inline bool data_is_blank(char c) {
    return c == ' ' || c == '\t';
}

/* Parses text[0..len), blanks around it allowed, as one number that fits a float. */
data_field data_parse_field(const char *text, size_t len, double *value);

/* The next line of text[0 .. len) from *pos: where it starts and its length without the
 * '\n'; moves *pos past it. False at the end of the text. */
bool data_next_line(const char *text, size_t len, size_t *pos, size_t *start, size_t *n);

/* Why a label is refused, or NULL: a class index must be an integer in [0, 2^20). */
const char *data_label_problem(double v, bool classification);

/* A label field line[0 .. n) at byte `offset` read into *label, or the error naming it. */
pf_status data_parse_label(const char *field, size_t n, long long offset, long long line_no,
                           const char *what, bool classification, double *label, pf_error *err);

/* --- rows ------------------------------------------------------------------------------------ */

/* The rows of a text reader: ds->n filled so far, storage for `capacity`. */
typedef struct data_rows {
    pf_dataset *ds;
    int64_t capacity;
} data_rows;

/* Storage for one more row (row rows->ds->n), or an error naming the line. */
pf_status data_room_for_row(data_rows *rows, size_t line_start, long long line_no, const char *what,
                            pf_error *err);

/* After the last line of a text of len bytes: no rows is an error; else the class count and
 * the buffers cut to the rows read. */
pf_status data_finish_rows(pf_dataset *out, size_t len, const char *what, bool classification,
                           double max_label, pf_error *err);

/* --- sparse examples ------------------------------------------------------------------------- */

/* Where the pairs of a LIBSVM line (or the cells of a CSV line of ids) go: dense rows of
 * `features` floats (model NULL), or the id and weight slots of a model with embeddings
 * (model.h), whose features own consecutive id ranges: feature f the `vocab` ids after those
 * of features 0 .. f-1. */
typedef struct data_sink {
    const pf_model_spec *model;
    int features; /* ids in all: model.inputs, or the sum of the vocabularies */
    int base;
    float *row;
    long long prev;  /* the line's previous id, -1 before the first */
    int f;           /* the feature the previous id belonged to */
    long long first; /* its first id (base excluded) */
    int slot;        /* x column of its first id slot */
    int count;       /* its ids on this line so far */
} data_sink;

/* A sink for the sparse examples of a model with embeddings, or an error for a model that
 * cannot have them. */
pf_status data_sink_for_model(data_sink *k, const pf_model_spec *model, int index_base,
                              const char *what, pf_error *err);

/* Starts a line whose example is `row`: zeroes it, or pads its id and weight slots. */
void data_sink_line(data_sink *k, float *row);

/* Stores feature id (base excluded) with value v; refuses a feature's max_ids + 1st id. */
pf_status data_sink_put(data_sink *k, long long id, float v, long long offset, long long line_no,
                        const char *what, pf_error *err);

/* --- criteo ---------------------------------------------------------------------------------- */

struct pf_criteo_row;

/* One Criteo-layout row as the example model m reads (pf_criteo_load's layout, data.h):
 * pf_model_input_width(m) floats into x, the numeric inputs standardised by sc when not NULL.
 * Defined in data_criteo.c; stream.c shares it. */
void data_criteo_example(const pf_model_spec *m, const pf_criteo_scaling *sc,
                         const struct pf_criteo_row *r, float *x);

#endif
