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

#define REFUSED_MAX   64     /* refused steps remembered; older ones may be tried again */
#define RESTORE_LIMIT 3600.0 /* seconds a RESTORE may take: reading a ps's share of a table */

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
    int stopping;       /* serve_remote_stop: reconnecting is given up (__atomic) */
    int switching;      /* a RESTORE is in flight (__atomic): serve_remote_switching */
    pthread_mutex_t mu; /* a pass or a switch: the link, the buffers and the fields below */
    int64_t step;       /* the checkpoint every ps was told to hold; -1: none yet */
    /* The ps tasks may not all hold `step`: a RESTORE went unanswered (a ps unreachable, a
     * newer server took the ps tasks) or a restarted ps could not be put back. No pass runs
     * until a restore succeeds (serve_remote_refresh tries again). */
    int dirty;
    int64_t refused_steps[REFUSED_MAX];
    int n_refused;
    pthread_mutex_t stats_mu; /* what serve_remote_counts reads, never held across the network */
    int64_t pub_step, loaded, refused;
};

/* Publishes the serving step: -1 while none is, or while the ps tasks may not hold it. */
static void publish(serve_remote *r, int switched, int refused) {
    pthread_mutex_lock(&r->stats_mu);
    r->pub_step = r->dirty ? -1 : r->step;
    r->loaded += switched;
    r->refused += refused;
    pthread_mutex_unlock(&r->stats_mu);
}

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
    pthread_mutex_destroy(&r->stats_mu);
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
    if (o->n_ps != spec->replicas.ps)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%d ps addresses for %d ps tasks", o->n_ps,
                            spec->replicas.ps);
    serve_remote *r = pf_calloc(1, sizeof *r);
    if (!r)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    r->o = *o;
    snprintf(r->job_dir, sizeof r->job_dir, "%s", o->job_dir);
    r->o.job_dir = r->job_dir;
    r->step = r->pub_step = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->stats_mu, NULL);
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
                              .stop = &r->stopping,
                              .task_key = o->task_key,
                              .ca_file = o->ca_file,
                              .rows = &r->rows};
    /* The ps tasks listen once they restored a checkpoint: wait for them (until stopped). */
    for (int said = 0; (st = worker_link_create(&lo, &r->link, err)) == PF_ERR_UNAVAILABLE &&
                       !(o->stop && *o->stop);) {
        if (!said++)
            fprintf(stderr, "%s: waiting for the read-only ps tasks: %s\n", o->log, err->message);
        pf_clock_sleep(1.0);
    }
    if (st != PF_OK) {
        serve_remote_destroy(r);
        return st;
    }
    worker_link_set_reply_limit(r->link, o->retry_seconds);
    *out = r;
    return PF_OK;
}

int serve_remote_switching(serve_remote *r) {
    return __atomic_load_n(&r->switching, __ATOMIC_SEQ_CST);
}

void serve_remote_stop(serve_remote *r) {
    __atomic_store_n(&r->stopping, 1, __ATOMIC_SEQ_CST);
}

/* Asks every ps to restore checkpoint `step` (under r->mu), waiting as long as reading it
 * takes. A restart a ps went through meanwhile is covered: it restored `step` too. */
static pf_status restore(serve_remote *r, int64_t step, pf_error *err) {
    pf_error_clear(err);
    __atomic_store_n(&r->switching, 1, __ATOMIC_SEQ_CST);
    worker_link_set_reply_limit(r->link, RESTORE_LIMIT);
    pf_status st = worker_link_restore(r->link, (uint64_t)step, 1.0f, err);
    worker_link_set_reply_limit(r->link, r->o.retry_seconds);
    __atomic_store_n(&r->switching, 0, __ATOMIC_SEQ_CST);
    int ps;
    uint64_t version;
    if (st == PF_OK)
        worker_link_take_restart(r->link, &ps, &version);
    return st;
}

static int was_refused(const serve_remote *r, int64_t step) {
    for (int i = 0; i < r->n_refused && i < REFUSED_MAX; i++)
        if (r->refused_steps[i] == step)
            return 1;
    return 0;
}

/* A RESTORE of `step` that did not happen everywhere (under r->mu): which step each ps holds
 * is not known, so no pass runs until a refresh restores one on all of them. Returns -1. */
