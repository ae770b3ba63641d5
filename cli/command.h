/* command.h - the prologue every subcommand shares. A command states its options as a table
 * (options.h: name, kind, default, help line, where the value goes; each option's twin
 * PSFLOW_NAME in the environment), its usage and description, which positional arguments
 * it takes and whether it talks to the coordinator's API; cli_command_start() parses argv
 * and the environment, prints --help, checks and stores every typed option, reports the
 * first error as "psflow CMD: ..." and sets up the API client. Single-threaded.
 */
#ifndef PSFLOW_CLI_COMMAND_H
#define PSFLOW_CLI_COMMAND_H

#include <stdbool.h>

#include "cli/api.h"
#include "cli/options.h"

#define CLI_ANY_ARGS    (-1) /* max_args: positional arguments are not checked */
#define CLI_MAX_OPTIONS 32   /* rows of a command's table, the client's included */

/* Whether a command talks to the coordinator's API. */
typedef enum cli_client_mode {
    CLI_NO_CLIENT,
    CLI_CLIENT,          /* with the API token (PSFLOW_TOKEN, --token-file) */
    CLI_CLIENT_NO_TOKEN, /* without it (psflow health) */
    CLI_CLIENT_LATER,    /* the options only: the command calls api_client_init() itself */
} cli_client_mode;

/* What a command is: a row of the table in main.c, the fields left out being 0, NULL or
 * false. */
typedef struct cli_command cli_command;
struct cli_command {
    const char *name;        /* the subcommand: "train" */
    const char *summary;     /* its line in `psflow --help` */
    const char *usage;       /* after "usage: psflow NAME " in its --help */
    const char *description; /* the help's paragraph */
    int min_args, max_args;  /* positional arguments; max CLI_ANY_ARGS: any number */
    const char *args_error;  /* "expected one job NAME"; NULL: "unexpected argument 'X'" */
    bool short_output;       /* "-o" is --output, which is checked before the arguments */
    /* A client's options start with the coordinator's (API_COORDINATOR_OPTIONS), and
     * cli_run.client is set up from them after every other check. */
    cli_client_mode client_mode;
    int (*run)(const cli_command *cmd, int argc, char **argv); /* cli_internal.h */
};

/* What cli_command_start() found. */
typedef struct cli_run {
    cli_args args;
    api_client client;                 /* a client command's */
    int exit_code;                     /* when cli_command_start() returns false */
    cli_option table[CLI_MAX_OPTIONS]; /* the options as parsed: for cli_get() */
    int n_table;
} cli_run;

/* Parses argv[1..argc) (argv[0] is the subcommand) and the environment into run->table
 * (the client's options, then opts[0..n_opts), the command's own in help order) and
 * run->args, then in this order: --help (printed), -o/--output when short_output, the count
 * of positional arguments, every typed option in table order, the client. Returns true when
 * the command should run; false with run->exit_code set (0 after --help) after printing
 * why. */
bool cli_command_start(const cli_command *cmd, const cli_option *opts, int n_opts, int argc,
                       char **argv, cli_run *run);

#endif
