/* routes_jobs.c - /api/v1/jobs and everything under it (api/rest.md). Each handler:
 * parse and validate -> change the cluster (cluster.c) under the lock -> commit -> reply. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/placement.h"
#include "psflow/spec.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/cluster_trace.h"

/* The message of a field error without the "<pointer>: " prefix pf_error puts on it: the
 * problem's errors[] carry the pointer separately. */
static const char *field_message(const pf_error *err) {
    size_t n = strlen(err->pointer);
    if (n && !strncmp(err->message, err->pointer, n) && !strncmp(err->message + n, ": ", 2))
        return err->message + n + 2;
    return err->message;
}

static void method_not_allowed(coord_request *rq, coord_reply *rp, const char *allow) {
    rp->allow = allow;
    coord_reply_problem(rp, 405, NULL, "%s is not allowed on %s (allowed: %s)", rq->method,
                        rq->path, allow);
}

static int is(const coord_request *rq, const char *method) {
    return !strcmp(rq->method, method);
}

/* POST /api/v1/jobs */
static void create_job(coord_server *s, coord_request *rq, coord_reply *rp) {
    if (!rq->body || rq->body_len == 0) {
        coord_reply_problem(rp, 400, NULL, "the request body is empty: expected a job spec");
        return;
    }
    pf_job_spec spec;
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_job_spec_parse(rq->body, rq->body_len, &spec, &err);
    if (st == PF_ERR_NOMEM) {
        coord_reply_problem(rp, 500, NULL, "out of memory");
        return;
    }
    if (st == PF_ERR_FORMAT) {
        coord_reply_problem(rp, 400, NULL, "%s", err.message);
        return;
    }
    if (st != PF_OK) {
        /* docs/design.md section 2: unknown fields are a malformed request (400); a known field
         * with a bad value is an invalid spec (422). */
        int unknown = strstr(err.message, "unknown field") != NULL;
        coord_reply_problem(
            rp, unknown ? 400 : 422,
            json_pack("[{s:s, s:s}]", "pointer", err.pointer, "message", field_message(&err)), "%s",
            err.message);
        return;
    }
    /* Admission: the data first (no lock: it reads only the filesystem), then the sizes
     * against the limits and the agents' memory. Nothing is stored for a refused job. */
    st = coord_admit_data(&s->o.limits, &spec, &err);
    pthread_mutex_lock(&s->lock);
    if (st == PF_OK)
        st = coord_admit_size(&s->o.limits, &s->cluster, &spec, &err);
    if (st != PF_OK) {
        pthread_mutex_unlock(&s->lock);
        if (st == PF_ERR_NOMEM)
            coord_reply_problem(rp, 500, NULL, "out of memory");
        else
            coord_reply_problem(
                rp, 422,
                json_pack("[{s:s, s:s}]", "pointer", err.pointer, "message", field_message(&err)),
                "%s", err.message);
        pf_job_spec_deinit(&spec);
        return;
    }
    double now = coord_now();
    coord_job *j;
    int created;
    st = coord_job_submit(&s->cluster, &spec, now, &j, &created, &err);
    if (st == PF_OK && created && coord_commit(s, now, NULL, NULL) != 0)
        st = PF_ERR_IO;
    if (st == PF_OK) {
        coord_reply_json(rp, created ? 201 : 200, coord_job_json(j, now));
        snprintf(rp->location, sizeof rp->location, "/api/v1/jobs/%s", j->name);
    } else if (st == PF_ERR_INVALID) {
        coord_reply_problem(rp, 409, NULL, "%s", err.message);
    } else if (st == PF_ERR_UNSUPPORTED) {
        coord_reply_problem(
            rp, 422,
            json_pack("[{s:s, s:s}]", "pointer", err.pointer, "message", field_message(&err)), "%s",
            err.message);
    } else {
        coord_reply_problem(rp, 503, NULL, "the job could not be stored");
    }
    pthread_mutex_unlock(&s->lock);
    pf_job_spec_deinit(&spec); /* empty when the cluster took it */
}

/* GET /api/v1/jobs pages, as Kubernetes lists do: at most `limit` jobs, newest first, and
 * metadata.continue to ask for the next page with. */
#define LIST_DEFAULT_LIMIT 500
#define LIST_MAX_LIMIT     1000

/* A continue token: the position after the last job of a page, (create_time, name), as the
 * 16 hex digits of the time's bits, '.', the name. Opaque to clients; it stays valid across
 * coordinator restarts and deletions, since it names a position, not a job. */
static void continue_token(const coord_job *j, char *out, size_t cap) {
    uint64_t bits;
    memcpy(&bits, &j->create_time, sizeof bits);
    snprintf(out, cap, "%016" PRIx64 ".%s", bits, j->name);
}

