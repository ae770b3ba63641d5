/* main.c - the psflow executable: one program, its role chosen by the subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"train", cli_train, "train a job in this one process (no network)"},
    {"coordinator", cli_coordinator, "run the coordinator: job API, dashboard, SQLite state"},
    {"up", cli_up, "start a local cluster: coordinator + ps and worker agents"},
    {"ps", cli_ps, "run a parameter-server task (TF_CONFIG) or agent (--coordinator)"},
    {"worker", cli_worker, "run a training task (TF_CONFIG) or agent (--coordinator)"},
    {"evaluator", cli_evaluator, "evaluate each new checkpoint of a job (TF_CONFIG evaluator)"},
    {"submit", cli_submit, "submit a job spec to the coordinator (--wait: follow it)"},
    {"list", cli_list, "list the coordinator's jobs"},
    {"get", cli_get_job, "show one job: status, conditions, tasks"},
    {"watch", cli_watch, "print the coordinator's live events"},
    {"cancel", cli_cancel, "cancel a job"},
    {"tfconfig", cli_tfconfig, "print the TF_CONFIG of one task of a job"},
    {"health", cli_health, "check that the coordinator is ready (exit 0 or 69)"},
    {"export", cli_export, "merge a checkpoint's shards into one safetensors file"},
    {"version", cli_version, "print the version"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: psflow <command> [options]\n\n"
                 "psflow runs data-parallel training in the parameter-server pattern.\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nRun 'psflow <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return PF_EX_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version"))
        return cli_version(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "psflow: unknown command '%s' (see 'psflow --help')\n", argv[1]);
    return PF_EX_USAGE;
}
