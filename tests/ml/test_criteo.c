/* test_criteo.c - click logs in the Criteo layout (criteo.h): the line parser and its errors,
 * the streaming reader over plain and gzip files written to a temp dir (blank lines, a last
 * line without "\n", a line longer than max_line, a bad line in the middle, a truncated gzip
 * file), and the generator (row counts, positives, truth.json, its Bayes AUC recomputed from
 * the rows read back, and byte-identical output for one seed).
 *
 * The cases in tests/data/criteo/{valid,invalid}/ (also the fuzz target's seeds): every valid
 * file reads to its end without an error, every invalid one gives PF_ERR_FORMAT.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "psflow/criteo.h"
#include "psflow/data.h"
#include "psflow/mem.h"
#include "tests/support/data_files.h"

#define ALL_NUM ((1u << PF_CRITEO_NUMERIC) - 1)
#define ALL_CAT ((1u << PF_CRITEO_CATEGORICAL) - 1)

/* --- helpers ------------------------------------------------------------------------------ */

static void make_temp_dir(char *dir, size_t size) {
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(dir, size, "%s/psflow_test_criteo_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_true(n > 0 && (size_t)n < size);
    assert_non_null(mkdtemp(dir));
}

/* Removes dir and the files in it (the tests make no subfolders). */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    char path[600];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        data_path_join(path, sizeof path, dir, e->d_name);
        assert_int_equal(unlink(path), 0);
    }
    closedir(d);
    assert_int_equal(rmdir(dir), 0);
}

static pf_status parse(const char *line, pf_criteo_row *row, int *column) {
    char why[128] = "";
    *column = -2;
    pf_status st = pf_criteo_parse_line(line, strlen(line), row, column, why, sizeof why);
    if (st != PF_OK)
        assert_true(why[0] != '\0'); /* an error always says what is wrong */
    return st;
}

/* A line of PF_CRITEO_FIELDS fields f[0..], joined by tabs, into out (a static buffer). */
static const char *join(const char *const *f, int n) {
    static char out[4096];
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        int w = snprintf(out + used, sizeof out - used, "%s%s", i ? "\t" : "", f[i] ? f[i] : "");
        assert_true(w >= 0 && (size_t)w < sizeof out - used);
        used += (size_t)w;
    }
    return out;
}

/* A valid line's fields: label 1, every column present. */
static void valid_fields(const char *f[PF_CRITEO_FIELDS]) {
    static const char *const base[PF_CRITEO_FIELDS] = {"1",
                                                       "-5",
                                                       "0",
                                                       "123456789012",
                                                       "7",
                                                       "-1",
                                                       "42",
                                                       "1000000",
                                                       "3",
                                                       "9223372036854775807",
                                                       "-9223372036854775808",
                                                       "12",
                                                       "8",
                                                       "-300",
                                                       "0",
                                                       "ffffffff",
                                                       "FFFFFFFF",
                                                       "7fA3b",
                                                       "deadBEEF",
                                                       "1",
                                                       "00000000",
                                                       "abcdef01",
                                                       "ABCDEF01",
                                                       "0000000a",
                                                       "c0ffee",
                                                       "8",
                                                       "9",
                                                       "10",
                                                       "11",
                                                       "12",
                                                       "13",
                                                       "14",
                                                       "15",
                                                       "16",
                                                       "17",
                                                       "18",
                                                       "19",
                                                       "1a",
                                                       "1b",
                                                       "1c"};
    memcpy(f, base, sizeof base);
    for (int j = 0; j < PF_CRITEO_FIELDS; j++)
        assert_non_null(f[j]); /* every field written above */
}

/* The line valid_fields gives with field `column` replaced by `value`. */
static const char *with_field(int column, const char *value) {
    const char *f[PF_CRITEO_FIELDS];
    valid_fields(f);
    f[column] = value;
    return join(f, PF_CRITEO_FIELDS);
}

/* Row i of the reader's files: a deterministic mix of labels, negative and large numbers,
 * missing values (about 1 in 8) and ids over the whole 32-bit range. */
static void make_row(uint64_t i, pf_criteo_row *row) {
    uint64_t h = i * 0x9E3779B97F4A7C15u + 0x632BE59BD9B4E019u;
    memset(row, 0, sizeof *row);
    row->label = (int)(h >> 63);
    for (int j = 0; j < PF_CRITEO_NUMERIC + PF_CRITEO_CATEGORICAL; j++) {
        h ^= h >> 31;
        h *= 0xBF58476D1CE4E5B9u;
        h ^= h >> 29;
        if ((h & 7) == 0)
            continue; /* missing */
        if (j < PF_CRITEO_NUMERIC) {
            row->num_present |= 1u << j;
            row->num[j] = j == 12 ? (int64_t)h : (int64_t)((h >> 8) % 20001) - 10000;
        } else {
            row->cat_present |= 1u << (j - PF_CRITEO_NUMERIC);
            row->cat[j - PF_CRITEO_NUMERIC] = (uint32_t)(h >> 16);
        }
    }
}

/* Row i as a line (without "\n") into out; returns its length. Ids alternate lower and upper
 * case hex, some zero-padded. */
static size_t format_row(uint64_t i, char *out, size_t size) {
    pf_criteo_row r;
    make_row(i, &r);
    size_t used = (size_t)snprintf(out, size, "%d", r.label);
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
        out[used++] = '\t';
        if (r.num_present >> j & 1)
            used += (size_t)snprintf(out + used, size - used, "%" PRId64, r.num[j]);
    }
    for (int j = 0; j < PF_CRITEO_CATEGORICAL; j++) {
        out[used++] = '\t';
        if (r.cat_present >> j & 1) {
            const char *fmt = (i + (uint64_t)j) % 3 == 0   ? "%x"
                              : (i + (uint64_t)j) % 3 == 1 ? "%X"
                                                           : "%08x";
            used += (size_t)snprintf(out + used, size - used, fmt, (unsigned)r.cat[j]);
        }
    }
    assert_true(used < size);
    return used;
}

