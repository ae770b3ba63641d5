/* test_wire.c - the data-plane codec: round trips of every message type, the frozen HELLO
 * layout, chunked gathering, zero-copy and no-allocation-when-warm encoding, every class
 * of malformed frame (right wire code, message and offset), the frames under
 * tests/data/wire/{valid,invalid}/, and failing allocators. pf_buf has its own test
 * (tests/base/test_buf.c).
 *
 * Each invalid file is named CODE-what.bin, where CODE (lower case) is the wire error code
 * its decoding must give; each valid file must decode and re-encode to the same bytes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/buf.h"
#include "psflow/mem.h"
#include "psflow/wire.h"
#include "tests/support/counting_alloc.h"

#define WIRE_DIR  PSFLOW_TEST_DATA "/wire"
#define MAX_FILES 256

/* --- helpers ---------------------------------------------------------------------------- */

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Encodes m and gathers it into b (reset first). */
static void encode_into(pf_wire_out *o, const pf_wire_msg *m, pf_buf *b) {
    pf_error err;
    pf_status st = pf_wire_encode(o, m, &err);
    if (st != PF_OK)
        fail_msg("encode %s: %s", pf_wire_type_name(m->type), err.message);
    pf_buf_reset(b);
    assert_int_equal(pf_wire_out_gather(o, b), PF_OK);
    assert_int_equal(b->len, pf_wire_out_len(o));
}

/* Decodes b expecting success. */
static void decode_ok(pf_wire_in *in, const pf_buf *b, pf_wire_msg *m) {
    pf_error err;
    pf_status st = pf_wire_decode(in, b->data, b->len, m, &err);
    if (st != PF_OK)
        fail_msg("decode: %s (offset %lld)", err.message, err.offset);
    assert_int_equal(pf_wire_in_code(in), PF_WIRE_OK);
}

/* Decodes data expecting the given wire code; checks a message was written and returns
 * the error's offset. */
static long long decode_fails(pf_wire_in *in, const void *data, size_t len, pf_wire_code code) {
    pf_wire_msg m;
    pf_error err;
    pf_status st = pf_wire_decode(in, data, len, &m, &err);
    if (st == PF_OK)
        fail_msg("decoded a frame that should fail with %s", pf_wire_code_name(code));
    if (pf_wire_in_code(in) != code)
        fail_msg("expected %s, got %s: %s", pf_wire_code_name(code),
                 pf_wire_code_name(pf_wire_in_code(in)), err.message);
    assert_true(strlen(err.message) > 0);
    return err.offset;
}

static void assert_str(pf_wire_str s, const char *want) {
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.ptr, want, s.len);
}

static void assert_tensors(const pf_wire_tensor *got, const pf_wire_tensor *want, uint32_t n,
                           const uint8_t *msg) {
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(got[i].id, want[i].id);
        assert_int_equal(got[i].dtype, PF_WIRE_F32);
        assert_int_equal(got[i].count, want[i].count);
        if (want[i].count) {
            assert_memory_equal(got[i].data, want[i].data, want[i].count * 4);
            /* 4-byte aligned relative to the message start, and so in memory. */
            assert_int_equal(((const uint8_t *)got[i].data - msg) % 4, 0);
            assert_int_equal((uintptr_t)got[i].data % 4, 0);
        }
    }
}

/* A hand-built frame: header + payload written field by field. */
typedef struct frame {
    uint8_t b[8192];
    size_t len;
} frame;

static void f_begin(frame *f, uint16_t type) {
    memset(f, 0, sizeof *f);
    memcpy(f->b, "PSFW", 4);
    f->b[4] = 1;
    f->b[6] = (uint8_t)type;
    put32(f->b + 8, 42);
    f->len = PF_WIRE_HEADER_SIZE;
}

static void f_u8(frame *f, uint8_t v) {
    f->b[f->len++] = v;
}

static void f_u32(frame *f, uint32_t v) {
    put32(f->b + f->len, v);
    f->len += 4;
}

static void f_u64(frame *f, uint64_t v) {
    put64(f->b + f->len, v);
    f->len += 8;
}

static void f_bytes(frame *f, const void *p, size_t n) {
    memcpy(f->b + f->len, p, n);
    f->len += n;
}

/* Sets payload_len to what was written. */
static void f_end(frame *f) {
    put64(f->b + 16, f->len - PF_WIRE_HEADER_SIZE);
}

/* Copies a frame to an exactly sized heap block so ASan sees any read past its end. */
static uint8_t *heap_copy(const void *p, size_t n) {
    uint8_t *c = malloc(n ? n : 1);
    assert_non_null(c);
    if (n)
        memcpy(c, p, n);
    return c;
}

static long long fails_frame(pf_wire_in *in, const frame *f, pf_wire_code code) {
    uint8_t *c = heap_copy(f->b, f->len);
    long long off = decode_fails(in, c, f->len, code);
    free(c);
    return off;
}

/* Shared tensor data. */
static float d0[3] = {1.0f, -2.5f, 3.25f};
static float d1[7] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f};
static float d2[1] = {-0.0f};

/* --- layout ----------------------------------------------------------------------------- */

