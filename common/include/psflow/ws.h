/* ws.h - message-oriented WebSocket endpoints for the data plane (RFC 6455 over
 * libwebsockets raw sockets).
 *
 * One pf_ws is one libwebsockets context with its own service thread: a server listening
 * on a port, or a client that opens connections to servers. Handlers run on the service
 * thread and must not block for long. A message is one WebSocket binary message (sent as
 * one frame; fragmented messages from other peers are accepted).
 *
 * Sending: pf_ws_sendv() sends a message that lies in pieces of the caller's memory - an
 * encoded message's header bytes and the tensor data they describe, where that data lives
 * (pf_wire_out_parts) - without gathering it first. When the connection has nothing else
 * to write, the frame goes to the socket from the caller's thread: a server straight from
 * the pieces, a client masking them a chunk at a time into a pooled buffer. What the socket
 * does not take now, or a message behind others, is copied into a pooled buffer (with room
 * for the frame header in front) and written by the service thread, PF_WS_CHUNK bytes per
 * writeable event. Once warm, sending allocates nothing. A server's handler may instead
 * lend the large pieces (pf_ws_sendv_lent: a ps's values in a reply): what the socket does
 * not take is then written later from where they lie, and pf_ws_settle() copies what is
 * still unwritten just before the owner changes them.
 *
 * Receiving: each connection reassembles a message into a buffer reused for every message
 * of that connection (grown geometrically, never shrunk, capped at max_message bytes: a
 * longer message closes the connection) and hands it whole to on_message. A client that
 * knows the layout of the reply it awaits (a PULL_REPLY: pf_wire_pull_reply_places) calls
 * pf_ws_expect() first, and the reply's tensor values are then read from the socket
 * straight to their destination; on_message learns which ranges went where from
 * pf_ws_message_places(), and pf_wire_decode_placed() gives views of the values there. An
 * owner may also see each message's bytes as they land (pf_ws_set_on_bytes), to digest it
 * in the same pass.
 *
 * Limits and TLS (pf_ws_options): a server admits connections in two classes. Until their
 * owner trusts them (pf_ws_trust) they are *untrusted*: few at once, and few from one
 * address, a newcomer taking the place of the one that got further longest ago when there
 * is no room; their handshake and idle time are bounded, their messages small and their
 * incomplete messages held in a budget of their own. Trusted connections (the owner's own
 * peers) have slots and bytes of incomplete messages reserved, which no untrusted one can
 * take. With a certificate a server serves TLS, and a client given a CA file dials TLS and
 * verifies each server's certificate and address.
 *
 * Connections are named by a 64-bit id that is never reused, so a send to a connection
 * that has meanwhile closed fails cleanly instead of touching freed memory. pf_ws_sendv,
 * pf_ws_expect and pf_ws_close may be called from any thread.
 */
#ifndef PSFLOW_WS_H
#define PSFLOW_WS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "psflow/status.h"

#define PF_WS_CHUNK (1u << 20) /* bytes written per writeable event */

typedef struct pf_ws pf_ws;

typedef struct pf_ws_handlers {
    /* A connection is up (server: accepted; client: handshake done). */
    void (*on_open)(pf_ws *ws, uint64_t conn, void *conn_user, void *user);
    /* A whole message arrived. `data` is valid only during the call; when the message was
     * received in place (pf_ws_message_places) the placed ranges of `data` hold nothing. */
    void (*on_message)(pf_ws *ws, uint64_t conn, void *conn_user, const uint8_t *data, size_t len,
                       void *user);
    /* The connection closed or (client) could not be established. Called once per
     * connection, after which the id is dead. */
    void (*on_close)(pf_ws *ws, uint64_t conn, void *conn_user, void *user);
    /* Optional: called on the service thread after pf_ws_wake() (at least once per wake;
     * wakes may be merged). */
    void (*on_wake)(pf_ws *ws, void *user);
} pf_ws_handlers;

