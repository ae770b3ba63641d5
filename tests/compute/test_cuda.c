/* test_cuda.c - every op of the "cuda" backend against the reference backend, on a GPU.
 *
 * What it checks: each op of backend.h, run on the GPU, agrees with the "reference" backend
 * (naive double-precision loops, common/compute/cpu/reference.c) on seeded random inputs and
 * on the cases that break GPU kernels and their host glue:
 *   - sizes of 1, odd sizes, and sizes past one grid (the kernels launch at most 4096
 *     blocks of 256 threads, so from 1048577 elements on every thread loops);
 *   - gemm with all four transposes, row strides larger than the rows (the padding of A and
 *     B is NaN, so reading it shows; C's padding holds a sentinel that must survive),
 *     beta = 0 over a NaN-filled C (C must not be read), k = 0, the MLP's layer shapes;
 *   - in-place calls where backend.h allows them (activation, activation_grad, softmax_xent,
 *     mse), NaN and infinity where the reference gives a defined answer;
 *   - labels in the first and the last column, ties (count_correct takes the first largest
 *     logit), logits up to 1e30 (softmax must subtract the row's max);
 *   - host transfers larger than the 4 MiB pinned staging buffers, a host buffer reused at
 *     once after an upload, nothing written past the end of a download;
 *   - ops issued from several threads (each gets its own cuBLAS handle), also from threads
 *     that each choose a GPU (on a machine with several, different ones).
 *
 * Tolerances: every element must satisfy |ref - x| <= atol + rtol |ref|, and NaN must meet
 * NaN (same for infinities):
 *   gemm                                  atol 1e-6 + 2.5e-7 k max(1, |alpha|), rtol 1e-4:
 *                                         a float dot product of k terms in [-1, 1] is off by
 *                                         about eps k |alpha| in the worst case, the
 *                                         reference's double sum is exact by comparison
 *   axpy scale bias_add activations, their gradients, mse, optimizer steps (and slots)
 *                                         atol 1e-6, rtol 1e-6: the kernels compute in double
 *                                         as the reference does and round once, so 0 or 1 ulp
 *   bias_grad                             atol 1e-5 + 1e-7 rows, rtol 1e-5: a float sum of
 *                                         rows terms would be off by about eps rows; the
 *                                         kernel sums in double, far inside the bound
 *   softmax_xent loss, xent_sum, mse loss atol 1e-6, rtol 1e-6
 *   softmax_xent gradient                 atol 1e-7, rtol 1e-5
 *   count_correct, memory round trips     exact
 * Each test prints, per op, how many values it compared, the largest error, and the worst
 * case as a fraction of its bound (a GPU tester can see how much room is left).
 *
 * Running it: `ctest -L gpu` or build/tests/test_cuda. Without a usable GPU (a build without
 * CUDA, no driver, no device) it prints "skipped: <reason>" and exits 77, which CTest reports
 * as Skipped, never as Passed. On a machine that has a GPU, set PSFLOW_TEST_REQUIRE_GPU=1:
 * then a GPU that cannot be used fails the test instead of skipping it.
 * PSFLOW_TEST_CUDA_STANDIN=openblas (or reference) runs every test here against that CPU
 * backend in place of cuda, which checks this file itself on a machine without a GPU and
 * says nothing about cuda (the NaN test needs the reference's NaN rules and skips with
 * openblas).
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/compute/gpu_test.h"
#include "psflow/backend.h"
#include "psflow/mem.h"
#include "psflow/rng.h"
#include "tests/support/backend_check.h"

/* Past one grid of the kernels (4096 blocks x 256 threads = 1048576): every thread loops. */
#define PAST_GRID ((size_t)2 * 1048576 + 5)
/* The staging buffers hold 4 MiB = 1048576 floats each. */
#define STAGE_FLOATS ((size_t)1048576)

static const pf_backend *gpu; /* the backend under test: cuda, or the stand-in */
static bool standin;

static const pf_backend *oracle(void) {
    return pf_backend_reference();
}

/* Elementwise lengths: 1, odd sizes around warp and block sizes, a few thousand, and past
 * one grid. */
static const size_t LENGTHS[] = {1, 2, 3, 7, 31, 32, 33, 255, 256, 257, 1000, 4099, PAST_GRID};

/* --- table and memory ----------------------------------------------------------------- */

