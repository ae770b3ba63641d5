/* cmd_ps.c - `psflow ps`: a parameter-server task, static (--job, task from TF_CONFIG) or a
 * managed agent of a coordinator (--coordinator). */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "agent/agent.h"
#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/node.h"
#include "cli/options.h"
#include "ps/server.h"
#include "psflow/address.h"
#include "psflow/backend.h"
#include "psflow/mem.h"
#include "psflow/signals.h"
#include "psflow/wire_auth.h"

static ps_server *running_ps;

static void stop_ps(int sig) {
    (void)sig;
    if (running_ps)
        ps_server_stop(running_ps);
}

/* What `psflow ps` was told. */
typedef struct ps_cli {
    cli_run run; /* the options as parsed */
    const char *coordinator, *job, *listen, *advertise, *checkpoint_dir;
    long grace;
    long long memory;
    bool read_only;
    pf_ws_options data_plane;
} ps_cli;

/* The data plane's limits and TLS from the options into *o. Returns 0, or PF_EX_USAGE after
 * printing what is wrong. */
static int data_plane_options(const cli_option *opts, int n_opts, pf_ws_options *o) {
    long conns, untrusted, handshake, idle;
    long long buffered;
    if (cli_get_long("ps", opts, n_opts, "max-connections", 1, 100000, 0, &conns) ||
        cli_get_long("ps", opts, n_opts, "max-untrusted", 4, 100000, PF_WS_DEFAULT_MAX_UNTRUSTED,
                     &untrusted) ||
        cli_get_long("ps", opts, n_opts, "handshake-timeout", 1, 3600,
                     (long)PF_WS_DEFAULT_HANDSHAKE_TIMEOUT, &handshake) ||
        cli_get_long("ps", opts, n_opts, "idle-timeout", 1, 3600, (long)PF_WS_DEFAULT_IDLE_TIMEOUT,
                     &idle) ||
        cli_get_size("ps", opts, n_opts, "max-buffered", 1 << 20, INT64_MAX, 0, &buffered))
        return PF_EX_USAGE;
    const char *cert = cli_get(opts, n_opts, "tls-cert"), *key = cli_get(opts, n_opts, "tls-key");
    if (!cert != !key) {
        fprintf(stderr, "psflow ps: --tls-cert and --tls-key go together\n");
        return PF_EX_USAGE;
    }
    *o = (pf_ws_options){.max_connections = (int)conns,
                         .max_untrusted = (int)untrusted,
                         .handshake_timeout = (double)handshake,
                         .idle_timeout = (double)idle,
                         .max_buffered = (size_t)buffered,
                         .tls_cert = cert,
                         .tls_key = key};
    return 0;
}

/* `psflow ps --coordinator URL` without --job: a managed ps agent. */
static int run_ps_agent(const ps_cli *p) {
    char host[256] = "0.0.0.0", adv_host[256];
    int port = 2222;
    if (p->listen && pf_split_host_port(p->listen, host, sizeof host, &port) != 0) {
        fprintf(stderr, "psflow ps: --listen '%s' is not HOST:PORT\n", p->listen);
        return PF_EX_USAGE;
    }
    if (!p->listen && p->advertise &&
        pf_split_host_port(p->advertise, adv_host, sizeof adv_host, &port) != 0) {
        fprintf(stderr, "psflow ps: --advertise '%s' is not HOST:PORT\n", p->advertise);
        return PF_EX_USAGE;
    }
    char id[128], adv[300], token[512];
    node_defaults("ps", cli_get(p->run.table, p->run.n_table, "node-id"), p->advertise, port, id,
                  sizeof id, adv, sizeof adv);
    int rc = cli_coordinator_auth("ps", p->run.table, p->run.n_table, token, sizeof token);
    if (rc)
        return rc;
    agent_options ao = {.role = "ps",
                        .coordinator = p->coordinator,
                        .token = token,
                        .node_id = id,
                        .advertise = adv,
                        .listen_host = host,
                        .listen_port = port,
                        .checkpoint_dir = p->checkpoint_dir,
                        .log_every = 100,
                        .exit_grace_seconds = (double)p->grace,
                        .memory = p->memory > 0 ? p->memory : pf_mem_system_bytes(),
                        .data_plane = p->data_plane};
    return agent_run(&ao);
}

