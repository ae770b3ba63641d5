/* test_tf_config.c - TF_CONFIG: the operator's and TensorFlow's vectors, every file under
 * tests/data/tf_config/{valid,invalid}/, the limits, the builder, and failing allocations.
 *
 * valid/NAME.json parses, validates, and formats to a fixed point; a kubeflow_* file is the
 * operator's exact output and must format to its own bytes. invalid/NAME.json fails to parse
 * (PF_ERR_FORMAT) or to validate (PF_ERR_INVALID); the table invalid_cases says which, and
 * what the one-line message must contain. Every invalid file needs a row and every row a file.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/tf_config.h"
#include "tests/support/counting_alloc.h"

#define TFC_DIR   PSFLOW_TEST_DATA "/tf_config"
#define MAX_FILES 256

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
/* DESIGN.md section 4. */
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

static pf_status parse_text(const char *text, pf_tf_config *cfg, pf_error *err) {
    return pf_tf_config_parse(text, strlen(text), cfg, err);
}

static bool is_zeroed(const pf_tf_config *cfg) {
    static const pf_tf_config zero;
    return memcmp(cfg, &zero, sizeof zero) == 0;
}

/* Parses text, which must succeed, into *cfg. */
static void must_parse(const char *text, pf_tf_config *cfg) {
    pf_error err;
    pf_status st = parse_text(text, cfg, &err);
    if (st != PF_OK)
        fail_msg("%s: %s: %s", text, pf_strerror(st), err.message);
}

/* Parses text expecting failure; returns the status, leaves the detail in *err and checks that
 * nothing was left in the config and the message is one line. */
static pf_status parse_fails(const char *text, size_t len, pf_error *err) {
    pf_tf_config cfg;
    pf_status st = pf_tf_config_parse(text, len, &cfg, err);
    if (st == PF_OK) {
        pf_tf_config_deinit(&cfg);
        return st;
    }
    assert_true(is_zeroed(&cfg));
    assert_true(err->message[0] != '\0');
    assert_null(strchr(err->message, '\n'));
    return st;
}

/* Validates text, which must parse; returns the status, message in *err. */
static pf_status validate_text(const char *text, pf_error *err) {
    pf_tf_config cfg;
    must_parse(text, &cfg);
    pf_status st = pf_tf_config_validate(&cfg, err);
    pf_tf_config_deinit(&cfg);
    if (st != PF_OK) {
        assert_int_equal(st, PF_ERR_INVALID);
        assert_null(strchr(err->message, '\n'));
        assert_non_null(strstr(err->message, "TF_CONFIG: "));
    }
    return st;
}

/* format(cfg); then parse that and format again: the same bytes. Returns the first text. */
static char *format_fixed_point(const pf_tf_config *cfg, const char *what) {
    pf_tf_config again;
    pf_error err;
    char *first = pf_tf_config_format(cfg);
    if (!first)
        fail_msg("%s: format failed", what);
    pf_status st = parse_text(first, &again, &err);
    if (st != PF_OK)
        fail_msg("%s: the written form does not parse: %s\n%s", what, err.message, first);
    char *second = pf_tf_config_format(&again);
    assert_non_null(second);
    if (strcmp(first, second) != 0)
        fail_msg("%s: format is not a fixed point:\n%s\n%s", what, first, second);
    pf_free(second);
    pf_tf_config_deinit(&again);
    return first;
}

/* parse(text) then format must give text itself, byte for byte. */
static void assert_round_trip_exact(const char *text) {
    pf_tf_config cfg;
    must_parse(text, &cfg);
    char *out = format_fixed_point(&cfg, text);
    assert_string_equal(out, text);
    pf_free(out);
    pf_tf_config_deinit(&cfg);
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the *.json files in dir; the caller frees each. */
static size_t list_files(const char *dir, char **names) {
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("cannot open %s", dir);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        assert_true(n < MAX_FILES);
        names[n] = strdup(e->d_name);
        assert_non_null(names[n]);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, compare_names);
    return n;
}

/* Whole file; *len is its size (the file may hold any bytes). NUL-terminated for convenience. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            assert_non_null(buf);
        }
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
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

static pf_status add_one(pf_tf_config *cfg, const char *job, const char *addr) {
    const char *addrs[1] = {addr};
    return pf_tf_config_add_job(cfg, job, addrs, 1);
}

/* --- failing allocator ------------------------------------------------------------------------ */

