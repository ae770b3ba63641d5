/* ws_handshake.h - the WebSocket opening handshake (RFC 6455 section 4) as text in, text out,
 * for ws.c (private to common/dataplane/): the client's upgrade request, the server's answer
 * to it, and the client's check of that answer. Nothing here touches a socket.
 */
#ifndef PSFLOW_DATAPLANE_WS_HANDSHAKE_H
#define PSFLOW_DATAPLANE_WS_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#define WS_PROTOCOL_NAME "psflow-v1"
#define WS_KEY_SIZE      32 /* a Sec-WebSocket-Key (24 characters) and its NUL */

/* Client: the Sec-WebSocket-Key for 16 random bytes (base64) into key, and the upgrade
 * request for host:port with it into out[cap]. Returns the request's length, or -1 when
 * it does not fit. */
int ws_handshake_request(const uint8_t nonce[16], const char *host, int port, char key[WS_KEY_SIZE],
                         char *out, size_t cap);

/* Server: the answer to an upgrade request (its text through the blank line, NUL-
 * terminated) into out[cap]: "101 Switching Protocols" with the Sec-WebSocket-Accept for its
 * key when it is a WebSocket upgrade (*ok = 1), else "400 Bad Request" (*ok = 0). Returns
 * the answer's length, or -1 when it does not fit. */
int ws_handshake_answer(const char *request, char *out, size_t cap, int *ok);

/* Client: whether the server's answer (through the blank line, NUL-terminated) accepts the
 * upgrade sent with key: status 101 and the Sec-WebSocket-Accept that key calls for. */
int ws_handshake_accepted(const char *answer, const char *key);

#endif
