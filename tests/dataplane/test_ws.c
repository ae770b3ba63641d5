/* test_ws.c - the data-plane transport on 127.0.0.1: the opening handshake (RFC 6455's own
 * example key and answer; a client refusing a wrong answer), round trips of small and
 * fragmented messages, byte-exact reassembly, sends to closed connections, receiving in
 * place, the message size cap, the admission of untrusted connections and connection
 * failures, tagged sends (lent ones too) and byte handlers. Every send is pf_ws_sendv (or _tagged),
 * the production paths. Waits use condition variables or poll() with deadlines, never sleeps. */
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

typedef struct endpoint {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int opened, closed, messages;
    uint64_t last_conn;
    uint8_t *last;
    size_t last_len;
    int echo;        /* server: send every message back */
    int echo_parts;  /* ... with pf_ws_sendv, in uneven parts read from the message */
    int echo_lent;   /* ... with pf_ws_sendv_lent from a copy kept in lent[] (its
                        first 100 bytes copied, the rest lent); after odd-numbered
                        messages pf_ws_settle, then the copy is scribbled over */
    int lent_tagged; /* ... with pf_ws_sendv_lent_tagged and fnv_tagger */
    uint8_t *lent[16];
    struct endpoint *hold_for; /* client: on the first message, wait (up to 5 s) until this
                                  peer has received hold_count messages */
    int hold_count;
    int stranger;    /* server: never pf_ws_trust its connections */
    int fail_settle; /* server: a 1-byte message is not echoed but makes pf_ws_settle run
                        out of memory (its result in settle_status) */
    pf_status settle_status;
    uint64_t digest[64]; /* FNV-1a of each of the first 64 messages, in arrival order */
    int placed[64];      /* whether pf_ws_message_places() gave places for each of them */
    int echo_tagged;     /* server: echo all but the last 8 bytes with pf_ws_sendv_tagged and
                            fnv_tagger (the same message back when they are its tag) */
    /* on_bytes (service thread): the FNV-1a of the message being received, as it comes */
    uint64_t stream_h;
    size_t stream_next;    /* the position the next piece must start at */
    int stream_bad;        /* a piece out of order */
    uint64_t streamed[64]; /* stream_h of each of the first 64 messages when delivered */
} endpoint;

#define FNV_BASIS 1469598103934665603ull

static uint64_t fnv1a_more(uint64_t h, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    return fnv1a_more(FNV_BASIS, p, n);
}

/* A tagger for pf_ws_sendv_tagged: the FNV-1a of the bytes before it, 8 bytes LE. */
static void fnv_update(void *ctx, const void *data, size_t n) {
    uint64_t *h = ctx;
    *h = fnv1a_more(*h, data, n);
}

static void fnv_final(void *ctx, uint8_t *tag) {
    uint64_t *h = ctx;
    for (int i = 0; i < 8; i++)
        tag[i] = (uint8_t)(*h >> (8 * i));
}

/* pf_ws_set_on_bytes: every piece must continue where the last one ended. */
static void on_bytes(pf_ws *ws, uint64_t conn, void *cu, size_t pos, const uint8_t *data, size_t n,
                     void *user) {
    (void)ws;
    (void)conn;
    (void)cu;
    endpoint *e = user;
    if (pos != e->stream_next)
        e->stream_bad = 1;
    e->stream_h = fnv1a_more(e->stream_h, data, n);
    e->stream_next = pos + n;
}

static void ep_init(endpoint *e) {
    memset(e, 0, sizeof *e);
    e->stream_h = FNV_BASIS;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
}

static void ep_deinit(endpoint *e) {
    free(e->last);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
}

