/* http.c - libmicrohttpd glue of the coordinator: request bodies (1 MiB limit), strict
 * framing and media types, bearer authentication, CORS, routing to the handlers,
 * problem+json errors, the Server-Sent Events request (its stream: events_stream.c), the
 * dashboard's static files, TLS.
 *
 * DESIGN: one thread per connection (MHD_USE_THREAD_PER_CONNECTION) with a connection cap
 * and an idle timeout, so a slow client holds only its own thread and never the others';
 * an event stream's thread sleeps on the server's condition variable between events.
 *
 * Capacity. libmicrohttpd refuses connections over --max-connections when it accepts them,
 * before a byte of the request is read, so the cap alone cannot tell an agent's heartbeat
 * from an event stream or from a client that never sends anything. Three rules keep the
 * routes the cluster lives on (GET /livez and /readyz; POST /api/v1/nodes, its heartbeats
 * and DELETE) served whatever else holds connections:
 *  - Event streams have a budget of their own, --max-streams, well below the cap: a stream
 *    over it is answered 503 with Retry-After and its connection closed, so streams never
 *    hold more than max_streams slots, however many clients ask.
 *  - The last slots (an eighth of the cap, at least 2) are a reserve. A connection accepted
 *    while every other slot is taken serves only those routes, always with
 *    "Connection: close", and it has COORD_RESERVE_TIMEOUT seconds, not
 *    --connection-timeout, to send its request, so silent clients cannot sit on the
 *    reserve. Any other request on it first shuts down the connection that has waited
 *    longest for its request, if that one was accepted before it, and takes its ordinary
 *    slot; with none, it gets 503 + Retry-After at once.
 *  - Idle connections in the ordinary slots are closed after --connection-timeout.
 *  - A request's headers are due --header-timeout seconds after the accept and its body
 *    --body-timeout after the headers, however steadily the bytes trickle in; a connection
 *    accepted while the ordinary slots are all taken first evicts the one that has waited
 *    longest for its request, if --evict-after-ms or more, and takes its slot
 *    (http_guard.h), so trickling clients give way to clients that send theirs at once.
 *  - One client address has at most --max-pending-per-address connections still sending
 *    their request; one more closes the longest-waiting of them (or itself, when none has
 *    waited --evict-after-ms). Connections being answered do not count: on loopback,
 *    behind NAT or a proxy the agents and users share an address with each other and with
 *    a flood, and a cap on all of an address's connections would lock them out.
 * An agent heartbeats every second on a fresh connection (http_client.c reuses none) and
 * is lost only after --lease-seconds without one: to starve it a flood has to refill the
 * whole reserve faster than every COORD_RESERVE_TIMEOUT seconds.
 *
 * Host. Before anything else a request's Host must be one of the coordinator's names
 * (http_guard.h; 421 otherwise), except for /livez and /readyz: DNS rebinding.
 *
 * Strictness. Everything decided from the headers alone is decided in the first call of the
 * request handler, before libmicrohttpd would send "100 Continue": a body over the limit
 * (413), Transfer-Encoding with Content-Length or two different Content-Lengths (400, the
 * framing is ambiguous), a body that is not application/json on /api/ (415). Those answers
 * close the connection when a body may follow; a 415 for a body already on its way is sent
 * once the body has been read and dropped, so the client sees it rather than a reset.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "psflow/buf.h"
#include "psflow/clock.h"
#include "psflow/mem.h"
#include "coordinator/coordinator_internal.h"

typedef struct request_state {
    pf_buf body; /* NUL-terminated, at most COORD_BODY_MAX bytes */
    int too_big;
    /* A refusal decided from the headers (the body, if any, is read and dropped): */
    int reject;       /* HTTP status, 0 = none */
    int reject_retry; /* Retry-After seconds */
    char reject_why[240];
} request_state;

/* The connection's record in the watch (http_guard.h), its socket context; NULL when it
 * could not be recorded. */
static pf_http_conn *watched(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static int in_reserve(struct MHD_Connection *c) {
    return pf_http_conn_in_reserve(watched(c));
}

/* --connection-timeout in seconds, 30 when not given. */
static unsigned connection_timeout(const coord_server *s) {
    return s->o.connection_timeout > 0 ? (unsigned)s->o.connection_timeout : 30;
}

/* A reserve connection with a whole request takes the slot of one still sending an older
 * one (pf_http_watch_promote) and gets the ordinary timeout back; 1 when it did. */
static int promote(coord_server *s, struct MHD_Connection *c) {
    if (!pf_http_watch_promote(s->watch, watched(c)))
        return 0;
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, connection_timeout(s));
    return 1;
}

