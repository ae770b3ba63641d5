/* link_auth.c - a worker link's side of the data plane's authentication and integrity
 * (api/wire.md "Authentication", "Integrity"): the answer to a ps's AUTH_CHALLENGE, the check
 * of its AUTH_OK, and from then on the tags of the messages both ways - the ps's checked as
 * their bytes land, ours computed as the transport masks them.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "psflow/wire.h"
#include "psflow/wire_auth.h"
#include "psflow/ws.h"
#include "worker/link_internal.h"

/* With integrity, from AUTH_OK on: the ps's messages on l's connection are digested as
 * their bytes land (pf_ws_set_on_bytes), so only the tag's final step is left once one is
 * whole (check_tag). Service thread, as everything that touches mac_in. */
static void on_bytes(pf_ws *ws, uint64_t conn, void *conn_user, size_t pos, const uint8_t *data,
                     size_t n, void *user) {
    (void)ws;
    (void)user;
    ps_link *l = conn_user;
    if (l->mac_conn != conn || !l->mac_in)
        return;
    if (pos == 0)
        pf_wire_mac_begin(l->mac_in);
    pf_wire_mac_update(l->mac_in, data, n);
}

int worker_link_authenticate(worker_link *c, ps_link *l, uint64_t conn, const pf_wire_msg *m,
                             char *msg, size_t len) {
    pf_error err;
    if (m->type == PF_WIRE_AUTH_CHALLENGE) {
        if (!c->has_key) {
            snprintf(msg, len,
                     "ps %d requires a proof of the job's key: give this task the job's "
                     "PSFLOW_TOKEN (or PSFLOW_TOKEN_FILE)",
                     l->index);
            return -1;
        }
        if (l->auth != 0 || l->hello_len == 0) {
            snprintf(msg, len, "ps %d sent AUTH_CHALLENGE out of turn", l->index);
            return -1;
        }
        uint8_t mac[PF_WIRE_MAC_SIZE];
        memcpy(l->nonce_ps, m->u.auth.nonce, PF_WIRE_NONCE_SIZE);
        if (pf_wire_nonce(l->nonce_task, &err) != PF_OK) {
            snprintf(msg, len, "%s", err.message);
            return -1;
        }
        pf_wire_proof(c->task_key, PF_WIRE_PROOF_TASK, l->hello_msg, l->hello_len, l->nonce_ps,
                      l->nonce_task, mac);
        pf_wire_auth a = {l->nonce_task, mac};
        struct iovec part[2];
        if (pf_wire_encode_auth(&l->auth_out, PF_WIRE_AUTH_PROOF, m->request_id, &a, &err) !=
                PF_OK ||
            pf_wire_out_parts(&l->auth_out, part, 2) != 1 ||
            pf_ws_sendv(c->ws, conn, part, 1) != PF_OK) {
            snprintf(msg, len, "cannot answer the challenge of ps %d", l->index);
            return -1;
        }
        l->auth = 1;
        return 0;
    }
    /* AUTH_OK: the ps's proof over the same transcript */
    uint8_t want[PF_WIRE_MAC_SIZE];
    if (!c->has_key || l->auth != 1) {
        snprintf(msg, len, "ps %d sent AUTH_OK out of turn", l->index);
        return -1;
    }
    pf_wire_proof(c->task_key, PF_WIRE_PROOF_PS, l->hello_msg, l->hello_len, l->nonce_ps,
                  l->nonce_task, want);
    if (!pf_wire_mac_equal(want, m->u.auth.mac)) {
        snprintf(msg, len, "ps %d could not prove the job's key: not a ps of this job", l->index);
        return -1;
    }
    if (c->integrity) { /* every message of the ps from HELLO_ACK on carries a tag */
        pf_wire_mac_destroy(l->mac_in);
        l->mac_in = pf_wire_mac_create(c->task_key, PF_WIRE_TO_TASK, l->hello_msg, l->hello_len,
                                       l->nonce_ps, l->nonce_task);
        l->mac_conn = conn;
        if (!l->mac_in) {
            snprintf(msg, len, "out of memory for the message tags of ps %d", l->index);
            return -1;
        }
        pf_ws_set_on_bytes(c->ws, conn, on_bytes); /* tags checked as the bytes come */
    }
    l->auth = 2;
    return 0;
}

/* With integrity: 0 when the message on conn may be handled (its tag, once the ps proved
 * the key, verified and stripped from *len); -1 when it is refused - a tag that does not
 * verify (injected, changed, replayed, or one before it dropped: the connection is closed,
 * and the request resent on a new one), or a connection that is no longer l's. A message
 * that on_bytes digested whole is verified by the digest's final step; any other (none
 * should come) is checked whole - and fails if part of it was received in place. */
int worker_link_check_tag(worker_link *c, ps_link *l, uint64_t conn, const uint8_t *data,
                          size_t *len) {
    pthread_mutex_lock(&c->mu);
    uint64_t current = l->conn;
    pthread_mutex_unlock(&c->mu);
    if (conn != current)
        return -1;
    if (l->mac_conn != conn)
        return 0; /* the handshake, before AUTH_OK */
    if (l->mac_in &&
        (pf_wire_mac_fed(l->mac_in) == *len ? pf_wire_mac_verify(l->mac_in)
                                            : pf_wire_mac_check(l->mac_in, data, *len))) {
        *len -= PF_WIRE_TAG_SIZE;
        return 0;
    }
    if (!l->mac_in)
        return -1; /* after a refused one, closing: nothing more is taken */
    uint64_t n = ++l->bad_tags;
    if ((n & (n - 1)) == 0)
        fprintf(stderr,
                "psflow worker %d: refused a message from ps %d whose integrity tag does not "
                "verify (%zu bytes; %" PRIu64
                " so far): injected, changed or out of order; closing the connection\n",
                c->task, l->index, *len, n);
    pf_wire_mac_destroy(l->mac_in);
    l->mac_in = NULL; /* with mac_conn still conn: nothing more of it is taken */
    pf_ws_close(c->ws, conn);
    return -1;
}

/* The tag of a request, digested by the transport as it masks the request's chunks
 * (pf_ws_sendv_tagged): ctx is the link's mac_out. */
static void tag_update(void *ctx, const void *data, size_t n) {
    pf_wire_mac_sign_update(ctx, data, n);
}

static void tag_final(void *ctx, uint8_t *tag) {
    pf_wire_mac_sign_end(ctx, tag);
}

pf_ws_tagger worker_link_tagger(ps_link *l) {
    return (pf_ws_tagger){tag_update, tag_final, l->mac_out, PF_WIRE_TAG_SIZE};
}
