/* ws_handshake.c - the WebSocket opening handshake (see ws_handshake.h). SHA-1 and base64
 * come from libwebsockets, which the data plane links anyway. */
#include "ws_handshake.h"

#include <libwebsockets.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 section 4.2.2): base64 of the SHA-1
 * of the key and the protocol's GUID. A key longer than any client sends gives "", which
 * matches no answer. */
static void accept_key(const char *key, char out[32]) {
    char buf[128];
    unsigned char digest[20];
    int n = snprintf(buf, sizeof buf, "%s%s", key, WS_GUID);
    out[0] = '\0';
    if (n > 0 && (size_t)n < sizeof buf && strlen(key) <= 60) {
        lws_SHA1((const unsigned char *)buf, (size_t)n, digest);
        if (lws_b64_encode_string((const char *)digest, 20, out, 32) < 0)
            out[0] = '\0';
    }
}

/* Finds a header's value in an HTTP message (case-insensitive name); copies it. */
static int header_value(const char *http, const char *name, char *out, size_t len) {
    size_t nl = strlen(name);
    for (const char *p = strstr(http, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (!strncasecmp(line, name, nl) && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t n = e ? (size_t)(e - v) : strlen(v);
            while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
                n--;
            if (n >= len)
                return -1;
            memcpy(out, v, n);
            out[n] = '\0';
            return 0;
        }
    }
    return -1;
}

int ws_handshake_request(const uint8_t nonce[16], const char *host, int port, char key[WS_KEY_SIZE],
                         char *out, size_t cap) {
    if (lws_b64_encode_string((const char *)nonce, 16, key, WS_KEY_SIZE) < 0)
        return -1;
    int n = snprintf(out, cap,
                     "GET / HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                     "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: " WS_PROTOCOL_NAME
                     "\r\n\r\n",
                     host, port, key);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

int ws_handshake_answer(const char *request, char *out, size_t cap, int *ok) {
    char key[64], value[64];
    *ok = strncmp(request, "GET ", 4) == 0 &&
          !header_value(request, "Upgrade", value, sizeof value) &&
          strcasecmp(value, "websocket") == 0 &&
          !header_value(request, "Sec-WebSocket-Key", key, sizeof key);
    int n;
    if (*ok) {
        char acc[32];
        accept_key(key, acc);
        n = snprintf(out, cap,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n"
                     "Sec-WebSocket-Protocol: " WS_PROTOCOL_NAME "\r\n\r\n",
                     acc);
    } else {
        n = snprintf(out, cap,
                     "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"
                     "Content-Length: 0\r\n\r\n");
    }
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

int ws_handshake_accepted(const char *answer, const char *key) {
    char acc[32], value[64];
    accept_key(key, acc);
    return strncmp(answer, "HTTP/1.1 101", 12) == 0 &&
           !header_value(answer, "Sec-WebSocket-Accept", value, sizeof value) && acc[0] &&
           strcmp(value, acc) == 0;
}
