/* test_wire_seg.c - the shared-segment messages, SEG_ATTACH (19), SEG_ACK (20), SEG_PULL (21)
 * and SEG_PUSH_PULL (22): their exact byte layout (api/wire.md, "Shared segment") and the
 * golden frames under tests/data/wire/valid/ that hold it, round trips at the edges of every
 * field, no allocation when warm, every frame the decoder refuses (code and offset) and every
 * message the encoders refuse. The other messages are test_wire.c's, test_wire_rows.c's and
 * test_wire_invalid.c's.
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

static const uint8_t token[PF_WIRE_SEG_TOKEN_SIZE] = {
    0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf};

/* --- layout ------------------------------------------------------------------------------ */

/* SEG_ATTACH {pid 4242, fd 7, size 4096, token a0 .. af}: pid at 24, fd at 28, size at 32,
 * token at 40; 56 bytes. */
static void seg_attach_frame(frame *f) {
    f_begin(f, PF_WIRE_SEG_ATTACH);
    f_u32(f, 4242);
    f_u32(f, 7);
    f_u64(f, 4096);
    f_bytes(f, token, sizeof token);
    f_end(f);
    assert_int_equal(f->len, 56);
}

static void seg_ack_frame(frame *f) {
    f_begin(f, PF_WIRE_SEG_ACK);
    f_end(f);
    assert_int_equal(f->len, 24);
}

/* One 32-byte segment record: id, dtype, count, grad, value. */
static void f_record(frame *f, uint32_t id, uint64_t count, uint64_t grad, uint64_t value) {
    f_u32(f, id);
    f_u32(f, PF_WIRE_F32);
    f_u64(f, count);
    f_u64(f, grad);
    f_u64(f, value);
}

/* SEG_PULL {min_version 9, records {3: 5 values at 64}, {8: none at 4}}: min_version at 24,
 * n at 32, reserved at 36; record 0 at 40 (dtype 44, count 48, grad 56, value 64), record 1
 * at 72 (dtype 76, count 80, grad 88, value 96); 104 bytes. */
static void seg_pull_frame(frame *f) {
    f_begin(f, PF_WIRE_SEG_PULL);
    f_u64(f, 9);
    f_u32(f, 2);
    f_u32(f, 0);
    f_record(f, 3, 5, 0, 64);
    f_record(f, 8, 0, 0, 4);
    f_end(f);
    assert_int_equal(f->len, 104);
}

static const pf_wire_seg_tensor golden_pull[2] = {{3, 5, 0, 64}, {8, 0, 0, 4}};

/* SEG_PUSH_PULL {task 2, incarnation 3, seq 4, step 5, min_version 6, records {0: 3 floats,
 * grad 16, value 28}, {1: 7 floats, grad 40, value 68}}: task_index at 24, reserved at 28,
 * incarnation 32, seq 40, step 48, min_version 56, n 64, reserved 68; record 0 at 72 (dtype
 * 76, count 80, grad 88, value 96), record 1 at 104 (dtype 108, count 112, grad 120, value
 * 128); 136 bytes. */
static void seg_push_pull_frame(frame *f) {
    f_begin(f, PF_WIRE_SEG_PUSH_PULL);
    f_u32(f, 2);
    f_u32(f, 0);
    f_u64(f, 3);
    f_u64(f, 4);
    f_u64(f, 5);
    f_u64(f, 6);
    f_u32(f, 2);
    f_u32(f, 0);
    f_record(f, 0, 3, 16, 28);
    f_record(f, 1, 7, 40, 68);
    f_end(f);
    assert_int_equal(f->len, 136);
}

static const pf_wire_seg_tensor golden_push[2] = {{0, 3, 16, 28}, {1, 7, 40, 68}};

/* The gathered message in o is exactly f, all of it head: no tensor data, one piece. */
static void assert_encoded(const pf_wire_out *o, const frame *f) {
    pf_buf b;
    pf_buf_init(&b, 1 << 16);
    assert_int_equal(pf_wire_out_gather(o, &b), PF_OK);
    assert_int_equal(b.len, f->len);
    assert_memory_equal(b.data, f->b, f->len);
    assert_int_equal(o->n_seg, 0);
    assert_int_equal(o->head.len, f->len);
    struct iovec parts[2];
    assert_int_equal(pf_wire_out_parts(o, parts, 2), 1);
    assert_int_equal(parts[0].iov_len, f->len);
    pf_buf_deinit(&b);
}

