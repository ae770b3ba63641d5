/* test_ws_limits.c - the data-plane transport's limits and refusals on 127.0.0.1: the opening
 * handshake against plain TCP peers (RFC 6455's own example key and answer; a client refusing
 * a wrong answer; garbage answered 400), the message size cap, the admission of untrusted
 * connections (their limits, making room for newcomers), the connection cap, the buffered
 * bytes, connection failures, and pf_ws_settle out of memory. Waits use condition
 * variables or poll() with deadlines, never sleeps. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "psflow/clock.h"
#include "psflow/mem.h"
#include "psflow/ws.h"
#include "tests/support/counting_alloc.h"
#include "tests/support/ws_endpoint.h"

static void test_message_cap(void **state) {
    (void)state;
    endpoint s, c;
    ws_ep_init(&s);
    ws_ep_init(&c);
    pf_ws *srv, *cli;
    pf_error err;
    assert_int_equal(
        pf_ws_server_create("127.0.0.1", 0, 1000, &ws_endpoint_handlers, &s, &srv, &err), PF_OK);
    assert_int_equal(pf_ws_client_create(1u << 20, &ws_endpoint_handlers, &c, &cli, &err), PF_OK);
    uint64_t conn;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &conn), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
    assert_int_equal(ws_ep_send_message(cli, conn, 1000, 1, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&s, &s.messages, 1));
    assert_int_equal(ws_ep_send_message(cli, conn, 1001, 2, NULL), PF_OK);
    /* The server closes the connection rather than buffer an oversized message. */
    assert_true(ws_ep_wait_for(&c, &c.closed, 1));
    assert_int_equal(s.messages, 1);
    ws_ep_destroy_pair(&s, &c, srv, cli);
}

/* Before pf_ws_trust a server connection's messages are small and its time is short: a
 * message at the limit arrives, one byte more closes the connection, and a connection
 * that is never trusted is closed by the idle timeout. */
static void test_untrusted_limits(void **state) {
    (void)state;
    endpoint s, c;
    ws_ep_init(&s);
    ws_ep_init(&c);
    s.stranger = 1;
    pf_ws *srv, *cli;
    pf_error err;
    pf_ws_options o = {.untrusted_max_message = 100, .idle_timeout = 0.3};
    assert_int_equal(pf_ws_server_create_with("127.0.0.1", 0, 1u << 20, &o, &ws_endpoint_handlers,
                                              &s, &srv, &err),
                     PF_OK);
    assert_int_equal(pf_ws_client_create(1u << 20, &ws_endpoint_handlers, &c, &cli, &err), PF_OK);
    uint64_t conn;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &conn), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
    assert_int_equal(ws_ep_send_message(cli, conn, 100, 1, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&s, &s.messages, 1));
    assert_int_equal(ws_ep_send_message(cli, conn, 101, 2, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.closed, 1));
    assert_int_equal(s.messages, 1);
    /* A second connection that sends nothing: closed by the idle timeout. */
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &conn), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.opened, 2));
    assert_true(ws_ep_wait_for(&c, &c.closed, 2));
    ws_ep_destroy_pair(&s, &c, srv, cli);
}

/* A server with max_connections 1 closes a second connection on accept; the first one
 * keeps working. */
static void test_max_connections(void **state) {
    (void)state;
    endpoint s, c;
    ws_ep_init(&s);
    ws_ep_init(&c);
    s.echo = 1;
    pf_ws *srv, *cli;
    pf_error err;
    pf_ws_options o = {.max_connections = 1};
    assert_int_equal(pf_ws_server_create_with("127.0.0.1", 0, 1u << 20, &o, &ws_endpoint_handlers,
                                              &s, &srv, &err),
                     PF_OK);
    assert_int_equal(pf_ws_client_create(1u << 20, &ws_endpoint_handlers, &c, &cli, &err), PF_OK);
    uint64_t first, second;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &first), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &second), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.closed, 1));
    assert_int_equal(c.opened, 1);
    assert_int_equal(ws_ep_send_message(cli, first, 1000, 3, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.messages, 1));
    ws_ep_check_payload(&c, 1000, 3);
    /* Raised while it runs (a ps whose job grew): a second connection is served too. */
    pf_ws_set_limits(srv, 2, 0);
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &second), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.opened, 2));
    assert_int_equal(ws_ep_send_message(cli, second, 1000, 4, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.messages, 2));
    ws_ep_check_payload(&c, 1000, 4);
    assert_int_equal(c.closed, 1);
    ws_ep_destroy_pair(&s, &c, srv, cli);
}

