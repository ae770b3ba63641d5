/* cluster_reports.c - what a job's trainers report beyond heartbeats (part of the state
 * machine of cluster.h): metric points and evaluations, consistent rollbacks and complete
 * checkpoints.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/cluster.h"
#include "coordinator/cluster_conditions.h"
#include "coordinator/cluster_events.h"
#include "psflow/mem.h"

/* "chief", "worker-<i>" or "evaluator": the name metric reports use. */
static coord_task *find_task_by_name(coord_job *j, const char *name) {
    if (!strcmp(name, "chief"))
        return coord_job_chief(j);
    if (!strcmp(name, "evaluator"))
        return coord_task_find(j, "evaluator", 0);
    int index;
    char tail;
    if (sscanf(name, "worker-%d%c", &index, &tail) == 1)
        return coord_task_find(j, "worker", index);
    return NULL;
}

int coord_job_check_reporter(const coord_job *j, const char *task, uint64_t incarnation,
                             bool chief_only, char *why, size_t cap) {
    bool ran = false;
    for (int i = 0; i < j->n_tasks; i++)
        ran = ran || j->tasks[i].incarnation != 0;
    if (!ran) {
        snprintf(why, cap, "job %s has not run: no task of it was ever started", j->name);
        return 409;
    }
    if (chief_only && strcmp(task, "chief") != 0) {
        snprintf(why, cap, "only the chief of job %s makes this report, not %s", j->name, task);
        return 403;
    }
    coord_task *t = find_task_by_name((coord_job *)j, task);
    if (!t || t->incarnation == 0) {
        snprintf(why, cap, "job %s has no started task %s", j->name, task);
        return 409;
    }
    if (t->incarnation != incarnation) {
        snprintf(why, cap,
                 "incarnation %" PRIu64 " of %s is not its current one (%" PRIu64
                 "): a report of a task that was replaced",
                 incarnation, task, t->incarnation);
        return 409;
    }
    return 0;
}

void coord_job_record_rollback(coord_cluster *c, coord_job *j, int64_t from, int64_t to,
                               int64_t reached, const char *reason, const char *detail,
                               double now) {
    bool finished = coord_job_finished(j);
    if (!reason) {
        if (!finished)
            coord_job_rolled_back(c, j, "PsRestarted", "a ps restarted", from, to, reached, now);
        return;
    }
    char msg[COORD_TEXT_MAX];
    if (detail && detail[0]) /* the chief's own account (non-finite rollback) */
        snprintf(msg, sizeof msg, "%s", detail);
    else
        snprintf(msg, sizeof msg,
                 "a non-finite value: every ps rolled back from step %" PRId64
                 " to checkpoint step %" PRId64,
                 from, to);
    if (finished) /* the chief's report came after the job ended (it failed on the next one) */
        coord_log_event(c, j->name, "RolledBack", reason, msg, now);
    else
        coord_job_rolled_back_msg(c, j, reason, msg, to, reached, now);
}

