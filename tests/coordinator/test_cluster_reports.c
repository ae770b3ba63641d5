/* test_cluster_reports.c - what a job's tasks report to the coordinator's state machine
 * (coordinator/cluster.c, cluster_reports.c), driven in-process with explicit times: the
 * chief's success (and the evaluator's last word), metrics that arrive after the end,
 * rollbacks and the step training goes on from, and the newest checkpoint. The rest of the
 * state machine is in test_cluster.c.
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
#include "psflow/spec.h"

/* --- success and reports ---------------------------------------------------------------------- */

/* The chief's success ends the job: every task succeeded, every agent released. */
static void test_chief_success(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "success", "", T0, &ps, &w);
    /* Ticks of a running job add no condition (TrainingComplete is for an evaluator). */
    coord_cluster_tick(&c, T0 + 1);
    report(&c, ps, "running", 0, T0 + 2);
    report(&c, w, "running", 0, T0 + 2);
    coord_cluster_tick(&c, T0 + 3);
    assert_null(find_condition(j, "TrainingComplete"));
    int n_conds = j->n_conds;
    json_t *r =
        json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:{s:f, s:f, s:i}}", "state", "succeeded", "job",
                  "success", "generation", 1, "type", "worker", "index", 0, "exit_code", 0,
                  "result", "accuracy", 0.89, "test_loss", 0.31, "steps", 100);
    coord_node_heartbeat_json(&c, w, r, T0 + 10);
    json_decref(r);
    assert_int_equal(j->phase, COORD_SUCCEEDED);
    assert_condition(j, "Succeeded", "True", "JobSucceeded");
    assert_int_equal(j->n_conds, n_conds + 1);
    assert_string_equal(j->message, "reached step 100 of 100; test accuracy 0.8900");
    assert_int_equal(j->global_step, 100);
    assert_true(j->accuracy == 0.89);
    assert_true(isnan(j->test_auc) && isnan(j->test_calibration)); /* not a two-class result */
    assert_true(j->completion_time == T0 + 10);
    for (int k = 0; k < j->n_tasks; k++)
        assert_int_equal(j->tasks[k].state, TASK_SUCCEEDED);
    assert_string_equal(ps->job, "");
    assert_string_equal(w->job, "");
    coord_cluster_deinit(&c);
}

/* With an evaluator still running when the chief succeeds, the job stays Running
 * (TrainingComplete) and its training agents are freed; it succeeds when the evaluator ends,
 * failed or not, or after COORD_EVALUATOR_GRACE_SECONDS. A ps agent lost meanwhile changes
 * nothing. */
