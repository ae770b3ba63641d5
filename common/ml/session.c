/* session.c - single-process training (see session.h).
 *
 * DESIGN: the step is gather (host) -> upload -> forward/backward -> optimizer, all on
 * buffers allocated once at creation; nothing is allocated per step. Parameters, gradients
 * and optimizer slots stay in the memory of replica 0's backend. With K in-graph replicas
 * (towers.h) a step gathers K * batch_size examples, hands the parameters (downloaded to
 * the host) to the replicas, uploads their averaged gradient and applies the optimizer: the
 * same step as a worker with K replicas whose ps applies its gradient. Evaluation walks the
 * evaluation set in order with batches of up to EVAL_BATCH examples, on replica 0's backend.
 * A model with dynamic tables (dyn_batch.h) computes on its compact model: each batch is
 * planned into the compact examples (hc), its rows gathered from the tables into the
 * compact vector before the step and its rows' gradients applied to the tables after it.
 */
#include "psflow/session.h"

#include <stdio.h>
#include <math.h>
#include <string.h>

#include "psflow/dyn_batch.h"
#include "psflow/mem.h"
#include "psflow/optim.h"
#include "psflow/safetensors.h"
#include "psflow/stream.h"
#include "psflow/towers.h"

#define EVAL_BATCH PF_EVAL_BATCH

struct pf_session {
    pf_job_spec spec;
    const pf_backend *be;
    pf_model *model;
    pf_dataset train, test;
    bool has_test;
    pf_sampler *sampler;
    pf_stream_source *input; /* data.streaming: the train files read as streams instead */
    pf_status input_status;  /* the last step's reading (PF_OK, or why its batch is missing) */
    pf_error input_err;
    int64_t step;
    size_t n_params;
    int n_slots;
    /* backend memory */
    float *params, *grads, *slots[PF_OPTIM_MAX_SLOTS];
    float *x, *y;
    int32_t *labels;
    /* host staging for one batch (of all replicas) */
    float *hx, *hy;
    int32_t *hlabels;
    /* in-graph replicas, when the spec asks for more than one: their host parameters and
     * averaged gradient */
    pf_towers *towers;
    float *hparams, *hgrads;
    float *scores;  /* a two-class model's evaluation scores, one per example of the set */
    uint32_t *rows; /* a table's rows a batch names (pf_optim_rows_only) */
    /* dynamic tables: the plan of a batch, its compact examples and the tables */
    pf_dyn_batch *dyn;
    float *hc;
    pf_dyn_table *tables[PF_MAX_EMBEDDINGS];
    float **dyn_rows, **dyn_slots; /* a batch's rows and slot rows, as pf_dyn_update_batch */
    pf_var_info vars[PF_MAX_VARS]; /* the layout of the vector the model computes on */
    int n_vars;
};

/* The model the session computes on: the job's, or its compact one. */
static const pf_model_spec *model_of(const pf_session *s) {
    return s->dyn ? &s->dyn->compact : &s->spec.model;
}

/* Creates the plan and the tables of a model with dynamic tables, for batches of up to
 * `stage` examples. */
