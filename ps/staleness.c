/* staleness.c - bounded staleness on one ps task (staleness.h).
 *
 * Every change happens on the ps's service thread under `mu`; that thread reads without
 * it, other threads (the agent's heartbeat) read a snapshot under it. The smallest live
 * clock is found by a scan over the tasks that have joined (up to the highest index), once
 * per applied push or pull, which is small next to the push's own apply.
 */
#include "ps/staleness.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "psflow/clock.h"
#include "psflow/mem.h"

typedef struct record {
    int conns;   /* open connections that said HELLO as this task */
    double last; /* when it last joined, pushed or pulled */
    uint64_t clock;
    int64_t max_lag;
    int64_t pull_lag; /* the lag its latest answered pull was answered at; -1 before any */
    uint64_t held;
    double held_secs;
} record;

struct ps_staleness {
    pthread_mutex_t mu;
    int n, hi; /* the table's size; 1 + the highest task index that joined */
    int64_t bound;
    double idle; /* a task silent this long is not counted (<= 0: never) */
    record *t;
};

ps_staleness *ps_staleness_create(int tasks, int64_t bound, double idle_secs) {
    ps_staleness *st = pf_calloc(1, sizeof *st);
    if (!st || tasks < 1 || !(st->t = pf_calloc((size_t)tasks, sizeof *st->t))) {
        pf_free(st);
        return NULL;
    }
    pthread_mutex_init(&st->mu, NULL);
    st->n = tasks;
    st->bound = bound;
    st->idle = idle_secs;
    for (int i = 0; i < tasks; i++)
        st->t[i].max_lag = st->t[i].pull_lag = -1;
    return st;
}

void ps_staleness_destroy(ps_staleness *st) {
    if (!st)
        return;
    pthread_mutex_destroy(&st->mu);
    pf_free(st->t);
    pf_free(st);
}

static int live(const ps_staleness *st, int task, double now) {
    const record *t = &st->t[task];
    return t->conns > 0 && (st->idle <= 0 || now - t->last <= st->idle);
}

/* The smallest clock of the live tasks other than `skip` (-1: none skipped); 0 and *any =
 * 0 when there is none. */
static uint64_t min_clock(const ps_staleness *st, int skip, double now, int *any) {
    uint64_t m = 0;
    *any = 0;
    for (int i = 0; i < st->hi; i++) {
        if (i == skip || !live(st, i, now))
            continue;
        if (!*any || st->t[i].clock < m)
            m = st->t[i].clock;
        *any = 1;
    }
    return m;
}

static int valid(const ps_staleness *st, int task) {
    return st && task >= 0 && task < st->n;
}

/* Task `task` shows signs of life at `now`. One that was not counted (it had no connection,
 * or was silent past the idle limit) comes back at no lower clock than the slowest of the
 * others: it pulls the newest values, and catching up with its old clock would hold every
 * other task back. A task that is ahead keeps its clock: reconnecting is no way around the
 * bound. Under mu. */
static void active(ps_staleness *st, int task, double now) {
    record *t = &st->t[task];
    if (!live(st, task, now) || t->last == 0) {
        int any;
        uint64_t m = min_clock(st, task, now, &any);
        if (any && m > t->clock)
            t->clock = m;
    }
    t->last = now;
}

void ps_staleness_join(ps_staleness *st, int task) {
    if (!valid(st, task))
        return;
    pthread_mutex_lock(&st->mu);
    double now = pf_clock_now();
    if (task >= st->hi)
        st->hi = task + 1;
    st->t[task].last = st->t[task].conns ? st->t[task].last : 0; /* counted anew */
    active(st, task, now);
    st->t[task].conns++;
    pthread_mutex_unlock(&st->mu);
}

void ps_staleness_leave(ps_staleness *st, int task) {
    if (!valid(st, task) || st->t[task].conns == 0)
        return;
    pthread_mutex_lock(&st->mu);
    st->t[task].conns--;
    pthread_mutex_unlock(&st->mu);
}

void ps_staleness_pushed(ps_staleness *st, int task) {
    if (!valid(st, task) || st->t[task].conns == 0)
        return;
    pthread_mutex_lock(&st->mu);
    active(st, task, pf_clock_now());
    st->t[task].clock++;
    pthread_mutex_unlock(&st->mu);
}

static int64_t lag_of(const ps_staleness *st, int task, double now) {
    if (!live(st, task, now))
        return -1;
    int any;
    uint64_t m = min_clock(st, -1, now, &any);
    return (int64_t)(st->t[task].clock - m);
}

