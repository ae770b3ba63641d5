/* cmd_worker.c - `psflow worker`: a training task (worker or chief), static (--job, task
 * from TF_CONFIG) or a managed agent of a coordinator (--coordinator). */
#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/reporter.h"
#include "cli/cli.h"
#include "cli/node.h"
#include "cli/options.h"
#include "psflow/mem.h"
#include "psflow/wire_auth.h"
#include "worker/trainer.h"

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
        NODE_MEMORY_OPTION,
        NODE_THREADS_OPTION,
        {"ca-file", "FILE",
         "trust only this PEM CA for an https:// coordinator, and dial the ps over TLS (wss) "
         "verifying them with it [the system's CAs; plain TCP to the ps]",
         NULL},
        CLI_TOKEN_FILE_OPTION,
        {"shm", "on|off",
         "offer the ps tasks a shared segment (used by those on this host); off: everything over "
         "the socket [on]",
         NULL},
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
    long log_every, retry, delay, threads;
    long long memory;
    if (cli_get_long("worker", opts, n_opts, "log-every", 1, 1L << 40, 100, &log_every) ||
        cli_get_long("worker", opts, n_opts, "threads", 1, 4096, 0, &threads) ||
        cli_get_long("worker", opts, n_opts, "retry-seconds", 1, 86400, 120, &retry) ||
        cli_get_long("worker", opts, n_opts, "push-delay-ms", 0, 60000, 0, &delay) ||
        cli_get_size("worker", opts, n_opts, "memory", 1, INT64_MAX, 0, &memory) ||
        cli_use_shm("worker", opts, n_opts))
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
        int trc = cli_token("worker", token, sizeof token);
        if (trc || (trc = cli_use_ca_file("worker", opts, n_opts)))
            return trc;
        if (threads > 0) /* otherwise every core, as OpenBLAS sizes itself */
            node_set_threads(threads, 1, NULL, 0);
        const char *dir = cli_get(opts, n_opts, "checkpoint-dir");
        agent_options ao = {.role = "worker",
                            .coordinator = coordinator,
                            .token = token,
                            .node_id = id,
                            .advertise = adv,
                            .checkpoint_dir = dir ? dir : "./checkpoints",
                            .log_every = log_every,
                            .retry_seconds = (double)retry,
                            .push_delay_ms = delay,
                            .memory = memory > 0 ? memory : pf_mem_system_bytes(),
                            .data_plane = {.ca_file = cli_get(opts, n_opts, "ca-file")}};
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
    if ((rc = node_check_fit("worker", &n.spec, "worker", n.index, memory))) {
        node_deinit(&n);
        return rc;
    }
    char threads_note[128];
    node_set_threads(threads, pf_tf_config_trainers_on_host(&n.cfg), threads_note,
                     sizeof threads_note);
    const char *addrs[PF_MAX_REPLICAS];
    for (int p = 0; p < n.spec.replicas.ps; p++)
        addrs[p] = pf_tf_config_address(&n.cfg, "ps", p);
    const char *ckpt = cli_get(opts, n_opts, "checkpoint-dir");
    worker_options wo = {
        .spec = &n.spec,
        .ps_addrs = addrs,
        .task = is_chief_type ? 0 : n.index + has_chief,
        .is_chief = is_chief_type || (!has_chief && n.index == 0),
        .incarnation = node_incarnation(),
        .checkpoint_dir = ckpt ? ckpt : "./checkpoints",
        .log_every = log_every,
        .json = output && !strcmp(output, "json"),
        .retry_seconds = (double)retry,
        .push_delay_ms = delay,
        .ca_file = cli_get(opts, n_opts, "ca-file"),
        .threads_note = threads_note,
    };
    uint8_t key[PF_WIRE_KEY_SIZE];
    int has_key = node_job_key("worker", n.spec.name, key);
    if (has_key < 0) {
        node_deinit(&n);
        return -has_key;
    }
    wo.job_key = has_key ? key : NULL;
    agent_reporter *rep = NULL;
    if (coordinator) {
        char token[512], name[32];
        rc = cli_token("worker", token, sizeof token);
        if (rc || (rc = cli_use_ca_file("worker", opts, n_opts))) {
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
    pf_wire_key_clear(key, sizeof key);
    agent_reporter_destroy(rep, 5.0);
    rc = st == PF_OK ? 0 : pf_exit_code(st);
    node_deinit(&n);
    return rc;
}
