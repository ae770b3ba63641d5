/* reporter.h - the metric reports of one training task, posted to the coordinator
 * (POST /api/v1/jobs/{name}/metrics and .../checkpoints) from a thread of their own four
 * times a second; reports that could not be delivered are kept and sent again. Used by the
 * agents' training tasks and by a static-mode worker started with --coordinator.
 */
#ifndef PSFLOW_AGENT_REPORTER_H
#define PSFLOW_AGENT_REPORTER_H

#include <jansson.h>
#include <stdint.h>

#include "worker/trainer.h"

typedef struct agent_reporter agent_reporter;

/* Starts the reporter of task_name ("chief" or "worker-<i>") of job at the coordinator's
 * base URL (token "" or NULL for none). NULL when out of memory or no thread could start. */
agent_reporter *agent_reporter_create(const char *coordinator, const char *token, const char *job,
                                      const char *task_name);
/* The incarnation of the task's assignment, sent with every report: the coordinator takes
 * reports only from a task's current incarnation (api/rest.md). Until it is set (0) none is
 * sent, and a coordinator refuses the reports. NULL r is ignored. */
void agent_reporter_set_incarnation(agent_reporter *r, uint64_t incarnation);
/* worker_options.report callback: ctx is the reporter (NULL: nothing is reported). Any
 * thread. */
void agent_reporter_add(void *ctx, const worker_report *r);
/* Waits until everything added so far is stored by the coordinator (or it forgot the job);
 * -1 if that takes longer than `seconds`. */
int agent_reporter_flush(agent_reporter *r, double seconds);
/* Sends what is left (trying for at most `seconds`), stops the thread and frees; NULL is
 * ignored. */
void agent_reporter_destroy(agent_reporter *r, double seconds);

/* A measured figure as JSON: the number, or null when it was not measured (NaN). New
 * reference; NULL when out of memory. */
json_t *agent_number_json(double v);

#endif
