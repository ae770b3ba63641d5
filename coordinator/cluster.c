/* cluster.c - the coordinator's pure state machine (see cluster.h for the design). */
#include "coordinator/cluster.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "psflow/mem.h"
#include "psflow/tf_config.h"

static const char *const phase_names[] = {"Created",   "Running",   "Restarting",
                                          "Suspended", "Succeeded", "Failed"};
static const char *const task_state_names[] = {"Pending", "Running", "Succeeded", "Failed", "Lost"};

const char *coord_phase_name(coord_phase p) {
    return phase_names[p];
}
const char *coord_task_state_name(coord_task_state s) {
    return task_state_names[s];
}

bool coord_job_finished(const coord_job *j) {
    return j->phase == COORD_SUCCEEDED || j->phase == COORD_FAILED;
}

/* --- events --- */

void coord_cluster_queue_event(coord_cluster *c, const char *kind, const char *job, json_t *data) {
    if (!data)
        return;
    if (c->n_pending == c->cap_pending) {
        int cap = c->cap_pending ? c->cap_pending * 2 : 64;
        coord_event *grown = pf_realloc(c->pending, (size_t)cap * sizeof *grown);
        if (!grown) {
            json_decref(data); /* the change itself is kept; only its notification is lost */
            return;
        }
        c->pending = grown;
        c->cap_pending = cap;
    }
    coord_event *e = &c->pending[c->n_pending++];
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    snprintf(e->job, sizeof e->job, "%s", job ? job : "");
    e->data = data;
}

coord_event *coord_cluster_take_events(coord_cluster *c, int *n) {
    coord_event *e = c->pending;
    *n = c->n_pending;
    c->pending = NULL;
    c->n_pending = c->cap_pending = 0;
    return e;
}

