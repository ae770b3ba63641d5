/* cluster.c - the coordinator's pure state machine (see cluster.h for the design): admission,
 * replacements and restarts, failures, the evaluator after training, jobs, nodes and time.
 * Its files, each calling only those before it: cluster_events.c (the event queue),
 * cluster_index.c (containers and lookups), cluster_conditions.c (phases and conditions),
 * cluster.c, cluster_reports.c (metrics, rollbacks, checkpoints); cluster_json.c above them.
 */
#include "coordinator/cluster.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cluster_conditions.h"
#include "coordinator/cluster_events.h"
#include "coordinator/cluster_queues.h"
#include "coordinator/cluster_serving.h"
#include "psflow/clock.h"
#include "psflow/footprint.h"
#include "psflow/mem.h"

/* --- tasks --- */

static bool is_chief(const coord_job *j, const coord_task *t) {
    return j->spec.replicas.chief ? !strcmp(t->type, "chief")
                                  : !strcmp(t->type, "worker") && t->index == 0;
}

static bool is_evaluator(const coord_task *t) {
    return !strcmp(t->type, "evaluator");
}

static const char *task_role(const coord_task *t) {
    return strcmp(t->type, "ps") ? "worker" : "ps";
}

/* Takes the job's training tasks away from their agents (they stop them on their next
 * heartbeat); its serving tasks keep theirs (coord_serving_stop frees those). */
