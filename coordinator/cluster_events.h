/* cluster_events.h - the event queue of the coordinator's state machine, shared by its
 * files; the rest of the coordinator takes the events with coord_cluster_take_events
 * (cluster.h). Each function queues one event that
 * snapshots what it names at `now`; out of memory, the event is lost and the change kept.
 */
#ifndef PSFLOW_COORDINATOR_CLUSTER_EVENTS_H
#define PSFLOW_COORDINATOR_CLUSTER_EVENTS_H

#include "coordinator/cluster.h"

/* A zeroed event at the end of the queue, or NULL when out of memory. */
coord_event *coord_queue_event(coord_cluster *c, coord_event_type type, const char *kind,
                               const char *job, double now);
/* A log line of the job (NULL: the cluster's own) with its type, reason and message. */
void coord_log_event(coord_cluster *c, const char *job, const char *type, const char *reason,
                     const char *message, double now);
/* The job's summary; sets j->last_summary_event. */
void coord_job_event(coord_cluster *c, coord_job *j, double now);
/* Task t of j, with the lease it is judged by. */
void coord_task_event(coord_cluster *c, coord_job *j, coord_task *t, double now);
/* Agent n. */
void coord_node_event(coord_cluster *c, coord_node *n, double now);
/* A metric of `type` (POINT or EVAL) for task's report, its figures zeroed for the caller to
 * fill; NULL when out of memory. */
coord_event *coord_metric_event(coord_cluster *c, coord_event_type type, const coord_job *j,
                                const char *task, int64_t step, double time, double now);

#endif
