/* cluster_json.c - the cluster in the JSON shapes of api/rest.md, and the JSON reports
 * that drive it (see cluster_json.h).
 */
#include "coordinator/cluster_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <time.h>

#include "coordinator/cluster_queues.h"
#include "psflow/clock.h"
#include "psflow/mem.h"
#include "psflow/text.h"
#include "psflow/tf_config.h"

json_t *coord_time_json(double t) {
    if (t <= 0)
        return json_null();
    /* Rounded to the millisecond, so a time read back from its own text (time_from_json)
     * prints the same text again. */
    char buf[PF_RFC3339_MAX];
    return json_string(pf_text_format_rfc3339(t, true, buf, sizeof buf));
}

static double time_from_json(json_t *v) {
    double t;
    return pf_text_parse_rfc3339(json_string_value(v), &t) ? t : 0;
}

static json_t *json_number_or_null(double v) {
    return isnan(v) ? json_null() : json_real(v);
}

static double num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* status.progress: the fraction of max_steps done, 0..1 (1 once Succeeded). */
static double progress_of(coord_phase phase, int64_t step, int64_t max_steps) {
    if (phase == COORD_SUCCEEDED)
        return 1.0;
    if (max_steps <= 0 || step <= 0)
        return 0.0;
    return step >= max_steps ? 1.0 : (double)step / (double)max_steps;
}

/* status.eta_seconds: the time left at the recent step rate; 0 once Succeeded, null while
 * not Running or with no rate yet. */
static json_t *eta_json(coord_phase phase, int64_t step, int64_t max_steps, double steps_per_sec) {
    if (phase == COORD_SUCCEEDED)
        return json_real(0.0);
    if (phase != COORD_RUNNING || !(steps_per_sec > 0) || max_steps <= 0)
        return json_null();
    int64_t left = max_steps > step ? max_steps - step : 0;
    return json_real((double)left / steps_per_sec);
}

/* status.stalled and status.stalled_seconds: no step progress for COORD_STALL_SECONDS while
 * training, and for how long (null when not stalled). */
static json_t *stall_json(double stalled_seconds) {
    return json_pack("{s:b, s:o}", "stalled", !isnan(stalled_seconds), "stalled_seconds",
                     json_number_or_null(stalled_seconds));
}

/* status.serving (api/rest.md): one entry per serving task; null without a serving section. */
static json_t *serving_status_json(const coord_job *j) {
    if (!j->n_serving)
        return json_null();
    json_t *arr = json_array();
    for (int i = 0; arr && i < j->n_serving; i++) {
        const coord_serving *s = &j->serving[i];
        json_array_append_new(
            arr, json_pack("{s:i, s:s, s:o, s:o, s:o, s:I, s:I, s:f, s:o, s:o, s:I, s:o}", "index",
                           i, "state", coord_task_state_name(s->state), "node",
                           s->node_id[0] ? json_string(s->node_id) : json_null(), "endpoint",
                           s->endpoint[0] ? json_string(s->endpoint) : json_null(), "version",
                           s->version >= 0 ? json_integer((json_int_t)s->version) : json_null(),
                           "requests", (json_int_t)s->requests, "failed", (json_int_t)s->failed,
                           "requests_per_sec", s->requests_per_sec, "latency_p50_ms",
                           json_number_or_null(s->latency_p50_ms), "latency_p99_ms",
                           json_number_or_null(s->latency_p99_ms), "incarnation",
                           (json_int_t)s->incarnation, "message",
                           s->message[0] ? json_string(s->message) : json_null()));
    }
    return arr;
}

const char *coord_wait_name(coord_wait w) {
    static const char *const names[] = {"capacity", "reserved", "cluster_too_small", "preempted",
                                        "quota"};
    return (unsigned)w < sizeof names / sizeof names[0] ? names[w] : "capacity";
}

/* A job's place in the queue as its status and its list item show it; null when it is not
 * waiting (position 0). `start`: its expected start (0: unknown). */
static json_t *queue_json(const char *name, int position, int priority, coord_wait reason,
                          const char *behind, const char *preempted_by, double preempted_at,
                          double start) {
    if (position <= 0)
        return json_null();
    return json_pack("{s:s, s:i, s:i, s:s, s:o, s:o, s:o, s:o}", "name", name, "position", position,
                     "priority", priority, "reason", coord_wait_name(reason), "behind",
                     behind[0] ? json_string(behind) : json_null(), "preempted_by",
                     preempted_by[0] ? json_string(preempted_by) : json_null(), "preempted_since",
                     preempted_by[0] ? coord_time_json(preempted_at) : json_null(),
                     "estimated_start", start > 0 ? coord_time_json(start) : json_null());
}

