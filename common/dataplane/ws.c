/* ws.c - message-oriented WebSocket endpoints (see ws.h): RFC 6455 framing done here, on
 * raw sockets that libwebsockets drives.
 *
 * DESIGN: libwebsockets owns the sockets and the event loop (raw-socket role: accept,
 * connect, readable/writeable callbacks); this file speaks WebSocket on top: the HTTP/1.1
 * upgrade handshake (whose text ws_handshake.c writes and checks), then one binary frame
 * per message. Received bytes are parsed in
 * blocks - frame headers byte by byte, payload with one memcpy and an 8-bytes-at-a-time
 * unmask - because a byte-at-a-time payload parser (libwebsockets 4.1's own client path)
 * caps the data plane at a fraction of what TCP carries. The frame header is written into
 * the headroom in front of a pooled message buffer. A message sent while its connection
 * has nothing else to write goes straight to the socket from the sender's thread (no loop
 * wake-up on a request/reply round trip): a server writes it with one gathering sendmsg()
 * from wherever its pieces lie (a ps's shards), a client masks it into the buffer a chunk
 * at a time and sends each chunk while it is in cache (digesting it first when the message
 * ends in a tag: pf_ws_sendv_tagged). Otherwise, and for what the socket
 * did not take (copied into the buffer before the sender returns), the loop writes it in
 * pieces of at most PF_WS_CHUNK bytes, one lws_write() per WRITEABLE callback. A lent
 * message (pf_ws_sendv_lent, a server's handler) keeps a list of its pieces instead of
 * their copy; the loop writes them from where they lie until pf_ws_settle() replaces what
 * is left of it by a copy.
 * libwebsockets reads up to RX_CHUNK bytes per readable event; the rest of an incoming
 * data frame is read from the socket straight into the message buffer (or where
 * pf_ws_expect placed it), DIRECT_READ_MAX bytes a read, and unmasked there while still
 * in cache; a connection's byte handler (pf_ws_set_on_bytes: its owner's integrity tag)
 * sees each piece right there too, so no second pass over a message is needed.
 *
 * Threads: everything that touches a wsi runs on the service thread. Other threads edit
 * the connection table under `lock` (queue a message, ask for a connect or a close) and
 * wake the loop with lws_cancel_service(); the loop acts on those requests in
 * LWS_CALLBACK_EVENT_WAIT_CANCELLED. The one exception is a direct send: under `lock` a
 * sender claims an idle, open connection (`direct`), then writes to its socket with the
 * lock released; meanwhile the loop writes nothing on it, and a closing connection waits
 * for the claim to end before libwebsockets closes the socket. Connection structs are
 * freed only on the service thread and are looked up by id, never held across threads.
 * The connection table (ws_internal.h) is shared with the files below this one, each calling
 * only those below it: ws_send.c (the sending half), ws_tls.c (client TLS) and ws_log.c (the
 * refusal log).
 *
 * Limits (pf_ws_options): a server admits its connections in two classes, untrusted from
 * accept and trusted once its owner calls pf_ws_trust(), each with its own slots and bytes
 * of incomplete messages (ws_admit.c: a newcomer takes the place of the untrusted connection
 * stalled longest when there is no room, so strangers cannot keep the owner's peers
 * out). Each connection gets a libwebsockets timer for its handshake and idle deadlines,
 * which stops mattering once it is trusted; a dropped one is closed by the same timer.
 * Frame headers are checked before anything is reserved: an untrusted connection's message
 * is small, and every data frame is charged, as its header announces it, against its
 * class's bytes of incomplete messages, and discharged when its message is delivered or its
 * connection closes; the owner may move the trusted limits while it runs
 * (pf_ws_set_limits). The handshake's bytes are checked as they come, so
 * garbage is answered 400 at once rather than when 8 KiB have arrived.
 *
 * TLS: the direct paths above write and read the socket itself, which TLS cannot allow, so
 * with TLS a connection never gets its fd (c->fd stays -1): no direct sends, no direct
 * reads, every byte through the loop. A server uses libwebsockets' TLS on the raw sockets it
 * accepts (its reads and lws_write() then carry plaintext). A client cannot: libwebsockets
 * 4.1 starts a raw client's TLS handshake before its socket exists. So a client dials plain
 * TCP and runs OpenSSL itself over memory BIOs (ws_tls.c): what libwebsockets reads is
 * ciphertext, decrypted before the handshake text and frames are parsed, and what the loop
 * writes is encrypted first. Plain TCP keeps every fast path; TLS pays a copy per byte and
 * the loop's wake-ups.
 */
#include "psflow/ws.h"

#include <libwebsockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "psflow/buf.h"
#include "psflow/clock.h"
#include "psflow/mem.h"
#include "psflow/rng.h"
#include "ws_internal.h"

static conn *new_conn_locked(pf_ws *ws, void *user) {
    conn *c = pf_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->id = ++ws->next_id;
    c->user = user;
    c->fd = -1;
    pf_buf_init(&c->rx, ws->max_message);
    pf_rng_init(&c->rng, pf_rng_next(&ws->rng), c->id);
    c->next = ws->conns;
    ws->conns = c;
    return c;
}

