/* cluster.c - the coordinator's pure state machine (see cluster.h for the design): restarts,
 * failures, the evaluator after training, jobs, nodes and time. Its files, each calling only
 * those before it: cluster_events.c (the event queue), cluster_index.c (containers and
 * lookups), cluster_conditions.c (phases and conditions), cluster_admit.c (admission,
 * replacements), cluster_schedule.c (the scheduling round: the queue, quotas, preemption,
 * backfill), cluster.c, cluster_reports.c (metrics, rollbacks, checkpoints); cluster_json.c
 * above them.
 */
#include "coordinator/cluster.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/cluster_admit.h"
#include "coordinator/cluster_conditions.h"
#include "coordinator/cluster_events.h"
#include "coordinator/cluster_queues.h"
#include "coordinator/cluster_schedule.h"
#include "coordinator/cluster_serving.h"
#include "psflow/mem.h"

/* --- tasks --- */

static bool is_chief(const coord_job *j, const coord_task *t) {
    return j->spec.replicas.chief ? !strcmp(t->type, "chief")
                                  : !strcmp(t->type, "worker") && t->index == 0;
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

/* --- failures --- */

/* A job ended (Succeeded, or Failed: cancelled too): its agents are freed, and no task of it
 * stays Pending or Running: a task running when its job Succeeded served it to the end
 * (Succeeded, the ps tasks); any other is Stopped (its agent stops it). */
static void finish(coord_cluster *c, coord_job *j, coord_phase phase, const char *reason,
                   const char *message, double now) {
    coord_job_release(c, j, now);
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
    if (!coord_job_training_complete(j))
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
    if (coord_task_is_evaluator(t)) { /* it never trains: the job carries on without evaluations */
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
    if (coord_job_training_complete(j))
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
        /* Pending without an agent: coord_schedule gives it the next idle worker agent. */
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
        coord_job_release(c, j, now);
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
    coord_schedule(c, now); /* in its place in the queue */
    *out = j;
    *created = 1;
    return PF_OK;
}

void coord_job_cancel(coord_cluster *c, coord_job *j, double now) {
    if (coord_job_finished(j))
        return;
    finish(c, j, COORD_FAILED, "Cancelled", "cancelled by request", now);
    coord_schedule(c, now); /* agents its tasks never started on are idle at once */
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
 * pending without an agent until coord_job_replace_tasks gives it one. */
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
    if (coord_job_training_complete(j))
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
            coord_job_release(c, j, now);
            coord_log_event(c, j->name, "Scaled", "WorkersChanged", msg, now);
            if (j->phase == COORD_RESTARTING)
                coord_job_set_phase(c, j, COORD_RESTARTING, "WorkersChanged", msg, now);
            j->dirty = true;
        }
    }
    if (suspend == 1 && j->phase != COORD_SUSPENDED) {
        if (j->preempted_by[0]) { /* suspended while it waits to resume: no longer preempted */
            j->preempted_seconds += coord_job_waiting_since_preempted(j, now);
            j->preempted_by[0] = '\0';
        }
        coord_job_release(c, j, now);
        coord_job_set_phase(c, j, COORD_SUSPENDED, "JobSuspended", "suspended by request", now);
    } else if (suspend == 0 && j->phase == COORD_SUSPENDED) {
        coord_job_set_condition(j, "Suspended", "False", "JobResumed", "resumed by request", now);
        coord_job_set_phase(c, j, j->start_time ? COORD_RESTARTING : COORD_CREATED, "JobResumed",
                            "resumed by request", now);
    }
    coord_schedule(c, now);
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
    coord_job_release(c, j, now);
    coord_log_event(c, j->name, "Scaled", "PsChanged", msg, now);
    if (running) {
        coord_job_set_phase(c, j, COORD_RESTARTING, "PsChanged", msg, now);
    } else {
        snprintf(j->message, sizeof j->message, "%s", msg);
        coord_job_event(c, j, now);
    }
    j->dirty = true;
    coord_schedule(c, now);
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
    coord_schedule(c, now);
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
        if (coord_task_is_evaluator(o) && coord_evaluator_busy(j, o)) {
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
                if (strcmp(t->type, "ps") != 0 &&
                    !coord_task_is_evaluator(t)) /* a trainer (re)joins */
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
                } else if (coord_task_is_evaluator(t)) {
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
    coord_schedule(c, now);
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
    coord_schedule(c, now);
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
        if (j->deleted || !coord_job_training_complete(j))
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
        double waited = j->preempted_seconds + coord_job_waiting_since_preempted(j, now);
        if (j->deleted || coord_job_finished(j) || limit <= 0 || !j->start_time ||
            now - j->start_time - waited <= (double)limit)
            continue;
        snprintf(msg, sizeof msg, "ran longer than active_deadline_seconds (%" PRId64 " s)", limit);
        finish(c, j, COORD_FAILED, "DeadlineExceeded", msg, now);
    }
    for (int i = 0; i < c->n_jobs; i++) /* preemptions waiting for a final checkpoint */
        if (c->jobs[i]->drain_until > 0)
            coord_job_drain_check(c, c->jobs[i], now);
    for (int i = 0; i < c->n_jobs; i++) { /* training that stopped advancing: stalled */
        coord_job *j = c->jobs[i];
        bool training = !j->deleted && j->phase == COORD_RUNNING && !coord_job_training_complete(j);
        if (coord_rate_check(&j->rate, training, now)) {
            j->steps_per_sec = coord_rate_steps_per_sec(&j->rate);
            j->dirty = true;
            coord_job_event(c, j, now);
        }
    }
    coord_schedule(c, now);
}
