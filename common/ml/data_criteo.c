/* data_criteo.c - Criteo-layout files as examples of a two-class model (pf_criteo_load, see
 * data.h): the streaming reader (criteo.c) turns each line into one example, held in memory.
 *
 * An example is what the model reads (model.h): with embeddings, one id slot and one weight
 * slot per categorical column (the id reduced into the table's vocabulary, or -1 and weight
 * 0 when the field is empty), then the numeric inputs when the model takes them; without
 * embeddings, the 13 numeric inputs alone. A numeric input is log1p(max(value, 0)), 0 when
 * the field is empty: counts spread over six orders of magnitude become a few units, the
 * transform the anchors' CTR pipelines apply. Rows grow by doubling, so memory is the
 * examples themselves (4 bytes a float) and a reader's buffer; the files themselves may be
 * any size.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "data_internal.h"
#include "psflow/criteo.h"
#include "psflow/data.h"
#include "psflow/mem.h"
#include "psflow/model.h"

/* The row of table `vocab` a 32-bit id goes to: the id itself modulo the vocabulary, or with
 * `hash` a mix of it first (ids that are not already well spread). */
static int64_t row_of_id(uint32_t id, int64_t vocab, bool hash) {
    uint64_t z = id;
    if (hash) {
        z = (z ^ (z >> 16)) * 0x7feb352dULL;
        z = (z ^ (z >> 15)) * 0x846ca68bULL;
        z ^= z >> 16;
    }
    return (int64_t)(z % (uint64_t)vocab);
}

void data_criteo_example(const pf_model_spec *m, const pf_criteo_scaling *sc,
                         const pf_criteo_row *r, float *x) {
    int col = 0;
    for (int f = 0; f < m->n_embeddings; f++) {
        const pf_embedding_spec *e = &m->embeddings[f];
        bool present = r->cat_present >> f & 1;
        if (e->kind == PF_TABLE_DYNAMIC) { /* the id as it is: every id its own row */
            if (present)
                pf_model_put_id(x + col, 0, r->cat[f]);
            else
                for (int j = 0; j < PF_DYN_ID_SLOTS; j++)
                    x[col + j] = -1.0f;
            x[col + PF_DYN_ID_SLOTS] = present ? 1.0f : 0.0f;
        } else {
            x[col] = present ? (float)row_of_id(r->cat[f], e->vocab, e->hash) : -1.0f;
            x[col + 1] = present ? 1.0f : 0.0f;
        }
        col += pf_model_feature_width(e);
    }
    int numeric = m->n_embeddings > 0 ? m->numeric_inputs : m->inputs;
    for (int j = 0; j < numeric; j++) {
        float v =
            r->num_present >> j & 1 ? (float)log1p(r->num[j] > 0 ? (double)r->num[j] : 0.0) : 0.0f;
        if (sc)
            v = r->num_present >> j & 1 ? (v - sc->mean[j]) * sc->inv_std[j] : 0.0f;
        x[col + j] = v;
    }
}

pf_status pf_criteo_scaling_load(const char *path, pf_criteo_scaling *out, pf_error *err) {
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
        out->mean[j] = 0;
        out->inv_std[j] = 1;
    }
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return pf_error_set(err, access(path, R_OK) == 0 ? PF_ERR_FORMAT : PF_ERR_IO, NULL,
                            "%s: %s (data.stats: psflow data stats writes it)", path, jerr.text);
    json_t *numeric = json_object_get(root, "numeric");
    pf_status st = json_is_object(numeric)
                       ? PF_OK
                       : pf_error_set(err, PF_ERR_FORMAT, NULL,
                                      "%s: no \"numeric\" object (data.stats: psflow data stats "
                                      "writes it)",
                                      path);
    for (int j = 0; st == PF_OK && j < PF_CRITEO_NUMERIC; j++) {
        const char *name = pf_criteo_column_name(1 + j);
        json_t *c = json_object_get(numeric, name), *mean = json_object_get(c, "log1p_mean"),
               *sd = json_object_get(c, "log1p_std");
        if (!mean && json_is_object(c))
            continue; /* a column without values */
        double m = json_number_value(mean), s = json_number_value(sd);
        if (!json_is_number(mean) || !json_is_number(sd) || !isfinite(m) || !isfinite(s) || s < 0)
            st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                              "%s: numeric.%s needs a finite log1p_mean and log1p_std >= 0", path,
                              name);
        out->mean[j] = (float)m;
        out->inv_std[j] = s > 0 ? (float)(1 / s) : 1.0f;
    }
    json_decref(root);
    return st;
}

