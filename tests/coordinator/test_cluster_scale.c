/* test_cluster_scale.c - the coordinator's state machine (coordinator/cluster.c) when a
 * job's worker count changes: live PATCH of a running job (tasks resized in place, added
 * workers started once every ps runs with the new membership, removed workers stopped),
 * replicas_to_aggregate with and without backup workers, task order, suspension, async;
 * and when its ps count changes (coord_job_set_ps: a restart as a new generation). Driven
 * in-process with explicit times, as test_cluster.c.
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
#include "psflow/spec.h"

/* The ps agent's heartbeat saying its ps runs with `workers` workers. */
static void report_workers(coord_cluster *c, coord_node *n, int workers, double now) {
    json_t *r = json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:i}", "state", "running", "job", n->job,
                          "generation", n->generation, "type", n->type, "index", n->index,
                          "exit_code", 0, "workers", workers);
    coord_node_heartbeat_json(c, n, r, now);
    json_decref(r);
}

/* Scaling a running job is live: no restart, the other tasks keep their agents; an added
 * worker gets an agent once every ps runs with the new membership, a removed one's agent is
 * freed. A sync job that aggregates every worker keeps doing so. Suspension frees the
 * agents until the job is resumed. A finished job takes no patch. */
static void test_scale_and_suspend(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    parse_spec("{\"name\": \"elastic\", \"replicas\": {\"ps\": 1, \"worker\": 2},"
               " \"model\": {\"type\": \"linear\", \"inputs\": 1},"
               " \"data\": {\"format\": \"synthetic_linear\"}, \"training\": {\"mode\": \"sync\"}}",
               &spec);
    assert_int_equal(spec.training.replicas_to_aggregate, 2);
    coord_job *j = submit(&c, &spec, T0);
    coord_node *ps = add_node(&c, "ps-a", "ps", T0);
    coord_node *w0 = add_node(&c, "w-a", "worker", T0);
    coord_node *w1 = add_node(&c, "w-b", "worker", T0);
    assert_int_equal(j->phase, COORD_RUNNING);
    take_events(&c, NULL, NULL);

    pf_error err;
    assert_int_equal(coord_job_patch(&c, j, 3, -1, T0 + 1, &err), PF_OK);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_null(find_condition(j, "Restarting"));
    assert_int_equal(j->generation, 1);
    assert_int_equal(j->restarts, 0);
    assert_int_equal(j->n_tasks, 4);
    assert_int_equal(j->spec.replicas.worker, 3);
    assert_int_equal(j->spec.training.replicas_to_aggregate, 3); /* it followed the count */
    assert_int_equal(take_events(&c, "log", "WorkersAdded"), 1);
    assert_assigned(j, ps, "ps", 0, 1);
    assert_assigned(j, w0, "worker", 0, 1);
    assert_assigned(j, w1, "worker", 1, 1);
    pf_job_spec stored;
    parse_spec(j->spec_json, &stored);
    assert_int_equal(stored.replicas.worker, 3);
    assert_int_equal(stored.training.replicas_to_aggregate, 3);
    pf_job_spec_deinit(&stored);
    /* Worker 2 waits for the ps to run with 3 workers (its agent says so), then joins. */
    coord_node *w2 = add_node(&c, "w-c", "worker", T0 + 2);
    assert_idle(&c, w2);
    report_workers(&c, ps, 3, T0 + 2);
    assert_assigned(j, w2, "worker", 2, 1);
    assert_int_equal(task_of(j, "worker", 2)->restarts, 0);
    assert_int_equal(take_events(&c, "log", "TaskAdded"), 1);
    json_t *a = coord_node_assignment(&c, w2);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(a, "spec"), "replicas"), "worker")),
                     3);
    json_decref(a);

    /* Down again: the highest worker's agent is freed, nothing restarts; the ps keeps worker
     * 2 in its membership until its agent has stopped it. */
    report(&c, w2, "running", 0, T0 + 3);
    assert_int_equal(coord_job_membership(&c, j), 3);
    assert_int_equal(coord_job_patch(&c, j, 2, -1, T0 + 3, &err), PF_OK);
    assert_int_equal(j->n_tasks, 3);
    assert_int_equal(j->spec.training.replicas_to_aggregate, 2);
    assert_idle(&c, w2);
    assert_int_equal(coord_job_membership(&c, j), 3);
    a = coord_node_assignment(&c, ps);
    assert_int_equal(json_integer_value(json_object_get(a, "workers")), 3);
    json_decref(a);
    report(&c, w2, "idle", 0, T0 + 3);
    assert_int_equal(coord_job_membership(&c, j), 2);
    a = coord_node_assignment(&c, ps);
    assert_int_equal(json_integer_value(json_object_get(a, "workers")), 2);
    json_decref(a);
    assert_assigned(j, w1, "worker", 1, 1);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 1);
    assert_int_equal(take_events(&c, "log", "WorkersRemoved"), 1);

    /* Out of range. */
    assert_int_equal(coord_job_patch(&c, j, PF_MAX_REPLICAS + 1, -1, T0 + 3, &err), PF_ERR_INVALID);
    assert_string_equal(err.pointer, "/replicas/worker");
    assert_int_equal(j->n_tasks, 3);

    assert_int_equal(coord_job_patch(&c, j, 0, 1, T0 + 4, &err), PF_OK);
    assert_int_equal(j->phase, COORD_SUSPENDED);
    assert_condition(j, "Suspended", "True", "JobSuspended");
    assert_condition(j, "Running", "False", NULL);
    assert_string_equal(ps->job, "");
    assert_string_equal(w0->job, "");
    report(&c, ps, "idle", 0, T0 + 5); /* its agent stopped the ps */
    coord_cluster_tick(&c, T0 + 5);
    assert_int_equal(j->phase, COORD_SUSPENDED);
    /* An agent leaving while the job is suspended costs it no restart. */
    coord_node_remove(&c, w1, T0 + 5);
    coord_node_remove(&c, w2, T0 + 5);
    assert_int_equal(j->restarts, 0);
    /* While suspended the count changes for the next start. */
    assert_int_equal(coord_job_patch(&c, j, 3, -1, T0 + 5, &err), PF_OK);
    assert_int_equal(j->n_tasks, 4);

    assert_int_equal(coord_job_patch(&c, j, 0, 0, T0 + 6, &err), PF_OK);
    assert_condition(j, "Suspended", "False", NULL);
    assert_int_equal(j->phase, COORD_RESTARTING);
    assert_string_equal(j->message, "waiting for agents: missing worker 1, worker 2");
    add_node(&c, "w-d", "worker", T0 + 7);
    add_node(&c, "w-e", "worker", T0 + 7);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 2);

    coord_job_cancel(&c, j, T0 + 8);
    assert_int_equal(coord_job_patch(&c, j, 4, -1, T0 + 9, &err), PF_ERR_INVALID);
    assert_int_equal(j->spec.replicas.worker, 3);
    coord_cluster_deinit(&c);
}

