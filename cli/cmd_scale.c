/* cmd_scale.c - `psflow scale NAME --workers N --ps M [--wait]`: one PATCH /api/v1/jobs/{name}
 * {"replicas": {"worker": N, "ps": M}}, and with --wait reads the job until the new count
 * of each role runs (api_wait_job). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/api.h"
#include "cli/cli_internal.h"
#include "cli/command.h"
#include "psflow/spec.h"

/* The counts asked for; 0: that role is left alone. */
typedef struct scale_target {
    long workers, ps;
} scale_target;

/* Tasks of `type` in items: how many there are and how many run. */
static void count_tasks(const json_t *items, const char *type, long *desired, long *ready) {
    *desired = *ready = 0;
    size_t i;
    json_t *t;
    json_array_foreach(items, i, t) {
        const char *tt = api_jstr(t, "type"), *state = api_jstr(t, "state");
        if (!tt || strcmp(tt, type) != 0)
            continue;
        ++*desired;
        *ready += state && !strcmp(state, "Running");
    }
}

/* Appends "ROLE READY/N ready" to line and returns whether exactly N tasks of the role exist
 * and all run. */
static bool role_ready(const json_t *items, const char *type, const char *role, long n, char *line,
                       size_t cap) {
    long desired, ready;
    count_tasks(items, type, &desired, &ready);
    size_t len = strlen(line);
    snprintf(line + len, cap - len, "%s%s %ld/%ld ready", len ? ", " : "", role, ready, n);
    return desired == n && ready == n;
}

/* Done when the job runs with exactly the new count of each role, all of them running (what
 * the job summary shows as replicas.worker and replicas.ps ready == desired). */
static bool scaled(const json_t *job, const json_t *tasks, void *ctx, char *line, size_t cap) {
    const scale_target *want = ctx;
    bool done = true;
    line[0] = '\0';
    if (want->workers)
        done &= role_ready(tasks, "worker", "workers", want->workers, line, cap);
    if (want->ps)
        done &= role_ready(tasks, "ps", "ps", want->ps, line, cap);
    const char *phase = api_jstr(json_object_get(job, "status"), "phase");
    return done && phase && !strcmp(phase, "Running");
}

/* "workers 2 -> 3, ps 1 -> 2" from the spec before and after the change. */
static void describe_change(const json_t *before, const json_t *after, const scale_target *want,
                            char *buf, size_t cap) {
    const json_t *old = json_object_get(json_object_get(before, "spec"), "replicas");
    const json_t *now = json_object_get(json_object_get(after, "spec"), "replicas");
    static const char *const keys[] = {"worker", "ps"}, *const roles[] = {"workers", "ps"};
    long asked[] = {want->workers, want->ps};
    size_t n = 0;
    buf[0] = '\0';
    for (int k = 0; k < 2; k++) {
        if (!asked[k] || n >= cap)
            continue;
        n += (size_t)snprintf(buf + n, cap - n, "%s%s %lld -> %lld", n ? ", " : "", roles[k],
                              api_jint(old, keys[k], -1), api_jint(now, keys[k], asked[k]));
    }
}

int cli_scale(const cli_command *cmd, int argc, char **argv) {
    scale_target want;
    bool wait;
    int format;
    cli_option opts[] = {
        CLI_LONG_ARGV("workers", "N",
                      "the job's worker count (live while it runs; command line only)", 1,
                      PF_MAX_REPLICAS, 0, &want.workers),
        CLI_LONG_ARGV("ps", "N",
                      "the job's parameter-server count (a running job restarts from its newest "
                      "checkpoint; command line only)",
                      1, PF_MAX_REPLICAS, 0, &want.ps),
        CLI_FLAG("wait",
                 "wait until that many run (exit 0), or the job ends (0 succeeded, 1 failed)",
                 &wait),
        CLI_CHOICE("output", "FORMAT",
                   "text (one line, default) or json (the job as the API answers); also -o",
                   "text|json", &format),
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    if (!want.workers && !want.ps)
        return cli_usage_error("scale", "give --workers N, --ps N or both");
    const api_client *c = &run.client;
    api_job_ref job;
    pf_http_response r;
    int rc = api_job_ref_init(&job, "scale", run.args.positional[0], "");
    /* The counts before the change, for the line that says what changed. */
    if (rc || (rc = api_call_job(c, "GET", &job, &r)))
        return rc;
    json_t *before = api_body_json(&r);
    pf_http_response_deinit(&r);
    json_t *replicas = json_object();
    if (want.workers)
        json_object_set_new(replicas, "worker", json_integer(want.workers));
    if (want.ps)
        json_object_set_new(replicas, "ps", json_integer(want.ps));
    json_t *patch = json_pack("{s:o}", "replicas", replicas);
    char *body = patch ? json_dumps(patch, JSON_COMPACT) : NULL;
    json_decref(patch);
    if (!body) {
        json_decref(before);
        fprintf(stderr, "psflow scale: out of memory\n");
        return PF_EX_OSERR;
    }
    rc = api_send_job(c, "PATCH", &job, body, &r);
    free(body);
    if (rc) {
        json_decref(before);
        return rc;
    }
    json_t *after = api_body_json(&r);
    char change[160];
    describe_change(before, after, &want, change, sizeof change);
    json_decref(before);
    if (!wait) {
        if (format == 1) /* json */
            api_print_body(&r);
        else
            api_print_job_line(job.name, after, change);
        json_decref(after);
        pf_http_response_deinit(&r);
        return 0;
    }
    pf_http_response_deinit(&r);
    json_decref(after);
    json_t *last;
    rc = api_wait_job(c, &job, true, scaled, &want, &last);
    api_print_waited(job.name, last, rc, format == 1, change);
    json_decref(last);
    return rc;
}
