/* dyn_checkpoint.c - a dynamic embedding table in a ps task's checkpoint file
 * (dyn_checkpoint.h).
 *
 * DESIGN: a file's tensors of one table are read into a file_table of views (every shape and
 * dtype checked first, so the merge below only reads), and a restore merges the files' rows
 * by step, inserting each row it keeps with pf_dyn_insert, which takes rows in step order:
 * the order the merge yields. A row is checked (its owner, a duplicate, finite values) as it
 * is inserted, so a bad row refuses the restore and the caller drops the table.
 */
#include "psflow/dyn_checkpoint.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/mem.h"

enum { T_IDS, T_STEPS, T_VALUES, T_SKETCH, T_ADMISSION, T_STATS, T_SLOT0 };

/* One file's tensors of one table, borrowed from the file. */
typedef struct file_table {
    int64_t n;
    const uint64_t *ids;
    const int64_t *steps;
    const float *values;
    const float *slots[PF_DYN_MAX_SLOTS];
    const uint8_t *sketch; /* NULL: absent */
    int64_t sketch_bytes;
    const uint64_t *admission;
    const int64_t *stats;
} file_table;

static bool finite_row(const float *v, int dim) {
    for (int k = 0; k < dim; k++)
        if (!isfinite(v[k]))
            return false;
    return true;
}

static pf_status name_of(char *out, const char *var, const char *suffix, pf_error *err) {
    int len = suffix ? snprintf(out, PF_DYN_CKPT_NAME_MAX, "%s/%s", var, suffix)
                     : snprintf(out, PF_DYN_CKPT_NAME_MAX, "%s", var);
    if (len < 0 || len >= PF_DYN_CKPT_NAME_MAX || strlen(var) > PF_VAR_NAME_MAX)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "dynamic table '%.40s': name too long", var);
    return PF_OK;
}

/* --- taking a table ----------------------------------------------------------------------- */

void pf_dyn_snapshot_free(pf_dyn_snapshot *s) {
    for (int i = 0; i < PF_DYN_CKPT_TENSORS; i++)
        pf_free(s->owned[i]);
    memset(s, 0, sizeof *s);
}

/* Adds tensor `suffix` of var to s: rows (x cols for rank 2) elements of `type` in an owned
 * buffer (data NULL: allocated here, zeroed) or in data (borrowed from s itself). NULL with
 * *st set on failure; nothing is done once *st is not PF_OK. */
static void *add_view(pf_dyn_snapshot *s, const char *var, const char *suffix, pf_dtype type,
                      int rank, int64_t rows, int64_t cols, const void *data, pf_status *st,
                      pf_error *err) {
    int i = s->n;
    if (*st != PF_OK || (*st = name_of(s->names[i], var, suffix, err)) != PF_OK)
        return NULL;
    void *buf = (void *)data;
    if (!buf) {
        size_t bytes = (size_t)rows * (size_t)(rank == 2 ? cols : 1) * (size_t)pf_dtype_size(type);
        buf = s->owned[i] = pf_calloc(bytes ? bytes : 1, 1);
        if (!buf) {
            *st = pf_error_set(err, PF_ERR_NOMEM, NULL,
                               "dynamic table '%s': out of memory (%zu bytes)", var, bytes);
            return NULL;
        }
    }
    s->views[i] = (pf_tensor_view){
        .name = s->names[i], .rank = rank, .shape = {rows, cols}, .raw = buf, .dtype = type};
    s->n++;
    return buf;
}

