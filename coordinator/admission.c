/* admission.c - the coordinator's admission checks (see admission.h). */
#include "coordinator/admission.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "psflow/footprint.h"
#include "psflow/placement.h"
#include "psflow/stream.h"

/* True when path (absolute, resolved) is root itself or lies below it. */
static int under(const char *path, const char *root) {
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/')
        return 1;
    return !strncmp(path, root, n) && (path[n] == '/' || path[n] == '\0');
}

static pf_status check_path(const coord_limits *l, const char *path, const char *ptr,
                            pf_error *err) {
    char resolved[PATH_MAX];
    if (!realpath(path, resolved))
        return pf_error_set(err, PF_ERR_SPEC, ptr,
                            "%s: '%.200s' cannot be resolved on the coordinator: %s (data must "
                            "be where the coordinator can see it, under a data root)",
                            ptr, path, strerror(errno));
    int ok = 0;
    for (int i = 0; i < l->n_data_roots && !ok; i++)
        ok = under(resolved, l->data_roots[i]);
    if (!ok) {
        char roots[600] = "";
        for (int i = 0; i < l->n_data_roots; i++) {
            size_t used = strlen(roots);
            snprintf(roots + used, sizeof roots - used, "%s%s", i ? ", " : "", l->data_roots[i]);
        }
        return pf_error_set(err, PF_ERR_SPEC, ptr,
                            "%s: '%.200s' (%.200s) is outside the data roots (%s); the "
                            "coordinator's --data-root names them",
                            ptr, path, resolved, l->n_data_roots ? roots : "none");
    }
    struct stat sb;
    if (stat(resolved, &sb) != 0 || !S_ISREG(sb.st_mode))
        return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: '%.200s' is not a regular file", ptr, path);
    return PF_OK;
}

pf_status coord_limits_resolve(coord_limits *l, char (*storage)[PATH_MAX], const char **ptrs,
                               pf_error *err) {
    int k = 0;
    for (int i = 0; i < l->n_data_roots && i < COORD_MAX_DATA_ROOTS; i++) {
        if (realpath(l->data_roots[i], storage[k])) {
            ptrs[k] = storage[k];
            k++;
        } else if (!l->data_roots_optional) {
            return pf_error_set(err, PF_ERR_IO, NULL, "--data-root %s: %s", l->data_roots[i],
                                strerror(errno));
        }
    }
    l->data_roots = ptrs;
    l->n_data_roots = k;
    return PF_OK;
}

/* Whether the train (or test) entries of spec may be folders and glob patterns: criteo data,
 * and the training files of streamed csv or libsvm data (the readers' rules, data.h and
 * stream.h). */
static bool entries_expand(const pf_job_spec *spec, bool train) {
    const pf_data_spec *d = &spec->data;
    return d->format == PF_DATA_CRITEO ||
           (train && d->streaming && (d->format == PF_DATA_CSV || d->format == PF_DATA_LIBSVM));
}

/* One data entry at ptr: a file, or where entries_expand says so also a folder or a glob
 * pattern, each file it stands for (pf_input_expand) a regular file under a data root. */
static pf_status check_entry(const coord_limits *l, bool expand, char *entry, const char *ptr,
                             pf_error *err) {
    if (!expand)
        return check_path(l, entry, ptr, err);
    char **paths = NULL;
    int n = 0;
    pf_status st = pf_input_expand(&entry, 1, &paths, &n, err);
    if (st == PF_ERR_NOMEM)
        return st;
    if (st != PF_OK) {
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: %s", ptr, why);
    }
    for (int k = 0; k < n && st == PF_OK; k++)
        st = check_path(l, paths[k], ptr, err);
    pf_input_free(paths, n);
    return st;
}

pf_status coord_admit_data(const coord_limits *l, const pf_job_spec *spec, pf_error *err) {
    const pf_data_spec *d = &spec->data;
    char ptr[40];
    for (int i = 0; i < d->n_train; i++) {
        snprintf(ptr, sizeof ptr, "/data/train/%d", i);
        pf_status st = check_entry(l, entries_expand(spec, true), d->train[i], ptr, err);
        if (st != PF_OK)
            return st;
    }
    for (int i = 0; i < d->n_test; i++) {
        snprintf(ptr, sizeof ptr, "/data/test/%d", i);
        pf_status st = check_entry(l, entries_expand(spec, false), d->test[i], ptr, err);
        if (st != PF_OK)
            return st;
    }
    return PF_OK;
}

