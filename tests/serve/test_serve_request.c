/* test_serve_request.c - serve/serve_request.h: predict bodies of a dense and an embedding model
 * in every accepted form, the exact floats each writes in pf_model_pad_example's layout, every
 * refusal with its HTTP status and JSON pointer (and nothing held after it), and the answer's
 * text: its key, its version, floats that read back bitwise, NaN as null, the buffer's cap.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/counting_alloc.h"
#include "psflow/buf.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "serve/serve_request.h"

/* An mlp of 4 inputs and 3 outputs. */
static pf_model_spec dense_model(void) {
    pf_model_spec m;
    memset(&m, 0, sizeof m);
    m.type = PF_MODEL_MLP;
    m.inputs = 4;
    m.outputs = 3;
    m.n_hidden = 1;
    m.hidden[0] = 5;
    return m;
}

/* Tables "user" (vocab 10, max_ids 2) and "item" (vocab 5, max_ids 3), 2 numeric inputs:
 * an example is [u0 u1 uw0 uw1 | i0 i1 i2 iw0 iw1 iw2 | n0 n1], 12 floats. */
static pf_model_spec embedding_model(void) {
    pf_model_spec m;
    memset(&m, 0, sizeof m);
    m.type = PF_MODEL_MLP;
    m.outputs = 2;
    m.n_hidden = 1;
    m.hidden[0] = 4;
    m.n_embeddings = 2;
    snprintf(m.embeddings[0].name, sizeof m.embeddings[0].name, "user");
    m.embeddings[0].vocab = 10;
    m.embeddings[0].dim = 2;
    m.embeddings[0].max_ids = 2;
    snprintf(m.embeddings[1].name, sizeof m.embeddings[1].name, "item");
    m.embeddings[1].vocab = 5;
    m.embeddings[1].dim = 2;
    m.embeddings[1].max_ids = 3;
    m.numeric_inputs = 2;
    return m;
}

static int parse(const pf_model_spec *m, const char *body, int max, serve_request *r,
                 pf_error *err) {
    return serve_request_parse(m, body, strlen(body), max, r, err);
}

/* Parses body, expecting 0, n examples and the columnar flag, then compares x bitwise. */
static void accepts(const pf_model_spec *m, const char *body, int n, int columnar,
                    const float *want) {
    serve_request r;
    pf_error err;
    int rc = parse(m, body, 100, &r, &err);
    if (rc != 0)
        fail_msg("%s: refused %d at \"%s\": %s", body, rc, err.pointer, err.message);
    assert_int_equal(r.n, n);
    assert_int_equal(r.width, pf_model_input_width(m));
    assert_int_equal(r.columnar, columnar);
    assert_non_null(r.x);
    for (int i = 0; i < n * r.width; i++)
        if (memcmp(&r.x[i], &want[i], sizeof(float)) != 0)
            fail_msg("%s: x[%d] = %.9g, want %.9g", body, i, (double)r.x[i], (double)want[i]);
    serve_request_deinit(&r);
    assert_null(r.x);
}

/* Parses body with max_instances max, expecting the refusal `status` at `pointer`, a message,
 * and nothing held. */
static void refuses_max(const pf_model_spec *m, const char *body, int max, int status,
                        const char *pointer) {
    serve_request r;
    pf_error err;
    int rc = parse(m, body, max, &r, &err);
    if (rc != status || strcmp(err.pointer, pointer) != 0)
        fail_msg("%s: got %d at \"%s\" (%s), want %d at \"%s\"", body, rc, err.pointer, err.message,
                 status, pointer);
    assert_true(err.message[0] != '\0');
    assert_null(r.x);
    assert_int_equal(r.n, 0);
    serve_request_deinit(&r);
}

static void refuses(const pf_model_spec *m, const char *body, int status, const char *pointer) {
    refuses_max(m, body, 100, status, pointer);
}

static void test_dense_forms(void **state) {
    (void)state;
    pf_model_spec m = dense_model();
    const float two[] = {1, 2, 3, 4, 0.1f, -0.5f, 1e-3f, 65504};
    accepts(&m, "{\"instances\": [[1, 2, 3, 4], [0.1, -0.5, 1e-3, 65504]]}", 2, 0, two);
    accepts(&m, "{\"instances\": [{\"x\": [1, 2, 3, 4]}, [0.1, -0.5, 0.001, 6.5504e4]]}", 2, 0,
            two);
    accepts(&m, "{\"inputs\": {\"x\": [[1, 2, 3, 4], [0.1, -0.5, 1e-3, 65504]]}}", 2, 1, two);
    accepts(&m, "{\"inputs\": [[1, 2, 3, 4], {\"x\": [0.1, -0.5, 1e-3, 65504]}]}", 2, 1, two);
    accepts(&m, "{\"signature_name\": \"serving_default\", \"instances\": [[1, 2, 3, 4]]}", 1, 0,
            two);
    /* float32's largest, as nine digits print it (slightly above FLT_MAX as a double) */
    const float big[] = {FLT_MAX, -FLT_MAX, FLT_MIN, 0};
    accepts(&m, "{\"instances\": [[3.40282347e+38, -3.4028235e38, 1.17549435e-38, 0]]}", 1, 0, big);
}

