/* test_trace.c - a trace on demand in the coordinator (coordinator/trace.c): starting one
 * (a step rate needed, one at a time), what the heartbeat answers ask of each task, the spans
 * a heartbeat brings (range-checked, refused whole and logged when anything is out of range),
 * completion (every running task sent, or the deadline passed) and the trace-event JSON.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/support/cluster_fixture.h"
#include "coordinator/cluster.h"
#include "coordinator/cluster_trace.h"
#include "psflow/profile.h"

/* A job of one ps and one worker, running, at global step 1000 and 100 steps a second. */
static coord_job *running(coord_cluster *c, coord_node **ps, coord_node **w) {
    coord_cluster_init(c, LEASE);
    coord_job *j = running_pair(c, "tr", "", T0, ps, w);
    j->global_step = 1000;
    j->steps_per_sec = 100;
    return j;
}

/* The spans text (a JSON array) as node n's heartbeat trace of trace `id`. */
static void send_spans(coord_cluster *c, coord_node *n, uint64_t id, const char *spans,
                       double now) {
    json_error_t e;
    json_t *s = json_loads(spans, JSON_DECODE_ANY, &e);
    assert_non_null(s);
    json_t *t = json_pack("{s:I, s:f, s:o}", "id", (json_int_t)id, "rtt", 0.001, "spans", s);
    coord_trace_take(c, n, t, now);
    json_decref(t);
}

static json_t *task_entry(coord_job *j, const char *name) {
    return json_object_get(j->trace->tasks, name);
}

static void test_start_and_directives(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *ps, *w;
    coord_job *j = running(&c, &ps, &w);
    char why[200];
    j->global_step = 0;
    j->steps_per_sec = NAN;
    assert_int_equal(coord_trace_start(j, 20, T0 + 5, why, sizeof why), -1);
    assert_non_null(strstr(why, "no step yet"));
    assert_null(coord_trace_directive(&c, w, T0 + 5)); /* none */
    j->global_step = 1000;
    j->steps_per_sec = 100;
    assert_int_equal(coord_trace_start(j, 20, T0 + 5, why, sizeof why), 0);
    assert_int_equal(j->trace->from, 1000 + 2 + 500); /* 5 s at 100 steps a second ahead */
    assert_int_equal(coord_trace_start(j, 20, T0 + 6, why, sizeof why), -1);
    assert_non_null(strstr(why, "still recording"));
    json_t *d = coord_trace_directive(&c, w, T0 + 6);
    assert_non_null(d);
    uint64_t id = j->trace->id; /* the clock's milliseconds */
    assert_int_equal(id, (uint64_t)((T0 + 5) * 1e3));
    assert_int_equal(json_integer_value(json_object_get(d, "id")), id);
    assert_int_equal(json_integer_value(json_object_get(d, "from")), 1502);
    assert_int_equal(json_integer_value(json_object_get(d, "steps")), 20);
    assert_true(json_is_false(json_object_get(d, "stop")));
    json_decref(d);
    d = coord_trace_directive(&c, ps, T0 + 6); /* a ps: and the version after */
    assert_int_equal(json_integer_value(json_object_get(d, "steps")), 21);
    assert_true(json_is_false(json_object_get(d, "stop")));
    json_decref(d);
    /* the worker's spans: asked no more; the ps told to stop */
    double us = (T0 + 10) * 1e6;
    char spans[256];
    snprintf(spans, sizeof spans, "[[%d, %.0f, 500, 1502], [%d, %.0f, 300, 1502]]",
             PF_PHASE_COMPUTE, us, PF_PHASE_BARRIER, us + 500);
    send_spans(&c, w, id, spans, T0 + 11);
    assert_null(coord_trace_directive(&c, w, T0 + 11));
    d = coord_trace_directive(&c, ps, T0 + 11);
    assert_true(json_is_true(json_object_get(d, "stop")));
    json_decref(d);
    assert_false(j->trace->complete);
    /* the ps: one apply within the steps, one long before (not shown) */
    snprintf(spans, sizeof spans, "[[%d, %.0f, 100, 0], [%d, %.0f, 100, 0]]", PF_PHASE_APPLY,
             us - 5e6, PF_PHASE_APPLY, us + 600);
    send_spans(&c, ps, id, spans, T0 + 12);
    assert_true(j->trace->complete);
    assert_null(coord_trace_directive(&c, ps, T0 + 12));
    json_t *out = coord_trace_json(j, T0 + 12);
    json_t *meta = json_object_get(out, "psflow");
    assert_string_equal(json_string_value(json_object_get(meta, "state")), "complete");
    assert_int_equal(json_array_size(json_object_get(meta, "missing")), 0);
    int x = 0, names = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(out, "traceEvents"), i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!strcmp(ph, "X")) {
            x++;
            assert_true(json_number_value(json_object_get(e, "ts")) >= 0);
            if (!strcmp(json_string_value(json_object_get(e, "name")), "compute"))
                assert_true(json_number_value(json_object_get(e, "ts")) == 0);
            if (!strcmp(json_string_value(json_object_get(e, "name")), "apply"))
                assert_true(json_number_value(json_object_get(e, "ts")) == 600);
        } else if (!strcmp(json_string_value(json_object_get(e, "name")), "process_name")) {
            names++;
        }
    }
    assert_int_equal(x, 3); /* the worker's two, the ps's one within them */
    assert_int_equal(names, 2);
    json_decref(out);
    /* a second trace may start now, with a new id even at the same millisecond */
    assert_int_equal(coord_trace_start(j, 5, T0 + 5, why, sizeof why), 0);
    assert_int_equal(j->trace->id, id + 1);
    send_spans(&c, w, id, "[]", T0 + 14); /* the first trace's, late: ignored */
    assert_null(task_entry(j, "worker-0"));
    coord_cluster_deinit(&c);
}

