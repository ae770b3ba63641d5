/* test_dyn_batch.c - dynamic tables in one process: a 64-bit id in an example's slots
 * (pf_model_put_id, pf_model_get_id), a batch planned into the compact model
 * (dyn_batch.h), and psflow train's session on synthetic_ctr data: it learns, admission
 * (min_count) gives rows only to ids seen often enough, the row cap and steps_to_live evict,
 * the same run twice gives the same tables, the footprint counts the tables at their caps, and
 * a saved file's tables restore as they were.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "psflow/data.h"
#include "psflow/dyn_batch.h"
#include "psflow/dyn_checkpoint.h"
#include "psflow/footprint.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/safetensors.h"
#include "psflow/session.h"
#include "psflow/spec.h"

static void test_id_slots(void **state) {
    (void)state;
    const uint64_t ids[] = {
        0, 1, (1ULL << 22) - 1, 1ULL << 22, (1ULL << 40) - 1, 0x123456789abcdefULL, UINT64_MAX};
    float slots[2 * PF_DYN_ID_SLOTS];
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        pf_model_put_id(slots, 1, ids[i]);
        uint64_t got = 0;
        assert_int_equal(pf_model_get_id(slots, 1, &got), 1);
        assert_true(got == ids[i]);
        for (int j = 0; j < PF_DYN_ID_SLOTS; j++) /* each slot a whole float below 2^22 */
            assert_true(slots[PF_DYN_ID_SLOTS + j] < (float)(1 << 22));
    }
    uint64_t got;
    float pad[PF_DYN_ID_SLOTS] = {-1, -1, -1};
    assert_int_equal(pf_model_get_id(pad, 0, &got), 0);
    const float bad[][PF_DYN_ID_SLOTS] = {
        {0.5f, 0, 0},       /* a fraction */
        {-2, 0, 0},         /* negative */
        {0, -1, 0},         /* padding only in the first slot */
        {4194304.0f, 0, 0}, /* 2^22: past a slot's bits */
        {0, 0, 1 << 20},    /* past 64 bits */
        {NAN, 0, 0},        /* not a number */
        {0, INFINITY, 0},   /* not finite */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(pf_model_get_id(bad[i], 0, &got), -1);
}

/* csv cells of a dynamic table: integer ids as they are, strings by their whole FNV-1a hash
 * with `hash`; an id past 2^63 - 1, a sign or a letter refused naming line and field. */
static void test_csv_ids(void **state) {
    (void)state;
    pf_model_spec m = {.type = PF_MODEL_SOFTMAX, .outputs = 2, .n_embeddings = 3};
    m.embeddings[0] = (pf_embedding_spec){
        .name = "u", .dim = 2, .max_ids = 1, .max_rows = 9, .kind = PF_TABLE_DYNAMIC};
    m.embeddings[1] = (pf_embedding_spec){.name = "f", .vocab = 5, .dim = 2, .max_ids = 1};
    m.embeddings[2] = (pf_embedding_spec){
        .name = "s", .dim = 2, .max_ids = 2, .max_rows = 9, .hash = true, .kind = PF_TABLE_DYNAMIC};
    const char *text = "1,9223372036854775807,4,a|b\n0,,0,\n";
    pf_dataset ds;
    pf_error err;
    assert_int_equal(pf_csv_parse_ids(text, strlen(text), "t.csv", &m, true, &ds, &err), PF_OK);
    assert_int_equal(ds.n, 2);
    assert_int_equal(ds.features, 4 + 2 + 8);
    uint64_t id;
    assert_int_equal(pf_model_get_id(ds.x, 0, &id), 1);
    assert_true(id == (uint64_t)INT64_MAX);
    assert_true(ds.x[3] == 1 && ds.x[4] == 4 && ds.x[5] == 1);
    assert_int_equal(pf_model_get_id(ds.x + 6, 0, &id), 1);
    assert_true(id == 0xaf63dc4c8601ec8cULL); /* FNV-1a 64 of "a" */
    assert_int_equal(pf_model_get_id(ds.x + 6, 1, &id), 1);
    assert_true(id == 0xaf63df4c8601f1a5ULL); /* of "b" */
    assert_true(ds.x[12] == 1 && ds.x[13] == 1);
    assert_int_equal(pf_model_get_id(ds.x + 14, 0, &id), 0); /* the empty cells: padding */
    assert_int_equal(pf_model_get_id(ds.x + 14 + 6, 0, &id), 0);
    pf_dataset_deinit(&ds);
    const char *bad[] = {"1,9223372036854775808,0,a\n", "1,-1,0,a\n", "1,12x,0,a\n",
                         "1,1,0,a|b|c\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(pf_csv_parse_ids(bad[i], strlen(bad[i]), "t.csv", &m, true, &ds, &err),
                         PF_ERR_FORMAT);
        if (!strstr(err.message, "t.csv: line 1"))
            fail_msg("%s", err.message);
    }
}

