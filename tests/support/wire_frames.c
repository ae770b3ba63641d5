/* wire_frames.c - the codec tests' shared helpers (see wire_frames.h). */
#include "tests/support/wire_frames.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Encodes m and gathers it into b (reset first). */
void encode_into(pf_wire_out *o, const pf_wire_msg *m, pf_buf *b) {
    pf_error err;
    pf_status st = pf_wire_encode(o, m, &err);
    if (st != PF_OK)
        fail_msg("encode %s: %s", pf_wire_type_name(m->type), err.message);
    pf_buf_reset(b);
    assert_int_equal(pf_wire_out_gather(o, b), PF_OK);
    assert_int_equal(b->len, pf_wire_out_len(o));
}

/* Decodes b expecting success. */
void decode_ok(pf_wire_in *in, const pf_buf *b, pf_wire_msg *m) {
    pf_error err;
    pf_status st = pf_wire_decode(in, b->data, b->len, m, &err);
    if (st != PF_OK)
        fail_msg("decode: %s (offset %lld)", err.message, err.offset);
    assert_int_equal(pf_wire_in_code(in), PF_WIRE_OK);
}

/* Decodes data expecting the given wire code; checks a message was written and returns
 * the error's offset. */
long long decode_fails(pf_wire_in *in, const void *data, size_t len, pf_wire_code code) {
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

void assert_str(pf_wire_str s, const char *want) {
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.ptr, want, s.len);
}

void assert_tensors(const pf_wire_tensor *got, const pf_wire_tensor *want, uint32_t n,
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

void f_begin(frame *f, uint16_t type) {
    memset(f, 0, sizeof *f);
    memcpy(f->b, "PSFW", 4);
    f->b[4] = 1;
    f->b[6] = (uint8_t)type;
    put32(f->b + 8, 42);
    f->len = PF_WIRE_HEADER_SIZE;
}

void f_u8(frame *f, uint8_t v) {
    f->b[f->len++] = v;
}

void f_u32(frame *f, uint32_t v) {
    put32(f->b + f->len, v);
    f->len += 4;
}

void f_u64(frame *f, uint64_t v) {
    put64(f->b + f->len, v);
    f->len += 8;
}

void f_bytes(frame *f, const void *p, size_t n) {
    memcpy(f->b + f->len, p, n);
    f->len += n;
}

/* Sets payload_len to what was written. */
void f_end(frame *f) {
    put64(f->b + 16, f->len - PF_WIRE_HEADER_SIZE);
}

/* Copies a frame to an exactly sized heap block so ASan sees any read past its end. */
uint8_t *heap_copy(const void *p, size_t n) {
    uint8_t *c = malloc(n ? n : 1);
    assert_non_null(c);
    if (n)
        memcpy(c, p, n);
    return c;
}

long long fails_frame(pf_wire_in *in, const frame *f, pf_wire_code code) {
    uint8_t *c = heap_copy(f->b, f->len);
    long long off = decode_fails(in, c, f->len, code);
    free(c);
    return off;
}

float d0[3] = {1.0f, -2.5f, 3.25f};
float d1[7] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f};
float d2[1] = {-0.0f};
