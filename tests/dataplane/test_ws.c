/* test_ws.c - the data-plane transport's messages on 127.0.0.1: round trips of small and
 * fragmented messages, byte-exact reassembly, sends to closed connections, sends in parts
 * and lent ones, receiving in place, tagged sends (lent ones too) and byte handlers (its
 * limits and refusals: test_ws_limits.c). Every send is pf_ws_sendv (or _tagged, _lent),
 * the production paths. Waits use condition variables or poll() with deadlines, never
 * sleeps. */
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

static void test_round_trips(void **state) {
    (void)state;
    endpoint s, c;
    pf_ws *srv, *cli;
    uint64_t conn;
    ws_ep_echo_pair(&s, &c, &srv, &cli, &conn);
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
    assert_true(ws_ep_wait_for(&s, &s.opened, 1));

    /* Sizes around the fragment boundary and a multi-fragment message. */
    const size_t sizes[] = {
        0, 1, 24, 4096, PF_WS_CHUNK - 1, PF_WS_CHUNK, PF_WS_CHUNK + 1, 3 * PF_WS_CHUNK + 17};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        assert_int_equal(ws_ep_send_message(cli, conn, sizes[i], (unsigned)i, NULL), PF_OK);
        assert_true(ws_ep_wait_for(&c, &c.messages, (int)i + 1));
        ws_ep_check_payload(&s, sizes[i], (unsigned)i); /* what the server got */
        ws_ep_check_payload(&c, sizes[i], (unsigned)i); /* what came back */
    }

    /* After the client closes, sends on the dead id fail and the server sees the close. */
    pf_ws_close(cli, conn);
    assert_true(ws_ep_wait_for(&c, &c.closed, 1));
    assert_true(ws_ep_wait_for(&s, &s.closed, 1));
    assert_int_equal(ws_ep_send_message(cli, conn, 8, 0, NULL), PF_ERR_NOT_FOUND);
    ws_ep_destroy_pair(&s, &c, srv, cli);
}

/* Messages sent back to back, without waiting for replies, large and small mixed: frame
 * boundaries fall anywhere in what one read returns, and every message arrives whole, in
 * order, both ways. */
