/* data.c - IDX and CSV readers, the synthetic_linear generator and the sharding sampler
 * (see data.h).
 *
 * DESIGN. Files are read whole (gunzipped by zlib when they start with the gzip magic
 * 1f 8b, copied as they are otherwise) into one buffer capped at READ_CAP bytes, then
 * parsed from memory by the same functions the fuzz targets call. Every length a file
 * claims is checked against the bytes actually present before anything is allocated, so
 * a header claiming 2^26 images of 1024x1024 pixels costs nothing. Allocations go through
 * mem.h and turn into PF_ERR_NOMEM; on any error *out is left zeroed.
 *
 * The sampler realises the endless stream of data.h: position p is example
 * perm_e[p mod n] with e = p / n, perm_e a Fisher-Yates shuffle of 0..n-1 drawn from
 * pf_rng(seed, 1000 + e). It keeps the permutation of the last epoch asked for, so a
 * reader that walks the stream forwards shuffles once per epoch. A sampler is not
 * thread-safe (pf_sampler_index updates that cache); use one per thread.
 */
#include "psflow/data.h"

#include <assert.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "psflow/buf.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/rng.h"

#define READ_CAP            ((size_t)256 << 20) /* largest file (decompressed) we read: 256 MiB */
#define READ_FIRST_CHUNK    ((size_t)64 << 10)
#define IDX_IMAGES_MAGIC    0x00000803u /* uint8, 3 dims: n, rows, cols */
#define IDX_LABELS_MAGIC    0x00000801u /* uint8, 1 dim: n */
#define IDX_MAX_PIXELS      (1u << 20)  /* rows * cols */
#define CSV_MAX_LABEL       1048576.0   /* classification labels lie in [0, 2^20) */
#define CSV_FIELD_MAX       127         /* longest field we try to read as a number */
#define SAMPLER_STREAM_BASE 1000u       /* epoch e shuffles with pf_rng(seed, 1000 + e) */

static void set_pointer(pf_error *err, const char *pointer) {
    if (err)
        snprintf(err->pointer, sizeof err->pointer, "%s", pointer);
}

static void os_error_text(int errnum, char *buf, size_t size) {
    if (errnum == 0 || strerror_r(errnum, buf, size) != 0)
        snprintf(buf, size, "error %d", errnum);
}

void pf_dataset_deinit(pf_dataset *ds) {
    pf_free(ds->x);
    pf_free(ds->y);
    memset(ds, 0, sizeof *ds);
}

pf_status pf_dataset_alloc(pf_dataset *out, int64_t n, int features) {
    memset(out, 0, sizeof *out);
    if (n < 1 || features < 1 || (uint64_t)n > SIZE_MAX / (size_t)features)
        return PF_ERR_NOMEM;
    out->x = pf_mallocarray((size_t)n * (size_t)features, sizeof(float));
    out->y = pf_mallocarray((size_t)n, sizeof(float));
    if (!out->x || !out->y) {
        pf_dataset_deinit(out);
        return PF_ERR_NOMEM;
    }
    out->n = n;
    out->features = features;
    return PF_OK;
}

/* --- reading files ------------------------------------------------------------------------ */

/* Reads all of `path` into a new buffer (*data, caller pf_frees; never NULL on success),
 * gunzipping it when it is gzip data. Errors: PF_ERR_IO (open/read failed), PF_ERR_FORMAT
 * (corrupt or truncated gzip data, more than READ_CAP bytes), PF_ERR_NOMEM. */
static pf_status read_file(const char *path, uint8_t **data, size_t *len, pf_error *err) {
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

/* --- IDX ---------------------------------------------------------------------------------- */

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static const char *magic_hint(uint32_t magic, uint32_t wanted) {
    if (magic == IDX_LABELS_MAGIC && wanted == IDX_IMAGES_MAGIC)
        return " (this is an IDX label file; are images and labels swapped?)";
    if (magic == IDX_IMAGES_MAGIC && wanted == IDX_LABELS_MAGIC)
        return " (this is an IDX image file; are images and labels swapped?)";
    if ((magic >> 16) == 0x1f8b)
        return " (gzip-compressed data; decompress it first)";
    return "";
}

/* Checks one IDX file's header and length: `header` bytes of magic and big-endian uint32
 * dims (16 for images: n, rows, cols; 8 for labels: n), then exactly rows * cols bytes
 * (images) or 1 byte (labels) per example. Returns the example count in *n. */
static pf_status check_idx_file(const uint8_t *data, size_t len, const char *name, uint32_t magic,
                                size_t header, uint64_t *n, pf_error *err) {
    if (len == 0)
        return pf_error_set_offset(err, PF_ERR_FORMAT, 0, "%s: empty file", name);
    if (len >= 4 && be32(data) != magic)
        return pf_error_set_offset(err, PF_ERR_FORMAT, 0, "%s: bad magic 0x%08x, expected 0x%08x%s",
                                   name, (unsigned)be32(data), (unsigned)magic,
                                   magic_hint(be32(data), magic));
    if (len < header)
        return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)len,
                                   "%s: truncated header: expected %zu bytes, got %zu", name,
                                   header, len);
    static const char *const dims[3] = {"example count", "rows", "cols"};
    for (size_t off = 4; off < header; off += 4) {
        if (be32(data + off) == 0)
            return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)off,
                                       "%s: %s is zero in the header", name, dims[off / 4 - 1]);
    }
    *n = be32(data + 4);
    if (*n > PF_IDX_MAX_EXAMPLES)
        return pf_error_set_offset(err, PF_ERR_FORMAT, 4,
                                   "%s: claims %llu examples, more than the limit of %d", name,
                                   (unsigned long long)*n, PF_IDX_MAX_EXAMPLES);
    uint64_t item_bytes = 1;
    if (header == 16) {
        uint64_t rows = be32(data + 8), cols = be32(data + 12);
        item_bytes = rows * cols; /* both < 2^32: no overflow in 64 bits */
        if (item_bytes > IDX_MAX_PIXELS)
            return pf_error_set_offset(
                err, PF_ERR_FORMAT, 8, "%s: images of %llux%llu pixels exceed the limit of %u",
                name, (unsigned long long)rows, (unsigned long long)cols, IDX_MAX_PIXELS);
    }
    uint64_t expected = header + *n * item_bytes; /* <= 16 + 2^26 * 2^20 */
    if (len < expected)
        return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)len,
                                   "%s: truncated: expected %llu bytes, got %zu", name,
                                   (unsigned long long)expected, len);
    if (len > expected)
        return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)expected,
                                   "%s: trailing garbage: %llu bytes after the expected %llu", name,
                                   (unsigned long long)(len - expected),
                                   (unsigned long long)expected);
    return PF_OK;
}