static void release(coord_cluster *c, coord_job *j, double now) {
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

/* The seconds preempted job j has waited to resume (0 when it is not preempted, or when its
 * preemption's time lies ahead of `now`: a clock set back). */
static double waiting_since_preempted(const coord_job *j, double now) {
    return j->preempted_by[0] && now > j->preempted_at ? now - j->preempted_at : 0;
}

static bool idle(const coord_node *n, const char *role) {
    return !n->lost && !n->busy && !n->deleted && n->job[0] == '\0' && !strcmp(n->role, role);
}

static bool waiting(const coord_job *j) {
    return !j->deleted && (j->phase == COORD_CREATED || j->phase == COORD_RESTARTING);
}

/* The first idle agent of `role`, or NULL. */
static coord_node *first_idle(coord_cluster *c, const char *role) {
    for (int i = 0; i < c->n_nodes; i++)
        if (idle(c->nodes[i], role))
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

/* Caps the worker count j's ps tasks are recorded to run with at j's membership, which may
 * have shrunk (workers removed, a removed one stopped): the count a ps reported before it
 * learned of the change would let a scale-up right after start a worker it refuses. NULL j:
 * nothing. */
static void cap_ps_workers(const coord_cluster *c, coord_job *j) {
    int members = j ? coord_job_membership(c, j) : 0;
    for (int k = 0; j && k < j->n_tasks; k++)
        if (!strcmp(j->tasks[k].type, "ps") && j->tasks[k].workers > members)
            j->tasks[k].workers = members;
}

/* The agents of each role job j takes. */
static int need_ps(const coord_job *j) {
    return j->spec.replicas.ps;
}

static int need_workers(const coord_job *j) {
    return j->spec.replicas.chief + j->spec.replicas.worker + j->spec.replicas.evaluator;
}

/* The memory its tasks count against its queue's quota (coord_job_memory). */
static int64_t need_memory(coord_job *j) {
    return coord_job_memory(j, need_ps(j), need_workers(j));
}

/* Says what waiting job j waits for (msg), when that changed: a Created job's
 * WaitingForAgents condition, a Restarting one's message. */
static void set_waiting(coord_cluster *c, coord_job *j, const char *msg, double now) {
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

/* Gives every task of j an idle agent, or none: j may take have_ps of the idle ps agents and
 * have_workers of the idle worker agents (the others are held for jobs ahead of it, `behind`
 * the first of them, or NULL). Returns whether it was admitted. */
static bool admit(coord_cluster *c, coord_job *j, int have_ps, int have_workers,
                  const coord_job *behind, double now) {
    if (have_ps < need_ps(j) || have_workers < need_workers(j)) {
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
        set_waiting(c, j, msg, now);
        return false;
    }
    j->generation++;
    j->backfilled = false;                     /* backfill() says so after this */
    bool resumed = j->preempted_by[0] != '\0'; /* after a preemption: not a restart of its tasks */
    if (resumed)
        j->preempted_seconds += waiting_since_preempted(j, now);
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

/* Sets the job's message (and tells the clients) when it changed. */
static void set_message(coord_cluster *c, coord_job *j, const char *msg, double now) {
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
    return !holder || !waiting(holder);
}

/* The first idle agent of `role` job j may take (may_take), or NULL. */
static coord_node *take_idle(coord_cluster *c, const char *role, const coord_job *j) {
    for (int i = 0; i < c->n_nodes; i++)
        if (idle(c->nodes[i], role) && may_take(c, c->nodes[i], j))
            return c->nodes[i];
    return NULL;
}

/* Gives each task of a running job that lost its agent (task_failed: pending, no agent) the
 * next idle agent of its role (take_idle), as a new incarnation of the same task in the same
 * generation.
 * Then the workers a live scale-up added: once every ps runs with them, all at once or none,
 * as a job's admission does, so that no added worker runs while another has no agent (the
 * TF_CONFIG of a task lists the workers started so far, coord_job_tf_config). */
static void replace_tasks(coord_cluster *c, coord_job *j, double now) {
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
            set_message(c, j, msg, now);
            /* Of worker agents: only the chief and the workers are replaced alone. */
            short_of_agents = true;
        }
    }
    if (!added || short_of_agents || !ps_know_workers(j, top))
        return; /* replacements first; the ps tasks learn the new membership first */
    int idle_workers = 0;
    for (int i = 0; i < c->n_nodes; i++)
        idle_workers += idle(c->nodes[i], "worker") && may_take(c, c->nodes[i], j);
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
        set_message(c, j, msg, now);
        return;
    }
    for (int k = 0; k < j->n_tasks; k++) {
        coord_task *t = &j->tasks[k];
        if (t->state == TASK_PENDING && !t->node_id[0] && t->incarnation == 0)
            give_running_task(c, j, k, take_idle(c, "worker", j), now); /* counted above */
    }
}

/* A waiting job and its place in the job list, the queue order's last key. */
typedef struct queued {
    coord_job *job;
    int at;
} queued;

/* The queue's order: higher run_policy.priority first, then the earlier submitted, then the
 * job list's order (so qsort's instability cannot reorder equal jobs between rounds). */
static int queue_before(const void *a, const void *b) {
    const queued *qx = a, *qy = b;
    const coord_job *x = qx->job, *y = qy->job;
    if (x->spec.run_policy.priority != y->spec.run_policy.priority)
        return x->spec.run_policy.priority > y->spec.run_policy.priority ? -1 : 1;
    if (x->create_time != y->create_time)
        return x->create_time < y->create_time ? -1 : 1;
    return (qx->at > qy->at) - (qx->at < qy->at);
}

/* Records j's place in the queue (0: admitted). Not stored and no event: every round works
 * it out again (a reload too), the status reads it from memory, and a submission ahead of a
 * thousand waiting jobs would otherwise write a thousand rows and events. What a client
 * watches changes with it anyway: the job's message (admit) and its phase. */
static void set_queue(coord_job *j, int position, const coord_job *behind, coord_wait reason) {
    j->queue_position = position;
    snprintf(j->queue_behind, sizeof j->queue_behind, "%s", behind ? behind->name : "");
    j->queue_reason = reason;
    j->queue_start = 0; /* the first job holding agents gets its estimate after this */
}

/* --- preemption --- */

static bool training_complete(coord_job *j);
static bool evaluator_busy(const coord_job *j, const coord_task *t);

/* Whether running job v may be stopped so that waiting job j gets its agents: v is
 * preemptible and still training (its evaluator's last evaluation is not cut), and either of
 * lower priority in j's queue q, or of another queue that holds more than its quota (what it
 * borrowed is reclaimed, whatever its priority). *borrowed says which. */
static bool preemptible_by(coord_cluster *c, coord_job *v, const coord_job *j, const coord_queue *q,
                           bool *borrowed) {
    if (v == j || v->deleted || v->phase != COORD_RUNNING || training_complete(v) ||
        v->global_step >= v->spec.training.max_steps || !v->spec.run_policy.preemptible ||
        v->drain_until > 0)
        return false; /* finishing (at max_steps), or stopping for another job already */
    const coord_queue *vq = coord_job_queue(c, v);
    *borrowed = vq != q && coord_queue_borrowed(vq);
    return *borrowed || (vq == q && v->spec.run_policy.priority < j->spec.run_policy.priority);
}

/* The steps job j would train again if it stopped now: those since its newest checkpoint. */
static int64_t steps_to_repeat(const coord_job *j) {
    return j->global_step - (j->has_checkpoint ? j->checkpoint_step : 0);
}

/* The preemption of job v ends (drain_* say by whom): its agents are freed (they stop its
 * tasks on their next heartbeat) and it waits in the queue as Restarting, to be admitted
 * again by itself, its ps tasks restoring its newest checkpoint. Not a failure: its restarts,
 * its tasks' restarts and its backoff are untouched, and active_deadline_seconds does not
 * count the wait. `how`: what became of its final checkpoint, for the message ("" when none
 * was asked). */
static void stop_preempted(coord_cluster *c, coord_job *v, const char *how, double now) {
    release(c, v, now);
    v->preemptions++;
    v->preempted_at = now;
    snprintf(v->preempted_by, sizeof v->preempted_by, "%s", v->drain_for);
    v->drain_until = 0;
    char from[48] = "";
    if (v->has_checkpoint)
        snprintf(from, sizeof from, " (step %" PRId64 ")", v->checkpoint_step);
    char msg[COORD_TEXT_MAX];
    if (v->drain_borrowed)
        snprintf(msg, sizeof msg,
                 "preempted by job %s, which reclaims what this job's queue borrowed beyond its "
                 "quota%s; it resumes from its newest checkpoint%s when agents free up",
                 v->drain_for, how, from);
    else
        snprintf(msg, sizeof msg,
                 "preempted by job %s (priority %d > %d)%s; it resumes from its newest "
                 "checkpoint%s when agents free up",
                 v->drain_for, v->drain_priority, v->spec.run_policy.priority, how, from);
    coord_job_set_phase(c, v, COORD_RESTARTING, "Preempted", msg, now);
}

/* Job `by` preempts job v (borrowed: v's queue had borrowed the agents it reclaims; for_quota:
 * v is stopped to bring by's queue, its own, within its quota): v's agents
 * are reserved for `by` and, when the cluster gives a grace (preempt_grace) and v's chief
 * runs, v first takes a final checkpoint: it runs on, its chief asked in its heartbeat answer
 * (checkpoint_now), until that checkpoint is reported or the grace ends (coord_cluster_tick),
 * its agents counted as stopping meanwhile; else it stops at once (stop_preempted). */
static void preempt(coord_cluster *c, coord_job *v, const coord_job *by, bool borrowed,
                    bool for_quota, double now) {
    for (int i = 0; i < c->n_nodes; i++) { /* its agents are `by`'s once they stopped */
        coord_node *n = c->nodes[i];
        if (!strcmp(n->job, v->name) && !coord_serving_node(n))
            snprintf(n->reserved_for, sizeof n->reserved_for, "%s", by->name);
    }
    snprintf(v->drain_for, sizeof v->drain_for, "%s", by->name);
    v->drain_priority = by->spec.run_policy.priority;
    v->drain_borrowed = borrowed;
    v->drain_quota = for_quota;
    v->drain_step = v->global_step;
    v->drain_from = v->has_checkpoint ? v->checkpoint_step : -1;
    char msg[COORD_TEXT_MAX];
    if (borrowed)
        snprintf(msg, sizeof msg,
                 "preempted job %s of queue %s to reclaim the agents it borrowed beyond its "
                 "quota",
                 v->name, pf_job_spec_queue(&v->spec));
    else
        snprintf(msg, sizeof msg, "preempted job %s (priority %d) to take its agents", v->name,
                 v->spec.run_policy.priority);
    coord_log_event(c, by->name, "Normal", borrowed ? "Reclaiming" : "Preempting", msg, now);
    const coord_task *chief = coord_job_chief(v);
    if (!(c->preempt_grace > 0) || !chief || chief->state != TASK_RUNNING) {
        stop_preempted(c, v, "", now);
        return;
    }
    v->drain_until = now + c->preempt_grace;
    snprintf(msg, sizeof msg,
             "preempted by job %s: taking a final checkpoint at step %" PRId64
             " or later before its agents are freed (at most %.0f s)",
             by->name, v->drain_step, c->preempt_grace);
    coord_log_event(c, v->name, "Normal", "Checkpointing", msg, now);
    set_message(c, v, msg, now);
}

/* A preemption waiting for its final checkpoint (coord_job.drain_until) ends: when the
 * checkpoint is reported, or the grace is over; it is called off when its job stopped running
 * or reached max_steps meanwhile (it finishes), or the job preempting it no longer waits (it
 * was cancelled, or started on other agents) - but for a preemption for a quota, which holds
 * while that job runs: its start counted v's share as freed. */
static void drain_check(coord_cluster *c, coord_job *v, double now) {
    const coord_job *by = coord_job_find(c, v->drain_for);
    char how[96];
    /* it reached its end meanwhile: it finishes (its final checkpoint is the job's last) */
    bool ending = v->phase == COORD_RUNNING &&
                  (training_complete(v) || v->global_step >= v->spec.training.max_steps ||
                   (v->has_checkpoint && v->checkpoint_step >= v->spec.training.max_steps));
    /* a preemption for a quota holds while its job waits or runs; one for agents, while its
     * job waits for them */
    bool needed = by && (waiting(by) || (v->drain_quota && by->phase == COORD_RUNNING));
    if (v->deleted || v->phase != COORD_RUNNING || !needed || ending) {
        v->drain_until = 0;
        if (!v->deleted && v->phase == COORD_RUNNING)
            set_message(c, v,
                        ending ? "running on to its end: it reached max_steps before it stopped "
                                 "for the job that preempted it"
                               : "running on: the job that preempted it no longer waits for its "
                                 "agents",
                        now);
    } else if (v->has_checkpoint && v->checkpoint_step > v->drain_from &&
               v->checkpoint_step >= v->drain_step) {
        snprintf(how, sizeof how, " after its final checkpoint at step %" PRId64,
                 v->checkpoint_step);
        stop_preempted(c, v, how, now);
    } else if (now >= v->drain_until) {
        snprintf(how, sizeof how, " with no final checkpoint within %.0f s", c->preempt_grace);
        stop_preempted(c, v, how, now);
    }
}

/* Agents of each role and memory: what a waiting job is short of, or what victims free. */
typedef struct amount {
    int ps, workers;
    int64_t memory;
} amount;

/* A running job that may be stopped, the agents it would free and their memory, and whether
 * its queue borrowed them. */
typedef struct victim {
    coord_job *job;
    int ps, workers;
    int64_t memory;
    bool borrowed;
    int overshoot; /* borrowed: agents stopping it would take below its queue's quota */
} victim;

/* The order victims are taken in: borrowed agents first; then the lowest priority (of a queue
 * that borrowed, its quota is its jobs' of higher priority); then, of a queue that borrowed,
 * those whose stop takes their queue least below its quota, then the later submitted, which
 * went beyond the quota; of j's queue, the least training to repeat, then the later
 * submitted. */
static int victim_cmp(const void *a, const void *b) {
    const victim *vx = a, *vy = b;
    const coord_job *x = vx->job, *y = vy->job;
    if (vx->borrowed != vy->borrowed)
        return vx->borrowed ? -1 : 1;
    if (x->spec.run_policy.priority != y->spec.run_policy.priority)
        return x->spec.run_policy.priority < y->spec.run_policy.priority ? -1 : 1;
    if (vx->overshoot != vy->overshoot)
        return vx->overshoot < vy->overshoot ? -1 : 1;
    int64_t rx = steps_to_repeat(x), ry = steps_to_repeat(y);
    if (!vx->borrowed && rx != ry)
        return rx < ry ? -1 : 1;
    return (x->create_time < y->create_time) - (x->create_time > y->create_time);
}

/* Whether taking victim v still frees agents of a role, or memory, that j is short of (got so
 * far); a borrowed one only while its queue holds more than its quota once the victims taken
 * before it stopped (queue_over). */
static bool victim_helps(const victim *v, amount want, amount got, bool queue_over) {
    if (v->borrowed && !queue_over)
        return false;
    return (got.ps < want.ps && v->ps > 0) || (got.workers < want.workers && v->workers > 0) ||
           (got.memory < want.memory && v->memory > 0);
}

static bool covers(amount got, amount want) {
    return got.ps >= want.ps && got.workers >= want.workers && got.memory >= want.memory;
}

/* Waiting job j needs want.ps ps and want.workers worker agents freed: beyond those idle or
 * stopping (j within its queue's quota), or, own_queue, beyond its queue's quota, and then
 * want.memory bytes of it too (only jobs of lower priority of its own queue may then give
 * them). Stops running jobs it may (preemptible_by) when together they free enough, else
 * none. Victims are taken in victim_cmp's order, each only while it frees something still
 * short (a borrowed one only while its queue still holds more than its quota); then any whose
 * share the others already cover is spared again (latest taken first), so no job is stopped
 * that j does not need. Returns whether it stopped any. */
static bool preempt_for(coord_cluster *c, coord_job *j, amount want, bool own_queue, double now) {
    if (want.ps <= 0 && want.workers <= 0 && want.memory <= 0)
        return false; /* enough agents are idle or about to be: j waits for them */
    victim *v = pf_mallocarray((size_t)c->n_jobs, sizeof *v);
    if (!v)
        return false; /* out of memory: nobody preempted this round */
    const coord_queue *q = coord_job_queue(c, j);
    int n = 0, taken = 0;
    for (int i = 0; i < c->n_jobs; i++)
        if (preemptible_by(c, c->jobs[i], j, q, &v[n].borrowed) && !(own_queue && v[n].borrowed)) {
            v[n].job = c->jobs[i];
            coord_job_agents(c, v[n].job, &v[n].ps, &v[n].workers);
            v[n].memory = coord_job_memory(v[n].job, v[n].ps, v[n].workers);
            const coord_queue *vq = coord_job_queue(c, v[n].job);
            int under_ps = vq->quota_ps < 0 ? 0 : v[n].ps - coord_queue_over_ps(vq),
                under_workers =
                    vq->quota_workers < 0 ? 0 : v[n].workers - coord_queue_over_workers(vq);
            v[n].overshoot = v[n].borrowed ? (under_ps > 0 ? under_ps : 0) +
                                                 (under_workers > 0 ? under_workers : 0)
                                           : 0;
            n++;
        }
    qsort(v, (size_t)n, sizeof *v, victim_cmp);
    amount over[COORD_MAX_QUEUES]; /* what each queue holds beyond its quota */
    for (int i = 0; i < c->n_queues; i++) {
        over[i].ps = coord_queue_over_ps(&c->queues[i]);
        over[i].workers = coord_queue_over_workers(&c->queues[i]);
        over[i].memory = coord_queue_over_memory(&c->queues[i]);
    }
    amount got = {0, 0, 0};
    for (int i = 0; i < n && !covers(got, want); i++) {
        amount *vo = &over[coord_job_queue(c, v[i].job) - c->queues];
        if (victim_helps(&v[i], want, got, vo->ps > 0 || vo->workers > 0 || vo->memory > 0)) {
            vo->ps -= v[i].ps;
            vo->workers -= v[i].workers;
            vo->memory -= v[i].memory;
            v[taken++] = v[i];
            got.ps += v[i].ps;
            got.workers += v[i].workers;
            got.memory += v[i].memory;
        }
    }
    if (!covers(got, want)) {
        pf_free(v);
        return false; /* all of them would not free enough */
    }
    for (int i = taken - 1; i >= 0; i--) { /* spare those the others cover */
        amount less = {got.ps - v[i].ps, got.workers - v[i].workers, got.memory - v[i].memory};
        if (covers(less, want)) {
            got = less;
            v[i].job = NULL;
        }
    }
    for (int i = 0; i < taken; i++)
        if (v[i].job)
            preempt(c, v[i].job, j, v[i].borrowed, own_queue, now);
    pf_free(v);
    return taken > 0;
}

/* --- estimates and backfill --- */

/* An estimate further ahead than this is no estimate (a rate near 0, a deadline of years). */
#define ESTIMATE_HORIZON_SECONDS (366.0 * 86400)

/* When running job j is expected to end: its steps left at its measured rate, never later
 * than the end of its active_deadline_seconds; INFINITY while it has no rate, but for a job
 * that backfilled by its deadline (it ends by then, and that was before the estimate it
 * backfilled against). A deadline alone says when a job ends at the latest, not when: a
 * backfill weighed against it could delay the job it is meant not to delay. */
static double expected_end(coord_job *j, double now) {
    int64_t limit = j->spec.run_policy.active_deadline_seconds;
    double deadline = limit > 0 && j->start_time > 0 && limit < (int64_t)ESTIMATE_HORIZON_SECONDS
                          ? j->start_time + (double)limit + j->preempted_seconds
                          : INFINITY;
    if (!isfinite(j->steps_per_sec) || j->steps_per_sec <= 0)
        return j->backfilled ? deadline : INFINITY;
    int64_t left = (int64_t)j->spec.training.max_steps - j->global_step;
    return fmin(now + (double)(left > 0 ? left : 0) / j->steps_per_sec, deadline);
}

/* The longest waiting job j can hold agents once started: its active_deadline_seconds (it
 * fails then), or its steps left from its newest checkpoint at the rate it last ran at plus
 * its evaluator's grace after the last step, whichever is shorter (*why says which);
 * INFINITY when neither is known (a job that never ran and has no deadline). */
static double expected_run(const coord_job *j, const char **why) {
    double run = INFINITY;
    int64_t limit = j->spec.run_policy.active_deadline_seconds;
    if (limit > 0 && limit < (int64_t)ESTIMATE_HORIZON_SECONDS) {
        run = (double)limit;
        *why = "its active_deadline_seconds";
    }
    int64_t left =
        (int64_t)j->spec.training.max_steps - (j->has_checkpoint ? j->checkpoint_step : 0);
    double at_rate = INFINITY;
    if (isfinite(j->steps_per_sec) && j->steps_per_sec > 0)
        at_rate = (double)(left > 0 ? left : 0) / j->steps_per_sec +
                  (j->spec.replicas.evaluator > 0 ? COORD_EVALUATOR_GRACE_SECONDS : 0);
    if (at_rate < run) {
        run = at_rate;
        *why = "its steps left at the rate it last ran at";
    }
    return run;
}

/* A running job's agents, free again when it is expected to end. */
typedef struct ending {
    double at;
    int ps, workers;
} ending;

static int ending_before(const void *a, const void *b) {
    double x = ((const ending *)a)->at, y = ((const ending *)b)->at;
    return (x > y) - (x < y);
}

/* When waiting job j, short of short_ps ps and short_workers worker agents beyond those idle
 * or stopping, is expected to start: when the running jobs, taken as they are expected to
 * end, have freed enough (the first job that holds agents takes every agent that frees up);
 * `now` when nothing is short; INFINITY when it cannot be told. */
static double expected_start(coord_cluster *c, const coord_job *j, int short_ps, int short_workers,
                             double now) {
    if (short_ps <= 0 && short_workers <= 0)
        return now;
    ending *e = pf_mallocarray((size_t)(c->n_jobs ? c->n_jobs : 1), sizeof *e);
    if (!e)
        return INFINITY;
    int n = 0;
    for (int i = 0; i < c->n_jobs; i++) {
        coord_job *r = c->jobs[i];
        if (r == j || r->deleted || r->phase != COORD_RUNNING || r->drain_until > 0)
            continue; /* a job taking its final checkpoint: its agents count as stopping */
        if (training_complete(r)) {
            /* its training agents are free already (counted as idle or stopping): only its
             * evaluator's agent is left, for its last evaluation */
            e[n] = (ending){now, 0, 0};
            for (int k = 0; k < r->n_tasks; k++)
                e[n].workers += is_evaluator(&r->tasks[k]) && evaluator_busy(r, &r->tasks[k]);
        } else {
            coord_job_agents(c, r, &e[n].ps, &e[n].workers);
            e[n].at = expected_end(r, now);
        }
        n += e[n].ps + e[n].workers > 0;
    }
    qsort(e, (size_t)n, sizeof *e, ending_before);
    double at = INFINITY;
    for (int i = 0; i < n && (short_ps > 0 || short_workers > 0); i++) {
        short_ps -= e[i].ps;
        short_workers -= e[i].workers;
        at = e[i].at;
    }
    pf_free(e);
    return short_ps <= 0 && short_workers <= 0 && at - now < ESTIMATE_HORIZON_SECONDS ? at
                                                                                      : INFINITY;
}

/* Starts waiting job j on agents held for `first` (the first job that holds agents) when the
 * idle ones fit it and it is bound to end before `first` is expected to start, so that it
 * cannot delay it (nor any job behind `first`, which starts after it). */
static bool backfill(coord_cluster *c, coord_job *j, const coord_job *first, int idle_ps,
                     int idle_workers, double now) {
    const char *why = "";
    double run = expected_run(j, &why);
    if (!first || !(first->queue_start > now) || idle_ps < need_ps(j) ||
        idle_workers < need_workers(j) || !(now + run <= first->queue_start))
        return false;
    if (!admit(c, j, idle_ps, idle_workers, NULL, now))
        return false;
    j->backfilled = true;
    char msg[COORD_TEXT_MAX];
    if (snprintf(msg, sizeof msg,
                 "started ahead of job %s on agents held for it: it ends within %.0f s (%s), "
                 "before that job is expected to get the rest of its agents (in %.0f s)",
                 first->name, run, why, first->queue_start - now) >= (int)sizeof msg)
        msg[sizeof msg - 2] = '.'; /* cut: still one line */
    coord_log_event(c, j->name, "Normal", "Backfilled", msg, now);
    return true;
}

/* --- the queue --- */

/* Agents of each role that are free or about to be: idle, and stopping a task no job holds
 * any more (a suspended, preempted or restarting job's, until their next heartbeat). */
typedef struct capacity {
    int idle_ps, idle_workers, stopping_ps, stopping_workers, live_ps, live_workers;
} capacity;

static capacity count_capacity(const coord_cluster *c) {
    capacity k = {0};
    for (int i = 0; i < c->n_jobs; i++) /* a preempted job taking its final checkpoint */
        if (c->jobs[i]->drain_until > 0 && !c->jobs[i]->deleted &&
            c->jobs[i]->phase == COORD_RUNNING) {
            int ps, workers;
            coord_job_agents(c, c->jobs[i], &ps, &workers);
            k.stopping_ps += ps;
            k.stopping_workers += workers;
        }
    for (int i = 0; i < c->n_nodes; i++) {
        const coord_node *nd = c->nodes[i];
        k.idle_ps += idle(nd, "ps");
        k.idle_workers += idle(nd, "worker");
        if (!nd->lost && !nd->deleted) {
            bool stopping = nd->busy && nd->job[0] == '\0';
            bool ps = !strcmp(nd->role, "ps"), worker = !strcmp(nd->role, "worker");
            k.live_ps += ps;
            k.live_workers += worker;
            k.stopping_ps += stopping && ps;
            k.stopping_workers += stopping && worker;
        }
    }
    return k;
}

/* What waiting job j, of queue q, needs beyond q's quota of one kind: what q's running jobs
 * hold, what is held for its jobs ahead of j, and j's own, less the quota (0 or less: within
 * it; quota -1: no limit). */
static int64_t beyond_quota(int64_t used, int64_t held, int64_t need, int64_t quota) {
    return quota < 0 ? 0 : used + held + need - quota;
}

static amount beyond(const coord_queue *q, coord_job *j) {
    return (amount){
        (int)beyond_quota(q->used_ps, q->held_ps, need_ps(j), q->quota_ps),
        (int)beyond_quota(q->used_workers, q->held_workers, need_workers(j), q->quota_workers),
        q->quota_memory < 0
            ? 0
            : beyond_quota(q->used_memory, q->held_memory, need_memory(j), q->quota_memory)};
}

static bool within_quota(const coord_queue *q, coord_job *j) {
    amount b = beyond(q, j);
    return b.ps <= 0 && b.workers <= 0 && b.memory <= 0;
}

/* Waiting job j is beyond its queue q's quota: when it is first in line, it may stop jobs of
 * lower priority of q to come within it (their agents are then reserved for it). Returns
 * whether it stopped any. */
static bool preempt_within_queue(coord_cluster *c, coord_job *j, const coord_queue *q, double now) {
    return preempt_for(c, j, beyond(q, j), true, now);
}

/* "2", "4.0 GiB" or "no limit": a quota as a message says it. */
static const char *quota_text(int quota, char *buf, size_t cap) {
    if (quota < 0)
        return "no limit";
    snprintf(buf, cap, "%d", quota);
    return buf;
}

static const char *memory_text(int64_t bytes, char *buf, size_t cap) {
    if (bytes < 0)
        return "no limit";
    pf_footprint_format_bytes(bytes, buf, cap);
    return buf;
}

/* Says that waiting job j waits for its queue q's quota (the quota, not what the queue
 * uses: a message that changed with every job of the queue would send an event per waiting
 * job each time). */
static void wait_for_quota(coord_cluster *c, coord_job *j, const coord_queue *q, double now) {
    char msg[COORD_TEXT_MAX], qp[12], qw[12], qm[32] = "", jm[32] = "", text[16];
    int len = 0;
    if (j->preempted_by[0])
        len = snprintf(msg, sizeof msg, "preempted by job %s; ", j->preempted_by);
    if (q->quota_memory >= 0) { /* memory is named where the queue limits it */
        snprintf(qm, sizeof qm, ", memory: %s", memory_text(q->quota_memory, text, sizeof text));
        snprintf(jm, sizeof jm, " and %s", memory_text(need_memory(j), text, sizeof text));
    }
    snprintf(msg + len, sizeof msg - (size_t)len,
             "waiting for the quota of queue %s (ps: %s, workers: %s%s), which its other jobs "
             "hold; this job needs %d ps%s %d workers%s: %s",
             q->name, quota_text(q->quota_ps, qp, sizeof qp),
             quota_text(q->quota_workers, qw, sizeof qw), qm, need_ps(j), jm[0] ? "," : " and",
             need_workers(j), jm,
             j->spec.run_policy.preemptible
                 ? "no idle agent is left to borrow"
                 : "a job that is not preemptible never borrows beyond its quota");
    set_waiting(c, j, msg, now);
}

/* A queue's share of the cluster for its weight: the agents its jobs hold per unit. */
static double share(const coord_queue *q) {
    return (double)(q->used_ps + q->used_workers) / q->weight;
}

/* Starts the jobs over their queue's quota (borrowers[0..n), in queue order) on the idle
 * agents no waiting job within its quota holds (k, less held_*): each time the job of the
 * queue holding the least of the cluster for its weight among those that fit, the first in
 * queue order of that queue. A job that is not preemptible never borrows (what is borrowed
 * must be given back). O(n) per job started. */
static void admit_borrowers(coord_cluster *c, queued *borrowers, int n, capacity *k, int held_ps,
                            int held_workers, double now) {
    for (;;) {
        int best = -1;
        double best_share = 0;
        for (int b = 0; b < n; b++) {
            coord_job *j = borrowers[b].job;
            if (!j || !j->spec.run_policy.preemptible || k->idle_ps - held_ps < need_ps(j) ||
                k->idle_workers - held_workers < need_workers(j))
                continue;
            double s = share(coord_job_queue(c, j));
            if (best < 0 || s < best_share) {
                best = b;
                best_share = s;
            }
        }
        if (best < 0)
            break;
        coord_job *j = borrowers[best].job;
        coord_queue *q = coord_job_queue(c, j);
        borrowers[best].job = NULL;
        if (!admit(c, j, k->idle_ps - held_ps, k->idle_workers - held_workers, NULL, now))
            continue; /* counted above: not reached */
        k->idle_ps -= need_ps(j);
        k->idle_workers -= need_workers(j);
        q->used_ps += need_ps(j);
        q->used_workers += need_workers(j);
        q->used_memory += need_memory(j);
        set_queue(j, 0, NULL, COORD_WAIT_CAPACITY);
        char msg[COORD_TEXT_MAX], qp[12], qw[12], qm[48] = "", um[16], text[16];
        if (q->quota_memory >= 0)
            snprintf(qm, sizeof qm, ", %s of memory of %s",
                     memory_text(q->used_memory, um, sizeof um),
                     memory_text(q->quota_memory, text, sizeof text));
        snprintf(msg, sizeof msg,
                 "borrowing: queue %s now holds %d ps of %s and %d workers of %s%s; a job of "
                 "another queue that needs these idle agents takes them back",
                 q->name, q->used_ps, quota_text(q->quota_ps, qp, sizeof qp), q->used_workers,
                 quota_text(q->quota_workers, qw, sizeof qw), qm);
        coord_log_event(c, j->name, "Normal", "Borrowing", msg, now);
    }
    for (int b = 0; b < n; b++)
        if (borrowers[b].job)
            wait_for_quota(c, borrowers[b].job, coord_job_queue(c, borrowers[b].job), now);
}

/* Walks the waiting jobs in queue order, admitting those that fit. The agents a waiting job
 * needs are held for it: a job behind it starts only on agents left over after every job
 * ahead took what it needs, so no later job can take an agent that an earlier (or
 * higher-priority) one waits for, and a large job is never starved by small ones. A job that
 * needs more agents of a role than the cluster has at all holds none (it could not start
 * anyway); nor does one over its queue's quota, which may start only on what is left when the
 * walk is done (admit_borrowers). The first job that holds agents may preempt (preempt_for);
 * returns whether it did (the queue is walked again). *spare_workers: the idle worker agents
 * no waiting job holds. borrowers: room for n. */
static bool admit_queue(coord_cluster *c, queued *queue, int n, queued *borrowers,
                        int *spare_workers, double now) {
    capacity k = count_capacity(c);
    coord_queues_measure(c);
    int held_ps = 0, held_workers = 0, n_borrowers = 0;
    const coord_job *first_holder = NULL;
    for (int q = 0; q < n; q++) {
        coord_job *j = queue[q].job;
        coord_queue *jq = coord_job_queue(c, j);
        bool too_large = need_ps(j) > k.live_ps || need_workers(j) > k.live_workers;
        if (!too_large && !within_quota(jq, j)) {
            /* borrowing first; else, first in line, lower priority of its queue gives way */
            bool may_borrow = j->spec.run_policy.preemptible && k.idle_ps - held_ps >= need_ps(j) &&
                              k.idle_workers - held_workers >= need_workers(j);
            if (!may_borrow && !first_holder && preempt_within_queue(c, j, jq, now))
                return true;
            set_queue(j, 1, NULL, j->preempted_by[0] ? COORD_WAIT_PREEMPTED : COORD_WAIT_QUOTA);
            borrowers[n_borrowers++] = queue[q];
            continue;
        }
        int have_ps = k.idle_ps - held_ps, have_workers = k.idle_workers - held_workers;
        have_ps = have_ps > 0 ? have_ps : 0;
        have_workers = have_workers > 0 ? have_workers : 0;
        /* agents held for jobs ahead are among those it lacks */
        bool held_back =
            first_holder && ((have_ps < need_ps(j) && have_ps < k.idle_ps) ||
                             (have_workers < need_workers(j) && have_workers < k.idle_workers));
        bool fits = have_ps >= need_ps(j) && have_workers >= need_workers(j);
        if ((!fits && held_back && backfill(c, j, first_holder, k.idle_ps, k.idle_workers, now)) ||
            admit(c, j, have_ps, have_workers, held_back ? first_holder : NULL, now)) {
            k.idle_ps -= need_ps(j);
            k.idle_workers -= need_workers(j);
            jq->used_ps += need_ps(j);
            jq->used_workers += need_workers(j);
            jq->used_memory += need_memory(j);
            set_queue(j, 0, NULL, COORD_WAIT_CAPACITY);
            continue;
        }
        coord_wait why = j->preempted_by[0] ? COORD_WAIT_PREEMPTED
                         : too_large        ? COORD_WAIT_TOO_SMALL
                         : held_back        ? COORD_WAIT_RESERVED
                                            : COORD_WAIT_CAPACITY;
        set_queue(j, 1, held_back ? first_holder : NULL, why); /* numbered below */
        if (too_large)
            continue; /* cannot start on this cluster: holds nothing */
        if (!first_holder &&
            preempt_for(c, j,
                        (amount){need_ps(j) - have_ps - k.stopping_ps,
                                 need_workers(j) - have_workers - k.stopping_workers, 0},
                        false, now))
            return true;
        held_ps += need_ps(j);
        held_workers += need_workers(j);
        jq->held_ps += need_ps(j);
        jq->held_workers += need_workers(j);
        jq->held_memory += jq->quota_memory < 0 ? 0 : need_memory(j);
        if (!first_holder) {
            first_holder = j;
            double at = expected_start(c, j, need_ps(j) - have_ps - k.stopping_ps,
                                       need_workers(j) - have_workers - k.stopping_workers, now);
            j->queue_start = isfinite(at) ? at : 0;
        }
    }
    admit_borrowers(c, borrowers, n_borrowers, &k, held_ps, held_workers, now);
    for (int q = 0, position = 0; q < n; q++)
        if (queue[q].job->queue_position)
            queue[q].job->queue_position = ++position;
    *spare_workers = k.idle_workers - held_workers;
    return false;
}

/* Running jobs first (a replacement, or a worker added live, keeps going a job that holds
 * agents already; agents a preemption freed stay reserved for the job that preempted,
 * take_idle), then the waiting ones in queue order (admit_queue), again after a preemption
 * made some wait. */
static void admit_all(coord_cluster *c, double now) {
    double start = pf_clock_now();
    for (int i = 0; i < c->n_jobs; i++)
        if (c->jobs[i]->phase == COORD_RUNNING && !c->jobs[i]->deleted)
            replace_tasks(c, c->jobs[i], now);
    size_t room = (size_t)(c->n_jobs ? c->n_jobs : 1);
    queued *queue = pf_mallocarray(2 * room, sizeof *queue);
    if (!queue)
        return; /* out of memory: nothing admitted this round */
    int spare_workers = 0;
    /* each walk that preempts stops a running job, or has it take its final checkpoint (not
     * preemptible again): at most n_jobs + 1 walks */
    for (int walk = 0; walk <= c->n_jobs; walk++) {
        int n = 0;
        for (int i = 0; i < c->n_jobs; i++)
            if (waiting(c->jobs[i]))
                queue[n++] = (queued){c->jobs[i], i};
            else if (c->jobs[i]->queue_position)
                set_queue(c->jobs[i], 0, NULL, COORD_WAIT_CAPACITY);
        qsort(queue, (size_t)n, sizeof *queue, queue_before); /* every heartbeat: n log n */
        if (!admit_queue(c, queue, n, queue + room, &spare_workers, now))
            break;
    }
    pf_free(queue);
    coord_serving_place(c, spare_workers, now); /* what no waiting job holds */
    double took = pf_clock_now() - start;
    c->round_seconds[c->rounds++ % COORD_ROUND_SAMPLES] = took;
    c->round_seconds_sum += took;
}

/* --- failures --- */

/* A job ended (Succeeded, or Failed: cancelled too): its agents are freed, and no task of it
 * stays Pending or Running: a task running when its job Succeeded served it to the end
 * (Succeeded, the ps tasks); any other is Stopped (its agent stops it). */
static void finish(coord_cluster *c, coord_job *j, coord_phase phase, const char *reason,
                   const char *message, double now) {
    release(c, j, now);
    if (phase == COORD_FAILED)
        coord_serving_stop(c, j, now);
    for (int i = 0; i < j->n_tasks; i++) {
        coord_task *t = &j->tasks[i];
        if (t->state != TASK_PENDING && t->state != TASK_RUNNING)
            continue;
        t->state =
            phase == COORD_SUCCEEDED && t->state == TASK_RUNNING ? TASK_SUCCEEDED : TASK_STOPPED;
        j->dirty = true;
        coord_task_event(c, j, t, now);
    }
    coord_job_set_phase(c, j, phase, reason, message, now);
}

/* Takes task t's agent off it (the agent stops what it runs on its next heartbeat). */
static void free_task_agent(coord_cluster *c, coord_job *j, coord_task *t, double now) {
    for (int i = 0; i < c->n_nodes; i++) {
        coord_node *n = c->nodes[i];
        if (!strcmp(n->job, j->name) && !strcmp(n->type, t->type) && n->index == t->index) {
            n->job[0] = n->type[0] = '\0';
            n->dirty = true;
            coord_node_event(c, n, now);
        }
    }
}

/* --- the evaluator after training ---
 * When the chief succeeds while the evaluator still runs, the job stays Running (condition
 * TrainingComplete) until the evaluator has evaluated the final checkpoint and exited, so a
 * Succeeded job carries its final eval_step / eval_accuracy. The training tasks' agents are
 * freed at once; COORD_EVALUATOR_GRACE_SECONDS bounds the wait. */

static bool training_complete(coord_job *j) {
    coord_condition *k = coord_job_find_condition(j, "TrainingComplete");
    return k && !strcmp(k->status, "True") && !coord_job_finished(j);
}

/* Whether evaluator task t is (or is about to be) evaluating on an agent. */
static bool evaluator_busy(const coord_job *j, const coord_task *t) {
    return j->phase == COORD_RUNNING &&
           (t->state == TASK_RUNNING || (t->state == TASK_PENDING && t->node_id[0]));
}

static void await_evaluator(coord_cluster *c, coord_job *j, const char *done, double now) {
    coord_job_set_condition(j, "TrainingComplete", "True", "ChiefSucceeded", done, now);
    coord_log_event(c, j->name, "TrainingComplete", "ChiefSucceeded", done, now);
    snprintf(j->message, sizeof j->message,
             "training done; waiting up to %d s for the evaluator's final evaluation",
             COORD_EVALUATOR_GRACE_SECONDS);
    j->dirty = true;
    coord_job_event(c, j, now);
}

/* The evaluator ended (or gave up): a job whose training is complete succeeds now. */
static void evaluator_done(coord_cluster *c, coord_job *j, double now) {
    if (!training_complete(j))
        return;
    char msg[COORD_TEXT_MAX];
    snprintf(msg, sizeof msg, "%s", coord_job_find_condition(j, "TrainingComplete")->message);
    finish(c, j, COORD_SUCCEEDED, "JobSucceeded", msg, now);
}

/* Whether a lost or failed task is replaced on its own while the others carry on: a
 * training task, the chief included. It holds no state (the ps tasks do); its replacement
 * pulls the current variables and joins at the current step, a new incarnation of the same
 * task. A replaced chief takes up the checkpoints, evaluations and rollbacks from there: the
 * ps tasks take CHECKPOINT and RESTORE from the newest chief incarnation only, so one that
 * still runs unseen (its agent lost) cannot interfere. A RESTORE the lost chief left half
 * done (some ps tasks restored, others not) is repaired by its replacement: a sync chief that
 * finds the ps tasks more than a step apart rolls them all back to the newest complete
 * checkpoint before it trains (worker/trainer.c, realign). The ps tasks hold the variables:
 * losing one restarts the gang. */
static bool replaced_alone(const coord_job *j, const coord_task *t) {
    if (strcmp(t->type, "worker") != 0 && strcmp(t->type, "chief") != 0)
        return false;
    /* A chief lost after the final checkpoint: the ps tasks have ended or are ending, so a
     * replacement could reach none; the gang restarts, restores the final checkpoint and the
     * new chief reports the result. */
    return !(is_chief(j, t) && j->has_checkpoint &&
             j->checkpoint_step >= j->spec.training.max_steps);
}

/* A task failed (exit_code) or its agent was lost: replace it alone, restart the gang or fail
 * the job. */
static void task_failed(coord_cluster *c, coord_job *j, coord_task *t, int exit_code, bool lost,
                        const char *why, double now) {
    if (coord_job_finished(j) || j->phase == COORD_SUSPENDED)
        return;
    if (is_evaluator(t)) { /* it never trains: the job carries on without evaluations */
        char msg[COORD_TEXT_MAX];
        snprintf(msg, sizeof msg, "evaluator %d %s; training carries on without evaluations",
                 t->index, why);
        t->state = lost ? TASK_LOST : TASK_FAILED;
        free_task_agent(c, j, t, now); /* free for other work */
        coord_log_event(c, j->name, "Warning", lost ? "EvaluatorLost" : "EvaluatorFailed", msg,
                        now);
        coord_task_event(c, j, t, now);
        evaluator_done(c, j, now);
        return;
    }
    if (training_complete(j))
        return; /* training is over: only the evaluator still runs */
    const pf_run_policy_spec *rp = &j->spec.run_policy;
    bool retryable;
    switch (rp->restart_policy) {
    case PF_RESTART_NEVER:
        retryable = false;
        break;
    case PF_RESTART_EXIT_CODE: /* TFJob: 1-127 permanent, 128-255 (signals) retryable */
        retryable = lost || exit_code >= 128;
        break;
    default:
        retryable = true;
    }
    const char *reason = lost ? "TaskLost" : "TaskFailed";
    char msg[COORD_TEXT_MAX];
    if (retryable && replaced_alone(j, t) && j->phase == COORD_RUNNING &&
        t->restarts < rp->backoff_limit) {
        /* Pending without an agent: admit_all gives it the next idle worker agent. */
        free_task_agent(c, j, t, now);
        t->state = TASK_PENDING;
        t->node_id[0] = '\0';
        snprintf(msg, sizeof msg,
                 "%s %d %s; replacing it alone (replacement %d of at most %d), the other tasks "
                 "carry on",
                 t->type, t->index, why, t->restarts + 1, rp->backoff_limit);
        coord_log_event(c, j->name, "Warning", reason, msg, now);
        snprintf(j->message, sizeof j->message, "%s", msg);
        j->dirty = true;
        coord_task_event(c, j, t, now);
        coord_job_event(c, j, now);
        return;
    }
    if (retryable && j->restarts < rp->backoff_limit) {
        j->restarts++;
        snprintf(msg, sizeof msg, "%s %d %s; restarting the job (restart %d of at most %d)",
                 t->type, t->index, why, j->restarts, rp->backoff_limit);
        release(c, j, now);
        coord_job_set_phase(c, j, COORD_RESTARTING, reason, msg, now);
        return;
    }
    if (retryable)
        snprintf(msg, sizeof msg, "%s %d %s; backoff limit %d reached", t->type, t->index, why,
                 rp->backoff_limit);
    else
        snprintf(msg, sizeof msg, "%s %d %s; restart policy does not restart it", t->type, t->index,
                 why);
    finish(c, j, COORD_FAILED, retryable ? "BackoffLimitExceeded" : reason, msg, now);
}

/* --- jobs --- */

/* Checks that spec's queue exists and, when it names a priority class, that its queue has
 * it: the class's value becomes its priority (a priority given beside it must be that value;
 * 0, the default, reads as none given). */
static pf_status resolve_queue(coord_cluster *c, pf_job_spec *spec, pf_error *err) {
    const coord_queue *q = &c->queues[0];
    if (spec->run_policy.queue[0] && !(q = coord_queue_find(c, spec->run_policy.queue)))
        return pf_error_set(err, PF_ERR_UNSUPPORTED, "/run_policy/queue",
                            "/run_policy/queue: there is no queue '%s' (GET /api/v1/queues lists "
                            "them; PUT /api/v1/queues/%s creates it)",
                            spec->run_policy.queue, spec->run_policy.queue);
    const char *name = spec->run_policy.priority_class;
    if (!name[0])
        return PF_OK;
    const coord_priority_class *pc = coord_queue_class(q, name);
    if (!pc) {
        char known[COORD_TEXT_MAX / 2] = "none";
        size_t len = 0;
        for (int i = 0; i < q->n_classes && len < sizeof known; i++)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "",
                                    q->classes[i].name);
        return pf_error_set(err, PF_ERR_UNSUPPORTED, "/run_policy/priority_class",
                            "/run_policy/priority_class: queue %s has no priority class '%s' "
                            "(its classes: %s; PUT /api/v1/queues/%s sets them)",
                            q->name, name, known, q->name);
    }
    if (spec->run_policy.priority != 0 && spec->run_policy.priority != pc->value)
        return pf_error_set(err, PF_ERR_UNSUPPORTED, "/run_policy/priority",
                            "/run_policy/priority: %d, but priority class %s of queue %s gives "
                            "%d: leave priority out",
                            spec->run_policy.priority, name, q->name, pc->value);
    spec->run_policy.priority = pc->value;
    return PF_OK;
}