static void test_dense_refusals(void **state) {
    (void)state;
    pf_model_spec m = dense_model();
    refuses(&m, "{\"instances\": [[1, 2, 3, 4]", 400, "");
    refuses(&m, "", 400, "");
    refuses(&m, "{\"instances\": [[1, 2, 3, 4]], \"instances\": [[1, 2, 3, 4]]}", 400, "");
    refuses(&m, "[[1, 2, 3, 4]]", 400, "");
    refuses(&m, "\"instances\"", 400, "");
    refuses(&m, "{\"instances\": [[1, 2, 3, 4]], \"extra\": 1}", 400, "/extra");
    refuses(&m, "{\"instances\": [[1, 2, 3, 4]], \"a/b~\": 1}", 400, "/a~1b~0");
    refuses(&m, "{\"instances\": [[1, 2, 3, 4]], \"inputs\": [[1, 2, 3, 4]]}", 400, "/inputs");
    refuses(&m, "{}", 400, "/instances");
    refuses(&m, "{\"signature_name\": \"serving_default\"}", 400, "/instances");
    refuses(&m, "{\"instances\": [[1, 2, 3, 4]], \"signature_name\": \"predict\"}", 400,
            "/signature_name");
    refuses(&m, "{\"instances\": [[1, 2, 3, 4]], \"signature_name\": 1}", 400, "/signature_name");
    refuses(&m, "{\"instances\": []}", 400, "/instances");
    refuses(&m, "{\"inputs\": []}", 400, "/inputs");
    refuses(&m, "{\"inputs\": {}}", 400, "/inputs");
    refuses(&m, "{\"inputs\": {\"x\": []}}", 400, "/inputs");
    refuses(&m, "{\"instances\": {\"x\": [1, 2, 3, 4]}}", 400, "/instances");
    refuses(&m, "{\"inputs\": \"x\"}", 400, "/inputs");
    refuses_max(&m, "{\"instances\": [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]}", 2, 413,
                "/instances");
    refuses_max(&m, "{\"inputs\": {\"x\": [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]}}", 2, 413,
                "/inputs");
    refuses(&m, "{\"instances\": [[1, 2, 3, 4], [1, 2, 3]]}", 400, "/instances/1");
    refuses(&m, "{\"instances\": [[1, 2, 3, 4, 5]]}", 400, "/instances/0");
    refuses(&m, "{\"instances\": [5]}", 400, "/instances/0");
    refuses(&m, "{\"instances\": [[1, 2, 3, \"4\"]]}", 400, "/instances/0/3");
    refuses(&m, "{\"instances\": [[1, 2, 3, null]]}", 400, "/instances/0/3");
    refuses(&m, "{\"instances\": [[1, 2, 3, [4]]]}", 400, "/instances/0/3");
    refuses(&m, "{\"instances\": [[1, 2, 3, 1e300]]}", 400, "/instances/0/3");
    refuses(&m, "{\"instances\": [[1, 2, -1e39, 4]]}", 400, "/instances/0/2");
    refuses(&m, "{\"instances\": [[1, 2, 3, 4], [1, 3.5e38, 3, 4]]}", 400, "/instances/1/1");
    refuses(&m, "{\"instances\": [{\"x\": [1, 2, 3, 4], \"y\": 1}]}", 400, "/instances/0/y");
    refuses(&m, "{\"instances\": [{}]}", 400, "/instances/0/x");
    refuses(&m, "{\"instances\": [{\"x\": [1, 2, 3]}]}", 400, "/instances/0/x");
    refuses(&m, "{\"instances\": [{\"x\": [1, 2, true, 4]}]}", 400, "/instances/0/x/2");
    refuses(&m, "{\"instances\": [{\"user\": 1}]}", 400, "/instances/0/user");
    refuses(&m, "{\"inputs\": {\"x\": [[1, 2, 3, 4], [1, 2, 3]]}}", 400, "/inputs/x/1");
    refuses(&m, "{\"inputs\": {\"x\": [[1, 2, 3, 4], [1, 2, \"3\", 4]]}}", 400, "/inputs/x/1/2");
    refuses(&m, "{\"inputs\": {\"x\": 5}}", 400, "/inputs/x");
    refuses(&m, "{\"inputs\": {\"x\": [[1, 2, 3, 4]], \"z\": [1]}}", 400, "/inputs/z");
    refuses(&m, "{\"inputs\": {\"x\": [[1, 2, 3, 4]], \"z\": [1, 2]}}", 400, "/inputs/z");
    refuses(&m, "{\"inputs\": {\"z\": [1]}}", 400, "/inputs/z");
}

