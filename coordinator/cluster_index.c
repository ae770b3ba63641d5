/* cluster_index.c - the coordinator's jobs in creation order with an index by name, and
 * its nodes: the cluster's lifecycle, a job's task list, adopting, finding, reaping and
 * freeing them (part of the state machine of cluster.h).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/cluster.h"
#include "psflow/mem.h"

/* --- lifecycle --- */

void coord_cluster_init(coord_cluster *c, double lease_seconds) {
    memset(c, 0, sizeof *c);
    c->lease_seconds = lease_seconds;
    coord_queue *q = &c->queues[c->n_queues++];
    snprintf(q->name, sizeof q->name, "%s", PF_DEFAULT_QUEUE);
    q->quota_ps = q->quota_workers = -1;
    q->quota_memory = -1;
    q->weight = 1;
}

void coord_trace_free(coord_trace *t) {
    if (!t)
        return;
    json_decref(t->tasks);
    pf_free(t);
}

void coord_job_free(coord_job *j) {
    if (!j)
        return;
    pf_free(j->spec_json);
    pf_job_spec_deinit(&j->spec);
    pf_free(j->tasks);
    pf_free(j->serving);
    coord_trace_free(j->trace);
    pf_free(j);
}

void coord_cluster_deinit(coord_cluster *c) {
    for (int i = 0; i < c->n_jobs; i++)
        coord_job_free(c->jobs[i]);
    for (int i = 0; i < c->n_nodes; i++)
        pf_free(c->nodes[i]);
    for (int i = 0; i < c->n_pending; i++)
        coord_event_deinit(&c->pending[i]);
    pf_free(c->jobs);
    pf_free(c->by_name);
    pf_free(c->by_id);
    pf_free(c->nodes);
    pf_free(c->pending);
    memset(c, 0, sizeof *c);
}