pf_status pf_dyn_snapshot_take(const pf_dyn_table *t, const char *var,
                               const char *const *slot_suffix, pf_dyn_snapshot *out,
                               pf_error *err) {
    memset(out, 0, sizeof *out);
    const pf_dyn_config *cfg = pf_dyn_config_get(t);
    pf_dyn_stats stats = pf_dyn_stats_get(t);
    pf_dyn_admission adm = pf_dyn_admission_get(t);
    int64_t n = stats.rows;
    int dim = cfg->dim;
    for (int k = 0; k < cfg->slots; k++)
        if (!slot_suffix || !slot_suffix[k])
            return pf_error_set(err, PF_ERR_INVALID, NULL,
                                "dynamic table '%s': slot %d has no name", var, k);
    out->admission[0] = adm.counted;
    out->admission[1] = adm.draws;
    out->admission[2] = cfg->seed;
    out->stats[0] = stats.admitted;
    out->stats[1] = stats.refused;
    out->stats[2] = stats.evicted;
    /* the 8-byte tensors first: after a header padded to 8 bytes they lie 8-byte aligned */
    pf_status st = PF_OK;
    uint64_t *ids = add_view(out, var, "ids", PF_DTYPE_U64, 1, n, 0, NULL, &st, err);
    int64_t *steps = add_view(out, var, "steps", PF_DTYPE_I64, 1, n, 0, NULL, &st, err);
    add_view(out, var, "admission", PF_DTYPE_U64, 1, 3, 0, out->admission, &st, err);
    add_view(out, var, "stats", PF_DTYPE_I64, 1, 3, 0, out->stats, &st, err);
    float *values = add_view(out, var, NULL, PF_DTYPE_F32, 2, n, dim, NULL, &st, err);
    float *slots[PF_DYN_MAX_SLOTS] = {0};
    for (int k = 0; k < cfg->slots; k++)
        slots[k] = add_view(out, var, slot_suffix[k], PF_DTYPE_F32, 2, n, dim, NULL, &st, err);
    if (adm.bytes) {
        uint8_t *sketch =
            add_view(out, var, "sketch", PF_DTYPE_U8, 1, (int64_t)adm.bytes, 0, NULL, &st, err);
        if (sketch)
            memcpy(sketch, adm.sketch, adm.bytes);
    }
    if (st != PF_OK) {
        pf_dyn_snapshot_free(out);
        return st;
    }
    int64_t cursor = 0, i = 0;
    size_t row_bytes = (size_t)dim * sizeof(float);
    pf_dyn_row row;
    while (i < n && pf_dyn_next(t, &cursor, &row)) {
        bool finite = finite_row(row.values, dim);
        for (int k = 0; k < cfg->slots; k++) {
            memcpy(slots[k] + (size_t)i * (size_t)dim, row.slots[k], row_bytes);
            finite = finite && finite_row(row.slots[k], dim);
        }
        if (!finite) {
            pf_dyn_snapshot_free(out);
            return pf_error_set(err, PF_ERR_NONFINITE, NULL,
                                "dynamic table '%s': the row of id %" PRIu64
                                " holds a NaN or infinite value or slot",
                                var, row.id);
        }
        ids[i] = row.id;
        steps[i] = row.last_step;
        memcpy(values + (size_t)i * (size_t)dim, row.values, row_bytes);
        i++;
    }
    out->rows = n;
    return PF_OK;
}

/* --- reading a file's table --------------------------------------------------------------- */

/* Tensor `suffix` of var in file `f` as a view of `type`, `rank` and, when not negative,
 * shape[0] == rows and (rank 2) shape[1] == cols; *found false when absent and !required. */
static pf_status find(const pf_safetensors *st, int f, const char *var, const char *suffix,
                      pf_dtype type, int rank, int64_t rows, int64_t cols, bool required,
                      pf_tensor_view *v, bool *found, pf_error *err) {
    char name[PF_DYN_CKPT_NAME_MAX];
    pf_status s = name_of(name, var, suffix, err);
    if (s != PF_OK)
        return s;
    *found = pf_safetensors_find(st, name, v) == 0;
    if (!*found)
        return required ? pf_error_set(err, PF_ERR_FORMAT, NULL,
                                       "ps-%d: dynamic table '%s': no tensor '%s'", f, var, name)
                        : PF_OK;
    if (v->dtype != type || v->rank != rank || (rows >= 0 && v->shape[0] != rows) ||
        (rank == 2 && cols >= 0 && v->shape[1] != cols))
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "ps-%d: dynamic table '%s': tensor '%s' is not of the dtype and "
                            "shape it must have",
                            f, var, name);
    return PF_OK;
}

