/* split_queue.c - the work queue of input splits of data.splits "dynamic" (split_queue.h).
 *
 * DESIGN: each split has a state (pending, leased, done) and, while leased, an owner. The
 * epoch's permutation is drawn once when the epoch begins into `order`; a cursor walks it
 * and hands out the untouched splits, skipping the ones already done (after a restore) or
 * leased. A split is only ever leased by the cursor or from the FIFO of given-back splits,
 * and it enters that FIFO only after a lease, so every leased split lies in order[0 ..
 * cursor) and no split is in the FIFO twice: the FIFO needs n entries at most, and a release
 * finds a task's splits by scanning the order up to the cursor, stopping once it has found as
 * many as the task holds. An epoch ends when its done count reaches n; drawing the next order
 * costs O(n) once per n leases.
 */
#include "ps/split_queue.h"

#include <assert.h>
#include <string.h>

#include "ps/shard.h"
#include "psflow/mem.h"
#include "psflow/rng.h"

_Static_assert(PF_MAX_TASKS <= UINT16_MAX, "a split's owner is a uint16_t");

/* The pf_rng stream of the epochs' orders (pf_stream_split_order uses its own streams). */
#define ORDER_STREAM 4000u
#define EPOCH_MIX    0x9e3779b97f4a7c15ULL

enum { PENDING = 0, LEASED = 1, DONE = 2 };

/* The encoded header: magic, version, epoch, finished, n_splits, epochs, max_tasks, done. */
#define MAGIC       "PFSQ"
#define VERSION     1u
#define HEADER_SIZE 40u

struct ps_split_queue {
    uint32_t n;
    int64_t epochs; /* 0: endless */
    uint64_t seed;
    int tasks;

    uint64_t epoch;
    int finished;
    uint8_t *state;  /* [n] PENDING, LEASED or DONE in the current epoch */
    uint16_t *owner; /* [n] the task a LEASED split is leased to */
    uint32_t *order; /* [n] the current epoch's permutation */
    uint32_t cursor; /* order[0 .. cursor) have been leased (or were done) this epoch */
    uint32_t *fifo;  /* [n] ring of given-back splits, leased before the cursor's */
    uint32_t fifo_head, fifo_len;
    uint32_t pending, leased, done;

    uint32_t *task_done; /* [tasks] splits done in the current epoch */
    uint32_t *task_last; /* [tasks] splits done in the last epoch that ended */
    uint32_t *task_held; /* [tasks] splits leased now */

    uint64_t granted, completed, refused, released;
};

