/* fuzz_heartbeat.c - libFuzzer target for an agent's heartbeat report as the coordinator
 * reads it (coord_report_from_json, api/rest.md) and the profile it carries (docs/profile.md).
 *
 * The input is a heartbeat body. Whatever it holds: the report's numbers are in their stated
 * ranges (a serving report's figures; a profile's time and phases finite, 0 .. 10^9 seconds,
 * its count 0 .. 10^15, phases of one role only); taken into a worker and a ps task, then
 * taken again 2.5 s of task time later with every phase grown by what the input's first
 * bytes say (so a window is made from it), the tasks' profiles and windows stay in range
 * (never below 0, a window at least COORD_PROFILE_WINDOW long), and GET .../profile's answer
 * for them builds and serialises. Any breach aborts. Seed corpus:
 * tests/data/heartbeat/{valid,invalid}/.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cluster.h"
#include "coordinator/cluster_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_profile(const coord_profile *p, double max) {
    if (!(p->seconds >= 0 && p->seconds <= max) || p->count < 0)
        abort();
    for (int i = 0; i < PF_PHASE_COUNT; i++)
        if (!(p->phases[i] >= 0 && p->phases[i] <= max))
            abort();
}

static void check_report(const coord_report *r) {
    if (r->has_serving && (r->requests < 0 || r->failed < 0 || r->failed > r->requests))
        abort();
    if (!r->has_profile)
        return;
    check_profile(&r->profile, 1e9);
    if (r->profile.count > (int64_t)1e15)
        abort();
    int training = 0, ps = 0;
    for (int i = 0; i < PF_PHASE_COUNT; i++)
        if (r->profile.phases[i] > 0 && i >= PF_PHASE_FIRST_PS)
            ps = 1;
        else if (r->profile.phases[i] > 0)
            training = 1;
    if (training && ps) /* a report names the phases of its own role only */
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *body = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    coord_report r;
    coord_report_from_json(body, &r);
    check_report(&r);
    coord_task tasks[2];
    memset(tasks, 0, sizeof tasks);
    strcpy(tasks[0].type, "worker");
    strcpy(tasks[1].type, "ps");
    coord_report later = r; /* the same task 2.5 s later, each phase grown a little */
    later.profile.seconds += 2.5;
    later.profile.count += size;
    for (int i = 0; i < PF_PHASE_COUNT; i++)
        later.profile.phases[i] += (double)(i < (int)size ? data[i] : 0) / 100.0;
    for (int k = 0; k < 2; k++) {
        coord_take_profile(&tasks[k], &r);
        coord_take_profile(&tasks[k], &r); /* the same report again: no window of 0 s */
        if (tasks[k].has_window)
            abort();
        coord_take_profile(&tasks[k], &later);
        if (r.has_profile && !tasks[k].has_window)
            abort();
        if (tasks[k].has_profile)
            check_profile(&tasks[k].profile, 1e9 + 5);
        if (tasks[k].has_window) {
            check_profile(&tasks[k].window, 5);
            if (tasks[k].window.seconds < COORD_PROFILE_WINDOW)
                abort();
        }
    }
    coord_job job;
    memset(&job, 0, sizeof job);
    strcpy(job.name, "fuzz");
    job.tasks = tasks;
    job.n_tasks = 2;
    json_t *answer = coord_job_profile_json(&job);
    char *text = answer ? json_dumps(answer, JSON_COMPACT) : NULL;
    if (!text)
        abort();
    free(text);
    json_decref(answer);
    json_decref(body);
    return 0;
}
