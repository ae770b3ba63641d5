/* shard.c - a ps task's shards, version and gradient aggregation (see shard.h).
 *
 * DESIGN: the task's shards are laid out back to back in one local vector, so values, each
 * optimizer slot and each worker's pending gradient are single buffers of n_local floats
 * and one pf_optim_apply call updates everything (optimizers are elementwise). A sync step
 * keeps one gradient buffer per worker; when enough have arrived they are summed in
 * task-index order into the first one, scaled by 1/replicas_to_aggregate and applied.
 * Nothing here is the size of the whole model: initial values are drawn for the task's
 * own shards (footprint.h has the bound this memory follows).
 *
 * Embedding tables are pushed by rows. Their shards are left out of the sync gradient
 * buffers, which cover the dense shards only (dense_off); a sync push's rows are copied
 * into its task's row store, and the step merges the stores of the arrived tasks shard by
 * shard: each row named by any of them gets the sum of their gradients for it in task-index
 * order - the additions a dense sum would make, zeros aside - divided by the number of
 * gradients, and only those rows are updated. A step so costs the rows it touches, never a
 * whole table.
 *
 * A dynamic table's shard holds a pf_dyn_table and no part of the local vector (count 0). Its
 * sync rows are kept by id (task_rows.ids) and merged the same way into s->dyn_ids and
 * s->dyn_sum; the summed rows then go through pf_dyn_update_batch, which admits, creates and
 * evicts, and the optimizer updates the rows it returns.
 */
#include "ps/shard.h"

#include <string.h>

#include "psflow/dyn_batch.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/optim.h"

typedef struct task_seq {
    uint64_t incarnation;
    uint64_t last_seq;
    int seen;
} task_seq;

/* sync: one task's row gradients for the current step, per local shard. */
typedef struct task_rows {
    uint32_t *rows; /* owned, grown; shard i's rows at row_at[i] */
    uint64_t *ids;  /* owned, grown; a dynamic shard i's ids at row_at[i] */
    size_t cap_ids;
    float *data; /* owned, grown; shard i's gradient rows at data_at[i] */
    size_t cap_rows, cap_data;
    size_t *row_at, *data_at; /* n entries */
    uint32_t *n_rows;         /* n entries */
} task_rows;

struct ps_shards {
    pf_job_spec spec;
    const pf_backend *be;
    int n;               /* local shards */
    pf_shard_info *info; /* n entries */
    size_t *local_off;   /* n entries: offset of shard i in the local vector */
    size_t n_local;      /* floats held */
    float *values;
    float *slots[PF_OPTIM_MAX_SLOTS];
    int n_slots;
    int n_tasks;            /* training tasks that push: the current membership */
    int aggregate;          /* sync: replicas_to_aggregate of the current membership */
    float **pending;        /* sync: a gradient buffer per member (PF_MAX_TASKS slots) */
    unsigned char *arrived; /* sync: which tasks pushed for step == version */
    int n_arrived;
    unsigned char *joined; /* sync: members counted in a step (a new one from its first push) */
    int n_joined;
    task_seq *seqs; /* PF_MAX_TASKS entries */
    ps_stats stats;
    /* embedding tables */
    int has_tables;
    unsigned char *table; /* n entries: 1 for a table shard */
    size_t *dense_off;    /* n entries: a dense shard's offset in a sync gradient buffer */
    size_t n_dense;       /* floats of the dense shards */
    task_rows *trows;     /* sync: PF_MAX_TASKS entries */
    float *rowsum;        /* sync: one row's sum, the widest table row */
    uint32_t *merged;     /* sync: the rows the last step touched, shard i's at merged_at[i] */
    size_t cap_merged, *merged_at;
    /* the rows the last update changed, per table shard (into a message or merged) */
    const uint32_t **touched;
    uint32_t *n_touched;
    int touched_valid; /* 0: unknown (restored, not yet updated): every row is read */
    /* host memory: the touched rows were checked for NaN and infinity as they were updated,
     * the first one found (table shard bad_shard, element bad_elem) kept; -1: none */
    int bad_shard;
    size_t bad_elem;
    ps_grad *whole; /* n entries: ps_shards_push's gradients */
    /* dynamic tables */
    pf_dyn_table **dyn; /* n entries: a dynamic shard's table, else NULL */
    uint64_t *dyn_ids;  /* sync: a step's merged ids of one shard */
    float *dyn_sum;     /* sync: their summed gradients */
    size_t cap_dyn_ids, cap_dyn_sum;
    float **dyn_rows, **dyn_slots; /* pf_dyn_update_batch's rows and slots */
    size_t cap_dyn_rows, cap_dyn_slots;
    uint64_t dyn_dropped;
    float *scatter; /* adam: zeros, the widest table shard; a step's rows go in and out */
};

/* Lays out the shards idx[0 .. s->n) back to back in the local vector (and the dense ones in
 * a sync gradient buffer), and allocates the row scratch their tables need. */
