/* test_buf.c - the growable byte buffer: growth up to the hard cap, reuse of the block after
 * a reset, geometric growth (few reallocations), failing allocations that leave the
 * buffer unchanged, printf-style appends, the NUL terminator and handing the block over.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "psflow/buf.h"
#include "psflow/mem.h"
#include "tests/support/counting_alloc.h"

static void test_buf(void **state) {
    (void)state;
    pf_buf b;
    pf_buf_init(&b, 100);
    assert_null(b.data);
    assert_int_equal(pf_buf_reserve(&b, 10), PF_OK);
    assert_int_equal(b.cap, 64); /* the first block */
    uint8_t bytes[128];
    for (int i = 0; i < 128; i++)
        bytes[i] = (uint8_t)i;
    assert_int_equal(pf_buf_append(&b, bytes, 70), PF_OK);
    assert_int_equal(b.cap, 100); /* doubling stops at the cap */
    assert_int_equal(pf_buf_append(&b, bytes, 31), PF_ERR_RANGE);
    assert_int_equal(b.len, 70); /* unchanged */
    assert_int_equal(pf_buf_append(&b, bytes, 30), PF_OK);
    assert_int_equal(b.len, 100);
    assert_memory_equal(b.data + 70, bytes, 30);
    assert_int_equal(pf_buf_append(&b, NULL, 0), PF_OK);
    assert_int_equal(pf_buf_reserve(&b, SIZE_MAX), PF_ERR_RANGE); /* len + extra overflows */
    uint8_t *block = b.data;
    pf_buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 100);
    void *p;
    assert_int_equal(pf_buf_extend(&b, 8, &p), PF_OK);
    assert_ptr_equal(p, block); /* same block reused */
    assert_int_equal(b.len, 8);
    assert_int_equal(pf_buf_extend(&b, 93, &p), PF_ERR_RANGE);
    assert_null(p);
    pf_buf_deinit(&b);
    assert_null(b.data);
    assert_int_equal(b.cap, 0);
    pf_buf_deinit(&b); /* twice is fine */

    /* Growth is geometric: 64 KiB one byte at a time takes a handful of reallocations. */
    use_counting(-1);
    pf_buf_init(&b, 1 << 20);
    for (int i = 0; i < 65536; i++)
        assert_int_equal(pf_buf_append(&b, bytes + (i & 127), 1), PF_OK);
    assert_true(alloc_count <= 11);
    assert_int_equal(b.data[1000], 1000 & 127);
    pf_buf_deinit(&b);
    use_libc();
}

static void test_buf_alloc_failure(void **state) {
    (void)state;
    pf_buf b;
    pf_buf_init(&b, 1 << 20);
    uint8_t bytes[200] = {1, 2, 3};
    assert_int_equal(pf_buf_append(&b, bytes, 3), PF_OK);
    use_counting(0);
    uint8_t *before = b.data;
    assert_int_equal(pf_buf_append(&b, bytes, 200), PF_ERR_NOMEM);
    assert_ptr_equal(b.data, before);
    assert_int_equal(b.len, 3);
    assert_int_equal(b.cap, 64);
    void *p = &p;
    assert_int_equal(pf_buf_extend(&b, 100, &p), PF_ERR_NOMEM);
    assert_null(p);
    use_libc();
    assert_memory_equal(b.data, bytes, 3);
    assert_int_equal(pf_buf_append(&b, bytes, 200), PF_OK);
    pf_buf_deinit(&b);
}

static void test_buf_printf(void **state) {
    (void)state;
    pf_buf b;
    pf_buf_init(&b, 64);
    assert_int_equal(pf_buf_printf(&b, "%s=%d", "steps", 500), PF_OK);
    assert_int_equal(b.len, 9);
    assert_string_equal((char *)b.data, "steps=500"); /* NUL after the text */
    assert_int_equal(pf_buf_printf(&b, ", %s", "loss"), PF_OK);
    assert_string_equal((char *)b.data, "steps=500, loss");
    assert_int_equal(pf_buf_printf(&b, "%s", ""), PF_OK);
    assert_int_equal(b.len, 15);
    /* Longer than the room left: grows once to the text's size. */
    char big[40];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(pf_buf_printf(&b, "%s", big), PF_OK);
    assert_int_equal(b.len, 15 + 39);
    assert_memory_equal(b.data + 15, big, 39);
    assert_int_equal(b.data[b.len], '\0');
    /* Text and its NUL over the cap: refused, nothing changes. */
    size_t len = b.len;
    assert_int_equal(pf_buf_printf(&b, "%s", "0123456789"), PF_ERR_RANGE);
    assert_int_equal(b.len, len);
    assert_int_equal(pf_buf_printf(&b, "%s", "012345678"), PF_OK); /* exactly to the cap */
    assert_int_equal(b.len, 63);
    assert_int_equal(b.data[63], '\0');
    pf_buf_deinit(&b);

    /* Out of memory: an error, and the text so far is intact. */
    pf_buf_init(&b, 1 << 20);
    assert_int_equal(pf_buf_printf(&b, "%d", 42), PF_OK);
    use_counting(0);
    assert_int_equal(pf_buf_printf(&b, "%0100d", 7), PF_ERR_NOMEM);
    use_libc();
    assert_int_equal(b.len, 2);
    assert_memory_equal(b.data, "42", 2);
    pf_buf_deinit(&b);
}

static void test_buf_terminate_and_detach(void **state) {
    (void)state;
    pf_buf b;
    pf_buf_init(&b, 5);
    assert_int_equal(pf_buf_append(&b, "abcd", 4), PF_OK);
    assert_int_equal(pf_buf_terminate(&b), PF_OK);
    assert_int_equal(b.len, 4); /* the NUL is not counted */
    assert_string_equal((char *)b.data, "abcd");
    assert_int_equal(pf_buf_append(&b, "e", 1), PF_OK);
    assert_int_equal(pf_buf_terminate(&b), PF_ERR_RANGE); /* no room under the cap */
    char *text = pf_buf_detach(&b);
    assert_non_null(text);
    assert_memory_equal(text, "abcde", 5);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    assert_int_equal(b.max, 5); /* still usable */
    assert_int_equal(pf_buf_append(&b, "z", 1), PF_OK);
    assert_ptr_not_equal(b.data, text);
    pf_free(text);
    pf_buf_deinit(&b);
    pf_buf_init(&b, 5);
    assert_null(pf_buf_detach(&b)); /* nothing allocated yet */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_buf_alloc_failure),
        cmocka_unit_test(test_buf_printf),
        cmocka_unit_test(test_buf_terminate_and_detach),
    };
    return cmocka_run_group_tests_name("buf", tests, NULL, NULL);
}
