/* profile.c - cumulative time per phase of a task (see profile.h). */
#define _POSIX_C_SOURCE 200809L
#include "psflow/profile.h"

#include <stdlib.h>
#include <string.h>

#include "psflow/clock.h"

static const char *const names[PF_PHASE_COUNT] = {
    [PF_PHASE_INPUT] = "input",       [PF_PHASE_PULL] = "pull",
    [PF_PHASE_COMPUTE] = "compute",   [PF_PHASE_PUSH] = "push",
    [PF_PHASE_BARRIER] = "barrier",   [PF_PHASE_CHECKPOINT] = "checkpoint",
    [PF_PHASE_EVALUATE] = "evaluate", [PF_PHASE_APPLY] = "apply",
    [PF_PHASE_COPY] = "copy",         [PF_PHASE_QUEUE] = "queue",
};

const char *pf_phase_name(int phase) {
    return phase >= 0 && phase < PF_PHASE_COUNT ? names[phase] : NULL;
}

int pf_phase_from_name(const char *name) {
    for (int i = 0; name && i < PF_PHASE_COUNT; i++)
        if (!strcmp(names[i], name))
            return i;
    return -1;
}

static uint64_t ns_of(double seconds) {
    return seconds > 0 ? (uint64_t)(seconds * 1e9 + 0.5) : 0;
}

void pf_profile_start(pf_profile *p) {
    /* atomic stores: another thread may be reading p (its zeroes) meanwhile */
    __atomic_store_n(&p->started_ns, 0, __ATOMIC_RELEASE);
    for (int i = 0; i < PF_PHASE_COUNT; i++)
        __atomic_store_n(&p->ns[i], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->stopped_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->open, 0, __ATOMIC_RELAXED);
    const char *env = getenv("PSFLOW_PROFILE");
    p->off = env && !strcmp(env, "off");
    __atomic_store_n(&p->started_ns, ns_of(pf_clock_now()), __ATOMIC_RELEASE);
}

void pf_profile_stop(pf_profile *p) {
    if (p && __atomic_load_n(&p->started_ns, __ATOMIC_ACQUIRE))
        __atomic_store_n(&p->stopped_ns, ns_of(pf_clock_now()), __ATOMIC_RELEASE);
}

double pf_profile_now(const pf_profile *p) {
    return p && !p->off ? pf_clock_now() : 0;
}

/* The open span is closed before its time is added, and the add is a release: a reader
 * that sees the added time sees the span closed, so no snapshot counts a span twice. */
static void close_open(pf_profile *p) {
    if (__atomic_load_n(&p->open, __ATOMIC_RELAXED))
        __atomic_store_n(&p->open, 0, __ATOMIC_RELAXED);
}

/* The writer's side of a trace: one atomic load while no trace records. The writer alone
 * moves a recording trace to done (its steps taken, stopped, or full). */
