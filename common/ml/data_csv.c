/* data_csv.c - the CSV readers (see data.h): dense rows of numbers (pf_csv_*), and rows of
 * categorical values for a model with embeddings (pf_csv_*_ids), ids or hashed strings. A line
 * is parsed by data_csv_line, which the streamed reader (data_text.c) calls too.
 */
#include <stdint.h>
#include <string.h>

#include "data_internal.h"
#include "psflow/mem.h"

/* True when every comma-separated field of the line reads as a number, usable or not. */
static bool line_is_numeric(const char *line, size_t len) {
    size_t start = 0;
    for (;;) {
        const char *comma = memchr(line + start, ',', len - start);
        size_t end = comma ? (size_t)(comma - line) : len;
        double v;
        data_field r = data_parse_field(line + start, end - start, &v);
        if (r == FIELD_EMPTY || r == FIELD_NOT_NUMBER)
            return false;
        if (!comma)
            return true;
        start = end + 1;
    }
}

size_t data_csv_trim(const char *line, size_t n) {
    if (n > 0 && line[n - 1] == '\r')
        n--;
    for (size_t i = 0; i < n; i++)
        if (!data_is_blank(line[i]))
            return n;
    return 0;
}

bool data_csv_is_header(const char *line, size_t n, bool ids) {
    if (!ids)
        return !line_is_numeric(line, n);
    const char *comma = memchr(line, ',', n);
    double label;
    return data_parse_field(line, comma ? (size_t)(comma - line) : n, &label) == FIELD_NOT_NUMBER;
}

/* The next line of a CSV text that is not blank, its '\r' taken off; counts every line in
 * *line_no. False at the end of the text. */
static bool next_csv_line(const char *text, size_t len, size_t *pos, long long *line_no,
                          size_t *start, size_t *n) {
    while (data_next_line(text, len, pos, start, n)) {
        ++*line_no;
        if ((*n = data_csv_trim(text + *start, *n)) > 0)
            return true;
    }
    return false;
}

/* The fields of a line: its commas + 1. */
static size_t count_fields(const char *line, size_t n) {
    size_t fields = 1;
    for (size_t i = 0; i < n; i++)
        fields += line[i] == ',';
    return fields;
}

/* A line of numbers known to hold features + 1 fields: the label, then the row. */
static pf_status parse_numbers(const char *line, size_t line_len, const data_at *at, int features,
                               bool classification, float *row, double *label, pf_error *err) {
    char where[DATA_AT_TEXT];
    size_t start = 0;
    for (int f = 0; f <= features; f++) {
        const char *comma = memchr(line + start, ',', line_len - start);
        size_t end = comma ? (size_t)(comma - line) : line_len;
        long long offset = at->start + (long long)start;
        int shown = (int)(end - start > 40 ? 40 : end - start);
        double v = 0;
        switch (data_parse_field(line + start, end - start, &v)) {
        case FIELD_OK:
            break;
        case FIELD_EMPTY:
            return pf_error_set_offset(err, PF_ERR_FORMAT, offset, "%s, field %d: empty field",
                                       data_at_text(at, where, sizeof where), f + 1);
        case FIELD_NOT_NUMBER:
            return pf_error_set_offset(
                err, PF_ERR_FORMAT, offset, "%s, field %d: not a number: \"%.*s\"",
                data_at_text(at, where, sizeof where), f + 1, shown, line + start);
        case FIELD_NOT_FINITE:
            return pf_error_set_offset(
                err, PF_ERR_FORMAT, offset, "%s, field %d: not a finite number: \"%.*s\"",
                data_at_text(at, where, sizeof where), f + 1, shown, line + start);
        case FIELD_RANGE:
            return pf_error_set_offset(
                err, PF_ERR_FORMAT, offset, "%s, field %d: %.*s is out of float32 range",
                data_at_text(at, where, sizeof where), f + 1, shown, line + start);
        }
        if (f == 0) {
            const char *bad = data_label_problem(v, classification);
            if (bad)
                return pf_error_set_offset(err, PF_ERR_FORMAT, offset, "%s: label %.*s %s",
                                           data_at_text(at, where, sizeof where), shown,
                                           line + start, bad);
            *label = v;
        } else {
            row[f - 1] = (float)v;
        }
        start = end + 1;
    }
    return PF_OK;
}