static pf_status lay_out(ps_shards *s, const pf_placement *placement, const int *idx) {
    size_t widest = 1;
    for (int i = 0; i < s->n; i++) {
        s->info[i] = placement->shards[idx[i]];
        s->local_off[i] = s->n_local;
        s->n_local += s->info[i].count;
        s->table[i] = s->info[i].var < s->spec.model.n_embeddings;
        s->has_tables |= s->table[i];
        if (s->info[i].dynamic) {
            pf_dyn_config cfg;
            pf_dyn_table_config(&s->spec, s->info[i].var, s->info[i].max_rows, &cfg);
            if (pf_dyn_create(&cfg, &s->dyn[i]) != PF_OK)
                return PF_ERR_NOMEM;
        }
        if (s->table[i] && (size_t)s->info[i].shape[1] > widest)
            widest = (size_t)s->info[i].shape[1];
        s->dense_off[i] = s->n_dense;
        if (!s->table[i])
            s->n_dense += s->info[i].count;
    }
    if (!(s->rowsum = pf_mallocarray(widest, sizeof *s->rowsum)))
        return PF_ERR_NOMEM;
    /* adam moves every row of a table each step (pf_optim_rows_only): the step's rows are
     * scattered into zeros the size of the largest table shard and the shard updated whole */
    size_t largest = 0;
    for (int i = 0; i < s->n; i++)
        if (s->table[i] && s->info[i].count > largest)
            largest = s->info[i].count;
    if (largest > 0 && !pf_optim_rows_only(&s->spec.optimizer) &&
        !(s->scatter = pf_calloc(largest, sizeof *s->scatter)))
        return PF_ERR_NOMEM;
    return PF_OK;
}

/* Allocates the values, the optimizer slots (initialised) and, in sync mode, the pending
 * gradients in the backend's memory. */
static pf_status alloc_buffers(ps_shards *s) {
    const pf_backend *be = s->be;
    size_t bytes = (s->n_local ? s->n_local : 1) * sizeof(float);
    size_t dense_bytes = (s->n_dense ? s->n_dense : 1) * sizeof(float);
    s->values = be->alloc(bytes);
    if (!s->values)
        return PF_ERR_NOMEM;
    for (int k = 0; k < s->n_slots; k++) {
        if (!(s->slots[k] = be->alloc(bytes)))
            return PF_ERR_NOMEM;
        pf_optim_slot_init(&s->spec.optimizer, be, k, s->slots[k], s->n_local);
    }
    /* Sync mode keeps one pending gradient per training task, averaged in place into the
     * first (no separate sum): allocated now so that a running job never fails an
     * allocation. Async mode applies each push from the message itself. */
    for (int t = 0; s->spec.training.mode == PF_MODE_SYNC && t < s->n_tasks; t++)
        if (!(s->pending[t] = be->alloc(dense_bytes)))
            return PF_ERR_NOMEM;
    return PF_OK;
}

/* The same initial values a single process starts from, drawn for this task's shards only
 * (never the whole model): straight into the values when the backend's memory is the
 * host's, else a shard at a time through a host buffer. Shards come in placement order,
 * which is the model's. */
static pf_status init_values(ps_shards *s) {
    const pf_model_spec *model = &s->spec.model;
    uint64_t seed = s->spec.training.seed;
    size_t nn = (size_t)(s->n ? s->n : 1);
    size_t *offsets = pf_mallocarray(nn, sizeof *offsets);
    size_t *counts = pf_mallocarray(nn, sizeof *counts);
    float **outs = pf_mallocarray(nn, sizeof *outs);
    pf_status st = offsets && counts && outs ? PF_OK : PF_ERR_NOMEM;
    for (int i = 0; st == PF_OK && i < s->n; i++) {
        offsets[i] = s->info[i].offset;
        counts[i] = s->info[i].count;
        outs[i] = s->values + s->local_off[i];
    }
    int host = strcmp(s->be->name, "cuda") != 0; /* the CPU backends' buffers are host memory */
    if (st == PF_OK && host)
        pf_model_init_ranges(model, seed, s->n, offsets, counts, outs);
    for (int i = 0; st == PF_OK && !host && i < s->n; i++) {
        float *init = pf_mallocarray(counts[i] ? counts[i] : 1, sizeof *init);
        if (!init) {
            st = PF_ERR_NOMEM;
            break;
        }
        pf_model_init_ranges(model, seed, 1, &offsets[i], &counts[i], &init);
        s->be->upload(outs[i], init, counts[i]);
        pf_free(init);
    }
    pf_free(offsets);
    pf_free(counts);
    pf_free(outs);
    return st;
}

