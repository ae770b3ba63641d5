/* shard.h - the state one parameter-server task holds: the values and optimizer slots of
 * its shards, the version (updates applied so far) and the gradient aggregation of
 * docs/design.md section 5. No I/O and no locking: the server serialises calls.
 *
 * Pushes carry a gradient for every shard this ps holds (local shard order).
 *   sync:  a push for step == version is kept in its worker's slot; when
 *          replicas_to_aggregate workers have pushed for the step, their gradients are
 *          averaged in task-index order (so the result does not depend on arrival order),
 *          the optimizer is applied and the version advances. Pushes for an older step
 *          are dropped and counted as stale; a second push for the same step from the same
 *          worker is a duplicate.
 *   async: every push is applied when it arrives.
 * A dynamic table's shard (placement.h) holds a pf_dyn_table: a push's ids are updated through
 * it at the current version (created when admitted, their gradients dropped otherwise), in
 * sync mode once per step with each id's gradients summed in task-index order and divided as
 * a fixed table's rows are; then rows idle past steps_to_live are evicted.
 * At-most-once: each worker task numbers its pushes (seq, increasing) within an
 * incarnation. A push whose seq is not above the last one seen from that incarnation is a
 * duplicate (acknowledged, not applied); a push from an older incarnation than the newest
 * seen for that task is refused.
 */
#ifndef PSFLOW_PS_SHARD_H
#define PSFLOW_PS_SHARD_H

#include <stdbool.h>
#include <stdint.h>

#include "psflow/backend.h"
#include "psflow/dyn_table.h"
#include "psflow/placement.h"
#include "psflow/spec.h"

typedef enum {
    PS_PUSH_APPLIED,   /* applied now (async, or the push that completed a sync step) */
    PS_PUSH_ACCEPTED,  /* kept for the current sync step */
    PS_PUSH_STALE,     /* sync gradient for an older step: dropped */
    PS_PUSH_DUPLICATE, /* seq already seen, or second push for the step: not applied */
    PS_PUSH_REFUSED,   /* from an older incarnation of the task: not applied */
    PS_PUSH_NOMEM      /* sync: no memory to keep its rows for the step: not applied */
} ps_push_result;

/* A push's gradient for one local shard: the whole shard (rows NULL: data holds count
 * floats), or some of its rows (data holds n_rows * width floats, rows[j] relative to the
 * shard's first row, strictly increasing, each < shape[0]), or for a dynamic table's shard
 * the rows of some ids (ids[j] strictly increasing, each one this task owns: pf_dyn_owner).
 * Table shards (ps_shards_is_table) take rows only, dynamic ones ids only, every other shard
 * whole only; the caller checks. */
typedef struct ps_grad {
    const float *data;
    const uint32_t *rows;
    uint32_t n_rows;
    const uint64_t *ids;
} ps_grad;

typedef struct ps_stats {
    uint64_t version;        /* updates applied */
    uint64_t pushes_applied; /* pushes that were applied or aggregated into an update */
    uint64_t pushes_stale;
    uint64_t pushes_duplicate;
    uint64_t pushes_refused;
} ps_stats;

typedef struct ps_shards ps_shards;

/* Creates the store for ps task `ps_task` of the placement, with values initialised
 * exactly as pf_model_init_params(spec->model, training.seed) initialises the whole
 * vector, and slots at their initial values. Errors: PF_ERR_NOMEM, PF_ERR_INVALID
 * (ps_task out of range). */
pf_status ps_shards_create(const pf_job_spec *spec, const pf_placement *placement, int ps_task,
                           const pf_backend *be, ps_shards **out);
void ps_shards_destroy(ps_shards *s);

/* Shards held, and the i-th one's placement entry (borrowed). */
int ps_shards_count(const ps_shards *s);
const pf_shard_info *ps_shards_info(const ps_shards *s, int i);

/* Current values of local shard i (count floats, borrowed; valid until the next push). */
const float *ps_shards_values(const ps_shards *s, int i);

/* 1 when local shard i is (a part of) an embedding table, `<name>/embeddings`: it is pulled
 * and pushed by rows (api/wire.md ROW_PULL, ROW_PUSH_PULL). Its rows are shape[0] rows of
 * shape[1] floats. */
int ps_shards_is_table(const ps_shards *s, int i);

