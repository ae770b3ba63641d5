/* cluster_trace.h - a trace on demand, the coordinator's side (docs/profile.md, "Trace";
 * api/rest.md): POST .../trace starts one, the heartbeat answers ask each ps and training task of
 * the job to record it, the heartbeats bring the spans back, and GET .../trace serves them in the
 * Chrome trace-event format. Kept in memory (a coordinator restart forgets it). */
#ifndef PSFLOW_COORD_CLUSTER_TRACE_H
#define PSFLOW_COORD_CLUSTER_TRACE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/cluster.h"

#define COORD_TRACE_STEPS_MAX 200 /* steps a trace may ask for */

/* Starts a trace of `steps` steps of job j (replacing a complete one): 0, or -1 with `why`
 * (the job is not running, or a trace records; out of memory). */
int coord_trace_start(coord_job *j, int steps, double now, char *why, size_t why_size);

/* The heartbeat answer's `trace` for node n ({id, from, steps, stop}), or NULL: none
 * records, or n's task has sent its spans. */
json_t *coord_trace_directive(coord_cluster *c, const coord_node *n, double now);

/* A heartbeat's `trace` (its spans) from node n: range-checked, kept, or refused whole (and
 * logged); then the trace completes once every running task has sent its spans. */
void coord_trace_take(coord_cluster *c, const coord_node *n, const json_t *trace, double now);

/* GET .../trace: the trace-event JSON (traceEvents, and psflow: its state and tasks), or
 * NULL when j has none. */
json_t *coord_trace_json(coord_job *j, double now);

#endif
