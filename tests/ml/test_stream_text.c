/* test_stream_text.c - csv and libsvm training files read as streams (stream.h, data_text.c)
 * against the same files loaded whole (pf_csv_load, pf_libsvm_load): 4 files of each format,
 * one gzip, headers, blank lines, comments and "\r\n" lines, dealt to 2 and 9 streams (plain
 * files then cut into byte ranges); each stream's first epoch holds its files' examples
 * exactly once, equal to the whole-file reader's; jumping back and far ahead gives what
 * reading on gives; with models of embeddings (csv cells of ids and hashed strings, libsvm
 * ids) one stream reads the files in the split order; a bad line names file, line (or byte
 * offset in a later range) and column; data.on_error skip counts bad lines; a line longer
 * than the limit is refused without a bigger buffer, and the next line reads.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ml/data_internal.h"
#include "psflow/data.h"
#include "psflow/mem.h"
#include "psflow/spec.h"
#include "psflow/stream.h"
#include "tests/support/counting_alloc.h"
#include "tests/support/data_files.h"

#define FILES 4
#define ROWS  700 /* per file */

enum { CSV, LIBSVM, KINDS };

static char dir[256];
static char *paths[KINDS][FILES];
static pf_dataset files[KINDS][FILES]; /* each file loaded whole: the reference */
static const char *const ext[KINDS] = {"csv", "svm"};
static const int inputs[KINDS] = {4, 6};

