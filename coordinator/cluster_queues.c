/* cluster_queues.c - the queues' registry and what each holds (cluster_queues.h). */
#include "coordinator/cluster_queues.h"

#include <stdio.h>
#include <string.h>

#include "psflow/footprint.h"
#include "psflow/placement.h"

coord_queue *coord_queue_find(coord_cluster *c, const char *name) {
    for (int i = 0; i < c->n_queues; i++)
        if (!c->queues[i].deleted && !strcmp(c->queues[i].name, name))
            return &c->queues[i];
    return NULL;
}

coord_queue *coord_job_queue(coord_cluster *c, coord_job *j) {
    const char *name = j->spec.run_policy.queue;
    if (!name[0])
        return &c->queues[0];
    if (j->queue_at >= 0 && j->queue_at < c->n_queues && !c->queues[j->queue_at].deleted &&
        !strcmp(c->queues[j->queue_at].name, name))
        return &c->queues[j->queue_at];
    coord_queue *q = coord_queue_find(c, name);
    if (!q)
        q = &c->queues[0];
    j->queue_at = (int)(q - c->queues);
    return q;
}

pf_status coord_queue_put(coord_cluster *c, const coord_queue *set, double now, coord_queue **out,
                          int *created, pf_error *err) {
    coord_queue *q = coord_queue_find(c, set->name);
    *created = q == NULL;
    if (!q) {
        if (c->n_queues >= COORD_MAX_QUEUES)
            return pf_error_set(err, PF_ERR_INVALID, NULL,
                                "there are %d queues already, the most a coordinator keeps: "
                                "delete one that is no longer used",
                                COORD_MAX_QUEUES);
        q = &c->queues[c->n_queues++];
        memset(q, 0, sizeof *q);
        snprintf(q->name, sizeof q->name, "%s", set->name);
    }
    if (!q->create_time)
        q->create_time = now;
    q->quota_ps = set->quota_ps;
    q->quota_workers = set->quota_workers;
    q->quota_memory = set->quota_memory;
    q->weight = set->weight;
    q->n_classes = set->n_classes;
    memcpy(q->classes, set->classes, sizeof q->classes);
    q->dirty = true;
    *out = q;
    return PF_OK;
}

const coord_priority_class *coord_queue_class(const coord_queue *q, const char *name) {
    for (int i = 0; i < q->n_classes; i++)
        if (!strcmp(q->classes[i].name, name))
            return &q->classes[i];
    return NULL;
}

void coord_job_task_memory(coord_job *j, int64_t *ps, int64_t *task) {
    if (j->memory_for_ps != j->spec.replicas.ps ||
        j->memory_for_workers != j->spec.replicas.worker || j->spec.replicas.ps <= 0) {
        pf_footprint fp;
        pf_footprint_estimate(&j->spec, &fp);
        pf_placement p;
        int64_t most = 0;
        if (pf_placement_compute(&j->spec, &p) != PF_OK) {
            /* out of memory: an even share, worked out again next time */
            *ps = PF_FOOTPRINT_PS_BASE +
                  fp.model_bytes / (j->spec.replicas.ps > 0 ? j->spec.replicas.ps : 1);
            *task = fp.worker_bytes;
            return;
        }
        for (int t = 0; t < p.n_ps; t++) {
            int64_t b = pf_footprint_ps_bytes(&j->spec, &p, t);
            most = b > most ? b : most;
        }
        pf_placement_deinit(&p);
        j->memory_ps = most;
        j->memory_task = fp.worker_bytes;
        j->memory_for_ps = j->spec.replicas.ps;
        j->memory_for_workers = j->spec.replicas.worker;
    }
    *ps = j->memory_ps;
    *task = j->memory_task;
}

int64_t coord_memory_add(int64_t a, int64_t b) {
    int64_t sum;
    if (!__builtin_add_overflow(a, b, &sum))
        return sum;
    return b > 0 ? INT64_MAX : INT64_MIN;
}

int64_t coord_job_memory(coord_job *j, int ps, int tasks) {
    const int64_t most = COORD_QUEUE_MEMORY_QUOTA_MAX + 1;
    int64_t per_ps, per_task, a, b;
    coord_job_task_memory(j, &per_ps, &per_task);
    if (__builtin_mul_overflow((int64_t)ps, per_ps, &a) ||
        __builtin_mul_overflow((int64_t)tasks, per_task, &b))
        return most;
    int64_t sum = coord_memory_add(a, b);
    return sum < most ? sum : most;
}

