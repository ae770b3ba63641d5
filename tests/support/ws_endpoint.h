/* ws_endpoint.h - the endpoint the transport's unit tests (tests/dataplane/test_ws*.c) run on
 * both sides of a connection: handlers that count, keep the last message, echo it back in
 * the ways a test asks for, and digest what arrives; and the waits and checks around them.
 */
#ifndef PSFLOW_TESTS_WS_ENDPOINT_H
#define PSFLOW_TESTS_WS_ENDPOINT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/ws.h"

typedef struct endpoint {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int opened, closed, messages;
    uint64_t last_conn;
    uint8_t *last;
    size_t last_len;
    int echo;        /* server: send every message back */
    int echo_parts;  /* ... with pf_ws_sendv, in uneven parts read from the message */
    int echo_lent;   /* ... with pf_ws_sendv_lent from a copy kept in lent[] (its
                        first 100 bytes copied, the rest lent); after odd-numbered
                        messages pf_ws_settle, then the copy is scribbled over */
    int lent_tagged; /* ... with pf_ws_sendv_lent_tagged and fnv_tagger */
    uint8_t *lent[16];
    struct endpoint *hold_for; /* client: on the first message, wait (up to 5 s) until this
                                  peer has received hold_count messages */
    int hold_count;
    int stranger;    /* server: never pf_ws_trust its connections */
    int fail_settle; /* server: a 1-byte message is not echoed but makes pf_ws_settle run
                        out of memory (its result in settle_status) */
    pf_status settle_status;
    uint64_t digest[64]; /* FNV-1a of each of the first 64 messages, in arrival order */
    int placed[64];      /* whether pf_ws_message_places() gave places for each of them */
    int echo_tagged;     /* server: echo all but the last 8 bytes with pf_ws_sendv_tagged and
                            fnv_tagger (the same message back when they are its tag) */
    /* ws_ep_on_bytes (service thread): the FNV-1a of the message being received, as it comes */
    uint64_t stream_h;
    size_t stream_next;    /* the position the next piece must start at */
    int stream_bad;        /* a piece out of order */
    uint64_t streamed[64]; /* stream_h of each of the first 64 messages when delivered */
} endpoint;

#define FNV_BASIS 1469598103934665603ull

/* Handlers over an endpoint (their user pointer). */
extern const pf_ws_handlers ws_endpoint_handlers;

/* FNV-1a of p[n] (continuing from h). */
uint64_t ws_ep_fnv1a_more(uint64_t h, const uint8_t *p, size_t n);
uint64_t ws_ep_fnv1a(const uint8_t *p, size_t n);
/* A tagger for pf_ws_sendv_tagged (ctx: a uint64_t from FNV_BASIS): the FNV-1a of the bytes
 * before it, 8 bytes little-endian. */
void ws_ep_fnv_update(void *ctx, const void *data, size_t n);
void ws_ep_fnv_final(void *ctx, uint8_t *tag);
/* A byte handler for pf_ws_set_on_bytes (user: the endpoint): digests each piece, and marks
 * the endpoint's stream_bad when one does not continue where the last ended. */
void ws_ep_on_bytes(pf_ws *ws, uint64_t conn, void *cu, size_t pos, const uint8_t *data, size_t n,
                    void *user);
void ws_ep_init(endpoint *e);
void ws_ep_deinit(endpoint *e);
/* Waits up to 10 s for *counter >= want; 1 when it got there. */
int ws_ep_wait_for(endpoint *e, int *counter, int want);
/* Sends len bytes whose byte i is i * 31 + seed with pf_ws_sendv from a buffer scribbled
 * over and freed as soon as the call returns; *digest (may be NULL) gets their FNV-1a. */
pf_status ws_ep_send_message(pf_ws *ws, uint64_t conn, size_t len, unsigned seed, uint64_t *digest);
/* The endpoint's last message is ws_ep_send_message's of len and seed. */
void ws_ep_check_payload(const endpoint *e, size_t len, unsigned seed);
/* An echoing server (s) and a client (c) connected to it on 127.0.0.1, and their end. */
void ws_ep_echo_pair(endpoint *s, endpoint *c, pf_ws **srv, pf_ws **cli, uint64_t *conn);
void ws_ep_destroy_pair(endpoint *s, endpoint *c, pf_ws *srv, pf_ws *cli);
/* Waits for n echoes; each message reached the server and came back unchanged, in order. */
void ws_ep_check_echoes(endpoint *s, endpoint *c, const uint64_t *want, const size_t *sizes, int n);

#endif
