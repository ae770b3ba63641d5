/* model.c - dense-layer models over a flat parameter vector (see model.h).
 *
 * DESIGN: a model is L dense layers. Forward keeps every layer's output (post-activation)
 * in act[l + 1], because the backward pass needs a_l for the kernel gradient and the
 * activation derivative is written in terms of the layer's output. The loss gradient
 * (already divided by the batch size) starts in one of two ping-pong delta buffers and
 * travels down: for layer l,
 *     dK_l = a_l^T . delta_l        [in, out]
 *     db_l = sum_rows(delta_l)      [out]
 *     delta_{l-1} = (delta_l . K_l^T) * act'(a_l)   (skipped for l = 0: no input gradient)
 * All buffers are backend memory; this file never dereferences them.
 */
#include "psflow/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/rng.h"

struct pf_model {
    pf_model_spec spec;
    const pf_backend *be;
    int max_batch;
    int n_layers;
    int in[PF_MAX_LAYERS];
    int out[PF_MAX_LAYERS];
    size_t kernel_off[PF_MAX_LAYERS];
    size_t bias_off[PF_MAX_LAYERS];
    float *act[PF_MAX_LAYERS]; /* act[l]: output of layer l, [max_batch, out[l]] */
    float *delta[2];           /* [max_batch, widest layer] each */
};

/* Layer widths: layer l maps dims[l] -> dims[l + 1]. Returns the number of layers. */
static int layer_dims(const pf_model_spec *spec, int dims[PF_MAX_LAYERS + 1]) {
    int n = 0;
    dims[n++] = spec->inputs;
    for (int i = 0; i < spec->n_hidden; i++)
        dims[n++] = spec->hidden[i];
    dims[n++] = spec->outputs;
    return n - 1;
}

int pf_model_layout(const pf_model_spec *spec, pf_var_info vars[PF_MAX_VARS]) {
    int dims[PF_MAX_LAYERS + 1];
    int layers = layer_dims(spec, dims);
    size_t offset = 0;
    int n = 0;
    for (int l = 0; l < layers; l++) {
        pf_var_info *k = &vars[n++];
        snprintf(k->name, sizeof k->name, "dense_%d/kernel", l);
        k->rank = 2;
        k->shape[0] = dims[l];
        k->shape[1] = dims[l + 1];
        k->offset = offset;
        k->count = (size_t)dims[l] * (size_t)dims[l + 1];
        offset += k->count;

        pf_var_info *b = &vars[n++];
        snprintf(b->name, sizeof b->name, "dense_%d/bias", l);
        b->rank = 1;
        b->shape[0] = dims[l + 1];
        b->shape[1] = 1;
        b->offset = offset;
        b->count = (size_t)dims[l + 1];
        offset += b->count;
    }
    return n;
}

size_t pf_first_nonfinite(const float *x, size_t n) {
    /* Blocks without an early exit, so the compiler vectorises the test (a float is NaN or
     * infinite when its exponent bits are all ones); the first bad block is searched. The
     * gradient of every step goes through here. */
    enum { BLOCK = 1024 };
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t m = n - b < BLOCK ? n - b : BLOCK;
        uint32_t bad = 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t u;
            memcpy(&u, &x[b + i], sizeof u);
            bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        }
        if (bad)
            for (size_t i = b; i < b + m; i++)
                if (!isfinite(x[i]))
                    return i;
    }
    return n;
}

int pf_model_var_at(const pf_model_spec *spec, size_t i, pf_var_info *out) {
    pf_var_info vars[PF_MAX_VARS];
    int n = pf_model_layout(spec, vars);
    for (int v = 0; v < n; v++)
        if (i >= vars[v].offset && i - vars[v].offset < vars[v].count) {
            *out = vars[v];
            return v;
        }
    return -1;
}

size_t pf_model_num_params(const pf_model_spec *spec) {
    pf_var_info vars[PF_MAX_VARS];
    int n = pf_model_layout(spec, vars);
    return vars[n - 1].offset + vars[n - 1].count;
}

void pf_model_init_ranges(const pf_model_spec *spec, uint64_t seed, int n_ranges,
                          const size_t *offsets, const size_t *counts, float *const *outs) {
    pf_var_info vars[PF_MAX_VARS];
    int n = pf_model_layout(spec, vars);
    pf_rng rng;
    pf_rng_init(&rng, seed, 0);
    int r = 0;
    for (int i = 0; i < n && r < n_ranges; i++) {
        size_t lo = vars[i].offset, hi = vars[i].offset + vars[i].count;
        /* Glorot-uniform: U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)); biases
         * start at zero and draw nothing. Every element of a kernel draws, kept or not,
         * so each range gets the values it has in the whole vector. */
        double limit =
            vars[i].rank == 1 ? 0 : sqrt(6.0 / (double)(vars[i].shape[0] + vars[i].shape[1]));
        size_t j = lo;
        while (j < hi) {
            while (r < n_ranges && offsets[r] + counts[r] <= j)
                r++;
            size_t from = r < n_ranges && offsets[r] < hi ? offsets[r] : hi;
            if (from < j)
                from = j;
            for (; vars[i].rank != 1 && j < from; j++)
                pf_rng_next(&rng); /* not held: drawn and dropped */
            j = from;
            if (j == hi)
                break;
            size_t to = offsets[r] + counts[r] < hi ? offsets[r] + counts[r] : hi;
            float *o = outs[r] + (j - offsets[r]);
            if (vars[i].rank == 1)
                memset(o, 0, (to - j) * sizeof *o);
            else
                for (size_t k = 0; k < to - j; k++)
                    o[k] = (float)((2.0 * pf_rng_uniform(&rng) - 1.0) * limit);
            j = to;
        }
    }
}

