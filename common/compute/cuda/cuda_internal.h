/* cuda_internal.h - the kernels of the "cuda" backend, as cuda_backend.c calls them.
 *
 * Internal to common/compute/cuda/. kernels.cu defines these launchers; each queues one
 * kernel on `stream` and returns what cudaGetLastError() says right after the launch (a bad
 * launch configuration, or an error left by earlier work); it never waits for the kernel.
 * Sizes of 0 launch nothing and return cudaSuccess. Every pointer is device memory from
 * cudaMalloc, laid out as backend.h says. Each kernel is the loop of the same op in
 * cpu/reference.c, with the same arithmetic in the same precision (double where the
 * reference computes in double), one GPU thread per element, per row or per column.
 *
 * This header is included from C (cuda_backend.c) and from CUDA C++ (kernels.cu).
 */
#ifndef PSFLOW_CUDA_INTERNAL_H
#define PSFLOW_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "psflow/spec.h" /* pf_activation */

#ifdef __cplusplus
extern "C" {
#endif

/* dst[0..n) = value */
cudaError_t pfk_fill(cudaStream_t stream, float *dst, float value, size_t n);
/* C[i, j] = beta == 0 ? 0 : beta * C[i, j] for the [m, n] block of C (row stride ldc): the
 * gemm of an empty product (k = 0). */
cudaError_t pfk_scale_matrix(cudaStream_t stream, int m, int n, float beta, float *c, int ldc);
cudaError_t pfk_axpy(cudaStream_t stream, size_t n, float a, const float *x, float *y);
cudaError_t pfk_scale(cudaStream_t stream, size_t n, float a, float *x);

cudaError_t pfk_bias_add(cudaStream_t stream, int rows, int cols, const float *bias, float *x);
cudaError_t pfk_bias_grad(cudaStream_t stream, int rows, int cols, const float *dy, float *db);
/* Every activation but PF_ACT_NONE (the caller copies for that one). */
cudaError_t pfk_activation(cudaStream_t stream, pf_activation act, size_t n, const float *x,
                           float *y);
cudaError_t pfk_activation_grad(cudaStream_t stream, pf_activation act, size_t n, const float *y,
                                const float *dy, float *dx);

/* Losses: the kernels write one term per row (or per block of elements) into device memory;
 * the caller copies the terms back and adds them up in order on the host.
 *   softmax_xent: row_loss[r] = -log softmax(logits row r)[labels[r]], dlogits written;
 *   xent_rows:    the same row_loss, no gradient;
 *   correct_rows: row_ok[r] = 1.0 when the row's first largest logit is at labels[r], else 0;
 *   mse:          dpred written; partial[b] = sum of (pred - target)^2 over elements
 *                 [b * PFK_MSE_BLOCK, (b + 1) * PFK_MSE_BLOCK) of n. */
cudaError_t pfk_softmax_xent(cudaStream_t stream, int rows, int cols, const float *logits,
                             const int32_t *labels, float *dlogits, double *row_loss);
cudaError_t pfk_xent_rows(cudaStream_t stream, int rows, int cols, const float *logits,
                          const int32_t *labels, double *row_loss);
cudaError_t pfk_correct_rows(cudaStream_t stream, int rows, int cols, const float *logits,
                             const int32_t *labels, double *row_ok);
#define PFK_MSE_BLOCK 256
cudaError_t pfk_mse(cudaStream_t stream, size_t n, const float *pred, const float *target,
                    float *dpred, double *partial);

cudaError_t pfk_sgd_step(cudaStream_t stream, size_t n, float lr, const float *g, float *w);
cudaError_t pfk_momentum_step(cudaStream_t stream, size_t n, float lr, float momentum,
                              const float *g, float *w, float *accum);
cudaError_t pfk_adagrad_step(cudaStream_t stream, size_t n, float lr, const float *g, float *w,
                             float *accum);
cudaError_t pfk_adam_step(cudaStream_t stream, size_t n, float lr_t, float beta1, float beta2,
                          float epsilon, const float *g, float *w, float *m, float *v);

#ifdef __cplusplus
}
#endif

#endif
