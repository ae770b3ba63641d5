/* test_wire.c - the data-plane codec: round trips of every message type, the frozen HELLO
 * layout, the LEASE and LEASE_REPLY layouts (field by field and golden frames), gathering (the
 * pieces a transport sends), zero-copy and no-allocation-when-warm encoding, failing allocators,
 * and the type and code names. Malformed frames are test_wire_invalid.c's, receiving in place
 * test_wire_placed.c's; pf_buf has its own test (tests/base/test_buf.c).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/buf.h"
#include "psflow/mem.h"
#include "psflow/wire.h"
#include "tests/support/counting_alloc.h"
#include "tests/support/data_files.h"
#include "tests/support/wire_frames.h"

#define WIRE_VALID PSFLOW_TEST_DATA "/wire/valid"

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

/* LEASE {epoch, n_splits, want, done[n]} built field by field (request_id 42). */
static void lease_frame(frame *f, uint64_t epoch, uint32_t n_splits, uint32_t want,
                        const uint32_t *done, uint32_t n) {
    f_begin(f, PF_WIRE_LEASE);
    f_u64(f, epoch);
    f_u32(f, n_splits);
    f_u32(f, want);
    f_u32(f, n);
    for (uint32_t i = 0; i < n; i++)
        f_u32(f, done[i]);
    f_end(f);
}

static void lease_reply_frame(frame *f, const pf_wire_lease_reply *r) {
    f_begin(f, PF_WIRE_LEASE_REPLY);
    f_u32(f, r->state);
    f_u32(f, r->split);
    f_u64(f, r->epoch);
    f_u32(f, r->accepted);
    f_u32(f, r->refused);
    f_end(f);
}

/* The message in o is exactly f's bytes, as one head piece (no tensor data), and so is the
 * golden file `name` under tests/data/wire/valid/. */
static void assert_frame(const pf_wire_out *o, const frame *f, const char *name) {
    pf_buf b;
    pf_buf_init(&b, 1 << 16);
    assert_int_equal(pf_wire_out_gather(o, &b), PF_OK);
    assert_int_equal(b.len, f->len);
    assert_memory_equal(b.data, f->b, f->len);
    assert_int_equal(o->n_seg, 0);
    pf_buf_deinit(&b);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", WIRE_VALID, name);
    size_t len;
    char *data = data_read(path, 65535, &len);
    assert_int_equal(len, f->len);
    assert_memory_equal(data, f->b, f->len);
    pf_free(data);
}

/* LEASE: u64 epoch @24, u32 n_splits @32, u32 want @36, u32 n_done @40, u32 done[n_done]
 * @44; LEASE_REPLY: u32 state @24, u32 split @28, u64 epoch @32, u32 accepted @40, u32
 * refused @44 (api/wire.md). */
static void test_lease_layout(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_out_init(&o);
    frame f;
    const uint32_t done[] = {7, 2};

    lease_frame(&f, 3, 10, 1, done, 2);
    assert_int_equal(f.len, 24 + 20 + 8);
    assert_int_equal(pf_wire_encode_lease(&o, 42, &(pf_wire_lease){3, 10, 1, 2, done}, NULL),
                     PF_OK);
    assert_frame(&o, &f, "lease.bin");

    lease_frame(&f, 0, 1, 1, NULL, 0); /* a task's first ask: nothing done yet */
    assert_int_equal(f.len, 24 + 20);
    assert_int_equal(pf_wire_encode_lease(&o, 42, &(pf_wire_lease){0, 1, 1, 0, NULL}, NULL), PF_OK);
    assert_frame(&o, &f, "lease_ask.bin");

    pf_wire_lease_reply r = {PF_WIRE_LEASE_GRANTED, 5, 3, 2, 0};
    lease_reply_frame(&f, &r);
    assert_int_equal(f.len, 24 + 24);
    assert_int_equal(pf_wire_encode_lease_reply(&o, 42, &r, NULL), PF_OK);
    assert_frame(&o, &f, "lease_reply.bin");

    r = (pf_wire_lease_reply){PF_WIRE_LEASE_END, 0, 4, 1, 1};
    lease_reply_frame(&f, &r);
    assert_int_equal(pf_wire_encode_lease_reply(&o, 42, &r, NULL), PF_OK);
    assert_frame(&o, &f, "lease_reply_end.bin");
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

    m = (pf_wire_msg){.type = PF_WIRE_RESTORE, .request_id = 13};
    m.u.restore = (pf_wire_restore){4000, 0.25f};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 12);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_RESTORE);
    assert_int_equal(d.u.restore.step, 4000);
    assert_true(d.u.restore.lr_factor == 0.25f);

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

