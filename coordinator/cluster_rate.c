/* cluster_rate.c - a job's live step rate and stall (cluster_rate.h). */
#include "coordinator/cluster_rate.h"

#include <math.h>
#include <string.h>

void coord_rate_restart(coord_rate *r, int64_t step, double now) {
    memset(r, 0, sizeof *r);
    r->base = step;
    r->progress_time = now;
    r->checked = now;
}

static int slot(const coord_rate *r, int i) {
    return (r->first + i) % COORD_RATE_SAMPLES;
}

void coord_rate_note(coord_rate *r, int64_t step, double now) {
    if (r->progress_time == 0) /* never restarted (a job before its first admission) */
        coord_rate_restart(r, step, now);
    int64_t latest = r->n ? r->step[slot(r, r->n - 1)] : r->base;
    if (step < latest) { /* went back without a restart (a late rollback report) */
        coord_rate_restart(r, step, now);
        return;
    }
    if (step == latest && r->n == 0)
        return; /* the window opens at the first step above where it restarted */
    if (step > latest) {
        if (r->stalled) /* progress again: the stall is no part of the new rate */
            coord_rate_restart(r, latest, now);
        r->progress_time = now;
    }
    /* Samples at least COORD_RATE_SPACING_SECONDS apart: a closer one replaces the newest. */
    if (r->n >= 2 && now - r->t[slot(r, r->n - 2)] < COORD_RATE_SPACING_SECONDS) {
        int last = slot(r, r->n - 1);
        r->t[last] = now;
        r->step[last] = step;
    } else {
        if (r->n == COORD_RATE_SAMPLES) {
            r->first = slot(r, 1);
            r->n--;
        }
        int k = slot(r, r->n++);
        r->t[k] = now;
        r->step[k] = step;
    }
    /* The window: the samples of the last COORD_RATE_WINDOW_SECONDS, and at least two. */
    while (r->n > 2 && now - r->t[slot(r, 1)] >= COORD_RATE_WINDOW_SECONDS) {
        r->first = slot(r, 1);
        r->n--;
    }
}

double coord_rate_steps_per_sec(const coord_rate *r) {
    if (r->stalled)
        return 0;
    if (r->n < 2)
        return NAN;
    int a = slot(r, 0), b = slot(r, r->n - 1);
    double span = r->t[b] - r->t[a];
    if (span < COORD_RATE_MIN_SECONDS)
        return NAN;
    return (double)(r->step[b] - r->step[a]) / span;
}

bool coord_rate_check(coord_rate *r, bool running, double now) {
    r->checked = now;
    bool stalled = running && r->progress_time > 0 && now - r->progress_time >= COORD_STALL_SECONDS;
    if (stalled == r->stalled)
        return false;
    r->stalled = stalled;
    return true;
}

double coord_rate_stalled_seconds(const coord_rate *r) {
    return r->stalled ? r->checked - r->progress_time : NAN;
}