static pf_status parse_idx(const uint8_t *images, size_t images_len, const char *images_name,
                           const uint8_t *labels, size_t labels_len, const char *labels_name,
                           pf_dataset *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    uint64_t n_images = 0, n_labels = 0;
    pf_status status =
        check_idx_file(images, images_len, images_name, IDX_IMAGES_MAGIC, 16, &n_images, err);
    if (status == PF_OK)
        status =
            check_idx_file(labels, labels_len, labels_name, IDX_LABELS_MAGIC, 8, &n_labels, err);
    if (status != PF_OK)
        return status;
    if (n_images != n_labels)
        return pf_error_set_offset(
            err, PF_ERR_FORMAT, 4, "%s has %llu images but %s has %llu labels", images_name,
            (unsigned long long)n_images, labels_name, (unsigned long long)n_labels);

    int features = (int)(be32(images + 8) * be32(images + 12)); /* <= 2^20, checked */
    if (pf_dataset_alloc(out, (int64_t)n_images, features) != PF_OK)
        return pf_error_set_offset(err, PF_ERR_NOMEM, -1, "%s: out of memory for %llu images",
                                   images_name, (unsigned long long)n_images);
    const uint8_t *pixels = images + 16;
    size_t count = (size_t)n_images * (size_t)features;
    for (size_t i = 0; i < count; i++)
        out->x[i] = (float)pixels[i] * (1.0f / 255.0f);
    int max_label = 0;
    for (size_t i = 0; i < (size_t)n_images; i++) {
        int label = labels[8 + i];
        out->y[i] = (float)label;
        if (label > max_label)
            max_label = label;
    }
    out->num_classes = max_label + 1;
    return PF_OK;
}

pf_status pf_idx_parse(const uint8_t *images, size_t images_len, const uint8_t *labels,
                       size_t labels_len, pf_dataset *out, pf_error *err) {
    return parse_idx(images, images_len, "images", labels, labels_len, "labels", out, err);
}

pf_status pf_idx_load(const char *images_path, const char *labels_path, pf_dataset *out,
                      pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    uint8_t *images = NULL, *labels = NULL;
    size_t images_len = 0, labels_len = 0;
    pf_status status = read_file(images_path, &images, &images_len, err);
    if (status == PF_OK)
        status = read_file(labels_path, &labels, &labels_len, err);
    if (status == PF_OK)
        status =
            parse_idx(images, images_len, images_path, labels, labels_len, labels_path, out, err);
    pf_free(images);
    pf_free(labels);
    return status;
}

/* --- CSV ---------------------------------------------------------------------------------- */

typedef enum {
    FIELD_OK,
    FIELD_EMPTY,
    FIELD_NOT_NUMBER,
    FIELD_NOT_FINITE, /* nan, inf */
    FIELD_RANGE       /* beyond double (1e400) or, for floats, beyond float32 */
} field_result;

static bool is_blank(char c) {
    return c == ' ' || c == '\t';
}

