/* cmd_submit.c - `psflow submit FILE [--wait]`: POST /api/v1/jobs, and with --wait a
 * progress line until the job ends, then its result.
 *
 * DESIGN. --wait follows the Server-Sent Events stream GET /api/v1/events?job=NAME, parsed
 * incrementally by psflow/sse.h. When the stream drops it reconnects with Last-Event-ID so
 * nothing is missed; while the coordinator is down it retries every second and says so once
 * per outage. It also reads the job with GET: once when the stream has delivered its first
 * bytes (a job that finished before the stream was subscribed would otherwise never be seen
 * finishing), then every 15 s as a safety net, and every second when the coordinator offers
 * no event stream at all.
 */
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/api.h"
#include "cli/cli_internal.h"
#include "cli/command.h"
#include "psflow/clock.h"
#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/sse.h"

#define SYNC_EVERY        15.0 /* seconds between safety-net GETs while the stream is live */
#define RATE_WINDOW       20.0 /* seconds of step samples behind the steps/s estimate */
#define PLAIN_EVERY       10.0 /* seconds between progress lines without a terminal */
#define POLL_STREAM_RETRY 30.0 /* seconds of polling before a refused stream is tried again */

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

static bool phase_is_final(const char *phase) {
    return !strcmp(phase, "Succeeded") || !strcmp(phase, "Failed");
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
static double progress_rate(const progress *p, const api_job_view *v) {
    if (p->n >= 2 && p->t[p->n - 1] - p->t[0] >= 1.0)
        return (double)(p->s[p->n - 1] - p->s[0]) / (p->t[p->n - 1] - p->t[0]);
    return v->has_rate ? v->steps_per_sec : 0;
}

static void progress_line(const progress *p, const api_job_view *v, char *buf, size_t cap) {
    char steps[64];
    api_format_steps(v, steps, sizeof steps);
    int n = snprintf(buf, cap, "%s  %s  step %s", p->name, v->phase[0] ? v->phase : "?", steps);
    if (n < 0 || (size_t)n >= cap)
        return;
    if (v->has_loss)
        n += snprintf(buf + n, cap - (size_t)n, "  loss %.4f", v->loss);
    double rate = progress_rate(p, v);
    if (!strcmp(v->phase, "Running") && rate > 0 && (size_t)n < cap) {
        n += snprintf(buf + n, cap - (size_t)n, "  %.1f steps/s", rate);
        /* The coordinator's status.eta_seconds; a coordinator without it: this client's. */
        if ((v->has_eta || (v->max_steps > 0 && v->step >= 0)) && (size_t)n < cap) {
            char eta[32];
            format_eta(v->has_eta ? v->eta_seconds : (double)(v->max_steps - v->step) / rate, eta,
                       sizeof eta);
            n += snprintf(buf + n, cap - (size_t)n, "  ETA %s", eta);
        }
    }
    /* Outside Running the message says what the job waits for ("missing worker 2"). */
    if (strcmp(v->phase, "Running") != 0 && v->message[0] && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, "  %s", v->message);
}

/* Shows the state: redrawn in place on a terminal, else a line every PLAIN_EVERY seconds
 * and on every phase change. */
static void progress_show(progress *p, const api_job_view *v, bool force) {
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
    const api_client *c;
    const char *name;
    char job_path[1024]; /* /api/v1/jobs/NAME, escaped */
    api_job_view view;
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
    if (api_try(f->c, "GET", f->job_path, NULL, 0, API_REQUEST_TIMEOUT, &r, &why) != PF_OK) {
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
        f->exit_code = api_report_error(f->c, &r, gone);
        f->done = true;
        pf_http_response_deinit(&r);
        return true;
    }
    json_t *doc = api_body_json(&r);
    pf_http_response_deinit(&r);
    json_t *status = json_object_get(doc, "status");
    if (json_is_object(status)) {
        api_view_update(&f->view, status);
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
    const char *name = api_jstr(doc, "name");
    if (name && !strcmp(name, f->name)) {
        api_view_update(&f->view, doc);
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
static int follow_job(const api_client *c, const char *name, const char *escaped) {
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
            pf_clock_sleep(1.0);
            continue;
        }
        if (f.done)
            break;
        if (pf_clock_now() < stream_again) {
            pf_clock_sleep(1.0);
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
            pf_clock_sleep(1.0); /* a stream that ends at once must not make us spin */
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
        pf_clock_sleep(1.0);
    progress_show(&f.prog, &f.view, f.prog.tty);
    progress_break(&f.prog);
    char steps[64];
    api_format_steps(&f.view, steps, sizeof steps);
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

/* ---- --set KEY=VALUE ----------------------------------------------------------------------- */

#define MAX_SETS 32

/* Sets the member `key` (a dotted path of object members, "replicas.evaluator"; objects on
 * the way are created) of doc to `text`, read as JSON when it is JSON (3, true, "a", [1, 2])
 * and as a string otherwise (name=fmnist-live). Returns 0, or -1 after printing why. */
static int set_member(json_t *doc, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment) {
        fprintf(stderr, "psflow submit: --set %s: expected KEY=VALUE, like replicas.worker=4\n",
                assignment);
        return -1;
    }
    char key[256];
    size_t key_len = (size_t)(eq - assignment);
    if (key_len >= sizeof key) {
        fprintf(stderr, "psflow submit: --set: the key is longer than %zu bytes\n", sizeof key - 1);
        return -1;
    }
    memcpy(key, assignment, key_len);
    key[key_len] = '\0';
    json_t *value = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    if (!value)
        value = json_string(eq + 1);
    json_t *obj = doc;
    char *part = key, *dot;
    while (value && (dot = strchr(part, '.')) != NULL) {
        *dot = '\0';
        json_t *next = json_object_get(obj, part);
        if (!next) {
            next = json_object();
            if (!next || json_object_set_new(obj, part, next) != 0)
                break;
        } else if (!json_is_object(next)) {
            fprintf(stderr, "psflow submit: --set %s: %s is not an object in the spec\n", key,
                    part);
            json_decref(value);
            return -1;
        }
        obj = next;
        part = dot + 1;
    }
    if (!value || !*part || json_object_set_new(obj, part, value) != 0) {
        fprintf(stderr, "psflow submit: --set %s: cannot set %s\n", assignment,
                *part ? "that member" : "an empty member name");
        return -1;
    }
    return 0;
}

/* The spec text with every --set applied, in *spec (replaced) and *len. Returns 0, or an
 * exit code after printing why. */
static int apply_sets(const char *path, char **spec, size_t *len, const char *const *sets, int n) {
    json_error_t jerr;
    json_t *doc = json_loadb(*spec, *len, 0, &jerr);
    if (!json_is_object(doc)) {
        fprintf(stderr,
                "psflow submit: %s: not a JSON object (line %d: %s), so --set cannot "
                "change it\n",
                path, jerr.line, doc ? "not an object" : jerr.text);
        json_decref(doc);
        return PF_EX_DATAERR;
    }
    for (int i = 0; i < n; i++) {
        if (set_member(doc, sets[i]) != 0) {
            json_decref(doc);
            return PF_EX_USAGE;
        }
    }
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!text) {
        fprintf(stderr, "psflow submit: out of memory\n");
        return PF_EX_OSERR;
    }
    pf_free(*spec);
    *len = strlen(text);
    *spec = pf_malloc(*len + 1);
    if (*spec)
        memcpy(*spec, text, *len + 1);
    free(text);
    if (!*spec) {
        fprintf(stderr, "psflow submit: out of memory\n");
        return PF_EX_OSERR;
    }
    return 0;
}

/* ---- psflow submit ------------------------------------------------------------------------- */

int cli_submit(const cli_command *cmd, int argc, char **argv) {
    bool wait;
    cli_option opts[] = {
        CLI_FLAG("wait", "follow the job until it ends; exit 0 if it succeeded, 1 if it failed",
                 &wait),
        CLI_OPT("set", "KEY=VALUE",
                "change the spec before submitting it (name=fmnist-2, replicas.evaluator=1; "
                "repeatable)"),
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    const api_client *c = &run.client;
    int rc;
    const char *path = run.args.positional[0];
    size_t len = 0;
    char *spec;
    pf_error err;
    /* Bounded far above the coordinator's body limit, which stays the one that decides. */
    if (pf_fs_read_file(path, 64u << 20, &spec, &len, &err) != PF_OK) {
        fprintf(stderr, "psflow submit: %s\n", err.message);
        return PF_EX_NOINPUT;
    }
    char set_buf[8192];
    const char *sets[MAX_SETS];
    int n_sets = cli_get_list("submit", argc, argv, run.table, run.n_table, "set", '\n', set_buf,
                              sizeof set_buf, sets, MAX_SETS);
    if (n_sets < 0 || (n_sets > 0 && (rc = apply_sets(path, &spec, &len, sets, n_sets)) != 0)) {
        pf_free(spec);
        return n_sets < 0 ? PF_EX_USAGE : rc;
    }
    pf_http_response r;
    rc = api_call(c, "POST", "/api/v1/jobs", spec, len, API_REQUEST_TIMEOUT, &r);
    pf_free(spec);
    if (rc)
        return rc;
    json_t *doc = api_body_json(&r);
    const char *name = api_jstr(doc, "name");
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
        if (!wait)
            return 0;
        char escaped[256 * 3 + 1];
        api_url_escape(name_buf, escaped, sizeof escaped);
        return follow_job(c, name_buf, escaped);
    }
    char prefix[600];
    if (r.status == 400 || r.status == 413 || r.status == 422) {
        snprintf(prefix, sizeof prefix, "%s: job spec rejected", path);
        api_print_problem(c, prefix, &r);
        rc = PF_EX_DATAERR;
    } else if (r.status == 409) {
        snprintf(prefix, sizeof prefix, "%s: a job of that name exists with another spec", path);
        api_print_problem(c, prefix, &r);
        rc = 1;
    } else {
        rc = api_report_error(c, &r, NULL);
    }
    pf_http_response_deinit(&r);
    return rc;
}
