/* test_fs.c - whole files: reads of empty, small and exactly-max files, refusals of larger
 * files and of streams that run past the bound, missing files and folders (errors naming the
 * path), failing allocations; atomic writes from pieces that leave no .tmp behind, replace
 * the old file whole and refuse a folder that does not exist; mkdir -p.
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

#include "psflow/fs.h"
#include "psflow/mem.h"
#include "tests/support/counting_alloc.h"

static char root[256];

static int setup(void **state) {
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/psflow_test_fs_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", root, name);
}

static void put(const char *name, const void *data, size_t n) {
    char path[512];
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void test_read(void **state) {
    (void)state;
    char path[512], *text;
    size_t len;
    pf_error err;
    put("empty", "", 0);
    path_of(path, sizeof path, "empty");
    assert_int_equal(pf_fs_read_file(path, 10, &text, &len, &err), PF_OK);
    assert_int_equal(len, 0);
    assert_string_equal(text, ""); /* never NULL, NUL-terminated */
    pf_free(text);

    put("ten", "0123456789", 10);
    path_of(path, sizeof path, "ten");
    assert_int_equal(pf_fs_read_file(path, 10, &text, &len, &err), PF_OK); /* exactly max */
    assert_int_equal(len, 10);
    assert_string_equal(text, "0123456789");
    pf_free(text);
    assert_int_equal(pf_fs_read_file(path, 9, &text, &len, &err), PF_ERR_RANGE);
    assert_null(text);
    assert_int_equal(len, 0);
    assert_non_null(strstr(err.message, path));
    assert_non_null(strstr(err.message, "10 bytes, more than the 9 allowed"));

    /* Binary data with NUL bytes comes back whole. */
    const unsigned char bin[] = {0, 1, 2, 0, 255};
    put("bin", bin, sizeof bin);
    path_of(path, sizeof path, "bin");
    assert_int_equal(pf_fs_read_file(path, 1 << 20, &text, &len, &err), PF_OK);
    assert_int_equal(len, sizeof bin);
    assert_memory_equal(text, bin, sizeof bin);
    pf_free(text);

    /* A large file: read whole, in one allocation. */
    size_t big = 3u << 20;
    unsigned char *data = malloc(big);
    assert_non_null(data);
    for (size_t i = 0; i < big; i++)
        data[i] = (unsigned char)(i * 7);
    put("big", data, big);
    path_of(path, sizeof path, "big");
    use_counting(-1);
    assert_int_equal(pf_fs_read_file(path, big, &text, &len, &err), PF_OK);
    assert_int_equal(alloc_count, 1);
    use_libc();
    assert_int_equal(len, big);
    assert_memory_equal(text, data, big);
    pf_free(text);
    free(data);
}

static void test_read_errors(void **state) {
    (void)state;
    char path[512], *text = (char *)1;
    size_t len = 7;
    pf_error err;
    path_of(path, sizeof path, "missing");
    assert_int_equal(pf_fs_read_file(path, 10, &text, &len, &err), PF_ERR_NOT_FOUND);
    assert_null(text);
    assert_int_equal(len, 0);
    assert_non_null(strstr(err.message, path));
    assert_non_null(strstr(err.message, "No such file"));

    assert_int_equal(pf_fs_read_file(root, 10, &text, &len, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, root));
    assert_non_null(strstr(err.message, "folder"));

    /* A stream has no size: it is read until the bound says stop. */
    assert_int_equal(pf_fs_read_file("/dev/zero", 100000, &text, &len, &err), PF_ERR_RANGE);
    assert_null(text);
    assert_non_null(strstr(err.message, "/dev/zero: larger than the 100000 bytes allowed"));

    /* Out of memory: an error naming the path, nothing leaked (the allocator counts). */
    put("ten", "0123456789", 10);
    path_of(path, sizeof path, "ten");
    use_counting(0);
    assert_int_equal(pf_fs_read_file(path, 10, &text, &len, &err), PF_ERR_NOMEM);
    use_libc();
    assert_null(text);
    assert_non_null(strstr(err.message, path));
}

static void test_write_atomic(void **state) {
    (void)state;
    char path[512], tmp[520], *text;
    size_t len;
    pf_error err;
    path_of(path, sizeof path, "out.json");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    struct iovec parts[] = {{(void *)"{\"a\":", 5}, {(void *)"", 0}, {(void *)"1}", 2}};
    assert_int_equal(pf_fs_write_atomic(path, parts, 3, &err), PF_OK);
    assert_int_equal(pf_fs_read_file(path, 100, &text, &len, &err), PF_OK);
    assert_string_equal(text, "{\"a\":1}");
    pf_free(text);
    assert_int_equal(access(tmp, F_OK), -1); /* no .tmp left */

    /* Replacing: the new contents whole, however much shorter. */
    struct iovec one = {(void *)"x", 1};
    assert_int_equal(pf_fs_write_atomic(path, &one, 1, &err), PF_OK);
    assert_int_equal(pf_fs_read_file(path, 100, &text, &len, &err), PF_OK);
    assert_string_equal(text, "x");
    pf_free(text);

    /* No such folder: an error naming the file, nothing created. */
    char bad[512];
    path_of(bad, sizeof bad, "no/such/folder/out.json");
    assert_int_equal(pf_fs_write_atomic(bad, &one, 1, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, "out.json.tmp"));
    assert_non_null(strstr(err.message, "No such file"));

    /* A folder in the way of the rename: the error names the file; the .tmp is removed. */
    path_of(bad, sizeof bad, "taken");
    assert_int_equal(mkdir(bad, 0755), 0);
    assert_int_equal(pf_fs_write_atomic(bad, &one, 1, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, bad));
    snprintf(tmp, sizeof tmp, "%s.tmp", bad);
    assert_int_equal(access(tmp, F_OK), -1);
}

static void test_make_dirs(void **state) {
    (void)state;
    char path[512];
    pf_error err;
    path_of(path, sizeof path, "a/b/c");
    assert_int_equal(pf_fs_make_dirs(path, &err), PF_OK);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(pf_fs_make_dirs(path, &err), PF_OK); /* exists: fine */
    assert_int_equal(pf_fs_fsync_dir(path), 0);
    put("file", "x", 1);
    path_of(path, sizeof path, "file/sub");
    assert_int_equal(pf_fs_make_dirs(path, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, "file"));
    path_of(path, sizeof path, "file");
    assert_int_equal(pf_fs_make_dirs(path, &err), PF_ERR_IO);
    assert_non_null(strstr(err.message, "not a folder"));
    assert_int_equal(pf_fs_fsync_dir(path), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_atomic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_make_dirs, setup, teardown),
    };
    return cmocka_run_group_tests_name("fs", tests, NULL, NULL);
}
