/* wire.h - the data-plane codec: every byte a ps and a worker exchange (api/wire.md).
 *
 * A message is a 24-byte header followed by a type-specific payload. All integers are
 * little-endian; tensor data is raw little-endian IEEE-754 float32. psflow runs on
 * little-endian hosts only (the codec refuses to compile elsewhere), which is what lets a
 * decoded tensor be a plain `const float *` into the receive buffer.
 *
 * Decoding is zero-copy and validating. pf_wire_decode_header() looks at the first 24
 * bytes only, so a transport can refuse an oversized message before buffering it;
 * pf_wire_decode() checks a whole message (every length against the bytes that remain,
 * counts against the limits, dtypes, enum values, UTF-8 strings, no trailing bytes) and
 * returns views: pointers into the caller's buffer, valid while that buffer is. A failure
 * fills a pf_error (message naming the problem, offset = byte offset into the message)
 * and records the wire error code to send back (pf_wire_in_code). Checks that need the
 * ps's state (unknown shard, wrong count, stale incarnation) are the caller's; the codes
 * for them are here.
 *
 * Receiving in place: the layout of a PULL_REPLY follows from the pull it answers, so a
 * worker computes where each requested tensor's values will lie (pf_wire_pull_reply_places)
 * and has the transport receive those bytes straight into their destination (pf_ws_expect).
 * pf_wire_decode_placed() then decodes such a reply without reading the ranges that never
 * reached the buffer: its views point at the destinations, where the values are.
 *
 * Encoding never copies tensor data. An encoder writes the header, the fixed fields,
 * strings and per-tensor headers into a small reusable buffer and records each tensor's
 * data as a pointer; pf_wire_out_parts() lists the message as pieces for a gathering
 * write, which is what the transport sends (pf_ws_sendv: tensor data goes out from where
 * it lives). Tensor data must stay valid and unchanged until the message is sent.
 *
 * Threads: pf_wire_in and pf_wire_out are per connection and used by one thread at a
 * time; everything else is reentrant.
 */
#ifndef PSFLOW_WIRE_H
#define PSFLOW_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "psflow/buf.h"
#include "psflow/status.h"
#include "psflow/ws.h"

/* --- constants (api/wire.md) ----------------------------------------------------------- */

#define PF_WIRE_MAGIC       0x57465350u /* the bytes "PSFW" read as a little-endian u32 */
#define PF_WIRE_VERSION     1
#define PF_WIRE_HEADER_SIZE 24

#define PF_WIRE_MAX_PAYLOAD   (1ull << 30) /* default and largest payload limit, bytes */
#define PF_WIRE_MAX_TENSORS   65536u       /* tensors, ids, selections or row records */
#define PF_WIRE_MAX_JOB_NAME  63u          /* HELLO job name, bytes */
#define PF_WIRE_MAX_ERROR_MSG 1024u        /* ERROR message, bytes */
#define PF_WIRE_MAX_PATH      4096u        /* CHECKPOINT_ACK path, bytes */
#define PF_WIRE_TENSOR_HEADER 16u          /* id, dtype, count before each tensor's values */
#define PF_WIRE_MAX_SPLITS    (1u << 24)   /* LEASE.n_splits at most */

#define PF_WIRE_F32 1u /* the only dtype of v1 */

/* Message types (u16 at header offset 6). */
#define PF_WIRE_TYPE_LIST(X)                                                                       \
    X(PF_WIRE_HELLO, 1, "HELLO")                                                                   \
    X(PF_WIRE_HELLO_ACK, 2, "HELLO_ACK")                                                           \
    X(PF_WIRE_PULL, 3, "PULL")                                                                     \
    X(PF_WIRE_PULL_REPLY, 4, "PULL_REPLY")                                                         \
    X(PF_WIRE_PUSH, 5, "PUSH")                                                                     \
    X(PF_WIRE_PUSH_ACK, 6, "PUSH_ACK")                                                             \
    X(PF_WIRE_PUSH_PULL, 7, "PUSH_PULL")                                                           \
    X(PF_WIRE_STATS, 8, "STATS")                                                                   \
    X(PF_WIRE_STATS_REPLY, 9, "STATS_REPLY")                                                       \
    X(PF_WIRE_CHECKPOINT, 10, "CHECKPOINT")                                                        \
    X(PF_WIRE_CHECKPOINT_ACK, 11, "CHECKPOINT_ACK")                                                \
    X(PF_WIRE_ERROR, 12, "ERROR")                                                                  \
    X(PF_WIRE_AUTH_CHALLENGE, 13, "AUTH_CHALLENGE")                                                \
    X(PF_WIRE_AUTH_PROOF, 14, "AUTH_PROOF")                                                        \
    X(PF_WIRE_AUTH_OK, 15, "AUTH_OK")                                                              \
    X(PF_WIRE_RESTORE, 16, "RESTORE")                                                              \
    X(PF_WIRE_ROW_PULL, 17, "ROW_PULL")                                                            \
    X(PF_WIRE_ROW_PUSH_PULL, 18, "ROW_PUSH_PULL")                                                  \
    X(PF_WIRE_SEG_ATTACH, 19, "SEG_ATTACH")                                                        \
    X(PF_WIRE_SEG_ACK, 20, "SEG_ACK")                                                              \
    X(PF_WIRE_SEG_PULL, 21, "SEG_PULL")                                                            \
    X(PF_WIRE_SEG_PUSH_PULL, 22, "SEG_PUSH_PULL")                                                  \
    X(PF_WIRE_LEASE, 23, "LEASE")                                                                  \
    X(PF_WIRE_LEASE_REPLY, 24, "LEASE_REPLY")