json_t *coord_job_status_json(const coord_job *j) {
    json_t *conds = json_array();
    for (int i = 0; i < j->n_conds; i++) {
        const coord_condition *k = &j->conds[i];
        json_array_append_new(conds,
                              json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", k->type, "status",
                                        k->status, "reason", k->reason, "message", k->message,
                                        "last_transition_time", coord_time_json(k->time)));
    }
    json_t *rs = json_object();
    static const char *const types[] = {"chief", "evaluator", "ps", "worker"};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int active = 0, succeeded = 0, failed = 0, any = 0;
        for (int i = 0; i < j->n_tasks; i++) {
            const coord_task *t = &j->tasks[i];
            if (strcmp(t->type, types[k]) != 0)
                continue;
            any = 1;
            active += t->state == TASK_RUNNING ||
                      (t->state == TASK_PENDING && t->node_id[0] && j->phase == COORD_RUNNING);
            succeeded += t->state == TASK_SUCCEEDED;
            failed += t->state == TASK_FAILED || t->state == TASK_LOST;
        }
        if (any)
            json_object_set_new(rs, types[k],
                                json_pack("{s:i, s:i, s:i}", "active", active, "succeeded",
                                          succeeded, "failed", failed));
    }
    int64_t max_steps = j->spec.training.max_steps;
    json_t *out =
        json_pack("{s:s, s:s, s:o, s:I, s:I, s:f, s:o, s:o, s:o, s:o, s:f, s:o, s:i, s:i, s:o, "
                  "s:o, s:o, s:o}",
                  "phase", coord_phase_name(j->phase), "message", j->message, "conditions", conds,
                  "global_step", (json_int_t)j->global_step, "max_steps", (json_int_t)max_steps,
                  "progress", progress_of(j->phase, j->global_step, max_steps), "eta_seconds",
                  eta_json(j->phase, j->global_step, max_steps, j->steps_per_sec), "loss",
                  json_number_or_null(j->loss), "accuracy", json_number_or_null(j->accuracy),
                  "test_loss", json_number_or_null(j->test_loss), "examples_per_sec",
                  j->examples_per_sec, "steps_per_sec", json_number_or_null(j->steps_per_sec),
                  "restarts", j->restarts, "generation", j->generation, "create_time",
                  coord_time_json(j->create_time), "start_time", coord_time_json(j->start_time),
                  "completion_time", coord_time_json(j->completion_time), "replica_statuses", rs);
    if (out) /* training that stopped advancing (cluster_rate.h) */
        json_object_update_new(out, stall_json(coord_rate_stalled_seconds(&j->rate)));
    if (out) /* a two-class job's (null otherwise, and until the chief evaluates); bayes_auc:
              * synthetic_ctr data's, the best any model can reach on the test set */
        json_object_update_new(out, json_pack("{s:o, s:o, s:o}", "test_auc",
                                              json_number_or_null(j->test_auc), "test_calibration",
                                              json_number_or_null(j->test_calibration), "bayes_auc",
                                              json_number_or_null(j->bayes_auc)));
    if (out) /* waiting for agents: its place in the queue (null once admitted) */
        json_object_set_new(out, "queue",
                            queue_json(pf_job_spec_queue(&j->spec), j->queue_position,
                                       j->spec.run_policy.priority, j->queue_reason,
                                       j->queue_behind, j->preempted_by, j->preempted_at,
                                       j->queue_start));
    if (out) /* times a job of higher priority stopped it (run_policy.preemptible), and the
              * seconds it waited after them before this one */
        json_object_update_new(out, json_pack("{s:i, s:f}", "preemptions", j->preemptions,
                                              "preempted_seconds", j->preempted_seconds));
    if (out) /* bad input lines skipped (data.on_error skip) */
        json_object_set_new(out, "bad_lines_skipped", json_integer((json_int_t)j->bad_lines));
    if (out) /* data.splits dynamic: ps 0's work queue (null until it reports one) */
        json_object_set_new(
            out, "input",
            j->has_input
                ? json_pack("{s:I, s:I, s:I, s:I, s:I, s:b}", "epoch", (json_int_t)j->input_epoch,
                            "epochs", (json_int_t)j->spec.training.epochs, "splits",
                            (json_int_t)j->input_splits, "done", (json_int_t)j->input_done,
                            "leased", (json_int_t)j->input_leased, "finished", j->input_finished)
                : json_null());
    if (out) /* serving: its tasks, endpoints and figures (null without the section) */
        json_object_set_new(out, "serving", serving_status_json(j));
    if (out) /* the evaluator task's latest evaluation (null until it reports one) */
        json_object_update_new(
            out, json_pack("{s:o, s:o, s:o}", "eval_step",
                           j->eval_step >= 0 ? json_integer((json_int_t)j->eval_step) : json_null(),
                           "eval_loss", json_number_or_null(j->eval_loss), "eval_accuracy",
                           json_number_or_null(j->eval_accuracy)));
    return out;
}

/* The serving tasks as stored, each by its "index": which agent holds it, its state and last
 * figures (the agent's next heartbeat refreshes them; coord_serving_reconcile checks them
 * against the agents' assignments). */
