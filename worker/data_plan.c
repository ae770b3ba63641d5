/* data_plan.c - which examples a training task reads at each global step (see data_plan.h). */
#include "worker/data_plan.h"

#include <string.h>

void worker_plan_init(worker_plan *p, int n, int batch, uint64_t *skipped, int max_skipped) {
    memset(p, 0, sizeof *p);
    p->batch = batch;
    p->segs[0] = (worker_plan_segment){0, 0, n};
    p->n_segs = 1;
    p->skipped = skipped;
    p->max_skipped = max_skipped;
}

uint64_t worker_plan_data_step(const worker_plan *p, uint64_t global) {
    uint64_t d = global;
    for (int i = 0; i < p->n_skipped; i++)
        if (p->skipped[i] <= d)
            d++;
    return d;
}

int worker_plan_skip(worker_plan *p, uint64_t d) {
    for (int i = 0; i < p->n_skipped; i++)
        if (p->skipped[i] == d)
            return 0;
    if (p->n_skipped >= p->max_skipped)
        return -1;
    int at = p->n_skipped;
    while (at > 0 && p->skipped[at - 1] > d) {
        p->skipped[at] = p->skipped[at - 1];
        at--;
    }
    p->skipped[at] = d;
    p->n_skipped++;
    return 0;
}

/* Where data step d begins under segment g (extrapolated backwards for a step before it:
 * only for a rollback older than every segment remembered). */
static int64_t start_in(const worker_plan *p, const worker_plan_segment *g, uint64_t d) {
    return g->base + (int64_t)(d - g->from) * g->n * p->batch;
}

/* Starts a segment of n tasks at data step d (replacing the last one when it starts at d
 * too, dropping the oldest when the list is full). */
static void push(worker_plan *p, uint64_t d, int n) {
    worker_plan_segment *last = &p->segs[p->n_segs - 1];
    worker_plan_segment next = {d, start_in(p, last, d), n};
    if (last->from == d) {
        *last = next;
        return;
    }
    if (p->n_segs == WORKER_PLAN_MAX_SEGMENTS) {
        memmove(p->segs, p->segs + 1, (WORKER_PLAN_MAX_SEGMENTS - 1) * sizeof *p->segs);
        p->n_segs--;
    }
    p->segs[p->n_segs++] = next;
}

int worker_plan_update(worker_plan *p, uint64_t global, int n) {
    uint64_t d = worker_plan_data_step(p, global);
    int changed = 0;
    if (d < p->segs[p->n_segs - 1].from) { /* rolled back to before a membership change */
        while (p->n_segs > 1 && p->segs[p->n_segs - 1].from > d)
            p->n_segs--;
        worker_plan_segment *g = &p->segs[p->n_segs - 1];
        if (g->from > d) { /* older than the oldest remembered: extrapolated, never below 0 */
            int64_t base = start_in(p, g, d);
            *g = (worker_plan_segment){d, base > 0 ? base : 0, g->n};
        }
        changed = 1;
    }
    if (n != p->segs[p->n_segs - 1].n) {
        push(p, d, n);
        changed = 1;
    }
    return changed;
}

int64_t worker_plan_step_start(const worker_plan *p, uint64_t d) {
    return start_in(p, &p->segs[p->n_segs - 1], d);
}

int64_t worker_plan_position(const worker_plan *p, uint64_t global, int task) {
    return worker_plan_step_start(p, worker_plan_data_step(p, global)) + (int64_t)task * p->batch;
}

int worker_plan_tasks(const worker_plan *p) {
    return p->segs[p->n_segs - 1].n;
}
