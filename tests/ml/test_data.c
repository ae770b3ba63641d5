/* test_data.c - the IDX reader, the synthetic_linear generator, pf_dataset_load, the sampler
 * and allocation failure (test_data_text.c has the CSV and LIBSVM readers).
 *
 * Parser cases live in tests/data/idx/{valid,invalid}/ (pairs NAME.images + NAME.labels).
 * Every valid IDX pair encodes the same tiny data set (TINY_* below) in a different way:
 * plain, gzip, mixed, multi-member gzip.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "psflow/data.h"
#include "psflow/mem.h"
#include "psflow/rng.h"
#include "tests/support/counting_alloc.h"
#include "tests/support/data_files.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define MAX_CASES  128

/* The tiny IDX set: 3 images of 2x3 pixels, labels 2, 0, 1. */
#define TINY_N    3
#define TINY_ROWS 2
#define TINY_COLS 3
static const uint8_t TINY_PIXELS[TINY_N * TINY_ROWS * TINY_COLS] = {
    0, 255, 128, 1, 2, 3, 10, 20, 30, 40, 50, 60, 255, 254, 253, 0, 0, 7};
static const uint8_t TINY_LABELS[TINY_N] = {2, 0, 1};

/* --- helpers ------------------------------------------------------------------------------ */

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Tiny images and labels as IDX bytes: images [16 + 18], labels [8 + 3]. */
static void tiny_idx(uint8_t images[16 + sizeof TINY_PIXELS], uint8_t labels[8 + TINY_N]) {
    put_be32(images, 0x803);
    put_be32(images + 4, TINY_N);
    put_be32(images + 8, TINY_ROWS);
    put_be32(images + 12, TINY_COLS);
    memcpy(images + 16, TINY_PIXELS, sizeof TINY_PIXELS);
    put_be32(labels, 0x801);
    put_be32(labels + 4, TINY_N);
    memcpy(labels + 8, TINY_LABELS, TINY_N);
}

static void assert_tiny(const pf_dataset *ds) {
    assert_int_equal(ds->n, TINY_N);
    assert_int_equal(ds->features, TINY_ROWS * TINY_COLS);
    assert_int_equal(ds->num_classes, 3);
    for (size_t i = 0; i < sizeof TINY_PIXELS; i++)
        assert_true(ds->x[i] == (float)TINY_PIXELS[i] * (1.0f / 255.0f));
    assert_true(ds->x[1] == 1.0f);
    assert_true(ds->x[0] == 0.0f);
    for (int i = 0; i < TINY_N; i++)
        assert_true(ds->y[i] == (float)TINY_LABELS[i]);
}

static void assert_zeroed(const pf_dataset *ds) {
    assert_int_equal(ds->n, 0);
    assert_int_equal(ds->features, 0);
    assert_int_equal(ds->num_classes, 0);
    assert_null(ds->x);
    assert_null(ds->y);
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++)
        free(names[i]);
}

/* --- fixture: a temp dir holding the tiny set, plain and gzip-compressed ----------------- */