static void test_pipelined(void **state) {
    (void)state;
    endpoint s, c;
    pf_ws *srv, *cli;
    uint64_t conn;
    ws_ep_echo_pair(&s, &c, &srv, &cli, &conn);
    const size_t sizes[] = {5 * PF_WS_CHUNK + 3, 7,   300001, 0, 65536, 2 * PF_WS_CHUNK, 131071, 1,
                            4 * PF_WS_CHUNK + 1, 9999};
    enum { N = sizeof sizes / sizeof sizes[0] };
    uint64_t want[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(ws_ep_send_message(cli, conn, sizes[i], (unsigned)i + 7, &want[i]), PF_OK);
    }
    ws_ep_check_echoes(&s, &c, want, sizes, N);
    ws_ep_destroy_pair(&s, &c, srv, cli);
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
    ws_ep_echo_pair(&s, &c, &srv, &cli, &conn);
    s.echo_parts = 1;
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
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
        want[i] = ws_ep_fnv1a(scratch, sizes[i]);
        size_t pos = 0;
        for (int p = 0; p < n_parts[i]; p++) { /* uneven parts, the last takes the rest */
            size_t len = p + 1 == n_parts[i] ? sizes[i] - pos : (sizes[i] - pos) / 3;
            parts[p] = (struct iovec){scratch + pos, len};
            pos += len;
        }
        assert_int_equal(pf_ws_sendv(cli, conn, parts, n_parts[i]), PF_OK);
        memset(scratch, 0xAA, sizes[i]); /* the transport must not read it any more */
    }
    ws_ep_check_echoes(&s, &c, want, sizes, N);
    free(scratch);
    ws_ep_destroy_pair(&s, &c, srv, cli);
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
    ws_ep_echo_pair(&s, &c, &srv, &cli, &conn);
    s.echo_lent = 1;
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
    c.hold_for = &s;
    const size_t sizes[] = {
        9 * PF_WS_CHUNK + 5, 12 * PF_WS_CHUNK, 50, 3 * PF_WS_CHUNK, 300001, 8 * PF_WS_CHUNK, 0, 99};
    enum { N = sizeof sizes / sizeof sizes[0] };
    uint64_t want[N];
    c.hold_count = N;
    for (int i = 0; i < N; i++)
        assert_int_equal(ws_ep_send_message(cli, conn, sizes[i], (unsigned)i + 3, &want[i]), PF_OK);
    ws_ep_check_echoes(&s, &c, want, sizes, N);
    ws_ep_destroy_pair(&s, &c, srv, cli);
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
    ws_ep_echo_pair(&s, &c, &srv, &cli, &conn);
    s.echo_lent = s.lent_tagged = 1;
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
    pf_ws_set_on_bytes(cli, conn, ws_ep_on_bytes);
    c.hold_for = &s;
    const size_t sizes[] = {
        9 * PF_WS_CHUNK + 5, 12 * PF_WS_CHUNK, 50, 3 * PF_WS_CHUNK, 300001, 8 * PF_WS_CHUNK, 0, 99};
    enum { N = sizeof sizes / sizeof sizes[0] };
    uint64_t sent[N], want[N];
    c.hold_count = N;
    for (int i = 0; i < N; i++)
        assert_int_equal(ws_ep_send_message(cli, conn, sizes[i], (unsigned)i + 5, &sent[i]), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.messages, N));
    for (int i = 0; i < N; i++) {
        uint8_t tag[8];
        ws_ep_fnv_final(&sent[i], tag);
        want[i] = ws_ep_fnv1a_more(sent[i], tag, 8); /* the echo: the message, then its tag */
        if (s.digest[i] != sent[i])
            fail_msg("message %d (%zu bytes) reached the server changed", i, sizes[i]);
        if (c.digest[i] != want[i] || c.streamed[i] != want[i])
            fail_msg("echo %d (%zu bytes) came back changed or wrongly tagged", i, sizes[i]);
    }
    assert_false(c.stream_bad);
    pf_ws_tagger too_long = {ws_ep_fnv_update, ws_ep_fnv_final, NULL, PF_WS_MAX_TAG + 1};
    const unsigned char lend[] = {1};
    struct iovec part = {s.lent[0], 1};
    assert_int_equal(pf_ws_sendv_lent_tagged(srv, s.last_conn, &part, 1, lend, &too_long),
                     PF_ERR_INVALID);
    ws_ep_destroy_pair(&s, &c, srv, cli);
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
    ws_ep_echo_pair(&s, &c, &srv, &cli, &conn);
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
    const size_t sizes[] = {3 * PF_WS_CHUNK + 11, 5000};
    uint8_t *a = malloc(2 * PF_WS_CHUNK), *b = malloc(PF_WS_CHUNK);
    for (int i = 0; i < 2; i++) {
        size_t len = sizes[i];
        pf_ws_place places[] = {{40, len / 2, a}, {len / 2 + 56, len / 4 - 3, b}};
        memset(a, 0xEE, 2 * PF_WS_CHUNK);
        memset(b, 0xEE, PF_WS_CHUNK);
        assert_int_equal(pf_ws_expect(cli, conn, len, places, 2), PF_OK);
        assert_int_equal(ws_ep_send_message(cli, conn, len, 3u + (unsigned)i, NULL), PF_OK);
        assert_true(ws_ep_wait_for(&c, &c.messages, i + 1));
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
    assert_int_equal(ws_ep_send_message(cli, conn, 4097, 9, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.messages, 3));
    assert_int_equal(c.placed[2], 0);
    ws_ep_check_payload(&c, 4097, 9);
    for (int k = 0; k < 100; k++)
        assert_int_equal(a[k], 0xEE);
    /* The expectation was for that message only: the next is received as usual too. */
    assert_int_equal(ws_ep_send_message(cli, conn, 4096, 10, NULL), PF_OK);
    assert_true(ws_ep_wait_for(&c, &c.messages, 4));
    assert_int_equal(c.placed[3], 0);
    ws_ep_check_payload(&c, 4096, 10);
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
    ws_ep_destroy_pair(&s, &c, srv, cli);
}

