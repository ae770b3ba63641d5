/* cluster_serving.c - a job's serving tasks (cluster_serving.h; docs/serving.md, "Managed").
 *
 * DESIGN: serving tasks are not members of the job's training gang: they take only the idle
 * worker agents no waiting job holds (never one a waiting job needs when they are placed;
 * once placed they keep it, except that the job's own chief or worker to be replaced with
 * no idle agent left takes its last server's: coord_serving_yield), one at a time, from the
 * job's first admission; they keep
 * their agents through the job's success, its restarts and a suspension, and give them back when
 * the job fails or is deleted. A serving task whose agent is lost, deregisters or restarts goes
 * back to Pending and is placed on the next idle worker agent; one that fails (its agent reports
 * why: a port in use, no token for an address others reach) stays Failed with the message.
 */
#include "coordinator/cluster_serving.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/cluster_events.h"
#include "psflow/mem.h"
#include "psflow/text.h"

pf_status coord_serving_make(coord_job *j) {
    int n = j->spec.serving.enabled ? j->spec.serving.replicas : 0;
    coord_serving *s = n ? pf_calloc((size_t)n, sizeof *s) : NULL;
    if (n && !s)
        return PF_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        s[i].state = TASK_PENDING;
        s[i].version = -1;
        s[i].latency_p50_ms = s[i].latency_p99_ms = NAN;
    }
    pf_free(j->serving);
    j->serving = s;
    j->n_serving = n;
    return PF_OK;
}

/* Whether serving task s of j may run: from the job's first admission until it fails or is
 * deleted. */
static bool wanted(const coord_job *j) {
    return !j->deleted && j->start_time > 0 && j->phase != COORD_FAILED;
}

static bool idle_worker(const coord_node *n) {
    return !n->lost && !n->busy && !n->deleted && n->job[0] == '\0' && !n->draining[0] &&
           !strcmp(n->role, "worker");
}

static void clear_figures(coord_serving *s) {
    s->endpoint[0] = '\0';
    s->version = -1;
    s->requests_per_sec = 0;
    s->requests_time = 0;
    s->latency_p50_ms = s->latency_p99_ms = NAN;
}

static void place(coord_cluster *c, coord_job *j, int i, coord_node *n, double now) {
    coord_serving *s = &j->serving[i];
    snprintf(n->job, sizeof n->job, "%s", j->name);
    n->generation = j->generation;
    snprintf(n->type, sizeof n->type, "serve");
    n->index = i;
    n->dirty = true;
    snprintf(s->node_id, sizeof s->node_id, "%s", n->id);
    s->state = TASK_PENDING;
    s->incarnation = (uint64_t)(now * 1e6) + 1000u + (uint64_t)i;
    s->message[0] = '\0';
    clear_figures(s);
    j->dirty = true;
    char msg[COORD_TEXT_MAX];
    snprintf(msg, sizeof msg, "serve %d assigned to agent %.200s", i, n->id);
    coord_log_event(c, j->name, "Serving", "ServingAssigned", msg, now);
    coord_node_event(c, n, now);
}

void coord_serving_place(coord_cluster *c, int spare, double now) {
    int next = 0; /* nodes before it are not idle workers */
    for (int k = 0; k < c->n_jobs && spare > 0; k++) {
        coord_job *j = c->jobs[k];
        for (int i = 0; wanted(j) && i < j->n_serving; i++) {
            if (j->serving[i].node_id[0] || j->serving[i].state != TASK_PENDING)
                continue;
            while (next < c->n_nodes && !idle_worker(c->nodes[next]))
                next++;
            if (next == c->n_nodes || spare-- <= 0)
                return;
            place(c, j, i, c->nodes[next++], now);
        }
    }
}

/* The serving task n runs, or NULL. */
static coord_serving *of_node(const coord_cluster *c, const coord_node *n, coord_job **job) {
    coord_job *j = n->job[0] && !strcmp(n->type, "serve") ? coord_job_find(c, n->job) : NULL;
    *job = j;
    if (!j || n->index < 0 || n->index >= j->n_serving ||
        strcmp(j->serving[n->index].node_id, n->id) != 0)
        return NULL;
    return &j->serving[n->index];
}

bool coord_serving_node(const coord_node *n) {
    return n->job[0] && !strcmp(n->type, "serve");
}

/* Takes its agent off s (the agent stops it on its next heartbeat). */
static void unassign(coord_cluster *c, coord_node *n, double now) {
    n->job[0] = n->type[0] = '\0';
    n->dirty = true;
    coord_node_event(c, n, now);
}

static void take_figures(coord_serving *s, const coord_report *r, double now) {
    if (!r->has_serving)
        return;
    if (r->endpoint)
        snprintf(s->endpoint, sizeof s->endpoint, "%s", r->endpoint);
    s->version = r->version;
    s->failed = r->failed;
    s->latency_p50_ms = r->latency_p50_ms;
    s->latency_p99_ms = r->latency_p99_ms;
    if (!s->requests_time || r->requests < s->requests_base) { /* the first, or restarted */
        s->requests_base = r->requests;
        s->requests_time = now;
        s->requests_per_sec = 0;
    } else if (now - s->requests_time >= 2) {
        s->requests_per_sec = (double)(r->requests - s->requests_base) / (now - s->requests_time);
        s->requests_base = r->requests;
        s->requests_time = now;
    }
    s->requests = r->requests;
}

