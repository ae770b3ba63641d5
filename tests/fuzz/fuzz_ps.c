/* fuzz_ps.c - libFuzzer target for the ps's message handler (ps/server.c) without sockets:
 * sequences of messages on up to four connections, including the HELLO/authentication
 * state machine, through the real handler (ps_server_start_sink).
 *
 * Input: byte 0 picks the ps (bit 0: with a job key; bit 1: a model with an embedding table,
 * [8, 2] in two row shards, which takes ROW_PULL and ROW_PUSH_PULL; bit 2 with bit 1: async;
 * bit 3 without bit 1: the dense job async over streamed input with data.splits dynamic and
 * training.epochs 2, whose ps keeps the LEASE work queue; bit 3 with bit 1: the table is a
 * dynamic one, max_rows 8, pulled and pushed by 64-bit id).
 * Then records, each an op byte:
 *   op & 3         the connection (a closed one is opened again on its next use)
 *   (op >> 2) & 3  0: a message follows as u16 length (little-endian) + bytes;
 *                  1: the peer closes the connection;
 *                  2: the harness sends the right AUTH_PROOF for the connection's last
 *                     HELLO and challenge (it knows the key and the nonce the ps drew);
 *                  3: the same proof with one bit flipped.
 * SEG_ATTACH (19) always names this process: a pid of 0 becomes a real segment the harness
 * made (its pid, descriptor and token; the size as sent, so a wrong one is still refused),
 * any other pid becomes this process's with the descriptor, size and token as sent, so the
 * ps never looks at another process's descriptors and the segment paths past the attach
 * (record checks, values written into the segment) are reached.
 * With a key, once a right proof was answered with AUTH_OK the harness tags every message it
 * sends on that connection (api/wire.md "Integrity"), except an empty one, which goes as 16
 * bytes of a wrong tag; and it checks and strips the tag of every reply.
 * Oracles: every reply the ps sends decodes (after its tag verifies, where one is due); nothing but
 * AUTH_CHALLENGE or ERROR answers a connection that has not been accepted yet, and with a key no
 * HELLO_ACK comes without a right proof before it; a connection the ps closed gets nothing more;
 * and the sanitizers. Seeds: tests/data/ps/valid/ (conversations written by
 * tests/fuzz/ps_seeds.py).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/server.h"
#include <unistd.h>

#include "psflow/buf.h"
#include "psflow/segment.h"
#include "psflow/spec.h"
#include "psflow/wire.h"
#include "psflow/wire_auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { N_CONN = 4 };

typedef struct conn_state {
    uint64_t id;      /* the id given to the ps; a new one after a close */
    int open;         /* opened to the ps */
    int closed_by_ps; /* the ps closed it: nothing more may come */
    int accepted;     /* HELLO_ACK received */
    int proved;       /* a right proof was sent since the last challenge */
    uint8_t hello[PF_WIRE_HEADER_SIZE + 20 + PF_WIRE_MAX_JOB_NAME];
    size_t hello_len;
    uint8_t role;
    uint32_t task;
    uint32_t request_id;
    uint8_t nonce_ps[PF_WIRE_NONCE_SIZE];
    int challenged;
    pf_wire_mac *tx, *rx; /* the message tags once AUTH_OK came after a right proof */
} conn_state;

static struct {
    conn_state c[N_CONN];
    uint64_t next_id;
    int with_key;
    uint8_t job_key[PF_WIRE_KEY_SIZE];
    uint32_t nonce_counter;
    pf_wire_in in;
    pf_buf reply;
    pf_segment seg; /* what a SEG_ATTACH naming pid 0 attaches */
} h;

static conn_state *by_id(uint64_t id) {
    for (int i = 0; i < N_CONN; i++)
        if (h.c[i].id == id)
            return &h.c[i];
    abort(); /* the ps answered a connection it was never given */
}

