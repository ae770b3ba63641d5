/* test_wire_invalid.c - frames the codec must refuse: every class of malformed header and
 * payload (right wire code, message and offset), what encoders refuse to produce, ERROR
 * texts cut and cleaned, and the frames under tests/data/wire/{valid,invalid}/.
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
#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/wire.h"
#include "tests/support/counting_alloc.h"
#include "tests/support/wire_frames.h"
#include "tests/support/data_files.h"

#define WIRE_DIR  PSFLOW_TEST_DATA "/wire"
#define MAX_FILES 256

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
    f_begin(&f, PF_WIRE_LEASE_REPLY + 1);
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
    /* RESTORE: the learning-rate factor in (0, 1]; 0, above 1 and NaN are refused. */
    static const uint32_t factors[] = {0x00000000u, 0x3fc00000u /* 1.5 */, 0x7fc00000u /* NaN */,
                                       0xbf800000u /* -1 */};
    for (size_t i = 0; i < sizeof factors / sizeof factors[0]; i++) {
        f_begin(&f, PF_WIRE_RESTORE);
        f_u64(&f, 40);
        f_u32(&f, factors[i]);
        f_end(&f);
        assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 32);
    }
    f_begin(&f, PF_WIRE_RESTORE); /* the step alone: the factor is missing */
    f_u64(&f, 40);
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
    hello_frame(&f, 5, "j", 1);
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

/* A LEASE of epoch 3 over 10 splits, want 1, done {7, 2}: n_splits at 32, want at 36,
 * n_done at 40, done[0] at 44, done[1] at 48; 52 bytes. */
static void lease_frame(frame *f) {
    f_begin(f, PF_WIRE_LEASE);
    f_u64(f, 3);
    f_u32(f, 10);
    f_u32(f, 1);
    f_u32(f, 2);
    f_u32(f, 7);
    f_u32(f, 2);
    f_end(f);
    assert_int_equal(f->len, 52);
}

/* A LEASE_REPLY {GRANTED, split 5, epoch 3, accepted 2, refused 0}: 48 bytes. */
static void lease_reply_frame(frame *f) {
    f_begin(f, PF_WIRE_LEASE_REPLY);
    f_u32(f, PF_WIRE_LEASE_GRANTED);
    f_u32(f, 5);
    f_u64(f, 3);
    f_u32(f, 2);
    f_u32(f, 0);
    f_end(f);
    assert_int_equal(f->len, 48);
}