/* The embedding model's examples in pf_model_pad_example's layout. */
static void test_embedding_forms(void **state) {
    (void)state;
    pf_model_spec m = embedding_model();
    assert_int_equal(pf_model_input_width(&m), 12);
    const float one[] = {3, -1, 1, 0, 1, 4, -1, 1, 1, 0, 0.5f, -2};
    accepts(&m, "{\"instances\": [{\"user\": 3, \"item\": [1, 4], \"numeric\": [0.5, -2]}]}", 1, 0,
            one);
    /* the same example flat, padding slots included */
    accepts(&m, "{\"instances\": [[3, -1, 1, 0, 1, 4, -1, 1, 1, 0, 0.5, -2]]}", 1, 0, one);
    const float two[] = {2,  9,  0.25f, 2, -1, -1, -1, 0, 0, 0, 1, 2, /* */
                         -1, -1, 0,     0, 0,  1,  2,  1, 1, 1, 0, 0};
    accepts(&m,
            "{\"instances\": ["
            "{\"user\": {\"ids\": [2, 9], \"weights\": [0.25, 2]}, \"item\": [], \"numeric\": [1, "
            "2]},"
            "{\"numeric\": [0, 0], \"item\": {\"ids\": [0, 1, 2]}, \"user\": []}]}",
            2, 0, two);
    accepts(&m,
            "{\"inputs\": {\"user\": [{\"ids\": [2, 9], \"weights\": [0.25, 2]}, []],"
            " \"item\": [[], [0, 1, 2]], \"numeric\": [[1, 2], [0, 0]]}}",
            2, 1, two);
    accepts(
        &m,
        "{\"inputs\": [{\"user\": {\"ids\": [2, 9], \"weights\": [0.25, 2]}, \"item\": {\"ids\": "
        "[]}, \"numeric\": [1, 2]}, [-1, -1, 0, 0, 0, 1, 2, 1, 1, 1, 0, 0]]}",
        2, 1, two);
    /* the edges of the tables: 0 and vocab - 1 */
    const float edge[] = {0, 9, 1, 1, 4, 0, -1, 1, 1, 0, 0, 0};
    accepts(&m, "{\"instances\": [{\"user\": [0, 9], \"item\": [4, 0], \"numeric\": [0, 0]}]}", 1,
            0, edge);
}

