/* test_wire_rows.c - the row messages, ROW_PULL (17) and ROW_PUSH_PULL (18): their exact
 * byte layout (api/wire.md), round trips with and without whole shards, selections and row
 * records (n_rows 0 included), zero-copy row data and the pieces a transport sends, no
 * allocation when warm, every frame the decoder refuses (code and offset) and every
 * message the encoders refuse. The other messages are test_wire.c's and
 * test_wire_invalid.c's; the files under tests/data/wire/ hold row frames too.
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
#include "tests/support/counting_alloc.h"
#include "tests/support/wire_frames.h"

/* Row data of the examples: 4 = 2 rows x width 2, 21 = 3 rows x width 7. */
static float r4[4] = {0.25f, -1.0f, 2.0f, 8.5f};
static float r21[21];

static const uint32_t rows_2[] = {1, 3};
static const uint32_t rows_3[] = {0, 4, 70000};

/* --- layout ------------------------------------------------------------------------------ */

/* ROW_PULL {min_version 7, ids {3, 9}, selections {5: rows 0 4 70000}, {6: no rows}}:
 * min_version at 24, n at 32, ids at 36 and 40, n_sel at 44, selection 0's id at 48, its
 * n_rows at 52, its rows at 56, 60, 64, selection 1's id at 68, its n_rows at 72; 76 bytes. */
static void row_pull_frame(frame *f) {
    f_begin(f, PF_WIRE_ROW_PULL);
    f_u64(f, 7);
    f_u32(f, 2);
    f_u32(f, 3);
    f_u32(f, 9);
    f_u32(f, 2);
    f_u32(f, 5);
    f_u32(f, 3);
    f_bytes(f, rows_3, sizeof rows_3);
    f_u32(f, 6);
    f_u32(f, 0);
    f_end(f);
    assert_int_equal(f->len, 76);
}

static const pf_wire_rows golden_sel[2] = {{5, 0, 3, rows_3, NULL, 0, NULL},
                                           {6, 0, 0, NULL, NULL, 0, NULL}};
static const uint32_t golden_ids[2] = {3, 9};

/* ROW_PUSH_PULL: the push {task 1, incarnation 2, seq 3, step 4, tensor 0 of 3 floats} with
 * n at 52, the tensor's header at 56 and values at 72; n_records at 84; record 0 {id 5,
 * width 2, rows 1 3, 4 floats}: id 88, dtype 92, width 96, n_rows 100, rows 104 and 108,
 * data 112; record 1 {id 7, width 3, no rows} at 128 (width 136, n_rows 140); the pull
 * {min_version 5, ids {0}, selection {5: rows 1 3}}: min_version 144, n 152, ids 156, n_sel
 * 160, the selection's id 164, n_rows 168, rows 172 and 176; 180 bytes. */
static void row_push_pull_frame(frame *f) {
    f_begin(f, PF_WIRE_ROW_PUSH_PULL);
    f_u32(f, 1);
    f_u64(f, 2);
    f_u64(f, 3);
    f_u64(f, 4);
    f_u32(f, 1);
    f_u32(f, 0);
    f_u32(f, PF_WIRE_F32);
    f_u64(f, 3);
    f_bytes(f, d0, sizeof d0);
    f_u32(f, 2);
    f_u32(f, 5);
    f_u32(f, PF_WIRE_F32);
    f_u32(f, 2);
    f_u32(f, 2);
    f_bytes(f, rows_2, sizeof rows_2);
    f_bytes(f, r4, sizeof r4);
    f_u32(f, 7);
    f_u32(f, PF_WIRE_F32);
    f_u32(f, 3);
    f_u32(f, 0);
    f_u64(f, 5);
    f_u32(f, 1);
    f_u32(f, 0);
    f_u32(f, 1);
    f_u32(f, 5);
    f_u32(f, 2);
    f_bytes(f, rows_2, sizeof rows_2);
    f_end(f);
    assert_int_equal(f->len, 180);
}

static const pf_wire_tensor golden_t[1] = {{0, PF_WIRE_F32, 3, d0}};
static const pf_wire_rows golden_rec[2] = {{5, 2, 2, rows_2, r4, 0, NULL},
                                           {7, 3, 0, NULL, NULL, 0, NULL}};
static const pf_wire_rows golden_pp_sel[1] = {{5, 0, 2, rows_2, NULL, 0, NULL}};
static const uint32_t zero_id[1] = {0};

static pf_wire_row_push_pull golden_row_push_pull(void) {
    return (pf_wire_row_push_pull){
        {1, 2, 3, 4, 1, golden_t}, 2, golden_rec, {5, 1, zero_id, 1, golden_pp_sel}};
}

/* The encoders write exactly the frames built field by field above. */
static void test_layout(void **state) {
    (void)state;
    pf_wire_out o;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_buf_init(&b, 1 << 16);
    frame f;

    row_pull_frame(&f);
    pf_wire_row_pull rp = {7, 2, golden_ids, 2, golden_sel};
    assert_int_equal(pf_wire_encode_row_pull(&o, 42, &rp, NULL), PF_OK);
    assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
    assert_int_equal(b.len, f.len);
    assert_memory_equal(b.data, f.b, f.len);
    /* payload_len = 16 + 4n + sum(8 + 4 n_rows) */
    assert_int_equal(get32(b.data + 16), 16 + 4 * 2 + (8 + 4 * 3) + (8 + 0));
    assert_int_equal(get32(b.data + 6) & 0xffff, PF_WIRE_ROW_PULL);
    assert_int_equal(get32(b.data + 44), 2);     /* n_sel */
    assert_int_equal(get32(b.data + 64), 70000); /* selection 0's last row */
    assert_int_equal(get32(b.data + 68), 6);     /* selection 1's id */
    assert_int_equal(o.n_seg, 0);                /* rows are copied into the head */

    row_push_pull_frame(&f);
    pf_wire_row_push_pull rpp = golden_row_push_pull();
    assert_int_equal(pf_wire_encode_row_push_pull(&o, 42, &rpp, NULL), PF_OK);
    pf_buf_reset(&b);
    assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
    assert_int_equal(b.len, f.len);
    assert_memory_equal(b.data, f.b, f.len);
    assert_int_equal(get32(b.data + 6) & 0xffff, PF_WIRE_ROW_PUSH_PULL);
    assert_int_equal(get32(b.data + 84), 2);  /* n_records */
    assert_int_equal(get32(b.data + 96), 2);  /* record 0's width */
    assert_int_equal(get32(b.data + 108), 3); /* record 0's second row */
    assert_memory_equal(b.data + 112, r4, sizeof r4);
    assert_int_equal(get32(b.data + 136), 3);    /* record 1's width */
    assert_int_equal(get32(b.data + 160), 1);    /* n_sel */
    assert_int_equal(get32(b.data + 176), 3);    /* the selection's second row */
    assert_int_equal(o.n_seg, 2);                /* the tensor's values and record 0's data */
    assert_ptr_equal(o.seg[1].data, r4);         /* referenced, not copied */
    assert_int_equal(o.seg[1].pos, 112);         /* where the data lies in the message */
    assert_int_equal(o.head.len, 180 - 12 - 16); /* no tensor or row data in the head */

    pf_buf_deinit(&b);
    pf_wire_out_deinit(&o);
}

