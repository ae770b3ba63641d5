/* test_server_seg.c - a real ps_server on 127.0.0.1 and a worker's shared segment (api/wire.md
 * "Shared segment"). The ps runs in this process, so a segment the test makes with
 * pf_segment_create is one the ps opens as /proc/<getpid()>/fd/<fd>, as it opens a worker's.
 * Every refused SEG_ATTACH, SEG_PULL or SEG_PUSH_PULL gets its ERROR code and leaves the ps's
 * variables byte-identical (a plain PULL says) and the segment untouched; the accepted ones
 * write into the segment exactly the values the socket carries, parked or not.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "psflow/buf.h"
#include "psflow/clock.h"
#include "psflow/placement.h"
#include "psflow/segment.h"
#include "tests/support/ps_client.h"
#include "psflow/wire.h"
#include "psflow/ws.h"
#include "ps/server.h"

/* --- a client of the ps (tests/support/ps_client.h) ------------------------------------ */

/* Expects an ERROR with `code` whose message says `why` (NULL: anything). */
static void expect_error(ps_client *c, pf_wire_code code, const char *why) {
    pf_wire_msg m;
    ps_client_exchange(c, &c->out, &m);
    assert_int_equal(m.type, PF_WIRE_ERROR);
    char text[512];
    snprintf(text, sizeof text, "%.*s", (int)m.u.error.message.len, m.u.error.message.ptr);
    if (m.u.error.code != (uint32_t)code || (why && !strstr(text, why)))
        fail_msg("got %s (%s), expected %s (%s)", pf_wire_code_name(m.u.error.code), text,
                 pf_wire_code_name(code), why ? why : "");
    assert_true(text[0] != 0);
}

/* --- a job: its spec, placement and ps, and a segment laid out for it ------------------- */

typedef struct job {
    pf_job_spec spec;
    pf_placement pl;
    ps_server *ps;
    char dir[64];
    size_t n_params;
} job;

static void job_start(job *j, const char *json) {
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), &j->spec, &err), PF_OK);
    assert_int_equal(pf_placement_compute(&j->spec, &j->pl), PF_OK);
    assert_true(j->pl.n_shards >= 2 && j->pl.n_shards <= 16);
    j->n_params = 0;
    for (int i = 0; i < j->pl.n_shards; i++)
        j->n_params += (size_t)j->pl.shards[i].count;
    snprintf(j->dir, sizeof j->dir, "/tmp/psflow-seg-XXXXXX");
    assert_non_null(mkdtemp(j->dir));
    ps_server_options o = {&j->spec, 0, "127.0.0.1", 0, j->dir, 42, 0, NULL, {0}, 0};
    assert_int_equal(ps_server_start(&o, &j->ps, &err), PF_OK);
}

static void job_stop(job *j) {
    ps_server_destroy(j->ps);
    pf_placement_deinit(&j->pl);
    pf_job_spec_deinit(&j->spec);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", j->dir);
    assert_int_equal(system(cmd), 0);
}

/* The largest segment the ps takes: a worker's for the model's parameters. */
static uint64_t seg_limit(const job *j) {
    return pf_segment_bytes((uint64_t)j->n_params, NULL);
}

/* The segment's layout: the token, then the values of every shard in placement order from
 * VALUES, then their gradients ([n_params] float32 each). */
#define VALUES 64u

static uint64_t value_at(const job *j, int shard) {
    uint64_t at = VALUES;
    for (int i = 0; i < shard; i++)
        at += sizeof(float) * j->pl.shards[i].count;
    return at;
}

static uint64_t grad_at(const job *j, int shard) {
    return value_at(j, shard) + sizeof(float) * j->n_params;
}

/* One record per shard, in placement order (push: with its gradients). */
static uint32_t records(const job *j, int push, pf_wire_seg_tensor *t) {
    for (int i = 0; i < j->pl.n_shards; i++)
        t[i] = (pf_wire_seg_tensor){(uint32_t)i, j->pl.shards[i].count, push ? grad_at(j, i) : 0,
                                    value_at(j, i)};
    return (uint32_t)j->pl.n_shards;
}

