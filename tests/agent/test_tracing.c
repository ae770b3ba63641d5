/* test_tracing.c - a trace on demand, the agent's side (agent/tracing.c): the clock offset
 * from the heartbeat with the shortest round trip; a heartbeat answer's trace armed once, its
 * spans sent once in the coordinator's clock, and sent again when the coordinator still asks
 * (the heartbeat that carried them was lost); bad directives ignored.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agent/tracing.h"
#include "psflow/clock.h"
#include "psflow/profile.h"

static void test_clock(void **state) {
    (void)state;
    agent_clock c;
    memset(&c, 0, sizeof c);
    double wall = pf_clock_wall();
    json_t *r = json_pack("{s:f}", "time", wall + 100); /* the coordinator 100 s ahead */
    agent_clock_sample(&c, 10.0, 10.4, r);
    assert_true(c.known);
    assert_true(fabs(c.offset - 100.2) < 0.1 && fabs(c.rtt - 0.4) < 1e-9);
    json_decref(r);
    r = json_pack("{s:f}", "time", pf_clock_wall() + 50);
    agent_clock_sample(&c, 20.0, 20.8, r); /* a longer round trip: not taken */
    assert_true(fabs(c.offset - 100.2) < 0.1);
    agent_clock_sample(&c, 30.0, 30.01, r); /* a shorter one is */
    assert_true(fabs(c.offset - 50) < 0.1 && fabs(c.rtt - 0.01) < 1e-9);
    json_decref(r);
    r = json_pack("{s:s}", "time", "noon");
    agent_clock_sample(&c, 40.0, 40.001, r); /* no number: nothing */
    assert_true(fabs(c.offset - 50) < 0.1);
    json_decref(r);
}

static json_t *directive(const char *text) {
    json_error_t e;
    json_t *d = json_loads(text, 0, &e);
    assert_non_null(d);
    return d;
}

static void test_directive_and_spans(void **state) {
    (void)state;
    unsetenv("PSFLOW_PROFILE");
    pf_profile p;
    memset(&p, 0, sizeof p);
    pf_profile_start(&p);
    agent_clock c = {.offset = 2.0, .rtt = 0.001, .known = 1};
    uint64_t armed = 0, sent = 0;
    static const char *const bad[] = {
        "{\"id\": 0, \"from\": 5, \"steps\": 2}",     "{\"id\": -3, \"from\": 5, \"steps\": 2}",
        "{\"id\": \"7\", \"from\": 5, \"steps\": 2}", "{\"id\": 7, \"from\": -1, \"steps\": 2}",
        "{\"id\": 7, \"from\": 5, \"steps\": -2}",    "{\"id\": 7, \"steps\": 2}",
        "{\"id\": 7, \"from\": 5, \"steps\": 1e9}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *d = directive(bad[i]);
        agent_trace_directive(&p, d, &armed, &sent, "test");
        json_decref(d);
        assert_int_equal(armed, 0);
    }
    json_t *d = directive("{\"id\": 7, \"from\": 5, \"steps\": 2, \"stop\": false}");
    agent_trace_directive(&p, d, &armed, &sent, "test");
    assert_int_equal(armed, 7);
    agent_trace_directive(&p, d, &armed, &sent, "test"); /* the same again: nothing new */
    assert_null(agent_trace_json(&p, &sent, &c));        /* not done */
    double t0 = 0;
    for (uint64_t g = 4; g <= 7; g++) {
        pf_profile_at_step(&p, g);
        double at = pf_profile_now(&p);
        if (g == 5)
            t0 = at;
        pf_profile_add(&p, PF_PHASE_COMPUTE, at);
    }
    json_t *t = agent_trace_json(&p, &sent, &c);
    assert_non_null(t);
    assert_int_equal(sent, 7);
    assert_int_equal(json_integer_value(json_object_get(t, "id")), 7);
    json_t *spans = json_object_get(t, "spans");
    assert_int_equal(json_array_size(spans), 2);
    json_t *s0 = json_array_get(spans, 0);
    assert_int_equal(json_integer_value(json_array_get(s0, 0)), PF_PHASE_COMPUTE);
    assert_int_equal(json_integer_value(json_array_get(s0, 3)), 5);
    /* its start in the coordinator's clock: this host's wall clock plus the offset */
    double want = (t0 - pf_clock_now() + pf_clock_wall() + 2.0) * 1e6;
    assert_true(fabs(json_number_value(json_array_get(s0, 1)) - want) < 1e5);
    json_decref(t);
    assert_null(agent_trace_json(&p, &sent, &c)); /* sent once */
    /* the coordinator still asks for it: the heartbeat was lost; sent again */
    agent_trace_directive(&p, d, &armed, &sent, "test");
    t = agent_trace_json(&p, &sent, &c);
    assert_non_null(t);
    assert_int_equal(json_array_size(json_object_get(t, "spans")), 2);
    json_decref(t);
    json_decref(d);
    /* a new trace, stopped before its steps: done, empty */
    d = directive("{\"id\": 8, \"from\": 100, \"steps\": 2, \"stop\": true}");
    agent_trace_directive(&p, d, &armed, &sent, "test");
    json_decref(d);
    assert_int_equal(armed, 8);
    t = agent_trace_json(&p, &sent, &c);
    assert_non_null(t);
    assert_int_equal(json_array_size(json_object_get(t, "spans")), 0);
    json_decref(t);
    pf_profile_trace_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clock),
        cmocka_unit_test(test_directive_and_spans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
