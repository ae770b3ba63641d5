/* test_cluster_queue.c - the coordinator's queue (coordinator/cluster_schedule.c coord_schedule,
 * docs/design.md "The queue"), driven in-process with explicit times: a large job submitted
 * first is not overtaken by a small one submitted later (the agents it needs are held for it,
 * its status and the small job's message say so) and starts first once agents free up; a job
 * of higher run_policy.priority goes ahead of an earlier one; a job that needs more agents
 * than the cluster has holds nothing, so a small job behind it starts at once; the status's
 * `queue` is null once a job has its agents; the first job holding agents gets an estimated
 * start, and a job behind it backfills only when bound to end before then.
 *
 * Agents are simulated by the fixture's registrations and heartbeat reports; no test sleeps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>

#include "tests/support/cluster_fixture.h"
#include "coordinator/cluster.h"
#include "coordinator/cluster_json.h"
#include "psflow/spec.h"

/* The status's queue object of j (borrowed from *status, which the caller frees), or NULL
 * when it is null. */
static json_t *queue_of(const coord_job *j, json_t **status) {
    *status = coord_job_status_json(j);
    assert_non_null(*status);
    json_t *q = json_object_get(*status, "queue");
    assert_non_null(q); /* present: null or an object */
    return json_is_null(q) ? NULL : q;
}

static void assert_queue(const coord_job *j, int position, int priority, const char *behind) {
    assert_int_equal(j->queue_position, position);
    json_t *status;
    json_t *q = queue_of(j, &status);
    if (position == 0) {
        assert_null(q);
    } else {
        assert_non_null(q);
        assert_int_equal(json_integer_value(json_object_get(q, "position")), position);
        assert_int_equal(json_integer_value(json_object_get(q, "priority")), priority);
        json_t *b = json_object_get(q, "behind");
        if (behind)
            assert_string_equal(json_string_value(b), behind);
        else
            assert_true(json_is_null(b));
    }
    json_decref(status);
}

/* Asserts the reason a waiting job's status and its list item give. */
static void assert_reason(const coord_job *j, const char *reason) {
    json_t *status;
    json_t *q = queue_of(j, &status);
    assert_non_null(q);
    assert_string_equal(json_string_value(json_object_get(q, "reason")), reason);
    json_decref(status);
    json_t *item = coord_job_summary_json(j);
    assert_non_null(item);
    q = json_object_get(item, "queue");
    assert_true(json_is_object(q));
    assert_string_equal(json_string_value(json_object_get(q, "reason")), reason);
    assert_int_equal(json_integer_value(json_object_get(q, "position")), j->queue_position);
    json_decref(item);
}

/* Ends the running job j and has its agents report idle. */
static void finish_job(coord_cluster *c, coord_job *j, coord_node *ps, coord_node *w, double now) {
    coord_job_cancel(c, j, now);
    report(c, ps, "idle", 0, now);
    report(c, w, "idle", 0, now);
}

/* A large job first, a small one later: the small one would fit the idle agents, but they
 * are held for the large one, which starts first once the running job frees its agents. */
static void test_no_overtaking(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *busy = running_pair(&c, "busy", "", T0, &ps, &w);
    add_node(&c, "ps-b", "ps", T0);
    add_node(&c, "w-b", "worker", T0);
    add_node(&c, "w-c", "worker", T0);
    pf_job_spec spec;
    make_spec(&spec, "big", 2, 2, "");
    coord_job *big = submit(&c, &spec, T0 + 1);
    assert_int_equal(big->phase, COORD_CREATED);
    assert_string_equal(big->message, "waiting for agents: missing ps 1");
    assert_queue(big, 1, 0, NULL);
    assert_reason(big, "capacity");

    make_spec(&spec, "small", 1, 1, "");
    coord_job *small = submit(&c, &spec, T0 + 2);
    assert_int_equal(small->phase, COORD_CREATED); /* 1 ps and 2 workers idle, but held */
    assert_string_equal(small->message,
                        "waiting behind job big (agents are held for the jobs ahead in the "
                        "queue): missing ps 0, worker 0");
    assert_queue(small, 2, 0, "big");
    assert_reason(small, "reserved");
    coord_cluster_tick(&c, T0 + 3);
    assert_int_equal(small->phase, COORD_CREATED);

    finish_job(&c, busy, ps, w, T0 + 4);
    assert_int_equal(big->phase, COORD_RUNNING);
    assert_queue(big, 0, 0, NULL);
    /* what is left (1 worker) is not enough: the small job waits for the cluster now */
    assert_int_equal(small->phase, COORD_CREATED);
    assert_string_equal(small->message, "waiting for agents: missing ps 0");
    assert_queue(small, 1, 0, NULL);
    coord_cluster_deinit(&c);
}

