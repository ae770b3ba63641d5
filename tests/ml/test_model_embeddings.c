/* test_model_embeddings.c - models with embeddings (model.h): layout and initial values,
 * the three combiners against values computed by hand, gradients against central
 * differences of a double-precision forward pass written here (also with numeric inputs
 * beside the embeddings), padding and empty examples, the gradient of a model that zeroes
 * only the rows its last step wrote against one that zeroes the whole tables,
 * ids that name no row, and the host-memory rule.
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

/* Two features, "user" (vocab 5, dim 3, mean, 2 ids) and "tags" (vocab 7, dim 2, sqrtn,
 * 3 ids), into an mlp 5-4-3 with tanh. */
static pf_model_spec two_features(void) {
    pf_model_spec s = {.type = PF_MODEL_MLP,
                       .outputs = 3,
                       .n_hidden = 1,
                       .hidden = {4},
                       .activation = PF_ACT_TANH,
                       .n_embeddings = 2};
    s.embeddings[0] = (pf_embedding_spec){.name = "user",
                                          .vocab = 5,
                                          .dim = 3,
                                          .combiner = PF_COMBINE_MEAN,
                                          .max_ids = 2,
                                          .hash = false};
    s.embeddings[1] = (pf_embedding_spec){.name = "tags",
                                          .vocab = 7,
                                          .dim = 2,
                                          .combiner = PF_COMBINE_SQRTN,
                                          .max_ids = 3,
                                          .hash = false};
    return s;
}

static void test_layout(void **state) {
    (void)state;
    pf_model_spec s = two_features();
    pf_var_info vars[PF_MAX_VARS];
    int n = pf_model_layout(&s, vars);
    assert_int_equal(n, 2 + 4);
    assert_string_equal(vars[0].name, "user/embeddings");
    assert_int_equal(vars[0].shape[0], 5);
    assert_int_equal(vars[0].shape[1], 3);
    assert_int_equal(vars[0].offset, 0);
    assert_string_equal(vars[1].name, "tags/embeddings");
    assert_int_equal(vars[1].offset, 15);
    assert_int_equal(vars[1].count, 14);
    assert_string_equal(vars[2].name, "dense_0/kernel");
    assert_int_equal(vars[2].shape[0], 5); /* 3 + 2 combined inputs */
    assert_int_equal(vars[2].offset, 29);
    assert_int_equal(pf_model_dense_inputs(&s), 5);
    assert_int_equal(pf_model_input_width(&s), 2 * 2 + 2 * 3);
    assert_int_equal(pf_model_num_params(&s), 29 + 5 * 4 + 4 + 4 * 3 + 3);

    /* Tables U(-sqrt(3/dim), sqrt(3/dim)), and not all alike. */
    float *p = pf_calloc(pf_model_num_params(&s), sizeof *p);
    assert_non_null(p);
    pf_model_init_params(&s, 9, p);
    for (int v = 0; v < 2; v++) {
        double limit = sqrt(3.0 / (double)vars[v].shape[1]), lo = 1, hi = -1;
        for (size_t i = 0; i < vars[v].count; i++) {
            float x = p[vars[v].offset + i];
            assert_true(fabs(x) <= limit);
            lo = fmin(lo, x);
            hi = fmax(hi, x);
        }
        assert_true(hi - lo > limit / 2);
    }
    pf_free(p);
}

/* Softmax over 3 classes on one feature of vocab 4, dim 3, 3 ids; dense_0 is the identity
 * and its bias zero, so the logits are the combined row itself. Rows r_i = (i, -i, 0.5 i);
 * the example names ids 1 (weight 2) and 3 (weight 0.5) and one padding slot. */
