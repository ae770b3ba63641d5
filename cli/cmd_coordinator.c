/* cmd_coordinator.c - `psflow coordinator`: the REST API, the event stream, the dashboard and
 * the job state in SQLite (coordinator/coordinator.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
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
#include "psflow/footprint.h"
#include "psflow/mem.h"

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

/* Reads a PEM file of at most 1 MiB into a new NUL-terminated string (pf_free); NULL after
 * printing why. */
static char *read_pem(const char *option, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "psflow coordinator: --%s %s: %s\n", option, path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 20, len = 0;
    char *text = pf_malloc(cap + 1);
    if (text)
        len = fread(text, 1, cap + 1, f);
    int bad = !text || ferror(f) || len > cap || len == 0;
    fclose(f);
    if (bad) {
        fprintf(stderr, "psflow coordinator: --%s %s: %s\n", option, path,
                !text      ? "out of memory"
                : len == 0 ? "empty or unreadable"
                           : "larger than 1 MiB");
        pf_free(text);
        return NULL;
    }
    text[len] = '\0';
    if (!strstr(text, "-----BEGIN ")) {
        fprintf(stderr, "psflow coordinator: --%s %s: not a PEM file\n", option, path);
        pf_free(text);
        return NULL;
    }
    return text;
}

/* --generate-token: when PSFLOW_TOKEN_FILE names a file that does not exist (and
 * PSFLOW_TOKEN is not set), creates it with a new random token, 32 bytes from /dev/urandom
 * as 64 hex digits, readable by this user only. O_EXCL: a file that appears meanwhile (a
 * second coordinator) is not overwritten, and is then read like any token file. Returns 0
 * or an exit code after printing why. */
static int generate_token(void) {
    const char *path = getenv("PSFLOW_TOKEN_FILE");
    if (getenv("PSFLOW_TOKEN") && *getenv("PSFLOW_TOKEN"))
        return 0;
    if (!path || !*path) {
        fprintf(stderr, "psflow coordinator: --generate-token needs PSFLOW_TOKEN_FILE, the file "
                        "to keep the token in\n");
        return PF_EX_USAGE;
    }
    if (access(path, F_OK) == 0)
        return 0;
    unsigned char raw[32];
    FILE *r = fopen("/dev/urandom", "rb");
    size_t got = r ? fread(raw, 1, sizeof raw, r) : 0;
    if (r)
        fclose(r);
    if (got != sizeof raw) {
        fprintf(stderr, "psflow coordinator: --generate-token: cannot read /dev/urandom\n");
        return PF_EX_OSERR;
    }
    char text[2 * sizeof raw + 2];
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(text + 2 * i, 3, "%02x", raw[i]);
    text[2 * sizeof raw] = '\n';
    text[2 * sizeof raw + 1] = '\0';
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST)
        return 0;
    ssize_t wrote = fd >= 0 ? write(fd, text, strlen(text)) : -1;
    int ok = fd >= 0 && wrote == (ssize_t)strlen(text) && fsync(fd) == 0;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    if (!ok) {
        fprintf(stderr, "psflow coordinator: --generate-token: cannot write %s: %s\n", path,
                strerror(saved));
        if (fd >= 0)
            unlink(path);
        return PF_EX_CANTCREAT;
    }
    fprintf(stderr, "psflow coordinator: created a new API token in %s\n", path);
    return 0;
}

