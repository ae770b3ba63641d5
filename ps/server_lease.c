/* server_lease.c - the work queue of input splits ps task 0 keeps for a job with data.splits
 * dynamic (api/wire.md "LEASE"; the queue itself is split_queue.c). It is created by the
 * first LEASE, with the number of splits the training tasks cut the input into (every task
 * must name the same), training.epochs and training.seed. A training task's leases go back
 * to the queue when its last connection closes or a new incarnation of it says HELLO, so a
 * dead worker's unfinished splits are read by the others. ps 0's checkpoint file holds the
 * queue's state (the metadata "psflow_input_queue", hex): a restore and a rollback take the
 * queue back to the checkpoint's step, so the splits done after it are read again, as the
 * updates made from them were undone.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"
#include "ps/server_internal.h"
#include "ps/shard.h"
#include "ps/split_queue.h"

/* Publishes the queue's figures for ps_server_input (any thread reads them under mu). */
static void publish(ps_server *s) {
    ps_server_input_stats in = {0};
    if (s->splits) {
        ps_split_queue_stats st = ps_split_queue_stats_get(s->splits);
        in = (ps_server_input_stats){st.epoch, ps_split_queue_splits(s->splits), st.done, st.leased,
                                     st.finished};
    }
    pthread_mutex_lock(&s->mu);
    s->pub_input = in;
    s->pub_has_input = s->splits != NULL;
    pthread_mutex_unlock(&s->mu);
}

int ps_server_input(ps_server *s, ps_server_input_stats *out) {
    pthread_mutex_lock(&s->mu);
    int has = s->pub_has_input;
    *out = s->pub_input;
    pthread_mutex_unlock(&s->mu);
    return has;
}

/* Logs the per-task counts of the epoch that just ended. */
static void log_epoch(const ps_server *s, uint64_t ended) {
    char line[1024];
    size_t n = 0;
    int tasks = ps_shards_tasks(s->shards);
    for (int t = 0; t < tasks && t < PF_MAX_TASKS && n < sizeof line - 32; t++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s%d:%" PRIu32, t ? " " : "", t,
                              ps_split_queue_last_epoch(s->splits, t));
    ps_split_queue_stats st = ps_split_queue_stats_get(s->splits);
    ps_server_log(s, "input epoch %" PRIu64 " done: %" PRIu32 " splits; splits per task: %s%s",
                  ended, ps_split_queue_splits(s->splits), line,
                  st.finished ? "; training.epochs reached" : "");
}

void ps_server_lease(ps_server *s, peer *p, uint32_t request_id, const pf_wire_lease *m) {
    int task = ps_server_trainer(p);
    if (s->spec.data.splits != PF_SPLITS_DYNAMIC || s->task != 0 || task < 0) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_UNEXPECTED,
                        "LEASE goes to ps 0 of a job with data.splits dynamic, from a "
                        "training task (this is ps %d of job %s, splits %s; the peer is %s)",
                        s->task, s->spec.name,
                        s->spec.data.splits == PF_SPLITS_DYNAMIC ? "dynamic" : "static",
                        ps_server_role_name(p->role));
        return;
    }
    for (const peer *q = s->peers; q; q = q->next)
        if (ps_server_trainer(q) == task && q->incarnation > p->incarnation) {
            ps_server_error(s, p->conn, request_id, PF_WIRE_STALE_INCARNATION,
                            "%s %d incarnation %" PRIu64 " was replaced by incarnation %" PRIu64
                            ": it leases nothing",
                            ps_server_role_name(p->role), task, p->incarnation, q->incarnation);
            return;
        }
    if (!s->splits) {
        pf_error err;
        pf_status st = ps_split_queue_create(m->n_splits, s->spec.training.epochs,
                                             s->spec.training.seed, PF_MAX_TASKS, &s->splits, &err);
        if (st != PF_OK) {
            ps_server_error(s, p->conn, request_id,
                            st == PF_ERR_NOMEM ? PF_WIRE_INTERNAL : PF_WIRE_BAD_VALUE, "%s",
                            err.message);
            return;
        }
        if (s->spec.training.epochs > 0)
            ps_server_log(s, "input work queue: %" PRIu32 " splits, %" PRId64 " epoch(s)",
                          m->n_splits, s->spec.training.epochs);
        else
            ps_server_log(s,
                          "input work queue: %" PRIu32
                          " splits, epoch after epoch until max_steps (no training.epochs)",
                          m->n_splits);
    } else if (ps_split_queue_splits(s->splits) != m->n_splits) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_VALUE,
                        "%s %d cut the input into %" PRIu32 " splits, the queue holds %" PRIu32
                        " (do all tasks read the same files with the same data.split_mb?)",
                        ps_server_role_name(p->role), task, m->n_splits,
                        ps_split_queue_splits(s->splits));
        return;
    }
    ps_lease_result r =
        ps_split_queue_lease(s->splits, task, m->epoch, m->done, m->n_done, (int)m->want);
    if (r.refused > 0)
        ps_server_log(s,
                      "refused %" PRIu32 " of %" PRIu32 " split completion(s) of epoch %" PRIu64
                      " from %s %d: not leased to it in the current epoch %" PRIu64,
                      r.refused, m->n_done, m->epoch, ps_server_role_name(p->role), task, r.epoch);
    if (r.epoch_ended)
        log_epoch(s, r.epoch - 1); /* r.epoch is the next one (or, finished, the count) */
    publish(s);
    pf_wire_lease_reply rep = {(uint32_t)r.state, r.split, r.epoch, r.accepted, r.refused};
    pf_error err;
    ps_server_send(s, p->conn, pf_wire_encode_lease_reply(&s->out, request_id, &rep, &err),
                   "LEASE_REPLY", 0);
}

