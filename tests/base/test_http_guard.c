/* test_http_guard.c - the coordinator's HTTP front guards (coordinator/http_guard.c): which
 * Host values the allowlist accepts (own names, IP literals, configured names, case,
 * trailing dot, ports, malformed values, "*"), names refused at creation, and the
 * connection watch on socket pairs: a request past its header deadline is shut down, one
 * being answered is not, eviction takes the longest-waiting request first, and the
 * per-address limit closes the oldest of an address or the newcomer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "psflow/http_guard.h"
#include "psflow/clock.h"

static void test_hosts_own_names(void **state) {
    (void)state;
    const char *extra[] = {"psflow.test", "Coord.Example."};
    pf_http_hosts *h;
    assert_int_equal(pf_http_hosts_create("127.0.0.1", extra, 2, &h, NULL), PF_OK);
    const char *ok[] = {"127.0.0.1:8080",
                        "127.0.0.1",
                        "localhost:1",
                        "LocalHost",
                        "localhost.:80",
                        "[::1]:8080",
                        "[::1]",
                        "10.0.0.7:8080",
                        "psflow.test",
                        "PSFLOW.TEST:9",
                        "coord.example",
                        "coord.example.:1",
                        NULL /* no Host: HTTP/1.0 */};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        assert_true(pf_http_hosts_allow(h, ok[i]));
    const char *refused[] = {"evil.example:8080",
                             "evil.example",
                             "127.0.0.1.evil.example",
                             "localhost.evil.example:80",
                             "psflow.test.evil",
                             "127.0.0.1@evil.example",
                             "evil.example:8080:1",
                             "psflow.test:",
                             "psflow.test:123456",
                             "psflow.test:x",
                             "[::1",
                             "[::1]x",
                             "[zz]:80",
                             "[]:80",
                             "",
                             ":80",
                             "ps flow.test",
                             "psflow.test\r\nX: y",
                             "0x7f.1",
                             "2130706433"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        assert_false(pf_http_hosts_allow(h, refused[i]));
    assert_false(pf_http_hosts_any(h));
    pf_http_hosts_destroy(h);
}

static void test_hosts_any_and_listen(void **state) {
    (void)state;
    const char *star[] = {"*"};
    pf_http_hosts *h;
    assert_int_equal(pf_http_hosts_create("0.0.0.0", star, 1, &h, NULL), PF_OK);
    assert_true(pf_http_hosts_any(h));
    assert_true(pf_http_hosts_allow(h, "evil.example:1"));
    pf_http_hosts_destroy(h);
    /* A --listen host name is one of its own names. */
    assert_int_equal(pf_http_hosts_create("coord.lan", NULL, 0, &h, NULL), PF_OK);
    assert_true(pf_http_hosts_allow(h, "coord.lan:8080"));
    assert_false(pf_http_hosts_allow(h, "other.lan:8080"));
    pf_http_hosts_destroy(h);
    /* On every interface the machine's hostname is too. */
    char self[256];
    assert_int_equal(gethostname(self, sizeof self), 0);
    assert_int_equal(pf_http_hosts_create(NULL, NULL, 0, &h, NULL), PF_OK);
    assert_true(pf_http_hosts_allow(h, self));
    pf_http_hosts_destroy(h);
}

static void test_hosts_bad_names(void **state) {
    (void)state;
    const char *bad[][1] = {{"evil.example:8080"}, {"a b"}, {""}, {"[::1]"}, {"x/y"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pf_http_hosts *h = (pf_http_hosts *)1;
        pf_error err;
        pf_error_clear(&err);
        assert_int_equal(pf_http_hosts_create("127.0.0.1", bad[i], 1, &h, &err), PF_ERR_INVALID);
        assert_null(h);
        assert_non_null(strstr(err.message, "--allowed-hosts"));
    }
}

/* Whether the peer of a watched socket sees the end of the stream within `seconds`. */
static int peer_ended(int fd, double seconds) {
    double end = pf_clock_now() + seconds;
    while (pf_clock_now() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) == 1) {
            char b;
            if (recv(fd, &b, 1, MSG_DONTWAIT) == 0)
                return 1;
        }
    }
    return 0;
}

