/* cluster_schedule.c - the scheduling round of the state machine (cluster_schedule.h): which
 * waiting job gets agents and when, and which running job gives its agents up for it.
 *
 * DESIGN: a round runs after each change (a submit, a PATCH, a heartbeat that changed
 * something) and on each tick. Running jobs get their replacements and added workers first
 * (cluster_admit.c); then the waiting jobs are walked in queue order (priority, then submit
 * time), each holding the agents it needs, so that no job behind it takes one it waits for. A
 * job beyond its queue's quota starts only on what is left after the walk, borrowing by the
 * queues' weights. The first job in line that is short of agents may preempt lower-priority
 * jobs of its queue, or reclaim what other queues borrowed (one beyond its queue's quota,
 * only the former); a job bound to end before that one is expected to start may backfill on
 * the agents held for it. Serving tasks take the worker agents no waiting job holds.
 */
#include "coordinator/cluster_schedule.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cluster_admit.h"
#include "coordinator/cluster_conditions.h"
#include "coordinator/cluster_events.h"
#include "coordinator/cluster_queues.h"
#include "coordinator/cluster_serving.h"
#include "psflow/clock.h"
#include "psflow/footprint.h"
#include "psflow/mem.h"

/* --- the queue's order --- */

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
 * watches changes with it anyway: the job's message (coord_job_admit) and its phase. */
static void set_queue(coord_job *j, int position, const coord_job *behind, coord_wait reason) {
    j->queue_position = position;
    snprintf(j->queue_behind, sizeof j->queue_behind, "%s", behind ? behind->name : "");
    j->queue_reason = reason;
    j->queue_start = 0; /* the first job holding agents gets its estimate after this */
}

/* --- preemption --- */

/* Whether running job v may be stopped so that waiting job j gets its agents: v is
 * preemptible and still training (its evaluator's last evaluation is not cut), and either of
 * lower priority in j's queue q, or of another queue that holds more than its quota (what it
 * borrowed is reclaimed, whatever its priority). *borrowed says which. */