pf_status ps_shards_create(const pf_job_spec *spec, const pf_placement *placement, int ps_task,
                           const pf_backend *be, ps_shards **out) {
    *out = NULL;
    if (ps_task < 0 || ps_task >= placement->n_ps)
        return PF_ERR_INVALID;
    ps_shards *s = pf_calloc(1, sizeof *s);
    if (!s)
        return PF_ERR_NOMEM;
    if (pf_job_spec_copy(&s->spec, spec) != PF_OK) {
        pf_free(s);
        return PF_ERR_NOMEM;
    }
    s->be = be;
    s->n_tasks = spec->replicas.worker + spec->replicas.chief;
    s->aggregate = spec->training.replicas_to_aggregate;
    s->n_joined = s->n_tasks;
    s->n_slots = pf_optim_num_slots(&spec->optimizer);
    int total = placement->n_shards;
    int *idx = pf_mallocarray((size_t)total, sizeof *idx);
    if (!idx)
        goto nomem;
    s->n = pf_placement_shards_of(placement, ps_task, idx, total);
    size_t nn = (size_t)(s->n ? s->n : 1);
    s->info = pf_mallocarray(nn, sizeof *s->info);
    s->local_off = pf_mallocarray(nn, sizeof *s->local_off);
    s->seqs = pf_calloc(PF_MAX_TASKS, sizeof *s->seqs);
    s->arrived = pf_calloc(PF_MAX_TASKS, 1);
    s->joined = pf_calloc(PF_MAX_TASKS, 1);
    s->pending = pf_calloc(PF_MAX_TASKS, sizeof *s->pending);
    if (s->n_tasks > PF_MAX_TASKS || !s->info || !s->local_off || !s->seqs || !s->arrived ||
        !s->joined || !s->pending)
        goto nomem;
    s->table = pf_calloc(nn, 1);
    s->dense_off = pf_calloc(nn, sizeof *s->dense_off);
    s->merged_at = pf_calloc(nn, sizeof *s->merged_at);
    s->touched = pf_calloc(nn, sizeof *s->touched);
    s->n_touched = pf_calloc(nn, sizeof *s->n_touched);
    s->trows = pf_calloc(PF_MAX_TASKS, sizeof *s->trows);
    s->whole = pf_calloc(nn, sizeof *s->whole);
    s->dyn = pf_calloc(nn, sizeof *s->dyn);
    if (!s->whole || !s->dyn || !s->table || !s->dense_off || !s->merged_at || !s->touched ||
        !s->n_touched || !s->trows)
        goto nomem;
    if (lay_out(s, placement, idx) != PF_OK || alloc_buffers(s) != PF_OK)
        goto nomem;
    memset(s->joined, 1, (size_t)s->n_tasks);
    if (init_values(s) != PF_OK)
        goto nomem;
    pf_free(idx);
    *out = s;
    return PF_OK;
nomem:
    pf_free(idx);
    ps_shards_destroy(s);
    return PF_ERR_NOMEM;
}

void ps_shards_destroy(ps_shards *s) {
    if (!s)
        return;
    if (s->values)
        s->be->free(s->values);
    for (int k = 0; k < PF_OPTIM_MAX_SLOTS; k++)
        if (s->slots[k])
            s->be->free(s->slots[k]);
    for (int t = 0; s->pending && t < PF_MAX_TASKS; t++)
        if (s->pending[t])
            s->be->free(s->pending[t]);
    pf_free(s->pending);
    for (int t = 0; s->trows && t < PF_MAX_TASKS; t++) {
        pf_free(s->trows[t].rows);
        pf_free(s->trows[t].ids);
        pf_free(s->trows[t].data);
        pf_free(s->trows[t].row_at);
        pf_free(s->trows[t].data_at);
        pf_free(s->trows[t].n_rows);
    }
    pf_free(s->trows);
    pf_free(s->whole);
    for (int i = 0; s->dyn && i < s->n; i++)
        pf_dyn_destroy(s->dyn[i]);
    pf_free(s->dyn);
    pf_free(s->dyn_ids);
    pf_free(s->dyn_sum);
    pf_free(s->dyn_rows);
    pf_free(s->dyn_slots);
    pf_free(s->table);
    pf_free(s->dense_off);
    pf_free(s->rowsum);
    pf_free(s->scatter);
    pf_free(s->merged);
    pf_free(s->merged_at);
    pf_free(s->touched);
    pf_free(s->n_touched);
    pf_free(s->arrived);
    pf_free(s->joined);
    pf_free(s->seqs);
    pf_free(s->info);
    pf_free(s->local_off);
    pf_job_spec_deinit(&s->spec);
    pf_free(s);
}

int ps_shards_count(const ps_shards *s) {
    return s->n;
}

const pf_shard_info *ps_shards_info(const ps_shards *s, int i) {
    return &s->info[i];
}

const float *ps_shards_values(const ps_shards *s, int i) {
    return s->values + s->local_off[i];
}

const float *ps_shards_slot(const ps_shards *s, int i, int k) {
    return s->slots[k] + s->local_off[i];
}

int ps_shards_is_table(const ps_shards *s, int i) {
    return s->table[i];
}

int ps_shards_is_dynamic(const ps_shards *s, int i) {
    return s->dyn[i] != NULL;
}

pf_dyn_table *ps_shards_dyn_table(const ps_shards *s, int i) {
    return s->dyn[i];
}

void ps_shards_dyn_gather(ps_shards *s, int i, const uint64_t *ids, size_t n, float *out) {
    pf_dyn_gather(s->dyn[i], ids, n, out);
}

void ps_shards_dyn_replace(ps_shards *s, int i, pf_dyn_table *t) {
    pf_dyn_destroy(s->dyn[i]);
    s->dyn[i] = t;
    memset(s->arrived, 0, PF_MAX_TASKS);
    s->n_arrived = 0;
    s->touched_valid = 0;
    s->bad_shard = -1;
}

uint64_t ps_shards_dyn_dropped(const ps_shards *s) {
    return s->dyn_dropped;
}

ps_stats ps_shards_stats(const ps_shards *s) {
    return s->stats;
}

/* One optimizer update of every local value from gradient g (n_local floats). */
static void apply(ps_shards *s, const float *g) {
    pf_optim_apply(&s->spec.optimizer, s->be, (int64_t)s->stats.version, s->n_local, g, s->values,
                   s->slots);
    s->stats.version++;
}

/* Checks (task, incarnation, seq); returns -1 to go on, else the result to report. */
static int check_sequence(ps_shards *s, int task, uint64_t incarnation, uint64_t seq) {
    task_seq *ts = &s->seqs[task];
    if (ts->seen && incarnation < ts->incarnation) {
        s->stats.pushes_refused++;
        return PS_PUSH_REFUSED;
    }
    if (ts->seen && incarnation == ts->incarnation && seq <= ts->last_seq) {
        s->stats.pushes_duplicate++;
        return PS_PUSH_DUPLICATE;
    }
    ts->seen = 1;
    ts->incarnation = incarnation;
    ts->last_seq = seq;
    return -1;
}

