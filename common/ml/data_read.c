/* data_read.c - what the readers of training data share (see data_internal.h): a file read
 * whole, number fields and lines of text, rows grown as they are read, labels, and the sink
 * that stores the ids of a line as a sparse example.
 *
 * DESIGN. Files are read whole (gunzipped by zlib when they start with the gzip magic
 * 1f 8b, copied as they are otherwise) into one buffer capped at READ_CAP bytes, then
 * parsed from memory by the same functions the fuzz targets call. Every length a file
 * claims is checked against the bytes actually present before anything is allocated, so
 * a header claiming 2^26 images of 1024x1024 pixels costs nothing. Allocations go through
 * mem.h and turn into PF_ERR_NOMEM; on any error *out is left zeroed.
 */
#include "data_internal.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "psflow/buf.h"
#include "psflow/mem.h"

#define READ_CAP         ((size_t)256 << 20) /* largest file (decompressed) we read: 256 MiB */
#define READ_FIRST_CHUNK ((size_t)64 << 10)
#define CSV_MAX_LABEL    1048576.0 /* classification labels lie in [0, 2^20) */
#define CSV_FIELD_MAX    127       /* longest field we try to read as a number */

static void os_error_text(int errnum, char *buf, size_t size) {
    if (errnum == 0 || strerror_r(errnum, buf, size) != 0)
        snprintf(buf, size, "error %d", errnum);
}

/* --- reading files ------------------------------------------------------------------------ */

pf_status data_read_file(const char *path, uint8_t **data, size_t *len, pf_error *err) {
    *data = NULL;
    *len = 0;
    char os[128];
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        if (errno == 0)
            return pf_error_set_offset(err, PF_ERR_NOMEM, -1, "%s: cannot open: out of memory",
                                       path);
        os_error_text(errno, os, sizeof os);
        return pf_error_set_offset(err, PF_ERR_IO, -1, "%s: cannot open: %s", path, os);
    }
    gzbuffer(f, 128u << 10);

    pf_status status = PF_OK;
    /* Up to READ_CAP + 1 bytes, grown geometrically: reading that last byte tells us the
     * file is over the cap. */
    pf_buf b;
    pf_buf_init(&b, READ_CAP + 1);
    for (;;) {
        if (b.len == b.cap && pf_buf_reserve(&b, b.cap ? b.cap : READ_FIRST_CHUNK) != PF_OK &&
            pf_buf_reserve(&b, b.max - b.len) != PF_OK) { /* the last step, up to the cap */
            status = pf_error_set_offset(err, PF_ERR_NOMEM, -1,
                                         "%s: out of memory reading %zu bytes", path, b.len + 1);
            break;
        }
        size_t want = b.cap - b.len;
        if (want > (size_t)INT_MAX)
            want = (size_t)INT_MAX;
        errno = 0;
        int got = gzread(f, b.data + b.len, (unsigned)want);
        if (got <= 0)
            break; /* end of data or error: gzerror below tells which */
        b.len += (size_t)got;
        size_t size = b.len;
        if (size > READ_CAP) {
            status = pf_error_set_offset(err, PF_ERR_FORMAT, (long long)READ_CAP,
                                         "%s: larger than the %zu MiB limit (decompressed)", path,
                                         READ_CAP >> 20);
            break;
        }
    }
    if (status == PF_OK) {
        int zerr = Z_OK;
        const char *zmsg = gzerror(f, &zerr);
        if (zerr == Z_ERRNO) {
            os_error_text(errno, os, sizeof os);
            status = pf_error_set_offset(err, PF_ERR_IO, (long long)b.len, "%s: read failed: %s",
                                         path, os);
        } else if (zerr == Z_MEM_ERROR) {
            status =
                pf_error_set_offset(err, PF_ERR_NOMEM, -1, "%s: out of memory decompressing", path);
        } else if (zerr == Z_BUF_ERROR) {
            status = pf_error_set_offset(
                err, PF_ERR_FORMAT, -1,
                "%s: gzip data ends early (truncated after %zu decompressed bytes)", path, b.len);
        } else if (zerr != Z_OK) {
            /* zlib's message reads "path: problem"; keep the problem. */
            size_t plen = strlen(path);
            if (zmsg && strncmp(zmsg, path, plen) == 0 && strncmp(zmsg + plen, ": ", 2) == 0)
                zmsg += plen + 2;
            status = pf_error_set_offset(err, PF_ERR_FORMAT, -1, "%s: corrupt gzip data: %s", path,
                                         zmsg ? zmsg : "unknown error");
        }
    }
    int close_rc = gzclose(f);
    if (status == PF_OK && close_rc != Z_OK)
        status = pf_error_set_offset(
            err, close_rc == Z_BUF_ERROR ? PF_ERR_FORMAT : PF_ERR_IO, -1, "%s: %s", path,
            close_rc == Z_BUF_ERROR ? "gzip data ends early (truncated)" : "error closing file");
    if (status != PF_OK) {
        pf_buf_deinit(&b);
        return status;
    }
    *len = b.len;
    *data = pf_buf_detach(&b);
    return PF_OK;
}

