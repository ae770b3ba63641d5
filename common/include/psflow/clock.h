/* clock.h - time for measurement and deadlines. */
#ifndef PSFLOW_CLOCK_H
#define PSFLOW_CLOCK_H

/* Seconds from an arbitrary fixed point, monotonic (CLOCK_MONOTONIC). */
double pf_clock_now(void);

/* Seconds since the Unix epoch (CLOCK_REALTIME), for timestamps shown to users. */
double pf_clock_wall(void);

#endif
