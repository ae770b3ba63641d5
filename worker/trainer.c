/* trainer.c - the training loop of a worker or chief (see trainer.h).
 *
 * DESIGN: parameters and gradients live in host vectors that the link to the ps fills and
 * reads. A step gathers the worker's K * batch_size examples, and its in-graph replicas
 * (towers.h, K = replicas_per_worker, usually 1) turn the parameters into one averaged
 * gradient: per replica, the parameters and its slice of the batch cross to its backend and
 * its gradient comes back (on the CPU backend the replica reads and writes the host vectors
 * themselves; on a GPU, the one host<->device transfer each way). The chief evaluates on replica
 * 0's backend. Everything is allocated before the first step.
 *
 * The loop takes one step at a time (train_step) until every ps reached max_steps, then the
 * chief evaluates and takes the final checkpoint (finish). A step ends in an outcome: taken,
 * rolled back (every ps went back to a checkpoint: recovery.c), resynced (a ps went back),
 * done, or failed. The chief's schedule and watchdog are in chief.c.
 */
#include "worker/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/wire.h"
#include "psflow/wire_auth.h"
#include "worker/chief.h"
#include "worker/recovery.h"
#include "worker/trainer_internal.h"

/* What one turn of the loop came to. */
typedef enum {
    STEP_GOES_ON,     /* within a step: the request succeeded, the step goes on */
    STEP_TAKEN,       /* the step's gradient was pushed and the next values pulled */
    STEP_ROLLED_BACK, /* every ps went back to a checkpoint: the step is dropped */
    STEP_RESYNCED,    /* a ps went back, and every ps serves one version again */
    STEP_DONE,        /* every ps reached max_steps (and the chief's final checkpoint exists) */
    STEP_FAILED,      /* run.st and run.err say why */
    STEP_INPUT_DONE,  /* leased input: the queue's epochs are done (nothing was computed) */
} step_outcome;

/* The loop's own state. */
typedef struct run {
    pf_status st;
    pf_error err;
    int sync, rollback;
    uint64_t max_steps;
    int b; /* the examples of one step, K replicas x batch_size */
    double t_start;
    long local_steps, window; /* window: steps since the last progress line */
    double loss_sum, last_loss;
    double every, report_start, report_loss; /* reports every `every` seconds */
    long report_steps;
    uint64_t fed; /* the step whose batch this step's gradient was computed from */
    int ahead;    /* prefetch: t->grads holds the gradient of step ahead_step, loss ahead_loss */
    int computed; /* a gradient was computed ahead during this step's push-pull */
    uint64_t ahead_step;
    double ahead_loss;
    /* row mode, a fused step: the push-pull also brought the rows of step rows_step's batch
     * (gathered into hx and planned in t->rplan) into params; the next step takes them when
     * it feeds that batch (rows_ahead), nothing having replaced hx or the data plan since */
    int rows_fetched, rows_ahead;
    uint64_t rows_step, rows_evals;
    int rows_tasks;
} run;

/* The model the host vectors are laid out by. */
static const pf_model_spec *vector_model(const trainer *t) {
    return t->row_mode ? &t->rows.compact : &t->spec->model;
}

static int stopped(const trainer *t) {
    return t->o->stop && __atomic_load_n(t->o->stop, __ATOMIC_RELAXED);
}

/* Says which NaN or infinite loss or gradient the step computed, naming the step and the
 * variable, followed by `then` (what happens next). */
static pf_status check_finite(const trainer *t, double loss, uint64_t step, const char *then,
                              pf_error *err) {
    if (!isfinite(loss))
        return pf_error_set(err, PF_ERR_NONFINITE, NULL,
                            "non-finite loss (%g) at step %" PRIu64 "; %s", loss, step, then);
    size_t i = pf_first_nonfinite(t->grads, t->n_params);
    pf_var_info var;
    if (i < t->n_params && pf_model_var_at(vector_model(t), i, &var) >= 0)
        return pf_error_set(err, PF_ERR_NONFINITE, NULL,
                            "non-finite gradient (%g) of %s at step %" PRIu64 "; %s",
                            (double)t->grads[i], var.name, step, then);
    return PF_OK;
}

/* Testing aid, never for real jobs: with PSFLOW_TEST_NAN_POSITION=<p> in its environment, a
 * task that gathers the example at stream position p (pf_shard_position's numbering) gets
 * its first feature as NaN, once per position: a data window poisoned with one NaN example
 * (IDX pixels are uint8 and CSV refuses non-finite numbers, so no real input is NaN). */
static pf_status read_nan_position(trainer *t, pf_error *err) {
    t->nan_position = -1;
    const char *e = getenv("PSFLOW_TEST_NAN_POSITION");
    if (!e || !*e)
        return PF_OK;
    char *end;
    errno = 0;
    long long p = strtoll(e, &end, 10);
    if (errno || *end || p < 0)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "PSFLOW_TEST_NAN_POSITION: '%s' is not a stream position (>= 0)", e);
    t->nan_position = p;
    fprintf(stderr,
            "psflow %s %d: PSFLOW_TEST_NAN_POSITION: the example at stream position %lld "
            "is fed as NaN (a testing aid)\n",
            worker_who(t), t->o->task, p);
    return PF_OK;
}

/* PSFLOW_TEST_INPUT_DELAY_MS=<ms> (a testing aid, like the NaN position): every batch is
 * read that much slower, as from a slow disk; 0 .. 60000. */
static pf_status read_input_delay(trainer *t, pf_error *err) {
    t->input_delay = 0;
    const char *e = getenv("PSFLOW_TEST_INPUT_DELAY_MS");
    if (!e || !*e)
        return PF_OK;
    char *end;
    errno = 0;
    long ms = strtol(e, &end, 10);
    if (errno || *end || ms < 0 || ms > 60000)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "PSFLOW_TEST_INPUT_DELAY_MS: '%s' is not 0 .. 60000 milliseconds", e);
    t->input_delay = (double)ms / 1000.0;
    fprintf(stderr,
            "psflow %s %d: PSFLOW_TEST_INPUT_DELAY_MS: every batch is read %ld ms late (a "
            "testing aid)\n",
            worker_who(t), t->o->task, ms);
    return PF_OK;
}