typedef enum {
#define PF_WIRE_TYPE_ENUM(name, value, text) name = value,
    PF_WIRE_TYPE_LIST(PF_WIRE_TYPE_ENUM)
#undef PF_WIRE_TYPE_ENUM
} pf_wire_type;

/* Wire error codes: ERROR.code, CHECKPOINT_ACK.status. 0 means no error and is never the
 * code of an ERROR message. The codec produces BAD_MAGIC .. BAD_DTYPE and INTERNAL; the
 * ps produces the rest from its own checks. Numbers are fixed forever; new codes are
 * appended, and a receiver treats a code it does not know as INTERNAL. */
#define PF_WIRE_CODE_LIST(X)                                                                       \
    X(PF_WIRE_OK, 0, "OK")                                                                         \
    X(PF_WIRE_BAD_MAGIC, 1, "BAD_MAGIC")                  /* not a psflow frame */                 \
    X(PF_WIRE_BAD_VERSION, 2, "BAD_VERSION")              /* protocol version not spoken */        \
    X(PF_WIRE_BAD_TYPE, 3, "BAD_TYPE")                    /* unknown message type */               \
    X(PF_WIRE_BAD_FLAGS, 4, "BAD_FLAGS")                  /* flags != 0 */                         \
    X(PF_WIRE_TRUNCATED, 5, "TRUNCATED")                  /* fewer bytes than the header says */   \
    X(PF_WIRE_BAD_LENGTH, 6, "BAD_LENGTH")                /* lengths inside disagree */            \
    X(PF_WIRE_TOO_LARGE, 7, "TOO_LARGE")                  /* a size or count over a limit */       \
    X(PF_WIRE_BAD_VALUE, 8, "BAD_VALUE")                  /* enum out of range, bad string */      \
    X(PF_WIRE_BAD_DTYPE, 9, "BAD_DTYPE")                  /* dtype other than f32 */               \
    X(PF_WIRE_UNKNOWN_SHARD, 10, "UNKNOWN_SHARD")         /* id not held by this ps */             \
    X(PF_WIRE_BAD_SHAPE, 11, "BAD_SHAPE")                 /* count != shard size */                \
    X(PF_WIRE_STALE_INCARNATION, 12, "STALE_INCARNATION") /* sender is an old incarnation */       \
    X(PF_WIRE_NOT_READY, 13, "NOT_READY")                 /* ps not restored yet; retry */         \
    X(PF_WIRE_UNEXPECTED, 14, "UNEXPECTED")               /* valid type, wrong place or time */    \
    X(PF_WIRE_INTERNAL, 15, "INTERNAL")                   /* receiver's own failure */             \
    X(PF_WIRE_FORBIDDEN, 16, "FORBIDDEN")                 /* not allowed for this peer's role */   \
    X(PF_WIRE_UNAUTHENTICATED, 17, "UNAUTHENTICATED")     /* no valid proof of the job key */      \
    X(PF_WIRE_NONFINITE, 18, "NONFINITE")                 /* a value became NaN or Inf */          \
    X(PF_WIRE_VERSION_PASSED, 19, "VERSION_PASSED")       /* sync ps already past the step */

typedef enum {
#define PF_WIRE_CODE_ENUM(name, value, text) name = value,
    PF_WIRE_CODE_LIST(PF_WIRE_CODE_ENUM)
#undef PF_WIRE_CODE_ENUM
} pf_wire_code;

/* HELLO.role */
enum {
    PF_WIRE_ROLE_WORKER = 0,
    PF_WIRE_ROLE_CHIEF = 1,
    PF_WIRE_ROLE_EVALUATOR = 2,
    PF_WIRE_ROLE_TOOL = 3,
    PF_WIRE_ROLE_READER = 4 /* a serving task (psflow serve --ps): pulls, and RESTORE on a
                               read-only ps */
};