/* HELLO's bytes never change across versions (api/wire.md): a golden frame. */
static void test_hello_golden(void **state) {
    (void)state;
    static const uint8_t golden[] = {
        'P',  'S',  'F',  'W',  1,    0,    1,    0,    /* magic, version 1, type HELLO */
        0x78, 0x56, 0x34, 0x12, 0,    0,    0,    0,    /* request_id, flags */
        23,   0,    0,    0,    0,    0,    0,    0,    /* payload_len */
        1,    0,    0,    0,                            /* role chief, padding */
        5,    0,    0,    0,                            /* task_index */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* incarnation */
        3,    0,    0,    0,    'j',  'o',  'b'};       /* job name */
    pf_wire_out o;
    pf_wire_out_init(&o);
    pf_wire_hello h = {PF_WIRE_ROLE_CHIEF, 5, 0x0102030405060708ull, {"job", 3}};
    assert_int_equal(pf_wire_encode_hello(&o, 0x12345678, &h, NULL), PF_OK);
    assert_int_equal(pf_wire_out_len(&o), sizeof golden);
    pf_buf got;
    pf_buf_init(&got, 1024);
    assert_int_equal(pf_wire_out_gather(&o, &got), PF_OK);
    assert_int_equal(got.len, sizeof golden);
    assert_memory_equal(got.data, golden, sizeof golden);
    assert_int_equal(get32(got.data), PF_WIRE_MAGIC);
    pf_buf_deinit(&got);
    pf_wire_out_deinit(&o);
}

/* --- round trips ------------------------------------------------------------------------ */

static void test_round_trip(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_in in;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_wire_in_init(&in, 0, 0);
    pf_buf_init(&b, 1 << 20);
    pf_wire_msg m, d;
    const pf_wire_tensor ts[] = {{0, PF_WIRE_F32, 3, d0},
                                 {7, PF_WIRE_F32, 0, NULL},
                                 {4, PF_WIRE_F32, 7, d1},
                                 {9, PF_WIRE_F32, 1, d2}};
    const uint32_t ids[] = {4, 0, 9, 65535};

    m = (pf_wire_msg){.type = PF_WIRE_HELLO, .request_id = 1};
    m.u.hello = (pf_wire_hello){PF_WIRE_ROLE_EVALUATOR, 2, 77, {"fmnist-mlp", 10}};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 20 + 10);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_HELLO);
    assert_int_equal(d.request_id, 1);
    assert_int_equal(d.u.hello.role, PF_WIRE_ROLE_EVALUATOR);
    assert_int_equal(d.u.hello.task_index, 2);
    assert_int_equal(d.u.hello.incarnation, 77);
    assert_str(d.u.hello.job, "fmnist-mlp");

    m = (pf_wire_msg){.type = PF_WIRE_HELLO_ACK, .request_id = 2};
    m.u.hello_ack = (pf_wire_hello_ack){3, UINT64_MAX, 1ull << 40, 12};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 24);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_HELLO_ACK);
    assert_int_equal(d.u.hello_ack.ps_task, 3);
    assert_true(d.u.hello_ack.ps_incarnation == UINT64_MAX);
    assert_true(d.u.hello_ack.version == 1ull << 40);
    assert_int_equal(d.u.hello_ack.n_shards, 12);

    m = (pf_wire_msg){.type = PF_WIRE_PULL, .request_id = 3};
    m.u.pull = (pf_wire_pull){401, 4, ids};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 12 + 16);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.pull.min_version, 401);
    assert_int_equal(d.u.pull.n, 4);
    assert_memory_equal(d.u.pull.ids, ids, sizeof ids);
    assert_int_equal((uintptr_t)d.u.pull.ids % 4, 0);

    m = (pf_wire_msg){.type = PF_WIRE_PULL_REPLY, .request_id = 4};
    m.u.pull_reply = (pf_wire_pull_reply){402, PF_WIRE_PUSH_ACCEPTED, 4, ts};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 16 + 4 * 16 + (3 + 7 + 1) * 4);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_PULL_REPLY);
    assert_int_equal(d.u.pull_reply.version, 402);
    assert_int_equal(d.u.pull_reply.push_result, PF_WIRE_PUSH_ACCEPTED);
    assert_int_equal(d.u.pull_reply.n, 4);
    assert_tensors(d.u.pull_reply.tensors, ts, 4, b.data);

    m = (pf_wire_msg){.type = PF_WIRE_PUSH, .request_id = 5};
    m.u.push = (pf_wire_push){1, 2, 3, 4, 4, ts};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 32 + 4 * 16 + 11 * 4);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.push.task_index, 1);
    assert_int_equal(d.u.push.incarnation, 2);
    assert_int_equal(d.u.push.seq, 3);
    assert_int_equal(d.u.push.step, 4);
    assert_int_equal(d.u.push.n, 4);
    assert_tensors(d.u.push.tensors, ts, 4, b.data);

    m = (pf_wire_msg){.type = PF_WIRE_PUSH_ACK, .request_id = 6};
    m.u.push_ack = (pf_wire_push_ack){3, PF_WIRE_PUSH_DUPLICATE, 99};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 20);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.push_ack.seq, 3);
    assert_int_equal(d.u.push_ack.result, PF_WIRE_PUSH_DUPLICATE);
    assert_int_equal(d.u.push_ack.version, 99);

    m = (pf_wire_msg){.type = PF_WIRE_PUSH_PULL, .request_id = 7};
    m.u.push_pull = (pf_wire_push_pull){{8, 9, 10, 11, 3, ts + 1}, {12, 3, ids + 1}};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 32 + 3 * 16 + 8 * 4 + 12 + 3 * 4);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.push_pull.push.task_index, 8);
    assert_int_equal(d.u.push_pull.push.incarnation, 9);
    assert_int_equal(d.u.push_pull.push.seq, 10);
    assert_int_equal(d.u.push_pull.push.step, 11);
    assert_int_equal(d.u.push_pull.push.n, 3);
    assert_tensors(d.u.push_pull.push.tensors, ts + 1, 3, b.data);
    assert_int_equal(d.u.push_pull.pull.min_version, 12);
    assert_int_equal(d.u.push_pull.pull.n, 3);
    assert_memory_equal(d.u.push_pull.pull.ids, ids + 1, 3 * 4);

    m = (pf_wire_msg){.type = PF_WIRE_STATS, .request_id = 8};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_STATS);
    assert_int_equal(d.request_id, 8);

    const char *json = "{\"version\":402,\"stale\":[1,2],\"name\":\"\xc3\xa9\"}";
    m = (pf_wire_msg){.type = PF_WIRE_STATS_REPLY, .request_id = 9};
    m.u.stats_reply.json = (pf_wire_str){json, (uint32_t)strlen(json)};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_str(d.u.stats_reply.json, json);

    m = (pf_wire_msg){.type = PF_WIRE_CHECKPOINT, .request_id = 10};
    m.u.checkpoint = (pf_wire_checkpoint){2000, 1};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 12);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.checkpoint.step, 2000);
    assert_int_equal(d.u.checkpoint.final, 1);

    m = (pf_wire_msg){.type = PF_WIRE_CHECKPOINT_ACK, .request_id = 11};
    m.u.checkpoint_ack = (pf_wire_checkpoint_ack){500, PF_WIRE_INTERNAL, {"ck/step-500", 11}};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.checkpoint_ack.step, 500);
    assert_int_equal(d.u.checkpoint_ack.status, PF_WIRE_INTERNAL);
    assert_str(d.u.checkpoint_ack.path, "ck/step-500");

    m = (pf_wire_msg){.type = PF_WIRE_ERROR, .request_id = 12};
    m.u.error = (pf_wire_error){PF_WIRE_UNKNOWN_SHARD, {"shard 99", 8}};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.request_id, 12);
    assert_int_equal(d.u.error.code, PF_WIRE_UNKNOWN_SHARD);
    assert_str(d.u.error.message, "shard 99");

    /* Limits are inclusive: a 63-byte job name, a 1024-byte error, n == max_tensors. */
    char name[PF_WIRE_MAX_JOB_NAME], text[PF_WIRE_MAX_ERROR_MSG + 1];
    memset(name, 'n', sizeof name);
    memset(text, 'e', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    m = (pf_wire_msg){.type = PF_WIRE_HELLO};
    m.u.hello.job = (pf_wire_str){name, sizeof name};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.hello.job.len, PF_WIRE_MAX_JOB_NAME);
    assert_int_equal(pf_wire_encode_error(&o, 1, PF_WIRE_INTERNAL, text, NULL), PF_OK);
    pf_buf_reset(&b);
    assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.error.message.len, PF_WIRE_MAX_ERROR_MSG);
    pf_wire_in small;
    pf_wire_in_init(&small, 0, 4);
    m = (pf_wire_msg){.type = PF_WIRE_PUSH};
    m.u.push = (pf_wire_push){.n = 4, .tensors = ts};
    encode_into(&o, &m, &b);
    decode_ok(&small, &b, &d);
    pf_wire_in_deinit(&small);

    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    pf_wire_out_deinit(&o);
}