/* Parses text[0..len), blanks around it allowed, as one number that fits a float. */
static field_result parse_field(const char *text, size_t len, double *value) {
    while (len > 0 && is_blank(text[0])) {
        text++;
        len--;
    }
    while (len > 0 && is_blank(text[len - 1]))
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

/* True when every comma-separated field of the line reads as a number, usable or not. */
static bool line_is_numeric(const char *line, size_t len) {
    size_t start = 0;
    for (;;) {
        const char *comma = memchr(line + start, ',', len - start);
        size_t end = comma ? (size_t)(comma - line) : len;
        double v;
        field_result r = parse_field(line + start, end - start, &v);
        if (r == FIELD_EMPTY || r == FIELD_NOT_NUMBER)
            return false;
        if (!comma)
            return true;
        start = end + 1;
    }
}

typedef struct csv_rows {
    pf_dataset *ds; /* n rows filled so far */
    int64_t capacity;
} csv_rows;

static pf_status grow_rows(csv_rows *r) {
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

/* Why a label is refused, or NULL: a class index must be an integer in [0, CSV_MAX_LABEL). */
static const char *label_problem(double v, bool classification) {
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

/* The next line of text[0 .. len) from *pos: where it starts and its length without the
 * '\n'; moves *pos past it. False at the end of the text. */
static bool next_line(const char *text, size_t len, size_t *pos, size_t *start, size_t *n) {
    if (*pos >= len)
        return false;
    const char *nl = memchr(text + *pos, '\n', len - *pos);
    *start = *pos;
    *n = nl ? (size_t)(nl - (text + *pos)) : len - *pos;
    *pos += *n + 1;
    return true;
}

/* The next line of a CSV text that is not blank, its '\r' taken off; counts every line in
 * *line_no. False at the end of the text. */
static bool next_csv_line(const char *text, size_t len, size_t *pos, long long *line_no,
                          size_t *start, size_t *n) {
    while (next_line(text, len, pos, start, n)) {
        ++*line_no;
        const char *line = text + *start;
        if (*n > 0 && line[*n - 1] == '\r')
            --*n;
        for (size_t i = 0; i < *n; i++)
            if (!is_blank(line[i]))
                return true;
    }
    return false;
}

/* A label field line[0 .. n) at byte `offset` read into *label, or the error naming it. */
static pf_status parse_label(const char *field, size_t n, long long offset, long long line_no,
                             const char *what, bool classification, double *label, pf_error *err) {
    field_result r = parse_field(field, n, label);
    const char *bad = r == FIELD_OK ? label_problem(*label, classification) : "is not a number";
    if (r == FIELD_NOT_FINITE || r == FIELD_RANGE)
        bad = r == FIELD_RANGE ? "is out of float32 range" : "is not a finite number";
    if (!bad)
        return PF_OK;
    return pf_error_set_offset(err, PF_ERR_FORMAT, offset, "%s: line %lld: %s \"%.*s\" %s", what,
                               line_no, classification ? "label" : "target", (int)(n > 40 ? 40 : n),
                               field, bad);
}

/* Storage for one more row (row rows->ds->n), or an error naming the line. */
static pf_status room_for_row(csv_rows *rows, size_t line_start, long long line_no,
                              const char *what, pf_error *err) {
    if (rows->ds->n < rows->capacity || grow_rows(rows) == PF_OK)
        return PF_OK;
    return pf_error_set_offset(err, PF_ERR_NOMEM, (long long)line_start,
                               "%s: line %lld: out of memory for %lld rows", what, line_no,
                               (long long)rows->ds->n + 1);
}

/* After the last line of a text of len bytes: no rows is an error; else the class count and
 * the buffers cut to the rows read. */
static pf_status finish_rows(pf_dataset *out, size_t len, const char *what, bool classification,
                             double max_label, pf_error *err) {
    if (out->n == 0)
        return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)len, "%s: %s", what,
                                   len == 0 ? "empty file" : "no data rows");
    out->num_classes = classification ? (int)max_label + 1 : 0;
    shrink_rows(out);
    return PF_OK;
}

/* Parses a data line already known to hold features + 1 fields into row ds->n, whose
 * storage exists. */
static pf_status parse_row(const char *text, size_t line_start, size_t line_len, long long line_no,
                           const char *what, bool classification, pf_dataset *ds, pf_error *err) {
    const char *line = text + line_start;
    float *row = ds->x + (size_t)ds->n * (size_t)ds->features;
    size_t start = 0;
    for (int f = 0; f <= ds->features; f++) {
        const char *comma = memchr(line + start, ',', line_len - start);
        size_t end = comma ? (size_t)(comma - line) : line_len;
        long long offset = (long long)(line_start + start);
        int shown = (int)(end - start > 40 ? 40 : end - start);
        double v = 0;
        switch (parse_field(line + start, end - start, &v)) {
        case FIELD_OK:
            break;
        case FIELD_EMPTY:
            return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                       "%s: line %lld, field %d: empty field", what, line_no,
                                       f + 1);
        case FIELD_NOT_NUMBER:
            return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                       "%s: line %lld, field %d: not a number: \"%.*s\"", what,
                                       line_no, f + 1, shown, line + start);
        case FIELD_NOT_FINITE:
            return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                       "%s: line %lld, field %d: not a finite number: \"%.*s\"",
                                       what, line_no, f + 1, shown, line + start);
        case FIELD_RANGE:
            return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                       "%s: line %lld, field %d: %.*s is out of float32 range",
                                       what, line_no, f + 1, shown, line + start);
        }
        if (f == 0) {
            const char *bad = label_problem(v, classification);
            if (bad)
                return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                           "%s: line %lld: label %.*s %s", what, line_no, shown,
                                           line + start, bad);
            ds->y[ds->n] = (float)v;
        } else {
            row[f - 1] = (float)v;
        }
        start = end + 1;
    }
    return PF_OK;
}

