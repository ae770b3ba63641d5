/* remote.h - a served model whose values live on read-only ps tasks (psflow serve --ps,
 * docs/serving.md "Tables bigger than one server").
 *
 * When a job's embedding tables do not fit one serving process, the checkpoint is restored
 * into ps tasks started read-only (psflow ps --read-only) and the server holds only one
 * pass's rows: each pass gathers its examples' ids per table (worker/rows.h), pulls those rows
 * and the dense variables from the ps tasks over the authenticated data plane as a reader
 * task (ROW_PULL), and runs the compact model on them. The ps tasks hold one version, the
 * checkpoint the server asked for (RESTORE); a newer complete checkpoint is switched in by
 * asking every ps to restore it between two passes, so no pass mixes versions. A checkpoint
 * a ps refuses (a flipped byte: its CRC) is never served: every ps goes back to the serving
 * step and it keeps answering.
 *
 * When a RESTORE goes unanswered (a ps unreachable) or is refused for being no longer this
 * server's (a newer server took the ps tasks, ps/server.c), nothing is known of what each ps
 * holds: no pass runs (503, and no version in the counts) until every ps restores one step
 * again, which the next refresh tries.
 *
 * Thread-safe: passes and switches take turns under one lock; the counts have their own.
 */
#ifndef PSFLOW_SERVE_REMOTE_H
#define PSFLOW_SERVE_REMOTE_H

#include <stdint.h>

#include "psflow/spec.h"
#include "psflow/status.h"

typedef struct serve_remote serve_remote;

typedef struct serve_remote_options {
    const pf_job_spec *spec;     /* replicas.ps: how many addresses; the model has tables */
    const char *const *ps_addrs; /* the read-only ps tasks, in task order */
    int n_ps;                    /* how many: the spec's replicas.ps */
    int reader;                  /* this server's reader index (HELLO) */
    const uint8_t *task_key;     /* the reader's data-plane key, or NULL (no key) */
    const char *ca_file;         /* NULL: plain TCP; else TLS, each ps verified against it */
    double retry_seconds;        /* a pass gives up on a ps that does not answer after this long */
    int capacity;                /* examples in one pass at most */
    const char *job_dir;         /* "<checkpoint root>/<job>": the versions there */
    const char *log;             /* prefix of the lines on stderr */
    const volatile int *stop;    /* NULL, or set (by a signal handler) to stop waiting */
} serve_remote_options;

/* Connects to every ps (as reader `reader`), waiting for them until *stop. Errors: PF_ERR_INVALID
 * (a model without tables, an address count other than replicas.ps), PF_ERR_NOMEM, and those of
 * connecting. */
pf_status serve_remote_create(const serve_remote_options *o, serve_remote **out, pf_error *err);
void serve_remote_destroy(serve_remote *r);

/* 1 while the ps tasks are asked to restore a checkpoint (a switch, or putting dirty or
 * restarted ps tasks back), which takes as long as reading it: a pass started now would wait
 * that long. Any thread. */
int serve_remote_switching(serve_remote *r);

/* Gives up reconnecting to the ps tasks: a start or a pass waiting for one ends (a RESTORE
 * in flight is still waited for, up to its limit). Any thread. */
void serve_remote_stop(serve_remote *r);

/* Switches every ps to the newest complete checkpoint newer than the serving one that no ps
 * refused, trying older ones after a refusal; with none, puts dirty ps tasks back on the
 * serving step. Returns 1 when it switched, 0 otherwise. */
int serve_remote_refresh(serve_remote *r);

/* One pass: y[n x outputs] for x[n x input width] (n <= capacity). Returns the version that
 * answered, or -1 (none yet, or a ps unreachable past retry_seconds: the log says which). */
int64_t serve_remote_run(serve_remote *r, const float *x, int n, float *y);

/* As serve_versions_counts; *step is -1 while no step serves. Never waits for the network. */
void serve_remote_counts(serve_remote *r, int64_t *step, int64_t *loaded, int64_t *refused);

#endif
