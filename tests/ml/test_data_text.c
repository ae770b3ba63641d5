/* test_data_text.c - the text readers of data.h: CSV and LIBSVM, into dense rows and into the
 * id and weight slots of a model with embeddings (test_data.c has IDX, the generators,
 * pf_dataset_load and the sampler).
 *
 * Parser cases live in tests/data/csv/{valid,invalid}/ and tests/data/libsvm/{valid,invalid}/.
 * Every invalid file is read with 3 features as classification data.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/data.h"
#include "tests/support/data_files.h"

#define MAX_CASES 128

/* --- helpers ------------------------------------------------------------------------------ */

static void assert_zeroed(const pf_dataset *ds) {
    assert_int_equal(ds->n, 0);
    assert_int_equal(ds->features, 0);
    assert_int_equal(ds->num_classes, 0);
    assert_null(ds->x);
    assert_null(ds->y);
}

static void path_join(char *out, size_t size, const char *a, const char *b) {
    int n = snprintf(out, size, "%s/%s", a, b);
    assert_true(n > 0 && (size_t)n < size);
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++)
        free(names[i]);
}

/* --- CSV ---------------------------------------------------------------------------------- */

typedef struct csv_case {
    const char *file;
    bool classification;
    int64_t n;
    int num_classes;
    float y[4];
    float x[12];
} csv_case;

/* A reader of files with 3 features: CSV, or LIBSVM with ids from 1. */
typedef pf_status (*reader3)(const char *path, bool classification, pf_dataset *ds, pf_error *err);

static pf_status read_csv3(const char *path, bool classification, pf_dataset *ds, pf_error *err) {
    return pf_csv_load(path, 3, classification, ds, err);
}

static pf_status read_svm3(const char *path, bool classification, pf_dataset *ds, pf_error *err) {
    return pf_libsvm_load(path, 3, 1, classification, ds, err);
}

/* Every file of tests/data/<sub>/valid (extension ext) is one of cases, and reads as it says. */
static void check_valid_files(const char *sub, const char *ext, const csv_case *cases,
                              size_t n_cases, reader3 read) {
    char dir[512], path[600];
    snprintf(path, sizeof path, "%s/valid", sub);
    path_join(dir, sizeof dir, PSFLOW_TEST_DATA, path);
    char *names[MAX_CASES];
    int n = (int)data_files(dir, ext, false, names, MAX_CASES);
    assert_int_equal(n, (int)n_cases); /* every file has a row in cases */
    free_names(names, n);
    for (size_t c = 0; c < n_cases; c++) {
        path_join(path, sizeof path, dir, cases[c].file);
        pf_dataset ds;
        pf_error err;
        pf_status st = read(path, cases[c].classification, &ds, &err);
        if (st != PF_OK)
            print_error("%s: %s\n", cases[c].file, err.message);
        assert_int_equal(st, PF_OK);
        assert_int_equal(ds.n, cases[c].n);
        assert_int_equal(ds.features, 3);
        assert_int_equal(ds.num_classes, cases[c].num_classes);
        for (int64_t i = 0; i < ds.n; i++)
            assert_true(ds.y[i] == cases[c].y[i]);
        for (int64_t i = 0; i < ds.n * 3; i++)
            assert_true(ds.x[i] == cases[c].x[i]);
        pf_dataset_deinit(&ds);
    }
}

/* Every file of tests/data/<sub>/invalid (at least `at_least`) is refused as a format error
 * whose message names it, and leaves the data set zeroed. */
static void check_invalid_files(const char *sub, const char *ext, int at_least, reader3 read) {
    char dir[512], path[600];
    snprintf(path, sizeof path, "%s/invalid", sub);
    path_join(dir, sizeof dir, PSFLOW_TEST_DATA, path);
    char *names[MAX_CASES];
    int n = (int)data_files(dir, ext, false, names, MAX_CASES);
    assert_true(n >= at_least);
    for (int i = 0; i < n; i++) {
        path_join(path, sizeof path, dir, names[i]);
        pf_dataset ds;
        pf_error err;
        pf_status st = read(path, true, &ds, &err);
        if (st != PF_ERR_FORMAT)
            print_error("%s: got %s (%s)\n", names[i], pf_strerror(st), err.message);
        assert_int_equal(st, PF_ERR_FORMAT);
        assert_non_null(strstr(err.message, names[i]));
        assert_zeroed(&ds);
    }
    free_names(names, n);
}

