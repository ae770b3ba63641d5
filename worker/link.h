/* link.h - a worker's link to the parameter servers of its job: one connection to each.
 *
 * The link splits the flat parameter vector over the ps tasks by the job's placement
 * (computed from the spec, identical in every process), sends one request to every ps at
 * once and waits for all replies, copying pulled values straight into the caller's host
 * vector. Versions are per ps: each ps counts the updates it applied, and the job's global
 * step is ps 0's (as TensorFlow keeps global_step on ps 0).
 *
 * Failures: when a ps connection drops, the pending request fails over to reconnecting
 * (with backoff, up to the retry deadline) and is sent again with the same push sequence
 * number, so a push the ps had already applied is recognised as a duplicate rather than
 * applied twice. A restarted ps (new incarnation) has restored its newest checkpoint and
 * the request continues against it. Not thread-safe: one trainer thread uses a link.
 *
 * A ps on the same host may take the link's shared segment (options.segment): requests to it
 * then name where the gradients lie and where the values go in the segment, and the ps
 * copies them there itself; the socket carries a few hundred bytes per round trip.
 */
#ifndef PSFLOW_WORKER_LINK_H
#define PSFLOW_WORKER_LINK_H

#include <stdint.h>

#include "psflow/placement.h"
#include "psflow/spec.h"
#include "psflow/status.h"
#include "psflow/wire.h"

typedef struct worker_link worker_link;

typedef struct worker_link_options {
    const pf_job_spec *spec;
    const char *const *ps_addrs; /* replicas.ps "host:port" strings */
    int task;                    /* training task index: chief 0, then workers */
    uint8_t role;                /* PF_WIRE_ROLE_* */
    uint64_t incarnation;
    double retry_seconds; /* give up reconnecting after this long */
    const int *stop;      /* NULL, or a flag another thread sets to abandon reconnecting */
    /* This task's data-plane key (PF_WIRE_KEY_SIZE bytes, pf_wire_task_key), or NULL. With
     * a key the link proves it to every ps and accepts only a ps that proves it back; a ps
     * that answers HELLO without authenticating is refused (no downgrade). */
    const uint8_t *task_key;
    const char *ca_file; /* NULL: plain TCP; else TLS (wss), each ps verified against it */
    /* A model with embedding tables (worker/rows.h), or NULL. With it the link is in row
     * mode: params and grads are the compact vectors of `rows`, tables are pulled and pushed
     * by the rows of the plan set with worker_link_set_plan (ROW_PULL, ROW_PUSH_PULL), and a
     * push-pull pulls nothing (the next worker_link_pull fetches the next batch's rows).
     * The link keeps the pointer. */
    const struct worker_rows *rows;
    /* Keep a parameter and a gradient vector in a shared-memory segment (psflow/segment.h)
     * offered to every ps (SEG_ATTACH): a ps on this host that takes it reads the gradients
     * and writes the values there, and only a small request and reply cross the socket.
     * Not in row mode. A ps that refuses it (another host, PSFLOW_SHM=off) is spoken to over
     * the socket as usual. */
    int segment;
} worker_link_options;

/* When the requests of the last round trip were all handed to the transport (pf_clock_now
 * seconds; 0 before the first): the push's end and the start of the wait for its answers. */
double worker_link_sent_at(const worker_link *c);

/* The segment's parameter vector (and in *grads its gradient vector), each
 * pf_model_num_params floats, or NULL when the link has no segment. Pulls into and pushes
 * from these vectors go through the segment to every ps that took it; the link owns them
 * (worker_link_destroy unmaps them). */
float *worker_link_segment(worker_link *c, float **grads);

/* How many ps took the segment on their current connection (0 without one). */
int worker_link_shared(const worker_link *c);

struct worker_row_plan;

/* Row mode: the rows every following pull fetches and every push sends (NULL: none, only
 * the dense shards), and the layout of the vectors they use (the plan's worker_rows; with
 * none, the link's). The link keeps the pointer; the caller keeps the plan alive and
 * unchanged while it is set. */
void worker_link_set_plan(worker_link *c, const struct worker_row_plan *plan);

/* Connects to every ps and says HELLO; returns once all answered (or fails after
 * retry_seconds, naming the ps it could not reach). */
pf_status worker_link_create(const worker_link_options *o, worker_link **out, pf_error *err);
void worker_link_destroy(worker_link *c);

/* Pulls every shard: params (host, pf_model_num_params floats) receives the values;
 * min_version[p] (NULL = no minimum) makes ps p answer only once it has reached that
 * version; versions[p] receives ps p's version. */
pf_status worker_link_pull(worker_link *c, const uint64_t *min_version, float *params,
                           uint64_t *versions, pf_error *err);

/* Pushes grads (host, full vector; each ps gets its shards) computed against versions
 * step[p], then pulls like worker_link_pull in the same round trip. results[p] (may be NULL)
 * receives each ps's PF_WIRE_PUSH_* result. */
