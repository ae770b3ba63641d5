/* serve.c - the serving task's HTTP server, its model runner and its checkpoint watcher
 * (see serve.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "psflow/backend.h"
#include "psflow/buf.h"
#include "psflow/checkpoint.h"
#include "psflow/clock.h"
#include "psflow/footprint.h"
#include "psflow/http_guard.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "serve/batcher.h"
#include "serve/remote.h"
#include "serve/serve_request.h"
#include "serve/serve.h"
#include "serve/versions.h"

#define LOG         "psflow serve"
#define ANSWER_MAX  ((size_t)1 << 30)
#define N_BUCKETS   14
#define VERSION_HDR "PSFlow-Model-Version"

static const double bucket_le[N_BUCKETS] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                            0.1,    0.25,  0.5,   1,     2.5,  5,    INFINITY};

enum route { ROUTE_NONE, ROUTE_PREDICT, ROUTE_STATUS, ROUTE_METADATA, ROUTE_METRICS, ROUTE_HEALTH };

typedef struct server {
    serve_options o; /* with the defaults filled in */
    int width, outputs;
    char base[160];           /* "/v1/models/NAME" */
    pf_model *model;          /* the whole model (NULL with --ps) */
    serve_versions *versions; /* its versions, loaded here (NULL with --ps) */
    serve_remote *remote;     /* --ps: the values on read-only ps tasks, else NULL */
    serve_batcher *batcher;
    pf_http_watch *watch; /* request deadlines, slow clients (psflow/http_guard.h) */
    int open;             /* connections open now (__atomic) */
    size_t buffered;      /* request body bytes held, of every connection (__atomic) */
    pthread_t watcher;
    int watching;
    int stopping;       /* __atomic */
    int blas_before;    /* the process's BLAS threads before serve_run set its own; 0: unset */
    pthread_mutex_t mu; /* the counters below */
    int64_t by_code[6]; /* answers by class: [2] 2xx ... [5] 5xx */
    int64_t predicts, examples;
    int64_t buckets[N_BUCKETS];
    double latency_sum;
} server;

typedef struct request_state {
    server *s;
    struct MHD_Connection *c;
    double start;
    enum route route;
    int64_t want_version; /* a /versions/V:predict: V, else -1 */
    int refused;          /* the HTTP status of an early refusal, or 0 */
    size_t discarded;     /* body bytes of a refused request read and dropped */
    size_t held;          /* body bytes counted in the server's `buffered` */
    pf_error err;
    pf_buf body;
    serve_request req;
    serve_item item;
    float *y;
    pthread_mutex_t mu;
    int queued, suspended, done;
} request_state;

/* The serving version, the switches and the refusals, wherever the values live. */
static void version_counts(const server *s, int64_t *step, int64_t *loaded, int64_t *refused) {
    if (s->remote)
        serve_remote_counts(s->remote, step, loaded, refused);
    else
        serve_versions_counts(s->versions, step, loaded, refused);
}

/* --- answers ---------------------------------------------------------------------------- */

/* --- what the server tells its host (serve_stats) --------------------------------------- */

void serve_stats_init(serve_stats *st) {
    memset(st, 0, sizeof *st);
    pthread_mutex_init(&st->mu, NULL);
    st->version = -1;
}

void serve_stats_deinit(serve_stats *st) {
    pthread_mutex_destroy(&st->mu);
}

