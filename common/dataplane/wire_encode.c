/* wire_encode.c - the data-plane codec's encoding side: the encoders, pf_wire_encode() and
 * the pieces of an encoded message (see wire.h and api/wire.md; wire.c decodes).
 *
 * DESIGN. Encoding validates everything first (so an encoder never emits a frame the decoder
 * would refuse), computes the exact head size, reserves it once, and then writes with
 * stores that cannot fail. Tensor data is recorded as segments: the transport sends it
 * from where it lies (pf_wire_out_parts()).
 */
#include "psflow/wire.h"

#include <string.h>

#include "psflow/mem.h"
#include "wire_internal.h"

/* --- encoding -------------------------------------------------------------------------- */

void pf_wire_out_init(pf_wire_out *out) {
    /* The head never exceeds a whole message. */
    pf_buf_init(&out->head, PF_WIRE_HEADER_SIZE + (size_t)PF_WIRE_MAX_PAYLOAD);
    out->seg = NULL;
    out->n_seg = 0;
    out->cap_seg = 0;
    out->total = 0;
}

void pf_wire_out_deinit(pf_wire_out *out) {
    if (!out)
        return;
    pf_buf_deinit(&out->head);
    pf_free(out->seg);
    out->seg = NULL;
    out->n_seg = 0;
    out->cap_seg = 0;
    out->total = 0;
}

size_t pf_wire_out_len(const pf_wire_out *out) {
    return out->total;
}

/* What an encoder found while validating: the exact head size, the data bytes and the
 * number of data segments. */
typedef struct plan {
    const char *type;
    uint64_t head; /* header + fixed fields + strings + tensor and row headers + ids + rows */
    uint64_t data; /* tensor and row data bytes */
    size_t segs;
    pf_error *err;
} plan;

static pf_status plan_str(plan *p, pf_wire_str s, uint32_t limit, const char *field) {
    if (s.len && !s.ptr)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1, "%s: %s is NULL with length %u",
                                   p->type, field, (unsigned)s.len);
    if (s.len > limit)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                   "%s: %s is %u bytes, the limit is %u", p->type, field,
                                   (unsigned)s.len, (unsigned)limit);
    if (s.len && wire_utf8_check((const uint8_t *)s.ptr, s.len) != s.len)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1, "%s: %s is not UTF-8 without NUL",
                                   p->type, field);
    p->head += 4 + (uint64_t)s.len;
    return PF_OK;
}

static pf_status plan_tensors(plan *p, const pf_wire_tensor *t, uint32_t n) {
    if (n > PF_WIRE_MAX_TENSORS)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                   "%s: %u tensors exceed the limit of %u", p->type, (unsigned)n,
                                   PF_WIRE_MAX_TENSORS);
    if (n && !t)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1, "%s: tensors is NULL with n = %u",
                                   p->type, (unsigned)n);
    p->head += (uint64_t)n * TENSOR_HEADER;
    for (uint32_t i = 0; i < n; i++) {
        if (t[i].dtype != PF_WIRE_F32)
            return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                       "%s: tensor %u (id %u) has dtype %u, not f32", p->type,
                                       (unsigned)i, (unsigned)t[i].id, (unsigned)t[i].dtype);
        if (t[i].count > PF_WIRE_MAX_PAYLOAD / 4 || p->data + t[i].count * 4 > PF_WIRE_MAX_PAYLOAD)
            return pf_error_set_offset(p->err, PF_ERR_RANGE, -1,
                                       "%s: tensor %u (id %u) of %llu elements: payload "
                                       "over the limit of %llu bytes",
                                       p->type, (unsigned)i, (unsigned)t[i].id,
                                       (unsigned long long)t[i].count,
                                       (unsigned long long)PF_WIRE_MAX_PAYLOAD);
        if (t[i].count && !t[i].data)
            return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                       "%s: tensor %u (id %u) has no data", p->type, (unsigned)i,
                                       (unsigned)t[i].id);
        p->data += t[i].count * 4;
        p->segs += t[i].count > 0;
    }
    return PF_OK;
}

static pf_status plan_ids(plan *p, const uint32_t *ids, uint32_t n, const char *field) {
    if (n > PF_WIRE_MAX_TENSORS)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1, "%s: %s %u exceeds the limit of %u",
                                   p->type, field, (unsigned)n, PF_WIRE_MAX_TENSORS);
    if (n && !ids)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1, "%s: ids is NULL with %s = %u",
                                   p->type, field, (unsigned)n);
    p->head += (uint64_t)n * 4;
    return PF_OK;
}

/* The rows and data of set s (the i-th `kind`, push 1: a row record) as the decoder accepts
 * them, counted into the plan: u32 rows or, id64, u64 ids (never both), there when n_rows > 0,
 * data there too in a row record; sizes (4 bytes a row, 8 an id) checked against the payload
 * limit before any row is read; rows or ids strictly increasing. */