pf_status coord_job_submit(coord_cluster *c, pf_job_spec *spec, double now, coord_job **out,
                           int *created, pf_error *err) {
    *out = NULL;
    *created = 0;
    coord_job *old = coord_job_find(c, spec->name);
    if (old && !strcmp(old->spec.run_policy.priority_class, spec->run_policy.priority_class) &&
        spec->run_policy.priority_class[0] && spec->run_policy.priority == 0)
        spec->run_policy.priority = old->spec.run_policy.priority; /* a retry: as it was */
    pf_status st = old ? PF_OK : resolve_queue(c, spec, err);
    if (st != PF_OK)
        return st;
    char *json = pf_job_spec_to_json(spec);
    if (!json)
        return PF_ERR_NOMEM;
    if (old) {
        bool same = !strcmp(old->spec_json, json);
        pf_free(json);
        if (!same)
            return pf_error_set(err, PF_ERR_INVALID, "/name",
                                "a job named '%s' exists with a different spec; pick another "
                                "name or delete it first",
                                spec->name);
        *out = old;
        return PF_OK;
    }
    coord_job *j = pf_calloc(1, sizeof *j);
    if (!j) {
        pf_free(json);
        return PF_ERR_NOMEM;
    }
    snprintf(j->name, sizeof j->name, "%s", spec->name);
    j->spec = *spec;
    j->spec_json = json;
    j->create_time = now; /* before adopting: it orders the jobs */
    if (coord_job_make_tasks(j) != PF_OK || coord_serving_make(j) != PF_OK ||
        coord_cluster_adopt_job(c, j) != PF_OK) {
        memset(&j->spec, 0, sizeof j->spec); /* the caller still owns spec */
        coord_job_free(j);
        return PF_ERR_NOMEM;
    }
    memset(spec, 0, sizeof *spec); /* stolen */
    j->loss = j->accuracy = j->test_loss = j->eval_loss = j->eval_accuracy = NAN;
    j->test_auc = j->test_calibration = j->bayes_auc = NAN;
    j->steps_per_sec = NAN; /* unknown until measured (cluster_rate.h) */
    j->eval_step = -1;
    j->phase = COORD_CREATED;
    j->dirty = true;
    char msg[COORD_TEXT_MAX];
    snprintf(msg, sizeof msg, "job %s created", j->name);
    coord_job_set_condition(j, "Created", "True", "JobCreated", msg, now);
    snprintf(j->message, sizeof j->message, "%s", msg);
    coord_log_event(c, j->name, "Created", "JobCreated", msg, now);
    coord_job_event(c, j, now);
    admit_all(c, now); /* in its place in the queue */
    *out = j;
    *created = 1;
    return PF_OK;
}

