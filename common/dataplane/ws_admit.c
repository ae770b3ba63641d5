/* ws_admit.c - a server's admission of connections in two classes (ws_internal.h), below
 * ws.c and above ws_log.c.
 *
 * DESIGN: a connection is untrusted from accept until its owner trusts it (pf_ws_trust: a ps
 * once HELLO and the key's proof are accepted), then trusted. The classes have separate
 * budgets, so strangers can never take what the owner's own peers need:
 *  - trusted: max_connections slots and max_buffered bytes of incomplete messages;
 *  - untrusted: max_untrusted slots, at most max_untrusted_per_address of them from one
 *    remote address, and max_untrusted x untrusted_max_message bytes of incomplete messages
 *    (each of their messages is at most untrusted_max_message bytes).
 * A new connection always gets an untrusted slot: when its address's slots or all of them
 * are taken, the untrusted connection (of that address, or of all) that has gone longest
 * without getting further is dropped. Its steps: accepted, handshake bytes received,
 * upgraded, a message delivered - four at most, so a stranger cannot stay fresh by talking.
 * A crowd of strangers thus keeps its slots only until others arrive, and a real peer,
 * which takes its steps within round trips, is dropped only if the whole share of slots
 * it competes for (its address's, or all) turns over between two of its steps. (Dropping
 * the least advanced first instead would drop a newcomer whenever a stranger arrives before
 * its upgrade request is read: on a loaded host, again and again.) A connection is refused on
 * accept only while every trusted slot is taken (none of its kind could be admitted then), and
 * closed when it is trusted past them. A dropped connection is out of the counts at once; its
 * socket closes on its next timer or read (ws.c), a moment later.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "psflow/clock.h"
#include "ws_internal.h"

int ws_admit_per_address(const pf_ws *ws) {
    int n = ws->o.max_untrusted_per_address;
    if (n > 0)
        return n;
    n = ws->o.max_untrusted / 4;
    return n > 0 ? n : 1;
}

int ws_admit_stage(const conn *c) {
    if (c->delivered)
        return 3;
    if (c->open)
        return 2;
    return c->state == ST_HTTP && c->http_len > 0 ? 1 : 0; /* ST_REFUSED: answered 400 */
}

/* Whether a should be dropped before b: it has gone longer without getting further. */
static int drops_before(const conn *a, const conn *b) {
    return a->progressed < b->progressed || (a->progressed == b->progressed && a->id < b->id);
}

void ws_admit_progress(conn *c) {
    c->progressed = pf_clock_now();
}

static int same_address(const conn *c, const uint8_t *addr, int addr_len) {
    return c->addr_len == addr_len && memcmp(c->addr, addr, (size_t)addr_len) == 0;
}

conn *ws_admit_victim(conn *list, const uint8_t *addr, int addr_len, int max_untrusted,
                      int per_address) {
    conn *any = NULL, *mine = NULL;
    int n = 0, n_mine = 0;
    for (conn *c = list; c; c = c->next) {
        if (c->cls != CLS_UNTRUSTED)
            continue;
        n++;
        if (!any || drops_before(c, any))
            any = c;
        if (same_address(c, addr, addr_len)) {
            n_mine++;
            if (!mine || drops_before(c, mine))
                mine = c;
        }
    }
    if (n_mine >= per_address)
        return mine;
    return n >= max_untrusted ? any : NULL;
}

static void address_text(const uint8_t *addr, int addr_len, char *out, size_t cap) {
    if (addr_len == 4 || addr_len == 16) {
        if (inet_ntop(addr_len == 4 ? AF_INET : AF_INET6, addr, out, (socklen_t)cap))
            return;
    }
    snprintf(out, cap, "an unknown address");
}

/* Takes c out of its class's counts (and its charged bytes out of its class's budget). */
static void leave_class(pf_ws *ws, conn *c) {
    if (c->cls == CLS_TRUSTED) {
        ws->n_trusted--;
        ws->buffered -= c->charged;
    } else if (c->cls == CLS_UNTRUSTED) {
        ws->n_untrusted--;
        ws->untrusted_buffered -= c->charged;
    }
    c->charged = 0;
    c->cls = CLS_NONE;
}

/* Out of the counts now; ws.c closes it on its timer (or its next read). */
static void drop(pf_ws *ws, conn *c) {
    leave_class(ws, c);
    c->dropped = 1;
    pthread_mutex_lock(&ws->lock);
    c->want_close = 1; /* no new sends */
    pthread_mutex_unlock(&ws->lock);
    lws_set_timer_usecs(c->wsi, 1);
}

int ws_admit_peer_address(struct lws *wsi, uint8_t addr[16]) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int fd = (int)lws_get_socket_fd(wsi);
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    if (ss.ss_family == AF_INET) {
        memcpy(addr, &((struct sockaddr_in *)&ss)->sin_addr, 4);
        return 4;
    }
    if (ss.ss_family == AF_INET6) {
        memcpy(addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
        return 16;
    }
    return 0;
}

