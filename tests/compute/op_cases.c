/* op_cases.c - the table of backend op cases (see op_cases.h): each case runs its op on the
 * backend under test and on the reference oracle from the same seeded inputs and compares. */
#include "tests/compute/op_cases.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/mem.h"
#include "psflow/rng.h"
#include "tests/support/backend_check.h"

/* Past one grid of the CUDA kernels (4096 blocks x 256 threads = 1048576 elements, rows or
 * columns): every thread loops. */
#define PAST_GRID      ((size_t)2 * 1048576 + 5)
#define PAST_GRID_ROWS 1048583

static const pf_backend *oracle(void) {
    return pf_backend_reference();
}

/* Elementwise lengths: 1, odd sizes around SIMD widths (8, 16) and warp and block sizes
 * (32, 256), a few thousand, and past one grid. */
static const size_t LENGTHS[] = {1,  2,   3,   7,   8,   13,   16,   31,       32,
                                 33, 129, 255, 256, 257, 1000, 4099, PAST_GRID};

bool op_case_applies(const op_case *c, const pf_backend *be, const char **why) {
    if ((c->flags & OP_CASE_NAN_RULES) && strcmp(be->name, "openblas") == 0) {
        *why = "openblas writes 0 for relu'(y <= 0) whatever dy is";
        return false;
    }
    return true;
}

/* --- gemm ----------------------------------------------------------------------------- */

/* Float sgemm against a double-accumulated dot product of up to 300 terms in [-1, 1]. */
static void case_gemm_parity(const pf_backend *be) {
    tol t = make_tol("gemm", GEMM_ATOL_BASE, GEMM_RTOL); /* atol grows with k */
    t.atol_text = GEMM_ATOL_TEXT;
    pf_rng rng;
    pf_rng_init(&rng, 42, 1);
    /* m, n, k: degenerate, odd, non-square, around SIMD and tile sizes (8, 16, 32, 64, 128),
     * k = 0. */
    static const int edge[][3] = {
        {1, 1, 1},     {1, 1, 7},     {7, 1, 1},     {1, 13, 1},    {7, 13, 33},  {13, 7, 129},
        {33, 129, 7},  {129, 33, 13}, {8, 8, 8},     {16, 16, 16},  {31, 33, 65}, {64, 64, 64},
        {127, 129, 1}, {1, 300, 300}, {300, 1, 257}, {65, 67, 300}, {2, 3, 0},    {3, 1, 0},
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
                    check_gemm_case(&t, &rng, &g, be);
                }
    for (int s = 0; s < 24; s++) {
        int m = rand_int(&rng, 1, 140), n = rand_int(&rng, 1, 140), k = rand_int(&rng, 1, 300);
        for (int tr = 0; tr < 4; tr++) {
            const float *ab = GEMM_ALPHA_BETA[pf_rng_below(&rng, ARRAY_LEN(GEMM_ALPHA_BETA))];
            gemm_case g = {tr & 1, tr & 2, m, n, k, ab[0], ab[1], rand_int(&rng, 0, 9)};
            check_gemm_case(&t, &rng, &g, be);
        }
    }
    /* k = 0 over more elements than one grid: C = beta C (on a GPU by a kernel, not cuBLAS). */
    gemm_case empty[] = {{false, false, 1100, 1000, 0, 1.0f, 0.0f, 3},
                         {true, true, 1100, 1000, 0, 1.0f, 0.5f, 0}};
    for (size_t i = 0; i < ARRAY_LEN(empty); i++)
        check_gemm_case(&t, &rng, &empty[i], be);
    report(&t);
}

/* The MLP's three products per layer (model.c), at batch 64, for 784-4096-10: forward
 * x . W, kernel gradient x^T . dy, input gradient dy . W^T. */
static void case_gemm_layer_shapes(const pf_backend *be) {
    tol t = make_tol("gemm layer shapes", GEMM_ATOL_BASE, GEMM_RTOL);
    t.atol_text = GEMM_ATOL_TEXT;
    pf_rng rng;
    pf_rng_init(&rng, 42, 9);
    static const int layers[][2] = {{784, 4096}, {4096, 10}};
    const int batch = 64;
    for (size_t l = 0; l < ARRAY_LEN(layers); l++) {
        const int in = layers[l][0], out = layers[l][1];
        gemm_case cases[] = {
            {false, false, batch, out, in, 1.0f, 0.0f, 0}, /* y = x . W */
            {true, false, in, out, batch, 1.0f, 0.0f, 0},  /* dW = x^T . dy */
            {false, true, batch, in, out, 1.0f, 0.0f, 0},  /* dx = dy . W^T */
        };
        for (size_t c = 0; c < ARRAY_LEN(cases); c++)
            check_gemm_case(&t, &rng, &cases[c], be);
    }
    report(&t);
}