/* The golden frame `name` under tests/data/wire/valid/ is exactly f (request_id 42). */
static void assert_golden(const char *name, const frame *f) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", WIRE_VALID, name);
    size_t len;
    char *data = data_read(path, 65535, &len);
    assert_int_equal(len, f->len);
    assert_memory_equal(data, f->b, f->len);
    pf_free(data);
}

/* The encoders write exactly the frames built field by field above, and so do the golden
 * files. */
static void test_layout(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_out_init(&o);
    frame f;

    seg_attach_frame(&f);
    pf_wire_seg_attach a = {4242, 7, 4096, token};
    assert_int_equal(pf_wire_encode_seg_attach(&o, 42, &a, NULL), PF_OK);
    assert_encoded(&o, &f);
    assert_int_equal(get32(o.head.data + 16), 32); /* payload_len */
    assert_int_equal(get32(o.head.data + 6) & 0xffff, PF_WIRE_SEG_ATTACH);
    assert_golden("seg_attach.bin", &f);

    seg_ack_frame(&f);
    assert_int_equal(pf_wire_encode_seg_ack(&o, 42, NULL), PF_OK);
    assert_encoded(&o, &f);
    assert_int_equal(get32(o.head.data + 16), 0);
    assert_golden("seg_ack.bin", &f);

    seg_pull_frame(&f);
    pf_wire_seg_pull p = {9, 2, golden_pull};
    assert_int_equal(pf_wire_encode_seg_pull(&o, 42, &p, NULL), PF_OK);
    assert_encoded(&o, &f);
    assert_int_equal(get32(o.head.data + 16), 16 + 32 * 2);
    assert_int_equal(get32(o.head.data + 44), PF_WIRE_F32); /* record 0's dtype */
    assert_int_equal(get32(o.head.data + 64), 64);          /* record 0's value offset */
    assert_int_equal(get32(o.head.data + 72), 8);           /* record 1's id */
    assert_golden("seg_pull.bin", &f);

    seg_push_pull_frame(&f);
    pf_wire_seg_push_pull pp = {2, 3, 4, 5, {6, 2, golden_push}};
    assert_int_equal(pf_wire_encode_seg_push_pull(&o, 42, &pp, NULL), PF_OK);
    assert_encoded(&o, &f);
    assert_int_equal(get32(o.head.data + 16), 48 + 32 * 2);
    assert_int_equal(get32(o.head.data + 64), 2);   /* n */
    assert_int_equal(get32(o.head.data + 88), 16);  /* record 0's grad offset */
    assert_int_equal(get32(o.head.data + 128), 68); /* record 1's value offset */
    assert_golden("seg_push_pull.bin", &f);

    pf_wire_out_deinit(&o);
}

/* --- round trips ------------------------------------------------------------------------- */

static void assert_records(const pf_wire_seg_tensor *got, const pf_wire_seg_tensor *want,
                           uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(got[i].id, want[i].id);
        assert_true(got[i].count == want[i].count);
        assert_true(got[i].grad == want[i].grad);
        assert_true(got[i].value == want[i].value);
    }
}

