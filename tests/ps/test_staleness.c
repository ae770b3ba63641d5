/* test_staleness.c - the clocks of training.max_staleness (ps/staleness.h): who holds whom
 * back, joining and leaving, and the records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "ps/staleness.h"

static ps_staleness_task rec(ps_staleness *st, int task) {
    ps_staleness_task t[8];
    if (task >= ps_staleness_snapshot(st, t, 8)) /* never joined: not in the snapshot */
        return (ps_staleness_task){.lag = -1, .max_lag = -1, .pull_lag = -1};
    return t[task];
}

static void push_n(ps_staleness *st, int task, int n) {
    for (int i = 0; i < n; i++)
        ps_staleness_pushed(st, task);
}

/* Bound 2, two live tasks: the one ahead is held from lag 3 on, until the other catches up. */
static void test_bound_holds_the_fast_task(void **state) {
    (void)state;
    ps_staleness *st = ps_staleness_create(8, 2, 0);
    assert_non_null(st);
    ps_staleness_join(st, 0);
    ps_staleness_join(st, 1);
    push_n(st, 0, 2);
    assert_true(ps_staleness_ready(st, 0)); /* lag 2 */
    ps_staleness_answered(st, 0, -1);
    ps_staleness_pushed(st, 0);
    assert_false(ps_staleness_ready(st, 0)); /* lag 3 */
    assert_true(ps_staleness_ready(st, 1));  /* the slow one is never held */
    assert_int_equal(rec(st, 0).lag, 3);
    ps_staleness_pushed(st, 1);
    assert_true(ps_staleness_ready(st, 0)); /* lag 2 again */
    ps_staleness_answered(st, 0, 0.25);
    ps_staleness_task t = rec(st, 0);
    assert_int_equal(t.clock, 3);
    assert_int_equal(t.lag, 2);
    assert_int_equal(t.max_lag, 2);
    assert_int_equal(t.held, 1);
    assert_true(t.held_secs == 0.25);
    assert_int_equal(rec(st, 1).max_lag, -1); /* no pull answered yet */
    assert_int_equal(rec(st, 5).lag, -1);     /* never live */
    ps_staleness_destroy(st);
}

/* The lag a task's Lag figure shows is the one its latest pull was answered at, 0 .. bound:
 * a task held at the bound is one push further ahead now (bound + 1), and that is no lag of
 * the values it computes on. In the STATS JSON as pull_lag, beside the lag now. */
static void test_pull_lag_stays_within_bound(void **state) {
    (void)state;
    ps_staleness *st = ps_staleness_create(4, 1, 0);
    assert_non_null(st);
    ps_staleness_join(st, 0);
    ps_staleness_join(st, 1);
    assert_int_equal(rec(st, 0).pull_lag, -1); /* no pull answered yet */
    ps_staleness_pushed(st, 0);
    assert_true(ps_staleness_ready(st, 0)); /* lag 1 */
    ps_staleness_answered(st, 0, -1);
    ps_staleness_pushed(st, 0);
    assert_false(ps_staleness_ready(st, 0)); /* held at lag 2 */
    char out[1024] = "{\"a\":1";
    ps_staleness_json_close(st, out, strlen(out), sizeof out);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    json_t *first = json_array_get(json_object_get(j, "staleness"), 0);
    assert_int_equal(json_integer_value(json_object_get(first, "lag")), 2);
    assert_true(json_is_integer(json_object_get(first, "pull_lag")));
    assert_int_equal(json_integer_value(json_object_get(first, "pull_lag")), 1);
    json_decref(j);
    ps_staleness_pushed(st, 1);
    assert_true(ps_staleness_ready(st, 0));
    ps_staleness_answered(st, 0, 0.1);
    assert_int_equal(rec(st, 0).pull_lag, 1);
    ps_staleness_destroy(st);
}

/* Bound 0: lockstep. */
static void test_zero_is_lockstep(void **state) {
    (void)state;
    ps_staleness *st = ps_staleness_create(4, 0, 0);
    for (int t = 0; t < 3; t++)
        ps_staleness_join(st, t);
    ps_staleness_pushed(st, 0);
    assert_false(ps_staleness_ready(st, 0));
    ps_staleness_pushed(st, 1);
    assert_false(ps_staleness_ready(st, 0));
    assert_false(ps_staleness_ready(st, 1));
    ps_staleness_pushed(st, 2);
    for (int t = 0; t < 3; t++)
        assert_true(ps_staleness_ready(st, t));
    ps_staleness_destroy(st);
}

/* A task that leaves holds nobody back; one that (re)joins starts at the smallest clock of
 * the others, and a task never seen does not count. */
