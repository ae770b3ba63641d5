/* test_cuda.c - the "cuda" backend on a GPU: the one table of op cases that every backend
 * runs (tests/compute/op_cases.h: each op against the "reference" backend, with the shapes,
 * tolerances and edge cases listed there, sizes past one CUDA grid included), and what is
 * CUDA's own:
 *   - the device table: asking for "cuda" again gives the same table, bound to the same GPU;
 *   - host transfers larger than the 4 MiB pinned staging buffers, a host buffer reused at
 *     once after an upload, nothing written past the end of a download, fill and copy past
 *     one grid, alloc failing with NULL (and the backend working on afterwards);
 *   - ops issued from several threads (each gets its own cuBLAS handle), also from threads
 *     that each choose a GPU (on a machine with several, different ones).
 *
 * Running it: `ctest -L gpu` or build/tests/test_cuda. Without a usable GPU (a build without
 * CUDA, no driver, no device) it prints "skipped: <reason>" and exits 77, which CTest reports
 * as Skipped, never as Passed. On a machine that has a GPU, set PSFLOW_TEST_REQUIRE_GPU=1:
 * then a GPU that cannot be used fails the test instead of skipping it.
 * PSFLOW_TEST_CUDA_STANDIN=openblas (or reference) runs every test here against that CPU
 * backend in place of cuda, which checks this file itself on a machine without a GPU and
 * says nothing about cuda (the NaN rules case skips with openblas, which does not follow
 * them). tests/compute/test_compute.c runs the same table on the CPU backends.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/compute/gpu_test.h"
#include "psflow/backend.h"
#include "psflow/mem.h"
#include "psflow/rng.h"
#include "tests/compute/op_cases.h"
#include "tests/support/backend_check.h"

/* Past one grid of the kernels (4096 blocks x 256 threads = 1048576): every thread loops. */
#define PAST_GRID ((size_t)2 * 1048576 + 5)
/* The staging buffers hold 4 MiB = 1048576 floats each. */
#define STAGE_FLOATS ((size_t)1048576)

static const pf_backend *gpu; /* the backend under test: cuda, or the stand-in */
static bool standin;

static const pf_backend *oracle(void) {
    return pf_backend_reference();
}

/* --- the op cases --------------------------------------------------------------------- */

/* One case of the shared table on the GPU. */
static void test_op_case(void **state) {
    const op_case *c = *state;
    const char *why = "";
    if (!op_case_applies(c, gpu, &why)) {
        print_message("  not for %s: %s\n", gpu->name, why);
        skip();
    }
    c->run(gpu);
}

/* --- table and memory ----------------------------------------------------------------- */

/* The "cuda" table; asking again gives the same table, bound to the same GPU. */
static void test_device_table(void **state) {
    (void)state;
    if (standin)
        skip(); /* no device behind a CPU stand-in */
    assert_string_equal(gpu->name, "cuda");
    const pf_backend *again = NULL;
    pf_error err;
    assert_int_equal(pf_backend_for_device(PF_DEVICE_CUDA, 0, &again, &err), PF_OK);
    assert_ptr_equal(again, gpu);
    print_message("  %s\n", err.message);
}

/* Upload and download are exact, for sizes below, at and past the staging buffers; a
 * download writes nothing past its end. */
