/* cmd_serve.c - `psflow serve`: answers predict requests with a job's newest verified
 * checkpoint (serve/serve.h, docs/serving.md). */
#include <stdio.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/options.h"
#include "psflow/address.h"
#include "psflow/checkpoint.h"
#include "psflow/clock.h"
#include "psflow/signals.h"
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

int cli_serve(const cli_command *cmd, int argc, char **argv) {
    const char *job, *model, *checkpoint_dir, *listen;
    long max_batch, wait_us, max_instances, timeout_ms, max_conns, wait_first, threads;
    long long max_body, max_buffered;
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
        CLI_FLAG("insecure", "serve without a token on an address other hosts reach", &insecure),
        CLI_TOKEN_FILE_OPTION,
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    if ((!job || !*job) && (!model || !*model))
        return cli_usage_error("serve", "--job FILE or --model NAME is required");
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
    int rc = cli_token("serve", token, sizeof token);
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
    pf_signals_on_stop(on_stop);
    pf_job_spec spec;
    pf_error err;
    pf_error_clear(&err);
    pf_status st = PF_OK;
    if (job && *job) {
        st = pf_job_spec_load(job, &spec, &err);
        if (st != PF_OK) {
            fprintf(stderr, "psflow serve: %s: %s\n", job, err.message);
            return pf_exit_code(st);
        }
        if (model && *model && strcmp(model, spec.name) != 0) {
            fprintf(stderr, "psflow serve: --model %s, but %s is job %s\n", model, job, spec.name);
            pf_job_spec_deinit(&spec);
            return PF_EX_USAGE;
        }
    } else if ((rc = spec_from_checkpoint(checkpoint_dir, model, wait_first, &spec))) {
        return rc;
    }
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
                       .stop = &serve_stop};
    st = serve_run(&o, &err);
    if (st != PF_OK)
        fprintf(stderr, "psflow serve: %s\n", err.message);
    pf_job_spec_deinit(&spec);
    return st == PF_OK ? 0 : pf_exit_code(st);
}