static void serving_status_from_json(coord_job *j, json_t *arr) {
    size_t k;
    json_t *o;
    json_array_foreach(arr, k, o) {
        json_t *index = json_object_get(o, "index");
        if (!json_is_integer(index) || json_integer_value(index) < 0 ||
            json_integer_value(index) >= j->n_serving)
            continue;
        coord_serving *s = &j->serving[json_integer_value(index)];
        const char *state = json_string_value(json_object_get(o, "state")),
                   *node = json_string_value(json_object_get(o, "node")),
                   *endpoint = json_string_value(json_object_get(o, "endpoint")),
                   *message = json_string_value(json_object_get(o, "message"));
        for (int q = TASK_PENDING; state && q <= TASK_STOPPED; q++)
            if (!strcmp(state, coord_task_state_name((coord_task_state)q)))
                s->state = (coord_task_state)q;
        snprintf(s->node_id, sizeof s->node_id, "%s", node ? node : "");
        snprintf(s->endpoint, sizeof s->endpoint, "%s", endpoint ? endpoint : "");
        snprintf(s->message, sizeof s->message, "%s", message ? message : "");
        json_t *v = json_object_get(o, "version"), *inc = json_object_get(o, "incarnation");
        s->version = json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
        s->incarnation = json_is_integer(inc) ? (uint64_t)json_integer_value(inc) : 0;
        s->requests = (int64_t)json_integer_value(json_object_get(o, "requests"));
        s->failed = (int64_t)json_integer_value(json_object_get(o, "failed"));
    }
}

void coord_job_status_from_json(coord_job *j, json_t *s) {
    const char *phase = json_string_value(json_object_get(s, "phase"));
    for (int i = COORD_CREATED; phase && i <= COORD_FAILED; i++)
        if (!strcmp(phase, coord_phase_name((coord_phase)i)))
            j->phase = (coord_phase)i;
    const char *m = json_string_value(json_object_get(s, "message"));
    snprintf(j->message, sizeof j->message, "%s", m ? m : "");
    size_t i;
    json_t *k;
    j->n_conds = 0;
    json_array_foreach(json_object_get(s, "conditions"), i, k) {
        if (j->n_conds == COORD_MAX_CONDS)
            break;
        coord_condition *d = &j->conds[j->n_conds++];
        const char *f[4] = {json_string_value(json_object_get(k, "type")),
                            json_string_value(json_object_get(k, "status")),
                            json_string_value(json_object_get(k, "reason")),
                            json_string_value(json_object_get(k, "message"))};
        snprintf(d->type, sizeof d->type, "%s", f[0] ? f[0] : "");
        snprintf(d->status, sizeof d->status, "%s", f[1] ? f[1] : "");
        snprintf(d->reason, sizeof d->reason, "%s", f[2] ? f[2] : "");
        snprintf(d->message, sizeof d->message, "%s", f[3] ? f[3] : "");
        d->time = time_from_json(json_object_get(k, "last_transition_time"));
    }
    j->global_step = (int64_t)json_integer_value(json_object_get(s, "global_step"));
    j->loss = num(s, "loss");
    j->accuracy = num(s, "accuracy");
    j->test_loss = num(s, "test_loss");
    j->test_auc = num(s, "test_auc");
    j->test_calibration = num(s, "test_calibration");
    j->bayes_auc = num(s, "bayes_auc"); /* NAN in a status stored before it existed */
    j->bad_lines = (int64_t)json_integer_value(json_object_get(s, "bad_lines_skipped"));
    json_t *in = json_object_get(s, "input"); /* as stored: ps 0's next report refreshes it */
    j->has_input = json_is_object(in);
    j->input_epoch = (int64_t)json_integer_value(json_object_get(in, "epoch"));
    j->input_splits = (int64_t)json_integer_value(json_object_get(in, "splits"));
    j->input_done = (int64_t)json_integer_value(json_object_get(in, "done"));
    j->input_leased = (int64_t)json_integer_value(json_object_get(in, "leased"));
    j->input_finished = json_is_true(json_object_get(in, "finished"));
    /* its place in the queue as stored: the next scheduling round works it out again */
    json_t *q = json_object_get(s, "queue");
    const char *behind = json_string_value(json_object_get(q, "behind"));
    j->queue_position = (int)json_integer_value(json_object_get(q, "position"));
    snprintf(j->queue_behind, sizeof j->queue_behind, "%s", behind ? behind : "");
    const char *by = json_string_value(json_object_get(q, "preempted_by"));
    snprintf(j->preempted_by, sizeof j->preempted_by, "%s", by ? by : "");
    j->preempted_at = by ? time_from_json(json_object_get(q, "preempted_since")) : 0;
    if (by && !(j->preempted_at > 0)) /* unreadable: the wait counts from the load */
        j->preempted_at = pf_clock_wall();
    const char *why = json_string_value(json_object_get(q, "reason"));
    j->queue_reason = COORD_WAIT_CAPACITY;
    for (int w = COORD_WAIT_CAPACITY; why && w <= COORD_WAIT_QUOTA; w++)
        if (!strcmp(why, coord_wait_name((coord_wait)w)))
            j->queue_reason = (coord_wait)w;
    j->preemptions = (int)json_integer_value(json_object_get(s, "preemptions"));
    j->preempted_seconds = json_number_value(json_object_get(s, "preempted_seconds"));
    j->eval_loss = num(s, "eval_loss");
    j->eval_accuracy = num(s, "eval_accuracy");
    json_t *es = json_object_get(s, "eval_step");
    j->eval_step = json_is_integer(es) ? (int64_t)json_integer_value(es) : -1;
    j->examples_per_sec = isnan(num(s, "examples_per_sec")) ? 0 : num(s, "examples_per_sec");
    j->steps_per_sec = num(s, "steps_per_sec"); /* NAN: null, not measured */
    j->restarts = (int)json_integer_value(json_object_get(s, "restarts"));
    j->generation = (int)json_integer_value(json_object_get(s, "generation"));
    j->create_time = time_from_json(json_object_get(s, "create_time"));
    j->start_time = time_from_json(json_object_get(s, "start_time"));
    j->completion_time = time_from_json(json_object_get(s, "completion_time"));
    serving_status_from_json(j, json_object_get(s, "serving"));
}

