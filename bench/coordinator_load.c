/* coordinator_load.c - control-plane load: many agents registering with and heartbeating one
 * coordinator, as fast as it takes them.
 *
 * DESIGN: the client has to cost less than the server it measures on a small machine, so it
 * speaks HTTP/1.1 over raw sockets: one keep-alive connection per client thread, each thread
 * sending one request at a time (a closed loop) and reading the answer with a small parser
 * (Content-Length or chunked bodies; a "Connection: close" answer makes it reconnect).
 * Latency is the time from the first byte written to the last byte of the answer read.
 *
 * Phases, in order, each over the same connections:
 *   livez      GET /livez for --seconds: the cheapest route, the baseline of this run.
 *   register   --agents POST /api/v1/nodes (role worker), split over the threads.
 *   submit     --jobs POST /api/v1/jobs (not timed): jobs of one ps task and two workers,
 *              which wait in the queue for the whole run (the agents are all worker agents),
 *              so every scheduling round walks them.
 *   heartbeat  POST /api/v1/nodes/{id}/heartbeat {"state":"idle"} for --seconds, each
 *              thread cycling over its own agents: as fast as the coordinator answers, or
 *              with --rate HZ each agent HZ times a second (each thread paces its agents'
 *              heartbeats evenly; one it cannot send on time is sent at once and counted
 *              late).
 *   livez      the baseline again; the ratio divides by the mean of both baselines, so a
 *              shared machine getting busier or quieter during the run does not bias it.
 *   deregister DELETE /api/v1/nodes/{id} for every agent (not timed), unless --keep.
 * Targets: >= 5000 heartbeats/s with p99 < 20 ms on 2 cores.
 *
 * usage: coordinator_load --url http://HOST:PORT [--agents N] [--threads T] [--seconds S]
 *                         [--rate HZ] [--jobs N] [--keep]
 * The bearer token comes from PSFLOW_TOKEN or PSFLOW_TOKEN_FILE, as for every client.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "psflow/clock.h"
#include "psflow/http_client.h"
#include "psflow/mem.h"

#define RESP_MAX (1 << 20) /* the largest answer this client reads; none here comes close */

typedef struct options {
    char host[256];
    char port[16];
    char token[512];
    int agents, threads, jobs;
    double seconds, rate;
    bool keep;
} options;

/* One keep-alive connection and its receive buffer. */
typedef struct conn {
    const options *opt;
    int fd; /* -1 while closed */
    char *buf;
    size_t len;
    char req[2048];
} conn;

/* Latencies of one phase of one thread, in microseconds. */
typedef struct samples {
    float *us;
    size_t n, cap;
} samples;

typedef enum { PHASE_LIVEZ, PHASE_REGISTER, PHASE_SUBMIT, PHASE_HEARTBEAT, PHASE_DEREGISTER } phase;

typedef struct worker_arg {
    conn c;
    phase ph;
    int first_agent, n_agents; /* this thread's agents: [first_agent, first_agent + n_agents) */
    int first_job, n_jobs;     /* this thread's jobs to submit, likewise */
    double start, end;         /* timed phases run until this pf_clock_now() */
    samples lat;
    long requests, errors, late;
    char first_bad_body[512]; /* "METHOD PATH -> STATUS BODY" of the first failure */
} worker_arg;

static int conn_open(conn *c) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(c->opt->host, c->opt->port, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return -1;
    /* Small requests must leave at once, not wait for the previous answer's ACK. */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->len = 0;
    return 0;
}