/* --- gathering -------------------------------------------------------------------------- */

static void test_chunked_gather(void **state) {
    (void)state;
    enum { N = 9 };
    static float big[3001], mid[1025];
    for (size_t i = 0; i < 3001; i++)
        big[i] = (float)i * 0.25f;
    for (size_t i = 0; i < 1025; i++)
        mid[i] = -(float)i;
    pf_wire_tensor ts[N] = {
        {0, PF_WIRE_F32, 3001, big}, {1, PF_WIRE_F32, 0, NULL}, {2, PF_WIRE_F32, 1, d2},
        {3, PF_WIRE_F32, 1025, mid}, {4, PF_WIRE_F32, 3, d0},   {5, PF_WIRE_F32, 0, NULL},
        {6, PF_WIRE_F32, 7, d1},     {7, PF_WIRE_F32, 1, d2},   {8, PF_WIRE_F32, 2000, big + 3}};
    uint32_t ids[5] = {1, 2, 3, 4, 5};
    pf_wire_push_pull pp = {{1, 2, 3, 4, N, ts}, {5, 5, ids}};
    pf_wire_out o;
    pf_wire_out_init(&o);
    assert_int_equal(pf_wire_encode_push_pull(&o, 9, &pp, NULL), PF_OK);
    size_t total = pf_wire_out_len(&o);
    pf_buf whole;
    pf_buf_init(&whole, 1 << 20);
    assert_int_equal(pf_wire_out_gather(&o, &whole), PF_OK);
    assert_int_equal(whole.len, total);

    /* As pieces for a gathering write: none empty, together the whole message; a short
     * array still reports how many are needed. */
    struct iovec parts[2 * N + 1];
    size_t n_parts = pf_wire_out_parts(&o, parts, 2 * N + 1);
    assert_true(n_parts >= 2 && n_parts <= 2 * N + 1);
    assert_int_equal(pf_wire_out_parts(&o, parts, 1), n_parts);
    pf_wire_out_parts(&o, parts, n_parts);
    size_t at = 0;
    for (size_t i = 0; i < n_parts; i++) {
        assert_true(parts[i].iov_len > 0);
        assert_memory_equal(parts[i].iov_base, whole.data + at, parts[i].iov_len);
        at += parts[i].iov_len;
    }
    assert_int_equal(at, total);

    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_msg d;
    decode_ok(&in, &whole, &d);
    assert_tensors(d.u.push_pull.push.tensors, ts, N, whole.data);

    pf_wire_in_deinit(&in);
    pf_buf_deinit(&whole);
    pf_wire_out_deinit(&o);
}