static void on_send(void *user, uint64_t conn, const struct iovec *parts, int n) {
    (void)user;
    conn_state *c = by_id(conn);
    if (c->closed_by_ps)
        abort(); /* a reply after the ps closed the connection */
    pf_buf_reset(&h.reply);
    for (int i = 0; i < n; i++) {
        void *dst;
        if (pf_buf_extend(&h.reply, parts[i].iov_len, &dst) != PF_OK)
            abort();
        memcpy(dst, parts[i].iov_base, parts[i].iov_len);
    }
    size_t len = h.reply.len;
    if (c->rx) {
        if (!pf_wire_mac_check(c->rx, h.reply.data, len))
            abort(); /* the ps's tag does not verify */
        len -= PF_WIRE_TAG_SIZE;
    }
    pf_wire_msg m;
    pf_error err;
    if (pf_wire_decode(&h.in, h.reply.data, len, &m, &err) != PF_OK)
        abort(); /* the ps sent a malformed message */
    if (!c->accepted && m.type != PF_WIRE_ERROR && m.type != PF_WIRE_AUTH_CHALLENGE &&
        m.type != PF_WIRE_AUTH_OK && m.type != PF_WIRE_HELLO_ACK)
        abort(); /* served before HELLO_ACK */
    if (m.type == PF_WIRE_AUTH_CHALLENGE) {
        if (!h.with_key)
            abort();
        memcpy(c->nonce_ps, m.u.auth.nonce, PF_WIRE_NONCE_SIZE);
        c->challenged = 1;
        c->proved = 0;
    }
    if (m.type == PF_WIRE_AUTH_OK && (!h.with_key || !c->proved))
        abort();                     /* AUTH_OK without a right proof */
    if (m.type == PF_WIRE_AUTH_OK) { /* from now on every message both ways is tagged */
        uint8_t key[PF_WIRE_KEY_SIZE], nonce_task[PF_WIRE_NONCE_SIZE];
        memset(nonce_task, 0xa5, sizeof nonce_task); /* send_proof's */
        pf_wire_task_key(h.job_key, c->role, c->task, key);
        pf_wire_mac_destroy(c->tx);
        pf_wire_mac_destroy(c->rx);
        c->tx =
            pf_wire_mac_create(key, PF_WIRE_TO_PS, c->hello, c->hello_len, c->nonce_ps, nonce_task);
        c->rx = pf_wire_mac_create(key, PF_WIRE_TO_TASK, c->hello, c->hello_len, c->nonce_ps,
                                   nonce_task);
        if (!c->tx || !c->rx)
            abort();
    }
    if (m.type == PF_WIRE_HELLO_ACK) {
        if (h.with_key && !c->proved)
            abort(); /* authenticated without a right proof */
        c->accepted = 1;
    }
}

static void on_close(void *user, uint64_t conn) {
    (void)user;
    by_id(conn)->closed_by_ps = 1;
}

/* Deterministic nonces, distinct per challenge. */
static void on_nonce(void *user, uint8_t *nonce) {
    (void)user;
    memset(nonce, 0, PF_WIRE_NONCE_SIZE);
    h.nonce_counter++;
    memcpy(nonce, &h.nonce_counter, sizeof h.nonce_counter);
}

/* The fuzz jobs: a dense softmax (sync, and async with dynamic splits), and one over an
 * embedding table (sync and async). data and mode are the JSON values of data.format and
 * training.mode, and the fields after them. */
static void parse_spec(const char *model, const char *data, const char *mode, pf_job_spec *spec) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"name\": \"fuzz\", \"replicas\": {\"ps\": 1, \"worker\": 2, \"chief\": 1, "
             "\"evaluator\": 1}, \"model\": %s, \"data\": {\"format\": %s, \"train\": "
             "[\"unused\"]}, \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
             " \"placement\": {\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 2}},"
             " \"training\": {\"mode\": %s, \"max_steps\": 5}}",
             model, data, mode);
    pf_error err;
    if (pf_job_spec_parse(json, strlen(json), spec, &err) != PF_OK)
        abort();
}