static pf_status plan_set_rows(plan *p, const char *kind, uint32_t i, const pf_wire_rows *s,
                               int push) {
    const void *named = s->id64 ? (const void *)s->ids : (const void *)s->rows;
    if (s->id64 ? s->rows != NULL : s->ids != NULL)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                   "%s: %s %u (id %u) has %s with id64 %d; a set names its rows "
                                   "by rows (id64 0) or by 64-bit ids (id64 1), not both",
                                   p->type, kind, (unsigned)i, (unsigned)s->id,
                                   s->id64 ? "rows" : "64-bit ids", s->id64 ? 1 : 0);
    if (s->n_rows && (!named || (push && !s->data)))
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                   "%s: %s %u (id %u) has %u rows but no %s", p->type, kind,
                                   (unsigned)i, (unsigned)s->id, (unsigned)s->n_rows,
                                   named     ? "data"
                                   : s->id64 ? "64-bit ids"
                                             : "row ids");
    uint64_t values = push ? (uint64_t)s->n_rows * s->width : 0;
    uint64_t bytes = (uint64_t)s->n_rows * (s->id64 ? 8 : 4);
    if (values > PF_WIRE_MAX_PAYLOAD / 4 ||
        p->head + p->data + bytes + values * 4 > PF_WIRE_MAX_PAYLOAD)
        return pf_error_set_offset(p->err, PF_ERR_RANGE, -1,
                                   "%s: %s %u (id %u) of %u %s x width %u: payload over "
                                   "the limit of %llu bytes",
                                   p->type, kind, (unsigned)i, (unsigned)s->id, (unsigned)s->n_rows,
                                   s->id64 ? "ids" : "rows", (unsigned)s->width,
                                   (unsigned long long)PF_WIRE_MAX_PAYLOAD);
    for (uint32_t k = 1; k < s->n_rows; k++) {
        if (s->id64 && s->ids[k] <= s->ids[k - 1])
            return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                       "%s: %s %u (id %u) 64-bit id %u is %llu, not above the "
                                       "previous id %llu: ids must be strictly increasing",
                                       p->type, kind, (unsigned)i, (unsigned)s->id, (unsigned)k,
                                       (unsigned long long)s->ids[k],
                                       (unsigned long long)s->ids[k - 1]);
        if (!s->id64 && s->rows[k] <= s->rows[k - 1])
            return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                       "%s: %s %u (id %u) row %u is %u, not above the "
                                       "previous row %u: rows must be strictly increasing",
                                       p->type, kind, (unsigned)i, (unsigned)s->id, (unsigned)k,
                                       (unsigned)s->rows[k], (unsigned)s->rows[k - 1]);
    }
    p->head += bytes;
    p->data += values * 4;
    p->segs += values > 0;
    return PF_OK;
}

/* Selections (push 0) or row records (push 1) as the decoder accepts them (api/wire.md):
 * at most PF_WIRE_MAX_TENSORS, shard ids without PF_WIRE_ROWS_ID64 (the wire's id64 flag,
 * which the id64 field sets), a selection without width or data, a row record of width >= 1,
 * rows, ids and data as plan_set_rows. Every sum stays far below 2^64 (each term is at most
 * PF_WIRE_MAX_PAYLOAD and there are a handful). */
static pf_status plan_row_sets(plan *p, const pf_wire_rows *v, uint32_t n, int push,
                               const char *field) {
    const char *kind = push ? "row record" : "selection";
    if (n > PF_WIRE_MAX_TENSORS)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1, "%s: %s %u exceeds the limit of %u",
                                   p->type, field, (unsigned)n, PF_WIRE_MAX_TENSORS);
    if (n && !v)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1, "%s: %ss are NULL with %s = %u",
                                   p->type, kind, field, (unsigned)n);
    p->head += (uint64_t)n * (push ? ROW_RECORD_HEADER : SELECTION_HEADER);
    for (uint32_t i = 0; i < n; i++) {
        const pf_wire_rows *s = &v[i];
        if (s->id & PF_WIRE_ROWS_ID64)
            return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                       "%s: %s %u has shard id 0x%x: bit 31 is the wire's id64 "
                                       "flag (PF_WIRE_ROWS_ID64), set by id64",
                                       p->type, kind, (unsigned)i, (unsigned)s->id);
        if (push && s->width == 0)
            return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                       "%s: row record %u (id %u) has width 0", p->type,
                                       (unsigned)i, (unsigned)s->id);
        if (!push && (s->width != 0 || s->data))
            return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                       "%s: selection %u (id %u) has a width or data; a "
                                       "selection names rows only",
                                       p->type, (unsigned)i, (unsigned)s->id);
        pf_status st = plan_set_rows(p, kind, i, s, push);
        if (st != PF_OK)
            return st;
    }
    return PF_OK;
}

