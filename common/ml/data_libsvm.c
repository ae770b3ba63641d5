/* data_libsvm.c - the LIBSVM (svmlight) reader (see data.h): `label id:value ...` lines into
 * dense rows (pf_libsvm_*) or into the id and weight slots of a model with embeddings
 * (pf_libsvm_*_ids). A line is parsed by data_libsvm_line, which the streamed reader
 * (data_text.c) calls too.
 */
#include <stdint.h>
#include <string.h>

#include "data_internal.h"
#include "psflow/mem.h"

/* Parses a LIBSVM token "id:value" at line[0 .. n) into the sink. */
static pf_status parse_pair(const char *tok, size_t n, long long offset, const data_at *at,
                            data_sink *k, pf_error *err) {
    int base = k->base, features = k->features;
    char where[DATA_AT_TEXT];
    int shown = (int)(n > 40 ? 40 : n);
    const char *colon = memchr(tok, ':', n);
    size_t digits = colon ? (size_t)(colon - tok) : 0;
    int ok = colon && digits > 0 && digits <= 10;
    for (size_t i = 0; ok && i < digits; i++)
        ok = tok[i] >= '0' && tok[i] <= '9';
    if (!ok)
        return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                   "%s: \"%.*s\" is not id:value (a non-negative integer id of "
                                   "at most 10 digits, a colon, a number)",
                                   data_at_text(at, where, sizeof where), shown, tok);
    long long id = 0;
    for (size_t i = 0; i < digits; i++)
        id = id * 10 + (tok[i] - '0');
    if (id < base || id - base >= features)
        return pf_error_set_offset(
            err, PF_ERR_FORMAT, offset,
            "%s: feature id %lld outside %d .. %d (%s %d, "
            "data.index_base %d)",
            data_at_text(at, where, sizeof where), id, base, features - 1 + base,
            k->model ? "ids of the model's embeddings" : "model.inputs", features, base);
    if (id <= k->prev)
        return pf_error_set_offset(err, PF_ERR_FORMAT, offset,
                                   "%s: feature ids must increase along a line (%lld after %lld)",
                                   data_at_text(at, where, sizeof where), id, k->prev);
    double v = 0;
    data_field r = data_parse_field(colon + 1, n - digits - 1, &v);
    if (r != FIELD_OK)
        return pf_error_set_offset(err, PF_ERR_FORMAT, offset + (long long)digits + 1,
                                   "%s: feature %lld: %s: \"%.*s\"",
                                   data_at_text(at, where, sizeof where), id,
                                   r == FIELD_EMPTY        ? "no value"
                                   : r == FIELD_NOT_FINITE ? "not a finite number"
                                   : r == FIELD_RANGE      ? "out of float32 range"
                                                           : "not a number",
                                   shown, tok);
    k->prev = id;
    return data_sink_put(k, id - base, (float)v, offset, at, err);
}

pf_status data_libsvm_line(const char *line, size_t line_len, const data_at *at, data_sink *k,
                           bool classification, float *row, double *label, bool *empty,
                           pf_error *err) {
    const char *hash = memchr(line, '#', line_len); /* a comment runs to the line's end */
    if (hash)
        line_len = (size_t)(hash - line);
    size_t i = 0, end;
    while (i < line_len && (data_is_blank(line[i]) || line[i] == '\r'))
        i++;
    *empty = i == line_len;
    if (*empty)
        return PF_OK;
    for (end = i; end < line_len && !data_is_blank(line[end]) && line[end] != '\r'; end++) {
    }
    pf_status st = data_parse_label(line + i, end - i, at->start + (long long)i, at, classification,
                                    label, err);
    if (st != PF_OK)
        return st;
    data_sink_line(k, row);
    for (i = end;;) {
        while (i < line_len && (data_is_blank(line[i]) || line[i] == '\r'))
            i++;
        if (i == line_len)
            return PF_OK;
        for (end = i; end < line_len && !data_is_blank(line[end]) && line[end] != '\r'; end++) {
        }
        if ((st = parse_pair(line + i, end - i, at->start + (long long)i, at, k, err)) != PF_OK)
            return st;
        i = end;
    }
}

static pf_status parse_libsvm(const char *text, size_t len, const char *what, data_sink *k,
                              bool classification, pf_dataset *out, pf_error *err) {
    data_rows rows = {out, 0};
    int width = k->model ? pf_model_input_width(k->model) : k->features;
    out->features = width;
    double max_label = 0;
    size_t pos = 0, line_start, line_len;
    long long line_no = 0;
    while (data_next_line(text, len, &pos, &line_start, &line_len)) {
        data_at at = {what, ++line_no, (long long)line_start};
        double label = 0;
        bool empty = false;
        pf_status st = data_room_for_row(&rows, &at, err);
        if (st == PF_OK)
            st = data_libsvm_line(text + line_start, line_len, &at, k, classification,
                                  out->x + (size_t)out->n * (size_t)width, &label, &empty, err);
        if (st != PF_OK)
            return st;
        if (empty)
            continue;
        out->y[out->n] = (float)label;
        if (label > max_label)
            max_label = label;
        out->n++;
    }
    return data_finish_rows(out, len, what, classification, max_label, err);
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
    data_sink sink = {.features = features, .base = index_base};
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
    data_sink sink = {0};
    pf_status status = data_sink_for_model(&sink, model, index_base, what, err);
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
    pf_status status = data_read_file(path, &text, &len, err);
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
    pf_status status = data_read_file(path, &text, &len, err);
    if (status == PF_OK)
        status = pf_libsvm_parse_ids((const char *)text, len, path, model, index_base,
                                     classification, out, err);
    pf_free(text);
    return status;
}