static void conn_close(conn *c) {
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->len = 0;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Finds the value of header `name` in the header block [h, end); NULL when absent. */
static const char *header_value(const char *h, const char *end, const char *name) {
    size_t nl = strlen(name);
    for (const char *p = h; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            break;
        if ((size_t)(eol - p) > nl && !strncasecmp(p, name, nl) && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            return v;
        }
        p = eol + 1;
    }
    return NULL;
}

/* Decides whether buf[0, len) holds a whole HTTP/1.1 answer. Returns 1 when it does, with
 * *status, the body in *body and *body_len (chunked bodies stay encoded: only the status
 * matters here) and *close_after set when the server will close the connection; 0 when
 * more bytes are needed; -1 when the bytes are not an answer this client understands. */
static int parse_response(const char *buf, size_t len, int *status, const char **body,
                          size_t *body_len, bool *close_after) {
    const char *hend = NULL;
    for (size_t i = 3; i < len; i++)
        if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r') {
            hend = buf + i + 1;
            break;
        }
    if (!hend)
        return len > 65536 ? -1 : 0;
    if (len < 12 || strncmp(buf, "HTTP/1.", 7) != 0)
        return -1;
    *status = atoi(buf + 9);
    const char *conn_hdr = header_value(buf, hend, "Connection");
    *close_after = conn_hdr && !strncasecmp(conn_hdr, "close", 5);
    const char *te = header_value(buf, hend, "Transfer-Encoding");
    const char *cl = header_value(buf, hend, "Content-Length");
    size_t avail = len - (size_t)(hend - buf);
    *body = hend;
    /* 204 and 304 answers have no body, whatever their headers say (RFC 9112 6.3). */
    if (*status == 204 || *status == 304 || (*status >= 100 && *status < 200)) {
        *body_len = 0;
        return avail == 0 ? 1 : -1;
    }
    if (te && !strncasecmp(te, "chunked", 7)) {
        /* Walks the chunks: "SIZE\r\n" DATA "\r\n" ... "0\r\n" [trailers] "\r\n". */
        const char *p = hend, *end = buf + len;
        for (;;) {
            const char *eol = memchr(p, '\n', (size_t)(end - p));
            if (!eol)
                return 0;
            char *stop;
            unsigned long size = strtoul(p, &stop, 16);
            if (stop == p)
                return -1;
            p = eol + 1;
            if (size == 0) {
                /* Trailers end with an empty line. */
                for (;;) {
                    const char *e = memchr(p, '\n', (size_t)(end - p));
                    if (!e)
                        return 0;
                    bool empty = e == p || (e == p + 1 && *p == '\r');
                    p = e + 1;
                    if (empty) {
                        *body_len = (size_t)(p - hend);
                        return (size_t)(p - buf) == len ? 1 : -1;
                    }
                }
            }
            if ((size_t)(end - p) < size + 2)
                return 0;
            p += size + 2;
        }
    }
    if (cl) {
        size_t n = strtoull(cl, NULL, 10);
        if (avail < n)
            return 0;
        *body_len = n;
        return avail == n ? 1 : -1;
    }
    /* Neither length nor chunks: the body ends when the server closes. */
    *body_len = avail;
    *close_after = true;
    return 0;
}

/* Sends one request and reads its answer. Returns the HTTP status, or -1 when the
 * connection failed twice (a server may close an idle keep-alive connection at any time,
 * so one retry on a fresh connection is allowed). */
static int exchange(conn *c, const char *method, const char *path, const char *body, char *err_body,
                    size_t err_size) {
    size_t body_n = body ? strlen(body) : 0;
    int n = snprintf(c->req, sizeof c->req,
                     "%s %s HTTP/1.1\r\nHost: %s:%s\r\n%s%s%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, c->opt->host, c->opt->port,
                     c->opt->token[0] ? "Authorization: Bearer " : "", c->opt->token,
                     c->opt->token[0] ? "\r\n" : "", body_n, body ? body : "");
    if (n < 0 || (size_t)n >= sizeof c->req)
        return -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (c->fd < 0 && conn_open(c) != 0)
            continue;
        if (write_all(c->fd, c->req, (size_t)n) != 0) {
            conn_close(c);
            continue;
        }
        c->len = 0;
        for (;;) {
            int status = 0;
            const char *b = NULL;
            size_t blen = 0;
            bool close_after = false;
            int r = c->len ? parse_response(c->buf, c->len, &status, &b, &blen, &close_after) : 0;
            if (r < 0)
                break;
            if (r == 1) {
                if (status >= 300 && err_body && err_size) {
                    size_t k = blen < err_size - 1 ? blen : err_size - 1;
                    memcpy(err_body, b, k);
                    err_body[k] = 0;
                }
                c->len = 0;
                if (close_after)
                    conn_close(c);
                return status;
            }
            if (c->len == RESP_MAX)
                break;
            ssize_t k = recv(c->fd, c->buf + c->len, RESP_MAX - c->len, 0);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                /* A server that ends a length-less answer by closing has answered. */
                if (k == 0 && c->len &&
                    parse_response(c->buf, c->len, &status, &b, &blen, &close_after) == 0 &&
                    close_after && status) {
                    conn_close(c);
                    return status;
                }
                break;
            }
            c->len += (size_t)k;
        }
        conn_close(c);
    }
    return -1;
}

