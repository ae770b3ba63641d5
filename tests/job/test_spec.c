/* test_spec.c - the job spec parser: every file under tests/data/spec/{valid,invalid}/, the
 * defaults, docs/design.md's example, the error details, and failing allocations.
 *
 * Each invalid case NAME.json has a sibling NAME.pointer holding the JSON pointer the error
 * must name (empty for malformed JSON, which has no field to point at).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/spec.h"
#include "tests/support/counting_alloc.h"
#include "tests/support/data_files.h"

#define SPEC_DIR  PSFLOW_TEST_DATA "/spec"
#define MAX_FILES 256

/* The example of docs/design.md section 2, verbatim. */
static const char design_example[] =
    "{\n"
    "  \"name\": \"fmnist-mlp\",\n"
    "  \"replicas\": {\"ps\": 2, \"worker\": 2, \"chief\": 0, \"evaluator\": 0},\n"
    "  \"model\": {\"type\": \"mlp\", \"inputs\": 784, \"hidden\": [256, 256], \"outputs\": 10,\n"
    "            \"activation\": \"relu\"},\n"
    "  \"data\": {\"format\": \"idx\",\n"
    "           \"train\": [\"/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz\",\n"
    "                     \"/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz\"],\n"
    "           \"test\":  [\"/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz\",\n"
    "                     \"/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz\"]},\n"
    "  \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.01},\n"
    "  \"training\": {\"mode\": \"sync\", \"batch_size\": 100, \"max_steps\": 2000,\n"
    "               \"replicas_to_aggregate\": 2, \"seed\": 1, \"eval_every_steps\": 200},\n"
    "  \"placement\": {\"strategy\": \"round_robin\",\n"
    "                \"partitioner\": {\"type\": \"none\"}},\n"
    "  \"checkpoint\": {\"every_steps\": 500, \"every_secs\": 600, \"keep\": 5},\n"
    "  \"run_policy\": {\"restart_policy\": \"OnFailure\", \"backoff_limit\": 3,\n"
    "                 \"active_deadline_seconds\": 0},\n"
    "  \"device\": \"cpu\"\n"
    "}\n";

static const char minimal[] = "{\"name\": \"m\", \"model\": {\"type\": \"linear\", \"inputs\": 1},"
                              " \"data\": {\"format\": \"synthetic_linear\"}}";

/* A complete spec up to its last field, for tests to add one more: BASE "\"x\":1}". */
#define BASE                                                                                       \
    "{\"name\":\"a\",\"model\":{\"type\":\"linear\",\"inputs\":1},"                                \
    "\"data\":{\"format\":\"synthetic_linear\"},"

/* --- helpers ---------------------------------------------------------------------------------- */

static pf_status parse_text(const char *text, pf_job_spec *spec, pf_error *err) {
    return pf_job_spec_parse(text, strlen(text), spec, err);
}

/* Parses text expecting failure; returns the status and leaves the detail in *err. */
static pf_status parse_fails(const char *text, pf_error *err) {
    pf_job_spec spec;
    pf_status st = parse_text(text, &spec, err);
    if (st == PF_OK)
        pf_job_spec_deinit(&spec);
    return st;
}

/* Whole file as a NUL-terminated string (pf_free it), trailing whitespace removed. */
static char *read_text(const char *path) {
    size_t n;
    char *buf = data_read(path, 4095, &n);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return buf;
}

static bool same_string(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Field-by-field equality of two parsed specs. */
static bool spec_equal(const pf_job_spec *a, const pf_job_spec *b) {
    bool eq =
        strcmp(a->name, b->name) == 0 &&
        memcmp(&a->replicas, &b->replicas, sizeof a->replicas) == 0 &&
        a->model.type == b->model.type && a->model.inputs == b->model.inputs &&
        a->model.outputs == b->model.outputs && a->model.n_hidden == b->model.n_hidden &&
        a->model.activation == b->model.activation && a->data.format == b->data.format &&
        a->data.n_train == b->data.n_train && a->data.n_test == b->data.n_test &&
        a->data.n == b->data.n && a->data.index_base == b->data.index_base &&
        memcmp(&a->data.w, &b->data.w, sizeof(double)) == 0 &&
        memcmp(&a->data.b, &b->data.b, sizeof(double)) == 0 &&
        memcmp(&a->data.noise, &b->data.noise, sizeof(double)) == 0 &&
        a->optimizer.type == b->optimizer.type &&
        a->optimizer.learning_rate == b->optimizer.learning_rate &&
        a->optimizer.momentum == b->optimizer.momentum &&
        a->optimizer.initial_accumulator_value == b->optimizer.initial_accumulator_value &&
        a->optimizer.beta1 == b->optimizer.beta1 && a->optimizer.beta2 == b->optimizer.beta2 &&
        a->optimizer.epsilon == b->optimizer.epsilon &&
        a->optimizer.decay.enabled == b->optimizer.decay.enabled &&
        a->optimizer.decay.decay_steps == b->optimizer.decay.decay_steps &&
        a->optimizer.decay.decay_rate == b->optimizer.decay.decay_rate &&
        a->optimizer.decay.staircase == b->optimizer.decay.staircase &&
        a->training.mode == b->training.mode && a->training.batch_size == b->training.batch_size &&
        a->training.max_steps == b->training.max_steps &&
        a->training.replicas_to_aggregate == b->training.replicas_to_aggregate &&
        a->training.seed == b->training.seed &&
        a->training.eval_every_steps == b->training.eval_every_steps &&
        a->training.on_nonfinite == b->training.on_nonfinite &&
        a->training.stall_timeout_secs == b->training.stall_timeout_secs &&
        a->training.nonfinite_max_rollbacks == b->training.nonfinite_max_rollbacks &&
        a->training.nonfinite_lr_scale == b->training.nonfinite_lr_scale &&
        a->training.prefetch == b->training.prefetch &&
        a->training.max_staleness == b->training.max_staleness &&
        a->training.epochs == b->training.epochs && a->data.streaming == b->data.streaming &&
        a->data.splits == b->data.splits && a->placement == b->placement &&
        a->partitioner.type == b->partitioner.type &&
        a->partitioner.num_shards == b->partitioner.num_shards &&
        a->partitioner.min_shard_bytes == b->partitioner.min_shard_bytes &&
        a->partitioner.max_shard_bytes == b->partitioner.max_shard_bytes &&
        a->partitioner.max_shards == b->partitioner.max_shards &&
        a->checkpoint.every_steps == b->checkpoint.every_steps &&
        a->checkpoint.every_secs == b->checkpoint.every_secs &&
        a->checkpoint.keep == b->checkpoint.keep &&
        a->run_policy.restart_policy == b->run_policy.restart_policy &&
        a->run_policy.backoff_limit == b->run_policy.backoff_limit &&
        a->run_policy.active_deadline_seconds == b->run_policy.active_deadline_seconds &&
        a->run_policy.priority == b->run_policy.priority &&
        a->replicas_per_worker == b->replicas_per_worker;
    for (int r = 0; eq && r < a->replicas_per_worker; r++)
        eq = a->devices[r].device == b->devices[r].device &&
             a->devices[r].index == b->devices[r].index;
    for (int i = 0; eq && i < a->model.n_hidden; i++)
        eq = a->model.hidden[i] == b->model.hidden[i];
    eq = eq && a->model.n_embeddings == b->model.n_embeddings;
    for (int i = 0; eq && i < a->model.n_embeddings; i++) {
        const pf_embedding_spec *x = &a->model.embeddings[i], *y = &b->model.embeddings[i];
        eq = strcmp(x->name, y->name) == 0 && x->vocab == y->vocab && x->dim == y->dim &&
             x->combiner == y->combiner && x->max_ids == y->max_ids && x->hash == y->hash;
    }
    for (int i = 0; eq && i < PF_MAX_DATA_FILES; i++)
        eq = same_string(a->data.train[i], b->data.train[i]) &&
             same_string(a->data.test[i], b->data.test[i]);
    return eq;
}

static bool is_zeroed(const pf_job_spec *spec) {
    static const pf_job_spec zero;
    return memcmp(spec, &zero, sizeof zero) == 0;
}

/* parse(to_json(a)) must succeed, equal a, and serialise to the same text. */
static void assert_round_trip(const pf_job_spec *a, const char *what) {
    pf_job_spec b;
    pf_error err;
    char *first = pf_job_spec_to_json(a);
    if (!first)
        fail_msg("%s: to_json failed", what);
    pf_status st = parse_text(first, &b, &err);
    if (st != PF_OK)
        fail_msg("%s: normalised form does not parse: %s at '%s'\n%s", what, err.message,
                 err.pointer, first);
    char *second = pf_job_spec_to_json(&b);
    assert_non_null(second);
    if (strcmp(first, second) != 0)
        fail_msg("%s: round trip changed the spec:\n%s\n%s", what, first, second);
    if (!spec_equal(a, &b))
        fail_msg("%s: round trip changed a field:\n%s", what, first);
    pf_free(first);
    pf_free(second);
    pf_job_spec_deinit(&b);
}

/* --- data files ------------------------------------------------------------------------------- */

static void test_valid_files(void **state) {
    (void)state;
    char *names[MAX_FILES];
    size_t n = data_files(SPEC_DIR "/valid", ".json", false, names, MAX_FILES);
    assert_true(n >= 6);
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        pf_job_spec spec;
        pf_error err;
        snprintf(path, sizeof path, "%s/valid/%s", SPEC_DIR, names[i]);
        pf_status st = pf_job_spec_load(path, &spec, &err);
        if (st != PF_OK)
            fail_msg("%s: %s: %s (pointer '%s')", names[i], pf_strerror(st), err.message,
                     err.pointer);
        assert_round_trip(&spec, names[i]);
        pf_job_spec_deinit(&spec);
        free(names[i]);
    }
    print_message("%zu valid spec files\n", n);
}

