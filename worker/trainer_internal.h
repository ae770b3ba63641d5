/* trainer_internal.h - the state a training task shares between its files: trainer.c (setup,
 * the step loop), recovery.c (rollbacks, resync, the skip file, membership) and chief.c (the
 * chief's evaluations, checkpoints and watchdog). recovery.c and chief.c take a trainer as
 * their first parameter and never call into trainer.c.
 */
#ifndef PSFLOW_WORKER_TRAINER_INTERNAL_H
#define PSFLOW_WORKER_TRAINER_INTERNAL_H

#include <stdint.h>

#include "psflow/backend.h"
#include "psflow/clock.h"
#include "psflow/data.h"
#include "psflow/stream.h"
#include "psflow/model.h"
#include "psflow/placement.h"
#include "psflow/profile.h"
#include "psflow/spec.h"
#include "psflow/status.h"
#include "psflow/towers.h"
#include "worker/data_plan.h"
#include "worker/leases.h"
#include "worker/link.h"
#include "worker/rows.h"
#include "worker/trainer.h"

#define WORKER_EVAL_BATCH 1000

typedef struct trainer trainer;

/* What recovery asks of the ps tasks and of the checkpoint folder: the link's calls in a
 * running task (worker_recovery_link, recovery.c), a fake in tests/worker/test_recovery.c. */
typedef struct worker_ps_io {
    /* Pulls every shard into t->params, every ps's version into t->versions. */
    pf_status (*pull)(trainer *t, pf_error *err);
    /* worker_link_restore: every ps restores checkpoint `step`, lr scaled by lr_factor. */
    pf_status (*restore)(trainer *t, uint64_t step, float lr_factor, pf_error *err);
    /* worker_link_take_restart: 1 when a ps restarted since the last call. */
    int (*take_restart)(trainer *t, int *ps, uint64_t *version);
    /* The step of the job's newest complete checkpoint (PF_ERR_NOT_FOUND without one). */
    pf_status (*newest_checkpoint)(const trainer *t, int64_t *step, pf_error *err);
} worker_ps_io;

struct trainer {
    const worker_options *o;
    const pf_job_spec *spec;
    const worker_ps_io *io; /* recovery's way to the ps tasks */
    const pf_backend *be;   /* replica 0's: evaluation */
    pf_towers *towers;
    worker_link *link;
    pf_model *model; /* evaluation (chief) */
    pf_dataset train, test;
    int has_test;
    pf_sampler *sampler;     /* the train set's order, in memory */
    pf_stream_source *input; /* or, with data.streaming, the train files read as streams */
    int64_t bad_lines;       /* bad lines skipped so far (data.on_error skip), reported */
    worker_leases *leases;   /* data.splits dynamic: the splits leased from ps 0; else NULL */
    int input_done;          /* leased: the queue's epochs are done, nothing left to train on */
    size_t n_params;
    int n_ps, n_tasks;
    float *params, *grads; /* host; in the link's segment when in_segment */
    int in_segment;
    float *params_next;          /* host, prefetch only: where the in-flight pull lands */
    float *d_params, *d_x, *d_y; /* backend: evaluation (chief) */
    int32_t *d_labels;
    float *hx, *hy; /* host: the step's K * batch examples, or an evaluation batch */
    int32_t *hlabels;
    uint64_t *versions, *steps, *min_version;
    uint64_t *gathered_at; /* row mode: each ps's version when the step's batch was gathered */
    uint32_t *results;     /* each ps's PF_WIRE_PUSH_* answer to the last push (prefetch) */
    /* the chief's schedules: the global step of the last evaluation and checkpoint check,
     * the time of the last checkpoint; the watchdog's last progress */
    uint64_t last_eval, last_ckpt;
    double last_checkpoint_time;
    /* sync: the checkpoint asked without waiting and not yet answered (chief.c): its step,
     * the tries at later steps so far, whether a complete one of that step was moved aside */
    int ck_inflight, ck_attempt, ck_retired;
    int64_t ck_requested;          /* the checkpoint_now request taken (trainer.h), 0: none */
    uint64_t ck_step, ck_sent_max; /* and the furthest ps's version when it was sent */
    double ck_sent_time;
    double progress_time;
    uint64_t progress_version;
    /* training.on_nonfinite "rollback": the data steps never fed again (ascending; one per
     * non-finite rollback, at most nonfinite_max_rollbacks) */
    uint64_t *skipped;    /* the plan's skipped data steps */
    int n_rollbacks;      /* every one this task saw (it fed data or not) */
    int pending;          /* data-skips.json says its last rollback may not be done yet */
    int64_t nan_position; /* PSFLOW_TEST_NAN_POSITION (a testing aid), or -1 */
    double input_delay;   /* PSFLOW_TEST_INPUT_DELAY_MS (a testing aid), in seconds; or 0 */
    worker_plan plan;     /* which examples each step reads (data_plan.h) */
    float *scores;        /* a two-class model's evaluation scores, one per example */
    double bayes_auc;     /* chief: synthetic_ctr's Bayes-optimal AUC on its evaluation set */
    /* row mode (a model with embedding tables, worker/rows.h): params and grads are the
     * compact vectors of one batch's rows; the chief evaluates a batch of rows at a time */
    int row_mode;
    pf_placement placement;
    worker_rows rows, eval_rows;
    worker_row_plan rplan, eval_plan;
    worker_row_plan rplan_next; /* the next batch's rows, pulled with this step's push */
    int row_fuse;               /* fused steps (PSFLOW_ROW_FUSE not "off") */
    uint64_t evaluations;       /* chief: evaluations so far (each one reuses hx) */
    pf_job_spec compact;        /* the job with rows.compact as its model: the towers' */
    float *eval_params;         /* eval_rows' compact vector */
    uint64_t *eval_versions;
    pf_profile *prof; /* o->profile, or own_profile */
    pf_profile own_profile;
};

/* "chief" or "worker", as log lines name the task. */
static inline const char *worker_who(const trainer *t) {
    return t->o->is_chief ? "chief" : "worker";
}

/* Hands a report to o->report (when set), stamped with the wall time. */
static inline void worker_send_report(const trainer *t, worker_report *r) {
    if (!t->o->report)
        return;
    r->time = pf_clock_wall();
    t->o->report(t->o->report_ctx, r);
}

/* The version of the ps furthest ahead, as this task last saw it. */
static inline uint64_t worker_max_version(const trainer *t) {
    uint64_t m = 0;
    for (int p = 0; p < t->n_ps; p++)
        m = t->versions[p] > m ? t->versions[p] : m;
    return m;
}

/* The version of the ps furthest behind, as this task last saw it. */
static inline uint64_t worker_lowest_version(const trainer *t) {
    uint64_t lo = t->versions[0];
    for (int p = 1; p < t->n_ps; p++)
        lo = t->versions[p] < lo ? t->versions[p] : lo;
    return lo;
}

#endif