/* --- axpy, scale, bias ---------------------------------------------------------------- */

static void case_axpy_scale(const pf_backend *be) {
    tol ta = make_tol("axpy", 1e-6, 1e-6), ts = make_tol("scale", 1e-6, 1e-6);
    static const float factors[] = {1.0f, -2.5f, 1e-3f, 0.0f, 37.0f};
    pf_rng rng;
    pf_rng_init(&rng, 42, 2);
    const pf_backend *ref = oracle();
    for (size_t l = 0; l < ARRAY_LEN(LENGTHS); l++) {
        const size_t n = LENGTHS[l];
        float *x = host_new(n), *y = host_new(n), *want = host_new(n), *got = host_new(n);
        for (size_t f = 0; f < ARRAY_LEN(factors); f++) {
            fill_uniform(&rng, x, n, -10.0f, 10.0f);
            fill_uniform(&rng, y, n, -10.0f, 10.0f);
            char ctx[64];
            snprintf(ctx, sizeof ctx, "n=%zu a=%g", n, (double)factors[f]);

            float *dx = put(ref, x, n), *dy = put(ref, y, n);
            ref->axpy(n, factors[f], dx, dy);
            take(ref, want, dy, n);
            ref->free(dx);
            dx = put(be, x, n);
            dy = put(be, y, n);
            be->axpy(n, factors[f], dx, dy);
            take(be, got, dy, n);
            be->free(dx);
            check_close(&ta, be->name, ctx, want, got, n);

            dx = put(ref, x, n);
            ref->scale(n, factors[f], dx);
            take(ref, want, dx, n);
            dx = put(be, x, n);
            be->scale(n, factors[f], dx);
            take(be, got, dx, n);
            check_close(&ts, be->name, ctx, want, got, n);
        }
        pf_free(got);
        pf_free(want);
        pf_free(y);
        pf_free(x);
    }
    report(&ta);
    report(&ts);
}

