/* test_server_rows.c - a real ps_server on 127.0.0.1 serving an embedding table by rows
 * (api/wire.md ROW_PULL, ROW_PUSH_PULL), fed hand-made frames over WebSockets by two
 * clients: a pull returns exactly the rows asked for, an async push changes exactly the rows
 * it names, a sync step sums each row's gradients over the workers and divides by their
 * number, and every malformed row message gets its ERROR code with the values unchanged.
 */
#include <pthread.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "psflow/buf.h"
#include "psflow/clock.h"
#include "psflow/model.h"
#include "psflow/placement.h"
#include "psflow/wire.h"
#include "psflow/ws.h"
#include "ps/server.h"
#include "tests/support/ps_client.h"

/* A table [12, 2] ("ids/embeddings", shard 0), then dense_0's kernel [2, 3] and bias. */
#define VOCAB 12
#define DIM   2

static pf_job_spec spec;
static pf_placement pl;
static ps_server *server;
static ps_client cl[2];
static pf_wire_out out;
static char dir[64];
static float *init; /* the whole model's initial values */

static void start(const char *mode, int workers) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"name\": \"rows\", \"replicas\": {\"ps\": 1, \"worker\": %d},"
             " \"model\": {\"type\": \"softmax\", \"outputs\": 3, \"embeddings\": "
             "[{\"name\": \"ids\", \"vocab\": %d, \"dim\": %d, \"max_ids\": 2}]},"
             " \"data\": {\"format\": \"libsvm\", \"train\": [\"unused.txt\"]},"
             " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.5},"
             " \"training\": {\"mode\": \"%s\", \"max_steps\": 1000}}",
             workers, VOCAB, DIM, mode);
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), &spec, &err), PF_OK);
    assert_int_equal(pf_placement_compute(&spec, &pl), PF_OK);
    assert_int_equal(pl.n_shards, 3);
    assert_string_equal(pl.shards[0].name, "ids/embeddings");
    size_t n = pf_model_num_params(&spec.model);
    init = malloc(n * sizeof *init);
    pf_model_init_params(&spec.model, spec.training.seed, init);
    snprintf(dir, sizeof dir, "/tmp/psflow-rows-XXXXXX");
    assert_non_null(mkdtemp(dir));
    ps_server_options o = {&spec, 0, "127.0.0.1", 0, dir, 42, 0, NULL, {0}, 0};
    assert_int_equal(ps_server_start(&o, &server, &err), PF_OK);
    pf_wire_out_init(&out);
    for (int k = 0; k < workers; k++)
        ps_client_open(&cl[k], ps_server_port(server));
}

