/* cluster_admit.h - admission in the state machine (cluster.h): what a job needs, giving a
 * waiting job's tasks agents all at once or none, a running job's replacements and added
 * workers, and taking a job's agents back; for cluster_schedule.c, which decides who is
 * admitted, and cluster.c. Pure, like cluster.h: the caller serialises the calls and persists
 * what is marked dirty.
 */
#ifndef PSFLOW_COORDINATOR_CLUSTER_ADMIT_H
#define PSFLOW_COORDINATOR_CLUSTER_ADMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/cluster.h"

/* --- tasks and agents --- */

/* Whether task t is an evaluator. */
bool coord_task_is_evaluator(const coord_task *t);

/* Takes the job's training tasks away from their agents (they stop them on their next
 * heartbeat); its serving tasks keep theirs (coord_serving_stop frees those). */
void coord_job_release(coord_cluster *c, coord_job *j, double now);

/* Whether agent n may take a task of `role`: live (not lost, not deleted), of that role, and
 * neither running nor assigned anything. */
bool coord_node_idle(const coord_node *n, const char *role);

/* --- admission --- */

/* The seconds preempted job j has waited to resume (0 when it is not preempted, or when its
 * preemption's time lies ahead of `now`: a clock set back). */
double coord_job_waiting_since_preempted(const coord_job *j, double now);

/* Whether job j waits to be admitted: Created or Restarting, and not deleted. */
bool coord_job_waiting(const coord_job *j);

/* The agents of each role job j takes. */
int coord_job_need_ps(const coord_job *j);
int coord_job_need_workers(const coord_job *j);

/* The memory its tasks count against its queue's quota (coord_job_memory). */
int64_t coord_job_need_memory(coord_job *j);

/* Says what waiting job j waits for (msg), when that changed: a Created job's
 * WaitingForAgents condition, a Restarting one's message. */
void coord_job_set_waiting(coord_cluster *c, coord_job *j, const char *msg, double now);

/* Gives every task of j an idle agent, or none: j may take have_ps of the idle ps agents and
 * have_workers of the idle worker agents (the others are held for jobs ahead of it, `behind`
 * the first of them, or NULL). Returns whether it was admitted. */
bool coord_job_admit(coord_cluster *c, coord_job *j, int have_ps, int have_workers,
                     const coord_job *behind, double now);

/* Sets the job's message (and tells the clients) when it changed. */
void coord_job_set_message(coord_cluster *c, coord_job *j, const char *msg, double now);

/* Gives each task of a running job that lost its agent (task_failed: pending, no agent) the
 * next idle agent of its role (take_idle), as a new incarnation of the same task in the same
 * generation.
 * Then the workers a live scale-up added: once every ps runs with them, all at once or none,
 * as a job's admission does, so that no added worker runs while another has no agent (the
 * TF_CONFIG of a task lists the workers started so far, coord_job_tf_config). */
void coord_job_replace_tasks(coord_cluster *c, coord_job *j, double now);

/* --- a job's training done --- */

/* Whether job j's chief succeeded while its evaluator still runs (condition TrainingComplete,
 * cluster.c's "the evaluator after training"): the job is not finished, and it runs on only
 * for the evaluator's final evaluation. */
bool coord_job_training_complete(coord_job *j);

/* Whether evaluator task t is (or is about to be) evaluating on an agent. */
bool coord_evaluator_busy(const coord_job *j, const coord_task *t);

#endif
