/* chief.c - the chief's evaluations, checkpoints and watchdog (see chief.h).
 *
 * DESIGN: the chief is a training task like the others, plus a schedule checked before each
 * of its steps: an evaluation when the global step crossed a multiple of eval_every_steps, a
 * checkpoint when it crossed one of checkpoint.every_steps or every_secs passed (never at
 * max_steps: the final checkpoint writes that step, once). A checkpoint is one request to
 * every ps, then the manifest that makes it complete; in sync mode the chief trains on
 * while the ps tasks reach the step asked for (ask_ahead, settle). What happens when one fails (a
 * ps restarted or went non-finite) the trainer decides with recovery.h.
 */
#include "worker/chief.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "psflow/checkpoint.h"
#include "psflow/data.h"
#include "psflow/fs.h"
#include "psflow/mem.h"

/* --- evaluation --- */

/* Uploads count examples of x, as wide as the evaluated model's input. */
static void upload_batch(trainer *t, int count, const float *x, const pf_model_spec *m) {
    t->be->upload(t->d_x, x, (size_t)count * (size_t)pf_model_input_width(m));
    if (t->spec->model.type == PF_MODEL_LINEAR)
        t->be->upload(t->d_y, t->hy, (size_t)count);
    else
        t->be->upload_i32(t->d_labels, t->hlabels, (size_t)count);
}

pf_eval worker_chief_evaluate(trainer *t) {
    pf_eval ev = {0};
    const pf_dataset *ds = t->has_test ? &t->test : &t->train;
    t->evaluations++; /* the batches it copies into hx replace the next step's */
    bool binary = pf_model_two_class(&t->spec->model);
    if (binary && !t->scores)
        t->scores = pf_mallocarray((size_t)ds->n, sizeof *t->scores);
    ev.scores = binary ? t->scores : NULL; /* no memory: no AUC */
    const float *params = t->params;       /* a host backend evaluates the host vector */
    if (t->d_params) {
        t->be->upload(t->d_params, t->params, t->n_params);
        params = t->d_params;
    }
    for (int64_t start = 0; start < ds->n; start += WORKER_EVAL_BATCH) {
        int count = (int)(ds->n - start < WORKER_EVAL_BATCH ? ds->n - start : WORKER_EVAL_BATCH);
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
        if (t->row_mode)
            upload_batch(t, count, worker_row_plan_input(&t->eval_plan, t->hx),
                         &t->eval_rows.compact);
        else
            upload_batch(t, count, t->hx, &t->spec->model);
        pf_model_eval_batch(t->model, params, t->d_x, t->d_y, t->d_labels, count, &ev);
    }
    bool whole = ev.scores && ev.examples == ds->n;
    ev.auc = whole ? pf_auc(ev.scores, ds->y, ds->n) : NAN;
    ev.calibration = whole ? pf_calibration(ev.scores, ds->y, ds->n) : NAN;
    ev.scores = NULL;
    return ev;
}

void worker_chief_bayes_auc(trainer *t) {
    const pf_dataset *ds = t->has_test ? &t->test : &t->train;
    t->bayes_auc = t->spec->data.format == PF_DATA_SYNTHETIC_CTR && ds->n > 0
                       ? pf_synthetic_ctr_bayes_auc(t->spec, ds)
                       : NAN;
    if (!isnan(t->bayes_auc))
        fprintf(stderr,
                "psflow chief: synthetic_ctr: Bayes-optimal %s auc %.4f (the true model on the "
                "%s labels)\n",
                t->has_test ? "test" : "train", t->bayes_auc, t->has_test ? "test" : "train");
}

typedef struct auc_text_buf {
    char text[64];
} auc_text_buf;

/* " test auc 0.8123 calibration 1.012", " test auc 0.8123", or "" without an AUC. */
static auc_text_buf auc_text(const char *set, double auc, double calibration) {
    auc_text_buf b = {""};
    if (!isnan(auc) && !isnan(calibration))
        snprintf(b.text, sizeof b.text, " %s auc %.4f calibration %.4g", set, auc, calibration);
    else if (!isnan(auc))
        snprintf(b.text, sizeof b.text, " %s auc %.4f", set, auc);
    return b;
}

void worker_chief_log_eval(trainer *t, uint64_t step, const pf_eval *ev) {
    worker_report r = {.kind = WORKER_REPORT_EVAL,
                       .step = step,
                       .accuracy = t->spec->model.type == PF_MODEL_LINEAR
                                       ? NAN
                                       : (double)ev->correct / (double)ev->examples,
                       .test_loss = ev->loss_sum / (double)ev->examples,
                       .auc = ev->auc,
                       .calibration = ev->calibration,
                       .bayes_auc = t->bayes_auc};
    worker_send_report(t, &r);
    const char *set = t->has_test ? "test" : "train";
    if (t->spec->model.type == PF_MODEL_LINEAR)
        fprintf(stderr, "psflow chief: eval step %" PRIu64 " %s loss %.6f\n", step, set,
                ev->loss_sum / (double)ev->examples);
    else
        fprintf(stderr, "psflow chief: eval step %" PRIu64 " %s loss %.4f %s accuracy %.4f%s\n",
                step, set, ev->loss_sum / (double)ev->examples, set,
                (double)ev->correct / (double)ev->examples,
                auc_text(set, ev->auc, ev->calibration).text);
}

