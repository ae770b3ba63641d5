/* dyn_batch.c - each batch's rows of dynamic tables as a fixed table (dyn_batch.h).
 *
 * DESIGN: a plan collects (id, position) pairs per dynamic table, sorts them by owner and id
 * (one process: by id) and walks
 * the sorted list once: each new id gets the next compact row, and every position of it is
 * written that row. O(b log b) for b ids a batch, nothing allocated per batch.
 */
#include "psflow/dyn_batch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/optim.h"

_Static_assert(PF_MAX_DYNAMIC_ROWS == PF_DYN_MAX_ROWS - 1, "a spec's max_rows fits a table");
_Static_assert(PF_MAX_MIN_COUNT == PF_DYN_MAX_MIN_COUNT, "a spec's min_count fits a table");

#define TABLE_SEED 0x64796e5f726f7773ULL /* keys the tables' new rows apart from other streams */

void pf_dyn_table_config(const pf_job_spec *spec, int f, int64_t max_rows, pf_dyn_config *out) {
    const pf_embedding_spec *e = &spec->model.embeddings[f];
    int width = pf_model_row_width(&spec->model, f);
    *out = (pf_dyn_config){
        .dim = width,
        .slots = pf_optim_num_slots(&spec->optimizer),
        .max_rows = max_rows,
        .min_count = e->min_count,
        .probability = e->probability > 0 ? e->probability : 1,
        .steps_to_live = e->steps_to_live,
        .sketch_bytes = (size_t)pf_embedding_sketch_bytes(e),
        .seed = spec->training.seed ^ TABLE_SEED ^ ((uint64_t)(f + 1) << 48),
        .init_limit = (float)sqrt(3.0 / (double)width),
        .init_width = e->dim,
    };
    if (spec->optimizer.type == PF_OPT_ADAGRAD)
        out->slot_init[0] = (float)spec->optimizer.initial_accumulator_value;
}

int64_t pf_dyn_message_ids(const pf_job_spec *spec, int f) {
    int64_t batch = (int64_t)spec->training.batch_size * spec->replicas_per_worker;
    return (batch > PF_EVAL_BATCH ? batch : PF_EVAL_BATCH) * spec->model.embeddings[f].max_ids;
}

typedef struct dense_ctx {
    const pf_optim_step *o;
    const pf_backend *be;
    size_t dim;
    const float *zeros;
} dense_ctx;

static void dense_move(float *row, float *const *slots, void *ctx) {
    const dense_ctx *c = ctx;
    pf_optim_step_apply(c->o, c->be, c->dim, c->zeros, row, slots);
}

pf_status pf_dyn_dense_step(pf_dyn_table *t, const pf_optimizer_spec *spec, const pf_optim_step *o,
                            const pf_backend *be, int64_t step) {
    if (pf_optim_rows_only(spec))
        return PF_OK;
    size_t dim = (size_t)pf_dyn_config_get(t)->dim;
    float *zeros = pf_calloc(dim, sizeof *zeros);
    if (!zeros)
        return PF_ERR_NOMEM;
    dense_ctx c = {o, be, dim, zeros};
    pf_dyn_for_each_idle(t, step, dense_move, &c);
    pf_free(zeros);
    return PF_OK;
}

pf_status pf_dyn_compact_model(const pf_model_spec *job, int batch, pf_model_spec *out) {
    if (batch < 1 || !pf_model_has_dynamic(job) || !pf_model_embeddings_valid(job))
        return PF_ERR_INVALID;
    *out = *job;
    for (int f = 0; f < job->n_embeddings; f++) {
        const pf_embedding_spec *e = &job->embeddings[f];
        if (e->kind != PF_TABLE_DYNAMIC)
            continue;
        int64_t cap = (int64_t)batch * e->max_ids;
        if (cap > PF_MAX_VOCAB)
            return PF_ERR_INVALID;
        pf_embedding_spec *c = &out->embeddings[f];
        c->kind = PF_TABLE_FIXED;
        c->vocab = cap;
        c->max_rows = 0;
        c->min_count = 0;
        c->probability = 1;
        c->steps_to_live = 0;
        c->sketch_bytes = 0;
    }
    return PF_OK;
}

