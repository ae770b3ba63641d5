/* dyn_table.c - an embedding table keyed by 64-bit ids (dyn_table.h).
 *
 * DESIGN: a row is an index r into arrays of its own fields (id, latest update, links in the
 * order: one struct, one cache line), its values and its slots, handed out from a free list
 * and the high-water mark, so evicting and admitting rows moves no other row; a batch makes
 * room for all its new rows first, so no array moves during it either. Only
 * pf_dyn_evict_stale moves rows, when it leaves the arrays at most a quarter full (shrink). The
 * hash maps an id to r by linear probing over a power-of-two array, and deletes by shifting the
 * probe run back (no tombstones, so a long run of admissions and evictions does not slow lookups).
 * The order is a doubly linked list of row indices, most recently updated at its head: an update
 * moves its row to the head in O(1), eviction at max_rows takes the tail, and pf_dyn_evict_stale
 * walks from the tail while rows are too old. The sketch counts updates of ids without a row, with
 * conservative update (only the smallest counters grow), so an estimate is never below the true
 * count and collisions inflate it as little as a count-min sketch allows.
 */
#include "psflow/dyn_table.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/rng.h"

#define NONE          UINT32_MAX /* no row: an empty hash slot, the end of the order */
#define DEAD          INT64_MIN  /* the last step of a row on the free list */
#define SKETCH_DEPTH  4
#define FIRST_ROWS    64        /* rows allocated at first, doubled as needed */
#define AHEAD         8         /* a batch works this many ids behind the one it asks memory for */
#define RING          32        /* > 2 * AHEAD, a power of two */
#define PREFETCH      256       /* bytes of a row asked for ahead: its first cache lines */
#define AGE_EVERY     10        /* the sketch's counters halve after AGE_EVERY * width counts */
#define RELEASE_BYTES (4 << 20) /* dead rows weighing less are not worth moving rows for */

/* A hash slot: an id and its row (NONE: empty), both in one cache line. */
typedef struct slot {
    uint64_t id;
    uint32_t row;
} slot;

/* A row's own fields, together: its id, the step of its latest update (DEAD: free) and its
 * neighbours in the order (newer also links the free list). */
typedef struct meta {
    uint64_t id;
    int64_t last;
    uint32_t newer, older;
} meta;

struct pf_dyn_table {
    pf_dyn_config cfg;
    /* rows: [cap_rows] each; values and slots dim floats a row */
    int64_t cap_rows, high; /* allocated, and handed out at least once */
    meta *meta;
    float *values;
    float *slots[PF_DYN_MAX_SLOTS];
    uint32_t head, tail, free_rows; /* most recent, least recent, first free (NONE: none) */
    slot *hash;                     /* [cap_hash], a power of two */
    uint64_t cap_hash;
    /* the sketch: SKETCH_DEPTH rows of sketch_width counters (a power of two) */
    uint8_t *sketch;
    uint64_t sketch_width;
    uint64_t sketch_counted; /* counts since the counters last halved */
    uint64_t draws;          /* probability draws made: the draw of a saturated count */
    int64_t reserved;        /* the new rows the latest batch made room for */
    pf_dyn_stats stats;
};

/* splitmix64's finaliser: every bit of the id moves every bit of the hash. */
static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Whether admission counts updates: for min_count, and for probability, whose draws are
 * one per (id, count) so that an id refused once may be admitted later. */
static bool counts(const pf_dyn_config *cfg) {
    return cfg->min_count > 1 || cfg->probability < 1;
}

static uint64_t sketch_width(const pf_dyn_config *cfg) {
    if (!counts(cfg))
        return 0;
    uint64_t w = 64;
    while (w * 2 * SKETCH_DEPTH <= cfg->sketch_bytes)
        w *= 2;
    return w;
}

