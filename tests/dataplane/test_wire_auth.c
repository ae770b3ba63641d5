/* test_wire_auth.c - the data plane's keys and proofs against the test vectors of
 * api/wire.md (computed with Python's hmac module, not with psflow), the AUTH messages'
 * layouts, and the message tags after the handshake (vectors from Python's cryptography
 * ChaCha20Poly1305; a tag of another position, direction or message, or a short one, is refused).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/buf.h"
#include "psflow/wire.h"
#include "psflow/wire_auth.h"

static void unhex(const char *hex, uint8_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

static void assert_hex(const uint8_t *got, const char *hex) {
    uint8_t want[64];
    size_t n = strlen(hex) / 2;
    unhex(hex, want, n);
    assert_memory_equal(got, want, n);
}

/* api/wire.md, "Test vectors". */
static void test_vectors(void **state) {
    (void)state;
    uint8_t job_key[PF_WIRE_KEY_SIZE], task_key[PF_WIRE_KEY_SIZE], mac[PF_WIRE_MAC_SIZE];
    pf_wire_job_key("s3cret-token", 12, "fmnist", job_key);
    assert_hex(job_key, "0f5f191462b89213744d189a146924384d02d5271d6bf7dd5f55b72c68025433");
    pf_wire_task_key(job_key, PF_WIRE_ROLE_WORKER, 1, task_key);
    assert_hex(task_key, "84b63f83e6f5175ef02981128567582e73c445390da8004b74ade2ae0f2b1559");

    /* The HELLO of worker 1, incarnation 5, request id 7, job "fmnist", as psflow encodes it. */
    pf_wire_out o;
    pf_wire_out_init(&o);
    pf_wire_hello h = {PF_WIRE_ROLE_WORKER, 1, 5, {"fmnist", 6}};
    assert_int_equal(pf_wire_encode_hello(&o, 7, &h, NULL), PF_OK);
    pf_buf hello;
    pf_buf_init(&hello, 1024);
    assert_int_equal(pf_wire_out_gather(&o, &hello), PF_OK);
    assert_int_equal(hello.len, 50);
    assert_hex(hello.data, "505346570100010007000000000000001a000000000000000000000001000000050000"
                           "000000000006000000666d6e697374");
    uint8_t nonce_ps[32], nonce_task[32];
    for (int i = 0; i < 32; i++) {
        nonce_ps[i] = (uint8_t)i;
        nonce_task[i] = (uint8_t)(32 + i);
    }
    pf_wire_proof(task_key, PF_WIRE_PROOF_TASK, hello.data, hello.len, nonce_ps, nonce_task, mac);
    assert_hex(mac, "0fad4e8f0fb1d9e7e9e1d77caa689b69be2c965b25b05d85529a5140a8aa7776");
    pf_wire_proof(task_key, PF_WIRE_PROOF_PS, hello.data, hello.len, nonce_ps, nonce_task, mac);
    assert_hex(mac, "5f713dc75eba77a2b3a8d2fd0fe598d81717da250f223acdfa2990e677c8ed9c");

    /* Another task's key, another nonce: another proof. */
    uint8_t other[PF_WIRE_KEY_SIZE], mac2[PF_WIRE_MAC_SIZE];
    pf_wire_task_key(job_key, PF_WIRE_ROLE_CHIEF, 0, other);
    assert_memory_not_equal(other, task_key, PF_WIRE_KEY_SIZE);
    pf_wire_proof(other, PF_WIRE_PROOF_PS, hello.data, hello.len, nonce_ps, nonce_task, mac2);
    assert_false(pf_wire_mac_equal(mac, mac2));
    assert_true(pf_wire_mac_equal(mac, mac));
    nonce_task[31] ^= 1;
    pf_wire_proof(task_key, PF_WIRE_PROOF_PS, hello.data, hello.len, nonce_ps, nonce_task, mac2);
    assert_false(pf_wire_mac_equal(mac, mac2));
    pf_buf_deinit(&hello);
    pf_wire_out_deinit(&o);
}

static const char VEC_HELLO[] = "505346570100010007000000000000001a00000000000000000000000100000005"
                                "0000000000000006000000666d6e697374";