/* Gathers this task's batch of global step `step` (its data step, past skipped ones), from
 * memory or from the streamed files (whose read error fails it); from data.shift_step on, its
 * ids of dynamic tables shifted (synthetic_ctr). */
static pf_status gather(trainer *t, uint64_t step, int b, pf_error *err) {
    int64_t start = worker_plan_position(&t->plan, step, t->o->task);
    if (t->leases) {
        pf_status st = worker_leases_fill(t->leases, b, t->hx, t->hy, t->hlabels, t->o->stop, err);
        if (st != PF_OK)
            return st;
        start = -1; /* no stream position: PSFLOW_TEST_NAN_POSITION does not apply */
    } else if (t->input) {
        pf_status st = pf_stream_gather(t->input, start, b, t->hx, t->hy, t->hlabels, err);
        if (st != PF_OK)
            return st;
        char last[sizeof err->message];
        int64_t total, fresh = pf_stream_take_bad(t->input, &total, last, sizeof last);
        if (fresh > 0)
            t->bad_lines = total;
        if (fresh > 0)
            fprintf(stderr,
                    "psflow %s %d: skipped %lld bad line(s) (data.on_error skip; %lld of at most "
                    "%lld so far), the last: %s\n",
                    worker_who(t), t->o->task, (long long)fresh, (long long)total,
                    (long long)t->spec->data.max_bad_lines, last);
    } else {
        pf_batch_gather(&t->train, t->sampler, start, b, t->hx, t->hy, t->hlabels);
    }
    if (t->spec->data.shift_step > 0 && step >= (uint64_t)t->spec->data.shift_step)
        pf_synthetic_ctr_shift(&t->spec->model, t->hx, b); /* new ids from then on */
    if (t->input_delay > 0)
        pf_clock_sleep(t->input_delay);
    if (start >= 0 && t->nan_position >= start && t->nan_position < start + b)
        t->hx[(size_t)(t->nan_position - start) * (size_t)pf_model_input_width(&t->spec->model)] =
            NAN;
    return PF_OK;
}

/* The training examples: the files read as streams, one per replica that trains
 * (data.streaming), or the train set loaded whole. */
static pf_status open_input(trainer *t, pf_error *err) {
    const pf_job_spec *spec = t->spec;
    if (!spec->data.streaming) {
        pf_status st = pf_dataset_load(spec, false, &t->train, err);
        t->bad_lines = st == PF_OK ? t->train.skipped : 0;
        if (st == PF_OK && t->train.skipped > 0)
            fprintf(stderr,
                    "psflow %s %d: skipped %lld bad line(s) of the training files "
                    "(data.on_error skip, at most %lld)\n",
                    worker_who(t), t->o->task, (long long)t->train.skipped,
                    (long long)spec->data.max_bad_lines);
        if (st == PF_OK && !(t->sampler = pf_sampler_create(t->train.n, spec->training.seed, true)))
            st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        return st;
    }
    int streams = (spec->replicas.worker + spec->replicas.chief) * spec->replicas_per_worker;
    pf_status st = pf_stream_open(spec, streams, spec->training.batch_size, &t->input, err);
    if (st == PF_OK && pf_stream_leased(t->input)) {
        if (!(t->leases = pf_calloc(1, sizeof *t->leases)))
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        fprintf(stderr,
                "psflow %s %d: streaming %d training file(s) in %d splits, leased from ps 0 "
                "(data.splits dynamic%s)\n",
                worker_who(t), t->o->task, pf_stream_files(t->input), pf_stream_splits(t->input),
                spec->training.epochs > 0 ? ", training.epochs counted there" : "");
        return PF_OK;
    }
    if (st == PF_OK)
        fprintf(stderr,
                "psflow %s %d: streaming %d training file(s) in %d splits as %d streams, one "
                "per replica; this task reads stream(s) %d..%d\n",
                worker_who(t), t->o->task, pf_stream_files(t->input), pf_stream_splits(t->input),
                streams, t->o->task * spec->replicas_per_worker,
                (t->o->task + 1) * spec->replicas_per_worker - 1);
    return st;
}

/* --- setup and teardown --- */

/* Every replica's device and the towers that train on them; in row mode the compact model
 * of one batch's rows. */
static pf_status setup_towers(trainer *t, pf_error *err) {
    const pf_job_spec *spec = t->spec;
    const int k = spec->replicas_per_worker;
    pf_status st;
    /* Every replica's device, in replica order, before anything else: a GPU that is not
     * usable fails the task at once, in one line. */
    for (int r = 0; r < k; r++) {
        const pf_device_spec *d = &spec->devices[r];
        if ((st = pf_backend_for_device(d->device, d->index, &t->be, err)) != PF_OK)
            return st;
        if (err && err->message[0]) /* which GPU, or why "auto" trains on the CPU */
            fprintf(stderr, "psflow %s %d: %s\n", worker_who(t), t->o->task, err->message);
    }
    pf_error_clear(err);
    const pf_job_spec *tower_spec = spec;
    if (spec->model.n_embeddings > 0) { /* row mode: the towers train on one batch's rows */
        t->row_mode = 1;
        if (worker_rows_init(&t->rows, &spec->model, k * spec->training.batch_size) != PF_OK ||
            pf_placement_compute(spec, &t->placement) != PF_OK ||
            worker_row_plan_init(&t->rplan, &t->rows, &t->placement) != PF_OK ||
            worker_row_plan_init(&t->rplan_next, &t->rows, &t->placement) != PF_OK ||
            pf_job_spec_copy(&t->compact, spec) != PF_OK)
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        t->compact.model = t->rows.compact;
        tower_spec = &t->compact;
        const char *fuse = getenv("PSFLOW_ROW_FUSE");
        t->row_fuse = !fuse || strcmp(fuse, "off") != 0;
    }
    if ((st = pf_towers_create(tower_spec, NULL, &t->towers, err)) != PF_OK)
        return st;
    t->be = pf_towers_backend(t->towers, 0);
    return PF_OK;
}