static pf_status dyn_create(pf_session *s, int stage, pf_error *err) {
    const pf_model_spec *m = &s->spec.model;
    s->dyn = pf_calloc(1, sizeof *s->dyn);
    if (!s->dyn)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    pf_status st = pf_dyn_batch_init(s->dyn, m, stage);
    if (st != PF_OK) {
        pf_free(s->dyn);
        s->dyn = NULL;
        return pf_error_set(err, st, NULL,
                            st == PF_ERR_NOMEM ? "out of memory"
                                               : "a batch of %d examples names more rows than a "
                                                 "table of the model may have",
                            stage);
    }
    size_t most = 0;
    for (int f = 0; f < m->n_embeddings; f++) {
        if (m->embeddings[f].kind != PF_TABLE_DYNAMIC)
            continue;
        pf_dyn_config cfg;
        pf_dyn_table_config(&s->spec, f, m->embeddings[f].max_rows, &cfg);
        char why[160];
        if ((st = pf_dyn_config_check(&cfg, why, sizeof why)) != PF_OK)
            return pf_error_set(err, st, NULL, "embedding '%s': %s", m->embeddings[f].name, why);
        if ((st = pf_dyn_create(&cfg, &s->tables[f])) != PF_OK)
            return pf_error_set(err, st, NULL, "out of memory for embedding '%s'",
                                m->embeddings[f].name);
        most = s->dyn->cap[f] > most ? s->dyn->cap[f] : most;
    }
    s->hc = pf_mallocarray((size_t)stage * (size_t)s->dyn->out_width, sizeof *s->hc);
    s->dyn_rows = pf_mallocarray(most, sizeof *s->dyn_rows);
    s->dyn_slots = pf_mallocarray(most * PF_DYN_MAX_SLOTS, sizeof *s->dyn_slots);
    if (!s->hc || !s->dyn_rows || !s->dyn_slots)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    return PF_OK;
}

/* Plans `count` staged examples (hx) into the compact ones (hc) and gathers their rows of
 * the dynamic tables into the compact vector (host memory: embedding models run on the
 * CPU). */
static void dyn_prepare(pf_session *s, int count, bool training) {
    pf_dyn_batch_plan(s->dyn, s->hx, count, s->hc);
    for (int f = 0; f < s->spec.model.n_embeddings; f++)
        if (s->tables[f])
            (training ? pf_dyn_gather : pf_dyn_gather_uncounted)(
                s->tables[f], s->dyn->ids[f], s->dyn->n[f], s->params + s->vars[f].offset);
}

/* The gradient of the batch's rows of dynamic table f, applied to the table's rows at the
 * current step: rows not admitted drop theirs. */
static void dyn_apply(pf_session *s, int f, const pf_optim_step *step) {
    size_t width = (size_t)s->vars[f].shape[1], at = s->vars[f].offset;
    uint32_t n = s->dyn->n[f];
    if (pf_dyn_update_batch(s->tables[f], s->dyn->ids[f], n, s->step, s->dyn_rows, s->dyn_slots) !=
        PF_OK)
        return; /* out of memory: the table unchanged, this step's rows not updated */
    for (uint32_t j = 0; j < n; j++)
        if (s->dyn_rows[j])
            pf_optim_step_apply(step, s->be, width, s->grads + at + (size_t)j * width,
                                s->dyn_rows[j], s->dyn_slots + (size_t)j * PF_DYN_MAX_SLOTS);
    (void)pf_dyn_dense_step(s->tables[f], &s->spec.optimizer, step, s->be, s->step); /* adam */
    pf_dyn_evict_stale(s->tables[f], s->step);
}

static bool is_classifier(const pf_job_spec *spec) {
    return spec->model.type != PF_MODEL_LINEAR;
}

