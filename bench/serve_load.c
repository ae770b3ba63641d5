/* serve_load.c - the load generator of bench/serve.sh: predict requests against `psflow serve`
 * over HTTP/1.1 keep-alive connections, and the forward time of the same model in-process.
 *
 *   serve_load forward --job FILE --checkpoint STEP_DIR --body FILE [--seconds S]
 *                      [--blas-threads N]
 *       loads the job's model with the checkpoint's parameters (pf_checkpoint_merge, as psflow
 *       serve does) on the openblas backend and times pf_model_predict on the body's
 *       instances, one call at a time, for about S seconds [2]; prints the median and p99.
 *       The BLAS threads are OpenBLAS's default unless --blas-threads, as in psflow serve,
 *       which sets none.
 *   serve_load closed --addr HOST:PORT --model NAME --body FILE --connections C --seconds S
 *       C connections, each sending its next request as soon as its answer arrives.
 *   serve_load open --addr HOST:PORT --model NAME --body FILE --rate R --seconds S
 *                   [--connections C]
 *       request i is due at t0 + i / R whatever the answers do; it goes out on the first idle
 *       connection of C [64] (waiting for one when all are busy) and its latency counts from
 *       when it was due, not from when it went out, so a stalled server (or generator) shows
 *       in the latency instead of thinning the load (no coordinated omission).
 *   closed and open take --trace FILE: one line per answer, "DUE LATENCY STATUS" (seconds
 *   from the start), to see when the slow ones were.
 *
 * BODY is a predict request ({"instances": [...]}) sent as it is. The token comes from
 * PSFLOW_TOKEN. One thread, epoll, non-blocking sockets with TCP_NODELAY; a timerfd wakes it
 * at each due time. A load prints one line of key=value: requests answered, requests/s,
 * latency p50/p99/max (ms, every answer), answers by status, failed requests (the connection
 * broke or the answer never came), failed connects, the generator's own lag (send - due),
 * the versions that answered. Exit status 0 unless it could not run.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "psflow/backend.h"
#include "psflow/checkpoint.h"
#include "psflow/clock.h"
#include "psflow/model.h"
#include "psflow/spec.h"

#define DRAIN_SECONDS 10.0 /* how long answers are awaited after the last send */
#define MAX_STATUS    600

/* --- samples ---------------------------------------------------------------------------- */

typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

static void samples_add(samples *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) {
            fprintf(stderr, "serve_load: out of memory\n");
            exit(1);
        }
    }
    s->v[s->n++] = x;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of the sorted samples; 0 when there are none. */
static double quantile(const samples *s, double q) {
    if (!s->n)
        return 0;
    size_t i = (size_t)(q * (double)s->n);
    return s->v[i < s->n ? i : s->n - 1];
}

/* --- options ---------------------------------------------------------------------------- */

typedef struct options {
    const char *mode, *addr, *model, *body, *job, *checkpoint, *trace;
    int connections, blas_threads;
    double seconds, rate;
} options;

static void usage(void) {
    fprintf(stderr,
            "usage: serve_load forward --job FILE --checkpoint STEP_DIR --body FILE [--seconds S]"
            " [--blas-threads N]\n"
            "       serve_load closed --addr HOST:PORT --model NAME --body FILE --connections C"
            " --seconds S\n"
            "       serve_load open --addr HOST:PORT --model NAME --body FILE --rate R"
            " --seconds S [--connections C]\n");
    exit(2);
}

