/* test_tf_config.c - TF_CONFIG: the operator's and TensorFlow's vectors, what parse keeps and
 * format writes, the builder, and failing allocations while building. Refusals are
 * test_tf_config_errors.c's, the files under tests/data/tf_config/ test_tf_config_files.c's.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/tf_config.h"
#include "tests/support/counting_alloc.h"
#include "tests/support/tf_config_cases.h"

/* --- vectors ---------------------------------------------------------------------------------- */

/* Kubeflow training-operator release-1.9, pod_test.go "Test ClusterSpec", worker 0. */
static const char kf_ns2_domain[] =
    "{\"cluster\":{\"ps\":[\"test-tfjob-ps-0.ns2.svc.tf.training.org:2222\"],"
    "\"worker\":[\"test-tfjob-worker-0.ns2.svc.tf.training.org:2222\"]},"
    "\"task\":{\"type\":\"worker\",\"index\":0},\"environment\":\"cloud\"}";
static const char kf_evaluator_domain[] =
    "{\"cluster\":{\"evaluator\":[\"test-tfjob-evaluator-0.ns3.svc.tf.training.io:2222\"],"
    "\"ps\":[\"test-tfjob-ps-0.ns3.svc.tf.training.io:2222\"],"
    "\"worker\":[\"test-tfjob-worker-0.ns3.svc.tf.training.io:2222\"]},"
    "\"task\":{\"type\":\"worker\",\"index\":0},\"environment\":\"cloud\"}";
static const char kf_evaluator[] =
    "{\"cluster\":{\"evaluator\":[\"test-tfjob-evaluator-0.ns3.svc:2222\"],"
    "\"ps\":[\"test-tfjob-ps-0.ns3.svc:2222\"],\"worker\":[\"test-tfjob-worker-0.ns3.svc:2222\"]},"
    "\"task\":{\"type\":\"worker\",\"index\":0},\"environment\":\"cloud\"}";
/* The same file on v1.0-branch: a single worker got a TF_CONFIG; the evaluator was left out. */
static const char kf_v1_single[] =
    "{\"cluster\":{\"worker\":[\"test-tfjob-worker-0.ns0.svc:2222\"]},"
    "\"task\":{\"type\":\"worker\",\"index\":0},\"environment\":\"cloud\"}";
static const char kf_v1_no_evaluator[] =
    "{\"cluster\":{\"ps\":[\"test-tfjob-ps-0.ns3.svc.tf.training.io:2222\"],"
    "\"worker\":[\"test-tfjob-worker-0.ns3.svc.tf.training.io:2222\"]},"
    "\"task\":{\"type\":\"worker\",\"index\":0},\"environment\":\"cloud\"}";
/* docs/design.md section 4. */
static const char design_example[] =
    "{\"cluster\":{\"ps\":[\"10.0.0.3:2222\"],\"worker\":[\"10.0.0.4:2222\",\"10.0.0.5:2222\"]},"
    "\"task\":{\"type\":\"worker\",\"index\":0},\"environment\":\"cloud\"}";

/* Dynamic-worker (sparse) form, from tensorflow_test.go's structs as Go marshals them. */
static const char sparse_worker0[] =
    "{\"cluster\":{\"worker\":{\"0\":\"test-tfjob-worker-0.default.svc:2222\"},"
    "\"ps\":[\"test-tfjob-ps-0.default.svc:2222\",\"test-tfjob-ps-1.default.svc:2222\"]},"
    "\"task\":{\"type\":\"worker\",\"index\":0}}";
static const char sparse_ps0[] = "{\"cluster\":{\"worker\":{},"
                                 "\"ps\":[\"test-tfjob-ps-0.default.svc:2222\"]},"
                                 "\"task\":{\"type\":\"ps\",\"index\":0}}";

/* TensorFlow's tfconfig_cluster_resolver_test.py cluster. */
#define TF_CLUSTER                                                                                 \
    "{\"ps\":[\"ps0:2222\",\"ps1:2222\"],"                                                         \
    "\"worker\":[\"worker0:2222\",\"worker1:2222\",\"worker2:2222\"]}"
/* tensorflow_estimator's run_config.py cluster. */
#define RC_CLUSTER                                                                                 \
    "{\"chief\":[\"host0:2222\"],\"ps\":[\"host1:2222\",\"host2:2222\"],"                          \
    "\"worker\":[\"host3:2222\",\"host4:2222\",\"host5:2222\"]}"
/* parameter_server_strategy_v2.py docstring, ps 1. */
static const char ps_strategy_ps1[] =
    "{\"cluster\":{\"chief\":[\"chief.example.com:2222\"],"
    "\"ps\":[\"ps0.example.com:2222\",\"ps1.example.com:2222\"],"
    "\"worker\":[\"worker0.example.com:2222\",\"worker1.example.com:2222\","
    "\"worker2.example.com:2222\"]},\"task\":{\"type\":\"ps\",\"index\":1}}";