/* The session of the api/wire.md vectors: one direction's pf_wire_mac. */
static pf_wire_mac *vector_mac(pf_wire_direction dir) {
    uint8_t job_key[PF_WIRE_KEY_SIZE], task_key[PF_WIRE_KEY_SIZE], hello[50], nps[32], nt[32];
    pf_wire_job_key("s3cret-token", 12, "fmnist", job_key);
    pf_wire_task_key(job_key, PF_WIRE_ROLE_WORKER, 1, task_key);
    unhex(VEC_HELLO, hello, sizeof hello);
    for (int i = 0; i < 32; i++) {
        nps[i] = (uint8_t)i;
        nt[i] = (uint8_t)(32 + i);
    }
    pf_wire_mac *m = pf_wire_mac_create(task_key, dir, hello, sizeof hello, nps, nt);
    assert_non_null(m);
    return m;
}

/* api/wire.md, "Integrity": the direction keys and tags of message bytes 0x00 .. 0x31. */
static void test_tag_vectors(void **state) {
    (void)state;
    uint8_t job_key[PF_WIRE_KEY_SIZE], task_key[PF_WIRE_KEY_SIZE], hello[50], nps[32], nt[32];
    uint8_t key[PF_WIRE_KEY_SIZE], tag[PF_WIRE_TAG_SIZE], msg[50];
    pf_wire_job_key("s3cret-token", 12, "fmnist", job_key);
    pf_wire_task_key(job_key, PF_WIRE_ROLE_WORKER, 1, task_key);
    unhex(VEC_HELLO, hello, sizeof hello);
    for (int i = 0; i < 50; i++)
        msg[i] = (uint8_t)i;
    for (int i = 0; i < 32; i++) {
        nps[i] = (uint8_t)i;
        nt[i] = (uint8_t)(32 + i);
    }
    pf_wire_mac_key(task_key, PF_WIRE_TO_PS, hello, sizeof hello, nps, nt, key);
    assert_hex(key, "45bcfb541e076085eb341d7cd0803d67608f6d16b0755b89b12710467b1d168b");
    struct iovec whole = {msg, sizeof msg}, none = {msg, 0};
    pf_wire_tag(key, PF_WIRE_TO_PS, 0, &whole, 1, tag);
    assert_hex(tag, "167304f2c224d720c48b0356dbb6ec7d");
    pf_wire_tag(key, PF_WIRE_TO_PS, 0, &none, 1, tag);
    assert_hex(tag, "c1bebfb936b8e5b168ce249b73c11706");
    pf_wire_mac_key(task_key, PF_WIRE_TO_TASK, hello, sizeof hello, nps, nt, key);
    assert_hex(key, "613ea2b75d07f2b0c7631939b46d4340aafe3b087e70cae02adf90a03e05d861");
    /* in pieces, as a reply is sent: the same tag as the whole */
    struct iovec pieces[3] = {{msg, 7}, {msg + 7, 0}, {msg + 7, 43}};
    pf_wire_tag(key, PF_WIRE_TO_TASK, 1, pieces, 3, tag);
    assert_hex(tag, "3da9b822fd540bb6e82b7401f52d30ce");
    /* a pf_wire_mac signs message 0, then 1, ... */
    pf_wire_mac *m = vector_mac(PF_WIRE_TO_TASK);
    pf_wire_mac_sign(m, &whole, 1, tag);
    assert_int_equal(pf_wire_mac_seq(m), 1);
    pf_wire_mac_sign(m, pieces, 3, tag);
    assert_hex(tag, "3da9b822fd540bb6e82b7401f52d30ce");
    pf_wire_mac_destroy(m);
    pf_wire_mac_destroy(NULL);
}

/* msg[0 .. 50) + its tag as the sender made it, into out (66 bytes). */
static void sealed(pf_wire_mac *sender, uint8_t fill, uint8_t *out) {
    memset(out, fill, 50);
    struct iovec v = {out, 50};
    pf_wire_mac_sign(sender, &v, 1, out + 50);
}

/* Every message checks in order; one out of place, changed, truncated, of the other
 * direction or of another session is refused, and a refusal moves nothing. */