/* A byte range of an expected message and where it is received instead of the
 * connection's buffer. */
typedef struct pf_ws_place {
    size_t pos; /* offset in the message */
    size_t len;
    void *dst; /* len writable bytes, the caller's */
} pf_ws_place;

/* Limits and TLS of an endpoint (pf_ws_server_create_with, pf_ws_client_create_with). A zero
 * field takes its default. A server connection is *untrusted* from accept until its owner
 * calls pf_ws_trust() (a ps: once HELLO, and authentication where configured, succeeded);
 * until then its messages are at most untrusted_max_message bytes and it is closed
 * idle_timeout seconds after it was accepted. Untrusted connections never count against
 * max_connections or max_buffered: they have their own max_untrusted slots (at most
 * max_untrusted_per_address from one remote address) and max_untrusted x
 * untrusted_max_message bytes of incomplete messages. A connection accepted when its
 * address's or all untrusted slots are taken closes the untrusted one, of that address or
 * of all, that took its last step longest ago (its steps: accepted, handshake begun,
 * upgraded, a first message delivered): a stranger's crowd cannot keep a new peer out,
 * and a peer that takes its steps promptly is dropped only if the whole share of slots
 * turns over between two of them. Every refusal is logged on stderr, once per cause and then at
 * most once every 10 seconds with the count since. */
typedef struct pf_ws_options {
    int max_connections;           /* server: trusted connections open at once [1024]; a
                                      connection trusted past it is closed, and none is
                                      accepted while they are all taken */
    int max_untrusted;             /* server: untrusted connections open at once [64] */
    int max_untrusted_per_address; /* server: ... from one remote address [a quarter of
                                      max_untrusted, at least 1] */
    double handshake_timeout;      /* server: seconds from accept to a finished upgrade (and TLS
                                      handshake) [10] */
    double idle_timeout;           /* server: seconds from accept to pf_ws_trust [30] */
    size_t untrusted_max_message;  /* server: message bytes before pf_ws_trust [4096] */
    size_t max_buffered;           /* server: bytes of incomplete messages (as their frame
                                      headers announce them) over all trusted connections; a
                                      frame that would pass it closes its connection
                                      [4 x max_message] */
    const char *tls_cert;          /* server: PEM certificate (chain) to serve TLS with, and */
    const char *tls_key;           /*   its PEM private key; both or neither */
    const char *ca_file;           /* client: dial TLS and verify servers against this PEM CA */
} pf_ws_options;

#define PF_WS_DEFAULT_MAX_CONNECTIONS       1024
#define PF_WS_DEFAULT_HANDSHAKE_TIMEOUT     10.0
#define PF_WS_DEFAULT_IDLE_TIMEOUT          30.0
#define PF_WS_DEFAULT_UNTRUSTED_MAX_MESSAGE 4096
#define PF_WS_DEFAULT_MAX_UNTRUSTED         64

/* --- lifecycle ------------------------------------------------------------------------- */

/* Starts a server with options o (NULL: all defaults, plain TCP); otherwise as
 * pf_ws_server_create. Errors also: PF_ERR_IO (the certificate or key cannot be used). */
pf_status pf_ws_server_create_with(const char *iface, int port, size_t max_message,
                                   const pf_ws_options *o, const pf_ws_handlers *h, void *user,
                                   pf_ws **out, pf_error *err);

/* Starts a client endpoint with options o (o->ca_file: every connection is TLS, the server's
 * certificate verified against it and its name against the host dialled). */
pf_status pf_ws_client_create_with(size_t max_message, const pf_ws_options *o,
                                   const pf_ws_handlers *h, void *user, pf_ws **out, pf_error *err);

/* Starts a server on iface:port (iface NULL or "0.0.0.0" = all; port 0 = ephemeral, see
 * pf_ws_port). Errors: PF_ERR_IO (cannot listen; message names the address). */