static void test_invalid_files(void **state) {
    (void)state;
    char *names[MAX_FILES];
    size_t n = data_files(SPEC_DIR "/invalid", ".json", false, names, MAX_FILES);
    assert_true(n >= 25);
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        pf_job_spec spec;
        pf_error err;
        snprintf(path, sizeof path, "%s/invalid/%s", SPEC_DIR, names[i]);
        pf_status st = pf_job_spec_load(path, &spec, &err);
        snprintf(path + strlen(path) - strlen(".json"), 16, ".pointer");
        char *want = read_text(path);
        if (st == PF_OK)
            fail_msg("%s: parsed, expected an error at '%s'", names[i], want);
        pf_status want_st = want[0] ? PF_ERR_SPEC : PF_ERR_FORMAT;
        if (st != want_st || strcmp(err.pointer, want) != 0 || err.message[0] == '\0')
            fail_msg("%s: got %s at '%s' (%s); expected %s at '%s'", names[i], pf_strerror(st),
                     err.pointer, err.message, pf_strerror(want_st), want);
        if (!is_zeroed(&spec))
            fail_msg("%s: a failed parse left data in the spec", names[i]);
        if (strchr(err.message, '\n'))
            fail_msg("%s: message spans lines: %s", names[i], err.message);
        pf_free(want);
        free(names[i]);
    }
    print_message("%zu invalid spec files\n", n);
}

/* --- values ----------------------------------------------------------------------------------- */

static void test_defaults(void **state) {
    (void)state;
    pf_job_spec s;
    pf_error err;
    assert_int_equal(parse_text(minimal, &s, &err), PF_OK);
    assert_string_equal(s.name, "m");
    assert_int_equal(s.replicas.ps, 1);
    assert_int_equal(s.replicas.worker, 1);
    assert_int_equal(s.replicas.chief, 0);
    assert_int_equal(s.replicas.evaluator, 0);
    assert_int_equal(s.model.type, PF_MODEL_LINEAR);
    assert_int_equal(s.model.inputs, 1);
    assert_int_equal(s.model.outputs, 1);
    assert_int_equal(s.model.n_hidden, 0);
    assert_int_equal(s.model.activation, PF_ACT_NONE);
    assert_int_equal(s.data.format, PF_DATA_SYNTHETIC_LINEAR);
    assert_int_equal(s.data.n_train, 0);
    assert_int_equal(s.data.n_test, 0);
    assert_null(s.data.train[0]);
    assert_true(s.data.w == 2.0);
    assert_true(s.data.b == 10.0);
    assert_true(s.data.noise == 0.1);
    assert_int_equal(s.data.n, 10000);
    assert_int_equal(s.optimizer.type, PF_OPT_SGD);
    assert_true(s.optimizer.learning_rate == 0.01);
    assert_true(s.optimizer.momentum == 0); /* fields of other optimizers stay zero */
    assert_true(s.optimizer.initial_accumulator_value == 0);
    assert_true(s.optimizer.beta1 == 0 && s.optimizer.beta2 == 0 && s.optimizer.epsilon == 0);
    assert_false(s.optimizer.decay.enabled);
    assert_int_equal(s.optimizer.decay.decay_steps, 0);
    assert_int_equal(s.training.mode, PF_MODE_ASYNC);
    assert_int_equal(s.training.batch_size, 100);
    assert_int_equal(s.training.max_steps, 1000);
    assert_int_equal(s.training.replicas_to_aggregate, 1);
    assert_int_equal(s.training.seed, 1);
    assert_int_equal(s.training.eval_every_steps, 0);
    assert_int_equal(s.training.on_nonfinite, PF_NONFINITE_ROLLBACK);
    assert_int_equal(s.training.stall_timeout_secs, 300);
    assert_int_equal(s.training.nonfinite_max_rollbacks, 3);
    assert_true(s.training.nonfinite_lr_scale == 1.0);
    assert_false(s.training.prefetch);
    assert_int_equal(s.training.max_staleness, -1); /* absent: unbounded, not written back */
    assert_int_equal(s.placement, PF_PLACE_ROUND_ROBIN);
    assert_int_equal(s.partitioner.type, PF_PART_NONE);
    assert_int_equal(s.partitioner.num_shards, 0);
    assert_int_equal(s.partitioner.max_shards, 0);
    assert_int_equal(s.checkpoint.every_steps, 0);
    assert_int_equal(s.checkpoint.every_secs, 600);
    assert_int_equal(s.checkpoint.keep, 5);
    assert_int_equal(s.run_policy.restart_policy, PF_RESTART_ON_FAILURE);
    assert_int_equal(s.run_policy.backoff_limit, 3);
    assert_int_equal(s.run_policy.active_deadline_seconds, 0);
    assert_int_equal(s.run_policy.priority, 0);
    assert_int_equal(s.replicas_per_worker, 1);
    assert_int_equal(s.devices[0].device, PF_DEVICE_CPU);

    char *json = pf_job_spec_to_json(&s);
    assert_non_null(json);
    assert_string_equal(
        json, "{\"name\":\"m\",\"replicas\":{\"ps\":1,\"worker\":1,\"chief\":0,\"evaluator\":0},"
              "\"model\":{\"type\":\"linear\",\"inputs\":1,\"outputs\":1},"
              "\"data\":{\"format\":\"synthetic_linear\",\"w\":2.0,\"b\":10.0,\"noise\":0.1,"
              "\"n\":10000},"
              "\"optimizer\":{\"type\":\"sgd\",\"learning_rate\":0.01},"
              "\"training\":{\"mode\":\"async\",\"batch_size\":100,\"max_steps\":1000,\"seed\":1,"
              "\"eval_every_steps\":0,\"on_nonfinite\":\"rollback\",\"stall_timeout_secs\":300,"
              "\"nonfinite_max_rollbacks\":3,\"nonfinite_lr_scale\":1.0,\"prefetch\":false},"
              "\"placement\":{\"strategy\":\"round_robin\",\"partitioner\":{\"type\":\"none\"}},"
              "\"checkpoint\":{\"every_steps\":0,\"every_secs\":600,\"keep\":5},"
              "\"run_policy\":{\"restart_policy\":\"OnFailure\",\"backoff_limit\":3,"
              "\"active_deadline_seconds\":0,\"priority\":0,\"preemptible\":true},"
              "\"replicas_per_worker\":1,\"device\":\"cpu\"}");
    pf_free(json);
    pf_job_spec_deinit(&s);
}

