/* cluster_fixture.c - see cluster_fixture.h. */
#include "cluster_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/cluster_json.h"
#include "psflow/mem.h"

/* --- helpers ---------------------------------------------------------------------------------- */

void parse_spec(const char *text, pf_job_spec *spec) {
    pf_error err;
    if (pf_job_spec_parse(text, strlen(text), spec, &err) != PF_OK)
        fail_msg("spec %s: %s (at %s)", text, err.message, err.pointer);
}

/* A valid linear job `name` with `ps` ps and `workers` worker tasks and 100 steps; `extra`
 * appends top-level fields (", \"run_policy\": {...}") or is "". */
void make_spec(pf_job_spec *spec, const char *name, int ps, int workers, const char *extra) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"name\": \"%s\", \"replicas\": {\"ps\": %d, \"worker\": %d},"
             " \"model\": {\"type\": \"linear\", \"inputs\": 1},"
             " \"data\": {\"format\": \"synthetic_linear\"},"
             " \"training\": {\"max_steps\": 100}%s}",
             name, ps, workers, extra);
    parse_spec(text, spec);
}

/* Submits a new job; the cluster takes the spec. */
coord_job *submit(coord_cluster *c, pf_job_spec *spec, double now) {
    coord_job *j = NULL;
    int created = -1;
    pf_error err;
    pf_status st = coord_job_submit(c, spec, now, &j, &created, &err);
    if (st != PF_OK)
        fail_msg("submit: %s: %s", pf_strerror(st), err.message);
    assert_int_equal(created, 1);
    assert_non_null(j);
    pf_job_spec_deinit(spec); /* empty: stolen */
    return j;
}

/* Registers agent `id` of `role`, advertising "<id>.test:2222". */
coord_node *add_node(coord_cluster *c, const char *id, const char *role, double now) {
    char address[COORD_ADDR_MAX];
    snprintf(address, sizeof address, "%s.test:2222", id);
    coord_node *n = NULL;
    int created = -1;
    assert_int_equal(coord_node_register(c, id, role, address, "0.1.0", 0, now, &n, &created),
                     PF_OK);
    assert_non_null(n);
    return n;
}

json_t *report_json(const coord_node *n, const char *state, int exit_code, uint64_t incarnation) {
    json_t *r = json_pack("{s:s}", "state", state);
    if (n->job[0]) {
        json_object_set_new(r, "job", json_string(n->job));
        json_object_set_new(r, "generation", json_integer(n->generation));
        json_object_set_new(r, "type", json_string(n->type));
        json_object_set_new(r, "index", json_integer(n->index));
        json_object_set_new(r, "exit_code", json_integer(exit_code));
        if (incarnation)
            json_object_set_new(r, "incarnation", json_integer((json_int_t)incarnation));
    }
    return r;
}

void report_incarnation(coord_cluster *c, coord_node *n, const char *state, int exit_code,
                        uint64_t incarnation, double now) {
    json_t *r = report_json(n, state, exit_code, incarnation);
    coord_node_heartbeat_json(c, n, r, now);
    json_decref(r);
}

void report(coord_cluster *c, coord_node *n, const char *state, int exit_code, double now) {
    coord_job *j;
    coord_task *t;
    coord_node_assigned(c, n, &j, &t);
    report_incarnation(c, n, state, exit_code, t ? t->incarnation : 0, now);
}

/* Takes the queued events and counts those of `kind` (any when NULL) whose data has this
 * "reason" (any when NULL). */
int take_events(coord_cluster *c, const char *kind, const char *reason) {
    int n = 0, found = 0;
    coord_event *events = coord_cluster_take_events(c, &n);
    for (int i = 0; i < n; i++) {
        /* As the coordinator publishes them: an event without data is not published. */
        json_t *data = coord_event_json(&events[i]);
        const char *r = json_string_value(json_object_get(data, "reason"));
        if (data && (!kind || !strcmp(events[i].kind, kind)) &&
            (!reason || (r && !strcmp(r, reason))))
            found++;
        json_decref(data);
        coord_event_deinit(&events[i]);
    }
    pf_free(events);
    return found;
}

const coord_condition *find_condition(const coord_job *j, const char *type) {
    for (int i = 0; i < j->n_conds; i++)
        if (!strcmp(j->conds[i].type, type))
            return &j->conds[i];
    return NULL;
}

void assert_condition(const coord_job *j, const char *type, const char *status,
                      const char *reason) {
    const coord_condition *k = find_condition(j, type);
    if (!k)
        fail_msg("job %s has no %s condition", j->name, type);
    assert_string_equal(k->status, status);
    if (reason)
        assert_string_equal(k->reason, reason);
}

coord_task *task_of(coord_job *j, const char *type, int index) {
    for (int i = 0; i < j->n_tasks; i++)
        if (!strcmp(j->tasks[i].type, type) && j->tasks[i].index == index)
            return &j->tasks[i];
    fail_msg("job %s has no task %s %d", j->name, type, index);
    return NULL;
}

/* Asserts that agent n runs task type/index of job j (generation gen). */
void assert_assigned(coord_job *j, coord_node *n, const char *type, int index, int gen) {
    coord_task *t = task_of(j, type, index);
    assert_string_equal(t->node_id, n->id);
    assert_string_equal(t->address, n->address);
    assert_string_equal(n->job, j->name);
    assert_string_equal(n->type, type);
    assert_int_equal(n->index, index);
    assert_int_equal(n->generation, gen);
}

void assert_idle(coord_cluster *c, coord_node *n) {
    assert_string_equal(n->job, "");
    json_t *a = coord_node_assignment(c, n);
    assert_true(json_is_null(a));
    json_decref(a);
}

/* A job of one ps and one worker, running on agents ps-a and w-a registered at `now`. */
coord_job *running_pair(coord_cluster *c, const char *name, const char *extra, double now,
                        coord_node **ps, coord_node **worker) {
    pf_job_spec spec;
    make_spec(&spec, name, 1, 1, extra);
    coord_job *j = submit(c, &spec, now);
    *ps = add_node(c, "ps-a", "ps", now);
    *worker = add_node(c, "w-a", "worker", now);
    assert_int_equal(j->phase, COORD_RUNNING);
    assert_int_equal(j->generation, 1);
    report(c, *ps, "running", 0, now);
    report(c, *worker, "running", 0, now);
    assert_int_equal(task_of(j, "ps", 0)->state, TASK_RUNNING);
    assert_int_equal(task_of(j, "worker", 0)->state, TASK_RUNNING);
    take_events(c, NULL, NULL);
    return j;
}