static void make_temp_dir(char *out, size_t size) {
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(out, size, "%s/psflow_test_stream_text_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_true(n > 0 && (size_t)n < size);
    assert_non_null(mkdtemp(out));
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* Text of `rows` examples of kind k from global row `first` on: the first number of each
 * example (csv field 2, libsvm feature 1) is its row, which tells examples apart. */
static char *make_text(int k, int file, int64_t first, int rows, size_t *len) {
    size_t cap = (size_t)rows * 96 + 256, at = 0;
    char *t = malloc(cap);
    uint64_t s = 77 + (uint64_t)file;
    const char *eol = file == 2 ? "\r\n" : "\n";
    if (k == CSV)
        at += (size_t)snprintf(t + at, cap - at, "%slabel,a,b,c,d%s", file == 1 ? "\n" : "", eol);
    for (int r = 0; r < rows; r++) {
        int64_t id = first + r;
        int label = (int)(id % 3);
        if (lcg(&s) % 17 == 0)
            at += (size_t)snprintf(t + at, cap - at, "%s", k == CSV ? "  \n" : "# note\n");
        if (k == CSV)
            at += (size_t)snprintf(t + at, cap - at, "%d,%lld,%.6g, %d ,%de-3%s", label,
                                   (long long)id, (double)(lcg(&s) % 10000) / 97.0,
                                   (int)(lcg(&s) % 200) - 100, (int)(lcg(&s) % 50), eol);
        else {
            at += (size_t)snprintf(t + at, cap - at, "%d 1:%lld", label, (long long)id);
            for (int f = 2; f <= 6; f++)
                if (lcg(&s) % 2)
                    at += (size_t)snprintf(t + at, cap - at, " %d:%.5g", f,
                                           (double)(lcg(&s) % 1000) / 7.0 - 50);
            at += (size_t)snprintf(t + at, cap - at, "%s%s", r % 5 == 0 ? " # c" : "", eol);
        }
    }
    *len = at;
    return t;
}

static int setup(void **state) {
    (void)state;
    make_temp_dir(dir, sizeof dir);
    pf_error err;
    for (int k = 0; k < KINDS; k++) {
        char sub[300];
        snprintf(sub, sizeof sub, "%s/%s", dir, ext[k]);
        if (mkdir(sub, 0700) != 0)
            return -1;
        for (int i = 0; i < FILES; i++) {
            char p[512];
            snprintf(p, sizeof p, "%s/part-%d.%s%s", sub, i, ext[k], i == 3 ? ".gz" : "");
            size_t len;
            char *text = make_text(k, i, (int64_t)i * ROWS, ROWS, &len);
            if (i == 3)
                data_write_gz(p, text, len);
            else
                data_write(p, text, len);
            free(text);
            paths[k][i] = strdup(p);
            pf_status st = k == CSV ? pf_csv_load(p, inputs[k], true, &files[k][i], &err)
                                    : pf_libsvm_load(p, inputs[k], 1, true, &files[k][i], &err);
            if (st != PF_OK || files[k][i].n != ROWS) {
                print_error("%s: %s\n", p, err.message);
                return -1;
            }
        }
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int k = 0; k < KINDS; k++)
        for (int i = 0; i < FILES; i++) {
            pf_dataset_deinit(&files[k][i]);
            free(paths[k][i]);
        }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

/* A job spec of kind k over `train` (a JSON array); model and data_extra as given (each ending
 * in ", " when not empty). */
static void make_spec(pf_job_spec *spec, int k, const char *model, const char *data_extra,
                      const char *train, uint64_t seed) {
    char json[4096];
    char dense[128];
    snprintf(dense, sizeof dense, "\"type\": \"softmax\", \"outputs\": 3, \"inputs\": %d",
             inputs[k]);
    snprintf(json, sizeof json,
             "{\"name\": \"s\", \"replicas\": {\"ps\": 1, \"worker\": 1},"
             " \"model\": {%s}, \"data\": {\"format\": \"%s\", \"streaming\": true, %s"
             "\"train\": %s, \"test\": [\"t\"]},"
             " \"training\": {\"mode\": \"sync\", \"batch_size\": 4, \"max_steps\": 10,"
             " \"seed\": %llu}}",
             model ? model : dense, k == CSV ? "csv" : "libsvm", data_extra, train,
             (unsigned long long)seed);
    pf_error err;
    if (pf_job_spec_parse(json, strlen(json), spec, &err) != PF_OK)
        fail_msg("spec: %s", err.message);
}

static pf_stream_source *open_source(int k, const char *model, const char *data_extra,
                                     const char *train, int streams, int block, uint64_t seed) {
    pf_job_spec spec;
    make_spec(&spec, k, model, data_extra, train, seed);
    pf_stream_source *s = NULL;
    pf_error err;
    pf_status st = pf_stream_open(&spec, streams, block, &s, &err);
    pf_job_spec_deinit(&spec);
    if (st != PF_OK)
        fail_msg("open: %s", err.message);
    return s;
}

/* The folder of kind k's files: they expand in name order, part-0 .. part-3. */
static void all_files(int k, char *train, size_t size) {
    snprintf(train, size, "[\"%s/%s\"]", dir, ext[k]);
}

/* Stream j's example q (blocks of 1). */
static void at_stream(pf_stream_source *s, int streams, int j, int64_t q, float *x, float *y) {
    pf_error err;
    pf_status st = pf_stream_gather(s, q * streams + j, 1, x, y, NULL, &err);
    if (st != PF_OK)
        fail_msg("stream %d, q %lld: %s", j, (long long)q, err.message);
}

/* Every stream's first epoch (up to the first example seen again) holds examples of the
 * reference, none twice, all of them over the streams; epoch 2 is the same examples; reading
 * back and far ahead on another source gives what reading on gave. */
static void check_kind(int k, int streams) {
    char train[2048];
    all_files(k, train, sizeof train);
    pf_stream_source *s = open_source(k, NULL, "", train, streams, 1, 5);
    int w = inputs[k];
    assert_int_equal(pf_stream_features(s), w);
    if (streams > FILES)
        assert_true(pf_stream_splits(s) >= streams);
    int total = FILES * ROWS, seen_all = 0;
    char *seen = calloc((size_t)total, 1);
    float *x = malloc((size_t)w * sizeof(float)), y;
    float *got[16];
    int64_t got_n[16];
    for (int j = 0; j < streams; j++) {
        char *mine = calloc((size_t)total, 1);
        int64_t n = 0, cap = 5 * total;
        got[j] = malloc((size_t)cap * (size_t)(w + 1) * sizeof(float));
        for (int64_t q = 0;; q++) {
            at_stream(s, streams, j, q, x, &y);
            int id = (int)x[0];
            assert_true(id >= 0 && id < total);
            const pf_dataset *d = &files[k][id / ROWS];
            assert_memory_equal(x, d->x + (size_t)(id % ROWS) * (size_t)w,
                                (size_t)w * sizeof(float));
            assert_true(y == d->y[id % ROWS]);
            if (mine[id]) { /* the next epochs: three more, each of the same examples */
                assert_true(n > 0);
                for (int64_t r = q; r < 4 * n; r++)
                    at_stream(s, streams, j, r, got[j] + (size_t)r * (size_t)(w + 1), &y);
                for (int64_t r = q; r < 4 * n; r++)
                    assert_true(mine[(int)got[j][(size_t)r * (size_t)(w + 1)]]);
                got_n[j] = n;
                break;
            }
            memcpy(got[j] + (size_t)q * (size_t)(w + 1), x, (size_t)w * sizeof(float));
            got[j][(size_t)q * (size_t)(w + 1) + (size_t)w] = y;
            mine[id] = 1;
            assert_false(seen[id]);
            seen[id] = 1;
            seen_all++;
            n++;
        }
        free(mine);
    }
    assert_int_equal(seen_all, total);
    pf_stream_close(s);

    /* another source, read out of order: back, far ahead (past the read-ahead ring), back */
    s = open_source(k, NULL, "", train, streams, 1, 5);
    for (int j = 0; j < streams; j++) {
        int64_t n = got_n[j];
        /* with 2 streams 4n - 1 lies past the ring of 4096 examples: a seek, not a read on */
        const int64_t qs[] = {n - 1, 3, n / 2 + 1, 0, 4 * n - 1, n + 2, 1, 3 * n, n - 2, n / 3};
        for (size_t i = 0; i < sizeof qs / sizeof *qs; i++) {
            at_stream(s, streams, j, qs[i], x, &y);
            assert_memory_equal(x, got[j] + (size_t)qs[i] * (size_t)(w + 1),
                                (size_t)w * sizeof(float));
        }
        free(got[j]);
    }
    pf_stream_close(s);
    free(seen);
    free(x);
}

static void test_csv_streams(void **state) {
    (void)state;
    check_kind(CSV, 2);
    check_kind(CSV, 9);
}

static void test_libsvm_streams(void **state) {
    (void)state;
    check_kind(LIBSVM, 2);
    check_kind(LIBSVM, 9);
}

/* Models with embeddings: one stream reads whole files in the split order of epoch 0. */
static void check_ids(int k, const char *model) {
    char train[2048];
    all_files(k, train, sizeof train);
    pf_job_spec spec;
    make_spec(&spec, k, model, "", train, 3);
    pf_dataset whole[FILES];
    pf_error err;
    for (int i = 0; i < FILES; i++) {
        pf_status st = k == CSV
                           ? pf_csv_load_ids(paths[k][i], &spec.model, true, &whole[i], &err)
                           : pf_libsvm_load_ids(paths[k][i], &spec.model, 1, true, &whole[i], &err);
        if (st != PF_OK)
            fail_msg("%s", err.message);
    }
    pf_stream_source *s = NULL;
    assert_int_equal(pf_stream_open(&spec, 1, 3, &s, &err), PF_OK);
    int w = pf_model_input_width(&spec.model);
    assert_int_equal(pf_stream_features(s), w);
    assert_int_equal(pf_stream_splits(s), FILES);
    int order[FILES];
    pf_stream_split_order(3, 0, 0, FILES, order);
    float *x = malloc((size_t)ROWS * (size_t)w * sizeof(float)), *y = malloc(ROWS * sizeof(float));
    int64_t p = 0;
    for (int i = 0; i < FILES; i++, p += ROWS) {
        const pf_dataset *d = &whole[order[i]];
        assert_int_equal(d->n, ROWS);
        assert_int_equal(pf_stream_gather(s, p, ROWS, x, y, NULL, &err), PF_OK);
        assert_memory_equal(x, d->x, (size_t)ROWS * (size_t)w * sizeof(float));
        assert_memory_equal(y, d->y, ROWS * sizeof(float));
    }
    pf_stream_close(s);
    for (int i = 0; i < FILES; i++)
        pf_dataset_deinit(&whole[i]);
    pf_job_spec_deinit(&spec);
    free(x);
    free(y);
}

static void test_ids(void **state) {
    (void)state;
    /* csv: a cell of integer ids (the row's class), three hashed strings (the numbers) */
    check_ids(CSV, "\"type\": \"softmax\", \"outputs\": 3, \"embeddings\": ["
                   "{\"name\": \"a\", \"vocab\": 3000, \"dim\": 2},"
                   "{\"name\": \"b\", \"vocab\": 50, \"dim\": 2, \"hash\": true},"
                   "{\"name\": \"c\", \"vocab\": 50, \"dim\": 2, \"hash\": true},"
                   "{\"name\": \"d\", \"vocab\": 50, \"dim\": 2, \"hash\": true}]");
    /* libsvm: feature ids 1..6 over two embeddings */
    check_ids(LIBSVM, "\"type\": \"softmax\", \"outputs\": 3, \"embeddings\": ["
                      "{\"name\": \"a\", \"vocab\": 1, \"dim\": 2},"
                      "{\"name\": \"b\", \"vocab\": 5, \"dim\": 2, \"max_ids\": 5}]");
}

/* Writes path with `lines` (joined by "\n"). */
static void write_lines(const char *path, const char *const *lines, int n, bool gz) {
    char text[8192];
    size_t at = 0;
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "%s\n", lines[i]);
    if (gz)
        data_write_gz(path, text, at);
    else
        data_write(path, text, at);
}

/* Reads stream 0 of a one-stream source from 0 on until an error; the positions read. */
static int64_t read_until_error(pf_stream_source *s, int64_t limit, pf_error *err) {
    float x[64], y;
    for (int64_t p = 0; p < limit; p++)
        if (pf_stream_gather(s, p, 1, x, &y, NULL, err) != PF_OK)
            return p;
    return limit;
}

static void test_bad_lines(void **state) {
    (void)state;
    char a[400], b[400], train[900];
    snprintf(a, sizeof a, "%s/bad.csv", dir);
    snprintf(b, sizeof b, "%s/bad.svm.gz", dir);
    const char *csv[] = {"label,a,b,c,d", "0,1,2,3,4", "1,1,2,3,4", "", "2,1,x2,3,4", "1,1,2,3,4"};
    write_lines(a, csv, 6, false);
    snprintf(train, sizeof train, "[\"%s\"]", a);
    pf_stream_source *s = open_source(CSV, NULL, "", train, 1, 1, 1);
    pf_error err;
    assert_int_equal(read_until_error(s, 10, &err), 2);
    assert_non_null(strstr(err.message, "bad.csv: line 5, field 3: not a number: \"x2\" "
                                        "(column 5)"));
    pf_stream_close(s);

    const char *svm[] = {"0 1:1 2:2", "# c", "1 1:1 3:x", "2 2:1"};
    write_lines(b, svm, 4, true);
    snprintf(train, sizeof train, "[\"%s\"]", b);
    s = open_source(LIBSVM, NULL, "", train, 1, 1, 1);
    assert_int_equal(read_until_error(s, 10, &err), 1);
    assert_non_null(strstr(err.message, "bad.svm.gz: line 3: feature 3: not a number: \"3:x\" "
                                        "(column 9)"));
    pf_stream_close(s);

    /* a label beyond the model's classes: a bad line too */
    const char *big[] = {"0 1:1", "3 1:1"};
    write_lines(b, big, 2, false);
    s = open_source(LIBSVM, NULL, "", train, 1, 1, 1);
    assert_int_equal(read_until_error(s, 10, &err), 1);
    assert_non_null(strstr(err.message, "line 2: label 3 is not a class of the model's 3 outputs"));
    pf_stream_close(s);

    /* in a range that starts inside the file the line is named by its byte offset */
    char text[20000];
    size_t at = 0;
    for (int i = 0; i < 400; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "%s\n",
                               i == 300 ? "1,2,3,,4" : "1,2,3,4,5");
    data_write(a, text, at);
    snprintf(train, sizeof train, "[\"%s\"]", a);
    s = open_source(CSV, NULL, "", train, 2, 1, 1);
    assert_int_equal(pf_stream_splits(s), 3); /* stream 0 reads the first and the last */
    float x[8], y;
    pf_status st = PF_OK;
    for (int64_t q = 0; q < 300 && st == PF_OK; q++)
        st = pf_stream_gather(s, q * 2, 1, x, &y, NULL, &err);
    assert_int_equal(st, PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "bad.csv: line at byte 3000, field 4: empty field "
                                        "(column 7)"));
    pf_stream_close(s);
    unlink(a);
    unlink(b);
}

static void test_skip(void **state) {
    (void)state;
    char a[400], train[900];
    snprintf(a, sizeof a, "%s/skip.svm", dir);
    /* 7 examples, 3 bad lines, one of them longer than the line limit */
    size_t long_len = DATA_TEXT_MAX_LINE + 100, at = 0;
    char *text = malloc(long_len + 1000);
    const char *lines[] = {"0 1:1",     "1 1:x", "2 2:1", NULL,   "0 3:1",
                           "1 2:1 1:1", "2 1:2", "0 1:3", "1 1:4"};
    for (int i = 0; i < 9; i++) {
        if (lines[i]) {
            at += (size_t)sprintf(text + at, "%s\n", lines[i]);
            continue;
        }
        memset(text + at, '1', long_len);
        text[at] = '0';
        text[at + 1] = ' ';
        at += long_len;
        text[at++] = '\n';
    }
    data_write(a, text, at);
    free(text);
    snprintf(train, sizeof train, "[\"%s\"]", a);
    pf_stream_source *s =
        open_source(LIBSVM, NULL, "\"on_error\": \"skip\", \"max_bad_lines\": 3, ", train, 1, 1, 1);
    float x[8], y;
    pf_error err;
    const float first[] = {1, 0, 0, 0, 0, 1, 2, 3, 4}; /* feature 1 of the good lines */
    for (int64_t p = 0; p < 12; p++) {
        assert_int_equal(pf_stream_gather(s, p, 1, x, &y, NULL, &err), PF_OK);
        const int good[] = {0, 2, 4, 6, 7, 8};
        assert_true(x[0] == first[good[p % 6]]);
    }
    int64_t total = 0;
    char last[256];
    assert_int_equal(pf_stream_take_bad(s, &total, last, sizeof last), 3);
    assert_int_equal(total, 3);
    assert_non_null(strstr(last, "skip.svm: line 6: feature ids must increase"));
    assert_int_equal(pf_stream_gather(s, 0, 1, x, &y, NULL, &err), PF_OK); /* back: once */
    assert_int_equal(pf_stream_take_bad(s, &total, last, sizeof last), 0);
    pf_stream_close(s);

    s = open_source(LIBSVM, NULL, "\"on_error\": \"skip\", \"max_bad_lines\": 2, ", train, 1, 1, 1);
    assert_int_equal(read_until_error(s, 20, &err), 3);
    assert_non_null(strstr(err.message, "more than 2 bad lines (data.max_bad_lines)"));
    pf_stream_close(s);

    s = open_source(LIBSVM, NULL, "", train, 1, 1, 1); /* fail: the first bad line */
    assert_int_equal(read_until_error(s, 20, &err), 1);
    assert_non_null(strstr(err.message, "skip.svm: line 2: feature 1: not a number"));
    pf_stream_close(s);
    unlink(a);
}

/* A line longer than the limit: refused, its bytes not kept, the next line read; the reader
 * allocates its buffer once, whatever the line's length. */
static void test_long_line(void **state) {
    (void)state;
    char a[400];
    snprintf(a, sizeof a, "%s/long.csv", dir);
    size_t big = 5 << 20, at = 0;
    char *text = malloc(big + 100);
    at += (size_t)sprintf(text + at, "1,2,3,4,5\n");
    memset(text + at, '7', big);
    at += big;
    at += (size_t)sprintf(text + at, "\n2,3,4,5,6\n");
    data_write(a, text, at);
    free(text);
    pf_model_spec m = {.type = PF_MODEL_SOFTMAX, .outputs = 3, .inputs = 4};
    use_counting(-1);
    data_text_reader *r = NULL;
    pf_error err;
    assert_int_equal(data_text_open_range(PF_DATA_CSV, &m, 0, a, 0, 0, 4096, &r, &err), PF_OK);
    long blocks = alloc_count;
    float x[4], y;
    assert_int_equal(data_text_next(r, x, &y, &err), PF_OK);
    assert_true(x[0] == 2 && y == 1);
    assert_int_equal(data_text_next(r, x, &y, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "long.csv: line 2: the line is longer than 4096 bytes"));
    assert_int_equal(data_text_ended(r), 0);
    assert_int_equal(data_text_next(r, x, &y, &err), PF_OK);
    assert_true(x[0] == 3 && y == 2);
    assert_int_equal(data_text_next(r, x, &y, &err), PF_ERR_NOT_FOUND);
    assert_int_equal(data_text_ended(r), 1);
    assert_int_equal(alloc_count, blocks); /* nothing allocated while reading */
    assert_true(alloc_largest <= DATA_TEXT_BUFFER + 4096);
    data_text_close(r);
    assert_int_equal(alloc_live, 0);
    use_libc();
    unlink(a);
}

/* A file given twice splits into ranges and reads the same; a gzip file is read from its start
 * only. */
static void test_gzip_range(void **state) {
    (void)state;
    pf_model_spec m = {.type = PF_MODEL_SOFTMAX, .outputs = 3, .inputs = 4};
    data_text_reader *r = NULL;
    pf_error err;
    assert_int_equal(data_text_open_range(PF_DATA_CSV, &m, 0, paths[CSV][3], 10, 0, 0, &r, &err),
                     PF_ERR_INVALID);
    assert_null(r);
    /* every cut of a plain file into two ranges reads each line once, the header once */
    const pf_dataset *d = &files[CSV][1];
    float x[4], y;
    struct stat sb;
    assert_int_equal(stat(paths[CSV][1], &sb), 0);
    for (uint64_t cut = 0; cut < (uint64_t)sb.st_size; cut += 997) {
        int64_t n = 0;
        for (int part = 0; part < 2; part++) {
            uint64_t start = part ? cut : 0, end = part ? 0 : cut;
            if (!part && cut == 0)
                continue;
            assert_int_equal(
                data_text_open_range(PF_DATA_CSV, &m, 0, paths[CSV][1], start, end, 0, &r, &err),
                PF_OK);
            pf_status st;
            while ((st = data_text_next(r, x, &y, &err)) == PF_OK) {
                assert_true(n < d->n);
                assert_memory_equal(x, d->x + (size_t)n * 4, sizeof x);
                n++;
            }
            assert_int_equal(st, PF_ERR_NOT_FOUND);
            data_text_close(r);
        }
        assert_int_equal(n, d->n);
    }
    /* blank lines before the header: it is the file's first line that is not blank, whichever
     * range it starts in */
    char blank[400], text[2000];
    snprintf(blank, sizeof blank, "%s/blank.csv", dir);
    size_t at = 0;
    for (int i = 0; i < 20; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "%s", i % 2 ? " \t\r\n" : "\n");
    size_t header = at;
    at += (size_t)snprintf(text + at, sizeof text - at, "label,a,b,c,d\n");
    for (int i = 0; i < 5; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "%d,1,2,3,4\n", i % 3);
    data_write(blank, text, at);
    for (uint64_t cut = 1; cut < at; cut++) {
        int64_t n = 0;
        for (int part = 0; part < 2; part++) {
            assert_int_equal(data_text_open_range(PF_DATA_CSV, &m, 0, blank, part ? cut : 0,
                                                  part ? 0 : cut, 0, &r, &err),
                             PF_OK);
            pf_status st;
            while ((st = data_text_next(r, x, &y, &err)) == PF_OK)
                assert_true(y == (float)(n++ % 3));
            if (st != PF_ERR_NOT_FOUND)
                fail_msg("cut %llu (header at %zu): %s", (unsigned long long)cut, header,
                         err.message);
            data_text_close(r);
        }
        assert_int_equal(n, 5);
    }
    unlink(blank);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_streams), cmocka_unit_test(test_libsvm_streams),
        cmocka_unit_test(test_ids),         cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_skip),        cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_gzip_range),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
