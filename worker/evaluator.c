/* evaluator.c - the evaluator task (see evaluator.h).
 *
 * DESIGN: the checkpoint folder is the only input, so the evaluator needs no data-plane
 * connection and cannot disturb training. It polls for the newest complete checkpoint
 * (pf_checkpoint_find_latest) every poll_seconds; a newer one is merged into whole variables
 * (pf_checkpoint_merge verifies sizes and CRC-32s), copied into the flat parameter vector by
 * variable name (model.h's layout) and evaluated in batches of EVAL_BATCH on the CPU backend.
 * Checkpoints written while one is evaluated are not queued: the next look takes the newest,
 * as TensorFlow's continuous evaluation does.
 */
#include "worker/evaluator.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/backend.h"
#include "psflow/checkpoint.h"
#include "psflow/clock.h"
#include "psflow/data.h"
#include "psflow/mem.h"
#include "psflow/model.h"

#define EVAL_BATCH 1000

typedef struct evaluator {
    const evaluator_options *o;
    const pf_job_spec *spec;
    const pf_backend *be;
    pf_model *model;
    pf_dataset data; /* the test set, or the train set when the job has none */
    int has_test;
    size_t n_params;
    float *params, *hx, *hy;
    int32_t *hlabels;
    float *d_params, *d_x, *d_y;
    int32_t *d_labels;
    float *scores; /* a two-class model's scores, one per example of the set */
} evaluator;

static int stopped(const evaluator *e) {
    return e->o->stop && __atomic_load_n(e->o->stop, __ATOMIC_RELAXED);
}

static pf_status setup(evaluator *e, pf_error *err) {
    const pf_job_spec *spec = e->spec;
    e->be = pf_backend_openblas();
    int test_exists = pf_data_has_test(&spec->data);
    pf_status st = pf_dataset_load(spec, test_exists, &e->data, err);
    if (st != PF_OK)
        return st;
    e->has_test = test_exists;
    size_t in = (size_t)pf_model_input_width(&spec->model);
    e->n_params = pf_model_num_params(&spec->model);
    e->params = pf_mallocarray(e->n_params, sizeof(float));
    e->hx = pf_mallocarray((size_t)EVAL_BATCH * in, sizeof(float));
    e->hy = pf_mallocarray(EVAL_BATCH, sizeof(float));
    e->hlabels = pf_mallocarray(EVAL_BATCH, sizeof(int32_t));
    if (!e->params || !e->hx || !e->hy || !e->hlabels ||
        pf_model_create(&spec->model, e->be, EVAL_BATCH, &e->model) != PF_OK)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    e->d_params = e->be->alloc(e->n_params * sizeof(float));
    e->d_x = e->be->alloc((size_t)EVAL_BATCH * in * sizeof(float));
    e->d_y = e->be->alloc((size_t)EVAL_BATCH * sizeof(float));
    e->d_labels = e->be->alloc((size_t)EVAL_BATCH * sizeof(int32_t));
    if (!e->d_params || !e->d_x || !e->d_y || !e->d_labels)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    return PF_OK;
}

static void teardown(evaluator *e) {
    pf_model_destroy(e->model);
    pf_dataset_deinit(&e->data);
    if (e->be) {
        float *bufs[] = {e->d_params, e->d_x, e->d_y, (float *)e->d_labels};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i])
                e->be->free(bufs[i]);
    }
    pf_free(e->params);
    pf_free(e->hx);
    pf_free(e->hy);
    pf_free(e->hlabels);
    pf_free(e->scores);
}

static pf_eval evaluate(evaluator *e) {
    pf_eval ev = {0};
    const pf_dataset *ds = &e->data;
    bool binary = pf_model_two_class(&e->spec->model);
    if (binary && !e->scores)
        e->scores = pf_mallocarray((size_t)ds->n, sizeof *e->scores);
    ev.scores = binary ? e->scores : NULL; /* no memory: no AUC */
    e->be->upload(e->d_params, e->params, e->n_params);
    for (int64_t start = 0; start < ds->n; start += EVAL_BATCH) {
        int count = (int)(ds->n - start < EVAL_BATCH ? ds->n - start : EVAL_BATCH);
        pf_batch_copy(ds, start, count, e->hx, e->hy, e->hlabels);
        e->be->upload(e->d_x, e->hx, (size_t)count * (size_t)pf_model_input_width(&e->spec->model));
        if (e->spec->model.type == PF_MODEL_LINEAR)
            e->be->upload(e->d_y, e->hy, (size_t)count);
        else
            e->be->upload_i32(e->d_labels, e->hlabels, (size_t)count);
        pf_model_eval_batch(e->model, e->d_params, e->d_x, e->d_y, e->d_labels, count, &ev);
    }
    ev.auc = ev.scores ? pf_auc(ev.scores, ds->y, ds->n) : NAN;
    ev.calibration = ev.scores ? pf_calibration(ev.scores, ds->y, ds->n) : NAN;
    ev.scores = NULL;
    return ev;
}

