/* rows.c - the rows of embedding tables a worker holds (see rows.h).
 *
 * DESIGN: a plan gathers each table's valid ids of the batch into its id list, sorts it and
 * drops repeats; every slot is then found in that list by binary search. Shards split a
 * table into row ranges in order ("div" partitioning), so a shard's ids are the run of the
 * sorted list between its first row and the next shard's.
 */
#include "worker/rows.h"

#include <math.h>
#include <string.h>

#include "psflow/dyn_table.h"
#include "psflow/mem.h"
#include "psflow/model.h"

pf_status worker_rows_init(worker_rows *r, const pf_model_spec *model, int batch) {
    memset(r, 0, sizeof *r);
    if (model->n_embeddings < 1 || batch < 1)
        return PF_ERR_INVALID;
    r->job = *model;
    r->fixed = *model;
    r->has_dynamic = pf_model_has_dynamic(model);
    if (r->has_dynamic && pf_dyn_compact_model(model, batch, &r->fixed) != PF_OK)
        return PF_ERR_INVALID;
    r->compact = r->fixed;
    r->n_tables = model->n_embeddings;
    r->batch = batch;
    size_t full = 0, compact = 0; /* a dynamic table has no part of the full vector */
    for (int f = 0; f < r->n_tables; f++) {
        pf_embedding_spec *e = &r->compact.embeddings[f];
        int64_t named = (int64_t)batch * e->max_ids;
        r->cap[f] = (uint32_t)(named < e->vocab ? named : e->vocab);
        r->table_off[f] = compact;
        size_t row = (size_t)pf_model_row_width(model, f);
        if (model->embeddings[f].kind != PF_TABLE_DYNAMIC)
            full += (size_t)e->vocab * row;
        compact += (size_t)r->cap[f] * row;
        e->vocab = r->cap[f];
    }
    r->dense_shift = full - compact;
    r->n_params = pf_model_num_params(&r->compact);
    return PF_OK;
}

pf_status worker_row_plan_init(worker_row_plan *p, const worker_rows *r, const pf_placement *pl) {
    memset(p, 0, sizeof *p);
    p->rows = r;
    p->n_shards = pl->n_shards;
    p->first = pf_calloc((size_t)pl->n_shards, sizeof *p->first);
    p->count = pf_calloc((size_t)pl->n_shards, sizeof *p->count);
    int ok = p->first && p->count;
    if (ok && r->has_dynamic) {
        ok = pf_dyn_batch_init(&p->dyn, &r->job, r->batch) == PF_OK;
        p->dyn.n_ps = pl->n_ps;
        p->x = ok ? pf_mallocarray((size_t)r->batch * (size_t)pf_model_input_width(&r->fixed),
                                   sizeof *p->x)
                  : NULL;
        ok = p->x != NULL;
    }
    for (int f = 0; ok && f < r->n_tables; f++) {
        /* room for every id of a batch before repeats are dropped */
        size_t named = (size_t)r->batch * (size_t)r->compact.embeddings[f].max_ids;
        p->ids[f] = pf_mallocarray(named, sizeof *p->ids[f]);
        p->rel[f] = pf_mallocarray(named, sizeof *p->rel[f]);
        ok = p->ids[f] && p->rel[f];
    }
    if (!ok) {
        worker_row_plan_deinit(p);
        return PF_ERR_NOMEM;
    }
    return PF_OK;
}

void worker_row_plan_deinit(worker_row_plan *p) {
    for (int f = 0; f < PF_MAX_EMBEDDINGS; f++) {
        pf_free(p->ids[f]);
        pf_free(p->rel[f]);
    }
    pf_free(p->first);
    pf_free(p->count);
    pf_free(p->x);
    pf_dyn_batch_deinit(&p->dyn);
    memset(p, 0, sizeof *p);
}

/* The first position in ids[0 .. n) holding a value >= v. */
static uint32_t lower_bound(const uint32_t *ids, uint32_t n, uint64_t v) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ids[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The first of the n ids (ordered by owner over n_ps) that ps task k or a later one owns. */
static uint32_t owner_bound(const uint64_t *ids, uint32_t n, int n_ps, int k) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (pf_dyn_owner(ids[mid], n_ps) < k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void worker_rows_plan(const worker_rows *r, const pf_placement *pl, float *x, int count,
                      worker_row_plan *p) {
    const pf_model_spec *m = &r->compact;
    const size_t width = (size_t)pf_model_input_width(m);
    if (p->x) { /* dynamic tables: their ids become rows of fixed ones, by owner */
        pf_dyn_batch_plan(&p->dyn, x, count, p->x);
        x = p->x;
    }
    for (int f = 0; f < r->n_tables; f++) {
        const pf_embedding_spec *e = &m->embeddings[f];
        int64_t vocab = r->fixed.embeddings[f].vocab; /* compact holds the cut one */
        uint32_t u = pf_model_batch_rows(&r->fixed, f, x, count, p->ids[f]);
        p->n[f] = u;
        for (int b = 0; b < count; b++) {
            float *slot = x + (size_t)b * width + (size_t)pf_model_id_col(m, f);
            for (int k = 0; k < e->max_ids; k++) {
                int64_t row = pf_model_row_of(slot[k], vocab);
                if (row == -2)
                    slot[k] = NAN; /* no row of the table: the example's output is NaN */
                else if (row >= 0)
                    slot[k] = (float)lower_bound(p->ids[f], u, (uint64_t)row);
            }
        }
    }
    for (int s = 0; s < pl->n_shards; s++) {
        const pf_shard_info *sh = &pl->shards[s];
        p->first[s] = p->count[s] = 0;
        if (sh->var >= r->n_tables)
            continue;
        int f = sh->var;
        if (sh->dynamic) { /* the run of ids its task owns */
            uint32_t a = owner_bound(p->dyn.ids[f], p->dyn.n[f], pl->n_ps, sh->ps_task);
            uint32_t b = owner_bound(p->dyn.ids[f], p->dyn.n[f], pl->n_ps, sh->ps_task + 1);
            p->first[s] = a;
            p->count[s] = b - a;
            continue;
        }
        uint32_t a = lower_bound(p->ids[f], p->n[f], (uint64_t)sh->row_offset);
        uint32_t b = lower_bound(p->ids[f], p->n[f], (uint64_t)(sh->row_offset + sh->shape[0]));
        p->first[s] = a;
        p->count[s] = b - a;
        for (uint32_t j = a; j < b; j++)
            p->rel[f][j] = p->ids[f][j] - (uint32_t)sh->row_offset;
    }
}
