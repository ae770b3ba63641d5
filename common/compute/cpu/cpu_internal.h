/* cpu_internal.h - the ops the two CPU backends (reference.c, openblas.c) share.
 *
 * Internal to common/compute/cpu/. Both backends keep tensors in host memory from
 * pf_malloc, so their memory ops are the same functions. count_correct has one obvious
 * loop and nothing to gain from a second copy. Everything with arithmetic worth
 * checking (gemm, losses, activations, optimizer steps) is written twice on purpose:
 * reference.c's naive double-precision loops are the oracle that openblas.c's fast loops
 * are tested against, so they must not share code.
 *
 * Size-0 calls may pass NULL pointers (backend.h), hence the guards before memcpy.
 */
#ifndef PSFLOW_CPU_INTERNAL_H
#define PSFLOW_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "psflow/mem.h"

/* Host <-> host copies: a CPU backend's buffers are host memory. */
static inline void cpu_copy(float *dst, const float *src, size_t n) {
    if (n > 0)
        memcpy(dst, src, n * sizeof *dst);
}

/* A zeroed buffer (pf_backend.alloc_zeroed). */
static inline void *cpu_alloc(size_t bytes) {
    return pf_calloc(1, bytes);
}

static inline void cpu_copy_i32(int32_t *dst, const int32_t *src, size_t n) {
    if (n > 0)
        memcpy(dst, src, n * sizeof *dst);
}

static inline void cpu_fill(float *dst, float value, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = value;
}

/* Rows of logits [rows, cols] whose first largest entry is at labels[r]. */
static inline int cpu_count_correct(int rows, int cols, const float *logits,
                                    const int32_t *labels) {
    int correct = 0;
    for (int r = 0; r < rows; r++) {
        const float *row = logits + (size_t)r * (size_t)cols;
        int best = 0;
        for (int c = 1; c < cols; c++)
            if (row[c] > row[best])
                best = c;
        if (cols > 0 && best == labels[r])
            correct++;
    }
    return correct;
}

#endif