static pf_status parse_csv(const char *text, size_t len, const char *what, int features,
                           bool classification, pf_dataset *out, pf_error *err) {
    csv_rows rows = {out, 0};
    out->features = features;
    const char *target = classification ? "label" : "target";
    bool first_line = true;
    double max_label = 0;
    size_t pos = 0, line_start, line_len;
    long long line_no = 0;
    while (next_csv_line(text, len, &pos, &line_no, &line_start, &line_len)) {
        const char *line = text + line_start;
        if (first_line) {
            first_line = false;
            if (!line_is_numeric(line, line_len))
                continue; /* a header */
        }
        size_t fields = 1;
        for (size_t i = 0; i < line_len; i++)
            fields += line[i] == ',';
        if (fields != (size_t)features + 1)
            return pf_error_set_offset(
                err, PF_ERR_FORMAT, (long long)line_start,
                "%s: line %lld: expected %d fields (%s + %d features), got %zu", what, line_no,
                features + 1, target, features, fields);
        pf_status status = room_for_row(&rows, line_start, line_no, what, err);
        if (status == PF_OK)
            status = parse_row(text, line_start, line_len, line_no, what, classification, out, err);
        if (status != PF_OK)
            return status;
        if (out->y[out->n] > max_label)
            max_label = out->y[out->n];
        out->n++;
    }
    return finish_rows(out, len, what, classification, max_label, err);
}

pf_status pf_csv_parse(const char *text, size_t len, const char *what, int features,
                       bool classification, pf_dataset *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    if (!what)
        what = "csv";
    if (features < 1 || features > PF_MAX_UNITS)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1, "%s: feature count %d outside [1, %d]",
                                   what, features, PF_MAX_UNITS);
    pf_status status = parse_csv(text, len, what, features, classification, out, err);
    if (status != PF_OK)
        pf_dataset_deinit(out);
    return status;
}

pf_status pf_csv_load(const char *path, int features, bool classification, pf_dataset *out,
                      pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    uint8_t *text = NULL;
    size_t len = 0;
    pf_status status = read_file(path, &text, &len, err);
    if (status == PF_OK)
        status = pf_csv_parse((const char *)text, len, path, features, classification, out, err);
    pf_free(text);
    return status;
}

/* --- LIBSVM ------------------------------------------------------------------------------- */

/* Where the pairs of a LIBSVM line go: dense rows of `features` floats (model NULL), or the
 * id and weight slots of a model with embeddings (model.h), whose features own consecutive
 * id ranges: feature f the `vocab` ids after those of features 0 .. f-1. */
typedef struct libsvm_sink {
    const pf_model_spec *model;
    int features; /* ids in all: model.inputs, or the sum of the vocabularies */
    int base;
    float *row;
    long long prev;  /* the line's previous id, -1 before the first */
    int f;           /* the feature the previous id belonged to */
    long long first; /* its first id (base excluded) */
    int slot;        /* x column of its first id slot */
    int count;       /* its ids on this line so far */
} libsvm_sink;

static void sink_line(libsvm_sink *k, float *row) {
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

/* Stores feature id (base excluded) with value v; refuses a feature's max_ids + 1st id. */
static pf_status sink_put(libsvm_sink *k, long long id, float v, long long offset,
                          long long line_no, const char *what, pf_error *err) {
    if (!k->model) {
        k->row[id] = v;
        return PF_OK;
    }
    const pf_embedding_spec *e = &k->model->embeddings[k->f];
    while (id >= k->first + e->vocab) {
        k->first += e->vocab;
        k->slot += 2 * e->max_ids;
        k->count = 0;
        e = &k->model->embeddings[++k->f];
    }
    if (k->count == e->max_ids)
        return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                   "%s: line %lld: more than max_ids %d ids for embedding '%s'",
                                   what, line_no, e->max_ids, e->name);
    k->row[k->slot + k->count] = (float)(id - k->first);
    k->row[k->slot + e->max_ids + k->count] = v;
    k->count++;
    return PF_OK;
}