static void encode_attach(ps_client *c, uint32_t fd, uint64_t size, const uint8_t *token) {
    pf_wire_seg_attach a = {(uint32_t)getpid(), fd, size, token};
    pf_error err;
    assert_int_equal(pf_wire_encode_seg_attach(&c->out, 11, &a, &err), PF_OK);
}

static void encode_seg_pull(ps_client *c, const pf_wire_seg_tensor *t, uint32_t n) {
    pf_wire_seg_pull p = {0, n, t};
    pf_error err;
    assert_int_equal(pf_wire_encode_seg_pull(&c->out, 12, &p, &err), PF_OK);
}

static void encode_seg_push_pull(ps_client *c, uint32_t task, uint64_t inc, uint64_t seq,
                                 uint64_t step, uint64_t min_version, const pf_wire_seg_tensor *t,
                                 uint32_t n) {
    pf_wire_seg_push_pull pp = {task, inc, seq, step, {min_version, n, t}};
    pf_error err;
    assert_int_equal(pf_wire_encode_seg_push_pull(&c->out, 13, &pp, &err), PF_OK);
}

/* A plain PUSH_PULL of every shard, grads [n_params] in placement order. */
static void encode_push_pull(ps_client *c, const job *j, uint32_t task, uint64_t inc, uint64_t seq,
                             uint64_t step, uint64_t min_version, const float *grads) {
    pf_wire_tensor t[16];
    uint32_t ids[16];
    size_t at = 0;
    for (int i = 0; i < j->pl.n_shards; i++) {
        t[i] = (pf_wire_tensor){(uint32_t)i, PF_WIRE_F32, j->pl.shards[i].count, grads + at};
        ids[i] = (uint32_t)i;
        at += j->pl.shards[i].count;
    }
    pf_wire_push_pull pp = {{task, inc, seq, step, (uint32_t)j->pl.n_shards, t},
                            {min_version, (uint32_t)j->pl.n_shards, ids}};
    pf_error err;
    assert_int_equal(pf_wire_encode_push_pull(&c->out, 14, &pp, &err), PF_OK);
}

/* The values of a PULL_REPLY of every shard, concatenated into out [n_params]. */
static void reply_values(const job *j, const pf_wire_msg *m, float *out) {
    assert_int_equal(m->type, PF_WIRE_PULL_REPLY);
    assert_int_equal(m->u.pull_reply.n, j->pl.n_shards);
    size_t at = 0;
    for (uint32_t i = 0; i < m->u.pull_reply.n; i++) {
        const pf_wire_tensor *t = &m->u.pull_reply.tensors[i];
        assert_int_equal(t->id, i);
        memcpy(out + at, t->data, t->count * sizeof *out);
        at += t->count;
    }
    assert_int_equal(at, j->n_params);
}

/* The ps's values by a plain PULL of every shard into out [n_params]; returns the version. */
static uint64_t snapshot(ps_client *c, const job *j, float *out) {
    uint32_t ids[16];
    for (int i = 0; i < j->pl.n_shards; i++)
        ids[i] = (uint32_t)i;
    pf_wire_pull pull = {0, (uint32_t)j->pl.n_shards, ids};
    pf_error err;
    assert_int_equal(pf_wire_encode_pull(&c->out, 7, &pull, &err), PF_OK);
    pf_wire_msg m;
    ps_client_exchange(c, &c->out, &m);
    reply_values(j, &m, out);
    return m.u.pull_reply.version;
}

/* Asserts the ps's values still equal `want` [n_params], bit for bit. */
static void expect_unchanged(ps_client *c, const job *j, const float *want) {
    float *now = malloc(j->n_params * sizeof *now);
    snapshot(c, j, now);
    assert_memory_equal(now, want, j->n_params * sizeof *now);
    free(now);
}

