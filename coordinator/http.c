/* http.c - libmicrohttpd glue of the coordinator: request bodies (1 MiB limit), bearer
 * authentication, routing to the handlers, problem+json errors, the Server-Sent Events
 * stream and the dashboard's static files.
 *
 * DESIGN: one thread per connection (MHD_USE_THREAD_PER_CONNECTION) with a connection cap
 * and an idle timeout, so a slow client holds only its own thread and never the others';
 * an event stream's thread sleeps on the server's condition variable between events.
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
#include <sys/stat.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "psflow/buf.h"
#include "psflow/clock.h"
#include "psflow/mem.h"
#include "coordinator/coord_server.h"

typedef struct request_state {
    pf_buf body; /* NUL-terminated, at most COORD_BODY_MAX bytes */
    int too_big;
    int started;
} request_state;

/* --- replies --- */

void coord_reply_json(coord_reply *r, int status, json_t *json) {
    if (!json) {
        coord_reply_problem(r, 500, NULL, "out of memory");
        return;
    }
    r->status = status;
    json_decref(r->json);
    r->json = json;
}

static const char *status_title(int status) {
    switch (status) {
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Content Too Large";
    case 422:
        return "Unprocessable Content";
    case 503:
        return "Service Unavailable";
    default:
        return status >= 500 ? "Internal Server Error" : "Error";
    }
}

void coord_reply_problem(coord_reply *r, int status, json_t *errors, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    json_t *p = json_pack("{s:s, s:s, s:i, s:s}", "type", "about:blank", "title",
                          status_title(status), "status", status, "detail", detail);
    if (p && errors)
        json_object_set_new(p, "errors", errors);
    else
        json_decref(errors);
    json_decref(r->json);
    r->json = p;
    r->status = status;
    r->content_type = "application/problem+json";
}

/* --- helpers for handlers --- */

json_t *coord_parse_object(const coord_request *rq, coord_reply *rp) {
    if (!rq->body || rq->body_len == 0) {
        coord_reply_problem(rp, 400, NULL, "the request body is empty: expected a JSON object");
        return NULL;
    }
    json_error_t e;
    json_t *v = json_loadb(rq->body, rq->body_len, JSON_REJECT_DUPLICATES, &e);
    if (!v) {
        coord_reply_problem(rp, 400, NULL, "malformed JSON at line %d, column %d: %s", e.line,
                            e.column, e.text);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        coord_reply_problem(rp, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return v;
}

int coord_check_keys(json_t *obj, const char *const *allowed, const char *where, coord_reply *rp) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int ok = 0;
        for (int i = 0; allowed[i] && !ok; i++)
            ok = !strcmp(key, allowed[i]);
        if (!ok) {
            char ptr[200];
            snprintf(ptr, sizeof ptr, "%s/%.120s", where, key);
            coord_reply_problem(
                rp, 400, json_pack("[{s:s, s:s}]", "pointer", ptr, "message", "unknown field"),
                "%s: unknown field", ptr);
            return -1;
        }
    }
    return 0;
}

const char *coord_query(const coord_request *rq, const char *name) {
    return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, name);
}

int coord_query_long(const coord_request *rq, coord_reply *rp, const char *name, long long min,
                     long long max, long long fallback, long long *out) {
    const char *v = coord_query(rq, name);
    *out = fallback;
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < min || x > max) {
        coord_reply_problem(
            rp, 400, NULL, "query parameter %s: expected an integer from %lld to %lld, got '%.40s'",
            name, min, max, v);
        return -1;
    }
    *out = x;
    return 0;
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
            "/api/v1/jobs/{name}/events"};
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

static int authorized(coord_server *s, struct MHD_Connection *c, int allow_query) {
    if (!s->token)
        return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncmp(h, "Bearer ", 7) && token_equal(h + 7, s->token))
        return 1;
    if (allow_query) {
        const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "access_token");
        if (q && token_equal(q, s->token))
            return 1;
    }
    return 0;
}

/* --- sending --- */

static enum MHD_Result send_reply(struct MHD_Connection *c, coord_reply *rp) {
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
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)rp->status, r);
    MHD_destroy_response(r);
    return ret;
}

/* --- Server-Sent Events --- */

#define STREAM_BUFFER_MAX (16u << 20) /* bytes of events collected for one read */

typedef struct stream {
    coord_server *s;
    int64_t last_id;
    char job[PF_NAME_MAX + 1]; /* "" = every job */
    pf_buf out;                /* events collected, sent from `off` on */
    size_t off;
} stream;

static int wants(const stream *st, const char *job) {
    return !st->job[0] || !job[0] || !strcmp(st->job, job);
}

static int add_event(int64_t id, const char *kind, const char *job, const char *data, void *ctx) {
    stream *st = ctx;
    st->last_id = id;
    if (wants(st, job))
        pf_buf_printf(&st->out, "id: %" PRId64 "\nevent: %s\ndata: %s\n\n", id, kind, data);
    return st->out.len > 256 * 1024;
}

