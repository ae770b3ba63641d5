/* cmd_health.c - `psflow health`: is the coordinator ready (GET /readyz)? */
#include <stdio.h>
#include <string.h>

#include "cli/api.h"
#include "cli/cli.h"

#define HEALTH_TIMEOUT 2.0 /* seconds: the compose healthcheck must stay quick */

int cli_health(int argc, char **argv) {
    cli_option opts[] = {API_COORDINATOR_OPTIONS};
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (api_parse_args("health", argc, argv, opts, n_opts, &args) != 0)
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
        return api_usage_error("health", "takes no arguments");
    api_client c;
    int rc = api_client_init(&c, "health", opts, n_opts, false);
    if (rc)
        return rc;
    pf_http_response r;
    pf_error why;
    if (api_try(&c, "GET", "/readyz", NULL, 0, HEALTH_TIMEOUT, &r, &why) != PF_OK) {
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