/* One dynamic feature of 2 ids an example, then a fixed one, then 1 numeric input. */
static pf_model_spec mixed_model(void) {
    pf_model_spec m = {
        .type = PF_MODEL_SOFTMAX, .outputs = 2, .n_embeddings = 2, .numeric_inputs = 1};
    m.embeddings[0] = (pf_embedding_spec){
        .name = "d", .dim = 2, .max_ids = 2, .max_rows = 100, .kind = PF_TABLE_DYNAMIC};
    m.embeddings[1] = (pf_embedding_spec){.name = "f", .vocab = 5, .dim = 3, .max_ids = 1};
    return m;
}

static void test_plan(void **state) {
    (void)state;
    pf_model_spec m = mixed_model();
    assert_int_equal(pf_model_input_width(&m), 2 * 3 + 2 + 1 + 1 + 1);
    pf_dyn_batch b;
    assert_int_equal(pf_dyn_batch_init(&b, &m, 3), PF_OK);
    assert_int_equal(b.cap[0], 6);
    assert_int_equal(b.compact.embeddings[0].kind, PF_TABLE_FIXED);
    assert_int_equal(b.compact.embeddings[0].vocab, 6);
    assert_int_equal(b.out_width, 2 + 2 + 1 + 1 + 1);
    float x[3 * 11], out[3 * 7];
    const uint64_t big = 1ULL << 39;
    for (int i = 0; i < 3; i++)
        pf_model_pad_example(&m, x + i * 11);
    pf_model_put_id(x, 0, big); /* example 0: big and 7 */
    pf_model_put_id(x, 1, 7);
    x[6] = 0.5f;
    x[7] = 2;
    x[8] = 4; /* its fixed id */
    x[9] = 1;
    x[10] = 3.5f;
    pf_model_put_id(x + 11, 0, 7); /* example 1: 7 and a slot that holds no id */
    x[11 + 3] = 0.25f;
    x[11 + 4] = 1;
    x[11 + 5] = 0;
    /* example 2: padding only */
    pf_dyn_batch_plan(&b, x, 3, out);
    assert_int_equal(b.n[0], 2);
    assert_true(b.ids[0][0] == 7 && b.ids[0][1] == big);
    assert_int_equal(b.invalid[0], 1);
    /* example 0: rows 1 (big) and 0 (7), weights as they were, the rest copied */
    assert_true(out[0] == 1 && out[1] == 0 && out[2] == 0.5f && out[3] == 2);
    assert_true(out[4] == 4 && out[5] == 1 && out[6] == 3.5f);
    assert_true(out[7] == 0 && isnan(out[8]));
    assert_true(out[14] == -1 && out[15] == -1 && out[16] == 0 && out[17] == 0);
    pf_dyn_batch_deinit(&b);

    pf_model_spec fixed = m;
    fixed.embeddings[0].kind = PF_TABLE_FIXED;
    fixed.embeddings[0].vocab = 10;
    assert_int_equal(pf_dyn_batch_init(&b, &fixed, 3), PF_ERR_INVALID);
    pf_model *model;
    assert_int_equal(pf_model_create(&m, pf_backend_reference(), 4, &model), PF_ERR_INVALID);
}

static const char *const DYN_SPEC =
    "{\"name\": \"dyn\", \"model\": {\"type\": \"mlp\", \"hidden\": [16], \"outputs\": 2, "
    "\"embeddings\": [{\"name\": \"user\", \"kind\": \"dynamic\", \"max_rows\": %lld, \"dim\": "
    "8%s},"
    " {\"name\": \"item\", \"vocab\": 500, \"dim\": 8}]}, "
    "\"data\": {\"format\": \"synthetic_ctr\", \"n\": 20000, \"distinct_ids\": %lld, "
    "\"zipf\": 1.05%s}, \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.2}, "
    "\"training\": {\"batch_size\": 100, \"max_steps\": %d, \"seed\": 5}}";

