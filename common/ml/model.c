/* model.c - dense-layer models over a flat parameter vector (see model.h).
 *
 * DESIGN: a model is L dense layers. Forward keeps every layer's output (post-activation)
 * in act[l + 1], because the backward pass needs a_l for the kernel gradient and the
 * activation derivative is written in terms of the layer's output. The loss gradient
 * (already divided by the batch size) starts in one of two ping-pong delta buffers and
 * travels down: for layer l,
 *     dK_l = a_l^T . delta_l        [in, out]
 *     db_l = sum_rows(delta_l)      [out]
 *     delta_{l-1} = (delta_l . K_l^T) * act'(a_l)   (for l = 0 only with embeddings)
 * All buffers are backend memory; this file never dereferences them, except the lookups of
 * a model with embeddings (host memory, checked at create): forward combines each
 * example's rows into `looked` [batch, dense inputs], the input of dense_0, keeping each
 * (example, feature) scale (1, 1/sum w, 1/sqrt(sum w^2)); backward zeroes the tables'
 * gradient and adds w * scale * (delta_0 . K_0^T) to each row an example named, the
 * scatter-add of TensorFlow's IndexedSlices summed into a dense gradient.
 */
#include "psflow/model.h"

#include <math.h>
#include <stdlib.h>
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
    /* Embeddings: tables at params[table_off[f]], [vocab, dim]; example slots of feature f
     * from column slot_col[f] of x; its combined row at column col[f] of `looked`. */
    int n_emb;
    int width; /* floats per example of x */
    size_t table_off[PF_MAX_EMBEDDINGS];
    int slot_col[PF_MAX_EMBEDDINGS];
    int col[PF_MAX_EMBEDDINGS];
    size_t tables; /* floats of all tables: params[0 .. tables) */
    float *looked; /* [max_batch, in[0]] */
    float *scale;  /* [max_batch, n_emb] */
    float *logits; /* host [max_batch, 2] for the scores of a two-class model */
};

bool pf_model_embeddings_valid(const pf_model_spec *spec) {
    if (spec->n_embeddings < 1 || spec->n_embeddings > PF_MAX_EMBEDDINGS)
        return false;
    for (int f = 0; f < spec->n_embeddings; f++) {
        const pf_embedding_spec *e = &spec->embeddings[f];
        if (e->vocab < 1 || e->vocab > PF_MAX_VOCAB || e->dim < 1 ||
            e->dim > PF_MAX_EMBEDDING_DIM || e->max_ids < 1 || e->max_ids > PF_MAX_IDS)
            return false;
    }
    return true;
}

void pf_model_pad_example(const pf_model_spec *spec, float *row) {
    for (int f = 0; f < spec->n_embeddings; f++) {
        int max = spec->embeddings[f].max_ids;
        for (int i = 0; i < max; i++) {
            row[i] = -1;
            row[max + i] = 0;
        }
        row += 2 * max;
    }
    for (int j = 0; spec->n_embeddings > 0 && j < spec->numeric_inputs; j++)
        row[j] = 0;
}

int pf_model_dense_inputs(const pf_model_spec *spec) {
    if (spec->n_embeddings == 0)
        return spec->inputs;
    int sum = spec->numeric_inputs;
    for (int f = 0; f < spec->n_embeddings; f++)
        sum += spec->embeddings[f].dim;
    return sum;
}

int pf_model_input_width(const pf_model_spec *spec) {
    if (spec->n_embeddings == 0)
        return spec->inputs;
    int sum = spec->numeric_inputs;
    for (int f = 0; f < spec->n_embeddings; f++)
        sum += 2 * spec->embeddings[f].max_ids;
    return sum;
}