/* The gradients a sync step waits for: replicas_to_aggregate, or fewer while members added
 * by a membership change have not pushed yet (they join the step they first push for). */
static int needed(const ps_shards *s) {
    int n = s->aggregate < s->n_joined ? s->aggregate : s->n_joined;
    return n > 0 ? n : 1;
}

/* Slot k of local shard i, or NULL. */
static float *slot_at(const ps_shards *s, int k, int i) {
    return s->slots[k] ? s->slots[k] + s->local_off[i] : NULL;
}

/* Grows *buf to hold n items of `size` bytes; 0, or -1 out of memory. */
static int grow(void **buf, size_t *cap, size_t n, size_t size) {
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < n)
        c *= 2;
    void *p = pf_realloc(*buf, c * size);
    if (!p)
        return -1;
    *buf = p;
    *cap = c;
    return 0;
}

/* adam: updates table shard i whole from s->scatter, which holds the gradient of `rows` and
 * zeros elsewhere, then zeros those rows again. */
static void update_whole(ps_shards *s, int i, uint32_t n, const uint32_t *rows) {
    size_t width = (size_t)s->info[i].shape[1];
    pf_optim_apply(&s->spec.optimizer, s->be, (int64_t)s->stats.version, s->info[i].count,
                   s->scatter, s->values + s->local_off[i],
                   (float *const[PF_OPTIM_MAX_SLOTS]){slot_at(s, 0, i), slot_at(s, 1, i)});
    for (uint32_t j = 0; j < n; j++)
        memset(s->scatter + (size_t)rows[j] * width, 0, width * sizeof *s->scatter);
}

/* Asks for the cache lines of row `row` of table shard i, its values and slots, to be
 * updated (host memory). */
static void prefetch_row(const ps_shards *s, int i, uint32_t row) {
    size_t width = (size_t)s->info[i].shape[1], off = (size_t)row * width;
    pf_prefetch_write(s->values + s->local_off[i] + off, width * sizeof(float));
    for (int k = 0; k < s->n_slots; k++)
        pf_prefetch_write(slot_at(s, k, i) + off, width * sizeof(float));
}

/* Host memory: checks the row at element `at` of table shard i (just updated, still in cache)
 * for NaN and infinity, keeping the first bad one found in this update. */
static void row_checked(ps_shards *s, int i, size_t at) {
    size_t width = (size_t)s->info[i].shape[1];
    size_t bad =
        s->bad_shard < 0 ? pf_first_nonfinite(s->values + s->local_off[i] + at, width) : width;
    if (bad < width) {
        s->bad_shard = i;
        s->bad_elem = at + bad;
    }
}

/* The backend of a dynamic table's rows: they are host memory whatever the ps's device. */
static const pf_backend *dyn_backend(const ps_shards *s) {
    return s->be->host_memory ? s->be : pf_backend_openblas();
}

/* Room for the rows and slots of n ids to update; -1 out of memory. */
static int grow_dyn_ptrs(ps_shards *s, size_t n) {
    n = n ? n : 1;
    if (grow((void **)&s->dyn_rows, &s->cap_dyn_rows, n, sizeof *s->dyn_rows) != 0 ||
        grow((void **)&s->dyn_slots, &s->cap_dyn_slots, n * PF_DYN_MAX_SLOTS,
             sizeof *s->dyn_slots) != 0)
        return -1;
    return 0;
}

/* Updates dynamic shard i's rows of ids[0 .. n) (strictly increasing) by the gradients g (n
 * rows of its width) with o at the current version: pf_dyn_update_batch finds or creates
 * each row (an id it does not admit has its gradient dropped), the optimizer updates it and
 * it is checked for NaN and infinity while in cache; then rows idle past steps_to_live go.
 * Without memory for the batch its rows are dropped and counted (ps_shards_dyn_dropped). */
static void dyn_update(ps_shards *s, int i, const uint64_t *ids, uint32_t n, const float *g,
                       const pf_optim_step *o) {
    size_t width = (size_t)s->info[i].shape[1];
    int64_t step = (int64_t)s->stats.version;
    if (grow_dyn_ptrs(s, n) != 0 ||
        pf_dyn_update_batch(s->dyn[i], ids, n, step, s->dyn_rows, s->dyn_slots) != PF_OK) {
        s->dyn_dropped += n;
        return;
    }
    for (uint32_t j = 0; j < n; j++) {
        float *row = s->dyn_rows[j];
        if (!row)
            continue;
        pf_optim_step_apply(o, dyn_backend(s), width, g + (size_t)j * width, row,
                            s->dyn_slots + (size_t)j * PF_DYN_MAX_SLOTS);
        size_t bad = s->bad_shard < 0 ? pf_first_nonfinite(row, width) : width;
        if (bad < width) {
            s->bad_shard = i;
            s->bad_elem = (size_t)j * width + bad; /* within this update's rows */
        }
    }
    /* adam: the rows the step did not name move too (out of memory: they stay, as in one
     * process) */
    (void)pf_dyn_dense_step(s->dyn[i], &s->spec.optimizer, o, dyn_backend(s), step);
    pf_dyn_evict_stale(s->dyn[i], step);
}

