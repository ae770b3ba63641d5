/* kernels.cu - the GPU kernels of the "cuda" backend (see cuda_internal.h).
 *
 * DESIGN: every kernel is the loop of the same op in cpu/reference.c, line for line, with
 * one GPU thread per element (elementwise ops), per row (losses) or per column (bias_grad),
 * in grid-stride loops so that any size works with any grid. The arithmetic is the
 * reference's: computed in double where it computes in double, rounded to float once at the
 * end, and built with --fmad=false so that no a * b + c is fused into one rounding. Double
 * add, multiply, divide and sqrt are IEEE-exact on the GPU as on the CPU, so these kernels
 * give the reference's results bit for bit except where exp, log or tanh (within an ulp
 * or two in double) are involved. Nothing here is tuned: the training step's time goes to
 * cuBLAS's sgemm, and these ops are memory-bound passes over a few MB.
 *
 * Reductions are left to the host: a loss kernel writes one double per row (or per block of
 * PFK_MSE_BLOCK elements) and cuda_backend.c adds them in order, the way reference.c does.
 */
#include "cuda_internal.h"

#include <math.h>

namespace {

constexpr int THREADS = 256;
/* Enough blocks to fill any current GPU several times over; larger sizes loop. */
constexpr size_t MAX_BLOCKS = 4096;

unsigned blocks_for(size_t work) {
    size_t blocks = (work + THREADS - 1) / THREADS;
    return (unsigned)(blocks < MAX_BLOCKS ? blocks : MAX_BLOCKS);
}

__device__ size_t first_index() {
    return (size_t)blockIdx.x * (size_t)blockDim.x + threadIdx.x;
}

__device__ size_t grid_size() {
    return (size_t)gridDim.x * (size_t)blockDim.x;
}

/* --- memory and dense algebra -------------------------------------------------------- */

__global__ void fill_kernel(float *dst, float value, size_t n) {
    for (size_t i = first_index(); i < n; i += grid_size())
        dst[i] = value;
}

/* reference.c's gemm with k = 0: the dot product is 0, C = beta C, and beta == 0 does not
 * read C (it may hold NaN). */
__global__ void scale_matrix_kernel(int m, int n, float beta, float *c, int ldc) {
    const size_t total = (size_t)m * (size_t)n;
    for (size_t idx = first_index(); idx < total; idx += grid_size()) {
        const size_t i = idx / (size_t)n, j = idx % (size_t)n;
        float *cij = &c[i * (size_t)ldc + j];
        *cij = beta == 0.0f ? 0.0f : (float)((double)beta * *cij);
    }
}

__global__ void axpy_kernel(size_t n, float a, const float *x, float *y) {
    for (size_t i = first_index(); i < n; i += grid_size())
        y[i] = (float)((double)y[i] + (double)a * x[i]);
}

__global__ void scale_kernel(size_t n, float a, float *x) {
    for (size_t i = first_index(); i < n; i += grid_size())
        x[i] = (float)((double)a * x[i]);
}

/* --- layers -------------------------------------------------------------------------- */

/* x is [rows, cols]; element idx is row idx / cols, column idx % cols. */
__global__ void bias_add_kernel(size_t total, int cols, const float *bias, float *x) {
    for (size_t idx = first_index(); idx < total; idx += grid_size())
        x[idx] += bias[idx % (size_t)cols];
}

/* One thread per column: neighbouring threads read neighbouring columns of each row. */
__global__ void bias_grad_kernel(int rows, int cols, const float *dy, float *db) {
    for (size_t c = first_index(); c < (size_t)cols; c += grid_size()) {
        double sum = 0.0;
        for (int r = 0; r < rows; r++)
            sum += dy[(size_t)r * (size_t)cols + c];
        db[c] = (float)sum;
    }
}

__device__ double act_value(pf_activation act, double x) {
    switch (act) {
    case PF_ACT_RELU:
        return x > 0.0 ? x : 0.0;
    case PF_ACT_TANH:
        return tanh(x);
    case PF_ACT_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case PF_ACT_NONE:
        break;
    }
    return x;
}

/* d act / d x, in terms of the activation's output y. */
__device__ double act_slope(pf_activation act, double y) {
    switch (act) {
    case PF_ACT_RELU:
        return y > 0.0 ? 1.0 : 0.0;
    case PF_ACT_TANH:
        return 1.0 - y * y;
    case PF_ACT_SIGMOID:
        return y * (1.0 - y);
    case PF_ACT_NONE:
        break;
    }
    return 1.0;
}

/* y may alias x: element i is read before it is written, by the same thread. */
__global__ void activation_kernel(pf_activation act, size_t n, const float *x, float *y) {
    for (size_t i = first_index(); i < n; i += grid_size())
        y[i] = (float)act_value(act, x[i]);
}

/* dx may alias dy, as above. */
__global__ void activation_grad_kernel(pf_activation act, size_t n, const float *y, const float *dy,
                                       float *dx) {
    for (size_t i = first_index(); i < n; i += grid_size())
        dx[i] = (float)(dy[i] * act_slope(act, y[i]));
}

/* --- losses -------------------------------------------------------------------------- */

/* The row's largest logit and sum_c exp(row[c] - max), as reference.c's shifted_sum_exp. */
__device__ double shifted_sum_exp(int cols, const float *row, double *max_out) {
    double max = row[0];
    for (int c = 1; c < cols; c++)
        if (row[c] > max)
            max = row[c];
    double sum = 0.0;
    for (int c = 0; c < cols; c++)
        sum += exp(row[c] - max);
    *max_out = max;
    return sum;
}

/* One thread per row. dlogits may alias logits: the thread reads its row's max, sum and
 * label logit before writing, then reads each element just before overwriting it. */
__global__ void softmax_xent_kernel(int rows, int cols, const float *logits, const int32_t *labels,
                                    float *dlogits, double *row_loss) {
    for (size_t r = first_index(); r < (size_t)rows; r += grid_size()) {
        const float *row = logits + r * (size_t)cols;
        float *drow = dlogits + r * (size_t)cols;
        double max;
        const double sum = shifted_sum_exp(cols, row, &max);
        const int label = labels[r];
        row_loss[r] = log(sum) - (row[label] - max);
        for (int c = 0; c < cols; c++) {
            const double p = exp(row[c] - max) / sum;
            drow[c] = (float)((p - (c == label ? 1.0 : 0.0)) / rows);
        }
    }
}

__global__ void xent_rows_kernel(int rows, int cols, const float *logits, const int32_t *labels,
                                 double *row_loss) {
    for (size_t r = first_index(); r < (size_t)rows; r += grid_size()) {
        const float *row = logits + r * (size_t)cols;
        double max;
        const double sum = shifted_sum_exp(cols, row, &max);
        row_loss[r] = log(sum) - (row[labels[r]] - max);
    }
}

/* The first largest logit wins ties (strict >), as cpu_count_correct. */
__global__ void correct_rows_kernel(int rows, int cols, const float *logits, const int32_t *labels,
                                    double *row_ok) {
    for (size_t r = first_index(); r < (size_t)rows; r += grid_size()) {
        const float *row = logits + r * (size_t)cols;
        int best = 0;
        for (int c = 1; c < cols; c++)
            if (row[c] > row[best])
                best = c;
        row_ok[r] = (cols > 0 && best == labels[r]) ? 1.0 : 0.0;
    }
}

/* One thread per block of PFK_MSE_BLOCK elements. dpred may alias pred. */
__global__ void mse_kernel(size_t n, const float *pred, const float *target, float *dpred,
                           double *partial) {
    const size_t blocks = (n + PFK_MSE_BLOCK - 1) / PFK_MSE_BLOCK;
    for (size_t b = first_index(); b < blocks; b += grid_size()) {
        const size_t end = (b + 1) * PFK_MSE_BLOCK < n ? (b + 1) * PFK_MSE_BLOCK : n;
        double sum = 0.0;
        for (size_t i = b * PFK_MSE_BLOCK; i < end; i++) {
            const double diff = (double)pred[i] - target[i];
            sum += diff * diff;
            dpred[i] = (float)(2.0 * diff / (double)n);
        }
        partial[b] = sum;
    }
}

/* --- optimizer steps ----------------------------------------------------------------- */

__global__ void sgd_kernel(size_t n, float lr, const float *g, float *w) {
    for (size_t i = first_index(); i < n; i += grid_size())
        w[i] = (float)(w[i] - (double)lr * g[i]);
}

__global__ void momentum_kernel(size_t n, float lr, float momentum, const float *g, float *w,
                                float *accum) {
    for (size_t i = first_index(); i < n; i += grid_size()) {
        const double acc = (double)momentum * accum[i] + g[i];
        accum[i] = (float)acc;
        w[i] = (float)(w[i] - (double)lr * acc);
    }
}

__global__ void adagrad_kernel(size_t n, float lr, const float *g, float *w, float *accum) {
    for (size_t i = first_index(); i < n; i += grid_size()) {
        const double acc = accum[i] + (double)g[i] * g[i];
        accum[i] = (float)acc;
        w[i] = (float)(w[i] - (double)lr * g[i] / sqrt(acc));
    }
}

__global__ void adam_kernel(size_t n, float lr_t, float beta1, float beta2, float epsilon,
                            const float *g, float *w, float *m, float *v) {
    for (size_t i = first_index(); i < n; i += grid_size()) {
        const double mi = (double)beta1 * m[i] + (1.0 - beta1) * g[i];
        const double vi = (double)beta2 * v[i] + (1.0 - beta2) * ((double)g[i] * g[i]);
        m[i] = (float)mi;
        v[i] = (float)vi;
        w[i] = (float)(w[i] - (double)lr_t * mi / (sqrt(vi) + epsilon));
    }
}

} // namespace

