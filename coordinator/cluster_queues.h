/* cluster_queues.h - the queues jobs are admitted through (run_policy.queue; api/rest.md,
 * /api/v1/queues): their registry and what each holds. Pure, like cluster.h: the caller
 * serialises the calls and persists what is marked dirty. How admission uses a queue's
 * quota and weight is cluster_schedule.c's (docs/design.md, "Queues, quotas and borrowing").
 */
#ifndef PSFLOW_COORDINATOR_CLUSTER_QUEUES_H
#define PSFLOW_COORDINATOR_CLUSTER_QUEUES_H

#include <stdbool.h>

#include "coordinator/cluster.h"

#define COORD_QUEUE_WEIGHT_MAX       1000
#define COORD_QUEUE_QUOTA_MAX        1000000     /* agents of a role */
#define COORD_QUEUE_MEMORY_QUOTA_MAX (1ll << 60) /* bytes */

/* The queue of that name (not deleted), or NULL. */
coord_queue *coord_queue_find(coord_cluster *c, const char *name);

/* The queue job j is admitted through: its run_policy.queue, or the default queue when that
 * queue is gone (a store from elsewhere; a queue in use cannot be deleted). Remembers where
 * it found it in j (queue_at), so that each round finds it with one comparison. */
coord_queue *coord_job_queue(coord_cluster *c, coord_job *j);

/* Creates the queue set->name, or changes its settings to set's (its name, quotas: -1 for no
 * limit, weight 1 .. COORD_QUEUE_WEIGHT_MAX, priority classes; the caller checked them):
 * *created says which. PF_ERR_INVALID (err says why) when COORD_MAX_QUEUES exist already.
 * The next scheduling round applies the change; jobs submitted already keep the priority
 * their class had then. */
pf_status coord_queue_put(coord_cluster *c, const coord_queue *set, double now, coord_queue **out,
                          int *created, pf_error *err);

/* Queue q's priority class of that name, or NULL. */
const coord_priority_class *coord_queue_class(const coord_queue *q, const char *name);

/* The memory a ps task and a training, evaluator or serving task of job j count against its
 * queue's memory quota: what the submit check estimates them to need (psflow/footprint.h;
 * every ps task counts its largest, as a replica spec requests one size for all its
 * replicas), worked out once for its number of ps and worker tasks. */
void coord_job_task_memory(coord_job *j, int64_t *ps, int64_t *task);

/* The memory ps ps tasks and `tasks` other tasks of job j count (coord_job_task_memory), at
 * most COORD_QUEUE_MEMORY_QUOTA_MAX + 1: beyond any quota. */
int64_t coord_job_memory(coord_job *j, int ps, int tasks);

/* a + b for memory figures, held at INT64_MAX or INT64_MIN instead of overflowing (a queue's
 * figures sum its jobs'). */
int64_t coord_memory_add(int64_t a, int64_t b);

/* Deletes queue q: PF_ERR_INVALID (err says why) for the default queue, and for a queue an
 * unfinished job is admitted through. */
pf_status coord_queue_delete(coord_cluster *c, coord_queue *q, pf_error *err);

/* Adds a loaded queue (store reload): replaces the default queue's settings, or appends.
 * PF_ERR_INVALID when COORD_MAX_QUEUES exist already. */
pf_status coord_queue_adopt(coord_cluster *c, const coord_queue *q);

/* The agents of each role job j's training tasks hold: those running, those given an agent
 * that has not reported them yet, and those that succeeded while their agent still runs them
 * (O(tasks), no walk over the agents). */
void coord_job_agents(const coord_cluster *c, const coord_job *j, int *ps, int *workers);

/* Works out each queue's used_ps, used_workers and used_memory (the agents its running jobs
 * hold, a replacement they are owed, and the agents of its jobs' serving tasks, and their
 * memory; not those of a job preempted and taking its final checkpoint, which are counted as
 * stopping), and how many of its jobs run and wait; held_* start at 0. O(jobs + tasks). */
void coord_queues_measure(coord_cluster *c);

/* How many agents of each role, and how many bytes, q's running jobs hold beyond its quota
 * (0 when none). */
int coord_queue_over_ps(const coord_queue *q);
int coord_queue_over_workers(const coord_queue *q);
int64_t coord_queue_over_memory(const coord_queue *q);

/* Whether q holds more than its quota of anything: it borrowed. */
bool coord_queue_borrowed(const coord_queue *q);

#endif
