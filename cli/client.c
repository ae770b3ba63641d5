/* client.c - the clients of the coordinator's REST API (api/rest.md): `psflow submit`,
 * `list`, `get`, `watch`, `cancel`, `tfconfig` and `health`.
 *
 * DESIGN. Every command is one or two blocking requests through pf_http_request and a
 * mapping of the answer to text and an exit code (cli.h): 65 for a rejected spec (400, 413,
 * 422), 77 for 401/403, 69 when the coordinator is unreachable or answers 5xx, 1 for any
 * other 4xx. Errors are printed from the problem+json body: its detail, then one line per
 * `errors[]` entry with the JSON pointer of the field.
 *
 * `submit --wait` and `watch` follow the Server-Sent Events stream GET /api/v1/events,
 * parsed incrementally by psflow/sse.h. When the stream drops, both commands reconnect with
 * Last-Event-ID so nothing is missed or shown twice; while the coordinator is down they retry every
 * second and say so once per outage. `submit --wait` also reads the job with GET: once when the
 * stream has delivered its first bytes (a job that finished before the stream was subscribed would
 * otherwise never be seen finishing), then every 15 s as a safety net, and every second
 * when the coordinator offers no event stream at all.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "psflow/buf.h"
#include "psflow/clock.h"
#include "psflow/http_client.h"
#include "psflow/mem.h"
#include "psflow/sse.h"

#define DEFAULT_COORDINATOR "http://127.0.0.1:8080"
#define REQUEST_TIMEOUT     10.0 /* seconds for one ordinary API call */
#define HEALTH_TIMEOUT      2.0  /* seconds: the compose healthcheck must stay quick */
#define SYNC_EVERY          15.0 /* seconds between safety-net GETs while the stream is live */
#define RATE_WINDOW         20.0 /* seconds of step samples behind the steps/s estimate */
#define PLAIN_EVERY         10.0 /* seconds between progress lines without a terminal */
#define POLL_STREAM_RETRY   30.0 /* seconds of polling before a refused stream is tried again */

/* ---- connection settings shared by every command ---------------------------------------- */

typedef struct client {
    const char *cmd;
    char base[1024]; /* coordinator URL without a trailing slash */
    char token[1024];
} client;

/* Fills c from --coordinator (or its default) and, with need_token, the token environment.
 * Returns 0 or an exit code after printing why. */
static int client_init(client *c, const char *cmd, const char *url, bool need_token) {
    memset(c, 0, sizeof *c);
    c->cmd = cmd;
    if (!url)
        url = DEFAULT_COORDINATOR;
    /* "host:port" alone is taken as plain HTTP, the only scheme the coordinator serves. */
    int n = snprintf(c->base, sizeof c->base, "%s%s", strstr(url, "://") ? "" : "http://", url);
    if (n < 0 || (size_t)n >= sizeof c->base) {
        fprintf(stderr, "psflow %s: --coordinator URL is too long\n", cmd);
        return PF_EX_USAGE;
    }
    while (n > 0 && c->base[n - 1] == '/')
        c->base[--n] = '\0';
    pf_error err;
    pf_error_clear(&err);
    if (need_token && !pf_http_token_from_env(c->token, sizeof c->token, &err)) {
        fprintf(stderr, "psflow %s: %s\n", cmd, err.message);
        return PF_EX_NOINPUT;
    }
    return 0;
}

/* Percent-encodes everything but RFC 3986's unreserved characters. Returns dst, or NULL
 * when the result does not fit. */
static char *url_escape(const char *s, char *dst, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' || *p == '~';
        if (o + (plain ? 1 : 3) >= cap)
            return NULL;
        if (plain) {
            dst[o++] = (char)*p;
        } else {
            dst[o++] = '%';
            dst[o++] = hex[*p >> 4];
            dst[o++] = hex[*p & 15];
        }
    }
    dst[o] = '\0';
    return dst;
}

/* Joins the base URL and a path ("/api/v1/jobs"). Returns 0 or a usage exit code. */
static int client_url(const client *c, const char *path, char *url, size_t cap) {
    int n = snprintf(url, cap, "%s%s", c->base, path);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "psflow %s: URL too long\n", c->cmd);
        return PF_EX_USAGE;
    }
    return 0;
}

/* Sends one request. PF_OK whenever a response arrived, whatever its status; otherwise
 * PF_ERR_UNAVAILABLE (unreachable, timed out) or another error, with *why saying why. */
static pf_status client_try(const client *c, const char *method, const char *path, const char *body,
                            size_t len, double timeout, pf_http_response *out, pf_error *why) {
    char url[2048];
    pf_error_clear(why);
    memset(out, 0, sizeof *out);
    if (snprintf(url, sizeof url, "%s%s", c->base, path) >= (int)sizeof url)
        return pf_error_set(why, PF_ERR_INVALID, NULL, "URL too long");
    return pf_http_request(method, url, c->token, body, len, timeout, out, why);
}

/* Like client_try, but prints the failure and returns its exit code (0 when a response
 * arrived). */
static int client_call(const client *c, const char *method, const char *path, const char *body,
                       size_t len, double timeout, pf_http_response *out) {
    pf_error why;
    pf_status st = client_try(c, method, path, body, len, timeout, out, &why);
    if (st == PF_OK)
        return 0;
    fprintf(stderr, "psflow %s: %s%s\n", c->cmd,
            st == PF_ERR_UNAVAILABLE ? "coordinator unreachable: " : "", why.message);
    return pf_exit_code(st);
}

/* ---- JSON helpers ------------------------------------------------------------------------ */