pf_status pf_dyn_config_check(const pf_dyn_config *cfg, char *why, size_t cap) {
    const char *bad = NULL;
    if (cfg->dim < 1 || cfg->dim > (1 << 20))
        bad = "dim: 1 to 1048576 floats a row";
    else if (cfg->slots < 0 || cfg->slots > PF_DYN_MAX_SLOTS)
        bad = "slots: 0 to 2 optimizer slot rows a row";
    else if (cfg->max_rows < 1 || cfg->max_rows >= PF_DYN_MAX_ROWS)
        bad = "max_rows: 1 to 2147483647";
    else if (cfg->min_count < 0 || cfg->min_count > PF_DYN_MAX_MIN_COUNT)
        bad = "min_count: 0 to 255";
    else if (!(cfg->probability > 0 && cfg->probability <= 1))
        bad = "probability: above 0, at most 1";
    else if (cfg->steps_to_live < 0)
        bad = "steps_to_live: 0 (never) or more";
    else if (counts(cfg) && cfg->sketch_bytes < 64 * SKETCH_DEPTH)
        bad = "sketch_bytes: at least 256 when min_count is above 1 or probability below 1";
    else if (counts(cfg) && cfg->sketch_bytes > (1ull << 34))
        bad = "sketch_bytes: at most 16 GiB";
    else if (cfg->init_width < 0 || cfg->init_width > cfg->dim)
        bad = "init_width: 0 to dim";
    else if (!(cfg->init_limit >= 0 && cfg->init_limit < 1e6f))
        bad = "init_limit: 0 to 1e6";
    else if (!(isfinite(cfg->slot_init[0]) && isfinite(cfg->slot_init[1])))
        bad = "slot_init: finite values";
    if (!bad)
        return PF_OK;
    snprintf(why, cap, "%s", bad);
    return PF_ERR_INVALID;
}

/* Bytes a row takes in the row arrays. */
static int64_t row_bytes(const pf_dyn_config *cfg) {
    return (int64_t)sizeof(meta) + (int64_t)(1 + cfg->slots) * cfg->dim * (int64_t)sizeof(float);
}

/* The hash's size for n rows: a power of two at least 4/3 n. */
static uint64_t hash_size(int64_t n) {
    uint64_t size = 64;
    while ((double)size * 0.75 < (double)n)
        size *= 2;
    return size;
}

/* Row array capacity for n rows: FIRST_ROWS doubled, at most max_rows. */
static int64_t rows_size(const pf_dyn_config *cfg, int64_t n) {
    int64_t size = FIRST_ROWS;
    while (size < n)
        size *= 2;
    return size < cfg->max_rows ? size : cfg->max_rows;
}

int64_t pf_dyn_bytes_bound(const pf_dyn_config *cfg) {
    int64_t rows = rows_size(cfg, cfg->max_rows);
    return (int64_t)sizeof(pf_dyn_table) + rows * row_bytes(cfg) +
           (int64_t)hash_size(cfg->max_rows) * (int64_t)sizeof(slot) +
           (int64_t)(SKETCH_DEPTH * sketch_width(cfg));
}

static int64_t bytes_now(const pf_dyn_table *t) {
    return (int64_t)sizeof *t + t->cap_rows * row_bytes(&t->cfg) +
           (int64_t)t->cap_hash * (int64_t)sizeof(slot) + (int64_t)(SKETCH_DEPTH * t->sketch_width);
}

/* Grows (or shrinks) an array to `want` items of `size` bytes; false when out of memory (*p
 * unchanged). */
static bool grow(void **p, int64_t want, size_t size) {
    void *q = pf_realloc(*p, (size_t)want * size);
    if (!q)
        return false;
    *p = q;
    return true;
}

