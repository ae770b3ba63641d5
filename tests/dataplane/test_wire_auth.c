/* test_wire_auth.c - the data plane's keys and proofs against the test vectors of
 * api/wire.md (computed with Python's hmac module, not with psflow), and the AUTH messages'
 * layouts. */
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_nonces_differ),
        cmocka_unit_test(test_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
