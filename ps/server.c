/* server.c - a parameter-server task on the data plane (see server.h).
 *
 * DESIGN: every message is handled on the transport's service thread: decode (wire.c
 * validates the frame), check it against this task's shards (ids, counts, hello, job
 * name), act on ps_shards, reply. A PULL_REPLY is sent from the values themselves, lent
 * to the transport for what the socket does not take at once (no copy of the values per
 * reply); before anything changes the values - an update, a rollback, a membership change
 * that applies a waiting step - pf_ws_settle() copies whatever of a reply is still
 * unwritten (settle_replies), so nothing changes a reply halfway. Updates, replies and the
 * transport's writes all happen on that one thread. A pull that asks for a version not
 * reached yet ("not before v"), or a training task's pull while it is too far ahead of the
 * slowest (training.max_staleness, ps/staleness.h), is parked on its connection and
 * answered by the update that lets it go. Bad frames get an ERROR reply and change nothing.
 * The chief's final CHECKPOINT ends the task: it writes its shards, acknowledges, answers
 * whatever is parked, and returns from ps_server_wait once its workers have gone.
 */
#include "ps/server.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "psflow/checkpoint.h"
#include "psflow/clock.h"
#include "psflow/footprint.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/placement.h"
#include "psflow/wire.h"
#include "psflow/wire_auth.h"
#include "psflow/ws.h"
#include "ps/ps_checkpoint.h"
#include "ps/server_internal.h"
#include "ps/shard.h"
#include "ps/split_queue.h"

/* CHECKPOINT and RESTORE come from the current chief only. Returns 0 or sends an error. */
static int check_current_chief(ps_server *s, peer *p, uint32_t request_id, const char *what) {
    if (p->role != PF_WIRE_ROLE_CHIEF) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_FORBIDDEN,
                        "only the chief may %s (this connection is %s %d)", what,
                        ps_server_role_name(p->role), p->task);
        return -1;
    }
    if (p->incarnation < s->chief_incarnation) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_STALE_INCARNATION,
                        "%s from chief incarnation %" PRIu64 ", replaced by %" PRIu64, what,
                        p->incarnation, s->chief_incarnation);
        return -1;
    }
    return 0;
}

/* A sync checkpoint holds values of version `step` on every ps: a ps at that version writes
 * now; one behind it parks the request and writes exactly when an update reaches it, before
 * it applies anything more (write_parked_checkpoints); one already past it refuses
 * (VERSION_PASSED) and the chief asks again at a later version. So a re-sent CHECKPOINT
 * never labels older values with a newer step, nor newer ones with an older step. An async
 * ps writes at once: its file records the version it holds. */
static void handle_checkpoint(ps_server *s, peer *p, uint32_t request_id,
                              const pf_wire_checkpoint *c) {
    if (check_current_chief(s, p, request_id, "checkpoint") != 0)
        return;
    uint64_t v = ps_server_version(s);
    /* Past max_steps nothing more is applied, so a later version is never reached (a ps
     * that restored a checkpoint of a longer run holds one: that one it can write). */
    if (c->step > (uint64_t)s->spec.training.max_steps && c->step > v) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_VALUE,
                        "checkpoint step %" PRIu64 " is past the job's max_steps %" PRId64
                        " and this ps's version %" PRIu64 ": no ps ever holds that version",
                        c->step, (int64_t)s->spec.training.max_steps, v);
        return;
    }
    if (s->spec.training.mode != PF_MODE_SYNC || v == c->step) {
        ps_server_write_checkpoint(s, p, request_id, c->step, c->final);
        return;
    }
    if (v > c->step || s->final_done) {
        char text[160];
        snprintf(text, sizeof text,
                 v > c->step ? "ps %d is at version %" PRIu64 ", past step %" PRIu64
                               "; ask again at a later one"
                             : "ps %d ended the job at version %" PRIu64
                               " (final checkpoint written): step %" PRIu64 " is never reached",
                 s->task, v, c->step);
        ps_server_log(s, "checkpoint at step %" PRIu64 " refused: %s", c->step, text);
        ps_server_checkpoint_ack(s, p, request_id, c->step, PF_WIRE_VERSION_PASSED, text);
        return;
    }
    ps_server_log(s,
                  "checkpoint at step %" PRIu64 " waits for version %" PRIu64 " (now %" PRIu64 ")",
                  c->step, c->step, v);
    if (p->ck_parked) /* one waits per connection: the chief gave the older one up */
        ps_server_error(s, p->conn, p->ck_request_id, PF_WIRE_UNEXPECTED,
                        "CHECKPOINT at step %" PRIu64
                        " replaced by a newer CHECKPOINT (request %" PRIu32 ", step %" PRIu64
                        ") on the same connection; nothing written for it",
                        p->ck_step, request_id, c->step);
    p->ck_parked = 1;
    p->ck_request_id = request_id;
    p->ck_step = c->step;
    p->ck_final = c->final;
}

/* RESTORE from the chief: a consistent rollback. Every ps of the job loads the same
 * complete checkpoint; pulls parked for a version past it are answered now with the
 * restored values (their pushes were computed before the rollback and are dropped), and a
 * parked checkpoint is refused. */