static pf_status parse_cells(const char *line, size_t line_len, const data_at *at, data_sink *k,
                             bool classification, float *row, double *label, pf_error *err);

pf_status data_csv_line(const char *line, size_t n, const data_at *at, int features, data_sink *k,
                        bool classification, float *row, double *label, pf_error *err) {
    if (k)
        return parse_cells(line, n, at, k, classification, row, label, err);
    size_t fields = count_fields(line, n);
    if (fields != (size_t)features + 1) {
        char where[DATA_AT_TEXT];
        return pf_error_set_offset(err, PF_ERR_FORMAT, at->start,
                                   "%s: expected %d fields (%s + %d features), got %zu",
                                   data_at_text(at, where, sizeof where), features + 1,
                                   classification ? "label" : "target", features, fields);
    }
    return parse_numbers(line, n, at, features, classification, row, label, err);
}

/* The rows of a CSV text: a header skipped (the first line that is not blank, when
 * data_csv_is_header says so), every other line that is not blank an example. */
static pf_status parse_csv(const char *text, size_t len, const char *what, int features,
                           data_sink *k, bool classification, pf_dataset *out, pf_error *err) {
    data_rows rows = {out, 0};
    int width = k ? pf_model_input_width(k->model) : features;
    out->features = width;
    bool first_line = true;
    double max_label = 0;
    size_t pos = 0, line_start, line_len;
    long long line_no = 0;
    while (next_csv_line(text, len, &pos, &line_no, &line_start, &line_len)) {
        const char *line = text + line_start;
        if (first_line) {
            first_line = false;
            if (data_csv_is_header(line, line_len, k != NULL))
                continue;
        }
        data_at at = {what, line_no, (long long)line_start};
        double label = 0;
        pf_status status = data_room_for_row(&rows, &at, err);
        if (status == PF_OK)
            status = data_csv_line(line, line_len, &at, features, k, classification,
                                   out->x + (size_t)out->n * (size_t)width, &label, err);
        if (status != PF_OK)
            return status;
        out->y[out->n] = (float)label;
        if (label > max_label)
            max_label = label;
        out->n++;
    }
    return data_finish_rows(out, len, what, classification, max_label, err);
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
    pf_status status = parse_csv(text, len, what, features, NULL, classification, out, err);
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
    pf_status status = data_read_file(path, &text, &len, err);
    if (status == PF_OK)
        status = pf_csv_parse((const char *)text, len, path, features, classification, out, err);
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

/* One value v[0 .. n) of dynamic table f at byte `offset`: an integer id 0 .. 2^63 - 1 as it
 * is or, with hash, any string's FNV-1a hash (all 64 bits: no modulo). */
static pf_status dyn_value(const char *v, size_t n, long long offset, const data_at *at, int field,
                           int f, data_sink *k, pf_error *err) {
    const pf_embedding_spec *e = &k->model->embeddings[f];
    uint64_t id = 0;
    if (e->hash) {
        id = fnv1a(v, n);
    } else {
        bool ok = n <= 19;
        for (size_t j = 0; ok && j < n; j++) {
            ok = v[j] >= '0' && v[j] <= '9';
            id = id * 10 + (uint64_t)(v[j] - '0');
        }
        if (!ok || id > (uint64_t)INT64_MAX) {
            char where[DATA_AT_TEXT];
            return pf_error_set_offset(
                err, PF_ERR_FORMAT, offset,
                "%s, field %d: \"%.*s\" is not an id of dynamic table '%s' (an integer 0 .. "
                "%lld; set its hash for other values)",
                data_at_text(at, where, sizeof where), field, (int)(n > 40 ? 40 : n), v, e->name,
                (long long)INT64_MAX);
        }
    }
    return data_sink_put_dyn(k, f, id, 1.0f, offset, at, err);
}

/* The values of one cell, cell[0 .. n) at byte `offset` of the text, for embedding f (whose
 * ids start at `first` in the sink): separated by '|', each an integer id or, with hash, any
 * string hashed into the table; blanks around a value are not part of it. */
static pf_status parse_cell(const char *cell, size_t n, long long offset, const data_at *at,
                            int field, int f, int64_t first, data_sink *k, pf_error *err) {
    const pf_embedding_spec *e = &k->model->embeddings[f];
    char where[DATA_AT_TEXT];
    size_t i = 0;
    while (i < n && data_is_blank(cell[i]))
        i++;
    if (i == n)
        return PF_OK; /* no ids */
    for (size_t end;; i = end + 1) {
        const char *bar = memchr(cell + i, '|', n - i);
        end = bar ? (size_t)(bar - cell) : n;
        size_t a = i, b = end;
        while (a < b && data_is_blank(cell[a]))
            a++;
        while (b > a && data_is_blank(cell[b - 1]))
            b--;
        int shown = (int)(b - a > 40 ? 40 : b - a);
        if (a == b)
            return pf_error_set_offset(err, PF_ERR_FORMAT, offset + (long long)i,
                                       "%s, field %d: an empty value",
                                       data_at_text(at, where, sizeof where), field);
        if (e->kind == PF_TABLE_DYNAMIC) {
            pf_status st = dyn_value(cell + a, b - a, offset + (long long)a, at, field, f, k, err);
            if (st != PF_OK || !bar)
                return st;
            continue;
        }
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
                    "%s, field %d: \"%.*s\" is not an id of embedding '%s' (an integer 0 .. "
                    "%lld; set its hash for other values)",
                    data_at_text(at, where, sizeof where), field, shown, cell + a, e->name,
                    (long long)e->vocab - 1);
        }
        pf_status st = data_sink_put(k, first + id, 1.0f, offset + (long long)a, at, err);
        if (st != PF_OK || !bar)
            return st;
    }
}

