/* test_stream.c - training files read as streams (stream.h) against the same files loaded whole:
 * generated Criteo-layout files (plain and gzip) dealt to 2 and 3 streams; reading forwards as
 * tasks do over several epochs, jumping back (a rollback), far ahead (a membership change) and
 * starting in a later epoch (a replaced worker) each give exactly the examples the block
 * mapping and the per-epoch split order say; a bad line fails at its own position (earlier
 * ones still read) naming file, line and column; entries expand from folders and patterns;
 * fewer files than streams, and streams whose files hold no example, are refused; bad lines
 * are skipped and counted with data.on_error skip; data.stats standardises the numbers.
 * Leased input (data.splits dynamic): splits read in the order they are leased, each named
 * done once all its examples were taken (an empty one too, one leased twice twice, at most
 * max_done per take), a bad line failing the take after the examples before it.
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

#include "psflow/criteo.h"
#include "psflow/data.h"
#include "psflow/mem.h"
#include "psflow/spec.h"
#include "psflow/stream.h"
#include "tests/support/data_files.h"

#define FILES 5
#define ROWS  1500

static char dir[256];
static const char *data_extra = ""; /* more data fields, each ending in ", " */
static const char *mode = "sync";   /* training.mode */
static char *paths[FILES];
static pf_dataset files[FILES]; /* each file loaded whole: the reference */