static void test_embedding_refusals(void **state) {
    (void)state;
    pf_model_spec m = embedding_model();
    char body[512];
#define EX(FEATURES) "{\"instances\": [{" FEATURES "}]}"
    refuses(&m, EX("\"user\": 10, \"item\": 1, \"numeric\": [0, 0]"), 400, "/instances/0/user");
    refuses(&m, EX("\"user\": -1, \"item\": 1, \"numeric\": [0, 0]"), 400, "/instances/0/user");
    refuses(&m, EX("\"user\": 1.5, \"item\": 1, \"numeric\": [0, 0]"), 400, "/instances/0/user");
    refuses(&m, EX("\"user\": \"1\", \"item\": 1, \"numeric\": [0, 0]"), 400, "/instances/0/user");
    refuses(&m, EX("\"user\": 1, \"item\": [1, -1], \"numeric\": [0, 0]"), 400,
            "/instances/0/item/1");
    refuses(&m, EX("\"user\": 1, \"item\": [5], \"numeric\": [0, 0]"), 400, "/instances/0/item/0");
    refuses(&m, EX("\"user\": 1, \"item\": [0.5], \"numeric\": [0, 0]"), 400,
            "/instances/0/item/0");
    refuses(&m, EX("\"user\": 1, \"item\": [2.0], \"numeric\": [0, 0]"), 400,
            "/instances/0/item/0");
    refuses(&m, EX("\"user\": [1, 2, 3], \"item\": 1, \"numeric\": [0, 0]"), 400,
            "/instances/0/user");
    refuses(&m, EX("\"user\": {\"ids\": [1, 2, 3]}, \"item\": 1, \"numeric\": [0, 0]"), 400,
            "/instances/0/user/ids");
    refuses(&m,
            EX("\"user\": {\"ids\": [1], \"weights\": [1, 2]}, \"item\": 1, \"numeric\": [0, 0]"),
            400, "/instances/0/user/weights");
    refuses(&m, EX("\"user\": {\"ids\": [1], \"weights\": 1}, \"item\": 1, \"numeric\": [0, 0]"),
            400, "/instances/0/user/weights");
    refuses(&m,
            EX("\"user\": {\"ids\": [1], \"weights\": [\"a\"]}, \"item\": 1, \"numeric\": [0, 0]"),
            400, "/instances/0/user/weights/0");
    refuses(&m,
            EX("\"user\": {\"ids\": [1], \"weights\": [1e300]}, \"item\": 1, \"numeric\": [0, 0]"),
            400, "/instances/0/user/weights/0");
    refuses(&m, EX("\"user\": {\"ids\": [1, 20]}, \"item\": 1, \"numeric\": [0, 0]"), 400,
            "/instances/0/user/ids/1");
    refuses(&m, EX("\"user\": {\"weights\": [1]}, \"item\": 1, \"numeric\": [0, 0]"), 400,
            "/instances/0/user/ids");
    refuses(&m, EX("\"user\": {\"ids\": [1], \"w\": [1]}, \"item\": 1, \"numeric\": [0, 0]"), 400,
            "/instances/0/user/w");
    refuses(&m, EX("\"user\": {\"ids\": 1}, \"item\": 1, \"numeric\": [0, 0]"), 400,
            "/instances/0/user/ids");
    refuses(&m, EX("\"user\": null, \"item\": 1, \"numeric\": [0, 0]"), 400, "/instances/0/user");
    refuses(&m, EX("\"user\": 1, \"numeric\": [0, 0]"), 400, "/instances/0/item");
    refuses(&m, EX("\"user\": 1, \"item\": 1"), 400, "/instances/0/numeric");
    refuses(&m, EX("\"user\": 1, \"item\": 1, \"numeric\": [0]"), 400, "/instances/0/numeric");
    refuses(&m, EX("\"user\": 1, \"item\": 1, \"numeric\": [0, \"0\"]"), 400,
            "/instances/0/numeric/1");
    refuses(&m, EX("\"user\": 1, \"item\": 1, \"numeric\": [0, 0], \"x\": [1]"), 400,
            "/instances/0/x");
#undef EX
    /* flat examples: an id slot must name a row of its table or be -1 */
    refuses(&m, "{\"instances\": [[0.5, -1, 1, 0, 1, 4, -1, 1, 1, 0, 0, 0]]}", 400,
            "/instances/0/0");
    refuses(&m, "{\"instances\": [[3, -1, 1, 0, 1, 4, 5, 1, 1, 0, 0, 0]]}", 400, "/instances/0/6");
    refuses(&m, "{\"instances\": [[3, -2, 1, 0, 1, 4, -1, 1, 1, 0, 0, 0]]}", 400, "/instances/0/1");
    refuses(&m, "{\"instances\": [[3, -1, 1, 0, 1, 4, -1, 1, 1, 0, 0]]}", 400, "/instances/0");
    /* columnar: every input one value per example, of one length */
    snprintf(body, sizeof body,
             "{\"inputs\": {\"user\": [1, 2], \"item\": [[1]], \"numeric\": [[0, 0], [0, 0]]}}");
    refuses(&m, body, 400, "/inputs/item");
    snprintf(body, sizeof body, "{\"inputs\": {\"user\": [1], \"%s}}", "numeric\": [[0, 0]]");
    refuses(&m, body, 400, "/inputs/item");
    snprintf(body, sizeof body, "{\"inputs\": {\"user\": [1, 2], \"item\": [1, 5], %s}}",
             "\"numeric\": [[0, 0], [0, 0]]");
    refuses(&m, body, 400, "/inputs/item/1");
    snprintf(body, sizeof body, "{\"inputs\": {\"user\": [1, [1, 2, 3]], \"item\": [1, 2], %s}}",
             "\"numeric\": [[0, 0], [0, 0]]");
    refuses(&m, body, 400, "/inputs/user/1");
    snprintf(body, sizeof body, "{\"inputs\": {\"user\": [1, 1], \"item\": [1, 2], %s}}",
             "\"numeric\": [[0, 0], [0]]");
    refuses(&m, body, 400, "/inputs/numeric/1");
}