/* training.on_nonfinite and its two limits: the values given, and errors naming the field. */
static void test_nonfinite_fields(void **state) {
    (void)state;
    pf_job_spec s;
    pf_error err;
    const char *head = "{\"name\":\"x\",\"model\":{\"type\":\"linear\",\"inputs\":1},"
                       "\"data\":{\"format\":\"synthetic_linear\"},\"training\":";
    char text[512];
    snprintf(text, sizeof text,
             "%s{\"on_nonfinite\":\"fail\",\"nonfinite_max_rollbacks\":0,"
             "\"nonfinite_lr_scale\":0.25}}",
             head);
    assert_int_equal(parse_text(text, &s, &err), PF_OK);
    assert_int_equal(s.training.on_nonfinite, PF_NONFINITE_FAIL);
    assert_int_equal(s.training.nonfinite_max_rollbacks, 0);
    assert_true(s.training.nonfinite_lr_scale == 0.25);
    pf_job_spec_deinit(&s);
    static const struct {
        const char *training, *message;
    } bad[] = {
        {"{\"nonfinite_lr_scale\":0}", "/training/nonfinite_lr_scale: must be in (0, 1], got 0"},
        {"{\"nonfinite_lr_scale\":2}", "/training/nonfinite_lr_scale: must be in (0, 1], got 2"},
        {"{\"nonfinite_max_rollbacks\":-1}",
         "/training/nonfinite_max_rollbacks: must be between 0 and 1000, got -1"},
        {"{\"nonfinite_max_rollbacks\":1001}",
         "/training/nonfinite_max_rollbacks: must be between 0 and 1000, got 1001"},
        {"{\"on_nonfinite\":\"retry\"}", "/training/on_nonfinite"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "%s%s}", head, bad[i].training);
        assert_int_equal(parse_text(text, &s, &err), PF_ERR_SPEC);
        if (!strstr(err.message, bad[i].message))
            fail_msg("%s: message '%s' lacks '%s'", bad[i].training, err.message, bad[i].message);
    }
}

static void test_type_dependent_defaults(void **state) {
    (void)state;
    pf_job_spec s;
    pf_error err;
    assert_int_equal(parse_text("{\"name\":\"x\",\"replicas\":{\"worker\":3},"
                                "\"model\":{\"type\":\"mlp\",\"inputs\":2,\"hidden\":[4],"
                                "\"outputs\":2},\"data\":{\"format\":\"csv\",\"train\":[\"t\"]},"
                                "\"optimizer\":{\"type\":\"adam\",\"decay\":{\"decay_steps\":5,"
                                "\"decay_rate\":0.5}},\"training\":{\"mode\":\"sync\"},"
                                "\"placement\":{\"partitioner\":{\"type\":\"min_size\"}}}",
                                &s, &err),
                     PF_OK);
    assert_int_equal(s.model.activation, PF_ACT_RELU);
    assert_true(s.optimizer.beta1 == 0.9 && s.optimizer.beta2 == 0.999);
    assert_true(s.optimizer.epsilon == 1e-7);
    assert_true(s.optimizer.decay.enabled);
    assert_false(s.optimizer.decay.staircase);
    assert_int_equal(s.training.replicas_to_aggregate, 3);
    assert_int_equal(s.partitioner.min_shard_bytes, 262144);
    assert_int_equal(s.partitioner.max_shards, 1);
    char *json = pf_job_spec_to_json(&s);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"decay\":{\"type\":\"exponential\",\"decay_steps\":5,"
                                 "\"decay_rate\":0.5,\"staircase\":false}"));
    assert_non_null(strstr(json, "\"replicas_to_aggregate\":3,"));
    pf_free(json);
    pf_job_spec_deinit(&s);

    assert_int_equal(parse_text("{\"name\":\"x\",\"model\":{\"type\":\"softmax\",\"inputs\":2,"
                                "\"outputs\":2},\"data\":{\"format\":\"csv\",\"train\":[\"t\"]},"
                                "\"optimizer\":{\"type\":\"momentum\"},\"placement\":{"
                                "\"partitioner\":{\"type\":\"max_size\",\"max_shard_bytes\":9}}}",
                                &s, &err),
                     PF_OK);
    assert_true(s.optimizer.momentum == 0.9);
    assert_int_equal(s.partitioner.max_shards, 0);
    assert_int_equal(s.partitioner.min_shard_bytes, 0);
    pf_job_spec_deinit(&s);

    assert_int_equal(parse_text("{\"name\":\"x\",\"model\":{\"type\":\"softmax\",\"inputs\":2,"
                                "\"outputs\":2},\"data\":{\"format\":\"csv\",\"train\":[\"t\"]},"
                                "\"optimizer\":{\"type\":\"adagrad\"}}",
                                &s, &err),
                     PF_OK);
    assert_true(s.optimizer.initial_accumulator_value == 0.1);
    pf_job_spec_deinit(&s);
}