static void handle_restore(ps_server *s, peer *p, uint32_t request_id, uint64_t step,
                           float lr_factor) {
    /* A read-only ps switches checkpoints when its reader (psflow serve --ps) asks, and only
     * then: the newest reader that said HELLO, so that a replaced server cannot switch it. */
    if (s->read_only) {
        if (p->role != PF_WIRE_ROLE_READER) {
            ps_server_error(s, p->conn, request_id, PF_WIRE_FORBIDDEN,
                            "a read-only ps restores when its reader asks, not %s %d",
                            ps_server_role_name(p->role), p->task);
            return;
        }
        if (ps_server_stale_reader(s, p, request_id))
            return;
    } else if (check_current_chief(s, p, request_id, "roll back") != 0) {
        return;
    }
    uint64_t before = ps_server_version(s);
    char note[2600];
    pf_error err;
    pf_error_clear(&err);
    ps_server_settle(s); /* (a refused rollback changes nothing: the copies are then spare) */
    char *queue = NULL;
    pf_status st = ps_checkpoint_restore_step(s->shards, &s->spec, s->task, s->checkpoint_dir, step,
                                              &queue, note, sizeof note, &err);
    if (st != PF_OK) {
        ps_server_log(s, "rollback to step %" PRIu64 " refused: %s", step, err.message);
        /* A read-only ps tells a checkpoint that does not verify (its reader never tries it
         * again) from one it could not read now. */
        ps_server_checkpoint_ack(s, p, request_id, step,
                                 s->read_only && st == PF_ERR_FORMAT ? PF_WIRE_BAD_VALUE
                                                                     : PF_WIRE_INTERNAL,
                                 err.message);
        return;
    }
    ps_server_lease_restore(s, queue);
    pf_free(queue);
    s->nonfinite[0] = '\0';
    __atomic_store_n(&s->pub_version, ps_server_version(s), __ATOMIC_RELAXED);
    ps_server_publish_tables(s);
    ps_server_log(s, "%s from version %" PRIu64 ": %s",
                  s->read_only ? "switched at a reader's RESTORE" : "rolled back", before, note);
    double lr = s->spec.optimizer.learning_rate * (double)lr_factor;
    ps_shards_set_learning_rate(s->shards, lr);
    if (lr_factor < 1)
        ps_server_log(s, "learning rate %g from now on (%g x %g)", lr,
                      s->spec.optimizer.learning_rate, (double)lr_factor);
    for (peer *q = s->peers; q; q = q->next) {
        if (q->parked) {
            q->parked = 0;
            pf_profile_add(&s->prof, PF_PHASE_QUEUE, q->parked_at);
            ps_server_reply_pull(s, q->conn, q->request_id, &q->pull, PF_WIRE_PUSH_STALE,
                                 q->parked_seg ? q->seg_dst : NULL);
        }
        if (q->ck_parked) {
            q->ck_parked = 0;
            ps_server_checkpoint_ack(s, q, q->ck_request_id, q->ck_step, PF_WIRE_VERSION_PASSED,
                                     "rolled back before this checkpoint's version was reached");
        }
    }
    char dir[2048];
    if (pf_checkpoint_step_dir(s->checkpoint_dir, s->spec.name, (int64_t)step, dir, sizeof dir) !=
        PF_OK)
        dir[0] = '\0';
    ps_server_checkpoint_ack(s, p, request_id, step, 0, dir);
}

static void handle_stats(ps_server *s, peer *p, uint32_t request_id) {
    ps_stats st = ps_shards_stats(s->shards);
    char json[4096];
    int n = snprintf(
        json, sizeof json,
        "{\"ps_task\":%d,\"incarnation\":%" PRIu64 ",\"version\":%" PRIu64
        ",\"pushes_applied\":%" PRIu64 ",\"pushes_stale\":%" PRIu64 ",\"pushes_duplicate\":%" PRIu64
        ",\"pushes_refused\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"shards\":%d,\"bytes\":%" PRId64
        ",\"rows_pulled\":%" PRIu64 ",\"rows_pushed\":%" PRIu64,
        s->task, s->incarnation, st.version, st.pushes_applied, st.pushes_stale,
        st.pushes_duplicate, st.pushes_refused, s->errors, ps_shards_count(s->shards),
        s->placement.bytes_per_ps[s->task], __atomic_load_n(&s->rows_pulled, __ATOMIC_RELAXED),
        __atomic_load_n(&s->rows_pushed, __ATOMIC_RELAXED));
    size_t len = ps_staleness_json_close(s->staleness, json, (size_t)n, sizeof json);
    pf_wire_stats_reply r = {{json, (uint32_t)len}};
    pf_error err;
    ps_server_send(s, p->conn, pf_wire_encode_stats_reply(&s->out, request_id, &r, &err),
                   "STATS_REPLY", 0);
}

/* Checks who a HELLO says it is against the job: the job's name, and a role and index the
 * job has (the chief is training task 0, workers 1 .. n-1 follow it; evaluators count
 * from 0; a tool says 0). Returns 0 or sends an error. */
static int check_hello(ps_server *s, peer *p, uint32_t request_id, const pf_wire_hello *h) {
    int n_tasks = ps_shards_tasks(s->shards); /* as this ps's agent last said: never a peer */
    if (p->hello) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_UNEXPECTED,
                        "a second HELLO on a connection that said HELLO as %s %d",
                        ps_server_role_name(p->role), p->task);
        return -1;
    }
    if (h->job.len != strlen(s->spec.name) || memcmp(h->job.ptr, s->spec.name, h->job.len) != 0) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_VALUE,
                        "this ps serves job '%s', not '%.*s'", s->spec.name, (int)h->job.len,
                        h->job.ptr);
        return -1;
    }
    uint32_t lo = 0, end = 1; /* the task indices the role may name: [lo, end) */
    if (h->role == PF_WIRE_ROLE_CHIEF)
        end = 1;
    else if (h->role == PF_WIRE_ROLE_WORKER)
        lo = 1, end = (uint32_t)n_tasks;
    else if (h->role == PF_WIRE_ROLE_EVALUATOR)
        end = (uint32_t)s->spec.replicas.evaluator;
    else if (h->role == PF_WIRE_ROLE_READER)
        end = (uint32_t)pf_serving_readers(&s->spec.serving);
    /* A reader's incarnation is when it started (microseconds); a newer one takes a
     * read-only ps over, so one from the future would lock every real server out. */
    if (h->role == PF_WIRE_ROLE_READER &&
        (double)h->incarnation > (pf_clock_wall() + 86400) * 1e6) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_VALUE,
                        "reader incarnation %" PRIu64 " is more than a day past this ps's clock",
                        h->incarnation);
        return -1;
    }
    if (h->task_index < lo || h->task_index >= end) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_BAD_VALUE,
                        "%s index %" PRIu32 " out of range (job %s has %" PRIu32 " .. %" PRId64 ")",
                        ps_server_role_name(h->role), h->task_index, s->spec.name, lo,
                        (int64_t)end - 1);
        return -1;
    }
    return 0;
}

