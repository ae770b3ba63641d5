/* footprint.h - what a job needs before anything is allocated: its parameters, shards and
 * the memory of each kind of task, and the limits every job must stay within.
 *
 * The coordinator compares these figures with its admission limits and its agents' memory
 * when a job is submitted; `psflow train`, `psflow ps --job` and `psflow worker --job`
 * compare them with the machine's memory before they start. Bytes are estimates of the
 * largest allocations, float32 everywhere (P = the model's parameters, S = the optimizer's
 * slots per parameter, T = training tasks, B' = max(batch_size, 1000), the largest batch a
 * model is built for, evaluation included):
 *
 *   model     4 P (1 + S)                    values and optimizer slots, the whole model
 *   ps task   B + 4 L (1 + S + T_sync) + 2 T M
 *                                            L = the parameters placed on that task, and
 *                                            nothing the size of the whole model: B the
 *                                            process before it holds anything
 *                                            (PF_FOOTPRINT_PS_BASE), its values and optimizer
 *                                            slots, in sync mode one pending gradient per
 *                                            training task (T_sync = T, else 0; the step's
 *                                            average is summed into the first), and per
 *                                            training task the data plane's two buffers of
 *                                            the largest message it exchanges with the ps,
 *                                            M = 4 L + 88 + 32 n (n shards): the message
 *                                            being received (a push is checked whole before
 *                                            any of it is applied) and the part of a reply
 *                                            the socket has not taken yet: written from
 *                                            the values themselves, and copied only when
 *                                            an update comes while it is being written
 *                                            (so no update changes a reply halfway); for
 *                                            a task on the same host that shares its
 *                                            segment (psflow/segment.h) instead, the pages
 *                                            of this ps's shards in it: their gradients
 *                                            and their values, 4 L each. Each dynamic
 *                                            table's shard adds its table at its share of
 *                                            max_rows (pf_dyn_bytes_bound), the copy of its
 *                                            rows a checkpoint writes (at the cap: values,
 *                                            slots, an id and a step a row) and 24 bytes an
 *                                            id of a batch (an update's pointers), R = the
 *                                            rows of the ids one message may name (a
 *                                            batch's, 4 w + 16 bytes each) to M, and in sync
 *                                            mode (T + 1) R: every task's rows of a step and
 *                                            their sum
 *   training  4 (4 P + B' (2 I + 4 + A + 2 W)) + D
 *                                            params and gradients on the host and the
 *                                            backend, the input batch, the activations
 *                                            (A = the sum of the layers' widths) and two
 *                                            error buffers of the widest layer (W); D the
 *                                            data set when its size is known from the spec
 *                                            (synthetic_linear: 16 n for the examples and
 *                                            their shuffle order, plus n/5 test examples);
 *                                            files are read on the agent and not counted;
 *                                            for a model with embedding tables P counts
 *                                            of each table only the B' x max_ids rows a
 *                                            batch can name (a worker holds a batch's
 *                                            rows, worker/rows.h)
 *   process   as a training task with the whole tables, plus 4 P (1 + S) for the slots
 *             and the initial values, plus the dynamic tables at their row caps
 *   dynamic   each dynamic table at max_rows rows (pf_dyn_bytes_bound: values, slots,
 *             its hash, order and admission sketch); P counts of it the B' x max_ids
 *             rows one batch can name, as the compact model a trainer computes on
 *             (dyn_batch.h) holds them
 *
 * All functions are pure and reentrant.
 */
#ifndef PSFLOW_FOOTPRINT_H
#define PSFLOW_FOOTPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/placement.h"
#include "psflow/spec.h"
#include "psflow/status.h"

/* Variable shards a job may have at all: no message of the data plane carries more
 * tensors (api/wire.md), and placing that many costs a few megabytes. */
#define PF_FOOTPRINT_MAX_SHARDS 65536

/* A ps process before it holds anything: the binary, its libraries (OpenBLAS, OpenSSL,
 * libwebsockets, SQLite, zlib, the CUDA runtime; cuBLAS is opened only for a GPU), stacks
 * and the allocator's arenas. Measured at 14 MiB peak RSS with a 65 KB share
 * (bench/ps_memory.sh); the rest is margin. */
#define PF_FOOTPRINT_PS_BASE (32ll << 20)

/* A ps task's largest message, M = 4 L + 88 + 32 n: the message header and fixed fields,
 * and a tensor record plus a pulled id per shard, with room. */
#define PF_FOOTPRINT_PS_MESSAGE_EXTRA 88
#define PF_FOOTPRINT_PS_SHARD_EXTRA   32

typedef struct pf_footprint {
    int64_t params;        /* P */
    int slots;             /* S */
    int64_t model_bytes;   /* values and optimizer slots of the whole model */
    int64_t shards;        /* variable shards the partitioner makes */
    int64_t worker_bytes;  /* one training task (a worker or the chief) */
    int64_t data_bytes;    /* D: the data set in memory, included in worker_bytes and
                              process_bytes; 0 when files hold it (read on the agent) */
    int64_t process_bytes; /* psflow train: the whole job in one process */
    int64_t dynamic_bytes; /* the dynamic tables at their row caps, in process_bytes */
} pf_footprint;

/* Fills *out from the spec alone, without placing or allocating anything. */
void pf_footprint_estimate(const pf_job_spec *spec, pf_footprint *out);

/* Bytes ps task `task` needs under placement p (the formula above). */
int64_t pf_footprint_ps_bytes(const pf_job_spec *spec, const pf_placement *p, int task);

/* The limits every job has whatever runs it: stream positions max_steps * T * batch_size
 * fit in 64 bits (/training/max_steps) and at most PF_FOOTPRINT_MAX_SHARDS shards
 * (/placement/partitioner). PF_ERR_SPEC with err->pointer naming the field. */
pf_status pf_footprint_check(const pf_job_spec *spec, const pf_footprint *fp, pf_error *err);

/* Whether the job can run as ps and worker tasks: PF_ERR_SPEC naming /replicas/evaluator
 * for a job with dynamic tables and an evaluator task (an evaluator pulls whole tables; the
 * chief evaluates such jobs). */
pf_status pf_footprint_check_cluster(const pf_job_spec *spec, pf_error *err);

/* With the job placed: no ps task holds more than one message of the data plane carries
 * (its values in one PULL_REPLY: PF_WIRE_MAX_PAYLOAD) or more than PF_WIRE_MAX_TENSORS
 * shards. PF_ERR_SPEC naming /replicas/ps. */
pf_status pf_footprint_check_placement(const pf_job_spec *spec, const pf_placement *p,
                                       pf_error *err);

/* "1.5 GiB", "512 MiB", "12 KiB", "100 B": bytes for messages, in binary units. */
void pf_footprint_format_bytes(int64_t bytes, char *buf, size_t cap);

#endif