static void test_csv_valid_files(void **state) {
    (void)state;
    static const csv_case cases[] = {
        {"basic.csv", true, 3, 3, {0, 1, 2}, {0.5f, 1, 2, -1.5f, 0.25f, 3, 0, 0, 0}},
        {"header.csv", true, 2, 2, {1, 0}, {1, 2, 3, 4, 5, 6}},
        {"crlf_blank.csv", true, 2, 4, {3, 0}, {1, 2, 3, 4, 5, 6}},
        {"regression.csv",
         false,
         3,
         0,
         {-2.5f, 1000, 3.25f},
         {1, 2, 3, 0.125f, -0.125f, 0, 7, 8, 9}},
    };
    check_valid_files("csv", ".csv", cases, sizeof cases / sizeof *cases, read_csv3);
}

static void test_csv_invalid_files(void **state) {
    (void)state;
    check_invalid_files("csv", ".csv", 15, read_csv3);
}

/* --- LIBSVM ------------------------------------------------------------------------------- */

static void test_libsvm_valid_files(void **state) {
    (void)state;
    static const csv_case cases[] = {
        {"basic.libsvm", true, 3, 3, {0, 2, 1}, {0.5f, 0, 2, 0, -1.5f, 0, 0, 0, 0}},
        {"comments_crlf.libsvm", true, 2, 2, {1, 0}, {1, 2, 3, 0, 4, 0}},
        {"exponents.libsvm", true, 2, 2, {1, 0}, {1e-3f, 0, 100, 0, 0, 0}},
    };
    check_valid_files("libsvm", ".libsvm", cases, sizeof cases / sizeof *cases, read_svm3);
}

static void test_libsvm_invalid_files(void **state) {
    (void)state;
    check_invalid_files("libsvm", ".libsvm", 15, read_svm3);
}

static pf_status svm3(const char *text, int base, bool classification, pf_dataset *ds,
                      pf_error *err) {
    return pf_libsvm_parse(text, strlen(text), "t.svm", 3, base, classification, ds, err);
}

static void test_libsvm_messages(void **state) {
    (void)state;
    pf_dataset ds;
    pf_error err;
    assert_int_equal(svm3("1 1:1\n0 3:1 2:5\n", 1, true, &ds, &err), PF_ERR_FORMAT);
    assert_string_equal(err.message,
                        "t.svm: line 2: feature ids must increase along a line (2 after 3)");
    assert_int_equal(err.offset, (long long)strlen("1 1:1\n0 3:1 "));
    assert_zeroed(&ds);
    assert_int_equal(svm3("0 3:1\n", 0, true, &ds, &err), PF_ERR_FORMAT);
    assert_string_equal(err.message, "t.svm: line 1: feature id 3 outside 0 .. 2 (model.inputs 3, "
                                     "data.index_base 0)");
    assert_int_equal(svm3("-1 1:1\n", 1, true, &ds, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "label \"-1\" is outside [0, 1048576) (binary -1/+1"));
    assert_int_equal(svm3("0 2:x\n", 1, true, &ds, &err), PF_ERR_FORMAT);
    assert_string_equal(err.message, "t.svm: line 1: feature 2: not a number: \"2:x\"");
    assert_int_equal(svm3("", 1, true, &ds, &err), PF_ERR_FORMAT);
    assert_string_equal(err.message, "t.svm: empty file");
    assert_int_equal(svm3("1 1:1\n", 2, true, &ds, &err), PF_ERR_INVALID); /* base 0 or 1 */

    /* index_base 0, a regression target, a tab and a line without features. */
    assert_int_equal(svm3("-2.5 0:1\t2:3\n4\n", 0, false, &ds, &err), PF_OK);
    assert_int_equal(ds.n, 2);
    assert_int_equal(ds.num_classes, 0);
    assert_true(ds.y[0] == -2.5f && ds.y[1] == 4);
    assert_true(ds.x[0] == 1 && ds.x[1] == 0 && ds.x[2] == 3);
    assert_true(ds.x[3] == 0 && ds.x[4] == 0 && ds.x[5] == 0);
    pf_dataset_deinit(&ds);

    /* The input need not be NUL-terminated: only len bytes are read. */
    const char *text = "1 1:2 3:45";
    assert_int_equal(pf_libsvm_parse(text, strlen(text) - 1, "t", 3, 1, true, &ds, &err), PF_OK);
    assert_true(ds.x[2] == 4);
    pf_dataset_deinit(&ds);

    /* Many rows: the buffers grow. */
    char big[20000];
    size_t k = 0;
    for (int i = 0; i < 1000; i++)
        k += (size_t)snprintf(big + k, sizeof big - k, "%d 2:%d\n", i % 3, i);
    assert_int_equal(svm3(big, 1, true, &ds, &err), PF_OK);
    assert_int_equal(ds.n, 1000);
    assert_true(ds.x[999 * 3 + 1] == 999 && ds.y[999] == 0);
    pf_dataset_deinit(&ds);
}