static ps_server *start_ps(int with_key, int variant) {
    static pf_job_spec specs[6];
    static int parsed;
    if (!parsed) {
        const char *dense = "{\"type\": \"softmax\", \"inputs\": 4, \"outputs\": 3}";
        parse_spec(dense, "\"csv\"", "\"sync\"", &specs[0]);
        parse_spec(dense,
                   "\"csv\", \"streaming\": true, \"splits\": \"dynamic\", \"test\": [\"unused\"]",
                   "\"async\", \"epochs\": 2", &specs[3]);
        const char *table = "{\"type\": \"softmax\", \"outputs\": 3, \"embeddings\": "
                            "[{\"name\": \"ids\", \"vocab\": 8, \"dim\": 2, \"max_ids\": 2}]}";
        parse_spec(table, "\"libsvm\"", "\"sync\"", &specs[1]);
        parse_spec(table, "\"libsvm\"", "\"async\"", &specs[2]);
        const char *dynamic = "{\"type\": \"softmax\", \"outputs\": 3, \"embeddings\": "
                              "[{\"name\": \"ids\", \"kind\": \"dynamic\", \"max_rows\": 8, "
                              "\"dim\": 2, \"max_ids\": 2}]}";
        parse_spec(dynamic, "\"csv\"", "\"sync\"", &specs[4]);
        parse_spec(dynamic, "\"csv\"", "\"async\"", &specs[5]);
        pf_wire_job_key("fuzz-token", 10, "fuzz", h.job_key);
        pf_wire_in_init(&h.in, 0, 0);
        pf_buf_init(&h.reply, 1u << 20);
        pf_error err;
        /* a worker's segment for the dense job's 15 parameters: 192 bytes, the most its ps
         * takes (SEG_LIMIT in tests/fuzz/ps_seeds.py) */
        if (pf_segment_create(pf_segment_bytes(15, NULL), &h.seg, &err) != PF_OK)
            abort();
        parsed = 1;
    }
    /* Checkpoints cannot be written under a regular file: CHECKPOINT is answered with
     * an error status and nothing is left on disk between runs. */
    ps_server_options o = {&specs[variant],
                           0,
                           NULL,
                           0,
                           "/dev/null/psflow-fuzz",
                           1,
                           0,
                           with_key ? h.job_key : NULL,
                           {0},
                           0};
    ps_server_sink sink = {on_send, on_close, on_nonce, NULL, 1};
    ps_server *s;
    pf_error err;
    if (ps_server_start_sink(&o, &sink, &s, &err) != PF_OK)
        abort();
    return s;
}

static void forget_conn(conn_state *c) {
    pf_wire_mac_destroy(c->tx);
    pf_wire_mac_destroy(c->rx);
    memset(c, 0, sizeof *c);
}

static void open_conn(ps_server *s, conn_state *c) {
    if (c->open && !c->closed_by_ps)
        return;
    if (c->open)
        ps_server_sink_close(s, c->id); /* the transport reports the close */
    forget_conn(c);
    c->id = ++h.next_id;
    c->open = 1;
    ps_server_sink_open(s, c->id);
}

/* Hands msg to the ps in a copy of its exact size (so reads past it are caught), tagged
 * once the connection's messages are (an empty one then goes as a wrong tag alone). */
static void deliver(ps_server *s, conn_state *c, const uint8_t *msg, size_t len) {
    uint8_t *copy = malloc(len + (c->tx ? PF_WIRE_TAG_SIZE : 0) + 1);
    if (!copy)
        return;
    memcpy(copy, msg, len);
    if (c->tx && len == 0) {
        memset(copy, 0x5a, PF_WIRE_TAG_SIZE);
        len = PF_WIRE_TAG_SIZE;
    } else if (c->tx) {
        struct iovec v = {copy, len};
        pf_wire_mac_sign(c->tx, &v, 1, copy + len);
        len += PF_WIRE_TAG_SIZE;
    }
    ps_server_sink_message(s, c->id, copy, len);
    free(copy);
}

