/* test_cluster.c - the coordinator's state machine (coordinator/cluster.c), driven in-process
 * with explicit times: gang admission and the message naming the missing tasks, jobs waiting
 * their turn for agents, lease expiry and the restart policies (OnFailure with its backoff
 * limit, Never, ExitCode), agents that restart or leave, active_deadline_seconds, idempotent
 * submission, job order and the index by name, and times that survive their own text. The
 * chief's success, metrics, rollbacks and checkpoints are in test_cluster_reports.c, scaling
 * and suspension in test_cluster_scale.c, a lost or failed chief in test_cluster_replace.c.
 *
 * Agents are simulated by calling coord_node_register and coord_node_heartbeat with the
 * reports of api/rest.md; no test sleeps: `now` is an argument.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/cluster_fixture.h"
#include "coordinator/cluster.h"
#include "coordinator/cluster_json.h"
#include "psflow/mem.h"
#include "psflow/rng.h"
#include "psflow/spec.h"

#define SPEC_DIR PSFLOW_TEST_DATA "/spec/valid"

/* --- admission -------------------------------------------------------------------------------- */

/* docs/design.md section 3: a Created job's message names exactly the tasks without an agent, and a
 * job gets all of its agents at once or none (never a half-started job). */
static void test_gang_admission(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    pf_error err;
    assert_int_equal(pf_job_spec_load(SPEC_DIR "/design_example.json", &spec, &err), PF_OK);
    assert_int_equal(spec.replicas.ps, 2);
    assert_int_equal(spec.replicas.worker, 2);
    coord_job *j = submit(&c, &spec, T0);

    assert_int_equal(j->phase, COORD_CREATED);
    assert_string_equal(j->message, "waiting for agents: missing ps 0, ps 1, worker 0, worker 1");
    assert_condition(j, "Created", "True", "WaitingForAgents");
    assert_int_equal(j->generation, 0);
    assert_int_equal(take_events(&c, "log", "JobCreated"), 1);
    const char *why = NULL;
    assert_null(coord_job_tf_config(j, "worker", 0, &why));
    assert_string_equal(why, "the job has no agents assigned yet");
    assert_null(coord_job_tf_config(j, "worker", 2, &why));
    assert_string_equal(why, "the job has no such task");

    /* Agents arrive one at a time: until the last one, nothing is assigned. */
    static const struct {
        const char *id, *role, *message;
    } arrivals[] = {
        {"ps-a", "ps", "waiting for agents: missing ps 1, worker 0, worker 1"},
        {"worker-a", "worker", "waiting for agents: missing ps 1, worker 1"},
        {"worker-b", "worker", "waiting for agents: missing ps 1"},
    };
    coord_node *nodes[4];
    for (int i = 0; i < 3; i++) {
        nodes[i] = add_node(&c, arrivals[i].id, arrivals[i].role, T0 + 1 + i);
        assert_int_equal(j->phase, COORD_CREATED);
        assert_string_equal(j->message, arrivals[i].message);
        assert_int_equal(j->generation, 0);
        assert_true(j->start_time == 0);
        for (int k = 0; k <= i; k++)
            assert_idle(&c, nodes[k]);
        for (int k = 0; k < j->n_tasks; k++)
            assert_string_equal(j->tasks[k].node_id, "");
    }
    assert_int_equal(take_events(&c, "log", "WaitingForAgents"), 3);

    nodes[3] = add_node(&c, "ps-b", "ps", T0 + 5);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 1);
    assert_true(j->start_time == T0 + 5);
    assert_string_equal(j->message, "4 tasks assigned to agents");
    assert_condition(j, "Running", "True", "JobRunning");
    assert_int_equal(take_events(&c, "log", "JobRunning"), 1);
    /* Agents are taken in registration order, tasks in index order. */
    assert_assigned(j, nodes[0], "ps", 0, 1);
    assert_assigned(j, nodes[3], "ps", 1, 1);
    assert_assigned(j, nodes[1], "worker", 0, 1);
    assert_assigned(j, nodes[2], "worker", 1, 1);
    for (int k = 0; k < j->n_tasks; k++)
        assert_int_equal(j->tasks[k].state, TASK_PENDING);

    /* The heartbeat answer carries the assignment with the task's TF_CONFIG. */
    json_t *a = coord_node_assignment(&c, nodes[2]);
    assert_string_equal(json_string_value(json_object_get(a, "job")), "fmnist-mlp");
    assert_string_equal(json_string_value(json_object_get(a, "type")), "worker");
    assert_int_equal(json_integer_value(json_object_get(a, "index")), 1);
    assert_int_equal(json_integer_value(json_object_get(a, "generation")), 1);
    assert_true(json_is_object(json_object_get(a, "spec")));
    json_t *tf = json_loads(json_string_value(json_object_get(a, "tf_config")), 0, NULL);
    assert_non_null(tf);
    json_t *cluster = json_object_get(tf, "cluster");
    assert_string_equal(json_string_value(json_array_get(json_object_get(cluster, "ps"), 1)),
                        "ps-b.test:2222");
    assert_string_equal(json_string_value(json_array_get(json_object_get(cluster, "worker"), 0)),
                        "worker-a.test:2222");
    assert_string_equal(json_string_value(json_object_get(json_object_get(tf, "task"), "type")),
                        "worker");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(tf, "task"), "index")), 1);
    json_decref(tf);
    json_decref(a);

    /* Once every agent reports its task running, the message says so. */
    for (int i = 0; i < 4; i++)
        report(&c, nodes[i], "running", 0, T0 + 6);
    for (int k = 0; k < j->n_tasks; k++)
        assert_int_equal(j->tasks[k].state, TASK_RUNNING);
    assert_string_equal(j->message, "all 4 tasks running");

    /* An agent arriving later finds nothing to do. */
    coord_node *spare = add_node(&c, "worker-c", "worker", T0 + 7);
    assert_idle(&c, spare);
    coord_cluster_deinit(&c);
}