/* Removes c from the table, drops its queue and delivers on_close. Loop thread only. */
static void finish(pf_ws *ws, conn *c) {
    if (c->finished)
        return;
    c->finished = 1;
    pthread_mutex_lock(&ws->lock);
    c->fd = -1; /* no new direct send; wait for one in progress before the socket closes */
    /* A direct send never blocks (MSG_DONTWAIT): the wait is as long as copying what the
     * socket did not take. Said every 5 s all the same, should it ever last. */
    for (double start = pf_clock_now(); c->direct;) {
        struct timespec ts = pf_clock_deadline(5.0);
        if (pthread_cond_timedwait(&ws->direct_done, &ws->lock, &ts) != 0 && c->direct)
            fprintf(stderr,
                    "psflow data plane: connection %llu closing, still waiting after %.0f s "
                    "for a send in progress on it to end\n",
                    (unsigned long long)c->id, pf_clock_now() - start);
    }
    for (conn **p = &ws->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    out_msg *q = c->head;
    c->head = c->tail = NULL;
    pthread_mutex_unlock(&ws->lock);
    if (c->server)
        ws_admit_leave(ws, c);
    if (c->ssl)
        ws_tls_conn_free(c);
    while (q) {
        out_msg *next = q->next;
        ws_release(ws, q);
        q = next;
    }
    if (ws->h.on_close)
        ws->h.on_close(ws, c->id, c->user, ws->user);
    pf_buf_deinit(&c->rx);
    pf_free(c->expect);
    pf_free(c->place);
    pf_free(c);
}

/* --- receiving ------------------------------------------------------------------------------ */

static int rx_reserve(pf_ws *ws, conn *c, uint64_t extra) {
    pf_status st = extra > SIZE_MAX ? PF_ERR_RANGE : pf_buf_reserve(&c->rx, (size_t)extra);
    if (st == PF_ERR_RANGE)
        lwsl_warn("psflow: closing connection %llu: message over %zu bytes\n",
                  (unsigned long long)c->id, ws->max_message);
    return st == PF_OK ? 0 : -1;
}

static void deliver(pf_ws *ws, conn *c) {
    static const uint32_t empty[1]; /* data for an empty first message: never NULL */
    size_t n = c->rx.len;
    pf_buf_reset(&c->rx);
    c->in_message = 0;
    if (c->server) {
        ws_admit_discharge(ws, c);
        if (!c->delivered)
            ws_admit_progress(c);
        c->delivered = 1;
    }
    ws->placed = c->placing ? c->place : NULL;
    ws->placed_n = c->placing ? c->place_n : 0;
    c->placing = 0;
    if (ws->h.on_message)
        ws->h.on_message(ws, c->id, c->user, c->rx.data ? c->rx.data : (const uint8_t *)empty, n,
                         ws->user);
    ws->placed = NULL;
    ws->placed_n = 0;
}

/* A data frame begins a message: it is received in place if it is the one expected, and
 * its bytes are shown to the byte handler set now (pf_ws_set_on_bytes). */
static void take_expectation(pf_ws *ws, conn *c, uint64_t len, int whole) {
    pthread_mutex_lock(&ws->lock);
    c->bytes_now = c->on_bytes;
    if (c->expect_len && whole && len == c->expect_len) {
        pf_ws_place *p = c->place;
        int cap = c->place_cap;
        c->place = c->expect;
        c->place_cap = c->expect_cap;
        c->place_n = c->expect_n;
        c->expect = p;
        c->expect_cap = cap;
        c->place_i = 0;
        c->placing = 1;
    }
    c->expect_len = 0; /* it was for this message, whichever it is */
    c->expect_n = 0;
    pthread_mutex_unlock(&ws->lock);
}

/* Where the message byte at pos goes, and how many bytes from there go to the same place
 * (*room): a place of the expected message, or the connection's buffer. */
static uint8_t *rx_dest(conn *c, size_t pos, size_t *room) {
    *room = SIZE_MAX;
    if (!c->placing)
        return c->rx.data + pos;
    while (c->place_i < c->place_n && c->place[c->place_i].pos + c->place[c->place_i].len <= pos)
        c->place_i++;
    if (c->place_i == c->place_n)
        return c->rx.data + pos;
    const pf_ws_place *p = &c->place[c->place_i];
    if (pos >= p->pos) {
        *room = p->pos + p->len - pos;
        return (uint8_t *)p->dst + (pos - p->pos);
    }
    *room = p->pos - pos;
    return c->rx.data + pos;
}

/* Parses a frame header once enough bytes are in c->hdr; returns the header's length when
 * complete, 0 when more bytes are needed, -1 on a protocol error. */
static int parse_header(pf_ws *ws, conn *c) {
    if (c->hdr_len < 2)
        return 0;
    int masked = c->hdr[1] & 0x80;
    int len7 = c->hdr[1] & 0x7f;
    size_t need = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + (masked ? 4 : 0);
    if (c->hdr_len < need)
        return 0;
    if (c->hdr[0] & 0x70)
        return -1; /* no extensions were negotiated */
    /* Clients mask, servers do not (RFC 6455 5.1). */
    if ((c->server && !masked) || (!c->server && masked))
        return -1;
    uint64_t len = (uint64_t)len7;
    size_t p = 2;
    if (len7 == 126) {
        len = (uint64_t)c->hdr[2] << 8 | c->hdr[3];
        p = 4;
    } else if (len7 == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | c->hdr[2 + i];
        p = 10;
    }
    if (masked)
        memcpy(c->frame_mask, c->hdr + p, 4);
    c->frame_masked = masked != 0;
    c->frame_fin = (c->hdr[0] & 0x80) != 0;
    c->frame_opcode = c->hdr[0] & 0x0f;
    c->frame_left = len;
    c->frame_done = 0;
    int control = c->frame_opcode & 0x08;
    if (control && (len > 125 || !c->frame_fin))
        return -1;
    if (!control) {
        int continuation = c->frame_opcode == 0;
        if (c->frame_opcode != 0 && c->frame_opcode != 2) {
            lwsl_warn("psflow: closing connection %llu: only binary frames are accepted\n",
                      (unsigned long long)c->id);
            return -1;
        }
        if (continuation != c->in_message)
            return -1;
        if (!continuation)
            take_expectation(ws, c, len, c->frame_fin);
        c->in_message = 1;
        if (c->server && ws_admit_charge(ws, c, len) != 0)
            return -1;
        if (rx_reserve(ws, c, len) != 0)
            return -1;
    }
    return (int)need;
}

/* A control frame's payload is complete. Returns -1 to close. */
static int on_control(pf_ws *ws, conn *c) {
    size_t n = (size_t)c->frame_done;
    if (c->frame_opcode == 0x8)
        return -1;                /* close */
    if (c->frame_opcode == 0x9) { /* ping: answer with a pong carrying the same data */
        uint8_t f[2 + 4 + 125];
        size_t k = 0;
        f[k++] = 0x8a;
        f[k++] = (uint8_t)((c->server ? 0 : 0x80) | n);
        if (!c->server) { /* a client masks; a zero mask keeps the payload as it is */
            memset(f + k, 0, 4);
            k += 4;
        }
        memcpy(f + k, c->control, n);
        return ws_queue_raw(ws, c, f, k + n);
    }
    return 0; /* pong */
}

/* Completes a frame whose payload is all in: back to headers, and a control frame acted
 * on or a finished message delivered. Returns -1 to close. */
static int frame_done(pf_ws *ws, conn *c) {
    c->state = ST_HEADER;
    if (c->frame_opcode & 0x08)
        return on_control(ws, c);
    if (c->frame_fin)
        deliver(ws, c);
    return 0;
}

/* The rest of a data frame that libwebsockets' read did not hold, read from the socket
 * straight into the message buffer (and unmasked there): one copy less per byte, and no
 * wait for the next readable event when the rest is already there. Reads what the socket
 * holds now; libwebsockets, which reads only when poll() says so, sees the remainder (or
 * the end of the stream) on its next turn. */
#define DIRECT_READ_MAX (1u << 20)

static int read_direct(pf_ws *ws, conn *c) {
    int fd = c->fd; /* set when the handshake completed; changed only on this thread */
    while (fd >= 0 && !c->dropped && c->state == ST_PAYLOAD && !(c->frame_opcode & 0x08) &&
           c->frame_left > 0) {
        size_t room;
        uint8_t *dst = rx_dest(c, c->rx.len, &room);
        size_t want = c->frame_left > DIRECT_READ_MAX ? DIRECT_READ_MAX : (size_t)c->frame_left;
        want = want < room ? want : room;
        ssize_t k = recv(fd, dst, want, MSG_DONTWAIT);
        if (k <= 0)
            return 0; /* nothing more now; an error or the end shows up on lws' next read */
        size_t n = (size_t)k;
        if (c->frame_masked)
            ws_apply_mask(dst, n, c->frame_mask, c->frame_done);
        if (c->bytes_now) /* while they are in cache */
            c->bytes_now(ws, c->id, c->user, c->rx.len, dst, n, ws->user);
        c->rx.len += n;
        c->frame_done += n;
        c->frame_left -= n;
        if (c->frame_left == 0)
            return frame_done(ws, c);
    }
    return 0;
}

static int on_frames(pf_ws *ws, conn *c, const uint8_t *in, size_t len) {
    while (len > 0) {
        if (c->dropped)
            return -1; /* by its own message's handler (ws_admit_promote) */
        if (c->state == ST_HEADER) {
            size_t take = sizeof c->hdr - c->hdr_len < len ? sizeof c->hdr - c->hdr_len : len;
            /* Copy conservatively, then give back what belongs to the payload. */
            memcpy(c->hdr + c->hdr_len, in, take);
            size_t before = c->hdr_len;
            c->hdr_len += take;
            int r = parse_header(ws, c);
            if (r < 0)
                return -1;
            if (r == 0) {
                in += take;
                len -= take;
                continue;
            }
            size_t used = (size_t)r - before;
            in += used;
            len -= used;
            c->hdr_len = 0;
            c->state = ST_PAYLOAD;
        }
        /* ST_PAYLOAD: in pieces that each go to one place */
        size_t n = c->frame_left < len ? (size_t)c->frame_left : len;
        int control = c->frame_opcode & 0x08;
        for (size_t done = 0; done < n;) {
            size_t room = SIZE_MAX;
            uint8_t *dst = control ? c->control + c->frame_done : rx_dest(c, c->rx.len, &room);
            size_t take = n - done < room ? n - done : room;
            if (c->frame_masked)
                ws_copy_unmask(dst, in + done, take, c->frame_mask, c->frame_done);
            else
                memcpy(dst, in + done, take);
            if (!control && c->bytes_now)
                c->bytes_now(ws, c->id, c->user, c->rx.len, dst, take, ws->user);
            if (!control)
                c->rx.len += take;
            c->frame_done += take;
            done += take;
        }
        c->frame_left -= n;
        in += n;
        len -= n;
        if (c->frame_left == 0 && frame_done(ws, c) != 0)
            return -1;
    }
    return read_direct(ws, c);
}

static void opened(pf_ws *ws, conn *c) {
    c->state = ST_HEADER;
    if (c->server)
        ws_admit_progress(c);
    pthread_mutex_lock(&ws->lock);
    c->open = 1;
    c->fd = ws->tls ? -1 : (int)lws_get_socket_fd(c->wsi); /* TLS: no direct socket I/O */
    pthread_mutex_unlock(&ws->lock);
    if (ws->h.on_open)
        ws->h.on_open(ws, c->id, c->user, ws->user);
    pthread_mutex_lock(&ws->lock);
    int pending = c->head != NULL;
    pthread_mutex_unlock(&ws->lock);
    if (pending)
        lws_callback_on_writable(c->wsi);
}

/* Server: answers a request that is not a WebSocket upgrade with 400 and closes once the
 * answer is written; whatever else comes in is dropped. */
static int refuse_http(pf_ws *ws, conn *c) {
    static const char answer[] = "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"
                                 "Content-Length: 0\r\n\r\n";
    ws_refused(ws, REF_GARBAGE, "closed connection %llu: not a WebSocket upgrade request (400)",
               (unsigned long long)c->id);
    c->state = ST_REFUSED;
    if (ws_queue_raw(ws, c, answer, sizeof answer - 1) != 0)
        return -1;
    pthread_mutex_lock(&ws->lock);
    c->want_close = 1; /* after the answer is written */
    pthread_mutex_unlock(&ws->lock);
    return 0;
}

/* Handshake bytes. Returns -1 to close; leftover bytes after the handshake are frames. */
static int on_http(pf_ws *ws, conn *c, const uint8_t *in, size_t len) {
    size_t before = c->http_len;
    if (c->server && before == 0 && len > 0)
        ws_admit_progress(c); /* its handshake began */
    size_t take = MAX_HTTP - 1 - c->http_len < len ? MAX_HTTP - 1 - c->http_len : len;
    memcpy(c->http + c->http_len, in, take);
    c->http_len += take;
    c->http[c->http_len] = '\0';
    char *end = strstr(c->http, "\r\n\r\n");
    if (c->server) {
        /* Not an HTTP request (NUL bytes, or not "GET "), or none that fits: 400, close. */
        size_t head = end ? (size_t)(end + 4 - c->http) : c->http_len;
        size_t prefix = c->http_len < 4 ? c->http_len : 4;
        if (memchr(c->http, '\0', head) || memcmp(c->http, "GET ", prefix) != 0 ||
            (!end && c->http_len >= MAX_HTTP - 1))
            return refuse_http(ws, c);
    }
    if (!end)
        return c->http_len >= MAX_HTTP - 1 ? -1 : 0;
    /* Bytes of `in` that belong to the handshake; the rest are frames already. */
    size_t consumed = (size_t)(end + 4 - c->http) - before;
    size_t leftover = len - consumed;
    const uint8_t *rest = in + consumed;
    end[4] = '\0'; /* the handshake's text alone */
    if (c->server) {
        char resp[256];
        int ok, n = ws_handshake_answer(c->http, resp, sizeof resp, &ok);
        if (!ok)
            return refuse_http(ws, c);
        if (n < 0 || ws_queue_raw(ws, c, resp, (size_t)n) != 0)
            return -1;
    } else {
        if (!ws_handshake_accepted(c->http, c->key)) {
            lwsl_warn("psflow: connection %llu: the server refused the WebSocket upgrade\n",
                      (unsigned long long)c->id);
            return -1;
        }
    }
    opened(ws, c);
    return leftover ? on_frames(ws, c, rest, leftover) : 0;
}

/* --- the loop ------------------------------------------------------------------------------- */

static void start_connect(pf_ws *ws, conn *c) {
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = ws->ctx;
    ci.address = c->host;
    ci.port = c->port;
    ci.method = "RAW";
    ci.local_protocol_name = WS_PROTOCOL_NAME;
    ci.opaque_user_data = c;
    /* A synchronous failure may already have finished (freed) c: look it up again. */
    uint64_t id = c->id;
    struct lws *wsi = lws_client_connect_via_info(&ci);
    pthread_mutex_lock(&ws->lock);
    conn *still = find_locked(ws, id);
    if (still && wsi)
        still->wsi = wsi;
    pthread_mutex_unlock(&ws->lock);
    if (still && !wsi)
        finish(ws, still);
}

static void handle_requests(pf_ws *ws) {
    enum { MAX_BATCH = 256 };
    conn *todo[MAX_BATCH];
    int kind[MAX_BATCH], n = 0;
    pthread_mutex_lock(&ws->lock);
    for (conn *c = ws->conns; c && n < MAX_BATCH; c = c->next) {
        if (c->want_connect) {
            c->want_connect = 0;
            todo[n] = c;
            kind[n++] = 0;
        } else if (c->want_trust) {
            c->want_trust = 0;
            todo[n] = c;
            kind[n++] = 2;
        } else if (c->wsi && (c->want_close || c->head)) {
            todo[n] = c;
            kind[n++] = 1;
        }
    }
    int more = n == MAX_BATCH;
    pthread_mutex_unlock(&ws->lock);
    for (int i = 0; i < n; i++) {
        if (kind[i] == 0)
            start_connect(ws, todo[i]);
        else if (kind[i] == 2)
            ws_admit_promote(ws, todo[i]);
        else
            lws_callback_on_writable(todo[i]->wsi);
    }
    if (more)
        lws_cancel_service(ws->ctx);
}

/* Socket buffer sizes asked of the kernel, which doubles them for its bookkeeping.
 *
 * The receive buffer is large, so a sender is never held back by the window on a fast
 * link. The send buffer is small on purpose: a large message then goes out at the pace
 * the peer reads it - what the socket does not take is finished by this endpoint's loop
 * (a client masks it first, so masking overlaps sending) - and only 768 KiB or so is in
 * flight, which the receiving side copies while it is still in cache. bench/RESULTS.md has
 * the measurements behind the size (larger buffers made large pushes after large replies
 * slower), and plain TCP's, which gains nothing from it. */
#define SEND_BUFFER    (384 << 10)
#define RECEIVE_BUFFER (4 << 20)

/* Small messages go out at once (no Nagle delay on request/reply traffic) and large ones
 * in few system calls: the data plane is latency-bound for small tensors and
 * copy-bound for large ones. */
static void tune_socket(struct lws *wsi) {
    int fd = (int)lws_get_socket_fd(wsi), one = 1, send = SEND_BUFFER, receive = RECEIVE_BUFFER;
    if (fd < 0)
        return;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &send, sizeof send);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive, sizeof receive);
}