static void test_round_trip(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_in in;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_wire_in_init(&in, 0, 0);
    pf_buf_init(&b, 1 << 20);
    pf_wire_msg m, d;

    /* SEG_ATTACH: the token points into the message; the smallest size is the token's. */
    m = (pf_wire_msg){.type = PF_WIRE_SEG_ATTACH, .request_id = 1};
    m.u.seg_attach = (pf_wire_seg_attach){UINT32_MAX, 3, UINT64_MAX, token};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 32);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_SEG_ATTACH);
    assert_int_equal(d.request_id, 1);
    assert_int_equal(d.u.seg_attach.pid, UINT32_MAX);
    assert_int_equal(d.u.seg_attach.fd, 3);
    assert_true(d.u.seg_attach.size == UINT64_MAX);
    assert_ptr_equal(d.u.seg_attach.token, b.data + 40);
    assert_memory_equal(d.u.seg_attach.token, token, sizeof token);
    m.u.seg_attach.size = PF_WIRE_SEG_TOKEN_SIZE;
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.seg_attach.size, PF_WIRE_SEG_TOKEN_SIZE);

    /* SEG_ACK: nothing but the header. */
    m = (pf_wire_msg){.type = PF_WIRE_SEG_ACK, .request_id = 2};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_SEG_ACK);
    assert_int_equal(d.request_id, 2);

    /* SEG_PULL: no records (a version probe), then ranges at the edges: offset + 4 count may
     * reach 2^64 - 4 (the largest aligned end below 2^64 - 1), and an empty range may lie
     * at any aligned offset. */
    m = (pf_wire_msg){.type = PF_WIRE_SEG_PULL, .request_id = 3};
    m.u.seg_pull = (pf_wire_seg_pull){.min_version = 12};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 16);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_SEG_PULL);
    assert_int_equal(d.u.seg_pull.min_version, 12);
    assert_int_equal(d.u.seg_pull.n, 0);

    const pf_wire_seg_tensor edges[] = {{0, UINT64_MAX / 4, 0, 0},
                                        {1, (UINT64_MAX - 4) / 4, 0, 4},
                                        {2, 0, 0, UINT64_MAX - 3},
                                        {UINT32_MAX, 1, 0, UINT64_MAX - 7}};
    m.u.seg_pull = (pf_wire_seg_pull){UINT64_MAX, 4, edges};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 16 + 4 * 32);
    decode_ok(&in, &b, &d);
    assert_true(d.u.seg_pull.min_version == UINT64_MAX);
    assert_int_equal(d.u.seg_pull.n, 4);
    assert_records(d.u.seg_pull.tensors, edges, 4);
    assert_ptr_equal(d.u.seg_pull.tensors, in.seg_views);

    /* SEG_PUSH_PULL: no records, then records whose grad ranges reach the edges too. */
    m = (pf_wire_msg){.type = PF_WIRE_SEG_PUSH_PULL, .request_id = 4};
    m.u.seg_push_pull = (pf_wire_seg_push_pull){7, 8, 9, 10, {11, 0, NULL}};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 48);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_SEG_PUSH_PULL);
    const pf_wire_seg_push_pull *got = &d.u.seg_push_pull;
    assert_int_equal(got->task_index, 7);
    assert_int_equal(got->incarnation, 8);
    assert_int_equal(got->seq, 9);
    assert_int_equal(got->step, 10);
    assert_int_equal(got->pull.min_version, 11);
    assert_int_equal(got->pull.n, 0);

    const pf_wire_seg_tensor push[] = {{5, 3, 16, 28},
                                       {6, (UINT64_MAX - 8) / 4, 8, 0},
                                       {7, 1, UINT64_MAX - 7, 1u << 20},
                                       {8, 0, UINT64_MAX - 3, UINT64_MAX - 3}};
    m.u.seg_push_pull = (pf_wire_seg_push_pull){UINT32_MAX, UINT64_MAX, 1, 0, {0, 4, push}};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 48 + 4 * 32);
    decode_ok(&in, &b, &d);
    assert_int_equal(got->task_index, UINT32_MAX);
    assert_true(got->incarnation == UINT64_MAX);
    assert_int_equal(got->seq, 1);
    assert_int_equal(got->pull.n, 4);
    assert_records(got->pull.tensors, push, 4);

    /* Counts at the receiver's limit are fine. */
    pf_wire_in two;
    pf_wire_in_init(&two, 0, 2);
    m.u.seg_push_pull.pull.n = 2;
    encode_into(&o, &m, &b);
    decode_ok(&two, &b, &d);
    assert_records(d.u.seg_push_pull.pull.tensors, push, 2);
    /* The segment records have their own views: a PUSH decoded next leaves them alone. */
    const pf_wire_seg_tensor *seg = d.u.seg_push_pull.pull.tensors;
    pf_wire_tensor t = {0, PF_WIRE_F32, 3, d0};
    m = (pf_wire_msg){.type = PF_WIRE_PUSH, .request_id = 5};
    m.u.push = (pf_wire_push){1, 1, 1, 1, 1, &t};
    encode_into(&o, &m, &b);
    decode_ok(&two, &b, &d);
    assert_ptr_not_equal((const void *)d.u.push.tensors, (const void *)seg);
    assert_records(seg, push, 2);
    pf_wire_in_deinit(&two);

    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    pf_wire_out_deinit(&o);
}

