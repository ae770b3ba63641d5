/* trainer.h - a training task (worker or chief) of a distributed job.
 *
 * Each step: take this task's slice of the global batch (data.h: the examples one process
 * with batch tasks*b would read at that global step), compute the gradient against the
 * parameters pulled from the ps tasks, push it and pull the next parameters in one round
 * trip per ps (sync: not before the next version). The global step is ps 0's version.
 * The chief (the chief task, or worker 0 when there is none) also evaluates every
 * training.eval_every_steps, asks every ps to checkpoint every checkpoint.every_steps /
 * every_secs and writes the manifest, and at max_steps takes the final checkpoint, which
 * tells the ps tasks to finish.
 */
#ifndef PSFLOW_WORKER_TRAINER_H
#define PSFLOW_WORKER_TRAINER_H

#include <stdint.h>

#include "psflow/spec.h"
#include "psflow/status.h"

typedef struct worker_options {
    const pf_job_spec *spec;
    const char *const *ps_addrs; /* replicas.ps "host:port" */
    int task;                    /* training task index: chief 0, then workers */
    int is_chief;
    uint64_t incarnation;
    const char *checkpoint_dir;
    long log_every;       /* progress line every N local steps */
    int json;             /* chief: print the result as one JSON object */
    double retry_seconds; /* how long to keep reconnecting to a lost ps */
    long push_delay_ms;   /* testing: wait this long before every push */
} worker_options;

/* Runs the task to the end of the job, logging progress and errors to stderr. Returns
 * PF_OK when done, else the failure: PF_ERR_UNAVAILABLE (a ps stayed unreachable),
 * PF_ERR_UNSUPPORTED (device), PF_ERR_IO / PF_ERR_NOT_FOUND (data or checkpoint files),
 * PF_ERR_SPEC / PF_ERR_FORMAT (bad data), PF_ERR_NOMEM. */
pf_status worker_run(const worker_options *o);

#endif