static int float_order(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void serve_stats_read(serve_stats *st, serve_stats_view *out) {
    pthread_mutex_lock(&st->mu);
    float *recent = st->sorted;
    out->port = st->port;
    out->version = st->version;
    out->requests = st->requests;
    out->failed = st->failed;
    double since = pf_clock_now() - SERVE_STATS_SECONDS;
    int n = 0;
    for (int i = 0; i < st->n; i++)
        if (st->at[i] >= since)
            recent[n++] = st->seconds[i];
    qsort(recent, (size_t)n, sizeof *recent, float_order);
    /* nearest rank: the smallest latency that at least p of the requests did not exceed */
    out->p50 = n ? recent[(n * 50 + 99) / 100 - 1] : NAN;
    out->p99 = n ? recent[(n * 99 + 99) / 100 - 1] : NAN;
    pthread_mutex_unlock(&st->mu);
}

static void stats_add(serve_stats *st, int status, double seconds) {
    pthread_mutex_lock(&st->mu);
    st->requests++;
    st->failed += status >= 400;
    st->at[st->next] = pf_clock_now();
    st->seconds[st->next] = (float)seconds;
    st->next = (st->next + 1) % SERVE_STATS_WINDOW;
    if (st->n < SERVE_STATS_WINDOW)
        st->n++;
    pthread_mutex_unlock(&st->mu);
}

static void stats_set(serve_stats *st, int port, int64_t version) {
    if (!st)
        return;
    pthread_mutex_lock(&st->mu);
    if (port)
        st->port = port;
    st->version = version;
    pthread_mutex_unlock(&st->mu);
}

/* --- counting the answers ---------------------------------------------------------------- */

static void count(server *s, int status, double seconds, int predict, int examples) {
    if (predict && s->o.stats)
        stats_add(s->o.stats, status, seconds);
    pthread_mutex_lock(&s->mu);
    int cls = status / 100;
    if (cls >= 1 && cls <= 5)
        s->by_code[cls]++;
    if (predict) {
        s->predicts++;
        s->examples += examples;
        s->latency_sum += seconds;
        for (int b = 0; b < N_BUCKETS; b++)
            if (seconds <= bucket_le[b]) {
                s->buckets[b]++;
                break;
            }
    }
    pthread_mutex_unlock(&s->mu);
}

/* Answers with body[len], which the response owns and frees with `release` (free for
 * jansson's text, pf_free for a pf_buf's block): no copy on the way out. */
static enum MHD_Result answer(request_state *rs, int status, const char *type, void *body,
                              size_t len, void (*release)(void *), int64_t version) {
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, release);
    if (!r) {
        release(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    char v[24];
    if (version >= 0) {
        snprintf(v, sizeof v, "%" PRId64, version);
        MHD_add_response_header(r, VERSION_HDR, v);
    }
    if (status == 503)
        MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 405)
        MHD_add_response_header(r, "Allow", rs->route == ROUTE_PREDICT ? "POST" : "GET, HEAD");
    enum MHD_Result ok = MHD_queue_response(rs->c, (unsigned)status, r);
    MHD_destroy_response(r);
    count(rs->s, status, pf_clock_now() - rs->start, rs->route == ROUTE_PREDICT,
          status == 200 ? rs->req.n : 0);
    return ok;
}

static enum MHD_Result send_json(request_state *rs, int status, json_t *j, int64_t version) {
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!text)
        return MHD_NO;
    return answer(rs, status, "application/json", text, strlen(text), free, version);
}

