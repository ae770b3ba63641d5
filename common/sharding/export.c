/* export.c - a checkpoint merged into whole variables and written as one safetensors file
 * (psflow export; see checkpoint.h).
 *
 * DESIGN: export trusts a checkpoint only through its manifest, verified with CRC-32. The
 * shard layout comes from each ps file's "psflow_shards" metadata, not from a job spec, so a
 * checkpoint exports on its own; the shards of each variable must tile it exactly (every row
 * once) before any value is copied.
 */
#include "psflow/checkpoint.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint_internal.h"
#include "psflow/dyn_checkpoint.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/safetensors.h"

/* Last path component of `path` without trailing slashes, into out[len]. */
static void base_name(const char *path, char *out, size_t len) {
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t begin = end;
    while (begin > 0 && path[begin - 1] != '/')
        begin--;
    snprintf(out, len, "%.*s", (int)(end - begin), path + begin);
}

struct pf_checkpoint_model {
    char job[PF_NAME_MAX + 1];
    char *spec; /* ps 0's "psflow_spec", or NULL (a checkpoint written before it was kept) */
    int64_t step;
    int n;
    char **names;
    int *ranks;
    int64_t (*shapes)[2];
    void **data;      /* of dtypes[i] */
    pf_dtype *dtypes; /* F32, or U64 for a dynamic table's ids */
};

void pf_checkpoint_model_destroy(pf_checkpoint_model *m) {
    if (!m)
        return;
    for (int i = 0; i < m->n; i++) {
        pf_free(m->names ? m->names[i] : NULL);
        pf_free(m->data ? m->data[i] : NULL);
    }
    pf_free(m->names);
    pf_free(m->ranks);
    pf_free(m->shapes);
    pf_free(m->data);
    pf_free(m->dtypes);
    pf_free(m->spec);
    pf_free(m);
}

const char *pf_checkpoint_model_spec(const pf_checkpoint_model *m) {
    return m->spec;
}

const char *pf_checkpoint_model_job(const pf_checkpoint_model *m) {
    return m->job;
}

int64_t pf_checkpoint_model_step(const pf_checkpoint_model *m) {
    return m->step;
}

int pf_checkpoint_model_count(const pf_checkpoint_model *m) {
    return m->n;
}

pf_tensor_view pf_checkpoint_model_get(const pf_checkpoint_model *m, int i) {
    pf_tensor_view v = {.name = m->names[i],
                        .rank = m->ranks[i],
                        .shape = {m->shapes[i][0], m->shapes[i][1]},
                        .raw = m->data[i],
                        .dtype = m->dtypes[i]};
    return v;
}

static int cmp_entry(const void *a, const void *b) {
    const shard_entry *x = a, *y = b;
    int c = strcmp(x->variable, y->variable);
    if (c)
        return c;
    return (x->row_offset > y->row_offset) - (x->row_offset < y->row_offset);
}

/* Checks that entries e[0..k) (one variable, sorted by row offset) tile it exactly. */
static pf_status check_tiling(const shard_entry *e, size_t k, const char *step_dir, pf_error *err) {
    const char *var = e[0].variable;
    if (k != (size_t)e[0].num_shards)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: variable '%s' has %zu shards, its metadata says %d", step_dir, var,
                            k, e[0].num_shards);
    int64_t next = 0;
    for (size_t j = 0; j < k; j++) {
        if (e[j].num_shards != e[0].num_shards || e[j].var_rows != e[0].var_rows ||
            e[j].var_cols != e[0].var_cols || e[j].rank != e[0].rank)
            return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                "%s: shards of variable '%s' disagree on its shape", step_dir, var);
        if (e[j].row_offset != next || e[j].shard != (int)j)
            return pf_error_set(
                err, PF_ERR_FORMAT, NULL, "%s: shards of variable '%s' %s at row %lld (shard '%s')",
                step_dir, var, e[j].row_offset < next ? "overlap" : "leave a gap",
                (long long)(e[j].row_offset < next ? e[j].row_offset : next), e[j].name);
        next += e[j].rows;
    }
    if (next != e[0].var_rows)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: shards of variable '%s' cover %lld of its %lld rows", step_dir,
                            var, (long long)next, (long long)e[0].var_rows);
    return PF_OK;
}