/* Fills st->out with the events after st->last_id; caller holds the lock. */
static void collect(stream *st) {
    coord_server *s = st->s;
    if (st->last_id + 1 >= s->ring_first) {
        for (int64_t id = st->last_id + 1; id <= s->ring_last; id++) {
            coord_ring_entry *e = &s->ring[(id - 1) % COORD_RING_SIZE];
            if (add_event(id, e->kind, e->job, e->data, st))
                break;
        }
    } else {
        coord_store_events_after(s->store, st->last_id, NULL, NULL, 500, add_event, st);
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    stream *st = cls;
    coord_server *s = st->s;
    if (st->off == st->out.len) {
        st->off = 0;
        pf_buf_reset(&st->out);
        pthread_mutex_lock(&s->lock);
        while (!s->stopping && st->out.len == 0) {
            collect(st);
            if (st->out.len)
                break;
            struct timespec until = pf_clock_deadline(10.0);
            if (pthread_cond_timedwait(&s->changed, &s->lock, &until) == ETIMEDOUT) {
                collect(st);
                if (!st->out.len)
                    pf_buf_printf(&st->out, ": keepalive\n\n");
            }
        }
        pthread_mutex_unlock(&s->lock);
        if (s->stopping && st->out.len == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = st->out.len - st->off < max ? st->out.len - st->off : max;
    memcpy(out, st->out.data + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream *st = cls;
    pf_buf_deinit(&st->out);
    pf_free(st);
}

static enum MHD_Result start_stream(coord_server *s, struct MHD_Connection *c, coord_request *rq,
                                    coord_reply *rp) {
    const char *job = coord_query(rq, "job");
    const char *last = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
    long long since = -1;
    if (coord_query_long(rq, rp, "since_id", 0, INT64_MAX, -1, &since))
        return send_reply(c, rp);
    if (last && since < 0) {
        char *end;
        since = strtoll(last, &end, 10);
        if (*end || since < 0)
            since = -1;
    }
    if (job && strlen(job) > PF_NAME_MAX) {
        coord_reply_problem(rp, 400, NULL, "query parameter job: not a job name");
        return send_reply(c, rp);
    }
    stream *st = pf_calloc(1, sizeof *st);
    if (!st)
        return MHD_NO;
    pf_buf_init(&st->out, STREAM_BUFFER_MAX);
    st->s = s;
    snprintf(st->job, sizeof st->job, "%s", job ? job : "");
    pthread_mutex_lock(&s->lock);
    st->last_id = since >= 0 ? since : s->ring_last;
    pthread_mutex_unlock(&s->lock);
    /* The first bytes tell the client the stream is open (and how soon to retry). */
    if (pf_buf_printf(&st->out, "retry: 1000\n: connected\n\n") != PF_OK) {
        stream_free(st);
        return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024,
                                                               stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
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
    return send_reply(c, rp);
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
        return send_reply(c, &rp);
    }
    snprintf(copy, sizeof copy, "%s", url + (strncmp(url, "/api/v1/", 8) ? 0 : 8));
    if (!strncmp(url, "/api/v1/", 8))
        split_path(&rq, copy);
    const char *route = route_pattern(url, &rq);
    enum MHD_Result ret;
    if (rs->too_big) {
        coord_reply_problem(&rp, 413, NULL, "the request body is larger than %d bytes",
                            COORD_BODY_MAX);
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
    } else if (!authorized(s, c, rq.n_seg == 1 && !strcmp(rq.seg[0], "events"))) {
        coord_reply_problem(&rp, 401, NULL,
                            "missing or wrong bearer token: send 'Authorization: Bearer TOKEN' "
                            "(the coordinator's PSFLOW_TOKEN)");
    } else if (rq.n_seg == 1 && !strcmp(rq.seg[0], "events")) {
        if (strcmp(method, "GET") != 0) {
            rp.allow = "GET";
            coord_reply_problem(&rp, 405, NULL, "%s is not allowed on %s", method, url);
        } else {
            count_request(s, route, 200);
            return start_stream(s, c, &rq, &rp);
        }
    } else if (coord_routes_jobs(s, &rq, &rp) || coord_routes_nodes(s, &rq, &rp)) {
        /* handled */
    } else {
        coord_reply_problem(&rp, 404, NULL, "no such route: %s %.200s", method, url);
    }
    if (!rp.status)
        coord_reply_problem(&rp, 500, NULL, "no reply");
    count_request(s, route, rp.status);
    ret = send_reply(c, &rp);
    json_decref(rp.json);
    pf_free(rp.text);
    return ret;
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
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > COORD_BODY_MAX)
            rs->too_big = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rs->too_big && rs->body.len + *upload_size > COORD_BODY_MAX) {
            rs->too_big = 1;
            pf_buf_deinit(&rs->body);
        }
        if (!rs->too_big) {
            pf_status st = pf_buf_append(&rs->body, upload, *upload_size);
            if (st != PF_OK || pf_buf_terminate(&rs->body) != PF_OK)
                return MHD_NO;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(s, c, url, method, rs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    request_state *rs = *con_cls;
    if (rs) {
        pf_buf_deinit(&rs->body);
        pf_free(rs);
        *con_cls = NULL;
    }
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fprintf(stderr, "psflow coordinator: http: ");
    vfprintf(stderr, fmt, ap);
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
    unsigned limit = s->o.max_connections > 0 ? (unsigned)s->o.max_connections : 256;
    unsigned timeout = s->o.connection_timeout > 0 ? (unsigned)s->o.connection_timeout : 30;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
            MHD_USE_ERROR_LOG,
        (uint16_t)s->o.port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_log, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_END);
    if (!d)
        pf_error_set(err, PF_ERR_IO, NULL, "cannot listen on %s:%d: %s", host, s->o.port,
                     errno ? strerror(errno) : "address in use or not available");
    return d;
}
