/* test_footprint.c - what a job needs before anything is allocated (psflow/footprint.h):
 * the figures against hand-computed values of the formulas, the limits every job has, the
 * data plane's limits on a placement, absurd specs giving huge figures rather than
 * overflows, and the machine's memory as pf_mem_system_bytes reads it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/footprint.h"
#include "psflow/mem.h"
#include "psflow/placement.h"
#include "psflow/spec.h"

static void parse(const char *text, pf_job_spec *spec) {
    pf_error err;
    if (pf_job_spec_parse(text, strlen(text), spec, &err) != PF_OK)
        fail_msg("spec %s: %s", text, err.message);
}

/* mlp 784 -> 256 -> 10, Adam (2 slots), batch 100 (models are built for 1000), 2 ps
 * round robin, 2 workers, sync: every figure by its formula. */
static void test_figures(void **state) {
    (void)state;
    pf_job_spec spec;
    parse("{\"name\": \"f\", \"replicas\": {\"ps\": 2, \"worker\": 2},"
          " \"model\": {\"type\": \"mlp\", \"inputs\": 784, \"hidden\": [256], \"outputs\": 10},"
          " \"data\": {\"format\": \"csv\", \"train\": [\"x.csv\"]},"
          " \"optimizer\": {\"type\": \"adam\"}, \"training\": {\"mode\": \"sync\"}}",
          &spec);
    pf_footprint fp;
    pf_footprint_estimate(&spec, &fp);
    const int64_t P = 784 * 256 + 256 + 256 * 10 + 10;
    assert_int_equal(fp.params, P);
    assert_int_equal(fp.slots, 2);
    assert_int_equal(fp.model_bytes, 4 * P * 3);
    assert_int_equal(fp.shards, 4);
    /* 4 (4 P + B' (2 I + 4 + A + 2 W)), B' = 1000, A = 256 + 10, W = 784; no data counted */
    assert_int_equal(fp.worker_bytes, 4 * (4 * P + 1000 * (2 * 784 + 4 + 266 + 2 * 784)));
    assert_int_equal(fp.process_bytes, fp.worker_bytes + 4 * P * 3);

    pf_placement p;
    assert_int_equal(pf_placement_compute(&spec, &p), PF_OK);
    for (int t = 0; t < 2; t++) {
        int64_t local = p.bytes_per_ps[t] / 4;
        /* B + 4 L (1 + S + T) + 2 T M with S = 2, T = 2 (sync), M = 4 L + 88 + 32 n: its own
         * share only, nothing the size of the model */
        int64_t message = 4 * local + 88 + 32 * p.shards_per_ps[t];
        assert_int_equal(pf_footprint_ps_bytes(&spec, &p, t),
                         (32 << 20) + 4 * local * (1 + 2 + 2) + 2 * 2 * message);
    }
    assert_int_equal(pf_footprint_ps_bytes(&spec, &p, 2), 0);
    pf_error err;
    assert_int_equal(pf_footprint_check(&spec, &fp, &err), PF_OK);
    assert_int_equal(pf_footprint_check_placement(&spec, &p, &err), PF_OK);
    pf_placement_deinit(&p);
    pf_job_spec_deinit(&spec);

    /* Synthetic data counts: 16 n for examples and order, 8 n/5 for the test set. */
    parse("{\"name\": \"s\", \"model\": {\"type\": \"linear\", \"inputs\": 1},"
          " \"data\": {\"format\": \"synthetic_linear\", \"n\": 5000}}",
          &spec);
    pf_footprint_estimate(&spec, &fp);
    assert_int_equal(fp.params, 2);
    assert_int_equal(fp.worker_bytes, 4 * (4 * 2 + 1000 * (2 + 4 + 1 + 2)) + 16 * 5000 + 8 * 1000);
    pf_job_spec_deinit(&spec);
}

/* max_steps * T * batch_size must fit 64 bits; more than PF_FOOTPRINT_MAX_SHARDS shards is
 * refused; both name their field. */
