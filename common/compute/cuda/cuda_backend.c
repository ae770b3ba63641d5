/* cuda_backend.c - the "cuda" backend: cuBLAS sgemm and the kernels of kernels.cu on GPUs.
 *
 * DESIGN: pf_backend_cuda(N) probes GPU N the first time it is asked for (driver, device,
 * memory, one kernel and one sgemm that must give the right numbers), gives it one stream,
 * and makes it the calling thread's GPU: from then on that thread's ops run on GPU N, the
 * way cudaSetDevice() works. A thread that never asked runs on the first GPU the process
 * probed, so a process that uses one GPU needs no thought about threads. A process that
 * uses several (a worker's in-graph replicas, one per GPU) asks once in each thread that
 * drives one; a buffer is only ever handed to ops on the GPU it was allocated on.
 * All ops on one GPU, from any thread, are queued on that GPU's stream, so the order in
 * which the host issues them is the order in which the GPU runs them. A thread gets its own
 * cuBLAS handle per GPU (cuBLAS handles are not to be shared between threads) and its own
 * pinned staging buffers on its first op there; they go when the thread ends.
 *
 * backend.h's contract, "ops are synchronous from the caller's view", holds this way:
 *   - kernels and sgemm are queued without waiting;
 *   - upload copies the caller's host data into a pinned buffer before it returns (the
 *     caller may reuse its buffer at once) and lets the GPU copy it from there in order;
 *   - download, and every op that returns a number (the losses, count_correct), waits for
 *     the stream, so it sees the results of everything queued before it.
 * Host transfers go through two pinned buffers of STAGE_BYTES in turn, so that the host's
 * memcpy of one chunk overlaps the DMA of the next; if pinned memory cannot be had they
 * go straight from pageable memory (same result, slower).
 *
 * gemm: backend.h's matrices are row-major, cuBLAS's column-major. A row-major [r, c]
 * matrix with row stride ld is, read column-major, its transpose [c, r] with leading
 * dimension ld. So C = op(A) op(B) (row-major) is C^T = op(B)^T op(A)^T (column-major):
 * cublasSgemm with the operands swapped, m and n swapped, each operand keeping its own
 * transpose flag and its own ld. cuBLAS does not read C when beta is 0, as backend.h
 * requires. The math mode is CUBLAS_DEFAULT_MATH: full FP32 (TF32 tensor cores are only
 * used under CUBLAS_TF32_TENSOR_OP_MATH, which psflow never sets), so results agree with
 * the CPU backends to float rounding.
 *
 * The losses return a number to the host: their kernels write one double per row, which
 * is copied back and summed here in row order, as reference.c sums them.
 *
 * Errors: backend ops cannot fail (backend.h). A CUDA or cuBLAS error inside one (the
 * device was lost, an earlier kernel faulted, a launch was refused) leaves no way to go on,
 * so it prints one line naming the op and the error and aborts the process. Only alloc
 * reports running out of GPU memory, by returning NULL, as backend.h says.
 */
#include "psflow/backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda_internal.h"

#define STAGE_BYTES       ((size_t)4 << 20)  /* each of a thread's two pinned buffers */
#define SCRATCH_MIN_BYTES ((size_t)64 << 10) /* loss terms: enough for 8192 rows */
#define PROBE_BYTES       ((size_t)1 << 20)  /* what the probe allocates to test memory */

/* --- cuBLAS, loaded when a GPU is first set up ------------------------------------------ */

/* Not linked: loading libcublas costs about 150 MiB of resident memory at start (its
 * static initialisers touch its tables), which every psflow process - a ps task, a run on
 * the CPU - would pay for nothing. It is opened when the first GPU is probed; its
 * functions are called through this table. */