/* How many workers the cluster of agent n's TF_CONFIG lists. */
static int tf_config_workers(coord_cluster *c, coord_node *n) {
    json_t *a = coord_node_assignment(c, n);
    const char *text = json_string_value(json_object_get(a, "tf_config"));
    if (!text)
        fail_msg("agent %s's assignment has no TF_CONFIG", n->id);
    json_t *tf = json_loads(text, 0, NULL);
    int workers = (int)json_array_size(json_object_get(json_object_get(tf, "cluster"), "worker"));
    json_decref(tf);
    json_decref(a);
    return workers;
}

/* Workers added live start all at once or none, as a job's admission does: with one idle
 * agent for two added workers, none starts (a started one would have no TF_CONFIG while the
 * other has no address). A worker replaced in the meantime gets a TF_CONFIG that lists the
 * workers that run; the added ones start together once agents are there. */
static void test_scale_up_all_at_once(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "grow", 1, 2, "");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *ps = add_node(&c, "ps-a", "ps", T0);
    coord_node *w0 = add_node(&c, "w-a", "worker", T0);
    coord_node *w1 = add_node(&c, "w-b", "worker", T0);
    for (coord_node *n = ps; n; n = n == ps ? w0 : n == w0 ? w1 : NULL)
        report(&c, n, "running", 0, T0 + 1);
    coord_node *spare = add_node(&c, "w-c", "worker", T0 + 1);
    pf_error err;
    assert_int_equal(coord_job_patch(&c, j, 4, -1, T0 + 2, &err), PF_OK);
    report_workers(&c, ps, 4, T0 + 3);
    assert_idle(&c, spare);
    assert_string_equal(task_of(j, "worker", 2)->node_id, "");
    assert_string_equal(task_of(j, "worker", 3)->node_id, "");
    assert_string_equal(j->message, "waiting for agents to add workers: missing worker 3");
    const char *why = NULL;
    assert_null(coord_job_tf_config(j, "worker", 2, &why));
    assert_string_equal(why, "the task has no agent assigned yet");
    take_events(&c, NULL, NULL);

    /* Worker 1 fails and is replaced while the added workers wait: its TF_CONFIG lists the
     * two workers that have agents, each at its own index. */
    report(&c, w1, "failed", 137, T0 + 4);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_assigned(j, w1, "worker", 1, 1); /* the first idle agent: the one it failed on */
    assert_idle(&c, spare);
    assert_int_equal(tf_config_workers(&c, w1), 2);
    assert_int_equal(tf_config_workers(&c, w0), 2);
    assert_int_equal(take_events(&c, "log", "TaskAdded"), 0);

    /* A second spare: both added workers start at once, with the whole cluster. */
    coord_node *spare2 = add_node(&c, "w-d", "worker", T0 + 5);
    assert_assigned(j, spare, "worker", 2, 1);
    assert_assigned(j, spare2, "worker", 3, 1);
    assert_int_equal(take_events(&c, "log", "TaskAdded"), 2);
    assert_int_equal(tf_config_workers(&c, spare2), 4);
    assert_int_equal(tf_config_workers(&c, w1), 4);
    assert_int_equal(j->generation, 1);
    coord_cluster_deinit(&c);
}