static int samples_add(samples *s, double us) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 65536;
        float *p = pf_realloc(s->us, cap * sizeof *p);
        if (!p)
            return -1;
        s->us = p;
        s->cap = cap;
    }
    s->us[s->n++] = (float)us;
    return 0;
}

static void agent_id(char *out, size_t size, int i) {
    snprintf(out, size, "bench-agent-%05d", i);
}

/* --rate: waits until the i-th heartbeat of this thread is due; counts it late when it is
 * more than a millisecond past. */
static void pace(worker_arg *w, long i) {
    double rate = w->c.opt->rate;
    if (rate <= 0)
        return;
    double due = w->start + (double)i / (rate * (double)w->n_agents), now = pf_clock_now();
    if (due > now)
        pf_clock_sleep(due - now);
    else if (now - due > 1e-3)
        w->late++;
}

static void *run_worker(void *p) {
    worker_arg *w = p;
    char path[256], body[512];
    for (long i = 0;; i++) {
        const char *method = "GET", *req_body = NULL;
        int agent = w->first_agent + (w->n_agents ? (int)(i % w->n_agents) : 0);
        char id[64];
        agent_id(id, sizeof id, agent);
        switch (w->ph) {
        case PHASE_LIVEZ:
            if (pf_clock_now() >= w->end)
                return NULL;
            snprintf(path, sizeof path, "/livez");
            break;
        case PHASE_REGISTER:
            if (i >= w->n_agents)
                return NULL;
            method = "POST";
            snprintf(path, sizeof path, "/api/v1/nodes");
            snprintf(body, sizeof body,
                     "{\"id\":\"%s\",\"role\":\"worker\",\"address\":\"127.0.0.1:%d\","
                     "\"version\":\"bench\"}",
                     id, 20000 + agent % 40000);
            req_body = body;
            break;
        case PHASE_SUBMIT:
            if (i >= w->n_jobs)
                return NULL;
            method = "POST";
            snprintf(path, sizeof path, "/api/v1/jobs");
            snprintf(body, sizeof body,
                     "{\"name\":\"bench-queued-%05ld\",\"replicas\":{\"ps\":1,\"worker\":2},"
                     "\"model\":{\"type\":\"linear\",\"inputs\":1},"
                     "\"data\":{\"format\":\"synthetic_linear\"},"
                     "\"run_policy\":{\"priority\":%ld}}",
                     w->first_job + i, (w->first_job + i) % 7);
            req_body = body;
            break;
        case PHASE_HEARTBEAT:
            if (pf_clock_now() >= w->end || !w->n_agents)
                return NULL;
            pace(w, i);
            method = "POST";
            snprintf(path, sizeof path, "/api/v1/nodes/%s/heartbeat", id);
            req_body = "{\"state\":\"idle\"}";
            break;
        case PHASE_DEREGISTER:
            if (i >= w->n_agents)
                return NULL;
            method = "DELETE";
            snprintf(path, sizeof path, "/api/v1/nodes/%s", id);
            break;
        }
        double t0 = pf_clock_now();
        char err_body[200];
        int status = exchange(&w->c, method, path, req_body, err_body, sizeof err_body);
        double t1 = pf_clock_now();
        w->requests++;
        if (status < 200 || status >= 300) {
            if (!w->errors) {
                snprintf(w->first_bad_body, sizeof w->first_bad_body, "%s %s -> %d %s", method,
                         path, status, status > 0 ? err_body : "(no answer)");
            }
            w->errors++;
            if (status < 0 && w->ph != PHASE_LIVEZ && w->ph != PHASE_HEARTBEAT)
                return NULL;
            continue;
        }
        if (samples_add(&w->lat, (t1 - t0) * 1e6) != 0)
            return NULL;
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct result {
    double rate, p50_ms, p99_ms, max_ms, seconds;
    long requests, errors, late;
} result;

/* Runs one phase on every thread and merges the threads' figures. */
static int run_phase(worker_arg *w, int threads, phase ph, double seconds, result *out) {
    double start = pf_clock_now();
    pthread_t tid[64];
    for (int t = 0; t < threads; t++) {
        w[t].ph = ph;
        w[t].start = start;
        w[t].end = start + seconds;
        w[t].lat.n = 0;
        w[t].requests = w[t].errors = w[t].late = 0;
        w[t].first_bad_body[0] = 0;
        if (pthread_create(&tid[t], NULL, run_worker, &w[t]) != 0) {
            fprintf(stderr, "coordinator bench: pthread_create failed\n");
            return -1;
        }
    }
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    double elapsed = pf_clock_now() - start;
    size_t n = 0;
    memset(out, 0, sizeof *out);
    for (int t = 0; t < threads; t++) {
        n += w[t].lat.n;
        out->requests += w[t].requests;
        out->errors += w[t].errors;
        out->late += w[t].late;
        if (w[t].errors)
            fprintf(stderr, "  thread %d: %ld failed requests, first: %s\n", t, w[t].errors,
                    w[t].first_bad_body);
    }
    float *all = pf_mallocarray(n ? n : 1, sizeof *all);
    if (!all) {
        fprintf(stderr, "coordinator bench: out of memory\n");
        return -1;
    }
    size_t k = 0;
    for (int t = 0; t < threads; t++) {
        memcpy(all + k, w[t].lat.us, w[t].lat.n * sizeof *all);
        k += w[t].lat.n;
    }
    qsort(all, n, sizeof *all, cmp_float);
    out->seconds = elapsed;
    out->rate = (double)n / elapsed;
    if (n) {
        out->p50_ms = all[(size_t)(0.50 * (double)(n - 1))] / 1e3;
        out->p99_ms = all[(size_t)(0.99 * (double)(n - 1))] / 1e3;
        out->max_ms = all[n - 1] / 1e3;
    }
    pf_free(all);
    return 0;
}

static void print_result(const char *what, const result *r) {
    printf("%-10s %8ld ok in %5.2f s = %9.0f req/s   p50 %7.3f ms   p99 %7.3f ms   max %7.2f ms"
           "   failed %ld\n",
           what, r->requests - r->errors, r->seconds, r->rate, r->p50_ms, r->p99_ms, r->max_ms,
           r->errors);
}

static int parse_url(const char *url, options *o) {
    if (strncmp(url, "http://", 7) != 0)
        return -1;
    const char *h = url + 7, *slash = strchr(h, '/');
    size_t n = slash ? (size_t)(slash - h) : strlen(h);
    const char *colon = memchr(h, ':', n);
    if (!colon || colon == h || (size_t)(colon - h) >= sizeof o->host ||
        n - (size_t)(colon - h) - 1 >= sizeof o->port || n - (size_t)(colon - h) - 1 == 0)
        return -1;
    memcpy(o->host, h, (size_t)(colon - h));
    o->host[colon - h] = 0;
    memcpy(o->port, colon + 1, n - (size_t)(colon - h) - 1);
    o->port[n - (size_t)(colon - h) - 1] = 0;
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: coordinator_load --url http://HOST:PORT [--agents N] [--threads T] "
                    "[--seconds S] [--rate HZ] [--jobs N] [--keep]\n");
    return 64;
}

int main(int argc, char **argv) {
    options opt = {.agents = 1000, .threads = 4, .seconds = 5.0};
    const char *url = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--url") && i + 1 < argc)
            url = argv[++i];
        else if (!strcmp(argv[i], "--agents") && i + 1 < argc)
            opt.agents = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            opt.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            opt.seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rate") && i + 1 < argc)
            opt.rate = atof(argv[++i]);
        else if (!strcmp(argv[i], "--jobs") && i + 1 < argc)
            opt.jobs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--keep"))
            opt.keep = true;
        else
            return usage();
    }
    if (!url || parse_url(url, &opt) != 0 || opt.agents < 1 || opt.threads < 1 ||
        opt.threads > 64 || opt.agents < opt.threads || !(opt.seconds > 0) || opt.jobs < 0 ||
        opt.jobs > 99999 || !(opt.rate >= 0))
        return usage();
    /* Progress lines show up as each phase ends, also when piped. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    pf_error err;
    if (!pf_http_token_from_env(opt.token, sizeof opt.token, &err)) {
        fprintf(stderr, "coordinator bench: %s\n", err.message);
        return 66;
    }

    worker_arg w[64];
    memset(w, 0, sizeof w);
    for (int t = 0; t < opt.threads; t++) {
        w[t].c.opt = &opt;
        w[t].c.fd = -1;
        w[t].c.buf = pf_malloc(RESP_MAX);
        if (!w[t].c.buf) {
            fprintf(stderr, "coordinator bench: out of memory\n");
            return 71;
        }
        /* Agents are split as evenly as integers allow. */
        w[t].first_agent = (int)((long)opt.agents * t / opt.threads);
        w[t].n_agents = (int)((long)opt.agents * (t + 1) / opt.threads) - w[t].first_agent;
        w[t].first_job = (int)((long)opt.jobs * t / opt.threads);
        w[t].n_jobs = (int)((long)opt.jobs * (t + 1) / opt.threads) - w[t].first_job;
    }

    printf("coordinator %s:%s, %d client threads (one keep-alive connection each), %d agents, "
           "%d waiting jobs, heartbeats %s, %.1f s per timed phase\n",
           opt.host, opt.port, opt.threads, opt.agents, opt.jobs,
           opt.rate > 0 ? "paced" : "as fast as answered", opt.seconds);
    if (opt.rate > 0)
        printf("paced: each agent %.2f heartbeats/s, %.0f/s in all\n", opt.rate,
               opt.rate * opt.agents);
    result livez1, reg, hb, livez2;
    int rc = 0;
    if (run_phase(w, opt.threads, PHASE_LIVEZ, opt.seconds, &livez1) != 0)
        return 70;
    print_result("livez", &livez1);
    if (run_phase(w, opt.threads, PHASE_REGISTER, 0, &reg) != 0)
        return 70;
    print_result("register", &reg);
    if (reg.errors) {
        fprintf(stderr, "coordinator bench: %ld registrations failed\n", reg.errors);
        rc = 1;
    } else {
        if (opt.jobs) {
            result sub;
            if (run_phase(w, opt.threads, PHASE_SUBMIT, 0, &sub) != 0)
                return 70;
            print_result("submit", &sub);
            if (sub.errors)
                rc = 1;
        }
        if (run_phase(w, opt.threads, PHASE_HEARTBEAT, opt.seconds, &hb) != 0)
            return 70;
        print_result("heartbeat", &hb);
        if (opt.rate > 0)
            printf("heartbeats sent more than 1 ms late: %ld of %ld\n", hb.late, hb.requests);
        if (run_phase(w, opt.threads, PHASE_LIVEZ, opt.seconds, &livez2) != 0)
            return 70;
        print_result("livez", &livez2);
        double base = (livez1.rate + livez2.rate) / 2;
        printf("heartbeat throughput = %.2f x livez throughput (livez mean %.0f req/s)\n",
               base > 0 ? hb.rate / base : 0.0, base);
        if (opt.rate > 0)
            printf("targets: heartbeats/s %.0f of %.0f asked, p99 %.2f ms (< 20 ms: %s)\n", hb.rate,
                   opt.rate * opt.agents, hb.p99_ms, hb.p99_ms < 20 ? "met" : "MISSED");
        else
            printf("targets: heartbeats/s %.0f (>= 5000: %s), p99 %.2f ms (< 20 ms: %s)\n", hb.rate,
                   hb.rate >= 5000 ? "met" : "MISSED", hb.p99_ms,
                   hb.p99_ms < 20 ? "met" : "MISSED");
        if (hb.errors)
            rc = 1;
    }
    if (!opt.keep) {
        result dereg;
        if (run_phase(w, opt.threads, PHASE_DEREGISTER, 0, &dereg) == 0 && dereg.errors)
            fprintf(stderr, "coordinator bench: %ld deregistrations failed\n", dereg.errors);
    }
    for (int t = 0; t < opt.threads; t++) {
        conn_close(&w[t].c);
        pf_free(w[t].c.buf);
        pf_free(w[t].lat.us);
    }
    return rc;
}
