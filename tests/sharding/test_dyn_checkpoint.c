/* test_dyn_checkpoint.c - dynamic embedding tables in ps checkpoint files (dyn_checkpoint.h):
 * a table saved by 2 ps tasks and restored into 2 holds the same rows in the same order with
 * the same admission state, and goes on exactly as the saved one; restored into 3 and into 1
 * its export (ids and values) is identical, and an id its old ps had counted once is admitted
 * on its next update; a restore that would hold more than max_rows rows is refused (no row
 * dropped); the manifest's CRC-32 refuses a flipped byte of a table's rows; a row of another
 * ps, an id twice, steps out of order, a dim or a slot that differs, another seed, a missing
 * table and a non-finite row are refused with the file and the reason; integer tensors stay
 * out of the float-only reader.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/checkpoint.h"
#include "psflow/dyn_checkpoint.h"
#include "psflow/dyn_table.h"
#include "psflow/mem.h"
#include "psflow/rng.h"
#include "tests/support/checkpoint_fixture.h"

#define VAR   "user/embeddings"
#define DIM   6
#define SLOTS 2
#define BATCH 64

static const char *const suffix[SLOTS] = {"Adam", "Adam_1"};

static pf_dyn_config config(void) {
    return (pf_dyn_config){.dim = DIM,
                           .slots = SLOTS,
                           .max_rows = 400,
                           .min_count = 2,
                           .probability = 0.8,
                           .steps_to_live = 30,
                           .sketch_bytes = 1024,
                           .seed = 11,
                           .init_limit = 0.1f,
                           .init_width = DIM};
}

static pf_dyn_table *create(void) {
    pf_dyn_config cfg = config();
    pf_dyn_table *t = NULL;
    assert_int_equal(pf_dyn_create(&cfg, &t), PF_OK);
    return t;
}

/* The ids of `step`: Zipf-like over 2^40 (many seen once, a few often), the same for a seed. */
static void ids_of(int64_t step, uint64_t *ids) {
    pf_rng rng;
    pf_rng_init(&rng, 5, (uint64_t)step);
    for (int i = 0; i < BATCH; i++) {
        double u = pf_rng_uniform(&rng);
        uint64_t rank = (uint64_t)(1.0 / (0.002 + u * u)); /* 1 .. 500, small ones often */
        ids[i] = (rank * 0x9e3779b97f4a7c15ull) & ((1ull << 40) - 1);
    }
}

/* One step of updates to the ids of `step` that ps `ps` of n_ps owns (n_ps 1: all): an
 * adam-like change of values and slots, depending on the id and the step only. */
static void train_step(pf_dyn_table *t, int64_t step, int ps, int n_ps) {
    uint64_t all[BATCH], mine[BATCH];
    ids_of(step, all);
    size_t n = 0;
    for (int i = 0; i < BATCH; i++)
        if (pf_dyn_owner(all[i], n_ps) == ps)
            mine[n++] = all[i];
    float *rows[BATCH], *slots[BATCH * PF_DYN_MAX_SLOTS];
    assert_int_equal(pf_dyn_update_batch(t, mine, n, step, rows, slots), PF_OK);
    for (size_t i = 0; i < n; i++) {
        if (!rows[i])
            continue;
        for (int k = 0; k < DIM; k++) {
            float g = (float)((int64_t)(mine[i] % 97) - 48 + k) / 100.0f + (float)step / 1000.0f;
            float *m = slots[i * PF_DYN_MAX_SLOTS] + k, *v = slots[i * PF_DYN_MAX_SLOTS + 1] + k;
            *m = 0.9f * *m + 0.1f * g;
            *v = 0.99f * *v + 0.01f * g * g;
            rows[i][k] -= 0.01f * *m / (sqrtf(*v) + 1e-3f);
        }
    }
    pf_dyn_evict_stale(t, step);
}

