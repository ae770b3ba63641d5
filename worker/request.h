/* request.h - the requests a worker's link (worker/link.h) sends to one ps, and the check of
 * what the ps answers.
 *
 * For each ps the link keeps a worker_request: the shards the ps holds (by the job's
 * placement), the request in flight encoded and kept for resending, and what its reply must
 * hold. The encoders choose the request's form: whole shards (PULL, PUSH, PUSH_PULL), rows
 * of embedding tables in row mode (ROW_PULL, ROW_PUSH_PULL), or ranges of the link's shared
 * segment for a ps that took it (SEG_PULL, SEG_PUSH_PULL); and the control requests
 * (CHECKPOINT, RESTORE). Encoding and checking only: no I/O, no locking; the link's trainer
 * thread encodes, and its transport's service thread checks replies while the trainer waits.
 */
#ifndef PSFLOW_WORKER_REQUEST_H
#define PSFLOW_WORKER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/placement.h"
#include "psflow/segment.h"
#include "psflow/status.h"
#include "psflow/wire.h"
#include "psflow/ws.h"

struct worker_rows;
struct worker_row_plan;

/* What a request holds. */
enum { WORKER_REQ_DATA, WORKER_REQ_CHECKPOINT, WORKER_REQ_RESTORE, WORKER_REQ_LEASE };

/* What every ps's requests share: the job's layout, the link's segment, and scratch. The
 * link owns it; worker_request_env_init allocates the scratch. */
typedef struct worker_request_env {
    const pf_placement *placement;      /* borrowed */
    const struct worker_rows *rows;     /* NULL: every shard whole (no tables) */
    const struct worker_row_plan *plan; /* row mode: the rows pulls fetch and pushes send */
    /* row mode, while a fused step is in flight: the rows its pull part fetches (another
     * batch's plan over the same layout; a pull in its place fetches them too); NULL: a
     * push-pull pulls nothing and a pull fetches plan's rows */
    const struct worker_row_plan *pull_plan;
    const pf_segment *seg; /* the link's segment (base NULL: none), borrowed */
    size_t n_params;       /* floats in a parameter vector */
    uint32_t task;
    uint64_t incarnation;
    uint64_t seq; /* the push sequence number, counted by the link */
    /* scratch, n_shards each: a request's tensor views, row selections, row gradients and
     * segment records */
    pf_wire_tensor *views;
    pf_wire_rows *sel;
    pf_wire_rows *prows;
    pf_wire_seg_tensor *segrec;
} worker_request_env;

/* One ps's requests. */
typedef struct worker_request {
    int ps;        /* the ps task's index */
    uint32_t *ids; /* global shard ids this ps holds */
    int n_ids;
    pf_ws_place *places; /* where each shard's values lie in a PULL_REPLY for ids
                            (pf_wire_pull_reply_places; dst set by each request) */
    size_t reply_len;    /* that reply's length */
    /* row mode: this ps's dense shards, and what the request in flight expects back */
    uint32_t *dense_ids;
    int n_dense;
    uint32_t *exp_id; /* the reply's records, in order: shard, elements, destination */
    uint64_t *exp_count;
    float **exp_dst;
    int n_exp;
    pf_wire_out out;        /* the request in flight, kept for resending */
    int kind;               /* what `out` holds: WORKER_REQ_* */
    int out_seg;            /* `out` is a segment request (SEG_PULL, SEG_PUSH_PULL) */
    const float *req_grads; /* `out`'s push (WORKER_REQ_DATA): to encode it again */
    uint64_t req_step;
    uint64_t min_version; /* WORKER_REQ_DATA: the pull's minimum version, to encode it again */
    uint64_t ck_step;     /* WORKER_REQ_CHECKPOINT, _RESTORE: to encode it again */
    uint32_t ck_final;
    float ck_lr_factor; /* WORKER_REQ_RESTORE */
    int swapped;        /* set by the link: a push-pull replaced by a pull after a ps restart */
} worker_request;

/* Fills the shared part (the scratch sized by the placement's shards). Errors:
 * PF_ERR_NOMEM. _deinit frees the scratch (also after a failed _init). */
pf_status worker_request_env_init(worker_request_env *e, const pf_placement *placement,
                                  const struct worker_rows *rows, const pf_segment *seg,
                                  size_t n_params, int task, uint64_t incarnation);
void worker_request_env_deinit(worker_request_env *e);

/* Lists the shards of ps `ps` and where their values lie in a reply. Errors: PF_ERR_NOMEM,
 * PF_ERR_RANGE (the shards do not fit one message), with err set. _deinit frees it (also
 * after a failed _init, or on zeroed storage). */
pf_status worker_request_init(worker_request *q, const worker_request_env *e, int ps,
                              pf_error *err);
void worker_request_deinit(worker_request *q);

/* Encodes into q->out, as request `id`, a pull of every shard (ROW_PULL of the plan's rows in
 * row mode; SEG_PULL when seg says the ps took the segment and params lies in it) into
 * params (NULL: nowhere), answered once the ps reaches min_version. */
pf_status worker_request_pull(worker_request *q, const worker_request_env *e, uint32_t id, int seg,
                              uint64_t min_version, float *params, pf_error *err);

/* Encodes a PUSH_PULL of grads (each shard's part) computed against `step`, then a pull as
 * worker_request_pull; through the segment when seg and both vectors lie in it; in row mode
 * a ROW_PUSH_PULL of the plan's rows that pulls e->pull_plan's rows and the dense shards into
 * params, or nothing without a pull_plan. Uses e->seq. */
pf_status worker_request_push_pull(worker_request *q, const worker_request_env *e, uint32_t id,
                                   int seg, const float *grads, uint64_t step, uint64_t min_version,
                                   float *params, pf_error *err);

/* Encodes a PUSH of grads without a pull (not in row mode). Uses e->seq. */
pf_status worker_request_push(worker_request *q, const worker_request_env *e, uint32_t id,
                              const float *grads, uint64_t step, pf_error *err);

/* Encodes a CHECKPOINT at `step` (final: the job is done), or a RESTORE of checkpoint `step`
 * with lr_factor. */
pf_status worker_request_checkpoint(worker_request *q, uint32_t id, uint64_t step, int final,
                                    pf_error *err);
pf_status worker_request_restore(worker_request *q, uint32_t id, uint64_t step, float lr_factor,
                                 pf_error *err);

/* Checks the reply m (decoded, of request q) and takes what it reports: *version,
 * *incarnation (HELLO_ACK) and *push_result, as the reply carries them; a PULL_REPLY's values
 * are copied to where the request said (unless received there in place). attaching: the
 * request was SEG_ATTACH (only it is answered by SEG_ACK). Returns PF_OK, or an error with
 * msg[len] saying what the ps did wrong or refused. Service thread. */
pf_status worker_request_check_reply(const worker_request *q, const pf_wire_msg *m, int attaching,
                                     uint64_t *version, uint64_t *incarnation,
                                     uint32_t *push_result, char *msg, size_t len);

#endif
