/* data_files.c - listing and reading the tests' data files (see data_files.h). */
#include "tests/support/data_files.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "psflow/fs.h"

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t data_files(const char *dir, const char *suffix, bool strip, char **names, size_t max) {
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("cannot open %s", dir);
    size_t n = 0, slen = strlen(suffix);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len <= slen || strcmp(e->d_name + len - slen, suffix) != 0)
            continue;
        assert_true(n < max);
        names[n] = strdup(e->d_name);
        assert_non_null(names[n]);
        if (strip)
            names[n][len - slen] = '\0';
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, compare_names);
    return n;
}

char *data_read(const char *path, size_t max, size_t *len) {
    char *text;
    pf_error err;
    if (pf_fs_read_file(path, max, &text, len, &err) != PF_OK)
        fail_msg("%s", err.message);
    return text;
}

void data_path_join(char *out, size_t size, const char *a, const char *b) {
    int n = snprintf(out, size, "%s/%s", a, b);
    assert_true(n > 0 && (size_t)n < size);
}

void data_write(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

void data_write_gz(const char *path, const void *data, size_t len) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(f), Z_OK);
}