/* A warm encoder and decoder allocate nothing for segment messages either, and
 * pf_wire_in_deinit frees the segment record views. */
static void test_no_alloc_when_warm(void **state) {
    (void)state;
    enum { N = 100 };
    static pf_wire_seg_tensor rec[N];
    for (uint32_t i = 0; i < N; i++)
        rec[i] = (pf_wire_seg_tensor){i, 10 + i, 4096 + 64 * (uint64_t)i, 64 * (uint64_t)i};
    use_counting(-1);
    pf_wire_out o;
    pf_wire_in in;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_wire_in_init(&in, 0, 0);
    pf_buf_init(&b, 1 << 20);
    pf_wire_seg_push_pull pp = {1, 2, 3, 4, {5, N, rec}};
    assert_int_equal(pf_wire_encode_seg_push_pull(&o, 1, &pp, NULL), PF_OK);
    assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
    pf_wire_msg d;
    decode_ok(&in, &b, &d);
    long warm = alloc_count;
    assert_true(warm > 0);
    for (int round = 0; round < 3; round++) {
        pp.seq++;
        assert_int_equal(pf_wire_encode_seg_push_pull(&o, 2, &pp, NULL), PF_OK);
        pf_buf_reset(&b);
        assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
        decode_ok(&in, &b, &d);
        assert_int_equal(pf_wire_encode_seg_ack(&o, 3, NULL), PF_OK);
        pf_buf_reset(&b);
        assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
        decode_ok(&in, &b, &d);
    }
    assert_int_equal(alloc_count, warm);
    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    pf_wire_out_deinit(&o);
    assert_int_equal(alloc_live, 0);
    use_libc();
}

/* Growing the segment record views may fail: NOMEM, wire code INTERNAL. */
static void test_decoder_alloc_failure(void **state) {
    (void)state;
    frame f;
    seg_push_pull_frame(&f);
    uint8_t *c = heap_copy(f.b, f.len);
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_msg m;
    pf_error err;
    use_counting(0);
    assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_NOMEM);
    assert_int_equal(pf_wire_in_code(&in), PF_WIRE_INTERNAL);
    assert_non_null(strstr(err.message, "segment record views"));
    use_libc();
    assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_OK);
    pf_wire_in_deinit(&in);
    free(c);
}

/* Only a PULL_REPLY is received in place: a segment message with places is UNEXPECTED. */
static void test_not_placed(void **state) {
    (void)state;
    uint8_t dst[64];
    pf_ws_place place = {.pos = 60, .len = 12, .dst = dst};
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_msg m;
    pf_error err;
    frame f;
    seg_pull_frame(&f);
    uint8_t *c = heap_copy(f.b, f.len);
    assert_int_equal(pf_wire_decode_placed(&in, c, f.len, &place, 1, &m, &err), PF_ERR_FORMAT);
    assert_int_equal(pf_wire_in_code(&in), PF_WIRE_UNEXPECTED);
    assert_int_equal(pf_wire_decode_placed(&in, c, f.len, NULL, 0, &m, &err), PF_OK);
    free(c);
    pf_wire_in_deinit(&in);
}

/* --- refused frames ---------------------------------------------------------------------- */