/* Rows first .. first+n-1 as "\n"-terminated lines, in a new block (free it). */
static char *format_rows(uint64_t first, uint64_t n, size_t *len) {
    size_t cap = (size_t)n * 400 + 1, used = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (uint64_t i = first; i < first + n; i++) {
        used += format_row(i, text + used, cap - used);
        text[used++] = '\n';
    }
    *len = used;
    return text;
}

static void assert_row_equal(const pf_criteo_row *got, const pf_criteo_row *want) {
    assert_int_equal(got->label, want->label);
    assert_int_equal(got->num_present, want->num_present);
    assert_int_equal(got->cat_present, want->cat_present);
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++)
        if (want->num_present >> j & 1)
            assert_int_equal(got->num[j], want->num[j]);
    for (int j = 0; j < PF_CRITEO_CATEGORICAL; j++)
        if (want->cat_present >> j & 1)
            assert_int_equal(got->cat[j], want->cat[j]);
}

/* Reads path to its end expecting rows first .. first+n-1 on lines 1..n and the plain size
 * `bytes` consumed. */
static void assert_reads_rows(const char *path, uint64_t first, uint64_t n, size_t bytes) {
    pf_criteo_reader *r = NULL;
    pf_error err;
    assert_int_equal(pf_criteo_open(path, 0, &r, &err), PF_OK);
    pf_criteo_row got, want;
    for (uint64_t i = 0; i < n; i++) {
        pf_status st = pf_criteo_next(r, &got, &err);
        if (st != PF_OK)
            fail_msg("row %" PRIu64 ": %s: %s", i, pf_strerror(st), err.message);
        assert_int_equal(pf_criteo_line(r), i + 1);
        make_row(first + i, &want);
        assert_row_equal(&got, &want);
    }
    assert_int_equal(pf_criteo_next(r, &got, &err), PF_ERR_NOT_FOUND);
    assert_int_equal(pf_criteo_next(r, &got, &err), PF_ERR_NOT_FOUND); /* and stays there */
    assert_int_equal(pf_criteo_bytes(r), bytes);
    pf_criteo_close(r);
}

/* The status of the next row, failing the test on an unexpected status. */
static void expect_next(pf_criteo_reader *r, pf_status want, pf_criteo_row *row, pf_error *err) {
    pf_status st = pf_criteo_next(r, row, err);
    if (st != want)
        fail_msg("pf_criteo_next: got %s (%s), want %s", pf_strerror(st),
                 st == PF_OK ? "" : err->message, pf_strerror(want));
}

/* --- the line parser ---------------------------------------------------------------------- */

static void test_parse_valid(void **state) {
    (void)state;
    const char *f[PF_CRITEO_FIELDS];
    valid_fields(f);
    const char *line = join(f, PF_CRITEO_FIELDS);
    pf_criteo_row row;
    int column;
    assert_int_equal(parse(line, &row, &column), PF_OK);
    assert_int_equal(row.label, 1);
    assert_int_equal(row.num_present, ALL_NUM);
    assert_int_equal(row.cat_present, ALL_CAT);
    const int64_t num[PF_CRITEO_NUMERIC] = {-5, 0,         123456789012, 7,  -1, 42,  1000000,
                                            3,  INT64_MAX, INT64_MIN,    12, 8,  -300};
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++)
        assert_true(row.num[j] == num[j]);
    const uint32_t cat[8] = {0, 0xffffffffu, 0xffffffffu, 0x7fa3b, 0xdeadbeef, 1, 0, 0xabcdef01};
    for (int j = 0; j < 8; j++)
        assert_int_equal(row.cat[j], cat[j]);
    assert_int_equal(row.cat[8], 0xabcdef01u);
    assert_int_equal(row.cat[9], 0xa);
    assert_int_equal(row.cat[10], 0xc0ffee);
    assert_int_equal(row.cat[25], 0x1c);

    /* label 0, and a trailing "\r" is dropped: the same row */
    f[0] = "0";
    char crlf[4096];
    snprintf(crlf, sizeof crlf, "%s\r", join(f, PF_CRITEO_FIELDS));
    pf_criteo_row row2;
    assert_int_equal(parse(crlf, &row2, &column), PF_OK);
    assert_int_equal(row2.label, 0);
    row.label = 0;
    assert_row_equal(&row2, &row);
    /* the "\r" is not part of C26's id */
    assert_int_equal(row2.cat[25], 0x1c);

    /* len, not a NUL, ends the line */
    char longer[4096];
    size_t n = (size_t)snprintf(longer, sizeof longer, "%sZZZ", join(f, PF_CRITEO_FIELDS));
    char why[128];
    assert_int_equal(pf_criteo_parse_line(longer, n - 3, &row2, &column, why, sizeof why), PF_OK);
    assert_row_equal(&row2, &row);
}

static void test_parse_missing(void **state) {
    (void)state;
    const char *f[PF_CRITEO_FIELDS] = {"0"};
    pf_criteo_row row;
    int column;
    assert_int_equal(parse(join(f, PF_CRITEO_FIELDS), &row, &column), PF_OK);
    assert_int_equal(row.label, 0);
    assert_int_equal(row.num_present, 0);
    assert_int_equal(row.cat_present, 0);

    /* I2, I13, C1, C26 missing in an otherwise full line */
    valid_fields(f);
    f[2] = f[13] = f[14] = f[39] = "";
    assert_int_equal(parse(join(f, PF_CRITEO_FIELDS), &row, &column), PF_OK);
    assert_int_equal(row.num_present, ALL_NUM & ~(1u << 1) & ~(1u << 12));
    assert_int_equal(row.cat_present, ALL_CAT & ~1u & ~(1u << 25));
    assert_true(row.num[0] == -5);
    assert_int_equal(row.cat[1], 0xffffffffu);

    /* a missing last field before "\r" */
    char crlf[4096];
    snprintf(crlf, sizeof crlf, "%s\r", join(f, PF_CRITEO_FIELDS));
    assert_int_equal(parse(crlf, &row, &column), PF_OK);
    assert_int_equal(row.cat_present, ALL_CAT & ~1u & ~(1u << 25));
}