static void test_success_waits_for_evaluator(void **state) {
    (void)state;
    for (int how = 0; how < 3; how++) { /* evaluator succeeds, fails, never ends */
        coord_cluster c;
        coord_cluster_init(&c, LEASE);
        pf_job_spec spec;
        make_spec(&spec, "evalwait", 1, 1, "");
        spec.replicas.evaluator = 1;
        coord_job *j = submit(&c, &spec, T0);
        coord_node *ps = add_node(&c, "ps-a", "ps", T0);
        coord_node *w = add_node(&c, "w-a", "worker", T0);
        coord_node *e = add_node(&c, "w-b", "worker", T0);
        assert_int_equal(j->phase, COORD_RUNNING);
        report(&c, ps, "running", 0, T0);
        report(&c, w, "running", 0, T0);
        report(&c, e, "running", 0, T0);
        assert_int_equal(task_of(j, "evaluator", 0)->state, TASK_RUNNING);
        json_t *r =
            json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:{s:f, s:f, s:i}}", "state", "succeeded",
                      "job", "evalwait", "generation", 1, "type", "worker", "index", 0, "exit_code",
                      0, "result", "accuracy", 0.89, "test_loss", 0.31, "steps", 100);
        coord_node_heartbeat_json(&c, w, r, T0 + 10);
        json_decref(r);
        assert_int_equal(j->phase, COORD_RUNNING);
        assert_condition(j, "TrainingComplete", "True", "ChiefSucceeded");
        assert_non_null(strstr(j->message, "evaluator's final evaluation"));
        assert_int_equal(task_of(j, "worker", 0)->state, TASK_SUCCEEDED);
        assert_int_equal(task_of(j, "ps", 0)->state, TASK_SUCCEEDED);
        assert_int_equal(task_of(j, "evaluator", 0)->state, TASK_RUNNING);
        assert_string_equal(ps->job, "");
        assert_string_equal(w->job, "");
        assert_string_equal(e->job, "evalwait");
        /* Training is over: no scaling, no suspension (409 for the API: no pointer). */
        pf_error err;
        assert_int_equal(coord_job_patch(&c, j, 2, -1, T0 + 11, &err), PF_ERR_INVALID);
        assert_string_equal(err.pointer, "");
        assert_non_null(strstr(err.message, "TrainingComplete"));
        assert_int_equal(coord_job_patch(&c, j, 0, 1, T0 + 11, &err), PF_ERR_INVALID);
        assert_int_equal(j->phase, COORD_RUNNING);
        assert_int_equal(j->spec.replicas.worker, 1);
        assert_int_equal(j->n_tasks, 3);
        /* The ps agent goes silent: no restart, the job still waits for the evaluator. */
        report(&c, e, "running", 0, T0 + 2 * LEASE);
        coord_cluster_tick(&c, T0 + 3 * LEASE);
        assert_int_equal(j->phase, COORD_RUNNING);
        assert_int_equal(j->restarts, 0);
        if (how == 0) {
            report(&c, e, "succeeded", 0, T0 + 40);
            assert_int_equal(task_of(j, "evaluator", 0)->state, TASK_SUCCEEDED);
        } else if (how == 1) {
            report(&c, e, "failed", 1, T0 + 40);
            assert_int_equal(take_events(&c, "log", "EvaluatorFailed"), 1);
        } else {
            for (double t = T0 + 40; t < T0 + 10 + COORD_EVALUATOR_GRACE_SECONDS; t += 5) {
                report(&c, e, "running", 0, t);
                coord_cluster_tick(&c, t);
                assert_int_equal(j->phase, COORD_RUNNING);
            }
            report(&c, e, "running", 0, T0 + 11 + COORD_EVALUATOR_GRACE_SECONDS);
            coord_cluster_tick(&c, T0 + 11 + COORD_EVALUATOR_GRACE_SECONDS);
            assert_int_equal(take_events(&c, "log", "EvaluatorTimeout"), 1);
        }
        assert_int_equal(j->phase, COORD_SUCCEEDED);
        assert_condition(j, "Succeeded", "True", "JobSucceeded");
        assert_string_equal(j->message, "reached step 100 of 100; test accuracy 0.8900");
        assert_string_equal(e->job, "");
        coord_cluster_deinit(&c);
    }
}

/* Metric points update the job's step, loss and rates while it runs; points that arrive
 * after it finished are kept in the history (events) but leave its summary as it ended. */
