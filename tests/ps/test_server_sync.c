/* test_server_sync.c - a sync ps driven without sockets (ps_server_start_sink): every
 * request it keeps waiting is answered once, exactly when it can be - a CHECKPOINT parked
 * for a version and replaced by another, or one the ps can no longer reach - every reply
 * reaches its peer, and a membership change refused for want of memory is applied later.
 * Replies are collected in order, per connection, and decoded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ps/server.h"
#include "psflow/buf.h"
#include "psflow/placement.h"
#include "psflow/spec.h"
#include "psflow/wire.h"
#include "tests/support/counting_alloc.h"

enum { MAX_REPLIES = 64 };

/* What the ps sent, in order: each reply's connection and bytes. */
static struct {
    uint64_t conn[MAX_REPLIES];
    pf_buf bytes[MAX_REPLIES];
    int n, taken;
    int closed;
} got;

static void on_send(void *user, uint64_t conn, const struct iovec *parts, int n) {
    (void)user;
    assert_true(got.n < MAX_REPLIES);
    pf_buf *b = &got.bytes[got.n];
    pf_buf_init(b, 1u << 20);
    for (int i = 0; i < n; i++) {
        void *dst;
        assert_int_equal(pf_buf_extend(b, parts[i].iov_len, &dst), PF_OK);
        memcpy(dst, parts[i].iov_base, parts[i].iov_len);
    }
    got.conn[got.n++] = conn;
}

static void on_close(void *user, uint64_t conn) {
    (void)user;
    (void)conn;
    got.closed++;
}

/* The job: one ps, the chief as the only training task, so each push is a sync step. */
static struct {
    pf_job_spec spec;
    pf_placement pl;
    ps_server *ps;
    char dir[1024];
    pf_wire_out out;
    pf_wire_in in;
    pf_buf msg;
    uint64_t seq;
} fx;

static const char *const job_json =
    "{\"name\": \"sync\", \"replicas\": {\"ps\": 1, \"worker\": 1},"
    " \"model\": {\"type\": \"softmax\", \"inputs\": 4, \"outputs\": 3},"
    " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
    " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
    " \"training\": {\"mode\": \"sync\", \"max_steps\": 5}}";

/* Starts the ps with its checkpoints under fx.dir + suffix (created). */
static void start(const char *suffix) {
    memset(&got, 0, sizeof got);
    pf_error err;
    assert_int_equal(pf_job_spec_parse(job_json, strlen(job_json), &fx.spec, &err), PF_OK);
    assert_int_equal(pf_placement_compute(&fx.spec, &fx.pl), PF_OK);
    snprintf(fx.dir, sizeof fx.dir, "/tmp/psflow-sync-XXXXXX");
    assert_non_null(mkdtemp(fx.dir));
    size_t n = strlen(fx.dir);
    snprintf(fx.dir + n, sizeof fx.dir - n, "/%s", suffix);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", fx.dir);
    assert_int_equal(system(cmd), 0);
    ps_server_options o = {&fx.spec, 0, NULL, 0, fx.dir, 42, 0, NULL, {0}, 0};
    ps_server_sink sink = {on_send, on_close, NULL, NULL, 1};
    assert_int_equal(ps_server_start_sink(&o, &sink, &fx.ps, &err), PF_OK);
    pf_wire_out_init(&fx.out);
    pf_wire_in_init(&fx.in, 0, 0);
    pf_buf_init(&fx.msg, 1u << 20);
    fx.seq = 0;
}

static void stop(void) {
    ps_server_destroy(fx.ps);
    for (int i = 0; i < got.n; i++)
        pf_buf_deinit(&got.bytes[i]);
    pf_buf_deinit(&fx.msg);
    pf_wire_out_deinit(&fx.out);
    pf_wire_in_deinit(&fx.in);
    pf_placement_deinit(&fx.pl);
    pf_job_spec_deinit(&fx.spec);
    char *slash = strchr(fx.dir + strlen("/tmp/"), '/'); /* the mkdtemp folder */
    if (slash)
        *slash = '\0';
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx.dir);
    assert_int_equal(system(cmd), 0);
}

/* Hands the message encoded in fx.out to the ps on conn. */
static void send_out(uint64_t conn) {
    pf_buf_reset(&fx.msg);
    assert_int_equal(pf_wire_out_gather(&fx.out, &fx.msg), PF_OK);
    ps_server_sink_message(fx.ps, conn, fx.msg.data, fx.msg.len);
}

/* The next reply the ps sent (it must be on conn), decoded into *m. */
static void next_reply(uint64_t conn, pf_wire_msg *m) {
    assert_true(got.taken < got.n);
    assert_int_equal(got.conn[got.taken], conn);
    pf_buf *b = &got.bytes[got.taken++];
    pf_error err;
    assert_int_equal(pf_wire_decode(&fx.in, b->data, b->len, m, &err), PF_OK);
}

