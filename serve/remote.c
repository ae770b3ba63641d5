/* remote.c - serving from read-only ps tasks (see remote.h). */
#include "serve/remote.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "psflow/backend.h"
#include "psflow/checkpoint.h"
#include "psflow/clock.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/placement.h"
#include "psflow/wire.h"
#include "worker/link.h"
#include "worker/rows.h"

struct serve_remote {
    serve_remote_options o;
    char job_dir[PF_CKPT_PATH_MAX];
    worker_rows rows;
    pf_placement placement;
    worker_row_plan plan;
    int has_placement, has_plan;
    pf_model *model; /* the compact model: one pass's rows, then the dense variables */
    worker_link *link;
    float *x;      /* [capacity x width]: a pass's examples, ids rewritten to compact rows */
    float *params; /* [rows.n_params] */
    uint64_t *versions;
    int width;
    pthread_mutex_t mu; /* a pass, or a switch; and the fields below */
    int64_t step;       /* the checkpoint every ps holds; -1: none yet (or unknown) */
    int64_t loaded, refused, refused_max;
};

void serve_remote_destroy(serve_remote *r) {
    if (!r)
        return;
    worker_link_destroy(r->link);
    pf_model_destroy(r->model);
    if (r->has_plan)
        worker_row_plan_deinit(&r->plan);
    if (r->has_placement)
        pf_placement_deinit(&r->placement);
    pf_free(r->x);
    pf_free(r->params);
    pf_free(r->versions);
    pthread_mutex_destroy(&r->mu);
    pf_free(r);
}

pf_status serve_remote_create(const serve_remote_options *o, serve_remote **out, pf_error *err) {
    *out = NULL;
    const pf_job_spec *spec = o->spec;
    if (spec->model.n_embeddings < 1)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "--ps serves a model with embedding tables; job %s has none (serve it "
                            "from the checkpoint alone)",
                            spec->name);
    serve_remote *r = pf_calloc(1, sizeof *r);
    if (!r)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    r->o = *o;
    snprintf(r->job_dir, sizeof r->job_dir, "%s", o->job_dir);
    r->o.job_dir = r->job_dir;
    r->step = -1;
    r->refused_max = -1;
    pthread_mutex_init(&r->mu, NULL);
    r->width = pf_model_input_width(&spec->model);
    pf_status st = worker_rows_init(&r->rows, &spec->model, o->capacity);
    if (st == PF_OK && (st = pf_placement_compute(spec, &r->placement)) == PF_OK)
        r->has_placement = 1;
    if (st == PF_OK && (st = worker_row_plan_init(&r->plan, &r->rows, &r->placement)) == PF_OK)
        r->has_plan = 1;
    if (st == PF_OK)
        st = pf_model_create(&r->rows.compact, pf_backend_openblas(), o->capacity, &r->model);
    if (st == PF_OK &&
        (!(r->x = pf_mallocarray((size_t)o->capacity * (size_t)r->width, sizeof(float))) ||
         !(r->params = pf_mallocarray(r->rows.n_params, sizeof(float))) ||
         !(r->versions = pf_calloc((size_t)spec->replicas.ps, sizeof(uint64_t)))))
        st = PF_ERR_NOMEM;
    if (st != PF_OK) {
        serve_remote_destroy(r);
        return pf_error_set(err, st, NULL, "cannot set up the model's rows: %s", pf_strerror(st));
    }
    worker_link_options lo = {.spec = spec,
                              .ps_addrs = o->ps_addrs,
                              .task = o->reader,
                              .role = PF_WIRE_ROLE_READER,
                              .incarnation = (uint64_t)(pf_clock_wall() * 1e6),
                              .retry_seconds = o->retry_seconds,
                              .task_key = o->task_key,
                              .ca_file = o->ca_file,
                              .rows = &r->rows};
    if ((st = worker_link_create(&lo, &r->link, err)) != PF_OK) {
        serve_remote_destroy(r);
        return st;
    }
    *out = r;
    return PF_OK;
}

/* Every ps to checkpoint `step` (under r->mu). Returns 0, or -1 after logging why not; then
 * every ps is back on the serving step (or, when even that fails, no step serves). */