static void test_metrics_after_end(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "metrics", 1, 2, "");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *nodes[3] = {add_node(&c, "ps-a", "ps", T0), add_node(&c, "w-a", "worker", T0),
                            add_node(&c, "w-b", "worker", T0)};
    for (int i = 0; i < 3; i++)
        report(&c, nodes[i], "running", 0, T0 + 1);
    assert_true(isnan(j->loss));
    take_events(&c, NULL, NULL);

    json_t *p0 = json_pack("[{s:i, s:f, s:f, s:f}, {s:i, s:f, s:f, s:f}]", "step", 10, "time",
                           T0 + 2, "loss", 0.5, "examples_per_sec", 100.0, "step", 12, "time",
                           T0 + 2.1, "loss", 0.4, "examples_per_sec", 110.0);
    coord_job_record_metrics_json(&c, j, "worker-0", p0, NULL, T0 + 2.2);
    json_t *p1 = json_pack("[{s:i, s:f, s:f, s:f}]", "step", 13, "time", T0 + 2.3, "loss", 0.35,
                           "examples_per_sec", 90.0);
    coord_job_record_metrics_json(&c, j, "worker-1", p1, NULL, T0 + 2.4);
    assert_int_equal(take_events(&c, "metric", NULL), 3);
    assert_int_equal(j->global_step, 13);
    assert_true(j->loss == 0.35);
    assert_true(j->examples_per_sec == 200.0);
    assert_int_equal(task_of(j, "worker", 0)->step, 12);

    coord_job_cancel(&c, j, T0 + 3);
    take_events(&c, NULL, NULL);
    json_t *late = json_pack("[{s:i, s:f, s:f, s:f}]", "step", 20, "time", T0 + 4, "loss", 0.1,
                             "examples_per_sec", 500.0);
    coord_job_record_metrics_json(&c, j, "worker-0", late, NULL, T0 + 4);
    assert_int_equal(take_events(&c, "metric", NULL), 1);
    assert_int_equal(j->global_step, 13);
    assert_true(j->loss == 0.35);
    assert_true(j->examples_per_sec == 200.0);
    assert_int_equal(task_of(j, "worker", 0)->step, 12);

    /* A late evaluation still gives the job its accuracy. */
    json_t *evals = json_pack("[{s:i, s:f, s:f, s:f}]", "step", 20, "time", T0 + 5, "accuracy", 0.9,
                              "test_loss", 0.3);
    coord_job_record_metrics_json(&c, j, "chief", NULL, evals, T0 + 5);
    assert_true(j->accuracy == 0.9);
    assert_true(j->test_loss == 0.3);
    assert_int_equal(j->global_step, 13);
    assert_int_equal(j->phase, COORD_FAILED);

    /* A two-class evaluation's AUC and calibration reach the status (null before), and a
     * synthetic_ctr chief's Bayes-optimal AUC; the status the store keeps reads it back. */
    json_t *status = coord_job_status_json(j);
    assert_true(json_is_null(json_object_get(status, "test_auc")));
    assert_true(json_is_null(json_object_get(status, "test_calibration")));
    assert_true(json_is_null(json_object_get(status, "bayes_auc")));
    json_decref(status);
    json_t *ctr =
        json_pack("[{s:i, s:f, s:f, s:f, s:f, s:f}]", "step", 20, "time", T0 + 5.5, "test_loss",
                  0.3, "test_auc", 0.78, "test_calibration", 0.97, "bayes_auc", 0.8468);
    coord_job_record_metrics_json(&c, j, "chief", NULL, ctr, T0 + 5.5);
    json_decref(ctr);
    status = coord_job_status_json(j);
    assert_true(json_real_value(json_object_get(status, "test_auc")) == 0.78);
    assert_true(json_real_value(json_object_get(status, "test_calibration")) == 0.97);
    assert_true(json_real_value(json_object_get(status, "bayes_auc")) == 0.8468);
    coord_job stored = {0};
    coord_job_status_from_json(&stored, status);
    assert_true(stored.bayes_auc == 0.8468);
    json_decref(status);

    /* An evaluation with only a test loss (or only an accuracy) leaves the other figure as
     * it was instead of blanking it. */
    json_t *loss_only =
        json_pack("[{s:i, s:f, s:f}]", "step", 21, "time", T0 + 6, "test_loss", 0.25);
    coord_job_record_metrics_json(&c, j, "chief", NULL, loss_only, T0 + 6);
    assert_true(j->accuracy == 0.9);
    assert_true(j->test_loss == 0.25);
    json_t *acc_only = json_pack("[{s:i, s:f, s:f}]", "step", 22, "time", T0 + 7, "accuracy", 0.91);
    coord_job_record_metrics_json(&c, j, "chief", NULL, acc_only, T0 + 7);
    assert_true(j->accuracy == 0.91);
    assert_true(j->test_loss == 0.25);
    assert_true(j->test_auc == 0.78 && j->test_calibration == 0.97 && j->bayes_auc == 0.8468);
    json_decref(loss_only);
    json_decref(acc_only);
    json_decref(p0);
    json_decref(p1);
    json_decref(late);
    json_decref(evals);
    coord_cluster_deinit(&c);
}

/* The chief's rollback: a RolledBack condition and event naming both steps, and
 * global_step back at the step training continues from (not the high-water mark). */
static void test_rollback_global_step(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    pf_job_spec spec;
    make_spec(&spec, "rollback", 1, 2, "");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *nodes[3] = {add_node(&c, "ps-a", "ps", T0), add_node(&c, "w-a", "worker", T0),
                            add_node(&c, "w-b", "worker", T0)};
    for (int i = 0; i < 3; i++)
        report(&c, nodes[i], "running", 0, T0 + 1);
    json_t *p0 = json_pack("[{s:i, s:f, s:f, s:f}]", "step", 800, "time", T0 + 2, "loss", 0.5,
                           "examples_per_sec", 100.0);
    coord_job_record_metrics_json(&c, j, "chief", p0, NULL, T0 + 2);
    assert_int_equal(j->global_step, 800);
    take_events(&c, NULL, NULL);
    coord_job_record_rollback(&c, j, 800, 400, -1, NULL, NULL, T0 + 3);
    assert_int_equal(j->global_step, 400);
    assert_condition(j, "RolledBack", "True", "PsRestarted");
    assert_non_null(strstr(find_condition(j, "RolledBack")->message, "from step 800"));
    assert_non_null(strstr(find_condition(j, "RolledBack")->message, "step 400"));
    assert_int_equal(take_events(&c, "log", "PsRestarted"), 1);
    json_t *p1 = json_pack("[{s:i, s:f, s:f, s:f}]", "step", 450, "time", T0 + 4, "loss", 0.4,
                           "examples_per_sec", 100.0);
    coord_job_record_metrics_json(&c, j, "chief", p1, NULL, T0 + 4);
    assert_int_equal(j->global_step, 450);
    /* Reported with points from after it: global_step is the newest of those. */
    coord_job_record_rollback(&c, j, 450, 400, 420, NULL, NULL, T0 + 5);
    assert_int_equal(j->global_step, 420);
    /* A non-finite rollback: its reason, and the chief's message as the condition's. */
    coord_job_record_rollback(&c, j, 430, 400, -1, "NonFiniteLoss",
                              "non-finite value: every ps rolled back from step 430 to "
                              "checkpoint step 400; data step 430 skipped",
                              T0 + 6);
    assert_int_equal(j->global_step, 400);
    assert_condition(j, "RolledBack", "True", "NonFiniteLoss");
    assert_non_null(strstr(find_condition(j, "RolledBack")->message, "data step 430 skipped"));
    assert_int_equal(take_events(&c, "log", "NonFiniteLoss"), 1);
    json_decref(p0);
    json_decref(p1);
    coord_cluster_deinit(&c);
}

