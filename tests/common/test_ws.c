/* test_ws.c - the data-plane transport on 127.0.0.1: round trips of small and fragmented
 * messages, byte-exact reassembly, sends to closed connections, the message size cap and
 * connection failures. Waits use condition variables with deadlines, never sleeps. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "psflow/mem.h"
#include "psflow/ws.h"

typedef struct endpoint {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int opened, closed, messages;
    uint64_t last_conn;
    uint8_t *last;
    size_t last_len;
    int echo;            /* server: send every message back */
    uint64_t digest[64]; /* FNV-1a of each of the first 64 messages, in arrival order */
} endpoint;

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void ep_init(endpoint *e) {
    memset(e, 0, sizeof *e);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
}

static void ep_deinit(endpoint *e) {
    free(e->last);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
}

static void on_open(pf_ws *ws, uint64_t conn, void *cu, void *user) {
    (void)ws;
    (void)cu;
    endpoint *e = user;
    pthread_mutex_lock(&e->mu);
    e->opened++;
    e->last_conn = conn;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void on_message(pf_ws *ws, uint64_t conn, void *cu, const uint8_t *data, size_t len,
                       void *user) {
    (void)cu;
    endpoint *e = user;
    pthread_mutex_lock(&e->mu);
    free(e->last);
    e->last = malloc(len ? len : 1);
    memcpy(e->last, data, len);
    e->last_len = len;
    if (e->messages < 64)
        e->digest[e->messages] = fnv1a(data, len);
    e->messages++;
    if (e->echo) {
        uint8_t *reply = pf_ws_buffer(ws, len);
        assert_non_null(reply);
        memcpy(reply, data, len);
        assert_int_equal(pf_ws_send(ws, conn, reply, len), PF_OK);
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void on_close(pf_ws *ws, uint64_t conn, void *cu, void *user) {
    (void)ws;
    (void)conn;
    (void)cu;
    endpoint *e = user;
    pthread_mutex_lock(&e->mu);
    e->closed++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static const pf_ws_handlers handlers = {on_open, on_message, on_close};

/* Waits up to 10 s for *counter >= want. */
static int wait_for(endpoint *e, int *counter, int want) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    while (*counter < want && rc == 0)
        rc = pthread_cond_timedwait(&e->cv, &e->mu, &deadline);
    int ok = *counter >= want;
    pthread_mutex_unlock(&e->mu);
    return ok;
}

static uint8_t *message(pf_ws *ws, size_t len, unsigned seed) {
    uint8_t *buf = pf_ws_buffer(ws, len);
    assert_non_null(buf);
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(i * 31u + seed);
    return buf;
}

static void check_payload(const endpoint *e, size_t len, unsigned seed) {
    assert_int_equal(e->last_len, len);
    for (size_t i = 0; i < len; i++)
        if (e->last[i] != (uint8_t)(i * 31u + seed))
            fail_msg("byte %zu differs", i);
}

/* An echoing server (s) and a client (c) connected to it on 127.0.0.1. */
static void echo_pair(endpoint *s, endpoint *c, pf_ws **srv, pf_ws **cli, uint64_t *conn) {
    pf_error err;
    ep_init(s);
    ep_init(c);
    s->echo = 1;
    assert_int_equal(pf_ws_server_create("127.0.0.1", 0, 64u << 20, &handlers, s, srv, &err),
                     PF_OK);
    assert_true(pf_ws_port(*srv) > 0);
    assert_int_equal(pf_ws_client_create(64u << 20, &handlers, c, cli, &err), PF_OK);
    assert_int_equal(pf_ws_connect(*cli, "127.0.0.1", pf_ws_port(*srv), NULL, conn), PF_OK);
}

static void test_round_trips(void **state) {
    (void)state;
    endpoint s, c;
    pf_ws *srv, *cli;
    uint64_t conn;
    echo_pair(&s, &c, &srv, &cli, &conn);
    assert_true(wait_for(&c, &c.opened, 1));
    assert_true(wait_for(&s, &s.opened, 1));

    /* Sizes around the fragment boundary and a multi-fragment message. */
    const size_t sizes[] = {
        0, 1, 24, 4096, PF_WS_CHUNK - 1, PF_WS_CHUNK, PF_WS_CHUNK + 1, 3 * PF_WS_CHUNK + 17};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint8_t *buf = message(cli, sizes[i], (unsigned)i);
        assert_int_equal(pf_ws_send(cli, conn, buf, sizes[i]), PF_OK);
        assert_true(wait_for(&c, &c.messages, (int)i + 1));
        check_payload(&s, sizes[i], (unsigned)i); /* what the server got */
        check_payload(&c, sizes[i], (unsigned)i); /* what came back */
    }

    /* After the client closes, sends on the dead id fail and the server sees the close. */
    pf_ws_close(cli, conn);
    assert_true(wait_for(&c, &c.closed, 1));
    assert_true(wait_for(&s, &s.closed, 1));
    assert_int_equal(pf_ws_send(cli, conn, message(cli, 8, 0), 8), PF_ERR_NOT_FOUND);
    pf_ws_destroy(cli);
    pf_ws_destroy(srv);
    ep_deinit(&s);
    ep_deinit(&c);
}

/* Messages sent back to back, without waiting for replies, large and small mixed: frame
 * boundaries fall anywhere in what one read returns, and every message arrives whole, in
 * order, both ways. */
static void test_pipelined(void **state) {
    (void)state;
    endpoint s, c;
    pf_ws *srv, *cli;
    uint64_t conn;
    echo_pair(&s, &c, &srv, &cli, &conn);
    const size_t sizes[] = {5 * PF_WS_CHUNK + 3, 7,   300001, 0, 65536, 2 * PF_WS_CHUNK, 131071, 1,
                            4 * PF_WS_CHUNK + 1, 9999};
    enum { N = sizeof sizes / sizeof sizes[0] };
    uint64_t want[N];
    for (int i = 0; i < N; i++) {
        uint8_t *buf = message(cli, sizes[i], (unsigned)i + 7);
        want[i] = fnv1a(buf, sizes[i]);
        assert_int_equal(pf_ws_send(cli, conn, buf, sizes[i]), PF_OK);
    }
    assert_true(wait_for(&c, &c.messages, N));
    for (int i = 0; i < N; i++) {
        if (s.digest[i] != want[i])
            fail_msg("message %d (%zu bytes) reached the server changed", i, sizes[i]);
        if (c.digest[i] != want[i])
            fail_msg("message %d (%zu bytes) came back changed", i, sizes[i]);
    }
    pf_ws_destroy(cli);
    pf_ws_destroy(srv);
    ep_deinit(&s);
    ep_deinit(&c);
}

static void test_message_cap(void **state) {
    (void)state;
    endpoint s, c;
    ep_init(&s);
    ep_init(&c);
    pf_ws *srv, *cli;
    pf_error err;
    assert_int_equal(pf_ws_server_create("127.0.0.1", 0, 1000, &handlers, &s, &srv, &err), PF_OK);
    assert_int_equal(pf_ws_client_create(1u << 20, &handlers, &c, &cli, &err), PF_OK);
    uint64_t conn;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &conn), PF_OK);
    assert_true(wait_for(&c, &c.opened, 1));
    assert_int_equal(pf_ws_send(cli, conn, message(cli, 1000, 1), 1000), PF_OK);
    assert_true(wait_for(&s, &s.messages, 1));
    assert_int_equal(pf_ws_send(cli, conn, message(cli, 1001, 2), 1001), PF_OK);
    /* The server closes the connection rather than buffer an oversized message. */
    assert_true(wait_for(&c, &c.closed, 1));
    assert_int_equal(s.messages, 1);
    pf_ws_destroy(cli);
    pf_ws_destroy(srv);
    ep_deinit(&s);
    ep_deinit(&c);
}

static void test_connect_refused(void **state) {
    (void)state;
    endpoint s, c;
    ep_init(&s);
    ep_init(&c);
    pf_ws *srv, *cli;
    pf_error err;
    /* Find a free port by listening and stopping again. */
    assert_int_equal(pf_ws_server_create("127.0.0.1", 0, 1000, &handlers, &s, &srv, &err), PF_OK);
    int port = pf_ws_port(srv);
    pf_ws_destroy(srv);
    assert_int_equal(pf_ws_client_create(1u << 20, &handlers, &c, &cli, &err), PF_OK);
    uint64_t conn;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", port, NULL, &conn), PF_OK);
    /* Queued before the failure is known; dropped with the connection (ASan checks that the
     * buffer goes back to the pool rather than leaking). */
    pf_ws_send(cli, conn, message(cli, 8, 0), 8);
    assert_true(wait_for(&c, &c.closed, 1));
    assert_int_equal(c.opened, 0);
    pf_ws_destroy(cli);
    ep_deinit(&s);
    ep_deinit(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_message_cap),
        cmocka_unit_test(test_connect_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
