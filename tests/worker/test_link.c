/* test_link.c - the worker's link to the ps tasks against real in-process ps servers: a request in
 * flight when the connection is lost completes once the same ps (same incarnation) is back,
 * and a checkpoint is given up (never asked again: the ps restored older values) when the
 * ps restarted meanwhile, the restart being reported for the chief's rollback; a sync
 * checkpoint asked without waiting is written while the link pushes on; a ps restarting
 * while another holds the chief's sync push is seen at once; a fused row step over 2 ps
 * (a table split between them) applies its push and brings the next batch's rows and the
 * dense values exactly as a push and then a pull do. A watchdog
 * fails the test instead of letting a hang run into the ctest timeout. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ps/server.h"
#include "psflow/clock.h"
#include "psflow/model.h"
#include "psflow/wire.h"
#include "psflow/placement.h"
#include "worker/link.h"
#include "worker/rows.h"

static pf_job_spec spec;
static char dir[64];

static void watchdog(int sig) {
    (void)sig;
    static const char msg[] = "test_link: a request hung for 30 s\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

static int setup(void **state) {
    (void)state;
    const char *json = "{\"name\": \"client\", \"replicas\": {\"ps\": 1, \"worker\": 1},"
                       " \"model\": {\"type\": \"softmax\", \"inputs\": 4, \"outputs\": 3},"
                       " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
                       " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
                       " \"training\": {\"mode\": \"async\", \"max_steps\": 1000}}";
    pf_error err;
    snprintf(dir, sizeof dir, "/tmp/psflow-client-XXXXXX");
    signal(SIGALRM, watchdog);
    return pf_job_spec_parse(json, strlen(json), &spec, &err) == PF_OK && mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    pf_job_spec_deinit(&spec);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

typedef struct restart {
    int port;
    uint64_t incarnation;
    ps_server *server;
} restart;

/* Brings a ps up on a given port after a short delay (the link is retrying meanwhile). */
static void *start_later(void *arg) {
    restart *r = arg;
    pf_clock_sleep(0.3); /* the outage being simulated */
    ps_server_options o = {&spec, 0, "127.0.0.1", r->port, dir, r->incarnation, 0, NULL, {0}, 0};
    pf_error err;
    for (int i = 0; i < 50; i++) { /* the old listener may take a moment to go */
        if (ps_server_start(&o, &r->server, &err) == PF_OK)
            return NULL;
        pf_clock_sleep(0.3);
    }
    return NULL;
}

static worker_link *connect_link_with(int port, int segment) {
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    const char *addrs[] = {addr};
    worker_link_options co = {&spec, addrs, 0,      PF_WIRE_ROLE_CHIEF, 7, 20, NULL, NULL,
                              NULL,  NULL,  segment};
    worker_link *c;
    pf_error err;
    assert_int_equal(worker_link_create(&co, &c, &err), PF_OK);
    return c;
}

static worker_link *connect_link(int port) {
    return connect_link_with(port, 0);
}

static void lose_and_return(uint64_t incarnation_after, int checkpoint) {
    ps_server_options o = {&spec, 0, "127.0.0.1", 0, dir, 100, 0, NULL, {0}, 0};
    ps_server *first;
    pf_error err;
    assert_int_equal(ps_server_start(&o, &first, &err), PF_OK);
    restart r = {ps_server_port(first), incarnation_after, NULL};
    worker_link *c = connect_link(r.port);
    size_t n = pf_model_num_params(&spec.model);
    float *params = calloc(n, sizeof(float));
    uint64_t v;
    assert_int_equal(worker_link_pull(c, NULL, params, &v, &err), PF_OK);

    /* The ps goes away while the link is between requests; the next request finds the
     * connection gone, reconnects (retrying until the ps is back) and must complete. */
    ps_server_destroy(first);
    pthread_t th;
    pthread_create(&th, NULL, start_later, &r);
    alarm(30);
    if (checkpoint) {
        /* The ps that came back restored version 0: asking it for step 5 would label
         * version-0 values step 5, so the checkpoint is given up and the restart reported. */
        assert_int_equal(worker_link_checkpoint(c, 5, 1, &err), PF_ERR_UNAVAILABLE);
        assert_non_null(strstr(err.message, "restarted during checkpoint 5"));
        char path[256];
        snprintf(path, sizeof path, "%s/client/step-5/ps-0.safetensors", dir);
        assert_int_equal(access(path, F_OK), -1);
        int ps = -1;
        uint64_t restored = 99;
        assert_int_equal(worker_link_take_restart(c, &ps, &restored), 1);
        assert_int_equal(ps, 0);
        assert_int_equal(restored, 0);
        assert_int_equal(worker_link_take_restart(c, &ps, &restored), 0);
    } else {
        assert_int_equal(worker_link_pull(c, NULL, params, &v, &err), PF_OK);
    }
    alarm(0);
    pthread_join(th, NULL);
    assert_non_null(r.server);
    worker_link_destroy(c);
    ps_server_destroy(r.server);
    free(params);
}

