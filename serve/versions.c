/* versions.c - loading and switching model versions (see versions.h). */
#include "serve/versions.h"

#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "psflow/checkpoint.h"
#include "psflow/mem.h"
#include "psflow/model.h"

#define REFUSED_MAX 64 /* refused steps remembered; older ones may be tried again */

typedef struct version {
    serve_version pub;
    float *params;
    int refs; /* users, plus one while it is the serving version */
} version;

struct serve_versions {
    const pf_model_spec *model;
    char job_dir[PF_CKPT_PATH_MAX];
    const char *log;
    size_t n_params;
    pthread_mutex_t mu;
    version *current;
    int64_t loaded, refused;
    int64_t refused_steps[REFUSED_MAX];
    int n_refused;
};

static void drop(version *v) {
    pf_free(v->params);
    pf_free(v);
}

pf_status serve_versions_create(const pf_model_spec *model, const char *job_dir, const char *log,
                                serve_versions **out) {
    *out = NULL;
    serve_versions *v = pf_calloc(1, sizeof *v);
    if (!v)
        return PF_ERR_NOMEM;
    v->model = model;
    snprintf(v->job_dir, sizeof v->job_dir, "%s", job_dir);
    v->log = log;
    v->n_params = pf_model_num_params(model);
    pthread_mutex_init(&v->mu, NULL);
    *out = v;
    return PF_OK;
}

void serve_versions_destroy(serve_versions *v) {
    if (!v)
        return;
    if (v->current && --v->current->refs == 0)
        drop(v->current);
    pthread_mutex_destroy(&v->mu);
    pf_free(v);
}

static int was_refused(const serve_versions *v, int64_t step) {
    for (int i = 0; i < v->n_refused; i++)
        if (v->refused_steps[i] == step)
            return 1;
    return 0;
}

/* Merges and checks the checkpoint of `step` into a new version. */
static pf_status load(serve_versions *v, int64_t step, version **out, pf_error *err) {
    char dir[PF_CKPT_PATH_MAX];
    int len = snprintf(dir, sizeof dir, "%s/step-%" PRId64, v->job_dir, step);
    if (len < 0 || (size_t)len >= sizeof dir)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    version *nv = pf_calloc(1, sizeof *nv);
    float *params = pf_mallocarray(v->n_params, sizeof(float));
    if (!nv || !params) {
        pf_free(nv);
        pf_free(params);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    }
    pf_checkpoint_model *m = NULL;
    pf_status st = pf_checkpoint_merge(dir, &m, err);
    if (st == PF_OK)
        st = pf_checkpoint_model_params(m, v->model, params, err);
    if (st == PF_OK && pf_checkpoint_model_step(m) != step)
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "its manifest names step %" PRId64,
                          pf_checkpoint_model_step(m));
    pf_checkpoint_model_destroy(m);
    if (st == PF_OK && pf_first_nonfinite(params, v->n_params) < v->n_params)
        st = pf_error_set(err, PF_ERR_NONFINITE, NULL, "it holds a non-finite value");
    if (st != PF_OK) {
        pf_free(nv);
        pf_free(params);
        return st;
    }
    nv->params = params;
    nv->pub.params = params;
    nv->pub.step = step;
    nv->refs = 1;
    *out = nv;
    return PF_OK;
}

int serve_versions_refresh(serve_versions *v) {
    int64_t *steps = NULL;
    int n = 0;
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_checkpoint_list(v->job_dir, 0, &steps, &n, &err);
    if (st == PF_ERR_NOMEM)
        return -1;
    if (st != PF_OK)
        return 0; /* no folder yet, or unreadable now: looked at again next time */
    int64_t serving = -1;
    pthread_mutex_lock(&v->mu);
    if (v->current)
        serving = v->current->pub.step;
    pthread_mutex_unlock(&v->mu);
    int rc = 0;
    for (int i = n - 1; i >= 0 && steps[i] > serving && rc == 0; i--) {
        if (was_refused(v, steps[i]))
            continue;
        version *nv = NULL;
        pf_error_clear(&err);
        st = load(v, steps[i], &nv, &err);
        if (st == PF_ERR_NOMEM) {
            rc = -1;
            break;
        }
        if (st != PF_OK) {
            if (serving >= 0)
                fprintf(stderr,
                        "%s: refusing checkpoint step-%" PRId64 " of %s: %s; still serving step "
                        "%" PRId64 "\n",
                        v->log, steps[i], v->job_dir, err.message, serving);
            else
                fprintf(stderr, "%s: refusing checkpoint step-%" PRId64 " of %s: %s\n", v->log,
                        steps[i], v->job_dir, err.message);
            pthread_mutex_lock(&v->mu);
            v->refused_steps[v->refused % REFUSED_MAX] = steps[i];
            v->refused++;
            v->n_refused = v->refused < REFUSED_MAX ? (int)v->refused : REFUSED_MAX;
            pthread_mutex_unlock(&v->mu);
            continue;
        }
        pthread_mutex_lock(&v->mu);
        version *old = v->current;
        v->current = nv;
        v->loaded++;
        if (old && --old->refs == 0)
            drop(old);
        pthread_mutex_unlock(&v->mu);
        fprintf(stderr, "%s: serving step %" PRId64 " of %s%s\n", v->log, steps[i], v->job_dir,
                serving >= 0 ? " (reloaded)" : "");
        rc = 1;
    }
    pf_free(steps);
    return rc;
}

const serve_version *serve_versions_acquire(serve_versions *v) {
    pthread_mutex_lock(&v->mu);
    version *cur = v->current;
    if (cur)
        cur->refs++;
    pthread_mutex_unlock(&v->mu);
    return cur ? &cur->pub : NULL;
}

void serve_versions_release(serve_versions *v, const serve_version *pub) {
    if (!pub)
        return;
    version *cur = (version *)((char *)pub - offsetof(version, pub));
    pthread_mutex_lock(&v->mu);
    int last = --cur->refs == 0;
    pthread_mutex_unlock(&v->mu);
    if (last)
        drop(cur);
}

void serve_versions_counts(serve_versions *v, int64_t *step, int64_t *loaded, int64_t *refused) {
    pthread_mutex_lock(&v->mu);
    *step = v->current ? v->current->pub.step : -1;
    *loaded = v->loaded;
    *refused = v->refused;
    pthread_mutex_unlock(&v->mu);
}
