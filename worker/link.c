/* link.c - a worker's requests to every ps (see link.h).
 *
 * DESIGN: the trainer thread encodes one request per ps (worker/request.h: the form of each
 * request, and the check of its reply), sends them all, then waits on a condition variable
 * until every ps has answered; the transport's service thread decodes replies and copies
 * pulled tensors straight into the trainer's parameter vector (the trainer is blocked
 * meanwhile, so nothing else touches it). A connection that drops while its request is
 * outstanding is re-established by the trainer thread and the same encoded request is sent
 * again: same push sequence number, so at-most-once holds.
 */
#include "worker/link.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "psflow/address.h"
#include "psflow/clock.h"
#include "psflow/dyn_batch.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/seg_handoff.h"
#include "psflow/segment.h"
#include "psflow/wire.h"
#include "psflow/wire_auth.h"
#include "psflow/ws.h"
#include "worker/link_internal.h"
#include "worker/request.h"
#include "worker/rows.h"

/* --- service thread ------------------------------------------------------------------------ */

static void finish_link(worker_link *c, ps_link *l, pf_status st, const char *msg) {
    l->status = st;
    snprintf(l->message, sizeof l->message, "%s", msg ? msg : "");
    l->done = 1;
    pthread_cond_broadcast(&c->cv);
}

/* The end of l's checkpoint asked without waiting (under mu; link_internal.h). */
void worker_link_finish_checkpoint(worker_link *c, ps_link *l, pf_status st, const char *msg) {
    l->ck_waiting = 0;
    l->ck_done = 1;
    l->ck_status = st;
    snprintf(l->ck_message, sizeof l->ck_message, "%s", msg);
    pthread_cond_broadcast(&c->cv);
}

/* The answer m (decoded with status st) to l's checkpoint asked without waiting (under mu). */
static void take_checkpoint_answer(worker_link *c, ps_link *l, pf_status st, const pf_wire_msg *m,
                                   const pf_error *err) {
    char msg[256] = "";
    uint64_t version = 0, incarnation = 0;
    uint32_t push_result = 0;
    if (st != PF_OK)
        snprintf(msg, sizeof msg, "bad reply from ps %d: %.200s", l->index, err->message);
    else
        st = worker_request_check_reply(&l->ck, m, 0, &version, &incarnation, &push_result, msg,
                                        sizeof msg);
    worker_link_finish_checkpoint(c, l, st, msg);
}

static void on_message(pf_ws *ws, uint64_t conn, void *conn_user, const uint8_t *data, size_t len,
                       void *user) {
    worker_link *c = user;
    ps_link *l = conn_user;
    if (c->integrity && worker_link_check_tag(c, l, conn, data, &len) != 0)
        return;
    pf_wire_msg m;
    memset(&m, 0, sizeof m);
    pf_error err;
    pf_error_clear(&err);
    int n_places;
    const pf_ws_place *places = pf_ws_message_places(ws, &n_places);
    pf_status st = pf_wire_decode_placed(&l->in, data, len, places, n_places, &m, &err);
    pthread_mutex_lock(&c->mu);
    if (l->ck_waiting && conn == l->ck_conn && m.request_id == l->ck_request_id) {
        take_checkpoint_answer(c, l, st, &m, &err);
        pthread_mutex_unlock(&c->mu);
        return;
    }
    if (!l->waiting || m.request_id != l->request_id) {
        pthread_mutex_unlock(&c->mu);
        return; /* a late answer to a request that was given up */
    }
    char msg[256] = "";
    if (st == PF_OK && (m.type == PF_WIRE_AUTH_CHALLENGE || m.type == PF_WIRE_AUTH_OK) &&
        worker_link_authenticate(c, l, conn, &m, msg, sizeof msg) == 0) {
        pthread_mutex_unlock(&c->mu);
        return; /* HELLO_ACK is still to come */
    }
    l->waiting = 0;
    if (msg[0]) {
        st = PF_ERR_INVALID; /* authenticate() refused the ps */
    } else if (st != PF_OK) {
        snprintf(msg, sizeof msg, "bad reply from ps %d: %.200s", l->index, err.message);
    } else if (m.type == PF_WIRE_HELLO_ACK && c->has_key && l->auth != 2) {
        st = PF_ERR_INVALID;
        snprintf(msg, sizeof msg, "ps %d answered HELLO without proving the job's key; refusing it",
                 l->index);
    } else {
        st = worker_request_check_reply(&l->req, &m, l->attaching, &l->version, &l->ps_incarnation,
                                        &l->push_result, msg, sizeof msg);
        if (st == PF_OK && m.type == PF_WIRE_LEASE_REPLY) {
            l->lease_reply = m.u.lease_reply;
            l->lease_answered = 1;
        }
        if (st == PF_OK && l->version > c->max_version) {
            st = PF_ERR_FORMAT; /* the trainer computes stream positions from it */
            snprintf(msg, sizeof msg,
                     "ps %d reports version %" PRIu64 ", beyond any step of this job (%" PRIu64
                     " at most); refusing it",
                     l->index, l->version, c->max_version);
        }
    }
    finish_link(c, l, st, msg);
    pthread_mutex_unlock(&c->mu);
}