void ps_server_lease_release(ps_server *s, const peer *gone) {
    int task = ps_server_trainer(gone);
    if (!s->splits || task < 0)
        return;
    for (const peer *q = s->peers; q; q = q->next)
        if (q != gone && ps_server_trainer(q) == task && q->incarnation >= gone->incarnation)
            return; /* another connection of the task (or of a newer incarnation) lives on */
    uint32_t n = ps_split_queue_release(s->splits, task);
    if (n > 0)
        ps_server_log(s, "%u split(s) leased to %s %d go back to the queue (it is gone)", n,
                      ps_server_role_name(gone->role), task);
    publish(s);
}

void ps_server_lease_renew(ps_server *s, const peer *p) {
    int task = ps_server_trainer(p);
    if (!s->splits || task < 0)
        return;
    for (const peer *q = s->peers; q; q = q->next)
        if (q != p && ps_server_trainer(q) == task && q->incarnation < p->incarnation) {
            uint32_t n = ps_split_queue_release(s->splits, task);
            if (n > 0)
                ps_server_log(s,
                              "%u split(s) leased to %s %d go back to the queue (incarnation "
                              "%" PRIu64 " replaced it)",
                              n, ps_server_role_name(p->role), task, p->incarnation);
            publish(s);
            return;
        }
}

char *ps_server_lease_state(const ps_server *s) {
    if (!s->splits)
        return NULL;
    size_t n = ps_split_queue_encode(s->splits, NULL, 0);
    uint8_t *bytes = pf_malloc(n);
    char *hex = pf_mallocarray(2 * n + 1, 1);
    if (!bytes || !hex) {
        pf_free(bytes);
        pf_free(hex);
        ps_server_log(s, "out of memory for the input queue's state: the checkpoint goes without");
        return NULL;
    }
    ps_split_queue_encode(s->splits, bytes, n);
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[bytes[i] >> 4];
        hex[2 * i + 1] = digits[bytes[i] & 15];
    }
    hex[2 * n] = '\0';
    pf_free(bytes);
    return hex;
}

static int hex_value(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The queue a checkpoint's state describes, or NULL with the reason in err. */
static ps_split_queue *queue_from(const ps_server *s, const char *hex, pf_error *err) {
    size_t len = strlen(hex);
    if (len == 0 || len % 2 != 0) {
        pf_error_set(err, PF_ERR_FORMAT, NULL, "%zu hex digits", len);
        return NULL;
    }
    uint8_t *bytes = pf_malloc(len / 2);
    if (!bytes) {
        pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < len / 2; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            pf_free(bytes);
            pf_error_set(err, PF_ERR_FORMAT, NULL, "not hex at digit %zu", 2 * i);
            return NULL;
        }
        bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    ps_split_queue *q = NULL;
    ps_split_queue_from_bytes(bytes, len / 2, s->spec.training.epochs, s->spec.training.seed,
                              PF_MAX_TASKS, &q, err);
    pf_free(bytes);
    return q;
}

void ps_server_lease_restore(ps_server *s, const char *hex) {
    if (s->spec.data.splits != PF_SPLITS_DYNAMIC || s->task != 0 || (!hex && !s->splits))
        return; /* nothing leased yet, nothing to go back to */
    ps_split_queue *q = NULL;
    pf_error err;
    pf_error_clear(&err);
    if (hex && !(q = queue_from(s, hex, &err)))
        ps_server_log(s,
                      "the checkpoint's input queue cannot be read back (%s): the queue starts "
                      "over at epoch 0",
                      err.message);
    ps_split_queue_destroy(s->splits);
    s->splits = q;
    publish(s);
    if (!q) {
        ps_server_log(s, "input work queue: none at this step; the next LEASE starts epoch 0");
        return;
    }
    ps_split_queue_stats st = ps_split_queue_stats_get(q);
    ps_server_log(s,
                  "input work queue restored: epoch %" PRIu64 ", %" PRIu32 " of %" PRIu32
                  " splits done%s; leases dropped (their holders' reports are refused, and the "
                  "splits leased again)",
                  st.epoch, st.done, ps_split_queue_splits(q), st.finished ? ", finished" : "");
}