static void test_table(void **state) {
    (void)state;
    assert_string_equal(gpu->name, standin ? gpu->name : "cuda");
    const bool present[] = {
        gpu->alloc != NULL,         gpu->free != NULL,
        gpu->upload != NULL,        gpu->download != NULL,
        gpu->upload_i32 != NULL,    gpu->fill != NULL,
        gpu->copy != NULL,          gpu->gemm != NULL,
        gpu->axpy != NULL,          gpu->scale != NULL,
        gpu->bias_add != NULL,      gpu->bias_grad != NULL,
        gpu->activation != NULL,    gpu->activation_grad != NULL,
        gpu->softmax_xent != NULL,  gpu->mse != NULL,
        gpu->count_correct != NULL, gpu->xent_sum != NULL,
        gpu->sgd_step != NULL,      gpu->momentum_step != NULL,
        gpu->adagrad_step != NULL,  gpu->adam_step != NULL,
    };
    for (size_t i = 0; i < ARRAY_LEN(present); i++)
        if (!present[i])
            fail_msg("op %zu of the %s table (in backend.h order) is NULL", i, gpu->name);
    if (standin)
        return;
    /* Asking again gives the same table, bound to the same GPU. */
    const pf_backend *again = NULL;
    pf_error err;
    assert_int_equal(pf_backend_for_device(PF_DEVICE_CUDA, 0, &again, &err), PF_OK);
    assert_ptr_equal(again, gpu);
    print_message("  %s\n", err.message);
}

/* Upload and download are exact, for sizes below, at and past the staging buffers; a
 * download writes nothing past its end. */
static void test_round_trip(void **state) {
    (void)state;
    static const size_t sizes[] = {1,
                                   7,
                                   1031,
                                   STAGE_FLOATS - 1,
                                   STAGE_FLOATS,
                                   STAGE_FLOATS + 1,
                                   2 * STAGE_FLOATS + STAGE_FLOATS / 2 + 3};
    pf_rng rng;
    pf_rng_init(&rng, 7, 100);
    for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
        const size_t n = sizes[s];
        float *src = host_new(n), *back = host_new(n + 16);
        fill_uniform(&rng, src, n, -5.0f, 5.0f);
        for (size_t i = 0; i < n + 16; i++)
            back[i] = -777.0f;
        float *d = put(gpu, src, n);
        take(gpu, back, d, n);
        if (memcmp(back, src, n * sizeof *src) != 0)
            fail_msg("round trip of %zu floats is not exact", n);
        for (size_t i = n; i < n + 16; i++)
            if (back[i] != -777.0f)
                fail_msg("download of %zu floats wrote element %zu", n, i);

        /* int32 too */
        int32_t *isrc = pf_malloc(n * sizeof *isrc), *iback = pf_malloc(n * sizeof *iback);
        assert_non_null(isrc);
        assert_non_null(iback);
        for (size_t i = 0; i < n; i++)
            isrc[i] = (int32_t)(uint32_t)(i * 2654435761u);
        int32_t *di = put_i32(gpu, isrc, n);
        /* download takes floats: the bits come back unchanged either way */
        gpu->download((float *)iback, (const float *)di, n);
        gpu->free(di);
        if (memcmp(iback, isrc, n * sizeof *isrc) != 0)
            fail_msg("int32 round trip of %zu values is not exact", n);
        pf_free(iback);
        pf_free(isrc);
        pf_free(back);
        pf_free(src);
    }
}

/* An upload has taken the host data when it returns: the caller may overwrite its buffer
 * at once (the GPU copies from a pinned staging buffer, which must not be refilled while a
 * copy from it is still queued). */
static void test_upload_then_reuse(void **state) {
    (void)state;
    static const size_t sizes[] = {5, STAGE_FLOATS + 7, 3 * STAGE_FLOATS + 1};
    for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
        const size_t n = sizes[s];
        float *h = host_new(n), *back = host_new(n);
        float *d[4];
        for (int k = 0; k < 4; k++) {
            for (size_t i = 0; i < n; i++)
                h[i] = (float)(k * 1000003 + (int)(i % 1000003));
            d[k] = gpu->alloc(n * sizeof(float));
            assert_non_null(d[k]);
            gpu->upload(d[k], h, n); /* h is overwritten right after, by the next round */
        }
        for (int k = 0; k < 4; k++) {
            take(gpu, back, d[k], n);
            for (size_t i = 0; i < n; i++)
                if (back[i] != (float)(k * 1000003 + (int)(i % 1000003)))
                    fail_msg("upload %d of %zu floats: element %zu is %g, want %g", k, n, i,
                             (double)back[i], (double)(k * 1000003 + (int)(i % 1000003)));
        }
        pf_free(back);
        pf_free(h);
    }
}

