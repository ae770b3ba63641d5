/* cluster_admit.c - admission in the state machine (cluster_admit.h): a waiting job's tasks
 * given agents all at once or none, a running job's replacements and added workers, what a
 * job needs, and its agents taken back. Which job is admitted when is cluster_schedule.c's.
 */
#include "coordinator/cluster_admit.h"

#include <stdio.h>
#include <string.h>

#include "coordinator/cluster_conditions.h"
#include "coordinator/cluster_events.h"
#include "coordinator/cluster_queues.h"
#include "coordinator/cluster_serving.h"

/* --- tasks --- */

bool coord_task_is_evaluator(const coord_task *t) {
    return !strcmp(t->type, "evaluator");
}

static const char *task_role(const coord_task *t) {
    return strcmp(t->type, "ps") ? "worker" : "ps";
}

void coord_job_release(coord_cluster *c, coord_job *j, double now) {
    for (int i = 0; i < c->n_nodes; i++) {
        coord_node *n = c->nodes[i];
        if (!strcmp(n->job, j->name) && !coord_serving_node(n)) {
            n->job[0] = '\0';
            n->type[0] = '\0';
            n->dirty = true;
            coord_node_event(c, n, now);
        }
    }
}

/* --- admission --- */

double coord_job_waiting_since_preempted(const coord_job *j, double now) {
    return j->preempted_by[0] && now > j->preempted_at ? now - j->preempted_at : 0;
}

bool coord_node_idle(const coord_node *n, const char *role) {
    return !n->lost && !n->busy && !n->deleted && n->job[0] == '\0' && !strcmp(n->role, role);
}

bool coord_job_waiting(const coord_job *j) {
    return !j->deleted && (j->phase == COORD_CREATED || j->phase == COORD_RESTARTING);
}

/* The first idle agent of `role`, or NULL. */
static coord_node *first_idle(coord_cluster *c, const char *role) {
    for (int i = 0; i < c->n_nodes; i++)
        if (coord_node_idle(c->nodes[i], role))
            return c->nodes[i];
    return NULL;
}

/* Assigns task k of j to agent n in j's generation, as a new incarnation (pending until the
 * agent reports it running). */
static void give_task(coord_job *j, int k, coord_node *n, double now) {
    coord_task *t = &j->tasks[k];
    snprintf(n->job, sizeof n->job, "%s", j->name);
    n->reserved_for[0] = '\0';
    n->generation = j->generation;
    snprintf(n->type, sizeof n->type, "%s", t->type);
    n->index = t->index;
    n->dirty = true;
    snprintf(t->node_id, sizeof t->node_id, "%s", n->id);
    snprintf(t->address, sizeof t->address, "%s", n->address);
    t->state = TASK_PENDING;
    t->incarnation = (uint64_t)(now * 1e6) + (uint64_t)k;
    t->last_heartbeat = n->last_heartbeat;
    t->workers = j->spec.replicas.worker; /* what its assignment's spec says */
}

/* Whether every ps task runs with at least `workers` workers (its agent said so): a worker
 * added live starts only then, so no ps refuses its HELLO as out of range. */
static bool ps_know_workers(const coord_job *j, int workers) {
    for (int k = 0; k < j->n_tasks; k++)
        if (!strcmp(j->tasks[k].type, "ps") && j->tasks[k].workers < workers)
            return false;
    return true;
}

int coord_job_need_ps(const coord_job *j) {
    return j->spec.replicas.ps;
}

int coord_job_need_workers(const coord_job *j) {
    return j->spec.replicas.chief + j->spec.replicas.worker + j->spec.replicas.evaluator;
}

int64_t coord_job_need_memory(coord_job *j) {
    return coord_job_memory(j, coord_job_need_ps(j), coord_job_need_workers(j));
}

void coord_job_set_waiting(coord_cluster *c, coord_job *j, const char *msg, double now) {
    if (!strcmp(j->message, msg))
        return;
    if (j->phase == COORD_CREATED) {
        coord_job_set_phase(c, j, COORD_CREATED, "WaitingForAgents", msg, now);
    } else {
        /* Restarting keeps the reason it restarts for; the message says what it waits for. */
        snprintf(j->message, sizeof j->message, "%s", msg);
        j->dirty = true;
        coord_log_event(c, j->name, "Restarting", "WaitingForAgents", msg, now);
        coord_job_event(c, j, now);
    }
}

