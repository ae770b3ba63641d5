/* cmd_suspend.c - `psflow suspend NAME` and `psflow resume NAME` [--wait]: PATCH
 * /api/v1/jobs/{name} {"suspend": true|false}, and with --wait reads the job until it is
 * Suspended, or Running again (api_wait_job). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/api.h"
#include "cli/cli_internal.h"
#include "cli/command.h"

/* Done when the job is in the phase ctx names. */
static bool in_phase(const json_t *job, const json_t *tasks, void *ctx, char *line, size_t cap) {
    (void)tasks;
    const char *want = ctx;
    const char *phase = api_jstr(json_object_get(job, "status"), "phase");
    snprintf(line, cap, "waiting for phase %s", want);
    return phase && !strcmp(phase, want);
}

static int set_suspend(const cli_command *cmd, int argc, char **argv, bool suspend) {
    bool wait;
    int format;
    cli_option opts[] = {
        CLI_FLAG("wait",
                 suspend ? "wait until the job is Suspended (exit 0), or ends (0 succeeded, 1 "
                           "failed)"
                         : "wait until the job is Running again (exit 0), or ends (0 succeeded, "
                           "1 failed)",
                 &wait),
        CLI_CHOICE("output", "FORMAT",
                   "text (one line, default) or json (the job as the API answers); also -o",
                   "text|json", &format),
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    api_job_ref job;
    pf_http_response r;
    int rc = api_job_ref_init(&job, cmd->name, run.args.positional[0], "");
    if (rc || (rc = api_send_job(&run.client, "PATCH", &job,
                                 suspend ? "{\"suspend\":true}" : "{\"suspend\":false}", &r)))
        return rc;
    const char *what = suspend ? "suspended" : "resumed";
    if (!wait) {
        if (format == 1) { /* json */
            api_print_body(&r);
        } else {
            json_t *doc = api_body_json(&r);
            api_print_job_line(job.name, doc, what);
            json_decref(doc);
        }
        pf_http_response_deinit(&r);
        return 0;
    }
    pf_http_response_deinit(&r);
    json_t *last;
    rc = api_wait_job(&run.client, &job, false, in_phase, suspend ? "Suspended" : "Running", &last);
    api_print_waited(job.name, last, rc, format == 1, what);
    json_decref(last);
    return rc;
}

int cli_suspend(const cli_command *cmd, int argc, char **argv) {
    return set_suspend(cmd, argc, argv, true);
}

int cli_resume(const cli_command *cmd, int argc, char **argv) {
    return set_suspend(cmd, argc, argv, false);
}