/* A job of higher priority submitted later goes ahead of one waiting already (the running
 * job is not preemptible). */
static void test_priority(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *busy =
        running_pair(&c, "busy", ", \"run_policy\": {\"preemptible\": false}", T0, &ps, &w);
    pf_job_spec spec;
    make_spec(&spec, "low", 1, 1, "");
    coord_job *low = submit(&c, &spec, T0 + 1);
    make_spec(&spec, "high", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high = submit(&c, &spec, T0 + 2);
    make_spec(&spec, "lower", 1, 1, ", \"run_policy\": {\"priority\": -5}");
    coord_job *lower = submit(&c, &spec, T0 + 0.5);
    assert_queue(high, 1, 10, NULL);
    assert_queue(low, 2, 0, NULL); /* nothing idle to hold: the cluster lacks the agents */
    assert_queue(lower, 3, -5, NULL);

    finish_job(&c, busy, ps, w, T0 + 3);
    assert_int_equal(high->phase, COORD_RUNNING);
    assert_int_equal(low->phase, COORD_CREATED);
    assert_int_equal(lower->phase, COORD_CREATED);
    assert_queue(low, 1, 0, NULL);
    assert_queue(lower, 2, -5, NULL);

    finish_job(&c, high, ps, w, T0 + 4);
    assert_int_equal(low->phase, COORD_RUNNING);
    assert_int_equal(lower->phase, COORD_CREATED);
    assert_queue(lower, 1, -5, NULL);
    coord_cluster_deinit(&c);
}

/* A job that needs more agents of a role than the cluster has holds none: the jobs behind it
 * start on what is idle. */
static void test_too_large_holds_nothing(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    add_node(&c, "ps-a", "ps", T0);
    add_node(&c, "w-a", "worker", T0);
    pf_job_spec spec;
    make_spec(&spec, "huge", 3, 1, "");
    coord_job *huge = submit(&c, &spec, T0 + 1);
    assert_int_equal(huge->phase, COORD_CREATED);
    assert_string_equal(huge->message, "waiting for agents: missing ps 1, ps 2");
    make_spec(&spec, "small", 1, 1, "");
    coord_job *small = submit(&c, &spec, T0 + 2);
    assert_int_equal(small->phase, COORD_RUNNING);
    assert_queue(small, 0, 0, NULL);
    assert_queue(huge, 1, 0, NULL);
    assert_reason(huge, "cluster_too_small");
    coord_cluster_deinit(&c);
}

/* A job of higher priority preempts a running one of lower priority: the victim's agents stop
 * its tasks, the new job takes them, and the victim resumes by itself once they free again. */
static void test_preemption(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *low = running_pair(&c, "low", "", T0, &ps, &w);
    assert_int_equal(low->generation, 1);
    take_events(&c, NULL, NULL);
    pf_job_spec spec;
    make_spec(&spec, "high", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high = submit(&c, &spec, T0 + 1);
    assert_int_equal(low->phase, COORD_RESTARTING);
    assert_condition(low, "Restarting", "True", "Preempted");
    assert_non_null(strstr(find_condition(low, "Restarting")->message,
                           "preempted by job high (priority 10 > 0)"));
    assert_non_null(strstr(low->message, "preempted by job high; waiting for agents"));
    assert_int_equal(low->preemptions, 1);
    assert_int_equal(low->restarts, 0); /* not a failure */
    assert_int_equal(take_events(&c, "log", "Preempting"), 1);
    /* the agents still stop low's tasks: high waits for them, nobody else is preempted */
    assert_int_equal(high->phase, COORD_CREATED);
    coord_cluster_tick(&c, T0 + 1.5);
    assert_int_equal(low->preemptions, 1);
    json_t *status;
    json_t *q = queue_of(low, &status);
    assert_non_null(q);
    assert_string_equal(json_string_value(json_object_get(q, "preempted_by")), "high");
    assert_string_equal(json_string_value(json_object_get(q, "reason")), "preempted");
    assert_true(json_is_string(json_object_get(q, "preempted_since")));
    assert_int_equal(json_integer_value(json_object_get(status, "preemptions")), 1);
    json_decref(status);

    report(&c, ps, "idle", 0, T0 + 2);
    report(&c, w, "idle", 0, T0 + 2);
    assert_int_equal(high->phase, COORD_RUNNING);
    assert_assigned(high, ps, "ps", 0, 1);
    assert_int_equal(low->phase, COORD_RESTARTING);
    assert_non_null(strstr(low->message, "preempted by job high; waiting for agents"));
    assert_queue(low, 1, 0, NULL);

    finish_job(&c, high, ps, w, T0 + 3);
    assert_int_equal(low->phase, COORD_RUNNING);
    assert_int_equal(low->generation, 2);
    assert_assigned(low, w, "worker", 0, 2);
    assert_int_equal(low->restarts, 0);
    assert_string_equal(low->preempted_by, "");
    assert_queue(low, 0, 0, NULL);
    coord_cluster_deinit(&c);
}

/* Never preempted: a job with run_policy.preemptible false, and one of the same priority; a
 * job that would not fit even with every victim preempts none. */
static void test_no_preemption(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *keep =
        running_pair(&c, "keep", ", \"run_policy\": {\"preemptible\": false}", T0, &ps, &w);
    pf_job_spec spec;
    make_spec(&spec, "urgent", 1, 1, ", \"run_policy\": {\"priority\": 100}");
    coord_job *urgent = submit(&c, &spec, T0 + 1);
    assert_int_equal(keep->phase, COORD_RUNNING);
    assert_int_equal(keep->preemptions, 0);
    assert_int_equal(urgent->phase, COORD_CREATED);
    finish_job(&c, keep, ps, w, T0 + 2);
    assert_int_equal(urgent->phase, COORD_RUNNING);

    make_spec(&spec, "same", 1, 1, ", \"run_policy\": {\"priority\": 100}");
    coord_job *same = submit(&c, &spec, T0 + 3);
    assert_int_equal(urgent->phase, COORD_RUNNING);
    assert_int_equal(same->phase, COORD_CREATED);

    /* two ps wanted, the one a lower job holds is not enough (a second exists but is
     * preemptible: false): nothing stopped */
    finish_job(&c, urgent, ps, w, T0 + 4);
    assert_int_equal(same->phase, COORD_RUNNING);
    coord_node *ps_b = add_node(&c, "ps-b", "ps", T0 + 5);
    add_node(&c, "w-b", "worker", T0 + 5);
    make_spec(&spec, "fixed", 1, 1, ", \"run_policy\": {\"priority\": 50, \"preemptible\": false}");
    coord_job *fixed = submit(&c, &spec, T0 + 5);
    assert_int_equal(fixed->phase, COORD_RUNNING);
    assert_assigned(fixed, ps_b, "ps", 0, 1);
    make_spec(&spec, "wide", 2, 1, ", \"run_policy\": {\"priority\": 200}");
    coord_job *wide = submit(&c, &spec, T0 + 6);
    assert_int_equal(wide->phase, COORD_CREATED);
    assert_int_equal(same->phase, COORD_RUNNING); /* alone, it would not free enough */
    assert_int_equal(same->preemptions, 0);
    assert_int_equal(fixed->phase, COORD_RUNNING);
    coord_cluster_deinit(&c);
}

/* Victims: the lowest priority first, and only as many as the preempting job needs. */
static void test_preemption_victims(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps_a = add_node(&c, "ps-a", "ps", T0), *ps_b = add_node(&c, "ps-b", "ps", T0);
    coord_node *w_a = add_node(&c, "w-a", "worker", T0), *w_b = add_node(&c, "w-b", "worker", T0);
    pf_job_spec spec;
    make_spec(&spec, "mid", 1, 1, ", \"run_policy\": {\"priority\": 5}");
    coord_job *mid = submit(&c, &spec, T0 + 1);
    make_spec(&spec, "low", 1, 1, ", \"run_policy\": {\"priority\": -5}");
    coord_job *low = submit(&c, &spec, T0 + 2);
    assert_int_equal(mid->phase, COORD_RUNNING);
    assert_int_equal(low->phase, COORD_RUNNING);
    coord_node *all[] = {ps_a, ps_b, w_a, w_b};
    for (int i = 0; i < 4; i++)
        report(&c, all[i], "running", 0, T0 + 3);

    make_spec(&spec, "high", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high = submit(&c, &spec, T0 + 4);
    assert_int_equal(low->phase, COORD_RESTARTING);
    assert_int_equal(mid->phase, COORD_RUNNING);
    assert_int_equal(mid->preemptions, 0);
    for (int i = 0; i < 4; i++)
        if (!all[i]->job[0])
            report(&c, all[i], "idle", 0, T0 + 5);
    assert_int_equal(high->phase, COORD_RUNNING);
    assert_int_equal(mid->phase, COORD_RUNNING);
    assert_int_equal(low->phase, COORD_RESTARTING);
    assert_queue(low, 1, -5, NULL);
    coord_cluster_deinit(&c);
}

/* A preempted job's resume is not a restart of its tasks: a worker failing after it is still
 * replaced alone (backoff_limit 1), with no gang restart. */
static void test_preemption_keeps_restarts(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *low =
        running_pair(&c, "low", ", \"run_policy\": {\"backoff_limit\": 1}", T0, &ps, &w);
    pf_job_spec spec;
    make_spec(&spec, "high", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high = submit(&c, &spec, T0 + 1);
    report(&c, ps, "idle", 0, T0 + 2);
    report(&c, w, "idle", 0, T0 + 2);
    assert_int_equal(high->phase, COORD_RUNNING);
    finish_job(&c, high, ps, w, T0 + 3);
    assert_int_equal(low->generation, 2);
    report(&c, ps, "running", 0, T0 + 4);
    report(&c, w, "running", 0, T0 + 4);
    assert_int_equal(task_of(low, "worker", 0)->restarts, 0);
    assert_int_equal(task_of(low, "ps", 0)->restarts, 0);
    report(&c, w, "failed", 1, T0 + 5);
    assert_int_equal(low->restarts, 0); /* replaced alone */
    assert_int_equal(low->phase, COORD_RUNNING);
    assert_int_equal(low->generation, 2);
    coord_cluster_deinit(&c);
}

/* Only the victims needed: b alone frees what high needs, so a (lower, taken first) is
 * spared again. */
static void test_preemption_spares_unneeded(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *n[5] = {add_node(&c, "ps-a", "ps", T0), add_node(&c, "ps-b", "ps", T0),
                        add_node(&c, "w-a", "worker", T0), add_node(&c, "w-b", "worker", T0),
                        add_node(&c, "w-c", "worker", T0)};
    pf_job_spec spec;
    make_spec(&spec, "b", 1, 2, "");
    coord_job *b = submit(&c, &spec, T0 + 1);
    make_spec(&spec, "a", 1, 1, ", \"run_policy\": {\"priority\": -5}");
    coord_job *a = submit(&c, &spec, T0 + 2);
    for (int i = 0; i < 5; i++)
        report(&c, n[i], "running", 0, T0 + 3);
    make_spec(&spec, "high", 1, 2, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high = submit(&c, &spec, T0 + 4);
    assert_int_equal(a->preemptions, 0);
    assert_int_equal(a->phase, COORD_RUNNING);
    assert_int_equal(b->preemptions, 1);
    for (int i = 0; i < 5; i++)
        if (!n[i]->job[0])
            report(&c, n[i], "idle", 0, T0 + 5);
    assert_int_equal(high->phase, COORD_RUNNING);
    assert_int_equal(a->phase, COORD_RUNNING);
    coord_cluster_deinit(&c);
}

/* Agents a preemption frees go to the job that preempted, not to a replacement for a running
 * job of lower priority (which would make it preempt a second job). */
static void test_preemption_not_stolen(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *psa = add_node(&c, "ps-a", "ps", T0), *psb = add_node(&c, "ps-b", "ps", T0);
    coord_node *wa = add_node(&c, "w-a", "worker", T0), *wb = add_node(&c, "w-b", "worker", T0),
               *wc = add_node(&c, "w-c", "worker", T0);
    pf_job_spec spec;
    make_spec(&spec, "low2", 1, 2, "");
    coord_job *low2 = submit(&c, &spec, T0 + 1);
    make_spec(&spec, "low1", 1, 1, "");
    coord_job *low1 = submit(&c, &spec, T0 + 2);
    coord_node *all[] = {psa, psb, wa, wb, wc};
    for (int i = 0; i < 5; i++)
        report(&c, all[i], "running", 0, T0 + 2);
    make_spec(&spec, "high", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high = submit(&c, &spec, T0 + 3);
    assert_int_equal(low1->phase, COORD_RESTARTING);
    double t1 = T0 + 3 + LEASE + 1;
    report(&c, psa, "running", 0, t1);
    report(&c, wa, "running", 0, t1);
    report(&c, psb, "running", 0, t1); /* still stopping low1's tasks */
    report(&c, wc, "running", 0, t1);
    coord_cluster_tick(&c, t1); /* w-b lost: low2's worker 1 waits for a replacement */
    assert_true(wb->lost);
    report(&c, wc, "idle", 0, t1 + 1);
    report(&c, psb, "idle", 0, t1 + 1);
    assert_int_equal(high->phase, COORD_RUNNING);
    assert_string_equal(wc->job, "high");
    assert_int_equal(low2->preemptions, 0);
    assert_int_equal(low2->phase, COORD_RUNNING); /* its worker 1 still waits */
    coord_cluster_deinit(&c);
}

/* active_deadline_seconds does not count the time a preempted job waits to resume. */
static void test_preemption_deadline(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *low = running_pair(&c, "low", ", \"run_policy\": {\"active_deadline_seconds\": 100}",
                                  T0, &ps, &w);
    pf_job_spec spec;
    make_spec(&spec, "high", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high = submit(&c, &spec, T0 + 50);
    report(&c, ps, "idle", 0, T0 + 51);
    report(&c, w, "idle", 0, T0 + 51);
    assert_int_equal(high->phase, COORD_RUNNING);
    report(&c, ps, "running", 0, T0 + 52);
    report(&c, w, "running", 0, T0 + 52);
    coord_cluster_tick(&c, T0 + 120); /* 50 s run, 70 s waiting */
    assert_int_equal(low->phase, COORD_RESTARTING);
    finish_job(&c, high, ps, w, T0 + 130);
    assert_int_equal(low->phase, COORD_RUNNING);
    json_t *status = coord_job_status_json(low);
    assert_true(json_number_value(json_object_get(status, "preempted_seconds")) == 80.0);
    json_decref(status);
    for (double t = T0 + 131; t < T0 + 186; t += 1) { /* heartbeats keep the agents */
        report(&c, ps, "running", 0, t);
        report(&c, w, "running", 0, t);
    }
    coord_cluster_tick(&c, T0 + 175); /* 95 s run */
    assert_int_equal(low->phase, COORD_RUNNING);
    coord_cluster_tick(&c, T0 + 185); /* 105 s run */
    assert_int_equal(low->phase, COORD_FAILED);
    assert_condition(low, "Failed", "True", "DeadlineExceeded");
    coord_cluster_deinit(&c);
}

/* A running job that cannot be preempted gets its replacement while a job of higher priority
 * waits for its agents (it would otherwise wait for ever, and the other job with it). */
static void test_preemption_no_deadlock(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "r", 1, 2, ", \"run_policy\": {\"preemptible\": false}");
    coord_job *r = submit(&c, &spec, T0);
    coord_node *psa = add_node(&c, "ps-a", "ps", T0);
    coord_node *wa = add_node(&c, "w-a", "worker", T0);
    coord_node *wb = add_node(&c, "w-b", "worker", T0);
    assert_int_equal(r->phase, COORD_RUNNING);
    report(&c, psa, "running", 0, T0);
    report(&c, wa, "running", 0, T0);
    report(&c, wb, "running", 0, T0);
    coord_node *psb = add_node(&c, "ps-b", "ps", T0 + 1);
    coord_node *wc = add_node(&c, "w-c", "worker", T0 + 1);
    coord_node *wd = add_node(&c, "w-d", "worker", T0 + 1);
    make_spec(&spec, "h", 1, 3, ", \"run_policy\": {\"priority\": 10}");
    coord_job *h = submit(&c, &spec, T0 + 2);
    assert_int_equal(h->phase, COORD_CREATED);
    assert_int_equal(r->phase, COORD_RUNNING);
    coord_node_remove(&c, wb, T0 + 3);
    for (double t = T0 + 4; t < T0 + 30; t += 1) {
        report(&c, psa, "running", 0, t);
        report(&c, wa, "running", 0, t);
        report(&c, psb, "idle", 0, t);
        report(&c, wc, "idle", 0, t);
        report(&c, wd, "idle", 0, t);
        coord_cluster_tick(&c, t + 0.5);
    }
    assert_true(task_of(r, "worker", 1)->node_id[0] != '\0');
    coord_cluster_deinit(&c);
}

/* A running job's replacement comes before the waiting jobs, also while a job of higher
 * priority waits that could never start (cluster_too_small). */
static void test_replacement_before_queue(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "r", 1, 2, "");
    coord_job *r = submit(&c, &spec, T0);
    coord_node *psa = add_node(&c, "ps-a", "ps", T0);
    coord_node *wa = add_node(&c, "w-a", "worker", T0);
    coord_node *wb = add_node(&c, "w-b", "worker", T0);
    report(&c, psa, "running", 0, T0);
    report(&c, wa, "running", 0, T0);
    report(&c, wb, "running", 0, T0);
    coord_node *psb = add_node(&c, "ps-b", "ps", T0 + 1);
    make_spec(&spec, "huge", 5, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *huge = submit(&c, &spec, T0 + 2);
    make_spec(&spec, "l", 1, 1, "");
    coord_job *l = submit(&c, &spec, T0 + 2);
    assert_int_equal(l->phase, COORD_CREATED);
    coord_node_remove(&c, wb, T0 + 3);
    add_node(&c, "w-c", "worker", T0 + 4);
    (void)psb;
    assert_int_equal(huge->queue_reason, COORD_WAIT_TOO_SMALL);
    assert_string_equal(task_of(r, "worker", 1)->node_id, "w-c");
    assert_int_equal(l->phase, COORD_CREATED);
    coord_cluster_deinit(&c);
}

/* A stored status naming a preempting job without its time: the wait counts from the load,
 * never as seconds since 1970 (the deadline still holds). */
static void test_preempted_status_without_time(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *low = running_pair(&c, "low", ", \"run_policy\": {\"active_deadline_seconds\": 100}",
                                  T0, &ps, &w);
    pf_job_spec spec;
    make_spec(&spec, "high", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high = submit(&c, &spec, T0 + 10);
    assert_int_equal(low->phase, COORD_RESTARTING);
    json_t *st = coord_job_status_json(low);
    json_object_del(json_object_get(st, "queue"), "preempted_since");
    json_object_del(st, "preempted_seconds");
    coord_job_status_from_json(low, st);
    json_decref(st);
    report(&c, ps, "idle", 0, T0 + 11);
    report(&c, w, "idle", 0, T0 + 11);
    finish_job(&c, high, ps, w, T0 + 20);
    assert_int_equal(low->phase, COORD_RUNNING);
    for (double t = T0 + 21; t < T0 + 400; t += 5) {
        report(&c, ps, "running", 0, t);
        report(&c, w, "running", 0, t);
        coord_cluster_tick(&c, t);
    }
    assert_true(low->preempted_seconds < 100);
    coord_cluster_deinit(&c);
}

/* A worker that succeeded still holds its agent until its job ends: counted among what a
 * victim frees, so only the one victim needed is stopped. */
static void test_preemption_counts_succeeded(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "b", 1, 1, "");
    coord_job *b = submit(&c, &spec, T0);
    coord_node *psb = add_node(&c, "ps-b", "ps", T0);
    coord_node *wb = add_node(&c, "w-b", "worker", T0);
    report(&c, psb, "running", 0, T0);
    report(&c, wb, "running", 0, T0);
    make_spec(&spec, "a", 1, 2, "");
    coord_job *a = submit(&c, &spec, T0 + 1);
    coord_node *psa = add_node(&c, "ps-a", "ps", T0 + 1);
    coord_node *wa0 = add_node(&c, "w-a0", "worker", T0 + 1);
    coord_node *wa1 = add_node(&c, "w-a1", "worker", T0 + 1);
    assert_int_equal(a->phase, COORD_RUNNING);
    report(&c, psa, "running", 0, T0 + 1);
    report(&c, wa0, "running", 0, T0 + 1);
    report(&c, wa1, "running", 0, T0 + 1);
    report(&c, wa1, "succeeded", 0, T0 + 2); /* worker 1 done, the chief (worker 0) not yet */
    assert_int_equal(a->phase, COORD_RUNNING);
    make_spec(&spec, "h", 1, 2, ", \"run_policy\": {\"priority\": 10}");
    submit(&c, &spec, T0 + 3);
    assert_int_equal(b->phase, COORD_RUNNING); /* a alone frees 1 ps + 2 workers */
    coord_cluster_deinit(&c);
}

/* Job `big` waits first in the queue for one worker more than is idle: it is expected to start
 * when the running job that holds one is expected to end (its steps left at its rate), and
 * its status says when. A job behind it that fits the idle agents held for big starts ahead
 * of it (backfill) only when its active_deadline_seconds ends it before then; a longer one,
 * or one with no bound at all, waits behind big. The backfilled job does not move big's
 * expected start. */
static void test_backfill(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *busy =
        running_pair(&c, "busy", ", \"run_policy\": {\"preemptible\": false}", T0, &ps, &w);
    busy->global_step = 40;
    busy->steps_per_sec = 1.0; /* 60 steps left: ends about 60 s after the round */
    add_node(&c, "ps-b", "ps", T0);
    add_node(&c, "w-b", "worker", T0);
    add_node(&c, "w-c", "worker", T0);
    pf_job_spec spec;
    make_spec(&spec, "big", 1, 3, "");
    coord_job *big = submit(&c, &spec, T0 + 1);
    assert_queue(big, 1, 0, NULL);
    assert_reason(big, "capacity");
    assert_float_equal((big->queue_start - T0), 61, 1e-6); /* cmocka casts to float */
    json_t *status;
    json_t *q = queue_of(big, &status);
    assert_string_equal(json_string_value(json_object_get(q, "estimated_start")),
                        "2025-11-22T10:01:01.000Z");
    json_decref(status);
    take_events(&c, NULL, NULL);

    make_spec(&spec, "quick", 1, 1, ", \"run_policy\": {\"active_deadline_seconds\": 30}");
    coord_job *quick = submit(&c, &spec, T0 + 2);
    assert_int_equal(quick->phase, COORD_RUNNING); /* ends by T0 + 32, before T0 + 61 */
    assert_queue(quick, 0, 0, NULL);
    assert_int_equal(take_events(&c, "log", "Backfilled"), 1);
    assert_int_equal(big->phase, COORD_CREATED);
    /* quick frees its agents first, and busy (still at step 40) 60 s from this round */
    assert_float_equal((big->queue_start - T0), 62, 1e-6);

    add_node(&c, "ps-c", "ps", T0 + 3);
    make_spec(&spec, "long", 1, 1, ", \"run_policy\": {\"active_deadline_seconds\": 300}");
    coord_job *lng = submit(&c, &spec, T0 + 3);
    make_spec(&spec, "unbounded", 1, 1, "");
    coord_job *unbounded = submit(&c, &spec, T0 + 4);
    assert_int_equal(lng->phase, COORD_CREATED);
    assert_queue(lng, 2, 0, "big");
    assert_reason(lng, "reserved");
    assert_int_equal(unbounded->phase, COORD_CREATED);
    assert_queue(unbounded, 3, 0, "big");
    assert_true(lng->queue_start == 0); /* estimated for the first job only */
    assert_int_equal(take_events(&c, "log", "Backfilled"), 0);
    coord_cluster_deinit(&c);
}

/* No estimate, no backfill: a running job without a measured rate leaves the first waiting
 * job's start unknown (null) even with a deadline (when it ends at the latest, not when it
 * ends), and nothing starts ahead; once it has a rate, however slow, its deadline caps the
 * estimate, and a short job backfills. */
static void test_backfill_needs_estimate(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *busy = running_pair(
        &c, "busy",
        ", \"run_policy\": {\"preemptible\": false, \"active_deadline_seconds\": 86400}", T0, &ps,
        &w);
    add_node(&c, "ps-b", "ps", T0);
    add_node(&c, "w-b", "worker", T0);
    pf_job_spec spec;
    make_spec(&spec, "big", 1, 2, "");
    coord_job *big = submit(&c, &spec, T0 + 1);
    assert_true(big->queue_start == 0);
    json_t *status;
    json_t *q = queue_of(big, &status);
    assert_true(json_is_null(json_object_get(q, "estimated_start")));
    json_decref(status);
    make_spec(&spec, "quick", 1, 1, ", \"run_policy\": {\"active_deadline_seconds\": 5}");
    coord_job *quick = submit(&c, &spec, T0 + 2);
    assert_int_equal(quick->phase, COORD_CREATED);
    assert_reason(quick, "reserved");
    busy->steps_per_sec = 1e-6; /* 100 steps left: 3 years, but its deadline ends it first */
    coord_cluster_tick(&c, T0 + 3);
    assert_float_equal((big->queue_start - T0), 86400, 1e-6);
    assert_int_equal(quick->phase, COORD_RUNNING); /* 5 s, long before */
    coord_cluster_deinit(&c);
}

/* The checkpoint_now of the assignment agent n's heartbeat answer carries, or -1 when none. */
static long long checkpoint_now(coord_cluster *c, coord_node *n) {
    json_t *a = coord_node_assignment(c, n);
    json_t *v = json_object_get(a, "checkpoint_now");
    long long step = json_is_integer(v) ? (long long)json_integer_value(v) : -1;
    json_decref(a);
    return step;
}

/* With a grace (psflow coordinator --preempt-grace-seconds), a preempted job first takes a
 * final checkpoint: it runs on, its chief asked in its heartbeat answer, its agents counted as
 * stopping (nobody else is preempted), until the checkpoint is reported; then it stops and
 * resumes from that step. Without a report it stops when the grace ends; when the job
 * preempting it no longer waits, or it reaches max_steps, it runs on. */
static void test_preemption_final_checkpoint(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    c.preempt_grace = 30;
    coord_node *ps, *w;
    coord_job *low = running_pair(&c, "low", "", T0, &ps, &w);
    low->global_step = 50;
    coord_job_record_checkpoint(&c, low, 40, 1, NULL, NULL, -1, T0 + 0.5);
    take_events(&c, NULL, NULL);
    pf_job_spec spec;
    make_spec(&spec, "high", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high = submit(&c, &spec, T0 + 1);
    assert_int_equal(low->phase, COORD_RUNNING);
    assert_int_equal(low->preemptions, 0);
    assert_int_equal(checkpoint_now(&c, w), 50); /* its chief (worker 0) is asked */
    assert_int_equal(checkpoint_now(&c, ps), -1);
    assert_int_equal(take_events(&c, "log", "Checkpointing"), 1);
    assert_non_null(strstr(low->message, "taking a final checkpoint at step 50 or later"));
    assert_int_equal(high->phase, COORD_CREATED);
    coord_cluster_tick(&c, T0 + 2);
    assert_int_equal(low->phase, COORD_RUNNING);
    assert_int_equal(take_events(&c, "log", "Preempting"), 0); /* not again */

    low->global_step = 62;
    coord_job_record_checkpoint(&c, low, 60, 1, NULL, NULL, -1, T0 + 3);
    coord_cluster_tick(&c, T0 + 3);
    assert_int_equal(low->phase, COORD_RESTARTING);
    assert_condition(low, "Restarting", "True", "Preempted");
    assert_non_null(strstr(find_condition(low, "Restarting")->message,
                           "after its final checkpoint at step 60"));
    assert_int_equal(low->preemptions, 1);
    assert_int_equal(checkpoint_now(&c, w), -1); /* no assignment now */
    report(&c, ps, "idle", 0, T0 + 4);
    report(&c, w, "idle", 0, T0 + 4);
    assert_int_equal(high->phase, COORD_RUNNING);

    /* no checkpoint within the grace: it stops then */
    finish_job(&c, high, ps, w, T0 + 5);
    assert_int_equal(low->phase, COORD_RUNNING);
    report(&c, ps, "running", 0, T0 + 5);
    report(&c, w, "running", 0, T0 + 5);
    make_spec(&spec, "high2", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high2 = submit(&c, &spec, T0 + 6);
    assert_int_equal(low->phase, COORD_RUNNING);
    for (double at = T0 + 10; at <= T0 + 35; at += 5) { /* its agents heartbeat meanwhile */
        report(&c, ps, "running", 0, at);
        report(&c, w, "running", 0, at);
        coord_cluster_tick(&c, at);
        if (low->phase != COORD_RUNNING)
            fail_msg("at +%.0f s: %s", at - T0, low->message);
    }
    assert_int_equal(low->phase, COORD_RUNNING);
    coord_cluster_tick(&c, T0 + 36.5);
    assert_int_equal(low->phase, COORD_RESTARTING);
    assert_non_null(
        strstr(find_condition(low, "Restarting")->message, "with no final checkpoint within 30 s"));
    assert_int_equal(low->preemptions, 2);

    /* the job preempting it is cancelled meanwhile: it runs on */
    report(&c, ps, "idle", 0, T0 + 37);
    report(&c, w, "idle", 0, T0 + 37);
    assert_int_equal(high2->phase, COORD_RUNNING);
    finish_job(&c, high2, ps, w, T0 + 38);
    assert_int_equal(low->phase, COORD_RUNNING);
    report(&c, ps, "running", 0, T0 + 38);
    report(&c, w, "running", 0, T0 + 38);
    make_spec(&spec, "high3", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high3 = submit(&c, &spec, T0 + 39);
    assert_true(low->drain_until > 0);
    coord_job_cancel(&c, high3, T0 + 40);
    coord_cluster_tick(&c, T0 + 40);
    assert_int_equal(low->phase, COORD_RUNNING);
    assert_true(low->drain_until == 0);
    assert_int_equal(low->preemptions, 2);
    assert_int_equal(checkpoint_now(&c, w), -1);

    /* it reaches max_steps meanwhile: it finishes rather than stop */
    make_spec(&spec, "high4", 1, 1, ", \"run_policy\": {\"priority\": 10}");
    coord_job *high4 = submit(&c, &spec, T0 + 41);
    assert_true(low->drain_until > 0);
    low->global_step = low->spec.training.max_steps;
    coord_cluster_tick(&c, T0 + 42);
    assert_int_equal(low->phase, COORD_RUNNING);
    assert_true(low->drain_until == 0);
    assert_non_null(strstr(low->message, "running on to its end"));
    assert_int_equal(high4->phase, COORD_CREATED);
    coord_cluster_deinit(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_overtaking),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_too_large_holds_nothing),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_no_preemption),
        cmocka_unit_test(test_preemption_victims),
        cmocka_unit_test(test_preemption_keeps_restarts),
        cmocka_unit_test(test_preemption_spares_unneeded),
        cmocka_unit_test(test_preemption_not_stolen),
        cmocka_unit_test(test_preemption_deadline),
        cmocka_unit_test(test_preemption_no_deadlock),
        cmocka_unit_test(test_replacement_before_queue),
        cmocka_unit_test(test_preempted_status_without_time),
        cmocka_unit_test(test_preemption_counts_succeeded),
        cmocka_unit_test(test_backfill),
        cmocka_unit_test(test_backfill_needs_estimate),
        cmocka_unit_test(test_preemption_final_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