/* --- helpers ---------------------------------------------------------------------------------- */

/* parse(text) then format must give text itself, byte for byte. */
static void assert_round_trip_exact(const char *text) {
    pf_tf_config cfg;
    must_parse(text, &cfg);
    char *out = format_fixed_point(&cfg, text);
    assert_string_equal(out, text);
    pf_free(out);
    pf_tf_config_deinit(&cfg);
}

/* A job of n addresses "<prefix><i>:2222" built in the test, for pf_tf_config_add_job. */
typedef struct addr_list {
    char *addrs[PF_TF_MAX_TASKS + 1];
    int n;
} addr_list;

static addr_list *make_addrs(const char *prefix, int n) {
    addr_list *l = calloc(1, sizeof *l);
    assert_non_null(l);
    for (int i = 0; i < n; i++) {
        l->addrs[i] = malloc(strlen(prefix) + 24);
        assert_non_null(l->addrs[i]);
        sprintf(l->addrs[i], "%s%d:2222", prefix, i);
    }
    l->n = n;
    return l;
}

static void free_addrs(addr_list *l) {
    for (int i = 0; i < l->n; i++)
        free(l->addrs[i]);
    free(l);
}

/* --- the operator's vectors ------------------------------------------------------------------- */

static void test_operator_vectors_built(void **state) {
    (void)state;
    pf_tf_config c;

    /* release-1.9, NewTFJobWithEvaluatorAndNamespace(1, 1, 1, "ns3"), no domain. Jobs added in
     * any order come out sorted. */
    pf_tf_config_init(&c);
    assert_int_equal(add_one(&c, "worker", "test-tfjob-worker-0.ns3.svc:2222"), PF_OK);
    assert_int_equal(add_one(&c, "ps", "test-tfjob-ps-0.ns3.svc:2222"), PF_OK);
    assert_int_equal(add_one(&c, "evaluator", "test-tfjob-evaluator-0.ns3.svc:2222"), PF_OK);
    c.has_task = true;
    snprintf(c.task_type, sizeof c.task_type, "worker");
    c.task_index = 0;
    char *s = pf_tf_config_format(&c);
    assert_non_null(s);
    assert_string_equal(s, kf_evaluator);
    assert_string_equal(s, "{\"cluster\":{\"evaluator\":[\"test-tfjob-evaluator-0.ns3.svc:2222\"],"
                           "\"ps\":[\"test-tfjob-ps-0.ns3.svc:2222\"],"
                           "\"worker\":[\"test-tfjob-worker-0.ns3.svc:2222\"]},"
                           "\"task\":{\"type\":\"worker\",\"index\":0},\"environment\":\"cloud\"}");
    assert_int_equal(pf_tf_config_validate(&c, NULL), PF_OK);
    pf_free(s);
    pf_tf_config_deinit(&c);

    /* The same with domain tf.training.io. */
    pf_tf_config_init(&c);
    assert_int_equal(add_one(&c, "ps", "test-tfjob-ps-0.ns3.svc.tf.training.io:2222"), PF_OK);
    assert_int_equal(add_one(&c, "worker", "test-tfjob-worker-0.ns3.svc.tf.training.io:2222"),
                     PF_OK);
    assert_int_equal(add_one(&c, "evaluator", "test-tfjob-evaluator-0.ns3.svc.tf.training.io:2222"),
                     PF_OK);
    c.has_task = true;
    snprintf(c.task_type, sizeof c.task_type, "worker");
    s = pf_tf_config_format(&c);
    assert_string_equal(s, kf_evaluator_domain);
    pf_free(s);

    /* v1.0-branch left the evaluator out: replacing a job with zero tasks is not removing it,
     * so build that one afresh. */
    pf_tf_config_deinit(&c);
    pf_tf_config_init(&c);
    assert_int_equal(add_one(&c, "worker", "test-tfjob-worker-0.ns3.svc.tf.training.io:2222"),
                     PF_OK);
    assert_int_equal(add_one(&c, "ps", "test-tfjob-ps-0.ns3.svc.tf.training.io:2222"), PF_OK);
    c.has_task = true;
    snprintf(c.task_type, sizeof c.task_type, "worker");
    s = pf_tf_config_format(&c);
    assert_string_equal(s, kf_v1_no_evaluator);
    pf_free(s);
    pf_tf_config_deinit(&c);

    /* NewTFJobWithNamespace(1, 1, "ns2"), domain tf.training.org. */
    pf_tf_config_init(&c);
    assert_int_equal(add_one(&c, "ps", "test-tfjob-ps-0.ns2.svc.tf.training.org:2222"), PF_OK);
    assert_int_equal(add_one(&c, "worker", "test-tfjob-worker-0.ns2.svc.tf.training.org:2222"),
                     PF_OK);
    c.has_task = true;
    snprintf(c.task_type, sizeof c.task_type, "worker");
    s = pf_tf_config_format(&c);
    assert_string_equal(s, kf_ns2_domain);
    pf_free(s);
    pf_tf_config_deinit(&c);

    /* v1.0-branch, a single worker. */
    pf_tf_config_init(&c);
    assert_int_equal(add_one(&c, "worker", "test-tfjob-worker-0.ns0.svc:2222"), PF_OK);
    c.has_task = true;
    snprintf(c.task_type, sizeof c.task_type, "worker");
    s = pf_tf_config_format(&c);
    assert_string_equal(s, kf_v1_single);
    pf_free(s);
    pf_tf_config_deinit(&c);

    /* docs/design.md section 4. */
    pf_tf_config_init(&c);
    const char *workers[] = {"10.0.0.4:2222", "10.0.0.5:2222"};
    assert_int_equal(pf_tf_config_add_job(&c, "worker", workers, 2), PF_OK);
    assert_int_equal(add_one(&c, "ps", "10.0.0.3:2222"), PF_OK);
    c.has_task = true;
    snprintf(c.task_type, sizeof c.task_type, "worker");
    s = pf_tf_config_format(&c);
    assert_string_equal(s, design_example);
    pf_free(s);
    pf_tf_config_deinit(&c);
}