pf_status pf_session_create(const pf_job_spec *spec, const pf_session_options *options,
                            pf_session **out, pf_error *err) {
    *out = NULL;
    pf_session *s = pf_calloc(1, sizeof *s);
    if (!s)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    pf_status st = pf_job_spec_copy(&s->spec, spec);
    if (st != PF_OK) {
        pf_free(s);
        return pf_error_set(err, st, NULL, "out of memory");
    }
    const pf_backend *override = options ? options->backend : NULL;
    if (override)
        s->be = override;
    else if ((st = pf_backend_for_device(spec->devices[0].device, spec->devices[0].index, &s->be,
                                         err)) != PF_OK)
        goto fail;
    const int replicas = spec->replicas_per_worker;
    if (replicas > 1 && (st = pf_towers_create(spec, override, &s->towers, err)) != PF_OK)
        goto fail;

    /* Streamed: one stream per replica, as a worker of the same replicas reads them. One
     * process has nobody to share splits with: dynamic splits are read as static ones. */
    pf_job_spec one = *spec;
    one.data.splits = PF_SPLITS_STATIC;
    st = spec->data.streaming
             ? pf_stream_open(&one, replicas, spec->training.batch_size, &s->input, err)
             : pf_dataset_load(spec, false, &s->train, err);
    if (st != PF_OK)
        goto fail;
    bool test_exists = pf_data_has_test(&spec->data);
    if (options && options->load_test && test_exists) {
        if ((st = pf_dataset_load(spec, true, &s->test, err)) != PF_OK)
            goto fail;
        s->has_test = true;
    }

    int batch = spec->training.batch_size;
    int max_batch = batch > EVAL_BATCH ? batch : EVAL_BATCH;
    /* the host staging holds every replica's examples */
    int stage = replicas * batch > EVAL_BATCH ? replicas * batch : EVAL_BATCH;
    if (pf_model_has_dynamic(&spec->model) && (st = dyn_create(s, stage, err)) != PF_OK)
        goto fail;
    const pf_model_spec *computed = model_of(s);
    s->n_vars = pf_model_layout(computed, s->vars);
    if ((st = pf_model_create(computed, s->be, max_batch, &s->model)) == PF_ERR_UNSUPPORTED) {
        pf_error_set(err, st, NULL, "a model with embeddings needs a CPU backend, not %s",
                     s->be->name);
        goto fail;
    }
    /* One replica trains straight into s->grads, which only apply() reads: a step zeroes just
     * the table rows the last one wrote (O(batch), not O(vocabulary)). */
    if (st != PF_OK)
        goto nomem;
    s->sampler = s->input ? NULL : pf_sampler_create(s->train.n, spec->training.seed, true);
    s->n_params = pf_model_num_params(computed);
    s->n_slots = pf_optim_num_slots(&spec->optimizer);
    const pf_backend *be = s->be;
    size_t in = (size_t)pf_model_input_width(&spec->model); /* hx: the examples as read */
    size_t computed_in = (size_t)pf_model_input_width(computed);
    s->params = be->alloc(s->n_params * sizeof(float));
    s->grads = be->alloc(s->n_params * sizeof(float));
    s->x = be->alloc((size_t)max_batch * computed_in * sizeof(float));
    s->y = be->alloc((size_t)max_batch * sizeof(float));
    s->labels = be->alloc((size_t)max_batch * sizeof(int32_t));
    s->hx = pf_mallocarray((size_t)stage * in, sizeof(float));
    s->hy = pf_mallocarray((size_t)stage, sizeof(float));
    s->hlabels = pf_mallocarray((size_t)stage, sizeof(int32_t));
    if ((!s->sampler && !s->input) || !s->params || !s->grads || !s->x || !s->y || !s->labels ||
        !s->hx || !s->hy || !s->hlabels)
        goto nomem;
    /* One replica trains straight into s->grads, which only apply() reads: a step zeroes just
     * the table rows the last one wrote (O(batch), not O(vocabulary)). */
    if (!s->towers &&
        pf_model_keep_grads_sparse(s->model, be->alloc_zeroed ? s->grads : NULL) != PF_OK)
        goto nomem;
    int most_ids = 0;
    for (int f = 0; f < spec->model.n_embeddings; f++)
        most_ids = spec->model.embeddings[f].max_ids > most_ids ? spec->model.embeddings[f].max_ids
                                                                : most_ids;
    /* a step's batch is every replica's examples (stage), each naming up to most_ids rows */
    if (most_ids > 0 &&
        !(s->rows = pf_mallocarray((size_t)stage * (size_t)most_ids, sizeof *s->rows)))
        goto nomem;
    if (s->towers) {
        s->hparams = pf_mallocarray(s->n_params, sizeof(float));
        s->hgrads = pf_mallocarray(s->n_params, sizeof(float));
        if (!s->hparams || !s->hgrads)
            goto nomem;
    }
    for (int i = 0; i < s->n_slots; i++) {
        if (!(s->slots[i] = be->alloc(s->n_params * sizeof(float))))
            goto nomem;
        pf_optim_slot_init(&spec->optimizer, be, i, s->slots[i], s->n_params);
    }
    /* Initial values are drawn on the host (identical on every backend), then uploaded. */
    size_t n_init = pf_model_num_params(&spec->model);
    float *init = pf_mallocarray(n_init, sizeof(float));
    if (!init)
        goto nomem;
    pf_model_init_params(&spec->model, spec->training.seed, init);
    if (s->dyn) { /* the job's variables into the compact vector (host memory) */
        be->fill(s->params, 0, s->n_params);
        pf_dyn_batch_map(s->dyn, init, s->params);
    } else {
        be->upload(s->params, init, s->n_params);
    }
    pf_free(init);
    *out = s;
    return PF_OK;
nomem:
    st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory setting up the model");
fail:
    pf_session_destroy(s);
    return st;
}