/* problem+json; ptr names the field ("" or NULL: none). */
static enum MHD_Result problem(request_state *rs, int status, const char *ptr, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static enum MHD_Result problem(request_state *rs, int status, const char *ptr, const char *fmt,
                               ...) {
    char msg[512], detail[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ptr && *ptr)
        snprintf(detail, sizeof detail, "%s: %s", ptr, msg);
    else
        snprintf(detail, sizeof detail, "%s", msg);
    json_t *p = json_pack("{s:s, s:s, s:i, s:s}", "type", "about:blank", "title",
                          pf_http_status_title(status), "status", status, "detail", detail);
    if (p && ptr && *ptr)
        json_object_set_new(p, "errors", json_pack("[{s:s, s:s}]", "pointer", ptr, "message", msg));
    char *text = p ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(p);
    if (!text)
        return MHD_NO;
    return answer(rs, status, "application/problem+json", text, strlen(text), free, -1);
}

/* --- routes ----------------------------------------------------------------------------- */

static enum route route_of(server *s, const char *url, int64_t *version) {
    *version = -1;
    if (!strcmp(url, "/metrics"))
        return ROUTE_METRICS;
    if (!strcmp(url, "/healthz"))
        return ROUTE_HEALTH;
    size_t n = strlen(s->base);
    if (strncmp(url, s->base, n) != 0)
        return ROUTE_NONE;
    const char *rest = url + n;
    if (!*rest)
        return ROUTE_STATUS;
    if (!strcmp(rest, "/metadata"))
        return ROUTE_METADATA;
    if (!strcmp(rest, ":predict"))
        return ROUTE_PREDICT;
    if (!strncmp(rest, "/versions/", 10)) {
        char *end;
        errno = 0;
        long long v = strtoll(rest + 10, &end, 10);
        if (end != rest + 10 && !errno && v >= 0 && rest[10] != '+' && !strcmp(end, ":predict")) {
            *version = v;
            return ROUTE_PREDICT;
        }
    }
    return ROUTE_NONE;
}

static int token_ok(const server *s, struct MHD_Connection *c) {
    if (!s->o.token || !*s->o.token)
        return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    const char *given = h + 7, *want = s->o.token;
    size_t gl = strlen(given), wl = strlen(want);
    unsigned diff = (unsigned)(gl ^ wl);
    for (size_t i = 0; i < wl; i++) /* constant time in the token's length */
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

static enum MHD_Result status_route(request_state *rs) {
    int64_t step, loaded, refused;
    version_counts(rs->s, &step, &loaded, &refused);
    char v[24];
    snprintf(v, sizeof v, "%" PRId64, step < 0 ? 0 : step);
    json_t *entry = json_pack("{s:s, s:s, s:{s:s, s:s}}", "version", v, "state",
                              step < 0 ? "LOADING" : "AVAILABLE", "status", "error_code",
                              step < 0 ? "UNAVAILABLE" : "OK", "error_message",
                              step < 0 ? "no verified checkpoint of the job yet" : "");
    return send_json(rs, 200, json_pack("{s:[o]}", "model_version_status", entry), step);
}

static enum MHD_Result metadata_route(request_state *rs) {
    const pf_model_spec *m = &rs->s->o.spec->model;
    json_t *inputs = json_object();
    if (m->n_embeddings == 0) {
        json_object_set_new(
            inputs, "x", json_pack("{s:s, s:[i, i]}", "dtype", "DT_FLOAT", "shape", -1, m->inputs));
    } else {
        for (int f = 0; f < m->n_embeddings; f++)
            json_object_set_new(inputs, m->embeddings[f].name,
                                json_pack("{s:s, s:I, s:i}", "dtype", "DT_INT64", "vocab",
                                          (json_int_t)m->embeddings[f].vocab, "max_ids",
                                          m->embeddings[f].max_ids));
        if (m->numeric_inputs > 0)
            json_object_set_new(
                inputs, "numeric",
                json_pack("{s:s, s:[i, i]}", "dtype", "DT_FLOAT", "shape", -1, m->numeric_inputs));
    }
    const char *kind = m->type == PF_MODEL_LINEAR ? "prediction" : "probabilities";
    json_t *j =
        json_pack("{s:s, s:{s:o, s:i, s:{s:{s:s, s:[i, i]}}}}", "model_spec_name",
                  rs->s->o.spec->name, "signature_def", "inputs", inputs, "flat_width",
                  rs->s->width, "outputs", kind, "dtype", "DT_FLOAT", "shape", -1, rs->s->outputs);
    int64_t step, loaded, refused;
    version_counts(rs->s, &step, &loaded, &refused);
    return send_json(rs, 200, j, step);
}

static enum MHD_Result metrics_route(request_state *rs) {
    server *s = rs->s;
    int64_t step, loaded, refused, queued, batches;
    version_counts(s, &step, &loaded, &refused);
    serve_batcher_counts(s->batcher, &queued, &batches);
    pf_buf b;
    pf_buf_init(&b, 1 << 20);
    pthread_mutex_lock(&s->mu);
    pf_buf_printf(&b,
                  "# HELP psflow_serve_model_version The checkpoint step that serves (-1: none).\n"
                  "# TYPE psflow_serve_model_version gauge\n"
                  "psflow_serve_model_version{model=\"%s\"} %" PRId64 "\n"
                  "# TYPE psflow_serve_reloads_total counter\n"
                  "psflow_serve_reloads_total %" PRId64 "\n"
                  "# TYPE psflow_serve_refused_checkpoints_total counter\n"
                  "psflow_serve_refused_checkpoints_total %" PRId64 "\n"
                  "# TYPE psflow_serve_batches_total counter\n"
                  "psflow_serve_batches_total %" PRId64 "\n"
                  "# TYPE psflow_serve_queued_examples gauge\n"
                  "psflow_serve_queued_examples %" PRId64 "\n"
                  "# TYPE psflow_serve_examples_total counter\n"
                  "psflow_serve_examples_total %" PRId64 "\n"
                  "# TYPE psflow_serve_responses_total counter\n",
                  s->o.spec->name, step, loaded, refused, batches, queued, s->examples);
    for (int c = 2; c <= 5; c++)
        pf_buf_printf(&b, "psflow_serve_responses_total{code=\"%dxx\"} %" PRId64 "\n", c,
                      s->by_code[c]);
    pf_buf_printf(&b, "# HELP psflow_serve_request_seconds Predict requests, arrival to answer.\n"
                      "# TYPE psflow_serve_request_seconds histogram\n");
    int64_t cum = 0;
    for (int i = 0; i < N_BUCKETS; i++) {
        cum += s->buckets[i];
        if (isinf(bucket_le[i]))
            pf_buf_printf(&b, "psflow_serve_request_seconds_bucket{le=\"+Inf\"} %" PRId64 "\n",
                          cum);
        else
            pf_buf_printf(&b, "psflow_serve_request_seconds_bucket{le=\"%g\"} %" PRId64 "\n",
                          bucket_le[i], cum);
    }
    pf_buf_printf(
        &b,
        "psflow_serve_request_seconds_sum %.6f\npsflow_serve_request_seconds_count %" PRId64 "\n",
        s->latency_sum, s->predicts);
    pthread_mutex_unlock(&s->mu);
    size_t len = b.len;
    void *text = pf_buf_detach(&b);
    if (!text)
        return MHD_NO;
    return answer(rs, 200, "text/plain; version=0.0.4", text, len, pf_free, -1);
}

/* --- predict ---------------------------------------------------------------------------- */

/* On the batcher's thread. The lock waits until start_predict has suspended the connection;
 * the resume comes after it is released, since the answer may then free rs at once. */
static void on_done(serve_item *it) {
    request_state *rs = it->ctx;
    struct MHD_Connection *c = rs->c;
    pthread_mutex_lock(&rs->mu);
    rs->done = 1;
    pthread_mutex_unlock(&rs->mu);
    MHD_resume_connection(c);
}

/* Frees the request's body and its share of the server's body bytes. */
static void release_body(request_state *rs) {
    __atomic_sub_fetch(&rs->s->buffered, rs->held, __ATOMIC_SEQ_CST);
    rs->held = 0;
    pf_buf_deinit(&rs->body);
}

static enum MHD_Result finish_predict(request_state *rs) {
    server *s = rs->s;
    serve_item *it = &rs->item;
    if (it->status == 504)
        return problem(rs, 504, NULL, "the request waited longer than its %.3g s timeout",
                       s->o.request_timeout);
    if (it->status != 200)
        return problem(rs, 503, NULL,
                       "no model version is loaded yet (no verified checkpoint "
                       "of job %s)",
                       s->o.spec->name);
    if (rs->want_version >= 0 && it->version != rs->want_version)
        return problem(rs, 404, NULL,
                       "version %" PRId64 " is not served; the serving version is %" PRId64,
                       rs->want_version, it->version);
    pf_buf out;
    pf_buf_init(&out, ANSWER_MAX);
    if (serve_answer_write(&out, it->version, rs->req.columnar, rs->y, rs->req.n, s->outputs) !=
        PF_OK) {
        pf_buf_deinit(&out);
        return problem(rs, 503, NULL, "out of memory");
    }
    size_t len = out.len;
    return answer(rs, 200, "application/json", pf_buf_detach(&out), len, pf_free, it->version);
}

/* The body is complete: parse it and queue its examples (then the connection waits,
 * suspended), or answer at once. */
static enum MHD_Result start_predict(request_state *rs) {
    server *s = rs->s;
    int st = serve_request_parse(&s->o.spec->model, (const char *)rs->body.data, rs->body.len,
                                 s->o.max_instances, &rs->req, &rs->err);
    release_body(rs);
    if (st)
        return problem(rs, st, rs->err.pointer, "%s", rs->err.message);
    rs->y = pf_mallocarray((size_t)rs->req.n * (size_t)s->outputs, sizeof(float));
    if (!rs->y)
        return problem(rs, 503, NULL, "out of memory");
    rs->item = (serve_item){.x = rs->req.x,
                            .n = rs->req.n,
                            .y = rs->y,
                            .deadline = rs->start + s->o.request_timeout,
                            .done = on_done,
                            .ctx = rs};
    /* Idle: run on this thread, with no queue and no thread switch - but not while the ps
     * tasks switch checkpoints (--ps): that wait must not hold an HTTP thread. */
    if (!(s->remote && serve_remote_switching(s->remote)) &&
        serve_batcher_run_now(s->batcher, &rs->item))
        return finish_predict(rs);
    pthread_mutex_lock(&rs->mu);
    int refused = serve_batcher_submit(s->batcher, &rs->item);
    if (!refused) {
        rs->queued = 1;
        MHD_suspend_connection(rs->c);
        rs->suspended = 1;
    }
    pthread_mutex_unlock(&rs->mu);
    if (refused)
        return problem(rs, 503, NULL, "the queue is full (%d examples wait at most); retry",
                       (int)(s->o.max_instances * 8 > s->o.max_batch * 64 ? s->o.max_instances * 8
                                                                          : s->o.max_batch * 64));
    return MHD_YES;
}

/* --- libmicrohttpd callbacks ------------------------------------------------------------ */

static int json_media(const char *type) {
    if (!type)
        return 0;
    size_t n = strlen("application/json");
    return !strncasecmp(type, "application/json", n) &&
           (type[n] == '\0' || type[n] == ';' || type[n] == ' ');
}

/* The watch's record of connection c. */
static pf_http_conn *watched(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

/* One line for a refused request; control characters of the (decoded) URL are shown as '?'
 * so that a request cannot forge log lines. */
static void log_refusal(const char *method, const char *url, int status, const char *why) {
    char shown[201], verb[17];
    snprintf(shown, sizeof shown, "%s", url);
    snprintf(verb, sizeof verb, "%s", method);
    for (char *p = shown; *p; p++)
        *p = (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p;
    for (char *p = verb; *p; p++)
        *p = (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p;
    fprintf(stderr, LOG ": refused %s %s: %d %s\n", verb, shown, status, why);
}

/* The first call of a request: decides what it is and whether it is refused before its body
 * is read (then the refusal is answered at once, its body never read). */
static void first_call(request_state *rs, const char *url, const char *method) {
    server *s = rs->s;
    rs->route = route_of(s, url, &rs->want_version);
    int post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (rs->route != ROUTE_HEALTH && !token_ok(s, rs->c)) {
        rs->refused = 401;
        pf_error_set(&rs->err, PF_ERR_INVALID, "", "a valid bearer token is required");
    } else if (rs->route == ROUTE_NONE) {
        rs->refused = 404;
        pf_error_set(&rs->err, PF_ERR_NOT_FOUND, "",
                     "no such route; this server serves model %s at %s (:predict, /metadata)",
                     s->o.spec->name, s->base);
    } else if (rs->route == ROUTE_PREDICT ? !post : !get) {
        rs->refused = 405;
        pf_error_set(&rs->err, PF_ERR_INVALID, "", "%s takes %s", url,
                     rs->route == ROUTE_PREDICT ? "POST" : "GET");
    } else if (rs->route == ROUTE_PREDICT &&
               !json_media(MHD_lookup_connection_value(rs->c, MHD_HEADER_KIND, "Content-Type"))) {
        rs->refused = 415;
        pf_error_set(&rs->err, PF_ERR_INVALID, "", "the body must be application/json");
    } else {
        const char *cl = MHD_lookup_connection_value(rs->c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
            rs->refused = 413;
            pf_error_set(&rs->err, PF_ERR_RANGE, "", "the body is larger than %zu bytes",
                         s->o.max_body);
        }
    }
    if (rs->refused)
        log_refusal(method, url, rs->refused, rs->err.message);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    (void)version;
    server *s = cls;
    request_state *rs = *con_cls;
    if (!rs) {
        rs = pf_calloc(1, sizeof *rs);
        if (!rs)
            return MHD_NO;
        rs->s = s;
        rs->c = c;
        rs->start = pf_clock_now();
        pthread_mutex_init(&rs->mu, NULL);
        pf_buf_init(&rs->body, s->o.max_body);
        pf_error_clear(&rs->err);
        *con_cls = rs;
        pf_http_watch_headers_done(s->watch, watched(c));
        first_call(rs, url, method);
        /* A refusal is answered in this first call (libmicrohttpd then sends no "100
         * Continue", reads no body and closes the connection after the answer) when the
         * body is too large, awaits "100 Continue" or there is none; a small body already on
         * its way is read (at most --max-body, within the timeout) and then answered, so the
         * client is not cut off while it sends. */
        const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
        int has_body = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length") ||
                       MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
        if (rs->refused &&
            (rs->refused == 413 || !has_body || (expect && !strcasecmp(expect, "100-continue"))))
            return problem(rs, rs->refused, rs->err.pointer, "%s", rs->err.message);
        return MHD_YES;
    }
    if (*upload_size) {
        if (pf_clock_now() - rs->start > s->o.request_timeout) {
            fprintf(stderr, LOG ": closing a connection whose body took over %.3g s\n",
                    s->o.request_timeout);
            return MHD_NO;
        }
        rs->discarded += rs->refused ? *upload_size : 0;
        if (rs->discarded > s->o.max_body) {
            log_refusal(method, url, rs->refused, "and its body is larger than --max-body: closed");
            return MHD_NO;
        }
        if (!rs->refused &&
            __atomic_add_fetch(&s->buffered, *upload_size, __ATOMIC_SEQ_CST) > s->o.max_buffered) {
            /* every connection's bodies together: bounded */
            __atomic_sub_fetch(&s->buffered, *upload_size, __ATOMIC_SEQ_CST);
            rs->refused = 503;
            pf_error_set(&rs->err, PF_ERR_RANGE, "",
                         "the server holds %zu bytes of request bodies (--max-buffered); retry",
                         s->o.max_buffered);
            release_body(rs);
            log_refusal(method, url, 503, rs->err.message);
        } else if (!rs->refused) {
            rs->held += *upload_size;
            if (pf_buf_append(&rs->body, upload, *upload_size) != PF_OK) {
                rs->refused = 413; /* a chunked body: its length shows only now */
                pf_error_set(&rs->err, PF_ERR_RANGE, "", "the body is larger than %zu bytes",
                             s->o.max_body);
                release_body(rs);
                log_refusal(method, url, 413, rs->err.message);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    pf_http_watch_body_done(s->watch, watched(c));
    if (rs->refused)
        return problem(rs, rs->refused, rs->err.pointer, "%s", rs->err.message);
    switch (rs->route) {
    case ROUTE_PREDICT:
        return rs->queued ? finish_predict(rs) : start_predict(rs);
    case ROUTE_STATUS:
        return status_route(rs);
    case ROUTE_METADATA:
        return metadata_route(rs);
    case ROUTE_METRICS:
        return metrics_route(rs);
    case ROUTE_HEALTH: {
        int64_t step, loaded, refused;
        version_counts(s, &step, &loaded, &refused);
        return step >= 0 ? send_json(rs, 200,
                                     json_pack("{s:s, s:I}", "status", "ok", "model_version",
                                               (json_int_t)step),
                                     step)
                         : problem(rs, 503, NULL, "no model version is loaded yet");
    }
    default:
        return MHD_NO;
    }
}

/* Every connection is watched from its accept: its headers are due within 10 s, its body
 * within the request timeout, so one that trickles bytes cannot hold its slot; with every
 * slot but an eighth (the reserve) taken, the one that has waited longest for its request
 * gives way, as the coordinator's API does (psflow/http_guard.h). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        int open = __atomic_add_fetch(&s->open, 1, __ATOMIC_SEQ_CST);
        /* With no one to give way, it takes a reserve slot, where 2 s of silence end it. */
        int reserve = open > s->o.max_connections - s->o.max_connections / 8 &&
                      !pf_http_watch_evict(s->watch);
        if (reserve)
            MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 2u);
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *from =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context = fd ? pf_http_watch_add(s->watch, fd->connect_fd,
                                                 from ? from->client_addr : NULL, reserve)
                             : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        __atomic_sub_fetch(&s->open, 1, __ATOMIC_SEQ_CST);
        pf_http_watch_remove(s->watch, *socket_context);
        *socket_context = NULL;
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    server *s = cls;
    (void)toe;
    pf_http_watch_answered(s->watch, watched(c));
    request_state *rs = *con_cls;
    if (!rs)
        return;
    release_body(rs);
    serve_request_deinit(&rs->req);
    pf_free(rs->y);
    pthread_mutex_destroy(&rs->mu);
    pf_free(rs);
    *con_cls = NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fprintf(stderr, LOG ": http: ");
    vfprintf(stderr, fmt, ap);
}

/* --- the model and the watcher ---------------------------------------------------------- */

static int64_t run_model(void *ctx, const float *x, int n, float *y) {
    server *s = ctx;
    if (s->remote)
        return serve_remote_run(s->remote, x, n, y);
    const serve_version *v = serve_versions_acquire(s->versions);
    if (!v)
        return -1;
    pf_model_predict(s->model, v->params, x, n, y);
    int64_t step = v->step;
    serve_versions_release(s->versions, v);
    return step;
}

static void *watch(void *arg) {
    server *s = arg;
    while (!__atomic_load_n(&s->stopping, __ATOMIC_SEQ_CST)) {
        if (s->remote)
            serve_remote_refresh(s->remote);
        else if (serve_versions_refresh(s->versions) < 0)
            fprintf(stderr, LOG ": out of memory loading a checkpoint; still serving the old "
                                "version\n");
        int64_t step, loaded, refused;
        version_counts(s, &step, &loaded, &refused);
        stats_set(s->o.stats, 0, step);
        for (double t = 0;
             t < s->o.poll_seconds && !__atomic_load_n(&s->stopping, __ATOMIC_SEQ_CST); t += 0.05)
            pf_clock_sleep(0.05);
    }
    return NULL;
}

static void defaults(serve_options *o) {
    if (!o->listen_host || !*o->listen_host)
        o->listen_host = "0.0.0.0";
    if (o->max_batch < 1)
        o->max_batch = 64;
    if (o->max_wait < 0)
        o->max_wait = 0;
    if (o->threads < 1)
        o->threads = 1;
    if (o->max_instances < 1)
        o->max_instances = 1000;
    if (o->request_timeout <= 0)
        o->request_timeout = 5;
    if (o->max_body < 1)
        o->max_body = (size_t)16 << 20;
    if (o->max_buffered < o->max_body)
        o->max_buffered = o->max_body > ((size_t)256 << 20) ? o->max_body : (size_t)256 << 20;
    if (o->max_connections < 4)
        o->max_connections = 512;
    if (o->poll_seconds <= 0)
        o->poll_seconds = 1;
}

static void teardown(server *s) {
    __atomic_store_n(&s->stopping, 1, __ATOMIC_SEQ_CST);
    if (s->watching)
        pthread_join(s->watcher, NULL);
    pf_http_watch_destroy(s->watch); /* after libmicrohttpd stopped */
    serve_versions_destroy(s->versions);
    serve_remote_destroy(s->remote);
    pf_model_destroy(s->model);
    if (s->blas_before > 0) /* the process (an agent) gets its BLAS threads back */
        pf_backend_openblas_set_threads(s->blas_before);
    pthread_mutex_destroy(&s->mu);
}

/* Whether the whole model is too big for this process (serve_options.memory): then err says
 * so and what to do instead. */
static int model_too_big(const serve_options *o, pf_error *err) {
    int64_t need = 3 * (int64_t)pf_model_num_params(&o->spec->model) * (int64_t)sizeof(float);
    int64_t have = o->memory > 0 ? o->memory : pf_mem_system_bytes();
    if (have <= 0 || need <= have)
        return 0;
    char a[32], b[32];
    pf_footprint_format_bytes(need, a, sizeof a);
    pf_footprint_format_bytes(have, b, sizeof b);
    pf_error_set(err, PF_ERR_SPEC, NULL,
                 "job %s needs about %s (3 x its values: 2 versions and a checkpoint read), more "
                 "than this process may use (%s%s): serve it from read-only ps tasks with --ps "
                 "(docs/serving.md section 7)",
                 o->spec->name, a, b, o->memory > 0 ? ", --memory" : "");
    return 1;
}

static struct MHD_Daemon *listen_on(server *s, pf_error *err) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)s->o.port);
    const char *host = !strcmp(s->o.listen_host, "localhost") ? "127.0.0.1" : s->o.listen_host;
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        pf_error_set(err, PF_ERR_UNAVAILABLE, NULL, "--listen: '%s' is not an IPv4 address", host);
        return NULL;
    }
    errno = 0;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC |
            MHD_USE_ERROR_LOG,
        (uint16_t)s->o.port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_log, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE, 2u,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        30u, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, s, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_END);
    if (!d)
        pf_error_set(err, PF_ERR_UNAVAILABLE, NULL, "cannot listen on %s:%d: %s", host, s->o.port,
                     errno ? strerror(errno) : "address in use or not available");
    return d;
}

/* The model and its versions: loaded here, or read from read-only ps tasks (--ps). */
static pf_status set_up_model(server *s, const char *job_dir, int capacity, pf_error *err) {
    const pf_job_spec *spec = s->o.spec;
    pf_status st;
    if (s->o.n_ps > 0) {
        serve_remote_options ro = {.spec = spec,
                                   .ps_addrs = s->o.ps_addrs,
                                   .n_ps = s->o.n_ps,
                                   .reader = s->o.reader,
                                   .task_key = s->o.task_key,
                                   .ca_file = s->o.ca_file,
                                   .retry_seconds = s->o.request_timeout,
                                   .capacity = capacity,
                                   .job_dir = job_dir,
                                   .log = LOG,
                                   .stop = s->o.stop};
        return serve_remote_create(&ro, &s->remote, err);
    }
    st = pf_model_create(&spec->model, pf_backend_openblas(), capacity, &s->model);
    if (st == PF_OK)
        st = serve_versions_create(&spec->model, job_dir, LOG, &s->versions);
    if (st != PF_OK)
        return pf_error_set(err, st, NULL, "cannot set up the model: %s", pf_strerror(st));
    return PF_OK;
}

pf_status serve_run(const serve_options *opts, pf_error *err) {
    pf_error_clear(err);
    server s = {.o = *opts};
    defaults(&s.o);
    pthread_mutex_init(&s.mu, NULL);
    const pf_job_spec *spec = s.o.spec;
    s.width = pf_model_input_width(&spec->model);
    s.outputs = spec->model.outputs;
    snprintf(s.base, sizeof s.base, "/v1/models/%s", spec->name);
    char job_dir[PF_CKPT_PATH_MAX];
    pf_status st = pf_checkpoint_job_dir(s.o.checkpoint_dir, spec->name, job_dir, sizeof job_dir);
    if (st != PF_OK) {
        teardown(&s);
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    }
    if (!s.o.n_ps && model_too_big(&s.o, err)) {
        teardown(&s);
        return PF_ERR_SPEC;
    }
    /* Small batches want one thread: OpenBLAS's helpers would spin between the passes. */
    s.blas_before = pf_backend_openblas_threads();
    pf_backend_openblas_set_threads(s.o.threads);
    /* One pass holds the largest request, so one version answers it whole. */
    int capacity = s.o.max_instances > s.o.max_batch ? s.o.max_instances : s.o.max_batch;
    if ((st = set_up_model(&s, job_dir, capacity, err)) != PF_OK) {
        teardown(&s);
        return st;
    }
    /* The first version before the port opens, so that /healthz says 200 from the start. */
    for (double t0 = pf_clock_now();
         (s.remote ? serve_remote_refresh(s.remote) : serve_versions_refresh(s.versions)) == 0 &&
         pf_clock_now() - t0 < s.o.wait_first && !*s.o.stop;)
        pf_clock_sleep(0.2);
    serve_batcher_options bo = {.width = s.width,
                                .outputs = s.outputs,
                                .max_batch = s.o.max_batch,
                                .capacity = capacity,
                                .max_wait = s.o.max_wait,
                                .max_queued = s.o.max_instances * 8 > s.o.max_batch * 64
                                                  ? s.o.max_instances * 8
                                                  : s.o.max_batch * 64,
                                .run = run_model,
                                .run_ctx = &s};
    st = serve_batcher_create(&bo, &s.batcher);
    if (st != PF_OK) {
        teardown(&s);
        return pf_error_set(err, st, NULL, "cannot start the batcher");
    }
    if (pthread_create(&s.watcher, NULL, watch, &s) == 0)
        s.watching = 1;
    pf_http_watch_limits limits = {.header_s = 10,
                                   .body_s = s.o.request_timeout,
                                   .idle_s = 30,
                                   .evict_after_s = 0.5,
                                   .per_address = 64};
    if (!(s.watch = pf_http_watch_create(&limits))) {
        serve_batcher_destroy(s.batcher);
        teardown(&s);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "cannot start the connection watch");
    }
    struct MHD_Daemon *d = listen_on(&s, err);
    if (!d) {
        serve_batcher_destroy(s.batcher);
        teardown(&s);
        return PF_ERR_UNAVAILABLE;
    }
    const union MHD_DaemonInfo *bound = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (bound && bound->port)
        s.o.port = bound->port; /* the kernel's pick when port was 0 */
    int64_t step, loaded, refused;
    version_counts(&s, &step, &loaded, &refused);
    stats_set(s.o.stats, s.o.port, step);
    fprintf(stderr,
            LOG ": model %s on http://%s:%d%s:predict (%s, batches of up to %d examples, "
                "waiting %.0f us for company, %d BLAS thread%s; %s); checkpoints from %s\n",
            spec->name, s.o.listen_host, s.o.port, s.base,
            step >= 0 ? "serving" : "no verified checkpoint yet: 503 until one appears",
            s.o.max_batch, s.o.max_wait * 1e6, s.o.threads, s.o.threads == 1 ? "" : "s",
            s.o.token && *s.o.token ? "bearer token required" : "no token", job_dir);
    if (s.remote)
        fprintf(stderr,
                LOG ": values on %d read-only ps task%s (reader %d): each pass pulls its "
                    "rows\n",
                s.o.n_ps, s.o.n_ps == 1 ? "" : "s", s.o.reader);
    if (step >= 0)
        fprintf(stderr, LOG ": version %" PRId64 "\n", step);
    while (!*s.o.stop)
        pf_clock_sleep(0.1);
    fprintf(stderr, LOG ": stopping\n");
    if (s.remote)
        serve_remote_stop(s.remote);
    MHD_quiesce_daemon(d);
    serve_batcher_stop(s.batcher); /* answers what still waits (503), resuming it */
    /* The answers on their way go out before the connections close (2 s at most). */
    for (double t0 = pf_clock_now();
         __atomic_load_n(&s.open, __ATOMIC_SEQ_CST) > 0 && pf_clock_now() - t0 < 2;)
        pf_clock_sleep(0.05);
    MHD_stop_daemon(d);
    serve_batcher_destroy(s.batcher);
    teardown(&s);
    return PF_OK;
}
