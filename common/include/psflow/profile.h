/* profile.h - where a task's time goes: cumulative seconds per phase, as cheap counters.
 *
 * A training task (chief or worker) counts the time of each of its steps in the phases
 * input .. evaluate, a ps the time its service thread spends applying gradients and copying
 * values into replies, and the time its pulls were held waiting for a version (queue).
 * One thread writes (pf_profile_add), any thread reads (pf_profile_read): every counter is
 * a 64-bit integer of nanoseconds accessed atomically, so a reader never sees a torn value,
 * though a snapshot may be a phase or two apart. A span counts when it ends, so the writer
 * marks a wait that may be long as open (pf_profile_open): a snapshot counts an open span
 * up to its own time, and a window cut through a long wait (a barrier behind a slow chief,
 * a checkpoint) is not left unexplained. No row per step is kept: the coordinator takes
 * differences of two snapshots (docs/profile.md).
 */
#ifndef PSFLOW_PROFILE_H
#define PSFLOW_PROFILE_H

#include <stdint.h>

typedef enum pf_phase {
    /* a training task's step */
    PF_PHASE_INPUT,      /* reading and decoding its batch (and waiting for the reader) */
    PF_PHASE_PULL,       /* waiting for variables: a row pull, or an async push-pull's answer */
    PF_PHASE_COMPUTE,    /* forward and backward, and the gradient's finite check */
    PF_PHASE_PUSH,       /* encoding and sending the gradients */
    PF_PHASE_BARRIER,    /* sync: from the push sent until every ps answered with new values */
    PF_PHASE_CHECKPOINT, /* the chief: periodic checkpoints */
    PF_PHASE_EVALUATE,   /* the chief: evaluations */
    /* a ps's service thread */
    PF_PHASE_APPLY, /* aggregating and applying gradients, the finite check of the values */
    PF_PHASE_COPY,  /* copying values (whole shards or rows) into replies or segments */
    /* a ps: summed over its pulls, the time each was held for its version (not a share of
     * the thread's time: several pulls wait at once) */
    PF_PHASE_QUEUE,
    PF_PHASE_COUNT
} pf_phase;

#define PF_PHASE_FIRST_PS PF_PHASE_APPLY

/* The phases a role reports, first .. end - 1: a ps's apply .. queue, a training task's
 * input .. evaluate. */
static inline int pf_phase_first(int ps) {
    return ps ? PF_PHASE_FIRST_PS : 0;
}
static inline int pf_phase_end(int ps) {
    return ps ? PF_PHASE_COUNT : PF_PHASE_FIRST_PS;
}

/* A trace on demand (docs/profile.md, "Trace"): the spans of the writer thread over a range
 * of the job's global steps, each a phase from start to end (pf_clock_now seconds) in global
 * step `step` (0 for a ps). */
typedef struct pf_trace_span {
    double start, end;
    uint64_t step;
    int phase;
} pf_trace_span;

/* A trace's state: armed by another thread, recorded by the writer, then done: the spans
 * are the arming thread's to read. */
enum { PF_TRACE_IDLE, PF_TRACE_ARMED, PF_TRACE_RECORDING, PF_TRACE_DONE };

#define PF_TRACE_SPANS_MAX 8192 /* a task's spans in one trace, at most */

typedef struct pf_profile {
    uint64_t ns[PF_PHASE_COUNT]; /* atomic access */
    uint64_t count;              /* steps taken (training task) or pulls answered (ps) */
    uint64_t started_ns;         /* pf_profile_start's clock; 0: not started */
    uint64_t stopped_ns;         /* pf_profile_stop's; 0: still counting */
    uint64_t open;               /* atomic: the open span, start_ns << 4 | phase + 1; 0: none */
    int off;                     /* PSFLOW_PROFILE=off when started: nothing is counted */
    /* a trace on demand: the writer appends to `trace` while RECORDING; in the other states
     * the buffer is the arming thread's */
    int trace_state;      /* atomic: PF_TRACE_* */
    int trace_stop;       /* atomic: the arming thread asks the recording to end */
    uint64_t trace_id;    /* the arming thread's */
    pf_trace_span *trace; /* trace_cap spans */
    uint32_t trace_cap;   /* set when armed */
    uint32_t trace_len;   /* atomic: spans written */
    uint64_t trace_from;  /* a training task records global steps from .. from + steps - 1 */
    uint64_t trace_steps; /* 0: from the arming until stopped (a ps) */
    uint64_t trace_step;  /* writer's: the global step its spans are in */
} pf_profile;

