/* ps_client.h - what the ps tests share: a WebSocket client of a real ps on 127.0.0.1 that
 * sends encoded messages and waits for the replies, counting them. Failures are cmocka
 * failures. */
#ifndef PSFLOW_TESTS_PS_CLIENT_H
#define PSFLOW_TESTS_PS_CLIENT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/wire.h"
#include "psflow/ws.h"

typedef struct ps_client {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open, closed, got; /* got: replies received so far */
    uint8_t *reply;        /* the last reply, reply_len bytes */
    size_t reply_len;
    pf_ws *ws;
    uint64_t conn;
    pf_wire_out out; /* for the test's encoders */
    pf_wire_in in;   /* decodes the replies */
} ps_client;

/* Connects c to 127.0.0.1:port; asserts it opens within 10 s. */
void ps_client_open(ps_client *c, int port);
void ps_client_close(ps_client *c);

/* Sends the message `out` holds; returns the replies counted before it. */
int ps_client_send(ps_client *c, const pf_wire_out *out);

/* Waits up to `seconds` for a reply after the `before`th and decodes it into *m (views into
 * c's buffers); 0 when none came. */
int ps_client_wait(ps_client *c, int before, double seconds, pf_wire_msg *m);

/* Sends `out` and decodes its reply (10 s at most) into *m. */
void ps_client_exchange(ps_client *c, const pf_wire_out *out, pf_wire_msg *m);

/* HELLO as role/task/incarnation of job `job`, encoded in c->out; asserts HELLO_ACK. */
void ps_client_hello(ps_client *c, const char *job, uint8_t role, uint32_t task, uint64_t inc);

#endif