/* The model and buffers the chief evaluates with. */
static pf_status setup_chief(trainer *t, pf_error *err) {
    const pf_model_spec *eval_model = &t->spec->model;
    size_t in = (size_t)pf_model_input_width(&t->spec->model);
    if (t->row_mode) {
        if (worker_rows_init(&t->eval_rows, &t->spec->model, WORKER_EVAL_BATCH) != PF_OK ||
            worker_row_plan_init(&t->eval_plan, &t->eval_rows, &t->placement) != PF_OK ||
            !(t->eval_params = pf_mallocarray(t->eval_rows.n_params, sizeof(float))) ||
            !(t->eval_versions = pf_calloc((size_t)t->n_ps, sizeof(uint64_t))))
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        eval_model = &t->eval_rows.compact;
    }
    if (pf_model_create(eval_model, t->be, WORKER_EVAL_BATCH, &t->model) != PF_OK)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    if (!t->be->host_memory)
        t->d_params = t->be->alloc(t->n_params * sizeof(float));
    t->d_x = t->be->alloc((size_t)WORKER_EVAL_BATCH * in * sizeof(float));
    t->d_y = t->be->alloc((size_t)WORKER_EVAL_BATCH * sizeof(float));
    t->d_labels = t->be->alloc((size_t)WORKER_EVAL_BATCH * sizeof(int32_t));
    if ((!t->be->host_memory && !t->d_params) || !t->d_x || !t->d_y || !t->d_labels)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    return PF_OK;
}

/* Connects to every ps; a shared segment, when one ps took it, replaces the host vectors. */
static pf_status connect_link(trainer *t, int prefetch, pf_error *err) {
    const worker_options *o = t->o;
    uint8_t role = o->is_chief ? PF_WIRE_ROLE_CHIEF : PF_WIRE_ROLE_WORKER;
    uint8_t key[PF_WIRE_KEY_SIZE];
    if (o->task_key)
        memcpy(key, o->task_key, sizeof key);
    else if (o->job_key)
        pf_wire_task_key(o->job_key, role, (uint32_t)o->task, key);
    worker_link_options co = {t->spec, o->ps_addrs, o->task, role, o->incarnation, o->retry_seconds,
                              o->stop, o->task_key || o->job_key ? key : NULL, o->ca_file,
                              t->row_mode ? &t->rows : NULL,
                              /* the gradient a prefetching push sends is reused before
                               * the ps has read it: that push goes over the socket */
                              !prefetch};
    pf_status linked = worker_link_create(&co, &t->link, err);
    pf_wire_key_clear(key, sizeof key);
    float *seg_grads,
        *seg_params = linked == PF_OK ? worker_link_segment(t->link, &seg_grads) : NULL;
    if (seg_params) { /* nothing was written to the vectors yet */
        pf_free(t->params);
        pf_free(t->grads);
        t->params = seg_params;
        t->grads = seg_grads;
        t->in_segment = 1;
    }
    return linked;
}

static pf_status setup(trainer *t, pf_error *err) {
    const pf_job_spec *spec = t->spec;
    const int k = spec->replicas_per_worker;
    pf_status st;
    if ((st = read_nan_position(t, err)) != PF_OK || (st = read_input_delay(t, err)) != PF_OK ||
        (st = setup_towers(t, err)) != PF_OK)
        return st;
    if ((st = open_input(t, err)) != PF_OK)
        return st;
    int test_exists = pf_data_has_test(&spec->data);
    if (t->o->is_chief && test_exists) {
        if ((st = pf_dataset_load(spec, true, &t->test, err)) != PF_OK)
            return st;
        t->has_test = 1;
    }
    int step_batch = k * spec->training.batch_size;
    int stage = step_batch > WORKER_EVAL_BATCH ? step_batch : WORKER_EVAL_BATCH;
    t->n_params = pf_model_num_params(vector_model(t));
    t->n_ps = spec->replicas.ps;
    t->n_tasks = spec->replicas.worker + spec->replicas.chief;
    size_t in = (size_t)pf_model_input_width(&spec->model);
    t->params = pf_mallocarray(t->n_params, sizeof(float));
    t->grads = pf_mallocarray(t->n_params, sizeof(float));
    /* Prefetch computes the next step from this step's values: row mode pulls each batch's
     * own rows, so it has none to compute from. */
    int prefetch = spec->training.mode == PF_MODE_ASYNC && spec->training.prefetch && !t->row_mode;
    if (prefetch && !(t->params_next = pf_mallocarray(t->n_params, sizeof(float))))
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    t->hx = pf_mallocarray((size_t)stage * in, sizeof(float));
    t->hy = pf_mallocarray((size_t)stage, sizeof(float));
    t->hlabels = pf_mallocarray((size_t)stage, sizeof(int32_t));
    t->versions = pf_calloc((size_t)t->n_ps, sizeof(uint64_t));
    t->steps = pf_calloc((size_t)t->n_ps, sizeof(uint64_t));
    t->min_version = pf_calloc((size_t)t->n_ps, sizeof(uint64_t));
    t->gathered_at = pf_calloc((size_t)t->n_ps, sizeof(uint64_t));
    t->results = pf_calloc((size_t)t->n_ps, sizeof(uint32_t));
    t->skipped = pf_calloc((size_t)spec->training.nonfinite_max_rollbacks + 1, sizeof(uint64_t));
    worker_plan_init(&t->plan, t->n_tasks, step_batch, t->skipped,
                     spec->training.nonfinite_max_rollbacks + 1);
    if (!t->params || !t->grads || !t->hx || !t->hy || !t->hlabels || !t->versions || !t->steps ||
        !t->min_version || !t->gathered_at || !t->results || !t->skipped)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    worker_read_skips(t);
    if (t->o->is_chief && (st = setup_chief(t, err)) != PF_OK)
        return st;
    if (t->o->is_chief)
        worker_chief_bayes_auc(t);
    if ((st = connect_link(t, prefetch, err)) == PF_OK && t->leases)
        worker_leases_init(t->leases, t->input, t->link, worker_who(t), t->o->task,
                           (double)t->spec->training.stall_timeout_secs);
    return st;
}