static void check_combiner(pf_combiner c, double scale) {
    pf_model_spec s = {.type = PF_MODEL_SOFTMAX, .outputs = 3, .n_embeddings = 1};
    s.embeddings[0] =
        (pf_embedding_spec){.name = "f", .vocab = 4, .dim = 3, .combiner = c, .max_ids = 3};
    size_t np = pf_model_num_params(&s);
    assert_int_equal(np, 12 + 9 + 3);
    float *p = pf_calloc(np, sizeof *p), *g = pf_calloc(np, sizeof *g);
    assert_non_null(p);
    assert_non_null(g);
    for (int i = 0; i < 4; i++) {
        p[3 * i] = (float)i;
        p[3 * i + 1] = (float)-i;
        p[3 * i + 2] = 0.5f * (float)i;
    }
    for (int j = 0; j < 3; j++)
        p[12 + 3 * j + j] = 1; /* identity kernel */
    float x[6] = {1, 3, -1, 2, 0.5f, 0};
    int32_t label = 2;
    pf_model *m;
    assert_int_equal(pf_model_create(&s, pf_backend_reference(), 1, &m), PF_OK);
    float loss = pf_model_train_step(m, p, x, NULL, &label, 1, g);

    double e[3] = {scale * (2 * 1 + 0.5 * 3), scale * (2 * -1 + 0.5 * -3),
                   scale * (2 * 0.5 + 0.5 * 1.5)};
    double mx = fmax(e[0], fmax(e[1], e[2])), z = 0, sm[3];
    for (int j = 0; j < 3; j++)
        z += exp(e[j] - mx);
    for (int j = 0; j < 3; j++)
        sm[j] = exp(e[j] - mx) / z;
    assert_true(fabs(loss - -log(sm[2])) < 1e-5);
    /* d logits = softmax - onehot; row 1 gets 2 * scale of it, row 3 0.5 * scale, rows 0
     * and 2 nothing. */
    for (int j = 0; j < 3; j++) {
        double d = sm[j] - (j == 2);
        assert_true(fabs(g[0 * 3 + j]) == 0 && fabs(g[2 * 3 + j]) == 0);
        assert_true(fabs(g[1 * 3 + j] - 2 * scale * d) < 1e-6);
        assert_true(fabs(g[3 * 3 + j] - 0.5 * scale * d) < 1e-6);
        assert_true(fabs(g[12 + 3 * j + j] - e[j] * d) < 1e-5); /* the kernel's diagonal */
    }
    pf_model_destroy(m);
    pf_free(p);
    pf_free(g);
}

static void test_combiners(void **state) {
    (void)state;
    check_combiner(PF_COMBINE_SUM, 1);
    check_combiner(PF_COMBINE_MEAN, 1 / 2.5);
    check_combiner(PF_COMBINE_SQRTN, 1 / sqrt(4.25));
}

/* --- gradient check -------------------------------------------------------------------- */

/* Mean softmax cross-entropy of two_features() in double: lookups, then the dense layers. */
static double ref_loss(const pf_model_spec *s, const double *p, const float *x, const int *y,
                       int batch) {
    pf_var_info vars[PF_MAX_VARS];
    pf_model_layout(s, vars);
    int width = pf_model_input_width(s);
    double total = 0;
    for (int b = 0; b < batch; b++) {
        double a[16] = {0}, z[16];
        int col = 0, slot = 0;
        for (int f = 0; f < s->n_embeddings; f++) {
            const pf_embedding_spec *e = &s->embeddings[f];
            const float *ids = x + b * width + slot, *w = ids + e->max_ids;
            double sw = 0, sw2 = 0;
            for (int k = 0; k < e->max_ids; k++) {
                if (ids[k] < 0)
                    continue;
                for (int j = 0; j < e->dim; j++)
                    a[col + j] += w[k] * p[vars[f].offset + (size_t)ids[k] * e->dim + j];
                sw += w[k];
                sw2 += (double)w[k] * w[k];
            }
            double sc = e->combiner == PF_COMBINE_MEAN    ? (sw != 0 ? 1 / sw : 0)
                        : e->combiner == PF_COMBINE_SQRTN ? (sw2 > 0 ? 1 / sqrt(sw2) : 0)
                                                          : 1;
            for (int j = 0; j < e->dim; j++)
                a[col + j] *= sc;
            col += e->dim;
            slot += 2 * e->max_ids;
        }
        for (int j = 0; j < s->numeric_inputs; j++) /* numeric inputs as they are */
            a[col + j] = x[b * width + slot + j];
        int in = col + s->numeric_inputs;
        for (int l = 0; l < 2; l++) {
            const pf_var_info *k = &vars[s->n_embeddings + 2 * l], *bias = k + 1;
            int out = (int)k->shape[1];
            for (int j = 0; j < out; j++) {
                double v = p[bias->offset + j];
                for (int i = 0; i < in; i++)
                    v += a[i] * p[k->offset + (size_t)i * out + j];
                z[j] = l == 0 ? tanh(v) : v;
            }
            memcpy(a, z, sizeof(double) * out);
            in = out;
        }
        double mx = fmax(a[0], fmax(a[1], a[2])), se = 0;
        for (int j = 0; j < 3; j++)
            se += exp(a[j] - mx);
        total += -(a[y[b]] - mx - log(se));
    }
    return total / batch;
}

