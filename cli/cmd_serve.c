/* cmd_serve.c - `psflow serve`: answers predict requests with a job's newest verified
 * checkpoint (serve/serve.h, docs/serving.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/node.h"
#include "cli/options.h"
#include "psflow/address.h"
#include "psflow/checkpoint.h"
#include "psflow/clock.h"
#include "psflow/signals.h"
#include "psflow/wire.h"
#include "psflow/wire_auth.h"
#include "serve/serve.h"

static volatile int serve_stop;

static void on_stop(int sig) {
    (void)sig;
    serve_stop = 1;
}

/* The job spec the newest verified checkpoint of `model` under root records, into *spec,
 * waiting up to `wait` seconds (0: as long as it takes) for one to appear. Returns 0, or an
 * exit code after printing why. */
static int spec_from_checkpoint(const char *root, const char *model, long wait, pf_job_spec *spec) {
    char job_dir[PF_CKPT_PATH_MAX], step_dir[PF_CKPT_PATH_MAX];
    if (pf_checkpoint_job_dir(root, model, job_dir, sizeof job_dir) != PF_OK) {
        fprintf(stderr, "psflow serve: --checkpoint-dir: path too long\n");
        return PF_EX_USAGE;
    }
    double t0 = pf_clock_now();
    int said = 0;
    for (;;) {
        int64_t step;
        pf_error err;
        pf_error_clear(&err);
        pf_status st = pf_checkpoint_find_latest(job_dir, PF_CKPT_VERIFY_CRC, &step, step_dir,
                                                 sizeof step_dir, &err);
        pf_checkpoint_model *m = NULL;
        if (st == PF_OK && (st = pf_checkpoint_merge(step_dir, &m, &err)) == PF_OK) {
            const char *text = pf_checkpoint_model_spec(m);
            if (!text) {
                fprintf(stderr,
                        "psflow serve: %s records no job spec (a checkpoint of an older psflow): "
                        "give the job's spec with --job FILE\n",
                        step_dir);
                pf_checkpoint_model_destroy(m);
                return PF_EX_DATAERR;
            }
            st = pf_job_spec_parse(text, strlen(text), spec, &err);
            pf_checkpoint_model_destroy(m);
            if (st == PF_OK && strcmp(spec->name, model) != 0) {
                pf_job_spec_deinit(spec);
                st = pf_error_set(&err, PF_ERR_FORMAT, NULL, "its spec names job %s", spec->name);
            }
            if (st == PF_OK)
                return 0;
            fprintf(stderr, "psflow serve: the job spec in %s: %s\n", step_dir, err.message);
            return PF_EX_DATAERR;
        }
        if (st != PF_ERR_NOT_FOUND)
            fprintf(stderr, "psflow serve: %s: %s; looking again\n", job_dir, err.message);
        else if (!said++)
            fprintf(stderr,
                    "psflow serve: waiting for the first complete checkpoint of %s under %s%s\n",
                    model, job_dir, wait ? "" : " (--wait-first 0: as long as it takes)");
        if (serve_stop || (wait > 0 && pf_clock_now() - t0 > (double)wait)) {
            fprintf(stderr, "psflow serve: no verified checkpoint of %s appeared under %s\n", model,
                    job_dir);
            return PF_EX_UNAVAILABLE;
        }
        pf_clock_sleep(1.0);
    }
}

/* The job spec in file `job`, whose name must be --model's when that is given. */
static int spec_from_file(const char *job, const char *model, pf_job_spec *spec) {
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_job_spec_load(job, spec, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow serve: %s: %s\n", job, err.message);
        return pf_exit_code(st);
    }
    if (model && *model && strcmp(model, spec->name) != 0) {
        fprintf(stderr, "psflow serve: --model %s, but %s is job %s\n", model, job, spec->name);
        pf_job_spec_deinit(spec);
        return PF_EX_USAGE;
    }
    return 0;
}

/* The job spec: --job's file (whose name must be --model's when both are given), else the
 * one the newest verified checkpoint of --model records; a model psflow serve can answer
 * for (no dynamic tables). Returns 0, or an exit code after printing why. */
static int load_spec(const char *job, const char *model, const char *checkpoint_dir, long wait,
                     pf_job_spec *spec) {
    int rc = !job || !*job ? spec_from_checkpoint(checkpoint_dir, model, wait, spec)
                           : spec_from_file(job, model, spec);
    if (!rc && pf_model_has_dynamic(&spec->model)) {
        fprintf(stderr,
                "psflow serve: job %s has dynamic tables, which psflow serve does not read yet\n",
                spec->name);
        pf_job_spec_deinit(spec);
        return PF_EX_DATAERR;
    }
    return rc;
}