static void make_temp_dir(char *out, size_t size) {
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(out, size, "%s/psflow_test_stream_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_true(n > 0 && (size_t)n < size);
    assert_non_null(mkdtemp(out));
}

/* A criteo job spec of 26 embeddings and 13 numeric inputs over `train` (a JSON array). */
static void make_spec(pf_job_spec *spec, const char *train, uint64_t seed) {
    char json[8192];
    size_t at = (size_t)snprintf(json, sizeof json,
                                 "{\"name\": \"s\", \"replicas\": {\"ps\": 1, \"worker\": 2},"
                                 " \"model\": {\"type\": \"mlp\", \"hidden\": [4], \"outputs\": 2,"
                                 " \"numeric_inputs\": 13, \"embeddings\": [");
    for (int f = 0; f < PF_CRITEO_CATEGORICAL; f++)
        at +=
            (size_t)snprintf(json + at, sizeof json - at,
                             "%s{\"name\": \"c%d\", \"vocab\": 100, \"dim\": 2}", f ? ", " : "", f);
    snprintf(json + at, sizeof json - at,
             "]}, \"data\": {\"format\": \"criteo\", \"streaming\": true, %s\"train\": %s,"
             " \"test\": [\"t.tsv\"]},"
             " \"training\": {\"mode\": \"%s\", \"batch_size\": 8, \"max_steps\": 10,"
             " \"seed\": %llu}}",
             data_extra, train, mode, (unsigned long long)seed);
    pf_error err;
    pf_status st = pf_job_spec_parse(json, strlen(json), spec, &err);
    if (st != PF_OK)
        fail_msg("spec: %s", err.message);
}

static int setup(void **state) {
    (void)state;
    make_temp_dir(dir, sizeof dir);
    pf_criteo_gen_options o = {.dir = dir, .rows = ROWS, .files = FILES, .seed = 11};
    pf_criteo_gen_result r;
    pf_error err;
    if (pf_criteo_generate(&o, &r, &err) != PF_OK)
        return -1;
    /* one file in gzip: streams mix both */
    char plain[512], gz[512];
    snprintf(plain, sizeof plain, "%s/part-00003.tsv", dir);
    snprintf(gz, sizeof gz, "%s/part-00003.tsv.gz", dir);
    size_t len;
    char *text = data_read(plain, 64 << 20, &len);
    data_write_gz(gz, text, len);
    pf_free(text);
    unlink(plain);
    pf_job_spec spec;
    make_spec(&spec, "[\"x\"]", 1);
    for (int i = 0; i < FILES; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/part-%05d.tsv%s", dir, i, i == 3 ? ".gz" : "");
        paths[i] = strdup(p);
        if (pf_criteo_load(&paths[i], 1, &spec.model, &files[i], &err) != PF_OK)
            return -1;
    }
    pf_job_spec_deinit(&spec);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < FILES; i++) {
        pf_dataset_deinit(&files[i]);
        free(paths[i]);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

/* The example at position q of stream j of `streams` by the rule of stream.h, from the files
 * loaded whole: its row of the reference. */
static const float *expected_in_stream(uint64_t seed, int streams, int j, int64_t q, float *y) {
    int n = (FILES - j + streams - 1) / streams, order[FILES];
    int64_t epoch_len = 0;
    for (int i = 0; i < n; i++)
        epoch_len += files[j + i * streams].n;
    int64_t e = q / epoch_len, off = q % epoch_len;
    pf_stream_split_order(seed, j, e, n, order);
    for (int i = 0;; i++) {
        const pf_dataset *d = &files[j + order[i] * streams];
        if (off < d->n) {
            *y = d->y[off];
            return d->x + off * d->features;
        }
        off -= d->n;
    }
}

static const float *expected(uint64_t seed, int streams, int block, int64_t p, float *y) {
    int64_t k = p / block;
    return expected_in_stream(seed, streams, (int)(k % streams), k / streams * block + p % block,
                              y);
}

/* Gathers count examples at start and checks every one against the reference. */
static void check_range(pf_stream_source *s, uint64_t seed, int streams, int block, int64_t start,
                        int count) {
    int w = pf_stream_features(s);
    float *x = pf_mallocarray((size_t)count * (size_t)w, sizeof(float));
    float *y = pf_mallocarray((size_t)count, sizeof(float));
    int32_t *labels = pf_mallocarray((size_t)count, sizeof(int32_t));
    pf_error err;
    pf_status st = pf_stream_gather(s, start, count, x, y, labels, &err);
    if (st != PF_OK)
        fail_msg("gather at %lld: %s", (long long)start, err.message);
    for (int i = 0; i < count; i++) {
        float ey;
        const float *ex = expected(seed, streams, block, start + i, &ey);
        if (memcmp(x + (size_t)i * (size_t)w, ex, (size_t)w * sizeof(float)) != 0 || y[i] != ey ||
            labels[i] != (int32_t)ey)
            fail_msg("position %lld (streams %d, block %d) differs from the files' example",
                     (long long)(start + i), streams, block);
    }
    pf_free(x);
    pf_free(y);
    pf_free(labels);
}

static pf_stream_source *open_source(const char *train, uint64_t seed, int streams, int block) {
    pf_job_spec spec;
    make_spec(&spec, train, seed);
    pf_stream_source *s;
    pf_error err;
    pf_status st = pf_stream_open(&spec, streams, block, &s, &err);
    pf_job_spec_deinit(&spec);
    if (st != PF_OK)
        fail_msg("open: %s", err.message);
    return s;
}

static void folder_entry(char *out, size_t size) {
    snprintf(out, size, "[\"%s\"]", dir);
}

/* Tasks reading forwards, step after step, over 3 epochs; then a rollback, a jump ahead and
 * a step back into the first epoch. */
static void test_forwards_and_back(void **state) {
    (void)state;
    char train[300];
    folder_entry(train, sizeof train);
    const int configs[][2] = {{2, 8}, {3, 5}, {2, 64}};
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        int streams = configs[c][0], block = configs[c][1];
        pf_stream_source *s = open_source(train, 7, streams, block);
        assert_int_equal(pf_stream_files(s), FILES);
        int64_t per_step = (int64_t)streams * block;
        int64_t steps = 3 * ROWS / per_step + 2; /* past the end of every stream's 2nd epoch */
        for (int64_t g = 0; g < steps; g++)
            for (int task = 0; task < streams; task++)
                check_range(s, 7, streams, block, g * per_step + task * block, block);
        check_range(s, 7, streams, block, 5 * per_step, 2 * block);         /* rollback */
        check_range(s, 7, streams, block, (steps + 400) * per_step, block); /* far ahead */
        check_range(s, 7, streams, block, 3, 2 * block);                    /* epoch 0 again */
        pf_stream_close(s);
    }
}

/* A source that starts in a later epoch (a worker replaced late in the job), with another
 * seed (another split order), and one process reading two tasks' blocks at once. */
static void test_start_late(void **state) {
    (void)state;
    char train[300];
    folder_entry(train, sizeof train);
    pf_stream_source *s = open_source(train, 99, 2, 16);
    check_range(s, 99, 2, 16, 2 * 2 * ROWS + 37, 32);
    check_range(s, 99, 2, 16, 2 * 2 * ROWS + 37 + 32, 300);
    pf_stream_close(s);
}

/* The split order is a permutation drawn per epoch: the same for the same inputs, not the
 * same in every epoch. */
static void test_split_order(void **state) {
    (void)state;
    int a[10], b[10], seen[10] = {0}, differs = 0;
    pf_stream_split_order(5, 1, 0, 10, a);
    pf_stream_split_order(5, 1, 0, 10, b);
    assert_memory_equal(a, b, sizeof a);
    for (int i = 0; i < 10; i++)
        seen[a[i]]++;
    for (int i = 0; i < 10; i++)
        assert_int_equal(seen[i], 1);
    for (int e = 1; e < 5; e++) {
        pf_stream_split_order(5, 1, e, 10, b);
        differs |= memcmp(a, b, sizeof a) != 0;
    }
    assert_true(differs);
}

/* A bad line fails exactly the position it holds, naming file, line and column; the
 * examples before it are read. */
static void test_bad_line(void **state) {
    (void)state;
    char bad[512], sub[300];
    snprintf(sub, sizeof sub, "%s/bad", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    for (int i = 0; i < 2; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/part-%d.tsv", sub, i);
        size_t len;
        char *text = data_read(paths[i], 64 << 20, &len);
        if (i == 1) { /* line 4 of the second file: a non-hex id in C2 */
            char *line = text;
            for (int l = 0; l < 3; l++)
                line = strchr(line, '\n') + 1;
            char *end = strchr(line, '\n');
            char badline[400];
            size_t at = (size_t)snprintf(badline, sizeof badline, "0");
            for (int f = 0; f < PF_CRITEO_NUMERIC; f++)
                at += (size_t)snprintf(badline + at, sizeof badline - at, "\t1");
            for (int f = 0; f < PF_CRITEO_CATEGORICAL; f++)
                at += (size_t)snprintf(badline + at, sizeof badline - at, "\t%s",
                                       f == 1 ? "zz" : "aa");
            size_t head = (size_t)(line - text), tail = len - (size_t)(end - text);
            char *out = pf_malloc(head + at + tail);
            memcpy(out, text, head);
            memcpy(out + head, badline, at);
            memcpy(out + head + at, end, tail);
            pf_free(text);
            text = out;
            len = head + at + tail;
        }
        data_write(p, text, len);
        pf_free(text);
    }
    snprintf(bad, sizeof bad, "[\"%s/part-*.tsv\"]", sub);
    pf_stream_source *s = open_source(bad, 1, 2, 2);
    float x[8 * 65], y[8];
    pf_error err;
    /* blocks of 2: positions 2, 3 and 6, 7 are stream 1's first four, the lines of part-1 */
    assert_int_equal(pf_stream_gather(s, 0, 4, x, y, NULL, &err), PF_OK);
    assert_int_equal(pf_stream_gather(s, 6, 1, x, y, NULL, &err), PF_OK); /* stream 1, q 2 */
    assert_int_equal(pf_stream_gather(s, 7, 1, x, y, NULL, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "part-1.tsv:4: column C2"));
    assert_int_equal(pf_stream_gather(s, 4, 2, x, y, NULL, &err), PF_OK); /* stream 0 goes on */
    pf_stream_close(s);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", sub);
    assert_int_equal(system(cmd), 0);
}

/* Refusals: fewer files than streams; a pattern matching nothing; streams without examples. */
static void test_refusals(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_stream_source *s = NULL;
    pf_error err;
    char train[600];
    snprintf(train, sizeof train, "[\"%s\"]", paths[3]); /* one gzip file: one split */
    make_spec(&spec, train, 1);
    assert_int_equal(pf_stream_open(&spec, 2, 8, &s, &err), PF_ERR_SPEC);
    assert_non_null(strstr(err.message, "at least 2 gzip files"));
    assert_null(s);
    pf_job_spec_deinit(&spec);

    snprintf(train, sizeof train, "[\"%s/nothing-*.tsv\"]", dir);
    make_spec(&spec, train, 1);
    assert_int_equal(pf_stream_open(&spec, 1, 8, &s, &err), PF_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "no file matches"));
    pf_job_spec_deinit(&spec);

    char empty[512];
    snprintf(empty, sizeof empty, "%s/empty.tsv", dir);
    data_write(empty, "\n\n", 2);
    snprintf(train, sizeof train, "[\"%s\"]", empty);
    make_spec(&spec, train, 1);
    assert_int_equal(pf_stream_open(&spec, 1, 4, &s, &err), PF_OK);
    float x[4 * 65], y[4];
    assert_int_equal(pf_stream_gather(s, 0, 4, x, y, NULL, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "hold no example"));
    pf_stream_close(s);
    pf_job_spec_deinit(&spec);
    unlink(empty);
}

/* Two rows read back are the same row. */
static int same_row(const pf_criteo_row *a, const pf_criteo_row *b) {
    if (a->label != b->label || a->num_present != b->num_present ||
        a->cat_present != b->cat_present)
        return 0;
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++)
        if ((a->num_present >> j & 1) && a->num[j] != b->num[j])
            return 0;
    for (int j = 0; j < PF_CRITEO_CATEGORICAL; j++)
        if ((a->cat_present >> j & 1) && a->cat[j] != b->cat[j])
            return 0;
    return 1;
}

