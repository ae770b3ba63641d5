/* test_safetensors.c - round trip, layout details other readers rely on, and rejection of
 * malformed files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "psflow/safetensors.h"

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/psflow-st-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void test_round_trip(void **state) {
    (void)state;
    float k[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-1, 0.5f, 7};
    pf_tensor_view t[] = {{.name = "dense_0/kernel", .rank = 2, .shape = {2, 3}, .data = k},
                          {.name = "dense_0/bias", .rank = 1, .shape = {3}, .data = b}};
    const char *keys[] = {"global_step"}, *values[] = {"42"};
    char path[128];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    pf_error err;
    assert_int_equal(pf_safetensors_write(path, t, 2, keys, values, 1, &err), PF_OK);
    assert_int_equal(access(path, F_OK), 0);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0); /* renamed into place */

    /* Layout: 8-byte LE header length, multiple of 8; data right after. */
    FILE *f = fopen(path, "rb");
    unsigned char len[8];
    assert_int_equal(fread(len, 1, 8, f), 8);
    fclose(f);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)len[i] << (8 * i);
    assert_int_equal(hlen % 8, 0);

    pf_safetensors *st;
    assert_int_equal(pf_safetensors_read(path, &st, &err), PF_OK);
    assert_int_equal(pf_safetensors_count(st), 2);
    pf_tensor_view v;
    assert_int_equal(pf_safetensors_find(st, "dense_0/kernel", &v), 0);
    assert_int_equal(v.rank, 2);
    assert_int_equal(v.shape[0], 2);
    assert_int_equal(v.shape[1], 3);
    assert_memory_equal(v.data, k, sizeof k);
    assert_int_equal(pf_safetensors_find(st, "dense_0/bias", &v), 0);
    assert_memory_equal(v.data, b, sizeof b);
    assert_int_equal(pf_safetensors_find(st, "nope", &v), -1);
    assert_string_equal(pf_safetensors_meta(st, "global_step"), "42");
    assert_null(pf_safetensors_meta(st, "missing"));
    pf_safetensors_destroy(st);
}

/* Integer tensors: written with their dtype and size, read back by pf_safetensors_read_any
 * with theirs, refused by the float-only reader; a size that disagrees with the dtype is
 * a format error. */
static void test_integer_dtypes(void **state) {
    (void)state;
    uint64_t u[3] = {1, 1ull << 40, UINT64_MAX};
    int64_t i[2] = {INT64_MIN + 1, -5};
    uint8_t b[5] = {0, 1, 2, 254, 255};
    float f[1] = {3};
    pf_tensor_view t[] = {
        {.name = "u", .rank = 1, .shape = {3}, .raw = u, .dtype = PF_DTYPE_U64},
        {.name = "i", .rank = 1, .shape = {2}, .raw = i, .dtype = PF_DTYPE_I64},
        {.name = "b", .rank = 1, .shape = {5}, .raw = b, .dtype = PF_DTYPE_U8},
        {.name = "f", .rank = 1, .shape = {1}, .data = f},
    };
    char path[128];
    snprintf(path, sizeof path, "%s/ints.safetensors", dir);
    pf_error err;
    assert_int_equal(pf_safetensors_write(path, t, 4, NULL, NULL, 0, &err), PF_OK);
    pf_safetensors *st = NULL;
    assert_int_equal(pf_safetensors_read(path, &st, &err), PF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "reads F32"));
    assert_int_equal(pf_safetensors_read_any(path, &st, &err), PF_OK);
    pf_tensor_view v;
    assert_int_equal(pf_safetensors_find(st, "u", &v), 0);
    assert_int_equal(v.dtype, PF_DTYPE_U64);
    assert_memory_equal(v.raw, u, sizeof u);
    assert_int_equal(pf_safetensors_find(st, "i", &v), 0);
    assert_int_equal(v.dtype, PF_DTYPE_I64);
    assert_memory_equal(v.raw, i, sizeof i);
    assert_int_equal(pf_safetensors_find(st, "b", &v), 0);
    assert_int_equal(v.dtype, PF_DTYPE_U8);
    assert_int_equal(v.shape[0], 5);
    assert_memory_equal(v.raw, b, sizeof b);
    assert_int_equal(pf_safetensors_find(st, "f", &v), 0);
    assert_int_equal(v.dtype, PF_DTYPE_F32);
    assert_true(v.data[0] == 3);
    pf_safetensors_destroy(st);

    /* "I64" over 12 bytes (3 floats' worth) for a shape of 3 */
    static const char hdr[] =
        "{\"x\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,12]}}    ";
    unsigned char file[8 + sizeof hdr - 1 + 12] = {0};
    file[0] = (unsigned char)(sizeof hdr - 1);
    memcpy(file + 8, hdr, sizeof hdr - 1);
    FILE *fp = fopen(path, "wb");
    assert_int_equal(fwrite(file, 1, sizeof file, fp), sizeof file);
    fclose(fp);
    assert_int_equal(pf_safetensors_read_any(path, &st, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "I64"));
}

