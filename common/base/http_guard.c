/* http_guard.c - the Host allowlist and the connection watch of the coordinator's HTTP
 * front (http_guard.h).
 *
 * DESIGN: the watch is a list of every open connection under one lock: libmicrohttpd's
 * accepting thread adds to it, each connection's thread moves its record through the
 * phases and removes it (before libmicrohttpd closes the fd, so the fd a record holds is
 * always that connection's), and the reaper thread looks over it every REAP_PERIOD seconds.
 * A connection is stopped with shutdown(2), never close(2): its own thread then reads the
 * end of the stream and closes it the ordinary way.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "psflow/http_guard.h"
#include "psflow/clock.h"
#include "psflow/mem.h"

#define HOST_MAX    253 /* bytes of a DNS name */
#define HOSTS_MAX   64  /* names of the allowlist */
#define REAP_PERIOD 0.25

/* --- the Host allowlist --- */

struct pf_http_hosts {
    int any; /* "*" */
    int n;
    char name[HOSTS_MAX][HOST_MAX + 1]; /* lower case, no trailing dot */
};

/* A DNS name or an IPv4 literal: letters, digits, '-', '_' and '.'. */
static int host_chars(const char *s, size_t n) {
    if (n == 0 || n > HOST_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!(ch >= 'a' && ch <= 'z') && !(ch >= 'A' && ch <= 'Z') && !(ch >= '0' && ch <= '9') &&
            ch != '-' && ch != '_' && ch != '.')
            return 0;
    }
    return 1;
}

/* Copies name[0..n) lower-cased, without one trailing dot, into out[HOST_MAX + 1]. */
static void normalize(const char *name, size_t n, char *out) {
    if (n && name[n - 1] == '.')
        n--;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] - 'A' + 'a' : name[i]);
    out[n] = '\0';
}

static int add_name(pf_http_hosts *h, const char *name, pf_error *err) {
    size_t n = strlen(name);
    if (!host_chars(name, n))
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "--allowed-hosts: '%.100s' is not a host name (letters, digits, '-', "
                            "'.'; no port) or '*'",
                            name);
    if (h->n == HOSTS_MAX)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "--allowed-hosts: more than %d names",
                            HOSTS_MAX - 8);
    normalize(name, n, h->name[h->n++]);
    return PF_OK;
}

pf_status pf_http_hosts_create(const char *listen_host, const char *const *names, int n,
                               pf_http_hosts **out, pf_error *err) {
    pf_http_hosts *h = pf_calloc(1, sizeof *h);
    *out = NULL;
    if (!h)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    pf_status st = add_name(h, "localhost", err);
    int every = !listen_host || !*listen_host || !strcmp(listen_host, "0.0.0.0");
    if (st == PF_OK && !every)
        st = add_name(h, listen_host, err);
    char self[HOST_MAX + 1];
    if (st == PF_OK && every && gethostname(self, sizeof self) == 0) {
        self[HOST_MAX] = '\0';
        if (host_chars(self, strlen(self)))
            st = add_name(h, self, err);
    }
    if (n > HOSTS_MAX - 8) {
        pf_free(h);
        return pf_error_set(err, PF_ERR_INVALID, NULL, "--allowed-hosts: more than %d names",
                            HOSTS_MAX - 8);
    }
    for (int i = 0; st == PF_OK && i < n; i++)
        if (!strcmp(names[i], "*"))
            h->any = 1;
        else
            st = add_name(h, names[i], err);
    if (st != PF_OK) {
        pf_free(h);
        return st;
    }
    *out = h;
    return PF_OK;
}

void pf_http_hosts_destroy(pf_http_hosts *h) {
    pf_free(h);
}

int pf_http_hosts_any(const pf_http_hosts *h) {
    return h->any;
}

