/* server_internal.h - what the parts of a parameter-server task share (see server.h): its
 * state, the peers, and the helpers the message handlers call. Layered, each calling only
 * those below it: server.c holds the task's life, its connections and the control messages
 * (it dispatches every message); server_seg.c the shared-segment requests; server_data.c the
 * data path: pulls, pushes, row pulls and pushes, and the pulls and checkpoints parked until
 * their version; server_io.c the replies and the log. Everything runs on the transport's
 * service thread unless a field says otherwise.
 */
#ifndef PSFLOW_PS_SERVER_INTERNAL_H
#define PSFLOW_PS_SERVER_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "psflow/placement.h"
#include "psflow/profile.h"
#include "psflow/seg_handoff.h"
#include "psflow/segment.h"
#include "psflow/wire.h"
#include "psflow/wire_auth.h"
#include "psflow/ws.h"
#include "ps/server.h"
#include "ps/shard.h"
#include "ps/staleness.h"

typedef struct peer {
    struct peer *next;
    uint64_t conn;
    int hello; /* HELLO accepted: role, task and incarnation below are the peer's */
    uint8_t role;
    int task;
    uint64_t incarnation;
    /* with a key: a HELLO waiting for its AUTH_PROOF */
    int challenged;
    int refused;           /* failed the proof: closing, nothing more is read */
    int closing;           /* the ps closed it: nothing more is sent (ps_server_close) */
    pf_wire_hello pending; /* its job view is not kept */
    uint8_t hello_msg[PF_WIRE_HEADER_SIZE + 20 + PF_WIRE_MAX_JOB_NAME];
    size_t hello_len;
    uint8_t nonce[PF_WIRE_NONCE_SIZE];
    /* integrity once the proofs are done (s->integrity): each message in is checked against
     * mac_in and each one out tagged with mac_out (api/wire.md "Integrity"); else NULL */
    pf_wire_mac *mac_in, *mac_out;
    uint8_t tag[PF_WIRE_TAG_SIZE]; /* the tag of the reply given to a sink */
    pf_wire_in in;
    pf_segment seg; /* the worker's shared segment (SEG_ATTACH), mapped until the close */
    /* a parked pull */
    int parked;
    uint32_t request_id;
    uint64_t min_version;
    uint32_t push_result;
    pf_wire_row_pull pull; /* what it asks for: into ids, sel and sel_rows */
    uint32_t *ids;         /* capacity: the task's shard count */
    pf_wire_rows *sel;     /* capacity: the task's shard count */
    uint32_t *sel_rows;    /* the selections' rows, grown */
    size_t cap_sel_rows;
    uint64_t *sel_ids; /* the selections' 64-bit ids (dynamic tables), grown */
    size_t cap_sel_ids;
    float **seg_dst;   /* a parked SEG_PULL: where each shard's values go (capacity as ids) */
    int parked_seg;    /* the parked pull is one: its reply writes its values there */
    double held_since; /* a parked pull held back by max_staleness: since when; else < 0 */
    double parked_at;  /* when the parked pull was parked (its queue time, profile.h) */
    /* a parked CHECKPOINT (sync): written when the version reaches ck_step */
    int ck_parked;
    uint32_t ck_request_id;
    uint64_t ck_step;
    uint32_t ck_final;
} peer;

