/* main.c - the psflow executable: one program, its role chosen by the subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_internal.h"
#include "cli/command.h"
#include "psflow/backend.h"
#include "psflow/exit_code.h"

/* Every subcommand: its summary here, its help and argument rule (command.h). */
static const cli_command commands[] = {
    {
        .name = "train",
        .summary = "train a job in this one process (no network)",
        .usage = "JOB.json [options]",
        .description = "Trains the job described by JOB.json in this one process, evaluates it "
                       "on the\ntest set and prints the result. Exit codes: 0 done, 64 usage, "
                       "65 invalid spec\nor data, or a NaN/infinite loss or value (training "
                       "stops at that step\nwhatever training.on_nonfinite says: one process "
                       "has no checkpoint to roll\nback to), 66 unreadable input, 69 device "
                       "unavailable, 73 cannot write --save.",
        .min_args = 1,
        .max_args = 1,
        .args_error = "expected one job spec file",
        .run = cli_train,
    },
    {
        .name = "coordinator",
        .summary = "run the coordinator: job API, dashboard, SQLite state",
        .usage = "[options]",
        .description = "Serves the job API (api/rest.md), the live event stream and the "
                       "dashboard, and keeps\nmembership and job state in SQLite. Agents "
                       "(psflow ps|worker --coordinator URL) register\nwith it and are assigned "
                       "tasks. Set PSFLOW_TOKEN or PSFLOW_TOKEN_FILE to require a\nbearer token "
                       "on the API; without one it listens only on loopback (or with\n"
                       "--insecure) and warns. Agents authenticate with the agent token, "
                       "always required\non their routes and good for nothing else: the file "
                       "it names at start (agent-token\nbeside --db unless "
                       "--agent-token-file or PSFLOW_AGENT_TOKEN).",
        .run = cli_coordinator,
    },
    {
        .name = "up",
        .summary = "start a local cluster: coordinator + ps and worker agents",
        .usage = "[options]",
        .description = "Starts a local cluster on 127.0.0.1: the coordinator (API and dashboard) "
                       "and N ps and M\nworker agents, each a psflow process logging to "
                       "DIR/logs/. Prints the dashboard URL and\nhow to submit a job; Ctrl-C "
                       "stops them all.",
        .max_args = CLI_ANY_ARGS,
        .run = cli_up,
    },
    {
        .name = "ps",
        .summary = "run a parameter-server task (TF_CONFIG) or agent (--coordinator)",
        .usage = "--job FILE [options]  |  --coordinator URL [options]",
        .description = "Runs a parameter-server task. Static mode (--job): the task (type ps, "
                       "index) and the\ncluster come from the TF_CONFIG environment variable, "
                       "as Kubeflow's TFJob operator\nsets it; it restores the job's newest "
                       "complete checkpoint, serves its shards until the\nchief's final "
                       "checkpoint, then exits 0. Managed mode (--coordinator without --job):\n"
                       "registers as an idle ps agent, runs the ps tasks it is assigned (listening "
                       "on --listen,\n[0.0.0.0 and the --advertise port, 2222]) and returns to "
                       "the pool after each job;\nSIGTERM stops it and deregisters.",
        .max_args = CLI_ANY_ARGS,
        .run = cli_ps,
    },
    {
        .name = "worker",
        .summary = "run a training task (TF_CONFIG) or agent (--coordinator)",
        .usage = "--job FILE [options]  |  --coordinator URL [options]",
        .description = "Runs a training task (TF_CONFIG task type worker or chief; worker 0 is "
                       "the chief\nwhen the cluster has no chief task). The chief evaluates, "
                       "checkpoints and, at\ntraining.max_steps, ends the job. Managed mode "
                       "(--coordinator without --job): registers\nas an idle worker agent and "
                       "runs the chief or worker tasks it is assigned; SIGTERM\nfinishes the "
                       "current step, stops and deregisters.",
        .max_args = CLI_ANY_ARGS,
        .run = cli_worker,
    },
    {
        .name = "evaluator",
        .summary = "evaluate each new checkpoint of a job (TF_CONFIG evaluator)",
        .usage = "--job FILE [options]",
        .description = "Runs the evaluator task of a job (TF_CONFIG task type evaluator, as TF "
                       "Estimator's\nevaluator): it never trains and never connects to the ps "
                       "tasks. Each new complete\ncheckpoint under --checkpoint-dir is merged "
                       "(CRC-32s verified), evaluated on the\ntest set and logged; exits 0 "
                       "after the checkpoint of training.max_steps, printing\nthe final "
                       "evaluation.",
        .max_args = CLI_ANY_ARGS,
        .run = cli_evaluator,
    },
    {
        .name = "key",
        .summary = "print one static task's data-plane key (for --task-key-file)",
        .usage = "--job FILE --task TYPE:INDEX [options]",
        .description = "Prints the data-plane key of one chief, worker or evaluator task of a "
                       "static job\n(64 hex digits), derived from PSFLOW_TOKEN or "
                       "PSFLOW_TOKEN_FILE and the job's name.\nGive it to that task alone "
                       "(psflow worker --task-key-file FILE) instead of the\ntoken: its key "
                       "proves only its own role and index, never the chief's. The ps\ntasks "
                       "keep the token (docs/security.md). E.g. `psflow key --job job.json "
                       "--task\nworker:1 >worker-1.key`.",
        .args_error = "takes no arguments",
        .run = cli_key,
    },
    {
        .name = "plan",
        .summary = "show a job spec's placement and the memory of each task (offline)",
        .usage = "FILE [-o json]",
        .description = "Reads and checks the job spec in FILE as the coordinator does on "
                       "submission, without\none, and prints how the ps tasks place its "
                       "variables (each ps task's shards and\nbytes, the imbalance: the largest "
                       "ps task's bytes over the mean) and the memory\neach ps task and each "
                       "training task needs, the figures the coordinator's admission\ncompares "
                       "with its agents' memory. Exit codes: 0 shown, 64 usage, 65 invalid "
                       "spec\n(the message starts with the field's JSON pointer), 66 FILE "
                       "unreadable.",
        .min_args = 1,
        .max_args = 1,
        .args_error = "expected one job spec FILE",
        .short_output = true,
        .run = cli_plan,
    },
    {
        .name = "submit",
        .summary = "submit a job spec to the coordinator (--wait: follow it)",
        .usage = "FILE [--wait] [options]",
        .description = "Submits the job spec in FILE (JSON, api/schemas/job.schema.json) to the "
                       "coordinator. Submitting\nthe same spec again is safe: the existing job "
                       "is reported. With --wait, shows a\nprogress line until the job ends, "
                       "then its result.\n\nExit codes: 0 created (with --wait: succeeded), 1 "
                       "failed or name taken by another spec,\n64 usage, 65 spec rejected, 66 "
                       "FILE unreadable, 69 coordinator unreachable, 77 token\nmissing or "
                       "rejected." API_TOKEN_NOTE,
        .min_args = 1,
        .max_args = 1,
        .args_error = "expected one job spec FILE",
        .client_mode = CLI_CLIENT,
        .run = cli_submit,
    },
    {
        .name = "list",
        .summary = "list the coordinator's jobs",
        .usage = "[-o json] [options]",
        .description =
            "Lists the coordinator's jobs, newest first: phase, global step, last "
            "loss, test\naccuracy, workers and ps tasks ready/desired, and age." API_TOKEN_NOTE,
        .args_error = "takes no arguments",
        .short_output = true,
        .client_mode = CLI_CLIENT,
        .run = cli_list,
    },
    {
        .name = "get",
        .summary = "show one job: status, conditions, tasks",
        .usage = "NAME [-o json] [options]",
        .description = "Shows one job: phase and message, conditions with reasons and times, "
                       "global step,\nloss, accuracy, replica statuses and its tasks. Exit "
                       "codes: 0 shown, 1 no such job,\n64 usage, 69 coordinator unreachable, 77 "
                       "token missing or rejected." API_TOKEN_NOTE,
        .min_args = 1,
        .max_args = 1,
        .args_error = "expected one job NAME",
        .short_output = true,
        .client_mode = CLI_CLIENT,
        .run = cli_get_job,
    },
    {
        .name = "watch",
        .summary = "print the coordinator's live events",
        .usage = "[NAME] [options]",
        .description =
            "Prints the coordinator's live events, one line each: time (the event's own, "
            "or when it\narrived), job, kind (job, task, metric, node, checkpoint, "
            "log) and a summary; with\nNAME that job's and the cluster's (agents registering, "
            "lost). Reconnects without\nlosing events when the stream drops. Ctrl-C ends "
            "it." API_TOKEN_NOTE,
        .max_args = 1,
        .args_error = "expected at most one job NAME",
        .client_mode = CLI_CLIENT,
        .run = cli_watch,
    },
    {
        .name = "cancel",
        .summary = "cancel a job",
        .usage = "NAME [options]",
        .description = "Cancels a job: it ends in phase Failed with reason Cancelled and its "
                       "tasks are\nstopped. Checkpoints are kept. Prints the resulting "
                       "phase." API_TOKEN_NOTE,
        .min_args = 1,
        .max_args = 1,
        .args_error = "expected one job NAME",
        .client_mode = CLI_CLIENT,
        .run = cli_cancel,
    },
    {
        .name = "scale",
        .summary = "change a job's worker or ps count (--wait: until they run)",
        .usage = "NAME --workers N [--ps N] [--wait] [-o json] [options]",
        .description =
            "Sets a job's worker count (--workers), parameter-server count (--ps) or both in "
            "one change\n(PATCH replicas). A running job takes new workers live; a new ps "
            "count restarts it from\nits newest checkpoint. Prints the change, e.g. `job "
            "fmnist-mlp: workers 2 -> 3 (Running)`.\nWith --wait, reads the job until it runs "
            "with exactly that many of each, all running.\n\nExit codes: 0 done (with --wait: "
            "running, or the job succeeded), 1 refused, no such\njob or (--wait) the job failed, "
            "64 usage, 69 coordinator unreachable, 77 token missing\nor rejected." API_TOKEN_NOTE,
        .min_args = 1,
        .max_args = 1,
        .args_error = "expected one job NAME",
        .short_output = true,
        .client_mode = CLI_CLIENT,
        .run = cli_scale,
    },
    {
        .name = "suspend",
        .summary = "suspend a job: stop its tasks, free its agents",
        .usage = "NAME [--wait] [-o json] [options]",
        .description =
            "Suspends a job: its tasks stop and its agents return to the pool; `psflow resume` "
            "starts\nit again from its newest checkpoint. With --wait, reads the job until it "
            "is Suspended.\n\nExit codes: 0 done, 1 refused (the job has finished), no such job "
            "or (--wait) the job\nfailed, 64 usage, 69 coordinator unreachable, 77 token missing "
            "or rejected." API_TOKEN_NOTE,
        .min_args = 1,
        .max_args = 1,
        .args_error = "expected one job NAME",
        .short_output = true,
        .client_mode = CLI_CLIENT,
        .run = cli_suspend,
    },
    {
        .name = "resume",
        .summary = "resume a suspended job",
        .usage = "NAME [--wait] [-o json] [options]",
        .description =
            "Resumes a suspended job: it starts again, from its newest checkpoint, once agents "
            "are\nfree. With --wait, reads the job until it is Running (or it ends).\n\nExit "
            "codes: 0 done (with --wait: running, or the job succeeded), 1 refused, no such\njob "
            "or (--wait) the job failed, 64 usage, 69 coordinator unreachable, 77 token "
            "missing\nor rejected." API_TOKEN_NOTE,
        .min_args = 1,
        .max_args = 1,
        .args_error = "expected one job NAME",
        .short_output = true,
        .client_mode = CLI_CLIENT,
        .run = cli_resume,
    },
    {
        .name = "delete",
        .summary = "cancel a job and delete its record (checkpoints kept)",
        .usage = "NAME [--wait] [options]",
        .description =
            "Cancels a job and deletes its record: `psflow get` no longer finds it and its "
            "name is free.\nIts checkpoints on disk are kept. With --wait, reads until the "
            "coordinator no longer\nshows it.\n\nExit codes: 0 deleted, 1 no such job, 64 usage, "
            "69 coordinator unreachable, 77 token\nmissing or rejected." API_TOKEN_NOTE,
        .min_args = 1,
        .max_args = 1,
        .args_error = "expected one job NAME",
        .client_mode = CLI_CLIENT,
        .run = cli_delete,
    },
    {
        .name = "tfconfig",
        .summary = "print the TF_CONFIG of one task of a job",
        .usage = "NAME TYPE INDEX [options]",
        .description =
            "Prints the TF_CONFIG of one task of a running job exactly as the "
            "coordinator hands\nit to the task, e.g. `psflow tfconfig fmnist-mlp "
            "worker 0`. A job still waiting for\nagents has none yet (exit 1)." API_TOKEN_NOTE,
        .min_args = 3,
        .max_args = 3,
        .args_error = "expected NAME TYPE INDEX",
        .client_mode = CLI_CLIENT_LATER,
        .run = cli_tfconfig,
    },
    {
        .name = "health",
        .summary = "check that the coordinator is ready (exit 0 or 69)",
        .usage = "[options]",
        .description = "Asks the coordinator's /readyz (2 s at most). Prints ok and exits 0 "
                       "when it is\nready, else prints why and exits 69. Meant for container "
                       "health checks.",
        .args_error = "takes no arguments",
        .client_mode = CLI_CLIENT_NO_TOKEN,
        .run = cli_health,
    },
    {
        .name = "serve",
        .summary = "answer predict requests with a job's newest checkpoint (TF Serving REST)",
        .usage = "--model NAME | --job FILE  [--checkpoint-dir DIR] [--listen HOST:PORT] [options]",
        .description = "Serves the newest verified checkpoint of a job (under DIR/<job>; the "
                       "model is the job\nspec the checkpoint records, or --job FILE's) over "
                       "TensorFlow Serving's REST API:\nPOST "
                       "/v1/models/<job>:predict with {\"instances\": [...]} answers\n"
                       "{\"model_version\": \"STEP\", \"predictions\": [...]}; GET "
                       "/v1/models/<job> gives the\nversion status, /metrics Prometheus "
                       "figures. A newer complete checkpoint is loaded\nbeside the serving "
                       "one and switched in without failing a request; one that fails\nits "
                       "CRC-32s is refused and logged. Concurrent requests are batched "
                       "(docs/serving.md).\nExit codes: 0 stopped by SIGTERM/SIGINT, 64 usage, "
                       "65 invalid spec, 66 unreadable\nspec, 69 cannot listen.",
        .args_error = "takes no arguments (the job spec is --job FILE)",
        .run = cli_serve,
    },
    {
        .name = "export",
        .summary = "merge a checkpoint's shards into one safetensors file",
        .usage = "DIR --out FILE",
        .description = "Merges the parameter-server shards of a checkpoint into one safetensors "
                       "file,\nvariables under their TensorFlow names (dense_0/kernel [in, out], "
                       "dense_0/bias\n[out], ...). DIR is a step-<N> folder with a complete "
                       "manifest.json, or a job's\ncheckpoint folder (its newest complete "
                       "checkpoint). Exit codes: 0 done, 64 usage,\n65 corrupt checkpoint, 66 no "
                       "complete checkpoint or unreadable input, 73 cannot\nwrite --out.",
        .min_args = 1,
        .max_args = 1,
        .args_error = "expected one checkpoint folder",
        .run = cli_export,
    },
    {
        .name = "data",
        .summary = "generate and inspect training data (Criteo layout), print a job's examples",
        .usage = "gen criteo --rows N --out DIR [options]  |  inspect FILE  |  stats FILE... "
                 "[--out FILE]  |  examples JOB.json [--split test|train] [--limit N]",
        .description =
            "gen criteo: writes N click-log rows in the Criteo layout (label, 13 "
            "integer and 26\ncategorical columns, tab-separated) over --files files "
            "in DIR, drawn from a known\nmodel with numeric effects and pairwise "
            "interactions of categorical columns, and\nprints the Bayes-optimal AUC "
            "of those rows (DIR/truth.json says how they were drawn).\ninspect: reads "
            "a Criteo-layout file, plain or gzip, of any size in fixed memory, and\n"
            "prints its rows, click rate and each column's fill, range and distinct "
            "ids; every\nbad line is named by file, line and column. stats: reads up to 7 "
            "files and writes as\nJSON what the numeric transforms need (each integer "
            "column's log1p mean and\nstandard deviation, range and fill) and each "
            "categorical column's distinct ids. examples: reads a job's test (or train) set "
            "as its\nworkers do and prints each example as the model reads it, one JSON line "
            "{\"label\",\n\"instance\"}: the flat instance psflow serve takes.\nExit codes: "
            "0 done, 64 usage, 65 bad lines or no rows, 66 unreadable input, 73\ncannot write "
            "the output.",
        .min_args = 1,
        .max_args = 8,
        .args_error = "expected 'gen criteo', 'inspect FILE', 'stats FILE...' (7 files at most) "
                      "or 'examples JOB.json'",
        .run = cli_data,
    },
    {
        .name = "version",
        .summary = "print the version",
        .run = cli_version,
    },
};

