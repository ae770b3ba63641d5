/* test_compute.c - every op of the backend table against the reference backend.
 *
 * The "reference" backend (naive double-precision loops) is the oracle; every other
 * backend compiled in (here: "openblas") must agree with it within stated tolerances on
 * seeded random inputs and on the edge cases that break fast kernels: 1x1x1 and
 * non-multiple-of-8 shapes, all transpose combinations, row strides larger than the rows
 * (padding filled with NaN so that reading it shows), beta = 0 over a NaN-filled C,
 * in-place calls where backend.h allows them, and huge logits. The reference itself is
 * checked against numbers worked out by hand, so the oracle is not trusted blindly.
 *
 * Agreement means |ref - x| <= atol + rtol * |ref| for every element (gemm's atol grows
 * with k, see tests/support/backend_check.h, which test_cuda.c shares); each test prints the
 * largest error it saw, how much of the allowed bound that used, and where. Data reaches a
 * backend only through its upload/download, so a device backend can join the list as is.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/backend.h"
#include "psflow/mem.h"
#include "psflow/rng.h"
#include "tests/support/backend_check.h"

/* --- backends under test -------------------------------------------------------------- */

static const pf_backend *oracle(void) {
    return pf_backend_reference();
}

/* Every backend checked against the oracle. */
static const pf_backend *candidate(size_t i) {
    return i == 0 ? pf_backend_openblas() : NULL;
}
#define NUM_CANDIDATES 1

/* Lengths for the elementwise ops: 1, odd sizes around SIMD widths, and a few thousand. */
static const size_t LENGTHS[] = {1, 2, 3, 7, 8, 13, 16, 33, 129, 1000, 4099};

/* --- table and memory ----------------------------------------------------------------- */

static void test_tables(void **state) {
    (void)state;
    const pf_backend *all[] = {pf_backend_reference(), pf_backend_openblas()};
    assert_string_equal(all[0]->name, "reference");
    assert_string_equal(all[1]->name, "openblas");
    for (size_t b = 0; b < ARRAY_LEN(all); b++) {
        const pf_backend *be = all[b];
        assert_non_null(be->alloc);
        assert_non_null(be->free);
        assert_non_null(be->upload);
        assert_non_null(be->download);
        assert_non_null(be->upload_i32);
        assert_non_null(be->fill);
        assert_non_null(be->copy);
        assert_non_null(be->gemm);
        assert_non_null(be->axpy);
        assert_non_null(be->scale);
        assert_non_null(be->bias_add);
        assert_non_null(be->bias_grad);
        assert_non_null(be->activation);
        assert_non_null(be->activation_grad);
        assert_non_null(be->softmax_xent);
        assert_non_null(be->mse);
        assert_non_null(be->count_correct);
        assert_non_null(be->xent_sum);
        assert_non_null(be->sgd_step);
        assert_non_null(be->momentum_step);
        assert_non_null(be->adagrad_step);
        assert_non_null(be->adam_step);
    }
    /* Same table every call. */
    assert_ptr_equal(pf_backend_reference(), pf_backend_reference());
    assert_ptr_equal(pf_backend_openblas(), pf_backend_openblas());
}

static void test_memory(void **state) {
    (void)state;
    enum { LEN = 1031 };
    const pf_backend *all[] = {pf_backend_reference(), pf_backend_openblas()};
    pf_rng rng;
    pf_rng_init(&rng, 7, 0);
    float src[LEN], back[LEN];
    fill_uniform(&rng, src, LEN, -5.0f, 5.0f);
    for (size_t b = 0; b < ARRAY_LEN(all); b++) {
        const pf_backend *be = all[b];
        float *x = put(be, src, LEN);
        float *y = be->alloc(LEN * sizeof(float));
        assert_non_null(y);
        /* upload/download round-trip is exact */
        be->download(back, x, LEN);
        assert_memory_equal(back, src, sizeof src);
        /* fill, then copy part of x over it */
        be->fill(y, -3.5f, LEN);
        be->copy(y + 10, x + 20, 500);
        be->download(back, y, LEN);
        for (int i = 0; i < LEN; i++) {
            float want = (i >= 10 && i < 510) ? src[i + 10] : -3.5f;
            assert_true(back[i] == want);
        }
        be->free(y);
        be->free(x);
        /* upload_i32 is exact too: seen through count_correct, the only op reading labels
         * whose answer is an exact integer. Row r has its maximum at column r % 3. */
        enum { ROWS = 9 };
        float logits[ROWS * 3] = {0};
        int32_t labels[ROWS];
        for (int r = 0; r < ROWS; r++) {
            logits[r * 3 + r % 3] = 1.0f;
            labels[r] = r < 5 ? r % 3 : (r + 1) % 3; /* 5 right, 4 wrong */
        }
        float *dl = put(be, logits, ROWS * 3);
        int32_t *dlab = put_i32(be, labels, ROWS);
        assert_int_equal(be->count_correct(ROWS, 3, dl, dlab), 5);
        be->free(dlab);
        be->free(dl);
    }
}

/* --- gemm ----------------------------------------------------------------------------- */

/* The reference against a product worked out by hand, in every storage layout:
 * A = [[1 2 3] [4 5 6]], B = [[7 8] [9 10] [11 12]], A.B = [[58 64] [139 154]];
 * with alpha 2, beta -1 over C = ones: [[115 127] [277 307]]. Small integers are exact in
 * float, so every backend must hit these exactly. */
static void test_gemm_known(void **state) {
    (void)state;
    check_gemm_known(pf_backend_reference());
    check_gemm_known(pf_backend_openblas());
}

/* Runs one case on the oracle and every candidate and compares. */
static void run_gemm_case(tol *t, pf_rng *rng, const gemm_case *g) {
    for (size_t ci = 0; ci < NUM_CANDIDATES; ci++)
        check_gemm_case(t, rng, g, candidate(ci));
}

