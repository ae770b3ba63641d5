/* cluster_json.h - the coordinator's state in the JSON shapes of api/rest.md (the route
 * handlers' answers, the event stream, the rows the store keeps), and the JSON reports of
 * agents and trainers read into the plain structs the state machine takes (cluster.h).
 *
 * Every json_t returned is a new reference; NULL when jansson could not build it (out of
 * memory, or a string that is not UTF-8). Same threads as cluster.h: the caller holds the
 * coordinator's lock.
 */
#ifndef PSFLOW_COORDINATOR_CLUSTER_JSON_H
#define PSFLOW_COORDINATOR_CLUSTER_JSON_H

#include <jansson.h>

#include "coordinator/cluster.h"

/* --- state as JSON --- */

/* RFC 3339 UTC with milliseconds ("2026-11-22T10:00:00.123Z"); json_null() for t <= 0. */
json_t *coord_time_json(double t);
json_t *coord_job_json(const coord_job *j, double now); /* {name, spec, status} */
json_t *coord_job_status_json(const coord_job *j);      /* status */
json_t *coord_job_summary_json(const coord_job *j);     /* list item */
json_t *coord_task_json(const coord_task *t, double lease, double now);
json_t *coord_node_json(const coord_node *n, double now);
/* A queue as GET /api/v1/queues shows it, with what coord_queues_measure last worked out. */
json_t *coord_queue_json(const coord_queue *q);
/* A queue's priority classes as an object {"name": value, ...} (its JSON, and its column in
 * the store). */
json_t *coord_queue_classes_json(const coord_queue *q);
/* Reads priority classes {"name": value, ...} into q (n_classes, classes): at most
 * COORD_MAX_CLASSES, each name a valid job name, each value an integer -1000 .. 1000, kept
 * highest first, then by name.
 * Returns 0, or -1 with *key the offending class's name ("" for the object itself, its
 * size) and msg saying what is wrong. */
int coord_queue_classes_read(json_t *classes, coord_queue *q, const char **key, char *msg,
                             size_t cap);
/* GET .../profile: where each training task's and ps's time went (api/rest.md). */
json_t *coord_job_profile_json(const coord_job *j);
/* The TF_CONFIG of one task (new string, pf_free), NULL when the job has no such task or
 * no agents yet (*why says which). */
char *coord_job_tf_config(const coord_job *j, const char *type, int index, const char **why);
/* The node's current assignment (the heartbeat answer's "assignment"), or json_null(). */
json_t *coord_node_assignment(const coord_cluster *c, const coord_node *n);
/* An event's data as the stream and the job log carry it; NULL when it cannot be built,
 * and then the event is not published. */
json_t *coord_event_json(const coord_event *e);

/* Restores a job's status fields from coord_job_status_json output (store reload). */
void coord_job_status_from_json(coord_job *j, json_t *status);

/* --- reports from JSON --- */

/* Reads a heartbeat body (already checked by the route: state is one of the four) into
 * *out, whose strings borrow from r. */
void coord_report_from_json(json_t *r, coord_report *out);
/* coord_node_heartbeat for a heartbeat body. */
bool coord_node_heartbeat_json(coord_cluster *c, coord_node *n, json_t *report, double now);
/* coord_job_record_metrics for the points and evals arrays of a metrics body (either may
 * be NULL). PF_ERR_NOMEM, and then nothing is recorded. */
pf_status coord_job_record_metrics_json(coord_cluster *c, coord_job *j, const char *task,
                                        json_t *points, json_t *evals, double now);

#endif