/* The address to bind for `name`, the host TF_CONFIG names for this ps: an IP address as it
 * is, a name resolved (IPv4 first) into host[256]. Returns 0, or PF_EX_USAGE after printing
 * why. */
static int tf_config_bind_host(const char *name, char *host) {
    unsigned char a[16];
    if (inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1) {
        snprintf(host, 256, "%s", name);
        return 0;
    }
    int families[] = {AF_INET, AF_UNSPEC};
    for (int i = 0; i < 2; i++) {
        struct addrinfo hints = {.ai_family = families[i], .ai_socktype = SOCK_STREAM}, *res;
        if (getaddrinfo(name, NULL, &hints, &res) != 0)
            continue;
        int ok =
            getnameinfo(res->ai_addr, res->ai_addrlen, host, 256, NULL, 0, NI_NUMERICHOST) == 0;
        freeaddrinfo(res);
        if (ok)
            return 0;
    }
    fprintf(stderr,
            "psflow ps: cannot resolve '%s', this task's host in TF_CONFIG, to bind it: give "
            "--listen HOST:PORT (0.0.0.0:PORT for every interface)\n",
            name);
    return PF_EX_USAGE;
}

/* Loads --job and TF_CONFIG for a ps task that fits this machine, and the address it binds
 * (--listen, else the host and port TF_CONFIG names for it: never every interface unless
 * told) into host[256] and *port. Returns 0, or an exit code after printing why (n then
 * holds nothing). */
static int load_ps_task(const ps_cli *p, node *n, char *host, int *port) {
    int rc = node_load("ps", p->job, p->read_only, n);
    if (rc)
        return rc;
    if (strcmp(n->type, "ps") != 0) {
        fprintf(stderr, "psflow ps: TF_CONFIG says this task's type is %s, not ps\n", n->type);
        rc = PF_EX_USAGE;
    }
    if (!rc)
        rc = node_check_fit("ps", &n->spec, "ps", n->index, p->memory);
    const char *own = pf_tf_config_address(&n->cfg, "ps", n->index);
    char own_host[256];
    if (!rc && ((p->listen && pf_split_host_port(p->listen, host, 256, port) != 0) ||
                (!p->listen && pf_split_host_port(own, own_host, sizeof own_host, port) != 0))) {
        fprintf(stderr, "psflow ps: '%s' is not HOST:PORT\n", p->listen ? p->listen : own);
        rc = PF_EX_USAGE;
    }
    if (!rc && !p->listen)
        rc = tf_config_bind_host(own_host, host);
    if (rc)
        node_deinit(n);
    return rc;
}

/* `psflow ps --job FILE`: the ps task TF_CONFIG names, until the job ends or a signal. */
static int run_static_ps(const ps_cli *p) {
    node n;
    char host[256] = "0.0.0.0";
    int port = 0;
    int rc = load_ps_task(p, &n, host, &port);
    if (rc)
        return rc;
    uint8_t key[PF_WIRE_KEY_SIZE];
    int has_key = node_job_key("ps", n.spec.name, key);
    if (has_key < 0) {
        node_deinit(&n);
        return -has_key;
    }
    ps_server_options so = {&n.spec,
                            n.index,
                            host,
                            port,
                            p->checkpoint_dir,
                            node_incarnation(),
                            (double)p->grace,
                            has_key ? key : NULL,
                            p->data_plane,
                            p->read_only};
    pf_error err;
    pf_error_clear(&err);
    ps_server *s;
    pf_status started = ps_server_start(&so, &s, &err);
    pf_wire_key_clear(key, sizeof key);
    if (started != PF_OK) {
        fprintf(stderr, "psflow ps %d: %s\n", n.index, err.message);
        node_deinit(&n);
        return PF_EX_UNAVAILABLE;
    }
    fprintf(stderr, "psflow ps %d: listening on %s:%d (%s), advertised as %s\n", n.index, host,
            ps_server_port(s), p->data_plane.tls_cert ? "TLS" : "plain TCP",
            p->advertise ? p->advertise : pf_tf_config_address(&n.cfg, "ps", n.index));
    running_ps = s;
    pf_signals_on_stop(stop_ps);
    /* A read-only ps serves until it is stopped: that is its normal end. */
    rc = ps_server_wait(s) == 0 || p->read_only ? 0 : 130;
    running_ps = NULL;
    ps_server_destroy(s);
    node_deinit(&n);
    return rc;
}