/* A session of DYN_SPEC: extra in the user table, data in the data object; steps taken. */
static pf_session *dyn_session_data(long long max_rows, const char *extra, long long distinct,
                                    const char *data, int steps, pf_job_spec *spec) {
    char text[2048];
    snprintf(text, sizeof text, DYN_SPEC, max_rows, extra, distinct, data, steps);
    pf_error err;
    pf_error_clear(&err);
    if (pf_job_spec_parse(text, strlen(text), spec, &err) != PF_OK)
        fail_msg("spec: %s", err.message);
    pf_session_options o = {.backend = pf_backend_reference(), .load_test = true};
    pf_session *s;
    if (pf_session_create(spec, &o, &s, &err) != PF_OK)
        fail_msg("session: %s", err.message);
    for (int i = 0; i < steps; i++)
        assert_true(isfinite(pf_session_step(s)));
    return s;
}

static pf_session *dyn_session(long long max_rows, const char *extra, long long distinct, int steps,
                               pf_job_spec *spec) {
    return dyn_session_data(max_rows, extra, distinct, "", steps, spec);
}

/* How often each id of the user feature appears among the training examples. */
static int64_t id_count(const pf_session *s, uint64_t id) {
    const pf_dataset *ds = pf_session_train_set(s);
    int64_t n = 0;
    for (int64_t i = 0; i < ds->n; i++) {
        uint64_t got;
        if (pf_model_get_id(ds->x + (size_t)i * (size_t)ds->features, 0, &got) > 0 && got == id)
            n++;
    }
    return n;
}

static void test_learns(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_session *s = dyn_session(100000, "", 2000, 400, &spec);
    pf_eval ev;
    pf_session_evaluate(s, &ev);
    assert_true(ev.auc > 0.6); /* random guessing is 0.5 */
    pf_dyn_stats st = pf_dyn_stats_get(pf_session_table(s, 0));
    assert_null(pf_session_table(s, 1)); /* item is fixed */
    assert_true(st.rows > 100 && st.rows <= 2000);
    assert_int_equal(st.refused, 0); /* no min_count: every id admitted on its first update */
    assert_int_equal(st.evicted, 0);
    /* each row's id is one the data has: a 40-bit id of a rank */
    int64_t cursor = 0;
    pf_dyn_row row;
    while (pf_dyn_next(pf_session_table(s, 0), &cursor, &row))
        assert_true(row.id < (1ULL << 40));
    pf_session_destroy(s);
    pf_job_spec_deinit(&spec);
}

static void test_admission(void **state) {
    (void)state;
    pf_job_spec spec;
    /* A sketch far larger than the ids: its counts are exact here. */
    pf_session *s =
        dyn_session(100000, ", \"min_count\": 3, \"sketch_bytes\": 1048576", 5000, 200, &spec);
    const pf_dyn_table *t = pf_session_table(s, 0);
    pf_dyn_stats st = pf_dyn_stats_get(t);
    assert_true(st.rows > 0);
    assert_true(st.refused >= 2 * st.rows); /* each row's first two updates were refused */
    int64_t cursor = 0;
    pf_dyn_row row;
    int checked = 0;
    while (pf_dyn_next(t, &cursor, &row) && checked < 50) {
        assert_true(id_count(s, row.id) >= 3);
        checked++;
    }
    pf_session_destroy(s);
    pf_job_spec_deinit(&spec);
}

static void test_eviction(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_session *s = dyn_session(64, "", 5000, 100, &spec); /* the row cap */
    pf_dyn_stats st = pf_dyn_stats_get(pf_session_table(s, 0));
    assert_int_equal(st.rows, 64);
    assert_true(st.evicted > 0);
    assert_int_equal(st.admitted - st.evicted, st.rows);
    pf_session_destroy(s);
    pf_job_spec_deinit(&spec);

    s = dyn_session(100000, ", \"steps_to_live\": 10", 5000, 100, &spec); /* idle rows */
    const pf_dyn_table *t = pf_session_table(s, 0);
    st = pf_dyn_stats_get(t);
    assert_true(st.evicted > 0);
    int64_t cursor = 0;
    pf_dyn_row row;
    while (pf_dyn_next(t, &cursor, &row))
        assert_true(row.last_step >= 99 - 10);
    pf_session_destroy(s);
    pf_job_spec_deinit(&spec);
}