/* --- round trips ------------------------------------------------------------------------- */

/* got[0 .. n) are want's row sets, their rows and data pointing into msg, 4-aligned; the
 * 64-bit ids of id64 sets copied out of it (8-aligned, into the decoder's id views). */
static void assert_row_sets(const pf_wire_rows *got, const pf_wire_rows *want, uint32_t n,
                            const pf_buf *msg) {
    const uint8_t *lo = msg->data, *hi = msg->data + msg->len;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(got[i].id, want[i].id);
        assert_int_equal(got[i].width, want[i].width);
        assert_int_equal(got[i].n_rows, want[i].n_rows);
        assert_int_equal(got[i].id64, want[i].id64 ? 1 : 0);
        if (want[i].width == 0)
            assert_null(got[i].data); /* a selection */
        if (want[i].id64)
            assert_null(got[i].rows);
        else
            assert_null(got[i].ids);
        if (!want[i].n_rows) {
            assert_null(got[i].ids);
            continue;
        }
        if (want[i].id64) {
            const uint8_t *ids = (const uint8_t *)got[i].ids;
            assert_true(ids + 8 * (size_t)got[i].n_rows <= lo || ids >= hi); /* a copy */
            assert_int_equal((uintptr_t)ids % 8, 0);
            assert_memory_equal(got[i].ids, want[i].ids, 8 * (size_t)want[i].n_rows);
        } else {
            const uint8_t *rows = (const uint8_t *)got[i].rows;
            assert_true(rows >= lo && rows + 4 * (size_t)got[i].n_rows <= hi);
            assert_int_equal((uintptr_t)rows % 4, 0);
            assert_memory_equal(got[i].rows, want[i].rows, 4 * (size_t)want[i].n_rows);
        }
        if (want[i].width) {
            size_t bytes = 4 * (size_t)want[i].n_rows * want[i].width;
            const uint8_t *data = (const uint8_t *)got[i].data;
            assert_true(data >= lo && data + bytes <= hi);
            assert_int_equal((uintptr_t)data % 4, 0);
            assert_memory_equal(got[i].data, want[i].data, bytes);
        }
    }
}

static void test_round_trip(void **state) {
    (void)state;
    for (int i = 0; i < 21; i++)
        r21[i] = (float)i - 10.5f;
    pf_wire_out o;
    pf_wire_in in;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_wire_in_init(&in, 0, 0);
    pf_buf_init(&b, 1 << 20);
    pf_wire_msg m, d;
    const pf_wire_tensor ts[] = {
        {0, PF_WIRE_F32, 3, d0}, {7, PF_WIRE_F32, 0, NULL}, {4, PF_WIRE_F32, 7, d1}};
    const uint32_t ids[] = {4, 0, 9, 65535};
    const uint32_t many[] = {2, 3, 5, 8, 13, 21, 34, 55, UINT32_MAX};
    const pf_wire_rows sel[] = {{1, 0, 9, many, NULL, 0, NULL},
                                {2, 0, 0, NULL, NULL, 0, NULL},
                                {3, 0, 1, many + 8, NULL, 0, NULL},
                                {3, 0, 3, rows_3, NULL, 0, NULL}};
    const pf_wire_rows rec[] = {{10, 2, 2, rows_2, r4, 0, NULL},
                                {11, 7, 3, rows_3, r21, 0, NULL},
                                {12, 1, 0, NULL, NULL, 0, NULL},
                                {13, 21, 1, many, r21, 0, NULL},
                                {14, 1, 4, many + 5, r4, 0, NULL}};

    /* Nothing at all: a version probe. */
    m = (pf_wire_msg){.type = PF_WIRE_ROW_PULL, .request_id = 1};
    m.u.row_pull = (pf_wire_row_pull){.min_version = 12};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 16);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_ROW_PULL);
    assert_int_equal(d.request_id, 1);
    assert_int_equal(d.u.row_pull.min_version, 12);
    assert_int_equal(d.u.row_pull.n, 0);
    assert_int_equal(d.u.row_pull.n_sel, 0);

    /* Whole shards only, selections only, both. */
    m.u.row_pull = (pf_wire_row_pull){13, 4, ids, 0, NULL};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 16 + 16);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.row_pull.n, 4);
    assert_memory_equal(d.u.row_pull.ids, ids, sizeof ids);
    assert_int_equal(d.u.row_pull.n_sel, 0);

    m.u.row_pull = (pf_wire_row_pull){14, 0, NULL, 4, sel};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 16 + 4 * 8 + (9 + 0 + 1 + 3) * 4);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.row_pull.n, 0);
    assert_int_equal(d.u.row_pull.n_sel, 4);
    assert_row_sets(d.u.row_pull.sel, sel, 4, &b);

    m.u.row_pull = (pf_wire_row_pull){UINT64_MAX, 3, ids + 1, 2, sel + 2};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_true(d.u.row_pull.min_version == UINT64_MAX);
    assert_int_equal(d.u.row_pull.n, 3);
    assert_memory_equal(d.u.row_pull.ids, ids + 1, 3 * 4);
    assert_int_equal(d.u.row_pull.n_sel, 2);
    assert_row_sets(d.u.row_pull.sel, sel + 2, 2, &b);

    /* ROW_PUSH_PULL: empty in every part, then full in every part, then rows only. */
    m = (pf_wire_msg){.type = PF_WIRE_ROW_PUSH_PULL, .request_id = 2};
    m.u.row_push_pull = (pf_wire_row_push_pull){.push = {1, 2, 3, 4, 0, NULL}};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 32 + 4 + 16);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.type, PF_WIRE_ROW_PUSH_PULL);
    assert_int_equal(d.u.row_push_pull.push.task_index, 1);
    assert_int_equal(d.u.row_push_pull.push.incarnation, 2);
    assert_int_equal(d.u.row_push_pull.push.seq, 3);
    assert_int_equal(d.u.row_push_pull.push.step, 4);
    assert_int_equal(d.u.row_push_pull.push.n, 0);
    assert_int_equal(d.u.row_push_pull.n_rows, 0);
    assert_int_equal(d.u.row_push_pull.pull.n, 0);
    assert_int_equal(d.u.row_push_pull.pull.n_sel, 0);

    m.u.row_push_pull = (pf_wire_row_push_pull){{5, 6, 7, 8, 3, ts}, 5, rec, {9, 4, ids, 4, sel}};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 32 + 3 * 16 + 10 * 4 + 4 + 5 * 16 + (2 + 3 + 0 + 1 + 4) * 4 +
                                (4 + 21 + 0 + 21 + 4) * 4 + 16 + 4 * 4 + 4 * 8 + 13 * 4);
    decode_ok(&in, &b, &d);
    const pf_wire_row_push_pull *got = &d.u.row_push_pull;
    assert_int_equal(got->push.task_index, 5);
    assert_int_equal(got->push.step, 8);
    assert_int_equal(got->push.n, 3);
    assert_tensors(got->push.tensors, ts, 3, b.data);
    assert_int_equal(got->n_rows, 5);
    assert_row_sets(got->rows, rec, 5, &b);
    assert_int_equal(got->pull.min_version, 9);
    assert_int_equal(got->pull.n, 4);
    assert_memory_equal(got->pull.ids, ids, sizeof ids);
    assert_int_equal(got->pull.n_sel, 4);
    assert_row_sets(got->pull.sel, sel, 4, &b);
    /* Three view arrays, none sharing storage with another. */
    assert_ptr_not_equal((const void *)got->rows, (const void *)got->pull.sel);
    assert_ptr_not_equal((const void *)got->rows, (const void *)got->push.tensors);

    m.u.row_push_pull =
        (pf_wire_row_push_pull){{5, 6, 8, 9, 0, NULL}, 2, rec + 2, {10, 0, NULL, 0, NULL}};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.row_push_pull.push.n, 0);
    assert_int_equal(d.u.row_push_pull.n_rows, 2);
    assert_row_sets(d.u.row_push_pull.rows, rec + 2, 2, &b);

    /* Counts at the receiver's limit are fine. */
    pf_wire_in small;
    pf_wire_in_init(&small, 0, 4);
    m.u.row_push_pull = (pf_wire_row_push_pull){{1, 1, 1, 1, 3, ts}, 4, rec, {1, 4, ids, 4, sel}};
    encode_into(&o, &m, &b);
    decode_ok(&small, &b, &d);
    pf_wire_in_deinit(&small);

    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    pf_wire_out_deinit(&o);
}

