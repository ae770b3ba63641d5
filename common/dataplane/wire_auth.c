/* wire_auth.c - keys, proofs and message tags of the data plane (see wire_auth.h), on
 * OpenSSL's libcrypto: HMAC-SHA256, ChaCha20-Poly1305 with an empty plaintext as the tag
 * (Poly1305 under a key ChaCha20 draws for each message; libcrypto's vectorised Poly1305 is
 * faster than GHASH alone for additional data), CRYPTO_memcmp, RAND_bytes. */
#include "psflow/wire_auth.h"

#include <limits.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "psflow/mem.h"
#include "psflow/wire.h"

static const char LABEL_JOB[] = "psflow data plane v1 job key";
static const char LABEL_TASK[] = "psflow data plane v1 task key";
static const char LABEL_TASK_PROOF[] = "psflow data plane v1 task proof";
static const char LABEL_PS_PROOF[] = "psflow data plane v1 ps proof";
static const char LABEL_TO_PS[] = "psflow data plane v1 task-to-ps mac key";
static const char LABEL_TO_TASK[] = "psflow data plane v1 ps-to-task mac key";

struct pf_wire_mac {
    EVP_CIPHER_CTX *ctx; /* ChaCha20-Poly1305 under the direction's key */
    pf_wire_direction dir;
    uint64_t seq;
    /* receiving as it arrives (pf_wire_mac_begin): the message's bytes but its last 16 are
     * additional data fed to ctx; those last ones, the tag if the message ends there, are
     * held back in `hold` until more bytes come or it ends */
    int open;    /* a message is begun */
    int failed;  /* the library failed on it: it cannot verify */
    size_t fed;  /* bytes of it fed so far */
    size_t held; /* bytes in hold: min(fed, PF_WIRE_TAG_SIZE) */
    uint8_t hold[PF_WIRE_TAG_SIZE];
};

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

void pf_wire_mac_key(const uint8_t task_key[PF_WIRE_KEY_SIZE], pf_wire_direction dir,
                     const void *hello, size_t hello_len,
                     const uint8_t nonce_ps[PF_WIRE_NONCE_SIZE],
                     const uint8_t nonce_task[PF_WIRE_NONCE_SIZE], uint8_t key[PF_WIRE_KEY_SIZE]) {
    piece p[] = {
        {hello, hello_len}, {nonce_ps, PF_WIRE_NONCE_SIZE}, {nonce_task, PF_WIRE_NONCE_SIZE}};
    memset(key, 0, PF_WIRE_KEY_SIZE);
    hmac(task_key, PF_WIRE_KEY_SIZE, dir == PF_WIRE_TO_PS ? LABEL_TO_PS : LABEL_TO_TASK, p, 3, key);
}

/* Keys ctx with ChaCha20-Poly1305 under key and a 12-byte nonce. Returns 1 on success. */
static int aead_key(EVP_CIPHER_CTX *ctx, const uint8_t key[PF_WIRE_KEY_SIZE]) {
    return EVP_EncryptInit_ex(ctx, EVP_chacha20_poly1305(), NULL, NULL, NULL) == 1 &&
           EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, 12, NULL) == 1 &&
           EVP_EncryptInit_ex(ctx, NULL, NULL, key, NULL) == 1;
}

/* Starts ctx's message seq of direction dir (its nonce). Returns 1 on success. */
static int aead_begin(EVP_CIPHER_CTX *ctx, pf_wire_direction dir, uint64_t seq) {
    uint8_t iv[12];
    for (int i = 0; i < 4; i++)
        iv[i] = (uint8_t)((uint32_t)dir >> (8 * i));
    for (int i = 0; i < 8; i++)
        iv[4 + i] = (uint8_t)(seq >> (8 * i));
    return EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, iv) == 1;
}

/* Feeds p[0 .. n) to ctx's message as additional data (in as many calls as it takes: the
 * library's Poly1305 carries a partial block from one call to the next). Returns 1 on
 * success. */
static int aead_update(EVP_CIPHER_CTX *ctx, const uint8_t *p, size_t n) {
    int out_len;
    while (n > 0) {
        int step = n > (size_t)INT_MAX / 2 ? INT_MAX / 2 : (int)n;
        if (EVP_EncryptUpdate(ctx, NULL, &out_len, p, step) != 1)
            return 0;
        p += step;
        n -= (size_t)step;
    }
    return 1;
}

