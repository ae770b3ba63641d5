/* options.h - command-line options with environment twins.
 *
 * Every option --some-flag has the twin variable PSFLOW_SOME_FLAG; the command line wins
 * over the environment, which wins over the default. Options take their value as
 * "--flag VALUE" or "--flag=VALUE"; boolean options take none. When an option is given
 * twice the last one wins, except for the lists cli_get_list() reads. Positional arguments
 * are collected in order. Parsing stops with a one-line error on an unknown option or a
 * missing value.
 */
#ifndef PSFLOW_CLI_OPTIONS_H
#define PSFLOW_CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

/* One row of a command's option table. The first four fields are all cli_parse() needs; a
 * row built with CLI_TEXT, CLI_FLAG, CLI_LONG, CLI_SIZE or CLI_CHOICE also says its kind
 * and default and where cli_convert() stores the checked value (the one pointer set). */
typedef struct cli_option {
    const char *name;  /* without dashes: "save" */
    const char *arg;   /* placeholder shown in help ("FILE"), NULL for a boolean flag */
    const char *help;  /* one line */
    const char *value; /* out: the value, or NULL when absent ("1" for a boolean flag) */
    const char **text; /* the value, else `fallback_text` */
    bool *flag;        /* whether the flag is set */
    long *integer;     /* an integer in [min, max], else `fallback` */
    long long *size;   /* a size in bytes (cli_get_size) in [min, max], else `fallback` */
    int *choice;       /* the index of the value in `fallback_text` ("text|json"); -1: absent */
    long long min, max, fallback;
    const char *fallback_text; /* a text option's default, or a choice option's choices */
    bool no_env; /* read from the command line only: no PSFLOW_* twin (CLI_LONG_ARGV) */
} cli_option;

/* A plain row: the command reads its value with cli_get() (or cli_get_list()). */
#define CLI_OPT(name, arg, help)                                                                   \
    { name, arg, help, .value = NULL }
#define CLI_TEXT(name, arg, help, dflt, dst)                                                       \
    { name, arg, help, NULL, .text = (dst), .fallback_text = (dflt) }
#define CLI_FLAG(name, help, dst)                                                                  \
    { name, NULL, help, NULL, .flag = (dst) }
#define CLI_LONG(name, arg, help, lo, hi, dflt, dst)                                               \
    { name, arg, help, NULL, .integer = (dst), .min = (lo), .max = (hi), .fallback = (dflt) }
/* CLI_LONG without the environment twin: a value that must be given each time (psflow
 * scale's counts, whose PSFLOW_WORKERS and PSFLOW_PS configure psflow up). */
#define CLI_LONG_ARGV(name, arg, help, lo, hi, dflt, dst)                                          \
    {                                                                                              \
        name, arg, help, NULL, .integer = (dst), .min = (lo), .max = (hi), .fallback = (dflt),     \
                               .no_env = true                                                      \
    }
#define CLI_SIZE(name, arg, help, lo, hi, dflt, dst)                                               \
    { name, arg, help, NULL, .size = (dst), .min = (lo), .max = (hi), .fallback = (dflt) }
#define CLI_CHOICE(name, arg, help, choices, dst)                                                  \
    { name, arg, help, NULL, .choice = (dst), .fallback_text = (choices) }

/* The entries of an array: the size of an option table. */
#define CLI_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

#define CLI_MAX_POSITIONAL 8

typedef struct cli_args {
    int n_positional;
    const char *positional[CLI_MAX_POSITIONAL];
    bool help; /* --help or -h was given */
} cli_args;

/* Parses argv[1..argc) (argv[0] is the subcommand) into opts[0..n_opts) and *args.
 * Returns 0, or -1 after printing "psflow CMD: ..." to stderr. */
int cli_parse(const char *cmd, int argc, char **argv, cli_option *opts, int n_opts, cli_args *args);

/* Prints "usage: psflow CMD USAGE", the description and the option table to stdout. */
void cli_print_help(const char *cmd, const char *usage, const char *description,
                    const cli_option *opts, int n_opts);

/* Checks the value of a typed row (CLI_TEXT...) and stores it; a plain row is left alone.
 * `prefix` goes before "--NAME" in messages ("-o/" for a short form). Returns 0, or
 * PF_EX_USAGE after printing "psflow CMD: --NAME must be ..., got '...'". */
int cli_convert(const char *cmd, const cli_option *o, const char *prefix);

