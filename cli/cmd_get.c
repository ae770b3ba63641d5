/* cmd_get.c - `psflow get NAME`: one job, its conditions, replicas, servers, tasks and step
 * breakdown (GET /api/v1/jobs/{name}, .../tasks and .../profile). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/api.h"
#include "cli/cli_internal.h"
#include "cli/command.h"
#include "psflow/clock.h"
#include "psflow/profile.h"
#include "psflow/text.h"

/* "2026-11-22T10:00:00.000Z (5m ago)", or "-" when absent. */
static void format_time(const char *rfc3339, char *buf, size_t cap) {
    double t;
    if (!rfc3339) {
        snprintf(buf, cap, "-");
    } else if (pf_text_parse_rfc3339(rfc3339, &t)) {
        char age[32];
        api_format_age(pf_clock_wall() - t, age, sizeof age);
        snprintf(buf, cap, "%s (%s ago)", rfc3339, age);
    } else {
        snprintf(buf, cap, "%s", rfc3339);
    }
}

static void print_tasks(const api_client *c, const char *escaped) {
    char path[600];
    snprintf(path, sizeof path, "/api/v1/jobs/%s/tasks", escaped);
    pf_http_response r;
    pf_error why;
    if (api_try(c, "GET", path, NULL, 0, API_REQUEST_TIMEOUT, &r, &why) != PF_OK) {
        printf("Tasks:       unavailable (%s)\n", why.message);
        return;
    }
    json_t *doc = r.status == 200 ? api_body_json(&r) : NULL;
    json_t *items = json_object_get(doc, "items");
    if (!json_is_array(items)) {
        printf("Tasks:       unavailable (HTTP %ld)\n", r.status);
    } else if (json_array_size(items) == 0) {
        printf("Tasks:       none\n");
    } else {
        printf("Tasks:\n  %-12s %-10s %-24s %-22s %-9s %-6s %-4s %s\n", "TASK", "STATE", "NODE",
               "ADDRESS", "RESTARTS", "STEP", "LAG", "HEARTBEAT");
        size_t i;
        json_t *t;
        json_array_foreach(items, i, t) {
            char task[64], hb[32] = "-", step[32] = "-", lag[32] = "-";
            snprintf(task, sizeof task, "%s-%lld", api_jstr(t, "type") ? api_jstr(t, "type") : "?",
                     api_jint(t, "index", -1));
            double age;
            if (api_jnum(t, "heartbeat_age_seconds", &age))
                snprintf(hb, sizeof hb, "%.1fs ago", age);
            if (api_jint(t, "step", -1) >= 0)
                snprintf(step, sizeof step, "%lld", api_jint(t, "step", -1));
            if (api_jint(t, "lag", -1) >= 0) /* training.max_staleness */
                snprintf(lag, sizeof lag, "%lld", api_jint(t, "lag", -1));
            printf("  %-12s %-10s %-24s %-22s %-9lld %-6s %-4s %s\n", task,
                   api_jstr(t, "state") ? api_jstr(t, "state") : "-",
                   api_jstr(t, "node_id") ? api_jstr(t, "node_id") : "-",
                   api_jstr(t, "address") ? api_jstr(t, "address") : "-",
                   api_jint(t, "restarts", 0), step, lag, hb);
        }
    }
    json_decref(doc);
    pf_http_response_deinit(&r);
}

/* One task's line of the step breakdown: its time a step (a ps: pulls a second) and each
 * phase's share of its time over the window shown (its newest, else its totals). */
static void print_breakdown_task(const json_t *t) {
    const json_t *w = json_object_get(t, "recent");
    if (!json_is_object(w))
        w = json_object_get(t, "total");
    double secs;
    long long count = api_jint(w, "count", 0);
    if (!api_jnum(w, "seconds", &secs) || secs <= 0 || count <= 0)
        return;
    const char *type = api_jstr(t, "type") ? api_jstr(t, "type") : "?";
    int ps = !strcmp(type, "ps");
    char task[64], rate[32], line[512] = "";
    snprintf(task, sizeof task, "%s-%lld", type, api_jint(t, "index", -1));
    if (ps)
        snprintf(rate, sizeof rate, "%.0f pulls/s", (double)count / secs);
    else
        snprintf(rate, sizeof rate, "%.3f ms/step", 1e3 * secs / (double)count);
    size_t n = 0;
    const json_t *phases = json_object_get(w, "phases");
    for (int i = pf_phase_first(ps); i < pf_phase_end(ps); i++) {
        double v;
        if (!api_jnum(phases, pf_phase_name(i), &v) || v <= 0 || n >= sizeof line ||
            (i != PF_PHASE_QUEUE && 100 * v / secs < 0.5)) /* shown as 0%: left out */
            continue;
        if (i == PF_PHASE_QUEUE) /* summed over pulls: a time a pull, not a share */
            n += (size_t)snprintf(line + n, sizeof line - n, " queue %.3f ms/pull",
                                  1e3 * v / (double)count);
        else
            n += (size_t)snprintf(line + n, sizeof line - n, " %s %.0f%%", pf_phase_name(i),
                                  100 * v / secs);
    }
    printf("  %-12s %-7s %-16s%s\n", task,
           json_is_object(json_object_get(t, "recent")) ? "recent" : "total", rate, line);
}

