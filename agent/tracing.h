/* tracing.h - a trace on demand, the agent's side (docs/profile.md, "Trace"): the clock offset
 * to the coordinator, measured on heartbeats; arming a task's profile when a heartbeat's
 * answer asks for a trace; the spans of a done trace for the next heartbeat. */
#ifndef PSFLOW_AGENT_TRACING_H
#define PSFLOW_AGENT_TRACING_H

#include <jansson.h>
#include <stdint.h>

#include "psflow/profile.h"

/* The coordinator's wall clock minus this host's, from the heartbeat with the shortest
 * round trip so far (its error is at most half that round trip). */
typedef struct agent_clock {
    double offset, rtt;
    int known;
} agent_clock;

/* A heartbeat sent at `sent` and answered at `answered` (pf_clock_now), the answer's
 * `time` being the coordinator's wall clock when it answered. */
void agent_clock_sample(agent_clock *c, double sent, double answered, const json_t *reply);

/* The answer's `trace` ({id, from, steps, stop}, or absent): arms p for a new trace id (*armed
 * its id), or stops the one recording; the coordinator still asking for a trace sent (*sent)
 * means the heartbeat that carried it was lost: it is sent again. `who` names the task in
 * the log. */
void agent_trace_directive(pf_profile *p, const json_t *trace, uint64_t *armed, uint64_t *sent,
                           const char *who);

/* The heartbeat's `trace` once p's trace is done and not yet sent (*sent is its id then):
 * {id, rtt, spans: [[phase, start_us, duration_us, step], ...]}, start in microseconds of the
 * coordinator's wall clock. NULL otherwise. */
json_t *agent_trace_json(const pf_profile *p, uint64_t *sent, const agent_clock *c);

#endif