/* After a scale-down, a scale-up waits for every ps to report the larger membership again: the
 * count a ps reported before it learned of the shrink does not count, whether the removed
 * worker was never running (the membership shrinks at once) or was stopping (it shrinks when
 * its agent has stopped it). */
static void test_scale_down_then_up(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "shrink", 1, 3, "");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *ps = add_node(&c, "ps-a", "ps", T0);
    coord_node *w[3];
    static const char *const ids[] = {"w-a", "w-b", "w-c"};
    for (int i = 0; i < 3; i++)
        w[i] = add_node(&c, ids[i], "worker", T0);
    assert_int_equal(j->phase, COORD_RUNNING);
    report_workers(&c, ps, 3, T0 + 1);
    report(&c, w[0], "running", 0, T0 + 1);
    report(&c, w[1], "running", 0, T0 + 1);            /* w-c has not started worker 2 yet */
    assert_int_equal(task_of(j, "ps", 0)->workers, 3); /* found again: a patch moves tasks */
    pf_error err;

    /* Worker 2 was not running: the membership is 2 at once. The ps's next heartbeat, sent
     * before it saw the change, still says 3; a scale-up right after waits for it to say 3
     * again. */
    assert_int_equal(coord_job_patch(&c, j, 2, -1, T0 + 2, &err), PF_OK);
    assert_int_equal(coord_job_membership(&c, j), 2);
    assert_int_equal(task_of(j, "ps", 0)->workers, 2);
    report_workers(&c, ps, 3, T0 + 2.5);
    assert_int_equal(task_of(j, "ps", 0)->workers, 2);
    report(&c, w[2], "idle", 0, T0 + 2.5);
    assert_int_equal(coord_job_patch(&c, j, 3, -1, T0 + 3, &err), PF_OK);
    assert_idle(&c, w[2]);
    report_workers(&c, ps, 2, T0 + 3.5); /* it had applied 2 */
    assert_idle(&c, w[2]);
    report_workers(&c, ps, 3, T0 + 4);
    assert_assigned(j, w[2], "worker", 2, 1);
    report(&c, w[2], "running", 0, T0 + 4.5);

    /* Worker 2 is running now: it stays a member until its agent has stopped it, then the
     * membership shrinks and a scale-up waits again. */
    assert_int_equal(coord_job_patch(&c, j, 2, -1, T0 + 5, &err), PF_OK);
    assert_int_equal(coord_job_membership(&c, j), 3);
    assert_int_equal(task_of(j, "ps", 0)->workers, 3);
    report(&c, w[2], "idle", 0, T0 + 6);
    assert_int_equal(coord_job_membership(&c, j), 2);
    assert_int_equal(task_of(j, "ps", 0)->workers, 2);
    assert_int_equal(coord_job_patch(&c, j, 3, -1, T0 + 6.5, &err), PF_OK);
    assert_idle(&c, w[2]);
    report_workers(&c, ps, 3, T0 + 7);
    assert_assigned(j, w[2], "worker", 2, 1);
    coord_cluster_deinit(&c);
}

