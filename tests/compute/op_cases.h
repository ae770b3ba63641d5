/* op_cases.h - the one table of backend op cases, shared by every backend's tests (ggml's
 * test-backend-ops habit): tests/compute/test_compute.c runs it on the CPU backends
 * ("reference" and "openblas"), tests/compute/test_cuda.c on the "cuda" backend when a GPU
 * is there. A backend joins by being handed to the cases; no case is written twice.
 *
 * Each case runs one op of backend.h (or a few that belong together) on the backend under
 * test with seeded inputs and shapes, and compares the result with the "reference" oracle
 * (naive double-precision loops) within the case's tolerance, or, for the cases flagged
 * OP_CASE_ON_ORACLE, with values worked out by hand, so that the oracle itself is checked
 * too. Shapes cover what breaks fast kernels on either side: 1x1x1 and odd sizes around SIMD
 * widths and warp and block sizes, sizes past one CUDA grid (every thread loops), all
 * transposes, row strides larger than the rows (NaN padding, so reading it shows), beta = 0
 * over a NaN-filled C, in-place calls where backend.h allows them, huge logits, ties.
 *
 * Tolerances: every element must satisfy |ref - x| <= atol + rtol |ref| (NaN meets NaN, an
 * infinity the same infinity; tests/support/backend_check.h):
 *   gemm                                 atol 1e-6 + 2.5e-7 k max(1, |alpha|), rtol 1e-4
 *   axpy scale bias_add activations, their gradients, mse, optimizer steps (and slots)
 *                                        atol 1e-6, rtol 1e-6
 *   bias_grad                            atol 1e-5 + 1e-7 rows, rtol 1e-5 (a float sum of
 *                                        rows terms is off by about eps rows)
 *   softmax_xent loss, xent_sum, mse loss atol 1e-6, rtol 1e-6
 *   softmax_xent gradient                atol 1e-7, rtol 1e-5
 *   count_correct, memory round trips    exact
 * Each case prints, per op, how many values it compared, the largest error and the worst
 * case as a fraction of its bound. Failures end the cmocka test (single-threaded).
 */
#ifndef PSFLOW_TESTS_OP_CASES_H
#define PSFLOW_TESTS_OP_CASES_H

#include <stdbool.h>
#include <stddef.h>

#include "psflow/backend.h"

enum {
    /* Checks the backend on its own (hand-worked values, exact behaviour): meaningful on the
     * reference too, which runs it. The other cases compare with the reference. */
    OP_CASE_ON_ORACLE = 1,
    /* Needs the reference's NaN rules (relu'(y <= 0) is dy * 0), which "openblas" does not
     * follow: it writes 0 whatever dy is. */
    OP_CASE_NAN_RULES = 2,
};

typedef struct op_case {
    const char *name; /* the cmocka test's name */
    void (*run)(const pf_backend *be);
    unsigned flags; /* OP_CASE_* */
} op_case;

/* The table (whole-table checks first, then backend.h's order of ops); OP_CASES_LEN entries
 * (checked where it is defined), so that a test can size its cmocka array. */
#define OP_CASES_LEN 19
extern const op_case OP_CASES[];

/* Whether case c applies to `be`; when not, *why says why (static text). */
bool op_case_applies(const op_case *c, const pf_backend *be, const char **why);

#endif