static void on_open(pf_ws *ws, uint64_t conn, void *cu, void *user) {
    (void)cu;
    endpoint *e = user;
    if (!e->stranger)
        pf_ws_trust(ws, conn); /* a client's own connections: ignored */
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
    if (e->messages < 64) {
        e->digest[e->messages] = fnv1a(data, len);
        int n_places;
        e->placed[e->messages] = pf_ws_message_places(ws, &n_places) != NULL;
        e->streamed[e->messages] = e->stream_next == len ? e->stream_h : 0;
    }
    e->stream_h = FNV_BASIS;
    e->stream_next = 0;
    e->messages++;
    if (e->hold_for && e->messages == 1) {
        /* Not reading meanwhile fills the socket buffers, so the peer's sends stall. */
        struct timespec deadline = pf_clock_deadline(5);
        endpoint *p = e->hold_for;
        pthread_mutex_lock(&p->mu);
        while (p->messages < e->hold_count &&
               pthread_cond_timedwait(&p->cv, &p->mu, &deadline) == 0)
            ;
        pthread_mutex_unlock(&p->mu);
    }
    if (e->fail_settle && len == 1) {
        counting_budget(0); /* every allocation fails: the copy of a lent rest too */
        e->settle_status = pf_ws_settle(ws);
        counting_budget(-1);
    } else if (e->echo && e->echo_lent) {
        int i = e->messages - 1;
        assert_true(i < 16);
        uint8_t *copy = e->lent[i] = malloc(len ? len : 1);
        memcpy(copy, data, len);
        size_t a = len < 100 ? len : 100;
        struct iovec parts[] = {{copy, a}, {copy + a, len - a}};
        const unsigned char lend[] = {0, 1};
        uint64_t h = FNV_BASIS; /* the transport is done with the tagger when it returns */
        pf_ws_tagger tagger = {fnv_update, fnv_final, &h, 8};
        assert_int_equal(e->lent_tagged ? pf_ws_sendv_lent_tagged(ws, conn, parts, 2, lend, &tagger)
                                        : pf_ws_sendv_lent(ws, conn, parts, 2, lend),
                         PF_OK);
        if (i == 1 || i == 3) {
            assert_int_equal(pf_ws_settle(ws), PF_OK);
            memset(copy, 0xAA, len); /* an update: the rest of the reply must not see it */
        }
    } else if (e->echo && e->echo_tagged) {
        uint64_t h = FNV_BASIS;
        pf_ws_tagger tagger = {fnv_update, fnv_final, &h, 8};
        size_t body = len >= 8 ? len - 8 : 0, a = body / 3;
        struct iovec parts[] = {{(void *)data, a}, {(void *)(data + a), body - a}};
        assert_int_equal(pf_ws_sendv_tagged(ws, conn, parts, 2, &tagger), PF_OK);
    } else if (e->echo && e->echo_parts) {
        size_t a = len / 3, b = len / 2 + (len > 1);
        struct iovec parts[] = {{(void *)data, a},
                                {(void *)data, 0},
                                {(void *)(data + a), b - a},
                                {(void *)(data + b), len - b}};
        assert_int_equal(pf_ws_sendv(ws, conn, parts, 4), PF_OK);
    } else if (e->echo) {
        struct iovec whole = {(void *)data, len};
        assert_int_equal(pf_ws_sendv(ws, conn, &whole, 1), PF_OK);
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

static const pf_ws_handlers handlers = {on_open, on_message, on_close, NULL};

/* Waits up to 10 s for *counter >= want. */
static int wait_for(endpoint *e, int *counter, int want) {
    struct timespec deadline = pf_clock_deadline(10);
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    while (*counter < want && rc == 0)
        rc = pthread_cond_timedwait(&e->cv, &e->mu, &deadline);
    int ok = *counter >= want;
    pthread_mutex_unlock(&e->mu);
    return ok;
}

/* Sends a message of len bytes whose byte i is i * 31 + seed (what check_payload expects)
 * with pf_ws_sendv, from a buffer scribbled over and freed as soon as the call returns;
 * *digest (may be NULL) receives its FNV-1a. */
static pf_status send_message(pf_ws *ws, uint64_t conn, size_t len, unsigned seed,
                              uint64_t *digest) {
    uint8_t *buf = malloc(len ? len : 1);
    assert_non_null(buf);
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(i * 31u + seed);
    if (digest)
        *digest = fnv1a(buf, len);
    struct iovec whole = {buf, len};
    pf_status st = pf_ws_sendv(ws, conn, &whole, 1);
    memset(buf, 0xAA, len); /* the transport must not read it any more */
    free(buf);
    return st;
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

static void destroy_pair(endpoint *s, endpoint *c, pf_ws *srv, pf_ws *cli) {
    pf_ws_destroy(cli);
    pf_ws_destroy(srv);
    ep_deinit(s);
    ep_deinit(c);
}

/* Waits for n echoes and checks that each message reached the server and came back
 * unchanged, in order. */
static void check_echoes(endpoint *s, endpoint *c, const uint64_t *want, const size_t *sizes,
                         int n) {
    assert_true(wait_for(c, &c->messages, n));
    for (int i = 0; i < n; i++) {
        if (s->digest[i] != want[i])
            fail_msg("message %d (%zu bytes) reached the server changed", i, sizes[i]);
        if (c->digest[i] != want[i])
            fail_msg("message %d (%zu bytes) came back changed", i, sizes[i]);
    }
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
        assert_int_equal(send_message(cli, conn, sizes[i], (unsigned)i, NULL), PF_OK);
        assert_true(wait_for(&c, &c.messages, (int)i + 1));
        check_payload(&s, sizes[i], (unsigned)i); /* what the server got */
        check_payload(&c, sizes[i], (unsigned)i); /* what came back */
    }

    /* After the client closes, sends on the dead id fail and the server sees the close. */
    pf_ws_close(cli, conn);
    assert_true(wait_for(&c, &c.closed, 1));
    assert_true(wait_for(&s, &s.closed, 1));
    assert_int_equal(send_message(cli, conn, 8, 0, NULL), PF_ERR_NOT_FOUND);
    destroy_pair(&s, &c, srv, cli);
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
        assert_int_equal(send_message(cli, conn, sizes[i], (unsigned)i + 7, &want[i]), PF_OK);
    }
    check_echoes(&s, &c, want, sizes, N);
    destroy_pair(&s, &c, srv, cli);
}

/* pf_ws_sendv both ways, back to back: the client sends from a scratch buffer it
 * scribbles over as soon as each call returns, in up to 300 parts (more than one gathering
 * write takes); the server echoes straight from the message it was handed, in uneven
 * parts. The client reads nothing more after the first echo until the server has had
 * every message, so the server's sends stall and leave a remainder that the transport
 * must have copied before the call returned. Every message arrives whole, in order. */
static void test_sendv(void **state) {
    (void)state;
    endpoint s, c;
    pf_ws *srv, *cli;
    uint64_t conn;
    echo_pair(&s, &c, &srv, &cli, &conn);
    s.echo_parts = 1;
    assert_true(wait_for(&c, &c.opened, 1));
    c.hold_for = &s;
    const size_t sizes[] = {9 * PF_WS_CHUNK + 5, 0, 3, 4096, 300001, 12 * PF_WS_CHUNK, 1, 70000};
    const int n_parts[] = {300, 1, 2, 7, 64, 65, 1, 3};
    enum { N = sizeof sizes / sizeof sizes[0] };
    uint64_t want[N];
    c.hold_count = N;
    uint8_t *scratch = malloc(12 * PF_WS_CHUNK + 16);
    struct iovec parts[300];
    for (int i = 0; i < N; i++) {
        for (size_t k = 0; k < sizes[i]; k++)
            scratch[k] = (uint8_t)(k * 131u + (unsigned)i);
        want[i] = fnv1a(scratch, sizes[i]);
        size_t pos = 0;
        for (int p = 0; p < n_parts[i]; p++) { /* uneven parts, the last takes the rest */
            size_t len = p + 1 == n_parts[i] ? sizes[i] - pos : (sizes[i] - pos) / 3;
            parts[p] = (struct iovec){scratch + pos, len};
            pos += len;
        }
        assert_int_equal(pf_ws_sendv(cli, conn, parts, n_parts[i]), PF_OK);
        memset(scratch, 0xAA, sizes[i]); /* the transport must not read it any more */
    }
    check_echoes(&s, &c, want, sizes, N);
    free(scratch);
    destroy_pair(&s, &c, srv, cli);
}

/* pf_ws_sendv_lent and pf_ws_settle: the server echoes from a copy it lends, the client
 * reads nothing more after the first echo until the server has had every message, so the
 * echoes stall behind one another: some are written later from the lent memory, others
 * (settled at once, queued or half written) from the transport's copy while the lent
 * memory is scribbled over. Every echo arrives whole, unchanged, in order. */
static void test_sendv_lent(void **state) {
    (void)state;
    endpoint s, c;
    pf_ws *srv, *cli;
    uint64_t conn;
    echo_pair(&s, &c, &srv, &cli, &conn);
    s.echo_lent = 1;
    assert_true(wait_for(&c, &c.opened, 1));
    c.hold_for = &s;
    const size_t sizes[] = {
        9 * PF_WS_CHUNK + 5, 12 * PF_WS_CHUNK, 50, 3 * PF_WS_CHUNK, 300001, 8 * PF_WS_CHUNK, 0, 99};
    enum { N = sizeof sizes / sizeof sizes[0] };
    uint64_t want[N];
    c.hold_count = N;
    for (int i = 0; i < N; i++)
        assert_int_equal(send_message(cli, conn, sizes[i], (unsigned)i + 3, &want[i]), PF_OK);
    check_echoes(&s, &c, want, sizes, N);
    destroy_pair(&s, &c, srv, cli);
    for (int i = 0; i < N; i++)
        free(s.lent[i]);
}

/* pf_ws_sendv_lent_tagged: as test_sendv_lent, the server's echoes lent and tagged. The
 * first echo stalls midway while the client reads (its tag digested ahead of the socket,
 * the rest at once); the client then holds back, so the next stalls at once and the others
 * queue behind it (their tags computed before they are queued); some are settled and their
 * lent memory scribbled over. The client's byte handler digests every byte of each echo:
 * the message and then its right tag, unchanged, in order. */
static void test_sendv_lent_tagged(void **state) {
    (void)state;
    endpoint s, c;
    pf_ws *srv, *cli;
    uint64_t conn;
    echo_pair(&s, &c, &srv, &cli, &conn);
    s.echo_lent = s.lent_tagged = 1;
    assert_true(wait_for(&c, &c.opened, 1));
    pf_ws_set_on_bytes(cli, conn, on_bytes);
    c.hold_for = &s;
    const size_t sizes[] = {
        9 * PF_WS_CHUNK + 5, 12 * PF_WS_CHUNK, 50, 3 * PF_WS_CHUNK, 300001, 8 * PF_WS_CHUNK, 0, 99};
    enum { N = sizeof sizes / sizeof sizes[0] };
    uint64_t sent[N], want[N];
    c.hold_count = N;
    for (int i = 0; i < N; i++)
        assert_int_equal(send_message(cli, conn, sizes[i], (unsigned)i + 5, &sent[i]), PF_OK);
    assert_true(wait_for(&c, &c.messages, N));
    for (int i = 0; i < N; i++) {
        uint8_t tag[8];
        fnv_final(&sent[i], tag);
        want[i] = fnv1a_more(sent[i], tag, 8); /* the echo: the message, then its tag */
        if (s.digest[i] != sent[i])
            fail_msg("message %d (%zu bytes) reached the server changed", i, sizes[i]);
        if (c.digest[i] != want[i] || c.streamed[i] != want[i])
            fail_msg("echo %d (%zu bytes) came back changed or wrongly tagged", i, sizes[i]);
    }
    assert_false(c.stream_bad);
    pf_ws_tagger too_long = {fnv_update, fnv_final, NULL, PF_WS_MAX_TAG + 1};
    const unsigned char lend[] = {1};
    struct iovec part = {s.lent[0], 1};
    assert_int_equal(pf_ws_sendv_lent_tagged(srv, s.last_conn, &part, 1, lend, &too_long),
                     PF_ERR_INVALID);
    destroy_pair(&s, &c, srv, cli);
    for (int i = 0; i < N; i++)
        free(s.lent[i]);
}

/* Replies received in place (pf_ws_expect): the expected ranges land in the caller's
 * buffers, read straight from the socket for a large message and from libwebsockets'
 * buffer for a small one; everything else arrives in the message as usual. A reply of
 * another length is received as usual and leaves the buffers alone; bad places are
 * refused. */
static void test_expect(void **state) {
    (void)state;
    endpoint s, c;
    pf_ws *srv, *cli;
    uint64_t conn;
    echo_pair(&s, &c, &srv, &cli, &conn);
    assert_true(wait_for(&c, &c.opened, 1));
    const size_t sizes[] = {3 * PF_WS_CHUNK + 11, 5000};
    uint8_t *a = malloc(2 * PF_WS_CHUNK), *b = malloc(PF_WS_CHUNK);
    for (int i = 0; i < 2; i++) {
        size_t len = sizes[i];
        pf_ws_place places[] = {{40, len / 2, a}, {len / 2 + 56, len / 4 - 3, b}};
        memset(a, 0xEE, 2 * PF_WS_CHUNK);
        memset(b, 0xEE, PF_WS_CHUNK);
        assert_int_equal(pf_ws_expect(cli, conn, len, places, 2), PF_OK);
        assert_int_equal(send_message(cli, conn, len, 3u + (unsigned)i, NULL), PF_OK);
        assert_true(wait_for(&c, &c.messages, i + 1));
        assert_int_equal(c.placed[i], 1);
        assert_int_equal(c.last_len, len);
        for (size_t k = 0; k < len; k++) {
            uint8_t want = (uint8_t)(k * 31u + 3u + (unsigned)i);
            const uint8_t *got = &c.last[k];
            if (k >= places[0].pos && k < places[0].pos + places[0].len)
                got = a + (k - places[0].pos);
            else if (k >= places[1].pos && k < places[1].pos + places[1].len)
                got = b + (k - places[1].pos);
            if (*got != want)
                fail_msg("message %d: byte %zu differs", i, k);
        }
    }
    /* The next message is 1 byte longer than expected: received whole, as usual. */
    pf_ws_place one[] = {{0, 100, a}};
    memset(a, 0xEE, 100);
    assert_int_equal(pf_ws_expect(cli, conn, 4096, one, 1), PF_OK);
    assert_int_equal(send_message(cli, conn, 4097, 9, NULL), PF_OK);
    assert_true(wait_for(&c, &c.messages, 3));
    assert_int_equal(c.placed[2], 0);
    check_payload(&c, 4097, 9);
    for (int k = 0; k < 100; k++)
        assert_int_equal(a[k], 0xEE);
    /* The expectation was for that message only: the next is received as usual too. */
    assert_int_equal(send_message(cli, conn, 4096, 10, NULL), PF_OK);
    assert_true(wait_for(&c, &c.messages, 4));
    assert_int_equal(c.placed[3], 0);
    check_payload(&c, 4096, 10);
    /* Places out of order, overlapping or past the end. */
    pf_ws_place bad1[] = {{100, 10, a}, {50, 10, b}};
    pf_ws_place bad2[] = {{0, 10, a}, {5, 10, b}};
    pf_ws_place bad3[] = {{4090, 10, a}};
    assert_int_equal(pf_ws_expect(cli, conn, 4096, bad1, 2), PF_ERR_INVALID);
    assert_int_equal(pf_ws_expect(cli, conn, 4096, bad2, 2), PF_ERR_INVALID);
    assert_int_equal(pf_ws_expect(cli, conn, 4096, bad3, 1), PF_ERR_INVALID);
    assert_int_equal(pf_ws_expect(cli, 999, 4096, one, 1), PF_ERR_NOT_FOUND);
    free(a);
    free(b);
    destroy_pair(&s, &c, srv, cli);
}

/* pf_ws_sendv_tagged and pf_ws_set_on_bytes: the client sends messages in parts with a tag
 * computed as they are masked; the server, seeing each message's bytes as they arrive,
 * echoes all but the tag with a tag of its own computing (sent straight, or copied when the
 * client holds back and the echoes stall). Both ends' byte handlers see every byte once, in
 * order, placed ones too (pf_ws_expect); each message arrives with the right tag. */
static void test_tagged(void **state) {
    (void)state;
    endpoint s, c;
    pf_ws *srv, *cli;
    uint64_t conn;
    echo_pair(&s, &c, &srv, &cli, &conn);
    s.echo_tagged = 1;
    assert_true(wait_for(&c, &c.opened, 1));
    assert_true(wait_for(&s, &s.opened, 1));
    pf_ws_set_on_bytes(srv, s.last_conn, on_bytes);
    pf_ws_set_on_bytes(cli, conn, on_bytes);
    c.hold_for = &s;
    const size_t sizes[] = {0, 1, 4096, 3 * PF_WS_CHUNK + 5, 300001, 9 * PF_WS_CHUNK + 1, 5000};
    const int n_parts[] = {1, 2, 7, 65, 3, 300, 4};
    enum { N = sizeof sizes / sizeof sizes[0] };
    uint64_t want[N];
    size_t wire[N];
    c.hold_count = N - 1;
    uint8_t *scratch = malloc(9 * PF_WS_CHUNK + 16), *place = malloc(4000);
    struct iovec parts[300];
    for (int i = 0; i < N; i++) {
        for (size_t k = 0; k < sizes[i]; k++)
            scratch[k] = (uint8_t)(k * 131u + (unsigned)i);
        uint64_t h = fnv1a(scratch, sizes[i]);
        uint8_t tag[8];
        fnv_final(&h, tag);
        want[i] = fnv1a_more(h, tag, 8); /* the message as it goes: parts, then tag */
        wire[i] = sizes[i] + 8;
        size_t pos = 0;
        for (int p = 0; p < n_parts[i]; p++) {
            size_t len = p + 1 == n_parts[i] ? sizes[i] - pos : (sizes[i] - pos) / 3;
            parts[p] = (struct iovec){scratch + pos, len};
            pos += len;
        }
        if (i == N - 1) { /* its echo is received in place */
            assert_true(wait_for(&c, &c.messages, N - 1));
            pf_ws_place at[] = {{1000, 4000, place}};
            assert_int_equal(pf_ws_expect(cli, conn, wire[i], at, 1), PF_OK);
        }
        uint64_t th = FNV_BASIS;
        pf_ws_tagger tagger = {fnv_update, fnv_final, &th, 8};
        assert_int_equal(pf_ws_sendv_tagged(cli, conn, parts, n_parts[i], &tagger), PF_OK);
        memset(scratch, 0xAA, sizes[i]);
    }
    assert_true(wait_for(&c, &c.messages, N));
    assert_int_equal(c.placed[N - 1], 1);
    for (int i = 0; i < N; i++) {
        if (s.streamed[i] != want[i] || (i < N - 1 && s.digest[i] != want[i]))
            fail_msg("message %d (%zu bytes) reached the server changed", i, wire[i]);
        if (c.streamed[i] != want[i] || (i < N - 1 && c.digest[i] != want[i]))
            fail_msg("message %d (%zu bytes) came back changed", i, wire[i]);
    }
    assert_false(s.stream_bad);
    assert_false(c.stream_bad);
    pf_ws_tagger too_long = {fnv_update, fnv_final, NULL, PF_WS_MAX_TAG + 1};
    assert_int_equal(pf_ws_sendv_tagged(cli, conn, parts, 1, &too_long), PF_ERR_INVALID);
    free(scratch);
    free(place);
    destroy_pair(&s, &c, srv, cli);
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
    assert_int_equal(send_message(cli, conn, 1000, 1, NULL), PF_OK);
    assert_true(wait_for(&s, &s.messages, 1));
    assert_int_equal(send_message(cli, conn, 1001, 2, NULL), PF_OK);
    /* The server closes the connection rather than buffer an oversized message. */
    assert_true(wait_for(&c, &c.closed, 1));
    assert_int_equal(s.messages, 1);
    destroy_pair(&s, &c, srv, cli);
}

/* Before pf_ws_trust a server connection's messages are small and its time is short: a
 * message at the limit arrives, one byte more closes the connection, and a connection
 * that is never trusted is closed by the idle timeout. */
static void test_untrusted_limits(void **state) {
    (void)state;
    endpoint s, c;
    ep_init(&s);
    ep_init(&c);
    s.stranger = 1;
    pf_ws *srv, *cli;
    pf_error err;
    pf_ws_options o = {.untrusted_max_message = 100, .idle_timeout = 0.3};
    assert_int_equal(
        pf_ws_server_create_with("127.0.0.1", 0, 1u << 20, &o, &handlers, &s, &srv, &err), PF_OK);
    assert_int_equal(pf_ws_client_create(1u << 20, &handlers, &c, &cli, &err), PF_OK);
    uint64_t conn;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &conn), PF_OK);
    assert_true(wait_for(&c, &c.opened, 1));
    assert_int_equal(send_message(cli, conn, 100, 1, NULL), PF_OK);
    assert_true(wait_for(&s, &s.messages, 1));
    assert_int_equal(send_message(cli, conn, 101, 2, NULL), PF_OK);
    assert_true(wait_for(&c, &c.closed, 1));
    assert_int_equal(s.messages, 1);
    /* A second connection that sends nothing: closed by the idle timeout. */
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &conn), PF_OK);
    assert_true(wait_for(&c, &c.opened, 2));
    assert_true(wait_for(&c, &c.closed, 2));
    destroy_pair(&s, &c, srv, cli);
}

