/* ps_client.h - a worker's connections to every parameter server of its job.
 *
 * The client splits the flat parameter vector over the ps tasks by the job's placement
 * (computed from the spec, identical in every process), sends one request to every ps at
 * once and waits for all replies, copying pulled values straight into the caller's host
 * vector. Versions are per ps: each ps counts the updates it applied, and the job's global
 * step is ps 0's (as TensorFlow keeps global_step on ps 0).
 *
 * Failures: when a ps connection drops, the pending request fails over to reconnecting
 * (with backoff, up to the retry deadline) and is sent again with the same push sequence
 * number, so a push the ps had already applied is recognised as a duplicate rather than
 * applied twice. A restarted ps (new incarnation) has restored its newest checkpoint and
 * the request continues against it. Not thread-safe: one trainer thread uses a client.
 */
#ifndef PSFLOW_WORKER_PS_CLIENT_H
#define PSFLOW_WORKER_PS_CLIENT_H

#include <stdint.h>

#include "psflow/placement.h"
#include "psflow/spec.h"
#include "psflow/status.h"

typedef struct ps_client ps_client;

typedef struct ps_client_options {
    const pf_job_spec *spec;
    const char *const *ps_addrs; /* replicas.ps "host:port" strings */
    int task;                    /* training task index: chief 0, then workers */
    uint8_t role;                /* PF_WIRE_ROLE_* */
    uint64_t incarnation;
    double retry_seconds; /* give up reconnecting after this long */
    const int *stop;      /* NULL, or a flag another thread sets to abandon reconnecting */
} ps_client_options;

/* Connects to every ps and says HELLO; returns once all answered (or fails after
 * retry_seconds, naming the ps it could not reach). */
pf_status ps_client_create(const ps_client_options *o, ps_client **out, pf_error *err);
void ps_client_destroy(ps_client *c);

/* Pulls every shard: params (host, pf_model_num_params floats) receives the values;
 * min_version[p] (NULL = no minimum) makes ps p answer only once it has reached that
 * version; versions[p] receives ps p's version. */
pf_status ps_client_pull(ps_client *c, const uint64_t *min_version, float *params,
                         uint64_t *versions, pf_error *err);

/* Pushes grads (host, full vector; each ps gets its shards) computed against versions
 * step[p], then pulls like ps_client_pull in the same round trip. results[p] (may be NULL)
 * receives each ps's PF_WIRE_PUSH_* result. */
pf_status ps_client_push_pull(ps_client *c, const float *grads, const uint64_t *step,
                              const uint64_t *min_version, float *params, uint64_t *versions,
                              uint32_t *results, pf_error *err);

/* Pushes grads to every ps without pulling; results as in ps_client_push_pull. */
pf_status ps_client_push(ps_client *c, const float *grads, const uint64_t *step, uint64_t *versions,
                         uint32_t *results, pf_error *err);

/* Asks every ps to checkpoint at `step` (final: the job is done, then they exit) and
 * waits for their acknowledgements. */
pf_status ps_client_checkpoint(ps_client *c, uint64_t step, int final, pf_error *err);

/* ps p's statistics as JSON text (new string, pf_free it). */
char *ps_client_stats(ps_client *c, int p, pf_error *err);

int ps_client_num_ps(const ps_client *c);
const pf_placement *ps_client_placement(const ps_client *c);

#endif
