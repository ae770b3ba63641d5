/* footprint.c - a job's needs before anything is allocated (see footprint.h). Sums are
 * computed in double and clamped, so absurd specs (a trillion parameters, 2^62 examples)
 * give huge figures rather than overflows. */
#include "psflow/footprint.h"

#include <stdio.h>

#include "psflow/dyn_batch.h"
#include "psflow/dyn_table.h"
#include "psflow/model.h"
#include "psflow/optim.h"
#include "psflow/wire.h"

#define EVAL_BATCH PF_EVAL_BATCH /* the evaluation batch every model is also built for */

static int64_t clamp(double bytes) {
    return bytes >= 9.0e18 ? INT64_MAX : (int64_t)bytes;
}

void pf_footprint_estimate(const pf_job_spec *spec, pf_footprint *out) {
    pf_var_info vars[PF_MAX_VARS];
    int n_vars = pf_model_layout(&spec->model, vars);
    double params = 0, shards = 0, widths = 0, widest = 0;
    for (int v = 0; v < n_vars; v++) {
        params += (double)vars[v].count;
        shards += pf_partition_count(&spec->partitioner, vars[v].shape[0],
                                     (int64_t)sizeof(float) * vars[v].shape[1]);
        if (vars[v].rank == 2 && v >= spec->model.n_embeddings) { /* a kernel [in, out] */
            widths += (double)vars[v].shape[1];
            widest = vars[v].shape[0] > widest ? (double)vars[v].shape[0] : widest;
            widest = vars[v].shape[1] > widest ? (double)vars[v].shape[1] : widest;
        }
    }
    int slots = pf_optim_num_slots(&spec->optimizer);
    double batch = spec->training.batch_size > EVAL_BATCH ? spec->training.batch_size : EVAL_BATCH;
    double data = 0;
    double n = (double)spec->data.n, n_test = n / 5 > 1 ? n / 5 : 1;
    if (spec->data.format == PF_DATA_SYNTHETIC_LINEAR)
        data = 16 * n + 8 * n_test;
    else if (spec->data.format == PF_DATA_SYNTHETIC_CTR) /* x and y, generated in memory */
        data = (4.0 * pf_model_input_width(&spec->model) + 4) * (n + n_test);
    /* A worker holds of each table only the rows one batch (or the chief's evaluation
     * batch) names (worker/rows.h); psflow train holds the tables whole. */
    double held = params, dynamic = 0;
    for (int f = 0; f < spec->model.n_embeddings; f++) {
        const pf_embedding_spec *e = &spec->model.embeddings[f];
        double named = batch * spec->replicas_per_worker * e->max_ids;
        double width = pf_model_row_width(&spec->model, f);
        if (e->kind == PF_TABLE_DYNAMIC) { /* its compact rows, and the table at its cap */
            held += named * width;
            params += named * width;
            pf_dyn_config cfg;
            pf_dyn_table_config(spec, f, e->max_rows, &cfg);
            dynamic += (double)pf_dyn_bytes_bound(&cfg);
        } else if (named < (double)e->vocab) {
            held -= ((double)e->vocab - named) * width;
        }
    }
    double per_batch = batch * (2.0 * pf_model_input_width(&spec->model) + 4 + widths + 2 * widest);
    double training = 4 * (4 * held + per_batch) + data;
    double process = 4 * (4 * params + per_batch) + data;
    out->params = clamp(params);
    out->slots = slots;
    out->model_bytes = clamp(4 * params * (1 + slots));
    out->shards = clamp(shards);
    out->worker_bytes = clamp(training);
    out->data_bytes = clamp(data);
    out->process_bytes = clamp(process + 4 * params * (1 + slots) + dynamic);
    out->dynamic_bytes = clamp(dynamic);
}

pf_status pf_footprint_check_cluster(const pf_job_spec *spec, pf_error *err) {
    if (pf_model_has_dynamic(&spec->model) && spec->replicas.evaluator > 0)
        return pf_error_set(err, PF_ERR_SPEC, "/replicas/evaluator",
                            "/replicas/evaluator: an evaluator task reads whole tables, and a "
                            "dynamic table has none to read; the chief evaluates jobs with "
                            "dynamic tables (training.eval_every_steps)");
    return PF_OK;
}

/* Of a dynamic table's shard of ps task `task`: its table at its share of max_rows, the copy
 * of its rows a checkpoint writes (values, slots, an id and a step each: dyn_checkpoint.h)
 * and the pointers an update of a batch's ids takes (24 bytes an id), and into *rows the rows
 * of the ids one message may name (a batch's: 4 bytes a float, 8 an id pushed and 8
 * pulled). */