static void test_limits(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_footprint fp;
    pf_error err;
    parse("{\"name\": \"s\", \"replicas\": {\"worker\": 2}, \"model\": {\"type\": \"linear\","
          " \"inputs\": 1}, \"data\": {\"format\": \"synthetic_linear\"},"
          " \"training\": {\"batch_size\": 100, \"max_steps\": 46116860184273879}}",
          &spec);
    pf_footprint_estimate(&spec, &fp);
    assert_int_equal(pf_footprint_check(&spec, &fp, &err), PF_OK); /* INT64_MAX / 200 */
    spec.training.max_steps++;
    assert_int_equal(pf_footprint_check(&spec, &fp, &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/training/max_steps");
    spec.training.max_steps = INT64_MAX;
    assert_int_equal(pf_footprint_check(&spec, &fp, &err), PF_ERR_SPEC);
    pf_job_spec_deinit(&spec);

    /* 9 layers of 2^20 rows cut row by row: millions of shards, counted without placing. */
    parse(
        "{\"name\": \"m\", \"model\": {\"type\": \"mlp\", \"inputs\": 1048576,"
        " \"hidden\": [1048576, 1048576, 1048576, 1048576, 1048576, 1048576, 1048576, 1048576],"
        " \"outputs\": 10}, \"data\": {\"format\": \"csv\", \"train\": [\"x.csv\"]},"
        " \"placement\": {\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 2000000}}}",
        &spec);
    pf_footprint_estimate(&spec, &fp);
    assert_true(fp.shards > PF_FOOTPRINT_MAX_SHARDS);
    assert_true(fp.params > ((int64_t)1 << 43)); /* 8 kernels of 2^40 */
    assert_true(fp.model_bytes > fp.params && fp.worker_bytes > fp.model_bytes);
    assert_int_equal(pf_footprint_check(&spec, &fp, &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/placement/partitioner");
    pf_job_spec_deinit(&spec);
}

/* A ps task holding more than one message of the data plane carries is refused naming
 * /replicas/ps; spreading the model over more ps tasks fixes it. */
static void test_placement_limits(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_error err;
    /* 65536 x 8192 floats = 2 GiB of one kernel, cut in 4 shards */
    parse("{\"name\": \"w\", \"replicas\": {\"ps\": 1}, \"model\": {\"type\": \"softmax\","
          " \"inputs\": 65536, \"outputs\": 8192}, \"data\": {\"format\": \"csv\","
          " \"train\": [\"x.csv\"]}, \"placement\": {\"partitioner\": {\"type\": \"fixed_shards\","
          " \"num_shards\": 4}}}",
          &spec);
    pf_placement p;
    assert_int_equal(pf_placement_compute(&spec, &p), PF_OK);
    assert_int_equal(pf_footprint_check_placement(&spec, &p, &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/replicas/ps");
    assert_non_null(strstr(err.message, "GiB"));
    pf_placement_deinit(&p);
    spec.replicas.ps = 4;
    assert_int_equal(pf_placement_compute(&spec, &p), PF_OK);
    assert_int_equal(pf_footprint_check_placement(&spec, &p, &err), PF_OK);
    pf_placement_deinit(&p);
    pf_job_spec_deinit(&spec);
}

static void test_format_and_memory(void **state) {
    (void)state;
    char buf[32];
    pf_footprint_format_bytes(100, buf, sizeof buf);
    assert_string_equal(buf, "100 B");
    pf_footprint_format_bytes(1536, buf, sizeof buf);
    assert_string_equal(buf, "1.5 KiB");
    pf_footprint_format_bytes((int64_t)17 << 30, buf, sizeof buf);
    assert_string_equal(buf, "17 GiB");
    pf_footprint_format_bytes(INT64_MAX, buf, sizeof buf);
    assert_string_equal(buf, "8.0 EiB");
    /* Linux always has /proc/meminfo: at least some megabytes, at most what 64 bits hold. */
    int64_t mem = pf_mem_system_bytes();
    assert_true(mem > ((int64_t)16 << 20));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_figures),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_placement_limits),
        cmocka_unit_test(test_format_and_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
