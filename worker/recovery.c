/* recovery.c - a training task's rollbacks, resyncs, skipped data and membership changes
 * (see recovery.h).
 *
 * DESIGN: the ps tasks are where trouble shows: a ps that restarted (a new incarnation,
 * restored from its newest complete checkpoint), a ps whose values went non-finite (it
 * answers NONFINITE and writes no checkpoint), a ps whose version went back. The chief
 * repairs (every ps restores one complete checkpoint: RESTORE); the other tasks wait until
 * the ps tasks serve again, each wait bounded by training.stall_timeout_secs. Each decision
 * is a pure function of what the ps tasks reported; the actions reach the ps tasks only
 * through t->io.
 */
#include "worker/recovery.h"

#include <float.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/checkpoint.h"
#include "psflow/fs.h"

/* --- decisions --- */

worker_recovery_action worker_recovery_after(pf_status st, int rollback, int periodic_checkpoint) {
    if (st == PF_OK)
        return WORKER_RECOVERY_NONE;
    if (st == PF_ERR_NONFINITE && rollback)
        return WORKER_RECOVERY_NONFINITE;
    if (st == PF_ERR_UNAVAILABLE && periodic_checkpoint)
        return WORKER_RECOVERY_ROLL_BACK;
    return WORKER_RECOVERY_FAIL;
}

worker_nonfinite_action worker_recovery_nonfinite_action(int pending, int is_chief, int n_rollbacks,
                                                         int max_rollbacks) {
    if (pending)
        return is_chief ? WORKER_NONFINITE_FINISH : WORKER_NONFINITE_AWAIT;
    if (n_rollbacks >= max_rollbacks)
        return WORKER_NONFINITE_GIVE_UP;
    return is_chief ? WORKER_NONFINITE_RESTORE : WORKER_NONFINITE_WAIT;
}

float worker_recovery_lr_factor(double scale, int n_rollbacks) {
    float f = (float)pow(scale, n_rollbacks);
    return f > FLT_MIN ? f : FLT_MIN; /* never 0: RESTORE needs a factor in (0, 1] */
}

int worker_recovery_went_back(int sync, int n_ps, const uint64_t *versions,
                              const uint64_t *min_version, uint64_t max_steps) {
    int went_back = 0;
    for (int p = 0; sync && p < n_ps; p++)
        went_back |= versions[p] < min_version[p] && versions[p] < max_steps;
    return went_back;
}

static void version_range(int n_ps, const uint64_t *versions, uint64_t *lo, uint64_t *hi) {
    *lo = *hi = versions[0];
    for (int p = 1; p < n_ps; p++) {
        *lo = versions[p] < *lo ? versions[p] : *lo;
        *hi = versions[p] > *hi ? versions[p] : *hi;
    }
}

int worker_recovery_needs_realign(int is_chief, int sync, int n_ps, const uint64_t *versions) {
    uint64_t lo, hi;
    version_range(n_ps, versions, &lo, &hi);
    return is_chief && sync && hi > lo + 1;
}

int worker_recovery_settled(int n_ps, const uint64_t *versions, uint64_t spread) {
    uint64_t lo, hi;
    version_range(n_ps, versions, &lo, &hi);
    return hi - lo <= spread;
}

int worker_recovery_tasks(int current, const int *workers, int chief) {
    if (!workers)
        return current;
    int now = __atomic_load_n(workers, __ATOMIC_RELAXED) + chief;
    return now >= 1 && now <= PF_MAX_REPLICAS + 1 ? now : current;
}

/* --- the link's io --- */

static pf_status link_pull(trainer *t, pf_error *err) {
    return worker_link_pull(t->link, NULL, t->params, t->versions, err);
}

static pf_status link_restore(trainer *t, uint64_t step, float lr_factor, pf_error *err) {
    return worker_link_restore(t->link, step, lr_factor, err);
}

static int link_take_restart(trainer *t, int *ps, uint64_t *version) {
    return worker_link_take_restart(t->link, ps, version);
}

static pf_status newest_checkpoint(const trainer *t, int64_t *step, pf_error *err) {
    char job_dir[2048], step_dir[2048];
    if (pf_checkpoint_job_dir(t->o->checkpoint_dir, t->spec->name, job_dir, sizeof job_dir) !=
        PF_OK)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    return pf_checkpoint_find_latest(job_dir, 0, step, step_dir, sizeof step_dir, err);
}

const worker_ps_io worker_recovery_link = {link_pull, link_restore, link_take_restart,
                                           newest_checkpoint};

/* --- rollbacks --- */