/* Serves the connection as the task its HELLO names, from now on. */
static void accept_hello(ps_server *s, peer *p, uint32_t request_id, const pf_wire_hello *h) {
    p->hello = 1;
    p->role = h->role;
    p->task = (int)h->task_index;
    p->incarnation = h->incarnation;
    if (p->role == PF_WIRE_ROLE_CHIEF && p->incarnation > s->chief_incarnation)
        s->chief_incarnation = p->incarnation;
    if (p->role == PF_WIRE_ROLE_READER && p->incarnation > s->reader_incarnation)
        s->reader_incarnation = p->incarnation;
    if (p->role == PF_WIRE_ROLE_WORKER || p->role == PF_WIRE_ROLE_CHIEF) {
        pthread_mutex_lock(&s->mu);
        s->seen[p->task] = 1; /* p->task < n_tasks <= PF_MAX_TASKS: check_hello */
        pthread_mutex_unlock(&s->mu);
        ps_staleness_join(s->staleness, p->task);
        ps_server_log(s, "%s %d connected (incarnation %" PRIu64 ")", ps_server_role_name(p->role),
                      p->task, p->incarnation);
        ps_server_lease_renew(s, p);
    } else if (p->role == PF_WIRE_ROLE_READER) {
        ps_server_log(s, "reader %d connected", p->task);
    }
    if (!s->sink.send)
        pf_ws_trust(s->ws, p->conn); /* past the limits of a stranger (psflow/ws.h) */
    pf_wire_hello_ack ack = {(uint32_t)s->task, s->incarnation, ps_server_version(s),
                             (uint32_t)ps_shards_count(s->shards)};
    pf_error err;
    ps_server_send(s, p->conn, pf_wire_encode_hello_ack(&s->out, request_id, &ack, &err),
                   "HELLO_ACK", 0);
}

/* A HELLO: served at once without a key; with one, answered by AUTH_CHALLENGE and held
 * until the task proves the key (check_proof). */
static void handle_hello(ps_server *s, peer *p, uint32_t request_id, const pf_wire_hello *h,
                         const uint8_t *msg, size_t len) {
    if (check_hello(s, p, request_id, h) != 0)
        return;
    if (!s->has_key) {
        accept_hello(s, p, request_id, h);
        return;
    }
    pf_error err;
    if (s->sink.nonce)
        s->sink.nonce(s->sink.user, p->nonce);
    if (len > sizeof p->hello_msg || (!s->sink.nonce && pf_wire_nonce(p->nonce, &err) != PF_OK)) {
        ps_server_error(s, p->conn, request_id, PF_WIRE_INTERNAL, "cannot start authentication");
        return; /* cannot happen: a decoded HELLO fits; the generator failing */
    }
    memcpy(p->hello_msg, msg, len);
    p->hello_len = len;
    p->pending = *h;
    p->pending.job = (pf_wire_str){NULL, 0};
    p->challenged = 1;
    pf_wire_auth a = {p->nonce, NULL};
    ps_server_send(s, p->conn,
                   pf_wire_encode_auth(&s->out, PF_WIRE_AUTH_CHALLENGE, request_id, &a, &err),
                   "AUTH_CHALLENGE", 0);
}

/* With integrity: a peer's messages are digested as their bytes land, so only the tag's
 * final step is left once one is whole (check_tag). Service thread, as everything that
 * touches mac_in. */
static void on_bytes(pf_ws *ws, uint64_t conn, void *conn_user, size_t pos, const uint8_t *data,
                     size_t n, void *user) {
    (void)ws;
    (void)conn;
    (void)user;
    peer *p = conn_user;
    if (!p || !p->mac_in || p->refused)
        return;
    if (pos == 0)
        pf_wire_mac_begin(p->mac_in);
    pf_wire_mac_update(p->mac_in, data, n);
}

/* Right after AUTH_OK: every message from now on, both ways, carries a tag (api/wire.md
 * "Integrity"), each one's checked as it arrives (on_bytes). Returns 0, or -1 with the
 * connection closed (out of memory). */
static int start_integrity(ps_server *s, peer *p, const uint8_t key[PF_WIRE_KEY_SIZE],
                           const uint8_t nonce_task[PF_WIRE_NONCE_SIZE]) {
    p->mac_in =
        pf_wire_mac_create(key, PF_WIRE_TO_PS, p->hello_msg, p->hello_len, p->nonce, nonce_task);
    p->mac_out =
        pf_wire_mac_create(key, PF_WIRE_TO_TASK, p->hello_msg, p->hello_len, p->nonce, nonce_task);
    if (p->mac_in && p->mac_out) {
        if (s->ws) /* not in a sink's test: it hands whole messages */
            pf_ws_set_on_bytes(s->ws, p->conn, on_bytes);
        return 0;
    }
    ps_server_log(s, "out of memory for a connection's message tags; closing it");
    p->refused = 1;
    ps_server_close(s, p->conn);
    return -1;
}

/* A message whose tag is wrong - injected, changed, replayed, reordered, or one before it
 * dropped - is refused whole: nothing of it is applied and the connection closes (the
 * peer reconnects). Logged at the first and then every power of two. Returns 0 when the
 * message may be handled (its tag stripped from *len). A message on_bytes digested whole is
 * verified by the digest's final step, another one (a sink's) checked whole. */
static int check_tag(ps_server *s, peer *p, const uint8_t *data, size_t *len) {
    if (!p->mac_in)
        return 0;
    if (pf_wire_mac_fed(p->mac_in) == *len ? pf_wire_mac_verify(p->mac_in)
                                           : pf_wire_mac_check(p->mac_in, data, *len)) {
        *len -= PF_WIRE_TAG_SIZE;
        return 0;
    }
    uint64_t n = ++s->bad_tags;
    if ((n & (n - 1)) == 0)
        ps_server_log(s,
                      "refused a message from %s %d whose integrity tag does not verify (message "
                      "%" PRIu64 " of the connection, %zu bytes; %" PRIu64
                      " so far): injected, changed or out of order; closing the connection",
                      ps_server_role_name(p->role), p->task, pf_wire_mac_seq(p->mac_in), *len, n);
    p->refused = 1;
    ps_server_close(s, p->conn);
    return -1;
}

