/* leases.h - a training task's leased input (data.splits dynamic): the splits it leases from
 * the work queue ps task 0 keeps, the batches it takes from them, and the splits it reports
 * done.
 *
 * A task keeps WORKER_LEASES_AHEAD splits leased, the one it reads and the next (so the
 * reader thread never waits for a lease), fills each batch from them in lease order, and holds the
 * batch until a push of it was applied by every ps: only then are the splits whose last examples it
 * holds reported done (with the next LEASE), so a split is recorded done only once all of it was
 * trained on. A push that was not applied (a ps restarted, a rollback) leaves the batch
 * held, and the next step trains on it again.
 *
 * At the end of an epoch the queue has nothing to lease until every split is done: a task
 * whose splits ran out inside a batch fills the rest of that batch with its examples again
 * (from its first), trains on it and waits, asking again every LEASES_POLL_SECONDS, until the
 * next epoch begins or the queue says the epochs are done.
 *
 * Single-threaded: the trainer owns one.
 */
#ifndef PSFLOW_WORKER_LEASES_H
#define PSFLOW_WORKER_LEASES_H

#include <stdint.h>

#include "psflow/status.h"
#include "psflow/stream.h"
#include "worker/link.h"

#define WORKER_LEASES_AHEAD     2    /* splits leased, not yet taken through */
#define WORKER_LEASES_MAX_BATCH 4096 /* splits one batch may complete */

typedef struct worker_leases {
    pf_stream_source *input; /* leased (borrowed) */
    worker_link *link;       /* borrowed */
    const char *who;         /* "chief" or "worker", for the log */
    int task;
    double stall_seconds;
    uint32_t n_splits;
    uint64_t epoch; /* the queue's epoch, as last answered */
    int waiting;    /* the last answer was WAIT */
    int ended;      /* the queue said END */
    /* the batch held: filled, and the splits it completes (until a push of it is applied) */
    int held;
    pf_stream_split_done batch_done[WORKER_LEASES_MAX_BATCH];
    int n_batch_done;
    /* splits whose batch was applied, to report with the next LEASE */
    pf_stream_split_done *report;
    int n_report, cap_report;
    /* counts: leases granted, done splits the queue accepted and refused; per epoch the
     * accepted ones (epochs 0 .. n_epoch_counts - 1) */
    uint64_t granted, accepted, refused;
    uint64_t *per_epoch;
    int n_per_epoch;
} worker_leases;

/* stall_seconds: the longest wait for a split at an epoch's end (training.stall_timeout_secs)
 * before the task fails, as a ps request unanswered that long does. */
void worker_leases_init(worker_leases *l, pf_stream_source *input, worker_link *link,
                        const char *who, int task, double stall_seconds);

void worker_leases_free(worker_leases *l);

/* Fills x, y, labels with the batch of `count` examples to train on next: the one held, or
 * a new one from the leased splits (leasing as needed, waiting at an epoch's end). Returns
 * PF_OK, PF_ERR_NOT_FOUND once the queue's epochs are done and nothing is left to train on,
 * PF_ERR_CANCELLED when *stop became nonzero while waiting, or the error of a lease or a read
 * (file, line and column named). */
pf_status worker_leases_fill(worker_leases *l, int count, float *x, float *y, int32_t *labels,
                             const int *stop, pf_error *err);

/* After the held batch's push: applied (by every ps) releases it and queues its completed
 * splits for the next report; not applied keeps it held for the next step. */
void worker_leases_pushed(worker_leases *l, int applied);

/* Logs the splits this task completed, per epoch (at the end of its run). */
void worker_leases_log(const worker_leases *l);

#endif