static void test_operator_vectors_round_trip(void **state) {
    (void)state;
    const char *vectors[] = {kf_ns2_domain, kf_evaluator_domain, kf_evaluator,
                             kf_v1_single,  kf_v1_no_evaluator,  design_example};
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++)
        assert_round_trip_exact(vectors[i]);

    /* What they say. */
    pf_tf_config c;
    pf_error err;
    must_parse(kf_evaluator_domain, &c);
    assert_int_equal(c.n_jobs, 3);
    assert_string_equal(c.jobs[0].name, "evaluator");
    assert_string_equal(c.jobs[1].name, "ps");
    assert_string_equal(c.jobs[2].name, "worker");
    assert_true(c.has_task);
    assert_string_equal(c.task_type, "worker");
    assert_int_equal(c.task_index, 0);
    assert_string_equal(c.environment, "cloud");
    assert_int_equal(pf_tf_config_count(&c, "evaluator"), 1);
    assert_string_equal(pf_tf_config_address(&c, "evaluator", 0),
                        "test-tfjob-evaluator-0.ns3.svc.tf.training.io:2222");
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
    pf_tf_config_deinit(&c);

    must_parse(design_example, &c);
    assert_int_equal(pf_tf_config_count(&c, "worker"), 2);
    assert_int_equal(pf_tf_config_count(&c, "ps"), 1);
    assert_int_equal(pf_tf_config_count(&c, "chief"), 0);
    assert_string_equal(pf_tf_config_address(&c, "worker", 1), "10.0.0.5:2222");
    assert_string_equal(pf_tf_config_address(&c, "ps", 0), "10.0.0.3:2222");
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
    pf_tf_config_deinit(&c);

    /* Today's operator sends no TF_CONFIG to a lone worker; the old one did, and psflow, which
     * needs a ps, refuses it by name. */
    assert_int_equal(validate_text(kf_v1_single, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "no ps tasks"));
}

/* --- TensorFlow's consumer side ----------------------------------------------------------------
 */

static void test_tensorflow_resolver_vectors(void **state) {
    (void)state;
    pf_tf_config c;
    pf_error err;
    const char *texts[] = {
        "{\"cluster\":" TF_CLUSTER ",\"task\":{\"type\":\"ps\",\"index\":0}}",
        "{\"cluster\":" TF_CLUSTER
        ",\"rpc_layer\":\"grpc\",\"task\":{\"type\":\"ps\",\"index\":0}}",
        "{\"cluster\":" TF_CLUSTER ",\"session_master\":\"sessionmaster:2222\","
        "\"task\":{\"type\":\"ps\",\"index\":0}}",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        must_parse(texts[i], &c);
        assert_string_equal(c.task_type, "ps");
        assert_int_equal(c.task_index, 0);
        assert_string_equal(pf_tf_config_address(&c, c.task_type, c.task_index), "ps0:2222");
        assert_string_equal(pf_tf_config_address(&c, "worker", 1), "worker1:2222");
        assert_int_equal(pf_tf_config_count(&c, "worker"), 3);
        assert_int_equal(pf_tf_config_count(&c, "ps"), 2);
        assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
        /* The extra keys are not kept: all three write the first one. */
        char *s = format_fixed_point(&c, texts[i]);
        assert_string_equal(s, texts[0]);
        pf_free(s);
        pf_tf_config_deinit(&c);
    }

    /* "index": "1" is cast to 1. */
    must_parse("{\"cluster\":" TF_CLUSTER ",\"task\":{\"type\":\"ps\",\"index\":\"1\"}}", &c);
    assert_int_equal(c.task_index, 1);
    assert_string_equal(pf_tf_config_address(&c, "ps", c.task_index), "ps1:2222");
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
    char *s = pf_tf_config_format(&c);
    assert_string_equal(s, "{\"cluster\":" TF_CLUSTER ",\"task\":{\"type\":\"ps\",\"index\":1}}");
    pf_free(s);
    pf_tf_config_deinit(&c);

    /* A numeric type is cast to its decimal string, which psflow then refuses by name. */
    must_parse("{\"cluster\":" TF_CLUSTER ",\"task\":{\"type\":123456,\"index\":0}}", &c);
    assert_string_equal(c.task_type, "123456");
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "'123456'"));
    pf_tf_config_deinit(&c);

    /* {} is valid: no cluster, no task; it writes back as {}. */
    must_parse("{}", &c);
    assert_true(is_zeroed(&c));
    assert_int_equal(pf_tf_config_count(&c, "worker"), 0);
    assert_null(pf_tf_config_address(&c, "worker", 0));
    s = format_fixed_point(&c, "{}");
    assert_string_equal(s, "{}");
    pf_free(s);
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "task is missing"));
    pf_tf_config_deinit(&c);

    /* A single-node cluster without a task parses (TensorFlow runs it locally). */
    must_parse("{\"cluster\":{\"worker\":[\"worker0:2222\"]}}", &c);
    assert_false(c.has_task);
    assert_int_equal(pf_tf_config_count(&c, "worker"), 1);
    assert_round_trip_exact("{\"cluster\":{\"worker\":[\"worker0:2222\"]}}");
    pf_tf_config_deinit(&c);
}