json_t *coord_job_json(const coord_job *j, double now) {
    (void)now;
    json_t *spec = json_loads(j->spec_json, 0, NULL);
    return json_pack("{s:s, s:o, s:o}", "name", j->name, "spec", spec ? spec : json_null(),
                     "status", coord_job_status_json(j));
}

json_t *coord_task_json(const coord_task *t, double lease, double now) {
    double age = t->last_heartbeat > 0 ? now - t->last_heartbeat : -1;
    return json_pack("{s:s, s:i, s:o, s:o, s:s, s:I, s:i, s:o, s:o, s:f, s:I, s:f, s:I, s:I, s:o}",
                     "type", t->type, "index", t->index, "node_id",
                     t->node_id[0] ? json_string(t->node_id) : json_null(), "address",
                     t->address[0] ? json_string(t->address) : json_null(), "state",
                     coord_task_state_name(t->state), "incarnation", (json_int_t)t->incarnation,
                     "restarts", t->restarts, "last_heartbeat", coord_time_json(t->last_heartbeat),
                     "heartbeat_age_seconds", age >= 0 ? json_real(age) : json_null(),
                     "lease_seconds", lease, "step", (json_int_t)t->step, "examples_per_sec",
                     t->examples_per_sec, "updates", (json_int_t)t->updates, "stale",
                     (json_int_t)t->stale, "lag",
                     t->has_lag ? json_integer((json_int_t)t->lag) : json_null());
}

/* One profile: its time, count, the role's phases and what they leave ("other"; never
 * below 0: the phases are read a moment apart from the time). */
static json_t *profile_json(const coord_profile *p, int ps) {
    json_t *phases = json_object();
    double sum = 0;
    for (int i = pf_phase_first(ps); phases && i < pf_phase_end(ps); i++) {
        json_object_set_new(phases, pf_phase_name(i), json_real(p->phases[i]));
        if (i != PF_PHASE_QUEUE) /* summed over pulls, not a share of the thread's time */
            sum += p->phases[i];
    }
    return phases ? json_pack("{s:f, s:I, s:o, s:f}", "seconds", p->seconds, "count",
                              (json_int_t)p->count, "phases", phases, "other",
                              sum < p->seconds ? p->seconds - sum : 0.0)
                  : NULL;
}

json_t *coord_job_profile_json(const coord_job *j) {
    json_t *tasks = json_array();
    for (int i = 0; tasks && i < j->n_tasks; i++) {
        const coord_task *t = &j->tasks[i];
        if (!coord_task_profiled(t))
            continue;
        int ps = !strcmp(t->type, "ps");
        bool current = coord_task_profile_current(t);
        json_array_append_new(
            tasks,
            json_pack("{s:s, s:i, s:s, s:o, s:o}", "type", t->type, "index", t->index, "state",
                      coord_task_state_name(t->state), "total",
                      current ? profile_json(&t->profile, ps) : json_null(), "recent",
                      current && t->has_window ? profile_json(&t->window, ps) : json_null()));
    }
    return tasks ? json_pack("{s:s, s:f, s:o}", "job", j->name, "window_seconds",
                             COORD_PROFILE_WINDOW, "tasks", tasks)
                 : NULL;
}

static json_t *quota_json(int64_t quota) {
    return quota < 0 ? json_null() : json_integer((json_int_t)quota);
}

json_t *coord_queue_classes_json(const coord_queue *q) {
    json_t *classes = json_object();
    for (int i = 0; classes && i < q->n_classes; i++)
        if (json_object_set_new(classes, q->classes[i].name, json_integer(q->classes[i].value))) {
            json_decref(classes); /* out of memory: no partial list */
            return NULL;
        }
    return classes;
}

/* Priority classes in one order whatever the input's: the highest first, then by name. */
static int class_before(const void *a, const void *b) {
    const coord_priority_class *x = a, *y = b;
    if (x->value != y->value)
        return x->value > y->value ? -1 : 1;
    return strcmp(x->name, y->name);
}

int coord_queue_classes_read(json_t *classes, coord_queue *q, const char **key, char *msg,
                             size_t cap) {
    q->n_classes = 0;
    *key = "";
    if (!json_is_object(classes)) {
        snprintf(msg, cap, "must be an object of class names and priorities: {\"high\": 100}");
        return -1;
    }
    if (json_object_size(classes) > COORD_MAX_CLASSES) {
        snprintf(msg, cap, "%zu classes, more than the %d a queue may have",
                 json_object_size(classes), COORD_MAX_CLASSES);
        return -1;
    }
    const char *name;
    json_t *v;
    json_object_foreach(classes, name, v) {
        *key = name;
        if (!pf_job_name_valid(name)) {
            snprintf(msg, cap,
                     "a class name is 1 to 63 lowercase letters, digits and '-', starting and "
                     "ending with a letter or digit");
            return -1;
        }
        if (!json_is_integer(v) || json_integer_value(v) < -1000 || json_integer_value(v) > 1000) {
            snprintf(msg, cap, "must be an integer from -1000 to 1000 (a job's priority)");
            return -1;
        }
        coord_priority_class *pc = &q->classes[q->n_classes++];
        snprintf(pc->name, sizeof pc->name, "%s", name);
        pc->value = (int)json_integer_value(v);
    }
    qsort(q->classes, (size_t)q->n_classes, sizeof q->classes[0], class_before);
    return 0;
}

