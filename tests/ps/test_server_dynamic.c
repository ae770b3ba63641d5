/* test_server_dynamic.c - a real ps_server on 127.0.0.1, ps task 0 of 2, serving its share of
 * a dynamic embedding table (docs/embeddings.md "On ps tasks") to hand-made frames over
 * WebSockets: a pull of ids without rows reads zeros; an async ROW_PUSH_PULL creates the rows
 * of the ids it names (from the seed and the id, as one process would) and the same message's
 * pull returns them updated; STATS and ps_server_tables count rows, admissions and lookups;
 * and every malformed set gets its ERROR code with the table unchanged: an id ps 1 owns, a
 * set of rows where ids are due, ids on a fixed shard, a row record of another width, more
 * ids than a batch names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "psflow/dyn_batch.h"
#include "psflow/dyn_table.h"
#include "psflow/optim.h"
#include "psflow/placement.h"
#include "psflow/wire.h"
#include "ps/server.h"
#include "tests/support/ps_client.h"

#define DIM 2

static pf_job_spec spec;
static pf_placement pl;
static ps_server *server;
static ps_client cl;
static pf_wire_out out;
static char dir[64];

/* ids owned by ps 0 and by ps 1 of 2 (found, not assumed) */
static uint64_t mine[3], theirs;

static void start(void) {
    const char *json =
        "{\"name\": \"dyn\", \"replicas\": {\"ps\": 2, \"worker\": 1},"
        " \"model\": {\"type\": \"softmax\", \"outputs\": 3, \"embeddings\": "
        "[{\"name\": \"ids\", \"kind\": \"dynamic\", \"max_rows\": 100, \"dim\": 2, "
        "\"max_ids\": 2}]},"
        " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
        " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.5},"
        " \"training\": {\"mode\": \"async\", \"batch_size\": 10, \"max_steps\": 1000}}";
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), &spec, &err), PF_OK);
    assert_int_equal(pf_placement_compute(&spec, &pl), PF_OK);
    /* ids/embeddings/part_0 (ps 0), part_1 (ps 1), dense_0/kernel, dense_0/bias */
    assert_true(pl.shards[0].dynamic && pl.shards[0].ps_task == 0 && pl.shards[1].ps_task == 1);
    int found = 0;
    theirs = 0;
    for (uint64_t id = (1ull << 40); found < 3 || !theirs; id += 7919) {
        if (pf_dyn_owner(id, 2) == 0 && found < 3)
            mine[found++] = id;
        else if (pf_dyn_owner(id, 2) == 1 && !theirs)
            theirs = id;
    }
    snprintf(dir, sizeof dir, "/tmp/psflow-dyn-XXXXXX");
    assert_non_null(mkdtemp(dir));
    ps_server_options o = {&spec, 0, "127.0.0.1", 0, dir, 42, 0, NULL, {0}, 0};
    assert_int_equal(ps_server_start(&o, &server, &err), PF_OK);
    pf_wire_out_init(&out);
    ps_client_open(&cl, ps_server_port(server));
    ps_client_hello(&cl, "dyn", PF_WIRE_ROLE_CHIEF, 0, 5);
}