/* Sparse examples for a model with embeddings: feature "a" (vocab 3, 2 ids) owns ids
 * 1..3, "b" (vocab 4, 1 id) ids 4..7; each example is a's 2 id slots, a's 2 weights, b's
 * id, b's weight, padded with id -1 and weight 0. */
static void test_libsvm_ids(void **state) {
    (void)state;
    pf_model_spec m = {.type = PF_MODEL_SOFTMAX, .outputs = 3, .n_embeddings = 2};
    m.embeddings[0] = (pf_embedding_spec){
        .name = "a", .vocab = 3, .dim = 4, .combiner = PF_COMBINE_SUM, .max_ids = 2, .hash = false};
    m.embeddings[1] = (pf_embedding_spec){.name = "b",
                                          .vocab = 4,
                                          .dim = 2,
                                          .combiner = PF_COMBINE_MEAN,
                                          .max_ids = 1,
                                          .hash = false};
    pf_dataset ds;
    pf_error err;
    const char *text = "1 1:1 3:0.5 6:2\n0 7:1\n2\n2 2:4\n";
    assert_int_equal(pf_libsvm_parse_ids(text, strlen(text), "t", &m, 1, true, &ds, &err), PF_OK);
    assert_int_equal(ds.n, 4);
    assert_int_equal(ds.features, 6);
    assert_int_equal(ds.num_classes, 3);
    const float want[4][6] = {
        {0, 2, 1, 0.5f, 2, 2}, {-1, -1, 0, 0, 3, 1}, {-1, -1, 0, 0, -1, 0}, {1, -1, 4, 0, -1, 0}};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++)
            if (ds.x[i * 6 + j] != want[i][j])
                fail_msg("example %d slot %d: %g, want %g", i, j, ds.x[i * 6 + j], want[i][j]);
    pf_dataset_deinit(&ds);

    /* Too many ids for a feature, an id past the last table, index_base 0. */
    text = "0 1:1 2:1 3:1\n";
    assert_int_equal(pf_libsvm_parse_ids(text, strlen(text), "t", &m, 1, true, &ds, &err),
                     PF_ERR_FORMAT);
    assert_string_equal(err.message, "t: line 1: more than max_ids 2 ids for embedding 'a'");
    assert_int_equal(err.offset, (long long)strlen("0 1:1 2:1 "));
    assert_zeroed(&ds);
    text = "0 4:1 5:1\n";
    assert_int_equal(pf_libsvm_parse_ids(text, strlen(text), "t", &m, 1, true, &ds, &err),
                     PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "more than max_ids 1 ids for embedding 'b'"));
    text = "0 8:1\n";
    assert_int_equal(pf_libsvm_parse_ids(text, strlen(text), "t", &m, 1, true, &ds, &err),
                     PF_ERR_FORMAT);
    assert_string_equal(err.message, "t: line 1: feature id 8 outside 1 .. 7 (ids of the model's "
                                     "embeddings 7, data.index_base 1)");
    text = "0 0:1 6:1\n";
    assert_int_equal(pf_libsvm_parse_ids(text, strlen(text), "t", &m, 0, true, &ds, &err), PF_OK);
    assert_true(ds.x[0] == 0 && ds.x[4] == 3);
    pf_dataset_deinit(&ds);
    m.n_embeddings = 0;
    assert_int_equal(pf_libsvm_parse_ids(text, strlen(text), "t", &m, 0, true, &ds, &err),
                     PF_ERR_INVALID);
    /* A model no spec could give is refused before it is read: too many features, a
     * feature of no rows or no id slots. */
    m.n_embeddings = PF_MAX_EMBEDDINGS + 1;
    assert_int_equal(pf_libsvm_parse_ids(text, strlen(text), "t", &m, 0, true, &ds, &err),
                     PF_ERR_INVALID);
    m.n_embeddings = 2;
    m.embeddings[1].max_ids = 0;
    assert_int_equal(pf_csv_parse_ids(text, strlen(text), "t", &m, true, &ds, &err),
                     PF_ERR_INVALID);
    m.embeddings[1].max_ids = 1;
    m.embeddings[0].vocab = 0;
    assert_int_equal(pf_libsvm_parse_ids(text, strlen(text), "t", &m, 0, true, &ds, &err),
                     PF_ERR_INVALID);
}