/* Layer widths: layer l maps dims[l] -> dims[l + 1]. Returns the number of layers. */
static int layer_dims(const pf_model_spec *spec, int dims[PF_MAX_LAYERS + 1]) {
    int n = 0;
    dims[n++] = pf_model_dense_inputs(spec);
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
    for (int f = 0; f < spec->n_embeddings; f++) {
        const pf_embedding_spec *e = &spec->embeddings[f];
        pf_var_info *t = &vars[n++];
        snprintf(t->name, sizeof t->name, "%.*s/embeddings", PF_EMBEDDING_NAME_MAX, e->name);
        t->rank = 2;
        t->shape[0] = e->vocab;
        t->shape[1] = e->dim;
        t->offset = offset;
        t->count = (size_t)e->vocab * (size_t)e->dim;
        offset += t->count;
    }
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
        /* Glorot-uniform: U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)); tables
         * U(-sqrt(3 / dim), sqrt(3 / dim)); biases start at zero and draw nothing. Every
         * element of a kernel or table draws, kept or not, so each range gets the values it
         * has in the whole vector. */
        double limit = vars[i].rank == 1 ? 0
                       : i < spec->n_embeddings
                           ? sqrt(3.0 / (double)vars[i].shape[1])
                           : sqrt(6.0 / (double)(vars[i].shape[0] + vars[i].shape[1]));
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
    if (spec->n_embeddings > 0 && !be->host_memory)
        return PF_ERR_UNSUPPORTED;
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
    m->n_emb = spec->n_embeddings;
    m->width = pf_model_input_width(spec);
    for (int f = 0, slot_col = 0, col = 0; f < m->n_emb; f++) {
        m->table_off[f] = vars[f].offset;
        m->slot_col[f] = slot_col;
        m->col[f] = col;
        slot_col += 2 * spec->embeddings[f].max_ids;
        col += spec->embeddings[f].dim;
        m->tables = vars[f].offset + vars[f].count;
    }
    for (int l = 0; l < m->n_layers; l++) {
        m->in[l] = dims[l];
        m->out[l] = dims[l + 1];
        m->kernel_off[l] = vars[m->n_emb + 2 * l].offset;
        m->bias_off[l] = vars[m->n_emb + 2 * l + 1].offset;
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
    if (pf_model_two_class(spec) &&
        !(m->logits = pf_mallocarray((size_t)max_batch * 2, sizeof(float))))
        goto nomem;
    if (m->n_emb > 0) {
        m->looked = be->alloc((size_t)max_batch * (size_t)m->in[0] * sizeof(float));
        m->scale = pf_calloc((size_t)max_batch * (size_t)m->n_emb, sizeof *m->scale);
        if (!m->looked || !m->scale)
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
    if (m->looked)
        m->be->free(m->looked);
    pf_free(m->scale);
    pf_free(m->logits);
    pf_free(m);
}

const pf_backend *pf_model_backend(const pf_model *m) {
    return m->be;
}

int64_t pf_model_row_of(float id, int64_t vocab) {
    if (id == -1.0f)
        return -1;
    if (!(id >= 0 && id < (float)vocab) || id != floorf(id))
        return -2;
    return (int64_t)id;
}

int pf_model_id_col(const pf_model_spec *spec, int f) {
    int col = 0;
    for (int g = 0; g < f; g++)
        col += 2 * spec->embeddings[g].max_ids; /* ids, then as many weights */
    return col;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

uint32_t pf_model_batch_rows(const pf_model_spec *spec, int f, const float *x, int count,
                             uint32_t *rows) {
    const pf_embedding_spec *e = &spec->embeddings[f];
    const size_t width = (size_t)pf_model_input_width(spec);
    const float *ids = x + pf_model_id_col(spec, f);
    uint32_t n = 0;
    for (int b = 0; b < count; b++)
        for (int k = 0; k < e->max_ids; k++) {
            int64_t row = pf_model_row_of(ids[(size_t)b * width + (size_t)k], e->vocab);
            if (row >= 0)
                rows[n++] = (uint32_t)row;
        }
    qsort(rows, n, sizeof *rows, cmp_u32);
    uint32_t u = 0;
    for (uint32_t i = 0; i < n; i++)
        if (u == 0 || rows[i] != rows[u - 1])
            rows[u++] = rows[i];
    return u;
}

/* looked[b, col[f] ..] = scale * sum_k w_k table_f[id_k] for every example and feature, then
 * the example's numeric inputs as they are. */
static void look_up(pf_model *m, const float *params, const float *x, int batch) {
    const int numeric = m->spec.numeric_inputs, slots = m->width - numeric;
    for (int b = 0; b < batch; b++) {
        if (numeric > 0)
            memcpy(m->looked + (size_t)b * (size_t)m->in[0] + (m->in[0] - numeric),
                   x + (size_t)b * (size_t)m->width + slots, (size_t)numeric * sizeof(float));
        for (int f = 0; f < m->n_emb; f++) {
            const pf_embedding_spec *e = &m->spec.embeddings[f];
            const float *ids = x + (size_t)b * (size_t)m->width + m->slot_col[f];
            const float *w = ids + e->max_ids;
            float *out = m->looked + (size_t)b * (size_t)m->in[0] + m->col[f];
            memset(out, 0, (size_t)e->dim * sizeof *out);
            double sum_w = 0, sum_w2 = 0;
            bool bad = false;
            for (int k = 0; k < e->max_ids; k++) {
                int64_t r = pf_model_row_of(ids[k], e->vocab);
                bad = bad || r == -2 || !isfinite(w[k]);
                if (r < 0)
                    continue;
                const float *row = params + m->table_off[f] + (size_t)r * (size_t)e->dim;
                for (int j = 0; j < e->dim; j++)
                    out[j] += w[k] * row[j];
                sum_w += w[k];
                sum_w2 += (double)w[k] * w[k];
            }
            double scale = 1;
            if (e->combiner == PF_COMBINE_MEAN)
                scale = sum_w != 0 ? 1 / sum_w : 0;
            else if (e->combiner == PF_COMBINE_SQRTN)
                scale = sum_w2 > 0 ? 1 / sqrt(sum_w2) : 0;
            for (int j = 0; j < e->dim; j++)
                out[j] = bad ? NAN : (float)(out[j] * scale);
            m->scale[(size_t)b * (size_t)m->n_emb + f] = (float)scale;
        }
    }
}

/* The tables' gradient from d_looked [batch, in[0]]: zero, then w * scale * d_looked added
 * to each named row. */
static void scatter(pf_model *m, const float *x, const float *d_looked, int batch, float *grads) {
    memset(grads, 0, m->tables * sizeof *grads);
    for (int b = 0; b < batch; b++) {
        for (int f = 0; f < m->n_emb; f++) {
            const pf_embedding_spec *e = &m->spec.embeddings[f];
            const float *ids = x + (size_t)b * (size_t)m->width + m->slot_col[f];
            const float *w = ids + e->max_ids;
            const float *d = d_looked + (size_t)b * (size_t)m->in[0] + m->col[f];
            float scale = m->scale[(size_t)b * (size_t)m->n_emb + f];
            for (int k = 0; k < e->max_ids; k++) {
                int64_t r = pf_model_row_of(ids[k], e->vocab);
                if (r < 0)
                    continue;
                float c = w[k] * scale;
                float *g = grads + m->table_off[f] + (size_t)r * (size_t)e->dim;
                for (int j = 0; j < e->dim; j++)
                    g[j] += c * d[j];
            }
        }
    }
}

/* Runs the layers on x [batch, width]; returns the last layer's output (the logits or
 * predictions, [batch, outputs]). */
static const float *forward(pf_model *m, const float *params, const float *x, int batch) {
    const pf_backend *be = m->be;
    const float *a = x;
    if (m->n_emb > 0) {
        look_up(m, params, x, batch);
        a = m->looked;
    }
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
        const float *a_in = l > 0 ? m->act[l - 1] : m->n_emb > 0 ? m->looked : x;
        be->gemm(true, false, m->in[l], m->out[l], batch, 1.0f, a_in, m->in[l], delta, m->out[l],
                 0.0f, grads + m->kernel_off[l], m->out[l]);
        be->bias_grad(batch, m->out[l], delta, grads + m->bias_off[l]);
        if (l == 0 && m->n_emb == 0)
            break;
        float *next = m->delta[(last - l + 1) & 1];
        be->gemm(false, true, batch, m->in[l], m->out[l], 1.0f, delta, m->out[l],
                 params + m->kernel_off[l], m->out[l], 0.0f, next, m->in[l]);
        if (l == 0) {
            scatter(m, x, next, batch, grads);
            break;
        }
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
        if (acc->scores && m->logits) {
            be->download(m->logits, out, (size_t)batch * 2);
            for (int b = 0; b < batch; b++)
                acc->scores[acc->examples + b] = m->logits[2 * b + 1] - m->logits[2 * b];
        }
    }
    acc->examples += batch;
}