/* The message after AUTH_CHALLENGE: an AUTH_PROOF under the key of the task the HELLO
 * named, or the connection is refused and closed. A valid proof is answered by AUTH_OK
 * (the ps's own proof) and HELLO_ACK. */
static void check_proof(ps_server *s, peer *p, const pf_wire_msg *m, int decoded) {
    p->challenged = 0;
    uint8_t key[PF_WIRE_KEY_SIZE], want[PF_WIRE_MAC_SIZE];
    pf_wire_task_key(s->job_key, p->pending.role, p->pending.task_index, key);
    int ok = decoded && m->type == PF_WIRE_AUTH_PROOF;
    if (ok) {
        pf_wire_proof(key, PF_WIRE_PROOF_TASK, p->hello_msg, p->hello_len, p->nonce,
                      m->u.auth.nonce, want);
        ok = pf_wire_mac_equal(want, m->u.auth.mac);
    }
    if (!ok) {
        pf_wire_key_clear(key, sizeof key);
        ps_server_error(s, p->conn, m->request_id, PF_WIRE_UNAUTHENTICATED,
                        "%s %" PRIu32 " of job %s did not prove the job's key (%s); closing",
                        ps_server_role_name(p->pending.role), p->pending.task_index, s->spec.name,
                        !decoded                        ? "a malformed message"
                        : m->type != PF_WIRE_AUTH_PROOF ? "no AUTH_PROOF after the challenge"
                                                        : "wrong proof");
        p->refused = 1;
        ps_server_close(s, p->conn);
        return;
    }
    pf_wire_proof(key, PF_WIRE_PROOF_PS, p->hello_msg, p->hello_len, p->nonce, m->u.auth.nonce,
                  want);
    pf_wire_auth a = {NULL, want};
    pf_error err;
    ps_server_send(s, p->conn,
                   pf_wire_encode_auth(&s->out, PF_WIRE_AUTH_OK, m->request_id, &a, &err),
                   "AUTH_OK", 0);
    if (s->integrity && start_integrity(s, p, key, m->u.auth.nonce) != 0) {
        pf_wire_key_clear(key, sizeof key);
        return;
    }
    pf_wire_key_clear(key, sizeof key);
    accept_hello(s, p, m->request_id, &p->pending);
}

/* PULL and ROW_PULL: a PULL is a row pull without selections. */
static void handle_pull(ps_server *s, peer *p, uint64_t conn, const pf_wire_msg *m) {
    pf_wire_row_pull pull = m->u.row_pull;
    if (m->type == PF_WIRE_PULL)
        pull = (pf_wire_row_pull){m->u.pull.min_version, m->u.pull.n, m->u.pull.ids, 0, NULL};
    if (p->role == PF_WIRE_ROLE_TOOL ||
        (m->type == PF_WIRE_ROW_PULL && p->role == PF_WIRE_ROLE_EVALUATOR)) {
        ps_server_error(s, conn, m->request_id, PF_WIRE_FORBIDDEN, "a task of role %s may not %s",
                        ps_server_role_name(p->role),
                        m->type == PF_WIRE_PULL ? "pull" : "pull rows");
        return;
    }
    if (s->read_only && ps_server_stale_reader(s, p, m->request_id))
        return;
    if (ps_server_check_pull(s, conn, m->request_id, &pull) == 0)
        ps_server_pull_or_park(s, p, m->request_id, &pull, 0, NULL);
}

/* PUSH_PULL and ROW_PUSH_PULL: the push, then the pull answered or parked. */
static void handle_push_pull(ps_server *s, peer *p, uint64_t conn, const pf_wire_msg *m) {
    pf_wire_row_push_pull pp = {
        m->u.push_pull.push,
        0,
        NULL,
        {m->u.push_pull.pull.min_version, m->u.push_pull.pull.n, m->u.push_pull.pull.ids, 0, NULL}};
    if (m->type == PF_WIRE_ROW_PUSH_PULL)
        pp = m->u.row_push_pull;
    if (ps_server_check_pull(s, conn, m->request_id, &pp.pull))
        return;
    int r = ps_server_handle_push(s, p, m->request_id, &pp.push, pp.n_rows, pp.rows);
    if (r >= 0 && s->spec.training.mode == PF_MODE_SYNC && pp.push.step > ps_server_version(s))
        /* computed against a version this ps has not reached: from before a rollback.
         * The worker gets the values to go on from now, not a wait for a step that
         * cannot come without it. */
        ps_server_reply_pull(s, conn, m->request_id, &pp.pull, (uint32_t)r, NULL);
    else if (r >= 0)
        ps_server_pull_or_park(s, p, m->request_id, &pp.pull, (uint32_t)r, NULL);
}

static void apply_membership(ps_server *s);

