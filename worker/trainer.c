/* trainer.c - the training loop of a worker or chief (see trainer.h).
 *
 * DESIGN: parameters and gradients live in host vectors that the link to the ps fills and
 * reads. A step gathers the worker's K * batch_size examples, and its in-graph replicas
 * (towers.h, K = replicas_per_worker, usually 1) turn the parameters into one averaged
 * gradient: per replica, the parameters and its slice of the batch cross to its backend and
 * its gradient comes back (on the CPU backend the replica reads and writes the host vectors
 * themselves; on a GPU, the one host<->device transfer each way). The chief evaluates on replica
 * 0's backend. Everything is allocated before the first step.
 */
#include "worker/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "psflow/backend.h"
#include "psflow/checkpoint.h"
#include "psflow/clock.h"
#include "psflow/data.h"
#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/towers.h"
#include "psflow/wire.h"
#include "psflow/wire_auth.h"
#include "worker/data_plan.h"
#include "worker/link.h"
#include "worker/rows.h"

#define EVAL_BATCH 1000

typedef struct trainer {
    const worker_options *o;
    const pf_job_spec *spec;
    const pf_backend *be; /* replica 0's: evaluation */
    pf_towers *towers;
    worker_link *link;
    pf_model *model; /* evaluation (chief) */
    pf_dataset train, test;
    int has_test;
    pf_sampler *sampler;
    size_t n_params;
    int n_ps, n_tasks;
    float *params, *grads; /* host; in the link's segment when in_segment */
    int in_segment;
    float *params_next;          /* host, prefetch only: where the in-flight pull lands */
    float *d_params, *d_x, *d_y; /* backend: evaluation (chief) */
    int32_t *d_labels;
    float *hx, *hy; /* host: the step's K * batch examples, or an evaluation batch */
    int32_t *hlabels;
    uint64_t *versions, *steps, *min_version;
    uint32_t *results; /* each ps's PF_WIRE_PUSH_* answer to the last push (prefetch) */
    double last_checkpoint_time;
    /* training.on_nonfinite "rollback": the data steps never fed again (ascending; one per
     * non-finite rollback, at most nonfinite_max_rollbacks) */
    uint64_t *skipped;    /* the plan's skipped data steps */
    int n_rollbacks;      /* every one this task saw (it fed data or not) */
    int pending;          /* data-skips.json says its last rollback may not be done yet */
    int64_t nan_position; /* PSFLOW_TEST_NAN_POSITION (a testing aid), or -1 */
    worker_plan plan;     /* which examples each step reads (data_plan.h) */
    float *scores;        /* a two-class model's evaluation scores, one per example */
    /* row mode (a model with embedding tables, worker/rows.h): params and grads are the
     * compact vectors of one batch's rows; the chief evaluates a batch of rows at a time */
    int row_mode;
    pf_placement placement;
    worker_rows rows, eval_rows;
    worker_row_plan rplan, eval_plan;
    pf_job_spec compact; /* the job with rows.compact as its model: the towers' */
    float *eval_params;  /* eval_rows' compact vector */
    uint64_t *eval_versions;
} trainer;

/* The model the host vectors are laid out by. */
static const pf_model_spec *vector_model(const trainer *t) {
    return t->row_mode ? &t->rows.compact : &t->spec->model;
}

static void upload_batch(trainer *t, int count) {
    t->be->upload(t->d_x, t->hx, (size_t)count * (size_t)pf_model_input_width(&t->spec->model));
    if (t->spec->model.type == PF_MODEL_LINEAR)
        t->be->upload(t->d_y, t->hy, (size_t)count);
    else
        t->be->upload_i32(t->d_labels, t->hlabels, (size_t)count);
}

/* Evaluates the host parameters on the test set (or the train set without one). */
static pf_eval evaluate(trainer *t) {
    pf_eval ev = {0};
    const pf_dataset *ds = t->has_test ? &t->test : &t->train;
    bool binary = pf_model_two_class(&t->spec->model);
    if (binary && !t->scores)
        t->scores = pf_mallocarray((size_t)ds->n, sizeof *t->scores);
    ev.scores = binary ? t->scores : NULL; /* no memory: no AUC */
    const float *params = t->params;       /* a host backend evaluates the host vector */
    if (t->d_params) {
        t->be->upload(t->d_params, t->params, t->n_params);
        params = t->d_params;
    }
    for (int64_t start = 0; start < ds->n; start += EVAL_BATCH) {
        int count = (int)(ds->n - start < EVAL_BATCH ? ds->n - start : EVAL_BATCH);
        pf_batch_copy(ds, start, count, t->hx, t->hy, t->hlabels);
        if (t->row_mode) { /* the rows of this batch, as the ps tasks hold them now */
            worker_rows_plan(&t->eval_rows, &t->placement, t->hx, count, &t->eval_plan);
            worker_link_set_plan(t->link, &t->eval_plan);
            pf_error err;
            pf_status st = worker_link_pull(t->link, NULL, t->eval_params, t->eval_versions, &err);
            worker_link_set_plan(t->link, NULL);
            if (st != PF_OK) {
                fprintf(stderr, "psflow chief: evaluation stopped after %" PRId64 " examples: %s\n",
                        start, err.message);
                ev.scores = NULL;
                break;
            }
            params = t->eval_params;
        }
        upload_batch(t, count);
        pf_model_eval_batch(t->model, params, t->d_x, t->d_y, t->d_labels, count, &ev);
    }
    ev.auc = ev.scores && ev.examples == ds->n ? pf_auc(ev.scores, ds->y, ds->n) : NAN;
    ev.scores = NULL;
    return ev;
}