static void teardown(trainer *t) {
    worker_link_destroy(t->link);
    if (t->in_segment) /* the link unmapped them */
        t->params = t->grads = NULL;
    pf_model_destroy(t->model);
    pf_towers_destroy(t->towers);
    pf_sampler_destroy(t->sampler);
    if (t->leases)
        worker_leases_free(t->leases);
    pf_free(t->leases);
    pf_stream_close(t->input);
    pf_dataset_deinit(&t->train);
    pf_dataset_deinit(&t->test);
    if (t->be) {
        float *bufs[] = {t->d_params, t->d_x, t->d_y, (float *)t->d_labels};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i])
                t->be->free(bufs[i]);
    }
    pf_free(t->params);
    pf_free(t->params_next);
    pf_free(t->grads);
    pf_free(t->hx);
    pf_free(t->hy);
    pf_free(t->hlabels);
    pf_free(t->scores);
    pf_free(t->versions);
    pf_free(t->steps);
    pf_free(t->min_version);
    pf_free(t->gathered_at);
    pf_free(t->results);
    pf_free(t->skipped);
    pf_free(t->eval_params);
    pf_free(t->eval_versions);
    worker_row_plan_deinit(&t->rplan);
    worker_row_plan_deinit(&t->rplan_next);
    worker_row_plan_deinit(&t->eval_plan);
    pf_placement_deinit(&t->placement);
    if (t->row_mode)
        pf_job_spec_deinit(&t->compact);
}

/* --- the loop --- */

/* The first log line, and the loop's constants. */
static void run_init(trainer *t, run *r) {
    const worker_options *o = t->o;
    const pf_job_spec *spec = t->spec;
    const int k = spec->replicas_per_worker;
    r->b = k * spec->training.batch_size;
    char split[64] = "";
    if (k > 1)
        snprintf(split, sizeof split, " (%d in-graph replicas x %d)", k, spec->training.batch_size);
    char shared[96] = "";
    if (t->in_segment)
        snprintf(shared, sizeof shared, "; %d of %d ps share its memory (no socket copies)",
                 worker_link_shared(t->link), t->n_ps);
    fprintf(stderr,
            "psflow %s %d: connected to %d ps; training task %d of %d, batch %d%s%s%s%s%s\n",
            worker_who(t), o->task, t->n_ps, o->task, t->n_tasks, r->b, split,
            o->threads_note ? "; " : "", o->threads_note ? o->threads_note : "", shared,
            t->params_next ? "; prefetch: the next step is computed during each push-pull"
            : t->row_mode && (t->leases || !t->row_fuse) ? "; each step pulls its own batch's rows"
            : t->row_mode ? "; each push also pulls the next batch's rows (one round trip a step)"
                          : "");
    r->sync = spec->training.mode == PF_MODE_SYNC;
    r->rollback = spec->training.on_nonfinite == PF_NONFINITE_ROLLBACK;
    r->max_steps = (uint64_t)spec->training.max_steps;
    r->t_start = r->report_start = pf_clock_now();
    r->every = o->report_every_seconds > 0 ? o->report_every_seconds : 0.25;
    t->last_checkpoint_time = r->t_start;
}

static step_outcome failed(run *r, pf_status st) {
    r->st = st;
    return STEP_FAILED;
}

/* A request to the ps tasks answered st, while this task was at step `failed_at` having fed
 * its batch (fed) or not: the step goes on, every ps is rolled back, or the task fails
 * (worker_recovery_after decides). */
static step_outcome answer(trainer *t, run *r, pf_status st, uint64_t failed_at, int fed,
                           int periodic_checkpoint) {
    int rolled = 0;
    switch (worker_recovery_after(st, r->rollback, periodic_checkpoint)) {
    case WORKER_RECOVERY_NONE:
        return STEP_GOES_ON;
    case WORKER_RECOVERY_NONFINITE:
        if ((st = worker_recover_nonfinite(t, failed_at, fed, &r->err)) != PF_OK)
            return failed(r, st);
        return STEP_ROLLED_BACK;
    case WORKER_RECOVERY_ROLL_BACK: /* a ps restarted: the checkpoint was given up */
        if (worker_roll_back(t, &rolled, &r->err) != PF_OK || !rolled)
            return failed(r, st);
        return STEP_ROLLED_BACK;
    case WORKER_RECOVERY_FAIL:
        break;
    }
    return failed(r, st);
}

/* Before the first step: the values to start from, the membership, a realignment of ps
 * tasks a rollback left apart, the first checkpoint and the watchdog. */
static pf_status start(trainer *t, run *r) {
    pf_status st = worker_link_pull(t->link, NULL, t->params, t->versions, &r->err);
    if (st == PF_ERR_NONFINITE && r->rollback) /* another task's step went non-finite already */
        st = worker_recover_nonfinite(t, t->versions[0], 0, &r->err);
    if (st != PF_OK)
        return st;
    t->last_eval = t->last_ckpt = t->versions[0];
    if (t->o->workers) /* started after a live change: the membership it was assigned with */
        worker_take_membership(t, t->versions[0]);
    if (worker_recovery_needs_realign(t->o->is_chief, r->sync, t->n_ps, t->versions)) {
        if ((st = worker_realign(t, &r->err)) != PF_OK)
            return st;
        t->last_eval = t->last_ckpt = t->versions[0];
    }
    if ((st = worker_chief_first_checkpoint(t, &r->err)) != PF_OK)
        return st;
    worker_watchdog_start(t);
    return PF_OK;
}

