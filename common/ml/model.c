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
 * scatter-add of TensorFlow's IndexedSlices summed into a dense gradient. A dlrm model runs
 * its bottom MLP after the lookups and crosses its output with the features' vectors into
 * `top`, dense_0's input (dlrm_forward); backward sends dense_0's input gradient through the
 * dot products (d(u . v) = v du + u dv) to the tables and down the bottom MLP
 * (dlrm_backward), all in host memory.
 */
#include "psflow/model.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "psflow/dyn_table.h"
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
    int looked_w;  /* floats of a row of `looked`: the features' vectors, numeric inputs */
    float *looked; /* [max_batch, looked_w] */
    float *scale;  /* [max_batch, n_emb] */
    float *logits; /* host [max_batch, 2] for the scores of a two-class model */
    /* wide & deep (model.wide, host memory): a table row is [dim | wide_k weights]; the
     * weights of the ids an example names, combined, go to wide [max_batch, wide_k] and are
     * added to the logits; d_wide keeps the logits' gradient for them */
    int wide_k;
    int row_w[PF_MAX_EMBEDDINGS]; /* floats per table row */
    float *wide, *d_wide, *wacc;  /* wacc [wide_k]: one feature's sum in look_up */
    /* dlrm (host memory): the bottom MLP's layers over the numeric inputs (the last
     * looked_w - n_emb * dim columns of `looked`), its output crossed with the features'
     * vectors into `top` [max_batch, in[0]], the input of dense_0; the gradients that come
     * back from dense_0 go to d_looked (the features' part) and d_bot (the bottom's) */
    int n_bot;
    int bin[PF_MAX_HIDDEN], bout[PF_MAX_HIDDEN];
    size_t bkernel_off[PF_MAX_HIDDEN], bbias_off[PF_MAX_HIDDEN];
    float *bact[PF_MAX_HIDDEN];
    float *top, *d_looked, *d_bot[2];
    /* pf_model_keep_grads_sparse: the rows of the tables' gradient the last scatter wrote
     * (offset, floats) in the buffer dirty_grads, zeroed by the next instead of the whole
     * tables, so that a step costs O(batch) whatever the vocabulary. */
    bool sparse_grads;
    struct dirty_row {
        size_t off;
        int w;
    } * dirty;
    size_t n_dirty, cap_dirty;
    const float *dirty_grads;
};

/* dlrm: the pairs among the bottom output and the n_emb features' vectors. */
static int dlrm_pairs(int n_emb) {
    return (n_emb + 1) * n_emb / 2;
}

bool pf_model_embeddings_valid(const pf_model_spec *spec) {
    if (spec->n_embeddings < 1 || spec->n_embeddings > PF_MAX_EMBEDDINGS)
        return false;
    for (int f = 0; f < spec->n_embeddings; f++) {
        const pf_embedding_spec *e = &spec->embeddings[f];
        bool rows_ok = e->kind == PF_TABLE_DYNAMIC
                           ? e->max_rows >= 1 && e->max_rows < PF_DYN_MAX_ROWS
                           : e->vocab >= 1 && e->vocab <= PF_MAX_VOCAB;
        if (!rows_ok || e->dim < 1 || e->dim > PF_MAX_EMBEDDING_DIM || e->max_ids < 1 ||
            e->max_ids > PF_MAX_IDS)
            return false;
    }
    return true;
}

void pf_model_pad_example(const pf_model_spec *spec, float *row) {
    for (int f = 0; f < spec->n_embeddings; f++) {
        const pf_embedding_spec *e = &spec->embeddings[f];
        int ids = e->max_ids * pf_model_id_slots(e);
        for (int i = 0; i < ids; i++)
            row[i] = -1;
        for (int i = 0; i < e->max_ids; i++)
            row[ids + i] = 0;
        row += pf_model_feature_width(e);
    }
    for (int j = 0; spec->n_embeddings > 0 && j < spec->numeric_inputs; j++)
        row[j] = 0;
}

