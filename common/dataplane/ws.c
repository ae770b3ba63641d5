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
 * at a time and sends each chunk while it is in cache. Otherwise, and for what the socket
 * did not take (copied into the buffer before the sender returns), the loop writes it in
 * pieces of at most PF_WS_CHUNK bytes, one lws_write() per WRITEABLE callback.
 * libwebsockets reads up to RX_CHUNK bytes per readable event; the rest of an incoming
 * data frame is read from the socket straight into the message buffer (or where
 * pf_ws_expect placed it), DIRECT_READ_MAX bytes a read, and unmasked there while still
 * in cache.
 *
 * Threads: everything that touches a wsi runs on the service thread. Other threads edit
 * the connection table under `lock` (queue a message, ask for a connect or a close) and
 * wake the loop with lws_cancel_service(); the loop acts on those requests in
 * LWS_CALLBACK_EVENT_WAIT_CANCELLED. The one exception is a direct send: under `lock` a
 * sender claims an idle, open connection (`direct`), then writes to its socket with the
 * lock released; meanwhile the loop writes nothing on it, and a closing connection waits
 * for the claim to end before libwebsockets closes the socket. Connection structs are
 * freed only on the service thread and are looked up by id, never held across threads.
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
#include "psflow/mem.h"
#include "psflow/rng.h"
#include "ws_handshake.h"

#define HEADROOM 16          /* frame header space in front of a message: at most 14 bytes */
#define MAX_HTTP 8192        /* handshake request or response */
#define RX_CHUNK (64u << 10) /* bytes libwebsockets reads per readable event */

/* dst = src XOR mask, continuing at mask position `phase`, 8 bytes at a time; dst may be
 * src (mask in place) or another buffer (copy and unmask in one pass). */
static void copy_unmask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t mask[4],
                        size_t phase) {
    uint8_t m8[8];
    for (int i = 0; i < 8; i++)
        m8[i] = mask[(phase + (size_t)i) & 3];
    uint64_t m;
    memcpy(&m, m8, 8);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, src + i, 8);
        v ^= m;
        memcpy(dst + i, &v, 8);
    }
    for (; i < n; i++)
        dst[i] = src[i] ^ m8[i & 7];
}

static void apply_mask(uint8_t *p, size_t n, const uint8_t mask[4], size_t phase) {
    copy_unmask(p, p, n, mask, phase);
}

/* --- connections ---------------------------------------------------------------------------- */

/* A send buffer: this header, HEADROOM bytes, then `cap` message bytes. While queued,
 * `next` chains it on its connection; while free, on the pool. `raw` messages (handshake
 * text, control frames) go out as they are. */
typedef struct out_msg {
    struct out_msg *next;
    size_t cap;
    size_t len;  /* message bytes */
    size_t wire; /* bytes to write from start: frame header + message */
    uint8_t *start;
    int raw;
    int framed; /* header written (and payload masked) */
} out_msg;

#define POOL_KEEP 16

static uint8_t *msg_bytes(out_msg *m) {
    return (uint8_t *)(m + 1) + HEADROOM;
}

static out_msg *msg_of(uint8_t *bytes) {
    return (out_msg *)(bytes - HEADROOM) - 1;
}

enum { ST_HTTP, ST_HEADER, ST_PAYLOAD };

typedef struct conn {
    struct conn *next;
    uint64_t id;
    struct lws *wsi;
    void *user;
    int server;
    int open;     /* handshake complete */
    int finished; /* on_close delivered */
    /* requests from other threads, under ws->lock */
    int want_connect;
    int want_close;
    int fd;           /* the socket once the handshake is done, else -1 */
    int direct;       /* a sender is writing a message straight to fd */
    int lws_buffered; /* libwebsockets holds unsent bytes of ours */
    pf_rng rng;       /* handshake and mask keys; used by whoever frames for c */
    char host[256];
    int port;
    out_msg *head, *tail;
    /* loop thread only */
    size_t tx_off;
    char key[WS_KEY_SIZE]; /* client: the Sec-WebSocket-Key sent */
    char http[MAX_HTTP];
    size_t http_len;
    int state;
    uint8_t hdr[14];
    size_t hdr_len;
    uint64_t frame_left; /* payload bytes of the current frame still to come */
    size_t frame_done;   /* payload bytes of the current frame seen (mask phase) */
    int frame_opcode;
    int frame_fin;
    int frame_masked;
    uint8_t frame_mask[4];
    int in_message; /* a fragmented message is being assembled */
    uint8_t control[125];
    pf_buf rx; /* the message being received; len counts placed bytes too */
    /* pf_ws_expect: where the next data message goes; under ws->lock */
    size_t expect_len; /* 0: no expectation */
    pf_ws_place *expect;
    int expect_n, expect_cap;
    /* loop thread: the places of the message being received, when `placing` */
    pf_ws_place *place;
    int place_n, place_cap, place_i;
    int placing;
} conn;