static void test_tag_refusals(void **state) {
    (void)state;
    pf_wire_mac *tx = vector_mac(PF_WIRE_TO_PS), *rx = vector_mac(PF_WIRE_TO_PS);
    pf_wire_mac *other_dir = vector_mac(PF_WIRE_TO_TASK);
    uint8_t m0[66], m1[66], m2[66], back[66];
    sealed(tx, 0xa0, m0);
    sealed(tx, 0xa1, m1);
    sealed(tx, 0xa2, m2);
    sealed(other_dir, 0xa0, back); /* message 0 of the other direction, same bytes */
    assert_false(pf_wire_mac_check(rx, back, sizeof back)); /* wrong direction */
    assert_false(pf_wire_mac_check(rx, m1, sizeof m1));     /* m0 dropped: out of sequence */
    assert_int_equal(pf_wire_mac_seq(rx), 0);
    assert_true(pf_wire_mac_check(rx, m0, sizeof m0));
    assert_false(pf_wire_mac_check(rx, m0, sizeof m0)); /* replayed */
    uint8_t changed[66];
    memcpy(changed, m1, sizeof changed);
    changed[10] ^= 0x01;
    assert_false(pf_wire_mac_check(rx, changed, sizeof changed));
    memcpy(changed, m1, sizeof changed);
    changed[65] ^= 0x80; /* the tag itself */
    assert_false(pf_wire_mac_check(rx, changed, sizeof changed));
    assert_false(pf_wire_mac_check(rx, m1, sizeof m1 - 1)); /* truncated tag */
    assert_false(pf_wire_mac_check(rx, m1, PF_WIRE_TAG_SIZE - 1));
    assert_false(pf_wire_mac_check(rx, m1, 0));
    assert_true(pf_wire_mac_check(rx, m1, sizeof m1));
    assert_true(pf_wire_mac_check(rx, m2, sizeof m2));
    assert_int_equal(pf_wire_mac_seq(rx), 3);
    /* another session (other nonces): nothing verifies */
    uint8_t job_key[PF_WIRE_KEY_SIZE], task_key[PF_WIRE_KEY_SIZE], nonce[32] = {0};
    pf_wire_job_key("s3cret-token", 12, "fmnist", job_key);
    pf_wire_task_key(job_key, PF_WIRE_ROLE_WORKER, 1, task_key);
    pf_wire_mac *fresh = pf_wire_mac_create(task_key, PF_WIRE_TO_PS, "x", 1, nonce, nonce);
    assert_non_null(fresh);
    assert_false(pf_wire_mac_check(fresh, m0, sizeof m0));
    pf_wire_mac_destroy(fresh);
    pf_wire_mac_destroy(tx);
    pf_wire_mac_destroy(rx);
    pf_wire_mac_destroy(other_dir);
}

/* Streams msg[0 .. len) into m split at a and b (a <= b <= len), as bytes arrive, and
 * verifies it. */
static int streamed(pf_wire_mac *m, const uint8_t *msg, size_t len, size_t a, size_t b) {
    pf_wire_mac_begin(m);
    pf_wire_mac_update(m, msg, a);
    pf_wire_mac_update(m, msg + a, b - a);
    pf_wire_mac_update(m, msg + b, len - b);
    assert_int_equal(pf_wire_mac_fed(m), len);
    return pf_wire_mac_verify(m);
}

/* A message received as it arrives, split anywhere (at every pair of boundaries, so each
 * piece's end falls at every position relative to the 16-byte tag and Poly1305's blocks),
 * verifies as the whole one does against the vector's one-shot tag; a change of any byte,
 * a short message or one not begun is refused and moves nothing. */