static void test_same_ps_returns(void **state) {
    (void)state;
    lose_and_return(100, 0); /* same incarnation: the request is resent with its own id */
}

static void test_restarted_ps_checkpoint_given_up(void **state) {
    (void)state;
    lose_and_return(101, 1); /* new incarnation: the checkpoint is given up, not re-sent */
}

/* A sync checkpoint asked without waiting: the ps parks it until it reaches the step while
 * the same link goes on pushing (the chief's own gradients may be what gets it there), and
 * writes it at exactly that version; a step already passed is refused; a checkpoint asked
 * and waited for gives up the one in flight. */
static void test_checkpoint_without_waiting(void **state) {
    (void)state;
    const char *json = "{\"name\": \"ahead\", \"replicas\": {\"ps\": 1, \"worker\": 1},"
                       " \"model\": {\"type\": \"softmax\", \"inputs\": 4, \"outputs\": 3},"
                       " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
                       " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
                       " \"training\": {\"mode\": \"sync\", \"max_steps\": 1000}}";
    pf_job_spec sync;
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), &sync, &err), PF_OK);
    ps_server_options o = {&sync, 0, "127.0.0.1", 0, dir, 1, 0, NULL, {0}, 0};
    ps_server *ps;
    assert_int_equal(ps_server_start(&o, &ps, &err), PF_OK);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ps_server_port(ps));
    const char *addrs[] = {addr};
    worker_link_options co = {&sync, addrs, 0, PF_WIRE_ROLE_CHIEF, 7, 20, NULL, NULL,
                              NULL,  NULL,  0};
    worker_link *c;
    assert_int_equal(worker_link_create(&co, &c, &err), PF_OK);
    alarm(30);
    size_t n = pf_model_num_params(&sync.model);
    float *params = calloc(n, sizeof(float)), *grads = calloc(n, sizeof(float));
    pf_status st = PF_OK;
    assert_int_equal(worker_link_checkpoint_poll(c, 0, &st, &err), -1); /* none asked */
    assert_int_equal(worker_link_checkpoint_send(c, 3, &err), PF_OK);
    assert_int_equal(worker_link_checkpoint_poll(c, 0.2, &st, &err), 0); /* ps at version 0 */
    char path[256];
    snprintf(path, sizeof path, "%s/ahead/step-3/ps-0.safetensors", dir);
    for (uint64_t step = 0; step < 5; step++) { /* version 3 comes from this link's pushes */
        for (size_t i = 0; i < n; i++)
            grads[i] = 0.01f * (float)(i % 5) + 0.1f * (float)step;
        uint64_t v = 0;
        uint32_t result = 99;
        assert_int_equal(worker_link_push_pull(c, grads, &step, NULL, params, &v, &result, &err),
                         PF_OK);
        assert_int_equal(result, PF_WIRE_PUSH_APPLIED);
        assert_int_equal(v, step + 1);
        if (step + 1 < 3)
            assert_int_equal(access(path, F_OK), -1);
    }
    assert_int_equal(worker_link_checkpoint_poll(c, 10, &st, &err), 1);
    assert_int_equal(st, PF_OK);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(worker_link_checkpoint_poll(c, 0, &st, &err), -1); /* taken up once */
    /* the ps is at version 5: step 4 is refused, never labelled with version-5 values */
    assert_int_equal(worker_link_checkpoint_send(c, 4, &err), PF_OK);
    assert_int_equal(worker_link_checkpoint_poll(c, 10, &st, &err), 1);
    assert_int_equal(st, PF_ERR_RANGE);
    assert_non_null(strstr(err.message, "past step 4"));
    /* one parked at 9, then a checkpoint at 5 asked and waited for: written, and the one in
     * flight given up (its late refusal is not taken for anything) */
    assert_int_equal(worker_link_checkpoint_send(c, 7, &err), PF_OK);
    worker_link_checkpoint_give_up(c); /* the chief's bound on an unanswered one */
    assert_int_equal(worker_link_checkpoint_poll(c, 0.2, &st, &err), -1);
    assert_int_equal(worker_link_checkpoint_send(c, 9, &err), PF_OK);
    assert_int_equal(worker_link_checkpoint(c, 5, 0, &err), PF_OK);
    assert_int_equal(worker_link_checkpoint_poll(c, 0.2, &st, &err), -1);
    uint64_t v = 0;
    assert_int_equal(worker_link_pull(c, NULL, params, &v, &err), PF_OK);
    assert_int_equal(v, 5);
    alarm(0);
    worker_link_destroy(c);
    ps_server_destroy(ps);
    pf_job_spec_deinit(&sync);
    free(params);
    free(grads);
}

