/* buf.h - a growable byte buffer that is reused across messages.
 *
 * A pf_buf is caller storage (pf_buf_init/pf_buf_deinit) holding `len` bytes in a block
 * of `cap` bytes. It grows geometrically (doubling, at least 64 bytes) through the
 * checked allocator of mem.h and never beyond the hard cap `max` given at init, so a
 * length taken from the network cannot make it allocate more than the caller allowed.
 * pf_buf_reset() empties it but keeps the block: a connection's send or receive buffer is
 * allocated while it warms up and then never again. The block comes from pf_malloc, so
 * `data` is aligned for any type.
 *
 * Not thread-safe: one buffer, one thread at a time.
 */
#ifndef PSFLOW_BUF_H
#define PSFLOW_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/status.h"

typedef struct pf_buf {
    uint8_t *data; /* cap bytes, owned; NULL until the first growth */
    size_t len;    /* bytes in use */
    size_t cap;    /* bytes allocated */
    size_t max;    /* hard cap on cap */
} pf_buf;

/* --- lifecycle ------------------------------------------------------------------------- */

/* An empty buffer that will never hold more than `max` bytes (max > 0). Allocates
 * nothing. */
void pf_buf_init(pf_buf *b, size_t max);

/* Frees the block and zeroes b (max included); safe on a zeroed or deinit'ed buffer. */
void pf_buf_deinit(pf_buf *b);

/* --- use ------------------------------------------------------------------------------- */

/* Makes room for `extra` more bytes after len (cap >= len + extra), growing
 * geometrically. Errors: PF_ERR_RANGE (len + extra exceeds max or overflows; nothing
 * changes), PF_ERR_NOMEM (b unchanged). */
pf_status pf_buf_reserve(pf_buf *b, size_t extra);

/* Appends n bytes from p (p may be NULL when n is 0). Errors as pf_buf_reserve; on error
 * b is unchanged. */
pf_status pf_buf_append(pf_buf *b, const void *p, size_t n);

/* Grows len by n and points *out at the n new (uninitialised) bytes, for callers that
 * fill them in place. *out is valid until the next growth (and NULL when n is 0 before
 * anything was allocated). Errors as pf_buf_reserve; on error b is unchanged and *out is
 * NULL. */
pf_status pf_buf_extend(pf_buf *b, size_t n, void **out);

/* Appends printf-style text. After a success data[len] is a NUL byte (not counted in len),
 * so a buffer filled only by these calls reads as a C string. Errors as pf_buf_reserve
 * (the text and its NUL must fit under max), PF_ERR_INVALID (an encoding error in fmt); on
 * error len is unchanged. */
pf_status pf_buf_printf(pf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
pf_status pf_buf_vprintf(pf_buf *b, const char *fmt, va_list ap);

/* Writes a NUL byte at data[len], not counted in len, so bytes appended with pf_buf_append
 * read as a C string. Errors as pf_buf_reserve for one byte; b is unchanged on error. */
pf_status pf_buf_terminate(pf_buf *b);

/* Sets len to 0 and keeps the block. */
void pf_buf_reset(pf_buf *b);

/* Hands the block to the caller (new: pf_free it) and leaves b empty with the same max.
 * NULL when nothing was ever allocated. */
void *pf_buf_detach(pf_buf *b);

#endif
