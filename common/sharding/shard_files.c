/* shard_files.c - the checkpoint file of each ps task: writing a ps's shards and optimizer
 * slots into ps-<i>.safetensors, loading them back for a restore (also under another
 * partitioning), and reading a file's shard list for export (see checkpoint.h).
 *
 * DESIGN: a ps file is a safetensors file, renamed into place and its folder fsynced by
 * pf_safetensors_write; it names every tensor after its shard and slot (the optimizer's
 * pf_optim_slots give the slot suffixes) and carries the shard layout as metadata, so that
 * export can merge it without the job spec, and the job spec itself ("psflow_spec"), so that
 * a checkpoint says which model its variables belong to. Loading checks every expected tensor and
 * its size before the ps takes any value from it.
 */
#include "psflow/checkpoint.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint_internal.h"
#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/optim.h"
#include "psflow/safetensors.h"

static int64_t view_count(const pf_tensor_view *v) {
    int64_t c = 1;
    for (int d = 0; d < v->rank; d++)
        c *= v->shape[d];
    return c;
}

#define SLOT_NAME_MAX (PF_SHARD_NAME_MAX + 32) /* "<shard>/Momentum" */

/* The tensor name of slot k of a shard: "<shard>/<the optimizer's slot variable suffix>". */
static pf_status slot_name(char out[SLOT_NAME_MAX], const char *shard, const pf_optim_slots *optim,
                           int k, pf_error *err) {
    int w = snprintf(out, SLOT_NAME_MAX, "%s/%s", shard, optim->variable[k]);
    if (w < 0 || w >= SLOT_NAME_MAX)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "slot variable name %s/%s too long", shard,
                            optim->variable[k]);
    return PF_OK;
}

/* --- writing a ps file -------------------------------------------------------------------- */

static json_t *shape_json(int rank, int64_t rows, int64_t cols) {
    return rank == 2 ? json_pack("[I,I]", (json_int_t)rows, (json_int_t)cols)
                     : json_pack("[I]", (json_int_t)rows);
}

/* Checks one shard entry against the model layout. */
static pf_status check_shard(const pf_shard_info *s, const pf_var_info *vars, int nv,
                             pf_error *err) {
    if (s->var < 0 || s->var >= nv)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "shard '%s': variable index %d out of range",
                            s->name, s->var);
    const pf_var_info *v = &vars[s->var];
    int64_t cols = v->rank == 2 ? v->shape[1] : 1;
    if (s->rank != v->rank || s->shape[0] < 1 || s->shape[1] != cols || s->row_offset < 0 ||
        s->row_offset + s->shape[0] > v->shape[0] || s->num_shards < 1 || s->shard < 0 ||
        s->shard >= s->num_shards || s->count != (size_t)(s->shape[0] * cols))
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "shard '%s' does not fit variable '%s' of the model", s->name, v->name);
    return PF_OK;
}

/* The "psflow_shards" metadata: one object per shard, as compact JSON (free with free()). */
static char *shards_json(const pf_checkpoint_shards *sh, const pf_var_info *vars) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < sh->n; i++) {
        const pf_shard_info *s = &sh->info[i];
        const pf_var_info *v = &vars[s->var];
        json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:I, s:o, s:o}", "name", s->name, "variable",
                              v->name, "shard", s->shard, "num_shards", s->num_shards, "row_offset",
                              (json_int_t)s->row_offset, "shape",
                              shape_json(s->rank, s->shape[0], s->shape[1]), "variable_shape",
                              shape_json(v->rank, v->shape[0], v->shape[1]));
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    char *text = arr ? json_dumps(arr, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(arr);
    return text;
}

