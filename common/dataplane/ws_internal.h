/* ws_internal.h - the connection table of a pf_ws (ws.h) and the functions its files share,
 * private to common/dataplane/. The files are layered, each calling only those below it:
 * ws.c (connections, receiving, the loop) -> ws_admit.c (a server's admission classes) and
 * ws.c -> ws_send.c (send buffers and writing) -> ws_tls.c (client TLS), all -> ws_log.c
 * (the refusal log). ws.c's DESIGN comment describes how
 * they work together.
 */
#ifndef PSFLOW_DATAPLANE_WS_INTERNAL_H
#define PSFLOW_DATAPLANE_WS_INTERNAL_H

#include <libwebsockets.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "psflow/buf.h"
#include "psflow/rng.h"
#include "psflow/ws.h"
#include "ws_handshake.h"

#define HEADROOM 16          /* frame header space in front of a message: at most 14 bytes */
#define MAX_HTTP 8192        /* handshake request or response */
#define RX_CHUNK (64u << 10) /* bytes libwebsockets reads per readable event */

/* dst = src XOR mask, continuing at mask position `phase`, 8 bytes at a time; dst may be
 * src (mask in place) or another buffer (copy and unmask in one pass). */
void ws_copy_unmask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t mask[4],
                    size_t phase);

static inline void ws_apply_mask(uint8_t *p, size_t n, const uint8_t mask[4], size_t phase) {
    ws_copy_unmask(p, p, n, mask, phase);
}

/* --- connections ---------------------------------------------------------------------------- */

/* A send buffer: this header, HEADROOM bytes, then `cap` message bytes. While queued,
 * `next` chains it on its connection; while free, on the pool. `raw` messages (handshake
 * text, control frames) go out as they are. */
typedef struct out_msg {
    struct out_msg *next;
    size_t cap;
    size_t len;  /* message bytes */
    size_t wire; /* bytes to write from start: frame header + message */
    uint8_t *start;
    int raw;
    int framed; /* header written (and payload masked) */
    /* A lent message (pf_ws_sendv_lent, server only): the payload is lent[0 .. n_lent),
     * pieces of the caller's memory or copies in this buffer; the buffer holds only the
     * frame header and those copies. lent_i / lent_off: the next payload byte to write. */
    struct iovec *lent;
    int n_lent, lent_i;
    size_t lent_off;
} out_msg;

#define POOL_KEEP 16

static inline uint8_t *msg_bytes(out_msg *m) {
    return (uint8_t *)(m + 1) + HEADROOM;
}

static inline out_msg *msg_of(uint8_t *bytes) {
    return (out_msg *)(bytes - HEADROOM) - 1;
}

enum { ST_HTTP, ST_HEADER, ST_PAYLOAD, ST_REFUSED /* answered 400: input is dropped */ };

/* A server connection's admission class (ws_admit.c); loop thread only. */
enum {
    CLS_NONE,      /* a client connection, or a server one that was closed or dropped */
    CLS_UNTRUSTED, /* counted in n_untrusted (and untrusted_buffered) */
    CLS_TRUSTED,   /* counted in n_trusted (and buffered) */
};

