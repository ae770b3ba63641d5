/* test_server.c - a real ps_server on 127.0.0.1 fed hand-made frames over a WebSocket:
 * every bad frame gets an ERROR reply (or, for a replayed push, a DUPLICATE ack) and the
 * ps's variables stay byte-identical; good pushes do change them. A raw client, whose
 * socket the test reads only when it chooses, holds a reply half-sent while the values
 * change under it. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "psflow/clock.h"
#include "psflow/buf.h"
#include "psflow/checkpoint.h"
#include "psflow/placement.h"
#include "psflow/wire.h"
#include "psflow/ws.h"
#include "ps/server.h"

typedef struct client {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open, closed, got;
    uint8_t *reply;
    size_t reply_len;
} client;

static void c_open(pf_ws *ws, uint64_t conn, void *cu, void *user) {
    (void)ws;
    (void)conn;
    (void)cu;
    client *c = user;
    pthread_mutex_lock(&c->mu);
    c->open = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void c_message(pf_ws *ws, uint64_t conn, void *cu, const uint8_t *d, size_t n, void *user) {
    (void)ws;
    (void)conn;
    (void)cu;
    client *c = user;
    pthread_mutex_lock(&c->mu);
    free(c->reply);
    c->reply = malloc(n ? n : 1);
    memcpy(c->reply, d, n);
    c->reply_len = n;
    c->got++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void c_close(pf_ws *ws, uint64_t conn, void *cu, void *user) {
    (void)ws;
    (void)conn;
    (void)cu;
    client *c = user;
    pthread_mutex_lock(&c->mu);
    c->closed = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

typedef struct fixture {
    pf_job_spec spec;
    pf_placement pl;
    ps_server *server;
    pf_ws *ws;
    uint64_t conn;
    client c;
    pf_wire_out out;
    pf_wire_in in;
    char dir[64];
} fixture;

static fixture fx;

/* Sends raw bytes and waits (10 s at most) for the reply, decoded into *m. */
static void exchange_raw(const void *bytes, size_t len, pf_wire_msg *m) {
    int before = fx.c.got;
    struct iovec whole = {(void *)bytes, len};
    assert_int_equal(pf_ws_sendv(fx.ws, fx.conn, &whole, 1), PF_OK);
    struct timespec deadline = pf_clock_deadline(10);
    pthread_mutex_lock(&fx.c.mu);
    while (fx.c.got == before && !fx.c.closed)
        if (pthread_cond_timedwait(&fx.c.cv, &fx.c.mu, &deadline) != 0)
            break;
    int got = fx.c.got > before;
    pthread_mutex_unlock(&fx.c.mu);
    assert_true(got);
    pf_error err;
    assert_int_equal(pf_wire_decode(&fx.in, fx.c.reply, fx.c.reply_len, m, &err), PF_OK);
}

static void exchange(pf_wire_msg *m) {
    pf_buf whole;
    pf_buf_init(&whole, 1u << 20);
    assert_int_equal(pf_wire_out_gather(&fx.out, &whole), PF_OK);
    exchange_raw(whole.data, whole.len, m);
    pf_buf_deinit(&whole);
}

/* The ps's values: pulls every shard and returns them concatenated (caller frees). */
static uint8_t *snapshot(size_t *len) {
    uint32_t ids[64];
    uint32_t n = 0;
    for (int i = 0; i < fx.pl.n_shards; i++)
        ids[n++] = (uint32_t)i;
    pf_wire_pull pull = {0, n, ids};
    pf_error err;
    assert_int_equal(pf_wire_encode_pull(&fx.out, 7, &pull, &err), PF_OK);
    pf_wire_msg m;
    exchange(&m);
    assert_int_equal(m.type, PF_WIRE_PULL_REPLY);
    size_t total = 0;
    for (uint32_t i = 0; i < m.u.pull_reply.n; i++)
        total += m.u.pull_reply.tensors[i].count * sizeof(float);
    uint8_t *out = malloc(total), *p = out;
    for (uint32_t i = 0; i < m.u.pull_reply.n; i++) {
        size_t b = m.u.pull_reply.tensors[i].count * sizeof(float);
        memcpy(p, m.u.pull_reply.tensors[i].data, b);
        p += b;
    }
    *len = total;
    return out;
}

/* --- a raw client: WebSocket frames written and read by hand ----------------------------- */

/* Writes n bytes, blocking. */
static void raw_write(int fd, const void *p, size_t n) {
    for (size_t off = 0; off < n;) {
        ssize_t k = write(fd, (const uint8_t *)p + off, n - off);
        assert_true(k > 0);
        off += (size_t)k;
    }
}

