/* cmd_health.c - `psflow health`: is the coordinator ready (GET /readyz)? */
#include <stdio.h>
#include <string.h>

#include "cli/api.h"
#include "cli/cli_internal.h"
#include "cli/command.h"

#define HEALTH_TIMEOUT 2.0 /* seconds: the compose healthcheck must stay quick */

int cli_health(const cli_command *cmd, int argc, char **argv) {
    cli_run run;
    if (!cli_command_start(cmd, NULL, 0, argc, argv, &run))
        return run.exit_code;
    const api_client *c = &run.client;
    int rc = 0;
    pf_http_response r;
    pf_error why;
    if (api_try(c, "GET", "/readyz", NULL, 0, HEALTH_TIMEOUT, &r, &why) != PF_OK) {
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