/* --- counters for /metrics --- */

static void count_request(coord_server *s, const char *route, int code) {
    pthread_mutex_lock(&s->stats_lock);
    int i = 0;
    while (i < s->n_counts && (s->counts[i].route != route || s->counts[i].code != code))
        i++;
    if (i == s->n_counts) {
        if (s->n_counts == s->cap_counts) {
            int cap = s->cap_counts ? s->cap_counts * 2 : 32;
            coord_http_count *g = pf_realloc(s->counts, (size_t)cap * sizeof *g);
            if (!g) {
                pthread_mutex_unlock(&s->stats_lock);
                return;
            }
            s->counts = g;
            s->cap_counts = cap;
        }
        s->counts[i] = (coord_http_count){route, code, 0};
        s->n_counts++;
    }
    s->counts[i].count++;
    pthread_mutex_unlock(&s->stats_lock);
}

/* The route pattern a request matched, for the request counter (static strings only). */
static const char *route_pattern(const char *path, const coord_request *rq) {
    if (strncmp(path, "/api/v1/", 8) != 0) {
        static const char *const ops[] = {"/livez",   "/readyz",       "/version",
                                          "/metrics", "/openapi.yaml", "/schemas/job.schema.json"};
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
            if (!strcmp(path, ops[i]))
                return ops[i];
        return strncmp(path, "/api/", 5) ? "/{static}" : "/api/{unknown}";
    }
    if (rq->n_seg == 1 && !strcmp(rq->seg[0], "jobs"))
        return "/api/v1/jobs";
    if (rq->n_seg == 1 && !strcmp(rq->seg[0], "nodes"))
        return "/api/v1/nodes";
    if (rq->n_seg == 1 && !strcmp(rq->seg[0], "events"))
        return "/api/v1/events";
    if (rq->n_seg == 1 && !strcmp(rq->seg[0], "queues"))
        return "/api/v1/queues";
    if (rq->n_seg == 2 && !strcmp(rq->seg[0], "queues"))
        return "/api/v1/queues/{name}";
    if (rq->n_seg == 2 && !strcmp(rq->seg[0], "jobs"))
        return "/api/v1/jobs/{name}";
    if (rq->n_seg == 2 && !strcmp(rq->seg[0], "nodes"))
        return "/api/v1/nodes/{id}";
    if (rq->n_seg == 3 && !strcmp(rq->seg[0], "nodes") && !strcmp(rq->seg[2], "heartbeat"))
        return "/api/v1/nodes/{id}/heartbeat";
    if (rq->n_seg == 3 && !strcmp(rq->seg[0], "jobs")) {
        static const char *const sub[] = {
            "/api/v1/jobs/{name}/cancel",    "/api/v1/jobs/{name}/tasks",
            "/api/v1/jobs/{name}/tf_config", "/api/v1/jobs/{name}/placement",
            "/api/v1/jobs/{name}/metrics",   "/api/v1/jobs/{name}/checkpoints",
            "/api/v1/jobs/{name}/events",    "/api/v1/jobs/{name}/profile",
            "/api/v1/jobs/{name}/trace"};
        for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++)
            if (!strcmp(strrchr(sub[i], '/') + 1, rq->seg[2]))
                return sub[i];
    }
    return "/api/{unknown}";
}

/* --- authentication --- */

/* Compares in time that depends only on the lengths, not on where they differ. */
static int token_equal(const char *given, const char *want) {
    size_t a = strlen(given), b = strlen(want);
    volatile unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned char)(want[i] ^ (i < a ? given[i] : 0));
    return diff == 0;
}

/* The routes agents call: registration, heartbeat, deregistration, and the metric and
 * checkpoint reports of their tasks. */