/* Reads exactly n bytes (10 s at most); 0, or -1 at the end of the stream. */
static int raw_read(int fd, void *p, size_t n) {
    for (size_t off = 0; off < n;) {
        struct pollfd q = {fd, POLLIN, 0};
        assert_int_equal(poll(&q, 1, 10000), 1);
        ssize_t k = read(fd, (uint8_t *)p + off, n - off);
        if (k <= 0)
            return -1;
        off += (size_t)k;
    }
    return 0;
}

/* A WebSocket connection to the ps with a small receive window, so a large reply stays
 * mostly in the ps until the test reads it. */
static int raw_open(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    int small = 16384;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    static const char request[] = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                                  "Connection: Upgrade\r\n"
                                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                  "Sec-WebSocket-Version: 13\r\n\r\n";
    raw_write(fd, request, sizeof request - 1);
    char answer[1024];
    size_t n = 0;
    while (n < 4 || memcmp(answer + n - 4, "\r\n\r\n", 4) != 0) { /* byte by byte: no more */
        assert_true(n + 1 < sizeof answer);
        assert_int_equal(raw_read(fd, answer + n, 1), 0);
        n++;
    }
    assert_true(strncmp(answer, "HTTP/1.1 101 ", 13) == 0);
    return fd;
}

/* A client frame header (masked with a zero key) for a len-byte binary message. */
static void raw_send_header(int fd, size_t len) {
    uint8_t h[14];
    size_t n = 0;
    h[n++] = 0x82;
    if (len < 126) {
        h[n++] = (uint8_t)(0x80 | len);
    } else {
        h[n++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            h[n++] = (uint8_t)((uint64_t)len >> (8 * i));
    }
    memset(h + n, 0, 4);
    raw_write(fd, h, n + 4);
}

/* Sends the message encoded in out as one frame. */
static void raw_send(int fd, const pf_wire_out *out) {
    pf_buf whole;
    pf_buf_init(&whole, 1u << 30);
    assert_int_equal(pf_wire_out_gather(out, &whole), PF_OK);
    raw_send_header(fd, whole.len);
    raw_write(fd, whole.data, whole.len);
    pf_buf_deinit(&whole);
}

/* Reads the next message (one unfragmented frame from the ps) into b; -1 at the end of the
 * stream. */
static int raw_recv(int fd, pf_buf *b) {
    uint8_t h[10];
    if (raw_read(fd, h, 2) != 0)
        return -1;
    assert_int_equal(h[0], 0x82);
    uint64_t len = h[1] & 0x7f;
    if (len == 126 || len == 127) {
        size_t k = len == 126 ? 2 : 8;
        assert_int_equal(raw_read(fd, h + 2, k), 0);
        len = 0;
        for (size_t i = 0; i < k; i++)
            len = len << 8 | h[2 + i];
    }
    pf_buf_reset(b);
    void *dst;
    assert_int_equal(pf_buf_extend(b, (size_t)len, &dst), PF_OK);
    return raw_read(fd, dst, (size_t)len);
}

/* Sends out and decodes the reply into *m (views into b). */
static void raw_exchange(int fd, const pf_wire_out *out, pf_wire_in *in, pf_buf *b,
                         pf_wire_msg *m) {
    raw_send(fd, out);
    assert_int_equal(raw_recv(fd, b), 0);
    pf_error err;
    assert_int_equal(pf_wire_decode(in, b->data, b->len, m, &err), PF_OK);
}

/* HELLO as role/task, answered HELLO_ACK. */
static void raw_hello(int fd, const char *job, uint8_t role, uint32_t task, pf_wire_in *in,
                      pf_buf *b) {
    pf_wire_out out;
    pf_wire_out_init(&out);
    pf_wire_hello h = {role, task, 5, {job, (uint32_t)strlen(job)}};
    pf_error err;
    assert_int_equal(pf_wire_encode_hello(&out, 1, &h, &err), PF_OK);
    pf_wire_msg m;
    raw_exchange(fd, &out, in, b, &m);
    assert_int_equal(m.type, PF_WIRE_HELLO_ACK);
    pf_wire_out_deinit(&out);
}

static int setup(void **state) {
    (void)state;
    const char *json = "{\"name\": \"frames\", \"replicas\": {\"ps\": 1, \"worker\": 2},"
                       " \"model\": {\"type\": \"softmax\", \"inputs\": 4, \"outputs\": 3},"
                       " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
                       " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
                       " \"training\": {\"mode\": \"async\", \"max_steps\": 1000}}";
    pf_error err;
    if (pf_job_spec_parse(json, strlen(json), &fx.spec, &err) != PF_OK)
        return -1;
    pf_placement_compute(&fx.spec, &fx.pl);
    snprintf(fx.dir, sizeof fx.dir, "/tmp/psflow-server-XXXXXX");
    if (!mkdtemp(fx.dir))
        return -1;
    ps_server_options o = {&fx.spec, 0, "127.0.0.1", 0, fx.dir, 42, 0, NULL, {0}, 0};
    if (ps_server_start(&o, &fx.server, &err) != PF_OK)
        return -1;
    pthread_mutex_init(&fx.c.mu, NULL);
    pthread_cond_init(&fx.c.cv, NULL);
    pf_ws_handlers h = {c_open, c_message, c_close, NULL};
    if (pf_ws_client_create(1u << 20, &h, &fx.c, &fx.ws, &err) != PF_OK)
        return -1;
    pf_ws_connect(fx.ws, "127.0.0.1", ps_server_port(fx.server), NULL, &fx.conn);
    struct timespec deadline = pf_clock_deadline(10);
    pthread_mutex_lock(&fx.c.mu);
    while (!fx.c.open && !fx.c.closed)
        if (pthread_cond_timedwait(&fx.c.cv, &fx.c.mu, &deadline) != 0)
            break;
    pthread_mutex_unlock(&fx.c.mu);
    pf_wire_out_init(&fx.out);
    pf_wire_in_init(&fx.in, 0, 0);
    return fx.c.open ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    pf_ws_destroy(fx.ws);
    ps_server_destroy(fx.server);
    pf_wire_out_deinit(&fx.out);
    pf_wire_in_deinit(&fx.in);
    pf_placement_deinit(&fx.pl);
    pf_job_spec_deinit(&fx.spec);
    free(fx.c.reply);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", fx.dir);
    return system(cmd);
}

static float grad_data[64];

/* A push of every shard (counts may be overridden) from task/incarnation/seq. */
static void encode_push(uint32_t task, uint64_t incarnation, uint64_t seq, int bad_id,
                        int bad_count) {
    static pf_wire_tensor t[64];
    for (int i = 0; i < fx.pl.n_shards; i++)
        t[i] = (pf_wire_tensor){(uint32_t)i, PF_WIRE_F32, fx.pl.shards[i].count, grad_data};
    if (bad_id)
        t[0].id = 999;
    if (bad_count)
        t[0].count += 1;
    pf_wire_push p = {task, incarnation, seq, 0, (uint32_t)fx.pl.n_shards, t};
    pf_error err;
    assert_int_equal(pf_wire_encode_push(&fx.out, 9, &p, &err), PF_OK);
}

static void expect_error(pf_wire_code code) {
    pf_wire_msg m;
    exchange(&m);
    assert_int_equal(m.type, PF_WIRE_ERROR);
    assert_int_equal(m.u.error.code, code);
    assert_true(m.u.error.message.len > 0);
}

static void test_bad_frames_change_nothing(void **state) {
    (void)state;
    for (size_t i = 0; i < 64; i++)
        grad_data[i] = 0.25f;
    size_t len0, len1;

    /* A push before HELLO is refused. */
    encode_push(0, 5, 1, 0, 0);
    expect_error(PF_WIRE_UNEXPECTED);

    /* HELLOs naming an index the job does not have are refused (the chief is task 0,
     * workers follow it; 2^31 and 2^32-1 once indexed memory the ps does not own). */
    pf_error err;
    pf_wire_msg m;
    pf_wire_hello bad[] = {
        {PF_WIRE_ROLE_WORKER, 0x80000000u, 5, {"frames", 6}},
        {PF_WIRE_ROLE_WORKER, 0xffffffffu, 5, {"frames", 6}},
        {PF_WIRE_ROLE_WORKER, 2, 5, {"frames", 6}},
        {PF_WIRE_ROLE_WORKER, 0, 5, {"frames", 6}},
        {PF_WIRE_ROLE_CHIEF, 1, 5, {"frames", 6}},
        {PF_WIRE_ROLE_EVALUATOR, 0, 5, {"frames", 6}},
        {PF_WIRE_ROLE_TOOL, 1, 5, {"frames", 6}},
        {PF_WIRE_ROLE_CHIEF, 0, 5, {"frame", 5}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(pf_wire_encode_hello(&fx.out, 1, &bad[i], &err), PF_OK);
        expect_error(PF_WIRE_BAD_VALUE);
    }
    encode_push(0, 5, 1, 0, 0);
    expect_error(PF_WIRE_UNEXPECTED);

    pf_wire_hello h = {PF_WIRE_ROLE_CHIEF, 0, 5, {"frames", 6}};
    assert_int_equal(pf_wire_encode_hello(&fx.out, 1, &h, &err), PF_OK);
    exchange(&m);
    assert_int_equal(m.type, PF_WIRE_HELLO_ACK);
    uint8_t *before = snapshot(&len0);
    /* One HELLO per connection: who it is cannot change. */
    assert_int_equal(pf_wire_encode_hello(&fx.out, 1, &h, &err), PF_OK);
    expect_error(PF_WIRE_UNEXPECTED);

    /* Raw garbage at the framing level. */
    pf_buf whole;
    pf_buf_init(&whole, 1u << 20);
    encode_push(0, 5, 1, 0, 0);
    assert_int_equal(pf_wire_out_gather(&fx.out, &whole), PF_OK);
    uint8_t *bytes = malloc(whole.len);
    memcpy(bytes, whole.data, whole.len);
    struct {
        size_t offset;
        uint8_t value;
        size_t len;
        pf_wire_code code;
    } cases[] = {
        {0, 'X', whole.len, PF_WIRE_BAD_MAGIC},     /* magic */
        {4, 9, whole.len, PF_WIRE_BAD_VERSION},     /* version */
        {6, 99, whole.len, PF_WIRE_BAD_TYPE},       /* type */
        {0, 'P', whole.len - 3, PF_WIRE_TRUNCATED}, /* truncated payload */
        {23, 0xff, whole.len, PF_WIRE_TOO_LARGE},   /* payload_len over the limit */
        {16, 0xff, whole.len, PF_WIRE_TRUNCATED},   /* payload_len disagrees */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(bytes, whole.data, whole.len);
        bytes[cases[i].offset] = cases[i].value;
        exchange_raw(bytes, cases[i].len, &m);
        assert_int_equal(m.type, PF_WIRE_ERROR);
        if (m.u.error.code != (uint32_t)cases[i].code)
            fail_msg("case %zu: got %s, expected %s", i, pf_wire_code_name(m.u.error.code),
                     pf_wire_code_name(cases[i].code));
    }
    free(bytes);
    pf_buf_deinit(&whole);

    /* Well-formed frames that do not fit this ps. */
    encode_push(0, 5, 1, 1, 0);
    expect_error(PF_WIRE_UNKNOWN_SHARD);
    encode_push(0, 5, 1, 0, 1);
    expect_error(PF_WIRE_BAD_SHAPE);
    encode_push(7, 5, 1, 0, 0);
    expect_error(PF_WIRE_BAD_VALUE);
    /* A push naming another task or incarnation than the connection's HELLO. */
    encode_push(1, 5, 1, 0, 0);
    expect_error(PF_WIRE_FORBIDDEN);
    encode_push(0, 6, 1, 0, 0);
    expect_error(PF_WIRE_FORBIDDEN);
    /* A pull, or the pull half of a push-pull, that names a shard twice: its reply would
     * not fit what the ps sets aside for one (with several ps, a pull may name up to the
     * job's shard count, more than one ps holds). */
    uint32_t twice[] = {0, 0};
    pf_wire_pull dup = {0, 2, twice};
    assert_int_equal(pf_wire_encode_pull(&fx.out, 3, &dup, &err), PF_OK);
    expect_error(PF_WIRE_UNKNOWN_SHARD);
    {
        static pf_wire_tensor t[64];
        for (int i = 0; i < fx.pl.n_shards; i++)
            t[i] = (pf_wire_tensor){(uint32_t)i, PF_WIRE_F32, fx.pl.shards[i].count, grad_data};
        pf_wire_push_pull pp = {{0, 5, 1, 0, (uint32_t)fx.pl.n_shards, t}, dup};
        assert_int_equal(pf_wire_encode_push_pull(&fx.out, 4, &pp, &err), PF_OK);
        expect_error(PF_WIRE_UNKNOWN_SHARD);
    }

    uint8_t *after = snapshot(&len1);
    assert_int_equal(len0, len1);
    assert_memory_equal(before, after, len0);
    free(after);

    /* A good push changes the values... */
    encode_push(0, 5, 1, 0, 0);
    exchange(&m);
    assert_int_equal(m.type, PF_WIRE_PUSH_ACK);
    assert_int_equal(m.u.push_ack.result, PF_WIRE_PUSH_APPLIED);
    uint8_t *changed = snapshot(&len1);
    assert_true(memcmp(before, changed, len0) != 0);

    /* ...its replay (same incarnation and seq) does not... */
    encode_push(0, 5, 1, 0, 0);
    exchange(&m);
    assert_int_equal(m.type, PF_WIRE_PUSH_ACK);
    assert_int_equal(m.u.push_ack.result, PF_WIRE_PUSH_DUPLICATE);
    /* ...nor does a push naming an older incarnation of the task. */
    encode_push(0, 4, 2, 0, 0);
    expect_error(PF_WIRE_FORBIDDEN);
    after = snapshot(&len1);
    assert_memory_equal(changed, after, len0);
    free(after);

    /* RESTORE (the chief's rollback) brings back a complete checkpoint's values and version:
     * checkpoint step 1, push once more, restore step 1. */
    pf_wire_checkpoint ck = {1, 0};
    assert_int_equal(pf_wire_encode_checkpoint(&fx.out, 20, &ck, &err), PF_OK);
    exchange(&m);
    assert_int_equal(m.type, PF_WIRE_CHECKPOINT_ACK);
    assert_int_equal(m.u.checkpoint_ack.status, 0);
    char step_dir[128];
    snprintf(step_dir, sizeof step_dir, "%s/frames/step-1", fx.dir);
    assert_int_equal(pf_checkpoint_write_manifest(step_dir, "frames", 1, 1, NULL, &err), PF_OK);
    encode_push(0, 5, 3, 0, 0);
    exchange(&m);
    assert_int_equal(m.u.push_ack.result, PF_WIRE_PUSH_APPLIED);
    assert_int_equal(m.u.push_ack.version, 2);
    after = snapshot(&len1);
    assert_true(memcmp(changed, after, len0) != 0);
    free(after);
    pf_wire_restore rs = {1, 1.0f};
    assert_int_equal(pf_wire_encode_restore(&fx.out, 21, &rs, &err), PF_OK);
    exchange(&m);
    assert_int_equal(m.type, PF_WIRE_CHECKPOINT_ACK);
    assert_int_equal(m.u.checkpoint_ack.status, 0);
    after = snapshot(&len1);
    assert_memory_equal(changed, after, len0);
    free(after);
    /* A checkpoint that does not exist: refused, nothing changes. */
    rs.step = 77;
    assert_int_equal(pf_wire_encode_restore(&fx.out, 22, &rs, &err), PF_OK);
    exchange(&m);
    assert_int_equal(m.type, PF_WIRE_CHECKPOINT_ACK);
    assert_int_equal(m.u.checkpoint_ack.status, PF_WIRE_INTERNAL);
    after = snapshot(&len1);
    assert_memory_equal(changed, after, len0);
    free(after);
    free(changed);
    free(before);
}

/* Opens another connection to the ps and makes it the one exchange() uses. */
static void reconnect(void) {
    pthread_mutex_lock(&fx.c.mu);
    fx.c.open = fx.c.closed = 0;
    pthread_mutex_unlock(&fx.c.mu);
    assert_int_equal(pf_ws_connect(fx.ws, "127.0.0.1", ps_server_port(fx.server), NULL, &fx.conn),
                     PF_OK);
    struct timespec deadline = pf_clock_deadline(10);
    pthread_mutex_lock(&fx.c.mu);
    while (!fx.c.open && !fx.c.closed)
        if (pthread_cond_timedwait(&fx.c.cv, &fx.c.mu, &deadline) != 0)
            break;
    int open = fx.c.open;
    pthread_mutex_unlock(&fx.c.mu);
    assert_true(open);
}

/* Waits (10 s at most) until the ps runs with `workers` workers. */
static void wait_workers(int workers) {
    double give_up = pf_clock_now() + 10;
    while (ps_server_workers(fx.server) != workers && pf_clock_now() < give_up)
        pf_clock_sleep(0.01); /* polling the ps's membership, with a deadline */
    assert_int_equal(ps_server_workers(fx.server), workers);
}

/* The membership comes from the ps's agent, never from a peer: a HELLO beyond it is refused
 * until the agent says the job has grown; shrunk again, the removed worker's connection is
 * closed and a new HELLO from it refused. */
static void test_membership_from_agent(void **state) {
    (void)state;
    pf_error err;
    pf_wire_msg m;
    pf_wire_hello w2 = {PF_WIRE_ROLE_WORKER, 2, 8, {"frames", 6}};
    reconnect();
    assert_int_equal(ps_server_workers(fx.server), 2);
    assert_int_equal(pf_wire_encode_hello(&fx.out, 1, &w2, &err), PF_OK);
    expect_error(PF_WIRE_BAD_VALUE);
    ps_server_set_workers(fx.server, 3, 3);
    wait_workers(3);
    assert_int_equal(pf_wire_encode_hello(&fx.out, 1, &w2, &err), PF_OK);
    exchange(&m);
    assert_int_equal(m.type, PF_WIRE_HELLO_ACK);
    encode_push(2, 8, 1, 0, 0);
    exchange(&m);
    assert_int_equal(m.type, PF_WIRE_PUSH_ACK);
    ps_server_set_workers(fx.server, 2, 2);
    wait_workers(2);
    struct timespec deadline = pf_clock_deadline(10);
    pthread_mutex_lock(&fx.c.mu);
    while (!fx.c.closed)
        if (pthread_cond_timedwait(&fx.c.cv, &fx.c.mu, &deadline) != 0)
            break;
    int closed = fx.c.closed;
    pthread_mutex_unlock(&fx.c.mu);
    assert_true(closed);
    reconnect();
    assert_int_equal(pf_wire_encode_hello(&fx.out, 1, &w2, &err), PF_OK);
    expect_error(PF_WIRE_BAD_VALUE);
}

/* A pull of every shard of placement pl, min_version 0, into out. */
static void encode_pull_all(pf_wire_out *out, uint32_t request_id, const pf_placement *pl) {
    static uint32_t ids[64];
    for (int i = 0; i < pl->n_shards; i++)
        ids[i] = (uint32_t)i;
    pf_wire_pull pull = {0, (uint32_t)pl->n_shards, ids};
    pf_error err;
    assert_int_equal(pf_wire_encode_pull(out, request_id, &pull, &err), PF_OK);
}

/* The values of a decoded PULL_REPLY, concatenated (caller frees). */
static float *reply_values(const pf_wire_msg *m, size_t *n) {
    assert_int_equal(m->type, PF_WIRE_PULL_REPLY);
    size_t total = 0;
    for (uint32_t i = 0; i < m->u.pull_reply.n; i++)
        total += m->u.pull_reply.tensors[i].count;
    float *v = malloc(total * sizeof *v), *p = v;
    for (uint32_t i = 0; i < m->u.pull_reply.n; i++) {
        memcpy(p, m->u.pull_reply.tensors[i].data, m->u.pull_reply.tensors[i].count * sizeof *p);
        p += m->u.pull_reply.tensors[i].count;
    }
    *n = total;
    return v;
}

/* A push of gradient 1 for every shard from task (incarnation 5). */
static void encode_push_ones(pf_wire_out *out, const pf_placement *pl, uint32_t task, uint64_t seq,
                             uint64_t step, const float *ones) {
    static pf_wire_tensor t[64];
    for (int i = 0; i < pl->n_shards; i++)
        t[i] = (pf_wire_tensor){(uint32_t)i, PF_WIRE_F32, pl->shards[i].count, ones};
    pf_wire_push p = {task, 5, seq, step, (uint32_t)pl->n_shards, t};
    pf_error err;
    assert_int_equal(pf_wire_encode_push(out, 9, &p, &err), PF_OK);
}

/* Waits (10 s at most) until the ps's version is v. */
static void wait_version(ps_server *ps, uint64_t v) {
    double give_up = pf_clock_now() + 10;
    uint64_t now, applied, stale;
    ps_server_stats(ps, &now, &applied, &stale);
    while (now != v && pf_clock_now() < give_up) {
        pf_clock_sleep(0.01); /* polling the ps's published version, with a deadline */
        ps_server_stats(ps, &now, &applied, &stale);
    }
    assert_int_equal(now, v);
}

/* Reads the pull reply waiting on fd (most of it still in the ps) and checks it holds
 * exactly `want` (n floats). */
static void expect_reply_values(int fd, pf_wire_in *in, pf_buf *b, const float *want, size_t n) {
    int avail = 0;
    assert_int_equal(ioctl(fd, FIONREAD, &avail), 0);
    assert_true((size_t)avail < n * sizeof(float) / 2); /* the ps holds most of the reply */
    assert_int_equal(raw_recv(fd, b), 0);
    pf_wire_msg m;
    pf_error err;
    assert_int_equal(pf_wire_decode(in, b->data, b->len, &m, &err), PF_OK);
    size_t got_n;
    float *got = reply_values(&m, &got_n);
    assert_int_equal(got_n, n);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof *got) != 0)
            fail_msg("value %zu of %zu changed while its reply was being sent", i, n);
    free(got);
}

