/* test_profile.c - a task's phase counters (common/job/profile.c): names both ways, chained
 * spans that add up to the time they cover, a stopped wall clock, PSFLOW_PROFILE=off, a
 * reader on another thread while one thread counts, open spans (counted up to a snapshot,
 * never twice), and traces (a range of global steps, or until stopped).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/clock.h"
#include "psflow/profile.h"

static void test_names(void **state) {
    (void)state;
    for (int i = 0; i < PF_PHASE_COUNT; i++) {
        assert_non_null(pf_phase_name(i));
        assert_int_equal(pf_phase_from_name(pf_phase_name(i)), i);
    }
    assert_null(pf_phase_name(-1));
    assert_null(pf_phase_name(PF_PHASE_COUNT));
    assert_int_equal(pf_phase_from_name("nap"), -1);
    assert_int_equal(pf_phase_from_name(NULL), -1);
    assert_string_equal(pf_phase_name(PF_PHASE_FIRST_PS), "apply");
}

/* Spans chained end to start cover the time between the first and the last clock read. */
static void test_chained_spans(void **state) {
    (void)state;
    unsetenv("PSFLOW_PROFILE");
    pf_profile p;
    double sec[PF_PHASE_COUNT], wall;
    uint64_t count;
    memset(&p, 0, sizeof p);
    assert_int_equal(pf_profile_read(&p, sec, &count, &wall), -1); /* not started */
    pf_profile_start(&p);
    double first = pf_profile_now(&p), at = first;
    assert_true(first > 0);
    for (int i = 0; i < 5; i++) {
        pf_clock_sleep(0.002);
        at = pf_profile_add(&p, PF_PHASE_INPUT, at);
        pf_clock_sleep(0.004);
        at = pf_profile_add(&p, PF_PHASE_PUSH, at);
        pf_profile_count(&p, 1);
    }
    pf_profile_span(&p, PF_PHASE_QUEUE, 1.0, 1.25); /* a span measured elsewhere */
    assert_int_equal(pf_profile_read(&p, sec, &count, &wall), 0);
    assert_int_equal(count, 5);
    /* at least what was slept in each (how much more depends on the scheduler) */
    assert_true(sec[PF_PHASE_INPUT] >= 0.010 && sec[PF_PHASE_PUSH] >= 0.020);
    /* every nanosecond between the first read and the last is in one phase (rounding: 1 ns
     * a span) */
    double covered = sec[PF_PHASE_INPUT] + sec[PF_PHASE_PUSH];
    assert_true(covered <= at - first + 1e-8 && covered >= at - first - 1e-8);
    assert_true(sec[PF_PHASE_QUEUE] > 0.2499 && sec[PF_PHASE_QUEUE] < 0.2501);
    assert_true(wall >= covered);
    /* stopped: the wall clock stands still */
    pf_profile_stop(&p);
    double w1, w2;
    pf_profile_read(&p, sec, &count, &w1);
    pf_clock_sleep(0.005);
    pf_profile_read(&p, sec, &count, &w2);
    assert_true(w1 == w2);
    /* a NULL profile counts nothing and reads no clock */
    assert_true(pf_profile_add(NULL, PF_PHASE_INPUT, 7.0) == 7.0);
    assert_true(pf_profile_now(NULL) == 0);
    pf_profile_count(NULL, 1);
}

static void test_off(void **state) {
    (void)state;
    setenv("PSFLOW_PROFILE", "off", 1);
    pf_profile p;
    pf_profile_start(&p);
    unsetenv("PSFLOW_PROFILE");
    assert_true(pf_profile_now(&p) == 0);
    assert_true(pf_profile_add(&p, PF_PHASE_INPUT, 3.0) == 3.0);
    pf_profile_count(&p, 1);
    double sec[PF_PHASE_COUNT], wall;
    uint64_t count;
    assert_int_equal(pf_profile_read(&p, sec, &count, &wall), -1);
}

typedef struct reader {
    pf_profile *p;
    int stop, reads, bad; /* reads: atomic (the writer waits for them) */
} reader;