/* --- sending ----------------------------------------------------------------------------- */

/* Row data is referenced: a segment per row record with values, none for n_rows 0, and the
 * pieces of a gathering write are the message in order, at most 2 * (tensors + records) + 1. */
static void test_parts(void **state) {
    (void)state;
    const pf_wire_tensor ts[] = {{0, PF_WIRE_F32, 3, d0}, {1, PF_WIRE_F32, 0, NULL}};
    const pf_wire_rows rec[] = {{2, 2, 2, rows_2, r4, 0, NULL},
                                {3, 5, 0, NULL, NULL, 0, NULL},
                                {4, 7, 3, rows_3, r21, 0, NULL}};
    pf_wire_row_push_pull rpp = {{1, 1, 1, 0, 2, ts}, 3, rec, {1, 0, NULL, 1, golden_sel}};
    pf_wire_out o;
    pf_wire_out_init(&o);
    assert_int_equal(pf_wire_encode_row_push_pull(&o, 3, &rpp, NULL), PF_OK);
    assert_int_equal(o.n_seg, 3);
    assert_ptr_equal(o.seg[0].data, d0);
    assert_ptr_equal(o.seg[1].data, r4);
    assert_int_equal(o.seg[1].len, sizeof r4);
    assert_ptr_equal(o.seg[2].data, r21);
    assert_int_equal(o.seg[2].len, sizeof r21);
    pf_buf whole;
    pf_buf_init(&whole, 1 << 16);
    assert_int_equal(pf_wire_out_gather(&o, &whole), PF_OK);
    struct iovec parts[2 * (2 + 3) + 1];
    size_t n = pf_wire_out_parts(&o, parts, sizeof parts / sizeof parts[0]);
    assert_int_equal(n, 7); /* head, d0, head, r4, head, r21, head (the pull part) */
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(parts[i].iov_len > 0);
        assert_memory_equal(parts[i].iov_base, whole.data + at, parts[i].iov_len);
        at += parts[i].iov_len;
    }
    assert_int_equal(at, whole.len);
    /* Changing row data after encoding changes what is sent. */
    r4[1] = 42.0f;
    pf_buf_reset(&whole);
    assert_int_equal(pf_wire_out_gather(&o, &whole), PF_OK);
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_msg d;
    decode_ok(&in, &whole, &d);
    assert_true(d.u.row_push_pull.rows[0].data[1] == 42.0f);
    r4[1] = -1.0f;
    pf_wire_in_deinit(&in);
    pf_buf_deinit(&whole);
    pf_wire_out_deinit(&o);
}

/* A warm encoder and decoder allocate nothing for row messages either. */
static void test_no_alloc_when_warm(void **state) {
    (void)state;
    enum { N = 100 };
    static pf_wire_rows rec[N], sel[N];
    static uint32_t ids[N];
    static float data[3 * 7];
    for (uint32_t i = 0; i < N; i++) {
        rec[i] = (pf_wire_rows){i, 7, 1 + i % 3, rows_3, data, 0, NULL};
        sel[i] = (pf_wire_rows){i, 0, 1 + i % 3, rows_3, NULL, 0, NULL};
        ids[i] = i;
    }
    use_counting(-1);
    pf_wire_out o;
    pf_wire_in in;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_wire_in_init(&in, 0, 0);
    pf_buf_init(&b, 1 << 20);
    pf_wire_row_push_pull rpp = {{1, 2, 3, 4, 0, NULL}, N, rec, {5, N, ids, N, sel}};
    assert_int_equal(pf_wire_encode_row_push_pull(&o, 1, &rpp, NULL), PF_OK);
    assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
    pf_wire_msg d;
    decode_ok(&in, &b, &d);
    long warm = alloc_count;
    assert_true(warm > 0);
    for (int round = 0; round < 3; round++) {
        rpp.push.seq++;
        assert_int_equal(pf_wire_encode_row_pull(&o, 2, &rpp.pull, NULL), PF_OK);
        pf_buf_reset(&b);
        assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
        decode_ok(&in, &b, &d);
        assert_int_equal(pf_wire_encode_row_push_pull(&o, 3, &rpp, NULL), PF_OK);
        pf_buf_reset(&b);
        assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
        decode_ok(&in, &b, &d);
    }
    assert_int_equal(alloc_count, warm);
    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    pf_wire_out_deinit(&o);
    assert_int_equal(alloc_live, 0); /* pf_wire_in_deinit freed the row and selection views */
    use_libc();
}

