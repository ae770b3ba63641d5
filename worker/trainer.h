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

#include "psflow/profile.h"
#include "psflow/spec.h"
#include "psflow/status.h"

/* What a task reports while it trains (for the coordinator's metrics and checkpoints). */
typedef enum {
    WORKER_REPORT_STEP,
    WORKER_REPORT_EVAL,
    WORKER_REPORT_CHECKPOINT,
    WORKER_REPORT_ROLLBACK /* the chief rolled every ps back: from_step -> step */
} worker_report_kind;

typedef struct worker_report {
    worker_report_kind kind;
    uint64_t step;            /* global step */
    double time;              /* Unix seconds */
    double loss;              /* STEP: mean training loss since the last report */
    double examples_per_sec;  /* STEP: this task's, since the last report */
    double step_time_seconds; /* STEP: mean wall time of this task's steps */
    int64_t bad_lines;        /* STEP: bad input lines this task skipped so far (on_error skip) */
    double accuracy;          /* EVAL: NAN for regression */
    double test_loss;         /* EVAL */
    double auc;               /* EVAL: a two-class model's, else NAN */
    double calibration;       /* EVAL: a two-class model's mean prediction / mean label, or NAN */
    double bayes_auc;         /* EVAL: synthetic_ctr's Bayes-optimal AUC; set NAN otherwise */
    const char *step_dir;     /* CHECKPOINT: the complete checkpoint's folder */
    uint64_t from_step;       /* ROLLBACK: the step training had reached */
    const char *reason;       /* ROLLBACK: NULL (a ps restarted) or "NonFiniteLoss" */
    const char *message;      /* ROLLBACK with a reason: what was non-finite, what is skipped */
} worker_report;

/* How a run ended, filled by worker_run; worker_result_print prints it as the task's last
 * words (a result line on the chief's stdout, or the failure on stderr). */
typedef struct worker_result {
    pf_status status;   /* what worker_run returned */
    uint64_t steps;     /* the global step reached */
    long local_steps;   /* steps this task took */
    double seconds;     /* from the first step to the end (or the failure) */
    int evaluated;      /* the chief's final evaluation is in the four fields below */
    double accuracy;    /* NAN for regression, or without the final evaluation */
    double test_loss;   /* NAN without the final evaluation */
    double auc;         /* NAN without one (a two-class model's) */
    double calibration; /* mean prediction / mean label: NAN without one (a two-class model's) */
    double bayes_auc;   /* synthetic_ctr data's Bayes-optimal AUC on the same examples, or NAN */
    char message[256];  /* when the run fails: what went wrong (the line logged) */
} worker_result;

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
    const int *stop;      /* NULL, or a flag another thread sets: return PF_ERR_CANCELLED */
    /* NULL, or the job's worker count as another thread (the agent) updates it: a live
     * membership change re-partitions the data from the next step (trainer.c, data). */
    const int *workers;
    /* NULL, or the chief's checkpoint request as another thread (the agent) sets it: 0 none,
     * else 1 + the step the coordinator asks a checkpoint at or after (a preempted job's final
     * checkpoint); the chief takes one at its next step, once per request. */
    const int64_t *checkpoint_now;
    /* Called on the trainer thread every report_every_seconds [0.25] of training, after each
     * evaluation and after each complete checkpoint; NULL: no reports. */
    void (*report)(void *ctx, const worker_report *r);
    void *report_ctx;
    double report_every_seconds;
    /* The job's data-plane key (PF_WIRE_KEY_SIZE bytes, psflow/wire_auth.h), or NULL: the
     * task proves the key derived from it for its role and index to every ps. */
    const uint8_t *job_key;
    /* Or this task's own key (pf_wire_task_key for its role and index), used as it is: what a
     * managed agent is given, or --task-key-file. Wins over job_key; both NULL: no proof. */
    const uint8_t *task_key;
    const char *ca_file;      /* NULL: the data plane is plain TCP; else TLS verified with it */
    const char *threads_note; /* the thread policy's choice, for the first log line; or NULL */
    /* Where the step's time goes (psflow/profile.h), started with the first step and read by
     * another thread (the agent's heartbeats); NULL: the trainer keeps its own, for the
     * breakdown it logs at the end. */
    pf_profile *profile;
} worker_options;

/* Runs the task to the end of the job, logging progress to stderr, and fills *out (every
 * field, whatever it returns). Returns PF_OK when done, else the failure: PF_ERR_UNAVAILABLE
 * (a ps stayed unreachable), PF_ERR_UNSUPPORTED (device), PF_ERR_IO / PF_ERR_NOT_FOUND (data
 * or checkpoint files), PF_ERR_SPEC / PF_ERR_FORMAT (bad data), PF_ERR_NOMEM,
 * PF_ERR_NONFINITE, PF_ERR_CANCELLED (o->stop was set). */
pf_status worker_run(const worker_options *o, worker_result *out);

/* Prints how the run ended: a failure as one line on stderr (and, for a chief with o->json
 * that failed with PF_ERR_NONFINITE, the result object with the reason on stdout); the
 * chief's result on stdout: one JSON object with o->json, else one line. */
void worker_result_print(const worker_options *o, const worker_result *r);

#endif