static void test_run_config_vectors(void **state) {
    (void)state;
    pf_tf_config c;
    pf_error err;

    must_parse("{\"cluster\":" RC_CLUSTER ",\"task\":{\"type\":\"worker\",\"index\":1}}", &c);
    assert_int_equal(c.task_index, 1);
    assert_int_equal(pf_tf_config_count(&c, "ps"), 2);
    /* num_worker_replicas counts the chief too: 4. */
    assert_int_equal(pf_tf_config_count(&c, "worker") + pf_tf_config_count(&c, "chief"), 4);
    assert_string_equal(pf_tf_config_address(&c, "worker", 1), "host4:2222");
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
    pf_tf_config_deinit(&c);

    assert_int_equal(validate_text("{\"cluster\":" RC_CLUSTER
                                   ",\"task\":{\"type\":\"chief\",\"index\":0}}",
                                   &err),
                     PF_OK);

    /* An evaluator with no evaluator job: RunConfig clears its cluster; psflow says why. */
    assert_int_equal(validate_text("{\"cluster\":" RC_CLUSTER
                                   ",\"task\":{\"type\":\"evaluator\",\"index\":0}}",
                                   &err),
                     PF_ERR_INVALID);
    assert_string_equal(
        err.message, "TF_CONFIG: the cluster has no 'evaluator' job, but the task is evaluator 0");

    /* TFJob's legacy "master" is the chief: as a job (the others see a chief) and as a task
     * type (that task runs as the chief); RunConfig refuses a cluster with both. */
    must_parse("{\"cluster\":{\"master\":[\"m0:2222\"],\"ps\":[\"p0:2222\"],\"worker\":"
               "[\"w0:2222\"]},\"task\":{\"type\":\"master\",\"index\":0}}",
               &c);
    assert_string_equal(c.task_type, "chief");
    assert_int_equal(pf_tf_config_count(&c, "chief"), 1);
    assert_int_equal(pf_tf_config_count(&c, "master"), 0);
    assert_string_equal(pf_tf_config_address(&c, "chief", 0), "m0:2222");
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
    pf_tf_config_deinit(&c);
    assert_int_equal(validate_text("{\"cluster\":{\"master\":[\"m0:2222\"],\"ps\":[\"p0:2222\"],"
                                   "\"worker\":[\"w0:2222\"]},\"task\":{\"type\":\"worker\","
                                   "\"index\":0}}",
                                   &err),
                     PF_OK);
    static const char both[] = "{\"cluster\":{\"chief\":[\"c:1\"],\"master\":[\"m:1\"],"
                               "\"ps\":[\"p:1\"]}}";
    assert_int_equal(pf_tf_config_parse(both, strlen(both), &c, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "both a 'chief' and a 'master' job"));

    /* ParameterServerStrategy's ps 1, byte for byte. */
    assert_round_trip_exact(ps_strategy_ps1);
    assert_int_equal(validate_text(ps_strategy_ps1, &err), PF_OK);
}

