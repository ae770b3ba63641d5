/* ws.c - message-oriented WebSocket endpoints over libwebsockets (see ws.h).
 *
 * DESIGN: libwebsockets is single-threaded: everything that touches a wsi happens on the
 * service thread. Other threads only edit the connection table under `lock` (queue a
 * message, ask for a connect or a close) and wake the loop with lws_cancel_service();
 * the loop then acts on those requests in LWS_CALLBACK_EVENT_WAIT_CANCELLED. Sends happen
 * only in the WRITEABLE callback, one lws_write() per callback, one fragment of at most
 * PF_WS_CHUNK bytes each, straight from the caller's buffer: the fragment's frame header
 * is written into the bytes just before it, which are either the buffer's headroom (first
 * fragment) or payload that was already sent. Connection structs are freed only on the
 * service thread and are looked up by id, never held across threads.
 */
#include "psflow/ws.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"

#define PROTOCOL_NAME "psflow-v1"

/* A send buffer: this header, LWS_PRE bytes of headroom, then `cap` message bytes. While
 * queued, `next` and `len` chain it on its connection; while free, on the pool. */
typedef struct out_msg {
    struct out_msg *next;
    size_t cap;
    size_t len;
    size_t pad; /* keeps the message 16-byte aligned */
} out_msg;

#define POOL_KEEP 16 /* free buffers kept for reuse */

static uint8_t *msg_bytes(out_msg *m) {
    return (uint8_t *)(m + 1) + LWS_PRE;
}

static out_msg *msg_of(uint8_t *bytes) {
    return (out_msg *)(bytes - LWS_PRE) - 1;
}

typedef struct conn {
    struct conn *next;
    uint64_t id;
    struct lws *wsi; /* NULL until the loop has created or accepted it */
    void *user;
    int open;     /* handshake complete */
    int finished; /* on_close delivered */
    /* requests from other threads, under ws->lock */
    int want_connect;
    int want_close;
    char host[256];
    int port;
    out_msg *head, *tail;
    /* loop thread only */
    size_t tx_off;
    uint8_t *rx;
    size_t rx_len, rx_cap;
} conn;

struct pf_ws {
    struct lws_context *ctx;
    struct lws_vhost *vhost;
    struct lws_protocols protocols[2];
    pthread_t thread;
    int thread_started;
    volatile int stop;
    pthread_mutex_t lock;
    conn *conns;
    uint64_t next_id;
    size_t max_message;
    out_msg *pool; /* free send buffers, under lock */
    int pool_n;
    pf_ws_handlers h;
    void *user;
    int port;
};

/* --- connection table (callers hold ws->lock) -------------------------------------------- */

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
    c->next = ws->conns;
    ws->conns = c;
    return c;
}

/* Returns a send buffer to the pool (or frees it when the pool is full). */
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
    pf_free(c->rx);
    pf_free(c);
}

/* --- loop-side actions ------------------------------------------------------------------ */

static void start_connect(pf_ws *ws, conn *c) {
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = ws->ctx;
    ci.address = c->host;
    ci.port = c->port;
    ci.path = "/";
    ci.host = c->host;
    ci.origin = c->host;
    ci.protocol = PROTOCOL_NAME;
    ci.opaque_user_data = c;
    ci.pwsi = &c->wsi;
    if (!lws_client_connect_via_info(&ci) && !c->finished) {
        c->wsi = NULL;
        finish(ws, c);
    }
}

/* Acts on requests queued by other threads. */
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
        } else if (c->wsi && (c->want_close || (c->open && c->head))) {
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

static int on_receive(pf_ws *ws, struct lws *wsi, conn *c, const uint8_t *in, size_t len) {
    if (!lws_frame_is_binary(wsi)) {
        lwsl_warn("psflow: closing connection %llu: text frame on the data plane\n",
                  (unsigned long long)c->id);
        return -1;
    }
    if (len > ws->max_message - c->rx_len) {
        lwsl_warn("psflow: closing connection %llu: message over %zu bytes\n",
                  (unsigned long long)c->id, ws->max_message);
        return -1;
    }
    if (c->rx_len + len > c->rx_cap) {
        size_t cap = c->rx_cap ? c->rx_cap : 64 * 1024;
        while (cap < c->rx_len + len)
            cap = cap > ws->max_message / 2 ? ws->max_message : cap * 2;
        uint8_t *p = pf_realloc(c->rx, cap);
        if (!p)
            return -1;
        c->rx = p;
        c->rx_cap = cap;
    }
    if (len) /* an empty message may arrive before any buffer exists */
        memcpy(c->rx + c->rx_len, in, len);
    c->rx_len += len;
    if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
        size_t n = c->rx_len;
        c->rx_len = 0;
        static const uint32_t empty[1]; /* data for an empty first message: never NULL */
        if (ws->h.on_message)
            ws->h.on_message(ws, c->id, c->user, c->rx ? c->rx : (const uint8_t *)empty, n,
                             ws->user);
    }
    return 0;
}

