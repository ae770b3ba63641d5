/* test_dyn_table.c - the embedding table keyed by 64-bit ids (dyn_table.h): configuration
 * checks; lookups of ids without a row; admission at once, after min_count updates (the
 * sketch), and by probability, the same decisions and values in two tables fed alike; the
 * least recently updated row evicted at max_rows and rows idle longer than steps_to_live on
 * request, their slots with them; a long random run of updates, lookups and evictions against
 * a plain reference map (every row found, none lost, each holding what was written to it);
 * the walk in order and a restore from it; memory within pf_dyn_bytes_bound; and every failed
 * allocation a PF_ERR_NOMEM that leaves the table as it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/dyn_table.h"
#include "psflow/rng.h"
#include "tests/support/counting_alloc.h"

static pf_dyn_config config(int dim, int slots, int64_t max_rows) {
    return (pf_dyn_config){.dim = dim,
                           .slots = slots,
                           .max_rows = max_rows,
                           .probability = 1,
                           .seed = 7,
                           .init_limit = 0.5f,
                           .init_width = dim};
}

static pf_dyn_table *create(const pf_dyn_config *cfg) {
    pf_dyn_table *t = NULL;
    assert_int_equal(pf_dyn_create(cfg, &t), PF_OK);
    assert_non_null(t);
    return t;
}

/* Updates id at step; returns its row (NULL: not admitted). */
static float *update(pf_dyn_table *t, uint64_t id, int64_t step, float **slots) {
    float *row = (float *)&row; /* anything but NULL: the call must set it */
    assert_int_equal(pf_dyn_update_row(t, id, step, &row, slots), PF_OK);
    return row;
}

/* Each field out of range is refused, naming it. */
static void test_config_checks(void **state) {
    (void)state;
    char why[96];
    pf_dyn_config c = config(4, 1, 10);
    assert_int_equal(pf_dyn_config_check(&c, why, sizeof why), PF_OK);
    for (int i = 0; i < 9; i++) {
        c = config(4, 1, 10);
        const char *field = NULL;
        switch (i) {
        case 0:
            c.dim = 0, field = "dim";
            break;
        case 1:
            c.slots = 3, field = "slots";
            break;
        case 2:
            c.max_rows = 0, field = "max_rows";
            break;
        case 3:
            c.max_rows = PF_DYN_MAX_ROWS, field = "max_rows";
            break;
        case 4:
            c.min_count = 256, field = "min_count";
            break;
        case 5:
            c.probability = 0, field = "probability";
            break;
        case 6:
            c.min_count = 2, c.sketch_bytes = 100, field = "sketch_bytes";
            break;
        case 7:
            c.init_width = 5, field = "init_width";
            break;
        default:
            c.steps_to_live = -1, field = "steps_to_live";
            break;
        }
        assert_int_equal(pf_dyn_config_check(&c, why, sizeof why), PF_ERR_INVALID);
        assert_non_null(strstr(why, field));
        pf_dyn_table *t = (pf_dyn_table *)&t;
        assert_int_equal(pf_dyn_create(&c, &t), PF_ERR_INVALID);
        assert_null(t);
    }
}

/* An id without a row reads as NULL (zeros); the first update admits it with values from
 * (seed, id) within init_limit and zero slots; a later update finds the same row. */
static void test_admit_at_once(void **state) {
    (void)state;
    pf_dyn_config c = config(4, 2, 100);
    c.init_width = 3; /* the last float starts at 0 */
    pf_dyn_table *t = create(&c), *u = create(&c);
    uint64_t id = (1ull << 40) + 12345;
    assert_null(pf_dyn_find(t, id));
    float *slots[PF_DYN_MAX_SLOTS];
    float *row = update(t, id, 1, slots);
    assert_non_null(row);
    for (int k = 0; k < 3; k++)
        assert_true(row[k] >= -0.5f && row[k] <= 0.5f && row[k] != 0.0f);
    assert_true(row[3] == 0.0f);
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 4; k++)
            assert_true(slots[s][k] == 0.0f);
    row[0] = 42.0f;
    slots[1][2] = 7.0f;
    const float *found = pf_dyn_find(t, id);
    assert_true(found[0] == 42.0f);
    assert_ptr_equal(update(t, id, 2, slots), found);
    assert_true(slots[1][2] == 7.0f);
    /* another table with the same seed gives the id the same values */
    float *other = update(u, id, 9, NULL);
    assert_memory_equal(other + 1, found + 1, 3 * sizeof(float));
    pf_dyn_stats st = pf_dyn_stats_get(t);
    assert_int_equal(st.rows, 1);
    assert_int_equal(st.admitted, 1);
    assert_int_equal(st.lookups, 2);
    assert_int_equal(st.misses, 1);
    pf_dyn_destroy(t);
    pf_dyn_destroy(u);
}