/* --ps HOST:PORT,...: the read-only ps tasks, split in place into addrs[PF_MAX_REPLICAS].
 * Returns how many, or -1 after printing why not. */
static int ps_addresses(char *list, const char **addrs) {
    int n = 0;
    for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        char host[256];
        int port;
        if (pf_split_host_port(a, host, sizeof host, &port) != 0 || port < 1 || port > 65535) {
            fprintf(stderr, "psflow serve: --ps: '%s' is not HOST:PORT\n", a);
            return -1;
        }
        if (n == PF_MAX_REPLICAS) {
            fprintf(stderr, "psflow serve: --ps names more than %d ps tasks\n", PF_MAX_REPLICAS);
            return -1;
        }
        addrs[n++] = a;
    }
    if (!n)
        fprintf(stderr, "psflow serve: --ps names no ps task\n");
    return n ? n : -1;
}

/* The data-plane key of reader `reader` of job `job`, from the token (which keys the data
 * plane as it keys the API). */
static void reader_key(const char *token, const char *job, int reader,
                       uint8_t key[PF_WIRE_KEY_SIZE]) {
    uint8_t job_key[PF_WIRE_KEY_SIZE];
    pf_wire_job_key(token, strlen(token), job, job_key);
    pf_wire_task_key(job_key, PF_WIRE_ROLE_READER, (uint32_t)reader, key);
    pf_wire_key_clear(job_key, sizeof job_key);
}

/* --ps LIST: the read-only ps tasks into o (their addresses split in place in a copy, *copy,
 * to free after serve_run), the spec's ps count (the serving cluster's: the checkpoint is
 * repartitioned into it) and, with a token, the reader's key in key. Returns 0, or
 * PF_EX_USAGE after printing why (nothing to free). */
static int ps_form(const char *list, const char *token, serve_options *o, pf_job_spec *spec,
                   char **copy, const char **addrs, uint8_t key[PF_WIRE_KEY_SIZE]) {
    if (!(*copy = strdup(list)))
        return PF_EX_OSERR;
    if ((o->n_ps = ps_addresses(*copy, addrs)) < 0) {
        free(*copy);
        *copy = NULL;
        return PF_EX_USAGE;
    }
    o->ps_addrs = addrs;
    spec->replicas.ps = o->n_ps;
    if (token[0]) {
        reader_key(token, spec->name, o->reader, key);
        o->task_key = key;
    }
    return 0;
}

/* The token into token[512] (empty: none). Without one only a loopback address is served,
 * unless insecure. Returns 0, or an exit code after printing why. */
static int serve_token(const char *host, int port, bool insecure, char *token) {
    int rc = cli_token("serve", token, 512);
    if (rc)
        return rc;
    if (!token[0] && !insecure && !cli_loopback_host(host)) {
        fprintf(stderr,
                "psflow serve: refusing to serve a model without a token on %s:%d, where anyone "
                "who reaches it could query it: set PSFLOW_TOKEN or PSFLOW_TOKEN_FILE "
                "(--token-file), or listen on 127.0.0.1, or add --insecure (PSFLOW_INSECURE=1)\n",
                host, port);
        return PF_EX_USAGE;
    }
    return 0;
}