struct ps_server {
    pf_job_spec spec;
    int task;
    uint64_t incarnation;
    char checkpoint_dir[1024];
    double grace;
    pf_placement placement;
    ps_shards *shards;
    ps_staleness *staleness;         /* training.max_staleness set (async): its clocks; else NULL */
    struct ps_split_queue *splits;   /* ps 0, data.splits dynamic: the input's work queue, made
                                        by the first LEASE (server_lease.c); else NULL */
    ps_server_input_stats pub_input; /* under mu: the queue as last changed (ps_server_input) */
    /* under mu: each dynamic table's statistics as of the last update (ps_server_tables) */
    ps_server_table_stats pub_tables[PF_MAX_EMBEDDINGS];
    int pub_n_tables;
    int pub_has_input;
    int *local_of;     /* global shard id -> local index, or -1 */
    ps_grad *grads;    /* scratch: a push's gradients, local shard order */
    float *row_values; /* scratch: a reply's gathered rows, grown */
    size_t cap_row_values;
    uint64_t rows_pulled, rows_pushed; /* table rows served and received (atomic access) */
    pf_wire_tensor *views;             /* scratch for replies */
    struct iovec *parts;               /* scratch: a reply's pieces, 2 * n_local + 1 at most */
    unsigned char *lend;               /* scratch: which of them are lent (the values) */
    size_t max_parts;
    unsigned char *pulled; /* scratch: local shards named by a pull */
    /* scratch of segment requests (n_local each): shard ids, gradient views, destinations */
    uint32_t *seg_ids;
    pf_wire_tensor *seg_views;
    float **seg_dst;
    uint64_t seg_limit;      /* the largest segment a worker may attach (pf_segment_bytes) */
    pf_seg_handoff *handoff; /* PSFLOW_SHM_DIR: segments handed over as descriptors, or NULL */
    pf_ws *ws;
    size_t max_message; /* the largest message this ps accepts (a push of every shard) */
    /* the data plane's limits; those the options left to the ps (auto_*) follow the
     * membership. Service thread. */
    int max_connections, auto_connections, auto_buffered;
    size_t max_buffered;
    pf_wire_out out; /* service thread only */
    peer *peers;
    uint64_t errors;     /* ERROR replies sent */
    char nonfinite[256]; /* set once a value became NaN or Inf: every request is refused */
    /* completion, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int final_done;
    int n_peers;
    unsigned char *seen; /* training tasks that have said HELLO (PF_MAX_TASKS), under mu */
    int n_tasks;         /* training tasks of the current membership, under mu */
    /* a membership change from the agent (ps_server_set_workers), taken by the service
     * thread: workers and replicas_to_aggregate, under mu; want_workers 0 = none */
    int want_workers, want_aggregate;
    /* a change refused for want of memory waits in want_* to be retried: on the service
     * thread's next message or wake; ps_server_wait wakes it at retry_at (under mu) */
    int membership_retry; /* atomic */
    double retry_at;
    int has_key;
    int read_only; /* ps_server_options.read_only */
    uint8_t job_key[PF_WIRE_KEY_SIZE];
    int integrity;               /* has_key and no TLS: messages after the proofs carry a tag */
    uint64_t bad_tags;           /* messages refused for their tag (the log's rate limit) */
    uint64_t chief_incarnation;  /* newest incarnation a chief said HELLO with */
    uint64_t reader_incarnation; /* newest incarnation a reader said HELLO with (read-only) */
    uint64_t refusals[PF_WIRE_UNAUTHENTICATED + 1]; /* requests refused, per wire code */
    double final_time;
    volatile sig_atomic_t stop;
    int destroying; /* ps_server_destroy is closing every connection: nothing more is sent */
    /* counters published by the service thread for ps_server_stats (atomic access) */
    uint64_t pub_version, pub_applied, pub_stale;
    pf_profile prof;     /* apply, copy and queue time (psflow/profile.h), read by the agent */
    ps_server_sink sink; /* without a socket: replies go here (sink.send set) */
};

/* The training task p speaks for (its max_staleness clock), or -1. */
static inline int ps_server_trainer(const peer *p) {
    return p->hello && (p->role == PF_WIRE_ROLE_WORKER || p->role == PF_WIRE_ROLE_CHIEF) ? p->task
                                                                                         : -1;
}

static inline uint64_t ps_server_version(const ps_server *s) {
    return ps_shards_stats(s->shards).version;
}

/* --- server_io.c: the replies and the log; calls no other part of the server --------------- */

