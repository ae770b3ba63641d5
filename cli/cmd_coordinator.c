/* cmd_coordinator.c - `psflow coordinator`: the REST API, the event stream, the dashboard and
 * the job state in SQLite (coordinator/coordinator.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/options.h"
#include "coordinator/coordinator.h"
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

/* When `path` does not exist, creates it with a new random token, 32 bytes from
 * /dev/urandom as 64 hex digits, readable by this user only, and says so (`what`: "API
 * token"). O_EXCL: a file that appears meanwhile (a second coordinator) is not overwritten,
 * and is then read like any token file. *created: whether this call made it. Returns 0 or
 * an exit code after printing why. */
static int create_token_file(const char *path, const char *what, int *created) {
    *created = 0;
    if (access(path, F_OK) == 0)
        return 0;
    unsigned char raw[32];
    FILE *r = fopen("/dev/urandom", "rb");
    size_t got = r ? fread(raw, 1, sizeof raw, r) : 0;
    if (r)
        fclose(r);
    if (got != sizeof raw) {
        fprintf(stderr, "psflow coordinator: new %s: cannot read /dev/urandom\n", what);
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
        fprintf(stderr, "psflow coordinator: new %s: cannot write %s: %s\n", what, path,
                strerror(saved));
        if (fd >= 0)
            unlink(path);
        return PF_EX_CANTCREAT;
    }
    fprintf(stderr, "psflow coordinator: created a new %s in %s\n", what, path);
    *created = 1;
    return 0;
}

/* --generate-token: when PSFLOW_TOKEN_FILE names a file that does not exist (and
 * PSFLOW_TOKEN is not set), creates it with a new random API token. Returns 0 or an exit
 * code after printing why. */