static int agent_route(const char *method, const coord_request *rq) {
    int post = !strcmp(method, "POST");
    if (rq->n_seg < 1 || rq->n_seg > 3)
        return 0;
    if (!strcmp(rq->seg[0], "nodes"))
        return rq->n_seg == 1   ? post
               : rq->n_seg == 2 ? !strcmp(method, "DELETE")
                                : post && !strcmp(rq->seg[2], "heartbeat");
    return post && rq->n_seg == 3 && !strcmp(rq->seg[0], "jobs") &&
           (!strcmp(rq->seg[2], "metrics") || !strcmp(rq->seg[2], "checkpoints"));
}

/* 0 when the request may go on, else the refusal's status: 401 without the credential its
 * route needs (an agent route always needs the agent or the API token, even where the API
 * is open), 403 for the agent token on any other route of an API with a token. */
static int auth_refusal(coord_server *s, struct MHD_Connection *c, const char *method,
                        const coord_request *rq) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *given = h && !strncmp(h, "Bearer ", 7) ? h + 7 : NULL;
    int api = given && s->token && token_equal(given, s->token);
    int agent = given && s->agent_token && token_equal(given, s->agent_token);
    if (s->agent_token && agent_route(method, rq))
        return api || agent ? 0 : 401;
    if (!s->token || api)
        return 0;
    if (rq->n_seg == 1 && !strcmp(rq->seg[0], "events")) { /* EventSource sends no header */
        const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "access_token");
        if (q && token_equal(q, s->token))
            return 0;
    }
    return agent ? 403 : 401;
}

/* --- refusals, CORS --- */

static const char *header(struct MHD_Connection *c, const char *name) {
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/* Logs a refused request: at most one line a second, with the count of those left out. */
static void log_refusal(coord_server *s, struct MHD_Connection *c, const char *method,
                        const char *url, int status, const char *why) {
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
    if (!print)
        return;
    char addr[INET6_ADDRSTRLEN] = "?";
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ci->client_addr)->sin_addr, addr,
                  sizeof addr);
    char more[64] = "";
    if (skipped)
        snprintf(more, sizeof more, " (%" PRIu64 " more refused in the last second)", skipped);
    fprintf(stderr, "psflow coordinator: refused %s %.120s from %s: %d, %.200s%s\n", method, url,
            addr, status, why, more);
}

/* The --cors-origin entry that origin names (scheme and host compared without case), or
 * NULL. */
static const char *cors_match(const coord_server *s, const char *origin) {
    for (int i = 0; origin && i < s->o.n_cors_origins; i++)
        if (!strcasecmp(origin, s->o.cors_origins[i]))
            return s->o.cors_origins[i];
    return NULL;
}

/* True when origin is the coordinator itself as the client addressed it (scheme + Host),
 * i.e. the dashboard it serves. */
static int same_origin(const coord_server *s, struct MHD_Connection *c, const char *origin) {
    const char *host = header(c, "Host");
    const char *scheme = s->o.tls_cert_pem ? "https://" : "http://";
    size_t n = strlen(scheme);
    return host && !strncasecmp(origin, scheme, n) && !strcasecmp(origin + n, host);
}

static void add_cors_headers(const coord_server *s, struct MHD_Connection *c,
                             struct MHD_Response *r) {
    if (!s->o.n_cors_origins)
        return;
    MHD_add_response_header(r, "Vary", "Origin");
    const char *allowed = cors_match(s, header(c, "Origin"));
    if (allowed) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", allowed);
        MHD_add_response_header(r, "Access-Control-Expose-Headers", "Location, Retry-After");
    }
}

/* --- sending --- */

static enum MHD_Result send_reply(coord_server *s, struct MHD_Connection *c, coord_reply *rp) {
    char *text = NULL;
    const char *type = rp->content_type;
    size_t len = 0;
    if (rp->json) {
        text = json_dumps(rp->json, JSON_COMPACT);
        if (!type)
            type = "application/json";
    } else if (rp->text) {
        text = rp->text;
        rp->text = NULL;
    }
    if (text)
        len = strlen(text);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, text ? text : (char *)"", MHD_RESPMEM_MUST_COPY);
    if (rp->json)
        free(text);
    else
        pf_free(text);
    if (!r)
        return MHD_NO;
    if (len || type)
        MHD_add_response_header(r, "Content-Type", type ? type : "text/plain; charset=utf-8");
    if (rp->location[0])
        MHD_add_response_header(r, "Location", rp->location);
    if (rp->allow)
        MHD_add_response_header(r, "Allow", rp->allow);
    if (rp->status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"psflow\"");
    if (rp->retry_after > 0) {
        char secs[16];
        snprintf(secs, sizeof secs, "%d", rp->retry_after);
        MHD_add_response_header(r, "Retry-After", secs);
    }
    if (rp->close)
        MHD_add_response_header(r, "Connection", "close");
    add_cors_headers(s, c, r);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)rp->status, r);
    MHD_destroy_response(r);
    return ret;
}

