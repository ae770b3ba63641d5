/* test_rows.c - worker/rows.h: the compact model of a batch's rows and the plan that maps a
 * batch's ids onto it, checked against hand-worked layouts: a table partitioned over two
 * shards, repeated, padded and invalid ids, and a table smaller than a batch can name.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/model.h"
#include "psflow/placement.h"
#include "worker/rows.h"

/* Feature "a": vocab 10, dim 2, max_ids 2, split over 2 shards (rows 0-4 and 5-9);
 * feature "b": vocab 3, dim 1, max_ids 1; an mlp with one hidden layer of 4. */
static const char *JSON =
    "{\"name\": \"r\", \"replicas\": {\"ps\": 2, \"worker\": 1},"
    " \"model\": {\"type\": \"mlp\", \"hidden\": [4], \"outputs\": 2, \"embeddings\": ["
    "{\"name\": \"a\", \"vocab\": 10, \"dim\": 2, \"max_ids\": 2},"
    "{\"name\": \"b\", \"vocab\": 3, \"dim\": 1}]},"
    " \"placement\": {\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 2}},"
    " \"data\": {\"format\": \"libsvm\", \"train\": [\"unused\"]},"
    " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}}";

static void test_layout_and_plan(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_error err;
    assert_int_equal(pf_job_spec_parse(JSON, strlen(JSON), &spec, &err), PF_OK);
    pf_placement pl;
    assert_int_equal(pf_placement_compute(&spec, &pl), PF_OK);
    assert_string_equal(pl.shards[0].name, "a/embeddings/part_0");
    assert_int_equal(pl.shards[1].row_offset, 5);
    assert_string_equal(pl.shards[2].name, "b/embeddings/part_0");

    worker_rows r;
    assert_int_equal(worker_rows_init(&r, &spec.model, 3), PF_OK);
    /* a: 3 examples x 2 ids = 6 rows; b: 3 ids but only 3 rows exist */
    assert_int_equal(r.cap[0], 6);
    assert_int_equal(r.cap[1], 3);
    assert_int_equal(r.table_off[0], 0);
    assert_int_equal(r.table_off[1], 12);
    /* full tables 20 + 3 floats, compact 12 + 3: dense variables move 8 back */
    assert_int_equal(r.dense_shift, 8);
    assert_int_equal(r.n_params, pf_model_num_params(&spec.model) - 8);
    assert_int_equal(r.compact.embeddings[0].vocab, 6);

    worker_row_plan p;
    assert_int_equal(worker_row_plan_init(&p, &r, &pl), PF_OK);
    /* slots per example: a's 2 ids, 2 weights, then b's id and weight */
    float x[3 * 6] = {
        7, 2,    1, 1, 0, 1, /* a: 7, 2; b: 0 */
        2, -1,   1, 0, 2, 1, /* a: 2 (and padding); b: 2 */
        9, 3.5f, 1, 1, 5, 1, /* a: 9 and a fraction (invalid); b: 5 (past its 3 rows) */
    };
    worker_rows_plan(&r, &pl, x, 3, &p);
    assert_int_equal(p.n[0], 3); /* 2, 7, 9 */
    assert_int_equal(p.ids[0][0], 2);
    assert_int_equal(p.ids[0][1], 7);
    assert_int_equal(p.ids[0][2], 9);
    assert_int_equal(p.n[1], 2); /* 0, 2 */
    /* ids became compact rows; padding stays; invalid ids became NaN */
    assert_true(x[0] == 1 && x[1] == 0);
    assert_true(x[6] == 0 && x[7] == -1);
    assert_true(x[12] == 2 && isnan(x[13]));
    assert_true(x[4] == 0 && x[10] == 1 && isnan(x[16]));
    assert_true(x[2] == 1 && x[3] == 1); /* weights untouched */
    /* shard 0 holds rows 0-4 (id 2), shard 1 rows 5-9 (7, 9 as its rows 2, 4) */
    assert_int_equal(p.first[0], 0);
    assert_int_equal(p.count[0], 1);
    assert_int_equal(p.first[1], 1);
    assert_int_equal(p.count[1], 2);
    assert_int_equal(p.rel[0][0], 2);
    assert_int_equal(p.rel[0][1], 2);
    assert_int_equal(p.rel[0][2], 4);
    /* b's 3 rows are split 2 + 1: id 0 on part_0, id 2 on part_1 (its row 0) */
    assert_int_equal(p.first[2], 0);
    assert_int_equal(p.count[2], 1);
    assert_int_equal(p.first[3], 1);
    assert_int_equal(p.count[3], 1);
    assert_int_equal(p.rel[1][1], 0);
    /* a dense shard holds no rows */
    assert_string_equal(pl.shards[4].name, "dense_0/kernel/part_0");
    for (int s = 4; s < pl.n_shards; s++)
        assert_int_equal(p.count[s], 0);
    size_t dense = pl.shards[4].offset;
    assert_int_equal(worker_rows_dense_at(&r, &pl.shards[4]), dense - 8);

    /* A batch without valid ids plans no rows. */
    float empty[6] = {-1, -1, 0, 0, -1, 0};
    worker_rows_plan(&r, &pl, empty, 1, &p);
    assert_int_equal(p.n[0], 0);
    assert_int_equal(p.n[1], 0);
    assert_int_equal(p.count[0] + p.count[1] + p.count[2] + p.count[3], 0);

    worker_row_plan_deinit(&p);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

static void test_refuses_dense_models(void **state) {
    (void)state;
    pf_model_spec m;
    memset(&m, 0, sizeof m);
    m.type = PF_MODEL_SOFTMAX;
    m.inputs = 4;
    m.outputs = 2;
    worker_rows r;
    assert_int_equal(worker_rows_init(&r, &m, 10), PF_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_and_plan),
        cmocka_unit_test(test_refuses_dense_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