static void test_fill_copy(void **state) {
    (void)state;
    static const size_t sizes[] = {1, 1031, PAST_GRID};
    pf_rng rng;
    pf_rng_init(&rng, 7, 101);
    for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
        const size_t n = sizes[s];
        const size_t off_dst = n > 20 ? 10 : 0, off_src = n > 20 ? 20 : 0;
        const size_t len = n > 20 ? n - 30 : n;
        float *src = host_new(n), *back = host_new(n);
        fill_uniform(&rng, src, n, -5.0f, 5.0f);
        float *x = put(gpu, src, n);
        float *y = gpu->alloc(n * sizeof(float));
        assert_non_null(y);
        gpu->fill(y, -3.5f, n);
        gpu->copy(y + off_dst, x + off_src, len);
        take(gpu, back, y, n);
        gpu->free(x);
        for (size_t i = 0; i < n; i++) {
            float want = (i >= off_dst && i < off_dst + len) ? src[i - off_dst + off_src] : -3.5f;
            if (back[i] != want)
                fail_msg("fill/copy, n=%zu: element %zu is %g, want %g", n, i, (double)back[i],
                         (double)want);
        }
        pf_free(back);
        pf_free(src);
    }
}

/* alloc reports running out of memory with NULL, and the backend works on afterwards. */
static void test_alloc_failure(void **state) {
    (void)state;
    if (standin)
        skip(); /* a CPU allocator under a sanitizer may abort instead of failing */
    void *huge = gpu->alloc((size_t)1 << 50); /* 1 PiB */
    assert_null(huge);
    static const float v[3] = {1, 2, 3};
    float back[3];
    float *d = put(gpu, v, 3);
    take(gpu, back, d, 3);
    assert_memory_equal(back, v, sizeof v);
}

/* --- gemm ----------------------------------------------------------------------------- */

/* A = [[1 2 3] [4 5 6]], B = [[7 8] [9 10] [11 12]]; 2 A.B - ones = [[115 127] [277 307]]
 * in every storage layout. Small integers are exact in float: cuBLAS must hit them. */
static void test_gemm_known(void **state) {
    (void)state;
    check_gemm_known(gpu);
}

/* One case on the oracle and on the GPU. */
static void run_gemm_case(tol *t, pf_rng *rng, const gemm_case *g) {
    check_gemm_case(t, rng, g, gpu);
}

static void test_gemm_parity(void **state) {
    (void)state;
    tol t = make_tol("gemm", GEMM_ATOL_BASE, GEMM_RTOL); /* atol grows with k */
    t.atol_text = GEMM_ATOL_TEXT;
    pf_rng rng;
    pf_rng_init(&rng, 42, 101);
    /* m, n, k: degenerate, odd, non-square, around tile sizes (16, 32, 64, 128), k = 0. */
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
    /* k = 0 over more elements than one grid: C = beta C by a kernel, not cuBLAS. */
    gemm_case empty[] = {{false, false, 1100, 1000, 0, 1.0f, 0.0f, 3},
                         {true, true, 1100, 1000, 0, 1.0f, 0.5f, 0}};
    for (size_t i = 0; i < ARRAY_LEN(empty); i++)
        run_gemm_case(&t, &rng, &empty[i]);
    report(&t);
}

/* The MLP's three products per layer (model.c), at batch 64, for 784-4096-10: forward
 * x . W, kernel gradient x^T . dy, input gradient dy . W^T. */
static void test_gemm_layer_shapes(void **state) {
    (void)state;
    tol t = make_tol("gemm layer shapes", GEMM_ATOL_BASE, GEMM_RTOL);
    t.atol_text = GEMM_ATOL_TEXT;
    pf_rng rng;
    pf_rng_init(&rng, 42, 102);
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
            run_gemm_case(&t, &rng, &cases[c]);
    }
    report(&t);
}

/* --- axpy, scale, bias ---------------------------------------------------------------- */

static void test_axpy_scale(void **state) {
    (void)state;
    tol ta = make_tol("axpy", 1e-6, 1e-6), ts = make_tol("scale", 1e-6, 1e-6);
    static const float factors[] = {1.0f, -2.5f, 1e-3f, 0.0f, 37.0f};
    pf_rng rng;
    pf_rng_init(&rng, 42, 103);
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
            dx = put(gpu, x, n);
            dy = put(gpu, y, n);
            gpu->axpy(n, factors[f], dx, dy);
            take(gpu, got, dy, n);
            gpu->free(dx);
            check_close(&ta, gpu->name, ctx, want, got, n);

            dx = put(ref, x, n);
            ref->scale(n, factors[f], dx);
            take(ref, want, dx, n);
            dx = put(gpu, x, n);
            gpu->scale(n, factors[f], dx);
            take(gpu, got, dx, n);
            check_close(&ts, gpu->name, ctx, want, got, n);
        }
        pf_free(got);
        pf_free(want);
        pf_free(y);
        pf_free(x);
    }
    report(&ta);
    report(&ts);
}

