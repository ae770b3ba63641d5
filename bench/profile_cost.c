/* profile_cost.c - what the step breakdown (psflow/profile.h) costs a step, against a clock
 * read measured in the same run.
 *
 * A training task's step opens and closes about eight spans (pf_profile_add: one monotonic
 * clock read and one atomic add each; pf_profile_open, an atomic store, marks the ones that
 * may wait long) and counts one step. Every span here is marked open, the upper bound. This times,
 * on one core and interleaved over --rounds rounds: a loop of bare clock_gettime calls (the
 * baseline), a loop of spans, and a loop of spans with another thread reading the counters as an
 * agent's heartbeats do (but as fast as it can, the worst case for the shared cache line). It
 * prints each as nanoseconds and as a ratio to the clock read, and the cost of one step's
 * spans as a share of a step of --step-ms milliseconds (the fastest step of
 * bench/train_distributed.sh is about 2 ms: 784-256-256-10, 1 ps + 1 worker).
 *
 *   build/bench/profile_cost [--rounds N] [--step-ms MS]
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/clock.h"
#include "psflow/profile.h"

#define CALLS        2000000
#define SPANS_A_STEP 8

static volatile double sink;

static double clock_loop(void) {
    double t0 = pf_clock_now(), acc = 0;
    for (int i = 0; i < CALLS; i++)
        acc += pf_clock_now();
    sink = acc;
    return (pf_clock_now() - t0) / CALLS;
}

static double span_loop(pf_profile *p) {
    double t0 = pf_clock_now(), at = pf_profile_now(p);
    for (int i = 0; i < CALLS; i++) {
        pf_profile_open(p, (pf_phase)(i % PF_PHASE_FIRST_PS), at);
        at = pf_profile_add(p, (pf_phase)(i % PF_PHASE_FIRST_PS), at);
        if (i % SPANS_A_STEP == 0)
            pf_profile_count(p, 1);
    }
    return (pf_clock_now() - t0) / CALLS;
}

typedef struct reader {
    pf_profile *p;
    int stop;
    long reads;
} reader;

static void *read_loop(void *arg) {
    reader *r = arg;
    double sec[PF_PHASE_COUNT], wall;
    uint64_t count;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE))
        if (pf_profile_read(r->p, sec, &count, &wall) == 0)
            r->reads++;
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rounds = 7;
    double step_ms = 2.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc) {
            step_ms = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: profile_cost [--rounds N] [--step-ms MS]\n");
            return 64;
        }
    }
    if (rounds < 1 || rounds > 1000 || !(step_ms > 0)) {
        fprintf(stderr, "profile_cost: --rounds 1..1000, --step-ms > 0\n");
        return 64;
    }
    double *c = calloc((size_t)rounds * 3, sizeof *c), *s = c + rounds, *r = c + 2 * rounds;
    if (!c)
        return 70;
    unsetenv("PSFLOW_PROFILE");
    pf_profile p;
    for (int k = 0; k < rounds; k++) {
        c[k] = clock_loop();
        pf_profile_start(&p);
        s[k] = span_loop(&p);
        reader rd = {&p, 0, 0};
        pthread_t th;
        if (pthread_create(&th, NULL, read_loop, &rd) != 0)
            return 70;
        r[k] = span_loop(&p);
        __atomic_store_n(&rd.stop, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
    }
    qsort(c, (size_t)rounds, sizeof *c, cmp);
    qsort(s, (size_t)rounds, sizeof *s, cmp);
    qsort(r, (size_t)rounds, sizeof *r, cmp);
    double cm = c[rounds / 2], sm = s[rounds / 2], rm = r[rounds / 2];
    printf("profile_cost: medians of %d rounds of %d calls\n", rounds, CALLS);
    printf("  clock read (baseline)          %7.1f ns\n", cm * 1e9);
    printf("  span                           %7.1f ns  %.2f x a clock read\n", sm * 1e9, sm / cm);
    printf("  span, counters read meanwhile  %7.1f ns  %.2f x a clock read\n", rm * 1e9, rm / cm);
    printf("  a step's %d spans: %.2f us = %.4f %% of a %.1f ms step (%.4f %% with the reader)\n",
           SPANS_A_STEP, SPANS_A_STEP * sm * 1e6, 100 * SPANS_A_STEP * sm / (step_ms * 1e-3),
           step_ms, 100 * SPANS_A_STEP * rm / (step_ms * 1e-3));
    free(c);
    return 0;
}
