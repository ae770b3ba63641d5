/* test_cluster_quota.c - queues with quotas (coordinator/cluster_schedule.c admit_queue and
 * admit_borrowers, coordinator/cluster_queues.c; docs/design.md "Queues, quotas and
 * borrowing"), driven in-process with explicit times: a job within its queue's quota starts as
 * before; one beyond it starts only on idle agents no job within its quota waits for
 * (borrowing), never when it is not preemptible, and waits with reason "quota" otherwise; what
 * a queue borrowed is reclaimed in the round a job of another queue needs it; queues borrow in
 * the order of their share of the cluster for their weight; priority preemption stays within a
 * queue; a spec naming no queue exists is refused, and a queue in use cannot be deleted.
 *
 * Agents are simulated by the fixture's registrations and heartbeat reports; no test sleeps.
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
#include "coordinator/cluster_queues.h"
#include "psflow/spec.h"

/* Creates or changes queue `name`: quotas (-1: no limit) and weight, no priority classes. */
static coord_queue *put_queue_memory(coord_cluster *c, const char *name, int ps, int workers,
                                     int64_t memory, int weight) {
    coord_queue set = {
        .quota_ps = ps, .quota_workers = workers, .quota_memory = memory, .weight = weight};
    snprintf(set.name, sizeof set.name, "%s", name);
    coord_queue *q;
    int created;
    pf_error err;
    assert_int_equal(coord_queue_put(c, &set, T0, &q, &created, &err), PF_OK);
    return q;
}

static void put_queue(coord_cluster *c, const char *name, int ps, int workers, int weight) {
    put_queue_memory(c, name, ps, workers, -1, weight);
}

/* A job of `ps` ps and `workers` workers in queue `queue`, with more run_policy fields in
 * `policy` (", \"priority\": 5" or ""). */
static coord_job *submit_in(coord_cluster *c, const char *name, const char *queue, int ps,
                            int workers, const char *policy, double now) {
    char extra[200];
    snprintf(extra, sizeof extra, ", \"run_policy\": {\"queue\": \"%s\"%s}", queue, policy);
    pf_job_spec spec;
    make_spec(&spec, name, ps, workers, extra);
    return submit(c, &spec, now);
}

/* Has every agent of j report its task running. */
static void report_running(coord_cluster *c, const coord_job *j, double now) {
    for (int i = 0; i < c->n_nodes; i++)
        if (!strcmp(c->nodes[i]->job, j->name))
            report(c, c->nodes[i], "running", 0, now);
}

/* Has every agent that is stopping a task no job holds any more report idle. */
static void report_stopped(coord_cluster *c, double now) {
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i]->busy && !c->nodes[i]->job[0])
            report(c, c->nodes[i], "idle", 0, now);
}

static void assert_waits(const coord_job *j, const char *reason, const char *queue) {
    json_t *status = coord_job_status_json(j);
    json_t *q = json_object_get(status, "queue");
    assert_true(json_is_object(q));
    assert_string_equal(json_string_value(json_object_get(q, "reason")), reason);
    assert_string_equal(json_string_value(json_object_get(q, "name")), queue);
    json_decref(status);
}

/* The queue's JSON figures: usage and borrowed workers. */
static void assert_usage(coord_cluster *c, const char *name, int used_workers, int borrowed) {
    coord_queues_measure(c);
    json_t *q = coord_queue_json(coord_queue_find(c, name));
    assert_non_null(q);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(q, "usage"), "workers")),
                     used_workers);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(q, "borrowed"), "workers")),
                     borrowed);
    json_decref(q);
}

/* Beyond its quota a job borrows idle agents; a job of another queue within its quota takes
 * them back in the round it is submitted (the borrower is preempted, the job within quota
 * spared), and the borrower starts again once agents are idle. */