/* Appends the rows of path's range [start, end) to rows[*n] (at most max). */
static void read_range(const char *path, uint64_t start, uint64_t end, pf_criteo_row *rows, int *n,
                       int max) {
    pf_criteo_reader *r;
    pf_error err;
    assert_int_equal(pf_criteo_open_range(path, start, end, 0, &r, &err), PF_OK);
    pf_status st;
    pf_criteo_row row;
    while ((st = pf_criteo_next(r, &row, &err)) == PF_OK) {
        assert_true(*n < max);
        rows[(*n)++] = row;
    }
    assert_int_equal(st, PF_ERR_NOT_FOUND);
    pf_criteo_close(r);
}

/* A plain file cut at any byte, or at two: the ranges read every line exactly once, in
 * order (a cut inside a line leaves it to the range before; a cut at a line's first byte
 * gives it to the range after). A gzip file is read from its start only. */
static void test_ranges(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/small.tsv", dir);
    size_t len;
    char *text = data_read(paths[0], 64 << 20, &len);
    size_t cut = 0;
    for (int l = 0; l < 12; l++) /* the first 12 lines */
        cut = (size_t)(strchr(text + cut, '\n') - text) + 1;
    data_write(path, text, cut - 1); /* the last line without its newline */
    pf_free(text);
    size_t size = cut - 1;
    pf_criteo_row whole[16], parts[16];
    int n_whole = 0;
    read_range(path, 0, 0, whole, &n_whole, 16);
    assert_int_equal(n_whole, 12);
    for (uint64_t c = 1; c <= size + 1; c++) { /* (end 0 means the end of the file) */
        int n = 0;
        read_range(path, 0, c, parts, &n, 16);
        read_range(path, c, 0, parts, &n, 16);
        if (n != n_whole)
            fail_msg("cut at %llu: %d rows, not %d", (unsigned long long)c, n, n_whole);
        for (int i = 0; i < n; i++)
            if (!same_row(&parts[i], &whole[i]))
                fail_msg("cut at %llu: row %d differs", (unsigned long long)c, i);
    }
    for (uint64_t c = 1; c < size; c += 97) /* two cuts */
        for (uint64_t d = c; d <= size; d += 89) {
            int n = 0;
            read_range(path, 0, c, parts, &n, 16);
            read_range(path, c, d, parts, &n, 16);
            read_range(path, d, 0, parts, &n, 16);
            assert_int_equal(n, n_whole);
            for (int i = 0; i < n; i++)
                assert_true(same_row(&parts[i], &whole[i]));
        }
    pf_criteo_reader *r;
    pf_error err;
    assert_int_equal(pf_criteo_open_range(paths[3], 10, 0, 0, &r, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "gzip"));
    unlink(path);
}