/* Anything out of range refuses the task's spans whole: kept as refused, never shown. */
static void test_refused(void **state) {
    (void)state;
    double us = (T0 + 10) * 1e6;
    char big[64];
    snprintf(big, sizeof big, "%.0f", us);
    const struct {
        int ps;
        const char *spans;
    } bad[] = {
        {0, "{\"a\": 1}"},         {0, "[[2, 1e15, 10]]"},
        {0, "[[7, @, 10, 1]]"}, /* apply: not a worker's */
        {1, "[[9, @, 10, 0]]"}, /* queue: never traced */
        {1, "[[2, @, 10, 0]]"}, /* compute: not a ps's */
        {0, "[[-1, @, 10, 1]]"},   {0, "[[\"input\", @, 10, 1]]"},
        {0, "[[0, 5, 10, 1]]"}, /* long before the trace */
        {0, "[[0, 9e18, 10, 1]]"}, {0, "[[0, @, -1, 1]]"},
        {0, "[[0, @, 1e12, 1]]"},  {0, "[[0, @, 10, -1]]"},
        {0, "[[0, @, 10, 1.5]]"},  {0, "[[0, @, 10, 1], [0, @, 10]]"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        coord_cluster c;
        coord_node *ps, *w;
        coord_job *j = running(&c, &ps, &w);
        char why[200], text[256] = "";
        assert_int_equal(coord_trace_start(j, 20, T0 + 5, why, sizeof why), 0);
        for (const char *s = bad[k].spans; *s; s++) /* @: a start within the trace */
            if (*s == '@')
                strcat(text, big);
            else
                strncat(text, s, 1);
        send_spans(&c, bad[k].ps ? ps : w, j->trace->id, text, T0 + 11);
        json_t *entry = task_entry(j, bad[k].ps ? "ps-0" : "worker-0");
        assert_non_null(entry);
        assert_non_null(json_object_get(entry, "refused"));
        json_t *out = coord_trace_json(j, T0 + 11);
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(out, "traceEvents"), i, e)
            assert_string_not_equal(json_string_value(json_object_get(e, "ph")), "X");
        json_decref(out);
        coord_cluster_deinit(&c);
    }
    /* more spans than a task records: refused */
    coord_cluster c;
    coord_node *ps, *w;
    coord_job *j = running(&c, &ps, &w);
    char why[200];
    assert_int_equal(coord_trace_start(j, 20, T0 + 5, why, sizeof why), 0);
    json_t *many = json_array();
    for (int i = 0; i <= PF_TRACE_SPANS_MAX; i++)
        json_array_append_new(many, json_pack("[i, f, i, i]", 0, us, 10, 1502));
    json_t *t = json_pack("{s:I, s:o}", "id", (json_int_t)j->trace->id, "spans", many);
    coord_trace_take(&c, w, t, T0 + 11);
    json_decref(t);
    assert_non_null(json_object_get(task_entry(j, "worker-0"), "refused"));
    /* an rtt that is not a number of seconds */
    t = json_pack("{s:I, s:s, s:[]}", "id", (json_int_t)j->trace->id, "rtt", "x", "spans");
    coord_trace_take(&c, ps, t, T0 + 11);
    json_decref(t);
    assert_non_null(json_object_get(task_entry(j, "ps-0"), "refused"));
    coord_cluster_deinit(&c);
}

/* Nothing sent: the trace completes after its deadline, naming the tasks missing. */
static void test_deadline(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *ps, *w;
    coord_job *j = running(&c, &ps, &w);
    char why[200];
    assert_int_equal(coord_trace_start(j, 20, T0 + 5, why, sizeof why), 0);
    double deadline = j->trace->deadline;
    json_t *d = coord_trace_directive(&c, w, deadline + 1); /* past it: stop */
    assert_true(json_is_true(json_object_get(d, "stop")));
    json_decref(d);
    json_t *out = coord_trace_json(j, deadline + 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(out, "psflow"), "state")),
                        "recording");
    json_decref(out);
    out = coord_trace_json(j, deadline + 60);
    json_t *meta = json_object_get(out, "psflow");
    assert_string_equal(json_string_value(json_object_get(meta, "state")), "complete");
    assert_int_equal(json_array_size(json_object_get(meta, "missing")), 2);
    json_decref(out);
    coord_cluster_deinit(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_and_directives),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