static void test_borrow_and_reclaim(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    put_queue(&c, "a", 1, 1, 1);
    put_queue(&c, "b", 1, 1, 1);
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "ps-%d", i);
        add_node(&c, id, "ps", T0);
        snprintf(id, sizeof id, "w-%d", i);
        add_node(&c, id, "worker", T0);
    }
    coord_job *a1 = submit_in(&c, "a1", "a", 1, 1, "", T0);
    assert_int_equal(a1->phase, COORD_RUNNING);
    report_running(&c, a1, T0);
    take_events(&c, NULL, NULL);
    coord_job *a2 = submit_in(&c, "a2", "a", 1, 1, "", T0 + 1);
    assert_int_equal(a2->phase, COORD_RUNNING); /* borrowed: nobody else waits */
    assert_int_equal(take_events(&c, "log", "Borrowing"), 1);
    report_running(&c, a2, T0 + 1);
    assert_usage(&c, "a", 2, 1);

    coord_job *b1 = submit_in(&c, "b1", "b", 1, 1, "", T0 + 2);
    assert_int_equal(a2->phase, COORD_RESTARTING); /* reclaimed in the same round */
    assert_int_equal(a1->phase, COORD_RUNNING);    /* within a's quota: spared */
    assert_condition(a2, "Restarting", "True", "Preempted");
    assert_non_null(strstr(find_condition(a2, "Restarting")->message,
                           "preempted by job b1, which reclaims what this job's queue borrowed"));
    assert_int_equal(take_events(&c, "log", "Reclaiming"), 1);
    assert_int_equal(b1->phase, COORD_CREATED); /* until a2's agents stopped */
    assert_usage(&c, "a", 1, 0);

    report_stopped(&c, T0 + 3);
    assert_int_equal(b1->phase, COORD_RUNNING);
    report_running(&c, b1, T0 + 3);
    assert_int_equal(a2->phase, COORD_RESTARTING);
    assert_waits(a2, "preempted", "a");
    assert_non_null(strstr(a2->message, "preempted by job b1; waiting for the quota of queue a"));

    coord_job_cancel(&c, b1, T0 + 4);
    report_stopped(&c, T0 + 4);
    assert_int_equal(a2->phase, COORD_RUNNING); /* borrows again */
    assert_int_equal(a2->preemptions, 1);
    coord_cluster_deinit(&c);
}

/* A queue at its quota with nothing idle: its next job waits with reason "quota", and its
 * message names the queue and the figures; a job that is not preemptible never borrows. */
static void test_quota_reason(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    put_queue(&c, "a", -1, 1, 1);
    coord_node *ps, *w;
    coord_job *a1 = running_pair(&c, "a1", ", \"run_policy\": {\"queue\": \"a\"}", T0, &ps, &w);
    coord_job *a2 = submit_in(&c, "a2", "a", 1, 1, "", T0 + 1);
    assert_int_equal(a2->phase, COORD_CREATED);
    assert_waits(a2, "quota", "a");
    assert_int_equal(a2->queue_position, 1);
    assert_string_equal(a2->message,
                        "waiting for the quota of queue a (ps: no limit, workers: 1), which its "
                        "other jobs hold; this job needs 1 ps and 1 workers: no idle agent is "
                        "left to borrow");

    add_node(&c, "ps-b", "ps", T0 + 2);
    add_node(&c, "w-b", "worker", T0 + 2);
    assert_int_equal(a2->phase, COORD_RUNNING); /* idle agents now: it borrows them */

    coord_job *a3 = submit_in(&c, "a3", "a", 1, 1, ", \"preemptible\": false", T0 + 3);
    add_node(&c, "ps-c", "ps", T0 + 3);
    add_node(&c, "w-c", "worker", T0 + 3);
    coord_cluster_tick(&c, T0 + 4);
    assert_int_equal(a3->phase, COORD_CREATED);
    assert_waits(a3, "quota", "a");
    assert_non_null(strstr(a3->message, "a job that is not preemptible never borrows"));

    coord_job_cancel(&c, a1, T0 + 5); /* the quota frees: a3 is within it again... */
    report(&c, ps, "idle", 0, T0 + 5);
    report(&c, w, "idle", 0, T0 + 5);
    /* ...but a2 (borrowing) still holds a's one worker of quota */
    assert_int_equal(a3->phase, COORD_CREATED);
    coord_job_cancel(&c, a2, T0 + 6);
    coord_cluster_tick(&c, T0 + 6);
    assert_int_equal(a3->phase, COORD_RUNNING);
    coord_cluster_deinit(&c);
}