/* A second job waits for the first one's agents, and gets them only once they are idle
 * again: an agent still reporting a running task is not handed another. */
static void test_jobs_wait_their_turn(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *first = running_pair(&c, "first", "", T0, &ps, &w);
    pf_job_spec spec;
    make_spec(&spec, "second", 1, 1, "");
    coord_job *second = submit(&c, &spec, T0 + 1);
    assert_int_equal(second->phase, COORD_CREATED);
    assert_string_equal(second->message, "waiting for agents: missing ps 0, worker 0");

    coord_job_cancel(&c, first, T0 + 2);
    assert_int_equal(first->phase, COORD_FAILED);
    assert_condition(first, "Failed", "True", "Cancelled");
    assert_condition(first, "Running", "False", NULL);
    assert_true(first->completion_time == T0 + 2);
    assert_string_equal(ps->job, "");
    assert_string_equal(w->job, "");

    /* The agents still run the cancelled tasks until they report otherwise. */
    coord_cluster_tick(&c, T0 + 3);
    assert_int_equal(second->phase, COORD_CREATED);
    report(&c, ps, "idle", 0, T0 + 4);
    assert_int_equal(second->phase, COORD_CREATED);
    assert_string_equal(second->message, "waiting for agents: missing worker 0");
    report(&c, w, "idle", 0, T0 + 4);
    assert_int_equal(second->phase, COORD_RUNNING);
    assert_assigned(second, ps, "ps", 0, 1);
    assert_assigned(second, w, "worker", 0, 1);

    /* Cancelling a finished job changes nothing. */
    coord_job_cancel(&c, first, T0 + 5);
    assert_true(first->completion_time == T0 + 2);
    assert_condition(first, "Failed", "True", "Cancelled");
    coord_cluster_deinit(&c);
}

/* --- failures --------------------------------------------------------------------------------- */

/* A lease expires after more than `lease` seconds of silence: the agent is lost, the job
 * restarts as a new generation once agents are back, and fails past backoff_limit. */