static void stop(int workers) {
    for (int k = 0; k < workers; k++)
        ps_client_close(&cl[k]);
    ps_server_destroy(server);
    pf_wire_out_deinit(&out);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
    free(init);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Sends what `out` holds on client k and waits for its reply (10 s) into *m. */
static void exchange(int k, pf_wire_msg *m) {
    ps_client_exchange(&cl[k], &out, m);
}

static void hello(int k, uint32_t task) {
    /* training task 0 is the chief (the job has no separate one), workers follow */
    ps_client_hello(&cl[k], "rows", task == 0 ? PF_WIRE_ROLE_CHIEF : PF_WIRE_ROLE_WORKER, task, 5);
}

static void expect_error(int k, pf_wire_code code) {
    pf_wire_msg m;
    exchange(k, &m);
    assert_int_equal(m.type, PF_WIRE_ERROR);
    assert_int_equal(m.u.error.code, code);
}

/* The whole table as the ps holds it (a PULL of shard 0), into t[VOCAB * DIM]. */
static void table(float *t) {
    uint32_t id = 0;
    pf_wire_pull pull = {0, 1, &id};
    pf_error err;
    assert_int_equal(pf_wire_encode_pull(&out, 7, &pull, &err), PF_OK);
    pf_wire_msg m;
    exchange(0, &m);
    assert_int_equal(m.type, PF_WIRE_PULL_REPLY);
    assert_int_equal(m.u.pull_reply.tensors[0].count, VOCAB * DIM);
    memcpy(t, m.u.pull_reply.tensors[0].data, VOCAB * DIM * sizeof *t);
}

static const uint32_t dense_ids[2] = {1, 2};
static float zeros[64];

/* A ROW_PUSH_PULL from task `task` (seq) of rows[n] with gradient rows g, the dense shards'
 * gradients zero, pulling nothing. */
static void encode_row_push(uint32_t task, uint64_t seq, const uint32_t *rows, uint32_t n,
                            const float *g, uint32_t width, uint64_t min_version) {
    pf_wire_tensor t[2];
    for (int i = 0; i < 2; i++)
        t[i] = (pf_wire_tensor){dense_ids[i], PF_WIRE_F32, pl.shards[dense_ids[i]].count, zeros};
    pf_wire_rows r = {0, width, n, n ? rows : NULL, n ? g : NULL, 0, NULL};
    pf_wire_row_push_pull pp = {{task, 5, seq, 0, 2, t}, 1, &r, {min_version, 0, NULL, 0, NULL}};
    pf_error err;
    assert_int_equal(pf_wire_encode_row_push_pull(&out, 11, &pp, &err), PF_OK);
}

static void test_rows_async(void **state) {
    (void)state;
    start("async", 1);
    hello(0, 0);
    float before[VOCAB * DIM], after[VOCAB * DIM];
    table(before);
    assert_memory_equal(before, init, sizeof before); /* the single process's values */

    /* ROW_PULL: the dense shards whole, then the rows asked for, in order. */
    static const uint32_t want[3] = {1, 3, 11};
    pf_wire_rows sel = {0, 0, 3, want, NULL, 0, NULL};
    pf_wire_row_pull rp = {0, 2, dense_ids, 1, &sel};
    pf_error err;
    assert_int_equal(pf_wire_encode_row_pull(&out, 3, &rp, &err), PF_OK);
    pf_wire_msg m;
    exchange(0, &m);
    assert_int_equal(m.type, PF_WIRE_PULL_REPLY);
    assert_int_equal(m.u.pull_reply.n, 3);
    assert_int_equal(m.u.pull_reply.tensors[0].id, 1);
    assert_int_equal(m.u.pull_reply.tensors[1].id, 2);
    assert_int_equal(m.u.pull_reply.tensors[2].id, 0);
    assert_int_equal(m.u.pull_reply.tensors[2].count, 3 * DIM);
    for (int j = 0; j < 3; j++)
        assert_memory_equal(m.u.pull_reply.tensors[2].data + j * DIM, init + want[j] * DIM,
                            DIM * sizeof(float));

    /* An async row push changes exactly its rows: w -= 0.5 g. */
    static const uint32_t rows[2] = {3, 7};
    static const float g[4] = {1, 2, -4, 0.5f};
    encode_row_push(0, 1, rows, 2, g, DIM, 0);
    exchange(0, &m);
    assert_int_equal(m.type, PF_WIRE_PULL_REPLY);
    assert_int_equal(m.u.pull_reply.push_result, PF_WIRE_PUSH_APPLIED);
    assert_int_equal(m.u.pull_reply.version, 1);
    assert_int_equal(m.u.pull_reply.n, 0);
    table(after);
    for (int i = 0; i < VOCAB * DIM; i++) {
        int row = i / DIM, j = i % DIM;
        float expect = before[i];
        if (row == 3)
            expect = before[i] - 0.5f * g[j];
        if (row == 7)
            expect = before[i] - 0.5f * g[DIM + j];
        assert_true(after[i] == expect);
    }

    /* Malformed row messages: each refused with its code, nothing changed. */
    memcpy(before, after, sizeof before);
    static const uint32_t past[1] = {VOCAB};
    encode_row_push(0, 2, past, 1, g, DIM, 0); /* a row the shard does not have */
    expect_error(0, PF_WIRE_BAD_SHAPE);
    encode_row_push(0, 3, rows, 2, g, DIM - 1, 0); /* rows of the wrong width */
    expect_error(0, PF_WIRE_BAD_SHAPE);
    {
        /* the table pushed whole (a PUSH): tables go by rows */
        pf_wire_tensor t[3];
        for (int i = 0; i < 3; i++)
            t[i] = (pf_wire_tensor){(uint32_t)i, PF_WIRE_F32, pl.shards[i].count, zeros};
        pf_wire_push p = {0, 5, 4, 0, 3, t};
        assert_int_equal(pf_wire_encode_push(&out, 9, &p, &err), PF_OK);
        expect_error(0, PF_WIRE_UNEXPECTED);
    }
    {
        /* a dense shard pushed by rows */
        pf_wire_tensor t[2] = {{0, PF_WIRE_F32, VOCAB * DIM, zeros},
                               {2, PF_WIRE_F32, pl.shards[2].count, zeros}};
        pf_wire_rows r = {1, 3, 1, rows, g, 0, NULL};
        pf_wire_row_push_pull pp = {{0, 5, 5, 0, 2, t}, 1, &r, {0, 0, NULL, 0, NULL}};
        assert_int_equal(pf_wire_encode_row_push_pull(&out, 11, &pp, &err), PF_OK);
        expect_error(0, PF_WIRE_UNEXPECTED);
    }
    {
        /* a shard missing from the push */
        pf_wire_rows r = {0, DIM, 2, rows, g, 0, NULL};
        pf_wire_row_push_pull pp = {{0, 5, 6, 0, 0, NULL}, 1, &r, {0, 0, NULL, 0, NULL}};
        assert_int_equal(pf_wire_encode_row_push_pull(&out, 11, &pp, &err), PF_OK);
        expect_error(0, PF_WIRE_BAD_LENGTH);
    }
    /* selections: a dense shard, an unknown shard, a row past the table, a shard twice */
    pf_wire_rows bad_sel[] = {{1, 0, 1, rows, NULL, 0, NULL},
                              {9, 0, 1, rows, NULL, 0, NULL},
                              {0, 0, 1, past, NULL, 0, NULL}};
    pf_wire_code codes[] = {PF_WIRE_UNEXPECTED, PF_WIRE_UNKNOWN_SHARD, PF_WIRE_BAD_SHAPE};
    for (int i = 0; i < 3; i++) {
        pf_wire_row_pull bp = {0, 0, NULL, 1, &bad_sel[i]};
        assert_int_equal(pf_wire_encode_row_pull(&out, 3, &bp, &err), PF_OK);
        expect_error(0, codes[i]);
    }
    static const uint32_t whole0[1] = {0};
    pf_wire_row_pull twice = {0, 1, whole0, 1, &sel};
    assert_int_equal(pf_wire_encode_row_pull(&out, 3, &twice, &err), PF_OK);
    expect_error(0, PF_WIRE_UNKNOWN_SHARD);
    table(after);
    assert_memory_equal(before, after, sizeof before);

    /* STATS counts the rows served and received. */
    assert_int_equal(pf_wire_encode_stats(&out, 12, &err), PF_OK);
    exchange(0, &m);
    assert_int_equal(m.type, PF_WIRE_STATS_REPLY);
    char json[4096];
    snprintf(json, sizeof json, "%.*s", (int)m.u.stats_reply.json.len, m.u.stats_reply.json.ptr);
    assert_non_null(strstr(json, "\"rows_pulled\":3"));
    assert_non_null(strstr(json, "\"rows_pushed\":2"));
    stop(1);
}

/* A sync step of two workers: row 2 named by worker 0 only, row 5 by both, row 9 by worker
 * 1 only; each row gets the sum of its gradients divided by 2 (the gradients aggregated),
 * as the dense path averages zeros in for the rows a worker did not name. */
static void test_rows_sync(void **state) {
    (void)state;
    start("sync", 2);
    hello(0, 0);
    hello(1, 1);
    float before[VOCAB * DIM], after[VOCAB * DIM];
    table(before);
    static const uint32_t r0[2] = {2, 5}, r1[2] = {5, 9};
    static const float g0[4] = {1, -1, 2, 4}, g1[4] = {6, 8, 0.5f, -2};
    /* worker 1 first: the order of arrival must not matter */
    encode_row_push(1, 1, r1, 2, g1, DIM, 1);
    int got1 = ps_client_send(&cl[1], &out);
    for (int i = 0; i < 1000; i++) { /* until the ps has taken worker 1's gradient */
        uint64_t version, applied, stale;
        ps_server_stats(server, &version, &applied, &stale);
        if (applied == 1)
            break;
        pf_clock_sleep(0.01);
    }
    pf_wire_msg m;
    encode_row_push(0, 1, r0, 2, g0, DIM, 1);
    exchange(0, &m);
    assert_int_equal(m.type, PF_WIRE_PULL_REPLY);
    assert_int_equal(m.u.pull_reply.push_result, PF_WIRE_PUSH_APPLIED);
    assert_int_equal(m.u.pull_reply.version, 1);
    assert_true(ps_client_wait(&cl[1], got1, 10, &m));
    assert_int_equal(m.u.pull_reply.push_result, PF_WIRE_PUSH_ACCEPTED);
    assert_int_equal(m.u.pull_reply.version, 1); /* parked until the step */
    table(after);
    for (int i = 0; i < VOCAB * DIM; i++) {
        int row = i / DIM, j = i % DIM;
        float sum = 0;
        if (row == 2)
            sum = g0[j];
        if (row == 5)
            sum = g0[DIM + j] + g1[j];
        if (row == 9)
            sum = g1[DIM + j];
        float expect =
            row == 2 || row == 5 || row == 9 ? before[i] - 0.5f * (sum * 0.5f) : before[i];
        assert_true(after[i] == expect);
    }
    stop(2);
}

/* A row push that makes a row of the table NaN (async: applied at once; sync: when the step
 * completes) is answered NONFINITE naming the table and the element; the ps then refuses
 * pulls with the same error. */
static void test_rows_nonfinite(void **state) {
    (void)state;
    for (int sync = 0; sync <= 1; sync++) {
        start(sync ? "sync" : "async", 1);
        hello(0, 0);
        static const uint32_t rows[2] = {3, 7};
        float g[2 * DIM] = {0};
        g[DIM + 1] = NAN; /* row 7, its second element */
        encode_row_push(0, 1, rows, 2, g, DIM, 1);
        pf_wire_msg m;
        exchange(0, &m);
        assert_int_equal(m.type, PF_WIRE_ERROR);
        assert_int_equal(m.u.error.code, PF_WIRE_NONFINITE);
        char want[64], got[512];
        snprintf(want, sizeof want, "ids/embeddings became non-finite (element %d)", 7 * DIM + 1);
        snprintf(got, sizeof got, "%.*s", (int)m.u.error.message.len, m.u.error.message.ptr);
        if (!strstr(got, want))
            fail_msg("error %s does not name %s", got, want);
        uint32_t id = 1;
        pf_wire_pull pull = {0, 1, &id};
        pf_error err;
        assert_int_equal(pf_wire_encode_pull(&out, 8, &pull, &err), PF_OK);
        expect_error(0, PF_WIRE_NONFINITE);
        stop(1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_async),
        cmocka_unit_test(test_rows_sync),
        cmocka_unit_test(test_rows_nonfinite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