/* One plain file and 3 streams: it is cut into 3 ranges, one per stream, and the streams
 * read its lines, each exactly once: stream j's examples are range j's lines. */
static void test_one_file_many_streams(void **state) {
    (void)state;
    char train[600];
    snprintf(train, sizeof train, "[\"%s\"]", paths[0]);
    pf_stream_source *s = open_source(train, 3, 3, 1);
    assert_int_equal(pf_stream_splits(s), 3);
    const pf_dataset *d = &files[0];
    int w = pf_stream_features(s);
    float *x = pf_mallocarray((size_t)w, sizeof(float)), y;
    pf_error err;
    int64_t row = 0; /* stream j's first epoch is range j: rows in file order */
    for (int j = 0; j < 3; j++) {
        int64_t first = row;
        for (int64_t q = 0;; q++) {
            assert_int_equal(pf_stream_gather(s, 3 * q + j, 1, x, &y, NULL, &err), PF_OK);
            if (q > 0 && row < d->n && memcmp(x, d->x + row * w, (size_t)w * sizeof(float)) == 0 &&
                y == d->y[row]) {
                row++; /* the next line of the file */
                continue;
            }
            if (q == 0) {
                assert_memory_equal(x, d->x + row * w, (size_t)w * sizeof(float));
                row++;
                continue;
            }
            /* the stream wrapped: its next epoch starts its range again */
            assert_memory_equal(x, d->x + first * w, (size_t)w * sizeof(float));
            break;
        }
        assert_true(row > first);
    }
    assert_int_equal(row, d->n); /* every line, once */
    pf_free(x);
    pf_stream_close(s);
}

/* Writes the first `lines` lines of paths[i] to path, line k (from 1) replaced by a bad one
 * (a non-hex id in C2) for each k in bad[0..n_bad). */
static void write_with_bad(const char *path, int i, int lines, const int *bad, int n_bad) {
    size_t len;
    char *text = data_read(paths[i], 64 << 20, &len), *out = pf_malloc(len + 4096);
    size_t at = 0;
    const char *line = text;
    for (int k = 1; k <= lines; k++) {
        const char *end = strchr(line, '\n');
        int is_bad = 0;
        for (int j = 0; j < n_bad; j++)
            is_bad |= bad[j] == k;
        if (is_bad) {
            at += (size_t)sprintf(out + at, "1");
            for (int f = 0; f < PF_CRITEO_NUMERIC; f++)
                at += (size_t)sprintf(out + at, "\t2");
            for (int f = 0; f < PF_CRITEO_CATEGORICAL; f++)
                at += (size_t)sprintf(out + at, "\t%s", f == 1 ? "zz" : "ab");
            out[at++] = '\n';
        } else {
            memcpy(out + at, line, (size_t)(end - line) + 1);
            at += (size_t)(end - line) + 1;
        }
        line = end + 1;
    }
    data_write(path, out, at);
    pf_free(text);
    pf_free(out);
}

/* data.on_error skip: bad lines are passed over (the examples are the good lines in order),
 * each counted once however often a rollback reads it again, up to max_bad_lines; one more
 * fails naming the limit and the line; a truncated gzip file ends its split, counted. The
 * same for files loaded whole. */
