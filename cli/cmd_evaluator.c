/* cmd_evaluator.c - `psflow evaluator`: the evaluator task of a static job (TF_CONFIG task
 * type evaluator): evaluates each new complete checkpoint on the test set (evaluator.h). */
#include <stdio.h>
#include <string.h>

#include "agent/reporter.h"
#include "cli/cli.h"
#include "cli/node.h"
#include "cli/options.h"
#include "worker/evaluator.h"

int cli_evaluator(int argc, char **argv) {
    cli_option opts[] = {
        {"job", "FILE", "the job spec (JSON); the task comes from TF_CONFIG (type evaluator)",
         NULL},
        {"checkpoint-dir", "DIR", "checkpoint root, shared with the job's ps tasks [./checkpoints]",
         NULL},
        {"output", "FORMAT", "final result: text (default) or json", NULL},
        {"idle-timeout", "S",
         "give up (exit 69) when no newer checkpoint appears for S seconds "
         "[training.stall_timeout_secs + checkpoint.every_secs; none when every_secs is 0]",
         NULL},
        {"coordinator", "URL", "report the eval_loss / eval_accuracy series to this coordinator",
         NULL},
        {"ca-file", "FILE", "trust only this PEM CA for an https:// coordinator", NULL},
        CLI_TOKEN_FILE_OPTION,
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (cli_parse("evaluator", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help("evaluator", "--job FILE [options]",
                       "Runs the evaluator task of a job (TF_CONFIG task type evaluator, as TF "
                       "Estimator's\nevaluator): it never trains and never connects to the ps "
                       "tasks. Each new complete\ncheckpoint under --checkpoint-dir is merged "
                       "(CRC-32s verified), evaluated on the\ntest set and logged; exits 0 "
                       "after the checkpoint of training.max_steps, printing\nthe final "
                       "evaluation.",
                       opts, n_opts);
        return 0;
    }
    long idle;
    if (cli_get_long("evaluator", opts, n_opts, "idle-timeout", 1, 604800 * 2, 0, &idle))
        return PF_EX_USAGE;
    const char *output = cli_get(opts, n_opts, "output");
    if (output && strcmp(output, "json") != 0 && strcmp(output, "text") != 0) {
        fprintf(stderr, "psflow evaluator: --output must be text or json, got '%s'\n", output);
        return PF_EX_USAGE;
    }
    node n;
    int rc = node_load("evaluator", cli_get(opts, n_opts, "job"), &n);
    if (rc)
        return rc;
    if (strcmp(n.type, "evaluator") != 0) {
        fprintf(stderr, "psflow evaluator: TF_CONFIG says this task is a %s; run 'psflow %s'\n",
                n.type, !strcmp(n.type, "chief") ? "worker" : n.type);
        node_deinit(&n);
        return PF_EX_USAGE;
    }
    if ((rc = node_check_fit("evaluator", &n.spec, "worker", n.index, 0))) {
        node_deinit(&n);
        return rc;
    }
    const char *ckpt = cli_get(opts, n_opts, "checkpoint-dir");
    evaluator_options eo = {.spec = &n.spec,
                            .checkpoint_dir = ckpt ? ckpt : "./checkpoints",
                            .idle_timeout = (double)idle,
                            .json = output && !strcmp(output, "json")};
    agent_reporter *rep = NULL;
    const char *coordinator = cli_get(opts, n_opts, "coordinator");
    if (coordinator) {
        char token[512];
        rc = cli_token("evaluator", token, sizeof token);
        if (rc || (rc = cli_use_ca_file("evaluator", opts, n_opts))) {
            node_deinit(&n);
            return rc;
        }
        rep = agent_reporter_create(coordinator, token, n.spec.name, "evaluator");
        eo.report = agent_reporter_add;
        eo.report_ctx = rep;
    }
    pf_error err;
    pf_status st = evaluator_run(&eo, &err);
    if (st != PF_OK)
        fprintf(stderr, "psflow evaluator: %s\n", err.message);
    agent_reporter_destroy(rep, 5.0);
    node_deinit(&n);
    return st == PF_OK ? 0 : pf_exit_code(st);
}