void coord_job_cancel(coord_cluster *c, coord_job *j, double now) {
    if (coord_job_finished(j))
        return;
    finish(c, j, COORD_FAILED, "Cancelled", "cancelled by request", now);
    admit_all(c, now); /* agents its tasks never started on are idle at once */
}

void coord_job_delete(coord_cluster *c, coord_job *j, double now) {
    coord_job_cancel(c, j, now);
    coord_serving_stop(c, j, now); /* a succeeded job's too */
    j->deleted = true;
    j->dirty = true;
    coord_log_event(c, j->name, "Deleted", "JobDeleted", "job record deleted", now);
}

/* Resizes a running job's worker tasks to `workers` in place: the other tasks keep their
 * agents and state; a removed worker's agent is freed (it stops the task), an added one is
 * pending without an agent until replace_tasks gives it one. */
static pf_status resize_workers(coord_cluster *c, coord_job *j, int old, int workers, double now) {
    int n = j->n_tasks - old + workers;
    coord_task *t = pf_calloc((size_t)n, sizeof *t);
    if (!t)
        return PF_ERR_NOMEM;
    int k = 0;
    bool added = false; /* the new workers go after the others, before the evaluator */
    for (int i = 0; i < j->n_tasks; i++) {
        coord_task *o = &j->tasks[i];
        bool worker = !strcmp(o->type, "worker");
        if (worker && o->index >= workers) {
            for (int q = 0; q < c->n_nodes && o->node_id[0]; q++)
                if (!strcmp(c->nodes[q]->id, o->node_id) && c->nodes[q]->busy)
                    snprintf(c->nodes[q]->draining, sizeof c->nodes[q]->draining, "%s", j->name);
            free_task_agent(c, j, o, now);
            continue;
        }
        if (!strcmp(o->type, "evaluator") && !added) {
            for (int w = old; w < workers; w++, k++)
                snprintf(t[k].type, sizeof t[k].type, "worker"), t[k].index = w;
            added = true;
        }
        t[k++] = *o;
    }
    for (int w = old; w < workers && !added; w++, k++)
        snprintf(t[k].type, sizeof t[k].type, "worker"), t[k].index = w;
    pf_free(j->tasks);
    j->tasks = t;
    j->n_tasks = n;
    coord_job_restart_rate(j, now);
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].type, "worker") && t[i].index >= old)
            coord_task_event(c, j, &t[i], now);
    cap_ps_workers(c, j);
    return PF_OK;
}

