/* wire.c - the data-plane codec's decoding side, type and code names and UTF-8 (see wire.h
 * and api/wire.md); wire_encode.c is its encoding side, wire_internal.h what the two share.
 *
 * DESIGN. These two files are the only code that reads or writes data-plane bytes. Every
 * field goes through the explicit little-endian helpers of wire_internal.h; no struct is ever
 * laid over a buffer. Decoding walks the message with a cursor that knows how many payload
 * bytes remain and checks each field's size against that before reading it, comparing
 * counts against remaining / element_size so nothing is multiplied before it is known to be
 * small. A failure records the wire code, a message and the byte offset, and nothing is
 * allocated for a message until its counts have been checked against its length. The only
 * allocations on the receive side are the view arrays (tensors, row records, selections,
 * segment records), each bounded by max_tensors and by payload_len / 8 (a selection, the
 * smallest thing viewed, takes 8 bytes at least), and the ids of id64 row sets, bounded by
 * payload_len / 8 as well (each id is 8 bytes of the payload). Those ids are copied out of
 * the message, the one thing that is: they lie at any multiple of 4, and a u64 loaded from
 * an address that is not a multiple of 8 is undefined behaviour.
 *
 * A PULL_REPLY's layout follows from the pull it answers; pf_wire_pull_reply_places() is the
 * one place that computes it for a receiver, and pf_wire_decode_placed() the one that reads
 * a reply whose values were received elsewhere: before reading a tensor's header it checks
 * that the header lies just before that tensor's place, so no byte of a place is ever read
 * from the receive buffer.
 *
 * Decoded messages are canonical: flags, padding and dtype are checked, lengths must be
 * exact and strings are compared byte for byte, so a message that decodes re-encodes to
 * the same bytes (the fuzz target checks this).
 *
 * The header, HELLO and ERROR layouts never change in any later version (api/wire.md), so
 * peers of different versions can still identify each other and report the mismatch.
 */
#include "psflow/wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"
#include "wire_internal.h"

/* --- names ----------------------------------------------------------------------------- */

const char *pf_wire_type_name(uint32_t type) {
    switch (type) {
#define TYPE_CASE(name, value, text)                                                               \
    case value:                                                                                    \
        return text;
        PF_WIRE_TYPE_LIST(TYPE_CASE)
#undef TYPE_CASE
    }
    return "UNKNOWN";
}

const char *pf_wire_code_name(uint32_t code) {
    switch (code) {
#define CODE_CASE(name, value, text)                                                               \
    case value:                                                                                    \
        return text;
        PF_WIRE_CODE_LIST(CODE_CASE)
#undef CODE_CASE
    }
    return "UNKNOWN";
}

static int known_type(uint32_t type) {
    switch (type) {
#define TYPE_KNOWN(name, value, text) case value:
        PF_WIRE_TYPE_LIST(TYPE_KNOWN)
#undef TYPE_KNOWN
        return 1;
    }
    return 0;
}

/* --- UTF-8 ----------------------------------------------------------------------------- */

/* Length (1..4) of the well-formed UTF-8 sequence at s[0 .. n), or 0 when it is not one
 * (NUL, stray continuation, overlong form, surrogate, above U+10FFFF, cut short). */
static size_t utf8_seq(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    size_t k;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        k = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* above U+10FFFF */
    } else
        return 0;
    if (n < k || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < k; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return k;
}

size_t wire_utf8_check(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq(s + i, n - i);
        if (!k)
            return i;
        i += k;
    }
    return n;
}

size_t wire_utf8_sanitize(const uint8_t *s, size_t n, uint8_t *dst, size_t limit) {
    size_t i = 0, o = 0;
    while (i < n) {
        size_t k = utf8_seq(s + i, n - i);
        size_t w = k ? k : 1;
        if (o + w > limit)
            break;
        if (dst) {
            if (k)
                memcpy(dst + o, s + i, k);
            else
                dst[o] = '?';
        }
        o += w;
        i += w;
    }
    return o;
}

/* --- decoding -------------------------------------------------------------------------- */