json_t *coord_time_json(double t) {
    if (t <= 0)
        return json_null();
    /* Rounded to the millisecond, so a time read back from its own text (time_from_json)
     * prints the same text again. */
    long long total_ms = llround(t * 1000.0);
    time_t secs = (time_t)(total_ms / 1000);
    int ms = (int)(total_ms % 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char buf[64];
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
    return json_string(buf);
}

static double time_from_json(json_t *v) {
    const char *s = json_string_value(v);
    if (!s)
        return 0;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int ms = 0;
    if (sscanf(s, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &ms) < 6)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (double)timegm(&tm) + ms / 1000.0;
}

static json_t *json_number_or_null(double v) {
    return isnan(v) ? json_null() : json_real(v);
}

static void log_event(coord_cluster *c, const char *job, const char *type, const char *reason,
                      const char *message, double now) {
    coord_cluster_queue_event(c, "log", job,
                              json_pack("{s:s, s:o, s:s, s:s, s:s}", "job", job ? job : "", "time",
                                        coord_time_json(now), "type", type, "reason", reason,
                                        "message", message));
}

static void job_event(coord_cluster *c, coord_job *j, double now) {
    j->last_summary_event = now;
    coord_cluster_queue_event(c, "job", j->name, coord_job_summary_json(j));
}

static void task_event(coord_cluster *c, coord_job *j, coord_task *t, double now) {
    json_t *d = coord_task_json(t, c->lease_seconds, now);
    if (d)
        json_object_set_new(d, "job", json_string(j->name));
    coord_cluster_queue_event(c, "task", j->name, d);
}

static void node_event(coord_cluster *c, coord_node *n, double now) {
    coord_cluster_queue_event(c, "node", n->job, coord_node_json(n, now));
}

/* --- conditions and phases --- */

static coord_condition *condition(coord_job *j, const char *type) {
    for (int i = 0; i < j->n_conds; i++)
        if (!strcmp(j->conds[i].type, type))
            return &j->conds[i];
    if (j->n_conds == COORD_MAX_CONDS)
        return NULL;
    coord_condition *k = &j->conds[j->n_conds++];
    memset(k, 0, sizeof *k);
    snprintf(k->type, sizeof k->type, "%s", type);
    snprintf(k->status, sizeof k->status, "False");
    return k;
}

static void set_condition(coord_job *j, const char *type, const char *status, const char *reason,
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

/* Moves the job to `phase`: its condition becomes True, the other phase conditions that
 * exclude it become False; logs the change with its reason. */
static void set_phase(coord_cluster *c, coord_job *j, coord_phase phase, const char *reason,
                      const char *message, double now) {
    const char *name = phase_names[phase];
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
        set_condition(j, name, "True", reason, message, now);
    if (phase == COORD_SUCCEEDED || phase == COORD_FAILED)
        j->completion_time = now;
    j->dirty = true;
    if (changed || !same_reason) {
        log_event(c, j->name, name, reason, message, now);
        job_event(c, j, now);
    }
}

/* --- tasks --- */

static bool is_chief(const coord_job *j, const coord_task *t) {
    return j->spec.replicas.chief ? !strcmp(t->type, "chief")
                                  : !strcmp(t->type, "worker") && t->index == 0;
}

static coord_task *find_task(coord_job *j, const char *type, int index) {
    for (int i = 0; i < j->n_tasks; i++)
        if (!strcmp(j->tasks[i].type, type) && j->tasks[i].index == index)
            return &j->tasks[i];
    return NULL;
}

/* "chief" or "worker-<i>": the name metric reports use. */
static coord_task *find_task_by_name(coord_job *j, const char *name) {
    if (!strcmp(name, "chief"))
        return j->spec.replicas.chief ? find_task(j, "chief", 0) : find_task(j, "worker", 0);
    int index;
    char tail;
    if (sscanf(name, "worker-%d%c", &index, &tail) == 1)
        return find_task(j, "worker", index);
    return NULL;
}

pf_status coord_job_make_tasks(coord_job *j) {
    const pf_replicas *r = &j->spec.replicas;
    int n = r->chief + r->ps + r->worker;
    coord_task *t = pf_calloc((size_t)n, sizeof *t);
    if (!t)
        return PF_ERR_NOMEM;
    int k = 0;
    for (int i = 0; i < r->chief; i++, k++)
        snprintf(t[k].type, sizeof t[k].type, "chief"), t[k].index = i;
    for (int i = 0; i < r->ps; i++, k++)
        snprintf(t[k].type, sizeof t[k].type, "ps"), t[k].index = i;
    for (int i = 0; i < r->worker; i++, k++)
        snprintf(t[k].type, sizeof t[k].type, "worker"), t[k].index = i;
    pf_free(j->tasks);
    j->tasks = t;
    j->n_tasks = n;
    return PF_OK;
}

static const char *task_role(const coord_task *t) {
    return strcmp(t->type, "ps") ? "worker" : "ps";
}

/* Takes the job's tasks away from their agents (they stop them on their next heartbeat). */
static void release(coord_cluster *c, coord_job *j, double now) {
    for (int i = 0; i < c->n_nodes; i++) {
        coord_node *n = c->nodes[i];
        if (!strcmp(n->job, j->name)) {
            n->job[0] = '\0';
            n->type[0] = '\0';
            n->dirty = true;
            node_event(c, n, now);
        }
    }
}

/* --- lifecycle --- */

void coord_cluster_init(coord_cluster *c, double lease_seconds) {
    memset(c, 0, sizeof *c);
    c->lease_seconds = lease_seconds;
}

void coord_job_free(coord_job *j) {
    if (!j)
        return;
    pf_free(j->spec_json);
    pf_job_spec_deinit(&j->spec);
    pf_free(j->tasks);
    pf_free(j);
}

void coord_cluster_deinit(coord_cluster *c) {
    for (int i = 0; i < c->n_jobs; i++)
        coord_job_free(c->jobs[i]);
    for (int i = 0; i < c->n_nodes; i++)
        pf_free(c->nodes[i]);
    for (int i = 0; i < c->n_pending; i++)
        json_decref(c->pending[i].data);
    pf_free(c->jobs);
    pf_free(c->nodes);
    pf_free(c->pending);
    memset(c, 0, sizeof *c);
}

static int grow(void **arr, int *cap, int n, size_t size) {
    if (n < *cap)
        return 0;
    int ncap = *cap ? *cap * 2 : 16;
    void *g = pf_realloc(*arr, (size_t)ncap * size);
    if (!g)
        return -1;
    *arr = g;
    *cap = ncap;
    return 0;
}

pf_status coord_cluster_adopt_job(coord_cluster *c, coord_job *j) {
    if (grow((void **)&c->jobs, &c->cap_jobs, c->n_jobs, sizeof *c->jobs))
        return PF_ERR_NOMEM;
    c->jobs[c->n_jobs++] = j;
    return PF_OK;
}

pf_status coord_cluster_adopt_node(coord_cluster *c, coord_node *n) {
    if (grow((void **)&c->nodes, &c->cap_nodes, c->n_nodes, sizeof *c->nodes))
        return PF_ERR_NOMEM;
    c->nodes[c->n_nodes++] = n;
    return PF_OK;
}

void coord_cluster_reap(coord_cluster *c) {
    int k = 0;
    for (int i = 0; i < c->n_jobs; i++) {
        if (c->jobs[i]->deleted)
            coord_job_free(c->jobs[i]);
        else
            c->jobs[k++] = c->jobs[i];
    }
    c->n_jobs = k;
    k = 0;
    for (int i = 0; i < c->n_nodes; i++) {
        if (c->nodes[i]->deleted)
            pf_free(c->nodes[i]);
        else
            c->nodes[k++] = c->nodes[i];
    }
    c->n_nodes = k;
}

coord_job *coord_job_find(const coord_cluster *c, const char *name) {
    for (int i = 0; i < c->n_jobs; i++)
        if (!c->jobs[i]->deleted && !strcmp(c->jobs[i]->name, name))
            return c->jobs[i];
    return NULL;
}

coord_node *coord_node_find(const coord_cluster *c, const char *id) {
    for (int i = 0; i < c->n_nodes; i++)
        if (!c->nodes[i]->deleted && !strcmp(c->nodes[i]->id, id))
            return c->nodes[i];
    return NULL;
}

/* --- admission --- */

static bool idle(const coord_node *n, const char *role) {
    return !n->lost && !n->busy && !n->deleted && n->job[0] == '\0' && !strcmp(n->role, role);
}

static bool waiting(const coord_job *j) {
    return !j->deleted && (j->phase == COORD_CREATED || j->phase == COORD_RESTARTING);
}

/* Gives every task of j an idle agent, or none. */
static void admit(coord_cluster *c, coord_job *j, double now) {
    int need_ps = j->spec.replicas.ps;
    int need_workers = j->spec.replicas.chief + j->spec.replicas.worker;
    int have_ps = 0, have_workers = 0;
    for (int i = 0; i < c->n_nodes; i++) {
        have_ps += idle(c->nodes[i], "ps");
        have_workers += idle(c->nodes[i], "worker");
    }
    if (have_ps < need_ps || have_workers < need_workers) {
        /* Name the tasks that would get no agent: the last ones of each role. */
        char msg[COORD_TEXT_MAX];
        int len = snprintf(msg, sizeof msg, "waiting for agents: missing");
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
        if (strcmp(j->message, msg) != 0) {
            if (j->phase == COORD_CREATED) {
                set_phase(c, j, COORD_CREATED, "WaitingForAgents", msg, now);
            } else {
                /* Restarting keeps the reason it restarts for; the message says what it
                 * waits for. */
                snprintf(j->message, sizeof j->message, "%s", msg);
                j->dirty = true;
                log_event(c, j->name, "Restarting", "WaitingForAgents", msg, now);
                job_event(c, j, now);
            }
        }
        return;
    }
    j->generation++;
    bool restart = j->generation > 1;
    for (int k = 0; k < j->n_tasks; k++) {
        coord_task *t = &j->tasks[k];
        const char *role = task_role(t);
        coord_node *n = NULL; /* the first idle agent of the role: counted above, so found */
        for (int i = 0; i < c->n_nodes && !n; i++)
            if (idle(c->nodes[i], role))
                n = c->nodes[i];
        snprintf(n->job, sizeof n->job, "%s", j->name);
        n->generation = j->generation;
        snprintf(n->type, sizeof n->type, "%s", t->type);
        n->index = t->index;
        n->dirty = true;
        snprintf(t->node_id, sizeof t->node_id, "%s", n->id);
        snprintf(t->address, sizeof t->address, "%s", n->address);
        if (restart)
            t->restarts++;
        t->state = TASK_PENDING;
        t->incarnation = (uint64_t)(now * 1e6) + (uint64_t)k;
        t->last_heartbeat = n->last_heartbeat;
        t->step = 0;
        t->examples_per_sec = 0;
        node_event(c, n, now);
    }
    if (!j->start_time)
        j->start_time = now;
    char msg[COORD_TEXT_MAX];
    if (restart) {
        snprintf(msg, sizeof msg,
                 "restarted as generation %d on %d agents; ps tasks restore the newest "
                 "checkpoint",
                 j->generation, j->n_tasks);
        set_phase(c, j, COORD_RUNNING, "JobRestarted", msg, now);
    } else {
        snprintf(msg, sizeof msg, "%d tasks assigned to agents", j->n_tasks);
        set_phase(c, j, COORD_RUNNING, "JobRunning", msg, now);
    }
    for (int k = 0; k < j->n_tasks; k++)
        task_event(c, j, &j->tasks[k], now);
}

static void admit_all(coord_cluster *c, double now) {
    for (int i = 0; i < c->n_jobs; i++)
        if (waiting(c->jobs[i]))
            admit(c, c->jobs[i], now);
}

/* --- failures --- */

static void finish(coord_cluster *c, coord_job *j, coord_phase phase, const char *reason,
                   const char *message, double now) {
    release(c, j, now);
    set_phase(c, j, phase, reason, message, now);
}

/* A task failed (exit_code) or its agent was lost: restart the gang or fail the job. */
static void task_failed(coord_cluster *c, coord_job *j, coord_task *t, int exit_code, bool lost,
                        const char *why, double now) {
    if (coord_job_finished(j) || j->phase == COORD_SUSPENDED)
        return;
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
    if (retryable && j->restarts < rp->backoff_limit) {
        j->restarts++;
        snprintf(msg, sizeof msg, "%s %d %s; restarting the job (restart %d of at most %d)",
                 t->type, t->index, why, j->restarts, rp->backoff_limit);
        release(c, j, now);
        set_phase(c, j, COORD_RESTARTING, reason, msg, now);
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

pf_status coord_job_submit(coord_cluster *c, pf_job_spec *spec, double now, coord_job **out,
                           int *created, pf_error *err) {
    *out = NULL;
    *created = 0;
    if (spec->replicas.evaluator > 0)
        return pf_error_set(err, PF_ERR_UNSUPPORTED, "/replicas/evaluator",
                            "/replicas/evaluator: evaluator tasks are not supported in managed "
                            "jobs; evaluate with the chief (training.eval_every_steps)");
    char *json = pf_job_spec_to_json(spec);
    if (!json)
        return PF_ERR_NOMEM;
    coord_job *old = coord_job_find(c, spec->name);
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
    if (coord_job_make_tasks(j) != PF_OK || coord_cluster_adopt_job(c, j) != PF_OK) {
        memset(&j->spec, 0, sizeof j->spec); /* the caller still owns spec */
        coord_job_free(j);
        return PF_ERR_NOMEM;
    }
    memset(spec, 0, sizeof *spec); /* stolen */
    j->loss = j->accuracy = j->test_loss = NAN;
    j->create_time = now;
    j->phase = COORD_CREATED;
    j->dirty = true;
    char msg[COORD_TEXT_MAX];
    snprintf(msg, sizeof msg, "job %s created", j->name);
    set_condition(j, "Created", "True", "JobCreated", msg, now);
    snprintf(j->message, sizeof j->message, "%s", msg);
    log_event(c, j->name, "Created", "JobCreated", msg, now);
    job_event(c, j, now);
    admit(c, j, now);
    *out = j;
    *created = 1;
    return PF_OK;
}

void coord_job_cancel(coord_cluster *c, coord_job *j, double now) {
    if (coord_job_finished(j))
        return;
    finish(c, j, COORD_FAILED, "Cancelled", "cancelled by request", now);
}

void coord_job_delete(coord_cluster *c, coord_job *j, double now) {
    coord_job_cancel(c, j, now);
    j->deleted = true;
    j->dirty = true;
    log_event(c, j->name, "Deleted", "JobDeleted", "job record deleted", now);
}

pf_status coord_job_patch(coord_cluster *c, coord_job *j, int new_workers, int suspend, double now,
                          pf_error *err) {
    if (coord_job_finished(j))
        return pf_error_set(err, PF_ERR_INVALID, "", "job %s has finished (%s)", j->name,
                            phase_names[j->phase]);
    if (new_workers > 0 && new_workers != j->spec.replicas.worker) {
        /* Only a sync job aggregates gradients. An async job's replicas_to_aggregate is its
         * worker count (the parser's effective value, not part of its spec text) and follows
         * it, so the job reloaded from its spec text is the same job. */
        bool sync = j->spec.training.mode == PF_MODE_SYNC;
        if (new_workers > PF_MAX_REPLICAS ||
            (sync && new_workers < j->spec.training.replicas_to_aggregate))
            return pf_error_set(err, PF_ERR_INVALID, "/replicas/worker",
                                "/replicas/worker: must be between training.replicas_to_aggregate "
                                "(%d) and %d",
                                sync ? j->spec.training.replicas_to_aggregate : 1, PF_MAX_REPLICAS);
        int old = j->spec.replicas.worker, old_aggregate = j->spec.training.replicas_to_aggregate;
        j->spec.replicas.worker = new_workers;
        if (!sync)
            j->spec.training.replicas_to_aggregate = new_workers;
        char *json = pf_job_spec_to_json(&j->spec);
        if (!json || coord_job_make_tasks(j) != PF_OK) {
            pf_free(json);
            j->spec.replicas.worker = old;
            j->spec.training.replicas_to_aggregate = old_aggregate;
            return PF_ERR_NOMEM;
        }
        pf_free(j->spec_json);
        j->spec_json = json;
        char msg[COORD_TEXT_MAX];
        snprintf(msg, sizeof msg, "workers %d -> %d; the job restarts from its newest checkpoint",
                 old, new_workers);
        release(c, j, now);
        log_event(c, j->name, "Scaled", "WorkersChanged", msg, now);
        if (j->phase == COORD_RUNNING || j->phase == COORD_RESTARTING)
            set_phase(c, j, COORD_RESTARTING, "WorkersChanged", msg, now);
        j->dirty = true;
    }
    if (suspend == 1 && j->phase != COORD_SUSPENDED) {
        release(c, j, now);
        set_phase(c, j, COORD_SUSPENDED, "JobSuspended", "suspended by request", now);
    } else if (suspend == 0 && j->phase == COORD_SUSPENDED) {
        set_condition(j, "Suspended", "False", "JobResumed", "resumed by request", now);
        set_phase(c, j, j->start_time ? COORD_RESTARTING : COORD_CREATED, "JobResumed",
                  "resumed by request", now);
    }
    admit_all(c, now);
    return PF_OK;
}

static double num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

void coord_job_record_metrics(coord_cluster *c, coord_job *j, const char *task, json_t *points,
                              json_t *evals, double now) {
    coord_task *t = find_task_by_name(j, task);
    bool finished = coord_job_finished(j);
    size_t i;
    json_t *p;
    int64_t best = -1;
    json_array_foreach(points, i, p) {
        int64_t step = (int64_t)num(p, "step");
        double loss = num(p, "loss"), eps = num(p, "examples_per_sec");
        json_t *e =
            json_pack("{s:s, s:s, s:I, s:f, s:o, s:o, s:o}", "job", j->name, "task", task, "step",
                      (json_int_t)step, "time", num(p, "time"), "loss", json_number_or_null(loss),
                      "examples_per_sec", json_number_or_null(eps), "step_time_seconds",
                      json_number_or_null(num(p, "step_time_seconds")));
        coord_cluster_queue_event(c, "metric", j->name, e);
        if (finished)
            continue; /* kept in the history; the final summary stays as the job ended */
        if (step > j->global_step)
            j->global_step = step;
        if (step >= best && !isnan(loss)) {
            best = step;
            j->loss = loss;
        }
        if (t) {
            t->step = step;
            if (!isnan(eps))
                t->examples_per_sec = eps;
        }
    }
    json_array_foreach(evals, i, p) {
        double acc = num(p, "accuracy"), tl = num(p, "test_loss");
        int64_t step = (int64_t)num(p, "step");
        coord_cluster_queue_event(c, "metric", j->name,
                                  json_pack("{s:s, s:s, s:I, s:f, s:o, s:o}", "job", j->name,
                                            "task", task, "step", (json_int_t)step, "time",
                                            num(p, "time"), "accuracy", json_number_or_null(acc),
                                            "test_loss", json_number_or_null(tl)));
        /* An evaluation may carry only one of the two: the other keeps its last value. */
        if (!isnan(acc))
            j->accuracy = acc;
        if (!isnan(tl))
            j->test_loss = tl;
    }
    j->dirty = true;
    if (finished) {
        if (json_array_size(evals) > 0)
            job_event(c, j, now);
        return;
    }
    double eps = 0;
    for (int k = 0; k < j->n_tasks; k++)
        if (strcmp(j->tasks[k].type, "ps") != 0 && j->tasks[k].state == TASK_RUNNING)
            eps += j->tasks[k].examples_per_sec;
    j->examples_per_sec = eps;
    if (j->rate_time == 0) {
        j->rate_time = now;
        j->rate_step = j->global_step;
    } else if (now - j->rate_time >= 2.0) {
        j->steps_per_sec = (double)(j->global_step - j->rate_step) / (now - j->rate_time);
        j->rate_time = now;
        j->rate_step = j->global_step;
    }
    j->dirty = true;
    if (now - j->last_summary_event >= 0.25 || json_array_size(evals) > 0)
        job_event(c, j, now);
}

char *coord_job_tf_config(const coord_job *j, const char *type, int index, const char **why) {
    *why = NULL;
    coord_task *self = find_task((coord_job *)j, type, index);
    if (!self) {
        *why = "the job has no such task";
        return NULL;
    }
    for (int i = 0; i < j->n_tasks; i++)
        if (!j->tasks[i].address[0]) {
            *why = "the job has no agents assigned yet";
            return NULL;
        }
    pf_tf_config cfg;
    pf_tf_config_init(&cfg);
    static const char *const types[] = {"chief", "ps", "worker"};
    const char *addrs[PF_MAX_REPLICAS];
    char *out = NULL;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int n = 0;
        for (int i = 0; i < j->n_tasks; i++)
            if (!strcmp(j->tasks[i].type, types[k]))
                addrs[n++] = j->tasks[i].address;
        if (n && pf_tf_config_add_job(&cfg, types[k], addrs, n) != PF_OK)
            goto done;
    }
    cfg.has_task = true;
    snprintf(cfg.task_type, sizeof cfg.task_type, "%s", type);
    cfg.task_index = index;
    out = pf_tf_config_format(&cfg);
done:
    pf_tf_config_deinit(&cfg);
    if (!out && !*why)
        *why = "out of memory";
    return out;
}

/* --- nodes --- */

pf_status coord_node_register(coord_cluster *c, const char *id, const char *role,
                              const char *address, const char *version, double now,
                              coord_node **out, int *created) {
    coord_node *n = coord_node_find(c, id);
    *created = n == NULL;
    if (!n) {
        n = pf_calloc(1, sizeof *n);
        if (!n || coord_cluster_adopt_node(c, n) != PF_OK) {
            pf_free(n);
            return PF_ERR_NOMEM;
        }
        snprintf(n->id, sizeof n->id, "%s", id);
        n->registered = now;
    }
    bool moved = strcmp(n->address, address) != 0 || strcmp(n->role, role) != 0;
    snprintf(n->role, sizeof n->role, "%s", role);
    snprintf(n->address, sizeof n->address, "%s", address);
    snprintf(n->version, sizeof n->version, "%s", version ? version : "");
    n->last_heartbeat = now;
    bool was_lost = n->lost;
    n->lost = false;
    n->dirty = true;
    char msg[COORD_TEXT_MAX];
    if (*created || was_lost || moved) {
        snprintf(msg, sizeof msg, "%s agent %s registered at %s", role, id, address);
        log_event(c, NULL, "Registered", *created ? "NodeRegistered" : "NodeReregistered", msg,
                  now);
    }
    /* A re-registering agent has restarted: whatever it was assigned is gone with it. */
    if (!*created && n->job[0]) {
        coord_job *j = coord_job_find(c, n->job);
        coord_task *t = j ? find_task(j, n->type, n->index) : NULL;
        n->job[0] = '\0';
        if (j && t && !coord_job_finished(j) && n->generation == j->generation) {
            snprintf(msg, sizeof msg, "restarted on agent %s", n->id);
            t->state = TASK_FAILED;
            task_failed(c, j, t, 137, true, msg, now);
        }
    }
    node_event(c, n, now);
    admit_all(c, now);
    *out = n;
    return PF_OK;
}

void coord_node_heartbeat(coord_cluster *c, coord_node *n, json_t *r, double now) {
    n->last_heartbeat = now;
    if (n->lost) {
        n->lost = false;
        n->dirty = true;
        char msg[COORD_TEXT_MAX];
        snprintf(msg, sizeof msg, "agent %s is back", n->id);
        log_event(c, NULL, "Registered", "NodeBack", msg, now);
        node_event(c, n, now);
    }
    const char *state = json_string_value(json_object_get(r, "state"));
    bool busy = state && !strcmp(state, "running");
    if (busy != n->busy) {
        n->busy = busy;
        n->dirty = true;
        node_event(c, n, now);
    }
    if (n->job[0]) {
        coord_job *j = coord_job_find(c, n->job);
        coord_task *t = j ? find_task(j, n->type, n->index) : NULL;
        const char *rjob = json_string_value(json_object_get(r, "job"));
        const char *rtype = json_string_value(json_object_get(r, "type"));
        json_t *rgen = json_object_get(r, "generation"), *rindex = json_object_get(r, "index");
        if (t) {
            t->last_heartbeat = now;
        }
        if (t && rjob && rtype && !strcmp(rjob, j->name) && !strcmp(rtype, t->type) &&
            json_integer_value(rgen) == n->generation && json_integer_value(rindex) == t->index) {
            json_t *stats = json_object_get(r, "stats");
            if (json_is_object(stats)) {
                if (json_is_integer(json_object_get(stats, "updates")))
                    t->updates = json_integer_value(json_object_get(stats, "updates"));
                if (json_is_integer(json_object_get(stats, "stale")))
                    t->stale = json_integer_value(json_object_get(stats, "stale"));
            }
            if (!strcmp(state, "running") && t->state == TASK_PENDING) {
                t->state = TASK_RUNNING;
                j->dirty = true;
                task_event(c, j, t, now);
                bool all = true;
                for (int i = 0; i < j->n_tasks; i++)
                    all = all && j->tasks[i].state == TASK_RUNNING;
                if (all && j->phase == COORD_RUNNING) {
                    char msg[COORD_TEXT_MAX];
                    snprintf(msg, sizeof msg, "all %d tasks running", j->n_tasks);
                    set_phase(c, j, COORD_RUNNING, "JobRunning", msg, now);
                }
            } else if (!strcmp(state, "succeeded") && t->state != TASK_SUCCEEDED) {
                t->state = TASK_SUCCEEDED;
                j->dirty = true;
                task_event(c, j, t, now);
                if (is_chief(j, t)) {
                    json_t *res = json_object_get(r, "result");
                    double acc = num(res, "accuracy"), tl = num(res, "test_loss"),
                           steps = num(res, "steps");
                    if (!isnan(acc))
                        j->accuracy = acc;
                    if (!isnan(tl))
                        j->test_loss = tl;
                    if (!isnan(steps) && (int64_t)steps > j->global_step)
                        j->global_step = (int64_t)steps;
                    for (int i = 0; i < j->n_tasks; i++)
                        if (j->tasks[i].state == TASK_RUNNING ||
                            j->tasks[i].state == TASK_PENDING) {
                            j->tasks[i].state = TASK_SUCCEEDED;
                            task_event(c, j, &j->tasks[i], now);
                        }
                    char msg[COORD_TEXT_MAX];
                    if (!isnan(acc))
                        snprintf(msg, sizeof msg,
                                 "reached step %" PRId64 " of %" PRId64 "; test accuracy %.4f",
                                 j->global_step, (int64_t)j->spec.training.max_steps, acc);
                    else
                        snprintf(msg, sizeof msg, "reached step %" PRId64 " of %" PRId64,
                                 j->global_step, (int64_t)j->spec.training.max_steps);
                    finish(c, j, COORD_SUCCEEDED, "JobSucceeded", msg, now);
                }
            } else if (!strcmp(state, "failed") && t->state != TASK_FAILED) {
                t->state = TASK_FAILED;
                j->dirty = true;
                task_event(c, j, t, now);
                json_t *code = json_object_get(r, "exit_code");
                const char *m = json_string_value(json_object_get(r, "message"));
                char why[COORD_TEXT_MAX];
                snprintf(why, sizeof why, "failed (exit code %d%s%.180s)",
                         (int)json_integer_value(code), m ? ": " : "", m ? m : "");
                task_failed(c, j, t, (int)json_integer_value(code), false, why, now);
            }
        }
    }
    admit_all(c, now);
}

json_t *coord_node_assignment(const coord_cluster *c, const coord_node *n) {
    if (!n->job[0])
        return json_null();
    coord_job *j = coord_job_find(c, n->job);
    if (!j)
        return json_null();
    const char *why;
    char *tf = coord_job_tf_config(j, n->type, n->index, &why);
    json_t *spec = json_loads(j->spec_json, 0, NULL);
    coord_task *t = find_task(j, n->type, n->index);
    json_t *a = json_pack("{s:s, s:i, s:s, s:i, s:s?, s:o?, s:I}", "job", j->name, "generation",
                          n->generation, "type", n->type, "index", n->index, "tf_config", tf,
                          "spec", spec, "incarnation", (json_int_t)(t ? t->incarnation : 0));
    pf_free(tf);
    return a ? a : json_null();
}

void coord_node_remove(coord_cluster *c, coord_node *n, double now) {
    char msg[COORD_TEXT_MAX];
    if (n->job[0]) {
        coord_job *j = coord_job_find(c, n->job);
        coord_task *t = j ? find_task(j, n->type, n->index) : NULL;
        n->job[0] = '\0';
        if (j && t && !coord_job_finished(j)) {
            snprintf(msg, sizeof msg, "lost: agent %s deregistered", n->id);
            t->state = TASK_LOST;
            j->dirty = true;
            task_event(c, j, t, now);
            task_failed(c, j, t, 143, true, msg, now);
        }
    }
    snprintf(msg, sizeof msg, "%s agent %s deregistered", n->role, n->id);
    log_event(c, NULL, "Deregistered", "NodeDeregistered", msg, now);
    n->deleted = true;
    n->dirty = true;
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
        snprintf(msg, sizeof msg, "%s agent %s lost: no heartbeat for %.0f s", n->role, n->id,
                 now - n->last_heartbeat);
        log_event(c, n->job[0] ? n->job : NULL, "Lost", "NodeLost", msg, now);
        if (n->job[0]) {
            coord_job *j = coord_job_find(c, n->job);
            coord_task *t = j ? find_task(j, n->type, n->index) : NULL;
            n->job[0] = '\0';
            if (j && t && !coord_job_finished(j)) {
                t->state = TASK_LOST;
                j->dirty = true;
                task_event(c, j, t, now);
                snprintf(msg, sizeof msg, "lost: agent %s sent no heartbeat for %.0f s", n->id,
                         now - n->last_heartbeat);
                task_failed(c, j, t, 137, true, msg, now);
            }
        }
        node_event(c, n, now);
    }
    for (int i = 0; i < c->n_jobs; i++) {
        coord_job *j = c->jobs[i];
        int64_t limit = j->spec.run_policy.active_deadline_seconds;
        if (j->deleted || coord_job_finished(j) || limit <= 0 || !j->start_time ||
            now - j->start_time <= (double)limit)
            continue;
        snprintf(msg, sizeof msg, "ran longer than active_deadline_seconds (%" PRId64 " s)", limit);
        finish(c, j, COORD_FAILED, "DeadlineExceeded", msg, now);
    }
    admit_all(c, now);
}

/* --- serialisation --- */

json_t *coord_job_status_json(const coord_job *j) {
    json_t *conds = json_array();
    for (int i = 0; i < j->n_conds; i++) {
        const coord_condition *k = &j->conds[i];
        json_array_append_new(conds,
                              json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", k->type, "status",
                                        k->status, "reason", k->reason, "message", k->message,
                                        "last_transition_time", coord_time_json(k->time)));
    }
    json_t *rs = json_object();
    static const char *const types[] = {"chief", "ps", "worker"};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int active = 0, succeeded = 0, failed = 0, any = 0;
        for (int i = 0; i < j->n_tasks; i++) {
            const coord_task *t = &j->tasks[i];
            if (strcmp(t->type, types[k]) != 0)
                continue;
            any = 1;
            active += t->state == TASK_RUNNING ||
                      (t->state == TASK_PENDING && t->node_id[0] && j->phase == COORD_RUNNING);
            succeeded += t->state == TASK_SUCCEEDED;
            failed += t->state == TASK_FAILED || t->state == TASK_LOST;
        }
        if (any)
            json_object_set_new(rs, types[k],
                                json_pack("{s:i, s:i, s:i}", "active", active, "succeeded",
                                          succeeded, "failed", failed));
    }
    return json_pack(
        "{s:s, s:s, s:o, s:I, s:I, s:o, s:o, s:o, s:f, s:f, s:i, s:i, s:o, s:o, "
        "s:o, s:o}",
        "phase", phase_names[j->phase], "message", j->message, "conditions", conds, "global_step",
        (json_int_t)j->global_step, "max_steps", (json_int_t)j->spec.training.max_steps, "loss",
        json_number_or_null(j->loss), "accuracy", json_number_or_null(j->accuracy), "test_loss",
        json_number_or_null(j->test_loss), "examples_per_sec", j->examples_per_sec, "steps_per_sec",
        j->steps_per_sec, "restarts", j->restarts, "generation", j->generation, "create_time",
        coord_time_json(j->create_time), "start_time", coord_time_json(j->start_time),
        "completion_time", coord_time_json(j->completion_time), "replica_statuses", rs);
}