static double dynamic_share(const pf_job_spec *spec, const pf_shard_info *sh, double *rows) {
    double ids = (double)pf_dyn_message_ids(spec, sh->var);
    double width = pf_model_row_width(&spec->model, sh->var);
    *rows = ids * (4.0 * width + 16);
    pf_dyn_config cfg;
    pf_dyn_table_config(spec, sh->var, sh->max_rows, &cfg);
    double snapshot = (double)sh->max_rows * (4.0 * width * (1 + cfg.slots) + 16);
    return (double)pf_dyn_bytes_bound(&cfg) + snapshot + 24 * ids;
}

int64_t pf_footprint_ps_bytes(const pf_job_spec *spec, const pf_placement *p, int task) {
    if (task < 0 || task >= p->n_ps)
        return 0;
    double held = (double)p->bytes_per_ps[task];
    double tasks = spec->replicas.worker + spec->replicas.chief;
    double sync = spec->training.mode == PF_MODE_SYNC ? tasks : 0;
    double state = held * (1 + pf_optim_num_slots(&spec->optimizer) + sync);
    /* The largest message a training task exchanges with this ps: every shard's values
     * (a PUSH_PULL, or its PULL_REPLY) with the headers, and a batch's rows of each dynamic
     * table; a sync step keeps every task's rows of it and their sum. */
    double message = held + PF_FOOTPRINT_PS_MESSAGE_EXTRA +
                     PF_FOOTPRINT_PS_SHARD_EXTRA * (double)p->shards_per_ps[task];
    for (int k = 0; k < p->n_shards; k++) {
        if (!p->shards[k].dynamic || p->shards[k].ps_task != task)
            continue;
        double rows;
        state += dynamic_share(spec, &p->shards[k], &rows) + (sync ? sync + 1 : 0) * rows;
        message += rows;
    }
    return clamp((double)PF_FOOTPRINT_PS_BASE + state + 2 * tasks * message);
}

pf_status pf_footprint_check(const pf_job_spec *spec, const pf_footprint *fp, pf_error *err) {
    /* At global step s, worker i reads stream positions from s * T * b + i * b on
     * (data.h): the last step's must be a 64-bit integer. */
    int64_t per_step =
        (int64_t)(spec->replicas.worker + spec->replicas.chief) * spec->training.batch_size;
    if (spec->training.max_steps > INT64_MAX / per_step)
        return pf_error_set(err, PF_ERR_SPEC, "/training/max_steps",
                            "/training/max_steps: %lld steps of %lld examples each (every "
                            "training task's batch) do not fit the 64-bit example stream; at "
                            "most %lld",
                            (long long)spec->training.max_steps, (long long)per_step,
                            (long long)(INT64_MAX / per_step));
    if (fp->shards > PF_FOOTPRINT_MAX_SHARDS)
        return pf_error_set(err, PF_ERR_SPEC, "/placement/partitioner",
                            "/placement/partitioner: cuts the model into %lld shards, more than "
                            "the %d any job may have",
                            (long long)fp->shards, PF_FOOTPRINT_MAX_SHARDS);
    return PF_OK;
}

pf_status pf_footprint_check_placement(const pf_job_spec *spec, const pf_placement *p,
                                       pf_error *err) {
    (void)spec;
    for (int t = 0; t < p->n_ps; t++) {
        char held[32], most[32];
        /* The reply to a pull of everything the task holds: values plus a header and a
         * 16-byte record per shard. */
        int64_t reply = p->bytes_per_ps[t] + (int64_t)PF_WIRE_HEADER_SIZE +
                        PF_WIRE_TENSOR_HEADER * (int64_t)p->shards_per_ps[t];
        if (reply > (int64_t)PF_WIRE_MAX_PAYLOAD) {
            pf_footprint_format_bytes(p->bytes_per_ps[t], held, sizeof held);
            pf_footprint_format_bytes((int64_t)PF_WIRE_MAX_PAYLOAD, most, sizeof most);
            return pf_error_set(err, PF_ERR_SPEC, "/replicas/ps",
                                "/replicas/ps: ps task %d would hold %s of values, more than "
                                "one message of the data plane carries (%s): spread the model "
                                "over more ps tasks",
                                t, held, most);
        }
        if ((unsigned)p->shards_per_ps[t] > PF_WIRE_MAX_TENSORS)
            return pf_error_set(err, PF_ERR_SPEC, "/replicas/ps",
                                "/replicas/ps: ps task %d would hold %d shards, more than one "
                                "message of the data plane carries (%u)",
                                t, p->shards_per_ps[t], PF_WIRE_MAX_TENSORS);
    }
    return PF_OK;
}

void pf_footprint_format_bytes(int64_t bytes, char *buf, size_t cap) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%lld B", (long long)bytes);
    else
        snprintf(buf, cap, "%.*f %s", v < 10 ? 1 : 0, v, units[u]);
}
