/* cmd_coordinator.c - `psflow coordinator`: the REST API, the event stream, the dashboard and
 * the job state in SQLite (coordinator/coordinator.h). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "coordinator/coordinator.h"
#include "cli/options.h"
#include "psflow/http_client.h"
#include "psflow/address.h"
#include "psflow/signals.h"

static coord_server *running;

static void on_signal(int sig) {
    (void)sig;
    if (running)
        coord_server_stop(running);
}

/* Finds an installed file next to the executable: <exe>/../<rel> for each candidate. */
static int find_near_exe(const char *const *rels, int n, int want_dir, char *out, size_t cap) {
    char exe[PATH_MAX - 64];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return -1;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    for (int i = 0; i < n; i++) {
        struct stat sb;
        snprintf(out, cap, "%s/../%s", exe, rels[i]);
        if (stat(out, &sb) == 0 && (want_dir ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode)))
            return 0;
    }
    return -1;
}

int cli_coordinator(int argc, char **argv) {
    cli_option opts[] = {
        {"listen", "HOST:PORT", "address of the API and dashboard [0.0.0.0:8080]", NULL},
        {"db", "FILE", "SQLite database of the job state [./psflow.db]", NULL},
        {"web", "DIR", "dashboard files [installed share/psflow/web, or web/ of the source tree]",
         NULL},
        {"lease-seconds", "S", "an agent without a heartbeat for S seconds is lost [10]", NULL},
        {"max-connections", "N", "concurrent HTTP connections [256]", NULL},
        {"connection-timeout", "S", "idle HTTP connections are closed after S seconds [30]", NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (cli_parse("coordinator", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help("coordinator", "[options]",
                       "Serves the job API (api/rest.md), the live event stream and the "
                       "dashboard, and keeps\nmembership and job state in SQLite. Agents "
                       "(psflow ps|worker --coordinator URL) register\nwith it and are assigned "
                       "tasks. Set PSFLOW_TOKEN or PSFLOW_TOKEN_FILE to require a\nbearer token "
                       "on the API.",
                       opts, n_opts);
        return 0;
    }
    if (args.n_positional) {
        fprintf(stderr, "psflow coordinator: unexpected argument '%s'\n", args.positional[0]);
        return PF_EX_USAGE;
    }
    const char *listen = cli_get(opts, n_opts, "listen");
    char host[256] = "0.0.0.0";
    int port = 8080;
    if (listen && pf_split_host_port(listen, host, sizeof host, &port) != 0) {
        fprintf(stderr, "psflow coordinator: --listen '%s' is not HOST:PORT\n", listen);
        return PF_EX_USAGE;
    }
    long lease, max_conn, timeout;
    if (cli_get_long("coordinator", opts, n_opts, "lease-seconds", 1, 3600, 10, &lease) ||
        cli_get_long("coordinator", opts, n_opts, "max-connections", 4, 65536, 256, &max_conn) ||
        cli_get_long("coordinator", opts, n_opts, "connection-timeout", 1, 3600, 30, &timeout))
        return PF_EX_USAGE;
    char token[512];
    int rc = cli_token("coordinator", token, sizeof token);
    if (rc)
        return rc;
    pf_error err;
    char web[PATH_MAX], openapi[PATH_MAX];
    const char *web_dir = cli_get(opts, n_opts, "web");
    static const char *const web_rels[] = {"share/psflow/web", "web"};
    static const char *const api_rels[] = {"share/psflow/openapi.yaml", "api/openapi.yaml"};
    if (!web_dir && find_near_exe(web_rels, 2, 1, web, sizeof web) == 0)
        web_dir = web;
    int have_api = find_near_exe(api_rels, 2, 0, openapi, sizeof openapi) == 0;
    const char *db = cli_get(opts, n_opts, "db");
    coord_options o = {
        .listen_host = host,
        .port = port,
        .db_path = db ? db : "./psflow.db",
        .web_dir = web_dir,
        .openapi_path = have_api ? openapi : NULL,
        .token = token,
        .lease_seconds = (double)lease,
        .max_connections = (int)max_conn,
        .connection_timeout = (int)timeout,
    };
    coord_server *s;
    if (coord_server_start(&o, &s, &err) != PF_OK) {
        fprintf(stderr, "psflow coordinator: %s\n", err.message);
        return err.message[0] && strstr(err.message, "listen") ? PF_EX_UNAVAILABLE
                                                               : PF_EX_CANTCREAT;
    }
    fprintf(stderr, "psflow coordinator: listening on http://%s:%d (database %s, dashboard %s%s)\n",
            host, coord_server_port(s), o.db_path, web_dir ? web_dir : "not installed",
            token[0] ? ", bearer token required" : "");
    running = s;
    pf_signals_on_stop(on_signal);
    coord_server_wait(s);
    fprintf(stderr, "psflow coordinator: stopping\n");
    running = NULL;
    coord_server_destroy(s);
    return 0;
}
