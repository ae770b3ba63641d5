/* test_model_dlrm.c - the DLRM-style model (model.h, model.type "dlrm"): its layout (tables,
 * bottom_<l>, dense_<l> with the dot products' width), and its loss and every parameter's
 * gradient against a double-precision forward pass written here, differentiated by central
 * differences, on both host backends; an empty feature and padding included.
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
#define D           2 /* every embedding's dim and the bottom output's */
#define NUM         3 /* numeric inputs */
#define WIDTH       (2 * 1 + 2 * 2 + 2 * 1 + NUM)
#define B           4

/* Three features ("a" vocab 5 sum, "b" vocab 4 mean with 2 ids, "c" vocab 3), 3 numeric
 * inputs into a bottom MLP 3-4-2, dot products of the 4 vectors (6), a top MLP 8-5-2; tanh. */
static pf_model_spec dlrm_spec(void) {
    pf_model_spec s = {.type = PF_MODEL_DLRM,
                       .outputs = 2,
                       .n_hidden = 1,
                       .hidden = {5},
                       .n_bottom = 2,
                       .bottom = {4, D},
                       .activation = PF_ACT_TANH,
                       .n_embeddings = 3,
                       .numeric_inputs = NUM};
    s.embeddings[0] = (pf_embedding_spec){
        .name = "a", .vocab = 5, .dim = D, .combiner = PF_COMBINE_SUM, .max_ids = 1, .hash = false};
    s.embeddings[1] = (pf_embedding_spec){.name = "b",
                                          .vocab = 4,
                                          .dim = D,
                                          .combiner = PF_COMBINE_MEAN,
                                          .max_ids = 2,
                                          .hash = false};
    s.embeddings[2] = (pf_embedding_spec){
        .name = "c", .vocab = 3, .dim = D, .combiner = PF_COMBINE_SUM, .max_ids = 1, .hash = false};
    return s;
}

static void test_layout(void **state) {
    (void)state;
    pf_model_spec s = dlrm_spec();
    pf_var_info v[PF_MAX_VARS];
    int n = pf_model_layout(&s, v);
    assert_int_equal(n, 3 + 4 + 4);
    assert_string_equal(v[3].name, "bottom_0/kernel");
    assert_int_equal(v[3].shape[0], NUM);
    assert_int_equal(v[3].shape[1], 4);
    assert_string_equal(v[5].name, "bottom_1/kernel");
    assert_int_equal(v[5].shape[1], D);
    assert_string_equal(v[7].name, "dense_0/kernel");
    assert_int_equal(v[7].shape[0], D + 6); /* the bottom output, then 4 * 3 / 2 dots */
    assert_int_equal(pf_model_dense_inputs(&s), D + 6);
    assert_int_equal(pf_model_input_width(&s), WIDTH);
    assert_int_equal(pf_model_num_params(&s), v[n - 1].offset + v[n - 1].count);
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

/* Mean softmax cross-entropy of dlrm_spec() in double. */
static double ref_loss(const pf_model_spec *s, const double *p, const float *x, const int *y) {
    pf_var_info v[PF_MAX_VARS];
    pf_model_layout(s, v);
    double total = 0;
    for (int b = 0; b < B; b++) {
        const float *row = x + b * WIDTH;
        double vec[4][D] = {{0}}; /* bottom output, then the features' vectors */
        int slot = 0;
        for (int f = 0; f < 3; f++) {
            const pf_embedding_spec *e = &s->embeddings[f];
            double sw = 0;
            for (int k = 0; k < e->max_ids; k++) {
                float id = row[slot + k], w = row[slot + e->max_ids + k];
                if (id < 0)
                    continue;
                for (int c = 0; c < D; c++)
                    vec[f + 1][c] += w * p[v[f].offset + (size_t)id * D + c];
                sw += w;
            }
            if (e->combiner == PF_COMBINE_MEAN)
                for (int c = 0; c < D; c++)
                    vec[f + 1][c] *= sw != 0 ? 1 / sw : 0;
            slot += 2 * e->max_ids;
        }
        double num[NUM], h[4], top[D + 6], hid[5], logit[2];
        for (int i = 0; i < NUM; i++)
            num[i] = row[slot + i];
        dense(v, 3, p, num, NUM, h, 1);
        dense(v, 5, p, h, 4, vec[0], 1);
        memcpy(top, vec[0], sizeof vec[0]);
        int k = D;
        for (int i = 0; i < 4; i++)
            for (int j = i + 1; j < 4; j++) {
                top[k] = 0;
                for (int c = 0; c < D; c++)
                    top[k] += vec[i][c] * vec[j][c];
                k++;
            }
        dense(v, 7, p, top, D + 6, hid, 1);
        dense(v, 9, p, hid, 5, logit, 0);
        double mx = fmax(logit[0], logit[1]);
        total += -(logit[y[b]] - mx - log(exp(logit[0] - mx) + exp(logit[1] - mx)));
    }
    return total / B;
}

static void test_gradcheck(void **state) {
    (void)state;
    const pf_backend *backends[] = {pf_backend_reference(), pf_backend_openblas()};
    pf_model_spec s = dlrm_spec();
    /* a: id, w; b: 2 ids, 2 weights (-1 pads); c: id, w; then 3 numbers. Example 1 has no c
     * and zero numbers, example 3 names b's row 2 twice. */
    const float x[B][WIDTH] = {
        {4, 1, 0, 2, 1, 1, 2, 1, 0.5f, -1.5f, 2},
        {1, 0.5f, 2, -1, 1, 0, -1, 0, 0, 0, 0},
        {0, 2, 0, -1, 0.25f, 0, 1, 1, 1.25f, 0.75f, -2},
        {3, 1, 2, 2, 1, -0.5f, 0, -1, 2.5f, 1, 1},
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
        for (size_t i = 0; i < np; i++) { /* non-zero biases, and tables of some size */
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
        /* rows no example names: a's 2, b's 1 and 3: zero gradient */
        for (int c = 0; c < D; c++)
            assert_true(gf[2 * D + c] == 0 && gf[10 + 1 * D + c] == 0 && gf[10 + 3 * D + c] == 0);
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