typedef struct ps_swap {
    const pf_job_spec *spec;
    int ps_task, port;
    ps_server *old, *server;
} ps_swap;

/* Stops a ps after a moment and starts it again on its port under a new incarnation, from
 * its initial values (there is no checkpoint): a ps restarted by kill -9. */
static void *restart_later(void *arg) {
    ps_swap *r = arg;
    pf_clock_sleep(0.3); /* the link is waiting on the other ps meanwhile */
    ps_server_destroy(r->old);
    ps_server_options o = {r->spec, r->ps_task, "127.0.0.1", r->port, dir, 2, 0, NULL, {0}, 0};
    pf_error err;
    for (int i = 0; i < 50; i++) {
        if (ps_server_start(&o, &r->server, &err) == PF_OK)
            return NULL;
        pf_clock_sleep(0.3);
    }
    return NULL;
}

/* A sync step of 2 ps and 2 workers in which ps 1 restarts while ps 0 holds the chief's push
 * (it waits for the other worker's gradient, which waits for the chief's rollback): the
 * chief sees the restart at once instead of waiting on ps 0 until the stall timeout, gives
 * the step's pushes up (each ps pulled instead, reported stale; ps 0 applied nothing) and
 * reports the restart for the rollback. Over the socket and through the segment. */
static void test_restart_seen_while_parked(void **state) {
    (void)state;
    const char *json = "{\"name\": \"parked\", \"replicas\": {\"ps\": 2, \"worker\": 2},"
                       " \"model\": {\"type\": \"softmax\", \"inputs\": 4, \"outputs\": 3},"
                       " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
                       " \"placement\": {\"partitioner\": {\"type\": \"fixed_shards\","
                       " \"num_shards\": 2}},"
                       " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
                       " \"training\": {\"mode\": \"sync\", \"max_steps\": 1000}}";
    pf_job_spec sync;
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), &sync, &err), PF_OK);
    size_t n = pf_model_num_params(&sync.model);
    float *params = calloc(n, sizeof(float)), *grads = calloc(n, sizeof(float));
    for (int segment = 0; segment <= 1; segment++) {
        ps_server *ps[2];
        for (int p = 0; p < 2; p++) {
            ps_server_options o = {&sync, p, "127.0.0.1", 0, dir, 1, 0, NULL, {0}, 0};
            assert_int_equal(ps_server_start(&o, &ps[p], &err), PF_OK);
        }
        char addr[2][64];
        for (int p = 0; p < 2; p++)
            snprintf(addr[p], sizeof addr[p], "127.0.0.1:%d", ps_server_port(ps[p]));
        const char *addrs[] = {addr[0], addr[1]};
        worker_link_options co = {&sync, addrs, 0,      PF_WIRE_ROLE_CHIEF, 7, 20, NULL, NULL,
                                  NULL,  NULL,  segment};
        worker_link *c;
        assert_int_equal(worker_link_create(&co, &c, &err), PF_OK);
        ps_swap r = {&sync, 1, ps_server_port(ps[1]), ps[1], NULL};
        pthread_t th;
        pthread_create(&th, NULL, restart_later, &r);
        alarm(30);
        for (size_t i = 0; i < n; i++)
            grads[i] = 0.5f;
        uint64_t step[2] = {0, 0}, next[2] = {1, 1}, v[2] = {9, 9};
        uint32_t result[2] = {99, 99};
        assert_int_equal(worker_link_push_pull(c, grads, step, next, params, v, result, &err),
                         PF_OK);
        alarm(0);
        pthread_join(th, NULL);
        assert_non_null(r.server);
        assert_int_equal(result[0], PF_WIRE_PUSH_STALE);
        assert_int_equal(result[1], PF_WIRE_PUSH_STALE);
        assert_int_equal(v[0], 0);
        assert_int_equal(v[1], 0);
        int which = -1;
        uint64_t restored = 99;
        assert_int_equal(worker_link_take_restart(c, &which, &restored), 1);
        assert_int_equal(which, 1);
        assert_int_equal(restored, 0);
        uint64_t version, applied, stale;
        ps_server_stats(ps[0], &version, &applied, &stale);
        assert_int_equal(version, 0);
        worker_link_destroy(c);
        ps_server_destroy(ps[0]);
        ps_server_destroy(r.server);
    }
    pf_job_spec_deinit(&sync);
    free(params);
    free(grads);
}