/* Client: the TCP connection (or TLS over it) is up; sends the upgrade request ahead of
 * anything else. Returns -1 to close. */
static int send_upgrade(pf_ws *ws, conn *c) {
    uint8_t nonce[16];
    for (int i = 0; i < 16; i += 8) {
        uint64_t r = pf_rng_next(&c->rng);
        memcpy(nonce + i, &r, 8);
    }
    char req[512];
    int n = ws_handshake_request(nonce, c->host, c->port, c->key, req, sizeof req);
    if (n < 0)
        return -1;
    /* The request goes first, ahead of any message queued before the connection was up. */
    uint8_t *b = ws_take_buffer(ws, (size_t)n);
    if (!b)
        return -1;
    memcpy(b, req, (size_t)n);
    out_msg *m = msg_of(b);
    m->len = (size_t)n;
    m->raw = 1;
    pthread_mutex_lock(&ws->lock);
    m->next = c->head;
    c->head = m;
    if (!c->tail)
        c->tail = m;
    pthread_mutex_unlock(&ws->lock);
    lws_callback_on_writable(c->wsi);
    return 0;
}

/* Microseconds from now to c's next deadline: the handshake's while it is not done, and
 * the idle timeout's. */
static lws_usec_t next_deadline(pf_ws *ws, conn *c) {
    double t = ws->o.idle_timeout;
    if (!c->open && ws->o.handshake_timeout < t)
        t = ws->o.handshake_timeout;
    double at = c->accepted + t;
    double left = at - pf_clock_now();
    return left <= 0 ? 1 : (lws_usec_t)(left * 1e6) + 1;
}