/* Writes each table as ps-<i>.safetensors under step_dir, and the manifest. */
static void save(const char *step_dir, pf_dyn_table *const *t, int n) {
    char path[320];
    pf_error err;
    for (int i = 0; i < n; i++) {
        pf_dyn_snapshot s;
        assert_int_equal(pf_dyn_snapshot_take(t[i], VAR, suffix, &s, &err), PF_OK);
        assert_int_equal(s.rows, pf_dyn_stats_get(t[i]).rows);
        snprintf(path, sizeof path, "%s/ps-%d.safetensors", step_dir, i);
        assert_int_equal(pf_safetensors_write(path, s.views, s.n, NULL, NULL, 0, &err), PF_OK);
        pf_dyn_snapshot_free(&s);
    }
    pf_checkpoint_manifest m = {0};
    assert_int_equal(pf_checkpoint_write_manifest(step_dir, JOB, 1, n, &m, &err), PF_OK);
    assert_int_equal(pf_checkpoint_verify(step_dir, &m, PF_CKPT_VERIFY_CRC, &err), PF_OK);
    pf_checkpoint_manifest_deinit(&m);
}

static void load(const char *step_dir, int n, pf_safetensors **files) {
    char path[320];
    pf_error err;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/ps-%d.safetensors", step_dir, i);
        assert_int_equal(pf_safetensors_read_any(path, &files[i], &err), PF_OK);
    }
}

static void unload(pf_safetensors **files, int n) {
    for (int i = 0; i < n; i++)
        pf_safetensors_destroy(files[i]);
}

/* Restores ps `ps` of n_ps from the n_files files; the status, the table kept in *out. */
static pf_status restore(pf_safetensors **files, int n_files, int ps, int n_ps, pf_dyn_table **out,
                         pf_error *err) {
    *out = create();
    return pf_dyn_restore(*out, (const pf_safetensors *const *)files, n_files, VAR, suffix, ps,
                          n_ps, NULL, err);
}

static void assert_same_table(const pf_dyn_table *a, const pf_dyn_table *b) {
    int64_t ca = 0, cb = 0;
    pf_dyn_row ra, rb;
    int64_t rows = 0;
    while (pf_dyn_next(a, &ca, &ra)) {
        assert_true(pf_dyn_next(b, &cb, &rb));
        assert_true(ra.id == rb.id);
        assert_int_equal(ra.last_step, rb.last_step);
        assert_memory_equal(ra.values, rb.values, DIM * sizeof(float));
        for (int k = 0; k < SLOTS; k++)
            assert_memory_equal(ra.slots[k], rb.slots[k], DIM * sizeof(float));
        rows++;
    }
    assert_false(pf_dyn_next(b, &cb, &rb));
    pf_dyn_stats sa = pf_dyn_stats_get(a), sb = pf_dyn_stats_get(b);
    assert_int_equal(sa.rows, rows);
    assert_int_equal(sa.rows, sb.rows);
    assert_int_equal(sa.admitted, sb.admitted);
    assert_int_equal(sa.refused, sb.refused);
    assert_int_equal(sa.evicted, sb.evicted);
}