/* A server with max_connections 1 closes a second connection on accept; the first one
 * keeps working. */
static void test_max_connections(void **state) {
    (void)state;
    endpoint s, c;
    ep_init(&s);
    ep_init(&c);
    s.echo = 1;
    pf_ws *srv, *cli;
    pf_error err;
    pf_ws_options o = {.max_connections = 1};
    assert_int_equal(
        pf_ws_server_create_with("127.0.0.1", 0, 1u << 20, &o, &handlers, &s, &srv, &err), PF_OK);
    assert_int_equal(pf_ws_client_create(1u << 20, &handlers, &c, &cli, &err), PF_OK);
    uint64_t first, second;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &first), PF_OK);
    assert_true(wait_for(&c, &c.opened, 1));
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &second), PF_OK);
    assert_true(wait_for(&c, &c.closed, 1));
    assert_int_equal(c.opened, 1);
    assert_int_equal(send_message(cli, first, 1000, 3, NULL), PF_OK);
    assert_true(wait_for(&c, &c.messages, 1));
    check_payload(&c, 1000, 3);
    /* Raised while it runs (a ps whose job grew): a second connection is served too. */
    pf_ws_set_limits(srv, 2, 0);
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &second), PF_OK);
    assert_true(wait_for(&c, &c.opened, 2));
    assert_int_equal(send_message(cli, second, 1000, 4, NULL), PF_OK);
    assert_true(wait_for(&c, &c.messages, 2));
    check_payload(&c, 1000, 4);
    assert_int_equal(c.closed, 1);
    destroy_pair(&s, &c, srv, cli);
}