static void on_open(pf_ws *ws, uint64_t conn, void *conn_user, void *user) {
    (void)ws;
    worker_link *c = user;
    ps_link *l = conn_user;
    pthread_mutex_lock(&c->mu);
    if (l->conn == conn)
        l->open = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void on_close(pf_ws *ws, uint64_t conn, void *conn_user, void *user) {
    (void)ws;
    worker_link *c = user;
    ps_link *l = conn_user;
    pthread_mutex_lock(&c->mu);
    if (l->conn == conn) {
        l->open = 0;
        l->closed = 1;
    }
    if (l->ck_waiting && l->ck_conn == conn) { /* the ps forgets a parked CHECKPOINT too */
        char msg[160];
        snprintf(msg, sizeof msg,
                 "the connection to ps %d closed before it answered the checkpoint at step "
                 "%" PRIu64,
                 l->index, l->ck.ck_step);
        worker_link_finish_checkpoint(c, l, PF_ERR_UNAVAILABLE, msg);
    }
    if (l->mac_conn == conn) {
        pf_wire_mac_destroy(l->mac_in);
        l->mac_in = NULL;
        l->mac_conn = 0;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* --- trainer thread ------------------------------------------------------------------------ */

/* Sends l->req.out on l's connection (the encoded request must already be there). The
 * transport masks the gradients into its send buffer as it writes them, and with integrity
 * computes their tag in the same pass. With `values`
 * (a pull into c->params), the reply's values are received straight into c->params. */
static pf_status send_request(worker_link *c, ps_link *l, int values) {
    size_t n = pf_wire_out_parts(&l->req.out, c->parts, c->max_parts);
    if (n > c->max_parts)
        return PF_ERR_NOMEM; /* cannot happen: no request carries more than every shard */
    pthread_mutex_lock(&c->mu);
    l->waiting = 1;
    l->done = 0;
    uint64_t conn = l->conn;
    pthread_mutex_unlock(&c->mu);
    pf_ws_tagger tagger = worker_link_tagger(l);
    if (l->mac_out) /* integrity: the tag goes last */
        pf_wire_mac_sign_begin(l->mac_out);
    /* Whole shards are received in place, with integrity too (the tag then follows the
     * reply, into the connection's buffer). The values land in c->params before the tag is
     * verified, which is safe because a reply whose tag fails is never used: check_tag
     * refuses it before anything reads it and closes the connection, so l is not done with
     * it; await_all reconnects and sends the request again, which places the same shards
     * (resume: the same request, or a pull of the same shards) and whose verified reply
     * rewrites every value there - or the round trip fails, and c->params, which a failed
     * pull leaves unspecified as a dropped connection always could, go back to the caller
     * with an error. The caller does not read c->params before the round trip returns
     * (worker_link_push_pull_start: they belong to the link until _finish), so nothing
     * reads the refused reply's values in between (api/wire.md "Integrity"). */
    if (values && c->params && !c->env.rows && !l->req.out_seg) {
        for (int i = 0; i < l->req.n_ids; i++)
            l->req.places[i].dst = c->params + c->placement.shards[l->req.ids[i]].offset;
        /* Refused (out of memory, or the connection is gone): received as usual. */
        pf_ws_expect(c->ws, conn, l->req.reply_len + (l->mac_out ? PF_WIRE_TAG_SIZE : 0),
                     l->req.places, l->req.n_ids);
    }
    pf_status st = pf_ws_sendv_tagged(c->ws, conn, c->parts, (int)n, l->mac_out ? &tagger : NULL);
    if (st == PF_ERR_NOMEM)
        return st;
    if (st != PF_OK) {
        pthread_mutex_lock(&c->mu);
        l->closed = 1;
        pthread_mutex_unlock(&c->mu);
    }
    return PF_OK;
}

/* On a fresh connection whose HELLO succeeded: offers l's ps the link's segment
 * (SEG_ATTACH), encoded in *tmp, if the ps is on this host; l->seg says whether it took it.
 * A refusal, or no answer in 10 s, keeps l on the socket (logged once per ps). Returns -1
 * when the connection went away meanwhile. */
static int attach_segment(worker_link *c, ps_link *l, pf_wire_out *tmp) {
    l->seg = 0;
    if (!c->seg.base)
        return 0;
    /* Handed over through PSFLOW_SHM_DIR, which reaches a ps in another container of this
     * host; else named by process id, which only a ps in this PID namespace can open. */
    uint32_t pid = (uint32_t)getpid(), fd = (uint32_t)c->seg.fd;
    const char *dir = pf_seg_handoff_dir();
    pf_error e;
    if (dir) {
        uint32_t handle;
        if (pf_seg_handoff_send(dir, c->spec.name, l->index, c->seg.fd, 2.0, &handle, &e) ==
            PF_OK) {
            pid = 0;
            fd = handle;
        } else if (!l->local && !l->seg_said) {
            fprintf(stderr,
                    "psflow worker %d: ps %d takes no segment handoff; over the socket: %s\n",
                    c->task, l->index, e.message);
            l->seg_said = 1;
        }
    }
    if (pid != 0 && !l->local)
        return 0;
    pf_wire_out saved = l->req.out;
    uint32_t saved_id = l->request_id;
    l->req.out = *tmp;
    l->request_id = ++c->next_request;
    pf_wire_seg_attach a = {pid, fd, c->seg.size, c->seg.token};
    pf_status st = pf_wire_encode_seg_attach(&l->req.out, l->request_id, &a, &e);
    pthread_mutex_lock(&c->mu);
    l->attaching = 1;
    pthread_mutex_unlock(&c->mu);
    if (st == PF_OK)
        st = send_request(c, l, 0);
    *tmp = l->req.out;
    l->req.out = saved;
    pthread_mutex_lock(&c->mu);
    struct timespec ts = pf_clock_deadline(10.0);
    while (st == PF_OK && !l->done && !l->closed)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0)
            break;
    int answered = st == PF_OK && l->done, gone = st == PF_OK && !l->done && l->closed;
    l->seg = answered && l->status == PF_OK;
    char why[256];
    snprintf(why, sizeof why, "%s", answered ? l->message : "no answer in 10 s");
    l->attaching = 0;
    l->waiting = 0; /* a late answer is dropped */
    l->request_id = saved_id;
    pthread_mutex_unlock(&c->mu);
    if (!gone && !l->seg && !l->seg_said) {
        fprintf(stderr,
                "psflow worker %d: ps %d did not take the shared segment; over the "
                "socket: %s\n",
                c->task, l->index, why);
        l->seg_said = 1;
    }
    return gone ? -1 : 0;
}

/* (Re)connects l and completes HELLO, retrying until c->retry seconds have passed. The
 * request kept in l->req.out is preserved. */
static pf_status connect_link(worker_link *c, ps_link *l, pf_error *err) {
    double give_up = pf_clock_now() + c->retry, backoff = 0.05;
    pf_wire_out hello_out;
    pf_wire_out_init(&hello_out);
    pf_status st = PF_ERR_UNAVAILABLE;
    char last[256] = "connection refused";
    while (pf_clock_now() < give_up) {
        if (c->stop && __atomic_load_n(c->stop, __ATOMIC_RELAXED)) {
            snprintf(last, sizeof last, "the task was stopped");
            break;
        }
        pthread_mutex_lock(&c->mu);
        l->open = l->closed = 0;
        pthread_mutex_unlock(&c->mu);
        uint64_t conn;
        /* Hold mu across connect and the assignment, so an on_open or on_close for the
         * new id cannot arrive before l->conn names it (handlers take mu too). */
        pthread_mutex_lock(&c->mu);
        if (pf_ws_connect(c->ws, l->host, l->port, l, &conn) != PF_OK) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        l->conn = conn;
        struct timespec ts = pf_clock_deadline(10.0);
        while (!l->open && !l->closed)
            if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0)
                break;
        int up = l->open;
        pthread_mutex_unlock(&c->mu);
        if (!up)
            pf_ws_close(c->ws, conn); /* no orphan connection if it opens later */
        if (!up && !c->tls && pf_ws_probe_tls(l->host, l->port, 2.0)) { /* never will be */
            snprintf(last, sizeof last,
                     "it speaks TLS (wss): give --ca-file, the CA that "
                     "signed its certificate");
            break;
        }
        if (up) {
            /* HELLO on the fresh connection, then restore the request being retried. */
            pf_wire_out saved = l->req.out;
            uint32_t saved_id = l->request_id;
            l->req.out = hello_out;
            pf_wire_hello h = {c->role,
                               (uint32_t)c->task,
                               c->incarnation,
                               {c->spec.name, (uint32_t)strlen(c->spec.name)}};
            l->request_id = ++c->next_request;
            pf_error e2;
            st = pf_wire_encode_hello(&l->req.out, l->request_id, &h, &e2);
            struct iovec part[2];
            pf_wire_mac_destroy(l->mac_out); /* the HELLO goes untagged */
            l->mac_out = NULL;
            pthread_mutex_lock(&c->mu);
            l->auth = 0;
            l->hello_len = 0;
            if (st == PF_OK && pf_wire_out_parts(&l->req.out, part, 2) == 1 &&
                part[0].iov_len <= sizeof l->hello_msg) {
                memcpy(l->hello_msg, part[0].iov_base, part[0].iov_len);
                l->hello_len = part[0].iov_len; /* the transcript's HELLO, as sent */
            }
            pthread_mutex_unlock(&c->mu);
            if (st == PF_OK)
                st = send_request(c, l, 0);
            hello_out = l->req.out;
            l->req.out = saved;
            if (st != PF_OK)
                break;
            pthread_mutex_lock(&c->mu);
            ts = pf_clock_deadline(10.0);
            while (!l->done && !l->closed)
                if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0)
                    break;
            int ok = l->done && l->status == PF_OK;
            snprintf(last, sizeof last, "%s", l->done ? l->message : "no answer to HELLO");
            l->request_id = saved_id; /* the request being retried keeps its id */
            pthread_mutex_unlock(&c->mu);
            if (ok && c->integrity &&
                !(l->mac_out = pf_wire_mac_create(c->task_key, PF_WIRE_TO_PS, l->hello_msg,
                                                  l->hello_len, l->nonce_ps, l->nonce_task))) {
                snprintf(last, sizeof last, "out of memory for the message tags");
                ok = 0;
            }
            if (ok && attach_segment(c, l, &hello_out) != 0) {
                snprintf(last, sizeof last, "the connection closed while offering the segment");
                ok = 0;
                l->done = 0; /* not a refusal: retried */
            }
            if (ok) {
                st = PF_OK;
                break;
            }
            if (l->done && l->status != PF_OK) { /* the ps refused us: retrying won't help */
                st = PF_ERR_INVALID;
                break;
            }
            pf_ws_close(c->ws, conn);
        }
        st = PF_ERR_UNAVAILABLE;
        pf_clock_sleep(backoff); /* reconnect backoff, not synchronisation */
        backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
    }
    pf_wire_out_deinit(&hello_out);
    if (st != PF_OK)
        pf_error_set(err, st, NULL, "cannot reach ps %d at %s:%d: %s", l->index, l->host, l->port,
                     last);
    return st;
}

