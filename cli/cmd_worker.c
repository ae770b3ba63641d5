/* cmd_worker.c - `psflow worker`: a training task (worker or chief), static (--job, task
 * from TF_CONFIG) or a managed agent of a coordinator (--coordinator). */
#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/reporter.h"
#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/node.h"
#include "cli/options.h"
#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/wire_auth.h"
#include "worker/trainer.h"

/* What `psflow worker` was told. */
typedef struct worker_cli {
    cli_run run; /* the options as parsed */
    const char *coordinator, *job, *checkpoint_dir, *ca_file, *task_key_file;
    int format; /* --output: -1 absent, 0 text, 1 json */
    long log_every, retry, delay, threads;
    long long memory;
} worker_cli;

/* `psflow worker --coordinator URL` without --job: a managed worker agent. */
static int run_worker_agent(const worker_cli *w) {
    if (w->format >= 0) {
        fprintf(stderr, "psflow worker: --output is for static mode (--job); a managed "
                        "chief reports its result to the coordinator\n");
        return PF_EX_USAGE;
    }
    if (w->task_key_file) {
        fprintf(stderr, "psflow worker: --task-key-file is for static mode (--job); a managed "
                        "agent gets each task's key from the coordinator\n");
        return PF_EX_USAGE;
    }
    char id[128], adv[300], token[512], serve_token[512];
    node_defaults("worker", cli_get(w->run.table, w->run.n_table, "node-id"),
                  cli_get(w->run.table, w->run.n_table, "advertise"), 0, id, sizeof id, adv,
                  sizeof adv);
    int rc = cli_coordinator_auth("worker", w->run.table, w->run.n_table, token, sizeof token);
    if (!rc) /* the job API's token, which the job's serving tasks require (docs/serving.md) */
        rc = cli_token("worker", serve_token, sizeof serve_token);
    if (rc)
        return rc;
    if (w->threads > 0) /* otherwise every core, as OpenBLAS sizes itself */
        node_set_threads(w->threads, 1, NULL, 0);
    agent_options ao = {.role = "worker",
                        .coordinator = w->coordinator,
                        .token = token,
                        .serve_token = serve_token,
                        .node_id = id,
                        .advertise = adv,
                        .checkpoint_dir = w->checkpoint_dir,
                        .log_every = w->log_every,
                        .retry_seconds = (double)w->retry,
                        .push_delay_ms = w->delay,
                        .memory = w->memory > 0 ? w->memory : pf_mem_system_bytes(),
                        .data_plane = {.ca_file = w->ca_file}};
    return agent_run(&ao);
}

/* Loads --job and TF_CONFIG for a training task (worker or chief) that fits this machine.
 * Returns 0, or an exit code after printing why (n then holds nothing). */
static int load_training_task(const worker_cli *w, node *n) {
    int rc = node_load("worker", w->job, false, n);
    if (rc)
        return rc;
    if (strcmp(n->type, "chief") != 0 && strcmp(n->type, "worker") != 0) {
        fprintf(stderr, "psflow worker: TF_CONFIG says this task's type is %s; run 'psflow %s'\n",
                n->type, n->type);
        rc = PF_EX_USAGE;
    }
    if (rc || (rc = node_check_fit("worker", &n->spec, "worker", n->index, w->memory)))
        node_deinit(n);
    return rc;
}

/* --task-key-file: this task's own data-plane key (64 hex digits, psflow key). Returns 1
 * with key set, 0 when not given, or minus the exit code after printing why. */
static int read_task_key(const worker_cli *w, uint8_t key[PF_WIRE_KEY_SIZE]) {
    if (!w->task_key_file)
        return 0;
    char *text = NULL;
    size_t len = 0;
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_fs_read_file(w->task_key_file, 1024, &text, &len, &err);
    if (st == PF_OK) {
        st = pf_wire_key_parse_hex(text, len, key);
        pf_wire_key_clear(text, len);
        pf_free(text);
        if (st == PF_OK)
            return 1;
        fprintf(stderr,
                "psflow worker: --task-key-file %s: not 64 hex digits (make it with 'psflow key "
                "--job FILE --task TYPE:INDEX')\n",
                w->task_key_file);
        return -PF_EX_DATAERR;
    }
    fprintf(stderr, "psflow worker: --task-key-file: %s\n", err.message);
    return -PF_EX_NOINPUT;
}