/* Makes room for one more example in out (rows grow by doubling). */
static pf_status grow(pf_dataset *out, int64_t *cap, pf_error *err) {
    if (out->n < *cap)
        return PF_OK;
    int64_t want = *cap ? *cap * 2 : 4096;
    size_t floats = (size_t)want * (size_t)out->features;
    float *x = floats / (size_t)out->features == (size_t)want && floats < SIZE_MAX / sizeof(float)
                   ? pf_realloc(out->x, floats * sizeof(float))
                   : NULL;
    if (x)
        out->x = x;
    float *y = x ? pf_realloc(out->y, (size_t)want * sizeof(float)) : NULL;
    if (y)
        out->y = y;
    if (!x || !y)
        return pf_error_set_offset(err, PF_ERR_NOMEM, -1,
                                   "out of memory for %lld examples of %d floats in memory",
                                   (long long)want, out->features);
    *cap = want;
    return PF_OK;
}

pf_status pf_criteo_load(char *const *paths, int n_paths, const pf_model_spec *model,
                         pf_dataset *out, pf_error *err) {
    return pf_criteo_load_scaled(paths, n_paths, model, NULL, -1, out, err);
}

pf_status pf_criteo_load_skipping(char *const *paths, int n_paths, const pf_model_spec *model,
                                  int64_t max_bad, pf_dataset *out, pf_error *err) {
    return pf_criteo_load_scaled(paths, n_paths, model, NULL, max_bad, out, err);
}

/* A bad line described by err, skipped: counted, and an error once more than max_bad were. */
static pf_status skip_line(pf_dataset *out, int64_t max_bad, pf_error *err) {
    if (++out->skipped <= max_bad)
        return PF_OK;
    char last[sizeof err->message];
    snprintf(last, sizeof last, "%s", err->message);
    return pf_error_set(err, PF_ERR_FORMAT, NULL,
                        "more than %lld bad lines (data.max_bad_lines); the last: %s",
                        (long long)max_bad, last);
}

pf_status pf_criteo_load_scaled(char *const *paths, int n_paths, const pf_model_spec *model,
                                const pf_criteo_scaling *sc, int64_t max_bad, pf_dataset *out,
                                pf_error *err) {
    memset(out, 0, sizeof *out);
    out->features = pf_model_input_width(model);
    out->num_classes = 2;
    int64_t cap = 0;
    pf_status st = PF_OK;
    for (int i = 0; i < n_paths && st == PF_OK; i++) {
        pf_criteo_reader *r;
        if ((st = pf_criteo_open(paths[i], 0, &r, err)) != PF_OK)
            break;
        pf_criteo_row row;
        for (;;) {
            st = pf_criteo_next(r, &row, err);
            if (st == PF_ERR_FORMAT && max_bad >= 0) {
                int ended = pf_criteo_ended(r);
                if ((st = skip_line(out, max_bad, err)) != PF_OK || ended)
                    break; /* over the limit, or the corrupt rest of a gzip file */
                continue;
            }
            if (st != PF_OK || (st = grow(out, &cap, err)) != PF_OK)
                break;
            data_criteo_example(model, sc, &row, out->x + (size_t)out->n * (size_t)out->features);
            out->y[out->n++] = (float)row.label;
        }
        pf_criteo_close(r);
        if (st == PF_ERR_NOT_FOUND)
            st = PF_OK;
    }
    if (st == PF_OK && out->n == 0)
        st = pf_error_set_offset(err, PF_ERR_FORMAT, -1, "%s: no examples", paths[0]);
    if (st != PF_OK)
        pf_dataset_deinit(out);
    return st;
}