/* Encoding references tensor data: changing it after encoding changes what is sent. */
static void test_zero_copy(void **state) {
    (void)state;
    float v[4] = {1, 2, 3, 4};
    pf_wire_tensor t[2] = {{3, PF_WIRE_F32, 4, v}, {8, PF_WIRE_F32, 0, NULL}};
    pf_wire_out o;
    pf_wire_out_init(&o);
    assert_int_equal(pf_wire_encode_pull_reply(&o, 1, &(pf_wire_pull_reply){5, 0, 2, t}, NULL),
                     PF_OK);
    assert_int_equal(o.n_seg, 1); /* an empty tensor needs no segment */
    assert_ptr_equal(o.seg[0].data, v);
    assert_int_equal(o.head.len, 24 + 16 + 2 * 16); /* no tensor bytes in the head */
    v[2] = 42.0f;
    pf_buf buf;
    pf_buf_init(&buf, 128);
    assert_int_equal(pf_wire_out_gather(&o, &buf), PF_OK);
    assert_int_equal(buf.len, 24 + 16 + 16 + 16 + 16);
    float got;
    memcpy(&got, buf.data + 56 + 8, 4);
    assert_true(got == 42.0f);
    pf_buf_deinit(&buf);
    pf_wire_out_deinit(&o);
}

/* A warm encoder (and decoder) allocates nothing. */
static void test_no_alloc_when_warm(void **state) {
    (void)state;
    enum { N = 300 };
    static pf_wire_tensor ts[N];
    static uint32_t ids[N];
    for (uint32_t i = 0; i < N; i++) {
        ts[i] = (pf_wire_tensor){i, PF_WIRE_F32, 1 + i % 7, d1};
        ids[i] = i;
    }
    use_counting(-1);
    pf_wire_out o;
    pf_wire_in in;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_wire_in_init(&in, 0, 0);
    pf_buf_init(&b, 1 << 20);
    pf_wire_push_pull pp = {{1, 2, 3, 4, N, ts}, {5, N, ids}};
    assert_int_equal(pf_wire_encode_push_pull(&o, 1, &pp, NULL), PF_OK);
    assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
    pf_wire_msg d;
    decode_ok(&in, &b, &d);
    long warm = alloc_count;
    assert_true(warm > 0);
    for (int round = 0; round < 3; round++) {
        pp.push.seq++;
        assert_int_equal(pf_wire_encode_push_pull(&o, 2, &pp, NULL), PF_OK);
        assert_int_equal(pf_wire_encode_push(&o, 3, &pp.push, NULL), PF_OK);
        assert_int_equal(
            pf_wire_encode_pull_reply(&o, 4, &(pf_wire_pull_reply){1, 0, 10, ts}, NULL), PF_OK);
        assert_int_equal(pf_wire_encode_error(&o, 5, PF_WIRE_NOT_READY, "restoring", NULL), PF_OK);
        assert_int_equal(pf_wire_encode_push_pull(&o, 2, &pp, NULL), PF_OK);
        pf_buf_reset(&b);
        assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
        decode_ok(&in, &b, &d);
    }
    assert_int_equal(alloc_count, warm);
    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    pf_wire_out_deinit(&o);
    use_libc();
}

/* Every allocation the encoder makes may fail: it reports PF_ERR_NOMEM, holds no message,
 * and works again once memory is back. */
static void test_encoder_alloc_failure(void **state) {
    (void)state;
    enum { N = 200 };
    static pf_wire_tensor ts[N];
    for (uint32_t i = 0; i < N; i++)
        ts[i] = (pf_wire_tensor){i, PF_WIRE_F32, 3, d0};
    char path[600];
    memset(path, 'p', sizeof path - 1);
    path[sizeof path - 1] = '\0';
    int failures = 0;
    for (long k = 0; k < 12; k++) {
        use_counting(k);
        pf_wire_out o;
        pf_wire_out_init(&o);
        for (uint32_t n = 1; n <= N; n = n * 3 + 1) {
            pf_error err;
            pf_wire_push p = {1, 1, n, 0, n, ts};
            pf_status st = pf_wire_encode_push(&o, n, &p, &err);
            if (st != PF_OK) {
                assert_int_equal(st, PF_ERR_NOMEM);
                assert_int_equal(pf_wire_out_len(&o), 0);
                assert_true(strlen(err.message) > 0);
                failures++;
            }
            pf_wire_checkpoint_ack ca = {1, 0, {path, (uint32_t)strlen(path)}};
            st = pf_wire_encode_checkpoint_ack(&o, n, &ca, NULL);
            assert_true(st == PF_OK || st == PF_ERR_NOMEM);
            st = pf_wire_encode_error(&o, n, PF_WIRE_INTERNAL, path, NULL);
            assert_true(st == PF_OK || st == PF_ERR_NOMEM);
        }
        use_libc();
        pf_wire_push p = {1, 1, 1, 0, N, ts};
        assert_int_equal(pf_wire_encode_push(&o, 1, &p, NULL), PF_OK);
        pf_buf b;
        pf_buf_init(&b, 1 << 20);
        assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
        pf_wire_in in;
        pf_wire_in_init(&in, 0, 0);
        pf_wire_msg d;
        decode_ok(&in, &b, &d);
        assert_int_equal(d.u.push.n, N);
        pf_wire_in_deinit(&in);
        pf_buf_deinit(&b);
        pf_wire_out_deinit(&o);
    }
    assert_true(failures > 0);
}

static void test_decoder_alloc_failure(void **state) {
    (void)state;
    pf_wire_tensor ts[2] = {{0, PF_WIRE_F32, 3, d0}, {1, PF_WIRE_F32, 7, d1}};
    pf_wire_out o;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_buf_init(&b, 1 << 20);
    assert_int_equal(pf_wire_encode_push(&o, 1, &(pf_wire_push){.n = 2, .tensors = ts}, NULL),
                     PF_OK);
    assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    use_counting(0);
    pf_wire_msg d;
    pf_error err;
    assert_int_equal(pf_wire_decode(&in, b.data, b.len, &d, &err), PF_ERR_NOMEM);
    assert_int_equal(pf_wire_in_code(&in), PF_WIRE_INTERNAL);
    use_libc();
    decode_ok(&in, &b, &d);
    pf_wire_in_deinit(&in);
    pf_buf_deinit(&b);
    pf_wire_out_deinit(&o);
}