/* --- Server-Sent Events (events_stream.c) --- */

static enum MHD_Result start_stream(coord_server *s, struct MHD_Connection *c, coord_request *rq,
                                    coord_reply *rp) {
    const char *job = coord_query(rq, "job");
    const char *last = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
    long long since = -1;
    if (coord_query_long(rq, rp, "since_id", 0, INT64_MAX, -1, &since))
        return send_reply(s, c, rp);
    if (last && since < 0) {
        char *end;
        since = strtoll(last, &end, 10);
        if (*end || since < 0)
            since = -1;
    }
    if (job && strlen(job) > PF_NAME_MAX) {
        coord_reply_problem(rp, 400, NULL, "query parameter job: not a job name");
        return send_reply(s, c, rp);
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int full;
    struct MHD_Response *r = coord_events_response(s, ci ? ci->connect_fd : -1, job, since, &full);
    if (full) {
        coord_reply_problem(rp, 503, NULL,
                            "%d event streams are open, the most this coordinator serves "
                            "(--max-streams): retry later",
                            s->o.max_streams);
        rp->retry_after = COORD_STREAM_RETRY;
        rp->close = 1;
        log_refusal(s, c, rq->method, rq->path, 503, "event streams at --max-streams");
        return send_reply(s, c, rp);
    }
    if (!r)
        return MHD_NO;
    add_cors_headers(s, c, r);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* --- static files --- */

static const char *mime(const char *path) {
    const char *dot = strrchr(path, '.');
    static const char *const types[][2] = {{".html", "text/html; charset=utf-8"},
                                           {".js", "text/javascript; charset=utf-8"},
                                           {".css", "text/css; charset=utf-8"},
                                           {".json", "application/json"},
                                           {".svg", "image/svg+xml"},
                                           {".png", "image/png"},
                                           {".ico", "image/x-icon"},
                                           {".yaml", "application/yaml"},
                                           {".map", "application/json"}};
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(dot, types[i][0]))
            return types[i][1];
    return "application/octet-stream";
}

static enum MHD_Result send_file(struct MHD_Connection *c, const char *file, const char *type) {
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if (fd >= 0)
            close(fd);
        return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)sb.st_size, fd);
    if (!r) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static int safe_path(const char *p) {
    if (strstr(p, "..") || strchr(p, '\\'))
        return 0;
    for (; *p; p++)
        if ((unsigned char)*p < 0x20)
            return 0;
    return 1;
}

static enum MHD_Result serve_static(coord_server *s, struct MHD_Connection *c, const char *path,
                                    coord_reply *rp, int *status) {
    char file[4096];
    *status = 200;
    if (s->o.web_dir && safe_path(path)) {
        if (!strcmp(path, "/"))
            snprintf(file, sizeof file, "%s/index.html", s->o.web_dir);
        else if (!strncmp(path, "/vendor/uplot/", 14))
            snprintf(file, sizeof file, "%s/node_modules/uplot/dist/%s", s->o.web_dir, path + 14);
        else
            snprintf(file, sizeof file, "%s%s", s->o.web_dir, path);
        struct stat sb;
        if (stat(file, &sb) == 0 && S_ISREG(sb.st_mode)) {
            enum MHD_Result r = send_file(c, file, mime(file));
            if (r == MHD_YES)
                return r;
        }
    }
    *status = 404;
    if (!strcmp(path, "/") && !s->o.web_dir) {
        rp->status = 404;
        rp->text = NULL;
        coord_reply_problem(rp, 404, NULL,
                            "the dashboard is not installed here: start the coordinator with "
                            "--web DIR (the web/ folder of psflow)");
    } else {
        coord_reply_problem(rp, 404, NULL, "no such page: %.200s", path);
    }
    return send_reply(s, c, rp);
}

/* --- dispatch --- */

static int split_path(coord_request *rq, char *copy) {
    rq->n_seg = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (rq->n_seg == (int)(sizeof rq->seg / sizeof rq->seg[0]))
            return -1;
        rq->seg[rq->n_seg++] = t;
    }
    return 0;
}

