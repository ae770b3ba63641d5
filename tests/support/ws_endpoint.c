/* ws_endpoint.c - the endpoint of the transport's unit tests (see ws_endpoint.h). */
#include "tests/support/ws_endpoint.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "psflow/clock.h"
#include "tests/support/counting_alloc.h"

uint64_t ws_ep_fnv1a_more(uint64_t h, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

uint64_t ws_ep_fnv1a(const uint8_t *p, size_t n) {
    return ws_ep_fnv1a_more(FNV_BASIS, p, n);
}

/* A tagger for pf_ws_sendv_tagged: the FNV-1a of the bytes before it, 8 bytes LE. */
void ws_ep_fnv_update(void *ctx, const void *data, size_t n) {
    uint64_t *h = ctx;
    *h = ws_ep_fnv1a_more(*h, data, n);
}

void ws_ep_fnv_final(void *ctx, uint8_t *tag) {
    uint64_t *h = ctx;
    for (int i = 0; i < 8; i++)
        tag[i] = (uint8_t)(*h >> (8 * i));
}

/* pf_ws_set_on_bytes: every piece must continue where the last one ended. */
void ws_ep_on_bytes(pf_ws *ws, uint64_t conn, void *cu, size_t pos, const uint8_t *data, size_t n,
                    void *user) {
    (void)ws;
    (void)conn;
    (void)cu;
    endpoint *e = user;
    if (pos != e->stream_next)
        e->stream_bad = 1;
    e->stream_h = ws_ep_fnv1a_more(e->stream_h, data, n);
    e->stream_next = pos + n;
}

void ws_ep_init(endpoint *e) {
    memset(e, 0, sizeof *e);
    e->stream_h = FNV_BASIS;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
}

void ws_ep_deinit(endpoint *e) {
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
        e->digest[e->messages] = ws_ep_fnv1a(data, len);
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
        pf_ws_tagger tagger = {ws_ep_fnv_update, ws_ep_fnv_final, &h, 8};
        assert_int_equal(e->lent_tagged ? pf_ws_sendv_lent_tagged(ws, conn, parts, 2, lend, &tagger)
                                        : pf_ws_sendv_lent(ws, conn, parts, 2, lend),
                         PF_OK);
        if (i == 1 || i == 3) {
            assert_int_equal(pf_ws_settle(ws), PF_OK);
            memset(copy, 0xAA, len); /* an update: the rest of the reply must not see it */
        }
    } else if (e->echo && e->echo_tagged) {
        uint64_t h = FNV_BASIS;
        pf_ws_tagger tagger = {ws_ep_fnv_update, ws_ep_fnv_final, &h, 8};
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

const pf_ws_handlers ws_endpoint_handlers = {on_open, on_message, on_close, NULL};

/* Waits up to 10 s for *counter >= want. */
int ws_ep_wait_for(endpoint *e, int *counter, int want) {
    struct timespec deadline = pf_clock_deadline(10);
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    while (*counter < want && rc == 0)
        rc = pthread_cond_timedwait(&e->cv, &e->mu, &deadline);
    int ok = *counter >= want;
    pthread_mutex_unlock(&e->mu);
    return ok;
}

/* Sends a message of len bytes whose byte i is i * 31 + seed (what ws_ep_check_payload expects)
 * with pf_ws_sendv, from a buffer scribbled over and freed as soon as the call returns;
 * *digest (may be NULL) receives its FNV-1a. */
pf_status ws_ep_send_message(pf_ws *ws, uint64_t conn, size_t len, unsigned seed,
                             uint64_t *digest) {
    uint8_t *buf = malloc(len ? len : 1);
    assert_non_null(buf);
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(i * 31u + seed);
    if (digest)
        *digest = ws_ep_fnv1a(buf, len);
    struct iovec whole = {buf, len};
    pf_status st = pf_ws_sendv(ws, conn, &whole, 1);
    memset(buf, 0xAA, len); /* the transport must not read it any more */
    free(buf);
    return st;
}

void ws_ep_check_payload(const endpoint *e, size_t len, unsigned seed) {
    assert_int_equal(e->last_len, len);
    for (size_t i = 0; i < len; i++)
        if (e->last[i] != (uint8_t)(i * 31u + seed))
            fail_msg("byte %zu differs", i);
}

/* An echoing server (s) and a client (c) connected to it on 127.0.0.1. */
void ws_ep_echo_pair(endpoint *s, endpoint *c, pf_ws **srv, pf_ws **cli, uint64_t *conn) {
    pf_error err;
    ws_ep_init(s);
    ws_ep_init(c);
    s->echo = 1;
    assert_int_equal(
        pf_ws_server_create("127.0.0.1", 0, 64u << 20, &ws_endpoint_handlers, s, srv, &err), PF_OK);
    assert_true(pf_ws_port(*srv) > 0);
    assert_int_equal(pf_ws_client_create(64u << 20, &ws_endpoint_handlers, c, cli, &err), PF_OK);
    assert_int_equal(pf_ws_connect(*cli, "127.0.0.1", pf_ws_port(*srv), NULL, conn), PF_OK);
}

void ws_ep_destroy_pair(endpoint *s, endpoint *c, pf_ws *srv, pf_ws *cli) {
    pf_ws_destroy(cli);
    pf_ws_destroy(srv);
    ws_ep_deinit(s);
    ws_ep_deinit(c);
}

/* Waits for n echoes and checks that each message reached the server and came back
 * unchanged, in order. */
void ws_ep_check_echoes(endpoint *s, endpoint *c, const uint64_t *want, const size_t *sizes,
                        int n) {
    assert_true(ws_ep_wait_for(c, &c->messages, n));
    for (int i = 0; i < n; i++) {
        if (s->digest[i] != want[i])
            fail_msg("message %d (%zu bytes) reached the server changed", i, sizes[i]);
        if (c->digest[i] != want[i])
            fail_msg("message %d (%zu bytes) came back changed", i, sizes[i]);
    }
}
