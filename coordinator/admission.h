/* admission.h - what a job must satisfy to be accepted by the coordinator, beyond a valid
 * spec: its data files lie under the data roots, its size stays within the configured
 * limits and the data plane's own (psflow/footprint.h), and it fits the memory its agents
 * registered. Checked when a job is submitted and when PATCH changes its workers; a job
 * refused is never stored (422, the problem naming the field).
 *
 * Memory: each ps task needs its share of the placement (footprint.h: a base, values,
 * optimizer slots, sync accumulators, and a receive and a reply buffer per training task;
 * nothing the size of the whole model); each training task the parameters, gradients and
 * batch buffers. A share larger than the largest live ps agent's memory, or a training
 * task larger than the largest live worker agent's, can never run: refused. While no agent
 * of a role has registered its memory, only the configured model limit applies.
 */
#ifndef PSFLOW_COORDINATOR_ADMISSION_H
#define PSFLOW_COORDINATOR_ADMISSION_H

#include <limits.h>
#include <stdint.h>

#include "coordinator/cluster.h"
#include "psflow/spec.h"
#include "psflow/status.h"

#define COORD_MAX_DATA_ROOTS 16

typedef struct coord_limits {
    /* Directories jobs may read data under (at most COORD_MAX_DATA_ROOTS). The coordinator
     * resolves them when it starts: one that does not exist is an error, or left out when
     * data_roots_optional (the defaults). coord_admit_data takes resolved ones. */
    const char *const *data_roots;
    int n_data_roots;
    int data_roots_optional;
    int64_t max_steps;       /* training.max_steps */
    int64_t max_model_bytes; /* values and optimizer slots of the whole model */
    int max_shards;          /* variable shards of one job */
    int max_replicas;        /* replicas.ps and replicas.worker, each */
} coord_limits;

/* Defaults of `psflow coordinator` (README "Security"). */
#define COORD_DEFAULT_MAX_STEPS       100000000LL
#define COORD_DEFAULT_MAX_MODEL_BYTES (4LL << 30)
#define COORD_DEFAULT_MAX_SHARDS      1024
#define COORD_DEFAULT_MAX_REPLICAS    256

/* Resolves l's data roots (realpath) into storage[0..COORD_MAX_DATA_ROOTS) and points
 * l->data_roots (through ptrs, as many entries) at them. PF_ERR_IO naming a root that does
 * not resolve, unless data_roots_optional, when it is left out. */
pf_status coord_limits_resolve(coord_limits *l, char (*storage)[PATH_MAX], const char **ptrs,
                               pf_error *err);

/* Every data path resolves (realpath: ".." and symlinks followed) to a regular file under a
 * data root. No lock needed: it reads only the spec and the filesystem. PF_ERR_SPEC with
 * err->pointer "/data/train/0" and the like. */
pf_status coord_admit_data(const coord_limits *l, const pf_job_spec *spec, pf_error *err);

/* The size limits, the data plane's limits and the agents' memory. Reads the cluster's
 * nodes: the caller holds the coordinator's lock. PF_ERR_SPEC naming the field;
 * PF_ERR_NOMEM. */
pf_status coord_admit_size(const coord_limits *l, const coord_cluster *c, const pf_job_spec *spec,
                           pf_error *err);

#endif
