/* options.c - option parsing with PSFLOW_* environment twins (see options.h). */
#include "cli/options.h"

#include "cli/cli_internal.h"
#include "psflow/http_client.h"
#include "psflow/text.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if (opts[i].value || opts[i].no_env)
            continue;
        const char *v = env_twin(opts[i].name);
        if (v && !opts[i].arg) {
            /* A flag from the environment: 1/true/yes/on sets it, 0/false/no/off leaves it off. */
            int is_on = pf_text_bool(v);
            if (is_on < 0) {
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
    /* --token-file on the command line: the token's readers (cli_token, and the processes
     * this one starts) look in the environment, so it becomes PSFLOW_TOKEN_FILE there and
     * wins over PSFLOW_TOKEN. */
    const char *token_file = cli_get(opts, n_opts, "token-file");
    const char *env_file = getenv("PSFLOW_TOKEN_FILE");
    if (token_file && (!env_file || strcmp(env_file, token_file) != 0)) {
        if (!*token_file || setenv("PSFLOW_TOKEN_FILE", token_file, 1) != 0) {
            fprintf(stderr, "psflow %s: --token-file: cannot use '%s'\n", cmd, token_file);
            return -1;
        }
        unsetenv("PSFLOW_TOKEN");
    }
    /* The same for --agent-token-file (PSFLOW_AGENT_TOKEN_FILE, over PSFLOW_AGENT_TOKEN). */
    const char *agent_file = cli_get(opts, n_opts, "agent-token-file");
    const char *env_agent = getenv("PSFLOW_AGENT_TOKEN_FILE");
    if (agent_file && (!env_agent || strcmp(env_agent, agent_file) != 0)) {
        if (!*agent_file || setenv("PSFLOW_AGENT_TOKEN_FILE", agent_file, 1) != 0) {
            fprintf(stderr, "psflow %s: --agent-token-file: cannot use '%s'\n", cmd, agent_file);
            return -1;
        }
        unsetenv("PSFLOW_AGENT_TOKEN");
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

int cli_use_ca_file(const char *cmd, const cli_option *opts, int n_opts) {
    pf_error err;
    pf_error_clear(&err);
    if (pf_http_set_ca_file(cli_get(opts, n_opts, "ca-file"), &err) != PF_OK) {
        fprintf(stderr, "psflow %s: --ca-file: %s\n", cmd, err.message);
        return PF_EX_NOINPUT;
    }
    return 0;
}

int cli_coordinator_auth(const char *cmd, const cli_option *opts, int n_opts, char *token,
                         size_t cap) {
    pf_error err;
    pf_error_clear(&err);
    if (!pf_http_token_load("PSFLOW_AGENT_TOKEN", "PSFLOW_AGENT_TOKEN_FILE", token, cap, &err)) {
        fprintf(stderr, "psflow %s: %s\n", cmd, err.message);
        return PF_EX_NOINPUT;
    }
    int rc = token[0] ? 0 : cli_token(cmd, token, cap); /* the API token, as before */
    return rc ? rc : cli_use_ca_file(cmd, opts, n_opts);
}

int cli_get_size(const char *cmd, const cli_option *opts, int n_opts, const char *name,
                 long long min, long long max, long long fallback, long long *out) {
    const char *v = cli_get(opts, n_opts, name);
    if (!v) {
        *out = fallback;
        return 0;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    int shift = 0;
    if (*end && end != v) {
        const char *units = "KMGT";
        const char *u = strchr(units, toupper((unsigned char)*end));
        if (u) {
            shift = 10 * (int)(u - units + 1);
            end++;
            if (*end == 'i' || *end == 'I')
                end++;
        }
    }
    int ok = !errno && end != v && !*end && x >= 0 && (shift == 0 || x <= (LLONG_MAX >> shift));
    if (ok)
        x <<= shift;
    if (!ok || x < min || x > max) {
        fprintf(stderr,
                "psflow %s: --%s must be a size in bytes from %lld to %lld (suffixes K, M, G, "
                "T allowed), got '%s'\n",
                cmd, name, min, max, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* Splits value at sep into out[*n..max), copying the items into buf at *used. */
static int split_items(const char *cmd, const char *name, const char *value, char sep, char *buf,
                       size_t cap, size_t *used, const char **out, int *n, int max) {
    const char *p = value;
    while (*p) {
        size_t len = strcspn(p, (char[]){sep, '\0'});
        const char *item = p;
        p += len + (p[len] == sep);
        while (len && isspace((unsigned char)*item))
            item++, len--;
        while (len && isspace((unsigned char)item[len - 1]))
            len--;
        if (!len)
            continue;
        if (*n == max || *used + len + 1 > cap) {
            fprintf(stderr, "psflow %s: --%s: more than %d items, or too long\n", cmd, name, max);
            return -1;
        }
        memcpy(buf + *used, item, len);
        buf[*used + len] = '\0';
        out[(*n)++] = buf + *used;
        *used += len + 1;
    }
    return 0;
}

int cli_get_list(const char *cmd, int argc, char **argv, const cli_option *opts, int n_opts,
                 const char *name, char sep, char *buf, size_t cap, const char **out, int max) {
    int n = 0, given = 0;
    size_t used = 0;
    /* The command line as cli_parse() walked it: an option's value is never an option. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            continue;
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        const cli_option *o = NULL;
        for (int j = 0; j < n_opts; j++)
            if (strlen(opts[j].name) == len && !strncmp(opts[j].name, a + 2, len))
                o = &opts[j];
        if (!o || !o->arg)
            continue;
        const char *value = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (value && !strcmp(o->name, name)) {
            given = 1;
            if (split_items(cmd, name, value, sep, buf, cap, &used, out, &n, max))
                return -1;
        }
    }
    const char *env = given ? NULL : cli_get(opts, n_opts, name);
    if (env && split_items(cmd, name, env, sep, buf, cap, &used, out, &n, max))
        return -1;
    return n;
}

int cli_use_shm(const char *cmd, const cli_option *opts, int n_opts) {
    const char *dir = cli_get(opts, n_opts, "shm-dir");
    if (dir && setenv("PSFLOW_SHM_DIR", dir, 1) != 0)
        return -1;
    const char *v = cli_get(opts, n_opts, "shm");
    if (!v)
        return 0;
    int on = pf_text_bool(v);
    if (on >= 0)
        return setenv("PSFLOW_SHM", on ? "on" : "off", 1) == 0 ? 0 : -1;
    fprintf(stderr, "psflow %s: --shm must be on or off, not '%s'\n", cmd, v);
    return -1;
}

int cli_usage_error(const char *cmd, const char *what) {
    fprintf(stderr, "psflow %s: %s (see 'psflow %s --help')\n", cmd, what, cmd);
    return PF_EX_USAGE;
}

/* The index of value among choices ("text|json"), or -1; the choices as "text or json"
 * into list[cap]. */
static int find_choice(const char *choices, const char *value, char *list, size_t cap) {
    int found = -1, k = 0;
    size_t used = 0;
    list[0] = '\0';
    for (const char *p = choices; *p; k++) {
        size_t len = strcspn(p, "|");
        if (strlen(value) == len && !strncmp(p, value, len))
            found = k;
        const char *sep = !k ? "" : p[len] ? ", " : " or ";
        int n = snprintf(list + used, cap - used, "%s%.*s", sep, (int)len, p);
        if (n > 0 && used + (size_t)n < cap)
            used += (size_t)n;
        p += len + (p[len] == '|');
    }
    return found;
}

int cli_convert(const char *cmd, const cli_option *o, const char *prefix) {
    if (o->text)
        *o->text = o->value ? o->value : o->fallback_text;
    if (o->flag)
        *o->flag = o->value != NULL;
    if (o->integer &&
        cli_get_long(cmd, o, 1, o->name, (long)o->min, (long)o->max, (long)o->fallback, o->integer))
        return PF_EX_USAGE;
    if (o->size && cli_get_size(cmd, o, 1, o->name, o->min, o->max, o->fallback, o->size))
        return PF_EX_USAGE;
    if (o->choice) {
        char list[128];
        *o->choice = o->value ? find_choice(o->fallback_text, o->value, list, sizeof list) : -1;
        if (o->value && *o->choice < 0) {
            fprintf(stderr, "psflow %s: %s--%s must be %s, got '%s'\n", cmd, prefix, o->name, list,
                    o->value);
            return PF_EX_USAGE;
        }
    }
    return 0;
}

int cli_loopback_host(const char *host) {
    unsigned char a[16];
    if (inet_pton(AF_INET, host, a) == 1)
        return a[0] == 127;
    if (inet_pton(AF_INET6, host, a) == 1)
        return !memcmp(a, (unsigned char[16]){[15] = 1}, 16);
    return !strcmp(host, "localhost");
}
