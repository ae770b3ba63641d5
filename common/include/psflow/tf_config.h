/* tf_config.h - TF_CONFIG: parse every form TensorFlow accepts, write the exact form
 * Kubeflow's TFJob operator injects.
 *
 * Written form (docs/design.md section 4), byte for byte:
 *   {"cluster":{"ps":["10.0.0.3:2222"],"worker":["10.0.0.4:2222","10.0.0.5:2222"]},
 *    "task":{"type":"worker","index":0},"environment":"cloud"}
 * on one line: keys in that order, cluster job names sorted, no spaces.
 *
 * Parsing accepts what TensorFlow's TFConfigClusterResolver accepts: task.index as a
 * number or a decimal string, job lists as arrays or as sparse objects
 * {"0": "host:port", ...}, and extra keys ("rpc_layer", "session_master", "environment",
 * anything else) are ignored. TFJob's legacy "master" (a cluster job and a task type) is read
 * as "chief"; a cluster with both is refused.
 */
#ifndef PSFLOW_TF_CONFIG_H
#define PSFLOW_TF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "psflow/status.h"

#define PF_TF_MAX_JOBS  8    /* distinct job names in "cluster" */
#define PF_TF_MAX_TASKS 4096 /* tasks in one job */
#define PF_TF_NAME_MAX  32   /* job name length */
#define PF_TF_ADDR_MAX  256  /* "host:port" length */

typedef struct pf_tf_job {
    char name[PF_TF_NAME_MAX]; /* "chief", "evaluator", "ps", "worker", ... */
    int n_tasks;
    char **addrs; /* n_tasks entries; NULL for a gap in a sparse job; owned */
} pf_tf_job;

typedef struct pf_tf_config {
    int n_jobs;
    pf_tf_job jobs[PF_TF_MAX_JOBS]; /* sorted by name */
    bool has_task;
    char task_type[PF_TF_NAME_MAX];
    int task_index;       /* -1 when "task" has no "index" */
    char environment[32]; /* "cloud" when written by psflow or the operator */
} pf_tf_config;

/* Parses a TF_CONFIG document into *out (no prior init; nothing to free on failure).
 * Errors: PF_ERR_FORMAT (not JSON, wrong types, index not a non-negative integer, more
 * than the limits above) with a message naming the key; PF_ERR_NOMEM. An empty object is
 * valid (no cluster, no task); a task without "type" or "index" parses (task_type "",
 * task_index -1) and is refused by pf_tf_config_validate. */
pf_status pf_tf_config_parse(const char *json, size_t len, pf_tf_config *out, pf_error *err);

/* Checks what a psflow node started from TF_CONFIG needs: a task is set, its type is one
 * of chief, evaluator, ps, worker, the cluster has that job and the index is in range and
 * not a sparse gap, and the cluster has at least one ps task and a worker or chief job
 * (an empty worker job counts: TFJob's dynamic-worker mode shows a ps "worker": {}). Errors:
 * PF_ERR_INVALID with a message such as
 *   "TF_CONFIG: task index 3 is out of range: cluster has 2 worker tasks". */
pf_status pf_tf_config_validate(const pf_tf_config *cfg, pf_error *err);

/* New string (free with pf_free) in the exact written form above; NULL on allocation
 * failure. Parts the config lacks are left out (no jobs: no "cluster", no task: no "task",
 * task_index < 0: no "index", environment "": no "environment"), and a job with gaps is
 * written in the sparse form, so parse and format round-trip. */
char *pf_tf_config_format(const pf_tf_config *cfg);

/* Number of tasks of a job (0 when absent), and the address of one (NULL when absent). */
int pf_tf_config_count(const pf_tf_config *cfg, const char *job);
const char *pf_tf_config_address(const pf_tf_config *cfg, const char *job, int index);

/* How many of the cluster's training tasks (every job but "ps", this task included) have
 * the host of this task's own address: the tasks that compute on its machine, as far as
 * TF_CONFIG tells. Loopback names (localhost, 127.0.0.0/8, ::1) count as one host; other
 * names compare as written. 1 when this task has no address (or is alone). */
int pf_tf_config_trainers_on_host(const pf_tf_config *cfg);

/* Frees what cfg owns and zeroes it; safe on a zeroed config. */
void pf_tf_config_deinit(pf_tf_config *cfg);

/* Sets up *cfg (no prior init) with no jobs, no task and environment "cloud"; add jobs
 * with pf_tf_config_add_job and set the task fields directly. Used by the coordinator to
 * build TF_CONFIGs. */
void pf_tf_config_init(pf_tf_config *cfg);
/* Adds or replaces a job with n addresses (copied; a NULL entry is a sparse gap).
 * PF_ERR_INVALID for a NULL or empty name, n < 0, or a NULL last address; PF_ERR_RANGE
 * beyond the limits; PF_ERR_NOMEM (cfg unchanged on any error). Keeps jobs sorted by name. */
pf_status pf_tf_config_add_job(pf_tf_config *cfg, const char *name, const char *const *addrs,
                               int n);

#endif