/* Workers added live go after the others and before the evaluator, as a fresh job has them. */
static void test_scale_keeps_task_order(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "ordered", 1, 1, "");
    spec.replicas.evaluator = 1;
    coord_job *j = submit(&c, &spec, T0);
    add_node(&c, "ps-a", "ps", T0);
    add_node(&c, "w-a", "worker", T0);
    add_node(&c, "w-b", "worker", T0);
    assert_int_equal(j->phase, COORD_RUNNING);
    pf_error err;
    assert_int_equal(coord_job_patch(&c, j, 3, -1, T0 + 1, &err), PF_OK);
    static const char *const types[] = {"ps", "worker", "worker", "worker", "evaluator"};
    static const int indices[] = {0, 0, 1, 2, 0};
    assert_int_equal(j->n_tasks, 5);
    for (int i = 0; i < 5; i++) {
        assert_string_equal(j->tasks[i].type, types[i]);
        assert_int_equal(j->tasks[i].index, indices[i]);
    }
    assert_int_equal(coord_job_patch(&c, j, 1, -1, T0 + 2, &err), PF_OK);
    assert_int_equal(j->n_tasks, 3);
    assert_string_equal(j->tasks[2].type, "evaluator");
    assert_int_equal(j->generation, 1);
    coord_cluster_deinit(&c);
}

/* A sync job with backup workers keeps its replicas_to_aggregate and cannot go below it. */
static void test_scale_backup_workers(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    parse_spec("{\"name\": \"backup\", \"replicas\": {\"ps\": 1, \"worker\": 3},"
               " \"model\": {\"type\": \"linear\", \"inputs\": 1},"
               " \"data\": {\"format\": \"synthetic_linear\"},"
               " \"training\": {\"mode\": \"sync\", \"replicas_to_aggregate\": 2}}",
               &spec);
    coord_job *j = submit(&c, &spec, T0);
    pf_error err;
    assert_int_equal(coord_job_patch(&c, j, 1, -1, T0 + 1, &err), PF_ERR_INVALID);
    assert_string_equal(err.pointer, "/replicas/worker");
    assert_int_equal(coord_job_patch(&c, j, 4, -1, T0 + 2, &err), PF_OK);
    assert_int_equal(j->spec.training.replicas_to_aggregate, 2);
    assert_int_equal(coord_job_patch(&c, j, 2, -1, T0 + 3, &err), PF_OK);
    assert_int_equal(j->spec.training.replicas_to_aggregate, 2);
    coord_cluster_deinit(&c);
}

/* An async job aggregates nothing: it scales down as well as up, and its spec stays the one
 * its own normalised text gives (which is what the store reloads after a restart). */
