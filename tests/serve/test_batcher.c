/* test_batcher.c - serve/batcher.h with a fake model (y0 = 2 x0, y1 = x1 + x2): one item, many
 * items from several threads at once (each done once, right outputs, batches within max_batch),
 * an item larger than max_batch run in passes, a deadline already past (504, not run), a full
 * queue (503), a model that cannot answer (503), and a stop with items queued; a request run at
 * once on its own thread when the model is idle (not with max_wait > 0, nor while a batch
 * runs), and threads mixing both ways without the model ever running twice at once.
 * Every wait is on a condition with a generous deadline; nothing asserts on timing.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/clock.h"
#include "psflow/mem.h"
#include "serve/batcher.h"

enum { WIDTH = 3, OUTPUTS = 2, MAX_N = 32 };
#define WAIT_S 30.0

/* The fake model: what it ran, and a gate that can hold it inside run. */
typedef struct fake {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t version;  /* returned by run; -1: no model */
    int runs;         /* calls */
    int64_t examples; /* examples run */
    int max_n;        /* the largest n run */
    int gated;        /* run waits while gated */
    int inside;       /* runs that have entered */
    int active;       /* runs in progress now */
    int max_active;   /* the most at once: the model is never run by two threads */
    double slow_s;    /* run takes at least this long */
} fake;

static fake F;

/* The items' bookkeeping: done() calls, under F.mu. */
typedef struct test_item {
    serve_item it; /* first: done() gets it back as the test item */
    float x[MAX_N * WIDTH], y[MAX_N * OUTPUTS];
    int done_calls;
} test_item;

static int64_t done_total;

static int64_t fake_run(void *ctx, const float *x, int n, float *y) {
    fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->inside++;
    if (++f->active > f->max_active)
        f->max_active = f->active;
    pthread_cond_broadcast(&f->cv);
    while (f->gated)
        pthread_cond_wait(&f->cv, &f->mu);
    f->runs++;
    f->examples += n;
    if (n > f->max_n)
        f->max_n = n;
    int64_t version = f->version;
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < n; i++) {
        y[i * OUTPUTS] = 2 * x[i * WIDTH];
        y[i * OUTPUTS + 1] = x[i * WIDTH + 1] + x[i * WIDTH + 2];
    }
    if (f->slow_s > 0)
        pf_clock_sleep(f->slow_s);
    pthread_mutex_lock(&f->mu);
    f->active--;
    pthread_mutex_unlock(&f->mu);
    return version;
}

static void on_done(serve_item *item) {
    test_item *t = (test_item *)item;
    pthread_mutex_lock(&F.mu);
    t->done_calls++;
    done_total++;
    pthread_cond_broadcast(&F.cv);
    pthread_mutex_unlock(&F.mu);
}

/* Waits until cond(arg) holds under F.mu; fails after WAIT_S. */
static void wait_for(int (*cond)(void *), void *arg) {
    struct timespec until = pf_clock_deadline(WAIT_S);
    pthread_mutex_lock(&F.mu);
    int ok = 1;
    while (!cond(arg) && ok)
        ok = pthread_cond_timedwait(&F.cv, &F.mu, &until) == 0;
    int held = cond(arg);
    pthread_mutex_unlock(&F.mu);
    assert_true(held);
}

static int done_reaches(void *arg) {
    return done_total >= *(int64_t *)arg;
}

static int inside_reaches(void *arg) {
    return F.inside >= *(int *)arg;
}

static void wait_done(int64_t total) {
    wait_for(done_reaches, &total);
}

static void wait_inside(int n) {
    wait_for(inside_reaches, &n);
}

static void set_gate(int gated) {
    pthread_mutex_lock(&F.mu);
    F.gated = gated;
    pthread_cond_broadcast(&F.cv);
    pthread_mutex_unlock(&F.mu);
}