/* Makes room for `want` rows in the row arrays (at most max_rows). */
static bool grow_rows(pf_dyn_table *t, int64_t want) {
    int64_t cap = rows_size(&t->cfg, want);
    size_t row = (size_t)t->cfg.dim * sizeof(float);
    if (cap <= t->cap_rows)
        return true;
    /* each array grows on its own: one that grew and one that did not are both still
     * valid for the rows there are, so a failure part way leaves the table as it was */
    if (!grow((void **)&t->meta, cap, sizeof *t->meta) || !grow((void **)&t->values, cap, row))
        return false;
    for (int k = 0; k < t->cfg.slots; k++)
        if (!grow((void **)&t->slots[k], cap, row))
            return false;
    t->cap_rows = cap;
    return true;
}

/* The hash slot holding id, or the empty slot where it would go. */
static uint64_t probe(const pf_dyn_table *t, uint64_t id) {
    uint64_t mask = t->cap_hash - 1, i = mix(id) & mask;
    while (t->hash[i].row != NONE && t->hash[i].id != id)
        i = (i + 1) & mask;
    return i;
}

/* Rebuilds the hash at `size` slots; false when out of memory (the old one kept). */
static bool rehash(pf_dyn_table *t, uint64_t size) {
    slot *h = pf_mallocarray(size, sizeof *h);
    if (!h)
        return false;
    memset(h, 0xff, size * sizeof *h);
    uint64_t mask = size - 1;
    for (uint64_t s = 0; s < t->cap_hash; s++) {
        if (t->hash[s].row == NONE)
            continue;
        uint64_t i = mix(t->hash[s].id) & mask;
        while (h[i].row != NONE)
            i = (i + 1) & mask;
        h[i] = t->hash[s];
    }
    pf_free(t->hash);
    t->hash = h;
    t->cap_hash = size;
    return true;
}

/* Makes room for n more rows: the row arrays and the hash take them without growing, so
 * that no row moves during a batch. */
static bool reserve(pf_dyn_table *t, size_t n) {
    int64_t most = t->cfg.max_rows, more = n < (size_t)most ? (int64_t)n : most;
    int64_t rows = t->stats.rows + more < most ? t->stats.rows + more : most;
    uint64_t size = t->cap_hash;
    while ((double)rows > (double)size * 0.75)
        size *= 2;
    if (size > t->cap_hash && !rehash(t, size))
        return false;
    t->reserved = more;
    /* new rows come from the free list (high - rows of them) first, then after high */
    return grow_rows(t, t->high > t->stats.rows + more ? t->high : t->stats.rows + more);
}

/* Empties hash slot i, shifting back the entries after it that probed past it. */
static void hash_delete(pf_dyn_table *t, uint64_t i) {
    uint64_t mask = t->cap_hash - 1, j = i;
    for (;;) {
        t->hash[i].row = NONE;
        for (;;) {
            j = (j + 1) & mask;
            if (t->hash[j].row == NONE)
                return;
            uint64_t home = mix(t->hash[j].id) & mask;
            /* j may move to i when its home is not in the run (i, j] */
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
                break;
        }
        t->hash[i] = t->hash[j];
        i = j;
    }
}

static void unlink_row(pf_dyn_table *t, uint32_t r) {
    meta *m = &t->meta[r];
    if (m->newer != NONE)
        t->meta[m->newer].older = m->older;
    else
        t->head = m->older;
    if (m->older != NONE)
        t->meta[m->older].newer = m->newer;
    else
        t->tail = m->newer;
}

static void push_head(pf_dyn_table *t, uint32_t r) {
    t->meta[r].newer = NONE;
    t->meta[r].older = t->head;
    if (t->head != NONE)
        t->meta[t->head].newer = r;
    t->head = r;
    if (t->tail == NONE)
        t->tail = r;
}

/* Drops row r: out of the hash and the order, onto the free list. */
static void drop_row(pf_dyn_table *t, uint32_t r) {
    hash_delete(t, probe(t, t->meta[r].id));
    unlink_row(t, r);
    t->meta[r].last = DEAD;
    t->meta[r].newer = t->free_rows;
    t->free_rows = r;
    t->stats.rows--;
    t->stats.evicted++;
}