typedef struct fixture {
    char dir[256];
    char plain_images[320], plain_labels[320];
    char gz_images[320], gz_labels[320];
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof fx->dir, "%s/psflow_test_data_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    data_path_join(fx->plain_images, sizeof fx->plain_images, fx->dir, "tiny-images-idx3-ubyte");
    data_path_join(fx->plain_labels, sizeof fx->plain_labels, fx->dir, "tiny-labels-idx1-ubyte");
    data_path_join(fx->gz_images, sizeof fx->gz_images, fx->dir, "tiny-images-idx3-ubyte.gz");
    data_path_join(fx->gz_labels, sizeof fx->gz_labels, fx->dir, "tiny-labels-idx1-ubyte.gz");
    uint8_t images[16 + sizeof TINY_PIXELS], labels[8 + TINY_N];
    tiny_idx(images, labels);
    data_write(fx->plain_images, images, sizeof images);
    data_write(fx->plain_labels, labels, sizeof labels);
    data_write_gz(fx->gz_images, images, sizeof images);
    data_write_gz(fx->gz_labels, labels, sizeof labels);
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    unlink(fx->plain_images);
    unlink(fx->plain_labels);
    unlink(fx->gz_images);
    unlink(fx->gz_labels);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

/* --- IDX ---------------------------------------------------------------------------------- */

static void test_idx_generated(void **state) {
    fixture *fx = *state;
    pf_dataset ds;
    pf_error err;
    assert_int_equal(pf_idx_load(fx->plain_images, fx->plain_labels, &ds, &err), PF_OK);
    assert_tiny(&ds);
    pf_dataset_deinit(&ds);
    assert_zeroed(&ds);
    assert_int_equal(pf_idx_load(fx->gz_images, fx->gz_labels, &ds, &err), PF_OK);
    assert_tiny(&ds);
    pf_dataset_deinit(&ds);
    assert_int_equal(pf_idx_load(fx->gz_images, fx->plain_labels, &ds, &err), PF_OK);
    assert_tiny(&ds);
    pf_dataset_deinit(&ds);

    uint8_t images[16 + sizeof TINY_PIXELS], labels[8 + TINY_N];
    tiny_idx(images, labels);
    assert_int_equal(pf_idx_parse(images, sizeof images, labels, sizeof labels, &ds, &err), PF_OK);
    assert_tiny(&ds);
    pf_dataset_deinit(&ds);
    pf_dataset_deinit(&ds); /* safe on a zeroed dataset */
}

static void test_idx_valid_files(void **state) {
    (void)state;
    char dir[512], images[600], labels[600], file[300];
    data_path_join(dir, sizeof dir, PSFLOW_TEST_DATA, "idx/valid");
    char *names[MAX_CASES];
    int n = (int)data_files(dir, ".images", true, names, MAX_CASES);
    assert_true(n >= 4);
    for (int i = 0; i < n; i++) {
        snprintf(file, sizeof file, "%s.images", names[i]);
        data_path_join(images, sizeof images, dir, file);
        snprintf(file, sizeof file, "%s.labels", names[i]);
        data_path_join(labels, sizeof labels, dir, file);
        pf_dataset ds;
        pf_error err;
        pf_status st = pf_idx_load(images, labels, &ds, &err);
        if (st != PF_OK)
            print_error("%s: %s\n", names[i], err.message);
        assert_int_equal(st, PF_OK);
        assert_tiny(&ds);
        pf_dataset_deinit(&ds);
    }
    free_names(names, n);
}

static void test_idx_invalid_files(void **state) {
    (void)state;
    char dir[512], images[600], labels[600], file[300];
    data_path_join(dir, sizeof dir, PSFLOW_TEST_DATA, "idx/invalid");
    char *names[MAX_CASES];
    int n = (int)data_files(dir, ".images", true, names, MAX_CASES);
    static const char *const required[] = {
        "bad_image_magic", "bad_label_magic", "truncated_images", "truncated_labels",
        "trailing_images", "trailing_labels", "count_mismatch",   "zero_n",
        "zero_rows",       "zero_cols",       "huge_n",           "too_many_examples",
        "huge_dims",       "empty_images",    "empty_labels",     "corrupt_gzip",
        "truncated_gzip",  "gzip_bad_crc",    "swapped",          "max_dims"};
    for (size_t r = 0; r < sizeof required / sizeof *required; r++) {
        bool found = false;
        for (int i = 0; i < n; i++)
            found = found || strcmp(names[i], required[r]) == 0;
        if (!found)
            print_error("missing invalid IDX case %s\n", required[r]);
        assert_true(found);
    }
    for (int i = 0; i < n; i++) {
        snprintf(file, sizeof file, "%s.images", names[i]);
        data_path_join(images, sizeof images, dir, file);
        snprintf(file, sizeof file, "%s.labels", names[i]);
        data_path_join(labels, sizeof labels, dir, file);
        assert_true(file_exists(labels));
        pf_dataset ds;
        pf_error err;
        use_counting(-1);
        pf_status st = pf_idx_load(images, labels, &ds, &err);
        size_t largest = alloc_largest;
        use_libc();
        if (st != PF_ERR_FORMAT)
            print_error("%s: got %s (%s)\n", names[i], pf_strerror(st), err.message);
        assert_int_equal(st, PF_ERR_FORMAT);
        assert_true(err.message[0] != '\0');
        /* The message names the file at fault, whose path contains the case name. */
        assert_non_null(strstr(err.message, names[i]));
        assert_zeroed(&ds);
        /* A header claiming 2^26 images must not be believed before the bytes are there. */
        assert_true(largest <= (1u << 20));
    }
    free_names(names, n);
}

static void test_idx_messages(void **state) {
    fixture *fx = *state;
    pf_dataset ds;
    pf_error err;
    uint8_t images[1000] = {0}, labels[8 + TINY_N];
    tiny_idx(images, labels);

    /* Fashion-MNIST's header over 1000 bytes of data. */
    put_be32(images + 4, 60000);
    put_be32(images + 8, 28);
    put_be32(images + 12, 28);
    assert_int_equal(pf_idx_parse(images, sizeof images, labels, sizeof labels, &ds, &err),
                     PF_ERR_FORMAT);
    assert_string_equal(err.message, "images: truncated: expected 47040016 bytes, got 1000");
    assert_int_equal(err.offset, 1000);
    assert_zeroed(&ds);

    /* Trailing bytes: the offset is where the data should have ended. */
    tiny_idx(images, labels);
    assert_int_equal(
        pf_idx_parse(images, 16 + sizeof TINY_PIXELS + 5, labels, sizeof labels, &ds, &err),
        PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "trailing garbage: 5 bytes"));
    assert_int_equal(err.offset, 16 + sizeof TINY_PIXELS);

    /* Labels and images swapped. */
    assert_int_equal(
        pf_idx_parse(labels, sizeof labels, images, 16 + sizeof TINY_PIXELS, &ds, &err),
        PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "images: bad magic 0x00000801"));
    assert_non_null(strstr(err.message, "swapped"));
    assert_int_equal(err.offset, 0);

    /* Counts disagree. */
    put_be32(labels + 4, 2);
    assert_int_equal(pf_idx_parse(images, 16 + sizeof TINY_PIXELS, labels, 8 + 2, &ds, &err),
                     PF_ERR_FORMAT);
    assert_string_equal(err.message, "images has 3 images but labels has 2 labels");

    /* rows * cols = 2^32 would wrap to 0 in 32-bit arithmetic. */
    tiny_idx(images, labels);
    put_be32(images + 8, 65536);
    put_be32(images + 12, 65536);
    assert_int_equal(
        pf_idx_parse(images, 16 + sizeof TINY_PIXELS, labels, sizeof labels, &ds, &err),
        PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "65536x65536"));

    /* A file that does not exist: an I/O error naming the path. */
    char missing[400];
    data_path_join(missing, sizeof missing, fx->dir, "no-such-file");
    assert_int_equal(pf_idx_load(missing, fx->plain_labels, &ds, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, missing));
    assert_zeroed(&ds);
    assert_int_equal(pf_idx_load(fx->plain_images, missing, &ds, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, missing));
    /* A directory opens but cannot be read. */
    assert_int_equal(pf_idx_load(fx->dir, fx->plain_labels, &ds, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, fx->dir));

    /* Through pf_idx_load the message names the path. */
    char truncated[400];
    data_path_join(truncated, sizeof truncated, fx->dir, "truncated.gz");
    put_be32(images + 8, 28);
    put_be32(images + 12, 28);
    put_be32(images + 4, 60000);
    data_write_gz(truncated, images, sizeof images);
    assert_int_equal(pf_idx_load(truncated, fx->plain_labels, &ds, &err), PF_ERR_FORMAT);
    char expected[600];
    snprintf(expected, sizeof expected, "%s: truncated: expected 47040016 bytes, got 1000",
             truncated);
    assert_string_equal(err.message, expected);
    unlink(truncated);
}