static const char *jstr(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

/* True when o[key] is a number (null or absent: false). */
static bool jnum(const json_t *o, const char *key, double *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return true;
}

static long long jint(const json_t *o, const char *key, long long fallback) {
    double v;
    return jnum(o, key, &v) ? (long long)v : fallback;
}

/* The body as JSON (new reference), or NULL when it is not JSON. */
static json_t *body_json(const pf_http_response *r) {
    if (!r->body || !r->len)
        return NULL;
    return json_loadb(r->body, r->len, 0, NULL);
}

/* Prints a problem+json error: "psflow CMD: PREFIX: detail", then "  /pointer: message"
 * for each errors[] entry. Bodies that are not JSON are shown by their first line. */
static void print_problem(const client *c, const char *prefix, const pf_http_response *r) {
    json_t *doc = body_json(r);
    const char *detail = jstr(doc, "detail");
    if (!detail || !*detail)
        detail = jstr(doc, "title");
    char line[512] = "";
    if (!detail && r->body && r->len) {
        size_t n = strcspn(r->body, "\r\n");
        snprintf(line, sizeof line, "%.*s", (int)(n < 300 ? n : 300), r->body);
        detail = line;
    }
    fprintf(stderr, "psflow %s: %s%s%s (HTTP %ld)\n", c->cmd, prefix ? prefix : "",
            prefix && detail && *detail ? ": " : "", detail ? detail : "", r->status);
    json_t *errors = json_object_get(doc, "errors");
    size_t i;
    json_t *e;
    json_array_foreach(errors, i, e) {
        const char *ptr = jstr(e, "pointer");
        const char *msg = jstr(e, "message");
        /* A message that already starts with its pointer is shown without the repeat. */
        size_t plen = ptr ? strlen(ptr) : 0;
        if (msg && plen && !strncmp(msg, ptr, plen) && !strncmp(msg + plen, ": ", 2))
            msg += plen + 2;
        fprintf(stderr, "  %s: %s\n", ptr && *ptr ? ptr : "/", msg ? msg : "invalid");
    }
    json_decref(doc);
}

/* The exit code for an error status: 77 not allowed, 69 server trouble, 1 the rest. */
static int status_exit(long status) {
    if (status == 401 || status == 403)
        return PF_EX_NOPERM;
    if (status >= 500 || status == 0)
        return PF_EX_UNAVAILABLE;
    return 1;
}

/* Prints an error answer and returns its exit code. A 401 gets a hint about the token;
 * not_found, when given, replaces the coordinator's text for a 404. */
static int report_error(const client *c, const pf_http_response *r, const char *not_found) {
    if (r->status == 401) {
        if (c->token[0])
            fprintf(stderr, "psflow %s: the coordinator rejected the token from %s\n", c->cmd,
                    getenv("PSFLOW_TOKEN") && *getenv("PSFLOW_TOKEN") ? "PSFLOW_TOKEN"
                                                                      : "PSFLOW_TOKEN_FILE");
        else
            fprintf(stderr,
                    "psflow %s: the coordinator requires a token: set PSFLOW_TOKEN or "
                    "PSFLOW_TOKEN_FILE\n",
                    c->cmd);
    } else if (r->status == 404 && not_found) {
        fprintf(stderr, "psflow %s: %s\n", c->cmd, not_found);
    } else {
        print_problem(c, r->status >= 500 ? "coordinator error" : NULL, r);
    }
    return status_exit(r->status);
}

/* ---- time formatting --------------------------------------------------------------------- */

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm), so that
 * UTC times convert without timegm(), which POSIX lacks. */
static long long days_from_civil(long long y, unsigned m, unsigned d) {
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}

/* Parses an RFC 3339 time ("2026-11-22T10:00:00.123Z", or with a +hh:mm offset) into Unix
 * seconds. Returns false when it is not one. */