static void test_skip_bad_lines(void **state) {
    (void)state;
    char sub[300], a[400], b[400], train[900];
    snprintf(sub, sizeof sub, "%s/skip", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(a, sizeof a, "%s/a.tsv", sub);
    snprintf(b, sizeof b, "%s/b.tsv.gz", sub);
    const int bad_a[] = {2, 5, 6};
    write_with_bad(a, 0, 10, bad_a, 3); /* 7 good lines */
    size_t len;                         /* b: 10 good lines, gzip cut short */
    char *text = data_read(paths[1], 64 << 20, &len), *cut = text;
    for (int k = 0; k < 10; k++)
        cut = strchr(cut, '\n') + 1;
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%s/b.full.gz", sub);
    data_write_gz(tmp, text, (size_t)(cut - text));
    pf_free(text);
    size_t gz_len;
    char *gz = data_read(tmp, 1 << 20, &gz_len);
    data_write(b, gz, gz_len - 12); /* no trailer, part of the last block */
    pf_free(gz);
    unlink(tmp);
    snprintf(train, sizeof train, "[\"%s\", \"%s\"]", a, b);

    data_extra = "\"on_error\": \"skip\", \"max_bad_lines\": 4, ";
    pf_stream_source *s = open_source(train, 1, 1, 1);
    const pf_dataset *d = &files[0];
    int w = pf_stream_features(s);
    float *x = pf_mallocarray((size_t)w, sizeof(float)), y;
    pf_error err;
    const int good[] = {0, 2, 3, 6, 7, 8, 9}; /* a's lines kept (from 0) */
    int64_t total = -1;
    char last[512];
    int found_a = 0;
    for (int64_t p = 0; p < 40 && !found_a; p++) { /* the split order may put b first */
        assert_int_equal(pf_stream_gather(s, p, 1, x, &y, NULL, &err), PF_OK);
        if (memcmp(x, d->x + (size_t)good[0] * (size_t)w, (size_t)w * sizeof(float)) == 0) {
            for (int g = 1; g < 7; g++) {
                assert_int_equal(pf_stream_gather(s, p + g, 1, x, &y, NULL, &err), PF_OK);
                assert_memory_equal(x, d->x + (size_t)good[g] * (size_t)w,
                                    (size_t)w * sizeof(float));
            }
            found_a = 1;
            assert_int_equal(pf_stream_gather(s, 0, 1, x, &y, NULL, &err), PF_OK);  /* back */
            assert_int_equal(pf_stream_gather(s, 60, 1, x, &y, NULL, &err), PF_OK); /* on */
        }
    }
    assert_true(found_a);
    pf_stream_take_bad(s, &total, last, sizeof last);
    assert_int_equal(total, 4); /* a's 3 and b's corrupt end, once each */
    pf_stream_close(s);

    data_extra = "\"on_error\": \"skip\", \"max_bad_lines\": 2, ";
    s = open_source(train, 1, 1, 1);
    pf_status st = PF_OK;
    for (int64_t p = 0; p < 40 && st == PF_OK; p++)
        st = pf_stream_gather(s, p, 1, x, &y, NULL, &err);
    assert_int_equal(st, PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "more than 2 bad lines (data.max_bad_lines)"));
    pf_stream_close(s);
    data_extra = "";

    pf_job_spec spec; /* loaded whole */
    make_spec(&spec, train, 1);
    char *both[] = {a, b};
    pf_dataset whole;
    assert_int_equal(pf_criteo_load_skipping(both, 2, &spec.model, 4, &whole, &err), PF_OK);
    assert_int_equal(whole.skipped, 4);
    print_message("loaded whole: %lld examples, %lld skipped\n", (long long)whole.n,
                  (long long)whole.skipped);
    assert_true(whole.n >= 7 + 8 && whole.n <= 7 + 10);
    pf_dataset_deinit(&whole);
    assert_int_equal(pf_criteo_load_skipping(both, 2, &spec.model, 3, &whole, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "more than 3 bad lines"));
    assert_int_equal(pf_criteo_load(both, 2, &spec.model, &whole, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "a.tsv:2: column C2"));
    pf_job_spec_deinit(&spec);
    pf_free(x);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", sub);
    assert_int_equal(system(cmd), 0);
}

/* data.stats: the numeric inputs standardised, (log1p(v) - mean) / std, an empty field 0; a
 * column without values left as it is; a malformed or missing file refused by name. */
static void test_scaling(void **state) {
    (void)state;
    char stats[400], bad[400];
    snprintf(stats, sizeof stats, "%s/stats.json", dir);
    snprintf(bad, sizeof bad, "%s/bad-stats.json", dir);
    char json[4096];
    size_t at = (size_t)snprintf(json, sizeof json, "{\"numeric\": {");
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++)
        at += (size_t)snprintf(json + at, sizeof json - at,
                               j == 4 ? "%s\"I%d\": {\"present\": 0}"
                                      : "%s\"I%d\": {\"present\": 9, \"log1p_mean\": %g, "
                                        "\"log1p_std\": %g}",
                               j ? ", " : "", j + 1, 0.5 * j, j == 7 ? 0.0 : 0.25 + j);
    snprintf(json + at, sizeof json - at, "}}");
    data_write(stats, json, strlen(json));
    pf_criteo_scaling sc;
    pf_error err;
    assert_int_equal(pf_criteo_scaling_load(stats, &sc, &err), PF_OK);
    pf_job_spec spec;
    make_spec(&spec, "[\"x\"]", 1);
    pf_dataset plain, scaled;
    assert_int_equal(pf_criteo_load(&paths[0], 1, &spec.model, &plain, &err), PF_OK);
    assert_int_equal(pf_criteo_load_scaled(&paths[0], 1, &spec.model, &sc, -1, &scaled, &err),
                     PF_OK);
    assert_int_equal(plain.n, scaled.n);
    const int numeric_at = 2 * PF_CRITEO_CATEGORICAL;
    int checked = 0;
    for (int64_t i = 0; i < plain.n; i++)
        for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
            float p = plain.x[i * plain.features + numeric_at + j];
            float s = scaled.x[i * plain.features + numeric_at + j];
            double mean = j == 4 ? 0 : 0.5 * j, inv = j == 4 || j == 7 ? 1 : 1 / (0.25 + j);
            if (p == 0.0f && s == 0.0f)
                continue; /* empty (or a 0 that lands on the mean: rare) */
            assert_true(fabs(s - (p - mean) * inv) < 1e-5);
            checked++;
        }
    assert_true(checked > plain.n);
    assert_memory_equal(plain.x, scaled.x, (size_t)numeric_at * sizeof(float)); /* ids alike */
    pf_dataset_deinit(&plain);
    pf_dataset_deinit(&scaled);
    pf_job_spec_deinit(&spec);
    char *i3 = strstr(json, "\"I3\""), *sd = strstr(i3, "log1p_std\": ") + 12;
    memmove(sd + 1, sd, strlen(sd) + 1); /* I3's std made negative */
    sd[0] = '-';
    data_write(bad, json, strlen(json));
    assert_int_equal(pf_criteo_scaling_load(bad, &sc, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "numeric.I3"));
    data_write(bad, "[1, 2]", 6);
    assert_int_equal(pf_criteo_scaling_load(bad, &sc, &err), PF_ERR_FORMAT);
    unlink(bad);
    assert_int_equal(pf_criteo_scaling_load(bad, &sc, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, "bad-stats.json"));
    unlink(stats);
}