static const char *kind_name(int kind) {
    return kind == WORKER_REQ_CHECKPOINT ? "checkpoint request"
           : kind == WORKER_REQ_RESTORE  ? "rollback request"
           : kind == WORKER_REQ_LEASE    ? "split lease"
                                         : "push/pull";
}

/* The first link of the round trip whose connection went away before its answer came, or -1
 * (under c->mu). */
static int lost_link(const worker_link *c) {
    for (int p = 0; p < c->n; p++)
        if (!c->links[p].settled && !c->links[p].done && c->links[p].closed)
            return p;
    return -1;
}

/* Waits (under c->mu) for l's reply or the end of a connection of the round trip (l's or
 * another's: a ps lost while another holds this task's push must be seen at once, for in a
 * sync step that push may wait on a task that waits for the lost ps's rollback), saying
 * every 30 s (half the limit when that is shorter) what it waits for, and at most until
 * training.stall_timeout_secs after the round trip began (`start`, the same for every ps and
 * across reconnects): a ps that holds a request that long stalls the job, and the task fails
 * rather than hang (exit 69; a restart policy then acts on it). */
static pf_status wait_reply(worker_link *c, ps_link *l, double start, pf_error *err) {
    const double limit =
        c->reply_limit > 0 ? c->reply_limit : (double)c->spec.training.stall_timeout_secs;
    const double every = limit < 60 ? limit / 2 : 30.0;
    double next_note = pf_clock_now() + every;
    while (!l->done && lost_link(c) < 0) {
        double now = pf_clock_now();
        if (now - start >= limit)
            return pf_error_set(err, PF_ERR_UNAVAILABLE, NULL,
                                "no answer from ps %d at %s:%d for %.0f s "
                                "(training.stall_timeout_secs) to its %s: the job is stalled",
                                l->index, l->host, l->port, now - start,
                                l->req.kind != WORKER_REQ_DATA ? kind_name(l->req.kind)
                                : c->spec.training.mode == PF_MODE_SYNC
                                    ? "push/pull (a sync step waits for the gradients of "
                                      "replicas_to_aggregate workers)"
                                    : "push/pull");
        if (now >= next_note) {
            fprintf(stderr,
                    "psflow worker %d: waiting %.0f s for ps %d at %s:%d (version %" PRIu64
                    ") to answer its %s; giving up after %.0f s\n",
                    c->task, now - start, l->index, l->host, l->port, l->version,
                    kind_name(l->req.kind), limit);
            next_note += every;
        }
        double until = next_note < start + limit ? next_note : start + limit;
        struct timespec ts = pf_clock_deadline(until - now);
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    return PF_OK;
}

/* Replaces l's push-pull by a pull of its shards (min_version as asked): its push is given
 * up, and reported PF_WIRE_PUSH_STALE (collect). */
static pf_status pull_instead(worker_link *c, ps_link *l, uint64_t min_version, pf_error *err) {
    l->request_id = ++c->next_request;
    l->req.swapped = 1;
    return worker_request_pull(&l->req, &c->env, l->request_id, l->seg, min_version, c->params,
                               err);
}

/* Sends every link's encoded request; the round trip's clock starts here. */
static pf_status send_all(worker_link *c, pf_error *err) {
    c->start = pf_clock_now();
    for (int p = 0; p < c->n; p++)
        if ((c->only < 0 || p == c->only) &&
            send_request(c, &c->links[p], c->links[p].req.kind == WORKER_REQ_DATA) != PF_OK)
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    c->sent = pf_clock_now();
    return PF_OK;
}

/* Waits for the next answer of the round trip: returns the link to deal with, the first not
 * settled once its answer came (*answered 1, *st and msg[len] its status and text) or, first,
 * one whose connection went away before its answer (*answered 0); NULL when every link is
 * settled, or (*answered -1, err set) when the job stalled (wait_reply). */
static ps_link *await_next(worker_link *c, double start, int *answered, pf_status *st, char *msg,
                           size_t len, pf_error *err) {
    pthread_mutex_lock(&c->mu);
    ps_link *l = NULL;
    for (int p = 0; p < c->n && !l; p++)
        if (!c->links[p].settled)
            l = &c->links[p];
    *answered = 0;
    if (l && wait_reply(c, l, start, err) != PF_OK) {
        pthread_mutex_unlock(&c->mu); /* still waiting: abandon() closes it */
        *answered = -1;
        return NULL;
    }
    if (l && !l->done)
        l = &c->links[lost_link(c)];
    if (l) {
        *answered = l->done;
        *st = l->status;
        snprintf(msg, len, "%s", l->message);
        l->waiting = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return l;
}

/* Closes l's connection, whose request is given up, and awaits the close (under c->mu): a
 * reply may be being received straight into c->params. The close is the transport's next
 * turn; 10 s at most. Should it not come, the caller still owns params safely: it destroys
 * the link (stopping the transport) before it frees them. */
static void close_awaited(worker_link *c, ps_link *l) {
    uint64_t conn = l->conn;
    pthread_mutex_unlock(&c->mu);
    pf_ws_close(c->ws, conn);
    pthread_mutex_lock(&c->mu);
    struct timespec ts = pf_clock_deadline(10.0);
    while (!l->closed)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0) {
            fprintf(stderr,
                    "psflow worker %d: the connection to ps %d did not close in 10 s "
                    "after its request was given up; going on\n",
                    c->task, l->index);
            break;
        }
}

/* A ps restarted during a sync step: every other push of the step still unanswered is given
 * up, its connection closed (await_all reconnects it, and resume pulls instead). A ps holding
 * such a push waits for the gradients of other workers, which wait for the chief to roll
 * every ps back: the chief cannot do so while it waits for that push. */
static void give_up_pushes(worker_link *c, const ps_link *restarted) {
    pthread_mutex_lock(&c->mu);
    for (int p = 0; p < c->n; p++) {
        ps_link *l = &c->links[p];
        if (l != restarted && !l->settled && !l->done && !l->closed &&
            l->req.kind == WORKER_REQ_DATA && !l->req.swapped) /* (its own pull goes on) */
            close_awaited(c, l);
    }
    pthread_mutex_unlock(&c->mu);
}

/* After l reconnected (its ps had incarnation `before`): makes l->req.out what is to be sent
 * again. Sets *lost instead when the request is a checkpoint that a restarted ps cannot
 * write. *restore_resends counts the RESTOREs sent again to a ps that restarted meanwhile. */
static pf_status resume(worker_link *c, ps_link *l, uint64_t before, int pushes_given_up,
                        int *restore_resends, int *lost, pf_error *err) {
    int restarted = l->ps_incarnation != before;
    if (restarted) {
        c->restarted = 1;
        c->restarted_ps = l->index;
        c->restarted_version = l->version;
    }
    if (restarted && l->req.kind == WORKER_REQ_CHECKPOINT) {
        /* A restarted ps restored an older checkpoint: asking it again would label its
         * values with this step. The checkpoint is given up; the chief rolls every ps back
         * to what the restarted one restored. */
        fprintf(stderr,
                "psflow worker %d: ps %d restarted (incarnation %" PRIu64
                ", restored version %" PRIu64 ") during checkpoint %" PRIu64
                "; giving the checkpoint up\n",
                c->task, l->index, l->ps_incarnation, l->version, l->req.ck_step);
        *lost = 1;
        return PF_OK;
    }
    if (restarted && l->req.kind == WORKER_REQ_RESTORE) {
        /* A ps that keeps restarting while it restores (it dies restoring): a few tries,
         * then the rollback fails rather than loop. */
        if (++*restore_resends > 3)
            return pf_error_set(err, PF_ERR_UNAVAILABLE, NULL,
                                "ps %d restarted %d times during the rollback to step %" PRIu64
                                "; giving the rollback up",
                                l->index, *restore_resends, l->req.ck_step);
        l->request_id = ++c->next_request;
        return worker_request_restore(&l->req, l->request_id, l->req.ck_step, l->req.ck_lr_factor,
                                      err) != PF_OK
                   ? PF_ERR_NOMEM
                   : PF_OK;
    }
    if (l->req.kind == WORKER_REQ_LEASE)
        return PF_OK; /* asked again as it is: a restarted ps 0 answers from its restored
                         queue (refusing the reports of splits it no longer has leased) */
    if (restarted) {
        /* The ps restarted and restored its newest checkpoint: a gradient computed against
         * its old values means nothing to it. Pull its values instead; the next step
         * computes against them. */
        fprintf(stderr,
                "psflow worker %d: ps %d restarted (incarnation %" PRIu64
                ", restored version %" PRIu64 "); pulling its values\n",
                c->task, l->index, l->ps_incarnation, l->version);
        return pull_instead(c, l, 0, err) != PF_OK ? PF_ERR_NOMEM : PF_OK;
    }
    if (l->req.kind == WORKER_REQ_DATA && pushes_given_up && !l->req.swapped) {
        fprintf(stderr,
                "psflow worker %d: reconnected to ps %d; its push is given up (another ps "
                "restarted during the step), pulling\n",
                c->task, l->index);
        return pull_instead(c, l, 0, err) != PF_OK ? PF_ERR_NOMEM : PF_OK;
    }
    if (l->req.kind == WORKER_REQ_DATA && c->detached) {
        /* A push started with worker_link_push_pull_start: the caller may have reused the
         * gradient buffer it was encoded from, so it is not sent again (it was never
         * acknowledged; the ps may or may not have applied it). The values are pulled
         * instead. */
        fprintf(stderr,
                "psflow worker %d: reconnected to ps %d; its unacknowledged push is "
                "not sent again (the gradient was already replaced), pulling\n",
                c->task, l->index);
        return pull_instead(c, l, l->req.min_version, err) != PF_OK ? PF_ERR_NOMEM : PF_OK;
    }
    fprintf(stderr, "psflow worker %d: reconnected to ps %d; resending\n", c->task, l->index);
    /* A segment request to a ps that did not take the segment this time goes over the
     * socket: the same push (sequence number) encoded again. */
    pf_status es = PF_OK;
    worker_request *q = &l->req;
    if (q->kind == WORKER_REQ_DATA && q->out_seg && !l->seg)
        es = q->req_grads ? worker_request_push_pull(q, &c->env, l->request_id, 0, q->req_grads,
                                                     q->req_step, q->min_version, c->params, err)
                          : worker_request_pull(q, &c->env, l->request_id, 0, q->min_version,
                                                c->params, err);
    return es != PF_OK ? PF_ERR_NOMEM : PF_OK;
}

/* Waits for every answer to the requests send_all sent, reconnecting and resending where a
 * connection drops; in a sync step, a ps that restarted gives up the pushes still awaited
 * (give_up_pushes). */
static pf_status await_all(worker_link *c, pf_error *err) {
    const double start = c->start;
    int lost_checkpoint = -1; /* a ps that restarted during a checkpoint */
    int restore_resends = 0;  /* RESTOREs sent again to a ps that restarted meanwhile */
    int given_up = 0;         /* the step's unanswered pushes were given up */
    pf_status failed = PF_OK;
    for (int p = 0; p < c->n; p++)
        c->links[p].settled = c->only >= 0 && p != c->only;
    for (;;) {
        pf_status st;
        char msg[256];
        int answered;
        ps_link *l = await_next(c, start, &answered, &st, msg, sizeof msg, err);
        if (answered < 0)
            return PF_ERR_UNAVAILABLE;
        if (!l)
            break;
        if (answered) {
            l->settled = 1;
            /* A checkpoint refused by one ps: the others' answers are still awaited, so
             * none is taken for the next request's. */
            if (st != PF_OK && l->req.kind == WORKER_REQ_CHECKPOINT && failed == PF_OK)
                failed = pf_error_set(err, st, NULL, "%s", msg);
            else if (st != PF_OK && l->req.kind != WORKER_REQ_CHECKPOINT)
                return pf_error_set(err, st, NULL, "%s", msg);
            continue;
        }
        fprintf(stderr, "psflow worker %d: lost ps %d; reconnecting\n", c->task, l->index);
        uint64_t before = l->ps_incarnation;
        int lost = 0;
        pf_status cs = connect_link(c, l, err);
        if (cs == PF_OK)
            cs = resume(c, l, before, given_up, &restore_resends, &lost, err);
        if (cs != PF_OK)
            return cs;
        if (lost) {
            lost_checkpoint = l->index;
            l->settled = 1;
            continue;
        }
        if (send_request(c, l, l->req.kind == WORKER_REQ_DATA) != PF_OK)
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        if (l->ps_incarnation != before && l->req.kind == WORKER_REQ_DATA &&
            c->spec.training.mode == PF_MODE_SYNC && !given_up) {
            given_up = 1;
            give_up_pushes(c, l);
        }
    }
    if (lost_checkpoint >= 0)
        return pf_error_set(err, PF_ERR_UNAVAILABLE, NULL,
                            "ps %d restarted during checkpoint %" PRIu64
                            "; the checkpoint was given up",
                            lost_checkpoint, c->links[lost_checkpoint].req.ck_step);
    return failed;
}

/* Gives up the requests still in flight after a round trip failed: their replies may be
 * being received straight into c->params, which the caller owns again once the round trip
 * returns, so each such connection is closed, and the close awaited, before it does. The
 * next request reconnects. */
static void abandon(worker_link *c) {
    if (!c->params)
        return;
    pthread_mutex_lock(&c->mu);
    for (int p = 0; p < c->n; p++) {
        ps_link *l = &c->links[p];
        if (l->waiting && !l->done && !l->closed)
            close_awaited(c, l);
        l->waiting = 0;
    }
    pthread_mutex_unlock(&c->mu);
}

pf_status worker_link_lease(worker_link *c, const pf_wire_lease *req, pf_wire_lease_reply *reply,
                            pf_error *err) {
    ps_link *l = &c->links[0];
    l->request_id = ++c->next_request;
    l->req.kind = WORKER_REQ_LEASE;
    pf_status st = pf_wire_encode_lease(&l->req.out, l->request_id, req, err);
    if (st != PF_OK)
        return st;
    pthread_mutex_lock(&c->mu);
    l->lease_answered = 0;
    pthread_mutex_unlock(&c->mu);
    c->only = 0;
    st = worker_link_round_trip(c, err);
    c->only = -1;
    pthread_mutex_lock(&c->mu);
    int answered = l->lease_answered;
    *reply = l->lease_reply;
    pthread_mutex_unlock(&c->mu);
    if (st == PF_OK && !answered)
        st = pf_error_set(err, PF_ERR_UNAVAILABLE, NULL, "ps 0 did not answer the LEASE");
    return st;
}

/* Sends every link's encoded request and waits for all answers, reconnecting and resending
 * where a connection drops (link_internal.h). */
pf_status worker_link_round_trip(worker_link *c, pf_error *err) {
    pf_status st = send_all(c, err);
    if (st == PF_OK)
        st = await_all(c, err);
    if (st != PF_OK)
        abandon(c);
    return st;
}

/* The largest version a ps of this job may report. A ps's version is a global step: the
 * trainer turns it into data stream positions, step x tasks x examples per step, which must
 * fit in int64 for any membership. A larger one cannot come from a ps of this job (a ps stops
 * at max_steps, or holds the step of a checkpoint it restored) and is refused as malformed. */
static uint64_t max_version_of(const pf_job_spec *spec) {
    return (uint64_t)INT64_MAX /
           ((uint64_t)(PF_MAX_REPLICAS + 2) * (uint64_t)spec->training.batch_size *
            (uint64_t)spec->replicas_per_worker);
}

/* Sets up l, the link to ps p at addr ("host:port"), before it connects. */
static pf_status init_ps_link(worker_link *c, ps_link *l, int p, const char *addr, pf_error *err) {
    l->index = p;
    pf_wire_out_init(&l->auth_out);
    pf_wire_in_init(&l->in, 0, 0);
    if (pf_split_host_port(addr, l->host, sizeof l->host, &l->port) != 0 || l->port == 0)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "ps %d address '%s' is not host:port", p,
                            addr);
    l->local = pf_segment_host_is_local(l->host);
    l->ck.ps = p; /* only its CHECKPOINT and the check of the answer are used */
    pf_wire_out_init(&l->ck.out);
    return worker_request_init(&l->req, &c->env, p, err);
}