static void test_join_and_leave(void **state) {
    (void)state;
    ps_staleness *st = ps_staleness_create(4, 1, 0);
    ps_staleness_join(st, 0);
    push_n(st, 0, 10); /* alone: nobody to wait for */
    assert_true(ps_staleness_ready(st, 0));
    ps_staleness_join(st, 1);
    assert_int_equal(rec(st, 1).clock, 10);
    ps_staleness_pushed(st, 0);
    ps_staleness_pushed(st, 0);
    assert_false(ps_staleness_ready(st, 0));
    ps_staleness_join(st, 1); /* a second connection of task 1 (a reconnect in flight) */
    ps_staleness_leave(st, 1);
    assert_false(ps_staleness_ready(st, 0)); /* one connection of task 1 is still open */
    ps_staleness_leave(st, 1);
    assert_true(ps_staleness_ready(st, 0));
    assert_false(rec(st, 1).live);
    ps_staleness_leave(st, 1); /* more leaves than joins change nothing */
    ps_staleness_join(st, 1);
    assert_int_equal(rec(st, 1).clock, 12);
    assert_true(ps_staleness_ready(st, 0));
    /* out-of-range tasks and a NULL table are ignored, and never hold anyone back */
    ps_staleness_pushed(st, 4);
    ps_staleness_join(st, -1);
    assert_true(ps_staleness_ready(st, 7));
    assert_true(ps_staleness_ready(NULL, 0));
    ps_staleness_answered(NULL, 0, 1);
    ps_staleness_destroy(st);
    ps_staleness_destroy(NULL);
}

/* Reconnecting is no way around the bound: a task that is ahead keeps its clock. A task
 * silent past the idle limit holds nobody back, and comes back at the slowest clock of the
 * others. */
static void test_reconnect_and_idle(void **state) {
    (void)state;
    ps_staleness *st = ps_staleness_create(4, 1, 0.2);
    ps_staleness_join(st, 0);
    ps_staleness_join(st, 1);
    push_n(st, 0, 2);
    assert_false(ps_staleness_ready(st, 0));
    ps_staleness_leave(st, 0); /* its connection drops while it is held ... */
    ps_staleness_join(st, 0);  /* ... and it says HELLO again */
    assert_int_equal(rec(st, 0).clock, 2);
    assert_false(ps_staleness_pull(st, 0));
    /* task 1 goes silent: after the idle limit it is not counted */
    struct timespec nap = {0, 300 * 1000 * 1000};
    ps_staleness_pushed(st, 0); /* task 0 stays active */
    nanosleep(&nap, NULL);
    assert_true(ps_staleness_pull(st, 0));
    assert_false(rec(st, 1).live);
    assert_int_equal(rec(st, 1).lag, -1);
    /* task 1 speaks again: it comes back at task 0's clock, not 3 behind */
    ps_staleness_pushed(st, 1);
    assert_int_equal(rec(st, 1).clock, 4);
    assert_true(rec(st, 1).live);
    assert_true(ps_staleness_ready(st, 0));
    ps_staleness_destroy(st);
}

/* The STATS members: valid JSON with the live or pushed tasks, cut (still valid) when the
 * buffer is short. */
static void test_json(void **state) {
    (void)state;
    ps_staleness *st = ps_staleness_create(200, 3, 0);
    for (int t = 0; t < 200; t++)
        ps_staleness_join(st, t);
    ps_staleness_pushed(st, 7);
    char out[4096] = "{\"a\":1";
    size_t n = ps_staleness_json_close(st, out, strlen(out), sizeof out);
    assert_int_equal(n, strlen(out));
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    if (!j)
        fail_msg("not JSON (%s): %s", e.text, out);
    assert_int_equal(json_integer_value(json_object_get(j, "max_staleness")), 3);
    assert_true(json_is_true(json_object_get(j, "staleness_cut")));
    json_t *first = json_array_get(json_object_get(j, "staleness"), 0);
    assert_int_equal(json_integer_value(json_object_get(first, "task")), 0);
    assert_int_equal(json_integer_value(json_object_get(first, "lag")), 0);
    json_decref(j);
    char small[60] = "{\"a\":1";
    n = ps_staleness_json_close(st, small, strlen(small), sizeof small);
    assert_int_equal(n, strlen(small));
    assert_non_null(j = json_loads(small, 0, &e));
    json_decref(j);
    char plain[16] = "{\"a\":1";
    ps_staleness_json_close(NULL, plain, strlen(plain), sizeof plain);
    assert_string_equal(plain, "{\"a\":1}");
    char line[200];
    ps_staleness_describe(st, 7, line, sizeof line);
    assert_non_null(strstr(line, "clock 1, no pull answered yet (max_staleness 3)"));
    ps_staleness_destroy(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound_holds_the_fast_task),
        cmocka_unit_test(test_pull_lag_stays_within_bound),
        cmocka_unit_test(test_zero_is_lockstep),
        cmocka_unit_test(test_join_and_leave),
        cmocka_unit_test(test_reconnect_and_idle),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