/* After the ps tasks answered a request: a ps that restarted (the chief rolls every ps back
 * to one checkpoint), or in sync mode a ps whose version went below `floor` (a rollback, or
 * a restart; every ps is waited for, resync). STEP_GOES_ON when neither happened. */
static step_outcome follow_ps(trainer *t, run *r, const uint64_t *floor) {
    int rolled = 0;
    pf_status st = worker_roll_back(t, &rolled, &r->err);
    if (st != PF_OK)
        return failed(r, st);
    if (rolled)
        return STEP_ROLLED_BACK;
    if (!worker_recovery_went_back(r->sync, t->n_ps, t->versions, floor, r->max_steps))
        return STEP_GOES_ON;
    st = worker_resync(t, &r->err);
    step_outcome s = answer(t, r, st, t->versions[0], 0, 0);
    return s == STEP_FAILED ? s : STEP_RESYNCED;
}

/* Row mode: gathers and plans the batch of step global + 1 into hx and t->rplan_next, for a
 * fused push-pull to pull its rows; 0 when there is none to take now (the last step, a stop,
 * leased input, the chief evaluating before that step, whose test batches replace hx: a
 * stream would read that batch again; or the input failing: met again, and reported, when
 * that step comes). */
static int gather_next_rows(trainer *t, run *r, uint64_t global) {
    if (!t->row_fuse || t->leases || global + 1 >= r->max_steps || stopped(t) ||
        (t->o->is_chief && worker_chief_evaluates_at(t, global + 1)))
        return 0;
    pf_error gather_err;
    if (gather(t, global + 1, r->b, &gather_err) != PF_OK)
        return 0;
    worker_rows_plan(&t->rows, &t->placement, t->hx, r->b, &t->rplan_next);
    return 1;
}

/* Row mode: the batch of t->rplan as its compact model takes it (dynamic tables' ids
 * rewritten into the plan's buffer); hx otherwise. */
static const float *row_batch(trainer *t) {
    return t->row_mode ? worker_row_plan_input(&t->rplan, t->hx) : t->hx;
}

/* Whether the last push-pull brought the rows of the batch this step feeds: a sync step
 * feeds exactly its own step's batch; an async one takes the batch fetched, as a prefetched
 * gradient is taken (one step behind when other tasks pushed meanwhile). */
static int rows_fetched_for(const trainer *t, const run *r, uint64_t global) {
    return r->rows_ahead && (!r->sync || r->rows_step == global) &&
           r->rows_evals == t->evaluations && r->rows_tasks == t->n_tasks;
}

/* The step's gradient into t->grads, from the batch of step `global` (in row mode with its
 * rows pulled), or the one computed ahead during the last push-pull (prefetch). In row mode
 * the pull may find the ps tasks gone back (a ps restarted, or the chief rolled them back,
 * between the last push-pull and this pull): the batch of `global` is then not the batch of
 * the step they serve, and a gradient of it would be applied to another step. The step is
 * dropped instead and taken again from the versions served. */
static step_outcome compute_gradient(trainer *t, run *r, uint64_t global) {
    r->fed = global;
    if (r->ahead) {
        r->fed = r->ahead_step;
        r->last_loss = r->ahead_loss;
    } else if (rows_fetched_for(t, r, global)) {
        r->fed = r->rows_step;
        worker_link_set_plan(t->link, &t->rplan); /* an evaluation's pulls set their own */
        double at = pf_profile_now(t->prof);
        r->last_loss =
            pf_towers_gradient(t->towers, t->params, row_batch(t), t->hy, t->hlabels, t->grads);
        pf_profile_add(t->prof, PF_PHASE_COMPUTE, at);
    } else {
        double at = pf_profile_now(t->prof);
        pf_profile_open(t->prof, PF_PHASE_INPUT, at); /* it may wait for a slow reader */
        pf_status gs = gather(t, global, r->b, &r->err);
        at = pf_profile_add(t->prof, PF_PHASE_INPUT, at);
        if (gs == PF_ERR_NOT_FOUND && t->leases) {
            t->input_done = 1;
            return STEP_INPUT_DONE;
        }
        if (gs != PF_OK)
            return failed(r, gs);
        if (t->row_mode) { /* this batch's rows, and the dense variables */
            worker_rows_plan(&t->rows, &t->placement, t->hx, r->b, &t->rplan);
            worker_link_set_plan(t->link, &t->rplan);
            memcpy(t->gathered_at, t->versions, (size_t)t->n_ps * sizeof *t->versions);
            pf_profile_open(t->prof, PF_PHASE_PULL, at);
            pf_status st = worker_link_pull(t->link, NULL, t->params, t->versions, &r->err);
            at = pf_profile_add(t->prof, PF_PHASE_PULL, at);
            step_outcome s = answer(t, r, st, global, 0, 0);
            if (s == STEP_GOES_ON)
                s = follow_ps(t, r, t->gathered_at);
            if (s != STEP_GOES_ON)
                return s;
            at = pf_profile_now(t->prof); /* a rollback or resync above is not the pull */
        }
        r->last_loss =
            pf_towers_gradient(t->towers, t->params, row_batch(t), t->hy, t->hlabels, t->grads);
        pf_profile_add(t->prof, PF_PHASE_COMPUTE, at);
    }
    r->ahead = 0;
    r->rows_ahead = 0;
    return STEP_GOES_ON;
}

/* A non-finite loss or gradient fails the task, or with on_nonfinite "rollback" is pushed as
 * a gradient of NaN. */