/* --- checkpoints --- */

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

/* A periodic checkpoint never asks for max_steps or beyond: a ps there applies nothing more,
 * so such a request could only wait, and the final checkpoint writes that step. Says so and
 * returns 1 when `step` is that far. */
static int past_periodic(trainer *t, uint64_t step) {
    const uint64_t max_steps = (uint64_t)t->spec->training.max_steps;
    if (step < max_steps)
        return 0;
    fprintf(stderr,
            "psflow chief: periodic checkpoint skipped: the ps tasks are at step %" PRIu64
            " of %" PRIu64 " and the final checkpoint follows\n",
            worker_max_version(t), max_steps);
    return 1;
}

/* Asks every ps to checkpoint at `step` and waits for them (async mode, where a ps writes at
 * once, and the final checkpoint). A sync ps already past `step` refuses; the chief then
 * asks again at a later version, a few times, unless final. *step receives the step
 * written; *skipped 1 when the checkpoint was skipped (PF_OK). */
static pf_status ask_every_ps(trainer *t, uint64_t *step, int final, int *skipped, pf_error *err) {
    *skipped = 0;
    for (int attempt = 0;; attempt++) {
        int retired = retire_complete(t, *step, 0);
        pf_status st = worker_link_checkpoint(t->link, *step, final, err);
        if (retired)
            retire_complete(t, *step, st == PF_OK ? 2 : 1);
        if (st != PF_ERR_RANGE || final || attempt >= 8)
            return st;
        fprintf(stderr, "psflow chief: checkpoint at step %" PRIu64 ": %s; asking at a later one\n",
                *step, err->message);
        if ((st = worker_link_pull(t->link, NULL, t->params, t->versions, err)) != PF_OK)
            return st;
        *step = worker_max_version(t) + 1 + (uint64_t)attempt;
        if (past_periodic(t, *step)) {
            pf_error_clear(err);
            *skipped = 1;
            return PF_OK;
        }
    }
}

/* Makes checkpoint `step`, which every ps has written, exist (manifest), prunes old ones
 * and reports it. */
static pf_status complete(trainer *t, uint64_t step, int final, pf_error *err) {
    char job_dir[2048], step_dir[2048];
    const char *root = t->o->checkpoint_dir;
    if (pf_checkpoint_job_dir(root, t->spec->name, job_dir, sizeof job_dir) != PF_OK ||
        pf_checkpoint_step_dir(root, t->spec->name, (int64_t)step, step_dir, sizeof step_dir) !=
            PF_OK)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    pf_status st =
        pf_checkpoint_write_manifest(step_dir, t->spec->name, (int64_t)step, t->n_ps, NULL, err);
    if (st != PF_OK)
        return st;
    int removed = 0;
    pf_checkpoint_prune(job_dir, t->spec->checkpoint.keep, &removed, NULL);
    fprintf(stderr, "psflow chief: checkpoint %s complete%s\n", step_dir, final ? " (final)" : "");
    worker_report r = {.kind = WORKER_REPORT_CHECKPOINT, .step = step, .step_dir = step_dir};
    worker_send_report(t, &r);
    t->last_checkpoint_time = pf_clock_now();
    return PF_OK;
}

/* A sync checkpoint that is not the final one is asked without waiting (ask_ahead) and taken up
 * before each later step (settle): a ps behind `step` writes when it reaches that version,
 * and with backup workers the step that takes it there may need the chief's own gradient,
 * so the chief trains on meanwhile rather than wait for it. A ps already past the step
 * refuses, and the chief asks again a little ahead of the versions it last saw, at most 8
 * times for one checkpoint. */
static pf_status ask_ahead(trainer *t, uint64_t step, pf_error *err) {
    t->ck_retired = retire_complete(t, step, 0);
    pf_status st = worker_link_checkpoint_send(t->link, step, err);
    if (st != PF_OK) {
        if (t->ck_retired)
            retire_complete(t, step, 1);
        return st;
    }
    t->ck_inflight = 1;
    t->ck_step = step;
    t->ck_sent_max = worker_max_version(t);
    t->ck_sent_time = pf_clock_now();
    return PF_OK;
}