static float lr_factor(const trainer *t) {
    return worker_recovery_lr_factor(t->spec->training.nonfinite_lr_scale, t->n_rollbacks);
}

/* The step the chief was at: the newest version a ps served it, or the step its last push
 * was computed at (a ps that restarted has already answered with its restored version). */
static uint64_t step_reached(const trainer *t) {
    uint64_t m = worker_max_version(t);
    for (int p = 0; t->steps && p < t->n_ps; p++)
        if (t->steps[p] > m)
            m = t->steps[p];
    return m;
}

/* After every ps restored one checkpoint (RESTORE answered): the chief pulls the values it
 * goes on from, forgets the restores it caused itself, does not checkpoint what it just
 * restored at once, and says so (log and the coordinator's RolledBack) from step `from`. */
static pf_status rolled_back_to(trainer *t, uint64_t from, pf_error *err) {
    pf_status st = t->io->pull(t, err);
    if (st != PF_OK)
        return st;
    int ps;
    uint64_t restored;
    t->io->take_restart(t, &ps, &restored); /* its own restore: already done */
    t->last_checkpoint_time = pf_clock_now();
    fprintf(stderr,
            "psflow chief: rolled back from step %" PRIu64 " to checkpoint step %" PRIu64 "\n",
            from, t->versions[0]);
    worker_report r = {.kind = WORKER_REPORT_ROLLBACK, .step = t->versions[0], .from_step = from};
    worker_send_report(t, &r);
    return PF_OK;
}

/* The chief's consistent rollback: a ps that restarted restored the newest complete
 * checkpoint; every ps is told to restore that same one (RESTORE), and training goes on
 * from its step. Returns PF_OK with *rolled 0 when no ps restarted. */
pf_status worker_roll_back(trainer *t, int *rolled, pf_error *err) {
    *rolled = 0;
    int ps;
    uint64_t restored;
    if (!t->o->is_chief || !t->io->take_restart(t, &ps, &restored))
        return PF_OK;
    int64_t step;
    uint64_t from = step_reached(t);
    for (int attempt = 0;; attempt++) {
        pf_status st = t->io->newest_checkpoint(t, &step, err);
        if (st == PF_ERR_NOT_FOUND) {
            fprintf(stderr,
                    "psflow chief: ps %d restarted (restored version %" PRIu64
                    ") and there is no complete checkpoint to roll every ps back to\n",
                    ps, restored);
            return PF_OK;
        }
        if (st != PF_OK)
            return st;
        fprintf(stderr,
                "psflow chief: ps %d restarted and restored version %" PRIu64
                "; rolling every ps back to checkpoint step %" PRId64 " (from step %" PRIu64 ")\n",
                ps, restored, step, from);
        st = t->io->restore(t, (uint64_t)step, lr_factor(t), err);
        if (st == PF_OK)
            break;
        if (attempt >= 3 || !t->io->take_restart(t, &ps, &restored))
            return st; /* retried only when another ps restarted meanwhile */
    }
    pf_status st = rolled_back_to(t, from, err);
    *rolled = st == PF_OK;
    return st;
}

/* A chief that starts on a running sync job (a replacement for one that was lost) and finds
 * the ps tasks more than a step apart: a rollback its predecessor left half done (some ps
 * restored, others not), which no step can bring together. Every ps is rolled back to the
 * newest complete checkpoint, as the consistent rollback does. Without a checkpoint it says
 * so and goes on. */
pf_status worker_realign(trainer *t, pf_error *err) {
    int64_t step;
    uint64_t lo = worker_lowest_version(t), from = step_reached(t);
    pf_status st = t->io->newest_checkpoint(t, &step, err);
    if (st == PF_ERR_NOT_FOUND) {
        fprintf(stderr,
                "psflow chief: the ps tasks are at steps %" PRIu64 " to %" PRIu64
                " and there is no complete checkpoint to roll them back to\n",
                lo, from);
        pf_error_clear(err);
        return PF_OK;
    }
    if (st != PF_OK)
        return st;
    fprintf(stderr,
            "psflow chief: the ps tasks are at steps %" PRIu64 " to %" PRIu64
            " (a rollback left half done); rolling every ps back to checkpoint step %" PRId64 "\n",
            lo, from, step);
    if ((st = t->io->restore(t, (uint64_t)step, lr_factor(t), err)) != PF_OK)
        return st;
    return rolled_back_to(t, from, err);
}

/* A sync worker that sees a ps's version go back (a rollback, or a ps that restarted)
 * drops what it computed before it and pulls until every ps serves one version (with
 * backup workers, versions one apart), for at most training.stall_timeout_secs. */