/* Creates the segment options.segment asks for, where one may be used; without one (or
 * when it cannot be created, said on stderr) every ps is spoken to over the socket. */
static void create_segment(worker_link *c, const worker_link_options *o) {
    /* With TLS every byte goes through it: no segment is offered. */
    if (!o->segment || c->env.rows || o->ca_file || !pf_segment_enabled())
        return;
    size_t grads_at, bytes = pf_segment_bytes(c->env.n_params, &grads_at);
    pf_error e;
    if (pf_segment_create(bytes, &c->seg, &e) != PF_OK) {
        fprintf(stderr, "psflow worker %d: %s; every ps over the socket\n", c->task, e.message);
        return;
    }
    c->seg_params = (float *)(void *)(c->seg.base + PF_SEGMENT_HEAD);
    c->seg_grads = (float *)(void *)(c->seg.base + grads_at);
}

/* Starts the transport, taking messages up to the largest a ps of this job answers with: its
 * shards whole, and the rows of a batch's ids of each dynamic table (a training batch's or an
 * evaluation's, whichever names more). */
static pf_status start_transport(worker_link *c, const char *ca_file, pf_error *err) {
    pf_ws_handlers h = {on_open, on_message, on_close, NULL};
    size_t max_message = 0, dynamic = 0;
    for (int p = 0; p < c->n; p++)
        if ((size_t)c->placement.bytes_per_ps[p] > max_message)
            max_message = (size_t)c->placement.bytes_per_ps[p];
    const pf_model_spec *m = &c->spec.model;
    for (int f = 0; f < m->n_embeddings; f++)
        if (m->embeddings[f].kind == PF_TABLE_DYNAMIC)
            dynamic +=
                (size_t)pf_dyn_message_ids(&c->spec, f) * 4 * (size_t)pf_model_row_width(m, f);
    max_message += dynamic + 65536 + (size_t)c->placement.n_shards * 16;
    pf_ws_options wo = {.ca_file = ca_file};
    c->tls = ca_file != NULL;
    return pf_ws_client_create_with(max_message, &wo, &h, c, &c->ws, err);
}

