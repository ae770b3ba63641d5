/* cluster_conditions.c - a job's phase and conditions (part of the state machine of
 * cluster.h): the names of phases and task states, the conditions a client reads, phase
 * changes and the RolledBack condition, each logged as an event.
 */
#include "coordinator/cluster_conditions.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/cluster_events.h"

static const char *const phase_names[] = {"Created",   "Running",   "Restarting",
                                          "Suspended", "Succeeded", "Failed"};
static const char *const task_state_names[] = {"Pending", "Running", "Succeeded",
                                               "Failed",  "Lost",    "Stopped"};

const char *coord_phase_name(coord_phase p) {
    return phase_names[p];
}
const char *coord_task_state_name(coord_task_state s) {
    return task_state_names[s];
}

bool coord_job_finished(const coord_job *j) {
    return j->phase == COORD_SUCCEEDED || j->phase == COORD_FAILED;
}

coord_condition *coord_job_find_condition(coord_job *j, const char *type) {
    for (int i = 0; i < j->n_conds; i++)
        if (!strcmp(j->conds[i].type, type))
            return &j->conds[i];
    return NULL;
}

/* The condition of this type, added (status False) when the job has none; NULL only when
 * the job has COORD_MAX_CONDS already. */
static coord_condition *condition(coord_job *j, const char *type) {
    coord_condition *k = coord_job_find_condition(j, type);
    if (k)
        return k;
    if (j->n_conds == COORD_MAX_CONDS)
        return NULL;
    k = &j->conds[j->n_conds++];
    memset(k, 0, sizeof *k);
    snprintf(k->type, sizeof k->type, "%s", type);
    snprintf(k->status, sizeof k->status, "False");
    return k;
}

void coord_job_set_condition(coord_job *j, const char *type, const char *status, const char *reason,
                             const char *message, double now) {
    coord_condition *k = condition(j, type);
    if (!k)
        return;
    if (strcmp(k->status, status) != 0 || strcmp(k->reason, reason) != 0 || k->time == 0)
        k->time = now;
    snprintf(k->status, sizeof k->status, "%s", status);
    snprintf(k->reason, sizeof k->reason, "%s", reason);
    snprintf(k->message, sizeof k->message, "%s", message);
}

void coord_job_set_phase(coord_cluster *c, coord_job *j, coord_phase phase, const char *reason,
                         const char *message, double now) {
    const char *name = coord_phase_name(phase);
    bool changed = j->phase != phase;
    coord_condition *k = condition(j, name);
    bool same_reason = k && !strcmp(k->reason, reason) && !strcmp(k->message, message);
    j->phase = phase;
    snprintf(j->message, sizeof j->message, "%s", message);
    static const char *const exclusive[] = {"Running", "Restarting", "Suspended"};
    for (size_t i = 0; i < sizeof exclusive / sizeof exclusive[0]; i++) {
        coord_condition *o = NULL;
        for (int q = 0; q < j->n_conds; q++)
            if (!strcmp(j->conds[q].type, exclusive[i]))
                o = &j->conds[q];
        if (o && strcmp(o->type, name) != 0 && !strcmp(o->status, "True")) {
            snprintf(o->status, sizeof o->status, "False");
            o->time = now;
        }
    }
    if (phase != COORD_CREATED || !k || strcmp(k->status, "True") != 0 || !same_reason)
        coord_job_set_condition(j, name, "True", reason, message, now);
    if (phase == COORD_SUCCEEDED || phase == COORD_FAILED) {
        j->completion_time = now;
        for (int i = 0; i < j->n_tasks; i++) /* a finished job's tasks lag nobody */
            j->tasks[i].updates_per_sec = 0;
        for (int i = 0; i < j->n_tasks; i++)
            if (j->tasks[i].has_lag) {
                j->tasks[i].has_lag = false;
                coord_task_event(c, j, &j->tasks[i], now);
            }
    }
    j->dirty = true;
    if (changed || !same_reason) {
        coord_log_event(c, j->name, name, reason, message, now);
        coord_job_event(c, j, now);
    }
}

void coord_job_restart_rate(coord_job *j, double now) {
    coord_rate_restart(&j->rate, j->global_step, now);
    j->steps_per_sec = NAN;
    j->dirty = true;
}

void coord_job_rolled_back_msg(coord_cluster *c, coord_job *j, const char *reason, const char *msg,
                               int64_t to, int64_t reached, double now) {
    coord_job_set_condition(j, "RolledBack", "True", reason, msg, now);
    coord_log_event(c, j->name, "RolledBack", reason, msg, now);
    j->global_step = reached > to ? reached : to;
    coord_job_restart_rate(j, now);
    j->dirty = true;
}

void coord_job_rolled_back(coord_cluster *c, coord_job *j, const char *reason, const char *cause,
                           int64_t from, int64_t to, int64_t reached, double now) {
    char msg[COORD_TEXT_MAX];
    snprintf(msg, sizeof msg,
             "%.120s: every ps rolled back from step %" PRId64 " to checkpoint step %" PRId64,
             cause, from, to);
    coord_job_rolled_back_msg(c, j, reason, msg, to, reached, now);
}