static void test_scale_async(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "async", 1, 2, "");
    coord_job *j = submit(&c, &spec, T0);
    pf_error err;
    static const int sizes[] = {3, 1, 2};
    for (int i = 0; i < 3; i++) {
        pf_status st = coord_job_patch(&c, j, sizes[i], -1, T0 + 1 + i, &err);
        if (st != PF_OK)
            fail_msg("%d workers: %s", sizes[i], err.message);
        assert_int_equal(j->spec.replicas.worker, sizes[i]);
        assert_int_equal(j->n_tasks, 1 + sizes[i]);
        pf_job_spec reloaded;
        parse_spec(j->spec_json, &reloaded);
        assert_int_equal(reloaded.replicas.worker, j->spec.replicas.worker);
        assert_int_equal(reloaded.training.mode, j->spec.training.mode);
        assert_int_equal(reloaded.training.replicas_to_aggregate,
                         j->spec.training.replicas_to_aggregate);
        pf_job_spec_deinit(&reloaded);
    }
    coord_cluster_deinit(&c);
}

/* The spec of j with replicas.ps = ps, parsed from its spec text as PATCH builds it
 * (coordinator/routes_jobs.c respec_ps). */
static void respec(const coord_job *j, int ps, pf_job_spec *out) {
    json_t *doc = json_loads(j->spec_json, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_object_set_new(json_object_get(doc, "replicas"), "ps", json_integer(ps)),
                     0);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    assert_non_null(text);
    parse_spec(text, out);
    free(text);
}

/* The replicas.ps that j's stored spec text says. */
static int stored_ps(const coord_job *j) {
    pf_job_spec stored;
    parse_spec(j->spec_json, &stored);
    int ps = stored.replicas.ps;
    pf_job_spec_deinit(&stored);
    return ps;
}

/* The replicas.ps of the spec in agent n's assignment. */
static int assigned_ps(coord_cluster *c, coord_node *n) {
    json_t *a = coord_node_assignment(c, n);
    int ps = (int)json_integer_value(
        json_object_get(json_object_get(json_object_get(a, "spec"), "replicas"), "ps"));
    json_decref(a);
    return ps;
}

/* Changing the ps count of a running job restarts it: its agents are freed at once (phase
 * Restarting, reason PsChanged), its tasks are rebuilt for the new count, and once the agents
 * have stopped the old tasks it is admitted again as generation 2 with every task assigned.
 * The spec is taken. */
static void test_set_ps_running(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "repart", 2, 2, "");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *old[4];
    static const char *const ids[] = {"ps-a", "ps-b", "w-a", "w-b"};
    for (int i = 0; i < 4; i++)
        old[i] = add_node(&c, ids[i], i < 2 ? "ps" : "worker", T0);
    assert_int_equal(j->phase, COORD_RUNNING);
    for (int i = 0; i < 4; i++)
        report(&c, old[i], "running", 0, T0 + 1);
    coord_node *spare = add_node(&c, "ps-c", "ps", T0 + 1);
    assert_idle(&c, spare);
    take_events(&c, NULL, NULL);

    respec(j, 3, &spec);
    pf_error err;
    pf_error_clear(&err);
    assert_int_equal(coord_job_set_ps(&c, j, &spec, T0 + 2, &err), PF_OK);
    assert_int_equal(spec.replicas.ps, 0); /* taken */
    assert_string_equal(spec.name, "");    /* zeroed */
    assert_int_equal(j->phase, COORD_RESTARTING);
    assert_condition(j, "Restarting", "True", "PsChanged");
    assert_condition(j, "Running", "False", NULL);
    assert_int_equal(j->generation, 1);
    for (int i = 0; i < 4; i++)
        assert_idle(&c, old[i]);
    assert_idle(&c, spare);
    assert_int_equal(j->spec.replicas.ps, 3);
    assert_int_equal(j->spec.replicas.worker, 2);
    assert_int_equal(stored_ps(j), 3);
    static const char *const types[] = {"ps", "ps", "ps", "worker", "worker"};
    static const int indices[] = {0, 1, 2, 0, 1};
    assert_int_equal(j->n_tasks, 5);
    for (int i = 0; i < 5; i++) {
        assert_string_equal(j->tasks[i].type, types[i]);
        assert_int_equal(j->tasks[i].index, indices[i]);
        assert_string_equal(j->tasks[i].node_id, "");
    }
    /* The old agents still run the old tasks: only the spare ps agent is free. */
    assert_string_equal(j->message, "waiting for agents: missing ps 1, ps 2, worker 0, worker 1");
    assert_int_equal(take_events(&c, "log", "PsChanged"), 2); /* Scaled and Restarting */

    /* The agents stop the old tasks; with the last one the job runs again. */
    for (int i = 0; i < 3; i++)
        report(&c, old[i], "idle", 0, T0 + 3);
    assert_int_equal(j->phase, COORD_RESTARTING);
    report(&c, old[3], "idle", 0, T0 + 4);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_condition(j, "Running", "True", "JobRestarted");
    assert_condition(j, "Restarting", "False", NULL);
    assert_int_equal(j->generation, 2);
    assert_assigned(j, old[0], "ps", 0, 2);
    assert_assigned(j, old[1], "ps", 1, 2);
    assert_assigned(j, spare, "ps", 2, 2);
    assert_assigned(j, old[2], "worker", 0, 2);
    assert_assigned(j, old[3], "worker", 1, 2);
    for (int i = 0; i < j->n_tasks; i++)
        assert_int_equal(j->tasks[i].state, TASK_PENDING);
    assert_int_equal(assigned_ps(&c, spare), 3);
    assert_int_equal(assigned_ps(&c, old[3]), 3);
    coord_cluster_deinit(&c);
}