pf_status pf_dyn_create(const pf_dyn_config *cfg, pf_dyn_table **out) {
    char why[96];
    *out = NULL;
    if (pf_dyn_config_check(cfg, why, sizeof why) != PF_OK)
        return PF_ERR_INVALID;
    pf_dyn_table *t = pf_calloc(1, sizeof *t);
    if (!t)
        return PF_ERR_NOMEM;
    t->cfg = *cfg;
    t->head = t->tail = t->free_rows = NONE;
    t->sketch_width = sketch_width(cfg);
    t->cap_hash = hash_size(1);
    t->hash = pf_mallocarray(t->cap_hash, sizeof *t->hash);
    if (t->sketch_width)
        t->sketch = pf_calloc(SKETCH_DEPTH * t->sketch_width, 1);
    if (!t->hash || (t->sketch_width && !t->sketch) || !grow_rows(t, FIRST_ROWS)) {
        pf_dyn_destroy(t);
        return PF_ERR_NOMEM;
    }
    memset(t->hash, 0xff, t->cap_hash * sizeof *t->hash);
    *out = t;
    return PF_OK;
}

void pf_dyn_destroy(pf_dyn_table *t) {
    if (!t)
        return;
    pf_free(t->meta);
    pf_free(t->values);
    for (int k = 0; k < PF_DYN_MAX_SLOTS; k++)
        pf_free(t->slots[k]);
    pf_free(t->hash);
    pf_free(t->sketch);
    pf_free(t);
}

const float *pf_dyn_find(pf_dyn_table *t, uint64_t id) {
    t->stats.lookups++;
    uint32_t r = t->hash[probe(t, id)].row;
    if (r == NONE) {
        t->stats.misses++;
        return NULL;
    }
    return t->values + (size_t)r * (size_t)t->cfg.dim;
}

bool pf_dyn_has(const pf_dyn_table *t, uint64_t id) {
    return t->hash[probe(t, id)].row != NONE;
}

static void gather(pf_dyn_table *t, const uint64_t *ids, size_t n, float *out, bool count) {
    size_t dim = (size_t)t->cfg.dim, bytes = dim * sizeof(float);
    uint64_t mask = t->cap_hash - 1;
    uint32_t ring[RING];
    for (size_t i = 0; i < n + 2 * AHEAD; i++) {
        if (i < n) /* ask for the id's hash slot */
            __builtin_prefetch(&t->hash[mix(ids[i]) & mask], 0, 3);
        if (i >= AHEAD && i - AHEAD < n) { /* find its row, ask for it */
            uint32_t r = t->hash[probe(t, ids[i - AHEAD])].row;
            ring[(i - AHEAD) % RING] = r;
            if (r != NONE)
                pf_prefetch_read(t->values + (size_t)r * dim, bytes < PREFETCH ? bytes : PREFETCH);
        }
        if (i >= 2 * AHEAD) { /* copy it */
            size_t k = i - 2 * AHEAD;
            uint32_t r = ring[k % RING];
            if (r != NONE) {
                memcpy(out + k * dim, t->values + (size_t)r * dim, bytes);
            } else {
                memset(out + k * dim, 0, bytes);
                t->stats.misses += count;
            }
        }
    }
    t->stats.lookups += count ? (int64_t)n : 0;
}

void pf_dyn_gather(pf_dyn_table *t, const uint64_t *ids, size_t n, float *out) {
    gather(t, ids, n, out, true);
}

void pf_dyn_gather_uncounted(pf_dyn_table *t, const uint64_t *ids, size_t n, float *out) {
    gather(t, ids, n, out, false);
}

