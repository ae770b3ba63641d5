/* server.h - a parameter-server task: its shards behind the data-plane protocol
 * (api/wire.md) on a WebSocket port.
 *
 * Lifecycle: ps_server_start() computes the placement, creates this task's shards
 * (restoring the newest complete checkpoint of the job when there is one) and starts
 * listening; ps_server_wait() blocks until the chief's final CHECKPOINT has been written
 * and every worker has disconnected (or a grace period passed), or ps_server_stop() was
 * called. Logging: one line per event on stderr.
 */
#ifndef PSFLOW_PS_SERVER_H
#define PSFLOW_PS_SERVER_H

#include <stdint.h>
#include <sys/uio.h>

#include "psflow/profile.h"
#include "psflow/dyn_table.h"
#include "psflow/spec.h"
#include "psflow/status.h"
#include "psflow/ws.h"
#include "ps/staleness.h"

typedef struct ps_server_options {
    const pf_job_spec *spec;
    int ps_task;
    const char *listen_host;    /* NULL or "0.0.0.0": every interface */
    int port;                   /* 0: ephemeral (see ps_server_port) */
    const char *checkpoint_dir; /* root of <dir>/<job>/step-<N>/ */
    uint64_t incarnation;       /* differs on every start of this task */
    double exit_grace_seconds;  /* after the final checkpoint, wait this long for workers */
    /* The job's data-plane key (PF_WIRE_KEY_SIZE bytes, pf_wire_auth.h), or NULL: then any
     * peer that names the job is served, and the ps says so once at start. */
    const uint8_t *job_key;
    /* Data-plane limits and TLS (psflow/ws.h); zero fields take the ps's defaults:
     * max_connections twice the job's training tasks plus 32, max_buffered the job's
     * training tasks plus 4 times the largest message this ps accepts. Defaults follow a
     * live membership change (ps_server_set_workers); values given here stay. */
    pf_ws_options data_plane;
    /* Serve the checkpoint it restored and change nothing (psflow serve --ps, docs/serving.md):
     * it refuses to start without a complete checkpoint, refuses every push, CHECKPOINT,
     * LEASE and SEG_ATTACH (FORBIDDEN), and restores another checkpoint when a reader asks
     * (RESTORE). */
    int read_only;
} ps_server_options;

typedef struct ps_server ps_server;

/* Errors: PF_ERR_IO (cannot listen; checkpoint unreadable), PF_ERR_NOMEM, with a message. */
pf_status ps_server_start(const ps_server_options *options, ps_server **out, pf_error *err);

int ps_server_port(const ps_server *s);

/* Counters as of the last push handled: version (updates applied to this ps's shards),
 * pushes applied or aggregated, stale pushes dropped. Any thread. */
void ps_server_stats(const ps_server *s, uint64_t *version, uint64_t *applied, uint64_t *stale);

/* Embedding-table rows this ps has served (ROW_PULL selections) and received (row pushes)
 * since it started. Any thread. */
void ps_server_rows(const ps_server *s, uint64_t *pulled, uint64_t *pushed);

/* Where the service thread's time goes (psflow/profile.h): apply and copy, the pulls' queue
 * time and the pulls answered. Any thread (pf_profile_read). */
pf_profile *ps_server_profile(ps_server *s);

/* ps 0 of a job with dynamic splits: the input work queue as the service thread last left
 * it (server_lease.c). */
typedef struct ps_server_input_stats {
    uint64_t epoch;        /* the epoch being read (the epochs' count once finished) */
    uint32_t splits;       /* splits in the queue */
    uint32_t done, leased; /* in the current epoch */
    int finished;          /* training.epochs are done */
} ps_server_input_stats;

/* Fills *out and returns 1 when this ps keeps an input work queue, else returns 0. Any
 * thread. */
int ps_server_input(ps_server *s, ps_server_input_stats *out);

/* A dynamic table's share on this ps (dyn_table.h): its rows and counters. */
typedef struct ps_server_table_stats {
    char table[PF_NAME_MAX + 1]; /* model.embeddings[].name */
    int64_t max_rows;            /* this task's share of the table's max_rows */
    pf_dyn_stats st;
} ps_server_table_stats;

/* Each dynamic table's statistics on this ps as of its last update (at most max, in the
 * model's order) into out; returns how many. Any thread. */
int ps_server_tables(ps_server *s, ps_server_table_stats *out, int max);

/* With training.max_staleness: each training task's clock and lag (ps/staleness.h) for tasks
 * 0 .. max-1, into out; returns how many (0 without the bound). Any thread. */
int ps_server_staleness(ps_server *s, ps_staleness_task *out, int max);

/* A live membership change, told by this ps's agent (the coordinator's assignment), never
 * by a peer: from now on the job has `workers` workers (task indices beyond them are
 * refused in HELLO and PUSH, and their connections closed) and a sync step aggregates
 * `aggregate` gradients (ps/shard.h, ps_shards_set_tasks). Values and version are kept.
 * Any thread; the service thread applies it between messages. One it cannot apply for want
 * of memory is kept and retried (before the next message, and once a second from
 * ps_server_wait) until it applies or a newer one replaces it; ps_server_workers tells. */
void ps_server_set_workers(ps_server *s, int workers, int aggregate);

/* The workers of the membership applied so far. Any thread. */
int ps_server_workers(ps_server *s);

/* Blocks until the job is done (returns 0) or ps_server_stop() was called (returns 1). */
int ps_server_wait(ps_server *s);

/* Asks ps_server_wait to return; async-signal-safe. */
void ps_server_stop(ps_server *s);

void ps_server_destroy(ps_server *s);

/* --- without a socket (the fuzz target) ---------------------------------------------------
 * The same handler, driven by the caller on its own thread: messages go in through
 * ps_server_sink_message() and replies come out through sink->send, all before the call
 * returns. Connections are the caller's ids. */
typedef struct ps_server_sink {
    void (*send)(void *user, uint64_t conn, const struct iovec *parts, int n); /* a reply */
    void (*close)(void *user, uint64_t conn);  /* the ps closes conn (after what it sent) */
    void (*nonce)(void *user, uint8_t *nonce); /* NULL: random; else fills 32 bytes */
    void *user;
    int quiet; /* log nothing */
} ps_server_sink;

/* As ps_server_start without listening (o->listen_host and o->port are unused). */
pf_status ps_server_start_sink(const ps_server_options *o, const ps_server_sink *sink,
                               ps_server **out, pf_error *err);
void ps_server_sink_open(ps_server *s, uint64_t conn);
/* data must be 4-byte aligned (as a transport's receive buffer is). */
void ps_server_sink_message(ps_server *s, uint64_t conn, const uint8_t *data, size_t len);
void ps_server_sink_close(ps_server *s, uint64_t conn);

#endif