static void on_message(pf_ws *ws, uint64_t conn, void *conn_user, const uint8_t *data, size_t len,
                       void *user) {
    (void)ws;
    ps_server *s = user;
    peer *p = conn_user;
    if (!p || p->refused || check_tag(s, p, data, &len) != 0)
        return;
    if (__atomic_load_n(&s->membership_retry, __ATOMIC_RELAXED))
        apply_membership(s); /* before a message it may concern (a new worker's HELLO) */
    pf_wire_msg m;
    memset(&m, 0, sizeof m);
    pf_error err;
    pf_error_clear(&err);
    pf_status decoded = pf_wire_decode(&p->in, data, len, &m, &err);
    if (p->challenged) {
        check_proof(s, p, &m, decoded == PF_OK);
        return;
    }
    if (decoded != PF_OK) {
        ps_server_error(s, conn, m.request_id, pf_wire_in_code(&p->in), "%s", err.message);
        return;
    }
    if (!p->hello && m.type != PF_WIRE_HELLO) {
        ps_server_error(s, conn, m.request_id, PF_WIRE_UNEXPECTED, "%s before HELLO",
                        pf_wire_type_name(m.type));
        return;
    }
    if (s->nonfinite[0] && (m.type == PF_WIRE_PULL || m.type == PF_WIRE_PUSH ||
                            m.type == PF_WIRE_PUSH_PULL || m.type == PF_WIRE_ROW_PULL ||
                            m.type == PF_WIRE_ROW_PUSH_PULL || m.type == PF_WIRE_CHECKPOINT ||
                            m.type == PF_WIRE_SEG_PULL || m.type == PF_WIRE_SEG_PUSH_PULL)) {
        ps_server_error(s, conn, m.request_id, PF_WIRE_NONFINITE, "%s", s->nonfinite);
        return;
    }
    if (s->read_only && ps_server_read_only_refuses(m.type)) {
        ps_server_error(s, conn, m.request_id, PF_WIRE_FORBIDDEN,
                        "this ps is read-only (psflow ps --read-only): it serves pulls of the "
                        "checkpoint it restored and accepts no %s",
                        pf_wire_type_name(m.type));
        return;
    }
    switch (m.type) {
    case PF_WIRE_HELLO:
        handle_hello(s, p, m.request_id, &m.u.hello, data, len);
        return;
    case PF_WIRE_PULL:
    case PF_WIRE_ROW_PULL:
        handle_pull(s, p, conn, &m);
        return;
    case PF_WIRE_PUSH: {
        int r = ps_server_handle_push(s, p, m.request_id, &m.u.push, 0, NULL);
        if (r < 0)
            return;
        pf_wire_push_ack ack = {m.u.push.seq, (uint32_t)r, ps_server_version(s)};
        ps_server_send(s, conn, pf_wire_encode_push_ack(&s->out, m.request_id, &ack, &err),
                       "PUSH_ACK", 0);
        return;
    }
    case PF_WIRE_PUSH_PULL:
    case PF_WIRE_ROW_PUSH_PULL:
        handle_push_pull(s, p, conn, &m);
        return;
    case PF_WIRE_SEG_ATTACH:
        ps_server_seg_attach(s, p, m.request_id, &m.u.seg_attach);
        return;
    case PF_WIRE_SEG_PULL:
        ps_server_seg_pull(s, p, m.request_id, &m.u.seg_pull);
        return;
    case PF_WIRE_SEG_PUSH_PULL:
        ps_server_seg_push_pull(s, p, m.request_id, &m.u.seg_push_pull);
        return;
    case PF_WIRE_STATS:
        handle_stats(s, p, m.request_id);
        return;
    case PF_WIRE_CHECKPOINT:
        handle_checkpoint(s, p, m.request_id, &m.u.checkpoint);
        return;
    case PF_WIRE_RESTORE:
        handle_restore(s, p, m.request_id, m.u.restore.step, m.u.restore.lr_factor);
        return;
    case PF_WIRE_LEASE:
        ps_server_lease(s, p, m.request_id, &m.u.lease);
        return;
    default:
        ps_server_error(s, conn, m.request_id, PF_WIRE_BAD_TYPE, "a ps does not accept %s messages",
                        pf_wire_type_name(m.type));
    }
}

/* The data plane's default limits for n_tasks training tasks (api/wire.md "Limits"):
 * twice the tasks plus 32 connections (a worker's link and room for reconnects,
 * evaluators and tools), and the tasks plus 4 largest messages in incomplete messages. */
static int default_connections(int n_tasks) {
    return 2 * n_tasks + 32;
}

static size_t default_buffered(const ps_server *s, int n_tasks) {
    return ((size_t)n_tasks + 4) * s->max_message;
}

/* After a membership change: the limits the ps chose itself follow the new task count, so
 * a job scaled up is not refused by limits sized for its start; the memory bound moves
 * with them (README "Security"). */
static void follow_membership(ps_server *s, int n_tasks) {
    if (!s->ws || (!s->auto_connections && !s->auto_buffered))
        return;
    if (s->auto_connections)
        s->max_connections = default_connections(n_tasks);
    if (s->auto_buffered)
        s->max_buffered = default_buffered(s, n_tasks);
    pf_ws_set_limits(s->ws, s->max_connections, s->max_buffered);
    ps_server_log(
        s,
        "data plane for %d training tasks: at most %d connections and %zu bytes of incomplete "
        "messages; memory bound %" PRId64 " bytes",
        n_tasks, s->max_connections, s->max_buffered,
        pf_footprint_ps_bytes(&s->spec, &s->placement, s->task));
}

/* Takes a membership change the agent handed over (ps_server_set_workers): on the service
 * thread, between messages. A step that waited only for removed workers is applied now and
 * the pulls parked on it answered; a removed worker's connection is closed. */