static void *read_loop(void *arg) {
    reader *r = arg;
    double last = 0;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        double sec[PF_PHASE_COUNT], wall;
        uint64_t count;
        if (pf_profile_read(r->p, sec, &count, &wall) != 0)
            continue;
        __atomic_add_fetch(&r->reads, 1, __ATOMIC_RELEASE);
        /* each snapshot's phase time only grows, and stays near the 1 ms a step it is given
         * (the counters are read one after the other while the writer goes on: within 1000
         * steps of the count) */
        if (sec[PF_PHASE_COMPUTE] < last || sec[PF_PHASE_COMPUTE] > (double)count * 1e-3 + 1.0)
            r->bad++;
        last = sec[PF_PHASE_COMPUTE];
    }
    return NULL;
}

/* One thread counts, another reads: every snapshot is whole numbers of what was added. The
 * writer goes on until the reader has read 100 snapshots while it wrote (on a loaded machine
 * the reader may not run at all during the first 200,000 steps). */
static void test_concurrent_reader(void **state) {
    (void)state;
    unsetenv("PSFLOW_PROFILE");
    pf_profile p;
    pf_profile_start(&p);
    reader r = {&p, 0, 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, read_loop, &r), 0);
    long steps = 0;
    double deadline = pf_clock_now() + 60; /* a bound, not a timing: ends the loop on a hang */
    while (steps < 200000 ||
           (__atomic_load_n(&r.reads, __ATOMIC_ACQUIRE) < 100 && pf_clock_now() < deadline)) {
        pf_profile_span(&p, PF_PHASE_COMPUTE, 1.0, 1.0 + 1e-3);
        pf_profile_count(&p, 1);
        steps++;
    }
    __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    assert_true(r.reads >= 100);
    assert_int_equal(r.bad, 0);
    double sec[PF_PHASE_COUNT], wall;
    uint64_t count;
    pf_profile_read(&p, sec, &count, &wall);
    assert_int_equal(count, steps);
    assert_true(fabs(sec[PF_PHASE_COMPUTE] - (double)steps * 1e-3) < 1e-6 * (double)steps);
}

/* An open span counts up to each snapshot; closed, it counts once and stops growing. */
static void test_open_span(void **state) {
    (void)state;
    unsetenv("PSFLOW_PROFILE");
    pf_profile p;
    double sec[PF_PHASE_COUNT], wall;
    uint64_t count;
    pf_profile_start(&p);
    double at = pf_profile_now(&p);
    pf_profile_open(&p, PF_PHASE_BARRIER, at);
    pf_clock_sleep(0.02);
    assert_int_equal(pf_profile_read(&p, sec, &count, &wall), 0);
    assert_true(sec[PF_PHASE_BARRIER] >= 0.02 && sec[PF_PHASE_BARRIER] <= wall);
    for (int i = 0; i < PF_PHASE_COUNT; i++)
        if (i != PF_PHASE_BARRIER)
            assert_true(sec[i] == 0);
    double open_so_far = sec[PF_PHASE_BARRIER];
    at = pf_profile_add(&p, PF_PHASE_BARRIER, at);
    pf_clock_sleep(0.02);
    assert_int_equal(pf_profile_read(&p, sec, &count, &wall), 0);
    assert_true(sec[PF_PHASE_BARRIER] >= open_so_far && sec[PF_PHASE_BARRIER] < open_so_far + 0.02);
    double closed = sec[PF_PHASE_BARRIER];
    pf_clock_sleep(0.01);
    assert_int_equal(pf_profile_read(&p, sec, &count, &wall), 0);
    assert_true(sec[PF_PHASE_BARRIER] == closed);
    assert_true(wall - closed >= 0.03);
    /* a span left open when the clock stops is not counted on */
    pf_profile_open(&p, PF_PHASE_CHECKPOINT, at);
    pf_profile_stop(&p);
    pf_clock_sleep(0.01);
    assert_int_equal(pf_profile_read(&p, sec, &count, &wall), 0);
    assert_true(sec[PF_PHASE_CHECKPOINT] == 0);
}

