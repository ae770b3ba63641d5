/* test_tf_config_errors.c - TF_CONFIG refused: validation errors, parse errors (each with its
 * JSON pointer and a one-line message), duplicate keys, and the limits on tasks, jobs and
 * sizes.
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
#include "tests/support/tf_config_cases.h"

/* --- helpers ---------------------------------------------------------------------------------- */

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_errors),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests_name("tf_config_errors", tests, NULL, NULL);
}
