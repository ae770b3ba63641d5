/* data_internal.h - what the readers of training data share (private to common/ml/: defined in
 * data_read.c, used by data_idx.c, data_csv.c and data_libsvm.c; the public API is
 * psflow/data.h): reading a file whole, number fields, lines, growing rows, labels, and the
 * sink that turns the ids of a line into a sparse example; the per-line parsing of csv and
 * libsvm, shared with the streamed reader of those files (data_text.c, used by stream.c); the
 * streamed reader of IDX record ranges (data_idx.c, used by stream.c).
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

/* Where a line is, for messages: "what: line N" when its number is known, else (a byte range
 * that starts inside a file) "what: line at byte N". */
typedef struct data_at {
    const char *what;
    long long line_no; /* from 1; 0: not known */
    long long start;   /* the byte offset of the line's first byte in its text or file */
} data_at;

#define DATA_AT_TEXT 1200 /* room for data_at_text */

const char *data_at_text(const data_at *at, char *buf, size_t len);

/* A label field[0 .. n) at byte `offset` read into *label, or the error naming it. */
pf_status data_parse_label(const char *field, size_t n, long long offset, const data_at *at,
                           bool classification, double *label, pf_error *err);

/* --- rows ------------------------------------------------------------------------------------ */

/* The rows of a text reader: ds->n filled so far, storage for `capacity`. */
typedef struct data_rows {
    pf_dataset *ds;
    int64_t capacity;
} data_rows;

/* Storage for one more row (row rows->ds->n), or an error naming the line. */
pf_status data_room_for_row(data_rows *rows, const data_at *at, pf_error *err);

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

/* Stores feature id (base excluded) with value v; refuses a feature's max_ids + 1st id. A
 * dynamic table owns no range of ids (its vocab is 0): its ids go through data_sink_put_dyn. */
pf_status data_sink_put(data_sink *k, long long id, float v, long long offset, const data_at *at,
                        pf_error *err);

/* Stores 64-bit id of dynamic table f (not before the feature of the line's previous id) with
 * value v; refuses the table's max_ids + 1st id. */
pf_status data_sink_put_dyn(data_sink *k, int f, uint64_t id, float v, long long offset,
                            const data_at *at, pf_error *err);

/* --- one line of a text format ------------------------------------------------------------- */

/* The per-line parsing that the whole-file readers (pf_csv_*, pf_libsvm_*) and the streamed
 * one (data_text_*) share, so both give the same examples and the same messages. */

/* A CSV line without its trailing '\r'; 0 when it is blank. */
size_t data_csv_trim(const char *line, size_t n);

/* Whether the first non-blank line of a CSV file is a header rather than data: for numbers
 * (ids false) a field that does not read as a number, for ids a first field that does not. */
bool data_csv_is_header(const char *line, size_t n, bool ids);

/* A CSV data line (trimmed, not blank) into row and *label: the label, then `features`
 * numbers (k NULL) or one cell of ids per embedding of k's model. */
pf_status data_csv_line(const char *line, size_t n, const data_at *at, int features, data_sink *k,
                        bool classification, float *row, double *label, pf_error *err);

/* A LIBSVM line into row and *label: `label id:value ...`, a '#' starting a comment. *empty is
 * set (and nothing parsed) for a line without an example. */
pf_status data_libsvm_line(const char *line, size_t n, const data_at *at, data_sink *k,
                           bool classification, float *row, double *label, bool *empty,
                           pf_error *err);

/* --- streamed text (data_text.c) ------------------------------------------------------------ */

/* csv and libsvm files read line by line in one bounded buffer, for data.streaming: the
 * counterpart of criteo.h's reader, the same examples as the whole-file readers. */
#define DATA_TEXT_BUFFER   ((size_t)1 << 20) /* bytes read at a time */
#define DATA_TEXT_MAX_LINE ((size_t)1 << 20) /* default longest line */

typedef struct data_text_reader data_text_reader;

/* Opens the lines of `path` (plain, or gzip by its magic bytes) that start at byte offsets in
 * [start, end) (end 0: to the end), as pf_criteo_open_range cuts ranges, to read examples of
 * `format` (PF_DATA_CSV or PF_DATA_LIBSVM) for `model` (which must outlive the reader): its
 * embeddings' ids, or model->inputs numbers. A CSV header is looked for in the file's first
 * line that is not blank, whichever range it starts in.
 * max_line: the longest line (0: DATA_TEXT_MAX_LINE). Errors: PF_ERR_IO (cannot open),
 * PF_ERR_INVALID (a gzip file from start > 0, a model sparse examples cannot have),
 * PF_ERR_NOMEM. */
pf_status data_text_open_range(int format, const pf_model_spec *model, int index_base,
                               const char *path, uint64_t start, uint64_t end, size_t max_line,
                               data_text_reader **out, pf_error *err);

/* The next example into x (pf_model_input_width floats) and *y: PF_OK; PF_ERR_NOT_FOUND at
 * the end (err untouched); PF_ERR_FORMAT for a bad line (naming the file, the line and the
 * column; the reader goes on with the next line), a line longer than max_line (refused, not
 * kept: memory does not grow), a class label not below model->outputs, or corrupt gzip data
 * (the reader ends); PF_ERR_IO for a failed read. Blank lines are skipped. */
pf_status data_text_next(data_text_reader *r, float *x, float *y, pf_error *err);

/* 1 once the reader has nothing more to give (its end, or an error it cannot go on from). */
int data_text_ended(const data_text_reader *r);

void data_text_close(data_text_reader *r);

/* --- streamed IDX (data_idx.c) ------------------------------------------------------------- */

/* A range of records of an IDX pair (images, labels; plain or gzip by their magic bytes), for
 * data.streaming: the examples pf_idx_load gives for those records, one record held at a
 * time. */
typedef struct data_idx_reader data_idx_reader;

/* The record count and pixels per image of the pair, from the headers (checked as by
 * data_idx_open_range). */
pf_status data_idx_probe(const char *images, const char *labels, uint64_t *n, int *features,
                         pf_error *err);

/* Opens records [first, end) (end 0: to the last) of the pair. Checks both headers (magic,
 * dims, equal counts; a plain file's length), and when features > 0 that the images hold that
 * many pixels; a label not below `classes` (> 0) is an error when its record is read.
 * Errors: PF_ERR_IO (cannot open or read), PF_ERR_FORMAT (naming the file), PF_ERR_INVALID
 * (a range beyond the records), PF_ERR_NOMEM. */
pf_status data_idx_open_range(const char *images, const char *labels, uint64_t first, uint64_t end,
                              int features, int classes, data_idx_reader **out, pf_error *err);

/* The next record into x (features floats, pixels / 255) and *y (the label): PF_OK;
 * PF_ERR_NOT_FOUND at the range's end; PF_ERR_FORMAT (a file cut short or corrupt, a label
 * out of range: the file and the record named) or PF_ERR_IO, after which the reader ends. */
pf_status data_idx_next(data_idx_reader *r, float *x, float *y, pf_error *err);

/* 1 once the reader has nothing more to give. */
int data_idx_ended(const data_idx_reader *r);

void data_idx_close(data_idx_reader *r);

/* --- criteo ---------------------------------------------------------------------------------- */

struct pf_criteo_row;

/* One Criteo-layout row as the example model m reads (pf_criteo_load's layout, data.h):
 * pf_model_input_width(m) floats into x, the numeric inputs standardised by sc when not NULL.
 * Defined in data_criteo.c; stream.c shares it. */
void data_criteo_example(const pf_model_spec *m, const pf_criteo_scaling *sc,
                         const struct pf_criteo_row *r, float *x);

#endif
