/* test_cluster_rates.c - the live figures of a job's status (coordinator/cluster_rate.c and
 * where the state machine feeds it): steps_per_sec and eta_seconds from a sliding window of
 * the reported steps, unknown (null) until the window is long enough, restarted at a
 * membership change (a live scale, a replaced task, a rollback), and `stalled` when the global
 * step stops advancing. Driven in-process with explicit times, as test_cluster.c; every
 * figure is read from the JSON a client gets (GET /jobs/NAME status and the `job` events).
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
#include "coordinator/cluster_json.h"
#include "psflow/mem.h"

#define MAX_STEPS 1000000

/* The job's chief reports `step` at `now` (one metric point, as its agent posts them). */
static void chief_step(coord_cluster *c, coord_job *j, int64_t step, double now) {
    coord_point p = {step, now, 0.5, 100.0, 0.01, 0};
    coord_job_record_metrics(c, j, "chief", &p, 1, NULL, 0, now);
}

/* Every agent's heartbeat at `now`: running what it was assigned, else idle. */
static void beat(coord_cluster *c, double now) {
    for (int i = 0; i < c->n_nodes; i++) {
        coord_node *n = c->nodes[i];
        if (n->deleted)
            continue;
        if (n->job[0]) {
            report(c, n, "running", 0, now);
        } else {
            json_t *r = json_pack("{s:s}", "state", "idle");
            coord_node_heartbeat_json(c, n, r, now);
            json_decref(r);
        }
    }
}

/* Steps at `rate` a second from `step`, reported every half second from `from` for `secs`
 * seconds, as the coordinator's ticker runs; returns the step reached. */
static int64_t run_at(coord_cluster *c, coord_job *j, int64_t step, double rate, double from,
                      double secs) {
    for (double t = 0.5; t <= secs + 1e-9; t += 0.5) {
        beat(c, from + t);
        chief_step(c, j, step + (int64_t)(rate * t), from + t);
        coord_cluster_tick(c, from + t);
    }
    return step + (int64_t)(rate * secs);
}

static double status_num(const coord_job *j, const char *key, bool *is_null) {
    json_t *s = coord_job_status_json(j);
    json_t *v = json_object_get(s, key);
    assert_true(v != NULL); /* the field is always there */
    *is_null = json_is_null(v);
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    json_decref(s);
    return x;
}

static void assert_unknown(const coord_job *j) {
    bool null;
    status_num(j, "steps_per_sec", &null);
    assert_true(null);
    status_num(j, "eta_seconds", &null);
    assert_true(null);
}

static void assert_rate(const coord_job *j, double rate) {
    bool null;
    double sps = status_num(j, "steps_per_sec", &null);
    assert_false(null);
    assert_float_equal(sps, rate, rate * 0.02);
    double eta = status_num(j, "eta_seconds", &null);
    assert_false(null);
    assert_float_equal(eta, (double)(MAX_STEPS - j->global_step) / rate, eta * 0.03);
}

static bool stalled(const coord_job *j, double *seconds) {
    json_t *s = coord_job_status_json(j);
    json_t *v = json_object_get(s, "stalled"), *secs = json_object_get(s, "stalled_seconds");
    assert_true(json_is_boolean(v));
    assert_true(secs != NULL);
    bool out = json_is_true(v);
    assert_true(out ? json_is_number(secs) : json_is_null(secs));
    if (seconds)
        *seconds = out ? json_number_value(secs) : NAN;
    json_decref(s);
    return out;
}

static coord_job *start(coord_cluster *c, const char *extra, coord_node **ps, coord_node **w) {
    coord_cluster_init(c, LEASE);
    coord_job *j = running_pair(c, "rates", extra, T0, ps, w);
    j->spec.training.max_steps = MAX_STEPS;
    return j;
}

/* The rate is unknown until the window spans 5 s, then exact for a steady rate, and follows a
 * new rate within the 30 s window rather than averaging since the start. */