/* Resolves dir to a complete step folder and its manifest. */
static pf_status resolve_checkpoint(const char *dir, char *step_dir, size_t len,
                                    pf_checkpoint_manifest *m, pf_error *err) {
    char path[PF_CKPT_PATH_MAX], base[256];
    pf_status st = ckpt_join(path, sizeof path, dir, MANIFEST, err);
    if (st != PF_OK)
        return st;
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return pf_error_set(err, errno == ENOENT ? PF_ERR_NOT_FOUND : PF_ERR_IO, NULL, "%s: %s",
                            dir, strerror(errno));
    base_name(dir, base, sizeof base);
    int64_t named_step = -1;
    bool is_step = stat(path, &sb) == 0;
    if (is_step) {
        if (snprintf(step_dir, len, "%s", dir) >= (int)len)
            return pf_error_set(err, PF_ERR_INVALID, NULL, "%s: path too long", dir);
        if (ckpt_parse_step_name(base, &named_step) != 0)
            named_step = -1;
    } else {
        /* find_latest has verified the sizes and checksums already. */
        int64_t step;
        st = pf_checkpoint_find_latest(dir, PF_CKPT_VERIFY_CRC, &step, step_dir, len, err);
        if (st == PF_ERR_NOT_FOUND)
            return pf_error_set(err, st, NULL, "%s: no complete checkpoint here (%s)", dir,
                                ckpt_parse_step_name(base, &step) == 0
                                    ? "this step folder has no manifest.json"
                                    : "neither a step-<N> folder with a manifest.json nor a job "
                                      "folder holding one");
        if (st != PF_OK)
            return st;
        named_step = step;
    }
    if ((st = pf_checkpoint_manifest_read(step_dir, m, err)) != PF_OK)
        return st;
    pf_error local;
    pf_error_clear(&local);
    if (named_step >= 0 && m->step != named_step)
        st = pf_error_set(&local, PF_ERR_FORMAT, NULL, "%s says step %lld", MANIFEST,
                          (long long)m->step);
    else if (is_step)
        st = pf_checkpoint_verify(step_dir, m, PF_CKPT_VERIFY_CRC, &local);
    if (st != PF_OK) {
        pf_checkpoint_manifest_deinit(m);
        return pf_error_set(err, st, NULL, "%s: not a complete checkpoint: %s", step_dir,
                            local.message);
    }
    return PF_OK;
}

/* Builds the merged model from entries sorted by (variable, row offset). */
static pf_status assemble(shard_entry *e, size_t n, const char *step_dir, pf_checkpoint_model *m,
                          pf_error *err) {
    size_t vars = 0;
    for (size_t i = 0; i < n; i++)
        vars += i == 0 || strcmp(e[i].variable, e[i - 1].variable) != 0;
    if (vars > INT32_MAX)
        return pf_error_set(err, PF_ERR_RANGE, NULL, "%s: too many variables", step_dir);
    m->names = pf_calloc(vars, sizeof *m->names);
    m->ranks = pf_calloc(vars, sizeof *m->ranks);
    m->shapes = pf_calloc(vars, sizeof *m->shapes);
    m->data = pf_calloc(vars, sizeof *m->data);
    m->dtypes = pf_calloc(vars, sizeof *m->dtypes);
    if (!m->names || !m->ranks || !m->shapes || !m->data || !m->dtypes)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        while (i + k < n && !strcmp(e[i + k].variable, e[i].variable))
            k++;
        pf_status st = check_tiling(e + i, k, step_dir, err);
        if (st != PF_OK)
            return st;
        /* Tiling bounds the size by the shard data actually present in the files. */
        size_t count = (size_t)e[i].var_rows * (size_t)e[i].var_cols;
        int v = m->n;
        m->names[v] = pf_strdup(e[i].variable);
        m->data[v] = pf_mallocarray(count, sizeof(float));
        m->n++;
        if (!m->names[v] || !m->data[v])
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);
        m->ranks[v] = e[i].rank;
        m->shapes[v][0] = e[i].var_rows;
        m->shapes[v][1] = e[i].rank == 2 ? e[i].var_cols : 0;
        for (size_t j = i; j < i + k; j++)
            memcpy((float *)m->data[v] + (size_t)e[j].row_offset * (size_t)e[j].cols, e[j].data,
                   (size_t)(e[j].rows * e[j].cols) * sizeof(float));
        i += k;
    }
    return PF_OK;
}

