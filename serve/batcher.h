/* batcher.h - gathers the examples of concurrent predict requests into one forward pass.
 *
 * One thread runs the model. A request's examples wait in a FIFO queue; once the first one
 * is there the thread waits at most max_wait seconds for more, then takes requests in order
 * while their examples fit max_batch (a request larger than max_batch goes alone, in one
 * pass of up to `capacity` examples), copies them into one batch, runs it and hands each request
 * its outputs. A request whose deadline passed before its turn is answered 504 without running; a
 * queue holding max_queued examples refuses more (503), so memory stays bounded whatever the load.
 *
 * A request that finds the queue empty and the model idle (with max_wait 0) may instead run at
 * once on its own thread (serve_batcher_run_now); the model is never run by two threads.
 *
 * Thread-safe: serve_batcher_submit and serve_batcher_run_now may be called from any thread.
 */
#ifndef PSFLOW_SERVE_BATCHER_H
#define PSFLOW_SERVE_BATCHER_H

#include <stdint.h>

#include "psflow/status.h"

typedef struct serve_item serve_item;

/* Called on the batcher's thread when an item is done: item->status is 200 (outputs in
 * item->y) or the HTTP status of the refusal. The item belongs to the caller again. */
typedef void (*serve_done_fn)(serve_item *item);

struct serve_item {
    /* set by the caller */
    const float *x; /* [n * width] */
    int n;
    float *y;        /* [n * outputs], room the caller gives */
    double deadline; /* pf_clock_now() seconds after which it is not run */
    serve_done_fn done;
    void *ctx;
    /* set by the batcher before done() */
    int status;
    int64_t version;  /* the model version that answered */
    double queued_s;  /* time it waited for its batch */
    int batch;        /* examples in the forward pass it was part of */
    serve_item *next; /* the batcher's */
};

/* Runs x[n * width] (n <= max_batch) into y[n * outputs]; returns the model version that
 * answered, or -1 when none can (no model loaded: every item of the batch gets 503). */
typedef int64_t (*serve_run_fn)(void *ctx, const float *x, int n, float *y);

typedef struct serve_batcher_options {
    int width, outputs;
    int max_batch;      /* examples of several requests gathered into one pass, >= 1 */
    int capacity;       /* examples one pass may hold, >= max_batch: a request up to this
                           size runs alone in one pass, so one version answers it whole */
    double max_wait;    /* seconds the first request waits for company, >= 0 */
    int64_t max_queued; /* examples waiting at most */
    serve_run_fn run;
    void *run_ctx;
} serve_batcher_options;

typedef struct serve_batcher serve_batcher;

/* Starts the thread. PF_ERR_NOMEM, PF_ERR_INVALID (a bound below 1), PF_ERR_IO (thread). */
pf_status serve_batcher_create(const serve_batcher_options *o, serve_batcher **out);

/* Queues item: returns 0, or 503 when the queue is full or the batcher is stopping (done is
 * then not called). */
int serve_batcher_submit(serve_batcher *b, serve_item *item);

/* Runs item at once on the calling thread when nothing waits and the model is idle, with
 * max_wait 0 (nobody to wait for): the common case at a moderate rate, which so saves the
 * two thread switches of a trip through the queue. Returns 1 with item->status, version and
 * batch set (done is not called), or 0 when the item must be submitted instead. */
int serve_batcher_run_now(serve_batcher *b, serve_item *item);

/* Examples waiting now and batches run so far. */
void serve_batcher_counts(serve_batcher *b, int64_t *queued, int64_t *batches);

/* Stops the thread; items still queued are done with 503, and later submits refused (503).
 * Idempotent. */
void serve_batcher_stop(serve_batcher *b);

/* serve_batcher_stop, then frees b. NULL is a no-op. */
void serve_batcher_destroy(serve_batcher *b);

#endif