/* Float sgemm against a double-accumulated dot product of up to 300 terms in [-1, 1]. */
static void test_gemm_parity(void **state) {
    (void)state;
    tol t = make_tol("gemm", GEMM_ATOL_BASE, GEMM_RTOL); /* atol grows with k */
    t.atol_text = GEMM_ATOL_TEXT;
    pf_rng rng;
    pf_rng_init(&rng, 42, 1);
    static const int edge[][3] = {
        {1, 1, 1},     {1, 1, 7},     {7, 1, 1},     {1, 13, 1}, {7, 13, 33},
        {13, 7, 129},  {33, 129, 7},  {129, 33, 13}, {8, 8, 8},  {16, 16, 16},
        {1, 300, 300}, {300, 1, 257}, {65, 67, 300}, {2, 3, 0},  {3, 1, 0},
    };
    for (size_t s = 0; s < ARRAY_LEN(edge); s++)
        for (int tr = 0; tr < 4; tr++)
            for (size_t ab = 0; ab < ARRAY_LEN(GEMM_ALPHA_BETA); ab++)
                for (int pad = 0; pad <= 5; pad += 5) {
                    gemm_case g = {tr & 1,
                                   tr & 2,
                                   edge[s][0],
                                   edge[s][1],
                                   edge[s][2],
                                   GEMM_ALPHA_BETA[ab][0],
                                   GEMM_ALPHA_BETA[ab][1],
                                   pad};
                    run_gemm_case(&t, &rng, &g);
                }
    for (int s = 0; s < 24; s++) {
        int m = rand_int(&rng, 1, 140), n = rand_int(&rng, 1, 140), k = rand_int(&rng, 1, 300);
        for (int tr = 0; tr < 4; tr++) {
            const float *ab = GEMM_ALPHA_BETA[pf_rng_below(&rng, ARRAY_LEN(GEMM_ALPHA_BETA))];
            gemm_case g = {tr & 1, tr & 2, m, n, k, ab[0], ab[1], rand_int(&rng, 0, 9)};
            run_gemm_case(&t, &rng, &g);
        }
    }
    report(&t);
}

/* --- axpy, scale, bias ---------------------------------------------------------------- */

static void test_axpy_scale(void **state) {
    (void)state;
    tol ta = make_tol("axpy", 1e-6, 1e-6), ts = make_tol("scale", 1e-6, 1e-6);
    static const float factors[] = {1.0f, -2.5f, 1e-3f, 0.0f, 37.0f};
    pf_rng rng;
    pf_rng_init(&rng, 42, 2);
    for (size_t l = 0; l < ARRAY_LEN(LENGTHS); l++) {
        const size_t n = LENGTHS[l];
        float *x = host_new(n), *y = host_new(n), *want = host_new(n), *got = host_new(n);
        for (size_t f = 0; f < ARRAY_LEN(factors); f++) {
            fill_uniform(&rng, x, n, -10.0f, 10.0f);
            fill_uniform(&rng, y, n, -10.0f, 10.0f);
            char ctx[64];
            snprintf(ctx, sizeof ctx, "n=%zu a=%g", n, (double)factors[f]);

            const pf_backend *ref = oracle();
            float *dx = put(ref, x, n), *dy = put(ref, y, n);
            ref->axpy(n, factors[f], dx, dy);
            take(ref, want, dy, n);
            ref->free(dx);
            for (size_t ci = 0; ci < NUM_CANDIDATES; ci++) {
                const pf_backend *be = candidate(ci);
                dx = put(be, x, n);
                dy = put(be, y, n);
                be->axpy(n, factors[f], dx, dy);
                take(be, got, dy, n);
                be->free(dx);
                check_close(&ta, be->name, ctx, want, got, n);
            }

            dx = put(ref, x, n);
            ref->scale(n, factors[f], dx);
            take(ref, want, dx, n);
            for (size_t ci = 0; ci < NUM_CANDIDATES; ci++) {
                const pf_backend *be = candidate(ci);
                dx = put(be, x, n);
                be->scale(n, factors[f], dx);
                take(be, got, dx, n);
                check_close(&ts, be->name, ctx, want, got, n);
            }
        }
        pf_free(got);
        pf_free(want);
        pf_free(y);
        pf_free(x);
    }
    report(&ta);
    report(&ts);
}

static const int MATRIX_SHAPES[][2] = {
    {1, 1}, {1, 7}, {7, 1}, {7, 13}, {13, 33}, {33, 129}, {129, 7}, {100, 10}, {300, 17}, {3, 1000},
};

static void test_bias(void **state) {
    (void)state;
    /* bias_grad sums up to 300 rows in float against a double sum. */
    tol tadd = make_tol("bias_add", 1e-6, 1e-6), tgrad = make_tol("bias_grad", 1e-5, 1e-5);
    pf_rng rng;
    pf_rng_init(&rng, 42, 3);
    for (size_t s = 0; s < ARRAY_LEN(MATRIX_SHAPES); s++) {
        const int rows = MATRIX_SHAPES[s][0], cols = MATRIX_SHAPES[s][1];
        const size_t len = (size_t)rows * (size_t)cols;
        float *x = host_new(len), *bias = host_new((size_t)cols), *want = host_new(len);
        float *got = host_new(len), *nan_db = host_new((size_t)cols);
        fill_uniform(&rng, x, len, -3.0f, 3.0f);
        fill_uniform(&rng, bias, (size_t)cols, -3.0f, 3.0f);
        for (int c = 0; c < cols; c++)
            nan_db[c] = NAN; /* bias_grad overwrites db */
        char ctx[64];
        snprintf(ctx, sizeof ctx, "rows=%d cols=%d", rows, cols);

        const pf_backend *ref = oracle();
        float *dx = put(ref, x, len), *dbias = put(ref, bias, (size_t)cols);
        ref->bias_add(rows, cols, dbias, dx);
        take(ref, want, dx, len);
        ref->free(dbias);
        for (size_t ci = 0; ci < NUM_CANDIDATES; ci++) {
            const pf_backend *be = candidate(ci);
            dx = put(be, x, len);
            dbias = put(be, bias, (size_t)cols);
            be->bias_add(rows, cols, dbias, dx);
            take(be, got, dx, len);
            be->free(dbias);
            check_close(&tadd, be->name, ctx, want, got, len);
        }

        dx = put(ref, x, len);
        float *ddb = put(ref, nan_db, (size_t)cols);
        ref->bias_grad(rows, cols, dx, ddb);
        take(ref, want, ddb, (size_t)cols);
        ref->free(dx);
        for (size_t ci = 0; ci < NUM_CANDIDATES; ci++) {
            const pf_backend *be = candidate(ci);
            dx = put(be, x, len);
            ddb = put(be, nan_db, (size_t)cols);
            be->bias_grad(rows, cols, dx, ddb);
            take(be, got, ddb, (size_t)cols);
            be->free(dx);
            check_close(&tgrad, be->name, ctx, want, got, (size_t)cols);
        }
        pf_free(nan_db);
        pf_free(got);
        pf_free(want);
        pf_free(bias);
        pf_free(x);
    }
    report(&tadd);
    report(&tgrad);
}