json_t *coord_queue_json(const coord_queue *q) {
    json_t *classes = coord_queue_classes_json(q);
    return json_pack("{s:s, s:{s:o, s:o, s:o}, s:i, s:o, s:{s:i, s:i, s:I}, s:{s:i, s:i, s:I},"
                     " s:{s:i, s:i}, s:o}",
                     "name", q->name, "quota", "ps", quota_json(q->quota_ps), "workers",
                     quota_json(q->quota_workers), "memory_bytes", quota_json(q->quota_memory),
                     "weight", q->weight, "priority_classes", classes, "usage", "ps", q->used_ps,
                     "workers", q->used_workers, "memory_bytes", (json_int_t)q->used_memory,
                     "borrowed", "ps", coord_queue_over_ps(q), "workers",
                     coord_queue_over_workers(q), "memory_bytes",
                     (json_int_t)coord_queue_over_memory(q), "jobs", "running", q->running,
                     "waiting", q->waiting, "create_time", coord_time_json(q->create_time));
}

json_t *coord_node_json(const coord_node *n, double now) {
    const char *state = n->lost ? "lost" : (n->busy || n->job[0]) ? "busy" : "idle";
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:f, s:s, s:o}", "id", n->id, "role",
                     n->role, "address", n->address, "state", state, "job",
                     n->job[0] ? json_string(n->job) : json_null(), "type",
                     n->job[0] ? json_string(n->type) : json_null(), "index",
                     n->job[0] ? json_integer(n->index) : json_null(), "last_heartbeat",
                     coord_time_json(n->last_heartbeat), "heartbeat_age_seconds",
                     now - n->last_heartbeat, "version", n->version, "memory_bytes",
                     n->memory > 0 ? json_integer((json_int_t)n->memory) : json_null());
}

/* --- job summaries (list items and job events) --- */

static json_t *summary_json(const coord_job_summary *s) {
    json_t *out = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:f, s:o, s:o, s:o, s:f, s:o, s:o, s:o, s:o, s:i, "
        "s:{s:{s:i, s:i}, s:{s:i, s:i}}}",
        "name", s->name, "phase", coord_phase_name(s->phase), "reason", s->reason, "message",
        s->message, "mode", s->sync ? "sync" : "async", "global_step", (json_int_t)s->global_step,
        "max_steps", (json_int_t)s->max_steps, "progress",
        progress_of(s->phase, s->global_step, s->max_steps), "eta_seconds",
        eta_json(s->phase, s->global_step, s->max_steps, s->steps_per_sec), "loss",
        json_number_or_null(s->loss), "accuracy", json_number_or_null(s->accuracy),
        "examples_per_sec", s->examples_per_sec, "steps_per_sec",
        json_number_or_null(s->steps_per_sec), "create_time", coord_time_json(s->create_time),
        "start_time", coord_time_json(s->start_time), "completion_time",
        coord_time_json(s->completion_time), "restarts", s->restarts, "replicas", "ps", "ready",
        s->ready[0], "desired", s->desired[0], "worker", "ready", s->ready[1], "desired",
        s->desired[1]);
    if (out)
        json_object_update_new(out, stall_json(s->stalled_seconds));
    if (out) /* waiting: its place in the queue and why (null otherwise) */
        json_object_set_new(out, "queue",
                            queue_json(s->queue, s->queue_position, s->priority, s->queue_reason,
                                       s->queue_behind, s->preempted_by, s->preempted_at,
                                       s->queue_start));
    return out;
}

json_t *coord_job_summary_json(const coord_job *j) {
    coord_job_summary s;
    coord_job_summarize(j, &s);
    return summary_json(&s);
}

/* --- TF_CONFIG and assignments --- */

char *coord_job_tf_config(const coord_job *j, const char *type, int index, const char **why) {
    *why = NULL;
    coord_task *self = coord_task_find((coord_job *)j, type, index);
    if (!self) {
        *why = "the job has no such task";
        return NULL;
    }
    /* Every task has an agent's address but workers added by a live scale-up that have none
     * yet: they get their agents all at once (coord_job_replace_tasks), and until then the
     * cluster lists the workers before them, so each listed index is the task's own. */
    int workers = 0;
    bool gap = false;
    for (int i = 0; i < j->n_tasks; i++) {
        const coord_task *t = &j->tasks[i];
        bool worker = !strcmp(t->type, "worker");
        if (!t->address[0] && (!worker || t->incarnation))
            gap = true;
        else if (worker && t->address[0])
            gap |= workers++ != t->index; /* an addressed worker after one without */
    }
    if (gap) {
        *why = "the job has no agents assigned yet";
        return NULL;
    }
    if (!self->address[0]) {
        *why = "the task has no agent assigned yet";
        return NULL;
    }
    pf_tf_config cfg;
    pf_tf_config_init(&cfg);
    static const char *const types[] = {"chief", "evaluator", "ps", "worker"};
    const char *addrs[PF_MAX_REPLICAS];
    char *out = NULL;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int n = 0;
        for (int i = 0; i < j->n_tasks; i++)
            if (!strcmp(j->tasks[i].type, types[k]) && j->tasks[i].address[0])
                addrs[n++] = j->tasks[i].address;
        if (n && pf_tf_config_add_job(&cfg, types[k], addrs, n) != PF_OK)
            goto done;
    }
    cfg.has_task = true;
    snprintf(cfg.task_type, sizeof cfg.task_type, "%s", type);
    cfg.task_index = index;
    out = pf_tf_config_format(&cfg);