static void test_lease_expiry_and_backoff(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j =
        running_pair(&c, "lease", ", \"run_policy\": {\"backoff_limit\": 1}", T0, &ps, &w);
    uint64_t first_incarnation = task_of(j, "ps", 0)->incarnation;

    /* Exactly `lease` seconds of silence is still within the lease. The ps agent is the one
     * that goes silent: a ps holds the variables, so losing it restarts the gang. */
    report(&c, w, "running", 0, T0 + 8);
    report(&c, ps, "running", 0, T0 + 2);
    coord_cluster_tick(&c, T0 + 2 + LEASE);
    assert_false(ps->lost);
    assert_int_equal(j->phase, COORD_RUNNING);

    coord_cluster_tick(&c, T0 + 2.5 + LEASE);
    assert_true(ps->lost);
    assert_false(w->lost);
    assert_int_equal(take_events(&c, "log", "NodeLost"), 1);
    json_t *nj = coord_node_json(ps, T0 + 12.5);
    assert_string_equal(json_string_value(json_object_get(nj, "state")), "lost");
    json_decref(nj);
    assert_int_equal(j->phase, COORD_RESTARTING);
    assert_int_equal(j->restarts, 1);
    assert_condition(j, "Restarting", "True", "TaskLost");
    assert_condition(j, "Running", "False", NULL);
    assert_int_equal(task_of(j, "ps", 0)->state, TASK_LOST);
    /* The whole gang is released; w-a still reports its task running. */
    assert_string_equal(w->job, "");
    assert_string_equal(j->message, "waiting for agents: missing ps 0, worker 0");

    report(&c, w, "idle", 0, T0 + 13);
    assert_int_equal(j->phase, COORD_RESTARTING);
    assert_string_equal(j->message, "waiting for agents: missing ps 0");
    assert_condition(j, "Restarting", "True", "TaskLost"); /* it keeps its reason */

    /* The lost agent comes back: the gang starts again as generation 2. */
    add_node(&c, "ps-a", "ps", T0 + 13.5);
    assert_false(ps->lost);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 2);
    assert_condition(j, "Running", "True", "JobRestarted");
    assert_condition(j, "Restarting", "False", NULL);
    assert_assigned(j, ps, "ps", 0, 2);
    assert_assigned(j, w, "worker", 0, 2);
    for (int k = 0; k < j->n_tasks; k++) {
        assert_int_equal(j->tasks[k].state, TASK_PENDING);
        assert_int_equal(j->tasks[k].restarts, 1);
    }
    assert_true(task_of(j, "ps", 0)->incarnation > first_incarnation);

    /* A second loss is past backoff_limit 1: the job fails and frees its agents. */
    report(&c, ps, "running", 0, T0 + 14);
    report(&c, w, "running", 0, T0 + 14);
    report(&c, w, "running", 0, T0 + 25);
    coord_cluster_tick(&c, T0 + 30);
    assert_true(ps->lost);
    assert_int_equal(j->phase, COORD_FAILED);
    assert_condition(j, "Failed", "True", "BackoffLimitExceeded");
    assert_int_equal(j->restarts, 1);
    assert_non_null(strstr(j->message, "backoff limit 1 reached"));
    assert_true(j->completion_time == T0 + 30);
    assert_string_equal(w->job, "");

    /* Time passing after the end changes nothing. */
    coord_cluster_tick(&c, T0 + 100);
    assert_int_equal(j->phase, COORD_FAILED);
    assert_true(j->completion_time == T0 + 30);
    coord_cluster_deinit(&c);
}

/* A worker that is lost or fails is replaced alone (the chief too: test_cluster_replace.c):
 * the others carry on in the same generation (no gang restart, no rollback), its replacement
 * runs on the next idle worker agent as a new incarnation, and it waits for one when there is
 * none. */