/* --- invalid frames --------------------------------------------------------------------- */

static void test_invalid_header(void **state) {
    (void)state;
    pf_wire_in in;
    pf_wire_in_init(&in, 1000, 0);
    assert_int_equal(in.max_payload, 1000);
    assert_int_equal(in.max_tensors, PF_WIRE_MAX_TENSORS);
    frame f;
    pf_wire_header h;
    pf_error err;

    f_begin(&f, PF_WIRE_STATS);
    f_end(&f);
    f.b[0] = 'X';
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_MAGIC), 0);
    assert_int_equal(pf_wire_decode_header(&in, f.b, f.len, &h, &err), PF_ERR_FORMAT);
    assert_int_equal(h.request_id, 0); /* not our frame: nothing to echo */
    assert_int_equal(h.type, 0);

    f_begin(&f, PF_WIRE_HELLO);
    f_end(&f);
    f.b[4] = 2;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VERSION), 4);
    /* The raw header is still there, so the ERROR reply can echo the request id. */
    assert_int_equal(pf_wire_decode_header(&in, f.b, f.len, &h, &err), PF_ERR_UNSUPPORTED);
    assert_int_equal(pf_wire_in_code(&in), PF_WIRE_BAD_VERSION);
    assert_int_equal(h.request_id, 42);
    assert_int_equal(h.version, 2);
    assert_int_equal(h.type, PF_WIRE_HELLO);
    assert_non_null(strstr(err.message, "version 2"));
    pf_wire_msg m;
    uint8_t *c = heap_copy(f.b, f.len);
    assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_UNSUPPORTED);
    assert_int_equal(m.request_id, 42);
    free(c);

    f_begin(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_TYPE), 6);
    f_begin(&f, PF_WIRE_ERROR + 1);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_TYPE), 6);
    f.b[6] = PF_WIRE_STATS;
    f.b[7] = 1; /* type 0x108 */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_TYPE), 6);

    f_begin(&f, PF_WIRE_STATS);
    f_end(&f);
    f.b[15] = 0x80;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_FLAGS), 12);

    f_begin(&f, PF_WIRE_STATS);
    f_end(&f);
    f.len = 23;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 23);
    f.len = 0;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 0);

    /* payload_len over the limit is refused from the header alone, before any buffering. */
    f_begin(&f, PF_WIRE_PUSH);
    put64(f.b + 16, 1001);
    f.len = 24;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 16);
    assert_int_equal(pf_wire_decode_header(&in, f.b, f.len, &h, &err), PF_ERR_RANGE);
    put64(f.b + 16, UINT64_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 16);
    put64(f.b + 16, 1000); /* at the limit: the header is fine, the body is missing */
    assert_int_equal(pf_wire_decode_header(&in, f.b, f.len, &h, &err), PF_OK);
    assert_int_equal(h.payload_len, 1000);
    assert_int_equal(pf_wire_in_code(&in), PF_WIRE_OK);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 24);

    /* The receive buffer must be 4-byte aligned. */
    f_begin(&f, PF_WIRE_STATS);
    f_end(&f);
    uint8_t *block = malloc(64);
    assert_non_null(block);
    memcpy(block + 1, f.b, f.len);
    assert_int_equal(pf_wire_decode(&in, block + 1, f.len, &m, &err), PF_ERR_INVALID);
    assert_int_equal(pf_wire_in_code(&in), PF_WIRE_INTERNAL);
    free(block);

    pf_wire_in big;
    pf_wire_in_init(&big, UINT64_MAX, UINT32_MAX); /* clamped to the compiled-in maxima */
    assert_true(big.max_payload == PF_WIRE_MAX_PAYLOAD);
    assert_int_equal(big.max_tensors, PF_WIRE_MAX_TENSORS);
    pf_wire_in_deinit(&big);
    pf_wire_in_deinit(&in);
}

/* A PUSH of tensors {0: 3 floats, 1: 7 floats}: tensor 0's header at 56 (count at 64),
 * data at 72; tensor 1's header at 84 (dtype at 88, count at 92), data at 100; 128 bytes. */
static void push_frame(frame *f) {
    f_begin(f, PF_WIRE_PUSH);
    f_u32(f, 1);
    f_u64(f, 2);
    f_u64(f, 3);
    f_u64(f, 4);
    f_u32(f, 2);
    f_u32(f, 0);
    f_u32(f, PF_WIRE_F32);
    f_u64(f, 3);
    f_bytes(f, d0, sizeof d0);
    f_u32(f, 1);
    f_u32(f, PF_WIRE_F32);
    f_u64(f, 7);
    f_bytes(f, d1, sizeof d1);
    f_end(f);
    assert_int_equal(f->len, 128);
}

static void hello_frame(frame *f, uint8_t role, const void *job, uint32_t len) {
    f_begin(f, PF_WIRE_HELLO);
    f_u8(f, role);
    f_u8(f, 0);
    f_u8(f, 0);
    f_u8(f, 0);
    f_u32(f, 1);
    f_u64(f, 1);
    f_u32(f, len);
    f_bytes(f, job, len);
    f_end(f);
}