done:
    pf_tf_config_deinit(&cfg);
    if (!out && !*why)
        *why = "out of memory";
    return out;
}

json_t *coord_node_assignment(const coord_cluster *c, const coord_node *n) {
    coord_job *j;
    coord_task *t;
    coord_node_assigned(c, n, &j, &t);
    if (!j)
        return json_null();
    const char *why;
    char *tf = coord_job_tf_config(j, n->type, n->index, &why);
    json_t *spec = json_loads(j->spec_json, 0, NULL);
    uint64_t incarnation = t ? t->incarnation : 0;
    if (!strcmp(n->type, "serve") && n->index >= 0 && n->index < j->n_serving)
        incarnation = j->serving[n->index].incarnation; /* no TF_CONFIG: not in the cluster */
    json_t *a = json_pack("{s:s, s:i, s:s, s:i, s:s?, s:o?, s:I}", "job", j->name, "generation",
                          n->generation, "type", n->type, "index", n->index, "tf_config", tf,
                          "spec", spec, "incarnation", (json_int_t)incarnation);
    pf_free(tf);
    if (a && !strcmp(n->type, "ps")) /* the membership it serves (coord_job_membership) */
        json_object_set_new(a, "workers", json_integer(coord_job_membership(c, j)));
    if (a && t && t == coord_job_chief(j) &&
        j->drain_until > 0) /* preempted: a final checkpoint at this step or later */
        json_object_set_new(a, "checkpoint_now", json_integer((json_int_t)j->drain_step));
    return a ? a : json_null();
}

json_t *coord_event_json(const coord_event *e) {
    switch (e->type) {
    case COORD_EVENT_JOB:
        return summary_json(&e->u.job);
    case COORD_EVENT_TASK: {
        json_t *d = coord_task_json(&e->u.task.task, e->u.task.lease_seconds, e->time);
        if (d)
            json_object_set_new(d, "job", json_string(e->job));
        return d;
    }
    case COORD_EVENT_NODE:
        return coord_node_json(&e->u.node, e->time);
    case COORD_EVENT_POINT:
        return json_pack("{s:s, s:s, s:I, s:f, s:o, s:o, s:o}", "job", e->job, "task",
                         e->u.metric.task, "step", (json_int_t)e->u.metric.step, "time",
                         e->u.metric.time, "loss", json_number_or_null(e->u.metric.loss),
                         "examples_per_sec", json_number_or_null(e->u.metric.examples_per_sec),
                         "step_time_seconds", json_number_or_null(e->u.metric.step_time_seconds));
    case COORD_EVENT_EVAL: {
        json_t *o =
            json_pack("{s:s, s:s, s:I, s:f, s:o, s:o, s:o, s:o}", "job", e->job, "task",
                      e->u.metric.task, "step", (json_int_t)e->u.metric.step, "time",
                      e->u.metric.time, "accuracy", json_number_or_null(e->u.metric.accuracy),
                      "test_loss", json_number_or_null(e->u.metric.test_loss), "test_auc",
                      json_number_or_null(e->u.metric.test_auc), "test_calibration",
                      json_number_or_null(e->u.metric.test_calibration));
        if (o && !isnan(e->u.metric.bayes_auc)) /* synthetic_ctr's, when reported */
            json_object_set_new(o, "bayes_auc", json_real(e->u.metric.bayes_auc));
        return o;
    }
    case COORD_EVENT_LOG:
        return json_pack("{s:s, s:o, s:s, s:s, s:s}", "job", e->job, "time",
                         coord_time_json(e->time), "type", e->u.log.type, "reason", e->u.log.reason,
                         "message", e->u.log.message);
    case COORD_EVENT_CHECKPOINT: {
        json_t *files =
            e->u.checkpoint.files ? json_loads(e->u.checkpoint.files, 0, NULL) : json_null();
        json_t *o = json_pack("{s:s, s:I, s:o, s:I, s:o}", "job", e->job, "step",
                              (json_int_t)e->u.checkpoint.step, "time", coord_time_json(e->time),
                              "bytes", (json_int_t)e->u.checkpoint.bytes, "files", files);
        json_t *kept = e->u.checkpoint.kept ? json_loads(e->u.checkpoint.kept, 0, NULL) : NULL;
        if (o && kept)
            json_object_set_new(o, "kept", kept);
        else
            json_decref(kept);
        return o;
    }
    }
    return NULL;
}

/* Whether s is all visible ASCII (no space, no control character): an endpoint URL. */
static bool visible_ascii(const char *s) {
    for (; *s; s++)
        if (*s < 0x21 || *s > 0x7e)
            return false;
    return true;
}

