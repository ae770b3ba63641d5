/* shard.c - a ps task's shards, version and gradient aggregation (see shard.h).
 *
 * DESIGN: the task's shards are laid out back to back in one local vector, so values, each
 * optimizer slot and each worker's pending gradient are single buffers of n_local floats
 * and one pf_optim_apply call updates everything (optimizers are elementwise). A sync step
 * keeps one gradient buffer per worker; when enough have arrived they are summed in
 * task-index order into the first one, scaled by 1/replicas_to_aggregate and applied.
 * Nothing here is the size of the whole model: initial values are drawn for the task's
 * own shards (footprint.h has the bound this memory follows).
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
    int n_tasks;            /* training tasks that push: the current membership */
    int aggregate;          /* sync: replicas_to_aggregate of the current membership */
    float **pending;        /* sync: a gradient buffer per member (PF_MAX_TASKS slots) */
    unsigned char *arrived; /* sync: which tasks pushed for step == version */
    int n_arrived;
    unsigned char *joined; /* sync: members counted in a step (a new one from its first push) */
    int n_joined;
    task_seq *seqs; /* PF_MAX_TASKS entries */
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
    s->aggregate = spec->training.replicas_to_aggregate;
    s->n_joined = s->n_tasks;
    s->n_slots = pf_optim_num_slots(&spec->optimizer);
    int total = placement->n_shards;
    size_t *offsets = NULL, *counts = NULL;
    float **outs = NULL;
    int *idx = pf_mallocarray((size_t)total, sizeof *idx);
    if (!idx)
        goto nomem;
    s->n = pf_placement_shards_of(placement, ps_task, idx, total);
    s->info = pf_mallocarray((size_t)(s->n ? s->n : 1), sizeof *s->info);
    s->local_off = pf_mallocarray((size_t)(s->n ? s->n : 1), sizeof *s->local_off);
    offsets = pf_mallocarray((size_t)(s->n ? s->n : 1), sizeof *offsets);
    counts = pf_mallocarray((size_t)(s->n ? s->n : 1), sizeof *counts);
    outs = pf_mallocarray((size_t)(s->n ? s->n : 1), sizeof *outs);
    s->seqs = pf_calloc(PF_MAX_TASKS, sizeof *s->seqs);
    s->arrived = pf_calloc(PF_MAX_TASKS, 1);
    s->joined = pf_calloc(PF_MAX_TASKS, 1);
    s->pending = pf_calloc(PF_MAX_TASKS, sizeof *s->pending);
    if (s->n_tasks > PF_MAX_TASKS || !s->info || !s->local_off || !s->seqs || !s->arrived ||
        !s->joined || !s->pending || !offsets || !counts || !outs)
        goto nomem;
    for (int i = 0; i < s->n; i++) {
        s->info[i] = placement->shards[idx[i]];
        s->local_off[i] = s->n_local;
        s->n_local += s->info[i].count;
    }
    size_t bytes = (s->n_local ? s->n_local : 1) * sizeof(float);
    s->values = be->alloc(bytes);
    if (!s->values)
        goto nomem;
    for (int k = 0; k < s->n_slots; k++) {
        if (!(s->slots[k] = be->alloc(bytes)))
            goto nomem;
        pf_optim_slot_init(&spec->optimizer, be, k, s->slots[k], s->n_local);
    }
    /* Sync mode keeps one pending gradient per training task, averaged in place into the
     * first (no separate sum): allocated now so that a running job never fails an
     * allocation. Async mode applies each push from the message itself. */
    for (int t = 0; spec->training.mode == PF_MODE_SYNC && t < s->n_tasks; t++)
        if (!(s->pending[t] = be->alloc(bytes)))
            goto nomem;
    memset(s->joined, 1, (size_t)s->n_tasks);
    /* The same initial values a single process starts from, drawn for this task's shards
     * only (never the whole model): straight into the values when the backend's memory is
     * the host's, else a shard at a time through a host buffer. Shards come in placement
     * order, which is the model's. */
    int host = strcmp(be->name, "cuda") != 0; /* the CPU backends' buffers are host memory */
    for (int i = 0; i < s->n; i++) {
        offsets[i] = s->info[i].offset;
        counts[i] = s->info[i].count;
        outs[i] = s->values + s->local_off[i];
    }
    if (host) {
        pf_model_init_ranges(&spec->model, spec->training.seed, s->n, offsets, counts, outs);
    } else {
        for (int i = 0; i < s->n; i++) {
            float *init = pf_mallocarray(counts[i] ? counts[i] : 1, sizeof *init);
            if (!init)
                goto nomem;
            pf_model_init_ranges(&spec->model, spec->training.seed, 1, &offsets[i], &counts[i],
                                 &init);
            be->upload(outs[i], init, counts[i]);
            pf_free(init);
        }
    }
    pf_free(idx);
    pf_free(offsets);
    pf_free(counts);
    pf_free(outs);
    *out = s;
    return PF_OK;
nomem:
    pf_free(idx);
    pf_free(offsets);
    pf_free(counts);
    pf_free(outs);
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

/* Averages the arrived gradients and applies them: one sync step. */
static void aggregate_apply(ps_shards *s) {
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
            s->be->axpy(s->n_local, 1.0f, s->pending[t], sum);
        s->arrived[t] = 0;
    }
    s->be->scale(s->n_local, 1.0f / (float)s->n_arrived, sum);
    s->n_arrived = 0;
    apply(s, sum);
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
    if (!s->joined[task]) { /* a new member: counted from this step on */
        s->joined[task] = 1;
        s->n_joined++;
    }
    s->stats.pushes_applied++;
    if (s->n_arrived < needed(s))
        return PS_PUSH_ACCEPTED;
    aggregate_apply(s);
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
    size_t bytes = (s->n_local ? s->n_local : 1) * sizeof(float);
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
    if (sync && s->n_arrived > 0 && s->n_arrived >= needed(s)) {
        aggregate_apply(s); /* the step waited only for members that left */
        *applied = 1;
    }
    return PF_OK;
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
    memset(s->arrived, 0, PF_MAX_TASKS);
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

void ps_shards_set_learning_rate(ps_shards *s, double lr) {
    if (lr > 0)
        s->spec.optimizer.learning_rate = lr;
}