/* --- activations ---------------------------------------------------------------------- */

static const pf_activation ACTS[] = {PF_ACT_NONE, PF_ACT_RELU, PF_ACT_TANH, PF_ACT_SIGMOID};
static const char *const ACT_NAMES[] = {"none", "relu", "tanh", "sigmoid"};

/* Uniform values with the edge cases sprinkled over the first elements: zeros of both
 * signs, tiny values, and magnitudes where tanh and sigmoid saturate or exp overflows. */
static void fill_activation_inputs(pf_rng *rng, float *x, size_t n) {
    static const float special[] = {0.0f,   -0.0f, 1e-8f,  -1e-8f, 1.0f,    -1.0f, 20.0f,
                                    -20.0f, 88.0f, -88.0f, 100.0f, -100.0f, 1e30f, -1e30f};
    fill_uniform(rng, x, n, -6.0f, 6.0f);
    for (size_t i = 0; i < n && i < ARRAY_LEN(special); i++)
        x[i] = special[i];
}

static void test_activation(void **state) {
    (void)state;
    /* libm's tanhf/expf are within a few ulp of the double-precision values. */
    tol tact[4], tgrad[4];
    char names[8][32];
    for (int a = 0; a < 4; a++) {
        snprintf(names[a], sizeof names[a], "act %s", ACT_NAMES[a]);
        snprintf(names[4 + a], sizeof names[4 + a], "act_grad %s", ACT_NAMES[a]);
        tact[a] = make_tol(names[a], 1e-6, 1e-6);
        tgrad[a] = make_tol(names[4 + a], 1e-6, 1e-6);
    }
    pf_rng rng;
    pf_rng_init(&rng, 42, 4);
    for (size_t l = 0; l < ARRAY_LEN(LENGTHS); l++) {
        const size_t n = LENGTHS[l];
        float *x = host_new(n), *y = host_new(n), *dy = host_new(n);
        float *want = host_new(n), *got = host_new(n), *junk = host_new(n);
        for (size_t i = 0; i < n; i++)
            junk[i] = NAN;
        for (int a = 0; a < 4; a++) {
            const pf_activation act = ACTS[a];
            fill_activation_inputs(&rng, x, n);
            fill_uniform(&rng, dy, n, -2.0f, 2.0f);
            char ctx[64];

            /* Forward, out of place (over NaN) and in place. */
            const pf_backend *ref = oracle();
            float *dx = put(ref, x, n), *dout = put(ref, junk, n);
            ref->activation(act, n, dx, dout);
            take(ref, want, dout, n);
            ref->free(dx);
            memcpy(y, want, n * sizeof *y); /* the output the grad tests start from */
            for (size_t ci = 0; ci < NUM_CANDIDATES; ci++) {
                const pf_backend *be = candidate(ci);
                for (int in_place = 0; in_place < 2; in_place++) {
                    snprintf(ctx, sizeof ctx, "n=%zu%s", n, in_place ? " in place" : "");
                    dx = put(be, x, n);
                    dout = in_place ? dx : put(be, junk, n);
                    be->activation(act, n, dx, dout);
                    take(be, got, dout, n);
                    if (!in_place)
                        be->free(dx);
                    check_close(&tact[a], be->name, ctx, want, got, n);
                }
            }

            /* Backward from the reference's y, out of place (over NaN) and in place. */
            float *dyv = put(ref, y, n), *ddy = put(ref, dy, n);
            dout = put(ref, junk, n);
            ref->activation_grad(act, n, dyv, ddy, dout);
            take(ref, want, dout, n);
            ref->free(ddy);
            ref->free(dyv);
            for (size_t ci = 0; ci < NUM_CANDIDATES; ci++) {
                const pf_backend *be = candidate(ci);
                for (int in_place = 0; in_place < 2; in_place++) {
                    snprintf(ctx, sizeof ctx, "n=%zu%s", n, in_place ? " in place" : "");
                    dyv = put(be, y, n);
                    ddy = put(be, dy, n);
                    dout = in_place ? ddy : put(be, junk, n);
                    be->activation_grad(act, n, dyv, ddy, dout);
                    take(be, got, dout, n);
                    if (!in_place)
                        be->free(ddy);
                    be->free(dyv);
                    check_close(&tgrad[a], be->name, ctx, want, got, n);
                }
            }
        }
        pf_free(junk);
        pf_free(got);
        pf_free(want);
        pf_free(dy);
        pf_free(y);
        pf_free(x);
    }
    for (int a = 0; a < 4; a++)
        report(&tact[a]);
    for (int a = 0; a < 4; a++)
        report(&tgrad[a]);
}