static void test_parse_bad_label(void **state) {
    (void)state;
    const char *labels[] = {"2", "", "x", "-1", "1.0", "10", " 1"};
    for (size_t i = 0; i < sizeof labels / sizeof *labels; i++) {
        pf_criteo_row row;
        int column;
        pf_status st = parse(with_field(0, labels[i]), &row, &column);
        if (st != PF_ERR_FORMAT || column != 0)
            fail_msg("label '%s': got %s column %d", labels[i], pf_strerror(st), column);
    }
}

static void test_parse_field_count(void **state) {
    (void)state;
    const char *f[PF_CRITEO_FIELDS + 1];
    valid_fields(f);
    f[PF_CRITEO_FIELDS] = "1";
    pf_criteo_row row;
    int column;
    /* too few: the first field missing is named; too many: "after C26" */
    assert_int_equal(parse(join(f, PF_CRITEO_FIELDS - 1), &row, &column), PF_ERR_FORMAT);
    assert_int_equal(column, PF_CRITEO_FIELDS - 1);
    assert_string_equal(pf_criteo_column_name(column), "C26");
    assert_int_equal(parse(join(f, PF_CRITEO_FIELDS + 1), &row, &column), PF_ERR_FORMAT);
    assert_int_equal(column, PF_CRITEO_FIELDS);
    assert_string_equal(pf_criteo_column_name(column), "after C26");
    assert_int_equal(parse("1", &row, &column), PF_ERR_FORMAT);
    assert_int_equal(column, 1);
    assert_string_equal(pf_criteo_column_name(column), "I1");
    /* an extra empty field (a trailing tab) is one too many */
    char tab[4096];
    snprintf(tab, sizeof tab, "%s\t", join(f, PF_CRITEO_FIELDS));
    assert_int_equal(parse(tab, &row, &column), PF_ERR_FORMAT);
    assert_int_equal(column, PF_CRITEO_FIELDS);
    assert_string_equal(pf_criteo_column_name(-1), "line");
    assert_string_equal(pf_criteo_column_name(PF_CRITEO_FIELDS + 1), "line");
}

