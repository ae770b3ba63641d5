/* link_checkpoint.c - a worker link's checkpoints and rollbacks (see link.h): a sync
 * checkpoint asked without waiting (its CHECKPOINT sent on each connection beside the
 * push-pulls, its answers taken up by polling), one asked and waited for, and the chief's
 * RESTORE of every ps. The service thread's side (the answers, a connection that ends) is in
 * link.c.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#include "psflow/clock.h"
#include "psflow/wire.h"
#include "psflow/ws.h"
#include "worker/link.h"
#include "worker/link_internal.h"
#include "worker/request.h"

/* Gives up the checkpoint asked without waiting, if one is in flight: its answers, should they
 * still come, are ignored (a ps answers its parked CHECKPOINT with an error when another
 * CHECKPOINT or a RESTORE replaces it). */
static void forget_checkpoint(worker_link *c) {
    pthread_mutex_lock(&c->mu);
    for (int p = 0; p < c->n; p++)
        c->links[p].ck_waiting = 0;
    c->ck_active = 0;
    pthread_mutex_unlock(&c->mu);
}

/* Sends l's CHECKPOINT (l->ck.out) on its connection; a connection that is down, or goes
 * down, ends it (on_close, or here). */
static pf_status send_checkpoint(worker_link *c, ps_link *l) {
    size_t n = pf_wire_out_parts(&l->ck.out, c->parts, c->max_parts);
    if (n > c->max_parts)
        return PF_ERR_NOMEM; /* cannot happen: a CHECKPOINT is one small part */
    pthread_mutex_lock(&c->mu);
    int up = l->open && !l->closed;
    uint64_t conn = l->conn;
    l->ck_waiting = 1;
    l->ck_done = 0;
    l->ck_conn = conn;
    pthread_mutex_unlock(&c->mu);
    pf_status st = PF_ERR_NOT_FOUND;
    if (up) {
        pf_ws_tagger tagger = worker_link_tagger(l);
        if (l->mac_out)
            pf_wire_mac_sign_begin(l->mac_out);
        st = pf_ws_sendv_tagged(c->ws, conn, c->parts, (int)n, l->mac_out ? &tagger : NULL);
    }
    if (st == PF_ERR_NOMEM)
        return st;
    if (st != PF_OK) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "ps %d is not connected (its connection is being re-established); the "
                 "checkpoint at step %" PRIu64 " was not asked of it",
                 l->index, l->ck.ck_step);
        pthread_mutex_lock(&c->mu);
        if (l->ck_waiting)
            worker_link_finish_checkpoint(c, l, PF_ERR_UNAVAILABLE, msg);
        if (!up || l->conn == conn)
            l->closed = 1; /* the next request reconnects */
        pthread_mutex_unlock(&c->mu);
    }
    return PF_OK;
}

void worker_link_checkpoint_give_up(worker_link *c) {
    forget_checkpoint(c);
}

pf_status worker_link_checkpoint_send(worker_link *c, uint64_t step, pf_error *err) {
    forget_checkpoint(c);
    for (int p = 0; p < c->n; p++) {
        ps_link *l = &c->links[p];
        l->ck_request_id = ++c->next_request;
        pf_status st = worker_request_checkpoint(&l->ck, l->ck_request_id, step, 0, err);
        if (st == PF_OK)
            st = send_checkpoint(c, l);
        if (st != PF_OK) {
            forget_checkpoint(c);
            return pf_error_set(err, st, NULL, "out of memory");
        }
    }
    pthread_mutex_lock(&c->mu);
    c->ck_active = 1;
    pthread_mutex_unlock(&c->mu);
    return PF_OK;
}

int worker_link_checkpoint_poll(worker_link *c, double wait_seconds, pf_status *st, pf_error *err) {
    pthread_mutex_lock(&c->mu);
    struct timespec ts = pf_clock_deadline(wait_seconds > 0 ? wait_seconds : 0);
    int all = 0;
    while (c->ck_active) {
        all = 1;
        for (int p = 0; p < c->n; p++)
            all &= c->links[p].ck_done;
        if (all || wait_seconds <= 0 || pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0)
            break;
    }
    if (!c->ck_active || !all) {
        int active = c->ck_active;
        pthread_mutex_unlock(&c->mu);
        return active ? 0 : -1;
    }
    /* Every ps answered: the first failure that is not "past that step" says most (a
     * non-finite value, a write that failed), else the first one. */
    const ps_link *worst = NULL;
    for (int p = 0; p < c->n; p++) {
        const ps_link *l = &c->links[p];
        if (l->ck_status != PF_OK &&
            (!worst || (worst->ck_status == PF_ERR_RANGE && l->ck_status != PF_ERR_RANGE)))
            worst = l;
    }
    *st = worst ? worst->ck_status : PF_OK;
    if (worst)
        pf_error_set(err, worst->ck_status, NULL, "%s", worst->ck_message);
    c->ck_active = 0;
    pthread_mutex_unlock(&c->mu);
    return 1;
}

pf_status worker_link_checkpoint(worker_link *c, uint64_t step, int final, pf_error *err) {
    forget_checkpoint(c);
    for (int p = 0; p < c->n; p++) {
        ps_link *l = &c->links[p];
        l->request_id = ++c->next_request;
        pf_status st = worker_request_checkpoint(&l->req, l->request_id, step, final, err);
        if (st != PF_OK)
            return st;
    }
    return worker_link_round_trip(c, err);
}

pf_status worker_link_restore(worker_link *c, uint64_t step, float lr_factor, pf_error *err) {
    forget_checkpoint(c);
    for (int p = 0; p < c->n; p++) {
        ps_link *l = &c->links[p];
        l->request_id = ++c->next_request;
        pf_status st = worker_request_restore(&l->req, l->request_id, step, lr_factor, err);
        if (st != PF_OK)
            return st;
    }
    return worker_link_round_trip(c, err);
}