static void record(pf_profile *p, pf_phase phase, double start, double end) {
    int state = __atomic_load_n(&p->trace_state, __ATOMIC_ACQUIRE);
    if (state == PF_TRACE_ARMED && !__atomic_load_n(&p->trace_steps, __ATOMIC_RELAXED))
        state = __atomic_compare_exchange_n(&p->trace_state, &state, PF_TRACE_RECORDING, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
                    ? PF_TRACE_RECORDING
                    : state;
    if (state != PF_TRACE_RECORDING || phase == PF_PHASE_QUEUE) /* pulls wait side by side */
        return;
    uint32_t n = __atomic_load_n(&p->trace_len, __ATOMIC_RELAXED);
    if (__atomic_load_n(&p->trace_stop, __ATOMIC_ACQUIRE) || n >= p->trace_cap) {
        __atomic_store_n(&p->trace_state, PF_TRACE_DONE, __ATOMIC_RELEASE);
        return;
    }
    p->trace[n] = (pf_trace_span){start, end, p->trace_step, (int)phase};
    __atomic_store_n(&p->trace_len, n + 1, __ATOMIC_RELEASE);
}

double pf_profile_add(pf_profile *p, pf_phase phase, double since) {
    if (!p || p->off)
        return since;
    double now = pf_clock_now();
    close_open(p);
    __atomic_fetch_add(&p->ns[phase], ns_of(now - since), __ATOMIC_RELEASE);
    record(p, phase, since, now);
    return now;
}

void pf_profile_span(pf_profile *p, pf_phase phase, double start, double end) {
    if (!p || p->off)
        return;
    close_open(p);
    __atomic_fetch_add(&p->ns[phase], ns_of(end - start), __ATOMIC_RELEASE);
    record(p, phase, start, end);
}

int pf_profile_trace_arm(pf_profile *p, uint64_t id, uint64_t from, uint64_t steps,
                         uint32_t capacity) {
    /* idle or done: the writer does not touch the buffer (a trace armed and never started
     * is stopped first, pf_profile_trace_stop) */
    int state = __atomic_load_n(&p->trace_state, __ATOMIC_ACQUIRE);
    if ((state != PF_TRACE_IDLE && state != PF_TRACE_DONE) || capacity == 0 ||
        capacity > PF_TRACE_SPANS_MAX)
        return -1;
    pf_trace_span *buf = calloc(capacity, sizeof *buf);
    if (!buf)
        return -1;
    free(p->trace);
    p->trace = buf;
    p->trace_cap = capacity;
    p->trace_id = id;
    __atomic_store_n(&p->trace_steps, steps, __ATOMIC_RELAXED);
    __atomic_store_n(&p->trace_from, from, __ATOMIC_RELAXED);
    __atomic_store_n(&p->trace_len, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->trace_stop, 0, __ATOMIC_RELAXED);
    /* PSFLOW_PROFILE=off: nothing is recorded; done at once, empty */
    __atomic_store_n(&p->trace_state, p->off ? PF_TRACE_DONE : PF_TRACE_ARMED, __ATOMIC_RELEASE);
    return 0;
}

void pf_profile_trace_stop(pf_profile *p) {
    int armed = PF_TRACE_ARMED;
    __atomic_store_n(&p->trace_stop, 1, __ATOMIC_RELEASE);
    __atomic_compare_exchange_n(&p->trace_state, &armed, PF_TRACE_DONE, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
}

void pf_profile_trace_finish(pf_profile *p) {
    int state = __atomic_load_n(&p->trace_state, __ATOMIC_ACQUIRE);
    while ((state == PF_TRACE_ARMED || state == PF_TRACE_RECORDING) &&
           !__atomic_compare_exchange_n(&p->trace_state, &state, PF_TRACE_DONE, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
        ;
}

const pf_trace_span *pf_profile_trace_spans(const pf_profile *p, uint64_t *id, uint32_t *n) {
    if (__atomic_load_n(&p->trace_state, __ATOMIC_ACQUIRE) != PF_TRACE_DONE)
        return NULL;
    *id = p->trace_id;
    *n = __atomic_load_n(&p->trace_len, __ATOMIC_ACQUIRE);
    return p->trace;
}

void pf_profile_trace_free(pf_profile *p) {
    free(p->trace);
    p->trace = NULL;
    p->trace_cap = 0;
    __atomic_store_n(&p->trace_len, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->trace_state, PF_TRACE_IDLE, __ATOMIC_RELEASE);
}

void pf_profile_open(pf_profile *p, pf_phase phase, double since) {
    if (p && !p->off && since > 0)
        __atomic_store_n(&p->open, ns_of(since) << 4 | ((uint64_t)phase + 1), __ATOMIC_RELEASE);
}

void pf_profile_count(pf_profile *p, uint64_t n) {
    if (p && !p->off)
        __atomic_fetch_add(&p->count, n, __ATOMIC_RELAXED);
}

/* A training task's trace records from the start of step `from` to the start of step
 * from + steps (or a later one: steps may be skipped or taken again after a rollback). */
void pf_profile_at_step(pf_profile *p, uint64_t global) {
    if (!p || p->off)
        return;
    p->trace_step = global;
    int state = __atomic_load_n(&p->trace_state, __ATOMIC_ACQUIRE);
    if (state != PF_TRACE_ARMED && state != PF_TRACE_RECORDING)
        return;
    uint64_t steps = __atomic_load_n(&p->trace_steps, __ATOMIC_RELAXED);
    uint64_t from = __atomic_load_n(&p->trace_from, __ATOMIC_RELAXED);
    if (!steps)
        return;
    /* compare-exchanges: a trace stopped and another armed meanwhile is left alone */
    if (global >= from + steps)
        __atomic_compare_exchange_n(&p->trace_state, &state, PF_TRACE_DONE, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
    else if (state == PF_TRACE_ARMED && global >= from)
        __atomic_compare_exchange_n(&p->trace_state, &state, PF_TRACE_RECORDING, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

int pf_profile_read(const pf_profile *p, double *seconds, uint64_t *count, double *wall) {
    uint64_t started = __atomic_load_n(&p->started_ns, __ATOMIC_ACQUIRE);
    if (!started || p->off)
        return -1;
    /* The counters between two reads of the open span: the same span both times, or read
     * again (a few tries; then the span is left out, as if closed just before). */
    uint64_t open = 0;
    double now = 0;
    for (int tries = 0; tries < 4; tries++) {
        open = __atomic_load_n(&p->open, __ATOMIC_ACQUIRE);
        for (int i = 0; i < PF_PHASE_COUNT; i++)
            seconds[i] = (double)__atomic_load_n(&p->ns[i], __ATOMIC_ACQUIRE) * 1e-9;
        now = pf_clock_now();
        if (__atomic_load_n(&p->open, __ATOMIC_ACQUIRE) == open)
            break;
        open = 0;
    }
    *count = __atomic_load_n(&p->count, __ATOMIC_RELAXED);
    uint64_t stopped = __atomic_load_n(&p->stopped_ns, __ATOMIC_ACQUIRE);
    if (open && !stopped) {
        int phase = (int)(open & 15) - 1;
        double since = (double)(open >> 4) * 1e-9;
        if (phase >= 0 && phase < PF_PHASE_COUNT && now > since)
            seconds[phase] += now - since;
    }
    *wall = (stopped ? (double)stopped * 1e-9 : now) - (double)started * 1e-9;
    return 0;
}