int ws_admit_room(pf_ws *ws, const uint8_t *addr, int addr_len) {
    int max_trusted = __atomic_load_n(&ws->o.max_connections, __ATOMIC_RELAXED);
    if (ws->n_trusted >= max_trusted) {
        ws_refused(ws, REF_CONNECTIONS,
                   "refused a connection: all %d connections for trusted peers are taken",
                   ws->n_trusted);
        return -1;
    }
    int per_address = ws_admit_per_address(ws);
    pthread_mutex_lock(&ws->lock);
    conn *v = ws_admit_victim(ws->conns, addr, addr_len, ws->o.max_untrusted, per_address);
    pthread_mutex_unlock(&ws->lock);
    if (v) {
        char from[64], why[96];
        address_text(v->addr, v->addr_len, from, sizeof from);
        if (ws->n_untrusted >= ws->o.max_untrusted)
            snprintf(why, sizeof why, "all %d untrusted slots are taken", ws->n_untrusted);
        else
            snprintf(why, sizeof why, "its address has the %d untrusted slots one may take",
                     per_address);
        static const char *const stages[] = {"silent", "in its handshake", "upgraded",
                                             "untrusted after a message"};
        ws_refused(ws, REF_DROPPED,
                   "dropped untrusted connection %llu from %s (%s, %.1f s old) for a new one: %s",
                   (unsigned long long)v->id, from, stages[ws_admit_stage(v)],
                   pf_clock_now() - v->accepted, why);
        drop(ws, v);
    }
    return 0;
}

void ws_admit_enter(pf_ws *ws, conn *c, const uint8_t *addr, int addr_len) {
    memcpy(c->addr, addr, (size_t)addr_len);
    c->addr_len = addr_len;
    c->cls = CLS_UNTRUSTED;
    ws->n_untrusted++;
}

void ws_admit_promote(pf_ws *ws, conn *c) {
    if (c->cls != CLS_UNTRUSTED)
        return;
    int max_trusted = __atomic_load_n(&ws->o.max_connections, __ATOMIC_RELAXED);
    if (ws->n_trusted >= max_trusted) {
        ws_refused(ws, REF_CONNECTIONS,
                   "closed connection %llu: trusted, but all %d connections for trusted peers "
                   "are taken",
                   (unsigned long long)c->id, ws->n_trusted);
        drop(ws, c);
        return;
    }
    size_t charged = c->charged;
    ws->n_untrusted--;
    ws->untrusted_buffered -= charged;
    ws->n_trusted++;
    ws->buffered += charged;
    c->cls = CLS_TRUSTED;
}

void ws_admit_leave(pf_ws *ws, conn *c) {
    leave_class(ws, c);
}

int ws_admit_charge(pf_ws *ws, conn *c, uint64_t len) {
    if (c->cls == CLS_TRUSTED) {
        /* pf_ws_set_limits may have lowered the cap below what is in use already */
        size_t max_buffered = __atomic_load_n(&ws->o.max_buffered, __ATOMIC_RELAXED);
        if (ws->buffered > max_buffered || len > max_buffered - ws->buffered) {
            ws_refused(ws, REF_BUFFERED,
                       "closed connection %llu: a %llu-byte frame would pass the %zu bytes this "
                       "endpoint buffers for incomplete messages (%zu in use)",
                       (unsigned long long)c->id, (unsigned long long)len, max_buffered,
                       ws->buffered);
            return -1;
        }
        ws->buffered += (size_t)len;
    } else {
        size_t limit = ws->o.untrusted_max_message;
        if (c->cls != CLS_UNTRUSTED || len > limit || c->rx.len + len > limit) {
            ws_refused(ws, REF_UNTRUSTED_SIZE,
                       "closed connection %llu: a %llu-byte frame before HELLO (at most %zu bytes)",
                       (unsigned long long)c->id, (unsigned long long)len, limit);
            return -1;
        }
        /* Within the budget by construction (every untrusted connection holds at most
         * `limit`); checked all the same, so no arithmetic slip can take trusted room. */
        size_t budget = (size_t)ws->o.max_untrusted * limit;
        if (ws->untrusted_buffered > budget || len > budget - ws->untrusted_buffered) {
            ws_refused(ws, REF_BUFFERED,
                       "closed connection %llu: a %llu-byte frame would pass the %zu bytes "
                       "untrusted connections may hold",
                       (unsigned long long)c->id, (unsigned long long)len, budget);
            return -1;
        }
        ws->untrusted_buffered += (size_t)len;
    }
    c->charged += (size_t)len;
    return 0;
}

void ws_admit_discharge(pf_ws *ws, conn *c) {
    if (c->cls == CLS_TRUSTED)
        ws->buffered -= c->charged;
    else if (c->cls == CLS_UNTRUSTED)
        ws->untrusted_buffered -= c->charged;
    c->charged = 0;
}