/* Answers a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method): 204
 * with the allowed methods and headers for a --cors-origin, else 403. No token is needed:
 * browsers send preflights without credentials. */
static enum MHD_Result preflight(coord_server *s, struct MHD_Connection *c, const char *url,
                                 const char *origin, coord_reply *rp) {
    if (!cors_match(s, origin)) {
        coord_reply_problem(rp, 403, NULL,
                            "origin '%.100s' may not call this API from a browser (the "
                            "coordinator allows the origins of --cors-origin)",
                            origin);
        log_refusal(s, c, "OPTIONS", url, 403, "CORS preflight from an origin not allowed");
        return send_reply(s, c, rp);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    add_cors_headers(s, c, r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            "Authorization, Content-Type, Last-Event-ID");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    rp->status = 204;
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return ret;
}

/* Methods that change something: a cross-site request may not send them. */
static int unsafe_method(const char *method) {
    return strcmp(method, "GET") && strcmp(method, "HEAD") && strcmp(method, "OPTIONS");
}

/* Fills rq's path segments (after /api/v1/) from url, using copy[cap] as storage; the route
 * pattern for the request counters. */
static const char *route_of(const char *url, coord_request *rq, char *copy, size_t cap) {
    rq->n_seg = 0;
    if (strlen(url) >= cap)
        return "/api/{unknown}";
    snprintf(copy, cap, "%s", url + (strncmp(url, "/api/v1/", 8) ? 0 : 8));
    if (!strncmp(url, "/api/v1/", 8))
        split_path(rq, copy);
    return route_pattern(url, rq);
}

/* The problem for a refusal of auth_refusal(), logged. */
static void refuse_auth(coord_server *s, struct MHD_Connection *c, const char *method,
                        const coord_request *rq, int status, coord_reply *rp) {
    if (status == 403)
        coord_reply_problem(rp, 403, NULL,
                            "the agent token grants only the agents' routes (registration, "
                            "heartbeat, reports): send the API token (PSFLOW_TOKEN)");
    else if (s->agent_token && agent_route(method, rq))
        coord_reply_problem(rp, 401, NULL,
                            "missing or wrong agent token: an agent sends 'Authorization: Bearer "
                            "TOKEN' with the coordinator's agent token (the file it names at "
                            "start; PSFLOW_AGENT_TOKEN_FILE) or its API token");
    else
        coord_reply_problem(rp, 401, NULL,
                            "missing or wrong bearer token: send 'Authorization: Bearer TOKEN' "
                            "(the coordinator's PSFLOW_TOKEN)");
    log_refusal(s, c, method, rq->path, status,
                status == 403 ? "agent token on an API route" : "missing or wrong bearer token");
}

static enum MHD_Result dispatch(coord_server *s, struct MHD_Connection *c, const char *url,
                                const char *method, request_state *rs) {
    coord_request rq = {c, method, url, (char *)rs->body.data, rs->body.len, {0}, 0};
    coord_reply rp;
    memset(&rp, 0, sizeof rp);
    char copy[1024];
    int is_api = !strncmp(url, "/api/", 5) || !strcmp(url, "/api");
    if (strlen(url) >= sizeof copy) {
        coord_reply_problem(&rp, 404, NULL, "path too long");
        count_request(s, "/api/{unknown}", 404);
        return send_reply(s, c, &rp);
    }
    const char *route = route_of(url, &rq, copy, sizeof copy);
    const char *origin = header(c, "Origin");
    enum MHD_Result ret;
    int auth;
    if (rs->reject) {
        coord_reply_problem(&rp, rs->reject, NULL, "%s", rs->reject_why);
        rp.retry_after = rs->reject_retry;
        log_refusal(s, c, method, url, rs->reject, rs->reject_why);
    } else if (rs->too_big) {
        coord_reply_problem(&rp, 413, NULL, "the request body is larger than %d bytes",
                            COORD_BODY_MAX);
        log_refusal(s, c, method, url, 413, "body over the limit");
    } else if (!strcmp(method, "OPTIONS") && origin && header(c, "Access-Control-Request-Method")) {
        ret = preflight(s, c, url, origin, &rp);
        count_request(s, route, rp.status);
        json_decref(rp.json);
        return ret;
    } else if (origin && unsafe_method(method) && !same_origin(s, c, origin) &&
               !cors_match(s, origin)) {
        /* A page of another site may make a browser send this (a form, a fetch without a
         * preflight): refuse it even where no token is configured. */
        coord_reply_problem(&rp, 403, NULL,
                            "%s from origin '%.100s' refused: only the coordinator's own "
                            "dashboard and the origins of --cors-origin may change things",
                            method, origin);
        log_refusal(s, c, method, url, 403, "cross-origin request");
    } else if (coord_routes_ops(s, &rq, &rp)) {
        /* handled */
    } else if (!is_api) {
        if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
            rp.allow = "GET, HEAD";
            coord_reply_problem(&rp, 405, NULL, "%s is not allowed on %.200s", method, url);
        } else {
            int status;
            ret = serve_static(s, c, url, &rp, &status);
            count_request(s, route, status);
            json_decref(rp.json);
            return ret;
        }
    } else if ((auth = auth_refusal(s, c, method, &rq)) != 0) {
        refuse_auth(s, c, method, &rq, auth, &rp);
    } else if (rq.n_seg == 1 && !strcmp(rq.seg[0], "events")) {
        if (strcmp(method, "GET") != 0) {
            rp.allow = "GET";
            coord_reply_problem(&rp, 405, NULL, "%s is not allowed on %s", method, url);
        } else {
            ret = start_stream(s, c, &rq, &rp);
            count_request(s, route, rp.status ? rp.status : 200);
            json_decref(rp.json);
            return ret;
        }
    } else if (coord_routes_jobs(s, &rq, &rp) || coord_routes_nodes(s, &rq, &rp) ||
               coord_routes_queues(s, &rq, &rp)) {
        /* handled */
    } else {
        coord_reply_problem(&rp, 404, NULL, "no such route: %s %.200s", method, url);
    }
    if (!rp.status)
        coord_reply_problem(&rp, 500, NULL, "no reply");
    if (in_reserve(c))
        rp.close = 1; /* a reserve slot serves one request */
    count_request(s, route, rp.status);
    ret = send_reply(s, c, &rp);
    json_decref(rp.json);
    pf_free(rp.text);
    return ret;
}