/* A ps serving the same job name with another placement (a spec with more shards): the
 * link refuses it at HELLO_ACK instead of exchanging tensors it would misread. */
static void test_other_placement_refused(void **state) {
    (void)state;
    const char *json = "{\"name\": \"client\", \"replicas\": {\"ps\": 1, \"worker\": 1},"
                       " \"model\": {\"type\": \"softmax\", \"inputs\": 4, \"outputs\": 3},"
                       " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
                       " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
                       " \"placement\": {\"partitioner\": {\"type\": \"fixed_shards\","
                       " \"num_shards\": 3}},"
                       " \"training\": {\"mode\": \"async\", \"max_steps\": 1000}}";
    pf_job_spec other;
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), &other, &err), PF_OK);
    ps_server_options o = {&other, 0, "127.0.0.1", 0, dir, 100, 0, NULL, {0}, 0};
    ps_server *s;
    assert_int_equal(ps_server_start(&o, &s, &err), PF_OK);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ps_server_port(s));
    const char *addrs[] = {addr};
    worker_link_options co = {&spec, addrs, 0, PF_WIRE_ROLE_CHIEF, 7, 5, NULL, NULL, NULL, NULL, 0};
    worker_link *c = NULL;
    assert_int_equal(worker_link_create(&co, &c, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "same job spec"));
    ps_server_destroy(s);
    pf_job_spec_deinit(&other);
}

/* Pushes k's gradient (a function of the element and k) and pulls, through whatever path the
 * link takes; the values land in params. */
static void push_pull_k(worker_link *c, float *grads, float *params, size_t n, int k) {
    for (size_t i = 0; i < n; i++)
        grads[i] = (float)((int)(i % 7) - 3) * 0.125f + (float)k * 0.01f;
    uint64_t step = 0, v = 0;
    uint32_t result = 99;
    pf_error err;
    assert_int_equal(worker_link_push_pull(c, grads, &step, NULL, params, &v, &result, &err),
                     PF_OK);
    assert_int_equal(result, PF_WIRE_PUSH_APPLIED);
    assert_int_equal(v, (uint64_t)k);
}

/* A link with a segment to a ps on this host trains exactly as one over the socket: two ps
 * from the same spec, one reached each way, hold the same bits after the same pushes. */