/* LEASE with no, one and several done splits, want 0 and 1, at the edges of n_splits and
 * n_done, and LEASE_REPLY in every state; done is a view into the message like PULL's ids. */
static void test_lease_round_trip(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_in in;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_wire_in_init(&in, 0, 0);
    pf_buf_init(&b, 1 << 20);
    pf_wire_msg m, d;
    static uint32_t done[PF_WIRE_MAX_TENSORS];
    for (uint32_t i = 0; i < PF_WIRE_MAX_TENSORS; i++)
        done[i] = (i * 7919u) % 100000u;

    const struct {
        uint64_t epoch;
        uint32_t n_splits, want, n_done;
    } cases[] = {
        {0, 1, 1, 0},                           /* the first ask */
        {0, 1, 0, 0},                           /* nothing done, nothing wanted */
        {2, 100000, 0, 1},                      /* a last report */
        {7, 100000, 1, 5},                      /* several done, and the next */
        {UINT64_MAX, PF_WIRE_MAX_SPLITS, 1, 3}, /* the largest split count */
        {1, 100000, 1, PF_WIRE_MAX_TENSORS},    /* the largest report */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        m = (pf_wire_msg){.type = PF_WIRE_LEASE, .request_id = 30 + (uint32_t)k};
        m.u.lease = (pf_wire_lease){cases[k].epoch, cases[k].n_splits, cases[k].want,
                                    cases[k].n_done, cases[k].n_done ? done : NULL};
        encode_into(&o, &m, &b);
        assert_int_equal(b.len, 24 + 20 + 4 * (size_t)cases[k].n_done);
        decode_ok(&in, &b, &d);
        assert_int_equal(d.type, PF_WIRE_LEASE);
        assert_int_equal(d.request_id, 30 + k);
        assert_true(d.u.lease.epoch == cases[k].epoch);
        assert_int_equal(d.u.lease.n_splits, cases[k].n_splits);
        assert_int_equal(d.u.lease.want, cases[k].want);
        assert_int_equal(d.u.lease.n_done, cases[k].n_done);
        assert_int_equal((uintptr_t)d.u.lease.done % 4, 0);
        assert_ptr_equal(d.u.lease.done, (const void *)(b.data + 44));
        if (cases[k].n_done)
            assert_memory_equal(d.u.lease.done, done, 4 * (size_t)cases[k].n_done);
    }
    /* The largest split index of the largest split count. */
    const uint32_t last = PF_WIRE_MAX_SPLITS - 1;
    m = (pf_wire_msg){.type = PF_WIRE_LEASE};
    m.u.lease = (pf_wire_lease){1, PF_WIRE_MAX_SPLITS, 0, 1, &last};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.lease.done[0], last);

    /* Done splits are not shards: a ps's tensor limit (its shard count) does not bound them. */
    pf_wire_in one;
    pf_wire_in_init(&one, 0, 1);
    m.u.lease = (pf_wire_lease){1, 100000, 1, 5, done};
    encode_into(&o, &m, &b);
    decode_ok(&one, &b, &d);
    assert_int_equal(d.u.lease.n_done, 5);
    pf_wire_in_deinit(&one);

    const pf_wire_lease_reply replies[] = {
        {PF_WIRE_LEASE_GRANTED, 0, 0, 0, 0},
        {PF_WIRE_LEASE_GRANTED, PF_WIRE_MAX_SPLITS - 1, UINT64_MAX, 3, 2},
        {PF_WIRE_LEASE_WAIT, 0, 5, PF_WIRE_MAX_TENSORS, 0},
        {PF_WIRE_LEASE_END, 0, 6, 0, PF_WIRE_MAX_TENSORS},
    };
    for (size_t k = 0; k < sizeof replies / sizeof replies[0]; k++) {
        m = (pf_wire_msg){.type = PF_WIRE_LEASE_REPLY, .request_id = 40 + (uint32_t)k};
        m.u.lease_reply = replies[k];
        encode_into(&o, &m, &b);
        assert_int_equal(b.len, 24 + 24);
        decode_ok(&in, &b, &d);
        assert_int_equal(d.type, PF_WIRE_LEASE_REPLY);
        assert_int_equal(d.request_id, 40 + k);
        assert_int_equal(d.u.lease_reply.state, replies[k].state);
        assert_int_equal(d.u.lease_reply.split, replies[k].split);
        assert_true(d.u.lease_reply.epoch == replies[k].epoch);
        assert_int_equal(d.u.lease_reply.accepted, replies[k].accepted);
        assert_int_equal(d.u.lease_reply.refused, replies[k].refused);
    }

    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    pf_wire_out_deinit(&o);
}

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
        assert_int_equal(pf_wire_encode_lease(&o, 6, &(pf_wire_lease){1, N, 1, N, ids}, NULL),
                         PF_OK);
        assert_int_equal(pf_wire_encode_lease_reply(
                             &o, 7, &(pf_wire_lease_reply){PF_WIRE_LEASE_WAIT, 0, 1, N, 0}, NULL),
                         PF_OK);
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