/* A gang restart is a rollback too: the ps tasks restore the newest checkpoint, so the job's
 * RolledBack condition and event name both steps and global_step goes back to the checkpoint;
 * what the previous generation's tasks report late does not raise it again. */
static void test_gang_restart_rollback(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "gang", "", T0, &ps, &w);
    coord_job_record_checkpoint(&c, j, 200, 1000, NULL, NULL, -1, T0 + 1);
    json_t *p0 = json_pack("[{s:i, s:f, s:f, s:f}]", "step", 350, "time", T0 + 2, "loss", 0.5,
                           "examples_per_sec", 100.0);
    coord_job_record_metrics_json(&c, j, "chief", p0, NULL, T0 + 2);
    assert_int_equal(j->global_step, 350);

    /* The ps agent is lost: the gang restarts from checkpoint 200. */
    report(&c, w, "running", 0, T0 + 8);
    report(&c, ps, "running", 0, T0 + 2);
    coord_cluster_tick(&c, T0 + 2.5 + LEASE);
    assert_int_equal(j->phase, COORD_RESTARTING);
    assert_int_equal(j->global_step, 350); /* nothing restored yet */
    report(&c, w, "idle", 0, T0 + 13);
    take_events(&c, NULL, NULL);
    add_node(&c, "ps-a", "ps", T0 + 13.5);
    assert_int_equal(j->generation, 2);
    assert_condition(j, "Running", "True", "JobRestarted");
    assert_int_equal(j->global_step, 200);
    assert_condition(j, "RolledBack", "True", "JobRestarted");
    const char *msg = find_condition(j, "RolledBack")->message;
    assert_non_null(strstr(msg, "rolled back from step 350 to checkpoint step 200"));
    assert_non_null(strstr(msg, "generation 2"));
    assert_int_equal(take_events(&c, "log", "JobRestarted"), 2); /* Running, then RolledBack */

    /* The previous generation's chief's last report arrives late: not the job's step any
     * more. */
    json_t *late = json_pack("[{s:i, s:f, s:f, s:f}]", "step", 360, "time", T0 + 3, "loss", 0.5,
                             "examples_per_sec", 100.0);
    coord_job_record_metrics_json(&c, j, "chief", late, NULL, T0 + 14);
    assert_int_equal(j->global_step, 200);
    /* The new generation runs; its chief reports from the checkpoint on. */
    report(&c, ps, "running", 0, T0 + 14.5);
    report(&c, w, "running", 0, T0 + 14.5);
    json_t *p1 = json_pack("[{s:i, s:f, s:f, s:f}]", "step", 230, "time", T0 + 15, "loss", 0.4,
                           "examples_per_sec", 100.0);
    coord_job_record_metrics_json(&c, j, "chief", p1, NULL, T0 + 15);
    assert_int_equal(j->global_step, 230);

    /* A restart with no newer checkpoint than the step: nothing to roll back. */
    coord_job_record_checkpoint(&c, j, 230, 1000, NULL, NULL, -1, T0 + 16);
    report(&c, w, "running", 0, T0 + 20);
    coord_cluster_tick(&c, T0 + 15 + LEASE);
    assert_int_equal(j->phase, COORD_RESTARTING);
    report(&c, w, "idle", 0, T0 + 26);
    take_events(&c, NULL, NULL);
    add_node(&c, "ps-a", "ps", T0 + 26.5);
    assert_int_equal(j->generation, 3);
    assert_int_equal(j->global_step, 230);
    assert_int_equal(take_events(&c, "log", "JobRestarted"), 1);
    json_decref(p0);
    json_decref(late);
    json_decref(p1);
    coord_cluster_deinit(&c);
}

/* A gang restart before the job's first checkpoint starts training again from step 0: the
 * job says so (RolledBack) and its global step goes back to 0. */