/* Sends a copy of msg, a HELLO remembered and a SEG_ATTACH made to name this process. */
static void send_msg(ps_server *s, conn_state *c, const uint8_t *msg, size_t len) {
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return;
    memcpy(copy, msg, len);
    /* Remember a HELLO: the harness's proof covers it. */
    if (len >= PF_WIRE_HEADER_SIZE && len <= sizeof c->hello && copy[6] == PF_WIRE_HELLO &&
        copy[7] == 0) {
        memcpy(c->hello, copy, len);
        c->hello_len = len;
        c->role = len > 24 ? copy[24] : 0;
        c->task = len >= 32 ? (uint32_t)copy[28] | (uint32_t)copy[29] << 8 |
                                  (uint32_t)copy[30] << 16 | (uint32_t)copy[31] << 24
                            : 0;
        memcpy(&c->request_id, copy + 8, 4);
        c->challenged = 0;
    }
    if (len == PF_WIRE_HEADER_SIZE + 32 && copy[6] == PF_WIRE_SEG_ATTACH && copy[7] == 0) {
        uint32_t pid, self = (uint32_t)getpid();
        memcpy(&pid, copy + 24, 4);
        memcpy(copy + 24, &self, 4);
        if (pid == 0) {
            uint32_t fd = (uint32_t)h.seg.fd;
            memcpy(copy + 28, &fd, 4);
            memcpy(copy + 40, h.seg.token, PF_WIRE_SEG_TOKEN_SIZE);
        }
    }
    c->proved = 0;
    deliver(s, c, copy, len);
    free(copy);
}

static void send_proof(ps_server *s, conn_state *c, int flip) {
    if (!c->challenged || !c->hello_len)
        return;
    uint8_t key[PF_WIRE_KEY_SIZE], nonce_task[PF_WIRE_NONCE_SIZE], mac[PF_WIRE_MAC_SIZE];
    memset(nonce_task, 0xa5, sizeof nonce_task);
    pf_wire_task_key(h.job_key, c->role, c->task, key);
    pf_wire_proof(key, PF_WIRE_PROOF_TASK, c->hello, c->hello_len, c->nonce_ps, nonce_task, mac);
    if (flip)
        mac[flip % PF_WIRE_MAC_SIZE] ^= 1;
    pf_wire_out out;
    pf_wire_out_init(&out);
    pf_wire_auth a = {nonce_task, mac};
    pf_buf b;
    pf_buf_init(&b, 1024);
    pf_error err;
    if (pf_wire_encode_auth(&out, PF_WIRE_AUTH_PROOF, c->request_id, &a, &err) == PF_OK &&
        pf_wire_out_gather(&out, &b) == PF_OK) {
        c->challenged = 0;
        c->proved = !flip;
        deliver(s, c, b.data, b.len);
    }
    pf_buf_deinit(&b);
    pf_wire_out_deinit(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    memset(h.c, 0, sizeof h.c);
    h.with_key = data[0] & 1;
    ps_server *s = start_ps(h.with_key, data[0] & 2 ? (data[0] & 8 ? 4 : 1) + ((data[0] >> 2) & 1)
                                                    : (data[0] & 8 ? 3 : 0));
    size_t pos = 1;
    while (pos < size) {
        uint8_t op = data[pos++];
        conn_state *c = &h.c[op & 3];
        int kind = (op >> 2) & 3;
        if (kind == 1) {
            if (c->open) {
                ps_server_sink_close(s, c->id);
                c->open = 0;
                c->closed_by_ps = 0;
                pf_wire_mac_destroy(c->tx);
                pf_wire_mac_destroy(c->rx);
                c->tx = c->rx = NULL;
            }
            continue;
        }
        open_conn(s, c);
        if (kind == 0) {
            if (size - pos < 2)
                break;
            size_t len = (size_t)data[pos] | (size_t)data[pos + 1] << 8;
            pos += 2;
            if (len > size - pos)
                len = size - pos;
            send_msg(s, c, data + pos, len);
            pos += len;
        } else {
            send_proof(s, c, kind == 3 ? 1 + (op >> 4) : 0);
        }
    }
    ps_server_destroy(s);
    for (int i = 0; i < N_CONN; i++)
        forget_conn(&h.c[i]);
    return 0;
}
