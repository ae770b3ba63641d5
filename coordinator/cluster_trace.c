/* cluster_trace.c - a trace on demand, the coordinator's side (see cluster_trace.h). */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/cluster_trace.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/profile.h"

#define TRACE_LEAD        5.0 /* seconds from the request to the first step recorded */
#define TRACE_STEP_MAX    ((int64_t)1 << 50) /* a job step a trace can start after */
#define TRACE_RATE_MAX    1e7                /* steps a second */
#define TRACE_WAIT_MAX    600.0
#define TRACE_GRACE       15.0  /* after the deadline: the spans' way back */
#define TRACE_CLOCK_SLACK 600.0 /* seconds a span may lie outside the recording (clocks) */

static void task_name(const coord_task *t, char *out, size_t n) {
    snprintf(out, n, "%s-%d", t->type, t->index);
}

static bool training(const coord_task *t) {
    return coord_task_profiled(t) && strcmp(t->type, "ps") != 0;
}

/* Every running task of the trace's job sent its spans (training tasks only, or all). */
static bool all_sent(const coord_job *j, bool training_only) {
    const coord_trace *tr = j->trace;
    for (int i = 0; i < j->n_tasks; i++) {
        const coord_task *t = &j->tasks[i];
        char name[48];
        task_name(t, name, sizeof name);
        if (coord_task_profiled(t) && (!training_only || training(t)) && t->state == TASK_RUNNING &&
            !json_object_get(tr->tasks, name))
            return false;
    }
    return true;
}

static void check_complete(coord_job *j, double now) {
    coord_trace *tr = j->trace;
    if (!tr || tr->complete)
        return;
    if (all_sent(j, false) || now > tr->deadline + TRACE_GRACE) {
        tr->complete = true;
        tr->completed = now;
        fprintf(stderr,
                "psflow coordinator: trace %llu of job %s complete (%zu tasks sent spans)\n",
                (unsigned long long)tr->id, j->name, json_object_size(tr->tasks));
    }
}