/* The reference against values known in closed form. */
static void test_activation_known(void **state) {
    (void)state;
    static const float x[] = {-2.0f, -0.5f, 0.0f, 0.5f, 2.0f, -100.0f, 100.0f};
    static const double want[4][7] = {
        {-2.0, -0.5, 0.0, 0.5, 2.0, -100.0, 100.0},
        {0.0, 0.0, 0.0, 0.5, 2.0, 0.0, 100.0},
        /* tanh(0.5) = 0.46211715726, tanh(2) = 0.96402758008, tanh(100) = 1 in float */
        {-0.9640275800758169, -0.46211715726000974, 0.0, 0.46211715726000974, 0.9640275800758169,
         -1.0, 1.0},
        /* 1 / (1 + e^-0.5) = 0.62245933120, 1 / (1 + e^-2) = 0.88079707798 */
        {0.11920292202211755, 0.3775406687981454, 0.5, 0.6224593312018546, 0.8807970779778823,
         3.7200759760208356e-44, 1.0},
    };
    const pf_backend *all[] = {pf_backend_reference(), pf_backend_openblas()};
    for (size_t b = 0; b < ARRAY_LEN(all); b++) {
        tol t = make_tol("activation known", 1e-7, 1e-6);
        for (int a = 0; a < 4; a++) {
            float y[7];
            float *d = put(all[b], x, 7);
            all[b]->activation(ACTS[a], 7, d, d);
            take(all[b], y, d, 7);
            for (int i = 0; i < 7; i++)
                check_value(&t, all[b]->name, ACT_NAMES[a], (size_t)i, want[a][i], y[i]);
        }
        /* Gradients in terms of y: relu 1[y > 0], tanh 1 - y^2, sigmoid y (1 - y);
         * dy = 3 everywhere. */
        static const float y[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f};
        static const float dy[] = {3.0f, 3.0f, 3.0f, 3.0f, 3.0f};
        static const double want_grad[4][5] = {
            {3.0, 3.0, 3.0, 3.0, 3.0},
            {0.0, 3.0, 3.0, 3.0, 3.0},
            {3.0, 2.8125, 2.25, 1.3125, 0.0}, /* 3 (1 - y^2) */
            {0.0, 0.5625, 0.75, 0.5625, 0.0}, /* 3 y (1 - y) */
        };
        for (int a = 0; a < 4; a++) {
            float dx[5];
            float *dyv = put(all[b], y, 5), *ddy = put(all[b], dy, 5);
            all[b]->activation_grad(ACTS[a], 5, dyv, ddy, ddy);
            take(all[b], dx, ddy, 5);
            all[b]->free(dyv);
            for (int i = 0; i < 5; i++)
                check_value(&t, all[b]->name, ACT_NAMES[a], (size_t)i, want_grad[a][i], dx[i]);
        }
    }
}

/* --- losses --------------------------------------------------------------------------- */

/* Logit scales: ordinary, large (exp would overflow without the max shift) and huge (the
 * difference of two logits is itself ~1e30). */
static const float LOGIT_SCALES[] = {3.0f, 1e4f, 1e30f};

static void random_labels(pf_rng *rng, int32_t *labels, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        labels[r] = (int32_t)pf_rng_below(rng, (uint64_t)cols);
}

static void expect_all_finite(const char *what, const char *backend, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            fail_msg("%s [%s]: element %zu is %g", what, backend, i, (double)x[i]);
}

static void test_softmax_xent(void **state) {
    (void)state;
    /* dlogits are probabilities / rows, so at most 1 in magnitude; exp in float vs double. */
    tol tloss = make_tol("softmax_xent loss", 1e-6, 1e-6);
    tol tgrad = make_tol("softmax_xent grad", 1e-7, 1e-5);
    tol tsum = make_tol("xent_sum", 1e-6, 1e-6);
    static const int shapes[][2] = {{1, 1},    {1, 2},    {7, 10},   {13, 33},
                                    {100, 10}, {33, 129}, {3, 1000}, {64, 7}};
    pf_rng rng;
    pf_rng_init(&rng, 42, 5);
    for (size_t s = 0; s < ARRAY_LEN(shapes); s++)
        for (size_t sc = 0; sc < ARRAY_LEN(LOGIT_SCALES); sc++) {
            const int rows = shapes[s][0], cols = shapes[s][1];
            const size_t len = (size_t)rows * (size_t)cols;
            const float scale = LOGIT_SCALES[sc];
            float *logits = host_new(len), *want = host_new(len), *got = host_new(len);
            int32_t *labels = pf_malloc((size_t)rows * sizeof *labels);
            assert_non_null(labels);
            fill_uniform(&rng, logits, len, -scale, scale);
            if (rows > 1) /* one row of equal logits: a tie everywhere */
                for (int c = 0; c < cols; c++)
                    logits[cols + c] = scale;
            random_labels(&rng, labels, rows, cols);
            char ctx[64];
            snprintf(ctx, sizeof ctx, "rows=%d cols=%d scale=%g", rows, cols, (double)scale);

            const pf_backend *ref = oracle();
            float *dl = put(ref, logits, len), *dd = put(ref, logits, len);
            int32_t *dlab = put_i32(ref, labels, (size_t)rows);
            float want_loss = ref->softmax_xent(rows, cols, dl, dlab, dd);
            double want_sum = ref->xent_sum(rows, cols, dl, dlab);
            take(ref, want, dd, len);
            ref->free(dlab);
            ref->free(dl);
            assert_true(isfinite(want_loss));
            expect_all_finite("softmax_xent reference grad", ref->name, want, len);

            for (size_t ci = 0; ci < NUM_CANDIDATES; ci++) {
                const pf_backend *be = candidate(ci);
                for (int in_place = 0; in_place < 2; in_place++) {
                    dl = put(be, logits, len);
                    dd = in_place ? dl : put(be, logits, len);
                    dlab = put_i32(be, labels, (size_t)rows);
                    double sum = in_place ? 0.0 : be->xent_sum(rows, cols, dl, dlab);
                    float loss = be->softmax_xent(rows, cols, dl, dlab, dd);
                    take(be, got, dd, len);
                    be->free(dlab);
                    if (!in_place)
                        be->free(dl);
                    expect_all_finite("softmax_xent grad", be->name, got, len);
                    check_value(&tloss, be->name, ctx, 0, want_loss, loss);
                    check_close(&tgrad, be->name, ctx, want, got, len);
                    if (!in_place)
                        check_value(&tsum, be->name, ctx, 0, want_sum, sum);
                }
            }
            pf_free(labels);
            pf_free(got);
            pf_free(want);
            pf_free(logits);
        }
    report(&tloss);
    report(&tgrad);
    report(&tsum);
}