/* PF_OK when job j may still change (PATCH): not finished, and its training not over (added
 * workers would never start, and a suspended job would start training again). */
static pf_status check_changeable(coord_job *j, pf_error *err) {
    if (coord_job_finished(j))
        return pf_error_set(err, PF_ERR_INVALID, "", "job %s has finished (%s)", j->name,
                            coord_phase_name(j->phase));
    if (training_complete(j))
        return pf_error_set(err, PF_ERR_INVALID, "",
                            "job %s has finished training (TrainingComplete); only its evaluator "
                            "still runs",
                            j->name);
    return PF_OK;
}

pf_status coord_job_patch(coord_cluster *c, coord_job *j, int new_workers, int suspend, double now,
                          pf_error *err) {
    pf_status st = check_changeable(j, err);
    if (st != PF_OK)
        return st;
    if (new_workers > 0 && new_workers != j->spec.replicas.worker) {
        /* Only a sync job aggregates gradients. An async job's replicas_to_aggregate is its
         * worker count (the parser's effective value, not part of its spec text) and follows
         * it, so the job reloaded from its spec text is the same job. */
        bool sync = j->spec.training.mode == PF_MODE_SYNC;
        /* replicas_to_aggregate below the worker count (backup workers) is fixed; equal to it,
         * it follows the count (below) */
        bool fixed = sync && j->spec.training.replicas_to_aggregate < j->spec.replicas.worker;
        if (new_workers > PF_MAX_REPLICAS ||
            (fixed && new_workers < j->spec.training.replicas_to_aggregate))
            return pf_error_set(err, PF_ERR_INVALID, "/replicas/worker",
                                "/replicas/worker: must be between training.replicas_to_aggregate "
                                "(%d) and %d",
                                fixed ? j->spec.training.replicas_to_aggregate : 1,
                                PF_MAX_REPLICAS);
        int old = j->spec.replicas.worker, old_aggregate = j->spec.training.replicas_to_aggregate;
        /* A running job changes live. A sync job that aggregates every worker's gradient
         * (replicas_to_aggregate == replicas.worker, the parser's default) keeps doing so: its
         * replicas_to_aggregate follows the new count; one with backup workers keeps its
         * replicas_to_aggregate. */
        bool live = j->phase == COORD_RUNNING;
        j->spec.replicas.worker = new_workers;
        if (!sync || old_aggregate == old)
            j->spec.training.replicas_to_aggregate = new_workers;
        char *json = pf_job_spec_to_json(&j->spec);
        if (!json || (live ? resize_workers(c, j, old, new_workers, now)
                           : coord_job_make_tasks(j)) != PF_OK) {
            pf_free(json);
            j->spec.replicas.worker = old;
            j->spec.training.replicas_to_aggregate = old_aggregate;
            return PF_ERR_NOMEM;
        }
        pf_free(j->spec_json);
        j->spec_json = json;
        char msg[COORD_TEXT_MAX];
        if (live) {
            snprintf(msg, sizeof msg,
                     "workers %d -> %d live (generation %d unchanged, no restart): %s; a sync "
                     "step aggregates %d gradients",
                     old, new_workers, j->generation,
                     new_workers > old ? "the new workers join at the current step"
                                       : "the highest-numbered workers stop",
                     j->spec.training.replicas_to_aggregate);
            coord_log_event(c, j->name, "Scaled",
                            new_workers > old ? "WorkersAdded" : "WorkersRemoved", msg, now);
            snprintf(j->message, sizeof j->message, "%s", msg);
            j->dirty = true;
            coord_job_event(c, j, now);
        } else {
            snprintf(msg, sizeof msg, "workers %d -> %d; the job starts with them", old,
                     new_workers);
            release(c, j, now);
            coord_log_event(c, j->name, "Scaled", "WorkersChanged", msg, now);
            if (j->phase == COORD_RESTARTING)
                coord_job_set_phase(c, j, COORD_RESTARTING, "WorkersChanged", msg, now);
            j->dirty = true;
        }
    }
    if (suspend == 1 && j->phase != COORD_SUSPENDED) {
        if (j->preempted_by[0]) { /* suspended while it waits to resume: no longer preempted */
            j->preempted_seconds += waiting_since_preempted(j, now);
            j->preempted_by[0] = '\0';
        }
        release(c, j, now);
        coord_job_set_phase(c, j, COORD_SUSPENDED, "JobSuspended", "suspended by request", now);
    } else if (suspend == 0 && j->phase == COORD_SUSPENDED) {
        coord_job_set_condition(j, "Suspended", "False", "JobResumed", "resumed by request", now);
        coord_job_set_phase(c, j, j->start_time ? COORD_RESTARTING : COORD_CREATED, "JobResumed",
                            "resumed by request", now);
    }
    admit_all(c, now);
    return PF_OK;
}