static bool parse_rfc3339(const char *s, double *out) {
    int y, mo, d, h, mi, n = 0;
    double sec;
    if (!s || sscanf(s, "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%lf%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6)
        return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31)
        return false;
    double t = (double)days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400.0 + h * 3600.0 +
               mi * 60.0 + sec;
    const char *z = s + n;
    int oh, om;
    if (*z == 'Z' || *z == 'z')
        ;
    else if ((*z == '+' || *z == '-') && sscanf(z + 1, "%2d:%2d", &oh, &om) == 2)
        t -= (*z == '+' ? 1 : -1) * (oh * 3600.0 + om * 60.0);
    else
        return false;
    *out = t;
    return true;
}

/* A duration the way kubectl shows ages: 45s, 12m, 3h, 2d. */
static void format_age(double seconds, char *buf, size_t cap) {
    long long s = seconds < 0 ? 0 : (long long)seconds;
    if (s < 120)
        snprintf(buf, cap, "%llds", s);
    else if (s < 7200)
        snprintf(buf, cap, "%lldm", s / 60);
    else if (s < 172800)
        snprintf(buf, cap, "%lldh", s / 3600);
    else
        snprintf(buf, cap, "%lldd", s / 86400);
}

/* A remaining time: 45s, 3m00s, 1h02m. */
static void format_eta(double seconds, char *buf, size_t cap) {
    long long s = seconds > 0 && seconds < 1e9 ? (long long)(seconds + 0.5) : 0;
    if (s < 60)
        snprintf(buf, cap, "%llds", s);
    else if (s < 3600)
        snprintf(buf, cap, "%lldm%02llds", s / 60, s % 60);
    else
        snprintf(buf, cap, "%lldh%02lldm", s / 3600, s / 60 % 60);
}

/* Local wall-clock time of a Unix time as HH:MM:SS. */
static void format_clock(double t, char *buf, size_t cap) {
    time_t tt = (time_t)t;
    struct tm tm;
    if (!localtime_r(&tt, &tm) || !strftime(buf, cap, "%H:%M:%S", &tm))
        snprintf(buf, cap, "--:--:--");
}

static void sleep_seconds(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* ---- job state as seen from the API ----------------------------------------------------- */

typedef struct job_view {
    char phase[32];
    char reason[64];
    char message[256];
    long long step, max_steps; /* -1: unknown */
    bool has_loss, has_accuracy, has_test_loss, has_rate;
    double loss, accuracy, test_loss, steps_per_sec;
} job_view;

static bool phase_is_final(const char *phase) {
    return !strcmp(phase, "Succeeded") || !strcmp(phase, "Failed");
}

/* Updates v from a job summary (list item, `job` event) or a job's status object. Fields
 * the object lacks keep their values, except the ones the object owns when present. */
static void view_update(job_view *v, const json_t *o) {
    const char *s;
    if ((s = jstr(o, "phase")))
        snprintf(v->phase, sizeof v->phase, "%s", s);
    if ((s = jstr(o, "message")))
        snprintf(v->message, sizeof v->message, "%s", s);
    if ((s = jstr(o, "reason"))) {
        snprintf(v->reason, sizeof v->reason, "%s", s);
    } else {
        /* A full status names the reason in the condition of its current phase. */
        size_t i;
        json_t *cond;
        json_array_foreach(json_object_get(o, "conditions"), i, cond) {
            if ((s = jstr(cond, "type")) && !strcmp(s, v->phase) && jstr(cond, "reason"))
                snprintf(v->reason, sizeof v->reason, "%s", jstr(cond, "reason"));
        }
    }
    v->step = jint(o, "global_step", v->step);
    v->max_steps = jint(o, "max_steps", v->max_steps);
    if (json_object_get(o, "loss"))
        v->has_loss = jnum(o, "loss", &v->loss);
    if (json_object_get(o, "accuracy"))
        v->has_accuracy = jnum(o, "accuracy", &v->accuracy);
    if (json_object_get(o, "test_loss"))
        v->has_test_loss = jnum(o, "test_loss", &v->test_loss);
    if (json_object_get(o, "steps_per_sec"))
        v->has_rate = jnum(o, "steps_per_sec", &v->steps_per_sec) && v->steps_per_sec > 0;
}

static void format_steps(const job_view *v, char *buf, size_t cap) {
    if (v->step < 0)
        snprintf(buf, cap, "-");
    else if (v->max_steps > 0)
        snprintf(buf, cap, "%lld/%lld", v->step, v->max_steps);
    else
        snprintf(buf, cap, "%lld", v->step);
}

/* ---- submit --wait: the progress line ---------------------------------------------------- */

#define RATE_SAMPLES 64

typedef struct progress {
    const char *name;
    bool tty;
    bool drawn;        /* a line without its newline is on the terminal */
    double last_print; /* when the last plain line was printed */
    double last_draw;  /* when the terminal line was last redrawn */
    char last_phase[32];
    double t[RATE_SAMPLES]; /* (time, step) samples, oldest first, at least 0.5 s apart */
    long long s[RATE_SAMPLES];
    int n;
} progress;

static void progress_sample(progress *p, double now, long long step) {
    if (p->n && step < p->s[p->n - 1])
        p->n = 0; /* the job restarted from a checkpoint: earlier samples mislead */
    if (p->n && now - p->t[p->n - 1] < 0.5) {
        p->s[p->n - 1] = p->s[p->n - 1] > step ? p->s[p->n - 1] : step;
        return;
    }
    int drop = 0;
    while (drop < p->n - 1 && now - p->t[drop] > RATE_WINDOW)
        drop++;
    if (p->n - drop == RATE_SAMPLES)
        drop++;
    memmove(p->t, p->t + drop, (size_t)(p->n - drop) * sizeof p->t[0]);
    memmove(p->s, p->s + drop, (size_t)(p->n - drop) * sizeof p->s[0]);
    p->n -= drop;
    p->t[p->n] = now;
    p->s[p->n] = step;
    p->n++;
}

/* Steps per second over the sample window, else the coordinator's figure; 0 when unknown.
 * What this client observed comes first: it stays consistent between the `job` events,
 * which carry no rate, and the occasional GET, which does. */
static double progress_rate(const progress *p, const job_view *v) {
    if (p->n >= 2 && p->t[p->n - 1] - p->t[0] >= 1.0)
        return (double)(p->s[p->n - 1] - p->s[0]) / (p->t[p->n - 1] - p->t[0]);
    return v->has_rate ? v->steps_per_sec : 0;
}

static void progress_line(const progress *p, const job_view *v, char *buf, size_t cap) {
    char steps[64];
    format_steps(v, steps, sizeof steps);
    int n = snprintf(buf, cap, "%s  %s  step %s", p->name, v->phase[0] ? v->phase : "?", steps);
    if (n < 0 || (size_t)n >= cap)
        return;
    if (v->has_loss)
        n += snprintf(buf + n, cap - (size_t)n, "  loss %.4f", v->loss);
    double rate = progress_rate(p, v);
    if (!strcmp(v->phase, "Running") && rate > 0 && (size_t)n < cap) {
        n += snprintf(buf + n, cap - (size_t)n, "  %.1f steps/s", rate);
        if (v->max_steps > 0 && v->step >= 0 && (size_t)n < cap) {
            char eta[32];
            format_eta((double)(v->max_steps - v->step) / rate, eta, sizeof eta);
            n += snprintf(buf + n, cap - (size_t)n, "  ETA %s", eta);
        }
    }
    /* Outside Running the message says what the job waits for ("missing worker 2"). */
    if (strcmp(v->phase, "Running") != 0 && v->message[0] && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, "  %s", v->message);
}

/* Shows the state: redrawn in place on a terminal, else a line every PLAIN_EVERY seconds
 * and on every phase change. */
static void progress_show(progress *p, const job_view *v, bool force) {
    double now = pf_clock_now();
    bool phase_changed = strcmp(p->last_phase, v->phase) != 0;
    if (phase_changed)
        p->n = 0; /* time spent waiting for agents or restarting is no training rate */
    if (v->step >= 0)
        progress_sample(p, now, v->step);
    snprintf(p->last_phase, sizeof p->last_phase, "%s", v->phase);
    char line[512];
    if (p->tty) {
        if (!force && !phase_changed && now - p->last_draw < 0.1)
            return;
        progress_line(p, v, line, sizeof line);
        fprintf(stderr, "\r\033[K%s", line);
        p->drawn = true;
        p->last_draw = now;
    } else {
        if (!force && !phase_changed && now - p->last_print < PLAIN_EVERY)
            return;
        progress_line(p, v, line, sizeof line);
        fprintf(stderr, "%s\n", line);
        p->last_print = now;
    }
    fflush(stderr);
}

/* Ends the terminal line so that other messages start on a fresh one. */
static void progress_break(progress *p) {
    if (p->tty && p->drawn) {
        fputc('\n', stderr);
        p->drawn = false;
    }
}

/* ---- submit --wait: following the job ------------------------------------------------- */

typedef struct follower {
    const client *c;
    const char *name;
    char job_path[1024]; /* /api/v1/jobs/NAME, escaped */
    job_view view;
    progress prog;
    pf_sse parser;
    bool outage;    /* "coordinator unreachable" was said and the outage goes on */
    bool got_bytes; /* the current stream has delivered something: it is subscribed */
    double last_sync;
    bool done;     /* the job reached a final phase, or following it cannot go on */
    int exit_code; /* when done without a final phase */
} follower;

static void follower_outage(follower *f, const char *why) {
    if (f->outage)
        return;
    f->outage = true;
    progress_break(&f->prog);
    fprintf(stderr, "psflow %s: coordinator unreachable, retrying (%s)\n", f->c->cmd, why);
}

/* Reads the job with GET. Returns false when the coordinator could not be asked; on a
 * fatal answer (job deleted, token refused) sets done and exit_code. */
static bool follower_sync(follower *f) {
    pf_http_response r;
    pf_error why;
    f->last_sync = pf_clock_now();
    if (client_try(f->c, "GET", f->job_path, NULL, 0, REQUEST_TIMEOUT, &r, &why) != PF_OK) {
        follower_outage(f, why.message);
        return false;
    }
    if (r.status >= 500) {
        char msg[64];
        snprintf(msg, sizeof msg, "HTTP %ld", r.status);
        follower_outage(f, msg);
        pf_http_response_deinit(&r);
        return false;
    }
    f->outage = false;
    if (r.status != 200) {
        char gone[320];
        snprintf(gone, sizeof gone, "job %s no longer exists", f->name);
        progress_break(&f->prog);
        f->exit_code = report_error(f->c, &r, gone);
        f->done = true;
        pf_http_response_deinit(&r);
        return true;
    }
    json_t *doc = body_json(&r);
    pf_http_response_deinit(&r);
    json_t *status = json_object_get(doc, "status");
    if (json_is_object(status)) {
        view_update(&f->view, status);
        progress_show(&f->prog, &f->view, false);
        if (phase_is_final(f->view.phase))
            f->done = true;
    }
    json_decref(doc);
    return true;
}

static void follower_event(const char *event, const char *data, const char *id, void *ctx) {
    (void)id;
    follower *f = ctx;
    if (strcmp(event, "job") != 0)
        return;
    json_t *doc = json_loads(data, 0, NULL);
    const char *name = jstr(doc, "name");
    if (name && !strcmp(name, f->name)) {
        view_update(&f->view, doc);
        progress_show(&f->prog, &f->view, false);
        if (phase_is_final(f->view.phase))
            f->done = true;
    }
    json_decref(doc);
}

static int follower_on_data(const char *data, size_t len, void *ctx) {
    follower *f = ctx;
    f->outage = false;
    pf_sse_feed(&f->parser, data, len);
    if (!f->done && (!f->got_bytes || pf_clock_now() - f->last_sync >= SYNC_EVERY))
        follower_sync(f);
    f->got_bytes = true;
    return f->done;
}

/* Follows the job until it reaches Succeeded or Failed; prints the result line and returns
 * the exit code. */
static int follow_job(const client *c, const char *name, const char *escaped) {
    follower f = {.c = c, .name = name};
    f.view.step = f.view.max_steps = -1;
    f.prog.name = name;
    f.prog.tty = isatty(STDERR_FILENO) != 0;
    pf_sse_init(&f.parser, follower_event, &f);
    snprintf(f.job_path, sizeof f.job_path, "/api/v1/jobs/%s", escaped);
    char events_url[2048];
    snprintf(events_url, sizeof events_url, "%s/api/v1/events?job=%s", c->base, escaped);
    double stream_again = 0; /* while now is before it, follow by polling */
    while (!f.done) {
        if (!follower_sync(&f)) {
            sleep_seconds(1.0);
            continue;
        }
        if (f.done)
            break;
        if (pf_clock_now() < stream_again) {
            sleep_seconds(1.0);
            continue;
        }
        f.got_bytes = false;
        double t0 = pf_clock_now();
        pf_error err;
        pf_error_clear(&err);
        pf_status st = pf_http_stream(events_url, c->token, pf_sse_last_id(&f.parser),
                                      follower_on_data, &f, &err);
        pf_sse_reset(&f.parser);
        if (f.done)
            break;
        if (st == PF_ERR_FORMAT) {
            /* The coordinator refused the stream (one without it, or one still starting):
             * poll every second, and try the stream again now and then. */
            stream_again = pf_clock_now() + POLL_STREAM_RETRY;
        } else if (pf_clock_now() - t0 < 1.0) {
            sleep_seconds(1.0); /* a stream that ends at once must not make us spin */
        }
        /* A stream that broke says nothing about the coordinator: the GET at the top of
         * the loop tells whether it is down. */
    }
    pf_sse_deinit(&f.parser);
    if (!phase_is_final(f.view.phase)) {
        progress_break(&f.prog);
        return f.exit_code ? f.exit_code : PF_EX_SOFTWARE;
    }
    /* The final state from the job itself: a `job` event carries no test loss. */
    f.done = false;
    for (int tries = 0; tries < 3 && !follower_sync(&f); tries++)
        sleep_seconds(1.0);
    progress_show(&f.prog, &f.view, f.prog.tty);
    progress_break(&f.prog);
    char steps[64];
    format_steps(&f.view, steps, sizeof steps);
    if (!strcmp(f.view.phase, "Succeeded")) {
        printf("%s: Succeeded, step %s", name, steps);
        if (f.view.has_accuracy)
            printf(", test accuracy %.4f", f.view.accuracy);
        else if (f.view.has_test_loss)
            printf(", test loss %.6g", f.view.test_loss);
        printf("\n");
        return 0;
    }
    printf("%s: Failed, step %s", name, steps);
    if (f.view.reason[0] || f.view.message[0])
        printf(", %s%s%s", f.view.reason, f.view.reason[0] && f.view.message[0] ? ": " : "",
               f.view.message);
    printf("\n");
    return 1;
}

/* ---- argument handling --------------------------------------------------------------------- */

#define COORDINATOR_OPTION                                                                         \
    { "coordinator", "URL", "the coordinator's address [" DEFAULT_COORDINATOR "]", NULL }
#define TOKEN_NOTE                                                                                 \
    "\n\nThe API token, when the coordinator requires one, is read from PSFLOW_TOKEN or the "      \
    "file\nnamed by PSFLOW_TOKEN_FILE."

/* cli_parse with "-o" accepted as a short form of --output. */
static int parse_args(const char *cmd, int argc, char **argv, cli_option *opts, int n_opts,
                      cli_args *args) {
    char *copy[64];
    if (argc > (int)(sizeof copy / sizeof copy[0])) {
        fprintf(stderr, "psflow %s: too many arguments\n", cmd);
        return -1;
    }
    for (int i = 0; i < argc; i++)
        copy[i] = strcmp(argv[i], "-o") ? argv[i] : "--output";
    return cli_parse(cmd, argc, copy, opts, n_opts, args);
}

/* Reads --output: 0 text, 1 json, -1 after printing a usage error. */
static int output_json(const char *cmd, const cli_option *opts, int n_opts) {
    const char *o = cli_get(opts, n_opts, "output");
    if (!o || !strcmp(o, "text"))
        return 0;
    if (!strcmp(o, "json"))
        return 1;
    fprintf(stderr, "psflow %s: -o/--output must be text or json, got '%s'\n", cmd, o);
    return -1;
}

static int usage_error(const char *cmd, const char *what) {
    fprintf(stderr, "psflow %s: %s (see 'psflow %s --help')\n", cmd, what, cmd);
    return PF_EX_USAGE;
}

/* Writes a raw body followed by a newline when it lacks one. */
static void print_body(const pf_http_response *r) {
    fwrite(r->body, 1, r->len, stdout);
    if (!r->len || r->body[r->len - 1] != '\n')
        fputc('\n', stdout);
}

/* ---- psflow submit ------------------------------------------------------------------------- */

/* The whole file, new and NUL-terminated; NULL with errno set when it cannot be read. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    pf_buf b;
    pf_buf_init(&b, SIZE_MAX);
    char chunk[8192];
    size_t got;
    bool ok = true;
    while (ok && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
        ok = pf_buf_append(&b, chunk, got) == PF_OK;
    if (ok && ferror(f)) {
        ok = false;
        errno = EIO;
    } else if (!ok) {
        errno = ENOMEM;
    }
    fclose(f);
    size_t n = b.len;
    if (ok && pf_buf_append(&b, "", 1) != PF_OK) { /* the terminating NUL */
        ok = false;
        errno = ENOMEM;
    }
    if (!ok) {
        pf_buf_deinit(&b);
        return NULL;
    }
    *len = n;
    return (char *)b.data;
}