/* Closed forms: equal logits give loss log(cols) and dlogits (1/cols - onehot) / rows;
 * [1000, 1000, -1000] (exp overflows unshifted) gives softmax [0.5, 0.5, 0]. */
static void test_softmax_xent_known(void **state) {
    (void)state;
    const pf_backend *all[] = {pf_backend_reference(), pf_backend_openblas()};
    for (size_t b = 0; b < ARRAY_LEN(all); b++) {
        const pf_backend *be = all[b];
        tol t = make_tol("softmax known", 1e-7, 1e-6);
        /* 2 rows x 4 equal logits, labels 1 and 3: loss log 4; grad (0.25 - onehot) / 2 */
        static const float eq[8] = {2, 2, 2, 2, -7, -7, -7, -7};
        static const int32_t eq_labels[2] = {1, 3};
        static const float eq_grad[8] = {0.125f, -0.375f, 0.125f, 0.125f,
                                         0.125f, 0.125f,  0.125f, -0.375f};
        float *dl = put(be, eq, 8);
        int32_t *dlab = put_i32(be, eq_labels, 2);
        double sum = be->xent_sum(2, 4, dl, dlab);
        float loss = be->softmax_xent(2, 4, dl, dlab, dl);
        float got[8];
        take(be, got, dl, 8);
        be->free(dlab);
        check_value(&t, be->name, "equal logits loss", 0, log(4.0), loss);
        check_value(&t, be->name, "equal logits xent_sum", 0, 2.0 * log(4.0), sum);
        check_close(&t, be->name, "equal logits grad", eq_grad, got, 8);

        /* 1 row [1000, 1000, -1000], label 0: loss log 2; grad [-0.5, 0.5, 0] */
        static const float big[3] = {1000, 1000, -1000};
        static const int32_t big_label[1] = {0};
        static const float big_grad[3] = {-0.5f, 0.5f, 0.0f};
        dl = put(be, big, 3);
        dlab = put_i32(be, big_label, 1);
        sum = be->xent_sum(1, 3, dl, dlab);
        loss = be->softmax_xent(1, 3, dl, dlab, dl);
        take(be, got, dl, 3);
        be->free(dlab);
        check_value(&t, be->name, "big logits loss", 0, log(2.0), loss);
        check_value(&t, be->name, "big logits xent_sum", 0, log(2.0), sum);
        check_close(&t, be->name, "big logits grad", big_grad, got, 3);

        /* A single class: softmax is 1, loss 0, gradient 0. */
        static const float one[2] = {5, -3};
        static const int32_t zeros[2] = {0, 0};
        dl = put(be, one, 2);
        dlab = put_i32(be, zeros, 2);
        loss = be->softmax_xent(2, 1, dl, dlab, dl);
        take(be, got, dl, 2);
        be->free(dlab);
        check_value(&t, be->name, "one class loss", 0, 0.0, loss);
        check_value(&t, be->name, "one class grad", 0, 0.0, got[0]);
        check_value(&t, be->name, "one class grad", 1, 0.0, got[1]);
    }
}

static void test_mse(void **state) {
    (void)state;
    tol tloss = make_tol("mse loss", 1e-6, 1e-6), tgrad = make_tol("mse grad", 1e-7, 1e-6);
    pf_rng rng;
    pf_rng_init(&rng, 42, 6);
    for (size_t l = 0; l < ARRAY_LEN(LENGTHS); l++) {
        const size_t n = LENGTHS[l];
        float *pred = host_new(n), *target = host_new(n), *want = host_new(n), *got = host_new(n);
        fill_uniform(&rng, pred, n, -10.0f, 10.0f);
        fill_uniform(&rng, target, n, -10.0f, 10.0f);
        char ctx[32];
        snprintf(ctx, sizeof ctx, "n=%zu", n);

        const pf_backend *ref = oracle();
        float *dp = put(ref, pred, n), *dt = put(ref, target, n), *dd = put(ref, pred, n);
        float want_loss = ref->mse(n, dp, dt, dd);
        take(ref, want, dd, n);
        ref->free(dt);
        ref->free(dp);
        for (size_t ci = 0; ci < NUM_CANDIDATES; ci++) {
            const pf_backend *be = candidate(ci);
            for (int in_place = 0; in_place < 2; in_place++) {
                dp = put(be, pred, n);
                dt = put(be, target, n);
                dd = in_place ? dp : put(be, pred, n);
                float loss = be->mse(n, dp, dt, dd);
                take(be, got, dd, n);
                be->free(dt);
                if (!in_place)
                    be->free(dp);
                check_value(&tloss, be->name, ctx, 0, want_loss, loss);
                check_close(&tgrad, be->name, ctx, want, got, n);
            }
        }
        pf_free(got);
        pf_free(want);
        pf_free(target);
        pf_free(pred);
    }
    report(&tloss);
    report(&tgrad);

    /* By hand: pred [1 2 3], target [0 0 0] gives loss (1 + 4 + 9) / 3 = 14/3 and
     * dpred = 2 (pred - target) / 3 = [2/3 4/3 2]. */
    const pf_backend *all[] = {pf_backend_reference(), pf_backend_openblas()};
    static const float p[3] = {1, 2, 3}, z[3] = {0, 0, 0};
    static const float want_grad[3] = {2.0f / 3.0f, 4.0f / 3.0f, 2.0f};
    for (size_t b = 0; b < ARRAY_LEN(all); b++) {
        tol t = make_tol("mse known", 1e-7, 1e-6);
        float got[3];
        float *dp = put(all[b], p, 3), *dz = put(all[b], z, 3);
        float loss = all[b]->mse(3, dp, dz, dp);
        take(all[b], got, dp, 3);
        all[b]->free(dz);
        check_value(&t, all[b]->name, "loss", 0, 14.0 / 3.0, loss);
        check_close(&t, all[b]->name, "grad", want_grad, got, 3);
    }
}