/* Growing the row and selection views may fail: NOMEM, wire code INTERNAL. */
static void test_decoder_alloc_failure(void **state) {
    (void)state;
    frame f;
    row_pull_frame(&f);
    uint8_t *c = heap_copy(f.b, f.len);
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_msg m;
    pf_error err;
    use_counting(0);
    assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_NOMEM);
    assert_int_equal(pf_wire_in_code(&in), PF_WIRE_INTERNAL);
    assert_non_null(strstr(err.message, "selection views"));
    use_libc();
    assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_OK);
    free(c);

    row_push_pull_frame(&f);
    c = heap_copy(f.b, f.len);
    use_counting(1); /* the tensor views, then not the row record views */
    pf_wire_in fresh;
    pf_wire_in_init(&fresh, 0, 0);
    assert_int_equal(pf_wire_decode(&fresh, c, f.len, &m, &err), PF_ERR_NOMEM);
    assert_int_equal(pf_wire_in_code(&fresh), PF_WIRE_INTERNAL);
    assert_non_null(strstr(err.message, "row record views"));
    use_libc();
    assert_int_equal(pf_wire_decode(&fresh, c, f.len, &m, &err), PF_OK);
    pf_wire_in_deinit(&fresh);
    pf_wire_in_deinit(&in);
    free(c);
}

/* Only a PULL_REPLY is received in place: a row message with places is UNEXPECTED. */
static void test_not_placed(void **state) {
    (void)state;
    frame f;
    uint8_t dst[64];
    pf_ws_place place = {.pos = 60, .len = 12, .dst = dst};
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_msg m;
    pf_error err;
    row_pull_frame(&f);
    for (int type = 0; type < 2; type++) {
        uint8_t *c = heap_copy(f.b, f.len);
        assert_int_equal(pf_wire_decode_placed(&in, c, f.len, &place, 1, &m, &err), PF_ERR_FORMAT);
        assert_int_equal(pf_wire_in_code(&in), PF_WIRE_UNEXPECTED);
        assert_int_equal(pf_wire_decode_placed(&in, c, f.len, NULL, 0, &m, &err), PF_OK);
        free(c);
        row_push_pull_frame(&f);
    }
    pf_wire_in_deinit(&in);
}

/* --- refused frames ---------------------------------------------------------------------- */

static void test_row_pull_refused(void **state) {
    (void)state;
    pf_wire_in in, two;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_in_init(&two, 0, 2);
    frame f;

    row_pull_frame(&f);
    f.len -= 4;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 72);
    row_pull_frame(&f);
    f.len += 4; /* after the payload */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 76);
    row_pull_frame(&f);
    f_u32(&f, 0); /* inside the payload, after the last selection */
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 76);

    /* n and n_sel over the receiver's limit, over any limit, over the bytes left (refused
     * before anything is sized by them). */
    row_pull_frame(&f);
    put32(f.b + 32, 3);
    assert_int_equal(fails_frame(&two, &f, PF_WIRE_TOO_LARGE), 32);
    row_pull_frame(&f);
    put32(f.b + 44, 3);
    assert_int_equal(fails_frame(&two, &f, PF_WIRE_TOO_LARGE), 44);
    put32(f.b + 44, PF_WIRE_MAX_TENSORS + 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 44);
    put32(f.b + 44, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 44);
    put32(f.b + 44, 4); /* 28 bytes left: room for 3 selection headers */
    pf_wire_in fresh;
    pf_wire_in_init(&fresh, 0, 0);
    use_counting(0);
    assert_int_equal(fails_frame(&fresh, &f, PF_WIRE_BAD_LENGTH), 44);
    use_libc();
    pf_wire_in_deinit(&fresh);
    row_pull_frame(&f);
    put32(f.b + 44, 3); /* the third selection's header would start at the end */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 76);

    /* n_rows too large for what remains (20 bytes after it: 5 rows), or huge. */
    row_pull_frame(&f);
    put32(f.b + 52, 6);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 52);
    put32(f.b + 52, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 52);
    put32(f.b + 72, 1); /* the last selection's one row is past the end */
    put32(f.b + 52, 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 72);

    /* Rows strictly increasing: an equal row and a descending one are refused where they
     * lie, and so is a row below the first. */
    row_pull_frame(&f);
    put32(f.b + 60, 0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 60);
    row_pull_frame(&f);
    put32(f.b + 64, 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 64);
    row_pull_frame(&f);
    put32(f.b + 56, 5);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 60);

    /* The message names the type, the selection, the row and the offset. */
    row_pull_frame(&f);
    put32(f.b + 64, 4);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        pf_error err;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_FORMAT);
        assert_non_null(strstr(err.message, "ROW_PULL"));
        assert_non_null(strstr(err.message, "selection 0 (id 5) row 2 at offset 64"));
        assert_non_null(strstr(err.message, "strictly increasing"));
        assert_int_equal(err.offset, 64);
        assert_int_equal(m.request_id, 42);
        free(c);
    }
    pf_wire_in_deinit(&two);
    pf_wire_in_deinit(&in);
}