/* Records a decode failure: the wire code in `in`, the message and offset in err. */
static pf_status fail(pf_wire_in *in, pf_error *err, pf_status st, pf_wire_code code, size_t offset,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static pf_status fail(pf_wire_in *in, pf_error *err, pf_status st, pf_wire_code code, size_t offset,
                      const char *fmt, ...) {
    in->code = code;
    va_list ap;
    va_start(ap, fmt);
    pf_error_vset_offset(err, st, (long long)offset, fmt, ap);
    va_end(ap);
    return st;
}

void pf_wire_in_init(pf_wire_in *in, uint64_t max_payload, uint32_t max_tensors) {
    in->max_payload =
        max_payload && max_payload < PF_WIRE_MAX_PAYLOAD ? max_payload : PF_WIRE_MAX_PAYLOAD;
    in->max_tensors =
        max_tensors && max_tensors < PF_WIRE_MAX_TENSORS ? max_tensors : PF_WIRE_MAX_TENSORS;
    in->views = NULL;
    in->cap_views = 0;
    in->row_views = NULL;
    in->cap_row_views = 0;
    in->sel_views = NULL;
    in->cap_sel_views = 0;
    in->seg_views = NULL;
    in->cap_seg_views = 0;
    in->id_views = NULL;
    in->cap_id_views = 0;
    in->code = PF_WIRE_OK;
}

void pf_wire_in_deinit(pf_wire_in *in) {
    if (!in)
        return;
    pf_free(in->views);
    pf_free(in->row_views);
    pf_free(in->sel_views);
    pf_free(in->seg_views);
    pf_free(in->id_views);
    in->views = NULL;
    in->row_views = NULL;
    in->sel_views = NULL;
    in->seg_views = NULL;
    in->id_views = NULL;
    in->cap_views = in->cap_row_views = in->cap_sel_views = in->cap_seg_views = 0;
    in->cap_id_views = 0;
}

pf_wire_code pf_wire_in_code(const pf_wire_in *in) {
    return in->code;
}

pf_status pf_wire_decode_header(pf_wire_in *in, const void *msg, size_t len, pf_wire_header *h,
                                pf_error *err) {
    memset(h, 0, sizeof *h);
    pf_error_clear(err);
    in->code = PF_WIRE_OK;
    if (len < PF_WIRE_HEADER_SIZE)
        return fail(in, err, PF_ERR_FORMAT, PF_WIRE_TRUNCATED, len,
                    "message of %zu bytes is shorter than the %d-byte header", len,
                    PF_WIRE_HEADER_SIZE);
    const uint8_t *b = msg;
    h->magic = ld32(b);
    h->version = ld16(b + 4);
    h->type = ld16(b + 6);
    h->request_id = ld32(b + 8);
    h->flags = ld32(b + 12);
    h->payload_len = ld64(b + 16);
    if (h->magic != PF_WIRE_MAGIC) {
        /* Not our frame: none of its other fields mean anything (request_id stays 0). */
        uint32_t magic = h->magic;
        memset(h, 0, sizeof *h);
        h->magic = magic;
        return fail(in, err, PF_ERR_FORMAT, PF_WIRE_BAD_MAGIC, 0,
                    "bad magic %02x %02x %02x %02x (expected \"PSFW\")", b[0], b[1], b[2], b[3]);
    }
    if (h->version != PF_WIRE_VERSION)
        return fail(in, err, PF_ERR_UNSUPPORTED, PF_WIRE_BAD_VERSION, 4,
                    "protocol version %u is not spoken here (this side speaks %d)",
                    (unsigned)h->version, PF_WIRE_VERSION);
    if (!known_type(h->type))
        return fail(in, err, PF_ERR_FORMAT, PF_WIRE_BAD_TYPE, 6, "unknown message type %u",
                    (unsigned)h->type);
    if (h->flags != 0)
        return fail(in, err, PF_ERR_UNSUPPORTED, PF_WIRE_BAD_FLAGS, 12,
                    "%s: flags 0x%x must be 0 in version %d", pf_wire_type_name(h->type),
                    (unsigned)h->flags, PF_WIRE_VERSION);
    if (h->payload_len > in->max_payload)
        return fail(in, err, PF_ERR_RANGE, PF_WIRE_TOO_LARGE, 16,
                    "%s: payload_len %llu exceeds the limit of %llu bytes",
                    pf_wire_type_name(h->type), (unsigned long long)h->payload_len,
                    (unsigned long long)in->max_payload);
    return PF_OK;
}

/* A cursor over one message's payload: [pos, end) are the bytes not yet read. */
typedef struct reader {
    const uint8_t *b;
    size_t pos, end;
    const char *type; /* name for messages */
    pf_wire_in *in;
    pf_error *err;
    const pf_ws_place *places; /* a PULL_REPLY received in place: where its values went */
    uint32_t n_places;
    uint64_t n_ids; /* 64-bit ids of this message's id64 row sets copied into in->id_views */
} reader;

static size_t remain(const reader *r) {
    return r->end - r->pos;
}

/* Fails with BAD_LENGTH unless n more bytes remain for `field`. */
static pf_status need(reader *r, size_t n, const char *field) {
    if (remain(r) >= n)
        return PF_OK;
    return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, r->pos,
                "%s: %s at offset %zu needs %zu bytes but the payload has %zu left", r->type, field,
                r->pos, n, remain(r));
}

/* Readers for fields whose room was checked with need(). */
static uint32_t rd32(reader *r) {
    uint32_t v = ld32(r->b + r->pos);
    r->pos += 4;
    return v;
}

static uint64_t rd64(reader *r) {
    uint64_t v = ld64(r->b + r->pos);
    r->pos += 8;
    return v;
}

/* An enum-like u32 field that must be <= max. */
static pf_status rd_enum(reader *r, uint32_t max, const char *field, uint32_t *out) {
    size_t off = r->pos;
    pf_status st = need(r, 4, field);
    if (st != PF_OK)
        return st;
    *out = rd32(r);
    if (*out > max)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, off,
                    "%s: %s %u at offset %zu is out of range (0..%u)", r->type, field,
                    (unsigned)*out, off, (unsigned)max);
    return PF_OK;
}

/* A string: u32 length (<= limit) + that many bytes of UTF-8 without NUL. */
static pf_status rd_str(reader *r, uint32_t limit, const char *field, pf_wire_str *out) {
    size_t off = r->pos;
    pf_status st = need(r, 4, field);
    if (st != PF_OK)
        return st;
    uint32_t len = rd32(r);
    if (len > limit)
        return fail(r->in, r->err, PF_ERR_RANGE, PF_WIRE_TOO_LARGE, off,
                    "%s: %s at offset %zu is %u bytes, the limit is %u", r->type, field, off,
                    (unsigned)len, (unsigned)limit);
    if ((st = need(r, len, field)) != PF_OK)
        return st;
    size_t bad = wire_utf8_check(r->b + r->pos, len);
    if (bad != len)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, r->pos + bad,
                    "%s: %s has a NUL or invalid UTF-8 byte 0x%02x at offset %zu", r->type, field,
                    (unsigned)r->b[r->pos + bad], r->pos + bad);
    out->ptr = (const char *)(r->b + r->pos);
    out->len = len;
    r->pos += len;
    return PF_OK;
}

/* A count n of items of at least `min_size` bytes each: n <= limit (TOO_LARGE),
 * n * min_size <= remaining (BAD_LENGTH). Checked before anything is sized by n. */