static int stopped(const trainer *t) {
    return t->o->stop && __atomic_load_n(t->o->stop, __ATOMIC_RELAXED);
}

static void report(trainer *t, worker_report *r) {
    if (!t->o->report)
        return;
    r->time = pf_clock_wall();
    t->o->report(t->o->report_ctx, r);
}

typedef struct auc_text_buf {
    char text[32];
} auc_text_buf;

/* " test auc 0.8123", or "" without an AUC. */
static auc_text_buf auc_text(const char *set, double auc) {
    auc_text_buf b = {""};
    if (!isnan(auc))
        snprintf(b.text, sizeof b.text, " %s auc %.4f", set, auc);
    return b;
}

static void log_eval(trainer *t, uint64_t step, const pf_eval *ev) {
    worker_report r = {.kind = WORKER_REPORT_EVAL,
                       .step = step,
                       .accuracy = t->spec->model.type == PF_MODEL_LINEAR
                                       ? NAN
                                       : (double)ev->correct / (double)ev->examples,
                       .test_loss = ev->loss_sum / (double)ev->examples};
    report(t, &r);
    const char *set = t->has_test ? "test" : "train";
    if (t->spec->model.type == PF_MODEL_LINEAR)
        fprintf(stderr, "psflow chief: eval step %" PRIu64 " %s loss %.6f\n", step, set,
                ev->loss_sum / (double)ev->examples);
    else
        fprintf(stderr, "psflow chief: eval step %" PRIu64 " %s loss %.4f %s accuracy %.4f%s\n",
                step, set, ev->loss_sum / (double)ev->examples, set,
                (double)ev->correct / (double)ev->examples, auc_text(set, ev->auc).text);
}

static uint64_t max_version(const trainer *t) {
    uint64_t m = 0;
    for (int p = 0; p < t->n_ps; p++)
        m = t->versions[p] > m ? t->versions[p] : m;
    return m;
}

/* Asks every ps to checkpoint at `step`, then makes the checkpoint exist (manifest) and
 * prunes old ones. A sync checkpoint holds values of one version on every ps (the ps writes
 * when it holds version `step`); with backup workers a ps may already be past it, and the
 * chief asks again at a later version, a few times. A periodic checkpoint never asks for
 * max_steps or beyond: a ps there applies nothing more, so such a request could only wait,
 * and the final checkpoint writes that step. Skipping one returns PF_OK. */
/* Before the ps tasks write checkpoint `step` again (a complete one of that step exists
 * already, e.g. training passed the step once more after a rollback): its manifest is moved
 * aside first, so while the files are replaced the folder is an incomplete checkpoint that
 * readers skip, never a complete one whose files disagree with its manifest (which a
 * restarting ps or an evaluator would set aside as corrupt). put_back 0: moves it aside
 * (returns 1 when there was one); 1: the checkpoint was not written, the old manifest goes
 * back; 2: it was, the old one is deleted. */
static int retire_complete(const trainer *t, uint64_t step, int put_back) {
    char dir[2048], path[2100], aside[2120];
    if (pf_checkpoint_step_dir(t->o->checkpoint_dir, t->spec->name, (int64_t)step, dir,
                               sizeof dir) != PF_OK ||
        (size_t)snprintf(path, sizeof path, "%s/manifest.json", dir) >= sizeof path ||
        (size_t)snprintf(aside, sizeof aside, "%s.replaced", path) >= sizeof aside)
        return 0;
    if (put_back == 2)
        return unlink(aside) == 0;
    if (rename(put_back ? aside : path, put_back ? path : aside) != 0)
        return 0; /* none: the usual case */
    pf_fs_fsync_dir(dir);
    if (!put_back)
        fprintf(stderr,
                "psflow chief: checkpoint %s (step %" PRIu64 ") is written again: its "
                "manifest moved aside first\n",
                dir, step);
    return 1;
}

static pf_status checkpoint(trainer *t, uint64_t step, int final, pf_error *err) {
    pf_status st;
    const uint64_t max_steps = (uint64_t)t->spec->training.max_steps;
    for (int attempt = 0;; attempt++) {
        int retired = retire_complete(t, step, 0);
        st = worker_link_checkpoint(t->link, step, final, err);
        if (retired)
            retire_complete(t, step, st == PF_OK ? 2 : 1);
        if (st != PF_ERR_RANGE || final || attempt >= 8)
            break;
        fprintf(stderr, "psflow chief: checkpoint at step %" PRIu64 ": %s; asking at a later one\n",
                step, err->message);
        if ((st = worker_link_pull(t->link, NULL, t->params, t->versions, err)) != PF_OK)
            return st;
        step = max_version(t) + 1 + (uint64_t)attempt;
        if (step >= max_steps) {
            fprintf(stderr,
                    "psflow chief: periodic checkpoint skipped: the ps tasks are at step %" PRIu64
                    " of %" PRIu64 " and the final checkpoint follows\n",
                    max_version(t), max_steps);
            pf_error_clear(err);
            t->last_checkpoint_time = pf_clock_now();
            return PF_OK;
        }
    }
    if (st != PF_OK)
        return st;
    char job_dir[2048], step_dir[2048];
    const char *root = t->o->checkpoint_dir;
    if (pf_checkpoint_job_dir(root, t->spec->name, job_dir, sizeof job_dir) != PF_OK ||
        pf_checkpoint_step_dir(root, t->spec->name, (int64_t)step, step_dir, sizeof step_dir) !=
            PF_OK)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    st = pf_checkpoint_write_manifest(step_dir, t->spec->name, (int64_t)step, t->n_ps, NULL, err);
    if (st != PF_OK)
        return st;
    int removed = 0;
    pf_checkpoint_prune(job_dir, t->spec->checkpoint.keep, &removed, NULL);
    fprintf(stderr, "psflow chief: checkpoint %s complete%s\n", step_dir, final ? " (final)" : "");
    worker_report r = {.kind = WORKER_REPORT_CHECKPOINT, .step = step, .step_dir = step_dir};
    report(t, &r);
    t->last_checkpoint_time = pf_clock_now();
    return PF_OK;
}