pf_status worker_resync(trainer *t, pf_error *err) {
    const char *who = worker_who(t);
    const double limit = (double)t->spec->training.stall_timeout_secs, start = pf_clock_now();
    uint64_t spread = t->spec->training.replicas_to_aggregate < t->n_tasks ? 1 : 0, lo0, hi0;
    version_range(t->n_ps, t->versions, &lo0, &hi0);
    fprintf(stderr,
            "psflow %s %d: a ps went back (a rollback, or a ps restarted): the ps tasks serve "
            "versions %" PRIu64 " to %" PRIu64 "; waiting for every ps to serve one version\n",
            who, t->o->task, lo0, hi0);
    for (double backoff = 0.01;; backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2) {
        pf_status st = t->io->pull(t, err);
        if (st != PF_OK)
            return st;
        uint64_t lo, hi;
        version_range(t->n_ps, t->versions, &lo, &hi);
        if (worker_recovery_settled(t->n_ps, t->versions, spread)) {
            fprintf(stderr, "psflow %s %d: every ps at version %" PRIu64 "; going on\n", who,
                    t->o->task, lo);
            return PF_OK;
        }
        if (pf_clock_now() - start > limit)
            return pf_error_set(err, PF_ERR_UNAVAILABLE, NULL,
                                "the ps tasks stayed at different versions (%" PRIu64 " .. %" PRIu64
                                ") for %.0f s after a rollback (training.stall_timeout_secs)",
                                lo, hi, pf_clock_now() - start);
        pf_clock_sleep(backoff); /* polling the ps tasks' versions, with a deadline */
    }
}

/* --- the data-skips file --- */

/* The job's non-finite rollbacks so far and, in sync mode, the data steps they skipped,
 * kept by the chief in <checkpoint_dir>/<job>/data-skips.json ({"rollbacks": R, "skipped":
 * [d, ...]}, ascending), written before it rolls the ps tasks back: a task that starts later
 * (restarted, added, or a restarted chief) skips the same steps and counts the same
 * rollbacks (and so the same learning-rate factor). Async tasks skip their own batch, which
 * only they know: the file holds no step for them. */
#define SKIPS_FILE "data-skips.json"

static pf_status skips_path(const trainer *t, char *path, size_t len, pf_error *err) {
    char job_dir[2048];
    if (pf_checkpoint_job_dir(t->o->checkpoint_dir, t->spec->name, job_dir, sizeof job_dir) !=
            PF_OK ||
        (size_t)snprintf(path, len, "%s/" SKIPS_FILE, job_dir) >= len)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    return PF_OK;
}

static pf_status write_skips(const trainer *t, int pending, pf_error *err) {
    char path[2100];
    pf_status st = skips_path(t, path, sizeof path, err);
    if (st != PF_OK)
        return st;
    json_t *skipped = json_array();
    for (int i = 0; skipped && t->spec->training.mode == PF_MODE_SYNC && i < t->plan.n_skipped; i++)
        json_array_append_new(skipped, json_integer((json_int_t)t->plan.skipped[i]));
    json_t *j = skipped ? json_pack("{s:i, s:o, s:b}", "rollbacks", t->n_rollbacks, "skipped",
                                    skipped, "pending", pending)
                        : NULL;
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    struct iovec part = {text, strlen(text)};
    st = pf_fs_write_atomic(path, &part, 1, err);
    free(text);
    return st;
}

/* Reads the job's data-skips.json when there is one; a file that does not parse, or holds
 * values out of range, is reported and ignored. */