/* Parses a LIBSVM token "id:value" at line[0 .. n) into the sink. */
static pf_status parse_pair(const char *tok, size_t n, long long offset, long long line_no,
                            const char *what, libsvm_sink *k, pf_error *err) {
    int base = k->base, features = k->features;
    int shown = (int)(n > 40 ? 40 : n);
    const char *colon = memchr(tok, ':', n);
    size_t digits = colon ? (size_t)(colon - tok) : 0;
    int ok = colon && digits > 0 && digits <= 10;
    for (size_t i = 0; ok && i < digits; i++)
        ok = tok[i] >= '0' && tok[i] <= '9';
    if (!ok)
        return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                   "%s: line %lld: \"%.*s\" is not id:value (a non-negative "
                                   "integer id of at most 10 digits, a colon, a number)",
                                   what, line_no, shown, tok);
    long long id = 0;
    for (size_t i = 0; i < digits; i++)
        id = id * 10 + (tok[i] - '0');
    if (id < base || id - base >= features)
        return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                   "%s: line %lld: feature id %lld outside %d .. %d (%s %d, "
                                   "data.index_base %d)",
                                   what, line_no, id, base, features - 1 + base,
                                   k->model ? "ids of the model's embeddings" : "model.inputs",
                                   features, base);
    if (id <= k->prev)
        return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                   "%s: line %lld: feature ids must increase along a line (%lld "
                                   "after %lld)",
                                   what, line_no, id, k->prev);
    double v = 0;
    field_result r = parse_field(colon + 1, n - digits - 1, &v);
    if (r != FIELD_OK)
        return pf_error_set_offset(err, PF_ERR_FORMAT, offset + (long long)digits + 1,
                                   "%s: line %lld: feature %lld: %s: \"%.*s\"", what, line_no, id,
                                   r == FIELD_EMPTY        ? "no value"
                                   : r == FIELD_NOT_FINITE ? "not a finite number"
                                   : r == FIELD_RANGE      ? "out of float32 range"
                                                           : "not a number",
                                   shown, tok);
    k->prev = id;
    return sink_put(k, id - base, (float)v, offset, line_no, what, err);
}

/* A sink for the sparse examples of a model with embeddings, or an error for a model that
 * cannot have them. */
static pf_status sink_for_model(libsvm_sink *k, const pf_model_spec *model, int index_base,
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
    *k = (libsvm_sink){.model = model, .features = (int)ids, .base = index_base};
    return PF_OK;
}

static pf_status parse_libsvm(const char *text, size_t len, const char *what, libsvm_sink *k,
                              bool classification, pf_dataset *out, pf_error *err) {
    csv_rows rows = {out, 0};
    int width = k->model ? pf_model_input_width(k->model) : k->features;
    out->features = width;
    double max_label = 0;
    size_t pos = 0, line_start, line_len;
    long long line_no = 0;
    while (next_line(text, len, &pos, &line_start, &line_len)) {
        line_no++;
        const char *line = text + line_start;
        const char *hash = memchr(line, '#', line_len); /* a comment runs to the line's end */
        if (hash)
            line_len = (size_t)(hash - line);
        size_t i = 0, end;
        while (i < line_len && (is_blank(line[i]) || line[i] == '\r'))
            i++;
        if (i == line_len)
            continue;
        for (end = i; end < line_len && !is_blank(line[end]) && line[end] != '\r'; end++) {
        }
        double label = 0;
        pf_status room = parse_label(line + i, end - i, (long long)(line_start + i), line_no, what,
                                     classification, &label, err);
        if (room == PF_OK)
            room = room_for_row(&rows, line_start, line_no, what, err);
        if (room != PF_OK)
            return room;
        sink_line(k, out->x + (size_t)out->n * (size_t)width);
        for (i = end;;) {
            while (i < line_len && (is_blank(line[i]) || line[i] == '\r'))
                i++;
            if (i == line_len)
                break;
            for (end = i; end < line_len && !is_blank(line[end]) && line[end] != '\r'; end++) {
            }
            pf_status st =
                parse_pair(line + i, end - i, (long long)(line_start + i), line_no, what, k, err);
            if (st != PF_OK)
                return st;
            i = end;
        }
        out->y[out->n] = (float)label;
        if (label > max_label)
            max_label = label;
        out->n++;
    }
    return finish_rows(out, len, what, classification, max_label, err);
}

pf_status pf_libsvm_parse(const char *text, size_t len, const char *what, int features,
                          int index_base, bool classification, pf_dataset *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    if (!what)
        what = "libsvm";
    if (features < 1 || features > PF_MAX_UNITS || index_base < 0 || index_base > 1)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1,
                                   "%s: feature count %d outside [1, %d] or index base %d not 0 "
                                   "or 1",
                                   what, features, PF_MAX_UNITS, index_base);
    libsvm_sink sink = {.features = features, .base = index_base};
    pf_status status = parse_libsvm(text, len, what, &sink, classification, out, err);
    if (status != PF_OK)
        pf_dataset_deinit(out);
    return status;
}

pf_status pf_libsvm_parse_ids(const char *text, size_t len, const char *what,
                              const pf_model_spec *model, int index_base, bool classification,
                              pf_dataset *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    if (!what)
        what = "libsvm";
    libsvm_sink sink = {0};
    pf_status status = sink_for_model(&sink, model, index_base, what, err);
    if (status == PF_OK)
        status = parse_libsvm(text, len, what, &sink, classification, out, err);
    if (status != PF_OK)
        pf_dataset_deinit(out);
    return status;
}

pf_status pf_libsvm_load(const char *path, int features, int index_base, bool classification,
                         pf_dataset *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    uint8_t *text = NULL;
    size_t len = 0;
    pf_status status = read_file(path, &text, &len, err);
    if (status == PF_OK)
        status = pf_libsvm_parse((const char *)text, len, path, features, index_base,
                                 classification, out, err);
    pf_free(text);
    return status;
}

