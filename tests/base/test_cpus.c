/* test_cpus.c - the thread policy's arithmetic: cgroup v2 cpu.max quotas as whole cores,
 * a host's cores shared by its tasks, and the cores this process may use. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <sched.h>

#include "psflow/cpus.h"

static void test_quota(void **state) {
    (void)state;
    assert_int_equal(pf_cpus_quota("max 100000\n"), 0); /* no limit */
    assert_int_equal(pf_cpus_quota("200000 100000\n"), 2);
    assert_int_equal(pf_cpus_quota("150000 100000"), 2); /* 1.5 cores: rounded up */
    assert_int_equal(pf_cpus_quota("50000 100000"), 1);
    assert_int_equal(pf_cpus_quota("100000 100000"), 1);
    assert_int_equal(pf_cpus_quota("-1 100000"), 0); /* cgroup v1's "no quota" */
    assert_int_equal(pf_cpus_quota("100000 0"), 0);
    assert_int_equal(pf_cpus_quota("100000"), 0);
    assert_int_equal(pf_cpus_quota(""), 0);
    assert_int_equal(pf_cpus_quota("abc def"), 0);
    assert_int_equal(pf_cpus_quota(NULL), 0);
    assert_int_equal(pf_cpus_quota("99999999999999 1"), 4096); /* bounded */
}

static void test_share(void **state) {
    (void)state;
    assert_int_equal(pf_cpus_share(2, 1), 2);
    assert_int_equal(pf_cpus_share(2, 2), 1); /* 1 ps + 1 worker on a 2-core machine */
    assert_int_equal(pf_cpus_share(2, 3), 1); /* never 0 */
    assert_int_equal(pf_cpus_share(16, 3), 5);
    assert_int_equal(pf_cpus_share(8, 0), 8);
    assert_int_equal(pf_cpus_share(1, 1), 1);
}

static void test_available(void **state) {
    (void)state;
    cpu_set_t set;
    CPU_ZERO(&set);
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    int n = pf_cpus_available();
    assert_true(n >= 1);
    assert_true(n <= CPU_COUNT(&set)); /* a quota can only lower it */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quota),
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_available),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