static int unknown(serve_remote *r, const char *what, int64_t step, const char *why) {
    r->dirty = 1;
    publish(r, 0, 0);
    fprintf(stderr,
            "%s: cannot %s step %" PRId64 " now: %s; not answering until they hold one step "
            "again\n",
            r->o.log, what, step, why);
    return -1;
}

/* Every ps to checkpoint `step` (under r->mu). Returns 0 when they all hold it; 1 when a ps
 * refused it (it does not verify: remembered, never tried again) and every ps is back on the
 * serving step; -1 when it could not be done now (a ps unreachable, or no longer this
 * server's), which leaves the ps tasks dirty and is tried again at the next refresh. */
static int switch_to(serve_remote *r, int64_t step) {
    pf_error err;
    int64_t serving = r->step;
    pf_status st = restore(r, step, &err);
    if (st == PF_OK) {
        r->step = step;
        r->dirty = 0;
        publish(r, 1, 0);
        fprintf(stderr, "%s: serving step %" PRId64 " of %s from %d read-only ps task%s%s\n",
                r->o.log, step, r->job_dir, r->o.n_ps, r->o.n_ps == 1 ? "" : "s",
                serving >= 0 ? " (reloaded)" : "");
        return 0;
    }
    if (st != PF_ERR_FORMAT) /* no answer, or not this server's, or not now: nothing known */
        return unknown(r, "switch the ps tasks to", step, err.message);
    r->refused_steps[r->n_refused++ % REFUSED_MAX] = step;
    publish(r, 0, 1);
    fprintf(stderr, "%s: refusing checkpoint step-%" PRId64 " of %s: %s%s\n", r->o.log, step,
            r->job_dir, err.message, serving >= 0 ? "; back to the serving step" : "");
    if (serving < 0)
        return 1;
    /* Some ps may have switched before another refused: all of them go back. */
    if ((st = restore(r, serving, &err)) != PF_OK)
        return unknown(r, "put the ps tasks back on", serving, err.message);
    r->dirty = 0;
    publish(r, 0, 0);
    fprintf(stderr, "%s: still serving step %" PRId64 "\n", r->o.log, serving);
    return 1;
}

int serve_remote_refresh(serve_remote *r) {
    int64_t *steps = NULL;
    int n = 0;
    pf_error err;
    pf_error_clear(&err);
    if (pf_checkpoint_list(r->job_dir, 0, &steps, &n, &err) != PF_OK)
        return 0; /* no folder yet, or unreadable now: looked at again next time */
    pthread_mutex_lock(&r->mu);
    int switched = 0;
    /* The newest that every ps restores, newest first; one that could not be tried now
     * stops the search until the next refresh. Dirty ps tasks take the newest that
     * restores, the serving step or an older one too (the serving one may have been
     * deleted by checkpoint.keep meanwhile). */
    for (int i = n - 1; i >= 0 && (r->dirty || steps[i] > r->step); i--) {
        if (was_refused(r, steps[i]))
            continue;
        int k = switch_to(r, steps[i]);
        if (k <= 0) {
            switched = k == 0;
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    pf_free(steps);
    return switched;
}

/* Pulls the pass's rows and the dense variables (under r->mu). A ps that restarted restored
 * its newest checkpoint on its own: it is put back on the serving step and pulled again;
 * when that fails the ps tasks are dirty until a refresh restores them. */
static int pull(serve_remote *r) {
    pf_error err;
    for (int tries = 0; tries < 2; tries++) {
        pf_error_clear(&err);
        worker_link_set_plan(r->link, &r->plan);
        pf_status st = worker_link_pull(r->link, NULL, r->params, r->versions, &err);
        worker_link_set_plan(r->link, NULL);
        /* An ERROR answer (another server took the ps tasks: STALE_INCARNATION) says
         * the ps tasks are not this server's to read: none serves until a restore. */
        if (st == PF_ERR_INVALID)
            return unknown(r, "read", r->step, err.message);
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
        if (restore(r, r->step, &err) != PF_OK)
            return unknown(r, "put the restarted ps back on", r->step, err.message);
    }
    return -1;
}

int64_t serve_remote_run(serve_remote *r, const float *x, int n, float *y) {
    pthread_mutex_lock(&r->mu);
    int64_t step = r->dirty ? -1 : r->step;
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
    pthread_mutex_lock(&r->stats_mu);
    *step = r->pub_step;
    *loaded = r->loaded;
    *refused = r->refused;
    pthread_mutex_unlock(&r->stats_mu);
}
