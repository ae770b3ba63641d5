/* coordinator_internal.h - what the files of the coordinator's server share: the server
 * object, the request/reply records and the helpers to read and answer a request
 * (http_reply.c), the commit step that persists a change and publishes its events
 * (commit.c), the route handlers (routes_*.c) and the HTTP daemon that calls them (http.c).
 * Layered, each file calling only those listed before it: http_guard.c, http_reply.c, commit.c,
 * routes_*.c, http.c, coordinator.c (the process's lifecycle).
 *
 * Threads: libmicrohttpd runs one thread per connection; every handler takes s->lock for
 * the whole parse-apply-persist step, so the cluster and the store see one caller at a
 * time. Event streams wait on s->changed.
 */
#ifndef PSFLOW_COORDINATOR_COORDINATOR_INTERNAL_H
#define PSFLOW_COORDINATOR_COORDINATOR_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "coordinator/cluster.h"
#include "coordinator/cluster_json.h"
#include "coordinator/coordinator.h"
#include "coordinator/dataplane_keys.h"
#include "psflow/http_guard.h"
#include "coordinator/store.h"

#define COORD_BODY_MAX        (1 << 20) /* request bodies: 413 above this */
#define COORD_RING_SIZE       8192      /* recent events kept in memory for streams */
#define COORD_RESERVE_TIMEOUT 2         /* seconds a reserve connection may stay silent */
#define COORD_EVICT_AFTER_MS  500       /* --evict-after-ms by default */
#define COORD_RETRY_AFTER     2         /* Retry-After of a 503 for capacity, seconds */
#define COORD_STREAM_RETRY    5         /* the same for an event stream over --max-streams */

typedef struct coord_ring_entry {
    int64_t id;
    char kind[12];
    char job[PF_NAME_MAX + 1];
    char *data; /* compact JSON */
} coord_ring_entry;

typedef struct coord_http_count {
    const char *route; /* static pattern, e.g. "/api/v1/jobs/{name}" */
    int code;
    uint64_t count;
} coord_http_count;

struct coord_server {
    coord_options o;
    char *token;
    /* the data-plane secret every job's keys derive from (dataplane_keys.h) */
    uint8_t dataplane_secret[PF_WIRE_KEY_SIZE];
    char *agent_token; /* NULL: the agent routes are authenticated like the rest */
    pthread_mutex_t lock;
    pthread_cond_t changed; /* broadcast after every commit that published events */
    coord_cluster cluster;
    coord_store *store;
    struct MHD_Daemon *mhd;
    int port;
    pthread_t ticker;
    int ticker_started;
    volatile sig_atomic_t stopping;
    int wake[2]; /* self-pipe: coord_server_stop wakes coord_server_wait */
    double start_time;
    /* recent events, ids ring[(id - 1) % COORD_RING_SIZE] for ids in [ring_first, ring_last] */
    coord_ring_entry ring[COORD_RING_SIZE];
    int64_t ring_first, ring_last;
    /* HTTP request counters (under stats_lock) */
    pthread_mutex_t stats_lock;
    coord_http_count *counts;
    int n_counts, cap_counts;
    uint64_t heartbeats;
    /* capacity (http.c): open connections (atomic), the first `normal_slots` of them
     * ordinary and the rest the reserve; event streams open (under lock) */
    int open_connections;
    int normal_slots;
    pf_http_hosts *hosts; /* the Host allowlist (http_guard.h) */
    pf_http_watch *watch; /* request deadlines and eviction of slow clients */
    int streams;
    /* the data roots resolved at start (o.limits.data_roots points here) */
    char data_roots[COORD_MAX_DATA_ROOTS][PATH_MAX];
    const char *data_root_ptrs[COORD_MAX_DATA_ROOTS];
    /* refusals logged at most once a second (under stats_lock) */
    double refusal_logged;
    uint64_t refusals_unlogged;
};

typedef struct coord_request {
    struct MHD_Connection *conn;
    const char *method;
    const char *path;
    const char *body; /* NUL-terminated; NULL when empty */
    size_t body_len;
    const char *seg[8]; /* path segments after /api/v1/ */
    int n_seg;
} coord_request;

typedef struct coord_reply {
    int status;
    json_t *json;             /* body (stolen), or NULL */
    char *text;               /* body (owned, pf_free), used when json is NULL */
    const char *content_type; /* for text */
    char location[512];
    const char *allow; /* for 405 */
    int retry_after;   /* seconds for a Retry-After header; 0 = none */
    int close;         /* send "Connection: close" and end the connection */
} coord_reply;

/* --- reading and answering a request (http_reply.c) --- */

/* Sets a JSON reply (steals json; NULL means out of memory -> 500). */
void coord_reply_json(coord_reply *r, int status, json_t *json);
/* Sets an application/problem+json reply; errors (stolen, may be NULL) is an array of
 * {pointer, message}. */
void coord_reply_problem(coord_reply *r, int status, json_t *errors, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Parses a JSON body that must be an object; on failure sets a 400 reply naming the
 * problem and returns NULL. */
json_t *coord_parse_object(const coord_request *rq, coord_reply *rp);
/* Rejects keys of obj not in allowed (NULL-terminated): 400 naming the first one; 0 = ok. */
int coord_check_keys(json_t *obj, const char *const *allowed, const char *where, coord_reply *rp);
/* Query argument, or NULL. */
const char *coord_query(const coord_request *rq, const char *name);
/* Parses an integer query argument in [min, max] (absent: fallback); -1 + 400 when bad. */
int coord_query_long(const coord_request *rq, coord_reply *rp, const char *name, long long min,
                     long long max, long long fallback, long long *out);

/* --- the commit step (commit.c) --- */

/* Persists what the cluster marked dirty plus, inside the same transaction, whatever
 * extra() writes (may be NULL), then publishes the queued events. Caller holds s->lock.
 * Returns 0, or -1 after rolling back (the in-memory state is reloaded from the database
 * so it matches what was committed). */
int coord_commit(coord_server *s, double now, int (*extra)(coord_store *st, void *ctx), void *ctx);

/* The wall clock, Unix seconds: the `now` of every handler. */
double coord_now(void);
/* Frees the recent events kept for the streams (at destroy). */
void coord_ring_clear(coord_server *s);

/* --- the route handlers (routes_*.c) --- */

/* Route handlers: return 1 when they handled the path (rp set), 0 when it is not theirs. */
int coord_routes_jobs(coord_server *s, coord_request *rq, coord_reply *rp);
int coord_routes_nodes(coord_server *s, coord_request *rq, coord_reply *rp);
/* /api/v1/queues (routes_queues.c) */
int coord_routes_queues(coord_server *s, coord_request *rq, coord_reply *rp);
/* /livez /readyz /version /metrics; rq->path is the full path. */
int coord_routes_ops(coord_server *s, coord_request *rq, coord_reply *rp);

/* --- the event stream (events_stream.c) --- */

/* A 200 response streaming the events after `since` (-1: from now on) of `job` (NULL or "":
 * every job) to the subscriber on socket fd (-1: unknown, its leaving is then seen only when
 * a write fails). It holds a place in the --max-streams budget until libmicrohttpd frees
 * it. NULL with *full = 1 when every place is taken; NULL with *full = 0 when out of memory. */
struct MHD_Response *coord_events_response(coord_server *s, int fd, const char *job, int64_t since,
                                           int *full);

/* --- the HTTP daemon (http.c) --- */

/* Starts the HTTP daemon; NULL with err set when it cannot listen. */
struct MHD_Daemon *coord_http_start(coord_server *s, pf_error *err);

#endif