/* Merges, loads and evaluates the checkpoint in step_dir; logs and reports the result. */
static pf_status evaluate_checkpoint(evaluator *e, const char *step_dir, int64_t step, pf_eval *out,
                                     pf_error *err) {
    pf_checkpoint_model *m = NULL;
    pf_status st = pf_checkpoint_merge(step_dir, &m, err);
    if (st == PF_OK)
        st = pf_checkpoint_model_params(m, &e->spec->model, e->params, err);
    pf_checkpoint_model_destroy(m);
    if (st != PF_OK)
        return st;
    size_t bad = pf_first_nonfinite(e->params, e->n_params);
    if (bad < e->n_params)
        return pf_error_set(err, PF_ERR_NONFINITE, NULL, "the checkpoint holds a non-finite value");
    *out = evaluate(e);
    double loss = out->loss_sum / (double)out->examples;
    int linear = e->spec->model.type == PF_MODEL_LINEAR;
    double acc = linear ? NAN : (double)out->correct / (double)out->examples;
    const char *set = e->has_test ? "test" : "train";
    if (linear)
        fprintf(stderr, "psflow evaluator: step %" PRId64 " %s loss %.6f\n", step, set, loss);
    else if (!isnan(out->auc))
        fprintf(stderr,
                "psflow evaluator: step %" PRId64
                " %s loss %.4f %s accuracy %.4f %s auc %.4f calibration %.4g\n",
                step, set, loss, set, acc, set, out->auc, out->calibration);
    else
        fprintf(stderr, "psflow evaluator: step %" PRId64 " %s loss %.4f %s accuracy %.4f\n", step,
                set, loss, set, acc);
    if (e->o->report) {
        worker_report r = {.kind = WORKER_REPORT_EVAL,
                           .step = (uint64_t)step,
                           .time = pf_clock_wall(),
                           .accuracy = acc,
                           .test_loss = loss,
                           .auc = out->auc,
                           .calibration = out->calibration,
                           .bayes_auc = NAN};
        e->o->report(e->o->report_ctx, &r);
    }
    return PF_OK;
}

static void print_result(const evaluator *e, int64_t step, const pf_eval *ev, int count) {
    double loss = ev->examples ? ev->loss_sum / (double)ev->examples : NAN;
    double acc = e->spec->model.type != PF_MODEL_LINEAR && ev->examples
                     ? (double)ev->correct / (double)ev->examples
                     : NAN;
    if (e->o->json) { /* a loss JSON cannot hold (NaN, infinite) is null */
        json_t *j = json_pack("{s:s, s:I, s:i, s:o, s:o}", "job", e->spec->name, "step",
                              (json_int_t)step, "evaluations", count, "eval_loss",
                              pf_json_number(loss), "eval_accuracy", pf_json_number(acc));
        if (j && !isnan(ev->auc))
            json_object_set_new(j, "eval_auc", pf_json_number(ev->auc));
        if (j && !isnan(ev->calibration))
            json_object_set_new(j, "eval_calibration", pf_json_number(ev->calibration));
        char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        if (text)
            printf("%s\n", text);
        free(text);
        json_decref(j);
    } else if (e->spec->model.type == PF_MODEL_LINEAR) {
        printf("evaluated %d checkpoint(s); final step %" PRId64 ": eval loss %.6f\n", count, step,
               loss);
    } else {
        printf("evaluated %d checkpoint(s); final step %" PRId64
               ": eval loss %.4f, eval accuracy %.4f\n",
               count, step, loss, acc);
    }
    fflush(stdout);
}