/* min_count 3: an id's first two updates are refused, its third admits it; ids seen once
 * never get a row. */
static void test_min_count(void **state) {
    (void)state;
    pf_dyn_config c = config(2, 0, 1000);
    c.min_count = 3;
    c.sketch_bytes = 1 << 16;
    pf_dyn_table *t = create(&c);
    for (uint64_t id = 1; id <= 200; id++) {
        assert_null(update(t, id * 977, 1, NULL));
        assert_null(update(t, id * 977, 2, NULL));
        assert_non_null(update(t, id * 977, 3, NULL));
    }
    for (uint64_t id = 1000; id < 1500; id++)
        assert_null(update(t, id * 977, 4, NULL));
    pf_dyn_stats st = pf_dyn_stats_get(t);
    assert_int_equal(st.rows, 200);
    assert_int_equal(st.admitted, 200);
    assert_int_equal(st.refused, 400 + 500);
    pf_dyn_destroy(t);
}

/* probability 0.25: about a quarter of new ids are admitted on their first update; an id
 * refused may be admitted by a later update; two tables fed alike decide alike. */
static void test_probability(void **state) {
    (void)state;
    pf_dyn_config c = config(2, 0, 100000);
    c.probability = 0.25;
    c.sketch_bytes = 1 << 20;
    pf_dyn_table *t = create(&c), *u = create(&c);
    int first = 0;
    for (uint64_t id = 0; id < 20000; id++) {
        bool a = update(t, id, 1, NULL) != NULL, b = update(u, id, 1, NULL) != NULL;
        assert_int_equal(a, b);
        first += a;
    }
    assert_in_range(first, 4500, 5500);
    for (int round = 2; round <= 12; round++)
        for (uint64_t id = 0; id < 20000; id++)
            assert_int_equal(update(t, id, round, NULL) != NULL,
                             update(u, id, round, NULL) != NULL);
    /* after 12 updates an id is refused every time with probability 0.75^12 (3 %) */
    int64_t rows = pf_dyn_stats_get(t).rows;
    assert_in_range(rows, 19000, 19800);
    pf_dyn_destroy(t);
    pf_dyn_destroy(u);
}

/* At max_rows the least recently updated row makes room; idle rows go on request. */
static void test_eviction(void **state) {
    (void)state;
    pf_dyn_config c = config(3, 1, 3);
    c.steps_to_live = 5;
    pf_dyn_table *t = create(&c);
    float *slots[PF_DYN_MAX_SLOTS];
    update(t, 1, 1, NULL);
    update(t, 2, 2, slots);
    slots[0][0] = slots[0][2] = 5.0f; /* 2's slot, to be dropped with it */
    update(t, 3, 3, NULL);
    update(t, 1, 4, NULL); /* 2 is now the least recent */
    float *row = update(t, 4, 5, slots);
    assert_non_null(row);
    assert_true(slots[0][0] == 0.0f && slots[0][2] == 0.0f); /* not 2's */
    assert_null(pf_dyn_find(t, 2));
    assert_non_null(pf_dyn_find(t, 1));
    assert_non_null(pf_dyn_find(t, 3));
    assert_int_equal(pf_dyn_stats_get(t).evicted, 1);
    /* at step 9 rows last updated before step 4 are idle too long: 3 */
    assert_int_equal(pf_dyn_evict_stale(t, 9), 1);
    assert_null(pf_dyn_find(t, 3));
    assert_int_equal(pf_dyn_evict_stale(t, 9), 0);
    assert_int_equal(pf_dyn_evict_stale(t, 100), 2);
    pf_dyn_stats st = pf_dyn_stats_get(t);
    assert_int_equal(st.rows, 0);
    assert_int_equal(st.evicted, 4);
    /* the freed rows take new ids */
    for (uint64_t id = 10; id < 13; id++)
        assert_non_null(update(t, id, 101, NULL));
    assert_int_equal(pf_dyn_stats_get(t).rows, 3);
    pf_dyn_destroy(t);
}