/* The timer of a server connection: closes it when it was dropped (ws_admit.c) or (logged)
 * when it is past a deadline, otherwise waits for the next one; a trusted connection has
 * none. */
static int on_deadline(pf_ws *ws, conn *c) {
    if (c->dropped)
        return -1;
    if (c->cls == CLS_TRUSTED)
        return 0;
    double age = pf_clock_now() - c->accepted;
    if (!c->open && age >= ws->o.handshake_timeout) {
        ws_refused(ws, REF_HANDSHAKE_TIMEOUT,
                   "closed connection %llu: no WebSocket upgrade within %g s (handshake timeout)",
                   (unsigned long long)c->id, ws->o.handshake_timeout);
        return -1;
    }
    if (age >= ws->o.idle_timeout) {
        ws_refused(ws, REF_IDLE_TIMEOUT,
                   "closed connection %llu: no HELLO accepted within %g s (idle timeout)",
                   (unsigned long long)c->id, ws->o.idle_timeout);
        return -1;
    }
    lws_set_timer_usecs(c->wsi, next_deadline(ws, c));
    return 0;
}

/* A server's new connection: admitted as untrusted (ws_admit.c), or refused (-1). */
static int on_accept(pf_ws *ws, struct lws *wsi) {
    uint8_t addr[16];
    int addr_len = ws_admit_peer_address(wsi, addr);
    if (ws_admit_room(ws, addr, addr_len) != 0)
        return -1;
    pthread_mutex_lock(&ws->lock);
    conn *c = new_conn_locked(ws, NULL);
    pthread_mutex_unlock(&ws->lock);
    if (!c)
        return -1;
    c->wsi = wsi;
    c->server = 1;
    c->state = ST_HTTP;
    c->accepted = pf_clock_now();
    ws_admit_progress(c);
    ws_admit_enter(ws, c, addr, addr_len);
    lws_set_opaque_user_data(wsi, c);
    tune_socket(wsi);
    lws_set_timer_usecs(wsi, next_deadline(ws, c));
    return 0;
}