/* 1 when local shard i is a dynamic table's (placement.h; also a table): its rows are
 * those of a pf_dyn_table, pulled and pushed by 64-bit id. */
int ps_shards_is_dynamic(const ps_shards *s, int i);

/* Dynamic shard i's table (borrowed; valid until ps_shards_dyn_replace or destroy): for
 * checkpoints and statistics. */
pf_dyn_table *ps_shards_dyn_table(const ps_shards *s, int i);

/* A pull of dynamic shard i: row j of out (n rows of the shard's width) gets ids[j]'s row,
 * zeros for an id without one; counted as lookups. */
void ps_shards_dyn_gather(ps_shards *s, int i, const uint64_t *ids, size_t n, float *out);

/* Puts t (a table of dynamic shard i's configuration: pf_dyn_table_config) in place of the
 * shard's table, which is destroyed (a restore). Pending sync gradients are discarded. */
void ps_shards_dyn_replace(ps_shards *s, int i, pf_dyn_table *t);

/* Rows of dynamic tables whose update was dropped for want of memory, since creation. */
uint64_t ps_shards_dyn_dropped(const ps_shards *s);

/* Offers a push. grads[i] is the gradient for local shard i, already validated by the
 * caller. `task` is the worker's index (0..replicas.worker-1, the chief counting as worker
 * 0 when there is no separate chief task). A table's rows are updated as TensorFlow's
 * sparse kernels do (pf_optim_apply_rows): only the rows named; in a sync step the rows of
 * every gradient are merged, a row's gradients summed in task-index order and divided by
 * the number of gradients aggregated, as the whole shards are. */
ps_push_result ps_shards_push_grads(ps_shards *s, int task, uint64_t incarnation, uint64_t seq,
                                    uint64_t step, const ps_grad *grads);

/* ps_shards_push_grads with every shard whole: grads[i] holds local shard i's count floats.
 * For a model without tables. */
ps_push_result ps_shards_push(ps_shards *s, int task, uint64_t incarnation, uint64_t seq,
                              uint64_t step, const float *const *grads);

ps_stats ps_shards_stats(const ps_shards *s);

/* The most training tasks a membership may have: every worker and a chief. */
#define PF_MAX_TASKS (PF_MAX_REPLICAS + 1)

/* Training tasks that push now (the membership), at first replicas.worker + chief. */
int ps_shards_tasks(const ps_shards *s);

/* A live membership change: from now on tasks 0 .. n_tasks-1 push and a sync step
 * aggregates `aggregate` gradients. A removed task's gradient waiting in the current step
 * is dropped; an added task joins the aggregation with the first step it pushes for (until
 * then a step needs no more gradients than the members that have pushed can give), so a
 * joining worker never blocks a step and none is counted twice. When the current step
 * needed only gradients of removed tasks it is applied now (*applied = 1). Values, slots and
 * the version are kept. Errors: PF_ERR_INVALID (n_tasks outside 1 .. PF_MAX_TASKS, aggregate
 * outside 1 .. n_tasks), PF_ERR_NOMEM (a gradient buffer for an added task; nothing
 * changed). */
pf_status ps_shards_set_tasks(ps_shards *s, int n_tasks, int aggregate, int *applied);

/* Replaces values, slots and version (restore from a checkpoint). values[i] / slots[i][k]
 * hold local shard i's data. Pending sync gradients are discarded. */
void ps_shards_restore(ps_shards *s, uint64_t version, const float *const *values,
                       const float *const *const *slots);

/* Slot k of local shard i (borrowed), for checkpoints; k < pf_optim_num_slots. */
const float *ps_shards_slot(const ps_shards *s, int i, int k);

/* The local index of the first shard holding a NaN or infinite value (after an update), or
 * -1 when every value is finite; *elem receives the element within that shard. Right after
 * an update, of a table only the rows it changed count (a table is not scanned whole per
 * step): in host memory they were checked as they were updated and nothing is read again,
 * otherwise they are read; after a restore, or an update that moved a table whole (adam),
 * everything is read. */
int ps_shards_find_nonfinite(const ps_shards *s, size_t *elem);

/* Updates with learning rate `lr` (> 0) from now on (a rollback after a non-finite value
 * may lower it: training.nonfinite_lr_scale). */
void ps_shards_set_learning_rate(ps_shards *s, double lr);

#endif