/* Merges the arrived tasks' ids of dynamic shard i into s->dyn_ids and their gradients,
 * summed in task-index order and divided by the gradients aggregated, into s->dyn_sum (room
 * made by keep_rows), then updates those rows once. */
static void merge_apply_dyn(ps_shards *s, int i) {
    size_t width = (size_t)s->info[i].shape[1], head[PF_MAX_TASKS] = {0};
    const pf_backend *be = dyn_backend(s);
    uint32_t n = 0;
    for (;;) {
        uint64_t id = UINT64_MAX;
        int any = 0;
        for (int t = 0; t < s->n_tasks; t++) {
            const task_rows *tr = &s->trows[t];
            if (s->arrived[t] && head[t] < tr->n_rows[i] &&
                (!any || tr->ids[tr->row_at[i] + head[t]] < id)) {
                id = tr->ids[tr->row_at[i] + head[t]];
                any = 1;
            }
        }
        if (!any)
            break;
        float *sum = s->dyn_sum + (size_t)n * width;
        int first = 1;
        for (int t = 0; t < s->n_tasks; t++) {
            const task_rows *tr = &s->trows[t];
            if (!s->arrived[t] || head[t] >= tr->n_rows[i] ||
                tr->ids[tr->row_at[i] + head[t]] != id)
                continue;
            const float *g = tr->data + tr->data_at[i] + head[t] * width;
            if (first)
                be->copy(sum, g, width);
            else
                be->axpy(width, 1.0f, g, sum);
            first = 0;
            head[t]++;
        }
        be->scale(width, 1.0f / (float)s->n_arrived, sum);
        s->dyn_ids[n++] = id;
    }
    pf_optim_step o = pf_optim_prepare(&s->spec.optimizer, (int64_t)s->stats.version);
    dyn_update(s, i, s->dyn_ids, n, s->dyn_sum, &o);
    s->n_touched[i] = 0;
}

/* Merges the arrived tasks' rows of table shard i and updates each named row once: its
 * gradients summed in task-index order, divided by the gradients aggregated. The merged
 * rows go to s->merged (room for every arrived row was made by the caller). */
static void merge_apply_rows(ps_shards *s, int i, size_t at) {
    size_t width = (size_t)s->info[i].shape[1];
    size_t head[PF_MAX_TASKS] = {0};
    float scale = 1.0f / (float)s->n_arrived;
    float *w = s->values + s->local_off[i];
    pf_optim_step o = pf_optim_prepare(&s->spec.optimizer, (int64_t)s->stats.version);
    int ahead = s->be->host_memory && !s->scatter; /* rows prefetched as each task's advance */
    s->merged_at[i] = at;
    for (;;) {
        uint32_t row = UINT32_MAX;
        for (int t = 0; t < s->n_tasks; t++) {
            const task_rows *tr = &s->trows[t];
            if (s->arrived[t] && head[t] < tr->n_rows[i] && tr->rows[tr->row_at[i] + head[t]] < row)
                row = tr->rows[tr->row_at[i] + head[t]];
        }
        if (row == UINT32_MAX)
            break;
        int first = 1;
        for (int t = 0; t < s->n_tasks; t++) {
            const task_rows *tr = &s->trows[t];
            if (!s->arrived[t] || head[t] >= tr->n_rows[i] ||
                tr->rows[tr->row_at[i] + head[t]] != row)
                continue;
            const float *g = tr->data + tr->data_at[i] + head[t] * width;
            if (first)
                s->be->copy(s->rowsum, g, width);
            else
                s->be->axpy(width, 1.0f, g, s->rowsum);
            first = 0;
            head[t]++;
            if (ahead && head[t] + PF_PREFETCH_ROWS <= tr->n_rows[i]) /* the task's next rows */
                prefetch_row(s, i, tr->rows[tr->row_at[i] + head[t] + PF_PREFETCH_ROWS - 1]);
        }
        s->be->scale(width, scale, s->rowsum);
        size_t off = (size_t)row * width;
        if (s->scatter) {
            memcpy(s->scatter + off, s->rowsum, width * sizeof *s->rowsum);
        } else {
            pf_optim_step_apply(&o, s->be, width, s->rowsum, w + off,
                                (float *const[PF_OPTIM_MAX_SLOTS]){
                                    slot_at(s, 0, i) ? slot_at(s, 0, i) + off : NULL,
                                    slot_at(s, 1, i) ? slot_at(s, 1, i) + off : NULL});
        }
        s->merged[at++] = row;
        if (!s->scatter && s->be->host_memory && at - s->merged_at[i] > PF_OPTIM_CHECK_LAG) {
            row_checked(
                s, i, (size_t)s->merged[at - 1 - PF_OPTIM_CHECK_LAG] * width); /* a few rows ago */
        }
    }
    size_t j =
        at - s->merged_at[i] > PF_OPTIM_CHECK_LAG ? at - PF_OPTIM_CHECK_LAG : s->merged_at[i];
    for (; !s->scatter && s->be->host_memory && j < at; j++) /* the last few */
        row_checked(s, i, (size_t)s->merged[j] * width);
    s->touched[i] = s->merged + s->merged_at[i];
    s->n_touched[i] = (uint32_t)(at - s->merged_at[i]);
    if (s->scatter)
        update_whole(s, i, s->n_touched[i], s->touched[i]);
}

/* Averages the arrived gradients and applies them: one sync step. Returns -1 (nothing
 * applied, the gradients kept) when there is no memory to merge a table's rows. */