static int setup(void **state) {
    (void)state;
    memset(&F, 0, sizeof F);
    pthread_mutex_init(&F.mu, NULL);
    pthread_cond_init(&F.cv, NULL); /* realtime: pf_clock_deadline's clock */
    F.version = 7;
    done_total = 0;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pthread_cond_destroy(&F.cv);
    pthread_mutex_destroy(&F.mu);
    return 0;
}

static serve_batcher *start(int max_batch, double max_wait, int64_t max_queued) {
    serve_batcher_options o = {.width = WIDTH,
                               .outputs = OUTPUTS,
                               .max_batch = max_batch,
                               .max_wait = max_wait,
                               .max_queued = max_queued,
                               .run = fake_run,
                               .run_ctx = &F};
    serve_batcher *b;
    assert_int_equal(serve_batcher_create(&o, &b), PF_OK);
    return b;
}

/* An item of n examples whose values start at `base`, due in a minute. */
static void fill(test_item *t, int n, float base) {
    memset(t, 0, sizeof *t);
    assert_true(n <= MAX_N);
    for (int i = 0; i < n * WIDTH; i++)
        t->x[i] = base + (float)i;
    for (int i = 0; i < n * OUTPUTS; i++)
        t->y[i] = -12345;
    t->it.x = t->x;
    t->it.y = t->y;
    t->it.n = n;
    t->it.deadline = pf_clock_now() + 60;
    t->it.done = on_done;
}

static void check_outputs(const test_item *t) {
    for (int i = 0; i < t->it.n; i++) {
        assert_float_equal(t->y[i * OUTPUTS], 2 * t->x[i * WIDTH], 0);
        assert_float_equal(t->y[i * OUTPUTS + 1], t->x[i * WIDTH + 1] + t->x[i * WIDTH + 2], 0);
    }
}

static void test_options(void **state) {
    (void)state;
    serve_batcher_options o = {.width = WIDTH,
                               .outputs = OUTPUTS,
                               .max_batch = 0,
                               .max_wait = 0,
                               .max_queued = 10,
                               .run = fake_run};
    serve_batcher *b = (serve_batcher *)(void *)&o; /* not NULL: create must clear it */
    assert_int_equal(serve_batcher_create(&o, &b), PF_ERR_INVALID);
    assert_null(b);
    o.max_batch = 4, o.max_wait = -1;
    assert_int_equal(serve_batcher_create(&o, &b), PF_ERR_INVALID);
    o.max_wait = 0, o.run = NULL;
    assert_int_equal(serve_batcher_create(&o, &b), PF_ERR_INVALID);
    serve_batcher_destroy(NULL);
}

static void test_single_item(void **state) {
    (void)state;
    serve_batcher *b = start(8, 0.001, 100);
    static test_item t;
    fill(&t, 2, 1);
    assert_int_equal(serve_batcher_submit(b, &t.it), 0);
    wait_done(1);
    assert_int_equal(t.done_calls, 1);
    assert_int_equal(t.it.status, 200);
    assert_int_equal(t.it.version, 7);
    assert_int_equal(t.it.batch, 2);
    assert_true(t.it.queued_s >= 0);
    check_outputs(&t);
    int64_t queued, batches;
    serve_batcher_counts(b, &queued, &batches);
    assert_int_equal(queued, 0);
    assert_int_equal(batches, 1);
    serve_batcher_destroy(b);
    assert_int_equal(t.done_calls, 1);
}

enum { THREADS = 4, PER_THREAD = 60 };

typedef struct submitter {
    serve_batcher *b;
    test_item *items;
    int refused;
} submitter;

static void *submit_all(void *arg) {
    submitter *s = arg;
    for (int i = 0; i < PER_THREAD; i++)
        if (serve_batcher_submit(s->b, &s->items[i].it) != 0)
            s->refused++;
    return NULL;
}