static pf_status rd_count_max(reader *r, size_t min_size, uint32_t limit, const char *field,
                              uint32_t *n) {
    size_t off = r->pos;
    pf_status st = need(r, 4, field);
    if (st != PF_OK)
        return st;
    *n = rd32(r);
    if (*n > limit)
        return fail(r->in, r->err, PF_ERR_RANGE, PF_WIRE_TOO_LARGE, off,
                    "%s: %s %u at offset %zu exceeds the limit of %u", r->type, field, (unsigned)*n,
                    off, (unsigned)limit);
    if (*n > remain(r) / min_size)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, off,
                    "%s: %s %u at offset %zu needs at least %zu bytes but the payload has %zu "
                    "left",
                    r->type, field, (unsigned)*n, off, (size_t)*n * min_size, remain(r));
    return PF_OK;
}

/* rd_count_max against the receiver's tensor limit: tensors, ids, selections, records. */
static pf_status rd_count(reader *r, size_t min_size, const char *field, uint32_t *n) {
    return rd_count_max(r, min_size, r->in->max_tensors, field, n);
}

/* One of in's view arrays, `views` of *cap elements of `size` bytes, grown to hold n (a
 * count rd_count has checked: n <= max_tensors): doubled from 16 up to max_tensors, never
 * shrunk. *out receives the array, moved or not. */
static pf_status grow_views(reader *r, void *views, uint32_t *cap, size_t size, uint32_t n,
                            const char *what, void **out) {
    *out = views;
    if (n <= *cap)
        return PF_OK;
    uint32_t c = *cap ? *cap : 16, max = r->in->max_tensors;
    while (c < n)
        c = c > max / 2 ? max : c * 2;
    void *v = pf_realloc(views, (size_t)c * size);
    if (!v)
        return fail(r->in, r->err, PF_ERR_NOMEM, PF_WIRE_INTERNAL, r->pos,
                    "%s: out of memory for %u %s", r->type, (unsigned)n, what);
    *out = v;
    *cap = c;
    return PF_OK;
}

/* n tensors into in->views (grown as needed). */
static pf_status rd_tensors(reader *r, uint32_t n, const pf_wire_tensor **out) {
    pf_wire_in *in = r->in;
    void *views;
    pf_status st =
        grow_views(r, in->views, &in->cap_views, sizeof *in->views, n, "tensor views", &views);
    if (st != PF_OK)
        return st;
    in->views = views;
    for (uint32_t i = 0; i < n; i++) {
        size_t off = r->pos;
        const pf_ws_place *pl = r->places ? &r->places[i] : NULL;
        /* Received in place: the record's header must end where the values were placed,
         * or reading it would read a place (or a header not where the sender put it). */
        if (pl && (pl->pos < off || pl->pos - off != TENSOR_HEADER))
            return fail(in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, off,
                        "%s: tensor %u's record at offset %zu does not end where its values "
                        "were received (offset %zu)",
                        r->type, (unsigned)i, off, pl->pos);
        if (remain(r) < TENSOR_HEADER)
            return fail(in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, off,
                        "%s: tensor %u of %u at offset %zu needs a %d-byte header but the "
                        "payload has %zu left",
                        r->type, (unsigned)i, (unsigned)n, off, TENSOR_HEADER, remain(r));
        pf_wire_tensor *t = &in->views[i];
        t->id = rd32(r);
        t->dtype = rd32(r);
        t->count = rd64(r);
        if (t->dtype != PF_WIRE_F32)
            return fail(in, r->err, PF_ERR_UNSUPPORTED, PF_WIRE_BAD_DTYPE, off + 4,
                        "%s: tensor %u (id %u) has dtype %u; only 1 (f32) is supported", r->type,
                        (unsigned)i, (unsigned)t->id, (unsigned)t->dtype);
        if (t->count > remain(r) / 4)
            return fail(in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, off + 8,
                        "%s: tensor %u (id %u) count %llu at offset %zu needs %llu bytes but the "
                        "payload has %zu left",
                        r->type, (unsigned)i, (unsigned)t->id, (unsigned long long)t->count,
                        off + 8,
                        t->count > UINT64_MAX / 4 ? UINT64_MAX : (unsigned long long)t->count * 4,
                        remain(r));
        if (pl && pl->len != (size_t)t->count * 4)
            return fail(in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, off + 8,
                        "%s: tensor %u (id %u) has %llu bytes of values where %zu were received "
                        "in place",
                        r->type, (unsigned)i, (unsigned)t->id, (unsigned long long)t->count * 4,
                        pl->len);
        /* 4-byte aligned: the header, every fixed part and every tensor are multiples of 4
         * and the message start is 4-aligned (checked in pf_wire_decode). In place, the
         * values are where the transport put them. */
        t->data = pl ? (const float *)pl->dst : (const float *)(const void *)(r->b + r->pos);
        r->pos += (size_t)t->count * 4;
    }
    *out = in->views;
    return PF_OK;
}

/* min_version, n, ids[n] of PULL and of PUSH_PULL's pull part. */
static pf_status rd_pull(reader *r, const char *count_field, pf_wire_pull *p) {
    pf_status st = need(r, 8, "min_version");
    if (st != PF_OK)
        return st;
    p->min_version = rd64(r);
    if ((st = rd_count(r, 4, count_field, &p->n)) != PF_OK)
        return st;
    p->ids = (const uint32_t *)(const void *)(r->b + r->pos);
    r->pos += (size_t)p->n * 4;
    return PF_OK;
}

static pf_status rd_push(reader *r, pf_wire_push *p) {
    pf_status st = need(r, PUSH_FIXED, "fixed fields");
    if (st != PF_OK)
        return st;
    p->task_index = rd32(r);
    p->incarnation = rd64(r);
    p->seq = rd64(r);
    p->step = rd64(r);
    if ((st = rd_count(r, TENSOR_HEADER, "tensor count n", &p->n)) != PF_OK)
        return st;
    return rd_tensors(r, p->n, &p->tensors);
}

