/* routes_queues.c - /api/v1/queues: the queues jobs are admitted through, their quotas and
 * weights, and what each holds (api/rest.md). Each handler: parse and validate -> change the
 * cluster (cluster_queues.c) under the lock -> commit -> reply. A change takes effect in the
 * next scheduling round (a fraction of a second). */
#include <stdio.h>
#include <string.h>

#include "psflow/spec.h"
#include "psflow/text.h"
#include "coordinator/cluster_json.h"
#include "coordinator/cluster_queues.h"
#include "coordinator/coordinator_internal.h"

static void problem_field(coord_reply *rp, int status, const char *pointer, const char *message) {
    coord_reply_problem(rp, status,
                        json_pack("[{s:s, s:s}]", "pointer", pointer, "message", message), "%s: %s",
                        pointer, message);
}

/* Reads an optional quota of at most max: absent or null is no limit (-1). 0 when read. */
static int read_quota(json_t *quota, const char *key, json_int_t max, const char *what,
                      int64_t *out, coord_reply *rp) {
    char ptr[32];
    snprintf(ptr, sizeof ptr, "/quota/%s", key);
    json_t *v = json_object_get(quota, key);
    *out = -1;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max) {
        char msg[160];
        snprintf(msg, sizeof msg, "must be an integer from 0 to %lld (%s), or null for no limit",
                 (long long)max, what);
        problem_field(rp, 422, ptr, msg);
        return -1;
    }
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* Reads the body's quota object into set; 0, or -1 with the reply set. */
static int read_quotas(json_t *quota, coord_queue *set, coord_reply *rp) {
    static const char *const quota_keys[] = {"ps", "workers", "memory_bytes", NULL};
    int64_t ps, workers;
    if (quota && !json_is_null(quota) && !json_is_object(quota)) {
        problem_field(rp, 422, "/quota",
                      "must be an object: {\"ps\": N, \"workers\": N, \"memory_bytes\": N}");
        return -1;
    }
    if (json_is_object(quota) && coord_check_keys(quota, quota_keys, "/quota", rp))
        return -1;
    if (read_quota(quota, "ps", COORD_QUEUE_QUOTA_MAX, "the ps agents its running jobs may hold",
                   &ps, rp) ||
        read_quota(quota, "workers", COORD_QUEUE_QUOTA_MAX,
                   "the worker agents its running jobs may hold", &workers, rp) ||
        read_quota(quota, "memory_bytes", COORD_QUEUE_MEMORY_QUOTA_MAX,
                   "the bytes its running jobs' tasks may need", &set->quota_memory, rp))
        return -1;
    set->quota_ps = (int)ps;
    set->quota_workers = (int)workers;
    return 0;
}

/* PUT /api/v1/queues/{name}: {"quota": {"ps": N|null, "workers": N|null, "memory_bytes":
 * N|null}, "weight": N, "priority_classes": {"name": priority, ...}}, every field optional (no
 * limit, weight 1, no classes); "name", when given, must be the path's. */
