/* ws_send.c - the sending half of the data plane's WebSocket endpoints (ws.h, ws_internal.h):
 * pooled send buffers, framing and masking, direct sends from the caller's thread and the
 * loop's writes of what is queued. ws.c's DESIGN comment describes how they fit together.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "psflow/mem.h"
#include "ws_internal.h"

/* dst = src XOR mask, continuing at mask position `phase`, 8 bytes at a time; dst may be
 * src (mask in place) or another buffer (copy and unmask in one pass). */
void ws_copy_unmask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t mask[4],
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

void ws_release(pf_ws *ws, out_msg *m) {
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

/* A send buffer for a message of up to len bytes, from the pool when one is large enough;
 * NULL when memory is short. Any thread. */
uint8_t *ws_take_buffer(pf_ws *ws, size_t len) {
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
    m->lent = NULL;
    m->n_lent = m->lent_i = 0;
    m->lent_off = 0;
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
int ws_queue_raw(pf_ws *ws, conn *c, const void *bytes, size_t len) {
    uint8_t *b = ws_take_buffer(ws, len);
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
        ws_apply_mask(msg_bytes(m), m->len, mask, 0);
}

/* A read position in a message given as parts (an iovec array): part i, offset off in it,
 * payload position pos. With a tagger (pf_ws_sendv_tagged) the message is the parts and
 * then their tag, a last part (index n) computed once every byte before it has been
 * digested: by cursor_copy as it reads them, or ahead of the reading, a chunk at a time,
 * by cursor_digest (its own position: part di, offset doff, payload position digested).
 * The tag is computed into `tag`, or into tag_at (a lent message's own buffer). */
typedef struct cursor {
    const struct iovec *parts;
    int n, i;
    size_t off, pos;
    const pf_ws_tagger *tagger; /* NULL: no tag */
    int tagged;                 /* the tag is computed */
    uint8_t *tag_at;            /* NULL: `tag` */
    int di;
    size_t doff, digested;
    uint8_t tag[PF_WS_MAX_TAG];
} cursor;

static cursor cursor_at(const struct iovec *parts, int n, const pf_ws_tagger *t) {
    cursor k;
    memset(&k, 0, sizeof k);
    k.parts = parts;
    k.n = n;
    k.tagger = t;
    return k;
}

static int cursor_parts(const cursor *k) {
    return k->n + (k->tagger ? 1 : 0);
}

/* Part i of the message: the caller's, or the tag, computed when first reached. */
static struct iovec cursor_part(cursor *k, int i) {
    if (i < k->n)
        return k->parts[i];
    uint8_t *tag = k->tag_at ? k->tag_at : k->tag;
    if (!k->tagged) {
        k->tagger->final(k->tagger->ctx, tag);
        k->tagged = 1;
    }
    return (struct iovec){tag, k->tagger->tag_len};
}

/* Digests the next len bytes of the parts not digested yet (before a sender that writes
 * from the parts without reading them itself offers them), and computes the tag once they
 * are all digested. Not mixed with cursor_copy's digest: a cursor is digested by one. */
static void cursor_digest(cursor *k, size_t len) {
    if (!k->tagger || k->tagged)
        return;
    while (len > 0 && k->di < k->n) {
        const struct iovec *p = &k->parts[k->di];
        size_t take = p->iov_len - k->doff < len ? p->iov_len - k->doff : len;
        if (take)
            k->tagger->update(k->tagger->ctx, (const uint8_t *)p->iov_base + k->doff, take);
        k->doff += take;
        k->digested += take;
        len -= take;
        if (k->doff == p->iov_len) {
            k->di++;
            k->doff = 0;
        }
    }
    while (k->di < k->n && k->parts[k->di].iov_len == 0)
        k->di++;
    if (k->di == k->n)
        cursor_part(k, k->n);
}

/* Digests every part not digested yet and computes the tag. */
static void cursor_digest_all(cursor *k) {
    cursor_digest(k, SIZE_MAX);
}

/* Copies the next len payload bytes to payload + their position, XOR mask when mask is
 * not NULL (mask in place when the parts are the payload itself); a tag not computed yet
 * digests them first, while they are read. */
static void cursor_copy(cursor *k, uint8_t *payload, size_t len, const uint8_t *mask) {
    while (len > 0 && k->i < cursor_parts(k)) {
        struct iovec part = cursor_part(k, k->i);
        const struct iovec *p = &part;
        size_t take = p->iov_len - k->off < len ? p->iov_len - k->off : len;
        const uint8_t *src = (const uint8_t *)p->iov_base + k->off;
        uint8_t *dst = payload + k->pos;
        if (k->tagger && !k->tagged && take)
            k->tagger->update(k->tagger->ctx, src, take);
        if (mask)
            ws_copy_unmask(dst, src, take, mask, k->pos & 3);
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

/* Moves past len payload bytes (sent straight from the parts, digested already). */
static void cursor_skip(cursor *k, size_t len) {
    k->pos += len;
    while (len > 0 && k->i < cursor_parts(k)) {
        size_t left = cursor_part(k, k->i).iov_len - k->off;
        if (len < left) {
            k->off += len;
            return;
        }
        len -= left;
        k->i++;
        k->off = 0;
    }
}

/* Fills v with up to max iovecs for the payload bytes not yet passed, before payload
 * position `limit` and, while the tag is not computed, before the tag; returns how many. */
static int cursor_iov(cursor *k, struct iovec *v, int max, size_t limit) {
    int nv = 0;
    size_t off = k->off, pos = k->pos;
    for (int i = k->i; i < cursor_parts(k) && nv < max && pos < limit; i++, off = 0) {
        if (i == k->n && !k->tagged)
            break;
        struct iovec p = cursor_part(k, i);
        if (p.iov_len > off) {
            size_t len = p.iov_len - off < limit - pos ? p.iov_len - off : limit - pos;
            v[nv++] = (struct iovec){(uint8_t *)p.iov_base + off, len};
            pos += len;
        }
    }
    return nv;
}

/* libwebsockets calls WRITEABLE only once it has sent what it buffered of an earlier
 * lws_write, so here nothing of ours is pending inside it. */
int ws_on_writeable(pf_ws *ws, struct lws *wsi, conn *c) {
    if (c->ssl) { /* client TLS: ciphertext first; nothing of ours before the handshake */
        if (ws_tls_flush(wsi, c) != 0)
            return -1;
        if (!c->tls_ready)
            return 0;
        if (lws_partial_buffered(wsi)) {
            lws_callback_on_writable(wsi);
            return 0;
        }
    }
    pthread_mutex_lock(&ws->lock);
    c->lws_buffered = 0;
    out_msg *m = c->direct ? NULL : c->head; /* a direct sender owns the socket for now */
    int closing = c->want_close && !c->direct;
    pthread_mutex_unlock(&ws->lock);
    if (!m || (!m->raw && !c->open)) /* nothing to write, or data waiting for the handshake */
        return closing ? -1 : 0;
    if (!m->framed)
        frame(c, m);
    /* The next piece: from the buffer (header and payload), or for a lent message its
     * header from the buffer and then its payload piece by piece from where it lies. */
    uint8_t *from = m->start + c->tx_off;
    size_t left = m->wire - c->tx_off, head = m->wire - m->len;
    int lent_piece = m->lent && c->tx_off >= head;
    if (lent_piece) {
        while (m->lent_i < m->n_lent && m->lent_off == m->lent[m->lent_i].iov_len) {
            m->lent_i++;
            m->lent_off = 0;
        }
        if (m->lent_i == m->n_lent)
            return -1; /* cannot happen: the pieces add up to the payload */
        from = (uint8_t *)m->lent[m->lent_i].iov_base + m->lent_off;
        left = m->lent[m->lent_i].iov_len - m->lent_off;
    } else if (m->lent) {
        left = head - c->tx_off;
    }
    size_t n = left < PF_WS_CHUNK ? left : PF_WS_CHUNK;
    if (c->ssl ? ws_tls_write(c, from, n) != 0 || ws_tls_flush(wsi, c) != 0
               : lws_write(wsi, from, n, LWS_WRITE_RAW) < (int)n)
        return -1;
    c->tx_off += n;
    if (lent_piece)
        m->lent_off += n;
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
        ws_release(ws, m);
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
/* Bytes a server digests (its tag) ahead of what it offers the socket: the digest runs
 * interleaved with the socket taking bytes, and the peer digests one chunk while the next
 * is digested here, instead of a whole pass before the first byte goes out. */
#define DIGEST_CHUNK (256u << 10)

/* A cursor over m's payload: parts[0 .. n) (a lent message: its pieces) and then the tag
 * of t, which for a lent message is its last piece, in m's buffer. */
static cursor msg_cursor(out_msg *m, const struct iovec *parts, int n, const pf_ws_tagger *t) {
    if (!m->lent)
        return cursor_at(parts, n, t);
    cursor k = cursor_at(m->lent, m->n_lent - (t ? 1 : 0), t);
    if (t)
        k.tag_at = m->lent[k.n].iov_base;
    return k;
}

/* Writes the frame of m, whose payload is parts[0 .. n), to fd without blocking; returns
 * the wire bytes the socket took. A server sends straight from the parts (the payload is
 * never copied when the socket takes it all); a client masks the payload into m's buffer
 * a chunk at a time and sends each chunk while it is still in cache. Either way m holds
 * the frame from the returned offset on, ready for the loop to finish. A tag (t) is
 * digested by the client as it masks each chunk; by a server DIGEST_CHUNK bytes ahead of
 * what it offers the socket, the tag offered once everything before it is digested, and
 * all that is left as soon as the socket stops taking bytes (the tag is then in m, or its
 * lent piece, before the loop or pf_ws_settle reads it). */
static size_t write_direct(conn *c, int fd, out_msg *m, const struct iovec *parts, int n,
                           const pf_ws_tagger *t) {
    uint8_t mask[4];
    put_header(c, m, mask);
    uint8_t *payload = msg_bytes(m);
    size_t hn = m->wire - m->len, sent = 0;
    cursor k = msg_cursor(m, parts, n, t);
    if (c->server) {
        for (;;) {
            if (t && !k.tagged && k.digested - k.pos < DIGEST_CHUNK)
                cursor_digest(&k, DIGEST_CHUNK);
            struct iovec v[IOV_BATCH];
            int nv = 0;
            size_t head_left = sent < hn ? hn - sent : 0;
            if (head_left)
                v[nv++] = (struct iovec){m->start + sent, head_left};
            nv += cursor_iov(&k, v + nv, IOV_BATCH - nv, t && !k.tagged ? k.digested : SIZE_MAX);
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
        cursor_digest_all(&k); /* what the socket did not take: the tag is needed now */
        if (m->lent) {         /* the rest is written from where it lies, from here on */
            m->lent_i = k.i;
            m->lent_off = k.off;
        } else {
            cursor_copy(&k, payload, m->len - k.pos, NULL); /* what the socket did not take */
        }
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
static pf_status send_parts(pf_ws *ws, uint64_t id, out_msg *m, const struct iovec *parts, int n,
                            const pf_ws_tagger *t) {
    m->next = NULL;
    m->raw = 0;
    m->framed = 0;
    pthread_mutex_lock(&ws->lock);
    conn *c = find_locked(ws, id);
    if (!c || c->want_close) {
        pthread_mutex_unlock(&ws->lock);
        ws_release(ws, m);
        return PF_ERR_NOT_FOUND;
    }
    if (c->open && c->fd >= 0 && !c->head && !c->direct && !c->lws_buffered) {
        c->direct = 1; /* claimed: the loop writes nothing on c until it ends */
        int fd = c->fd;
        pthread_mutex_unlock(&ws->lock);
        size_t sent = write_direct(c, fd, m, parts, n, t);
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
            ws_release(ws, m);
        if (wake) {
            if (pthread_equal(pthread_self(), ws->thread))
                lws_callback_on_writable(wsi);
            else
                lws_cancel_service(ws->ctx);
        }
        return PF_OK;
    }
    pthread_mutex_unlock(&ws->lock);
    /* The parts are the caller's: gather them (a lent message's pieces stay where they
     * are, its tag computed into its last piece now); the loop frames and masks. */
    cursor k = msg_cursor(m, parts, n, t);
    if (m->lent)
        cursor_digest_all(&k);
    else
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
        ws_release(ws, m);
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

pf_status pf_ws_sendv(pf_ws *ws, uint64_t id, const struct iovec *parts, int n) {
    return pf_ws_sendv_tagged(ws, id, parts, n, NULL);
}

pf_status pf_ws_sendv_tagged(pf_ws *ws, uint64_t id, const struct iovec *parts, int n,
                             const pf_ws_tagger *t) {
    if (t && (t->tag_len > PF_WS_MAX_TAG || !t->update || !t->final))
        return PF_ERR_INVALID;
    size_t len = t ? t->tag_len : 0;
    for (int i = 0; i < n; i++)
        len += parts[i].iov_len;
    uint8_t *b = ws_take_buffer(ws, len);
    if (!b)
        return PF_ERR_NOMEM;
    out_msg *m = msg_of(b);
    m->len = len;
    return send_parts(ws, id, m, parts, n, t);
}

pf_status pf_ws_sendv_lent(pf_ws *ws, uint64_t id, const struct iovec *parts, int n,
                           const unsigned char *lend) {
    return pf_ws_sendv_lent_tagged(ws, id, parts, n, lend, NULL);
}

pf_status pf_ws_sendv_lent_tagged(pf_ws *ws, uint64_t id, const struct iovec *parts, int n,
                                  const unsigned char *lend, const pf_ws_tagger *t) {
    if (t && (t->tag_len > PF_WS_MAX_TAG || !t->update || !t->final))
        return PF_ERR_INVALID;
    if (ws->port == 0) /* a client masks every byte it sends: nothing to gain */
        return pf_ws_sendv_tagged(ws, id, parts, n, t);
    size_t len = 0, copied = 0;
    for (int i = 0; i < n; i++) {
        len += parts[i].iov_len;
        copied += lend[i] ? 0 : parts[i].iov_len;
    }
    if (copied == len)
        return pf_ws_sendv_tagged(ws, id, parts, n, t);
    /* The buffer: the piece list, then copies of the pieces not lent, then the tag's bytes
     * (its last piece, filled once it is computed: before anything writes them). */
    size_t tag_len = t ? t->tag_len : 0;
    int n_lent = n + (t ? 1 : 0);
    size_t list = (size_t)n_lent * sizeof(struct iovec);
    uint8_t *b = ws_take_buffer(ws, list + copied + tag_len);
    if (!b)
        return PF_ERR_NOMEM;
    out_msg *m = msg_of(b);
    struct iovec *v = (struct iovec *)(void *)b; /* msg_bytes is pointer-aligned */
    uint8_t *copy = b + list;
    for (int i = 0; i < n; i++) {
        v[i] = parts[i];
        if (!lend[i] && parts[i].iov_len) {
            memcpy(copy, parts[i].iov_base, parts[i].iov_len);
            v[i].iov_base = copy;
            copy += parts[i].iov_len;
        }
    }
    if (t)
        v[n] = (struct iovec){copy, tag_len};
    m->len = len + tag_len;
    m->lent = v;
    m->n_lent = n_lent;
    return send_parts(ws, id, m, parts, n, t);
}

/* A lent message's bytes not yet written - the frame header's rest, then the payload
 * from its cursor - copied into a new buffer that takes its place in the queue (as a raw
 * message: it is wire bytes already). NULL when memory is short. Under ws->lock. */
static out_msg *settle_one(conn *c, out_msg *m, size_t written) {
    if (!m->framed)
        frame(c, m);
    size_t rest = m->wire - written, head = m->wire - m->len;
    out_msg *s = pf_malloc(sizeof *s + HEADROOM + (rest ? rest : 1));
    if (!s)
        return NULL;
    memset(s, 0, sizeof *s);
    s->cap = rest;
    s->len = s->wire = rest;
    s->start = msg_bytes(s);
    s->raw = s->framed = 1;
    uint8_t *d = s->start;
    if (written < head) {
        memcpy(d, m->start + written, head - written);
        d += head - written;
    }
    cursor k = cursor_at(m->lent, m->n_lent, NULL);
    k.i = m->lent_i;
    k.off = m->lent_off;
    cursor_copy(&k, d - k.pos, rest - (size_t)(d - s->start), NULL);
    return s;
}

pf_status pf_ws_settle(pf_ws *ws) {
    pf_status st = PF_OK;
    out_msg *drop = NULL; /* freed after the lock: lent messages replaced or dropped */
    pthread_mutex_lock(&ws->lock);
    for (conn *c = ws->conns; c; c = c->next) {
        out_msg *prev = NULL;
        for (out_msg *m = c->head; m; prev = m, m = m->next) {
            if (!m->lent)
                continue;
            size_t written = m == c->head ? c->tx_off : 0;
            out_msg *s = settle_one(c, m, written);
            if (!s) {
                /* The rest cannot be kept: what follows is dropped and the connection
                 * closed (its peer sees the stream end, never changed values). */
                st = PF_ERR_NOMEM;
                c->want_close = 1;
                if (prev) {
                    prev->next = NULL;
                } else {
                    c->head = NULL;
                    c->tx_off = 0; /* was m's: a frame queued later starts at its own 0 */
                }
                c->tail = prev;
                for (out_msg *x = m; x;) {
                    out_msg *next = x->next;
                    x->next = drop;
                    drop = x;
                    x = next;
                }
                break;
            }
            s->next = m->next;
            if (prev)
                prev->next = s;
            else
                c->head = s;
            if (c->tail == m)
                c->tail = s;
            if (!prev)
                c->tx_off = 0; /* s starts where m's writing stopped */
            m->next = drop;
            drop = m;
            m = s;
        }
    }
    pthread_mutex_unlock(&ws->lock);
    while (drop) {
        out_msg *next = drop->next;
        pf_free(drop);
        drop = next;
    }
    if (st != PF_OK)
        lws_cancel_service(ws->ctx); /* the loop closes the connections marked */
    return st;
}