pf_status pf_libsvm_load_ids(const char *path, const pf_model_spec *model, int index_base,
                             bool classification, pf_dataset *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    uint8_t *text = NULL;
    size_t len = 0;
    pf_status status = read_file(path, &text, &len, err);
    if (status == PF_OK)
        status = pf_libsvm_parse_ids((const char *)text, len, path, model, index_base,
                                     classification, out, err);
    pf_free(text);
    return status;
}

/* --- CSV of categorical values ----------------------------------------------------------- */

/* FNV-1a, 64 bits: a categorical value's bytes to its hash bucket. */
static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

/* The values of one cell, cell[0 .. n) at byte `offset` of the text, for embedding f (whose
 * ids start at `first` in the sink): separated by '|', each an integer id or, with hash, any
 * string hashed into the table; blanks around a value are not part of it. */
static pf_status parse_cell(const char *cell, size_t n, long long offset, long long line_no,
                            int field, int f, int64_t first, const char *what, libsvm_sink *k,
                            pf_error *err) {
    const pf_embedding_spec *e = &k->model->embeddings[f];
    size_t i = 0;
    while (i < n && is_blank(cell[i]))
        i++;
    if (i == n)
        return PF_OK; /* no ids */
    for (size_t end;; i = end + 1) {
        const char *bar = memchr(cell + i, '|', n - i);
        end = bar ? (size_t)(bar - cell) : n;
        size_t a = i, b = end;
        while (a < b && is_blank(cell[a]))
            a++;
        while (b > a && is_blank(cell[b - 1]))
            b--;
        int shown = (int)(b - a > 40 ? 40 : b - a);
        if (a == b)
            return pf_error_set_offset(err, PF_ERR_FORMAT, offset + (long long)i,
                                       "%s: line %lld, field %d: an empty value", what, line_no,
                                       field);
        int64_t id = 0;
        if (e->hash) {
            id = (int64_t)(fnv1a(cell + a, b - a) % (uint64_t)e->vocab);
        } else {
            bool ok = b - a <= 10;
            for (size_t j = a; ok && j < b; j++) {
                ok = cell[j] >= '0' && cell[j] <= '9';
                id = id * 10 + (cell[j] - '0');
            }
            if (!ok || id >= e->vocab)
                return pf_error_set_offset(
                    err, PF_ERR_FORMAT, offset + (long long)a,
                    "%s: line %lld, field %d: \"%.*s\" is not an id of embedding '%s' (an "
                    "integer 0 .. %lld; set its hash for other values)",
                    what, line_no, field, shown, cell + a, e->name, (long long)e->vocab - 1);
        }
        pf_status st = sink_put(k, first + id, 1.0f, offset + (long long)a, line_no, what, err);
        if (st != PF_OK || !bar)
            return st;
    }
}

static pf_status parse_csv_ids(const char *text, size_t len, const char *what, libsvm_sink *k,
                               bool classification, pf_dataset *out, pf_error *err) {
    csv_rows rows = {out, 0};
    const pf_model_spec *m = k->model;
    int width = pf_model_input_width(m);
    out->features = width;
    bool first_line = true;
    double max_label = 0;
    size_t pos = 0, line_start, line_len;
    long long line_no = 0;
    while (next_csv_line(text, len, &pos, &line_no, &line_start, &line_len)) {
        const char *line = text + line_start;
        const char *comma = memchr(line, ',', line_len);
        size_t end = comma ? (size_t)(comma - line) : line_len;
        double label = 0;
        if (first_line) {
            first_line = false;
            if (parse_field(line, end, &label) == FIELD_NOT_NUMBER)
                continue; /* a header: its first field is a name */
        }
        pf_status st = parse_label(line, end, (long long)line_start, line_no, what, classification,
                                   &label, err);
        if (st != PF_OK)
            return st;
        size_t fields = 1;
        for (size_t j = 0; j < line_len; j++)
            fields += line[j] == ',';
        if (fields != (size_t)m->n_embeddings + 1)
            return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)line_start,
                                       "%s: line %lld: expected %d fields (label + one per "
                                       "embedding), got %zu",
                                       what, line_no, m->n_embeddings + 1, fields);
        if ((st = room_for_row(&rows, line_start, line_no, what, err)) != PF_OK)
            return st;
        sink_line(k, out->x + (size_t)out->n * (size_t)width);
        int64_t first = 0;
        for (int f = 0; f < m->n_embeddings; f++) {
            size_t start = end + 1;
            comma = memchr(line + start, ',', line_len - start);
            end = comma ? (size_t)(comma - line) : line_len;
            st = parse_cell(line + start, end - start, (long long)(line_start + start), line_no,
                            f + 2, f, first, what, k, err);
            if (st != PF_OK)
                return st;
            first += m->embeddings[f].vocab;
        }
        out->y[out->n] = (float)label;
        if (label > max_label)
            max_label = label;
        out->n++;
    }
    return finish_rows(out, len, what, classification, max_label, err);
}

pf_status pf_csv_parse_ids(const char *text, size_t len, const char *what,
                           const pf_model_spec *model, bool classification, pf_dataset *out,
                           pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    if (!what)
        what = "csv";
    libsvm_sink sink = {0};
    pf_status status = sink_for_model(&sink, model, 0, what, err);
    if (status == PF_OK)
        status = parse_csv_ids(text, len, what, &sink, classification, out, err);
    if (status != PF_OK)
        pf_dataset_deinit(out);
    return status;
}