/* Two queues wait to borrow one free pair of agents: the one holding less of the cluster for
 * its weight goes first, even when its job came later. */
static void test_borrow_by_weight(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    put_queue(&c, "a", 0, 0, 1);
    put_queue(&c, "b", 0, 0, 1);
    coord_node *ps, *w;
    coord_job *a0 = running_pair(&c, "a0", ", \"run_policy\": {\"queue\": \"a\"}", T0, &ps, &w);
    (void)a0;
    coord_job *a1 = submit_in(&c, "a1", "a", 1, 1, "", T0 + 1);
    coord_job *b1 = submit_in(&c, "b1", "b", 1, 1, "", T0 + 2);
    assert_waits(a1, "quota", "a");
    assert_waits(b1, "quota", "b");
    assert_int_equal(a1->queue_position, 1); /* queue order is still submit order */
    assert_int_equal(b1->queue_position, 2);
    add_node(&c, "ps-b", "ps", T0 + 3);
    add_node(&c, "w-b", "worker", T0 + 3);
    coord_cluster_tick(&c, T0 + 3);
    assert_int_equal(b1->phase, COORD_RUNNING); /* b held nothing, a two agents */
    assert_int_equal(a1->phase, COORD_CREATED);
    coord_cluster_deinit(&c);
}

/* Priority preemption stays within a queue: a job of higher priority takes the agents of a
 * lower one of its own queue, never of another queue within its quota. */
static void test_priority_within_queue(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    put_queue(&c, "a", 1, 1, 1);
    put_queue(&c, "b", 1, 1, 1);
    add_node(&c, "ps-0", "ps", T0);
    add_node(&c, "w-0", "worker", T0);
    add_node(&c, "ps-1", "ps", T0);
    add_node(&c, "w-1", "worker", T0);
    coord_job *b1 = submit_in(&c, "b1", "b", 1, 1, "", T0);
    coord_job *low = submit_in(&c, "low", "a", 1, 1, "", T0 + 1);
    report_running(&c, b1, T0 + 1);
    report_running(&c, low, T0 + 1);
    /* idle agents to borrow: high of a, beyond a's quota, borrows them, and low runs on */
    add_node(&c, "ps-2", "ps", T0 + 1);
    add_node(&c, "w-2", "worker", T0 + 1);
    coord_job *early = submit_in(&c, "early", "a", 1, 1, ", \"priority\": 10", T0 + 1.5);
    assert_int_equal(early->phase, COORD_RUNNING);
    assert_int_equal(low->phase, COORD_RUNNING);
    assert_int_equal(take_events(&c, "log", "Borrowing"), 1);
    coord_job_cancel(&c, early, T0 + 1.6);
    report_stopped(&c, T0 + 1.6);
    coord_node_remove(&c, coord_node_find(&c, "ps-2"), T0 + 1.7);
    coord_node_remove(&c, coord_node_find(&c, "w-2"), T0 + 1.7);

    /* none idle: high takes the quota of low, of its own queue and lower priority */
    coord_job *high = submit_in(&c, "high", "a", 1, 1, ", \"priority\": 10", T0 + 2);
    assert_int_equal(low->phase, COORD_RESTARTING);
    assert_non_null(strstr(find_condition(low, "Restarting")->message, "priority 10 > 0"));
    assert_int_equal(b1->phase, COORD_RUNNING);
    report_stopped(&c, T0 + 3);
    assert_int_equal(high->phase, COORD_RUNNING);

    /* a job of b of the highest priority takes b1's agents, never a's */
    coord_job *urgent = submit_in(&c, "urgent", "b", 1, 1, ", \"priority\": 100", T0 + 4);
    assert_int_equal(high->phase, COORD_RUNNING);
    assert_int_equal(b1->phase, COORD_RESTARTING);
    report_stopped(&c, T0 + 5);
    assert_int_equal(urgent->phase, COORD_RUNNING);
    assert_int_equal(high->phase, COORD_RUNNING);

    /* with b1 preemptible no more: urgent2 of b waits for b's quota, a's jobs untouched */
    coord_job_cancel(&c, b1, T0 + 6);
    coord_job *urgent2 =
        submit_in(&c, "urgent2", "b", 1, 1, ", \"priority\": 100, \"preemptible\": false", T0 + 6);
    assert_int_equal(high->phase, COORD_RUNNING);
    assert_int_equal(urgent2->phase, COORD_CREATED);
    assert_waits(urgent2, "quota", "b");
    coord_cluster_deinit(&c);
}

