/* recovery.h - how a training task gets back on its feet: the chief's consistent rollback
 * after a ps restarted, the realignment of ps tasks a rollback left apart, a sync task's
 * resync after a ps went back, training.on_nonfinite "rollback" with its data-skips file,
 * and live membership changes.
 *
 * The decisions (what to do given what the ps tasks answered) are pure functions, tested in
 * tests/worker/test_recovery.c; the actions talk to the ps tasks through t->io (the link in
 * a running task, worker_recovery_link). Every function runs on the trainer thread.
 */
#ifndef PSFLOW_WORKER_RECOVERY_H
#define PSFLOW_WORKER_RECOVERY_H

#include <stdint.h>

#include "psflow/status.h"
#include "worker/trainer_internal.h"

/* --- decisions (pure) --- */

/* What a failed (or successful) request to the ps tasks leads to. */
typedef enum {
    WORKER_RECOVERY_NONE,      /* it succeeded: go on */
    WORKER_RECOVERY_NONFINITE, /* a ps went non-finite: worker_recover_nonfinite */
    WORKER_RECOVERY_ROLL_BACK, /* a ps restarted during a checkpoint: worker_roll_back */
    WORKER_RECOVERY_FAIL,      /* the task fails with the request's status */
} worker_recovery_action;

/* st: the request's answer; rollback: training.on_nonfinite is "rollback"; periodic_checkpoint:
 * the request was a periodic checkpoint (a ps that restarted meanwhile gives it up with
 * PF_ERR_UNAVAILABLE, and the chief rolls every ps back instead of failing). */
worker_recovery_action worker_recovery_after(pf_status st, int rollback, int periodic_checkpoint);

/* What a task does when a ps answers NONFINITE (worker_recover_nonfinite). */
typedef enum {
    WORKER_NONFINITE_GIVE_UP, /* nonfinite_max_rollbacks reached: fail */
    WORKER_NONFINITE_RESTORE, /* chief: count the rollback, skip the batch, restore every ps */
    WORKER_NONFINITE_WAIT,    /* worker: count it, skip the batch, wait for the chief */
    WORKER_NONFINITE_FINISH,  /* chief that started mid-rollback: restore, counted already */
    WORKER_NONFINITE_AWAIT,   /* worker that started mid-rollback: wait, counted already */
} worker_nonfinite_action;

/* pending: data-skips.json said a rollback was under way when this task started. */
worker_nonfinite_action worker_recovery_nonfinite_action(int pending, int is_chief, int n_rollbacks,
                                                         int max_rollbacks);

/* The learning-rate factor every ps updates with: scale per non-finite rollback so far (1
 * without one), never below FLT_MIN (RESTORE needs a factor in (0, 1]). */
float worker_recovery_lr_factor(double scale, int n_rollbacks);

/* Sync: 1 when a ps answered below the version this step waited for (min_version[p]) and
 * short of max_steps: it went back (a rollback, or a restart), and the task resyncs. */
int worker_recovery_went_back(int sync, int n_ps, const uint64_t *versions,
                              const uint64_t *min_version, uint64_t max_steps);

/* A sync chief that starts with the ps tasks more than a step apart: a rollback its
 * predecessor left half done, to realign (worker_realign). */
int worker_recovery_needs_realign(int is_chief, int sync, int n_ps, const uint64_t *versions);

/* Resync is over when the ps versions are at most `spread` apart. */
int worker_recovery_settled(int n_ps, const uint64_t *versions, uint64_t spread);

/* The number of training tasks from now on: `workers` (the agent's live count, NULL: none)
 * plus the chief, when in range; else `current`. */
int worker_recovery_tasks(int current, const int *workers, int chief);

/* --- actions --- */

/* t->io for a running task: the link's calls and the checkpoint folder. */
extern const worker_ps_io worker_recovery_link;

/* The chief's consistent rollback when a ps restarted (every ps restores the newest complete
 * checkpoint). PF_OK with *rolled 0 when none restarted, or on a worker. */
pf_status worker_roll_back(trainer *t, int *rolled, pf_error *err);

/* worker_recovery_needs_realign: every ps back to the newest complete checkpoint (without
 * one: says so, PF_OK). */
pf_status worker_realign(trainer *t, pf_error *err);

/* A sync task after a ps went back: pulls until every ps serves one version (with backup
 * workers, versions one apart), for at most training.stall_timeout_secs. */
pf_status worker_resync(trainer *t, pf_error *err);

/* A ps answered NONFINITE (err holds its message) while this task was at step `failed`,
 * having pushed that step's gradient (fed) or not. See recovery.c. */
pf_status worker_recover_nonfinite(trainer *t, uint64_t failed, int fed, pf_error *err);

/* Reads the job's data-skips.json, when there is one (setup): the rollbacks counted so far
 * and, in sync mode, the data steps skipped. */
void worker_read_skips(trainer *t);

/* Before each step at `global`: follows a live membership change (o->workers) or a rollback
 * to before one (data_plan.h). */
void worker_take_membership(trainer *t, uint64_t global);

#endif