static void step_dir(const char *name, char *dir, size_t len) {
    snprintf(dir, len, "%s/%s", fixture_root, name);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Two ps tasks trained for `steps` steps. */
static void train_two(pf_dyn_table **t, int64_t steps) {
    t[0] = create();
    t[1] = create();
    for (int64_t s = 1; s <= steps; s++)
        for (int p = 0; p < 2; p++)
            train_step(t[p], s, p, 2);
}

static void test_restore_same_ps(void **state) {
    (void)state;
    pf_dyn_table *t[2];
    train_two(t, 60);
    assert_true(pf_dyn_stats_get(t[0]).refused > 0);
    assert_true(pf_dyn_stats_get(t[0]).evicted > 0);
    char dir[256];
    step_dir("same", dir, sizeof dir);
    save(dir, t, 2);
    pf_safetensors *files[2];
    load(dir, 2, files);
    pf_error err;
    for (int p = 0; p < 2; p++) {
        pf_dyn_table *r;
        assert_int_equal(restore(files, 2, p, 2, &r, &err), PF_OK);
        assert_same_table(t[p], r);
        /* admission state too: the same further updates make the same tables */
        for (int64_t s = 61; s <= 120; s++) {
            train_step(t[p], s, p, 2);
            train_step(r, s, p, 2);
        }
        assert_same_table(t[p], r);
        pf_dyn_destroy(r);
    }
    unload(files, 2);
    pf_dyn_destroy(t[0]);
    pf_dyn_destroy(t[1]);
}

static void export_of(const char *dir, int n, uint64_t **ids, float **values, int64_t *rows) {
    pf_safetensors *files[4];
    load(dir, n, files);
    pf_error err;
    int dim = 0;
    assert_int_equal(pf_dyn_export_rows((const pf_safetensors *const *)files, n, VAR, ids, values,
                                        rows, &dim, &err),
                     PF_OK);
    assert_int_equal(dim, DIM);
    for (int64_t i = 1; i < *rows; i++)
        assert_true((*ids)[i - 1] < (*ids)[i]);
    unload(files, n);
}

static void test_repartition(void **state) {
    (void)state;
    pf_dyn_table *t[2];
    train_two(t, 40);
    char two[256], three[256], one[256];
    step_dir("two", two, sizeof two);
    step_dir("three", three, sizeof three);
    step_dir("one", one, sizeof one);
    save(two, t, 2);
    pf_safetensors *files[2];
    load(two, 2, files);
    pf_error err;
    pf_dyn_table *t3[3], *t1[1];
    int64_t rows3 = 0;
    for (int p = 0; p < 3; p++) {
        assert_int_equal(restore(files, 2, p, 3, &t3[p], &err), PF_OK);
        int64_t c = 0;
        pf_dyn_row r;
        while (pf_dyn_next(t3[p], &c, &r))
            assert_int_equal(pf_dyn_owner(r.id, 3), p);
        rows3 += pf_dyn_stats_get(t3[p]).rows;
        assert_int_equal(pf_dyn_stats_get(t3[p]).admitted, 0);
    }
    assert_int_equal(rows3, pf_dyn_stats_get(t[0]).rows + pf_dyn_stats_get(t[1]).rows);
    unload(files, 2);
    save(three, t3, 3);
    pf_safetensors *files3[3];
    load(three, 3, files3);
    assert_int_equal(restore(files3, 3, 0, 1, &t1[0], &err), PF_OK);
    unload(files3, 3);
    save(one, t1, 1);

    uint64_t *ids2, *ids3, *ids1;
    float *v2, *v3, *v1;
    int64_t n2, n3, n1;
    export_of(two, 2, &ids2, &v2, &n2);
    export_of(three, 3, &ids3, &v3, &n3);
    export_of(one, 1, &ids1, &v1, &n1);
    assert_true(n2 > 100);
    assert_int_equal(n2, n3);
    assert_int_equal(n2, n1);
    assert_memory_equal(ids2, ids3, (size_t)n2 * sizeof *ids2);
    assert_memory_equal(ids2, ids1, (size_t)n2 * sizeof *ids2);
    assert_memory_equal(v2, v3, (size_t)n2 * DIM * sizeof(float));
    assert_memory_equal(v2, v1, (size_t)n2 * DIM * sizeof(float));
    pf_free(ids2), pf_free(ids3), pf_free(ids1), pf_free(v2), pf_free(v3), pf_free(v1);
    for (int p = 0; p < 3; p++)
        pf_dyn_destroy(t3[p]);
    pf_dyn_destroy(t1[0]);
    pf_dyn_destroy(t[0]);
    pf_dyn_destroy(t[1]);
}

/* An id its old ps counted twice under min_count 3 is admitted on its third update after a
 * restore into another number of ps tasks: the summed sketches keep every id's count. */
static void test_sketch_survives(void **state) {
    (void)state;
    pf_dyn_config cfg = config();
    cfg.min_count = 3;
    cfg.probability = 1;
    pf_dyn_table *t[2], *fresh;
    for (int p = 0; p < 2; p++)
        assert_int_equal(pf_dyn_create(&cfg, &t[p]), PF_OK);
    assert_int_equal(pf_dyn_create(&cfg, &fresh), PF_OK);
    uint64_t id = (1ull << 39) + 12345;
    int owner = pf_dyn_owner(id, 2);
    float *row = NULL, *slots[PF_DYN_MAX_SLOTS];
    for (int64_t s = 1; s <= 2; s++) {
        assert_int_equal(pf_dyn_update_row(t[owner], id, s, &row, slots), PF_OK);
        assert_null(row);
    }
    char dir[256];
    step_dir("sketch", dir, sizeof dir);
    save(dir, t, 2);
    pf_safetensors *files[2];
    load(dir, 2, files);
    pf_error err;
    pf_dyn_table *one;
    assert_int_equal(pf_dyn_create(&cfg, &one), PF_OK);
    assert_int_equal(
        pf_dyn_restore(one, (const pf_safetensors *const *)files, 2, VAR, suffix, 0, 1, NULL, &err),
        PF_OK);
    assert_int_equal(pf_dyn_update_row(one, id, 3, &row, slots), PF_OK);
    assert_non_null(row);
    assert_int_equal(pf_dyn_update_row(fresh, id, 3, &row, slots), PF_OK);
    assert_null(row); /* without the counts: its first update */
    unload(files, 2);
    pf_dyn_destroy(one);
    pf_dyn_destroy(fresh);
    pf_dyn_destroy(t[0]);
    pf_dyn_destroy(t[1]);
}

/* Two full ps tasks restored into one of the same max_rows: refused, no row dropped. */
static void test_repartition_over_max_rows(void **state) {
    (void)state;
    pf_dyn_table *t[2];
    train_two(t, 60);
    int64_t rows = pf_dyn_stats_get(t[0]).rows + pf_dyn_stats_get(t[1]).rows;
    char dir[256];
    step_dir("full", dir, sizeof dir);
    save(dir, t, 2);
    pf_safetensors *files[2];
    load(dir, 2, files);
    pf_dyn_config small = config();
    small.max_rows = rows - 1;
    pf_dyn_table *one;
    pf_error err;
    assert_int_equal(pf_dyn_create(&small, &one), PF_OK);
    assert_int_equal(
        pf_dyn_restore(one, (const pf_safetensors *const *)files, 2, VAR, suffix, 0, 1, NULL, &err),
        PF_ERR_RANGE);
    assert_non_null(strstr(err.message, "max_rows"));
    pf_dyn_destroy(one);
    /* asked to, the restore drops the least recently updated row and says so */
    assert_int_equal(pf_dyn_create(&small, &one), PF_OK);
    int64_t dropped = -1;
    assert_int_equal(pf_dyn_restore(one, (const pf_safetensors *const *)files, 2, VAR, suffix, 0, 1,
                                    &dropped, &err),
                     PF_OK);
    assert_int_equal(dropped, 1);
    assert_int_equal(pf_dyn_stats_get(one).rows, rows - 1);
    assert_int_equal(pf_dyn_stats_get(one).evicted, 1);
    int64_t oldest = INT64_MAX, cursor = 0;
    pf_dyn_row row;
    for (int k = 0; k < 2; k++) /* the oldest row of the two tables is the one gone */
        for (cursor = 0; pf_dyn_next(t[k], &cursor, &row);)
            if (row.last_step < oldest)
                oldest = row.last_step;
    for (cursor = 0; pf_dyn_next(one, &cursor, &row);)
        assert_true(row.last_step >= oldest);
    pf_dyn_destroy(one);
    pf_dyn_config enough = config();
    enough.max_rows = rows;
    assert_int_equal(pf_dyn_create(&enough, &one), PF_OK);
    assert_int_equal(
        pf_dyn_restore(one, (const pf_safetensors *const *)files, 2, VAR, suffix, 0, 1, NULL, &err),
        PF_OK);
    assert_int_equal(pf_dyn_stats_get(one).rows, rows);
    pf_dyn_destroy(one);
    unload(files, 2);
    pf_dyn_destroy(t[0]);
    pf_dyn_destroy(t[1]);
}

static void test_flipped_byte(void **state) {
    (void)state;
    pf_dyn_table *t[2];
    train_two(t, 20);
    char dir[256], path[300];
    step_dir("flip", dir, sizeof dir);
    save(dir, t, 2);
    pf_error err;
    pf_checkpoint_manifest m = {0};
    assert_int_equal(pf_checkpoint_manifest_read(dir, &m, &err), PF_OK);
    snprintf(path, sizeof path, "%s/ps-1.safetensors", dir);
    size_t len = 0;
    unsigned char *bytes = slurp(path, &len);
    bytes[len - 40] ^= 0x10; /* in the table's last tensors */
    spill(path, bytes, len);
    free(bytes);
    assert_int_equal(pf_checkpoint_verify(dir, &m, PF_CKPT_VERIFY_CRC, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "ps-1"));
    pf_checkpoint_manifest_deinit(&m);
    /* the float-only reader refuses a file of integer tensors */
    pf_safetensors *st = NULL;
    snprintf(path, sizeof path, "%s/ps-0.safetensors", dir);
    assert_int_equal(pf_safetensors_read(path, &st, &err), PF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "U64"));
    pf_dyn_destroy(t[0]);
    pf_dyn_destroy(t[1]);
}