void pf_session_destroy(pf_session *s) {
    if (!s)
        return;
    const pf_backend *be = s->be;
    if (be) {
        float *bufs[] = {s->params,          s->grads,    s->x,       s->y,
                         (float *)s->labels, s->slots[0], s->slots[1]};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i])
                be->free(bufs[i]);
    }
    pf_free(s->hx);
    pf_free(s->rows);
    pf_free(s->hc);
    pf_free(s->dyn_rows);
    pf_free(s->dyn_slots);
    for (int f = 0; f < PF_MAX_EMBEDDINGS; f++)
        pf_dyn_destroy(s->tables[f]);
    if (s->dyn)
        pf_dyn_batch_deinit(s->dyn);
    pf_free(s->dyn);
    pf_free(s->hy);
    pf_free(s->hlabels);
    pf_free(s->hparams);
    pf_free(s->hgrads);
    pf_free(s->scores);
    pf_towers_destroy(s->towers);
    pf_model_destroy(s->model);
    pf_sampler_destroy(s->sampler);
    pf_stream_close(s->input);
    pf_dataset_deinit(&s->train);
    pf_dataset_deinit(&s->test);
    pf_job_spec_deinit(&s->spec);
    pf_free(s);
}

/* Uploads `count` host-staged examples to the backend batch buffers (of a training step, or
 * of an evaluation, whose lookups the tables do not count). */
static void upload_batch(pf_session *s, int count, bool training) {
    const pf_backend *be = s->be;
    if (s->dyn)
        dyn_prepare(s, count, training);
    be->upload(s->x, s->dyn ? s->hc : s->hx,
               (size_t)count * (size_t)pf_model_input_width(model_of(s)));
    if (is_classifier(&s->spec))
        be->upload_i32(s->labels, s->hlabels, (size_t)count);
    else
        be->upload(s->y, s->hy, (size_t)count);
}

/* One optimizer update from s->grads. A table whose optimizer updates the named rows only
 * (pf_optim_rows_only: TensorFlow's sparse kernels) changes just the rows the batch hx
 * names; every other variable, and every table under adam, is updated whole. Tables are
 * host memory (embedding models train on the CPU). */
/* One optimizer update of the elements [from, to) of the vector, whole. */
static void apply_range(pf_session *s, size_t from, size_t to) {
    float *slots[PF_OPTIM_MAX_SLOTS] = {NULL, NULL};
    for (int k = 0; k < s->n_slots; k++)
        slots[k] = s->slots[k] + from;
    pf_optim_apply(&s->spec.optimizer, s->be, s->step, to - from, s->grads + from, s->params + from,
                   slots);
}