int coord_trace_start(coord_job *j, int steps, double now, char *why, size_t why_size) {
    if (j->phase != COORD_RUNNING) {
        snprintf(why, why_size, "job %s is not running (%s): a trace records running tasks",
                 j->name, coord_phase_name(j->phase));
        return -1;
    }
    /* the job's steps a second: the recent rate, or its average so far */
    double rate = j->steps_per_sec;
    if (!(rate > 0) || !isfinite(rate))
        rate = j->global_step > 0 && j->start_time > 0 && now > j->start_time
                   ? (double)j->global_step / (now - j->start_time)
                   : 0;
    if (j->global_step > TRACE_STEP_MAX || !(rate <= TRACE_RATE_MAX)) {
        snprintf(why, why_size, "job %s's step (%lld) or step rate is out of what a trace records",
                 j->name, (long long)j->global_step);
        return -1;
    }
    if (!(rate > 0)) {
        snprintf(why, why_size,
                 "job %s has reported no step yet: a trace starts from its step rate; try again "
                 "once it trains",
                 j->name);
        return -1;
    }
    check_complete(j, now);
    if (j->trace && !j->trace->complete) {
        snprintf(why, why_size, "trace %llu of job %s is still recording",
                 (unsigned long long)j->trace->id, j->name);
        return -1;
    }
    coord_trace *tr = pf_calloc(1, sizeof *tr);
    if (!tr || !(tr->tasks = json_object())) {
        pf_free(tr);
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    /* milliseconds of the clock: an agent that armed a trace of this job before a coordinator
     * restart never takes a new one for it */
    uint64_t id = (uint64_t)(now * 1e3);
    tr->id = j->trace && j->trace->id >= id ? j->trace->id + 1 : id;
    tr->steps = steps;
    tr->started = now;
    /* Every training task records the same steps: ones the job reaches TRACE_LEAD seconds
     * from its last reported step, after every agent has heard of the trace (heartbeats come
     * every second, step reports every few). Then twice the time the steps take, and the
     * heartbeats' time. */
    tr->from = j->global_step + 2 + (int64_t)ceil(TRACE_LEAD * rate);
    double wait = TRACE_LEAD + 30 + 2 * steps / rate;
    tr->deadline = now + (wait < TRACE_WAIT_MAX ? wait : TRACE_WAIT_MAX);
    coord_trace_free(j->trace);
    j->trace = tr;
    fprintf(stderr, "psflow coordinator: trace %llu of job %s: recording steps %lld to %lld\n",
            (unsigned long long)tr->id, j->name, (long long)tr->from,
            (long long)tr->from + steps - 1);
    return 0;
}

/* The job and task node n holds, or NULL. */
static coord_task *node_task(coord_cluster *c, const coord_node *n, coord_job **job) {
    coord_job *j = n->job[0] ? coord_job_find(c, n->job) : NULL;
    coord_task *t = j ? coord_task_find(j, n->type, n->index) : NULL;
    *job = j;
    return t && coord_task_profiled(t) && !strcmp(t->node_id, n->id) ? t : NULL;
}

json_t *coord_trace_directive(coord_cluster *c, const coord_node *n, double now) {
    coord_job *j;
    coord_task *t = node_task(c, n, &j);
    if (!t || !j->trace)
        return NULL;
    check_complete(j, now);
    coord_trace *tr = j->trace;
    char name[48];
    task_name(t, name, sizeof name);
    if (tr->complete || json_object_get(tr->tasks, name))
        return NULL;
    /* a ps records the versions it serves for the steps, and the one after: the answers to
     * the last step's pushes (or until the training tasks are done with their steps) */
    bool stop = now > tr->deadline || (!training(t) && all_sent(j, true));
    return json_pack("{s:I, s:I, s:i, s:b}", "id", (json_int_t)tr->id, "from", (json_int_t)tr->from,
                     "steps", tr->steps + !training(t), "stop", stop);
}

/* Checks one span [phase, start_us, duration_us, step] of a task (ps or not): NULL, or what
 * is wrong. */
static const char *check_span(const json_t *s, bool ps, double lo_us, double hi_us) {
    if (!json_is_array(s) || json_array_size(s) != 4)
        return "must be [phase, start_us, duration_us, step]";
    json_t *phase = json_array_get(s, 0), *start = json_array_get(s, 1),
           *dur = json_array_get(s, 2), *step = json_array_get(s, 3);
    json_int_t ph = json_integer_value(phase);
    if (!json_is_integer(phase) || ph < pf_phase_first(ps) || ph >= pf_phase_end(ps) ||
        ph == PF_PHASE_QUEUE)
        return "phase: not one of the task's traced phases";
    if (!json_is_number(start) || !(json_number_value(start) >= lo_us) ||
        !(json_number_value(start) <= hi_us))
        return "start_us: outside the recording";
    if (!json_is_number(dur) || !(json_number_value(dur) >= 0) ||
        !(json_number_value(dur) <= TRACE_WAIT_MAX * 2 * 1e6))
        return "duration_us: must be 0 .. 1200 s";
    if (!json_is_integer(step) || json_integer_value(step) < 0 ||
        json_integer_value(step) > (json_int_t)1e15)
        return "step: must be an integer 0 .. 10^15";
    return NULL;
}

void coord_trace_take(coord_cluster *c, const coord_node *n, const json_t *trace, double now) {
    coord_job *j;
    coord_task *t = node_task(c, n, &j);
    if (!trace || !t || !j->trace || j->trace->complete)
        return;
    coord_trace *tr = j->trace;
    json_t *id = json_object_get(trace, "id"), *spans = json_object_get(trace, "spans");
    json_t *rtt = json_object_get(trace, "rtt");
    if (!json_is_integer(id) || (uint64_t)json_integer_value(id) != tr->id)
        return; /* an earlier trace's, ended late */
    char name[48], why[160] = "";
    task_name(t, name, sizeof name);
    if (json_object_get(tr->tasks, name))
        return;
    bool ps = !training(t);
    double lo = (tr->started - TRACE_CLOCK_SLACK) * 1e6, hi = (now + TRACE_CLOCK_SLACK) * 1e6;
    if (!json_is_array(spans) || json_array_size(spans) > PF_TRACE_SPANS_MAX) {
        snprintf(why, sizeof why, "/trace/spans: must be an array of at most %d spans",
                 PF_TRACE_SPANS_MAX);
    } else if (rtt && (!json_is_number(rtt) || !(json_number_value(rtt) >= -1) ||
                       !(json_number_value(rtt) <= 60))) {
        snprintf(why, sizeof why, "/trace/rtt: must be a number of seconds, -1 .. 60");
    } else {
        for (size_t i = 0; i < json_array_size(spans) && !why[0]; i++) {
            const char *bad = check_span(json_array_get(spans, i), ps, lo, hi);
            if (bad)
                snprintf(why, sizeof why, "/trace/spans/%zu: %s", i, bad);
        }
    }
    json_t *entry;
    if (why[0]) {
        fprintf(stderr, "psflow coordinator: refused the trace spans of %s of job %s: %s\n", name,
                j->name, why);
        entry = json_pack("{s:s}", "refused", why);
    } else {
        entry = json_pack("{s:O, s:f}", "spans", spans, "rtt", rtt ? json_number_value(rtt) : -1);
    }
    if (entry)
        json_object_set_new(tr->tasks, name, entry);
    check_complete(j, now);
}

/* The metadata events of task t as process `pid`: its name, its place, its thread. */
static void add_meta(json_t *ev, int pid, const char *name, bool ps) {
    json_array_append_new(ev,
                          json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "ph", "M", "name",
                                    "process_name", "pid", pid, "tid", 0, "args", "name", name));
    json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:i, s:{s:i}}", "ph", "M", "name",
                                        "process_sort_index", "pid", pid, "tid", 0, "args",
                                        "sort_index", pid));
    json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "ph", "M", "name",
                                        "thread_name", "pid", pid, "tid", 1, "args", "name",
                                        ps ? "service" : "trainer"));
}

