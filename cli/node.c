/* node.c - `psflow ps` and `psflow worker` started the Kubeflow TFJob way: the task comes
 * from TF_CONFIG in the environment, the job from --job spec.json (DESIGN.md section 1,
 * "Static"). The cluster's shape in TF_CONFIG must match the spec's replicas, so that every
 * process computes the same placement.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "agent/agent.h"
#include "agent/reporter.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "psflow/address.h"
#include "psflow/clock.h"
#include "psflow/http_client.h"
#include "psflow/tf_config.h"
#include "ps/server.h"
#include "worker/trainer.h"

typedef struct node {
    pf_job_spec spec;
    pf_tf_config cfg;
    const char *type; /* task type from TF_CONFIG */
    int index;
} node;

static void node_deinit(node *n) {
    pf_job_spec_deinit(&n->spec);
    pf_tf_config_deinit(&n->cfg);
}

/* Loads --job and TF_CONFIG and checks they agree. Returns 0 or an exit code. */
static int node_load(const char *cmd, const char *job_path, node *n) {
    memset(n, 0, sizeof *n);
    pf_error err;
    pf_error_clear(&err);
    if (!job_path) {
        fprintf(stderr, "psflow %s: --job FILE is required (see 'psflow %s --help')\n", cmd, cmd);
        return PF_EX_USAGE;
    }
    pf_status st = pf_job_spec_load(job_path, &n->spec, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow %s: %s: %s\n", cmd, job_path, err.message);
        return st == PF_ERR_IO ? PF_EX_NOINPUT : PF_EX_DATAERR;
    }
    const char *tf = getenv("TF_CONFIG");
    if (!tf || !*tf) {
        fprintf(stderr,
                "psflow %s: TF_CONFIG is not set: set it to this task's cluster and task, e.g. "
                "{\"cluster\":{\"ps\":[\"host:2222\"],\"worker\":[\"host:2223\"]},"
                "\"task\":{\"type\":\"%s\",\"index\":0}}\n",
                cmd, cmd);
        return PF_EX_USAGE;
    }
    if (pf_tf_config_parse(tf, strlen(tf), &n->cfg, &err) != PF_OK ||
        pf_tf_config_validate(&n->cfg, &err) != PF_OK) {
        fprintf(stderr, "psflow %s: %s\n", cmd, err.message);
        return PF_EX_DATAERR;
    }
    n->type = n->cfg.task_type;
    n->index = n->cfg.task_index;
    const struct {
        const char *job;
        int want;
    } shape[] = {{"ps", n->spec.replicas.ps},
                 {"worker", n->spec.replicas.worker},
                 {"chief", n->spec.replicas.chief}};
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        int have = pf_tf_config_count(&n->cfg, shape[i].job);
        if (have != shape[i].want) {
            fprintf(stderr,
                    "psflow %s: TF_CONFIG has %d %s task(s) but the job spec's replicas.%s is %d: "
                    "make them agree\n",
                    cmd, have, shape[i].job, shape[i].job, shape[i].want);
            return PF_EX_DATAERR;
        }
    }
    return 0;
}

static uint64_t new_incarnation(void) {
    /* Microseconds since the epoch: a restarted task always gets a larger one. */
    return (uint64_t)(pf_clock_wall() * 1e6);
}

static ps_server *running_ps;

static void stop_ps(int sig) {
    (void)sig;
    if (running_ps)
        ps_server_stop(running_ps);
}

/* Defaults of a managed node: id "<role>-<hostname>-<pid>", address "<hostname>:<port>". */
static void node_defaults(const char *role, const char *id, const char *advertise, int port,
                          char *id_out, size_t id_cap, char *adv_out, size_t adv_cap) {
    char host[200] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    if (id)
        snprintf(id_out, id_cap, "%s", id);
    else
        snprintf(id_out, id_cap, "%s-%s-%d", role, host, (int)getpid());
    if (advertise)
        snprintf(adv_out, adv_cap, "%s", advertise);
    else
        snprintf(adv_out, adv_cap, "%s:%d", host, port);
}

static int token_or_exit(const char *cmd, char *token, size_t cap) {
    pf_error err;
    pf_error_clear(&err);
    if (!pf_http_token_from_env(token, cap, &err)) {
        fprintf(stderr, "psflow %s: %s\n", cmd, err.message);
        return PF_EX_NOINPUT;
    }
    return 0;
}