static void test_row_push_pull_refused(void **state) {
    (void)state;
    pf_wire_in in, one;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_in_init(&one, 0, 1);
    frame f;

    row_push_pull_frame(&f);
    {
        pf_buf b;
        pf_buf_init(&b, 1 << 16);
        assert_int_equal(pf_buf_append(&b, f.b, f.len), PF_OK);
        pf_wire_msg m;
        decode_ok(&in, &b, &m); /* the unmodified frame is fine */
        pf_buf_deinit(&b);
    }
    f.len -= 1;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 179);
    row_push_pull_frame(&f);
    f.len += 8;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 180);

    /* dtype other than f32, width 0 (with rows and without). */
    row_push_pull_frame(&f);
    put32(f.b + 92, 2);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_DTYPE), 92);
    put32(f.b + 92, 0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_DTYPE), 92);
    row_push_pull_frame(&f);
    put32(f.b + 96, 0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 96);
    row_push_pull_frame(&f);
    put32(f.b + 136, 0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 136);

    /* The number of row records: over the limit, over the bytes left. */
    row_push_pull_frame(&f);
    assert_int_equal(fails_frame(&one, &f, PF_WIRE_TOO_LARGE), 84);
    put32(f.b + 84, PF_WIRE_MAX_TENSORS + 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 84);
    put32(f.b + 84, 6); /* 92 bytes left: room for 5 record headers */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 84);

    /* n_rows too large for the bytes left (76 after it: 19 rows). */
    row_push_pull_frame(&f);
    put32(f.b + 100, 20);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 100);
    put32(f.b + 100, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 100);
    /* n_rows x width beyond the bytes left, including products whose byte size wraps 32 bits
     * to 0 (2 x 2^31 x 4 = 2^34) and products near 2^33. */
    row_push_pull_frame(&f);
    put32(f.b + 96, 0x80000000u);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 112);
    put32(f.b + 96, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 112);
    put32(f.b + 96, 9); /* 18 values, 17 left */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 112);

    /* Rows strictly increasing in a record and in the pull's selection. */
    row_push_pull_frame(&f);
    put32(f.b + 108, 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 108);
    put32(f.b + 108, 0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 108);
    row_push_pull_frame(&f);
    put32(f.b + 176, 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 176);

    /* The pull part's counts: n_pull and n_sel against the bytes left. */
    row_push_pull_frame(&f);
    put32(f.b + 152, 1000);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 152);
    row_push_pull_frame(&f);
    put32(f.b + 160, 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 160);

    /* The message names the type, the record, the field and the offset. */
    row_push_pull_frame(&f);
    put32(f.b + 96, 0);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        pf_error err;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_FORMAT);
        assert_non_null(strstr(err.message, "ROW_PUSH_PULL: row record 0 (id 5) has width 0"));
        assert_non_null(strstr(err.message, "offset 96"));
        assert_int_equal(m.type, PF_WIRE_ROW_PUSH_PULL);
        free(c);
    }
    pf_wire_in_deinit(&one);
    pf_wire_in_deinit(&in);
}

/* --- refused messages -------------------------------------------------------------------- */

static void test_encode_rejects(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_out_init(&o);
    pf_error err;
    const uint32_t equal[] = {4, 4}, descending[] = {5, 4}, one = 0;
    float v[2] = {1, 2};
#define REJECT(call, status)                                                                       \
    do {                                                                                           \
        assert_int_equal(pf_wire_encode_stats(&o, 1, NULL), PF_OK);                                \
        assert_int_equal((call), (status));                                                        \
        assert_int_equal(pf_wire_out_len(&o), 0);                                                  \
        assert_true(strlen(err.message) > 0);                                                      \
    } while (0)
#define SEL(s)                         (&(pf_wire_row_pull){0, 0, NULL, 1, (s)})
#define PUSH(r)                        (&(pf_wire_row_push_pull){.n_rows = 1, .rows = (r)})
#define ROWS(id, width, n, rows, data) (&(pf_wire_rows){id, width, n, rows, data, 0, NULL})

    /* Selections: rows equal or descending, rows NULL, a width or data, too many. */
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(ROWS(1, 0, 2, equal, NULL)), &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "strictly increasing"));
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(ROWS(1, 0, 2, descending, NULL)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(ROWS(1, 0, 2, NULL, NULL)), &err), PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(ROWS(1, 2, 1, &one, NULL)), &err), PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(ROWS(1, 0, 1, &one, v)), &err), PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_pull(&o, 1, &(pf_wire_row_pull){0, 0, NULL, 2, NULL}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_pull(
               &o, 1, &(pf_wire_row_pull){0, 0, NULL, PF_WIRE_MAX_TENSORS + 1, golden_sel}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_pull(
               &o, 1, &(pf_wire_row_pull){0, PF_WIRE_MAX_TENSORS + 1, golden_ids, 0, NULL}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_pull(&o, 1, &(pf_wire_row_pull){0, 1, NULL, 0, NULL}, &err),
           PF_ERR_INVALID);

    /* Row records: width 0 (even without rows), data or rows NULL with rows, rows equal or
     * descending, too many; the pull part's selections as above. */
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(ROWS(1, 0, 1, &one, v)), &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "width 0"));
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(ROWS(1, 0, 0, NULL, NULL)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(ROWS(1, 1, 1, &one, NULL)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(ROWS(1, 1, 1, NULL, v)), &err), PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(ROWS(1, 1, 2, equal, v)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(ROWS(1, 1, 2, descending, v)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(
               &o, 1,
               &(pf_wire_row_push_pull){.n_rows = PF_WIRE_MAX_TENSORS + 1, .rows = golden_rec},
               &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(&o, 1, &(pf_wire_row_push_pull){.n_rows = 1}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(
               &o, 1, &(pf_wire_row_push_pull){.pull = {0, 0, NULL, 1, ROWS(1, 0, 2, equal, NULL)}},
               &err),
           PF_ERR_INVALID);
    pf_wire_tensor bad = {0, 2, 1, v};
    REJECT(pf_wire_encode_row_push_pull(
               &o, 1, &(pf_wire_row_push_pull){.push = {.n = 1, .tensors = &bad}}, &err),
           PF_ERR_INVALID);

    /* Over the payload limit, refused before a row or a value is read (one row id and two
     * floats back these): rows alone, n_rows x width alone, and together. */
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(ROWS(1, 0, UINT32_MAX, &one, NULL)), &err),
           PF_ERR_RANGE);
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(ROWS(1, 1u << 29, 2, &one, v)), &err),
           PF_ERR_RANGE);
    REJECT(
        pf_wire_encode_row_push_pull(&o, 1, PUSH(ROWS(1, UINT32_MAX, UINT32_MAX, &one, v)), &err),
        PF_ERR_RANGE);
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(ROWS(1, 1u << 28, 1, &one, v)), &err),
           PF_ERR_RANGE); /* the data alone fits exactly, the head does not */
    assert_non_null(strstr(err.message, "ROW_PUSH_PULL"));

    /* Through pf_wire_encode as well. */
    pf_wire_msg m = {.type = PF_WIRE_ROW_PULL};
    m.u.row_pull = *SEL(ROWS(1, 0, 2, equal, NULL));
    REJECT(pf_wire_encode(&o, &m, &err), PF_ERR_INVALID);
    m = (pf_wire_msg){.type = PF_WIRE_ROW_PUSH_PULL};
    m.u.row_push_pull = *PUSH(ROWS(1, 0, 1, &one, v));
    REJECT(pf_wire_encode(&o, &m, &err), PF_ERR_INVALID);
#undef ROWS
#undef PUSH
#undef SEL
#undef REJECT
    pf_wire_out_deinit(&o);
}

/* --- 64-bit ids ------------------------------------------------------------------------- */

/* Ids of the id64 examples: above 2^32 and up to 2^64 - 1, so no u32 would hold them. */
static const uint64_t ids_3[] = {1, (1ull << 32) + 1, UINT64_MAX};
static const uint64_t ids_2[] = {1ull << 40, UINT64_MAX - 1};
static const uint64_t ids_max[] = {UINT64_MAX};