/* PUSH_ACK.result and PULL_REPLY.push_result */
enum {
    PF_WIRE_PUSH_APPLIED = 0,  /* applied (async), or completed the sync aggregate */
    PF_WIRE_PUSH_ACCEPTED = 1, /* buffered for the sync aggregate of its step */
    PF_WIRE_PUSH_STALE = 2,    /* computed against another version; dropped, counted */
    PF_WIRE_PUSH_DUPLICATE = 3 /* (task, incarnation, seq) seen before; not applied again */
};

/* --- messages -------------------------------------------------------------------------- */

typedef struct pf_wire_header {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t request_id; /* chosen by the requester, echoed by the reply */
    uint32_t flags;
    uint64_t payload_len; /* bytes after the header */
} pf_wire_header;

/* A string on the wire: u32 length + bytes, no terminator, valid UTF-8 without NUL.
 * Decoded strings point into the message; print with "%.*s", (int)s.len, s.ptr. */
typedef struct pf_wire_str {
    const char *ptr;
    uint32_t len;
} pf_wire_str;

/* One tensor: a shard's values or gradients. On the wire its data offset is a multiple of
 * 4 from the message start, so a decoded `data` is aligned when the buffer is. */
typedef struct pf_wire_tensor {
    uint32_t id;       /* shard index in pf_placement order */
    uint32_t dtype;    /* PF_WIRE_F32 */
    uint64_t count;    /* elements */
    const float *data; /* [count] float32; borrowed */
} pf_wire_tensor;

/* HELLO's layout is frozen forever, like the header's and ERROR's: a peer of any version
 * can read who is talking and answer (api/wire.md). */
typedef struct pf_wire_hello {
    uint8_t role; /* PF_WIRE_ROLE_* */
    uint32_t task_index;
    uint64_t incarnation;
    pf_wire_str job; /* <= PF_WIRE_MAX_JOB_NAME bytes */
} pf_wire_hello;

typedef struct pf_wire_hello_ack {
    uint32_t ps_task;
    uint64_t ps_incarnation;
    uint64_t version;  /* updates applied so far */
    uint32_t n_shards; /* shards this ps holds */
} pf_wire_hello_ack;

typedef struct pf_wire_pull {
    uint64_t min_version; /* answer only once version >= min_version */
    uint32_t n;
    const uint32_t *ids; /* [n] shard ids; borrowed */
} pf_wire_pull;

typedef struct pf_wire_pull_reply {
    uint64_t version;
    uint32_t push_result; /* PF_WIRE_PUSH_* when answering PUSH_PULL, else 0 */
    uint32_t n;
    const pf_wire_tensor *tensors; /* [n]; borrowed */
} pf_wire_pull_reply;

typedef struct pf_wire_push {
    uint32_t task_index;
    uint64_t incarnation;
    uint64_t seq;  /* per (task, incarnation): 1, 2, ...; a retry repeats it */
    uint64_t step; /* the version the gradients were computed against */
    uint32_t n;
    const pf_wire_tensor *tensors; /* [n] gradients; borrowed */
} pf_wire_push;

typedef struct pf_wire_push_ack {
    uint64_t seq;
    uint32_t result;  /* PF_WIRE_PUSH_* */
    uint64_t version; /* the ps's version after handling the push */
} pf_wire_push_ack;

typedef struct pf_wire_push_pull {
    pf_wire_push push;
    pf_wire_pull pull;
} pf_wire_push_pull;

/* On the wire, bit 31 of a selection's or row record's id field marks a set of 64-bit ids
 * (api/wire.md, "Rows of a shard"): its rows are then n_rows u64 ids, strictly increasing,
 * instead of u32 rows. The shard id is the field without this bit. */
#define PF_WIRE_ROWS_ID64 0x80000000u

/* Some rows of one shard (IndexedSlices): a ROW_PULL selection, or row gradients in a
 * ROW_PUSH_PULL. A shard's rows are named either by u32 `rows`, relative to the first row
 * of the shard's placement shape (shape[0] rows of shape[1] floats), or (id64) by the
 * 64-bit `ids` of a dynamic embedding table (psflow/dyn_table.h); which row an id names is
 * the ps's business, not the codec's. Exactly one of rows and ids is set when n_rows > 0. */