static void test_segment_same_as_socket(void **state) {
    (void)state;
    ps_server_options o = {&spec, 0, "127.0.0.1", 0, dir, 1, 0, NULL, {0}, 0};
    ps_server *a, *b;
    pf_error err;
    assert_int_equal(ps_server_start(&o, &a, &err), PF_OK);
    assert_int_equal(ps_server_start(&o, &b, &err), PF_OK);
    alarm(30);
    worker_link *shm = connect_link_with(ps_server_port(a), 1);
    worker_link *tcp = connect_link_with(ps_server_port(b), 0);
    size_t n = pf_model_num_params(&spec.model);
    float *sg, *sp = worker_link_segment(shm, &sg), *tg;
    assert_non_null(sp);
    assert_non_null(sg);
    assert_int_equal(worker_link_shared(shm), 1);
    assert_null(worker_link_segment(tcp, &tg));
    assert_int_equal(worker_link_shared(tcp), 0);
    float *tp = calloc(n, sizeof(float));
    tg = calloc(n, sizeof(float));
    uint64_t v;
    for (size_t i = 0; i < n; i++)
        sp[i] = -1;
    assert_int_equal(worker_link_pull(shm, NULL, sp, &v, &err), PF_OK);
    assert_int_equal(worker_link_pull(tcp, NULL, tp, &v, &err), PF_OK);
    assert_memory_equal(sp, tp, n * sizeof(float));
    for (int k = 1; k <= 5; k++) {
        push_pull_k(shm, sg, sp, n, k);
        push_pull_k(tcp, tg, tp, n, k);
        assert_memory_equal(sp, tp, n * sizeof(float));
    }
    /* the values moved: the pushes were applied, not just echoed */
    assert_true(sp[0] != 0 || sp[1] != 0);
    /* a vector outside the segment goes over the socket on the same link */
    float *outside = calloc(n, sizeof(float));
    assert_int_equal(worker_link_pull(shm, NULL, outside, &v, &err), PF_OK);
    assert_memory_equal(outside, tp, n * sizeof(float));
    alarm(0);
    worker_link_destroy(shm);
    worker_link_destroy(tcp);
    ps_server_destroy(a);
    ps_server_destroy(b);
    free(tp);
    free(tg);
    free(outside);
}

/* A ps that comes back refusing the segment (PSFLOW_SHM=off there): the push in flight is
 * sent again over the socket, under its own sequence number, and completes. */
/* Plans batch x of `n` examples, one id each (ids[i]). */
static void plan_ids(const pf_job_spec *s, worker_rows *r, const pf_placement *pl, const int *ids,
                     int n, worker_row_plan *p) {
    const pf_model_spec *m = &s->model;
    int width = pf_model_input_width(m), col = pf_model_id_col(m, 0);
    float x[8 * 8];
    assert_true(n <= 8 && width <= 8);
    for (int i = 0; i < n; i++) {
        pf_model_pad_example(m, x + i * width);
        x[i * width + col] = (float)ids[i];
        x[i * width + col + m->embeddings[0].max_ids] = 1.f;
    }
    assert_int_equal(worker_row_plan_init(p, r, pl), PF_OK);
    worker_rows_plan(r, pl, x, n, p);
}