/* Received bytes (plaintext) of a connection: handshake or frames. Returns -1 to close. */
static int on_plain(pf_ws *ws, conn *c, const uint8_t *in, size_t len) {
    if (c->state == ST_HTTP)
        return on_http(ws, c, in, len);
    if (c->state == ST_REFUSED)
        return 0;
    return on_frames(ws, c, in, len);
}

/* Client TLS: ciphertext read from c's socket. Once the TLS handshake is done, the
 * WebSocket upgrade goes out; then what it decrypts to is parsed, RX_CHUNK bytes at a
 * time. Returns -1 to close. */
static int on_ciphertext(pf_ws *ws, conn *c, const uint8_t *in, size_t len) {
    int was_ready = c->tls_ready;
    if (ws_tls_rx(ws, c, in, len) != 0)
        return -1;
    if (!c->tls_ready)
        return 0;
    if (!was_ready && send_upgrade(ws, c) != 0)
        return -1;
    for (;;) {
        int n = ws_tls_read(ws, c, ws->tls_rx, RX_CHUNK);
        if (n <= 0)
            return n;
        if (on_plain(ws, c, ws->tls_rx, (size_t)n) != 0)
            return -1;
    }
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len) {
    struct lws_context *ctx = lws_get_context(wsi);
    pf_ws *ws = ctx ? lws_context_user(ctx) : NULL;
    conn *c = lws_get_opaque_user_data(wsi);
    (void)user;
    switch (reason) {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (ws)
            handle_requests(ws);
        if (ws && ws->h.on_wake && __atomic_exchange_n(&ws->wake, 0, __ATOMIC_ACQ_REL))
            ws->h.on_wake(ws, ws->user);
        return 0;
    case LWS_CALLBACK_RAW_ADOPT: /* server: a new connection */
        return on_accept(ws, wsi);
    case LWS_CALLBACK_TIMER: /* server: a deadline of an untrusted connection */
        return c ? on_deadline(ws, c) : 0;
    case LWS_CALLBACK_RAW_CONNECTED: /* client: TCP is up */
        if (!c)
            return -1;
        c->wsi = wsi;
        c->state = ST_HTTP;
        tune_socket(wsi);
        return ws->ssl_ctx ? ws_tls_start(ws, c) : send_upgrade(ws, c);
    case LWS_CALLBACK_RAW_RX:
        if (!c || c->dropped)
            return -1;
        return c->ssl ? on_ciphertext(ws, c, in, len) : on_plain(ws, c, in, len);
    case LWS_CALLBACK_RAW_WRITEABLE:
        return c ? ws_on_writeable(ws, wsi, c) : 0;
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
    case LWS_CALLBACK_RAW_CLOSE:
    case LWS_CALLBACK_WSI_DESTROY:
        if (c) {
            lws_set_opaque_user_data(wsi, NULL);
            finish(ws, c);
        }
        return 0;
    default:
        return 0;
    }
}