static void test_write_errors(void **state) {
    (void)state;
    float x = 1;
    pf_tensor_view dup[] = {{.name = "a", .data = &x}, {.name = "a", .data = &x}};
    pf_error err;
    char path[128];
    snprintf(path, sizeof path, "%s/dup.safetensors", dir);
    assert_int_equal(pf_safetensors_write(path, dup, 2, NULL, NULL, 0, &err), PF_ERR_INVALID);
    assert_int_equal(
        pf_safetensors_write("/nonexistent-dir/x.safetensors", dup, 1, NULL, NULL, 0, &err),
        PF_ERR_IO);
    assert_non_null(strstr(err.message, "nonexistent-dir"));
}

/* A header followed by `data_len` bytes of data. */
static void write_st(const char *name, const char *header, size_t data_len) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t hl = strlen(header);
    unsigned char *buf = calloc(1, 8 + hl + data_len);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    write_bytes(path, buf, 8 + hl + data_len);
    free(buf);
}

static pf_status read_named(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    pf_safetensors *st = NULL;
    pf_error err;
    pf_error_clear(&err);
    pf_status s = pf_safetensors_read(path, &st, &err);
    if (s == PF_OK)
        pf_safetensors_destroy(st);
    else
        assert_true(err.message[0] != '\0');
    return s;
}

static void test_invalid(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/short", dir);
    write_bytes(path, "\x01\x02", 2);
    assert_int_equal(read_named("short"), PF_ERR_FORMAT);

    snprintf(path, sizeof path, "%s/hugelen", dir);
    write_bytes(path, "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
    assert_int_equal(read_named("hugelen"), PF_ERR_FORMAT);

    write_st("notjson", "{not json", 0);
    assert_int_equal(read_named("notjson"), PF_ERR_FORMAT);
    write_st("array", "[1,2]", 0);
    assert_int_equal(read_named("array"), PF_ERR_FORMAT);
    write_st("f16", "{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4);
    assert_int_equal(read_named("f16"), PF_ERR_UNSUPPORTED);
    write_st("sizemismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
    assert_int_equal(read_named("sizemismatch"), PF_ERR_FORMAT);
    write_st("outside", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
    assert_int_equal(read_named("outside"), PF_ERR_FORMAT);
    write_st("overlap",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             12);
    assert_int_equal(read_named("overlap"), PF_ERR_FORMAT);
    write_st("hole", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    assert_int_equal(read_named("hole"), PF_ERR_FORMAT);
    write_st("negdim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4);
    assert_int_equal(read_named("negdim"), PF_ERR_FORMAT);
    write_st("bigdims",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
             "\"data_offsets\":[0,4]}}",
             4);
    assert_int_equal(read_named("bigdims"), PF_ERR_FORMAT);
    write_st("noffsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4);
    assert_int_equal(read_named("noffsets"), PF_ERR_FORMAT);
    write_st("badmeta", "{\"__metadata__\":3}", 0);
    assert_int_equal(read_named("badmeta"), PF_ERR_FORMAT);
    write_st("ok", "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4);
    assert_int_equal(read_named("ok"), PF_OK);
    assert_int_equal(read_named("missing-file"), PF_ERR_IO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_integer_dtypes),
        cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_invalid),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