/* Ends ctx's message: its tag. Returns 1 on success; else the tag is all zero. */
static int aead_final(EVP_CIPHER_CTX *ctx, uint8_t tag[PF_WIRE_TAG_SIZE]) {
    uint8_t none[16];
    int out_len;
    if (EVP_EncryptFinal_ex(ctx, none, &out_len) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, (int)PF_WIRE_TAG_SIZE, tag) != 1) {
        memset(tag, 0, PF_WIRE_TAG_SIZE);
        return 0;
    }
    return 1;
}

/* The tag of parts under ctx's key, nonce = dir, seq (the parts as additional data). Returns 1 on
 * success; on a failure of the library the tag is all zero (and verifies nothing: a real tag is
 * checked too). */
static int aead_tag(EVP_CIPHER_CTX *ctx, pf_wire_direction dir, uint64_t seq,
                    const struct iovec *parts, int n, uint8_t tag[PF_WIRE_TAG_SIZE]) {
    memset(tag, 0, PF_WIRE_TAG_SIZE);
    if (!aead_begin(ctx, dir, seq))
        return 0;
    for (int i = 0; i < n; i++)
        if (!aead_update(ctx, parts[i].iov_base, parts[i].iov_len))
            return 0;
    return aead_final(ctx, tag);
}

void pf_wire_tag(const uint8_t key[PF_WIRE_KEY_SIZE], pf_wire_direction dir, uint64_t seq,
                 const struct iovec *parts, int n, uint8_t tag[PF_WIRE_TAG_SIZE]) {
    memset(tag, 0, PF_WIRE_TAG_SIZE);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (ctx && aead_key(ctx, key))
        aead_tag(ctx, dir, seq, parts, n, tag);
    EVP_CIPHER_CTX_free(ctx);
}

pf_wire_mac *pf_wire_mac_create(const uint8_t task_key[PF_WIRE_KEY_SIZE], pf_wire_direction dir,
                                const void *hello, size_t hello_len,
                                const uint8_t nonce_ps[PF_WIRE_NONCE_SIZE],
                                const uint8_t nonce_task[PF_WIRE_NONCE_SIZE]) {
    pf_wire_mac *m = pf_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    uint8_t key[PF_WIRE_KEY_SIZE];
    pf_wire_mac_key(task_key, dir, hello, hello_len, nonce_ps, nonce_task, key);
    m->dir = dir;
    m->ctx = EVP_CIPHER_CTX_new();
    int ok = m->ctx && aead_key(m->ctx, key);
    OPENSSL_cleanse(key, sizeof key);
    if (!ok) {
        pf_wire_mac_destroy(m);
        return NULL;
    }
    return m;
}

void pf_wire_mac_destroy(pf_wire_mac *m) {
    if (!m)
        return;
    EVP_CIPHER_CTX_free(m->ctx); /* clears the key schedule */
    pf_free(m);
}

void pf_wire_mac_sign(pf_wire_mac *m, const struct iovec *parts, int n,
                      uint8_t tag[PF_WIRE_TAG_SIZE]) {
    aead_tag(m->ctx, m->dir, m->seq, parts, n, tag);
    m->seq++;
}

void pf_wire_mac_sign_begin(pf_wire_mac *m) {
    m->failed = !aead_begin(m->ctx, m->dir, m->seq);
}

void pf_wire_mac_sign_update(pf_wire_mac *m, const void *data, size_t n) {
    if (!m->failed && !aead_update(m->ctx, data, n))
        m->failed = 1;
}

void pf_wire_mac_sign_end(pf_wire_mac *m, uint8_t tag[PF_WIRE_TAG_SIZE]) {
    /* On a failure of the library the tag is all zero: it verifies nothing. */
    if (!aead_final(m->ctx, tag) || m->failed)
        memset(tag, 0, PF_WIRE_TAG_SIZE);
    m->seq++;
}

void pf_wire_mac_begin(pf_wire_mac *m) {
    m->open = 1;
    m->fed = m->held = 0;
    m->failed = !aead_begin(m->ctx, m->dir, m->seq);
}