/* File f's tensors of var: dim the rows' width (*dim < 0: taken from the file), `slots`
 * slot tensors named by slot_suffix; steps checked in order. */
static pf_status read_table(const pf_safetensors *st, int f, const char *var, int *dim, int slots,
                            const char *const *slot_suffix, file_table *ft, pf_error *err) {
    pf_tensor_view v;
    bool found;
    memset(ft, 0, sizeof *ft);
    pf_status s = find(st, f, var, "ids", PF_DTYPE_U64, 1, -1, 0, true, &v, &found, err);
    if (s != PF_OK)
        return s;
    ft->n = v.shape[0];
    ft->ids = v.raw;
    if ((s = find(st, f, var, "steps", PF_DTYPE_I64, 1, ft->n, 0, true, &v, &found, err)))
        return s;
    ft->steps = v.raw;
    if ((s = find(st, f, var, NULL, PF_DTYPE_F32, 2, ft->n, *dim, true, &v, &found, err)))
        return s;
    ft->values = v.data;
    if (*dim < 0) {
        if (v.shape[1] < 1 || v.shape[1] > PF_MAX_EMBEDDING_DIM)
            return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                "ps-%d: dynamic table '%s': rows of %" PRId64 " floats", f, var,
                                v.shape[1]);
        *dim = (int)v.shape[1];
    }
    for (int k = 0; k < slots; k++) {
        if ((s = find(st, f, var, slot_suffix[k], PF_DTYPE_F32, 2, ft->n, *dim, true, &v, &found,
                      err)))
            return s;
        ft->slots[k] = v.data;
    }
    if ((s = find(st, f, var, "sketch", PF_DTYPE_U8, 1, -1, 0, false, &v, &found, err)))
        return s;
    ft->sketch = found ? v.raw : NULL;
    ft->sketch_bytes = found ? v.shape[0] : 0;
    if ((s = find(st, f, var, "admission", PF_DTYPE_U64, 1, 3, 0, true, &v, &found, err)))
        return s;
    ft->admission = v.raw;
    if ((s = find(st, f, var, "stats", PF_DTYPE_I64, 1, 3, 0, true, &v, &found, err)))
        return s;
    ft->stats = v.raw;
    for (int64_t i = 0; i < ft->n; i++)
        if (ft->steps[i] == INT64_MIN || (i > 0 && ft->steps[i] < ft->steps[i - 1]))
            return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                "ps-%d: dynamic table '%s': step of row %" PRId64
                                " out of order (%" PRId64 ")",
                                f, var, i, ft->steps[i]);
    return PF_OK;
}

/* --- restoring ---------------------------------------------------------------------------- */

