/* events_stream.c - the coordinator's Server-Sent Events stream (GET /api/v1/events): the
 * events after a given id, from the in-memory ring or, for older ids, from the store, with
 * keepalives, a subscriber that left noticed within a second, and a place in the
 * --max-streams budget held for the stream's life. http.c checks the request and answers
 * the refusals; this file makes the response.
 *
 * DESIGN: the stream's thread (libmicrohttpd's, one per connection) sleeps on the server's
 * condition variable between events, waking every STREAM_PEER_CHECK seconds to look for a
 * closed subscriber; the events collected for one read are bounded (STREAM_BUFFER_MAX, and
 * collection stops past 256 KiB).
 */
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "psflow/buf.h"
#include "psflow/clock.h"
#include "psflow/mem.h"
#include "coordinator/coordinator_internal.h"

#define STREAM_BUFFER_MAX (16u << 20) /* bytes of events collected for one read */
#define STREAM_KEEPALIVE  10.0        /* seconds without events before a comment line */
#define STREAM_PEER_CHECK 1.0         /* seconds between looks for a subscriber that left */

typedef struct stream {
    coord_server *s;
    int64_t last_id;
    char job[PF_NAME_MAX + 1]; /* "" = every job */
    pf_buf out;                /* events collected, sent from `off` on */
    size_t off;
    int fd; /* the subscriber's socket, watched for its end; -1 when unknown */
} stream;

/* Whether the subscriber closed its end: an idle stream would otherwise hold its place in
 * --max-streams until a write fails, a keepalive or two later. A subscriber sends nothing
 * after its request, so readable with nothing to read is the end. */
static int peer_closed(const stream *st) {
    if (st->fd < 0)
        return 0;
    char byte;
    ssize_t n = recv(st->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int wants(const stream *st, const char *job) {
    return !st->job[0] || !job[0] || !strcmp(st->job, job);
}

static int add_event(int64_t id, const char *kind, const char *job, const char *data, void *ctx) {
    stream *st = ctx;
    st->last_id = id;
    if (wants(st, job))
        pf_buf_printf(&st->out, "id: %" PRId64 "\nevent: %s\ndata: %s\n\n", id, kind, data);
    return st->out.len > 256 * 1024;
}

/* Fills st->out with the events after st->last_id; caller holds the lock. */
static void collect(stream *st) {
    coord_server *s = st->s;
    if (st->last_id + 1 >= s->ring_first) {
        for (int64_t id = st->last_id + 1; id <= s->ring_last; id++) {
            coord_ring_entry *e = &s->ring[(id - 1) % COORD_RING_SIZE];
            if (add_event(id, e->kind, e->job, e->data, st))
                break;
        }
    } else {
        coord_store_events_after(s->store, st->last_id, NULL, NULL, 500, add_event, st);
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    stream *st = cls;
    coord_server *s = st->s;
    if (st->off == st->out.len) {
        st->off = 0;
        pf_buf_reset(&st->out);
        pthread_mutex_lock(&s->lock);
        double idle_since = pf_clock_now();
        while (!s->stopping && st->out.len == 0) {
            collect(st);
            if (st->out.len)
                break;
            struct timespec until = pf_clock_deadline(STREAM_PEER_CHECK);
            if (pthread_cond_timedwait(&s->changed, &s->lock, &until) != ETIMEDOUT)
                continue;
            collect(st);
            if (st->out.len)
                break;
            if (peer_closed(st)) {
                pthread_mutex_unlock(&s->lock);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            if (pf_clock_now() - idle_since >= STREAM_KEEPALIVE)
                pf_buf_printf(&st->out, ": keepalive\n\n");
        }
        pthread_mutex_unlock(&s->lock);
        if (s->stopping && st->out.len == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = st->out.len - st->off < max ? st->out.len - st->off : max;
    memcpy(out, st->out.data + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

/* Ends a stream: frees it and gives back its place in the --max-streams budget. */
static void stream_free(void *cls) {
    stream *st = cls;
    pthread_mutex_lock(&st->s->lock);
    st->s->streams--;
    pthread_mutex_unlock(&st->s->lock);
    pf_buf_deinit(&st->out);
    pf_free(st);
}

/* Takes a place in the --max-streams budget; 0 when every place is taken. */
static int stream_admit(coord_server *s) {
    pthread_mutex_lock(&s->lock);
    int ok = s->streams < s->o.max_streams;
    if (ok)
        s->streams++;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

struct MHD_Response *coord_events_response(coord_server *s, int fd, const char *job, int64_t since,
                                           int *full) {
    *full = 0;
    if (!stream_admit(s)) {
        *full = 1;
        return NULL;
    }
    stream *st = pf_calloc(1, sizeof *st);
    if (!st) {
        pthread_mutex_lock(&s->lock);
        s->streams--;
        pthread_mutex_unlock(&s->lock);
        return NULL;
    }
    pf_buf_init(&st->out, STREAM_BUFFER_MAX);
    st->s = s;
    st->fd = fd;
    snprintf(st->job, sizeof st->job, "%s", job ? job : "");
    pthread_mutex_lock(&s->lock);
    st->last_id = since >= 0 ? since : s->ring_last;
    pthread_mutex_unlock(&s->lock);
    /* The first bytes tell the client the stream is open (and how soon to retry). */
    if (pf_buf_printf(&st->out, "retry: 1000\n: connected\n\n") != PF_OK) {
        stream_free(st);
        return NULL;
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024,
                                                               stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return r;
}