typedef struct pf_wire_rows {
    uint32_t id;          /* shard index in pf_placement order; never has PF_WIRE_ROWS_ID64 */
    uint32_t width;       /* floats per row (>= 1) in a push; 0 in a selection */
    uint32_t n_rows;      /* rows or ids; may be 0 */
    const uint32_t *rows; /* [n_rows] shard rows, strictly increasing; NULL when id64; borrowed */
    const float *data;    /* [n_rows * width] row gradients in rows' (ids') order; NULL in a
                           * selection */
    int id64;             /* 1: a set of 64-bit ids (PF_WIRE_ROWS_ID64 on the wire), 0: rows */
    const uint64_t *ids;  /* [n_rows] when id64, strictly increasing, else NULL (decoded: NULL
                           * for 0 ids too, else a copy in pf_wire_in.id_views, as the wire's
                           * may be misaligned); borrowed */
} pf_wire_rows;

/* ROW_PULL (worker -> ps): whole shards as PULL, then some rows of other shards; answered
 * by PULL_REPLY whose records are the whole shards in ids' order, then one record per
 * selection (count = n_rows * the shard's row width, rows in selection order). */
typedef struct pf_wire_row_pull {
    uint64_t min_version; /* answer only once version >= min_version */
    uint32_t n;
    const uint32_t *ids; /* [n] whole shards; borrowed */
    uint32_t n_sel;
    const pf_wire_rows *sel; /* [n_sel] row selections (width 0, data NULL); borrowed */
} pf_wire_row_pull;

/* ROW_PUSH_PULL (worker -> ps): a push whose gradients are whole shards (push.tensors) and
 * rows of shards (rows), then a ROW_PULL; answered by PULL_REPLY with push_result. */
typedef struct pf_wire_row_push_pull {
    pf_wire_push push;
    uint32_t n_rows;          /* row records (n_records in api/wire.md), not rows */
    const pf_wire_rows *rows; /* [n_rows] row gradients, one record per shard; borrowed */
    pf_wire_row_pull pull;
} pf_wire_row_push_pull;

/* The shared-memory path of a worker and a ps on one host (api/wire.md, "Shared segment").
 * SEG_ATTACH (worker -> ps, after HELLO): the worker's segment, a sealed memfd the ps opens
 * as /proc/<pid>/fd/<fd>; its first PF_WIRE_SEG_TOKEN_SIZE bytes must equal `token`.
 * Answered by SEG_ACK (no payload) or ERROR. */
#define PF_WIRE_SEG_TOKEN_SIZE 16u
typedef struct pf_wire_seg_attach {
    uint32_t pid;         /* the worker's process id */
    uint32_t fd;          /* the segment's file descriptor in that process */
    uint64_t size;        /* the segment's bytes */
    const uint8_t *token; /* [PF_WIRE_SEG_TOKEN_SIZE]; borrowed */
} pf_wire_seg_attach;

/* One shard of a segment request: where its gradients lie in the attached segment and
 * where its values are to be written, as byte offsets (multiples of 4). */
typedef struct pf_wire_seg_tensor {
    uint32_t id;    /* shard index in pf_placement order */
    uint64_t count; /* elements */
    uint64_t grad;  /* SEG_PUSH_PULL: offset of the count gradients; 0 in a SEG_PULL */
    uint64_t value; /* offset the count values are written to before the reply */
} pf_wire_seg_tensor;

/* SEG_PULL (worker -> ps): a PULL whose values the ps writes into the segment; answered by
 * a PULL_REPLY with no records (version as for PULL) once they are there. */
typedef struct pf_wire_seg_pull {
    uint64_t min_version;
    uint32_t n;
    const pf_wire_seg_tensor *tensors; /* [n]; borrowed */
} pf_wire_seg_pull;

/* SEG_PUSH_PULL (worker -> ps): a PUSH_PULL whose gradients are read from the segment and
 * whose values are written to it; every record is both (the shard's gradients, then where
 * its values go). Answered by a PULL_REPLY with no records, with push_result. */
typedef struct pf_wire_seg_push_pull {
    uint32_t task_index;
    uint64_t incarnation;
    uint64_t seq;
    uint64_t step;
    pf_wire_seg_pull pull;
} pf_wire_seg_push_pull;

/* The dynamic split of the input (api/wire.md "LEASE"): with `data.splits: "dynamic"` the
 * training tasks lease the input's splits from a work queue that ps task 0 keeps. A task
 * reports the splits it finished (their last example's step applied on every ps) and asks
 * for the next one in one round trip. */

/* LEASE_REPLY.state */
enum {
    PF_WIRE_LEASE_GRANTED = 0, /* `split` of `epoch` is leased to the asking task */
    PF_WIRE_LEASE_WAIT = 1,    /* nothing to lease now (every split left is leased): ask again */
    PF_WIRE_LEASE_END = 2      /* training.epochs are done: nothing more to read */
};