pf_status worker_link_push_pull(worker_link *c, const float *grads, const uint64_t *step,
                                const uint64_t *min_version, float *params, uint64_t *versions,
                                uint32_t *results, pf_error *err);

/* worker_link_push_pull in two halves, so the caller can compute while the request is in
 * flight (async prefetch). _start encodes and sends; grads may be reused as soon as it
 * returns (the transport has copied them), but params belongs to the link until _finish
 * returns, whatever it returns. _finish waits for every answer (reconnecting as
 * worker_link_push_pull does, except that a push whose connection dropped before its
 * answer is not sent again: it is replaced by a pull, reported PF_WIRE_PUSH_STALE). No
 * other request may be made in between. */
pf_status worker_link_push_pull_start(worker_link *c, const float *grads, const uint64_t *step,
                                      const uint64_t *min_version, float *params, pf_error *err);
pf_status worker_link_push_pull_finish(worker_link *c, uint64_t *versions, uint32_t *results,
                                       pf_error *err);

/* Row mode, a fused step: one round trip per ps that pushes grads (the compact vector of the
 * plan set, computed against step[p]) and pulls the dense shards and the rows of `next`
 * (another batch's plan over the same layout) into params, answered once ps p reaches
 * min_version[p] (NULL: at once). The ps applies the push before it gathers the pull, so the
 * rows pulled include this push wherever the batches share ids. Afterwards `next` is the
 * link's plan (worker_link_set_plan). results as in worker_link_push_pull. */
pf_status worker_link_push_pull_rows(worker_link *c, const float *grads, const uint64_t *step,
                                     const struct worker_row_plan *next,
                                     const uint64_t *min_version, float *params, uint64_t *versions,
                                     uint32_t *results, pf_error *err);

/* Pushes grads to every ps without pulling; results as in worker_link_push_pull. */
pf_status worker_link_push(worker_link *c, const float *grads, const uint64_t *step,
                           uint64_t *versions, uint32_t *results, pf_error *err);

/* One LEASE round trip with ps 0 (data.splits dynamic, api/wire.md): reply receives its
 * answer; reconnects and asks again as a push-pull does. */
pf_status worker_link_lease(worker_link *c, const pf_wire_lease *req, pf_wire_lease_reply *reply,
                            pf_error *err);

/* Asks every ps to checkpoint at `step` (final: the job is done, then they exit) and
 * waits for their acknowledgements. */
pf_status worker_link_checkpoint(worker_link *c, uint64_t step, int final, pf_error *err);
/* Errors of worker_link_checkpoint: PF_ERR_RANGE when a sync ps is already past `step`
 * (ask again at a later one); PF_ERR_UNAVAILABLE also when a ps restarted meanwhile (the
 * checkpoint is given up: worker_link_take_restart says which). Every ps has answered (or
 * its connection was closed) when it returns. */

/* Asks every ps to checkpoint at `step` without waiting for the answers, so the caller
 * trains on meanwhile: a sync ps behind `step` writes when it reaches that version, and
 * with backup workers that may take the caller's own next gradients (a chief waiting for it
 * instead could wait forever: the ps tasks move on without the chief only while the other
 * workers happen to feed the same step on every ps). One such checkpoint at a time; sending
 * another, worker_link_checkpoint or worker_link_restore gives it up. Errors: PF_ERR_NOMEM. */
pf_status worker_link_checkpoint_send(worker_link *c, uint64_t step, pf_error *err);

/* How the checkpoint worker_link_checkpoint_send asked went: 1 when every ps answered,
 * *st PF_OK or the failure that says most (err its message: PF_ERR_RANGE a ps is past
 * `step`, PF_ERR_UNAVAILABLE a connection ended before its ps answered, PF_ERR_NONFINITE,
 * ...); 0 while a ps has not, after waiting up to wait_seconds (0: not at all); -1 when none
 * is in flight (never sent, already polled done, or given up). */
int worker_link_checkpoint_poll(worker_link *c, double wait_seconds, pf_status *st, pf_error *err);

/* Gives up the checkpoint worker_link_checkpoint_send asked, if it is still in flight: any
 * answer that comes later is ignored. */
void worker_link_checkpoint_give_up(worker_link *c);

/* Tells every ps to restore the complete checkpoint `step` (the chief's consistent
 * rollback, RESTORE) and to update with the job's learning rate times lr_factor (in (0, 1])
 * from then on, and waits for all of them. */
pf_status worker_link_restore(worker_link *c, uint64_t step, float lr_factor, pf_error *err);

/* How long a round trip waits for its answers from now on (seconds; 0: the job's
 * training.stall_timeout_secs, the default): a server waits for a pass's rows as long as its
 * requests may wait, and for a RESTORE as long as reading a checkpoint takes. */
void worker_link_set_reply_limit(worker_link *c, double seconds);

/* 1 when a ps was seen with a new incarnation (restarted, and restored its newest complete
 * checkpoint) since the last call; *ps and *version name it and the version it restored.
 * 0 otherwise. */
int worker_link_take_restart(worker_link *c, int *ps, uint64_t *version);

#endif