/* Evicting most rows gives their memory back: the live rows move below the others' indices,
 * keep their values, slots and order, and the table goes on admitting and evicting. */
static void test_shrink(void **state) {
    (void)state;
    enum { MANY = 100000, KEPT = 1000 };
    pf_dyn_config c = config(4, 1, 1 << 20);
    c.steps_to_live = 10;
    pf_dyn_table *t = create(&c);
    float *slots[PF_DYN_MAX_SLOTS];
    for (uint64_t i = 0; i < MANY; i++) { /* step 1: every id, its number in its row */
        float *row = update(t, i * 0x9e3779b97f4a7c15ull, 1, slots);
        row[0] = (float)i;
        slots[0][1] = (float)i + 0.5f;
    }
    int64_t full = pf_dyn_stats_get(t).bytes;
    for (int64_t step = 2; step <= 20; step++) /* every 100th id stays in use */
        for (uint64_t i = 0; i < MANY; i += MANY / KEPT)
            update(t, i * 0x9e3779b97f4a7c15ull, step, NULL);
    assert_int_equal(pf_dyn_evict_stale(t, 20), MANY - KEPT);
    pf_dyn_stats st = pf_dyn_stats_get(t);
    assert_int_equal(st.rows, KEPT);
    assert_true(st.bytes * 16 < full); /* the arrays and the hash shrank */
    for (uint64_t i = 0; i < MANY; i++) {
        float *keep[PF_DYN_MAX_SLOTS];
        const float *v = pf_dyn_find(t, i * 0x9e3779b97f4a7c15ull);
        assert_int_equal(v != NULL, i % (MANY / KEPT) == 0);
        if (v) {
            assert_true(v[0] == (float)i);
            float *row = update(t, i * 0x9e3779b97f4a7c15ull, 21, keep); /* slots moved too */
            assert_true(row == v && keep[0][1] == (float)i + 0.5f);
        }
    }
    int64_t cursor = 0, walked = 0;
    pf_dyn_row r;
    while (pf_dyn_next(t, &cursor, &r)) { /* the order is whole, least recently updated first */
        assert_true(r.id == walked * (MANY / KEPT) * 0x9e3779b97f4a7c15ull);
        walked++;
    }
    assert_int_equal(walked, KEPT);
    for (uint64_t i = 0; i < 5000; i++) /* it grows again, and evicts again */
        assert_non_null(update(t, (MANY + i) * 0x9e3779b97f4a7c15ull, 30, NULL));
    assert_int_equal(pf_dyn_stats_get(t).rows, KEPT + 5000);
    assert_int_equal(pf_dyn_evict_stale(t, 39), KEPT);
    assert_int_equal(pf_dyn_stats_get(t).rows, 5000);
    assert_non_null(pf_dyn_find(t, (MANY + 4999) * 0x9e3779b97f4a7c15ull));
    pf_dyn_destroy(t);
}