pf_status pf_checkpoint_write_ps(const char *step_dir, int ps_task, uint64_t version,
                                 const pf_job_spec *spec, const pf_optim_slots *optim,
                                 const pf_checkpoint_shards *shards, char *path_out,
                                 size_t path_len, int64_t *bytes_out, pf_error *err) {
    pf_var_info vars[PF_MAX_VARS];
    int nv = pf_model_layout(&spec->model, vars);
    int n = shards->n, n_slots = optim->n, n_extra = shards->n_extra;
    if (ps_task < 0 || n < 0 || n_slots < 0 || n_slots > PF_OPTIM_MAX_SLOTS ||
        (n > 0 && (!shards->info || !shards->values)) || (n > 0 && n_slots > 0 && !shards->slots) ||
        n_extra < 0 || (n_extra > 0 && !shards->extra))
        return pf_error_set(err, PF_ERR_INVALID, NULL, "ps %d: invalid checkpoint arguments",
                            ps_task);
    for (int i = 0; i < n; i++) {
        pf_status st = check_shard(&shards->info[i], vars, nv, err);
        if (st != PF_OK)
            return st;
        int missing = !shards->values[i];
        for (int k = 0; k < n_slots; k++)
            missing |= !shards->slots[i] || !shards->slots[i][k];
        if (missing)
            return pf_error_set(err, PF_ERR_INVALID, NULL, "shard '%s': no data given",
                                shards->info[i].name);
        /* A checkpoint is a restore target: one holding NaN or Inf is never written. */
        size_t count = shards->info[i].count;
        int bad = pf_first_nonfinite(shards->values[i], count) < count;
        for (int k = 0; k < n_slots && !bad; k++)
            bad = pf_first_nonfinite(shards->slots[i][k], count) < count;
        if (bad)
            return pf_error_set(err, PF_ERR_NONFINITE, NULL,
                                "ps %d: not writing a checkpoint of version %llu: shard '%s' "
                                "holds a non-finite value",
                                ps_task, (unsigned long long)version, shards->info[i].name);
    }
    char name[PF_CKPT_FILE_NAME_MAX], path[PF_CKPT_PATH_MAX];
    ckpt_ps_file_name(ps_task, name);
    pf_status st = ckpt_join(path, sizeof path, step_dir, name, err);
    if (st != PF_OK)
        return st;

    size_t n_shard_tensors = (size_t)n * (size_t)(1 + n_slots);
    size_t n_tensors = n_shard_tensors + (size_t)n_extra;
    pf_tensor_view *t = pf_mallocarray(n_tensors ? n_tensors : 1, sizeof *t);
    char(*names)[SLOT_NAME_MAX] = pf_mallocarray((size_t)n * (size_t)n_slots, sizeof *names);
    char *shards_meta = shards_json(shards, vars);
    char *spec_text = NULL; /* the whole job spec: psflow serve needs nothing else */
    if (!t || !names || !shards_meta) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
        goto done;
    }
    /* The extra tensors of 8-byte elements first (right after the header, aligned), then the
     * shards, then the other extra tensors. */
    size_t front = 0;
    for (int i = 0; i < n_extra; i++)
        front += shards->extra[i].dtype == PF_DTYPE_I64 || shards->extra[i].dtype == PF_DTYPE_U64;
    size_t back = front + n_shard_tensors;
    size_t wide_at = 0;
    for (int i = 0; i < n_extra; i++) {
        pf_dtype d = shards->extra[i].dtype;
        if (d == PF_DTYPE_I64 || d == PF_DTYPE_U64)
            t[wide_at++] = shards->extra[i];
        else
            t[back++] = shards->extra[i];
    }
    pf_tensor_view *shard_t = t + front;
    for (int i = 0; i < n; i++) {
        const pf_shard_info *s = &shards->info[i];
        pf_tensor_view v = {.name = s->name,
                            .rank = s->rank,
                            .shape = {s->shape[0], s->shape[1]},
                            .data = shards->values[i]};
        shard_t[(size_t)i * (size_t)(1 + n_slots)] = v;
        for (int k = 0; k < n_slots; k++) {
            char *sn = names[(size_t)i * (size_t)n_slots + (size_t)k];
            if ((st = slot_name(sn, s->name, optim, k, err)) != PF_OK)
                goto done;
            v.name = sn;
            v.data = shards->slots[i][k];
            shard_t[(size_t)i * (size_t)(1 + n_slots) + 1 + (size_t)k] = v;
        }
    }
    char task_text[24], version_text[24];
    snprintf(task_text, sizeof task_text, "%d", ps_task);
    snprintf(version_text, sizeof version_text, "%llu", (unsigned long long)version);
    spec_text = pf_job_spec_to_json(spec);
    if (!spec_text) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        goto done;
    }
    const char *keys[] = {"psflow_job",    "ps_task",     "version",           "optimizer",
                          "psflow_shards", "psflow_spec", "psflow_input_queue"};
    const char *values[] = {spec->name,  task_text, version_text,       optim->optimizer,
                            shards_meta, spec_text, shards->input_queue};
    int n_meta = shards->input_queue ? 7 : 6;
    if ((st = pf_fs_make_dirs(step_dir, err)) != PF_OK)
        goto done;
    if ((st = pf_safetensors_write(path, t, (int)n_tensors, keys, values, n_meta, err)) != PF_OK)
        goto done;
    struct stat sb; /* pf_safetensors_write has fsynced step_dir after the rename */
    if (stat(path, &sb) != 0) {
        st = pf_error_set(err, PF_ERR_IO, NULL, "%s: %s", path, strerror(errno));
        goto done;
    }
    if (path_out && snprintf(path_out, path_len, "%s", path) >= (int)path_len) {
        st = pf_error_set(err, PF_ERR_INVALID, NULL, "%s: path too long for the caller", path);
        goto done;
    }
    if (bytes_out)
        *bytes_out = (int64_t)sb.st_size;
