/* store.h - the coordinator's durable state in SQLite: the only file that includes sqlite3.h.
 *
 * One connection, WAL journal, numbered migrations (PRAGMA user_version), every statement
 * prepared once. Tables: jobs (spec, phase, status with conditions), tasks (assignments),
 * nodes (agents and their leases), metrics and evals (time series), events (the stream and
 * the job logs; their ids are the stream's ids), checkpoints, schema history. Writes happen
 * inside coord_store_begin/commit so a reply is sent only after its change is committed.
 * Not thread-safe: the caller holds the coordinator's lock around every call.
 */
#ifndef PSFLOW_COORDINATOR_STORE_H
#define PSFLOW_COORDINATOR_STORE_H

#include <jansson.h>
#include <stdint.h>

#include "coordinator/cluster.h"
#include "psflow/status.h"

typedef struct coord_store coord_store;

/* Opens (creating) the database at path and migrates it to the newest schema.
 * PF_ERR_IO with a message naming the file and SQLite's error. */
pf_status coord_store_open(const char *path, coord_store **out, pf_error *err);
void coord_store_close(coord_store *s);
/* Schema version after migration. */
int coord_store_schema_version(const coord_store *s);

/* Loads jobs, tasks and nodes into an empty cluster. Leases restart at `now`: agents keep
 * running through a coordinator restart and renew them with their next heartbeat. */
pf_status coord_store_load(coord_store *s, coord_cluster *c, double now, pf_error *err);

/* Transactions. commit/rollback end the one begun; PF_ERR_IO on failure. */
pf_status coord_store_begin(coord_store *s);
pf_status coord_store_commit(coord_store *s);
void coord_store_rollback(coord_store *s);

/* Writes dirty jobs (with their tasks) and dirty nodes, deletes those marked deleted, and
 * clears the dirty flags (on success only the commit makes them durable). */
pf_status coord_store_save(coord_store *s, coord_cluster *c);

/* Appends an event; *id receives its stream id. data: compact JSON text. */
pf_status coord_store_add_event(coord_store *s, const char *kind, const char *job, const char *data,
                                double now, int64_t *id);
/* Calls fn for up to `limit` events with id > after (of one job when job is non-NULL, and
 * always the events of no job), oldest first; fn returns non-zero to stop. */
pf_status coord_store_events_after(coord_store *s, int64_t after, const char *job, const char *kind,
                                   int limit,
                                   int (*fn)(int64_t id, const char *kind, const char *job,
                                             const char *data, void *ctx),
                                   void *ctx);
int64_t coord_store_last_event_id(coord_store *s);

/* Retention (docs/operations.md): a job keeps its newest COORD_STORE_EVENTS_KEPT `metric`
 * events and as many `job` summaries; its metric points at most COORD_STORE_METRIC_ROWS
 * (coord_store_metric_rows_per_task spreads them over its training tasks). */
#define COORD_STORE_EVENTS_KEPT   10000
#define COORD_STORE_METRIC_ROWS   20000
#define COORD_STORE_MIN_TASK_ROWS 64

/* The metric rows one of n_tasks training tasks may keep: COORD_STORE_METRIC_ROWS / n_tasks,
 * at least COORD_STORE_MIN_TASK_ROWS. */
int coord_store_metric_rows_per_task(int n_tasks);
/* Stores metric points and evaluations of one incarnation of a task (arrays as in
 * api/rest.md), once per step: the same step again replaces the stored one if it was
 * measured later, else changes nothing. Then thins the task's points to max_rows (the newest
 * quarter at full resolution, older ones evenly spaced) and prunes the job's old events. */
pf_status coord_store_add_metrics(coord_store *s, const char *job, const char *task,
                                  uint64_t incarnation, json_t *points, json_t *evals,
                                  int max_rows);
/* The GET .../metrics answer: {job, total_points, downsampled, points, aggregate, evals}. */
json_t *coord_store_metrics(coord_store *s, const char *job, int64_t since_step, int max_points);

/* Records a checkpoint; kept_json (a JSON array of steps, or NULL) names every checkpoint on
 * disk now: the job's others are forgotten. */
pf_status coord_store_add_checkpoint(coord_store *s, const char *job, int64_t step, double time,
                                     int64_t bytes, const char *files_json, const char *kept_json);
/* {items: [{step, time, bytes, files}]} newest first. */
json_t *coord_store_checkpoints(coord_store *s, const char *job);

#endif
