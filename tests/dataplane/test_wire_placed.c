/* test_wire_placed.c - a PULL_REPLY received in place: pf_wire_pull_reply_places gives the
 * very offsets the encoder puts each tensor's values at; pf_wire_decode_placed returns views
 * that point at the destinations and never reads a placed range of the receive buffer (under
 * AddressSanitizer the ranges are poisoned, elsewhere filled with garbage), and it refuses,
 * still without reading them, a reply of another layout, another tensor count or another
 * type that happens to have the expected length.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "psflow/buf.h"
#include "psflow/wire.h"

#if defined(__SANITIZE_ADDRESS__) /* gcc */
#define HOLES_POISONED 1
#elif defined(__has_feature) /* clang */
#if __has_feature(address_sanitizer)
#define HOLES_POISONED 1
#endif
#endif
#ifndef HOLES_POISONED
#define HOLES_POISONED 0
#else
#include <sanitizer/asan_interface.h>
#endif

enum { N = 4 };
static const uint64_t counts[N] = {3, 0, 1000, 5};

/* A PULL_REPLY of N tensors with the given counts, values v[i][k] = 100 i + k + 0.5. */
static void encode_reply(const uint64_t *c, pf_buf *out) {
    static float values[N][1000];
    pf_wire_tensor t[N];
    for (int i = 0; i < N; i++) {
        for (uint64_t k = 0; k < c[i]; k++)
            values[i][k] = (float)(100 * i) + (float)k + 0.5f;
        t[i] = (pf_wire_tensor){(uint32_t)(7 + i), PF_WIRE_F32, c[i], values[i]};
    }
    pf_wire_out o;
    pf_wire_out_init(&o);
    assert_int_equal(pf_wire_encode_pull_reply(&o, 99, &(pf_wire_pull_reply){12, 0, N, t}, NULL),
                     PF_OK);
    pf_buf_reset(out);
    assert_int_equal(pf_wire_out_gather(&o, out), PF_OK);
    pf_wire_out_deinit(&o);
}

/* The receive buffer as the transport leaves it: the message with the places' bytes
 * missing (poisoned, or garbage), those bytes written to each place's dst. */
static uint8_t *receive_in_place(const pf_buf *msg, const pf_ws_place *places, int n) {
    uint8_t *rx = malloc(msg->len);
    assert_non_null(rx);
    memcpy(rx, msg->data, msg->len);
    for (int i = 0; i < n; i++) {
        memcpy(places[i].dst, msg->data + places[i].pos, places[i].len);
        memset(rx + places[i].pos, 0xEE, places[i].len);
#if HOLES_POISONED
        ASAN_POISON_MEMORY_REGION(rx + places[i].pos, places[i].len);
#endif
    }
    return rx;
}

static void release(uint8_t *rx, size_t len) {
#if HOLES_POISONED
    ASAN_UNPOISON_MEMORY_REGION(rx, len);
#else
    (void)len;
#endif
    free(rx);
}

/* A worker awaiting the reply to a pull of `counts`: the places, each with a destination
 * of its own, the reply's length, a buffer for the reply and a decoder. */
typedef struct awaiting {
    float dst[N][1000];
    pf_ws_place places[N];
    size_t len;
    pf_buf msg;
    pf_wire_in in;
} awaiting;

static awaiting *await_reply(void) {
    awaiting *a = calloc(1, sizeof *a);
    assert_non_null(a);
    assert_int_equal(pf_wire_pull_reply_places(counts, N, a->places, &a->len), PF_OK);
    for (int i = 0; i < N; i++)
        a->places[i].dst = a->dst[i];
    pf_buf_init(&a->msg, 1 << 20);
    pf_wire_in_init(&a->in, 0, 0);
    return a;
}

static void await_done(awaiting *a) {
    pf_wire_in_deinit(&a->in);
    pf_buf_deinit(&a->msg);
    free(a);
}

static void test_places_match_the_encoder(void **state) {
    (void)state;
    pf_buf msg;
    pf_buf_init(&msg, 1 << 20);
    encode_reply(counts, &msg);
    pf_ws_place places[N];
    size_t len = 0;
    assert_int_equal(pf_wire_pull_reply_places(counts, N, places, &len), PF_OK);
    assert_int_equal(len, msg.len);
    /* Where the plain decoder finds each tensor's values is where the places say. */
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_msg m;
    pf_error err;
    assert_int_equal(pf_wire_decode(&in, msg.data, msg.len, &m, &err), PF_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(places[i].len, counts[i] * 4);
        if (counts[i])
            assert_int_equal((const uint8_t *)m.u.pull_reply.tensors[i].data - msg.data,
                             places[i].pos);
    }
    /* An empty pull: the reply is its fixed fields. */
    assert_int_equal(pf_wire_pull_reply_places(NULL, 0, NULL, &len), PF_OK);
    assert_int_equal(len, PF_WIRE_HEADER_SIZE + 16);
    /* Too many tensors, or more values than a message carries. */
    assert_int_equal(pf_wire_pull_reply_places(counts, PF_WIRE_MAX_TENSORS + 1, places, &len),
                     PF_ERR_INVALID);
    const uint64_t huge[2] = {PF_WIRE_MAX_PAYLOAD / 8, PF_WIRE_MAX_PAYLOAD / 8};
    assert_int_equal(pf_wire_pull_reply_places(huge, 2, places, &len), PF_ERR_RANGE);
    pf_wire_in_deinit(&in);
    pf_buf_deinit(&msg);
}