/* A pull reply is sent from the values themselves; what the socket does not take at once
 * is written later. A rollback (RESTORE) and a membership change that applies the waiting
 * sync step change the values meanwhile: the reply still carries exactly the values of the
 * version it names, never a mix. (4 MiB of values; the client reads nothing until the
 * values have changed.) */
static void test_reply_never_mixes_versions(void **state) {
    (void)state;
    const char *json = "{\"name\": \"mix\", \"replicas\": {\"ps\": 1, \"worker\": 2},"
                       " \"model\": {\"type\": \"softmax\", \"inputs\": 1023, \"outputs\": 1024},"
                       " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
                       " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
                       " \"training\": {\"mode\": \"sync\", \"max_steps\": 1000}}";
    pf_job_spec spec;
    pf_placement pl;
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), &spec, &err), PF_OK);
    assert_int_equal(pf_placement_compute(&spec, &pl), PF_OK);
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/psflow-mix-XXXXXX");
    assert_non_null(mkdtemp(dir));
    ps_server_options o = {&spec, 0, "127.0.0.1", 0, dir, 42, 0, NULL, {0}, 0};
    ps_server *ps;
    assert_int_equal(ps_server_start(&o, &ps, &err), PF_OK);
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    pf_wire_out out;
    pf_wire_out_init(&out);
    pf_buf b;
    pf_buf_init(&b, 1u << 30);
    pf_wire_msg m;
    size_t n_max = 0;
    for (int i = 0; i < pl.n_shards; i++)
        n_max = pl.shards[i].count > n_max ? (size_t)pl.shards[i].count : n_max;
    float *ones = malloc(n_max * sizeof *ones);
    for (size_t i = 0; i < n_max; i++)
        ones[i] = 1.0f;
    int a = raw_open(ps_server_port(ps)), w = raw_open(ps_server_port(ps));
    raw_hello(a, "mix", PF_WIRE_ROLE_CHIEF, 0, &in, &b);
    raw_hello(w, "mix", PF_WIRE_ROLE_WORKER, 1, &in, &b);

    /* Checkpoint step 0, then one sync step (both tasks push): version 1. */
    pf_wire_checkpoint ck = {0, 0};
    assert_int_equal(pf_wire_encode_checkpoint(&out, 2, &ck, &err), PF_OK);
    raw_exchange(a, &out, &in, &b, &m);
    assert_int_equal(m.type, PF_WIRE_CHECKPOINT_ACK);
    assert_int_equal(m.u.checkpoint_ack.status, 0);
    char step_dir[128];
    snprintf(step_dir, sizeof step_dir, "%s/mix/step-0", dir);
    assert_int_equal(pf_checkpoint_write_manifest(step_dir, "mix", 0, 1, NULL, &err), PF_OK);
    encode_push_ones(&out, &pl, 0, 1, 0, ones);
    raw_exchange(a, &out, &in, &b, &m);
    assert_int_equal(m.u.push_ack.result, PF_WIRE_PUSH_ACCEPTED);
    encode_push_ones(&out, &pl, 1, 1, 0, ones);
    raw_exchange(w, &out, &in, &b, &m);
    assert_int_equal(m.u.push_ack.result, PF_WIRE_PUSH_APPLIED);
    encode_pull_all(&out, 3, &pl);
    raw_exchange(a, &out, &in, &b, &m);
    size_t n;
    float *v1 = reply_values(&m, &n);

    /* A pull left unread, then a rollback to step 0 on the same connection. */
    encode_pull_all(&out, 4, &pl);
    raw_send(a, &out);
    pf_wire_restore rs = {0, 1.0f};
    assert_int_equal(pf_wire_encode_restore(&out, 5, &rs, &err), PF_OK);
    raw_send(a, &out);
    wait_version(ps, 0);
    expect_reply_values(a, &in, &b, v1, n);
    assert_int_equal(raw_recv(a, &b), 0);
    assert_int_equal(pf_wire_decode(&in, b.data, b.len, &m, &err), PF_OK);
    assert_int_equal(m.type, PF_WIRE_CHECKPOINT_ACK);
    assert_int_equal(m.u.checkpoint_ack.status, 0);

    /* The chief's gradient waits for worker 1's; a pull is left unread; the agent removes
     * worker 1, which applies the step. */
    encode_pull_all(&out, 6, &pl);
    raw_exchange(a, &out, &in, &b, &m);
    float *v0 = reply_values(&m, &n);
    assert_true(memcmp(v0, v1, n * sizeof *v0) != 0);
    encode_push_ones(&out, &pl, 0, 2, 0, ones);
    raw_exchange(a, &out, &in, &b, &m);
    assert_int_equal(m.u.push_ack.result, PF_WIRE_PUSH_ACCEPTED);
    encode_pull_all(&out, 7, &pl);
    raw_send(a, &out);
    struct pollfd q = {a, POLLIN, 0}; /* the reply has begun: the pull was handled */
    assert_int_equal(poll(&q, 1, 10000), 1);
    ps_server_set_workers(ps, 1, 1);
    wait_version(ps, 1);
    expect_reply_values(a, &in, &b, v0, n);

    close(a);
    close(w);
    ps_server_destroy(ps);
    free(v0);
    free(v1);
    free(ones);
    pf_buf_deinit(&b);
    pf_wire_out_deinit(&out);
    pf_wire_in_deinit(&in);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Opens k tool connections to the ps (HELLO accepted: trusted) and starts on each a frame
 * of len bytes: header only, nothing of the message yet. With round_trips, it then opens
 * another connection and says HELLO on it (a small frame: it needs room under the cap
 * too), by which time the ps's loop has read the headers sent before. */
