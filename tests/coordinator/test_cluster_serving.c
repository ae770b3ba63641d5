/* test_cluster_serving.c - a job's serving tasks in the coordinator's state machine
 * (coordinator/cluster_serving.c): placed on spare worker agents once the job is admitted and
 * never before a waiting job; Running once the agent reports an endpoint; figures taken in
 * range (rates from the counts), a malformed report ignored; a lost agent's task placed again;
 * kept through the job's success, stopped when it fails or is deleted; the assignment without
 * TF_CONFIG or key; the status JSON round trip. Agents are simulated; `now` is an argument.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "coordinator/cluster.h"
#include "coordinator/cluster_json.h"
#include "coordinator/cluster_serving.h"
#include "coordinator/dataplane_keys.h"
#include "psflow/mem.h"
#include "tests/support/cluster_fixture.h"

#define SERVING ", \"serving\": {\"replicas\": 2}"

/* A heartbeat of n's serving task: state, and its figures when endpoint is not NULL. */
static void serve_report(coord_cluster *c, coord_node *n, const char *state, const char *endpoint,
                         long long version, long long requests, double p99, double now) {
    coord_job *j = coord_job_find(c, n->job);
    assert_non_null(j);
    json_t *r = report_json(n, state, 0, j->serving[n->index].incarnation);
    if (endpoint)
        json_object_set_new(r, "serving",
                            json_pack("{s:s, s:o, s:I, s:I, s:f, s:f}", "endpoint", endpoint,
                                      "version", version >= 0 ? json_integer(version) : json_null(),
                                      "requests", (json_int_t)requests, "failed", (json_int_t)0,
                                      "latency_p50_ms", p99 / 2, "latency_p99_ms", p99));
    coord_node_heartbeat_json(c, n, r, now);
    json_decref(r);
}

/* A heartbeat of serving agent n (worker-b or worker-c of setup) at version 100. */
static void serve_running(coord_cluster *c, coord_node *n, double now) {
    serve_report(c, n, "running",
                 n->index ? "http://worker-c.test:8501/v1/models/served"
                          : "http://worker-b.test:8501/v1/models/served",
                 100, 0, 1, now);
}

static bool serves(const coord_node *n, const char *job, int index) {
    return !strcmp(n->job, job) && !strcmp(n->type, "serve") && n->index == index;
}

/* A 1 ps + 1 worker job with two serving tasks on a cluster of 1 ps and 3 worker agents. */
static coord_job *setup(coord_cluster *c, coord_node **nodes) {
    coord_cluster_init(c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "served", 1, 1, SERVING);
    assert_true(spec.serving.enabled);
    assert_int_equal(spec.serving.replicas, 2);
    coord_job *j = submit(c, &spec, T0);
    assert_int_equal(j->n_serving, 2);
    nodes[0] = add_node(c, "ps-a", "ps", T0 + 1);
    nodes[1] = add_node(c, "worker-a", "worker", T0 + 1);
    assert_int_equal(j->phase, COORD_RUNNING);
    /* nothing spare yet: the serving tasks wait */
    assert_int_equal(j->serving[0].state, TASK_PENDING);
    assert_string_equal(j->serving[0].node_id, "");
    nodes[2] = add_node(c, "worker-b", "worker", T0 + 2);
    nodes[3] = add_node(c, "worker-c", "worker", T0 + 2);
    assert_true(serves(nodes[2], "served", 0));
    assert_true(serves(nodes[3], "served", 1));
    assert_string_equal(j->serving[1].node_id, "worker-c");
    assert_int_equal(take_events(c, "log", "ServingAssigned"), 2);
    return j;
}