/* Appends variable `name` (copied) of dtype d holding data (taken over) to m. */
static pf_status add_variable(pf_checkpoint_model *m, const char *name, int rank, int64_t rows,
                              int64_t cols, pf_dtype d, void *data) {
    size_t n = (size_t)m->n + 1;
    char **names = pf_realloc(m->names, n * sizeof *names);
    if (names)
        m->names = names;
    int *ranks = names ? pf_realloc(m->ranks, n * sizeof *ranks) : NULL;
    if (ranks)
        m->ranks = ranks;
    int64_t(*shapes)[2] = ranks ? pf_realloc(m->shapes, n * sizeof *shapes) : NULL;
    if (shapes)
        m->shapes = shapes;
    void **datas = shapes ? pf_realloc(m->data, n * sizeof *datas) : NULL;
    if (datas)
        m->data = datas;
    pf_dtype *dtypes = datas ? pf_realloc(m->dtypes, n * sizeof *dtypes) : NULL;
    if (dtypes)
        m->dtypes = dtypes;
    char *copy = dtypes ? pf_strdup(name) : NULL;
    if (!copy) {
        pf_free(data);
        return PF_ERR_NOMEM;
    }
    m->names[m->n] = copy;
    m->ranks[m->n] = rank;
    m->shapes[m->n][0] = rows;
    m->shapes[m->n][1] = cols;
    m->data[m->n] = data;
    m->dtypes[m->n] = d;
    m->n++;
    return PF_OK;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(**(char *const *const *)a, **(char *const *const *)b);
}

/* Sorts m's variables by name. */
static pf_status sort_variables(pf_checkpoint_model *m) {
    size_t n = (size_t)m->n;
    char ***order = pf_mallocarray(n ? n : 1, sizeof *order);
    pf_checkpoint_model copy = *m;
    copy.names = pf_mallocarray(n ? n : 1, sizeof *copy.names);
    copy.ranks = pf_mallocarray(n ? n : 1, sizeof *copy.ranks);
    copy.shapes = pf_mallocarray(n ? n : 1, sizeof *copy.shapes);
    copy.data = pf_mallocarray(n ? n : 1, sizeof *copy.data);
    copy.dtypes = pf_mallocarray(n ? n : 1, sizeof *copy.dtypes);
    pf_status st = order && copy.names && copy.ranks && copy.shapes && copy.data && copy.dtypes
                       ? PF_OK
                       : PF_ERR_NOMEM;
    if (st == PF_OK) {
        for (size_t i = 0; i < n; i++)
            order[i] = &m->names[i];
        qsort(order, n, sizeof *order, cmp_names);
        for (size_t i = 0; i < n; i++) {
            size_t from = (size_t)(order[i] - m->names);
            copy.names[i] = m->names[from];
            copy.ranks[i] = m->ranks[from];
            memcpy(copy.shapes[i], m->shapes[from], sizeof copy.shapes[i]);
            copy.data[i] = m->data[from];
            copy.dtypes[i] = m->dtypes[from];
        }
        memcpy(m->names, copy.names, n * sizeof *copy.names);
        memcpy(m->ranks, copy.ranks, n * sizeof *copy.ranks);
        memcpy(m->shapes, copy.shapes, n * sizeof *copy.shapes);
        memcpy(m->data, copy.data, n * sizeof *copy.data);
        memcpy(m->dtypes, copy.dtypes, n * sizeof *copy.dtypes);
    }
    pf_free(order);
    pf_free(copy.names);
    pf_free(copy.ranks);
    pf_free(copy.shapes);
    pf_free(copy.data);
    pf_free(copy.dtypes);
    return st;
}

/* The dynamic tables of the job the checkpoint records (its "psflow_spec"), each as the
 * variable "<var>" [rows, dim] of its rows sorted by id and "<var>/ids" [rows] (U64) of their
 * ids, gathered from every file (dyn_checkpoint.h); then every variable sorted by name. */