/* Takes up the checkpoint in flight once every ps answered, waiting up to wait_seconds for
 * that: completes it, asks again at a later step, or gives it up (a connection ended, a
 * rollback replaced it, or not every ps answered within training.stall_timeout_secs: the
 * schedule asks for the next). Errors: a ps's answer that training
 * cannot go on from (PF_ERR_NONFINITE, PF_ERR_IO, ...); sending again (PF_ERR_NOMEM). */
static pf_status settle(trainer *t, double wait_seconds, pf_error *err) {
    if (!t->ck_inflight)
        return PF_OK;
    pf_status st = PF_OK;
    pf_error answer;
    pf_error_clear(&answer);
    int r = worker_link_checkpoint_poll(t->link, wait_seconds, &st, &answer);
    const double limit = (double)t->spec->training.stall_timeout_secs;
    if (r == 0 && pf_clock_now() - t->ck_sent_time < limit)
        return PF_OK;
    if (r == 0) { /* unanswered that long: given up, so the schedule asks again */
        worker_link_checkpoint_give_up(t->link);
        snprintf(answer.message, sizeof answer.message,
                 "no answer from every ps for %.0f s (training.stall_timeout_secs)", limit);
        st = PF_ERR_UNAVAILABLE;
        r = 1;
    }
    const uint64_t step = t->ck_step;
    t->ck_inflight = 0;
    if (t->ck_retired)
        retire_complete(t, step, r == 1 && st == PF_OK ? 2 : 1);
    if (r == 1 && st == PF_OK) {
        t->ck_attempt = 0;
        return complete(t, step, 0, err);
    }
    if (r < 0 || st == PF_ERR_UNAVAILABLE) {
        fprintf(stderr,
                "psflow chief: checkpoint at step %" PRIu64 " given up: %s; the next one is "
                "asked on schedule\n",
                step, r < 0 ? "a rollback or another checkpoint replaced it" : answer.message);
        t->ck_attempt = 0;
        return PF_OK;
    }
    if (st != PF_ERR_RANGE) {
        *err = answer;
        return st;
    }
    if (++t->ck_attempt > 8) {
        fprintf(stderr,
                "psflow chief: checkpoint at step %" PRIu64 ": %s; skipped after 8 later steps "
                "were passed too\n",
                step, answer.message);
        t->ck_attempt = 0;
        t->last_checkpoint_time = pf_clock_now();
        return PF_OK;
    }
    /* Ahead of the furthest ps by as much as the ps tasks moved while the refused request
     * was out (a chief that is mostly the backup sees them move many steps between two of
     * its own), so the request is there before that ps gets past it; a ps that must wait
     * for it holds nobody up. */
    const uint64_t now_max = worker_max_version(t);
    const uint64_t moved = now_max > t->ck_sent_max ? now_max - t->ck_sent_max : 0;
    uint64_t later = now_max + 1 + moved + (uint64_t)t->ck_attempt;
    fprintf(stderr,
            "psflow chief: checkpoint at step %" PRIu64 ": %s; asking at step %" PRIu64 "\n", step,
            answer.message, later);
    if (past_periodic(t, later)) {
        t->ck_attempt = 0;
        t->last_checkpoint_time = pf_clock_now();
        return PF_OK;
    }
    return ask_ahead(t, later, err);
}

/* Asks every ps to checkpoint at `step`, then makes the checkpoint exist (manifest) and
 * prunes old ones: at once in async mode and for the final one; a sync one that is not
 * final is asked without waiting (ask_ahead). Skipping one returns PF_OK. */
pf_status worker_chief_checkpoint(trainer *t, uint64_t step, int final, pf_error *err) {
    /* One at a time: the final one waits for the one in flight (every ps is at its step or
     * past it by now, so each answers at once). */
    pf_status st = settle(t, final ? (double)t->spec->training.stall_timeout_secs : 0, err);
    if (st != PF_OK)
        return st;
    if (t->ck_inflight && !final)
        return PF_OK;     /* the one in flight stands for this one */
    if (t->ck_inflight) { /* asked again, or unanswered: the final one replaces it */
        t->ck_inflight = 0;
        if (t->ck_retired)
            retire_complete(t, t->ck_step, 1);
    }
    if (!final && t->spec->training.mode == PF_MODE_SYNC)
        return ask_ahead(t, step, err);
    int skipped;
    st = ask_every_ps(t, &step, final, &skipped, err);
    if (st != PF_OK || skipped) {
        if (skipped)
            t->last_checkpoint_time = pf_clock_now();
        return st;
    }
    return complete(t, step, final, err);
}

/* A first checkpoint right after the variables are initialised (step 0, or where async
 * workers that started first have already taken ps 0): a restore target exists from the
 * start, so a ps restarted before the first periodic checkpoint restores these values
 * rather than serving freshly initialised ones mid-job, and a non-finite rollback has
 * somewhere to go. */
