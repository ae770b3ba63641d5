/* test_model_wide.c - wide & deep (model.h, model.wide on an mlp with embeddings): each table
 * row is the deep vector then one wide weight per output (starting at zero), and the model's
 * loss and every parameter's gradient match a double-precision forward pass written here (the
 * MLP over the combined vectors and numeric inputs, plus each feature's combined wide
 * weights added to the logits), differentiated by central differences, on both host
 * backends; an empty feature, padding and every combiner included.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/rng.h"

#define MAX_REL_ERR 1e-4
#define FD_STEP     1e-6
#define D           2 /* every embedding's dim */
#define K           2 /* outputs: wide weights per row */
#define NUM         3 /* numeric inputs */
#define WIDTH       (2 * 1 + 2 * 2 + 2 * 1 + NUM)
#define B           4

/* Three features ("a" vocab 5 sum, "b" vocab 4 mean with 2 ids, "c" vocab 3 sqrtn), 3 numeric
 * inputs, an MLP 9-5-2 (tanh), and the wide weights. */
static pf_model_spec wide_spec(void) {
    pf_model_spec s = {.type = PF_MODEL_MLP,
                       .outputs = K,
                       .n_hidden = 1,
                       .hidden = {5},
                       .activation = PF_ACT_TANH,
                       .n_embeddings = 3,
                       .numeric_inputs = NUM,
                       .wide = true};
    s.embeddings[0] = (pf_embedding_spec){
        .name = "a", .vocab = 5, .dim = D, .combiner = PF_COMBINE_SUM, .max_ids = 1, .hash = false};
    s.embeddings[1] = (pf_embedding_spec){.name = "b",
                                          .vocab = 4,
                                          .dim = D,
                                          .combiner = PF_COMBINE_MEAN,
                                          .max_ids = 2,
                                          .hash = false};
    s.embeddings[2] = (pf_embedding_spec){.name = "c",
                                          .vocab = 3,
                                          .dim = D,
                                          .combiner = PF_COMBINE_SQRTN,
                                          .max_ids = 1,
                                          .hash = false};
    return s;
}

static void test_layout(void **state) {
    (void)state;
    pf_model_spec s = wide_spec();
    pf_var_info v[PF_MAX_VARS];
    int n = pf_model_layout(&s, v);
    assert_int_equal(n, 3 + 4);
    assert_string_equal(v[0].name, "a/embeddings");
    assert_int_equal(v[0].shape[0], 5);
    assert_int_equal(v[0].shape[1], D + K); /* the deep vector, then the wide weights */
    assert_int_equal(pf_model_row_width(&s, 1), D + K);
    assert_string_equal(v[3].name, "dense_0/kernel");
    assert_int_equal(v[3].shape[0], 3 * D + NUM); /* the deep part alone feeds the MLP */
    assert_int_equal(pf_model_num_params(&s), v[n - 1].offset + v[n - 1].count);
    size_t np = pf_model_num_params(&s);
    float *p = pf_calloc(np, sizeof *p);
    pf_model_init_params(&s, 1, p);
    for (int f = 0; f < 3; f++)
        for (int64_t r = 0; r < v[f].shape[0]; r++) {
            const float *row = p + v[f].offset + (size_t)r * (D + K);
            assert_true(row[0] != 0 || row[1] != 0); /* drawn */
            assert_true(row[D] == 0 && row[D + 1] == 0);
        }
    pf_free(p);
    s.wide = false; /* without: rows of dim numbers */
    pf_model_layout(&s, v);
    assert_int_equal(v[0].shape[1], D);
}

/* tanh(in . K + bias) or, last, in . K + bias: layer var index kv of vars. */
static void dense(const pf_var_info *vars, int kv, const double *p, const double *in, int n_in,
                  double *out, int act) {
    int n_out = (int)vars[kv].shape[1];
    for (int j = 0; j < n_out; j++) {
        double z = p[vars[kv + 1].offset + j];
        for (int i = 0; i < n_in; i++)
            z += in[i] * p[vars[kv].offset + (size_t)i * n_out + j];
        out[j] = act ? tanh(z) : z;
    }
}