static int aggregate_apply(ps_shards *s) {
    size_t rows = 0; /* every arrived row of a fixed table: room to merge them */
    for (int t = 0; s->has_tables && t < s->n_tasks; t++)
        for (int i = 0; s->arrived[t] && i < s->n; i++)
            rows += s->table[i] && !s->dyn[i] ? s->trows[t].n_rows[i] : 0;
    if (grow((void **)&s->merged, &s->cap_merged, rows ? rows : 1, sizeof *s->merged) != 0)
        return -1;
    /* Average in task-index order so the result is independent of arrival order: summed
     * into the first arrived task's buffer, the same additions in the same order as into
     * a separate sum. */
    float *sum = NULL;
    for (int t = 0; t < s->n_tasks; t++) {
        if (!s->arrived[t])
            continue;
        if (!sum)
            sum = s->pending[t];
        else
            s->be->axpy(s->n_dense, 1.0f, s->pending[t], sum);
    }
    s->be->scale(s->n_dense, 1.0f / (float)s->n_arrived, sum);
    s->bad_shard = -1;
    if (!s->has_tables) {
        apply(s, sum); /* one call over the whole local vector */
    } else {
        size_t at = 0;
        for (int i = 0; i < s->n; i++) {
            if (s->dyn[i]) {
                merge_apply_dyn(s, i);
            } else if (s->table[i]) {
                merge_apply_rows(s, i, at);
                at += s->n_touched[i];
            } else {
                pf_optim_apply(
                    &s->spec.optimizer, s->be, (int64_t)s->stats.version, s->info[i].count,
                    sum + s->dense_off[i], s->values + s->local_off[i],
                    (float *const[PF_OPTIM_MAX_SLOTS]){slot_at(s, 0, i), slot_at(s, 1, i)});
            }
        }
        s->touched_valid = !s->scatter; /* adam moved every row */
        s->stats.version++;
    }
    memset(s->arrived, 0, PF_MAX_TASKS);
    s->n_arrived = 0;
    return 0;
}

/* The rows of the arrived tasks' pushes and of grads (NULL: none) for local shard i. */
static size_t step_rows(const ps_shards *s, int i, const ps_grad *grads) {
    size_t n = grads ? grads[i].n_rows : 0;
    for (int t = 0; t < s->n_tasks; t++)
        n += s->arrived[t] ? s->trows[t].n_rows[i] : 0;
    return n;
}

/* Room to merge the step's rows, those of the tasks already arrived and grads', taken now:
 * the push that completes the step then cannot fail for memory (aggregate_apply). -1: out
 * of memory. */
static int room_to_merge(ps_shards *s, const ps_grad *grads) {
    size_t merging = 0, dyn = 1, dyn_data = 1;
    for (int i = 0; i < s->n; i++) {
        if (!s->table[i])
            continue;
        size_t n = step_rows(s, i, grads), data = n * (size_t)s->info[i].shape[1];
        if (!s->dyn[i]) {
            merging += n; /* every fixed table's merged rows, one after another */
            continue;
        }
        dyn = n > dyn ? n : dyn; /* a dynamic shard is merged at a time: the largest */
        dyn_data = data > dyn_data ? data : dyn_data;
    }
    if (grow((void **)&s->merged, &s->cap_merged, merging ? merging : 1, sizeof *s->merged) != 0 ||
        grow((void **)&s->dyn_ids, &s->cap_dyn_ids, dyn, sizeof *s->dyn_ids) != 0 ||
        grow((void **)&s->dyn_sum, &s->cap_dyn_sum, dyn_data, sizeof *s->dyn_sum) != 0 ||
        grow_dyn_ptrs(s, dyn) != 0)
        return -1;
    return 0;
}

/* Keeps task's rows of this push for the sync step (a dynamic shard's by id). -1: out of
 * memory (nothing kept). */
static int keep_rows(ps_shards *s, int task, const ps_grad *grads) {
    task_rows *tr = &s->trows[task];
    size_t n_rows = 0, n_ids = 0, n_data = 0;
    for (int i = 0; i < s->n; i++)
        if (s->table[i]) {
            *(s->dyn[i] ? &n_ids : &n_rows) += grads[i].n_rows;
            n_data += (size_t)grads[i].n_rows * (size_t)s->info[i].shape[1];
        }
    size_t nn = (size_t)s->n;
    if (!tr->row_at && (!(tr->row_at = pf_calloc(nn, sizeof *tr->row_at)) ||
                        !(tr->data_at = pf_calloc(nn, sizeof *tr->data_at)) ||
                        !(tr->n_rows = pf_calloc(nn, sizeof *tr->n_rows)))) {
        pf_free(tr->row_at);
        pf_free(tr->data_at);
        tr->row_at = tr->data_at = NULL;
        return -1;
    }
    if (grow((void **)&tr->rows, &tr->cap_rows, n_rows ? n_rows : 1, sizeof *tr->rows) != 0 ||
        grow((void **)&tr->ids, &tr->cap_ids, n_ids ? n_ids : 1, sizeof *tr->ids) != 0 ||
        grow((void **)&tr->data, &tr->cap_data, n_data ? n_data : 1, sizeof *tr->data) != 0 ||
        room_to_merge(s, grads) != 0)
        return -1;
    size_t r = 0, k = 0, d = 0;
    for (int i = 0; i < s->n; i++) {
        if (!s->table[i])
            continue;
        size_t width = (size_t)s->info[i].shape[1];
        tr->row_at[i] = s->dyn[i] ? k : r;
        tr->data_at[i] = d;
        tr->n_rows[i] = grads[i].n_rows;
        if (s->dyn[i]) {
            if (grads[i].n_rows)
                memcpy(tr->ids + k, grads[i].ids, grads[i].n_rows * sizeof *tr->ids);
            k += grads[i].n_rows;
        } else {
            if (grads[i].n_rows)
                memcpy(tr->rows + r, grads[i].rows, grads[i].n_rows * sizeof *tr->rows);
            r += grads[i].n_rows;
        }
        if (grads[i].n_rows)
            memcpy(tr->data + d, grads[i].data, grads[i].n_rows * width * sizeof *tr->data);
        d += grads[i].n_rows * width;
    }
    return 0;
}