/* Asserts the PULL_REPLY of a segment request: no records, version and push result. */
static void expect_seg_reply(const pf_wire_msg *m, uint64_t version, uint32_t push_result) {
    if (m->type == PF_WIRE_ERROR)
        fail_msg("ERROR %s: %.*s", pf_wire_code_name(m->u.error.code), (int)m->u.error.message.len,
                 m->u.error.message.ptr);
    assert_int_equal(m->type, PF_WIRE_PULL_REPLY);
    assert_int_equal(m->u.pull_reply.n, 0);
    assert_int_equal(m->u.pull_reply.version, version);
    assert_int_equal(m->u.pull_reply.push_result, push_result);
}

/* --- the async job: attaching, and every segment request ------------------------------ */

#define ASYNC_JOB                                                                                  \
    "{\"name\": \"seg\", \"replicas\": {\"ps\": 1, \"worker\": 2, \"evaluator\": 1},"              \
    " \"model\": {\"type\": \"softmax\", \"inputs\": 4, \"outputs\": 3},"                          \
    " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"                               \
    " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"                                 \
    " \"training\": {\"mode\": \"async\", \"max_steps\": 1000}}"

/* Who may attach, and the segments a ps refuses: the connection goes on over the socket. */
static void test_attach(void **state) {
    (void)state;
    job j;
    job_start(&j, ASYNC_JOB);
    int port = ps_server_port(j.ps);
    pf_segment seg;
    pf_error err;
    uint64_t size = seg_limit(&j); /* the largest the ps takes */
    assert_int_equal(pf_segment_create((size_t)size, &seg, &err), PF_OK);
    pf_wire_seg_tensor t[16];
    ps_client w;
    ps_client_open(&w, port);

    /* Before HELLO: nothing is attached, nothing requested. */
    encode_attach(&w, (uint32_t)seg.fd, size, seg.token);
    expect_error(&w, PF_WIRE_UNEXPECTED, "before HELLO");
    encode_seg_pull(&w, t, records(&j, 0, t));
    expect_error(&w, PF_WIRE_UNEXPECTED, "before HELLO");
    ps_client_hello(&w, "seg", PF_WIRE_ROLE_CHIEF, 0, 5);
    float *before = malloc(j.n_params * sizeof *before);
    uint64_t v0 = snapshot(&w, &j, before);

    /* A request before SEG_ATTACH. */
    encode_seg_pull(&w, t, records(&j, 0, t));
    expect_error(&w, PF_WIRE_UNEXPECTED, "no segment attached");
    encode_seg_push_pull(&w, 0, 5, 1, 0, 0, t, records(&j, 1, t));
    expect_error(&w, PF_WIRE_UNEXPECTED, "no segment attached");
    expect_unchanged(&w, &j, before);

    /* A tool and an evaluator may not attach, even the right segment. */
    const uint8_t roles[] = {PF_WIRE_ROLE_TOOL, PF_WIRE_ROLE_EVALUATOR};
    for (size_t i = 0; i < sizeof roles; i++) {
        ps_client other;
        ps_client_open(&other, port);
        ps_client_hello(&other, "seg", roles[i], 0, 3);
        encode_attach(&other, (uint32_t)seg.fd, size, seg.token);
        expect_error(&other, PF_WIRE_UNEXPECTED, "may not attach");
        ps_client_close(&other);
        expect_unchanged(&w, &j, before);
    }

    /* Segments the ps cannot use: a wrong token, the wrong size (smaller, the token's own,
     * larger), a descriptor that is not open, a pipe, one over the ps's limit. */
    uint8_t wrong[PF_WIRE_SEG_TOKEN_SIZE];
    memcpy(wrong, seg.token, sizeof wrong);
    wrong[PF_WIRE_SEG_TOKEN_SIZE - 1] ^= 0x80;
    int pipe_fds[2];
    assert_int_equal(pipe(pipe_fds), 0);
    pf_segment big;
    assert_int_equal(pf_segment_create((size_t)size + 4, &big, &err), PF_OK);
    struct {
        uint32_t fd;
        uint64_t size;
        const uint8_t *token;
        const char *why;
    } bad[] = {
        {(uint32_t)seg.fd, size, wrong, "token"},
        {(uint32_t)seg.fd, size - 4, seg.token, "not a regular file of this user"},
        {(uint32_t)seg.fd, PF_WIRE_SEG_TOKEN_SIZE, seg.token, "this ps takes"},
        {(uint32_t)seg.fd, size + 4, seg.token, "this ps takes"},
        {1000000, size, seg.token, "not on this host"},
        {(uint32_t)pipe_fds[0], size, seg.token, "not a psflow segment"},
        {(uint32_t)pipe_fds[1], size, seg.token, "not a psflow segment"},
        {(uint32_t)big.fd, size + 4, big.token, "this ps takes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        encode_attach(&w, bad[i].fd, bad[i].size, bad[i].token);
        expect_error(&w, PF_WIRE_BAD_VALUE, bad[i].why);
        expect_unchanged(&w, &j, before);
    }
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    pf_segment_close(&big);
    /* Still not attached, and the socket path works. */
    encode_seg_pull(&w, t, records(&j, 0, t));
    expect_error(&w, PF_WIRE_UNEXPECTED, "no segment attached");
    expect_unchanged(&w, &j, before);
    float *grads = malloc(j.n_params * sizeof *grads);
    for (size_t i = 0; i < j.n_params; i++)
        grads[i] = 0.5f;
    encode_push_pull(&w, &j, 0, 5, 1, 0, 0, grads);
    pf_wire_msg m;
    ps_client_exchange(&w, &w.out, &m);
    assert_int_equal(m.type, PF_WIRE_PULL_REPLY);
    assert_int_equal(m.u.pull_reply.push_result, PF_WIRE_PUSH_APPLIED);
    assert_int_equal(m.u.pull_reply.version, v0 + 1);
    reply_values(&j, &m, before);

    /* PSFLOW_SHM=off on the ps's side refuses the right segment. */
    assert_int_equal(setenv("PSFLOW_SHM", "off", 1), 0);
    encode_attach(&w, (uint32_t)seg.fd, size, seg.token);
    expect_error(&w, PF_WIRE_UNEXPECTED, "PSFLOW_SHM=off");
    assert_int_equal(unsetenv("PSFLOW_SHM"), 0);
    expect_unchanged(&w, &j, before);

    /* The right one is taken, once. */
    encode_attach(&w, (uint32_t)seg.fd, size, seg.token);
    ps_client_exchange(&w, &w.out, &m);
    assert_int_equal(m.type, PF_WIRE_SEG_ACK);
    encode_attach(&w, (uint32_t)seg.fd, size, seg.token);
    expect_error(&w, PF_WIRE_UNEXPECTED, "attached already");
    expect_unchanged(&w, &j, before);
    encode_seg_pull(&w, t, records(&j, 0, t));
    ps_client_exchange(&w, &w.out, &m);
    expect_seg_reply(&m, v0 + 1, 0);
    assert_memory_equal(seg.base + VALUES, before, j.n_params * sizeof *before);

    ps_client_close(&w);
    pf_segment_close(&seg);
    free(grads);
    free(before);
    job_stop(&j);
}

/* An attached chief's SEG_PULL and SEG_PUSH_PULL give exactly what PULL and PUSH_PULL give
 * over the socket (here: on a second ps started from the same spec); every malformed
 * request is refused before the ps touches its values or the segment. */
static void test_requests(void **state) {
    (void)state;
    job j, ref;
    job_start(&j, ASYNC_JOB);
    job_start(&ref, ASYNC_JOB);
    pf_segment seg;
    pf_error err;
    uint64_t size = seg_limit(&j);
    assert_int_equal(pf_segment_create((size_t)size, &seg, &err), PF_OK);
    ps_client w, r;
    ps_client_open(&w, ps_server_port(j.ps));
    ps_client_open(&r, ps_server_port(ref.ps));
    ps_client_hello(&w, "seg", PF_WIRE_ROLE_CHIEF, 0, 5);
    ps_client_hello(&r, "seg", PF_WIRE_ROLE_CHIEF, 0, 5);
    encode_attach(&w, (uint32_t)seg.fd, size, seg.token);
    pf_wire_msg m;
    ps_client_exchange(&w, &w.out, &m);
    assert_int_equal(m.type, PF_WIRE_SEG_ACK);
    size_t n = j.n_params;
    float *v0 = malloc(n * sizeof *v0), *want = malloc(n * sizeof *want);
    uint64_t version = snapshot(&w, &j, v0);
    assert_int_equal(snapshot(&r, &ref, want), version);
    assert_memory_equal(v0, want, n * sizeof *v0); /* the two ps start alike */

    /* SEG_PULL, records in reverse order: each shard's values at its own offsets. */
    float *values = (float *)(void *)(seg.base + VALUES);
    for (size_t i = 0; i < n; i++)
        values[i] = -123.0f;
    pf_wire_seg_tensor t[16], rev[16];
    uint32_t k = records(&j, 0, t);
    for (uint32_t i = 0; i < k; i++)
        rev[i] = t[k - 1 - i];
    encode_seg_pull(&w, rev, k);
    ps_client_exchange(&w, &w.out, &m);
    expect_seg_reply(&m, version, 0);
    assert_memory_equal(values, v0, n * sizeof *v0);

    /* Malformed requests: the bad record comes last, after good ones. */
    float *grads = (float *)(void *)(seg.base + grad_at(&j, 0));
    for (size_t i = 0; i < n; i++)
        grads[i] = 0.03125f * (float)((int)(i % 7) - 3);
    for (size_t i = 0; i < n; i++)
        values[i] = -123.0f;
    uint8_t *copy = malloc(seg.size);
    memcpy(copy, seg.base, seg.size);
    uint32_t last = k - 1;
    enum { PULL = 1, PUSH = 2 };
    struct {
        int kinds;
        uint64_t count_delta; /* added to the count (mod 2^64) */
        uint64_t grad, value; /* ~0: the record's own */
        uint32_t id, n;       /* ~0: the record's own id; 0: every shard named */
        pf_wire_code code;
    } bad[] = {
        {PULL | PUSH, 0, ~0ull, size - 4, ~0u, 0, PF_WIRE_BAD_VALUE},    /* value runs past */
        {PULL | PUSH, 0, ~0ull, size, ~0u, 0, PF_WIRE_BAD_VALUE},        /* value at the end */
        {PULL | PUSH, 0, ~0ull, size + 4096, ~0u, 0, PF_WIRE_BAD_VALUE}, /* value beyond */
        {PUSH, 0, size - 4, ~0ull, ~0u, 0, PF_WIRE_BAD_VALUE},           /* grad runs past */
        {PUSH, 0, size + 4096, ~0ull, ~0u, 0, PF_WIRE_BAD_VALUE},        /* grad beyond */
        {PULL | PUSH, 0, ~0ull, ~0ull, 999, 0, PF_WIRE_UNKNOWN_SHARD},   /* not held */
        {PULL | PUSH, 0, ~0ull, ~0ull, (uint32_t)k, 0, PF_WIRE_UNKNOWN_SHARD}, /* just past */
        {PULL | PUSH, 0, ~0ull, ~0ull, 0, 0, PF_WIRE_UNKNOWN_SHARD},           /* named twice */
        {PULL | PUSH, 1, ~0ull, ~0ull, ~0u, 0, PF_WIRE_BAD_SHAPE},             /* one more */
        {PULL | PUSH, ~0ull, ~0ull, ~0ull, ~0u, 0, PF_WIRE_BAD_SHAPE},         /* one less */
        {PUSH, 0, ~0ull, ~0ull, ~0u, k - 1, PF_WIRE_BAD_LENGTH},               /* not all shards */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int kind = PULL; kind <= PUSH; kind++) {
            if (!(bad[i].kinds & kind))
                continue;
            records(&j, kind == PUSH, t);
            t[last].count += bad[i].count_delta;
            if (bad[i].grad != ~0ull)
                t[last].grad = bad[i].grad;
            if (bad[i].value != ~0ull)
                t[last].value = bad[i].value;
            if (bad[i].id != ~0u)
                t[last].id = bad[i].id;
            uint32_t named = bad[i].n ? bad[i].n : k;
            if (kind == PULL)
                encode_seg_pull(&w, t, named);
            else
                encode_seg_push_pull(&w, 0, 5, 1, 0, 0, t, named);
            pf_wire_msg e;
            ps_client_exchange(&w, &w.out, &e);
            if (e.type != PF_WIRE_ERROR || e.u.error.code != (uint32_t)bad[i].code)
                fail_msg("case %zu (%s): got %s %s, expected %s", i,
                         kind == PULL ? "SEG_PULL" : "SEG_PUSH_PULL", pf_wire_type_name(e.type),
                         e.type == PF_WIRE_ERROR ? pf_wire_code_name(e.u.error.code) : "",
                         pf_wire_code_name(bad[i].code));
            if (memcmp(copy, seg.base, seg.size) != 0)
                fail_msg("case %zu wrote into the segment", i);
            expect_unchanged(&w, &j, v0);
        }
    }
    /* A push naming another task or incarnation than the connection's HELLO, or no task. */
    const struct {
        uint32_t task;
        uint64_t inc;
        pf_wire_code code;
    } who[] = {{1, 5, PF_WIRE_FORBIDDEN},
               {0, 6, PF_WIRE_FORBIDDEN},
               {0, 4, PF_WIRE_FORBIDDEN},
               {7, 5, PF_WIRE_BAD_VALUE}};
    for (size_t i = 0; i < sizeof who / sizeof who[0]; i++) {
        encode_seg_push_pull(&w, who[i].task, who[i].inc, 1, 0, 0, t, records(&j, 1, t));
        expect_error(&w, who[i].code, NULL);
        expect_unchanged(&w, &j, v0);
    }
    assert_memory_equal(copy, seg.base, seg.size);
    expect_unchanged(&w, &j, v0);

    /* A good SEG_PUSH_PULL (seq 1: no refusal above took it) against the socket's. */
    encode_seg_push_pull(&w, 0, 5, 1, 0, 0, t, records(&j, 1, t));
    ps_client_exchange(&w, &w.out, &m);
    expect_seg_reply(&m, version + 1, PF_WIRE_PUSH_APPLIED);
    encode_push_pull(&r, &ref, 0, 5, 1, 0, 0, grads);
    ps_client_exchange(&r, &r.out, &m);
    assert_int_equal(m.u.pull_reply.push_result, PF_WIRE_PUSH_APPLIED);
    assert_int_equal(m.u.pull_reply.version, version + 1);
    reply_values(&ref, &m, want);
    assert_memory_equal(values, want, n * sizeof *values);
    for (size_t i = 0; i < n; i++) /* SGD: value - lr * grad */
        assert_float_equal(values[i], v0[i] - 0.1f * grads[i], 1e-6);
    assert_true(memcmp(values, v0, n * sizeof *v0) != 0);
    expect_unchanged(&w, &j, want);
    assert_memory_equal(copy + grad_at(&j, 0), seg.base + grad_at(&j, 0), n * sizeof(float));
    /* Its replay is a duplicate and changes nothing; the values are written again. */
    for (size_t i = 0; i < n; i++)
        values[i] = -123.0f;
    encode_seg_push_pull(&w, 0, 5, 1, 0, 0, t, records(&j, 1, t));
    ps_client_exchange(&w, &w.out, &m);
    expect_seg_reply(&m, version + 1, PF_WIRE_PUSH_DUPLICATE);
    assert_memory_equal(values, want, n * sizeof *values);

    ps_client_close(&w);
    ps_client_close(&r);
    pf_segment_close(&seg);
    free(copy);
    free(v0);
    free(want);
    job_stop(&j);
    job_stop(&ref);
}