static void test_worker_replaced_alone(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "elastic", 1, 2, ", \"run_policy\": {\"backoff_limit\": 2}");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *ps = add_node(&c, "ps-a", "ps", T0);
    coord_node *w0 = add_node(&c, "w-a", "worker", T0);
    coord_node *w1 = add_node(&c, "w-b", "worker", T0);
    assert_int_equal(j->phase, COORD_RUNNING);
    for (coord_node *n = ps; n; n = n == ps ? w0 : n == w0 ? w1 : NULL)
        report(&c, n, "running", 0, T0 + 1);
    uint64_t first = task_of(j, "worker", 1)->incarnation;
    take_events(&c, NULL, NULL);

    /* w-b goes silent; no spare agent yet: worker 1 waits, the job keeps Running. */
    report(&c, ps, "running", 0, T0 + 9);
    report(&c, w0, "running", 0, T0 + 9);
    coord_cluster_tick(&c, T0 + 12.25);
    assert_true(w1->lost);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 1);
    assert_int_equal(j->restarts, 0);
    assert_int_equal(task_of(j, "worker", 1)->state, TASK_PENDING);
    assert_string_equal(task_of(j, "worker", 1)->node_id, "");
    assert_assigned(j, ps, "ps", 0, 1);
    assert_assigned(j, w0, "worker", 0, 1);
    assert_string_equal(j->message, "waiting for an agent to replace worker 1");
    assert_int_equal(take_events(&c, "log", "TaskLost"), 1);

    /* A spare agent registers: worker 1 runs there, same generation, new incarnation. */
    coord_node *spare = add_node(&c, "w-c", "worker", T0 + 13);
    assert_assigned(j, spare, "worker", 1, 1);
    coord_task *t = task_of(j, "worker", 1);
    assert_true(t->incarnation > first);
    assert_int_equal(t->restarts, 1);
    assert_int_equal(j->generation, 1);
    assert_int_equal(take_events(&c, "log", "TaskReplaced"), 1);
    report(&c, spare, "running", 0, T0 + 14);
    assert_int_equal(t->state, TASK_RUNNING);
    assert_string_equal(j->message, "all 3 tasks running");

    /* It fails (a signal): replaced again, on the agent that just gave it up if that is the
     * idle one, as a new incarnation its agent starts afresh. */
    uint64_t failed = t->incarnation;
    report(&c, spare, "failed", 137, T0 + 15);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_assigned(j, spare, "worker", 1, 1);
    assert_true(t->incarnation > failed);
    assert_int_equal(t->state, TASK_PENDING);
    assert_int_equal(t->restarts, 2);
    assert_int_equal(j->generation, 1);
    json_t *a = coord_node_assignment(&c, spare);
    assert_int_equal(json_integer_value(json_object_get(a, "incarnation")), t->incarnation);
    json_decref(a);
    take_events(&c, NULL, NULL);
    /* The agent's next heartbeat may still be about the failed incarnation (sent before it
     * saw the new one): it is stale and counts as no second failure. */
    report_incarnation(&c, spare, "failed", 137, failed, T0 + 15.5);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(t->state, TASK_PENDING);
    assert_int_equal(t->restarts, 2);
    assert_assigned(j, spare, "worker", 1, 1);
    assert_int_equal(take_events(&c, "log", "TaskFailed"), 0);
    report(&c, spare, "running", 0, T0 + 16);
    assert_int_equal(t->state, TASK_RUNNING);
    assert_string_equal(j->message, "all 3 tasks running");
    /* The new incarnation fails: past backoff_limit replacements, the job restarts as a gang
     * (as a ps loss does at once: test_lease_expiry_and_backoff). */
    report(&c, spare, "failed", 137, T0 + 17);
    assert_int_equal(j->phase, COORD_RESTARTING);
    assert_int_equal(j->restarts, 1);
    coord_cluster_deinit(&c);
}

/* restart_policy Never: the first lost task fails the job. */
static void test_restart_policy_never(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "never", 1, 2, ", \"run_policy\": {\"restart_policy\": \"Never\"}");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *ps = add_node(&c, "ps-a", "ps", T0);
    coord_node *w0 = add_node(&c, "w-a", "worker", T0);
    coord_node *w1 = add_node(&c, "w-b", "worker", T0 + 1);
    assert_int_equal(j->phase, COORD_RUNNING);
    report(&c, ps, "running", 0, T0 + 9);
    report(&c, w0, "running", 0, T0 + 9);

    coord_cluster_tick(&c, T0 + 12.25); /* w-b silent for 11.25 s */
    assert_true(w1->lost);
    assert_int_equal(j->phase, COORD_FAILED);
    assert_condition(j, "Failed", "True", "TaskLost");
    assert_int_equal(j->restarts, 0);
    assert_string_equal(j->message, "worker 1 lost: agent w-b sent no heartbeat for 11 s; "
                                    "restart policy does not restart it");
    assert_int_equal(task_of(j, "worker", 1)->state, TASK_LOST);
    assert_string_equal(ps->job, "");
    assert_string_equal(w0->job, "");
    json_t *status = coord_job_status_json(j);
    json_t *workers = json_object_get(json_object_get(status, "replica_statuses"), "worker");
    assert_int_equal(json_integer_value(json_object_get(workers, "failed")), 1);
    json_decref(status);
    coord_cluster_deinit(&c);
}