static void parse_options(int argc, char **argv, options *o) {
    *o = (options){.connections = 0, .seconds = 0, .rate = 0};
    if (argc < 2)
        usage();
    o->mode = argv[1];
    for (int i = 2; i < argc; i += 2) { /* --name value pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(a, "--addr"))
            o->addr = v;
        else if (!strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--body"))
            o->body = v;
        else if (!strcmp(a, "--job"))
            o->job = v;
        else if (!strcmp(a, "--checkpoint"))
            o->checkpoint = v;
        else if (!strcmp(a, "--trace"))
            o->trace = v;
        else if (!strcmp(a, "--connections"))
            o->connections = atoi(v);
        else if (!strcmp(a, "--blas-threads"))
            o->blas_threads = atoi(v);
        else if (!strcmp(a, "--seconds"))
            o->seconds = atof(v);
        else if (!strcmp(a, "--rate"))
            o->rate = atof(v);
        else
            usage();
    }
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *data = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len + 65536 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *grown = realloc(data, cap);
            if (!grown)
                break;
            data = grown;
        }
        size_t k = fread(data + *len, 1, cap - *len, f);
        *len += k;
        if (k == 0)
            break;
    }
    fclose(f);
    return data;
}

/* --- forward: pf_model_predict in-process ------------------------------------------------ */

/* The body's instances as rows of `width` floats: a new array, *n rows; NULL on a mismatch. */
static float *body_instances(const char *path, int width, int *n) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    json_t *inst = root ? json_object_get(root, "instances") : NULL;
    float *x = NULL;
    *n = json_is_array(inst) ? (int)json_array_size(inst) : 0;
    if (*n > 0)
        x = malloc((size_t)*n * (size_t)width * sizeof *x);
    for (int i = 0; x && i < *n; i++) {
        json_t *row = json_array_get(inst, (size_t)i);
        if (!json_is_array(row) || (int)json_array_size(row) != width) {
            free(x);
            x = NULL;
            break;
        }
        for (int j = 0; j < width; j++)
            x[(size_t)i * (size_t)width + (size_t)j] =
                (float)json_number_value(json_array_get(row, (size_t)j));
    }
    json_decref(root);
    return x;
}

static int forward(const options *o) {
    if (!o->job || !o->checkpoint || !o->body)
        usage();
    pf_job_spec spec;
    pf_error err;
    pf_error_clear(&err);
    if (pf_job_spec_load(o->job, &spec, &err) != PF_OK) {
        fprintf(stderr, "serve_load: %s: %s\n", o->job, err.message);
        return 1;
    }
    int width = pf_model_input_width(&spec.model), n = 0;
    float *x = body_instances(o->body, width, &n);
    size_t n_params = pf_model_num_params(&spec.model);
    float *params = malloc(n_params * sizeof *params);
    float *y = x ? malloc((size_t)n * (size_t)spec.model.outputs * sizeof *y) : NULL;
    pf_checkpoint_model *m = NULL;
    pf_model *model = NULL;
    int rc = 1;
    if (!x || !params || !y) {
        fprintf(stderr, "serve_load: %s: no instances of %d numbers\n", o->body, width);
    } else if (pf_checkpoint_merge(o->checkpoint, &m, &err) != PF_OK ||
               pf_checkpoint_model_params(m, &spec.model, params, &err) != PF_OK) {
        fprintf(stderr, "serve_load: %s: %s\n", o->checkpoint, err.message);
    } else if (pf_model_create(&spec.model, pf_backend_openblas(), n, &model) != PF_OK) {
        fprintf(stderr, "serve_load: cannot create the model\n");
    } else {
        int threads = o->blas_threads > 0 ? pf_backend_openblas_set_threads(o->blas_threads)
                                          : pf_backend_openblas_share(1);
        double seconds = o->seconds > 0 ? o->seconds : 2;
        for (int i = 0; i < 50; i++) /* warm the caches and OpenBLAS's buffers */
            pf_model_predict(model, params, x, n, y);
        samples t = {0};
        double t0 = pf_clock_now();
        while (t.n < 200000 && (t.n < 20 || pf_clock_now() - t0 < seconds)) {
            double a = pf_clock_now();
            pf_model_predict(model, params, x, n, y);
            samples_add(&t, pf_clock_now() - a);
        }
        qsort(t.v, t.n, sizeof *t.v, by_value);
        printf("forward batch=%d runs=%zu blas_threads=%d median_ms=%.4f p99_ms=%.4f "
               "min_ms=%.4f\n",
               n, t.n, threads, quantile(&t, 0.5) * 1e3, quantile(&t, 0.99) * 1e3, t.v[0] * 1e3);
        free(t.v);
        rc = 0;
    }
    pf_model_destroy(model);
    pf_checkpoint_model_destroy(m);
    free(params);
    free(x);
    free(y);
    pf_job_spec_deinit(&spec);
    return rc;
}

/* --- load: HTTP/1.1 keep-alive over epoll ------------------------------------------------ */

typedef struct conn {
    int fd; /* -1: closed */
    int busy;
    double due;  /* when its request was due (open loop) or went out (closed loop) */
    size_t sent; /* request bytes written */
    char *in;
    size_t in_len, in_cap;
} conn;

typedef struct load {
    const options *o;
    struct sockaddr_in addr;
    char *req;
    size_t req_len;
    conn *c;
    int ep, tfd;
    samples lat, lag;
    FILE *trace; /* --trace: one line per answer */
    double t0;
    int64_t by_status[MAX_STATUS];
    int64_t failed, failed_connects, reconnects, answered;
    int64_t version_min, version_max, version_changes, version_last;
} load;

static int epoll_set(load *l, int op, conn *c, uint32_t events) {
    struct epoll_event ev = {.events = events, .data.ptr = c};
    return epoll_ctl(l->ep, op, c->fd, &ev);
}

static void conn_close(load *l, conn *c) {
    if (c->fd >= 0) {
        epoll_ctl(l->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->busy = 0;
    c->in_len = 0;
}

static int conn_open(load *l, conn *c) {
    conn_close(l, c);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&l->addr, sizeof l->addr) != 0) {
        if (fd >= 0)
            close(fd);
        l->failed_connects++;
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    c->fd = fd;
    if (epoll_set(l, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLRDHUP) != 0) {
        conn_close(l, c);
        l->failed_connects++;
        return -1;
    }
    return 0;
}

/* A request on c broke: counted as failed; the connection is opened again. */
static void conn_fail(load *l, conn *c) {
    if (c->busy)
        l->failed++;
    conn_close(l, c);
    conn_open(l, c);
}

/* Writes what the socket takes of c's request; waits for EPOLLOUT for the rest. */
static void conn_write(load *l, conn *c) {
    while (c->sent < l->req_len) {
        ssize_t k = send(c->fd, l->req + c->sent, l->req_len - c->sent, MSG_NOSIGNAL);
        if (k > 0) {
            c->sent += (size_t)k;
        } else if (k < 0 && errno == EAGAIN) {
            epoll_set(l, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLOUT | EPOLLRDHUP);
            return;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else {
            conn_fail(l, c);
            return;
        }
    }
    epoll_set(l, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLRDHUP);
}

static void conn_start(load *l, conn *c, double due) {
    if (c->fd < 0 && conn_open(l, c) != 0) {
        l->failed++;
        return;
    }
    c->busy = 1;
    c->due = due;
    c->sent = 0;
    c->in_len = 0;
    conn_write(l, c);
}

/* The value of header `name` in the header block h[0..len), or NULL. */
static const char *header(const char *h, size_t len, const char *name) {
    size_t n = strlen(name);
    for (const char *p = memchr(h, '\n', len); p && p + 1 + n < h + len;
         p = memchr(p + 1, '\n', (size_t)(h + len - (p + 1)))) {
        if (!strncasecmp(p + 1, name, n) && p[1 + n] == ':')
            return p + 2 + n;
    }
    return NULL;
}

/* Parses a complete answer at the start of c->in, if there is one, and records it (c is
 * idle again). Returns 0 (no answer yet, or one on a connection that stays open), 1 (an answer
 * after which the server closes the connection) or -1 (not an HTTP answer). */
static int conn_answer(load *l, conn *c, double now) {
    char *end = c->in_len >= 4 ? memmem(c->in, c->in_len, "\r\n\r\n", 4) : NULL;
    if (!end)
        return 0;
    size_t head = (size_t)(end - c->in) + 4;
    const char *cl = header(c->in, head, "Content-Length");
    if (strncmp(c->in, "HTTP/1.", 7) != 0 || !cl) {
        fprintf(stderr, "serve_load: an answer without a status line or Content-Length\n");
        return -1;
    }
    size_t total = head + strtoull(cl, NULL, 10);
    if (c->in_len < total)
        return 0;
    int status = atoi(c->in + 9);
    l->by_status[status > 0 && status < MAX_STATUS ? status : 0]++;
    l->answered++;
    samples_add(&l->lat, now - c->due);
    if (l->trace)
        fprintf(l->trace, "%.6f %.6f %d\n", c->due - l->t0, now - c->due, status);
    const char *v = header(c->in, head, "PSFlow-Model-Version");
    if (v && status == 200) {
        int64_t version = strtoll(v, NULL, 10);
        if (l->version_last >= 0 && version != l->version_last)
            l->version_changes++;
        if (l->version_min < 0 || version < l->version_min)
            l->version_min = version;
        if (version > l->version_max)
            l->version_max = version;
        l->version_last = version;
    }
    const char *conn_hdr = header(c->in, head, "Connection");
    while (conn_hdr && *conn_hdr == ' ')
        conn_hdr++;
    c->busy = 0;
    c->in_len = 0;
    return conn_hdr && !strncasecmp(conn_hdr, "close", 5);
}

/* Reads what arrived on c. */
static void conn_read(load *l, conn *c) {
    for (;;) {
        if (c->in_cap - c->in_len < 65536) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 131072;
            char *grown = realloc(c->in, cap);
            if (!grown) {
                conn_fail(l, c);
                return;
            }
            c->in = grown;
            c->in_cap = cap;
        }
        ssize_t k = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1, 0);
        if (k > 0) {
            c->in_len += (size_t)k;
            c->in[c->in_len] = '\0'; /* header() and strtoull stop there */
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        int eof = !(k < 0 && errno == EAGAIN);
        int answered = c->busy ? conn_answer(l, c, pf_clock_now()) : 0;
        if (answered < 0 || (eof && c->busy)) {
            conn_fail(l, c); /* a request without its answer */
        } else if (answered > 0 || eof) {
            l->reconnects++; /* the server closed after an answer, or an idle connection */
            conn_close(l, c);
            conn_open(l, c);
        }
        return;
    }
}

static void timer_at(load *l, double t) {
    struct itimerspec its = {0};
    if (t > 0) {
        its.it_value.tv_sec = (time_t)t;
        its.it_value.tv_nsec = (long)((t - (double)(time_t)t) * 1e9);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1;
    }
    timerfd_settime(l->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static conn *idle_conn(load *l, int n) {
    for (int i = 0; i < n; i++)
        if (!l->c[i].busy)
            return &l->c[i];
    return NULL;
}

static int busy_conns(load *l, int n) {
    int b = 0;
    for (int i = 0; i < n; i++)
        b += l->c[i].busy;
    return b;
}

static int setup(load *l, const options *o, int n) {
    char host[256];
    const char *colon = o->addr ? strrchr(o->addr, ':') : NULL;
    if (!colon || !o->model || !o->body || (size_t)(colon - o->addr) >= sizeof host)
        usage();
    memcpy(host, o->addr, (size_t)(colon - o->addr));
    host[colon - o->addr] = '\0';
    l->addr.sin_family = AF_INET;
    l->addr.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, !strcmp(host, "localhost") ? "127.0.0.1" : host, &l->addr.sin_addr) !=
        1) {
        fprintf(stderr, "serve_load: %s is not an IPv4 address\n", host);
        return -1;
    }
    size_t body_len;
    char *body = read_file(o->body, &body_len);
    if (!body) {
        fprintf(stderr, "serve_load: cannot read %s\n", o->body);
        return -1;
    }
    const char *token = getenv("PSFLOW_TOKEN");
    char auth[600] = "";
    if (token && *token)
        snprintf(auth, sizeof auth, "Authorization: Bearer %.500s\r\n", token);
    char head[1200];
    int hl = snprintf(head, sizeof head,
                      "POST /v1/models/%.200s:predict HTTP/1.1\r\nHost: %.260s\r\n%s"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      o->model, o->addr, auth, body_len);
    l->req = malloc((size_t)hl + body_len);
    if (!l->req)
        return -1;
    memcpy(l->req, head, (size_t)hl);
    memcpy(l->req + hl, body, body_len);
    l->req_len = (size_t)hl + body_len;
    free(body);
    l->c = calloc((size_t)n, sizeof *l->c);
    l->ep = epoll_create1(EPOLL_CLOEXEC);
    l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (!l->c || l->ep < 0 || l->tfd < 0)
        return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(l->ep, EPOLL_CTL_ADD, l->tfd, &ev);
    for (int i = 0; i < n; i++) {
        l->c[i].fd = -1;
        conn_open(l, &l->c[i]);
    }
    l->version_min = l->version_max = l->version_last = -1;
    prctl(PR_SET_TIMERSLACK, 1UL); /* the timerfd wakes within a microsecond, not 50 */
    return 0;
}

/* Handles what epoll reports, waiting at most until `until`. */
static void poll_once(load *l, double until) {
    struct epoll_event evs[64];
    double wait = until - pf_clock_now();
    int ms = wait <= 0 ? 0 : (int)(wait * 1e3) + 1;
    int k = epoll_wait(l->ep, evs, 64, ms > 100 ? 100 : ms);
    for (int i = 0; i < k; i++) {
        conn *c = evs[i].data.ptr;
        if (!c) {
            uint64_t expirations;
            if (read(l->tfd, &expirations, sizeof expirations) < 0) {
                /* nothing: a timer rearmed before its read */
            }
            continue;
        }
        if (c->fd < 0)
            continue;
        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            conn_read(l, c);
        if (c->fd >= 0 && c->busy && (evs[i].events & EPOLLOUT))
            conn_write(l, c);
    }
}

static int run_load(const options *o) {
    int open_loop = !strcmp(o->mode, "open");
    int n = o->connections > 0 ? o->connections : (open_loop ? 64 : 1);
    if (o->seconds <= 0 || (open_loop && o->rate <= 0))
        usage();
    load l = {.o = o};
    if (setup(&l, o, n) != 0)
        return 1;
    if (o->trace && !(l.trace = fopen(o->trace, "w"))) {
        fprintf(stderr, "serve_load: cannot write %s\n", o->trace);
        return 1;
    }
    double t0 = pf_clock_now(), end = t0 + o->seconds;
    l.t0 = t0;
    int64_t next = 0;        /* open loop: the next request to send */
    int64_t backlog_max = 0; /* requests due that waited for a connection */
    for (;;) {
        double now = pf_clock_now();
        if (open_loop) {
            for (double due = t0 + (double)next / o->rate; due <= now && due < end;
                 due = t0 + (double)next / o->rate) {
                conn *c = idle_conn(&l, n);
                if (!c) {
                    int64_t waiting = (int64_t)((now - due) * o->rate) + 1;
                    if (waiting > backlog_max)
                        backlog_max = waiting;
                    break;
                }
                samples_add(&l.lag, now - due);
                conn_start(&l, c, due);
                next++;
            }
        } else if (now < end) {
            for (conn *c = idle_conn(&l, n); c; c = idle_conn(&l, n))
                conn_start(&l, c, now);
        }
        int busy = busy_conns(&l, n);
        double due = t0 + (double)next / o->rate;
        int more = open_loop ? due < end : now < end;
        if (!more && busy == 0)
            break;
        if (!more && now > end + DRAIN_SECONDS) {
            l.failed += busy; /* never answered */
            break;
        }
        if (open_loop && more && busy < n) {
            timer_at(&l, due);
            poll_once(&l, due);
        } else {
            timer_at(&l, 0);
            poll_once(&l, more ? end : end + DRAIN_SECONDS);
        }
    }
    double elapsed = pf_clock_now() - t0;
    qsort(l.lat.v, l.lat.n, sizeof *l.lat.v, by_value);
    qsort(l.lag.v, l.lag.n, sizeof *l.lag.v, by_value);
    printf("%s connections=%d seconds=%.2f requests=%" PRId64 " rps=%.1f p50_ms=%.3f "
           "p90_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f",
           o->mode, n, elapsed, l.answered, (double)l.answered / elapsed,
           quantile(&l.lat, 0.5) * 1e3, quantile(&l.lat, 0.9) * 1e3, quantile(&l.lat, 0.99) * 1e3,
           quantile(&l.lat, 0.999) * 1e3, l.lat.n ? l.lat.v[l.lat.n - 1] * 1e3 : 0.0);
    if (open_loop)
        printf(" rate=%.0f sent=%" PRId64 " lag_p99_ms=%.3f lag_max_ms=%.3f backlog_max=%" PRId64,
               o->rate, next, quantile(&l.lag, 0.99) * 1e3,
               l.lag.n ? l.lag.v[l.lag.n - 1] * 1e3 : 0.0, backlog_max);
    printf(" status=");
    const char *sep = "";
    for (int s = 0; s < MAX_STATUS; s++)
        if (l.by_status[s]) {
            printf("%s%d:%" PRId64, sep, s, l.by_status[s]);
            sep = ",";
        }
    if (!*sep)
        printf("none");
    printf(" failed=%" PRId64 " failed_connects=%" PRId64 " reconnects=%" PRId64
           " versions=%" PRId64 "..%" PRId64 " version_changes=%" PRId64 "\n",
           l.failed, l.failed_connects, l.reconnects, l.version_min, l.version_max,
           l.version_changes);
    for (int i = 0; i < n; i++) {
        conn_close(&l, &l.c[i]);
        free(l.c[i].in);
    }
    free(l.c);
    free(l.req);
    free(l.lat.v);
    free(l.lag.v);
    if (l.trace)
        fclose(l.trace);
    close(l.tfd);
    close(l.ep);
    return 0;
}

int main(int argc, char **argv) {
    options o;
    parse_options(argc, argv, &o);
    if (!strcmp(o.mode, "forward"))
        return forward(&o);
    if (!strcmp(o.mode, "closed") || !strcmp(o.mode, "open"))
        return run_load(&o);
    usage();
    return 2;
}