static pf_status add_dynamic(pf_checkpoint_model *m, const pf_safetensors *const *files, int n,
                             const char *step_dir, pf_error *err) {
    pf_job_spec spec;
    pf_error perr;
    if (!m->spec)
        return PF_OK; /* a checkpoint written before the spec was kept: no dynamic table */
    pf_status parsed = pf_job_spec_parse(m->spec, strlen(m->spec), &spec, &perr);
    if (parsed == PF_ERR_NOMEM)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);
    if (parsed != PF_OK)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: the job spec ps 0's file records does not parse (%s): its "
                            "dynamic tables cannot be found",
                            step_dir, perr.message);
    pf_var_info vars[PF_MAX_VARS];
    pf_model_layout(&spec.model, vars);
    pf_status st = PF_OK;
    for (int f = 0; st == PF_OK && f < spec.model.n_embeddings; f++) {
        if (spec.model.embeddings[f].kind != PF_TABLE_DYNAMIC)
            continue;
        uint64_t *ids = NULL;
        float *values = NULL;
        int64_t rows = 0;
        int dim = 0;
        char name[PF_VAR_NAME_MAX + 8];
        st = pf_dyn_export_rows(files, n, vars[f].name, &ids, &values, &rows, &dim, err);
        if (st == PF_OK) {
            st = add_variable(m, vars[f].name, 2, rows, dim, PF_DTYPE_F32, values); /* takes it */
            values = NULL;
            if (st != PF_OK)
                pf_error_set(err, st, NULL, "%s: out of memory", step_dir);
        }
        if (st == PF_OK) {
            snprintf(name, sizeof name, "%s/ids", vars[f].name);
            st = add_variable(m, name, 1, rows, 0, PF_DTYPE_U64, ids);
            ids = NULL;
            if (st != PF_OK)
                pf_error_set(err, st, NULL, "%s: out of memory", step_dir);
        }
        pf_free(ids);
        pf_free(values);
    }
    pf_job_spec_deinit(&spec);
    if (st == PF_OK && sort_variables(m) != PF_OK)
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);
    return st;
}

pf_status pf_checkpoint_merge(const char *dir, pf_checkpoint_model **out, pf_error *err) {
    *out = NULL;
    char step_dir[PF_CKPT_PATH_MAX], path[PF_CKPT_PATH_MAX];
    pf_checkpoint_manifest man;
    pf_status st = resolve_checkpoint(dir, step_dir, sizeof step_dir, &man, err);
    if (st != PF_OK)
        return st;
    pf_safetensors **files = pf_calloc((size_t)man.num_ps, sizeof *files);
    json_t **metas = pf_calloc((size_t)man.num_ps, sizeof *metas);
    pf_checkpoint_model *m = pf_calloc(1, sizeof *m);
    shard_entry *entries = NULL;
    size_t n_entries = 0, cap = 0;
    if (!files || !metas || !m) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);
        goto done;
    }
    snprintf(m->job, sizeof m->job, "%s", man.job);
    m->step = man.step;
    for (int i = 0; i < man.num_ps && st == PF_OK; i++) {
        if ((st = ckpt_join(path, sizeof path, step_dir, man.files[i].name, err)) != PF_OK ||
            (st = pf_safetensors_read_any(path, &files[i], err)) != PF_OK)
            break;
        const char *job = pf_safetensors_meta(files[i], "psflow_job");
        const char *text = pf_safetensors_meta(files[i], "psflow_shards");
        if (job && strcmp(job, man.job) != 0) {
            st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: belongs to job '%s', not '%s'", path,
                              job, man.job);
            break;
        }
        if (!text) {
            st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: no 'psflow_shards' metadata", path);
            break;
        }
        const char *spec = pf_safetensors_meta(files[i], "psflow_spec");
        if (i == 0 && spec && !(m->spec = pf_strdup(spec))) {
            st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
            break;
        }
        json_error_t jerr;
        metas[i] = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
        st = ckpt_collect_entries(files[i], path, metas[i], &entries, &n_entries, &cap, err);
    }
    if (st != PF_OK)
        goto done;
    if (n_entries == 0) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: the checkpoint holds no variables",
                          step_dir);
        goto done;
    }
    qsort(entries, n_entries, sizeof *entries, cmp_entry);
    st = assemble(entries, n_entries, step_dir, m, err);
    if (st == PF_OK)
        st = add_dynamic(m, (const pf_safetensors *const *)files, man.num_ps, step_dir, err);
