/* request.c - a worker's requests to one ps, encoded, and the check of its replies (see
 * request.h).
 */
#include "worker/request.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"
#include "worker/rows.h"

/* --- the shared part and one ps's shards ------------------------------------------------- */

pf_status worker_request_env_init(worker_request_env *e, const pf_placement *placement,
                                  const worker_rows *rows, const pf_segment *seg, size_t n_params,
                                  int task, uint64_t incarnation) {
    size_t n = (size_t)placement->n_shards;
    *e = (worker_request_env){.placement = placement,
                              .rows = rows,
                              .seg = seg,
                              .n_params = n_params,
                              .task = (uint32_t)task,
                              .incarnation = incarnation};
    e->views = pf_calloc(n, sizeof *e->views);
    e->sel = pf_calloc(n, sizeof *e->sel);
    e->prows = pf_calloc(n, sizeof *e->prows);
    e->segrec = pf_calloc(n, sizeof *e->segrec);
    return e->views && e->sel && e->prows && e->segrec ? PF_OK : PF_ERR_NOMEM;
}

void worker_request_env_deinit(worker_request_env *e) {
    pf_free(e->views);
    pf_free(e->sel);
    pf_free(e->prows);
    pf_free(e->segrec);
    e->views = NULL;
    e->sel = e->prows = NULL;
    e->segrec = NULL;
}

/* Lists the shards q's ps holds (and, in row mode, those of them that are dense). */
static pf_status list_shards(worker_request *q, const worker_request_env *e, pf_error *err) {
    const pf_placement *pl = e->placement;
    size_t nn = (size_t)pl->n_shards;
    q->ids = pf_mallocarray(nn, sizeof *q->ids);
    q->dense_ids = pf_mallocarray(nn, sizeof *q->dense_ids);
    q->exp_id = pf_mallocarray(nn, sizeof *q->exp_id);
    q->exp_count = pf_mallocarray(nn, sizeof *q->exp_count);
    q->exp_dst = pf_mallocarray(nn, sizeof *q->exp_dst);
    if (!q->ids || !q->dense_ids || !q->exp_id || !q->exp_count || !q->exp_dst)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    for (int g = 0; g < pl->n_shards; g++) {
        if (pl->shards[g].ps_task != q->ps)
            continue;
        q->ids[q->n_ids++] = (uint32_t)g;
        if (!e->rows || pl->shards[g].var >= e->rows->n_tables)
            q->dense_ids[q->n_dense++] = (uint32_t)g;
    }
    return PF_OK;
}

pf_status worker_request_init(worker_request *q, const worker_request_env *e, int ps,
                              pf_error *err) {
    q->ps = ps;
    pf_wire_out_init(&q->out);
    pf_status st = list_shards(q, e, err);
    if (st != PF_OK)
        return st;
    q->places = pf_calloc((size_t)(q->n_ids ? q->n_ids : 1), sizeof *q->places);
    uint64_t *counts = pf_calloc((size_t)(q->n_ids ? q->n_ids : 1), sizeof *counts);
    if (!q->places || !counts) {
        pf_free(counts);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    }
    for (int i = 0; i < q->n_ids; i++)
        counts[i] = e->placement->shards[q->ids[i]].count;
    st = pf_wire_pull_reply_places(counts, (uint32_t)q->n_ids, q->places, &q->reply_len);
    pf_free(counts);
    if (st != PF_OK)
        pf_error_set(err, st, NULL, "ps %d's shards do not fit one message", ps);
    return st;
}

void worker_request_deinit(worker_request *q) {
    pf_wire_out_deinit(&q->out);
    pf_free(q->ids);
    pf_free(q->places);
    pf_free(q->dense_ids);
    pf_free(q->exp_id);
    pf_free(q->exp_count);
    pf_free(q->exp_dst);
}

/* --- encoding ------------------------------------------------------------------------------ */

/* Sets what q's next reply must hold: its pull of every shard whole, or in row mode its
 * dense shards whole and the plan's rows of its table shards; values go to params (NULL:
 * nowhere). Fills e->sel with the selections (row mode) and returns their number. */