/* Parses text with 3 features and returns the status; message into err. */
static pf_status csv3(const char *text, bool classification, pf_dataset *ds, pf_error *err) {
    return pf_csv_parse(text, strlen(text), "t.csv", 3, classification, ds, err);
}

static void test_csv_messages(void **state) {
    (void)state;
    pf_dataset ds;
    pf_error err;
    const char *ragged = "label,a,b,c\n0,1,2,3\n\n1,1,2\n";
    assert_int_equal(csv3(ragged, true, &ds, &err), PF_ERR_FORMAT);
    assert_string_equal(err.message,
                        "t.csv: line 4: expected 4 fields (label + 3 features), got 3");
    assert_int_equal(err.offset, (long long)strlen("label,a,b,c\n0,1,2,3\n\n"));
    assert_zeroed(&ds);
    assert_int_equal(csv3("0,1,2,3,4\n", false, &ds, &err), PF_ERR_FORMAT);
    assert_string_equal(err.message,
                        "t.csv: line 1: expected 4 fields (target + 3 features), got 5");

    assert_int_equal(csv3("0,1,2,3\n1,1,x2,3\n", true, &ds, &err), PF_ERR_FORMAT);
    assert_string_equal(err.message, "t.csv: line 2, field 3: not a number: \"x2\"");
    assert_int_equal(csv3("0,1,2,3\n1,1,2,-inf\n", true, &ds, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "line 2, field 4: not a finite number"));
    assert_int_equal(csv3("0,1,2,3\n2.5,1,2,3\n", true, &ds, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "line 2: label 2.5 is not an integer"));
    assert_int_equal(csv3("", true, &ds, &err), PF_ERR_FORMAT);
    assert_string_equal(err.message, "t.csv: empty file");
    assert_int_equal(csv3("a,b\n\n", true, &ds, &err), PF_ERR_FORMAT);
    assert_string_equal(err.message, "t.csv: no data rows");

    /* The same non-integral target is fine for regression. */
    assert_int_equal(csv3("0,1,2,3\n2.5,1,2,3\n", false, &ds, &err), PF_OK);
    assert_int_equal(ds.n, 2);
    assert_int_equal(ds.num_classes, 0);
    assert_true(ds.y[1] == 2.5f);
    pf_dataset_deinit(&ds);

    /* num_classes is 1 + the largest label, even when some classes are absent. */
    assert_int_equal(csv3("7,1,2,3\n1,1,2,3\n", true, &ds, &err), PF_OK);
    assert_int_equal(ds.num_classes, 8);
    pf_dataset_deinit(&ds);

    /* The input need not be NUL-terminated: only len bytes are read. */
    const char *text = "0,1,2,34567";
    assert_int_equal(pf_csv_parse(text, 7, "t.csv", 3, true, &ds, &err), PF_OK);
    assert_int_equal(ds.n, 1);
    assert_true(ds.x[2] == 3.0f);
    pf_dataset_deinit(&ds);

    /* Many rows: the buffers grow. */
    size_t cap = 5000 * 16;
    char *big = malloc(cap);
    assert_non_null(big);
    size_t len = 0;
    for (int i = 0; i < 5000; i++)
        len += (size_t)snprintf(big + len, cap - len, "%d,%d,0,1\n", i % 10, i);
    assert_int_equal(pf_csv_parse(big, len, "big", 3, true, &ds, &err), PF_OK);
    assert_int_equal(ds.n, 5000);
    assert_int_equal(ds.num_classes, 10);
    for (int i = 0; i < 5000; i++)
        assert_true(ds.x[3 * i] == (float)i && ds.y[i] == (float)(i % 10));
    pf_dataset_deinit(&ds);
    free(big);

    assert_int_equal(pf_csv_parse("0,1", 3, NULL, 0, true, &ds, &err), PF_ERR_INVALID);
    assert_int_equal(pf_csv_load("/nonexistent/x.csv", 3, true, &ds, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, "/nonexistent/x.csv"));
}