static void test_gang_restart_before_checkpoint(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "early", "", T0, &ps, &w);
    json_t *p = json_pack("[{s:i, s:f, s:f, s:f}]", "step", 150, "time", T0 + 2, "loss", 0.5,
                          "examples_per_sec", 100.0);
    coord_job_record_metrics_json(&c, j, "chief", p, NULL, T0 + 2);
    json_decref(p);
    assert_int_equal(j->global_step, 150);
    assert_false(j->has_checkpoint);

    report(&c, ps, "failed", 137, T0 + 3); /* the ps: the gang restarts */
    assert_int_equal(j->phase, COORD_RESTARTING);
    report(&c, ps, "idle", 0, T0 + 4);
    report(&c, w, "idle", 0, T0 + 4);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 2);
    assert_int_equal(j->global_step, 0);
    assert_condition(j, "RolledBack", "True", "JobRestarted");
    assert_non_null(strstr(find_condition(j, "RolledBack")->message,
                           "with no checkpoint reported (the ps tasks restore the newest on "
                           "disk): every ps rolled back from step 150 to checkpoint step 0"));
    assert_int_equal(take_events(&c, "log", "JobRestarted"), 2); /* Running, then RolledBack */
    coord_cluster_deinit(&c);
}

/* The checkpoint a gang restart rolls back to is the newest on disk: a report retried after a
 * newer one (its agent could not deliver it at first) does not take it back, and a newer step
 * that `kept` names counts even when its own report was lost. */
static void test_checkpoint_step_newest(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "ckpt", "", T0, &ps, &w);
    coord_job_record_checkpoint(&c, j, 600, 1000, NULL, "[500,600]", 600, T0 + 1);
    assert_true(j->has_checkpoint);
    assert_int_equal(j->checkpoint_step, 600);
    coord_job_record_checkpoint(&c, j, 500, 1000, NULL, "[400,500]", 500, T0 + 2);
    assert_int_equal(j->checkpoint_step, 600);
    assert_int_equal(take_events(&c, "checkpoint", NULL), 2); /* both are listed */
    coord_job_record_checkpoint(&c, j, 700, 1000, NULL, "[600,700,800]", 800, T0 + 3);
    assert_int_equal(j->checkpoint_step, 800);
    coord_cluster_deinit(&c);
}

/* --- who may report ------------------------------------------------------------------------ */

/* A report is taken only from the current incarnation of the task it names, a chief-only one
 * only from the chief, and none for a job that never ran; refusals change nothing. */
static void test_reporter_checked(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    char why[COORD_TEXT_MAX];
    pf_job_spec spec;
    make_spec(&spec, "never", 1, 1, "");
    coord_job *never = submit(&c, &spec, T0); /* no agents: it never runs */
    assert_int_equal(coord_job_check_reporter(never, "chief", 1, true, why, sizeof why), 409);
    assert_non_null(strstr(why, "has not run"));
    coord_job_delete(&c, never, T0);
    coord_cluster_reap(&c);

    make_spec(&spec, "pair", 1, 2, "");
    coord_job *j = submit(&c, &spec, T0);
    coord_node *nodes[3] = {add_node(&c, "ps-a", "ps", T0), add_node(&c, "w-a", "worker", T0),
                            add_node(&c, "w-b", "worker", T0)};
    for (int i = 0; i < 3; i++)
        report(&c, nodes[i], "running", 0, T0 + 1);
    uint64_t chief = task_of(j, "worker", 0)->incarnation,
             w1 = task_of(j, "worker", 1)->incarnation;
    assert_true(chief != 0 && w1 != 0 && chief != w1);
    assert_int_equal(coord_job_check_reporter(j, "chief", chief, true, why, sizeof why), 0);
    assert_int_equal(coord_job_check_reporter(j, "worker-1", w1, false, why, sizeof why), 0);
    /* A stale (or guessed) incarnation. */
    assert_int_equal(coord_job_check_reporter(j, "chief", chief - 1, true, why, sizeof why), 409);
    assert_non_null(strstr(why, "not its current one"));
    /* Worker 1 with its own incarnation, but a chief-only report (a rollback, a checkpoint). */
    assert_int_equal(coord_job_check_reporter(j, "worker-1", w1, true, why, sizeof why), 403);
    assert_non_null(strstr(why, "only the chief"));
    /* Worker 1 claiming to be the chief: the chief's incarnation is not its own. */
    assert_int_equal(coord_job_check_reporter(j, "chief", w1, true, why, sizeof why), 409);
    assert_int_equal(coord_job_check_reporter(j, "worker-7", w1, false, why, sizeof why), 409);
    coord_cluster_deinit(&c);
}

