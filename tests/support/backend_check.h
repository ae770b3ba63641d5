/* backend_check.h - what the backend tests (tests/compute/test_compute.c, test_cuda.c) share:
 * the tolerance check of a backend against the "reference" oracle, buffers moved in and out
 * of a backend, seeded random inputs, and the gemm cases both run.
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

#endif