/* The step of the job's newest complete checkpoint (PF_ERR_NOT_FOUND without one). */
static pf_status newest_checkpoint(const trainer *t, int64_t *step, pf_error *err) {
    char job_dir[2048], step_dir[2048];
    if (pf_checkpoint_job_dir(t->o->checkpoint_dir, t->spec->name, job_dir, sizeof job_dir) !=
        PF_OK)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    return pf_checkpoint_find_latest(job_dir, 0, step, step_dir, sizeof step_dir, err);
}

/* The learning-rate factor every ps updates with: training.nonfinite_lr_scale per non-finite
 * rollback so far (1 without one). */
static float lr_factor(const trainer *t) {
    float f = (float)pow(t->spec->training.nonfinite_lr_scale, t->n_rollbacks);
    return f > FLT_MIN ? f : FLT_MIN; /* never 0: RESTORE needs a factor in (0, 1] */
}

/* After every ps restored one checkpoint (RESTORE answered): the chief pulls the values it
 * goes on from, forgets the restores it caused itself, does not checkpoint what it just
 * restored at once, and says so (log and the coordinator's RolledBack) from step `from`. */
static pf_status rolled_back_to(trainer *t, uint64_t from, pf_error *err) {
    pf_status st = worker_link_pull(t->link, NULL, t->params, t->versions, err);
    if (st != PF_OK)
        return st;
    int ps;
    uint64_t restored;
    worker_link_take_restart(t->link, &ps, &restored); /* its own restore: already done */
    t->last_checkpoint_time = pf_clock_now();
    fprintf(stderr, "psflow chief: rolled back from step %" PRIu64 " to step %" PRIu64 "\n", from,
            t->versions[0]);
    worker_report r = {.kind = WORKER_REPORT_ROLLBACK, .step = t->versions[0], .from_step = from};
    report(t, &r);
    return PF_OK;
}

/* The chief's consistent rollback: a ps that restarted restored the newest complete
 * checkpoint; every ps is told to restore that same one (RESTORE), and training goes on
 * from its step. Returns PF_OK with *rolled 0 when no ps restarted. */
static pf_status roll_back(trainer *t, int *rolled, pf_error *err) {
    *rolled = 0;
    int ps;
    uint64_t restored;
    if (!t->o->is_chief || !worker_link_take_restart(t->link, &ps, &restored))
        return PF_OK;
    int64_t step;
    uint64_t from = max_version(t);
    for (int attempt = 0;; attempt++) {
        pf_status st = newest_checkpoint(t, &step, err);
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
        st = worker_link_restore(t->link, (uint64_t)step, lr_factor(t), err);
        if (st == PF_OK)
            break;
        if (attempt >= 3 || !worker_link_take_restart(t->link, &ps, &restored))
            return st; /* retried only when another ps restarted meanwhile */
    }
    pf_status st = rolled_back_to(t, from, err);
    *rolled = st == PF_OK;
    return st;
}

/* The version of the ps furthest behind, as this task last saw it. */
static uint64_t lowest_version(const trainer *t) {
    uint64_t lo = t->versions[0];
    for (int p = 1; p < t->n_ps; p++)
        lo = t->versions[p] < lo ? t->versions[p] : lo;
    return lo;
}

/* A chief that starts on a running sync job (a replacement for one that was lost) and finds
 * the ps tasks more than a step apart: a rollback its predecessor left half done (some ps
 * restored, others not), which no step can bring together. Every ps is rolled back to the
 * newest complete checkpoint, as the consistent rollback does. Without a checkpoint it says
 * so and goes on. */
static pf_status realign(trainer *t, pf_error *err) {
    int64_t step;
    uint64_t lo = lowest_version(t), from = max_version(t);
    pf_status st = newest_checkpoint(t, &step, err);
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
    if ((st = worker_link_restore(t->link, (uint64_t)step, lr_factor(t), err)) != PF_OK)
        return st;
    return rolled_back_to(t, from, err);
}

/* A sync worker that sees a ps's version go back (a rollback, or a ps that restarted)
 * drops what it computed before it and pulls until every ps serves one version (with
 * backup workers, versions one apart), for at most training.stall_timeout_secs. */