/* max_buffered moved while the server runs: a frame that would pass the cap closes its
 * connection; raised, the same frame is received; lowered below what one message holds,
 * it is refused again (and nothing wraps around). */
static void test_buffered_limit_live(void **state) {
    (void)state;
    endpoint s, c;
    ws_ep_init(&s);
    ws_ep_init(&c);
    s.echo = 1;
    pf_ws *srv, *cli;
    pf_error err;
    pf_ws_options o = {.max_buffered = 4000};
    assert_int_equal(pf_ws_server_create_with("127.0.0.1", 0, 1u << 20, &o, &ws_endpoint_handlers,
                                              &s, &srv, &err),
                     PF_OK);
    assert_int_equal(pf_ws_client_create(1u << 20, &ws_endpoint_handlers, &c, &cli, &err), PF_OK);
    uint64_t conn;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &conn), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
    assert_int_equal(ws_ep_send_message(cli, conn, 4000, 1, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.messages, 1));
    assert_int_equal(ws_ep_send_message(cli, conn, 4001, 2, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.closed, 1));
    pf_ws_set_limits(srv, 0, 8000);
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &conn), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.opened, 2));
    assert_int_equal(ws_ep_send_message(cli, conn, 8000, 3, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.messages, 2));
    ws_ep_check_payload(&c, 8000, 3);
    pf_ws_set_limits(srv, 0, 100);
    assert_int_equal(ws_ep_send_message(cli, conn, 101, 4, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.closed, 2));
    assert_int_equal(c.messages, 2);
    ws_ep_destroy_pair(&s, &c, srv, cli);
}

static void test_connect_refused(void **state) {
    (void)state;
    endpoint s, c;
    ws_ep_init(&s);
    ws_ep_init(&c);
    pf_ws *srv, *cli;
    pf_error err;
    /* Find a free port by listening and stopping again. */
    assert_int_equal(
        pf_ws_server_create("127.0.0.1", 0, 1000, &ws_endpoint_handlers, &s, &srv, &err), PF_OK);
    int port = pf_ws_port(srv);
    pf_ws_destroy(srv);
    assert_int_equal(pf_ws_client_create(1u << 20, &ws_endpoint_handlers, &c, &cli, &err), PF_OK);
    uint64_t conn;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", port, NULL, &conn), PF_OK);
    /* Queued before the failure is known; dropped with the connection (ASan checks that the
     * buffer goes back to the pool rather than leaking). */
    ws_ep_send_message(cli, conn, 8, 0, NULL);
    assert_true(ws_ep_wait_for(&c, &c.closed, 1));
    assert_int_equal(c.opened, 0);
    pf_ws_destroy(cli);
    ws_ep_deinit(&s);
    ws_ep_deinit(&c);
}

/* --- the opening handshake, against a plain TCP peer ------------------------------------- */

/* A plain TCP connection to 127.0.0.1:port. */
static int tcp_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Reads from fd until "\r\n\r\n" (or 10 s pass) into buf[cap], NUL-terminated. */
static void read_http(int fd, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int turns = 0; n + 1 < cap && !strstr(buf, "\r\n\r\n") && turns < 100; turns++) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 10000) != 1)
            break;
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
        buf[n] = '\0';
    }
}

/* The server answers RFC 6455 section 1.3's example request with the example's accept
 * value, computed with libwebsockets' SHA-1 and base64. */