pf_status pf_dyn_restore(pf_dyn_table *t, const pf_safetensors *const *files, int n_files,
                         const char *var, const char *const *slot_suffix, int ps, int n_ps,
                         int64_t *dropped, pf_error *err) {
    int64_t lost = 0; /* rows dropped at max_rows (with `dropped`) */
    const pf_dyn_config *cfg = pf_dyn_config_get(t);
    if (n_files < 1 || n_ps < 1 || ps < 0 || ps >= n_ps)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "dynamic table '%s': ps %d of %d from %d files", var, ps, n_ps,
                            n_files);
    bool same = n_files == n_ps;
    int first = same ? ps : 0, end = same ? ps + 1 : n_files;
    file_table *ft = pf_calloc((size_t)n_files, sizeof *ft);
    int64_t *pos = pf_calloc((size_t)n_files, sizeof *pos);
    pf_status s =
        ft && pos ? PF_OK
                  : pf_error_set(err, PF_ERR_NOMEM, NULL, "dynamic table '%s': out of memory", var);
    pf_dyn_admission mine = pf_dyn_admission_get(t);
    for (int f = first; s == PF_OK && f < end; f++) {
        int dim = cfg->dim;
        if ((s = read_table(files[f], f, var, &dim, cfg->slots, slot_suffix, &ft[f], err)))
            break;
        if (ft[f].admission[2] != cfg->seed) {
            s = pf_error_set(err, PF_ERR_FORMAT, NULL,
                             "ps-%d: dynamic table '%s' was saved with seed %" PRIu64
                             ", the table has %" PRIu64 " (its sketch counts other cells)",
                             f, var, ft[f].admission[2], cfg->seed);
            break;
        }
        if ((size_t)ft[f].sketch_bytes != mine.bytes) {
            s = pf_error_set(err, PF_ERR_FORMAT, NULL,
                             "ps-%d: dynamic table '%s': an admission sketch of %" PRId64
                             " bytes where the table counts in %zu",
                             f, var, ft[f].sketch_bytes, mine.bytes);
            break;
        }
        pf_dyn_admission a = {ft[f].sketch, (size_t)ft[f].sketch_bytes, ft[f].admission[0],
                              ft[f].admission[1]};
        pf_dyn_admission_add(t, &a);
    }
    const float *slots[PF_DYN_MAX_SLOTS] = {0};
    while (s == PF_OK) {
        int f = -1; /* the file whose next row is of the lowest step */
        for (int g = first; g < end; g++)
            if (pos[g] < ft[g].n && (f < 0 || ft[g].steps[pos[g]] < ft[f].steps[pos[f]]))
                f = g;
        if (f < 0)
            break;
        int64_t i = pos[f]++;
        uint64_t id = ft[f].ids[i];
        int owner = pf_dyn_owner(id, n_ps);
        if (owner != ps) {
            if (same)
                s = pf_error_set(err, PF_ERR_FORMAT, NULL,
                                 "ps-%d: dynamic table '%s': row %" PRId64 " (id %" PRIu64
                                 ") belongs to ps %d",
                                 f, var, i, id, owner);
            continue;
        }
        size_t at = (size_t)i * (size_t)cfg->dim;
        bool finite = finite_row(ft[f].values + at, cfg->dim);
        for (int k = 0; k < cfg->slots; k++)
            finite = finite && finite_row((slots[k] = ft[f].slots[k] + at), cfg->dim);
        if (!finite)
            s = pf_error_set(err, PF_ERR_FORMAT, NULL,
                             "ps-%d: dynamic table '%s': the row of id %" PRIu64
                             " holds a NaN or infinite value or slot",
                             f, var, id);
        else if (pf_dyn_has(t, id))
            s = pf_error_set(err, PF_ERR_FORMAT, NULL,
                             "ps-%d: dynamic table '%s': id %" PRIu64 " has two rows", f, var, id);
        else if (pf_dyn_stats_get(t).rows >= cfg->max_rows && !dropped) /* none dropped unsaid */
            s = pf_error_set(err, PF_ERR_RANGE, NULL,
                             "dynamic table '%s': ps %d of %d holds more than its max_rows "
                             "(%" PRId64 ") rows of the checkpoint: give it a larger max_rows "
                             "or more ps tasks",
                             var, ps, n_ps, cfg->max_rows);
        else {
            lost += pf_dyn_stats_get(t).rows >= cfg->max_rows; /* the insert makes room */
            if (pf_dyn_insert(t, id, ft[f].steps[i], ft[f].values + at, slots) != PF_OK)
                s = pf_error_set(err, PF_ERR_NOMEM, NULL,
                                 "dynamic table '%s': out of memory restoring its rows", var);
        }
    }
    if (s == PF_OK && same) {
        pf_dyn_stats c = {.admitted = ft[ps].stats[0],
                          .refused = ft[ps].stats[1],
                          .evicted = ft[ps].stats[2] + lost};
        pf_dyn_stats_restore(t, &c);
    } else if (s == PF_OK) {
        pf_dyn_stats since = {.evicted = lost};
        pf_dyn_stats_restore(t, &since);
    }
    if (dropped)
        *dropped = s == PF_OK ? lost : 0;
    pf_free(ft);
    pf_free(pos);
    return s;
}