static void test_round_trip(void **state) {
    (void)state;
    static const size_t sizes[] = {1,
                                   7,
                                   1031,
                                   STAGE_FLOATS - 1,
                                   STAGE_FLOATS,
                                   STAGE_FLOATS + 1,
                                   2 * STAGE_FLOATS + STAGE_FLOATS / 2 + 3};
    pf_rng rng;
    pf_rng_init(&rng, 7, 100);
    for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
        const size_t n = sizes[s];
        float *src = host_new(n), *back = host_new(n + 16);
        fill_uniform(&rng, src, n, -5.0f, 5.0f);
        for (size_t i = 0; i < n + 16; i++)
            back[i] = -777.0f;
        float *d = put(gpu, src, n);
        take(gpu, back, d, n);
        if (memcmp(back, src, n * sizeof *src) != 0)
            fail_msg("round trip of %zu floats is not exact", n);
        for (size_t i = n; i < n + 16; i++)
            if (back[i] != -777.0f)
                fail_msg("download of %zu floats wrote element %zu", n, i);

        /* int32 too */
        int32_t *isrc = pf_malloc(n * sizeof *isrc), *iback = pf_malloc(n * sizeof *iback);
        assert_non_null(isrc);
        assert_non_null(iback);
        for (size_t i = 0; i < n; i++)
            isrc[i] = (int32_t)(uint32_t)(i * 2654435761u);
        int32_t *di = put_i32(gpu, isrc, n);
        /* download takes floats: the bits come back unchanged either way */
        gpu->download((float *)iback, (const float *)di, n);
        gpu->free(di);
        if (memcmp(iback, isrc, n * sizeof *isrc) != 0)
            fail_msg("int32 round trip of %zu values is not exact", n);
        pf_free(iback);
        pf_free(isrc);
        pf_free(back);
        pf_free(src);
    }
}

/* An upload has taken the host data when it returns: the caller may overwrite its buffer
 * at once (the GPU copies from a pinned staging buffer, which must not be refilled while a
 * copy from it is still queued). */
static void test_upload_then_reuse(void **state) {
    (void)state;
    static const size_t sizes[] = {5, STAGE_FLOATS + 7, 3 * STAGE_FLOATS + 1};
    for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
        const size_t n = sizes[s];
        float *h = host_new(n), *back = host_new(n);
        float *d[4];
        for (int k = 0; k < 4; k++) {
            for (size_t i = 0; i < n; i++)
                h[i] = (float)(k * 1000003 + (int)(i % 1000003));
            d[k] = gpu->alloc(n * sizeof(float));
            assert_non_null(d[k]);
            gpu->upload(d[k], h, n); /* h is overwritten right after, by the next round */
        }
        for (int k = 0; k < 4; k++) {
            take(gpu, back, d[k], n);
            for (size_t i = 0; i < n; i++)
                if (back[i] != (float)(k * 1000003 + (int)(i % 1000003)))
                    fail_msg("upload %d of %zu floats: element %zu is %g, want %g", k, n, i,
                             (double)back[i], (double)(k * 1000003 + (int)(i % 1000003)));
        }
        pf_free(back);
        pf_free(h);
    }
}

static void test_fill_copy(void **state) {
    (void)state;
    static const size_t sizes[] = {1, 1031, PAST_GRID};
    pf_rng rng;
    pf_rng_init(&rng, 7, 101);
    for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
        const size_t n = sizes[s];
        const size_t off_dst = n > 20 ? 10 : 0, off_src = n > 20 ? 20 : 0;
        const size_t len = n > 20 ? n - 30 : n;
        float *src = host_new(n), *back = host_new(n);
        fill_uniform(&rng, src, n, -5.0f, 5.0f);
        float *x = put(gpu, src, n);
        float *y = gpu->alloc(n * sizeof(float));
        assert_non_null(y);
        gpu->fill(y, -3.5f, n);
        gpu->copy(y + off_dst, x + off_src, len);
        take(gpu, back, y, n);
        gpu->free(x);
        for (size_t i = 0; i < n; i++) {
            float want = (i >= off_dst && i < off_dst + len) ? src[i - off_dst + off_src] : -3.5f;
            if (back[i] != want)
                fail_msg("fill/copy, n=%zu: element %zu is %g, want %g", n, i, (double)back[i],
                         (double)want);
        }
        pf_free(back);
        pf_free(src);
    }
}

/* alloc reports running out of memory with NULL, and the backend works on afterwards. */
static void test_alloc_failure(void **state) {
    (void)state;
    if (standin)
        skip(); /* a CPU allocator under a sanitizer may abort instead of failing */
    void *huge = gpu->alloc((size_t)1 << 50); /* 1 PiB */
    assert_null(huge);
    static const float v[3] = {1, 2, 3};
    float back[3];
    float *d = put(gpu, v, 3);
    take(gpu, back, d, 3);
    assert_memory_equal(back, v, sizeof v);
}