pf_status pf_ws_server_create(const char *iface, int port, size_t max_message,
                              const pf_ws_handlers *h, void *user, pf_ws **out, pf_error *err);

/* Starts a client endpoint with no connections yet. */
pf_status pf_ws_client_create(size_t max_message, const pf_ws_handlers *h, void *user, pf_ws **out,
                              pf_error *err);

/* Stops the service thread, closes every connection (calling on_close; pending sends are
 * dropped) and frees everything. */
void pf_ws_destroy(pf_ws *ws);

/* Client: starts connecting to host:port; returns the new connection's id in *conn.
 * on_open or on_close follows on the service thread. conn_user is passed to handlers. */
pf_status pf_ws_connect(pf_ws *ws, const char *host, int port, void *conn_user, uint64_t *conn);

/* Closes a connection (asynchronously; on_close follows). Unknown ids are ignored. */
void pf_ws_close(pf_ws *ws, uint64_t conn);

/* 1 when host:port completes a TLS handshake (its certificate unchecked: this only asks
 * whether it speaks TLS), else 0; blocks for timeout_s at most per address tried. For a
 * plain client's message when it could not connect: a server that serves wss needs a CA. */
int pf_ws_probe_tls(const char *host, int port, double timeout_s);

/* From any thread: has the service thread call the on_wake handler soon, so another thread
 * can hand it work without a message on a connection. */
void pf_ws_wake(pf_ws *ws);

/* --- sending and receiving ------------------------------------------------------------- */

/* Sends the message made of parts[0 .. n) on conn, as described above. The parts are read
 * before this returns and may change right after. Errors: PF_ERR_NOT_FOUND (the
 * connection is closed: nothing sent), PF_ERR_NOMEM. Any thread. */
pf_status pf_ws_sendv(pf_ws *ws, uint64_t conn, const struct iovec *parts, int n);

/* A tag that ends a message, computed as the message is written (pf_ws_sendv_tagged):
 * update sees every byte of the message before the tag, in order and split anywhere, then
 * final writes the tag_len bytes of the tag. Called on the sending thread before
 * pf_ws_sendv_tagged returns; when that fails, maybe not at all, or not to the end (the
 * connection is gone, or memory short: the tag's state is the caller's to discard). */
typedef struct pf_ws_tagger {
    void (*update)(void *ctx, const void *data, size_t n);
    void (*final)(void *ctx, uint8_t *tag);
    void *ctx;
    size_t tag_len; /* at most PF_WS_MAX_TAG */
} pf_ws_tagger;

#define PF_WS_MAX_TAG 64

/* As pf_ws_sendv, the message being parts[0 .. n) and then their tag as t computes it
 * (t NULL: none). A client digests each chunk as it masks it, while it is in cache: no
 * separate pass over the message before it goes out. Errors also: PF_ERR_INVALID (t
 * incomplete, or its tag too long). */
pf_status pf_ws_sendv_tagged(pf_ws *ws, uint64_t conn, const struct iovec *parts, int n,
                             const pf_ws_tagger *t);

/* As pf_ws_sendv, from a server's service thread (its handlers), with the parts whose
 * lend[i] is set lent rather than copied: what the socket does not take now is written
 * later from where those parts lie, so they must stay valid and unchanged until the
 * message is written or pf_ws_settle() is called. A client copies, as pf_ws_sendv. */
pf_status pf_ws_sendv_lent(pf_ws *ws, uint64_t conn, const struct iovec *parts, int n,
                           const unsigned char *lend);

/* As pf_ws_sendv_lent, the message being the parts and then their tag as t computes it (t
 * NULL: none), as pf_ws_sendv_tagged. A server digests the parts a chunk ahead of what the
 * socket is offered, so the digest runs while the socket takes the bytes before it rather
 * than in a pass before the first goes out; when the socket stops taking them it digests
 * the rest at once (the tag is in the message's own memory from then on: t is not called
 * after this returns). Errors also: PF_ERR_INVALID (t incomplete, or its tag too long). */