void coord_job_status_from_json(coord_job *j, json_t *s) {
    const char *phase = json_string_value(json_object_get(s, "phase"));
    for (size_t i = 0; phase && i < sizeof phase_names / sizeof phase_names[0]; i++)
        if (!strcmp(phase, phase_names[i]))
            j->phase = (coord_phase)i;
    const char *m = json_string_value(json_object_get(s, "message"));
    snprintf(j->message, sizeof j->message, "%s", m ? m : "");
    size_t i;
    json_t *k;
    j->n_conds = 0;
    json_array_foreach(json_object_get(s, "conditions"), i, k) {
        if (j->n_conds == COORD_MAX_CONDS)
            break;
        coord_condition *d = &j->conds[j->n_conds++];
        const char *f[4] = {json_string_value(json_object_get(k, "type")),
                            json_string_value(json_object_get(k, "status")),
                            json_string_value(json_object_get(k, "reason")),
                            json_string_value(json_object_get(k, "message"))};
        snprintf(d->type, sizeof d->type, "%s", f[0] ? f[0] : "");
        snprintf(d->status, sizeof d->status, "%s", f[1] ? f[1] : "");
        snprintf(d->reason, sizeof d->reason, "%s", f[2] ? f[2] : "");
        snprintf(d->message, sizeof d->message, "%s", f[3] ? f[3] : "");
        d->time = time_from_json(json_object_get(k, "last_transition_time"));
    }
    j->global_step = (int64_t)json_integer_value(json_object_get(s, "global_step"));
    j->loss = num(s, "loss");
    j->accuracy = num(s, "accuracy");
    j->test_loss = num(s, "test_loss");
    j->examples_per_sec = isnan(num(s, "examples_per_sec")) ? 0 : num(s, "examples_per_sec");
    j->steps_per_sec = isnan(num(s, "steps_per_sec")) ? 0 : num(s, "steps_per_sec");
    j->restarts = (int)json_integer_value(json_object_get(s, "restarts"));
    j->generation = (int)json_integer_value(json_object_get(s, "generation"));
    j->create_time = time_from_json(json_object_get(s, "create_time"));
    j->start_time = time_from_json(json_object_get(s, "start_time"));
    j->completion_time = time_from_json(json_object_get(s, "completion_time"));
}