/* --- threads -------------------------------------------------------------------------- */

/* Four threads at once, each with its own buffers (backend.h: buffers are not shared
 * between threads while in use), each running an upload, a gemm, a bias, an activation,
 * softmax_xent and a download; then the main thread goes on. Each thread sets up its own
 * cuBLAS handle and staging buffers and frees them when it ends. */
enum { THREADS = 4, TM = 96, TN = 10, TK = 200 };

typedef struct thread_job {
    int id;
    int gpu; /* test_gpu_per_thread: the GPU the thread chooses */
    float a[TM * TK], b[TK * TN], bias[TN];
    int32_t labels[TM];
    float want_logits[TM * TN], want_grad[TM * TN];
    float want_loss;
    char error[512]; /* "" when the thread's results matched */
} thread_job;

/* No cmocka assertions here: they must not run on other threads. Returns false with
 * j->error set when a buffer cannot be had. */
static bool run_thread_ops(const pf_backend *be, thread_job *j, float *logits, float *grad,
                           float *loss) {
    float *da = be->alloc(TM * TK * sizeof(float)), *db = be->alloc(TK * TN * sizeof(float));
    float *dbias = be->alloc(TN * sizeof(float)), *dc = be->alloc(TM * TN * sizeof(float));
    float *dg = be->alloc(TM * TN * sizeof(float));
    int32_t *dl = be->alloc(TM * sizeof(int32_t));
    bool ok = da && db && dbias && dc && dg && dl;
    if (ok) {
        be->upload(da, j->a, TM * TK);
        be->upload(db, j->b, TK * TN);
        be->upload(dbias, j->bias, TN);
        be->upload_i32(dl, j->labels, TM);
        be->gemm(false, false, TM, TN, TK, 1.0f, da, TK, db, TN, 0.0f, dc, TN);
        be->bias_add(TM, TN, dbias, dc);
        be->activation(PF_ACT_TANH, TM * TN, dc, dc);
        *loss = be->softmax_xent(TM, TN, dc, dl, dg);
        be->download(logits, dc, TM * TN);
        be->download(grad, dg, TM * TN);
    } else {
        snprintf(j->error, sizeof j->error, "thread %d: %s cannot allocate", j->id, be->name);
    }
    void *bufs[] = {dl, dg, dc, dbias, db, da};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++)
        if (bufs[i])
            be->free(bufs[i]);
    return ok;
}

static void *thread_main(void *arg) {
    thread_job *j = arg;
    float logits[TM * TN], grad[TM * TN], loss = 0.0f;
    for (int round = 0; round < 3; round++) {
        if (!run_thread_ops(gpu, j, logits, grad, &loss))
            return NULL;
        for (int i = 0; i < TM * TN; i++) {
            double e1 = fabs((double)logits[i] - j->want_logits[i]);
            double e2 = fabs((double)grad[i] - j->want_grad[i]);
            if (!(e1 <= 1e-4 + 1e-4 * fabs(j->want_logits[i])) ||
                !(e2 <= 1e-7 + 1e-4 * fabs(j->want_grad[i]))) {
                snprintf(j->error, sizeof j->error,
                         "thread %d round %d element %d: logits %.9g vs %.9g, grad %.9g vs %.9g",
                         j->id, round, i, (double)logits[i], (double)j->want_logits[i],
                         (double)grad[i], (double)j->want_grad[i]);
                return NULL;
            }
        }
        if (!(fabs((double)loss - j->want_loss) <= 1e-5 + 1e-5 * fabs(j->want_loss))) {
            snprintf(j->error, sizeof j->error, "thread %d round %d: loss %.9g vs %.9g", j->id,
                     round, (double)loss, (double)j->want_loss);
            return NULL;
        }
    }
    return NULL;
}