/* Room in in->id_views for n more ids after the r->n_ids of this message read so far: at
 * least doubled, never past payload_len / 8 (which the total stays within, as each id was
 * checked against the bytes left), never shrunk. */
static pf_status grow_ids(reader *r, uint32_t n) {
    pf_wire_in *in = r->in;
    uint64_t want = r->n_ids + n, max = (r->end - PF_WIRE_HEADER_SIZE) / 8;
    if (want <= in->cap_id_views)
        return PF_OK;
    uint64_t c = in->cap_id_views > 32 ? in->cap_id_views * 2 : 64;
    c = c < want ? want : c > max ? max : c;
    uint64_t *v = pf_realloc(in->id_views, (size_t)c * sizeof *v);
    if (!v)
        return fail(in, r->err, PF_ERR_NOMEM, PF_WIRE_INTERNAL, r->pos,
                    "%s: out of memory for %llu id views", r->type, (unsigned long long)want);
    in->id_views = v;
    in->cap_id_views = c;
    return PF_OK;
}

/* The n_rows field of row set s (the i-th `kind`, its id read) and its u32 rows or, id64,
 * its u64 ids: n_rows checked against the remaining bytes (4 or 8 a row) before they are
 * read, each above the one before it. Rows are viewed in place (4-byte aligned, as every
 * part before them is a multiple of 4 bytes); ids are copied to in->id_views from r->n_ids
 * on, and s->ids is set by link_ids once every set of the message is read. */
static pf_status rd_set_rows(reader *r, const char *kind, uint32_t i, pf_wire_rows *s) {
    size_t n_off = r->pos, size = s->id64 ? 8 : 4;
    s->n_rows = rd32(r);
    if (s->n_rows > remain(r) / size)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, n_off,
                    "%s: %s %u (id %u) n_rows %u at offset %zu needs %zu bytes of %s but the "
                    "payload has %zu left",
                    r->type, kind, (unsigned)i, (unsigned)s->id, (unsigned)s->n_rows, n_off,
                    (size_t)s->n_rows * size, s->id64 ? "64-bit ids" : "rows", remain(r));
    if (!s->id64) {
        s->rows = (const uint32_t *)(const void *)(r->b + r->pos);
        for (uint32_t k = 1; k < s->n_rows; k++) {
            size_t at = r->pos + (size_t)k * 4;
            uint32_t prev = ld32(r->b + at - 4), row = ld32(r->b + at);
            if (row <= prev)
                return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, at,
                            "%s: %s %u (id %u) row %u at offset %zu is %u, not above the "
                            "previous row %u: rows must be strictly increasing",
                            r->type, kind, (unsigned)i, (unsigned)s->id, (unsigned)k, at,
                            (unsigned)row, (unsigned)prev);
        }
        r->pos += (size_t)s->n_rows * 4;
        return PF_OK;
    }
    if (s->n_rows == 0)
        return PF_OK; /* no ids: in->id_views may still be NULL */
    pf_status st = grow_ids(r, s->n_rows);
    if (st != PF_OK)
        return st;
    uint64_t *ids = r->in->id_views + r->n_ids;
    for (uint32_t k = 0; k < s->n_rows; k++) {
        size_t at = r->pos + (size_t)k * 8;
        ids[k] = ld64(r->b + at);
        if (k > 0 && ids[k] <= ids[k - 1])
            return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, at,
                        "%s: %s %u (id %u) 64-bit id %u at offset %zu is %llu, not above the "
                        "previous id %llu: ids must be strictly increasing",
                        r->type, kind, (unsigned)i, (unsigned)s->id, (unsigned)k, at,
                        (unsigned long long)ids[k], (unsigned long long)ids[k - 1]);
    }
    r->n_ids += s->n_rows;
    r->pos += (size_t)s->n_rows * 8;
    return PF_OK;
}

/* n selections (push 0: id, n_rows, rows or ids) or row records (push 1: id, dtype, width,
 * n_rows, rows or ids, data; n checked by rd_count) into *views, one of in's view arrays of
 * *cap elements, grown as needed; *out receives it. Bit 31 of the id field marks an id64 set
 * and is not part of s->id. n_rows * width is checked against the remaining bytes in 64 bits
 * (no product of two u32 overflows it) before the data is read. */
static pf_status rd_row_sets(reader *r, int push, uint32_t n, pf_wire_rows **views, uint32_t *cap,
                             const pf_wire_rows **out) {
    const char *kind = push ? "row record" : "selection";
    size_t header = push ? ROW_RECORD_HEADER : SELECTION_HEADER;
    void *grown;
    pf_status st = grow_views(r, *views, cap, sizeof **views, n,
                              push ? "row record views" : "selection views", &grown);
    if (st != PF_OK)
        return st;
    pf_wire_rows *v = *views = grown;
    *out = v;
    for (uint32_t i = 0; i < n; i++) {
        size_t off = r->pos;
        if (remain(r) < header)
            return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, off,
                        "%s: %s %u of %u at offset %zu needs a %zu-byte header but the payload "
                        "has %zu left",
                        r->type, kind, (unsigned)i, (unsigned)n, off, header, remain(r));
        pf_wire_rows *s = &v[i];
        uint32_t id = rd32(r);
        *s = (pf_wire_rows){.id = id & ~PF_WIRE_ROWS_ID64, .id64 = (id & PF_WIRE_ROWS_ID64) != 0};
        if (push) {
            uint32_t dtype = rd32(r);
            if (dtype != PF_WIRE_F32)
                return fail(r->in, r->err, PF_ERR_UNSUPPORTED, PF_WIRE_BAD_DTYPE, off + 4,
                            "%s: row record %u (id %u) has dtype %u at offset %zu; only 1 (f32) "
                            "is supported",
                            r->type, (unsigned)i, (unsigned)s->id, (unsigned)dtype, off + 4);
            s->width = rd32(r);
            if (s->width == 0)
                return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, off + 8,
                            "%s: row record %u (id %u) has width 0 at offset %zu; a row has at "
                            "least one value",
                            r->type, (unsigned)i, (unsigned)s->id, off + 8);
        }
        if ((st = rd_set_rows(r, kind, i, s)) != PF_OK)
            return st;
        if (!push)
            continue;
        uint64_t values = (uint64_t)s->n_rows * s->width;
        if (values > remain(r) / 4)
            return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, r->pos,
                        "%s: row record %u (id %u) data of %u rows x width %u at offset %zu "
                        "needs %llu bytes but the payload has %zu left",
                        r->type, (unsigned)i, (unsigned)s->id, (unsigned)s->n_rows,
                        (unsigned)s->width, r->pos,
                        values > UINT64_MAX / 4 ? UINT64_MAX : (unsigned long long)values * 4,
                        remain(r));
        s->data = (const float *)(const void *)(r->b + r->pos);
        r->pos += (size_t)values * 4;
    }
    return PF_OK;
}