void pf_wire_mac_update(pf_wire_mac *m, const void *data, size_t n) {
    const uint8_t *p = data;
    if (!m->open || n == 0)
        return;
    m->fed += n;
    if (m->held + n <= PF_WIRE_TAG_SIZE) { /* all of it may still be the tag */
        memcpy(m->hold + m->held, p, n);
        m->held += n;
        return;
    }
    /* Of hold then p, everything but the last PF_WIRE_TAG_SIZE bytes is message. */
    size_t out = m->held + n - PF_WIRE_TAG_SIZE;
    size_t from_hold = out < m->held ? out : m->held;
    if (!m->failed && from_hold > 0 && !aead_update(m->ctx, m->hold, from_hold))
        m->failed = 1;
    memmove(m->hold, m->hold + from_hold, m->held - from_hold);
    m->held -= from_hold;
    size_t from_data = out - from_hold;
    if (!m->failed && from_data > 0 && !aead_update(m->ctx, p, from_data))
        m->failed = 1;
    memcpy(m->hold + m->held, p + from_data, n - from_data);
    m->held = PF_WIRE_TAG_SIZE;
}

size_t pf_wire_mac_fed(const pf_wire_mac *m) {
    return m->open ? m->fed : 0;
}

int pf_wire_mac_verify(pf_wire_mac *m) {
    if (!m->open)
        return 0;
    m->open = 0;
    uint8_t want[PF_WIRE_TAG_SIZE];
    /* A message too short for a tag still ends the library's message (a failed final is
     * harmless: the next begin sets a new nonce). */
    int ok = aead_final(m->ctx, want) && !m->failed && m->fed >= PF_WIRE_TAG_SIZE &&
             CRYPTO_memcmp(want, m->hold, PF_WIRE_TAG_SIZE) == 0;
    if (ok)
        m->seq++;
    return ok;
}

int pf_wire_mac_check(pf_wire_mac *m, const uint8_t *msg, size_t len) {
    pf_wire_mac_begin(m);
    pf_wire_mac_update(m, msg, len);
    return pf_wire_mac_verify(m);
}

uint64_t pf_wire_mac_seq(const pf_wire_mac *m) {
    return m->seq;
}

void pf_wire_key_clear(void *key, size_t len) {
    OPENSSL_cleanse(key, len);
}

/* --- keys as text, and the key of a task TF_CONFIG names -------------------------------- */

void pf_wire_key_hex(const uint8_t key[PF_WIRE_KEY_SIZE], char hex[PF_WIRE_KEY_HEX_SIZE]) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < PF_WIRE_KEY_SIZE; i++) {
        hex[2 * i] = digits[key[i] >> 4];
        hex[2 * i + 1] = digits[key[i] & 15];
    }
    hex[2 * PF_WIRE_KEY_SIZE] = '\0';
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

pf_status pf_wire_key_parse_hex(const char *text, size_t len, uint8_t key[PF_WIRE_KEY_SIZE]) {
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ' ||
                   text[len - 1] == '\t'))
        len--;
    if (len != 2 * PF_WIRE_KEY_SIZE)
        return PF_ERR_FORMAT;
    uint8_t out[PF_WIRE_KEY_SIZE];
    for (size_t i = 0; i < PF_WIRE_KEY_SIZE; i++) {
        int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            OPENSSL_cleanse(out, sizeof out);
            return PF_ERR_FORMAT;
        }
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    memcpy(key, out, sizeof out);
    OPENSSL_cleanse(out, sizeof out);
    return PF_OK;
}

pf_status pf_wire_task_key_for(const uint8_t job_key[PF_WIRE_KEY_SIZE], const char *type, int index,
                               int has_chief, uint8_t key[PF_WIRE_KEY_SIZE]) {
    if (index < 0 || !type)
        return PF_ERR_INVALID;
    if (!strcmp(type, "chief") && index == 0)
        pf_wire_task_key(job_key, PF_WIRE_ROLE_CHIEF, 0, key);
    else if (!strcmp(type, "worker") && !has_chief && index == 0)
        pf_wire_task_key(job_key, PF_WIRE_ROLE_CHIEF, 0, key);
    else if (!strcmp(type, "worker"))
        pf_wire_task_key(job_key, PF_WIRE_ROLE_WORKER, (uint32_t)index + (has_chief ? 1u : 0u),
                         key);
    else if (!strcmp(type, "evaluator"))
        pf_wire_task_key(job_key, PF_WIRE_ROLE_EVALUATOR, (uint32_t)index, key);
    else if (!strcmp(type, "reader"))
        pf_wire_task_key(job_key, PF_WIRE_ROLE_READER, (uint32_t)index, key);
    else
        return PF_ERR_INVALID;
    return PF_OK;
}