/* What a queue borrowed is reclaimed, among its jobs of the lowest priority, from the one
 * whose stop keeps the queue at its quota: the smaller later one that borrowed, not the one
 * within the quota. */
static void test_reclaim_victims(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    put_queue(&c, "a", -1, 2, 1);
    put_queue(&c, "c", -1, 4, 1);
    char id[16];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "ps-%d", i);
        add_node(&c, id, "ps", T0);
    }
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof id, "w-%d", i);
        add_node(&c, id, "worker", T0);
    }
    coord_job *cl = submit_in(&c, "cl", "c", 1, 4, "", T0);
    report_running(&c, cl, T0);
    coord_job *ch = submit_in(&c, "ch", "c", 1, 2, "", T0 + 1);
    assert_int_equal(ch->phase, COORD_RUNNING); /* borrowed */
    report_running(&c, ch, T0 + 1);
    assert_usage(&c, "c", 6, 2);
    coord_job *j = submit_in(&c, "j", "a", 1, 2, "", T0 + 2);
    assert_int_equal(ch->phase, COORD_RESTARTING);
    assert_int_equal(cl->phase, COORD_RUNNING);
    assert_usage(&c, "c", 4, 0);
    report_stopped(&c, T0 + 3);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(cl->phase, COORD_RUNNING);
    assert_waits(ch, "preempted", "c");
    coord_cluster_deinit(&c);
}

/* A spec naming a queue that does not exist is refused, naming the field; a queue an
 * unfinished job is admitted through, and the default queue, cannot be deleted. */
static void test_queue_checks(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "lost", 1, 1, ", \"run_policy\": {\"queue\": \"nope\"}");
    coord_job *j = NULL;
    int created = 1;
    pf_error err;
    assert_int_equal(coord_job_submit(&c, &spec, T0, &j, &created, &err), PF_ERR_UNSUPPORTED);
    assert_string_equal(err.pointer, "/run_policy/queue");
    assert_non_null(strstr(err.message, "there is no queue 'nope'"));
    assert_null(j);
    pf_job_spec_deinit(&spec);
    assert_int_equal(c.n_jobs, 0);

    put_queue(&c, "a", 1, 1, 1);
    coord_job *a1 = submit_in(&c, "a1", "a", 1, 1, "", T0);
    assert_int_equal(coord_queue_delete(&c, coord_queue_find(&c, "a"), &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "job a1"));
    assert_int_equal(coord_queue_delete(&c, &c.queues[0], &err), PF_ERR_INVALID);
    coord_job_cancel(&c, a1, T0 + 1);
    assert_int_equal(coord_queue_delete(&c, coord_queue_find(&c, "a"), &err), PF_OK);
    assert_null(coord_queue_find(&c, "a"));
    /* reaping the queue and an agent together keeps every other agent findable */
    char id[16];
    for (int i = 0; i < 40; i++) {
        snprintf(id, sizeof id, "w-%d", i);
        add_node(&c, id, "worker", T0 + 2);
    }
    coord_node_remove(&c, coord_node_find(&c, "w-7"), T0 + 3);
    coord_cluster_reap(&c);
    for (int i = 0; i < 40; i++) {
        snprintf(id, sizeof id, "w-%d", i);
        assert_true((coord_node_find(&c, id) != NULL) == (i != 7));
    }
    /* a finished job of a deleted queue reads as the default queue's */
    assert_ptr_equal(coord_job_queue(&c, a1), &c.queues[0]);
    coord_cluster_deinit(&c);
}