/* A body that needs memory beyond what is left: 500, nothing held, nothing leaked. */
static void test_out_of_memory(void **state) {
    (void)state;
    pf_model_spec m = embedding_model();
    const char *body = "{\"instances\": [{\"user\": 3, \"item\": [1, 4], \"numeric\": [0.5, -2]}]}";
    use_counting(0);
    serve_request r;
    pf_error err;
    assert_int_equal(parse(&m, body, 100, &r, &err), 500);
    assert_string_equal(err.pointer, "");
    assert_null(r.x);
    assert_true(alloc_refused > 0);
    counting_budget(-1);
    assert_int_equal(parse(&m, body, 100, &r, &err), 0);
    serve_request_deinit(&r);
    assert_int_equal(alloc_live, 0);
    use_libc();
}

static char *answer(int64_t version, int columnar, const float *y, int n, int outputs) {
    pf_buf b;
    pf_buf_init(&b, 1 << 20);
    assert_int_equal(serve_answer_write(&b, version, columnar, y, n, outputs), PF_OK);
    assert_int_equal(pf_buf_terminate(&b), PF_OK);
    return pf_buf_detach(&b);
}

static void test_answer_text(void **state) {
    (void)state;
    const float y[] = {1, 0.5f, -2, 0};
    char *s = answer(42, 0, y, 2, 2);
    assert_string_equal(s, "{\"model_version\":\"42\",\"predictions\":[[1,0.5],[-2,0]]}");
    pf_free(s);
    s = answer(7, 1, y, 1, 3);
    assert_string_equal(s, "{\"model_version\":\"7\",\"outputs\":[[1,0.5,-2]]}");
    pf_free(s);
    s = answer(INT64_MAX, 0, y, 0, 2);
    assert_string_equal(s, "{\"model_version\":\"9223372036854775807\",\"predictions\":[]}");
    pf_free(s);
    const float bad[] = {NAN, 1, INFINITY, -INFINITY};
    s = answer(1, 0, bad, 2, 2);
    assert_string_equal(s, "{\"model_version\":\"1\",\"predictions\":[[null,1],[null,null]]}");
    pf_free(s);
}

/* Every float printed reads back with strtof to the same bits. */
static void test_answer_round_trip(void **state) {
    (void)state;
    enum { N = 4096, OUT = 4 };
    static float y[N];
    uint64_t seed = 0x9e3779b97f4a7c15u;
    const float fixed[] = {FLT_MAX, -FLT_MAX, FLT_MIN,     FLT_TRUE_MIN, -0.0f,
                           0.1f,    1.0f / 3, 16777217.0f, 3.14159274f,  1e-30f};
    for (int i = 0; i < N; i++) {
        if (i < (int)(sizeof fixed / sizeof fixed[0])) {
            y[i] = fixed[i];
            continue;
        }
        do {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            uint32_t bits = (uint32_t)(seed >> 32);
            memcpy(&y[i], &bits, sizeof bits);
        } while (!isfinite(y[i]));
    }
    char *s = answer(3, 0, y, N / OUT, OUT);
    const char *p = strstr(s, "\"predictions\":[");
    assert_non_null(p);
    p += strlen("\"predictions\":[");
    for (int i = 0; i < N; i++) {
        while (*p == '[' || *p == ',' || *p == ']')
            p++;
        char *end;
        float v = strtof(p, &end);
        assert_true(end > p);
        if (memcmp(&v, &y[i], sizeof v) != 0)
            fail_msg("y[%d] = %a printed as %.*s, read back as %a", i, (double)y[i], (int)(end - p),
                     p, (double)v);
        p = end;
    }
    assert_string_equal(p, "]]}");
    pf_free(s);
}

static void test_answer_cap(void **state) {
    (void)state;
    const float y[] = {1, 2, 3, 4, 5, 6};
    pf_buf b;
    pf_buf_init(&b, 16);
    assert_int_equal(serve_answer_write(&b, 1, 0, y, 3, 2), PF_ERR_RANGE);
    pf_buf_deinit(&b);
    pf_buf_init(&b, 40);
    assert_int_equal(serve_answer_write(&b, 1, 0, y, 3, 2), PF_ERR_RANGE);
    pf_buf_deinit(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_forms),       cmocka_unit_test(test_dense_refusals),
        cmocka_unit_test(test_embedding_forms),   cmocka_unit_test(test_embedding_refusals),
        cmocka_unit_test(test_out_of_memory),     cmocka_unit_test(test_answer_text),
        cmocka_unit_test(test_answer_round_trip), cmocka_unit_test(test_answer_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