static void test_seg_attach_refused(void **state) {
    (void)state;
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    frame f;

    /* A size smaller than the token: 15 and 0. */
    seg_attach_frame(&f);
    put64(f.b + 32, PF_WIRE_SEG_TOKEN_SIZE - 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 32);
    put64(f.b + 32, 0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 32);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        pf_error err;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_FORMAT);
        assert_non_null(strstr(err.message, "SEG_ATTACH: size 0 at offset 32"));
        assert_int_equal(m.request_id, 42);
        free(c);
    }

    /* Short and long payloads, and fewer bytes than the header says. */
    seg_attach_frame(&f);
    f.len -= 1;
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 24);
    seg_attach_frame(&f);
    f_u32(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 56);
    seg_attach_frame(&f);
    f.len -= 4;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 52);

    /* SEG_ACK carries nothing. */
    seg_ack_frame(&f);
    f_u32(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 24);
    pf_wire_in_deinit(&in);
}

static void test_seg_pull_refused(void **state) {
    (void)state;
    pf_wire_in in, one;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_in_init(&one, 0, 1);
    frame f;

    /* Reserved nonzero. */
    seg_pull_frame(&f);
    put32(f.b + 36, 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 36);

    /* dtype other than f32, in either record. */
    seg_pull_frame(&f);
    put32(f.b + 44, 0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_DTYPE), 44);
    seg_pull_frame(&f);
    put32(f.b + 76, 2);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_DTYPE), 76);

    /* A SEG_PULL pushes nothing: grad != 0, even aligned. */
    seg_pull_frame(&f);
    put64(f.b + 56, 4);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 56);
    seg_pull_frame(&f);
    put64(f.b + 88, 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 88);

    /* A value offset not a multiple of 4 (the count does not matter: record 1 has none). */
    for (uint64_t v = 65; v < 68; v++) {
        seg_pull_frame(&f);
        put64(f.b + 64, v);
        assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 64);
    }
    seg_pull_frame(&f);
    put64(f.b + 96, 2);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 96);

    /* offset + 4 count past 2^64 - 1, refused at the count: 2^62 floats from 0 (the grad
     * range, at 0, is checked first), one float at 2^64 - 4, two at 2^64 - 8. */
    seg_pull_frame(&f);
    put64(f.b + 48, UINT64_MAX / 4 + 1);
    put64(f.b + 64, 0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 48);
    put64(f.b + 48, UINT64_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 48);
    seg_pull_frame(&f);
    put64(f.b + 80, 1);
    put64(f.b + 96, UINT64_MAX - 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 80);
    put64(f.b + 80, 2);
    put64(f.b + 96, UINT64_MAX - 7);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 80);
    put64(f.b + 80, 1); /* one float at 2^64 - 8 ends at 2^64 - 4: fine */
    {
        pf_buf b;
        pf_buf_init(&b, 1 << 16);
        assert_int_equal(pf_buf_append(&b, f.b, f.len), PF_OK);
        pf_wire_msg m;
        decode_ok(&in, &b, &m);
        assert_true(m.u.seg_pull.tensors[1].value == UINT64_MAX - 7);
        pf_buf_deinit(&b);
    }

    /* n over the receiver's limit, over any limit, over the bytes left (refused before
     * anything is sized by it), and under the records there are. */
    seg_pull_frame(&f);
    assert_int_equal(fails_frame(&one, &f, PF_WIRE_TOO_LARGE), 32);
    put32(f.b + 32, PF_WIRE_MAX_TENSORS + 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 32);
    put32(f.b + 32, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 32);
    put32(f.b + 32, 3); /* 68 bytes left: room for 2 records */
    pf_wire_in fresh;
    pf_wire_in_init(&fresh, 0, 0);
    use_counting(0);
    assert_int_equal(fails_frame(&fresh, &f, PF_WIRE_BAD_LENGTH), 32);
    use_libc();
    pf_wire_in_deinit(&fresh);
    put32(f.b + 32, 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 72);

    /* Short and long payloads: a record cut by 4 bytes (n still fits the bytes left, as the
     * reserved field counts there) and by 8 (it does not), a byte after the last record,
     * fewer bytes than the header says, fixed fields cut short. */
    seg_pull_frame(&f);
    f.len -= 4;
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 72);
    seg_pull_frame(&f);
    f.len -= 8;
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 32);
    seg_pull_frame(&f);
    f_u8(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 104);
    seg_pull_frame(&f);
    f.len -= 1;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 103);
    f_begin(&f, PF_WIRE_SEG_PULL);
    f_u64(&f, 1);
    f_u32(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 36);

    /* The message names the type, the record, the field and the offset. */
    seg_pull_frame(&f);
    put64(f.b + 56, 8);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        pf_error err;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_FORMAT);
        assert_non_null(strstr(err.message, "SEG_PULL: record 0 (id 3) has grad offset 8"));
        assert_non_null(strstr(err.message, "offset 56"));
        assert_int_equal(err.offset, 56);
        free(c);
    }
    pf_wire_in_deinit(&one);
    pf_wire_in_deinit(&in);
}