/* The phase's name in reports ("input", ... "queue"), or NULL out of range. */
const char *pf_phase_name(int phase);

/* The phase named `name`, or -1. */
int pf_phase_from_name(const char *name);

/* Zeroes p and starts its wall clock; counting is off when PSFLOW_PROFILE is "off" (the
 * overhead benchmark's baseline). */
void pf_profile_start(pf_profile *p);

/* Stops p's wall clock: the task's steps are over (its counters stay readable). */
void pf_profile_stop(pf_profile *p);

/* Adds the time since `since` (pf_clock_now seconds) to `phase` and closes an open span;
 * returns now, the start of the next phase. With p NULL or off, returns since unchanged and reads
 * no clock: callers chain it as t = pf_profile_add(p, PHASE, t) and need a first t only when
 * counting (pf_profile_now). */
double pf_profile_add(pf_profile *p, pf_phase phase, double since);

/* Marks a span of `phase` begun at `since` as open: until the next pf_profile_add (any
 * phase) closes it, pf_profile_read counts it up to the snapshot. */
void pf_profile_open(pf_profile *p, pf_phase phase, double since);

/* pf_clock_now() while p counts, else 0 (no clock read). */
double pf_profile_now(const pf_profile *p);

/* Counts n steps or answered pulls. */
void pf_profile_count(pf_profile *p, uint64_t n);

/* Arms a trace `id` of at most `capacity` spans (1 .. PF_TRACE_SPANS_MAX): the writer
 * records its spans in global steps from .. from + steps - 1 (pf_profile_at_step says which
 * step it is in: a training task's step, a ps's version); with steps 0 from now until
 * pf_profile_trace_stop. Counting off, the trace is done at once, empty. Returns 0, or -1
 * while a trace is armed or records (or out of memory). Any thread but the writer. Spans are
 * recorded by pf_profile_add and pf_profile_span, except the ps's queue. */
int pf_profile_trace_arm(pf_profile *p, uint64_t id, uint64_t from, uint64_t steps,
                         uint32_t capacity);

/* The writer: its next spans are in global step `global` (a training task, at each step's
 * start); starts and ends a trace of steps. */
void pf_profile_at_step(pf_profile *p, uint64_t global);

/* Ends the trace: at once if it has not started, else at the writer's next span. */
void pf_profile_trace_stop(pf_profile *p);

/* Ends the trace of a writer that has stopped for good (its task ended). */
void pf_profile_trace_finish(pf_profile *p);

/* The spans of a done trace (*n of them, *id its id), or NULL while none is done. */
const pf_trace_span *pf_profile_trace_spans(const pf_profile *p, uint64_t *id, uint32_t *n);

/* Frees the trace buffer (the writer has stopped for good). */
void pf_profile_trace_free(pf_profile *p);

/* Adds end - start to `phase`, as pf_profile_add does, for a span measured by the caller. */
void pf_profile_span(pf_profile *p, pf_phase phase, double start, double end);

/* A snapshot: seconds[PF_PHASE_COUNT] (with an open span's time so far), *count, and *wall
 * (seconds from pf_profile_start to now or to pf_profile_stop). Returns 0, or -1 (nothing
 * written) when p was never started or counts nothing. */
int pf_profile_read(const pf_profile *p, double *seconds, uint64_t *count, double *wall);

#endif
