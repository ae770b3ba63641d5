/* cluster_rate.h - a job's live step rate (part of the state machine of cluster.h): steps per
 * second over a sliding time window of the global steps the job's trainers report, restarted
 * at every membership change, and whether training has stalled.
 *
 * DESIGN: the rate is measured by the coordinator's clock when reports arrive, never by the
 * reporters' clocks. A sample is kept at most every COORD_RATE_SPACING_SECONDS, and samples
 * older than COORD_RATE_WINDOW_SECONDS are dropped, so the rate follows the last half
 * minute. A membership change (a live scale, a replaced task, a gang restart, a rollback, a
 * reload of the coordinator) makes the old samples meaningless: the window restarts at the
 * first step reported after it, and the rate is unknown (NAN) until the window spans
 * COORD_RATE_MIN_SECONDS. A job whose global step has not advanced for
 * COORD_STALL_SECONDS is stalled: its rate is 0 and it has no time left to show. Pure: every
 * function takes `now` (Unix seconds).
 */
#ifndef PSFLOW_COORDINATOR_CLUSTER_RATE_H
#define PSFLOW_COORDINATOR_CLUSTER_RATE_H

#include <stdbool.h>
#include <stdint.h>

#define COORD_RATE_SAMPLES         64   /* ring size: 64 x 0.5 s covers the window */
#define COORD_RATE_SPACING_SECONDS 0.5  /* a sample at most this often */
#define COORD_RATE_WINDOW_SECONDS  30.0 /* the rate covers the last 30 s of samples */
#define COORD_RATE_MIN_SECONDS     5.0  /* no rate before the window spans 5 s */
#define COORD_STALL_SECONDS        30.0 /* no step progress for this long: stalled */

typedef struct coord_rate {
    double t[COORD_RATE_SAMPLES]; /* when the coordinator received the step (Unix seconds) */
    int64_t step[COORD_RATE_SAMPLES];
    int first, n;         /* the oldest sample's slot; how many samples */
    int64_t base;         /* restarted at this step: the window opens at the first above it */
    double progress_time; /* the last step progress, or the restart; 0 = never started */
    double checked;       /* the time of the last coord_rate_check */
    bool stalled;
} coord_rate;

/* Empties the window at a membership change (or at start): the job is at `step`; the window
 * opens at the first report of a step above it. Not stalled. */
void coord_rate_restart(coord_rate *r, int64_t step, double now);
/* The job's global step as of a report received at `now`. */
void coord_rate_note(coord_rate *r, int64_t step, double now);
/* Steps per second over the window; NAN while it spans under COORD_RATE_MIN_SECONDS, 0 while
 * stalled. */
double coord_rate_steps_per_sec(const coord_rate *r);
/* Judges at `now` whether the job (running: training) has stalled; returns true when that
 * changed. */
bool coord_rate_check(coord_rate *r, bool running, double now);
/* Seconds without step progress as of the last check while stalled, else NAN. */
double coord_rate_stalled_seconds(const coord_rate *r);

#endif
