/* agent.h - managed ps and worker nodes (DESIGN.md section 1, "Managed"), and the metric
 * reporter that static-mode workers share with them.
 *
 * An agent registers with the coordinator (retrying with backoff until it answers),
 * heartbeats every second, and makes what it runs match the assignment each heartbeat
 * answer carries: it starts the assigned task (a ps server or a training task, in a thread
 * of this process) when one appears, stops it when the assignment goes away or changes,
 * and reports the task's state and result. A coordinator that cannot be reached does not
 * stop a running task: the data plane does not pass through it.
 */
#ifndef PSFLOW_CLI_AGENT_H
#define PSFLOW_CLI_AGENT_H

#include "worker/trainer.h"

typedef struct agent_options {
    const char *role;        /* "ps" or "worker" */
    const char *coordinator; /* base URL, e.g. http://127.0.0.1:8080 */
    const char *token;       /* "" for none */
    const char *node_id;
    const char *advertise; /* host:port given to the job's other tasks */
    const char *listen_host;
    int listen_port; /* ps: where the data plane listens */
    const char *checkpoint_dir;
    long log_every;
    double exit_grace_seconds; /* ps: after the final checkpoint, wait this long for workers */
    double retry_seconds;      /* worker: keep reconnecting to a lost ps this long */
    long push_delay_ms;        /* worker, testing: wait this long before every push */
} agent_options;

/* Runs until SIGINT/SIGTERM; returns the process exit code. */
int agent_run(const agent_options *o);

/* Metric reports of one training task, posted to the coordinator from a thread of their
 * own four times a second; reports that could not be delivered are kept and sent again. */
typedef struct reporter reporter;

reporter *reporter_create(const char *coordinator, const char *token, const char *job,
                          const char *task_name);
/* worker_options.report callback: ctx is the reporter. */
void reporter_add(void *ctx, const worker_report *r);
/* Waits until everything added so far is stored by the coordinator (or it forgot the job);
 * -1 if that takes longer than `seconds`. */
int reporter_flush(reporter *r, double seconds);
/* Sends what is left (trying for at most `seconds`), stops the thread and frees. */
void reporter_destroy(reporter *r, double seconds);

#endif