static step_outcome check_gradient(trainer *t, run *r) {
    pf_status st = check_finite(t, r->last_loss, r->fed,
                                r->rollback ? "pushing a NaN gradient: the ps tasks stop and the "
                                              "chief rolls them back"
                                            : "nothing pushed",
                                &r->err);
    if (st == PF_OK)
        return STEP_GOES_ON;
    if (!r->rollback)
        return failed(r, st);
    /* The ps is where a non-finite step becomes visible to every task: a gradient of NaN
     * makes its values NaN, it answers NONFINITE, and the chief rolls back. */
    fprintf(stderr, "psflow %s %d: %s\n", worker_who(t), t->o->task, r->err.message);
    for (size_t i = 0; i < t->n_params; i++)
        t->grads[i] = NAN;
    pf_error_clear(&r->err);
    return STEP_GOES_ON;
}

/* The versions each push was computed against, and the versions each pull waits for. With
 * every gradient needed (no backup workers) the ps tasks are at one version between steps,
 * unless a worker died between its pushes to two ps: then the one ahead already has its
 * gradient for the step the other still waits for. The restarted worker completes the step
 * behind (its push to the ps ahead is stale, dropped) and the ps tasks are at one version
 * again, instead of staying a step apart for the rest of the job. */
static void set_push_versions(trainer *t, const run *r) {
    uint64_t lo = worker_lowest_version(t);
    int all_needed = r->sync && t->spec->training.replicas_to_aggregate >= t->n_tasks;
    for (int p = 0; p < t->n_ps; p++) {
        t->steps[p] = all_needed ? lo : t->versions[p];
        t->min_version[p] = r->sync ? t->steps[p] + 1 : 0;
    }
}

/* Pushes the gradient and pulls the next values in one round trip per ps (in row mode, the
 * next batch's rows: a fused step). */
static pf_status push_pull(trainer *t, run *r, uint64_t global, double at) {
    r->computed = 0;
    r->rows_fetched = 0;
    pf_phase wait = r->sync ? PF_PHASE_BARRIER : PF_PHASE_PULL;
    if (!t->params_next) {
        int fuse = gather_next_rows(t, r, global);
        if (fuse)
            at = pf_profile_add(t->prof, PF_PHASE_INPUT, at);
        pf_backend_openblas_idle();         /* no BLAS helper spinning while this task waits */
        pf_profile_open(t->prof, wait, at); /* split into push and wait once it is answered */
        pf_status st = fuse ? worker_link_push_pull_rows(t->link, t->grads, t->steps,
                                                         &t->rplan_next, t->min_version, t->params,
                                                         t->versions, t->results, &r->err)
                            : worker_link_push_pull(t->link, t->grads, t->steps, t->min_version,
                                                    t->params, t->versions, t->results, &r->err);
        if (fuse && st == PF_OK) { /* the next batch's plan becomes this one */
            worker_row_plan swap = t->rplan;
            t->rplan = t->rplan_next;
            t->rplan_next = swap;
            worker_link_set_plan(t->link, &t->rplan);
            r->rows_fetched = 1;
            r->rows_step = global + 1;
            r->rows_evals = t->evaluations;
            r->rows_tasks = t->n_tasks;
        }
        /* encoding and sending the push, then waiting for every answer */
        double sent = worker_link_sent_at(t->link);
        if (at > 0 && sent >= at) {
            pf_profile_span(t->prof, PF_PHASE_PUSH, at, sent);
            pf_profile_add(t->prof, wait, sent);
        } else {
            pf_profile_add(t->prof, wait, at); /* nothing was sent: all of it waiting */
        }
        return st;
    }
    /* Prefetch (async): while the ps tasks apply this gradient and answer with their values
     * (received into params_next), the next step's gradient is computed from the values this
     * one used: one step staler than without prefetch, which async training allows. Its
     * batch is the one of the step this push leads to. */
    pf_status st = worker_link_push_pull_start(t->link, t->grads, t->steps, t->min_version,
                                               t->params_next, &r->err);
    at = pf_profile_add(t->prof, PF_PHASE_PUSH, at);
    if (st == PF_OK) {
        pf_error gather_err; /* met again, and reported, when the step comes */
        pf_status ahead = PF_ERR_NOT_FOUND;
        if (global + 1 < r->max_steps && !stopped(t)) {
            ahead = gather(t, global + 1, r->b, &gather_err);
            at = pf_profile_add(t->prof, PF_PHASE_INPUT, at);
        }
        if (ahead == PF_OK) {
            r->ahead_step = global + 1;
            r->ahead_loss =
                pf_towers_gradient(t->towers, t->params, t->hx, t->hy, t->hlabels, t->grads);
            r->computed = 1;
            at = pf_profile_add(t->prof, PF_PHASE_COMPUTE, at);
        }
        pf_backend_openblas_idle(); /* no BLAS helper spinning while this task waits */
        pf_profile_open(t->prof, wait, at);
        st = worker_link_push_pull_finish(t->link, t->versions, t->results, &r->err);
        pf_profile_add(t->prof, wait, at);
        /* A ps that restarted (or a push not sent again after a reconnect), or one the chief
         * rolled back meanwhile (its version went below the one this push was computed
         * against), answered with values the gradient computed ahead knows nothing of: it
         * is computed again from them instead. */
        for (int p = 0; st == PF_OK && p < t->n_ps; p++)
            if (t->results[p] != PF_WIRE_PUSH_APPLIED || t->versions[p] < t->steps[p])
                r->computed = 0;
    }
    if (st == PF_OK) {
        float *swap = t->params;
        t->params = t->params_next;
        t->params_next = swap;
    }
    return st;
}

/* After the push-pull answered st: a non-finite ps, a ps that restarted (the chief's
 * consistent rollback), a ps that went back (resync), or a step taken. */