static void test_count_correct(void **state) {
    (void)state;
    /* Ties go to the first largest column (like argmax). */
    static const float logits[7 * 4] = {
        1,  3,  3,     0,  /* label 1: first of the tied maxima -> correct */
        1,  3,  3,     0,  /* label 2: second of the tied maxima -> wrong */
        5,  5,  5,     5,  /* label 0 -> correct */
        5,  5,  5,     5,  /* label 3 -> wrong */
        -1, -2, -0.5f, -3, /* label 2 -> correct */
        2,  1,  0,     9,  /* label 3 -> correct */
        2,  1,  0,     9,  /* label 0 -> wrong */
    };
    static const int32_t labels[7] = {1, 2, 0, 3, 2, 3, 0};
    const pf_backend *all[] = {pf_backend_reference(), pf_backend_openblas()};
    pf_rng rng;
    pf_rng_init(&rng, 42, 7);
    enum { ROWS = 500, COLS = 10 };
    float *rl = host_new(ROWS * COLS);
    int32_t rlab[ROWS];
    /* Logits from {0, 1, 2}: almost every row has a tie at its maximum. */
    for (int i = 0; i < ROWS * COLS; i++)
        rl[i] = (float)pf_rng_below(&rng, 3);
    random_labels(&rng, rlab, ROWS, COLS);
    int want_random = -1;
    for (size_t b = 0; b < ARRAY_LEN(all); b++) {
        const pf_backend *be = all[b];
        float *dl = put(be, logits, 28);
        int32_t *dlab = put_i32(be, labels, 7);
        assert_int_equal(be->count_correct(7, 4, dl, dlab), 4);
        be->free(dlab);
        be->free(dl);

        dl = put(be, rl, ROWS * COLS);
        dlab = put_i32(be, rlab, ROWS);
        int got = be->count_correct(ROWS, COLS, dl, dlab);
        be->free(dlab);
        be->free(dl);
        if (want_random < 0)
            want_random = got; /* the reference's answer */
        assert_int_equal(got, want_random);
    }
    /* Independently: first argmax of each random row. */
    int count = 0;
    for (int r = 0; r < ROWS; r++) {
        int best = 0;
        for (int c = 1; c < COLS; c++)
            if (rl[r * COLS + c] > rl[r * COLS + best])
                best = c;
        count += best == rlab[r];
    }
    assert_int_equal(want_random, count);
    pf_free(rl);
}

/* --- optimizer steps ------------------------------------------------------------------ */

enum { OPT_SGD, OPT_MOMENTUM, OPT_ADAGRAD, OPT_ADAM, NUM_OPTS };
static const char *const OPT_NAMES[NUM_OPTS] = {"sgd_step", "momentum_step", "adagrad_step",
                                                "adam_step"};

static void run_step(const pf_backend *be, int opt, size_t n, const float *g, float *w, float *s0,
                     float *s1) {
    switch (opt) {
    case OPT_SGD:
        be->sgd_step(n, 0.05f, g, w);
        break;
    case OPT_MOMENTUM:
        be->momentum_step(n, 0.05f, 0.9f, g, w, s0);
        break;
    case OPT_ADAGRAD:
        be->adagrad_step(n, 0.05f, g, w, s0);
        break;
    case OPT_ADAM:
        be->adam_step(n, 0.01f, 0.9f, 0.999f, 1e-7f, g, w, s0, s1);
        break;
    }
}

/* Three consecutive steps with fresh gradients (so the slots carry state), every backend
 * from the same start, compared after each step: weights and slots. */
static void test_optimizer_steps(void **state) {
    (void)state;
    tol tw[NUM_OPTS], ts[NUM_OPTS];
    char names[NUM_OPTS][32];
    for (int o = 0; o < NUM_OPTS; o++) {
        snprintf(names[o], sizeof names[o], "%s slots", OPT_NAMES[o]);
        tw[o] = make_tol(OPT_NAMES[o], 1e-6, 1e-6);
        ts[o] = make_tol(names[o], 1e-6, 1e-6);
    }
    pf_rng rng;
    pf_rng_init(&rng, 42, 8);
    for (size_t l = 0; l < ARRAY_LEN(LENGTHS); l++) {
        const size_t n = LENGTHS[l];
        for (int o = 0; o < NUM_OPTS; o++) {
            float *w0 = host_new(n), *s00 = host_new(n), *s10 = host_new(n);
            float *g[3] = {host_new(n), host_new(n), host_new(n)};
            float *want[3] = {host_new(n), host_new(n), host_new(n)};
            float *got = host_new(n);
            fill_uniform(&rng, w0, n, -2.0f, 2.0f);
            for (int k = 0; k < 3; k++) {
                fill_uniform(&rng, g[k], n, -1.0f, 1.0f);
                if (n > 3)
                    g[k][3] = 0.0f; /* a zero gradient: adam's 0 / (0 + eps) */
            }
            /* Valid slot states: momentum any sign; adagrad accumulator > 0; adam m any
             * sign, v >= 0. */
            fill_uniform(&rng, s00, n, o == OPT_ADAGRAD ? 0.1f : -0.5f, 0.5f);
            fill_uniform(&rng, s10, n, 0.0f, 0.01f);
            if (o == OPT_ADAM && n > 3)
                s00[3] = s10[3] = 0.0f;

            /* The oracle's three steps, saved after each. */
            const pf_backend *ref = oracle();
            float *dw = put(ref, w0, n), *d0 = put(ref, s00, n), *d1 = put(ref, s10, n);
            float *dg = put(ref, g[0], n);
            float *ref_slots[3][2];
            for (int k = 0; k < 3; k++) {
                ref->upload(dg, g[k], n);
                run_step(ref, o, n, dg, dw, d0, d1);
                ref->download(want[k], dw, n);
                ref_slots[k][0] = host_new(n);
                ref_slots[k][1] = host_new(n);
                ref->download(ref_slots[k][0], d0, n);
                ref->download(ref_slots[k][1], d1, n);
            }
            ref->free(dg);
            ref->free(d1);
            ref->free(d0);
            ref->free(dw);

            for (size_t ci = 0; ci < NUM_CANDIDATES; ci++) {
                const pf_backend *be = candidate(ci);
                dw = put(be, w0, n);
                d0 = put(be, s00, n);
                d1 = put(be, s10, n);
                dg = put(be, g[0], n);
                for (int k = 0; k < 3; k++) {
                    char ctx[48];
                    snprintf(ctx, sizeof ctx, "n=%zu step %d", n, k + 1);
                    be->upload(dg, g[k], n);
                    run_step(be, o, n, dg, dw, d0, d1);
                    be->download(got, dw, n);
                    check_close(&tw[o], be->name, ctx, want[k], got, n);
                    be->download(got, d0, n);
                    check_close(&ts[o], be->name, ctx, ref_slots[k][0], got, n);
                    be->download(got, d1, n);
                    check_close(&ts[o], be->name, ctx, ref_slots[k][1], got, n);
                }
                be->free(dg);
                be->free(d1);
                be->free(d0);
                be->free(dw);
            }
            for (int k = 0; k < 3; k++) {
                pf_free(ref_slots[k][0]);
                pf_free(ref_slots[k][1]);
                pf_free(want[k]);
                pf_free(g[k]);
            }
            pf_free(got);
            pf_free(s10);
            pf_free(s00);
            pf_free(w0);
        }
    }
    for (int o = 0; o < NUM_OPTS; o++)
        report(&tw[o]);
    for (int o = 0; o < NUM_OPTS; o++)
        report(&ts[o]);
}