bool coord_job_admit(coord_cluster *c, coord_job *j, int have_ps, int have_workers,
                     const coord_job *behind, double now) {
    if (have_ps < coord_job_need_ps(j) || have_workers < coord_job_need_workers(j)) {
        /* Name the tasks that would get no agent: the last ones of each role. */
        char msg[COORD_TEXT_MAX];
        int len = 0;
        if (j->preempted_by[0])
            len = snprintf(msg, sizeof msg, "preempted by job %s; ", j->preempted_by);
        len += behind
                   ? snprintf(msg + len, sizeof msg - (size_t)len,
                              "waiting behind job %s (agents are held for the jobs ahead "
                              "in the queue): missing",
                              behind->name)
                   : snprintf(msg + len, sizeof msg - (size_t)len, "waiting for agents: missing");
        int listed = 0, ps_seen = 0, worker_seen = 0;
        for (int i = 0; i < j->n_tasks && len < (int)sizeof msg - 40; i++) {
            coord_task *t = &j->tasks[i];
            bool ps = !strcmp(task_role(t), "ps");
            int pos = ps ? ps_seen++ : worker_seen++;
            if (pos < (ps ? have_ps : have_workers))
                continue;
            if (listed == 8) {
                len += snprintf(msg + len, sizeof msg - (size_t)len, ", ...");
                break;
            }
            len += snprintf(msg + len, sizeof msg - (size_t)len, "%s %s %d", listed ? "," : "",
                            t->type, t->index);
            listed++;
        }
        coord_job_set_waiting(c, j, msg, now);
        return false;
    }
    j->generation++;
    j->backfilled = false; /* cluster_schedule.c's backfill() says so after this */
    bool resumed = j->preempted_by[0] != '\0'; /* after a preemption: not a restart of its tasks */
    if (resumed)
        j->preempted_seconds += coord_job_waiting_since_preempted(j, now);
    j->preempted_by[0] = '\0';
    bool restart = j->generation > 1;
    coord_job_restart_rate(j, now);
    for (int k = 0; k < j->n_tasks; k++) {
        coord_task *t = &j->tasks[k];
        coord_node *n = first_idle(c, task_role(t)); /* counted above, so found */
        give_task(j, k, n, now);
        if (restart && !resumed)
            t->restarts++;
        t->step = 0;
        t->examples_per_sec = 0;
        coord_node_event(c, n, now);
    }
    if (!j->start_time)
        j->start_time = now;
    char msg[COORD_TEXT_MAX];
    if (restart) {
        snprintf(msg, sizeof msg,
                 "restarted as generation %d on %d agents; ps tasks restore the newest "
                 "checkpoint",
                 j->generation, j->n_tasks);
        coord_job_set_phase(c, j, COORD_RUNNING, "JobRestarted", msg, now);
        /* The steps after that checkpoint are done again: global_step goes back to it. */
        if (j->has_checkpoint && j->checkpoint_step < j->global_step) {
            snprintf(msg, sizeof msg, "the job restarted as generation %d", j->generation);
            coord_job_rolled_back(c, j, "JobRestarted", msg, j->global_step, j->checkpoint_step, -1,
                                  now);
        } else if (!j->has_checkpoint && j->global_step > 0) {
            /* No checkpoint reported (the chief takes one at start, but its report may not
             * have arrived): the ps tasks restore the newest one on disk, if any, else start
             * from their initial values; step 0 is where training goes on at the earliest,
             * and the new chief's reports say where it does. */
            snprintf(msg, sizeof msg,
                     "the job restarted as generation %d with no checkpoint reported (the ps "
                     "tasks restore the newest on disk)",
                     j->generation);
            coord_job_rolled_back(c, j, "JobRestarted", msg, j->global_step, 0, -1, now);
        }
    } else {
        snprintf(msg, sizeof msg, "%d tasks assigned to agents", j->n_tasks);
        coord_job_set_phase(c, j, COORD_RUNNING, "JobRunning", msg, now);
    }
    for (int k = 0; k < j->n_tasks; k++)
        coord_task_event(c, j, &j->tasks[k], now);
    return true;
}

void coord_job_set_message(coord_cluster *c, coord_job *j, const char *msg, double now) {
    if (strcmp(j->message, msg) != 0) {
        snprintf(j->message, sizeof j->message, "%s", msg);
        j->dirty = true;
        coord_job_event(c, j, now);
    }
}

/* Gives task k of running job j agent n: a replacement (a new incarnation of a task that
 * lost its agent) or a worker added live, in the same generation. */