static void test_handshake_rfc6455(void **state) {
    (void)state;
    endpoint s;
    ws_ep_init(&s);
    pf_ws *srv;
    pf_error err;
    assert_int_equal(
        pf_ws_server_create("127.0.0.1", 0, 1000, &ws_endpoint_handlers, &s, &srv, &err), PF_OK);
    int fd = tcp_connect(pf_ws_port(srv));
    static const char request[] = "GET /chat HTTP/1.1\r\n"
                                  "Host: server.example.com\r\n"
                                  "Upgrade: websocket\r\n"
                                  "Connection: Upgrade\r\n"
                                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                  "Origin: http://example.com\r\n"
                                  "Sec-WebSocket-Protocol: chat, superchat\r\n"
                                  "Sec-WebSocket-Version: 13\r\n\r\n";
    assert_int_equal(write(fd, request, sizeof request - 1), (ssize_t)(sizeof request - 1));
    char answer[1024];
    read_http(fd, answer, sizeof answer);
    assert_true(strncmp(answer, "HTTP/1.1 101 ", 13) == 0);
    assert_non_null(strstr(answer, "\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
    assert_true(ws_ep_wait_for(&s, &s.opened, 1));
    close(fd);
    assert_true(ws_ep_wait_for(&s, &s.closed, 1));
    pf_ws_destroy(srv);
    ws_ep_deinit(&s);
}

/* Bytes that are not an HTTP request (here NUL bytes, then a request) are answered with
 * 400 at once and the connection is closed, whatever follows. */
static void test_handshake_garbage(void **state) {
    (void)state;
    endpoint s;
    ws_ep_init(&s);
    pf_ws *srv;
    pf_error err;
    assert_int_equal(
        pf_ws_server_create("127.0.0.1", 0, 1000, &ws_endpoint_handlers, &s, &srv, &err), PF_OK);
    int fd = tcp_connect(pf_ws_port(srv));
    static const char junk[] = "\0\0\0\0GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n";
    assert_int_equal(write(fd, junk, sizeof junk - 1), (ssize_t)(sizeof junk - 1));
    char answer[1024];
    read_http(fd, answer, sizeof answer);
    assert_true(strncmp(answer, "HTTP/1.1 400 ", 13) == 0);
    struct pollfd p = {fd, POLLIN, 0};
    char rest[16];
    assert_int_equal(poll(&p, 1, 10000), 1);
    assert_int_equal(read(fd, rest, sizeof rest), 0); /* closed by the server */
    assert_int_equal(s.opened, 0);
    close(fd);
    pf_ws_destroy(srv);
    ws_ep_deinit(&s);
}

/* A raw connection from 127.0.0.<last> that finishes the WebSocket upgrade: once it has
 * the answer, the server has accepted it (and made room for it). */
static int stranger_upgraded(int port, int last) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in from = {.sin_family = AF_INET};
    from.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)last);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&from, sizeof from), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    static const char req[] =
        "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n";
    assert_int_equal(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    char answer[1024];
    read_http(fd, answer, sizeof answer);
    assert_true(strncmp(answer, "HTTP/1.1 101 ", 13) == 0);
    return fd;
}

/* Whether the server closes fd within ms milliseconds. */
static int closed_within(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    char b[64];
    return poll(&p, 1, ms) == 1 && read(fd, b, sizeof b) <= 0;
}

/* Untrusted connections have slots of their own, which a newcomer takes from the one that
 * got further longest ago: of its address's when that address holds its share, else of
 * all; a trusted connection is never dropped and keeps working. */