static void test_window(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *ps, *w;
    coord_job *j = start(&c, "", &ps, &w);
    assert_unknown(j);
    int64_t step = run_at(&c, j, 0, 100, T0, 4);
    assert_unknown(j); /* 4 s of samples: too short */
    step = run_at(&c, j, step, 100, T0 + 4, 16);
    assert_rate(j, 100);
    assert_false(stalled(j, NULL));
    step = run_at(&c, j, step, 3000, T0 + 20, 35); /* faster: the window holds only that */
    assert_rate(j, 3000);
    /* The job event carries the same figures. */
    json_t *sum = coord_job_summary_json(j);
    assert_float_equal(json_number_value(json_object_get(sum, "steps_per_sec")), 3000, 60);
    assert_true(json_is_false(json_object_get(sum, "stalled")));
    json_decref(sum);
    coord_cluster_deinit(&c);
}

/* A live scale-up restarts the window: no figure until the new membership has run 5 s, and
 * then its rate alone, not a blend with the old one. */
static void test_restart_at_scale(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *ps, *w;
    coord_job *j = start(&c, "", &ps, &w);
    int64_t step = run_at(&c, j, 0, 100, T0, 20);
    assert_rate(j, 100);
    pf_error err;
    assert_int_equal(coord_job_patch(&c, j, 2, -1, T0 + 20.2, &err), PF_OK);
    assert_unknown(j);
    step = run_at(&c, j, step, 200, T0 + 20.2, 3);
    assert_unknown(j);
    step = run_at(&c, j, step, 200, T0 + 23.2, 10);
    assert_rate(j, 200);
    (void)step;
    coord_cluster_deinit(&c);
}

/* A rollback restarts the window at the step training goes on from. */
static void test_restart_at_rollback(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *ps, *w;
    coord_job *j = start(&c, "", &ps, &w);
    int64_t step = run_at(&c, j, 0, 100, T0, 20);
    assert_rate(j, 100);
    coord_job_record_rollback(&c, j, step, 1000, -1, NULL, NULL, T0 + 20.1);
    assert_int_equal(j->global_step, 1000);
    assert_unknown(j);
    run_at(&c, j, 1000, 50, T0 + 20.1, 8);
    assert_rate(j, 50);
    coord_cluster_deinit(&c);
}

/* A replaced chief (its agent lost; another agent takes it in the same generation) restarts
 * the window. */
static void test_restart_at_replacement(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *ps, *w;
    coord_job *j = start(&c, "", &ps, &w);
    int64_t step = run_at(&c, j, 0, 100, T0, 20);
    assert_rate(j, 100);
    uint64_t before = task_of(j, "worker", 0)->incarnation;
    report(&c, w, "failed", 1, T0 + 20.5);
    coord_task *chief = task_of(j, "worker", 0);
    assert_true(chief->incarnation != before); /* a new incarnation, the job running on */
    assert_int_equal(chief->restarts, 1);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_unknown(j);
    coord_node *agent = coord_node_find(&c, chief->node_id);
    assert_non_null(agent);
    report(&c, agent, "running", 0, T0 + 22);
    run_at(&c, j, step, 80, T0 + 22, 8);
    assert_rate(j, 80);
    coord_cluster_deinit(&c);
}

/* No step progress for 30 s while training: stalled, with no rate and no time left; the
 * figures come back, measured anew, once the step advances. */
static void test_stall(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *ps, *w;
    coord_job *j = start(&c, "", &ps, &w);
    int64_t step = run_at(&c, j, 0, 100, T0, 20);
    assert_rate(j, 100);
    take_events(&c, NULL, NULL);
    /* The chief keeps reporting the same step (a sync step waits for a gradient). */
    for (double t = 1; t <= 29; t++) {
        beat(&c, T0 + 20 + t);
        chief_step(&c, j, step, T0 + 20 + t);
        coord_cluster_tick(&c, T0 + 20 + t);
    }
    assert_false(stalled(j, NULL));
    beat(&c, T0 + 51);
    coord_cluster_tick(&c, T0 + 51);
    double secs;
    assert_true(stalled(j, &secs));
    assert_float_equal(secs, 31, 0.01);
    bool null;
    assert_float_equal(status_num(j, "steps_per_sec", &null), 0, 0);
    status_num(j, "eta_seconds", &null);
    assert_true(null);
    assert_true(take_events(&c, "job", NULL) >= 1); /* clients hear of it */
    json_t *sum = coord_job_summary_json(j);
    assert_true(json_is_true(json_object_get(sum, "stalled")));
    json_decref(sum);
    /* Progress again: not stalled, and the rate after the stall alone. */
    chief_step(&c, j, step + 10, T0 + 52);
    assert_false(stalled(j, NULL));
    assert_unknown(j);
    run_at(&c, j, step + 10, 100, T0 + 52, 10);
    assert_rate(j, 100);
    /* A job that is not training (suspended) is never stalled. */
    pf_error err;
    assert_int_equal(coord_job_patch(&c, j, 0, 1, T0 + 63, &err), PF_OK);
    beat(&c, T0 + 200);
    coord_cluster_tick(&c, T0 + 200);
    assert_false(stalled(j, NULL));
    coord_cluster_deinit(&c);
}