json_t *coord_trace_json(coord_job *j, double now) {
    coord_trace *tr = j->trace;
    if (!tr)
        return NULL;
    check_complete(j, now);
    json_t *events = json_array(), *tasks = json_array(), *missing = json_array();
    /* The training tasks' steps, from the first one's start (time 0) to the last one's end:
     * a ps records from when its agent hears of the trace until it is told to stop, and
     * only its spans within the steps are shown. */
    double lo = INFINITY, hi = -INFINITY, first = INFINITY;
    for (int i = 0; i < j->n_tasks; i++) {
        char name[48];
        task_name(&j->tasks[i], name, sizeof name);
        size_t k;
        json_t *s;
        json_array_foreach(json_object_get(json_object_get(tr->tasks, name), "spans"), k, s) {
            double start = json_number_value(json_array_get(s, 1));
            double end = start + json_number_value(json_array_get(s, 2));
            first = start < first ? start : first;
            if (training(&j->tasks[i])) {
                lo = start < lo ? start : lo;
                hi = end > hi ? end : hi;
            }
        }
    }
    double t0 = isfinite(lo) ? lo : first;
    if (!isfinite(lo)) /* no training task's spans: all of the ps's */
        lo = -INFINITY, hi = INFINITY;
    for (int i = 0; events && tasks && missing && i < j->n_tasks; i++) {
        const coord_task *t = &j->tasks[i];
        if (!coord_task_profiled(t))
            continue;
        char name[48];
        task_name(t, name, sizeof name);
        json_t *entry = json_object_get(tr->tasks, name);
        if (!entry) {
            json_array_append_new(missing, json_string(name));
            continue;
        }
        json_t *spans = json_object_get(entry, "spans");
        json_t *summary =
            json_pack("{s:s, s:i}", "task", name, "spans", (int)json_array_size(spans));
        int shown = 0;
        if (summary && json_object_get(entry, "refused"))
            json_object_set(summary, "refused", json_object_get(entry, "refused"));
        else if (summary)
            json_object_set(summary, "rtt", json_object_get(entry, "rtt"));
        json_array_append_new(tasks, summary);
        bool ps = !training(t);
        int pid = i + 1;
        add_meta(events, pid, name, ps);
        size_t k;
        json_t *s;
        json_array_foreach(spans, k, s) {
            int phase = (int)json_integer_value(json_array_get(s, 0));
            double start = json_number_value(json_array_get(s, 1));
            double dur = json_number_value(json_array_get(s, 2));
            if (start + dur < lo || start > hi)
                continue;
            shown++;
            json_t *e = json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f}", "ph", "X", "name",
                                  pf_phase_name(phase), "cat", ps ? "ps" : "step", "pid", pid,
                                  "tid", 1, "ts", start - t0, "dur", dur);
            if (e && !ps)
                json_object_set_new(e, "args", json_pack("{s:O}", "step", json_array_get(s, 3)));
            json_array_append_new(events, e);
        }
        if (summary)
            json_object_set_new(summary, "shown", json_integer(shown));
    }
    if (!events || !tasks || !missing) {
        json_decref(events);
        json_decref(tasks);
        json_decref(missing);
        return NULL;
    }
    return json_pack("{s:o, s:s, s:{s:s, s:I, s:I, s:i, s:s, s:f, s:f, s:o, s:o}}", "traceEvents",
                     events, "displayTimeUnit", "ms", "psflow", "job", j->name, "id",
                     (json_int_t)tr->id, "from", (json_int_t)tr->from, "steps", tr->steps, "state",
                     tr->complete ? "complete" : "recording", "started", tr->started, "start_us",
                     isfinite(t0) ? t0 : 0.0, "tasks", tasks, "missing", missing);
}