/* A ROW_PULL's ids and selections (its fixed fields are the caller's). */
static pf_status plan_row_pull(plan *p, const pf_wire_row_pull *m) {
    pf_status st = plan_ids(p, m->ids, m->n, "n");
    return st != PF_OK ? st : plan_row_sets(p, m->sel, m->n_sel, 0, "n_sel");
}

/* Segment records as the decoder accepts them (api/wire.md, "Shared segment"): at most
 * PF_WIRE_MAX_TENSORS, grad and value multiples of 4 whose ranges of 4 count bytes end at
 * or below 2^64 - 1, and grad 0 in a SEG_PULL (push 0). */
static pf_status plan_seg(plan *p, const pf_wire_seg_tensor *t, uint32_t n, int push) {
    if (n > PF_WIRE_MAX_TENSORS)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                   "%s: %u records exceed the limit of %u", p->type, (unsigned)n,
                                   PF_WIRE_MAX_TENSORS);
    if (n && !t)
        return pf_error_set_offset(p->err, PF_ERR_INVALID, -1, "%s: records are NULL with n = %u",
                                   p->type, (unsigned)n);
    p->head += (uint64_t)n * SEG_RECORD;
    for (uint32_t i = 0; i < n; i++) {
        if (!push && t[i].grad != 0)
            return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                       "%s: record %u (id %u) has grad offset %llu; a SEG_PULL "
                                       "pushes nothing (grad 0)",
                                       p->type, (unsigned)i, (unsigned)t[i].id,
                                       (unsigned long long)t[i].grad);
        if (t[i].grad % 4 != 0 || t[i].value % 4 != 0)
            return pf_error_set_offset(p->err, PF_ERR_INVALID, -1,
                                       "%s: record %u (id %u) offsets grad %llu, value %llu: not "
                                       "multiples of 4",
                                       p->type, (unsigned)i, (unsigned)t[i].id,
                                       (unsigned long long)t[i].grad,
                                       (unsigned long long)t[i].value);
        if (!seg_range_fits(t[i].grad, t[i].count) || !seg_range_fits(t[i].value, t[i].count))
            return pf_error_set_offset(
                p->err, PF_ERR_INVALID, -1,
                "%s: record %u (id %u) of %llu elements at grad %llu, "
                "value %llu: a range ends past 2^64 - 1",
                p->type, (unsigned)i, (unsigned)t[i].id, (unsigned long long)t[i].count,
                (unsigned long long)t[i].grad, (unsigned long long)t[i].value);
    }
    return PF_OK;
}

/* A cursor writing into the reserved head. */
typedef struct writer {
    pf_wire_out *o;
    uint8_t *b;
    size_t pos;
    size_t data; /* tensor data bytes placed so far */
} writer;

/* Starts a message: checks the plan's total against the limit, reserves the head and the
 * segments, and writes the header. Nothing after this can fail. */
static pf_status begin(pf_wire_out *o, uint16_t type, uint32_t request_id, const plan *p,
                       writer *w) {
    uint64_t payload = p->head + p->data; /* p->head does not count the header yet */
    if (payload > PF_WIRE_MAX_PAYLOAD)
        return pf_error_set_offset(
            p->err, PF_ERR_RANGE, -1, "%s: payload of %llu bytes exceeds the limit of %llu",
            p->type, (unsigned long long)payload, (unsigned long long)PF_WIRE_MAX_PAYLOAD);
    if (p->segs > o->cap_seg) {
        size_t cap = o->cap_seg ? o->cap_seg : 16;
        while (cap < p->segs)
            cap *= 2; /* p->segs <= 2 * PF_WIRE_MAX_TENSORS (tensors, row records) */
        pf_wire_seg *s = pf_realloc(o->seg, cap * sizeof *s);
        if (!s)
            return pf_error_set_offset(p->err, PF_ERR_NOMEM, -1,
                                       "%s: out of memory for %zu segments", p->type, p->segs);
        o->seg = s;
        o->cap_seg = cap;
    }
    size_t head = PF_WIRE_HEADER_SIZE + (size_t)p->head;
    void *b;
    pf_status st = pf_buf_extend(&o->head, head, &b);
    if (st != PF_OK)
        return pf_error_set_offset(p->err, st, -1, "%s: cannot reserve %zu head bytes: %s", p->type,
                                   head, pf_strerror(st));
    w->o = o;
    w->b = b;
    w->pos = 0;
    w->data = 0;
    st32(w->b, PF_WIRE_MAGIC);
    st16(w->b + 4, PF_WIRE_VERSION);
    st16(w->b + 6, type);
    st32(w->b + 8, request_id);
    st32(w->b + 12, 0);
    st64(w->b + 16, payload);
    w->pos = PF_WIRE_HEADER_SIZE;
    return PF_OK;
}

static void finish(writer *w) {
    w->o->total = w->o->head.len + w->data;
}