/* Writes one file of VAR's tensors from arrays, the sketch and counters empty. */
static void write_rows(const char *path, const uint64_t *ids, const int64_t *steps,
                       const float *values, int64_t n, int dim, bool with_slots) {
    static uint8_t sketch[1024];
    static const uint64_t admission[3] = {0, 0, 11}; /* config()'s seed */
    static const int64_t stats[3] = {0, 0, 0};
    pf_tensor_view v[8];
    int k = 0;
    v[k++] = (pf_tensor_view){
        .name = VAR "/ids", .rank = 1, .shape = {n}, .raw = ids, .dtype = PF_DTYPE_U64};
    v[k++] = (pf_tensor_view){
        .name = VAR "/steps", .rank = 1, .shape = {n}, .raw = steps, .dtype = PF_DTYPE_I64};
    v[k++] = (pf_tensor_view){.name = VAR, .rank = 2, .shape = {n, dim}, .data = values};
    if (with_slots) {
        v[k++] =
            (pf_tensor_view){.name = VAR "/Adam", .rank = 2, .shape = {n, dim}, .data = values};
        v[k++] =
            (pf_tensor_view){.name = VAR "/Adam_1", .rank = 2, .shape = {n, dim}, .data = values};
    }
    v[k++] = (pf_tensor_view){
        .name = VAR "/sketch", .rank = 1, .shape = {1024}, .raw = sketch, .dtype = PF_DTYPE_U8};
    v[k++] = (pf_tensor_view){
        .name = VAR "/admission", .rank = 1, .shape = {3}, .raw = admission, .dtype = PF_DTYPE_U64};
    v[k++] = (pf_tensor_view){
        .name = VAR "/stats", .rank = 1, .shape = {3}, .raw = stats, .dtype = PF_DTYPE_I64};
    pf_error err;
    assert_int_equal(pf_safetensors_write(path, v, k, NULL, NULL, 0, &err), PF_OK);
}

