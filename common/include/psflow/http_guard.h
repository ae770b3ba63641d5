/* http_guard.h - what an HTTP server of psflow (the coordinator's API, psflow serve) decides
 * before any route runs: which Host names it answers to (the DNS-rebinding guard) and how
 * long a connection may take to send its request (the slow-client guard). No HTTP library:
 * the server tells the watch what happens to each connection.
 *
 * Hosts. A page of evil.example whose name is rebound to the coordinator's address is, for
 * the browser, same-origin with the coordinator: it sends `Host: evil.example:PORT` and a
 * matching Origin. So the coordinator answers only to its own names: an IP literal (which
 * no DNS answer can rebind: the browser connected to that very address), `localhost`, the
 * --listen host, the machine's hostname when it listens on every interface, and the names
 * of --allowed-hosts ("*" turns the check off). The port is not compared: port mappings
 * and forwards change it.
 *
 * Connections. libmicrohttpd's timeout restarts on every byte, so a client that trickles
 * its headers a byte a second holds its slot forever. The watch records every connection
 * at accept (fd, when, phase) and a reaper thread shuts down (shutdown(2), libmicrohttpd
 * then closes it) a connection whose request headers are not complete within
 * header_seconds of the accept (or of the previous answer, plus the idle allowance for a
 * kept-alive connection), or whose body is not complete within body_seconds of the
 * headers. When the ordinary slots run out, pf_http_watch_evict() shuts down the connection
 * that has waited longest for its request, so a slow client gives way to one that sends
 * its request at once. One client address may have at most per_address connections still
 * sending their request: one more shuts down the longest-waiting of them, or itself when
 * none has waited evict_after seconds. Connections being answered (event streams
 * included) do not count, so clients that share an address (loopback, NAT, a proxy) are
 * not locked out by a cap on all of its connections.
 *
 * Threads: every function may be called from any thread; the watch has its own lock.
 */
#ifndef PSFLOW_HTTP_GUARD_H
#define PSFLOW_HTTP_GUARD_H

#include <stdint.h>
#include <sys/socket.h>

#include "psflow/status.h"

/* --- the Host allowlist --- */

typedef struct pf_http_hosts pf_http_hosts;

/* A new allowlist (pf_http_hosts_destroy) for a coordinator listening on listen_host (NULL or
 * "0.0.0.0": every interface, which adds the machine's hostname) with the extra names[0..n)
 * ("*" allows every Host). Errors: PF_ERR_INVALID for a name that is not a host name (err
 * names it), PF_ERR_NOMEM. */
pf_status pf_http_hosts_create(const char *listen_host, const char *const *names, int n,
                               pf_http_hosts **out, pf_error *err);
void pf_http_hosts_destroy(pf_http_hosts *h);
/* 1 when a request with this Host header value ("name", "name:port", "[v6]:port") is for
 * this coordinator; a missing header (NULL: HTTP/1.0, never a browser) is allowed. */
int pf_http_hosts_allow(const pf_http_hosts *h, const char *host);
/* 1 when every Host is allowed ("*"). */
int pf_http_hosts_any(const pf_http_hosts *h);

/* --- the connection watch --- */

typedef struct pf_http_watch pf_http_watch;
typedef struct pf_http_conn pf_http_conn; /* one connection, owned by the watch */

typedef struct pf_http_watch_limits {
    double header_s;      /* request headers due this long after the accept */
    double body_s;        /* the body this long after the headers */
    double idle_s;        /* added for the next request of a kept-alive connection */
    double evict_after_s; /* a request this late may be shut down for a newcomer */
    int per_address;      /* connections of one address still sending their request */
} pf_http_watch_limits;

/* Starts the reaper thread; NULL when out of memory or threads. */
pf_http_watch *pf_http_watch_create(const pf_http_watch_limits *limits);
/* Stops the reaper and frees every record; after libmicrohttpd has stopped. */
void pf_http_watch_destroy(pf_http_watch *w);

/* Records a connection accepted on fd from addr (NULL: unknown) (new record, owned by the
 * watch until pf_http_watch_remove), applying the per-address limit; NULL when out of memory
 * (the connection is then not watched). */
pf_http_conn *pf_http_watch_add(pf_http_watch *w, int fd, const struct sockaddr *addr, int reserve);
/* Forgets a connection; before libmicrohttpd closes its fd. */
void pf_http_watch_remove(pf_http_watch *w, pf_http_conn *c);
/* The request's headers are complete: its body is now due within body_seconds. */
void pf_http_watch_headers_done(pf_http_watch *w, pf_http_conn *c);
/* The request is complete: no deadline while it is answered. */
void pf_http_watch_body_done(pf_http_watch *w, pf_http_conn *c);
/* The answer is sent: the next request's headers are due (idle allowance included). */
void pf_http_watch_answered(pf_http_watch *w, pf_http_conn *c);
/* Whether the connection was accepted into the reserve. */
int pf_http_conn_in_reserve(const pf_http_conn *c);

/* Shuts down the connection that has waited longest for its request headers, else the one
 * that has waited longest for its body (a body trickles as well as headers do), if it has
 * waited at least evict_after seconds. Returns 1 when one was shut down. */
int pf_http_watch_evict(pf_http_watch *w);

/* For c, a reserve connection whose request headers are complete: shuts down the ordinary
 * connection that has waited longest for its request, if it has waited since before c was
 * accepted (c sent a whole request in less time), and moves c out of the reserve into its
 * slot. evict_after does not apply: c has shown its request, a newcomer at accept has not.
 * So when a burst of new trickling connections has filled the ordinary slots faster than
 * evict_after, a client that sends its request at once still gets an ordinary slot.
 * Returns 1 when c is (now) out of the reserve, 0 when it stays there (nobody to give way). */
int pf_http_watch_promote(pf_http_watch *w, pf_http_conn *c);

typedef struct pf_http_watch_counts {
    uint64_t deadline; /* past --header-timeout or --body-timeout */
    uint64_t evicted;  /* for a newcomer, the ordinary slots being full */
    uint64_t address;  /* over the per-address limit (the oldest or the newcomer) */
} pf_http_watch_counts;
/* Connections shut down so far. */
pf_http_watch_counts pf_http_watch_totals(pf_http_watch *w);

/* The reason phrase of an HTTP status (RFC 9110), the "title" of a problem+json answer. */
const char *pf_http_status_title(int status);

#endif
