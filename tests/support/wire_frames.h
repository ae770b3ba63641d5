/* wire_frames.h - what the codec's tests share: little-endian stores, encoding into and
 * decoding from a pf_buf with the expected outcome, frames built field by field (to make
 * every kind of malformed one), and a few tensors of data. Failures are cmocka failures.
 */
#ifndef PSFLOW_TESTS_WIRE_FRAMES_H
#define PSFLOW_TESTS_WIRE_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/buf.h"
#include "psflow/wire.h"

uint32_t get32(const uint8_t *p);
void put32(uint8_t *p, uint32_t v);
void put64(uint8_t *p, uint64_t v);

/* Encodes m and gathers it into b (reset first). */
void encode_into(pf_wire_out *o, const pf_wire_msg *m, pf_buf *b);

/* Decodes b expecting success. */
void decode_ok(pf_wire_in *in, const pf_buf *b, pf_wire_msg *m);

/* Decodes data expecting the given wire code; checks a message was written and returns
 * the error's offset. */
long long decode_fails(pf_wire_in *in, const void *data, size_t len, pf_wire_code code);

void assert_str(pf_wire_str s, const char *want);

/* got[0 .. n) has want's ids, counts and values, aligned in msg and in memory. */
void assert_tensors(const pf_wire_tensor *got, const pf_wire_tensor *want, uint32_t n,
                    const uint8_t *msg);

/* A hand-built frame: header + payload written field by field. */
typedef struct frame {
    uint8_t b[8192];
    size_t len;
} frame;

/* A header of the given type (request_id 42, payload_len set by f_end). */
void f_begin(frame *f, uint16_t type);
void f_u8(frame *f, uint8_t v);
void f_u32(frame *f, uint32_t v);
void f_u64(frame *f, uint64_t v);
void f_bytes(frame *f, const void *p, size_t n);
/* Sets payload_len to what was written. */
void f_end(frame *f);

/* Copies a frame to an exactly sized heap block so ASan sees any read past its end. */
uint8_t *heap_copy(const void *p, size_t n);

/* decode_fails on a heap copy of f. */
long long fails_frame(pf_wire_in *in, const frame *f, pf_wire_code code);

/* Shared tensor data. */
extern float d0[3], d1[7], d2[1];

#endif