static void test_parse_bad_ids(void **state) {
    (void)state;
    static const struct {
        int column;
        const char *value;
    } cases[] = {
        {14, "zz"},  {14, "12g4"},      {39, "-1"},        {20, "0x1f"},
        {27, " 1f"}, {14, "123456789"}, {39, "fffffffff"}, {17, "1f.0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pf_criteo_row row;
        int column;
        pf_status st = parse(with_field(cases[i].column, cases[i].value), &row, &column);
        if (st != PF_ERR_FORMAT || column != cases[i].column)
            fail_msg("%s = '%s': got %s column %d", pf_criteo_column_name(cases[i].column),
                     cases[i].value, pf_strerror(st), column);
    }
}

static void test_parse_bad_numbers(void **state) {
    (void)state;
    static const struct {
        int column;
        const char *value;
    } cases[] = {
        {3, "99999999999999999999"},
        {13, "-99999999999999999999"},
        {1, "9223372036854775808"},
        {2, "-9223372036854775809"},
        {1, "abc"},
        {5, "12x"},
        {6, "1.5"},
        {7, "-"},
        {8, "0x10"},
        {13, " 4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pf_criteo_row row;
        int column;
        pf_status st = parse(with_field(cases[i].column, cases[i].value), &row, &column);
        if (st != PF_ERR_FORMAT || column != cases[i].column)
            fail_msg("%s = '%s': got %s column %d", pf_criteo_column_name(cases[i].column),
                     cases[i].value, pf_strerror(st), column);
    }
}

static void test_column_name(void **state) {
    (void)state;
    assert_string_equal(pf_criteo_column_name(-1), "line");
    assert_string_equal(pf_criteo_column_name(0), "label");
    assert_string_equal(pf_criteo_column_name(1), "I1");
    assert_string_equal(pf_criteo_column_name(13), "I13");
    assert_string_equal(pf_criteo_column_name(14), "C1");
    assert_string_equal(pf_criteo_column_name(39), "C26");
}

/* --- the reader --------------------------------------------------------------------------- */

/* 10000 rows (about 1.4 MB: lines cross the 1 MiB buffer's end), plain and gzip. */
static void test_reader_plain_and_gzip(void **state) {
    (void)state;
    char dir[256], plain[320], gz[320];
    make_temp_dir(dir, sizeof dir);
    data_path_join(plain, sizeof plain, dir, "rows.tsv");
    data_path_join(gz, sizeof gz, dir, "rows.tsv.gz");
    size_t len;
    char *text = format_rows(0, 10000, &len);
    assert_true(len > PF_CRITEO_BUFFER);
    data_write(plain, text, len);
    data_write_gz(gz, text, len);
    assert_reads_rows(plain, 0, 10000, len);
    assert_reads_rows(gz, 0, 10000, len);
    free(text);

    /* a gzip file named like a plain one is still read as gzip (by its magic bytes) */
    char hidden[320];
    data_path_join(hidden, sizeof hidden, dir, "small.tsv");
    text = format_rows(5, 3, &len);
    data_write_gz(hidden, text, len);
    assert_reads_rows(hidden, 5, 3, len);
    free(text);
    remove_dir(dir);
}

static void test_reader_blank_lines_and_no_newline(void **state) {
    (void)state;
    char dir[256], path[320];
    make_temp_dir(dir, sizeof dir);
    data_path_join(path, sizeof path, dir, "blank.tsv");
    char text[4096], line[1024];
    size_t used = 0;
    used += (size_t)snprintf(text + used, sizeof text - used, "\n"); /* line 1 blank */
    format_row(0, line, sizeof line);
    used += (size_t)snprintf(text + used, sizeof text - used, "%s\n\n\n", line); /* 2; 3, 4 */
    format_row(1, line, sizeof line);
    used += (size_t)snprintf(text + used, sizeof text - used, "%s\n", line); /* 5 */
    format_row(2, line, sizeof line);
    used += (size_t)snprintf(text + used, sizeof text - used, "%s", line); /* 6, no "\n" */
    data_write(path, text, used);

    pf_criteo_reader *r;
    pf_error err;
    assert_int_equal(pf_criteo_open(path, 0, &r, &err), PF_OK);
    pf_criteo_row got, want;
    const uint64_t lines[] = {2, 5, 6};
    for (int i = 0; i < 3; i++) {
        expect_next(r, PF_OK, &got, &err);
        assert_int_equal(pf_criteo_line(r), lines[i]);
        make_row((uint64_t)i, &want);
        assert_row_equal(&got, &want);
    }
    expect_next(r, PF_ERR_NOT_FOUND, &got, &err);
    assert_int_equal(pf_criteo_bytes(r), used);
    pf_criteo_close(r);

    /* a file of one row and no "\n", with "\r" */
    format_row(7, line, sizeof line);
    used = (size_t)snprintf(text, sizeof text, "%s\r", line);
    data_write(path, text, used);
    assert_int_equal(pf_criteo_open(path, 0, &r, &err), PF_OK);
    expect_next(r, PF_OK, &got, &err);
    make_row(7, &want);
    assert_row_equal(&got, &want);
    expect_next(r, PF_ERR_NOT_FOUND, &got, &err);
    pf_criteo_close(r);
    remove_dir(dir);
}

static void test_reader_empty_file(void **state) {
    (void)state;
    char dir[256], path[320], gz[320];
    make_temp_dir(dir, sizeof dir);
    data_path_join(path, sizeof path, dir, "empty.tsv");
    data_path_join(gz, sizeof gz, dir, "empty.tsv.gz");
    data_write(path, "", 0);
    data_write_gz(gz, "", 0);
    const char *paths[] = {path, gz};
    for (int i = 0; i < 2; i++) {
        pf_criteo_reader *r;
        pf_error err;
        assert_int_equal(pf_criteo_open(paths[i], 0, &r, &err), PF_OK);
        pf_criteo_row row;
        expect_next(r, PF_ERR_NOT_FOUND, &row, &err);
        expect_next(r, PF_ERR_NOT_FOUND, &row, &err);
        assert_int_equal(pf_criteo_bytes(r), 0);
        pf_criteo_close(r);
    }
    /* only blank lines: no rows either */
    data_write(path, "\n\r\n\n", 4);
    pf_criteo_reader *r;
    pf_error err;
    assert_int_equal(pf_criteo_open(path, 0, &r, &err), PF_OK);
    pf_criteo_row row;
    pf_status st = pf_criteo_next(r, &row, &err);
    assert_int_not_equal(st, PF_OK);
    pf_criteo_close(r);
    remove_dir(dir);
}

static void test_reader_missing_file(void **state) {
    (void)state;
    char dir[256], path[320];
    make_temp_dir(dir, sizeof dir);
    data_path_join(path, sizeof path, dir, "no-such-file.tsv");
    pf_criteo_reader *r = NULL;
    pf_error err;
    assert_int_equal(pf_criteo_open(path, 0, &r, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, path));
    /* a directory: refused at the open or at the first read */
    if (pf_criteo_open(dir, 0, &r, &err) == PF_OK) {
        pf_criteo_row row;
        expect_next(r, PF_ERR_IO, &row, &err);
        pf_criteo_close(r);
    }
    remove_dir(dir);
}

/* Reads cut (rows 0.. of format_rows, gzip, cut short) to its first error: the rows before
 * the cut, then PF_ERR_FORMAT saying the file is truncated - not a bad last line, not a clean
 * end. Returns the rows read. */
static uint64_t read_truncated(const char *cut) {
    pf_criteo_reader *r;
    pf_error err;
    assert_int_equal(pf_criteo_open(cut, 0, &r, &err), PF_OK);
    pf_criteo_row got, want;
    uint64_t rows = 0;
    pf_status st;
    while ((st = pf_criteo_next(r, &got, &err)) == PF_OK) {
        make_row(rows, &want);
        assert_row_equal(&got, &want);
        rows++;
    }
    if (st != PF_ERR_FORMAT)
        fail_msg("after %" PRIu64 " rows: %s, want PF_ERR_FORMAT", rows, pf_strerror(st));
    assert_non_null(strstr(err.message, cut));
    if (!strstr(err.message, "truncated") && !strstr(err.message, "ends early"))
        fail_msg("message does not say the file is truncated: %s", err.message);
    /* after that error the reader stays at the end */
    assert_int_not_equal(pf_criteo_next(r, &got, &err), PF_OK);
    pf_criteo_close(r);
    return rows;
}

static void test_reader_truncated_gzip(void **state) {
    (void)state;
    char dir[256], full[320], cut[320];
    make_temp_dir(dir, sizeof dir);
    data_path_join(full, sizeof full, dir, "full.tsv.gz");
    data_path_join(cut, sizeof cut, dir, "cut.tsv.gz");
    size_t len, gz_len;
    char *text = format_rows(0, 4000, &len);
    data_write_gz(full, text, len);
    free(text);
    char *gz = data_read(full, (size_t)1 << 30, &gz_len);
    /* cut in the middle of the deflate data */
    data_write(cut, gz, gz_len / 2);
    uint64_t rows = read_truncated(cut);
    assert_true(rows > 0 && rows < 4000);
    /* cut in the 8-byte trailer (CRC and length): every row is there, the end is not */
    data_write(cut, gz, gz_len - 4);
    assert_true(read_truncated(cut) <= 4000);
    /* only the 10-byte header */
    data_write(cut, gz, 10);
    assert_int_equal(read_truncated(cut), 0);
    pf_free(gz);
    remove_dir(dir);
}

/* A 5000-byte line with max_line 1024 is an error naming its line; the next line reads. */
static void test_reader_long_line(void **state) {
    (void)state;
    char dir[256], path[320];
    make_temp_dir(dir, sizeof dir);
    data_path_join(path, sizeof path, dir, "long.tsv");
    size_t cap = 8192, used = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    used += format_row(0, text + used, cap - used);
    text[used++] = '\n';
    memset(text + used, '7', 5000); /* line 2 */
    used += 5000;
    text[used++] = '\n';
    used += format_row(1, text + used, cap - used); /* line 3 */
    text[used++] = '\n';
    data_write(path, text, used);
    free(text);

    pf_criteo_reader *r;
    pf_error err;
    assert_int_equal(pf_criteo_open(path, 1024, &r, &err), PF_OK);
    pf_criteo_row got, want;
    expect_next(r, PF_OK, &got, &err);
    expect_next(r, PF_ERR_FORMAT, &got, &err);
    assert_int_equal(pf_criteo_line(r), 2);
    char where[400];
    snprintf(where, sizeof where, "%s:2", path);
    if (!strstr(err.message, where))
        fail_msg("message does not name %s: %s", where, err.message);
    expect_next(r, PF_OK, &got, &err);
    assert_int_equal(pf_criteo_line(r), 3);
    make_row(1, &want);
    assert_row_equal(&got, &want);
    expect_next(r, PF_ERR_NOT_FOUND, &got, &err);
    pf_criteo_close(r);
    remove_dir(dir);
}

/* A bad line in the middle: PF_ERR_FORMAT "PATH:LINE: column NAME: why", then the next row. */
static void test_reader_bad_line(void **state) {
    (void)state;
    char dir[256], path[320];
    make_temp_dir(dir, sizeof dir);
    data_path_join(path, sizeof path, dir, "bad.tsv");
    char text[8192];
    size_t used = 0;
    for (uint64_t i = 0; i < 2; i++) {
        used += format_row(i, text + used, sizeof text - used);
        text[used++] = '\n';
    }
    used += (size_t)snprintf(text + used, sizeof text - used, "%s\n", with_field(30, "xyz"));
    used += (size_t)snprintf(text + used, sizeof text - used, "%s\n", with_field(0, "7"));
    used += format_row(2, text + used, sizeof text - used); /* line 5 */
    text[used++] = '\n';
    data_write(path, text, used);

    pf_criteo_reader *r;
    pf_error err;
    assert_int_equal(pf_criteo_open(path, 0, &r, &err), PF_OK);
    pf_criteo_row got, want;
    expect_next(r, PF_OK, &got, &err);
    expect_next(r, PF_OK, &got, &err);
    expect_next(r, PF_ERR_FORMAT, &got, &err);
    assert_int_equal(pf_criteo_line(r), 3);
    char where[400];
    snprintf(where, sizeof where, "%s:3", path);
    if (!strstr(err.message, where) || !strstr(err.message, "C17"))
        fail_msg("message does not name %s and C17: %s", where, err.message);
    expect_next(r, PF_ERR_FORMAT, &got, &err);
    assert_int_equal(pf_criteo_line(r), 4);
    if (!strstr(err.message, "label"))
        fail_msg("message does not name the label: %s", err.message);
    expect_next(r, PF_OK, &got, &err);
    assert_int_equal(pf_criteo_line(r), 5);
    make_row(2, &want);
    assert_row_equal(&got, &want);
    expect_next(r, PF_ERR_NOT_FOUND, &got, &err);
    pf_criteo_close(r);
    remove_dir(dir);
}

/* Every row of path; the number of PF_ERR_FORMAT lines in *bad. */
static uint64_t read_all(const char *path, uint64_t *bad) {
    pf_criteo_reader *r;
    pf_error err;
    assert_int_equal(pf_criteo_open(path, 0, &r, &err), PF_OK);
    pf_criteo_row row;
    pf_status st;
    uint64_t rows = 0;
    *bad = 0;
    while ((st = pf_criteo_next(r, &row, &err)) != PF_ERR_NOT_FOUND) {
        if (st == PF_OK)
            rows++;
        else if (st == PF_ERR_FORMAT) {
            assert_non_null(strstr(err.message, path));
            (*bad)++;
        } else
            fail_msg("%s: %s: %s", path, pf_strerror(st), err.message);
    }
    pf_criteo_close(r);
    return rows;
}

static void test_data_files(void **state) {
    (void)state;
    const char *kinds[] = {"valid", "invalid"};
    for (int k = 0; k < 2; k++) {
        char dir[512], path[600];
        snprintf(dir, sizeof dir, "%s/criteo/%s", PSFLOW_TEST_DATA, kinds[k]);
        char *names[32];
        int n = (int)data_files(dir, ".tsv", false, names, 32);
        assert_true(n >= 2);
        for (int i = 0; i < n; i++) {
            data_path_join(path, sizeof path, dir, names[i]);
            uint64_t bad, rows = read_all(path, &bad);
            if (k == 0 && (bad != 0 || rows == 0))
                fail_msg("%s: %" PRIu64 " rows, %" PRIu64 " bad lines", names[i], rows, bad);
            if (k == 1 && bad == 0)
                fail_msg("%s: no bad line found", names[i]);
            free(names[i]);
        }
    }
}

/* --- the generator ------------------------------------------------------------------------ */

static int compare_names(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

/* The part files of dir, sorted, into names[0 .. max); returns how many. */
static int part_files(const char *dir, char names[][64], int max) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "part-", 5) != 0)
            continue;
        assert_true(n < max);
        assert_true(strlen(e->d_name) < 64);
        strcpy(names[n++], e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, 64, compare_names);
    return n;
}

