/* ws.h - message-oriented WebSocket endpoints for the data plane (libwebsockets inside).
 *
 * One pf_ws is one libwebsockets context with its own service thread: a server listening
 * on a port, or a client that opens connections to servers. Handlers run on the service
 * thread and must not block for long. A message is one WebSocket binary message, sent in
 * fragments of at most PF_WS_CHUNK bytes and reassembled on receipt into a buffer that is
 * reused for every message of that connection (grown geometrically, never shrunk, capped
 * at max_message bytes: a longer message closes the connection).
 *
 * Sending is zero-copy: the caller owns a buffer with pf_ws_headroom() bytes free before
 * the message's first byte, hands it to pf_ws_send() and gets it back through the
 * `sent` callback once every byte has been written or the connection closed. The
 * transport writes frame headers into the headroom and, on a client, masks the payload in
 * place, so the buffer's contents are scratch after sending.
 *
 * Connections are named by a 64-bit id that is never reused, so a send to a connection
 * that has meanwhile closed fails cleanly instead of touching freed memory. pf_ws_send
 * and pf_ws_close may be called from any thread.
 */
#ifndef PSFLOW_WS_H
#define PSFLOW_WS_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/status.h"

#define PF_WS_CHUNK (1u << 20) /* fragment size on the wire */

typedef struct pf_ws pf_ws;

typedef struct pf_ws_handlers {
    /* A connection is up (server: accepted; client: handshake done). */
    void (*on_open)(pf_ws *ws, uint64_t conn, void *conn_user, void *user);
    /* A whole message arrived. `data` is valid only during the call. */
    void (*on_message)(pf_ws *ws, uint64_t conn, void *conn_user, const uint8_t *data, size_t len,
                       void *user);
    /* The connection closed or (client) could not be established. Called once per
     * connection, after which the id is dead. */
    void (*on_close)(pf_ws *ws, uint64_t conn, void *conn_user, void *user);
    /* A buffer given to pf_ws_send is free again (sent, or dropped on close). May be
     * NULL. `ok` is 0 when the message was dropped. */
    void (*sent)(pf_ws *ws, uint64_t conn, void *buf, int ok, void *user);
} pf_ws_handlers;

/* Bytes of headroom a send buffer needs before the message (LWS_PRE). */
size_t pf_ws_headroom(void);

/* Starts a server on iface:port (iface NULL or "0.0.0.0" = all; port 0 = ephemeral, see
 * pf_ws_port). Errors: PF_ERR_IO (cannot listen; message names the address). */
pf_status pf_ws_server_create(const char *iface, int port, size_t max_message,
                              const pf_ws_handlers *h, void *user, pf_ws **out, pf_error *err);

/* Starts a client endpoint with no connections yet. */
pf_status pf_ws_client_create(size_t max_message, const pf_ws_handlers *h, void *user, pf_ws **out,
                              pf_error *err);

/* Stops the service thread, closes every connection (calling on_close and sent for what
 * is pending) and frees everything. */
void pf_ws_destroy(pf_ws *ws);

/* The port a server listens on. */
int pf_ws_port(const pf_ws *ws);

/* Client: starts connecting to host:port; returns the new connection's id in *conn.
 * on_open or on_close follows on the service thread. conn_user is passed to handlers. */
pf_status pf_ws_connect(pf_ws *ws, const char *host, int port, void *conn_user, uint64_t *conn);

/* Queues buf[headroom .. headroom + len) for sending on conn. Returns PF_ERR_NOT_FOUND if
 * the connection is closed (then `sent` is NOT called and the caller keeps buf). */
pf_status pf_ws_send(pf_ws *ws, uint64_t conn, void *buf, size_t len);

/* Closes a connection (asynchronously; on_close follows). Unknown ids are ignored. */
void pf_ws_close(pf_ws *ws, uint64_t conn);

#endif
