/* backend.h - the compute backend table: every tensor op psflow's models and optimizers use.
 *
 * DESIGN: model and optimizer code never touch tensor memory directly; they call the ops of
 * a pf_backend on buffers the backend allocated. A CPU backend's buffers are host memory,
 * a CUDA backend's are device memory, and the model code is the same for both. Data crosses
 * between host and backend memory only through `upload` and `download`.
 *
 * Conventions for every op:
 *   - matrices are row-major float32; `ld*` is the row stride in elements;
 *   - sizes are non-negative and pointers non-NULL unless a size is 0;
 *   - outputs may not alias inputs unless the op says so;
 *   - ops do not fail: callers validate shapes before calling (shapes come from the model,
 *     not from the network);
 *   - ops are synchronous from the caller's view (a device backend may queue work, but a
 *     later `download` sees all earlier ops' results).
 *
 * Backends: "reference" (naive loops, the oracle every other backend is tested against),
 * "openblas" (OpenBLAS sgemm + vectorisable loops; the default on CPU) and, when built
 * with CUDA, "cuda". Backend tables are static and immutable: any thread may use one, but
 * the buffers passed to an op must not be used concurrently by another thread.
 */
#ifndef PSFLOW_BACKEND_H
#define PSFLOW_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/spec.h" /* pf_activation */
#include "psflow/status.h"