/* Counts one more update of id in the sketch; returns its estimated count. */
static int sketch_count(pf_dyn_table *t, uint64_t id) {
    uint8_t *cell[SKETCH_DEPTH];
    int least = 255;
    uint64_t h = mix(id ^ t->cfg.seed);
    for (int d = 0; d < SKETCH_DEPTH; d++) {
        uint64_t pos = mix(h + (uint64_t)d);
        cell[d] = t->sketch + (uint64_t)d * t->sketch_width + (pos & (t->sketch_width - 1));
        least = *cell[d] < least ? *cell[d] : least;
    }
    if (least < 255)
        for (int d = 0; d < SKETCH_DEPTH; d++)
            if (*cell[d] == least)
                (*cell[d])++;
    /* ids seen long ago weigh less: without it every counter would fill in a long run, and
     * any new id would read as seen often */
    if (++t->sketch_counted >= AGE_EVERY * t->sketch_width) {
        for (uint64_t c = 0; c < SKETCH_DEPTH * t->sketch_width; c++)
            t->sketch[c] >>= 1;
        t->sketch_counted = 0;
    }
    return least < 255 ? least + 1 : 255;
}

/* Whether this update of id, without a row, admits it. */
static bool admits(pf_dyn_table *t, uint64_t id) {
    int count = t->sketch ? sketch_count(t, id) : 1;
    if (count < t->cfg.min_count)
        return false;
    if (t->cfg.probability >= 1)
        return true;
    /* a draw of its own for each (id, count), and past a saturated count for each draw made:
     * the same updates make the same decisions */
    uint64_t nth = count < 255 ? (uint64_t)count : 255 + t->draws;
    t->draws++;
    uint64_t draw = mix(mix(id ^ t->cfg.seed) + nth * 0x9e3779b97f4a7c15ull);
    return (double)(draw >> 11) * 0x1.0p-53 < t->cfg.probability;
}

/* A row index for a new row at `step`, room made (reserve): a free one, one after the
 * high-water mark, or the least recently updated one evicted; NONE when the table is full of
 * rows updated at `step` or later. */
static uint32_t take_row(pf_dyn_table *t, int64_t step) {
    if (t->stats.rows >= t->cfg.max_rows) {
        if (t->meta[t->tail].last >= step)
            return NONE;
        drop_row(t, t->tail);
    }
    if (t->free_rows != NONE) {
        uint32_t r = t->free_rows;
        t->free_rows = t->meta[r].newer;
        return r;
    }
    return (uint32_t)t->high++;
}

/* Makes row r id's, most recently updated at `step`. */
static void place_row(pf_dyn_table *t, uint32_t r, uint64_t id, int64_t step) {
    t->meta[r].id = id;
    t->meta[r].last = step;
    t->hash[probe(t, id)] = (slot){id, r};
    push_head(t, r);
    t->stats.rows++;
}

static void fill_slot(float *s, size_t dim, float value) {
    for (size_t k = 0; k < dim; k++)
        s[k] = value;
}

/* Gives a new row r of id its first values and its slots' first values. */
static void init_row(pf_dyn_table *t, uint32_t r, uint64_t id) {
    size_t dim = (size_t)t->cfg.dim;
    float *v = t->values + (size_t)r * dim;
    pf_rng rng;
    pf_rng_init(&rng, t->cfg.seed, id);
    for (size_t k = 0; k < dim; k++)
        v[k] = (int)k < t->cfg.init_width
                   ? (float)((2.0 * pf_rng_uniform(&rng) - 1.0) * t->cfg.init_limit)
                   : 0.0f;
    for (int k = 0; k < t->cfg.slots; k++)
        fill_slot(t->slots[k] + (size_t)r * dim, dim, t->cfg.slot_init[k]);
}

/* The update of id at step, room made (reserve): its row, admitted now or moved to the head
 * of the order, or NONE. `hint`: the row a lookup found for it a little earlier (NONE: none),
 * checked, since rows may have been dropped or admitted since. */