static void start_frames(int port, int *fds, int k, size_t len, int round_trips, pf_wire_in *in,
                         pf_buf *b) {
    for (int i = 0; i < k; i++) {
        fds[i] = raw_open(port);
        raw_hello(fds[i], "grow", PF_WIRE_ROLE_TOOL, 0, in, b);
    }
    for (int i = 0; i < k; i++)
        raw_send_header(fds[i], len);
    if (round_trips) {
        int other = raw_open(port);
        raw_hello(other, "grow", PF_WIRE_ROLE_TOOL, 0, in, b);
        close(other);
    }
}

/* Finishes the frame started on fd with len bytes: a STATS header and zeros, which the ps
 * receives whole and refuses (its length disagrees): an ERROR. Returns 0, or -1 when the ps
 * had closed the connection instead. */
static int finish_frame(int fd, size_t len, pf_wire_in *in, pf_buf *b) {
    pf_wire_out out;
    pf_wire_out_init(&out);
    pf_error err;
    assert_int_equal(pf_wire_encode_stats(&out, 3, &err), PF_OK);
    pf_buf whole;
    pf_buf_init(&whole, len);
    assert_int_equal(pf_wire_out_gather(&out, &whole), PF_OK);
    uint8_t *msg = calloc(1, len);
    memcpy(msg, whole.data, whole.len);
    if (send(fd, msg, len, MSG_NOSIGNAL) != (ssize_t)len) /* refused: closed at the header */
        len = 0;
    free(msg);
    pf_buf_deinit(&whole);
    pf_wire_out_deinit(&out);
    if (len == 0 || raw_recv(fd, b) != 0)
        return -1;
    pf_wire_msg m;
    assert_int_equal(pf_wire_decode(in, b->data, b->len, &m, &err), PF_OK);
    assert_int_equal(m.type, PF_WIRE_ERROR);
    return 0;
}