/* --- CSV of categorical values ----------------------------------------------------------- */

/* Categorical CSV for a model with embeddings: "a" (vocab 3, 2 ids) takes integer ids, "b"
 * (vocab 4, 1 id) hashes any string into its 4 rows; the slots as for LIBSVM. */
static void test_csv_ids(void **state) {
    (void)state;
    pf_model_spec m = {.type = PF_MODEL_SOFTMAX, .outputs = 3, .n_embeddings = 2};
    m.embeddings[0] = (pf_embedding_spec){
        .name = "a", .vocab = 3, .dim = 4, .combiner = PF_COMBINE_SUM, .max_ids = 2, .hash = false};
    m.embeddings[1] = (pf_embedding_spec){
        .name = "b", .vocab = 4, .dim = 2, .combiner = PF_COMBINE_MEAN, .max_ids = 1, .hash = true};
    pf_dataset ds;
    pf_error err;
    const char *text = "click,a,b\n1,0|2,red\r\n0, 1 ,\n\n2,,blue \n";
    assert_int_equal(pf_csv_parse_ids(text, strlen(text), "t", &m, true, &ds, &err), PF_OK);
    assert_int_equal(ds.n, 3);
    assert_int_equal(ds.features, 6);
    assert_int_equal(ds.num_classes, 3);
    /* FNV-1a 64 of "red" is 0x89e9be1960f4c21c -> row 0 of 4; "blue" 0xc5ccd29bc2dda64d -> 1. */
    const float want[3][6] = {{0, 2, 1, 1, 0, 1}, {1, -1, 1, 0, -1, 0}, {-1, -1, 0, 0, 1, 1}};
    for (int i = 0; i < 3; i++) {
        assert_true(ds.y[i] == (float)(i == 0 ? 1 : i == 1 ? 0 : 2));
        for (int j = 0; j < 6; j++)
            if (ds.x[i * 6 + j] != want[i][j])
                fail_msg("example %d slot %d: %g, want %g", i, j, ds.x[i * 6 + j], want[i][j]);
    }
    pf_dataset_deinit(&ds);

    static const struct {
        const char *text, *message;
        long long offset;
    } bad[] = {
        {"1,3,x\n",
         "t: line 1, field 2: \"3\" is not an id of embedding 'a' (an integer 0 .. 2; "
         "set its hash for other values)",
         2},
        {"1,x1,x\n", "t: line 1, field 2: \"x1\" is not an id of embedding 'a'", 2},
        {"1,0|1|2,x\n", "t: line 1: more than max_ids 2 ids for embedding 'a'", 6},
        {"1,0||1,x\n", "t: line 1, field 2: an empty value", 4},
        {"0,1,x\n1,2\n", "t: line 2: expected 3 fields (label + one per embedding), got 2", 6},
        {"0,1,x\n-1,2,y\n", "t: line 2: label \"-1\" is outside [0, 1048576) (binary", 6},
        {"", "t: empty file", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(
            pf_csv_parse_ids(bad[i].text, strlen(bad[i].text), "t", &m, true, &ds, &err),
            PF_ERR_FORMAT);
        if (strncmp(err.message, bad[i].message, strlen(bad[i].message)) != 0 ||
            err.offset != bad[i].offset)
            fail_msg("%s: got '%s' at %lld", bad[i].message, err.message, err.offset);
        assert_zeroed(&ds);
    }
    /* Only len bytes are read. */
    text = "1,2,abc";
    assert_int_equal(pf_csv_parse_ids(text, strlen(text) - 1, "t", &m, true, &ds, &err), PF_OK);
    pf_dataset_deinit(&ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_valid_files),      cmocka_unit_test(test_csv_invalid_files),
        cmocka_unit_test(test_csv_messages),         cmocka_unit_test(test_libsvm_valid_files),
        cmocka_unit_test(test_libsvm_invalid_files), cmocka_unit_test(test_libsvm_messages),
        cmocka_unit_test(test_libsvm_ids),           cmocka_unit_test(test_csv_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