static void give_running_task(coord_cluster *c, coord_job *j, int k, coord_node *n, double now) {
    coord_task *t = &j->tasks[k];
    bool added = t->incarnation == 0; /* added by a live scale-up: never started */
    give_task(j, k, n, now);
    t->restarts += !added;
    t->examples_per_sec = 0;
    coord_job_restart_rate(j, now); /* the membership changes */
    char msg[COORD_TEXT_MAX];
    if (added)
        snprintf(msg, sizeof msg,
                 "%s %d added on agent %s (generation %d unchanged: it pulls the current "
                 "variables and joins at the current step)",
                 t->type, t->index, n->id, j->generation);
    else
        snprintf(msg, sizeof msg,
                 "%s %d replaced on agent %s (generation %d unchanged: no other task "
                 "restarted)",
                 t->type, t->index, n->id, j->generation);
    coord_log_event(c, j->name, "Normal", added ? "TaskAdded" : "TaskReplaced", msg, now);
    snprintf(j->message, sizeof j->message, "%s", msg);
    j->dirty = true;
    coord_node_event(c, n, now);
    coord_task_event(c, j, t, now);
    coord_job_event(c, j, now);
}

/* Whether running job j may take idle agent n for a replacement or an added worker: not one
 * a preemption freed for another job that still waits for it. */
static bool may_take(const coord_cluster *c, const coord_node *n, const coord_job *j) {
    if (!n->reserved_for[0] || !strcmp(n->reserved_for, j->name))
        return true;
    const coord_job *holder = coord_job_find(c, n->reserved_for);
    return !holder || !coord_job_waiting(holder);
}

/* The first idle agent of `role` job j may take (may_take), or NULL. */
static coord_node *take_idle(coord_cluster *c, const char *role, const coord_job *j) {
    for (int i = 0; i < c->n_nodes; i++)
        if (coord_node_idle(c->nodes[i], role) && may_take(c, c->nodes[i], j))
            return c->nodes[i];
    return NULL;
}

void coord_job_replace_tasks(coord_cluster *c, coord_job *j, double now) {
    char msg[COORD_TEXT_MAX];
    int added = 0, top = 0;
    bool short_of_agents = false;
    for (int k = 0; k < j->n_tasks; k++) {
        coord_task *t = &j->tasks[k];
        if (t->state != TASK_PENDING || t->node_id[0])
            continue;
        if (t->incarnation == 0) {
            added++;
            top = t->index + 1 > top ? t->index + 1 : top;
            continue;
        }
        coord_node *n = take_idle(c, task_role(t), j);
        if (!n && strcmp(t->type, "ps") != 0) /* training first: one of its own servers yields */
            n = coord_serving_yield(c, j, t->type, t->index, now);
        if (n) {
            give_running_task(c, j, k, n, now);
        } else {
            snprintf(msg, sizeof msg, "waiting for an agent to replace %s %d", t->type, t->index);
            coord_job_set_message(c, j, msg, now);
            /* Of worker agents: only the chief and the workers are replaced alone. */
            short_of_agents = true;
        }
    }
    if (!added || short_of_agents || !ps_know_workers(j, top))
        return; /* replacements first; the ps tasks learn the new membership first */
    int idle_workers = 0;
    for (int i = 0; i < c->n_nodes; i++)
        idle_workers += coord_node_idle(c->nodes[i], "worker") && may_take(c, c->nodes[i], j);
    if (idle_workers < added) {
        /* Name the added workers that would get no agent: the last ones. */
        int len = snprintf(msg, sizeof msg, "waiting for agents to add workers: missing"), seen = 0;
        for (int k = 0, listed = 0; k < j->n_tasks && len < (int)sizeof msg - 40; k++) {
            coord_task *t = &j->tasks[k];
            if (t->state != TASK_PENDING || t->node_id[0] || t->incarnation ||
                seen++ < idle_workers)
                continue;
            if (listed++ == 8) {
                snprintf(msg + len, sizeof msg - (size_t)len, ", ...");
                break;
            }
            len += snprintf(msg + len, sizeof msg - (size_t)len, "%s worker %d",
                            listed > 1 ? "," : "", t->index);
        }
        coord_job_set_message(c, j, msg, now);
        return;
    }
    for (int k = 0; k < j->n_tasks; k++) {
        coord_task *t = &j->tasks[k];
        if (t->state == TASK_PENDING && !t->node_id[0] && t->incarnation == 0)
            give_running_task(c, j, k, take_idle(c, "worker", j), now); /* counted above */
    }
}

/* --- a job's training done (cluster.c, the evaluator after training) --- */

bool coord_job_training_complete(coord_job *j) {
    coord_condition *k = coord_job_find_condition(j, "TrainingComplete");
    return k && !strcmp(k->status, "True") && !coord_job_finished(j);
}

bool coord_evaluator_busy(const coord_job *j, const coord_task *t) {
    return j->phase == COORD_RUNNING &&
           (t->state == TASK_RUNNING || (t->state == TASK_PENDING && t->node_id[0]));
}
