/* command.c - the shared prologue of the subcommands (see command.h). */
#include "cli/command.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli_internal.h"

/* run->table: the client's options, then the command's own. */
static void build_table(const cli_command *c, const cli_option *opts, int n_opts, cli_run *run) {
    static const cli_option client_opts[] = {API_COORDINATOR_OPTIONS};
    run->n_table = 0;
    for (int i = 0; c->client_mode != CLI_NO_CLIENT && i < CLI_COUNT(client_opts); i++)
        run->table[run->n_table++] = client_opts[i];
    assert(run->n_table + n_opts <= CLI_MAX_OPTIONS);
    for (int i = 0; i < n_opts; i++)
        run->table[run->n_table++] = opts[i];
}

/* cli_parse, with "-o" taken as --output when the command has that short form. */
static int parse(const cli_command *c, cli_run *run, int argc, char **argv) {
    if (!c->short_output)
        return cli_parse(c->name, argc, argv, run->table, run->n_table, &run->args);
    char *copy[64];
    if (argc > (int)(sizeof copy / sizeof copy[0])) {
        fprintf(stderr, "psflow %s: too many arguments\n", c->name);
        return -1;
    }
    for (int i = 0; i < argc; i++)
        copy[i] = strcmp(argv[i], "-o") ? argv[i] : "--output";
    return cli_parse(c->name, argc, copy, run->table, run->n_table, &run->args);
}

static int check_arg_count(const cli_command *c, const cli_args *args) {
    int n = args->n_positional;
    if (c->max_args == CLI_ANY_ARGS || (n >= c->min_args && n <= c->max_args))
        return 0;
    if (c->args_error)
        return cli_usage_error(c->name, c->args_error);
    fprintf(stderr, "psflow %s: unexpected argument '%s'\n", c->name,
            args->positional[c->max_args]);
    return PF_EX_USAGE;
}

/* Every typed option in table order (only --output with output_only); --output is
 * "-o/--output" in messages where -o is. */
static int check_options(const cli_command *c, const cli_run *run, bool output_only) {
    const char *prefix = c->short_output ? "-o/" : "";
    for (int i = 0; i < run->n_table; i++) {
        bool is_output = !strcmp(run->table[i].name, "output");
        if (output_only && !is_output)
            continue;
        int rc = cli_convert(c->name, &run->table[i], is_output ? prefix : "");
        if (rc)
            return rc;
    }
    return 0;
}

/* The exit code, or -1 to run the command. */
static int run_prologue(const cli_command *c, const cli_option *opts, int n_opts, int argc,
                        char **argv, cli_run *run) {
    build_table(c, opts, n_opts, run);
    if (parse(c, run, argc, argv) != 0)
        return PF_EX_USAGE;
    if (run->args.help) {
        cli_print_help(c->name, c->usage, c->description, run->table, run->n_table);
        return 0;
    }
    int rc = c->short_output ? check_options(c, run, true) : 0;
    if (rc || (rc = check_arg_count(c, &run->args)) || (rc = check_options(c, run, false)))
        return rc;
    if ((c->client_mode == CLI_CLIENT || c->client_mode == CLI_CLIENT_NO_TOKEN) &&
        (rc = api_client_init(&run->client, c->name, run->table, run->n_table,
                              c->client_mode == CLI_CLIENT)))
        return rc;
    return -1;
}

bool cli_command_start(const cli_command *cmd, const cli_option *opts, int n_opts, int argc,
                       char **argv, cli_run *run) {
    int rc = run_prologue(cmd, opts, n_opts, argc, argv, run);
    run->exit_code = rc < 0 ? 0 : rc;
    return rc < 0;
}