pf_status pf_ws_sendv_lent_tagged(pf_ws *ws, uint64_t conn, const struct iovec *parts, int n,
                                  const unsigned char *lend, const pf_ws_tagger *t);

/* Copies the unwritten rest of every lent message into the endpoint's own memory: after
 * it returns, the lent parts may change. Service thread. PF_ERR_NOMEM when a copy cannot
 * be made: that message is dropped and its connection closed. */
pf_status pf_ws_settle(pf_ws *ws);

/* Receives the next data message on conn in place: if it is one frame of exactly len bytes,
 * its bytes [places[i].pos, + places[i].len) are read from the socket straight into
 * places[i].dst and the rest into the connection's buffer as usual; on_message then sees
 * those ranges missing from `data` and pf_ws_message_places() returns the places. Any other
 * next message is received as usual. The expectation holds for that one message (len 0
 * clears it); places must be in order and not overlap, and the destinations must stay
 * writable, and untouched by anyone else, until that message has been delivered or the
 * connection has closed. Errors: PF_ERR_INVALID (places out of order or past len),
 * PF_ERR_NOT_FOUND, PF_ERR_NOMEM. Any thread. */
pf_status pf_ws_expect(pf_ws *ws, uint64_t conn, size_t len, const pf_ws_place *places, int n);

/* A handler of the bytes of conn's data messages as they arrive (pf_ws_set_on_bytes):
 * data[0 .. n) are the bytes at [pos, pos + n) of the message being received, after
 * unmasking, where they now lie (the connection's buffer, or a place of pf_ws_expect).
 * Every byte of a message is shown once, in order, pos from 0, before on_message delivers
 * it; a message whose connection closes first is never delivered. `data` is borrowed for the
 * call and must not be changed. Service thread. */
typedef void (*pf_ws_bytes_fn)(pf_ws *ws, uint64_t conn, void *conn_user, size_t pos,
                               const uint8_t *data, size_t n, void *user);

/* Shows the data messages of conn to fn as they arrive, from the next one whose first frame
 * comes after this call (NULL: none from then on): the owner can digest a message - check
 * its integrity tag - in the same pass that receives it, while its bytes are in cache,
 * instead of a second pass once it is whole. Unknown ids are ignored. Any thread. */
void pf_ws_set_on_bytes(pf_ws *ws, uint64_t conn, pf_ws_bytes_fn fn);

/* In on_message: the places the message was received in (see pf_ws_expect), *n of them,
 * borrowed for the call; NULL (and *n 0) when it was received whole into `data`. */
const pf_ws_place *pf_ws_message_places(const pf_ws *ws, int *n);

/* Server: marks conn trusted (see pf_ws_options): it moves from the untrusted slots to the
 * trusted ones, its messages may be up to max_message bytes and the idle timeout no longer
 * applies; when max_connections trusted connections are open already it is closed instead
 * (logged). Unknown ids are ignored. Any thread; on the service thread (a handler) it takes
 * effect before it returns, from another thread soon after. */
void pf_ws_trust(pf_ws *ws, uint64_t conn);

/* Server: new limits for connections open at once and bytes of incomplete messages
 * (pf_ws_options; 0 keeps a value). Connections and messages already past a lowered limit
 * are kept; only new ones are refused. The owner's limits may follow what it serves (a ps:
 * its job's membership). Any thread. */
void pf_ws_set_limits(pf_ws *ws, int max_connections, size_t max_buffered);

/* Sets the conn_user passed to handlers for a server connection (service thread only, e.g.
 * from on_open). */
void pf_ws_set_conn_user(pf_ws *ws, uint64_t conn, void *conn_user);

/* --- query ----------------------------------------------------------------------------- */

/* The port a server listens on. */
int pf_ws_port(const pf_ws *ws);

#endif