typedef struct conn {
    struct conn *next;
    uint64_t id;
    struct lws *wsi;
    void *user;
    int server;
    int open;          /* handshake complete */
    int finished;      /* on_close delivered */
    double accepted;   /* server: pf_clock_now() at accept */
    int cls;           /* server: CLS_*, loop thread */
    int delivered;     /* server: a message has been delivered (how far it got), loop thread */
    double progressed; /* server: pf_clock_now() when it last got further (ws_admit_progress) */
    int dropped;       /* server: made room for another (ws_admit.c): closed at its next event */
    uint8_t addr[16];  /* server: the remote address's bytes (addr_len of them: 4 for IPv4) */
    int addr_len;
    size_t charged; /* server: bytes of the incomplete message counted in ws->buffered (trusted)
                       or ws->untrusted_buffered */
    /* requests from other threads, under ws->lock */
    int want_connect;
    int want_close;
    int want_trust;   /* pf_ws_trust from another thread: the loop promotes it */
    int fd;           /* the socket once the handshake is done, else -1 */
    int direct;       /* a sender is writing a message straight to fd */
    int lws_buffered; /* libwebsockets holds unsent bytes of ours */
    pf_rng rng;       /* handshake and mask keys; used by whoever frames for c */
    char host[256];
    int port;
    out_msg *head, *tail;
    /* loop thread only */
    size_t tx_off;
    char key[WS_KEY_SIZE]; /* client: the Sec-WebSocket-Key sent */
    char http[MAX_HTTP];
    size_t http_len;
    int state;
    uint8_t hdr[14];
    size_t hdr_len;
    uint64_t frame_left; /* payload bytes of the current frame still to come */
    size_t frame_done;   /* payload bytes of the current frame seen (mask phase) */
    int frame_opcode;
    int frame_fin;
    int frame_masked;
    uint8_t frame_mask[4];
    int in_message; /* a fragmented message is being assembled */
    uint8_t control[125];
    pf_buf rx; /* the message being received; len counts placed bytes too */
    /* pf_ws_expect: where the next data message goes; under ws->lock */
    size_t expect_len; /* 0: no expectation */
    pf_ws_place *expect;
    int expect_n, expect_cap;
    pf_ws_bytes_fn on_bytes;  /* pf_ws_set_on_bytes; under ws->lock */
    pf_ws_bytes_fn bytes_now; /* loop thread: the byte handler of the message being received */
    /* loop thread: the places of the message being received, when `placing` */
    pf_ws_place *place;
    int place_n, place_cap, place_i;
    int placing;
    /* client TLS (ws_tls.c), loop thread */
    SSL *ssl;       /* NULL: plain TCP */
    pf_buf tls_out; /* ciphertext to write, behind LWS_PRE bytes */
    int tls_ready;  /* handshake done */
} conn;

/* Causes of a refusal, each logged on its own rate limit. */
enum {
    REF_CONNECTIONS,
    REF_HANDSHAKE_TIMEOUT,
    REF_IDLE_TIMEOUT,
    REF_GARBAGE,
    REF_UNTRUSTED_SIZE,
    REF_BUFFERED,
    REF_TLS,
    REF_DROPPED, /* an untrusted connection made room for a new one */
    REF_COUNT
};

struct pf_ws {
    struct lws_context *ctx;
    struct lws_protocols protocols[2];
    pthread_t thread;
    int thread_started;
    int stop; /* atomic */
    int wake; /* atomic: pf_ws_wake asked for on_wake */
    pthread_mutex_t lock;
    conn *conns;
    uint64_t next_id;
    size_t max_message;
    out_msg *pool;
    int pool_n;
    pthread_cond_t direct_done; /* a direct send ended */
    pf_rng rng;                 /* seeds each connection's rng; under lock */
    const pf_ws_place *placed;  /* the places of the message being delivered, or NULL */
    int placed_n;
    pf_ws_handlers h;
    void *user;
    int port;
    pf_ws_options o; /* defaults filled in; the strings are the caller's */
    int tls;
    /* server, loop thread only */
    int n_trusted;             /* CLS_TRUSTED connections */
    int n_untrusted;           /* CLS_UNTRUSTED connections */
    size_t buffered;           /* sum of the trusted connections' `charged` */
    size_t untrusted_buffered; /* sum of the untrusted connections' `charged` */
    struct refusal {
        double last;         /* when it was last logged; 0: never */
        unsigned long since; /* refusals since then not logged */
    } refusals[REF_COUNT];
    SSL_CTX *ssl_ctx; /* client TLS (o.ca_file), else NULL */
    uint8_t *tls_rx;  /* RX_CHUNK bytes: plaintext as it is decrypted */
};

#define REFUSAL_LOG_EVERY 10.0 /* seconds between two log lines of one cause */