/* Points the id64 sets of v[0 .. n) that have ids at them in in->id_views, where they were
 * copied in this order from *at on; *at moves past them. Called once all of a message's sets
 * are read: growing the array for a later set may have moved it. */
static void link_ids(pf_wire_in *in, pf_wire_rows *v, uint32_t n, uint64_t *at) {
    for (uint32_t i = 0; i < n; i++) {
        if (!v[i].id64 || v[i].n_rows == 0)
            continue;
        v[i].ids = in->id_views + *at;
        *at += v[i].n_rows;
    }
}

/* A ROW_PULL's payload, alone or after a ROW_PUSH_PULL's row records (records[0 .. n_records),
 * read before): PULL's fields, then n_sel and the selections into in->sel_views; then the
 * id64 sets of both are linked to their ids. */
static pf_status rd_row_pull(reader *r, const char *count_field, pf_wire_rows *records,
                             uint32_t n_records, pf_wire_row_pull *p) {
    pf_wire_pull whole;
    pf_status st = rd_pull(r, count_field, &whole);
    if (st != PF_OK)
        return st;
    p->min_version = whole.min_version;
    p->n = whole.n;
    p->ids = whole.ids;
    if ((st = rd_count(r, SELECTION_HEADER, "selection count n_sel", &p->n_sel)) != PF_OK)
        return st;
    st = rd_row_sets(r, 0, p->n_sel, &r->in->sel_views, &r->in->cap_sel_views, &p->sel);
    if (st != PF_OK)
        return st;
    uint64_t at = 0;
    link_ids(r->in, records, n_records, &at);
    link_ids(r->in, r->in->sel_views, p->n_sel, &at);
    return PF_OK;
}

/* PUSH's payload, n_records and the row records into in->row_views, then a ROW_PULL's. */
static pf_status rd_row_push_pull(reader *r, pf_wire_row_push_pull *p) {
    pf_status st = rd_push(r, &p->push);
    if (st != PF_OK)
        return st;
    if ((st = rd_count(r, ROW_RECORD_HEADER, "row record count n_records", &p->n_rows)) != PF_OK)
        return st;
    st = rd_row_sets(r, 1, p->n_rows, &r->in->row_views, &r->in->cap_row_views, &p->rows);
    if (st != PF_OK)
        return st;
    return rd_row_pull(r, "pull id count n_pull", r->in->row_views, p->n_rows, &p->pull);
}

/* A u32 that must be 0: the reserved fields of the segment messages. */
static pf_status rd_reserved(reader *r) {
    size_t off = r->pos;
    pf_status st = need(r, 4, "reserved");
    if (st != PF_OK)
        return st;
    uint32_t v = rd32(r);
    if (v != 0)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, off,
                    "%s: reserved field at offset %zu is %u; it must be 0", r->type, off,
                    (unsigned)v);
    return PF_OK;
}

/* The grad (value 0) or value range of segment record i, which starts at message offset
 * `rec`: t->count floats from a byte offset that is a multiple of 4 (BAD_VALUE, at the
 * offset field), ending at or below 2^64 - 1 (TOO_LARGE, at the count). */
static pf_status seg_range(reader *r, uint32_t i, size_t rec, const pf_wire_seg_tensor *t,
                           int value) {
    const char *what = value ? "value" : "grad";
    uint64_t at = value ? t->value : t->grad;
    size_t field = rec + (value ? 24 : 16);
    if (at % 4 != 0)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, field,
                    "%s: record %u (id %u) %s offset %llu at offset %zu is not a multiple of 4",
                    r->type, (unsigned)i, (unsigned)t->id, what, (unsigned long long)at, field);
    if (!seg_range_fits(at, t->count))
        return fail(r->in, r->err, PF_ERR_RANGE, PF_WIRE_TOO_LARGE, rec + 8,
                    "%s: record %u (id %u) count %llu at offset %zu: its %s bytes from offset "
                    "%llu would end past 2^64 - 1",
                    r->type, (unsigned)i, (unsigned)t->id, (unsigned long long)t->count, rec + 8,
                    what, (unsigned long long)at);
    return PF_OK;
}

/* SEG_PULL's payload (push 0), or the end of SEG_PUSH_PULL's (push 1): min_version, n, a
 * reserved u32 and n segment records into in->seg_views. A SEG_PULL's records push nothing
 * (grad 0). Whether a range lies inside the segment is the ps's check: the codec knows no
 * segment size, only that no range may wrap. */
