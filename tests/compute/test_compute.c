/* test_compute.c - the CPU backends through the one table of op cases, and what is the
 * CPU's own.
 *
 * The "reference" backend (naive double-precision loops) is the oracle; every other backend
 * must agree with it within stated tolerances on seeded random inputs and on the edge cases
 * that break fast kernels. Those cases are one table, tests/compute/op_cases.h, shared with
 * tests/compute/test_cuda.c (which runs it on "cuda" when a GPU is there): here each case runs
 * on "openblas", and the cases that check a backend on its own (numbers worked out by hand,
 * exact memory behaviour, sizes of zero) run on the reference too, so the oracle is not
 * trusted blindly. Each case prints the largest error it saw, how much of the allowed bound
 * that used, and where.
 *
 * The CPU's own: the backend tables' names, and which backend each device string ("cpu",
 * "cuda", "cuda:N", "auto") gives in this build on this machine.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/backend.h"
#include "tests/compute/op_cases.h"

/* --- the op cases --------------------------------------------------------------------- */

/* One case of the shared table on every CPU backend it means something for: the reference
 * only where the case does not compare with the reference (that is, with itself). */
static void test_op_case(void **state) {
    const op_case *c = *state;
    const pf_backend *all[] = {pf_backend_reference(), pf_backend_openblas()};
    for (size_t b = 0; b < sizeof all / sizeof all[0]; b++) {
        const char *why = "";
        if (all[b] == pf_backend_reference() && !(c->flags & OP_CASE_ON_ORACLE))
            continue;
        if (!op_case_applies(c, all[b], &why)) {
            print_message("  not for %s: %s\n", all[b]->name, why);
            continue;
        }
        c->run(all[b]);
    }
}

/* --- tables --------------------------------------------------------------------------- */

/* The names, and the same table every call (test_ops_present checks every op is there). */
static void test_tables(void **state) {
    (void)state;
    assert_string_equal(pf_backend_reference()->name, "reference");
    assert_string_equal(pf_backend_openblas()->name, "openblas");
    assert_ptr_equal(pf_backend_reference(), pf_backend_reference());
    assert_ptr_equal(pf_backend_openblas(), pf_backend_openblas());
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
    struct CMUnitTest tests[OP_CASES_LEN + 2] = {cmocka_unit_test(test_tables)};
    size_t n = 1;
    for (size_t i = 0; i < OP_CASES_LEN; i++)
        tests[n++] = (struct CMUnitTest){.name = OP_CASES[i].name,
                                         .test_func = test_op_case,
                                         .initial_state = (void *)(uintptr_t)&OP_CASES[i]};
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_backend_for_device);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