/* --- exporting ---------------------------------------------------------------------------- */

typedef struct keyed {
    uint64_t id;
    const float *values;
} keyed;

static int by_id(const void *a, const void *b) {
    uint64_t x = ((const keyed *)a)->id, y = ((const keyed *)b)->id;
    return (x > y) - (x < y);
}

pf_status pf_dyn_export_rows(const pf_safetensors *const *files, int n_files, const char *var,
                             uint64_t **ids, float **values, int64_t *n, int *dim, pf_error *err) {
    *ids = NULL;
    *values = NULL;
    *n = 0;
    *dim = -1;
    file_table *ft = pf_calloc((size_t)(n_files > 0 ? n_files : 1), sizeof *ft);
    if (!ft)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "dynamic table '%s': out of memory", var);
    pf_status s = PF_OK;
    int64_t total = 0;
    char name[PF_DYN_CKPT_NAME_MAX];
    pf_tensor_view v;
    if ((s = name_of(name, var, "ids", err)) == PF_OK &&
        (n_files < 1 || pf_safetensors_find(files[0], name, &v) != 0))
        s = pf_error_set(err, PF_ERR_NOT_FOUND, NULL, "no dynamic table '%s' in the checkpoint",
                         var);
    /* every ps file holds every table (an empty one too): a file without it lost rows */
    for (int f = 0; s == PF_OK && f < n_files; f++)
        if ((s = read_table(files[f], f, var, dim, 0, NULL, &ft[f], err)) == PF_OK)
            total += ft[f].n;
    keyed *rows = NULL;
    if (s == PF_OK && !(rows = pf_mallocarray((size_t)(total ? total : 1), sizeof *rows)))
        s = pf_error_set(err, PF_ERR_NOMEM, NULL, "dynamic table '%s': out of memory", var);
    int64_t k = 0;
    for (int f = 0; s == PF_OK && f < n_files; f++)
        for (int64_t i = 0; i < ft[f].n; i++) {
            rows[k].id = ft[f].ids[i];
            rows[k++].values = ft[f].values + (size_t)i * (size_t)*dim;
        }
    if (s == PF_OK)
        qsort(rows, (size_t)total, sizeof *rows, by_id);
    for (int64_t i = 1; s == PF_OK && i < total; i++)
        if (rows[i].id == rows[i - 1].id)
            s = pf_error_set(err, PF_ERR_FORMAT, NULL,
                             "dynamic table '%s': id %" PRIu64 " has two rows", var, rows[i].id);
    if (s == PF_OK &&
        (!(*ids = pf_mallocarray((size_t)(total ? total : 1), sizeof **ids)) ||
         !(*values = pf_mallocarray((size_t)(total ? total : 1) * (size_t)*dim, sizeof **values))))
        s = pf_error_set(err, PF_ERR_NOMEM, NULL, "dynamic table '%s': out of memory", var);
    for (int64_t i = 0; s == PF_OK && i < total; i++) {
        if (!finite_row(rows[i].values, *dim)) {
            s = pf_error_set(err, PF_ERR_FORMAT, NULL,
                             "dynamic table '%s': the row of id %" PRIu64
                             " holds a NaN or infinite value",
                             var, rows[i].id);
            break;
        }
        (*ids)[i] = rows[i].id;
        memcpy(*values + (size_t)i * (size_t)*dim, rows[i].values, (size_t)*dim * sizeof(float));
    }
    pf_free(rows);
    pf_free(ft);
    if (s != PF_OK) {
        pf_free(*ids);
        pf_free(*values);
        *ids = NULL;
        *values = NULL;
        return s;
    }
    *n = total;
    return PF_OK;
}