static int parse_continue(const char *token, double *time, char *name, size_t cap) {
    size_t n = strlen(token);
    if (n < 18 || n > 17 + PF_NAME_MAX || token[16] != '.' || n - 17 >= cap)
        return -1;
    uint64_t bits = 0;
    for (int i = 0; i < 16; i++) {
        char c = token[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        bits = bits << 4 | (uint64_t)d;
    }
    for (const char *p = token + 17; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
            return -1;
    memcpy(time, &bits, sizeof *time);
    if (!isfinite(*time))
        return -1;
    memcpy(name, token + 17, n - 17 + 1);
    return 0;
}

static void list_jobs(coord_server *s, coord_request *rq, coord_reply *rp) {
    long long limit;
    if (coord_query_long(rq, rp, "limit", 1, LIST_MAX_LIMIT, LIST_DEFAULT_LIMIT, &limit))
        return;
    /* waiting=true: only the jobs waiting for agents (a non-null queue), what the dashboard's
     * queue view polls; the other pages' counts then say nothing, so remainingItemCount is
     * left out */
    const char *waiting_q = coord_query(rq, "waiting");
    bool waiting = waiting_q && strcmp(waiting_q, "true") == 0;
    if (waiting_q && !waiting && strcmp(waiting_q, "false") != 0) {
        coord_reply_problem(rp, 400, NULL, "query parameter waiting: must be true or false");
        return;
    }
    const char *token = coord_query(rq, "continue");
    double after_time = 0;
    char after_name[PF_NAME_MAX + 1];
    if (token && parse_continue(token, &after_time, after_name, sizeof after_name) != 0) {
        coord_reply_problem(rp, 400, NULL,
                            "query parameter continue: not a token of this API (take it from "
                            "metadata.continue of the previous page)");
        return;
    }
    pthread_mutex_lock(&s->lock);
    const coord_cluster *c = &s->cluster;
    int i = token ? coord_cluster_jobs_before(c, after_time, after_name) - 1 : c->n_jobs - 1;
    json_t *items = json_array(), *meta = json_object();
    const coord_job *last = NULL;
    for (long long taken = 0; items && i >= 0 && taken < limit; i--) {
        if (c->jobs[i]->deleted || (waiting && c->jobs[i]->queue_position <= 0))
            continue;
        last = c->jobs[i];
        json_array_append_new(items, coord_job_summary_json(last));
        taken++;
    }
    if (meta && last && i >= 0) {
        char next[40 + PF_NAME_MAX];
        continue_token(last, next, sizeof next);
        json_object_set_new(meta, "continue", json_string(next));
        if (!waiting)
            json_object_set_new(meta, "remainingItemCount", json_integer(i + 1));
    }
    pthread_mutex_unlock(&s->lock);
    coord_reply_json(
        rp, 200, items && meta ? json_pack("{s:o, s:o}", "items", items, "metadata", meta) : NULL);
    if (!items || !meta) {
        json_decref(items);
        json_decref(meta);
    }
}

/* The spec of job j with `ps` ps tasks (and `workers` workers, when > 0, for the size check),
 * validated as a submitted spec is and admitted, into *out. Replies with the problem and
 * returns -1 when it is refused. */
static int respec_ps(coord_server *s, coord_reply *rp, const coord_job *j, int ps, int workers,
                     pf_job_spec *out) {
    json_error_t jerr;
    json_t *doc = json_loads(j->spec_json, 0, &jerr), *rep = json_object_get(doc, "replicas");
    char *text = NULL;
    pf_error err;
    pf_error_clear(&err);
    pf_status st = PF_ERR_NOMEM;
    if (json_is_object(rep) && json_object_set_new(rep, "ps", json_integer(ps)) == 0 &&
        (text = json_dumps(doc, JSON_COMPACT)) != NULL)
        st = pf_job_spec_parse(text, strlen(text), out, &err);
    free(text);
    json_decref(doc);
    if (st == PF_OK) {
        pf_job_spec sized = *out; /* a shallow copy, only read */
        if (workers > 0)
            sized.replicas.worker = workers;
        st = coord_admit_size(&s->o.limits, &s->cluster, &sized, &err);
    }
    if (st == PF_OK)
        return 0;
    pf_job_spec_deinit(out);
    if (st == PF_ERR_NOMEM)
        coord_reply_problem(rp, 500, NULL, "the spec with %d ps tasks could not be built", ps);
    else /* invalid or too large with that count; a problem without a field names /replicas/ps */
        coord_reply_problem(rp, 422,
                            json_pack("[{s:s, s:s}]", "pointer",
                                      err.pointer[0] ? err.pointer : "/replicas/ps", "message",
                                      field_message(&err)),
                            "with %d ps tasks: %s", ps, err.message);
    return -1;
}

static void patch_job(coord_server *s, coord_request *rq, coord_reply *rp, coord_job *j) {
    json_t *body = coord_parse_object(rq, rp);
    if (!body)
        return;
    static const char *const keys[] = {"replicas", "suspend", NULL};
    static const char *const rkeys[] = {"worker", "ps", NULL};
    json_t *replicas = json_object_get(body, "replicas"),
           *suspend = json_object_get(body, "suspend");
    int workers = 0, ps = 0, susp = -1;
    pf_job_spec respec; /* the spec with the new ps count */
    memset(&respec, 0, sizeof respec);
    if (coord_check_keys(body, keys, "", rp))
        goto done;
    if (replicas) {
        if (!json_is_object(replicas)) {
            coord_reply_problem(
                rp, 422,
                json_pack("[{s:s, s:s}]", "pointer", "/replicas", "message", "must be an object"),
                "/replicas: must be an object like {\"worker\": 4}");
            goto done;
        }
        if (coord_check_keys(replicas, rkeys, "/replicas", rp))
            goto done;
        json_t *w = json_object_get(replicas, "worker"), *p = json_object_get(replicas, "ps");
        if (p && (!json_is_integer(p) || json_integer_value(p) < 1 ||
                  json_integer_value(p) > PF_MAX_REPLICAS)) {
            coord_reply_problem(rp, 422,
                                json_pack("[{s:s, s:s}]", "pointer", "/replicas/ps", "message",
                                          "must be an integer from 1 to 1024"),
                                "/replicas/ps: must be an integer from 1 to %d", PF_MAX_REPLICAS);
            goto done;
        }
        if (p)
            ps = (int)json_integer_value(p);
        if (w && (!json_is_integer(w) || json_integer_value(w) < 1 ||
                  json_integer_value(w) > PF_MAX_REPLICAS)) {
            coord_reply_problem(rp, 422,
                                json_pack("[{s:s, s:s}]", "pointer", "/replicas/worker", "message",
                                          "must be an integer from 1 to 1024"),
                                "/replicas/worker: must be an integer from 1 to %d",
                                PF_MAX_REPLICAS);
            goto done;
        }
        if (w)
            workers = (int)json_integer_value(w);
        if (!w && !p) {
            coord_reply_problem(
                rp, 422,
                json_pack("[{s:s, s:s}]", "pointer", "/replicas", "message", "names no count"),
                "/replicas: name a count, like {\"worker\": 4} or {\"ps\": 3}");
            goto done;
        }
    }
    if (suspend) {
        if (!json_is_boolean(suspend)) {
            coord_reply_problem(rp, 422,
                                json_pack("[{s:s, s:s}]", "pointer", "/suspend", "message",
                                          "must be true or false"),
                                "/suspend: must be true or false");
            goto done;
        }
        susp = json_is_true(suspend);
    }
    pf_error err;
    pf_error_clear(&err);
    double now = coord_now();
    pf_status st = PF_OK;
    if (workers > 0) {
        /* More workers are more push and sync buffers on every ps: admitted like a new
         * job with that count (the data was admitted with the job). */
        pf_job_spec scaled = j->spec; /* a shallow copy, only read */
        scaled.replicas.worker = workers;
        st = coord_admit_size(&s->o.limits, &s->cluster, &scaled, &err);
        if (st == PF_ERR_SPEC && !strcmp(err.pointer, "/replicas/worker")) {
            coord_reply_problem(
                rp, 422,
                json_pack("[{s:s, s:s}]", "pointer", err.pointer, "message", field_message(&err)),
                "%s", err.message);
            goto done;
        }
        if (st != PF_OK) {
            coord_reply_problem(rp, st == PF_ERR_NOMEM ? 500 : 422,
                                st == PF_ERR_NOMEM
                                    ? NULL
                                    : json_pack("[{s:s, s:s}]", "pointer", "/replicas/worker",
                                                "message", field_message(&err)),
                                "/replicas/worker: with %d workers: %s", workers, err.message);
            goto done;
        }
    }
    if (ps > 0 && ps != j->spec.replicas.ps && respec_ps(s, rp, j, ps, workers, &respec))
        goto done;
    if (respec.replicas.ps > 0) {
        /* The workers first (live when it runs), then the restart with the new ps tasks. */
        st = workers > 0 ? coord_job_patch(&s->cluster, j, workers, -1, now, &err) : PF_OK;
        if (st == PF_OK)
            st = coord_job_set_ps(&s->cluster, j, &respec, now, &err);
        workers = 0;
    }
    if (st == PF_OK)
        st = coord_job_patch(&s->cluster, j, workers, susp, now, &err);
    if (st == PF_ERR_INVALID) {
        coord_reply_problem(rp, err.pointer[0] ? 422 : 409,
                            err.pointer[0] ? json_pack("[{s:s, s:s}]", "pointer", err.pointer,
                                                       "message", field_message(&err))
                                           : NULL,
                            "%s", err.message);
    } else if (st != PF_OK || coord_commit(s, now, NULL, NULL) != 0) {
        coord_reply_problem(rp, 503, NULL, "the change could not be stored");
    } else {
        coord_reply_json(rp, 200, coord_job_json(j, now));
    }
done:
    pf_job_spec_deinit(&respec);
    json_decref(body);
}

static void tf_config(coord_request *rq, coord_reply *rp, coord_job *j) {
    const char *type = coord_query(rq, "type");
    long long index;
    if (!type || !*type) {
        coord_reply_problem(rp, 400, NULL,
                            "query parameter type is required (chief, ps, worker or evaluator)");
        return;
    }
    if (strcmp(type, "chief") && strcmp(type, "ps") && strcmp(type, "worker") &&
        strcmp(type, "evaluator")) {
        coord_reply_problem(rp, 400, NULL,
                            "query parameter type: unknown task type \"%.20s\" (expected chief, "
                            "ps, worker or evaluator)",
                            type);
        return;
    }
    if (coord_query_long(rq, rp, "index", 0, PF_MAX_REPLICAS, -1, &index))
        return;
    if (index < 0) {
        coord_reply_problem(rp, 400, NULL, "query parameter index is required");
        return;
    }
    const char *why;
    char *tf = coord_job_tf_config(j, type, (int)index, &why);
    if (!tf) {
        int missing = !strcmp(why, "the job has no such task");
        coord_reply_problem(rp, missing ? 404 : 409, NULL, "job %s, task %.20s %lld: %s", j->name,
                            type, index, why);
        return;
    }
    rp->status = 200;
    rp->text = tf;
    rp->content_type = "application/json";
}

/* A ps task's dynamic tables as GET .../placement lists them (an empty array: none). */
static json_t *task_tables_json(const coord_task *task) {
    json_t *out = json_array();
    for (int i = 0; out && i < task->n_tables; i++) {
        const coord_table_stats *t = &task->tables[i];
        json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "table",
                              t->table, "rows", (json_int_t)t->rows, "max_rows",
                              (json_int_t)t->max_rows, "admitted", (json_int_t)t->admitted,
                              "refused", (json_int_t)t->refused, "evicted", (json_int_t)t->evicted,
                              "lookups", (json_int_t)t->lookups, "misses", (json_int_t)t->misses,
                              "bytes", (json_int_t)t->bytes, "lookups_per_sec", t->lookups_per_sec);
        if (!o || json_array_append_new(out, o) != 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

static json_t *placement_json(const coord_job *j) {
    pf_placement p;
    if (pf_placement_compute(&j->spec, &p) != PF_OK)
        return NULL;
    json_t *shards = pf_placement_shards_json(&p, j->spec.model.n_embeddings), *ps = json_array();
    int64_t total = 0;
    for (int t = 0; shards && ps && t < p.n_ps; t++) {
        const coord_task *task = coord_task_find((coord_job *)j, "ps", t);
        coord_task none = {0};
        if (!task)
            task = &none;
        json_array_append_new(
            ps, json_pack(
                    "{s:i, s:I, s:i, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:o*}", "task", t,
                    "bytes", (json_int_t)p.bytes_per_ps[t], "shards", p.shards_per_ps[t], "updates",
                    (json_int_t)task->updates, "stale", (json_int_t)task->stale, "rows_pulled",
                    (json_int_t)task->rows_pulled, "rows_pushed", (json_int_t)task->rows_pushed,
                    "rows_pulled_per_sec", task->rows_pulled_per_sec, "rows_pushed_per_sec",
                    task->rows_pushed_per_sec, "updates_per_sec", task->updates_per_sec,
                    "updated_bytes_per_sec", task->updates_per_sec * (double)p.bytes_per_ps[t],
                    "tables", task_tables_json(task)));
        total += p.bytes_per_ps[t];
    }
    json_t *out = shards && ps ? json_pack("{s:I, s:f, s:o, s:o}", "total_bytes", (json_int_t)total,
                                           "imbalance", pf_placement_imbalance(&p), "shards",
                                           shards, "ps", ps)
                               : NULL;
    if (!out) {
        json_decref(shards);
        json_decref(ps);
    }
    pf_placement_deinit(&p);
    return out;
}

/* POST .../metrics: validated before anything is stored. */
typedef struct metrics_post {
    const char *job, *task;
    uint64_t incarnation;
    json_t *points, *evals;
    int max_rows; /* the task's share of the job's metric rows */
} metrics_post;

static int store_metrics(coord_store *st, void *ctx) {
    metrics_post *m = ctx;
    return coord_store_add_metrics(st, m->job, m->task, m->incarnation, m->points, m->evals,
                                   m->max_rows) == PF_OK
               ? 0
               : -1;
}

/* The training tasks of j (chief and workers): they share its metric rows. */
static int training_tasks(const coord_job *j) {
    int n = 0;
    for (int i = 0; i < j->n_tasks; i++)
        n += !strcmp(j->tasks[i].type, "chief") || !strcmp(j->tasks[i].type, "worker");
    return n;
}

/* Logs a refused report: at most one line a second, with the count of those left out (the
 * server's refusal log, shared with http.c's). */
static void log_report_refused(coord_server *s, const char *job, int status, const char *why) {
    pthread_mutex_lock(&s->stats_lock);
    double now = coord_now();
    int print = now - s->refusal_logged >= 1.0;
    uint64_t skipped = s->refusals_unlogged;
    if (print) {
        s->refusal_logged = now;
        s->refusals_unlogged = 0;
    } else {
        s->refusals_unlogged++;
    }
    pthread_mutex_unlock(&s->stats_lock);
    if (print)
        fprintf(stderr,
                "psflow coordinator: refused a report for job %s: %d, %.200s (%" PRIu64
                " more refused in the last second)\n",
                job, status, why, skipped);
}

/* Whether the report body `body` of `task` comes from the task's current incarnation, and
 * from the chief when chief_only: 0 if so; else the reply is set (422 without a valid
 * incarnation, 409 or 403 from coord_job_check_reporter) and the refusal logged. */
/* The one name a task's metrics are kept under: worker 0 of a job without a chief replica is
 * its chief, and reports as "chief" or "worker-0" are both stored as "chief" (otherwise its
 * rows would count twice against the job's retention bound). */
static const char *reporter_name(const coord_job *j, const char *task) {
    return !j->spec.replicas.chief && !strcmp(task, "worker-0") ? "chief" : task;
}

static int check_reporter(coord_server *s, const coord_job *j, json_t *body, const char *task,
                          bool chief_only, uint64_t *incarnation, coord_reply *rp) {
    json_t *inc = json_object_get(body, "incarnation");
    char why[COORD_TEXT_MAX];
    if (!json_is_integer(inc) || json_integer_value(inc) <= 0) {
        coord_reply_problem(rp, 422,
                            json_pack("[{s:s, s:s}]", "pointer", "/incarnation", "message",
                                      "required: the reporting task's incarnation (an integer "
                                      ">= 1, from its assignment)"),
                            "/incarnation: required: the reporting task's incarnation (an "
                            "integer >= 1, from its assignment)");
        log_report_refused(s, j->name, 422, "no incarnation");
        return -1;
    }
    *incarnation = (uint64_t)json_integer_value(inc);
    int status = coord_job_check_reporter(j, task, *incarnation, chief_only, why, sizeof why);
    if (status) {
        coord_reply_problem(rp, status, NULL, "%s", why);
        log_report_refused(s, j->name, status, why);
        return -1;
    }
    return 0;
}

/* A 422 naming the member `key` of item `where` (a JSON pointer) and what it must be. */
static void problem_at(coord_reply *rp, const char *where, const char *key, const char *must) {
    char pointer[96];
    snprintf(pointer, sizeof pointer, "%s/%s", where, key);
    coord_reply_problem(rp, 422, json_pack("[{s:s, s:s}]", "pointer", pointer, "message", must),
                        "%s: %s", pointer, must);
}

/* Checks the items of array `name`: objects of `keys`, `required` present and numbers >= 0,
 * `integers` (steps) integers >= 0, `texts` strings, every other member a number or null. */
static int check_points(json_t *arr, const char *name, const char *const *keys,
                        const char *const *required, const char *const *integers,
                        const char *const *texts, coord_reply *rp) {
    if (!arr)
        return 0;
    char where[64];
    if (!json_is_array(arr) || json_array_size(arr) > 10000) {
        snprintf(where, sizeof where, "/%s", name);
        coord_reply_problem(rp, 422,
                            json_pack("[{s:s, s:s}]", "pointer", where, "message",
                                      "must be an array of at most 10000 objects"),
                            "%s: must be an array of at most 10000 objects", where);
        return -1;
    }
    size_t i;
    json_t *p;
    json_array_foreach(arr, i, p) {
        snprintf(where, sizeof where, "/%s/%zu", name, i);
        if (!json_is_object(p)) {
            coord_reply_problem(rp, 422, NULL, "%s: must be an object", where);
            return -1;
        }
        if (coord_check_keys(p, keys, where, rp))
            return -1;
        const char *key;
        json_t *v;
        json_object_foreach(p, key, v) {
            int text = 0;
            for (int t = 0; texts && texts[t]; t++)
                text |= !strcmp(key, texts[t]);
            if (text && (!json_is_string(v) || json_string_length(v) > 1024)) {
                coord_reply_problem(rp, 422, NULL, "%s/%s: must be a string of at most 1024 bytes",
                                    where, key);
                return -1;
            }
            if (!text && !json_is_number(v) && !json_is_null(v)) {
                coord_reply_problem(rp, 422, NULL, "%s/%s: must be a number", where, key);
                return -1;
            }
            bool integer = false;
            for (int k = 0; integers[k]; k++)
                integer |= !strcmp(key, integers[k]);
            if (integer && (!json_is_integer(v) || json_integer_value(v) < 0)) {
                problem_at(rp, where, key, "must be an integer >= 0 (a step)");
                return -1;
            }
        }
        for (int r = 0; required[r]; r++) {
            json_t *v2 = json_object_get(p, required[r]);
            if (!json_is_number(v2) || json_number_value(v2) < 0) {
                coord_reply_problem(rp, 422, NULL, "%s/%s: required, a number >= 0", where,
                                    required[r]);
                return -1;
            }
        }
    }
    return 0;
}

/* Every step of a metrics body (points' and evals' step, rollbacks' from and to, integers
 * >= 0 by check_points) is at most the job's max_steps: no task goes past it. */
static int check_steps(json_t *body, int64_t max_steps, coord_reply *rp) {
    static const struct {
        const char *array, *key;
    } steps[] = {{"points", "step"}, {"evals", "step"}, {"rollbacks", "from"}, {"rollbacks", "to"}};
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        json_t *arr = json_object_get(body, steps[s].array);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            if (json_integer_value(json_object_get(json_array_get(arr, i), steps[s].key)) <=
                max_steps)
                continue;
            char where[64], must[96];
            snprintf(where, sizeof where, "/%s/%zu", steps[s].array, i);
            snprintf(must, sizeof must, "must be at most training.max_steps (%" PRId64 ")",
                     max_steps);
            problem_at(rp, where, steps[s].key, must);
            return -1;
        }
    }
    return 0;
}

/* An evaluation's bayes_auc (synthetic_ctr data's Bayes-optimal AUC), when a number, is an
 * AUC: in [0, 1]. Else the report is refused (422) and the refusal logged. */
static int check_bayes_auc(coord_server *s, const coord_job *j, json_t *evals, coord_reply *rp) {
    size_t i;
    json_t *o;
    json_array_foreach(evals, i, o) {
        json_t *v = json_object_get(o, "bayes_auc");
        double auc = json_number_value(v);
        if (!json_is_number(v) || (auc >= 0 && auc <= 1))
            continue;
        char where[64], why[160];
        snprintf(where, sizeof where, "/evals/%zu", i);
        problem_at(rp, where, "bayes_auc", "must be a number in [0, 1] (an AUC)");
        snprintf(why, sizeof why, "%s/bayes_auc %g is not in [0, 1]", where, auc);
        log_report_refused(s, j->name, 422, why);
        return -1;
    }
    return 0;
}

/* Each rollback goes back: to <= from (both were range-checked by check_points); a reason,
 * when given, is NonFiniteLoss (absent: a ps restarted). */
static int check_rollbacks(json_t *arr, coord_reply *rp) {
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        const char *reason = json_string_value(json_object_get(o, "reason"));
        if (reason && strcmp(reason, "NonFiniteLoss") != 0) {
            coord_reply_problem(rp, 422, NULL,
                                "/rollbacks/%zu/reason: must be \"NonFiniteLoss\" or absent", i);
            return -1;
        }
        if (json_integer_value(json_object_get(o, "to")) >
            json_integer_value(json_object_get(o, "from"))) {
            coord_reply_problem(rp, 422, NULL, "/rollbacks/%zu: to must not be past from", i);
            return -1;
        }
    }
    return 0;
}

/* The chief's rollbacks: global_step becomes the step training continues from, or the
 * newest step the same report has from after the rollback. */
static void record_rollbacks(coord_server *s, coord_job *j, json_t *rollbacks, json_t *points,
                             double now) {
    size_t i, k;
    json_t *o, *p;
    json_array_foreach(rollbacks, i, o) {
        double t = json_number_value(json_object_get(o, "time"));
        int64_t reached = -1;
        json_array_foreach(points, k, p) {
            int64_t step = json_integer_value(json_object_get(p, "step"));
            if (json_number_value(json_object_get(p, "time")) >= t && step > reached)
                reached = step;
        }
        coord_job_record_rollback(&s->cluster, j, json_integer_value(json_object_get(o, "from")),
                                  json_integer_value(json_object_get(o, "to")), reached,
                                  json_string_value(json_object_get(o, "reason")),
                                  json_string_value(json_object_get(o, "message")), now);
    }
}

static void post_metrics(coord_server *s, coord_request *rq, coord_reply *rp, const char *name) {
    json_t *body = coord_parse_object(rq, rp);
    if (!body)
        return;
    static const char *const keys[] = {"task", "incarnation", "points", "evals", "rollbacks", NULL};
    static const char *const rkeys[] = {"from", "to", "time", "reason", "message", NULL};
    static const char *const rreq[] = {"from", "to", "time", NULL};
    static const char *const rtexts[] = {"reason", "message", NULL};
    static const char *const pkeys[] = {
        "step", "time", "loss", "examples_per_sec", "step_time_seconds", "bad_lines", NULL};
    static const char *const ekeys[] = {
        "step", "time", "accuracy", "test_loss", "test_auc", "test_calibration", "bayes_auc", NULL};
    static const char *const req[] = {"step", "time", NULL};
    static const char *const steps[] = {"step", NULL}, *const rsteps[] = {"from", "to", NULL};
    static const char *const psteps[] = {"step", "bad_lines", NULL};
    const char *task = json_string_value(json_object_get(body, "task"));
    int index;
    char tail;
    uint64_t incarnation = 0;
    if (coord_check_keys(body, keys, "", rp)) {
        /* reply set */
    } else if (!task || (strcmp(task, "chief") != 0 && strcmp(task, "evaluator") != 0 &&
                         (sscanf(task, "worker-%d%c", &index, &tail) != 1 || index < 0))) {
        coord_reply_problem(rp, 422,
                            json_pack("[{s:s, s:s}]", "pointer", "/task", "message",
                                      "must be \"chief\", \"worker-<index>\" or \"evaluator\""),
                            "/task: must be \"chief\", \"worker-<index>\" or \"evaluator\"");
    } else if (json_object_get(body, "rollbacks") && strcmp(task, "chief") != 0) {
        coord_reply_problem(rp, 422,
                            json_pack("[{s:s, s:s}]", "pointer", "/rollbacks", "message",
                                      "only the chief reports rollbacks"),
                            "/rollbacks: only the chief reports rollbacks");
    } else if (!check_points(json_object_get(body, "points"), "points", pkeys, req, psteps, NULL,
                             rp) &&
               !check_points(json_object_get(body, "evals"), "evals", ekeys, req, steps, NULL,
                             rp) &&
               !check_points(json_object_get(body, "rollbacks"), "rollbacks", rkeys, rreq, rsteps,
                             rtexts, rp) &&
               !check_rollbacks(json_object_get(body, "rollbacks"), rp)) {
        pthread_mutex_lock(&s->lock);
        coord_job *j = coord_job_find(&s->cluster, name);
        if (j)
            task = reporter_name(j, task);
        if (!j) {
            coord_reply_problem(rp, 404, NULL, "no job named '%s'", name);
        } else if (check_steps(body, j->spec.training.max_steps, rp) ||
                   check_bayes_auc(s, j, json_object_get(body, "evals"), rp)) {
            /* reply set */
        } else if (check_reporter(s, j, body, task, json_object_get(body, "rollbacks") != NULL,
                                  &incarnation, rp)) {
            /* reply set: nothing changes */
        } else {
            json_t *empty = json_array();
            metrics_post m = {j->name,
                              task,
                              incarnation,
                              json_object_get(body, "points"),
                              json_object_get(body, "evals"),
                              coord_store_metric_rows_per_task(training_tasks(j))};
            if (!m.points)
                m.points = empty;
            if (!m.evals)
                m.evals = empty;
            double now = coord_now();
            if (coord_job_record_metrics_json(&s->cluster, j, task, m.points, m.evals, now) ==
                    PF_OK &&
                (record_rollbacks(s, j, json_object_get(body, "rollbacks"), m.points, now), 1) &&
                coord_commit(s, now, store_metrics, &m) == 0) {
                rp->status = 204;
            } else {
                coord_reply_problem(rp, 503, NULL, "the metrics could not be stored");
            }
            json_decref(empty);
        }
        pthread_mutex_unlock(&s->lock);
    }
    json_decref(body);
}

#define KEPT_MAX      10000 /* steps in a checkpoint report's "kept" */
#define KEPT_MAX_TEXT "10000"

/* A checkpoint report's "kept": the steps of the checkpoints on disk. */
static bool steps_array(const json_t *v) {
    if (!json_is_array(v) || json_array_size(v) > KEPT_MAX)
        return false;
    size_t i;
    const json_t *x;
    json_array_foreach(v, i, x) if (!json_is_integer(x) || json_integer_value(x) < 0) return false;
    return true;
}

/* The largest step of a "kept" that steps_array accepted; -1 when it has none. */
static int64_t newest_step(const json_t *kept) {
    int64_t newest = -1;
    for (size_t i = 0; i < json_array_size(kept); i++)
        if (json_integer_value(json_array_get(kept, i)) > newest)
            newest = json_integer_value(json_array_get(kept, i));
    return newest;
}

typedef struct checkpoint_post {
    const char *job;
    int64_t step, bytes;
    double time;
    char *files, *kept;
} checkpoint_post;

static int store_checkpoint(coord_store *st, void *ctx) {
    checkpoint_post *c = ctx;
    return coord_store_add_checkpoint(st, c->job, c->step, c->time, c->bytes, c->files, c->kept) ==
                   PF_OK
               ? 0
               : -1;
}

static void post_checkpoint(coord_server *s, coord_request *rq, coord_reply *rp, const char *name) {
    json_t *body = coord_parse_object(rq, rp);
    if (!body)
        return;
    static const char *const keys[] = {"task",  "incarnation", "step", "time",
                                       "bytes", "files",       "kept", NULL};
    const char *task = json_string_value(json_object_get(body, "task"));
    uint64_t incarnation = 0;
    json_t *step = json_object_get(body, "step"), *bytes = json_object_get(body, "bytes"),
           *files = json_object_get(body, "files"), *kept = json_object_get(body, "kept");
    if (coord_check_keys(body, keys, "", rp)) {
        /* reply set */
    } else if (kept && !steps_array(kept)) {
        coord_reply_problem(rp, 422,
                            json_pack("[{s:s, s:s}]", "pointer", "/kept", "message",
                                      "must be an array of at most " KEPT_MAX_TEXT
                                      " integers >= 0"),
                            "/kept: must be an array of at most " KEPT_MAX_TEXT " integers >= 0");
    } else if (!json_is_integer(step) || json_integer_value(step) < 0 || !json_is_integer(bytes) ||
               json_integer_value(bytes) < 0 || (files && !json_is_array(files))) {
        coord_reply_problem(rp, 422, NULL,
                            "a checkpoint needs step and bytes (integers >= 0) and files (an "
                            "array)");
    } else {
        pthread_mutex_lock(&s->lock);
        coord_job *j = coord_job_find(&s->cluster, name);
        if (!j) {
            coord_reply_problem(rp, 404, NULL, "no job named '%s'", name);
        } else if (check_reporter(s, j, body, task ? task : "(none)", true, &incarnation, rp)) {
            /* reply set: nothing changes */
        } else {
            double now = coord_now();
            checkpoint_post c = {j->name,
                                 json_integer_value(step),
                                 json_integer_value(bytes),
                                 now,
                                 files ? json_dumps(files, JSON_COMPACT) : NULL,
                                 kept ? json_dumps(kept, JSON_COMPACT) : NULL};
            /* Queued through the cluster so it is stored and streamed with the commit. */
            coord_job_record_checkpoint(&s->cluster, j, c.step, c.bytes, c.files, c.kept,
                                        newest_step(kept), now);
            if (!c.files)
                c.files = strdup("[]");
            if (c.files && coord_commit(s, now, store_checkpoint, &c) == 0)
                rp->status = 204;
            else
                coord_reply_problem(rp, 503, NULL, "the checkpoint could not be stored");
            free(c.files);
            free(c.kept);
        }
        pthread_mutex_unlock(&s->lock);
    }
    json_decref(body);
}

typedef struct log_collect {
    json_t *items;
} log_collect;

static int collect_log(int64_t id, const char *kind, const char *job, const char *data, void *ctx) {
    (void)kind, (void)job;
    log_collect *l = ctx;
    json_t *v = json_loads(data, 0, NULL);
    if (v) {
        json_object_set_new(v, "id", json_integer(id));
        json_array_append_new(l->items, v);
    }
    return 0;
}

/* GET /api/v1/jobs/{name}/metrics: the stored points from since_step on, and each ps
 * task's count of stale gradients. */
static void get_metrics(coord_server *s, coord_request *rq, coord_reply *rp, const coord_job *j) {
    long long since, max_points;
    if (!coord_query_long(rq, rp, "since_step", 0, INT64_MAX, 0, &since) &&
        !coord_query_long(rq, rp, "max_points", 1, 100000, 2000, &max_points)) {
        json_t *m = coord_store_metrics(s->store, j->name, since, (int)max_points);
        json_t *stale = json_object();
        for (int i = 0; m && stale && i < j->n_tasks; i++)
            if (!strcmp(j->tasks[i].type, "ps")) {
                char key[32];
                snprintf(key, sizeof key, "ps-%d", j->tasks[i].index);
                json_object_set_new(stale, key, json_integer(j->tasks[i].stale));
            }
        if (m)
            json_object_set_new(m, "stale", stale);
        else
            json_decref(stale);
        coord_reply_json(rp, 200, m);
    }
}

/* GET /api/v1/jobs/{name}/events: the job's log lines after since_id. */
static void get_events(coord_server *s, coord_request *rq, coord_reply *rp, const coord_job *j) {
    long long since;
    if (!coord_query_long(rq, rp, "since_id", 0, INT64_MAX, 0, &since)) {
        log_collect l = {json_array()};
        coord_store_events_after(s->store, since, j->name, "log", 1000, collect_log, &l);
        /* Only this job's log, not the agent-wide lines that have no job. */
        json_t *items = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(l.items, i, v) {
            const char *vj = json_string_value(json_object_get(v, "job"));
            if (vj && !strcmp(vj, j->name))
                json_array_append(items, v);
        }
        json_decref(l.items);
        coord_reply_json(rp, 200, json_pack("{s:o}", "items", items));
    }
}

/* POST .../trace {"steps": N} starts a trace of the job's next N steps (202), GET .../trace
 * serves the newest one (docs/profile.md, "Trace"). */
static void trace(coord_request *rq, coord_reply *rp, coord_job *j, double now) {
    if (is(rq, "GET")) {
        json_t *tr = coord_trace_json(j, now);
        if (tr)
            coord_reply_json(rp, 200, tr);
        else
            coord_reply_problem(rp, 404, NULL, "job %s has no trace: POST one first", j->name);
        return;
    }
    if (!is(rq, "POST")) {
        method_not_allowed(rq, rp, "GET, POST");
        return;
    }
    json_t *body = rq->body_len ? coord_parse_object(rq, rp) : json_object();
    if (!body)
        return;
    static const char *const keys[] = {"steps", NULL};
    json_t *steps = json_object_get(body, "steps");
    char why[200];
    if (coord_check_keys(body, keys, "", rp)) {
        /* reply set */
    } else if (steps && (!json_is_integer(steps) || json_integer_value(steps) < 1 ||
                         json_integer_value(steps) > COORD_TRACE_STEPS_MAX)) {
        coord_reply_problem(rp, 400,
                            json_pack("[{s:s, s:s}]", "pointer", "/steps", "message",
                                      "must be an integer from 1 to 200"),
                            "/steps: must be an integer from 1 to %d", COORD_TRACE_STEPS_MAX);
    } else if (coord_trace_start(j, steps ? (int)json_integer_value(steps) : 20, now, why,
                                 sizeof why) != 0) {
        coord_reply_problem(rp, 409, NULL, "%s", why);
    } else {
        snprintf(rp->location, sizeof rp->location, "/api/v1/jobs/%s/trace", j->name);
        coord_reply_json(rp, 202, coord_trace_json(j, now));
    }
    json_decref(body);
}

int coord_routes_jobs(coord_server *s, coord_request *rq, coord_reply *rp) {
    if (rq->n_seg < 1 || strcmp(rq->seg[0], "jobs") != 0)
        return 0;
    if (rq->n_seg == 1) {
        if (is(rq, "POST"))
            create_job(s, rq, rp);
        else if (is(rq, "GET"))
            list_jobs(s, rq, rp);
        else
            method_not_allowed(rq, rp, "GET, POST");
        return 1;
    }
    if (rq->n_seg > 3)
        return 0;
    const char *name = rq->seg[1];
    const char *sub = rq->n_seg == 3 ? rq->seg[2] : "";
    static const char *const subs[] = {"",        "cancel",      "tasks",  "tf_config", "placement",
                                       "metrics", "checkpoints", "events", "profile",   "trace"};
    int known = 0;
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        known |= !strcmp(sub, subs[i]);
    if (!known)
        return 0;
    /* POSTs of metrics and checkpoints take the lock themselves after validating. */
    if (!strcmp(sub, "metrics") && is(rq, "POST")) {
        post_metrics(s, rq, rp, name);
        return 1;
    }
    if (!strcmp(sub, "checkpoints") && is(rq, "POST")) {
        post_checkpoint(s, rq, rp, name);
        return 1;
    }
    pthread_mutex_lock(&s->lock);
    double now = coord_now();
    coord_job *j = coord_job_find(&s->cluster, name);
    if (!j) {
        coord_reply_problem(rp, 404, NULL, "no job named '%.70s'", name);
    } else if (!*sub) {
        if (is(rq, "GET")) {
            coord_reply_json(rp, 200, coord_job_json(j, now));
        } else if (is(rq, "PATCH")) {
            patch_job(s, rq, rp, j);
        } else if (is(rq, "DELETE")) {
            coord_job_delete(&s->cluster, j, now);
            if (coord_commit(s, now, NULL, NULL) == 0)
                rp->status = 204;
            else
                coord_reply_problem(rp, 503, NULL, "the deletion could not be stored");
        } else {
            method_not_allowed(rq, rp, "GET, PATCH, DELETE");
        }
    } else if (!strcmp(sub, "trace")) {
        trace(rq, rp, j, now);
    } else if (!strcmp(sub, "cancel")) {
        if (!is(rq, "POST")) {
            method_not_allowed(rq, rp, "POST");
        } else {
            coord_job_cancel(&s->cluster, j, now);
            if (coord_commit(s, now, NULL, NULL) == 0)
                coord_reply_json(rp, 200, coord_job_json(j, now));
            else
                coord_reply_problem(rp, 503, NULL, "the cancellation could not be stored");
        }
    } else if (!is(rq, "GET")) {
        method_not_allowed(
            rq, rp, !strcmp(sub, "metrics") || !strcmp(sub, "checkpoints") ? "GET, POST" : "GET");
    } else if (!strcmp(sub, "tasks")) {
        json_t *items = json_array();
        for (int i = 0; items && i < j->n_tasks; i++)
            json_array_append_new(items,
                                  coord_task_json(&j->tasks[i], s->cluster.lease_seconds, now));
        coord_reply_json(rp, 200, items ? json_pack("{s:o}", "items", items) : NULL);
    } else if (!strcmp(sub, "tf_config")) {
        tf_config(rq, rp, j);
    } else if (!strcmp(sub, "placement")) {
        coord_reply_json(rp, 200, placement_json(j));
    } else if (!strcmp(sub, "metrics")) {
        get_metrics(s, rq, rp, j);
    } else if (!strcmp(sub, "checkpoints")) {
        coord_reply_json(rp, 200, coord_store_checkpoints(s->store, j->name));
    } else if (!strcmp(sub, "events")) {
        get_events(s, rq, rp, j);
    } else if (!strcmp(sub, "profile")) {
        coord_reply_json(rp, 200, coord_job_profile_json(j));
    }
    pthread_mutex_unlock(&s->lock);
    return 1;
}