static uint32_t expect_pull(worker_request *q, const worker_request_env *e, float *params) {
    q->n_exp = 0;
    const worker_row_plan *plan = e->pull_plan ? e->pull_plan : e->plan;
    const worker_rows *r = plan ? plan->rows : e->rows; /* the layout of params */
    uint32_t n_sel = 0;
    /* A reply's records are the whole shards first, then the selections: two passes. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < q->n_ids; i++) {
            const pf_shard_info *s = &e->placement->shards[q->ids[i]];
            int table = r && s->var < r->n_tables;
            if (table != pass || (table && !plan))
                continue; /* not in this pass, or no rows wanted */
            int k = q->n_exp++;
            q->exp_id[k] = q->ids[i];
            if (!table) {
                q->exp_count[k] = s->count;
                q->exp_dst[k] =
                    params ? params + (r ? worker_rows_dense_at(r, s) : s->offset) : NULL;
                continue;
            }
            uint32_t first = plan->first[q->ids[i]], n = plan->count[q->ids[i]];
            size_t dim = (size_t)s->shape[1];
            q->exp_count[k] = (uint64_t)n * dim;
            q->exp_dst[k] = params ? params + r->table_off[s->var] + (size_t)first * dim : NULL;
            e->sel[n_sel++] = worker_rows_set(plan, s, q->ids[i], 0, NULL);
        }
    return n_sel;
}

/* 1 when q's data request may go through the segment: the ps took it (seg) and the vectors
 * the request reads (grads, NULL for a pull) and fills (params) lie in it. */
static int use_segment(const worker_request_env *e, int seg, const float *grads,
                       const float *params) {
    size_t bytes = e->n_params * sizeof(float);
    return seg && params && pf_segment_holds(e->seg, params, bytes) &&
           (!grads || pf_segment_holds(e->seg, grads, bytes));
}

/* Encodes into q->out a SEG_PULL (grads NULL) or SEG_PUSH_PULL of q's shards: each one's
 * gradients in grads and values into params, both in the segment. */
static pf_status encode_segment(worker_request *q, const worker_request_env *e, uint32_t id,
                                const float *grads, uint64_t step, float *params, pf_error *err) {
    const uint8_t *base = e->seg->base;
    for (int i = 0; i < q->n_ids; i++) {
        const pf_shard_info *s = &e->placement->shards[q->ids[i]];
        uint64_t g = grads ? (uint64_t)((const uint8_t *)(grads + s->offset) - base) : 0;
        e->segrec[i] = (pf_wire_seg_tensor){q->ids[i], s->count, g,
                                            (uint64_t)((uint8_t *)(params + s->offset) - base)};
    }
    q->kind = WORKER_REQ_DATA;
    q->n_exp = 0; /* the reply carries no records: the values are in the segment */
    q->out_seg = 1;
    pf_wire_seg_pull pull = {q->min_version, (uint32_t)q->n_ids, e->segrec};
    if (!grads)
        return pf_wire_encode_seg_pull(&q->out, id, &pull, err);
    pf_wire_seg_push_pull pp = {e->task, e->incarnation, e->seq, step, pull};
    return pf_wire_encode_seg_push_pull(&q->out, id, &pp, err);
}

pf_status worker_request_pull(worker_request *q, const worker_request_env *e, uint32_t id, int seg,
                              uint64_t min_version, float *params, pf_error *err) {
    q->req_grads = NULL;
    q->min_version = min_version; /* what an encoding again for the socket asks for */
    if (use_segment(e, seg, NULL, params))
        return encode_segment(q, e, id, NULL, 0, params, err);
    q->out_seg = 0;
    uint32_t n_sel = expect_pull(q, e, params);
    q->kind = WORKER_REQ_DATA;
    if (!e->rows) {
        pf_wire_pull pull = {min_version, (uint32_t)q->n_ids, q->ids};
        return pf_wire_encode_pull(&q->out, id, &pull, err);
    }
    pf_wire_row_pull pull = {min_version, (uint32_t)q->n_dense, q->dense_ids, n_sel, e->sel};
    return pf_wire_encode_row_pull(&q->out, id, &pull, err);
}

/* Points e->views at q's shards of grads. */
static void gradient_views(worker_request *q, const worker_request_env *e, const float *grads) {
    for (int i = 0; i < q->n_ids; i++) {
        const pf_shard_info *s = &e->placement->shards[q->ids[i]];
        e->views[i] = (pf_wire_tensor){q->ids[i], PF_WIRE_F32, s->count, grads + s->offset};
    }
}

/* Row mode: ROW_PUSH_PULL of grads (the compact vector) to q's ps, its dense shards whole
 * and the plan's rows of its table shards; then, with a pull_plan and params, a pull of the
 * dense shards and the pull_plan's rows into params (a fused step), else nothing (the reply
 * carries the version). */
