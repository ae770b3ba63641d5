/* test_cluster_replace.c - the coordinator's state machine (coordinator/cluster.c) when the
 * chief is lost or fails: it is replaced alone, as any worker is (test_cluster.c,
 * test_worker_replaced_alone), whether it is worker 0 of a job without a chief task or the
 * `chief` task of a job with replicas.chief 1: same generation, no Restarting condition, a
 * TaskReplaced event, a new incarnation whose success ends the job while the lost one's late
 * report changes nothing; restart policies Never and ExitCode; the backoff limit per task,
 * then per job. Driven in-process with explicit times, as test_cluster.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "tests/support/cluster_fixture.h"
#include "coordinator/cluster.h"
#include "coordinator/cluster_json.h"
#include "psflow/mem.h"
#include "psflow/spec.h"

/* The two shapes of a job's chief: worker 0 (no chief task), or the `chief` task. */
typedef struct chief_case {
    const char *replicas;   /* the spec's replicas fields */
    const char *chief_type; /* the chief's task */
    const char *other_type; /* the job's other training task, index other_index */
    int other_index;
} chief_case;

static const chief_case CASES[] = {
    {"\"ps\": 1, \"worker\": 2", "worker", "worker", 1},
    {"\"ps\": 1, \"chief\": 1, \"worker\": 1", "chief", "worker", 0},
};
enum { N_CASES = sizeof CASES / sizeof CASES[0] };

/* A job `name` of case k (run_policy fields in `policy`, or ""), running from T0 + 1 on
 * ps-a, w-a (its chief) and w-b (its other training task). */
static coord_job *start(coord_cluster *c, int k, const char *name, const char *policy,
                        coord_node **ps, coord_node **chief, coord_node **other) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"name\": \"%s\", \"replicas\": {%s},"
             " \"model\": {\"type\": \"linear\", \"inputs\": 1},"
             " \"data\": {\"format\": \"synthetic_linear\"},"
             " \"training\": {\"max_steps\": 100}, \"run_policy\": {%s}}",
             name, CASES[k].replicas, policy);
    pf_job_spec spec;
    parse_spec(text, &spec);
    coord_job *j = submit(c, &spec, T0);
    *ps = add_node(c, "ps-a", "ps", T0);
    *chief = add_node(c, "w-a", "worker", T0);
    *other = add_node(c, "w-b", "worker", T0);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_assigned(j, *ps, "ps", 0, 1);
    assert_assigned(j, *chief, CASES[k].chief_type, 0, 1);
    assert_assigned(j, *other, CASES[k].other_type, CASES[k].other_index, 1);
    report(c, *ps, "running", 0, T0 + 1);
    report(c, *chief, "running", 0, T0 + 1);
    report(c, *other, "running", 0, T0 + 1);
    take_events(c, NULL, NULL);
    return j;
}

/* A heartbeat of agent n about task type/index of j's generation 1, incarnation
 * `incarnation`: the task succeeded, reaching step 100 with test accuracy 0.9. */
static void report_success(coord_cluster *c, coord_node *n, const char *job, const char *type,
                           uint64_t incarnation, double now) {
    json_t *r =
        json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:I, s:{s:f, s:i}}", "state", "succeeded", "job",
                  job, "generation", 1, "type", type, "index", 0, "exit_code", 0, "incarnation",
                  (json_int_t)incarnation, "result", "accuracy", 0.9, "steps", 100);
    coord_node_heartbeat_json(c, n, r, now);
    json_decref(r);
}

/* A lost chief is replaced alone on a spare worker agent: the other tasks keep their agents in
 * generation 1, the job never restarts, the replacement is a new incarnation, the lost
 * incarnation's late success report changes nothing, and the new chief's success ends the
 * job. */
