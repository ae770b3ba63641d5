/* evaluator.h - the evaluator task of a job (TF Estimator's evaluator): it never trains and
 * never talks to the ps tasks. It watches the job's checkpoint folder, and each time a newer
 * complete checkpoint appears it merges the ps files (verifying every CRC-32 against the
 * manifest), loads the variables into the model and evaluates them on the test set (the
 * train set when the job has none), logging and reporting eval_loss / eval_accuracy with the
 * checkpoint's step. It ends after evaluating the checkpoint of step training.max_steps.
 */
#ifndef PSFLOW_WORKER_EVALUATOR_H
#define PSFLOW_WORKER_EVALUATOR_H

#include "psflow/spec.h"
#include "psflow/status.h"
#include "worker/trainer.h"

typedef struct evaluator_options {
    const pf_job_spec *spec;
    const char *checkpoint_dir; /* the root shared with the job's ps tasks */
    /* Give up (PF_ERR_UNAVAILABLE) when no newer complete checkpoint appears for this long;
     * <= 0: training.stall_timeout_secs plus checkpoint.every_secs. */
    double idle_timeout;
    double poll_seconds; /* between looks at the folder [1] */
    int json;            /* print the final evaluation as one JSON object on stdout */
    const int *stop;     /* NULL, or a flag another thread sets: return PF_ERR_CANCELLED */
    /* Called after each evaluation with kind WORKER_REPORT_EVAL; NULL: no reports. */
    void (*report)(void *ctx, const worker_report *r);
    void *report_ctx;
} evaluator_options;

/* Runs until the final checkpoint is evaluated (PF_OK), the stop flag is set
 * (PF_ERR_CANCELLED), or no newer checkpoint appears within the idle timeout
 * (PF_ERR_UNAVAILABLE, the message naming the folder and the newest step seen). A checkpoint
 * that cannot be merged (pruned or set aside while being read, a CRC mismatch) is logged
 * and skipped. Other errors: those of pf_dataset_load, PF_ERR_NOMEM. */
pf_status evaluator_run(const evaluator_options *o, pf_error *err);

#endif