/* A report sent again (the same points, or older ones) queues no metric event and leaves the
 * job's figures; the step trained again after a rollback (a later time) is taken. */
static void test_report_sent_again(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "again", "", T0, &ps, &w);
    json_t *p = json_pack("[{s:i, s:f, s:f}, {s:i, s:f, s:f}]", "step", 10, "time", T0 + 2, "loss",
                          0.5, "step", 11, "time", T0 + 2, "loss", 0.4);
    for (int i = 0; i < 5; i++)
        coord_job_record_metrics_json(&c, j, "chief", p, NULL, T0 + 3 + i);
    assert_int_equal(take_events(&c, "metric", NULL), 2);
    json_t *again = json_pack("[{s:i, s:f, s:f}]", "step", 5, "time", T0 + 4, "loss", 0.9);
    coord_job_record_metrics_json(&c, j, "chief", again, NULL, T0 + 9);
    assert_int_equal(take_events(&c, "metric", NULL), 1);
    assert_true(j->loss == 0.9);
    json_decref(p);
    json_decref(again);
    coord_cluster_deinit(&c);
}

/* Bad input lines a task skipped (data.on_error skip) reach the job's status: a task's count
 * is the most it reported (a restarted incarnation that counts again from 0 adds nothing),
 * the job's the sum, kept through the stored status. */
static void test_bad_lines_counted(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "bad", "", T0, &ps, &w);
    assert_int_equal(j->bad_lines, 0);
    json_t *p = json_pack("[{s:i, s:f, s:f, s:i}, {s:i, s:f, s:f, s:i}]", "step", 10, "time",
                          T0 + 2, "loss", 0.5, "bad_lines", 3, "step", 11, "time", T0 + 2.5, "loss",
                          0.4, "bad_lines", 5);
    coord_job_record_metrics_json(&c, j, "chief", p, NULL, T0 + 3);
    assert_int_equal(j->bad_lines, 5);
    json_t *again = json_pack("[{s:i, s:f, s:f, s:i}]", "step", 12, "time", T0 + 4, "loss", 0.3,
                              "bad_lines", 2);
    coord_job_record_metrics_json(&c, j, "chief", again, NULL, T0 + 5);
    assert_int_equal(j->bad_lines, 5);
    json_t *status = coord_job_status_json(j);
    assert_int_equal(json_integer_value(json_object_get(status, "bad_lines_skipped")), 5);
    j->bad_lines = 0;
    coord_job_status_from_json(j, status);
    assert_int_equal(j->bad_lines, 5);
    json_decref(status);
    json_decref(p);
    json_decref(again);
    coord_cluster_deinit(&c);
}

/* --- the tasks of an ended job ------------------------------------------------------------- */

static const char *state_of(coord_job *j, const char *type, int index) {
    return coord_task_state_name(task_of(j, type, index)->state);
}

/* When a job fails (here: the chief's non-finite loss) or is cancelled, no task of it stays
 * Running or Pending: they are Stopped, and their agents are free. */
static void test_ended_job_tasks_stop(void **state) {
    (void)state;
    for (int how = 0; how < 2; how++) {
        coord_cluster c;
        coord_cluster_init(&c, LEASE);
        coord_node *ps, *w;
        coord_job *j = running_pair(&c, "ends", "", T0, &ps, &w);
        if (how == 0) {
            json_t *r = report_json(w, "failed", 65, task_of(j, "worker", 0)->incarnation);
            json_object_set_new(r, "reason", json_string("NonFiniteLoss"));
            json_object_set_new(r, "message", json_string("non-finite loss (inf) at step 12"));
            coord_node_heartbeat_json(&c, w, r, T0 + 5);
            json_decref(r);
            assert_condition(j, "Failed", "True", "NonFiniteLoss");
            assert_int_equal(task_of(j, "worker", 0)->state, TASK_FAILED);
        } else {
            coord_job_cancel(&c, j, T0 + 5);
            assert_condition(j, "Failed", "True", "Cancelled");
            assert_string_equal(state_of(j, "worker", 0), "Stopped");
        }
        assert_int_equal(j->phase, COORD_FAILED);
        assert_string_equal(state_of(j, "ps", 0), "Stopped");
        /* The ps agent's late "running" heartbeat does not bring it back. */
        report(&c, ps, "running", 0, T0 + 6);
        assert_string_equal(state_of(j, "ps", 0), "Stopped");
        assert_string_equal(ps->job, "");
        coord_cluster_deinit(&c);
    }
}