void pf_model_init_params(const pf_model_spec *spec, uint64_t seed, float *params) {
    size_t offset = 0, count = pf_model_num_params(spec);
    pf_model_init_ranges(spec, seed, 1, &offset, &count, &params);
}

double pf_model_flops_per_example(const pf_model_spec *spec) {
    int dims[PF_MAX_LAYERS + 1];
    int layers = layer_dims(spec, dims);
    double macs = 0;
    for (int l = 0; l < layers; l++)
        macs += (double)dims[l] * dims[l + 1];
    return 6.0 * macs;
}

pf_status pf_model_create(const pf_model_spec *spec, const pf_backend *be, int max_batch,
                          pf_model **out) {
    *out = NULL;
    if (max_batch < 1)
        return PF_ERR_INVALID;
    pf_model *m = pf_calloc(1, sizeof *m);
    if (!m)
        return PF_ERR_NOMEM;
    m->spec = *spec;
    m->be = be;
    m->max_batch = max_batch;

    int dims[PF_MAX_LAYERS + 1];
    m->n_layers = layer_dims(spec, dims);
    pf_var_info vars[PF_MAX_VARS];
    pf_model_layout(spec, vars);
    int widest = 0;
    for (int l = 0; l < m->n_layers; l++) {
        m->in[l] = dims[l];
        m->out[l] = dims[l + 1];
        m->kernel_off[l] = vars[2 * l].offset;
        m->bias_off[l] = vars[2 * l + 1].offset;
        if (dims[l] > widest)
            widest = dims[l];
        if (dims[l + 1] > widest)
            widest = dims[l + 1];
    }
    for (int l = 0; l < m->n_layers; l++) {
        m->act[l] = be->alloc((size_t)max_batch * (size_t)m->out[l] * sizeof(float));
        if (!m->act[l])
            goto nomem;
    }
    for (int i = 0; i < 2; i++) {
        m->delta[i] = be->alloc((size_t)max_batch * (size_t)widest * sizeof(float));
        if (!m->delta[i])
            goto nomem;
    }
    *out = m;
    return PF_OK;
nomem:
    pf_model_destroy(m);
    return PF_ERR_NOMEM;
}

void pf_model_destroy(pf_model *m) {
    if (!m)
        return;
    for (int l = 0; l < m->n_layers; l++)
        if (m->act[l])
            m->be->free(m->act[l]);
    for (int i = 0; i < 2; i++)
        if (m->delta[i])
            m->be->free(m->delta[i]);
    pf_free(m);
}

const pf_backend *pf_model_backend(const pf_model *m) {
    return m->be;
}

/* Runs the layers on x [batch, inputs]; returns the last layer's output (the logits or
 * predictions, [batch, outputs]). */
static const float *forward(pf_model *m, const float *params, const float *x, int batch) {
    const pf_backend *be = m->be;
    const float *a = x;
    for (int l = 0; l < m->n_layers; l++) {
        float *y = m->act[l];
        be->gemm(false, false, batch, m->out[l], m->in[l], 1.0f, a, m->in[l],
                 params + m->kernel_off[l], m->out[l], 0.0f, y, m->out[l]);
        be->bias_add(batch, m->out[l], params + m->bias_off[l], y);
        if (l + 1 < m->n_layers && m->spec.activation != PF_ACT_NONE)
            be->activation(m->spec.activation, (size_t)batch * (size_t)m->out[l], y, y);
        a = y;
    }
    return a;
}

float pf_model_train_step(pf_model *m, const float *params, const float *x, const float *targets,
                          const int32_t *labels, int batch, float *grads) {
    const pf_backend *be = m->be;
    const int last = m->n_layers - 1;
    const float *out = forward(m, params, x, batch);

    float *delta = m->delta[0];
    float loss;
    if (m->spec.type == PF_MODEL_LINEAR)
        loss = be->mse((size_t)batch, out, targets, delta);
    else
        loss = be->softmax_xent(batch, m->out[last], out, labels, delta);

    for (int l = last; l >= 0; l--) {
        const float *a_in = l > 0 ? m->act[l - 1] : x;
        be->gemm(true, false, m->in[l], m->out[l], batch, 1.0f, a_in, m->in[l], delta, m->out[l],
                 0.0f, grads + m->kernel_off[l], m->out[l]);
        be->bias_grad(batch, m->out[l], delta, grads + m->bias_off[l]);
        if (l == 0)
            break;
        float *next = m->delta[(last - l + 1) & 1];
        be->gemm(false, true, batch, m->in[l], m->out[l], 1.0f, delta, m->out[l],
                 params + m->kernel_off[l], m->out[l], 0.0f, next, m->in[l]);
        be->activation_grad(m->spec.activation, (size_t)batch * (size_t)m->in[l], m->act[l - 1],
                            next, next);
        delta = next;
    }
    return loss;
}

void pf_model_eval_batch(pf_model *m, const float *params, const float *x, const float *targets,
                         const int32_t *labels, int batch, pf_eval *acc) {
    const pf_backend *be = m->be;
    const float *out = forward(m, params, x, batch);
    if (m->spec.type == PF_MODEL_LINEAR) {
        acc->loss_sum += (double)be->mse((size_t)batch, out, targets, m->delta[0]) * batch;
    } else {
        int cols = m->out[m->n_layers - 1];
        acc->loss_sum += be->xent_sum(batch, cols, out, labels);
        acc->correct += be->count_correct(batch, cols, out, labels);
    }
    acc->examples += batch;
}