static void test_seg_push_pull_refused(void **state) {
    (void)state;
    pf_wire_in in, one;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_in_init(&one, 0, 1);
    frame f;

    /* Either reserved field nonzero. */
    seg_push_pull_frame(&f);
    put32(f.b + 28, 0x80000000u);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 28);
    seg_push_pull_frame(&f);
    put32(f.b + 68, 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 68);

    /* dtype other than f32. */
    seg_push_pull_frame(&f);
    put32(f.b + 108, 0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_DTYPE), 108);

    /* grad and value offsets not multiples of 4. */
    seg_push_pull_frame(&f);
    put64(f.b + 88, 18);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 88);
    seg_push_pull_frame(&f);
    put64(f.b + 128, 69);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 128);
    seg_push_pull_frame(&f);
    put64(f.b + 120, UINT64_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 120);

    /* Ranges past 2^64 - 1: the gradients', the values', both with a huge count. */
    seg_push_pull_frame(&f);
    put64(f.b + 88, UINT64_MAX - 7); /* 3 floats from 2^64 - 8 */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 80);
    seg_push_pull_frame(&f);
    put64(f.b + 128, UINT64_MAX - 27); /* 7 floats from 2^64 - 28 end at 2^64 */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 112);
    put64(f.b + 128, UINT64_MAX - 31); /* from 2^64 - 32 they end at 2^64 - 4: fine */
    {
        pf_buf b;
        pf_buf_init(&b, 1 << 16);
        assert_int_equal(pf_buf_append(&b, f.b, f.len), PF_OK);
        pf_wire_msg m;
        decode_ok(&in, &b, &m);
        pf_buf_deinit(&b);
    }
    seg_push_pull_frame(&f);
    put64(f.b + 112, UINT64_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 112);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        pf_error err;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_RANGE);
        assert_non_null(strstr(err.message, "SEG_PUSH_PULL: record 1 (id 1)"));
        assert_non_null(strstr(err.message, "grad bytes"));
        free(c);
    }

    /* n over the limits and the bytes left. */
    seg_push_pull_frame(&f);
    assert_int_equal(fails_frame(&one, &f, PF_WIRE_TOO_LARGE), 64);
    put32(f.b + 64, PF_WIRE_MAX_TENSORS + 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 64);
    put32(f.b + 64, 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 64);

    /* Short and long payloads; fixed fields cut short. */
    seg_push_pull_frame(&f);
    f.len -= 4;
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 104);
    seg_push_pull_frame(&f);
    f_u32(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 136);
    seg_push_pull_frame(&f);
    f.len = 24 + 28;
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 24);
    seg_push_pull_frame(&f);
    f.len = 24 + 44; /* up to min_version: n is missing */
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 64);
    pf_wire_in_deinit(&one);
    pf_wire_in_deinit(&in);
}

/* --- refused messages -------------------------------------------------------------------- */

