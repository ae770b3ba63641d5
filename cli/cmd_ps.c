/* cmd_ps.c - `psflow ps`: a parameter-server task, static (--job, task from TF_CONFIG) or a
 * managed agent of a coordinator (--coordinator). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "cli/cli.h"
#include "cli/node.h"
#include "cli/options.h"
#include "ps/server.h"
#include "psflow/address.h"
#include "psflow/backend.h"
#include "psflow/mem.h"
#include "psflow/wire_auth.h"

static ps_server *running_ps;

static void stop_ps(int sig) {
    (void)sig;
    if (running_ps)
        ps_server_stop(running_ps);
}

/* The data plane's limits and TLS from the options into *o. Returns 0, or PF_EX_USAGE after
 * printing what is wrong. */
static int data_plane_options(const cli_option *opts, int n_opts, pf_ws_options *o) {
    long conns, handshake, idle;
    long long buffered;
    if (cli_get_long("ps", opts, n_opts, "max-connections", 1, 100000, 0, &conns) ||
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
                         .handshake_timeout = (double)handshake,
                         .idle_timeout = (double)idle,
                         .max_buffered = (size_t)buffered,
                         .tls_cert = cert,
                         .tls_key = key};
    return 0;
}

/* `psflow ps --coordinator URL` without --job: a managed ps agent; grace is --exit-grace. */
static int run_ps_agent(const cli_option *opts, int n_opts, const char *coordinator, double grace,
                        long long memory, const pf_ws_options *data_plane) {
    const char *listen = cli_get(opts, n_opts, "listen");
    const char *advertise = cli_get(opts, n_opts, "advertise");
    char host[256] = "0.0.0.0", adv_host[256];
    int port = 2222;
    if (listen && pf_split_host_port(listen, host, sizeof host, &port) != 0) {
        fprintf(stderr, "psflow ps: --listen '%s' is not HOST:PORT\n", listen);
        return PF_EX_USAGE;
    }
    if (!listen && advertise &&
        pf_split_host_port(advertise, adv_host, sizeof adv_host, &port) != 0) {
        fprintf(stderr, "psflow ps: --advertise '%s' is not HOST:PORT\n", advertise);
        return PF_EX_USAGE;
    }
    char id[128], adv[300], token[512];
    node_defaults("ps", cli_get(opts, n_opts, "node-id"), advertise, port, id, sizeof id, adv,
                  sizeof adv);
    int rc = cli_token("ps", token, sizeof token);
    if (rc || (rc = cli_use_ca_file("ps", opts, n_opts)))
        return rc;
    const char *ckpt = cli_get(opts, n_opts, "checkpoint-dir");
    agent_options ao = {.role = "ps",
                        .coordinator = coordinator,
                        .token = token,
                        .node_id = id,
                        .advertise = adv,
                        .listen_host = host,
                        .listen_port = port,
                        .checkpoint_dir = ckpt ? ckpt : "./checkpoints",
                        .log_every = 100,
                        .exit_grace_seconds = grace,
                        .memory = memory > 0 ? memory : pf_mem_system_bytes(),
                        .data_plane = *data_plane};
    return agent_run(&ao);
}

