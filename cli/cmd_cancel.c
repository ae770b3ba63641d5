/* cmd_cancel.c - `psflow cancel NAME` (POST /api/v1/jobs/{name}/cancel). */
#include <stdio.h>

#include "cli/api.h"
#include "cli/cli.h"

int cli_cancel(int argc, char **argv) {
    cli_option opts[] = {API_COORDINATOR_OPTIONS};
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (api_parse_args("cancel", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help("cancel", "NAME [options]",
                       "Cancels a job: it ends in phase Failed with reason Cancelled and its "
                       "tasks are\nstopped. Checkpoints are kept. Prints the resulting "
                       "phase." API_TOKEN_NOTE,
                       opts, n_opts);
        return 0;
    }
    if (args.n_positional != 1)
        return api_usage_error("cancel", "expected one job NAME");
    api_client c;
    int rc = api_client_init(&c, "cancel", opts, n_opts, true);
    if (rc)
        return rc;
    const char *name = args.positional[0];
    char escaped[512], path[600], not_found[400];
    if (!api_url_escape(name, escaped, sizeof escaped))
        return api_usage_error("cancel", "job NAME too long");
    snprintf(path, sizeof path, "/api/v1/jobs/%s/cancel", escaped);
    snprintf(not_found, sizeof not_found, "no job named '%s'", name);
    pf_http_response r;
    if ((rc = api_call(&c, "POST", path, NULL, 0, API_REQUEST_TIMEOUT, &r)))
        return rc;
    if (r.status != 200) {
        rc = api_report_error(&c, &r, not_found);
    } else {
        json_t *doc = api_body_json(&r);
        api_job_view v = {.step = -1, .max_steps = -1};
        api_view_update(&v, json_object_get(doc, "status"));
        printf("job %s %s%s%s%s\n", name, v.phase[0] ? v.phase : "cancelled",
               v.reason[0] ? " (" : "", v.reason, v.reason[0] ? ")" : "");
        json_decref(doc);
    }
    pf_http_response_deinit(&r);
    return rc;
}
