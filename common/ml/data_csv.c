/* data_csv.c - the CSV readers (see data.h): dense rows of numbers (pf_csv_*), and rows of
 * categorical values for a model with embeddings (pf_csv_*_ids), ids or hashed strings.
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

/* The next line of a CSV text that is not blank, its '\r' taken off; counts every line in
 * *line_no. False at the end of the text. */
static bool next_csv_line(const char *text, size_t len, size_t *pos, long long *line_no,
                          size_t *start, size_t *n) {
    while (data_next_line(text, len, pos, start, n)) {
        ++*line_no;
        const char *line = text + *start;
        if (*n > 0 && line[*n - 1] == '\r')
            --*n;
        for (size_t i = 0; i < *n; i++)
            if (!data_is_blank(line[i]))
                return true;
    }
    return false;
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
        switch (data_parse_field(line + start, end - start, &v)) {
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
            const char *bad = data_label_problem(v, classification);
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
    data_rows rows = {out, 0};
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
        pf_status status = data_room_for_row(&rows, line_start, line_no, what, err);
        if (status == PF_OK)
            status = parse_row(text, line_start, line_len, line_no, what, classification, out, err);
        if (status != PF_OK)
            return status;
        if (out->y[out->n] > max_label)
            max_label = out->y[out->n];
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

/* The values of one cell, cell[0 .. n) at byte `offset` of the text, for embedding f (whose
 * ids start at `first` in the sink): separated by '|', each an integer id or, with hash, any
 * string hashed into the table; blanks around a value are not part of it. */
static pf_status parse_cell(const char *cell, size_t n, long long offset, long long line_no,
                            int field, int f, int64_t first, const char *what, data_sink *k,
                            pf_error *err) {
    const pf_embedding_spec *e = &k->model->embeddings[f];
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
        pf_status st =
            data_sink_put(k, first + id, 1.0f, offset + (long long)a, line_no, what, err);
        if (st != PF_OK || !bar)
            return st;
    }
}

static pf_status parse_csv_ids(const char *text, size_t len, const char *what, data_sink *k,
                               bool classification, pf_dataset *out, pf_error *err) {
    data_rows rows = {out, 0};
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
            if (data_parse_field(line, end, &label) == FIELD_NOT_NUMBER)
                continue; /* a header: its first field is a name */
        }
        pf_status st = data_parse_label(line, end, (long long)line_start, line_no, what,
                                        classification, &label, err);
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
        if ((st = data_room_for_row(&rows, line_start, line_no, what, err)) != PF_OK)
            return st;
        data_sink_line(k, out->x + (size_t)out->n * (size_t)width);
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
    return data_finish_rows(out, len, what, classification, max_label, err);
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
    pf_status status = data_read_file(path, &text, &len, err);
    if (status == PF_OK)
        status = pf_csv_parse_ids((const char *)text, len, path, model, classification, out, err);
    pf_free(text);
    return status;
}