static struct sockaddr_in from(const char *ip) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

static void test_watch_deadlines(void **state) {
    (void)state;
    pf_http_watch_limits l = {
        .header_s = 0.3, .body_s = 0.3, .idle_s = 0.0, .evict_after_s = 100, .per_address = 100};
    pf_http_watch *w = pf_http_watch_create(&l);
    assert_non_null(w);
    int slow[2], body[2], answered[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, slow), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, body), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, answered), 0);
    pf_http_conn *a = pf_http_watch_add(w, slow[0], NULL, 0);
    pf_http_conn *b = pf_http_watch_add(w, body[0], NULL, 0);
    pf_http_conn *c = pf_http_watch_add(w, answered[0], NULL, 1);
    assert_false(pf_http_conn_in_reserve(a));
    assert_true(pf_http_conn_in_reserve(c));
    pf_http_watch_headers_done(w, b);
    pf_http_watch_headers_done(w, c);
    pf_http_watch_body_done(w, c);
    assert_true(peer_ended(slow[1], 5));
    assert_true(peer_ended(body[1], 5));
    assert_false(peer_ended(answered[1], 1.0));
    assert_int_equal(pf_http_watch_totals(w).deadline, 2);
    pf_http_watch_remove(w, a);
    pf_http_watch_remove(w, b);
    pf_http_watch_remove(w, c);
    pf_http_watch_destroy(w);
    for (int i = 0; i < 2; i++) {
        close(slow[i]);
        close(body[i]);
        close(answered[i]);
    }
}

static void test_watch_evict_and_address(void **state) {
    (void)state;
    pf_http_watch_limits l = {
        .header_s = 100, .body_s = 100, .idle_s = 100, .evict_after_s = 0.2, .per_address = 2};
    pf_http_watch *w = pf_http_watch_create(&l);
    assert_non_null(w);
    struct sockaddr_in one = from("127.0.0.2"), two = from("127.0.0.3");
    int p[5][2];
    for (int i = 0; i < 5; i++)
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p[i]), 0);
    pf_http_conn *c[5];
    c[0] = pf_http_watch_add(w, p[0][0], (struct sockaddr *)&one, 0); /* waits for its body */
    pf_http_watch_headers_done(w, c[0]);
    c[1] = pf_http_watch_add(w, p[1][0], (struct sockaddr *)&two, 0); /* waits for headers */
    /* Nothing has waited 0.2 s yet: nothing to evict. */
    assert_false(pf_http_watch_evict(w));
    poll(NULL, 0, 300);
    /* Headers before bodies. */
    assert_true(pf_http_watch_evict(w));
    assert_true(peer_ended(p[1][1], 2));
    assert_false(peer_ended(p[0][1], 0.2));
    assert_true(pf_http_watch_evict(w));
    assert_true(peer_ended(p[0][1], 2));
    assert_false(pf_http_watch_evict(w)); /* both are closing already */
    /* Address two: two connections waiting, a third right away closes itself, and one
     * 0.2 s later closes the oldest instead. */
    c[2] = pf_http_watch_add(w, p[2][0], (struct sockaddr *)&two, 0);
    c[3] = pf_http_watch_add(w, p[3][0], (struct sockaddr *)&two, 0);
    c[4] = pf_http_watch_add(w, p[4][0], (struct sockaddr *)&two, 0);
    assert_true(peer_ended(p[4][1], 2));
    assert_false(peer_ended(p[2][1], 0.3));
    pf_http_watch_remove(w, c[4]);
    int again[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, again), 0);
    pf_http_conn *late = pf_http_watch_add(w, again[0], (struct sockaddr *)&two, 0);
    assert_true(peer_ended(p[2][1], 2));
    assert_false(peer_ended(again[1], 0.2));
    /* An address's connections being answered do not count. */
    pf_http_watch_headers_done(w, c[3]);
    pf_http_watch_body_done(w, c[3]);
    pf_http_watch_headers_done(w, late);
    pf_http_watch_body_done(w, late);
    int more[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, more), 0);
    pf_http_conn *next = pf_http_watch_add(w, more[0], (struct sockaddr *)&two, 0);
    assert_false(peer_ended(more[1], 0.2));
    pf_http_watch_counts t = pf_http_watch_totals(w);
    assert_int_equal(t.evicted, 2);
    assert_int_equal(t.address, 2);
    for (int i = 0; i < 4; i++)
        pf_http_watch_remove(w, c[i]);
    pf_http_watch_remove(w, late);
    pf_http_watch_remove(w, next);
    pf_http_watch_destroy(w); /* frees nothing twice: every record was removed */
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 5; j++)
            close(p[j][i]);
        close(again[i]);
        close(more[i]);
    }
}

