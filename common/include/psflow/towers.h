/* towers.h - a worker's in-graph replicas (the "towers" of TensorFlow's multi-GPU trainers):
 * K copies of the model, replica r on the job's devices[r], each computing the gradient of
 * its slice of the worker's batch; their gradients are averaged in replica order 0, 1, ...
 * into the one gradient the worker pushes.
 *
 * Data: with K replicas and training.batch_size b, a worker reads K*b examples a step, and
 * replica r takes rows r*b .. r*b + b - 1 of them. Worker i of W reads the K*b stream
 * positions pf_shard_position(step, W, i, K*b) (data.h), which are exactly the positions
 * that tasks i*K .. i*K + K - 1 of W*K tasks with batch b would read: replica r reads what
 * virtual task i*K + r reads. Each replica's gradient is that of its mean loss, so their
 * average is the mean-loss gradient of all K*b examples up to float rounding, and W workers
 * x K replicas x batch b train like one process with batch W*K*b.
 *
 * Threads: replica 0 runs on the thread that created the set, which is the one thread that
 * may call the functions below. Replicas 1 .. K-1 run on threads of their own, started by
 * pf_towers_create and ended by pf_towers_destroy; each asks for its own backend there, so
 * a replica on a GPU has its buffers on its GPU (backend.h). K replicas on the CPU share
 * the cores (pf_backend_openblas_share) rather than each asking OpenBLAS for all of them.
 */
#ifndef PSFLOW_TOWERS_H
#define PSFLOW_TOWERS_H

#include <stdint.h>

#include "psflow/backend.h"
#include "psflow/spec.h"
#include "psflow/status.h"

typedef struct pf_towers pf_towers;

/* New set of spec->replicas_per_worker replicas of spec->model, each for batches of
 * spec->training.batch_size examples. `backend` NULL puts replica r on spec->devices[r] (as
 * pf_backend_for_device gives it); otherwise every replica runs on `backend`, which must be
 * a CPU backend. The spec is read during the call only. Errors, with one line in err: those
 * of pf_backend_for_device for the first replica whose device is not usable, PF_ERR_NOMEM
 * (naming the replica), PF_ERR_INVALID for a replica count out of range. */
pf_status pf_towers_create(const pf_job_spec *spec, const pf_backend *backend, pf_towers **out,
                           pf_error *err);
/* Ends the replicas' threads and frees everything. Safe on NULL. */
void pf_towers_destroy(pf_towers *t);

/* The averaged gradient of one step, in host memory. params: [num_params] (host), the
 * variables every replica computes with. x: [K*batch, inputs] (host); targets [K*batch]
 * (host, linear models) or labels [K*batch] (host int32, classifiers), the other may be
 * NULL. grads: [num_params] (host) receives (g_0 + g_1 + ... + g_{K-1}) / K, g_r the
 * gradient of replica r's mean loss, summed in that order. Returns the mean of the
 * replicas' losses. */
float pf_towers_gradient(pf_towers *t, const float *params, const float *x, const float *targets,
                         const int32_t *labels, float *grads);

/* K, and replica r's backend (borrowed; for replica 0 the calling thread's). */
int pf_towers_count(const pf_towers *t);
const pf_backend *pf_towers_backend(const pf_towers *t, int r);

#endif