/* A suspended job takes the new count for its next start and stays suspended; resumed, it
 * starts with it. */
static void test_set_ps_suspended(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "napping", 2, 1, "");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *ps0 = add_node(&c, "ps-a", "ps", T0);
    coord_node *ps1 = add_node(&c, "ps-b", "ps", T0);
    coord_node *w = add_node(&c, "w-a", "worker", T0);
    assert_int_equal(j->phase, COORD_RUNNING);
    for (coord_node *n = ps0; n; n = n == ps0 ? ps1 : n == ps1 ? w : NULL)
        report(&c, n, "running", 0, T0 + 1);
    pf_error err;
    pf_error_clear(&err);
    assert_int_equal(coord_job_patch(&c, j, 0, 1, T0 + 2, &err), PF_OK);
    assert_int_equal(j->phase, COORD_SUSPENDED);
    for (coord_node *n = ps0; n; n = n == ps0 ? ps1 : n == ps1 ? w : NULL)
        report(&c, n, "idle", 0, T0 + 3);

    respec(j, 1, &spec);
    assert_int_equal(coord_job_set_ps(&c, j, &spec, T0 + 4, &err), PF_OK);
    assert_int_equal(spec.replicas.ps, 0); /* taken */
    assert_int_equal(j->phase, COORD_SUSPENDED);
    assert_condition(j, "Suspended", "True", "JobSuspended");
    assert_int_equal(j->generation, 1);
    assert_int_equal(j->spec.replicas.ps, 1);
    assert_int_equal(stored_ps(j), 1);
    assert_int_equal(j->n_tasks, 2);
    assert_null(coord_task_find(j, "ps", 1));
    assert_non_null(strstr(j->message, "ps tasks 2 -> 1"));
    assert_idle(&c, ps0);
    assert_idle(&c, ps1);
    assert_idle(&c, w);

    assert_int_equal(coord_job_patch(&c, j, 0, 0, T0 + 5, &err), PF_OK);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 2);
    assert_assigned(j, ps0, "ps", 0, 2);
    assert_assigned(j, w, "worker", 0, 2);
    assert_idle(&c, ps1);
    assert_int_equal(assigned_ps(&c, w), 1);
    coord_cluster_deinit(&c);
}

/* A finished job (Succeeded, or cancelled) takes no new ps count: PF_ERR_INVALID, its spec
 * unchanged, and the caller keeps the spec it passed. */