typedef struct open_reader {
    pf_profile *p;
    int stop, reads, bad; /* reads: atomic */
    double worst;         /* the largest excess of the phases' sum over the wall time seen */
} open_reader;

static void *read_open_loop(void *arg) {
    open_reader *r = arg;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        double sec[PF_PHASE_COUNT], wall;
        uint64_t count;
        if (pf_profile_read(r->p, sec, &count, &wall) != 0)
            continue;
        __atomic_add_fetch(&r->reads, 1, __ATOMIC_RELEASE);
        double sum = sec[PF_PHASE_PULL] + sec[PF_PHASE_BARRIER];
        if (sum - wall > r->worst)
            r->worst = sum - wall;
    }
    return NULL;
}

/* Spans of 100 us chained end to start, each open while it lasts, as a reader reads: the
 * phases never sum to more than the wall time (a span closed as it was read is counted
 * once; a span counted twice would be 100 us over, rounding is under 1 ns a span). */
static void test_open_span_reader(void **state) {
    (void)state;
    unsetenv("PSFLOW_PROFILE");
    pf_profile p;
    pf_profile_start(&p);
    open_reader r = {&p, 0, 0, 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, read_open_loop, &r), 0);
    double at = pf_profile_now(&p), deadline = at + 60;
    long spans = 0;
    while (spans < 2000 ||
           (__atomic_load_n(&r.reads, __ATOMIC_ACQUIRE) < 1000 && pf_clock_now() < deadline)) {
        pf_phase phase = spans % 2 ? PF_PHASE_PULL : PF_PHASE_BARRIER;
        pf_profile_open(&p, phase, at);
        while (pf_clock_now() - at < 1e-4)
            ;
        at = pf_profile_add(&p, phase, at);
        spans++;
    }
    __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    assert_true(r.reads >= 1000);
    assert_true(r.worst < 1e-9 * (double)spans + 1e-6);
}

/* One step of a training task at global step `global`: input then compute, counted. */
static void step(pf_profile *p, uint64_t global) {
    pf_profile_at_step(p, global);
    double at = pf_profile_now(p);
    at = pf_profile_add(p, PF_PHASE_INPUT, at);
    pf_profile_add(p, PF_PHASE_COMPUTE, at);
    pf_profile_count(p, 1);
}

/* A trace of global steps 5 .. 7 records their spans in order with their step, from step
 * 5's start to step 8's; nothing before or after. A trace armed too late is done and empty. */
static void test_trace_steps(void **state) {
    (void)state;
    unsetenv("PSFLOW_PROFILE");
    pf_profile p;
    memset(&p, 0, sizeof p);
    pf_profile_start(&p);
    uint64_t id;
    uint32_t n;
    step(&p, 1);
    assert_null(pf_profile_trace_spans(&p, &id, &n)); /* never armed */
    assert_int_equal(pf_profile_trace_arm(&p, 7, 5, 3, 100), 0);
    assert_int_equal(pf_profile_trace_arm(&p, 8, 5, 3, 100), -1); /* one at a time */
    for (uint64_t g = 2; g < 8; g++) {
        assert_null(pf_profile_trace_spans(&p, &id, &n));
        step(&p, g);
    }
    step(&p, 8); /* after the trace */
    step(&p, 9);
    const pf_trace_span *sp = pf_profile_trace_spans(&p, &id, &n);
    assert_non_null(sp);
    assert_int_equal(id, 7);
    assert_int_equal(n, 6);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(sp[i].phase, i % 2 ? PF_PHASE_COMPUTE : PF_PHASE_INPUT);
        assert_int_equal(sp[i].step, 5 + i / 2);
        assert_true(sp[i].end >= sp[i].start);
        if (i)
            assert_true(sp[i].start >= sp[i - 1].end);
    }
    /* a second trace after the first is done; steps skipped (async: other workers' pushes)
     * are not waited for */
    assert_int_equal(pf_profile_trace_arm(&p, 9, 12, 4, 100), 0);
    step(&p, 10);
    step(&p, 13);
    step(&p, 15);
    step(&p, 17);
    sp = pf_profile_trace_spans(&p, &id, &n);
    assert_non_null(sp);
    assert_int_equal(id, 9);
    assert_int_equal(n, 4);
    assert_int_equal(sp[0].step, 13);
    assert_int_equal(sp[3].step, 15);
    /* armed after its steps: done at the next step, with no span */
    assert_int_equal(pf_profile_trace_arm(&p, 10, 3, 2, 100), 0);
    step(&p, 18);
    assert_non_null(pf_profile_trace_spans(&p, &id, &n));
    assert_int_equal(n, 0);
    pf_profile_trace_free(&p);
}