static void w8(writer *w, uint8_t v) {
    w->b[w->pos++] = v;
}

static void w32(writer *w, uint32_t v) {
    st32(w->b + w->pos, v);
    w->pos += 4;
}

static void w64(writer *w, uint64_t v) {
    st64(w->b + w->pos, v);
    w->pos += 8;
}

static void wbytes(writer *w, const void *p, size_t n) {
    if (n)
        memcpy(w->b + w->pos, p, n);
    w->pos += n;
}

static void wstr(writer *w, pf_wire_str s) {
    w32(w, s.len);
    wbytes(w, s.ptr, s.len);
}

/* len bytes of data that follow the head written so far, as a segment (not copied). */
static void wdata(writer *w, const void *data, size_t len) {
    if (!len)
        return;
    w->o->seg[w->o->n_seg++] = (pf_wire_seg){w->pos, w->pos + w->data, data, len};
    w->data += len;
}

static void wtensors(writer *w, const pf_wire_tensor *t, uint32_t n) {
    w32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        w32(w, t[i].id);
        w32(w, PF_WIRE_F32);
        w64(w, t[i].count);
        wdata(w, t[i].data, (size_t)t[i].count * 4);
    }
}

static void wids(writer *w, const uint32_t *ids, uint32_t n) {
    w32(w, n);
    for (uint32_t i = 0; i < n; i++)
        w32(w, ids[i]);
}

/* Selections (push 0) or row records (push 1): the rows or 64-bit ids are copied into the
 * head (the host is little-endian, wire_internal.h, so they go as they are; an id64 set has
 * PF_WIRE_ROWS_ID64 in its id field), row data is a segment. */
static void wrow_sets(writer *w, const pf_wire_rows *v, uint32_t n, int push) {
    w32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        w32(w, v[i].id | (v[i].id64 ? PF_WIRE_ROWS_ID64 : 0));
        if (push) {
            w32(w, PF_WIRE_F32);
            w32(w, v[i].width);
        }
        w32(w, v[i].n_rows);
        if (v[i].id64)
            wbytes(w, v[i].ids, (size_t)v[i].n_rows * 8);
        else
            wbytes(w, v[i].rows, (size_t)v[i].n_rows * 4);
        if (push)
            wdata(w, v[i].data, (size_t)v[i].n_rows * v[i].width * 4);
    }
}

static void wrow_pull(writer *w, const pf_wire_row_pull *m) {
    w64(w, m->min_version);
    wids(w, m->ids, m->n);
    wrow_sets(w, m->sel, m->n_sel, 0);
}

/* SEG_PULL's payload, or the end of SEG_PUSH_PULL's: min_version, n, reserved, records. */
static void wseg_pull(writer *w, const pf_wire_seg_pull *m) {
    w64(w, m->min_version);
    w32(w, m->n);
    w32(w, 0);
    for (uint32_t i = 0; i < m->n; i++) {
        const pf_wire_seg_tensor *t = &m->tensors[i];
        w32(w, t->id);
        w32(w, PF_WIRE_F32);
        w64(w, t->count);
        w64(w, t->grad);
        w64(w, t->value);
    }
}

/* Every encoder starts from an empty message, so a failure leaves none behind. */
static void reset(pf_wire_out *o) {
    pf_buf_reset(&o->head);
    o->n_seg = 0;
    o->total = 0;
}

pf_status pf_wire_encode_hello(pf_wire_out *out, uint32_t request_id, const pf_wire_hello *m,
                               pf_error *err) {
    reset(out);
    plan p = {.type = "HELLO", .head = HELLO_FIXED - 4, .err = err};
    if (m->role > PF_WIRE_ROLE_READER)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1, "HELLO: role %u is out of range (0..4)",
                                   (unsigned)m->role);
    pf_status st = plan_str(&p, m->job, PF_WIRE_MAX_JOB_NAME, "job name");
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_HELLO, request_id, &p, &w)) != PF_OK)
        return st;
    w8(&w, m->role);
    w8(&w, 0);
    w8(&w, 0);
    w8(&w, 0);
    w32(&w, m->task_index);
    w64(&w, m->incarnation);
    wstr(&w, m->job);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_hello_ack(pf_wire_out *out, uint32_t request_id,
                                   const pf_wire_hello_ack *m, pf_error *err) {
    reset(out);
    plan p = {.type = "HELLO_ACK", .head = HELLO_ACK_SIZE, .err = err};
    writer w;
    pf_status st = begin(out, PF_WIRE_HELLO_ACK, request_id, &p, &w);
    if (st != PF_OK)
        return st;
    w32(&w, m->ps_task);
    w64(&w, m->ps_incarnation);
    w64(&w, m->version);
    w32(&w, m->n_shards);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_pull(pf_wire_out *out, uint32_t request_id, const pf_wire_pull *m,
                              pf_error *err) {
    reset(out);
    plan p = {.type = "PULL", .head = PULL_FIXED, .err = err};
    pf_status st = plan_ids(&p, m->ids, m->n, "n");
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_PULL, request_id, &p, &w)) != PF_OK)
        return st;
    w64(&w, m->min_version);
    wids(&w, m->ids, m->n);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_pull_reply(pf_wire_out *out, uint32_t request_id,
                                    const pf_wire_pull_reply *m, pf_error *err) {
    reset(out);
    plan p = {.type = "PULL_REPLY", .head = PULL_REPLY_FIXED, .err = err};
    if (m->push_result > PF_WIRE_PUSH_DUPLICATE)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1,
                                   "PULL_REPLY: push_result %u is out of range (0..3)",
                                   (unsigned)m->push_result);
    pf_status st = plan_tensors(&p, m->tensors, m->n);
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_PULL_REPLY, request_id, &p, &w)) != PF_OK)
        return st;
    w64(&w, m->version);
    w32(&w, m->push_result);
    wtensors(&w, m->tensors, m->n);
    finish(&w);
    return PF_OK;
}

