/* chief.h - the chief's duties in a training job: evaluating the model every
 * training.eval_every_steps (and at the end), asking every ps to checkpoint on the schedule
 * of checkpoint.every_steps / every_secs and writing the manifest, and the watchdog that
 * fails a job whose ps tasks stopped advancing. Runs on the trainer thread; never calls into
 * trainer.c.
 */
#ifndef PSFLOW_WORKER_CHIEF_H
#define PSFLOW_WORKER_CHIEF_H

#include <stdint.h>

#include "psflow/model.h"
#include "psflow/status.h"
#include "worker/trainer_internal.h"

/* Evaluates the host parameters on the test set (or the train set without one); in row
 * mode, pulls each batch's rows as the ps tasks hold them now. */
pf_eval worker_chief_evaluate(trainer *t);

/* Whether worker_chief_duties evaluates at step `global` (training.eval_every_steps). */
int worker_chief_evaluates_at(const trainer *t, uint64_t global);

/* synthetic_ctr data comes from a known model: sets t->bayes_auc to the AUC of its true
 * logits on the evaluation set (the best any model can reach there) and logs it once; NAN
 * for other data. Every evaluation reports it (api/rest.md, bayes_auc). */
void worker_chief_bayes_auc(trainer *t);

/* Logs an evaluation at `step` and reports it (WORKER_REPORT_EVAL). */
void worker_chief_log_eval(trainer *t, uint64_t step, const pf_eval *ev);

/* Asks every ps to checkpoint at `step` (final: the job is done, the ps tasks exit), then
 * writes the manifest and prunes old checkpoints. In sync mode a checkpoint that is not
 * final is only asked here (while one is in flight, not even that): the chief trains on, and
 * worker_chief_duties completes it before a later step, once every ps has answered. Errors:
 * those of worker_link_checkpoint (PF_ERR_NONFINITE, PF_ERR_UNAVAILABLE when a ps restarted
 * meanwhile), PF_ERR_IO. */
pf_status worker_chief_checkpoint(trainer *t, uint64_t step, int final, pf_error *err);

/* Right after the first pull: a checkpoint of the initial values when the job has none. */
pf_status worker_chief_first_checkpoint(trainer *t, pf_error *err);

/* Before each step at `global`: evaluates when due, takes up the answers to a checkpoint in
 * flight, and checkpoints when due (then last_eval and last_ckpt move to `global`). Returns
 * the checkpoint's error, else PF_OK. */
pf_status worker_chief_duties(trainer *t, uint64_t global, pf_error *err);

/* The watchdog: starts counting from the versions this task sees now. */
void worker_watchdog_start(trainer *t);

/* Before each step: notes any ps's progress; on the chief, PF_ERR_UNAVAILABLE when no ps
 * advanced for training.stall_timeout_secs. */
pf_status worker_watchdog_check(trainer *t, pf_error *err);

#endif