/* Generates rows over files into a new temp dir (its path in dir) and checks what is read
 * back against *out. */
static void generate_and_check(int64_t rows, int files, uint64_t seed, int gzip, char *dir,
                               size_t dir_size, pf_criteo_gen_result *out) {
    make_temp_dir(dir, dir_size);
    pf_criteo_gen_options o = {
        .dir = dir, .rows = rows, .files = files, .seed = seed, .gzip = gzip};
    pf_error err;
    pf_status st = pf_criteo_generate(&o, out, &err);
    if (st != PF_OK)
        fail_msg("pf_criteo_generate: %s: %s", pf_strerror(st), err.message);
    assert_int_equal(out->rows, rows);
    assert_true(out->positives > 0 && out->positives < rows);
    assert_true(out->bayes_auc > 0.6 && out->bayes_auc < 1.0);
    assert_true(out->bayes_loss > 0 && out->bayes_loss < log(2.0));
    /* the interactions carry signal: without them the true model ranks worse */
    assert_true(out->first_order_auc > 0.55 && out->first_order_auc < out->bayes_auc - 0.05);

    char path[600];
    data_path_join(path, sizeof path, dir, "truth.json");
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size > 2);

    char names[16][64];
    assert_int_equal(part_files(dir, names, 16), files);
    float *p = malloc((size_t)rows * sizeof *p), *y = malloc((size_t)rows * sizeof *y);
    assert_non_null(p);
    assert_non_null(y);
    int64_t n = 0, positives = 0;
    uint64_t bytes = 0;
    double loss = 0;
    for (int f = 0; f < files; f++) {
        const char *ext = gzip ? ".tsv.gz" : ".tsv";
        size_t nl = strlen(names[f]), el = strlen(ext);
        assert_true(nl > el && strcmp(names[f] + nl - el, ext) == 0);
        data_path_join(path, sizeof path, dir, names[f]);
        if (gzip) {
            unsigned char magic[2];
            FILE *fp = fopen(path, "rb");
            assert_non_null(fp);
            assert_int_equal(fread(magic, 1, 2, fp), 2);
            fclose(fp);
            assert_true(magic[0] == 0x1f && magic[1] == 0x8b);
        }
        pf_criteo_reader *r;
        assert_int_equal(pf_criteo_open(path, 0, &r, &err), PF_OK);
        pf_criteo_row row;
        while ((st = pf_criteo_next(r, &row, &err)) == PF_OK) {
            assert_true(n < rows);
            double q = pf_criteo_true_probability(seed, &row);
            assert_true(q > 0 && q < 1);
            p[n] = (float)q;
            y[n] = (float)row.label;
            positives += row.label;
            loss -= row.label ? log(q) : log(1 - q);
            n++;
        }
        if (st != PF_ERR_NOT_FOUND)
            fail_msg("%s: %s: %s", names[f], pf_strerror(st), err.message);
        bytes += pf_criteo_bytes(r);
        pf_criteo_close(r);
    }
    assert_int_equal(n, rows);
    assert_int_equal(positives, out->positives);
    assert_int_equal(bytes, out->bytes);
    double auc = pf_auc(p, y, n);
    if (fabs(auc - out->bayes_auc) > 0.002)
        fail_msg("AUC of the rows read back %.5f, generator says %.5f", auc, out->bayes_auc);
    if (fabs(loss / (double)n - out->bayes_loss) > 0.002)
        fail_msg("logloss of the rows read back %.5f, generator says %.5f", loss / (double)n,
                 out->bayes_loss);
    free(p);
    free(y);
}