pf_status worker_link_create(const worker_link_options *o, worker_link **out, pf_error *err) {
    *out = NULL;
    worker_link *c = pf_calloc(1, sizeof *c);
    if (!c)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->task = o->task;
    c->only = -1;
    c->role = o->role;
    c->incarnation = o->incarnation;
    c->retry = o->retry_seconds > 0 ? o->retry_seconds : 60;
    c->stop = o->stop;
    if (o->task_key) {
        c->has_key = 1;
        memcpy(c->task_key, o->task_key, PF_WIRE_KEY_SIZE);
        c->integrity = !o->ca_file; /* TLS protects every byte itself */
    }
    pf_status st = pf_job_spec_copy(&c->spec, o->spec);
    if (st == PF_OK)
        st = pf_placement_compute(&c->spec, &c->placement);
    if (st != PF_OK) {
        pf_error_set(err, st, NULL, "out of memory");
        goto fail;
    }
    c->max_version = max_version_of(&c->spec);
    c->n = c->spec.replicas.ps;
    c->links = pf_calloc((size_t)c->n, sizeof *c->links);
    c->max_parts = 2 * (size_t)c->placement.n_shards + 1;
    c->parts = pf_calloc(c->max_parts, sizeof *c->parts);
    st = worker_request_env_init(&c->env, &c->placement, o->rows, &c->seg,
                                 pf_model_num_params(&c->spec.model), c->task, c->incarnation);
    if (!c->links || !c->parts || st != PF_OK) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        goto fail;
    }
    for (int p = 0; p < c->n; p++)
        if ((st = init_ps_link(c, &c->links[p], p, o->ps_addrs[p], err)) != PF_OK)
            goto fail;
    create_segment(c, o);
    if ((st = start_transport(c, o->ca_file, err)) != PF_OK)
        goto fail;
    for (int p = 0; p < c->n; p++)
        if ((st = connect_link(c, &c->links[p], err)) != PF_OK)
            goto fail;
    *out = c;
    return PF_OK;