static void test_design_example(void **state) {
    (void)state;
    pf_job_spec s;
    pf_error err;
    assert_int_equal(parse_text(design_example, &s, &err), PF_OK);
    assert_string_equal(s.name, "fmnist-mlp");
    assert_int_equal(s.replicas.ps, 2);
    assert_int_equal(s.replicas.worker, 2);
    assert_int_equal(s.model.type, PF_MODEL_MLP);
    assert_int_equal(s.model.inputs, 784);
    assert_int_equal(s.model.n_hidden, 2);
    assert_int_equal(s.model.hidden[0], 256);
    assert_int_equal(s.model.hidden[1], 256);
    assert_int_equal(s.model.outputs, 10);
    assert_int_equal(s.model.activation, PF_ACT_RELU);
    assert_int_equal(s.data.format, PF_DATA_IDX);
    assert_int_equal(s.data.n_train, 2);
    assert_string_equal(s.data.train[0],
                        "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
    assert_string_equal(s.data.train[1],
                        "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz");
    assert_int_equal(s.data.n_test, 2);
    assert_string_equal(s.data.test[0],
                        "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
    assert_string_equal(s.data.test[1],
                        "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
    assert_int_equal(s.optimizer.type, PF_OPT_ADAGRAD);
    assert_true(s.optimizer.learning_rate == 0.01);
    assert_true(s.optimizer.initial_accumulator_value == 0.1);
    assert_int_equal(s.training.mode, PF_MODE_SYNC);
    assert_int_equal(s.training.batch_size, 100);
    assert_int_equal(s.training.max_steps, 2000);
    assert_int_equal(s.training.replicas_to_aggregate, 2);
    assert_int_equal(s.training.seed, 1);
    assert_int_equal(s.training.eval_every_steps, 200);
    assert_int_equal(s.placement, PF_PLACE_ROUND_ROBIN);
    assert_int_equal(s.partitioner.type, PF_PART_NONE);
    assert_int_equal(s.checkpoint.every_steps, 500);
    assert_int_equal(s.checkpoint.every_secs, 600);
    assert_int_equal(s.checkpoint.keep, 5);
    assert_int_equal(s.run_policy.restart_policy, PF_RESTART_ON_FAILURE);
    assert_int_equal(s.run_policy.backoff_limit, 3);
    assert_int_equal(s.run_policy.active_deadline_seconds, 0);
    assert_int_equal(s.run_policy.priority, 0);
    assert_int_equal(s.replicas_per_worker, 1);
    assert_int_equal(s.devices[0].device, PF_DEVICE_CPU);

    /* The normalised form is the example itself (plus the adagrad default, the streaming
     * defaults and replicas_per_worker), in its order. */
    char *json = pf_job_spec_to_json(&s);
    assert_non_null(json);
    assert_string_equal(
        json,
        "{\"name\":\"fmnist-mlp\",\"replicas\":{\"ps\":2,\"worker\":2,\"chief\":0,\"evaluator\":0},"
        "\"model\":{\"type\":\"mlp\",\"inputs\":784,\"hidden\":[256,256],\"outputs\":10,"
        "\"activation\":\"relu\"},"
        "\"data\":{\"format\":\"idx\","
        "\"train\":[\"/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz\","
        "\"/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz\"],"
        "\"test\":[\"/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz\","
        "\"/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz\"],"
        "\"streaming\":false,\"split_mb\":64,\"splits\":\"static\"},"
        "\"optimizer\":{\"type\":\"adagrad\",\"learning_rate\":0.01,"
        "\"initial_accumulator_value\":0.1},"
        "\"training\":{\"mode\":\"sync\",\"batch_size\":100,\"max_steps\":2000,"
        "\"replicas_to_aggregate\":2,\"seed\":1,\"eval_every_steps\":200,"
        "\"on_nonfinite\":\"rollback\",\"stall_timeout_secs\":300,"
        "\"nonfinite_max_rollbacks\":3,\"nonfinite_lr_scale\":1.0},"
        "\"placement\":{\"strategy\":\"round_robin\",\"partitioner\":{\"type\":\"none\"}},"
        "\"checkpoint\":{\"every_steps\":500,\"every_secs\":600,\"keep\":5},"
        "\"run_policy\":{\"restart_policy\":\"OnFailure\",\"backoff_limit\":3,"
        "\"active_deadline_seconds\":0,\"priority\":0,\"preemptible\":true},"
        "\"replicas_per_worker\":1,\"device\":\"cpu\"}");
    pf_free(json);
    pf_job_spec_deinit(&s);
}

static void test_reals_round_trip(void **state) {
    (void)state;
    static const double values[] = {0.1,
                                    0.30000000000000004,
                                    1.0 / 3,
                                    -2.5,
                                    1e-300,
                                    5e-324,
                                    1.7976931348623157e308,
                                    123456789.125,
                                    -0.0,
                                    1e16,
                                    12345678901234567e3,
                                    0.999,
                                    100};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char number[40], text[256];
        pf_job_spec s;
        pf_error err;
        /* Written as a JSON real: "-0" would read back as the integer 0. */
        snprintf(number, sizeof number, "%.17g", values[i]);
        if (!strpbrk(number, ".e"))
            strcat(number, ".0");
        snprintf(text, sizeof text,
                 "{\"name\":\"r\",\"model\":{\"type\":\"linear\",\"inputs\":1},"
                 "\"data\":{\"format\":\"synthetic_linear\",\"w\":%s}}",
                 number);
        assert_int_equal(parse_text(text, &s, &err), PF_OK);
        assert_memory_equal(&s.data.w, &values[i], sizeof(double));
        assert_round_trip(&s, text);
        pf_job_spec_deinit(&s);
    }
}

static void test_error_details(void **state) {
    (void)state;
    pf_error err;

    assert_int_equal(parse_fails("{\"name\": \"a\",\n  \"model\": }", &err), PF_ERR_FORMAT);
    assert_string_equal(err.pointer, "");
    assert_non_null(strstr(err.message, "line 2"));
    assert_non_null(strstr(err.message, "column"));
    assert_true(err.offset > 0 && err.offset <= 26);

    assert_int_equal(parse_fails(BASE "\"training\":{\"foo\":1}}", &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/training/foo");
    assert_non_null(strstr(err.message, "unknown field 'foo'"));

    assert_int_equal(parse_fails(BASE "\"training\":{\"batch_size\":\"100\"}}", &err), PF_ERR_SPEC);
    assert_string_equal(err.message, "/training/batch_size: expected an integer, got string");

    assert_int_equal(parse_fails(BASE "\"device\":\"tpu\"}", &err), PF_ERR_SPEC);
    assert_non_null(strstr(err.message, "cpu, cuda, auto, or cuda:N for GPU N"));

    assert_int_equal(parse_fails("{\"name\":\"a\",\"model\":{\"type\":\"mlp\",\"inputs\":1,"
                                 "\"hidden\":[1],\"outputs\":2,\"activation\":\"elu\"}}",
                                 &err),
                     PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/model/activation");
    assert_non_null(strstr(err.message, "relu, tanh, sigmoid"));
    assert_null(strstr(err.message, "none"));

    assert_int_equal(parse_fails(BASE "\"optimizer\":{\"momentum\":0.5}}", &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/optimizer/momentum");
    assert_non_null(strstr(err.message, "momentum"));
    assert_non_null(strstr(err.message, "sgd"));

    assert_int_equal(parse_fails(BASE "\"placement\":{\"partitioner\":{\"type\":"
                                      "\"fixed_shards\",\"max_shards\":2}}}",
                                 &err),
                     PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/placement/partitioner/max_shards");
    assert_non_null(strstr(err.message, "min_size or max_size"));

    /* Unknown fields come before everything else, and their names are shown safely. */
    assert_int_equal(parse_fails("{\"name\":\"BAD\",\"x\\ny\":1}", &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/x\ny");
    assert_null(strchr(err.message, '\n'));

    /* A long key is cut in the pointer without splitting a UTF-8 character. */
    char text[512] = "{\"";
    for (int i = 0; i < 100; i++)
        strcat(text, "\xc3\xa9"); /* U+00E9, two bytes */
    strcat(text, "\":1}");
    assert_int_equal(parse_fails(text, &err), PF_ERR_SPEC);
    assert_true(strlen(err.pointer) < sizeof err.pointer);
    assert_int_equal(strlen(err.pointer) % 2, 1); /* '/' then whole two-byte characters */
    json_t *probe = json_string(err.pointer);     /* valid UTF-8 */
    assert_non_null(probe);
    json_decref(probe);
    probe = json_string(err.message);
    assert_non_null(probe);
    json_decref(probe);
}

static void test_nesting_limit(void **state) {
    (void)state;
    char text[256];
    pf_error err;
    for (int depth = 31; depth <= 33; depth++) {
        /* One level for the spec object, depth - 1 arrays under an unknown key. */
        int n = snprintf(text, sizeof text, "{\"x\":");
        for (int i = 1; i < depth; i++)
            text[n++] = '[';
        for (int i = 1; i < depth; i++)
            text[n++] = ']';
        snprintf(text + n, sizeof text - (size_t)n, "}");
        pf_status st = parse_fails(text, &err);
        if (depth <= 32) {
            assert_int_equal(st, PF_ERR_SPEC);
            assert_string_equal(err.pointer, "/x");
        } else {
            assert_int_equal(st, PF_ERR_FORMAT);
            assert_int_equal(err.offset, 5 + 31);
        }
    }
    /* Brackets inside strings do not nest. */
    memset(text, 0, sizeof text);
    strcpy(text, "{\"name\":\"");
    memset(text + strlen(text), '[', 40);
    strcat(text, "\"}");
    assert_int_equal(parse_fails(text, &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/name");
}

static void test_load_errors(void **state) {
    (void)state;
    pf_job_spec s;
    pf_error err;
    assert_int_equal(pf_job_spec_load("/nonexistent/psflow/spec.json", &s, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, "/nonexistent/psflow/spec.json"));
    assert_non_null(strstr(err.message, "No such file"));
    assert_true(is_zeroed(&s));

    assert_int_equal(pf_job_spec_load(SPEC_DIR, &s, &err), PF_ERR_IO);

    /* A file over 1 MiB is refused even when it is valid JSON. */
    char path[] = "/tmp/psflow-test-spec-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("{\"name\":\"big\",\"model\":{\"type\":\"linear\",\"inputs\":1},"
          "\"data\":{\"format\":\"synthetic_linear\"}}",
          f);
    for (int i = 0; i < (1 << 20); i++)
        fputc(' ', f);
    fclose(f);
    assert_int_equal(pf_job_spec_load(path, &s, &err), PF_ERR_FORMAT);
    assert_true(truncate(path, 1 << 20) == 0);
    assert_int_equal(pf_job_spec_load(path, &s, &err), PF_OK);
    assert_string_equal(s.name, "big");
    pf_job_spec_deinit(&s);
    unlink(path);
}

static void test_copy_and_names(void **state) {
    (void)state;
    pf_job_spec a, b;
    pf_error err;
    assert_int_equal(parse_text(design_example, &a, &err), PF_OK);
    assert_int_equal(pf_job_spec_copy(&b, &a), PF_OK);
    assert_true(spec_equal(&a, &b));
    assert_ptr_not_equal(a.data.train[0], b.data.train[0]);
    pf_job_spec_deinit(&a);
    assert_true(is_zeroed(&a));
    assert_string_equal(b.data.test[1],
                        "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
    pf_job_spec_deinit(&b);
    pf_job_spec_deinit(&b); /* safe on a zeroed spec */

    assert_string_equal(pf_model_type_name(PF_MODEL_SOFTMAX), "softmax");
    assert_string_equal(pf_activation_name(PF_ACT_SIGMOID), "sigmoid");
    assert_string_equal(pf_activation_name(PF_ACT_NONE), "none");
    assert_string_equal(pf_optimizer_type_name(PF_OPT_ADAGRAD), "adagrad");
    assert_string_equal(pf_device_name(PF_DEVICE_CUDA), "cuda");
    assert_string_equal(pf_device_name((pf_device)42), "unknown");
}

/* "device": "cuda:N" picks GPU N; "cuda:0" is "cuda"; the normalised form writes "cuda:N"
 * back for N > 0. pf_device_parse is the same grammar for command lines. */
static void test_device_forms(void **state) {
    (void)state;
    static const struct {
        const char *text;
        pf_device device;
        int index;
        const char *normal;
    } good[] = {
        {"cpu", PF_DEVICE_CPU, 0, "cpu"},
        {"auto", PF_DEVICE_AUTO, 0, "auto"},
        {"cuda", PF_DEVICE_CUDA, 0, "cuda"},
        {"cuda:0", PF_DEVICE_CUDA, 0, "cuda"},
        {"cuda:7", PF_DEVICE_CUDA, 7, "cuda:7"},
        {"cuda:10", PF_DEVICE_CUDA, 10, "cuda:10"},
        {"cuda:255", PF_DEVICE_CUDA, 255, "cuda:255"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        pf_device d;
        int index = -1;
        assert_int_equal(pf_device_parse(good[i].text, &d, &index), PF_OK);
        assert_int_equal(d, good[i].device);
        assert_int_equal(index, good[i].index);

        char text[256], want[64];
        snprintf(text, sizeof text, BASE "\"device\":\"%s\"}", good[i].text);
        pf_job_spec s;
        pf_error err;
        assert_int_equal(parse_text(text, &s, &err), PF_OK);
        assert_int_equal(s.replicas_per_worker, 1);
        assert_int_equal(s.devices[0].device, good[i].device);
        assert_int_equal(s.devices[0].index, good[i].index);
        char *json = pf_job_spec_to_json(&s);
        assert_non_null(json);
        snprintf(want, sizeof want, "\"device\":\"%s\"}", good[i].normal);
        if (!strstr(json, want))
            fail_msg("%s normalises to %s, want %s", good[i].text, json, want);
        assert_round_trip(&s, good[i].text);
        pf_free(json);
        pf_job_spec_deinit(&s);
    }
    static const char *const bad[] = {"cuda:",    "cuda:01",  "cuda:-1",   "cuda:+1", "cuda: 1",
                                      "cuda:1 ",  "cuda:256", "cuda:1000", "cuda:1x", "CUDA",
                                      "cuda:0:0", "auto:0",   "cpu:0",     "",        "gpu:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pf_device d = PF_DEVICE_AUTO;
        int index = -1;
        if (pf_device_parse(bad[i], &d, &index) != PF_ERR_SPEC)
            fail_msg("pf_device_parse accepted '%s'", bad[i]);
        assert_int_equal(d, PF_DEVICE_CPU);
        assert_int_equal(index, 0);
        char text[256];
        pf_error err;
        snprintf(text, sizeof text, BASE "\"device\":\"%s\"}", bad[i]);
        assert_int_equal(parse_fails(text, &err), PF_ERR_SPEC);
        assert_string_equal(err.pointer, "/device");
        bool cuda_n = strncmp(bad[i], "cuda:", 5) == 0;
        assert_non_null(strstr(err.message, cuda_n ? "cuda:N takes a GPU number N from 0 to 255"
                                                   : "expected one of cpu, cuda, auto, or cuda:N"));
    }
    pf_device d;
    int index;
    assert_int_equal(pf_device_parse(NULL, &d, &index), PF_ERR_SPEC);
    /* A spec built in code with an index on a device that has none cannot be written. */
    pf_job_spec s;
    pf_error err;
    assert_int_equal(parse_text(BASE "\"device\":\"cpu\"}", &s, &err), PF_OK);
    s.devices[0].index = 3;
    assert_null(pf_job_spec_to_json(&s));
    pf_job_spec_deinit(&s);
}

/* In-graph replicas: "replicas_per_worker": K runs K replicas on one device that can hold
 * them (cpu), a "device" list names one device per replica (all cpu, or distinct GPUs), and
 * the two agree. The normalised form writes K, and one device string when every replica
 * has the same device, else the list. */
static void test_replica_forms(void **state) {
    (void)state;
    static const struct {
        const char *fields; /* the spec's last fields, after BASE */
        int k;
        pf_device device; /* of every replica */
        int index[4];
        const char *normal; /* the end of the normalised form */
    } good[] = {
        {"\"device\":\"cpu\"}",
         1,
         PF_DEVICE_CPU,
         {0},
         "\"replicas_per_worker\":1,\"device\":\"cpu\"}"},
        {"\"replicas_per_worker\":2}",
         2,
         PF_DEVICE_CPU,
         {0},
         "\"replicas_per_worker\":2,\"device\":\"cpu\"}"},
        {"\"replicas_per_worker\":16,\"device\":\"cpu\"}",
         16,
         PF_DEVICE_CPU,
         {0},
         "\"replicas_per_worker\":16,\"device\":\"cpu\"}"},
        {"\"device\":[\"cpu\",\"cpu\",\"cpu\"]}",
         3,
         PF_DEVICE_CPU,
         {0},
         "\"replicas_per_worker\":3,\"device\":\"cpu\"}"},
        {"\"device\":[\"cuda:1\"]}",
         1,
         PF_DEVICE_CUDA,
         {1},
         "\"replicas_per_worker\":1,\"device\":\"cuda:1\"}"},
        {"\"device\":[\"cuda:0\",\"cuda:1\"]}",
         2,
         PF_DEVICE_CUDA,
         {0, 1},
         "\"replicas_per_worker\":2,\"device\":[\"cuda\",\"cuda:1\"]}"},
        {"\"replicas_per_worker\":4,\"device\":[\"cuda:3\",\"cuda\",\"cuda:255\",\"cuda:7\"]}",
         4,
         PF_DEVICE_CUDA,
         {3, 0, 255, 7},
         "\"replicas_per_worker\":4,\"device\":[\"cuda:3\",\"cuda\",\"cuda:255\",\"cuda:7\"]}"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, BASE "%s", good[i].fields);
        pf_job_spec s;
        pf_error err;
        if (parse_text(text, &s, &err) != PF_OK)
            fail_msg("%s: %s", good[i].fields, err.message);
        assert_int_equal(s.replicas_per_worker, good[i].k);
        for (int r = 0; r < good[i].k; r++) {
            assert_int_equal(s.devices[r].device, good[i].device);
            assert_int_equal(s.devices[r].index, r < 4 ? good[i].index[r] : 0);
        }
        char *json = pf_job_spec_to_json(&s);
        assert_non_null(json);
        size_t len = strlen(json), want = strlen(good[i].normal);
        if (len < want || strcmp(json + len - want, good[i].normal) != 0)
            fail_msg("%s normalises to %s, want the end %s", good[i].fields, json, good[i].normal);
        assert_round_trip(&s, good[i].fields);
        pf_free(json);
        pf_job_spec_deinit(&s);
    }

    static const struct {
        const char *fields;
        const char *pointer;
        const char *message; /* a part of it */
    } bad[] = {
        {"\"replicas_per_worker\":0}", "/replicas_per_worker", "between 1 and 16, got 0"},
        {"\"replicas_per_worker\":17}", "/replicas_per_worker", "between 1 and 16, got 17"},
        {"\"replicas_per_worker\":\"2\"}", "/replicas_per_worker", "expected an integer"},
        {"\"replicas_per_worker\":2,\"device\":\"cuda\"}", "/device",
         "one device 'cuda' for 2 replicas (replicas_per_worker): list one GPU per replica"},
        {"\"replicas_per_worker\":2,\"device\":\"auto\"}", "/device", "one device 'auto'"},
        {"\"device\":[]}", "/device", "expected 1 to 16 devices, one per replica, got 0"},
        {"\"device\":[\"cpu\",\"cpu\",\"cpu\",\"cpu\",\"cpu\",\"cpu\",\"cpu\",\"cpu\",\"cpu\","
         "\"cpu\",\"cpu\",\"cpu\",\"cpu\",\"cpu\",\"cpu\",\"cpu\",\"cpu\"]}",
         "/device", "got 17"},
        {"\"device\":{}}", "/device", "expected a string or an array of strings, got object"},
        {"\"device\":[\"cpu\",\"cuda\"]}", "/device/1",
         "cuda after cpu: a device list is all cpu or all GPUs"},
        {"\"device\":[\"cuda:2\",\"cpu\"]}", "/device/1", "cpu after cuda"},
        {"\"device\":[\"cuda:1\",\"cuda:2\",\"cuda:1\"]}", "/device/2",
         "cuda:1 is listed twice (also at /device/0): one GPU per replica"},
        {"\"device\":[\"cuda\",\"cuda:0\"]}", "/device/1", "cuda:0 is listed twice"},
        {"\"device\":[\"auto\"]}", "/device/0", "auto is not allowed in a device list"},
        {"\"device\":[\"cpu\",3]}", "/device/1", "expected a string, got integer"},
        {"\"device\":[\"cuda\",\"cuda:256\"]}", "/device/1", "cuda:N takes a GPU number N"},
        {"\"device\":[\"cpu\",\"tpu\"]}", "/device/1", "unknown value 'tpu'"},
        {"\"replicas_per_worker\":3,\"device\":[\"cpu\",\"cpu\"]}", "/replicas_per_worker",
         "3, but /device lists 2 devices (one per replica)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, BASE "%s", bad[i].fields);
        pf_error err;
        assert_int_equal(parse_fails(text, &err), PF_ERR_SPEC);
        if (strcmp(err.pointer, bad[i].pointer) != 0 || !strstr(err.message, bad[i].message))
            fail_msg("%s: got '%s' at %s, want '%s' at %s", bad[i].fields, err.message, err.pointer,
                     bad[i].message, bad[i].pointer);
        assert_null(strchr(err.message, '\n'));
    }

    /* Specs built in code that no parse gives cannot be written. */
    pf_job_spec s;
    pf_error err;
    assert_int_equal(parse_text(BASE "\"device\":[\"cuda:0\",\"cuda:1\"]}", &s, &err), PF_OK);
    s.devices[1].index = 0; /* one GPU for two replicas */
    assert_null(pf_job_spec_to_json(&s));
    s.replicas_per_worker = 0;
    assert_null(pf_job_spec_to_json(&s));
    s.replicas_per_worker = PF_MAX_REPLICAS_PER_WORKER + 1;
    assert_null(pf_job_spec_to_json(&s));
    pf_job_spec_deinit(&s);
}

/* --- failing allocations ---------------------------------------------------------------------- */

/* Parse, serialise and copy with allocation k failing (and every one after it). */
static void run_with_budget(long k) {
    pf_job_spec s, c;
    pf_error err;
    use_counting(k);
    pf_status st = parse_text(design_example, &s, &err);
    if (st != PF_OK && st != PF_ERR_NOMEM)
        fail_msg("budget %ld: parse gave %s (%s)", k, pf_strerror(st), err.message);
    if (st != PF_OK) {
        assert_true(is_zeroed(&s));
        return;
    }
    char *json = pf_job_spec_to_json(&s);
    pf_free(json);
    st = pf_job_spec_copy(&c, &s);
    assert_true(st == PF_OK || st == PF_ERR_NOMEM);
    if (st != PF_OK)
        assert_true(is_zeroed(&c));
    pf_job_spec_deinit(&c);
    pf_job_spec_deinit(&s);
}

static void test_failing_allocator(void **state) {
    (void)state;
    long k = 0;
    for (;; k++) {
        run_with_budget(k);
        if (alloc_refused == 0)
            break; /* k allocations were enough for everything */
        assert_true(k < 1000);
    }
    use_libc();
    print_message("pf allocator: failed each of the first %ld allocations\n", k);
}

/* jansson's own allocations while serialising. (Its 2.14 lexer drops bytes when its buffer
 * cannot grow, so failing allocations during parsing test jansson, not this module.) */
static void test_failing_jansson_allocator(void **state) {
    (void)state;
    pf_job_spec s;
    pf_error err;
    assert_int_equal(parse_text(design_example, &s, &err), PF_OK);
    char *want = pf_job_spec_to_json(&s);
    assert_non_null(want);
    json_set_alloc_funcs(counting_malloc, counting_free);
    long k = 0;
    for (;; k++) {
        counting_budget(k);
        char *json = pf_job_spec_to_json(&s);
        if (json)
            assert_string_equal(json, want);
        pf_free(json);
        if (alloc_refused == 0)
            break;
        assert_true(k < 10000);
    }
    json_set_alloc_funcs(malloc, free);
    counting_budget(-1);
    print_message("jansson allocator: failed each of the first %ld allocations\n", k);
    pf_free(want);
    pf_job_spec_deinit(&s);
}

/* model.embeddings: fields and defaults, the normalised form (no inputs, every default
 * written, "auto" as "cpu"), and the messages of the cross-field rules. */
static void test_embedding_forms(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_error err;
    const char *text =
        "{\"name\":\"emb\",\"model\":{\"type\":\"mlp\",\"hidden\":[8],\"outputs\":3,"
        "\"embeddings\":[{\"name\":\"user\",\"vocab\":1000,\"dim\":8,\"combiner\":\"mean\","
        "\"max_ids\":3},{\"name\":\"item-id\",\"vocab\":16777216,\"dim\":4}]},"
        "\"data\":{\"format\":\"libsvm\",\"train\":[\"a.svm\"]},\"device\":\"auto\"}";
    assert_int_equal(parse_text(text, &spec, &err), PF_OK);
    assert_int_equal(spec.model.inputs, 0);
    assert_int_equal(spec.model.n_embeddings, 2);
    const pf_embedding_spec *a = &spec.model.embeddings[0], *b = &spec.model.embeddings[1];
    assert_string_equal(a->name, "user");
    assert_int_equal(a->vocab, 1000);
    assert_int_equal(a->dim, 8);
    assert_int_equal(a->combiner, PF_COMBINE_MEAN);
    assert_int_equal(a->max_ids, 3);
    assert_string_equal(b->name, "item-id");
    assert_int_equal(b->vocab, PF_MAX_VOCAB);
    assert_int_equal(b->combiner, PF_COMBINE_SUM);
    assert_int_equal(b->max_ids, 1);
    assert_int_equal(spec.devices[0].device, PF_DEVICE_CPU);
    char *json = pf_job_spec_to_json(&spec);
    assert_non_null(json);
    assert_null(strstr(json, "\"inputs\""));
    assert_non_null(strstr(json, "\"embeddings\":[{\"name\":\"user\",\"vocab\":1000,\"dim\":8,"
                                 "\"combiner\":\"mean\",\"max_ids\":3,\"hash\":false},{\"name\":"
                                 "\"item-id\",\"vocab\":16777216,\"dim\":4,\"combiner\":\"sum\","
                                 "\"max_ids\":1,\"hash\":false}]"));
    assert_non_null(strstr(json, "\"device\":\"cpu\""));
    assert_round_trip(&spec, "embeddings");
    pf_free(json);
    pf_job_spec_deinit(&spec);
    assert_string_equal(pf_combiner_name(PF_COMBINE_SQRTN), "sqrtn");

    static const struct {
        const char *model; /* model.embeddings' value */
        const char *pointer;
        const char *words; /* in the message */
    } bad[] = {
        {"[{\"name\":\"a\",\"vocab\":2,\"dim\":1},{\"name\":\"a\",\"vocab\":2,\"dim\":1}]",
         "/model/embeddings/1/name", "'a' is also embedding 0"},
        {"[{\"name\":\"abcdefghijklmnopqrstu\",\"vocab\":2,\"dim\":1}]", "/model/embeddings/0/name",
         "longer than 20 characters"},
        {"[{\"name\":\"a\",\"dim\":1}]", "/model/embeddings/0/vocab",
         "missing required field 'vocab' in /model/embeddings/0"},
        {"[{\"name\":\"a\",\"vocab\":2,\"dim\":1},7]", "/model/embeddings/1",
         "expected an object, got integer"},
        {"[]", "/model/embeddings", "expected 1 to 32 entries, got 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char doc[512];
        snprintf(doc, sizeof doc,
                 "{\"name\":\"emb\",\"model\":{\"type\":\"softmax\",\"outputs\":2,"
                 "\"embeddings\":%s},\"data\":{\"format\":\"libsvm\",\"train\":[\"a\"]}}",
                 bad[i].model);
        assert_int_equal(parse_fails(doc, &err), PF_ERR_SPEC);
        assert_string_equal(err.pointer, bad[i].pointer);
        if (!strstr(err.message, bad[i].words))
            fail_msg("%s: message '%s' lacks '%s'", bad[i].model, err.message, bad[i].words);
    }
    assert_int_equal(parse_fails("{\"name\":\"emb\",\"model\":{\"type\":\"softmax\",\"outputs\":2},"
                                 "\"data\":{\"format\":\"libsvm\",\"train\":[\"a\"]}}",
                                 &err),
                     PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/model/inputs");
    assert_non_null(strstr(err.message, "missing required field 'inputs'"));
}

/* data.splits and training.epochs: dynamic splits and epochs are kept and written back, absent
 * they are static and 0 (not written); each refusal names its field and what to do. */
static void test_dynamic_splits(void **state) {
    (void)state;
#define LEASE_SPEC(data, training)                                                                 \
    "{\"name\":\"l\",\"replicas\":{\"ps\":1,\"worker\":2},\"model\":{\"type\":\"softmax\","        \
    "\"outputs\":2,\"inputs\":13},\"data\":{\"format\":\"criteo\",\"train\":[\"d\"],"              \
    "\"test\":[\"t\"]" data "},\"training\":{\"mode\":\"" training "}}"
    pf_job_spec s;
    pf_error err;
    assert_int_equal(
        parse_text(LEASE_SPEC(",\"streaming\":true,\"splits\":\"dynamic\"", "async\",\"epochs\":3"),
                   &s, &err),
        PF_OK);
    assert_int_equal(s.data.splits, PF_SPLITS_DYNAMIC);
    assert_int_equal(s.training.epochs, 3);
    char *json = pf_job_spec_to_json(&s);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"splits\":\"dynamic\""));
    assert_non_null(strstr(json, "\"epochs\":3"));
    assert_round_trip(&s, "dynamic splits");
    pf_free(json);
    pf_job_spec_deinit(&s);

    assert_int_equal(parse_text(LEASE_SPEC(",\"streaming\":true", "async\""), &s, &err), PF_OK);
    assert_int_equal(s.data.splits, PF_SPLITS_STATIC);
    assert_int_equal(s.training.epochs, 0);
    json = pf_job_spec_to_json(&s);
    assert_non_null(json);
    assert_null(strstr(json, "\"epochs\""));
    assert_null(strstr(json, "\"dynamic\""));
    assert_round_trip(&s, "static splits");
    pf_free(json);
    pf_job_spec_deinit(&s);

    static const struct {
        const char *text;
        const char *pointer;
        const char *message; /* a part of it */
    } bad[] = {
        {LEASE_SPEC(",\"splits\":\"dynamic\"", "async\""), "/data/splits", "set data.streaming"},
        {LEASE_SPEC(",\"streaming\":true,\"splits\":\"dynamic\"", "sync\""), "/data/splits",
         "training.mode async"},
        {LEASE_SPEC(",\"streaming\":true,\"splits\":\"dynamic\"", "async\",\"prefetch\":true"),
         "/training/prefetch", "cannot be combined with dynamic splits"},
        {LEASE_SPEC(",\"streaming\":true", "async\",\"epochs\":2"), "/training/epochs",
         "set data.streaming and data.splits dynamic"},
        {LEASE_SPEC("", "async\",\"epochs\":2"), "/training/epochs", "data.splits dynamic"},
        {LEASE_SPEC(",\"streaming\":true,\"splits\":\"dynamic\"", "async\",\"epochs\":0"),
         "/training/epochs", "got 0"},
        {LEASE_SPEC(",\"streaming\":true,\"splits\":\"dynamic\"", "async\",\"epochs\":1000001"),
         "/training/epochs", "got 1000001"},
        {LEASE_SPEC(",\"streaming\":true,\"splits\":\"elastic\"", "async\""), "/data/splits",
         "'elastic'"},
    };
#undef LEASE_SPEC
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse_fails(bad[i].text, &err), PF_ERR_SPEC);
        if (strcmp(err.pointer, bad[i].pointer) != 0 || !strstr(err.message, bad[i].message))
            fail_msg("case %zu: got '%s' at %s, want '%s' at %s", i, err.message, err.pointer,
                     bad[i].message, bad[i].pointer);
    }
}

/* run_policy.queue: a name, written back; "default" and an absent queue are one spec, which
 * the normalised form leaves without it; a bad name is refused at its pointer. */
static void test_queue_field(void **state) {
    (void)state;
#define QUEUE_SPEC(policy)                                                                         \
    "{\"name\":\"q\",\"model\":{\"type\":\"linear\",\"inputs\":1},"                                \
    "\"data\":{\"format\":\"synthetic_linear\"}" policy "}"
    pf_job_spec s;
    pf_error err;
    assert_int_equal(parse_text(QUEUE_SPEC(",\"run_policy\":{\"queue\":\"team-a\"}"), &s, &err),
                     PF_OK);
    assert_string_equal(pf_job_spec_queue(&s), "team-a");
    char *json = pf_job_spec_to_json(&s);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"queue\":\"team-a\""));
    assert_round_trip(&s, "a queue");
    pf_free(json);
    pf_job_spec_deinit(&s);

    char *forms[2];
    const char *texts[2] = {QUEUE_SPEC(",\"run_policy\":{\"queue\":\"default\"}"), QUEUE_SPEC("")};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(parse_text(texts[i], &s, &err), PF_OK);
        assert_string_equal(pf_job_spec_queue(&s), PF_DEFAULT_QUEUE);
        forms[i] = pf_job_spec_to_json(&s);
        assert_non_null(forms[i]);
        assert_null(strstr(forms[i], "\"queue\""));
        pf_job_spec_deinit(&s);
    }
    assert_string_equal(forms[0], forms[1]);
    pf_free(forms[0]);
    pf_free(forms[1]);

    assert_int_equal(parse_fails(QUEUE_SPEC(",\"run_policy\":{\"queue\":\"Team_A\"}"), &err),
                     PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/run_policy/queue");
    assert_int_equal(parse_fails(QUEUE_SPEC(",\"run_policy\":{\"queue\":\"\"}"), &err),
                     PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/run_policy/queue");

    /* a priority class: a name, kept in the normalised form; absent when not given */
    assert_int_equal(
        parse_text(QUEUE_SPEC(",\"run_policy\":{\"priority_class\":\"high\"}"), &s, &err), PF_OK);
    assert_string_equal(s.run_policy.priority_class, "high");
    json = pf_job_spec_to_json(&s);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"priority_class\":\"high\""));
    assert_round_trip(&s, "a priority class");
    pf_free(json);
    pf_job_spec_deinit(&s);
    assert_int_equal(parse_text(QUEUE_SPEC(""), &s, &err), PF_OK);
    json = pf_job_spec_to_json(&s);
    assert_non_null(json);
    assert_null(strstr(json, "priority_class"));
    pf_free(json);
    pf_job_spec_deinit(&s);
    assert_int_equal(
        parse_fails(QUEUE_SPEC(",\"run_policy\":{\"priority_class\":\"High!\"}"), &err),
        PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/run_policy/priority_class");
#undef QUEUE_SPEC
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nonfinite_fields),
        cmocka_unit_test(test_valid_files),
        cmocka_unit_test(test_invalid_files),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_type_dependent_defaults),
        cmocka_unit_test(test_design_example),
        cmocka_unit_test(test_reals_round_trip),
        cmocka_unit_test(test_error_details),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_copy_and_names),
        cmocka_unit_test(test_failing_allocator),
        cmocka_unit_test(test_failing_jansson_allocator),
        cmocka_unit_test(test_device_forms),
        cmocka_unit_test(test_replica_forms),
        cmocka_unit_test(test_embedding_forms),
        cmocka_unit_test(test_dynamic_splits),
        cmocka_unit_test(test_queue_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
