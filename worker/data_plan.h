/* data_plan.h - which examples a training task reads at each global step.
 *
 * The data is an endless stream shuffled per epoch from the seed (data.h). At global step g
 * a task reads the batch of its *data step*: g moved past every data step skipped after a
 * non-finite rollback (the same skips on every task, so in sync mode every task skips the
 * failing step's batches). The stream is partitioned among the job's training tasks in
 * *segments*: from data step `from` on, `n` tasks read consecutive slices starting at
 * stream position `base`, task i of data step d reading base + ((d - from) * n + i) * batch.
 * A live membership change starts a segment where the old one left off; a rollback to
 * before a change goes back to the segment that held that step (so replayed steps read what
 * they read the first time) and carries on from there with the tasks there are now.
 *
 * Pure and single-threaded: the trainer owns one; nothing here does I/O.
 */
#ifndef PSFLOW_WORKER_DATA_PLAN_H
#define PSFLOW_WORKER_DATA_PLAN_H

#include <stdint.h>

#define WORKER_PLAN_MAX_SEGMENTS 64 /* membership changes remembered for rollbacks past them */

typedef struct worker_plan_segment {
    uint64_t from; /* first data step */
    int64_t base;  /* stream position where data step `from` begins */
    int n;         /* training tasks */
} worker_plan_segment;

typedef struct worker_plan {
    int batch; /* examples per task per step */
    worker_plan_segment segs[WORKER_PLAN_MAX_SEGMENTS];
    int n_segs;        /* >= 1; the last is the current one */
    uint64_t *skipped; /* ascending data steps never fed again; the caller's storage */
    int n_skipped, max_skipped;
} worker_plan;

/* --- lifecycle --- */

/* n tasks from step 0; `skipped` is storage for max_skipped skipped steps (borrowed). */
void worker_plan_init(worker_plan *p, int n, int batch, uint64_t *skipped, int max_skipped);

/* --- use --- */

/* The data step global step `global` feeds. */
uint64_t worker_plan_data_step(const worker_plan *p, uint64_t global);

/* Marks data step d as never fed again (kept ascending; a step already there is kept once).
 * Returns 0, or -1 when max_skipped steps are held already. */
int worker_plan_skip(worker_plan *p, uint64_t d);

/* Called before each step at `global` with the number of tasks the job has now (n): after a
 * rollback to before the current segment, returns to the segment holding the step; when n
 * differs from the current segment's, starts a segment of n tasks at this step. Returns 1
 * when the partition changed (the caller logs it), else 0. */
int worker_plan_update(worker_plan *p, uint64_t global, int n);

/* --- query --- */

/* The first stream position of task `task`'s batch at global step `global`, under the
 * current segment (worker_plan_update has been called for this step). */
int64_t worker_plan_position(const worker_plan *p, uint64_t global, int task);

/* The stream position where data step d begins under the current segment. */
int64_t worker_plan_step_start(const worker_plan *p, uint64_t d);

/* The current segment's number of tasks. */
int worker_plan_tasks(const worker_plan *p);

#endif