static void test_placed_on_spare_agents(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *n[4];
    coord_job *j = setup(&c, n);

    /* The assignment: the spec, the serving task's incarnation, no TF_CONFIG and no key. */
    json_t *a = coord_node_assignment(&c, n[2]);
    assert_string_equal(json_string_value(json_object_get(a, "type")), "serve");
    assert_true(!json_object_get(a, "tf_config") || json_is_null(json_object_get(a, "tf_config")));
    assert_true(json_is_object(json_object_get(a, "spec")));
    assert_int_equal((uint64_t)json_integer_value(json_object_get(a, "incarnation")),
                     j->serving[0].incarnation);
    uint8_t secret[PF_WIRE_KEY_SIZE] = {1};
    assert_int_equal(coord_assignment_add_key(a, &c, n[2], secret), 0);
    assert_null(json_object_get(a, "key"));
    json_decref(a);

    /* Running once it reports where it listens; its figures in the status. */
    serve_report(&c, n[2], "running", NULL, -1, 0, 0, T0 + 3);
    assert_int_equal(j->serving[0].state, TASK_PENDING);
    serve_report(&c, n[2], "running", "http://worker-b.test:8501/v1/models/served", -1, 0, 0,
                 T0 + 4);
    assert_int_equal(j->serving[0].state, TASK_RUNNING);
    assert_int_equal(j->serving[0].version, -1);
    assert_int_equal(take_events(&c, "log", "ServingStarted"), 1);
    serve_report(&c, n[2], "running", "http://worker-b.test:8501/v1/models/served", 500, 100, 2.5,
                 T0 + 5);
    serve_report(&c, n[2], "running", "http://worker-b.test:8501/v1/models/served", 1000, 500, 3.0,
                 T0 + 9);
    assert_int_equal(j->serving[0].version, 1000);
    assert_int_equal(j->serving[0].requests, 500);
    assert_true(fabs(j->serving[0].requests_per_sec - 100.0) < 1e-9); /* 400 in 4 s */
    assert_true(j->serving[0].latency_p99_ms == 3.0);
    json_t *st = coord_job_status_json(j);
    json_t *s0 = json_array_get(json_object_get(st, "serving"), 0);
    assert_string_equal(json_string_value(json_object_get(s0, "state")), "Running");
    assert_string_equal(json_string_value(json_object_get(s0, "endpoint")),
                        "http://worker-b.test:8501/v1/models/served");
    assert_int_equal(json_integer_value(json_object_get(s0, "version")), 1000);
    assert_true(json_is_null(
        json_object_get(json_array_get(json_object_get(st, "serving"), 1), "version")));

    /* The stored status brings them back (a coordinator restart). */
    coord_job *k = pf_calloc(1, sizeof *k);
    make_spec(&k->spec, "served", 1, 1, SERVING);
    assert_int_equal(coord_serving_make(k), PF_OK);
    coord_job_status_from_json(k, st);
    assert_int_equal(k->serving[0].state, TASK_RUNNING);
    assert_string_equal(k->serving[0].node_id, "worker-b");
    assert_string_equal(k->serving[0].endpoint, j->serving[0].endpoint);
    assert_int_equal(k->serving[0].version, 1000);
    assert_int_equal(k->serving[0].incarnation, j->serving[0].incarnation);
    assert_int_equal(k->serving[1].state, TASK_PENDING);
    coord_job_free(k);
    json_decref(st);
    coord_cluster_deinit(&c);
}

static void test_bad_figures_ignored(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *n[4];
    coord_job *j = setup(&c, n);
    serve_report(&c, n[2], "running", "http://worker-b.test:8501/v1/models/served", 500, 10, 1,
                 T0 + 3);
    static const char *const bad[] = {
        "{\"endpoint\": \"ftp://x\", \"version\": 1, \"requests\": 1, \"failed\": 0}",
        "{\"endpoint\": \"http://a b\", \"version\": 1, \"requests\": 1, \"failed\": 0}",
        "{\"endpoint\": null, \"version\": -4, \"requests\": 1, \"failed\": 0}",
        "{\"endpoint\": null, \"version\": 1, \"requests\": -1, \"failed\": 0}",
        "{\"endpoint\": null, \"version\": 1, \"requests\": 1, \"failed\": 2}",
        "{\"endpoint\": null, \"version\": 1, \"requests\": 1, \"failed\": 0, "
        "\"latency_p99_ms\": -3}",
        "{\"endpoint\": null, \"version\": 1, \"requests\": 1, \"failed\": 0, "
        "\"latency_p99_ms\": \"fast\"}",
        "[1]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *r = report_json(n[2], "running", 0, j->serving[0].incarnation);
        json_object_set_new(r, "serving", json_loads(bad[i], 0, NULL));
        coord_node_heartbeat_json(&c, n[2], r, T0 + 4 + (double)i);
        json_decref(r);
        assert_int_equal(j->serving[0].version, 500);
        assert_int_equal(j->serving[0].requests, 10);
        assert_string_equal(j->serving[0].endpoint, "http://worker-b.test:8501/v1/models/served");
    }
    /* A report of an earlier incarnation says nothing. */
    json_t *r = report_json(n[2], "failed", 1, j->serving[0].incarnation + 7);
    coord_node_heartbeat_json(&c, n[2], r, T0 + 20);
    json_decref(r);
    assert_int_equal(j->serving[0].state, TASK_RUNNING);
    coord_cluster_deinit(&c);
}