int cli_submit(int argc, char **argv) {
    cli_option opts[] = {
        COORDINATOR_OPTION,
        {"wait", NULL, "follow the job until it ends; exit 0 if it succeeded, 1 if it failed",
         NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (parse_args("submit", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help("submit", "FILE [--wait] [options]",
                       "Submits the job spec in FILE (JSON, api/schemas/job.schema.json) to the "
                       "coordinator. Submitting\nthe same spec again is safe: the existing job "
                       "is reported. With --wait, shows a\nprogress line until the job ends, "
                       "then its result.\n\nExit codes: 0 created (with --wait: succeeded), 1 "
                       "failed or name taken by another spec,\n64 usage, 65 spec rejected, 66 "
                       "FILE unreadable, 69 coordinator unreachable, 77 token\nmissing or "
                       "rejected." TOKEN_NOTE,
                       opts, n_opts);
        return 0;
    }
    if (args.n_positional != 1)
        return usage_error("submit", "expected one job spec FILE");
    client c;
    int rc = client_init(&c, "submit", cli_get(opts, n_opts, "coordinator"), true);
    if (rc)
        return rc;
    const char *path = args.positional[0];
    size_t len = 0;
    char *spec = read_file(path, &len);
    if (!spec) {
        fprintf(stderr, "psflow submit: %s: cannot read it: %s\n", path, strerror(errno));
        return PF_EX_NOINPUT;
    }
    pf_http_response r;
    rc = client_call(&c, "POST", "/api/v1/jobs", spec, len, REQUEST_TIMEOUT, &r);
    pf_free(spec);
    if (rc)
        return rc;
    json_t *doc = body_json(&r);
    const char *name = jstr(doc, "name");
    char name_buf[256] = "";
    if (name)
        snprintf(name_buf, sizeof name_buf, "%s", name);
    json_decref(doc);
    if (r.status == 201 || r.status == 200) {
        if (!name_buf[0]) {
            fprintf(stderr, "psflow submit: the coordinator's answer names no job\n");
            pf_http_response_deinit(&r);
            return PF_EX_UNAVAILABLE;
        }
        printf("job %s %s\n", name_buf, r.status == 201 ? "created" : "exists (same spec)");
        fflush(stdout);
        pf_http_response_deinit(&r);
        if (!cli_get(opts, n_opts, "wait"))
            return 0;
        char escaped[256 * 3 + 1];
        url_escape(name_buf, escaped, sizeof escaped);
        return follow_job(&c, name_buf, escaped);
    }
    char prefix[600];
    if (r.status == 400 || r.status == 413 || r.status == 422) {
        snprintf(prefix, sizeof prefix, "%s: job spec rejected", path);
        print_problem(&c, prefix, &r);
        rc = PF_EX_DATAERR;
    } else if (r.status == 409) {
        snprintf(prefix, sizeof prefix, "%s: a job of that name exists with another spec", path);
        print_problem(&c, prefix, &r);
        rc = 1;
    } else {
        rc = report_error(&c, &r, NULL);
    }
    pf_http_response_deinit(&r);
    return rc;
}

/* ---- psflow list --------------------------------------------------------------------------- */

enum { COL_NAME, COL_PHASE, COL_STEP, COL_LOSS, COL_ACC, COL_WORKERS, COL_PS, COL_AGE, N_COLS };

static void ready_desired(const json_t *item, const char *type, char *buf, size_t cap) {
    const json_t *rep = json_object_get(json_object_get(item, "replicas"), type);
    if (!rep)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%lld/%lld", jint(rep, "ready", 0), jint(rep, "desired", 0));
}

int cli_list(int argc, char **argv) {
    cli_option opts[] = {
        COORDINATOR_OPTION,
        {"output", "FORMAT", "text (a table, default) or json (the API's answer); also -o", NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (parse_args("list", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help(
            "list", "[-o json] [options]",
            "Lists the coordinator's jobs, newest first: phase, global step, last "
            "loss, test\naccuracy, workers and ps tasks ready/desired, and age." TOKEN_NOTE,
            opts, n_opts);
        return 0;
    }
    int json_out = output_json("list", opts, n_opts);
    if (json_out < 0)
        return PF_EX_USAGE;
    if (args.n_positional != 0)
        return usage_error("list", "takes no arguments");
    client c;
    int rc = client_init(&c, "list", cli_get(opts, n_opts, "coordinator"), true);
    if (rc)
        return rc;
    pf_http_response r;
    if ((rc = client_call(&c, "GET", "/api/v1/jobs", NULL, 0, REQUEST_TIMEOUT, &r)))
        return rc;
    if (r.status != 200) {
        rc = report_error(&c, &r, NULL);
        pf_http_response_deinit(&r);
        return rc;
    }
    if (json_out) {
        print_body(&r);
        pf_http_response_deinit(&r);
        return 0;
    }
    json_t *doc = body_json(&r);
    pf_http_response_deinit(&r);
    json_t *items = json_object_get(doc, "items");
    if (!json_is_array(items)) {
        fprintf(stderr, "psflow list: the coordinator's answer has no items list\n");
        json_decref(doc);
        return PF_EX_UNAVAILABLE;
    }
    size_t n = json_array_size(items);
    if (n == 0) {
        fprintf(stderr, "psflow list: no jobs\n");
        json_decref(doc);
        return 0;
    }
    /* Two passes: format every cell, then print with each column as wide as its widest. */
    typedef char cell[80];
    cell *cells = pf_mallocarray((n + 1) * N_COLS, sizeof(cell));
    if (!cells) {
        json_decref(doc);
        fprintf(stderr, "psflow list: out of memory\n");
        return PF_EX_OSERR;
    }
    static const char *const head[N_COLS] = {"NAME",     "PHASE",   "STEP", "LOSS",
                                             "ACCURACY", "WORKERS", "PS",   "AGE"};
    for (int k = 0; k < N_COLS; k++)
        snprintf(cells[k], sizeof(cell), "%s", head[k]);
    double now = pf_clock_wall();
    for (size_t i = 0; i < n; i++) {
        const json_t *it = json_array_get(items, i);
        cell *row = cells + (i + 1) * N_COLS;
        job_view v = {.step = -1, .max_steps = -1};
        view_update(&v, it);
        snprintf(row[COL_NAME], sizeof(cell), "%s", jstr(it, "name") ? jstr(it, "name") : "?");
        snprintf(row[COL_PHASE], sizeof(cell), "%s", v.phase[0] ? v.phase : "-");
        format_steps(&v, row[COL_STEP], sizeof(cell));
        if (v.has_loss)
            snprintf(row[COL_LOSS], sizeof(cell), "%.4f", v.loss);
        else
            snprintf(row[COL_LOSS], sizeof(cell), "-");
        if (v.has_accuracy)
            snprintf(row[COL_ACC], sizeof(cell), "%.4f", v.accuracy);
        else
            snprintf(row[COL_ACC], sizeof(cell), "-");
        ready_desired(it, "worker", row[COL_WORKERS], sizeof(cell));
        ready_desired(it, "ps", row[COL_PS], sizeof(cell));
        double created;
        if (parse_rfc3339(jstr(it, "create_time"), &created))
            format_age(now - created, row[COL_AGE], sizeof(cell));
        else
            snprintf(row[COL_AGE], sizeof(cell), "-");
    }
    int width[N_COLS] = {0};
    for (size_t i = 0; i <= n; i++)
        for (int k = 0; k < N_COLS; k++) {
            int w = (int)strlen(cells[i * N_COLS + k]);
            width[k] = w > width[k] ? w : width[k];
        }
    for (size_t i = 0; i <= n; i++)
        for (int k = 0; k < N_COLS; k++) {
            bool last = k + 1 == N_COLS;
            printf("%-*s%s", last ? 0 : width[k], cells[i * N_COLS + k], last ? "\n" : "   ");
        }
    pf_free(cells);
    json_decref(doc);
    return 0;
}

/* ---- psflow get ---------------------------------------------------------------------------- */

/* "2026-11-22T10:00:00.000Z (5m ago)", or "-" when absent. */
static void format_time(const char *rfc3339, char *buf, size_t cap) {
    double t;
    if (!rfc3339) {
        snprintf(buf, cap, "-");
    } else if (parse_rfc3339(rfc3339, &t)) {
        char age[32];
        format_age(pf_clock_wall() - t, age, sizeof age);
        snprintf(buf, cap, "%s (%s ago)", rfc3339, age);
    } else {
        snprintf(buf, cap, "%s", rfc3339);
    }
}

static void print_tasks(const client *c, const char *escaped) {
    char path[600];
    snprintf(path, sizeof path, "/api/v1/jobs/%s/tasks", escaped);
    pf_http_response r;
    pf_error why;
    if (client_try(c, "GET", path, NULL, 0, REQUEST_TIMEOUT, &r, &why) != PF_OK) {
        printf("Tasks:       unavailable (%s)\n", why.message);
        return;
    }
    json_t *doc = r.status == 200 ? body_json(&r) : NULL;
    json_t *items = json_object_get(doc, "items");
    if (!json_is_array(items)) {
        printf("Tasks:       unavailable (HTTP %ld)\n", r.status);
    } else if (json_array_size(items) == 0) {
        printf("Tasks:       none\n");
    } else {
        printf("Tasks:\n  %-12s %-10s %-24s %-22s %-9s %-6s %s\n", "TASK", "STATE", "NODE",
               "ADDRESS", "RESTARTS", "STEP", "HEARTBEAT");
        size_t i;
        json_t *t;
        json_array_foreach(items, i, t) {
            char task[64], hb[32] = "-", step[32] = "-";
            snprintf(task, sizeof task, "%s-%lld", jstr(t, "type") ? jstr(t, "type") : "?",
                     jint(t, "index", -1));
            double age;
            if (jnum(t, "heartbeat_age_seconds", &age))
                snprintf(hb, sizeof hb, "%.1fs ago", age);
            if (jint(t, "step", -1) >= 0)
                snprintf(step, sizeof step, "%lld", jint(t, "step", -1));
            printf("  %-12s %-10s %-24s %-22s %-9lld %-6s %s\n", task,
                   jstr(t, "state") ? jstr(t, "state") : "-",
                   jstr(t, "node_id") ? jstr(t, "node_id") : "-",
                   jstr(t, "address") ? jstr(t, "address") : "-", jint(t, "restarts", 0), step, hb);
        }
    }
    json_decref(doc);
    pf_http_response_deinit(&r);
}

static void print_job(const json_t *job) {
    const json_t *st = json_object_get(job, "status");
    job_view v = {.step = -1, .max_steps = -1};
    view_update(&v, st);
    char buf[256];
    printf("Name:        %s\n", jstr(job, "name") ? jstr(job, "name") : "?");
    printf("Phase:       %s%s%s%s\n", v.phase[0] ? v.phase : "-", v.reason[0] ? " (" : "", v.reason,
           v.reason[0] ? ")" : "");
    if (v.message[0])
        printf("Message:     %s\n", v.message);
    const json_t *spec = json_object_get(job, "spec");
    const char *mode = jstr(json_object_get(spec, "training"), "mode");
    if (mode)
        printf("Mode:        %s\n", mode);
    format_steps(&v, buf, sizeof buf);
    printf("Step:        %s\n", buf);
    if (v.has_loss)
        printf("Loss:        %.4f\n", v.loss);
    if (v.has_accuracy)
        printf("Accuracy:    %.4f\n", v.accuracy);
    if (v.has_test_loss)
        printf("Test loss:   %.6g\n", v.test_loss);
    double x;
    if (jnum(st, "steps_per_sec", &x))
        printf("Steps/s:     %.1f\n", x);
    if (jnum(st, "examples_per_sec", &x))
        printf("Examples/s:  %.1f\n", x);
    if (json_object_get(st, "restarts"))
        printf("Restarts:    %lld (generation %lld)\n", jint(st, "restarts", 0),
               jint(st, "generation", 0));
    format_time(jstr(st, "create_time"), buf, sizeof buf);
    printf("Created:     %s\n", buf);
    format_time(jstr(st, "start_time"), buf, sizeof buf);
    printf("Started:     %s\n", buf);
    format_time(jstr(st, "completion_time"), buf, sizeof buf);
    printf("Completed:   %s\n", buf);
    const json_t *conds = json_object_get(st, "conditions");
    if (json_array_size(conds)) {
        printf("Conditions:\n  %-11s %-7s %-22s %-25s %s\n", "TYPE", "STATUS", "REASON",
               "LAST TRANSITION", "MESSAGE");
        size_t i;
        json_t *cond;
        json_array_foreach(conds, i, cond) {
            const char *t = jstr(cond, "last_transition_time");
            printf("  %-11s %-7s %-22s %-25s %s\n", jstr(cond, "type") ? jstr(cond, "type") : "-",
                   jstr(cond, "status") ? jstr(cond, "status") : "-",
                   jstr(cond, "reason") ? jstr(cond, "reason") : "-", t ? t : "-",
                   jstr(cond, "message") ? jstr(cond, "message") : "");
        }
    }
    const json_t *reps = json_object_get(st, "replica_statuses");
    if (json_object_size(reps)) {
        printf("Replicas:\n  %-10s %-7s %-10s %s\n", "TYPE", "ACTIVE", "SUCCEEDED", "FAILED");
        const char *type;
        json_t *rs;
        json_object_foreach((json_t *)reps, type, rs) {
            printf("  %-10s %-7lld %-10lld %lld\n", type, jint(rs, "active", 0),
                   jint(rs, "succeeded", 0), jint(rs, "failed", 0));
        }
    }
}

int cli_get_job(int argc, char **argv) {
    cli_option opts[] = {
        COORDINATOR_OPTION,
        {"output", "FORMAT",
         "text (a summary, default) or json (the job as the API gives it); "
         "also -o",
         NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (parse_args("get", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help("get", "NAME [-o json] [options]",
                       "Shows one job: phase and message, conditions with reasons and times, "
                       "global step,\nloss, accuracy, replica statuses and its tasks. Exit "
                       "codes: 0 shown, 1 no such job,\n64 usage, 69 coordinator unreachable, 77 "
                       "token missing or rejected." TOKEN_NOTE,
                       opts, n_opts);
        return 0;
    }
    int json_out = output_json("get", opts, n_opts);
    if (json_out < 0)
        return PF_EX_USAGE;
    if (args.n_positional != 1)
        return usage_error("get", "expected one job NAME");
    client c;
    int rc = client_init(&c, "get", cli_get(opts, n_opts, "coordinator"), true);
    if (rc)
        return rc;
    const char *name = args.positional[0];
    char escaped[512], path[600], not_found[400];
    if (!url_escape(name, escaped, sizeof escaped))
        return usage_error("get", "job NAME too long");
    snprintf(path, sizeof path, "/api/v1/jobs/%s", escaped);
    snprintf(not_found, sizeof not_found, "no job named '%s'", name);
    pf_http_response r;
    if ((rc = client_call(&c, "GET", path, NULL, 0, REQUEST_TIMEOUT, &r)))
        return rc;
    if (r.status != 200) {
        rc = report_error(&c, &r, not_found);
    } else if (json_out) {
        print_body(&r);
    } else {
        json_t *doc = body_json(&r);
        if (!json_is_object(doc)) {
            fprintf(stderr, "psflow get: the coordinator's answer is not a job\n");
            rc = PF_EX_UNAVAILABLE;
        } else {
            print_job(doc);
            print_tasks(&c, escaped);
        }
        json_decref(doc);
    }
    pf_http_response_deinit(&r);
    return rc;
}

/* ---- psflow watch -------------------------------------------------------------------------- */

typedef struct watcher {
    const client *c;
    pf_sse parser;
    bool outage;
    bool write_failed;
} watcher;

static const char *field_or(const json_t *o, const char *key, const char *fallback) {
    const char *s = jstr(o, key);
    return s && *s ? s : fallback;
}

/* One line of summary for an event's data. */
static void event_summary(const char *event, const json_t *d, char *buf, size_t cap) {
    double x, y;
    if (!strcmp(event, "job")) {
        job_view v = {.step = -1, .max_steps = -1};
        view_update(&v, d);
        char steps[64];
        format_steps(&v, steps, sizeof steps);
        int n = snprintf(buf, cap, "%s  step %s", v.phase[0] ? v.phase : "?", steps);
        if (v.has_loss && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  loss %.4f", v.loss);
        if (v.has_accuracy && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  accuracy %.4f", v.accuracy);
        /* While Running the message stays the same; elsewhere it says what changed. */
        if (strcmp(v.phase, "Running") != 0 && v.message[0] && n >= 0 && (size_t)n < cap)
            snprintf(buf + n, cap - (size_t)n, "  %s", v.message);
    } else if (!strcmp(event, "task")) {
        snprintf(buf, cap, "%s-%lld  %s  node %s  address %s  restarts %lld",
                 field_or(d, "type", "?"), jint(d, "index", -1), field_or(d, "state", "?"),
                 field_or(d, "node_id", "-"), field_or(d, "address", "-"), jint(d, "restarts", 0));
    } else if (!strcmp(event, "metric")) {
        int n = snprintf(buf, cap, "%s  step %lld", field_or(d, "task", "?"), jint(d, "step", -1));
        if (jnum(d, "accuracy", &x) && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  accuracy %.4f", x);
        if (jnum(d, "test_loss", &x) && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  test loss %.4f", x);
        if (jnum(d, "loss", &x) && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  loss %.4f", x);
        if (jnum(d, "examples_per_sec", &y) && n >= 0 && (size_t)n < cap)
            snprintf(buf + n, cap - (size_t)n, "  %.0f examples/s", y);
    } else if (!strcmp(event, "node")) {
        int n = snprintf(buf, cap, "%s  %s  %s", field_or(d, "id", "?"), field_or(d, "role", "?"),
                         field_or(d, "state", "?"));
        if (jstr(d, "job") && n >= 0 && (size_t)n < cap)
            snprintf(buf + n, cap - (size_t)n, "  %s %s-%lld", jstr(d, "job"),
                     field_or(d, "type", "?"), jint(d, "index", -1));
    } else if (!strcmp(event, "checkpoint")) {
        snprintf(buf, cap, "step %lld  %lld bytes  %zu files", jint(d, "step", -1),
                 jint(d, "bytes", 0), json_array_size(json_object_get(d, "files")));
    } else if (!strcmp(event, "log")) {
        snprintf(buf, cap, "%s  %s  %s", field_or(d, "type", "-"), field_or(d, "reason", "-"),
                 field_or(d, "message", ""));
    } else {
        char *s = json_dumps(d, JSON_COMPACT);
        snprintf(buf, cap, "%s", s ? s : "");
        free(s);
    }
}

/* The time an event happened: its own "time" (Unix seconds or RFC 3339), else now. */
static double event_time(const json_t *d) {
    double t;
    if (jnum(d, "time", &t) || parse_rfc3339(jstr(d, "time"), &t))
        return t;
    return pf_clock_wall();
}

static void watcher_event(const char *event, const char *data, const char *id, void *ctx) {
    (void)id;
    watcher *w = ctx;
    json_t *d = json_loads(data, 0, NULL);
    char when[16], line[1024];
    format_clock(event_time(d), when, sizeof when);
    if (d)
        event_summary(event, d, line, sizeof line);
    else
        snprintf(line, sizeof line, "%.1000s", data);
    const char *job = !strcmp(event, "job") ? field_or(d, "name", "-") : field_or(d, "job", "-");
    if (printf("%s  %-20s  %-10s  %s\n", when, job, event, line) < 0 || fflush(stdout) != 0)
        w->write_failed = true;
    json_decref(d);
}

static int watcher_on_data(const char *data, size_t len, void *ctx) {
    watcher *w = ctx;
    w->outage = false;
    pf_sse_feed(&w->parser, data, len);
    return w->write_failed;
}

/* Asks GET path and maps a failure to an exit code: 0 fine, -1 retry later. */
static int watch_check(watcher *w, const char *path, const char *not_found) {
    pf_http_response r;
    pf_error why;
    if (client_try(w->c, "GET", path, NULL, 0, REQUEST_TIMEOUT, &r, &why) != PF_OK ||
        r.status >= 500) {
        if (r.status)
            snprintf(why.message, sizeof why.message, "HTTP %ld", r.status);
        if (!w->outage)
            fprintf(stderr, "psflow watch: coordinator unreachable, retrying (%s)\n", why.message);
        w->outage = true;
        pf_http_response_deinit(&r);
        return -1;
    }
    w->outage = false;
    int rc = 0;
    if (r.status != 200)
        rc = report_error(w->c, &r, not_found);
    pf_http_response_deinit(&r);
    return rc;
}

int cli_watch(int argc, char **argv) {
    cli_option opts[] = {
        COORDINATOR_OPTION,
        {"since-id", "ID", "first replay the events after event ID (0: all the coordinator keeps)",
         NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (parse_args("watch", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help(
            "watch", "[NAME] [options]",
            "Prints the coordinator's live events, one line each: time (the event's own, "
            "or when it\narrived), job, kind (job, task, metric, node, checkpoint, "
            "log) and a summary; with\nNAME that job's and the cluster's (agents registering, "
            "lost). Reconnects without\nlosing events when the stream drops. Ctrl-C ends "
            "it." TOKEN_NOTE,
            opts, n_opts);
        return 0;
    }
    if (args.n_positional > 1)
        return usage_error("watch", "expected at most one job NAME");
    long since;
    if (cli_get_long("watch", opts, n_opts, "since-id", 0, LONG_MAX, -1, &since))
        return PF_EX_USAGE;
    client c;
    int rc = client_init(&c, "watch", cli_get(opts, n_opts, "coordinator"), true);
    if (rc)
        return rc;
    const char *name = args.n_positional ? args.positional[0] : NULL;
    char escaped[512] = "", check_path[600], url[2048], not_found[400] = "";
    if (name && !url_escape(name, escaped, sizeof escaped))
        return usage_error("watch", "job NAME too long");
    if (name) {
        snprintf(check_path, sizeof check_path, "/api/v1/jobs/%s", escaped);
        snprintf(not_found, sizeof not_found, "no job named '%s'", name);
    } else {
        snprintf(check_path, sizeof check_path, "/api/v1/jobs");
    }
    char events_path[700];
    snprintf(events_path, sizeof events_path, "/api/v1/events%s%s", name ? "?job=" : "", escaped);
    if ((rc = client_url(&c, events_path, url, sizeof url)))
        return rc;
    watcher w = {.c = &c};
    pf_sse_init(&w.parser, watcher_event, &w);
    if (since >= 0) {
        /* Resuming after a given event is exactly a reconnection after it. */
        char id[32];
        snprintf(id, sizeof id, "%ld", since);
        pf_sse_resume_after(&w.parser, id);
    }
    /* The first check turns a wrong name or token into a clear error before any waiting. */
    while ((rc = watch_check(&w, check_path, name ? not_found : NULL)) < 0)
        sleep_seconds(1.0);
    if (rc)
        return rc;
    for (;;) {
        pf_error err;
        pf_error_clear(&err);
        double t0 = pf_clock_now();
        pf_status st =
            pf_http_stream(url, c.token, pf_sse_last_id(&w.parser), watcher_on_data, &w, &err);
        pf_sse_reset(&w.parser);
        if (w.write_failed)
            break;
        rc = 0;
        if (st != PF_OK) {
            /* A plain GET tells a coordinator that is down (retry, said once) from one that
             * refuses this client (job deleted, token) and from a stream that merely broke
             * (reconnect at once). */
            rc = watch_check(&w, check_path, name ? not_found : NULL);
            if (rc > 0)
                break;
            if (rc == 0 && st == PF_ERR_FORMAT) {
                fprintf(stderr, "psflow watch: %s\n", err.message);
                rc = PF_EX_UNAVAILABLE;
                break;
            }
        }
        if (rc < 0 || pf_clock_now() - t0 < 1.0)
            sleep_seconds(1.0);
    }
    pf_sse_deinit(&w.parser);
    return w.write_failed ? 0 : rc;
}

/* ---- psflow cancel ------------------------------------------------------------------------- */

int cli_cancel(int argc, char **argv) {
    cli_option opts[] = {COORDINATOR_OPTION};
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (parse_args("cancel", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help("cancel", "NAME [options]",
                       "Cancels a job: it ends in phase Failed with reason Cancelled and its "
                       "tasks are\nstopped. Checkpoints are kept. Prints the resulting "
                       "phase." TOKEN_NOTE,
                       opts, n_opts);
        return 0;
    }
    if (args.n_positional != 1)
        return usage_error("cancel", "expected one job NAME");
    client c;
    int rc = client_init(&c, "cancel", cli_get(opts, n_opts, "coordinator"), true);
    if (rc)
        return rc;
    const char *name = args.positional[0];
    char escaped[512], path[600], not_found[400];
    if (!url_escape(name, escaped, sizeof escaped))
        return usage_error("cancel", "job NAME too long");
    snprintf(path, sizeof path, "/api/v1/jobs/%s/cancel", escaped);
    snprintf(not_found, sizeof not_found, "no job named '%s'", name);
    pf_http_response r;
    if ((rc = client_call(&c, "POST", path, NULL, 0, REQUEST_TIMEOUT, &r)))
        return rc;
    if (r.status != 200) {
        rc = report_error(&c, &r, not_found);
    } else {
        json_t *doc = body_json(&r);
        job_view v = {.step = -1, .max_steps = -1};
        view_update(&v, json_object_get(doc, "status"));
        printf("job %s %s%s%s%s\n", name, v.phase[0] ? v.phase : "cancelled",
               v.reason[0] ? " (" : "", v.reason, v.reason[0] ? ")" : "");
        json_decref(doc);
    }
    pf_http_response_deinit(&r);
    return rc;
}

/* ---- psflow tfconfig ----------------------------------------------------------------------- */

int cli_tfconfig(int argc, char **argv) {
    cli_option opts[] = {COORDINATOR_OPTION};
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (parse_args("tfconfig", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help(
            "tfconfig", "NAME TYPE INDEX [options]",
            "Prints the TF_CONFIG of one task of a running job exactly as the "
            "coordinator hands\nit to the task, e.g. `psflow tfconfig fmnist-mlp "
            "worker 0`. A job still waiting for\nagents has none yet (exit 1)." TOKEN_NOTE,
            opts, n_opts);
        return 0;
    }
    if (args.n_positional != 3)
        return usage_error("tfconfig", "expected NAME TYPE INDEX");
    const char *name = args.positional[0], *type = args.positional[1], *index = args.positional[2];
    char *end;
    long idx = strtol(index, &end, 10);
    if (!*index || *end || idx < 0 || idx > 1000000)
        return usage_error("tfconfig", "INDEX must be a task index (0, 1, ...)");
    client c;
    int rc = client_init(&c, "tfconfig", cli_get(opts, n_opts, "coordinator"), true);
    if (rc)
        return rc;
    char escaped[512], etype[256], path[900], not_found[400];
    if (!url_escape(name, escaped, sizeof escaped) || !url_escape(type, etype, sizeof etype))
        return usage_error("tfconfig", "NAME or TYPE too long");
    snprintf(path, sizeof path, "/api/v1/jobs/%s/tf_config?type=%s&index=%ld", escaped, etype, idx);
    pf_http_response r;
    if ((rc = client_call(&c, "GET", path, NULL, 0, REQUEST_TIMEOUT, &r)))
        return rc;
    if (r.status == 200) {
        fwrite(r.body, 1, r.len, stdout);
        fputc('\n', stdout);
    } else if (r.status == 409) {
        char prefix[400];
        snprintf(prefix, sizeof prefix, "job %s has no TF_CONFIG yet", name);
        print_problem(&c, prefix, &r);
        rc = 1;
    } else {
        /* A 404 is a missing job or a missing task: the coordinator's detail says which. */
        snprintf(not_found, sizeof not_found, "job %s has no task %s %ld", name, type, idx);
        json_t *doc = body_json(&r);
        rc = report_error(&c, &r, jstr(doc, "detail") ? NULL : not_found);
        json_decref(doc);
    }
    pf_http_response_deinit(&r);
    return rc;
}

/* ---- psflow health ------------------------------------------------------------------------- */

int cli_health(int argc, char **argv) {
    cli_option opts[] = {COORDINATOR_OPTION};
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (parse_args("health", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help("health", "[options]",
                       "Asks the coordinator's /readyz (2 s at most). Prints ok and exits 0 "
                       "when it is\nready, else prints why and exits 69. Meant for container "
                       "health checks.",
                       opts, n_opts);
        return 0;
    }
    if (args.n_positional != 0)
        return usage_error("health", "takes no arguments");
    client c;
    int rc = client_init(&c, "health", cli_get(opts, n_opts, "coordinator"), false);
    if (rc)
        return rc;
    pf_http_response r;
    pf_error why;
    if (client_try(&c, "GET", "/readyz", NULL, 0, HEALTH_TIMEOUT, &r, &why) != PF_OK) {
        fprintf(stderr, "psflow health: coordinator unreachable: %s\n", why.message);
        return PF_EX_UNAVAILABLE;
    }
    if (r.status == 200) {
        printf("ok\n");
    } else {
        size_t n = r.body ? strcspn(r.body, "\r\n") : 0;
        fprintf(stderr, "psflow health: coordinator not ready (HTTP %ld)%s%.*s\n", r.status,
                n ? ": " : "", (int)(n < 300 ? n : 300), r.body ? r.body : "");
        rc = PF_EX_UNAVAILABLE;
    }
    pf_http_response_deinit(&r);
    return rc;
}
