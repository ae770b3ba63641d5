/* test_text.c - RFC 3339 times (formatting with and without milliseconds, parsing every form
 * the coordinator and other servers send, round trips, refusals) and JSON pointers (RFC 6901
 * escaping, indices, cutting at a UTF-8 boundary when the pointer is full).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "psflow/text.h"

static void test_format_rfc3339(void **state) {
    (void)state;
    char buf[PF_RFC3339_MAX];
    assert_string_equal(pf_text_format_rfc3339(0, false, buf, sizeof buf), "1970-01-01T00:00:00Z");
    assert_string_equal(pf_text_format_rfc3339(1795341600.123, true, buf, sizeof buf),
                        "2026-11-22T10:00:00.123Z");
    assert_string_equal(pf_text_format_rfc3339(1795341600.999, false, buf, sizeof buf),
                        "2026-11-22T10:00:00Z"); /* truncated to the second */
    /* Milliseconds round, carrying into the next second. */
    assert_string_equal(pf_text_format_rfc3339(1795341600.9996, true, buf, sizeof buf),
                        "2026-11-22T10:00:01.000Z");
    assert_string_equal(pf_text_format_rfc3339(951782400, true, buf, sizeof buf),
                        "2000-02-29T00:00:00.000Z");
}

static void test_parse_rfc3339(void **state) {
    (void)state;
    double t = 0;
    assert_true(pf_text_parse_rfc3339("2026-11-22T10:00:00Z", &t));
    assert_true(t == 1795341600.0);
    assert_true(pf_text_parse_rfc3339("2026-11-22T10:00:00.123Z", &t));
    assert_true(fabs(t - 1795341600.123) < 1e-6);
    assert_true(pf_text_parse_rfc3339("2026-11-22t10:00:00.5z", &t));
    assert_true(fabs(t - 1795341600.5) < 1e-6);
    assert_true(pf_text_parse_rfc3339("2026-11-22 12:30:00+02:30", &t));
    assert_true(t == 1795341600.0);
    assert_true(pf_text_parse_rfc3339("2026-11-22T05:00:00-05:00", &t));
    assert_true(t == 1795341600.0);
    assert_true(pf_text_parse_rfc3339("1969-12-31T23:59:59Z", &t));
    assert_true(t == -1.0);

    const char *bad[] = {"",
                         "2026-11-22",
                         "2026-11-22T10:00Z",
                         "2026-11-22T10:00:00",
                         "2026-13-01T00:00:00Z",
                         "2026-11-32T00:00:00Z",
                         "2026-11-22T24:00:00Z",
                         "2026-11-22T10:60:00Z",
                         "2026-11-22T10:00:00+0200",
                         "2026-11-22T10:00:00Z trailing",
                         "2026-11-22X10:00:00Z",
                         "yesterday"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = 42;
        if (pf_text_parse_rfc3339(bad[i], &t))
            fail_msg("'%s' was accepted", bad[i]);
        assert_true(t == 42); /* untouched */
    }
    assert_false(pf_text_parse_rfc3339(NULL, &t));
}

static void test_rfc3339_round_trip(void **state) {
    (void)state;
    char a[PF_RFC3339_MAX], b[PF_RFC3339_MAX];
    for (double t = 1e9; t < 2e9; t += 12345678.0191) {
        pf_text_format_rfc3339(t, true, a, sizeof a);
        double back;
        assert_true(pf_text_parse_rfc3339(a, &back));
        assert_string_equal(pf_text_format_rfc3339(back, true, b, sizeof b), a);
        assert_true(fabs(back - t) <= 0.0005 + 1e-6);
    }
}

static void test_pointer(void **state) {
    (void)state;
    char p[64] = "";
    pf_text_pointer_add(p, sizeof p, "model");
    pf_text_pointer_add_index(p, sizeof p, 12);
    assert_string_equal(p, "/model/12");
    pf_text_pointer_add(p, sizeof p, "a/b~c");
    assert_string_equal(p, "/model/12/a~1b~0c");
    pf_text_pointer_add(p, sizeof p, "");
    assert_string_equal(p, "/model/12/a~1b~0c/");

    /* Full: cut where it fits, never inside a character or an escape. */
    char q[10] = "/ab";
    pf_text_pointer_add(q, sizeof q, "cd\xc3\xa9\xc3\xa9"); /* "/ab/cd" + 2 x U+00E9 */
    assert_string_equal(q, "/ab/cd\xc3\xa9"); /* the second would end past the 10 bytes */
    char r[8] = "/abcd";
    pf_text_pointer_add(r, sizeof r, "~~");
    assert_string_equal(r, "/abcd/"); /* "~0" does not fit in the one byte left */
    char s[6] = "/abcd";
    pf_text_pointer_add(s, sizeof s, "x");
    assert_string_equal(s, "/abcd"); /* no room for the "/": left as it is */
}

/* Text cut to fit: a last character left incomplete is dropped, whatever its length; a
 * complete one, ASCII and bytes that are not UTF-8 are kept. */
static void test_cut_utf8(void **state) {
    (void)state;
    struct {
        const char *in, *out;
    } cases[] = {
        {"", ""},
        {"abc", "abc"},
        {"ab\xc3\xa9", "ab\xc3\xa9"},               /* U+00E9 whole */
        {"ab\xc3", "ab"},                           /* its lead byte alone */
        {"a\xe2\x82\xac", "a\xe2\x82\xac"},         /* U+20AC whole */
        {"a\xe2\x82", "a"},                         /* 2 of its 3 bytes */
        {"a\xe2", "a"},                             /* 1 of 3 */
        {"a\xf0\x9f\x98\x80", "a\xf0\x9f\x98\x80"}, /* U+1F600 whole */
        {"a\xf0\x9f\x98", "a"},                     /* 3 of 4 */
        {"\xf0", ""},                               /* nothing left */
        {"a\x80\x80\x80\x80", "a\x80\x80\x80\x80"}, /* not UTF-8: left alone */
        {"a\xff", "a\xff"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%s", cases[i].in);
        if (strcmp(pf_text_cut_utf8(buf), cases[i].out) != 0)
            fail_msg("case %zu: got \"%s\"", i, buf);
    }
}

static void test_bool(void **state) {
    (void)state;
    const char *on[] = {"1", "true", "TRUE", "yes", "On"}, *off[] = {"0", "false", "No", "OFF"};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
        assert_int_equal(pf_text_bool(on[i]), 1);
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        assert_int_equal(pf_text_bool(off[i]), 0);
    assert_int_equal(pf_text_bool("maybe"), -1);
    assert_int_equal(pf_text_bool(""), -1);
    assert_int_equal(pf_text_bool("onn"), -1);
    assert_int_equal(pf_text_bool(NULL), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_rfc3339),     cmocka_unit_test(test_parse_rfc3339),
        cmocka_unit_test(test_rfc3339_round_trip), cmocka_unit_test(test_pointer),
        cmocka_unit_test(test_cut_utf8),           cmocka_unit_test(test_bool),
    };
    return cmocka_run_group_tests_name("text", tests, NULL, NULL);
}