done:
    pf_free(t);
    pf_free(names);
    pf_free(spec_text);
    free(shards_meta); /* from jansson's allocator */
    return st;
}

/* --- restoring a ps ----------------------------------------------------------------------- */

struct pf_checkpoint_ps {
    pf_safetensors *st; /* the file the views point into, or NULL */
    float *owned;       /* or the values and slots assembled from several files */
    uint64_t version;
    const float **values;       /* [n] */
    const float **slot_ptrs;    /* [n * PF_OPTIM_MAX_SLOTS] */
    const float *const **slots; /* [n]: slots[i] = slot_ptrs + i * PF_OPTIM_MAX_SLOTS */
};

void pf_checkpoint_ps_destroy(pf_checkpoint_ps *c) {
    if (!c)
        return;
    pf_safetensors_destroy(c->st);
    pf_free(c->owned);
    pf_free(c->values);
    pf_free(c->slot_ptrs);
    pf_free(c->slots);
    pf_free(c);
}

uint64_t pf_checkpoint_ps_version(const pf_checkpoint_ps *c) {
    return c->version;
}

const char *pf_checkpoint_ps_input_queue(const pf_checkpoint_ps *c) {
    return c->st ? pf_safetensors_meta(c->st, "psflow_input_queue") : NULL;
}

const float *const *pf_checkpoint_ps_values(const pf_checkpoint_ps *c) {
    return c->values;
}

const float *const *const *pf_checkpoint_ps_slots(const pf_checkpoint_ps *c) {
    return c->slots;
}

/* Finds tensor `name` with `count` elements in st. */
static pf_status expect_tensor(const pf_safetensors *st, const char *path, const char *name,
                               size_t count, const float **data, pf_error *err) {
    pf_tensor_view v;
    if (pf_safetensors_find(st, name, &v) != 0)
        return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: tensor '%s' missing", path, name);
    if (v.dtype != PF_DTYPE_F32)
        return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: tensor '%s' is not F32", path, name);
    if (view_count(&v) != (int64_t)count)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: tensor '%s' has %lld elements, expected %zu", path, name,
                            (long long)view_count(&v), count);
    *data = v.data;
    return PF_OK;
}

