/* test_tf_config_files.c - every file under tests/data/tf_config/{valid,invalid}/, and
 * failing allocations while parsing them.
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

#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/tf_config.h"
#include "tests/support/counting_alloc.h"
#include "tests/support/tf_config_cases.h"
#include "tests/support/data_files.h"

#define TFC_DIR   PSFLOW_TEST_DATA "/tf_config"
#define MAX_FILES 256

/* --- data files ------------------------------------------------------------------------------- */

static void test_valid_files(void **state) {
    (void)state;
    char *names[MAX_FILES];
    size_t n = data_files(TFC_DIR "/valid", ".json", false, names, MAX_FILES);
    assert_true(n >= 20);
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        size_t len;
        pf_tf_config c;
        pf_error err;
        snprintf(path, sizeof path, "%s/valid/%s", TFC_DIR, names[i]);
        char *text = data_read(path, 16u << 20, &len);
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
        pf_free(text);
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
    {"chief_and_master", PF_ERR_FORMAT,
     "/cluster/master: the cluster has both a 'chief' and a 'master' job"},
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
    {"type_numeric", PF_ERR_INVALID, "task type '123456' is not supported"},
    {"type_uppercase", PF_ERR_INVALID, "task type 'Worker' is not supported"},
};
#define N_INVALID_CASES (sizeof invalid_cases / sizeof invalid_cases[0])

static void test_invalid_files(void **state) {
    (void)state;
    char *names[MAX_FILES];
    bool seen[N_INVALID_CASES] = {false};
    size_t n = data_files(TFC_DIR "/invalid", ".json", false, names, MAX_FILES);
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
        char *text = data_read(path, 16u << 20, &len);
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
        pf_free(text);
        free(names[i]);
    }
    for (size_t row = 0; row < N_INVALID_CASES; row++)
        if (!seen[row])
            fail_msg("invalid_cases row %s has no file", invalid_cases[row].file);
    print_message("%zu invalid TF_CONFIG files\n", n);
}

/* --- failing allocations --------------------------------------------------------------------- */

/* --- failing allocations ------------------------------------------------------------------------
 */

/* Every valid file, parsed and formatted with the k-th psflow allocation failing, for every k
 * until none fails: PF_ERR_NOMEM or PF_OK, nothing leaked, nothing left behind. */
static void test_failing_allocator_parse(void **state) {
    (void)state;
    char *names[MAX_FILES];
    size_t n = data_files(TFC_DIR "/valid", ".json", false, names, MAX_FILES);
    long total_failures = 0;
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        size_t len;
        snprintf(path, sizeof path, "%s/valid/%s", TFC_DIR, names[i]);
        char *text = data_read(path, 16u << 20, &len);
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
        pf_free(text);
        free(names[i]);
    }
    assert_true(total_failures > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_files),
        cmocka_unit_test(test_invalid_files),
        cmocka_unit_test_teardown(test_failing_allocator_parse, restore_allocator),
    };
    return cmocka_run_group_tests_name("tf_config_files", tests, NULL, NULL);
}
