/* server_io.c - how a parameter-server task answers (see server_internal.h): the log line,
 * the reply sent from s->out (or to the sink), an ERROR with its rate-limited log, a
 * CHECKPOINT_ACK, and closing a connection. The lowest part of the server: it calls no
 * other part of it, and every handler calls it.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "psflow/text.h"
#include "psflow/wire.h"
#include "psflow/ws.h"
#include "ps/server_internal.h"

void ps_server_log(const ps_server *s, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pf_text_cut_utf8(line);
    if (!s->sink.quiet)
        fprintf(stderr, "psflow ps %d: %s\n", s->task, line);
}

peer *ps_server_peer(ps_server *s, uint64_t conn) {
    for (peer *p = s->peers; p; p = p->next)
        if (p->conn == conn)
            return p;
    return NULL;
}

void ps_server_close(ps_server *s, uint64_t conn) {
    peer *p = ps_server_peer(s, conn);
    if (p) { /* its parked requests go unanswered: nothing more is sent to it */
        p->closing = 1;
        p->parked = 0;
        p->ck_parked = 0;
    }
    if (s->sink.send)
        s->sink.close(s->sink.user, conn);
    else
        pf_ws_close(s->ws, conn); /* after what was queued for it is written */
}

/* The tag of a reply, digested by the transport as it writes the reply
 * (pf_ws_sendv_lent_tagged): ctx is the peer's mac_out, its message begun. */
static void tag_update(void *ctx, const void *data, size_t n) {
    pf_wire_mac_sign_update(ctx, data, n);
}

static void tag_final(void *ctx, uint8_t *tag) {
    pf_wire_mac_sign_end(ctx, tag);
}

/* Sends the message held in s->out to conn: the transport writes its pieces from where they
 * lie while the socket takes them. What it does not take is copied, except, with lend_values
 * (a PULL_REPLY), the tensor data - the shards' values - which is lent (pf_ws_sendv_lent).
 * Its tag, where the connection has one, is computed by the transport as it writes the
 * message (for a sink: before, and appended as a last part). `to` is conn's peer (NULL:
 * none known). */
static void send_message(ps_server *s, uint64_t conn, peer *to, int lend_values) {
    size_t n = pf_wire_out_parts(&s->out, s->parts, s->max_parts);
    assert(n <= s->max_parts);
    pf_wire_mac *mac = s->integrity && to ? to->mac_out : NULL;
    if (s->sink.send) {
        if (mac) { /* the tag goes last, copied: s->parts has room for it */
            pf_wire_mac_sign(mac, s->parts, (int)n, to->tag);
            s->parts[n++] = (struct iovec){to->tag, sizeof to->tag};
        }
        s->sink.send(s->sink.user, conn, s->parts, (int)n);
        return;
    }
    const uint8_t *head = s->out.head.data, *end = head + s->out.head.len;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = s->parts[i].iov_base;
        s->lend[i] = lend_values && !(p >= head && p < end);
    }
    pf_ws_tagger tagger = {tag_update, tag_final, mac, PF_WIRE_TAG_SIZE};
    if (mac)
        pf_wire_mac_sign_begin(mac);
    if (pf_ws_sendv_lent_tagged(s->ws, conn, s->parts, (int)n, s->lend, mac ? &tagger : NULL) ==
        PF_ERR_NOMEM) {
        ps_server_log(s, "out of memory for a %zu-byte reply; closing connection",
                      pf_wire_out_len(&s->out));
        ps_server_close(s, conn);
    }
}

/* Sends the reply just encoded into s->out (encoded: the encoder's status). One that could
 * not be encoded (out of memory: a text the wire refuses is replaced by the caller) is logged
 * and its connection closed: the peer retries at once rather than wait out its timeout. */
void ps_server_send(ps_server *s, uint64_t conn, pf_status encoded, const char *what,
                    int lend_values) {
    peer *p = ps_server_peer(s, conn); /* one lookup a reply: the closing mark and the tag */
    if (p && p->closing)
        return; /* closed by the ps: the transport takes nothing more for it */
    if (encoded == PF_OK) {
        send_message(s, conn, p, lend_values);
        return;
    }
    ps_server_log(s, "cannot encode a %s reply (%s); closing its connection", what,
                  pf_strerror(encoded));
    ps_server_close(s, conn);
}

void ps_server_error(ps_server *s, uint64_t conn, uint32_t request_id, pf_wire_code code,
                     const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pf_text_cut_utf8(msg);
    s->errors++;
    /* Every refusal is answered; the log names the first of each code and then every
     * power of two, so a peer sending garbage cannot flood it. */
    uint64_t n = ++s->refusals[code <= PF_WIRE_UNAUTHENTICATED ? code : PF_WIRE_INTERNAL];
    if ((n & (n - 1)) == 0)
        ps_server_log(s, "refused (%s, %" PRIu64 " so far): %s", pf_wire_code_name(code), n, msg);
    pf_error err;
    pf_status st = pf_wire_encode_error(&s->out, request_id, code, msg, &err);
    if (st != PF_OK) /* out of memory for the text: a short one may still fit */
        st = pf_wire_encode_error(&s->out, request_id, code, "(no memory for the error's text)",
                                  &err);
    ps_server_send(s, conn, st, "ERROR", 0);
}

const char *ps_server_role_name(uint8_t role) {
    static const char *const names[] = {"worker", "chief", "evaluator", "tool", "reader"};
    return role < 5 ? names[role] : "unknown role";
}

/* Answers CHECKPOINT or RESTORE. The text (a path, or why not) is passed through as it is;
 * one the wire refuses - not UTF-8 (a path is bytes), or over PF_WIRE_MAX_PATH - is
 * replaced by a fixed one, so the chief always gets the status. */
void ps_server_checkpoint_ack(ps_server *s, peer *p, uint32_t request_id, uint64_t step,
                              uint32_t status, const char *text) {
    static const char fixed[] = "(this reply's text cannot be sent: not UTF-8 or too long; "
                                "the ps's log has it)";
    pf_wire_checkpoint_ack ack = {step, status, {text, (uint32_t)strlen(text)}};
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_wire_encode_checkpoint_ack(&s->out, request_id, &ack, &err);
    if (st != PF_OK) {
        ps_server_log(s, "CHECKPOINT_ACK for step %" PRIu64 " sent with a fixed text: %s (%s)",
                      step, err.message[0] ? err.message : pf_strerror(st), text);
        ack.path = (pf_wire_str){fixed, sizeof fixed - 1};
        st = pf_wire_encode_checkpoint_ack(&s->out, request_id, &ack, &err);
    }
    ps_server_send(s, p->conn, st, "CHECKPOINT_ACK", 0);
}