static pf_status encode_row_push(worker_request *q, const worker_request_env *e, uint32_t id,
                                 const float *grads, uint64_t step, float *params, pf_error *err) {
    const worker_row_plan *plan = e->plan;
    const worker_rows *r = plan ? plan->rows : e->rows; /* the layout of grads */
    uint32_t n_dense = 0, n_rows = 0;
    for (int i = 0; i < q->n_ids; i++) {
        const pf_shard_info *s = &e->placement->shards[q->ids[i]];
        if (s->var >= r->n_tables) {
            e->views[n_dense++] = (pf_wire_tensor){q->ids[i], PF_WIRE_F32, s->count,
                                                   grads + worker_rows_dense_at(r, s)};
            continue;
        }
        uint32_t first = plan ? plan->first[q->ids[i]] : 0;
        uint32_t n = plan ? plan->count[q->ids[i]] : 0;
        size_t dim = (size_t)s->shape[1];
        e->prows[n_rows++] =
            worker_rows_set(plan, s, q->ids[i], (uint32_t)dim,
                            n ? grads + r->table_off[s->var] + (size_t)first * dim : NULL);
    }
    q->n_exp = 0;
    pf_wire_row_pull pull = {q->min_version, 0, NULL, 0, NULL};
    if (e->pull_plan && params) /* expect_pull fills e->sel: scratch of its own */
        pull = (pf_wire_row_pull){q->min_version, (uint32_t)q->n_dense, q->dense_ids,
                                  expect_pull(q, e, params), e->sel};
    pf_wire_row_push_pull pp = {
        {e->task, e->incarnation, e->seq, step, n_dense, e->views}, n_rows, e->prows, pull};
    return pf_wire_encode_row_push_pull(&q->out, id, &pp, err);
}

pf_status worker_request_push_pull(worker_request *q, const worker_request_env *e, uint32_t id,
                                   int seg, const float *grads, uint64_t step, uint64_t min_version,
                                   float *params, pf_error *err) {
    q->kind = WORKER_REQ_DATA;
    q->req_grads = grads;
    q->req_step = step;
    q->min_version = min_version;
    if (use_segment(e, seg, grads, params)) /* never in row mode: no segment */
        return encode_segment(q, e, id, grads, step, params, err);
    q->out_seg = 0;
    if (e->rows)
        return encode_row_push(q, e, id, grads, step, params, err);
    gradient_views(q, e, grads);
    expect_pull(q, e, params);
    pf_wire_push_pull pp = {{e->task, e->incarnation, e->seq, step, (uint32_t)q->n_ids, e->views},
                            {min_version, (uint32_t)q->n_ids, q->ids}};
    return pf_wire_encode_push_pull(&q->out, id, &pp, err);
}

pf_status worker_request_push(worker_request *q, const worker_request_env *e, uint32_t id,
                              const float *grads, uint64_t step, pf_error *err) {
    gradient_views(q, e, grads);
    pf_wire_push push = {e->task, e->incarnation, e->seq, step, (uint32_t)q->n_ids, e->views};
    q->kind = WORKER_REQ_DATA;
    q->out_seg = 0;
    return pf_wire_encode_push(&q->out, id, &push, err);
}

pf_status worker_request_checkpoint(worker_request *q, uint32_t id, uint64_t step, int final,
                                    pf_error *err) {
    pf_wire_checkpoint ck = {step, (uint32_t) final};
    q->kind = WORKER_REQ_CHECKPOINT;
    q->ck_step = step;
    q->ck_final = (uint32_t) final;
    return pf_wire_encode_checkpoint(&q->out, id, &ck, err);
}

pf_status worker_request_restore(worker_request *q, uint32_t id, uint64_t step, float lr_factor,
                                 pf_error *err) {
    pf_wire_restore rs = {step, lr_factor};
    q->kind = WORKER_REQ_RESTORE;
    q->ck_step = step;
    q->ck_lr_factor = lr_factor;
    return pf_wire_encode_restore(&q->out, id, &rs, err);
}

/* --- replies ------------------------------------------------------------------------------- */

/* Takes a PULL_REPLY's tensors into the parameter vector after checking each: a ps answers
 * with the shards asked for, in request order. A tensor received in place is there
 * already (its view points at its destination); any other is copied. */