/* A ps's trace (no steps) records from its arming until stopped or full; the queue, whose
 * waits overlap, is not recorded; a trace stopped before it started is done and empty. */
static void test_trace_until_stopped(void **state) {
    (void)state;
    unsetenv("PSFLOW_PROFILE");
    pf_profile p;
    memset(&p, 0, sizeof p);
    pf_profile_start(&p);
    uint64_t id;
    uint32_t n;
    assert_int_equal(pf_profile_trace_arm(&p, 1, 0, 0, 4), 0);
    double at = pf_profile_now(&p);
    at = pf_profile_add(&p, PF_PHASE_APPLY, at);
    pf_profile_add(&p, PF_PHASE_QUEUE, at - 0.5);
    at = pf_profile_add(&p, PF_PHASE_COPY, at);
    pf_profile_trace_stop(&p);
    assert_null(pf_profile_trace_spans(&p, &id, &n)); /* done at the writer's next span */
    pf_profile_add(&p, PF_PHASE_APPLY, at);
    const pf_trace_span *sp = pf_profile_trace_spans(&p, &id, &n);
    assert_non_null(sp);
    assert_int_equal(n, 2);
    assert_int_equal(sp[0].phase, PF_PHASE_APPLY);
    assert_int_equal(sp[1].phase, PF_PHASE_COPY);
    /* full: done at the span after the last that fits */
    assert_int_equal(pf_profile_trace_arm(&p, 2, 0, 0, 3), 0);
    for (int i = 0; i < 5; i++)
        at = pf_profile_add(&p, PF_PHASE_APPLY, at);
    sp = pf_profile_trace_spans(&p, &id, &n);
    assert_non_null(sp);
    assert_int_equal(id, 2);
    assert_int_equal(n, 3);
    /* stopped before its first span: done, empty; a writer gone for good: done as it is */
    assert_int_equal(pf_profile_trace_arm(&p, 3, 1, 5, 10), 0);
    pf_profile_trace_stop(&p);
    assert_non_null(pf_profile_trace_spans(&p, &id, &n));
    assert_int_equal(n, 0);
    assert_int_equal(pf_profile_trace_arm(&p, 4, 1, 5, 10), 0);
    pf_profile_at_step(&p, 1);
    pf_profile_add(&p, PF_PHASE_INPUT, pf_profile_now(&p));
    pf_profile_trace_finish(&p);
    assert_non_null(pf_profile_trace_spans(&p, &id, &n));
    assert_int_equal(n, 1);
    assert_int_equal(pf_profile_trace_arm(&p, 5, 1, 5, 0), -1); /* capacity 1 .. max */
    assert_int_equal(pf_profile_trace_arm(&p, 5, 1, 5, PF_TRACE_SPANS_MAX + 1), -1);
    pf_profile_trace_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),       cmocka_unit_test(test_chained_spans),
        cmocka_unit_test(test_off),         cmocka_unit_test(test_concurrent_reader),
        cmocka_unit_test(test_open_span),   cmocka_unit_test(test_open_span_reader),
        cmocka_unit_test(test_trace_steps), cmocka_unit_test(test_trace_until_stopped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
