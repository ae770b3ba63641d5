/* node.h - what `psflow ps` and `psflow worker` share (docs/design.md section 1). A static node
 * takes its task from TF_CONFIG in the environment and its job from --job spec.json, the
 * Kubeflow TFJob way; the cluster's shape in TF_CONFIG must match the spec's replicas, so
 * that every process computes the same placement. A managed node (--coordinator, no --job)
 * is an agent (agent/agent.h) with an id and an address of its own.
 */
#ifndef PSFLOW_CLI_NODE_H
#define PSFLOW_CLI_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/reporter.h"
#include "cli/options.h"
#include "psflow/spec.h"
#include "psflow/tf_config.h"

/* A static node's job and task. */
typedef struct node {
    pf_job_spec spec;
    pf_tf_config cfg;
    const char *type; /* task type from TF_CONFIG */
    int index;
} node;

/* Loads --job and TF_CONFIG and checks they agree (n needs no init). `serving`: TF_CONFIG
 * names a serving cluster (read-only ps tasks, psflow ps --read-only): its ps tasks, however
 * many, become the spec's replicas.ps (the checkpoint is repartitioned into them), and its
 * other tasks are not checked. Returns 0, or an exit code after printing why. */
int node_load(const char *cmd, const char *job_path, bool serving, node *n);

/* Frees what n holds. */
void node_deinit(node *n);

/* Refuses a job this process cannot run, before anything is allocated: the limits every job
 * has (psflow/footprint.h), and the memory of this task (a ps task's share of the
 * placement, or a training task's need) against `memory` bytes, or this machine's
 * (pf_mem_system_bytes) when 0. role: "ps" (task index) or "worker". Returns 0, or
 * PF_EX_DATAERR after printing why. */
int node_check_fit(const char *cmd, const pf_job_spec *spec, const char *role, int index,
                   long long memory);

/* The job's data-plane key for a static node (api/wire.md, "Authentication"): derived from
 * PSFLOW_TOKEN (or the first line of PSFLOW_TOKEN_FILE) and the job's name into
 * key[PF_WIRE_KEY_SIZE]. Returns 1 with a key, 0 when neither is set (the data plane is then
 * unauthenticated), or -exit code after printing why the token file cannot be read. */
int node_job_key(const char *cmd, const char *job, uint8_t *key);

/* With a coordinator (NULL: nothing to do, both NULL): reads the token, applies --ca-file
 * and starts the reporter (agent/reporter.h) of task `task` of job `job`: *report is
 * agent_reporter_add and *ctx the reporter, for agent_reporter_destroy(). Returns 0, or an
 * exit code after printing why. */
int node_reporter_start(const char *cmd, const cli_option *opts, int n_opts,
                        const char *coordinator, const char *job, const char *task,
                        void (**report)(void *ctx, const worker_report *r), void **ctx);

/* A new incarnation for a task this process starts: microseconds since the epoch, so a
 * restarted task always gets a larger one. */
uint64_t node_incarnation(void);

/* Defaults of a managed node: id "<role>-<hostname>-<pid>", address "<hostname>:<port>";
 * port 0: a port no other process of this host holds, reserved for this process's life (a
 * worker agent listens on nothing, but its address must be its own in a job's TF_CONFIG). */
void node_defaults(const char *role, const char *id, const char *advertise, int port, char *id_out,
                   size_t id_cap, char *adv_out, size_t adv_cap);

/* The --memory option of the node commands and `psflow train`, into long long *dst (0: not
 * given). */
#define NODE_MEMORY_OPTION(dst)                                                                    \
    CLI_SIZE("memory", "SIZE", "memory this process may use [MemTotal, or the cgroup's limit]", 1, \
             INT64_MAX, 0, dst)

/* The --threads option of `psflow worker` and `psflow train` (twin PSFLOW_THREADS), into long
 * *dst (0: not given). */
#define NODE_THREADS_OPTION(dst)                                                                   \
    CLI_LONG("threads", "N",                                                                       \
             "BLAS threads of this process [the cores it may use, shared equally by the job's "    \
             "training tasks on this host]",                                                       \
             1, 4096, 0, dst)

/* The thread policy (psflow/cpus.h): sets the BLAS threads of this process to `threads`
 * when > 0 (--threads), else to the cores it may use shared by `tasks_on_host` training tasks (at
 * most OPENBLAS_NUM_THREADS when that is set). With `note`, says what it chose and why in
 * note[cap] ("1 BLAS thread: 2 cores for 2 of the job's training tasks on this host"). Returns the
 * threads set. */
int node_set_threads(long threads, int tasks_on_host, char *note, size_t cap);

#endif