static void test_tag_streamed(void **state) {
    (void)state;
    uint8_t msg[50 + PF_WIRE_TAG_SIZE];
    for (int i = 0; i < 50; i++)
        msg[i] = (uint8_t)i;
    unhex("167304f2c224d720c48b0356dbb6ec7d", msg + 50, PF_WIRE_TAG_SIZE); /* seq 0, to ps */
    const size_t len = sizeof msg;
    for (size_t a = 0; a <= len; a++)
        for (size_t b = a; b <= len; b++) {
            pf_wire_mac *m = vector_mac(PF_WIRE_TO_PS);
            assert_true(streamed(m, msg, len, a, b));
            assert_int_equal(pf_wire_mac_seq(m), 1);
            assert_int_equal(pf_wire_mac_fed(m), 0); /* the message ended */
            pf_wire_mac_destroy(m);
        }
    pf_wire_mac *m = vector_mac(PF_WIRE_TO_PS);
    for (size_t i = 0; i < len; i++) {
        uint8_t changed[sizeof msg];
        memcpy(changed, msg, len);
        changed[i] ^= 0x04;
        assert_false(streamed(m, changed, len, i / 2, i + (len - i) / 2));
    }
    assert_false(streamed(m, msg, len - 1, 7, 40));              /* truncated */
    assert_false(streamed(m, msg + 50, PF_WIRE_TAG_SIZE, 3, 9)); /* the tag alone */
    assert_false(streamed(m, msg, PF_WIRE_TAG_SIZE - 1, 0, 5));  /* too short */
    assert_false(pf_wire_mac_verify(m));                         /* none begun */
    pf_wire_mac_update(m, msg, len);                             /* none begun: ignored */
    assert_int_equal(pf_wire_mac_fed(m), 0);
    pf_wire_mac_begin(m); /* a message begun and given up is forgotten by the next */
    pf_wire_mac_update(m, msg, 20);
    assert_int_equal(pf_wire_mac_seq(m), 0);
    assert_true(streamed(m, msg, len, 33, 33));
    pf_wire_mac_destroy(m);

    /* A long message in pieces of every size from 1 up, against the sender's tag, then the
     * next one in order, and the first one again (a replay) refused. */
    pf_wire_mac *tx = vector_mac(PF_WIRE_TO_TASK), *rx = vector_mac(PF_WIRE_TO_TASK);
    static uint8_t big[3000 + PF_WIRE_TAG_SIZE], big2[3000 + PF_WIRE_TAG_SIZE];
    for (size_t i = 0; i < 3000; i++) {
        big[i] = (uint8_t)(i * 7);
        big2[i] = (uint8_t)(i * 11);
    }
    struct iovec v = {big, 3000}, v2 = {big2, 3000};
    pf_wire_mac_sign(tx, &v, 1, big + 3000);
    /* signed as it is written, in pieces: the same tag as the one-shot */
    pf_wire_mac *tx2 = vector_mac(PF_WIRE_TO_TASK);
    uint8_t tag[PF_WIRE_TAG_SIZE];
    pf_wire_mac_sign_begin(tx2);
    for (size_t pos = 0, step = 1; pos < 3000; pos += step, step += 3)
        pf_wire_mac_sign_update(tx2, big + pos, step < 3000 - pos ? step : 3000 - pos);
    pf_wire_mac_sign_end(tx2, tag);
    assert_memory_equal(tag, big + 3000, PF_WIRE_TAG_SIZE);
    assert_int_equal(pf_wire_mac_seq(tx2), 1);
    pf_wire_mac_sign_begin(tx2);
    pf_wire_mac_sign_update(tx2, big2, 1234);
    pf_wire_mac_sign_update(tx2, big2 + 1234, 3000 - 1234);
    pf_wire_mac_sign_end(tx2, big2 + 3000);
    pf_wire_mac_destroy(tx2);
    pf_wire_mac_sign(tx, &v2, 1, tag);
    assert_memory_equal(tag, big2 + 3000, PF_WIRE_TAG_SIZE);
    pf_wire_mac_begin(rx);
    for (size_t pos = 0, step = 1; pos < sizeof big; pos += step, step++)
        pf_wire_mac_update(rx, big + pos, step < sizeof big - pos ? step : sizeof big - pos);
    assert_true(pf_wire_mac_verify(rx));
    assert_true(pf_wire_mac_check(rx, big2, sizeof big2)); /* the whole-message check agrees */
    assert_false(streamed(rx, big, sizeof big, 100, 2000));
    assert_int_equal(pf_wire_mac_seq(rx), 2);
    pf_wire_mac_destroy(tx);
    pf_wire_mac_destroy(rx);
}

static void test_nonces_differ(void **state) {
    (void)state;
    uint8_t a[PF_WIRE_NONCE_SIZE], b[PF_WIRE_NONCE_SIZE];
    pf_error err;
    assert_int_equal(pf_wire_nonce(a, &err), PF_OK);
    assert_int_equal(pf_wire_nonce(b, &err), PF_OK);
    assert_memory_not_equal(a, b, sizeof a);
}

/* AUTH_CHALLENGE (nonce), AUTH_PROOF (nonce, mac), AUTH_OK (mac): exact sizes, round trip,
 * and a payload one byte short or long is BAD_LENGTH. */
