/* routes_ops.c - operations routes: /livez, /readyz, /version, /openapi.yaml and /metrics
 * (Prometheus text format 0.0.4, psflow_ prefix, base units, _total counters). */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/buf.h"
#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/version.h"
#include "coordinator/coordinator_internal.h"

#define METRICS_MAX (64u << 20) /* bytes of /metrics text: far above any real cluster's */
#define FILE_MAX    (16u << 20) /* bytes of openapi.yaml or the job schema */

/* The /metrics text being built; the first failed append sticks, and the text is dropped. */
typedef struct text {
    pf_buf b;
    pf_status st;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    if (t->st != PF_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    t->st = pf_buf_vprintf(&t->b, fmt, ap);
    va_end(ap);
}

/* A label value with \, " and newline escaped as the exposition format requires. */
static const char *label(const char *v, char *out, size_t cap) {
    size_t k = 0;
    for (; *v && k + 2 < cap; v++) {
        if (*v == '\\' || *v == '"') {
            out[k++] = '\\';
            out[k++] = *v;
        } else if (*v == '\n') {
            out[k++] = '\\';
            out[k++] = 'n';
        } else {
            out[k++] = *v;
        }
    }
    out[k] = '\0';
    return out;
}

static void family(text *t, const char *name, const char *type, const char *help) {
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A two-class job's test AUC and calibration, for the jobs whose chief reported them, and
 * synthetic_ctr data's Bayes-optimal test AUC beside them. */
static void job_quality(text *t, const coord_cluster *c) {
    family(t, "psflow_job_test_auc", "gauge",
           "Test AUC of each two-class job (its chief's latest evaluation).");
    for (int i = 0; i < c->n_jobs; i++)
        if (!isnan(c->jobs[i]->test_auc))
            put(t, "psflow_job_test_auc{job=\"%s\"} %.6g\n", c->jobs[i]->name,
                c->jobs[i]->test_auc);
    family(t, "psflow_job_test_calibration", "gauge",
           "Test calibration of each two-class job: mean prediction over mean label.");
    for (int i = 0; i < c->n_jobs; i++)
        if (!isnan(c->jobs[i]->test_calibration))
            put(t, "psflow_job_test_calibration{job=\"%s\"} %.6g\n", c->jobs[i]->name,
                c->jobs[i]->test_calibration);
    family(t, "psflow_job_bad_lines_skipped_total", "counter",
           "Bad input lines each job's training tasks skipped (data.on_error skip).");
    for (int i = 0; i < c->n_jobs; i++)
        if (c->jobs[i]->bad_lines > 0)
            put(t, "psflow_job_bad_lines_skipped_total{job=\"%s\"} %lld\n", c->jobs[i]->name,
                (long long)c->jobs[i]->bad_lines);
    family(t, "psflow_job_bayes_auc", "gauge",
           "Bayes-optimal test AUC of each synthetic_ctr job: the true model's, the best any "
           "model can reach on its test set.");
    for (int i = 0; i < c->n_jobs; i++)
        if (!isnan(c->jobs[i]->bayes_auc))
            put(t, "psflow_job_bayes_auc{job=\"%s\"} %.6g\n", c->jobs[i]->name,
                c->jobs[i]->bayes_auc);
}

/* Each serving task's version, predicts answered and p99 latency (jobs with a serving
 * section; a task that serves no version yet, or answered none in its last 10 s, is left out
 * of that family). */
static void job_serving(text *t, const coord_cluster *c) {
    family(t, "psflow_job_serving_version", "gauge",
           "Checkpoint step each serving task of a job serves.");
    for (int i = 0; i < c->n_jobs; i++)
        for (int k = 0; k < c->jobs[i]->n_serving; k++)
            if (c->jobs[i]->serving[k].version >= 0)
                put(t, "psflow_job_serving_version{job=\"%s\",server=\"%d\"} %" PRId64 "\n",
                    c->jobs[i]->name, k, c->jobs[i]->serving[k].version);
    family(t, "psflow_job_serving_requests_total", "counter",
           "Predict requests each serving task of a job answered, as its agent last reported.");
    for (int i = 0; i < c->n_jobs; i++)
        for (int k = 0; k < c->jobs[i]->n_serving; k++)
            put(t, "psflow_job_serving_requests_total{job=\"%s\",server=\"%d\"} %" PRId64 "\n",
                c->jobs[i]->name, k, c->jobs[i]->serving[k].requests);
    family(t, "psflow_job_serving_latency_p99_seconds", "gauge",
           "p99 predict latency of each serving task of a job over its last 10 s.");
    for (int i = 0; i < c->n_jobs; i++)
        for (int k = 0; k < c->jobs[i]->n_serving; k++)
            if (!isnan(c->jobs[i]->serving[k].latency_p99_ms))
                put(t, "psflow_job_serving_latency_p99_seconds{job=\"%s\",server=\"%d\"} %.6g\n",
                    c->jobs[i]->name, k, c->jobs[i]->serving[k].latency_p99_ms / 1e3);
}

/* Each training task's and ps's cumulative seconds per phase (GET .../profile's totals). */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The scheduling rounds (admission, replacements, preemption, serving placement): the
 * quantiles of the seconds the last COORD_ROUND_SAMPLES took, and the sum and count of all. */
static void scheduling_rounds(text *t, const coord_cluster *c) {
    family(t, "psflow_scheduling_round_seconds", "summary",
           "Seconds a scheduling round took (admission, replacements, preemption), over the "
           "last 1024 rounds.");
    int n = c->rounds < COORD_ROUND_SAMPLES ? (int)c->rounds : COORD_ROUND_SAMPLES;
    double sorted[COORD_ROUND_SAMPLES];
    memcpy(sorted, c->round_seconds, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    static const double qs[] = {0.5, 0.99, 1.0};
    for (int i = 0; i < 3 && n; i++)
        put(t, "psflow_scheduling_round_seconds{quantile=\"%g\"} %.6g\n", qs[i],
            sorted[(int)(qs[i] * (n - 1))]);
    put(t, "psflow_scheduling_round_seconds_sum %.6g\n", c->round_seconds_sum);
    put(t, "psflow_scheduling_round_seconds_count %" PRId64 "\n", c->rounds);
}

static void job_profiles(text *t, const coord_cluster *c) {
    family(t, "psflow_task_phase_seconds_total", "counter",
           "Seconds each training task spent in each phase of its steps, and each ps's service "
           "thread applying and copying (queue: its pulls' held time, summed), since the task's "
           "incarnation started.");
    for (int i = 0; i < c->n_jobs; i++)
        for (int k = 0; k < c->jobs[i]->n_tasks; k++) {
            const coord_task *task = &c->jobs[i]->tasks[k];
            int ps = !strcmp(task->type, "ps");
            bool current = coord_task_profile_current(task);
            for (int p = pf_phase_first(ps); current && p < pf_phase_end(ps); p++)
                put(t,
                    "psflow_task_phase_seconds_total{job=\"%s\",task=\"%s-%d\",phase=\"%s\"} "
                    "%.6f\n",
                    c->jobs[i]->name, task->type, task->index, pf_phase_name(p),
                    task->profile.phases[p]);
        }
}

/* Each ps's share of each dynamic embedding table, as its heartbeat last reported it. */
static void dynamic_tables(text *t, const coord_cluster *c) {
    static const struct {
        const char *name, *type, *help;
    } families[] = {
        {"psflow_table_rows", "gauge", "Rows a ps holds of a dynamic embedding table."},
        {"psflow_table_max_rows", "gauge", "The most rows a ps may hold of a dynamic table."},
        {"psflow_table_admitted_total", "counter", "Rows a ps created for ids it admitted."},
        {"psflow_table_refused_total", "counter",
         "Updates of ids without a row that a ps did not admit (their gradients dropped)."},
        {"psflow_table_evicted_total", "counter",
         "Rows a ps dropped: idle past steps_to_live, or to make room at max_rows."},
        {"psflow_table_lookups_total", "counter", "Ids a ps looked up in a dynamic table."},
        {"psflow_table_bytes", "gauge", "Memory a ps's share of a dynamic table holds."},
    };
    char name[256];
    for (int f = 0; f < 7; f++) {
        family(t, families[f].name, families[f].type, families[f].help);
        for (int i = 0; i < c->n_jobs; i++)
            for (int k = 0; k < c->jobs[i]->n_tasks; k++) {
                const coord_task *task = &c->jobs[i]->tasks[k];
                for (int n = 0; n < task->n_tables; n++) {
                    const coord_table_stats *ts = &task->tables[n];
                    const long long v[] = {ts->rows,    ts->max_rows, ts->admitted, ts->refused,
                                           ts->evicted, ts->lookups,  ts->bytes};
                    put(t, "%s{job=\"%s\",ps=\"%d\",table=\"%s\"} %lld\n", families[f].name,
                        c->jobs[i]->name, task->index, label(ts->table, name, sizeof name), v[f]);
                }
            }
    }
}

static char *prometheus(coord_server *s) {
    text t = {.st = PF_OK};
    pf_buf_init(&t.b, METRICS_MAX);
    char a[256], b[256];
    pthread_mutex_lock(&s->lock);
    double now = coord_now();
    coord_cluster *c = &s->cluster;
    family(&t, "psflow_jobs", "gauge", "Jobs by phase.");
    for (int p = COORD_CREATED; p <= COORD_FAILED; p++) {
        int n = 0;
        for (int i = 0; i < c->n_jobs; i++)
            n += (int)c->jobs[i]->phase == p;
        put(&t, "psflow_jobs{phase=\"%s\"} %d\n", coord_phase_name((coord_phase)p), n);
    }
    family(&t, "psflow_tasks", "gauge", "Tasks of all jobs by type and state.");
    static const char *const types[] = {"chief", "evaluator", "ps", "worker"};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        for (int st = TASK_PENDING; st <= TASK_STOPPED; st++) {
            int n = 0;
            for (int i = 0; i < c->n_jobs; i++)
                for (int q = 0; q < c->jobs[i]->n_tasks; q++)
                    n += !strcmp(c->jobs[i]->tasks[q].type, types[k]) &&
                         (int)c->jobs[i]->tasks[q].state == st;
            put(&t, "psflow_tasks{type=\"%s\",state=\"%s\"} %d\n", types[k],
                coord_task_state_name((coord_task_state)st), n);
        }
    family(&t, "psflow_nodes", "gauge", "Registered agents by role and state.");
    static const char *const roles[] = {"ps", "worker"};
    static const char *const nstates[] = {"idle", "busy", "lost"};
    for (size_t r = 0; r < 2; r++)
        for (size_t k = 0; k < 3; k++) {
            int n = 0;
            for (int i = 0; i < c->n_nodes; i++) {
                coord_node *nd = c->nodes[i];
                const char *st = nd->lost ? "lost" : (nd->busy || nd->job[0]) ? "busy" : "idle";
                n += !strcmp(nd->role, roles[r]) && !strcmp(st, nstates[k]);
            }
            put(&t, "psflow_nodes{role=\"%s\",state=\"%s\"} %d\n", roles[r], nstates[k], n);
        }
    family(&t, "psflow_node_heartbeat_age_seconds", "gauge",
           "Seconds since each agent's last heartbeat.");
    for (int i = 0; i < c->n_nodes; i++)
        put(&t, "psflow_node_heartbeat_age_seconds{node=\"%s\",role=\"%s\"} %.3f\n",
            label(c->nodes[i]->id, a, sizeof a), c->nodes[i]->role,
            now - c->nodes[i]->last_heartbeat);
    family(&t, "psflow_heartbeats_total", "counter", "Heartbeats received since start.");
    put(&t, "psflow_heartbeats_total %" PRIu64 "\n", s->heartbeats);
    family(&t, "psflow_job_global_step", "gauge", "Global step of each job.");
    for (int i = 0; i < c->n_jobs; i++)
        put(&t, "psflow_job_global_step{job=\"%s\"} %" PRId64 "\n", c->jobs[i]->name,
            c->jobs[i]->global_step);
    family(&t, "psflow_job_max_steps", "gauge", "training.max_steps of each job.");
    for (int i = 0; i < c->n_jobs; i++)
        put(&t, "psflow_job_max_steps{job=\"%s\"} %" PRId64 "\n", c->jobs[i]->name,
            (int64_t)c->jobs[i]->spec.training.max_steps);
    family(&t, "psflow_job_examples_per_second", "gauge",
           "Training examples per second of each job, summed over its workers.");
    for (int i = 0; i < c->n_jobs; i++)
        put(&t, "psflow_job_examples_per_second{job=\"%s\"} %.3f\n", c->jobs[i]->name,
            c->jobs[i]->examples_per_sec);
    family(&t, "psflow_job_loss", "gauge", "Latest training loss of each job.");
    for (int i = 0; i < c->n_jobs; i++)
        if (!isnan(c->jobs[i]->loss))
            put(&t, "psflow_job_loss{job=\"%s\"} %.6g\n", c->jobs[i]->name, c->jobs[i]->loss);
    job_quality(&t, c);
    job_serving(&t, c);
    job_profiles(&t, c);
    dynamic_tables(&t, c);
    family(&t, "psflow_job_restarts_total", "counter", "Gang restarts of each job.");
    for (int i = 0; i < c->n_jobs; i++)
        put(&t, "psflow_job_restarts_total{job=\"%s\"} %d\n", c->jobs[i]->name,
            c->jobs[i]->restarts);
    scheduling_rounds(&t, c);
    family(&t, "psflow_job_preemptions_total", "counter",
           "Times a job of higher priority stopped each job to take its agents.");
    for (int i = 0; i < c->n_jobs; i++)
        put(&t, "psflow_job_preemptions_total{job=\"%s\"} %d\n", c->jobs[i]->name,
            c->jobs[i]->preemptions);
    family(&t, "psflow_http_connections", "gauge",
           "Open HTTP connections, the reserve for agents and probes included.");
    put(&t, "psflow_http_connections %d\n",
        __atomic_load_n(&s->open_connections, __ATOMIC_RELAXED));
    family(&t, "psflow_http_event_streams", "gauge", "Open event streams (GET /api/v1/events).");
    put(&t, "psflow_http_event_streams %d\n", s->streams);
    pf_http_watch_counts closed = {0};
    if (s->watch)
        closed = pf_http_watch_totals(s->watch);
    family(&t, "psflow_http_connections_closed_total", "counter",
           "Connections closed while still sending their request: past --header-timeout or "
           "--body-timeout, evicted for a newcomer, or over --max-pending-per-address.");
    put(&t, "psflow_http_connections_closed_total{reason=\"deadline\"} %" PRIu64 "\n",
        closed.deadline);
    put(&t, "psflow_http_connections_closed_total{reason=\"evicted\"} %" PRIu64 "\n",
        closed.evicted);
    put(&t, "psflow_http_connections_closed_total{reason=\"address\"} %" PRIu64 "\n",
        closed.address);
    double uptime_start = s->start_time;
    pthread_mutex_unlock(&s->lock);

    family(&t, "psflow_http_requests_total", "counter",
           "HTTP requests answered, by route pattern and status code.");
    pthread_mutex_lock(&s->stats_lock);
    for (int i = 0; i < s->n_counts; i++)
        put(&t, "psflow_http_requests_total{route=\"%s\",code=\"%d\"} %" PRIu64 "\n",
            label(s->counts[i].route, b, sizeof b), s->counts[i].code, s->counts[i].count);
    pthread_mutex_unlock(&s->stats_lock);
    family(&t, "psflow_coordinator_start_time_seconds", "gauge",
           "Unix time the coordinator started.");
    put(&t, "psflow_coordinator_start_time_seconds %.3f\n", uptime_start);
    family(&t, "psflow_build_info", "gauge", "Version of this coordinator (value 1).");
    put(&t, "psflow_build_info{version=\"%s\",git=\"%s\"} 1\n", PSFLOW_VERSION, PSFLOW_GIT);
    if (t.st != PF_OK) {
        pf_buf_deinit(&t.b);
        return NULL;
    }
    return pf_buf_detach(&t.b);
}

static void read_file_reply(coord_reply *rp, const char *path, const char *type) {
    char *body = NULL;
    size_t len;
    pf_error err;
    pf_status st = path ? pf_fs_read_file(path, FILE_MAX, &body, &len, &err) : PF_ERR_NOT_FOUND;
    if (st == PF_ERR_NOMEM) {
        coord_reply_problem(rp, 500, NULL, "out of memory");
        return;
    }
    if (st != PF_OK) {
        coord_reply_problem(rp, 404, NULL, "the API description is not installed here");
        return;
    }
    rp->status = 200;
    rp->text = body;
    rp->content_type = type;
}

int coord_routes_ops(coord_server *s, coord_request *rq, coord_reply *rp) {
    const char *p = rq->path;
    int get = !strcmp(rq->method, "GET") || !strcmp(rq->method, "HEAD");
    int known = !strcmp(p, "/livez") || !strcmp(p, "/readyz") || !strcmp(p, "/version") ||
                !strcmp(p, "/metrics") || !strcmp(p, "/openapi.yaml") ||
                !strcmp(p, "/schemas/job.schema.json");
    if (!known)
        return 0;
    if (!get) {
        rp->allow = "GET, HEAD";
        coord_reply_problem(rp, 405, NULL, "%s is not allowed on %s", rq->method, p);
        return 1;
    }
    if (!strcmp(p, "/livez")) {
        rp->status = 200;
        rp->text = pf_malloc(4);
        if (rp->text)
            memcpy(rp->text, "ok\n", 4);
    } else if (!strcmp(p, "/readyz")) {
        /* Ready once the database is open and migrated, which start() guarantees; a
         * coordinator that is stopping is no longer ready. */
        int ready = s->store && !s->stopping;
        rp->status = ready ? 200 : 503;
        rp->text = pf_malloc(16);
        if (rp->text)
            snprintf(rp->text, 16, "%s\n", ready ? "ok" : "stopping");
    } else if (!strcmp(p, "/version")) {
        coord_reply_json(rp, 200,
                         json_pack("{s:s, s:s, s:s, s:i}", "version", PSFLOW_VERSION, "git",
                                   PSFLOW_GIT, "api", "v1", "schema",
                                   coord_store_schema_version(s->store)));
    } else if (!strcmp(p, "/metrics")) {
        char *body = prometheus(s);
        if (!body) {
            coord_reply_problem(rp, 500, NULL, "out of memory");
        } else {
            rp->status = 200;
            rp->text = body;
            rp->content_type = "text/plain; version=0.0.4; charset=utf-8";
        }
    } else if (!strcmp(p, "/openapi.yaml")) {
        read_file_reply(rp, s->o.openapi_path, "application/yaml");
    } else {
        /* openapi.yaml refers to ./schemas/job.schema.json: serve it from beside the file. */
        char path[PATH_MAX];
        const char *slash = s->o.openapi_path ? strrchr(s->o.openapi_path, '/') : NULL;
        int dir = slash ? (int)(slash - s->o.openapi_path) : 1;
        snprintf(path, sizeof path, "%.*s/schemas/job.schema.json", dir,
                 slash ? s->o.openapi_path : ".");
        read_file_reply(rp, s->o.openapi_path ? path : NULL, "application/schema+json");
    }
    return 1;
}