/* Draws epoch's permutation of 0 .. n-1 into order (Fisher-Yates, as pf_stream_split_order). */
static void draw_order(uint32_t *order, uint32_t n, uint64_t seed, uint64_t epoch) {
    pf_rng rng;
    pf_rng_init(&rng, seed ^ (epoch * EPOCH_MIX), ORDER_STREAM);
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)pf_rng_below(&rng, (uint64_t)i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* Every split pending in the current epoch's order, no leases, no given-back splits. */
static void begin_epoch(ps_split_queue *q) {
    memset(q->state, PENDING, q->n);
    draw_order(q->order, q->n, q->seed, q->epoch);
    q->cursor = 0;
    q->fifo_head = q->fifo_len = 0;
    q->pending = q->n;
    q->leased = q->done = 0;
    memset(q->task_held, 0, (size_t)q->tasks * sizeof *q->task_held);
}

pf_status ps_split_queue_create(uint32_t n_splits, int64_t epochs, uint64_t seed, int max_tasks,
                                ps_split_queue **out, pf_error *err) {
    *out = NULL;
    if (n_splits < 1 || n_splits > PS_SPLIT_QUEUE_MAX_SPLITS)
        return pf_error_set(err, PF_ERR_INVALID, "", "split queue: %u splits (1 .. %u)", n_splits,
                            PS_SPLIT_QUEUE_MAX_SPLITS);
    if (epochs < 0)
        return pf_error_set(err, PF_ERR_INVALID, "", "split queue: %lld epochs (>= 0)",
                            (long long)epochs);
    if (max_tasks < 1 || max_tasks > PF_MAX_TASKS)
        return pf_error_set(err, PF_ERR_INVALID, "", "split queue: %d tasks (1 .. %d)", max_tasks,
                            PF_MAX_TASKS);
    ps_split_queue *q = pf_calloc(1, sizeof *q);
    if (!q)
        return pf_error_set(err, PF_ERR_NOMEM, "", "split queue: out of memory");
    q->n = n_splits;
    q->epochs = epochs;
    q->seed = seed;
    q->tasks = max_tasks;
    q->state = pf_malloc(n_splits);
    q->owner = pf_mallocarray(n_splits, sizeof *q->owner);
    q->order = pf_mallocarray(n_splits, sizeof *q->order);
    q->fifo = pf_mallocarray(n_splits, sizeof *q->fifo);
    q->task_done = pf_calloc((size_t)max_tasks, sizeof *q->task_done);
    q->task_last = pf_calloc((size_t)max_tasks, sizeof *q->task_last);
    q->task_held = pf_calloc((size_t)max_tasks, sizeof *q->task_held);
    if (!q->state || !q->owner || !q->order || !q->fifo || !q->task_done || !q->task_last ||
        !q->task_held) {
        ps_split_queue_destroy(q);
        return pf_error_set(err, PF_ERR_NOMEM, "", "split queue: out of memory for %u splits",
                            n_splits);
    }
    begin_epoch(q);
    *out = q;
    return PF_OK;
}

void ps_split_queue_destroy(ps_split_queue *q) {
    if (!q)
        return;
    pf_free(q->state);
    pf_free(q->owner);
    pf_free(q->order);
    pf_free(q->fifo);
    pf_free(q->task_done);
    pf_free(q->task_last);
    pf_free(q->task_held);
    pf_free(q);
}

/* The last split of the epoch is done: keeps the counts, moves to the next epoch or
 * finishes. */
static void end_epoch(ps_split_queue *q) {
    memcpy(q->task_last, q->task_done, (size_t)q->tasks * sizeof *q->task_done);
    memset(q->task_done, 0, (size_t)q->tasks * sizeof *q->task_done);
    q->epoch++;
    if (q->epochs > 0 && q->epoch >= (uint64_t)q->epochs) {
        q->finished = 1;
        q->pending = q->leased = q->done = 0;
        q->cursor = q->fifo_head = q->fifo_len = 0;
        return;
    }
    begin_epoch(q);
}

/* Records one done entry of `task`; whether it was accepted. */
static int record_done(ps_split_queue *q, int task, uint64_t epoch, uint32_t split) {
    if (q->finished || epoch != q->epoch || split >= q->n || q->state[split] != LEASED ||
        q->owner[split] != task)
        return 0;
    q->state[split] = DONE;
    q->leased--;
    q->done++;
    q->task_held[task]--;
    q->task_done[task]++;
    q->completed++;
    return 1;
}

/* The next pending split, from the given-back ones first; whether there was one. */
static int next_pending(ps_split_queue *q, uint32_t *split) {
    while (q->fifo_len > 0) {
        uint32_t s = q->fifo[q->fifo_head];
        q->fifo_head = q->fifo_head + 1 == q->n ? 0 : q->fifo_head + 1;
        q->fifo_len--;
        if (q->state[s] == PENDING) {
            *split = s;
            return 1;
        }
    }
    while (q->cursor < q->n) {
        uint32_t s = q->order[q->cursor++];
        if (q->state[s] == PENDING) {
            *split = s;
            return 1;
        }
    }
    return 0;
}

ps_lease_result ps_split_queue_lease(ps_split_queue *q, int task, uint64_t epoch,
                                     const uint32_t *done, uint32_t n_done, int want) {
    ps_lease_result r = {.state = PS_LEASE_WAIT, .epoch = q->epoch};
    if (task < 0 || task >= q->tasks) {
        r.refused = n_done;
        q->refused += n_done;
        return r;
    }
    for (uint32_t i = 0; i < n_done; i++) {
        if (!record_done(q, task, epoch, done[i])) {
            r.refused++;
            continue;
        }
        r.accepted++;
        if (q->done == q->n) {
            end_epoch(q);
            r.epoch_ended = 1;
        }
    }
    q->refused += r.refused;
    r.epoch = q->epoch;
    if (q->finished) {
        r.state = PS_LEASE_END;
        return r;
    }
    uint32_t s;
    if (want && next_pending(q, &s)) {
        q->state[s] = LEASED;
        q->owner[s] = (uint16_t)task;
        q->pending--;
        q->leased++;
        q->task_held[task]++;
        q->granted++;
        r.state = PS_LEASE_GRANTED;
        r.split = s;
    }
    return r;
}

uint32_t ps_split_queue_release(ps_split_queue *q, int task) {
    if (task < 0 || task >= q->tasks || q->finished)
        return 0;
    uint32_t want = q->task_held[task], found = 0;
    for (uint32_t i = 0; i < q->cursor && found < want; i++) {
        uint32_t s = q->order[i];
        if (q->state[s] != LEASED || q->owner[s] != task)
            continue;
        q->state[s] = PENDING;
        uint32_t tail = q->fifo_head + q->fifo_len;
        q->fifo[tail >= q->n ? tail - q->n : tail] = s;
        q->fifo_len++;
        found++;
    }
    assert(found == want); /* every leased split lies before the cursor */
    q->task_held[task] = 0;
    q->leased -= found;
    q->pending += found;
    q->released += found;
    return found;
}

uint32_t ps_split_queue_splits(const ps_split_queue *q) {
    return q->n;
}

ps_split_queue_stats ps_split_queue_stats_get(const ps_split_queue *q) {
    return (ps_split_queue_stats){.epoch = q->epoch,
                                  .finished = q->finished,
                                  .pending = q->pending,
                                  .leased = q->leased,
                                  .done = q->done,
                                  .granted = q->granted,
                                  .completed = q->completed,
                                  .refused = q->refused,
                                  .released = q->released};
}

uint32_t ps_split_queue_task_done(const ps_split_queue *q, int task) {
    return task >= 0 && task < q->tasks ? q->task_done[task] : 0;
}

uint32_t ps_split_queue_last_epoch(const ps_split_queue *q, int task) {
    return task >= 0 && task < q->tasks ? q->task_last[task] : 0;
}

/* --- checkpoint --------------------------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Bytes of an encoding of n splits and `tasks` tasks: header, done bitmap, two counts per
 * task. */
static size_t encoded_size(uint32_t n, uint32_t tasks) {
    return HEADER_SIZE + ((size_t)n + 7) / 8 + (size_t)tasks * 8;
}

size_t ps_split_queue_encode(const ps_split_queue *q, uint8_t *buf, size_t cap) {
    size_t need = encoded_size(q->n, (uint32_t)q->tasks);
    if (!buf || cap < need)
        return need;
    memcpy(buf, MAGIC, 4);
    put_u32(buf + 4, VERSION);
    put_u64(buf + 8, q->epoch);
    put_u32(buf + 16, (uint32_t)q->finished);
    put_u32(buf + 20, q->n);
    put_u64(buf + 24, (uint64_t)q->epochs);
    put_u32(buf + 32, (uint32_t)q->tasks);
    put_u32(buf + 36, q->done);
    uint8_t *bits = buf + HEADER_SIZE;
    memset(bits, 0, ((size_t)q->n + 7) / 8);
    for (uint32_t s = 0; s < q->n && !q->finished; s++)
        if (q->state[s] == DONE)
            bits[s / 8] |= (uint8_t)(1u << (s % 8));
    uint8_t *counts = bits + ((size_t)q->n + 7) / 8;
    for (int t = 0; t < q->tasks; t++) {
        put_u32(counts + 8 * (size_t)t, q->task_done[t]);
        put_u32(counts + 8 * (size_t)t + 4, q->task_last[t]);
    }
    return need;
}

/* Checks the counts of an encoding whose header checked out: the bitmap against `done`,
 * the tasks' counts against it and against n. */
static pf_status check_counts(const ps_split_queue *q, const uint8_t *buf, uint32_t tasks,
                              uint64_t epoch, int finished, uint32_t done, pf_error *err) {
    const uint8_t *bits = buf + HEADER_SIZE;
    size_t n_bytes = ((size_t)q->n + 7) / 8;
    uint64_t set = 0;
    for (size_t i = 0; i < n_bytes; i++)
        for (uint8_t b = bits[i]; b; b &= (uint8_t)(b - 1))
            set++;
    if (q->n % 8 && bits[n_bytes - 1] >> (q->n % 8))
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: bits past split %u", q->n - 1);
    if (set != done)
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: %llu splits marked done, %u said",
                            (unsigned long long)set, done);
    if (finished ? done != 0 : done >= q->n)
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: %u of %u splits done%s", done,
                            q->n, finished ? " in a finished queue" : ", yet the epoch goes on");
    const uint8_t *counts = bits + n_bytes;
    uint64_t sum_done = 0, sum_last = 0;
    for (uint32_t t = 0; t < tasks; t++) {
        sum_done += get_u32(counts + 8 * (size_t)t);
        sum_last += get_u32(counts + 8 * (size_t)t + 4);
    }
    if (sum_done != done)
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: tasks did %llu splits, %u done",
                            (unsigned long long)sum_done, done);
    if (sum_last != (epoch > 0 ? q->n : 0))
        return pf_error_set(err, PF_ERR_FORMAT, "",
                            "split queue: tasks did %llu splits in the last epoch, of %u",
                            (unsigned long long)sum_last, epoch > 0 ? q->n : 0);
    return PF_OK;
}