static void test_encode_rejects(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_out_init(&o);
    pf_error err;
#define REJECT(call)                                                                               \
    do {                                                                                           \
        assert_int_equal(pf_wire_encode_stats(&o, 1, NULL), PF_OK);                                \
        assert_int_equal((call), PF_ERR_INVALID);                                                  \
        assert_int_equal(pf_wire_out_len(&o), 0);                                                  \
        assert_true(strlen(err.message) > 0);                                                      \
    } while (0)
#define PULL(...) (&(pf_wire_seg_pull){0, 1, &(pf_wire_seg_tensor){__VA_ARGS__}})
#define PUSH(...) (&(pf_wire_seg_push_pull){.pull = {0, 1, &(pf_wire_seg_tensor){__VA_ARGS__}}})

    /* SEG_ATTACH: no token, a size smaller than the token. */
    REJECT(pf_wire_encode_seg_attach(&o, 1, &(pf_wire_seg_attach){1, 2, 4096, NULL}, &err));
    assert_non_null(strstr(err.message, "token"));
    REJECT(pf_wire_encode_seg_attach(&o, 1, &(pf_wire_seg_attach){1, 2, 15, token}, &err));

    /* SEG_PULL: grad != 0, offsets not multiples of 4, ranges past 2^64 - 1, too many
     * records, records NULL. */
    REJECT(pf_wire_encode_seg_pull(&o, 1, PULL(0, 1, 4, 0), &err));
    assert_non_null(strstr(err.message, "SEG_PULL"));
    REJECT(pf_wire_encode_seg_pull(&o, 1, PULL(0, 1, 0, 2), &err));
    REJECT(pf_wire_encode_seg_pull(&o, 1, PULL(0, UINT64_MAX / 4 + 1, 0, 0), &err));
    REJECT(pf_wire_encode_seg_pull(&o, 1, PULL(0, 1, 0, UINT64_MAX - 3), &err));
    REJECT(pf_wire_encode_seg_pull(
        &o, 1, &(pf_wire_seg_pull){0, PF_WIRE_MAX_TENSORS + 1, golden_pull}, &err));
    REJECT(pf_wire_encode_seg_pull(&o, 1, &(pf_wire_seg_pull){0, 1, NULL}, &err));

    /* SEG_PUSH_PULL: the same, with any grad offset allowed if aligned and in range. */
    REJECT(pf_wire_encode_seg_push_pull(&o, 1, PUSH(0, 1, 6, 0), &err));
    REJECT(pf_wire_encode_seg_push_pull(&o, 1, PUSH(0, 1, 0, 7), &err));
    REJECT(pf_wire_encode_seg_push_pull(&o, 1, PUSH(0, 2, UINT64_MAX - 7, 0), &err));
    assert_non_null(strstr(err.message, "2^64"));
    REJECT(pf_wire_encode_seg_push_pull(&o, 1, PUSH(0, 2, 0, UINT64_MAX - 7), &err));
    REJECT(pf_wire_encode_seg_push_pull(
        &o, 1, &(pf_wire_seg_push_pull){.pull = {0, PF_WIRE_MAX_TENSORS + 1, golden_push}}, &err));
    REJECT(
        pf_wire_encode_seg_push_pull(&o, 1, &(pf_wire_seg_push_pull){.pull = {0, 2, NULL}}, &err));
    REJECT(pf_wire_encode_seg_push_pull(&o, 1, PUSH(0, 1, UINT64_MAX - 3, 0), &err));
    assert_int_equal(pf_wire_encode_seg_push_pull(&o, 1, PUSH(0, 1, UINT64_MAX - 7, 0), NULL),
                     PF_OK); /* ends at 2^64 - 4 */

    /* Through pf_wire_encode as well; err may be NULL. */
    pf_wire_msg m = {.type = PF_WIRE_SEG_PULL};
    m.u.seg_pull = *PULL(0, 1, 4, 0);
    REJECT(pf_wire_encode(&o, &m, &err));
    m = (pf_wire_msg){.type = PF_WIRE_SEG_PUSH_PULL};
    m.u.seg_push_pull = *PUSH(0, 1, 2, 0);
    REJECT(pf_wire_encode(&o, &m, &err));
    m = (pf_wire_msg){.type = PF_WIRE_SEG_ATTACH};
    REJECT(pf_wire_encode(&o, &m, &err));
    assert_int_equal(pf_wire_encode(&o, &m, NULL), PF_ERR_INVALID);
#undef PUSH
#undef PULL
#undef REJECT
    pf_wire_out_deinit(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_no_alloc_when_warm),
        cmocka_unit_test(test_decoder_alloc_failure),
        cmocka_unit_test(test_not_placed),
        cmocka_unit_test(test_seg_attach_refused),
        cmocka_unit_test(test_seg_pull_refused),
        cmocka_unit_test(test_seg_push_pull_refused),
        cmocka_unit_test(test_encode_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