/* pf_ws_sendv_tagged and pf_ws_set_on_bytes: the client sends messages in parts with a tag
 * computed as they are masked; the server, seeing each message's bytes as they arrive,
 * echoes all but the tag with a tag of its own computing (sent straight, or copied when the
 * client holds back and the echoes stall). Both ends' byte ws_endpoint_handlers see every byte
 * once, in order, placed ones too (pf_ws_expect); each message arrives with the right tag. */
static void test_tagged(void **state) {
    (void)state;
    endpoint s, c;
    pf_ws *srv, *cli;
    uint64_t conn;
    ws_ep_echo_pair(&s, &c, &srv, &cli, &conn);
    s.echo_tagged = 1;
    assert_true(ws_ep_wait_for(&c, &c.opened, 1));
    assert_true(ws_ep_wait_for(&s, &s.opened, 1));
    pf_ws_set_on_bytes(srv, s.last_conn, ws_ep_on_bytes);
    pf_ws_set_on_bytes(cli, conn, ws_ep_on_bytes);
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
        uint64_t h = ws_ep_fnv1a(scratch, sizes[i]);
        uint8_t tag[8];
        ws_ep_fnv_final(&h, tag);
        want[i] = ws_ep_fnv1a_more(h, tag, 8); /* the message as it goes: parts, then tag */
        wire[i] = sizes[i] + 8;
        size_t pos = 0;
        for (int p = 0; p < n_parts[i]; p++) {
            size_t len = p + 1 == n_parts[i] ? sizes[i] - pos : (sizes[i] - pos) / 3;
            parts[p] = (struct iovec){scratch + pos, len};
            pos += len;
        }
        if (i == N - 1) { /* its echo is received in place */
            assert_true(ws_ep_wait_for(&c, &c.messages, N - 1));
            pf_ws_place at[] = {{1000, 4000, place}};
            assert_int_equal(pf_ws_expect(cli, conn, wire[i], at, 1), PF_OK);
        }
        uint64_t th = FNV_BASIS;
        pf_ws_tagger tagger = {ws_ep_fnv_update, ws_ep_fnv_final, &th, 8};
        assert_int_equal(pf_ws_sendv_tagged(cli, conn, parts, n_parts[i], &tagger), PF_OK);
        memset(scratch, 0xAA, sizes[i]);
    }
    assert_true(ws_ep_wait_for(&c, &c.messages, N));
    assert_int_equal(c.placed[N - 1], 1);
    for (int i = 0; i < N; i++) {
        if (s.streamed[i] != want[i] || (i < N - 1 && s.digest[i] != want[i]))
            fail_msg("message %d (%zu bytes) reached the server changed", i, wire[i]);
        if (c.streamed[i] != want[i] || (i < N - 1 && c.digest[i] != want[i]))
            fail_msg("message %d (%zu bytes) came back changed", i, wire[i]);
    }
    assert_false(s.stream_bad);
    assert_false(c.stream_bad);
    pf_ws_tagger too_long = {ws_ep_fnv_update, ws_ep_fnv_final, NULL, PF_WS_MAX_TAG + 1};
    assert_int_equal(pf_ws_sendv_tagged(cli, conn, parts, 1, &too_long), PF_ERR_INVALID);
    free(scratch);
    free(place);
    ws_ep_destroy_pair(&s, &c, srv, cli);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_sendv),
        cmocka_unit_test(test_sendv_lent),
        cmocka_unit_test(test_sendv_lent_tagged),
        cmocka_unit_test(test_expect),
        cmocka_unit_test(test_tagged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