/* --- names ------------------------------------------------------------------------------ */

static void test_names(void **state) {
    (void)state;
    assert_string_equal(pf_wire_type_name(PF_WIRE_PUSH_PULL), "PUSH_PULL");
    assert_string_equal(pf_wire_type_name(0), "UNKNOWN");
    assert_string_equal(pf_wire_type_name(13), "AUTH_CHALLENGE");
    assert_string_equal(pf_wire_type_name(16), "RESTORE");
    assert_string_equal(pf_wire_type_name(17), "ROW_PULL");
    assert_string_equal(pf_wire_type_name(18), "ROW_PUSH_PULL");
    assert_string_equal(pf_wire_type_name(19), "SEG_ATTACH");
    assert_string_equal(pf_wire_type_name(20), "SEG_ACK");
    assert_string_equal(pf_wire_type_name(21), "SEG_PULL");
    assert_string_equal(pf_wire_type_name(22), "SEG_PUSH_PULL");
    assert_string_equal(pf_wire_type_name(23), "LEASE");
    assert_string_equal(pf_wire_type_name(24), "LEASE_REPLY");
    assert_string_equal(pf_wire_type_name(25), "UNKNOWN");
    assert_string_equal(pf_wire_code_name(19), "VERSION_PASSED");
    assert_string_equal(pf_wire_code_name(PF_WIRE_UNAUTHENTICATED), "UNAUTHENTICATED");
    assert_string_equal(pf_wire_code_name(PF_WIRE_STALE_INCARNATION), "STALE_INCARNATION");
    assert_string_equal(pf_wire_code_name(PF_WIRE_INTERNAL), "INTERNAL");
    assert_string_equal(pf_wire_code_name(1000), "UNKNOWN");
    /* Codes are distinct and named. */
    for (uint32_t c = PF_WIRE_BAD_MAGIC; c <= PF_WIRE_VERSION_PASSED; c++)
        for (uint32_t d = c + 1; d <= PF_WIRE_VERSION_PASSED; d++)
            assert_string_not_equal(pf_wire_code_name(c), pf_wire_code_name(d));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_golden),
        cmocka_unit_test(test_lease_layout),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_lease_round_trip),
        cmocka_unit_test(test_chunked_gather),
        cmocka_unit_test(test_zero_copy),
        cmocka_unit_test(test_no_alloc_when_warm),
        cmocka_unit_test(test_encoder_alloc_failure),
        cmocka_unit_test(test_decoder_alloc_failure),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