static void apply_membership(ps_server *s) {
    pthread_mutex_lock(&s->mu);
    int workers = s->want_workers, aggregate = s->want_aggregate;
    int retry = __atomic_exchange_n(&s->membership_retry, 0, __ATOMIC_RELAXED);
    s->want_workers = 0;
    pthread_mutex_unlock(&s->mu);
    int n_tasks = workers + s->spec.replicas.chief, before = ps_shards_tasks(s->shards);
    if (workers <= 0 || (n_tasks == before && aggregate == s->spec.training.replicas_to_aggregate))
        return;
    int applied = 0;
    if (s->spec.training.mode == PF_MODE_SYNC)
        ps_server_settle(s); /* the change may apply the step that waited for a removed task */
    pf_status st = ps_shards_set_tasks(s->shards, n_tasks, aggregate, &applied);
    if (st == PF_ERR_NOMEM) {
        /* Kept (unless the agent has meanwhile asked for another one): the agent counts on it,
         * and a ps that never applies it holds back the workers added. */
        pthread_mutex_lock(&s->mu);
        if (s->want_workers == 0) {
            s->want_workers = workers;
            s->want_aggregate = aggregate;
        }
        s->retry_at = pf_clock_now() + 1;
        __atomic_store_n(&s->membership_retry, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&s->mu);
        if (!retry)
            ps_server_log(
                s,
                "membership change to %d workers (aggregating %d) waits: out of memory for its "
                "gradient buffers; retried every second and on every message until it applies",
                workers, aggregate);
        return;
    }
    if (st != PF_OK) {
        ps_server_log(s, "membership change to %d workers (aggregating %d) refused: out of range",
                      workers, aggregate);
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->n_tasks = n_tasks;
    s->spec.replicas.worker = workers;
    s->spec.training.replicas_to_aggregate = aggregate;
    for (int t = n_tasks; t < before; t++)
        s->seen[t] = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    ps_server_log(s,
                  "membership: %d -> %d training tasks at version %" PRIu64
                  "%s%s (values and version "
                  "kept%s)",
                  before, n_tasks, ps_server_version(s),
                  s->spec.training.mode == PF_MODE_SYNC ? ", a sync step aggregates " : "",
                  s->spec.training.mode == PF_MODE_SYNC
                      ? (aggregate == workers ? "every worker's gradient" : "a fixed number")
                      : "",
                  retry ? "; applied on a retry once memory allowed" : "");
    if (n_tasks != before)
        follow_membership(s, n_tasks);
    for (peer *p = s->peers; p; p = p->next)
        if (ps_server_trainer(p) >= n_tasks) {
            p->parked = 0;
            ps_server_close(s, p->conn);
        }
    if (applied) {
        ps_stats now = ps_shards_stats(s->shards);
        __atomic_store_n(&s->pub_version, now.version, __ATOMIC_RELAXED);
        __atomic_store_n(&s->pub_applied, now.pushes_applied, __ATOMIC_RELAXED);
        ps_server_check_finite(s);
        if (!s->nonfinite[0])
            ps_server_write_parked_checkpoints(s);
        ps_server_release_parked(s);
    }
}

static void on_wake(pf_ws *ws, void *user) {
    (void)ws;
    apply_membership(user);
    ps_server_release_parked(user); /* with max_staleness: a task may have gone silent */
}

void ps_server_set_workers(ps_server *s, int workers, int aggregate) {
    pthread_mutex_lock(&s->mu);
    s->want_workers = workers;
    s->want_aggregate = aggregate;
    pthread_mutex_unlock(&s->mu);
    if (s->ws)
        pf_ws_wake(s->ws);
    else
        apply_membership(s); /* without a socket the caller is the service thread */
}

int ps_server_workers(ps_server *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->n_tasks - s->spec.replicas.chief;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void on_open(pf_ws *ws, uint64_t conn, void *conn_user, void *user) {
    (void)conn_user;
    ps_server *s = user;
    int n_local = ps_shards_count(s->shards);
    peer *p = pf_calloc(1, sizeof *p);
    if (p &&
        (!(p->ids = pf_mallocarray((size_t)(n_local ? n_local : 1), sizeof *p->ids)) ||
         !(p->sel = pf_mallocarray((size_t)(n_local ? n_local : 1), sizeof *p->sel)) ||
         !(p->seg_dst = pf_mallocarray((size_t)(n_local ? n_local : 1), sizeof *p->seg_dst)))) {
        pf_free(p->ids);
        pf_free(p->sel);
        pf_free(p->seg_dst);
        pf_free(p->sel_rows);
        pf_free(p->sel_ids);
        pf_free(p);
        p = NULL;
    }
    if (!p) {
        ps_server_close(s, conn);
        return;
    }
    p->conn = conn;
    pf_wire_in_init(&p->in, 0, (uint32_t)(n_local ? n_local : 1));
    p->next = s->peers;
    s->peers = p;
    if (ws)
        pf_ws_set_conn_user(ws, conn, p);
    pthread_mutex_lock(&s->mu);
    s->n_peers++;
    pthread_mutex_unlock(&s->mu);
}

static void on_close(pf_ws *ws, uint64_t conn, void *conn_user, void *user) {
    (void)ws;
    (void)conn_user;
    ps_server *s = user;
    for (peer **pp = &s->peers; *pp; pp = &(*pp)->next) {
        peer *p = *pp;
        if (p->conn != conn)
            continue;
        *pp = p->next;
        ps_server_lease_release(s, p); /* p is off the list: only the others are looked at */
        char record[200] = "";
        if (s->staleness && ps_server_trainer(p) >= 0) { /* it holds nobody back any more */
            ps_staleness_describe(s->staleness, p->task, record, sizeof record);
            ps_staleness_leave(s->staleness, p->task);
            if (!__atomic_load_n(&s->destroying, __ATOMIC_ACQUIRE))
                ps_server_release_parked(s);
        }
        if (p->hello && p->role != PF_WIRE_ROLE_TOOL)
            ps_server_log(s, "%s %d disconnected%s%s", ps_server_role_name(p->role), p->task,
                          record[0] ? "; staleness: " : "", record);
        pf_wire_in_deinit(&p->in);
        pf_wire_mac_destroy(p->mac_in);
        pf_wire_mac_destroy(p->mac_out);
        pf_segment_close(&p->seg);
        pf_free(p->ids);
        pf_free(p->sel);
        pf_free(p->seg_dst);
        pf_free(p->sel_rows);
        pf_free(p->sel_ids);
        pf_free(p);
        pthread_mutex_lock(&s->mu);
        s->n_peers--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return;
    }
}

/* Allocates the service thread's scratch (sized by this task's shards), the staleness
 * clocks a bounded async job keeps, and the global -> local shard map. */
static pf_status alloc_scratch(ps_server *s) {
    int n_local = ps_shards_count(s->shards);
    s->local_of = pf_mallocarray((size_t)s->placement.n_shards, sizeof *s->local_of);
    s->grads = pf_calloc((size_t)(n_local ? n_local : 1), sizeof *s->grads);
    s->views = pf_calloc((size_t)(n_local ? n_local : 1), sizeof *s->views);
    s->seen = pf_calloc(PF_MAX_TASKS, 1);
    s->n_tasks = ps_shards_tasks(s->shards);
    s->max_parts = 2 * (size_t)n_local + 1;
    s->parts = pf_calloc(s->max_parts + 1, sizeof *s->parts); /* + a tag (integrity) */
    s->lend = pf_calloc(s->max_parts + 1, 1);
    s->pulled = pf_calloc((size_t)(n_local ? n_local : 1), 1);
    s->seg_ids = pf_calloc((size_t)(n_local ? n_local : 1), sizeof *s->seg_ids);
    s->seg_views = pf_calloc((size_t)(n_local ? n_local : 1), sizeof *s->seg_views);
    s->seg_dst = pf_calloc((size_t)(n_local ? n_local : 1), sizeof *s->seg_dst);
    s->seg_limit = pf_segment_bytes(pf_model_num_params(&s->spec.model), NULL);
    int64_t bound = s->spec.training.max_staleness; /* >= 0 in async jobs only */
    if (bound >= 0)
        s->staleness = ps_staleness_create(PF_MAX_TASKS, bound,
                                           (double)s->spec.training.stall_timeout_secs / 2);
    if (!s->local_of || !s->grads || !s->views || !s->seen || !s->parts || !s->lend || !s->pulled ||
        !s->seg_ids || !s->seg_views || !s->seg_dst || (bound >= 0 && !s->staleness))
        return PF_ERR_NOMEM;
    /* ps_shards holds this task's shards in placement (creation) order. */
    for (int g = 0, next = 0; g < s->placement.n_shards; g++)
        s->local_of[g] = s->placement.shards[g].ps_task == s->task ? next++ : -1;
    for (int g = 0; g < s->placement.n_shards; g++)
        assert(s->local_of[g] < 0 ||
               ps_shards_info(s->shards, s->local_of[g])->offset == s->placement.shards[g].offset);
    return PF_OK;
}

/* PSFLOW_SHM_DIR: workers in other containers or pods of this host hand their segments over
 * through a socket there (seg_handoff.h). Without it, or when it cannot listen, they attach
 * through /proc (the same PID namespace) or go over the socket. */
static void start_handoff(ps_server *s) {
    const char *dir = pf_seg_handoff_dir();
    if (!dir || !pf_segment_enabled())
        return;
    char who[32];
    snprintf(who, sizeof who, "psflow ps %d", s->task);
    pf_error err;
    if (pf_seg_handoff_listen(dir, s->spec.name, s->task, who, &s->handoff, &err) != PF_OK)
        ps_server_log(s, "no segment handoff (workers in other containers go over the socket): %s",
                      err.message);
    else
        ps_server_log(s, "workers of this host may hand their segments over at %s",
                      pf_seg_handoff_socket(s->handoff));
}

static pf_status start(const ps_server_options *o, const ps_server_sink *sink, ps_server **out,
                       pf_error *err) {
    *out = NULL;
    ps_server *s = pf_calloc(1, sizeof *s);
    if (!s)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    if (sink)
        s->sink = *sink;
    pf_profile_start(&s->prof);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pf_wire_out_init(&s->out);
    s->task = o->ps_task;
    s->incarnation = o->incarnation;
    s->grace = o->exit_grace_seconds;
    s->read_only = o->read_only;
    if (o->job_key) {
        s->has_key = 1;
        memcpy(s->job_key, o->job_key, PF_WIRE_KEY_SIZE);
        s->integrity = !o->data_plane.tls_cert; /* TLS protects every byte itself */
    }
    snprintf(s->checkpoint_dir, sizeof s->checkpoint_dir, "%s",
             o->checkpoint_dir ? o->checkpoint_dir : "./checkpoints");
    pf_status st = pf_job_spec_copy(&s->spec, o->spec);
    if (st != PF_OK) {
        pf_free(s);
        return pf_error_set(err, st, NULL, "out of memory");
    }
    if ((st = pf_placement_compute(&s->spec, &s->placement)) != PF_OK ||
        (st = ps_shards_create(&s->spec, &s->placement, s->task, pf_backend_openblas(),
                               &s->shards)) != PF_OK) {
        pf_error_set(err, st, NULL,
                     st == PF_ERR_INVALID ? "ps task %d out of range (job has %d ps)"
                                          : "out of memory",
                     s->task, s->spec.replicas.ps);
        goto fail;
    }
    if ((st = alloc_scratch(s)) != PF_OK) {
        pf_error_set(err, st, NULL, "out of memory");
        goto fail;
    }
    int n_local = ps_shards_count(s->shards);
    /* Restore before listening: a restarted ps never serves fresh values to a running job. */
    char note[3000], *queue = NULL;
    if ((st = s->read_only ? ps_server_restore_read_only(s, note, sizeof note, err)
                           : ps_checkpoint_restore(s->shards, &s->spec, s->task, s->checkpoint_dir,
                                                   &queue, note, sizeof note, err)) != PF_OK)
        goto fail;
    ps_server_log(s, "%s", note);
    ps_server_publish_tables(s);
    if (s->read_only)
        ps_server_log(s, "read-only: serving these values to readers (psflow serve --ps); "
                         "pushes, checkpoints and leases are refused");
    ps_server_lease_restore(s, queue);
    pf_free(queue);
    if (s->staleness)
        ps_server_log(
            s,
            "bounded staleness: a training task's pull waits while it is more than %" PRId64
            " pushes ahead of the slowest connected one (training.max_staleness)",
            s->spec.training.max_staleness);
    pf_ws_handlers h = {on_open, on_message, on_close, on_wake};
    /* a push of every shard; a row push of a table names each row with 4 more bytes, and its
     * ROW_PUSH_PULL may select them again: 8 bytes per table row on top */
    size_t table_rows = 0, dynamic = 0;
    for (int i = 0; i < n_local; i++) {
        const pf_shard_info *info = ps_shards_info(s->shards, i);
        if (ps_shards_is_dynamic(s->shards, i)) /* a batch's ids, their rows, the next ids */
            dynamic += (size_t)ps_server_most_ids(s, info) * (16 + 4 * (size_t)info->shape[1]);
        else if (ps_shards_is_table(s->shards, i))
            table_rows += (size_t)info->shape[0];
    }
    s->max_message = (size_t)s->placement.bytes_per_ps[s->task] + 65536 + (size_t)n_local * 16 +
                     8 * table_rows + dynamic;
    pf_ws_options wo = o->data_plane;
    s->auto_connections = wo.max_connections <= 0;
    s->auto_buffered = wo.max_buffered == 0;
    s->max_connections = wo.max_connections =
        s->auto_connections ? default_connections(s->n_tasks) : wo.max_connections;
    s->max_buffered = wo.max_buffered =
        s->auto_buffered ? default_buffered(s, s->n_tasks) : wo.max_buffered;
    if (!sink && (st = pf_ws_server_create_with(o->listen_host, o->port, s->max_message, &wo, &h, s,
                                                &s->ws, err)) != PF_OK)
        goto fail;
    ps_server_log(s,
                  "data plane for %d training tasks: at most %d connections of the job's tasks, "
                  "%d untrusted ones and %zu bytes of incomplete messages",
                  s->n_tasks, s->max_connections,
                  wo.max_untrusted > 0 ? wo.max_untrusted : PF_WS_DEFAULT_MAX_UNTRUSTED,
                  s->max_buffered);
    if (!sink)
        start_handoff(s);
    if (!s->has_key)
        ps_server_log(s,
                      "the data plane is unauthenticated: any peer that reaches port %d and names "
                      "job %s is served (set PSFLOW_TOKEN or PSFLOW_TOKEN_FILE to require a proof "
                      "of the job's key)",
                      ps_server_port(s), s->spec.name);
    ps_server_log(s,
                  "serving %d shards (%" PRId64
                  " bytes) of job %s on port %d (%s), version %" PRIu64 "; memory bound %" PRId64
                  " bytes",
                  n_local, s->placement.bytes_per_ps[s->task], s->spec.name, ps_server_port(s),
                  o->data_plane.tls_cert ? "TLS" : "plain TCP", ps_server_version(s),
                  pf_footprint_ps_bytes(&s->spec, &s->placement, s->task));
    *out = s;
    return PF_OK;
fail:
    ps_server_destroy(s);
    return st;
}

pf_status ps_server_start(const ps_server_options *o, ps_server **out, pf_error *err) {
    return start(o, NULL, out, err);
}

pf_status ps_server_start_sink(const ps_server_options *o, const ps_server_sink *sink,
                               ps_server **out, pf_error *err) {
    return start(o, sink, out, err);
}

void ps_server_sink_open(ps_server *s, uint64_t conn) {
    if (!ps_server_peer(s, conn))
        on_open(NULL, conn, NULL, s);
}

void ps_server_sink_message(ps_server *s, uint64_t conn, const uint8_t *data, size_t len) {
    peer *p = ps_server_peer(s, conn);
    if (p)
        on_message(NULL, conn, p, data, len, s);
}

void ps_server_sink_close(ps_server *s, uint64_t conn) {
    on_close(NULL, conn, NULL, s);
}

int ps_server_port(const ps_server *s) {
    return s->ws ? pf_ws_port(s->ws) : 0;
}

void ps_server_stats(const ps_server *s, uint64_t *version, uint64_t *applied, uint64_t *stale) {
    *version = __atomic_load_n(&s->pub_version, __ATOMIC_RELAXED);
    *applied = __atomic_load_n(&s->pub_applied, __ATOMIC_RELAXED);
    *stale = __atomic_load_n(&s->pub_stale, __ATOMIC_RELAXED);
}

pf_profile *ps_server_profile(ps_server *s) {
    return &s->prof;
}

void ps_server_rows(const ps_server *s, uint64_t *pulled, uint64_t *pushed) {
    *pulled = __atomic_load_n(&s->rows_pulled, __ATOMIC_RELAXED);
    *pushed = __atomic_load_n(&s->rows_pushed, __ATOMIC_RELAXED);
}

int ps_server_staleness(ps_server *s, ps_staleness_task *out, int max) {
    return ps_staleness_snapshot(s->staleness, out, max);
}

void ps_server_stop(ps_server *s) {
    s->stop = 1;
}

int ps_server_wait(ps_server *s) {
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            return 1;
        }
        /* Done once every training task has been here and gone (a task still to come,
         * or reconnecting, gets the grace period to learn the job is over). */
        int n_seen = 0; /* of the current members */
        for (int t = 0; t < s->n_tasks; t++)
            n_seen += s->seen[t];
        if (s->final_done && ((s->n_peers == 0 && n_seen == s->n_tasks) ||
                              pf_clock_now() - s->final_time > s->grace)) {
            pf_profile_stop(&s->prof);
            break;
        }
        /* Once a second even when no message comes: a membership change waiting for memory
         * (a sync step may wait on it), and pulls held for a task that may have gone silent. */
        if (s->ws && (s->staleness || __atomic_load_n(&s->membership_retry, __ATOMIC_RELAXED)) &&
            pf_clock_now() >= s->retry_at) {
            s->retry_at = pf_clock_now() + 1;
            pf_ws_wake(s->ws);
        }
        struct timespec ts = pf_clock_deadline(0.1); /* the stop flag, ten times a second */
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void ps_server_destroy(ps_server *s) {
    if (!s)
        return;
    __atomic_store_n(&s->destroying, 1, __ATOMIC_RELEASE);
    pf_seg_handoff_close(s->handoff);
    pf_ws_destroy(s->ws); /* closes every connection: on_close frees the peers */
    while (s->peers)      /* without a socket: the caller's connections still open */
        on_close(NULL, s->peers->conn, NULL, s);
    ps_shards_destroy(s->shards);
    ps_split_queue_destroy(s->splits);
    pf_placement_deinit(&s->placement);
    pf_wire_out_deinit(&s->out);
    pf_free(s->local_of);
    pf_free(s->grads);
    pf_free(s->row_values);
    pf_free(s->views);
    pf_free(s->parts);
    pf_free(s->lend);
    pf_free(s->pulled);
    pf_free(s->seg_ids);
    pf_free(s->seg_views);
    pf_profile_trace_free(&s->prof);
    pf_free(s->seg_dst);
    pf_free(s->seen);
    ps_staleness_destroy(s->staleness);
    pf_job_spec_deinit(&s->spec);
    pf_wire_key_clear(s->job_key, sizeof s->job_key);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pf_free(s);
}