/* Entries: a folder (without its truth.json), a pattern, a file; sorted per entry. */
static void test_expand(void **state) {
    (void)state;
    char pattern[300], *entries[2] = {dir, pattern}, **out;
    int n;
    pf_error err;
    snprintf(pattern, sizeof pattern, "%s/part-0000[12].tsv", dir);
    assert_int_equal(pf_input_expand(entries, 2, &out, &n, &err), PF_OK);
    assert_int_equal(n, FILES + 2);
    for (int i = 0; i < FILES; i++)
        assert_string_equal(out[i], paths[i]);
    assert_string_equal(out[FILES], paths[1]);
    assert_string_equal(out[FILES + 1], paths[2]);
    pf_input_free(out, n);
    char missing[300], *one[1] = {missing};
    snprintf(missing, sizeof missing, "%s/sub-none", dir);
    assert_int_equal(mkdir(missing, 0700), 0);
    assert_int_equal(pf_input_expand(one, 1, &out, &n, &err), PF_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "holds no data file"));
    rmdir(missing);
}

/* --- leased input (data.splits dynamic) ---------------------------------------------------- */

/* Small files in a folder of their own: file i (f<i>.tsv) the first lines[i] lines of
 * paths[from[i]] (line bad[i] > 0 made bad, as write_with_bad does), or with lines[i] < 0 an
 * empty file (-1) or one of blank lines only (-2); train names the folder (criteo takes at
 * most 2 entries), which expands to the files in that order. */
typedef struct lease_files {
    char sub[300];
    char train[320];
} lease_files;

static void make_lease_files(lease_files *lf, const char *name, int n, const int *from,
                             const int *lines, const int *bad) {
    snprintf(lf->sub, sizeof lf->sub, "%s/%s", dir, name);
    assert_int_equal(mkdir(lf->sub, 0700), 0);
    for (int i = 0; i < n; i++) {
        char p[400];
        snprintf(p, sizeof p, "%s/f%d.tsv", lf->sub, i);
        if (lines[i] == -1)
            data_write(p, "", 0);
        else if (lines[i] == -2)
            data_write(p, "\n\n\n", 3);
        else
            write_with_bad(p, from[i], lines[i], bad ? &bad[i] : NULL, bad && bad[i] > 0);
    }
    snprintf(lf->train, sizeof lf->train, "[\"%s\"]", lf->sub);
}

static void remove_lease_files(const lease_files *lf) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", lf->sub);
    assert_int_equal(system(cmd), 0);
}

/* A leased source (training.mode async, data.splits dynamic, `extra` more data fields) over
 * train, opened for 5 streams: leased input makes one whatever it is asked. */
static pf_stream_source *open_leased(const char *train, const char *extra) {
    char fields[256];
    snprintf(fields, sizeof fields, "\"splits\": \"dynamic\", %s", extra);
    data_extra = fields;
    mode = "async";
    pf_stream_source *s = open_source(train, 1, 5, 4);
    data_extra = "";
    mode = "sync";
    assert_int_equal(pf_stream_leased(s), 1);
    return s;
}

/* The examples a leased source should give, in order: rows of the files loaded whole. */
typedef struct want {
    const float *x[64];
    float y[64];
    int n, at;
} want;

static void want_row(want *w, int file, int64_t row) {
    assert_true(w->n < 64 && row < files[file].n);
    w->x[w->n] = files[file].x + row * files[file].features;
    w->y[w->n++] = files[file].y[row];
}

static void want_rows(want *w, int file, int rows) {
    for (int r = 0; r < rows; r++)
        want_row(w, file, r);
}

/* One pf_stream_take of `count`, expecting status `want_st`: every example given checked
 * against the next of w; returns how many were given. */
static int take_checked(pf_stream_source *s, int count, want *w, pf_stream_split_done *done,
                        int max_done, int *n_done, pf_status want_st, pf_error *err) {
    int f = pf_stream_features(s), got = -1;
    float *x = pf_mallocarray((size_t)count * (size_t)f, sizeof(float));
    float *y = pf_mallocarray((size_t)count, sizeof(float));
    int32_t *labels = pf_mallocarray((size_t)count, sizeof(int32_t));
    pf_status st = pf_stream_take(s, count, x, y, labels, &got, done, max_done, n_done, err);
    if (st != want_st)
        fail_msg("take: %s (%s), want %s", pf_strerror(st), err->message, pf_strerror(want_st));
    assert_in_range(got, 0, count);
    assert_in_range(*n_done, 0, max_done);
    for (int i = 0; i < got; i++) {
        if (w->at >= w->n)
            fail_msg("example %d given, %d wanted", w->at + 1, w->n);
        if (memcmp(x + (size_t)i * (size_t)f, w->x[w->at], (size_t)f * sizeof(float)) != 0 ||
            y[i] != w->y[w->at] || labels[i] != (int32_t)w->y[w->at])
            fail_msg("example %d differs from the file's", w->at);
        w->at++;
    }
    pf_free(x);
    pf_free(y);
    pf_free(labels);
    return got;
}

