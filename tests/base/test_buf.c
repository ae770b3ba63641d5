/* test_buf.c - the growable byte buffer: growth up to the hard cap, reuse of the block after
 * a reset, geometric growth (few reallocations), and failing allocations that leave the
 * buffer unchanged.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "psflow/buf.h"
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_buf_alloc_failure),
    };
    return cmocka_run_group_tests_name("buf", tests, NULL, NULL);
}
