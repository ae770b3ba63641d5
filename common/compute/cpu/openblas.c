/* openblas.c - the "openblas" backend: the default on CPU and the training hot path.
 *
 * DESIGN: gemm, axpy and scale go to OpenBLAS (cblas, row-major). Everything else is a
 * plain float loop over restrict-qualified pointers that GCC vectorises at -O3: the
 * elementwise ops and the optimizer steps are memory-bound, and one pass per op with no
 * temporaries is what keeps them cheap. Ops whose output may alias an input (activation,
 * activation_grad, softmax_xent, mse) leave those pointers unqualified; every element's
 * output depends only on the same element's input (and on row totals read before any
 * write), so in-place calls are safe and GCC's runtime alias check still takes the vector
 * path for them. Nothing allocates per call. The adagrad and adam loops call sqrtf, which
 * GCC vectorises only under -fno-math-errno (about 4x faster on those two steps); without
 * the flag they are correct but scalar. tanhf/expf stay libm calls either way.
 *
 * Reductions (row sums of softmax, the losses) accumulate in double: they are short next
 * to the gemm, and the loss a user watches should not drift with the batch size.
 * reference.c holds the naive versions these are tested against (tests/compute/test_compute.c).
 *
 * Threads: each gemm runs on OpenBLAS's own threads (OPENBLAS_NUM_THREADS, else one per
 * core, or pf_backend_openblas_set_threads(): the thread policy of psflow/cpus.h). Several
 * threads calling at once (a worker's CPU replicas) would each ask for every core;
 * pf_backend_openblas_share() splits the cores among them instead. Between calls OpenBLAS's
 * helper threads spin in sched_yield for up to its thread timeout (2^28 cycles, ~0.1 s);
 * pf_backend_openblas_idle() stops the pool while a worker waits on the network (measured:
 * a 20 ms wait after a 2-thread gemm burns a whole core without it, nothing with it; the
 * pool's restart at the next gemm costs a thread creation).
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include "psflow/backend.h"
#include "psflow/cpus.h"
#include "psflow/mem.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "cpu_internal.h"

/* Largest n one cblas call takes: blasint may be a 32-bit int. */
#define BLAS_CHUNK ((size_t)INT_MAX)

/* The elementwise optimizer steps are bound by sqrt and division throughput, so they are
 * compiled for several x86-64 levels and the widest one the CPU supports is picked when
 * the program loads (GCC's target_clones); the binary stays portable. Every clone does the
 * same IEEE operations per element (-std=c11 keeps FP contraction off), so results are
 * bit-identical whichever clone runs. */
/* Not under ThreadSanitizer: its instrumentation of the ifunc resolver runs before it is
 * initialised. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__has_attribute) && \
    !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("default", "avx2", "arch=x86-64-v4")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif

/* --- dense algebra ------------------------------------------------------------------------ */

static void ob_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                    int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        /* C = beta C. cblas would do the same but rejects the lda = 0 that k = 0 allows. */
        for (int i = 0; i < m; i++) {
            float *restrict row = c + (size_t)i * (size_t)ldc;
            for (int j = 0; j < n; j++)
                row[j] = beta == 0.0f ? 0.0f : beta * row[j];
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void ob_axpy(size_t n, float a, const float *x, float *y) {
    for (size_t done = 0; done < n; done += BLAS_CHUNK) {
        size_t len = n - done < BLAS_CHUNK ? n - done : BLAS_CHUNK;
        cblas_saxpy((int)len, a, x + done, 1, y + done, 1);
    }
}

static void ob_scale(size_t n, float a, float *x) {
    for (size_t done = 0; done < n; done += BLAS_CHUNK) {
        size_t len = n - done < BLAS_CHUNK ? n - done : BLAS_CHUNK;
        cblas_sscal((int)len, a, x + done, 1);
    }
}

/* --- layers ------------------------------------------------------------------------------- */

static void ob_bias_add(int rows, int cols, const float *restrict bias, float *restrict x) {
    if (cols <= 0)
        return;
    for (int r = 0; r < rows; r++) {
        float *restrict row = x + (size_t)r * (size_t)cols;
        for (int c = 0; c < cols; c++)
            row[c] += bias[c];
    }
}

/* Row by row rather than column by column: the inner loop runs along contiguous memory and
 * vectorises over columns. */
static void ob_bias_grad(int rows, int cols, const float *restrict dy, float *restrict db) {
    if (cols <= 0)
        return;
    for (int c = 0; c < cols; c++)
        db[c] = 0.0f;
    for (int r = 0; r < rows; r++) {
        const float *restrict row = dy + (size_t)r * (size_t)cols;
        for (int c = 0; c < cols; c++)
            db[c] += row[c];
    }
}

static void copy_unless_same(float *dst, const float *src, size_t n) {
    if (dst != src && n > 0)
        memmove(dst, src, n * sizeof *dst);
}

static void ob_activation(pf_activation act, size_t n, const float *x, float *y) {
    switch (act) {
    case PF_ACT_RELU:
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return;
    case PF_ACT_TANH:
        for (size_t i = 0; i < n; i++)
            y[i] = tanhf(x[i]);
        return;
    case PF_ACT_SIGMOID:
        /* exp(-x) overflows to inf for x < -88, giving exactly 0: the right limit. */
        for (size_t i = 0; i < n; i++)
            y[i] = 1.0f / (1.0f + expf(-x[i]));
        return;
    case PF_ACT_NONE:
        break;
    }
    copy_unless_same(y, x, n);
}

static void ob_activation_grad(pf_activation act, size_t n, const float *restrict y,
                               const float *dy, float *dx) {
    switch (act) {
    case PF_ACT_RELU:
        for (size_t i = 0; i < n; i++) {
            float d = dy[i]; /* read unconditionally, so the loop vectorises */
            dx[i] = y[i] > 0.0f ? d : 0.0f;
        }
        return;
    case PF_ACT_TANH:
        for (size_t i = 0; i < n; i++)
            dx[i] = dy[i] * (1.0f - y[i] * y[i]);
        return;
    case PF_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++)
            dx[i] = dy[i] * y[i] * (1.0f - y[i]);
        return;
    case PF_ACT_NONE:
        break;
    }
    copy_unless_same(dx, dy, n);
}