/* The largest memory a live agent of role registered; 0 when none did. */
static int64_t largest_agent(const coord_cluster *c, const char *role) {
    int64_t most = 0;
    for (int i = 0; i < c->n_nodes; i++) {
        const coord_node *n = c->nodes[i];
        if (!n->lost && !n->deleted && !strcmp(n->role, role) && n->memory > most)
            most = n->memory;
    }
    return most;
}

pf_status coord_admit_size(const coord_limits *l, const coord_cluster *c, const pf_job_spec *spec,
                           pf_error *err) {
    char need[32], have[32];
    if (spec->replicas.ps > l->max_replicas || spec->replicas.worker > l->max_replicas) {
        const char *field = spec->replicas.ps > l->max_replicas ? "ps" : "worker";
        return pf_error_set(
            err, PF_ERR_SPEC,
            spec->replicas.ps > l->max_replicas ? "/replicas/ps" : "/replicas/worker",
            "/replicas/%s: %d tasks, more than this coordinator's limit of %d "
            "(--max-replicas)",
            field, spec->replicas.ps > l->max_replicas ? spec->replicas.ps : spec->replicas.worker,
            l->max_replicas);
    }
    if (spec->training.max_steps > l->max_steps)
        return pf_error_set(err, PF_ERR_SPEC, "/training/max_steps",
                            "/training/max_steps: %lld, more than this coordinator's limit of "
                            "%lld (--max-steps-limit)",
                            (long long)spec->training.max_steps, (long long)l->max_steps);
    pf_footprint fp;
    pf_footprint_estimate(spec, &fp);
    pf_status st = pf_footprint_check(spec, &fp, err);
    if (st == PF_OK)
        st = pf_footprint_check_cluster(spec, err);
    if (st != PF_OK)
        return st;
    if (fp.shards > l->max_shards)
        return pf_error_set(err, PF_ERR_SPEC, "/placement/partitioner",
                            "/placement/partitioner: cuts the model into %lld shards, more than "
                            "this coordinator's limit of %d (--max-shards)",
                            (long long)fp.shards, l->max_shards);
    if (fp.model_bytes > l->max_model_bytes) {
        pf_footprint_format_bytes(fp.model_bytes, need, sizeof need);
        pf_footprint_format_bytes(l->max_model_bytes, have, sizeof have);
        return pf_error_set(err, PF_ERR_SPEC, "/model",
                            "/model: %lld parameters and %d optimizer slots per parameter take "
                            "%s, more than this coordinator's limit of %s (--max-model-bytes)",
                            (long long)fp.params, fp.slots, need, have);
    }
    pf_placement p;
    if (pf_placement_compute(spec, &p) != PF_OK)
        return PF_ERR_NOMEM;
    st = pf_footprint_check_placement(spec, &p, err);
    int64_t ps_need = 0;
    int ps_task = 0;
    for (int t = 0; t < p.n_ps; t++) {
        int64_t b = pf_footprint_ps_bytes(spec, &p, t);
        if (b > ps_need) {
            ps_need = b;
            ps_task = t;
        }
    }
    pf_placement_deinit(&p);
    if (st != PF_OK)
        return st;
    int64_t ps_have = largest_agent(c, "ps");
    if (ps_have > 0 && ps_need > ps_have) {
        pf_footprint_format_bytes(ps_need, need, sizeof need);
        pf_footprint_format_bytes(ps_have, have, sizeof have);
        bool dynamic = pf_model_has_dynamic(&spec->model);
        return pf_error_set(err, PF_ERR_SPEC, "/replicas/ps",
                            "/replicas/ps: ps task %d needs about %s (its shards' values, "
                            "gradients and optimizer slots, push and sync buffers%s), more than "
                            "the largest ps agent has (%s): spread the model over more ps "
                            "tasks%s",
                            ps_task, need,
                            dynamic ? ", its share of each dynamic table at its max_rows" : "",
                            have, dynamic ? " or lower max_rows" : "");
    }
    int64_t worker_have = largest_agent(c, "worker");
    if (worker_have > 0 && fp.worker_bytes > worker_have) {
        pf_footprint_format_bytes(fp.worker_bytes, need, sizeof need);
        pf_footprint_format_bytes(worker_have, have, sizeof have);
        return pf_error_set(err, PF_ERR_SPEC, "/model",
                            "/model: each training task needs about %s (the parameters and "
                            "gradients twice over, batch buffers%s), more than the largest "
                            "worker agent has (%s)",
                            need, pf_data_is_synthetic(&spec->data) ? ", the data set" : "", have);
    }
    return PF_OK;
}