/* restart_policy ExitCode (TFJob): exit codes 128-255 (signals) restart, 1-127 fail. */
static void test_restart_policy_exit_code(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "exit", ", \"run_policy\": {\"restart_policy\": \"ExitCode\"}",
                                T0, &ps, &w);

    /* The ps task fails: a gang restart (a worker's failure replaces it alone). */
    report(&c, ps, "failed", 137, T0 + 1);
    assert_int_equal(j->phase, COORD_RESTARTING);
    assert_condition(j, "Restarting", "True", "TaskFailed");
    assert_int_equal(j->restarts, 1);
    assert_int_equal(task_of(j, "ps", 0)->state, TASK_FAILED);

    report(&c, ps, "idle", 0, T0 + 2);
    report(&c, w, "idle", 0, T0 + 2);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 2);

    /* A report for the old generation is ignored. */
    json_t *stale = json_pack("{s:s, s:s, s:i, s:s, s:i, s:i}", "state", "failed", "job", "exit",
                              "generation", 1, "type", "ps", "index", 0, "exit_code", 1);
    coord_node_heartbeat_json(&c, ps, stale, T0 + 3);
    json_decref(stale);
    assert_int_equal(j->phase, COORD_RUNNING);

    report(&c, ps, "failed", 1, T0 + 4);
    assert_int_equal(j->phase, COORD_FAILED);
    assert_condition(j, "Failed", "True", "TaskFailed");
    assert_int_equal(j->restarts, 1);
    assert_non_null(strstr(j->message, "exit code 1"));
    coord_cluster_deinit(&c);
}

/* A ps's stats.lags (training.max_staleness) land on the training tasks' rows: training
 * task i is worker i without a chief replica; -1 (not connected) and a malformed list give
 * null. */
static json_t *ps_report(coord_node *ps, coord_task *t, json_t *lags) {
    json_t *r = report_json(ps, "running", 0, t->incarnation);
    json_object_set_new(r, "stats",
                        json_pack("{s:i, s:i, s:o}", "updates", 10, "stale", 0, "lags", lags));
    return r;
}

static void test_staleness_lags(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "ssp", "", T0, &ps, &w);
    coord_task *t = task_of(j, "worker", 0);
    json_t *js = coord_task_json(t, LEASE, T0);
    assert_true(json_is_null(json_object_get(js, "lag"))); /* nothing reported */
    json_decref(js);
    json_t *r = ps_report(ps, task_of(j, "ps", 0), json_pack("[i, i]", 2, -1));
    coord_node_heartbeat_json(&c, ps, r, T0 + 1);
    json_decref(r);
    assert_true(t->has_lag);
    js = coord_task_json(t, LEASE, T0 + 1);
    assert_int_equal(json_integer_value(json_object_get(js, "lag")), 2);
    json_decref(js);
    r = ps_report(ps, task_of(j, "ps", 0), json_pack("[i]", -1));
    coord_node_heartbeat_json(&c, ps, r, T0 + 2);
    json_decref(r);
    assert_false(t->has_lag);
    t->has_lag = true;
    t->lag = 5;
    r = ps_report(ps, task_of(j, "ps", 0), json_pack("[i, s]", 1, "x")); /* malformed: ignored */
    coord_node_heartbeat_json(&c, ps, r, T0 + 3);
    json_decref(r);
    r = ps_report(ps, task_of(j, "ps", 0), json_pack("[i]", -7)); /* below -1: ignored */
    coord_node_heartbeat_json(&c, ps, r, T0 + 4);
    json_decref(r);
    assert_true(t->has_lag);
    assert_int_equal(t->lag, 5);
    coord_cluster_deinit(&c);
}

/* A task that stopped on a NaN or infinite number (reason NonFiniteLoss) fails the job with
 * that reason and its message, with no restart even under OnFailure. */