pf_status pf_checkpoint_load_ps(const char *step_dir, int ps_task, const pf_shard_info *info, int n,
                                const pf_optim_slots *optim, pf_checkpoint_ps **out,
                                pf_error *err) {
    *out = NULL;
    if (ps_task < 0 || n < 0 || (n > 0 && !info) || optim->n < 0 || optim->n > PF_OPTIM_MAX_SLOTS)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "ps %d: invalid restore arguments", ps_task);
    char name[PF_CKPT_FILE_NAME_MAX], path[PF_CKPT_PATH_MAX];
    ckpt_ps_file_name(ps_task, name);
    pf_status st = ckpt_join(path, sizeof path, step_dir, name, err);
    if (st != PF_OK)
        return st;
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return pf_error_set(err, PF_ERR_NOT_FOUND, NULL, "%s: missing", path);
    pf_checkpoint_ps *c = pf_calloc(1, sizeof *c);
    if (!c)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
    if ((st = pf_safetensors_read_any(path, &c->st, err)) != PF_OK) /* a dynamic table's too */
        goto fail;
    const char *version = pf_safetensors_meta(c->st, "version");
    const char *task = pf_safetensors_meta(c->st, "ps_task");
    const char *optimizer = pf_safetensors_meta(c->st, "optimizer");
    uint64_t task_v = 0;
    if (!version || ckpt_parse_u64(version, false, &c->version) != 0) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                          "%s: metadata 'version' missing or not a number", path);
        goto fail;
    }
    if (task && (ckpt_parse_u64(task, false, &task_v) != 0 || task_v != (uint64_t)ps_task)) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: written by ps task %s, not %d", path, task,
                          ps_task);
        goto fail;
    }
    if (optimizer && strcmp(optimizer, optim->optimizer) != 0) {
        st =
            pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: written with optimizer %s, the job uses %s",
                         path, optimizer, optim->optimizer);
        goto fail;
    }
    c->values = pf_calloc((size_t)n, sizeof *c->values);
    c->slot_ptrs = pf_calloc((size_t)n * PF_OPTIM_MAX_SLOTS, sizeof *c->slot_ptrs);
    c->slots = pf_calloc((size_t)n, sizeof *c->slots);
    if (!c->values || !c->slot_ptrs || !c->slots) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        st = expect_tensor(c->st, path, info[i].name, info[i].count, &c->values[i], err);
        for (int k = 0; st == PF_OK && k < optim->n; k++) {
            char sn[SLOT_NAME_MAX];
            if ((st = slot_name(sn, info[i].name, optim, k, err)) == PF_OK)
                st = expect_tensor(c->st, path, sn, info[i].count,
                                   &c->slot_ptrs[(size_t)i * PF_OPTIM_MAX_SLOTS + (size_t)k], err);
        }
        if (st != PF_OK)
            goto fail;
        c->slots[i] = c->slot_ptrs + (size_t)i * PF_OPTIM_MAX_SLOTS;
    }
    *out = c;
    return PF_OK;
fail:
    pf_checkpoint_ps_destroy(c);
    return st;
}

/* --- reading a ps file's shard list ------------------------------------------------------- */

/* Reads a shape array of rank 1 or 2 with dimensions >= 1; -1 when it is not one. */
static int get_shape(json_t *o, const char *key, int *rank, int64_t *rows, int64_t *cols) {
    json_t *a = json_object_get(o, key);
    size_t r = json_array_size(a);
    if (!json_is_array(a) || r < 1 || r > 2)
        return -1;
    int64_t dims[2] = {1, 1};
    for (size_t d = 0; d < r; d++) {
        json_t *v = json_array_get(a, d);
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return -1;
        dims[d] = (int64_t)json_integer_value(v);
    }
    *rank = (int)r;
    *rows = dims[0];
    *cols = dims[1];
    return 0;
}

pf_status ckpt_collect_entries(const pf_safetensors *st, const char *path, json_t *meta,
                               shard_entry **v, size_t *n, size_t *cap, pf_error *err) {
    if (!json_is_array(meta))
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: metadata 'psflow_shards' is not a JSON array", path);
    for (size_t i = 0; i < json_array_size(meta); i++) {
        json_t *o = json_array_get(meta, i);
        json_t *name = json_object_get(o, "name"), *var = json_object_get(o, "variable");
        int64_t shard, num_shards, row_offset;
        shard_entry e = {0};
        int vrank;
        if (!json_is_string(name) || !json_is_string(var) || !*json_string_value(var) ||
            ckpt_get_int(o, "shard", 0, INT32_MAX, &shard) != 0 ||
            ckpt_get_int(o, "num_shards", 1, INT32_MAX, &num_shards) != 0 ||
            ckpt_get_int(o, "row_offset", 0, INT64_MAX, &row_offset) != 0 ||
            get_shape(o, "shape", &e.rank, &e.rows, &e.cols) != 0 ||
            get_shape(o, "variable_shape", &vrank, &e.var_rows, &e.var_cols) != 0 ||
            vrank != e.rank || e.cols != e.var_cols || shard >= num_shards)
            return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                "%s: psflow_shards[%zu] is not a valid shard description", path, i);
        e.name = json_string_value(name);
        e.variable = json_string_value(var);
        e.shard = (int)shard;
        e.num_shards = (int)num_shards;
        e.row_offset = row_offset;
        pf_tensor_view t;
        if (pf_safetensors_find(st, e.name, &t) != 0)
            return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: tensor '%s' missing", path, e.name);
        if (t.dtype != PF_DTYPE_F32)
            return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: tensor '%s' is not F32", path,
                                e.name);
        if (t.rank != e.rank || t.shape[0] != e.rows || (e.rank == 2 && t.shape[1] != e.cols))
            return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                "%s: tensor '%s' has another shape than psflow_shards says", path,
                                e.name);
        e.data = t.data;
        if (*n == *cap) {
            size_t ncap = *cap ? 2 * *cap : 16;
            shard_entry *nv = pf_mallocarray(ncap, sizeof *nv);
            if (!nv)
                return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
            if (*n)
                memcpy(nv, *v, *n * sizeof *nv);
            pf_free(*v);
            *v = nv;
            *cap = ncap;
        }
        (*v)[(*n)++] = e;
    }
    return PF_OK;
}