/* One line on stderr, prefixed with the task. */
void ps_server_log(const ps_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The peer of a connection, or NULL. */
peer *ps_server_peer(ps_server *s, uint64_t conn);

/* Closes a connection after what was queued for it is written. */
void ps_server_close(ps_server *s, uint64_t conn);

/* Sends the reply just encoded into s->out (encoded: the encoder's status); lend_values: the
 * tensor data are the shards' values, lent to the transport (a PULL_REPLY of whole shards). */
void ps_server_send(ps_server *s, uint64_t conn, pf_status encoded, const char *what,
                    int lend_values);

/* Answers ERROR with `code` and the formatted text, logged at the first refusal of each code
 * and every power of two. */
void ps_server_error(ps_server *s, uint64_t conn, uint32_t request_id, pf_wire_code code,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

const char *ps_server_role_name(uint8_t role);

/* server_read_only.c: a read-only ps's start (the newest complete checkpoint that verifies;
 * none is an error), whether it refuses a message type (one that would change its values,
 * write a checkpoint or hand out input), and a reader older than the newest that said HELLO
 * refused with STALE_INCARNATION (returns 1 when it was). */
pf_status ps_server_restore_read_only(ps_server *s, char *note, size_t len, pf_error *err);
int ps_server_read_only_refuses(uint16_t type);
int ps_server_stale_reader(ps_server *s, peer *p, uint32_t request_id);

void ps_server_checkpoint_ack(ps_server *s, peer *p, uint32_t request_id, uint64_t step,
                              uint32_t status, const char *text);

/* --- server_data.c ------------------------------------------------------------------------- */

/* The most ids one message may name of dynamic table shard info: a batch's (a training step's
 * of every replica, or an evaluation's), each example naming up to max_ids. */
uint64_t ps_server_most_ids(const ps_server *s, const pf_shard_info *info);

/* Publishes each dynamic table's statistics for ps_server_tables (service thread: after an
 * update, a restore, a rollback). */
void ps_server_publish_tables(ps_server *s);

/* Checks a row set (a selection or a push's row record) of local table shard `local`: a
 * dynamic table's names 64-bit ids, at most a batch's, each one this task owns
 * (pf_dyn_owner); any other table's names rows. Returns 0 or sends an error. */
int ps_server_check_ids(ps_server *s, uint64_t conn, uint32_t request_id, const pf_wire_rows *set,
                        int local);
/* Pulls: a PULL is a row pull without selections. */
int ps_server_check_pull(ps_server *s, uint64_t conn, uint32_t request_id,
                         const pf_wire_row_pull *pull);
/* seg_dst: NULL, or (a segment pull, whole shards only) where each shard's values are
 * written in the peer's segment before a PULL_REPLY of no records is sent. */
void ps_server_reply_pull(ps_server *s, uint64_t conn, uint32_t request_id,
                          const pf_wire_row_pull *pull, uint32_t push_result,
                          float *const *seg_dst);
void ps_server_pull_or_park(ps_server *s, peer *p, uint32_t request_id,
                            const pf_wire_row_pull *pull, uint32_t push_result,
                            float *const *seg_dst);
void ps_server_release_parked(ps_server *s);
/* Writes this task's file of checkpoint `step` and acknowledges it (the final one ends the
 * task's service). */
void ps_server_write_checkpoint(ps_server *s, peer *p, uint32_t request_id, uint64_t step,
                                uint32_t final);
/* Right after an update: writes the parked checkpoints whose version has been reached. */
void ps_server_write_parked_checkpoints(ps_server *s);
void ps_server_check_finite(ps_server *s);
void ps_server_settle(ps_server *s);
int ps_server_handle_push(ps_server *s, peer *p, uint32_t request_id, const pf_wire_push *push,
                          uint32_t n_rows, const pf_wire_rows *rows);

/* --- server_lease.c: the input's work queue (data.splits dynamic) ------------------------- */

/* A LEASE: answered with LEASE_REPLY, or an error (not ps 0 of such a job, not a training
 * task, another number of splits than the queue's). */
void ps_server_lease(ps_server *s, peer *p, uint32_t request_id, const pf_wire_lease *m);

/* Training task `gone`'s connection closed: unless another connection of the same
 * incarnation is open, its leased splits go back to the queue. */
void ps_server_lease_release(ps_server *s, const peer *gone);

/* The input queue's state for a checkpoint (hex; free with pf_free), or NULL: no queue
 * (not ps 0, static splits, none leased yet), or out of memory (said in the log). */
char *ps_server_lease_state(const ps_server *s);

/* After a restore: the input queue becomes the one the checkpoint held (hex, from
 * ps_server_lease_state), its leases dropped; without one (NULL: a checkpoint written before
 * the first LEASE) the queue starts over at epoch 0 with the next LEASE. A state that does
 * not decode is said in the log and treated as none. */
void ps_server_lease_restore(ps_server *s, const char *hex);

/* Training task p said HELLO: a connection of an older incarnation of it that is still open
 * is a process that is gone, and its leased splits go back to the queue. */
void ps_server_lease_renew(ps_server *s, const peer *p);

/* --- server_seg.c -------------------------------------------------------------------------- */

/* SEG_ATTACH, SEG_PULL and SEG_PUSH_PULL (api/wire.md "Shared segment"), and a peer's
 * segment going with its connection. */
void ps_server_seg_attach(ps_server *s, peer *p, uint32_t request_id, const pf_wire_seg_attach *a);
void ps_server_seg_pull(ps_server *s, peer *p, uint32_t request_id, const pf_wire_seg_pull *pull);
void ps_server_seg_push_pull(ps_server *s, peer *p, uint32_t request_id,
                             const pf_wire_seg_push_pull *pp);

#endif