/* --- the first look at a request: its headers --- */

/* Routes served from the reserve: what keeps agents' leases and the liveness probe. Any
 * other request there first tries to take an ordinary slot (promote). */
static int priority_route(const char *method, const char *url) {
    if (!strcmp(url, "/livez") || !strcmp(url, "/readyz"))
        return 1;
    if (strncmp(url, "/api/v1/nodes", 13) != 0)
        return 0;
    const char *rest = url + 13;
    if (!*rest)
        return !strcmp(method, "POST"); /* registration */
    if (*rest != '/')
        return 0;
    const char *slash = strchr(rest + 1, '/');
    if (!slash)
        return !strcmp(method, "DELETE"); /* deregistration */
    return !strcmp(slash, "/heartbeat") && !strcmp(method, "POST");
}

typedef struct header_scan {
    int lengths;           /* Content-Length headers */
    const char *length;    /* the first one's value */
    int lengths_differ;    /* a later one says something else */
    int transfer_encoding; /* a Transfer-Encoding header */
} header_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
    (void)kind;
    header_scan *h = cls;
    if (!strcasecmp(key, "Content-Length")) {
        if (h->lengths++ == 0)
            h->length = value;
        else if (strcmp(value, h->length) != 0)
            h->lengths_differ = 1;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        h->transfer_encoding = 1;
    }
    return MHD_YES;
}

/* "application/json", with any parameters (charset) after a ';'. */
static int json_media_type(const char *type) {
    while (*type == ' ' || *type == '\t')
        type++;
    size_t n = strcspn(type, ";");
    while (n && (type[n - 1] == ' ' || type[n - 1] == '\t'))
        n--;
    return n == 16 && !strncasecmp(type, "application/json", 16);
}

static void refuse(request_state *rs, int status, int retry, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void refuse(request_state *rs, int status, int retry, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rs->reject_why, sizeof rs->reject_why, fmt, ap);
    va_end(ap);
    rs->reject = status;
    rs->reject_retry = retry;
}

/* Decides what the headers alone decide (see DESIGN) into rs->reject. Returns 1 when the
 * answer must go out now, before any body is read. */