int ps_staleness_ready(const ps_staleness *st, int task) {
    if (!valid(st, task))
        return 1;
    return lag_of(st, task, pf_clock_now()) <= st->bound;
}

int ps_staleness_pull(ps_staleness *st, int task) {
    if (!valid(st, task) || st->t[task].conns == 0)
        return 1;
    pthread_mutex_lock(&st->mu);
    active(st, task, pf_clock_now());
    pthread_mutex_unlock(&st->mu);
    return ps_staleness_ready(st, task);
}

void ps_staleness_answered(ps_staleness *st, int task, double held_secs) {
    if (!valid(st, task))
        return;
    pthread_mutex_lock(&st->mu);
    record *t = &st->t[task];
    int64_t lag = lag_of(st, task, pf_clock_now());
    if (lag > t->max_lag)
        t->max_lag = lag;
    t->pull_lag = lag;
    if (held_secs >= 0) {
        t->held++;
        t->held_secs += held_secs;
    }
    pthread_mutex_unlock(&st->mu);
}

int ps_staleness_snapshot(ps_staleness *st, ps_staleness_task *out, int max) {
    if (!st)
        return 0;
    pthread_mutex_lock(&st->mu);
    int n = st->hi < max ? st->hi : max;
    double now = pf_clock_now();
    for (int i = 0; i < n; i++) {
        const record *t = &st->t[i];
        out[i] = (ps_staleness_task){live(st, i, now), t->clock, lag_of(st, i, now), t->max_lag,
                                     t->pull_lag,      t->held,  t->held_secs};
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

int64_t ps_staleness_bound(const ps_staleness *st) {
    return st ? st->bound : -1;
}

size_t ps_staleness_json_close(ps_staleness *st, char *out, size_t len, size_t cap) {
    size_t at = len, end = cap > 48 ? cap - 48 : 0; /* room for the closing part */
    int first = 1, cut = 0, n = 0;
    if (st && at < end)
        n = snprintf(out + at, end - at, ",\"max_staleness\":%" PRId64 ",\"staleness\":[",
                     st->bound);
    if (st && n > 0 && at + (size_t)n < end) {
        at += (size_t)n;
        pthread_mutex_lock(&st->mu);
        double now = pf_clock_now();
        for (int i = 0; i < st->hi && !cut; i++) {
            const record *t = &st->t[i];
            if (t->conns == 0 && t->clock == 0)
                continue;
            char e[200];
            int k = snprintf(e, sizeof e,
                             "%s{\"task\":%d,\"clock\":%" PRIu64 ",\"lag\":%" PRId64
                             ",\"max_lag\":%" PRId64 ",\"pull_lag\":%" PRId64 ",\"held\":%" PRIu64
                             ",\"held_secs\":%.3f}",
                             first ? "" : ",", i, t->clock, lag_of(st, i, now), t->max_lag,
                             t->pull_lag, t->held, t->held_secs);
            cut = k < 0 || (size_t)k >= sizeof e || at + (size_t)k >= end;
            if (!cut) {
                memcpy(out + at, e, (size_t)k);
                at += (size_t)k;
                first = 0;
            }
        }
        pthread_mutex_unlock(&st->mu);
        n = snprintf(out + at, cap - at, "]%s", cut ? ",\"staleness_cut\":true" : "");
        at += (size_t)(n > 0 ? n : 0);
    }
    if (at + 1 < cap)
        out[at++] = '}';
    out[at < cap ? at : cap - 1] = '\0';
    return at;
}

void ps_staleness_describe(ps_staleness *st, int task, char *out, size_t cap) {
    if (!valid(st, task)) {
        snprintf(out, cap, "no staleness record");
        return;
    }
    pthread_mutex_lock(&st->mu);
    const record *t = &st->t[task];
    if (t->max_lag < 0)
        snprintf(out, cap, "clock %" PRIu64 ", no pull answered yet (max_staleness %" PRId64 ")",
                 t->clock, st->bound);
    else
        snprintf(out, cap,
                 "clock %" PRIu64 ", largest lag at a pull %" PRId64 " (max_staleness %" PRId64
                 "), %" PRIu64 " pulls held for %.3f s in all",
                 t->clock, t->max_lag, st->bound, t->held, t->held_secs);
    pthread_mutex_unlock(&st->mu);
}
