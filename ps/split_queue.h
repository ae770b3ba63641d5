/* split_queue.h - the work queue of input splits that ps task 0 keeps for a job with
 * data.splits "dynamic": training tasks lease splits one at a time, train on them and report
 * them done, so a fast worker reads more of the input than a slow one and every split is
 * read exactly once per epoch.
 *
 * The input is cut into n splits (0 .. n-1). Within an epoch the untouched splits are leased
 * in a permutation of 0 .. n-1 drawn from (training.seed, epoch) with pf_rng, the same on
 * every platform and after a restart. A split given back - its task is gone, see
 * ps_split_queue_release - is leased again before the untouched ones, in the order given
 * back. A split counts for its epoch once the task it is leased to reports it done; a report
 * from another task, for another epoch or about a split not leased to the task is refused
 * and changes nothing. When the last split of an epoch is done the epoch ends: every split
 * is pending again in the next epoch's order, and the per-task counts of the ended epoch are
 * kept as "last epoch's". With `epochs` > 0 the queue is finished when that many epochs
 * ended: every lease answers END.
 *
 * Memory: about 11 bytes per split and 12 per task. Leasing is O(1) amortized (an epoch's
 * order is drawn when the epoch begins); releasing a task's splits scans the splits leased
 * so far this epoch.
 *
 * Threads: none of its own and no locking: the ps's service thread makes every call.
 */
#ifndef PSFLOW_PS_SPLIT_QUEUE_H
#define PSFLOW_PS_SPLIT_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/status.h"

/* The most splits a queue holds. */
#define PS_SPLIT_QUEUE_MAX_SPLITS (1u << 24)

typedef struct ps_split_queue ps_split_queue;

typedef enum {
    PS_LEASE_GRANTED = 0, /* a split is leased to the task */
    PS_LEASE_WAIT = 1,    /* nothing to lease now: every split not done is leased */
    PS_LEASE_END = 2      /* the queue is finished */
} ps_lease_state;

typedef struct ps_lease_result {
    ps_lease_state state;
    uint32_t split;    /* GRANTED: the split leased; else 0 */
    uint64_t epoch;    /* the queue's epoch after the call */
    uint32_t accepted; /* done entries recorded */
    uint32_t refused;  /* done entries not leased to this task in the current epoch (or a
                          repeat in the list) */
    int epoch_ended;   /* this call completed an epoch (the counts are in
                          ps_split_queue_last_epoch) */
} ps_lease_result;

/* --- create / destroy ------------------------------------------------------------------- */

/* A new queue (owned by the caller; ps_split_queue_destroy) at epoch 0 with every split
 * pending: n_splits 1 .. PS_SPLIT_QUEUE_MAX_SPLITS, epochs >= 0 (0: endless), seed the
 * job's training.seed, max_tasks 1 .. PF_MAX_TASKS (ps/shard.h) training task indices.
 * Errors: PF_ERR_INVALID (an argument out of range), PF_ERR_NOMEM; *out is NULL then. */
pf_status ps_split_queue_create(uint32_t n_splits, int64_t epochs, uint64_t seed, int max_tasks,
                                ps_split_queue **out, pf_error *err);
/* NULL is fine. */
void ps_split_queue_destroy(ps_split_queue *q);

/* --- use -------------------------------------------------------------------------------- */

/* Records `task`'s done splits done[0 .. n_done) of `epoch`: each is accepted when epoch is
 * the queue's current one and the split is leased to task, and refused otherwise (another
 * task's, not leased, out of range, a repeat in the list, a stale epoch; a refused entry
 * changes nothing). The entry that completes an epoch ends it (epoch_ended; the entries after
 * it are of a past epoch then, so refused). Then, with want, leases the next split: GRANTED,
 * WAIT when every split not done is leased, END once the queue is finished. Without want
 * nothing is leased: WAIT, or END once finished. task must be in [0, max_tasks): the caller
 * checks; an out-of-range one gets WAIT with every entry refused. */
ps_lease_result ps_split_queue_lease(ps_split_queue *q, int task, uint64_t epoch,
                                     const uint32_t *done, uint32_t n_done, int want);

/* Task `task` is gone (its connection closed, a new incarnation said HELLO): its leased
 * splits become pending again, to be leased before the untouched ones (these in the order of
 * the epoch's permutation). The splits it did stay done. Returns how many were leased to it
 * (0 for an out-of-range task or a finished queue). */
uint32_t ps_split_queue_release(ps_split_queue *q, int task);

/* --- query ------------------------------------------------------------------------------ */

uint32_t ps_split_queue_splits(const ps_split_queue *q);

typedef struct ps_split_queue_stats {
    uint64_t epoch;
    int finished;
    uint32_t pending, leased, done; /* in the current epoch; all 0 once finished */
    uint64_t granted, completed, refused,
        released; /* since creation: leases, done entries accepted and refused, splits released
                     (a decode keeps these) */
} ps_split_queue_stats;

ps_split_queue_stats ps_split_queue_stats_get(const ps_split_queue *q);

/* The splits `task` did in the current epoch so far, and in the last epoch that ended (0
 * before any, and for an out-of-range task). */
uint32_t ps_split_queue_task_done(const ps_split_queue *q, int task);
uint32_t ps_split_queue_last_epoch(const ps_split_queue *q, int task);

/* --- checkpoint ------------------------------------------------------------------------- */

/* The queue's state as bytes for a checkpoint, little-endian: the magic "PFSQ", a version,
 * the epoch, finished, n_splits, epochs, max_tasks, the splits done in the current epoch (a
 * bitmap; a leased split is saved as pending, as whoever held it is gone after a restore) and
 * each task's counts of this and the last epoch. Returns the bytes needed; writes buf only
 * when cap is at least that. */
size_t ps_split_queue_encode(const ps_split_queue *q, uint8_t *buf, size_t cap);

/* Replaces q's state with the one encoded in buf[0 .. len): the epoch, finished, the done
 * splits and the per-task counts; every lease is dropped and the epoch's order is drawn
 * again, so the splits not done are leased in the order they would have been. The counts of
 * tasks at or above q's max_tasks (saved by a queue with more tasks) are checked, then
 * dropped. Errors: PF_ERR_FORMAT with a message (a wrong length, magic or version, another
 * n_splits or epochs than q's, counts that do not add up); q is unchanged then. */
pf_status ps_split_queue_decode(ps_split_queue *q, const uint8_t *buf, size_t len, pf_error *err);

/* A new queue (as ps_split_queue_create with epochs, seed and max_tasks) of the number of
 * splits buf[0 .. len) saved, holding the state decoded from it. Errors: those of create and
 * of decode; *out is NULL then. */
pf_status ps_split_queue_from_bytes(const uint8_t *buf, size_t len, int64_t epochs, uint64_t seed,
                                    int max_tasks, ps_split_queue **out, pf_error *err);

#endif
