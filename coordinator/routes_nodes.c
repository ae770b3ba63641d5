/* routes_nodes.c - /api/v1/nodes: agent registration, heartbeats (lease renewal; the reply
 * carries the agent's assignment), deregistration and listing (api/rest.md). */
#include <stdio.h>
#include <string.h>

#include "psflow/address.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/cluster_trace.h"

static int valid_id(const char *id) {
    size_t n = strlen(id);
    if (n == 0 || n >= COORD_ID_MAX)
        return 0;
    for (const char *p = id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return 0;
    return 1;
}

static void problem_field(coord_reply *rp, int status, const char *pointer, const char *message) {
    coord_reply_problem(rp, status,
                        json_pack("[{s:s, s:s}]", "pointer", pointer, "message", message), "%s: %s",
                        pointer, message);
}

/* The live agent other than `id` that advertises `address`, or NULL: two agents at one
 * address would put it twice into a job's TF_CONFIG. A lost agent's address is free again. */
static const coord_node *address_holder(const coord_cluster *c, const char *id,
                                        const char *address) {
    for (int i = 0; i < c->n_nodes; i++) {
        const coord_node *n = c->nodes[i];
        if (!n->lost && !n->deleted && strcmp(n->id, id) != 0 && !strcmp(n->address, address))
            return n;
    }
    return NULL;
}

static void register_node(coord_server *s, coord_request *rq, coord_reply *rp) {
    json_t *body = coord_parse_object(rq, rp);
    if (!body)
        return;
    static const char *const keys[] = {"id", "role", "address", "version", "memory_bytes", NULL};
    const char *id = json_string_value(json_object_get(body, "id"));
    const char *role = json_string_value(json_object_get(body, "role"));
    const char *address = json_string_value(json_object_get(body, "address"));
    json_t *version = json_object_get(body, "version");
    json_t *memory = json_object_get(body, "memory_bytes");
    char host[COORD_ADDR_MAX];
    int port;
    if (coord_check_keys(body, keys, "", rp)) {
        /* reply set */
    } else if (!id || !valid_id(id)) {
        problem_field(rp, 422, "/id", "required: 1 to 127 characters of [A-Za-z0-9._-]");
    } else if (!role || (strcmp(role, "ps") != 0 && strcmp(role, "worker") != 0)) {
        problem_field(rp, 422, "/role", "required: \"ps\" or \"worker\"");
    } else if (!address || strlen(address) >= COORD_ADDR_MAX ||
               pf_split_host_port(address, host, sizeof host, &port) != 0 || port == 0) {
        problem_field(rp, 422, "/address", "required: host:port with a port from 1 to 65535");
    } else if (version && (!json_is_string(version) || json_string_length(version) >= 32)) {
        problem_field(rp, 422, "/version", "must be a string of fewer than 32 characters");
    } else if (memory && !json_is_null(memory) &&
               (!json_is_integer(memory) || json_integer_value(memory) < 0 ||
                json_integer_value(memory) > ((json_int_t)1 << 60))) {
        problem_field(rp, 422, "/memory_bytes",
                      "must be an integer from 0 (unknown) to 2^60: the bytes the agent's tasks "
                      "may use");
    } else {
        pthread_mutex_lock(&s->lock);
        double now = coord_now();
        coord_node *n;
        int created;
        const coord_node *holder = address_holder(&s->cluster, id, address);
        if (holder) {
            coord_reply_problem(rp, 409, NULL,
                                "address %s is advertised by the live %s agent %s: give each "
                                "agent its own address (--advertise HOST:PORT)",
                                address, holder->role, holder->id);
        } else if (coord_node_register(&s->cluster, id, role, address, json_string_value(version),
                                       json_is_integer(memory) ? (int64_t)json_integer_value(memory)
                                                               : 0,
                                       now, &n, &created) != PF_OK ||
                   coord_commit(s, now, NULL, NULL) != 0) {
            coord_reply_problem(rp, 503, NULL, "the registration could not be stored");
        } else {
            coord_reply_json(
                rp, created ? 201 : 200,
                json_pack("{s:s, s:f, s:f}", "id", id, "lease_seconds", s->cluster.lease_seconds,
                          "heartbeat_seconds",
                          s->cluster.lease_seconds / 10 < 1 ? s->cluster.lease_seconds / 10 : 1.0));
            snprintf(rp->location, sizeof rp->location, "/api/v1/nodes/%s", id);
        }
        pthread_mutex_unlock(&s->lock);
    }
    json_decref(body);
}

static void heartbeat(coord_server *s, coord_request *rq, coord_reply *rp, const char *id) {
    json_t *body = coord_parse_object(rq, rp);
    if (!body)
        return;
    static const char *const keys[] = {
        "state",  "job",   "generation", "type",        "index",   "exit_code", "message", "reason",
        "result", "stats", "workers",    "incarnation", "serving", "profile",   "trace",   NULL};
    const char *state = json_string_value(json_object_get(body, "state"));
    json_t *exit_code = json_object_get(body, "exit_code"),
           *result = json_object_get(body, "result");
    json_t *steps = json_object_get(result, "steps");
    static const char *const states[] = {"idle", "running", "succeeded", "failed"};
    int ok = 0;
    for (size_t i = 0; state && i < sizeof states / sizeof states[0]; i++)
        ok |= !strcmp(state, states[i]);
    if (coord_check_keys(body, keys, "", rp)) {
        /* reply set */
    } else if (!ok) {
        problem_field(rp, 422, "/state", "required: idle, running, succeeded or failed");
    } else if (json_object_get(body, "workers") &&
               (!json_is_integer(json_object_get(body, "workers")) ||
                json_integer_value(json_object_get(body, "workers")) < 1 ||
                json_integer_value(json_object_get(body, "workers")) > PF_MAX_REPLICAS)) {
        problem_field(rp, 422, "/workers",
                      "must be an integer between 1 and 1024 (replicas.worker)");
    } else if (json_object_get(body, "incarnation") &&
               (!json_is_integer(json_object_get(body, "incarnation")) ||
                json_integer_value(json_object_get(body, "incarnation")) < 0)) {
        problem_field(rp, 422, "/incarnation",
                      "must be an integer >= 0: the incarnation of the task's assignment");
    } else if (exit_code && (!json_is_integer(exit_code) || json_integer_value(exit_code) < 0 ||
                             json_integer_value(exit_code) > 255)) {
        problem_field(rp, 422, "/exit_code", "must be an integer from 0 to 255");
    } else if (json_object_get(body, "serving") &&
               !json_is_object(json_object_get(body, "serving"))) {
        problem_field(rp, 422, "/serving", "must be an object (a serving task's figures)");
    } else if (json_object_get(body, "trace") && !json_is_object(json_object_get(body, "trace"))) {
        problem_field(rp, 422, "/trace", "must be an object (a trace's spans)");
    } else if (result && !json_is_object(result)) {
        problem_field(rp, 422, "/result", "must be an object");
    } else if (steps && (!json_is_integer(steps) || json_integer_value(steps) < 0)) {
        problem_field(rp, 422, "/result/steps", "must be an integer >= 0 (the steps reached)");
    } else {
        pthread_mutex_lock(&s->lock);
        double now = coord_now();
        coord_node *n = coord_node_find(&s->cluster, id);
        if (!n) {
            coord_reply_problem(rp, 404, NULL, "no node '%.100s': register it first", id);
        } else {
            bool changed = coord_node_heartbeat_json(&s->cluster, n, body, now);
            json_t *spans = json_object_get(body, "trace");
            coord_trace_take(&s->cluster, n, spans, now);
            /* Nothing to write for a plain lease renewal: leases are in memory and restart
             * with the coordinator, and the figures a report carries are written with the
             * next commit; state changes are committed before the answer. */
            bool commit = changed || spans || s->cluster.n_pending > 0;
            json_t *as = NULL;
            if (commit && coord_commit(s, now, NULL, NULL) != 0) {
                coord_reply_problem(rp, 503, NULL, "the heartbeat could not be stored");
            } else if (!(as = coord_node_assignment(&s->cluster, n)) ||
                       coord_assignment_add_key(as, &s->cluster, n, s->dataplane_secret) != 0) {
                json_decref(as); /* never an assignment without its key */
                coord_reply_problem(rp, 503, NULL, "out of memory");
            } else {
                /* time: the agent's clock sample (a trace's spans in this clock) */
                json_t *reply =
                    json_pack("{s:f, s:f, s:o, s:f}", "lease_seconds", s->cluster.lease_seconds,
                              "heartbeat_seconds", 1.0, "assignment", as, "time", coord_now());
                json_t *trace = coord_trace_directive(&s->cluster, n, now);
                if (reply && trace)
                    json_object_set_new(reply, "trace", trace);
                else
                    json_decref(trace);
                coord_reply_json(rp, 200, reply);
            }
            s->heartbeats++;
        }
        pthread_mutex_unlock(&s->lock);
    }
    json_decref(body);
}

int coord_routes_nodes(coord_server *s, coord_request *rq, coord_reply *rp) {
    if (rq->n_seg < 1 || strcmp(rq->seg[0], "nodes") != 0 || rq->n_seg > 3)
        return 0;
    if (rq->n_seg == 1) {
        if (!strcmp(rq->method, "POST")) {
            register_node(s, rq, rp);
        } else if (!strcmp(rq->method, "GET")) {
            pthread_mutex_lock(&s->lock);
            double now = coord_now();
            json_t *items = json_array();
            for (int i = 0; items && i < s->cluster.n_nodes; i++)
                json_array_append_new(items, coord_node_json(s->cluster.nodes[i], now));
            pthread_mutex_unlock(&s->lock);
            coord_reply_json(rp, 200, items ? json_pack("{s:o}", "items", items) : NULL);
        } else {
            rp->allow = "GET, POST";
            coord_reply_problem(rp, 405, NULL, "%s is not allowed on %s", rq->method, rq->path);
        }
        return 1;
    }
    const char *id = rq->seg[1];
    if (rq->n_seg == 3) {
        if (strcmp(rq->seg[2], "heartbeat") != 0)
            return 0;
        if (strcmp(rq->method, "POST") != 0) {
            rp->allow = "POST";
            coord_reply_problem(rp, 405, NULL, "%s is not allowed on %s", rq->method, rq->path);
        } else {
            heartbeat(s, rq, rp, id);
        }
        return 1;
    }
    pthread_mutex_lock(&s->lock);
    double now = coord_now();
    coord_node *n = coord_node_find(&s->cluster, id);
    if (!n) {
        coord_reply_problem(rp, 404, NULL, "no node '%.100s'", id);
    } else if (!strcmp(rq->method, "GET")) {
        coord_reply_json(rp, 200, coord_node_json(n, now));
    } else if (!strcmp(rq->method, "DELETE")) {
        coord_node_remove(&s->cluster, n, now);
        if (coord_commit(s, now, NULL, NULL) == 0)
            rp->status = 204;
        else
            coord_reply_problem(rp, 503, NULL, "the deregistration could not be stored");
    } else {
        rp->allow = "GET, DELETE";
        coord_reply_problem(rp, 405, NULL, "%s is not allowed on %s", rq->method, rq->path);
    }
    pthread_mutex_unlock(&s->lock);
    return 1;
}