/* The reference's steps against TensorFlow's formulas by hand, one element each:
 * w = 1, g = 0.5, lr = 0.1 (adam: lr_t = 0.1), momentum 0.9 over accum 0.2,
 * adagrad over accum 0.75, adam over m = 0.2, v = 0.04. */
static void test_optimizer_steps_known(void **state) {
    (void)state;
    const pf_backend *be = pf_backend_reference();
    tol t = make_tol("steps known", 1e-7, 1e-6);
    float w = 1.0f, g = 0.5f, a = 0.2f, m = 0.2f, v = 0.04f;
    be->sgd_step(1, 0.1f, &g, &w);
    check_value(&t, be->name, "sgd w", 0, 0.95, w); /* 1 - 0.1 * 0.5 */
    w = 1.0f;
    be->momentum_step(1, 0.1f, 0.9f, &g, &w, &a);
    check_value(&t, be->name, "momentum accum", 0, 0.68, a); /* 0.9 * 0.2 + 0.5 */
    check_value(&t, be->name, "momentum w", 0, 0.932, w);    /* 1 - 0.1 * 0.68 */
    w = 1.0f;
    a = 0.75f;
    be->adagrad_step(1, 0.1f, &g, &w, &a);
    check_value(&t, be->name, "adagrad accum", 0, 1.0, a); /* 0.75 + 0.25 */
    check_value(&t, be->name, "adagrad w", 0, 0.95, w);    /* 1 - 0.1 * 0.5 / sqrt(1) */
    w = 1.0f;
    be->adam_step(1, 0.1f, 0.5f, 0.75f, 0.0f, &g, &w, &m, &v);
    check_value(&t, be->name, "adam m", 0, 0.35, m);   /* 0.5 * 0.2 + 0.5 * 0.5 */
    check_value(&t, be->name, "adam v", 0, 0.0925, v); /* 0.75 * 0.04 + 0.25 * 0.25 */
    /* 1 - 0.1 * 0.35 / sqrt(0.0925) = 1 - 0.035 / 0.30413813 */
    check_value(&t, be->name, "adam w", 0, 0.88492055134710973, w);
}

/* --- sizes of zero -------------------------------------------------------------------- */

/* Every op with a zero size, NULL pointers and nothing to do (backend.h allows NULL when a
 * size is 0); gemm with k = 0 is C = beta C. */