/* --- restoring under another partitioning ---------------------------------------------------- */

/* The rows [lo, hi) of one new shard that some old shard filled. */
typedef struct filled_rows {
    int64_t lo, hi;
} filled_rows;

static int cmp_filled(const void *a, const void *b) {
    const filled_rows *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Copies into new shard `s` (values dst, slots dst_slots) the rows it shares with old shard
 * e of file st, and records them in *filled. */
static pf_status copy_overlap(const pf_safetensors *st, const char *path, const shard_entry *e,
                              const pf_shard_info *s, const pf_optim_slots *optim, float *dst,
                              float *const *dst_slots, filled_rows **filled, int *n_filled,
                              pf_error *err) {
    int64_t lo = e->row_offset > s->row_offset ? e->row_offset : s->row_offset;
    int64_t e_end = e->row_offset + e->rows, s_end = s->row_offset + s->shape[0];
    int64_t hi = e_end < s_end ? e_end : s_end;
    if (lo >= hi)
        return PF_OK;
    int64_t cols = s->shape[1];
    size_t n = (size_t)((hi - lo) * cols);
    size_t from = (size_t)((lo - e->row_offset) * cols), to = (size_t)((lo - s->row_offset) * cols);
    memcpy(dst + to, e->data + from, n * sizeof *dst);
    for (int k = 0; k < optim->n; k++) {
        char sn[SLOT_NAME_MAX];
        const float *slot;
        pf_status rc = slot_name(sn, e->name, optim, k, err);
        if (rc == PF_OK)
            rc = expect_tensor(st, path, sn, (size_t)(e->rows * e->cols), &slot, err);
        if (rc != PF_OK)
            return rc;
        memcpy(dst_slots[k] + to, slot + from, n * sizeof *dst);
    }
    filled_rows *f = pf_mallocarray((size_t)*n_filled + 1, sizeof *f);
    if (!f)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    if (*n_filled)
        memcpy(f, *filled, (size_t)*n_filled * sizeof *f);
    f[(*n_filled)++] = (filled_rows){lo, hi};
    pf_free(*filled);
    *filled = f;
    return PF_OK;
}

/* Checks that the filled row ranges of new shard s cover it exactly once. */
static pf_status check_filled(const char *step_dir, const pf_shard_info *s, filled_rows *f, int n,
                              pf_error *err) {
    if (n > 1)
        qsort(f, (size_t)n, sizeof *f, cmp_filled);
    int64_t next = s->row_offset;
    int i = 0;
    for (; i < n && f[i].lo == next; i++)
        next = f[i].hi;
    if (i != n || next != s->row_offset + s->shape[0])
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: the checkpoint does not hold rows %lld..%lld of '%s' exactly once",
                            step_dir, (long long)s->row_offset,
                            (long long)(s->row_offset + s->shape[0] - 1), s->name);
    return PF_OK;
}