static uint32_t touch(pf_dyn_table *t, uint64_t id, int64_t step, uint32_t hint) {
    uint32_t r = hint;
    if (r == NONE || t->meta[r].last == DEAD || t->meta[r].id != id)
        r = t->hash[probe(t, id)].row;
    if (r == NONE) {
        if (!admits(t, id) || (r = take_row(t, step)) == NONE) {
            t->stats.refused++;
            return NONE;
        }
        init_row(t, r, id);
        place_row(t, r, id, step);
        t->stats.admitted++;
        return r;
    }
    if (t->head != r) {
        unlink_row(t, r);
        push_head(t, r);
    }
    t->meta[r].last = step;
    return r;
}

pf_status pf_dyn_update_batch(pf_dyn_table *t, const uint64_t *ids, size_t n, int64_t step,
                              float **rows, float **slots) {
    size_t dim = (size_t)t->cfg.dim;
    if (!reserve(t, n)) {
        for (size_t i = 0; i < n; i++) {
            rows[i] = NULL;
            for (int s = 0; slots && s < PF_DYN_MAX_SLOTS; s++)
                slots[i * PF_DYN_MAX_SLOTS + s] = NULL;
        }
        return PF_ERR_NOMEM;
    }
    uint64_t mask = t->cap_hash - 1; /* no rehash from here on */
    uint32_t ring[RING];
    for (size_t i = 0; i < n + 2 * AHEAD; i++) {
        if (i < n)
            __builtin_prefetch(&t->hash[mix(ids[i]) & mask], 0, 3);
        if (i >= AHEAD && i - AHEAD < n) {
            uint32_t r = t->hash[probe(t, ids[i - AHEAD])].row;
            ring[(i - AHEAD) % RING] = r;
            if (r != NONE) {
                __builtin_prefetch(&t->meta[r], 1, 3);
                pf_prefetch_write(t->values + (size_t)r * dim,
                                  dim * sizeof(float) < PREFETCH ? dim * sizeof(float) : PREFETCH);
            }
        }
        if (i >= 2 * AHEAD) {
            size_t k = i - 2 * AHEAD;
            uint32_t r = touch(t, ids[k], step, ring[k % RING]);
            rows[k] = r == NONE ? NULL : t->values + (size_t)r * dim;
            for (int s = 0; slots && s < PF_DYN_MAX_SLOTS; s++)
                slots[k * PF_DYN_MAX_SLOTS + s] =
                    r == NONE || s >= t->cfg.slots ? NULL : t->slots[s] + (size_t)r * dim;
        }
    }
    return PF_OK;
}

pf_status pf_dyn_update_row(pf_dyn_table *t, uint64_t id, int64_t step, float **row,
                            float **slots) {
    float *s[PF_DYN_MAX_SLOTS];
    pf_status st = pf_dyn_update_batch(t, &id, 1, step, row, s);
    for (int k = 0; slots && k < t->cfg.slots; k++)
        slots[k] = s[k];
    return st;
}

/* Moves live row `from` to free row `to`: its fields, values and slots, its place in the order
 * and in the hash. */
static void move_row(pf_dyn_table *t, uint32_t from, uint32_t to) {
    size_t dim = (size_t)t->cfg.dim;
    t->meta[to] = t->meta[from];
    t->meta[from].last = DEAD;
    memcpy(t->values + (size_t)to * dim, t->values + (size_t)from * dim, dim * sizeof(float));
    for (int k = 0; k < t->cfg.slots; k++)
        memcpy(t->slots[k] + (size_t)to * dim, t->slots[k] + (size_t)from * dim,
               dim * sizeof(float));
    const meta *m = &t->meta[to];
    if (m->newer != NONE)
        t->meta[m->newer].older = to;
    else
        t->head = to;
    if (m->older != NONE)
        t->meta[m->older].newer = to;
    else
        t->tail = to;
    t->hash[probe(t, m->id)].row = to;
}

/* Moves the live rows into the lowest row indices (O(rows handed out)), keeping their order,
 * hash slots, values and slots; no row is free after. */