pf_status pf_dyn_batch_init(pf_dyn_batch *b, const pf_model_spec *job, int batch) {
    memset(b, 0, sizeof *b);
    pf_status st = pf_dyn_compact_model(job, batch, &b->compact);
    if (st != PF_OK)
        return st;
    b->job = *job;
    b->batch = batch;
    b->n_ps = 1;
    size_t most = 0;
    for (int f = 0; f < job->n_embeddings; f++) {
        if (job->embeddings[f].kind != PF_TABLE_DYNAMIC)
            continue;
        b->cap[f] = (uint32_t)b->compact.embeddings[f].vocab;
        if (!(b->ids[f] = pf_mallocarray(b->cap[f], sizeof *b->ids[f])))
            goto nomem;
        most = b->cap[f] > most ? b->cap[f] : most;
    }
    b->in_width = pf_model_input_width(job);
    b->out_width = pf_model_input_width(&b->compact);
    if (!(b->scratch = pf_mallocarray(most, sizeof *b->scratch)))
        goto nomem;
    return PF_OK;
nomem:
    pf_dyn_batch_deinit(b);
    return PF_ERR_NOMEM;
}

void pf_dyn_batch_deinit(pf_dyn_batch *b) {
    for (int f = 0; f < PF_MAX_EMBEDDINGS; f++)
        pf_free(b->ids[f]);
    pf_free(b->scratch);
    memset(b, 0, sizeof *b);
}

/* By owner, then by id. */
static int by_owner_id(const void *a, const void *b) {
    const pf_dyn_id_pos *x = a, *y = b;
    if (x->owner != y->owner)
        return (x->owner > y->owner) - (x->owner < y->owner);
    return (x->id > y->id) - (x->id < y->id);
}

/* Dynamic table f of count examples: its ids into b->ids[f], its rows into out's slots. */
static void plan_table(pf_dyn_batch *b, int f, const float *x, int count, int in_col, float *out,
                       int out_col) {
    const pf_embedding_spec *e = &b->job.embeddings[f];
    const int max = e->max_ids;
    uint32_t pairs = 0, invalid = 0;
    for (int i = 0; i < count; i++) {
        const float *ids = x + (size_t)i * (size_t)b->in_width + in_col;
        float *row = out + (size_t)i * (size_t)b->out_width + out_col;
        for (int k = 0; k < max; k++) {
            uint64_t id;
            int got = pf_model_get_id(ids, k, &id);
            row[k] = got == 0 ? -1.0f : NAN; /* an id's row is written below */
            row[max + k] = ids[(size_t)max * PF_DYN_ID_SLOTS + (size_t)k];
            if (got > 0)
                b->scratch[pairs++] =
                    (pf_dyn_id_pos){id, (uint32_t)(i * max + k),
                                    b->n_ps > 1 ? (uint32_t)pf_dyn_owner(id, b->n_ps) : 0};
            else if (got < 0)
                invalid++;
        }
    }
    qsort(b->scratch, pairs, sizeof *b->scratch, by_owner_id);
    uint32_t n = 0;
    for (uint32_t j = 0; j < pairs; j++) {
        if (n == 0 || b->scratch[j].id != b->ids[f][n - 1])
            b->ids[f][n++] = b->scratch[j].id;
        uint32_t pos = b->scratch[j].pos;
        out[(size_t)(pos / (uint32_t)max) * (size_t)b->out_width + (size_t)out_col +
            pos % (uint32_t)max] = (float)(n - 1);
    }
    b->n[f] = n;
    b->invalid[f] = invalid;
}

void pf_dyn_batch_plan(pf_dyn_batch *b, const float *x, int count, float *out) {
    const pf_model_spec *m = &b->job;
    int in_col = 0, out_col = 0;
    for (int f = 0; f < m->n_embeddings; f++) {
        const pf_embedding_spec *e = &m->embeddings[f];
        if (e->kind == PF_TABLE_DYNAMIC) {
            plan_table(b, f, x, count, in_col, out, out_col);
        } else {
            for (int i = 0; i < count; i++)
                memcpy(out + (size_t)i * (size_t)b->out_width + out_col,
                       x + (size_t)i * (size_t)b->in_width + in_col,
                       (size_t)pf_model_feature_width(e) * sizeof *out);
        }
        in_col += pf_model_feature_width(e);
        out_col += pf_model_feature_width(&b->compact.embeddings[f]);
    }
    for (int i = 0; i < count && m->numeric_inputs > 0; i++)
        memcpy(out + (size_t)i * (size_t)b->out_width + out_col,
               x + (size_t)i * (size_t)b->in_width + in_col,
               (size_t)m->numeric_inputs * sizeof *out);
}

void pf_dyn_batch_map(const pf_dyn_batch *b, const float *full, float *compact) {
    pf_var_info from[PF_MAX_VARS], to[PF_MAX_VARS];
    int n = pf_model_layout(&b->job, from);
    pf_model_layout(&b->compact, to);
    for (int i = 0; i < n; i++)
        if (from[i].count > 0)
            memcpy(compact + to[i].offset, full + from[i].offset, from[i].count * sizeof *full);
}