/* With training.epochs, a chief that succeeds before max_steps read every epoch: the
 * message says so, and the queue in the status is finished even when ps 0's last report
 * of it never came; one that reached max_steps first says that and keeps the queue as
 * reported. */
static void test_epochs_message(void **state) {
    (void)state;
    for (int at_max = 0; at_max < 2; at_max++) {
        coord_cluster c;
        coord_cluster_init(&c, LEASE);
        coord_node *ps, *w;
        coord_job *j = running_pair(&c, at_max ? "epochs-max" : "epochs", "", T0, &ps, &w);
        j->spec.training.epochs = 3; /* as a dynamic-splits job's spec has it */
        j->has_input = true;         /* ps 0's last report: in epoch 2 */
        j->input_splits = 64;
        j->input_epoch = 2;
        j->input_done = 60;
        j->input_leased = 2;
        json_t *r =
            json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:{s:f, s:f, s:i}}", "state", "succeeded",
                      "job", j->name, "generation", 1, "type", "worker", "index", 0, "exit_code", 0,
                      "result", "accuracy", 0.5, "test_loss", 0.7, "steps", at_max ? 100 : 37);
        coord_node_heartbeat_json(&c, w, r, T0 + 10);
        json_decref(r);
        assert_int_equal(j->phase, COORD_SUCCEEDED);
        assert_string_equal(j->message, at_max
                                            ? "reached step 100 of 100; test accuracy 0.5000"
                                            : "finished 3 epochs at step 37; test accuracy 0.5000");
        assert_int_equal(j->input_finished, !at_max);
        assert_int_equal(j->input_epoch, at_max ? 2 : 3);
        assert_int_equal(j->input_done, at_max ? 60 : 0);
        assert_int_equal(j->input_leased, at_max ? 2 : 0);
        assert_int_equal(j->input_splits, 64);
        coord_cluster_deinit(&c);
    }
}

/* --- profiles ----------------------------------------------------------------------------------
 */

/* One heartbeat of w (worker 0 of `job`, running) carrying `profile` (JSON text). */
static void beat_profile(coord_cluster *c, coord_node *w, const char *job, const char *profile,
                         double now) {
    json_error_t e;
    json_t *p = json_loads(profile, 0, &e);
    assert_non_null(p);
    json_t *r = json_pack("{s:s, s:s, s:i, s:s, s:i, s:o}", "state", "running", "job", job,
                          "generation", 1, "type", "worker", "index", 0, "profile", p);
    coord_node_heartbeat_json(c, w, r, now);
    json_decref(r);
}

/* A training task's profile: the latest totals, a window once two reports are 2 s of its
 * time apart, a new incarnation's (its time went back) starting again; a profile that is not
 * all in range, or names a phase of the other role, is left out whole. */