static void test_chief_replaced_alone(void **state) {
    (void)state;
    for (int k = 0; k < N_CASES; k++) {
        const chief_case *cc = &CASES[k];
        coord_cluster c;
        coord_cluster_init(&c, LEASE);
        coord_node *ps, *w, *other;
        coord_job *j = start(&c, k, "chief-lost", "", &ps, &w, &other);
        coord_task *t = task_of(j, cc->chief_type, 0);
        uint64_t first = t->incarnation;

        /* w-a goes silent; no spare agent yet: the chief waits, the job keeps Running. */
        report(&c, ps, "running", 0, T0 + 9);
        report(&c, other, "running", 0, T0 + 9);
        coord_cluster_tick(&c, T0 + 12.25);
        assert_true(w->lost);
        assert_int_equal(j->phase, COORD_RUNNING);
        assert_int_equal(j->generation, 1);
        assert_int_equal(j->restarts, 0);
        assert_null(find_condition(j, "Restarting"));
        assert_int_equal(t->state, TASK_PENDING);
        assert_string_equal(t->node_id, "");
        assert_assigned(j, ps, "ps", 0, 1);
        assert_assigned(j, other, cc->other_type, cc->other_index, 1);
        char msg[COORD_TEXT_MAX];
        snprintf(msg, sizeof msg, "waiting for an agent to replace %s 0", cc->chief_type);
        assert_string_equal(j->message, msg);
        assert_int_equal(take_events(&c, "log", "TaskLost"), 1);

        /* A spare agent registers: the chief runs there, same generation, new incarnation. */
        coord_node *spare = add_node(&c, "w-c", "worker", T0 + 13);
        assert_assigned(j, spare, cc->chief_type, 0, 1);
        assert_true(t->incarnation > first);
        assert_int_equal(t->restarts, 1);
        assert_int_equal(j->generation, 1);
        assert_int_equal(j->restarts, 0);
        assert_null(find_condition(j, "Restarting"));
        assert_assigned(j, ps, "ps", 0, 1);
        assert_assigned(j, other, cc->other_type, cc->other_index, 1);
        snprintf(msg, sizeof msg,
                 "%s 0 replaced on agent w-c (generation 1 unchanged: no other task restarted)",
                 cc->chief_type);
        assert_string_equal(j->message, msg);
        assert_int_equal(take_events(&c, "log", "TaskReplaced"), 1);
        /* The other tasks' TF_CONFIG names the new chief's agent. */
        const char *why = NULL;
        char *tf = coord_job_tf_config(j, "ps", 0, &why);
        assert_non_null(tf);
        assert_non_null(strstr(tf, "w-c.test:2222"));
        assert_null(strstr(tf, "w-a.test:2222"));
        pf_free(tf);
        report(&c, spare, "running", 0, T0 + 14);
        assert_int_equal(t->state, TASK_RUNNING);
        assert_string_equal(j->message, "all 3 tasks running");

        /* w-a is back with the lost incarnation's success, sent before it heard of the loss:
         * that chief no longer counts, and w-a holds nothing. */
        report_success(&c, w, j->name, cc->chief_type, first, T0 + 15);
        assert_false(w->lost);
        assert_int_equal(j->phase, COORD_RUNNING);
        assert_int_equal(t->state, TASK_RUNNING);
        assert_idle(&c, w);

        /* The new chief's success ends the job. */
        report_success(&c, spare, j->name, cc->chief_type, t->incarnation, T0 + 20);
        assert_int_equal(j->phase, COORD_SUCCEEDED);
        assert_condition(j, "Succeeded", "True", "JobSucceeded");
        assert_string_equal(j->message, "reached step 100 of 100; test accuracy 0.9000");
        assert_int_equal(j->global_step, 100);
        assert_int_equal(j->restarts, 0);
        for (int q = 0; q < j->n_tasks; q++)
            assert_int_equal(j->tasks[q].state, TASK_SUCCEEDED);
        assert_idle(&c, ps);
        assert_idle(&c, other);
        assert_idle(&c, spare);
        coord_cluster_deinit(&c);
    }
}

/* restart_policy Never: a failed chief fails the job. ExitCode: a chief killed by a signal
 * (137) is replaced alone, on the agent that just gave it up when that is the idle one; an
 * exit code of 1 fails the job. */
static void test_chief_failed_restart_policy(void **state) {
    (void)state;
    for (int k = 0; k < N_CASES; k++) {
        const chief_case *cc = &CASES[k];
        coord_cluster c;
        coord_cluster_init(&c, LEASE);
        coord_node *ps, *w, *other;
        coord_job *j =
            start(&c, k, "chief-never", "\"restart_policy\": \"Never\"", &ps, &w, &other);
        report(&c, w, "failed", 1, T0 + 2);
        assert_int_equal(j->phase, COORD_FAILED);
        assert_condition(j, "Failed", "True", "TaskFailed");
        assert_int_equal(j->restarts, 0);
        char msg[COORD_TEXT_MAX];
        snprintf(msg, sizeof msg, "%s 0 failed (exit code 1); restart policy does not restart it",
                 cc->chief_type);
        assert_string_equal(j->message, msg);
        assert_int_equal(task_of(j, cc->chief_type, 0)->state, TASK_FAILED);
        assert_idle(&c, ps);
        assert_idle(&c, w);
        assert_idle(&c, other);
        coord_cluster_deinit(&c);

        coord_cluster_init(&c, LEASE);
        j = start(&c, k, "chief-exit", "\"restart_policy\": \"ExitCode\"", &ps, &w, &other);
        coord_task *t = task_of(j, cc->chief_type, 0);
        uint64_t first = t->incarnation;
        report(&c, w, "failed", 137, T0 + 2);
        assert_int_equal(j->phase, COORD_RUNNING);
        assert_null(find_condition(j, "Restarting"));
        assert_int_equal(j->generation, 1);
        assert_assigned(j, w, cc->chief_type, 0, 1);
        assert_assigned(j, other, cc->other_type, cc->other_index, 1);
        assert_true(t->incarnation > first);
        assert_int_equal(t->restarts, 1);
        assert_int_equal(take_events(&c, "log", "TaskReplaced"), 1);
        report(&c, w, "running", 0, T0 + 3);
        report(&c, w, "failed", 1, T0 + 4);
        assert_int_equal(j->phase, COORD_FAILED);
        assert_condition(j, "Failed", "True", "TaskFailed");
        assert_int_equal(j->restarts, 0);
        assert_non_null(strstr(j->message, "exit code 1"));
        coord_cluster_deinit(&c);
    }
}