static int on_writeable(pf_ws *ws, struct lws *wsi, conn *c) {
    pthread_mutex_lock(&ws->lock);
    out_msg *m = c->head;
    int closing = c->want_close;
    pthread_mutex_unlock(&ws->lock);
    if (closing)
        return -1;
    if (!m)
        return 0;
    size_t left = m->len - c->tx_off;
    size_t n = left < PF_WS_CHUNK ? left : PF_WS_CHUNK;
    int flags = c->tx_off == 0 ? LWS_WRITE_BINARY : LWS_WRITE_CONTINUATION;
    if (n < left)
        flags |= LWS_WRITE_NO_FIN;
    if (lws_write(wsi, msg_bytes(m) + c->tx_off, n, (enum lws_write_protocol)flags) < (int)n)
        return -1;
    c->tx_off += n;
    if (c->tx_off == m->len) {
        c->tx_off = 0;
        pthread_mutex_lock(&ws->lock);
        c->head = m->next;
        if (!c->head)
            c->tail = NULL;
        int more = c->head != NULL;
        pthread_mutex_unlock(&ws->lock);
        release(ws, m);
        if (more)
            lws_callback_on_writable(wsi);
    } else {
        lws_callback_on_writable(wsi);
    }
    return 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len) {
    struct lws_context *ctx = lws_get_context(wsi);
    pf_ws *ws = ctx ? lws_context_user(ctx) : NULL;
    conn *c = lws_get_opaque_user_data(wsi);
    switch (reason) {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (ws)
            handle_requests(ws);
        return 0;
    case LWS_CALLBACK_ESTABLISHED: {
        pthread_mutex_lock(&ws->lock);
        c = new_conn_locked(ws, NULL);
        pthread_mutex_unlock(&ws->lock);
        if (!c)
            return -1;
        c->wsi = wsi;
        c->open = 1;
        lws_set_opaque_user_data(wsi, c);
        if (ws->h.on_open)
            ws->h.on_open(ws, c->id, c->user, ws->user);
        return 0;
    }
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        if (!c)
            return -1;
        pthread_mutex_lock(&ws->lock);
        c->open = 1;
        int pending = c->head != NULL;
        pthread_mutex_unlock(&ws->lock);
        if (ws->h.on_open)
            ws->h.on_open(ws, c->id, c->user, ws->user);
        if (pending)
            lws_callback_on_writable(wsi);
        return 0;
    case LWS_CALLBACK_RECEIVE:
    case LWS_CALLBACK_CLIENT_RECEIVE:
        return c ? on_receive(ws, wsi, c, in, len) : -1;
    case LWS_CALLBACK_SERVER_WRITEABLE:
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        return c ? on_writeable(ws, wsi, c) : 0;
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
    case LWS_CALLBACK_CLOSED:
    case LWS_CALLBACK_CLIENT_CLOSED:
    case LWS_CALLBACK_WSI_DESTROY:
        if (c) {
            lws_set_opaque_user_data(wsi, NULL);
            finish(ws, c);
        }
        return 0;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

static void *service_thread(void *arg) {
    pf_ws *ws = arg;
    while (!ws->stop)
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
    ws->protocols[0] = (struct lws_protocols){
        .name = PROTOCOL_NAME,
        .callback = callback,
        .rx_buffer_size = PF_WS_CHUNK,
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
    info.pt_serv_buf_size = PF_WS_CHUNK;
    info.options = LWS_SERVER_OPTION_DISABLE_IPV6;
    ws->ctx = lws_create_context(&info);
    if (!ws->ctx) {
        pthread_mutex_destroy(&ws->lock);
        pf_free(ws);
        if (port == CONTEXT_PORT_NO_LISTEN)
            return pf_error_set(err, PF_ERR_IO, NULL, "cannot create a websocket client");
        return pf_error_set(err, PF_ERR_IO, NULL, "cannot listen on %s:%d",
                            iface ? iface : "0.0.0.0", port);
    }
    ws->vhost = lws_get_vhost_by_name(ws->ctx, "default");
    ws->port = port == CONTEXT_PORT_NO_LISTEN ? 0
               : ws->vhost                    ? lws_get_vhost_listen_port(ws->vhost)
                                              : port;
    if (pthread_create(&ws->thread, NULL, service_thread, ws) != 0) {
        lws_context_destroy(ws->ctx);
        pthread_mutex_destroy(&ws->lock);
        pf_free(ws);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "cannot start the websocket thread");
    }
    ws->thread_started = 1;
    *out = ws;
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
        ws->stop = 1;
        lws_cancel_service(ws->ctx);
        pthread_join(ws->thread, NULL);
    }
    /* Destroying the context closes every wsi, which finishes their connections. */
    lws_context_destroy(ws->ctx);
    /* Connections that never got a wsi (connect still queued). */
    while (ws->conns) {
        conn *c = ws->conns;
        finish(ws, c);
    }
    while (ws->pool) {
        out_msg *m = ws->pool;
        ws->pool = m->next;
        pf_free(m);
    }
    pthread_mutex_destroy(&ws->lock);
    pf_free(ws);
}

uint8_t *pf_ws_buffer(pf_ws *ws, size_t len) {
    /* Best fit from the pool, else a new buffer rounded up to limit regrowth. */
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
        if (cap > SIZE_MAX - sizeof *m - LWS_PRE || !(m = pf_malloc(sizeof *m + LWS_PRE + cap)))
            return NULL;
        m->cap = cap;
    }
    m->next = NULL;
    m->len = 0;
    return msg_bytes(m);
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

pf_status pf_ws_send(pf_ws *ws, uint64_t id, uint8_t *msg, size_t len) {
    out_msg *m = msg_of(msg);
    m->next = NULL;
    m->len = len;
    pthread_mutex_lock(&ws->lock);
    conn *c = find_locked(ws, id);
    if (c && c->want_close)
        c = NULL;
    if (c) {
        if (c->tail)
            c->tail->next = m;
        else
            c->head = m;
        c->tail = m;
    }
    pthread_mutex_unlock(&ws->lock);
    if (!c) {
        release(ws, m);
        return PF_ERR_NOT_FOUND;
    }
    lws_cancel_service(ws->ctx);
    return PF_OK;
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
