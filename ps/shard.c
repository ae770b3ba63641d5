/* shard.c - a ps task's shards, version and gradient aggregation (see shard.h).
 *
 * DESIGN: the task's shards are laid out back to back in one local vector, so values, each
 * optimizer slot and each worker's pending gradient are single buffers of n_local floats
 * and one pf_optim_apply call updates everything (optimizers are elementwise). A sync step
 * keeps one gradient buffer per worker; when enough have arrived they are summed in
 * task-index order, scaled by 1/replicas_to_aggregate and applied.
 */
#include "ps/shard.h"

#include <string.h>

#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/optim.h"

typedef struct task_seq {
    uint64_t incarnation;
    uint64_t last_seq;
    int seen;
} task_seq;

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
    int n_tasks;            /* training tasks that push */
    float **pending;        /* sync: n_tasks gradient buffers, allocated on first use */
    unsigned char *arrived; /* sync: which tasks pushed for step == version */
    int n_arrived;
    float *sum;     /* sync: the averaged gradient */
    task_seq *seqs; /* n_tasks entries */
    ps_stats stats;
};

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
    s->n_slots = pf_optim_num_slots(&spec->optimizer);
    int total = placement->n_shards;
    int *idx = pf_mallocarray((size_t)total, sizeof *idx);
    float *init = pf_mallocarray(pf_model_num_params(&spec->model), sizeof *init);
    if (!idx || !init)
        goto nomem;
    s->n = pf_placement_shards_of(placement, ps_task, idx, total);
    s->info = pf_mallocarray((size_t)(s->n ? s->n : 1), sizeof *s->info);
    s->local_off = pf_mallocarray((size_t)(s->n ? s->n : 1), sizeof *s->local_off);
    s->seqs = pf_calloc((size_t)s->n_tasks, sizeof *s->seqs);
    s->arrived = pf_calloc((size_t)s->n_tasks, 1);
    s->pending = pf_calloc((size_t)s->n_tasks, sizeof *s->pending);
    if (!s->info || !s->local_off || !s->seqs || !s->arrived || !s->pending)
        goto nomem;
    for (int i = 0; i < s->n; i++) {
        s->info[i] = placement->shards[idx[i]];
        s->local_off[i] = s->n_local;
        s->n_local += s->info[i].count;
    }
    size_t bytes = (s->n_local ? s->n_local : 1) * sizeof(float);
    s->values = be->alloc(bytes);
    s->sum = be->alloc(bytes);
    if (!s->values || !s->sum)
        goto nomem;
    for (int k = 0; k < s->n_slots; k++) {
        if (!(s->slots[k] = be->alloc(bytes)))
            goto nomem;
        pf_optim_slot_init(&spec->optimizer, be, k, s->slots[k], s->n_local);
    }
    /* Sync mode keeps one pending gradient per training task: allocated now so that a
     * running job never fails an allocation. */
    for (int t = 0; spec->training.mode == PF_MODE_SYNC && t < s->n_tasks; t++)
        if (!(s->pending[t] = be->alloc(bytes)))
            goto nomem;
    /* The same initial values a single process starts from, cut to this task's shards. */
    pf_model_init_params(&spec->model, spec->training.seed, init);
    for (int i = 0; i < s->n; i++)
        be->upload(s->values + s->local_off[i], init + s->info[i].offset, s->info[i].count);
    pf_free(idx);
    pf_free(init);
    *out = s;
    return PF_OK;
nomem:
    pf_free(idx);
    pf_free(init);
    ps_shards_destroy(s);
    return PF_ERR_NOMEM;
}

void ps_shards_destroy(ps_shards *s) {
    if (!s)
        return;
    if (s->values)
        s->be->free(s->values);
    if (s->sum)
        s->be->free(s->sum);
    for (int k = 0; k < PF_OPTIM_MAX_SLOTS; k++)
        if (s->slots[k])
            s->be->free(s->slots[k]);
    for (int t = 0; s->pending && t < s->n_tasks; t++)
        if (s->pending[t])
            s->be->free(s->pending[t]);
    pf_free(s->pending);
    pf_free(s->arrived);
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

static ps_push_result push_sync(ps_shards *s, int task, uint64_t step, const float *const *grads) {
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
    for (int i = 0; i < s->n; i++)
        s->be->copy(s->pending[task] + s->local_off[i], grads[i], s->info[i].count);
    s->arrived[task] = 1;
    s->n_arrived++;
    s->stats.pushes_applied++;
    if (s->n_arrived < s->spec.training.replicas_to_aggregate)
        return PS_PUSH_ACCEPTED;

    /* Average in task-index order so the result is independent of arrival order. */
    int first = 1;
    for (int t = 0; t < s->n_tasks; t++) {
        if (!s->arrived[t])
            continue;
        if (first)
            s->be->copy(s->sum, s->pending[t], s->n_local);
        else
            s->be->axpy(s->n_local, 1.0f, s->pending[t], s->sum);
        first = 0;
        s->arrived[t] = 0;
    }
    s->be->scale(s->n_local, 1.0f / (float)s->n_arrived, s->sum);
    s->n_arrived = 0;
    apply(s, s->sum);
    return PS_PUSH_APPLIED;
}

ps_push_result ps_shards_push(ps_shards *s, int task, uint64_t incarnation, uint64_t seq,
                              uint64_t step, const float *const *grads) {
    int r = check_sequence(s, task, incarnation, seq);
    if (r >= 0)
        return (ps_push_result)r;
    if (s->spec.training.mode == PF_MODE_SYNC)
        return push_sync(s, task, step, grads);
    /* Async: apply each shard's gradient in place, one update of the whole task. */
    for (int i = 0; i < s->n; i++)
        pf_optim_apply(
            &s->spec.optimizer, s->be, (int64_t)s->stats.version, s->info[i].count, grads[i],
            s->values + s->local_off[i],
            (float *const[PF_OPTIM_MAX_SLOTS]){s->slots[0] ? s->slots[0] + s->local_off[i] : NULL,
                                               s->slots[1] ? s->slots[1] + s->local_off[i] : NULL});
    s->stats.version++;
    s->stats.pushes_applied++;
    return PS_PUSH_APPLIED;
}

void ps_shards_restore(ps_shards *s, uint64_t version, const float *const *values,
                       const float *const *const *slots) {
    for (int i = 0; i < s->n; i++) {
        s->be->upload(s->values + s->local_off[i], values[i], s->info[i].count);
        for (int k = 0; k < s->n_slots; k++)
            s->be->upload(s->slots[k] + s->local_off[i], slots[i][k], s->info[i].count);
    }
    memset(s->arrived, 0, (size_t)s->n_tasks);
    s->n_arrived = 0;
    s->stats.version = version;
}

int ps_shards_find_nonfinite(const ps_shards *s, size_t *elem) {
    float chunk[4096]; /* values may be backend memory: checked a piece at a time */
    for (int i = 0; i < s->n; i++)
        for (size_t done = 0; done < s->info[i].count; done += sizeof chunk / sizeof *chunk) {
            size_t n = s->info[i].count - done;
            n = n < sizeof chunk / sizeof *chunk ? n : sizeof chunk / sizeof *chunk;
            s->be->download(chunk, s->values + s->local_off[i] + done, n);
            size_t bad = pf_first_nonfinite(chunk, n);
            if (bad < n) {
                *elem = done + bad;
                return i;
            }
        }
    return -1;
}