static struct {
    __typeof__(cublasCreate_v2) *create;
    __typeof__(cublasDestroy_v2) *destroy;
    __typeof__(cublasSetStream_v2) *set_stream;
    __typeof__(cublasSetMathMode) *set_math_mode;
    __typeof__(cublasSgemm_v2) *sgemm;
    __typeof__(cublasGetStatusString) *status_string;
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static char blas_error[512]; /* why cuBLAS could not be loaded; empty once it is */

#define STR_(x)       #x
#define STR(x)        STR_(x)
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

static void *blas_sym(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (!f && !blas_error[0])
        snprintf(blas_error, sizeof blas_error, "%s has no %s", CUBLAS_SONAME, name);
    return f;
}

static void blas_load(void) {
    /* The loader's search path (ld.so.conf names the toolkit's lib directory on a usual
     * install), then the directory of the toolkit this psflow was built with. */
    void *lib = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
#ifdef PSFLOW_CUBLAS_DIR
    if (!lib)
        lib = dlopen(PSFLOW_CUBLAS_DIR "/" CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!lib) {
        const char *why = dlerror();
        snprintf(blas_error, sizeof blas_error, "cannot load %s: %s", CUBLAS_SONAME,
                 why ? why : "not found");
        return;
    }
    /* dlsym's object pointer into each function pointer, as POSIX allows (a cast is not
     * ISO C). */
    struct {
        void *dst;
        const char *name;
    } fns[] = {
        {&blas.create, "cublasCreate_v2"},        {&blas.destroy, "cublasDestroy_v2"},
        {&blas.set_stream, "cublasSetStream_v2"}, {&blas.set_math_mode, "cublasSetMathMode"},
        {&blas.sgemm, "cublasSgemm_v2"},          {&blas.status_string, "cublasGetStatusString"}};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        void *f = blas_sym(lib, fns[i].name);
        _Static_assert(sizeof f == sizeof blas.create, "function and object pointers differ");
        memcpy(fns[i].dst, &f, sizeof f);
    }
}

/* NULL once cuBLAS is loaded (the first call loads it), else why it cannot be. */
static const char *blas_ready(void) {
    pthread_once(&blas_once, blas_load);
    return blas_error[0] ? blas_error : NULL;
}

/* --- the process's GPUs ------------------------------------------------------------------ */

#define MAX_GPUS (PF_MAX_GPU_INDEX + 1)

static pthread_mutex_t bind_lock = PTHREAD_MUTEX_INITIALIZER;
/* GPU i once its probe succeeded: written once under bind_lock before ready[i] is set (a
 * release store), read-only after. */
static struct {
    cudaStream_t stream; /* every op on this GPU, of every thread, is queued here */
    char text[256];      /* "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB" */
} gpus[MAX_GPUS];
static int ready[MAX_GPUS];
/* The first GPU probed, -1 before: where the ops of a thread that chose none run. */
static int first_device = -1;

/* The GPU this thread chose with pf_backend_cuda(), -1 for none. */
static _Thread_local int thread_device = -1;
/* The device cudaSetDevice() last made current on this thread through ctx(); -1 when
 * unknown (the probe makes others current). */
static _Thread_local int thread_current = -1;
/* The stream of the thread's GPU, set by ctx() before every op. */
static _Thread_local cudaStream_t stream;

/* The GPU the calling thread's ops run on. */
static int device(void) {
    return thread_device >= 0 ? thread_device : __atomic_load_n(&first_device, __ATOMIC_ACQUIRE);
}

/* --- fatal errors ------------------------------------------------------------------------ */

static _Noreturn void fatal(const char *op, const char *fmt, ...) {
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "psflow: cuda:%d: %s: %s\n", device(), op, text);
    abort();
}