static void test_fused_row_step(void **state) {
    (void)state;
    const char *json =
        "{\"name\": \"rows\", \"replicas\": {\"ps\": 2, \"worker\": 1},"
        " \"model\": {\"type\": \"softmax\", \"outputs\": 2, \"embeddings\":"
        " [{\"name\": \"ids\", \"vocab\": 40, \"dim\": 3}]},"
        " \"data\": {\"format\": \"synthetic_ctr\"},"
        " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.5},"
        " \"placement\": {\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 2}},"
        " \"training\": {\"mode\": \"async\", \"max_steps\": 1000}}";
    pf_job_spec rs;
    pf_placement pl;
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), &rs, &err), PF_OK);
    assert_int_equal(pf_placement_compute(&rs, &pl), PF_OK);
    ps_server *ps[2];
    char addr[2][64];
    const char *addrs[2] = {addr[0], addr[1]};
    for (int p = 0; p < 2; p++) {
        ps_server_options o = {&rs, p, "127.0.0.1", 0, dir, 1, 0, NULL, {0}, 0};
        assert_int_equal(ps_server_start(&o, &ps[p], &err), PF_OK);
        snprintf(addr[p], sizeof addr[p], "127.0.0.1:%d", ps_server_port(ps[p]));
    }
    worker_rows r;
    assert_int_equal(worker_rows_init(&r, &rs.model, 8), PF_OK);
    worker_link_options co = {.spec = &rs,
                              .ps_addrs = addrs,
                              .task = 0,
                              .role = PF_WIRE_ROLE_CHIEF,
                              .incarnation = 7,
                              .retry_seconds = 20,
                              .rows = &r};
    worker_link *c;
    assert_int_equal(worker_link_create(&co, &c, &err), PF_OK);
    /* ids on both halves of the table (rows 0-19 on one shard, 20-39 on the other), and
     * shared between the batches */
    const int ids0[] = {1, 5, 22, 37}, ids1[] = {5, 9, 22, 30, 39};
    worker_row_plan p0, p1;
    plan_ids(&rs, &r, &pl, ids0, 4, &p0);
    plan_ids(&rs, &r, &pl, ids1, 5, &p1);
    size_t n = r.n_params;
    float *params = calloc(n, sizeof(float)), *grads = calloc(n, sizeof(float));
    float *before = calloc(n, sizeof(float)), *fused = calloc(n, sizeof(float));
    assert_non_null(params && grads && before && fused);
    for (size_t i = 0; i < n; i++)
        grads[i] = (float)((int)(i % 5) - 2) * 0.25f;
    uint64_t v[2], step[2] = {0, 0};
    uint32_t results[2];
    alarm(30);
    worker_link_set_plan(c, &p0);
    assert_int_equal(worker_link_pull(c, NULL, params, v, &err), PF_OK);
    memcpy(before, params, n * sizeof(float));
    assert_int_equal(
        worker_link_push_pull_rows(c, grads, step, &p1, NULL, params, v, results, &err), PF_OK);
    assert_int_equal(results[0], PF_WIRE_PUSH_APPLIED);
    assert_int_equal(results[1], PF_WIRE_PUSH_APPLIED);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], 1);
    memcpy(fused, params, n * sizeof(float));
    memset(params, 0, n * sizeof(float));
    worker_link_set_plan(c, &p1); /* what the fused step left set */
    assert_int_equal(worker_link_pull(c, NULL, params, v, &err), PF_OK);
    assert_memory_equal(fused, params, n * sizeof(float)); /* rows and dense values alike */
    worker_link_set_plan(c, &p0);
    assert_int_equal(worker_link_pull(c, NULL, params, v, &err), PF_OK);
    /* sgd: every value the push named (p0's 4 rows, the dense variables) moved by -0.5 x
     * its gradient; the compact rows p0 leaves unused were not pushed */
    size_t dim = 3, at0 = r.table_off[0], k5_in0 = 1, k5_in1 = 0;
    for (size_t i = 0; i < n; i++) {
        int unused = i >= at0 + 4 * dim && i < at0 + r.cap[0] * dim;
        assert_true(unused || params[i] == before[i] - 0.5f * grads[i]);
    }
    /* the shared ids' rows in the fused pull include the push */
    for (size_t k = 0; k < dim; k++)
        assert_true(fused[at0 + k5_in1 * dim + k] == params[at0 + k5_in0 * dim + k]);
    alarm(0);
    worker_link_destroy(c);
    for (int p = 0; p < 2; p++) {
        ps_server_stop(ps[p]);
        ps_server_destroy(ps[p]);
    }
    worker_row_plan_deinit(&p0);
    worker_row_plan_deinit(&p1);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&rs);
    free(params), free(grads), free(before), free(fused);
}

static void test_segment_refused_after_reconnect(void **state) {
    (void)state;
    ps_server_options o = {&spec, 0, "127.0.0.1", 0, dir, 200, 0, NULL, {0}, 0};
    ps_server *first;
    pf_error err;
    assert_int_equal(ps_server_start(&o, &first, &err), PF_OK);
    restart r = {ps_server_port(first), 200, NULL};
    worker_link *c = connect_link_with(r.port, 1);
    assert_int_equal(worker_link_shared(c), 1);
    size_t n = pf_model_num_params(&spec.model);
    float *g, *p = worker_link_segment(c, &g);
    uint64_t v;
    assert_int_equal(worker_link_pull(c, NULL, p, &v, &err), PF_OK);
    ps_server_destroy(first);
    setenv("PSFLOW_SHM", "off", 1); /* read by the ps at each SEG_ATTACH */
    pthread_t th;
    pthread_create(&th, NULL, start_later, &r);
    alarm(30);
    push_pull_k(c, g, p, n, 1);
    alarm(0);
    pthread_join(th, NULL);
    unsetenv("PSFLOW_SHM");
    assert_int_equal(worker_link_shared(c), 0);
    worker_link_destroy(c);
    ps_server_destroy(r.server);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_row_step),
        cmocka_unit_test(test_segment_same_as_socket),
        cmocka_unit_test(test_segment_refused_after_reconnect),
        cmocka_unit_test(test_same_ps_returns),
        cmocka_unit_test(test_restarted_ps_checkpoint_given_up),
        cmocka_unit_test(test_other_placement_refused),
        cmocka_unit_test(test_checkpoint_without_waiting),
        cmocka_unit_test(test_restart_seen_while_parked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
