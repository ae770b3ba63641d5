/* test_address.c - "host:port" addresses: hosts with dots and brackets, and every way an
 * address can be malformed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "psflow/address.h"

static void test_split_host_port(void **state) {
    (void)state;
    char host[16];
    int port = -1;
    assert_int_equal(pf_split_host_port("ps-0.ns.svc:2222", host, sizeof host, &port), 0);
    assert_string_equal(host, "ps-0.ns.svc");
    assert_int_equal(port, 2222);
    assert_int_equal(pf_split_host_port("[::1]:80", host, sizeof host, &port), 0);
    assert_string_equal(host, "[::1]");
    const char *bad[] = {
        "nohost", ":2222", "h:", "h:22x", "h:70000", "h:-1", "a-very-long-host-name:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(pf_split_host_port(bad[i], host, sizeof host, &port), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_host_port),
    };
    return cmocka_run_group_tests_name("address", tests, NULL, NULL);
}