pf_status evaluator_run(const evaluator_options *o, pf_error *err) {
    pf_error_clear(err);
    evaluator e = {.o = o, .spec = o->spec};
    pf_status st = setup(&e, err);
    if (st != PF_OK) {
        teardown(&e);
        return st;
    }
    const pf_job_spec *spec = o->spec;
    /* Without --idle-timeout: as long as a healthy job can go between two checkpoints plus
     * the stall bound. A job checkpointing by steps only (every_secs 0) has no such time, so
     * the evaluator waits until it is stopped (SIGTERM, or its agent when the job ends). */
    double idle = o->idle_timeout > 0               ? o->idle_timeout
                  : spec->checkpoint.every_secs > 0 ? (double)spec->training.stall_timeout_secs +
                                                          (double)spec->checkpoint.every_secs
                                                    : INFINITY;
    double poll = o->poll_seconds > 0 ? o->poll_seconds : 1.0;
    char job_dir[2048], step_dir[2048];
    if (pf_checkpoint_job_dir(o->checkpoint_dir, spec->name, job_dir, sizeof job_dir) != PF_OK) {
        teardown(&e);
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    }
    char limit[64] = "waits until stopped (checkpoints by steps only)";
    if (isfinite(idle))
        snprintf(limit, sizeof limit, "gives up after %.0f s without one", idle);
    fprintf(stderr,
            "psflow evaluator: job %s: evaluating each new complete checkpoint under %s on the "
            "%s set (%" PRId64 " examples); %s\n",
            spec->name, job_dir, e.has_test ? "test" : "train", e.data.n, limit);
    int64_t last = -1, skipped = -1;
    int count = 0;
    pf_eval ev = {.auc = NAN, .calibration = NAN};
    double since = pf_clock_now();
    st = PF_OK;
    while (st == PF_OK) {
        /* Stopped (a managed job ends as its chief succeeds): one last look, since the final
         * checkpoint may have appeared just before. */
        int last_look = stopped(&e);
        int64_t step;
        pf_error ferr;
        pf_error_clear(&ferr);
        pf_status found =
            pf_checkpoint_find_latest(job_dir, 0, &step, step_dir, sizeof step_dir, &ferr);
        if (found == PF_OK && step > last && step != skipped) {
            pf_eval one = {.auc = NAN, .calibration = NAN};
            pf_error cerr;
            pf_error_clear(&cerr);
            pf_status cst = evaluate_checkpoint(&e, step_dir, step, &one, &cerr);
            if (cst == PF_OK) {
                last = step, ev = one, count++;
                since = pf_clock_now();
                if (step >= spec->training.max_steps)
                    break;
                if (!last_look)
                    continue;
            }
            if (cst == PF_ERR_NOMEM) {
                st = pf_error_set(err, cst, NULL, "%s", cerr.message);
                break;
            }
            if (cst != PF_OK) { /* pruned or set aside while being read, or bad: skip it */
                fprintf(stderr, "psflow evaluator: skipping checkpoint %s: %s\n", step_dir,
                        cerr.message);
                skipped = step;
            }
        } else if (found != PF_OK && found != PF_ERR_NOT_FOUND) {
            fprintf(stderr, "psflow evaluator: cannot look for checkpoints in %s: %s\n", job_dir,
                    ferr.message);
        }
        if (last_look) {
            st = pf_error_set(err, PF_ERR_CANCELLED, NULL, "stopped after evaluating step %" PRId64,
                              last);
            break;
        }
        if (pf_clock_now() - since > idle) {
            st = last < 0 ? pf_error_set(err, PF_ERR_UNAVAILABLE, NULL,
                                         "no complete checkpoint of job %s appeared under %s in "
                                         "%.0f s",
                                         spec->name, job_dir, idle)
                          : pf_error_set(err, PF_ERR_UNAVAILABLE, NULL,
                                         "no checkpoint of job %s newer than step %" PRId64
                                         " appeared under %s in %.0f s (the job ends at step "
                                         "%" PRId64 ")",
                                         spec->name, last, job_dir, idle, spec->training.max_steps);
            break;
        }
        pf_clock_sleep(poll);
    }
    if (st == PF_OK)
        print_result(&e, last, &ev, count);
    teardown(&e);
    return st;
}