static void test_many_threads(void **state) {
    (void)state;
    const int max_batch = 8;
    serve_batcher *b = start(max_batch, 0.0005, 100000);
    test_item *items = pf_calloc(THREADS * PER_THREAD, sizeof *items);
    assert_non_null(items);
    int64_t examples = 0;
    for (int i = 0; i < THREADS * PER_THREAD; i++) {
        fill(&items[i], 1 + i % 5, (float)(1000 * i));
        examples += items[i].it.n;
    }
    submitter subs[THREADS];
    pthread_t threads[THREADS];
    for (int k = 0; k < THREADS; k++) {
        subs[k] = (submitter){.b = b, .items = items + k * PER_THREAD};
        assert_int_equal(pthread_create(&threads[k], NULL, submit_all, &subs[k]), 0);
    }
    for (int k = 0; k < THREADS; k++) {
        pthread_join(threads[k], NULL);
        assert_int_equal(subs[k].refused, 0);
    }
    wait_done(THREADS * PER_THREAD);
    serve_batcher_destroy(b);
    for (int i = 0; i < THREADS * PER_THREAD; i++) {
        const test_item *t = &items[i];
        assert_int_equal(t->done_calls, 1);
        assert_int_equal(t->it.status, 200);
        assert_int_equal(t->it.version, 7);
        assert_true(t->it.batch >= t->it.n && t->it.batch <= max_batch);
        check_outputs(t);
    }
    assert_int_equal(done_total, THREADS * PER_THREAD);
    assert_int_equal(F.examples, examples);
    assert_true(F.max_n <= max_batch);
    assert_true(F.runs <= THREADS * PER_THREAD);
    pf_free(items);
}

static void test_item_in_passes(void **state) {
    (void)state;
    serve_batcher *b = start(8, 0, 100);
    static test_item t;
    fill(&t, 20, 5);
    assert_int_equal(serve_batcher_submit(b, &t.it), 0);
    wait_done(1);
    serve_batcher_destroy(b);
    assert_int_equal(t.done_calls, 1);
    assert_int_equal(t.it.status, 200);
    assert_int_equal(t.it.version, 7);
    assert_int_equal(t.it.batch, 20);
    check_outputs(&t);
    assert_int_equal(F.runs, 3); /* 8 + 8 + 4 */
    assert_int_equal(F.max_n, 8);
    assert_int_equal(F.examples, 20);
}

static void test_deadline_passed(void **state) {
    (void)state;
    serve_batcher *b = start(8, 0, 100);
    static test_item late, due;
    fill(&late, 2, 1);
    late.it.deadline = pf_clock_now() - 1;
    fill(&due, 1, 9);
    assert_int_equal(serve_batcher_submit(b, &late.it), 0);
    wait_done(1);
    assert_int_equal(late.done_calls, 1);
    assert_int_equal(late.it.status, 504);
    assert_int_equal(late.y[0], -12345); /* not written */
    pthread_mutex_lock(&F.mu);
    assert_int_equal(F.runs, 0);
    pthread_mutex_unlock(&F.mu);
    /* the batcher goes on */
    assert_int_equal(serve_batcher_submit(b, &due.it), 0);
    wait_done(2);
    assert_int_equal(due.it.status, 200);
    check_outputs(&due);
    serve_batcher_destroy(b);
    assert_int_equal(F.examples, 1);
}

static void test_queue_full(void **state) {
    (void)state;
    serve_batcher *b = start(2, 0, 4);
    static test_item first, a, c, over, after;
    fill(&first, 1, 1);
    fill(&a, 2, 10);
    fill(&c, 2, 20);
    fill(&over, 1, 30);
    fill(&after, 1, 40);
    set_gate(1);
    assert_int_equal(serve_batcher_submit(b, &first.it), 0);
    wait_inside(1); /* first is off the queue, inside run */
    assert_int_equal(serve_batcher_submit(b, &a.it), 0);
    assert_int_equal(serve_batcher_submit(b, &c.it), 0);
    int64_t queued, batches;
    serve_batcher_counts(b, &queued, &batches);
    assert_int_equal(queued, 4);
    assert_int_equal(serve_batcher_submit(b, &over.it), 503);
    set_gate(0);
    wait_done(3);
    assert_int_equal(serve_batcher_submit(b, &after.it), 0); /* room again */
    wait_done(4);
    serve_batcher_destroy(b);
    assert_int_equal(over.done_calls, 0);
    test_item *ran[] = {&first, &a, &c, &after};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ran[i]->done_calls, 1);
        assert_int_equal(ran[i]->it.status, 200);
        check_outputs(ran[i]);
    }
    assert_int_equal(done_total, 4);
}