static void test_idx_size_cap(void **state) {
    /* A 1 MiB gzip file of 257 MiB of zeros: refused once the read passes 256 MiB. */
    fixture *fx = *state;
    char path[400];
    data_path_join(path, sizeof path, fx->dir, "bomb.gz");
    static uint8_t zeros[1 << 20];
    gzFile f = gzopen(path, "wb1");
    assert_non_null(f);
    for (int i = 0; i < 257; i++)
        assert_int_equal(gzwrite(f, zeros, sizeof zeros), (int)sizeof zeros);
    assert_int_equal(gzclose(f), Z_OK);
    pf_dataset ds;
    pf_error err;
    use_counting(-1);
    pf_status st = pf_idx_load(path, fx->plain_labels, &ds, &err);
    size_t largest = alloc_largest;
    use_libc();
    unlink(path);
    assert_int_equal(st, PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "larger than the 256 MiB limit"));
    assert_true(largest <= ((size_t)256 << 20) + 1);
    assert_zeroed(&ds);
}

static void test_fashion_mnist(void **state) {
    (void)state;
    const char *const files[4] = {
        FMNIST_DIR "/train-images-idx3-ubyte.gz", FMNIST_DIR "/train-labels-idx1-ubyte.gz",
        FMNIST_DIR "/t10k-images-idx3-ubyte.gz", FMNIST_DIR "/t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) {
        if (!file_exists(files[i])) {
            print_message("skipping: %s is absent (Debian package dataset-fashion-mnist)\n",
                          files[i]);
            skip();
        }
    }
    for (int t = 0; t < 2; t++) {
        pf_dataset ds;
        pf_error err;
        pf_status st = pf_idx_load(files[2 * t], files[2 * t + 1], &ds, &err);
        if (st != PF_OK)
            print_error("%s\n", err.message);
        assert_int_equal(st, PF_OK);
        int64_t n = t == 0 ? 60000 : 10000;
        assert_int_equal(ds.n, n);
        assert_int_equal(ds.features, 784);
        assert_int_equal(ds.num_classes, 10);
        float lo = 1, hi = 0;
        for (int64_t i = 0; i < n * 784; i++) {
            lo = ds.x[i] < lo ? ds.x[i] : lo;
            hi = ds.x[i] > hi ? ds.x[i] : hi;
        }
        assert_true(lo == 0.0f && hi == 1.0f);
        /* Fashion-MNIST is balanced: n / 10 examples of every class. */
        int64_t per_class[10] = {0};
        for (int64_t i = 0; i < n; i++) {
            assert_true(ds.y[i] >= 0 && ds.y[i] <= 9 && ds.y[i] == floorf(ds.y[i]));
            per_class[(int)ds.y[i]]++;
        }
        for (int c = 0; c < 10; c++)
            assert_int_equal(per_class[c], n / 10);
        pf_dataset_deinit(&ds);
    }
}