/* --- the sync job: a parked SEG_PUSH_PULL ------------------------------------------------ */

/* The chief's SEG_PUSH_PULL waits for worker 1's push (over the socket) to complete the
 * step; then its segment holds the new values: the mean of both gradients applied. */
static void test_sync_parked(void **state) {
    (void)state;
    job j;
    job_start(&j, "{\"name\": \"seg\", \"replicas\": {\"ps\": 1, \"worker\": 2},"
                  " \"model\": {\"type\": \"softmax\", \"inputs\": 4, \"outputs\": 3},"
                  " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
                  " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
                  " \"training\": {\"mode\": \"sync\", \"max_steps\": 1000}}");
    pf_segment seg;
    pf_error err;
    uint64_t size = seg_limit(&j);
    assert_int_equal(pf_segment_create((size_t)size, &seg, &err), PF_OK);
    ps_client c, w;
    ps_client_open(&c, ps_server_port(j.ps));
    ps_client_open(&w, ps_server_port(j.ps));
    ps_client_hello(&c, "seg", PF_WIRE_ROLE_CHIEF, 0, 5);
    ps_client_hello(&w, "seg", PF_WIRE_ROLE_WORKER, 1, 9);
    encode_attach(&c, (uint32_t)seg.fd, size, seg.token);
    pf_wire_msg m;
    ps_client_exchange(&c, &c.out, &m);
    assert_int_equal(m.type, PF_WIRE_SEG_ACK);
    size_t n = j.n_params;
    float *v0 = malloc(n * sizeof *v0), *got = malloc(n * sizeof *got);
    assert_int_equal(snapshot(&c, &j, v0), 0);

    float *values = (float *)(void *)(seg.base + VALUES);
    float *g0 = (float *)(void *)(seg.base + grad_at(&j, 0));
    float *g1 = malloc(n * sizeof *g1);
    for (size_t i = 0; i < n; i++) {
        values[i] = -123.0f;
        g0[i] = 0.25f * (float)(i % 5);
        g1[i] = -0.125f * (float)(i % 3);
    }
    pf_wire_seg_tensor t[16];
    encode_seg_push_pull(&c, 0, 5, 1, 0, 1, t, records(&j, 1, t));
    int parked = ps_client_send(&c, &c.out);
    assert_false(ps_client_wait(&c, parked, 0.3, &m)); /* held until the step is complete */
    for (size_t i = 0; i < n; i++)
        assert_true(values[i] == -123.0f);

    encode_push_pull(&w, &j, 1, 9, 1, 0, 1, g1);
    ps_client_exchange(&w, &w.out, &m);
    assert_int_equal(m.u.pull_reply.push_result, PF_WIRE_PUSH_APPLIED);
    assert_int_equal(m.u.pull_reply.version, 1);
    reply_values(&j, &m, got);
    assert_true(ps_client_wait(&c, parked, 10, &m));
    expect_seg_reply(&m, 1, PF_WIRE_PUSH_ACCEPTED);
    assert_memory_equal(values, got, n * sizeof *values);
    for (size_t i = 0; i < n; i++)
        assert_float_equal(values[i], v0[i] - 0.1f * (g0[i] + g1[i]) / 2, 1e-6);
    assert_true(memcmp(values, v0, n * sizeof *v0) != 0);

    ps_client_close(&c);
    ps_client_close(&w);
    pf_segment_close(&seg);
    free(v0);
    free(got);
    free(g1);
    job_stop(&j);
}

int main(void) {
    unsetenv("PSFLOW_SHM"); /* the ps takes segments unless a test says otherwise */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attach),
        cmocka_unit_test(test_requests),
        cmocka_unit_test(test_sync_parked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