/* LEASE (training task -> ps 0): the splits of `epoch` the task finished, and with want 1 a
 * request for the next split. Answered by LEASE_REPLY or ERROR. */
typedef struct pf_wire_lease {
    uint64_t epoch;       /* the epoch of the done splits (that of the task's last lease) */
    uint32_t n_splits;    /* the splits the task cut the input into: 1 .. PF_WIRE_MAX_SPLITS */
    uint32_t want;        /* 0 or 1 */
    uint32_t n_done;      /* <= PF_WIRE_MAX_TENSORS */
    const uint32_t *done; /* [n_done] split indices, each < n_splits; borrowed */
} pf_wire_lease;

typedef struct pf_wire_lease_reply {
    uint32_t state;    /* PF_WIRE_LEASE_* */
    uint32_t split;    /* the split leased (GRANTED), else 0 */
    uint64_t epoch;    /* the queue's epoch: the leased split's */
    uint32_t accepted; /* of the done splits: recorded as done */
    uint32_t refused;  /* not leased to this task in this epoch: nothing recorded */
} pf_wire_lease_reply;

typedef struct pf_wire_stats_reply {
    pf_wire_str json; /* UTF-8 JSON text */
} pf_wire_stats_reply;

typedef struct pf_wire_checkpoint {
    uint64_t step;
    uint32_t final; /* 1: the job is done; checkpoint, acknowledge, then exit */
} pf_wire_checkpoint;

typedef struct pf_wire_checkpoint_ack {
    uint64_t step;
    uint32_t status;  /* 0 written, else a wire error code */
    pf_wire_str path; /* <= PF_WIRE_MAX_PATH bytes */
} pf_wire_checkpoint_ack;

/* RESTORE (chief -> ps): load the complete checkpoint `step` and serve it from version
 * `step`, updating with the job's learning rate times `lr_factor` from then on; answered by
 * CHECKPOINT_ACK (status 0: restored, path: the checkpoint's folder). */
typedef struct pf_wire_restore {
    uint64_t step;
    float lr_factor; /* (0, 1]: 1 after a ps restart; training.nonfinite_lr_scale^rollbacks */
} pf_wire_restore;

typedef struct pf_wire_error {
    uint32_t code;       /* pf_wire_code, never 0 */
    pf_wire_str message; /* <= PF_WIRE_MAX_ERROR_MSG bytes */
} pf_wire_error;

/* The authentication exchange (api/wire.md, psflow/wire_auth.h): AUTH_CHALLENGE carries
 * the ps's nonce, AUTH_PROOF the task's nonce and MAC, AUTH_OK the ps's MAC; each field is
 * 32 bytes (PF_WIRE_NONCE_SIZE, PF_WIRE_MAC_SIZE) and absent fields are NULL. */
typedef struct pf_wire_auth {
    const uint8_t *nonce; /* [32]; borrowed */
    const uint8_t *mac;   /* [32]; borrowed */
} pf_wire_auth;

/* Any message: `type` says which member of u is meant (STATS has none). */
typedef struct pf_wire_msg {
    uint16_t type; /* pf_wire_type */
    uint32_t request_id;
    union {
        pf_wire_hello hello;
        pf_wire_hello_ack hello_ack;
        pf_wire_pull pull;
        pf_wire_pull_reply pull_reply;
        pf_wire_push push;
        pf_wire_push_ack push_ack;
        pf_wire_push_pull push_pull;
        pf_wire_stats_reply stats_reply;
        pf_wire_checkpoint checkpoint;
        pf_wire_checkpoint_ack checkpoint_ack;
        pf_wire_restore restore;
        pf_wire_row_pull row_pull;
        pf_wire_row_push_pull row_push_pull;
        pf_wire_error error;
        pf_wire_auth auth; /* AUTH_CHALLENGE, AUTH_PROOF, AUTH_OK */
        pf_wire_seg_attach seg_attach;
        pf_wire_seg_pull seg_pull;
        pf_wire_seg_push_pull seg_push_pull; /* SEG_ACK has no payload */
        pf_wire_lease lease;
        pf_wire_lease_reply lease_reply;
    } u;
} pf_wire_msg;

/* --- decoding -------------------------------------------------------------------------- */

/* Receive-side state of one connection: the limits, storage for the views (each array grown
 * to the largest count seen, never shrunk, at most max_tensors; the ids at most payload_len / 8)
 * and the wire code of the last failure. */