/* Prints "psflow CMD: WHAT (see 'psflow CMD --help')" and returns the usage exit code. */
int cli_usage_error(const char *cmd, const char *what);

/* Value of the named option (NULL when absent). */
const char *cli_get(const cli_option *opts, int n_opts, const char *name);

/* --ca-file, which every command that talks to a coordinator has. */
#define CLI_CA_FILE_OPTION                                                                         \
    CLI_OPT("ca-file", "FILE",                                                                     \
            "trust only this PEM CA for an https:// coordinator [the system's CAs]")

/* --token-file, which every command that talks to a coordinator, serves its API or serves or
 * dials the data plane has. Its twin is PSFLOW_TOKEN_FILE; given on the command line it
 * replaces PSFLOW_TOKEN_FILE in this process's environment and drops PSFLOW_TOKEN, so the
 * file named there is the token (cli_parse). */
#define CLI_TOKEN_FILE_OPTION                                                                      \
    CLI_OPT("token-file", "FILE",                                                                  \
            "read the API token (which also keys the data plane) from FILE [PSFLOW_TOKEN]")

/* --agent-token-file FILE of the agents and the tasks that report to a coordinator (twin
 * PSFLOW_AGENT_TOKEN_FILE; on the command line it wins over PSFLOW_AGENT_TOKEN). */
#define CLI_AGENT_TOKEN_FILE_OPTION                                                                \
    CLI_OPT("agent-token-file", "FILE",                                                            \
            "the coordinator's agent token, for registering and reporting (the file it names "     \
            "at start) [PSFLOW_AGENT_TOKEN, else the API token]")

/* Applies --shm on|off (PSFLOW_SHM; also 1/0, true/false, yes/no): sets PSFLOW_SHM to on or
 * off for this process and the tasks it starts, which psflow/segment.h reads. Absent:
 * nothing changes (on). And --shm-dir DIR (PSFLOW_SHM_DIR), which psflow/seg_handoff.h
 * reads. Returns 0, or -1 after printing an error for another value. */
int cli_use_shm(const char *cmd, const cli_option *opts, int n_opts);

/* Applies --ca-file (psflow/http_client.h) for every request this process makes. Returns 0,
 * or PF_EX_NOINPUT after printing why the file cannot be used. */
int cli_use_ca_file(const char *cmd, const cli_option *opts, int n_opts);

/* What a command needs to call a coordinator from a task or an agent: the agent token
 * (PSFLOW_AGENT_TOKEN, else the file PSFLOW_AGENT_TOKEN_FILE or --agent-token-file names,
 * else the API token of cli_token) into token[cap], and --ca-file applied
 * (cli_use_ca_file). Returns 0 or the exit code. */
int cli_coordinator_auth(const char *cmd, const cli_option *opts, int n_opts, char *token,
                         size_t cap);

/* Parses an integer option value in [min, max]; prints an error and returns -1 if bad. */
int cli_get_long(const char *cmd, const cli_option *opts, int n_opts, const char *name, long min,
                 long max, long fallback, long *out);

/* The API token from PSFLOW_TOKEN or PSFLOW_TOKEN_FILE into token[cap] ("" for none), for
 * every subcommand that talks to the coordinator or serves its API. Returns 0, or the exit
 * code for an unreadable token file after printing "psflow CMD: why". */
int cli_token(const char *cmd, char *token, size_t cap);

/* Whether host is a loopback address (127.0.0.0/8, ::1, localhost): an API listening there
 * without a token reaches only this host. */
int cli_loopback_host(const char *host);
/* Parses a size in bytes, a whole number with an optional suffix K, M, G or T (powers of
 * 1024, "Ki" etc. also accepted), in [min, max]; prints an error and returns -1 if bad. */
int cli_get_size(const char *cmd, const cli_option *opts, int n_opts, const char *name,
                 long long min, long long max, long long fallback, long long *out);

/* The items of an option that may be repeated: every value argv[1..argc) gives it (argv as
 * cli_parse() read it), else its environment twin, each value split at `sep`, blanks around
 * items and empty items dropped. Copies them into buf[cap] and points out[0..max) at them.
 * Returns the count (0 when absent), or -1 after printing an error when there are more
 * than max or they do not fit. */
int cli_get_list(const char *cmd, int argc, char **argv, const cli_option *opts, int n_opts,
                 const char *name, char sep, char *buf, size_t cap, const char **out, int max);

#endif
