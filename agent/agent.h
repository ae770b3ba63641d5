/* agent.h - managed ps and worker nodes (docs/design.md section 1, "Managed").
 *
 * An agent registers with the coordinator (retrying with backoff until it answers),
 * heartbeats every second, and makes what it runs match the assignment each heartbeat
 * answer carries: it starts the assigned task (a ps server or a training task, in a thread
 * of this process) when one appears, stops it when the assignment goes away or changes,
 * and reports the task's state and result. A coordinator that cannot be reached does not
 * stop a running task: the data plane does not pass through it.
 */
#ifndef PSFLOW_AGENT_AGENT_H
#define PSFLOW_AGENT_AGENT_H

#include "psflow/ws.h"

typedef struct agent_options {
    const char *role;        /* "ps" or "worker" (which also runs evaluator and serve tasks) */
    const char *coordinator; /* base URL, e.g. http://127.0.0.1:8080 */
    const char *token;       /* "" for none */
    const char *serve_token; /* worker: the bearer token its serving tasks require; ""/NULL:
                                none, allowed only on a 127.0.0.1 address */
    const char *node_id;
    const char *advertise; /* host:port given to the job's other tasks */
    const char *listen_host;
    int listen_port; /* ps: where the data plane listens */
    const char *checkpoint_dir;
    long log_every;
    double exit_grace_seconds; /* ps: after the final checkpoint, wait this long for workers */
    double retry_seconds;      /* worker: keep reconnecting to a lost ps this long */
    long push_delay_ms;        /* worker, testing: wait this long before every push */
    long long memory;          /* bytes its tasks may use, told to the coordinator; 0: unknown */
    /* Data plane: a ps serves with its limits and TLS certificate; a worker dials TLS
     * verifying with ca_file when set. */
    pf_ws_options data_plane;
} agent_options;

/* Runs until SIGINT/SIGTERM; returns the process exit code (psflow/exit_code.h). */
int agent_run(const agent_options *o);

#endif