typedef struct pf_wire_in {
    uint64_t max_payload;
    uint32_t max_tensors;
    pf_wire_tensor *views; /* owned */
    uint32_t cap_views;
    pf_wire_rows *row_views; /* owned: ROW_PUSH_PULL's row gradients */
    uint32_t cap_row_views;
    pf_wire_rows *sel_views; /* owned: the row selections of a ROW_PULL or ROW_PUSH_PULL */
    uint32_t cap_sel_views;
    pf_wire_seg_tensor *seg_views; /* owned: a SEG_PULL's or SEG_PUSH_PULL's records */
    uint32_t cap_seg_views;
    uint64_t *id_views;    /* owned: the 64-bit ids of every id64 row set of the last message */
    uint64_t cap_id_views; /* ids, at most payload_len / 8 of the largest message that had any */
    pf_wire_code code;     /* PF_WIRE_OK after a success */
} pf_wire_in;

/* Limits: payload_len above max_payload is TOO_LARGE, and so is a count of tensors, ids,
 * selections or row records above max_tensors (the ps passes its shard count; a LEASE's
 * done splits are not shards and are held to PF_WIRE_MAX_TENSORS). 0, or a value above
 * PF_WIRE_MAX_*, means PF_WIRE_MAX_PAYLOAD / PF_WIRE_MAX_TENSORS. Allocates nothing. */
void pf_wire_in_init(pf_wire_in *in, uint64_t max_payload, uint32_t max_tensors);

/* Frees the views; safe on a zeroed or deinit'ed pf_wire_in. */
void pf_wire_in_deinit(pf_wire_in *in);

/* Checks the header in msg[0 .. 24): magic, version, known type, flags == 0, payload_len
 * <= in->max_payload. Bytes after the header are not looked at, so a transport can call
 * it on a message's first fragment and reserve 24 + h->payload_len bytes or refuse. On
 * failure *h still holds the raw fields (request_id to echo in the ERROR reply), except
 * that they are all 0 when the message is shorter than 24 bytes or the magic is wrong.
 * Errors: PF_ERR_FORMAT (TRUNCATED, BAD_MAGIC, BAD_TYPE), PF_ERR_UNSUPPORTED
 * (BAD_VERSION, BAD_FLAGS), PF_ERR_RANGE (TOO_LARGE); the code goes to in->code. */
pf_status pf_wire_decode_header(pf_wire_in *in, const void *msg, size_t len, pf_wire_header *h,
                                pf_error *err);

/* Decodes one whole message msg[0 .. len) of any type into *out. msg must be 4-byte
 * aligned (any malloc'd buffer is). Views live in in->views, in->row_views, in->sel_views,
 * in->seg_views and in->id_views (the 64-bit ids of id64 row sets, copied) and are valid until
 * the next decode with `in`; every other pointer in *out (ids, strings, tensor data, rows, row
 * data) points into msg. On failure out->type
 * and out->request_id hold the raw header values as pf_wire_decode_header leaves them (0 when there
 * is no header or the magic is wrong), so a caller can always answer ERROR with out->request_id.
 * Errors: as pf_wire_decode_header, plus PF_ERR_FORMAT (TRUNCATED: len < 24 +
 * payload_len; BAD_LENGTH: a field runs past the payload, or bytes are left over;
 * BAD_VALUE: enum out of range, nonzero padding, string not UTF-8 or containing NUL, rows
 * or 64-bit ids not strictly increasing, a row record of width 0, LEASE's n_splits out of
 * 1 .. PF_WIRE_MAX_SPLITS, want > 1 or a done index >= n_splits, LEASE_REPLY's state > 2),
 * PF_ERR_RANGE (TOO_LARGE: a count over max_tensors - LEASE's n_done over
 * PF_WIRE_MAX_TENSORS, whatever max_tensors is - or a string over its limit),
 * PF_ERR_UNSUPPORTED (BAD_DTYPE), PF_ERR_NOMEM (INTERNAL: growing the views), PF_ERR_INVALID
 * (INTERNAL: msg not aligned). LEASE's done points into msg, 4-byte aligned, like PULL's ids. */
pf_status pf_wire_decode(pf_wire_in *in, const void *msg, size_t len, pf_wire_msg *out,
                         pf_error *err);

/* The wire code for the last decode failure on `in` (what to put in the ERROR reply);
 * PF_WIRE_OK after a success. */
pf_wire_code pf_wire_in_code(const pf_wire_in *in);

/* --- receiving a PULL_REPLY in place ----------------------------------------------------- */

/* The layout of the PULL_REPLY that answers a pull of n tensors of counts[i] elements
 * (records follow each other, one per requested id, in request order): places[i].pos and
 * .len receive where tensor i's values will lie (places[i].dst is left as it is, for the
 * caller to fill), and *len the reply's whole length. Errors: PF_ERR_INVALID (n over
 * PF_WIRE_MAX_TENSORS), PF_ERR_RANGE (the reply would exceed PF_WIRE_MAX_PAYLOAD). */
