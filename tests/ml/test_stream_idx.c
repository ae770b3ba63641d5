/* test_stream_idx.c - an IDX pair read as streams (stream.h, data_idx.c) against the same pair
 * loaded whole (pf_dataset_load): a plain and a gzip pair of 1500 images of 64x64 pixels, cut by
 * data.split_mb 1 into 6 record ranges. One stream gives exactly the whole-file examples, each
 * range's records in file order and the ranges in the epoch's split order, every record once
 * an epoch; 3 streams (and 8, more than the ranges by size) partition the records; leased
 * (dynamic) splits give their ranges in lease order. A truncated image file (plain: at open;
 * gzip: at the record it cuts), counts that differ, a label not below model.outputs and images
 * of another size are errors naming the file; a train list that is not one pair is refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "psflow/data.h"
#include "psflow/mem.h"
#include "psflow/spec.h"
#include "psflow/stream.h"
#include "tests/support/data_files.h"

#define N      1500 /* records */
#define SIDE   64   /* rows = cols: 4096 bytes an image, 256 images a MiB */
#define PIXELS (SIDE * SIDE)
#define RANGES 6 /* ceil(1500 / 256) with split_mb 1 */
#define SEED   7

enum { PLAIN, GZIP, KINDS };

static char dir[256];
static char images[KINDS][300], labels[KINDS][300];
static pf_dataset whole; /* the plain pair loaded whole: the reference */

