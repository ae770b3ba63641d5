/* tracing.c - a trace on demand, the agent's side (see tracing.h). */
#define _POSIX_C_SOURCE 200809L
#include "agent/tracing.h"

#include <math.h>
#include <stdio.h>

#include "psflow/clock.h"

void agent_clock_sample(agent_clock *c, double sent, double answered, const json_t *reply) {
    json_t *time = json_object_get(reply, "time");
    double rtt = answered - sent;
    if (!json_is_number(time) || !(rtt >= 0) || (c->known && rtt >= c->rtt))
        return;
    /* the coordinator's clock was read about halfway through the round trip */
    c->offset = json_number_value(time) - (pf_clock_wall() - rtt / 2);
    c->rtt = rtt;
    c->known = 1;
}

void agent_trace_directive(pf_profile *p, const json_t *trace, uint64_t *armed, uint64_t *sent,
                           const char *who) {
    json_t *id = json_object_get(trace, "id"), *steps = json_object_get(trace, "steps");
    json_t *from = json_object_get(trace, "from");
    if (!json_is_integer(id) || json_integer_value(id) <= 0)
        return;
    uint64_t want = (uint64_t)json_integer_value(id);
    uint64_t done_id;
    uint32_t n_spans;
    if (want == *armed && pf_profile_trace_spans(p, &done_id, &n_spans) && done_id == want)
        *sent = 0; /* sent, and still asked for: that heartbeat was lost; again */
    if (want != *armed) {
        json_int_t n = json_integer_value(steps), f = json_integer_value(from);
        if (!json_is_integer(steps) || n < 0 || n > 100000 || !json_is_integer(from) || f < 0)
            return;
        if (pf_profile_trace_arm(p, want, (uint64_t)f, (uint64_t)n, PF_TRACE_SPANS_MAX) != 0) {
            pf_profile_trace_stop(p); /* the one before ends, and this one is armed next time */
            return;
        }
        *armed = want;
        if (n)
            fprintf(stderr, "psflow %s: trace %llu: recording steps %lld to %lld\n", who,
                    (unsigned long long)want, (long long)f, (long long)(f + n - 1));
        else
            fprintf(stderr, "psflow %s: trace %llu: recording until told to stop\n", who,
                    (unsigned long long)want);
    }
    if (json_is_true(json_object_get(trace, "stop")))
        pf_profile_trace_stop(p);
}

json_t *agent_trace_json(const pf_profile *p, uint64_t *sent, const agent_clock *c) {
    uint64_t id;
    uint32_t n;
    const pf_trace_span *s = pf_profile_trace_spans(p, &id, &n);
    if (!s || id == *sent)
        return NULL;
    /* monotonic seconds to the coordinator's wall clock */
    double shift = pf_clock_wall() - pf_clock_now() + (c->known ? c->offset : 0);
    json_t *spans = json_array();
    for (uint32_t i = 0; spans && i < n; i++)
        json_array_append_new(
            spans, json_pack("[i, f, f, I]", s[i].phase, floor((s[i].start + shift) * 1e6),
                             round((s[i].end - s[i].start) * 1e6), (json_int_t)s[i].step));
    json_t *t = spans ? json_pack("{s:I, s:f, s:o}", "id", (json_int_t)id, "rtt",
                                  c->known ? c->rtt : -1.0, "spans", spans)
                      : NULL;
    if (t)
        *sent = id;
    return t;
}