pf_status pf_wire_pull_reply_places(const uint64_t *counts, uint32_t n, pf_ws_place *places,
                                    size_t *len);

/* pf_wire_decode for a message the transport may have received in place: with places NULL
 * exactly pf_wire_decode; otherwise msg[0 .. len) lacks the ranges places[0 .. n) (as
 * pf_ws_message_places gives them), which are read nowhere. The message must then be a
 * PULL_REPLY of n tensors whose values lie exactly at those places, in order; tensor i's
 * view points at places[i].dst. Anything else is refused without reading a placed byte:
 * PF_ERR_FORMAT with UNEXPECTED (another type) or BAD_LENGTH (another layout), besides the
 * errors of pf_wire_decode. */
pf_status pf_wire_decode_placed(pf_wire_in *in, const void *msg, size_t len,
                                const pf_ws_place *places, int n, pf_wire_msg *out, pf_error *err);

/* --- encoding -------------------------------------------------------------------------- */

/* A piece of tensor data inside an encoded message: it follows the head bytes before
 * head_off and sits at logical offset `pos` of the message. */
typedef struct pf_wire_seg {
    size_t head_off;
    size_t pos;
    const void *data; /* borrowed */
    size_t len;       /* bytes, > 0 */
} pf_wire_seg;

/* Send-side state of one connection: the last encoded message as head bytes plus data
 * segments. The message is head[0 .. seg[0].head_off) + seg[0].data + head[seg[0].head_off
 * .. seg[1].head_off) + seg[1].data + ... + head[last head_off .. head.len). */
typedef struct pf_wire_out {
    pf_buf head;      /* header, fixed fields, strings, tensor headers */
    pf_wire_seg *seg; /* owned, grown geometrically, never shrunk */
    size_t n_seg, cap_seg;
    size_t total; /* message length, 0 when none */
} pf_wire_out;

/* An empty encoder. Allocates nothing. */
void pf_wire_out_init(pf_wire_out *out);

/* Frees what out owns; safe on a zeroed or deinit'ed pf_wire_out. */
void pf_wire_out_deinit(pf_wire_out *out);

/* Encoders: each replaces the message in `out` with a new one. Once `out` has held a
 * message at least as large (in tensors and head bytes), encoding allocates nothing.
 * Tensor data is referenced, not copied. On failure `out` holds no message
 * (pf_wire_out_len() is 0). Errors: PF_ERR_INVALID (a field the decoder would refuse:
 * enum out of range, dtype not f32, n over PF_WIRE_MAX_TENSORS, data NULL with count > 0,
 * string over its limit, not UTF-8 or containing NUL), PF_ERR_RANGE (payload over
 * PF_WIRE_MAX_PAYLOAD), PF_ERR_NOMEM. err may be NULL. */
pf_status pf_wire_encode(pf_wire_out *out, const pf_wire_msg *m, pf_error *err);
pf_status pf_wire_encode_hello(pf_wire_out *out, uint32_t request_id, const pf_wire_hello *m,
                               pf_error *err);
pf_status pf_wire_encode_hello_ack(pf_wire_out *out, uint32_t request_id,
                                   const pf_wire_hello_ack *m, pf_error *err);
pf_status pf_wire_encode_pull(pf_wire_out *out, uint32_t request_id, const pf_wire_pull *m,
                              pf_error *err);
pf_status pf_wire_encode_pull_reply(pf_wire_out *out, uint32_t request_id,
                                    const pf_wire_pull_reply *m, pf_error *err);
pf_status pf_wire_encode_push(pf_wire_out *out, uint32_t request_id, const pf_wire_push *m,
                              pf_error *err);
pf_status pf_wire_encode_push_ack(pf_wire_out *out, uint32_t request_id, const pf_wire_push_ack *m,
                                  pf_error *err);
pf_status pf_wire_encode_push_pull(pf_wire_out *out, uint32_t request_id,
                                   const pf_wire_push_pull *m, pf_error *err);
/* Row messages: row ids are copied into the head, row data is referenced like tensor data
 * (dtype is always f32: pf_wire_rows has no dtype). PF_ERR_INVALID besides the common cases:
 * rows (or, id64, ids) not strictly increasing, rows (ids) NULL while n_rows > 0, ids set
 * without id64 or rows with it, a shard id with PF_WIRE_ROWS_ID64 set, a row record with
 * width 0 or data NULL while n_rows > 0, a selection with width != 0 or data != NULL, n,
 * n_sel or the number of row records over PF_WIRE_MAX_TENSORS. */