static void make_temp_dir(char *out, size_t size) {
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(out, size, "%s/psflow_test_stream_idx_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_true(n > 0 && (size_t)n < size);
    assert_non_null(mkdtemp(out));
}

static void be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* An image file of n records (its header claiming `claim`), `len` bytes of it kept; pixels 0
 * and 1 of record i hold i, the others a pattern of i and the pixel. */
static uint8_t *image_bytes(int n, uint32_t claim, size_t *len) {
    size_t size = 16 + (size_t)n * PIXELS;
    uint8_t *b = malloc(size);
    be32(b, 0x803);
    be32(b + 4, claim);
    be32(b + 8, SIDE);
    be32(b + 12, SIDE);
    for (int i = 0; i < n; i++) {
        uint8_t *p = b + 16 + (size_t)i * PIXELS;
        for (int k = 0; k < PIXELS; k++)
            p[k] = (uint8_t)((k * 13 + i * 7) % 256);
        p[0] = (uint8_t)(i % 256);
        p[1] = (uint8_t)(i / 256);
    }
    *len = size;
    return b;
}

static uint8_t *label_bytes(int n, uint32_t claim, int bad_at, size_t *len) {
    uint8_t *b = malloc(8 + (size_t)n);
    be32(b, 0x801);
    be32(b + 4, claim);
    for (int i = 0; i < n; i++)
        b[8 + i] = (uint8_t)(i == bad_at ? 10 : (i * 7) % 10);
    *len = 8 + (size_t)n;
    return b;
}

static void write_pair(const char *img, const char *lab, int n, uint32_t claim_images,
                       size_t cut_images, uint32_t claim_labels, int n_labels, int bad_label,
                       bool gz) {
    size_t len;
    uint8_t *b = image_bytes(n, claim_images, &len);
    if (cut_images)
        len = cut_images;
    (gz ? data_write_gz : data_write)(img, b, len);
    free(b);
    b = label_bytes(n_labels, claim_labels, bad_label, &len);
    (gz ? data_write_gz : data_write)(lab, b, len);
    free(b);
}

static void path_in(char *out, const char *name) {
    data_path_join(out, 300, dir, name);
}

/* A job spec over the pair; data_extra ends in ", " when not empty. */
static pf_status make_spec(pf_job_spec *spec, const char *img, const char *lab, bool streaming,
                           const char *data_extra, const char *mode, int inputs, pf_error *err) {
    char json[4096];
    snprintf(json, sizeof json,
             "{\"name\": \"s\", \"replicas\": {\"ps\": 1, \"worker\": 1},"
             " \"model\": {\"type\": \"softmax\", \"outputs\": 10, \"inputs\": %d},"
             " \"data\": {\"format\": \"idx\", \"streaming\": %s, %s"
             "\"train\": [\"%s\", \"%s\"], \"test\": [\"%s\", \"%s\"]},"
             " \"training\": {\"mode\": \"%s\", \"batch_size\": 4, \"max_steps\": 10,"
             " \"seed\": %d}}",
             inputs, streaming ? "true" : "false", data_extra, img, lab, img, lab, mode, SEED);
    return pf_job_spec_parse(json, strlen(json), spec, err);
}

static pf_stream_source *open_source(int kind, const char *data_extra, const char *mode,
                                     int streams) {
    pf_job_spec spec;
    pf_error err;
    if (make_spec(&spec, images[kind], labels[kind], true, data_extra, mode, PIXELS, &err) != PF_OK)
        fail_msg("spec: %s", err.message);
    pf_stream_source *s = NULL;
    pf_status st = pf_stream_open(&spec, streams, 1, &s, &err);
    pf_job_spec_deinit(&spec);
    if (st != PF_OK)
        fail_msg("open: %s", err.message);
    return s;
}

static int setup(void **state) {
    (void)state;
    make_temp_dir(dir, sizeof dir);
    path_in(images[PLAIN], "train-images-idx3-ubyte");
    path_in(labels[PLAIN], "train-labels-idx1-ubyte");
    path_in(images[GZIP], "train-images-idx3-ubyte.gz");
    path_in(labels[GZIP], "train-labels-idx1-ubyte.gz");
    for (int k = 0; k < KINDS; k++)
        write_pair(images[k], labels[k], N, N, 0, N, N, -1, k == GZIP);
    pf_job_spec spec;
    pf_error err;
    pf_status st = make_spec(&spec, images[PLAIN], labels[PLAIN], false, "", "sync", PIXELS, &err);
    if (st == PF_OK)
        st = pf_dataset_load(&spec, false, &whole, &err);
    pf_job_spec_deinit(&spec);
    if (st != PF_OK || whole.n != N || whole.features != PIXELS) {
        print_error("reference: %s\n", err.message);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pf_dataset_deinit(&whole);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

/* The record an example holds (pixels 0 and 1), checked against the reference. */
static int record_of(const float *x, float y) {
    int id = (int)(x[0] * 255.0f + 0.5f) + 256 * (int)(x[1] * 255.0f + 0.5f);
    assert_true(id >= 0 && id < N);
    assert_memory_equal(x, whole.x + (size_t)id * PIXELS, PIXELS * sizeof(float));
    assert_true(y == whole.y[id]);
    return id;
}

/* One stream: epochs 0 and 1 are the ranges [N r / RANGES, N (r + 1) / RANGES) in the split
 * order of each epoch, the records of each in file order. */
static void check_one_stream(int kind) {
    pf_stream_source *s = open_source(kind, "\"split_mb\": 1, ", "sync", 1);
    assert_int_equal(pf_stream_splits(s), RANGES);
    assert_int_equal(pf_stream_files(s), 2);
    assert_int_equal(pf_stream_features(s), PIXELS);
    float *x = malloc(100 * PIXELS * sizeof(float)), y[100];
    int expect[N], at = 0;
    int64_t p = 0;
    pf_error err;
    for (int epoch = 0; epoch < 2; epoch++) {
        int order[RANGES];
        pf_stream_split_order(SEED, 0, epoch, RANGES, order);
        at = 0;
        for (int r = 0; r < RANGES; r++)
            for (int id = N * order[r] / RANGES; id < N * (order[r] + 1) / RANGES; id++)
                expect[at++] = id;
        assert_int_equal(at, N);
        for (int i = 0; i < N; i += 100, p += 100) {
            assert_int_equal(pf_stream_gather(s, p, 100, x, y, NULL, &err), PF_OK);
            for (int k = 0; k < 100; k++)
                assert_int_equal(record_of(x + (size_t)k * PIXELS, y[k]), expect[i + k]);
        }
    }
    /* back into epoch 0 (a rollback): what was read there */
    int order[RANGES];
    pf_stream_split_order(SEED, 0, 0, RANGES, order);
    assert_int_equal(pf_stream_gather(s, 0, 1, x, y, NULL, &err), PF_OK);
    assert_int_equal(record_of(x, y[0]), N * order[0] / RANGES);
    pf_stream_close(s);
    free(x);
}

static void test_one_stream(void **state) {
    (void)state;
    check_one_stream(PLAIN);
    check_one_stream(GZIP);
}

/* `streams` streams (blocks of 1): each stream's first epoch holds records none of the others
 * holds, all of them together, and its second epoch the same records again. */
static void check_partition(int kind, const char *data_extra, int streams, int splits) {
    pf_stream_source *s = open_source(kind, data_extra, "sync", streams);
    assert_int_equal(pf_stream_splits(s), splits);
    char seen[N] = {0};
    int total = 0;
    float *x = malloc(PIXELS * sizeof(float)), y;
    pf_error err;
    for (int j = 0; j < streams; j++) {
        int mine = 0;
        /* its ranges: j, j + streams, ...; their sizes tell its epoch's length */
        for (int r = j; r < splits; r += streams)
            mine += N * (r + 1) / splits - N * r / splits;
        char again[N] = {0};
        for (int q = 0; q < 2 * mine; q++) {
            assert_int_equal(pf_stream_gather(s, (int64_t)q * streams + j, 1, x, &y, NULL, &err),
                             PF_OK);
            int id = record_of(x, y);
            if (q < mine) {
                assert_false(seen[id]);
                seen[id] = 1;
                total++;
            } else {
                assert_true(seen[id]);
                assert_false(again[id]);
                again[id] = 1;
            }
        }
    }
    assert_int_equal(total, N);
    pf_stream_close(s);
    free(x);
}

static void test_streams_partition(void **state) {
    (void)state;
    for (int k = 0; k < KINDS; k++) {
        check_partition(k, "\"split_mb\": 1, ", 3, RANGES);
        check_partition(k, "", 8, 8); /* one range by size: cut finer, one per stream */
    }
}

/* Leased splits are read in lease order, each reported done once its records were taken. */
static void test_leased(void **state) {
    (void)state;
    pf_stream_source *s =
        open_source(GZIP, "\"split_mb\": 1, \"splits\": \"dynamic\", ", "async", 4);
    assert_true(pf_stream_leased(s));
    assert_int_equal(pf_stream_splits(s), RANGES);
    pf_error err;
    const uint32_t lease[] = {4, 1};
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(pf_stream_lease_add(s, lease[i], 0, &err), PF_OK);
    float *x = malloc(N * PIXELS * sizeof(float)), y[N];
    int got = 0, n_done = 0;
    pf_stream_split_done done[4];
    assert_int_equal(pf_stream_take(s, N, x, y, NULL, &got, done, 4, &n_done, &err), PF_OK);
    assert_int_equal(got, 2 * (N / RANGES));
    assert_int_equal(n_done, 2);
    int at = 0;
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(done[i].split, lease[i]);
        for (int id = N * (int)lease[i] / RANGES; id < N * ((int)lease[i] + 1) / RANGES; id++) {
            assert_int_equal(record_of(x + (size_t)at * PIXELS, y[at]), id);
            at++;
        }
    }
    pf_stream_close(s);
    free(x);
}

/* Opens a stream over the pair; PF_OK, or the error of the open in err. */
static pf_status try_open(const char *img, const char *lab, int inputs, pf_stream_source **s,
                          pf_error *err) {
    pf_job_spec spec;
    if (make_spec(&spec, img, lab, true, "", "sync", inputs, err) != PF_OK)
        fail_msg("spec: %s", err->message);
    pf_status st = pf_stream_open(&spec, 1, 1, s, err);
    pf_job_spec_deinit(&spec);
    return st;
}

/* Reads on from position 0 until an error, which must be PF_ERR_FORMAT; the position it came
 * at. */
static int read_until_error(pf_stream_source *s, pf_error *err) {
    float *x = malloc(PIXELS * sizeof(float)), y;
    int p = 0;
    pf_status st = PF_OK;
    while (p < 2 * N && (st = pf_stream_gather(s, p, 1, x, &y, NULL, err)) == PF_OK)
        p++;
    free(x);
    assert_int_equal(st, PF_ERR_FORMAT);
    return p;
}

static void assert_names(const pf_error *err, const char *path, const char *what) {
    if (!strstr(err->message, path) || !strstr(err->message, what))
        fail_msg("'%s' does not name %s and '%s'", err->message, path, what);
}

static void test_errors(void **state) {
    (void)state;
    char img[300], lab[300];
    pf_stream_source *s = NULL;
    pf_error err;

    /* a plain image file cut inside record 700: refused at open */
    path_in(img, "cut-images");
    path_in(lab, "cut-labels");
    write_pair(img, lab, N, N, 16 + 700 * PIXELS + 100, N, N, -1, false);
    assert_int_equal(try_open(img, lab, PIXELS, &s, &err), PF_ERR_FORMAT);
    assert_null(s);
    assert_names(&err, img, "record 700 of 1500");

    /* gzip: its length shows at the record it cuts; the records before it are read */
    path_in(img, "cut-images.gz");
    path_in(lab, "cut-labels.gz");
    write_pair(img, lab, N, N, 16 + 700 * PIXELS + 100, N, N, -1, true);
    assert_int_equal(try_open(img, lab, PIXELS, &s, &err), PF_OK);
    assert_int_equal(read_until_error(s, &err), 700);
    assert_names(&err, img, "record 700 of 1500");
    pf_stream_close(s);

    /* gzip data cut short (the compressed stream itself) */
    size_t len;
    char *gz = data_read(images[GZIP], 64u << 20, &len);
    path_in(img, "short-images.gz");
    data_write(img, gz, len / 2);
    pf_free(gz);
    assert_int_equal(try_open(img, labels[GZIP], PIXELS, &s, &err), PF_OK);
    int p = read_until_error(s, &err);
    assert_true(p > 0 && p < N);
    assert_names(&err, img, "record");
    pf_stream_close(s);

    /* counts that differ */
    path_in(img, "count-images");
    path_in(lab, "count-labels");
    write_pair(img, lab, N, N, 0, N - 1, N - 1, -1, false);
    assert_int_equal(try_open(img, lab, PIXELS, &s, &err), PF_ERR_FORMAT);
    assert_names(&err, img, "1500 images");
    assert_names(&err, lab, "1499 labels");

    /* a label not below model.outputs, at record 900 */
    path_in(img, "label-images.gz");
    path_in(lab, "label-labels.gz");
    write_pair(img, lab, N, N, 0, N, N, 900, true);
    assert_int_equal(try_open(img, lab, PIXELS, &s, &err), PF_OK);
    assert_int_equal(read_until_error(s, &err), 900);
    assert_names(&err, lab, "record 900: label 10");
    pf_stream_close(s);

    /* images and labels swapped; images of another size than model.inputs */
    assert_int_equal(try_open(labels[PLAIN], images[PLAIN], PIXELS, &s, &err), PF_ERR_FORMAT);
    assert_names(&err, labels[PLAIN], "bad magic");
    assert_int_equal(try_open(images[PLAIN], labels[PLAIN], 784, &s, &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/model/inputs");
}

/* A train list that is not one pair: refused by the spec, and by the stream for a spec that
 * was not checked. */
static void test_one_pair(void **state) {
    (void)state;
    char json[2048];
    snprintf(json, sizeof json,
             "{\"name\": \"s\", \"replicas\": {\"ps\": 1, \"worker\": 1},"
             " \"model\": {\"type\": \"softmax\", \"outputs\": 10, \"inputs\": %d},"
             " \"data\": {\"format\": \"idx\", \"streaming\": true, \"train\": [\"%s\"],"
             " \"test\": [\"%s\", \"%s\"]}}",
             PIXELS, dir, images[PLAIN], labels[PLAIN]);
    pf_job_spec spec;
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), &spec, &err), PF_ERR_SPEC);
    assert_string_equal(err.pointer, "/data/train");
    assert_non_null(strstr(err.message, "no folders or patterns"));

    assert_int_equal(make_spec(&spec, images[PLAIN], labels[PLAIN], true, "", "sync", PIXELS, &err),
                     PF_OK);
    spec.data.n_train = 1;
    pf_stream_source *s = NULL;
    assert_int_equal(pf_stream_open(&spec, 1, 1, &s, &err), PF_ERR_SPEC);
    assert_null(s);
    assert_string_equal(err.pointer, "/data/train");
    assert_non_null(strstr(err.message, "folders and patterns are not expanded"));
    spec.data.n_train = 2;
    pf_job_spec_deinit(&spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_stream), cmocka_unit_test(test_streams_partition),
        cmocka_unit_test(test_leased),     cmocka_unit_test(test_errors),
        cmocka_unit_test(test_one_pair),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