static void test_bias(void **state) {
    (void)state;
    /* bias_grad's atol grows with the rows summed (set per shape below). */
    tol tadd = make_tol("bias_add", 1e-6, 1e-6), tgrad = make_tol("bias_grad", 1e-5, 1e-5);
    tgrad.atol_text = "1e-5 + 1e-7 rows";
    /* rows x cols: one row or column, odd, tall, wide, past one grid of elements
     * (bias_add) and of columns (bias_grad's one thread per column). */
    static const int shapes[][2] = {{1, 1},    {1, 7},       {7, 1},      {7, 13},
                                    {13, 33},  {33, 129},    {100, 10},   {5000, 3},
                                    {3, 5000}, {1100, 1000}, {2, 1048583}};
    pf_rng rng;
    pf_rng_init(&rng, 42, 104);
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
        dx = put(gpu, x, len);
        dbias = put(gpu, bias, (size_t)cols);
        gpu->bias_add(rows, cols, dbias, dx);
        take(gpu, got, dx, len);
        gpu->free(dbias);
        check_close(&tadd, gpu->name, ctx, want, got, len);

        tgrad.atol = 1e-5 + 1e-7 * rows;
        dx = put(ref, x, len);
        float *ddb = put(ref, nan_db, (size_t)cols);
        ref->bias_grad(rows, cols, dx, ddb);
        take(ref, want, ddb, (size_t)cols);
        ref->free(dx);
        dx = put(gpu, x, len);
        ddb = put(gpu, nan_db, (size_t)cols);
        gpu->bias_grad(rows, cols, dx, ddb);
        take(gpu, got, ddb, (size_t)cols);
        gpu->free(dx);
        check_close(&tgrad, gpu->name, ctx, want, got, (size_t)cols);
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

static void test_activation(void **state) {
    (void)state;
    tol tact[4], tgrad[4];
    char names[8][32];
    for (int a = 0; a < 4; a++) {
        snprintf(names[a], sizeof names[a], "act %s", ACT_NAMES[a]);
        snprintf(names[4 + a], sizeof names[4 + a], "act_grad %s", ACT_NAMES[a]);
        tact[a] = make_tol(names[a], 1e-6, 1e-6);
        tgrad[a] = make_tol(names[4 + a], 1e-6, 1e-6);
    }
    pf_rng rng;
    pf_rng_init(&rng, 42, 105);
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
            char ctx[64];

            /* Forward, out of place (over NaN) and in place. */
            float *dx = put(ref, x, n), *dout = put(ref, junk, n);
            ref->activation(act, n, dx, dout);
            take(ref, want, dout, n);
            ref->free(dx);
            memcpy(y, want, n * sizeof *y); /* the output the gradient starts from */
            for (int in_place = 0; in_place < 2; in_place++) {
                snprintf(ctx, sizeof ctx, "n=%zu%s", n, in_place ? " in place" : "");
                dx = put(gpu, x, n);
                dout = in_place ? dx : put(gpu, junk, n);
                gpu->activation(act, n, dx, dout);
                take(gpu, got, dout, n);
                if (!in_place)
                    gpu->free(dx);
                check_close(&tact[a], gpu->name, ctx, want, got, n);
            }

            /* Backward from the reference's y, out of place (over NaN) and in place. */
            float *dyv = put(ref, y, n), *ddy = put(ref, dy, n);
            dout = put(ref, junk, n);
            ref->activation_grad(act, n, dyv, ddy, dout);
            take(ref, want, dout, n);
            ref->free(ddy);
            ref->free(dyv);
            for (int in_place = 0; in_place < 2; in_place++) {
                snprintf(ctx, sizeof ctx, "n=%zu%s", n, in_place ? " in place" : "");
                dyv = put(gpu, y, n);
                ddy = put(gpu, dy, n);
                dout = in_place ? ddy : put(gpu, junk, n);
                gpu->activation_grad(act, n, dyv, ddy, dout);
                take(gpu, got, dout, n);
                if (!in_place)
                    gpu->free(ddy);
                gpu->free(dyv);
                check_close(&tgrad[a], gpu->name, ctx, want, got, n);
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

/* The reference's NaN rules, which the CUDA kernels copy: relu(NaN) = 0; a relu gradient
 * is dy * 0 where y <= 0, so NaN or infinite dy gives NaN there, and dy where y > 0;
 * tanh and sigmoid pass NaN through. */
static void test_activation_nan(void **state) {
    (void)state;
    if (standin && strcmp(gpu->name, "reference") != 0)
        skip(); /* openblas writes 0 for relu'(y <= 0) whatever dy is */
    static const float x[] = {NAN, -NAN, 1.0f, -1.0f, INFINITY, -INFINITY};
    static const float y[] = {0.0f, -1.0f, 2.0f, 0.0f, 2.0f, NAN};
    static const float dy[] = {NAN, INFINITY, NAN, -INFINITY, 1.0f, 1.0f};
    const size_t n = ARRAY_LEN(x);
    tol t = make_tol("NaN rules", 1e-6, 1e-6); /* NaN and infinities must match exactly */
    for (int a = 0; a < 4; a++) {
        float want[ARRAY_LEN(x)], got[ARRAY_LEN(x)];
        float *d = put(oracle(), x, n);
        oracle()->activation(ACTS[a], n, d, d);
        take(oracle(), want, d, n);
        d = put(gpu, x, n);
        gpu->activation(ACTS[a], n, d, d);
        take(gpu, got, d, n);
        for (size_t i = 0; i < n; i++)
            check_value(&t, gpu->name, ACT_NAMES[a], i, want[i], got[i]);

        float *dyv = put(oracle(), y, n), *ddy = put(oracle(), dy, n);
        oracle()->activation_grad(ACTS[a], n, dyv, ddy, ddy);
        take(oracle(), want, ddy, n);
        oracle()->free(dyv);
        dyv = put(gpu, y, n);
        ddy = put(gpu, dy, n);
        gpu->activation_grad(ACTS[a], n, dyv, ddy, ddy);
        take(gpu, got, ddy, n);
        gpu->free(dyv);
        for (size_t i = 0; i < n; i++)
            check_value(&t, gpu->name, ACT_NAMES[a], i, want[i], got[i]);
    }
    report(&t);
}

/* --- losses --------------------------------------------------------------------------- */

/* Logit scales: ordinary, large (exp would overflow without the max shift) and huge (the
 * difference of two logits is itself ~1e30). */
static const float LOGIT_SCALES[] = {3.0f, 1e4f, 1e30f};

/* Random labels, except that the first row's is the first column and the last row's the
 * last column. */
static void edge_labels(pf_rng *rng, int32_t *labels, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        labels[r] = (int32_t)pf_rng_below(rng, (uint64_t)cols);
    labels[0] = 0;
    labels[rows - 1] = cols - 1;
}

static void test_softmax_xent(void **state) {
    (void)state;
    /* dlogits are probabilities / rows, so at most 1 in magnitude. */
    tol tloss = make_tol("softmax_xent loss", 1e-6, 1e-6);
    tol tgrad = make_tol("softmax_xent grad", 1e-7, 1e-5);
    tol tsum = make_tol("xent_sum", 1e-6, 1e-6);
    /* One class, two, the MLP's ten, odd, wide; rows past one grid (one thread per row). */
    static const int shapes[][2] = {{1, 1},    {5, 1},    {1, 2},    {7, 10},    {13, 33},
                                    {100, 10}, {33, 129}, {3, 1000}, {1024, 10}, {1048583, 3}};
    pf_rng rng;
    pf_rng_init(&rng, 42, 106);
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
            if (rows > 2) /* one row of equal logits: a tie everywhere */
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

            for (int in_place = 0; in_place < 2; in_place++) {
                dl = put(gpu, logits, len);
                dd = in_place ? dl : put(gpu, logits, len);
                dlab = put_i32(gpu, labels, (size_t)rows);
                double sum = in_place ? 0.0 : gpu->xent_sum(rows, cols, dl, dlab);
                float loss = gpu->softmax_xent(rows, cols, dl, dlab, dd);
                take(gpu, got, dd, len);
                gpu->free(dlab);
                if (!in_place)
                    gpu->free(dl);
                check_value(&tloss, gpu->name, ctx, 0, want_loss, loss);
                check_close(&tgrad, gpu->name, ctx, want, got, len);
                if (!in_place)
                    check_value(&tsum, gpu->name, ctx, 0, want_sum, sum);
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

static void test_mse(void **state) {
    (void)state;
    tol tloss = make_tol("mse loss", 1e-6, 1e-6), tgrad = make_tol("mse grad", 1e-7, 1e-6);
    pf_rng rng;
    pf_rng_init(&rng, 42, 107);
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
            dp = put(gpu, pred, n);
            dt = put(gpu, target, n);
            dd = in_place ? dp : put(gpu, pred, n);
            float loss = gpu->mse(n, dp, dt, dd);
            take(gpu, got, dd, n);
            gpu->free(dt);
            if (!in_place)
                gpu->free(dp);
            check_value(&tloss, gpu->name, ctx, 0, want_loss, loss);
            check_close(&tgrad, gpu->name, ctx, want, got, n);
        }
        pf_free(got);
        pf_free(want);
        pf_free(target);
        pf_free(pred);
    }
    report(&tloss);
    report(&tgrad);
}

/* Exact agreement with the reference: ties everywhere (logits from {0, 1, 2}), labels in the
 * first and last column, rows with NaN (never larger than anything, so a NaN in column 0
 * keeps column 0 the answer), and rows past one grid. */
static void test_count_correct(void **state) {
    (void)state;
    static const int shapes[][2] = {{1, 1}, {7, 4}, {500, 10}, {1000, 3}, {1048583, 3}};
    pf_rng rng;
    pf_rng_init(&rng, 42, 108);
    for (size_t s = 0; s < ARRAY_LEN(shapes); s++) {
        const int rows = shapes[s][0], cols = shapes[s][1];
        const size_t len = (size_t)rows * (size_t)cols;
        float *logits = host_new(len);
        int32_t *labels = pf_malloc((size_t)rows * sizeof *labels);
        assert_non_null(labels);
        for (size_t i = 0; i < len; i++)
            logits[i] = (float)pf_rng_below(&rng, 3);
        for (int r = 0; r < rows; r += 17) /* a NaN in every 17th row */
            logits[(size_t)r * (size_t)cols + pf_rng_below(&rng, (uint64_t)cols)] = NAN;
        edge_labels(&rng, labels, rows, cols);
        float *dl = put(oracle(), logits, len);
        int32_t *dlab = put_i32(oracle(), labels, (size_t)rows);
        int want = oracle()->count_correct(rows, cols, dl, dlab);
        oracle()->free(dlab);
        oracle()->free(dl);
        dl = put(gpu, logits, len);
        dlab = put_i32(gpu, labels, (size_t)rows);
        int got = gpu->count_correct(rows, cols, dl, dlab);
        gpu->free(dlab);
        gpu->free(dl);
        if (got != want)
            fail_msg("count_correct rows=%d cols=%d: %d, reference %d", rows, cols, got, want);
        print_message("  count_correct rows=%d cols=%d: %d correct, as the reference\n", rows, cols,
                      got);
        pf_free(labels);
        pf_free(logits);
    }
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

/* Three consecutive steps with fresh gradients (so the slots carry state), from the same
 * start on both sides, compared after each step: weights and slots. */
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
    pf_rng_init(&rng, 42, 109);
    const pf_backend *ref = oracle();
    for (size_t l = 0; l < ARRAY_LEN(LENGTHS); l++) {
        const size_t n = LENGTHS[l];
        for (int o = 0; o < NUM_OPTS; o++) {
            float *w0 = host_new(n), *s00 = host_new(n), *s10 = host_new(n);
            float *g[3] = {host_new(n), host_new(n), host_new(n)};
            float *want[3][3], *got = host_new(n);
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

            /* The oracle's three steps: weights and both slots after each. */
            float *dw = put(ref, w0, n), *d0 = put(ref, s00, n), *d1 = put(ref, s10, n);
            float *dg = put(ref, g[0], n);
            for (int k = 0; k < 3; k++) {
                ref->upload(dg, g[k], n);
                run_step(ref, o, n, dg, dw, d0, d1);
                for (int j = 0; j < 3; j++)
                    want[k][j] = host_new(n);
                ref->download(want[k][0], dw, n);
                ref->download(want[k][1], d0, n);
                ref->download(want[k][2], d1, n);
            }
            ref->free(dg);
            ref->free(d1);
            ref->free(d0);
            ref->free(dw);

            dw = put(gpu, w0, n);
            d0 = put(gpu, s00, n);
            d1 = put(gpu, s10, n);
            dg = put(gpu, g[0], n);
            for (int k = 0; k < 3; k++) {
                char ctx[48];
                snprintf(ctx, sizeof ctx, "n=%zu step %d", n, k + 1);
                gpu->upload(dg, g[k], n);
                run_step(gpu, o, n, dg, dw, d0, d1);
                gpu->download(got, dw, n);
                check_close(&tw[o], gpu->name, ctx, want[k][0], got, n);
                gpu->download(got, d0, n);
                check_close(&ts[o], gpu->name, ctx, want[k][1], got, n);
                gpu->download(got, d1, n);
                check_close(&ts[o], gpu->name, ctx, want[k][2], got, n);
            }
            gpu->free(dg);
            gpu->free(d1);
            gpu->free(d0);
            gpu->free(dw);
            for (int k = 0; k < 3; k++) {
                for (int j = 0; j < 3; j++)
                    pf_free(want[k][j]);
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

/* --- sizes of zero -------------------------------------------------------------------- */

/* Every op with a zero size and NULL pointers does nothing (backend.h allows NULL when a
 * size is 0); gemm with k = 0 is C = beta C; bias_grad over zero rows writes zeros. */
static void test_zero_sizes(void **state) {
    (void)state;
    const pf_backend *be = gpu;
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

    float db_host[3] = {NAN, NAN, NAN};
    float *db = put(be, db_host, 3);
    be->bias_grad(0, 3, NULL, db);
    take(be, db_host, db, 3);
    for (int i = 0; i < 3; i++)
        assert_true(db_host[i] == 0.0f);

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

/* --- threads -------------------------------------------------------------------------- */

/* Four threads at once, each with its own buffers (backend.h: buffers are not shared
 * between threads while in use), each running an upload, a gemm, a bias, an activation,
 * softmax_xent and a download; then the main thread goes on. Each thread sets up its own
 * cuBLAS handle and staging buffers and frees them when it ends. */
enum { THREADS = 4, TM = 96, TN = 10, TK = 200 };

typedef struct thread_job {
    int id;
    int gpu; /* test_gpu_per_thread: the GPU the thread chooses */
    float a[TM * TK], b[TK * TN], bias[TN];
    int32_t labels[TM];
    float want_logits[TM * TN], want_grad[TM * TN];
    float want_loss;
    char error[512]; /* "" when the thread's results matched */
} thread_job;

/* No cmocka assertions here: they must not run on other threads. Returns false with
 * j->error set when a buffer cannot be had. */
static bool run_thread_ops(const pf_backend *be, thread_job *j, float *logits, float *grad,
                           float *loss) {
    float *da = be->alloc(TM * TK * sizeof(float)), *db = be->alloc(TK * TN * sizeof(float));
    float *dbias = be->alloc(TN * sizeof(float)), *dc = be->alloc(TM * TN * sizeof(float));
    float *dg = be->alloc(TM * TN * sizeof(float));
    int32_t *dl = be->alloc(TM * sizeof(int32_t));
    bool ok = da && db && dbias && dc && dg && dl;
    if (ok) {
        be->upload(da, j->a, TM * TK);
        be->upload(db, j->b, TK * TN);
        be->upload(dbias, j->bias, TN);
        be->upload_i32(dl, j->labels, TM);
        be->gemm(false, false, TM, TN, TK, 1.0f, da, TK, db, TN, 0.0f, dc, TN);
        be->bias_add(TM, TN, dbias, dc);
        be->activation(PF_ACT_TANH, TM * TN, dc, dc);
        *loss = be->softmax_xent(TM, TN, dc, dl, dg);
        be->download(logits, dc, TM * TN);
        be->download(grad, dg, TM * TN);
    } else {
        snprintf(j->error, sizeof j->error, "thread %d: %s cannot allocate", j->id, be->name);
    }
    void *bufs[] = {dl, dg, dc, dbias, db, da};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++)
        if (bufs[i])
            be->free(bufs[i]);
    return ok;
}

static void *thread_main(void *arg) {
    thread_job *j = arg;
    float logits[TM * TN], grad[TM * TN], loss = 0.0f;
    for (int round = 0; round < 3; round++) {
        if (!run_thread_ops(gpu, j, logits, grad, &loss))
            return NULL;
        for (int i = 0; i < TM * TN; i++) {
            double e1 = fabs((double)logits[i] - j->want_logits[i]);
            double e2 = fabs((double)grad[i] - j->want_grad[i]);
            if (!(e1 <= 1e-4 + 1e-4 * fabs(j->want_logits[i])) ||
                !(e2 <= 1e-7 + 1e-4 * fabs(j->want_grad[i]))) {
                snprintf(j->error, sizeof j->error,
                         "thread %d round %d element %d: logits %.9g vs %.9g, grad %.9g vs %.9g",
                         j->id, round, i, (double)logits[i], (double)j->want_logits[i],
                         (double)grad[i], (double)j->want_grad[i]);
                return NULL;
            }
        }
        if (!(fabs((double)loss - j->want_loss) <= 1e-5 + 1e-5 * fabs(j->want_loss))) {
            snprintf(j->error, sizeof j->error, "thread %d round %d: loss %.9g vs %.9g", j->id,
                     round, (double)loss, (double)j->want_loss);
            return NULL;
        }
    }
    return NULL;
}

/* Jobs with inputs and the oracle's results, for test_threads and test_gpu_per_thread. */
static thread_job *thread_jobs(uint64_t stream) {
    thread_job *jobs = pf_calloc(THREADS, sizeof *jobs);
    assert_non_null(jobs);
    pf_rng rng;
    pf_rng_init(&rng, 42, stream);
    for (int t = 0; t < THREADS; t++) {
        thread_job *j = &jobs[t];
        j->id = t;
        fill_uniform(&rng, j->a, TM * TK, -1.0f, 1.0f);
        fill_uniform(&rng, j->b, TK * TN, -0.2f, 0.2f);
        fill_uniform(&rng, j->bias, TN, -1.0f, 1.0f);
        edge_labels(&rng, j->labels, TM, TN);
        assert_true(run_thread_ops(oracle(), j, j->want_logits, j->want_grad, &j->want_loss));
    }
    return jobs;
}

/* Runs fn on every job, one thread each, then thread_main on the main thread after they
 * have ended; fails with the first error any of them reported. Frees jobs. */
static void run_threads(thread_job *jobs, void *(*fn)(void *)) {
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, fn, &jobs[t]), 0);
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_join(threads[t], NULL), 0);
    for (int t = 0; t < THREADS; t++)
        if (jobs[t].error[0])
            fail_msg("%s", jobs[t].error);
    thread_main(&jobs[0]);
    if (jobs[0].error[0])
        fail_msg("main thread after the others: %s", jobs[0].error);
    pf_free(jobs);
}

static void test_threads(void **state) {
    (void)state;
    run_threads(thread_jobs(110), thread_main);
}

/* A thread that chooses a GPU first, as each in-graph replica of a worker does. */
static void *gpu_thread_main(void *arg) {
    thread_job *j = arg;
    const pf_backend *be = NULL;
    pf_error err;
    if (pf_backend_for_device(PF_DEVICE_CUDA, j->gpu, &be, &err) != PF_OK || be != gpu) {
        snprintf(j->error, sizeof j->error, "thread %d: cuda:%d: %s", j->id, j->gpu, err.message);
        return NULL;
    }
    return thread_main(arg);
}

/* Threads that each choose a GPU (thread t takes GPU t mod the GPUs there are, up to 4)
 * compute the right results there, with buffers allocated on their GPU; with one GPU they all
 * choose GPU 0. The main thread is on GPU 0 again afterwards. */
static void test_gpu_per_thread(void **state) {
    (void)state;
    if (standin)
        skip(); /* choosing a GPU means nothing to a CPU stand-in */
    const pf_backend *be = NULL;
    pf_error err;
    int gpus = 1;
    while (gpus < THREADS && pf_backend_for_device(PF_DEVICE_CUDA, gpus, &be, &err) == PF_OK)
        gpus++;
    assert_int_equal(pf_backend_for_device(PF_DEVICE_CUDA, 0, &be, &err), PF_OK);
    print_message("  %d threads on %d GPU(s)\n", THREADS, gpus);
    thread_job *jobs = thread_jobs(111);
    for (int t = 0; t < THREADS; t++)
        jobs[t].gpu = t % gpus;
    run_threads(jobs, gpu_thread_main);
}

/* --- main ----------------------------------------------------------------------------- */

int main(void) {
    gpu = gpu_test_backend("test_cuda", &standin);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_upload_then_reuse),
        cmocka_unit_test(test_fill_copy),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_gemm_known),
        cmocka_unit_test(test_gemm_parity),
        cmocka_unit_test(test_gemm_layer_shapes),
        cmocka_unit_test(test_axpy_scale),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_activation),
        cmocka_unit_test(test_activation_nan),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_count_correct),
        cmocka_unit_test(test_optimizer_steps),
        cmocka_unit_test(test_zero_sizes),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_gpu_per_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