static void put_queue(coord_server *s, coord_request *rq, coord_reply *rp, const char *name) {
    if (!pf_job_name_valid(name)) {
        problem_field(rp, 400, "/name",
                      "a queue name is 1 to 63 lowercase letters, digits and '-', starting and "
                      "ending with a letter or digit");
        return;
    }
    json_t *body = coord_parse_object(rq, rp);
    if (!body)
        return;
    static const char *const keys[] = {"name", "quota", "weight", "priority_classes", NULL};
    json_t *given = json_object_get(body, "name");
    json_t *weight = json_object_get(body, "weight");
    json_t *classes = json_object_get(body, "priority_classes");
    coord_queue set = {.weight = 1};
    snprintf(set.name, sizeof set.name, "%s", name);
    const char *key;
    char why[160], ptr[96];
    if (coord_check_keys(body, keys, "", rp) ||
        read_quotas(json_object_get(body, "quota"), &set, rp)) {
        /* reply set */
    } else if (given && (!json_is_string(given) || strcmp(json_string_value(given), name))) {
        problem_field(rp, 422, "/name", "must be the queue's name in the path, or absent");
    } else if (weight && (!json_is_integer(weight) || json_integer_value(weight) < 1 ||
                          json_integer_value(weight) > COORD_QUEUE_WEIGHT_MAX)) {
        problem_field(rp, 422, "/weight", "must be an integer from 1 to 1000");
    } else if (classes && !json_is_null(classes) &&
               coord_queue_classes_read(classes, &set, &key, why, sizeof why)) {
        snprintf(ptr, sizeof ptr, "/priority_classes");
        if (key[0])
            pf_text_pointer_add(ptr, sizeof ptr, key);
        problem_field(rp, 422, ptr, why);
    } else {
        if (weight)
            set.weight = (int)json_integer_value(weight);
        pthread_mutex_lock(&s->lock);
        double now = coord_now();
        coord_queue *q;
        int created;
        pf_error err;
        pf_error_clear(&err);
        pf_status st = coord_queue_put(&s->cluster, &set, now, &q, &created, &err);
        if (st == PF_OK && coord_commit(s, now, NULL, NULL) != 0)
            st = PF_ERR_IO;
        if (st == PF_OK && (q = coord_queue_find(&s->cluster, name))) { /* reaped: again */
            coord_queues_measure(&s->cluster);
            coord_reply_json(rp, created ? 201 : 200, coord_queue_json(q));
            snprintf(rp->location, sizeof rp->location, "/api/v1/queues/%s", name);
        } else if (st == PF_ERR_INVALID) {
            coord_reply_problem(rp, 409, NULL, "%s", err.message);
        } else {
            coord_reply_problem(rp, 503, NULL, "the queue could not be stored");
        }
        pthread_mutex_unlock(&s->lock);
    }
    json_decref(body);
}

static void method_not_allowed(coord_request *rq, coord_reply *rp, const char *allow) {
    rp->allow = allow;
    coord_reply_problem(rp, 405, NULL, "%s is not allowed on %s (allowed: %s)", rq->method,
                        rq->path, allow);
}

int coord_routes_queues(coord_server *s, coord_request *rq, coord_reply *rp) {
    if (rq->n_seg < 1 || strcmp(rq->seg[0], "queues") != 0 || rq->n_seg > 2)
        return 0;
    if (rq->n_seg == 1) {
        if (strcmp(rq->method, "GET") != 0) {
            method_not_allowed(rq, rp, "GET");
            return 1;
        }
        pthread_mutex_lock(&s->lock);
        coord_queues_measure(&s->cluster);
        json_t *items = json_array();
        for (int i = 0; items && i < s->cluster.n_queues; i++)
            if (!s->cluster.queues[i].deleted)
                json_array_append_new(items, coord_queue_json(&s->cluster.queues[i]));
        pthread_mutex_unlock(&s->lock);
        coord_reply_json(rp, 200, items ? json_pack("{s:o}", "items", items) : NULL);
        return 1;
    }
    const char *name = rq->seg[1];
    if (!strcmp(rq->method, "PUT")) {
        put_queue(s, rq, rp, name);
        return 1;
    }
    if (strcmp(rq->method, "GET") != 0 && strcmp(rq->method, "DELETE") != 0) {
        method_not_allowed(rq, rp, "GET, PUT, DELETE");
        return 1;
    }
    pthread_mutex_lock(&s->lock);
    coord_queue *q = coord_queue_find(&s->cluster, name);
    pf_error err;
    pf_error_clear(&err);
    if (!q) {
        coord_reply_problem(rp, 404, NULL, "no queue '%.100s'", name);
    } else if (!strcmp(rq->method, "GET")) {
        coord_queues_measure(&s->cluster);
        coord_reply_json(rp, 200, coord_queue_json(q));
    } else if (coord_queue_delete(&s->cluster, q, &err) != PF_OK) {
        coord_reply_problem(rp, 409, NULL, "%s", err.message);
    } else if (coord_commit(s, coord_now(), NULL, NULL) == 0) {
        rp->status = 204;
    } else {
        coord_reply_problem(rp, 503, NULL, "the deletion could not be stored");
    }
    pthread_mutex_unlock(&s->lock);
    return 1;
}