/* Mean softmax cross-entropy of wide_spec() in double. */
static double ref_loss(const pf_model_spec *s, const double *p, const float *x, const int *y) {
    pf_var_info v[PF_MAX_VARS];
    pf_model_layout(s, v);
    double total = 0;
    for (int b = 0; b < B; b++) {
        const float *row = x + b * WIDTH;
        double in[3 * D + NUM] = {0}, wide[K] = {0};
        int slot = 0;
        for (int f = 0; f < 3; f++) {
            const pf_embedding_spec *e = &s->embeddings[f];
            double sw = 0, sw2 = 0, vec[D] = {0}, wsum[K] = {0};
            for (int k = 0; k < e->max_ids; k++) {
                float id = row[slot + k], w = row[slot + e->max_ids + k];
                if (id < 0)
                    continue;
                const double *r = p + v[f].offset + (size_t)id * (D + K);
                for (int c = 0; c < D; c++)
                    vec[c] += w * r[c];
                for (int c = 0; c < K; c++)
                    wsum[c] += w * r[D + c];
                sw += w;
                sw2 += (double)w * w;
            }
            double scale = e->combiner == PF_COMBINE_MEAN    ? (sw != 0 ? 1 / sw : 0)
                           : e->combiner == PF_COMBINE_SQRTN ? (sw2 > 0 ? 1 / sqrt(sw2) : 0)
                                                             : 1;
            for (int c = 0; c < D; c++)
                in[f * D + c] = vec[c] * scale;
            for (int c = 0; c < K; c++)
                wide[c] += wsum[c] * scale;
            slot += 2 * e->max_ids;
        }
        for (int i = 0; i < NUM; i++)
            in[3 * D + i] = row[slot + i];
        double hid[5], logit[K];
        dense(v, 3, p, in, 3 * D + NUM, hid, 1);
        dense(v, 5, p, hid, 5, logit, 0);
        for (int c = 0; c < K; c++)
            logit[c] += wide[c];
        double mx = fmax(logit[0], logit[1]);
        total += -(logit[y[b]] - mx - log(exp(logit[0] - mx) + exp(logit[1] - mx)));
    }
    return total / B;
}

static void test_gradcheck(void **state) {
    (void)state;
    const pf_backend *backends[] = {pf_backend_reference(), pf_backend_openblas()};
    pf_model_spec s = wide_spec();
    /* a: id, w; b: 2 ids, 2 weights (-1 pads); c: id, w; then 3 numbers. Example 1 has no c,
     * example 3 names b's row 2 twice. */
    const float x[B][WIDTH] = {
        {4, 1, 0, 2, 1, 1, 2, 1, 0.5f, -1.5f, 2},
        {1, 0.5f, 2, -1, 1, 0, -1, 0, 0, 0, 0},
        {0, 2, 0, -1, 0.25f, 0, 1, 1.5f, 1.25f, 0.75f, -2},
        {3, 1, 2, 2, 1, -0.5f, 0, 2, 2.5f, 1, 1},
    };
    const int y[B] = {0, 1, 1, 0};
    for (size_t bi = 0; bi < 2; bi++) {
        const pf_backend *be = backends[bi];
        size_t np = pf_model_num_params(&s);
        float *pf = pf_calloc(np, sizeof *pf), *gf = pf_calloc(np, sizeof *gf);
        double *pd = pf_calloc(np, sizeof *pd);
        assert_non_null(pd);
        pf_model_init_params(&s, 3, pf);
        pf_rng rng;
        pf_rng_init(&rng, 9, 0);
        for (size_t i = 0; i < np; i++) { /* non-zero biases and wide weights */
            pf[i] += (float)(0.6 * (pf_rng_uniform(&rng) - 0.5));
            pd[i] = pf[i];
        }
        int32_t labels[B];
        for (int b = 0; b < B; b++)
            labels[b] = y[b];
        pf_model *m;
        assert_int_equal(pf_model_create(&s, be, B, &m), PF_OK);
        for (size_t i = 0; i < np; i++)
            gf[i] = NAN;
        float loss = pf_model_train_step(m, pf, &x[0][0], NULL, labels, B, gf);
        double ref = ref_loss(&s, pd, &x[0][0], y);
        assert_true(fabs(loss - ref) < 1e-5 * fmax(1, fabs(ref)));
        double diff = 0, norm = 0;
        for (size_t i = 0; i < np; i++) {
            double keep = pd[i];
            pd[i] = keep + FD_STEP;
            double up = ref_loss(&s, pd, &x[0][0], y);
            pd[i] = keep - FD_STEP;
            double down = ref_loss(&s, pd, &x[0][0], y);
            pd[i] = keep;
            double num = (up - down) / (2 * FD_STEP);
            diff += (gf[i] - num) * (gf[i] - num);
            norm += num * num;
        }
        double rel = sqrt(diff) / fmax(sqrt(norm), 1e-6);
        print_message("%s: relative gradient error %.2e over %zu parameters\n", be->name, rel, np);
        assert_true(rel < MAX_REL_ERR);
        /* a row no example names (a's 2): zero gradient, its wide weights too */
        for (int c = 0; c < D + K; c++)
            assert_true(gf[2 * (D + K) + c] == 0);
        pf_eval ev = {0};
        float scores[B];
        ev.scores = scores;
        pf_model_eval_batch(m, pf, &x[0][0], NULL, labels, B, &ev);
        assert_true(fabs(ev.loss_sum / B - ref) < 1e-5 * fmax(1, fabs(ref)));
        pf_model_destroy(m);
        pf_free(pf);
        pf_free(gf);
        pf_free(pd);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_gradcheck),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