pf_status coord_job_set_ps(coord_cluster *c, coord_job *j, pf_job_spec *spec, double now,
                           pf_error *err) {
    pf_status st = check_changeable(j, err);
    if (st != PF_OK)
        return st;
    int old = j->spec.replicas.ps;
    char *json = pf_job_spec_to_json(spec);
    if (!json)
        return PF_ERR_NOMEM;
    pf_job_spec prev = j->spec;
    j->spec = *spec;
    if (coord_job_make_tasks(j) != PF_OK) {
        j->spec = prev;
        pf_free(json);
        return PF_ERR_NOMEM;
    }
    memset(spec, 0, sizeof *spec); /* stolen */
    pf_job_spec_deinit(&prev);
    pf_free(j->spec_json);
    j->spec_json = json;
    /* The ps tasks of the next generation restore the newest checkpoint, each reassembling
     * its shards from the slices the checkpoint's files hold (ps/ps_checkpoint.c). */
    char msg[COORD_TEXT_MAX];
    bool running = j->phase == COORD_RUNNING || j->phase == COORD_RESTARTING;
    snprintf(msg, sizeof msg, "ps tasks %d -> %d: %s", old, j->spec.replicas.ps,
             running ? "the job restarts from its newest checkpoint, repartitioned"
                     : "the job starts with them, from its newest checkpoint when it has one");
    release(c, j, now);
    coord_log_event(c, j->name, "Scaled", "PsChanged", msg, now);
    if (running) {
        coord_job_set_phase(c, j, COORD_RESTARTING, "PsChanged", msg, now);
    } else {
        snprintf(j->message, sizeof j->message, "%s", msg);
        coord_job_event(c, j, now);
    }
    j->dirty = true;
    admit_all(c, now);
    return PF_OK;
}

