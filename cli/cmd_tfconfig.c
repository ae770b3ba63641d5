/* cmd_tfconfig.c - `psflow tfconfig NAME TYPE INDEX`: one task's TF_CONFIG
 * (GET /api/v1/jobs/{name}/tf_config). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/api.h"
#include "cli/cli_internal.h"
#include "cli/command.h"

int cli_tfconfig(const cli_command *cmd, int argc, char **argv) {
    cli_run run;
    if (!cli_command_start(cmd, NULL, 0, argc, argv, &run))
        return run.exit_code;
    const char *name = run.args.positional[0], *type = run.args.positional[1];
    const char *index = run.args.positional[2];
    char *end;
    long idx = strtol(index, &end, 10);
    if (!*index || *end || idx < 0 || idx > 1000000)
        return cli_usage_error("tfconfig", "INDEX must be a task index (0, 1, ...)");
    api_client *c = &run.client; /* set up after INDEX is checked */
    int rc = api_client_init(c, "tfconfig", run.table, run.n_table, true);
    if (rc)
        return rc;
    char escaped[512], etype[256], path[900], not_found[400];
    if (!api_url_escape(name, escaped, sizeof escaped) ||
        !api_url_escape(type, etype, sizeof etype))
        return cli_usage_error("tfconfig", "NAME or TYPE too long");
    snprintf(path, sizeof path, "/api/v1/jobs/%s/tf_config?type=%s&index=%ld", escaped, etype, idx);
    pf_http_response r;
    if ((rc = api_call(c, "GET", path, NULL, 0, API_REQUEST_TIMEOUT, &r)))
        return rc;
    if (r.status == 200) {
        fwrite(r.body, 1, r.len, stdout);
        fputc('\n', stdout);
    } else if (r.status == 409) {
        char prefix[400];
        snprintf(prefix, sizeof prefix, "job %s has no TF_CONFIG yet", name);
        api_print_problem(c, prefix, &r);
        rc = 1;
    } else {
        /* A 404 is a missing job or a missing task: the coordinator's detail says which. */
        snprintf(not_found, sizeof not_found, "job %s has no task %s %ld", name, type, idx);
        json_t *doc = api_body_json(&r);
        rc = api_report_error(c, &r, api_jstr(doc, "detail") ? NULL : not_found);
        json_decref(doc);
    }
    pf_http_response_deinit(&r);
    return rc;
}
