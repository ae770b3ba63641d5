/* staleness.h - bounded staleness (stale-synchronous parallel) on one ps task of an async
 * job with training.max_staleness = s (README "Bounded staleness").
 *
 * Each training task (chief 0, workers 1 ..) has a clock: the pushes of it this ps has
 * applied. A task's lag is its clock minus the smallest clock of the live training tasks
 * (those with a connection that said HELLO). A task's pull - a PULL or the pull half of a
 * PUSH_PULL - is answered only while its lag is at most s: a worker that ran more than s
 * steps ahead of the slowest waits for it, so it never computes on values that miss more
 * than s of another live worker's steps. With s = 0 the workers go in lockstep, each
 * update applied on its own (sync without aggregation).
 *
 * Who counts: only live tasks. A task that has not connected yet, whose connections all
 * closed, or that has been silent (no push, pull or HELLO) for the idle limit - a host gone
 * without closing its connection, a peer that says HELLO and nothing more - holds nobody
 * back. A task that comes back (reconnects, or speaks after the idle limit) starts at no
 * lower clock than the slowest of the others: it pulls the newest values; one that is ahead
 * keeps its clock, so reconnecting is no way around the bound. Clocks start at 0 when the
 * ps starts.
 *
 * Records, per task: its clock and lag now (a task whose pull is held is s + 1 ahead: it has
 * pushed, and waits), the lag its latest pull was answered at and the largest (never above
 * s: how many pushes of the slowest the values it computes on may lack), and how many of its
 * pulls were held and for how long.
 *
 * Threads: the ps's service thread changes it; ps_staleness_snapshot may run on any
 * thread (the agent's heartbeat).
 */
#ifndef PSFLOW_PS_STALENESS_H
#define PSFLOW_PS_STALENESS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ps_staleness ps_staleness;

/* For `tasks` possible training task indices (0 .. tasks-1) and bound s >= 0; a task silent
 * (no push, pull or HELLO) for idle_secs is not counted until it shows up again (<= 0:
 * never). NULL when out of memory. */
ps_staleness *ps_staleness_create(int tasks, int64_t bound, double idle_secs);
void ps_staleness_destroy(ps_staleness *st);

/* A connection of training task `task` said HELLO / closed. */
void ps_staleness_join(ps_staleness *st, int task);
void ps_staleness_leave(ps_staleness *st, int task);

/* A push of `task` was applied. */
void ps_staleness_pushed(ps_staleness *st, int task);

/* A pull of `task` arrived (it is active): whether it may be answered now. */
int ps_staleness_pull(ps_staleness *st, int task);

/* Whether a pull of `task` may be answered now (its lag is at most the bound, or it is not
 * counted). */
int ps_staleness_ready(const ps_staleness *st, int task);

/* A pull of `task` is answered now, after being held `held_secs` (< 0: it was not held). */
void ps_staleness_answered(ps_staleness *st, int task, double held_secs);

typedef struct ps_staleness_task {
    int live;         /* counted: a connection is open and it spoke lately */
    uint64_t clock;   /* pushes applied */
    int64_t lag;      /* clock - smallest live clock; -1 when not live */
    int64_t max_lag;  /* largest lag a pull of it was answered at; -1 before any */
    int64_t pull_lag; /* the lag its latest pull was answered at (0 .. s); -1 before any */
    uint64_t held;    /* pulls held back */
    double held_secs; /* time they waited */
} ps_staleness_task;

/* Copies the records of tasks 0 .. min(max, tasks)-1 into out; returns how many. */
int ps_staleness_snapshot(ps_staleness *st, ps_staleness_task *out, int max);

int64_t ps_staleness_bound(const ps_staleness *st);

/* Ends the JSON object in out[0 .. len) (cap bytes in all, len < cap - 1): appends
 * `,"max_staleness":S,"staleness":[{"task":..,"clock":..,"lag":..,"max_lag":..,"pull_lag":..,"held":..,
 * "held_secs":..},..]` for the tasks that are live or have pushed (none when st is NULL;
 * entries that do not fit are left out and `"staleness_cut":true` says so), then `}`.
 * Returns the new length; out is NUL-terminated. */
size_t ps_staleness_json_close(ps_staleness *st, char *out, size_t len, size_t cap);

/* One line (no newline) about `task` for the ps's log. */
void ps_staleness_describe(ps_staleness *st, int task, char *out, size_t cap);

#endif
