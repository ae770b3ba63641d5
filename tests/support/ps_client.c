/* ps_client.c - a WebSocket client of a real ps for the tests (see ps_client.h). */
#include "tests/support/ps_client.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <cmocka.h>

#include "psflow/buf.h"
#include "psflow/clock.h"

static void c_open(pf_ws *ws, uint64_t conn, void *cu, void *user) {
    (void)ws, (void)conn, (void)cu;
    ps_client *c = user;
    pthread_mutex_lock(&c->mu);
    c->open = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void c_message(pf_ws *ws, uint64_t conn, void *cu, const uint8_t *d, size_t n, void *user) {
    (void)ws, (void)conn, (void)cu;
    ps_client *c = user;
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
    (void)ws, (void)conn, (void)cu;
    ps_client *c = user;
    pthread_mutex_lock(&c->mu);
    c->closed = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void ps_client_open(ps_client *c, int port) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pf_wire_out_init(&c->out);
    pf_wire_in_init(&c->in, 0, 0);
    pf_ws_handlers h = {c_open, c_message, c_close, NULL};
    pf_error err;
    assert_int_equal(pf_ws_client_create(1u << 20, &h, c, &c->ws, &err), PF_OK);
    assert_int_equal(pf_ws_connect(c->ws, "127.0.0.1", port, NULL, &c->conn), PF_OK);
    struct timespec deadline = pf_clock_deadline(10);
    pthread_mutex_lock(&c->mu);
    while (!c->open && !c->closed)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &deadline) != 0)
            break;
    int open = c->open;
    pthread_mutex_unlock(&c->mu);
    assert_true(open);
}

void ps_client_close(ps_client *c) {
    pf_ws_destroy(c->ws);
    pf_wire_out_deinit(&c->out);
    pf_wire_in_deinit(&c->in);
    free(c->reply);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
}

int ps_client_send(ps_client *c, const pf_wire_out *out) {
    pthread_mutex_lock(&c->mu);
    int before = c->got;
    pthread_mutex_unlock(&c->mu);
    pf_buf whole;
    pf_buf_init(&whole, 1u << 20);
    assert_int_equal(pf_wire_out_gather(out, &whole), PF_OK);
    struct iovec v = {whole.data, whole.len};
    assert_int_equal(pf_ws_sendv(c->ws, c->conn, &v, 1), PF_OK);
    pf_buf_deinit(&whole);
    return before;
}

int ps_client_wait(ps_client *c, int before, double seconds, pf_wire_msg *m) {
    struct timespec deadline = pf_clock_deadline(seconds);
    pthread_mutex_lock(&c->mu);
    while (c->got == before && !c->closed)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &deadline) != 0)
            break;
    int got = c->got > before;
    pthread_mutex_unlock(&c->mu);
    if (!got)
        return 0;
    pf_error err;
    assert_int_equal(pf_wire_decode(&c->in, c->reply, c->reply_len, m, &err), PF_OK);
    return 1;
}

void ps_client_exchange(ps_client *c, const pf_wire_out *out, pf_wire_msg *m) {
    assert_true(ps_client_wait(c, ps_client_send(c, out), 10, m));
}

void ps_client_hello(ps_client *c, const char *job, uint8_t role, uint32_t task, uint64_t inc) {
    pf_wire_hello h = {role, task, inc, {job, (uint32_t)strlen(job)}};
    pf_error err;
    assert_int_equal(pf_wire_encode_hello(&c->out, 1, &h, &err), PF_OK);
    pf_wire_msg m;
    ps_client_exchange(c, &c->out, &m);
    assert_int_equal(m.type, PF_WIRE_HELLO_ACK);
}
