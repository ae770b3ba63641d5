/* test_towers.c - a worker's in-graph replicas (towers.h) on the CPU.
 *
 * The averaged gradient is checked two ways: bit for bit against the same arithmetic done
 * by hand here (each replica's slice through its own pf_model, then the sum in replica order
 * and the scaling by 1/K), which shows the order is fixed whichever replica thread finishes
 * first; and against one model over the whole K * batch examples, which must agree to float
 * rounding (|ref - x| <= 1e-6 + 1e-5 |ref|), since the mean of equal slices' mean-loss
 * gradients is the mean-loss gradient of their union. Failures: an unusable GPU for one
 * replica, and a backend whose allocations fail on the replica threads, each leave nothing
 * behind (the sanitizer build checks for leaks). On a host-memory backend no replica holds
 * a copy of the parameters or the gradient.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/rng.h"
#include "psflow/spec.h"
#include "psflow/towers.h"

enum { K = 3, BATCH = 7 };

/* A spec from its last fields: an mlp (6 -> 5 -> 4) or, with "linear", y = w x + b. */
static void parse(const char *model, const char *tail, pf_job_spec *s) {
    char text[512];
    snprintf(text, sizeof text,
             "{\"name\":\"t\",\"model\":%s,\"data\":{\"format\":\"%s\"%s},"
             "\"training\":{\"batch_size\":%d},%s}",
             model, strstr(model, "linear") ? "synthetic_linear" : "csv",
             strstr(model, "linear") ? "" : ",\"train\":[\"x.csv\"]", BATCH, tail);
    pf_error err;
    if (pf_job_spec_parse(text, strlen(text), s, &err) != PF_OK)
        fail_msg("%s: %s", text, err.message);
}

#define MLP    "{\"type\":\"mlp\",\"inputs\":6,\"hidden\":[5],\"outputs\":4,\"activation\":\"tanh\"}"
#define LINEAR "{\"type\":\"linear\",\"inputs\":1}"

typedef struct batch {
    size_t n_params;
    float *params, *x, *y;
    int32_t *labels;
} batch;

/* Random parameters and K * BATCH examples (labels in every class). */
static batch make_batch(const pf_job_spec *s, uint64_t seed) {
    batch b;
    const size_t n = (size_t)K * BATCH, in = (size_t)s->model.inputs;
    b.n_params = pf_model_num_params(&s->model);
    b.params = pf_mallocarray(b.n_params, sizeof(float));
    b.x = pf_mallocarray(n * in, sizeof(float));
    b.y = pf_mallocarray(n, sizeof(float));
    b.labels = pf_mallocarray(n, sizeof(int32_t));
    assert_true(b.params && b.x && b.y && b.labels);
    pf_model_init_params(&s->model, seed, b.params);
    pf_rng rng;
    pf_rng_init(&rng, seed, 7);
    for (size_t i = 0; i < n * in; i++)
        b.x[i] = (float)(pf_rng_uniform(&rng) * 2 - 1);
    for (size_t i = 0; i < n; i++) {
        b.y[i] = (float)(pf_rng_uniform(&rng) * 4 - 2);
        b.labels[i] = (int32_t)(i % (size_t)s->model.outputs);
    }
    for (size_t i = 0; i < b.n_params; i++) /* biases off zero, so their gradients matter */
        b.params[i] += (float)(pf_rng_uniform(&rng) * 0.2 - 0.1);
    return b;
}

static void free_batch(batch *b) {
    pf_free(b->params);
    pf_free(b->x);
    pf_free(b->y);
    pf_free(b->labels);
}

/* One pf_model on `be` over rows first .. first + rows - 1: gradient into grads (host),
 * returns the mean loss. */
static float model_gradient(const pf_job_spec *s, const pf_backend *be, const batch *b, int first,
                            int rows, float *grads) {
    pf_model *m;
    const size_t in = (size_t)s->model.inputs;
    assert_int_equal(pf_model_create(&s->model, be, rows, &m), PF_OK);
    float *dp = be->alloc(b->n_params * sizeof(float)),
          *dg = be->alloc(b->n_params * sizeof(float));
    float *dx = be->alloc((size_t)rows * in * sizeof(float));
    float *dy = be->alloc((size_t)rows * sizeof(float));
    int32_t *dl = be->alloc((size_t)rows * sizeof(int32_t));
    assert_true(dp && dg && dx && dy && dl);
    be->upload(dp, b->params, b->n_params);
    be->upload(dx, b->x + (size_t)first * in, (size_t)rows * in);
    be->upload(dy, b->y + first, (size_t)rows);
    be->upload_i32(dl, b->labels + first, (size_t)rows);
    float loss = pf_model_train_step(m, dp, dx, dy, dl, rows, dg);
    be->download(grads, dg, b->n_params);
    void *bufs[] = {dp, dg, dx, dy, dl};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->free(bufs[i]);
    pf_model_destroy(m);
    return loss;
}