static void test_zero_sizes(void **state) {
    (void)state;
    const pf_backend *all[] = {pf_backend_reference(), pf_backend_openblas()};
    for (size_t b = 0; b < ARRAY_LEN(all); b++) {
        const pf_backend *be = all[b];
        be->upload(NULL, NULL, 0);
        be->download(NULL, NULL, 0);
        be->upload_i32(NULL, NULL, 0);
        be->fill(NULL, 1.0f, 0);
        be->copy(NULL, NULL, 0);
        be->gemm(false, false, 0, 0, 0, 1.0f, NULL, 1, NULL, 1, 0.0f, NULL, 1);
        be->gemm(true, true, 0, 5, 3, 1.0f, NULL, 1, NULL, 3, 0.0f, NULL, 5);
        be->gemm(false, false, 4, 0, 3, 1.0f, NULL, 3, NULL, 1, 0.0f, NULL, 1);
        be->axpy(0, 2.0f, NULL, NULL);
        be->scale(0, 2.0f, NULL);
        be->bias_add(0, 3, NULL, NULL);
        be->bias_add(3, 0, NULL, NULL);
        be->bias_grad(3, 0, NULL, NULL);
        for (size_t a = 0; a < ARRAY_LEN(ACTS); a++) {
            be->activation(ACTS[a], 0, NULL, NULL);
            be->activation_grad(ACTS[a], 0, NULL, NULL, NULL);
        }
        assert_true(be->softmax_xent(0, 10, NULL, NULL, NULL) == 0.0f);
        assert_true(be->mse(0, NULL, NULL, NULL) == 0.0f);
        assert_int_equal(be->count_correct(0, 10, NULL, NULL), 0);
        assert_true(be->xent_sum(0, 10, NULL, NULL) == 0.0);
        be->sgd_step(0, 0.1f, NULL, NULL);
        be->momentum_step(0, 0.1f, 0.9f, NULL, NULL, NULL);
        be->adagrad_step(0, 0.1f, NULL, NULL, NULL);
        be->adam_step(0, 0.1f, 0.9f, 0.999f, 1e-7f, NULL, NULL, NULL, NULL);

        /* bias_grad over zero rows: db = 0. */
        float db_host[3] = {NAN, NAN, NAN};
        float *db = put(be, db_host, 3);
        be->bias_grad(0, 3, NULL, db);
        take(be, db_host, db, 3);
        for (int i = 0; i < 3; i++)
            assert_true(db_host[i] == 0.0f);

        /* k = 0: the product is empty, C = beta C; lda = ldb = 0 is allowed. */
        static const float c_init[6] = {1, 2, 3, 4, 5, 6};
        float c[6];
        float *dc = put(be, c_init, 6);
        be->gemm(false, false, 2, 3, 0, 1.0f, NULL, 0, NULL, 3, 0.5f, dc, 3);
        take(be, c, dc, 6);
        for (int i = 0; i < 6; i++)
            assert_true(c[i] == 0.5f * c_init[i]);
        float nan6[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
        dc = put(be, nan6, 6);
        be->gemm(true, false, 2, 3, 0, 1.0f, NULL, 2, NULL, 3, 0.0f, dc, 3);
        take(be, c, dc, 6);
        for (int i = 0; i < 6; i++)
            assert_true(c[i] == 0.0f);
    }
}

/* --- device selection ----------------------------------------------------------------- */

static bool starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* "cpu" always gives openblas; what "cuda", "cuda:N" and "auto" give depends on the build
 * and on the machine, and each case is checked: no CUDA in the build, CUDA but no usable GPU
 * (the one-line reason, the CPU for "auto"), a usable GPU (the cuda table, bound to GPU 0).
 * tests/compute/test_cuda.c checks the cuda ops themselves. */
static void test_backend_for_device(void **state) {
    (void)state;
    const pf_backend *be = NULL;
    pf_error err;
    pf_error_clear(&err);
    assert_int_equal(pf_backend_for_device(PF_DEVICE_CPU, 0, &be, &err), PF_OK);
    assert_ptr_equal(be, pf_backend_openblas());
    assert_string_equal(err.message, ""); /* nothing to log */
    assert_int_equal(pf_backend_for_device(PF_DEVICE_CUDA, -1, &be, &err), PF_ERR_INVALID);
    assert_null(be);

    be = pf_backend_reference();
    pf_status st = pf_backend_for_device(PF_DEVICE_CUDA, 0, &be, &err);
    if (st == PF_OK) { /* a build with CUDA on a machine with a usable GPU */
#ifndef PSFLOW_HAVE_CUDA
        fail_msg("a build without CUDA returned a backend for \"cuda\": %s", be->name);
#endif
        assert_string_equal(be->name, "cuda");
        assert_true(starts_with(err.message, "device cuda:0: "));
        print_message("  %s\n", err.message);
        const pf_backend *again = NULL;
        assert_int_equal(pf_backend_for_device(PF_DEVICE_AUTO, 0, &again, &err), PF_OK);
        assert_ptr_equal(again, be);
        assert_true(starts_with(err.message, "device cuda:0: "));
        /* A GPU past the last one is refused, naming the GPUs there are (no machine has 256),
         * and leaves the thread on GPU 0. */
        assert_int_equal(pf_backend_for_device(PF_DEVICE_CUDA, 255, &again, &err),
                         PF_ERR_UNSUPPORTED);
        assert_null(again);
        assert_true(starts_with(err.message, "device \"cuda:255\" is not usable: only "));
        assert_true(ends_with(err.message, "; use \"cpu\", or \"auto\" to fall back to the CPU"));
        assert_int_equal(pf_backend_for_device(PF_DEVICE_CUDA, 0, &again, &err), PF_OK);
        assert_ptr_equal(again, be);
        return;
    }
    assert_int_equal(st, PF_ERR_UNSUPPORTED);
    assert_null(be);
    assert_string_equal(err.pointer, "");
    assert_null(strchr(err.message, '\n'));
    print_message("  %s\n", err.message);
    const char *prefix = "device \"cuda\" is not usable: ";
    const char *suffix = "; use \"cpu\", or \"auto\" to fall back to the CPU";
    assert_true(starts_with(err.message, prefix));
    assert_true(ends_with(err.message, suffix));
#ifdef PSFLOW_HAVE_CUDA
    /* CUDA built, no usable GPU: the probe's reason, in one line. */
    char reason[sizeof err.message];
    size_t len = strlen(err.message) - strlen(prefix) - strlen(suffix);
    assert_true(len > 0);
    memcpy(reason, err.message + strlen(prefix), len);
    reason[len] = '\0';
#else
    assert_string_equal(err.message, "device \"cuda\" is not usable: this psflow was built "
                                     "without CUDA; use \"cpu\", or \"auto\" to fall back to "
                                     "the CPU");
    const char *reason = "this psflow was built without CUDA";
#endif
    /* "cuda:N" is named as written, for the same reason. */
    assert_int_equal(pf_backend_for_device(PF_DEVICE_CUDA, 3, &be, &err), PF_ERR_UNSUPPORTED);
    assert_true(starts_with(err.message, "device \"cuda:3\" is not usable: "));
    /* err may be NULL */
    assert_int_equal(pf_backend_for_device(PF_DEVICE_CUDA, 0, &be, NULL), PF_ERR_UNSUPPORTED);

    /* "auto" trains on the CPU and says why, with the same reason. */
    be = pf_backend_reference();
    assert_int_equal(pf_backend_for_device(PF_DEVICE_AUTO, 0, &be, &err), PF_OK);
    assert_ptr_equal(be, pf_backend_openblas());
    char want[512];
    snprintf(want, sizeof want, "device \"auto\": no usable GPU (%s); training on the CPU", reason);
    assert_string_equal(err.message, want);
    assert_int_equal(pf_backend_for_device(PF_DEVICE_AUTO, 0, &be, NULL), PF_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_gemm_known),
        cmocka_unit_test(test_gemm_parity),
        cmocka_unit_test(test_axpy_scale),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_activation),
        cmocka_unit_test(test_activation_known),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_softmax_xent_known),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_count_correct),
        cmocka_unit_test(test_optimizer_steps),
        cmocka_unit_test(test_optimizer_steps_known),
        cmocka_unit_test(test_zero_sizes),
        cmocka_unit_test(test_backend_for_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