pf_status pf_csv_load_ids(const char *path, const pf_model_spec *model, bool classification,
                          pf_dataset *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    uint8_t *text = NULL;
    size_t len = 0;
    pf_status status = read_file(path, &text, &len, err);
    if (status == PF_OK)
        status = pf_csv_parse_ids((const char *)text, len, path, model, classification, out, err);
    pf_free(text);
    return status;
}

/* --- synthetic_linear --------------------------------------------------------------------- */

pf_status pf_synthetic_linear(double w, double b, double noise, int64_t n, uint64_t seed,
                              uint64_t stream, pf_dataset *out) {
    memset(out, 0, sizeof *out);
    if (n < 1 || !isfinite(w) || !isfinite(b) || !isfinite(noise) || noise < 0)
        return PF_ERR_INVALID;
    if (pf_dataset_alloc(out, n, 1) != PF_OK)
        return PF_ERR_NOMEM;
    pf_rng rng;
    pf_rng_init(&rng, seed, stream);
    for (int64_t i = 0; i < n; i++) {
        /* Always draw the normal, so x does not depend on whether noise is zero. */
        double x = pf_rng_uniform(&rng);
        double e = pf_rng_normal(&rng);
        double y = w * x + b + noise * e;
        if (!(fabs(y) <= FLT_MAX)) {
            pf_dataset_deinit(out);
            return PF_ERR_RANGE;
        }
        out->x[i] = (float)x;
        out->y[i] = (float)y;
    }
    out->num_classes = 0;
    return PF_OK;
}

/* --- from a job spec ---------------------------------------------------------------------- */

static pf_status load_from_spec(const pf_job_spec *spec, bool test, pf_dataset *out,
                                pf_error *err) {
    const pf_data_spec *d = &spec->data;
    int n_files = test ? d->n_test : d->n_train;
    char *const *files = test ? d->test : d->train;
    const char *pointer = test ? "/data/test" : "/data/train";
    bool classification = spec->model.type != PF_MODEL_LINEAR;
    pf_status status;

    if (d->format == PF_DATA_SYNTHETIC_LINEAR) {
        int64_t n = test ? (d->n / 5 > 1 ? d->n / 5 : 1) : d->n;
        status =
            pf_synthetic_linear(d->w, d->b, d->noise, n, spec->training.seed, test ? 2 : 1, out);
        if (status == PF_ERR_NOMEM)
            return pf_error_set_offset(err, status, -1, "out of memory for %lld synthetic examples",
                                       (long long)n);
        if (status != PF_OK) {
            pf_error_set_offset(err, status, -1,
                                "synthetic_linear: %s (n %lld, w %g, b %g, noise %g)",
                                pf_strerror(status), (long long)n, d->w, d->b, d->noise);
            set_pointer(err, "/data");
        }
        return status;
    }
    if (d->format == PF_DATA_SYNTHETIC_CTR) {
        int64_t n = test ? (d->n / 5 > 1 ? d->n / 5 : 1) : d->n;
        status = pf_synthetic_ctr(spec, n, test ? 2 : 1, out);
        if (status != PF_OK) {
            pf_error_set_offset(err, status, -1, "synthetic_ctr: %s (n %lld)", pf_strerror(status),
                                (long long)n);
            set_pointer(err, "/data");
        }
        return status;
    }
    if (d->format != PF_DATA_IDX && d->format != PF_DATA_CSV && d->format != PF_DATA_LIBSVM) {
        pf_error_set_offset(err, PF_ERR_UNSUPPORTED, -1, "unknown data format %d", (int)d->format);
        set_pointer(err, "/data/format");
        return PF_ERR_UNSUPPORTED;
    }

    int wanted = d->format == PF_DATA_IDX ? 2 : 1;
    if (test && n_files == 0)
        return pf_error_set_offset(err, PF_ERR_NOT_FOUND, -1,
                                   "the job names no test set (data.test is empty)");
    if (n_files != wanted) {
        pf_error_set_offset(err, PF_ERR_SPEC, -1, "data.%s needs %d file%s for %s, got %d",
                            test ? "test" : "train", wanted, wanted > 1 ? "s" : "",
                            d->format == PF_DATA_IDX   ? "idx (images, labels)"
                            : d->format == PF_DATA_CSV ? "csv"
                                                       : "libsvm",
                            n_files);
        set_pointer(err, pointer);
        return PF_ERR_SPEC;
    }
    if (d->format == PF_DATA_IDX)
        status = pf_idx_load(files[0], files[1], out, err);
    else if (d->format == PF_DATA_CSV && spec->model.n_embeddings > 0)
        status = pf_csv_load_ids(files[0], &spec->model, classification, out, err);
    else if (d->format == PF_DATA_CSV)
        status = pf_csv_load(files[0], spec->model.inputs, classification, out, err);
    else if (spec->model.n_embeddings > 0)
        status =
            pf_libsvm_load_ids(files[0], &spec->model, d->index_base, classification, out, err);
    else
        status =
            pf_libsvm_load(files[0], spec->model.inputs, d->index_base, classification, out, err);
    if (status != PF_OK)
        set_pointer(err, pointer);
    return status;
}