/* `psflow worker --job FILE`: the training task TF_CONFIG names. */
static int run_static_worker(const worker_cli *w) {
    node n;
    int rc = load_training_task(w, &n);
    if (rc)
        return rc;
    int has_chief = pf_tf_config_count(&n.cfg, "chief") > 0;
    int is_chief_type = !strcmp(n.type, "chief");
    char threads_note[128];
    node_set_threads(w->threads, pf_tf_config_trainers_on_host(&n.cfg), threads_note,
                     sizeof threads_note);
    const char *addrs[PF_MAX_REPLICAS];
    for (int p = 0; p < n.spec.replicas.ps; p++)
        addrs[p] = pf_tf_config_address(&n.cfg, "ps", p);
    worker_options wo = {
        .spec = &n.spec,
        .ps_addrs = addrs,
        .task = is_chief_type ? 0 : n.index + has_chief,
        .is_chief = is_chief_type || (!has_chief && n.index == 0),
        .incarnation = node_incarnation(),
        .checkpoint_dir = w->checkpoint_dir,
        .log_every = w->log_every,
        .json = w->format == 1,
        .retry_seconds = (double)w->retry,
        .push_delay_ms = w->delay,
        .ca_file = w->ca_file,
        .threads_note = threads_note,
    };
    /* Its own key (--task-key-file), else the job key from the token. */
    uint8_t key[PF_WIRE_KEY_SIZE];
    int has_task_key = read_task_key(w, key);
    int has_key = has_task_key ? has_task_key : node_job_key("worker", n.spec.name, key);
    if (has_key < 0) {
        node_deinit(&n);
        return -has_key;
    }
    wo.job_key = has_key && !has_task_key ? key : NULL;
    wo.task_key = has_task_key ? key : NULL;
    char name[32];
    if (wo.is_chief)
        snprintf(name, sizeof name, "chief");
    else
        snprintf(name, sizeof name, "worker-%d", n.index);
    rc = node_reporter_start("worker", w->run.table, w->run.n_table, w->coordinator, n.spec.name,
                             name, &wo.report, &wo.report_ctx);
    if (rc) {
        node_deinit(&n);
        return rc;
    }
    worker_result result;
    pf_status st = worker_run(&wo, &result);
    worker_result_print(&wo, &result);
    pf_wire_key_clear(key, sizeof key);
    agent_reporter_destroy(wo.report_ctx, 5.0);
    rc = st == PF_OK ? 0 : pf_exit_code(st);
    node_deinit(&n);
    return rc;
}

int cli_worker(const cli_command *cmd, int argc, char **argv) {
    worker_cli w;
    cli_option opts[] = {
        CLI_TEXT("coordinator", "URL",
                 "managed agent of this coordinator (no --job); with --job: report metrics there",
                 NULL, &w.coordinator),
        CLI_OPT("node-id", "ID", "managed: this agent's id [worker-<hostname>-<pid>]"),
        CLI_OPT("advertise", "HOST:PORT",
                "managed: this task's address in TF_CONFIG [<hostname>:<a port this agent "
                "reserves>]"),
        CLI_TEXT("job", "FILE", "static mode: the job spec (JSON); the task comes from TF_CONFIG",
                 NULL, &w.job),
        CLI_TEXT("checkpoint-dir", "DIR",
                 "checkpoint root, shared by the job's tasks [./checkpoints]", "./checkpoints",
                 &w.checkpoint_dir),
        CLI_CHOICE("output", "FORMAT", "chief's result: text (default) or json", "text|json",
                   &w.format),
        CLI_LONG("log-every", "N", "progress line every N steps of this task [100]", 1, 1L << 40,
                 100, &w.log_every),
        CLI_LONG("retry-seconds", "S", "keep reconnecting to a lost ps for S seconds [120]", 1,
                 86400, 120, &w.retry),
        CLI_LONG("push-delay-ms", "MS", "testing: wait MS milliseconds before every push [0]", 0,
                 60000, 0, &w.delay),
        NODE_MEMORY_OPTION(&w.memory),
        NODE_THREADS_OPTION(&w.threads),
        CLI_TEXT("ca-file", "FILE",
                 "trust only this PEM CA for an https:// coordinator, and dial the ps over TLS "
                 "(wss) verifying them with it [the system's CAs; plain TCP to the ps]",
                 NULL, &w.ca_file),
        CLI_TOKEN_FILE_OPTION,
        CLI_AGENT_TOKEN_FILE_OPTION,
        CLI_TEXT("task-key-file", "FILE",
                 "static mode: prove this task's own data-plane key (64 hex digits, 'psflow "
                 "key') to the ps instead of one derived from the token",
                 NULL, &w.task_key_file),
        CLI_OPT("shm", "on|off",
                "offer the ps tasks a shared segment (used by those on this host); off: "
                "everything over the socket [on]"),
        CLI_OPT("shm-dir", "DIR",
                "hand the segment to each ps through its socket in DIR, which reaches a ps in "
                "another container or pod of this host [none: by process id]"),
    };
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &w.run))
        return w.run.exit_code;
    if (cli_use_shm("worker", w.run.table, w.run.n_table))
        return PF_EX_USAGE;
    return w.coordinator && !w.job ? run_worker_agent(&w) : run_static_worker(&w);
}