static void test_waiting_job_first(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "served", 1, 1, SERVING);
    coord_job *j = submit(&c, &spec, T0);
    add_node(&c, "ps-a", "ps", T0 + 1);
    add_node(&c, "worker-a", "worker", T0 + 1);
    assert_int_equal(j->phase, COORD_RUNNING);
    /* A second job needs 1 ps and 2 workers: the worker agents that come are held for it. */
    make_spec(&spec, "waiting", 1, 2, "");
    coord_job *w = submit(&c, &spec, T0 + 2);
    coord_node *b = add_node(&c, "worker-b", "worker", T0 + 3);
    assert_int_equal(w->phase, COORD_CREATED);
    assert_string_equal(b->job, "");
    assert_string_equal(j->serving[0].node_id, "");
    add_node(&c, "worker-c", "worker", T0 + 4);
    add_node(&c, "ps-b", "ps", T0 + 5);
    assert_int_equal(w->phase, COORD_RUNNING);
    assert_string_equal(j->serving[0].node_id, "");
    coord_node *d = add_node(&c, "worker-d", "worker", T0 + 6); /* spare now */
    assert_true(serves(d, "served", 0));
    coord_cluster_deinit(&c);
}

static void test_lost_agent_replaced(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *n[4];
    coord_job *j = setup(&c, n);
    serve_report(&c, n[2], "running", "http://worker-b.test:8501/v1/models/served", 500, 10, 1,
                 T0 + 3);
    /* Every other agent keeps heartbeating; worker-b falls silent. */
    for (double t = T0 + 4; t <= T0 + 3 + LEASE + 2; t += 1) {
        for (int i = 0; i < 4; i++)
            if (i != 2)
                report(&c, n[i], i < 2 ? "running" : "idle", 0, t);
        coord_cluster_tick(&c, t);
    }
    assert_true(n[2]->lost);
    assert_int_equal(j->serving[0].state, TASK_PENDING);
    assert_string_equal(j->serving[0].node_id, "");
    assert_int_equal(j->serving[0].version, -1);
    assert_int_equal(take_events(&c, "log", "ServingLost"), 1);
    /* The next spare worker agent takes it. */
    coord_node *e = add_node(&c, "worker-e", "worker", T0 + 20);
    assert_true(serves(e, "served", 0));
    assert_string_equal(j->serving[0].node_id, "worker-e");
    coord_cluster_deinit(&c);
}

static void test_failed_server_stays_failed(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *n[4];
    coord_job *j = setup(&c, n);
    json_t *r = report_json(n[3], "failed", 69, j->serving[1].incarnation);
    json_object_set_new(r, "message", json_string("cannot listen on 0.0.0.0:8501: in use"));
    coord_node_heartbeat_json(&c, n[3], r, T0 + 3);
    json_decref(r);
    assert_int_equal(j->serving[1].state, TASK_FAILED);
    assert_string_equal(j->serving[1].message, "cannot listen on 0.0.0.0:8501: in use");
    assert_string_equal(n[3]->job, ""); /* its agent is free */
    assert_int_equal(take_events(&c, "log", "ServingFailed"), 1);
    coord_cluster_tick(&c, T0 + 4);
    assert_string_equal(n[3]->job, ""); /* and it is not placed again */
    assert_int_equal(j->phase, COORD_RUNNING);
    coord_cluster_deinit(&c);
}

static void test_kept_after_success_stopped_on_delete(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *n[4];
    coord_job *j = setup(&c, n);
    for (int i = 0; i < 2; i++)
        report(&c, n[i], "running", 0, T0 + 3);
    serve_running(&c, n[2], T0 + 3);
    report(&c, n[0], "succeeded", 0, T0 + 5);
    report(&c, n[1], "succeeded", 0, T0 + 5);
    assert_int_equal(j->phase, COORD_SUCCEEDED);
    assert_string_equal(n[1]->job, "");     /* the trainer's agent is free */
    assert_true(serves(n[2], "served", 0)); /* the servers keep theirs */
    assert_true(serves(n[3], "served", 1));
    assert_int_equal(j->serving[0].state, TASK_RUNNING);
    coord_job_delete(&c, j, T0 + 6);
    assert_string_equal(n[2]->job, "");
    assert_string_equal(n[3]->job, "");
    assert_int_equal(j->serving[0].state, TASK_STOPPED);
    assert_int_equal(j->serving[1].state, TASK_STOPPED);
    coord_cluster_deinit(&c);
}

static void test_stopped_when_failed(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *n[4];
    coord_job *j = setup(&c, n);
    coord_job_cancel(&c, j, T0 + 3);
    assert_int_equal(j->phase, COORD_FAILED);
    assert_string_equal(n[2]->job, "");
    assert_int_equal(j->serving[0].state, TASK_STOPPED);
    coord_cluster_tick(&c, T0 + 4);
    assert_string_equal(n[2]->job, ""); /* never placed again */
    coord_cluster_deinit(&c);
}