/* A line of a label and one cell of ids per embedding of k's model. */
static pf_status parse_cells(const char *line, size_t line_len, const data_at *at, data_sink *k,
                             bool classification, float *row, double *label, pf_error *err) {
    const pf_model_spec *m = k->model;
    const char *comma = memchr(line, ',', line_len);
    size_t end = comma ? (size_t)(comma - line) : line_len;
    pf_status st = data_parse_label(line, end, at->start, at, classification, label, err);
    if (st != PF_OK)
        return st;
    size_t fields = count_fields(line, line_len);
    if (fields != (size_t)m->n_embeddings + 1) {
        char where[DATA_AT_TEXT];
        return pf_error_set_offset(err, PF_ERR_FORMAT, at->start,
                                   "%s: expected %d fields (label + one per embedding), got %zu",
                                   data_at_text(at, where, sizeof where), m->n_embeddings + 1,
                                   fields);
    }
    data_sink_line(k, row);
    int64_t first = 0;
    for (int f = 0; f < m->n_embeddings; f++) {
        size_t start = end + 1;
        comma = memchr(line + start, ',', line_len - start);
        end = comma ? (size_t)(comma - line) : line_len;
        st = parse_cell(line + start, end - start, at->start + (long long)start, at, f + 2, f,
                        first, k, err);
        if (st != PF_OK)
            return st;
        first += m->embeddings[f].vocab;
    }
    return PF_OK;
}

pf_status pf_csv_parse_ids(const char *text, size_t len, const char *what,
                           const pf_model_spec *model, bool classification, pf_dataset *out,
                           pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    if (!what)
        what = "csv";
    data_sink sink = {0};
    pf_status status = data_sink_for_model(&sink, model, 0, what, err);
    if (status == PF_OK)
        status = parse_csv(text, len, what, 0, &sink, classification, out, err);
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
    pf_status status = data_read_file(path, &text, &len, err);
    if (status == PF_OK)
        status = pf_csv_parse_ids((const char *)text, len, path, model, classification, out, err);
    pf_free(text);
    return status;
}
