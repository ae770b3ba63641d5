/* server_data.c - a parameter-server task's data path (see server_internal.h): pulls answered
 * from the values or parked until their version, pushes validated against this task's shards
 * and offered to ps_shards, the row messages of embedding tables, and the checkpoints written
 * when the version they wait for is reached.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "psflow/clock.h"
#include "psflow/dyn_batch.h"
#include "psflow/dyn_table.h"
#include "psflow/mem.h"
#include "psflow/text.h"
#include "ps/ps_checkpoint.h"
#include "ps/server_internal.h"

/* The most ids one message may name of a dynamic table: a batch's (a training step's of every
 * replica, or an evaluation's), each example naming up to max_ids. */
uint64_t ps_server_most_ids(const ps_server *s, const pf_shard_info *info) {
    return (uint64_t)pf_dyn_message_ids(&s->spec, info->var);
}

int ps_server_check_ids(ps_server *s, uint64_t conn, uint32_t request_id, const pf_wire_rows *set,
                        int local) {
    const pf_shard_info *info = ps_shards_info(s->shards, local);
    int dynamic = ps_shards_is_dynamic(s->shards, local);
    if (set->id64 != dynamic) {
        ps_server_error(s, conn, request_id, PF_WIRE_UNEXPECTED,
                        dynamic ? "shard %" PRIu32 " (%s) is a dynamic table's: its rows are named "
                                  "by 64-bit ids"
                                : "shard %" PRIu32 " (%s) is not a dynamic table's: its rows are "
                                  "named by row, not by 64-bit id",
                        set->id, info->name);
        return -1;
    }
    if (!dynamic)
        return 0;
    if (set->n_rows > ps_server_most_ids(s, info)) {
        ps_server_error(s, conn, request_id, PF_WIRE_BAD_LENGTH,
                        "shard %" PRIu32 " (%s): %" PRIu32 " ids; a batch names at most %" PRIu64,
                        set->id, info->name, set->n_rows, ps_server_most_ids(s, info));
        return -1;
    }
    for (uint32_t j = 0; j < set->n_rows; j++) {
        int owner = pf_dyn_owner(set->ids[j], s->placement.n_ps);
        if (owner != s->task) {
            ps_server_error(s, conn, request_id, PF_WIRE_BAD_VALUE,
                            "id %" PRIu64 " of shard %" PRIu32 " (%s) is held by ps %d, not ps %d",
                            set->ids[j], set->id, info->name, owner, s->task);
            return -1;
        }
    }
    return 0;
}

void ps_server_publish_tables(ps_server *s) {
    int n = 0;
    ps_server_table_stats now[PF_MAX_EMBEDDINGS];
    for (int i = 0; i < ps_shards_count(s->shards) && n < PF_MAX_EMBEDDINGS; i++) {
        if (!ps_shards_is_dynamic(s->shards, i))
            continue;
        const pf_shard_info *info = ps_shards_info(s->shards, i);
        ps_server_table_stats *t = &now[n++];
        snprintf(t->table, sizeof t->table, "%s", s->spec.model.embeddings[info->var].name);
        t->max_rows = info->max_rows;
        t->st = pf_dyn_stats_get(ps_shards_dyn_table(s->shards, i));
    }
    if (n == 0)
        return;
    pthread_mutex_lock(&s->mu);
    memcpy(s->pub_tables, now, (size_t)n * sizeof *now);
    s->pub_n_tables = n;
    pthread_mutex_unlock(&s->mu);
}