/* Restores ps 0 of 1 from one file written by write_rows; the status and the message. */
static pf_status restore_file(const uint64_t *ids, const int64_t *steps, const float *values,
                              int64_t n, int dim, bool with_slots, pf_error *err) {
    char path[300];
    snprintf(path, sizeof path, "%s/bad.safetensors", fixture_root);
    write_rows(path, ids, steps, values, n, dim, with_slots);
    pf_safetensors *st = NULL;
    assert_int_equal(pf_safetensors_read_any(path, &st, err), PF_OK);
    pf_dyn_table *t;
    pf_status s = restore(&st, 1, 0, 1, &t, err);
    pf_dyn_destroy(t);
    pf_safetensors_destroy(st);
    return s;
}

static void test_bad_tables(void **state) {
    (void)state;
    uint64_t ids[3] = {1, 2, 3};
    int64_t steps[3] = {1, 2, 3};
    float values[3 * (DIM + 1)] = {0};
    pf_error err;
    assert_int_equal(restore_file(ids, steps, values, 3, DIM, true, &err), PF_OK);
    uint64_t twice[3] = {1, 2, 1};
    assert_int_equal(restore_file(twice, steps, values, 3, DIM, true, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "id 1 has two rows"));
    int64_t back[3] = {1, 3, 2};
    assert_int_equal(restore_file(ids, back, values, 3, DIM, true, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "out of order"));
    assert_int_equal(restore_file(ids, steps, values, 3, DIM + 1, true, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "'" VAR "'"));
    assert_int_equal(restore_file(ids, steps, values, 3, DIM, false, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, VAR "/Adam"));
    values[DIM + 2] = NAN;
    assert_int_equal(restore_file(ids, steps, values, 3, DIM, true, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "id 2"));
    values[DIM + 2] = 0;

    /* a file of ps 0 of 2 holding a row of ps 1 */
    uint64_t other = 0;
    while (pf_dyn_owner(other, 2) != 1)
        other++;
    char path[300];
    snprintf(path, sizeof path, "%s/ps0.safetensors", fixture_root);
    write_rows(path, &other, steps, values, 1, DIM, true);
    pf_safetensors *files[2] = {NULL, NULL};
    assert_int_equal(pf_safetensors_read_any(path, &files[0], &err), PF_OK);
    files[1] = files[0];
    pf_dyn_table *t;
    assert_int_equal(restore(files, 2, 0, 2, &t, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "belongs to ps 1"));
    pf_dyn_destroy(t);
    pf_safetensors_destroy(files[0]);

    /* a file without the table: the export says which */
    pf_tensor_view plain = {.name = "dense/kernel", .rank = 1, .shape = {3}, .data = values};
    assert_int_equal(pf_safetensors_write(path, &plain, 1, NULL, NULL, 0, &err), PF_OK);
    assert_int_equal(pf_safetensors_read_any(path, &files[0], &err), PF_OK);
    uint64_t *eids;
    float *evalues;
    int64_t n;
    int dim;
    assert_int_equal(pf_dyn_export_rows((const pf_safetensors *const *)files, 1, VAR, &eids,
                                        &evalues, &n, &dim, &err),
                     PF_ERR_NOT_FOUND);
    pf_safetensors_destroy(files[0]);

    /* another seed: the sketch would count other cells */
    pf_dyn_config seeded = config();
    seeded.seed = 12;
    snprintf(path, sizeof path, "%s/seeded.safetensors", fixture_root);
    write_rows(path, ids, steps, values, 3, DIM, true);
    assert_int_equal(pf_safetensors_read_any(path, &files[0], &err), PF_OK);
    assert_int_equal(pf_dyn_create(&seeded, &t), PF_OK);
    assert_int_equal(
        pf_dyn_restore(t, (const pf_safetensors *const *)files, 1, VAR, suffix, 0, 1, NULL, &err),
        PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "seed 11"));
    pf_dyn_destroy(t);
    pf_safetensors_destroy(files[0]);

    /* a table with a non-finite row is not taken */
    pf_dyn_config cfg = config();
    cfg.min_count = 0;
    cfg.probability = 1;
    assert_int_equal(pf_dyn_create(&cfg, &t), PF_OK);
    float *row, *slots[PF_DYN_MAX_SLOTS];
    assert_int_equal(pf_dyn_update_row(t, 77, 1, &row, slots), PF_OK);
    slots[1][3] = INFINITY;
    pf_dyn_snapshot s;
    assert_int_equal(pf_dyn_snapshot_take(t, VAR, suffix, &s, &err), PF_ERR_NONFINITE);
    assert_non_null(strstr(err.message, "id 77"));
    assert_int_equal(s.n, 0);
    pf_dyn_destroy(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_restore_same_ps, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_repartition, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_sketch_survives, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_repartition_over_max_rows, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_flipped_byte, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_bad_tables, fixture_setup, fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