done:
    for (int i = 0; files && metas && i < man.num_ps; i++) {
        pf_safetensors_destroy(files[i]);
        json_decref(metas[i]);
    }
    pf_free(files);
    pf_free(metas);
    pf_free(entries);
    pf_checkpoint_manifest_deinit(&man);
    if (st != PF_OK) {
        pf_checkpoint_model_destroy(m);
        return st;
    }
    *out = m;
    return PF_OK;
}

pf_status pf_checkpoint_model_write(const pf_checkpoint_model *m, const char *path, pf_error *err) {
    pf_tensor_view *t = pf_mallocarray((size_t)(m->n ? m->n : 1), sizeof *t);
    if (!t)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
    int k = 0; /* 8-byte elements first: aligned right after the header */
    for (int i = 0; i < m->n; i++)
        if (m->dtypes[i] == PF_DTYPE_U64)
            t[k++] = pf_checkpoint_model_get(m, i);
    for (int i = 0; i < m->n; i++)
        if (m->dtypes[i] != PF_DTYPE_U64)
            t[k++] = pf_checkpoint_model_get(m, i);
    char step[24];
    snprintf(step, sizeof step, "%lld", (long long)m->step);
    const char *keys[] = {"psflow_job", "global_step", "psflow_spec"};
    const char *values[] = {m->job, step, m->spec};
    pf_status st = pf_safetensors_write(path, t, m->n, keys, values, m->spec ? 3 : 2, err);
    pf_free(t);
    return st;
}

pf_status pf_checkpoint_export(const char *dir, const char *out_path, int64_t *step,
                               pf_error *err) {
    pf_checkpoint_model *m;
    pf_status st = pf_checkpoint_merge(dir, &m, err);
    if (st != PF_OK)
        return st;
    st = pf_checkpoint_model_write(m, out_path, err);
    if (st == PF_OK && step)
        *step = m->step;
    pf_checkpoint_model_destroy(m);
    return st;
}

/* "[a]" or "[a, b]" into out. */
static void shape_text(int rank, const int64_t *shape, char *out, size_t cap) {
    if (rank == 2)
        snprintf(out, cap, "[%lld, %lld]", (long long)shape[0], (long long)shape[1]);
    else
        snprintf(out, cap, "[%lld]", (long long)(rank == 1 ? shape[0] : 0));
}

pf_status pf_checkpoint_model_params(const pf_checkpoint_model *m, const pf_model_spec *model,
                                     float *params, pf_error *err) {
    pf_var_info vars[PF_MAX_VARS];
    int n_vars = pf_model_layout(model, vars);
    int n = pf_checkpoint_model_count(m);
    for (int v = 0; v < n_vars; v++) {
        pf_tensor_view t = {0};
        int found = 0;
        if (v < model->n_embeddings && model->embeddings[v].kind == PF_TABLE_DYNAMIC)
            continue; /* no part of the vector: its rows are by id */
        for (int i = 0; i < n && !found; i++) {
            t = pf_checkpoint_model_get(m, i);
            found = strcmp(t.name, vars[v].name) == 0;
        }
        if (!found)
            return pf_error_set(err, PF_ERR_FORMAT, NULL, "the checkpoint has no variable %s",
                                vars[v].name);
        if (t.rank != vars[v].rank || t.shape[0] != vars[v].shape[0] ||
            (t.rank == 2 && t.shape[1] != vars[v].shape[1])) {
            char have[48], want[48];
            shape_text(t.rank, t.shape, have, sizeof have);
            shape_text(vars[v].rank, vars[v].shape, want, sizeof want);
            return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                "variable %s has shape %s in the checkpoint, the model %s",
                                vars[v].name, have, want);
        }
        memcpy(params + vars[v].offset, t.data, vars[v].count * sizeof(float));
    }
    return PF_OK;
}