static step_outcome after_push(trainer *t, run *r, pf_status st) {
    if (t->leases) { /* the batch is let go only once every ps applied it */
        int applied = st == PF_OK;
        for (int p = 0; applied && p < t->n_ps; p++)
            applied =
                t->results[p] == PF_WIRE_PUSH_APPLIED || t->results[p] == PF_WIRE_PUSH_DUPLICATE;
        worker_leases_pushed(t->leases, applied);
    }
    step_outcome s = answer(t, r, st, r->fed, 1, 0);
    if (s == STEP_GOES_ON)
        s = follow_ps(t, r, t->min_version);
    return s == STEP_GOES_ON ? STEP_TAKEN : s;
}

/* One step at global step t->versions[0]. */
static step_outcome train_step(trainer *t, run *r) {
    uint64_t global = t->versions[0];
    pf_profile_at_step(t->prof, global); /* a trace's spans are in this step */
    if (stopped(t))
        return failed(
            r, pf_error_set(&r->err, PF_ERR_CANCELLED, NULL, "stopped at step %" PRIu64, global));
    pf_status st;
    if ((st = worker_watchdog_check(t, &r->err)) != PF_OK)
        return failed(r, st);
    step_outcome s;
    if (t->o->is_chief) { /* its evaluations and checkpoints count themselves (chief.c) */
        st = worker_chief_duties(t, global, &r->err);
        if ((s = answer(t, r, st, global, 0, 1)) != STEP_GOES_ON)
            return s;
    }
    worker_take_membership(t, global);
    if ((s = compute_gradient(t, r, global)) != STEP_GOES_ON)
        return s;
    double at = pf_profile_now(t->prof);
    if ((s = check_gradient(t, r)) != STEP_GOES_ON)
        return s;
    at = pf_profile_add(t->prof, PF_PHASE_COMPUTE, at);
    set_push_versions(t, r);
    if (t->o->push_delay_ms > 0) /* testing aid: make this task's gradients arrive last */
        pf_clock_sleep(t->o->push_delay_ms / 1000.0);
    st = push_pull(t, r, global, at);
    return after_push(t, r, st);
}

/* A report of the steps since the last one. */
static void report_steps(trainer *t, run *r, double now) {
    worker_report rep = {.kind = WORKER_REPORT_STEP,
                         .step = t->versions[0],
                         .loss = r->report_loss / (double)r->report_steps,
                         .examples_per_sec =
                             (double)r->report_steps * r->b / (now - r->report_start),
                         .step_time_seconds = (now - r->report_start) / (double)r->report_steps,
                         .bad_lines = t->bad_lines};
    worker_send_report(t, &rep);
}

/* A step taken: counted, reported every r->every seconds, logged every o->log_every. */
static void count_step(trainer *t, run *r) {
    pf_profile_count(t->prof, 1);
    r->local_steps++;
    r->loss_sum += r->last_loss;
    r->window++;
    r->report_loss += r->last_loss;
    r->report_steps++;
    double now = pf_clock_now();
    if (now - r->report_start >= r->every) {
        report_steps(t, r, now);
        r->report_start = now;
        r->report_loss = 0;
        r->report_steps = 0;
    }
    if (t->o->log_every > 0 && r->local_steps % t->o->log_every == 0) {
        double secs = pf_clock_now() - r->t_start;
        fprintf(stderr, "psflow %s %d: step %" PRIu64 "/%" PRIu64 " loss %.4f %.0f examples/s\n",
                worker_who(t), t->o->task, t->versions[0], r->max_steps, r->loss_sum / r->window,
                (double)r->local_steps * r->b / secs);
        r->loss_sum = 0;
        r->window = 0;
    }
}

/* Every ps went back (a rollback, or a resync after one): the steps counted since the last
 * report and progress line were undone, so the loss and rates start again from here. */
static void restart_window(run *r) {
    r->report_start = pf_clock_now();
    r->report_loss = 0;
    r->report_steps = 0;
    r->loss_sum = 0;
    r->window = 0;
}

/* One line: where the steps' time went (docs/profile.md), each phase as a share of the time
 * since the first step; what no phase covers (rollbacks, reports) is the rest. */
static void log_breakdown(trainer *t) {
    double sec[PF_PHASE_COUNT], wall;
    uint64_t steps;
    if (pf_profile_read(t->prof, sec, &steps, &wall) != 0 || wall <= 0 || !steps)
        return;
    char line[512];
    int n = snprintf(line, sizeof line, "%.2f ms a step:", wall * 1e3 / (double)steps);
    double sum = 0;
    for (int i = 0; i < PF_PHASE_FIRST_PS && n > 0 && (size_t)n < sizeof line; i++) {
        sum += sec[i];
        if (sec[i] > 0)
            n += snprintf(line + n, sizeof line - (size_t)n, " %s %.1f%%", pf_phase_name(i),
                          100 * sec[i] / wall);
    }
    if (n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, ", the rest %.1f%%",
                 sum < wall ? 100 * (wall - sum) / wall : 0.0);
    fprintf(stderr, "psflow %s %d: time per step: %s\n", worker_who(t), t->o->task, line);
}

/* Every ps reached max_steps: the last report, and on the chief the final evaluation and
 * the final checkpoint, which tells the ps tasks to finish. */