/* The endpoint whose service thread this is (NULL on other threads). */
static _Thread_local pf_ws *serving;

static void *service_thread(void *arg) {
    pf_ws *ws = arg;
    serving = ws;
    while (!__atomic_load_n(&ws->stop, __ATOMIC_ACQUIRE))
        lws_service(ws->ctx, 0);
    return NULL;
}

static void log_to_stderr(int level, const char *line) {
    fprintf(stderr, "psflow: websocket %s: %s", level == LLL_ERR ? "error" : "warning", line);
}

/* Frees what create() made before the context. */
static void free_ws(pf_ws *ws) {
    ws_tls_client_deinit(ws);
    pf_free(ws->tls_rx);
    pthread_cond_destroy(&ws->direct_done);
    pthread_mutex_destroy(&ws->lock);
    pf_free(ws);
}

/* o with its defaults filled in, or an error for what cannot work. */
static pf_status resolve_options(const pf_ws_options *in, int server, size_t max_message,
                                 pf_ws_options *o, pf_error *err) {
    memset(o, 0, sizeof *o);
    if (in)
        *o = *in;
    if (o->max_connections <= 0)
        o->max_connections = PF_WS_DEFAULT_MAX_CONNECTIONS;
    if (!(o->handshake_timeout > 0))
        o->handshake_timeout = PF_WS_DEFAULT_HANDSHAKE_TIMEOUT;
    if (!(o->idle_timeout > 0))
        o->idle_timeout = PF_WS_DEFAULT_IDLE_TIMEOUT;
    if (o->untrusted_max_message == 0)
        o->untrusted_max_message = PF_WS_DEFAULT_UNTRUSTED_MAX_MESSAGE;
    if (o->max_untrusted <= 0)
        o->max_untrusted = PF_WS_DEFAULT_MAX_UNTRUSTED;
    if (o->max_untrusted_per_address < 0)
        o->max_untrusted_per_address = 0; /* ws_admit_per_address: its default */
    if (o->max_buffered == 0)
        o->max_buffered = max_message > SIZE_MAX / 4 ? SIZE_MAX : 4 * max_message;
    if (!server)
        o->tls_cert = o->tls_key = NULL;
    else
        o->ca_file = NULL;
    if (!o->tls_cert != !o->tls_key)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "a TLS certificate and its key go together");
    return PF_OK;
}