static pf_status rd_seg_pull(reader *r, int push, pf_wire_seg_pull *p) {
    pf_status st = need(r, 8, "min_version");
    if (st != PF_OK)
        return st;
    p->min_version = rd64(r);
    if ((st = rd_count(r, SEG_RECORD, "record count n", &p->n)) != PF_OK ||
        (st = rd_reserved(r)) != PF_OK)
        return st;
    pf_wire_in *in = r->in;
    void *views;
    st = grow_views(r, in->seg_views, &in->cap_seg_views, sizeof *in->seg_views, p->n,
                    "segment record views", &views);
    if (st != PF_OK)
        return st;
    in->seg_views = views;
    for (uint32_t i = 0; i < p->n; i++) {
        size_t off = r->pos;
        if (remain(r) < SEG_RECORD)
            return fail(in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, off,
                        "%s: record %u of %u at offset %zu needs %d bytes but the payload has "
                        "%zu left",
                        r->type, (unsigned)i, (unsigned)p->n, off, SEG_RECORD, remain(r));
        pf_wire_seg_tensor *t = &in->seg_views[i];
        t->id = rd32(r);
        uint32_t dtype = rd32(r);
        t->count = rd64(r);
        t->grad = rd64(r);
        t->value = rd64(r);
        if (dtype != PF_WIRE_F32)
            return fail(in, r->err, PF_ERR_UNSUPPORTED, PF_WIRE_BAD_DTYPE, off + 4,
                        "%s: record %u (id %u) has dtype %u; only 1 (f32) is supported", r->type,
                        (unsigned)i, (unsigned)t->id, (unsigned)dtype);
        if (!push && t->grad != 0)
            return fail(in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, off + 16,
                        "%s: record %u (id %u) has grad offset %llu at offset %zu; a SEG_PULL "
                        "pushes nothing (grad 0)",
                        r->type, (unsigned)i, (unsigned)t->id, (unsigned long long)t->grad,
                        off + 16);
        if ((st = seg_range(r, i, off, t, 0)) != PF_OK ||
            (st = seg_range(r, i, off, t, 1)) != PF_OK)
            return st;
    }
    p->tensors = in->seg_views;
    return PF_OK;
}

static pf_status rd_hello(reader *r, pf_wire_hello *h) {
    pf_status st = need(r, HELLO_FIXED, "fixed fields");
    if (st != PF_OK)
        return st;
    size_t off = r->pos;
    uint32_t role_pad = rd32(r);
    h->role = (uint8_t)role_pad;
    if (h->role > PF_WIRE_ROLE_READER)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, off,
                    "HELLO: role %u at offset %zu is out of range (0..4)", (unsigned)h->role, off);
    if (role_pad >> 8)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, off + 1,
                    "HELLO: padding at offset %zu must be zero", off + 1);
    h->task_index = rd32(r);
    h->incarnation = rd64(r);
    return rd_str(r, PF_WIRE_MAX_JOB_NAME, "job name", &h->job);
}

static pf_status rd_hello_ack(reader *r, pf_wire_hello_ack *a) {
    pf_status st = need(r, HELLO_ACK_SIZE, "fixed fields");
    if (st != PF_OK)
        return st;
    a->ps_task = rd32(r);
    a->ps_incarnation = rd64(r);
    a->version = rd64(r);
    a->n_shards = rd32(r);
    return PF_OK;
}

/* A PULL_REPLY received in place carries exactly the tensors that were placed. */
static pf_status rd_pull_reply(reader *r, pf_wire_pull_reply *p) {
    pf_status st = need(r, 8, "version");
    if (st != PF_OK)
        return st;
    p->version = rd64(r);
    if ((st = rd_enum(r, PF_WIRE_PUSH_DUPLICATE, "push_result", &p->push_result)) != PF_OK)
        return st;
    if ((st = rd_count(r, TENSOR_HEADER, "tensor count n", &p->n)) != PF_OK)
        return st;
    if (r->places && p->n != r->n_places)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, r->pos - 4,
                    "PULL_REPLY: %u tensors where %u were received in place", (unsigned)p->n,
                    (unsigned)r->n_places);
    return rd_tensors(r, p->n, &p->tensors);
}

static pf_status rd_push_ack(reader *r, pf_wire_push_ack *a) {
    pf_status st = need(r, PUSH_ACK_SIZE, "fixed fields");
    if (st != PF_OK)
        return st;
    a->seq = rd64(r);
    if ((st = rd_enum(r, PF_WIRE_PUSH_DUPLICATE, "result", &a->result)) != PF_OK)
        return st;
    a->version = rd64(r);
    return PF_OK;
}

static pf_status rd_push_pull(reader *r, pf_wire_push_pull *p) {
    pf_status st = rd_push(r, &p->push);
    if (st != PF_OK)
        return st;
    return rd_pull(r, "pull id count n_pull", &p->pull);
}

static pf_status rd_checkpoint(reader *r, pf_wire_checkpoint *c) {
    pf_status st = need(r, CHECKPOINT_SIZE, "fixed fields");
    if (st != PF_OK)
        return st;
    c->step = rd64(r);
    return rd_enum(r, 1, "final", &c->final);
}

static pf_status rd_restore(reader *r, pf_wire_restore *p) {
    pf_status st = need(r, RESTORE_SIZE, "fixed fields");
    if (st != PF_OK)
        return st;
    p->step = rd64(r);
    uint32_t bits = rd32(r);
    float *f = &p->lr_factor;
    memcpy(f, &bits, sizeof *f);
    if (!(*f > 0 && *f <= 1)) /* NaN too */
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, r->pos - 4,
                    "RESTORE: lr_factor %g at offset %zu is out of range (0, 1]", (double)*f,
                    r->pos - 4);
    return PF_OK;
}

static pf_status rd_checkpoint_ack(reader *r, pf_wire_checkpoint_ack *c) {
    pf_status st = need(r, CHECKPOINT_ACK_FIXED, "fixed fields");
    if (st != PF_OK)
        return st;
    c->step = rd64(r);
    c->status = rd32(r);
    return rd_str(r, PF_WIRE_MAX_PATH, "path", &c->path);
}

