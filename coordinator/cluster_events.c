/* cluster_events.c - the state machine's event queue (part of cluster.h): each change a
 * client should see is queued as a snapshot taken when it happened, for the caller to
 * persist and publish (coord_cluster_take_events), with the job summary a job event carries.
 */
#include "coordinator/cluster_events.h"

#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"

/* A zeroed event at the end of the queue, or NULL when out of memory: the change itself is
 * kept, only its notification is lost. */
coord_event *coord_queue_event(coord_cluster *c, coord_event_type type, const char *kind,
                               const char *job, double now) {
    if (c->n_pending == c->cap_pending) {
        int cap = c->cap_pending ? c->cap_pending * 2 : 64;
        coord_event *grown = pf_realloc(c->pending, (size_t)cap * sizeof *grown);
        if (!grown)
            return NULL;
        c->pending = grown;
        c->cap_pending = cap;
    }
    coord_event *e = &c->pending[c->n_pending++];
    memset(e, 0, sizeof *e);
    e->type = type;
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    snprintf(e->job, sizeof e->job, "%s", job ? job : "");
    e->time = now;
    return e;
}

void coord_event_deinit(coord_event *e) {
    if (e->type == COORD_EVENT_POINT || e->type == COORD_EVENT_EVAL)
        pf_free(e->u.metric.task);
    else if (e->type == COORD_EVENT_CHECKPOINT)
        pf_free(e->u.checkpoint.files), pf_free(e->u.checkpoint.kept);
    memset(e, 0, sizeof *e);
}

/* The newest condition that holds: what a list item names as the reason for its phase. */
static const char *latest_reason(const coord_job *j) {
    const coord_condition *best = NULL;
    for (int i = 0; i < j->n_conds; i++)
        if (!strcmp(j->conds[i].status, "True") && (!best || j->conds[i].time >= best->time))
            best = &j->conds[i];
    return best ? best->reason : "";
}

void coord_job_summarize(const coord_job *j, coord_job_summary *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", j->name);
    out->phase = j->phase;
    snprintf(out->reason, sizeof out->reason, "%s", latest_reason(j));
    snprintf(out->message, sizeof out->message, "%s", j->message);
    out->sync = j->spec.training.mode == PF_MODE_SYNC;
    out->global_step = j->global_step;
    out->max_steps = (int64_t)j->spec.training.max_steps;
    out->loss = j->loss;
    out->accuracy = j->accuracy;
    out->examples_per_sec = j->examples_per_sec;
    out->steps_per_sec = j->steps_per_sec;
    out->stalled_seconds = coord_rate_stalled_seconds(&j->rate);
    out->create_time = j->create_time;
    out->start_time = j->start_time;
    out->completion_time = j->completion_time;
    out->restarts = j->restarts;
    out->queue_position = j->queue_position;
    out->priority = j->spec.run_policy.priority;
    out->queue_reason = j->queue_reason;
    snprintf(out->queue, sizeof out->queue, "%s", pf_job_spec_queue(&j->spec));
    snprintf(out->queue_behind, sizeof out->queue_behind, "%s", j->queue_behind);
    snprintf(out->preempted_by, sizeof out->preempted_by, "%s", j->preempted_by);
    out->preempted_at = j->preempted_at;
    out->queue_start = j->queue_start;
    for (int i = 0; i < j->n_tasks; i++) {
        if (!strcmp(j->tasks[i].type, "evaluator"))
            continue; /* replicas counts the training cluster: ps and training tasks */
        int w = strcmp(j->tasks[i].type, "ps") != 0;
        out->desired[w]++;
        out->ready[w] += j->tasks[i].state == TASK_RUNNING;
    }
}

coord_event *coord_cluster_take_events(coord_cluster *c, int *n) {
    coord_event *e = c->pending;
    *n = c->n_pending;
    c->pending = NULL;
    c->n_pending = c->cap_pending = 0;
    return e;
}

void coord_log_event(coord_cluster *c, const char *job, const char *type, const char *reason,
                     const char *message, double now) {
    coord_event *e = coord_queue_event(c, COORD_EVENT_LOG, "log", job, now);
    if (!e)
        return;
    snprintf(e->u.log.type, sizeof e->u.log.type, "%s", type);
    snprintf(e->u.log.reason, sizeof e->u.log.reason, "%s", reason);
    snprintf(e->u.log.message, sizeof e->u.log.message, "%s", message);
}

void coord_job_event(coord_cluster *c, coord_job *j, double now) {
    j->last_summary_event = now;
    coord_event *e = coord_queue_event(c, COORD_EVENT_JOB, "job", j->name, now);
    if (e)
        coord_job_summarize(j, &e->u.job);
}

void coord_task_event(coord_cluster *c, coord_job *j, coord_task *t, double now) {
    coord_event *e = coord_queue_event(c, COORD_EVENT_TASK, "task", j->name, now);
    if (e) {
        e->u.task.task = *t;
        e->u.task.lease_seconds = c->lease_seconds;
    }
}

void coord_node_event(coord_cluster *c, coord_node *n, double now) {
    coord_event *e = coord_queue_event(c, COORD_EVENT_NODE, "node", n->job, now);
    if (e)
        e->u.node = *n;
}

/* A metric event for task's report; NULL when out of memory. */
coord_event *coord_metric_event(coord_cluster *c, coord_event_type type, const coord_job *j,
                                const char *task, int64_t step, double time, double now) {
    char *name = pf_strdup(task);
    coord_event *e = name ? coord_queue_event(c, type, "metric", j->name, now) : NULL;
    if (!e) {
        pf_free(name);
        return NULL;
    }
    e->u.metric.task = name;
    e->u.metric.step = step;
    e->u.metric.time = time;
    return e;
}