/* The resident pages of this process (statm's second field), or -1. */
static long resident_pages(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size, resident = -1;
    if (f && fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = -1;
    if (f)
        fclose(f);
    return resident;
}

/* Evictions that leave a table a third dead but its arrays more than a quarter full (ids
 * that changed): the live rows move down and the pages of the dead ones go back to the
 * kernel; every kept row keeps its values, slots and place in the order, and new rows come
 * after them. */
static void test_release(void **state) {
    (void)state;
    enum { MANY = 60000, DIM = 64 };
    pf_dyn_config c = config(DIM, 1, 1 << 20);
    c.steps_to_live = 10;
    pf_dyn_table *t = create(&c);
    float *slots[PF_DYN_MAX_SLOTS];
    for (uint64_t i = 0; i < MANY; i++) { /* step 1: every id, its number in its row */
        float *row = update(t, i * 0x9e3779b97f4a7c15ull, 1 + (int64_t)(i % 2), slots);
        for (int k = 0; k < DIM; k++)
            row[k] = (float)i;
        slots[0][DIM - 1] = (float)i + 0.5f;
    }
    int64_t bytes = pf_dyn_stats_get(t).bytes;
    long before = resident_pages();
    for (int64_t step = 3; step <= 12; step++) /* the odd ids stay in use */
        for (uint64_t i = 1; i < MANY; i += 2)
            update(t, i * 0x9e3779b97f4a7c15ull, step, NULL);
    assert_int_equal(pf_dyn_evict_stale(t, 12), MANY / 2); /* the even ones, idle since 1 */
    long after = resident_pages();
    assert_int_equal(pf_dyn_stats_get(t).bytes, bytes); /* the arrays keep their size */
    if (before > 0 && after > 0)
        /* 30,000 dead rows of 256 bytes and 256 of slot: about 3,700 pages back */
        assert_true(after < before - 2000);
    int64_t cursor = 0, walked = 0;
    pf_dyn_row r;
    while (pf_dyn_next(t, &cursor, &r)) { /* the order is whole, least recently updated first */
        uint64_t i = 2 * (uint64_t)walked + 1;
        assert_true(r.id == i * 0x9e3779b97f4a7c15ull);
        assert_true(r.values[0] == (float)i && r.values[DIM - 1] == (float)i);
        assert_true(r.slots[0][DIM - 1] == (float)i + 0.5f);
        walked++;
    }
    assert_int_equal(walked, MANY / 2);
    for (uint64_t i = 0; i < 1000; i++) { /* new rows take fresh pages: zeros, then their values */
        float *row = update(t, (MANY + i) * 0x9e3779b97f4a7c15ull, 13, slots);
        assert_non_null(row);
        assert_true(slots[0][0] == 0.0f); /* adagrad's accumulator starts at slot_init 0 here */
    }
    assert_int_equal(pf_dyn_stats_get(t).rows, MANY / 2 + 1000);
    pf_dyn_destroy(t);
}

/* A long random run against a reference: ids from a small space so that rows are admitted,
 * evicted at max_rows, found again and dropped for idleness; each row holds its id and the
 * step of its latest update in its first floats, so a row that moved or mixed up is caught. */
static void test_random_run(void **state) {
    (void)state;
    enum { SPACE = 5000, MAX = 700 };
    pf_dyn_config c = config(2, 1, MAX);
    c.steps_to_live = 400;
    pf_dyn_table *t = create(&c);
    /* the reference: the step of each id's latest update (-1: no row) and its place in the
     * order of updates */
    static int64_t last[SPACE], order[SPACE];
    for (int i = 0; i < SPACE; i++)
        last[i] = -1;
    int64_t rows = 0, updates = 0;
    pf_rng rng;
    pf_rng_init(&rng, 3, 0);
    for (int64_t step = 1; step <= 3000; step++) {
        for (int k = 0; k < 40; k++) {
            uint64_t i = pf_rng_below(&rng, SPACE), id = i * 0x9e3779b97f4a7c15ull;
            float *slots[PF_DYN_MAX_SLOTS];
            float *row = update(t, id, step, slots);
            assert_non_null(row);
            if (last[i] < 0) {
                if (rows == MAX) { /* the least recent goes */
                    int oldest = -1;
                    for (int j = 0; j < SPACE; j++)
                        if (last[j] >= 0 && (oldest < 0 || order[j] < order[oldest]))
                            oldest = j;
                    last[oldest] = -1;
                    rows--;
                }
                rows++;
            } else {
                assert_true(row[0] == (float)i && slots[0][0] == (float)last[i]);
            }
            row[0] = (float)i;
            slots[0][0] = (float)step;
            last[i] = step;
            order[i] = ++updates;
        }
        if (step % 50 == 0) {
            int64_t dropped = pf_dyn_evict_stale(t, step);
            for (int j = 0; j < SPACE; j++)
                if (last[j] >= 0 && last[j] < step - 400) {
                    last[j] = -1;
                    rows--;
                    dropped--;
                }
            assert_int_equal(dropped, 0);
        }
        if (step % 500 == 0)
            for (uint64_t j = 0; j < SPACE; j++) {
                const float *v = pf_dyn_find(t, j * 0x9e3779b97f4a7c15ull);
                assert_int_equal(v != NULL, last[j] >= 0);
                if (v)
                    assert_true(v[0] == (float)j);
            }
        assert_int_equal(pf_dyn_stats_get(t).rows, rows);
    }
    pf_dyn_destroy(t);
}

/* The batch calls against the single ones: a run of batches of 40 ids (some named twice)
 * through pf_dyn_update_batch, with admissions and evictions inside batches, against the
 * same run one id at a time in another table: the same rows get the same values; every
 * pointer a batch hands out is its id's row until the batch is over (a marker written
 * through each is read back after it); pf_dyn_gather equals pf_dyn_find row by row. */
static void test_batches(void **state) {
    (void)state;
    enum { SPACE = 3000, BATCH = 40 };
    pf_dyn_config c = config(4, 1, 500);
    c.min_count = 2;
    c.sketch_bytes = 1 << 14;
    c.steps_to_live = 300;
    pf_dyn_table *t = create(&c), *u = create(&c);
    pf_rng rng;
    pf_rng_init(&rng, 5, 0);
    uint64_t ids[BATCH];
    float *rows[BATCH], *slots[BATCH * PF_DYN_MAX_SLOTS];
    float out[BATCH * 4];
    for (int64_t step = 1; step <= 2000; step++) {
        for (int i = 0; i < BATCH; i++)
            ids[i] = i > 0 && i % 7 == 0 ? ids[i - 1] : pf_rng_below(&rng, SPACE) << 24;
        assert_int_equal(pf_dyn_update_batch(t, ids, BATCH, step, rows, slots), PF_OK);
        for (int i = 0; i < BATCH; i++) {
            float *one = update(u, ids[i], step, NULL);
            assert_int_equal(rows[i] != NULL, one != NULL);
            if (rows[i]) {
                assert_memory_equal(rows[i] + 1, one + 1, 3 * sizeof(float));
                rows[i][0] = one[0] = (float)(ids[i] >> 24);
                slots[i * PF_DYN_MAX_SLOTS][3] = (float)step;
                assert_null(slots[i * PF_DYN_MAX_SLOTS + 1]);
            }
        }
        for (int i = 0; i < BATCH; i++)
            if (rows[i])
                assert_true(rows[i][0] == (float)(ids[i] >> 24) &&
                            slots[i * PF_DYN_MAX_SLOTS][3] == (float)step);
        if (step % 100 == 0)
            assert_int_equal(pf_dyn_evict_stale(t, step), pf_dyn_evict_stale(u, step));
        pf_dyn_gather(t, ids, BATCH, out);
        for (int i = 0; i < BATCH; i++) {
            const float *v = pf_dyn_find(t, ids[i]);
            if (v)
                assert_memory_equal(out + 4 * i, v, 4 * sizeof(float));
            else
                assert_true(out[4 * i] == 0.0f && out[4 * i + 3] == 0.0f);
        }
    }
    pf_dyn_stats a = pf_dyn_stats_get(t), b = pf_dyn_stats_get(u);
    assert_int_equal(a.rows, b.rows);
    assert_int_equal(a.admitted, b.admitted);
    assert_int_equal(a.evicted, b.evicted);
    assert_true(a.evicted > 1000 && a.refused > 1000); /* both happened, many times */
    pf_dyn_destroy(t);
    pf_dyn_destroy(u);
}

/* A step that names more new ids than max_rows: the first max_rows are admitted, the rest
 * refused, and no row of the step is dropped under it; the next step evicts as usual. */
static void test_crowded_step(void **state) {
    (void)state;
    pf_dyn_config c = config(2, 0, 16);
    pf_dyn_table *t = create(&c);
    uint64_t ids[40];
    float *rows[40];
    for (int i = 0; i < 40; i++)
        ids[i] = 1000 + (uint64_t)i;
    assert_int_equal(pf_dyn_update_batch(t, ids, 40, 1, rows, NULL), PF_OK);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(rows[i] != NULL, i < 16);
        if (rows[i])
            rows[i][1] = (float)i;
    }
    for (int i = 0; i < 16; i++)
        assert_true(rows[i][1] == (float)i && pf_dyn_find(t, ids[i]) == rows[i]);
    assert_int_equal(pf_dyn_stats_get(t).refused, 24);
    assert_non_null(update(t, 5000, 2, NULL)); /* ids[0]'s row makes room */
    assert_null(pf_dyn_find(t, ids[0]));
    /* a restore takes rows in order only */
    assert_int_equal(pf_dyn_insert(t, 7, 1, (const float[]){1, 2}, NULL), PF_ERR_INVALID);
    assert_int_equal(pf_dyn_insert(t, 7, 2, (const float[]){1, 2}, NULL), PF_OK);
    pf_dyn_destroy(t);
}