/* GET .../profile: where each task's time goes (docs/profile.md); nothing before a report. */
static void print_breakdown(const api_client *c, const char *escaped) {
    char path[600];
    snprintf(path, sizeof path, "/api/v1/jobs/%s/profile", escaped);
    pf_http_response r;
    pf_error why;
    if (api_try(c, "GET", path, NULL, 0, API_REQUEST_TIMEOUT, &r, &why) != PF_OK)
        return;
    json_t *doc = r.status == 200 ? api_body_json(&r) : NULL;
    json_t *tasks = json_object_get(doc, "tasks"), *t;
    size_t i, shown = 0;
    json_array_foreach(tasks, i, t) shown += json_is_object(json_object_get(t, "total"));
    if (shown) {
        printf("Step breakdown:\n  %-12s %-7s %-16s %s\n", "TASK", "WINDOW", "TIME", "PHASES");
        json_array_foreach(tasks, i, t) print_breakdown_task(t);
    }
    json_decref(doc);
    pf_http_response_deinit(&r);
}

/* status.serving: each server's state, endpoint, version and latency (a serving section). */
static void print_serving(const json_t *st) {
    const json_t *serving = json_object_get(st, "serving");
    if (!json_array_size(serving))
        return;
    printf("Serving:\n  %-8s %-8s %-9s %-10s %-9s %-9s %s\n", "SERVER", "STATE", "VERSION",
           "REQUESTS", "P50 MS", "P99 MS", "ENDPOINT");
    size_t i;
    json_t *s;
    json_array_foreach((json_t *)serving, i, s) {
        char version[32] = "-", p50[32] = "-", p99[32] = "-";
        double x;
        if (api_jint(s, "version", -1) >= 0)
            snprintf(version, sizeof version, "%lld", api_jint(s, "version", -1));
        if (api_jnum(s, "latency_p50_ms", &x))
            snprintf(p50, sizeof p50, "%.3f", x);
        if (api_jnum(s, "latency_p99_ms", &x))
            snprintf(p99, sizeof p99, "%.3f", x);
        const char *why = api_jstr(s, "message");
        printf("  serve-%-2lld %-8s %-9s %-10lld %-9s %-9s %s%s%s\n", api_jint(s, "index", 0),
               api_jstr(s, "state") ? api_jstr(s, "state") : "-", version,
               api_jint(s, "requests", 0), p50, p99,
               api_jstr(s, "endpoint") ? api_jstr(s, "endpoint") : "-", why ? "  " : "",
               why ? why : "");
    }
}

/* A waiting job's place in the queue (docs/design.md "The queue") and its preemptions. */
static void print_queue_place(const json_t *st) {
    const json_t *q = json_object_get(st, "queue");
    if (json_is_object(q)) {
        const char *reason = api_jstr(q, "reason"), *behind = api_jstr(q, "behind"),
                   *by = api_jstr(q, "preempted_by");
        printf("Queue:       %s, position %lld, priority %lld, waiting: %s",
               api_jstr(q, "name") ? api_jstr(q, "name") : "-", api_jint(q, "position", 0),
               api_jint(q, "priority", 0), reason ? reason : "-");
        if (by || behind)
            printf(" (%s %s)", by ? "by" : "for", by ? by : behind);
        double start;
        if (pf_text_parse_rfc3339(api_jstr(q, "estimated_start"), &start)) {
            char in[32];
            double now = pf_clock_wall();
            api_format_age(start > now ? start - now : 0, in, sizeof in);
            printf(", expected to start in %s", in);
        }
        printf("\n");
    }
    long long preemptions = api_jint(st, "preemptions", 0);
    double waited = 0; /* after the resumes so far */
    if (preemptions > 0 && api_jnum(st, "preempted_seconds", &waited) && waited >= 0.5)
        printf("Preemptions: %lld (waited %.0f s to resume)\n", preemptions, waited);
    else if (preemptions > 0)
        printf("Preemptions: %lld\n", preemptions);
}