static pf_status resync(trainer *t, pf_error *err) {
    const char *who = t->o->is_chief ? "chief" : "worker";
    const double limit = (double)t->spec->training.stall_timeout_secs, start = pf_clock_now();
    uint64_t spread = t->spec->training.replicas_to_aggregate < t->n_tasks ? 1 : 0;
    fprintf(stderr,
            "psflow %s %d: a ps went back to version %" PRIu64
            " (rollback); waiting for every ps to serve one version\n",
            who, t->o->task, t->versions[0]);
    for (double backoff = 0.01;; backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2) {
        pf_status st = worker_link_pull(t->link, NULL, t->params, t->versions, err);
        if (st != PF_OK)
            return st;
        uint64_t lo = t->versions[0], hi = t->versions[0];
        for (int p = 1; p < t->n_ps; p++) {
            lo = t->versions[p] < lo ? t->versions[p] : lo;
            hi = t->versions[p] > hi ? t->versions[p] : hi;
        }
        if (hi - lo <= spread) {
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
static void read_skips(trainer *t) {
    const char *who = t->o->is_chief ? "chief" : "worker";
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

/* Before each step at global step `global`: the data partition follows a rollback to before
 * a membership change, and a live membership change (o->workers) partitions the stream
 * among the new number of tasks from this step on, starting where the old partition left
 * off, so no stream position is skipped or read twice by the tasks that saw the change at
 * the same step (data_plan.h). */
static void take_membership(trainer *t, uint64_t global) {
    int n = t->n_tasks;
    if (t->o->workers) {
        int now = __atomic_load_n(t->o->workers, __ATOMIC_RELAXED) + t->spec->replicas.chief;
        if (now >= 1 && now <= PF_MAX_REPLICAS + 1)
            n = now;
    }
    int before = worker_plan_tasks(&t->plan);
    if (!worker_plan_update(&t->plan, global, n))
        return;
    uint64_t ds = worker_plan_data_step(&t->plan, global);
    fprintf(stderr,
            "psflow %s %d: %d training tasks (was %d) at step %" PRIu64 "; data from stream "
            "position %" PRId64 "\n",
            t->o->is_chief ? "chief" : "worker", t->o->task, n, before, global,
            worker_plan_step_start(&t->plan, ds));
    t->n_tasks = n;
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
static pf_status recover_nonfinite(trainer *t, uint64_t failed, int fed, pf_error *err) {
    const pf_training_spec *tr = &t->spec->training;
    const char *who = t->o->is_chief ? "chief" : "worker";
    char why[sizeof err->message];
    snprintf(why, sizeof why, "%s", err->message);
    char skip[256] = "no data skipped by this task (it pushed no gradient)";
    if (t->pending) {
        /* Started while a rollback was under way (data-skips.json says so): the ps tasks
         * still answer NONFINITE for that one, counted and skipped already. The chief
         * finishes it; a worker waits for it. */
        t->pending = 0;
        snprintf(skip, sizeof skip, "the rollback under way when this task started");
        fprintf(stderr, "psflow %s %d: %s; %s\n", who, t->o->task, why, skip);
        if (!t->o->is_chief)
            goto wait_for_chief;
        goto restore;
    }
    if (t->n_rollbacks >= tr->nonfinite_max_rollbacks)
        return pf_error_set(err, PF_ERR_NONFINITE, NULL,
                            "%s; not rolled back: %d rollbacks already "
                            "(training.nonfinite_max_rollbacks)",
                            why, t->n_rollbacks);
    t->n_rollbacks++;
    if (fed) {
        uint64_t d = worker_plan_data_step(&t->plan, failed);
        worker_plan_skip(&t->plan, d); /* room: one per rollback, at most the limit */
        const int b = t->spec->replicas_per_worker * tr->batch_size;
        int sync = tr->mode == PF_MODE_SYNC;
        int64_t first = worker_plan_step_start(&t->plan, d) + (sync ? 0 : (int64_t)t->o->task * b);
        snprintf(skip, sizeof skip,
                 "data step %" PRIu64 " skipped (stream positions %" PRId64 "..%" PRId64 ": %s)", d,
                 first, first + (int64_t)(sync ? t->n_tasks : 1) * b - 1,
                 sync ? "every task's batch of the failing step" : "this task's batch");
    }
    fprintf(stderr,
            "psflow %s %d: %s; non-finite rollback %d of at most %d at step %" PRIu64 ", %s\n", who,
            t->o->task, why, t->n_rollbacks, tr->nonfinite_max_rollbacks, failed, skip);
    if (!t->o->is_chief) {
    wait_for_chief:;
        const double start = pf_clock_now();
        for (double backoff = 0.01;; backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2) {
            pf_status st = worker_link_pull(t->link, NULL, t->params, t->versions, err);
            if (st == PF_OK)
                break;
            if (st != PF_ERR_NONFINITE)
                return st;
            if (pf_clock_now() - start > (double)tr->stall_timeout_secs)
                return pf_error_set(err, PF_ERR_NONFINITE, NULL,
                                    "%s; the chief did not roll the ps tasks back within %.0f s "
                                    "(training.stall_timeout_secs)",
                                    why, pf_clock_now() - start);
            pf_clock_sleep(backoff); /* polling until the chief's RESTORE, with a deadline */
        }
        fprintf(stderr, "psflow %s %d: the ps tasks serve step %" PRIu64 " again; going on\n", who,
                t->o->task, t->versions[0]);
        return PF_OK;
    }
restore:;
    int64_t step;
    pf_status st = newest_checkpoint(t, &step, err);
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
    if ((st = worker_link_restore(t->link, (uint64_t)step, factor, err)) != PF_OK)
        return st;
    if ((st = worker_link_pull(t->link, NULL, t->params, t->versions, err)) != PF_OK)
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
    report(t, &r);
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
            t->o->is_chief ? "chief" : "worker", t->o->task, p);
    return PF_OK;
}

/* Gathers this task's batch of global step `step` (its data step, past skipped ones). */
static void gather(trainer *t, uint64_t step, int b) {
    int64_t start = worker_plan_position(&t->plan, step, t->o->task);
    pf_batch_gather(&t->train, t->sampler, start, b, t->hx, t->hy, t->hlabels);
    if (t->nan_position >= start && t->nan_position < start + b)
        t->hx[(size_t)(t->nan_position - start) * (size_t)pf_model_input_width(&t->spec->model)] =
            NAN;
}

static pf_status setup(trainer *t, pf_error *err) {
    const pf_job_spec *spec = t->spec;
    const int k = spec->replicas_per_worker;
    pf_status st;
    if ((st = read_nan_position(t, err)) != PF_OK)
        return st;
    /* Every replica's device, in replica order, before anything else: a GPU that is not
     * usable fails the task at once, in one line. */
    for (int r = 0; r < k; r++) {
        const pf_device_spec *d = &spec->devices[r];
        if ((st = pf_backend_for_device(d->device, d->index, &t->be, err)) != PF_OK)
            return st;
        if (err && err->message[0]) /* which GPU, or why "auto" trains on the CPU */
            fprintf(stderr, "psflow %s %d: %s\n", t->o->is_chief ? "chief" : "worker", t->o->task,
                    err->message);
    }
    pf_error_clear(err);
    int step_batch = k * spec->training.batch_size;
    const pf_job_spec *tower_spec = spec;
    if (spec->model.n_embeddings > 0) { /* row mode: the towers train on one batch's rows */
        t->row_mode = 1;
        if (worker_rows_init(&t->rows, &spec->model, step_batch) != PF_OK ||
            pf_placement_compute(spec, &t->placement) != PF_OK ||
            worker_row_plan_init(&t->rplan, &t->rows, &t->placement) != PF_OK ||
            pf_job_spec_copy(&t->compact, spec) != PF_OK)
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        t->compact.model = t->rows.compact;
        tower_spec = &t->compact;
    }
    if ((st = pf_towers_create(tower_spec, NULL, &t->towers, err)) != PF_OK)
        return st;
    t->be = pf_towers_backend(t->towers, 0);
    if ((st = pf_dataset_load(spec, false, &t->train, err)) != PF_OK)
        return st;
    int test_exists = pf_data_has_test(&spec->data);
    if (t->o->is_chief && test_exists) {
        if ((st = pf_dataset_load(spec, true, &t->test, err)) != PF_OK)
            return st;
        t->has_test = 1;
    }
    int stage = step_batch > EVAL_BATCH ? step_batch : EVAL_BATCH;
    t->n_params = pf_model_num_params(vector_model(t));
    t->n_ps = spec->replicas.ps;
    t->n_tasks = spec->replicas.worker + spec->replicas.chief;
    size_t in = (size_t)pf_model_input_width(&spec->model);
    t->sampler = pf_sampler_create(t->train.n, spec->training.seed, true);
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
    t->results = pf_calloc((size_t)t->n_ps, sizeof(uint32_t));
    t->skipped = pf_calloc((size_t)spec->training.nonfinite_max_rollbacks + 1, sizeof(uint64_t));
    worker_plan_init(&t->plan, t->n_tasks, k * spec->training.batch_size, t->skipped,
                     spec->training.nonfinite_max_rollbacks + 1);
    if (!t->sampler || !t->params || !t->grads || !t->hx || !t->hy || !t->hlabels || !t->versions ||
        !t->steps || !t->min_version || !t->results || !t->skipped)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    read_skips(t);
    if (t->o->is_chief) { /* the model and buffers the chief evaluates with */
        const pf_model_spec *eval_model = &spec->model;
        if (t->row_mode) {
            if (worker_rows_init(&t->eval_rows, &spec->model, EVAL_BATCH) != PF_OK ||
                worker_row_plan_init(&t->eval_plan, &t->eval_rows, &t->placement) != PF_OK ||
                !(t->eval_params = pf_mallocarray(t->eval_rows.n_params, sizeof(float))) ||
                !(t->eval_versions = pf_calloc((size_t)t->n_ps, sizeof(uint64_t))))
                return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
            eval_model = &t->eval_rows.compact;
        }
        if (pf_model_create(eval_model, t->be, EVAL_BATCH, &t->model) != PF_OK)
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        if (!t->be->host_memory)
            t->d_params = t->be->alloc(t->n_params * sizeof(float));
        t->d_x = t->be->alloc((size_t)EVAL_BATCH * in * sizeof(float));
        t->d_y = t->be->alloc((size_t)EVAL_BATCH * sizeof(float));
        t->d_labels = t->be->alloc((size_t)EVAL_BATCH * sizeof(int32_t));
        if ((!t->be->host_memory && !t->d_params) || !t->d_x || !t->d_y || !t->d_labels)
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    }
    uint8_t role = t->o->is_chief ? PF_WIRE_ROLE_CHIEF : PF_WIRE_ROLE_WORKER;
    uint8_t key[PF_WIRE_KEY_SIZE];
    if (t->o->job_key)
        pf_wire_task_key(t->o->job_key, role, (uint32_t)t->o->task, key);
    worker_link_options co = {spec, t->o->ps_addrs, t->o->task, role, t->o->incarnation,
                              t->o->retry_seconds, t->o->stop, t->o->job_key ? key : NULL,
                              t->o->ca_file, t->row_mode ? &t->rows : NULL,
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

static void teardown(trainer *t) {
    worker_link_destroy(t->link);
    if (t->in_segment) /* the link unmapped them */
        t->params = t->grads = NULL;
    pf_model_destroy(t->model);
    pf_towers_destroy(t->towers);
    pf_sampler_destroy(t->sampler);
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
    pf_free(t->results);
    pf_free(t->skipped);
    pf_free(t->eval_params);
    pf_free(t->eval_versions);
    worker_row_plan_deinit(&t->rplan);
    worker_row_plan_deinit(&t->eval_plan);
    pf_placement_deinit(&t->placement);
    if (t->row_mode)
        pf_job_spec_deinit(&t->compact);
}

pf_status worker_run(const worker_options *o) {
    trainer t;
    memset(&t, 0, sizeof t);
    t.o = o;
    t.spec = o->spec;
    const pf_job_spec *spec = o->spec;
    const char *who = o->is_chief ? "chief" : "worker";
    pf_error err;
    pf_error_clear(&err);
    pf_status st = setup(&t, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow %s %d: %s\n", who, o->task, err.message);
        teardown(&t);
        return st;
    }
    /* b: the examples of one step, K replicas x batch_size */
    const int k = spec->replicas_per_worker, b = k * spec->training.batch_size;
    char split[64] = "";
    if (k > 1)
        snprintf(split, sizeof split, " (%d in-graph replicas x %d)", k, spec->training.batch_size);
    char shared[96] = "";
    if (t.in_segment)
        snprintf(shared, sizeof shared, "; %d of %d ps share its memory (no socket copies)",
                 worker_link_shared(t.link), t.n_ps);
    fprintf(stderr,
            "psflow %s %d: connected to %d ps; training task %d of %d, batch %d%s%s%s%s%s\n", who,
            o->task, t.n_ps, o->task, t.n_tasks, b, split, o->threads_note ? "; " : "",
            o->threads_note ? o->threads_note : "", shared,
            t.params_next ? "; prefetch: the next step is computed during each push-pull"
            : t.row_mode && spec->training.prefetch
                ? "; training.prefetch does not apply: each step pulls its own batch's rows"
                : "");
    int sync = spec->training.mode == PF_MODE_SYNC;
    int rollback = spec->training.on_nonfinite == PF_NONFINITE_ROLLBACK;
    uint64_t max_steps = (uint64_t)spec->training.max_steps;
    double t_start = pf_clock_now(), loss_sum = 0, last_loss = 0;
    long local_steps = 0, window = 0;
    double every = o->report_every_seconds > 0 ? o->report_every_seconds : 0.25;
    double report_start = t_start, report_loss = 0;
    long report_steps = 0;
    t.last_checkpoint_time = t_start;
    uint64_t last_eval = 0, last_ckpt = 0;
    int ahead = 0; /* prefetch: t.grads holds the gradient of step ahead_step, loss ahead_loss */
    uint64_t ahead_step = 0;
    double ahead_loss = 0;

    st = worker_link_pull(t.link, NULL, t.params, t.versions, &err);
    if (st == PF_ERR_NONFINITE && rollback) /* another task's step went non-finite already */
        st = recover_nonfinite(&t, t.versions[0], 0, &err);
    if (st != PF_OK)
        goto fail;
    last_eval = last_ckpt = t.versions[0];
    if (o->workers) /* started after a live change: the membership it was assigned with */
        take_membership(&t, t.versions[0]);
    if (o->is_chief && sync && max_version(&t) > lowest_version(&t) + 1) {
        if ((st = realign(&t, &err)) != PF_OK)
            goto fail;
        last_eval = last_ckpt = t.versions[0];
    }
    /* A first checkpoint right after the variables are initialised (step 0, or where async
     * workers that started first have already taken ps 0): a restore target exists from the
     * start, so a ps restarted before the first periodic checkpoint restores these values
     * rather than serving freshly initialised ones mid-job, and a non-finite rollback has
     * somewhere to go. */
    if (o->is_chief && t.versions[0] < max_steps) {
        int64_t newest;
        pf_status found = newest_checkpoint(&t, &newest, &err);
        if (found == PF_ERR_NOT_FOUND)
            st = checkpoint(&t, t.versions[0], 0, &err);
        else if (found != PF_OK)
            fprintf(stderr, "psflow chief: %s; no first checkpoint taken\n", err.message);
        if (st != PF_OK)
            goto fail;
        pf_error_clear(&err);
    }
    /* The chief's watchdog: every wait is bounded on its own, and this bounds their sum: no
     * version progress for training.stall_timeout_secs fails the job with a line that says
     * so (exit 69; a restart policy acts on it), whatever kept it turning. */
    double progress_time = pf_clock_now();
    uint64_t progress_version = t.versions[0] + lowest_version(&t);
    /* Until every ps has reached max_steps: with backup workers the ps tasks advance on
     * their own, and one may still be a step short when another has reached the end; its
     * last step needs this task's gradient as much as any other. */
train:
    while (lowest_version(&t) < max_steps) {
        uint64_t global = t.versions[0];
        if (stopped(&t)) {
            st = pf_error_set(&err, PF_ERR_CANCELLED, NULL, "stopped at step %" PRIu64, global);
            goto fail;
        }
        if (global + lowest_version(&t) != progress_version) { /* any ps advanced */
            progress_version = global + lowest_version(&t);
            progress_time = pf_clock_now();
        } else if (o->is_chief &&
                   pf_clock_now() - progress_time > (double)spec->training.stall_timeout_secs) {
            st = pf_error_set(&err, PF_ERR_UNAVAILABLE, NULL,
                              "no progress past step %" PRIu64
                              " for %.0f s (training.stall_timeout_secs): every ps answered but "
                              "none advanced; a sync step waits for the gradients of %d tasks",
                              global, pf_clock_now() - progress_time,
                              sync ? spec->training.replicas_to_aggregate : 1);
            goto fail;
        }
        if (o->is_chief) {
            int64_t ee = spec->training.eval_every_steps, ce = spec->checkpoint.every_steps;
            if (ee > 0 && global / (uint64_t)ee > last_eval / (uint64_t)ee) {
                pf_eval ev = evaluate(&t);
                log_eval(&t, global, &ev);
            }
            /* Never at max_steps (ps 0 may be there while another ps is a step short): the
             * final checkpoint writes that step, once. */
            int by_steps =
                ce > 0 && global < max_steps && global / (uint64_t)ce > last_ckpt / (uint64_t)ce;
            int by_time =
                spec->checkpoint.every_secs > 0 && global < max_steps &&
                pf_clock_now() - t.last_checkpoint_time > (double)spec->checkpoint.every_secs;
            if ((by_steps || by_time) && (st = checkpoint(&t, global, 0, &err)) != PF_OK) {
                int rolled = 0;
                if (st == PF_ERR_NONFINITE && rollback) { /* another task's step went non-finite */
                    if ((st = recover_nonfinite(&t, global, 0, &err)) != PF_OK)
                        goto fail;
                    last_eval = last_ckpt = t.versions[0];
                    ahead = 0; /* computed before the rollback */
                    continue;
                }
                if (st != PF_ERR_UNAVAILABLE || roll_back(&t, &rolled, &err) != PF_OK || !rolled)
                    goto fail;
                last_eval = last_ckpt = t.versions[0];
                ahead = 0;
                continue;
            }
            last_eval = last_ckpt = global;
        }
        take_membership(&t, global);
        /* The step whose batch this gradient was computed from: global, or the step a
         * gradient computed ahead (prefetch) read its batch for. */
        uint64_t fed = global;
        if (ahead) {
            fed = ahead_step;
            last_loss = ahead_loss;
        } else {
            gather(&t, global, b);
            if (t.row_mode) { /* this batch's rows, and the dense variables */
                worker_rows_plan(&t.rows, &t.placement, t.hx, b, &t.rplan);
                worker_link_set_plan(t.link, &t.rplan);
                st = worker_link_pull(t.link, NULL, t.params, t.versions, &err);
                if (st == PF_ERR_NONFINITE && rollback) {
                    if ((st = recover_nonfinite(&t, global, 0, &err)) != PF_OK)
                        goto fail;
                    last_eval = last_ckpt = t.versions[0];
                    continue;
                }
                if (st != PF_OK)
                    goto fail;
            }
            last_loss = pf_towers_gradient(t.towers, t.params, t.hx, t.hy, t.hlabels, t.grads);
        }
        ahead = 0;
        int computed = 0; /* a gradient computed ahead during this step's push-pull */
        if ((st = check_finite(&t, last_loss, fed,
                               rollback ? "pushing a NaN gradient: the ps tasks stop and the "
                                          "chief rolls them back"
                                        : "nothing pushed",
                               &err)) != PF_OK) {
            if (!rollback)
                goto fail;
            /* The ps is where a non-finite step becomes visible to every task: a gradient of
             * NaN makes its values NaN, it answers NONFINITE, and the chief rolls back. */
            fprintf(stderr, "psflow %s %d: %s\n", who, o->task, err.message);
            for (size_t i = 0; i < t.n_params; i++)
                t.grads[i] = NAN;
            pf_error_clear(&err);
        }
        /* With every gradient needed (no backup workers) the ps tasks are at one version
         * between steps, unless a worker died between its pushes to two ps: then the one
         * ahead already has its gradient for the step the other still waits for. The
         * restarted worker completes the step behind (its push to the ps ahead is stale,
         * dropped) and the ps tasks are at one version again, instead of staying a step
         * apart for the rest of the job. */
        uint64_t lo = lowest_version(&t);
        int all_needed = sync && spec->training.replicas_to_aggregate >= t.n_tasks;
        for (int p = 0; p < t.n_ps; p++) {
            t.steps[p] = all_needed ? lo : t.versions[p];
            t.min_version[p] = sync ? t.steps[p] + 1 : 0;
        }
        if (o->push_delay_ms > 0) { /* testing aid: make this task's gradients arrive last */
            pf_clock_sleep(o->push_delay_ms / 1000.0);
        }
        if (t.params_next) {
            /* Prefetch (async): while the ps tasks apply this gradient and answer with their
             * values (received into params_next), the next step's gradient is computed from
             * the values this one used: one step staler than without prefetch, which async
             * training allows. Its batch is the one of the step this push leads to. */
            st = worker_link_push_pull_start(t.link, t.grads, t.steps, t.min_version, t.params_next,
                                             &err);
            if (st == PF_OK) {
                if (global + 1 < max_steps && !stopped(&t)) {
                    ahead_step = global + 1;
                    gather(&t, ahead_step, b);
                    ahead_loss =
                        pf_towers_gradient(t.towers, t.params, t.hx, t.hy, t.hlabels, t.grads);
                    computed = 1;
                }
                pf_backend_openblas_idle(); /* no BLAS helper spinning while this task waits */
                st = worker_link_push_pull_finish(t.link, t.versions, t.results, &err);
                /* A ps that restarted (or a push not sent again after a reconnect), or one
                 * the chief rolled back meanwhile (its version went below the one this push
                 * was computed against), answered with values the gradient computed ahead
                 * knows nothing of: it is computed again from them instead. */
                for (int p = 0; st == PF_OK && p < t.n_ps; p++)
                    if (t.results[p] != PF_WIRE_PUSH_APPLIED || t.versions[p] < t.steps[p])
                        computed = 0;
            }
            if (st == PF_OK) {
                float *swap = t.params;
                t.params = t.params_next;
                t.params_next = swap;
            }
        } else {
            pf_backend_openblas_idle(); /* no BLAS helper spinning while this task waits */
            st = worker_link_push_pull(t.link, t.grads, t.steps, t.min_version, t.params,
                                       t.versions, NULL, &err);
        }
        if (st == PF_ERR_NONFINITE && rollback) {
            if ((st = recover_nonfinite(&t, fed, 1, &err)) != PF_OK)
                goto fail;
            last_eval = last_ckpt = t.versions[0];
            continue;
        }
        if (st != PF_OK)
            goto fail;
        int rolled = 0;
        if ((st = roll_back(&t, &rolled, &err)) != PF_OK)
            goto fail;
        if (rolled) {
            last_eval = last_ckpt = t.versions[0];
            continue;
        }
        int went_back = 0;
        for (int p = 0; sync && p < t.n_ps; p++)
            went_back |= t.versions[p] < t.min_version[p] && t.versions[p] < max_steps;
        if (went_back && (st = resync(&t, &err)) == PF_ERR_NONFINITE && rollback)
            st = recover_nonfinite(&t, t.versions[0], 0, &err);
        if (went_back && st != PF_OK)
            goto fail;
        if (went_back)
            continue;
        ahead = computed; /* kept only by a step that ended normally */
        local_steps++;
        loss_sum += last_loss;
        window++;
        report_loss += last_loss;
        report_steps++;
        double now = pf_clock_now();
        if (now - report_start >= every) {
            worker_report r = {.kind = WORKER_REPORT_STEP,
                               .step = t.versions[0],
                               .loss = report_loss / (double)report_steps,
                               .examples_per_sec = (double)report_steps * b / (now - report_start),
                               .step_time_seconds = (now - report_start) / (double)report_steps};
            report(&t, &r);
            report_start = now;
            report_loss = 0;
            report_steps = 0;
        }
        if (o->log_every > 0 && local_steps % o->log_every == 0) {
            double secs = pf_clock_now() - t_start;
            fprintf(stderr,
                    "psflow %s %d: step %" PRIu64 "/%" PRIu64 " loss %.4f %.0f examples/s\n", who,
                    o->task, t.versions[0], max_steps, loss_sum / window,
                    (double)local_steps * b / secs);
            loss_sum = 0;
            window = 0;
        }
    }
    if (report_steps > 0) {
        double now = pf_clock_now();
        worker_report r = {.kind = WORKER_REPORT_STEP,
                           .step = t.versions[0],
                           .loss = report_loss / (double)report_steps,
                           .examples_per_sec = (double)report_steps * b / (now - report_start),
                           .step_time_seconds = (now - report_start) / (double)report_steps};
        report(&t, &r);
    }
    double seconds = pf_clock_now() - t_start;
    fprintf(stderr, "psflow %s %d: reached step %" PRIu64 " after %ld local steps, %.1f s\n", who,
            o->task, t.versions[0], local_steps, seconds);
    if (o->is_chief) {
        pf_eval ev = evaluate(&t);
        log_eval(&t, t.versions[0], &ev);
        if ((st = checkpoint(&t, t.versions[0], 1, &err)) != PF_OK) {
            /* async: another task's last push made a value non-finite */
            if (st != PF_ERR_NONFINITE || !rollback ||
                (st = recover_nonfinite(&t, t.versions[0], 0, &err)) != PF_OK)
                goto fail;
            last_eval = last_ckpt = t.versions[0];
            ahead = 0; /* computed before the rollback */
            goto train;
        }
        double acc =
            spec->model.type == PF_MODEL_LINEAR ? -1 : (double)ev.correct / (double)ev.examples;
        double test_loss = ev.loss_sum / (double)ev.examples;
        if (o->result)
            *o->result = (worker_result){
                .steps = t.versions[0], .accuracy = acc < 0 ? NAN : acc, .test_loss = test_loss};
        if (o->json) {
            json_t *j = json_pack("{s:s, s:I, s:o, s:o, s:f, s:I}", "name", spec->name, "steps",
                                  (json_int_t)t.versions[0], "test_loss", pf_json_number(test_loss),
                                  "test_accuracy", pf_json_number(acc < 0 ? NAN : acc), "seconds",
                                  seconds, "local_steps", (json_int_t)local_steps);
            if (j && !isnan(ev.auc))
                json_object_set_new(j, "test_auc", pf_json_number(ev.auc));
            char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            if (text)
                printf("%s\n", text);
            free(text);
            json_decref(j);
        } else if (acc >= 0) {
            printf("%s: %" PRIu64 " steps, test accuracy %.4f, %.1f s\n", spec->name, t.versions[0],
                   acc, seconds);
        } else {
            printf("%s: %" PRIu64 " steps, test loss %.6f, %.1f s\n", spec->name, t.versions[0],
                   test_loss, seconds);
        }
        fflush(stdout);
    }
    teardown(&t);
    return PF_OK;
fail:
    fprintf(stderr, "psflow %s %d: %s\n", who, o->task, err.message);
    if (o->result)
        snprintf(o->result->message, sizeof o->result->message, "%s", err.message);
    if (o->is_chief && o->json && st == PF_ERR_NONFINITE) {
        /* The result object as on success, without numbers JSON cannot hold, and why. */
        json_t *j =
            json_pack("{s:s, s:I, s:n, s:n, s:f, s:I, s:s, s:s}", "name", spec->name, "steps",
                      (json_int_t)t.versions[0], "test_loss", "test_accuracy", "seconds",
                      pf_clock_now() - t_start, "local_steps", (json_int_t)local_steps, "reason",
                      "NonFiniteLoss", "message", err.message);
        char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        if (text)
            printf("%s\n", text);
        free(text);
        json_decref(j);
        fflush(stdout);
    }
    teardown(&t);
    return st;
}