/* Submits spec text `policy` for a job of queue m and expects err's pointer. */
static void assert_refused(coord_cluster *c, const char *policy, const char *pointer,
                           const char *says) {
    char extra[200];
    snprintf(extra, sizeof extra, ", \"run_policy\": {\"queue\": \"m\"%s}", policy);
    pf_job_spec spec;
    make_spec(&spec, "refused", 1, 1, extra);
    coord_job *j = NULL;
    int created = 1;
    pf_error err;
    assert_int_equal(coord_job_submit(c, &spec, T0, &j, &created, &err), PF_ERR_UNSUPPORTED);
    assert_string_equal(err.pointer, pointer);
    assert_non_null(strstr(err.message, says));
    assert_null(j);
    pf_job_spec_deinit(&spec);
}

/* A quota of memory counts each job's tasks by the submit estimate: a job beyond it borrows
 * idle agents, or, not preemptible and first in line, stops a job of lower priority of its
 * queue, which stops after its final checkpoint grace even though the job preempting it
 * started at once (its share was counted as freed), then borrows. Priority classes: a class
 * of the job's queue gives its priority; an unknown class, or a priority that disagrees, is
 * refused naming the field. */
static void test_memory_quota_and_classes(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    c.preempt_grace = 30;
    coord_queue *m = put_queue_memory(&c, "m", -1, -1, -1, 1);
    m->n_classes = 2;
    m->classes[0] = (coord_priority_class){"high", 100};
    m->classes[1] = (coord_priority_class){"low", -10};
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "ps-%d", i);
        add_node(&c, id, "ps", T0);
        snprintf(id, sizeof id, "w-%d", i);
        add_node(&c, id, "worker", T0);
    }
    assert_refused(&c, ", \"priority_class\": \"urgent\"", "/run_policy/priority_class",
                   "queue m has no priority class 'urgent' (its classes: high, low;");
    assert_refused(&c, ", \"priority_class\": \"high\", \"priority\": 5", "/run_policy/priority",
                   "priority class high of queue m gives 100");

    coord_job *m1 = submit_in(&c, "m1", "m", 1, 1, ", \"priority_class\": \"low\"", T0);
    assert_int_equal(m1->spec.run_policy.priority, -10);
    assert_non_null(strstr(m1->spec_json, "\"priority_class\":\"low\""));
    assert_int_equal(m1->phase, COORD_RUNNING);
    report_running(&c, m1, T0);
    int64_t one = coord_job_memory(m1, 1, 1);
    assert_true(one > 0);
    m = put_queue_memory(&c, "m", -1, -1, one, 1);
    m->n_classes = 2;
    m->classes[0] = (coord_priority_class){"high", 100};
    m->classes[1] = (coord_priority_class){"low", -20}; /* changed: m1 keeps -10 */
    pf_job_spec spec;
    make_spec(&spec, "m1", 1, 1,
              ", \"run_policy\": {\"queue\": \"m\", \"priority_class\": \"low\"}");
    coord_job *again = NULL;
    int created = -1;
    pf_error err;
    assert_int_equal(coord_job_submit(&c, &spec, T0, &again, &created, &err), PF_OK);
    pf_job_spec_deinit(&spec);
    assert_ptr_equal(again, m1); /* a retry of its submission is answered with it */
    assert_int_equal(created, 0);
    assert_int_equal(m1->spec.run_policy.priority, -10);
    take_events(&c, NULL, NULL);

    coord_job *m2 = submit_in(&c, "m2", "m", 1, 1,
                              ", \"priority_class\": \"high\", \"preemptible\": false", T0 + 1);
    assert_int_equal(m2->spec.run_policy.priority, 100);
    assert_int_equal(take_events(&c, "log", "Preempting"), 1);
    assert_int_equal(m2->phase, COORD_RUNNING); /* m1's share counted as freed */
    report_running(&c, m2, T0 + 1);
    coord_cluster_tick(&c, T0 + 2);
    assert_int_equal(m1->phase, COORD_RUNNING);    /* taking its final checkpoint */
    for (double t = T0 + 5; t < T0 + 32; t += 5) { /* every agent heartbeats meanwhile */
        report_running(&c, m1, t);
        report_running(&c, m2, t);
        coord_cluster_tick(&c, t);
        assert_int_equal(m1->phase, COORD_RUNNING);
    }
    coord_cluster_tick(&c, T0 + 32);
    assert_int_equal(m1->phase, COORD_RESTARTING); /* the grace is over: it stops */
    assert_int_equal(m1->preemptions, 1);
    report_stopped(&c, T0 + 33);
    assert_int_equal(m1->phase, COORD_RUNNING); /* beyond the quota, on idle agents */
    assert_int_equal(take_events(&c, "log", "Borrowing"), 1);
    coord_queues_measure(&c);
    assert_int_equal(m->used_memory, 2 * one);
    assert_int_equal(coord_queue_over_memory(m), one);

    coord_job *m3 = submit_in(&c, "m3", "m", 1, 1, ", \"preemptible\": false", T0 + 34);
    assert_int_equal(m3->phase, COORD_CREATED);
    assert_waits(m3, "quota", "m");
    assert_non_null(strstr(m3->message, "(ps: no limit, workers: no limit, memory: "));
    /* a queue's figures saturate rather than wrap */
    assert_true(coord_memory_add(INT64_MAX - 1, 5) == INT64_MAX);
    assert_true(coord_memory_add(INT64_MIN + 1, -5) == INT64_MIN);
    assert_true(coord_job_memory(m3, 1, 1) <= COORD_QUEUE_MEMORY_QUOTA_MAX + 1);
    coord_cluster_deinit(&c);
}