static void print_job(const json_t *job) {
    const json_t *st = json_object_get(job, "status");
    api_job_view v = {.step = -1, .max_steps = -1};
    api_view_update(&v, st);
    char buf[256];
    printf("Name:        %s\n", api_jstr(job, "name") ? api_jstr(job, "name") : "?");
    printf("Phase:       %s%s%s%s\n", v.phase[0] ? v.phase : "-", v.reason[0] ? " (" : "", v.reason,
           v.reason[0] ? ")" : "");
    if (v.message[0])
        printf("Message:     %s\n", v.message);
    print_queue_place(st);
    const json_t *spec = json_object_get(job, "spec");
    const char *mode = api_jstr(json_object_get(spec, "training"), "mode");
    if (mode)
        printf("Mode:        %s\n", mode);
    api_format_steps(&v, buf, sizeof buf);
    printf("Step:        %s\n", buf);
    if (v.has_loss)
        printf("Loss:        %.4f\n", v.loss);
    if (v.has_accuracy)
        printf("Accuracy:    %.4f\n", v.accuracy);
    if (v.has_test_loss)
        printf("Test loss:   %.6g\n", v.test_loss);
    if (v.has_test_auc)
        printf("Test AUC:    %.4f\n", v.test_auc);
    double bayes;
    if (api_jnum(st, "bayes_auc", &bayes)) /* synthetic_ctr: the true model's */
        printf("Bayes AUC:   %.4f (the best any model can reach on this test set)\n", bayes);
    if (v.has_test_calibration) /* mean prediction over mean label */
        printf("Calibration: %.4g\n", v.test_calibration);
    double x;
    if (api_jnum(st, "steps_per_sec", &x))
        printf("Steps/s:     %.1f\n", x);
    if (api_jnum(st, "examples_per_sec", &x))
        printf("Examples/s:  %.1f\n", x);
    if (json_object_get(st, "restarts"))
        printf("Restarts:    %lld (generation %lld)\n", api_jint(st, "restarts", 0),
               api_jint(st, "generation", 0));
    format_time(api_jstr(st, "create_time"), buf, sizeof buf);
    printf("Created:     %s\n", buf);
    format_time(api_jstr(st, "start_time"), buf, sizeof buf);
    printf("Started:     %s\n", buf);
    format_time(api_jstr(st, "completion_time"), buf, sizeof buf);
    printf("Completed:   %s\n", buf);
    const json_t *conds = json_object_get(st, "conditions");
    if (json_array_size(conds)) {
        printf("Conditions:\n  %-11s %-7s %-22s %-25s %s\n", "TYPE", "STATUS", "REASON",
               "LAST TRANSITION", "MESSAGE");
        size_t i;
        json_t *cond;
        json_array_foreach(conds, i, cond) {
            const char *t = api_jstr(cond, "last_transition_time");
            printf("  %-11s %-7s %-22s %-25s %s\n",
                   api_jstr(cond, "type") ? api_jstr(cond, "type") : "-",
                   api_jstr(cond, "status") ? api_jstr(cond, "status") : "-",
                   api_jstr(cond, "reason") ? api_jstr(cond, "reason") : "-", t ? t : "-",
                   api_jstr(cond, "message") ? api_jstr(cond, "message") : "");
        }
    }
    const json_t *reps = json_object_get(st, "replica_statuses");
    if (json_object_size(reps)) {
        printf("Replicas:\n  %-10s %-7s %-10s %s\n", "TYPE", "ACTIVE", "SUCCEEDED", "FAILED");
        const char *type;
        json_t *rs;
        json_object_foreach((json_t *)reps, type, rs) {
            printf("  %-10s %-7lld %-10lld %lld\n", type, api_jint(rs, "active", 0),
                   api_jint(rs, "succeeded", 0), api_jint(rs, "failed", 0));
        }
    }
    print_serving(st);
}

int cli_get_job(const cli_command *cmd, int argc, char **argv) {
    api_job_ref job;
    pf_http_response r;
    int format;
    cli_option opts[] = {
        CLI_CHOICE("output", "FORMAT",
                   "text (a summary, default) or json (the job as the API gives it); also -o",
                   "text|json", &format),
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    int rc = api_job_ref_init(&job, "get", run.args.positional[0], "");
    if (rc || (rc = api_call_job(&run.client, "GET", &job, &r)))
        return rc;
    if (format == 1) { /* json */
        api_print_body(&r);
    } else {
        json_t *doc = api_body_json(&r);
        if (!json_is_object(doc)) {
            fprintf(stderr, "psflow get: the coordinator's answer is not a job\n");
            rc = PF_EX_UNAVAILABLE;
        } else {
            print_job(doc);
            print_tasks(&run.client, job.escaped);
            print_breakdown(&run.client, job.escaped);
        }
        json_decref(doc);
    }
    pf_http_response_deinit(&r);
    return rc;
}