static pf_status create(const char *iface, int port, size_t max_message, const pf_ws_options *opt,
                        const pf_ws_handlers *h, void *user, pf_ws **out, pf_error *err) {
    *out = NULL;
    pf_ws_options o;
    pf_status st = resolve_options(opt, port != CONTEXT_PORT_NO_LISTEN, max_message, &o, err);
    if (st != PF_OK)
        return st;
    lws_set_log_level(LLL_ERR | LLL_WARN, log_to_stderr);
    pf_ws *ws = pf_calloc(1, sizeof *ws);
    if (!ws)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    ws->max_message = max_message;
    ws->o = o;
    ws->tls = o.tls_cert || o.ca_file;
    ws->h = *h;
    ws->user = user;
    pthread_mutex_init(&ws->lock, NULL);
    pthread_cond_init(&ws->direct_done, NULL);
    /* Mask and handshake keys: seeded from the clock and this endpoint's address. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pf_rng_init(&ws->rng, (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30),
                (uint64_t)(uintptr_t)ws);
    ws->protocols[0] = (struct lws_protocols){
        .name = WS_PROTOCOL_NAME,
        .callback = callback,
        .rx_buffer_size = RX_CHUNK,
        .tx_packet_size = PF_WS_CHUNK,
    };
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = port;
    info.iface = iface && strcmp(iface, "0.0.0.0") != 0 ? iface : NULL;
    info.protocols = ws->protocols;
    info.user = ws;
    info.gid = -1;
    info.uid = -1;
    info.pt_serv_buf_size = RX_CHUNK;
    info.options = LWS_SERVER_OPTION_DISABLE_IPV6;
    if (port != CONTEXT_PORT_NO_LISTEN) {
        info.options |= LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG;
        info.listen_accept_role = "raw-skt";
        info.listen_accept_protocol = WS_PROTOCOL_NAME;
    }
    if (o.tls_cert) { /* a server: libwebsockets' TLS on the raw sockets it accepts */
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = o.tls_cert;
        info.ssl_private_key_filepath = o.tls_key;
    }
    if (o.ca_file && ((st = ws_tls_client_init(ws, o.ca_file, err)) != PF_OK ||
                      !(ws->tls_rx = pf_malloc(RX_CHUNK)))) {
        ws_tls_client_deinit(ws);
        free_ws(ws);
        return st != PF_OK ? st : pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    }
    ws->ctx = lws_create_context(&info);
    if (!ws->ctx) {
        free_ws(ws);
        if (port == CONTEXT_PORT_NO_LISTEN)
            return pf_error_set(err, PF_ERR_IO, NULL, "cannot create a websocket client%s%s",
                                o.ca_file ? " trusting the CA file " : "",
                                o.ca_file ? o.ca_file : "");
        if (o.tls_cert)
            return pf_error_set(err, PF_ERR_IO, NULL,
                                "cannot listen on %s:%d with TLS certificate %s and key %s",
                                iface ? iface : "0.0.0.0", port, o.tls_cert, o.tls_key);
        return pf_error_set(err, PF_ERR_IO, NULL, "cannot listen on %s:%d",
                            iface ? iface : "0.0.0.0", port);
    }
    struct lws_vhost *vh = lws_get_vhost_by_name(ws->ctx, "default");
    ws->port = port == CONTEXT_PORT_NO_LISTEN ? 0 : vh ? lws_get_vhost_listen_port(vh) : port;
    /* Published before the loop starts: a handler may run (and its owner read *out)
     * as soon as the first connection comes in. */
    *out = ws;
    if (pthread_create(&ws->thread, NULL, service_thread, ws) != 0) {
        *out = NULL;
        lws_context_destroy(ws->ctx);
        free_ws(ws);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "cannot start the websocket thread");
    }
    ws->thread_started = 1;
    return PF_OK;
}

pf_status pf_ws_server_create_with(const char *iface, int port, size_t max_message,
                                   const pf_ws_options *o, const pf_ws_handlers *h, void *user,
                                   pf_ws **out, pf_error *err) {
    return create(iface, port, max_message, o, h, user, out, err);
}

pf_status pf_ws_server_create(const char *iface, int port, size_t max_message,
                              const pf_ws_handlers *h, void *user, pf_ws **out, pf_error *err) {
    return create(iface, port, max_message, NULL, h, user, out, err);
}

pf_status pf_ws_client_create_with(size_t max_message, const pf_ws_options *o,
                                   const pf_ws_handlers *h, void *user, pf_ws **out,
                                   pf_error *err) {
    return create(NULL, CONTEXT_PORT_NO_LISTEN, max_message, o, h, user, out, err);
}