int pf_model_dense_inputs(const pf_model_spec *spec) {
    if (spec->n_embeddings == 0)
        return spec->inputs;
    if (spec->type == PF_MODEL_DLRM) /* the bottom output, then the dot products */
        return spec->bottom[spec->n_bottom - 1] + dlrm_pairs(spec->n_embeddings);
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
        sum += pf_model_feature_width(&spec->embeddings[f]);
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

/* A dense layer's two variables "<prefix>_<l>/kernel" [in, out] and "/bias" [out] at
 * *offset, into vars[*n], vars[*n + 1]. */
static void dense_vars(const char *prefix, int l, int in, int out, pf_var_info *vars, int *n,
                       size_t *offset) {
    pf_var_info *k = &vars[(*n)++];
    snprintf(k->name, sizeof k->name, "%s_%d/kernel", prefix, l);
    k->rank = 2;
    k->shape[0] = in;
    k->shape[1] = out;
    k->offset = *offset;
    k->count = (size_t)in * (size_t)out;
    *offset += k->count;
    pf_var_info *b = &vars[(*n)++];
    snprintf(b->name, sizeof b->name, "%s_%d/bias", prefix, l);
    b->rank = 1;
    b->shape[0] = out;
    b->shape[1] = 1;
    b->offset = *offset;
    b->count = (size_t)out;
    *offset += b->count;
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
        t->shape[0] = e->kind == PF_TABLE_DYNAMIC ? 0 : e->vocab; /* dynamic: not in the vector */
        t->shape[1] = pf_model_row_width(spec, f);
        t->offset = offset;
        t->count = (size_t)t->shape[0] * (size_t)t->shape[1];
        offset += t->count;
    }
    for (int l = 0; spec->type == PF_MODEL_DLRM && l < spec->n_bottom; l++)
        dense_vars("bottom", l, l ? spec->bottom[l - 1] : spec->numeric_inputs, spec->bottom[l],
                   vars, &n, &offset);
    for (int l = 0; l < layers; l++)
        dense_vars("dense", l, dims[l], dims[l + 1], vars, &n, &offset);
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
            /* a wide & deep table's wide weights (after `deep` numbers of a row) start at 0 */
            int deep = i < spec->n_embeddings && spec->wide ? spec->embeddings[i].dim : 0;
            if (vars[i].rank == 1)
                memset(o, 0, (to - j) * sizeof *o);
            else
                for (size_t k = 0; k < to - j; k++) {
                    o[k] = (float)((2.0 * pf_rng_uniform(&rng) - 1.0) * limit);
                    if (deep && (j + k - lo) % (size_t)vars[i].shape[1] >= (size_t)deep)
                        o[k] = 0;
                }
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
    for (int l = 0; spec->type == PF_MODEL_DLRM && l < spec->n_bottom; l++)
        macs += (double)(l ? spec->bottom[l - 1] : spec->numeric_inputs) * spec->bottom[l];
    if (spec->type == PF_MODEL_DLRM)
        macs += (double)dlrm_pairs(spec->n_embeddings) * spec->bottom[spec->n_bottom - 1];
    return 6.0 * macs;
}