/* `psflow ps --coordinator URL` without --job: a managed ps agent; grace is --exit-grace. */
static int run_ps_agent(const cli_option *opts, int n_opts, const char *coordinator, double grace) {
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
    int rc = token_or_exit("ps", token, sizeof token);
    if (rc)
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
                        .exit_grace_seconds = grace};
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
    long grace;
    if (cli_get_long("ps", opts, n_opts, "exit-grace", 0, 3600, 10, &grace))
        return PF_EX_USAGE;
    const char *coordinator = cli_get(opts, n_opts, "coordinator");
    if (coordinator && !cli_get(opts, n_opts, "job"))
        return run_ps_agent(opts, n_opts, coordinator, (double)grace);
    node n;
    int rc = node_load("ps", cli_get(opts, n_opts, "job"), &n);
    if (rc)
        return rc;
    if (strcmp(n.type, "ps") != 0) {
        fprintf(stderr, "psflow ps: TF_CONFIG says this task is a %s, not a ps\n", n.type);
        node_deinit(&n);
        return PF_EX_USAGE;
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
    ps_server_options so = {
        &n.spec,           n.index,      host, port, ckpt ? ckpt : "./checkpoints",
        new_incarnation(), (double)grace};
    pf_error err;
    pf_error_clear(&err);
    ps_server *s;
    if (ps_server_start(&so, &s, &err) != PF_OK) {
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

int cli_worker(int argc, char **argv) {
    cli_option opts[] = {
        {"coordinator", "URL",
         "managed agent of this coordinator (no --job); with --job: report metrics there", NULL},
        {"node-id", "ID", "managed: this agent's id [worker-<hostname>-<pid>]", NULL},
        {"advertise", "HOST:PORT", "managed: this task's address in TF_CONFIG [<hostname>:2222]",
         NULL},
        {"job", "FILE", "static mode: the job spec (JSON); the task comes from TF_CONFIG", NULL},
        {"checkpoint-dir", "DIR", "checkpoint root, shared by the job's tasks [./checkpoints]",
         NULL},
        {"output", "FORMAT", "chief's result: text (default) or json", NULL},
        {"log-every", "N", "progress line every N steps of this task [100]", NULL},
        {"retry-seconds", "S", "keep reconnecting to a lost ps for S seconds [120]", NULL},
        {"push-delay-ms", "MS", "testing: wait MS milliseconds before every push [0]", NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (cli_parse("worker", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help("worker", "--job FILE [options]  |  --coordinator URL [options]",
                       "Runs a training task (TF_CONFIG task type worker or chief; worker 0 is "
                       "the chief\nwhen the cluster has no chief task). The chief evaluates, "
                       "checkpoints and, at\ntraining.max_steps, ends the job. Managed mode "
                       "(--coordinator without --job): registers\nas an idle worker agent and "
                       "runs the chief or worker tasks it is assigned; SIGTERM\nfinishes the "
                       "current step, stops and deregisters.",
                       opts, n_opts);
        return 0;
    }
    long log_every, retry, delay;
    if (cli_get_long("worker", opts, n_opts, "log-every", 1, 1L << 40, 100, &log_every) ||
        cli_get_long("worker", opts, n_opts, "retry-seconds", 1, 86400, 120, &retry) ||
        cli_get_long("worker", opts, n_opts, "push-delay-ms", 0, 60000, 0, &delay))
        return PF_EX_USAGE;
    const char *coordinator = cli_get(opts, n_opts, "coordinator");
    if (coordinator && !cli_get(opts, n_opts, "job")) {
        if (cli_get(opts, n_opts, "output")) {
            fprintf(stderr, "psflow worker: --output is for static mode (--job); a managed "
                            "chief reports its result to the coordinator\n");
            return PF_EX_USAGE;
        }
        char id[128], adv[300], token[512];
        node_defaults("worker", cli_get(opts, n_opts, "node-id"),
                      cli_get(opts, n_opts, "advertise"), 2222, id, sizeof id, adv, sizeof adv);
        int trc = token_or_exit("worker", token, sizeof token);
        if (trc)
            return trc;
        const char *dir = cli_get(opts, n_opts, "checkpoint-dir");
        agent_options ao = {.role = "worker",
                            .coordinator = coordinator,
                            .token = token,
                            .node_id = id,
                            .advertise = adv,
                            .checkpoint_dir = dir ? dir : "./checkpoints",
                            .log_every = log_every,
                            .retry_seconds = (double)retry,
                            .push_delay_ms = delay};
        return agent_run(&ao);
    }
    const char *output = cli_get(opts, n_opts, "output");
    if (output && strcmp(output, "json") != 0 && strcmp(output, "text") != 0) {
        fprintf(stderr, "psflow worker: --output must be text or json, got '%s'\n", output);
        return PF_EX_USAGE;
    }
    node n;
    int rc = node_load("worker", cli_get(opts, n_opts, "job"), &n);
    if (rc)
        return rc;
    int has_chief = pf_tf_config_count(&n.cfg, "chief") > 0;
    int is_chief_type = !strcmp(n.type, "chief");
    if (!is_chief_type && strcmp(n.type, "worker") != 0) {
        fprintf(stderr, "psflow worker: TF_CONFIG says this task is a %s; run 'psflow %s'\n",
                n.type, n.type);
        node_deinit(&n);
        return PF_EX_USAGE;
    }
    const char *addrs[PF_MAX_REPLICAS];
    for (int p = 0; p < n.spec.replicas.ps; p++)
        addrs[p] = pf_tf_config_address(&n.cfg, "ps", p);
    const char *ckpt = cli_get(opts, n_opts, "checkpoint-dir");
    worker_options wo = {
        .spec = &n.spec,
        .ps_addrs = addrs,
        .task = is_chief_type ? 0 : n.index + has_chief,
        .is_chief = is_chief_type || (!has_chief && n.index == 0),
        .incarnation = new_incarnation(),
        .checkpoint_dir = ckpt ? ckpt : "./checkpoints",
        .log_every = log_every,
        .json = output && !strcmp(output, "json"),
        .retry_seconds = (double)retry,
        .push_delay_ms = delay,
    };
    agent_reporter *rep = NULL;
    if (coordinator) {
        char token[512], name[32];
        rc = token_or_exit("worker", token, sizeof token);
        if (rc) {
            node_deinit(&n);
            return rc;
        }
        if (wo.is_chief)
            snprintf(name, sizeof name, "chief");
        else
            snprintf(name, sizeof name, "worker-%d", n.index);
        rep = agent_reporter_create(coordinator, token, n.spec.name, name);
        wo.report = agent_reporter_add;
        wo.report_ctx = rep;
    }
    pf_status st = worker_run(&wo);
    agent_reporter_destroy(rep, 5.0);
    rc = st == PF_OK ? 0 : pf_exit_code(st);
    node_deinit(&n);
    return rc;
}