static void wpush(writer *w, const pf_wire_push *m) {
    w32(w, m->task_index);
    w64(w, m->incarnation);
    w64(w, m->seq);
    w64(w, m->step);
    wtensors(w, m->tensors, m->n);
}

pf_status pf_wire_encode_push(pf_wire_out *out, uint32_t request_id, const pf_wire_push *m,
                              pf_error *err) {
    reset(out);
    plan p = {.type = "PUSH", .head = PUSH_FIXED, .err = err};
    pf_status st = plan_tensors(&p, m->tensors, m->n);
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_PUSH, request_id, &p, &w)) != PF_OK)
        return st;
    wpush(&w, m);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_push_ack(pf_wire_out *out, uint32_t request_id, const pf_wire_push_ack *m,
                                  pf_error *err) {
    reset(out);
    plan p = {.type = "PUSH_ACK", .head = PUSH_ACK_SIZE, .err = err};
    if (m->result > PF_WIRE_PUSH_DUPLICATE)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1,
                                   "PUSH_ACK: result %u is out of range (0..3)",
                                   (unsigned)m->result);
    writer w;
    pf_status st = begin(out, PF_WIRE_PUSH_ACK, request_id, &p, &w);
    if (st != PF_OK)
        return st;
    w64(&w, m->seq);
    w32(&w, m->result);
    w64(&w, m->version);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_push_pull(pf_wire_out *out, uint32_t request_id,
                                   const pf_wire_push_pull *m, pf_error *err) {
    reset(out);
    plan p = {.type = "PUSH_PULL", .head = PUSH_FIXED + PULL_FIXED, .err = err};
    pf_status st = plan_tensors(&p, m->push.tensors, m->push.n);
    if (st == PF_OK)
        st = plan_ids(&p, m->pull.ids, m->pull.n, "n_pull");
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_PUSH_PULL, request_id, &p, &w)) != PF_OK)
        return st;
    wpush(&w, &m->push);
    w64(&w, m->pull.min_version);
    wids(&w, m->pull.ids, m->pull.n);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_row_pull(pf_wire_out *out, uint32_t request_id, const pf_wire_row_pull *m,
                                  pf_error *err) {
    reset(out);
    plan p = {.type = "ROW_PULL", .head = ROW_PULL_FIXED, .err = err};
    pf_status st = plan_row_pull(&p, m);
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_ROW_PULL, request_id, &p, &w)) != PF_OK)
        return st;
    wrow_pull(&w, m);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_row_push_pull(pf_wire_out *out, uint32_t request_id,
                                       const pf_wire_row_push_pull *m, pf_error *err) {
    reset(out);
    plan p = {.type = "ROW_PUSH_PULL",
              .head = PUSH_FIXED + ROW_RECORDS_FIXED + ROW_PULL_FIXED,
              .err = err};
    pf_status st = plan_tensors(&p, m->push.tensors, m->push.n);
    if (st == PF_OK)
        st = plan_row_sets(&p, m->rows, m->n_rows, 1, "n_records");
    if (st == PF_OK)
        st = plan_row_pull(&p, &m->pull);
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_ROW_PUSH_PULL, request_id, &p, &w)) != PF_OK)
        return st;
    wpush(&w, &m->push);
    wrow_sets(&w, m->rows, m->n_rows, 1);
    wrow_pull(&w, &m->pull);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_seg_attach(pf_wire_out *out, uint32_t request_id,
                                    const pf_wire_seg_attach *m, pf_error *err) {
    reset(out);
    if (!m->token)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1, "SEG_ATTACH: token is NULL");
    if (m->size < PF_WIRE_SEG_TOKEN_SIZE)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1,
                                   "SEG_ATTACH: size %llu is smaller than the %u-byte token",
                                   (unsigned long long)m->size, PF_WIRE_SEG_TOKEN_SIZE);
    plan p = {.type = "SEG_ATTACH", .head = SEG_ATTACH_SIZE, .err = err};
    writer w;
    pf_status st = begin(out, PF_WIRE_SEG_ATTACH, request_id, &p, &w);
    if (st != PF_OK)
        return st;
    w32(&w, m->pid);
    w32(&w, m->fd);
    w64(&w, m->size);
    wbytes(&w, m->token, PF_WIRE_SEG_TOKEN_SIZE);
    finish(&w);
    return PF_OK;
}