static ps_push_result push_sync(ps_shards *s, int task, uint64_t step, const ps_grad *grads) {
    if (step < s->stats.version) {
        s->stats.pushes_stale++;
        return PS_PUSH_STALE;
    }
    if (step > s->stats.version || s->arrived[task]) {
        /* A gradient for a version this ps has not reached cannot come from an honest
         * worker; a second one for the same step is a replay under a new seq. */
        s->stats.pushes_duplicate++;
        return PS_PUSH_DUPLICATE;
    }
    if (s->has_tables && keep_rows(s, task, grads) != 0)
        return PS_PUSH_NOMEM;
    for (int i = 0; i < s->n; i++)
        if (!s->table[i])
            s->be->copy(s->pending[task] + s->dense_off[i], grads[i].data, s->info[i].count);
    s->arrived[task] = 1;
    s->n_arrived++;
    if (!s->joined[task]) { /* a new member: counted from this step on */
        s->joined[task] = 1;
        s->n_joined++;
    }
    s->stats.pushes_applied++;
    if (s->n_arrived < needed(s) || aggregate_apply(s) != 0)
        return PS_PUSH_ACCEPTED; /* a step that could not merge its rows waits for memory */
    return PS_PUSH_APPLIED;
}

int ps_shards_tasks(const ps_shards *s) {
    return s->n_tasks;
}

pf_status ps_shards_set_tasks(ps_shards *s, int n_tasks, int aggregate, int *applied) {
    *applied = 0;
    if (n_tasks < 1 || n_tasks > PF_MAX_TASKS || aggregate < 1 || aggregate > n_tasks)
        return PF_ERR_INVALID;
    int sync = s->spec.training.mode == PF_MODE_SYNC;
    size_t bytes = (s->n_dense ? s->n_dense : 1) * sizeof(float);
    for (int t = s->n_tasks; sync && t < n_tasks; t++) /* before anything changes */
        if (!s->pending[t] && !(s->pending[t] = s->be->alloc(bytes)))
            return PF_ERR_NOMEM;
    for (int t = n_tasks; t < s->n_tasks; t++) { /* removed: its gradient is not counted */
        if (s->arrived[t]) {
            s->arrived[t] = 0;
            s->n_arrived--;
        }
        if (s->joined[t]) {
            s->joined[t] = 0;
            s->n_joined--;
        }
    }
    for (int t = s->n_tasks; t < n_tasks; t++) /* added: joins the step it first pushes for */
        s->joined[t] = 0;
    s->n_tasks = n_tasks;
    s->aggregate = aggregate;
    s->spec.replicas.worker = n_tasks - s->spec.replicas.chief;
    s->spec.training.replicas_to_aggregate = aggregate;
    if (sync && s->n_arrived > 0 && s->n_arrived >= needed(s) && aggregate_apply(s) == 0)
        *applied = 1; /* the step waited only for members that left */
    return PF_OK;
}

ps_push_result ps_shards_push_grads(ps_shards *s, int task, uint64_t incarnation, uint64_t seq,
                                    uint64_t step, const ps_grad *grads) {
    task_seq before = s->seqs[task];
    int r = check_sequence(s, task, incarnation, seq);
    if (r >= 0)
        return (ps_push_result)r;
    if (s->spec.training.mode == PF_MODE_SYNC) {
        ps_push_result res = push_sync(s, task, step, grads);
        if (res == PS_PUSH_NOMEM)
            s->seqs[task] = before; /* not taken: the same push may come again */
        return res;
    }
    /* Async: apply each shard's gradient in place, one update of the whole task. The rows
     * it names are kept (a copy: the message goes) for the non-finite check; without
     * memory for them that check reads the whole tables. */
    size_t rows = 0, at = 0;
    for (int i = 0; i < s->n; i++)
        rows += s->table[i] && !s->dyn[i] ? grads[i].n_rows : 0;
    int keep = grow((void **)&s->merged, &s->cap_merged, rows ? rows : 1, sizeof *s->merged) == 0;
    bool check = s->be->host_memory;
    s->bad_shard = -1;
    for (int i = 0; i < s->n; i++) {
        float *const slots[PF_OPTIM_MAX_SLOTS] = {slot_at(s, 0, i), slot_at(s, 1, i)};
        if (s->dyn[i]) {
            pf_optim_step o = pf_optim_prepare(&s->spec.optimizer, (int64_t)s->stats.version);
            dyn_update(s, i, grads[i].ids, grads[i].n_rows, grads[i].data, &o);
            s->n_touched[i] = 0;
        } else if (s->table[i] && s->scatter) { /* adam: the whole shard moves */
            size_t width = (size_t)s->info[i].shape[1];
            for (uint32_t j = 0; j < grads[i].n_rows; j++)
                memcpy(s->scatter + (size_t)grads[i].rows[j] * width, grads[i].data + j * width,
                       width * sizeof *s->scatter);
            update_whole(s, i, grads[i].n_rows, grads[i].rows);
        } else if (s->table[i]) {
            size_t width = (size_t)s->info[i].shape[1];
            float *w = s->values + s->local_off[i];
            size_t bad =
                pf_optim_apply_rows(&s->spec.optimizer, s->be, (int64_t)s->stats.version, width,
                                    grads[i].n_rows, grads[i].rows, grads[i].data, w, slots, check);
            if (bad < grads[i].n_rows)
                row_checked(s, i, (size_t)grads[i].rows[bad] * width);
            if (keep) {
                memcpy(s->merged + at, grads[i].rows, grads[i].n_rows * sizeof *s->merged);
                s->touched[i] = s->merged + at;
                s->n_touched[i] = grads[i].n_rows;
                at += grads[i].n_rows;
            }
        } else {
            pf_optim_apply(&s->spec.optimizer, s->be, (int64_t)s->stats.version, s->info[i].count,
                           grads[i].data, s->values + s->local_off[i], slots);
        }
    }
    s->touched_valid = s->has_tables && keep && !s->scatter;
    s->stats.version++;
    s->stats.pushes_applied++;
    return PS_PUSH_APPLIED;
}

