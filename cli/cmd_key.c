/* cmd_key.c - `psflow key --job FILE --task TYPE:INDEX`: the data-plane key of one task of a
 * static job, derived from the token, to hand that task alone (psflow worker
 * --task-key-file; docs/security.md "The data plane"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/node.h"
#include "cli/options.h"
#include "psflow/spec.h"
#include "psflow/wire_auth.h"

/* Parses "TYPE:INDEX" into type[cap] and *index; 0, or -1 when it is not that shape. */
static int parse_task(const char *text, char *type, size_t cap, int *index) {
    const char *colon = text ? strchr(text, ':') : NULL;
    if (!colon || colon == text || (size_t)(colon - text) >= cap)
        return -1;
    char *end;
    long idx = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || idx < 0 || idx >= PF_MAX_REPLICAS)
        return -1;
    memcpy(type, text, (size_t)(colon - text));
    type[colon - text] = '\0';
    *index = (int)idx;
    return 0;
}

/* How many tasks of type the job has; -1 for a type that proves no task key. */
static int tasks_of(const pf_job_spec *spec, const char *type) {
    if (!strcmp(type, "chief"))
        return spec->replicas.chief;
    if (!strcmp(type, "worker"))
        return spec->replicas.worker;
    if (!strcmp(type, "evaluator"))
        return spec->replicas.evaluator;
    if (!strcmp(type, "reader"))
        return pf_serving_readers(&spec->serving);
    return -1;
}

int cli_key(const cli_command *cmd, int argc, char **argv) {
    cli_run run;
    const char *job = NULL, *task = NULL;
    cli_option opts[] = {
        CLI_TEXT("job", "FILE", "the job spec (JSON), as given to the job's tasks", NULL, &job),
        CLI_TEXT("task", "TYPE:INDEX",
                 "the task as its TF_CONFIG names it: chief:0, worker:N or evaluator:0; reader:N "
                 "for psflow serve --ps",
                 NULL, &task),
        CLI_TOKEN_FILE_OPTION,
    };
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    char type[16];
    int index;
    if (!job || !task)
        return cli_usage_error("key", "--job FILE and --task TYPE:INDEX are required");
    if (parse_task(task, type, sizeof type, &index) != 0)
        return cli_usage_error("key", "--task must be TYPE:INDEX, e.g. worker:1");
    pf_job_spec spec;
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_job_spec_load(job, &spec, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow key: %s: %s\n", job, err.message);
        return st == PF_ERR_IO ? PF_EX_NOINPUT : PF_EX_DATAERR;
    }
    int n = tasks_of(&spec, type), rc = 0;
    uint8_t job_key[PF_WIRE_KEY_SIZE], key[PF_WIRE_KEY_SIZE];
    char hex[PF_WIRE_KEY_HEX_SIZE];
    int has = 0;
    if (n < 0) {
        fprintf(stderr, "psflow key: %s: %s\n", type,
                !strcmp(type, "ps") ? "a ps holds the job key itself: give it PSFLOW_TOKEN"
                                    : "TYPE must be chief, worker, evaluator or reader");
        rc = PF_EX_USAGE;
    } else if (index >= n) {
        fprintf(stderr, "psflow key: job %s has %d %s task%s: no %s:%d\n", spec.name, n, type,
                n == 1 ? "" : "s", type, index);
        rc = PF_EX_USAGE;
    } else if ((has = node_job_key("key", spec.name, job_key)) <= 0) {
        if (has == 0)
            fprintf(stderr, "psflow key: no token: set PSFLOW_TOKEN or PSFLOW_TOKEN_FILE (or "
                            "--token-file), as for the job's ps tasks\n");
        rc = has == 0 ? PF_EX_USAGE : -has;
    } else {
        pf_wire_task_key_for(job_key, type, index, spec.replicas.chief > 0, key);
        pf_wire_key_hex(key, hex);
        printf("%s\n", hex);
        pf_wire_key_clear(hex, sizeof hex);
        pf_wire_key_clear(key, sizeof key);
    }
    pf_wire_key_clear(job_key, sizeof job_key);
    pf_job_spec_deinit(&spec);
    return rc;
}