int ps_server_tables(ps_server *s, ps_server_table_stats *out, int max) {
    pthread_mutex_lock(&s->mu);
    int n = s->pub_n_tables < max ? s->pub_n_tables : max;
    if (n > 0)
        memcpy(out, s->pub_tables, (size_t)n * sizeof *out);
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Checks a pull: each whole shard must be one this task holds, each row selection a
 * table shard it holds with rows inside it, and no shard named twice (so a reply never has
 * more records than the task has shards). Returns 0 or sends an error. */
int ps_server_check_pull(ps_server *s, uint64_t conn, uint32_t request_id,
                         const pf_wire_row_pull *pull) {
    int n_local = ps_shards_count(s->shards);
    memset(s->pulled, 0, (size_t)n_local);
    for (uint32_t i = 0; i < pull->n + pull->n_sel; i++) {
        uint32_t id = i < pull->n ? pull->ids[i] : pull->sel[i - pull->n].id;
        int local = id < (uint32_t)s->placement.n_shards ? s->local_of[id] : -1;
        if (local < 0 || s->pulled[local]) {
            ps_server_error(s, conn, request_id, PF_WIRE_UNKNOWN_SHARD,
                            "shard %" PRIu32 " is not held by ps %d or appears twice", id, s->task);
            return -1;
        }
        s->pulled[local] = 1;
        if (i < pull->n)
            continue;
        const pf_wire_rows *sel = &pull->sel[i - pull->n];
        const pf_shard_info *info = ps_shards_info(s->shards, local);
        if (!ps_shards_is_table(s->shards, local)) {
            ps_server_error(s, conn, request_id, PF_WIRE_UNEXPECTED,
                            "shard %" PRIu32 " (%s) is not an embedding table: it is pulled whole",
                            id, info->name);
            return -1;
        }
        if (ps_server_check_ids(s, conn, request_id, sel, local) != 0)
            return -1;
        /* rows are strictly increasing (the codec checked): the last is the largest */
        if (!sel->id64 && sel->n_rows > 0 &&
            sel->rows[sel->n_rows - 1] >= (uint64_t)info->shape[0]) {
            ps_server_error(s, conn, request_id, PF_WIRE_BAD_SHAPE,
                            "row %" PRIu32 " of shard %" PRIu32 " (%s): it has %" PRId64 " rows",
                            sel->rows[sel->n_rows - 1], id, info->name, info->shape[0]);
            return -1;
        }
    }
    return 0;
}

/* Gathers a pull's selected rows into s->row_values (grown as needed); -1 out of memory. */
static int gather_rows(ps_server *s, const pf_wire_row_pull *pull) {
    size_t total = 0;
    for (uint32_t i = 0; i < pull->n_sel; i++) {
        const pf_shard_info *info = ps_shards_info(s->shards, s->local_of[pull->sel[i].id]);
        total += (size_t)pull->sel[i].n_rows * (size_t)info->shape[1];
    }
    if (total > s->cap_row_values) {
        float *v = pf_realloc(s->row_values, total * sizeof *v);
        if (!v)
            return -1;
        s->row_values = v;
        s->cap_row_values = total;
    }
    size_t at = 0;
    int looked_up = 0; /* ids of a dynamic table: its lookups counted */
    for (uint32_t i = 0; i < pull->n_sel; i++) {
        const pf_wire_rows *sel = &pull->sel[i];
        int local = s->local_of[sel->id];
        size_t width = (size_t)ps_shards_info(s->shards, local)->shape[1];
        const float *values = ps_shards_values(s->shards, local);
        float *dst = s->row_values ? s->row_values + at : NULL; /* none while no row was asked */
        s->views[pull->n + i] =
            (pf_wire_tensor){sel->id, PF_WIRE_F32, (uint64_t)sel->n_rows * width, dst};
        if (sel->id64) { /* zeros for an id without a row */
            if (sel->n_rows)
                ps_shards_dyn_gather(s->shards, local, sel->ids, sel->n_rows, dst);
            looked_up |= sel->n_rows > 0;
            at += (size_t)sel->n_rows * width;
            continue;
        }
        for (uint32_t j = 0; j < sel->n_rows; j++, at += width) {
            if (j + PF_PREFETCH_ROWS < sel->n_rows)
                pf_prefetch_read(values + (size_t)sel->rows[j + PF_PREFETCH_ROWS] * width,
                                 width * sizeof(float));
            memcpy(s->row_values + at, values + (size_t)sel->rows[j] * width,
                   width * sizeof(float));
        }
    }
    if (looked_up)
        ps_server_publish_tables(s);
    return 0;
}

/* ps_server_reply_pull without its count and its time. */
static void reply_pull(ps_server *s, uint64_t conn, uint32_t request_id,
                       const pf_wire_row_pull *pull, uint32_t push_result, float *const *seg_dst) {
    pf_error err;
    if (seg_dst) { /* the values go into the peer's segment; the reply says they are there */
        for (uint32_t i = 0; i < pull->n; i++) {
            int local = s->local_of[pull->ids[i]];
            memcpy(seg_dst[i], ps_shards_values(s->shards, local),
                   ps_shards_info(s->shards, local)->count * sizeof(float));
        }
        pf_wire_pull_reply r = {ps_server_version(s), push_result, 0, NULL};
        ps_server_send(s, conn, pf_wire_encode_pull_reply(&s->out, request_id, &r, &err),
                       "PULL_REPLY", 0);
        return;
    }
    for (uint32_t i = 0; i < pull->n; i++) {
        int local = s->local_of[pull->ids[i]];
        s->views[i] =
            (pf_wire_tensor){pull->ids[i], PF_WIRE_F32, ps_shards_info(s->shards, local)->count,
                             ps_shards_values(s->shards, local)};
    }
    if (pull->n_sel > 0 && gather_rows(s, pull) != 0) {
        ps_server_log(s, "out of memory gathering the rows of a pull; closing its connection");
        ps_server_close(s, conn);
        return;
    }
    pf_wire_pull_reply r = {ps_server_version(s), push_result, pull->n + pull->n_sel, s->views};
    uint64_t rows = 0;
    for (uint32_t i = 0; i < pull->n_sel; i++)
        rows += pull->sel[i].n_rows;
    __atomic_fetch_add(&s->rows_pulled, rows, __ATOMIC_RELAXED);
    /* Whole shards are lent from the values; gathered rows live in a buffer the next reply
     * reuses, so a reply with rows is copied where the socket does not take it at once. */
    ps_server_send(s, conn, pf_wire_encode_pull_reply(&s->out, request_id, &r, &err), "PULL_REPLY",
                   pull->n_sel == 0);
}

void ps_server_reply_pull(ps_server *s, uint64_t conn, uint32_t request_id,
                          const pf_wire_row_pull *pull, uint32_t push_result,
                          float *const *seg_dst) {
    double at = pf_profile_now(&s->prof);
    pf_profile_count(&s->prof, 1);
    reply_pull(s, conn, request_id, pull, push_result, seg_dst);
    pf_profile_add(&s->prof, PF_PHASE_COPY, at);
}

/* Keeps a pull on its peer until its version: ids, selections and segment destinations
 * copied (the message goes). -1: out of memory for the rows. */
static int park(peer *p, const pf_wire_row_pull *pull, float *const *seg_dst) {
    size_t rows = 0, ids = 0;
    for (uint32_t i = 0; i < pull->n_sel; i++)
        *(pull->sel[i].id64 ? &ids : &rows) += pull->sel[i].n_rows;
    if (rows > p->cap_sel_rows) {
        uint32_t *r = pf_realloc(p->sel_rows, rows * sizeof *r);
        if (!r)
            return -1;
        p->sel_rows = r;
        p->cap_sel_rows = rows;
    }
    if (ids > p->cap_sel_ids) {
        uint64_t *r = pf_realloc(p->sel_ids, ids * sizeof *r);
        if (!r)
            return -1;
        p->sel_ids = r;
        p->cap_sel_ids = ids;
    }
    if (pull->n) /* none: ids may be NULL, and so may sel_rows below */
        memcpy(p->ids, pull->ids, pull->n * sizeof *p->ids);
    p->parked_seg = seg_dst != NULL;
    if (seg_dst && pull->n)
        memcpy(p->seg_dst, seg_dst, pull->n * sizeof *p->seg_dst);
    size_t at = 0, at_ids = 0;
    for (uint32_t i = 0; i < pull->n_sel; i++) {
        const pf_wire_rows *sel = &pull->sel[i];
        p->sel[i] = *sel;
        p->sel[i].rows = NULL; /* an empty selection names no row */
        p->sel[i].ids = NULL;
        if (!sel->n_rows)
            continue;
        if (sel->id64) {
            memcpy(p->sel_ids + at_ids, sel->ids, sel->n_rows * sizeof *p->sel_ids);
            p->sel[i].ids = p->sel_ids + at_ids;
            at_ids += sel->n_rows;
            continue;
        }
        memcpy(p->sel_rows + at, sel->rows, sel->n_rows * sizeof *p->sel_rows);
        p->sel[i].rows = p->sel_rows + at;
        at += sel->n_rows;
    }
    p->pull = (pf_wire_row_pull){pull->min_version, pull->n, p->ids, pull->n_sel, p->sel};
    return 0;
}

/* Answers a pull now if its version is reached, else parks it on the peer. */
void ps_server_pull_or_park(ps_server *s, peer *p, uint32_t request_id,
                            const pf_wire_row_pull *pull, uint32_t push_result,
                            float *const *seg_dst) {
    int fresh = ps_staleness_pull(s->staleness, ps_server_trainer(p));
    if ((ps_server_version(s) >= pull->min_version && fresh) ||
        ps_server_version(s) >= (uint64_t)s->spec.training.max_steps || s->final_done) {
        ps_staleness_answered(s->staleness, fresh ? ps_server_trainer(p) : -1, -1);
        ps_server_reply_pull(s, p->conn, request_id, pull, push_result, seg_dst);
        return;
    }
    if (park(p, pull, seg_dst) != 0) {
        ps_server_log(s, "out of memory keeping the rows of a parked pull; closing its connection");
        ps_server_close(s, p->conn);
        return;
    }
    p->held_since = fresh ? -1 : pf_clock_now();
    p->parked_at = pf_profile_now(&s->prof);
    p->parked = 1;
    p->request_id = request_id;
    p->min_version = pull->min_version;
    p->push_result = push_result;
}

/* Answers the parked pulls that may go now, or all once the job is over (max_steps reached
 * or the final checkpoint written: no update comes any more); a parked CHECKPOINT for a later
 * version then gets VERSION_PASSED, not a wait until the chief's stall timeout. */
void ps_server_release_parked(ps_server *s) {
    uint64_t v = ps_server_version(s);
    int over = v >= (uint64_t)s->spec.training.max_steps || s->final_done;
    for (peer *p = s->peers; p; p = p->next) {
        int fresh = p->parked && v >= p->min_version &&
                    ps_staleness_ready(s->staleness, ps_server_trainer(p));
        if (p->parked && s->nonfinite[0]) {
            p->parked = 0;
            pf_profile_add(&s->prof, PF_PHASE_QUEUE, p->parked_at);
            ps_server_error(s, p->conn, p->request_id, PF_WIRE_NONFINITE, "%s", s->nonfinite);
        } else if (p->parked && (fresh || over)) { /* the job's end answers it unrecorded */
            p->parked = 0;
            ps_staleness_answered(s->staleness, fresh ? ps_server_trainer(p) : -1,
                                  p->held_since >= 0 ? pf_clock_now() - p->held_since : -1);
            pf_profile_add(&s->prof, PF_PHASE_QUEUE, p->parked_at);
            ps_server_reply_pull(s, p->conn, p->request_id, &p->pull, p->push_result,
                                 p->parked_seg ? p->seg_dst : NULL);
        }
        if (p->ck_parked && over && p->ck_step > v) {
            char text[160];
            snprintf(text, sizeof text,
                     "ps %d stopped at version %" PRIu64 " (%s): step %" PRIu64 " is never reached",
                     s->task, v, s->final_done ? "final checkpoint written" : "max_steps",
                     p->ck_step);
            p->ck_parked = 0;
            ps_server_log(s, "checkpoint at step %" PRIu64 " refused: %s", p->ck_step, text);
            ps_server_checkpoint_ack(s, p, p->ck_request_id, p->ck_step, PF_WIRE_VERSION_PASSED,
                                     text);
        }
    }
}

/* A line for each dynamic table's share on this ps (the job's end). */
static void log_tables(ps_server *s) {
    ps_server_table_stats t[PF_MAX_EMBEDDINGS];
    int n = ps_server_tables(s, t, PF_MAX_EMBEDDINGS);
    for (int i = 0; i < n; i++)
        ps_server_log(s,
                      "dynamic table %s: %" PRId64 " rows of at most %" PRId64 ", %" PRId64
                      " admitted, %" PRId64 " updates refused, %" PRId64 " evicted, %" PRId64
                      " lookups (%" PRId64 " without a row), %.1f MiB",
                      t[i].table, t[i].st.rows, t[i].max_rows, t[i].st.admitted, t[i].st.refused,
                      t[i].st.evicted, t[i].st.lookups, t[i].st.misses,
                      (double)t[i].st.bytes / (1024.0 * 1024.0));
}

/* Writes this task's file of checkpoint `step` from the values it holds now (version ==
 * step in sync mode: handle_checkpoint makes sure), acknowledges, and ends the task's
 * service after the final one. */
void ps_server_write_checkpoint(ps_server *s, peer *p, uint32_t request_id, uint64_t step,
                                uint32_t final) {
    pf_error err;
    pf_error_clear(&err);
    char path[2048] = "";
    char *queue = ps_server_lease_state(s);
    pf_status st = ps_checkpoint_write(s->shards, &s->spec, s->task, s->checkpoint_dir, step, queue,
                                       path, sizeof path, &err);
    pf_free(queue);
    if (st == PF_OK) {
        ps_stats ps = ps_shards_stats(s->shards);
        ps_server_log(s,
                      "checkpoint written at step %" PRIu64 " (version %" PRIu64
                      "): %s; pushes applied %" PRIu64 ", stale %" PRIu64 ", duplicate %" PRIu64
                      ", refused %" PRIu64 ", errors %" PRIu64,
                      step, ps.version, path, ps.pushes_applied, ps.pushes_stale,
                      ps.pushes_duplicate, ps.pushes_refused, s->errors);
    } else
        ps_server_log(s, "checkpoint at step %" PRIu64 " failed: %s", step, err.message);
    ps_server_checkpoint_ack(s, p, request_id, step,
                             st == PF_OK              ? 0
                             : st == PF_ERR_NONFINITE ? PF_WIRE_NONFINITE
                                                      : PF_WIRE_INTERNAL,
                             st == PF_OK ? path : err.message);
    if (final && st == PF_OK) {
        pthread_mutex_lock(&s->mu);
        s->final_done = 1;
        s->final_time = pf_clock_now();
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        ps_server_release_parked(s);
        ps_server_log(s, "job %s done at version %" PRIu64, s->spec.name, ps_server_version(s));
        log_tables(s);
    }
}

/* Right after an update (or a rollback): writes the parked checkpoints whose version has
 * been reached; one whose version can no longer be reached is refused. */
void ps_server_write_parked_checkpoints(ps_server *s) {
    uint64_t v = ps_server_version(s);
    for (peer *p = s->peers; p; p = p->next) {
        if (!p->ck_parked || v < p->ck_step)
            continue;
        p->ck_parked = 0;
        if (v == p->ck_step) {
            ps_server_write_checkpoint(s, p, p->ck_request_id, p->ck_step, p->ck_final);
        } else {
            char text[160];
            snprintf(text, sizeof text, "ps %d is at version %" PRIu64 ", past step %" PRIu64,
                     s->task, v, p->ck_step);
            ps_server_checkpoint_ack(s, p, p->ck_request_id, p->ck_step, PF_WIRE_VERSION_PASSED,
                                     text);
        }
    }
}

static const uint32_t push_result_wire[] = {
    [PS_PUSH_APPLIED] = PF_WIRE_PUSH_APPLIED,
    [PS_PUSH_ACCEPTED] = PF_WIRE_PUSH_ACCEPTED,
    [PS_PUSH_STALE] = PF_WIRE_PUSH_STALE,
    [PS_PUSH_DUPLICATE] = PF_WIRE_PUSH_DUPLICATE,
};

/* After an update: a NaN or infinite value stops this ps serving (training.on_nonfinite
 * "fail"), with a message naming the variable and the version. */
void ps_server_check_finite(ps_server *s) {
    size_t elem;
    int local = ps_shards_find_nonfinite(s->shards, &elem);
    if (local < 0)
        return;
    const pf_shard_info *info = ps_shards_info(s->shards, local);
    snprintf(s->nonfinite, sizeof s->nonfinite,
             "ps %d: %s became non-finite (element %zu) at step %" PRIu64
             "; serving and checkpointing stopped",
             s->task, info->name, elem, ps_server_version(s));
    pf_text_cut_utf8(s->nonfinite);
    ps_server_log(s, "%s", s->nonfinite);
}

/* Called right before anything changes the values (an update, a rollback, a membership
 * change that applies a waiting sync step): the rest of a reply still being written from
 * them is copied first, so no reply carries values of two versions under one label. */
void ps_server_settle(ps_server *s) {
    if (s->ws && pf_ws_settle(s->ws) != PF_OK)
        ps_server_log(s,
                      "out of memory copying the rest of replies before the values change; their "
                      "connections are closed");
}

/* Checks who pushes: a worker or the chief, as the task and incarnation it said HELLO as, in
 * the membership. Returns 0 or sends an error. */
static int check_pusher(ps_server *s, peer *p, uint32_t request_id, const pf_wire_push *push) {
    int n_tasks = ps_shards_tasks(s->shards);
    if (p->role != PF_WIRE_ROLE_WORKER && p->role != PF_WIRE_ROLE_CHIEF) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_FORBIDDEN, "a task of role %s may not push",
                        ps_server_role_name(p->role));
        return -1;
    }
    if (push->task_index >= (uint32_t)n_tasks) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_VALUE,
                        "task index %" PRIu32 " out of range (the job's membership has %d training "
                        "tasks; a removed worker's push is not counted)",
                        push->task_index, n_tasks);
        return -1;
    }
    if (push->task_index != (uint32_t)p->task || push->incarnation != p->incarnation) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_FORBIDDEN,
                        "push names task %" PRIu32 " incarnation %" PRIu64
                        "; this connection said HELLO as task %d incarnation %" PRIu64,
                        push->task_index, push->incarnation, p->task, p->incarnation);
        return -1;
    }
    return 0;
}

