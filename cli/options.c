/* options.c - option parsing with PSFLOW_* environment twins (see options.h). */
#include "cli/options.h"

#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "psflow/http_client.h"

static const char *env_twin(const char *name) {
    char var[96] = "PSFLOW_";
    size_t n = strlen(var);
    for (const char *p = name; *p && n + 1 < sizeof var; p++)
        var[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    var[n] = '\0';
    const char *v = getenv(var);
    return v && *v ? v : NULL;
}

int cli_parse(const char *cmd, int argc, char **argv, cli_option *opts, int n_opts,
              cli_args *args) {
    memset(args, 0, sizeof *args);
    for (int i = 0; i < n_opts; i++)
        opts[i].value = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            args->help = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            if (args->n_positional == CLI_MAX_POSITIONAL) {
                fprintf(stderr, "psflow %s: too many arguments\n", cmd);
                return -1;
            }
            args->positional[args->n_positional++] = a;
            continue;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        cli_option *o = NULL;
        for (int j = 0; j < n_opts; j++)
            if (strlen(opts[j].name) == len && !strncmp(opts[j].name, name, len))
                o = &opts[j];
        if (!o) {
            fprintf(stderr, "psflow %s: unknown option '--%.*s' (see 'psflow %s --help')\n", cmd,
                    (int)len, name, cmd);
            return -1;
        }
        if (!o->arg) {
            if (eq) {
                fprintf(stderr, "psflow %s: option '--%s' takes no value\n", cmd, o->name);
                return -1;
            }
            o->value = "1";
        } else if (eq) {
            o->value = eq + 1;
        } else if (i + 1 < argc) {
            o->value = argv[++i];
        } else {
            fprintf(stderr, "psflow %s: option '--%s' needs a value (%s)\n", cmd, o->name, o->arg);
            return -1;
        }
    }
    for (int i = 0; i < n_opts; i++) {
        if (opts[i].value)
            continue;
        const char *v = env_twin(opts[i].name);
        if (v && !opts[i].arg) {
            /* A flag from the environment: 1/true/yes/on sets it, 0/false/no/off leaves it off. */
            static const char *const on[] = {"1", "true", "yes", "on"};
            static const char *const off[] = {"0", "false", "no", "off"};
            int is_on = 0, is_off = 0;
            for (size_t k = 0; k < sizeof on / sizeof on[0]; k++) {
                is_on |= !strcasecmp(v, on[k]);
                is_off |= !strcasecmp(v, off[k]);
            }
            if (!is_on && !is_off) {
                fprintf(stderr,
                        "psflow %s: the environment sets flag --%s to '%s': use 1, true, yes, "
                        "on, or 0, false, no, off\n",
                        cmd, opts[i].name, v);
                return -1;
            }
            v = is_on ? "1" : NULL;
        }
        opts[i].value = v;
    }
    return 0;
}

void cli_print_help(const char *cmd, const char *usage, const char *description,
                    const cli_option *opts, int n_opts) {
    printf("usage: psflow %s %s\n\n%s\n\noptions:\n", cmd, usage, description);
    for (int i = 0; i < n_opts; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].arg ? " " : "",
                 opts[i].arg ? opts[i].arg : "");
        printf("  %-26s %s\n", left, opts[i].help);
    }
    printf("  %-26s %s\n", "-h, --help", "show this help");
    printf("\nEvery option --some-flag can also be set with the environment variable "
           "PSFLOW_SOME_FLAG.\n");
}

const char *cli_get(const cli_option *opts, int n_opts, const char *name) {
    for (int i = 0; i < n_opts; i++)
        if (!strcmp(opts[i].name, name))
            return opts[i].value;
    return NULL;
}

int cli_get_long(const char *cmd, const cli_option *opts, int n_opts, const char *name, long min,
                 long max, long fallback, long *out) {
    const char *v = cli_get(opts, n_opts, name);
    if (!v) {
        *out = fallback;
        return 0;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < min || x > max) {
        fprintf(stderr, "psflow %s: --%s must be an integer in [%ld, %ld], got '%s'\n", cmd, name,
                min, max, v);
        return -1;
    }
    *out = x;
    return 0;
}

int cli_token(const char *cmd, char *token, size_t cap) {
    pf_error err;
    pf_error_clear(&err);
    if (!pf_http_token_from_env(token, cap, &err)) {
        fprintf(stderr, "psflow %s: %s\n", cmd, err.message);
        return PF_EX_NOINPUT;
    }
    return 0;
}
