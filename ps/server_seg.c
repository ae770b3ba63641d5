/* server_seg.c - a ps's shared-memory path (api/wire.md "Shared segment"): a worker on this
 * host attaches the segment that holds its values and gradients, and its SEG_PULL and
 * SEG_PUSH_PULL then name byte ranges there instead of carrying the data. Every range is
 * checked against the segment's size before it is read or written; from there on a request
 * is a PULL or PUSH_PULL, with the push checks and the parking of server_data.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "psflow/footprint.h"
#include "ps/server_internal.h"

void ps_server_seg_attach(ps_server *s, peer *p, uint32_t request_id, const pf_wire_seg_attach *a) {
    if (!pf_segment_enabled()) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_UNEXPECTED,
                        "ps %d does not take shared segments (PSFLOW_SHM=off)", s->task);
        return;
    }
    if (p->role != PF_WIRE_ROLE_WORKER && p->role != PF_WIRE_ROLE_CHIEF) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_UNEXPECTED,
                        "a peer with the role %s may not attach a segment",
                        ps_server_role_name(p->role));
        return;
    }
    if (p->seg.base) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_UNEXPECTED,
                        "this connection has a segment attached already");
        return;
    }
    pf_error err;
    pf_status st;
    if (a->pid == 0) { /* handed over through PSFLOW_SHM_DIR: fd is the handle it got */
        int fd = pf_seg_handoff_take(s->handoff, a->fd);
        st = fd < 0 ? pf_error_set(&err, PF_ERR_INVALID, NULL,
                                   "no descriptor was handed over with handle %u (none, taken, or "
                                   "older than %.0f s)",
                                   a->fd, PF_SEG_HANDOFF_TTL)
                    : pf_segment_open_fd(fd, a->size, a->token, s->seg_limit, &p->seg, &err);
        if (fd >= 0)
            close(fd);
    } else {
        st = pf_segment_open(a->pid, a->fd, a->size, a->token, s->seg_limit, &p->seg, &err);
    }
    if (st != PF_OK) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_VALUE,
                        "segment of %s %d refused (it goes on over the socket): %s",
                        ps_server_role_name(p->role), p->task, err.message);
        return;
    }
    char size[32];
    pf_footprint_format_bytes((int64_t)p->seg.size, size, sizeof size);
    ps_server_log(s, "%s %d shares a segment of %s%s: its pulls and pushes skip the socket",
                  ps_server_role_name(p->role), p->task, size,
                  a->pid == 0 ? " (its descriptor handed over through PSFLOW_SHM_DIR)" : "");
    ps_server_send(s, p->conn, pf_wire_encode_seg_ack(&s->out, request_id, &err), "SEG_ACK", 0);
}

/* Checks a segment request's records - shards this ps holds, each once and whole, ranges
 * inside the segment - and fills s->seg_ids, s->seg_dst and (push) s->seg_views. Returns 0,
 * or -1 after an error reply. */
static int check_records(ps_server *s, peer *p, uint32_t request_id, const pf_wire_seg_pull *r,
                         int push) {
    if (!p->seg.base) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_UNEXPECTED,
                        "no segment attached to this connection (SEG_ATTACH first)");
        return -1;
    }
    int n_local = ps_shards_count(s->shards);
    memset(s->pulled, 0, (size_t)n_local);
    for (uint32_t i = 0; i < r->n; i++) {
        const pf_wire_seg_tensor *t = &r->tensors[i];
        int local = t->id < (uint32_t)s->placement.n_shards ? s->local_of[t->id] : -1;
        if (local < 0 || s->pulled[local]) {
            ps_server_error(s, p->conn, request_id, PF_WIRE_UNKNOWN_SHARD,
                            "shard %" PRIu32 " is not held by ps %d or appears twice", t->id,
                            s->task);
            return -1;
        }
        s->pulled[local] = 1;
        const pf_shard_info *info = ps_shards_info(s->shards, local);
        if (ps_shards_is_table(s->shards, local)) {
            ps_server_error(s, p->conn, request_id, PF_WIRE_UNEXPECTED,
                            "shard %" PRIu32 " (%s) is an embedding table: it goes by rows, over "
                            "the socket",
                            t->id, info->name);
            return -1;
        }
        if (t->count != info->count) {
            ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_SHAPE,
                            "shard %" PRIu32 " (%s) has %zu elements, the request names %" PRIu64,
                            t->id, info->name, info->count, t->count);
            return -1;
        }
        size_t bytes = info->count * sizeof(float);
        int fits = t->value <= p->seg.size && bytes <= p->seg.size - t->value;
        if (push)
            fits = fits && t->grad <= p->seg.size && bytes <= p->seg.size - t->grad;
        if (!fits) {
            ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_VALUE,
                            "shard %" PRIu32 " (%s, %zu bytes) at offsets %" PRIu64 "/%" PRIu64
                            " runs past the segment's %zu bytes",
                            t->id, info->name, bytes, t->grad, t->value, p->seg.size);
            return -1;
        }
        s->seg_ids[i] = t->id;
        s->seg_dst[i] = (float *)(void *)(p->seg.base + t->value);
        s->seg_views[i] = (pf_wire_tensor){t->id, PF_WIRE_F32, t->count,
                                           (const float *)(const void *)(p->seg.base + t->grad)};
    }
    return 0;
}

void ps_server_seg_pull(ps_server *s, peer *p, uint32_t request_id, const pf_wire_seg_pull *pull) {
    if (check_records(s, p, request_id, pull, 0) != 0)
        return;
    pf_wire_row_pull rp = {pull->min_version, pull->n, s->seg_ids, 0, NULL};
    ps_server_pull_or_park(s, p, request_id, &rp, 0, s->seg_dst);
}

void ps_server_seg_push_pull(ps_server *s, peer *p, uint32_t request_id,
                             const pf_wire_seg_push_pull *pp) {
    if (check_records(s, p, request_id, &pp->pull, 1) != 0)
        return;
    pf_wire_push push = {pp->task_index, pp->incarnation, pp->seq,
                         pp->step,       pp->pull.n,      s->seg_views};
    pf_wire_row_pull pull = {pp->pull.min_version, pp->pull.n, s->seg_ids, 0, NULL};
    int r = ps_server_handle_push(s, p, request_id, &push, 0, NULL);
    if (r < 0)
        return;
    /* As PUSH_PULL: a sync push against a version not reached yet is answered at once. */
    if (s->spec.training.mode == PF_MODE_SYNC && push.step > ps_server_version(s))
        ps_server_reply_pull(s, p->conn, request_id, &pull, (uint32_t)r, s->seg_dst);
    else
        ps_server_pull_or_park(s, p, request_id, &pull, (uint32_t)r, s->seg_dst);
}