ps_push_result ps_shards_push(ps_shards *s, int task, uint64_t incarnation, uint64_t seq,
                              uint64_t step, const float *const *grads) {
    for (int i = 0; i < s->n; i++)
        s->whole[i] = (ps_grad){grads[i], NULL, 0, NULL};
    ps_push_result r = ps_shards_push_grads(s, task, incarnation, seq, step, s->whole);
    return r;
}

void ps_shards_restore(ps_shards *s, uint64_t version, const float *const *values,
                       const float *const *const *slots) {
    for (int i = 0; i < s->n; i++) {
        if (s->dyn[i])
            continue; /* restored by ps_shards_dyn_replace */
        s->be->upload(s->values + s->local_off[i], values[i], s->info[i].count);
        for (int k = 0; k < s->n_slots; k++)
            s->be->upload(s->slots[k] + s->local_off[i], slots[i][k], s->info[i].count);
    }
    memset(s->arrived, 0, PF_MAX_TASKS);
    s->n_arrived = 0;
    s->touched_valid = 0;
    s->bad_shard = -1;
    s->stats.version = version;
}

/* The first non-finite element of the n floats at v (backend memory), or n. */
static size_t first_nonfinite(const ps_shards *s, const float *v, size_t n) {
    if (s->be->host_memory) /* read where they are */
        return pf_first_nonfinite(v, n);
    float chunk[4096]; /* values may be backend memory: checked a piece at a time */
    for (size_t done = 0; done < n; done += sizeof chunk / sizeof *chunk) {
        size_t k =
            n - done < sizeof chunk / sizeof *chunk ? n - done : sizeof chunk / sizeof *chunk;
        s->be->download(chunk, v + done, k);
        size_t bad = pf_first_nonfinite(chunk, k);
        if (bad < k)
            return done + bad;
    }
    return n;
}

/* The first non-finite element of dynamic table t's rows, walked in their order (the j-th
 * row's element k is j * width + k), or -1 when all are finite. */
static int64_t dyn_first_nonfinite(const pf_dyn_table *t) {
    size_t width = (size_t)pf_dyn_config_get(t)->dim;
    int64_t cursor = 0, j = 0;
    for (pf_dyn_row row; pf_dyn_next(t, &cursor, &row); j++) {
        size_t bad = pf_first_nonfinite(row.values, width);
        if (bad < width)
            return j * (int64_t)width + (int64_t)bad;
    }
    return -1;
}

int ps_shards_find_nonfinite(const ps_shards *s, size_t *elem) {
    for (int i = 0; i < s->n; i++) {
        const float *v = s->values + s->local_off[i];
        if (s->dyn[i]) { /* checked as updated, read whole after a restore */
            int64_t bad = s->bad_shard == i  ? (int64_t)s->bad_elem
                          : s->touched_valid ? -1
                                             : dyn_first_nonfinite(s->dyn[i]);
            if (bad >= 0) {
                *elem = (size_t)bad;
                return i;
            }
            continue;
        }
        if (s->table[i] && s->touched_valid && s->be->host_memory) { /* checked as updated */
            if (s->bad_shard == i) {
                *elem = s->bad_elem;
                return i;
            }
            continue;
        }
        if (s->table[i] && s->touched_valid) { /* only the rows the last update changed */
            size_t width = (size_t)s->info[i].shape[1];
            for (uint32_t j = 0; j < s->n_touched[i]; j++) {
                size_t at = (size_t)s->touched[i][j] * width;
                size_t bad = first_nonfinite(s, v + at, width);
                if (bad < width) {
                    *elem = at + bad;
                    return i;
                }
            }
            continue;
        }
        size_t bad = first_nonfinite(s, v, s->info[i].count);
        if (bad < s->info[i].count) {
            *elem = bad;
            return i;
        }
    }
    return -1;
}

void ps_shards_set_learning_rate(ps_shards *s, double lr) {
    if (lr > 0)
        s->spec.optimizer.learning_rate = lr;
}