/* A reclaim takes from a queue that borrowed only what it holds beyond its quota: agents of a
 * role beyond that role's quota, or any of its agents while it holds memory beyond its quota
 * of memory; never agents of a role within quota for a queue over on another role only. */
static void test_reclaim_by_role(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    put_queue(&c, "a", 2, 1, 1); /* room for 2 ps but 1 worker */
    put_queue(&c, "b", -1, -1, 1);
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "ps-%d", i);
        add_node(&c, id, "ps", T0);
    }
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "w-%d", i);
        add_node(&c, id, "worker", T0);
    }
    coord_job *a1 = submit_in(&c, "a1", "a", 1, 1, "", T0);
    coord_job *a2 = submit_in(&c, "a2", "a", 1, 1, "", T0 + 1);
    assert_int_equal(a1->phase, COORD_RUNNING);
    assert_int_equal(a2->phase, COORD_RUNNING); /* beyond the workers' quota: borrows */
    report_running(&c, a1, T0 + 1);
    report_running(&c, a2, T0 + 1);
    take_events(&c, NULL, NULL);

    /* b1 lacks a ps only: a holds its 2 ps within quota, so nothing is reclaimed */
    coord_job *b1 = submit_in(&c, "b1", "b", 1, 1, "", T0 + 2);
    assert_int_equal(b1->phase, COORD_CREATED);
    assert_int_equal(a2->phase, COORD_RUNNING);
    assert_int_equal(take_events(&c, "log", "Reclaiming"), 0);

    /* with a quota of memory a1's alone fills, a is beyond it: a2's ps is reclaimed */
    put_queue_memory(&c, "a", 2, 1, coord_job_memory(a1, 1, 1), 1);
    coord_cluster_tick(&c, T0 + 3);
    assert_int_equal(a2->phase, COORD_RESTARTING);
    assert_int_equal(a1->phase, COORD_RUNNING);
    assert_int_equal(take_events(&c, "log", "Reclaiming"), 1);
    coord_cluster_deinit(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_borrow_and_reclaim),
        cmocka_unit_test(test_quota_reason),
        cmocka_unit_test(test_borrow_by_weight),
        cmocka_unit_test(test_priority_within_queue),
        cmocka_unit_test(test_reclaim_victims),
        cmocka_unit_test(test_queue_checks),
        cmocka_unit_test(test_memory_quota_and_classes),
        cmocka_unit_test(test_reclaim_by_role),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