static step_outcome finish(trainer *t, run *r, worker_result *out) {
    if (r->report_steps > 0)
        report_steps(t, r, pf_clock_now());
    out->seconds = pf_clock_now() - r->t_start;
    if (t->leases)
        worker_leases_log(t->leases);
    fprintf(stderr, "psflow %s %d: reached step %" PRIu64 " after %ld local steps, %.1f s\n",
            worker_who(t), t->o->task, t->versions[0], r->local_steps, out->seconds);
    if (!t->o->is_chief)
        return STEP_DONE;
    double at = pf_profile_now(t->prof);
    pf_profile_open(t->prof, PF_PHASE_EVALUATE, at);
    pf_eval ev = worker_chief_evaluate(t);
    worker_chief_log_eval(t, t->versions[0], &ev);
    at = pf_profile_add(t->prof, PF_PHASE_EVALUATE, at);
    pf_profile_open(t->prof, PF_PHASE_CHECKPOINT, at);
    pf_status st = worker_chief_checkpoint(t, t->versions[0], 1, &r->err);
    pf_profile_add(t->prof, PF_PHASE_CHECKPOINT, at);
    if (st != PF_OK) /* async: another task's last push made a value non-finite */
        return answer(t, r, st, t->versions[0], 0, 0);
    out->evaluated = 1;
    out->accuracy =
        t->spec->model.type == PF_MODEL_LINEAR ? NAN : (double)ev.correct / (double)ev.examples;
    out->test_loss = ev.loss_sum / (double)ev.examples;
    out->auc = ev.auc;
    out->calibration = ev.calibration;
    out->bayes_auc = t->bayes_auc;
    return STEP_DONE;
}

/* Steps until every ps reached max_steps (with backup workers the ps tasks advance on their
 * own, and one may still be a step short when another has reached the end; its last step
 * needs this task's gradient as much as any other), then finishes; a rollback at the end
 * (the final checkpoint found a non-finite value) trains on from the checkpoint. */
pf_status worker_run(const worker_options *o, worker_result *out) {
    trainer t = {.o = o, .spec = o->spec, .io = &worker_recovery_link, .bayes_auc = NAN};
    run r;
    memset(&r, 0, sizeof r);
    memset(out, 0, sizeof *out);
    out->accuracy = out->test_loss = out->auc = out->calibration = out->bayes_auc = NAN;
    pf_error_clear(&r.err);
    t.prof = o->profile ? o->profile : &t.own_profile;
    if ((r.st = setup(&t, &r.err)) == PF_OK) {
        run_init(&t, &r);
        r.st = start(&t, &r);
    }
    if (r.st == PF_OK)
        pf_profile_start(t.prof); /* the steps' time, from the first step */
    step_outcome s = r.st == PF_OK ? STEP_GOES_ON : STEP_FAILED;
    while (s != STEP_DONE && s != STEP_FAILED) {
        s = worker_lowest_version(&t) < r.max_steps && !t.input_done ? train_step(&t, &r)
                                                                     : finish(&t, &r, out);
        if (s == STEP_ROLLED_BACK) /* the chief's schedules start again from there */
            t.last_eval = t.last_ckpt = t.versions[0];
        if (s == STEP_ROLLED_BACK) /* leased input: ps 0's queue went back too */
            t.input_done = 0;
        if (s == STEP_ROLLED_BACK || s == STEP_RESYNCED)
            restart_window(&r);
        r.ahead = s == STEP_TAKEN && r.computed; /* kept only by a step that ended normally */
        r.rows_ahead = s == STEP_TAKEN && r.rows_fetched;
        if (s == STEP_TAKEN)
            count_step(&t, &r);
    }
    pf_profile_stop(t.prof);
    if (s == STEP_DONE) /* the end, not a final checkpoint's rollback that trains on */
        log_breakdown(&t);
    out->status = r.st;
    out->steps = t.versions ? t.versions[0] : 0;
    out->local_steps = r.local_steps;
    if (r.st != PF_OK) {
        snprintf(out->message, sizeof out->message, "%s", r.err.message);
        out->seconds = r.t_start > 0 ? pf_clock_now() - r.t_start : 0;
    }
    teardown(&t);
    return r.st;
}

/* --- the result --- */

static void print_json(json_t *j) {
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (text)
        printf("%s\n", text);
    free(text);
    json_decref(j);
}

void worker_result_print(const worker_options *o, const worker_result *r) {
    const char *name = o->spec->name;
    if (r->status != PF_OK) {
        fprintf(stderr, "psflow %s %d: %s\n", o->is_chief ? "chief" : "worker", o->task,
                r->message);
        if (o->is_chief && o->json && r->status == PF_ERR_NONFINITE) {
            /* The result object as on success, without numbers JSON cannot hold, and why. */
            print_json(json_pack("{s:s, s:I, s:n, s:n, s:f, s:I, s:s, s:s}", "name", name, "steps",
                                 (json_int_t)r->steps, "test_loss", "test_accuracy", "seconds",
                                 r->seconds, "local_steps", (json_int_t)r->local_steps, "reason",
                                 "NonFiniteLoss", "message", r->message));
            fflush(stdout);
        }
        return;
    }
    if (!o->is_chief)
        return;
    if (o->json) {
        json_t *j = json_pack("{s:s, s:I, s:o, s:o, s:f, s:I}", "name", name, "steps",
                              (json_int_t)r->steps, "test_loss", pf_json_number(r->test_loss),
                              "test_accuracy", pf_json_number(r->accuracy), "seconds", r->seconds,
                              "local_steps", (json_int_t)r->local_steps);
        if (j && !isnan(r->auc))
            json_object_set_new(j, "test_auc", pf_json_number(r->auc));
        if (j && !isnan(r->calibration))
            json_object_set_new(j, "test_calibration", pf_json_number(r->calibration));
        if (j && pf_model_two_class(&o->spec->model)) /* its test loss: the mean cross-entropy */
            json_object_set_new(j, "test_logloss", pf_json_number(r->test_loss));
        if (j && !isnan(r->bayes_auc))
            json_object_set_new(j, "bayes_auc", pf_json_number(r->bayes_auc));
        print_json(j);
    } else if (r->accuracy >= 0) {
        printf("%s: %" PRIu64 " steps, test accuracy %.4f, %.1f s\n", name, r->steps, r->accuracy,
               r->seconds);
    } else {
        printf("%s: %" PRIu64 " steps, test loss %.6f, %.1f s\n", name, r->steps, r->test_loss,
               r->seconds);
    }
    fflush(stdout);
}