static bool preemptible_by(coord_cluster *c, coord_job *v, const coord_job *j, const coord_queue *q,
                           bool *borrowed) {
    if (v == j || v->deleted || v->phase != COORD_RUNNING || coord_job_training_complete(v) ||
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
    coord_job_release(c, v, now);
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
    coord_job_set_message(c, v, msg, now);
}

void coord_job_drain_check(coord_cluster *c, coord_job *v, double now) {
    const coord_job *by = coord_job_find(c, v->drain_for);
    char how[96];
    /* it reached its end meanwhile: it finishes (its final checkpoint is the job's last) */
    bool ending = v->phase == COORD_RUNNING &&
                  (coord_job_training_complete(v) || v->global_step >= v->spec.training.max_steps ||
                   (v->has_checkpoint && v->checkpoint_step >= v->spec.training.max_steps));
    /* a preemption for a quota holds while its job waits or runs; one for agents, while its
     * job waits for them */
    bool needed = by && (coord_job_waiting(by) || (v->drain_quota && by->phase == COORD_RUNNING));
    if (v->deleted || v->phase != COORD_RUNNING || !needed || ending) {
        v->drain_until = 0;
        if (!v->deleted && v->phase == COORD_RUNNING)
            coord_job_set_message(
                c, v,
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
 * far); a borrowed one only what its queue holds beyond its quota once the victims taken
 * before it stopped (queue_over): agents of a role beyond that role's quota, and any of its
 * agents while it holds memory beyond its quota of memory. */
static bool victim_helps(const victim *v, amount want, amount got, amount queue_over) {
    /* a borrowed one gives agents of a role its queue holds beyond that quota, or beyond its
     * quota of memory */
    bool memory = !v->borrowed || queue_over.memory > 0;
    return (got.ps < want.ps && v->ps > 0 && (memory || queue_over.ps > 0)) ||
           (got.workers < want.workers && v->workers > 0 && (memory || queue_over.workers > 0)) ||
           (got.memory < want.memory && v->memory > 0 && memory);
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
        if (victim_helps(&v[i], want, got, *vo)) {
            vo->ps -= v[i].ps;
            vo->workers -= v[i].workers;
            vo->memory = coord_memory_add(vo->memory, -v[i].memory);
            v[taken++] = v[i];
            got.ps += v[i].ps;
            got.workers += v[i].workers;
            got.memory = coord_memory_add(got.memory, v[i].memory);
        }
    }
    if (!covers(got, want)) {
        pf_free(v);
        return false; /* all of them would not free enough */
    }
    for (int i = taken - 1; i >= 0; i--) { /* spare those the others cover */
        amount less = {got.ps - v[i].ps, got.workers - v[i].workers,
                       coord_memory_add(got.memory, -v[i].memory)};
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
        if (coord_job_training_complete(r)) {
            /* its training agents are free already (counted as idle or stopping): only its
             * evaluator's agent is left, for its last evaluation */
            e[n] = (ending){now, 0, 0};
            for (int k = 0; k < r->n_tasks; k++)
                e[n].workers +=
                    coord_task_is_evaluator(&r->tasks[k]) && coord_evaluator_busy(r, &r->tasks[k]);
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
    if (!first || !(first->queue_start > now) || idle_ps < coord_job_need_ps(j) ||
        idle_workers < coord_job_need_workers(j) || !(now + run <= first->queue_start))
        return false;
    if (!coord_job_admit(c, j, idle_ps, idle_workers, NULL, now))
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
        k.idle_ps += coord_node_idle(nd, "ps");
        k.idle_workers += coord_node_idle(nd, "worker");
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
    if (quota < 0)
        return 0;
    return coord_memory_add(coord_memory_add(coord_memory_add(used, held), need), -quota);
}

static amount beyond(const coord_queue *q, coord_job *j) {
    return (amount){(int)beyond_quota(q->used_ps, q->held_ps, coord_job_need_ps(j), q->quota_ps),
                    (int)beyond_quota(q->used_workers, q->held_workers, coord_job_need_workers(j),
                                      q->quota_workers),
                    q->quota_memory < 0 ? 0
                                        : beyond_quota(q->used_memory, q->held_memory,
                                                       coord_job_need_memory(j), q->quota_memory)};
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
        snprintf(jm, sizeof jm, " and %s",
                 memory_text(coord_job_need_memory(j), text, sizeof text));
    }
    snprintf(msg + len, sizeof msg - (size_t)len,
             "waiting for the quota of queue %s (ps: %s, workers: %s%s), which its other jobs "
             "hold; this job needs %d ps%s %d workers%s: %s",
             q->name, quota_text(q->quota_ps, qp, sizeof qp),
             quota_text(q->quota_workers, qw, sizeof qw), qm, coord_job_need_ps(j),
             jm[0] ? "," : " and", coord_job_need_workers(j), jm,
             j->spec.run_policy.preemptible
                 ? "no idle agent is left to borrow"
                 : "a job that is not preemptible never borrows beyond its quota");
    coord_job_set_waiting(c, j, msg, now);
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
            if (!j || !j->spec.run_policy.preemptible ||
                k->idle_ps - held_ps < coord_job_need_ps(j) ||
                k->idle_workers - held_workers < coord_job_need_workers(j))
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
        if (!coord_job_admit(c, j, k->idle_ps - held_ps, k->idle_workers - held_workers, NULL, now))
            continue; /* counted above: not reached */
        k->idle_ps -= coord_job_need_ps(j);
        k->idle_workers -= coord_job_need_workers(j);
        q->used_ps += coord_job_need_ps(j);
        q->used_workers += coord_job_need_workers(j);
        q->used_memory = coord_memory_add(q->used_memory, coord_job_need_memory(j));
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
        bool too_large =
            coord_job_need_ps(j) > k.live_ps || coord_job_need_workers(j) > k.live_workers;
        if (!too_large && !within_quota(jq, j)) {
            /* borrowing first; else, first in line, lower priority of its queue gives way */
            bool may_borrow = j->spec.run_policy.preemptible &&
                              k.idle_ps - held_ps >= coord_job_need_ps(j) &&
                              k.idle_workers - held_workers >= coord_job_need_workers(j);
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
            first_holder &&
            ((have_ps < coord_job_need_ps(j) && have_ps < k.idle_ps) ||
             (have_workers < coord_job_need_workers(j) && have_workers < k.idle_workers));
        bool fits = have_ps >= coord_job_need_ps(j) && have_workers >= coord_job_need_workers(j);
        if ((!fits && held_back && backfill(c, j, first_holder, k.idle_ps, k.idle_workers, now)) ||
            coord_job_admit(c, j, have_ps, have_workers, held_back ? first_holder : NULL, now)) {
            k.idle_ps -= coord_job_need_ps(j);
            k.idle_workers -= coord_job_need_workers(j);
            jq->used_ps += coord_job_need_ps(j);
            jq->used_workers += coord_job_need_workers(j);
            jq->used_memory = coord_memory_add(jq->used_memory, coord_job_need_memory(j));
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
                        (amount){coord_job_need_ps(j) - have_ps - k.stopping_ps,
                                 coord_job_need_workers(j) - have_workers - k.stopping_workers, 0},
                        false, now))
            return true;
        held_ps += coord_job_need_ps(j);
        held_workers += coord_job_need_workers(j);
        jq->held_ps += coord_job_need_ps(j);
        jq->held_workers += coord_job_need_workers(j);
        if (jq->quota_memory >= 0)
            jq->held_memory = coord_memory_add(jq->held_memory, coord_job_need_memory(j));
        if (!first_holder) {
            first_holder = j;
            double at =
                expected_start(c, j, coord_job_need_ps(j) - have_ps - k.stopping_ps,
                               coord_job_need_workers(j) - have_workers - k.stopping_workers, now);
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

void coord_schedule(coord_cluster *c, double now) {
    double start = pf_clock_now();
    for (int i = 0; i < c->n_jobs; i++)
        if (c->jobs[i]->phase == COORD_RUNNING && !c->jobs[i]->deleted)
            coord_job_replace_tasks(c, c->jobs[i], now);
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
            if (coord_job_waiting(c->jobs[i]))
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