pf_status pf_checkpoint_load_repartitioned(const char *step_dir, const pf_job_spec *spec,
                                           const pf_shard_info *info, int n,
                                           const pf_optim_slots *optim, pf_checkpoint_ps **out,
                                           pf_error *err) {
    *out = NULL;
    if (n < 0 || (n > 0 && !info) || optim->n < 0 || optim->n > PF_OPTIM_MAX_SLOTS)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "invalid restore arguments");
    pf_var_info vars[PF_MAX_VARS];
    int nv = pf_model_layout(&spec->model, vars);
    for (int i = 0; i < n; i++) {
        pf_status rc = check_shard(&info[i], vars, nv, err);
        if (rc != PF_OK)
            return rc;
    }
    pf_checkpoint_manifest m;
    pf_status st = pf_checkpoint_manifest_read(step_dir, &m, err);
    if (st != PF_OK)
        return st;
    pf_checkpoint_ps *c = pf_calloc(1, sizeof *c);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += info[i].count * (size_t)(1 + optim->n);
    filled_rows **filled = pf_calloc((size_t)(n ? n : 1), sizeof *filled);
    int *n_filled = pf_calloc((size_t)(n ? n : 1), sizeof *n_filled);
    if (c) {
        c->owned = pf_mallocarray(total ? total : 1, sizeof *c->owned);
        c->values = pf_calloc((size_t)(n ? n : 1), sizeof *c->values);
        c->slot_ptrs = pf_calloc((size_t)(n ? n : 1) * PF_OPTIM_MAX_SLOTS, sizeof *c->slot_ptrs);
        c->slots = pf_calloc((size_t)(n ? n : 1), sizeof *c->slots);
    }
    if (!c || !filled || !n_filled || !c->owned || !c->values || !c->slot_ptrs || !c->slots) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);
        goto done;
    }
    float *next = c->owned;
    for (int i = 0; i < n; i++) {
        c->values[i] = next;
        next += info[i].count;
        for (int k = 0; k < optim->n; k++, next += info[i].count)
            c->slot_ptrs[(size_t)i * PF_OPTIM_MAX_SLOTS + (size_t)k] = next;
        c->slots[i] = c->slot_ptrs + (size_t)i * PF_OPTIM_MAX_SLOTS;
    }
    /* One old file at a time: at most one of them is in memory beside the new shards. */
    c->version = UINT64_MAX;
    for (int f = 0; f < m.num_ps && st == PF_OK; f++) {
        char path[PF_CKPT_PATH_MAX];
        pf_safetensors *file = NULL;
        json_t *meta = NULL;
        shard_entry *e = NULL;
        size_t ne = 0, cap = 0;
        uint64_t version = 0;
        if ((st = ckpt_join(path, sizeof path, step_dir, m.files[f].name, err)) == PF_OK)
            st = pf_safetensors_read_any(path, &file, err);
        const char *v = st == PF_OK ? pf_safetensors_meta(file, "version") : NULL;
        const char *o = st == PF_OK ? pf_safetensors_meta(file, "optimizer") : NULL;
        const char *text = st == PF_OK ? pf_safetensors_meta(file, "psflow_shards") : NULL;
        if (st == PF_OK && (!v || ckpt_parse_u64(v, false, &version) != 0 || !text))
            st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                              "%s: metadata 'version' or 'psflow_shards' missing or invalid", path);
        if (st == PF_OK && o && strcmp(o, optim->optimizer) != 0)
            st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                              "%s: written with optimizer %s, the job uses %s", path, o,
                              optim->optimizer);
        if (st == PF_OK && !(meta = json_loads(text, 0, NULL)))
            st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: 'psflow_shards' is not JSON", path);
        if (st == PF_OK)
            st = ckpt_collect_entries(file, path, meta, &e, &ne, &cap, err);
        for (size_t j = 0; st == PF_OK && j < ne; j++)
            for (int i = 0; st == PF_OK && i < n; i++) {
                const pf_var_info *var = &vars[info[i].var];
                if (strcmp(e[j].variable, var->name) != 0)
                    continue;
                if (e[j].var_rows != var->shape[0] || e[j].var_cols != info[i].shape[1])
                    st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                                      "%s: variable '%s' is %lldx%lld in the checkpoint, the "
                                      "job's is %lldx%lld",
                                      path, var->name, (long long)e[j].var_rows,
                                      (long long)e[j].var_cols, (long long)var->shape[0],
                                      (long long)info[i].shape[1]);
                else if (e[j].rows > e[j].var_rows || e[j].row_offset > e[j].var_rows - e[j].rows)
                    st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                                      "%s: shard '%s' holds rows outside variable '%s'", path,
                                      e[j].name, var->name);
                else
                    st = copy_overlap(file, path, &e[j], &info[i], optim, (float *)c->values[i],
                                      (float *const *)c->slots[i], &filled[i], &n_filled[i], err);
            }
        if (st == PF_OK && version < c->version)
            c->version = version;
        pf_free(e);
        json_decref(meta);
        pf_safetensors_destroy(file);
    }
    for (int i = 0; st == PF_OK && i < n; i++)
        st = check_filled(step_dir, &info[i], filled[i], n_filled[i], err);
done:
    for (int i = 0; filled && i < n; i++)
        pf_free(filled[i]);
    pf_free(filled);
    pf_free(n_filled);
    pf_checkpoint_manifest_deinit(&m);
    if (st != PF_OK) {
        pf_checkpoint_ps_destroy(c);
        return st;
    }
    *out = c;
    return PF_OK;
}