pf_status worker_chief_first_checkpoint(trainer *t, pf_error *err) {
    if (!t->o->is_chief || t->versions[0] >= (uint64_t)t->spec->training.max_steps)
        return PF_OK;
    int64_t newest;
    pf_status st = PF_OK, found = t->io->newest_checkpoint(t, &newest, err);
    if (found == PF_ERR_NOT_FOUND)
        st = worker_chief_checkpoint(t, t->versions[0], 0, err);
    else if (found != PF_OK)
        fprintf(stderr, "psflow chief: %s; no first checkpoint taken\n", err->message);
    if (st != PF_OK)
        return st;
    pf_error_clear(err);
    return PF_OK;
}

int worker_chief_evaluates_at(const trainer *t, uint64_t global) {
    int64_t ee = t->spec->training.eval_every_steps;
    return ee > 0 && global / (uint64_t)ee > t->last_eval / (uint64_t)ee;
}

pf_status worker_chief_duties(trainer *t, uint64_t global, pf_error *err) {
    const pf_job_spec *spec = t->spec;
    const uint64_t max_steps = (uint64_t)spec->training.max_steps;
    int64_t ce = spec->checkpoint.every_steps;
    double at = pf_profile_now(t->prof);
    if (worker_chief_evaluates_at(t, global)) {
        pf_profile_open(t->prof, PF_PHASE_EVALUATE, at);
        pf_eval ev = worker_chief_evaluate(t);
        worker_chief_log_eval(t, global, &ev);
        at = pf_profile_add(t->prof, PF_PHASE_EVALUATE, at);
    }
    pf_profile_open(t->prof, PF_PHASE_CHECKPOINT, at);
    pf_status st = settle(t, 0, err);
    pf_profile_add(t->prof, PF_PHASE_CHECKPOINT, at);
    if (st != PF_OK)
        return st;
    /* Never at max_steps (ps 0 may be there while another ps is a step short): the final
     * checkpoint writes that step, once. */
    int by_steps =
        ce > 0 && global < max_steps && global / (uint64_t)ce > t->last_ckpt / (uint64_t)ce;
    int by_time = spec->checkpoint.every_secs > 0 && global < max_steps &&
                  pf_clock_now() - t->last_checkpoint_time > (double)spec->checkpoint.every_secs;
    /* asked by the coordinator (a preemption's final checkpoint): once no checkpoint is in
     * flight, so that this one is at `global`, not at an older step */
    int64_t asked =
        t->o->checkpoint_now ? __atomic_load_n(t->o->checkpoint_now, __ATOMIC_RELAXED) : 0;
    if (asked == 0)
        t->ck_requested = 0; /* none now: the next request is new, even of the same step */
    int by_request = asked > 0 && asked != t->ck_requested && !t->ck_inflight && global < max_steps;
    if (by_request) {
        t->ck_requested = asked;
        fprintf(stderr, "psflow chief: a checkpoint at step %" PRIu64 " asked by the coordinator\n",
                global);
    }
    if (by_steps || by_time || by_request) {
        at = pf_profile_now(t->prof);
        pf_profile_open(t->prof, PF_PHASE_CHECKPOINT, at);
        st = worker_chief_checkpoint(t, global, 0, err);
        pf_profile_add(t->prof, PF_PHASE_CHECKPOINT, at);
        if (st != PF_OK)
            return st;
    }
    t->last_eval = t->last_ckpt = global;
    return PF_OK;
}

/* --- the watchdog --- */

/* The chief's watchdog: every wait is bounded on its own, and this bounds their sum: no
 * version progress for training.stall_timeout_secs fails the job with a line that says so
 * (exit 69; a restart policy acts on it), whatever kept it turning. */
void worker_watchdog_start(trainer *t) {
    t->progress_time = pf_clock_now();
    t->progress_version = t->versions[0] + worker_lowest_version(t);
}

pf_status worker_watchdog_check(trainer *t, pf_error *err) {
    const pf_training_spec *tr = &t->spec->training;
    uint64_t global = t->versions[0];
    if (global + worker_lowest_version(t) != t->progress_version) { /* any ps advanced */
        t->progress_version = global + worker_lowest_version(t);
        t->progress_time = pf_clock_now();
    } else if (t->o->is_chief &&
               pf_clock_now() - t->progress_time > (double)tr->stall_timeout_secs) {
        return pf_error_set(err, PF_ERR_UNAVAILABLE, NULL,
                            "no progress past step %" PRIu64
                            " for %.0f s (training.stall_timeout_secs): every ps answered but "
                            "none advanced; a sync step waits for the gradients of %d tasks",
                            global, pf_clock_now() - t->progress_time,
                            tr->mode == PF_MODE_SYNC ? tr->replicas_to_aggregate : 1);
    }
    return PF_OK;
}
