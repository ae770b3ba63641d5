/* wire_internal.h - what the data-plane codec's two halves share, private to common/dataplane/:
 * wire.c decodes (and holds the names and the UTF-8 checks), wire_encode.c encodes. Here are
 * the host checks they both rely on, the sizes of the fixed parts of each payload and the
 * explicit little-endian loads and stores every field goes through (api/wire.md).
 */
#ifndef PSFLOW_DATAPLANE_WIRE_INTERNAL_H
#define PSFLOW_DATAPLANE_WIRE_INTERNAL_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/wire.h"

/* Tensor data is exposed as host floats and written from them unchanged, which is only
 * right on little-endian hosts with IEEE-754 binary32 floats. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "psflow's data plane needs a little-endian host"
#endif
#if defined(__FLOAT_WORD_ORDER__) && __FLOAT_WORD_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "psflow's data plane needs little-endian floats"
#endif
_Static_assert(sizeof(float) == 4 && FLT_RADIX == 2 && FLT_MANT_DIG == 24 && FLT_MAX_EXP == 128,
               "float must be IEEE-754 binary32");
_Static_assert(PF_WIRE_HEADER_SIZE == 4 + 2 + 2 + 4 + 4 + 8, "header is 24 bytes");
_Static_assert(PF_WIRE_HEADER_SIZE % 8 == 0, "the payload starts 8-byte aligned");
_Static_assert(PF_WIRE_MAX_PAYLOAD <= SIZE_MAX / 2, "a whole message fits in size_t");

/* Sizes of the fixed parts of each payload (api/wire.md). */
enum {
    HELLO_FIXED = 20,          /* role, pad[3], task_index, incarnation, job length */
    HELLO_ACK_SIZE = 24,       /* ps_task, ps_incarnation, version, n_shards */
    PULL_FIXED = 12,           /* min_version, n */
    PULL_REPLY_FIXED = 16,     /* version, push_result, n */
    PUSH_FIXED = 32,           /* task_index, incarnation, seq, step, n */
    PUSH_ACK_SIZE = 20,        /* seq, result, version */
    STATS_REPLY_FIXED = 4,     /* json length */
    CHECKPOINT_SIZE = 12,      /* step, final */
    RESTORE_SIZE = 12,         /* step, lr_factor */
    CHECKPOINT_ACK_FIXED = 16, /* step, status, path length */
    ERROR_FIXED = 8,           /* code, message length */
    TENSOR_HEADER = PF_WIRE_TENSOR_HEADER,
    ROW_PULL_FIXED = 16,      /* min_version, n, n_sel (ids and selections in between) */
    ROW_RECORDS_FIXED = 4,    /* n_records, after the push part of a ROW_PUSH_PULL */
    SELECTION_HEADER = 8,     /* id, n_rows before a selection's rows */
    ROW_RECORD_HEADER = 16,   /* id, dtype, width, n_rows before a row record's rows and data */
    SEG_ATTACH_SIZE = 32,     /* pid, fd, size, token */
    SEG_PULL_FIXED = 16,      /* min_version, n, reserved */
    SEG_PUSH_PULL_FIXED = 48, /* task_index, incarnation, seq, step, min_version, n, 2 reserved */
    SEG_RECORD = 32,          /* id, dtype, count, grad, value */
    LEASE_FIXED = 20,         /* epoch, n_splits, want, n_done (the done indices follow) */
    LEASE_REPLY_SIZE = 24     /* state, split, epoch, accepted, refused */
};
_Static_assert(SEG_ATTACH_SIZE == 16 + PF_WIRE_SEG_TOKEN_SIZE, "SEG_ATTACH carries the token");

/* 1 when `count` floats from byte offset `off` end at or below 2^64 - 1, the check every
 * segment record's grad and value ranges pass on both sides (api/wire.md). */
static inline int seg_range_fits(uint64_t off, uint64_t count) {
    return count <= (UINT64_MAX - off) / 4;
}

/* --- little-endian loads and stores ------------------------------------------------------ */

static inline uint16_t ld16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t ld64(const uint8_t *p) {
    return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static inline void st16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void st32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void st64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* --- UTF-8 (wire.c) ------------------------------------------------------------------------ */

/* Index of the first byte of s[0 .. n) that is not well-formed UTF-8 or is NUL, or n. */
size_t wire_utf8_check(const uint8_t *s, size_t n);

/* Copies at most `limit` bytes of s to dst (when dst is not NULL), replacing each byte
 * that does not start a well-formed sequence with '?' and never cutting a sequence.
 * Returns the output length. */
size_t wire_utf8_sanitize(const uint8_t *s, size_t n, uint8_t *dst, size_t limit);

#endif
