/* gpu_test.h - how the GPU tests (test_cuda.c, test_cuda_model.c) pick the backend to test.
 *
 * gpu_test_backend() returns the "cuda" backend bound to GPU 0. Without a usable GPU (a
 * build without CUDA, no driver, no device) it prints "skipped: <reason>" and exits 77,
 * which CTest reports as Skipped, never as Passed; with PSFLOW_TEST_REQUIRE_GPU set (to
 * anything but 0) that is a failure instead, for runs on a machine that has a GPU.
 * PSFLOW_TEST_CUDA_STANDIN=openblas or reference tests that CPU backend in place of cuda:
 * a check of the test itself on a machine without a GPU, saying nothing about cuda.
 */
#ifndef PSFLOW_GPU_TEST_H
#define PSFLOW_GPU_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/backend.h"

static const pf_backend *gpu_test_backend(const char *prog, bool *standin) {
    const char *stand = getenv("PSFLOW_TEST_CUDA_STANDIN");
    *standin = stand && *stand;
    if (*standin) {
        const pf_backend *be = !strcmp(stand, "openblas")    ? pf_backend_openblas()
                               : !strcmp(stand, "reference") ? pf_backend_reference()
                                                             : NULL;
        if (!be) {
            fprintf(stderr, "%s: PSFLOW_TEST_CUDA_STANDIN must be openblas or reference\n", prog);
            exit(1);
        }
        printf("STAND-IN: testing the %s backend in place of cuda (PSFLOW_TEST_CUDA_STANDIN); "
               "these results say nothing about cuda\n",
               be->name);
        fflush(stdout);
        return be;
    }
    const pf_backend *be = NULL;
    pf_error err;
    if (pf_backend_for_device(PF_DEVICE_CUDA, 0, &be, &err) != PF_OK) {
        const char *require = getenv("PSFLOW_TEST_REQUIRE_GPU");
        if (require && *require && strcmp(require, "0") != 0) {
            printf("FAILED: PSFLOW_TEST_REQUIRE_GPU is set and no GPU is usable: %s\n",
                   err.message);
            exit(1);
        }
        printf("skipped: %s\n", err.message);
        exit(77);
    }
    printf("testing the cuda backend on %s\n", err.message);
    fflush(stdout);
    return be;
}

#endif