static void test_nonfinite_fails_the_job(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "nan", "", T0, &ps, &w);
    json_t *r =
        json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:s, s:s}", "state", "failed", "job", "nan",
                  "generation", 1, "type", "worker", "index", 0, "exit_code", 65, "message",
                  "non-finite loss (inf) at step 7; nothing pushed", "reason", "NonFiniteLoss");
    coord_node_heartbeat_json(&c, w, r, T0 + 1);
    json_decref(r);
    assert_int_equal(j->phase, COORD_FAILED);
    assert_condition(j, "Failed", "True", "NonFiniteLoss");
    assert_int_equal(j->restarts, 0);
    assert_string_equal(j->message, "worker 0: non-finite loss (inf) at step 7; nothing pushed");
    coord_cluster_deinit(&c);
}

/* An agent that registers again has restarted and lost its task; one that deregisters is
 * gone. Both restart the gang when the task is a ps (it holds the variables). */
static void test_agent_restart_and_removal(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "agents", "", T0, &ps, &w);

    report(&c, ps, "idle", 0, T0 + 1); /* the agent's process restarted */
    coord_node *again = add_node(&c, "ps-a", "ps", T0 + 1);
    assert_ptr_equal(again, ps);
    assert_int_equal(c.n_nodes, 2);
    assert_int_equal(take_events(&c, "log", "TaskLost"), 1);
    assert_int_equal(j->restarts, 1);
    /* w-a still reports the old generation running: the gang waits for it. */
    assert_int_equal(j->phase, COORD_RESTARTING);
    report(&c, w, "idle", 0, T0 + 2);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 2);

    coord_node_remove(&c, ps, T0 + 3);
    assert_true(ps->deleted);
    assert_null(coord_node_find(&c, "ps-a"));
    assert_int_equal(j->phase, COORD_RESTARTING);
    assert_int_equal(j->restarts, 2);
    assert_int_equal(task_of(j, "ps", 0)->state, TASK_LOST);
    assert_string_equal(j->message, "waiting for agents: missing ps 0");
    coord_cluster_reap(&c);
    assert_int_equal(c.n_nodes, 1);
    assert_ptr_equal(c.nodes[0], w);
    coord_cluster_deinit(&c);
}

/* active_deadline_seconds counts from the job's start (its first admission): the tick fails
 * a job running longer. */
static void test_active_deadline(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, 1e6); /* leases never expire here */
    pf_job_spec spec;
    make_spec(&spec, "deadline", 1, 1, ", \"run_policy\": {\"active_deadline_seconds\": 60}");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *ps = add_node(&c, "ps-a", "ps", T0 + 5);
    coord_node *w = add_node(&c, "w-a", "worker", T0 + 5);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_true(j->start_time == T0 + 5);

    coord_cluster_tick(&c, T0 + 65);
    assert_int_equal(j->phase, COORD_RUNNING);
    coord_cluster_tick(&c, T0 + 65.5);
    assert_int_equal(j->phase, COORD_FAILED);
    assert_condition(j, "Failed", "True", "DeadlineExceeded");
    assert_string_equal(j->message, "ran longer than active_deadline_seconds (60 s)");
    assert_true(j->completion_time == T0 + 65.5);
    assert_string_equal(ps->job, "");
    assert_string_equal(w->job, "");
    assert_int_equal(take_events(&c, "log", "DeadlineExceeded"), 1);
    coord_cluster_deinit(&c);
}

/* --- jobs ------------------------------------------------------------------------------------- */

/* The same spec again is a safe retry (created 0, nothing queued); another spec under the
 * same name is refused and left with the caller; a deleted job's name is free again. */