static void compact(pf_dyn_table *t) {
    int64_t rows = t->stats.rows, lo = 0, hi = t->high - 1;
    for (;;) {
        while (lo < rows && t->meta[lo].last != DEAD)
            lo++;
        while (hi >= rows && t->meta[hi].last == DEAD)
            hi--;
        if (lo >= rows || hi < rows)
            break;
        move_row(t, (uint32_t)hi--, (uint32_t)lo++);
    }
    t->high = rows;
    t->free_rows = NONE;
}

/* Gives back memory after evictions. Once the row arrays are at most a quarter full, the live
 * rows move into the lowest row indices and the arrays and the hash shrink to twice what the
 * rows need, so that the next growth is some way off. Otherwise, once at most two thirds of
 * the rows handed out are live and the rest weigh RELEASE_BYTES or more, the live rows move
 * down the same way and the pages of the rest go back to the kernel, the arrays keeping their
 * size (a table whose ids change holds the memory of the rows it keeps, not of its peak).
 * Either is O(rows) and follows at least a third as many evictions. A shrink the allocator
 * refuses leaves that array larger, which is as valid. */
static void shrink(pf_dyn_table *t) {
    int64_t rows = t->stats.rows, high = t->high;
    /* room for twice the rows, and for the new rows the latest batch made room for: a table
     * whose batches bring more rows than it keeps would otherwise shrink and grow back each
     * step */
    int64_t want = 2 * rows > rows + t->reserved ? 2 * rows : rows + t->reserved;
    int64_t cap = rows_size(&t->cfg, want);
    size_t row = (size_t)t->cfg.dim * sizeof(float);
    if (t->cap_rows > FIRST_ROWS && rows * 4 <= t->cap_rows && cap <= t->cap_rows / 2) {
        compact(t);
        grow((void **)&t->meta, cap, sizeof *t->meta);
        grow((void **)&t->values, cap, row);
        for (int k = 0; k < t->cfg.slots; k++)
            grow((void **)&t->slots[k], cap, row);
        t->cap_rows = cap; /* every array holds at least cap rows, shrunk or not */
        uint64_t size = hash_size(want);
        if (size < t->cap_hash)
            rehash(t, size);
        return;
    }
    int64_t dead = high - rows;
    if (rows * 3 > high * 2 || dead * row_bytes(&t->cfg) < RELEASE_BYTES)
        return;
    compact(t);
    pf_mem_release(t->meta + rows, (size_t)dead * sizeof *t->meta);
    pf_mem_release(t->values + (size_t)rows * t->cfg.dim, (size_t)dead * row);
    for (int k = 0; k < t->cfg.slots; k++)
        pf_mem_release(t->slots[k] + (size_t)rows * t->cfg.dim, (size_t)dead * row);
}

int64_t pf_dyn_evict_stale(pf_dyn_table *t, int64_t step) {
    int64_t dropped = 0;
    if (t->cfg.steps_to_live <= 0 || step < INT64_MIN + t->cfg.steps_to_live)
        return 0;
    while (t->tail != NONE && t->meta[t->tail].last < step - t->cfg.steps_to_live) {
        drop_row(t, t->tail);
        dropped++;
    }
    if (dropped)
        shrink(t);
    return dropped;
}

pf_status pf_dyn_insert(pf_dyn_table *t, uint64_t id, int64_t last_step, const float *values,
                        const float *const *slots) {
    size_t dim = (size_t)t->cfg.dim;
    if (last_step == DEAD || (t->head != NONE && last_step < t->meta[t->head].last))
        return PF_ERR_INVALID; /* the order is by step: rows come back in pf_dyn_next's */
    if (!reserve(t, 1))
        return PF_ERR_NOMEM;
    uint32_t r = t->hash[probe(t, id)].row;
    if (r == NONE) {
        if (t->stats.rows >= t->cfg.max_rows)
            drop_row(t, t->tail); /* a restore takes the room whatever the step */
        r = take_row(t, last_step);
        place_row(t, r, id, last_step);
    } else {
        unlink_row(t, r);
        push_head(t, r);
        t->meta[r].last = last_step;
    }
    memcpy(t->values + (size_t)r * dim, values, dim * sizeof(float));
    for (int k = 0; k < t->cfg.slots; k++) {
        float *s = t->slots[k] + (size_t)r * dim;
        if (slots && slots[k])
            memcpy(s, slots[k], dim * sizeof(float));
        else
            fill_slot(s, dim, t->cfg.slot_init[k]);
    }
    return PF_OK;
}