static void test_invalid_payload(void **state) {
    (void)state;
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    frame f;

    push_frame(&f);
    {
        pf_buf b = {0};
        pf_buf_init(&b, 1 << 20);
        assert_int_equal(pf_buf_append(&b, f.b, f.len), PF_OK);
        pf_wire_msg m;
        decode_ok(&in, &b, &m); /* the unmodified frame is fine */
        pf_buf_deinit(&b);
    }

    /* Truncated payload: fewer bytes than payload_len. */
    f.len -= 5;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 123);
    /* Bytes after the declared payload. */
    push_frame(&f);
    f.len += 1;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 128);
    /* n says 3 tensors, 2 are present: the third header would start at the end. */
    push_frame(&f);
    put32(f.b + 52, 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 128);
    /* A count larger than what remains, and one whose byte size overflows 64 bits. */
    push_frame(&f);
    put64(f.b + 92, 8);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 92);
    put64(f.b + 92, 1ull << 62);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 92);
    put64(f.b + 92, UINT64_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 92);
    /* A smaller count leaves trailing bytes inside the payload. */
    put64(f.b + 92, 6);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 124);
    /* Wrong dtype. */
    push_frame(&f);
    put32(f.b + 88, 2);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_DTYPE), 88);
    /* Payload shorter than the fixed fields. */
    push_frame(&f);
    put64(f.b + 16, 20);
    f.len = 44;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 24);

    /* n over the caller's limit, and n far over any limit. */
    pf_wire_in two;
    pf_wire_in_init(&two, 0, 1);
    push_frame(&f);
    assert_int_equal(fails_frame(&two, &f, PF_WIRE_TOO_LARGE), 52);
    put32(f.b + 52, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 52);
    put32(f.b + 52, PF_WIRE_MAX_TENSORS + 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 52);
    /* n within the limit but more tensors than bytes: refused before sizing anything. */
    put32(f.b + 52, 1000);
    use_counting(0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 52);
    use_libc();

    /* PUSH_PULL: the pull part's n_pull over the limit, and ids cut short. */
    f_begin(&f, PF_WIRE_PUSH_PULL);
    f_u32(&f, 1);
    f_u64(&f, 1);
    f_u64(&f, 1);
    f_u64(&f, 1);
    f_u32(&f, 0);
    f_u64(&f, 9);
    f_u32(&f, 2);
    f_u32(&f, 5);
    f_u32(&f, 6);
    f_end(&f);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, NULL), PF_OK);
        assert_int_equal(m.u.push_pull.pull.n, 2);
        free(c);
    }
    assert_int_equal(fails_frame(&two, &f, PF_WIRE_TOO_LARGE), 64);
    put32(f.b + 64, 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 64);
    pf_wire_in_deinit(&two);

    /* Fixed-size messages must be exactly their size. */
    f_begin(&f, PF_WIRE_PUSH_ACK);
    f_u64(&f, 1);
    f_u32(&f, 0);
    f_u64(&f, 1);
    f_u32(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 44);
    put32(f.b + 32, 4); /* result out of range is found first */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 32);
    f_begin(&f, PF_WIRE_HELLO_ACK);
    f_u32(&f, 0);
    f_u64(&f, 0);
    f_u64(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 24);
    f_begin(&f, PF_WIRE_STATS);
    f_u32(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 24);

    /* Strings: too long, longer than the payload, not UTF-8, NUL. */
    char job[PF_WIRE_MAX_JOB_NAME + 1];
    memset(job, 'j', sizeof job);
    hello_frame(&f, 0, job, sizeof job);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 40);
    hello_frame(&f, 0, job, 10);
    put32(f.b + 40, 11);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 44);
    hello_frame(&f, 0, "ab\xff", 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 46);
    hello_frame(&f, 0, "a\xc3", 2); /* cut-off sequence */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 45);
    hello_frame(&f, 0, "\xe0\x80\xaf", 3); /* overlong '/' */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 44);
    hello_frame(&f, 0, "\xf0\x80\x80\xaf", 4); /* overlong '/' */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 44);
    hello_frame(&f, 0, "\xed\xa0\x80", 3); /* surrogate */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 44);
    hello_frame(&f, 0, "\xf4\x90\x80\x80", 4); /* above U+10FFFF */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 44);
    hello_frame(&f, 0, "a\0b", 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 45);
    hello_frame(&f, 0, "\xf0\x9f\x98\x80", 4); /* U+1F600 is fine */
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, NULL), PF_OK);
        free(c);
    }
    char text[PF_WIRE_MAX_ERROR_MSG + 1];
    memset(text, 'e', sizeof text);
    f_begin(&f, PF_WIRE_ERROR);
    f_u32(&f, PF_WIRE_INTERNAL);
    f_u32(&f, sizeof text);
    f_bytes(&f, text, sizeof text);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 28);
    char path[PF_WIRE_MAX_PATH + 1];
    memset(path, '/', sizeof path);
    f_begin(&f, PF_WIRE_CHECKPOINT_ACK);
    f_u64(&f, 1);
    f_u32(&f, 0);
    f_u32(&f, sizeof path);
    f_bytes(&f, path, sizeof path);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 36);

    /* Enum values and padding. */
    hello_frame(&f, 4, "j", 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 24);
    for (int i = 25; i < 28; i++) {
        hello_frame(&f, 0, "j", 1);
        f.b[i] = 1;
        assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 25);
    }
    f_begin(&f, PF_WIRE_CHECKPOINT);
    f_u64(&f, 5);
    f_u32(&f, 2);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 32);
    f_begin(&f, PF_WIRE_PULL_REPLY);
    f_u64(&f, 5);
    f_u32(&f, 4);
    f_u32(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 32);
    f_begin(&f, PF_WIRE_ERROR);
    f_u32(&f, 0);
    f_u32(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 24);
    /* An ERROR with a code this version does not know is still readable. */
    put32(f.b + 24, 9999);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, NULL), PF_OK);
        assert_int_equal(m.u.error.code, 9999);
        free(c);
    }

    /* Messages name the problem. */
    push_frame(&f);
    put32(f.b + 88, 2);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        pf_error err;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.message, "PUSH"));
        assert_non_null(strstr(err.message, "dtype 2"));
        assert_int_equal(m.type, PF_WIRE_PUSH);
        assert_int_equal(m.request_id, 42);
        free(c);
    }
    pf_wire_in_deinit(&in);
}

/* --- encoder refusals ------------------------------------------------------------------- */

