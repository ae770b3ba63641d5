/* placement.h - which ps task holds which part of which variable.
 *
 * Placement is a pure function of the job spec (model, replicas.ps, placement.strategy,
 * placement.partitioner), so every process computes the same answer and no round trip is
 * needed to agree on it.
 *
 * Partitioning (axis 0 only) follows TensorFlow's partitioners exactly:
 *   none          1 shard
 *   fixed_shards  min(num_shards, rows)                  (FixedShardsPartitioner)
 *   min_size      min(max_shards, rows, max(1, ceil(bytes / min_shard_bytes)))
 *                                                        (MinSizePartitioner)
 *   max_size      ceil(rows / max(1, floor(max_shard_bytes / row_bytes))), capped at
 *                 max_shards when max_shards > 0          (MaxSizePartitioner)
 * where bytes = rows * row_bytes and row_bytes = 4 * (product of the other dimensions).
 * Rows are split "div" style: with r rows over s shards, shard i gets r / s rows plus one
 * when i < r % s (13 rows over 5 shards: 3, 3, 3, 2, 2). A partitioned variable's shards
 * are named "<variable>/part_<i>" as in TensorFlow; an unpartitioned one keeps its name.
 *
 * Strategies place shards in creation order (variables in pf_model_layout order, each
 * variable's shards in order):
 *   round_robin  shard k goes to ps k mod n_ps            (replica_device_setter)
 *   greedy       each shard goes to the ps with the fewest bytes so far, lowest index on
 *                ties                                     (GreedyLoadBalancingStrategy
 *                                                          with byte_size_load_fn)
 *
 * Because a variable is stored row-major in the flat parameter vector (model.h), every
 * shard is one contiguous range [offset, offset + count) of that vector.
 *
 * A dynamic table (model.h) is no part of that vector: it is cut into one shard per ps task,
 * shard i on ps task i whatever the strategy, each holding the rows of the ids pf_dyn_owner
 * gives its task, at most ceil(max_rows / n_ps) of them (so a table never holds more than
 * max_rows + n_ps - 1 rows; ids do not spread exactly evenly, so a task's share may fill
 * before the table's does). Such shards weigh 0 bytes in the strategies' loads.
 */
#ifndef PSFLOW_PLACEMENT_H
#define PSFLOW_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/model.h"
#include "psflow/spec.h"
#include "psflow/status.h"

#define PF_SHARD_NAME_MAX 48

typedef struct pf_shard_info {
    char name[PF_SHARD_NAME_MAX]; /* "dense_0/kernel" or "dense_0/kernel/part_1" */
    int var;                      /* index of the variable in pf_model_layout order */
    int shard;                    /* index of this shard within the variable */
    int num_shards;               /* shards of the variable */
    int rank;                     /* the variable's rank: 1 or 2 */
    int64_t shape[2];             /* this shard's shape (shape[1] = 1 for rank 1) */
    int64_t row_offset;           /* first row of the variable held by this shard */
    size_t offset;                /* first element in the flat parameter vector */
    size_t count;                 /* elements */
    int ps_task;                  /* ps task index that holds it */
    /* A dynamic table's shard (dyn_table.h): every ps task holds one, the rows of the ids
     * pf_dyn_owner gives it, at most max_rows of them; shape[0] and count are 0 (it is no part
     * of the flat vector) */
    int dynamic;
    int64_t max_rows;
} pf_shard_info;

typedef struct pf_placement {
    int n_ps;
    int n_shards;
    pf_shard_info *shards; /* n_shards entries, creation order; owned */
    int64_t *bytes_per_ps; /* n_ps entries; owned */
    int *shards_per_ps;    /* n_ps entries; owned */
} pf_placement;

/* Number of shards TensorFlow's partitioner gives a variable of `rows` rows and
 * `row_bytes` bytes per row (always 1..rows). */
int pf_partition_count(const pf_partitioner_spec *p, int64_t rows, int64_t row_bytes);

/* Rows of shard i when `rows` rows are split over `n` shards ("div" split). */
int64_t pf_partition_rows(int64_t rows, int n, int i);

/* Computes the placement for a job into *out (no prior init needed; nothing to free on
 * failure). Errors: PF_ERR_NOMEM, PF_ERR_INVALID (replicas.ps < 1 or an empty dimension,
 * which only a hand-built spec can have). */
pf_status pf_placement_compute(const pf_job_spec *spec, pf_placement *out);

/* Frees what p owns and zeroes it; safe on a zeroed placement. */
void pf_placement_deinit(pf_placement *p);

/* Indices (into p->shards) of the shards held by ps task `ps`, in creation order; writes
 * at most max entries to out and returns the number held. */
int pf_placement_shards_of(const pf_placement *p, int ps, int *out, int max);

/* Largest shard in bytes (for balance checks and buffer sizing). */
int64_t pf_placement_max_shard_bytes(const pf_placement *p);

/* The largest ps task's bytes over the mean of all n_ps tasks' (1.0 for an empty model):
 * 1.0 is a perfect balance, n_ps all of it on one task. */
double pf_placement_imbalance(const pf_placement *p);

/* The shards as GET /api/v1/jobs/{name}/placement and `psflow plan -o json` list them, in
 * creation order: {variable, name, kind ("dynamic" for a dynamic table's shard, "table" for
 * the other shards of the first n_tables variables, else "dense"), shape, shard, offset, rows,
 * ps_task, bytes, and max_rows for a dynamic shard}. A new JSON array, or NULL on
 * allocation failure. */
struct json_t *pf_placement_shards_json(const pf_placement *p, int n_tables);

#endif
