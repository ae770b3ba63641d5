/* samples.h - what the data-plane benchmarks (wire_throughput, sparse) share: the round-trip
 * times of one side and pattern over all turns, their mean and quantiles, and the plain-TCP
 * baseline (bench/tcp_baseline, run as a child next to the benchmark) read into them.
 * Header-only: each benchmark is one program. Out of memory, or a baseline that cannot run,
 * ends the program with a line on stderr.
 */
#ifndef PSFLOW_BENCH_SAMPLES_H
#define PSFLOW_BENCH_SAMPLES_H

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct samples {
    double *t;
    size_t n, cap;
} samples;

static inline void samples_add(samples *s, double t) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->t = realloc(s->t, s->cap * sizeof *s->t);
        if (!s->t) {
            fprintf(stderr, "bench: out of memory\n");
            exit(1);
        }
    }
    s->t[s->n++] = t;
}

static inline int samples_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline double samples_mean(const samples *s) {
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->t[i];
    return sum / (double)s->n;
}

static inline void samples_sort(samples *s) {
    qsort(s->t, s->n, sizeof *s->t, samples_cmp);
}

/* The q-quantile (0: best, 0.5: median) of s's times, once samples_sort(s) has run. */
static inline double samples_quantile(const samples *s, double q) {
    return s->t[(size_t)(q * (double)(s->n - 1) + 0.5)];
}

/* tcp_baseline's patterns, the index of each in the array bench_tcp_baseline fills */
enum { TCP_PUSH, TCP_PULL, TCP_PUSH_PULL };

/* Runs tcp_baseline (next to the program `self`) on `bytes` for about `seconds` per pattern
 * and adds its round-trip times to tcp[pattern]. */
static inline void bench_tcp_baseline(const char *self, double seconds, size_t bytes,
                                      samples tcp[3]) {
    char dir[4096], cmd[8192];
    snprintf(dir, sizeof dir, "%s", self);
    snprintf(cmd, sizeof cmd, "%s/tcp_baseline --seconds %g %zu", dirname(dir), seconds, bytes);
    FILE *f = popen(cmd, "r");
    char *line = NULL, pattern[32];
    size_t cap = 0, size;
    int lines = 0, used;
    while (f && getline(&line, &cap, f) > 0 &&
           sscanf(line, "%zu %31s%n", &size, pattern, &used) == 2 && size == bytes) {
        samples *s = &tcp[!strcmp(pattern, "push")   ? TCP_PUSH
                          : !strcmp(pattern, "pull") ? TCP_PULL
                                                     : TCP_PUSH_PULL];
        char *p = line + used, *end;
        for (double t = strtod(p, &end); end != p; t = strtod(p, &end)) {
            samples_add(s, t);
            p = end;
        }
        lines++;
    }
    free(line);
    if (!f || pclose(f) != 0 || lines != 3) {
        fprintf(stderr, "bench: cannot run %s\n", cmd);
        exit(1);
    }
}

#endif