pf_status coord_job_make_tasks(coord_job *j) {
    const pf_replicas *r = &j->spec.replicas;
    int n = r->chief + r->ps + r->worker + r->evaluator;
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
    for (int i = 0; i < r->evaluator; i++, k++) /* runs on a worker agent */
        snprintf(t[k].type, sizeof t[k].type, "evaluator"), t[k].index = i;
    pf_free(j->tasks);
    j->tasks = t;
    j->n_tasks = n;
    return PF_OK;
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

/* --- the jobs' order and name index --- */

/* Creation order: (create_time, name) ascending. */
static int job_order(double t1, const char *n1, double t2, const char *n2) {
    if (t1 != t2)
        return t1 < t2 ? -1 : 1;
    return strcmp(n1, n2);
}

static uint32_t name_hash(const char *name) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

static void index_put(coord_job **slots, int cap, coord_job *j) {
    uint32_t k = name_hash(j->name) & (uint32_t)(cap - 1);
    while (slots[k])
        k = (k + 1) & (uint32_t)(cap - 1);
    slots[k] = j;
}

/* Rebuilds the name index for the current jobs, at least twice as large as their number.
 * PF_ERR_NOMEM leaves the old index (and the cluster) as it was. */
static pf_status index_rebuild(coord_cluster *c, int n_jobs) {
    int cap = 16;
    while (cap < 2 * n_jobs)
        cap *= 2;
    coord_job **slots = pf_calloc((size_t)cap, sizeof *slots);
    if (!slots)
        return PF_ERR_NOMEM;
    for (int i = 0; i < c->n_jobs; i++)
        index_put(slots, cap, c->jobs[i]);
    pf_free(c->by_name);
    c->by_name = slots;
    c->by_name_cap = cap;
    return PF_OK;
}

int coord_cluster_jobs_before(const coord_cluster *c, double create_time, const char *name) {
    int lo = 0, hi = c->n_jobs;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const coord_job *j = c->jobs[mid];
        if (job_order(j->create_time, j->name, create_time, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

pf_status coord_cluster_adopt_job(coord_cluster *c, coord_job *j) {
    if (grow((void **)&c->jobs, &c->cap_jobs, c->n_jobs, sizeof *c->jobs))
        return PF_ERR_NOMEM;
    if (2 * (c->n_jobs + 1) > c->by_name_cap && index_rebuild(c, c->n_jobs + 1) != PF_OK)
        return PF_ERR_NOMEM;
    /* Jobs normally come newest last; one older than the newest (a clock set back) moves
     * down to its place. */
    int at = c->n_jobs;
    while (at > 0 && job_order(c->jobs[at - 1]->create_time, c->jobs[at - 1]->name, j->create_time,
                               j->name) > 0)
        at--;
    memmove(&c->jobs[at + 1], &c->jobs[at], (size_t)(c->n_jobs - at) * sizeof *c->jobs);
    c->jobs[at] = j;
    c->n_jobs++;
    index_put(c->by_name, c->by_name_cap, j);
    return PF_OK;
}

/* --- the nodes' id index (a heartbeat finds its agent among ten thousand) --- */

static void node_index_put(coord_node **slots, int cap, coord_node *n) {
    uint32_t k = name_hash(n->id) & (uint32_t)(cap - 1);
    while (slots[k])
        k = (k + 1) & (uint32_t)(cap - 1);
    slots[k] = n;
}

/* Rebuilds the id index for the current nodes, at least twice as large as n_nodes.
 * PF_ERR_NOMEM leaves the old index as it was. */
static pf_status node_index_rebuild(coord_cluster *c, int n_nodes) {
    int cap = 16;
    while (cap < 2 * n_nodes)
        cap *= 2;
    coord_node **slots = pf_calloc((size_t)cap, sizeof *slots);
    if (!slots)
        return PF_ERR_NOMEM;
    for (int i = 0; i < c->n_nodes; i++)
        node_index_put(slots, cap, c->nodes[i]);
    pf_free(c->by_id);
    c->by_id = slots;
    c->by_id_cap = cap;
    return PF_OK;
}

pf_status coord_cluster_adopt_node(coord_cluster *c, coord_node *n) {
    if (grow((void **)&c->nodes, &c->cap_nodes, c->n_nodes, sizeof *c->nodes))
        return PF_ERR_NOMEM;
    if (2 * (c->n_nodes + 1) > c->by_id_cap && node_index_rebuild(c, c->n_nodes + 1) != PF_OK)
        return PF_ERR_NOMEM;
    c->nodes[c->n_nodes++] = n;
    node_index_put(c->by_id, c->by_id_cap, n);
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
    int reaped = c->n_jobs - k;
    c->n_jobs = k;
    /* The index points at freed jobs now: rebuild it, or drop it when that fails (lookups
     * then scan the jobs until the next job is adopted). */
    if (reaped && index_rebuild(c, k) != PF_OK) {
        pf_free(c->by_name);
        c->by_name = NULL;
        c->by_name_cap = 0;
    }
    k = 0;
    for (int i = 0; i < c->n_nodes; i++) {
        if (c->nodes[i]->deleted)
            pf_free(c->nodes[i]);
        else
            c->nodes[k++] = c->nodes[i];
    }
    reaped = c->n_nodes - k;
    c->n_nodes = k;
    if (reaped && node_index_rebuild(c, k) != PF_OK) { /* as for the jobs: scans until then */
        pf_free(c->by_id);
        c->by_id = NULL;
        c->by_id_cap = 0;
    }
    int queues = 0; /* jobs' queue_at hints are checked before use (coord_job_queue) */
    for (int i = 0; i < c->n_queues; i++)
        if (!c->queues[i].deleted)
            c->queues[queues++] = c->queues[i];
    c->n_queues = queues;
}

coord_job *coord_job_find(const coord_cluster *c, const char *name) {
    if (!c->by_name_cap) {
        for (int i = 0; i < c->n_jobs; i++)
            if (!c->jobs[i]->deleted && !strcmp(c->jobs[i]->name, name))
                return c->jobs[i];
        return NULL;
    }
    uint32_t mask = (uint32_t)(c->by_name_cap - 1);
    for (uint32_t k = name_hash(name) & mask; c->by_name[k]; k = (k + 1) & mask)
        if (!c->by_name[k]->deleted && !strcmp(c->by_name[k]->name, name))
            return c->by_name[k];
    return NULL;
}

coord_node *coord_node_find(const coord_cluster *c, const char *id) {
    if (!c->by_id_cap) {
        for (int i = 0; i < c->n_nodes; i++)
            if (!c->nodes[i]->deleted && !strcmp(c->nodes[i]->id, id))
                return c->nodes[i];
        return NULL;
    }
    uint32_t mask = (uint32_t)(c->by_id_cap - 1);
    for (uint32_t k = name_hash(id) & mask; c->by_id[k]; k = (k + 1) & mask)
        if (!c->by_id[k]->deleted && !strcmp(c->by_id[k]->id, id))
            return c->by_id[k];
    return NULL;
}

coord_task *coord_task_find(coord_job *j, const char *type, int index) {
    for (int i = 0; i < j->n_tasks; i++)
        if (!strcmp(j->tasks[i].type, type) && j->tasks[i].index == index)
            return &j->tasks[i];
    return NULL;
}

coord_task *coord_job_chief(coord_job *j) {
    return j->spec.replicas.chief ? coord_task_find(j, "chief", 0)
                                  : coord_task_find(j, "worker", 0);
}

/* Rows per second between two counts; 0 when the count went back (a restarted ps). */
int coord_job_membership(const coord_cluster *c, const coord_job *j) {
    int workers = j->spec.replicas.worker;
    for (int i = 0; i < c->n_nodes; i++) {
        const coord_node *n = c->nodes[i];
        if (n->draining[0] && !n->lost && !n->deleted && !strcmp(n->draining, j->name) &&
            n->index >= workers)
            workers = n->index + 1;
    }
    return workers;
}

void coord_node_assigned(const coord_cluster *c, const coord_node *n, coord_job **job,
                         coord_task **task) {
    *job = n->job[0] ? coord_job_find(c, n->job) : NULL;
    *task = *job ? coord_task_find(*job, n->type, n->index) : NULL;
}

static double rate(int64_t before, int64_t after, double seconds) {
    return after >= before && seconds > 0 ? (double)(after - before) / seconds : 0;
}

bool coord_task_profiled(const coord_task *t) {
    return !strcmp(t->type, "ps") || !strcmp(t->type, "chief") || !strcmp(t->type, "worker");
}

bool coord_task_profile_current(const coord_task *t) {
    return coord_task_profiled(t) && t->has_profile && t->profile_incarnation == t->incarnation;
}

void coord_take_profile(coord_task *t, const coord_report *r) {
    if (!r->has_profile)
        return;
    coord_profile p = r->profile;
    bool reset = !t->has_profile || t->profile_incarnation != t->incarnation ||
                 p.seconds < t->profile.seconds || p.count < t->profile.count;
    if (reset) {
        t->profile_base = p; /* the first report, or a new incarnation's */
        t->has_window = false;
    } else {
        /* A wait counted while it lasted may turn out partly push once answered: a phase
         * never goes back (the totals are counters, as Prometheus reads them). */
        for (int i = 0; i < PF_PHASE_COUNT; i++)
            if (p.phases[i] < t->profile.phases[i])
                p.phases[i] = t->profile.phases[i];
    }
    if (!reset && p.seconds - t->profile_base.seconds >= COORD_PROFILE_WINDOW) {
        coord_profile w = {
            p.seconds - t->profile_base.seconds, p.count - t->profile_base.count, {0}};
        for (int i = 0; i < PF_PHASE_COUNT; i++)
            w.phases[i] = p.phases[i] - t->profile_base.phases[i]; /* >= 0: never back */
        t->window = w;
        t->has_window = true;
        t->profile_base = p;
    }
    t->profile = p;
    t->has_profile = true;
    t->profile_incarnation = t->incarnation;
}

/* A ps's dynamic tables from r, each table's lookups a second over the time since its last
 * report (0 for a table it did not report, or a restarted ps's fewer lookups). */
static void take_tables(coord_task *t, const coord_report *r, double now) {
    if (r->n_tables == 0)
        return;
    coord_table_stats next[PF_MAX_EMBEDDINGS];
    for (int i = 0; i < r->n_tables; i++) {
        next[i] = r->tables[i];
        for (int k = 0; k < t->n_tables; k++)
            if (!strcmp(t->tables[k].table, next[i].table) && t->tables_time > 0 &&
                now > t->tables_time && next[i].lookups >= t->tables[k].lookups)
                next[i].lookups_per_sec =
                    (double)(next[i].lookups - t->tables[k].lookups) / (now - t->tables_time);
    }
    memcpy(t->tables, next, (size_t)r->n_tables * sizeof *next);
    t->n_tables = r->n_tables;
    t->tables_time = now;
}

void coord_take_ps_stats(coord_job *j, coord_task *t, const coord_report *r, double now) {
    if (r->has_input && t->index == 0 && j->spec.data.splits == PF_SPLITS_DYNAMIC) {
        j->dirty |= !j->has_input || j->input_epoch != r->input_epoch ||
                    j->input_done != r->input_done || j->input_finished != r->input_finished;
        j->has_input = true;
        j->input_epoch = r->input_epoch;
        j->input_splits = r->input_splits;
        j->input_done = r->input_done;
        j->input_leased = r->input_leased;
        j->input_finished = r->input_finished;
    }
    /* training task i is the chief replica when the job has one (i = 0, then worker i-1),
     * else worker i */
    for (int i = 0, chief = j->spec.replicas.chief; i < r->n_lags; i++) {
        coord_task *w =
            coord_task_find(j, chief && !i ? "chief" : "worker", chief && !i ? 0 : i - chief);
        if (w)
            w->has_lag = (w->lag = r->lags[i]) >= 0;
    }
    if (r->has_updates && r->updates >= 0) { /* updates a second over at least 2 s */
        if (t->updates_time <= 0 || r->updates < t->updates_base || now < t->updates_time) {
            t->updates_base = r->updates; /* the first report, or a restarted ps */
            t->updates_time = now;
        } else if (now - t->updates_time >= 2.0) {
            t->updates_per_sec = rate(t->updates_base, r->updates, now - t->updates_time);
            t->updates_base = r->updates;
            t->updates_time = now;
        }
    }
    take_tables(t, r, now);
    if (!r->has_rows)
        return;
    if (t->rows_time > 0 && now > t->rows_time) {
        t->rows_pulled_per_sec = rate(t->rows_pulled, r->rows_pulled, now - t->rows_time);
        t->rows_pushed_per_sec = rate(t->rows_pushed, r->rows_pushed, now - t->rows_time);
    }
    t->rows_pulled = r->rows_pulled;
    t->rows_pushed = r->rows_pushed;
    t->rows_time = now;
}
