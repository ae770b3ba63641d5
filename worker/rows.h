/* rows.h - the rows of embedding tables a worker holds: those of one batch.
 *
 * A model with embedding tables trains on the rows its batch names, never on the whole
 * tables (which may be larger than the worker): a batch's ids are gathered per table,
 * sorted and deduplicated, and the batch's id slots are rewritten to the positions of
 * their rows in that list. The worker's model is the job's model with every table cut to
 * the rows one batch can name (cap = batch x max_ids, at most the vocab): its "compact"
 * parameter vector holds the batch's rows of each table, then every dense variable as in
 * the job's layout, so a dense variable sits `dense_shift` elements before its place in the
 * full vector. Each table shard holds one run of a table's sorted ids, so its rows are one
 * contiguous block of the compact table both in a pull's reply and in the row gradient a
 * push sends (worker/link.h). Memory: the compact vector and these lists, both of the size
 * of one batch, whatever the vocab.
 *
 * A dynamic table (dyn_batch.h) is first made a fixed table of cap rows, the batch's ids in
 * the order of the ps tasks that own them (pf_dyn_owner) and ascending within each: its shard
 * on ps task k (placement.h) holds the run of task k's ids, pulled and pushed by those 64-bit
 * ids. Its id slots are narrower than the job's (one float per id, not PF_DYN_ID_SLOTS), so a
 * plan writes the batch it rewrote into a buffer of its own (worker_row_plan_input).
 */
#ifndef PSFLOW_WORKER_ROWS_H
#define PSFLOW_WORKER_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/dyn_batch.h"
#include "psflow/placement.h"
#include "psflow/spec.h"
#include "psflow/status.h"
#include "psflow/wire.h"

typedef struct worker_rows {
    pf_model_spec job;   /* the job's model: the ids a batch may name */
    pf_model_spec fixed; /* job with each dynamic table a fixed one of cap rows */
    int has_dynamic;
    pf_model_spec compact; /* the job's model with each table cut to cap[f] rows */
    int n_tables;
    int batch;                           /* examples a plan takes at most */
    uint32_t cap[PF_MAX_EMBEDDINGS];     /* compact rows of table f */
    size_t table_off[PF_MAX_EMBEDDINGS]; /* compact table f's first element */
    size_t dense_shift;                  /* full offset - compact offset of a dense variable */
    size_t n_params;                     /* the compact vector's length */
} worker_rows;

/* The rows of one batch, in the compact vector of `rows`. */
typedef struct worker_row_plan {
    pf_dyn_batch dyn;        /* with dynamic tables: their ids, by owner (dyn.ids[f]) */
    float *x;                /* with dynamic tables: the rewritten batch (fixed's input width) */
    const worker_rows *rows; /* the layout the plan's rows are placed by */
    uint32_t *ids[PF_MAX_EMBEDDINGS]; /* table f's distinct ids, ascending: n[f] of cap[f] */
    uint32_t *rel[PF_MAX_EMBEDDINGS]; /* the same ids relative to their shard's first row */
    uint32_t n[PF_MAX_EMBEDDINGS];
    uint32_t *first; /* per placement shard (table shards): its first compact row */
    uint32_t *count; /* per placement shard: how many of the plan's rows it holds */
    int n_shards;
} worker_row_plan;

/* The compact model of `model` for plans of up to `batch` examples. Errors: PF_ERR_INVALID
 * (a model without tables, batch < 1). */
pf_status worker_rows_init(worker_rows *r, const pf_model_spec *model, int batch);

/* Allocates a plan for r's batches over placement pl. Errors: PF_ERR_NOMEM. */
pf_status worker_row_plan_init(worker_row_plan *p, const worker_rows *r, const pf_placement *pl);
void worker_row_plan_deinit(worker_row_plan *p);

/* Plans the rows of `count` (<= r->batch) examples x (input-width slots each, as
 * pf_model_input_width of the job's model) and rewrites their id slots, in place (without
 * dynamic tables) or into the plan's own buffer: an id becomes the position of its row in the
 * compact table; padding (-1) stays; an id the table does not have (not a whole number in
 * 0 .. vocab - 1, or no 64-bit id) becomes NaN, which makes the example's output NaN as the
 * full model's would be. The rewritten batch is worker_row_plan_input(p, x). */
void worker_rows_plan(const worker_rows *r, const pf_placement *pl, float *x, int count,
                      worker_row_plan *p);

/* The batch a plan rewrote (the compact model's input): x itself, or the plan's buffer. */
static inline float *worker_row_plan_input(const worker_row_plan *p, float *x) {
    return p->x ? p->x : x;
}

/* The wire row set of table shard s (placement shard `id`) for plan (NULL: no rows): its
 * rows relative to the shard, or a dynamic shard's 64-bit ids; width and data as a push's
 * (0 and NULL for a pull's selection). */
static inline pf_wire_rows worker_rows_set(const worker_row_plan *plan, const pf_shard_info *s,
                                           uint32_t id, uint32_t width, const float *data) {
    uint32_t first = plan ? plan->first[id] : 0, n = plan ? plan->count[id] : 0;
    if (s->dynamic)
        return (pf_wire_rows){
            id, width, n, NULL, data, 1, n ? plan->dyn.ids[s->var] + first : NULL};
    return (pf_wire_rows){id, width, n, n ? plan->rel[s->var] + first : NULL, data, 0, NULL};
}

/* The compact vector's element where a dense shard's values lie. */
static inline size_t worker_rows_dense_at(const worker_rows *r, const pf_shard_info *s) {
    return s->offset - r->dense_shift;
}

#endif
