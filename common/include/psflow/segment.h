/* segment.h - the shared-memory segment a worker and a ps on one host exchange values and
 * gradients through instead of the socket (api/wire.md, "Shared segment").
 *
 * The worker makes the segment: a memfd of a fixed size, sealed so that nobody can shrink
 * or grow it (a ps that maps it can never be handed a SIGBUS by a shorter file), whose first
 * PF_WIRE_SEG_TOKEN_SIZE bytes are random. It keeps its parameter and gradient vectors in
 * it and names the segment to each ps by process id, descriptor number and token
 * (SEG_ATTACH). The ps opens /proc/<pid>/fd/<fd>, checks that it is such a segment and the
 * one meant (below), and maps it; from then on a request names byte offsets in it, which the
 * ps checks against the size before it reads or writes there.
 *
 * Either side turns the path off with PSFLOW_SHM=off (or 0, false, no): the worker then
 * makes no segment, the ps refuses every SEG_ATTACH, and everything goes over the socket.
 */
#ifndef PSFLOW_SEGMENT_H
#define PSFLOW_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/status.h"
#include "psflow/wire.h"

#define PF_SEGMENT_NAME "psflow-segment" /* the memfd's name, as /proc shows it */
#define PF_SEGMENT_HEAD 64               /* the token's room: the parameters start here */

typedef struct pf_segment {
    uint8_t *base; /* the mapping, NULL when none */
    size_t size;   /* bytes */
    int fd;        /* the worker's descriptor (-1 on the ps side: it keeps only the mapping) */
    uint8_t token[PF_WIRE_SEG_TOKEN_SIZE];
} pf_segment;

/* The layout of a worker's segment for a parameter vector of n floats: the head
 * (PF_SEGMENT_HEAD bytes, the token first), the parameters, then the gradients at *grads_at
 * (may be NULL), each vector 64-byte aligned. Returns the segment's bytes: what the worker
 * makes, and the most a ps takes for its job's parameter count. */
size_t pf_segment_bytes(uint64_t n, size_t *grads_at);

/* 0 when PSFLOW_SHM says off (off, 0, false, no), else 1. */
int pf_segment_enabled(void);

/* Worker: a sealed memfd segment of `size` bytes (> PF_WIRE_SEG_TOKEN_SIZE), mapped and
 * zero apart from its random token, which also lies in out->token. Errors: PF_ERR_IO (no
 * memfd, sealing or mapping: the message says which), PF_ERR_INVALID (size too small). */
pf_status pf_segment_create(size_t size, pf_segment *out, pf_error *err);

/* ps: maps the segment that process `pid` holds as descriptor `fd`, which must be a psflow
 * memfd (its /proc link names "memfd:" PF_SEGMENT_NAME, read without following it) in
 * ordinary shared memory (not huge pages), owned by this process's user, exactly `size`
 * bytes (at most `limit`), sealed against shrinking, whose first bytes equal `token`. It is
 * opened only after those checks on its link and inode, without blocking, so a peer that
 * names a FIFO, a device, a file on a hung mount or any other file gets a refusal and
 * nothing else. Errors: PF_ERR_INVALID with the reason in err (a segment this ps cannot or
 * must not use). */
pf_status pf_segment_open(uint32_t pid, uint32_t fd, uint64_t size, const uint8_t *token,
                          uint64_t limit, pf_segment *out, pf_error *err);

/* ps: the same checks and mapping for a descriptor handed over by the worker (SCM_RIGHTS,
 * seg_handoff.h) instead of named by process id: fd must be open for reading and writing.
 * The caller still owns fd (the mapping does not need it). */
pf_status pf_segment_open_fd(int fd, uint64_t size, const uint8_t *token, uint64_t limit,
                             pf_segment *out, pf_error *err);

/* Worker: 1 when `host` (a name or an address) resolves to this host - a loopback address or
 * one of this host's interfaces - so a ps there may be offered the segment; 0 otherwise or
 * when it does not resolve. No ps elsewhere learns the segment's token. */
int pf_segment_host_is_local(const char *host);

/* Unmaps (and on the worker's side closes) the segment; safe on a zeroed or closed one. */
void pf_segment_close(pf_segment *s);

/* 1 when [p, p + bytes) lies inside the segment. */
static inline int pf_segment_holds(const pf_segment *s, const void *p, size_t bytes) {
    const uint8_t *b = p;
    return s->base && b >= s->base && b <= s->base + s->size &&
           bytes <= (size_t)(s->base + s->size - b);
}

#endif