data_field data_parse_field(const char *text, size_t len, double *value) {
    while (len > 0 && data_is_blank(text[0])) {
        text++;
        len--;
    }
    while (len > 0 && data_is_blank(text[len - 1]))
        len--;
    if (len == 0)
        return FIELD_EMPTY;
    if (len > CSV_FIELD_MAX)
        return FIELD_NOT_NUMBER;
    /* strtod needs a terminated string and the input need not be one. */
    char buf[CSV_FIELD_MAX + 1];
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *end = NULL;
    errno = 0;
    double v = strtod(buf, &end);
    if (end != buf + len) /* nothing read, or junk (an embedded NUL too) after the number */
        return FIELD_NOT_NUMBER;
    if (isinf(v) && errno == ERANGE)
        return FIELD_RANGE;
    if (!isfinite(v))
        return FIELD_NOT_FINITE;
    if (fabs(v) > FLT_MAX)
        return FIELD_RANGE;
    *value = v;
    return FIELD_OK;
}

static pf_status grow_rows(data_rows *r) {
    pf_dataset *ds = r->ds;
    int64_t next = r->capacity ? r->capacity * 2 : 64;
    if ((uint64_t)next > SIZE_MAX / sizeof(float) / (size_t)ds->features)
        return PF_ERR_NOMEM;
    float *x = pf_realloc(ds->x, (size_t)next * (size_t)ds->features * sizeof(float));
    if (!x)
        return PF_ERR_NOMEM;
    ds->x = x;
    float *y = pf_realloc(ds->y, (size_t)next * sizeof(float));
    if (!y)
        return PF_ERR_NOMEM;
    ds->y = y;
    r->capacity = next;
    return PF_OK;
}

/* Gives back the unused tail of the row buffers; keeps them as they are if that fails. */
static void shrink_rows(pf_dataset *ds) {
    float *x = pf_realloc(ds->x, (size_t)ds->n * (size_t)ds->features * sizeof(float));
    if (x)
        ds->x = x;
    float *y = pf_realloc(ds->y, (size_t)ds->n * sizeof(float));
    if (y)
        ds->y = y;
}

const char *data_label_problem(double v, bool classification) {
    if (!classification)
        return NULL;
    if (v != floor(v))
        return "is not an integer";
    if (v == -1)
        return "is outside [0, 1048576) (binary -1/+1 labels: write them as 0 and 1)";
    if (v < 0 || v >= CSV_MAX_LABEL)
        return "is outside [0, 1048576)";
    return NULL;
}

bool data_next_line(const char *text, size_t len, size_t *pos, size_t *start, size_t *n) {
    if (*pos >= len)
        return false;
    const char *nl = memchr(text + *pos, '\n', len - *pos);
    *start = *pos;
    *n = nl ? (size_t)(nl - (text + *pos)) : len - *pos;
    *pos += *n + 1;
    return true;
}

const char *data_at_text(const data_at *at, char *buf, size_t len) {
    if (at->line_no > 0)
        snprintf(buf, len, "%s: line %lld", at->what, at->line_no);
    else
        snprintf(buf, len, "%s: line at byte %lld", at->what, at->start);
    return buf;
}