static void test_invalid_lease(void **state) {
    (void)state;
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    frame f;

    lease_frame(&f);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, NULL), PF_OK);
        assert_int_equal(m.u.lease.n_done, 2);
        free(c);
    }
    /* Fewer bytes than payload_len, bytes after it. */
    f.len -= 4;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 48);
    lease_frame(&f);
    f.len += 4;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 52);
    /* n_done says 3, 2 are present; n_done 1 leaves a trailing index. */
    lease_frame(&f);
    put32(f.b + 40, 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 40);
    put32(f.b + 40, 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 48);
    /* A payload shorter than the fixed fields (n_done missing). */
    f_begin(&f, PF_WIRE_LEASE);
    f_u64(&f, 3);
    f_u32(&f, 10);
    f_u32(&f, 1);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 24);
    /* n_done over PF_WIRE_MAX_TENSORS, before anything is read by it. */
    lease_frame(&f);
    put32(f.b + 40, PF_WIRE_MAX_TENSORS + 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 40);
    put32(f.b + 40, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TOO_LARGE), 40);
    /* want 2; n_splits 0 and over PF_WIRE_MAX_SPLITS. */
    lease_frame(&f);
    put32(f.b + 36, 2);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 36);
    put32(f.b + 36, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 36);
    lease_frame(&f);
    put32(f.b + 32, 0);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 32);
    put32(f.b + 32, PF_WIRE_MAX_SPLITS + 1);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 32);
    put32(f.b + 32, PF_WIRE_MAX_SPLITS); /* the limit itself is fine */
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, NULL), PF_OK);
        free(c);
    }
    /* A done index at or past n_splits, named by its position and offset. */
    lease_frame(&f);
    put32(f.b + 48, 10);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 48);
    {
        uint8_t *c = heap_copy(f.b, f.len);
        pf_wire_msg m;
        pf_error err;
        assert_int_equal(pf_wire_decode(&in, c, f.len, &m, &err), PF_ERR_FORMAT);
        assert_non_null(strstr(err.message, "LEASE"));
        assert_non_null(strstr(err.message, "done[1] = 10"));
        assert_int_equal(m.type, PF_WIRE_LEASE);
        assert_int_equal(m.request_id, 42);
        free(c);
    }
    put32(f.b + 48, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 48);
    put32(f.b + 48, 9);
    put32(f.b + 44, 12);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 44);

    /* LEASE_REPLY: state 3 and beyond; exactly 24 payload bytes. */
    lease_reply_frame(&f);
    put32(f.b + 24, 3);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 24);
    put32(f.b + 24, UINT32_MAX);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_VALUE), 24);
    lease_reply_frame(&f);
    f.len -= 1;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_TRUNCATED), 47);
    lease_reply_frame(&f);
    put64(f.b + 16, 23);
    f.len = 47;
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 24);
    lease_reply_frame(&f);
    f_u32(&f, 0);
    f_end(&f);
    assert_int_equal(fails_frame(&in, &f, PF_WIRE_BAD_LENGTH), 48);
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

    REJECT(pf_wire_encode_hello(&o, 1, &(pf_wire_hello){5, 0, 0, {"j", 1}}, &err), PF_ERR_INVALID);
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
    const uint32_t done[] = {3, 9, 10};
    REJECT(pf_wire_encode_lease(&o, 1, &(pf_wire_lease){0, 10, 2, 0, NULL}, &err),
           PF_ERR_INVALID); /* want 2 */
    REJECT(pf_wire_encode_lease(&o, 1, &(pf_wire_lease){0, 0, 1, 0, NULL}, &err), PF_ERR_INVALID);
    REJECT(
        pf_wire_encode_lease(&o, 1, &(pf_wire_lease){0, PF_WIRE_MAX_SPLITS + 1, 1, 0, NULL}, &err),
        PF_ERR_INVALID);
    REJECT(pf_wire_encode_lease(&o, 1, &(pf_wire_lease){0, 10, 1, 3, done}, &err),
           PF_ERR_INVALID); /* done[2] = 10 is not a split of 10 */
    assert_non_null(strstr(err.message, "done[2] = 10"));
    REJECT(pf_wire_encode_lease(&o, 1, &(pf_wire_lease){0, 10, 1, 2, NULL}, &err), PF_ERR_INVALID);
    REJECT(pf_wire_encode_lease(&o, 1, &(pf_wire_lease){0, 10, 1, PF_WIRE_MAX_TENSORS + 1, done},
                                &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode_lease_reply(&o, 1, &(pf_wire_lease_reply){3, 0, 0, 0, 0}, &err),
           PF_ERR_INVALID);
    REJECT(pf_wire_encode(&o, &(pf_wire_msg){.type = PF_WIRE_LEASE_REPLY, .u.lease_reply.state = 9},
                          &err),
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

static void test_valid_files(void **state) {
    (void)state;
    char *names[MAX_FILES];
    size_t n = data_files(WIRE_DIR "/valid", ".bin", false, names, MAX_FILES);
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
        uint8_t *data = (uint8_t *)data_read(path, 65535, &len);
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
        pf_free(data);
        free(names[i]);
    }
    /* Every message type has a valid example (the authentication exchange and RESTORE are
     * test_wire_auth.c's and test_wire.c's). */
    for (unsigned t = PF_WIRE_HELLO; t <= PF_WIRE_LEASE_REPLY; t++)
        if (!(seen & 1u << t) && (t <= PF_WIRE_ERROR || t >= PF_WIRE_ROW_PULL))
            fail_msg("no valid example of %s", pf_wire_type_name(t));
    pf_buf_deinit(&b);
    pf_wire_out_deinit(&o);
    pf_wire_in_deinit(&in);
}

static void test_invalid_files(void **state) {
    (void)state;
    char *names[MAX_FILES];
    size_t n = data_files(WIRE_DIR "/invalid", ".bin", false, names, MAX_FILES);
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
        uint8_t *data = (uint8_t *)data_read(path, 65535, &len);
        pf_wire_msg m;
        pf_error err;
        if (pf_wire_decode(&in, data, len, &m, &err) == PF_OK)
            fail_msg("%s: decoded, expected %s", names[i], want);
        if (strcmp(pf_wire_code_name(pf_wire_in_code(&in)), want) != 0)
            fail_msg("%s: got %s (%s), expected %s", names[i],
                     pf_wire_code_name(pf_wire_in_code(&in)), err.message, want);
        assert_true(strlen(err.message) > 0);
        assert_true(err.offset >= 0 && (size_t)err.offset <= len);
        pf_free(data);
        free(names[i]);
    }
    pf_wire_in_deinit(&in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_header), cmocka_unit_test(test_invalid_payload),
        cmocka_unit_test(test_invalid_lease),  cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_error_text),     cmocka_unit_test(test_valid_files),
        cmocka_unit_test(test_invalid_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