/* A latency figure: a number >= 0 (ms) below a day, NAN for null; -1 when malformed. */
static double latency_ms(json_t *v) {
    if (json_is_null(v))
        return NAN;
    double x = json_number_value(v);
    return json_is_number(v) && x >= 0 && x < 86400e3 ? x : -1;
}

/* A serving task's figures (serving in a heartbeat): all of them in range, or none. */
static void serving_from_json(json_t *sv, coord_report *out) {
    if (!json_is_object(sv))
        return;
    json_t *ep = json_object_get(sv, "endpoint"), *ver = json_object_get(sv, "version"),
           *req = json_object_get(sv, "requests"), *fail = json_object_get(sv, "failed");
    const char *e = json_string_value(ep);
    double p50 = latency_ms(json_object_get(sv, "latency_p50_ms")),
           p99 = latency_ms(json_object_get(sv, "latency_p99_ms"));
    bool ok = (json_is_null(ep) || (e && !strncmp(e, "http://", 7) &&
                                    strlen(e) < COORD_ENDPOINT_MAX && visible_ascii(e))) &&
              (json_is_null(ver) || (json_is_integer(ver) && json_integer_value(ver) >= 0)) &&
              json_is_integer(req) && json_integer_value(req) >= 0 && json_is_integer(fail) &&
              json_integer_value(fail) >= 0 &&
              json_integer_value(fail) <= json_integer_value(req) && p50 != -1 && p99 != -1;
    if (!ok)
        return;
    out->has_serving = true;
    out->endpoint = e;
    out->version = json_is_integer(ver) ? json_integer_value(ver) : -1;
    out->requests = json_integer_value(req);
    out->failed = json_integer_value(fail);
    out->latency_p50_ms = p50;
    out->latency_p99_ms = p99;
}

/* A heartbeat's profile (api/rest.md): {"count", "seconds", "phases": {NAME: seconds}}, the
 * phases a ps reports (apply, copy, queue) or a training task's (the others); all or
 * nothing. */
static void profile_from_json(json_t *p, const char *type, coord_report *out) {
    json_t *count = json_object_get(p, "count"), *secs = json_object_get(p, "seconds"),
           *phases = json_object_get(p, "phases"), *v;
    const double max = 1e9;
    if (!json_is_integer(count) || json_integer_value(count) < 0 ||
        json_integer_value(count) > (json_int_t)1e15 || !json_is_number(secs) ||
        !(json_number_value(secs) >= 0 && json_number_value(secs) <= max) ||
        !json_is_object(phases) || !type)
        return;
    int ps = !strcmp(type, "ps");
    coord_profile prof = {json_number_value(secs), json_integer_value(count), {0}};
    const char *name;
    json_object_foreach(phases, name, v) {
        int i = pf_phase_from_name(name);
        if (i < 0 || (i >= PF_PHASE_FIRST_PS) != ps || !json_is_number(v) ||
            !(json_number_value(v) >= 0 && json_number_value(v) <= max))
            return;
        prof.phases[i] = json_number_value(v);
    }
    out->has_profile = true;
    out->profile = prof;
}

/* A ps's stats.tables into out (n_tables 0 unless every entry is well formed: a table of the
 * job's name length, each count an integer 0 .. 2^53). */
static void tables_from_json(json_t *tables, coord_report *out) {
    size_t n = json_array_size(tables), i;
    json_t *o;
    out->n_tables = 0;
    if (n > PF_MAX_EMBEDDINGS)
        return;
    static const char *const keys[] = {"rows",    "max_rows", "admitted", "refused",
                                       "evicted", "lookups",  "misses",   "bytes"};
    json_array_foreach(tables, i, o) {
        coord_table_stats *t = &out->tables[i];
        const char *name = json_string_value(json_object_get(o, "table"));
        if (!name || !*name || strlen(name) > PF_NAME_MAX)
            return;
        snprintf(t->table, sizeof t->table, "%s", name);
        long long *fields[] = {&t->rows,    &t->max_rows, &t->admitted, &t->refused,
                               &t->evicted, &t->lookups,  &t->misses,   &t->bytes};
        for (int k = 0; k < 8; k++) {
            json_t *v = json_object_get(o, keys[k]);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > (1LL << 53))
                return;
            *fields[k] = json_integer_value(v);
        }
        t->lookups_per_sec = 0;
    }
    out->n_tables = (int)n;
}

