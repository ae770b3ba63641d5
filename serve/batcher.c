/* batcher.c - one thread batching predict requests (see batcher.h). */
#include "serve/batcher.h"

#include <pthread.h>
#include <string.h>

#include "psflow/clock.h"
#include "psflow/mem.h"

struct serve_batcher {
    serve_batcher_options o;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    serve_item *head, *tail;
    int64_t queued, batches;
    int running; /* the model is in use: by the thread's batch or by a request run at once */
    int stopping, joined;
    float *x, *y; /* [capacity * width], [capacity * outputs] */
};

static void finish(serve_item *it, int status, int64_t version, double now, int batch) {
    it->status = status;
    it->version = version;
    it->batch = batch;
    it->queued_s = now - it->queued_s; /* queued_s held the time it was queued */
    it->done(it);
}

/* Takes the requests of the next batch off the queue (mu held): in order while they fit,
 * at least one. */
static serve_item *take(serve_batcher *b) {
    serve_item *first = b->head, *last = first;
    int n = first->n;
    while (last->next && n + last->next->n <= b->o.max_batch) {
        last = last->next;
        n += last->n;
    }
    b->head = last->next;
    if (!b->head)
        b->tail = NULL;
    last->next = NULL;
    for (serve_item *it = first; it; it = it->next)
        b->queued -= it->n;
    return first;
}

/* Runs one request larger than max_batch alone: one pass when it fits the capacity (else, a
 * caller's mistake, passes that must all see one version). */
static void run_alone(serve_batcher *b, serve_item *it, double now) {
    int64_t version = -1;
    for (int at = 0; at < it->n; at += b->o.capacity) {
        int n = it->n - at < b->o.capacity ? it->n - at : b->o.capacity;
        int64_t v = b->o.run(b->o.run_ctx, it->x + (size_t)at * (size_t)b->o.width, n,
                             it->y + (size_t)at * (size_t)b->o.outputs);
        if (v < 0 || (version >= 0 && v != version)) { /* none, or reloaded between passes */
            version = -1;
            break;
        }
        version = v;
    }
    finish(it, version < 0 ? 503 : 200, version, now, it->n);
}

static void run_batch(serve_batcher *b, serve_item *list) {
    double now = pf_clock_now();
    int n = 0;
    serve_item *live = NULL, **tail = &live;
    for (serve_item *it = list, *next; it; it = next) {
        next = it->next;
        it->next = NULL;
        if (now > it->deadline) {
            finish(it, 504, -1, now, 0);
            continue;
        }
        if (it->n > b->o.max_batch) {
            run_alone(b, it, now);
            continue;
        }
        memcpy(b->x + (size_t)n * (size_t)b->o.width, it->x,
               (size_t)it->n * (size_t)b->o.width * sizeof(float));
        n += it->n;
        *tail = it, tail = &it->next;
    }
    if (!live)
        return;
    int64_t version = b->o.run(b->o.run_ctx, b->x, n, b->y);
    int at = 0;
    for (serve_item *it = live, *next; it; it = next) {
        next = it->next;
        if (version >= 0)
            memcpy(it->y, b->y + (size_t)at * (size_t)b->o.outputs,
                   (size_t)it->n * (size_t)b->o.outputs * sizeof(float));
        at += it->n;
        finish(it, version >= 0 ? 200 : 503, version, now, n);
    }
}