/* --- losses ------------------------------------------------------------------------------- */

static float row_max(int cols, const float *row) {
    float max = row[0];
    for (int c = 1; c < cols; c++)
        max = row[c] > max ? row[c] : max;
    return max;
}

static float ob_softmax_xent(int rows, int cols, const float *logits, const int32_t *labels,
                             float *dlogits) {
    if (rows <= 0)
        return 0.0f;
    const float inv_rows = 1.0f / (float)rows;
    double loss = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *row = logits + (size_t)r * (size_t)cols;
        float *drow = dlogits + (size_t)r * (size_t)cols;
        const int label = labels[r];
        /* Read everything needed from row before drow (which may be row) is written. */
        const float max = row_max(cols, row);
        const float shifted_label = row[label] - max;
        double sum = 0.0;
        for (int c = 0; c < cols; c++) {
            float e = expf(row[c] - max);
            drow[c] = e;
            sum += e;
        }
        /* sum >= 1 (the max contributes exp(0)), so the log and the division are safe. */
        loss += log(sum) - shifted_label;
        const float norm = (float)(1.0 / sum) * inv_rows;
        for (int c = 0; c < cols; c++)
            drow[c] *= norm;
        drow[label] -= inv_rows;
    }
    return (float)(loss / rows);
}

static float ob_mse(size_t n, const float *pred, const float *target, float *dpred) {
    if (n == 0)
        return 0.0f;
    const float scale = 2.0f / (float)n;
    double loss = 0.0;
    for (size_t i = 0; i < n; i++) {
        float diff = pred[i] - target[i];
        loss += (double)diff * diff;
        dpred[i] = scale * diff;
    }
    return (float)(loss / (double)n);
}

static double ob_xent_sum(int rows, int cols, const float *logits, const int32_t *labels) {
    double total = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *row = logits + (size_t)r * (size_t)cols;
        const float max = row_max(cols, row);
        double sum = 0.0;
        for (int c = 0; c < cols; c++)
            sum += expf(row[c] - max);
        total += log(sum) - (row[labels[r]] - max);
    }
    return total;
}

/* --- optimizer steps ----------------------------------------------------------------------
 * Written as TensorFlow's training_ops kernels write them, in float. */

VECTOR_CLONES static void ob_sgd_step(size_t n, float lr, const float *restrict g,
                                      float *restrict w) {
    for (size_t i = 0; i < n; i++)
        w[i] -= lr * g[i];
}

VECTOR_CLONES static void ob_momentum_step(size_t n, float lr, float momentum,
                                           const float *restrict g, float *restrict w,
                                           float *restrict accum) {
    for (size_t i = 0; i < n; i++) {
        float acc = accum[i] * momentum + g[i];
        accum[i] = acc;
        w[i] -= lr * acc;
    }
}

VECTOR_CLONES static void ob_adagrad_step(size_t n, float lr, const float *restrict g,
                                          float *restrict w, float *restrict accum) {
    for (size_t i = 0; i < n; i++) {
        float acc = accum[i] + g[i] * g[i];
        accum[i] = acc;
        w[i] -= lr * g[i] / sqrtf(acc);
    }
}

VECTOR_CLONES static void ob_adam_step(size_t n, float lr_t, float beta1, float beta2,
                                       float epsilon, const float *restrict g, float *restrict w,
                                       float *restrict m, float *restrict v) {
    const float one_minus_beta1 = 1.0f - beta1;
    const float one_minus_beta2 = 1.0f - beta2;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = m[i] + (gi - m[i]) * one_minus_beta1;
        float vi = v[i] + (gi * gi - v[i]) * one_minus_beta2;
        m[i] = mi;
        v[i] = vi;
        w[i] -= lr_t * mi / (sqrtf(vi) + epsilon);
    }
}