static void assert_done(const pf_stream_split_done *d, uint32_t split, uint64_t epoch) {
    if (d->split != split || d->epoch != epoch)
        fail_msg("done split %u of epoch %llu, want %u of %llu", d->split,
                 (unsigned long long)d->epoch, split, (unsigned long long)epoch);
}

static void lease(pf_stream_source *s, uint32_t split, uint64_t epoch) {
    pf_error err;
    if (pf_stream_lease_add(s, split, epoch, &err) != PF_OK)
        fail_msg("lease %u: %s", split, err.message);
}

/* Nothing is read before a lease; the leased splits are read in lease order, each in file
 * order, and each is named done in the take that took its last example once the reader saw
 * its end (before any example of the next), or in a later one. */
static void test_leased_order(void **state) {
    (void)state;
    lease_files lf;
    const int from[] = {0, 1, 2}, lines[] = {10, 13, 17};
    make_lease_files(&lf, "leased", 3, from, lines, NULL);
    pf_stream_source *s = open_leased(lf.train, "");
    assert_int_equal(pf_stream_splits(s), 3); /* one per file, not cut for 5 streams */
    assert_int_equal(pf_stream_files(s), 3);
    want w = {0};
    pf_stream_split_done done[8];
    int n_done = -1;
    pf_error err;
    assert_int_equal(take_checked(s, 7, &w, done, 8, &n_done, PF_OK, &err), 0);
    assert_int_equal(n_done, 0);
    assert_int_equal(pf_stream_leased_open(s), 0);

    lease(s, 2, 0);
    lease(s, 0, 0);
    assert_int_equal(pf_stream_leased_open(s), 2);
    want_rows(&w, 2, 17);
    want_rows(&w, 0, 10);
    assert_int_equal(take_checked(s, 7, &w, done, 8, &n_done, PF_OK, &err), 7);
    assert_int_equal(n_done, 0);
    assert_int_equal(take_checked(s, 7, &w, done, 8, &n_done, PF_OK, &err), 7);
    assert_int_equal(n_done, 0);
    assert_int_equal(pf_stream_leased_open(s), 2);
    assert_int_equal(take_checked(s, 7, &w, done, 8, &n_done, PF_OK, &err), 7); /* 3 + 4 */
    assert_int_equal(n_done, 1);
    assert_done(&done[0], 2, 0);
    assert_int_equal(pf_stream_leased_open(s), 1);
    assert_int_equal(take_checked(s, 7, &w, done, 8, &n_done, PF_OK, &err), 6);
    assert_int_equal(n_done, 1);
    assert_done(&done[0], 0, 0);
    assert_int_equal(pf_stream_leased_open(s), 0);
    assert_int_equal(take_checked(s, 7, &w, done, 8, &n_done, PF_OK, &err), 0);
    assert_int_equal(n_done, 0);

    /* a take that ends exactly at a split's end may name it, or leave it to the next take */
    lease(s, 1, 1);
    want_rows(&w, 1, 13);
    assert_int_equal(take_checked(s, 13, &w, done, 8, &n_done, PF_OK, &err), 13);
    int first = n_done;
    assert_in_range(first, 0, 1);
    if (first)
        assert_done(&done[0], 1, 1);
    assert_int_equal(take_checked(s, 13, &w, done, 8, &n_done, PF_OK, &err), 0);
    assert_int_equal(n_done, 1 - first);
    if (n_done)
        assert_done(&done[0], 1, 1);
    assert_int_equal(pf_stream_leased_open(s), 0);
    assert_int_equal(w.at, w.n);
    pf_stream_close(s);
    remove_lease_files(&lf);
}

/* An empty split (an empty file, a file of blank lines) is named done without an example;
 * a split leased twice is read twice; max_done stops a take at that many done splits. */
static void test_leased_empty_twice_max_done(void **state) {
    (void)state;
    lease_files lf;
    const int from[] = {0, 0, 0, 1}, lines[] = {10, -1, -2, 13};
    make_lease_files(&lf, "leased-empty", 4, from, lines, NULL);
    pf_stream_source *s = open_leased(lf.train, "");
    assert_int_equal(pf_stream_splits(s), 4);
    want w = {0};
    pf_stream_split_done done[8];
    int n_done;
    pf_error err;
    lease(s, 1, 0);
    assert_int_equal(take_checked(s, 5, &w, done, 8, &n_done, PF_OK, &err), 0);
    assert_int_equal(n_done, 1);
    assert_done(&done[0], 1, 0);

    lease(s, 2, 0); /* blank lines, the file twice, blank lines again */
    lease(s, 0, 0);
    lease(s, 0, 1);
    lease(s, 2, 1);
    want_rows(&w, 0, 10);
    want_rows(&w, 0, 10);
    assert_int_equal(take_checked(s, 30, &w, done, 8, &n_done, PF_OK, &err), 20);
    assert_int_equal(n_done, 4);
    assert_done(&done[0], 2, 0);
    assert_done(&done[1], 0, 0);
    assert_done(&done[2], 0, 1);
    assert_done(&done[3], 2, 1);
    assert_int_equal(pf_stream_leased_open(s), 0);

    lease(s, 0, 2); /* max_done 1: one split per take, whatever count asks */
    lease(s, 3, 2);
    lease(s, 1, 2);
    want_rows(&w, 0, 10);
    want_rows(&w, 1, 13);
    assert_int_equal(take_checked(s, 100, &w, done, 1, &n_done, PF_OK, &err), 10);
    assert_int_equal(n_done, 1);
    assert_done(&done[0], 0, 2);
    assert_int_equal(pf_stream_leased_open(s), 2);
    assert_int_equal(take_checked(s, 100, &w, done, 1, &n_done, PF_OK, &err), 13);
    assert_int_equal(n_done, 1);
    assert_done(&done[0], 3, 2);
    assert_int_equal(take_checked(s, 100, &w, done, 1, &n_done, PF_OK, &err), 0);
    assert_int_equal(n_done, 1);
    assert_done(&done[0], 1, 2);
    assert_int_equal(pf_stream_leased_open(s), 0);
    assert_int_equal(w.at, w.n);
    pf_stream_close(s);
    remove_lease_files(&lf);
}