/* --- synthetic_linear --------------------------------------------------------------------- */

static void test_synthetic(void **state) {
    (void)state;
    pf_dataset a, b, c;
    assert_int_equal(pf_synthetic_linear(2, 10, 0.1, 1000, 42, 1, &a), PF_OK);
    assert_int_equal(pf_synthetic_linear(2, 10, 0.1, 1000, 42, 1, &b), PF_OK);
    assert_int_equal(pf_synthetic_linear(2, 10, 0.1, 1000, 42, 2, &c), PF_OK);
    assert_int_equal(a.n, 1000);
    assert_int_equal(a.features, 1);
    assert_int_equal(a.num_classes, 0);
    assert_memory_equal(a.x, b.x, 1000 * sizeof(float));
    assert_memory_equal(a.y, b.y, 1000 * sizeof(float));
    assert_memory_not_equal(a.x, c.x, 1000 * sizeof(float));
    double sum = 0, sum2 = 0;
    for (int i = 0; i < 1000; i++) {
        assert_true(a.x[i] >= 0.0f && a.x[i] < 1.0f);
        double r = a.y[i] - (2.0 * a.x[i] + 10.0);
        sum += r;
        sum2 += r * r;
    }
    /* Residuals are N(0, 0.1^2): mean within 5 standard errors, sd within 20 percent. */
    assert_true(fabs(sum / 1000) < 5 * 0.1 / sqrt(1000));
    assert_true(fabs(sqrt(sum2 / 1000) - 0.1) < 0.02);
    pf_dataset_deinit(&c);
    assert_int_equal(pf_synthetic_linear(2, 10, 0.1, 1000, 43, 1, &c), PF_OK);
    assert_memory_not_equal(a.x, c.x, 1000 * sizeof(float));
    pf_dataset_deinit(&a);
    pf_dataset_deinit(&b);
    pf_dataset_deinit(&c);

    /* No noise: y is exactly w x + b; x does not depend on the noise level. */
    assert_int_equal(pf_synthetic_linear(-3, 0.5, 0, 100, 42, 1, &a), PF_OK);
    assert_int_equal(pf_synthetic_linear(2, 10, 0.1, 100, 42, 1, &b), PF_OK);
    assert_memory_equal(a.x, b.x, 100 * sizeof(float));
    for (int i = 0; i < 100; i++)
        assert_true(fabsf(a.y[i] - (-3.0f * a.x[i] + 0.5f)) < 1e-6f);
    pf_dataset_deinit(&a);
    pf_dataset_deinit(&b);

    assert_int_equal(pf_synthetic_linear(2, 10, 0.1, 0, 1, 1, &a), PF_ERR_INVALID);
    assert_zeroed(&a);
    assert_int_equal(pf_synthetic_linear(2, 10, -1, 10, 1, 1, &a), PF_ERR_INVALID);
    assert_int_equal(pf_synthetic_linear(NAN, 10, 0, 10, 1, 1, &a), PF_ERR_INVALID);
    assert_int_equal(pf_synthetic_linear(1e300, 0, 0, 10, 1, 1, &a), PF_ERR_RANGE);
    assert_zeroed(&a);
}

