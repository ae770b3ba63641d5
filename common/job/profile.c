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

double pf_profile_add(pf_profile *p, pf_phase phase, double since) {
    if (!p || p->off)
        return since;
    double now = pf_clock_now();
    __atomic_fetch_add(&p->ns[phase], ns_of(now - since), __ATOMIC_RELAXED);
    return now;
}

void pf_profile_add_seconds(pf_profile *p, pf_phase phase, double seconds) {
    if (p && !p->off)
        __atomic_fetch_add(&p->ns[phase], ns_of(seconds), __ATOMIC_RELAXED);
}

void pf_profile_count(pf_profile *p, uint64_t n) {
    if (p && !p->off)
        __atomic_fetch_add(&p->count, n, __ATOMIC_RELAXED);
}

int pf_profile_read(const pf_profile *p, double *seconds, uint64_t *count, double *wall) {
    uint64_t started = __atomic_load_n(&p->started_ns, __ATOMIC_ACQUIRE);
    if (!started || p->off)
        return -1;
    for (int i = 0; i < PF_PHASE_COUNT; i++)
        seconds[i] = (double)__atomic_load_n(&p->ns[i], __ATOMIC_RELAXED) * 1e-9;
    *count = __atomic_load_n(&p->count, __ATOMIC_RELAXED);
    uint64_t stopped = __atomic_load_n(&p->stopped_ns, __ATOMIC_ACQUIRE);
    *wall = (stopped ? (double)stopped * 1e-9 : pf_clock_now()) - (double)started * 1e-9;
    return 0;
}
