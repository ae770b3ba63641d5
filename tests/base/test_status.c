/* test_status.c - status texts and the error detail: pf_error_set with a JSON pointer,
 * pf_error_set_offset with a byte offset, NULL details, and long messages cut to fit (at a
 * UTF-8 character boundary).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "psflow/status.h"

static void test_strerror(void **state) {
    (void)state;
    assert_string_equal(pf_strerror(PF_OK), "ok");
    assert_string_equal(pf_strerror(PF_ERR_NOMEM), "out of memory");
    assert_string_equal(pf_strerror(PF_ERR_CANCELLED), "cancelled");
    assert_string_equal(pf_strerror((pf_status)-999), "unknown status");
}

static void test_error_detail(void **state) {
    (void)state;
    pf_error err;
    pf_error_clear(&err);
    assert_string_equal(err.message, "");
    assert_string_equal(err.pointer, "");
    assert_int_equal(err.offset, -1);

    assert_int_equal(pf_error_set(&err, PF_ERR_SPEC, "/model/hidden/1", "must be %d or more", 1),
                     PF_ERR_SPEC);
    assert_string_equal(err.message, "must be 1 or more");
    assert_string_equal(err.pointer, "/model/hidden/1");

    assert_int_equal(pf_error_set_offset(&err, PF_ERR_FORMAT, 24, "bad %s", "length"),
                     PF_ERR_FORMAT);
    assert_string_equal(err.message, "bad length");
    assert_string_equal(err.pointer, ""); /* an offset replaces the pointer */
    assert_int_equal(err.offset, 24);

    /* No detail wanted: the status still comes back. */
    assert_int_equal(pf_error_set(NULL, PF_ERR_IO, NULL, "x"), PF_ERR_IO);
    assert_int_equal(pf_error_set_offset(NULL, PF_ERR_IO, 3, "x"), PF_ERR_IO);

    /* A message longer than the detail holds is cut, still NUL-terminated. */
    char longer[400];
    memset(longer, 'm', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    pf_error_set_offset(&err, PF_ERR_FORMAT, 0, "%s", longer);
    assert_int_equal(strlen(err.message), sizeof err.message - 1);

    /* ...at a character boundary: 254 'm' then U+00E9 would end past the 255 bytes kept. */
    memcpy(longer + 254, "\xc3\xa9", 2);
    pf_error_set(&err, PF_ERR_IO, NULL, "%s", longer);
    assert_int_equal(strlen(err.message), 254);
    memcpy(longer + 253, "\xc3\xa9", 2); /* 253 'm' and the character fit whole */
    pf_error_set_offset(&err, PF_ERR_IO, 0, "%s", longer);
    assert_int_equal(strlen(err.message), 255);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_error_detail),
    };
    return cmocka_run_group_tests_name("status", tests, NULL, NULL);
}