static void test_encode_rejects(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_out_init(&o);
    pf_error err;
    float one = 1;
    pf_wire_tensor good = {0, PF_WIRE_F32, 1, &one};
#define REJECT(call, status)                                                                       \
    do {                                                                                           \
        assert_int_equal(pf_wire_encode_stats(&o, 1, NULL), PF_OK);                                \
        assert_int_equal((call), (status));                                                        \
        assert_int_equal(pf_wire_out_len(&o), 0);                                                  \
        assert_true(strlen(err.message) > 0);                                                      \
    } while (0)

    REJECT(pf_wire_encode_hello(&o, 1, &(pf_wire_hello){4, 0, 0, {"j", 1}}, &err), PF_ERR_INVALID);
    char job[PF_WIRE_MAX_JOB_NAME + 1];
    memset(job, 'j', sizeof job);
    REJECT(pf_wire_encode_hello(&o, 1, &(pf_wire_hello){0, 0, 0, {job, sizeof job}}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_hello(&o, 1, &(pf_wire_hello){0, 0, 0, {"a\xff", 2}}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_hello(&o, 1, &(pf_wire_hello){0, 0, 0, {NULL, 2}}, &err), PF_ERR_INVALID);
    pf_wire_tensor t = good;
    t.dtype = 0;
    REJECT(pf_wire_encode_push(&o, 1, &(pf_wire_push){.n = 1, .tensors = &t}, &err),
           PF_ERR_INVALID);
    t = good;
    t.data = NULL;
    REJECT(pf_wire_encode_push(&o, 1, &(pf_wire_push){.n = 1, .tensors = &t}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_push(&o, 1, &(pf_wire_push){.n = 1, .tensors = NULL}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_push(
               &o, 1, &(pf_wire_push){.n = PF_WIRE_MAX_TENSORS + 1, .tensors = &good}, &err),
           PF_ERR_INVALID);
    /* Sizes over the payload limit are refused before anything is read or written. */
    t = good;
    t.count = PF_WIRE_MAX_PAYLOAD / 4 + 1;
    REJECT(pf_wire_encode_pull_reply(&o, 1, &(pf_wire_pull_reply){0, 0, 1, &t}, &err),
           PF_ERR_RANGE);
    pf_wire_tensor halves[2] = {{0, PF_WIRE_F32, PF_WIRE_MAX_PAYLOAD / 8, &one},
                                {1, PF_WIRE_F32, PF_WIRE_MAX_PAYLOAD / 8, &one}};
    REJECT(pf_wire_encode_pull_reply(&o, 1, &(pf_wire_pull_reply){0, 0, 2, halves}, &err),
           PF_ERR_RANGE); /* data fits exactly, the head does not */
    REJECT(pf_wire_encode_pull_reply(&o, 1, &(pf_wire_pull_reply){0, 4, 0, NULL}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_pull(&o, 1, &(pf_wire_pull){0, 2, NULL}, &err), PF_ERR_INVALID);
    REJECT(pf_wire_encode_pull(&o, 1, &(pf_wire_pull){0, PF_WIRE_MAX_TENSORS + 1, &good.id}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_push_pull(
               &o, 1, &(pf_wire_push_pull){{.n = 1, .tensors = &good}, {0, 1, NULL}}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_push_ack(&o, 1, &(pf_wire_push_ack){1, 4, 1}, &err), PF_ERR_INVALID);
    REJECT(pf_wire_encode_checkpoint(&o, 1, &(pf_wire_checkpoint){1, 2}, &err), PF_ERR_INVALID);
    static char path[PF_WIRE_MAX_PATH + 1];
    memset(path, 'p', sizeof path);
    REJECT(pf_wire_encode_checkpoint_ack(
               &o, 1, &(pf_wire_checkpoint_ack){1, 0, {path, sizeof path}}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_stats_reply(&o, 1, &(pf_wire_stats_reply){{"{\"a\":\0}", 7}}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_error(&o, 1, PF_WIRE_OK, "no", &err), PF_ERR_INVALID);
    REJECT(pf_wire_encode(&o, &(pf_wire_msg){.type = 99}, &err), PF_ERR_INVALID);
    REJECT(pf_wire_encode(&o, &(pf_wire_msg){.type = 0}, &err), PF_ERR_INVALID);
#undef REJECT
    /* err may be NULL. */
    assert_int_equal(pf_wire_encode_push_ack(&o, 1, &(pf_wire_push_ack){1, 9, 1}, NULL),
                     PF_ERR_INVALID);
    pf_wire_out_deinit(&o);
}

/* ERROR text is cut at a character boundary and cleaned, never refused. */
static void test_error_text(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_in in;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_wire_in_init(&in, 0, 0);
    pf_buf_init(&b, 1 << 20);
    pf_wire_msg d;

    static char text[3000];
    memset(text, 'a', 2000);
    text[2000] = '\0';
    assert_int_equal(pf_wire_encode_error(&o, 3, PF_WIRE_INTERNAL, text, NULL), PF_OK);
    assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.error.message.len, PF_WIRE_MAX_ERROR_MSG);

    /* 1023 ASCII bytes then a 2-byte character: the character does not fit. */
    memset(text, 'a', 1023);
    memcpy(text + 1023, "\xc3\xa9zz", 5);
    assert_int_equal(pf_wire_encode_error(&o, 3, PF_WIRE_INTERNAL, text, NULL), PF_OK);
    pf_buf_reset(&b);
    assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.error.message.len, 1023);

    assert_int_equal(
        pf_wire_encode_error(&o, 3, PF_WIRE_BAD_VALUE, "bad \xff\xc3 byte \xc3\xa9", NULL), PF_OK);
    pf_buf_reset(&b);
    assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
    decode_ok(&in, &b, &d);
    assert_str(d.u.error.message, "bad ?? byte \xc3\xa9");

    /* Through pf_wire_encode, with an embedded NUL and no text at all. */
    pf_wire_msg m = {.type = PF_WIRE_ERROR, .request_id = 4};
    m.u.error = (pf_wire_error){PF_WIRE_NOT_READY, {"a\0b", 3}};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_str(d.u.error.message, "a?b");
    assert_int_equal(pf_wire_encode_error(&o, 5, PF_WIRE_NOT_READY, NULL, NULL), PF_OK);
    assert_int_equal(pf_wire_out_len(&o), 24 + 8);

    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    pf_wire_out_deinit(&o);
}

/* --- files ------------------------------------------------------------------------------ */

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the .bin files in dir; the caller frees each. */
static size_t list_files(const char *dir, char **names) {
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("cannot open %s", dir);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".bin") == 0) {
            assert_true(n < MAX_FILES);
            names[n] = malloc(len + 1);
            assert_non_null(names[n]);
            memcpy(names[n++], e->d_name, len + 1);
        }
    }
    closedir(d);
    qsort(names, n, sizeof *names, compare_names);
    return n;
}

/* Reads a file into an exactly sized (malloc-aligned) block. */
static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0 && n < 65536);
    rewind(f);
    uint8_t *p = malloc(n ? (size_t)n : 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void test_valid_files(void **state) {
    (void)state;
    char *names[MAX_FILES];
    size_t n = list_files(WIRE_DIR "/valid", names);
    assert_true(n >= 12);
    unsigned seen = 0;
    pf_wire_in in;
    pf_wire_out o;
    pf_buf b;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_out_init(&o);
    pf_buf_init(&b, 1 << 20);
    for (size_t i = 0; i < n; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/valid/%s", WIRE_DIR, names[i]);
        size_t len;
        uint8_t *data = read_file(path, &len);
        pf_wire_msg m;
        pf_error err;
        if (pf_wire_decode(&in, data, len, &m, &err) != PF_OK)
            fail_msg("%s: %s (offset %lld)", names[i], err.message, err.offset);
        seen |= 1u << m.type;
        /* Canonical: re-encoding gives the same bytes. */
        if (pf_wire_encode(&o, &m, &err) != PF_OK)
            fail_msg("%s: re-encode: %s", names[i], err.message);
        pf_buf_reset(&b);
        assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
        assert_int_equal(b.len, len);
        assert_memory_equal(b.data, data, len);
        free(data);
        free(names[i]);
    }
    /* Every message type has a valid example. */
    for (unsigned t = PF_WIRE_HELLO; t <= PF_WIRE_ERROR; t++)
        if (!(seen & 1u << t))
            fail_msg("no valid example of %s", pf_wire_type_name(t));
    pf_buf_deinit(&b);
    pf_wire_out_deinit(&o);
    pf_wire_in_deinit(&in);
}

static void test_invalid_files(void **state) {
    (void)state;
    char *names[MAX_FILES];
    size_t n = list_files(WIRE_DIR "/invalid", names);
    assert_true(n >= 20);
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    for (size_t i = 0; i < n; i++) {
        char path[512], want[64];
        snprintf(path, sizeof path, "%s/invalid/%s", WIRE_DIR, names[i]);
        const char *dash = strchr(names[i], '-');
        if (!dash || (size_t)(dash - names[i]) >= sizeof want)
            fail_msg("%s: name must be CODE-what.bin", names[i]);
        size_t k = (size_t)(dash - names[i]);
        for (size_t j = 0; j < k; j++)
            want[j] = (char)toupper((unsigned char)names[i][j]);
        want[k] = '\0';
        size_t len;
        uint8_t *data = read_file(path, &len);
        pf_wire_msg m;
        pf_error err;
        if (pf_wire_decode(&in, data, len, &m, &err) == PF_OK)
            fail_msg("%s: decoded, expected %s", names[i], want);
        if (strcmp(pf_wire_code_name(pf_wire_in_code(&in)), want) != 0)
            fail_msg("%s: got %s (%s), expected %s", names[i],
                     pf_wire_code_name(pf_wire_in_code(&in)), err.message, want);
        assert_true(strlen(err.message) > 0);
        assert_true(err.offset >= 0 && (size_t)err.offset <= len);
        free(data);
        free(names[i]);
    }
    pf_wire_in_deinit(&in);
}

/* --- names ------------------------------------------------------------------------------ */

static void test_names(void **state) {
    (void)state;
    assert_string_equal(pf_wire_type_name(PF_WIRE_PUSH_PULL), "PUSH_PULL");
    assert_string_equal(pf_wire_type_name(0), "UNKNOWN");
    assert_string_equal(pf_wire_type_name(13), "UNKNOWN");
    assert_string_equal(pf_wire_code_name(PF_WIRE_STALE_INCARNATION), "STALE_INCARNATION");
    assert_string_equal(pf_wire_code_name(PF_WIRE_INTERNAL), "INTERNAL");
    assert_string_equal(pf_wire_code_name(1000), "UNKNOWN");
    /* Codes are distinct and named. */
    for (uint32_t c = PF_WIRE_BAD_MAGIC; c <= PF_WIRE_INTERNAL; c++)
        for (uint32_t d = c + 1; d <= PF_WIRE_INTERNAL; d++)
            assert_string_not_equal(pf_wire_code_name(c), pf_wire_code_name(d));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_golden),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_chunked_gather),
        cmocka_unit_test(test_zero_copy),
        cmocka_unit_test(test_no_alloc_when_warm),
        cmocka_unit_test(test_encoder_alloc_failure),
        cmocka_unit_test(test_decoder_alloc_failure),
        cmocka_unit_test(test_invalid_header),
        cmocka_unit_test(test_invalid_payload),
        cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_error_text),
        cmocka_unit_test(test_valid_files),
        cmocka_unit_test(test_invalid_files),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
