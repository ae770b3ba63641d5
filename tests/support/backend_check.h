/* backend_check.h - what the backend tests (tests/compute/test_compute.c, test_cuda.c and
 * the case table they share, tests/compute/op_cases.c) use: the tolerance check of a backend
 * against the "reference" oracle, buffers moved in and out of a backend, seeded random
 * inputs, gemm cases, and the checks of one backend on its own (every op present, memory,
 * sizes of zero, values worked out by hand), which hold for the oracle too.
 *
 * Agreement means |ref - x| <= atol + rtol |ref| for every element; NaN must meet NaN and an
 * infinity the same infinity (where the reference gives them, a backend must too). A
 * failure ends the cmocka test with the op, the backend, the case and the element; each tol
 * keeps the largest error it saw and how much of its bound that used, which report() prints.
 * Allocation failures fail the test. Single-threaded, like cmocka's checks.
 */
#ifndef PSFLOW_TESTS_BACKEND_CHECK_H
#define PSFLOW_TESTS_BACKEND_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/backend.h"
#include "psflow/rng.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* --- tolerances ----------------------------------------------------------------------- */

typedef struct tol {
    const char *op;
    double atol, rtol;
    const char *atol_text; /* printed instead of atol when atol varies by case */
    double max_err;        /* largest |ref - x| seen */
    double max_ratio;      /* largest |ref - x| / (atol + rtol |ref|) seen */
    size_t checked;
    char worst[256]; /* where max_ratio was seen */
} tol;

tol make_tol(const char *op, double atol, double rtol);

/* Checks element i of a result of `backend` (its name, for the message) against the
 * reference's value; ctx says which case. Fails the test when outside the bound. */
void check_value(tol *t, const char *backend, const char *ctx, size_t i, double ref, double got);

/* check_value for got[0..n) against ref[0..n). */
void check_close(tol *t, const char *backend, const char *ctx, const float *ref, const float *got,
                 size_t n);

/* Prints one line (two when there was an error): op, bound, values compared, largest error,
 * the worst case as a fraction of its bound and where it was. */
void report(const tol *t);

/* --- buffers -------------------------------------------------------------------------- */

/* New buffer of `be` holding host[0..n) (one element when n is 0). */
float *put(const pf_backend *be, const float *host, size_t n);
int32_t *put_i32(const pf_backend *be, const int32_t *host, size_t n);

/* Copies d[0..n) of `be` to host and frees d. */
void take(const pf_backend *be, float *host, float *d, size_t n);

/* New host buffer of n floats (pf_malloc; free with pf_free). */
float *host_new(size_t n);

/* --- random inputs -------------------------------------------------------------------- */

float uniform(pf_rng *rng, float lo, float hi);
void fill_uniform(pf_rng *rng, float *x, size_t n, float lo, float hi);
/* Uniform in [lo, hi]. */
int rand_int(pf_rng *rng, int lo, int hi);
/* Random labels in [0, cols), except that the first row's is the first column and the last
 * row's the last column. */
void edge_labels(pf_rng *rng, int32_t *labels, int rows, int cols);

/* --- op arguments --------------------------------------------------------------------- */

extern const pf_activation ACTS[4]; /* none, relu, tanh, sigmoid */
extern const char *const ACT_NAMES[4];

enum { OPT_SGD, OPT_MOMENTUM, OPT_ADAGRAD, OPT_ADAM, NUM_OPTS };
extern const char *const OPT_NAMES[NUM_OPTS]; /* "sgd_step", ... */

/* One step of optimizer opt (OPT_*) with the tests' hyperparameters; s0 and s1 are its slots
 * (unused ones may be NULL). */
void run_step(const pf_backend *be, int opt, size_t n, const float *g, float *w, float *s0,
              float *s1);

/* --- gemm ----------------------------------------------------------------------------- */

/* A float dot product of k terms in [-1, 1] is off by ~eps * k * |alpha| (terms ~1/4 on
 * average, error growing as sqrt(k) twice over); the reference's double sum is exact by
 * comparison. atol allows four times that, so the bound does not depend on which sgemm
 * kernel (SSE, AVX2, AVX-512, FMA or not, cuBLAS's tiles) computed it. */
#define GEMM_ATOL_BASE  1e-6
#define GEMM_ATOL_PER_K 2.5e-7
#define GEMM_RTOL       1e-4
#define GEMM_ATOL_TEXT  "1e-6 + 2.5e-7 k max(1, |alpha|)"

typedef struct gemm_case {
    bool ta, tb;
    int m, n, k;
    float alpha, beta;
    int pad; /* extra elements at the end of every row of A, B and C */
} gemm_case;

/* (alpha, beta) pairs the parity tests draw from. */
extern const float GEMM_ALPHA_BETA[5][2];

/* 2 A.B - ones for A = [[1 2 3] [4 5 6]], B = [[7 8] [9 10] [11 12]] in all four storage
 * layouts must be [[115 127] [277 307]] exactly: small integers are exact in float. */
void check_gemm_known(const pf_backend *be);

/* Runs case g on the oracle and on `be` and compares C (t->atol is set for the case's k and
 * alpha). The padding of A and B is NaN (a kernel reading it fails), the padding of C a
 * sentinel that must survive, and C itself NaN when beta == 0 (it must not be read). */
void check_gemm_case(tol *t, pf_rng *rng, const gemm_case *g, const pf_backend *be);

/* --- one backend on its own ----------------------------------------------------------- */

/* Every op of the table is there (fails naming the first NULL one). */
void check_ops_present(const pf_backend *be);
/* upload/download round trips are exact, fill and copy, upload_i32 (seen through
 * count_correct). */
void check_memory(const pf_backend *be);
/* Every op with a zero size and NULL pointers does nothing (backend.h allows NULL when a
 * size is 0); gemm with k = 0 is C = beta C; bias_grad over zero rows writes zeros. */
void check_zero_sizes(const pf_backend *be);

/* Against values worked out by hand (closed forms, small integers): */
void check_activation_known(const pf_backend *be);
/* The reference's NaN and infinity rules, which the CUDA kernels copy (not openblas's). */
void check_activation_nan(const pf_backend *be);
void check_softmax_xent_known(const pf_backend *be);
void check_mse_known(const pf_backend *be);
void check_count_correct_known(const pf_backend *be);
void check_optimizer_steps_known(const pf_backend *be);

#endif