/* ps-a's heartbeat: `updates` applied, and worker 0's lag. */
static void ps_stats(coord_cluster *c, coord_node *ps, int updates, int lag, double now) {
    json_t *r = json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:{s:i, s:i, s:[i]}}", "state", "running",
                          "job", ps->job, "generation", ps->generation, "type", "ps", "index", 0,
                          "exit_code", 0, "stats", "updates", updates, "stale", 0, "lags", lag);
    coord_node_heartbeat_json(c, ps, r, now);
    json_decref(r);
}

/* A dense job's ps: its updates a second from its agent's reports at least 2 s apart. */
static void test_ps_updates_per_sec(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "dense", "", T0, &ps, &w);
    coord_task *p = task_of(j, "ps", 0);
    ps_stats(&c, ps, 10, 0, T0 + 1);
    ps_stats(&c, ps, 40, 0, T0 + 2); /* too close to measure */
    assert_float_equal(p->updates_per_sec, 0, 0);
    ps_stats(&c, ps, 70, 0, T0 + 4);
    assert_float_equal(p->updates_per_sec, 20, 1e-9); /* 60 in 3 s */
    ps_stats(&c, ps, 5, 0, T0 + 5); /* a restarted ps counts from its checkpoint: measured anew */
    ps_stats(&c, ps, 45, 0, T0 + 7);
    assert_float_equal(p->updates_per_sec, 20, 1e-9);
    coord_cluster_deinit(&c);
}

/* When the job ends: each ps's update count is the final one (every step), even though its
 * last heartbeat came before the end, and no task shows a lag any more. */
static void test_final_count_and_no_lag(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "dense", "", T0, &ps, &w);
    coord_task *p = task_of(j, "ps", 0), *w0 = task_of(j, "worker", 0);
    ps_stats(&c, ps, 70, 1, T0 + 4);
    json_t *tj = coord_task_json(w0, LEASE, T0 + 4);
    assert_int_equal(json_integer_value(json_object_get(tj, "lag")), 1);
    json_decref(tj);
    chief_step(&c, j, 94, T0 + 4.5);
    take_events(&c, NULL, NULL);
    /* The chief succeeds at step 100; the ps's last heartbeat said 70. */
    json_t *r = json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:{s:i}}", "state", "succeeded", "job",
                          "dense", "generation", 1, "type", "worker", "index", 0, "exit_code", 0,
                          "result", "steps", 100);
    coord_node_heartbeat_json(&c, w, r, T0 + 5);
    json_decref(r);
    assert_int_equal(j->phase, COORD_SUCCEEDED);
    assert_int_equal(p->updates, 100);
    tj = coord_task_json(w0, LEASE, T0 + 5);
    assert_true(json_is_null(json_object_get(tj, "lag")));
    json_decref(tj);
    /* The clients' copy (task events) loses the lag too. */
    coord_event *ev;
    int n;
    ev = coord_cluster_take_events(&c, &n);
    bool told = false;
    for (int i = 0; i < n; i++) {
        if (ev[i].type == COORD_EVENT_TASK && !strcmp(ev[i].u.task.task.type, "worker"))
            told = !ev[i].u.task.task.has_lag;
        coord_event_deinit(&ev[i]);
    }
    pf_free(ev);
    assert_true(told);
    coord_cluster_deinit(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_restart_at_scale),
        cmocka_unit_test(test_restart_at_rollback),
        cmocka_unit_test(test_restart_at_replacement),
        cmocka_unit_test(test_stall),
        cmocka_unit_test(test_ps_updates_per_sec),
        cmocka_unit_test(test_final_count_and_no_lag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