enum { B = 4 };

/* Train-step gradients of spec s on examples x (B of them) against central differences of
 * ref_loss, on both host backends; user row 2 and tags rows 1, 4 are named by no example. */
static void gradcheck(const pf_model_spec *sp, const float *x) {
    const pf_backend *backends[] = {pf_backend_reference(), pf_backend_openblas()};
    pf_model_spec s = *sp;
    const int y[B] = {0, 2, 1, 2};
    for (size_t bi = 0; bi < 2; bi++) {
        const pf_backend *be = backends[bi];
        size_t np = pf_model_num_params(&s);
        float *pf = pf_calloc(np, sizeof *pf), *gf = pf_calloc(np, sizeof *gf);
        double *pd = pf_calloc(np, sizeof *pd);
        assert_non_null(pd);
        pf_model_init_params(&s, 3, pf);
        pf_rng rng;
        pf_rng_init(&rng, 5, 0);
        for (size_t i = 0; i < np; i++) { /* non-zero biases too */
            pf[i] += (float)(0.2 * (pf_rng_uniform(&rng) - 0.5));
            pd[i] = pf[i];
        }
        int32_t labels[B];
        for (int b = 0; b < B; b++)
            labels[b] = y[b];
        pf_model *m;
        assert_int_equal(pf_model_create(&s, be, B, &m), PF_OK);
        for (size_t i = 0; i < np; i++)
            gf[i] = NAN; /* every element is written, untouched rows with 0 */
        float loss = pf_model_train_step(m, pf, x, NULL, labels, B, gf);
        double ref = ref_loss(&s, pd, x, y, B);
        assert_true(fabs(loss - ref) < 1e-5 * fmax(1, fabs(ref)));
        double diff = 0, norm = 0;
        for (size_t i = 0; i < np; i++) {
            double keep = pd[i];
            pd[i] = keep + FD_STEP;
            double up = ref_loss(&s, pd, x, y, B);
            pd[i] = keep - FD_STEP;
            double down = ref_loss(&s, pd, x, y, B);
            pd[i] = keep;
            double num = (up - down) / (2 * FD_STEP);
            diff += (gf[i] - num) * (gf[i] - num);
            norm += num * num;
        }
        double rel = sqrt(diff) / fmax(sqrt(norm), 1e-6);
        print_message("%s: relative gradient error %.2e over %zu parameters\n", be->name, rel, np);
        assert_true(rel < MAX_REL_ERR);
        /* user row 2 and tags rows 1, 4 are named by no example: zero gradient. */
        for (int j = 0; j < 3; j++)
            assert_true(gf[2 * 3 + j] == 0);
        for (int j = 0; j < 2; j++)
            assert_true(gf[15 + 1 * 2 + j] == 0 && gf[15 + 4 * 2 + j] == 0);
        pf_eval ev = {0};
        pf_model_eval_batch(m, pf, x, NULL, labels, B, &ev);
        assert_true(fabs(ev.loss_sum / B - ref) < 1e-5 * fmax(1, fabs(ref)));
        pf_model_destroy(m);
        pf_free(pf);
        pf_free(gf);
        pf_free(pd);
    }
}