void worker_read_skips(trainer *t) {
    const char *who = worker_who(t);
    char path[2100], *text = NULL;
    size_t len;
    pf_error err;
    pf_error_clear(&err);
    if (skips_path(t, path, sizeof path, &err) != PF_OK ||
        pf_fs_read_file(path, 1 << 20, &text, &len, &err) != PF_OK)
        return; /* none: no rollback yet */
    json_error_t jerr;
    json_t *j = json_loadb(text, len, 0, &jerr);
    free(text);
    json_t *rollbacks = json_object_get(j, "rollbacks"), *skipped = json_object_get(j, "skipped");
    const int max = t->spec->training.nonfinite_max_rollbacks;
    int ok = json_is_integer(rollbacks) && json_integer_value(rollbacks) >= 0 &&
             json_integer_value(rollbacks) <= max && json_is_array(skipped) &&
             json_array_size(skipped) <= (size_t)json_integer_value(rollbacks);
    for (size_t i = 0; ok && i < json_array_size(skipped); i++) {
        json_t *d = json_array_get(skipped, i);
        ok = json_is_integer(d) && json_integer_value(d) >= 0 &&
             json_integer_value(d) - max <= t->spec->training.max_steps &&
             (i == 0 || json_integer_value(d) > json_integer_value(json_array_get(skipped, i - 1)));
    }
    if (!ok) {
        fprintf(stderr, "psflow %s %d: %s: not a data-skips file of this job; ignored\n", who,
                t->o->task, path);
        json_decref(j);
        return;
    }
    t->n_rollbacks = (int)json_integer_value(rollbacks);
    t->pending = json_is_true(json_object_get(j, "pending"));
    for (size_t i = 0; t->spec->training.mode == PF_MODE_SYNC && i < json_array_size(skipped); i++)
        worker_plan_skip(&t->plan, (uint64_t)json_integer_value(json_array_get(skipped, i)));
    json_decref(j);
    fprintf(stderr,
            "psflow %s %d: %d non-finite rollback(s) so far, %d data step(s) skipped (%s)\n", who,
            t->o->task, t->n_rollbacks, t->plan.n_skipped, path);
}

/* --- membership --- */

/* Before each step at global step `global`: the data partition follows a rollback to before
 * a membership change, and a live membership change (o->workers) partitions the stream
 * among the new number of tasks from this step on, starting where the old partition left
 * off, so no stream position is skipped or read twice by the tasks that saw the change at
 * the same step (data_plan.h). */
void worker_take_membership(trainer *t, uint64_t global) {
    int n = worker_recovery_tasks(t->n_tasks, t->o->workers, t->spec->replicas.chief);
    int before = worker_plan_tasks(&t->plan);
    if (!worker_plan_update(&t->plan, global, n))
        return;
    uint64_t ds = worker_plan_data_step(&t->plan, global);
    fprintf(stderr,
            "psflow %s %d: %d training tasks (was %d) at step %" PRIu64 "; data from stream "
            "position %" PRId64 "\n",
            worker_who(t), t->o->task, n, before, global, worker_plan_step_start(&t->plan, ds));
    t->n_tasks = n;
}

/* --- non-finite rollbacks --- */

/* A worker after a non-finite answer: polls until the chief's RESTORE makes the ps tasks
 * serve again, for at most stall_timeout_secs. */
static pf_status wait_for_chief(trainer *t, const char *why, pf_error *err) {
    const double start = pf_clock_now();
    for (double backoff = 0.01;; backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2) {
        pf_status st = t->io->pull(t, err);
        if (st == PF_OK)
            break;
        if (st != PF_ERR_NONFINITE)
            return st;
        if (pf_clock_now() - start > (double)t->spec->training.stall_timeout_secs)
            return pf_error_set(err, PF_ERR_NONFINITE, NULL,
                                "%s; the chief did not roll the ps tasks back within %.0f s "
                                "(training.stall_timeout_secs)",
                                why, pf_clock_now() - start);
        pf_clock_sleep(backoff); /* polling until the chief's RESTORE, with a deadline */
    }
    fprintf(stderr, "psflow %s %d: the ps tasks serve step %" PRIu64 " again; going on\n",
            worker_who(t), t->o->task, t->versions[0]);
    return PF_OK;
}

/* The chief after a non-finite answer at step `failed`: every ps restores the newest complete
 * checkpoint with the learning rate scaled; `skip` says what data is skipped, `why` what went
 * non-finite. */
static pf_status restore_after_nonfinite(trainer *t, uint64_t failed, const char *skip,
                                         const char *why, pf_error *err) {
    int64_t step;
    pf_status st = t->io->newest_checkpoint(t, &step, err);
    if (st == PF_ERR_NOT_FOUND)
        return pf_error_set(err, PF_ERR_NONFINITE, NULL,
                            "%s; no complete checkpoint to roll back to", why);
    if (st != PF_OK)
        return st;
    /* Written before any ps restores, marked pending until every one has: a task that
     * starts meanwhile skips the same steps and does not count this rollback again. */
    if ((st = write_skips(t, 1, err)) != PF_OK)
        return st;
    float factor = lr_factor(t);
    if ((st = t->io->restore(t, (uint64_t)step, factor, err)) != PF_OK)
        return st;
    if ((st = t->io->pull(t, err)) != PF_OK)
        return st;
    if ((st = write_skips(t, 0, err)) != PF_OK)
        return st;
    t->last_checkpoint_time = pf_clock_now(); /* not at once a checkpoint of what it restored */
    char msg[1024];
    snprintf(msg, sizeof msg,
             "non-finite value: every ps rolled back from step %" PRIu64
             " to checkpoint step %" PRId64 "; %s; learning rate x%g; %s",
             failed, step, skip, (double)factor, why);
    fprintf(stderr, "psflow chief: %s\n", msg);
    worker_report r = {.kind = WORKER_REPORT_ROLLBACK,
                       .step = (uint64_t)step, /* async: others may be past it already */
                       .from_step = failed > (uint64_t)step ? failed : (uint64_t)step,
                       .reason = "NonFiniteLoss",
                       .message = msg};
    worker_send_report(t, &r);
    return PF_OK;
}