pf_status pf_dataset_load(const pf_job_spec *spec, bool test, pf_dataset *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    pf_status status = load_from_spec(spec, test, out, err);
    if (status != PF_OK)
        return status;

    const pf_model_spec *m = &spec->model;
    if (m->n_embeddings > 0 && out->features != pf_model_input_width(m)) {
        status = pf_error_set_offset(err, PF_ERR_SPEC, -1,
                                     "data has %d id and weight slots but the model's embeddings "
                                     "read %d",
                                     out->features, pf_model_input_width(m));
        set_pointer(err, "/model/embeddings");
    } else if (m->n_embeddings == 0 && out->features != m->inputs) {
        status =
            pf_error_set_offset(err, PF_ERR_SPEC, -1, "data has %d features but model.inputs is %d",
                                out->features, m->inputs);
        set_pointer(err, "/model/inputs");
    } else if (m->type != PF_MODEL_LINEAR && out->num_classes == 0) {
        /* Regression targets would be cast to class indices: refuse rather than read out of
         * bounds in the loss. */
        status =
            pf_error_set_offset(err, PF_ERR_SPEC, -1,
                                "data has regression targets but model.type %s needs class labels",
                                m->type == PF_MODEL_MLP ? "mlp" : "softmax");
        set_pointer(err, "/model/type");
    } else if (m->type != PF_MODEL_LINEAR && out->num_classes > m->outputs) {
        status = pf_error_set_offset(err, PF_ERR_SPEC, -1,
                                     "data has %d classes (labels 0..%d) but model.outputs is %d",
                                     out->num_classes, out->num_classes - 1, m->outputs);
        set_pointer(err, "/model/outputs");
    }
    if (status != PF_OK)
        pf_dataset_deinit(out);
    return status;
}

/* --- sampler ------------------------------------------------------------------------------ */

struct pf_sampler {
    int64_t n;
    uint64_t seed;
    bool shuffle;
    int64_t epoch; /* epoch whose permutation perm holds, -1 for none yet */
    int64_t *perm; /* [n] when shuffling, else NULL */
};

pf_sampler *pf_sampler_create(int64_t n, uint64_t seed, bool shuffle) {
    if (n < 1)
        return NULL;
    pf_sampler *s = pf_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n = n;
    s->seed = seed;
    s->shuffle = shuffle;
    s->epoch = -1;
    if (shuffle) {
        s->perm = pf_mallocarray((size_t)n, sizeof *s->perm);
        if (!s->perm) {
            pf_free(s);
            return NULL;
        }
    }
    return s;
}

void pf_sampler_destroy(pf_sampler *s) {
    if (!s)
        return;
    pf_free(s->perm);
    pf_free(s);
}

/* Fisher-Yates from the top: slot i takes a uniform pick among slots 0..i. */
static void shuffle_epoch(pf_sampler *s, int64_t epoch) {
    pf_rng rng;
    pf_rng_init(&rng, s->seed, SAMPLER_STREAM_BASE + (uint64_t)epoch);
    for (int64_t i = 0; i < s->n; i++)
        s->perm[i] = i;
    for (int64_t i = s->n - 1; i > 0; i--) {
        int64_t j = (int64_t)pf_rng_below(&rng, (uint64_t)i + 1);
        int64_t t = s->perm[i];
        s->perm[i] = s->perm[j];
        s->perm[j] = t;
    }
    s->epoch = epoch;
}

int64_t pf_sampler_index(pf_sampler *s, int64_t position) {
    assert(position >= 0);
    if (!s->shuffle)
        return position % s->n;
    int64_t epoch = position / s->n;
    if (epoch != s->epoch)
        shuffle_epoch(s, epoch);
    return s->perm[position % s->n];
}

/* Class index of a target; -1 for values no int32 holds (regression targets). */
static int32_t label_of(float y) {
    if (!(y >= (float)INT32_MIN && y < 2147483648.0f))
        return -1;
    return (int32_t)y;
}

void pf_batch_gather(const pf_dataset *ds, pf_sampler *s, int64_t start, int count, float *x,
                     float *y, int32_t *labels) {
    assert(s->n == ds->n);
    size_t row = (size_t)ds->features;
    for (int k = 0; k < count; k++) {
        int64_t i = pf_sampler_index(s, start + k);
        memcpy(x + (size_t)k * row, ds->x + (size_t)i * row, row * sizeof(float));
        y[k] = ds->y[i];
        if (labels)
            labels[k] = label_of(ds->y[i]);
    }
}

void pf_batch_copy(const pf_dataset *ds, int64_t start, int count, float *x, float *y,
                   int32_t *labels) {
    size_t in = (size_t)ds->features;
    memcpy(x, ds->x + (size_t)start * in, (size_t)count * in * sizeof(float));
    memcpy(y, ds->y + start, (size_t)count * sizeof(float));
    for (int i = 0; labels && i < count; i++)
        labels[i] = (int32_t)ds->y[start + i];
}