/* --- pf_dataset_load ---------------------------------------------------------------------- */

typedef struct spec_files {
    char train[2][400];
    char test[2][400];
} spec_files;

static void base_spec(pf_job_spec *spec, spec_files *f, pf_model_type type, int inputs,
                      int outputs) {
    memset(spec, 0, sizeof *spec);
    snprintf(spec->name, sizeof spec->name, "t");
    spec->model.type = type;
    spec->model.inputs = inputs;
    spec->model.outputs = outputs;
    spec->training.seed = 5;
    for (int i = 0; i < 2; i++) {
        spec->data.train[i] = f->train[i];
        spec->data.test[i] = f->test[i];
    }
}

static void test_dataset_load(void **state) {
    fixture *fx = *state;
    pf_job_spec spec;
    spec_files f;
    pf_dataset ds;
    pf_error err;

    /* idx: train and test, the test set absent. */
    snprintf(f.train[0], sizeof f.train[0], "%s", fx->gz_images);
    snprintf(f.train[1], sizeof f.train[1], "%s", fx->gz_labels);
    snprintf(f.test[0], sizeof f.test[0], "%s", fx->plain_images);
    snprintf(f.test[1], sizeof f.test[1], "%s", fx->plain_labels);
    base_spec(&spec, &f, PF_MODEL_SOFTMAX, 6, 3);
    spec.data.format = PF_DATA_IDX;
    spec.data.n_train = 2;
    spec.data.n_test = 2;
    assert_int_equal(pf_dataset_load(&spec, false, &ds, &err), PF_OK);
    assert_tiny(&ds);
    pf_dataset_deinit(&ds);
    assert_int_equal(pf_dataset_load(&spec, true, &ds, &err), PF_OK);
    assert_tiny(&ds);
    pf_dataset_deinit(&ds);
    spec.data.n_test = 0;
    assert_int_equal(pf_dataset_load(&spec, true, &ds, &err), PF_ERR_NOT_FOUND);
    assert_true(err.message[0] != '\0');
    assert_zeroed(&ds);

    /* Mismatches name the field. */
    spec.model.inputs = 100;
    assert_int_equal(pf_dataset_load(&spec, false, &ds, &err), PF_ERR_SPEC);
    assert_string_equal(err.message, "data has 6 features but model.inputs is 100");
    assert_string_equal(err.pointer, "/model/inputs");
    assert_zeroed(&ds);
    spec.model.inputs = 6;
    spec.model.outputs = 2;
    assert_int_equal(pf_dataset_load(&spec, false, &ds, &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/model/outputs");
    assert_non_null(strstr(err.message, "model.outputs is 2"));
    assert_zeroed(&ds);
    /* A linear model reads the labels as regression targets. */
    spec.model.type = PF_MODEL_LINEAR;
    spec.model.outputs = 1;
    assert_int_equal(pf_dataset_load(&spec, false, &ds, &err), PF_OK);
    pf_dataset_deinit(&ds);
    /* A missing file names its path and points at the list it came from. */
    snprintf(f.train[1], sizeof f.train[1], "%s/missing", fx->dir);
    assert_int_equal(pf_dataset_load(&spec, false, &ds, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, f.train[1]));
    assert_string_equal(err.pointer, "/data/train");

    /* csv: features come from model.inputs, classification from model.type. */
    data_path_join(f.train[0], sizeof f.train[0], PSFLOW_TEST_DATA, "csv/valid/basic.csv");
    base_spec(&spec, &f, PF_MODEL_MLP, 3, 3);
    spec.data.format = PF_DATA_CSV;
    spec.data.n_train = 1;
    assert_int_equal(pf_dataset_load(&spec, false, &ds, &err), PF_OK);
    assert_int_equal(ds.n, 3);
    assert_int_equal(ds.num_classes, 3);
    pf_dataset_deinit(&ds);
    assert_int_equal(pf_dataset_load(&spec, true, &ds, &err), PF_ERR_NOT_FOUND);
    spec.model.type = PF_MODEL_LINEAR;
    spec.model.outputs = 1;
    data_path_join(f.train[0], sizeof f.train[0], PSFLOW_TEST_DATA, "csv/valid/regression.csv");
    assert_int_equal(pf_dataset_load(&spec, false, &ds, &err), PF_OK);
    assert_int_equal(ds.num_classes, 0);
    pf_dataset_deinit(&ds);
    /* Regression targets cannot feed a classifier. */
    spec.model.type = PF_MODEL_SOFTMAX;
    spec.model.outputs = 10;
    assert_int_equal(pf_dataset_load(&spec, false, &ds, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "not an integer"));
    assert_string_equal(err.pointer, "/data/train");

    /* synthetic_linear: seed from training.seed, stream 1 train and 2 test, test n/5. */
    base_spec(&spec, &f, PF_MODEL_LINEAR, 1, 1);
    spec.data.format = PF_DATA_SYNTHETIC_LINEAR;
    spec.data.w = 2;
    spec.data.b = 10;
    spec.data.noise = 0.1;
    spec.data.n = 50;
    pf_dataset train, test, expect;
    assert_int_equal(pf_dataset_load(&spec, false, &train, &err), PF_OK);
    assert_int_equal(pf_dataset_load(&spec, true, &test, &err), PF_OK);
    assert_int_equal(train.n, 50);
    assert_int_equal(test.n, 10);
    assert_int_equal(pf_synthetic_linear(2, 10, 0.1, 50, 5, 1, &expect), PF_OK);
    assert_memory_equal(train.y, expect.y, 50 * sizeof(float));
    pf_dataset_deinit(&expect);
    assert_int_equal(pf_synthetic_linear(2, 10, 0.1, 10, 5, 2, &expect), PF_OK);
    assert_memory_equal(test.y, expect.y, 10 * sizeof(float));
    assert_memory_not_equal(test.y, train.y, 10 * sizeof(float));
    pf_dataset_deinit(&expect);
    pf_dataset_deinit(&train);
    pf_dataset_deinit(&test);
    spec.data.n = 3;
    assert_int_equal(pf_dataset_load(&spec, true, &test, &err), PF_OK);
    assert_int_equal(test.n, 1);
    pf_dataset_deinit(&test);
    spec.model.type = PF_MODEL_SOFTMAX;
    spec.model.outputs = 2;
    assert_int_equal(pf_dataset_load(&spec, false, &ds, &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/model/type");
    assert_zeroed(&ds);
}

/* --- sampler ------------------------------------------------------------------------------ */

/* Epoch e's permutation, written out independently of data.c. */
static void reference_perm(int64_t n, uint64_t seed, int64_t epoch, int64_t *perm) {
    pf_rng rng;
    pf_rng_init(&rng, seed, 1000 + (uint64_t)epoch);
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)pf_rng_below(&rng, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static void test_sampler_epochs(void **state) {
    (void)state;
    enum { N = 10, EPOCHS = 6 };
    pf_sampler *s = pf_sampler_create(N, 7, true);
    assert_non_null(s);
    int64_t perm[EPOCHS][N], ref[N];
    for (int e = 0; e < EPOCHS; e++) {
        bool seen[N] = {false};
        for (int i = 0; i < N; i++) {
            perm[e][i] = pf_sampler_index(s, (int64_t)e * N + i);
            assert_true(perm[e][i] >= 0 && perm[e][i] < N);
            assert_false(seen[perm[e][i]]); /* every index exactly once */
            seen[perm[e][i]] = true;
        }
        reference_perm(N, 7, e, ref);
        assert_memory_equal(perm[e], ref, sizeof ref);
        for (int d = 0; d < e; d++)
            assert_memory_not_equal(perm[e], perm[d], sizeof ref);
    }
    /* Same seed, asked in another order: same stream. Another seed: another stream. */
    pf_sampler *t = pf_sampler_create(N, 7, true);
    pf_sampler *u = pf_sampler_create(N, 8, true);
    assert_non_null(t);
    assert_non_null(u);
    bool differs = false;
    for (int e = EPOCHS - 1; e >= 0; e--) {
        for (int i = N - 1; i >= 0; i--) {
            assert_int_equal(pf_sampler_index(t, (int64_t)e * N + i), perm[e][i]);
            differs = differs || pf_sampler_index(u, (int64_t)e * N + i) != perm[e][i];
        }
    }
    assert_true(differs);
    assert_int_equal(pf_sampler_index(t, 3 * N + 4), perm[3][4]);
    assert_int_equal(pf_sampler_index(t, 0), perm[0][0]);
    assert_int_equal(pf_sampler_index(t, 3 * N + 4), perm[3][4]);
    pf_sampler_destroy(s);
    pf_sampler_destroy(t);
    pf_sampler_destroy(u);
    pf_sampler_destroy(NULL);

    /* shuffle == false: the identity every epoch; n == 1: always example 0. */
    s = pf_sampler_create(N, 7, false);
    assert_non_null(s);
    for (int64_t p = 0; p < 3 * N; p++)
        assert_int_equal(pf_sampler_index(s, p), p % N);
    pf_sampler_destroy(s);
    s = pf_sampler_create(1, 7, true);
    assert_non_null(s);
    for (int64_t p = 0; p < 5; p++)
        assert_int_equal(pf_sampler_index(s, p), 0);
    pf_sampler_destroy(s);
    assert_null(pf_sampler_create(0, 7, true));
}

static void test_sampler_uniform(void **state) {
    (void)state;
    /* Over 2000 epochs every example lands in every slot about 200 times (sd ~13);
     * an off-by-one in the shuffle (Sattolo's cycle, say) empties the diagonal. */
    enum { N = 10, EPOCHS = 2000 };
    pf_sampler *s = pf_sampler_create(N, 3, true);
    assert_non_null(s);
    int count[N][N] = {{0}};
    for (int64_t p = 0; p < (int64_t)EPOCHS * N; p++)
        count[p % N][pf_sampler_index(s, p)]++;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            assert_in_range(count[i][j], 120, 280);
    pf_sampler_destroy(s);
}

/* A dataset whose row i is {i, -i} with target i, so gathered rows name their example. */
static void index_dataset(pf_dataset *ds, int64_t n) {
    assert_int_equal(pf_synthetic_linear(1, 0, 0, n, 1, 1, ds), PF_OK);
    pf_free(ds->x);
    ds->features = 2;
    ds->x = pf_mallocarray((size_t)n * 2, sizeof(float));
    assert_non_null(ds->x);
    for (int64_t i = 0; i < n; i++) {
        ds->x[2 * i] = (float)i;
        ds->x[2 * i + 1] = (float)-i;
        ds->y[i] = (float)i;
    }
}

static void test_batch_gather_boundary(void **state) {
    (void)state;
    enum { N = 10 };
    pf_dataset ds;
    index_dataset(&ds, N);
    pf_sampler *s = pf_sampler_create(N, 11, true);
    assert_non_null(s);
    int64_t p0[N], p1[N];
    reference_perm(N, 11, 0, p0);
    reference_perm(N, 11, 1, p1);
    /* Positions 7..13 cross from epoch 0 into epoch 1. */
    float x[7 * 2], y[7];
    int32_t labels[7];
    pf_batch_gather(&ds, s, 7, 7, x, y, labels);
    const int64_t want[7] = {p0[7], p0[8], p0[9], p1[0], p1[1], p1[2], p1[3]};
    for (int k = 0; k < 7; k++) {
        assert_true(x[2 * k] == (float)want[k] && x[2 * k + 1] == (float)-want[k]);
        assert_true(y[k] == (float)want[k]);
        assert_int_equal(labels[k], want[k]);
    }
    /* Going back to epoch 0 regenerates its permutation. */
    pf_batch_gather(&ds, s, 0, 3, x, y, NULL);
    for (int k = 0; k < 3; k++)
        assert_true(y[k] == (float)p0[k]);
    pf_sampler_destroy(s);
    pf_dataset_deinit(&ds);
}

static void test_sharding(void **state) {
    (void)state;
    /* W workers with batch B read, at every step, exactly what one reader with batch W*B
     * reads, in task order: the equivalence sync training relies on (docs/design.md section 5). */
    enum { N = 10, W = 3, B = 4, STEPS = 21 };
    pf_dataset ds;
    index_dataset(&ds, N);
    pf_sampler *workers[W], *shared = pf_sampler_create(N, 99, true);
    pf_sampler *single = pf_sampler_create(N, 99, true);
    assert_non_null(shared);
    assert_non_null(single);
    for (int w = 0; w < W; w++) {
        workers[w] = pf_sampler_create(N, 99, true);
        assert_non_null(workers[w]);
    }
    int seen[N] = {0};
    for (int64_t step = 0; step < STEPS; step++) {
        float xw[W * B * 2], yw[W * B], xs[W * B * 2], ys[W * B], xh[W * B * 2], yh[W * B];
        int32_t lw[W * B], ls[W * B];
        for (int w = 0; w < W; w++) {
            int64_t start = pf_shard_position(step, W, w, B);
            pf_batch_gather(&ds, workers[w], start, B, xw + w * B * 2, yw + w * B, lw + w * B);
            pf_batch_gather(&ds, shared, start, B, xh + w * B * 2, yh + w * B, NULL);
        }
        pf_batch_gather(&ds, single, pf_shard_position(step, 1, 0, W * B), W * B, xs, ys, ls);
        assert_memory_equal(xw, xs, sizeof xs);
        assert_memory_equal(yw, ys, sizeof ys);
        assert_memory_equal(lw, ls, sizeof ls);
        assert_memory_equal(xh, xs, sizeof xs);
        assert_memory_equal(yh, ys, sizeof ys);
        for (int k = 0; k < W * B; k++)
            seen[ls[k]]++;
    }
    /* 21 steps of 12 read positions 0..251: 25 whole epochs and 2 examples of the 26th. */
    int total = 0;
    for (int i = 0; i < N; i++) {
        assert_in_range(seen[i], 25, 26);
        total += seen[i];
    }
    assert_int_equal(total, STEPS * W * B);
    for (int w = 0; w < W; w++)
        pf_sampler_destroy(workers[w]);
    pf_sampler_destroy(shared);
    pf_sampler_destroy(single);
    pf_dataset_deinit(&ds);
}

/* --- allocation failure ------------------------------------------------------------------- */

typedef pf_status (*load_fn)(const fixture *fx, pf_dataset *ds, pf_error *err);

static pf_status load_idx_gz(const fixture *fx, pf_dataset *ds, pf_error *err) {
    return pf_idx_load(fx->gz_images, fx->gz_labels, ds, err);
}

static pf_status parse_idx_tiny(const fixture *fx, pf_dataset *ds, pf_error *err) {
    (void)fx;
    uint8_t images[16 + sizeof TINY_PIXELS], labels[8 + TINY_N];
    tiny_idx(images, labels);
    return pf_idx_parse(images, sizeof images, labels, sizeof labels, ds, err);
}

static pf_status load_csv(const fixture *fx, pf_dataset *ds, pf_error *err) {
    (void)fx;
    char path[512];
    data_path_join(path, sizeof path, PSFLOW_TEST_DATA, "csv/valid/crlf_blank.csv");
    return pf_csv_load(path, 3, true, ds, err);
}

static pf_status parse_csv_rows(const fixture *fx, pf_dataset *ds, pf_error *err) {
    (void)fx;
    char text[4096];
    size_t len = 0;
    for (int i = 0; i < 200; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%d,1,2,3\n", i % 4);
    return pf_csv_parse(text, len, "rows", 3, true, ds, err);
}

static pf_status make_synthetic(const fixture *fx, pf_dataset *ds, pf_error *err) {
    (void)fx;
    (void)err;
    return pf_synthetic_linear(2, 10, 0.1, 100, 1, 1, ds);
}

static void test_failing_allocator(void **state) {
    fixture *fx = *state;
    static const load_fn loaders[] = {load_idx_gz, parse_idx_tiny, load_csv, parse_csv_rows,
                                      make_synthetic};
    for (size_t l = 0; l < sizeof loaders / sizeof *loaders; l++) {
        bool succeeded = false;
        for (long k = 0; k <= 64 && !succeeded; k++) {
            pf_dataset ds;
            pf_error err;
            pf_error_clear(&err);
            use_counting(k);
            pf_status st = loaders[l](fx, &ds, &err);
            use_libc();
            if (st == PF_OK) {
                assert_true(ds.n > 0 && ds.x && ds.y);
                pf_dataset_deinit(&ds);
                succeeded = true;
            } else {
                assert_int_equal(st, PF_ERR_NOMEM);
                assert_zeroed(&ds);
                assert_true(k < 64);
            }
            /* With no allocation allowed nothing can load. */
            assert_true(k > 0 || st == PF_ERR_NOMEM);
        }
        assert_true(succeeded);
    }
    /* The sampler reports failure as NULL. */
    for (long k = 0; k < 2; k++) {
        use_counting(k);
        pf_sampler *s = pf_sampler_create(100, 1, true);
        use_libc();
        assert_null(s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_generated),
        cmocka_unit_test(test_idx_valid_files),
        cmocka_unit_test(test_idx_invalid_files),
        cmocka_unit_test(test_idx_messages),
        cmocka_unit_test(test_idx_size_cap),
        cmocka_unit_test(test_fashion_mnist),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_dataset_load),
        cmocka_unit_test(test_sampler_epochs),
        cmocka_unit_test(test_sampler_uniform),
        cmocka_unit_test(test_batch_gather_boundary),
        cmocka_unit_test(test_sharding),
        cmocka_unit_test(test_failing_allocator),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