static void test_generate(void **state) {
    (void)state;
    char dir[256];
    pf_criteo_gen_result out;
    generate_and_check(20000, 3, 7, 0, dir, sizeof dir, &out);
    remove_dir(dir);
    generate_and_check(3000, 3, 7, 1, dir, sizeof dir, &out);
    remove_dir(dir);
}

static bool files_equal(const char *a, const char *b) {
    size_t la, lb;
    char *da = data_read(a, (size_t)1 << 30, &la), *db = data_read(b, (size_t)1 << 30, &lb);
    bool same = la == lb && memcmp(da, db, la) == 0;
    pf_free(da);
    pf_free(db);
    return same;
}

static void test_generate_deterministic(void **state) {
    (void)state;
    char a[256], b[256], c[256], pa[600], pb[600], pc[600];
    pf_criteo_gen_result ra, rb, rc;
    generate_and_check(3000, 2, 11, 0, a, sizeof a, &ra);
    generate_and_check(3000, 2, 11, 0, b, sizeof b, &rb);
    generate_and_check(3000, 2, 12, 0, c, sizeof c, &rc);
    char names[16][64];
    assert_int_equal(part_files(a, names, 16), 2);
    for (int f = 0; f < 2; f++) {
        data_path_join(pa, sizeof pa, a, names[f]);
        data_path_join(pb, sizeof pb, b, names[f]);
        data_path_join(pc, sizeof pc, c, names[f]);
        assert_true(files_equal(pa, pb));
        assert_false(files_equal(pa, pc)); /* the seed matters */
    }
    assert_int_equal(ra.positives, rb.positives);
    assert_true(ra.bayes_auc == rb.bayes_auc);
    remove_dir(a);
    remove_dir(b);
    remove_dir(c);
}