pf_status pf_ws_client_create(size_t max_message, const pf_ws_handlers *h, void *user, pf_ws **out,
                              pf_error *err) {
    return create(NULL, CONTEXT_PORT_NO_LISTEN, max_message, NULL, h, user, out, err);
}

int pf_ws_port(const pf_ws *ws) {
    return ws->port;
}

void pf_ws_destroy(pf_ws *ws) {
    if (!ws)
        return;
    if (ws->thread_started) {
        __atomic_store_n(&ws->stop, 1, __ATOMIC_RELEASE);
        lws_cancel_service(ws->ctx);
        pthread_join(ws->thread, NULL);
    }
    lws_context_destroy(ws->ctx);
    while (ws->conns)
        finish(ws, ws->conns);
    while (ws->pool) {
        out_msg *m = ws->pool;
        ws->pool = m->next;
        pf_free(m);
    }
    free_ws(ws);
}

void pf_ws_set_conn_user(pf_ws *ws, uint64_t id, void *user) {
    pthread_mutex_lock(&ws->lock);
    conn *c = find_locked(ws, id);
    if (c)
        c->user = user;
    pthread_mutex_unlock(&ws->lock);
}

pf_status pf_ws_connect(pf_ws *ws, const char *host, int port, void *conn_user, uint64_t *id) {
    pthread_mutex_lock(&ws->lock);
    conn *c = new_conn_locked(ws, conn_user);
    if (c) {
        snprintf(c->host, sizeof c->host, "%s", host);
        c->port = port;
        c->want_connect = 1;
        *id = c->id;
    }
    pthread_mutex_unlock(&ws->lock);
    if (!c)
        return PF_ERR_NOMEM;
    lws_cancel_service(ws->ctx);
    return PF_OK;
}

pf_status pf_ws_expect(pf_ws *ws, uint64_t id, size_t len, const pf_ws_place *places, int n) {
    if (n < 0 || (n > 0 && !places))
        return PF_ERR_INVALID;
    for (int i = 0; i < n; i++)
        if (places[i].pos > len || places[i].len > len - places[i].pos ||
            (i > 0 && places[i].pos < places[i - 1].pos + places[i - 1].len))
            return PF_ERR_INVALID;
    pthread_mutex_lock(&ws->lock);
    conn *c = find_locked(ws, id);
    pf_status st = c ? PF_OK : PF_ERR_NOT_FOUND;
    if (c && n > c->expect_cap) {
        pf_ws_place *p = pf_realloc(c->expect, (size_t)n * sizeof *p);
        if (p) {
            c->expect = p;
            c->expect_cap = n;
        } else {
            st = PF_ERR_NOMEM;
        }
    }
    if (c) {
        c->expect_len = st == PF_OK ? len : 0;
        c->expect_n = st == PF_OK ? n : 0;
        if (st == PF_OK && n > 0)
            memcpy(c->expect, places, (size_t)n * sizeof *places);
    }
    pthread_mutex_unlock(&ws->lock);
    return st;
}

void pf_ws_set_on_bytes(pf_ws *ws, uint64_t id, pf_ws_bytes_fn fn) {
    pthread_mutex_lock(&ws->lock);
    conn *c = find_locked(ws, id);
    if (c)
        c->on_bytes = fn; /* taken at the next message's first frame (take_expectation) */
    pthread_mutex_unlock(&ws->lock);
}

const pf_ws_place *pf_ws_message_places(const pf_ws *ws, int *n) {
    *n = ws->placed_n;
    return ws->placed;
}

void pf_ws_trust(pf_ws *ws, uint64_t id) {
    int here = serving == ws;
    pthread_mutex_lock(&ws->lock);
    conn *c = find_locked(ws, id);
    if (c && !c->server)
        c = NULL; /* a client's own connections: nothing to trust */
    if (c && !here)
        c->want_trust = 1; /* the loop promotes it (handle_requests) */
    pthread_mutex_unlock(&ws->lock);
    if (c && here)
        ws_admit_promote(ws, c); /* the loop thread: c cannot be freed meanwhile */
    else if (c)
        lws_cancel_service(ws->ctx);
}

void pf_ws_set_limits(pf_ws *ws, int max_connections, size_t max_buffered) {
    /* Read by the loop without the lock (on accept, on every frame header): atomics. */
    if (max_connections > 0)
        __atomic_store_n(&ws->o.max_connections, max_connections, __ATOMIC_RELAXED);
    if (max_buffered > 0)
        __atomic_store_n(&ws->o.max_buffered, max_buffered, __ATOMIC_RELAXED);
}

void pf_ws_wake(pf_ws *ws) {
    __atomic_store_n(&ws->wake, 1, __ATOMIC_RELEASE);
    lws_cancel_service(ws->ctx);
}

void pf_ws_close(pf_ws *ws, uint64_t id) {
    pthread_mutex_lock(&ws->lock);
    conn *c = find_locked(ws, id);
    if (c)
        c->want_close = 1;
    pthread_mutex_unlock(&ws->lock);
    if (c)
        lws_cancel_service(ws->ctx);
}
