/* test_data_plan.c - which examples a training task reads at each step (worker/data_plan.h):
 * the plain partition, skipped data steps, live membership changes and rollbacks past them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "psflow/data.h"
#include "worker/data_plan.h"

enum { B = 100 };

/* Without changes the plan is pf_shard_position: W tasks of batch b read what one process
 * with batch W*b reads. */
static void test_plain_partition(void **state) {
    (void)state;
    uint64_t skipped[4];
    worker_plan p;
    worker_plan_init(&p, 3, B, skipped, 4);
    for (uint64_t g = 0; g < 50; g++) {
        assert_int_equal(worker_plan_update(&p, g, 3), 0);
        for (int i = 0; i < 3; i++)
            assert_int_equal(worker_plan_position(&p, g, i),
                             pf_shard_position((int64_t)g, 3, i, B));
    }
}

/* A skipped data step is never fed again: every later step moves past it, in order. */
static void test_skips(void **state) {
    (void)state;
    uint64_t skipped[3];
    worker_plan p;
    worker_plan_init(&p, 2, B, skipped, 3);
    assert_int_equal(worker_plan_skip(&p, 661), 0);
    assert_int_equal(worker_plan_skip(&p, 100), 0);
    assert_int_equal(worker_plan_skip(&p, 661), 0); /* kept once */
    assert_int_equal(p.n_skipped, 2);
    assert_int_equal(skipped[0], 100);
    assert_int_equal(skipped[1], 661);
    assert_int_equal(worker_plan_data_step(&p, 99), 99);
    assert_int_equal(worker_plan_data_step(&p, 100), 101);
    assert_int_equal(worker_plan_data_step(&p, 659), 660);
    assert_int_equal(worker_plan_data_step(&p, 660), 662); /* past both */
    assert_int_equal(worker_plan_position(&p, 660, 1), 662 * 2 * B + B);
    assert_int_equal(worker_plan_skip(&p, 7), 0);
    assert_int_equal(worker_plan_skip(&p, 8), -1); /* full */
}

/* 3 -> 2 tasks at step 1000: from there the 2 tasks read on from where the 3 left off. */
static void test_membership_change(void **state) {
    (void)state;
    uint64_t skipped[1];
    worker_plan p;
    worker_plan_init(&p, 3, B, skipped, 1);
    assert_int_equal(worker_plan_update(&p, 999, 3), 0);
    assert_int_equal(worker_plan_update(&p, 1000, 2), 1);
    assert_int_equal(worker_plan_tasks(&p), 2);
    assert_int_equal(worker_plan_position(&p, 1000, 0), 1000 * 3 * B);
    assert_int_equal(worker_plan_position(&p, 1000, 1), 1000 * 3 * B + B);
    assert_int_equal(worker_plan_position(&p, 1001, 0), 1000 * 3 * B + 2 * B);
    assert_int_equal(worker_plan_update(&p, 1001, 2), 0);
}

/* A rollback to step 900 after the change at 1000 (the checkpoint holds what steps < 900
 * read, with 3 tasks): the 2 tasks there are now go on from 900's start under the 3-task
 * partition, so nothing before 900 is read again and nothing after it is skipped; the
 * change happens again at the step the replay gets to, from the stream's right place. */
static void test_rollback_past_change(void **state) {
    (void)state;
    uint64_t skipped[1];
    worker_plan p;
    worker_plan_init(&p, 3, B, skipped, 1);
    worker_plan_update(&p, 1000, 2);
    worker_plan_update(&p, 1200, 2);
    assert_int_equal(worker_plan_update(&p, 900, 2), 1);
    assert_int_equal(worker_plan_tasks(&p), 2);
    assert_int_equal(worker_plan_position(&p, 900, 0), 900 * 3 * B);
    assert_int_equal(worker_plan_position(&p, 900, 1), 900 * 3 * B + B);
    assert_int_equal(worker_plan_position(&p, 901, 0), 900 * 3 * B + 2 * B);
    /* Back to 3 tasks later: on from where the 2 left off. */
    assert_int_equal(worker_plan_update(&p, 950, 3), 1);
    assert_int_equal(worker_plan_position(&p, 950, 2), 900 * 3 * B + 50 * 2 * B + 2 * B);
    /* A rollback within the current segment changes nothing. */
    assert_int_equal(worker_plan_update(&p, 960, 3), 0);
    /* Back to before both: the plain partition of the start. */
    assert_int_equal(worker_plan_update(&p, 10, 3), 1);
    assert_int_equal(worker_plan_position(&p, 10, 1), pf_shard_position(10, 3, 1, B));
}

/* Rollbacks older than every remembered segment extrapolate the oldest one. */
static void test_segments_bounded(void **state) {
    (void)state;
    uint64_t skipped[1];
    worker_plan p;
    worker_plan_init(&p, 2, B, skipped, 1);
    for (int k = 1; k <= WORKER_PLAN_MAX_SEGMENTS + 10; k++)
        worker_plan_update(&p, (uint64_t)k * 10, 2 + (k & 1));
    assert_int_equal(p.n_segs, WORKER_PLAN_MAX_SEGMENTS);
    int64_t before = worker_plan_position(&p, 740, 0);
    assert_int_equal(worker_plan_update(&p, 5, 3), 1);
    assert_true(worker_plan_position(&p, 5, 0) < before);
    assert_int_equal(p.n_segs, 1);
    /* Extrapolated further back than the stream's start: clamped at position 0. */
    worker_plan q;
    worker_plan_init(&q, 1, B, skipped, 1);
    for (int k = 1; k <= WORKER_PLAN_MAX_SEGMENTS + 1; k++)
        worker_plan_update(&q, (uint64_t)k, k == 1 ? 1000 : 1000 + (k & 1));
    assert_int_equal(worker_plan_update(&q, 0, 1000), 1);
    assert_true(worker_plan_position(&q, 0, 0) >= 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_partition),   cmocka_unit_test(test_skips),
        cmocka_unit_test(test_membership_change), cmocka_unit_test(test_rollback_past_change),
        cmocka_unit_test(test_segments_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
