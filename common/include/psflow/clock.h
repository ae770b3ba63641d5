/* clock.h - time for measurement and deadlines. */
#ifndef PSFLOW_CLOCK_H
#define PSFLOW_CLOCK_H

#include <time.h>

/* Seconds from an arbitrary fixed point, monotonic (CLOCK_MONOTONIC). */
double pf_clock_now(void);

/* Seconds since the Unix epoch (CLOCK_REALTIME), for timestamps shown to users. */
double pf_clock_wall(void);

/* Sleeps for `seconds` (a polling or retry period, never synchronisation); returns early
 * when a signal arrives, so a loop that sleeps sees SIGINT/SIGTERM at once. */
void pf_clock_sleep(double seconds);

/* The CLOCK_REALTIME time `seconds` (>= 0) from now, normalised: the absolute deadline
 * pthread_cond_timedwait takes, for a wait on a condition that must not last forever. */
struct timespec pf_clock_deadline(double seconds);

#endif