fail:
    worker_link_destroy(c);
    return st;
}

void worker_link_destroy(worker_link *c) {
    if (!c)
        return;
    pf_ws_destroy(c->ws);
    for (int p = 0; c->links && p < c->n; p++) {
        worker_request_deinit(&c->links[p].req);
        worker_request_deinit(&c->links[p].ck);
        pf_wire_out_deinit(&c->links[p].auth_out);
        pf_wire_in_deinit(&c->links[p].in);
        pf_wire_mac_destroy(c->links[p].mac_in);
        pf_wire_mac_destroy(c->links[p].mac_out);
    }
    pf_free(c->links);
    pf_free(c->parts);
    worker_request_env_deinit(&c->env);
    pf_segment_close(&c->seg); /* after the transport: no reply lands in it any more */
    pf_placement_deinit(&c->placement);
    pf_job_spec_deinit(&c->spec);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    pf_wire_key_clear(c->task_key, sizeof c->task_key);
    pf_free(c);
}

static void collect(worker_link *c, uint64_t *versions, uint32_t *results) {
    for (int p = 0; p < c->n; p++) {
        if (versions)
            versions[p] = c->links[p].version;
        if (results) /* a push replaced by a pull after a ps restart was not applied */
            results[p] = c->links[p].req.swapped ? PF_WIRE_PUSH_STALE : c->links[p].push_result;
    }
}