int cli_serve(const cli_command *cmd, int argc, char **argv) {
    const char *job, *model, *checkpoint_dir, *listen, *ps_list, *ca_file;
    long max_batch, wait_us, max_instances, timeout_ms, max_conns, wait_first, threads, reader;
    long long max_body, max_buffered, memory;
    bool insecure = false;
    cli_option opts[] = {
        CLI_TEXT("job", "FILE",
                 "the job spec (JSON) whose checkpoints to serve [the spec the newest checkpoint "
                 "of --model records]",
                 NULL, &job),
        CLI_TEXT("model", "NAME",
                 "the job whose checkpoints to serve, its spec read from them [--job's name]", NULL,
                 &model),
        CLI_TEXT("checkpoint-dir", "DIR",
                 "checkpoint root: versions come from DIR/<job>/step-<N> [./checkpoints]",
                 "./checkpoints", &checkpoint_dir),
        CLI_TEXT("listen", "HOST:PORT", "address to serve on [0.0.0.0:8501]", "0.0.0.0:8501",
                 &listen),
        CLI_LONG("max-batch", "N", "examples in one forward pass [64]", 1, 65536, 64, &max_batch),
        CLI_LONG("batch-wait-us", "US",
                 "microseconds a request waits for others to fill its batch [0: requests that "
                 "arrive during a pass go in the next one]",
                 0, 1000000, 0, &wait_us),
        CLI_LONG("threads", "N", "BLAS threads of a forward pass [1]", 1, 1024, 1, &threads),
        CLI_LONG("max-instances", "N", "examples one request may hold (more: 413) [1000]", 1,
                 1000000, 1000, &max_instances),
        CLI_LONG("request-timeout-ms", "MS",
                 "from a request's arrival to its answer; later: 504 [5000]", 1, 3600000, 5000,
                 &timeout_ms),
        CLI_SIZE("max-body", "SIZE", "request body bytes (more: 413) [16M]", 1024,
                 (long long)1 << 32, (long long)16 << 20, &max_body),
        CLI_SIZE("max-buffered", "SIZE",
                 "request body bytes of every connection together (more: 503) [256M]", 1024,
                 (long long)1 << 40, (long long)256 << 20, &max_buffered),
        CLI_LONG("max-connections", "N", "open connections at most [512]", 4, 100000, 512,
                 &max_conns),
        CLI_LONG("wait-first", "S",
                 "seconds to wait for the first verified checkpoint before opening the port "
                 "[0: with --job open at once, 503 until one appears; with --model alone wait "
                 "as long as it takes]",
                 0, 86400, 0, &wait_first),
        CLI_TEXT("ps", "HOST:PORT,...",
                 "the read-only ps tasks (psflow ps --read-only) that hold the values, in task "
                 "order: each pass pulls its rows there, for tables bigger than this process "
                 "[none: the whole model is loaded here]",
                 NULL, &ps_list),
        CLI_LONG("reader", "N",
                 "with --ps: this server's reader index (0 .. serving.replicas - 1) [0]", 0,
                 PF_MAX_SERVING_REPLICAS - 1, 0, &reader),
        CLI_TEXT("ca-file", "FILE",
                 "with --ps: dial the ps tasks over TLS (wss), verifying them with this PEM CA "
                 "[plain TCP]",
                 NULL, &ca_file),
        NODE_MEMORY_OPTION(&memory),
        CLI_FLAG("insecure", "serve without a token on an address other hosts reach", &insecure),
        CLI_TOKEN_FILE_OPTION,
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    if ((!job || !*job) && (!model || !*model))
        return cli_usage_error("serve", "--job FILE or --model NAME is required");
    if ((!ps_list || !*ps_list) && (reader || (ca_file && *ca_file)))
        return cli_usage_error("serve", "--reader and --ca-file go with --ps");
    if (model && *model && !pf_job_name_valid(model)) {
        fprintf(stderr, "psflow serve: --model '%s' is not a job name\n", model);
        return PF_EX_USAGE;
    }
    char host[256];
    int port;
    if (pf_split_host_port(listen, host, sizeof host, &port) != 0 || port < 1 || port > 65535) {
        fprintf(stderr, "psflow serve: --listen '%s' is not HOST:PORT\n", listen);
        return PF_EX_USAGE;
    }
    char token[512];
    int rc = serve_token(host, port, insecure, token);
    if (rc)
        return rc;
    pf_signals_on_stop(on_stop);
    pf_job_spec spec;
    if ((rc = load_spec(job, model, checkpoint_dir, wait_first, &spec)))
        return rc;
    serve_options o = {.spec = &spec,
                       .checkpoint_dir = checkpoint_dir,
                       .listen_host = host,
                       .port = port,
                       .token = token,
                       .max_batch = (int)max_batch,
                       .max_wait = (double)wait_us * 1e-6,
                       .threads = (int)threads,
                       .max_instances = (int)max_instances,
                       .request_timeout = (double)timeout_ms * 1e-3,
                       .max_body = (size_t)max_body,
                       .max_buffered = (size_t)max_buffered,
                       .max_connections = (int)max_conns,
                       .wait_first = (double)wait_first,
                       .stop = &serve_stop,
                       .memory = memory,
                       .reader = (int)reader,
                       .ca_file = ca_file};
    char *ps_copy = NULL;
    const char *ps_addrs[PF_MAX_REPLICAS];
    uint8_t key[PF_WIRE_KEY_SIZE];
    if (ps_list && *ps_list && (rc = ps_form(ps_list, token, &o, &spec, &ps_copy, ps_addrs, key))) {
        pf_job_spec_deinit(&spec);
        return rc;
    }
    pf_error err;
    pf_status st = serve_run(&o, &err);
    pf_wire_key_clear(key, sizeof key);
    free(ps_copy);
    if (st != PF_OK)
        fprintf(stderr, "psflow serve: %s\n", err.message);
    pf_job_spec_deinit(&spec);
    return st == PF_OK ? 0 : pf_exit_code(st);
}