static const pf_backend openblas_backend = {
    .name = "openblas",
    .host_memory = true,
    .alloc = cpu_alloc,
    .alloc_zeroed = true,
    .free = pf_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .upload_i32 = cpu_copy_i32,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .gemm = ob_gemm,
    .axpy = ob_axpy,
    .scale = ob_scale,
    .bias_add = ob_bias_add,
    .bias_grad = ob_bias_grad,
    .activation = ob_activation,
    .activation_grad = ob_activation_grad,
    .softmax_xent = ob_softmax_xent,
    .mse = ob_mse,
    .count_correct = cpu_count_correct,
    .xent_sum = ob_xent_sum,
    .sgd_step = ob_sgd_step,
    .momentum_step = ob_momentum_step,
    .adagrad_step = ob_adagrad_step,
    .adam_step = ob_adam_step,
};

const pf_backend *pf_backend_openblas(void) {
    return &openblas_backend;
}

/* --- sharing the cores ----------------------------------------------------------------------- */

static int threads_that_fit(int threads);

static pthread_once_t share_once = PTHREAD_ONCE_INIT;
static int share_base; /* OpenBLAS's threads before the first pf_backend_openblas_share() */

static void share_init(void) {
    if (share_base > 0) /* pf_backend_openblas_set_threads came first */
        return;
    share_base = openblas_get_num_threads();
    if (share_base < 1)
        share_base = 1;
}

int pf_backend_openblas_set_threads(int threads) {
    share_base = threads_that_fit(threads < 1 ? 1 : threads);
    pthread_once(&share_once, share_init);
    openblas_set_num_threads(share_base);
    return share_base;
}

int pf_backend_openblas_threads(void) {
    pthread_once(&share_once, share_init);
    return share_base;
}

/* OpenBLAS's own shutdown of its thread pool (what its fork handler calls): exported by the
 * pthreads and OpenMP builds, absent from others, hence weak. Its next level-3 call starts
 * the pool again (exec_blas checks blas_server_avail). */
extern int blas_thread_shutdown_(void) __attribute__((weak));

void pf_backend_openblas_idle(void) {
    if (blas_thread_shutdown_) /* returns at once when the pool is not running */
        blas_thread_shutdown_();
}

int pf_backend_openblas_share(int callers) {
    pthread_once(&share_once, share_init);
    int per = callers > 1 ? share_base / callers : share_base;
    if (per < 1)
        per = 1;
    openblas_set_num_threads(per);
    return per;
}

/* --- room for OpenBLAS's buffers ------------------------------------------------------------ */

/* OpenBLAS maps one buffer of BUFFER_SIZE (32 << 22 bytes in its x86_64 and arm64 builds)
 * for each thread that runs a gemm: a helper thread of its pool when the pool starts (at load
 * time, before main, and when the thread count is raised), the calling thread at its first
 * gemm; and it retries that mmap forever when it fails. Under a low RLIMIT_AS or RLIMIT_DATA a
 * task would spin there with no word, and even exit would wait for the spinning helpers. */
#define OPENBLAS_BUFFER (128ull << 20)
#define OPENBLAS_SLACK  (64ull << 20) /* the rest of a first step: stacks, arenas, batches */

static int limited(void) {
    struct rlimit as, data;
    return (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) ||
           (getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_cur != RLIM_INFINITY);
}

/* 1 when this process can map `bytes` more now: counted against both limits as OpenBLAS's
 * own mapping would be, never touched, unmapped at once. */
static int can_map(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
        return 0;
    munmap(p, bytes);
    return 1;
}

static void limit_text(int resource, char *out, size_t cap) {
    struct rlimit rl;
    if (getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        snprintf(out, cap, "unlimited");
    else
        snprintf(out, cap, "%llu MiB", (unsigned long long)(rl.rlim_cur >> 20));
}

int pf_backend_openblas_pool_fits(void) {
    return !limited() || can_map(OPENBLAS_BUFFER + OPENBLAS_SLACK);
}

/* The most threads, at most `threads`, whose buffers this process can still map. */
static int threads_that_fit(int threads) {
    while (threads > 1 && limited() && !can_map((size_t)threads * OPENBLAS_BUFFER))
        threads--;
    return threads;
}

pf_status pf_backend_openblas_check_room(pf_error *err) {
    /* Its memory table files a buffer under the CPU the caller ran on, so a thread that
     * moves between CPUs may map one on each: room for one per CPU this process may use. */
    int cpus = pf_cpus_available();
    size_t bytes = (size_t)(cpus > 1 ? cpus : 1) * OPENBLAS_BUFFER + OPENBLAS_SLACK;
    if (!limited() || can_map(bytes))
        return PF_OK;
    char as[32], data[32];
    limit_text(RLIMIT_AS, as, sizeof as);
    limit_text(RLIMIT_DATA, data, sizeof data);
    return pf_error_set(err, PF_ERR_NOMEM, NULL,
                        "not enough memory to start: OpenBLAS may map %llu MiB for each of the %d "
                        "CPUs this process may use, and it cannot map %zu MiB more (RLIMIT_AS %s, "
                        "RLIMIT_DATA %s: ulimit -v, ulimit -d); raise the limit",
                        OPENBLAS_BUFFER >> 20, cpus, bytes >> 20, as, data);
}