typedef struct pf_backend {
    const char *name;
    /* Its buffers are plain host memory (a CPU backend): host vectors may be passed to its
     * ops directly, without an upload or download. */
    bool host_memory;

    /* --- memory ------------------------------------------------------------------------ */
    /* New buffer of `bytes` bytes (contents undefined unless alloc_zeroed), or NULL on
     * failure. */
    void *(*alloc)(size_t bytes);
    /* alloc's buffers start zeroed (the CPU backends: calloc, whose large buffers the kernel
     * maps lazily, so that pages never written cost neither time nor memory). */
    bool alloc_zeroed;
    void (*free)(void *buf);
    /* Host -> backend and backend -> host copies of n floats (or n int32 for the _i32). */
    void (*upload)(float *dst, const float *host_src, size_t n);
    void (*download)(float *host_dst, const float *src, size_t n);
    void (*upload_i32)(int32_t *dst, const int32_t *host_src, size_t n);
    /* dst[0..n) = value */
    void (*fill)(float *dst, float value, size_t n);
    /* dst[0..n) = src[0..n) (backend -> backend) */
    void (*copy)(float *dst, const float *src, size_t n);

    /* --- dense algebra --------------------------------------------------------------------
     * C[m,n] = alpha * op(A)[m,k] . op(B)[k,n] + beta * C, op(X) = X or X^T.
     * A is stored [m,k] (lda >= k) when !trans_a, [k,m] (lda >= m) when trans_a; likewise B.
     * beta == 0 means C is written without being read (it may hold NaN). */
    void (*gemm)(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
    /* y += a * x over n elements. */
    void (*axpy)(size_t n, float a, const float *x, float *y);
    /* x *= a over n elements. */
    void (*scale)(size_t n, float a, float *x);

    /* --- layers ---------------------------------------------------------------------------- */
    /* x[r, c] += bias[c] for a [rows, cols] matrix x. */
    void (*bias_add)(int rows, int cols, const float *bias, float *x);
    /* db[c] = sum over r of dy[r, c] (db is overwritten). */
    void (*bias_grad)(int rows, int cols, const float *dy, float *db);
    /* y = act(x) elementwise over n; y may alias x. PF_ACT_NONE copies. */
    void (*activation)(pf_activation act, size_t n, const float *x, float *y);
    /* dx = dy * act'(.) elementwise, with the derivative written in terms of the
     * activation's OUTPUT y (relu: y > 0; tanh: 1 - y^2; sigmoid: y(1 - y)).
     * dx may alias dy. PF_ACT_NONE copies dy. */
    void (*activation_grad)(pf_activation act, size_t n, const float *y, const float *dy,
                            float *dx);

    /* --- losses ----------------------------------------------------------------------------
     * Mean softmax cross-entropy over `rows` examples of `cols` logits with integer labels in
     * [0, cols). Writes dlogits = (softmax(logits) - onehot(label)) / rows, computed stably
     * (max subtracted), and returns the mean loss. dlogits may alias logits. */
    float (*softmax_xent)(int rows, int cols, const float *logits, const int32_t *labels,
                          float *dlogits);
    /* Mean squared error over n predictions: loss = mean((pred - target)^2);
     * dpred = 2 (pred - target) / n. Returns the loss. dpred may alias pred. */
    float (*mse)(size_t n, const float *pred, const float *target, float *dpred);
    /* Number of rows whose largest logit (first on ties) is at the label's column. */
    int (*count_correct)(int rows, int cols, const float *logits, const int32_t *labels);
    /* Sum of mean-cross-entropy terms without gradients: returns the SUM over rows of
     * -log softmax(logits)[label] (used for evaluation). */
    double (*xent_sum)(int rows, int cols, const float *logits, const int32_t *labels);

    /* --- optimizer steps, elementwise over n (TensorFlow 1.x kernels) -----------------------
     * sgd:      w -= lr * g
     * momentum: accum = momentum * accum + g;  w -= lr * accum           (ApplyMomentum)
     * adagrad:  accum += g * g;                w -= lr * g / sqrt(accum) (ApplyAdagrad)
     * adam:     m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
     *           w -= lr_t * m / (sqrt(v) + eps)                          (ApplyAdam)
     *           where the caller passes lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t). */
    void (*sgd_step)(size_t n, float lr, const float *g, float *w);
    void (*momentum_step)(size_t n, float lr, float momentum, const float *g, float *w,
                          float *accum);
    void (*adagrad_step)(size_t n, float lr, const float *g, float *w, float *accum);
    void (*adam_step)(size_t n, float lr_t, float beta1, float beta2, float epsilon, const float *g,
                      float *w, float *m, float *v);
} pf_backend;

/* The backends compiled into this build. Static tables; never NULL. */
const pf_backend *pf_backend_reference(void);
const pf_backend *pf_backend_openblas(void);

/* Shares the cores among `callers` threads that call the "openblas" backend at the same time
 * (a worker's CPU replicas), instead of each gemm asking OpenBLAS for all of them: each gemm
 * then runs on max(1, T / callers) threads, T being OpenBLAS's thread count before the first
 * call (OPENBLAS_NUM_THREADS, else one per core). callers <= 1 gives every gemm T threads
 * again. Returns the threads a gemm now uses. Process-wide: call it while no gemm runs. */
int pf_backend_openblas_share(int callers);

/* Sets T, the threads a gemm of the "openblas" backend uses (and that
 * pf_backend_openblas_share splits), to `threads` (>= 1): the thread policy's choice
 * (cpus.h). Returns the threads now used. Process-wide: call it while no gemm runs. */
int pf_backend_openblas_set_threads(int threads);

/* T as it is now (what pf_backend_openblas_set_threads set, else OpenBLAS's own count): to
 * put it back after a task that sets its own, such as a server in an agent. */
int pf_backend_openblas_threads(void);

/* Puts OpenBLAS's helper threads to sleep until the next gemm: after a call they otherwise
 * spin in sched_yield for up to OpenBLAS's thread timeout (about 0.1 s), taking a core from
 * whatever runs next (a ps or the transport, while a worker waits on the network). The next
 * gemm starts them again. Nothing to do when the pool is not running, or with a BLAS
 * without the hook.
 * Process-wide: call it while no gemm runs. */
void pf_backend_openblas_idle(void);

/* PF_OK when this process can still map the buffers the "openblas" backend's gemm may map
 * (128 MiB for each CPU this process may use) and a little more; PF_ERR_NOMEM, with
 * a message naming RLIMIT_AS and RLIMIT_DATA, when it cannot: OpenBLAS would retry its mmap
 * forever. pf_backend_for_device checks it whenever it returns this backend. Without either
 * limit it maps nothing and returns PF_OK. */
pf_status pf_backend_openblas_check_room(pf_error *err);

/* 0 when a limit (RLIMIT_AS, RLIMIT_DATA) leaves no room for one more OpenBLAS buffer: the
 * helper threads OpenBLAS started when it loaded (one per core) may be spinning on theirs, and
 * the process should start again with OPENBLAS_NUM_THREADS=1 (cli/main.c does). 1 otherwise.
 * pf_backend_openblas_set_threads likewise never raises the threads past what fits. */
int pf_backend_openblas_pool_fits(void);

/* The backend for a device (a job spec's "device"; index is the N of "cuda:N", 0 for
 * "cuda"): PF_DEVICE_CPU -> openblas; PF_DEVICE_CUDA -> cuda on GPU `index`, or
 * PF_ERR_UNSUPPORTED with the one-line reason in err when the build has no CUDA or that GPU
 * is not usable (no driver or one too old, no GPU, index out of range, out of memory);
 * PF_DEVICE_AUTO -> cuda on GPU 0 when usable, else openblas.
 * On PF_OK, err (when not NULL) holds one line for the log, or "" when there is nothing to
 * say (cpu): which GPU was taken ("device cuda:0: NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB"),
 * or for "auto" on the CPU why no GPU was ("device \"auto\": no usable GPU (...); training
 * on the CPU"). Any thread may call it; for cuda it also makes GPU `index` the calling
 * thread's GPU (see pf_backend_cuda). */
pf_status pf_backend_for_device(pf_device device, int index, const pf_backend **out, pf_error *err);

/* The "cuda" table on GPU `index` (counted among the GPUs CUDA_VISIBLE_DEVICES leaves
 * visible), in builds with CUDA only (PSFLOW_HAVE_CUDA); callers go through
 * pf_backend_for_device. The first call for a GPU probes it. A success makes that GPU the
 * calling thread's: the thread's ops run there until it asks for another one (as
 * cudaSetDevice does); a thread that never asked runs on the first GPU the process probed.
 * A buffer is only passed to ops on the GPU it was allocated on: with several GPUs (one per
 * in-graph replica), each thread asks for its GPU before its first op. Returns the table
 * and writes a description of the GPU to msg[0..msg_len) ("NVIDIA H100 80GB HBM3, sm_90,
 * 79.1 GiB"), or returns NULL and writes the one-line reason the GPU is not usable (the
 * thread's GPU is then unchanged). */
const pf_backend *pf_backend_cuda(int index, char *msg, size_t msg_len);

#endif