static void check(const char *op, cudaError_t e) {
    if (e != cudaSuccess)
        fatal(op, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
}

static void check_blas(const char *op, cublasStatus_t s) {
    if (s != CUBLAS_STATUS_SUCCESS)
        fatal(op, "cuBLAS: %s (status %d)", blas.status_string(s), (int)s);
}

/* --- per-thread state -------------------------------------------------------------------- */

typedef struct thread_ctx {
    int device;              /* the GPU this state belongs to */
    struct thread_ctx *next; /* the thread's state on its other GPUs */
    cublasHandle_t blas;
    /* Pinned staging for upload/download; stage_done[i] is recorded after the last GPU
     * copy that reads or writes stage[i]. */
    void *stage[2];
    cudaEvent_t stage_done[2];
    bool staging_set_up; /* tried once: stage[0] is NULL when pinned memory was refused */
    /* Loss terms: device memory and its pinned host mirror, scratch_bytes each. */
    void *scratch, *host_scratch;
    size_t scratch_bytes;
} thread_ctx;

static _Thread_local thread_ctx *tls_ctx; /* per GPU the thread used, the latest first */
static pthread_key_t ctx_key;             /* its destructor frees them when the thread ends */
static pthread_once_t ctx_key_once = PTHREAD_ONCE_INIT;

static void free_staging(thread_ctx *t) {
    for (int i = 0; i < 2; i++) {
        if (t->stage[i]) {
            cudaEventSynchronize(t->stage_done[i]);
            cudaEventDestroy(t->stage_done[i]);
            cudaFreeHost(t->stage[i]);
            t->stage[i] = NULL;
        }
    }
}

/* At thread exit, for every GPU the thread used. Errors are ignored: the thread is ending
 * and has no caller to tell. */
static void ctx_destroy(void *p) {
    for (thread_ctx *t = p, *next; t; t = next) {
        next = t->next;
        cudaSetDevice(t->device);
        free_staging(t);
        if (t->scratch) {
            cudaFree(t->scratch);
            cudaFreeHost(t->host_scratch);
        }
        blas.destroy(t->blas);
        free(t);
    }
    tls_ctx = NULL;
    thread_current = -1;
}

static void ctx_key_create(void) {
    if (pthread_key_create(&ctx_key, ctx_destroy) != 0) {
        fprintf(stderr, "psflow: cuda: cannot create the per-thread key\n");
        abort();
    }
}

/* This thread's state on its GPU (device()), made ready for an op: the GPU current, `stream`
 * its stream, a cuBLAS handle on that stream (set up on the thread's first op there). */
static thread_ctx *ctx(const char *op) {
    const int dev = device();
    thread_ctx *t = tls_ctx;
    if (t && t->device == dev && thread_current == dev)
        return t; /* the common case: the same GPU as the last op */
    if (dev < 0 || !__atomic_load_n(&ready[dev], __ATOMIC_ACQUIRE))
        fatal(op, "no GPU was set up for this process");
    if (thread_current != dev) {
        check(op, cudaSetDevice(dev));
        thread_current = dev;
    }
    stream = gpus[dev].stream;
    thread_ctx **link = &tls_ctx;
    while (*link && (*link)->device != dev)
        link = &(*link)->next;
    if ((t = *link) != NULL) {
        *link = t->next; /* to the front, for the fast path */
    } else {
        pthread_once(&ctx_key_once, ctx_key_create);
        t = calloc(1, sizeof *t);
        if (!t)
            fatal(op, "out of host memory for the thread's CUDA state");
        t->device = dev;
        check_blas(op, blas.create(&t->blas));
        check_blas(op, blas.set_stream(t->blas, stream));
        check_blas(op, blas.set_math_mode(t->blas, CUBLAS_DEFAULT_MATH));
    }
    t->next = tls_ctx;
    tls_ctx = t;
    if (pthread_setspecific(ctx_key, t) != 0)
        fatal(op, "cannot register the thread's CUDA state");
    return t;
}

/* Allocates the two pinned staging buffers on a thread's first transfer. Returns false
 * when pinned memory is refused: transfers then go from pageable memory. */
static bool staging(thread_ctx *t, const char *op) {
    if (!t->staging_set_up) {
        t->staging_set_up = true;
        for (int i = 0; i < 2; i++) {
            cudaError_t e = cudaMallocHost(&t->stage[i], STAGE_BYTES);
            if (e == cudaErrorMemoryAllocation) {
                (void)cudaGetLastError(); /* not sticky: clear it */
                t->stage[i] = NULL;
                free_staging(t);
                break;
            }
            check(op, e);
            check(op, cudaEventCreateWithFlags(&t->stage_done[i], cudaEventDisableTiming));
        }
    }
    return t->stage[0] != NULL;
}

/* At least `bytes` of device scratch (and as much pinned host memory) for loss terms. It
 * only grows, on the first calls with the largest batch, so steady steps allocate nothing. */
static void *scratch(thread_ctx *t, const char *op, size_t bytes) {
    if (bytes <= t->scratch_bytes)
        return t->scratch;
    size_t want = bytes > SCRATCH_MIN_BYTES ? bytes : SCRATCH_MIN_BYTES;
    if (t->scratch) {
        check(op, cudaStreamSynchronize(stream));
        check(op, cudaFree(t->scratch));
        check(op, cudaFreeHost(t->host_scratch));
        t->scratch = t->host_scratch = NULL;
        t->scratch_bytes = 0;
    }
    if (cudaMalloc(&t->scratch, want) != cudaSuccess ||
        cudaMallocHost(&t->host_scratch, want) != cudaSuccess)
        fatal(op, "out of memory for %zu bytes of loss terms", want);
    t->scratch_bytes = want;
    return t->scratch;
}

/* The sum, in order, of the n doubles a loss kernel just queued into the scratch: waits for
 * the kernel, copies them to the host and adds them up as reference.c does. */
static double sum_terms(thread_ctx *t, const char *op, size_t n) {
    const size_t bytes = n * sizeof(double);
    check(op, cudaMemcpyAsync(t->host_scratch, t->scratch, bytes, cudaMemcpyDeviceToHost, stream));
    check(op, cudaStreamSynchronize(stream));
    const double *terms = t->host_scratch;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += terms[i];
    return sum;
}

/* --- memory ------------------------------------------------------------------------------ */

static void *cu_alloc(size_t bytes) {
    ctx("alloc");
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* not sticky: clear it */
        return NULL;
    }
    check("alloc", e);
    return p;
}

