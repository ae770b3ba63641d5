/* dyn_batch.h - a model's dynamic tables (dyn_table.h) as its model computes on them: each
 * batch's rows handed over as a small fixed table.
 *
 * A model computes on fixed tables only (model.h). For a model with dynamic tables the
 * trainer runs its "compact" model: the job's model with each dynamic table made a fixed
 * table of cap rows (cap = batch x max_ids, the most one batch can name). Each batch's 64-bit
 * ids of a dynamic table are collected, sorted and deduplicated, and its id slots rewritten
 * to the positions of their rows in that list (pf_dyn_batch_plan): the trainer then gathers
 * those rows from its table into the compact table (pf_dyn_gather: an id without a row reads
 * zeros), computes, and applies the gradient of the compact rows to the table's rows
 * (pf_dyn_update_batch: an id not admitted has its gradient dropped). Fixed tables, the
 * numeric inputs and the dense variables are as in the job's model, so in the compact vector
 * every variable but a dynamic table has the values it has in the job's (pf_dyn_batch_map).
 * Memory: the lists and the rewritten batch, of the size of one batch.
 */
#ifndef PSFLOW_DYN_BATCH_H
#define PSFLOW_DYN_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/backend.h"
#include "psflow/dyn_table.h"
#include "psflow/model.h"
#include "psflow/optim.h"
#include "psflow/spec.h"

/* The configuration of dynamic table f of the job spec, holding at most max_rows rows (the
 * table's max_rows, or a ps task's share of it): its rows as wide as pf_model_row_width, the
 * optimizer's slots (adagrad's starting at its initial accumulator value), the spec's
 * admission and eviction, and new rows drawn as a fixed table's are (uniform within
 * sqrt(3 / width), a wide part at 0) from training.seed and f. */
void pf_dyn_table_config(const pf_job_spec *spec, int f, int64_t max_rows, pf_dyn_config *out);

/* The most ids of dynamic table f one message may name: a batch's (a training step's of
 * every replica, or an evaluation's of PF_EVAL_BATCH examples), max_ids each. What a ps
 * accepts, a worker's replies carry and the memory bounds count. */
int64_t pf_dyn_message_ids(const pf_job_spec *spec, int f);

/* After an update at `step` with o (pf_optim_prepare at that step): a dense optimizer (adam,
 * !pf_optim_rows_only) moves every row of t the update did not name with a zero gradient, as
 * a fixed table's rows a batch does not name move under it; nothing for the others. O(rows);
 * PF_ERR_NOMEM (nothing moved). */
pf_status pf_dyn_dense_step(pf_dyn_table *t, const pf_optimizer_spec *spec, const pf_optim_step *o,
                            const pf_backend *be, int64_t step);

typedef struct pf_dyn_id_pos {
    uint64_t id;
    uint32_t pos;   /* example * max_ids + k */
    uint32_t owner; /* pf_dyn_owner(id, n_ps) */
} pf_dyn_id_pos;

typedef struct pf_dyn_batch {
    pf_model_spec job;     /* the job's model: the examples it reads */
    pf_model_spec compact; /* the model its trainer computes: dynamic tables of cap[f] rows */
    int batch;             /* examples a plan takes at most */
    int in_width, out_width;
    uint32_t cap[PF_MAX_EMBEDDINGS];
    /* the ps tasks whose shares the ids are ordered by (1 after init: one process) */
    int n_ps;
    /* dynamic table f: this batch's distinct ids, n[f] of them, ordered by the ps task that
     * owns each (pf_dyn_owner over n_ps) and ascending within each task's run */
    uint64_t *ids[PF_MAX_EMBEDDINGS];
    uint32_t n[PF_MAX_EMBEDDINGS];
    uint32_t invalid[PF_MAX_EMBEDDINGS]; /* this batch's id slots that held no id */
    pf_dyn_id_pos *scratch;
} pf_dyn_batch;

/* The compact model of `job` for batches of up to `batch` examples into *out: each dynamic
 * table a fixed one of batch x max_ids rows. Errors: PF_ERR_INVALID (no dynamic table,
 * batch < 1, a cap past PF_MAX_VOCAB). */
pf_status pf_dyn_compact_model(const pf_model_spec *job, int batch, pf_model_spec *out);

/* The compact model of `job` for batches of up to `batch` examples. Errors: PF_ERR_INVALID
 * (no dynamic table, batch < 1, a cap past PF_MAX_VOCAB), PF_ERR_NOMEM. */
pf_status pf_dyn_batch_init(pf_dyn_batch *b, const pf_model_spec *job, int batch);
void pf_dyn_batch_deinit(pf_dyn_batch *b);

/* Plans `count` (<= b->batch) examples x of the job's model (in_width floats each) into out
 * (count x out_width floats, the compact model's examples): a dynamic table's id becomes the
 * position of its row in b->ids[f]; padding stays -1; slots that hold no id become NaN
 * (the example's output is NaN, as a fixed table's bad id makes it); everything else is
 * copied. */
void pf_dyn_batch_plan(pf_dyn_batch *b, const float *x, int count, float *out);

/* For each variable of the job's model, where it lies in the compact vector: copies the
 * job's vector `full` (pf_model_num_params(job) floats) into `compact`, the dynamic tables'
 * part of it left as it is. */
void pf_dyn_batch_map(const pf_dyn_batch *b, const float *full, float *compact);

#endif