static const char *latest_reason(const coord_job *j) {
    const coord_condition *best = NULL;
    for (int i = 0; i < j->n_conds; i++)
        if (!strcmp(j->conds[i].status, "True") && (!best || j->conds[i].time >= best->time))
            best = &j->conds[i];
    return best ? best->reason : "";
}

json_t *coord_job_summary_json(const coord_job *j) {
    int ready[2] = {0, 0}, desired[2] = {0, 0}; /* ps, worker (with chief) */
    for (int i = 0; i < j->n_tasks; i++) {
        int w = strcmp(j->tasks[i].type, "ps") != 0;
        desired[w]++;
        ready[w] += j->tasks[i].state == TASK_RUNNING;
    }
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:o, s:o, s:f, s:f, s:o, s:o, s:o, s:i, s:{s:{s:i, "
        "s:i}, s:{s:i, s:i}}}",
        "name", j->name, "phase", phase_names[j->phase], "reason", latest_reason(j), "message",
        j->message, "mode", j->spec.training.mode == PF_MODE_SYNC ? "sync" : "async", "global_step",
        (json_int_t)j->global_step, "max_steps", (json_int_t)j->spec.training.max_steps, "loss",
        json_number_or_null(j->loss), "accuracy", json_number_or_null(j->accuracy),
        "examples_per_sec", j->examples_per_sec, "steps_per_sec", j->steps_per_sec, "create_time",
        coord_time_json(j->create_time), "start_time", coord_time_json(j->start_time),
        "completion_time", coord_time_json(j->completion_time), "restarts", j->restarts, "replicas",
        "ps", "ready", ready[0], "desired", desired[0], "worker", "ready", ready[1], "desired",
        desired[1]);
}

json_t *coord_job_json(const coord_job *j, double now) {
    (void)now;
    json_t *spec = json_loads(j->spec_json, 0, NULL);
    return json_pack("{s:s, s:o, s:o}", "name", j->name, "spec", spec ? spec : json_null(),
                     "status", coord_job_status_json(j));
}

json_t *coord_task_json(const coord_task *t, double lease, double now) {
    double age = t->last_heartbeat > 0 ? now - t->last_heartbeat : -1;
    return json_pack(
        "{s:s, s:i, s:o, s:o, s:s, s:I, s:i, s:o, s:o, s:f, s:I, s:f, s:I, s:I}", "type", t->type,
        "index", t->index, "node_id", t->node_id[0] ? json_string(t->node_id) : json_null(),
        "address", t->address[0] ? json_string(t->address) : json_null(), "state",
        task_state_names[t->state], "incarnation", (json_int_t)t->incarnation, "restarts",
        t->restarts, "last_heartbeat", coord_time_json(t->last_heartbeat), "heartbeat_age_seconds",
        age >= 0 ? json_real(age) : json_null(), "lease_seconds", lease, "step",
        (json_int_t)t->step, "examples_per_sec", t->examples_per_sec, "updates",
        (json_int_t)t->updates, "stale", (json_int_t)t->stale);
}

json_t *coord_node_json(const coord_node *n, double now) {
    const char *state = n->lost ? "lost" : (n->busy || n->job[0]) ? "busy" : "idle";
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:f, s:s}", "id", n->id, "role",
                     n->role, "address", n->address, "state", state, "job",
                     n->job[0] ? json_string(n->job) : json_null(), "type",
                     n->job[0] ? json_string(n->type) : json_null(), "index",
                     n->job[0] ? json_integer(n->index) : json_null(), "last_heartbeat",
                     coord_time_json(n->last_heartbeat), "heartbeat_age_seconds",
                     now - n->last_heartbeat, "version", n->version);
}