static void test_gradcheck(void **state) {
    (void)state;
    /* user: ids (width 2), tags: ids (width 3); -1 pads. Example 2 names user 1 twice (the
     * row gets both contributions), example 3 has no tags (zeros). Weights include 0.25,
     * 3 and a negative one. */
    const float x[B][10] = {
        {0, 4, 1, 1, 6, 2, 3, 1, 0.5f, 2},
        {1, -1, 2, 0, 0, -1, -1, 1, 0, 0},
        {1, 1, 0.25f, 3, 5, 6, 0, -1, 1, 1},
        {3, 4, 1, -0.5f, -1, -1, -1, 0, 0, 0},
    };
    pf_model_spec s = two_features();
    gradcheck(&s, &x[0][0]);
}

/* Numeric inputs beside the embeddings (model.numeric_inputs): three numbers after the id
 * slots go to dense_0 after the features' outputs; their kernel rows get gradients, the
 * tables as before. The example's width and dense_0's inputs grow by 3. */
static void test_gradcheck_numeric(void **state) {
    (void)state;
    const float x[B][13] = {
        {0, 4, 1, 1, 6, 2, 3, 1, 0.5f, 2, 0.5f, -1.25f, 3},
        {1, -1, 2, 0, 0, -1, -1, 1, 0, 0, 0, 0, 0},
        {1, 1, 0.25f, 3, 5, 6, 0, -1, 1, 1, 2.5f, 0.75f, -2},
        {3, 4, 1, -0.5f, -1, -1, -1, 0, 0, 0, 1, 1, 1},
    };
    pf_model_spec s = two_features();
    s.numeric_inputs = 3;
    assert_int_equal(pf_model_input_width(&s), 13);
    assert_int_equal(pf_model_dense_inputs(&s), 8);
    pf_var_info vars[PF_MAX_VARS];
    pf_model_layout(&s, vars);
    assert_int_equal(vars[2].shape[0], 8); /* dense_0/kernel [5 + 3, 4] */
    float row[13];
    pf_model_pad_example(&s, row);
    assert_true(row[10] == 0 && row[11] == 0 && row[12] == 0 && row[0] == -1);
    gradcheck(&s, &x[0][0]);
}

/* An id that names no row (the table's size, negative other than -1, a fraction, NaN)
 * makes the example's loss NaN; the other examples of the batch are unaffected. */
/* pf_model_keep_grads_sparse: a model that zeroes only the rows its last step wrote gives,
 * step after step with different rows, the gradient a model that zeroes the whole tables
 * gives, element for element; a buffer said to be zeroed is trusted, another one (here
 * filled with NaN) is zeroed whole first, and switching buffers does the same. */
static void test_sparse_grads(void **state) {
    (void)state;
    const float x[3][B][10] = {
        {{0, 4, 1, 1, 6, 2, 3, 1, 0.5f, 2},
         {1, -1, 2, 0, 0, -1, -1, 1, 0, 0},
         {1, 1, 0.25f, 3, 5, 6, 0, -1, 1, 1},
         {3, 4, 1, -0.5f, -1, -1, -1, 0, 0, 0}},
        {{2, -1, 1, 0, 1, -1, -1, 1, 0, 0},
         {2, 2, 1, 1, 4, -1, -1, 2, 0, 0},
         {-1, -1, 0, 0, 1, 4, -1, 1, 1, 0},
         {0, -1, 1, 0, -1, -1, -1, 0, 0, 0}},
        {{4, 3, 1, 1, 0, 6, 5, 1, 1, 1}, /* every row the first two did not name */
         {4, -1, 1, 0, 2, -1, -1, 1, 0, 0},
         {3, -1, 1, 0, 3, -1, -1, 1, 0, 0},
         {4, 4, 1, 1, 6, 6, 6, 1, 1, 1}},
    };
    const int32_t labels[B] = {0, 2, 1, 2};
    pf_model_spec s = two_features();
    size_t np = pf_model_num_params(&s);
    float *p = pf_calloc(np, sizeof *p), *dense = pf_calloc(np, sizeof *dense);
    float *a = pf_calloc(np, sizeof *a), *b = pf_malloc(np * sizeof *b);
    assert_true(p && dense && a && b);
    pf_model_init_params(&s, 3, p);
    pf_model *whole, *sparse;
    assert_int_equal(pf_model_create(&s, pf_backend_openblas(), B, &whole), PF_OK);
    assert_int_equal(pf_model_create(&s, pf_backend_openblas(), B, &sparse), PF_OK);
    assert_int_equal(pf_model_keep_grads_sparse(sparse, a), PF_OK); /* a: calloc, zeroed */
    for (size_t i = 0; i < np; i++)
        b[i] = NAN;
    /* a, a, a, then b (not known to be zero), b, then a again (written since) */
    float *bufs[] = {a, a, a, b, b, a};
    for (int k = 0; k < 6; k++) {
        const float *xk = &x[k % 3][0][0];
        float lw = pf_model_train_step(whole, p, xk, NULL, labels, B, dense);
        float ls = pf_model_train_step(sparse, p, xk, NULL, labels, B, bufs[k]);
        assert_true(lw == ls);
        assert_memory_equal(dense, bufs[k], np * sizeof *dense);
        for (size_t i = 0; i < np; i++) /* the next step's parameters differ */
            p[i] -= 0.1f * dense[i];
    }
    pf_model_destroy(whole);
    pf_model_destroy(sparse);
    pf_free(p);
    pf_free(dense);
    pf_free(a);
    pf_free(b);
}