void pf_dyn_for_each_idle(pf_dyn_table *t, int64_t step,
                          void (*fn)(float *row, float *const *slots, void *ctx), void *ctx) {
    size_t dim = (size_t)t->cfg.dim;
    for (int64_t r = 0; r < t->high; r++) {
        if (t->meta[r].last == DEAD || t->meta[r].last >= step)
            continue;
        float *slots[PF_DYN_MAX_SLOTS] = {NULL, NULL};
        for (int k = 0; k < t->cfg.slots; k++)
            slots[k] = t->slots[k] + (size_t)r * dim;
        fn(t->values + (size_t)r * dim, slots, ctx);
    }
}

bool pf_dyn_next(const pf_dyn_table *t, int64_t *cursor, pf_dyn_row *out) {
    uint32_t r = *cursor == 0 ? t->tail : *cursor > 0 ? (uint32_t)(*cursor - 1) : NONE;
    if (r == NONE || (int64_t)r >= t->high) {
        *cursor = -1;
        return false;
    }
    size_t dim = (size_t)t->cfg.dim;
    out->id = t->meta[r].id;
    out->last_step = t->meta[r].last;
    out->values = t->values + (size_t)r * dim;
    for (int k = 0; k < PF_DYN_MAX_SLOTS; k++)
        out->slots[k] = k < t->cfg.slots ? t->slots[k] + (size_t)r * dim : NULL;
    *cursor = t->meta[r].newer == NONE ? -1 : (int64_t)t->meta[r].newer + 1;
    return true;
}

pf_dyn_stats pf_dyn_stats_get(const pf_dyn_table *t) {
    pf_dyn_stats s = t->stats;
    s.bytes = bytes_now(t);
    return s;
}

int pf_dyn_owner(uint64_t id, int n_ps) {
    /* a mix of its own (the table's hash and the sketch mix the id with other constants),
     * scaled by a multiply rather than a modulo: no bias towards the low tasks */
    uint64_t h = mix(id ^ 0x6f776e6572206f66ull);
    return (int)(((h >> 32) * (uint64_t)(uint32_t)n_ps) >> 32);
}

pf_dyn_admission pf_dyn_admission_get(const pf_dyn_table *t) {
    return (pf_dyn_admission){t->sketch, (size_t)(SKETCH_DEPTH * t->sketch_width),
                              t->sketch_counted, t->draws};
}

pf_status pf_dyn_admission_add(pf_dyn_table *t, const pf_dyn_admission *a) {
    size_t n = (size_t)(SKETCH_DEPTH * t->sketch_width);
    if (a->bytes != n || (n && !a->sketch))
        return PF_ERR_INVALID;
    for (size_t c = 0; c < n; c++) {
        unsigned sum = (unsigned)t->sketch[c] + a->sketch[c];
        t->sketch[c] = (uint8_t)(sum < 255 ? sum : 255);
    }
    t->sketch_counted = a->counted > t->sketch_counted ? a->counted : t->sketch_counted;
    t->draws = a->draws > t->draws ? a->draws : t->draws;
    return PF_OK;
}

void pf_dyn_stats_restore(pf_dyn_table *t, const pf_dyn_stats *s) {
    t->stats.admitted = s->admitted;
    t->stats.refused = s->refused;
    t->stats.evicted = s->evicted;
}

const pf_dyn_config *pf_dyn_config_get(const pf_dyn_table *t) {
    return &t->cfg;
}
