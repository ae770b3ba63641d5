/* test_clock.c - clocks and deadlines: the monotonic clock does not go back, a deadline lies
 * the asked time after the wall clock and is normalised, and a condition-variable wait on it
 * ends.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>

#include "psflow/clock.h"

static double seconds_of(struct timespec ts) {
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_deadline(void **state) {
    (void)state;
    const double delays[] = {0.0, 0.25, 0.999999999, 1.5, 10.0};
    for (size_t i = 0; i < sizeof delays / sizeof delays[0]; i++) {
        double before = pf_clock_wall();
        struct timespec d = pf_clock_deadline(delays[i]);
        double after = pf_clock_wall();
        assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
        /* Within the wall-clock reading taken around it (plus float rounding). */
        assert_true(seconds_of(d) >= before + delays[i] - 1e-6);
        assert_true(seconds_of(d) <= after + delays[i] + 1e-6);
    }
}

static void test_wait_until_deadline(void **state) {
    (void)state;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&mu);
    struct timespec d = pf_clock_deadline(0.05);
    int rc = 0;
    while (rc == 0) /* nobody signals: only the deadline ends the wait */
        rc = pthread_cond_timedwait(&cv, &mu, &d);
    pthread_mutex_unlock(&mu);
    assert_int_equal(rc, ETIMEDOUT);
    assert_true(pf_clock_wall() >= seconds_of(d) - 1e-3);
}

static void test_monotonic(void **state) {
    (void)state;
    double last = pf_clock_now();
    for (int i = 0; i < 1000; i++) {
        double now = pf_clock_now();
        assert_true(now >= last);
        last = now;
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_wait_until_deadline),
        cmocka_unit_test(test_monotonic),
    };
    return cmocka_run_group_tests_name("clock", tests, NULL, NULL);
}