static int switch_to(serve_remote *r, int64_t step) {
    pf_error err;
    pf_error_clear(&err);
    int64_t serving = r->step;
    if (worker_link_restore(r->link, (uint64_t)step, 1.0f, &err) == PF_OK) {
        r->step = step;
        r->loaded++;
        fprintf(stderr, "%s: serving step %" PRId64 " of %s from %d read-only ps task%s%s\n",
                r->o.log, step, r->job_dir, r->o.spec->replicas.ps,
                r->o.spec->replicas.ps == 1 ? "" : "s", serving >= 0 ? " (reloaded)" : "");
        return 0;
    }
    r->refused++;
    if (step > r->refused_max)
        r->refused_max = step;
    fprintf(stderr, "%s: refusing checkpoint step-%" PRId64 " of %s: %s%s\n", r->o.log, step,
            r->job_dir, err.message, serving >= 0 ? "; back to the serving step" : "");
    if (serving < 0)
        return -1;
    /* Some ps may have switched before another refused: all of them go back. */
    pf_error_clear(&err);
    if (worker_link_restore(r->link, (uint64_t)serving, 1.0f, &err) != PF_OK) {
        r->step = -1;
        fprintf(stderr,
                "%s: the ps tasks cannot go back to step %" PRId64 " (%s): nothing serves "
                "until a newer checkpoint restores\n",
                r->o.log, serving, err.message);
        return -1;
    }
    fprintf(stderr, "%s: still serving step %" PRId64 "\n", r->o.log, serving);
    return -1;
}

int serve_remote_refresh(serve_remote *r) {
    int64_t *steps = NULL;
    int n = 0;
    pf_error err;
    pf_error_clear(&err);
    if (pf_checkpoint_list(r->job_dir, 0, &steps, &n, &err) != PF_OK)
        return 0; /* no folder yet, or unreadable now: looked at again next time */
    int64_t newest = n ? steps[n - 1] : -1;
    pf_free(steps);
    pthread_mutex_lock(&r->mu);
    int rc = newest > r->step && newest > r->refused_max && switch_to(r, newest) == 0;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* Pulls the pass's rows and the dense variables (under r->mu). A ps that restarted restored
 * its newest checkpoint on its own: it is put back on the serving step and pulled again. */
static int pull(serve_remote *r) {
    pf_error err;
    for (int tries = 0; tries < 2; tries++) {
        pf_error_clear(&err);
        worker_link_set_plan(r->link, &r->plan);
        pf_status st = worker_link_pull(r->link, NULL, r->params, r->versions, &err);
        worker_link_set_plan(r->link, NULL);
        if (st != PF_OK) {
            fprintf(stderr, "%s: pulling a pass's rows: %s\n", r->o.log, err.message);
            return -1;
        }
        int ps;
        uint64_t version;
        if (!worker_link_take_restart(r->link, &ps, &version))
            return 0;
        fprintf(stderr, "%s: ps %d restarted (version %" PRIu64 "): back to step %" PRId64 "\n",
                r->o.log, ps, version, r->step);
        pf_error_clear(&err);
        if (worker_link_restore(r->link, (uint64_t)r->step, 1.0f, &err) != PF_OK) {
            fprintf(stderr, "%s: %s\n", r->o.log, err.message);
            return -1;
        }
    }
    return -1;
}

int64_t serve_remote_run(serve_remote *r, const float *x, int n, float *y) {
    pthread_mutex_lock(&r->mu);
    int64_t step = r->step;
    if (step >= 0 && n > 0) {
        memcpy(r->x, x, (size_t)n * (size_t)r->width * sizeof(float));
        worker_rows_plan(&r->rows, &r->placement, r->x, n, &r->plan);
        if (pull(r) == 0)
            pf_model_predict(r->model, r->params, r->x, n, y);
        else
            step = -1;
    }
    pthread_mutex_unlock(&r->mu);
    return step;
}

void serve_remote_counts(serve_remote *r, int64_t *step, int64_t *loaded, int64_t *refused) {
    pthread_mutex_lock(&r->mu);
    *step = r->step;
    *loaded = r->loaded;
    *refused = r->refused;
    pthread_mutex_unlock(&r->mu);
}
