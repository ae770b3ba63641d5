/* cmd_delete.c - `psflow delete NAME [--wait]`: DELETE /api/v1/jobs/{name}, which cancels the
 * job and deletes its record (checkpoints are kept); --wait reads the job until GET answers
 * 404 (api_wait_job). */
#include <stdbool.h>
#include <stdio.h>

#include "cli/api.h"
#include "cli/cli_internal.h"
#include "cli/command.h"

int cli_delete(const cli_command *cmd, int argc, char **argv) {
    bool wait;
    cli_option opts[] = {
        CLI_FLAG("wait", "wait until the coordinator no longer shows the job", &wait),
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    api_job_ref job;
    pf_http_response r;
    int rc = api_job_ref_init(&job, "delete", run.args.positional[0], "");
    if (rc || (rc = api_send_job(&run.client, "DELETE", &job, NULL, &r)))
        return rc;
    pf_http_response_deinit(&r);
    if (wait) {
        json_t *last;
        rc = api_wait_job(&run.client, &job, false, NULL, NULL, &last);
        json_decref(last);
        if (rc)
            return rc;
    }
    printf("job %s deleted (checkpoints kept)\n", job.name);
    return 0;
}