/* --- nodes --- */

pf_status coord_node_register(coord_cluster *c, const char *id, const char *role,
                              const char *address, const char *version, int64_t memory, double now,
                              coord_node **out, int *created) {
    coord_node *n = coord_node_find(c, id);
    *created = n == NULL;
    if (!n) {
        n = pf_calloc(1, sizeof *n);
        if (n) /* before it is adopted: the index hashes it */
            snprintf(n->id, sizeof n->id, "%s", id);
        if (!n || coord_cluster_adopt_node(c, n) != PF_OK) {
            pf_free(n);
            return PF_ERR_NOMEM;
        }
        n->registered = now;
    }
    bool moved = strcmp(n->address, address) != 0 || strcmp(n->role, role) != 0;
    snprintf(n->role, sizeof n->role, "%s", role);
    snprintf(n->address, sizeof n->address, "%s", address);
    snprintf(n->version, sizeof n->version, "%s", version ? version : "");
    n->memory = memory > 0 ? memory : 0;
    n->last_heartbeat = now;
    bool was_lost = n->lost;
    n->lost = false;
    if (n->draining[0]) { /* a re-registered agent runs nothing */
        coord_job *drained = coord_job_find(c, n->draining);
        n->draining[0] = '\0';
        cap_ps_workers(c, drained);
    }
    n->dirty = true;
    char msg[COORD_TEXT_MAX];
    if (*created || was_lost || moved) {
        snprintf(msg, sizeof msg, "%s agent %s registered at %s", role, id, address);
        coord_log_event(c, NULL, "Registered", *created ? "NodeRegistered" : "NodeReregistered",
                        msg, now);
    }
    /* A re-registering agent has restarted: whatever it was assigned is gone with it. */
    if (!*created && n->job[0]) {
        snprintf(msg, sizeof msg, "restarted on agent %s", n->id);
        coord_serving_node_gone(c, n, msg, now);
        coord_job *j = coord_job_find(c, n->job);
        coord_task *t = j ? coord_task_find(j, n->type, n->index) : NULL;
        n->job[0] = '\0';
        if (j && t && !coord_job_finished(j) && n->generation == j->generation) {
            snprintf(msg, sizeof msg, "restarted on agent %s", n->id);
            t->state = TASK_FAILED;
            task_failed(c, j, t, 137, true, msg, now);
        }
    }
    coord_node_event(c, n, now);
    admit_all(c, now);
    *out = n;
    return PF_OK;
}

/* With training.epochs, a chief that succeeds before max_steps has read them all: its input
 * (ps 0's queue) ended the run; otherwise max_steps did. */
static bool ended_by_epochs(const coord_job *j) {
    return j->spec.training.epochs > 0 && j->global_step < (int64_t)j->spec.training.max_steps;
}

/* The message of a job that succeeded: how far it got and its test accuracy. */
static void done_message(const coord_job *j, double acc, char *msg, size_t size) {
    int64_t epochs = j->spec.training.epochs;
    int n = ended_by_epochs(j)
                ? snprintf(msg, size, "finished %" PRId64 " epoch%s at step %" PRId64, epochs,
                           epochs == 1 ? "" : "s", j->global_step)
                : snprintf(msg, size, "reached step %" PRId64 " of %" PRId64, j->global_step,
                           (int64_t)j->spec.training.max_steps);
    if (!isnan(acc) && n > 0 && (size_t)n < size)
        snprintf(msg + n, size - (size_t)n, "; test accuracy %.4f", acc);
}

/* The chief reported success (its result in r): the job succeeds, or waits for its evaluator's
 * final evaluation; every other task is done and its agent freed. */
static void chief_succeeded(coord_cluster *c, coord_job *j, const coord_report *r, double now) {
    double acc = r->accuracy, tl = r->test_loss;
    if (!isnan(acc))
        j->accuracy = acc;
    if (!isnan(tl))
        j->test_loss = tl;
    if (!isnan(r->test_auc))
        j->test_auc = r->test_auc;
    if (!isnan(r->test_calibration))
        j->test_calibration = r->test_calibration;
    if (r->steps > j->global_step && r->steps <= j->spec.training.max_steps)
        j->global_step = r->steps;
    /* Every ps has applied every step (a ps's version is the global step) and written the
     * final checkpoint; its last heartbeat may not have said so before its agent is freed. */
    for (int i = 0; i < j->n_tasks; i++)
        if (!strcmp(j->tasks[i].type, "ps") && j->tasks[i].updates < j->global_step)
            j->tasks[i].updates = j->global_step;
    bool evaluating = false;
    for (int i = 0; i < j->n_tasks; i++) {
        coord_task *o = &j->tasks[i];
        if (is_evaluator(o) && evaluator_busy(j, o)) {
            evaluating = true; /* keeps its agent for the final checkpoint */
            continue;
        }
        if (o->state == TASK_RUNNING || o->state == TASK_PENDING) {
            o->state = TASK_SUCCEEDED;
            coord_task_event(c, j, o, now);
        }
        free_task_agent(c, j, o, now);
    }
    /* ps 0's last report of its queue may come after its agent is freed here, and be
     * dropped: a job its epochs ended has a finished queue, as ps 0 would have said. */
    if (ended_by_epochs(j) && j->has_input && !j->input_finished) {
        j->input_epoch = j->spec.training.epochs;
        j->input_done = j->input_leased = 0;
        j->input_finished = true;
        j->dirty = true;
    }
    char msg[COORD_TEXT_MAX];
    done_message(j, acc, msg, sizeof msg);
    if (evaluating)
        await_evaluator(c, j, msg, now);
    else
        finish(c, j, COORD_SUCCEEDED, "JobSucceeded", msg, now);
}