/* AUTH_CHALLENGE, AUTH_PROOF, AUTH_OK: a nonce, then a MAC, as the type carries them. */
static pf_status rd_auth(reader *r, uint16_t type, pf_wire_auth *a) {
    int nonce = type != PF_WIRE_AUTH_OK, mac = type != PF_WIRE_AUTH_CHALLENGE;
    pf_status st = need(r, 32u * (size_t)(nonce + mac), "nonce and MAC");
    if (st != PF_OK)
        return st;
    a->nonce = nonce ? r->b + r->pos : NULL;
    a->mac = mac ? r->b + r->pos + 32u * (size_t)nonce : NULL;
    r->pos += 32u * (size_t)(nonce + mac);
    return PF_OK;
}

static pf_status rd_seg_attach(reader *r, pf_wire_seg_attach *a) {
    pf_status st = need(r, SEG_ATTACH_SIZE, "fixed fields");
    if (st != PF_OK)
        return st;
    a->pid = rd32(r);
    a->fd = rd32(r);
    a->size = rd64(r);
    if (a->size < PF_WIRE_SEG_TOKEN_SIZE)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, r->pos - 8,
                    "SEG_ATTACH: size %llu at offset %zu is smaller than the %u-byte token",
                    (unsigned long long)a->size, r->pos - 8, PF_WIRE_SEG_TOKEN_SIZE);
    a->token = r->b + r->pos;
    r->pos += PF_WIRE_SEG_TOKEN_SIZE;
    return PF_OK;
}

/* task_index, reserved, incarnation, seq, step, then SEG_PULL's fields. */
static pf_status rd_seg_push_pull(reader *r, pf_wire_seg_push_pull *p) {
    pf_status st = need(r, SEG_PUSH_PULL_FIXED - SEG_PULL_FIXED, "fixed fields");
    if (st != PF_OK)
        return st;
    p->task_index = rd32(r);
    if ((st = rd_reserved(r)) != PF_OK)
        return st;
    p->incarnation = rd64(r);
    p->seq = rd64(r);
    p->step = rd64(r);
    return rd_seg_pull(r, 1, &p->pull);
}

/* LEASE: epoch, n_splits (1 .. PF_WIRE_MAX_SPLITS), want (0 or 1), n_done and the done split
 * indices, each below n_splits. The indices are split numbers, not shards, so n_done is held
 * to PF_WIRE_MAX_TENSORS rather than to the receiver's tensor limit (a ps's shard count). */
static pf_status rd_lease(reader *r, pf_wire_lease *l) {
    pf_status st = need(r, LEASE_FIXED, "fixed fields");
    if (st != PF_OK)
        return st;
    l->epoch = rd64(r);
    size_t off = r->pos;
    l->n_splits = rd32(r);
    if (l->n_splits == 0 || l->n_splits > PF_WIRE_MAX_SPLITS)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, off,
                    "LEASE: n_splits %u at offset %zu is out of range (1..%u)",
                    (unsigned)l->n_splits, off, PF_WIRE_MAX_SPLITS);
    if ((st = rd_enum(r, 1, "want", &l->want)) != PF_OK ||
        (st = rd_count_max(r, 4, PF_WIRE_MAX_TENSORS, "done count n_done", &l->n_done)) != PF_OK)
        return st;
    /* 4-byte aligned, as the header and the fixed fields are multiples of 4 bytes. */
    l->done = (const uint32_t *)(const void *)(r->b + r->pos);
    for (uint32_t i = 0; i < l->n_done; i++) {
        size_t at = r->pos + (size_t)i * 4;
        uint32_t split = ld32(r->b + at);
        if (split >= l->n_splits)
            return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, at,
                        "LEASE: done[%u] = %u at offset %zu is not below n_splits %u", (unsigned)i,
                        (unsigned)split, at, (unsigned)l->n_splits);
    }
    r->pos += (size_t)l->n_done * 4;
    return PF_OK;
}

static pf_status rd_lease_reply(reader *r, pf_wire_lease_reply *l) {
    pf_status st = need(r, LEASE_REPLY_SIZE, "fixed fields");
    if (st != PF_OK)
        return st;
    if ((st = rd_enum(r, PF_WIRE_LEASE_END, "state", &l->state)) != PF_OK)
        return st;
    l->split = rd32(r);
    l->epoch = rd64(r);
    l->accepted = rd32(r);
    l->refused = rd32(r);
    return PF_OK;
}

static pf_status rd_error(reader *r, pf_wire_error *e) {
    pf_status st = need(r, ERROR_FIXED, "fixed fields");
    if (st != PF_OK)
        return st;
    size_t off = r->pos;
    e->code = rd32(r);
    if (e->code == PF_WIRE_OK)
        return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_VALUE, off,
                    "ERROR: code at offset %zu is 0", off);
    return rd_str(r, PF_WIRE_MAX_ERROR_MSG, "message", &e->message);
}