/* The local shard `id` names for a push, once: -1 after an error reply. */
static int push_shard(ps_server *s, peer *p, uint32_t request_id, uint32_t id, int rows) {
    int local = id < (uint32_t)s->placement.n_shards ? s->local_of[id] : -1;
    if (local < 0 || s->pulled[local]) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_UNKNOWN_SHARD,
                        "shard %" PRIu32 " is not held by ps %d or appears twice", id, s->task);
        return -1;
    }
    if (ps_shards_is_table(s->shards, local) != rows) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_UNEXPECTED,
                        rows ? "shard %" PRIu32
                               " (%s) is not an embedding table: it is pushed whole"
                             : "shard %" PRIu32 " (%s) is an embedding table: it is pushed by rows "
                               "(ROW_PUSH_PULL)",
                        id, ps_shards_info(s->shards, local)->name);
        return -1;
    }
    s->pulled[local] = 1;
    return local;
}

/* Offers the push whose gradients are in s->grads (rows_named: its table rows, counted in
 * rows_pushed when the push is taken); returns the wire push result, or -1 after an error
 * reply. */
static int offer(ps_server *s, peer *p, uint32_t request_id, const pf_wire_push *push,
                 uint64_t rows_named) {
    if (ps_server_version(s) >= (uint64_t)s->spec.training.max_steps || s->final_done)
        return PF_WIRE_PUSH_STALE; /* the job is over: nothing more is applied */
    ps_server_settle(s);
    double at = pf_profile_now(&s->prof);
    ps_push_result r = ps_shards_push_grads(s->shards, (int)push->task_index, push->incarnation,
                                            push->seq, push->step, s->grads);
    if (r != PS_PUSH_APPLIED)
        at = pf_profile_add(&s->prof, PF_PHASE_APPLY, at);
    ps_stats now = ps_shards_stats(s->shards);
    __atomic_store_n(&s->pub_version, now.version, __ATOMIC_RELAXED);
    __atomic_store_n(&s->pub_applied, now.pushes_applied, __ATOMIC_RELAXED);
    __atomic_store_n(&s->pub_stale, now.pushes_stale, __ATOMIC_RELAXED);
    if (r == PS_PUSH_REFUSED) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_STALE_INCARNATION,
                        "push from incarnation %" PRIu64 " of task %" PRIu32
                        ", which has been replaced by a newer one",
                        push->incarnation, push->task_index);
        return -1;
    }
    if (r == PS_PUSH_NOMEM) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_INTERNAL,
                        "ps %d has no memory to keep the rows of this push; not applied", s->task);
        return -1;
    }
    if (r == PS_PUSH_APPLIED || r == PS_PUSH_ACCEPTED)
        __atomic_fetch_add(&s->rows_pushed, rows_named, __ATOMIC_RELAXED);
    if (r == PS_PUSH_APPLIED) {
        ps_server_publish_tables(s);
        ps_staleness_pushed(s->staleness, (int)push->task_index);
        ps_server_check_finite(s);
        pf_profile_add(&s->prof, PF_PHASE_APPLY, at); /* the update and its finite check */
        if (!s->nonfinite[0])
            ps_server_write_parked_checkpoints(s); /* before anything more is applied */
        ps_server_release_parked(s);
        pf_profile_at_step(&s->prof, now.version); /* a trace's spans: in the step it serves */
    }
    if (s->nonfinite[0]) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_NONFINITE, "%s", s->nonfinite);
        return -1;
    }
    return (int)push_result_wire[r];
}