/* max_buffered moved while the server runs: a frame that would pass the cap closes its
 * connection; raised, the same frame is received; lowered below what one message holds,
 * it is refused again (and nothing wraps around). */
static void test_buffered_limit_live(void **state) {
    (void)state;
    endpoint s, c;
    ep_init(&s);
    ep_init(&c);
    s.echo = 1;
    pf_ws *srv, *cli;
    pf_error err;
    pf_ws_options o = {.max_buffered = 4000};
    assert_int_equal(
        pf_ws_server_create_with("127.0.0.1", 0, 1u << 20, &o, &handlers, &s, &srv, &err), PF_OK);
    assert_int_equal(pf_ws_client_create(1u << 20, &handlers, &c, &cli, &err), PF_OK);
    uint64_t conn;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &conn), PF_OK);
    assert_true(wait_for(&c, &c.opened, 1));
    assert_int_equal(send_message(cli, conn, 4000, 1, NULL), PF_OK);
    assert_true(wait_for(&c, &c.messages, 1));
    assert_int_equal(send_message(cli, conn, 4001, 2, NULL), PF_OK);
    assert_true(wait_for(&c, &c.closed, 1));
    pf_ws_set_limits(srv, 0, 8000);
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", pf_ws_port(srv), NULL, &conn), PF_OK);
    assert_true(wait_for(&c, &c.opened, 2));
    assert_int_equal(send_message(cli, conn, 8000, 3, NULL), PF_OK);
    assert_true(wait_for(&c, &c.messages, 2));
    check_payload(&c, 8000, 3);
    pf_ws_set_limits(srv, 0, 100);
    assert_int_equal(send_message(cli, conn, 101, 4, NULL), PF_OK);
    assert_true(wait_for(&c, &c.closed, 2));
    assert_int_equal(c.messages, 2);
    destroy_pair(&s, &c, srv, cli);
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
    send_message(cli, conn, 8, 0, NULL);
    assert_true(wait_for(&c, &c.closed, 1));
    assert_int_equal(c.opened, 0);
    pf_ws_destroy(cli);
    ep_deinit(&s);
    ep_deinit(&c);
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
    ep_init(&s);
    pf_ws *srv;
    pf_error err;
    assert_int_equal(pf_ws_server_create("127.0.0.1", 0, 1000, &handlers, &s, &srv, &err), PF_OK);
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
    assert_true(wait_for(&s, &s.opened, 1));
    close(fd);
    assert_true(wait_for(&s, &s.closed, 1));
    pf_ws_destroy(srv);
    ep_deinit(&s);
}