/* ROW_PULL {min_version 7, ids {3}, selections {5: ids 1 2^32+1 2^64-1}, {6: rows 0 4
 * 70000}, {7: no ids}}: n at 32, the id at 36, n_sel at 40, selection 0's id field at 44
 * (5 | bit 31), its n_rows at 48, its ids at 52, 60, 68 (not multiples of 8); selection 1
 * at 76 (n_rows 80, rows 84 .. 92); selection 2's id field at 96, its n_rows at 100; 104
 * bytes. */
static void id64_pull_frame(frame *f) {
    f_begin(f, PF_WIRE_ROW_PULL);
    f_u64(f, 7);
    f_u32(f, 1);
    f_u32(f, 3);
    f_u32(f, 3);
    f_u32(f, 5 | PF_WIRE_ROWS_ID64);
    f_u32(f, 3);
    for (int i = 0; i < 3; i++)
        f_u64(f, ids_3[i]);
    f_u32(f, 6);
    f_u32(f, 3);
    f_bytes(f, rows_3, sizeof rows_3);
    f_u32(f, 7 | PF_WIRE_ROWS_ID64);
    f_u32(f, 0);
    f_end(f);
    assert_int_equal(f->len, 104);
}

static const pf_wire_rows id64_sel[3] = {{5, 0, 3, NULL, NULL, 1, ids_3},
                                         {6, 0, 3, rows_3, NULL, 0, NULL},
                                         {7, 0, 0, NULL, NULL, 1, NULL}};

/* ROW_PUSH_PULL: the push {task 1, incarnation 2, seq 3, step 4, no tensors}, n_records at
 * 56; record 0 {id 5 | bit 31, width 2, ids 2^40 2^64-2, 4 floats}: id 60, dtype 64, width
 * 68, n_rows 72, ids 76 and 84, data 92; record 1 {id 7, width 3, no rows} at 108 (n_rows
 * 120); the pull {min_version 5, no ids, selection {5 | bit 31: id 2^64-1}}: min_version
 * 124, n 132, n_sel 136, the selection's id field 140, n_rows 144, id 148; 156 bytes. */
static void id64_push_pull_frame(frame *f) {
    f_begin(f, PF_WIRE_ROW_PUSH_PULL);
    f_u32(f, 1);
    f_u64(f, 2);
    f_u64(f, 3);
    f_u64(f, 4);
    f_u32(f, 0);
    f_u32(f, 2);
    f_u32(f, 5 | PF_WIRE_ROWS_ID64);
    f_u32(f, PF_WIRE_F32);
    f_u32(f, 2);
    f_u32(f, 2);
    f_u64(f, ids_2[0]);
    f_u64(f, ids_2[1]);
    f_bytes(f, r4, sizeof r4);
    f_u32(f, 7);
    f_u32(f, PF_WIRE_F32);
    f_u32(f, 3);
    f_u32(f, 0);
    f_u64(f, 5);
    f_u32(f, 0);
    f_u32(f, 1);
    f_u32(f, 5 | PF_WIRE_ROWS_ID64);
    f_u32(f, 1);
    f_u64(f, ids_max[0]);
    f_end(f);
    assert_int_equal(f->len, 156);
}

static const pf_wire_rows id64_rec[2] = {{5, 2, 2, NULL, r4, 1, ids_2},
                                         {7, 3, 0, NULL, NULL, 0, NULL}};
static const pf_wire_rows id64_pp_sel[1] = {{5, 0, 1, NULL, NULL, 1, ids_max}};

/* The encoders write the id64 frames above; the decoder gives them back with the ids
 * copied out of the message, which has them at offsets that are not multiples of 8. */
static void test_id64_layout(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_in in;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_wire_in_init(&in, 0, 0);
    pf_buf_init(&b, 1 << 16);
    frame f;
    pf_wire_msg m = {.type = PF_WIRE_ROW_PULL, .request_id = 42}, d;

    id64_pull_frame(&f);
    m.u.row_pull = (pf_wire_row_pull){7, 1, golden_ids, 3, id64_sel};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, f.len);
    assert_memory_equal(b.data, f.b, f.len);
    /* payload_len = 16 + 4n + sum(8 + 8 n_ids or 4 n_rows) */
    assert_int_equal(get32(b.data + 16), 16 + 4 + (8 + 8 * 3) + (8 + 4 * 3) + 8);
    assert_int_equal(get32(b.data + 44), 5 | PF_WIRE_ROWS_ID64);
    assert_int_equal(get32(b.data + 76), 6);
    assert_int_equal(get32(b.data + 96), 7 | PF_WIRE_ROWS_ID64);
    assert_int_equal((uintptr_t)(b.data + 52) % 8, 4); /* the ids lie misaligned */
    decode_ok(&in, &b, &d);
    assert_int_equal(d.u.row_pull.n, 1);
    assert_int_equal(d.u.row_pull.n_sel, 3);
    assert_row_sets(d.u.row_pull.sel, id64_sel, 3, &b);
    assert_ptr_equal(d.u.row_pull.sel[0].ids, in.id_views);
    assert_true(d.u.row_pull.sel[0].ids[1] == (1ull << 32) + 1);
    assert_true(d.u.row_pull.sel[0].ids[2] == UINT64_MAX);

    id64_push_pull_frame(&f);
    m = (pf_wire_msg){.type = PF_WIRE_ROW_PUSH_PULL, .request_id = 42};
    m.u.row_push_pull =
        (pf_wire_row_push_pull){{1, 2, 3, 4, 0, NULL}, 2, id64_rec, {5, 0, NULL, 1, id64_pp_sel}};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, f.len);
    assert_memory_equal(b.data, f.b, f.len);
    assert_int_equal(o.n_seg, 1);             /* record 0's data; ids are copied into the head */
    assert_int_equal(o.seg[0].pos, 92);       /* after the 8-byte ids */
    assert_int_equal(get32(b.data + 108), 7); /* a u32 record: no flag */
    decode_ok(&in, &b, &d);
    const pf_wire_row_push_pull *got = &d.u.row_push_pull;
    assert_int_equal(got->n_rows, 2);
    assert_row_sets(got->rows, id64_rec, 2, &b);
    assert_int_equal(got->pull.n_sel, 1);
    assert_row_sets(got->pull.sel, id64_pp_sel, 1, &b);
    /* The ids of all of a message's sets in one array: the records', then the selections'. */
    assert_ptr_equal(got->rows[0].ids, in.id_views);
    assert_ptr_equal(got->pull.sel[0].ids, in.id_views + 2);
    assert_ptr_equal(got->rows[0].data, (const float *)(const void *)(b.data + 92));

    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    pf_wire_out_deinit(&o);
}

