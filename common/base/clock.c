/* clock.c - monotonic and wall-clock seconds, and sleeping for a period. */
#define _POSIX_C_SOURCE 200809L
#include "psflow/clock.h"

#include <time.h>

static double seconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double pf_clock_now(void) {
    return seconds(CLOCK_MONOTONIC);
}

double pf_clock_wall(void) {
    return seconds(CLOCK_REALTIME);
}

void pf_clock_sleep(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

struct timespec pf_clock_deadline(double s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t whole = (time_t)s;
    ts.tv_sec += whole;
    ts.tv_nsec += (long)((s - (double)whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}