/* The backoff limit counts per task, as for any worker: a chief replaced backoff_limit times
 * and lost again restarts the gang (generation 2), until the job's own restarts reach the
 * limit too; the next loss fails the job. */
static void test_chief_backoff_limit(void **state) {
    (void)state;
    for (int k = 0; k < N_CASES; k++) {
        const chief_case *cc = &CASES[k];
        coord_cluster c;
        coord_cluster_init(&c, LEASE);
        coord_node *ps, *w, *other;
        coord_job *j = start(&c, k, "chief-backoff", "\"backoff_limit\": 1", &ps, &w, &other);
        coord_node *spare = add_node(&c, "w-c", "worker", T0 + 1);
        coord_task *t = task_of(j, cc->chief_type, 0);

        /* Replacement 1 of at most 1: on the spare, at once. */
        report(&c, ps, "running", 0, T0 + 9);
        report(&c, other, "running", 0, T0 + 9);
        report(&c, spare, "idle", 0, T0 + 9);
        coord_cluster_tick(&c, T0 + 12.25);
        assert_true(w->lost);
        assert_assigned(j, spare, cc->chief_type, 0, 1);
        assert_int_equal(t->restarts, 1);
        assert_int_equal(j->restarts, 0);
        assert_int_equal(j->phase, COORD_RUNNING);

        /* Lost again: past its replacements, the gang restarts. */
        report(&c, spare, "running", 0, T0 + 13);
        report(&c, ps, "running", 0, T0 + 20);
        report(&c, other, "running", 0, T0 + 20);
        coord_cluster_tick(&c, T0 + 23.5);
        assert_true(spare->lost);
        assert_int_equal(j->phase, COORD_RESTARTING);
        assert_condition(j, "Restarting", "True", "TaskLost");
        assert_int_equal(j->restarts, 1);
        assert_non_null(strstr(find_condition(j, "Restarting")->message,
                               "restarting the job (restart 1 of at most 1)"));
        assert_string_equal(ps->job, "");
        assert_string_equal(other->job, "");
        report(&c, ps, "idle", 0, T0 + 24);
        report(&c, other, "idle", 0, T0 + 24);
        add_node(&c, "w-a", "worker", T0 + 24.5); /* back, idle */
        assert_int_equal(j->phase, COORD_RUNNING);
        assert_int_equal(j->generation, 2);
        assert_condition(j, "Running", "True", "JobRestarted");
        assert_int_equal(t->restarts, 2);
        coord_node *chief = coord_node_find(&c, t->node_id);
        assert_non_null(chief);

        /* The chief's agent lost a third time: both limits reached, the job fails. */
        for (int q = 0; q < c.n_nodes; q++)
            if (!c.nodes[q]->lost)
                report(&c, c.nodes[q], "running", 0, T0 + 25);
        report(&c, ps, "running", 0, T0 + 32);
        report(&c, chief == w ? other : w, "running", 0, T0 + 32);
        coord_cluster_tick(&c, T0 + 35.5);
        assert_true(chief->lost);
        assert_int_equal(j->phase, COORD_FAILED);
        assert_condition(j, "Failed", "True", "BackoffLimitExceeded");
        assert_int_equal(j->restarts, 1);
        assert_non_null(strstr(j->message, "backoff limit 1 reached"));
        assert_idle(&c, ps);
        coord_cluster_deinit(&c);
    }
}

/* A chief lost after the final checkpoint (reported at max_steps): the ps tasks are ending,
 * so it is not replaced alone; the gang restarts and restores that checkpoint. */
static void test_chief_lost_after_final_checkpoint(void **state) {
    (void)state;
    for (int k = 0; k < N_CASES; k++) {
        coord_cluster c;
        coord_cluster_init(&c, LEASE);
        coord_node *ps, *w, *other;
        coord_job *j = start(&c, k, "chief-final", "", &ps, &w, &other);
        coord_job_record_checkpoint(&c, j, 100, 8, "[]", NULL, -1, T0 + 5);
        report(&c, ps, "running", 0, T0 + 9);
        report(&c, other, "running", 0, T0 + 9);
        coord_cluster_tick(&c, T0 + 12.25);
        assert_true(w->lost);
        assert_int_equal(j->phase, COORD_RESTARTING);
        assert_int_equal(j->restarts, 1);
        assert_condition(j, "Restarting", "True", "TaskLost");
        coord_cluster_deinit(&c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chief_replaced_alone),
        cmocka_unit_test(test_chief_failed_restart_policy),
        cmocka_unit_test(test_chief_backoff_limit),
        cmocka_unit_test(test_chief_lost_after_final_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