/* A reserve connection with a whole request takes the slot of the longest-waiting ordinary
 * one accepted before it, however young; with none still sending, it stays. */
static void test_watch_promote(void **state) {
    (void)state;
    pf_http_watch_limits l = {
        .header_s = 100, .body_s = 100, .idle_s = 100, .evict_after_s = 100, .per_address = 100};
    pf_http_watch *w = pf_http_watch_create(&l);
    assert_non_null(w);
    int p[4][2];
    for (int i = 0; i < 4; i++)
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p[i]), 0);
    pf_http_conn *older = pf_http_watch_add(w, p[0][0], NULL, 0);
    pf_http_conn *oldest = pf_http_watch_add(w, p[1][0], NULL, 0);
    pf_http_watch_headers_done(w, older); /* oldest has waited longest for its request */
    poll(NULL, 0, 20);
    pf_http_conn *quick = pf_http_watch_add(w, p[2][0], NULL, 1);
    poll(NULL, 0, 20);
    pf_http_conn *younger = pf_http_watch_add(w, p[3][0], NULL, 1);
    assert_false(pf_http_watch_evict(w)); /* nothing has waited evict_after */
    pf_http_watch_headers_done(w, quick);
    assert_true(pf_http_watch_promote(w, quick));
    assert_false(pf_http_conn_in_reserve(quick));
    assert_true(peer_ended(p[1][1], 2));
    assert_false(peer_ended(p[0][1], 0.1));
    assert_true(pf_http_watch_promote(w, quick)); /* already out: nothing more is closed */
    assert_false(peer_ended(p[0][1], 0.1));
    /* younger: older still waits for its body and was accepted first. */
    pf_http_watch_headers_done(w, younger);
    assert_true(pf_http_watch_promote(w, younger));
    assert_true(peer_ended(p[0][1], 2));
    /* Now only quick and younger (both answering) and another reserve connection still
     * waiting are left: nobody to give way. */
    int q[2], r[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, q), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, r), 0);
    pf_http_conn *waiting = pf_http_watch_add(w, r[0], NULL, 1);
    poll(NULL, 0, 20);
    pf_http_conn *last = pf_http_watch_add(w, q[0], NULL, 1);
    pf_http_watch_body_done(w, quick);
    pf_http_watch_body_done(w, younger);
    pf_http_watch_headers_done(w, last);
    assert_false(pf_http_watch_promote(w, last));
    assert_true(pf_http_conn_in_reserve(last));
    assert_false(peer_ended(q[1], 0.1));
    assert_false(peer_ended(r[1], 0.1));
    assert_int_equal(pf_http_watch_totals(w).evicted, 2);
    pf_http_watch_remove(w, older);
    pf_http_watch_remove(w, oldest);
    pf_http_watch_remove(w, quick);
    pf_http_watch_remove(w, younger);
    pf_http_watch_remove(w, last);
    pf_http_watch_remove(w, waiting);
    pf_http_watch_destroy(w);
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 4; j++)
            close(p[j][i]);
        close(q[i]);
        close(r[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hosts_own_names),         cmocka_unit_test(test_hosts_any_and_listen),
        cmocka_unit_test(test_hosts_bad_names),         cmocka_unit_test(test_watch_deadlines),
        cmocka_unit_test(test_watch_evict_and_address), cmocka_unit_test(test_watch_promote),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
