/* cpus.c - the cores a process may use (see cpus.h). */
#define _GNU_SOURCE
#include "psflow/cpus.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pf_cpus_quota(const char *cpu_max) {
    if (!cpu_max)
        return 0;
    char *end;
    errno = 0;
    long long quota = strtoll(cpu_max, &end, 10);
    if (end == cpu_max || errno || quota <= 0)
        return 0; /* "max" (no limit), or not a number */
    const char *p = end;
    long long period = strtoll(p, &end, 10);
    if (end == p || errno || period <= 0)
        return 0;
    long long cores = (quota + period - 1) / period;
    return cores > 4096 ? 4096 : (int)cores;
}

/* The first line of `path` into buf, or 0. */
static int read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    return ok;
}

static int cgroup_quota(void) {
    char line[128];
    if (read_line("/sys/fs/cgroup/cpu.max", line, sizeof line))
        return pf_cpus_quota(line);
    char period[64];
    if (read_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", line, sizeof line) &&
        read_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us", period, sizeof period)) {
        char both[200];
        line[strcspn(line, "\n")] = '\0';
        snprintf(both, sizeof both, "%.60s %.60s", line, period);
        return pf_cpus_quota(both);
    }
    return 0;
}

int pf_cpus_available(void) {
    int cores = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cores = CPU_COUNT(&set);
    if (cores < 1)
        cores = 1;
    int quota = cgroup_quota();
    return quota > 0 && quota < cores ? quota : cores;
}

int pf_cpus_share(int cores, int tasks) {
    int share = tasks > 0 ? cores / tasks : cores;
    return share < 1 ? 1 : share;
}