int cli_ps(const cli_command *cmd, int argc, char **argv) {
    ps_cli p;
    cli_option opts[] = {
        CLI_TEXT("coordinator", "URL", "run as a managed agent of this coordinator (no --job)",
                 NULL, &p.coordinator),
        CLI_OPT("node-id", "ID", "managed: this agent's id [ps-<hostname>-<pid>]"),
        CLI_TEXT("job", "FILE", "static mode: the job spec (JSON); the task comes from TF_CONFIG",
                 NULL, &p.job),
        CLI_TEXT("listen", "HOST:PORT",
                 "address to bind [managed: 0.0.0.0:2222; static: this task's TF_CONFIG "
                 "address]",
                 NULL, &p.listen),
        CLI_TEXT("advertise", "HOST:PORT",
                 "address workers reach this ps at [this task's TF_CONFIG address]", NULL,
                 &p.advertise),
        CLI_TEXT("checkpoint-dir", "DIR",
                 "checkpoint root, shared by the job's tasks [./checkpoints]", "./checkpoints",
                 &p.checkpoint_dir),
        CLI_FLAG("read-only",
                 "static mode: serve the newest complete checkpoint to psflow serve --ps and "
                 "change nothing; TF_CONFIG names the serving cluster's ps tasks",
                 &p.read_only),
        CLI_LONG("exit-grace", "SECONDS",
                 "after the final checkpoint, wait for workers to leave [10]", 0, 3600, 10,
                 &p.grace),
        NODE_MEMORY_OPTION(&p.memory),
        CLI_CA_FILE_OPTION,
        CLI_TOKEN_FILE_OPTION,
        CLI_AGENT_TOKEN_FILE_OPTION,
        CLI_OPT("tls-cert", "FILE",
                "serve the data plane over TLS (wss) with this PEM certificate [plain TCP]"),
        CLI_OPT("tls-key", "FILE", "the PEM private key of --tls-cert"),
        CLI_OPT("max-connections", "N",
                "data-plane connections of the job's own tasks (HELLO, and the key's proof, "
                "accepted) open at once [twice the job's training tasks + 32]"),
        CLI_OPT("max-untrusted", "N",
                "data-plane connections not yet accepted by HELLO open at once, a quarter of "
                "them from one address; a new one replaces the one stalled longest [64]"),
        CLI_OPT("handshake-timeout", "SECONDS",
                "close a connection whose WebSocket (and TLS) handshake is not done by then [10]"),
        CLI_OPT("idle-timeout", "SECONDS",
                "close a connection that has not been accepted by HELLO by then [30]"),
        CLI_OPT("max-buffered", "BYTES",
                "bytes of incomplete messages held over the job's tasks' connections "
                "[(training tasks + 4) x the largest message]"),
        CLI_OPT("shm", "on|off",
                "map the shared segments of workers on this host; off: everything over the "
                "socket [on]"),
        CLI_OPT("shm-dir", "DIR",
                "listen on a Unix socket in DIR for the segments of workers in other containers "
                "or pods of this host [none: only workers that share this PID namespace]"),
    };
    p.read_only = false;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &p.run))
        return p.run.exit_code;
    if (p.read_only && (!p.job || (p.coordinator && *p.coordinator))) {
        fprintf(stderr, "psflow ps: --read-only is static mode: give --job FILE and no "
                        "--coordinator\n");
        return PF_EX_USAGE;
    }
    /* A ps runs no matrix products: one BLAS thread, and OpenBLAS's pool (started when the
     * library loaded) put to sleep. */
    node_set_threads(1, 1, NULL, 0);
    pf_backend_openblas_idle();
    if (cli_use_shm("ps", p.run.table, p.run.n_table))
        return PF_EX_USAGE;
    int rc = data_plane_options(p.run.table, p.run.n_table, &p.data_plane);
    if (rc)
        return rc;
    return p.coordinator && !p.job ? run_ps_agent(&p) : run_static_ps(&p);
}