static void test_submit_idempotent(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "same", 1, 1, "");
    coord_job *j = submit(&c, &spec, T0);
    take_events(&c, NULL, NULL);

    /* The normalised text of the spec is the same spec. */
    parse_spec(j->spec_json, &spec);
    coord_job *again = NULL;
    int created = -1;
    pf_error err;
    assert_int_equal(coord_job_submit(&c, &spec, T0 + 1, &again, &created, &err), PF_OK);
    assert_int_equal(created, 0);
    assert_ptr_equal(again, j);
    assert_int_equal(c.n_jobs, 1);
    assert_int_equal(take_events(&c, NULL, NULL), 0);
    assert_true(j->create_time == T0);
    pf_job_spec_deinit(&spec); /* not taken on a retry */

    make_spec(&spec, "same", 1, 2, "");
    again = NULL;
    assert_int_equal(coord_job_submit(&c, &spec, T0 + 2, &again, &created, &err), PF_ERR_INVALID);
    assert_null(again);
    assert_int_equal(created, 0);
    assert_string_equal(err.pointer, "/name");
    assert_non_null(strstr(err.message, "'same'"));
    assert_string_equal(spec.name, "same"); /* still the caller's */
    assert_int_equal(c.n_jobs, 1);
    assert_int_equal(j->spec.replicas.worker, 1);

    pf_job_spec other;
    parse_spec("{\"name\": \"eval\", \"replicas\": {\"evaluator\": 1},"
               " \"model\": {\"type\": \"linear\", \"inputs\": 1},"
               " \"data\": {\"format\": \"synthetic_linear\"}}",
               &other);
    /* An evaluator is a task of its own, run by a worker agent after the training tasks. */
    coord_job *ev = NULL;
    assert_int_equal(coord_job_submit(&c, &other, T0 + 3, &ev, &created, &err), PF_OK);
    assert_int_equal(created, 1);
    assert_int_equal(ev->n_tasks, 3);
    assert_string_equal(ev->tasks[2].type, "evaluator");
    assert_int_equal(ev->tasks[2].index, 0);
    assert_true(ev->eval_step < 0 && isnan(ev->eval_accuracy));
    coord_job_delete(&c, ev, T0 + 3);
    pf_job_spec_deinit(&other);

    /* Once deleted, the name takes another spec. */
    coord_job_delete(&c, j, T0 + 4);
    assert_true(j->deleted);
    assert_null(coord_job_find(&c, "same"));
    make_spec(&other, "same", 1, 2, "");
    coord_job *fresh = submit(&c, &other, T0 + 5);
    coord_cluster_reap(&c);
    assert_int_equal(c.n_jobs, 1);
    assert_ptr_equal(coord_job_find(&c, "same"), fresh);
    assert_int_equal(fresh->spec.replicas.worker, 2);
    pf_job_spec_deinit(&spec);
    coord_cluster_deinit(&c);
}

/* Jobs are kept in creation order, (create_time, name), whatever order they come in (a
 * clock set back, a reload), found by name through the index, also after deletions; a
 * position found by coord_cluster_jobs_before walks every job exactly once. */
static void test_job_order_and_index(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    enum { N = 300 };
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "job-%03d", i);
        pf_job_spec spec;
        make_spec(&spec, name, 1, 1, "");
        /* Times out of order, with ties broken by name. */
        submit(&c, &spec, T0 + (double)((i * 37) % 100));
    }
    take_events(&c, NULL, NULL);
    assert_int_equal(c.n_jobs, N);
    for (int i = 1; i < N; i++) {
        const coord_job *a = c.jobs[i - 1], *b = c.jobs[i];
        assert_true(a->create_time < b->create_time ||
                    (a->create_time == b->create_time && strcmp(a->name, b->name) < 0));
    }
    for (int i = 0; i < N; i++) {
        assert_ptr_equal(coord_job_find(&c, c.jobs[i]->name), c.jobs[i]);
        assert_int_equal(coord_cluster_jobs_before(&c, c.jobs[i]->create_time, c.jobs[i]->name), i);
    }
    assert_null(coord_job_find(&c, "job-300"));
    assert_int_equal(coord_cluster_jobs_before(&c, T0 - 1, "a"), 0);
    assert_int_equal(coord_cluster_jobs_before(&c, T0 + 1000, "a"), N);

    /* Every third job deleted: the others are still found, the deleted ones are not. */
    for (int i = 0; i < N; i += 3)
        coord_job_delete(&c, c.jobs[i], T0 + 200);
    coord_cluster_reap(&c);
    take_events(&c, NULL, NULL);
    assert_int_equal(c.n_jobs, N - N / 3);
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "job-%03d", i);
        coord_job *j = coord_job_find(&c, name);
        int found = 0;
        for (int k = 0; k < c.n_jobs; k++)
            found += !strcmp(c.jobs[k]->name, name);
        assert_int_equal(j != NULL, found);
    }

    /* Pages of 7, newest first, each starting below the last job of the one before. */
    int seen[N] = {0}, listed = 0;
    int at = c.n_jobs;
    while (at > 0) {
        const coord_job *last = NULL;
        for (int k = 0; k < 7 && at > 0; k++, listed++) {
            last = c.jobs[--at];
            seen[atoi(last->name + 4)]++;
        }
        at = coord_cluster_jobs_before(&c, last->create_time, last->name);
    }
    assert_int_equal(listed, c.n_jobs);
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "job-%03d", i);
        assert_int_equal(seen[i], coord_job_find(&c, name) != NULL);
    }
    coord_cluster_deinit(&c);
}