static void cu_free(void *buf) {
    if (!buf)
        return;
    ctx("free");
    check("free", cudaStreamSynchronize(stream)); /* queued work may still use buf */
    check("free", cudaFree(buf));
}

/* Host -> device. The caller's buffer is copied into pinned memory before this returns. */
static void to_device(const char *op, void *dst, const void *src, size_t bytes) {
    if (bytes == 0)
        return;
    thread_ctx *t = ctx(op);
    if (!staging(t, op)) {
        check(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
        check(op, cudaStreamSynchronize(stream)); /* src is the caller's again on return */
        return;
    }
    for (size_t off = 0, k = 0; off < bytes; off += STAGE_BYTES, k++) {
        const size_t len = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        const int i = (int)(k % 2);
        /* The GPU copy that last used stage[i] must be over before it is refilled. */
        check(op, cudaEventSynchronize(t->stage_done[i]));
        memcpy(t->stage[i], (const char *)src + off, len);
        check(op,
              cudaMemcpyAsync((char *)dst + off, t->stage[i], len, cudaMemcpyHostToDevice, stream));
        check(op, cudaEventRecord(t->stage_done[i], stream));
    }
}

/* Device -> host, after everything queued before. Chunk k goes through stage[k % 2]: the
 * GPU copies chunk k + 1 while the host copies chunk k out. */
static void to_host(const char *op, void *dst, const void *src, size_t bytes) {
    if (bytes == 0)
        return;
    thread_ctx *t = ctx(op);
    if (!staging(t, op)) {
        check(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
        check(op, cudaStreamSynchronize(stream));
        return;
    }
    const size_t chunks = (bytes + STAGE_BYTES - 1) / STAGE_BYTES;
    for (size_t k = 0; k <= chunks; k++) {
        if (k < chunks) { /* queue chunk k; stage[k % 2] was emptied in round k - 1 */
            const size_t off = k * STAGE_BYTES;
            const size_t len = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
            check(op, cudaMemcpyAsync(t->stage[k % 2], (const char *)src + off, len,
                                      cudaMemcpyDeviceToHost, stream));
            check(op, cudaEventRecord(t->stage_done[k % 2], stream));
        }
        if (k > 0) { /* copy chunk k - 1 out once it has arrived */
            const size_t off = (k - 1) * STAGE_BYTES;
            const size_t len = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
            check(op, cudaEventSynchronize(t->stage_done[(k - 1) % 2]));
            memcpy((char *)dst + off, t->stage[(k - 1) % 2], len);
        }
    }
}

static void cu_upload(float *dst, const float *host_src, size_t n) {
    to_device("upload", dst, host_src, n * sizeof(float));
}

static void cu_download(float *host_dst, const float *src, size_t n) {
    to_host("download", host_dst, src, n * sizeof(float));
}

static void cu_upload_i32(int32_t *dst, const int32_t *host_src, size_t n) {
    to_device("upload_i32", dst, host_src, n * sizeof(int32_t));
}

static void cu_fill(float *dst, float value, size_t n) {
    if (n == 0)
        return;
    ctx("fill");
    check("fill", pfk_fill(stream, dst, value, n));
}

/* dst = src on the device; dst == src is a no-op (activation NONE in place). */
static void copy_on_device(const char *op, float *dst, const float *src, size_t n) {
    if (n == 0 || dst == src)
        return;
    ctx(op);
    check(op, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

static void cu_copy(float *dst, const float *src, size_t n) {
    copy_on_device("copy", dst, src, n);
}

/* --- dense algebra ----------------------------------------------------------------------- */

static void cu_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                    int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0)
        return;
    thread_ctx *t = ctx("gemm");
    if (k <= 0) {
        /* An empty product: C = beta C. cuBLAS would refuse the lda = 0 that k = 0 allows. */
        check("gemm", pfk_scale_matrix(stream, m, n, beta, c, ldc));
        return;
    }
    /* Column-major C^T [n, m] = op(B)^T [n, k] . op(A)^T [k, m]; see DESIGN above. */
    check_blas("gemm", blas.sgemm(t->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a,
                                  lda, &beta, c, ldc));
}

static void cu_axpy(size_t n, float a, const float *x, float *y) {
    if (n == 0)
        return;
    ctx("axpy");
    check("axpy", pfk_axpy(stream, n, a, x, y));
}

static void cu_scale(size_t n, float a, float *x) {
    if (n == 0)
        return;
    ctx("scale");
    check("scale", pfk_scale(stream, n, a, x));
}

/* --- layers ------------------------------------------------------------------------------ */

static void cu_bias_add(int rows, int cols, const float *bias, float *x) {
    if (rows <= 0 || cols <= 0)
        return;
    ctx("bias_add");
    check("bias_add", pfk_bias_add(stream, rows, cols, bias, x));
}

static void cu_bias_grad(int rows, int cols, const float *dy, float *db) {
    if (cols <= 0)
        return;
    ctx("bias_grad");
    check("bias_grad", pfk_bias_grad(stream, rows, cols, dy, db));
}

static void cu_activation(pf_activation act, size_t n, const float *x, float *y) {
    if (act == PF_ACT_NONE) {
        copy_on_device("activation", y, x, n);
        return;
    }
    if (n == 0)
        return;
    ctx("activation");
    check("activation", pfk_activation(stream, act, n, x, y));
}

static void cu_activation_grad(pf_activation act, size_t n, const float *y, const float *dy,
                               float *dx) {
    if (act == PF_ACT_NONE) {
        copy_on_device("activation_grad", dx, dy, n);
        return;
    }
    if (n == 0)
        return;
    ctx("activation_grad");
    check("activation_grad", pfk_activation_grad(stream, act, n, y, dy, dx));
}

/* --- losses ------------------------------------------------------------------------------ */

static float cu_softmax_xent(int rows, int cols, const float *logits, const int32_t *labels,
                             float *dlogits) {
    if (rows <= 0)
        return 0.0f;
    static const char op[] = "softmax_xent";
    thread_ctx *t = ctx(op);
    double *terms = scratch(t, op, (size_t)rows * sizeof(double));
    check(op, pfk_softmax_xent(stream, rows, cols, logits, labels, dlogits, terms));
    return (float)(sum_terms(t, op, (size_t)rows) / rows);
}

static float cu_mse(size_t n, const float *pred, const float *target, float *dpred) {
    if (n == 0)
        return 0.0f;
    static const char op[] = "mse";
    thread_ctx *t = ctx(op);
    const size_t blocks = (n + PFK_MSE_BLOCK - 1) / PFK_MSE_BLOCK;
    double *partial = scratch(t, op, blocks * sizeof(double));
    check(op, pfk_mse(stream, n, pred, target, dpred, partial));
    return (float)(sum_terms(t, op, blocks) / (double)n);
}

static int cu_count_correct(int rows, int cols, const float *logits, const int32_t *labels) {
    if (rows <= 0)
        return 0;
    static const char op[] = "count_correct";
    thread_ctx *t = ctx(op);
    double *ok = scratch(t, op, (size_t)rows * sizeof(double));
    check(op, pfk_correct_rows(stream, rows, cols, logits, labels, ok));
    return (int)sum_terms(t, op, (size_t)rows); /* a sum of 0s and 1s: exact */
}

static double cu_xent_sum(int rows, int cols, const float *logits, const int32_t *labels) {
    if (rows <= 0)
        return 0.0;
    static const char op[] = "xent_sum";
    thread_ctx *t = ctx(op);
    double *terms = scratch(t, op, (size_t)rows * sizeof(double));
    check(op, pfk_xent_rows(stream, rows, cols, logits, labels, terms));
    return sum_terms(t, op, (size_t)rows);
}

/* --- optimizer steps --------------------------------------------------------------------- */

static void cu_sgd_step(size_t n, float lr, const float *g, float *w) {
    if (n == 0)
        return;
    ctx("sgd_step");
    check("sgd_step", pfk_sgd_step(stream, n, lr, g, w));
}

static void cu_momentum_step(size_t n, float lr, float momentum, const float *g, float *w,
                             float *accum) {
    if (n == 0)
        return;
    ctx("momentum_step");
    check("momentum_step", pfk_momentum_step(stream, n, lr, momentum, g, w, accum));
}

static void cu_adagrad_step(size_t n, float lr, const float *g, float *w, float *accum) {
    if (n == 0)
        return;
    ctx("adagrad_step");
    check("adagrad_step", pfk_adagrad_step(stream, n, lr, g, w, accum));
}

static void cu_adam_step(size_t n, float lr_t, float beta1, float beta2, float epsilon,
                         const float *g, float *w, float *m, float *v) {
    if (n == 0)
        return;
    ctx("adam_step");
    check("adam_step", pfk_adam_step(stream, n, lr_t, beta1, beta2, epsilon, g, w, m, v));
}

static const pf_backend cuda_backend = {
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .upload_i32 = cu_upload_i32,
    .fill = cu_fill,
    .copy = cu_copy,
    .gemm = cu_gemm,
    .axpy = cu_axpy,
    .scale = cu_scale,
    .bias_add = cu_bias_add,
    .bias_grad = cu_bias_grad,
    .activation = cu_activation,
    .activation_grad = cu_activation_grad,
    .softmax_xent = cu_softmax_xent,
    .mse = cu_mse,
    .count_correct = cu_count_correct,
    .xent_sum = cu_xent_sum,
    .sgd_step = cu_sgd_step,
    .momentum_step = cu_momentum_step,
    .adagrad_step = cu_adagrad_step,
    .adam_step = cu_adam_step,
};

/* --- probing and binding ----------------------------------------------------------------- */

/* Writes one line to msg[0..len); returns false, the probe's "not usable". */
__attribute__((format(printf, 3, 4))) static bool refuse(char *msg, size_t len, const char *fmt,
                                                         ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return false;
}

/* Why cudaGetDeviceCount() failed, in the user's terms. */
static bool refuse_no_gpu(cudaError_t e, char *msg, size_t len) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    (void)cudaGetLastError();
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    switch (e) {
    case cudaErrorInsufficientDriver:
        if (driver == 0)
            return refuse(msg, len, "no NVIDIA driver found: %s", cudaGetErrorString(e));
        return refuse(msg, len,
                      "the NVIDIA driver supports CUDA %d.%d, this psflow needs CUDA %d.%d: "
                      "update the driver",
                      driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    case cudaErrorNoDevice:
        if (visible)
            return refuse(msg, len, "no CUDA GPU found (CUDA_VISIBLE_DEVICES=%.40s)", visible);
        return refuse(msg, len, "no CUDA GPU found");
    default:
        return refuse(msg, len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    }
}

/* Why a call on the chosen GPU failed, in the user's terms. */
static bool refuse_on_gpu(int index, const struct cudaDeviceProp *p, const char *what,
                          cudaError_t e, char *msg, size_t len) {
    (void)cudaGetLastError();
    if (e == cudaErrorMemoryAllocation) {
        size_t free_bytes = 0, total_bytes = 0;
        cudaMemGetInfo(&free_bytes, &total_bytes);
        (void)cudaGetLastError();
        return refuse(msg, len, "out of memory on GPU %d (%s): %.0f MiB free of %.0f MiB", index,
                      p->name, (double)free_bytes / 1048576.0, (double)total_bytes / 1048576.0);
    }
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorUnsupportedPtxVersion ||
        e == cudaErrorInvalidPtx)
        return refuse(msg, len,
                      "GPU %d (%s, sm_%d%d) cannot run this psflow's kernels (built for CUDA "
                      "architectures %s): rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d",
                      index, p->name, p->major, p->minor, PSFLOW_CUDA_ARCHS, p->major, p->minor);
    return refuse(msg, len, "GPU %d (%s): %s: %s (%s)", index, p->name, what, cudaGetErrorString(e),
                  cudaGetErrorName(e));
}

/* Runs the first kernel and the first sgemm on the chosen GPU and checks their results:
 * d = [2, 3, 0, 0]; d[3] = d[0] * d[1] by cublasSgemm (1x1x1). */
static bool probe_compute(int index, const struct cudaDeviceProp *p, cudaStream_t s, char *msg,
                          size_t len) {
    float *d = NULL;
    cublasHandle_t h = NULL;
    float host[4] = {0};
    bool ok = false;
    cudaError_t e = cudaMalloc((void **)&d, PROBE_BYTES);
    if (e != cudaSuccess)
        return refuse_on_gpu(index, p, "cudaMalloc", e, msg, len);
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    if ((e = pfk_fill(s, d, 0.0f, 4)) != cudaSuccess ||
        (e = pfk_fill(s, d, 2.0f, 1)) != cudaSuccess ||
        (e = pfk_fill(s, d + 1, 3.0f, 1)) != cudaSuccess) {
        refuse_on_gpu(index, p, "first kernel", e, msg, len);
    } else if (blas_ready()) {
        refuse(msg, len, "GPU %d (%s): %s", index, p->name, blas_ready());
    } else if ((bs = blas.create(&h)) != CUBLAS_STATUS_SUCCESS ||
               (bs = blas.set_stream(h, s)) != CUBLAS_STATUS_SUCCESS ||
               (bs = blas.set_math_mode(h, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
        refuse(msg, len, "GPU %d (%s): cuBLAS cannot start: %s", index, p->name,
               blas.status_string(bs));
    } else {
        const float one = 1.0f, zero = 0.0f;
        bs =
            blas.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, d, 1, d + 1, 1, &zero, d + 3, 1);
        if (bs != CUBLAS_STATUS_SUCCESS)
            refuse(msg, len, "GPU %d (%s): cuBLAS sgemm fails: %s", index, p->name,
                   blas.status_string(bs));
        else if ((e = cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyDeviceToHost, s)) !=
                     cudaSuccess ||
                 (e = cudaStreamSynchronize(s)) != cudaSuccess)
            refuse_on_gpu(index, p, "first kernel", e, msg, len);
        else if (host[0] != 2.0f || host[1] != 3.0f || host[2] != 0.0f || host[3] != 6.0f)
            refuse(msg, len,
                   "GPU %d (%s) computes wrong results: [2 3 0 6] came back as "
                   "[%g %g %g %g]",
                   index, p->name, (double)host[0], (double)host[1], (double)host[2],
                   (double)host[3]);
        else
            ok = true;
    }
    /* Tearing down must work too: a GPU that fails here would fail the first op. */
    if (h && (bs = blas.destroy(h)) != CUBLAS_STATUS_SUCCESS && ok)
        ok = refuse(msg, len, "GPU %d (%s): cuBLAS cannot stop: %s", index, p->name,
                    blas.status_string(bs));
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess && ok)
        ok = refuse_on_gpu(index, p, "cudaStreamSynchronize", e, msg, len);
    if ((e = cudaFree(d)) != cudaSuccess && ok)
        ok = refuse_on_gpu(index, p, "cudaFree", e, msg, len);
    (void)cudaGetLastError();
    return ok;
}

/* Whether GPU `index` is usable; on success *s is a new stream on it and msg describes it,
 * else msg says why not. Leaves `index` the calling thread's current device. */
static bool probe(int index, cudaStream_t *s, char *msg, size_t len) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return refuse_no_gpu(e, msg, len);
    if (count <= 0)
        return refuse(msg, len, "no CUDA GPU found");
    if (index < 0 || index >= count) {
        if (count == 1)
            return refuse(msg, len, "only 1 GPU is visible (cuda:0)");
        return refuse(msg, len, "only %d GPUs are visible (cuda:0 to cuda:%d)", count, count - 1);
    }
    struct cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "?");
    if ((e = cudaGetDeviceProperties(&p, index)) != cudaSuccess)
        return refuse_on_gpu(index, &p, "cudaGetDeviceProperties", e, msg, len);
    int mode = cudaComputeModeDefault;
    if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, index) == cudaSuccess &&
        mode == cudaComputeModeProhibited)
        return refuse(msg, len, "GPU %d (%s) is in compute mode Prohibited: no process may use it",
                      index, p.name);
    (void)cudaGetLastError();
    if ((e = cudaSetDevice(index)) != cudaSuccess)
        return refuse_on_gpu(index, &p, "cudaSetDevice", e, msg, len);
    if ((e = cudaStreamCreateWithFlags(s, cudaStreamNonBlocking)) != cudaSuccess)
        return refuse_on_gpu(index, &p, "cudaStreamCreate", e, msg, len);
    if (!probe_compute(index, &p, *s, msg, len)) {
        cudaStreamDestroy(*s);
        (void)cudaGetLastError();
        return false;
    }
    snprintf(msg, len, "%.120s, sm_%d%d, %.1f GiB", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return true;
}