pf_status pf_wire_encode_row_pull(pf_wire_out *out, uint32_t request_id, const pf_wire_row_pull *m,
                                  pf_error *err);
pf_status pf_wire_encode_row_push_pull(pf_wire_out *out, uint32_t request_id,
                                       const pf_wire_row_push_pull *m, pf_error *err);
/* Segment messages (no tensor data: the head is the whole message). PF_ERR_INVALID besides
 * the common cases: token NULL, an offset not a multiple of 4, offset + 4 count past 2^64,
 * a SEG_PULL record with grad != 0. */
pf_status pf_wire_encode_seg_attach(pf_wire_out *out, uint32_t request_id,
                                    const pf_wire_seg_attach *m, pf_error *err);
pf_status pf_wire_encode_seg_ack(pf_wire_out *out, uint32_t request_id, pf_error *err);
pf_status pf_wire_encode_seg_pull(pf_wire_out *out, uint32_t request_id, const pf_wire_seg_pull *m,
                                  pf_error *err);
pf_status pf_wire_encode_seg_push_pull(pf_wire_out *out, uint32_t request_id,
                                       const pf_wire_seg_push_pull *m, pf_error *err);
/* The lease messages (no tensor data: the head is the whole message). PF_ERR_INVALID: LEASE's
 * n_splits out of 1 .. PF_WIRE_MAX_SPLITS, want > 1, n_done over PF_WIRE_MAX_TENSORS, done
 * NULL while n_done > 0, a done index >= n_splits; LEASE_REPLY's state > 2. */
pf_status pf_wire_encode_lease(pf_wire_out *out, uint32_t request_id, const pf_wire_lease *m,
                               pf_error *err);
pf_status pf_wire_encode_lease_reply(pf_wire_out *out, uint32_t request_id,
                                     const pf_wire_lease_reply *m, pf_error *err);
pf_status pf_wire_encode_stats(pf_wire_out *out, uint32_t request_id, pf_error *err);
pf_status pf_wire_encode_stats_reply(pf_wire_out *out, uint32_t request_id,
                                     const pf_wire_stats_reply *m, pf_error *err);
pf_status pf_wire_encode_checkpoint(pf_wire_out *out, uint32_t request_id,
                                    const pf_wire_checkpoint *m, pf_error *err);
pf_status pf_wire_encode_restore(pf_wire_out *out, uint32_t request_id, const pf_wire_restore *m,
                                 pf_error *err);
pf_status pf_wire_encode_checkpoint_ack(pf_wire_out *out, uint32_t request_id,
                                        const pf_wire_checkpoint_ack *m, pf_error *err);
/* type: PF_WIRE_AUTH_CHALLENGE (nonce), AUTH_PROOF (nonce, mac) or AUTH_OK (mac); the
 * fields the type carries must not be NULL. Errors: PF_ERR_INVALID, PF_ERR_NOMEM. */
pf_status pf_wire_encode_auth(pf_wire_out *out, uint16_t type, uint32_t request_id,
                              const pf_wire_auth *m, pf_error *err);
/* ERROR never fails on its text, so an error can always be reported: a message over
 * PF_WIRE_MAX_ERROR_MSG bytes is cut at a character boundary, and bytes that are not
 * UTF-8 become '?' (pf_wire_encode does the same for an ERROR). message is
 * NUL-terminated; NULL means "". Errors: PF_ERR_INVALID (code 0), PF_ERR_NOMEM. */
pf_status pf_wire_encode_error(pf_wire_out *out, uint32_t request_id, uint32_t code,
                               const char *message, pf_error *err);

/* Length of the encoded message in bytes (0 when none). */
size_t pf_wire_out_len(const pf_wire_out *out);

/* The message as pieces for a gathering write - head bytes and tensor data, in order, none
 * empty - which is how the transport sends it (pf_ws_sendv). Fills at most max entries of
 * parts and returns how many the whole message needs: at most 2 * (tensors + row records) +
 * 1, as every tensor and row record with values is one piece of data between head pieces;
 * the caller passes a larger array when that is over max. */
size_t pf_wire_out_parts(const pf_wire_out *out, struct iovec *parts, size_t max);

/* Appends a copy of the whole message to dst (tests, the fuzz target). Errors: as
 * pf_buf_reserve. */
pf_status pf_wire_out_gather(const pf_wire_out *out, pf_buf *dst);

/* --- query ----------------------------------------------------------------------------- */

/* "PUSH", "ERROR", ...; "UNKNOWN" for other values. Never NULL. */
const char *pf_wire_type_name(uint32_t type);

/* "BAD_MAGIC", ...; "UNKNOWN" for other values. Never NULL. */
const char *pf_wire_code_name(uint32_t code);

#endif