/* --- launchers ----------------------------------------------------------------------- */

extern "C" cudaError_t pfk_fill(cudaStream_t stream, float *dst, float value, size_t n) {
    if (n == 0)
        return cudaSuccess;
    fill_kernel<<<blocks_for(n), THREADS, 0, stream>>>(dst, value, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_scale_matrix(cudaStream_t stream, int m, int n, float beta, float *c,
                                        int ldc) {
    if (m <= 0 || n <= 0)
        return cudaSuccess;
    scale_matrix_kernel<<<blocks_for((size_t)m * (size_t)n), THREADS, 0, stream>>>(m, n, beta, c,
                                                                                   ldc);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_axpy(cudaStream_t stream, size_t n, float a, const float *x, float *y) {
    if (n == 0)
        return cudaSuccess;
    axpy_kernel<<<blocks_for(n), THREADS, 0, stream>>>(n, a, x, y);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_scale(cudaStream_t stream, size_t n, float a, float *x) {
    if (n == 0)
        return cudaSuccess;
    scale_kernel<<<blocks_for(n), THREADS, 0, stream>>>(n, a, x);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_bias_add(cudaStream_t stream, int rows, int cols, const float *bias,
                                    float *x) {
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    const size_t total = (size_t)rows * (size_t)cols;
    bias_add_kernel<<<blocks_for(total), THREADS, 0, stream>>>(total, cols, bias, x);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_bias_grad(cudaStream_t stream, int rows, int cols, const float *dy,
                                     float *db) {
    if (cols <= 0)
        return cudaSuccess;
    /* rows may be 0: then db = 0, as the reference's empty sum. */
    bias_grad_kernel<<<blocks_for((size_t)cols), THREADS, 0, stream>>>(rows < 0 ? 0 : rows, cols,
                                                                       dy, db);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_activation(cudaStream_t stream, pf_activation act, size_t n,
                                      const float *x, float *y) {
    if (n == 0)
        return cudaSuccess;
    activation_kernel<<<blocks_for(n), THREADS, 0, stream>>>(act, n, x, y);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_activation_grad(cudaStream_t stream, pf_activation act, size_t n,
                                           const float *y, const float *dy, float *dx) {
    if (n == 0)
        return cudaSuccess;
    activation_grad_kernel<<<blocks_for(n), THREADS, 0, stream>>>(act, n, y, dy, dx);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_softmax_xent(cudaStream_t stream, int rows, int cols,
                                        const float *logits, const int32_t *labels, float *dlogits,
                                        double *row_loss) {
    if (rows <= 0)
        return cudaSuccess;
    softmax_xent_kernel<<<blocks_for((size_t)rows), THREADS, 0, stream>>>(
        rows, cols, logits, labels, dlogits, row_loss);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_xent_rows(cudaStream_t stream, int rows, int cols, const float *logits,
                                     const int32_t *labels, double *row_loss) {
    if (rows <= 0)
        return cudaSuccess;
    xent_rows_kernel<<<blocks_for((size_t)rows), THREADS, 0, stream>>>(rows, cols, logits, labels,
                                                                       row_loss);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_correct_rows(cudaStream_t stream, int rows, int cols,
                                        const float *logits, const int32_t *labels,
                                        double *row_ok) {
    if (rows <= 0)
        return cudaSuccess;
    correct_rows_kernel<<<blocks_for((size_t)rows), THREADS, 0, stream>>>(rows, cols, logits,
                                                                          labels, row_ok);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_mse(cudaStream_t stream, size_t n, const float *pred,
                               const float *target, float *dpred, double *partial) {
    if (n == 0)
        return cudaSuccess;
    const size_t blocks = (n + PFK_MSE_BLOCK - 1) / PFK_MSE_BLOCK;
    mse_kernel<<<blocks_for(blocks), THREADS, 0, stream>>>(n, pred, target, dpred, partial);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_sgd_step(cudaStream_t stream, size_t n, float lr, const float *g,
                                    float *w) {
    if (n == 0)
        return cudaSuccess;
    sgd_kernel<<<blocks_for(n), THREADS, 0, stream>>>(n, lr, g, w);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_momentum_step(cudaStream_t stream, size_t n, float lr, float momentum,
                                         const float *g, float *w, float *accum) {
    if (n == 0)
        return cudaSuccess;
    momentum_kernel<<<blocks_for(n), THREADS, 0, stream>>>(n, lr, momentum, g, w, accum);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_adagrad_step(cudaStream_t stream, size_t n, float lr, const float *g,
                                        float *w, float *accum) {
    if (n == 0)
        return cudaSuccess;
    adagrad_kernel<<<blocks_for(n), THREADS, 0, stream>>>(n, lr, g, w, accum);
    return cudaGetLastError();
}

extern "C" cudaError_t pfk_adam_step(cudaStream_t stream, size_t n, float lr_t, float beta1,
                                     float beta2, float epsilon, const float *g, float *w, float *m,
                                     float *v) {
    if (n == 0)
        return cudaSuccess;
    adam_kernel<<<blocks_for(n), THREADS, 0, stream>>>(n, lr_t, beta1, beta2, epsilon, g, w, m, v);
    return cudaGetLastError();
}