const pf_backend *pf_backend_cuda(int index, char *msg, size_t msg_len) {
    char text[256];
    const pf_backend *be = NULL;
    pthread_mutex_lock(&bind_lock);
    if (index >= 0 && index < MAX_GPUS && __atomic_load_n(&ready[index], __ATOMIC_ACQUIRE)) {
        snprintf(text, sizeof text, "%s", gpus[index].text);
        be = &cuda_backend;
    } else {
        cudaStream_t s;
        if (index >= 0 && index < MAX_GPUS && probe(index, &s, text, sizeof text)) {
            gpus[index].stream = s;
            snprintf(gpus[index].text, sizeof gpus[index].text, "%s", text);
            __atomic_store_n(&ready[index], 1, __ATOMIC_RELEASE);
            int none = -1;
            __atomic_compare_exchange_n(&first_device, &none, index, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED);
            be = &cuda_backend;
        } else if (index < 0 || index >= MAX_GPUS) {
            refuse(text, sizeof text, "no GPU cuda:%d", index);
        }
        thread_current = -1; /* the probe may have made another device current */
    }
    pthread_mutex_unlock(&bind_lock);
    if (be)
        thread_device = index;
    if (msg && msg_len > 0)
        snprintf(msg, msg_len, "%s", text);
    return be;
}