/* --- serialisation ---------------------------------------------------------------------------- */

static void assert_time_text(double t, const char *text) {
    json_t *v = coord_time_json(t);
    if (!text)
        assert_true(json_is_null(v));
    else
        assert_string_equal(json_string_value(v), text);
    json_decref(v);
}

/* Times are written to the millisecond, rounded; a status read back from its own JSON (as
 * the store does) writes the same JSON again, for any sub-millisecond time. */
static void test_time_round_trip(void **state) {
    (void)state;
    assert_time_text(0, NULL);
    assert_time_text(-1, NULL);
    assert_time_text(T0, "2025-11-22T10:00:00.000Z");
    assert_time_text(T0 + 0.5674, "2025-11-22T10:00:00.567Z");
    assert_time_text(T0 + 0.5676, "2025-11-22T10:00:00.568Z");
    assert_time_text(T0 + 0.0004, "2025-11-22T10:00:00.000Z");
    assert_time_text(T0 + 59.9996, "2025-11-22T10:01:00.000Z"); /* carries into the minute */
    assert_time_text(951782400.25, "2000-02-29T00:00:00.250Z");

    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "times", 1, 1, "");
    coord_job *j = submit(&c, &spec, T0);
    coord_job *copy = pf_calloc(1, sizeof *copy);
    assert_non_null(copy);
    assert_int_equal(pf_job_spec_copy(&copy->spec, &j->spec), PF_OK);
    assert_int_equal(coord_job_make_tasks(copy), PF_OK);

    pf_rng rng;
    pf_rng_init(&rng, 7, 0);
    for (int i = 0; i < 5000; i++) {
        /* Whole seconds from 2001 to 2033 plus a fraction with sub-millisecond digits. */
        double t = 1e9 + (double)pf_rng_below(&rng, 1000000000) + pf_rng_uniform(&rng);
        j->create_time = t;
        j->start_time = t + pf_rng_uniform(&rng);
        j->completion_time = t + 1000 * pf_rng_uniform(&rng);
        for (int k = 0; k < j->n_conds; k++)
            j->conds[k].time = t + 0.001 * k + 0.0001 * (double)pf_rng_below(&rng, 10);
        json_t *first = coord_job_status_json(j);
        coord_job_status_from_json(copy, first);
        json_t *second = coord_job_status_json(copy);
        char *a = json_dumps(first, JSON_COMPACT | JSON_SORT_KEYS);
        char *b = json_dumps(second, JSON_COMPACT | JSON_SORT_KEYS);
        assert_non_null(a);
        assert_non_null(b);
        if (strcmp(a, b) != 0)
            fail_msg("time %.6f:\n  %s\n  %s", t, a, b);
        assert_true(fabs(copy->create_time - t) <= 0.0005 + 1e-6);
        free(a);
        free(b);
        json_decref(first);
        json_decref(second);
    }
    coord_job_free(copy);
    coord_cluster_deinit(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gang_admission),
        cmocka_unit_test(test_jobs_wait_their_turn),
        cmocka_unit_test(test_lease_expiry_and_backoff),
        cmocka_unit_test(test_worker_replaced_alone),
        cmocka_unit_test(test_restart_policy_never),
        cmocka_unit_test(test_restart_policy_exit_code),
        cmocka_unit_test(test_nonfinite_fails_the_job),
        cmocka_unit_test(test_staleness_lags),
        cmocka_unit_test(test_agent_restart_and_removal),
        cmocka_unit_test(test_active_deadline),
        cmocka_unit_test(test_submit_idempotent),
        cmocka_unit_test(test_job_order_and_index),
        cmocka_unit_test(test_time_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