/* ROW_PULL and ROW_PUSH_PULL mixing u32 and id64 sets (of 0 ids too) round trip; the id
 * array grows while a message's selections are read after its records' ids were copied,
 * and every pointer still points into it; a later, smaller message reuses it. */
static void test_id64_round_trip(void **state) {
    (void)state;
    enum { MANY = 300 };
    static uint64_t many[MANY];
    for (uint32_t i = 0; i < MANY; i++)
        many[i] = UINT64_MAX - (uint64_t)(MANY - 1 - i) * 0x100000001ull;
    const uint32_t ids[] = {4, 0, 9}; /* 3 whole shards: the selections' ids lie misaligned */
    const pf_wire_rows sel[] = {{1, 0, 3, rows_3, NULL, 0, NULL},
                                {2, 0, 0, NULL, NULL, 1, NULL},
                                {3, 0, MANY, NULL, NULL, 1, many},
                                {4, 0, 2, rows_2, NULL, 0, NULL},
                                {0x7fffffffu, 0, 3, NULL, NULL, 1, ids_3}};
    const pf_wire_rows rec[] = {{10, 2, 2, NULL, r4, 1, ids_2},
                                {11, 7, 3, rows_3, r21, 0, NULL},
                                {12, 1, 0, NULL, NULL, 1, NULL},
                                {13, 1, 4, NULL, r4, 1, many + MANY - 4}};
    pf_wire_out o;
    pf_wire_in in;
    pf_buf b;
    pf_wire_out_init(&o);
    pf_wire_in_init(&in, 0, 0);
    pf_buf_init(&b, 1 << 20);
    pf_wire_msg m = {.type = PF_WIRE_ROW_PULL, .request_id = 1}, d;

    /* An id64 set of no ids allocates nothing. */
    m.u.row_pull = (pf_wire_row_pull){1, 0, NULL, 1, sel + 1};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_row_sets(d.u.row_pull.sel, sel + 1, 1, &b);
    assert_null(in.id_views);

    /* A small message: the array holds its 3 ids (at most payload_len / 8). */
    m.u.row_pull = (pf_wire_row_pull){1, 0, NULL, 1, sel + 4};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_row_sets(d.u.row_pull.sel, sel + 4, 1, &b);
    assert_int_equal(d.u.row_pull.sel[0].id, 0x7fffffffu);
    assert_true(in.cap_id_views <= (b.len - 24) / 8);

    m = (pf_wire_msg){.type = PF_WIRE_ROW_PUSH_PULL, .request_id = 2};
    m.u.row_push_pull =
        (pf_wire_row_push_pull){{5, 6, 7, 8, 1, golden_t}, 4, rec, {9, 3, ids, 5, sel}};
    encode_into(&o, &m, &b);
    assert_int_equal(b.len, 24 + 32 + 16 + 12 + 4 + 4 * 16 + (2 * 8 + 3 * 4 + 0 + 4 * 8) +
                                (4 + 21 + 0 + 4) * 4 + 16 + 3 * 4 + 5 * 8 +
                                (3 * 4 + 0 + MANY * 8 + 2 * 4 + 3 * 8));
    pf_wire_in fresh;
    pf_wire_in_init(&fresh, 0, 0);
    for (int k = 0; k < 2; k++) { /* grown from nothing, and from the small message's array */
        pf_wire_in *dec = k ? &in : &fresh;
        decode_ok(dec, &b, &d);
        const pf_wire_row_push_pull *got = &d.u.row_push_pull;
        assert_tensors(got->push.tensors, golden_t, 1, b.data);
        assert_int_equal(got->n_rows, 4);
        assert_row_sets(got->rows, rec, 4, &b);
        assert_int_equal(got->pull.n, 3);
        assert_memory_equal(got->pull.ids, ids, sizeof ids);
        assert_int_equal(got->pull.n_sel, 5);
        assert_row_sets(got->pull.sel, sel, 5, &b);
        /* In order in the one array: 2 + 4 ids of the records, then MANY + 3. */
        assert_ptr_equal(got->rows[0].ids, dec->id_views);
        assert_ptr_equal(got->rows[3].ids, dec->id_views + 2);
        assert_ptr_equal(got->pull.sel[2].ids, dec->id_views + 6);
        assert_ptr_equal(got->pull.sel[4].ids, dec->id_views + 6 + MANY);
        assert_true(dec->cap_id_views >= 6 + MANY + 3);
        assert_true(dec->cap_id_views <= (b.len - 24) / 8);
    }
    pf_wire_in_deinit(&fresh);

    /* A smaller message reuses the array (no allocation, no move, no shrink), and so does
     * one with no ids at all. */
    uint64_t *views = in.id_views;
    uint64_t cap = in.cap_id_views;
    use_counting(-1);
    m = (pf_wire_msg){.type = PF_WIRE_ROW_PULL, .request_id = 3};
    m.u.row_pull = (pf_wire_row_pull){2, 0, NULL, 3, sel + 2};
    encode_into(&o, &m, &b);
    long before = alloc_count;
    decode_ok(&in, &b, &d);
    m.u.row_pull = (pf_wire_row_pull){3, 0, NULL, 1, sel + 1};
    encode_into(&o, &m, &b);
    decode_ok(&in, &b, &d);
    assert_int_equal(alloc_count, before);
    use_libc();
    assert_ptr_equal(in.id_views, views);
    assert_true(in.cap_id_views == cap);
    assert_int_equal(d.u.row_pull.sel[0].id64, 1);
    assert_null(d.u.row_pull.sel[0].ids);

    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    assert_null(in.id_views);
    pf_wire_out_deinit(&o);
}

/* Growing the id views may fail: NOMEM, wire code INTERNAL. */
static void test_id64_alloc_failure(void **state) {
    (void)state;
    frame f;
    id64_pull_frame(&f);
    uint8_t *c = heap_copy(f.b, f.len);
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_msg m;
    pf_error err;
    use_counting(1); /* the selection views, then not the id views */
    assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_NOMEM);
    assert_int_equal(pf_wire_in_code(&in), PF_WIRE_INTERNAL);
    assert_non_null(strstr(err.message, "id views"));
    use_libc();
    assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_OK);
    pf_wire_in_deinit(&in);
    free(c);
}