/* An origin as browsers send it: http or https, a host, an optional port, nothing after. */
static int valid_origin(const char *o) {
    const char *host = !strncmp(o, "http://", 7)    ? o + 7
                       : !strncmp(o, "https://", 8) ? o + 8
                                                    : NULL;
    if (!host || !*host)
        return 0;
    for (const char *p = host; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == ':' || *p == '[' ||
              *p == ']'))
            return 0;
    return 1;
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
        {"max-streams", "N",
         "event streams open at once; more are told 503 [64, at most max-connections/2]", NULL},
        {"cors-origin", "ORIGIN",
         "let pages of ORIGIN (https://host:port) call the API; repeatable or comma-separated "
         "[none]",
         NULL},
        {"tls-cert", "FILE", "serve HTTPS with this PEM certificate (chain) [plain HTTP]", NULL},
        {"tls-key", "FILE", "the PEM private key of --tls-cert", NULL},
        {"data-root", "DIR",
         "jobs may read data only under DIR; repeatable or ':'-separated [the Fashion-MNIST "
         "folder and the working directory]",
         NULL},
        {"max-steps-limit", "N", "refuse jobs whose training.max_steps is above N [100000000]",
         NULL},
        {"max-model-bytes", "SIZE",
         "refuse models whose values and optimizer slots take more than SIZE [4G]", NULL},
        {"max-shards", "N", "refuse jobs whose variables are cut into more than N shards [1024]",
         NULL},
        {"max-replicas", "N", "refuse jobs with more than N ps or N worker tasks [256]", NULL},
        {"generate-token", NULL,
         "create PSFLOW_TOKEN_FILE (--token-file) with a random token when it does not exist yet",
         NULL},
        CLI_TOKEN_FILE_OPTION,
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
    long lease, max_conn, timeout, max_streams;
    if (cli_get_long("coordinator", opts, n_opts, "lease-seconds", 1, 3600, 10, &lease) ||
        cli_get_long("coordinator", opts, n_opts, "max-connections", 4, 65536, 256, &max_conn) ||
        cli_get_long("coordinator", opts, n_opts, "connection-timeout", 1, 3600, 30, &timeout))
        return PF_EX_USAGE;
    long reserve = max_conn / 8 > 2 ? max_conn / 8 : 2, stream_cap = (max_conn - reserve) / 2;
    if (cli_get_long("coordinator", opts, n_opts, "max-streams", 1, stream_cap,
                     stream_cap < 64 ? stream_cap : 64, &max_streams))
        return PF_EX_USAGE;
    char cors_buf[2048];
    const char *cors[16];
    int n_cors = cli_get_list("coordinator", argc, argv, opts, n_opts, "cors-origin", ',', cors_buf,
                              sizeof cors_buf, cors, 16);
    if (n_cors < 0)
        return PF_EX_USAGE;
    for (int i = 0; i < n_cors; i++)
        if (!valid_origin(cors[i])) {
            fprintf(stderr,
                    "psflow coordinator: --cors-origin '%s' is not an origin like "
                    "https://host:port (scheme, host and port only)\n",
                    cors[i]);
            return PF_EX_USAGE;
        }
    long max_shards, max_replicas;
    long long max_steps, max_model;
    if (cli_get_size("coordinator", opts, n_opts, "max-steps-limit", 1, INT64_MAX,
                     COORD_DEFAULT_MAX_STEPS, &max_steps) ||
        cli_get_size("coordinator", opts, n_opts, "max-model-bytes", 1, INT64_MAX,
                     COORD_DEFAULT_MAX_MODEL_BYTES, &max_model) ||
        cli_get_long("coordinator", opts, n_opts, "max-shards", 1, PF_FOOTPRINT_MAX_SHARDS,
                     COORD_DEFAULT_MAX_SHARDS, &max_shards) ||
        cli_get_long("coordinator", opts, n_opts, "max-replicas", 1, PF_MAX_REPLICAS,
                     COORD_DEFAULT_MAX_REPLICAS, &max_replicas))
        return PF_EX_USAGE;
    char roots_buf[4 * PATH_MAX];
    const char *roots[COORD_MAX_DATA_ROOTS];
    int n_roots = cli_get_list("coordinator", argc, argv, opts, n_opts, "data-root", ':', roots_buf,
                               sizeof roots_buf, roots, COORD_MAX_DATA_ROOTS);
    if (n_roots < 0)
        return PF_EX_USAGE;
    int default_roots = n_roots == 0;
    if (default_roots) {
        roots[n_roots++] = "/usr/share/datasets/fashion-mnist";
        roots[n_roots++] = ".";
    }
    const char *cert_path = cli_get(opts, n_opts, "tls-cert");
    const char *key_path = cli_get(opts, n_opts, "tls-key");
    if (!cert_path != !key_path) {
        fprintf(stderr, "psflow coordinator: --tls-cert and --tls-key go together\n");
        return PF_EX_USAGE;
    }
    char token[512];
    int rc = cli_get(opts, n_opts, "generate-token") ? generate_token() : 0;
    if (rc || (rc = cli_token("coordinator", token, sizeof token)))
        return rc;
    pf_error err;
    pf_error_clear(&err);
    char *cert = NULL, *key = NULL;
    if (cert_path &&
        (!(cert = read_pem("tls-cert", cert_path)) || !(key = read_pem("tls-key", key_path)))) {
        pf_free(cert);
        return PF_EX_NOINPUT;
    }
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
        .max_streams = (int)max_streams,
        .cors_origins = cors,
        .n_cors_origins = n_cors,
        .tls_cert_pem = cert,
        .tls_key_pem = key,
        .limits = {.data_roots = roots,
                   .n_data_roots = n_roots,
                   .data_roots_optional = default_roots,
                   .max_steps = max_steps,
                   .max_model_bytes = max_model,
                   .max_shards = (int)max_shards,
                   .max_replicas = (int)max_replicas},
    };
    coord_server *s;
    if (coord_server_start(&o, &s, &err) != PF_OK) {
        fprintf(stderr, "psflow coordinator: %s\n", err.message);
        pf_free(cert);
        pf_free(key);
        return !strncmp(err.message, "--data-root", 11)          ? PF_EX_USAGE
               : err.message[0] && strstr(err.message, "listen") ? PF_EX_UNAVAILABLE
                                                                 : PF_EX_CANTCREAT;
    }
    fprintf(stderr, "psflow coordinator: listening on %s://%s:%d (database %s, dashboard %s%s%s)\n",
            cert ? "https" : "http", host, coord_server_port(s), o.db_path,
            web_dir ? web_dir : "not installed", token[0] ? ", bearer token required" : "",
            n_cors ? ", CORS for --cors-origin" : "");
    running = s;
    pf_signals_on_stop(on_signal);
    coord_server_wait(s);
    fprintf(stderr, "psflow coordinator: stopping\n");
    running = NULL;
    coord_server_destroy(s);
    pf_free(cert);
    pf_free(key);
    return 0;
}