/* Jobs with inputs and the oracle's results, for test_threads and test_gpu_per_thread. */
static thread_job *thread_jobs(uint64_t stream) {
    thread_job *jobs = pf_calloc(THREADS, sizeof *jobs);
    assert_non_null(jobs);
    pf_rng rng;
    pf_rng_init(&rng, 42, stream);
    for (int t = 0; t < THREADS; t++) {
        thread_job *j = &jobs[t];
        j->id = t;
        fill_uniform(&rng, j->a, TM * TK, -1.0f, 1.0f);
        fill_uniform(&rng, j->b, TK * TN, -0.2f, 0.2f);
        fill_uniform(&rng, j->bias, TN, -1.0f, 1.0f);
        edge_labels(&rng, j->labels, TM, TN);
        assert_true(run_thread_ops(oracle(), j, j->want_logits, j->want_grad, &j->want_loss));
    }
    return jobs;
}

/* Runs fn on every job, one thread each, then thread_main on the main thread after they
 * have ended; fails with the first error any of them reported. Frees jobs. */
static void run_threads(thread_job *jobs, void *(*fn)(void *)) {
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, fn, &jobs[t]), 0);
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_join(threads[t], NULL), 0);
    for (int t = 0; t < THREADS; t++)
        if (jobs[t].error[0])
            fail_msg("%s", jobs[t].error);
    thread_main(&jobs[0]);
    if (jobs[0].error[0])
        fail_msg("main thread after the others: %s", jobs[0].error);
    pf_free(jobs);
}

static void test_threads(void **state) {
    (void)state;
    run_threads(thread_jobs(110), thread_main);
}

/* A thread that chooses a GPU first, as each in-graph replica of a worker does. */
static void *gpu_thread_main(void *arg) {
    thread_job *j = arg;
    const pf_backend *be = NULL;
    pf_error err;
    if (pf_backend_for_device(PF_DEVICE_CUDA, j->gpu, &be, &err) != PF_OK || be != gpu) {
        snprintf(j->error, sizeof j->error, "thread %d: cuda:%d: %s", j->id, j->gpu, err.message);
        return NULL;
    }
    return thread_main(arg);
}

/* Threads that each choose a GPU (thread t takes GPU t mod the GPUs there are, up to 4)
 * compute the right results there, with buffers allocated on their GPU; with one GPU they all
 * choose GPU 0. The main thread is on GPU 0 again afterwards. */
static void test_gpu_per_thread(void **state) {
    (void)state;
    if (standin)
        skip(); /* choosing a GPU means nothing to a CPU stand-in */
    const pf_backend *be = NULL;
    pf_error err;
    int gpus = 1;
    while (gpus < THREADS && pf_backend_for_device(PF_DEVICE_CUDA, gpus, &be, &err) == PF_OK)
        gpus++;
    assert_int_equal(pf_backend_for_device(PF_DEVICE_CUDA, 0, &be, &err), PF_OK);
    print_message("  %d threads on %d GPU(s)\n", THREADS, gpus);
    thread_job *jobs = thread_jobs(111);
    for (int t = 0; t < THREADS; t++)
        jobs[t].gpu = t % gpus;
    run_threads(jobs, gpu_thread_main);
}

/* --- main ----------------------------------------------------------------------------- */

int main(void) {
    gpu = gpu_test_backend("test_cuda", &standin);
    struct CMUnitTest tests[OP_CASES_LEN + 7] = {
        cmocka_unit_test(test_device_table),      cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_upload_then_reuse), cmocka_unit_test(test_fill_copy),
        cmocka_unit_test(test_alloc_failure),
    };
    size_t n = 5;
    for (size_t i = 0; i < OP_CASES_LEN; i++)
        tests[n++] = (struct CMUnitTest){.name = OP_CASES[i].name,
                                         .test_func = test_op_case,
                                         .initial_state = (void *)(uintptr_t)&OP_CASES[i]};
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_threads);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_gpu_per_thread);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