static void usage(FILE *out) {
    fprintf(out, "usage: psflow <command> [options]\n\n"
                 "psflow runs data-parallel training in the parameter-server pattern.\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nRun 'psflow <command> --help' for a command's options.\n");
}

/* OpenBLAS starts a helper thread per core when it loads, before main, and each maps a
 * 128 MiB buffer, retrying forever when RLIMIT_AS or RLIMIT_DATA refuses it: the process
 * would spin with no word, and not even exit. Where a limit leaves no room, psflow starts
 * again with one BLAS thread (no helpers), and a task that trains then says there is not
 * enough memory (pf_backend_openblas_check_room) instead of spinning. */
static void fit_blas_to_limits(char **argv) {
    if (getenv("OPENBLAS_NUM_THREADS") || pf_backend_openblas_pool_fits())
        return;
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0)
        execv("/proc/self/exe", argv); /* returns only on failure: carry on as we are */
}

int main(int argc, char **argv) {
    fit_blas_to_limits(argv);
    if (argc < 2) {
        usage(stderr);
        return PF_EX_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    const char *name = strcmp(argv[1], "--version") ? argv[1] : "version";
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name))
            return commands[i].run(&commands[i], argc - 1, argv + 1);
    fprintf(stderr, "psflow: unknown command '%s' (see 'psflow --help')\n", argv[1]);
    return PF_EX_USAGE;
}