static void test_messages(void **state) {
    (void)state;
    uint8_t nonce[32], mac[32];
    for (int i = 0; i < 32; i++) {
        nonce[i] = (uint8_t)(0xa0 + i);
        mac[i] = (uint8_t)(0x10 + i);
    }
    struct {
        uint16_t type;
        size_t payload;
    } cases[] = {{PF_WIRE_AUTH_CHALLENGE, 32}, {PF_WIRE_AUTH_PROOF, 64}, {PF_WIRE_AUTH_OK, 32}};
    pf_wire_out o;
    pf_wire_out_init(&o);
    pf_wire_in in;
    pf_wire_in_init(&in, 0, 0);
    for (size_t i = 0; i < 3; i++) {
        pf_wire_auth a = {nonce, mac};
        pf_error err;
        assert_int_equal(pf_wire_encode_auth(&o, cases[i].type, 9, &a, &err), PF_OK);
        pf_buf b;
        pf_buf_init(&b, 1024);
        assert_int_equal(pf_wire_out_gather(&o, &b), PF_OK);
        assert_int_equal(b.len, 24 + cases[i].payload);
        uint8_t *msg = b.data;
        pf_wire_msg m;
        assert_int_equal(pf_wire_decode(&in, msg, b.len, &m, &err), PF_OK);
        assert_int_equal(m.type, cases[i].type);
        assert_int_equal(m.request_id, 9);
        if (cases[i].type != PF_WIRE_AUTH_OK)
            assert_memory_equal(m.u.auth.nonce, nonce, 32);
        else
            assert_null(m.u.auth.nonce);
        if (cases[i].type != PF_WIRE_AUTH_CHALLENGE)
            assert_memory_equal(m.u.auth.mac, mac, 32);
        else
            assert_null(m.u.auth.mac);
        /* one byte short: the header says so too */
        msg[16] = (uint8_t)(cases[i].payload - 1);
        assert_int_not_equal(pf_wire_decode(&in, msg, b.len - 1, &m, &err), PF_OK);
        assert_int_equal(pf_wire_in_code(&in), PF_WIRE_BAD_LENGTH);
        pf_buf_deinit(&b);
        /* a NULL field is refused by the encoder */
        pf_wire_auth none = {NULL, NULL};
        assert_int_equal(pf_wire_encode_auth(&o, cases[i].type, 9, &none, &err), PF_ERR_INVALID);
    }
    pf_error err;
    assert_int_equal(pf_wire_encode_auth(&o, PF_WIRE_HELLO, 9, &(pf_wire_auth){nonce, mac}, &err),
                     PF_ERR_INVALID);
    pf_wire_in_deinit(&in);
    pf_wire_out_deinit(&o);
}

/* The key a task is given proves its own role and index only: no worker's key (what a
 * compromised worker host holds) makes a proof the ps accepts for a HELLO as the chief, in a
 * job with a chief or without one (where worker 0 is the chief, and only it). */