pf_status worker_link_pull(worker_link *c, const uint64_t *min_version, float *params,
                           uint64_t *versions, pf_error *err) {
    for (int p = 0; p < c->n; p++) {
        ps_link *l = &c->links[p];
        l->request_id = ++c->next_request;
        l->req.swapped = 0;
        pf_status st = worker_request_pull(&l->req, &c->env, l->request_id, l->seg,
                                           min_version ? min_version[p] : 0, params, err);
        if (st != PF_OK)
            return st;
    }
    c->params = params;
    pf_status st = worker_link_round_trip(c, err);
    c->params = NULL;
    collect(c, versions, NULL);
    return st;
}

/* Encodes a PUSH_PULL of grads for every ps (worker_request_push_pull; through the segment
 * to a ps that took it when seg_ok), with the next sequence number. */
static pf_status encode_push_pull(worker_link *c, const float *grads, const uint64_t *step,
                                  const uint64_t *min_version, float *params, int seg_ok,
                                  pf_error *err) {
    c->env.seq++;
    for (int p = 0; p < c->n; p++) {
        ps_link *l = &c->links[p];
        l->request_id = ++c->next_request;
        l->req.swapped = 0;
        pf_status st =
            worker_request_push_pull(&l->req, &c->env, l->request_id, seg_ok && l->seg, grads,
                                     step[p], min_version ? min_version[p] : 0, params, err);
        if (st != PF_OK)
            return st;
    }
    return PF_OK;
}

