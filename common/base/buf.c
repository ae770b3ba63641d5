/* buf.c - growable byte buffer with a hard cap (see buf.h). */
#include "psflow/buf.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"

#define MIN_CAP 64

void pf_buf_init(pf_buf *b, size_t max) {
    assert(b && max > 0);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void pf_buf_deinit(pf_buf *b) {
    if (!b)
        return;
    pf_free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = 0;
}

pf_status pf_buf_reserve(pf_buf *b, size_t extra) {
    if (extra > b->max || b->len > b->max - extra)
        return PF_ERR_RANGE; /* also catches len + extra overflowing size_t */
    size_t need = b->len + extra;
    if (need <= b->cap)
        return PF_OK;
    /* Double from the current capacity; the cap bounds every step, so no overflow. */
    size_t cap = b->cap ? b->cap : MIN_CAP;
    while (cap < need)
        cap = cap > b->max / 2 ? b->max : cap * 2;
    if (cap > b->max)
        cap = b->max;
    uint8_t *p = pf_realloc(b->data, cap);
    if (!p)
        return PF_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return PF_OK;
}

pf_status pf_buf_append(pf_buf *b, const void *p, size_t n) {
    pf_status st = pf_buf_reserve(b, n);
    if (st != PF_OK)
        return st;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return PF_OK;
}

pf_status pf_buf_extend(pf_buf *b, size_t n, void **out) {
    *out = NULL;
    pf_status st = pf_buf_reserve(b, n);
    if (st != PF_OK)
        return st;
    *out = b->data ? b->data + b->len : NULL; /* NULL only for n == 0 before any growth */
    b->len += n;
    return PF_OK;
}

void pf_buf_reset(pf_buf *b) {
    b->len = 0;
}

pf_status pf_buf_vprintf(pf_buf *b, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    /* Try the room there is; when the text does not fit, grow once to its exact size. */
    size_t room = b->cap - b->len;
    int n = vsnprintf(room ? (char *)b->data + b->len : NULL, room, fmt, ap);
    pf_status st = PF_OK;
    if (n < 0)
        st = PF_ERR_INVALID;
    else if ((size_t)n >= room && (st = pf_buf_reserve(b, (size_t)n + 1)) == PF_OK)
        vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, again);
    va_end(again);
    if (st == PF_OK)
        b->len += (size_t)n;
    return st;
}

pf_status pf_buf_printf(pf_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pf_status st = pf_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return st;
}

pf_status pf_buf_terminate(pf_buf *b) {
    pf_status st = pf_buf_reserve(b, 1);
    if (st == PF_OK)
        b->data[b->len] = '\0';
    return st;
}

void *pf_buf_detach(pf_buf *b) {
    void *data = b->data;
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return data;
}