pf_status ps_split_queue_decode(ps_split_queue *q, const uint8_t *buf, size_t len, pf_error *err) {
    if (len < HEADER_SIZE || memcmp(buf, MAGIC, 4) != 0)
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: no \"%s\" header", MAGIC);
    uint32_t version = get_u32(buf + 4);
    if (version != VERSION)
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: version %u (this ps reads %u)",
                            version, VERSION);
    uint64_t epoch = get_u64(buf + 8);
    uint32_t finished = get_u32(buf + 16), n = get_u32(buf + 20), tasks = get_u32(buf + 32);
    int64_t epochs = (int64_t)get_u64(buf + 24);
    uint32_t done = get_u32(buf + 36);
    if (n != q->n)
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: %u splits saved, %u now", n,
                            q->n);
    if (epochs != q->epochs)
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: %lld epochs saved, %lld now",
                            (long long)epochs, (long long)q->epochs);
    if (tasks < 1 || tasks > PF_MAX_TASKS)
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: %u tasks (1 .. %d)", tasks,
                            PF_MAX_TASKS);
    if (len != encoded_size(n, tasks))
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: %zu bytes, %zu expected", len,
                            encoded_size(n, tasks));
    if (finished > 1 || (finished && (epochs == 0 || epoch != (uint64_t)epochs)) ||
        (!finished && epochs > 0 && epoch >= (uint64_t)epochs))
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: epoch %llu of %lld, finished %u",
                            (unsigned long long)epoch, (long long)epochs, finished);
    pf_status st = check_counts(q, buf, tasks, epoch, (int)finished, done, err);
    if (st != PF_OK)
        return st;

    q->epoch = epoch;
    q->finished = (int)finished;
    if (finished) {
        q->pending = q->leased = q->done = 0;
        q->cursor = q->fifo_head = q->fifo_len = 0;
        memset(q->task_held, 0, (size_t)q->tasks * sizeof *q->task_held);
    } else {
        begin_epoch(q);
        const uint8_t *bits = buf + HEADER_SIZE;
        for (uint32_t s = 0; s < n; s++)
            if (bits[s / 8] >> (s % 8) & 1)
                q->state[s] = DONE;
        q->done = done;
        q->pending = n - done;
    }
    const uint8_t *counts = buf + HEADER_SIZE + ((size_t)n + 7) / 8;
    for (int t = 0; t < q->tasks; t++) {
        int saved = (uint32_t)t < tasks;
        q->task_done[t] = saved ? get_u32(counts + 8 * (size_t)t) : 0;
        q->task_last[t] = saved ? get_u32(counts + 8 * (size_t)t + 4) : 0;
    }
    return PF_OK;
}

pf_status ps_split_queue_from_bytes(const uint8_t *buf, size_t len, int64_t epochs, uint64_t seed,
                                    int max_tasks, ps_split_queue **out, pf_error *err) {
    *out = NULL;
    if (len < HEADER_SIZE || memcmp(buf, MAGIC, 4) != 0)
        return pf_error_set(err, PF_ERR_FORMAT, "", "split queue: no \"%s\" header", MAGIC);
    ps_split_queue *q = NULL;
    pf_status st = ps_split_queue_create(get_u32(buf + 20), epochs, seed, max_tasks, &q, err);
    if (st == PF_OK && (st = ps_split_queue_decode(q, buf, len, err)) != PF_OK) {
        ps_split_queue_destroy(q);
        q = NULL;
    }
    *out = q;
    return st;
}