/* A message with no payload (STATS, SEG_ACK). */
static pf_status encode_empty(pf_wire_out *out, uint16_t type, const char *name,
                              uint32_t request_id, pf_error *err) {
    reset(out);
    plan p = {.type = name, .err = err};
    writer w;
    pf_status st = begin(out, type, request_id, &p, &w);
    if (st != PF_OK)
        return st;
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_seg_ack(pf_wire_out *out, uint32_t request_id, pf_error *err) {
    return encode_empty(out, PF_WIRE_SEG_ACK, "SEG_ACK", request_id, err);
}

pf_status pf_wire_encode_seg_pull(pf_wire_out *out, uint32_t request_id, const pf_wire_seg_pull *m,
                                  pf_error *err) {
    reset(out);
    plan p = {.type = "SEG_PULL", .head = SEG_PULL_FIXED, .err = err};
    pf_status st = plan_seg(&p, m->tensors, m->n, 0);
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_SEG_PULL, request_id, &p, &w)) != PF_OK)
        return st;
    wseg_pull(&w, m);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_seg_push_pull(pf_wire_out *out, uint32_t request_id,
                                       const pf_wire_seg_push_pull *m, pf_error *err) {
    reset(out);
    plan p = {.type = "SEG_PUSH_PULL", .head = SEG_PUSH_PULL_FIXED, .err = err};
    pf_status st = plan_seg(&p, m->pull.tensors, m->pull.n, 1);
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_SEG_PUSH_PULL, request_id, &p, &w)) != PF_OK)
        return st;
    w32(&w, m->task_index);
    w32(&w, 0);
    w64(&w, m->incarnation);
    w64(&w, m->seq);
    w64(&w, m->step);
    wseg_pull(&w, &m->pull);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_lease(pf_wire_out *out, uint32_t request_id, const pf_wire_lease *m,
                               pf_error *err) {
    reset(out);
    plan p = {.type = "LEASE", .head = LEASE_FIXED, .err = err};
    if (m->n_splits == 0 || m->n_splits > PF_WIRE_MAX_SPLITS)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1,
                                   "LEASE: n_splits %u is out of range (1..%u)",
                                   (unsigned)m->n_splits, PF_WIRE_MAX_SPLITS);
    if (m->want > 1)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1, "LEASE: want %u is not 0 or 1",
                                   (unsigned)m->want);
    pf_status st = plan_ids(&p, m->done, m->n_done, "n_done");
    if (st != PF_OK)
        return st;
    for (uint32_t i = 0; i < m->n_done; i++)
        if (m->done[i] >= m->n_splits)
            return pf_error_set_offset(err, PF_ERR_INVALID, -1,
                                       "LEASE: done[%u] = %u is not below n_splits %u", (unsigned)i,
                                       (unsigned)m->done[i], (unsigned)m->n_splits);
    writer w;
    if ((st = begin(out, PF_WIRE_LEASE, request_id, &p, &w)) != PF_OK)
        return st;
    w64(&w, m->epoch);
    w32(&w, m->n_splits);
    w32(&w, m->want);
    wids(&w, m->done, m->n_done);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_lease_reply(pf_wire_out *out, uint32_t request_id,
                                     const pf_wire_lease_reply *m, pf_error *err) {
    reset(out);
    if (m->state > PF_WIRE_LEASE_END)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1,
                                   "LEASE_REPLY: state %u is out of range (0..2)",
                                   (unsigned)m->state);
    plan p = {.type = "LEASE_REPLY", .head = LEASE_REPLY_SIZE, .err = err};
    writer w;
    pf_status st = begin(out, PF_WIRE_LEASE_REPLY, request_id, &p, &w);
    if (st != PF_OK)
        return st;
    w32(&w, m->state);
    w32(&w, m->split);
    w64(&w, m->epoch);
    w32(&w, m->accepted);
    w32(&w, m->refused);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_stats(pf_wire_out *out, uint32_t request_id, pf_error *err) {
    return encode_empty(out, PF_WIRE_STATS, "STATS", request_id, err);
}