static void apply(pf_session *s, int batch) {
    const pf_optimizer_spec *o = &s->spec.optimizer;
    const pf_model_spec *m = model_of(s);
    if (s->dyn && !pf_optim_rows_only(o)) {
        /* adam: every variable whole, but a dynamic table's compact rows: the table's rows the
         * batch names take their gradients and every other row a zero one (dyn_apply) */
        pf_optim_step step = pf_optim_prepare(o, s->step);
        size_t from = 0;
        for (int f = 0; f < m->n_embeddings; f++) {
            if (!s->tables[f])
                continue;
            apply_range(s, from, s->vars[f].offset);
            dyn_apply(s, f, &step);
            from = s->vars[f].offset + s->vars[f].count;
        }
        apply_range(s, from, s->n_params);
        return;
    }
    if (m->n_embeddings == 0 || !pf_optim_rows_only(o) || !s->rows) {
        pf_optim_apply(o, s->be, s->step, s->n_params, s->grads, s->params, s->slots);
        return;
    }
    const pf_var_info *vars = s->vars;
    pf_optim_step step = pf_optim_prepare(o, s->step); /* once for every row */
    for (int f = 0; f < m->n_embeddings; f++) {        /* the tables come first */
        if (s->tables[f]) {
            dyn_apply(s, f, &step);
            continue;
        }
        uint32_t n = pf_model_batch_rows(m, f, s->dyn ? s->hc : s->hx, batch, s->rows);
        size_t dim = (size_t)vars[f].shape[1], at = vars[f].offset;
        float *slots[PF_OPTIM_MAX_SLOTS] = {NULL, NULL};
        for (int k = 0; k < s->n_slots; k++)
            slots[k] = s->slots[k] + at;
        for (uint32_t j = 0; j < n; j++) {
            size_t row = (size_t)s->rows[j] * dim;
            float *row_slots[PF_OPTIM_MAX_SLOTS] = {slots[0] ? slots[0] + row : NULL,
                                                    slots[1] ? slots[1] + row : NULL};
            pf_optim_step_apply(&step, s->be, dim, s->grads + at + row, s->params + at + row,
                                row_slots);
        }
    }
    size_t dense = vars[m->n_embeddings].offset;
    float *slots[PF_OPTIM_MAX_SLOTS] = {NULL, NULL};
    for (int k = 0; k < s->n_slots; k++)
        slots[k] = s->slots[k] + dense;
    pf_optim_apply(o, s->be, s->step, s->n_params - dense, s->grads + dense, s->params + dense,
                   slots);
}

float pf_session_step(pf_session *s) {
    int batch = s->spec.training.batch_size * s->spec.replicas_per_worker;
    int64_t start = pf_shard_position(s->step, 1, 0, batch);
    if (s->input) {
        s->input_status =
            pf_stream_gather(s->input, start, batch, s->hx, s->hy, s->hlabels, &s->input_err);
        if (s->input_status != PF_OK)
            return NAN; /* nothing trained: pf_session_input_error says why */
    } else {
        pf_batch_gather(&s->train, s->sampler, start, batch, s->hx, s->hy, s->hlabels);
    }
    if (s->spec.data.shift_step > 0 && s->step >= s->spec.data.shift_step)
        pf_synthetic_ctr_shift(&s->spec.model, s->hx, batch);
    float loss;
    if (s->towers) {
        s->be->download(s->hparams, s->params, s->n_params);
        loss = pf_towers_gradient(s->towers, s->hparams, s->hx, s->hy, s->hlabels, s->hgrads);
        s->be->upload(s->grads, s->hgrads, s->n_params);
    } else {
        upload_batch(s, batch, true);
        loss = pf_model_train_step(s->model, s->params, s->x, s->y, s->labels, batch, s->grads);
    }
    apply(s, batch);
    s->step++;
    return loss;
}

pf_status pf_session_input_error(const pf_session *s, pf_error *err) {
    if (s->input_status != PF_OK && err)
        *err = s->input_err;
    return s->input_status;
}

const pf_stream_source *pf_session_input(const pf_session *s) {
    return s->input;
}

int64_t pf_session_take_bad(pf_session *s, int64_t *total, char *last, size_t len) {
    *total = 0;
    if (len)
        last[0] = '\0';
    return s->input ? pf_stream_take_bad(s->input, total, last, len) : 0;
}