/* The payload of a message of the given type into its member of m->u. */
static pf_status decode_payload(reader *r, uint16_t type, pf_wire_msg *m) {
    switch ((pf_wire_type)type) {
    case PF_WIRE_HELLO:
        return rd_hello(r, &m->u.hello);
    case PF_WIRE_HELLO_ACK:
        return rd_hello_ack(r, &m->u.hello_ack);
    case PF_WIRE_PULL:
        return rd_pull(r, "id count n", &m->u.pull);
    case PF_WIRE_PULL_REPLY:
        return rd_pull_reply(r, &m->u.pull_reply);
    case PF_WIRE_PUSH:
        return rd_push(r, &m->u.push);
    case PF_WIRE_PUSH_ACK:
        return rd_push_ack(r, &m->u.push_ack);
    case PF_WIRE_PUSH_PULL:
        return rd_push_pull(r, &m->u.push_pull);
    case PF_WIRE_ROW_PULL:
        return rd_row_pull(r, "id count n", NULL, 0, &m->u.row_pull);
    case PF_WIRE_ROW_PUSH_PULL:
        return rd_row_push_pull(r, &m->u.row_push_pull);
    case PF_WIRE_STATS:
    case PF_WIRE_SEG_ACK:
        return PF_OK; /* no payload */
    case PF_WIRE_STATS_REPLY:
        return rd_str(r, UINT32_MAX, "json", &m->u.stats_reply.json);
    case PF_WIRE_CHECKPOINT:
        return rd_checkpoint(r, &m->u.checkpoint);
    case PF_WIRE_RESTORE:
        return rd_restore(r, &m->u.restore);
    case PF_WIRE_CHECKPOINT_ACK:
        return rd_checkpoint_ack(r, &m->u.checkpoint_ack);
    case PF_WIRE_AUTH_CHALLENGE:
    case PF_WIRE_AUTH_PROOF:
    case PF_WIRE_AUTH_OK:
        return rd_auth(r, type, &m->u.auth);
    case PF_WIRE_SEG_ATTACH:
        return rd_seg_attach(r, &m->u.seg_attach);
    case PF_WIRE_SEG_PULL:
        return rd_seg_pull(r, 0, &m->u.seg_pull);
    case PF_WIRE_SEG_PUSH_PULL:
        return rd_seg_push_pull(r, &m->u.seg_push_pull);
    case PF_WIRE_LEASE:
        return rd_lease(r, &m->u.lease);
    case PF_WIRE_LEASE_REPLY:
        return rd_lease_reply(r, &m->u.lease_reply);
    case PF_WIRE_ERROR:
        return rd_error(r, &m->u.error);
    }
    /* Unreachable: the header check admits known types only. */
    return fail(r->in, r->err, PF_ERR_FORMAT, PF_WIRE_BAD_TYPE, 6, "unknown message type %u",
                (unsigned)type);
}

/* pf_wire_decode, with places[0 .. n_places) received elsewhere when places is not NULL. */
static pf_status decode(pf_wire_in *in, const void *msg, size_t len, const pf_ws_place *places,
                        uint32_t n_places, pf_wire_msg *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    in->code = PF_WIRE_OK;
    if ((uintptr_t)msg % 4 != 0)
        return fail(in, err, PF_ERR_INVALID, PF_WIRE_INTERNAL, 0,
                    "receive buffer is not 4-byte aligned");
    /* In place, the header and PULL_REPLY's fixed fields must lie before the first place. */
    if (places && n_places > 0 &&
        places[0].pos < PF_WIRE_HEADER_SIZE + PULL_REPLY_FIXED + TENSOR_HEADER)
        return fail(in, err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, places[0].pos,
                    "values received in place at offset %zu, inside the fixed fields",
                    places[0].pos);
    pf_wire_header h;
    pf_status st = pf_wire_decode_header(in, msg, len, &h, err);
    out->type = h.type;
    out->request_id = h.request_id;
    if (st != PF_OK)
        return st;
    if (places && h.type != PF_WIRE_PULL_REPLY)
        return fail(in, err, PF_ERR_FORMAT, PF_WIRE_UNEXPECTED, 6,
                    "a %s of %zu bytes arrived where a PULL_REPLY was received in place",
                    pf_wire_type_name(h.type), len);
    const char *name = pf_wire_type_name(h.type);
    size_t have = len - PF_WIRE_HEADER_SIZE;
    if (have < h.payload_len)
        return fail(in, err, PF_ERR_FORMAT, PF_WIRE_TRUNCATED, len,
                    "%s: payload_len is %llu but only %zu bytes follow the header", name,
                    (unsigned long long)h.payload_len, have);
    if (have > h.payload_len)
        return fail(in, err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH,
                    PF_WIRE_HEADER_SIZE + (size_t)h.payload_len,
                    "%s: %zu bytes follow the %llu-byte payload", name,
                    have - (size_t)h.payload_len, (unsigned long long)h.payload_len);
    reader r = {msg, PF_WIRE_HEADER_SIZE, len, name, in, err, places, n_places, 0};
    if ((st = decode_payload(&r, h.type, out)) != PF_OK)
        return st;
    if (r.pos != r.end)
        return fail(in, err, PF_ERR_FORMAT, PF_WIRE_BAD_LENGTH, r.pos,
                    "%s: %zu bytes left over after the last field, at offset %zu", name, remain(&r),
                    r.pos);
    return PF_OK;
}

pf_status pf_wire_decode(pf_wire_in *in, const void *msg, size_t len, pf_wire_msg *out,
                         pf_error *err) {
    return decode(in, msg, len, NULL, 0, out, err);
}

pf_status pf_wire_decode_placed(pf_wire_in *in, const void *msg, size_t len,
                                const pf_ws_place *places, int n, pf_wire_msg *out, pf_error *err) {
    if (places && (n < 0 || (uint32_t)n > PF_WIRE_MAX_TENSORS)) {
        memset(out, 0, sizeof *out);
        return fail(in, err, PF_ERR_INVALID, PF_WIRE_INTERNAL, 0, "%d places", n);
    }
    return decode(in, msg, len, places, places ? (uint32_t)n : 0, out, err);
}

pf_status pf_wire_pull_reply_places(const uint64_t *counts, uint32_t n, pf_ws_place *places,
                                    size_t *len) {
    if (n > PF_WIRE_MAX_TENSORS)
        return PF_ERR_INVALID;
    uint64_t pos = PF_WIRE_HEADER_SIZE + PULL_REPLY_FIXED;
    for (uint32_t i = 0; i < n; i++) {
        if (counts[i] > PF_WIRE_MAX_PAYLOAD / 4)
            return PF_ERR_RANGE;
        pos += TENSOR_HEADER;
        places[i].pos = (size_t)pos;
        places[i].len = (size_t)counts[i] * 4;
        pos += counts[i] * 4;
        if (pos - PF_WIRE_HEADER_SIZE > PF_WIRE_MAX_PAYLOAD)
            return PF_ERR_RANGE;
    }
    *len = (size_t)pos;
    return PF_OK;
}