static void test_sparse_vectors(void **state) {
    (void)state;
    pf_tf_config c;
    pf_error err;

    must_parse(sparse_worker0, &c);
    assert_int_equal(c.n_jobs, 2);
    assert_string_equal(c.jobs[0].name, "ps"); /* sorted, whatever the input order */
    assert_string_equal(c.jobs[1].name, "worker");
    assert_int_equal(pf_tf_config_count(&c, "worker"), 1);
    assert_string_equal(pf_tf_config_address(&c, "worker", 0),
                        "test-tfjob-worker-0.default.svc:2222");
    assert_int_equal(pf_tf_config_count(&c, "ps"), 2);
    assert_string_equal(pf_tf_config_address(&c, "ps", 1), "test-tfjob-ps-1.default.svc:2222");
    assert_string_equal(c.environment, "");
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
    char *s = format_fixed_point(&c, sparse_worker0);
    assert_string_equal(
        s, "{\"cluster\":{\"ps\":[\"test-tfjob-ps-0.default.svc:2222\","
           "\"test-tfjob-ps-1.default.svc:2222\"],"
           "\"worker\":[\"test-tfjob-worker-0.default.svc:2222\"]},\"task\":{\"type\":\"worker\","
           "\"index\":0}}");
    pf_free(s);
    pf_tf_config_deinit(&c);

    /* The ps side: "worker": {} is a worker job with no tasks. */
    must_parse(sparse_ps0, &c);
    assert_int_equal(c.n_jobs, 2);
    assert_int_equal(pf_tf_config_count(&c, "worker"), 0);
    assert_null(pf_tf_config_address(&c, "worker", 0));
    assert_int_equal(pf_tf_config_count(&c, "ps"), 1);
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
    s = format_fixed_point(&c, sparse_ps0);
    assert_string_equal(s, "{\"cluster\":{\"ps\":[\"test-tfjob-ps-0.default.svc:2222\"],"
                           "\"worker\":[]},\"task\":{\"type\":\"ps\",\"index\":0}}");
    pf_free(s);
    pf_tf_config_deinit(&c);

    /* Gaps: count is 1 + the largest index, the others are NULL; written back sparse. */
    const char gap[] = "{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":{\"3\":\"w3:1\",\"1\":\"w1:1\"}},"
                       "\"task\":{\"type\":\"worker\",\"index\":3}}";
    must_parse(gap, &c);
    assert_int_equal(pf_tf_config_count(&c, "worker"), 4);
    assert_null(pf_tf_config_address(&c, "worker", 0));
    assert_string_equal(pf_tf_config_address(&c, "worker", 1), "w1:1");
    assert_null(pf_tf_config_address(&c, "worker", 2));
    assert_string_equal(pf_tf_config_address(&c, "worker", 3), "w3:1");
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
    s = format_fixed_point(&c, gap);
    assert_string_equal(s, "{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":{\"1\":\"w1:1\",\"3\":"
                           "\"w3:1\"}},\"task\":{\"type\":\"worker\",\"index\":3}}");
    pf_free(s);
    c.task_index = 2;
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_ERR_INVALID);
    assert_string_equal(err.message, "TF_CONFIG: the cluster has no address for task worker 2 "
                                     "(a gap in the sparse 'worker' job)");
    c.task_index = 0;
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_ERR_INVALID);
    pf_tf_config_deinit(&c);
}

/* --- what parse keeps, what format writes --------------------------------------------------------
 */