static void test_no_model(void **state) {
    (void)state;
    F.version = -1;
    serve_batcher *b = start(4, 0, 100);
    static test_item small, big;
    fill(&small, 2, 1);
    fill(&big, 9, 1);
    assert_int_equal(serve_batcher_submit(b, &small.it), 0);
    wait_done(1);
    assert_int_equal(serve_batcher_submit(b, &big.it), 0);
    wait_done(2);
    serve_batcher_destroy(b);
    assert_int_equal(small.done_calls, 1);
    assert_int_equal(small.it.status, 503);
    assert_int_equal(small.it.version, -1);
    assert_int_equal(small.y[0], -12345);
    assert_int_equal(big.done_calls, 1);
    assert_int_equal(big.it.status, 503);
}

static void *stop_thread(void *arg) {
    serve_batcher_stop(arg);
    return NULL;
}

static void test_stop_with_items_queued(void **state) {
    (void)state;
    enum { PROBES = 10000 };
    serve_batcher *b = start(4, 0, PROBES + 10);
    static test_item first, a, c, later;
    test_item *probes = pf_calloc(PROBES, sizeof *probes);
    assert_non_null(probes);
    fill(&first, 1, 1);
    fill(&a, 3, 2);
    fill(&c, 2, 3);
    set_gate(1);
    assert_int_equal(serve_batcher_submit(b, &first.it), 0);
    wait_inside(1);
    assert_int_equal(serve_batcher_submit(b, &a.it), 0);
    assert_int_equal(serve_batcher_submit(b, &c.it), 0);
    /* Stop from another thread (it joins the batcher, held inside run); a submit refused
     * with 503 shows the batcher is stopping. Probes accepted before that stay queued. */
    pthread_t stopper;
    assert_int_equal(pthread_create(&stopper, NULL, stop_thread, b), 0);
    int accepted = 0;
    double until = pf_clock_now() + WAIT_S;
    for (;;) {
        assert_true(accepted < PROBES && pf_clock_now() < until);
        fill(&probes[accepted], 1, 4);
        if (serve_batcher_submit(b, &probes[accepted].it) != 0)
            break;
        accepted++;
        pf_clock_sleep(0.001); /* a polling period */
    }
    set_gate(0);
    pthread_join(stopper, NULL);
    assert_int_equal(first.done_calls, 1);
    assert_int_equal(first.it.status, 200);
    check_outputs(&first);
    assert_int_equal(a.done_calls, 1);
    assert_int_equal(a.it.status, 503);
    assert_int_equal(c.done_calls, 1);
    assert_int_equal(c.it.status, 503);
    for (int i = 0; i < accepted; i++) {
        assert_int_equal(probes[i].done_calls, 1);
        assert_int_equal(probes[i].it.status, 503);
    }
    assert_int_equal(probes[accepted].done_calls, 0);
    assert_int_equal(F.runs, 1);
    fill(&later, 1, 5);
    assert_int_equal(serve_batcher_submit(b, &later.it), 503);
    serve_batcher_stop(b); /* idempotent */
    serve_batcher_destroy(b);
    assert_int_equal(later.done_calls, 0);
    assert_int_equal(done_total, 3 + accepted);
    pf_free(probes);
}

