/* cluster_fixture.h - what the tests of the coordinator's state machine share: specs,
 * simulated agents (registration and heartbeat reports of api/rest.md) and assertions on
 * jobs, tasks and conditions. Failures are cmocka failures.
 */
#ifndef PSFLOW_TESTS_CLUSTER_FIXTURE_H
#define PSFLOW_TESTS_CLUSTER_FIXTURE_H

#include <jansson.h>

#include "coordinator/cluster.h"
#include "psflow/spec.h"

#define T0    1763805600.0 /* 2025-11-22T10:00:00Z: test times are offsets from it */
#define LEASE 10.0         /* seconds an agent may stay silent */

void parse_spec(const char *text, pf_job_spec *spec);

/* A valid linear job `name` with `ps` ps and `workers` worker tasks and 100 steps; `extra`
 * appends top-level fields (", \"run_policy\": {...}") or is "". */
void make_spec(pf_job_spec *spec, const char *name, int ps, int workers, const char *extra);

/* Submits a new job; the cluster takes the spec. */
coord_job *submit(coord_cluster *c, pf_job_spec *spec, double now);

/* Registers agent `id` of `role`, advertising "<id>.test:2222". */
coord_node *add_node(coord_cluster *c, const char *id, const char *role, double now);

/* The agent's heartbeat report (api/rest.md) for what it was assigned, in `state`, with the
 * incarnation of its assignment. */
void report(coord_cluster *c, coord_node *n, const char *state, int exit_code, double now);

/* The body of such a report, not sent (new reference). */
json_t *report_json(const coord_node *n, const char *state, int exit_code, uint64_t incarnation);

/* As report, about incarnation `incarnation` of the assigned task (0: none, as an agent older
 * than the field sends). */
void report_incarnation(coord_cluster *c, coord_node *n, const char *state, int exit_code,
                        uint64_t incarnation, double now);

/* Takes the queued events and counts those of `kind` (any when NULL) whose data has this
 * "reason" (any when NULL). */
int take_events(coord_cluster *c, const char *kind, const char *reason);

const coord_condition *find_condition(const coord_job *j, const char *type);

void assert_condition(const coord_job *j, const char *type, const char *status, const char *reason);

coord_task *task_of(coord_job *j, const char *type, int index);

/* Asserts that agent n runs task type/index of job j (generation gen). */
void assert_assigned(coord_job *j, coord_node *n, const char *type, int index, int gen);

void assert_idle(coord_cluster *c, coord_node *n);

/* A job of one ps and one worker, running on agents ps-a and w-a registered at `now`. */
coord_job *running_pair(coord_cluster *c, const char *name, const char *extra, double now,
                        coord_node **ps, coord_node **worker);

#endif