static void *loop(void *arg) {
    serve_batcher *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while ((!b->head || b->running) && !b->stopping)
            pthread_cond_wait(&b->cv, &b->mu);
        if (b->stopping)
            break;
        /* The first request waits up to max_wait for a full batch. */
        struct timespec until = pf_clock_deadline(b->o.max_wait);
        while (!b->stopping && b->queued < b->o.max_batch &&
               pthread_cond_timedwait(&b->cv, &b->mu, &until) == 0) {
        }
        if (b->stopping)
            break;
        if (b->running) /* a request took the model while this one waited for company */
            continue;
        serve_item *list = take(b);
        b->batches++;
        b->running = 1;
        pthread_mutex_unlock(&b->mu);
        run_batch(b, list);
        pthread_mutex_lock(&b->mu);
        b->running = 0;
    }
    serve_item *left = b->head;
    b->head = b->tail = NULL;
    b->queued = 0;
    pthread_mutex_unlock(&b->mu);
    double now = pf_clock_now();
    for (serve_item *it = left, *next; it; it = next) {
        next = it->next;
        finish(it, 503, -1, now, 0);
    }
    return NULL;
}

pf_status serve_batcher_create(const serve_batcher_options *o, serve_batcher **out) {
    *out = NULL;
    if (o->width < 1 || o->outputs < 1 || o->max_batch < 1 || o->max_queued < 1 ||
        o->max_wait < 0 || !o->run || (o->capacity && o->capacity < o->max_batch))
        return PF_ERR_INVALID;
    serve_batcher *b = pf_calloc(1, sizeof *b);
    if (!b)
        return PF_ERR_NOMEM;
    b->o = *o;
    if (!b->o.capacity)
        b->o.capacity = o->max_batch;
    b->x = pf_mallocarray((size_t)b->o.capacity * (size_t)o->width, sizeof(float));
    b->y = pf_mallocarray((size_t)b->o.capacity * (size_t)o->outputs, sizeof(float));
    if (!b->x || !b->y) {
        pf_free(b->x);
        pf_free(b->y);
        pf_free(b);
        return PF_ERR_NOMEM;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL); /* realtime: pf_clock_deadline's clock */
    if (pthread_create(&b->thread, NULL, loop, b) != 0) {
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        pf_free(b->x);
        pf_free(b->y);
        pf_free(b);
        return PF_ERR_IO;
    }
    *out = b;
    return PF_OK;
}

int serve_batcher_submit(serve_batcher *b, serve_item *item) {
    pthread_mutex_lock(&b->mu);
    if (b->stopping || (b->queued > 0 && b->queued + item->n > b->o.max_queued)) {
        pthread_mutex_unlock(&b->mu);
        return 503;
    }
    item->next = NULL;
    item->queued_s = pf_clock_now();
    if (b->tail)
        b->tail->next = item;
    else
        b->head = item;
    b->tail = item;
    b->queued += item->n;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return 0;
}

int serve_batcher_run_now(serve_batcher *b, serve_item *item) {
    pthread_mutex_lock(&b->mu);
    int now =
        b->o.max_wait == 0 && !b->head && !b->running && !b->stopping && item->n <= b->o.capacity;
    if (now) {
        b->running = 1;
        b->batches++;
    }
    pthread_mutex_unlock(&b->mu);
    if (!now)
        return 0;
    double t = pf_clock_now();
    int64_t version = t > item->deadline ? -1 : b->o.run(b->o.run_ctx, item->x, item->n, item->y);
    item->status = t > item->deadline ? 504 : version < 0 ? 503 : 200;
    item->version = version;
    item->batch = item->n;
    item->queued_s = 0;
    pthread_mutex_lock(&b->mu);
    b->running = 0;
    if (b->head) /* requests that came meanwhile: the thread takes them */
        pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return 1;
}

void serve_batcher_counts(serve_batcher *b, int64_t *queued, int64_t *batches) {
    pthread_mutex_lock(&b->mu);
    *queued = b->queued;
    *batches = b->batches;
    pthread_mutex_unlock(&b->mu);
}

void serve_batcher_stop(serve_batcher *b) {
    pthread_mutex_lock(&b->mu);
    int joined = b->joined;
    b->stopping = b->joined = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (!joined)
        pthread_join(b->thread, NULL);
}

void serve_batcher_destroy(serve_batcher *b) {
    if (!b)
        return;
    serve_batcher_stop(b);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    pf_free(b->x);
    pf_free(b->y);
    pf_free(b);
}
