/* cmd_cancel.c - `psflow cancel NAME` (POST /api/v1/jobs/{name}/cancel). */
#include <stdio.h>

#include "cli/api.h"
#include "cli/cli_internal.h"
#include "cli/command.h"

int cli_cancel(const cli_command *cmd, int argc, char **argv) {
    cli_run run;
    if (!cli_command_start(cmd, NULL, 0, argc, argv, &run))
        return run.exit_code;
    api_job_ref job;
    pf_http_response r;
    int rc = api_job_ref_init(&job, "cancel", run.args.positional[0], "/cancel");
    if (rc || (rc = api_call_job(&run.client, "POST", &job, &r)))
        return rc;
    json_t *doc = api_body_json(&r);
    api_job_view v = {.step = -1, .max_steps = -1};
    api_view_update(&v, json_object_get(doc, "status"));
    printf("job %s %s%s%s%s\n", job.name, v.phase[0] ? v.phase : "cancelled",
           v.reason[0] ? " (" : "", v.reason, v.reason[0] ? ")" : "");
    json_decref(doc);
    pf_http_response_deinit(&r);
    return 0;
}
