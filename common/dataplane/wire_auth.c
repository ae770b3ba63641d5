/* wire_auth.c - keys and proofs of the data plane (see wire_auth.h), on OpenSSL's
 * libcrypto: HMAC-SHA256, CRYPTO_memcmp, RAND_bytes. */
#include "psflow/wire_auth.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

static const char LABEL_JOB[] = "psflow data plane v1 job key";
static const char LABEL_TASK[] = "psflow data plane v1 task key";
static const char LABEL_TASK_PROOF[] = "psflow data plane v1 task proof";
static const char LABEL_PS_PROOF[] = "psflow data plane v1 ps proof";

typedef struct piece {
    const void *p;
    size_t n;
} piece;

/* HMAC-SHA256 over the concatenation of pieces; a label piece is followed by one 0 byte. */
static void hmac(const void *key, size_t key_len, const char *label, const piece *pieces, int n,
                 uint8_t out[PF_WIRE_MAC_SIZE]) {
    uint8_t msg[512];
    size_t len = strlen(label) + 1;
    memcpy(msg, label, len); /* with its terminating 0 */
    for (int i = 0; i < n; i++) {
        /* Callers pass at most a HELLO (107 bytes) and two nonces: always fits. */
        if (len + pieces[i].n > sizeof msg)
            return;
        memcpy(msg + len, pieces[i].p, pieces[i].n);
        len += pieces[i].n;
    }
    unsigned int out_len = PF_WIRE_MAC_SIZE;
    HMAC(EVP_sha256(), key, (int)key_len, msg, len, out, &out_len);
    OPENSSL_cleanse(msg, sizeof msg);
}

void pf_wire_job_key(const void *secret, size_t secret_len, const char *job,
                     uint8_t key[PF_WIRE_KEY_SIZE]) {
    piece p = {job, strlen(job)};
    hmac(secret, secret_len, LABEL_JOB, &p, 1, key);
}

void pf_wire_task_key(const uint8_t job_key[PF_WIRE_KEY_SIZE], uint8_t role, uint32_t task_index,
                      uint8_t key[PF_WIRE_KEY_SIZE]) {
    uint8_t who[5] = {role, (uint8_t)task_index, (uint8_t)(task_index >> 8),
                      (uint8_t)(task_index >> 16), (uint8_t)(task_index >> 24)};
    piece p = {who, sizeof who};
    hmac(job_key, PF_WIRE_KEY_SIZE, LABEL_TASK, &p, 1, key);
}

void pf_wire_proof(const uint8_t task_key[PF_WIRE_KEY_SIZE], pf_wire_proof_side side,
                   const void *hello, size_t hello_len, const uint8_t nonce_ps[PF_WIRE_NONCE_SIZE],
                   const uint8_t nonce_task[PF_WIRE_NONCE_SIZE], uint8_t mac[PF_WIRE_MAC_SIZE]) {
    piece p[] = {
        {hello, hello_len}, {nonce_ps, PF_WIRE_NONCE_SIZE}, {nonce_task, PF_WIRE_NONCE_SIZE}};
    memset(mac, 0, PF_WIRE_MAC_SIZE); /* stays zero only if the transcript were too long */
    hmac(task_key, PF_WIRE_KEY_SIZE, side == PF_WIRE_PROOF_PS ? LABEL_PS_PROOF : LABEL_TASK_PROOF,
         p, 3, mac);
}

int pf_wire_mac_equal(const uint8_t a[PF_WIRE_MAC_SIZE], const uint8_t b[PF_WIRE_MAC_SIZE]) {
    return CRYPTO_memcmp(a, b, PF_WIRE_MAC_SIZE) == 0;
}

pf_status pf_wire_nonce(uint8_t nonce[PF_WIRE_NONCE_SIZE], pf_error *err) {
    if (RAND_bytes(nonce, (int)PF_WIRE_NONCE_SIZE) != 1)
        return pf_error_set(err, PF_ERR_IO, NULL, "the random number generator failed");
    return PF_OK;
}

void pf_wire_key_clear(void *key, size_t len) {
    OPENSSL_cleanse(key, len);
}