static int check_headers(coord_server *s, struct MHD_Connection *c, const char *url,
                         const char *method, request_state *rs) {
    const char *host = header(c, "Host");
    if (!pf_http_hosts_allow(s->hosts, host) && strcmp(url, "/livez") && strcmp(url, "/readyz")) {
        refuse(rs, 421, 0,
               "Host '%.100s' is not a name of this coordinator: add it with --allowed-hosts "
               "(PSFLOW_ALLOWED_HOSTS)",
               host);
        return 1;
    }
    header_scan h = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_header, &h);
    if (h.transfer_encoding && h.lengths) {
        refuse(rs, 400, 0,
               "Transfer-Encoding and Content-Length together: the body's length "
               "is ambiguous");
        return 1;
    }
    if (h.lengths_differ) {
        refuse(rs, 400, 0,
               "two different Content-Length headers: the body's length is "
               "ambiguous");
        return 1;
    }
    if (in_reserve(c) && !priority_route(method, url) && !promote(s, c)) {
        refuse(rs, 503, COORD_RETRY_AFTER,
               "the coordinator is at its connection limit (--max-connections): retry later");
        return 1;
    }
    errno = 0;
    unsigned long long length = h.length ? strtoull(h.length, NULL, 10) : 0;
    if (errno == ERANGE || length > COORD_BODY_MAX) {
        refuse(rs, 413, 0, "the request body (Content-Length %.30s) is larger than %d bytes",
               h.length, COORD_BODY_MAX);
        return 1;
    }
    int is_api = !strncmp(url, "/api/", 5);
    int has_body = length > 0 || h.transfer_encoding;
    const char *type = header(c, "Content-Type");
    if (is_api && unsafe_method(method) && (type || has_body) && !(type && json_media_type(type))) {
        if (type)
            refuse(rs, 415, 0, "Content-Type: expected application/json, got '%.80s'", type);
        else
            refuse(rs, 415, 0, "Content-Type: missing; the body must be application/json");
        /* A client waiting for "100 Continue" gets the answer instead; one already sending
         * gets it once its body is read. */
        const char *expect = header(c, "Expect");
        return expect && !strcasecmp(expect, "100-continue");
    }
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    (void)version;
    coord_server *s = cls;
    request_state *rs = *con_cls;
    if (!rs) {
        rs = pf_calloc(1, sizeof *rs);
        if (!rs)
            return MHD_NO;
        pf_buf_init(&rs->body, COORD_BODY_MAX + 1);
        *con_cls = rs;
        pf_http_watch_headers_done(s->watch, watched(c));
        if (!check_headers(s, c, url, method, rs))
            return MHD_YES;
        /* Answered in this first call: libmicrohttpd sends no "100 Continue", drops any
         * body and closes the connection after the answer. */
        coord_request rq = {c, method, url, NULL, 0, {0}, 0};
        coord_reply rp;
        memset(&rp, 0, sizeof rp);
        char copy[1024];
        const char *route = route_of(url, &rq, copy, sizeof copy);
        coord_reply_problem(&rp, rs->reject, NULL, "%s", rs->reject_why);
        rp.retry_after = rs->reject_retry;
        rp.close = 1;
        log_refusal(s, c, method, url, rs->reject, rs->reject_why);
        count_request(s, route, rp.status);
        enum MHD_Result ret = send_reply(s, c, &rp);
        json_decref(rp.json);
        return ret;
    }
    if (*upload_size) {
        if (!rs->too_big && !rs->reject && rs->body.len + *upload_size > COORD_BODY_MAX) {
            rs->too_big = 1;
            pf_buf_deinit(&rs->body);
        }
        if (!rs->too_big && !rs->reject) {
            pf_status st = pf_buf_append(&rs->body, upload, *upload_size);
            if (st != PF_OK || pf_buf_terminate(&rs->body) != PF_OK)
                return MHD_NO;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    pf_http_watch_body_done(s->watch, watched(c));
    return dispatch(s, c, url, method, rs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    coord_server *s = cls;
    pf_http_watch_answered(s->watch, watched(c));
    request_state *rs = *con_cls;
    if (rs) {
        pf_buf_deinit(&rs->body);
        pf_free(rs);
        *con_cls = NULL;
    }
}

/* Counts and watches open connections. One accepted while the ordinary slots are all
 * taken first shuts down the connection that has waited longest for its request (at least
 * --evict-after-ms) and takes its place; with none to shut down it goes
 * to the reserve, with the short timeout (see DESIGN). Called by libmicrohttpd's accepting
 * thread (started) and the connection's own (closed, before the fd is closed). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    coord_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        int open = __atomic_add_fetch(&s->open_connections, 1, __ATOMIC_SEQ_CST);
        int reserve = open > s->normal_slots && !pf_http_watch_evict(s->watch);
        if (reserve)
            MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
                                      (unsigned)COORD_RESERVE_TIMEOUT);
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *from =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context = fd ? pf_http_watch_add(s->watch, fd->connect_fd,
                                                 from ? from->client_addr : NULL, reserve)
                             : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        __atomic_sub_fetch(&s->open_connections, 1, __ATOMIC_SEQ_CST);
        pf_http_watch_remove(s->watch, *socket_context);
        *socket_context = NULL;
    }
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fprintf(stderr, "psflow coordinator: http: ");
    vfprintf(stderr, fmt, ap);
}

/* The Host allowlist and the connection watch (http_guard.h) into s; host is the address
 * the coordinator listens on. */
static pf_status start_guard(coord_server *s, const char *host, pf_error *err) {
    pf_status st =
        pf_http_hosts_create(host, s->o.allowed_hosts, s->o.n_allowed_hosts, &s->hosts, err);
    if (st != PF_OK)
        return st;
    pf_http_watch_limits l = {
        .header_s = s->o.header_timeout > 0 ? s->o.header_timeout : 10,
        .body_s = s->o.body_timeout > 0 ? s->o.body_timeout : 30,
        .idle_s = connection_timeout(s),
        .evict_after_s =
            (s->o.evict_after_ms > 0 ? s->o.evict_after_ms : COORD_EVICT_AFTER_MS) / 1000.0,
        .per_address = s->o.max_per_address > 0 ? s->o.max_per_address : 32,
    };
    s->watch = pf_http_watch_create(&l);
    if (!s->watch)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "cannot start the connection watch");
    return PF_OK;
}

struct MHD_Daemon *coord_http_start(coord_server *s, pf_error *err) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)s->o.port);
    const char *host = s->o.listen_host && *s->o.listen_host ? s->o.listen_host : "0.0.0.0";
    if (!strcmp(host, "localhost"))
        host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        pf_error_set(err, PF_ERR_IO, NULL, "--listen: '%s' is not an IPv4 address", host);
        return NULL;
    }
    int limit = s->o.max_connections >= 4 ? s->o.max_connections : 256;
    unsigned timeout = connection_timeout(s);
    int reserve = limit / 8 > 2 ? limit / 8 : 2;
    s->normal_slots = limit - reserve;
    if (s->o.max_streams < 1) /* the default: 64, or half the ordinary slots when fewer */
        s->o.max_streams = s->normal_slots / 2 < 64 ? s->normal_slots / 2 : 64;
    if (start_guard(s, host, err) != PF_OK)
        return NULL;
    int tls = s->o.tls_cert_pem && s->o.tls_key_pem;
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        pf_error_set(err, PF_ERR_UNSUPPORTED, NULL,
                     "--tls-cert: this libmicrohttpd was built without TLS support");
        return NULL;
    }
    struct MHD_OptionItem tls_options[] = {
        {tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, (void *)s->o.tls_key_pem},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)s->o.tls_cert_pem},
        {MHD_OPTION_END, 0, NULL},
    };
    errno = 0;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
            MHD_USE_ERROR_LOG | (tls ? MHD_USE_TLS : 0),
        (uint16_t)s->o.port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_log, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)limit, MHD_OPTION_CONNECTION_TIMEOUT, timeout, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_ARRAY, tls_options, MHD_OPTION_END);
    if (!d && tls)
        pf_error_set(err, PF_ERR_IO, NULL,
                     "cannot serve HTTPS on %s:%d: the listening socket failed or the "
                     "--tls-cert/--tls-key pair was refused (see the message above)",
                     host, s->o.port);
    else if (!d)
        pf_error_set(err, PF_ERR_IO, NULL, "cannot listen on %s:%d: %s", host, s->o.port,
                     errno ? strerror(errno) : "address in use or not available");
    return d;
}