pf_status coord_queue_delete(coord_cluster *c, coord_queue *q, pf_error *err) {
    if (q == &c->queues[0])
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "the default queue cannot be deleted: it admits every job whose "
                            "spec names no queue");
    for (int i = 0; i < c->n_jobs; i++) {
        const coord_job *j = c->jobs[i];
        if (!j->deleted && !coord_job_finished(j) && !strcmp(pf_job_spec_queue(&j->spec), q->name))
            return pf_error_set(err, PF_ERR_INVALID, NULL,
                                "queue %s is in use: job %s (%s) is admitted through it; "
                                "delete the queue once its jobs have finished",
                                q->name, j->name, coord_phase_name(j->phase));
    }
    q->deleted = true;
    q->dirty = true;
    return PF_OK;
}

pf_status coord_queue_adopt(coord_cluster *c, const coord_queue *q) {
    coord_queue *to = coord_queue_find(c, q->name);
    if (!to) {
        if (c->n_queues >= COORD_MAX_QUEUES)
            return PF_ERR_INVALID;
        to = &c->queues[c->n_queues++];
    }
    *to = *q;
    to->dirty = to->deleted = false;
    return PF_OK;
}

/* Whether the agent task t of j names still runs it: a task that succeeded keeps its agent
 * until the job ends, but a training task freed at TrainingComplete keeps only its node_id. */
static bool agent_held(const coord_cluster *c, const coord_job *j, const coord_task *t) {
    const coord_node *n = coord_node_find(c, t->node_id);
    return n && !strcmp(n->job, j->name);
}

void coord_job_agents(const coord_cluster *c, const coord_job *j, int *ps, int *workers) {
    *ps = *workers = 0;
    for (int k = 0; k < j->n_tasks; k++) {
        const coord_task *t = &j->tasks[k];
        if (t->state == TASK_RUNNING || (t->state == TASK_PENDING && t->node_id[0]) ||
            (t->state == TASK_SUCCEEDED && t->node_id[0] && agent_held(c, j, t))) {
            bool is_ps = !strcmp(t->type, "ps");
            *ps += is_ps;
            *workers += !is_ps;
        }
    }
}

void coord_queues_measure(coord_cluster *c) {
    for (int i = 0; i < c->n_queues; i++) {
        coord_queue *q = &c->queues[i];
        q->used_ps = q->used_workers = q->held_ps = q->held_workers = 0;
        q->used_memory = q->held_memory = 0;
        q->running = q->waiting = 0;
    }
    for (int i = 0; i < c->n_jobs; i++) {
        coord_job *j = c->jobs[i];
        if (j->deleted)
            continue;
        coord_queue *q = coord_job_queue(c, j);
        /* its serving tasks' agents: held from its first admission until it is deleted or
         * fails, a job that succeeded too */
        int serving = 0;
        for (int k = 0; k < j->n_serving; k++) {
            const coord_serving *s = &j->serving[k];
            serving += s->node_id[0] && (s->state == TASK_PENDING || s->state == TASK_RUNNING);
        }
        q->used_workers += serving;
        if (serving)
            q->used_memory = coord_memory_add(q->used_memory, coord_job_memory(j, 0, serving));
        if (j->phase == COORD_RUNNING && j->drain_until > 0) {
            q->running++; /* preempted, taking its final checkpoint: its agents are going */
        } else if (j->phase == COORD_RUNNING) {
            int ps, workers;
            coord_job_agents(c, j, &ps, &workers);
            /* a training task owed a replacement takes an agent back as soon as one is idle */
            for (int k = 0; k < j->n_tasks; k++)
                workers += j->tasks[k].state == TASK_PENDING && !j->tasks[k].node_id[0] &&
                           j->tasks[k].incarnation != 0;
            q->used_ps += ps;
            q->used_workers += workers;
            q->used_memory = coord_memory_add(q->used_memory, coord_job_memory(j, ps, workers));
            q->running++;
        } else if (j->phase == COORD_CREATED || j->phase == COORD_RESTARTING) {
            q->waiting++;
        }
    }
}

static int over(int used, int quota) {
    return quota >= 0 && used > quota ? used - quota : 0;
}

int coord_queue_over_ps(const coord_queue *q) {
    return over(q->used_ps, q->quota_ps);
}

int coord_queue_over_workers(const coord_queue *q) {
    return over(q->used_workers, q->quota_workers);
}

int64_t coord_queue_over_memory(const coord_queue *q) {
    return q->quota_memory >= 0 && q->used_memory > q->quota_memory
               ? q->used_memory - q->quota_memory
               : 0;
}

bool coord_queue_borrowed(const coord_queue *q) {
    return coord_queue_over_ps(q) > 0 || coord_queue_over_workers(q) > 0 ||
           coord_queue_over_memory(q) > 0;
}