static int generate_token(void) {
    const char *path = getenv("PSFLOW_TOKEN_FILE");
    if (getenv("PSFLOW_TOKEN") && *getenv("PSFLOW_TOKEN"))
        return 0;
    if (!path || !*path) {
        fprintf(stderr, "psflow coordinator: --generate-token needs PSFLOW_TOKEN_FILE, the file "
                        "to keep the token in\n");
        return PF_EX_USAGE;
    }
    int created;
    return create_token_file(path, "API token", &created);
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

/* What `psflow coordinator` was told. */
typedef struct coord_cli {
    cli_run run; /* the options as parsed */
    int argc;
    char **argv;
    const char *listen, *db, *web, *cert_path, *key_path, *agent_token_file;
    long lease, max_conn, timeout, max_shards, max_replicas, per_address, header_s, body_s;
    long preempt_grace;
    long evict_ms;
    long long max_steps, max_model;
    bool generate_token, insecure;
} coord_cli;

/* --max-streams, whose range depends on --max-connections. Returns 0 or PF_EX_USAGE. */
static int max_streams_option(const coord_cli *c, long *max_streams) {
    long reserve = c->max_conn / 8 > 2 ? c->max_conn / 8 : 2;
    long stream_cap = (c->max_conn - reserve) / 2;
    return cli_get_long("coordinator", c->run.table, c->run.n_table, "max-streams", 1, stream_cap,
                        stream_cap < 64 ? stream_cap : 64, max_streams)
               ? PF_EX_USAGE
               : 0;
}

/* The connection and admission limits the options set into o. */
static void copy_limits(const coord_cli *c, long max_streams, coord_options *o) {
    o->max_per_address = (int)c->per_address;
    o->header_timeout = (int)c->header_s;
    o->body_timeout = (int)c->body_s;
    o->evict_after_ms = (int)c->evict_ms;
    o->lease_seconds = (double)c->lease;
    o->preempt_grace_seconds = (double)c->preempt_grace;
    o->max_connections = (int)c->max_conn;
    o->connection_timeout = (int)c->timeout;
    o->max_streams = (int)max_streams;
    o->limits = (coord_limits){.max_steps = c->max_steps,
                               .max_model_bytes = c->max_model,
                               .max_shards = (int)c->max_shards,
                               .max_replicas = (int)c->max_replicas};
}

/* The --cors-origin list into cors[0..16) (strings in buf[cap]). Returns the count, or -1
 * after printing why. */
static int cors_origins(const coord_cli *c, char *buf, size_t cap, const char **cors) {
    int n = cli_get_list("coordinator", c->argc, c->argv, c->run.table, c->run.n_table,
                         "cors-origin", ',', buf, cap, cors, 16);
    for (int i = 0; i < n; i++)
        if (!valid_origin(cors[i])) {
            fprintf(stderr,
                    "psflow coordinator: --cors-origin '%s' is not an origin like "
                    "https://host:port (scheme, host and port only)\n",
                    cors[i]);
            return -1;
        }
    return n;
}

/* The --data-root list into l->data_roots (strings in buf[cap]), else the defaults (the
 * Fashion-MNIST folder and the working directory, which need not exist). Returns 0 or
 * PF_EX_USAGE. */
static int data_roots(const coord_cli *c, char *buf, size_t cap, const char **roots,
                      coord_limits *l) {
    int n = cli_get_list("coordinator", c->argc, c->argv, c->run.table, c->run.n_table, "data-root",
                         ':', buf, cap, roots, COORD_MAX_DATA_ROOTS);
    if (n < 0)
        return PF_EX_USAGE;
    l->data_roots_optional = n == 0;
    if (n == 0) {
        roots[n++] = "/usr/share/datasets/fashion-mnist";
        roots[n++] = ".";
    }
    l->data_roots = roots;
    l->n_data_roots = n;
    return 0;
}

/* The token (--generate-token first creates it) into token[cap], and the PEM texts of
 * --tls-cert and --tls-key into o (pf_free both). Returns 0 or an exit code. */
static int load_secrets(const coord_cli *c, char *token, size_t cap, coord_options *o) {
    if (!c->cert_path != !c->key_path) {
        fprintf(stderr, "psflow coordinator: --tls-cert and --tls-key go together\n");
        return PF_EX_USAGE;
    }
    int rc = c->generate_token ? generate_token() : 0;
    if (rc || (rc = cli_token("coordinator", token, cap)))
        return rc;
    o->token = token;
    char *cert = NULL, *key = NULL;
    if (c->cert_path && (!(cert = read_pem("tls-cert", c->cert_path)) ||
                         !(key = read_pem("tls-key", c->key_path)))) {
        pf_free(cert);
        return PF_EX_NOINPUT;
    }
    o->tls_cert_pem = cert;
    o->tls_key_pem = key;
    return 0;
}

/* The agent token into token[cap] and o: PSFLOW_AGENT_TOKEN, else the file of
 * --agent-token-file, else agent-token beside the database; a file that does not exist is
 * created with a random token (reused by every later start). Says where it is. Returns 0 or
 * an exit code after printing why. */
static int load_agent_token(const coord_cli *c, char *token, size_t cap, coord_options *o) {
    char path[PATH_MAX];
    const char *env = getenv("PSFLOW_AGENT_TOKEN");
    int created = 0, rc = 0;
    if (env && *env) {
        snprintf(path, sizeof path, "PSFLOW_AGENT_TOKEN");
    } else {
        const char *slash = strrchr(c->db, '/');
        if (c->agent_token_file)
            snprintf(path, sizeof path, "%s", c->agent_token_file);
        else
            snprintf(path, sizeof path, "%.*s%sagent-token", slash ? (int)(slash - c->db) : 0,
                     c->db, slash ? "/" : "");
        if ((rc = create_token_file(path, "agent token", &created)))
            return rc;
        if (setenv("PSFLOW_AGENT_TOKEN_FILE", path, 1) != 0)
            return PF_EX_OSERR;
    }
    pf_error err;
    pf_error_clear(&err);
    if (!pf_http_token_load("PSFLOW_AGENT_TOKEN", "PSFLOW_AGENT_TOKEN_FILE", token, cap, &err)) {
        fprintf(stderr, "psflow coordinator: %s\n", err.message);
        return PF_EX_NOINPUT;
    }
    for (const char *p = token; *p; p++)
        if (*p <= ' ' || *p > '~')
            token[0] = '\0';
    if (!token[0]) {
        fprintf(stderr,
                "psflow coordinator: the agent token in %s is empty or holds characters other "
                "than printable ASCII: write one line of letters and digits there\n",
                path);
        return PF_EX_DATAERR;
    }
    o->agent_token = token;
    if (!created)
        fprintf(stderr,
                "psflow coordinator: agents authenticate with the agent token in %s (give them "
                "--agent-token-file, or PSFLOW_AGENT_TOKEN)\n",
                path);
    return 0;
}

/* An API without a token is open to whoever reaches it: refused on an address other hosts
 * reach unless --insecure. Returns 0 or PF_EX_USAGE after printing how to fix it. */
static int check_exposure(const coord_cli *c, const coord_options *o) {
    if (o->token[0] || c->insecure || cli_loopback_host(o->listen_host))
        return 0;
    fprintf(stderr,
            "psflow coordinator: refusing to serve an API without a token on %s:%d, where "
            "anyone who reaches it could submit and cancel jobs: set PSFLOW_TOKEN or "
            "PSFLOW_TOKEN_FILE (--token-file), or add --generate-token with PSFLOW_TOKEN_FILE, "
            "or listen on 127.0.0.1, or add --insecure (PSFLOW_INSECURE=1) to serve it open "
            "anyway\n",
            o->listen_host, o->port);
    return PF_EX_USAGE;
}

/* The dashboard (--web, else installed next to the executable) and openapi.yaml into o, the
 * paths kept in web[cap] and openapi[cap]. */
static void find_files(const coord_cli *c, char *web, char *openapi, size_t cap, coord_options *o) {
    static const char *const web_rels[] = {"share/psflow/web", "web"};
    static const char *const api_rels[] = {"share/psflow/openapi.yaml", "api/openapi.yaml"};
    o->web_dir = c->web;
    if (!o->web_dir && find_near_exe(web_rels, 2, 1, web, cap) == 0)
        o->web_dir = web;
    if (find_near_exe(api_rels, 2, 0, openapi, cap) == 0)
        o->openapi_path = openapi;
}

/* Serves until SIGINT or SIGTERM; frees the PEM texts in o. Returns the exit code. */
static int serve(coord_options *o) {
    pf_error err;
    pf_error_clear(&err);
    coord_server *s;
    int rc = 0;
    if (coord_server_start(o, &s, &err) != PF_OK) {
        fprintf(stderr, "psflow coordinator: %s\n", err.message);
        int usage = !strncmp(err.message, "--data-root", 11) ||
                    !strncmp(err.message, "--allowed-hosts", 15);
        rc = usage                                             ? PF_EX_USAGE
             : err.message[0] && strstr(err.message, "listen") ? PF_EX_UNAVAILABLE
                                                               : PF_EX_CANTCREAT;
    } else {
        fprintf(
            stderr, "psflow coordinator: listening on %s://%s:%d (database %s, dashboard %s%s%s)\n",
            o->tls_cert_pem ? "https" : "http", o->listen_host, coord_server_port(s), o->db_path,
            o->web_dir ? o->web_dir : "not installed", o->token[0] ? ", bearer token required" : "",
            o->n_cors_origins ? ", CORS for --cors-origin" : "");
        if (!o->token[0])
            fprintf(stderr,
                    "psflow coordinator: WARNING: the API has no token: anyone who reaches "
                    "%s:%d can submit and cancel jobs (set PSFLOW_TOKEN or PSFLOW_TOKEN_FILE to "
                    "require one)\n",
                    o->listen_host, coord_server_port(s));
        running = s;
        pf_signals_on_stop(on_signal);
        coord_server_wait(s);
        fprintf(stderr, "psflow coordinator: stopping\n");
        running = NULL;
        coord_server_destroy(s);
    }
    pf_free((char *)o->tls_cert_pem);
    pf_free((char *)o->tls_key_pem);
    return rc;
}

int cli_coordinator(const cli_command *cmd, int argc, char **argv) {
    coord_cli c = {.argc = argc, .argv = argv};
    cli_option opts[] = {
        CLI_TEXT("listen", "HOST:PORT",
                 "address of the API and dashboard [127.0.0.1:8080]; another than loopback "
                 "needs an API token or --insecure",
                 NULL, &c.listen),
        CLI_TEXT("db", "FILE", "SQLite database of the job state [./psflow.db]", "./psflow.db",
                 &c.db),
        CLI_TEXT("web", "DIR",
                 "dashboard files [installed share/psflow/web, or web/ of the source tree]", NULL,
                 &c.web),
        CLI_LONG("lease-seconds", "S", "an agent without a heartbeat for S seconds is lost [10]", 1,
                 3600, 10, &c.lease),
        CLI_LONG("preempt-grace-seconds", "S",
                 "a preempted job's chief has S seconds to take a final checkpoint before its "
                 "agents are freed; 0: freed at once [30]",
                 0, 3600, 30, &c.preempt_grace),
        CLI_LONG("max-connections", "N", "concurrent HTTP connections [256]", 4, 65536, 256,
                 &c.max_conn),
        CLI_LONG("connection-timeout", "S", "idle HTTP connections are closed after S seconds [30]",
                 1, 3600, 30, &c.timeout),
        CLI_OPT("max-streams", "N",
                "event streams open at once; more are told 503 [64, at most max-connections/2]"),
        CLI_LONG("max-pending-per-address", "N",
                 "connections of one client address still sending their request; one more "
                 "closes the longest-waiting [32]",
                 1, 65536, 32, &c.per_address),
        CLI_LONG("header-timeout", "S",
                 "a request's headers must arrive within S seconds of the connection [10]", 1, 3600,
                 10, &c.header_s),
        CLI_LONG("body-timeout", "S",
                 "a request's body must arrive within S seconds of its headers [30]", 1, 3600, 30,
                 &c.body_s),
        CLI_LONG("evict-after-ms", "MS",
                 "with every ordinary connection taken, a new one closes the one that has "
                 "waited longest for its request, if MS or more [500]",
                 1, 3600000, 500, &c.evict_ms),
        CLI_OPT("allowed-hosts", "NAME",
                "answer requests for Host NAME too, besides IP addresses, localhost, the "
                "--listen host and on 0.0.0.0 this machine's name (others: 421); repeatable or "
                "comma-separated; '*': any [none]"),
        CLI_OPT("cors-origin", "ORIGIN",
                "let pages of ORIGIN (https://host:port) call the API; repeatable or "
                "comma-separated [none]"),
        CLI_TEXT("tls-cert", "FILE", "serve HTTPS with this PEM certificate (chain) [plain HTTP]",
                 NULL, &c.cert_path),
        CLI_TEXT("tls-key", "FILE", "the PEM private key of --tls-cert", NULL, &c.key_path),
        CLI_OPT("data-root", "DIR",
                "jobs may read data only under DIR; repeatable or ':'-separated [the "
                "Fashion-MNIST folder and the working directory]"),
        CLI_SIZE("max-steps-limit", "N",
                 "refuse jobs whose training.max_steps is above N [100000000]", 1, INT64_MAX,
                 COORD_DEFAULT_MAX_STEPS, &c.max_steps),
        CLI_SIZE("max-model-bytes", "SIZE",
                 "refuse models whose values and optimizer slots take more than SIZE [4G]", 1,
                 INT64_MAX, COORD_DEFAULT_MAX_MODEL_BYTES, &c.max_model),
        CLI_LONG("max-shards", "N",
                 "refuse jobs whose variables are cut into more than N shards [1024]", 1,
                 PF_FOOTPRINT_MAX_SHARDS, COORD_DEFAULT_MAX_SHARDS, &c.max_shards),
        CLI_LONG("max-replicas", "N", "refuse jobs with more than N ps or N worker tasks [256]", 1,
                 PF_MAX_REPLICAS, COORD_DEFAULT_MAX_REPLICAS, &c.max_replicas),
        CLI_FLAG("generate-token",
                 "create PSFLOW_TOKEN_FILE (--token-file) with a random token when it does not "
                 "exist yet",
                 &c.generate_token),
        CLI_TOKEN_FILE_OPTION,
        CLI_TEXT("agent-token-file", "FILE",
                 "the agents' token (they need no API token): read from FILE, created with a "
                 "random one when missing [PSFLOW_AGENT_TOKEN, else agent-token beside --db]",
                 NULL, &c.agent_token_file),
        CLI_FLAG("insecure",
                 "serve an API without a token on an address other than loopback (anyone who "
                 "reaches it can submit and cancel jobs)",
                 &c.insecure),
    };
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &c.run))
        return c.run.exit_code;
    int rc;
    char host[256] = "127.0.0.1";
    coord_options o = {.listen_host = host, .port = 8080, .db_path = c.db};
    if (c.listen && pf_split_host_port(c.listen, host, sizeof host, &o.port) != 0) {
        fprintf(stderr, "psflow coordinator: --listen '%s' is not HOST:PORT\n", c.listen);
        return PF_EX_USAGE;
    }
    long max_streams;
    char cors_buf[2048], roots_buf[4 * PATH_MAX], token[512], web[PATH_MAX], openapi[PATH_MAX];
    char agent_token[512];
    const char *cors[16], *roots[COORD_MAX_DATA_ROOTS], *hosts[32];
    char hosts_buf[2048];
    if ((rc = max_streams_option(&c, &max_streams)))
        return rc;
    if ((o.n_cors_origins = cors_origins(&c, cors_buf, sizeof cors_buf, cors)) < 0)
        return PF_EX_USAGE;
    o.cors_origins = cors;
    o.n_allowed_hosts = cli_get_list("coordinator", argc, argv, c.run.table, c.run.n_table,
                                     "allowed-hosts", ',', hosts_buf, sizeof hosts_buf, hosts, 32);
    if (o.n_allowed_hosts < 0)
        return PF_EX_USAGE;
    o.allowed_hosts = hosts;
    copy_limits(&c, max_streams, &o);
    if ((rc = data_roots(&c, roots_buf, sizeof roots_buf, roots, &o.limits)) ||
        (rc = load_secrets(&c, token, sizeof token, &o)))
        return rc;
    if ((rc = check_exposure(&c, &o)) ||
        (rc = load_agent_token(&c, agent_token, sizeof agent_token, &o))) {
        pf_free((char *)o.tls_cert_pem);
        pf_free((char *)o.tls_key_pem);
        return rc;
    }
    find_files(&c, web, openapi, sizeof web, &o);
    return serve(&o);
}