/* A fed data step is skipped from now on; `skip` receives what was skipped. */
static void skip_fed_step(trainer *t, uint64_t failed, char *skip, size_t len) {
    const pf_training_spec *tr = &t->spec->training;
    uint64_t d = worker_plan_data_step(&t->plan, failed);
    worker_plan_skip(&t->plan, d); /* room: one per rollback, at most the limit */
    const int b = t->spec->replicas_per_worker * tr->batch_size;
    int sync = tr->mode == PF_MODE_SYNC;
    int64_t first = worker_plan_step_start(&t->plan, d) + (sync ? 0 : (int64_t)t->o->task * b);
    snprintf(skip, len,
             "data step %" PRIu64 " skipped (stream positions %" PRId64 "..%" PRId64 ": %s)", d,
             first, first + (int64_t)(sync ? t->n_tasks : 1) * b - 1,
             sync ? "every task's batch of the failing step" : "this task's batch");
}

/* training.on_nonfinite "rollback": a ps answered NONFINITE (err holds its message, naming
 * the variable and the step) while this task was at global step `failed`, having pushed the
 * gradient of that step's batch (`fed`) or not (a pull, a checkpoint). A fed data step is
 * skipped from now on: in sync mode every task is at the failing step, so that step's
 * batches of every task, the ones whose gradients made the value non-finite, are never fed
 * again; in async mode each task skips the batch it was pushing. The chief restores every ps
 * to the newest complete checkpoint (no checkpoint holds a non-finite value: a ps that went
 * non-finite writes none) with the learning rate scaled by nonfinite_lr_scale per rollback;
 * the other tasks poll until the ps tasks serve again, for at most stall_timeout_secs.
 * After nonfinite_max_rollbacks the task fails with the non-finite error. */
pf_status worker_recover_nonfinite(trainer *t, uint64_t failed, int fed, pf_error *err) {
    const pf_training_spec *tr = &t->spec->training;
    const char *who = worker_who(t);
    char why[sizeof err->message];
    snprintf(why, sizeof why, "%s", err->message);
    char skip[256] = "no data skipped by this task (it pushed no gradient)";
    worker_nonfinite_action act = worker_recovery_nonfinite_action(
        t->pending, t->o->is_chief, t->n_rollbacks, tr->nonfinite_max_rollbacks);
    switch (act) {
    case WORKER_NONFINITE_FINISH:
    case WORKER_NONFINITE_AWAIT:
        /* Started while a rollback was under way (data-skips.json says so): the ps tasks
         * still answer NONFINITE for that one, counted and skipped already. The chief
         * finishes it; a worker waits for it. */
        t->pending = 0;
        snprintf(skip, sizeof skip, "the rollback under way when this task started");
        fprintf(stderr, "psflow %s %d: %s; %s\n", who, t->o->task, why, skip);
        break;
    case WORKER_NONFINITE_GIVE_UP:
        return pf_error_set(err, PF_ERR_NONFINITE, NULL,
                            "%s; not rolled back: %d rollbacks already "
                            "(training.nonfinite_max_rollbacks)",
                            why, t->n_rollbacks);
    case WORKER_NONFINITE_RESTORE:
    case WORKER_NONFINITE_WAIT:
        t->n_rollbacks++;
        if (fed)
            skip_fed_step(t, failed, skip, sizeof skip);
        fprintf(stderr,
                "psflow %s %d: %s; non-finite rollback %d of at most %d at step %" PRIu64 ", %s\n",
                who, t->o->task, why, t->n_rollbacks, tr->nonfinite_max_rollbacks, failed, skip);
        break;
    }
    if (act == WORKER_NONFINITE_AWAIT || act == WORKER_NONFINITE_WAIT)
        return wait_for_chief(t, why, err);
    return restore_after_nonfinite(t, failed, skip, why, err);
}