/* The towers' gradient against the hand-made average and against one model over all rows. */
static void check_model(const char *model) {
    pf_job_spec s;
    char tail[64];
    snprintf(tail, sizeof tail, "\"replicas_per_worker\":%d", K);
    parse(model, tail, &s);
    const pf_backend *be = pf_backend_openblas();
    batch b = make_batch(&s, 11);
    pf_towers *t;
    pf_error err;
    assert_int_equal(pf_towers_create(&s, NULL, &t, &err), PF_OK);
    assert_int_equal(pf_towers_count(t), K);
    for (int r = 0; r < K; r++)
        assert_ptr_equal(pf_towers_backend(t, r), be);
    assert_null(pf_towers_backend(t, K));

    float *got = pf_mallocarray(b.n_params, sizeof(float));
    float *again = pf_mallocarray(b.n_params, sizeof(float));
    float *want = pf_mallocarray(b.n_params, sizeof(float));
    float *slice = pf_mallocarray(b.n_params, sizeof(float));
    float *whole = pf_mallocarray(b.n_params, sizeof(float));
    assert_true(got && again && want && slice && whole);
    float loss = pf_towers_gradient(t, b.params, b.x, b.y, b.labels, got);

    /* By hand: replica order, then 1/K. */
    double want_loss = 0;
    for (int r = 0; r < K; r++) {
        want_loss += model_gradient(&s, be, &b, r * BATCH, BATCH, r == 0 ? want : slice);
        for (size_t i = 0; r > 0 && i < b.n_params; i++)
            want[i] += slice[i];
    }
    for (size_t i = 0; i < b.n_params; i++)
        want[i] *= 1.0f / (float)K;
    if (memcmp(got, want, b.n_params * sizeof(float)) != 0)
        fail_msg("%s: the towers' gradient is not the sum in replica order scaled by 1/%d", model,
                 K);
    assert_true(loss == (float)(want_loss / K));

    /* The same step again (the threads' second round) gives the same bits. */
    for (int round = 0; round < 3; round++) {
        assert_true(pf_towers_gradient(t, b.params, b.x, b.y, b.labels, again) == loss);
        assert_memory_equal(again, got, b.n_params * sizeof(float));
    }

    /* One model over all K * BATCH rows: the same gradient to float rounding. */
    float whole_loss = model_gradient(&s, be, &b, 0, K * BATCH, whole);
    double worst = 0;
    for (size_t i = 0; i < b.n_params; i++) {
        double e = fabs((double)got[i] - whole[i]), bound = 1e-6 + 1e-5 * fabs(whole[i]);
        if (!(e <= bound))
            fail_msg("%s: parameter %zu: towers %.9g, one batch %.9g", model, i, (double)got[i],
                     (double)whole[i]);
        worst = fmax(worst, e);
    }
    assert_true(fabs((double)loss - whole_loss) <= 1e-6 + 1e-5 * fabs(whole_loss));
    print_message("  %s: %d replicas x %d vs one batch of %d: max |diff| %.3g over %zu values\n",
                  s.model.type == PF_MODEL_LINEAR ? "linear" : "mlp", K, BATCH, K * BATCH, worst,
                  b.n_params);

    pf_towers_destroy(t);
    pf_free(whole);
    pf_free(slice);
    pf_free(want);
    pf_free(again);
    pf_free(got);
    free_batch(&b);
    pf_job_spec_deinit(&s);
}

static void test_average_mlp(void **state) {
    (void)state;
    check_model(MLP);
}

static void test_average_linear(void **state) {
    (void)state;
    check_model(LINEAR);
}

/* One replica starts no thread and is exactly one model's step; a backend given for all
 * replicas is used by all of them. */
static void test_one_replica_and_override(void **state) {
    (void)state;
    pf_job_spec s;
    parse(MLP, "\"device\":\"cpu\"", &s);
    assert_int_equal(s.replicas_per_worker, 1);
    batch b = make_batch(&s, 12);
    float *got = pf_mallocarray(b.n_params, sizeof(float));
    float *want = pf_mallocarray(b.n_params, sizeof(float));
    assert_true(got && want);
    pf_towers *t;
    pf_error err;
    assert_int_equal(pf_towers_create(&s, NULL, &t, &err), PF_OK);
    float loss = pf_towers_gradient(t, b.params, b.x, b.y, b.labels, got);
    assert_true(loss == model_gradient(&s, pf_backend_openblas(), &b, 0, BATCH, want));
    assert_memory_equal(got, want, b.n_params * sizeof(float));
    pf_towers_destroy(t);
    pf_job_spec_deinit(&s);

    parse(MLP, "\"device\":[\"cpu\",\"cpu\",\"cpu\"]", &s);
    assert_int_equal(pf_towers_create(&s, pf_backend_reference(), &t, &err), PF_OK);
    for (int r = 0; r < K; r++)
        assert_ptr_equal(pf_towers_backend(t, r), pf_backend_reference());
    pf_towers_destroy(t);
    pf_towers_destroy(NULL);
    pf_free(want);
    pf_free(got);
    free_batch(&b);
    pf_job_spec_deinit(&s);
}