static void test_parse_and_format_details(void **state) {
    (void)state;
    pf_tf_config c;
    pf_error err;

    /* Whitespace, key order and extra keys do not matter; the written form is canonical. */
    must_parse(" {\n \"environment\" : \"cloud\" ,\"task\":{\"index\":\"0\",\"type\":\"worker\","
               "\"extra\":[1]},\n\"cluster\":{\"worker\":[\"w:1\"],\"ps\":[\"p:1\"]},"
               "\"rpc_layer\":\"grpc\"}\n",
               &c);
    char *s = format_fixed_point(&c, "reordered");
    assert_string_equal(s, "{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":[\"w:1\"]},"
                           "\"task\":{\"type\":\"worker\",\"index\":0},\"environment\":\"cloud\"}");
    pf_free(s);
    pf_tf_config_deinit(&c);

    /* Missing pieces are left out, not invented. */
    const char *partial[][2] = {
        {"{\"task\":{}}", "{\"task\":{}}"},
        {"{\"task\":{\"type\":\"ps\"}}", "{\"task\":{\"type\":\"ps\"}}"},
        {"{\"task\":{\"index\":\"2\"}}", "{\"task\":{\"index\":2}}"},
        {"{\"environment\":\"cloud\"}", "{\"environment\":\"cloud\"}"},
        {"{\"cluster\":{}}", "{}"},
        {"{\"cluster\":{\"ps\":{}},\"environment\":\"\"}", "{\"cluster\":{\"ps\":[]}}"},
        /* Environments that are not short strings are ignored like other keys. */
        {"{\"environment\":7}", "{}"},
        {"{\"environment\":\"0123456789012345678901234567890123\"}", "{}"},
        {"{\"environment\":\"0123456789012345678901234567890\"}",
         "{\"environment\":\"0123456789012345678901234567890\"}"},
        {"{\"task\":{\"type\":-7,\"index\":1.0}}", "{\"task\":{\"type\":\"-7\",\"index\":1}}"},
    };
    for (size_t i = 0; i < sizeof partial / sizeof partial[0]; i++) {
        must_parse(partial[i][0], &c);
        s = format_fixed_point(&c, partial[i][0]);
        if (strcmp(s, partial[i][1]) != 0)
            fail_msg("%s: wrote %s, want %s", partial[i][0], s, partial[i][1]);
        pf_free(s);
        pf_tf_config_deinit(&c);
    }
    must_parse("{\"task\":{\"type\":\"ps\"}}", &c);
    assert_true(c.has_task);
    assert_int_equal(c.task_index, -1);
    pf_tf_config_deinit(&c);

    /* Addresses and names with characters JSON must escape come back unchanged. */
    pf_tf_config_init(&c);
    const char *odd[] = {"q\"uote:1", "back\\slash:2", "tab\tnl\nbell\x07:3", "caf\xc3\xa9:4",
                         "slash/esc\x1f:5"};
    assert_int_equal(pf_tf_config_add_job(&c, "ps", odd, 5), PF_OK);
    assert_int_equal(add_one(&c, "a\"b", "x:1"), PF_OK);
    c.has_task = true;
    snprintf(c.task_type, sizeof c.task_type, "t\\\"");
    c.task_index = 4;
    snprintf(c.environment, sizeof c.environment, "e\n");
    s = format_fixed_point(&c, "escapes");
    assert_string_equal(s, "{\"cluster\":{\"a\\\"b\":[\"x:1\"],\"ps\":[\"q\\\"uote:1\","
                           "\"back\\\\slash:2\",\"tab\\tnl\\nbell\\u0007:3\",\"caf\xc3\xa9:4\","
                           "\"slash/esc\\u001f:5\"]},\"task\":{\"type\":\"t\\\\\\\"\","
                           "\"index\":4},\"environment\":\"e\\n\"}");
    pf_tf_config again;
    must_parse(s, &again);
    for (int i = 0; i < 5; i++)
        assert_string_equal(pf_tf_config_address(&again, "ps", i), odd[i]);
    assert_string_equal(again.task_type, "t\\\"");
    assert_string_equal(again.environment, "e\n");
    pf_tf_config_deinit(&again);
    pf_free(s);
    pf_tf_config_deinit(&c);

    /* Jobs set up by hand out of order still come out sorted. */
    pf_tf_config_init(&c);
    assert_int_equal(add_one(&c, "ps", "p:1"), PF_OK);
    assert_int_equal(add_one(&c, "worker", "w:1"), PF_OK);
    pf_tf_job tmp = c.jobs[0];
    c.jobs[0] = c.jobs[1];
    c.jobs[1] = tmp;
    s = pf_tf_config_format(&c);
    assert_string_equal(s, "{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":[\"w:1\"]},"
                           "\"environment\":\"cloud\"}");
    pf_free(s);
    pf_tf_config_deinit(&c);
    assert_null(pf_tf_config_format(NULL));

    /* Lookups that find nothing. */
    must_parse(design_example, &c);
    assert_int_equal(pf_tf_config_count(&c, "Worker"), 0);
    assert_int_equal(pf_tf_config_count(&c, NULL), 0);
    assert_int_equal(pf_tf_config_count(NULL, "worker"), 0);
    assert_null(pf_tf_config_address(&c, "worker", 2));
    assert_null(pf_tf_config_address(&c, "worker", -1));
    assert_null(pf_tf_config_address(&c, "chief", 0));
    assert_null(pf_tf_config_address(NULL, "worker", 0));
    assert_null(pf_tf_config_address(&c, NULL, 0));
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
    pf_tf_config_deinit(&c);
    assert_true(is_zeroed(&c));
    pf_tf_config_deinit(&c); /* safe on a zeroed config */
    pf_tf_config_deinit(NULL);
}

/* --- the builder -------------------------------------------------------------------------------
 */

static void test_add_job(void **state) {
    (void)state;
    pf_tf_config c;
    pf_tf_config_init(&c);
    assert_int_equal(c.n_jobs, 0);
    assert_false(c.has_task);
    assert_string_equal(c.environment, "cloud");

    /* Addresses are copied. */
    char mine[] = "w0:2222";
    const char *one[] = {mine};
    assert_int_equal(pf_tf_config_add_job(&c, "worker", one, 1), PF_OK);
    mine[0] = 'X';
    assert_string_equal(pf_tf_config_address(&c, "worker", 0), "w0:2222");
    assert_ptr_not_equal(pf_tf_config_address(&c, "worker", 0), mine);

    /* Replacing keeps one job of that name, in its place. */
    addr_list *ws = make_addrs("w", 3);
    assert_int_equal(add_one(&c, "ps", "p:1"), PF_OK);
    assert_int_equal(add_one(&c, "chief", "c:1"), PF_OK);
    assert_int_equal(pf_tf_config_add_job(&c, "worker", (const char *const *)ws->addrs, 3), PF_OK);
    assert_int_equal(c.n_jobs, 3);
    assert_string_equal(c.jobs[0].name, "chief");
    assert_string_equal(c.jobs[1].name, "ps");
    assert_string_equal(c.jobs[2].name, "worker");
    assert_int_equal(pf_tf_config_count(&c, "worker"), 3);
    assert_string_equal(pf_tf_config_address(&c, "worker", 2), "w2:2222");
    assert_int_equal(pf_tf_config_add_job(&c, "worker", NULL, 0), PF_OK);
    assert_int_equal(c.n_jobs, 3);
    assert_int_equal(pf_tf_config_count(&c, "worker"), 0);
    free_addrs(ws);

    /* Gaps are allowed, but not last. */
    const char *gappy[] = {NULL, "w1:1", NULL, "w3:1"};
    assert_int_equal(pf_tf_config_add_job(&c, "worker", gappy, 4), PF_OK);
    assert_null(pf_tf_config_address(&c, "worker", 0));
    c.has_task = true;
    snprintf(c.task_type, sizeof c.task_type, "worker");
    c.task_index = 3;
    char *s = format_fixed_point(&c, "gaps");
    assert_string_equal(s, "{\"cluster\":{\"chief\":[\"c:1\"],\"ps\":[\"p:1\"],"
                           "\"worker\":{\"1\":\"w1:1\",\"3\":\"w3:1\"}},"
                           "\"task\":{\"type\":\"worker\",\"index\":3},\"environment\":\"cloud\"}");
    pf_free(s);
    const char *gap_last[] = {"w0:1", NULL};
    assert_int_equal(pf_tf_config_add_job(&c, "worker", gap_last, 2), PF_ERR_INVALID);
    assert_int_equal(pf_tf_config_count(&c, "worker"), 4); /* unchanged */

    /* Arguments and limits. */
    assert_int_equal(pf_tf_config_add_job(NULL, "ps", one, 1), PF_ERR_INVALID);
    assert_int_equal(pf_tf_config_add_job(&c, NULL, one, 1), PF_ERR_INVALID);
    assert_int_equal(pf_tf_config_add_job(&c, "", one, 1), PF_ERR_INVALID);
    assert_int_equal(pf_tf_config_add_job(&c, "ps", one, -1), PF_ERR_INVALID);
    assert_int_equal(pf_tf_config_add_job(&c, "ps", NULL, 1), PF_ERR_INVALID);
    char name[40];
    memset(name, 'n', 32);
    name[32] = '\0';
    assert_int_equal(pf_tf_config_add_job(&c, name, one, 1), PF_ERR_RANGE);
    name[31] = '\0';
    assert_int_equal(pf_tf_config_add_job(&c, name, one, 1), PF_OK);
    char addr[300];
    memset(addr, 'a', 256);
    addr[256] = '\0';
    const char *long_addr[] = {addr};
    assert_int_equal(pf_tf_config_add_job(&c, "ps", long_addr, 1), PF_ERR_RANGE);
    addr[255] = '\0';
    assert_int_equal(pf_tf_config_add_job(&c, "ps", long_addr, 1), PF_OK);
    assert_string_equal(pf_tf_config_address(&c, "ps", 0), addr);

    addr_list *many = make_addrs("h", PF_TF_MAX_TASKS + 1);
    assert_int_equal(
        pf_tf_config_add_job(&c, "ps", (const char *const *)many->addrs, PF_TF_MAX_TASKS + 1),
        PF_ERR_RANGE);
    assert_int_equal(
        pf_tf_config_add_job(&c, "ps", (const char *const *)many->addrs, PF_TF_MAX_TASKS), PF_OK);
    assert_int_equal(pf_tf_config_count(&c, "ps"), PF_TF_MAX_TASKS);
    free_addrs(many);

    /* Up to eight jobs; replacing one when full is fine. */
    assert_int_equal(c.n_jobs, 4);
    for (int i = 0; i < 4; i++) {
        char job[8];
        snprintf(job, sizeof job, "x%d", i);
        assert_int_equal(add_one(&c, job, "h:1"), PF_OK);
    }
    assert_int_equal(c.n_jobs, PF_TF_MAX_JOBS);
    assert_int_equal(add_one(&c, "y", "h:1"), PF_ERR_RANGE);
    assert_int_equal(add_one(&c, "x2", "h:2"), PF_OK);
    assert_string_equal(pf_tf_config_address(&c, "x2", 0), "h:2");
    for (int i = 1; i < c.n_jobs; i++)
        assert_true(strcmp(c.jobs[i - 1].name, c.jobs[i].name) < 0);
    pf_tf_config_deinit(&c);
}

/* --- failing allocations --------------------------------------------------------------------- */

static void test_failing_allocator_build(void **state) {
    (void)state;
    addr_list *ws = make_addrs("w", 5);
    for (long k = 0;; k++) {
        pf_tf_config c;
        pf_tf_config_init(&c);
        use_counting(-1);
        assert_int_equal(add_one(&c, "ps", "p:1"), PF_OK);
        const char *gappy[] = {NULL, "e1:1"};
        assert_int_equal(pf_tf_config_add_job(&c, "evaluator", gappy, 2), PF_OK);
        c.has_task = true;
        snprintf(c.task_type, sizeof c.task_type, "ps");

        counting_budget(k);
        /* A new job, then a replacement of an existing one, then the text. */
        pf_status st1 = pf_tf_config_add_job(&c, "worker", (const char *const *)ws->addrs, 5);
        pf_status st2 = pf_tf_config_add_job(&c, "ps", (const char *const *)ws->addrs, 2);
        char *s = pf_tf_config_format(&c);
        bool done = alloc_refused == 0;
        assert_true(st1 == PF_OK || st1 == PF_ERR_NOMEM);
        assert_true(st2 == PF_OK || st2 == PF_ERR_NOMEM);
        /* A failed call changed nothing. */
        assert_int_equal(c.n_jobs, st1 == PF_OK ? 3 : 2);
        assert_int_equal(pf_tf_config_count(&c, "ps"), st2 == PF_OK ? 2 : 1);
        assert_string_equal(pf_tf_config_address(&c, "ps", 0), st2 == PF_OK ? "w0:2222" : "p:1");
        assert_string_equal(pf_tf_config_address(&c, "evaluator", 1), "e1:1");
        if (s) {
            assert_non_null(strstr(s, "\"evaluator\":{\"1\":\"e1:1\"}"));
            pf_free(s);
        }
        pf_tf_config_deinit(&c);
        use_libc();
        if (alloc_live != 0)
            fail_msg("%ld allocations: %ld blocks leaked", k, alloc_live);
        if (done) {
            assert_int_equal(st1, PF_OK);
            assert_int_equal(st2, PF_OK);
            assert_non_null(s);
            break;
        }
        assert_true(k < 1000);
    }
    free_addrs(ws);
}

/* The training tasks sharing this task's host, as the thread policy counts them (a ps
 * does not count). */
static void test_trainers_on_host(void **state) {
    (void)state;
    static const struct {
        const char *json;
        int want;
    } cases[] = {
        /* 1 ps + 2 workers on one machine, loopback spelled three ways */
        {"{\"cluster\":{\"ps\":[\"127.0.0.1:1\"],\"worker\":[\"localhost:2\",\"127.0.0.2:3\"]},"
         "\"task\":{\"type\":\"worker\",\"index\":1}}",
         2},
        /* 2 ps + 1 worker on one machine: the worker alone computes */
        {"{\"cluster\":{\"ps\":[\"127.0.0.1:1\",\"127.0.0.1:4\"],\"worker\":[\"127.0.0.1:2\"]},"
         "\"task\":{\"type\":\"worker\",\"index\":0}}",
         1},
        /* one task per machine */
        {"{\"cluster\":{\"ps\":[\"a:1\"],\"worker\":[\"b:1\",\"c:1\"]},"
         "\"task\":{\"type\":\"worker\",\"index\":0}}",
         1},
        /* two workers and a chief on host b, the ps elsewhere; the chief asks */
        {"{\"cluster\":{\"chief\":[\"b:0\"],\"ps\":[\"a:1\"],\"worker\":[\"b:1\",\"b:2\"]},"
         "\"task\":{\"type\":\"chief\",\"index\":0}}",
         3},
        /* a sparse job's gaps count for nothing */
        {"{\"cluster\":{\"ps\":[\"b:9\"],\"worker\":{\"1\":\"b:1\",\"4\":\"b:4\"}},"
         "\"task\":{\"type\":\"worker\",\"index\":1}}",
         2},
        /* no task, or a task without an address: this task alone */
        {"{\"cluster\":{\"ps\":[\"b:9\"],\"worker\":[\"b:1\"]}}", 1},
        {"{\"cluster\":{\"ps\":[\"b:9\"]},\"task\":{\"type\":\"worker\",\"index\":3}}", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pf_tf_config c;
        must_parse(cases[i].json, &c);
        int got = pf_tf_config_trainers_on_host(&c);
        if (got != cases[i].want)
            fail_msg("case %zu: %d training tasks on the host, expected %d", i, got, cases[i].want);
        pf_tf_config_deinit(&c);
    }
    assert_int_equal(pf_tf_config_trainers_on_host(NULL), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trainers_on_host),
        cmocka_unit_test(test_operator_vectors_built),
        cmocka_unit_test(test_operator_vectors_round_trip),
        cmocka_unit_test(test_tensorflow_resolver_vectors),
        cmocka_unit_test(test_run_config_vectors),
        cmocka_unit_test(test_sparse_vectors),
        cmocka_unit_test(test_parse_and_format_details),
        cmocka_unit_test(test_add_job),
        cmocka_unit_test_teardown(test_failing_allocator_build, restore_allocator),
    };
    return cmocka_run_group_tests_name("tf_config", tests, NULL, NULL);
}