static void test_views_point_at_destinations(void **state) {
    (void)state;
    awaiting *a = await_reply();
    encode_reply(counts, &a->msg);
    uint8_t *rx = receive_in_place(&a->msg, a->places, N);
    pf_wire_msg m;
    pf_error err;
    assert_int_equal(pf_wire_decode_placed(&a->in, rx, a->msg.len, a->places, N, &m, &err), PF_OK);
    assert_int_equal(m.type, PF_WIRE_PULL_REPLY);
    assert_int_equal(m.request_id, 99);
    assert_int_equal(m.u.pull_reply.version, 12);
    assert_int_equal(m.u.pull_reply.n, N);
    for (int i = 0; i < N; i++) {
        const pf_wire_tensor *t = &m.u.pull_reply.tensors[i];
        assert_int_equal(t->id, 7 + i);
        assert_int_equal(t->count, counts[i]);
        assert_ptr_equal(t->data, a->dst[i]); /* never into the buffer */
        for (uint64_t k = 0; k < counts[i]; k++)
            assert_true(t->data[k] == (float)(100 * i) + (float)k + 0.5f);
    }
    /* Without places it is pf_wire_decode, on a whole message. */
    assert_int_equal(pf_wire_decode_placed(&a->in, a->msg.data, a->msg.len, NULL, 0, &m, &err),
                     PF_OK);
    assert_true((const uint8_t *)m.u.pull_reply.tensors[2].data > a->msg.data);
    release(rx, a->msg.len);
    await_done(a);
}

/* Replies of the expected length that do not fit the places: refused, no place read. */
static void test_other_layouts_refused(void **state) {
    (void)state;
    awaiting *a = await_reply();
    pf_ws_place *places = a->places;
    pf_buf *msg = &a->msg;
    size_t len = a->len;
    pf_wire_in *in = &a->in;
    pf_wire_msg m;
    pf_error err;

    /* The same length, the values split otherwise: tensor 0 one longer, tensor 2 one
     * shorter. */
    const uint64_t shifted[N] = {4, 0, 999, 5};
    encode_reply(shifted, msg);
    assert_int_equal(msg->len, len);
    uint8_t *rx = receive_in_place(msg, places, N);
    assert_int_equal(pf_wire_decode_placed(in, rx, msg->len, places, N, &m, &err), PF_ERR_FORMAT);
    assert_int_equal(pf_wire_in_code(in), PF_WIRE_BAD_LENGTH);
    assert_non_null(strstr(err.message, "received in place"));
    release(rx, msg->len);

    /* Places that do not lie where a PULL_REPLY of that many tensors puts values. */
    encode_reply(counts, msg);
    pf_ws_place moved[N];
    memcpy(moved, places, sizeof moved);
    moved[3].pos -= 4;
    rx = receive_in_place(msg, moved, N);
    assert_int_equal(pf_wire_decode_placed(in, rx, msg->len, moved, N, &m, &err), PF_ERR_FORMAT);
    assert_int_equal(pf_wire_in_code(in), PF_WIRE_BAD_LENGTH);
    release(rx, msg->len);

    /* Fewer places than tensors. */
    rx = receive_in_place(msg, places, N - 1);
    assert_int_equal(pf_wire_decode_placed(in, rx, msg->len, places, N - 1, &m, &err),
                     PF_ERR_FORMAT);
    assert_int_equal(pf_wire_in_code(in), PF_WIRE_BAD_LENGTH);
    release(rx, msg->len);

    /* Another type of exactly the expected length: an ERROR (for a smaller pull, since an
     * ERROR's text is at most 1 KiB). */
    const uint64_t small[N] = {3, 0, 200, 5};
    pf_ws_place small_places[N];
    assert_int_equal(pf_wire_pull_reply_places(small, N, small_places, &len), PF_OK);
    for (int i = 0; i < N; i++)
        small_places[i].dst = a->dst[i];
    size_t text_len = len - PF_WIRE_HEADER_SIZE - 8;
    assert_true(text_len <= PF_WIRE_MAX_ERROR_MSG);
    char *text = malloc(text_len + 1);
    assert_non_null(text);
    memset(text, 'e', text_len);
    text[text_len] = '\0';
    pf_wire_out o;
    pf_wire_out_init(&o);
    assert_int_equal(pf_wire_encode_error(&o, 99, PF_WIRE_NOT_READY, text, NULL), PF_OK);
    pf_buf_reset(msg);
    assert_int_equal(pf_wire_out_gather(&o, msg), PF_OK);
    assert_int_equal(msg->len, len);
    rx = receive_in_place(msg, small_places, N);
    assert_int_equal(pf_wire_decode_placed(in, rx, msg->len, small_places, N, &m, &err),
                     PF_ERR_FORMAT);
    assert_int_equal(pf_wire_in_code(in), PF_WIRE_UNEXPECTED);
    assert_int_equal(m.request_id, 99); /* still answerable */
    assert_non_null(strstr(err.message, "ERROR"));
    release(rx, msg->len);

    /* Places inside the fixed fields. */
    pf_ws_place early[1] = {{30, 8, a->dst[0]}};
    assert_int_equal(pf_wire_decode_placed(in, msg->data, msg->len, early, 1, &m, &err),
                     PF_ERR_FORMAT);
    assert_int_equal(pf_wire_in_code(in), PF_WIRE_BAD_LENGTH);

    free(text);
    pf_wire_out_deinit(&o);
    await_done(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_places_match_the_encoder),
        cmocka_unit_test(test_views_point_at_destinations),
        cmocka_unit_test(test_other_layouts_refused),
    };
    return cmocka_run_group_tests_name("wire_placed", tests, NULL, NULL);
}
