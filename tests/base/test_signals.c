/* test_signals.c - the stop signals: SIGINT and SIGTERM reach the handler, a blocking call
 * they interrupt returns EINTR (no SA_RESTART), and SIGPIPE is ignored, so writing to a
 * pipe whose reader is gone fails with EPIPE instead of ending the process.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include "psflow/signals.h"

static volatile sig_atomic_t last_signal;

static void on_stop(int sig) {
    last_signal = sig;
}

static void test_stop_signals(void **state) {
    (void)state;
    pf_signals_on_stop(on_stop);
    assert_int_equal(raise(SIGTERM), 0);
    assert_int_equal(last_signal, SIGTERM);
    assert_int_equal(raise(SIGINT), 0);
    assert_int_equal(last_signal, SIGINT);
    struct sigaction sa;
    assert_int_equal(sigaction(SIGTERM, NULL, &sa), 0);
    assert_ptr_equal(sa.sa_handler, on_stop);
    assert_int_equal(sa.sa_flags & SA_RESTART, 0); /* interrupted calls return EINTR */
}

static void test_sigpipe_ignored(void **state) {
    (void)state;
    pf_signals_on_stop(on_stop);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    close(fds[0]);
    errno = 0;
    assert_int_equal(write(fds[1], "x", 1), -1); /* still running: SIGPIPE did not kill us */
    assert_int_equal(errno, EPIPE);
    close(fds[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_signals),
        cmocka_unit_test(test_sigpipe_ignored),
    };
    return cmocka_run_group_tests_name("signals", tests, NULL, NULL);
}