static pf_status take_values(const worker_request *q, const pf_wire_pull_reply *r, char *msg,
                             size_t len) {
    if (r->n != (uint32_t)q->n_exp) {
        snprintf(msg, len, "ps %d answered with %" PRIu32 " records, expected %d", q->ps, r->n,
                 q->n_exp);
        return PF_ERR_FORMAT;
    }
    for (uint32_t i = 0; i < r->n; i++) {
        const pf_wire_tensor *t = &r->tensors[i];
        if (t->id != q->exp_id[i] || t->count != q->exp_count[i]) {
            snprintf(msg, len,
                     "ps %d sent shard %" PRIu32 " with %" PRIu64 " elements where shard %" PRIu32
                     " with %" PRIu64 " was asked for",
                     q->ps, t->id, t->count, q->exp_id[i], q->exp_count[i]);
            return PF_ERR_FORMAT;
        }
        float *dst = q->exp_dst[i];
        if (dst && t->data != dst && t->count > 0)
            memcpy(dst, t->data, t->count * sizeof(float));
    }
    return PF_OK;
}

/* The status and text of a CHECKPOINT_ACK that did not succeed. */
static pf_status checkpoint_refused(const worker_request *q, const pf_wire_checkpoint_ack *a,
                                    char *msg, size_t len) {
    snprintf(msg, len, "ps %d could not %s: %.*s", q->ps,
             q->kind == WORKER_REQ_RESTORE ? "roll back" : "checkpoint", (int)a->path.len,
             a->path.ptr);
    return a->status == PF_WIRE_NONFINITE        ? PF_ERR_NONFINITE
           : a->status == PF_WIRE_VERSION_PASSED ? PF_ERR_RANGE
           : a->status == PF_WIRE_BAD_VALUE      ? PF_ERR_FORMAT /* does not verify */
                                                 : PF_ERR_IO;
}

pf_status worker_request_check_reply(const worker_request *q, const pf_wire_msg *m, int attaching,
                                     uint64_t *version, uint64_t *incarnation,
                                     uint32_t *push_result, char *msg, size_t len) {
    pf_status st = PF_OK;
    switch (m->type) {
    case PF_WIRE_HELLO_ACK:
        if (m->u.hello_ack.n_shards != (uint32_t)q->n_ids) {
            /* not the placement this task computed: another spec */
            snprintf(msg, len,
                     "ps %d holds %" PRIu32 " shards where this task's placement has %d; "
                     "do both run the same job spec?",
                     q->ps, m->u.hello_ack.n_shards, q->n_ids);
            return PF_ERR_INVALID;
        }
        *version = m->u.hello_ack.version;
        *incarnation = m->u.hello_ack.ps_incarnation;
        return PF_OK;
    case PF_WIRE_PULL_REPLY:
        st = take_values(q, &m->u.pull_reply, msg, len);
        *version = m->u.pull_reply.version;
        *push_result = m->u.pull_reply.push_result;
        return st;
    case PF_WIRE_SEG_ACK:
        if (attaching)
            return PF_OK;
        snprintf(msg, len, "ps %d sent SEG_ACK to a request that was not SEG_ATTACH", q->ps);
        return PF_ERR_FORMAT;
    case PF_WIRE_PUSH_ACK:
        *version = m->u.push_ack.version;
        *push_result = m->u.push_ack.result;
        return PF_OK;
    case PF_WIRE_LEASE_REPLY:
        if (q->kind == WORKER_REQ_LEASE)
            return PF_OK;
        snprintf(msg, len, "ps %d sent LEASE_REPLY to a request that was not LEASE", q->ps);
        return PF_ERR_FORMAT;
    case PF_WIRE_CHECKPOINT_ACK:
        return m->u.checkpoint_ack.status == 0
                   ? PF_OK
                   : checkpoint_refused(q, &m->u.checkpoint_ack, msg, len);
    case PF_WIRE_ERROR:
        snprintf(msg, len, "ps %d: %s: %.*s", q->ps, pf_wire_code_name(m->u.error.code),
                 (int)m->u.error.message.len, m->u.error.message.ptr);
        return m->u.error.code == PF_WIRE_NONFINITE ? PF_ERR_NONFINITE : PF_ERR_INVALID;
    default:
        snprintf(msg, len, "ps %d sent an unexpected %s", q->ps, pf_wire_type_name(m->type));
        return PF_ERR_FORMAT;
    }
}
