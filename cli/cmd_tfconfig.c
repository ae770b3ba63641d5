/* cmd_tfconfig.c - `psflow tfconfig NAME TYPE INDEX`: one task's TF_CONFIG
 * (GET /api/v1/jobs/{name}/tf_config). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/api.h"
#include "cli/cli.h"

int cli_tfconfig(int argc, char **argv) {
    cli_option opts[] = {API_COORDINATOR_OPTIONS};
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (api_parse_args("tfconfig", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help(
            "tfconfig", "NAME TYPE INDEX [options]",
            "Prints the TF_CONFIG of one task of a running job exactly as the "
            "coordinator hands\nit to the task, e.g. `psflow tfconfig fmnist-mlp "
            "worker 0`. A job still waiting for\nagents has none yet (exit 1)." API_TOKEN_NOTE,
            opts, n_opts);
        return 0;
    }
    if (args.n_positional != 3)
        return api_usage_error("tfconfig", "expected NAME TYPE INDEX");
    const char *name = args.positional[0], *type = args.positional[1], *index = args.positional[2];
    char *end;
    long idx = strtol(index, &end, 10);
    if (!*index || *end || idx < 0 || idx > 1000000)
        return api_usage_error("tfconfig", "INDEX must be a task index (0, 1, ...)");
    api_client c;
    int rc = api_client_init(&c, "tfconfig", opts, n_opts, true);
    if (rc)
        return rc;
    char escaped[512], etype[256], path[900], not_found[400];
    if (!api_url_escape(name, escaped, sizeof escaped) ||
        !api_url_escape(type, etype, sizeof etype))
        return api_usage_error("tfconfig", "NAME or TYPE too long");
    snprintf(path, sizeof path, "/api/v1/jobs/%s/tf_config?type=%s&index=%ld", escaped, etype, idx);
    pf_http_response r;
    if ((rc = api_call(&c, "GET", path, NULL, 0, API_REQUEST_TIMEOUT, &r)))
        return rc;
    if (r.status == 200) {
        fwrite(r.body, 1, r.len, stdout);
        fputc('\n', stdout);
    } else if (r.status == 409) {
        char prefix[400];
        snprintf(prefix, sizeof prefix, "job %s has no TF_CONFIG yet", name);
        api_print_problem(&c, prefix, &r);
        rc = 1;
    } else {
        /* A 404 is a missing job or a missing task: the coordinator's detail says which. */
        snprintf(not_found, sizeof not_found, "job %s has no task %s %ld", name, type, idx);
        json_t *doc = api_body_json(&r);
        rc = api_report_error(&c, &r, api_jstr(doc, "detail") ? NULL : not_found);
        json_decref(doc);
    }
    pf_http_response_deinit(&r);
    return rc;
}