/* Two runs of one spec hold the same rows with the same values; a saved file restores them. */
static void test_same_and_saved(void **state) {
    (void)state;
    pf_job_spec a_spec, b_spec;
    pf_session *a = dyn_session(300, ", \"min_count\": 2", 3000, 150, &a_spec);
    pf_session *b = dyn_session(300, ", \"min_count\": 2", 3000, 150, &b_spec);
    const pf_dyn_table *ta = pf_session_table(a, 0), *tb = pf_session_table(b, 0);
    assert_int_equal(pf_dyn_stats_get(ta).rows, pf_dyn_stats_get(tb).rows);
    int64_t ca = 0, cb = 0;
    pf_dyn_row ra, rb;
    while (pf_dyn_next(ta, &ca, &ra)) {
        assert_true(pf_dyn_next(tb, &cb, &rb));
        assert_true(ra.id == rb.id && ra.last_step == rb.last_step);
        assert_memory_equal(ra.values, rb.values, 8 * sizeof(float));
        assert_memory_equal(ra.slots[0], rb.slots[0], 8 * sizeof(float));
    }

    char path[] = "/tmp/test_dyn_batch_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    pf_dyn_snapshot snap;
    pf_error err;
    const char *suffix[] = {"Adagrad"};
    assert_int_equal(pf_dyn_snapshot_take(ta, "user/embeddings", suffix, &snap, &err), PF_OK);
    assert_int_equal(pf_session_save(a, path, snap.views, snap.n, &err), PF_OK);
    pf_dyn_snapshot_free(&snap);
    pf_safetensors *f;
    assert_int_equal(pf_safetensors_read_any(path, &f, &err), PF_OK);
    pf_tensor_view v;
    assert_true(pf_safetensors_find(f, "item/embeddings", &v) >= 0);
    assert_true(v.shape[0] == 500 && v.shape[1] == 8);
    assert_true(pf_safetensors_find(f, "dense_0/kernel", &v) >= 0);
    assert_true(pf_safetensors_find(f, "user/embeddings/ids", &v) >= 0);
    pf_dyn_config cfg;
    pf_dyn_table_config(&a_spec, 0, 300, &cfg);
    pf_dyn_table *back;
    assert_int_equal(pf_dyn_create(&cfg, &back), PF_OK);
    const pf_safetensors *files[] = {f};
    assert_int_equal(pf_dyn_restore(back, files, 1, "user/embeddings", suffix, 0, 1, NULL, &err),
                     PF_OK);
    ca = cb = 0;
    while (pf_dyn_next(ta, &ca, &ra)) {
        assert_true(pf_dyn_next(back, &cb, &rb));
        assert_true(ra.id == rb.id && ra.last_step == rb.last_step);
        assert_memory_equal(ra.values, rb.values, 8 * sizeof(float));
    }
    assert_false(pf_dyn_next(back, &cb, &rb));
    pf_dyn_destroy(back);
    pf_safetensors_destroy(f);
    unlink(path);
    pf_session_destroy(a);
    pf_session_destroy(b);
    pf_job_spec_deinit(&a_spec);
    pf_job_spec_deinit(&b_spec);
}

/* data.shift_step: after it, every dynamic id is one no earlier batch had (bit 40), with the
 * same true weight, and the test set is all shifted; the tables learn the new ids. */