/* The walk visits every row once, least recently updated first; a table restored from it
 * holds the same rows, values, slots and order. */
static void test_walk_and_restore(void **state) {
    (void)state;
    pf_dyn_config c = config(3, 2, 1000);
    pf_dyn_table *t = create(&c);
    for (int64_t step = 1; step <= 600; step++) {
        float *slots[PF_DYN_MAX_SLOTS];
        float *row = update(t, (uint64_t)(step * 31 % 500) << 20, step, slots);
        row[1] = (float)step;
        slots[1][2] = (float)-step;
    }
    pf_dyn_table *u = create(&c);
    int64_t cursor = 0, seen = 0, prev = -1;
    pf_dyn_row r;
    while (pf_dyn_next(t, &cursor, &r)) {
        assert_true(r.last_step > prev);
        prev = r.last_step;
        assert_true(r.values[1] == (float)r.last_step && r.slots[1][2] == (float)-r.last_step);
        assert_int_equal(pf_dyn_insert(u, r.id, r.last_step, r.values, r.slots), PF_OK);
        seen++;
    }
    assert_int_equal(seen, 500);
    assert_int_equal(pf_dyn_stats_get(u).rows, 500);
    int64_t a = 0, b = 0;
    pf_dyn_row x, y;
    while (pf_dyn_next(t, &a, &x)) {
        assert_true(pf_dyn_next(u, &b, &y));
        assert_true(x.id == y.id && x.last_step == y.last_step);
        assert_memory_equal(x.values, y.values, 3 * sizeof(float));
        assert_memory_equal(x.slots[0], y.slots[0], 3 * sizeof(float));
        assert_memory_equal(x.slots[1], y.slots[1], 3 * sizeof(float));
    }
    assert_false(pf_dyn_next(u, &b, &y));
    pf_dyn_destroy(t);
    pf_dyn_destroy(u);
}