static void test_profile_window(void **state) {
    (void)state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_node *ps, *w;
    coord_job *j = running_pair(&c, "prof", "", T0, &ps, &w);
    coord_task *t = coord_task_find(j, "worker", 0);
    assert_false(t->has_profile);
    beat_profile(&c, w, "prof",
                 "{\"count\": 10, \"seconds\": 1.0, \"phases\": {\"input\": 0.1, \"push\": 0.5}}",
                 T0 + 1);
    assert_true(t->has_profile);
    assert_false(t->has_window);
    assert_int_equal(t->profile.count, 10);
    assert_true(fabs(t->profile.phases[PF_PHASE_PUSH] - 0.5) < 1e-12);
    /* 1.5 s later: not yet a window */
    beat_profile(&c, w, "prof",
                 "{\"count\": 20, \"seconds\": 2.5, \"phases\": {\"input\": 0.2, \"push\": 1.0}}",
                 T0 + 2);
    assert_false(t->has_window);
    beat_profile(&c, w, "prof",
                 "{\"count\": 40, \"seconds\": 3.0, \"phases\": {\"input\": 0.3, \"push\": 2.0, "
                 "\"barrier\": 0.5}}",
                 T0 + 3);
    assert_true(t->has_window);
    assert_int_equal(t->window.count, 30);
    assert_true(fabs(t->window.seconds - 2.0) < 1e-12);
    assert_true(fabs(t->window.phases[PF_PHASE_PUSH] - 1.5) < 1e-12);
    assert_true(fabs(t->window.phases[PF_PHASE_BARRIER] - 0.5) < 1e-12);
    /* bad ones change nothing */
    static const char *const bad[] = {
        "{\"count\": 50, \"seconds\": 9, \"phases\": {\"apply\": 1}}",
        "{\"count\": 50, \"seconds\": 9, \"phases\": {\"input\": -1}}",
        "{\"count\": 50, \"seconds\": \"9\", \"phases\": {\"input\": 1}}",
        "{\"count\": 50, \"seconds\": 9, \"phases\": {\"nap\": 1}}",
        "{\"count\": -5, \"seconds\": 9, \"phases\": {\"input\": 1}}",
        "{\"count\": 50, \"seconds\": 1e300, \"phases\": {\"input\": 1}}",
        "{\"count\": 50, \"seconds\": 9, \"phases\": {\"input\": 1e12}}",
        "{\"count\": 50, \"seconds\": 9, \"phases\": [1, 2]}",
        "{\"count\": 50.5, \"seconds\": 9, \"phases\": {}}",
        "{\"seconds\": 9, \"phases\": {}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        beat_profile(&c, w, "prof", bad[i], T0 + 4);
        assert_int_equal(t->profile.count, 40);
        assert_true(fabs(t->profile.seconds - 3.0) < 1e-12);
    }
    /* GET .../profile: the ps without a profile yet, the worker's totals and window, and what
     * its phases leave */
    json_t *pj = coord_job_profile_json(j);
    assert_non_null(pj);
    json_t *tasks = json_object_get(pj, "tasks");
    assert_int_equal(json_array_size(tasks), 2);
    json_t *item, *wt = NULL;
    size_t k;
    json_array_foreach(tasks, k, item) {
        if (!strcmp(json_string_value(json_object_get(item, "type")), "worker"))
            wt = item;
        else
            assert_true(json_is_null(json_object_get(item, "total")));
    }
    assert_non_null(wt);
    json_t *recent = json_object_get(wt, "recent");
    assert_int_equal(json_integer_value(json_object_get(recent, "count")), 30);
    assert_true(fabs(json_real_value(json_object_get(json_object_get(recent, "phases"), "push")) -
                     1.5) < 1e-12);
    assert_int_equal(json_object_size(json_object_get(recent, "phases")), PF_PHASE_FIRST_PS);
    assert_true(fabs(json_real_value(json_object_get(recent, "other")) - 0.0) < 1e-12);
    json_t *total = json_object_get(wt, "total");
    assert_true(fabs(json_real_value(json_object_get(total, "other")) - 0.2) < 1e-9);
    json_decref(pj);
    /* a phase that went back (a wait counted while it lasted turned out partly push): the
     * total keeps what it had, a counter never decreases */
    beat_profile(&c, w, "prof",
                 "{\"count\": 41, \"seconds\": 3.1, \"phases\": {\"input\": 0.3, \"push\": 2.05, "
                 "\"barrier\": 0.45}}",
                 T0 + 4);
    assert_int_equal(t->profile.count, 41);
    assert_true(fabs(t->profile.phases[PF_PHASE_BARRIER] - 0.5) < 1e-12);
    assert_true(fabs(t->profile.phases[PF_PHASE_PUSH] - 2.05) < 1e-12);
    /* its time went back (the task's process started again): it starts again, and so does
     * the window */
    beat_profile(&c, w, "prof", "{\"count\": 1, \"seconds\": 0.1, \"phases\": {\"input\": 0.05}}",
                 T0 + 5);
    assert_int_equal(t->profile.count, 1);
    assert_false(t->has_window);
    beat_profile(&c, w, "prof", "{\"count\": 100, \"seconds\": 9.0, \"phases\": {\"input\": 0.5}}",
                 T0 + 6);
    assert_true(t->has_window);
    /* a new incarnation (the task replaced): the old one's profile is not shown, and the
     * new one's first report starts again even with more time than the old one had */
    t->incarnation++;
    pj = coord_job_profile_json(j);
    json_array_foreach(json_object_get(pj, "tasks"), k, item)
        assert_true(json_is_null(json_object_get(item, "total")));
    json_decref(pj);
    beat_profile(&c, w, "prof", "{\"count\": 200, \"seconds\": 20.0, \"phases\": {\"input\": 1.0}}",
                 T0 + 7);
    assert_int_equal(t->profile.count, 200);
    assert_false(t->has_window);
    coord_cluster_deinit(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epochs_message),
        cmocka_unit_test(test_chief_success),
        cmocka_unit_test(test_success_waits_for_evaluator),
        cmocka_unit_test(test_metrics_after_end),
        cmocka_unit_test(test_rollback_global_step),
        cmocka_unit_test(test_gang_restart_rollback),
        cmocka_unit_test(test_gang_restart_before_checkpoint),
        cmocka_unit_test(test_checkpoint_step_newest),
        cmocka_unit_test(test_reporter_checked),
        cmocka_unit_test(test_report_sent_again),
        cmocka_unit_test(test_bad_lines_counted),
        cmocka_unit_test(test_ended_job_tasks_stop),
        cmocka_unit_test(test_profile_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