static void no_more_replies(void) {
    assert_int_equal(got.taken, got.n);
}

static void hello_chief(uint64_t conn) {
    ps_server_sink_open(fx.ps, conn);
    pf_wire_hello h = {PF_WIRE_ROLE_CHIEF, 0, 5, {"sync", 4}};
    pf_error err;
    assert_int_equal(pf_wire_encode_hello(&fx.out, 1, &h, &err), PF_OK);
    send_out(conn);
    pf_wire_msg m;
    next_reply(conn, &m);
    assert_int_equal(m.type, PF_WIRE_HELLO_ACK);
}

static void checkpoint(uint64_t conn, uint32_t request_id, uint64_t step, uint32_t final) {
    pf_wire_checkpoint ck = {step, final};
    pf_error err;
    assert_int_equal(pf_wire_encode_checkpoint(&fx.out, request_id, &ck, &err), PF_OK);
    send_out(conn);
}

/* The chief's push for `step`: a sync step of its own. Returns the push result; any reply
 * before the ack (a checkpoint written by this step) is left to be taken after it. */
static uint32_t push(uint64_t conn, uint64_t step) {
    static float grad[64];
    static pf_wire_tensor t[64];
    for (int i = 0; i < fx.pl.n_shards; i++)
        t[i] = (pf_wire_tensor){(uint32_t)i, PF_WIRE_F32, fx.pl.shards[i].count, grad};
    pf_wire_push p = {0, 5, ++fx.seq, step, (uint32_t)fx.pl.n_shards, t};
    pf_error err;
    assert_int_equal(pf_wire_encode_push(&fx.out, 9, &p, &err), PF_OK);
    int before = got.n;
    send_out(conn);
    assert_true(got.n > before);
    pf_buf *b = &got.bytes[got.n - 1]; /* the ack comes last */
    pf_wire_msg m;
    assert_int_equal(pf_wire_decode(&fx.in, b->data, b->len, &m, &err), PF_OK);
    assert_int_equal(m.type, PF_WIRE_PUSH_ACK);
    return m.u.push_ack.result;
}

/* Takes the next reply on conn: a CHECKPOINT_ACK for request_id with status. */
static void expect_checkpoint_ack(uint64_t conn, uint32_t request_id, uint64_t step,
                                  uint32_t status) {
    pf_wire_msg m;
    next_reply(conn, &m);
    assert_int_equal(m.type, PF_WIRE_CHECKPOINT_ACK);
    assert_int_equal(m.request_id, request_id);
    assert_int_equal(m.u.checkpoint_ack.step, step);
    if (m.u.checkpoint_ack.status != status)
        fail_msg("checkpoint at step %llu: status %s, expected %s (%.*s)", (unsigned long long)step,
                 pf_wire_code_name(m.u.checkpoint_ack.status), pf_wire_code_name(status),
                 (int)m.u.checkpoint_ack.path.len, m.u.checkpoint_ack.path.ptr);
}

static void expect_push_ack(uint64_t conn) {
    pf_wire_msg m;
    next_reply(conn, &m);
    assert_int_equal(m.type, PF_WIRE_PUSH_ACK);
}

static void expect_error(uint64_t conn, uint32_t request_id, uint32_t code) {
    pf_wire_msg m;
    next_reply(conn, &m);
    assert_int_equal(m.type, PF_WIRE_ERROR);
    assert_int_equal(m.request_id, request_id);
    if (m.u.error.code != code)
        fail_msg("got %s, expected %s", pf_wire_code_name(m.u.error.code), pf_wire_code_name(code));
}

/* A second CHECKPOINT on a connection whose first one waits for its version replaces it:
 * the first is answered at once (ERROR UNEXPECTED, nothing written for it), the second
 * when its version comes. */
static void test_second_checkpoint_answers_first(void **state) {
    (void)state;
    start("replace");
    hello_chief(1);
    checkpoint(1, 10, 2, 0);
    no_more_replies(); /* waits for version 2 */
    checkpoint(1, 11, 3, 0);
    expect_error(1, 10, PF_WIRE_UNEXPECTED);
    assert_int_equal(push(1, 0), PF_WIRE_PUSH_APPLIED);
    expect_push_ack(1);
    assert_int_equal(push(1, 1), PF_WIRE_PUSH_APPLIED);
    expect_push_ack(1); /* version 2: nothing more for request 10 */
    assert_int_equal(push(1, 2), PF_WIRE_PUSH_APPLIED);
    expect_checkpoint_ack(1, 11, 3, 0); /* written at version 3, before the push's ack */
    expect_push_ack(1);
    no_more_replies();
    stop();
}

/* A CHECKPOINT the ps can never write does not wait: one past max_steps (5) is refused at
 * once; one parked for a later version is answered VERSION_PASSED when the job ends below
 * it (the final checkpoint), and so is one that comes afterwards. One at max_steps itself
 * is written when the last step is applied. */