/* A table at max_rows holds no more than pf_dyn_bytes_bound says. */
static void test_bytes_bound(void **state) {
    (void)state;
    pf_dyn_config c = config(16, 2, 5000);
    c.min_count = 2;
    c.sketch_bytes = 1 << 16;
    pf_dyn_table *t = create(&c);
    for (int round = 0; round < 2; round++)
        for (uint64_t id = 0; id < 12000; id++)
            update(t, id, round, NULL);
    pf_dyn_stats st = pf_dyn_stats_get(t);
    assert_int_equal(st.rows, 5000);
    assert_true(st.bytes <= pf_dyn_bytes_bound(&c));
    assert_true(st.bytes >= 5000 * 16 * 3 * (int64_t)sizeof(float));
    pf_dyn_destroy(t);
}

/* Every allocation refused in turn while rows are admitted: PF_ERR_NOMEM, the rows and
 * statistics as they were, nothing leaked; the same update goes through afterwards. */
static void test_out_of_memory(void **state) {
    (void)state;
    pf_dyn_config c = config(4, 1, 100000);
    for (long budget = 0; budget < 12; budget++) {
        use_counting(budget);
        pf_dyn_table *t = NULL;
        pf_status st = pf_dyn_create(&c, &t);
        if (st != PF_OK) {
            assert_int_equal(st, PF_ERR_NOMEM);
            assert_null(t);
            assert_int_equal(alloc_live, 0);
            continue;
        }
        uint64_t id = 0;
        for (;; id++) {
            pf_dyn_stats before = pf_dyn_stats_get(t);
            float *row = NULL;
            st = pf_dyn_update_row(t, id, 1, &row, NULL);
            if (st != PF_OK) {
                assert_int_equal(st, PF_ERR_NOMEM);
                assert_null(row);
                assert_int_equal(pf_dyn_stats_get(t).rows, before.rows);
                break;
            }
            row[0] = (float)id;
        }
        counting_budget(-1);
        float *row = NULL;
        assert_int_equal(pf_dyn_update_row(t, id, 1, &row, NULL), PF_OK);
        assert_non_null(row);
        for (uint64_t j = 0; j < id; j++)
            assert_true(pf_dyn_find(t, j)[0] == (float)j);
        pf_dyn_destroy(t);
        assert_int_equal(alloc_live, 0);
    }
    use_libc();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_checks),    cmocka_unit_test(test_admit_at_once),
        cmocka_unit_test(test_min_count),        cmocka_unit_test(test_probability),
        cmocka_unit_test(test_eviction),         cmocka_unit_test(test_random_run),
        cmocka_unit_test(test_walk_and_restore), cmocka_unit_test(test_bytes_bound),
        cmocka_unit_test(test_out_of_memory),    cmocka_unit_test(test_batches),
        cmocka_unit_test(test_crowded_step),     cmocka_unit_test(test_shrink),
        cmocka_unit_test(test_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