pf_status worker_link_push_pull(worker_link *c, const float *grads, const uint64_t *step,
                                const uint64_t *min_version, float *params, uint64_t *versions,
                                uint32_t *results, pf_error *err) {
    pf_status st = encode_push_pull(c, grads, step, min_version, params, 1, err);
    if (st != PF_OK)
        return st;
    c->params = params;
    st = worker_link_round_trip(c, err);
    c->params = NULL;
    collect(c, versions, results);
    return st;
}

pf_status worker_link_push_pull_rows(worker_link *c, const float *grads, const uint64_t *step,
                                     const worker_row_plan *next, const uint64_t *min_version,
                                     float *params, uint64_t *versions, uint32_t *results,
                                     pf_error *err) {
    if (!c->env.rows || !next || !params)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "a fused row step needs row mode, the next plan and params");
    c->env.pull_plan = next; /* also for a pull sent in a push's place after a reconnect */
    pf_status st =
        worker_link_push_pull(c, grads, step, min_version, params, versions, results, err);
    c->env.pull_plan = NULL;
    c->env.plan = next;
    return st;
}

pf_status worker_link_push_pull_start(worker_link *c, const float *grads, const uint64_t *step,
                                      const uint64_t *min_version, float *params, pf_error *err) {
    /* Not through the segment: the caller reuses grads before the ps has read them. */
    pf_status st = encode_push_pull(c, grads, step, min_version, params, 0, err);
    if (st != PF_OK)
        return st;
    c->params = params;
    c->detached = 1;
    if ((st = send_all(c, err)) != PF_OK) {
        abandon(c);
        c->params = NULL;
        c->detached = 0;
    }
    return st;
}

pf_status worker_link_push_pull_finish(worker_link *c, uint64_t *versions, uint32_t *results,
                                       pf_error *err) {
    c->start = pf_clock_now(); /* the caller's computing meanwhile was no wait */
    pf_status st = await_all(c, err);
    if (st != PF_OK)
        abandon(c);
    c->params = NULL;
    c->detached = 0;
    collect(c, versions, results);
    return st;
}

pf_status worker_link_push(worker_link *c, const float *grads, const uint64_t *step,
                           uint64_t *versions, uint32_t *results, pf_error *err) {
    if (c->env.rows) /* a ROW_PUSH_PULL that pulls nothing */
        return worker_link_push_pull(c, grads, step, NULL, NULL, versions, results, err);
    c->env.seq++;
    for (int p = 0; p < c->n; p++) {
        ps_link *l = &c->links[p];
        l->request_id = ++c->next_request;
        l->req.swapped = 0;
        pf_status st = worker_request_push(&l->req, &c->env, l->request_id, grads, step[p], err);
        if (st != PF_OK)
            return st;
    }
    pf_status st = worker_link_round_trip(c, err);
    collect(c, versions, results);
    return st;
}

double worker_link_sent_at(const worker_link *c) {
    return c->sent;
}

float *worker_link_segment(worker_link *c, float **grads) {
    *grads = c->seg_grads;
    return c->seg_params;
}

int worker_link_shared(const worker_link *c) {
    int n = 0;
    for (int p = 0; p < c->n; p++)
        n += c->links[p].seg;
    return n;
}

void worker_link_set_plan(worker_link *c, const worker_row_plan *plan) {
    c->env.plan = plan;
}

void worker_link_set_reply_limit(worker_link *c, double seconds) {
    c->reply_limit = seconds;
}

int worker_link_take_restart(worker_link *c, int *ps, uint64_t *version) {
    if (!c->restarted)
        return 0;
    c->restarted = 0;
    *ps = c->restarted_ps;
    *version = c->restarted_version;
    return 1;
}