static void test_id64_refused(void **state) {
    (void)state;
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    frame f;

    /* Ids strictly increasing as u64: equal, descending, and below a 2^64 - 1 before them. */
    id64_pull_frame(&f);
    put64(f.b + 60, 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 60);
    id64_pull_frame(&f);
    put64(f.b + 68, 5);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 68);
    id64_pull_frame(&f);
    put64(f.b + 52, UINT64_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 60);
    id64_push_pull_frame(&f);
    put64(f.b + 84, 1ull << 40);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 84);
    id64_push_pull_frame(&f);
    put32(f.b + 144, 2); /* the selection's second id is past the end */
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 144);

    /* n_rows counts 8 bytes an id: 52 bytes after selection 0's n_rows hold 6 ids (13 u32
     * rows), and after selection 2's nothing is left. */
    id64_pull_frame(&f);
    put32(f.b + 48, 7);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 48);
    put32(f.b + 48, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 48);
    id64_pull_frame(&f);
    put32(f.b + 100, 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 100);
    /* Without the flag the same bytes are u32 rows: 1, 0 (the low and high half of the first
     * id), refused at the second. */
    id64_pull_frame(&f);
    put32(f.b + 44, 5);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 56);

    /* Truncated: the frame shorter than payload_len, and a self-consistent frame cut inside
     * a record's ids (one record, 4 bytes of its 16 left) or data (8 bytes of its 16), or
     * data longer than what follows (width 17: 136 bytes, 64 left). */
    id64_push_pull_frame(&f);
    f.len -= 1;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 155);
    id64_push_pull_frame(&f);
    put32(f.b + 56, 1);
    f.len = 80;
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 72);
    id64_push_pull_frame(&f);
    f.len = 100;
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 92);
    id64_push_pull_frame(&f);
    put32(f.b + 68, 17);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 92);

    /* The message names the type, the set, its shard id (without the flag) and the offset. */
    id64_pull_frame(&f);
    put64(f.b + 60, 0);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        pf_error err;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_FORMAT);
        assert_non_null(strstr(err.message, "ROW_PULL"));
        assert_non_null(strstr(err.message, "selection 0 (id 5) 64-bit id 1 at offset 60"));
        assert_non_null(strstr(err.message, "strictly increasing"));
        assert_int_equal(err.offset, 60);
        free(c);
    }
    id64_push_pull_frame(&f);
    put32(f.b + 72, 11); /* 80 bytes left: 10 ids */
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        pf_error err;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_FORMAT);
        assert_non_null(strstr(err.message, "ROW_PUSH_PULL: row record 0 (id 5) n_rows 11 at "
                                            "offset 72"));
        assert_non_null(strstr(err.message, "88 bytes of 64-bit ids"));
        free(c);
    }
    pf_wire_in_deinit(&in);
}

static void test_id64_encode_rejects(void **state) {
    (void)state;
    pf_wire_out o;
    pf_wire_out_init(&o);
    pf_error err;
    const uint64_t equal[] = {1ull << 40, 1ull << 40}, descending[] = {UINT64_MAX, 0};
    const uint32_t one = 0;
    float v[2] = {1, 2};
#define REJECT(call, status)                                                                       \
    do {                                                                                           \
        assert_int_equal(pf_wire_encode_stats(&o, 1, NULL), PF_OK);                                \
        assert_int_equal((call), (status));                                                        \
        assert_int_equal(pf_wire_out_len(&o), 0);                                                  \
        assert_true(strlen(err.message) > 0);                                                      \
    } while (0)
#define SEL(s)  (&(pf_wire_row_pull){0, 0, NULL, 1, (s)})
#define PUSH(r) (&(pf_wire_row_push_pull){.n_rows = 1, .rows = (r)})
#define SET(id, width, n, rows, data, id64, ids)                                                   \
    (&(pf_wire_rows){id, width, n, rows, data, id64, ids})

    /* Both rows and ids, either way round, with rows or without. */
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(SET(1, 0, 1, &one, NULL, 1, ids_max)), &err),
           PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "not both"));
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(SET(1, 0, 1, &one, NULL, 0, ids_max)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(SET(1, 0, 0, &one, NULL, 1, NULL)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(SET(1, 2, 1, &one, v, 1, ids_max)), &err),
           PF_ERR_INVALID);
    /* Ids NULL with ids to send; ids equal or descending (as unsigned 64-bit numbers). */
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(SET(1, 0, 1, NULL, NULL, 1, NULL)), &err),
           PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "no 64-bit ids"));
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(SET(1, 1, 1, NULL, v, 1, NULL)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(SET(1, 1, 1, NULL, NULL, 1, ids_max)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(SET(1, 0, 2, NULL, NULL, 1, equal)), &err),
           PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "selection 0 (id 1) 64-bit id 1"));
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(SET(1, 0, 2, NULL, NULL, 1, descending)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(&o, 1, PUSH(SET(1, 1, 2, NULL, v, 1, descending)), &err),
           PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "strictly increasing"));
    /* A shard id with bit 31 set: the flag is id64's to set, for any set. */
    REJECT(pf_wire_encode_row_pull(
               &o, 1, SEL(SET(5 | PF_WIRE_ROWS_ID64, 0, 1, NULL, NULL, 1, ids_max)), &err),
           PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "bit 31"));
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(SET(UINT32_MAX, 0, 0, NULL, NULL, 0, NULL)), &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_row_push_pull(
               &o, 1, PUSH(SET(5 | PF_WIRE_ROWS_ID64, 1, 1, &one, v, 0, NULL)), &err),
           PF_ERR_INVALID);
    /* Sizes count 8 bytes an id: 2^27 ids are the whole payload limit, as rows half of it
     * (refused before an id is read: one backs them). */
    REJECT(pf_wire_encode_row_pull(&o, 1, SEL(SET(1, 0, 1u << 27, NULL, NULL, 1, ids_max)), &err),
           PF_ERR_RANGE);
    REJECT(
        pf_wire_encode_row_push_pull(&o, 1, PUSH(SET(1, 2, 1u << 26, NULL, v, 1, ids_max)), &err),
        PF_ERR_RANGE); /* 2^29 bytes of ids and 2^29 of data: the head pushes it over */
    /* Through pf_wire_encode as well. */
    pf_wire_msg m = {.type = PF_WIRE_ROW_PULL};
    m.u.row_pull = *SEL(SET(1, 0, 2, NULL, NULL, 1, equal));
    REJECT(pf_wire_encode(&o, &m, &err), PF_ERR_INVALID);
#undef SET
#undef PUSH
#undef SEL
#undef REJECT
    pf_wire_out_deinit(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_no_alloc_when_warm),
        cmocka_unit_test(test_decoder_alloc_failure),
        cmocka_unit_test(test_not_placed),
        cmocka_unit_test(test_row_pull_refused),
        cmocka_unit_test(test_row_push_pull_refused),
        cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_id64_layout),
        cmocka_unit_test(test_id64_round_trip),
        cmocka_unit_test(test_id64_alloc_failure),
        cmocka_unit_test(test_id64_refused),
        cmocka_unit_test(test_id64_encode_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