static void stop(void) {
    ps_client_close(&cl);
    ps_server_destroy(server);
    pf_wire_out_deinit(&out);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void expect_error(pf_wire_code code) {
    pf_wire_msg m;
    ps_client_exchange(&cl, &out, &m);
    assert_int_equal(m.type, PF_WIRE_ERROR);
    assert_int_equal(m.u.error.code, code);
}

/* The rows of ids[n] as ps 0 serves them (a ROW_PULL of shard 0) into rows[n * DIM]. */
static void pull_ids(const uint64_t *ids, uint32_t n, float *rows) {
    pf_wire_rows sel = {0, 0, n, NULL, NULL, 1, ids};
    pf_wire_row_pull rp = {0, 0, NULL, 1, &sel};
    pf_error err;
    assert_int_equal(pf_wire_encode_row_pull(&out, 3, &rp, &err), PF_OK);
    pf_wire_msg m;
    ps_client_exchange(&cl, &out, &m);
    assert_int_equal(m.type, PF_WIRE_PULL_REPLY);
    assert_int_equal(m.u.pull_reply.n, 1);
    assert_int_equal(m.u.pull_reply.tensors[0].count, (uint64_t)n * DIM);
    memcpy(rows, m.u.pull_reply.tensors[0].data, (size_t)n * DIM * sizeof *rows);
}

static float zeros[64];
static const uint32_t dense_ids[1] = {2}; /* ps 0's dense shard: dense_0/kernel */

/* A ROW_PUSH_PULL of `set`'s gradients (seq), the kernel's gradient zero, pulling `sel`. */
static void push(uint64_t seq, const pf_wire_rows *set, const pf_wire_rows *sel) {
    pf_wire_tensor t = {dense_ids[0], PF_WIRE_F32, pl.shards[2].count, zeros};
    pf_wire_row_push_pull pp = {
        {0, 5, seq, seq - 1, 1, &t}, 1, set, {0, 0, NULL, sel ? 1 : 0, sel}};
    pf_error err;
    assert_int_equal(pf_wire_encode_row_push_pull(&out, 11, &pp, &err), PF_OK);
}

static void test_dynamic_rows(void **state) {
    (void)state;
    start();
    float got[3 * DIM];
    pull_ids(mine, 3, got);
    for (int i = 0; i < 3 * DIM; i++)
        assert_true(got[i] == 0.0f); /* no row yet: zeros */

    /* A push creates the rows of mine[0] and mine[2]; its pull reads mine[0 .. 3) back. */
    const uint64_t named[2] = {mine[0], mine[2]};
    const float g[2 * DIM] = {1, 2, -4, 8};
    pf_wire_rows set = {0, DIM, 2, NULL, g, 1, named};
    pf_wire_rows sel = {0, 0, 3, NULL, NULL, 1, mine};
    push(1, &set, &sel);
    pf_wire_msg m;
    ps_client_exchange(&cl, &out, &m);
    assert_int_equal(m.type, PF_WIRE_PULL_REPLY);
    assert_int_equal(m.u.pull_reply.push_result, PF_WIRE_PUSH_APPLIED);
    assert_int_equal(m.u.pull_reply.tensors[0].count, 3 * DIM);
    memcpy(got, m.u.pull_reply.tensors[0].data, sizeof got);

    /* what one process's table of ps 0's configuration makes of the same update */
    pf_dyn_config cfg;
    pf_dyn_table_config(&spec, 0, pl.shards[0].max_rows, &cfg);
    pf_dyn_table *ref;
    assert_int_equal(pf_dyn_create(&cfg, &ref), PF_OK);
    float *rows[2], *slots[2 * PF_DYN_MAX_SLOTS];
    assert_int_equal(pf_dyn_update_batch(ref, named, 2, 0, rows, slots), PF_OK);
    pf_optim_step o = pf_optim_prepare(&spec.optimizer, 0);
    for (int j = 0; j < 2; j++)
        pf_optim_step_apply(&o, pf_backend_openblas(), DIM, g + j * DIM, rows[j],
                            slots + j * PF_DYN_MAX_SLOTS);
    float want[3 * DIM];
    pf_dyn_gather(ref, mine, 3, want);
    assert_memory_equal(got, want, sizeof got);
    assert_true(got[0] != 0.0f && got[2] == 0.0f && got[3] == 0.0f && got[4] != 0.0f);
    pf_dyn_destroy(ref);

    ps_server_table_stats ts[2];
    assert_int_equal(ps_server_tables(server, ts, 2), 1);
    assert_string_equal(ts[0].table, "ids");
    assert_int_equal(ts[0].max_rows, 50);
    assert_int_equal(ts[0].st.rows, 2);
    assert_int_equal(ts[0].st.admitted, 2);
    assert_int_equal(ts[0].st.lookups, 6); /* two pulls of 3 ids */

    /* malformed sets: an error each, the table unchanged */
    const uint64_t other[1] = {theirs};
    static uint64_t crowd[2001]; /* a batch names at most max(10, 1000) x 2 ids */
    for (uint64_t k = 0; k < 2001; k++)
        crowd[k] = k;
    static const uint32_t row0[1] = {0};
    const pf_wire_rows bad_sel[] = {
        {0, 0, 1, NULL, NULL, 1, other},    /* ps 1's id */
        {0, 0, 1, row0, NULL, 0, NULL},     /* rows where ids are due */
        {2, 0, 1, NULL, NULL, 1, mine},     /* ids on a dense shard */
        {0, 0, 2001, NULL, NULL, 1, crowd}, /* more than a batch names */
    };
    const pf_wire_code codes[] = {PF_WIRE_BAD_VALUE, PF_WIRE_UNEXPECTED, PF_WIRE_UNEXPECTED,
                                  PF_WIRE_BAD_LENGTH};
    for (int i = 0; i < 4; i++) {
        pf_wire_row_pull bp = {0, 0, NULL, 1, &bad_sel[i]};
        pf_error err;
        assert_int_equal(pf_wire_encode_row_pull(&out, 3, &bp, &err), PF_OK);
        expect_error(codes[i]);
    }
    const float g1[DIM] = {5, 5};
    pf_wire_rows theirs_set = {0, DIM, 1, NULL, g1, 1, other};
    push(2, &theirs_set, NULL);
    expect_error(PF_WIRE_BAD_VALUE);
    pf_wire_rows wide = {0, DIM + 1, 1, NULL, zeros, 1, mine};
    push(3, &wide, NULL);
    expect_error(PF_WIRE_BAD_SHAPE);
    float after[3 * DIM];
    pull_ids(mine, 3, after);
    assert_memory_equal(after, want, sizeof after);
    assert_int_equal(ps_server_tables(server, ts, 2), 1);
    assert_int_equal(ts[0].st.rows, 2);
    stop();
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_dynamic_rows)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