static void test_generate_invalid(void **state) {
    (void)state;
    char dir[256];
    make_temp_dir(dir, sizeof dir);
    const struct {
        int64_t rows;
        int files;
        int first;
    } cases[] = {{0, 1, 0},           {-5, 1, 0},  {10, 0, 0},     {10, -1, 0},    {3, 4, 0},
                 {200000, 100001, 0}, {10, 1, -1}, {10, 2, 99999}, {10, 1, 100000}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pf_criteo_gen_options o = {.dir = dir,
                                   .rows = cases[i].rows,
                                   .files = cases[i].files,
                                   .seed = 1,
                                   .first = cases[i].first};
        pf_criteo_gen_result out;
        pf_error err;
        pf_status st = pf_criteo_generate(&o, &out, &err);
        if (st != PF_ERR_INVALID)
            fail_msg("rows %" PRId64 " files %d: %s", cases[i].rows, cases[i].files,
                     pf_strerror(st));
    }
    remove_dir(dir); /* nothing was written: rmdir succeeds */

    /* a dir that does not exist: PF_ERR_IO naming the file */
    pf_criteo_gen_options o = {.dir = dir, .rows = 10, .files = 1, .seed = 1};
    pf_criteo_gen_result out;
    pf_error err;
    assert_int_equal(pf_criteo_generate(&o, &out, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, dir));
}

/* Whole contents of path (malloc'd, NUL-terminated; its length in *n). */
static char *file_text(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *text = malloc((size_t)size + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
    text[size] = 0;
    fclose(f);
    *n = (size_t)size;
    return text;
}

/* first: files numbered from it are those a larger call writes under the same numbers (the
 * same model and streams), so a test set made with first = the training set's file count
 * holds none of its rows. */
static void test_generate_first_file(void **state) {
    (void)state;
    char all[256], later[256], path[600];
    make_temp_dir(all, sizeof all);
    make_temp_dir(later, sizeof later);
    pf_criteo_gen_options o = {.dir = all, .rows = 300, .files = 3, .seed = 4};
    pf_criteo_gen_result r;
    pf_error err;
    assert_int_equal(pf_criteo_generate(&o, &r, &err), PF_OK);
    pf_criteo_gen_options p = {.dir = later, .rows = 100, .files = 1, .seed = 4, .first = 2};
    assert_int_equal(pf_criteo_generate(&p, &r, &err), PF_OK);
    size_t n_all, n_later, n_zero;
    data_path_join(path, sizeof path, all, "part-00002.tsv");
    char *a = file_text(path, &n_all);
    data_path_join(path, sizeof path, later, "part-00002.tsv");
    char *b = file_text(path, &n_later);
    data_path_join(path, sizeof path, all, "part-00000.tsv");
    char *z = file_text(path, &n_zero);
    assert_int_equal(n_all, n_later);
    assert_memory_equal(a, b, n_all);
    assert_true(n_zero != n_all || memcmp(a, z, n_all) != 0);
    data_path_join(path, sizeof path, later, "part-00000.tsv");
    assert_int_not_equal(access(path, F_OK), 0);
    data_path_join(path, sizeof path, later, "truth.json");
    char *truth = file_text(path, &n_later);
    assert_non_null(strstr(truth, "\"first_file\": 2"));
    free(a);
    free(b);
    free(z);
    free(truth);
    remove_dir(all);
    remove_dir(later);
}

/* Random lines in every form a field may take (empty, negative, up to 18 digits, "+",
 * ids of 1 to 8 digits in either case, a "\r" before the end) parse back to the values
 * they were written from, whichever of the parser's two paths reads them. */
static void round_trip(int short_fields) {
    uint64_t z = 12345;
    for (int line_no = 0; line_no < 20000; line_no++) {
        char line[1024];
        int len = 0;
        pf_criteo_row want = {0};
        z = z * 6364136223846793005ULL + 1442695040888963407ULL;
        want.label = (int)(z >> 63);
        len += snprintf(line + len, sizeof line - (size_t)len, "%d", want.label);
        for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
            z = z * 6364136223846793005ULL + 1442695040888963407ULL;
            int kind = (int)(z >> 60) & 7, digits = 1 + (int)((z >> 40) % (short_fields ? 7 : 18));
            int64_t v = 0;
            for (int d = 0; d < digits; d++)
                v = v * 10 + (int64_t)((z >> (d % 32)) % 10);
            if (kind == 0) { /* empty */
                len += snprintf(line + len, sizeof line - (size_t)len, "\t");
                continue;
            }
            if (kind == 1)
                v = -v;
            if (kind == 2 && short_fields)
                kind = 3; /* no "+": the vector path's lines */
            want.num[j] = v;
            want.num_present |= 1u << j;
            len += snprintf(line + len, sizeof line - (size_t)len,
                            kind == 2 ? "\t+%" PRId64 : "\t%" PRId64, v);
        }
        for (int c = 0; c < PF_CRITEO_CATEGORICAL; c++) {
            z = z * 6364136223846793005ULL + 1442695040888963407ULL;
            int kind = (int)(z >> 61), digits = 1 + (int)((z >> 20) % 8);
            uint32_t v = (uint32_t)(z >> 24) & (uint32_t)((1ULL << (4 * digits)) - 1);
            if (kind == 0) {
                len += snprintf(line + len, sizeof line - (size_t)len, "\t");
                continue;
            }
            want.cat[c] = v;
            want.cat_present |= 1u << c;
            len += snprintf(line + len, sizeof line - (size_t)len, kind == 1 ? "\t%0*X" : "\t%0*x",
                            digits, v);
        }
        if (z >> 62 == 0 && !short_fields)
            line[len++] = '\r';
        pf_criteo_row got;
        int column;
        char why[160];
        pf_status st = pf_criteo_parse_line(line, (size_t)len, &got, &column, why, sizeof why);
        if (st != PF_OK)
            fail_msg("line %d: %s (column %d): %.*s", line_no, why, column, len, line);
        assert_int_equal(got.label, want.label);
        assert_int_equal(got.num_present, want.num_present);
        assert_int_equal(got.cat_present, want.cat_present);
        for (int j = 0; j < PF_CRITEO_NUMERIC; j++)
            if (want.num_present >> j & 1)
                assert_true(got.num[j] == want.num[j]);
        for (int c = 0; c < PF_CRITEO_CATEGORICAL; c++)
            if (want.cat_present >> c & 1)
                assert_int_equal(got.cat[c], want.cat[c]);
    }
}