pf_status pf_model_create(const pf_model_spec *spec, const pf_backend *be, int max_batch,
                          pf_model **out) {
    *out = NULL;
    if (max_batch < 1)
        return PF_ERR_INVALID;
    if (pf_model_has_dynamic(spec))
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
    m->n_bot = spec->type == PF_MODEL_DLRM ? spec->n_bottom : 0;
    m->looked_w = spec->numeric_inputs;
    for (int f = 0; f < m->n_emb; f++)
        m->looked_w += spec->embeddings[f].dim;
    int widest_bot = 0;
    for (int l = 0; l < m->n_bot; l++) {
        m->bin[l] = l ? spec->bottom[l - 1] : spec->numeric_inputs;
        m->bout[l] = spec->bottom[l];
        m->bkernel_off[l] = vars[m->n_emb + 2 * l].offset;
        m->bbias_off[l] = vars[m->n_emb + 2 * l + 1].offset;
        widest_bot = m->bout[l] > widest_bot ? m->bout[l] : widest_bot;
        widest_bot = m->bin[l] > widest_bot ? m->bin[l] : widest_bot;
    }
    m->wide_k = spec->wide ? spec->outputs : 0;
    for (int f = 0, slot_col = 0, col = 0; f < m->n_emb; f++) {
        m->table_off[f] = vars[f].offset;
        m->row_w[f] = pf_model_row_width(spec, f);
        m->slot_col[f] = slot_col;
        m->col[f] = col;
        slot_col += 2 * spec->embeddings[f].max_ids;
        col += spec->embeddings[f].dim;
        m->tables = vars[f].offset + vars[f].count;
    }
    for (int l = 0; l < m->n_layers; l++) {
        m->in[l] = dims[l];
        m->out[l] = dims[l + 1];
        m->kernel_off[l] = vars[m->n_emb + 2 * m->n_bot + 2 * l].offset;
        m->bias_off[l] = vars[m->n_emb + 2 * m->n_bot + 2 * l + 1].offset;
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
        m->looked = be->alloc((size_t)max_batch * (size_t)m->looked_w * sizeof(float));
        m->scale = pf_calloc((size_t)max_batch * (size_t)m->n_emb, sizeof *m->scale);
        if (!m->looked || !m->scale)
            goto nomem;
        for (int f = 0; f < m->n_emb; f++)
            m->cap_dirty += (size_t)max_batch * (size_t)spec->embeddings[f].max_ids;
    }
    if (m->wide_k > 0 &&
        (!(m->wide = pf_mallocarray((size_t)max_batch * (size_t)m->wide_k, sizeof(float))) ||
         !(m->d_wide = pf_mallocarray((size_t)max_batch * (size_t)m->wide_k, sizeof(float))) ||
         !(m->wacc = pf_mallocarray((size_t)m->wide_k, sizeof(float)))))
        goto nomem;
    if (m->n_bot > 0) { /* host memory, as every model with embeddings */
        for (int l = 0; l < m->n_bot; l++)
            if (!(m->bact[l] =
                      pf_mallocarray((size_t)max_batch * (size_t)m->bout[l], sizeof(float))))
                goto nomem;
        m->top = pf_mallocarray((size_t)max_batch * (size_t)m->in[0], sizeof(float));
        m->d_looked = pf_mallocarray((size_t)max_batch * (size_t)m->looked_w, sizeof(float));
        m->d_bot[0] = pf_mallocarray((size_t)max_batch * (size_t)widest_bot, sizeof(float));
        m->d_bot[1] = pf_mallocarray((size_t)max_batch * (size_t)widest_bot, sizeof(float));
        if (!m->top || !m->d_looked || !m->d_bot[0] || !m->d_bot[1])
            goto nomem;
    }
    *out = m;
    return PF_OK;
nomem:
    pf_model_destroy(m);
    return PF_ERR_NOMEM;
}

pf_status pf_model_keep_grads_sparse(pf_model *m, const float *zeroed) {
    if (m->n_emb == 0)
        return PF_OK;
    if (!m->dirty && !(m->dirty = pf_mallocarray(m->cap_dirty, sizeof *m->dirty)))
        return PF_ERR_NOMEM;
    m->sparse_grads = true;
    m->n_dirty = 0;
    m->dirty_grads = zeroed;
    return PF_OK;
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
    for (int l = 0; l < m->n_bot; l++)
        pf_free(m->bact[l]);
    pf_free(m->top);
    pf_free(m->d_looked);
    pf_free(m->d_bot[0]);
    pf_free(m->d_bot[1]);
    pf_free(m->scale);
    pf_free(m->dirty);
    pf_free(m->logits);
    pf_free(m->wide);
    pf_free(m->d_wide);
    pf_free(m->wacc);
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
        col += pf_model_feature_width(&spec->embeddings[g]); /* ids, then the weights */
    return col;
}

#define ID_PART_MASK ((1u << PF_DYN_ID_BITS) - 1)

void pf_model_put_id(float *ids, int k, uint64_t id) {
    float *at = ids + (size_t)k * PF_DYN_ID_SLOTS;
    for (int j = 0; j < PF_DYN_ID_SLOTS; j++)
        at[j] = (float)((id >> (j * PF_DYN_ID_BITS)) & ID_PART_MASK);
}