/* A leased source is taken, not gathered; a static one is gathered, not taken or leased; a
 * split out of range is refused. */
static void test_leased_refusals(void **state) {
    (void)state;
    lease_files lf;
    const int from[] = {0, 1}, lines[] = {10, 13};
    make_lease_files(&lf, "leased-refused", 2, from, lines, NULL);
    pf_stream_source *s = open_leased(lf.train, "");
    float x[4 * 65], y[4];
    int got = -1, n_done = -1;
    pf_stream_split_done done[2];
    pf_error err;
    assert_int_equal(pf_stream_gather(s, 0, 1, x, y, NULL, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "taken, not gathered"));
    assert_int_equal(pf_stream_lease_add(s, 2, 0, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "the input has 2 splits"));
    assert_int_equal(pf_stream_lease_add(s, UINT32_MAX, 0, &err), PF_ERR_INVALID);
    assert_int_equal(pf_stream_leased_open(s), 0);
    assert_int_equal(pf_stream_take(s, 4, x, y, NULL, &got, done, 2, &n_done, &err), PF_OK);
    assert_int_equal(got, 0);
    assert_int_equal(n_done, 0);
    pf_stream_close(s);

    s = open_source(lf.train, 1, 1, 4); /* static (sync): gathered */
    assert_int_equal(pf_stream_leased(s), 0);
    assert_int_equal(pf_stream_take(s, 4, x, y, NULL, &got, done, 2, &n_done, &err),
                     PF_ERR_INVALID);
    assert_int_equal(got, 0);
    assert_int_equal(n_done, 0);
    assert_non_null(strstr(err.message, "not leased"));
    assert_int_equal(pf_stream_lease_add(s, 0, 0, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "not leased"));
    assert_int_equal(pf_stream_leased_open(s), 0);
    assert_int_equal(pf_stream_gather(s, 0, 4, x, y, NULL, &err), PF_OK);
    pf_stream_close(s);
    remove_lease_files(&lf);
}

/* A bad line with data.on_error fail: the take gives the examples before it (the whole split
 * before, named done, and the bad file's first lines), then fails naming file, line and
 * column, and so does the next. With skip the line is passed over and counted. */
static void test_leased_bad_line(void **state) {
    (void)state;
    lease_files lf;
    const int from[] = {1, 0}, lines[] = {13, 10}, bad[] = {0, 4};
    make_lease_files(&lf, "leased-bad", 2, from, lines, bad);
    pf_stream_source *s = open_leased(lf.train, "");
    want w = {0};
    pf_stream_split_done done[4];
    int n_done;
    pf_error err;
    lease(s, 0, 0);
    lease(s, 1, 0);
    want_rows(&w, 1, 13);
    want_rows(&w, 0, 3);
    assert_int_equal(take_checked(s, 40, &w, done, 4, &n_done, PF_ERR_FORMAT, &err), 16);
    assert_non_null(strstr(err.message, "f1.tsv:4: column C2"));
    assert_int_equal(n_done, 1);
    assert_done(&done[0], 0, 0);
    assert_int_equal(take_checked(s, 40, &w, done, 4, &n_done, PF_ERR_FORMAT, &err), 0);
    assert_non_null(strstr(err.message, "f1.tsv:4: column C2"));
    assert_int_equal(pf_stream_leased_open(s), 1);
    pf_stream_close(s);

    s = open_leased(lf.train, "\"on_error\": \"skip\", ");
    w = (want){0};
    lease(s, 1, 3);
    want_rows(&w, 0, 3);
    for (int r = 4; r < 10; r++)
        want_row(&w, 0, r);
    assert_int_equal(take_checked(s, 40, &w, done, 4, &n_done, PF_OK, &err), 9);
    assert_int_equal(n_done, 1);
    assert_done(&done[0], 1, 3);
    int64_t total = 0;
    char last[512];
    assert_int_equal(pf_stream_take_bad(s, &total, last, sizeof last), 1);
    assert_int_equal(total, 1);
    assert_non_null(strstr(last, "f1.tsv:4: column C2"));
    pf_stream_close(s);
    remove_lease_files(&lf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_order),
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_forwards_and_back),
        cmocka_unit_test(test_start_late),
        cmocka_unit_test(test_bad_line),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_one_file_many_streams),
        cmocka_unit_test(test_skip_bad_lines),
        cmocka_unit_test(test_scaling),
        cmocka_unit_test(test_leased_order),
        cmocka_unit_test(test_leased_empty_twice_max_done),
        cmocka_unit_test(test_leased_refusals),
        cmocka_unit_test(test_leased_bad_line),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
