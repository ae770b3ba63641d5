/* cluster_schedule.h - the scheduling round of the state machine (cluster.h), for cluster.c:
 * the queue, quotas and borrowing, preemption and backfill (the design is cluster_schedule.c's
 * opening). Pure, like cluster.h: the caller serialises the calls and persists what is marked
 * dirty.
 */
#ifndef PSFLOW_COORDINATOR_CLUSTER_SCHEDULE_H
#define PSFLOW_COORDINATOR_CLUSTER_SCHEDULE_H

#include "coordinator/cluster.h"

/* A scheduling round. Running jobs first (a replacement, or a worker added live, keeps going
 * a job that holds agents already; agents a preemption freed stay reserved for the job that
 * preempted, take_idle), then the waiting ones in queue order (admit_queue), again after a
 * preemption made some wait; then the serving tasks, on the idle worker agents no waiting job
 * holds. The round's time goes to c->round_seconds. */
void coord_schedule(coord_cluster *c, double now);

/* A preemption waiting for its final checkpoint (coord_job.drain_until) ends: when the
 * checkpoint is reported, or the grace is over; it is called off when its job stopped running
 * or reached max_steps meanwhile (it finishes), or the job preempting it no longer waits (it
 * was cancelled, or started on other agents) - but for a preemption for a quota, which holds
 * while that job runs: its start counted v's share as freed. */
void coord_job_drain_check(coord_cluster *c, coord_job *v, double now);

#endif