struct pf_ws {
    struct lws_context *ctx;
    struct lws_protocols protocols[2];
    pthread_t thread;
    int thread_started;
    int stop; /* atomic */
    pthread_mutex_t lock;
    conn *conns;
    uint64_t next_id;
    size_t max_message;
    out_msg *pool;
    int pool_n;
    pthread_cond_t direct_done; /* a direct send ended */
    pf_rng rng;                 /* seeds each connection's rng; under lock */
    const pf_ws_place *placed;  /* the places of the message being delivered, or NULL */
    int placed_n;
    pf_ws_handlers h;
    void *user;
    int port;
};

static conn *find_locked(pf_ws *ws, uint64_t id) {
    for (conn *c = ws->conns; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

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

static void release(pf_ws *ws, out_msg *m) {
    pthread_mutex_lock(&ws->lock);
    if (ws->pool_n < POOL_KEEP) {
        m->next = ws->pool;
        ws->pool = m;
        ws->pool_n++;
        m = NULL;
    }
    pthread_mutex_unlock(&ws->lock);
    pf_free(m);
}

/* Removes c from the table, drops its queue and delivers on_close. Loop thread only. */
static void finish(pf_ws *ws, conn *c) {
    if (c->finished)
        return;
    c->finished = 1;
    pthread_mutex_lock(&ws->lock);
    c->fd = -1; /* no new direct send; wait for one in progress before the socket closes */
    while (c->direct)
        pthread_cond_wait(&ws->direct_done, &ws->lock);
    for (conn **p = &ws->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    out_msg *q = c->head;
    c->head = c->tail = NULL;
    pthread_mutex_unlock(&ws->lock);
    while (q) {
        out_msg *next = q->next;
        release(ws, q);
        q = next;
    }
    if (ws->h.on_close)
        ws->h.on_close(ws, c->id, c->user, ws->user);
    pf_buf_deinit(&c->rx);
    pf_free(c->expect);
    pf_free(c->place);
    pf_free(c);
}

/* A send buffer for a message of up to len bytes, from the pool when one is large enough;
 * NULL when memory is short. Any thread. */
static uint8_t *take_buffer(pf_ws *ws, size_t len) {
    pthread_mutex_lock(&ws->lock);
    out_msg **best = NULL;
    for (out_msg **p = &ws->pool; *p; p = &(*p)->next)
        if ((*p)->cap >= len && (!best || (*p)->cap < (*best)->cap))
            best = p;
    out_msg *m = NULL;
    if (best) {
        m = *best;
        *best = m->next;
        ws->pool_n--;
    }
    pthread_mutex_unlock(&ws->lock);
    if (!m) {
        size_t cap = len < 4096 ? 4096 : len + len / 8;
        if (cap > SIZE_MAX - sizeof *m - HEADROOM || !(m = pf_malloc(sizeof *m + HEADROOM + cap)))
            return NULL;
        m->cap = cap;
    }
    m->next = NULL;
    m->len = 0;
    m->raw = 0;
    m->framed = 0;
    return msg_bytes(m);
}

/* Appends m to c's queue (under the lock) and makes the loop write it. Loop thread. */
static void queue_now(pf_ws *ws, conn *c, out_msg *m) {
    pthread_mutex_lock(&ws->lock);
    if (c->tail)
        c->tail->next = m;
    else
        c->head = m;
    c->tail = m;
    pthread_mutex_unlock(&ws->lock);
    lws_callback_on_writable(c->wsi);
}

/* A raw message (handshake text or a control frame) queued from the loop thread. */
static int queue_raw(pf_ws *ws, conn *c, const void *bytes, size_t len) {
    uint8_t *b = take_buffer(ws, len);
    if (!b)
        return -1;
    memcpy(b, bytes, len);
    out_msg *m = msg_of(b);
    m->len = len;
    m->raw = 1;
    queue_now(ws, c, m);
    return 0;
}

/* Writes the frame header in front of the message (m->start, m->wire); a client draws
 * the frame's mask key into mask. The payload is left as it is. */
static void put_header(conn *c, out_msg *m, uint8_t mask[4]) {
    uint8_t *payload = msg_bytes(m);
    uint8_t h[14];
    size_t n = 0;
    h[n++] = 0x82; /* FIN, binary */
    uint8_t maskbit = c->server ? 0 : 0x80;
    if (m->len < 126) {
        h[n++] = (uint8_t)(maskbit | m->len);
    } else if (m->len <= 0xffff) {
        h[n++] = maskbit | 126;
        h[n++] = (uint8_t)(m->len >> 8);
        h[n++] = (uint8_t)m->len;
    } else {
        h[n++] = maskbit | 127;
        for (int i = 7; i >= 0; i--)
            h[n++] = (uint8_t)((uint64_t)m->len >> (8 * i));
    }
    if (!c->server) {
        uint64_t r = pf_rng_next(&c->rng);
        for (int i = 0; i < 4; i++)
            mask[i] = (uint8_t)(r >> (8 * i));
        memcpy(h + n, mask, 4);
        n += 4;
    }
    m->start = payload - n;
    memcpy(m->start, h, n);
    m->wire = n + m->len;
    m->framed = 1;
}

/* Writes the frame header in front of the message and masks it when we are a client.
 * Done once: by a direct sender, or on the loop thread when the message reaches the head
 * of the queue. */
static void frame(conn *c, out_msg *m) {
    if (m->raw) {
        m->start = msg_bytes(m);
        m->wire = m->len;
        m->framed = 1;
        return;
    }
    uint8_t mask[4];
    put_header(c, m, mask);
    if (!c->server)
        apply_mask(msg_bytes(m), m->len, mask, 0);
}

/* A read position in a message given as parts (an iovec array): part i, offset off in it,
 * payload position pos. */
typedef struct cursor {
    const struct iovec *parts;
    int n, i;
    size_t off, pos;
} cursor;

/* Copies the next len payload bytes to payload + their position, XOR mask when mask is
 * not NULL (mask in place when the parts are the payload itself). */
static void cursor_copy(cursor *k, uint8_t *payload, size_t len, const uint8_t *mask) {
    while (len > 0 && k->i < k->n) {
        const struct iovec *p = &k->parts[k->i];
        size_t take = p->iov_len - k->off < len ? p->iov_len - k->off : len;
        const uint8_t *src = (const uint8_t *)p->iov_base + k->off;
        uint8_t *dst = payload + k->pos;
        if (mask)
            copy_unmask(dst, src, take, mask, k->pos & 3);
        else if (take && dst != src)
            memcpy(dst, src, take);
        k->pos += take;
        k->off += take;
        len -= take;
        if (k->off == p->iov_len) {
            k->i++;
            k->off = 0;
        }
    }
}

/* Moves past len payload bytes (sent straight from the parts). */
static void cursor_skip(cursor *k, size_t len) {
    k->pos += len;
    while (len > 0 && k->i < k->n) {
        size_t left = k->parts[k->i].iov_len - k->off;
        if (len < left) {
            k->off += len;
            return;
        }
        len -= left;
        k->i++;
        k->off = 0;
    }
}

/* Fills v with up to max iovecs for the payload bytes not yet passed; returns how many. */
static int cursor_iov(const cursor *k, struct iovec *v, int max) {
    int nv = 0;
    size_t off = k->off;
    for (int i = k->i; i < k->n && nv < max; i++, off = 0)
        if (k->parts[i].iov_len > off)
            v[nv++] =
                (struct iovec){(uint8_t *)k->parts[i].iov_base + off, k->parts[i].iov_len - off};
    return nv;
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
    ws->placed = c->placing ? c->place : NULL;
    ws->placed_n = c->placing ? c->place_n : 0;
    c->placing = 0;
    if (ws->h.on_message)
        ws->h.on_message(ws, c->id, c->user, c->rx.data ? c->rx.data : (const uint8_t *)empty, n,
                         ws->user);
    ws->placed = NULL;
    ws->placed_n = 0;
}

/* A data frame begins a message: it is received in place if it is the one expected. */
static void take_expectation(pf_ws *ws, conn *c, uint64_t len, int whole) {
    pthread_mutex_lock(&ws->lock);
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
        return queue_raw(ws, c, f, k + n);
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
    while (fd >= 0 && c->state == ST_PAYLOAD && !(c->frame_opcode & 0x08) && c->frame_left > 0) {
        size_t room;
        uint8_t *dst = rx_dest(c, c->rx.len, &room);
        size_t want = c->frame_left > DIRECT_READ_MAX ? DIRECT_READ_MAX : (size_t)c->frame_left;
        want = want < room ? want : room;
        ssize_t k = recv(fd, dst, want, MSG_DONTWAIT);
        if (k <= 0)
            return 0; /* nothing more now; an error or the end shows up on lws' next read */
        size_t n = (size_t)k;
        if (c->frame_masked)
            apply_mask(dst, n, c->frame_mask, c->frame_done);
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
                copy_unmask(dst, in + done, take, c->frame_mask, c->frame_done);
            else
                memcpy(dst, in + done, take);
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
    pthread_mutex_lock(&ws->lock);
    c->open = 1;
    c->fd = (int)lws_get_socket_fd(c->wsi);
    pthread_mutex_unlock(&ws->lock);
    if (ws->h.on_open)
        ws->h.on_open(ws, c->id, c->user, ws->user);
    pthread_mutex_lock(&ws->lock);
    int pending = c->head != NULL;
    pthread_mutex_unlock(&ws->lock);
    if (pending)
        lws_callback_on_writable(c->wsi);
}

/* Handshake bytes. Returns -1 to close; leftover bytes after the handshake are frames. */
static int on_http(pf_ws *ws, conn *c, const uint8_t *in, size_t len) {
    size_t before = c->http_len;
    size_t take = MAX_HTTP - 1 - c->http_len < len ? MAX_HTTP - 1 - c->http_len : len;
    memcpy(c->http + c->http_len, in, take);
    c->http_len += take;
    c->http[c->http_len] = '\0';
    char *end = strstr(c->http, "\r\n\r\n");
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
        if (n < 0 || queue_raw(ws, c, resp, (size_t)n) != 0)
            return -1;
        if (!ok) {
            pthread_mutex_lock(&ws->lock);
            c->want_close = 1; /* after the answer is written */
            pthread_mutex_unlock(&ws->lock);
            return 0;
        }
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

/* --- writing -------------------------------------------------------------------------------- */

/* libwebsockets calls WRITEABLE only once it has sent what it buffered of an earlier
 * lws_write, so here nothing of ours is pending inside it. */
static int on_writeable(pf_ws *ws, struct lws *wsi, conn *c) {
    pthread_mutex_lock(&ws->lock);
    c->lws_buffered = 0;
    out_msg *m = c->direct ? NULL : c->head; /* a direct sender owns the socket for now */
    int closing = c->want_close && !c->direct;
    pthread_mutex_unlock(&ws->lock);
    if (!m || (!m->raw && !c->open)) /* nothing to write, or data waiting for the handshake */
        return closing ? -1 : 0;
    if (!m->framed)
        frame(c, m);
    size_t left = m->wire - c->tx_off;
    size_t n = left < PF_WS_CHUNK ? left : PF_WS_CHUNK;
    if (lws_write(wsi, m->start + c->tx_off, n, LWS_WRITE_RAW) < (int)n)
        return -1;
    c->tx_off += n;
    int buffered = lws_partial_buffered(wsi);
    if (c->tx_off == m->wire) {
        c->tx_off = 0;
        pthread_mutex_lock(&ws->lock);
        c->head = m->next;
        if (!c->head)
            c->tail = NULL;
        c->lws_buffered = buffered;
        int more = c->head != NULL || c->want_close || buffered;
        pthread_mutex_unlock(&ws->lock);
        release(ws, m);
        if (more)
            lws_callback_on_writable(wsi);
    } else {
        lws_callback_on_writable(wsi);
    }
    return 0;
}

/* Bytes a client masks and sends at a time on a direct send: small enough that the kernel
 * reads them from cache right after the mask pass wrote them. */
#define MASK_CHUNK (1u << 20)
#define IOV_BATCH  64

/* Writes the frame of m, whose payload is parts[0 .. n), to fd without blocking; returns
 * the wire bytes the socket took. A server sends straight from the parts (the payload is
 * never copied when the socket takes it all); a client masks the payload into m's buffer
 * a chunk at a time and sends each chunk while it is still in cache. Either way m holds
 * the frame from the returned offset on, ready for the loop to finish. */
static size_t write_direct(conn *c, int fd, out_msg *m, const struct iovec *parts, int n) {
    uint8_t mask[4];
    put_header(c, m, mask);
    uint8_t *payload = msg_bytes(m);
    size_t hn = m->wire - m->len, sent = 0;
    cursor k = {parts, n, 0, 0, 0};
    if (c->server) {
        for (;;) {
            struct iovec v[IOV_BATCH];
            int nv = 0;
            size_t head_left = sent < hn ? hn - sent : 0;
            if (head_left)
                v[nv++] = (struct iovec){m->start + sent, head_left};
            nv += cursor_iov(&k, v + nv, IOV_BATCH - nv);
            if (nv == 0)
                break;
            struct msghdr mh;
            memset(&mh, 0, sizeof mh);
            mh.msg_iov = v;
            mh.msg_iovlen = (size_t)nv;
            ssize_t r = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (r <= 0)
                break; /* full (or failing): the loop writes the rest, or sees the error */
            size_t took = (size_t)r, head = took < head_left ? took : head_left;
            sent += took;
            cursor_skip(&k, took - head);
        }
        cursor_copy(&k, payload, m->len - k.pos, NULL); /* what the socket did not take */
        return sent;
    }
    int stalled = 0;
    do {
        size_t len = m->len - k.pos < MASK_CHUNK ? m->len - k.pos : MASK_CHUNK;
        cursor_copy(&k, payload, len, mask);
        while (!stalled && sent < hn + k.pos) {
            ssize_t r = send(fd, m->start + sent, hn + k.pos - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (r <= 0)
                stalled = 1;
            else
                sent += (size_t)r;
        }
    } while (k.pos < m->len);
    return sent;
}

/* Sends message m, whose payload is parts[0 .. n) (memory of the caller's that is read
 * before this returns), and takes m back. When the connection has
 * nothing else to write, the frame goes straight to the socket from the caller's thread
 * (no loop wake-up on a request/reply round trip) and only what the socket does not take
 * now is left in m, at the head of the queue, for the loop to finish. Otherwise the
 * payload is gathered into m and m is queued; the loop frames (and masks) it. */
static pf_status send_parts(pf_ws *ws, uint64_t id, out_msg *m, const struct iovec *parts, int n) {
    m->next = NULL;
    m->raw = 0;
    m->framed = 0;
    pthread_mutex_lock(&ws->lock);
    conn *c = find_locked(ws, id);
    if (!c || c->want_close) {
        pthread_mutex_unlock(&ws->lock);
        release(ws, m);
        return PF_ERR_NOT_FOUND;
    }
    if (c->open && c->fd >= 0 && !c->head && !c->direct && !c->lws_buffered) {
        c->direct = 1; /* claimed: the loop writes nothing on c until it ends */
        int fd = c->fd;
        pthread_mutex_unlock(&ws->lock);
        size_t sent = write_direct(c, fd, m, parts, n);
        pthread_mutex_lock(&ws->lock);
        c->direct = 0;
        pthread_cond_broadcast(&ws->direct_done);
        int wake;
        if (sent < m->wire) {
            c->tx_off = sent; /* the queue was empty when this send began: it goes first */
            m->next = c->head;
            c->head = m;
            if (!c->tail)
                c->tail = m;
            m = NULL;
            wake = 1;
        } else {
            wake = c->head != NULL || c->want_close; /* queued by others meanwhile */
        }
        struct lws *wsi = c->wsi;
        pthread_mutex_unlock(&ws->lock); /* c may be gone now: not touched again */
        if (m)
            release(ws, m);
        if (wake) {
            if (pthread_equal(pthread_self(), ws->thread))
                lws_callback_on_writable(wsi);
            else
                lws_cancel_service(ws->ctx);
        }
        return PF_OK;
    }
    pthread_mutex_unlock(&ws->lock);
    /* The parts are the caller's: gather them; the loop frames and masks. */
    cursor k = {parts, n, 0, 0, 0};
    cursor_copy(&k, msg_bytes(m), m->len, NULL);
    pthread_mutex_lock(&ws->lock);
    c = find_locked(ws, id);
    if (c && !c->want_close) {
        if (c->tail)
            c->tail->next = m;
        else
            c->head = m;
        c->tail = m;
    } else {
        c = NULL;
    }
    struct lws *wsi = c ? c->wsi : NULL;
    pthread_mutex_unlock(&ws->lock);
    if (!c) {
        release(ws, m);
        return PF_ERR_NOT_FOUND;
    }
    /* From a handler (the service thread, the only one that frees connections or sets
     * their wsi) ask for WRITEABLE directly; from any other thread wake the loop. */
    if (pthread_equal(pthread_self(), ws->thread) && wsi)
        lws_callback_on_writable(wsi);
    else
        lws_cancel_service(ws->ctx);
    return PF_OK;
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

/* Client: the TCP connection is up; send the upgrade request. */
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
    uint8_t *b = take_buffer(ws, (size_t)n);
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
        return 0;
    case LWS_CALLBACK_RAW_ADOPT: /* server: a new connection */
        pthread_mutex_lock(&ws->lock);
        c = new_conn_locked(ws, NULL);
        pthread_mutex_unlock(&ws->lock);
        if (!c)
            return -1;
        c->wsi = wsi;
        c->server = 1;
        c->state = ST_HTTP;
        lws_set_opaque_user_data(wsi, c);
        tune_socket(wsi);
        return 0;
    case LWS_CALLBACK_RAW_CONNECTED: /* client: TCP is up */
        if (!c)
            return -1;
        c->wsi = wsi;
        c->state = ST_HTTP;
        tune_socket(wsi);
        return send_upgrade(ws, c);
    case LWS_CALLBACK_RAW_RX:
        if (!c)
            return -1;
        if (c->state == ST_HTTP)
            return on_http(ws, c, in, len);
        return on_frames(ws, c, in, len);
    case LWS_CALLBACK_RAW_WRITEABLE:
        return c ? on_writeable(ws, wsi, c) : 0;
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

static void *service_thread(void *arg) {
    pf_ws *ws = arg;
    while (!__atomic_load_n(&ws->stop, __ATOMIC_ACQUIRE))
        lws_service(ws->ctx, 0);
    return NULL;
}

static void log_to_stderr(int level, const char *line) {
    fprintf(stderr, "psflow: websocket %s: %s", level == LLL_ERR ? "error" : "warning", line);
}

static pf_status create(const char *iface, int port, size_t max_message, const pf_ws_handlers *h,
                        void *user, pf_ws **out, pf_error *err) {
    *out = NULL;
    lws_set_log_level(LLL_ERR | LLL_WARN, log_to_stderr);
    pf_ws *ws = pf_calloc(1, sizeof *ws);
    if (!ws)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    ws->max_message = max_message;
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
    ws->ctx = lws_create_context(&info);
    if (!ws->ctx) {
        pthread_cond_destroy(&ws->direct_done);
        pthread_mutex_destroy(&ws->lock);
        pf_free(ws);
        if (port == CONTEXT_PORT_NO_LISTEN)
            return pf_error_set(err, PF_ERR_IO, NULL, "cannot create a websocket client");
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
        pthread_cond_destroy(&ws->direct_done);
        pthread_mutex_destroy(&ws->lock);
        pf_free(ws);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "cannot start the websocket thread");
    }
    ws->thread_started = 1;
    return PF_OK;
}

pf_status pf_ws_server_create(const char *iface, int port, size_t max_message,
                              const pf_ws_handlers *h, void *user, pf_ws **out, pf_error *err) {
    return create(iface, port, max_message, h, user, out, err);
}

pf_status pf_ws_client_create(size_t max_message, const pf_ws_handlers *h, void *user, pf_ws **out,
                              pf_error *err) {
    return create(NULL, CONTEXT_PORT_NO_LISTEN, max_message, h, user, out, err);
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
    pthread_cond_destroy(&ws->direct_done);
    pthread_mutex_destroy(&ws->lock);
    pf_free(ws);
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

pf_status pf_ws_sendv(pf_ws *ws, uint64_t id, const struct iovec *parts, int n) {
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += parts[i].iov_len;
    uint8_t *b = take_buffer(ws, len);
    if (!b)
        return PF_ERR_NOMEM;
    out_msg *m = msg_of(b);
    m->len = len;
    return send_parts(ws, id, m, parts, n);
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

const pf_ws_place *pf_ws_message_places(const pf_ws *ws, int *n) {
    *n = ws->placed_n;
    return ws->placed;
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