static int restore_allocator(void **state) {
    (void)state;
    use_libc();
    return 0;
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

    /* DESIGN.md section 4. */
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

/* --- validation ------------------------------------------------------------------------------- */

static void test_validate_errors(void **state) {
    (void)state;
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":[\"w:1\"]}}",
         "TF_CONFIG: task is missing: expected \"task\": {\"type\": \"worker\", \"index\": 0} or "
         "similar"},
        {"{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":[\"w:1\"]},\"task\":{\"index\":0}}",
         "TF_CONFIG: task type is missing: must be one of chief, evaluator, ps, worker"},
        {"{\"cluster\":{\"master\":[\"m:1\"],\"ps\":[\"p:1\"]},\"task\":{\"type\":\"master\","
         "\"index\":0}}",
         "TF_CONFIG: task type 'master' is not supported: must be one of chief, evaluator, ps, "
         "worker"},
        {"{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":[\"w:1\"]},\"task\":{\"type\":\"foo\","
         "\"index\":0}}",
         "TF_CONFIG: task type 'foo' is not supported: must be one of chief, evaluator, ps, "
         "worker"},
        {"{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":[\"w:1\"]},\"task\":{\"type\":\"worker\"}}",
         "TF_CONFIG: task index is missing for task type 'worker'"},
        {"{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":[\"w:1\",\"w:2\"]},\"task\":{\"type\":"
         "\"worker\",\"index\":3}}",
         "TF_CONFIG: task index 3 is out of range: cluster has 2 worker tasks"},
        {"{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":[\"w:1\"]},\"task\":{\"type\":\"ps\","
         "\"index\":1}}",
         "TF_CONFIG: task index 1 is out of range: cluster has 1 ps task"},
        {"{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":[\"w:1\"]},\"task\":{\"type\":\"chief\","
         "\"index\":0}}",
         "TF_CONFIG: the cluster has no 'chief' job, but the task is chief 0"},
        {"{\"cluster\":{\"ps\":[\"p:1\"],\"worker\":{\"2\":\"w:1\"}},\"task\":{\"type\":"
         "\"worker\",\"index\":1}}",
         "TF_CONFIG: the cluster has no address for task worker 1 (a gap in the sparse 'worker' "
         "job)"},
        {"{\"cluster\":{\"chief\":[\"c:1\"],\"worker\":[\"w:1\"]},\"task\":{\"type\":\"chief\","
         "\"index\":0}}",
         "TF_CONFIG: the cluster has no ps tasks: psflow needs at least one parameter server"},
        {"{\"cluster\":{\"ps\":{},\"worker\":[\"w:1\"]},\"task\":{\"type\":\"worker\","
         "\"index\":0}}",
         "TF_CONFIG: the cluster has no ps tasks: psflow needs at least one parameter server"},
        {"{\"cluster\":{\"evaluator\":[\"e:1\"],\"ps\":[\"p:1\"]},\"task\":{\"type\":\"ps\","
         "\"index\":0}}",
         "TF_CONFIG: the cluster has no worker or chief job"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pf_error err;
        pf_status st = validate_text(cases[i].text, &err);
        if (st != PF_ERR_INVALID || strcmp(err.message, cases[i].message) != 0)
            fail_msg("%s\n got %s: %s\nwant %s", cases[i].text, pf_strerror(st), err.message,
                     cases[i].message);
    }

    /* Task types come from a struct too: control bytes never reach the message. */
    pf_tf_config c;
    pf_error err;
    pf_tf_config_init(&c);
    assert_int_equal(add_one(&c, "ps", "p:1"), PF_OK);
    assert_int_equal(add_one(&c, "worker", "w:1"), PF_OK);
    c.has_task = true;
    memset(c.task_type, 'x', sizeof c.task_type); /* not NUL-terminated */
    c.task_type[3] = '\n';
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_ERR_INVALID);
    assert_null(strchr(err.message, '\n'));
    assert_non_null(strstr(err.message, "is not supported"));
    snprintf(c.task_type, sizeof c.task_type, "worker");
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
    assert_string_equal(err.message, "");
    c.task_index = -1;
    assert_int_equal(pf_tf_config_validate(&c, &err), PF_ERR_INVALID);
    pf_tf_config_deinit(&c);
    assert_int_equal(pf_tf_config_validate(NULL, &err), PF_ERR_INVALID);
    assert_int_equal(pf_tf_config_validate(NULL, NULL), PF_ERR_INVALID);
}

/* --- parse errors ----------------------------------------------------------------------------- */

static void test_parse_errors(void **state) {
    (void)state;
    static const struct {
        const char *text, *pointer, *message;
    } cases[] = {
        {"worker:0", "", "TF_CONFIG: not valid JSON: "},
        {"[1]", "", "TF_CONFIG: expected a JSON object, got an array"},
        {"\"x\"", "", "TF_CONFIG: expected a JSON object, got a string"},
        {"{\"cluster\":[]}", "/cluster",
         "TF_CONFIG: /cluster: expected an object of jobs, got an array"},
        {"{\"cluster\":{\"ps\":\"p:1\"}}", "/cluster/ps",
         "TF_CONFIG: /cluster/ps: expected a list of addresses or an object of index: address, "
         "got a string"},
        {"{\"cluster\":{\"ps\":[\"p:1\",2]}}", "/cluster/ps/1",
         "TF_CONFIG: /cluster/ps/1: expected an address string \"host:port\", got a number"},
        {"{\"cluster\":{\"worker\":{\"0\":true}}}", "/cluster/worker/0",
         "TF_CONFIG: /cluster/worker/0: expected an address string \"host:port\", got a "
         "boolean"},
        {"{\"cluster\":{\"worker\":{\"x\":\"w:1\"}}}", "/cluster/worker/x",
         "TF_CONFIG: /cluster/worker/x: expected a task index (decimal digits) as the key"},
        {"{\"cluster\":{\"worker\":{\"4096\":\"w:1\"}}}", "/cluster/worker/4096",
         "TF_CONFIG: /cluster/worker/4096: task index is beyond the limit of 4096 tasks per job"},
        {"{\"cluster\":{\"worker\":{\"2\":\"a:1\",\"002\":\"b:1\"}}}", "/cluster/worker/002",
         "TF_CONFIG: /cluster/worker/002: task index 2 appears twice"},
        {"{\"cluster\":{\"\":[]}}", "/cluster/", "TF_CONFIG: /cluster/: job name is empty"},
        {"{\"cluster\":{\"a/b~c\":1}}", "/cluster/a~1b~0c",
         "TF_CONFIG: /cluster/a~1b~0c: expected a list of addresses or an object of index: "
         "address, got a number"},
        {"{\"task\":[]}", "/task",
         "TF_CONFIG: /task: expected an object with \"type\" and \"index\", got an array"},
        {"{\"task\":{\"type\":null}}", "/task/type",
         "TF_CONFIG: /task/type: expected a string, got null"},
        {"{\"task\":{\"index\":-1}}", "/task/index",
         "TF_CONFIG: /task/index: expected a non-negative integer, got -1"},
        {"{\"task\":{\"index\":\"-1\"}}", "/task/index",
         "TF_CONFIG: /task/index: expected a non-negative integer, got \"-1\""},
        {"{\"task\":{\"index\":\"abc\"}}", "/task/index",
         "TF_CONFIG: /task/index: expected a non-negative integer, got \"abc\""},
        {"{\"task\":{\"index\":1.5}}", "/task/index",
         "TF_CONFIG: /task/index: expected a non-negative integer, got 1.5"},
        {"{\"task\":{\"index\":-0.5}}", "/task/index",
         "TF_CONFIG: /task/index: expected a non-negative integer, got -0.5"},
        {"{\"task\":{\"index\":\"1.5\"}}", "/task/index",
         "TF_CONFIG: /task/index: expected a non-negative integer, got \"1.5\""},
        {"{\"task\":{\"index\":\" 1\"}}", "/task/index",
         "TF_CONFIG: /task/index: expected a non-negative integer, got \" 1\""},
        {"{\"task\":{\"index\":\"1\\n\"}}", "/task/index",
         "TF_CONFIG: /task/index: expected a non-negative integer, got \"1?\""},
        {"{\"task\":{\"index\":false}}", "/task/index",
         "TF_CONFIG: /task/index: expected a non-negative integer, got a boolean"},
        {"{\"task\":{\"index\":4096}}", "/task/index",
         "TF_CONFIG: /task/index: task index 4096 is beyond the limit of 4096 tasks per job"},
        {"{\"task\":{\"index\":5000.0}}", "/task/index",
         "TF_CONFIG: /task/index: task index 5000 is beyond the limit of 4096 tasks per job"},
        {"{\"task\":{\"index\":\"123456789012345678901234567890\"}}", "/task/index",
         "TF_CONFIG: /task/index: task index \"123456789012345678901234567890\" is beyond the "
         "limit of 4096 tasks per job"},
        {"{\"task\":{\"index\":1e300}}", "/task/index",
         "TF_CONFIG: /task/index: expected a non-negative integer, got 1e+300"},
        {"{\"task\":{\"type\":\"ps\",\"type\":\"worker\"}}", "", "duplicate object key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pf_error err;
        pf_status st = parse_fails(cases[i].text, strlen(cases[i].text), &err);
        if (st != PF_ERR_FORMAT || strcmp(err.pointer, cases[i].pointer) != 0 ||
            !strstr(err.message, cases[i].message))
            fail_msg("%s\n got %s at '%s': %s\nwant '%s': %s", cases[i].text, pf_strerror(st),
                     err.pointer, err.message, cases[i].pointer, cases[i].message);
    }

    /* jansson's position for malformed text, and a NULL error record. */
    pf_error err;
    const char *bad = "{\"task\":\n{\"type\" \"ps\"}}";
    assert_int_equal(parse_fails(bad, strlen(bad), &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "line 2"));
    assert_true(err.offset > 8);
    pf_tf_config c;
    assert_int_equal(pf_tf_config_parse("[]", 2, &c, NULL), PF_ERR_FORMAT);
    assert_true(is_zeroed(&c));

    /* The length counts, not a NUL: a document cut short, and bytes after the end ignored. */
    assert_int_equal(parse_fails("{\"task\":{}}", 5, &err), PF_ERR_FORMAT);
    assert_int_equal(pf_tf_config_parse("{}garbage", 2, &c, &err), PF_OK);
    pf_tf_config_deinit(&c);
    assert_int_equal(parse_fails("", 0, &err), PF_ERR_FORMAT);
    assert_int_equal(pf_tf_config_parse(NULL, 0, &c, &err), PF_ERR_FORMAT);
    assert_true(is_zeroed(&c));
    assert_int_equal(pf_tf_config_parse(NULL, 3, &c, &err), PF_ERR_INVALID);
    assert_int_equal(pf_tf_config_parse("{}", 2, NULL, &err), PF_ERR_INVALID);

    /* NUL bytes: in a string, in a key, and raw. */
    bad = "{\"cluster\":{\"ps\":[\"p\\u0000:1\"]}}";
    assert_int_equal(parse_fails(bad, strlen(bad), &err), PF_ERR_FORMAT);
    bad = "{\"cluster\":{\"p\\u0000s\":[]}}";
    assert_int_equal(parse_fails(bad, strlen(bad), &err), PF_ERR_FORMAT);
    assert_int_equal(parse_fails("{\"task\":{}}\0", 12, &err), PF_ERR_FORMAT);

    /* jansson quotes the bad token raw; the message does not (found by the fuzzer). */
    bad = "\"{\\\"Kc\\\n";
    assert_int_equal(parse_fails(bad, strlen(bad), &err), PF_ERR_FORMAT);
    bad = "{\"cluster\":{\"ps\":[\"p\xff\xfe\t\"]}}";
    assert_int_equal(parse_fails(bad, strlen(bad), &err), PF_ERR_FORMAT);
    for (const char *m = err.message; *m; m++)
        assert_true((unsigned char)*m >= 0x20 && (unsigned char)*m < 0x7f);

    /* A job name full of control bytes and a long one: the message stays one bounded line,
     * the pointer stays valid UTF-8. */
    char text[1024];
    snprintf(text, sizeof text, "{\"cluster\":{\"a\\nb\\tc\":1}}");
    assert_int_equal(parse_fails(text, strlen(text), &err), PF_ERR_FORMAT);
    assert_string_equal(err.pointer, "/cluster/a\nb\tc");
    assert_non_null(strstr(err.message, "/cluster/a?b?c:"));
    strcpy(text, "{\"cluster\":{\"");
    for (int i = 0; i < 100; i++)
        strcat(text, "\xc3\xa9"); /* U+00E9, two bytes */
    strcat(text, "\":[]}}");
    assert_int_equal(parse_fails(text, strlen(text), &err), PF_ERR_FORMAT);
    assert_true(strlen(err.pointer) < sizeof err.pointer);
    assert_int_equal(strlen(err.pointer + strlen("/cluster/")) % 2, 0); /* whole characters */
    assert_non_null(strstr(err.message, "...: job name is longer than 31 bytes"));
    assert_true(strlen(err.message) < 160);
}

static void test_duplicate_keys(void **state) {
    (void)state;
    const char *texts[] = {
        "{\"cluster\":{},\"cluster\":{}}",
        "{\"cluster\":{\"ps\":[\"a:1\"],\"ps\":[\"b:1\"]}}",
        "{\"cluster\":{\"worker\":{\"0\":\"a:1\",\"0\":\"b:1\"}}}",
        "{\"task\":{\"type\":\"ps\",\"index\":0,\"index\":1}}",
        "{\"environment\":\"cloud\",\"environment\":\"google\"}",
        "{\"x\":1,\"x\":2}",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        pf_error err;
        assert_int_equal(parse_fails(texts[i], strlen(texts[i]), &err), PF_ERR_FORMAT);
        assert_non_null(strstr(err.message, "duplicate object key"));
    }
}

/* --- limits ----------------------------------------------------------------------------------- */

/* {"cluster":{"ps":[<n addresses>]},"task":{"type":"ps","index":<n-1>}} */
static char *many_tasks_text(int n, bool sparse) {
    size_t cap = (size_t)n * 24 + 128, len = 0;
    char *t = malloc(cap);
    assert_non_null(t);
    len += (size_t)snprintf(t + len, cap - len, "{\"cluster\":{\"ps\":%s", sparse ? "{" : "[");
    for (int i = 0; i < n; i++) {
        if (sparse)
            len += (size_t)snprintf(t + len, cap - len, "%s\"%d\":\"p%d:1\"", i ? "," : "",
                                    n - 1 - i, n - 1 - i);
        else
            len += (size_t)snprintf(t + len, cap - len, "%s\"p%d:1\"", i ? "," : "", i);
    }
    snprintf(t + len, cap - len,
             "%s,\"worker\":[\"w:1\"]},\"task\":{\"type\":\"ps\",\"index\":%d}}",
             sparse ? "}" : "]", n - 1);
    return t;
}

static void test_limits(void **state) {
    (void)state;
    pf_tf_config c;
    pf_error err;

    for (int sparse = 0; sparse <= 1; sparse++) {
        char *t = many_tasks_text(PF_TF_MAX_TASKS, sparse);
        must_parse(t, &c);
        assert_int_equal(pf_tf_config_count(&c, "ps"), PF_TF_MAX_TASKS);
        assert_string_equal(pf_tf_config_address(&c, "ps", 4095), "p4095:1");
        assert_int_equal(c.task_index, 4095);
        assert_int_equal(pf_tf_config_validate(&c, &err), PF_OK);
        char *s = format_fixed_point(&c, "4096 tasks");
        if (!sparse)
            assert_string_equal(s, t);
        pf_free(s);
        pf_tf_config_deinit(&c);
        free(t);

        t = many_tasks_text(PF_TF_MAX_TASKS + 1, sparse);
        assert_int_equal(parse_fails(t, strlen(t), &err), PF_ERR_FORMAT);
        assert_string_equal(err.pointer, sparse ? "/cluster/ps/4096" : "/cluster/ps");
        free(t);
    }

    /* Eight jobs, not nine. */
    char text[512] = "{\"cluster\":{";
    for (int i = 0; i < PF_TF_MAX_JOBS; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "%s\"j%d\":[\"h:1\"]",
                 i ? "," : "", i);
    strcat(text, "}}");
    must_parse(text, &c);
    assert_int_equal(c.n_jobs, PF_TF_MAX_JOBS);
    pf_tf_config_deinit(&c);
    strcpy(text + strlen(text) - 2, ",\"j8\":[]}}");
    assert_int_equal(parse_fails(text, strlen(text), &err), PF_ERR_FORMAT);
    assert_string_equal(err.message, "TF_CONFIG: /cluster: more than 8 jobs");

    /* Names of 31 bytes, not 32; addresses of 255 bytes, not 256. */
    char name[40], addr[300];
    memset(name, 'n', 31);
    name[31] = '\0';
    memset(addr, 'a', 250);
    snprintf(addr + 250, sizeof addr - 250, ":2222");
    assert_int_equal(strlen(addr), PF_TF_ADDR_MAX - 1);
    snprintf(text, sizeof text, "{\"cluster\":{\"%s\":[\"%s\"]},\"task\":{\"type\":\"%s\"}}", name,
             addr, name);
    must_parse(text, &c);
    assert_string_equal(c.jobs[0].name, name);
    assert_string_equal(c.task_type, name);
    assert_string_equal(pf_tf_config_address(&c, name, 0), addr);
    char *s = format_fixed_point(&c, "long names");
    assert_string_equal(s, text);
    pf_free(s);
    pf_tf_config_deinit(&c);

    snprintf(text, sizeof text, "{\"cluster\":{\"%sN\":[]}}", name);
    assert_int_equal(parse_fails(text, strlen(text), &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "job name is longer than 31 bytes"));
    snprintf(text, sizeof text, "{\"task\":{\"type\":\"%sN\"}}", name);
    assert_int_equal(parse_fails(text, strlen(text), &err), PF_ERR_FORMAT);
    assert_string_equal(err.pointer, "/task/type");
    snprintf(text, sizeof text, "{\"cluster\":{\"ps\":[\"%sA\"]}}", addr);
    assert_int_equal(parse_fails(text, strlen(text), &err), PF_ERR_FORMAT);
    assert_string_equal(err.message, "TF_CONFIG: /cluster/ps/0: address is longer than 255 bytes");

    /* An escaped address counts decoded bytes: 255 bytes written as 6-byte escapes parse. */
    strcpy(text, "{\"cluster\":{\"ps\":[\"");
    char *big = malloc(255 * 6 + 64);
    assert_non_null(big);
    strcpy(big, text);
    for (int i = 0; i < 255; i++)
        strcat(big, "\\u0041");
    strcat(big, "\"]}}");
    must_parse(big, &c);
    assert_int_equal(strlen(pf_tf_config_address(&c, "ps", 0)), 255);
    pf_tf_config_deinit(&c);
    free(big);

    /* Task index at the edge. */
    must_parse("{\"task\":{\"type\":\"ps\",\"index\":4095}}", &c);
    assert_int_equal(c.task_index, 4095);
    pf_tf_config_deinit(&c);
    must_parse("{\"task\":{\"type\":\"ps\",\"index\":\"0004095\"}}", &c);
    assert_int_equal(c.task_index, 4095);
    pf_tf_config_deinit(&c);
    must_parse("{\"task\":{\"type\":\"ps\",\"index\":-0.0}}", &c);
    assert_int_equal(c.task_index, 0);
    pf_tf_config_deinit(&c);
    must_parse("{\"task\":{\"type\":\"ps\",\"index\":2e0}}", &c);
    assert_int_equal(c.task_index, 2);
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

/* --- data files ------------------------------------------------------------------------------- */

static void test_valid_files(void **state) {
    (void)state;
    char *names[MAX_FILES];
    size_t n = list_files(TFC_DIR "/valid", names);
    assert_true(n >= 20);
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        size_t len;
        pf_tf_config c;
        pf_error err;
        snprintf(path, sizeof path, "%s/valid/%s", TFC_DIR, names[i]);
        char *text = read_file(path, &len);
        pf_status st = pf_tf_config_parse(text, len, &c, &err);
        if (st != PF_OK)
            fail_msg("%s: %s: %s", names[i], pf_strerror(st), err.message);
        if ((st = pf_tf_config_validate(&c, &err)) != PF_OK)
            fail_msg("%s: does not validate: %s", names[i], err.message);
        char *s = format_fixed_point(&c, names[i]);
        if (strncmp(names[i], "kubeflow_", 9) == 0) {
            while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
                text[--len] = '\0';
            if (strcmp(s, text) != 0)
                fail_msg("%s: not reproduced byte for byte:\n%s\n%s", names[i], text, s);
        }
        pf_free(s);
        pf_tf_config_deinit(&c);
        free(text);
        free(names[i]);
    }
    print_message("%zu valid TF_CONFIG files\n", n);
}

/* Why each invalid file fails: PF_ERR_FORMAT from parse or PF_ERR_INVALID from validate, and a
 * piece of the message. */
static const struct {
    const char *file;
    pf_status status;
    const char *message;
} invalid_cases[] = {
    {"address_nul", PF_ERR_FORMAT, "not valid JSON"},
    {"address_null", PF_ERR_FORMAT, "/cluster/ps/0: expected an address string"},
    {"address_number", PF_ERR_FORMAT, "/cluster/ps/1: expected an address string"},
    {"address_object", PF_ERR_FORMAT, "/cluster/ps/0: expected an address string"},
    {"address_too_long", PF_ERR_FORMAT, "/cluster/ps/0: address is longer than 255 bytes"},
    {"cluster_array", PF_ERR_FORMAT, "/cluster: expected an object of jobs, got an array"},
    {"cluster_null", PF_ERR_FORMAT, "/cluster: expected an object of jobs, got null"},
    {"cluster_string", PF_ERR_FORMAT, "/cluster: expected an object of jobs, got a string"},
    {"duplicate_job", PF_ERR_FORMAT, "duplicate object key"},
    {"duplicate_sparse_key", PF_ERR_FORMAT, "duplicate object key"},
    {"duplicate_task_key", PF_ERR_FORMAT, "duplicate object key"},
    {"duplicate_top_key", PF_ERR_FORMAT, "duplicate object key"},
    {"empty_file", PF_ERR_FORMAT, "not valid JSON"},
    {"empty_object", PF_ERR_INVALID, "task is missing"},
    {"empty_type", PF_ERR_INVALID, "task type is missing"},
    {"index_abc", PF_ERR_FORMAT, "/task/index: expected a non-negative integer, got \"abc\""},
    {"index_array", PF_ERR_FORMAT, "/task/index: expected a non-negative integer, got an array"},
    {"index_bool", PF_ERR_FORMAT, "/task/index: expected a non-negative integer, got a boolean"},
    {"index_empty_string", PF_ERR_FORMAT, "/task/index: expected a non-negative integer, got \"\""},
    {"index_exponent", PF_ERR_FORMAT, "/task/index: expected a non-negative integer, got 1e+300"},
    {"index_float", PF_ERR_FORMAT, "/task/index: expected a non-negative integer, got 1.5"},
    {"index_float_string", PF_ERR_FORMAT,
     "/task/index: expected a non-negative integer, got \"1.5\""},
    {"index_integer_overflow", PF_ERR_FORMAT, "not valid JSON"},
    {"index_negative", PF_ERR_FORMAT, "/task/index: expected a non-negative integer, got -1"},
    {"index_negative_string", PF_ERR_FORMAT,
     "/task/index: expected a non-negative integer, got \"-1\""},
    {"index_null", PF_ERR_FORMAT, "/task/index: expected a non-negative integer, got null"},
    {"index_out_of_range", PF_ERR_INVALID,
     "task index 3 is out of range: cluster has 2 worker tasks"},
    {"index_out_of_range_ps", PF_ERR_INVALID,
     "task index 1 is out of range: cluster has 1 ps task"},
    {"index_too_big", PF_ERR_FORMAT, "task index 4096 is beyond the limit of 4096 tasks per job"},
    {"invalid_utf8", PF_ERR_FORMAT, "not valid JSON"},
    {"job_name_empty", PF_ERR_FORMAT, "job name is empty"},
    {"job_name_too_long", PF_ERR_FORMAT, "job name is longer than 31 bytes"},
    {"job_null", PF_ERR_FORMAT, "/cluster/ps: expected a list of addresses"},
    {"job_number", PF_ERR_FORMAT, "/cluster/ps: expected a list of addresses"},
    {"job_string", PF_ERR_FORMAT, "/cluster/ps: expected a list of addresses"},
    {"kubeflow_v1_single_worker", PF_ERR_INVALID, "no ps tasks"},
    {"missing_index", PF_ERR_INVALID, "task index is missing"},
    {"missing_task", PF_ERR_INVALID, "task is missing"},
    {"missing_type", PF_ERR_INVALID, "task type is missing"},
    {"no_ps", PF_ERR_INVALID, "no ps tasks"},
    {"no_worker_or_chief", PF_ERR_INVALID, "no worker or chief job"},
    {"newline_in_bad_token", PF_ERR_FORMAT, "not valid JSON"},
    {"not_json", PF_ERR_FORMAT, "not valid JSON"},
    {"ps_empty", PF_ERR_INVALID, "no ps tasks"},
    {"run_config_evaluator_absent", PF_ERR_INVALID, "the cluster has no 'evaluator' job"},
    {"single_quotes", PF_ERR_FORMAT, "not valid JSON"},
    {"sparse_address_number", PF_ERR_FORMAT, "/cluster/worker/0: expected an address string"},
    {"sparse_duplicate_index", PF_ERR_FORMAT, "/cluster/worker/01: task index 1 appears twice"},
    {"sparse_gap_at_task", PF_ERR_INVALID, "no address for task worker 1"},
    {"sparse_key_empty", PF_ERR_FORMAT, "/cluster/worker/: expected a task index"},
    {"sparse_key_huge", PF_ERR_FORMAT, "task index is beyond the limit of 4096 tasks per job"},
    {"sparse_key_negative", PF_ERR_FORMAT, "/cluster/worker/-1: expected a task index"},
    {"sparse_key_too_big", PF_ERR_FORMAT,
     "/cluster/worker/4096: task index is beyond the limit of 4096 tasks per job"},
    {"sparse_key_word", PF_ERR_FORMAT, "/cluster/worker/zero: expected a task index"},
    {"task_array", PF_ERR_FORMAT, "/task: expected an object"},
    {"task_job_absent", PF_ERR_INVALID, "the cluster has no 'chief' job, but the task is chief 0"},
    {"task_null", PF_ERR_FORMAT, "/task: expected an object"},
    {"task_string", PF_ERR_FORMAT, "/task: expected an object"},
    {"task_type_bool", PF_ERR_FORMAT, "/task/type: expected a string, got a boolean"},
    {"task_type_too_long", PF_ERR_FORMAT, "/task/type: task type is longer than 31 bytes"},
    {"tf_single_node_no_task", PF_ERR_INVALID, "task is missing"},
    {"too_many_jobs", PF_ERR_FORMAT, "/cluster: more than 8 jobs"},
    {"too_many_tasks", PF_ERR_FORMAT, "/cluster/ps: more than 4096 tasks in one job"},
    {"top_level_array", PF_ERR_FORMAT, "expected a JSON object, got an array"},
    {"top_level_number", PF_ERR_FORMAT, "expected a JSON object, got a number"},
    {"top_level_string", PF_ERR_FORMAT, "expected a JSON object, got a string"},
    {"trailing_comma", PF_ERR_FORMAT, "not valid JSON"},
    {"trailing_garbage", PF_ERR_FORMAT, "not valid JSON"},
    {"truncated", PF_ERR_FORMAT, "not valid JSON"},
    {"type_foo", PF_ERR_INVALID, "task type 'foo' is not supported"},
    {"type_master", PF_ERR_INVALID,
     "task type 'master' is not supported: must be one of chief, evaluator, ps, worker"},
    {"type_numeric", PF_ERR_INVALID, "task type '123456' is not supported"},
    {"type_uppercase", PF_ERR_INVALID, "task type 'Worker' is not supported"},
};
#define N_INVALID_CASES (sizeof invalid_cases / sizeof invalid_cases[0])

static void test_invalid_files(void **state) {
    (void)state;
    char *names[MAX_FILES];
    bool seen[N_INVALID_CASES] = {false};
    size_t n = list_files(TFC_DIR "/invalid", names);
    for (size_t i = 0; i < n; i++) {
        char base[256];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(names[i]) - 5), names[i]);
        size_t row = 0;
        while (row < N_INVALID_CASES && strcmp(base, invalid_cases[row].file) != 0)
            row++;
        if (row == N_INVALID_CASES)
            fail_msg("invalid/%s has no row in invalid_cases", names[i]);
        seen[row] = true;

        char path[1024];
        size_t len;
        pf_tf_config c;
        pf_error err;
        snprintf(path, sizeof path, "%s/invalid/%s", TFC_DIR, names[i]);
        char *text = read_file(path, &len);
        pf_status st = pf_tf_config_parse(text, len, &c, &err);
        if (st == PF_OK) {
            st = pf_tf_config_validate(&c, &err);
            pf_tf_config_deinit(&c);
        } else {
            assert_true(is_zeroed(&c));
        }
        if (st != invalid_cases[row].status || !strstr(err.message, invalid_cases[row].message))
            fail_msg("%s: got %s: %s\nwant %s: ...%s...", names[i], pf_strerror(st), err.message,
                     pf_strerror(invalid_cases[row].status), invalid_cases[row].message);
        if (strchr(err.message, '\n') || strncmp(err.message, "TF_CONFIG: ", 11) != 0)
            fail_msg("%s: message is not one TF_CONFIG line: %s", names[i], err.message);
        free(text);
        free(names[i]);
    }
    for (size_t row = 0; row < N_INVALID_CASES; row++)
        if (!seen[row])
            fail_msg("invalid_cases row %s has no file", invalid_cases[row].file);
    print_message("%zu invalid TF_CONFIG files\n", n);
}

/* --- failing allocations ------------------------------------------------------------------------
 */

/* Every valid file, parsed and formatted with the k-th psflow allocation failing, for every k
 * until none fails: PF_ERR_NOMEM or PF_OK, nothing leaked, nothing left behind. */
static void test_failing_allocator_parse(void **state) {
    (void)state;
    char *names[MAX_FILES];
    size_t n = list_files(TFC_DIR "/valid", names);
    long total_failures = 0;
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        size_t len;
        snprintf(path, sizeof path, "%s/valid/%s", TFC_DIR, names[i]);
        char *text = read_file(path, &len);
        for (long k = 0;; k++) {
            pf_tf_config c;
            pf_error err;
            use_counting(k);
            pf_status st = pf_tf_config_parse(text, len, &c, &err);
            char *s = NULL;
            if (st == PF_OK) {
                s = pf_tf_config_format(&c);
                pf_free(s);
                pf_tf_config_deinit(&c);
            } else {
                if (st != PF_ERR_NOMEM)
                    fail_msg("%s, %ld allocations: %s", names[i], k, pf_strerror(st));
                assert_true(is_zeroed(&c));
                assert_string_equal(err.message, "TF_CONFIG: out of memory");
            }
            bool done = alloc_refused == 0;
            use_libc();
            if (alloc_live != 0)
                fail_msg("%s, %ld allocations: %ld blocks leaked", names[i], k, alloc_live);
            if (done) {
                assert_non_null(s);
                break;
            }
            total_failures++;
            assert_true(k < 100000);
        }
        free(text);
        free(names[i]);
    }
    assert_true(total_failures > 0);
}

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_operator_vectors_built),
        cmocka_unit_test(test_operator_vectors_round_trip),
        cmocka_unit_test(test_tensorflow_resolver_vectors),
        cmocka_unit_test(test_run_config_vectors),
        cmocka_unit_test(test_sparse_vectors),
        cmocka_unit_test(test_validate_errors),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_parse_and_format_details),
        cmocka_unit_test(test_add_job),
        cmocka_unit_test(test_valid_files),
        cmocka_unit_test(test_invalid_files),
        cmocka_unit_test_teardown(test_failing_allocator_parse, restore_allocator),
        cmocka_unit_test_teardown(test_failing_allocator_build, restore_allocator),
    };
    return cmocka_run_group_tests_name("tf_config", tests, NULL, NULL);
}