static void test_set_ps_finished(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *done = running_pair(&c, "done", "", T0, &ps, &w);
    report(&c, w, "succeeded", 0, T0 + 1);
    assert_int_equal(done->phase, COORD_SUCCEEDED);
    report(&c, ps, "idle", 0, T0 + 2);
    report(&c, w, "idle", 0, T0 + 2);
    pf_job_spec spec;
    pf_error err;
    pf_error_clear(&err);
    respec(done, 2, &spec);
    assert_int_equal(coord_job_set_ps(&c, done, &spec, T0 + 3, &err), PF_ERR_INVALID);
    assert_string_equal(err.pointer, "");
    assert_non_null(strstr(err.message, "has finished (Succeeded)"));
    assert_int_equal(spec.replicas.ps, 2); /* not taken */
    assert_string_equal(spec.name, "done");
    pf_job_spec_deinit(&spec);
    assert_int_equal(done->phase, COORD_SUCCEEDED);
    assert_int_equal(done->spec.replicas.ps, 1);
    assert_int_equal(stored_ps(done), 1);
    assert_int_equal(done->n_tasks, 2);

    pf_job_spec gone_spec;
    make_spec(&gone_spec, "gone", 1, 1, "");
    coord_job *gone = submit(&c, &gone_spec, T0 + 4);
    assert_int_equal(gone->phase, COORD_RUNNING);
    coord_job_cancel(&c, gone, T0 + 5);
    assert_int_equal(gone->phase, COORD_FAILED);
    respec(gone, 3, &spec);
    assert_int_equal(coord_job_set_ps(&c, gone, &spec, T0 + 6, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "has finished (Failed)"));
    assert_int_equal(spec.replicas.ps, 3);
    pf_job_spec_deinit(&spec);
    assert_int_equal(gone->phase, COORD_FAILED);
    assert_condition(gone, "Failed", "True", "Cancelled");
    assert_int_equal(gone->spec.replicas.ps, 1);
    assert_int_equal(stored_ps(gone), 1);
    assert_int_equal(gone->n_tasks, 2);
    coord_cluster_deinit(&c);
}

/* With fewer ps agents than the new count the job waits, Restarting, its message naming the
 * ps task that has no agent; a third ps agent starts it. */
static void test_set_ps_waits_for_agents(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "cramped", 2, 1, "");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *ps0 = add_node(&c, "ps-a", "ps", T0);
    coord_node *ps1 = add_node(&c, "ps-b", "ps", T0);
    coord_node *w = add_node(&c, "w-a", "worker", T0);
    for (coord_node *n = ps0; n; n = n == ps0 ? ps1 : n == ps1 ? w : NULL)
        report(&c, n, "running", 0, T0 + 1);
    respec(j, 3, &spec);
    pf_error err;
    pf_error_clear(&err);
    assert_int_equal(coord_job_set_ps(&c, j, &spec, T0 + 2, &err), PF_OK);
    for (coord_node *n = ps0; n; n = n == ps0 ? ps1 : n == ps1 ? w : NULL)
        report(&c, n, "idle", 0, T0 + 3);
    coord_cluster_tick(&c, T0 + 4);
    assert_int_equal(j->phase, COORD_RESTARTING);
    assert_condition(j, "Restarting", "True", "PsChanged");
    assert_string_equal(j->message, "waiting for agents: missing ps 2");
    assert_int_equal(j->generation, 1);
    assert_idle(&c, ps0);
    assert_idle(&c, ps1);
    assert_idle(&c, w);
    for (int i = 0; i < j->n_tasks; i++)
        assert_string_equal(j->tasks[i].node_id, "");

    coord_node *ps2 = add_node(&c, "ps-c", "ps", T0 + 5);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 2);
    assert_assigned(j, ps2, "ps", 2, 2);
    assert_assigned(j, w, "worker", 0, 2);
    coord_cluster_deinit(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scale_and_suspend),    cmocka_unit_test(test_scale_up_all_at_once),
        cmocka_unit_test(test_scale_backup_workers), cmocka_unit_test(test_scale_keeps_task_order),
        cmocka_unit_test(test_scale_async),          cmocka_unit_test(test_scale_down_then_up),
        cmocka_unit_test(test_set_ps_running),       cmocka_unit_test(test_set_ps_suspended),
        cmocka_unit_test(test_set_ps_finished),      cmocka_unit_test(test_set_ps_waits_for_agents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