/* Bytes that are not an HTTP request (here NUL bytes, then a request) are answered with
 * 400 at once and the connection is closed, whatever follows. */
static void test_handshake_garbage(void **state) {
    (void)state;
    endpoint s;
    ep_init(&s);
    pf_ws *srv;
    pf_error err;
    assert_int_equal(pf_ws_server_create("127.0.0.1", 0, 1000, &handlers, &s, &srv, &err), PF_OK);
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
    ep_deinit(&s);
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
    ep_init(&s);
    ep_init(&c);
    s.echo = 1;
    pf_ws *srv, *cli;
    pf_error err;
    pf_ws_options o = {.max_connections = 2, .max_untrusted = 4, .max_untrusted_per_address = 2};
    assert_int_equal(
        pf_ws_server_create_with("127.0.0.1", 0, 1u << 20, &o, &handlers, &s, &srv, &err), PF_OK);
    int port = pf_ws_port(srv);
    assert_int_equal(pf_ws_client_create(1u << 20, &handlers, &c, &cli, &err), PF_OK);
    uint64_t trusted;
    assert_int_equal(pf_ws_connect(cli, "127.0.0.1", port, NULL, &trusted), PF_OK);
    assert_true(wait_for(&c, &c.opened, 1));
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
    assert_true(wait_for(&s, &s.messages, 1));
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
    assert_int_equal(send_message(cli, trusted, 5000, 9, NULL), PF_OK);
    assert_true(wait_for(&c, &c.messages, 1));
    check_payload(&c, 5000, 9);
    int fds[] = {a, b, c2, d, e, f};
    for (int i = 0; i < 6; i++)
        close(fds[i]);
    destroy_pair(&s, &c, srv, cli);
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
    ep_init(&c);
    pf_ws *cli;
    pf_error err;
    assert_int_equal(pf_ws_client_create(1u << 20, &handlers, &c, &cli, &err), PF_OK);
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
    assert_true(wait_for(&c, &c.closed, 1));
    assert_int_equal(c.opened, 0);
    close(fd);
    close(lfd);
    pf_ws_destroy(cli);
    ep_deinit(&c);
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
    ep_init(&s);
    s.echo = s.echo_lent = s.fail_settle = 1;
    pf_ws *srv;
    pf_error err;
    assert_int_equal(pf_ws_server_create("127.0.0.1", 0, 64u << 20, &handlers, &s, &srv, &err),
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
    assert_true(wait_for(&s, &s.messages, 1));
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
    ep_deinit(&s);
    free(in);
    free(frame);
    free(msg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_rfc6455),
        cmocka_unit_test(test_handshake_wrong_accept),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_sendv),
        cmocka_unit_test(test_sendv_lent),
        cmocka_unit_test(test_sendv_lent_tagged),
        cmocka_unit_test(test_expect),
        cmocka_unit_test(test_tagged),
        cmocka_unit_test(test_message_cap),
        cmocka_unit_test(test_untrusted_limits),
        cmocka_unit_test(test_max_connections),
        cmocka_unit_test(test_buffered_limit_live),
        cmocka_unit_test(test_settle_out_of_memory),
        cmocka_unit_test(test_connect_refused),
        cmocka_unit_test(test_handshake_garbage),
        cmocka_unit_test(test_untrusted_make_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