static void test_checkpoint_past_the_end(void **state) {
    (void)state;
    start("end");
    hello_chief(1);
    hello_chief(2); /* the same chief on a second connection (a reconnect) */
    checkpoint(1, 10, 6, 0);
    expect_error(1, 10, PF_WIRE_BAD_VALUE);
    checkpoint(1, 11, 5, 0);
    no_more_replies(); /* waits for version 5 */
    for (uint64_t step = 0; step < 4; step++) {
        assert_int_equal(push(2, step), PF_WIRE_PUSH_APPLIED);
        expect_push_ack(2);
    }
    assert_int_equal(push(2, 4), PF_WIRE_PUSH_APPLIED);
    expect_checkpoint_ack(1, 11, 5, 0); /* written at max_steps, before the push's ack */
    expect_push_ack(2);
    no_more_replies();
    stop();

    start("final");
    hello_chief(1);
    hello_chief(2);
    checkpoint(1, 20, 3, 0);
    no_more_replies();
    assert_int_equal(push(2, 0), PF_WIRE_PUSH_APPLIED);
    expect_push_ack(2);
    checkpoint(2, 21, 1, 1); /* the final checkpoint at version 1: the job is done */
    expect_checkpoint_ack(2, 21, 1, 0);
    expect_checkpoint_ack(1, 20, 3, PF_WIRE_VERSION_PASSED);
    checkpoint(1, 22, 4, 0);
    expect_checkpoint_ack(1, 22, 4, PF_WIRE_VERSION_PASSED);
    no_more_replies();
    stop();
}

/* A CHECKPOINT_ACK whose text the wire refuses still reaches the chief with its status: a
 * path that is not UTF-8 (a checkpoint folder's name is bytes) is replaced by a fixed text,
 * and a reason cut to fit (a 256-byte error message, here inside a 2-byte character of a
 * long folder name) is cut at a character boundary, so the reason itself is sent. */
static void test_unencodable_texts_still_answered(void **state) {
    (void)state;
    start("\xff\xfe"); /* not UTF-8 */
    hello_chief(1);
    checkpoint(1, 10, 0, 0);
    pf_wire_msg m;
    next_reply(1, &m);
    assert_int_equal(m.type, PF_WIRE_CHECKPOINT_ACK);
    assert_int_equal(m.u.checkpoint_ack.status, 0);
    assert_true(m.u.checkpoint_ack.path.len > 0);
    for (uint32_t i = 0; i < m.u.checkpoint_ack.path.len; i++)
        assert_true((unsigned char)m.u.checkpoint_ack.path.ptr[i] < 0x80); /* the fixed text */
    no_more_replies();
    stop();

    char name[256] = "";
    for (int i = 0; i < 120; i++)
        strcat(name, "\xc3\xa9"); /* U+00E9, from byte 24 of the path on */
    start(name);
    hello_chief(1);
    pf_wire_restore rs = {77, 1.0f};
    pf_error err;
    assert_int_equal(pf_wire_encode_restore(&fx.out, 11, &rs, &err), PF_OK);
    send_out(1);
    next_reply(1, &m);
    assert_int_equal(m.type, PF_WIRE_CHECKPOINT_ACK);
    assert_int_equal(m.u.checkpoint_ack.status, PF_WIRE_INTERNAL);
    assert_int_equal(m.u.checkpoint_ack.path.len, 254); /* the 255th byte began a character */
    assert_memory_equal(m.u.checkpoint_ack.path.ptr, fx.dir, 254);
    no_more_replies();
    stop();
}

/* A membership change the ps cannot make for want of memory (the gradient buffers of the
 * added tasks) is not lost: it is kept and applied on the next message once memory allows,
 * before that message is handled (here the HELLO of a worker it adds). */
static void test_membership_retried_after_out_of_memory(void **state) {
    (void)state;
    start("retry");
    hello_chief(1);
    use_counting(0); /* every allocation fails */
    ps_server_set_workers(fx.ps, 3, 3);
    use_libc();
    assert_true(alloc_refused > 0);
    assert_int_equal(ps_server_workers(fx.ps), 1);
    ps_server_sink_open(fx.ps, 2);
    pf_wire_hello h = {PF_WIRE_ROLE_WORKER, 2, 5, {"sync", 4}};
    pf_error err;
    assert_int_equal(pf_wire_encode_hello(&fx.out, 1, &h, &err), PF_OK);
    send_out(2);
    pf_wire_msg m;
    next_reply(2, &m);
    assert_int_equal(m.type, PF_WIRE_HELLO_ACK);
    assert_int_equal(ps_server_workers(fx.ps), 3);
    no_more_replies();
    stop();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_checkpoint_answers_first),
        cmocka_unit_test(test_checkpoint_past_the_end),
        cmocka_unit_test(test_unencodable_texts_still_answered),
        cmocka_unit_test(test_membership_retried_after_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