static void test_untrusted_make_room(void **state) {
    (void)state;
    endpoint s, c;
    ws_ep_init(&s);
    ws_ep_init(&c);
    s.echo = 1;
    pf_ws *srv, *cli;
    pf_error err;
    pf_ws_options o = {.max_connections = 2, .max_untrusted = 4, .max_untrusted_per_address = 2};
    assert_int_equal(pf_ws_server_create_with("127.0.0.1", 0, 1u << 20, &o, &ws_endpoint_handlers,
                                              &s, &srv, &err),
                     PF_OK);
    int port = pf_ws_port(srv);
    assert_int_equal(pf_ws_client_create(1u << 20, &ws_endpoint_handlers, &c, &cli, &err), PF_OK);
    uint64_t trusted;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", port, NULL, &trusted), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
    pthread_mutex_lock(&s.mu);
    s.stranger = 1; /* from now on, no connection is trusted */
    s.echo = 0;
    pthread_mutex_unlock(&s.mu);
    /* Its address's share: a third from 127.0.0.2 drops the oldest from there. */
    int a = stranger_upgraded(port, 2), b = stranger_upgraded(port, 2);
    int c2 = stranger_upgraded(port, 2);
    assert_true(closed_within(a, 5000));
    /* All four slots: the one that got further longest ago goes, not b, which is older but
     * has delivered a message since. */
    int d = stranger_upgraded(port, 3), e = stranger_upgraded(port, 4);
    static const uint8_t frame[] = {0x82, 0x81, 0, 0, 0, 0, 7}; /* a 1-byte message */
    assert_int_equal(write(b, frame, sizeof frame), (ssize_t)sizeof frame);
    assert_true(ws_ep_wait_for(&s, &s.messages, 1));
    int f = stranger_upgraded(port, 5);
    assert_true(closed_within(c2, 5000));
    assert_false(closed_within(b, 200));
    assert_false(closed_within(d, 0));
    assert_false(closed_within(e, 0));
    assert_false(closed_within(f, 0));
    /* Ten more strangers: the trusted connection is never the one dropped. */
    for (int i = 0; i < 10; i++)
        close(stranger_upgraded(port, 6 + i % 3));
    assert_int_equal(c.closed, 0);
    pthread_mutex_lock(&s.mu);
    s.echo = 1;
    pthread_mutex_unlock(&s.mu);
    assert_int_equal(ws_ep_send_message(cli, trusted, 5000, 9, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.messages, 1));
    ws_ep_check_payload(&c, 5000, 9);
    int fds[] = {a, b, c2, d, e, f};
    for (int i = 0; i < 6; i++)
        close(fds[i]);
    ws_ep_destroy_pair(&s, &c, srv, cli);
}

/* A client sends a fresh 16-byte key in base64 and refuses an answer whose accept value is
 * not the one for it: the connection never opens. */
static void test_handshake_wrong_accept(void **state) {
    (void)state;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 1), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
    endpoint c;
    ws_ep_init(&c);
    pf_ws *cli;
    pf_error err;
    assert_int_equal(pf_ws_client_create(1u << 20, &ws_endpoint_handlers, &c, &cli, &err), PF_OK);
    uint64_t conn;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", ntohs(a.sin_port), NULL, &conn), PF_OK);
    struct pollfd p = {lfd, POLLIN, 0};
    assert_int_equal(poll(&p, 1, 10000), 1);
    int fd = accept(lfd, NULL, NULL);
    assert_true(fd >= 0);
    char request[1024];
    read_http(fd, request, sizeof request);
    assert_true(strncmp(request, "GET / HTTP/1.1\r\n", 16) == 0);
    assert_non_null(strstr(request, "\r\nSec-WebSocket-Version: 13\r\n"));
    const char *key = strstr(request, "\r\nSec-WebSocket-Key: ");
    assert_non_null(key);
    key += 21;
    assert_int_equal(strcspn(key, "\r"), 24); /* base64 of 16 bytes */
    assert_true(strncmp(key + 22, "==", 2) == 0);
    static const char answer[] = "HTTP/1.1 101 Switching Protocols\r\n"
                                 "Upgrade: websocket\r\n"
                                 "Connection: Upgrade\r\n"
                                 "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    assert_int_equal(write(fd, answer, sizeof answer - 1), (ssize_t)(sizeof answer - 1));
    assert_true(ws_ep_wait_for(&c, &c.closed, 1));
    assert_int_equal(c.opened, 0);
    close(fd);
    close(lfd);
    pf_ws_destroy(cli);
    ws_ep_deinit(&c);
}

/* A client frame (masked, with a zero key) of opcode op carrying len bytes of p, into out
 * (len + 14 bytes); returns its length. */