/* A lost training worker with no idle agent left takes the agent of the job's own last
 * placed server: training first; the server waits for the next spare agent. */
static void test_server_yields_to_training(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *n[4];
    coord_job *j = setup(&c, n);
    for (double t = T0 + 3; t <= T0 + 3 + LEASE + 2; t += 1) { /* worker-a falls silent */
        report(&c, n[0], "running", 0, t);
        if (t == T0 + 3)
            report(&c, n[1], "running", 0, t);
        serve_running(&c, n[2], t);
        serve_running(&c, n[3], t);
        coord_cluster_tick(&c, t);
    }
    assert_true(n[1]->lost);
    assert_assigned(j, n[3], "worker", 0, 1);
    assert_int_equal(j->serving[1].state, TASK_PENDING);
    assert_string_equal(j->serving[1].node_id, "");
    assert_true(serves(n[2], "served", 0)); /* the other server keeps its agent */
    assert_int_equal(take_events(&c, "log", "ServingYielded"), 1);
    coord_node *e = add_node(&c, "worker-e", "worker", T0 + 20);
    assert_true(serves(e, "served", 1));
    coord_cluster_deinit(&c);
}

/* After a coordinator restart: slots come back by their index, and what the agents' stored
 * assignments say wins over a stale slot (coord_serving_reconcile). */
static void test_restore_checked_against_agents(void **state) {
    (void)state;
    coord_cluster c;
    coord_node *n[4];
    coord_job *j = setup(&c, n);
    /* A failure message cut inside a UTF-8 character still gives a stored status whose
     * serving entries are all there. */
    char why[400];
    memset(why, 'x', sizeof why);
    memcpy(why + 199, "\xc3\xa9", 2); /* an e-acute across the 200-byte cut */
    why[sizeof why - 1] = '\0';
    json_t *r = report_json(n[3], "failed", 69, j->serving[1].incarnation);
    json_object_set_new(r, "message", json_string(why));
    coord_node_heartbeat_json(&c, n[3], r, T0 + 3);
    json_decref(r);
    assert_int_equal(j->serving[1].state, TASK_FAILED);
    json_t *st = coord_job_status_json(j);
    json_t *arr = json_object_get(st, "serving");
    assert_int_equal(json_array_size(arr), 2);
    /* stored in the other order: each goes back to its own index */
    json_t *rev = json_array();
    json_array_append(rev, json_array_get(arr, 1));
    json_array_append(rev, json_array_get(arr, 0));
    json_object_set_new(st, "serving", rev);
    coord_job *k = pf_calloc(1, sizeof *k);
    make_spec(&k->spec, "served", 1, 1, SERVING);
    assert_int_equal(coord_serving_make(k), PF_OK);
    coord_job_status_from_json(k, st);
    assert_string_equal(k->serving[0].node_id, "worker-b");
    assert_int_equal(k->serving[1].state, TASK_FAILED);
    assert_int_equal(strlen(k->serving[1].message), 199); /* the half character dropped */
    coord_job_free(k);
    json_decref(st);

    /* worker-b's stored assignment names another slot; worker-d serves a slot that names
     * worker-b: both are put right. */
    n[2]->index = 1;
    coord_node *d = add_node(&c, "worker-d", "worker", T0 + 4);
    snprintf(d->job, sizeof d->job, "served");
    snprintf(d->type, sizeof d->type, "serve");
    d->index = 0;
    coord_serving_reconcile(&c);
    assert_string_equal(n[2]->job, "");             /* slot 1 names nobody (failed) */
    assert_string_equal(d->job, "");                /* slot 0 names worker-b */
    assert_string_equal(j->serving[0].node_id, ""); /* and worker-b does not serve it */
    assert_int_equal(j->serving[0].state, TASK_PENDING);
    coord_cluster_tick(&c, T0 + 5); /* placed again, on one agent */
    assert_string_equal(j->serving[0].node_id, "worker-b");
    assert_true(serves(n[2], "served", 0));
    assert_int_equal(j->serving[1].state, TASK_FAILED);
    coord_cluster_deinit(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placed_on_spare_agents),
        cmocka_unit_test(test_bad_figures_ignored),
        cmocka_unit_test(test_waiting_job_first),
        cmocka_unit_test(test_lost_agent_replaced),
        cmocka_unit_test(test_failed_server_stays_failed),
        cmocka_unit_test(test_kept_after_success_stopped_on_delete),
        cmocka_unit_test(test_stopped_when_failed),
        cmocka_unit_test(test_restore_checked_against_agents),
        cmocka_unit_test(test_server_yields_to_training),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