/* Idle, max_wait 0: the item runs on this thread, done() not called. */
static void test_run_now(void **state) {
    (void)state;
    serve_batcher *b = start(8, 0, 100);
    static test_item t;
    fill(&t, 3, 2);
    assert_int_equal(serve_batcher_run_now(b, &t.it), 1);
    assert_int_equal(t.done_calls, 0);
    assert_int_equal(t.it.status, 200);
    assert_int_equal(t.it.version, 7);
    assert_int_equal(t.it.batch, 3);
    check_outputs(&t);
    int64_t queued, batches;
    serve_batcher_counts(b, &queued, &batches);
    assert_int_equal(queued, 0);
    assert_int_equal(batches, 1);
    fill(&t, 3, 2);
    t.it.deadline = pf_clock_now() - 1; /* already late: 504, not run */
    assert_int_equal(serve_batcher_run_now(b, &t.it), 1);
    assert_int_equal(t.it.status, 504);
    assert_int_equal(F.runs, 1);
    serve_batcher_destroy(b);
    /* with max_wait the request waits for company: never at once */
    b = start(8, 0.001, 100);
    fill(&t, 1, 0);
    assert_int_equal(serve_batcher_run_now(b, &t.it), 0);
    serve_batcher_destroy(b);
    assert_int_equal(t.done_calls, 0);
}

/* While the thread runs a batch the model is busy: the item goes through the queue. */
static void test_run_now_busy(void **state) {
    (void)state;
    serve_batcher *b = start(8, 0, 100);
    static test_item a, c;
    fill(&a, 1, 1);
    fill(&c, 1, 5);
    set_gate(1);
    assert_int_equal(serve_batcher_submit(b, &a.it), 0);
    wait_inside(1);
    assert_int_equal(serve_batcher_run_now(b, &c.it), 0);
    assert_int_equal(serve_batcher_submit(b, &c.it), 0);
    set_gate(0);
    wait_done(2);
    assert_int_equal(a.it.status, 200);
    assert_int_equal(c.it.status, 200);
    check_outputs(&a);
    check_outputs(&c);
    assert_int_equal(F.max_active, 1);
    serve_batcher_destroy(b);
}

typedef struct mixer {
    serve_batcher *b;
    test_item *items;
    int at_once; /* items that ran on this thread */
    int refused;
} mixer;

static void *mix_all(void *arg) {
    mixer *m = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        if (serve_batcher_run_now(m->b, &m->items[i].it)) {
            m->items[i].done_calls++; /* counted as answered; only this thread touches it */
            m->at_once++;
            pthread_mutex_lock(&F.mu);
            done_total++;
            pthread_mutex_unlock(&F.mu);
        } else if (serve_batcher_submit(m->b, &m->items[i].it) != 0) {
            m->refused++;
        }
    }
    return NULL;
}

static void test_run_now_threads(void **state) {
    (void)state;
    F.slow_s = 0.0002; /* runs long enough for the threads to meet */
    serve_batcher *b = start(8, 0, 100000);
    test_item *items = pf_calloc(THREADS * PER_THREAD, sizeof *items);
    assert_non_null(items);
    for (int i = 0; i < THREADS * PER_THREAD; i++)
        fill(&items[i], 1 + i % 4, (float)(100 * i));
    mixer mx[THREADS];
    pthread_t threads[THREADS];
    for (int k = 0; k < THREADS; k++) {
        mx[k] = (mixer){.b = b, .items = items + k * PER_THREAD};
        assert_int_equal(pthread_create(&threads[k], NULL, mix_all, &mx[k]), 0);
    }
    int at_once = 0;
    for (int k = 0; k < THREADS; k++) {
        pthread_join(threads[k], NULL);
        assert_int_equal(mx[k].refused, 0);
        at_once += mx[k].at_once;
    }
    wait_done(THREADS * PER_THREAD);
    serve_batcher_destroy(b);
    for (int i = 0; i < THREADS * PER_THREAD; i++) {
        assert_int_equal(items[i].done_calls, 1);
        assert_int_equal(items[i].it.status, 200);
        check_outputs(&items[i]);
    }
    assert_int_equal(F.max_active, 1);
    print_message("%d of %d items ran at once on their own thread\n", at_once,
                  THREADS * PER_THREAD);
    pf_free(items);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_single_item, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_item_in_passes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_passed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_with_items_queued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_now, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_now_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_now_threads, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