void coord_job_record_metrics(coord_cluster *c, coord_job *j, const char *task,
                              const coord_point *points, int n_points, const coord_eval *evals,
                              int n_evals, double now) {
    coord_task *t = find_task_by_name(j, task);
    bool finished = coord_job_finished(j);
    int64_t best = -1;
    for (int i = 0; i < n_points; i++) {
        const coord_point *p = &points[i];
        /* A report sent again: its points are on record (a step trained again after a
         * rollback is a later time, and is taken). */
        if (t &&
            (p->time < t->point_time || (p->time == t->point_time && p->step <= t->point_step)))
            continue;
        if (t) {
            t->point_time = p->time;
            t->point_step = p->step;
        }
        int64_t step = p->step;
        double loss = p->loss, eps = p->examples_per_sec;
        coord_event *e = coord_metric_event(c, COORD_EVENT_POINT, j, task, step, p->time, now);
        if (e) {
            e->u.metric.loss = loss;
            e->u.metric.examples_per_sec = eps;
            e->u.metric.step_time_seconds = p->step_time_seconds;
        }
        if (finished)
            continue; /* kept in the history; the final summary stays as the job ended */
        /* A task not yet running again reports what its previous incarnation did before a
         * gang restart: that step is not the job's any more. */
        if (step > j->global_step && !(t && t->state == TASK_PENDING && j->generation > 1))
            j->global_step = step;
        if (step >= best && !isnan(loss)) {
            best = step;
            j->loss = loss;
        }
        if (t) {
            t->step = step;
            if (!isnan(eps))
                t->examples_per_sec = eps;
            if (p->bad_lines > t->bad_lines)
                t->bad_lines = p->bad_lines;
        }
    }
    for (int i = 0; i < n_evals; i++) {
        const coord_eval *p = &evals[i];
        double acc = p->accuracy, tl = p->test_loss;
        int64_t step = p->step;
        coord_event *e = coord_metric_event(c, COORD_EVENT_EVAL, j, task, step, p->time, now);
        if (e) {
            e->u.metric.accuracy = acc;
            e->u.metric.test_loss = tl;
            e->u.metric.test_auc = p->test_auc;
            e->u.metric.test_calibration = p->test_calibration;
            e->u.metric.bayes_auc = p->bayes_auc;
        }
        if (t && !strcmp(t->type,
                         "evaluator")) { /* eval_loss / eval_accuracy: never the chief's figures */
            if (step >= j->eval_step) {
                j->eval_step = step;
                j->eval_accuracy = acc;
                j->eval_loss = tl;
            }
            continue;
        }
        /* An evaluation may carry only one of the two: the other keeps its last value. */
        if (!isnan(acc))
            j->accuracy = acc;
        if (!isnan(tl))
            j->test_loss = tl;
        if (!isnan(p->test_auc))
            j->test_auc = p->test_auc;
        if (!isnan(p->test_calibration))
            j->test_calibration = p->test_calibration;
        if (!isnan(p->bayes_auc))
            j->bayes_auc = p->bayes_auc;
    }
    j->dirty = true;
    if (finished) {
        if (n_evals > 0)
            coord_job_event(c, j, now);
        return;
    }
    double eps = 0;
    int64_t bad = 0;
    for (int k = 0; k < j->n_tasks; k++) {
        if (strcmp(j->tasks[k].type, "ps") != 0 && j->tasks[k].state == TASK_RUNNING)
            eps += j->tasks[k].examples_per_sec;
        bad += j->tasks[k].bad_lines;
    }
    j->examples_per_sec = eps;
    if (bad > j->bad_lines)
        j->bad_lines = bad;
    coord_rate_note(&j->rate, j->global_step, now); /* steps/s: cluster_rate.h */
    j->steps_per_sec = coord_rate_steps_per_sec(&j->rate);
    j->dirty = true;
    if (now - j->last_summary_event >= 0.25 || n_evals > 0)
        coord_job_event(c, j, now);
}

void coord_job_record_checkpoint(coord_cluster *c, coord_job *j, int64_t step, int64_t bytes,
                                 const char *files, const char *kept, int64_t kept_max,
                                 double now) {
    char *copy = files ? pf_strdup(files) : NULL, *kept_copy = kept ? pf_strdup(kept) : NULL;
    coord_event *e = (!files || copy) && (!kept || kept_copy)
                         ? coord_queue_event(c, COORD_EVENT_CHECKPOINT, "checkpoint", j->name, now)
                         : NULL;
    if (e) {
        e->u.checkpoint.step = step;
        e->u.checkpoint.bytes = bytes;
        e->u.checkpoint.files = copy;
        e->u.checkpoint.kept = kept_copy;
    } else {
        pf_free(copy);
        pf_free(kept_copy);
    }
    int64_t newest = kept_max > step ? kept_max : step;
    if (!j->has_checkpoint || newest > j->checkpoint_step) {
        j->has_checkpoint = true;
        j->checkpoint_step = newest;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "checkpoint at step %" PRId64 " complete (%" PRId64 " bytes)", step,
             bytes);
    coord_log_event(c, j->name, "Checkpoint", "CheckpointWritten", msg, now);
}