/* A GPU no machine has, for replica 1: creation fails with pf_backend_for_device's one-line
 * reason, whether replica 0 (cuda:0) got a GPU or not, and leaves nothing behind. */
static void test_unusable_device(void **state) {
    (void)state;
    pf_job_spec s;
    parse(MLP, "\"device\":[\"cuda:0\",\"cuda:255\"]", &s);
    pf_towers *t = (pf_towers *)&s; /* must be reset */
    pf_error err;
    assert_int_equal(pf_towers_create(&s, NULL, &t, &err), PF_ERR_UNSUPPORTED);
    assert_null(t);
    assert_non_null(strstr(err.message, "is not usable: "));
    assert_null(strchr(err.message, '\n'));
    print_message("  %s\n", err.message);
    pf_job_spec_deinit(&s);

    parse(MLP, "\"device\":\"cpu\"", &s);
    s.replicas_per_worker = PF_MAX_REPLICAS_PER_WORKER + 1;
    assert_int_equal(pf_towers_create(&s, NULL, &t, &err), PF_ERR_INVALID);
    assert_null(t);
    pf_job_spec_deinit(&s);
}

/* A backend whose allocations fail on every thread but the one that creates the towers. */
static _Thread_local bool creator;
static void *alloc_on_creator(size_t bytes) {
    return creator ? pf_backend_openblas()->alloc(bytes) : NULL;
}

static void test_replica_out_of_memory(void **state) {
    (void)state;
    pf_backend failing = *pf_backend_openblas();
    failing.name = "failing";
    failing.alloc = alloc_on_creator;
    creator = true;
    pf_job_spec s;
    char tail[64];
    snprintf(tail, sizeof tail, "\"replicas_per_worker\":%d", K);
    parse(MLP, tail, &s);
    pf_towers *t;
    pf_error err;
    assert_int_equal(pf_towers_create(&s, &failing, &t, &err), PF_ERR_NOMEM);
    assert_null(t);
    assert_string_equal(err.message, "replica 1: out of memory for the model on failing");
    pf_job_spec_deinit(&s);
}

/* A CPU backend that counts the parameter-sized buffers and copies asked of it. */
static size_t param_bytes;
static int param_allocs, param_copies;
static void *counting_alloc(size_t bytes) {
    param_allocs += bytes == param_bytes;
    return pf_backend_openblas()->alloc(bytes);
}
static void counting_upload(float *dst, const float *src, size_t n) {
    param_copies += n * sizeof(float) == param_bytes;
    pf_backend_openblas()->upload(dst, src, n);
}
static void counting_download(float *dst, const float *src, size_t n) {
    param_copies += n * sizeof(float) == param_bytes;
    pf_backend_openblas()->download(dst, src, n);
}

/* On a host-memory backend a replica computes on the caller's parameters and writes the
 * caller's gradient: no backend buffer or copy of either (a worker's memory bound), and
 * the same gradient, bit for bit, as through backend copies. */
static void test_host_memory_no_copies(void **state) {
    (void)state;
    pf_job_spec s;
    parse(MLP, "\"device\":\"cpu\"", &s);
    batch b = make_batch(&s, 21);
    param_bytes = b.n_params * sizeof(float);
    float *grads[2] = {pf_mallocarray(b.n_params, sizeof(float)),
                       pf_mallocarray(b.n_params, sizeof(float))};
    float loss[2];
    assert_true(grads[0] && grads[1]);
    for (int host = 1; host >= 0; host--) {
        pf_backend counting = *pf_backend_openblas();
        counting.alloc = counting_alloc;
        counting.upload = counting_upload;
        counting.download = counting_download;
        counting.host_memory = host;
        param_allocs = param_copies = 0;
        pf_towers *t;
        pf_error err;
        assert_int_equal(pf_towers_create(&s, &counting, &t, &err), PF_OK);
        loss[host] = pf_towers_gradient(t, b.params, b.x, b.y, b.labels, grads[host]);
        pf_towers_destroy(t);
        /* host: nothing; device-style: the parameters and the gradient, each once */
        assert_int_equal(param_allocs, host ? 0 : 2);
        assert_int_equal(param_copies, host ? 0 : 2);
    }
    assert_true(loss[0] == loss[1]);
    assert_memory_equal(grads[0], grads[1], b.n_params * sizeof(float));
    pf_free(grads[0]);
    pf_free(grads[1]);
    free_batch(&b);
    pf_job_spec_deinit(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_average_mlp),
        cmocka_unit_test(test_average_linear),
        cmocka_unit_test(test_one_replica_and_override),
        cmocka_unit_test(test_unusable_device),
        cmocka_unit_test(test_replica_out_of_memory),
        cmocka_unit_test(test_host_memory_no_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