/* Task t reported failure: a non-finite loss fails the job, anything else is judged by the
 * restart policy (task_failed). */
static void task_reported_failed(coord_cluster *c, coord_job *j, coord_task *t,
                                 const coord_report *r, double now) {
    const char *m = r->message;
    char why[COORD_TEXT_MAX];
    if (r->reason && !strcmp(r->reason, "NonFiniteLoss")) {
        /* training.on_nonfinite "fail": a restart would repeat the same numbers */
        snprintf(why, sizeof why, "%s %d: %.200s", t->type, t->index, m ? m : "non-finite loss");
        finish(c, j, COORD_FAILED, "NonFiniteLoss", why, now);
    } else {
        snprintf(why, sizeof why, "failed (exit code %d%s%.180s)", (int)r->exit_code, m ? ": " : "",
                 m ? m : "");
        task_failed(c, j, t, (int)r->exit_code, false, why, now);
    }
}

bool coord_node_heartbeat(coord_cluster *c, coord_node *n, const coord_report *r, double now) {
    n->last_heartbeat = now;
    /* A scheduling round follows only a heartbeat that changed something (each change queues
     * an event, or sets `changed`): the lease renewals of a large idle cluster cost no round;
     * the ticker's round (every 0.25 s) catches whatever time alone makes due. */
    int events_before = c->n_pending;
    bool changed = false;
    if (n->lost) {
        n->lost = false;
        n->dirty = true;
        char msg[COORD_TEXT_MAX];
        snprintf(msg, sizeof msg, "agent %s is back", n->id);
        coord_log_event(c, NULL, "Registered", "NodeBack", msg, now);
        coord_node_event(c, n, now);
    }
    const char *state = r->state;
    bool busy = state && !strcmp(state, "running");
    if (n->draining[0] && !busy) { /* the removed worker has stopped */
        coord_job *drained = coord_job_find(c, n->draining);
        n->draining[0] = '\0';
        n->dirty = true;
        cap_ps_workers(c, drained);
        changed = true;
    }
    if (busy != n->busy) {
        n->busy = busy;
        n->dirty = true;
        coord_node_event(c, n, now);
    }
    if (coord_serving_node(n)) {
        coord_serving_report(c, n, r, now);
    } else if (n->job[0]) {
        coord_job *j = coord_job_find(c, n->job);
        coord_task *t = j ? coord_task_find(j, n->type, n->index) : NULL;
        const char *rjob = r->job, *rtype = r->type;
        if (t) {
            t->last_heartbeat = now;
        }
        /* A report of an earlier incarnation (the task before its replacement on this same
         * agent, which the agent has not yet stopped) says nothing about the current one. */
        bool current = t && (!r->incarnation || r->incarnation == t->incarnation);
        if (current && rjob && rtype && !strcmp(rjob, j->name) && !strcmp(rtype, t->type) &&
            r->generation == n->generation && r->index == t->index) {
            if (r->has_updates)
                t->updates = r->updates;
            if (r->has_stale)
                t->stale = r->stale;
            if (!strcmp(t->type, "ps")) /* its lags and row counts */
                coord_take_ps_stats(j, t, r, now);
            coord_take_profile(t, r);
            if (r->has_workers) { /* more than it is told to serve: it has not heard yet */
                int members = coord_job_membership(c, j), was = t->workers;
                t->workers = (int)r->workers < members ? (int)r->workers : members;
                changed = changed || t->workers != was;
            }
            if (!strcmp(state, "running") && t->state == TASK_PENDING) {
                t->state = TASK_RUNNING;
                j->dirty = true;
                if (strcmp(t->type, "ps") != 0 && !is_evaluator(t)) /* a trainer (re)joins */
                    coord_job_restart_rate(j, now);
                coord_task_event(c, j, t, now);
                bool all = true;
                for (int i = 0; i < j->n_tasks; i++)
                    all = all && j->tasks[i].state == TASK_RUNNING;
                if (all && j->phase == COORD_RUNNING) {
                    char msg[COORD_TEXT_MAX];
                    snprintf(msg, sizeof msg, "all %d tasks running", j->n_tasks);
                    coord_job_set_phase(c, j, COORD_RUNNING, "JobRunning", msg, now);
                }
            } else if (!strcmp(state, "succeeded") && t->state != TASK_SUCCEEDED) {
                t->state = TASK_SUCCEEDED;
                j->dirty = true;
                coord_task_event(c, j, t, now);
                if (is_chief(j, t)) {
                    chief_succeeded(c, j, r, now);
                } else if (is_evaluator(t)) {
                    evaluator_done(c, j, now);
                }
            } else if (!strcmp(state, "failed") && t->state != TASK_FAILED) {
                t->state = TASK_FAILED;
                j->dirty = true;
                coord_task_event(c, j, t, now);
                task_reported_failed(c, j, t, r, now);
            }
        }
    }
    if (!changed && c->n_pending == events_before)
        return false;
    admit_all(c, now);
    return true;
}

void coord_node_remove(coord_cluster *c, coord_node *n, double now) {
    char msg[COORD_TEXT_MAX];
    if (n->job[0]) {
        snprintf(msg, sizeof msg, "lost: agent %s deregistered", n->id);
        coord_serving_node_gone(c, n, msg, now);
        coord_job *j = coord_job_find(c, n->job);
        coord_task *t = j ? coord_task_find(j, n->type, n->index) : NULL;
        n->job[0] = '\0';
        if (j && t && !coord_job_finished(j)) {
            t->state = TASK_LOST;
            j->dirty = true;
            coord_task_event(c, j, t, now);
            task_failed(c, j, t, 143, true, msg, now);
        }
    }
    snprintf(msg, sizeof msg, "%s agent %s deregistered", n->role, n->id);
    coord_log_event(c, NULL, "Deregistered", "NodeDeregistered", msg, now);
    n->deleted = true;
    n->dirty = true;
    if (n->draining[0]) /* no longer in the membership */
        cap_ps_workers(c, coord_job_find(c, n->draining));
    admit_all(c, now);
}

/* --- time --- */

void coord_cluster_tick(coord_cluster *c, double now) {
    char msg[COORD_TEXT_MAX];
    for (int i = 0; i < c->n_nodes; i++) {
        coord_node *n = c->nodes[i];
        if (n->lost || n->deleted || now - n->last_heartbeat <= c->lease_seconds)
            continue;
        n->lost = true;
        n->busy = false;
        n->dirty = true;
        if (n->draining[0]) /* no longer in the membership */
            cap_ps_workers(c, coord_job_find(c, n->draining));
        snprintf(msg, sizeof msg, "%s agent %s lost: no heartbeat for %.0f s", n->role, n->id,
                 now - n->last_heartbeat);
        coord_log_event(c, n->job[0] ? n->job : NULL, "Lost", "NodeLost", msg, now);
        if (n->job[0]) {
            snprintf(msg, sizeof msg, "lost: agent %s sent no heartbeat for %.0f s", n->id,
                     now - n->last_heartbeat);
            coord_serving_node_gone(c, n, msg, now);
            coord_job *j = coord_job_find(c, n->job);
            coord_task *t = j ? coord_task_find(j, n->type, n->index) : NULL;
            n->job[0] = '\0';
            if (j && t && !coord_job_finished(j)) {
                t->state = TASK_LOST;
                j->dirty = true;
                coord_task_event(c, j, t, now);
                snprintf(msg, sizeof msg, "lost: agent %s sent no heartbeat for %.0f s", n->id,
                         now - n->last_heartbeat);
                task_failed(c, j, t, 137, true, msg, now);
            }
        }
        coord_node_event(c, n, now);
    }
    for (int i = 0; i < c->n_jobs; i++) {
        coord_job *j = c->jobs[i];
        if (j->deleted || !training_complete(j))
            continue;
        coord_condition *k = coord_job_find_condition(j, "TrainingComplete");
        if (now - k->time <= COORD_EVALUATOR_GRACE_SECONDS)
            continue;
        snprintf(msg, sizeof msg,
                 "the evaluator did not finish within %d s of the end of training; the job "
                 "succeeds without its final evaluation",
                 COORD_EVALUATOR_GRACE_SECONDS);
        coord_log_event(c, j->name, "Warning", "EvaluatorTimeout", msg, now);
        evaluator_done(c, j, now);
    }
    for (int i = 0; i < c->n_jobs; i++) {
        coord_job *j = c->jobs[i];
        int64_t limit = j->spec.run_policy.active_deadline_seconds;
        double waited = j->preempted_seconds + waiting_since_preempted(j, now);
        if (j->deleted || coord_job_finished(j) || limit <= 0 || !j->start_time ||
            now - j->start_time - waited <= (double)limit)
            continue;
        snprintf(msg, sizeof msg, "ran longer than active_deadline_seconds (%" PRId64 " s)", limit);
        finish(c, j, COORD_FAILED, "DeadlineExceeded", msg, now);
    }
    for (int i = 0; i < c->n_jobs; i++) /* preemptions waiting for a final checkpoint */
        if (c->jobs[i]->drain_until > 0)
            drain_check(c, c->jobs[i], now);
    for (int i = 0; i < c->n_jobs; i++) { /* training that stopped advancing: stalled */
        coord_job *j = c->jobs[i];
        bool training = !j->deleted && j->phase == COORD_RUNNING && !training_complete(j);
        if (coord_rate_check(&j->rate, training, now)) {
            j->steps_per_sec = coord_rate_steps_per_sec(&j->rate);
            j->dirty = true;
            coord_job_event(c, j, now);
        }
    }
    admit_all(c, now);
}