static void test_shift(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_session *s = dyn_session(100000, "", 2000, 1, &spec);
    const pf_dataset *test = pf_session_eval_set(s);
    pf_dataset copy;
    assert_int_equal(pf_dataset_alloc(&copy, 10, test->features), PF_OK);
    memcpy(copy.x, test->x, 10 * (size_t)test->features * sizeof(float));
    pf_synthetic_ctr_shift(&spec.model, copy.x, 10);
    for (int i = 0; i < 10; i++) {
        const float *a = test->x + (size_t)i * (size_t)test->features;
        const float *b = copy.x + (size_t)i * (size_t)test->features;
        uint64_t x, y;
        assert_int_equal(pf_model_get_id(a, 0, &x), 1);
        assert_int_equal(pf_model_get_id(b, 0, &y), 1);
        assert_true(y == (x | (1ULL << 40)) && x < (1ULL << 40));
        assert_true(a[4] == b[4]); /* the fixed table's id is as it was */
        assert_true(pf_synthetic_ctr_logit(&spec, a) == pf_synthetic_ctr_logit(&spec, b));
    }
    pf_dataset_deinit(&copy);
    pf_session_destroy(s);
    pf_job_spec_deinit(&spec);

    /* a dynamic table after a fixed one and before numeric inputs: only its ids change */
    pf_model_spec m = mixed_model();
    pf_model_spec late = m;
    late.embeddings[0] = m.embeddings[1];
    late.embeddings[1] = m.embeddings[0];
    float x[2 * 11];
    for (int i = 0; i < 2; i++) {
        pf_model_pad_example(&late, x + i * 11);
        x[i * 11] = 3;                                       /* the fixed id */
        pf_model_put_id(x + i * 11 + 2, 1, 5 + (uint64_t)i); /* the dynamic table's second id */
        x[i * 11 + 10] = 0.5f;                               /* the numeric input */
    }
    pf_synthetic_ctr_shift(&late, x, 2);
    for (int i = 0; i < 2; i++) {
        uint64_t id;
        assert_true(x[i * 11] == 3 && x[i * 11 + 10] == 0.5f);
        assert_int_equal(pf_model_get_id(x + i * 11 + 2, 0, &id), 0); /* padding stays */
        assert_int_equal(pf_model_get_id(x + i * 11 + 2, 1, &id), 1);
        assert_true(id == ((5 + (uint64_t)i) | (1ULL << 40)));
    }

    /* shifted from step 50 on, with rows idle 20 steps dropped: at the end the table holds
     * shifted ids only, and the test set (all shifted) is learnt */
    s = dyn_session_data(100000, ", \"steps_to_live\": 20", 2000, ", \"shift_step\": 50", 150,
                         &spec);
    const pf_dataset *shifted = pf_session_eval_set(s); /* every test id is a shifted one */
    for (int64_t i = 0; i < shifted->n; i++) {
        uint64_t id;
        assert_int_equal(
            pf_model_get_id(shifted->x + (size_t)i * (size_t)shifted->features, 0, &id), 1);
        assert_true(id >> 40 == 1);
    }
    const pf_dyn_table *t = pf_session_table(s, 0);
    int64_t cursor = 0, rows = 0;
    pf_dyn_row row;
    while (pf_dyn_next(t, &cursor, &row)) {
        assert_true(row.id >> 40 == 1);
        rows++;
    }
    assert_true(rows > 0);
    pf_eval ev;
    pf_session_evaluate(s, &ev);
    assert_true(ev.auc > 0.6);
    pf_session_destroy(s);
    pf_job_spec_deinit(&spec);
}

/* psflow train's memory check counts a dynamic table at its cap; ps tasks refuse it. */
static void test_footprint(void **state) {
    (void)state;
    char small[2048], large[2048];
    snprintf(small, sizeof small, DYN_SPEC, 1000LL, "", 100LL, "", 10);
    snprintf(large, sizeof large, DYN_SPEC, 10000000LL, "", 100LL, "", 10);
    pf_job_spec a, b;
    pf_error err;
    assert_int_equal(pf_job_spec_parse(small, strlen(small), &a, &err), PF_OK);
    assert_int_equal(pf_job_spec_parse(large, strlen(large), &b, &err), PF_OK);
    pf_footprint fa, fb;
    pf_footprint_estimate(&a, &fa);
    pf_footprint_estimate(&b, &fb);
    pf_dyn_config cfg;
    pf_dyn_table_config(&b, 0, 10000000, &cfg);
    assert_int_equal(fb.dynamic_bytes, pf_dyn_bytes_bound(&cfg));
    assert_true(fb.dynamic_bytes > 10000000LL * 8 * 4 * 2); /* values and adagrad's slot */
    assert_int_equal(fb.process_bytes - fa.process_bytes, fb.dynamic_bytes - fa.dynamic_bytes);
    assert_int_equal(pf_footprint_check_cluster(&b, &err), PF_OK); /* ps tasks hold them */
    b.replicas.evaluator = 1; /* an evaluator reads whole tables: none to read */
    assert_int_equal(pf_footprint_check_cluster(&b, &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/replicas/evaluator");
    pf_job_spec_deinit(&a);
    pf_job_spec_deinit(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_slots),       cmocka_unit_test(test_csv_ids),
        cmocka_unit_test(test_plan),           cmocka_unit_test(test_learns),
        cmocka_unit_test(test_admission),      cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_same_and_saved), cmocka_unit_test(test_footprint),
        cmocka_unit_test(test_shift),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