/* Whether s[0..n) is ":" followed by 1-5 digits, or empty. */
static int port_part(const char *s, size_t n) {
    if (n == 0)
        return 1;
    if (s[0] != ':' || n < 2 || n > 6)
        return 0;
    for (size_t i = 1; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

int pf_http_hosts_allow(const pf_http_hosts *h, const char *host) {
    if (h->any || !host)
        return 1;
    size_t len = strlen(host);
    if (host[0] == '[') { /* an IPv6 literal: never a rebound name */
        const char *close = strchr(host, ']');
        char v6[INET6_ADDRSTRLEN];
        struct in6_addr a6;
        size_t n = close ? (size_t)(close - host - 1) : 0;
        if (!close || n == 0 || n >= sizeof v6 || !port_part(close + 1, len - n - 2))
            return 0;
        memcpy(v6, host + 1, n);
        v6[n] = '\0';
        return inet_pton(AF_INET6, v6, &a6) == 1;
    }
    const char *colon = strchr(host, ':');
    size_t n = colon ? (size_t)(colon - host) : len;
    if (!host_chars(host, n) || !port_part(host + n, len - n))
        return 0;
    char name[HOST_MAX + 1];
    normalize(host, n, name);
    struct in_addr a4;
    if (inet_pton(AF_INET, name, &a4) == 1)
        return 1;
    for (int i = 0; i < h->n; i++)
        if (!strcmp(name, h->name[i]))
            return 1;
    return 0;
}

/* --- the connection watch --- */

enum phase { AWAIT_HEADERS, AWAIT_BODY, ANSWERING, CUT };

/* A client address: family and its bytes (4 for IPv4, 16 for IPv6); family 0 = unknown. */
typedef struct address {
    int family;
    unsigned char bytes[16];
} address;

struct pf_http_conn {
    pf_http_conn *prev, *next;
    int fd;
    address from;
    int reserve;
    enum phase phase;
    double accepted; /* when the connection was accepted (pf_clock_now) */
    double since;    /* when the phase began */
    double deadline; /* when a connection still in it is shut down */
};

struct pf_http_watch {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t reaper;
    int stopping;
    pf_http_watch_limits l;
    pf_http_conn *head; /* oldest first */
    pf_http_conn *tail;
    pf_http_watch_counts totals;
};

static void cut_off(pf_http_conn *c) {
    shutdown(c->fd, SHUT_RDWR);
    c->phase = CUT;
}

static void *reap(void *arg) {
    pf_http_watch *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->stopping) {
        struct timespec until = pf_clock_deadline(REAP_PERIOD);
        pthread_cond_timedwait(&w->wake, &w->lock, &until);
        double now = pf_clock_now();
        for (pf_http_conn *c = w->head; c; c = c->next)
            if ((c->phase == AWAIT_HEADERS || c->phase == AWAIT_BODY) && now >= c->deadline) {
                cut_off(c);
                w->totals.deadline++;
            }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

pf_http_watch *pf_http_watch_create(const pf_http_watch_limits *limits) {
    pf_http_watch *w = pf_calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->l = *limits;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    if (pthread_create(&w->reaper, NULL, reap, w) != 0) {
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        pf_free(w);
        return NULL;
    }
    return w;
}

void pf_http_watch_destroy(pf_http_watch *w) {
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->reaper, NULL);
    while (w->head) {
        pf_http_conn *c = w->head;
        w->head = c->next;
        pf_free(c);
    }
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    pf_free(w);
}

static address address_of(const struct sockaddr *sa) {
    address a;
    memset(&a, 0, sizeof a);
    if (sa && sa->sa_family == AF_INET) {
        a.family = AF_INET;
        memcpy(a.bytes, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa && sa->sa_family == AF_INET6) {
        a.family = AF_INET6;
        memcpy(a.bytes, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
    return a;
}

static int still_sending(const pf_http_conn *c) {
    return c->phase == AWAIT_HEADERS || c->phase == AWAIT_BODY;
}

/* Applies the per-address limit to the newcomer c (not yet listed): when its address has
 * per_address connections still sending their request, shuts down the longest-waiting of
 * them if it has waited evict_after, else c itself. Caller holds the lock. */
static void limit_address(pf_http_watch *w, pf_http_conn *c, double now) {
    if (!c->from.family)
        return;
    int n = 0;
    pf_http_conn *oldest = NULL;
    for (pf_http_conn *o = w->head; o; o = o->next)
        if (still_sending(o) && !memcmp(&o->from, &c->from, sizeof c->from)) {
            n++;
            if (!oldest || o->since < oldest->since)
                oldest = o;
        }
    if (n < w->l.per_address)
        return;
    cut_off(oldest && now - oldest->since >= w->l.evict_after_s ? oldest : c);
    w->totals.address++;
}

pf_http_conn *pf_http_watch_add(pf_http_watch *w, int fd, const struct sockaddr *addr,
                                int reserve) {
    pf_http_conn *c = pf_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->from = address_of(addr);
    c->reserve = reserve;
    c->phase = AWAIT_HEADERS;
    c->accepted = c->since = pf_clock_now();
    c->deadline = c->since + w->l.header_s;
    pthread_mutex_lock(&w->lock);
    limit_address(w, c, c->since);
    c->prev = w->tail;
    if (w->tail)
        w->tail->next = c;
    else
        w->head = c;
    w->tail = c;
    pthread_mutex_unlock(&w->lock);
    return c;
}

void pf_http_watch_remove(pf_http_watch *w, pf_http_conn *c) {
    if (!c)
        return;
    pthread_mutex_lock(&w->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        w->tail = c->prev;
    pthread_mutex_unlock(&w->lock);
    pf_free(c);
}

/* Moves c to phase p (a cut connection stays cut) with a deadline `allowed` seconds on. */
static void enter(pf_http_watch *w, pf_http_conn *c, enum phase p, double allowed) {
    if (!c)
        return;
    pthread_mutex_lock(&w->lock);
    if (c->phase != CUT) {
        c->phase = p;
        c->since = pf_clock_now();
        c->deadline = c->since + allowed;
    }
    pthread_mutex_unlock(&w->lock);
}

void pf_http_watch_headers_done(pf_http_watch *w, pf_http_conn *c) {
    enter(w, c, AWAIT_BODY, w->l.body_s);
}

void pf_http_watch_body_done(pf_http_watch *w, pf_http_conn *c) {
    enter(w, c, ANSWERING, 0);
}

void pf_http_watch_answered(pf_http_watch *w, pf_http_conn *c) {
    enter(w, c, AWAIT_HEADERS, w->l.idle_s + w->l.header_s);
}

int pf_http_conn_in_reserve(const pf_http_conn *c) {
    return c && c->reserve;
}

/* The connection in phase p that has been in it longest, at least min_age seconds; NULL if
 * none. Caller holds the lock. */
static pf_http_conn *longest_in(pf_http_watch *w, enum phase p, double min_age) {
    double now = pf_clock_now();
    pf_http_conn *oldest = NULL;
    for (pf_http_conn *c = w->head; c; c = c->next)
        if (c->phase == p && now - c->since >= min_age && (!oldest || c->since < oldest->since))
            oldest = c;
    return oldest;
}

int pf_http_watch_evict(pf_http_watch *w) {
    pthread_mutex_lock(&w->lock);
    pf_http_conn *oldest = longest_in(w, AWAIT_HEADERS, w->l.evict_after_s);
    if (!oldest)
        oldest = longest_in(w, AWAIT_BODY, w->l.evict_after_s);
    if (oldest) {
        cut_off(oldest);
        w->totals.evicted++;
    }
    pthread_mutex_unlock(&w->lock);
    return oldest != NULL;
}

int pf_http_watch_promote(pf_http_watch *w, pf_http_conn *c) {
    if (!c)
        return 0;
    pthread_mutex_lock(&w->lock);
    if (c->reserve && c->phase != CUT) {
        pf_http_conn *oldest = NULL;
        for (pf_http_conn *o = w->head; o; o = o->next)
            if (!o->reserve && still_sending(o) && o->since < c->accepted &&
                (!oldest || o->since < oldest->since))
                oldest = o;
        if (oldest) {
            cut_off(oldest);
            w->totals.evicted++;
            c->reserve = 0;
        }
    }
    int promoted = !c->reserve;
    pthread_mutex_unlock(&w->lock);
    return promoted;
}

pf_http_watch_counts pf_http_watch_totals(pf_http_watch *w) {
    pthread_mutex_lock(&w->lock);
    pf_http_watch_counts t = w->totals;
    pthread_mutex_unlock(&w->lock);
    return t;
}

const char *pf_http_status_title(int status) {
    switch (status) {
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Content";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return status >= 500 ? "Internal Server Error" : "Error";
    }
}