pf_status data_parse_label(const char *field, size_t n, long long offset, const data_at *at,
                           bool classification, double *label, pf_error *err) {
    data_field r = data_parse_field(field, n, label);
    const char *bad =
        r == FIELD_OK ? data_label_problem(*label, classification) : "is not a number";
    if (r == FIELD_NOT_FINITE || r == FIELD_RANGE)
        bad = r == FIELD_RANGE ? "is out of float32 range" : "is not a finite number";
    if (!bad)
        return PF_OK;
    char where[DATA_AT_TEXT];
    return pf_error_set_offset(
        err, PF_ERR_FORMAT, offset, "%s: %s \"%.*s\" %s", data_at_text(at, where, sizeof where),
        classification ? "label" : "target", (int)(n > 40 ? 40 : n), field, bad);
}

pf_status data_room_for_row(data_rows *rows, const data_at *at, pf_error *err) {
    if (rows->ds->n < rows->capacity || grow_rows(rows) == PF_OK)
        return PF_OK;
    char where[DATA_AT_TEXT];
    return pf_error_set_offset(err, PF_ERR_NOMEM, at->start, "%s: out of memory for %lld rows",
                               data_at_text(at, where, sizeof where), (long long)rows->ds->n + 1);
}

pf_status data_finish_rows(pf_dataset *out, size_t len, const char *what, bool classification,
                           double max_label, pf_error *err) {
    if (out->n == 0)
        return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)len, "%s: %s", what,
                                   len == 0 ? "empty file" : "no data rows");
    out->num_classes = classification ? (int)max_label + 1 : 0;
    shrink_rows(out);
    return PF_OK;
}

/* --- sparse examples ---------------------------------------------------------------------- */

void data_sink_line(data_sink *k, float *row) {
    k->row = row;
    k->prev = -1;
    k->f = 0;
    k->first = 0;
    k->slot = 0;
    k->count = 0;
    if (k->model)
        pf_model_pad_example(k->model, row);
    else
        memset(row, 0, (size_t)k->features * sizeof *row);
}

pf_status data_sink_put(data_sink *k, long long id, float v, long long offset, const data_at *at,
                        pf_error *err) {
    if (!k->model) {
        k->row[id] = v;
        return PF_OK;
    }
    const pf_embedding_spec *e = &k->model->embeddings[k->f];
    while (id >= k->first + e->vocab) {
        k->first += e->vocab;
        k->slot += pf_model_feature_width(e);
        k->count = 0;
        e = &k->model->embeddings[++k->f];
    }
    if (k->count == e->max_ids) {
        char where[DATA_AT_TEXT];
        return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                   "%s: more than max_ids %d ids for embedding '%s'",
                                   data_at_text(at, where, sizeof where), e->max_ids, e->name);
    }
    k->row[k->slot + k->count] = (float)(id - k->first);
    k->row[k->slot + e->max_ids + k->count] = v;
    k->count++;
    return PF_OK;
}

pf_status data_sink_put_dyn(data_sink *k, int f, uint64_t id, float v, long long offset,
                            const data_at *at, pf_error *err) {
    while (k->f < f) {
        const pf_embedding_spec *e = &k->model->embeddings[k->f++];
        k->first += e->vocab;
        k->slot += pf_model_feature_width(e);
        k->count = 0;
    }
    const pf_embedding_spec *e = &k->model->embeddings[f];
    if (k->count == e->max_ids) {
        char where[DATA_AT_TEXT];
        return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                   "%s: more than max_ids %d ids for embedding '%s'",
                                   data_at_text(at, where, sizeof where), e->max_ids, e->name);
    }
    pf_model_put_id(k->row + k->slot, k->count, id);
    k->row[k->slot + e->max_ids * PF_DYN_ID_SLOTS + k->count] = v;
    k->count++;
    return PF_OK;
}

pf_status data_sink_for_model(data_sink *k, const pf_model_spec *model, int index_base,
                              const char *what, pf_error *err) {
    bool valid = pf_model_embeddings_valid(model);
    int64_t ids = 0;
    for (int f = 0; valid && f < model->n_embeddings; f++)
        ids += model->embeddings[f].vocab;
    if (!valid || ids > INT_MAX || index_base < 0 || index_base > 1)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1,
                                   "%s: a model of %d embeddings (%lld ids) or index base %d that "
                                   "sparse examples cannot have",
                                   what, model->n_embeddings, (long long)ids, index_base);
    *k = (data_sink){.model = model, .features = (int)ids, .base = index_base};
    return PF_OK;
}
