/* serve.h - the serving task: answers predict requests with a job's newest verified
 * checkpoint, in TensorFlow Serving's REST shape (docs/serving.md).
 *
 *   GET  /v1/models/NAME                     the version status
 *   GET  /v1/models/NAME/metadata            the model's inputs and outputs
 *   POST /v1/models/NAME:predict             {"instances"|"inputs": ...} (serve_request.h)
 *   POST /v1/models/NAME/versions/V:predict  the same, only while V is the serving version
 *   GET  /metrics                            Prometheus text
 *   GET  /healthz                            200 once a version serves, else 503 (no token)
 *
 * NAME is the job's name. Every answer to a predict says which version (the checkpoint's
 * step) answered, in its body ("model_version") and in the header PSFlow-Model-Version.
 * With a token every route but /healthz requires "Authorization: Bearer TOKEN" (401). Errors
 * are RFC 9457 problem+json naming the field by JSON pointer; bodies over max_body are 413,
 * a Content-Type other than application/json 415, a full queue 503 with Retry-After, a
 * request that waited past its timeout 504.
 *
 * DESIGN: libmicrohttpd's internal threads parse requests; a predict request is suspended
 * (MHD_suspend_connection) while its examples wait in the batcher (batcher.h), whose one
 * thread runs the model on the CPU backend, and resumed with its outputs; a watcher thread
 * polls the checkpoint folder and switches versions (versions.h).
 */
#ifndef PSFLOW_SERVE_SERVE_H
#define PSFLOW_SERVE_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/spec.h"
#include "psflow/status.h"

/* What a running server tells the process that runs it (an agent reports it to the
 * coordinator): serve_stats_init before serve_run, serve_stats_read from any thread while it
 * runs, serve_stats_deinit after it returned. */
#define SERVE_STATS_WINDOW  4096 /* predict latencies kept, the newest */
#define SERVE_STATS_SECONDS 10.0 /* percentiles over the requests answered this long ago */
typedef struct serve_stats {
    pthread_mutex_t mu;
    int port;                          /* the port it listens on; 0 before it does */
    int64_t version;                   /* the serving version; -1 before one */
    int64_t requests;                  /* predict requests answered, any status */
    int64_t failed;                    /* of those, answered with an error status */
    double at[SERVE_STATS_WINDOW];     /* when each of the newest predicts was answered (ring) */
    float seconds[SERVE_STATS_WINDOW]; /* and its latency, arrival to answer */
    float sorted[SERVE_STATS_WINDOW];  /* serve_stats_read's scratch */
    int n, next;
} serve_stats;

typedef struct serve_stats_view {
    int port;
    int64_t version, requests, failed;
    double p50, p99; /* seconds, over the last SERVE_STATS_SECONDS; NAN when none */
} serve_stats_view;

void serve_stats_init(serve_stats *s);
void serve_stats_deinit(serve_stats *s);
void serve_stats_read(serve_stats *s, serve_stats_view *out);

typedef struct serve_options {
    const pf_job_spec *spec;
    const char *checkpoint_dir; /* the checkpoint root: versions come from <root>/<job> */
    const char *listen_host;    /* IPv4 address ["0.0.0.0"] */
    int port;                   /* 0: any free port (stats->port says which) */
    const char *token;          /* bearer token; NULL or "" serves without one */
    int max_batch;              /* examples in one forward pass [64] */
    double max_wait;            /* seconds a request waits for company [0] */
    int threads;                /* BLAS threads of a forward pass [1]; the process gets its
                                   own count back when serve_run returns */
    int max_instances;          /* examples in one request [1000] */
    double request_timeout;     /* seconds from a request's arrival to its answer [5] */
    size_t max_body;            /* request body bytes [16 MiB] */
    size_t max_buffered;        /* body bytes of every connection together [256 MiB] */
    int max_connections;        /* [512] */
    double poll_seconds;        /* checkpoint folder poll [1] */
    double wait_first;          /* seconds to wait for the first version before serving 503 [0] */
    const volatile int *stop;   /* set (by a signal handler) to stop */
    serve_stats *stats;         /* NULL, or kept up to date while it serves */
    /* Tables bigger than this process (remote.h): the read-only ps tasks that hold the
     * values, n_ps of them in task order (the spec's replicas.ps must be n_ps), or n_ps 0:
     * the whole model is loaded here. */
    const char *const *ps_addrs;
    int n_ps;
    int reader;              /* this server's reader index on them */
    const uint8_t *task_key; /* its data-plane key, or NULL */
    const char *ca_file;     /* NULL: plain TCP to them; else TLS verified against it */
    /* Bytes this process may use [0: MemTotal, or the cgroup's limit]. Without ps tasks a
     * model whose values times three (the serving version, the next one and the checkpoint
     * read) need more is refused (PF_ERR_SPEC), the message naming --ps. */
    int64_t memory;
} serve_options;

/* Serves until *o->stop. Errors: PF_ERR_UNAVAILABLE (cannot listen), PF_ERR_NOMEM,
 * PF_ERR_UNSUPPORTED (a model the CPU backend cannot run), PF_ERR_SPEC (a model bigger than
 * o->memory allows without ps tasks). */
pf_status serve_run(const serve_options *o, pf_error *err);

#endif