static void case_bias(const pf_backend *be) {
    /* bias_grad's atol grows with the rows summed (set per shape below). */
    tol tadd = make_tol("bias_add", 1e-6, 1e-6), tgrad = make_tol("bias_grad", 1e-5, 1e-5);
    tgrad.atol_text = "1e-5 + 1e-7 rows";
    /* rows x cols: one row or column, odd, tall, wide, past one grid of elements
     * (bias_add) and of columns (bias_grad's one thread per column). */
    static const int shapes[][2] = {{1, 1},    {1, 7},    {7, 1},       {7, 13},     {13, 33},
                                    {33, 129}, {129, 7},  {100, 10},    {300, 17},   {3, 1000},
                                    {5000, 3}, {3, 5000}, {1100, 1000}, {2, 1048583}};
    pf_rng rng;
    pf_rng_init(&rng, 42, 3);
    const pf_backend *ref = oracle();
    for (size_t s = 0; s < ARRAY_LEN(shapes); s++) {
        const int rows = shapes[s][0], cols = shapes[s][1];
        const size_t len = (size_t)rows * (size_t)cols;
        float *x = host_new(len), *bias = host_new((size_t)cols), *want = host_new(len);
        float *got = host_new(len), *nan_db = host_new((size_t)cols);
        fill_uniform(&rng, x, len, -3.0f, 3.0f);
        fill_uniform(&rng, bias, (size_t)cols, -3.0f, 3.0f);
        for (int c = 0; c < cols; c++)
            nan_db[c] = NAN; /* bias_grad overwrites db */
        char ctx[64];
        snprintf(ctx, sizeof ctx, "rows=%d cols=%d", rows, cols);

        float *dx = put(ref, x, len), *dbias = put(ref, bias, (size_t)cols);
        ref->bias_add(rows, cols, dbias, dx);
        take(ref, want, dx, len);
        ref->free(dbias);
        dx = put(be, x, len);
        dbias = put(be, bias, (size_t)cols);
        be->bias_add(rows, cols, dbias, dx);
        take(be, got, dx, len);
        be->free(dbias);
        check_close(&tadd, be->name, ctx, want, got, len);

        tgrad.atol = 1e-5 + 1e-7 * rows;
        dx = put(ref, x, len);
        float *ddb = put(ref, nan_db, (size_t)cols);
        ref->bias_grad(rows, cols, dx, ddb);
        take(ref, want, ddb, (size_t)cols);
        ref->free(dx);
        dx = put(be, x, len);
        ddb = put(be, nan_db, (size_t)cols);
        be->bias_grad(rows, cols, dx, ddb);
        take(be, got, ddb, (size_t)cols);
        be->free(dx);
        check_close(&tgrad, be->name, ctx, want, got, (size_t)cols);
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

/* Uniform values with the edge cases over the first elements: zeros of both signs, tiny
 * values, magnitudes where tanh and sigmoid saturate or exp overflows, infinities, NaN. */
static void fill_activation_inputs(pf_rng *rng, float *x, size_t n) {
    static const float special[] = {0.0f,  -0.0f,  1e-8f,    -1e-8f,    1.0f,   -1.0f,
                                    20.0f, -20.0f, 88.0f,    -88.0f,    100.0f, -100.0f,
                                    1e30f, -1e30f, INFINITY, -INFINITY, NAN};
    fill_uniform(rng, x, n, -6.0f, 6.0f);
    for (size_t i = 0; i < n && i < ARRAY_LEN(special); i++)
        x[i] = special[i];
}

/* act forward on `be` from x, out of place (over NaN) and in place, against want. */
static void check_activation(tol *t, const pf_backend *be, pf_activation act, size_t n,
                             const float *x, const float *junk, const float *want, float *got) {
    for (int in_place = 0; in_place < 2; in_place++) {
        char ctx[64];
        snprintf(ctx, sizeof ctx, "n=%zu%s", n, in_place ? " in place" : "");
        float *dx = put(be, x, n);
        float *dout = in_place ? dx : put(be, junk, n);
        be->activation(act, n, dx, dout);
        take(be, got, dout, n);
        if (!in_place)
            be->free(dx);
        check_close(t, be->name, ctx, want, got, n);
    }
}

/* act backward on `be` from y and dy, out of place (over NaN) and in place, against want. */
static void check_activation_grad(tol *t, const pf_backend *be, pf_activation act, size_t n,
                                  const float *y, const float *dy, const float *junk,
                                  const float *want, float *got) {
    for (int in_place = 0; in_place < 2; in_place++) {
        char ctx[64];
        snprintf(ctx, sizeof ctx, "n=%zu%s", n, in_place ? " in place" : "");
        float *dyv = put(be, y, n), *ddy = put(be, dy, n);
        float *dout = in_place ? ddy : put(be, junk, n);
        be->activation_grad(act, n, dyv, ddy, dout);
        take(be, got, dout, n);
        if (!in_place)
            be->free(ddy);
        be->free(dyv);
        check_close(t, be->name, ctx, want, got, n);
    }
}

static void case_activation(const pf_backend *be) {
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
    const pf_backend *ref = oracle();
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

            float *dx = put(ref, x, n), *dout = put(ref, junk, n);
            ref->activation(act, n, dx, dout);
            take(ref, want, dout, n);
            ref->free(dx);
            memcpy(y, want, n * sizeof *y); /* the output the gradient starts from */
            check_activation(&tact[a], be, act, n, x, junk, want, got);

            /* Backward from the reference's y. */
            float *dyv = put(ref, y, n), *ddy = put(ref, dy, n);
            dout = put(ref, junk, n);
            ref->activation_grad(act, n, dyv, ddy, dout);
            take(ref, want, dout, n);
            ref->free(ddy);
            ref->free(dyv);
            check_activation_grad(&tgrad[a], be, act, n, y, dy, junk, want, got);
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

/* --- losses --------------------------------------------------------------------------- */

/* Logit scales: ordinary, large (exp would overflow without the max shift) and huge (the
 * difference of two logits is itself ~1e30). */
static const float LOGIT_SCALES[] = {3.0f, 1e4f, 1e30f};

static void expect_all_finite(const char *what, const char *backend, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            fail_msg("%s [%s]: element %zu is %g", what, backend, i, (double)x[i]);
}

typedef struct xent_tols {
    tol loss, grad, sum;
} xent_tols;

/* softmax_xent on `be`, out of place (with xent_sum) and in place, against the reference's
 * loss, gradient and sum. */
static void check_softmax_xent(xent_tols *t, const pf_backend *be, const char *ctx, int rows,
                               int cols, const float *logits, const int32_t *labels,
                               float want_loss, const float *want, double want_sum, float *got) {
    const size_t len = (size_t)rows * (size_t)cols;
    for (int in_place = 0; in_place < 2; in_place++) {
        float *dl = put(be, logits, len);
        float *dd = in_place ? dl : put(be, logits, len);
        int32_t *dlab = put_i32(be, labels, (size_t)rows);
        double sum = in_place ? 0.0 : be->xent_sum(rows, cols, dl, dlab);
        float loss = be->softmax_xent(rows, cols, dl, dlab, dd);
        take(be, got, dd, len);
        be->free(dlab);
        if (!in_place)
            be->free(dl);
        expect_all_finite("softmax_xent grad", be->name, got, len);
        check_value(&t->loss, be->name, ctx, 0, want_loss, loss);
        check_close(&t->grad, be->name, ctx, want, got, len);
        if (!in_place)
            check_value(&t->sum, be->name, ctx, 0, want_sum, sum);
    }
}

static void case_softmax_xent(const pf_backend *be) {
    /* dlogits are probabilities / rows, so at most 1 in magnitude; exp in float vs double. */
    xent_tols t = {make_tol("softmax_xent loss", 1e-6, 1e-6),
                   make_tol("softmax_xent grad", 1e-7, 1e-5), make_tol("xent_sum", 1e-6, 1e-6)};
    /* One class, two, the MLP's ten, odd, wide; rows past one grid (one thread per row). */
    static const int shapes[][2] = {
        {1, 1},    {5, 1},    {1, 2},  {7, 10},    {13, 33},           {100, 10},
        {33, 129}, {3, 1000}, {64, 7}, {1024, 10}, {PAST_GRID_ROWS, 3}};
    pf_rng rng;
    pf_rng_init(&rng, 42, 5);
    const pf_backend *ref = oracle();
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
            edge_labels(&rng, labels, rows, cols);
            char ctx[64];
            snprintf(ctx, sizeof ctx, "rows=%d cols=%d scale=%g", rows, cols, (double)scale);

            float *dl = put(ref, logits, len), *dd = put(ref, logits, len);
            int32_t *dlab = put_i32(ref, labels, (size_t)rows);
            float want_loss = ref->softmax_xent(rows, cols, dl, dlab, dd);
            double want_sum = ref->xent_sum(rows, cols, dl, dlab);
            take(ref, want, dd, len);
            ref->free(dlab);
            ref->free(dl);
            assert_true(isfinite(want_loss));
            expect_all_finite("softmax_xent reference grad", ref->name, want, len);

            check_softmax_xent(&t, be, ctx, rows, cols, logits, labels, want_loss, want, want_sum,
                               got);
            pf_free(labels);
            pf_free(got);
            pf_free(want);
            pf_free(logits);
        }
    report(&t.loss);
    report(&t.grad);
    report(&t.sum);
}

static void case_mse(const pf_backend *be) {
    tol tloss = make_tol("mse loss", 1e-6, 1e-6), tgrad = make_tol("mse grad", 1e-7, 1e-6);
    pf_rng rng;
    pf_rng_init(&rng, 42, 6);
    const pf_backend *ref = oracle();
    for (size_t l = 0; l < ARRAY_LEN(LENGTHS); l++) {
        const size_t n = LENGTHS[l];
        float *pred = host_new(n), *target = host_new(n), *want = host_new(n), *got = host_new(n);
        fill_uniform(&rng, pred, n, -10.0f, 10.0f);
        fill_uniform(&rng, target, n, -10.0f, 10.0f);
        char ctx[32];
        snprintf(ctx, sizeof ctx, "n=%zu", n);

        float *dp = put(ref, pred, n), *dt = put(ref, target, n), *dd = put(ref, pred, n);
        float want_loss = ref->mse(n, dp, dt, dd);
        take(ref, want, dd, n);
        ref->free(dt);
        ref->free(dp);
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
        pf_free(got);
        pf_free(want);
        pf_free(target);
        pf_free(pred);
    }
    report(&tloss);
    report(&tgrad);
}

/* The first largest logit of each row, as a loop that any reader can check: a NaN is never
 * larger than anything, so a NaN in column 0 keeps column 0 the answer. */
static int count_first_argmax(int rows, int cols, const float *logits, const int32_t *labels) {
    int count = 0;
    for (int r = 0; r < rows; r++) {
        const float *row = logits + (size_t)r * (size_t)cols;
        int best = 0;
        for (int c = 1; c < cols; c++)
            if (row[c] > row[best])
                best = c;
        count += best == labels[r];
    }
    return count;
}

static int count_on(const pf_backend *be, int rows, int cols, const float *logits,
                    const int32_t *labels) {
    float *dl = put(be, logits, (size_t)rows * (size_t)cols);
    int32_t *dlab = put_i32(be, labels, (size_t)rows);
    int got = be->count_correct(rows, cols, dl, dlab);
    be->free(dlab);
    be->free(dl);
    return got;
}

/* Exact agreement with the reference, whose answer is checked by count_first_argmax: ties
 * everywhere (logits from {0, 1, 2}), labels in the first and last column, a NaN in every
 * 17th row, and rows past one grid. */
static void case_count_correct(const pf_backend *be) {
    static const int shapes[][2] = {{1, 1}, {7, 4}, {500, 10}, {1000, 3}, {PAST_GRID_ROWS, 3}};
    pf_rng rng;
    pf_rng_init(&rng, 42, 7);
    for (size_t s = 0; s < ARRAY_LEN(shapes); s++) {
        const int rows = shapes[s][0], cols = shapes[s][1];
        const size_t len = (size_t)rows * (size_t)cols;
        float *logits = host_new(len);
        int32_t *labels = pf_malloc((size_t)rows * sizeof *labels);
        assert_non_null(labels);
        for (size_t i = 0; i < len; i++)
            logits[i] = (float)pf_rng_below(&rng, 3);
        for (int r = 0; r < rows; r += 17)
            logits[(size_t)r * (size_t)cols + pf_rng_below(&rng, (uint64_t)cols)] = NAN;
        edge_labels(&rng, labels, rows, cols);
        int want = count_on(oracle(), rows, cols, logits, labels);
        assert_int_equal(want, count_first_argmax(rows, cols, logits, labels));
        int got = count_on(be, rows, cols, logits, labels);
        if (got != want)
            fail_msg("count_correct [%s] rows=%d cols=%d: %d, reference %d", be->name, rows, cols,
                     got, want);
        print_message("  count_correct rows=%d cols=%d: %d correct, as the reference\n", rows, cols,
                      got);
        pf_free(labels);
        pf_free(logits);
    }
}

/* --- optimizer steps ------------------------------------------------------------------ */

/* Where one optimizer starts from: weights, valid slot states and three gradients. */
typedef struct opt_start {
    int opt;
    size_t n;
    float *w, *s0, *s1, *g[3];
} opt_start;

static void opt_start_init(opt_start *st, pf_rng *rng, int opt, size_t n) {
    st->opt = opt;
    st->n = n;
    st->w = host_new(n);
    st->s0 = host_new(n);
    st->s1 = host_new(n);
    fill_uniform(rng, st->w, n, -2.0f, 2.0f);
    for (int k = 0; k < 3; k++) {
        st->g[k] = host_new(n);
        fill_uniform(rng, st->g[k], n, -1.0f, 1.0f);
        if (n > 3)
            st->g[k][3] = 0.0f; /* a zero gradient: adam's 0 / (0 + eps) */
    }
    /* Valid slot states: momentum any sign; adagrad accumulator > 0; adam m any sign,
     * v >= 0. */
    fill_uniform(rng, st->s0, n, opt == OPT_ADAGRAD ? 0.1f : -0.5f, 0.5f);
    fill_uniform(rng, st->s1, n, 0.0f, 0.01f);
    if (opt == OPT_ADAM && n > 3)
        st->s0[3] = st->s1[3] = 0.0f;
}

static void opt_start_deinit(opt_start *st) {
    for (int k = 0; k < 3; k++)
        pf_free(st->g[k]);
    pf_free(st->s1);
    pf_free(st->s0);
    pf_free(st->w);
}

/* Three steps on `be` from st; after[k] = the weights and both slots after step k (new
 * host buffers, freed by free_after). */
static void opt_steps(const pf_backend *be, const opt_start *st, float *after[3][3]) {
    const size_t n = st->n;
    float *dw = put(be, st->w, n), *d0 = put(be, st->s0, n), *d1 = put(be, st->s1, n);
    float *dg = put(be, st->g[0], n);
    for (int k = 0; k < 3; k++) {
        be->upload(dg, st->g[k], n);
        run_step(be, st->opt, n, dg, dw, d0, d1);
        for (int j = 0; j < 3; j++)
            after[k][j] = host_new(n);
        be->download(after[k][0], dw, n);
        be->download(after[k][1], d0, n);
        be->download(after[k][2], d1, n);
    }
    be->free(dg);
    be->free(d1);
    be->free(d0);
    be->free(dw);
}

static void free_after(float *after[3][3]) {
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 3; j++)
            pf_free(after[k][j]);
}

/* Three consecutive steps with fresh gradients (so the slots carry state), from the same
 * start on both sides, compared after each step: weights and slots. */
static void case_optimizer_steps(const pf_backend *be) {
    tol tw[NUM_OPTS], ts[NUM_OPTS];
    char names[NUM_OPTS][32];
    for (int o = 0; o < NUM_OPTS; o++) {
        snprintf(names[o], sizeof names[o], "%s slots", OPT_NAMES[o]);
        tw[o] = make_tol(OPT_NAMES[o], 1e-6, 1e-6);
        ts[o] = make_tol(names[o], 1e-6, 1e-6);
    }
    pf_rng rng;
    pf_rng_init(&rng, 42, 8);
    for (size_t l = 0; l < ARRAY_LEN(LENGTHS); l++)
        for (int o = 0; o < NUM_OPTS; o++) {
            const size_t n = LENGTHS[l];
            opt_start st;
            opt_start_init(&st, &rng, o, n);
            float *want[3][3], *got[3][3];
            opt_steps(oracle(), &st, want);
            opt_steps(be, &st, got);
            for (int k = 0; k < 3; k++) {
                char ctx[48];
                snprintf(ctx, sizeof ctx, "n=%zu step %d", n, k + 1);
                check_close(&tw[o], be->name, ctx, want[k][0], got[k][0], n);
                check_close(&ts[o], be->name, ctx, want[k][1], got[k][1], n);
                check_close(&ts[o], be->name, ctx, want[k][2], got[k][2], n);
            }
            free_after(got);
            free_after(want);
            opt_start_deinit(&st);
        }
    for (int o = 0; o < NUM_OPTS; o++)
        report(&tw[o]);
    for (int o = 0; o < NUM_OPTS; o++)
        report(&ts[o]);
}

/* --- the table ------------------------------------------------------------------------ */

const op_case OP_CASES[] = {
    {"test_ops_present", check_ops_present, OP_CASE_ON_ORACLE},
    {"test_memory", check_memory, OP_CASE_ON_ORACLE},
    {"test_zero_sizes", check_zero_sizes, OP_CASE_ON_ORACLE},
    {"test_gemm_known", check_gemm_known, OP_CASE_ON_ORACLE},
    {"test_gemm_parity", case_gemm_parity, 0},
    {"test_gemm_layer_shapes", case_gemm_layer_shapes, 0},
    {"test_axpy_scale", case_axpy_scale, 0},
    {"test_bias", case_bias, 0},
    {"test_activation", case_activation, 0},
    {"test_activation_known", check_activation_known, OP_CASE_ON_ORACLE},
    {"test_activation_nan", check_activation_nan, OP_CASE_ON_ORACLE | OP_CASE_NAN_RULES},
    {"test_softmax_xent", case_softmax_xent, 0},
    {"test_softmax_xent_known", check_softmax_xent_known, OP_CASE_ON_ORACLE},
    {"test_mse", case_mse, 0},
    {"test_mse_known", check_mse_known, OP_CASE_ON_ORACLE},
    {"test_count_correct", case_count_correct, 0},
    {"test_count_correct_known", check_count_correct_known, OP_CASE_ON_ORACLE},
    {"test_optimizer_steps", case_optimizer_steps, 0},
    {"test_optimizer_steps_known", check_optimizer_steps_known, OP_CASE_ON_ORACLE},
};
_Static_assert(ARRAY_LEN(OP_CASES) == OP_CASES_LEN, "OP_CASES_LEN is the table's length");