/* The data plane's default limits follow the membership: a ps started for 1 worker holds
 * (1 + 4) largest messages of incomplete frames, so the 6th concurrent one closes its
 * connection; once its agent says the job has 8 workers, (8 + 4) fit and 6 are served. */
static void test_limits_follow_membership(void **state) {
    (void)state;
    const char *json = "{\"name\": \"grow\", \"replicas\": {\"ps\": 1, \"worker\": 1},"
                       " \"model\": {\"type\": \"softmax\", \"inputs\": 4, \"outputs\": 3},"
                       " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
                       " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
                       " \"training\": {\"mode\": \"sync\", \"max_steps\": 1000}}";
    pf_job_spec spec;
    pf_placement pl;
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), &spec, &err), PF_OK);
    assert_int_equal(pf_placement_compute(&spec, &pl), PF_OK);
    ps_server_options o = {&spec, 0, "127.0.0.1", 0, "/dev/null/none", 42, 0, NULL, {0}, 0};
    ps_server *ps;
    assert_int_equal(ps_server_start(&o, &ps, &err), PF_OK);
    int port = ps_server_port(ps);
    /* The largest message the ps accepts (ps/server.c): its share, 64 KiB, 16 bytes a shard. */
    size_t max = (size_t)pl.bytes_per_ps[0] + 65536 + (size_t)pl.n_shards * 16;
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    pf_buf b;
    pf_buf_init(&b, 1u << 20);
    int fds[6];

    start_frames(port, fds, 6, max, 0, &in, &b);
    int refused = -1;
    while (refused < 0) { /* one of them is closed at its frame header */
        struct pollfd q[6];
        for (int i = 0; i < 6; i++)
            q[i] = (struct pollfd){fds[i], POLLIN, 0};
        assert_true(poll(q, 6, 10000) > 0);
        for (int i = 0; i < 6; i++)
            if (q[i].revents)
                refused = i;
    }
    for (int i = 0; i < 6; i++)
        assert_int_equal(finish_frame(fds[i], max, &in, &b), i == refused ? -1 : 0);
    for (int i = 0; i < 6; i++)
        close(fds[i]);

    ps_server_set_workers(ps, 8, 8);
    double give_up = pf_clock_now() + 10;
    while (ps_server_workers(ps) != 8 && pf_clock_now() < give_up)
        pf_clock_sleep(0.01); /* polling the ps's membership, with a deadline */
    assert_int_equal(ps_server_workers(ps), 8);
    start_frames(port, fds, 6, max, 1, &in, &b);
    for (int i = 0; i < 6; i++)
        if (finish_frame(fds[i], max, &in, &b) != 0)
            fail_msg("frame %d of 6 refused after the job grew to 8 workers", i);
    for (int i = 0; i < 6; i++)
        close(fds[i]);

    ps_server_destroy(ps);
    pf_buf_deinit(&b);
    pf_wire_in_deinit(&in);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_frames_change_nothing),
        cmocka_unit_test(test_membership_from_agent),
        cmocka_unit_test(test_reply_never_mixes_versions),
        cmocka_unit_test(test_limits_follow_membership),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