static void test_worker_key_never_proves_chief(void **state) {
    (void)state;
    uint8_t job_key[PF_WIRE_KEY_SIZE], chief[PF_WIRE_KEY_SIZE], key[PF_WIRE_KEY_SIZE];
    uint8_t want[PF_WIRE_MAC_SIZE], forged[PF_WIRE_MAC_SIZE], nonce_ps[32], nonce_task[32];
    pf_wire_job_key("coordinator secret", 18, "fmnist", job_key);
    pf_wire_task_key(job_key, PF_WIRE_ROLE_CHIEF, 0, chief);
    memset(nonce_ps, 1, sizeof nonce_ps);
    memset(nonce_task, 2, sizeof nonce_task);
    uint8_t hello[50];
    unhex(VEC_HELLO, hello, sizeof hello);
    hello[24] = PF_WIRE_ROLE_CHIEF; /* the HELLO's role byte (api/wire.md "HELLO") */
    memset(hello + 28, 0, 4);       /* task_index 0 */
    pf_wire_proof(chief, PF_WIRE_PROOF_TASK, hello, sizeof hello, nonce_ps, nonce_task, want);
    for (int has_chief = 0; has_chief <= 1; has_chief++) {
        for (int k = 0; k < 64; k++) {
            assert_int_equal(pf_wire_task_key_for(job_key, "worker", k, has_chief, key), PF_OK);
            pf_wire_proof(key, PF_WIRE_PROOF_TASK, hello, sizeof hello, nonce_ps, nonce_task,
                          forged);
            /* worker 0 of a job without a chief is the chief: the one key that must pass */
            int is_chief = !has_chief && k == 0;
            assert_int_equal(pf_wire_mac_equal(want, forged), is_chief);
            assert_int_equal(memcmp(key, chief, sizeof key) == 0, is_chief);
        }
        assert_int_equal(pf_wire_task_key_for(job_key, "evaluator", 0, has_chief, key), PF_OK);
        pf_wire_proof(key, PF_WIRE_PROOF_TASK, hello, sizeof hello, nonce_ps, nonce_task, forged);
        assert_false(pf_wire_mac_equal(want, forged));
    }
    /* The roles and indices each key is for, as a HELLO says them. */
    uint8_t direct[PF_WIRE_KEY_SIZE];
    assert_int_equal(pf_wire_task_key_for(job_key, "chief", 0, 1, key), PF_OK);
    assert_memory_equal(key, chief, sizeof key);
    assert_int_equal(pf_wire_task_key_for(job_key, "worker", 1, 1, key), PF_OK);
    pf_wire_task_key(job_key, PF_WIRE_ROLE_WORKER, 2, direct);
    assert_memory_equal(key, direct, sizeof key);
    assert_int_equal(pf_wire_task_key_for(job_key, "worker", 1, 0, key), PF_OK);
    pf_wire_task_key(job_key, PF_WIRE_ROLE_WORKER, 1, direct);
    assert_memory_equal(key, direct, sizeof key);
    assert_int_equal(pf_wire_task_key_for(job_key, "ps", 0, 0, key), PF_ERR_INVALID);
    assert_int_equal(pf_wire_task_key_for(job_key, "chief", 1, 1, key), PF_ERR_INVALID);
    assert_int_equal(pf_wire_task_key_for(job_key, "worker", -1, 1, key), PF_ERR_INVALID);
    assert_int_equal(pf_wire_task_key_for(job_key, "tool", 0, 1, key), PF_ERR_INVALID);
}

/* Keys as text: 64 hex digits round-trip; anything else is refused and leaves the key. */
static void test_key_hex(void **state) {
    (void)state;
    uint8_t key[PF_WIRE_KEY_SIZE], back[PF_WIRE_KEY_SIZE];
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (uint8_t)(i * 37 + 11);
    char hex[PF_WIRE_KEY_HEX_SIZE], text[80];
    pf_wire_key_hex(key, hex);
    assert_int_equal(strlen(hex), 64);
    assert_int_equal(pf_wire_key_parse_hex(hex, 64, back), PF_OK);
    assert_memory_equal(key, back, sizeof key);
    snprintf(text, sizeof text, "%s \r\n", hex); /* a file's line end */
    memset(back, 0, sizeof back);
    assert_int_equal(pf_wire_key_parse_hex(text, strlen(text), back), PF_OK);
    assert_memory_equal(key, back, sizeof key);
    for (int i = 0; hex[i]; i++) /* upper case too */
        text[i] = hex[i] >= 'a' ? (char)(hex[i] - 32) : hex[i];
    assert_int_equal(pf_wire_key_parse_hex(text, 64, back), PF_OK);
    assert_memory_equal(key, back, sizeof key);
    memset(back, 0x5a, sizeof back);
    uint8_t untouched[PF_WIRE_KEY_SIZE];
    memset(untouched, 0x5a, sizeof untouched);
    assert_int_equal(pf_wire_key_parse_hex(hex, 63, back), PF_ERR_FORMAT);
    snprintf(text, sizeof text, "%s0", hex);
    assert_int_equal(pf_wire_key_parse_hex(text, 65, back), PF_ERR_FORMAT);
    snprintf(text, sizeof text, "%s", hex);
    text[40] = 'g';
    assert_int_equal(pf_wire_key_parse_hex(text, 64, back), PF_ERR_FORMAT);
    snprintf(text, sizeof text, " %s", hex);
    assert_int_equal(pf_wire_key_parse_hex(text, 65, back), PF_ERR_FORMAT);
    assert_int_equal(pf_wire_key_parse_hex("", 0, back), PF_ERR_FORMAT);
    assert_memory_equal(back, untouched, sizeof back);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_nonces_differ),
        cmocka_unit_test(test_tag_vectors),
        cmocka_unit_test(test_tag_refusals),
        cmocka_unit_test(test_tag_streamed),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_worker_key_never_proves_chief),
        cmocka_unit_test(test_key_hex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