/* Random lines in every form a field may take (empty, negative, up to 18 digits, "+",
 * ids of 1 to 8 digits in either case, a "\r" before the end), and lines of the forms the
 * vector path reads (at most 7 digits, no "+", no "\r"), parse back to the values they were
 * written from, with the vector path on (where the processor has it) and off. */
static void test_parse_random_round_trip(void **state) {
    (void)state;
    for (int vector = 1; vector >= 0; vector--) {
        int on = pf_criteo_use_vector(vector);
        if (vector && !on)
            print_message("note: this processor lacks AVX-512 VBMI2; the vector path is not "
                          "tested here\n");
        round_trip(0);
        round_trip(1);
    }
    pf_criteo_use_vector(1);
}

static int same_parse(const char *line, size_t len) {
    pf_criteo_row a, b;
    int col_a, col_b;
    char why_a[160], why_b[160];
    memset(&a, 0x5a, sizeof a);
    memset(&b, 0xa5, sizeof b);
    pf_criteo_use_vector(1);
    pf_status st_a = pf_criteo_parse_line(line, len, &a, &col_a, why_a, sizeof why_a);
    pf_criteo_use_vector(0);
    pf_status st_b = pf_criteo_parse_line(line, len, &b, &col_b, why_b, sizeof why_b);
    if (st_a != st_b || col_a != col_b)
        return 0;
    if (st_a != PF_OK)
        return strcmp(why_a, why_b) == 0;
    if (a.label != b.label || a.num_present != b.num_present || a.cat_present != b.cat_present)
        return 0;
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++)
        if ((a.num_present >> j & 1) && a.num[j] != b.num[j])
            return 0;
    for (int c = 0; c < PF_CRITEO_CATEGORICAL; c++)
        if ((a.cat_present >> c & 1) && a.cat[c] != b.cat[c])
            return 0;
    return 1;
}

/* Both paths give the same answer (row, or column and reason) for generated lines and for
 * every one-byte change of them: each byte replaced by a tab, a sign, a digit, a letter, a
 * byte above 0x7f; each byte deleted; a byte inserted; and for lines of 0 to 300 tabs. */
static void test_parse_paths_agree(void **state) {
    (void)state;
    if (!pf_criteo_use_vector(1)) {
        print_message("skipped: this processor lacks AVX-512 VBMI2 (one path only)\n");
        return;
    }
    char dir[] = "/tmp/psflow-criteo-XXXXXX";
    assert_non_null(mkdtemp(dir));
    pf_criteo_gen_options o = {.dir = dir, .rows = 300, .files = 1, .seed = 7};
    pf_criteo_gen_result gen;
    pf_error err;
    assert_int_equal(pf_criteo_generate(&o, &gen, &err), PF_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/part-00000.tsv", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static const char subs[] = "\t-+09afAFgG:/@` \x80\xff\n";
    char line[1024], t[1100];
    long checked = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\n");
        assert_true(same_parse(line, len));
        for (size_t i = 0; i < len; i++) {
            for (const char *c = subs; *c; c++) {
                memcpy(t, line, len);
                t[i] = *c;
                if (!same_parse(t, len))
                    fail_msg("byte %zu as 0x%02x: %.*s", i, (unsigned char)*c, (int)len, t);
            }
            memcpy(t, line, i);
            memcpy(t + i, line + i + 1, len - i - 1);
            if (!same_parse(t, len - 1))
                fail_msg("byte %zu deleted: %.*s", i, (int)len - 1, t);
            memcpy(t, line, i);
            t[i] = '7';
            memcpy(t + i + 1, line + i, len - i);
            if (!same_parse(t, len + 1))
                fail_msg("'7' inserted at %zu: %.*s", i, (int)len + 1, t);
            checked += 2 + (long)sizeof subs - 1;
        }
    }
    fclose(f);
    /* one field 250 to 300 bytes long (whose length modulo 256 looks short), anywhere */
    static const int fields[] = {0, 1, 7, 8, 9, 13, 14, 21, 22, 30, 37, 38, 39};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        for (int size = 250; size <= 300; size++) {
            int len = 0;
            for (int col = 0; col < PF_CRITEO_FIELDS; col++) {
                if (col)
                    t[len++] = '\t';
                if (col == fields[i]) {
                    memset(t + len, col <= PF_CRITEO_NUMERIC ? '1' : 'a', (size_t)size);
                    len += size;
                } else {
                    t[len++] = col ? '7' : '1';
                }
            }
            if (!same_parse(t, (size_t)len))
                fail_msg("field %d of %d bytes", fields[i], size);
        }
    for (int tabs = 0; tabs <= 300; tabs++) {
        memset(t, '\t', (size_t)tabs);
        t[0] = '1';
        assert_true(same_parse(t, tabs ? (size_t)tabs : 1));
    }
    pf_criteo_use_vector(1);
    remove_dir(dir);
    assert_true(checked > 100000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_parse_random_round_trip),
        cmocka_unit_test(test_parse_paths_agree),
        cmocka_unit_test(test_parse_missing),
        cmocka_unit_test(test_parse_bad_label),
        cmocka_unit_test(test_parse_field_count),
        cmocka_unit_test(test_parse_bad_ids),
        cmocka_unit_test(test_parse_bad_numbers),
        cmocka_unit_test(test_column_name),
        cmocka_unit_test(test_reader_plain_and_gzip),
        cmocka_unit_test(test_reader_blank_lines_and_no_newline),
        cmocka_unit_test(test_reader_empty_file),
        cmocka_unit_test(test_reader_missing_file),
        cmocka_unit_test(test_reader_truncated_gzip),
        cmocka_unit_test(test_reader_long_line),
        cmocka_unit_test(test_reader_bad_line),
        cmocka_unit_test(test_data_files),
        cmocka_unit_test(test_generate),
        cmocka_unit_test(test_generate_deterministic),
        cmocka_unit_test(test_generate_invalid),
        cmocka_unit_test(test_generate_first_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