int cli_ps(int argc, char **argv) {
    cli_option opts[] = {
        {"coordinator", "URL", "run as a managed agent of this coordinator (no --job)", NULL},
        {"node-id", "ID", "managed: this agent's id [ps-<hostname>-<pid>]", NULL},
        {"job", "FILE", "static mode: the job spec (JSON); the task comes from TF_CONFIG", NULL},
        {"listen", "HOST:PORT", "address to bind [0.0.0.0 and the port of this task in TF_CONFIG]",
         NULL},
        {"advertise", "HOST:PORT",
         "address workers reach this ps at [this task's TF_CONFIG address]", NULL},
        {"checkpoint-dir", "DIR", "checkpoint root, shared by the job's tasks [./checkpoints]",
         NULL},
        {"exit-grace", "SECONDS", "after the final checkpoint, wait for workers to leave [10]",
         NULL},
        NODE_MEMORY_OPTION,
        CLI_CA_FILE_OPTION,
        CLI_TOKEN_FILE_OPTION,
        {"tls-cert", "FILE",
         "serve the data plane over TLS (wss) with this PEM certificate "
         "[plain TCP]",
         NULL},
        {"tls-key", "FILE", "the PEM private key of --tls-cert", NULL},
        {"max-connections", "N",
         "data-plane connections open at once [twice the job's training tasks + 32]", NULL},
        {"handshake-timeout", "SECONDS",
         "close a connection whose WebSocket (and TLS) handshake is not done by then [10]", NULL},
        {"idle-timeout", "SECONDS",
         "close a connection that has not been accepted by HELLO by then [30]", NULL},
        {"max-buffered", "BYTES",
         "bytes of incomplete messages held over all connections [(training tasks + 4) x the "
         "largest message]",
         NULL},
        {"shm", "on|off",
         "map the shared segments of workers on this host; off: everything over the socket [on]",
         NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (cli_parse("ps", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help("ps", "--job FILE [options]  |  --coordinator URL [options]",
                       "Runs a parameter-server task. Static mode (--job): the task (type ps, "
                       "index) and the\ncluster come from the TF_CONFIG environment variable, "
                       "as Kubeflow's TFJob operator\nsets it; it restores the job's newest "
                       "complete checkpoint, serves its shards until the\nchief's final "
                       "checkpoint, then exits 0. Managed mode (--coordinator without --job):\n"
                       "registers as an idle ps agent, runs the ps tasks it is assigned (listening "
                       "on --listen,\n[0.0.0.0 and the --advertise port, 2222]) and returns to "
                       "the pool after each job;\nSIGTERM stops it and deregisters.",
                       opts, n_opts);
        return 0;
    }
    /* A ps runs no matrix products: one BLAS thread, and OpenBLAS's pool (started when the
     * library loaded) put to sleep. */
    node_set_threads(1, 1, NULL, 0);
    pf_backend_openblas_idle();
    long grace;
    long long memory;
    if (cli_get_long("ps", opts, n_opts, "exit-grace", 0, 3600, 10, &grace) ||
        cli_get_size("ps", opts, n_opts, "memory", 1, INT64_MAX, 0, &memory))
        return PF_EX_USAGE;
    if (cli_use_shm("ps", opts, n_opts))
        return PF_EX_USAGE;
    pf_ws_options data_plane;
    int drc = data_plane_options(opts, n_opts, &data_plane);
    if (drc)
        return drc;
    const char *coordinator = cli_get(opts, n_opts, "coordinator");
    if (coordinator && !cli_get(opts, n_opts, "job"))
        return run_ps_agent(opts, n_opts, coordinator, (double)grace, memory, &data_plane);
    node n;
    int rc = node_load("ps", cli_get(opts, n_opts, "job"), &n);
    if (rc)
        return rc;
    if (strcmp(n.type, "ps") != 0) {
        fprintf(stderr, "psflow ps: TF_CONFIG says this task is a %s, not a ps\n", n.type);
        node_deinit(&n);
        return PF_EX_USAGE;
    }
    if ((rc = node_check_fit("ps", &n.spec, "ps", n.index, memory))) {
        node_deinit(&n);
        return rc;
    }
    const char *own = pf_tf_config_address(&n.cfg, "ps", n.index);
    const char *listen = cli_get(opts, n_opts, "listen");
    char host[256] = "0.0.0.0";
    int port = 0;
    char own_host[256];
    if ((listen && pf_split_host_port(listen, host, sizeof host, &port) != 0) ||
        (!listen && pf_split_host_port(own, own_host, sizeof own_host, &port) != 0)) {
        fprintf(stderr, "psflow ps: '%s' is not HOST:PORT\n", listen ? listen : own);
        node_deinit(&n);
        return PF_EX_USAGE;
    }
    const char *ckpt = cli_get(opts, n_opts, "checkpoint-dir");
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
                            ckpt ? ckpt : "./checkpoints",
                            node_incarnation(),
                            (double)grace,
                            has_key ? key : NULL,
                            data_plane};
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
    const char *advertise = cli_get(opts, n_opts, "advertise");
    fprintf(stderr, "psflow ps %d: listening on %s:%d, advertised as %s\n", n.index, host,
            ps_server_port(s), advertise ? advertise : own);
    running_ps = s;
    signal(SIGINT, stop_ps);
    signal(SIGTERM, stop_ps);
    rc = ps_server_wait(s) == 0 ? 0 : 130;
    running_ps = NULL;
    ps_server_destroy(s);
    node_deinit(&n);
    return rc;
}
