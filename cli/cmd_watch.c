/* cmd_watch.c - `psflow watch [NAME]`: the coordinator's live events, one line each, from
 * the Server-Sent Events stream GET /api/v1/events. When the stream drops it reconnects with
 * Last-Event-ID so nothing is missed or shown twice; while the coordinator is down it
 * retries every second and says so once per outage. */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/api.h"
#include "cli/cli_internal.h"
#include "cli/command.h"
#include "psflow/clock.h"
#include "psflow/sse.h"
#include "psflow/text.h"

/* Local wall-clock time of a Unix time as HH:MM:SS. */
static void format_clock(double t, char *buf, size_t cap) {
    time_t tt = (time_t)t;
    struct tm tm;
    if (!localtime_r(&tt, &tm) || !strftime(buf, cap, "%H:%M:%S", &tm))
        snprintf(buf, cap, "--:--:--");
}

/* ---- psflow watch -------------------------------------------------------------------------- */

typedef struct watcher {
    const api_client *c;
    pf_sse parser;
    bool outage;
    bool write_failed;
} watcher;

static const char *field_or(const json_t *o, const char *key, const char *fallback) {
    const char *s = api_jstr(o, key);
    return s && *s ? s : fallback;
}

/* One line of summary for an event's data. */
static void event_summary(const char *event, const json_t *d, char *buf, size_t cap) {
    double x, y;
    if (!strcmp(event, "job")) {
        api_job_view v = {.step = -1, .max_steps = -1};
        api_view_update(&v, d);
        char steps[64];
        api_format_steps(&v, steps, sizeof steps);
        int n = snprintf(buf, cap, "%s  step %s", v.phase[0] ? v.phase : "?", steps);
        if (v.has_loss && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  loss %.4f", v.loss);
        if (v.has_accuracy && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  accuracy %.4f", v.accuracy);
        if (v.has_test_auc && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  auc %.4f", v.test_auc);
        if (v.has_test_calibration && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  calibration %.4g", v.test_calibration);
        /* While Running the message stays the same; elsewhere it says what changed. */
        if (strcmp(v.phase, "Running") != 0 && v.message[0] && n >= 0 && (size_t)n < cap)
            snprintf(buf + n, cap - (size_t)n, "  %s", v.message);
    } else if (!strcmp(event, "task")) {
        snprintf(buf, cap, "%s-%lld  %s  node %s  address %s  restarts %lld",
                 field_or(d, "type", "?"), api_jint(d, "index", -1), field_or(d, "state", "?"),
                 field_or(d, "node_id", "-"), field_or(d, "address", "-"),
                 api_jint(d, "restarts", 0));
    } else if (!strcmp(event, "metric")) {
        int n =
            snprintf(buf, cap, "%s  step %lld", field_or(d, "task", "?"), api_jint(d, "step", -1));
        if (api_jnum(d, "accuracy", &x) && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  accuracy %.4f", x);
        if (api_jnum(d, "test_loss", &x) && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  test loss %.4f", x);
        if (api_jnum(d, "test_auc", &x) && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  auc %.4f", x);
        if (api_jnum(d, "test_calibration", &x) && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  calibration %.4g", x);
        if (api_jnum(d, "loss", &x) && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "  loss %.4f", x);
        if (api_jnum(d, "examples_per_sec", &y) && n >= 0 && (size_t)n < cap)
            snprintf(buf + n, cap - (size_t)n, "  %.0f examples/s", y);
    } else if (!strcmp(event, "node")) {
        int n = snprintf(buf, cap, "%s  %s  %s", field_or(d, "id", "?"), field_or(d, "role", "?"),
                         field_or(d, "state", "?"));
        if (api_jstr(d, "job") && n >= 0 && (size_t)n < cap)
            snprintf(buf + n, cap - (size_t)n, "  %s %s-%lld", api_jstr(d, "job"),
                     field_or(d, "type", "?"), api_jint(d, "index", -1));
    } else if (!strcmp(event, "checkpoint")) {
        snprintf(buf, cap, "step %lld  %lld bytes  %zu files", api_jint(d, "step", -1),
                 api_jint(d, "bytes", 0), json_array_size(json_object_get(d, "files")));
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
    if (api_jnum(d, "time", &t) || pf_text_parse_rfc3339(api_jstr(d, "time"), &t))
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
    pf_sse_feed(&w->parser, data, len);
    w->outage = false;
    return w->write_failed;
}

/* Asks GET path and maps a failure to an exit code: 0 fine, -1 retry later. */
static int watch_check(watcher *w, const char *path, const char *not_found) {
    pf_http_response r;
    pf_error why;
    if (api_try(w->c, "GET", path, NULL, 0, API_REQUEST_TIMEOUT, &r, &why) != PF_OK ||
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
        rc = api_report_error(w->c, &r, not_found);
    pf_http_response_deinit(&r);
    return rc;
}

int cli_watch(const cli_command *cmd, int argc, char **argv) {
    cli_run run;
    long since;
    cli_option opts[] = {
        CLI_LONG("since-id", "ID",
                 "first replay the events after event ID (0: all the coordinator keeps)", 0,
                 LONG_MAX, -1, &since),
    };
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    const api_client *c = &run.client;
    int rc;
    const char *name = run.args.n_positional ? run.args.positional[0] : NULL;
    api_job_ref job = {.path = "/api/v1/jobs"}; /* no NAME: the check reads the job list */
    if (name && (rc = api_job_ref_init(&job, "watch", name, "")))
        return rc;
    const char *not_found = name ? job.not_found : NULL;
    char url[2048];
    char events_path[700];
    snprintf(events_path, sizeof events_path, "/api/v1/events%s%s", name ? "?job=" : "",
             job.escaped);
    if ((rc = api_url(c, events_path, url, sizeof url)))
        return rc;
    watcher w = {.c = c};
    pf_sse_init(&w.parser, watcher_event, &w);
    if (since >= 0) {
        /* Resuming after a given event is exactly a reconnection after it. */
        char id[32];
        snprintf(id, sizeof id, "%ld", since);
        pf_sse_resume_after(&w.parser, id);
    }
    /* The first check turns a wrong name or token into a clear error before any waiting. */
    while ((rc = watch_check(&w, job.path, not_found)) < 0)
        pf_clock_sleep(1.0);
    if (rc)
        return rc;
    for (;;) {
        pf_error err;
        pf_error_clear(&err);
        double t0 = pf_clock_now();
        pf_status st =
            pf_http_stream(url, c->token, pf_sse_last_id(&w.parser), watcher_on_data, &w, &err);
        pf_sse_reset(&w.parser);
        if (w.write_failed)
            break;
        rc = 0;
        if (st != PF_OK) {
            /* A plain GET tells a coordinator that is down (retry, said once) from one that
             * refuses this client (job deleted, token) and from a stream that merely broke
             * (reconnect at once). */
            rc = watch_check(&w, job.path, not_found);
            if (rc > 0)
                break;
            if (rc == 0 && st == PF_ERR_FORMAT) {
                fprintf(stderr, "psflow watch: %s\n", err.message);
                rc = PF_EX_UNAVAILABLE;
                break;
            }
        }
        if (rc < 0 || pf_clock_now() - t0 < 1.0)
            pf_clock_sleep(1.0);
    }
    pf_sse_deinit(&w.parser);
    return w.write_failed ? 0 : rc;
}