/* Validates and offers a push (PUSH, ROW_PUSH_PULL: rows may be NULL with n_rows 0); returns
 * the wire push result, or -1 after an error reply. Every shard the task holds is named
 * once: a table by rows, any other whole. */
int ps_server_handle_push(ps_server *s, peer *p, uint32_t request_id, const pf_wire_push *push,
                          uint32_t n_rows, const pf_wire_rows *rows) {
    int n_local = ps_shards_count(s->shards);
    uint64_t rows_named = 0; /* counted as pushed once the push is taken */
    if (check_pusher(s, p, request_id, push) != 0)
        return -1;
    if ((uint64_t)push->n + n_rows != (uint64_t)n_local) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_LENGTH,
                        "push carries %" PRIu32 " tensors and %" PRIu32 " row sets; ps %d holds %d "
                        "shards",
                        push->n, n_rows, s->task, n_local);
        return -1;
    }
    memset(s->pulled, 0, (size_t)n_local); /* here: the shards named so far */
    for (uint32_t i = 0; i < push->n; i++) {
        const pf_wire_tensor *t = &push->tensors[i];
        int local = push_shard(s, p, request_id, t->id, 0);
        if (local < 0)
            return -1;
        const pf_shard_info *info = ps_shards_info(s->shards, local);
        if (t->count != info->count) {
            ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_SHAPE,
                            "shard %" PRIu32 " (%s) has %zu elements, push carries %" PRIu64, t->id,
                            info->name, info->count, t->count);
            return -1;
        }
        s->grads[local] = (ps_grad){t->data, NULL, 0, NULL};
    }
    for (uint32_t i = 0; i < n_rows; i++) {
        const pf_wire_rows *r = &rows[i];
        int local = push_shard(s, p, request_id, r->id, 1);
        if (local < 0)
            return -1;
        const pf_shard_info *info = ps_shards_info(s->shards, local);
        if (ps_server_check_ids(s, p->conn, request_id, r, local) != 0)
            return -1;
        if (r->id64 && r->width != (uint64_t)info->shape[1]) {
            ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_SHAPE,
                            "shard %" PRIu32 " (%s) has rows of %" PRId64
                            " floats; the push has rows of %" PRIu32,
                            r->id, info->name, info->shape[1], r->width);
            return -1;
        }
        if (!r->id64 && (r->width != (uint64_t)info->shape[1] ||
                         (r->n_rows > 0 && r->rows[r->n_rows - 1] >= (uint64_t)info->shape[0]))) {
            ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_SHAPE,
                            "shard %" PRIu32 " (%s) has %" PRId64 " rows of %" PRId64
                            " floats; the push has rows of %" PRIu32 " up to row %" PRIu32,
                            r->id, info->name, info->shape[0], info->shape[1], r->width,
                            r->n_rows ? r->rows[r->n_rows - 1] : 0);
            return -1;
        }
        s->grads[local] = (ps_grad){r->data, r->rows, r->n_rows, r->ids};
        rows_named += r->n_rows;
    }
    return offer(s, p, request_id, push, rows_named);
}