pf_status pf_wire_encode_stats_reply(pf_wire_out *out, uint32_t request_id,
                                     const pf_wire_stats_reply *m, pf_error *err) {
    reset(out);
    plan p = {.type = "STATS_REPLY", .err = err};
    pf_status st =
        plan_str(&p, m->json, (uint32_t)(PF_WIRE_MAX_PAYLOAD - STATS_REPLY_FIXED), "json");
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_STATS_REPLY, request_id, &p, &w)) != PF_OK)
        return st;
    wstr(&w, m->json);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_checkpoint(pf_wire_out *out, uint32_t request_id,
                                    const pf_wire_checkpoint *m, pf_error *err) {
    reset(out);
    plan p = {.type = "CHECKPOINT", .head = CHECKPOINT_SIZE, .err = err};
    if (m->final > 1)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1, "CHECKPOINT: final %u is not 0 or 1",
                                   (unsigned)m->final);
    writer w;
    pf_status st = begin(out, PF_WIRE_CHECKPOINT, request_id, &p, &w);
    if (st != PF_OK)
        return st;
    w64(&w, m->step);
    w32(&w, m->final);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_restore(pf_wire_out *out, uint32_t request_id, const pf_wire_restore *m,
                                 pf_error *err) {
    reset(out);
    if (!(m->lr_factor > 0 && m->lr_factor <= 1))
        return pf_error_set(err, PF_ERR_INVALID, NULL, "RESTORE: lr_factor %g is not in (0, 1]",
                            (double)m->lr_factor);
    plan p = {.type = "RESTORE", .head = RESTORE_SIZE, .err = err};
    writer w;
    pf_status st = begin(out, PF_WIRE_RESTORE, request_id, &p, &w);
    if (st != PF_OK)
        return st;
    w64(&w, m->step);
    uint32_t bits;
    memcpy(&bits, &m->lr_factor, sizeof bits);
    w32(&w, bits);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_auth(pf_wire_out *out, uint16_t type, uint32_t request_id,
                              const pf_wire_auth *m, pf_error *err) {
    reset(out);
    int nonce = type != PF_WIRE_AUTH_OK, mac = type != PF_WIRE_AUTH_CHALLENGE;
    plan p = {.type = pf_wire_type_name(type), .head = 32u * (size_t)(nonce + mac), .err = err};
    if ((type != PF_WIRE_AUTH_CHALLENGE && type != PF_WIRE_AUTH_PROOF && type != PF_WIRE_AUTH_OK) ||
        (nonce && !m->nonce) || (mac && !m->mac))
        return pf_error_set_offset(err, PF_ERR_INVALID, -1,
                                   "%s: not an AUTH message, or a field is NULL",
                                   pf_wire_type_name(type));
    writer w;
    pf_status st = begin(out, type, request_id, &p, &w);
    if (st != PF_OK)
        return st;
    if (nonce)
        wbytes(&w, m->nonce, 32);
    if (mac)
        wbytes(&w, m->mac, 32);
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_checkpoint_ack(pf_wire_out *out, uint32_t request_id,
                                        const pf_wire_checkpoint_ack *m, pf_error *err) {
    reset(out);
    plan p = {.type = "CHECKPOINT_ACK", .head = CHECKPOINT_ACK_FIXED - 4, .err = err};
    pf_status st = plan_str(&p, m->path, PF_WIRE_MAX_PATH, "path");
    writer w;
    if (st != PF_OK || (st = begin(out, PF_WIRE_CHECKPOINT_ACK, request_id, &p, &w)) != PF_OK)
        return st;
    w64(&w, m->step);
    w32(&w, m->status);
    wstr(&w, m->path);
    finish(&w);
    return PF_OK;
}

/* ERROR with its text sanitised (see wire.h). */
static pf_status encode_error(pf_wire_out *out, uint32_t request_id, uint32_t code,
                              const char *text, size_t text_len, pf_error *err) {
    reset(out);
    plan p = {.type = "ERROR", .err = err};
    if (code == PF_WIRE_OK)
        return pf_error_set_offset(err, PF_ERR_INVALID, -1, "ERROR: code must not be 0");
    if (!text)
        text_len = 0;
    const uint8_t *s = (const uint8_t *)text;
    size_t len = text_len ? wire_utf8_sanitize(s, text_len, NULL, PF_WIRE_MAX_ERROR_MSG) : 0;
    p.head = ERROR_FIXED + len;
    writer w;
    pf_status st = begin(out, PF_WIRE_ERROR, request_id, &p, &w);
    if (st != PF_OK)
        return st;
    w32(&w, code);
    w32(&w, (uint32_t)len);
    if (len)
        wire_utf8_sanitize(s, text_len, w.b + w.pos, len);
    w.pos += len;
    finish(&w);
    return PF_OK;
}

pf_status pf_wire_encode_error(pf_wire_out *out, uint32_t request_id, uint32_t code,
                               const char *message, pf_error *err) {
    return encode_error(out, request_id, code, message, message ? strlen(message) : 0, err);
}

pf_status pf_wire_encode(pf_wire_out *out, const pf_wire_msg *m, pf_error *err) {
    uint32_t id = m->request_id;
    switch (m->type) {
    case PF_WIRE_HELLO:
        return pf_wire_encode_hello(out, id, &m->u.hello, err);
    case PF_WIRE_HELLO_ACK:
        return pf_wire_encode_hello_ack(out, id, &m->u.hello_ack, err);
    case PF_WIRE_PULL:
        return pf_wire_encode_pull(out, id, &m->u.pull, err);
    case PF_WIRE_PULL_REPLY:
        return pf_wire_encode_pull_reply(out, id, &m->u.pull_reply, err);
    case PF_WIRE_PUSH:
        return pf_wire_encode_push(out, id, &m->u.push, err);
    case PF_WIRE_PUSH_ACK:
        return pf_wire_encode_push_ack(out, id, &m->u.push_ack, err);
    case PF_WIRE_PUSH_PULL:
        return pf_wire_encode_push_pull(out, id, &m->u.push_pull, err);
    case PF_WIRE_ROW_PULL:
        return pf_wire_encode_row_pull(out, id, &m->u.row_pull, err);
    case PF_WIRE_ROW_PUSH_PULL:
        return pf_wire_encode_row_push_pull(out, id, &m->u.row_push_pull, err);
    case PF_WIRE_SEG_ATTACH:
        return pf_wire_encode_seg_attach(out, id, &m->u.seg_attach, err);
    case PF_WIRE_SEG_ACK:
        return pf_wire_encode_seg_ack(out, id, err);
    case PF_WIRE_SEG_PULL:
        return pf_wire_encode_seg_pull(out, id, &m->u.seg_pull, err);
    case PF_WIRE_SEG_PUSH_PULL:
        return pf_wire_encode_seg_push_pull(out, id, &m->u.seg_push_pull, err);
    case PF_WIRE_LEASE:
        return pf_wire_encode_lease(out, id, &m->u.lease, err);
    case PF_WIRE_LEASE_REPLY:
        return pf_wire_encode_lease_reply(out, id, &m->u.lease_reply, err);
    case PF_WIRE_STATS:
        return pf_wire_encode_stats(out, id, err);
    case PF_WIRE_STATS_REPLY:
        return pf_wire_encode_stats_reply(out, id, &m->u.stats_reply, err);
    case PF_WIRE_CHECKPOINT:
        return pf_wire_encode_checkpoint(out, id, &m->u.checkpoint, err);
    case PF_WIRE_CHECKPOINT_ACK:
        return pf_wire_encode_checkpoint_ack(out, id, &m->u.checkpoint_ack, err);
    case PF_WIRE_RESTORE:
        return pf_wire_encode_restore(out, id, &m->u.restore, err);
    case PF_WIRE_ERROR:
        return encode_error(out, id, m->u.error.code, m->u.error.message.ptr,
                            m->u.error.message.len, err);
    case PF_WIRE_AUTH_CHALLENGE:
    case PF_WIRE_AUTH_PROOF:
    case PF_WIRE_AUTH_OK:
        return pf_wire_encode_auth(out, m->type, id, &m->u.auth, err);
    }
    reset(out);
    return pf_error_set_offset(err, PF_ERR_INVALID, -1, "unknown message type %u",
                               (unsigned)m->type);
}

/* --- gathering ------------------------------------------------------------------------- */

size_t pf_wire_out_parts(const pf_wire_out *out, struct iovec *parts, size_t max) {
    size_t n = 0, head = 0; /* head bytes already placed */
    const uint8_t *h = out->head.data;
    for (size_t i = 0; i <= out->n_seg; i++) {
        size_t upto = i < out->n_seg ? out->seg[i].head_off : out->head.len;
        if (upto > head) {
            if (n < max)
                parts[n] = (struct iovec){(void *)(h + head), upto - head};
            n++;
            head = upto;
        }
        if (i < out->n_seg) {
            if (n < max)
                parts[n] = (struct iovec){(void *)out->seg[i].data, out->seg[i].len};
            n++;
        }
    }
    return out->total ? n : 0;
}

pf_status pf_wire_out_gather(const pf_wire_out *out, pf_buf *dst) {
    void *p;
    pf_status st = pf_buf_extend(dst, out->total, &p);
    if (st != PF_OK)
        return st;
    /* The pieces pf_wire_out_parts lists, copied in order. */
    uint8_t *d = p;
    size_t head = 0;
    for (size_t i = 0; i <= out->n_seg; i++) {
        size_t upto = i < out->n_seg ? out->seg[i].head_off : out->head.len;
        if (upto > head) {
            memcpy(d, out->head.data + head, upto - head);
            d += upto - head;
            head = upto;
        }
        if (i < out->n_seg) {
            memcpy(d, out->seg[i].data, out->seg[i].len);
            d += out->seg[i].len;
        }
    }
    return PF_OK;
}
