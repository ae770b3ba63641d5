/* cmd_evaluator.c - `psflow evaluator`: the evaluator task of a static job (TF_CONFIG task
 * type evaluator): evaluates each new complete checkpoint on the test set (evaluator.h). */
#include <stdio.h>
#include <string.h>

#include "agent/reporter.h"
#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/node.h"
#include "cli/options.h"
#include "worker/evaluator.h"

/* Loads --job and TF_CONFIG for the evaluator task. Returns 0, or an exit code after
 * printing why (n then holds nothing). */
static int load_evaluator_task(const char *job, node *n) {
    int rc = node_load("evaluator", job, false, n);
    if (rc)
        return rc;
    if (strcmp(n->type, "evaluator") != 0) {
        fprintf(stderr,
                "psflow evaluator: TF_CONFIG says this task's type is %s; run 'psflow %s'\n",
                n->type, !strcmp(n->type, "chief") ? "worker" : n->type);
        rc = PF_EX_USAGE;
    }
    if (rc || (rc = node_check_fit("evaluator", &n->spec, "worker", n->index, 0)))
        node_deinit(n);
    return rc;
}

int cli_evaluator(const cli_command *cmd, int argc, char **argv) {
    const char *job, *coordinator;
    int format;
    long idle;
    evaluator_options eo = {0};
    cli_option opts[] = {
        CLI_TEXT("job", "FILE",
                 "the job spec (JSON); the task comes from TF_CONFIG (type evaluator)", NULL, &job),
        CLI_TEXT("checkpoint-dir", "DIR",
                 "checkpoint root, shared with the job's ps tasks [./checkpoints]", "./checkpoints",
                 &eo.checkpoint_dir),
        CLI_CHOICE("output", "FORMAT", "final result: text (default) or json", "text|json",
                   &format),
        CLI_LONG("idle-timeout", "S",
                 "give up (exit 69) when no newer checkpoint appears for S seconds "
                 "[training.stall_timeout_secs + checkpoint.every_secs; none when every_secs is 0]",
                 1, 604800 * 2, 0, &idle),
        CLI_TEXT("coordinator", "URL",
                 "report the eval_loss / eval_accuracy series to this coordinator", NULL,
                 &coordinator),
        CLI_OPT("ca-file", "FILE", "trust only this PEM CA for an https:// coordinator"),
        CLI_TOKEN_FILE_OPTION,
        CLI_AGENT_TOKEN_FILE_OPTION,
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    node n;
    int rc = load_evaluator_task(job, &n);
    if (rc)
        return rc;
    eo.spec = &n.spec;
    eo.idle_timeout = (double)idle;
    eo.json = format == 1;
    rc = node_reporter_start("evaluator", run.table, run.n_table, coordinator, n.spec.name,
                             "evaluator", &eo.report, &eo.report_ctx);
    if (!rc) {
        pf_error err;
        pf_status st = evaluator_run(&eo, &err);
        if (st != PF_OK)
            fprintf(stderr, "psflow evaluator: %s\n", err.message);
        rc = st == PF_OK ? 0 : pf_exit_code(st);
        agent_reporter_destroy(eo.report_ctx, 5.0);
    }
    node_deinit(&n);
    return rc;
}