static inline conn *find_locked(pf_ws *ws, uint64_t id) {
    for (conn *c = ws->conns; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* --- ws_admit.c ---------------------------------------------------------------------------- */

/* The admission of server connections in two classes (ws_admit.c's DESIGN). Loop thread. */

/* The remote address of wsi's socket into addr; returns its length (4 or 16), 0 unknown. */
int ws_admit_peer_address(struct lws *wsi, uint8_t addr[16]);
/* Before a connection from addr is accepted: makes room for it among the untrusted (drops
 * one, logged, when its address's or all slots are taken). Returns -1 (logged) to refuse
 * it: every trusted slot is taken. */
int ws_admit_room(pf_ws *ws, const uint8_t *addr, int addr_len);
/* The accepted connection c takes an untrusted slot. */
void ws_admit_enter(pf_ws *ws, conn *c, const uint8_t *addr, int addr_len);
/* pf_ws_trust: c moves to a trusted slot, or is dropped (logged) when there is none. */
void ws_admit_promote(pf_ws *ws, conn *c);
/* c is closing: out of its class's counts and budget. */
void ws_admit_leave(pf_ws *ws, conn *c);
/* A data frame of len bytes begins or continues c's message: charged to c's class's budget
 * (an untrusted connection's message also against untrusted_max_message). Returns -1
 * (logged) to refuse it. */
int ws_admit_charge(pf_ws *ws, conn *c, uint64_t len);
/* c's message was delivered: its bytes leave the budget. */
void ws_admit_discharge(pf_ws *ws, conn *c);
/* c got a step further (accepted, handshake bytes, upgraded, a first message delivered). */
void ws_admit_progress(conn *c);
/* How far c got: 0 nothing received, 1 handshake bytes, 2 upgraded, 3 a message delivered. */
int ws_admit_stage(const conn *c);
/* The untrusted slots one address may take (max_untrusted_per_address, or its default). */
int ws_admit_per_address(const pf_ws *ws);
/* Of the untrusted connections in list (linked by next): the one to drop for a newcomer from
 * addr, or NULL when there is room. Of its address's, when that address has per_address of
 * them, else (when there are max_untrusted) of all: the one that got further longest ago
 * (`progressed`). Pure: reads the connections' fields only. */
conn *ws_admit_victim(conn *list, const uint8_t *addr, int addr_len, int max_untrusted,
                      int per_address);

/* --- ws_send.c ------------------------------------------------------------------------- */

/* A send buffer for a message of up to len bytes, from the pool when one is large enough;
 * NULL when memory is short. Any thread. */
uint8_t *ws_take_buffer(pf_ws *ws, size_t len);

/* Gives a send buffer back to the pool (or frees it). Any thread. */
void ws_release(pf_ws *ws, out_msg *m);

/* A raw message (handshake text or a control frame) queued from the loop thread. */
int ws_queue_raw(pf_ws *ws, conn *c, const void *bytes, size_t len);

/* LWS_CALLBACK_RAW_WRITEABLE: writes the next piece of c's queue. Returns -1 to close. */
int ws_on_writeable(pf_ws *ws, struct lws *wsi, conn *c);

/* --- ws_tls.c ---------------------------------------------------------------------------- */

/* A client's TLS context verifying servers against ca_file. Errors: PF_ERR_IO. */
pf_status ws_tls_client_init(pf_ws *ws, const char *ca_file, pf_error *err);
void ws_tls_client_deinit(pf_ws *ws);
/* TCP is up: starts the TLS handshake (the upgrade follows once it is done). */
int ws_tls_start(pf_ws *ws, conn *c);
/* Ciphertext read from c's socket, handed to OpenSSL; advances the TLS handshake while it
 * is not done (c->tls_ready once it is). Returns -1 to close (a failure is logged), else 0. */
int ws_tls_rx(pf_ws *ws, conn *c, const uint8_t *in, size_t len);
/* Once c->tls_ready: decrypts what has been received into buf (up to cap bytes). Returns the
 * plaintext's length, 0 when there is none for now, -1 to close (the peer's close_notify, or
 * an error, logged). */
int ws_tls_read(pf_ws *ws, conn *c, uint8_t *buf, int cap);
/* Encrypts n bytes into c->tls_out. Returns -1 on failure. */
int ws_tls_write(conn *c, const uint8_t *p, size_t n);
/* Writes c->tls_out to the socket (libwebsockets buffers what it does not take). */
int ws_tls_flush(struct lws *wsi, conn *c);
void ws_tls_conn_free(conn *c);

/* --- ws_log.c --------------------------------------------------------------------------- */

/* Logs a refusal: the first of its cause at once, then at most one line every
 * REFUSAL_LOG_EVERY seconds saying how many more there were. Loop thread. */
void ws_refused(pf_ws *ws, int cause, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