void coord_serving_report(coord_cluster *c, coord_node *n, const coord_report *r, double now) {
    coord_job *j;
    coord_serving *s = of_node(c, n, &j);
    if (!s || !r->state || !r->job || !r->type || strcmp(r->job, j->name) != 0 ||
        strcmp(r->type, "serve") != 0 || r->index != n->index ||
        (r->incarnation && r->incarnation != s->incarnation))
        return; /* about another task, or an earlier one on this agent */
    char msg[COORD_TEXT_MAX];
    int64_t version = s->version;
    coord_task_state was = s->state;
    bool had_endpoint = s->endpoint[0] != '\0';
    if (!strcmp(r->state, "running")) {
        take_figures(s, r, now);
        if (s->state == TASK_PENDING && s->endpoint[0]) {
            s->state = TASK_RUNNING;
            snprintf(msg, sizeof msg, "serve %d answers at %.220s", n->index, s->endpoint);
            coord_log_event(c, j->name, "Serving", "ServingStarted", msg, now);
        }
    } else if (!strcmp(r->state, "failed") || !strcmp(r->state, "succeeded")) {
        s->state = TASK_FAILED; /* a server stops only when told to */
        snprintf(s->message, sizeof s->message, "%.200s",
                 r->message && r->message[0] ? r->message : "stopped");
        pf_text_cut_utf8(s->message); /* the stored status must stay valid JSON text */
        snprintf(msg, sizeof msg, "serve %d on agent %.60s failed: %.160s", n->index, n->id,
                 s->message);
        coord_log_event(c, j->name, "Warning", "ServingFailed", msg, now);
        s->node_id[0] = '\0';
        clear_figures(s);
        unassign(c, n, now);
    }
    if (version != s->version || had_endpoint != (s->endpoint[0] != '\0') || was != s->state) {
        j->dirty = true; /* the stored status and the dashboard follow a change, not a figure */
        coord_job_event(c, j, now);
    }
}

void coord_serving_node_gone(coord_cluster *c, coord_node *n, const char *why, double now) {
    coord_job *j;
    coord_serving *s = of_node(c, n, &j);
    if (!s)
        return;
    s->node_id[0] = '\0';
    s->state = TASK_PENDING; /* to the next idle worker agent */
    clear_figures(s);
    j->dirty = true;
    char msg[COORD_TEXT_MAX];
    snprintf(msg, sizeof msg, "serve %d %.200s; it goes to another agent", n->index, why);
    coord_log_event(c, j->name, "Warning", "ServingLost", msg, now);
    coord_job_event(c, j, now);
}

coord_node *coord_serving_yield(coord_cluster *c, coord_job *j, const char *type, int index,
                                double now) {
    for (int i = j->n_serving - 1; i >= 0; i--) {
        coord_serving *s = &j->serving[i];
        coord_node *n = s->node_id[0] ? coord_node_find(c, s->node_id) : NULL;
        if (!n || n->lost || !coord_serving_node(n) || strcmp(n->job, j->name) != 0 ||
            n->index != i)
            continue;
        char msg[COORD_TEXT_MAX];
        snprintf(msg, sizeof msg, "serve %d gives agent %.80s to %s %d; it waits for another", i,
                 n->id, type, index);
        coord_log_event(c, j->name, "Serving", "ServingYielded", msg, now);
        s->node_id[0] = '\0';
        s->state = TASK_PENDING;
        clear_figures(s);
        j->dirty = true;
        unassign(c, n, now);
        return n;
    }
    return NULL;
}

void coord_serving_reconcile(coord_cluster *c) {
    for (int k = 0; k < c->n_nodes; k++) { /* an agent serving a slot that does not name it */
        coord_node *n = c->nodes[k];
        coord_job *j;
        if (coord_serving_node(n) && !of_node(c, n, &j)) {
            n->job[0] = n->type[0] = '\0';
            n->dirty = true;
        }
    }
    for (int k = 0; k < c->n_jobs; k++) { /* a slot naming an agent that does not serve it */
        coord_job *j = c->jobs[k];
        for (int i = 0; i < j->n_serving; i++) {
            coord_serving *s = &j->serving[i];
            coord_node *n = s->node_id[0] ? coord_node_find(c, s->node_id) : NULL;
            if (s->node_id[0] &&
                (!n || !coord_serving_node(n) || strcmp(n->job, j->name) != 0 || n->index != i)) {
                s->node_id[0] = '\0';
                if (s->state == TASK_RUNNING || s->state == TASK_PENDING)
                    s->state = TASK_PENDING;
                clear_figures(s);
                j->dirty = true;
            }
        }
    }
}

void coord_serving_stop(coord_cluster *c, coord_job *j, double now) {
    for (int k = 0; k < c->n_nodes; k++) {
        coord_node *n = c->nodes[k];
        if (coord_serving_node(n) && !strcmp(n->job, j->name))
            unassign(c, n, now);
    }
    for (int i = 0; i < j->n_serving; i++) {
        coord_serving *s = &j->serving[i];
        if (s->state == TASK_STOPPED)
            continue;
        s->node_id[0] = '\0';
        s->state = TASK_STOPPED;
        clear_figures(s);
        j->dirty = true;
    }
}