void coord_report_from_json(json_t *r, coord_report *out) {
    memset(out, 0, sizeof *out);
    out->state = json_string_value(json_object_get(r, "state"));
    out->job = json_string_value(json_object_get(r, "job"));
    out->type = json_string_value(json_object_get(r, "type"));
    out->message = json_string_value(json_object_get(r, "message"));
    out->reason = json_string_value(json_object_get(r, "reason"));
    out->generation = json_integer_value(json_object_get(r, "generation"));
    out->index = json_integer_value(json_object_get(r, "index"));
    out->exit_code = json_integer_value(json_object_get(r, "exit_code"));
    json_t *incarnation = json_object_get(r, "incarnation");
    if (json_is_integer(incarnation) && json_integer_value(incarnation) > 0)
        out->incarnation = (uint64_t)json_integer_value(incarnation);
    json_t *workers = json_object_get(r, "workers");
    out->has_workers = json_is_integer(workers) && json_integer_value(workers) >= 1 &&
                       json_integer_value(workers) <= PF_MAX_REPLICAS;
    out->workers = out->has_workers ? json_integer_value(workers) : 0;
    json_t *stats = json_object_get(r, "stats");
    if (json_is_object(stats)) {
        json_t *updates = json_object_get(stats, "updates"),
               *stale = json_object_get(stats, "stale");
        out->has_updates = json_is_integer(updates);
        out->updates = json_integer_value(updates);
        out->has_stale = json_is_integer(stale);
        out->stale = json_integer_value(stale);
        json_t *in = json_object_get(stats, "input");
        json_t *ie = json_object_get(in, "epoch"), *is = json_object_get(in, "splits"),
               *id = json_object_get(in, "done"), *il = json_object_get(in, "leased"),
               *fin = json_object_get(in, "finished");
        long long splits = json_integer_value(is);
        out->has_input = json_is_integer(ie) && json_integer_value(ie) >= 0 &&
                         json_integer_value(ie) <= 1000000 && json_is_integer(is) && splits >= 1 &&
                         splits <= (1 << 24) && json_is_integer(id) &&
                         json_integer_value(id) >= 0 && json_integer_value(id) <= splits &&
                         json_is_integer(il) && json_integer_value(il) >= 0 &&
                         json_integer_value(il) <= splits && json_is_boolean(fin);
        if (out->has_input) {
            out->input_epoch = json_integer_value(ie);
            out->input_splits = splits;
            out->input_done = json_integer_value(id);
            out->input_leased = json_integer_value(il);
            out->input_finished = json_is_true(fin);
        }
        json_t *pulled = json_object_get(stats, "rows_pulled"),
               *pushed = json_object_get(stats, "rows_pushed");
        out->has_rows = json_is_integer(pulled) && json_integer_value(pulled) >= 0 &&
                        json_is_integer(pushed) && json_integer_value(pushed) >= 0;
        out->rows_pulled = out->has_rows ? json_integer_value(pulled) : 0;
        out->rows_pushed = out->has_rows ? json_integer_value(pushed) : 0;
        tables_from_json(json_object_get(stats, "tables"), out);
        json_t *lags = json_object_get(stats, "lags"), *lag;
        size_t i, n = json_array_size(lags);
        out->n_lags = n <= PF_MAX_REPLICAS + 1 ? (int)n : 0;
        json_array_foreach(lags, i, lag) {
            if (i >= (size_t)out->n_lags || !json_is_integer(lag) || json_integer_value(lag) < -1) {
                out->n_lags = 0; /* all or nothing */
                break;
            }
            out->lags[i] = json_integer_value(lag);
        }
    }
    serving_from_json(json_object_get(r, "serving"), out);
    profile_from_json(json_object_get(r, "profile"), out->type, out);
    json_t *res = json_object_get(r, "result");
    out->accuracy = num(res, "accuracy");
    out->test_loss = num(res, "test_loss");
    out->test_auc = num(res, "test_auc");
    out->test_calibration = num(res, "test_calibration");
    json_t *steps = json_object_get(res, "steps");
    out->steps = json_is_integer(steps) && json_integer_value(steps) >= 0
                     ? (long long)json_integer_value(steps)
                     : -1;
}

bool coord_node_heartbeat_json(coord_cluster *c, coord_node *n, json_t *report, double now) {
    coord_report r;
    coord_report_from_json(report, &r);
    return coord_node_heartbeat(c, n, &r, now);
}

pf_status coord_job_record_metrics_json(coord_cluster *c, coord_job *j, const char *task,
                                        json_t *points, json_t *evals, double now) {
    size_t n_points = json_array_size(points), n_evals = json_array_size(evals);
    coord_point *p = n_points ? pf_mallocarray(n_points, sizeof *p) : NULL;
    coord_eval *e = n_evals ? pf_mallocarray(n_evals, sizeof *e) : NULL;
    if ((n_points && !p) || (n_evals && !e) || n_points > INT_MAX || n_evals > INT_MAX) {
        pf_free(p);
        pf_free(e);
        return PF_ERR_NOMEM;
    }
    for (size_t i = 0; i < n_points; i++) {
        json_t *o = json_array_get(points, i);
        p[i] = (coord_point){json_integer_value(json_object_get(o, "step")),
                             num(o, "time"),
                             num(o, "loss"),
                             num(o, "examples_per_sec"),
                             num(o, "step_time_seconds"),
                             json_integer_value(json_object_get(o, "bad_lines"))};
    }
    for (size_t i = 0; i < n_evals; i++) {
        json_t *o = json_array_get(evals, i);
        e[i] = (coord_eval){json_integer_value(json_object_get(o, "step")),
                            num(o, "time"),
                            num(o, "accuracy"),
                            num(o, "test_loss"),
                            num(o, "test_auc"),
                            num(o, "test_calibration"),
                            num(o, "bayes_auc")};
    }
    coord_job_record_metrics(c, j, task, p, (int)n_points, e, (int)n_evals, now);
    pf_free(p);
    pf_free(e);
    return PF_OK;
}