static void test_bad_ids(void **state) {
    (void)state;
    pf_model_spec s = {.type = PF_MODEL_SOFTMAX, .outputs = 2, .n_embeddings = 1};
    s.embeddings[0] = (pf_embedding_spec){
        .name = "f", .vocab = 4, .dim = 2, .combiner = PF_COMBINE_SUM, .max_ids = 1, .hash = false};
    size_t np = pf_model_num_params(&s);
    float *p = pf_calloc(np, sizeof *p), *g = pf_calloc(np, sizeof *g);
    assert_non_null(p);
    assert_non_null(g);
    pf_model_init_params(&s, 1, p);
    pf_model *m;
    assert_int_equal(pf_model_create(&s, pf_backend_openblas(), 2, &m), PF_OK);
    const float bad[] = {4, -2, 1.5f, NAN, INFINITY, 1e30f};
    int32_t labels[2] = {0, 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        float x[4] = {3, 1, bad[i], 1};
        assert_true(isnan(pf_model_train_step(m, p, x, NULL, labels, 2, g)));
        pf_eval ev = {0};
        x[2] = 3;
        pf_model_eval_batch(m, p, x, NULL, labels, 2, &ev);
        assert_true(isfinite(ev.loss_sum));
    }
    /* Padding alone (an example without ids) looks up zeros: a finite loss of log 2 for
     * a zero bias. */
    float pad[4] = {-1, 0, -1, 0};
    assert_true(fabs(pf_model_train_step(m, p, pad, NULL, labels, 2, g) - log(2.0)) < 1e-6);
    for (size_t i = 0; i < 8; i++)
        assert_true(g[i] == 0);
    /* A non-finite weight is refused the same way. */
    float nan_weight[4] = {1, NAN, 2, 1};
    assert_true(isnan(pf_model_train_step(m, p, nan_weight, NULL, labels, 2, g)));
    pf_model_destroy(m);
    pf_free(p);
    pf_free(g);
}

static void test_needs_host_memory(void **state) {
    (void)state;
    pf_model_spec s = two_features();
    pf_backend device = *pf_backend_reference();
    device.host_memory = false;
    pf_model *m = (pf_model *)1;
    assert_int_equal(pf_model_create(&s, &device, 4, &m), PF_ERR_UNSUPPORTED);
    assert_null(m);
    s.n_embeddings = 0;
    s.inputs = 3;
    assert_int_equal(pf_model_create(&s, &device, 4, &m), PF_OK);
    pf_model_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),       cmocka_unit_test(test_combiners),
        cmocka_unit_test(test_gradcheck),    cmocka_unit_test(test_gradcheck_numeric),
        cmocka_unit_test(test_bad_ids),      cmocka_unit_test(test_needs_host_memory),
        cmocka_unit_test(test_sparse_grads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
