/* link_internal.h - the state of a worker's link to its ps tasks, shared by link.c (requests,
 * replies, reconnection) and link_auth.c (the proofs of the key and the message tags,
 * api/wire.md "Authentication" and "Integrity"). Private to worker/.
 */
#ifndef PSFLOW_WORKER_LINK_INTERNAL_H
#define PSFLOW_WORKER_LINK_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "psflow/placement.h"
#include "psflow/segment.h"
#include "psflow/wire.h"
#include "psflow/wire_auth.h"
#include "psflow/ws.h"
#include "worker/link.h"
#include "worker/request.h"

typedef struct ps_link {
    int index;
    char host[256];
    int port;
    worker_request req; /* its shards, and the request in flight kept for resending */
    int local;          /* the ps's address is this host's: it may be offered the segment */
    int attaching;      /* the request in flight is SEG_ATTACH (only it is answered by SEG_ACK) */
    int seg;            /* the ps took the link's segment on the current connection */
    int seg_said;       /* its refusal was logged */
    int settled;        /* trainer thread: the round trip has its answer, or gave it up */
    /* under the link's mu */
    uint64_t conn;
    int open;    /* transport connection up */
    int closed;  /* the connection went away */
    int waiting; /* a reply is expected */
    int done;    /* the reply arrived */
    uint32_t request_id;
    pf_status status;
    char message[256];
    uint64_t version;
    uint64_t ps_incarnation;
    uint32_t push_result;
    pf_wire_lease_reply lease_reply; /* the answer to a LEASE (ps 0) */
    int lease_answered;              /* lease_reply is the answer to the LEASE in flight */
    /* the authentication of the current connection (api/wire.md) */
    int auth; /* 0 nothing yet, 1 proof sent, 2 the ps proved the key */
    uint8_t hello_msg[PF_WIRE_HEADER_SIZE + 20 + PF_WIRE_MAX_JOB_NAME]; /* the HELLO sent */
    size_t hello_len;
    uint8_t nonce_ps[PF_WIRE_NONCE_SIZE], nonce_task[PF_WIRE_NONCE_SIZE];
    /* service thread only */
    pf_wire_in in;
    pf_wire_out auth_out; /* AUTH_PROOF */
    /* integrity (api/wire.md "Integrity"): the ps's messages on connection mac_conn are
     * checked against mac_in from AUTH_OK on (service thread); ours are tagged with mac_out
     * once HELLO_ACK came (trainer thread); NULL before */
    pf_wire_mac *mac_in;
    uint64_t mac_conn;
    uint64_t bad_tags;
    pf_wire_mac *mac_out;
    /* a checkpoint asked without waiting (worker_link_checkpoint_send): its CHECKPOINT
     * (trainer thread), and under mu whether its answer is awaited on connection ck_conn
     * and how it went */
    worker_request ck;
    uint32_t ck_request_id;
    uint64_t ck_conn;
    int ck_waiting;
    int ck_done;
    pf_status ck_status;
    char ck_message[256];
} ps_link;

struct worker_link {
    pf_job_spec spec;
    pf_placement placement;
    pf_ws *ws;
    ps_link *links;
    int n;
    int task;
    uint8_t role;
    uint64_t incarnation;
    int has_key;
    uint8_t task_key[PF_WIRE_KEY_SIZE];
    int integrity; /* has_key and no TLS: messages after the proofs carry a tag */
    double retry;
    double reply_limit;   /* worker_link_set_reply_limit; 0: training.stall_timeout_secs */
    int tls;              /* --ca-file: every ps is dialled over TLS */
    const int *stop;      /* see worker_link_options */
    uint64_t max_version; /* the largest version a ps may report (max_version_of) */
    uint32_t next_request;
    int only; /* the round trip is with ps `only` alone (a LEASE to ps 0), or -1: every ps */
    /* what every ps's requests share: the layout, rows (NULL: every shard whole, no tables),
     * the plan (row mode: the rows pulls fetch and pushes send), the push sequence number */
    worker_request_env env;
    pf_segment seg; /* options.segment: [token | params | grads] */
    float *seg_params, *seg_grads;
    struct iovec *parts; /* a request's pieces (trainer thread), 2 * n_shards + 1 at most */
    size_t max_parts;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    float *params; /* destination of pulled values during a request */
    double start;  /* when the round trip in progress began */
    double sent;   /* when the last round trip's requests were all handed to the sockets */
    int detached;  /* a push_pull_start'ed request is in flight: its gradients may be gone */
    int ck_active; /* a worker_link_checkpoint_send'ed checkpoint is not yet polled done */
    /* a ps seen with a new incarnation since worker_link_take_restart last asked */
    int restarted;
    int restarted_ps;
    uint64_t restarted_version;
};

/* The ps's AUTH_CHALLENGE or AUTH_OK on conn, its part of the exchange that answers our HELLO
 * (service thread, under mu). Returns 0 to keep waiting for HELLO_ACK, or -1 with msg saying
 * why the ps is refused. */
int worker_link_authenticate(worker_link *c, ps_link *l, uint64_t conn, const pf_wire_msg *m,
                             char *msg, size_t len);

/* With integrity: 0 when the message on conn may be handled (its tag verified and stripped
 * from *len), -1 when it is refused and the connection closed (service thread). */
int worker_link_check_tag(worker_link *c, ps_link *l, uint64_t conn, const uint8_t *data,
                          size_t *len);

/* What tags a request of l as the transport writes it (pf_ws_sendv_tagged), under l's
 * mac_out; the caller begins the tag (pf_wire_mac_sign_begin) first. */
pf_ws_tagger worker_link_tagger(ps_link *l);

/* The end of l's checkpoint asked without waiting, with status st and msg (under mu; wakes
 * the pollers). link.c. */
void worker_link_finish_checkpoint(worker_link *c, ps_link *l, pf_status st, const char *msg);

/* Sends every link's encoded request (l->req) and waits for all answers, reconnecting and
 * resending where a connection drops; a failed one gives up what is still in flight. link.c. */
pf_status worker_link_round_trip(worker_link *c, pf_error *err);

#endif