int64_t pf_session_global_step(const pf_session *s) {
    return s->step;
}

bool pf_session_has_test_set(const pf_session *s) {
    return s->has_test;
}

const pf_dataset *pf_session_eval_set(const pf_session *s) {
    return s->has_test ? &s->test : &s->train;
}

void pf_session_evaluate(pf_session *s, pf_eval *out) {
    const pf_dataset *ds = pf_session_eval_set(s);
    memset(out, 0, sizeof *out);
    bool binary = pf_model_two_class(&s->spec.model);
    if (binary && !s->scores)
        s->scores = pf_mallocarray((size_t)ds->n, sizeof *s->scores);
    out->scores = binary ? s->scores : NULL; /* no memory: no AUC */
    for (int64_t start = 0; start < ds->n; start += EVAL_BATCH) {
        int count = (int)(ds->n - start < EVAL_BATCH ? ds->n - start : EVAL_BATCH);
        pf_batch_copy(ds, start, count, s->hx, s->hy, s->hlabels);
        upload_batch(s, count, false);
        pf_model_eval_batch(s->model, s->params, s->x, s->y, s->labels, count, out);
    }
    out->auc = out->scores ? pf_auc(out->scores, ds->y, ds->n) : NAN;
    out->calibration = out->scores ? pf_calibration(out->scores, ds->y, ds->n) : NAN;
    out->scores = NULL;
}

void pf_session_read_params(const pf_session *s, float *params) {
    s->be->download(params, s->params, s->n_params);
}

pf_status pf_session_save(const pf_session *s, const char *path, const pf_tensor_view *extra,
                          int n_extra, pf_error *err) {
    float *host = pf_mallocarray(s->n_params, sizeof(float));
    pf_tensor_view *views = pf_mallocarray((size_t)(PF_MAX_VARS + n_extra), sizeof *views);
    if (!host || !views || n_extra < 0) {
        pf_free(host);
        pf_free(views);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    }
    pf_session_read_params(s, host);
    const pf_var_info *vars = s->vars;
    int n = 0;
    for (int i = 0; i < n_extra; i++) /* 8-byte tensors first: aligned after the header */
        if (extra[i].dtype == PF_DTYPE_I64 || extra[i].dtype == PF_DTYPE_U64)
            views[n++] = extra[i];
    for (int i = 0; i < s->n_vars; i++) {
        if (i < PF_MAX_EMBEDDINGS && s->tables[i])
            continue; /* a dynamic table: its rows are among extra */
        views[n] = (pf_tensor_view){.name = vars[i].name,
                                    .rank = vars[i].rank,
                                    .shape = {vars[i].shape[0]},
                                    .data = host + vars[i].offset};
        if (vars[i].rank == 2)
            views[n].shape[1] = vars[i].shape[1];
        n++;
    }
    for (int i = 0; i < n_extra; i++)
        if (extra[i].dtype != PF_DTYPE_I64 && extra[i].dtype != PF_DTYPE_U64)
            views[n++] = extra[i];
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)s->step);
    const char *keys[] = {"format", "psflow_job", "global_step", "model_type"};
    const char *values[] = {"np", s->spec.name, step, pf_model_type_name(s->spec.model.type)};
    pf_status st = pf_safetensors_write(path, views, n, keys, values, 4, err);
    pf_free(host);
    pf_free(views);
    return st;
}

const pf_model_spec *pf_session_model(const pf_session *s) {
    return model_of(s);
}

pf_dyn_table *pf_session_table(const pf_session *s, int f) {
    return f >= 0 && f < PF_MAX_EMBEDDINGS ? s->tables[f] : NULL;
}

const pf_dataset *pf_session_train_set(const pf_session *s) {
    return &s->train;
}

const pf_job_spec *pf_session_spec(const pf_session *s) {
    return &s->spec;
}

const pf_backend *pf_session_backend(const pf_session *s) {
    return s->be;
}