static size_t client_frame(uint8_t *out, uint8_t op, const uint8_t *p, size_t len) {
    size_t n = 0;
    out[n++] = (uint8_t)(0x80 | op);
    if (len < 126) {
        out[n++] = (uint8_t)(0x80 | len);
    } else {
        out[n++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            out[n++] = (uint8_t)((uint64_t)len >> (8 * i));
    }
    memset(out + n, 0, 4);
    n += 4;
    memcpy(out + n, p, len);
    return n + len;
}

/* pf_ws_settle out of memory while a lent message is half written: the message is dropped
 * and the connection closed. A ping that arrives before the close is answered from the
 * start of its pong, not from where the dropped message's writing stopped (which read
 * past the pong's buffer). The peer sees the cut message, the pong, then the end. */
static void test_settle_out_of_memory(void **state) {
    (void)state;
    use_counting(-1); /* only the server's service thread allocates from here on */
    endpoint s;
    ws_ep_init(&s);
    s.echo = s.echo_lent = s.fail_settle = 1;
    pf_ws *srv;
    pf_error err;
    assert_int_equal(
        pf_ws_server_create("127.0.0.1", 0, 64u << 20, &ws_endpoint_handlers, &s, &srv, &err),
        PF_OK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    int small = 16384; /* a small window: the echo stalls after a few hundred KiB */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)pf_ws_port(srv))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    static const char request[] = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                                  "Connection: Upgrade\r\n"
                                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                  "Sec-WebSocket-Version: 13\r\n\r\n";
    assert_int_equal(write(fd, request, sizeof request - 1), (ssize_t)(sizeof request - 1));
    char answer[1024];
    read_http(fd, answer, sizeof answer);
    assert_true(strncmp(answer, "HTTP/1.1 101 ", 13) == 0);
    /* An 8 MiB message the server echoes, lent: most of the echo waits in the server. */
    size_t big = 8u << 20;
    uint8_t *msg = malloc(big), *frame = malloc(big + 14);
    for (size_t i = 0; i < big; i++)
        msg[i] = (uint8_t)(i * 31u);
    size_t n = client_frame(frame, 0x2, msg, big);
    for (size_t off = 0; off < n;) {
        ssize_t k = write(fd, frame + off, n - off);
        assert_true(k > 0);
        off += (size_t)k;
    }
    assert_true(ws_ep_wait_for(&s, &s.messages, 1));
    /* One write: the 1-byte message (settle runs out of memory) and a ping right behind. */
    uint8_t one = 7, both[32];
    size_t m1 = client_frame(both, 0x2, &one, 1);
    size_t m2 = client_frame(both + m1, 0x9, &one, 0);
    assert_int_equal(write(fd, both, m1 + m2), (ssize_t)(m1 + m2));
    /* Everything until the server closes. */
    size_t got = 0, cap = big + 64;
    uint8_t *in = malloc(cap);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        assert_int_equal(poll(&p, 1, 10000), 1);
        ssize_t k = read(fd, in + got, cap - got);
        if (k <= 0)
            break;
        got += (size_t)k;
        assert_true(got < cap); /* never more than the echo's frame and a pong */
    }
    assert_int_equal(s.settle_status, PF_ERR_NOMEM);
    assert_true(got > 10 && got < big);
    assert_int_equal(in[0], 0x82); /* the echo's frame header... */
    assert_int_equal(in[1], 127);
    for (size_t i = 10; i < got - 2; i++) /* ...its first bytes as sent... */
        if (in[i] != (uint8_t)((i - 10) * 31u))
            fail_msg("echo byte %zu differs", i - 10);
    assert_int_equal(in[got - 2], 0x8a); /* ...then the pong, empty */
    assert_int_equal(in[got - 1], 0x00);
    close(fd);
    pf_ws_destroy(srv);
    use_libc();
    free(s.lent[0]);
    ws_ep_deinit(&s);
    free(in);
    free(frame);
    free(msg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_rfc6455),    cmocka_unit_test(test_handshake_wrong_accept),
        cmocka_unit_test(test_message_cap),          cmocka_unit_test(test_untrusted_limits),
        cmocka_unit_test(test_max_connections),      cmocka_unit_test(test_buffered_limit_live),
        cmocka_unit_test(test_settle_out_of_memory), cmocka_unit_test(test_connect_refused),
        cmocka_unit_test(test_handshake_garbage),    cmocka_unit_test(test_untrusted_make_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