int pf_model_get_id(const float *ids, int k, uint64_t *id) {
    const float *at = ids + (size_t)k * PF_DYN_ID_SLOTS;
    if (at[0] == -1.0f)
        return 0;
    uint64_t v = 0;
    for (int j = 0; j < PF_DYN_ID_SLOTS; j++) {
        float part = at[j];
        if (!(part >= 0 && part <= (float)ID_PART_MASK) || part != floorf(part))
            return -1;
        uint64_t bits = (uint64_t)part;
        if (j * PF_DYN_ID_BITS + PF_DYN_ID_BITS > 64 && bits >> (64 - j * PF_DYN_ID_BITS))
            return -1; /* past 64 bits */
        v |= bits << (j * PF_DYN_ID_BITS);
    }
    *id = v;
    return 1;
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
 * the example's numeric inputs as they are; with wide & deep, wide[b] = the sum over the
 * features of the rows' wide weights, combined the same way. */
static void look_up(pf_model *m, const float *params, const float *x, int batch) {
    const int numeric = m->spec.numeric_inputs, slots = m->width - numeric, wk = m->wide_k;
    if (wk > 0)
        memset(m->wide, 0, (size_t)batch * (size_t)wk * sizeof *m->wide);
    for (int b = 0; b < batch; b++) {
        if (numeric > 0)
            memcpy(m->looked + (size_t)b * (size_t)m->looked_w + (m->looked_w - numeric),
                   x + (size_t)b * (size_t)m->width + slots, (size_t)numeric * sizeof(float));
        for (int f = 0; f < m->n_emb; f++) {
            const pf_embedding_spec *e = &m->spec.embeddings[f];
            const float *ids = x + (size_t)b * (size_t)m->width + m->slot_col[f];
            const float *w = ids + e->max_ids;
            float *out = m->looked + (size_t)b * (size_t)m->looked_w + m->col[f];
            memset(out, 0, (size_t)e->dim * sizeof *out);
            float *wacc = m->wacc; /* this feature's wide weights, combined below */
            for (int c = 0; c < wk; c++)
                wacc[c] = 0;
            double sum_w = 0, sum_w2 = 0;
            bool bad = false;
            for (int k = 0; k < e->max_ids; k++) {
                int64_t r = pf_model_row_of(ids[k], e->vocab);
                bad = bad || r == -2 || !isfinite(w[k]);
                if (r < 0)
                    continue;
                const float *row = params + m->table_off[f] + (size_t)r * (size_t)m->row_w[f];
                for (int j = 0; j < e->dim; j++)
                    out[j] += w[k] * row[j];
                for (int c = 0; c < wk; c++)
                    wacc[c] += w[k] * row[e->dim + c];
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
            for (int c = 0; c < wk; c++)
                m->wide[(size_t)b * (size_t)wk + c] += bad ? NAN : (float)(wacc[c] * scale);
            m->scale[(size_t)b * (size_t)m->n_emb + f] = (float)scale;
        }
    }
}

/* Zeroes the tables' part of grads: whole, or with pf_model_keep_grads_sparse on the buffer
 * the last scatter wrote, just the rows it wrote (the rest is still zero). */
static void clear_tables(pf_model *m, float *grads) {
    if (!m->sparse_grads || grads != m->dirty_grads) {
        memset(grads, 0, m->tables * sizeof *grads);
    } else {
        for (size_t i = 0; i < m->n_dirty; i++)
            memset(grads + m->dirty[i].off, 0, (size_t)m->dirty[i].w * sizeof *grads);
    }
    m->n_dirty = 0;
    m->dirty_grads = m->sparse_grads ? grads : NULL;
}

/* The tables' gradient from d_looked [batch, looked_w] (and with wide & deep d_wide): zero,
 * then w * scale * d_looked added to each named row. */
static void scatter(pf_model *m, const float *x, const float *d_looked, int batch, float *grads) {
    clear_tables(m, grads);
    for (int b = 0; b < batch; b++) {
        for (int f = 0; f < m->n_emb; f++) {
            const pf_embedding_spec *e = &m->spec.embeddings[f];
            const float *ids = x + (size_t)b * (size_t)m->width + m->slot_col[f];
            const float *w = ids + e->max_ids;
            const float *d = d_looked + (size_t)b * (size_t)m->looked_w + m->col[f];
            float scale = m->scale[(size_t)b * (size_t)m->n_emb + f];
            const float *dw = m->wide_k ? m->d_wide + (size_t)b * (size_t)m->wide_k : NULL;
            for (int k = 0; k < e->max_ids; k++) {
                int64_t r = pf_model_row_of(ids[k], e->vocab);
                if (r < 0)
                    continue;
                float c = w[k] * scale;
                size_t off = m->table_off[f] + (size_t)r * (size_t)m->row_w[f];
                float *g = grads + off;
                if (m->sparse_grads && m->n_dirty < m->cap_dirty)
                    m->dirty[m->n_dirty++] = (struct dirty_row){off, m->row_w[f]};
                else
                    m->dirty_grads = NULL; /* untracked: the next step zeroes them whole */
                for (int j = 0; j < e->dim; j++)
                    g[j] += c * d[j];
                for (int j = 0; j < m->wide_k; j++) /* the wide weights: the logits' gradient */
                    g[e->dim + j] += c * dw[j];
            }
        }
    }
}

/* dlrm: vector i of example b among those crossed: 0 the bottom output, f + 1 feature f's. */
static const float *dlrm_vec(const pf_model *m, int b, int i, int d) {
    return i == 0 ? m->bact[m->n_bot - 1] + (size_t)b * (size_t)d
                  : m->looked + (size_t)b * (size_t)m->looked_w + m->col[i - 1];
}

/* dlrm, after look_up: the bottom MLP over the numeric inputs (every layer activated), then
 * top [b] = bottom output, then the dot product of every pair (i < j) of the crossed vectors. */
static void dlrm_forward(pf_model *m, const float *params, int batch) {
    const pf_backend *be = m->be;
    const float *a = m->looked + (m->looked_w - m->spec.numeric_inputs);
    int lda = m->looked_w;
    for (int l = 0; l < m->n_bot; l++) {
        be->gemm(false, false, batch, m->bout[l], m->bin[l], 1.0f, a, lda,
                 params + m->bkernel_off[l], m->bout[l], 0.0f, m->bact[l], m->bout[l]);
        be->bias_add(batch, m->bout[l], params + m->bbias_off[l], m->bact[l]);
        if (m->spec.activation != PF_ACT_NONE)
            be->activation(m->spec.activation, (size_t)batch * (size_t)m->bout[l], m->bact[l],
                           m->bact[l]);
        a = m->bact[l];
        lda = m->bout[l];
    }
    const int d = m->bout[m->n_bot - 1];
    for (int b = 0; b < batch; b++) {
        float *t = m->top + (size_t)b * (size_t)m->in[0];
        memcpy(t, dlrm_vec(m, b, 0, d), (size_t)d * sizeof *t);
        int k = d;
        for (int i = 0; i <= m->n_emb; i++)
            for (int j = i + 1; j <= m->n_emb; j++) {
                const float *u = dlrm_vec(m, b, i, d), *v = dlrm_vec(m, b, j, d);
                float dot = 0;
                for (int c = 0; c < d; c++)
                    dot += u[c] * v[c];
                t[k++] = dot;
            }
    }
}

/* dlrm, from d_top [batch, in[0]] (the gradient of dense_0's input): the crossed vectors'
 * gradients (d(u . v) = v du + u dv), the tables' (scatter) and the bottom MLP's. */
static void dlrm_backward(pf_model *m, const float *params, const float *x, const float *d_top,
                          int batch, float *grads) {
    const pf_backend *be = m->be;
    const int d = m->bout[m->n_bot - 1];
    memset(m->d_looked, 0, (size_t)batch * (size_t)m->looked_w * sizeof(float));
    for (int b = 0; b < batch; b++) {
        const float *g = d_top + (size_t)b * (size_t)m->in[0];
        float *d0 = m->d_bot[0] + (size_t)b * (size_t)d;
        memcpy(d0, g, (size_t)d * sizeof *d0);
        int k = d;
        for (int i = 0; i <= m->n_emb; i++)
            for (int j = i + 1; j <= m->n_emb; j++) {
                float gk = g[k++];
                const float *u = dlrm_vec(m, b, i, d), *v = dlrm_vec(m, b, j, d);
                float *du = i ? m->d_looked + (size_t)b * (size_t)m->looked_w + m->col[i - 1] : d0;
                float *dv = m->d_looked + (size_t)b * (size_t)m->looked_w + m->col[j - 1];
                for (int c = 0; c < d; c++) {
                    du[c] += gk * v[c];
                    dv[c] += gk * u[c];
                }
            }
    }
    scatter(m, x, m->d_looked, batch, grads);
    float *delta = m->d_bot[0];
    for (int l = m->n_bot - 1; l >= 0; l--) {
        be->activation_grad(m->spec.activation, (size_t)batch * (size_t)m->bout[l], m->bact[l],
                            delta, delta);
        const float *a_in =
            l > 0 ? m->bact[l - 1] : m->looked + (m->looked_w - m->spec.numeric_inputs);
        int lda = l > 0 ? m->bin[l] : m->looked_w;
        be->gemm(true, false, m->bin[l], m->bout[l], batch, 1.0f, a_in, lda, delta, m->bout[l],
                 0.0f, grads + m->bkernel_off[l], m->bout[l]);
        be->bias_grad(batch, m->bout[l], delta, grads + m->bbias_off[l]);
        if (l == 0)
            break;
        float *next = m->d_bot[(m->n_bot - l) & 1];
        be->gemm(false, true, batch, m->bin[l], m->bout[l], 1.0f, delta, m->bout[l],
                 params + m->bkernel_off[l], m->bout[l], 0.0f, next, m->bin[l]);
        delta = next;
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
    if (m->n_bot > 0) {
        dlrm_forward(m, params, batch);
        a = m->top;
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
    if (m->wide_k > 0) /* host memory: the wide part's logits beside the deep part's */
        for (size_t i = 0; i < (size_t)batch * (size_t)m->wide_k; i++)
            m->act[m->n_layers - 1][i] += m->wide[i];
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
    if (m->wide_k > 0) /* the wide weights' gradient is the logits' (scatter) */
        memcpy(m->d_wide, delta, (size_t)batch * (size_t)m->wide_k * sizeof *delta);

    for (int l = last; l >= 0; l--) {
        const float *a_in = l > 0          ? m->act[l - 1]
                            : m->n_bot > 0 ? m->top
                            : m->n_emb > 0 ? m->looked
                                           : x;
        be->gemm(true, false, m->in[l], m->out[l], batch, 1.0f, a_in, m->in[l], delta, m->out[l],
                 0.0f, grads + m->kernel_off[l], m->out[l]);
        be->bias_grad(batch, m->out[l], delta, grads + m->bias_off[l]);
        if (l == 0 && m->n_emb == 0)
            break;
        float *next = m->delta[(last - l + 1) & 1];
        be->gemm(false, true, batch, m->in[l], m->out[l], 1.0f, delta, m->out[l],
                 params + m->kernel_off[l], m->out[l], 0.0f, next, m->in[l]);
        if (l == 0) {
            if (m->n_bot > 0)
                dlrm_backward(m, params, x, next, batch, grads);
            else
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

void pf_model_predict(pf_model *m, const float *params, const float *x, int batch, float *out) {
    const float *y = forward(m, params, x, batch);
    int cols = m->out[m->n_layers - 1];
    m->be->download(out, y, (size_t)batch * (size_t)cols);
    if (m->spec.type == PF_MODEL_LINEAR)
        return;
    for (int b = 0; b < batch; b++) { /* softmax, in double, of each example's logits */
        float *row = out + (size_t)b * (size_t)cols;
        double top = row[0], sum = 0;
        for (int c = 1; c < cols; c++)
            top = row[c] > top ? row[c] : top;
        for (int c = 0; c < cols; c++)
            sum += exp((double)row[c] - top);
        for (int c = 0; c < cols; c++)
            row[c] = (float)(exp((double)row[c] - top) / sum);
    }
}
