/* wire_auth.h - the data plane's proof of the job key (api/wire.md, "Authentication").
 *
 * Keys: a job key (PF_WIRE_KEY_SIZE bytes) is derived from a secret and the job's name;
 * each task's key from the job key, its role and its index. A ps holds the job key and
 * derives the key of whichever task says HELLO; a task needs its own key only (in managed mode
 * the coordinator hands each agent only that: docs/security.md "The data plane"). Proofs
 * are HMAC-SHA256 (OpenSSL libcrypto) under the task's key over a transcript: a label,
 * the task's whole HELLO message as sent, the ps's nonce and the task's nonce. The task
 * proves first (AUTH_PROOF); the ps answers with its own proof (AUTH_OK) under another
 * label, so each side knows the other holds the key; keys never cross the wire, and fresh
 * nonces on both sides make an old transcript worthless.
 *
 * Integrity (api/wire.md "Integrity"): on a connection that is authenticated and not TLS,
 * every message after the proofs carries a 16-byte tag, ChaCha20-Poly1305 (RFC 8439) with
 * the message as additional data and no plaintext - Poly1305 under a one-time key - under a
 * key of its direction derived from the task key and the same transcript, with a nonce of
 * the direction and the message's sequence number in that direction (from 0, never sent).
 * A pf_wire_mac holds one direction of one connection: its cipher context and the next
 * sequence number.
 *
 * Threads: every function is reentrant; one pf_wire_mac is used by one thread at a time.
 */
#ifndef PSFLOW_WIRE_AUTH_H
#define PSFLOW_WIRE_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "psflow/status.h"

#define PF_WIRE_KEY_SIZE   32u /* job and task keys */
#define PF_WIRE_NONCE_SIZE 32u
#define PF_WIRE_MAC_SIZE   32u /* HMAC-SHA256 */
#define PF_WIRE_TAG_SIZE   16u /* the Poly1305 trailer of a message after the handshake */

/* Which side a proof is from: the label it is computed under. */
typedef enum { PF_WIRE_PROOF_TASK = 0, PF_WIRE_PROOF_PS = 1 } pf_wire_proof_side;

/* The job key: HMAC-SHA256(key = secret, "psflow data plane v1 job key" 0x00 job).
 * The secret is PSFLOW_TOKEN (or the first line of PSFLOW_TOKEN_FILE) as bytes in static
 * mode, the coordinator's data-plane secret (32 random bytes) in managed mode. */
void pf_wire_job_key(const void *secret, size_t secret_len, const char *job,
                     uint8_t key[PF_WIRE_KEY_SIZE]);

/* A task's key: HMAC-SHA256(key = job key, "psflow data plane v1 task key" 0x00 role
 * task_index), role one byte and task_index a little-endian u32, as in HELLO. */
void pf_wire_task_key(const uint8_t job_key[PF_WIRE_KEY_SIZE], uint8_t role, uint32_t task_index,
                      uint8_t key[PF_WIRE_KEY_SIZE]);

/* A proof: HMAC-SHA256(key = task key, label 0x00 hello[0 .. hello_len) nonce_ps
 * nonce_task), label "psflow data plane v1 task proof" or "... ps proof". */
void pf_wire_proof(const uint8_t task_key[PF_WIRE_KEY_SIZE], pf_wire_proof_side side,
                   const void *hello, size_t hello_len, const uint8_t nonce_ps[PF_WIRE_NONCE_SIZE],
                   const uint8_t nonce_task[PF_WIRE_NONCE_SIZE], uint8_t mac[PF_WIRE_MAC_SIZE]);

/* 1 when the two MACs are equal, compared in constant time (CRYPTO_memcmp). */
int pf_wire_mac_equal(const uint8_t a[PF_WIRE_MAC_SIZE], const uint8_t b[PF_WIRE_MAC_SIZE]);

/* Fills nonce with bytes from the system's secure generator (RAND_bytes).
 * Errors: PF_ERR_IO when the generator fails. */
pf_status pf_wire_nonce(uint8_t nonce[PF_WIRE_NONCE_SIZE], pf_error *err);

/* --- integrity after the handshake ------------------------------------------------------ */

/* The direction of a message: from the task to the ps, or back. */
typedef enum { PF_WIRE_TO_PS = 0, PF_WIRE_TO_TASK = 1 } pf_wire_direction;

typedef struct pf_wire_mac pf_wire_mac;

/* A direction's key: HMAC-SHA256(key = task key, label 0x00 hello nonce_ps nonce_task),
 * label "psflow data plane v1 task-to-ps mac key" or "... ps-to-task mac key". */
void pf_wire_mac_key(const uint8_t task_key[PF_WIRE_KEY_SIZE], pf_wire_direction dir,
                     const void *hello, size_t hello_len,
                     const uint8_t nonce_ps[PF_WIRE_NONCE_SIZE],
                     const uint8_t nonce_task[PF_WIRE_NONCE_SIZE], uint8_t key[PF_WIRE_KEY_SIZE]);

/* The tag of message `seq` in direction dir under a direction's key, over the message made
 * of parts[0 .. n) (ChaCha20-Poly1305, 12-byte nonce = u32 dir, u64 seq, little-endian;
 * the parts are the additional data, there is no plaintext). For tests; pf_wire_mac keeps
 * the context. */
void pf_wire_tag(const uint8_t key[PF_WIRE_KEY_SIZE], pf_wire_direction dir, uint64_t seq,
                 const struct iovec *parts, int n, uint8_t tag[PF_WIRE_TAG_SIZE]);

/* A new direction of a connection whose handshake had this task key, HELLO and nonces; its
 * first message is number 0. Returns NULL when memory is short. Destroy with
 * pf_wire_mac_destroy (NULL is ignored), which clears the key. */
pf_wire_mac *pf_wire_mac_create(const uint8_t task_key[PF_WIRE_KEY_SIZE], pf_wire_direction dir,
                                const void *hello, size_t hello_len,
                                const uint8_t nonce_ps[PF_WIRE_NONCE_SIZE],
                                const uint8_t nonce_task[PF_WIRE_NONCE_SIZE]);
void pf_wire_mac_destroy(pf_wire_mac *m);

/* Sending: the tag of the next message, made of parts[0 .. n); the sequence number moves on.
 * The sender appends the tag to the message. */
void pf_wire_mac_sign(pf_wire_mac *m, const struct iovec *parts, int n,
                      uint8_t tag[PF_WIRE_TAG_SIZE]);

/* Sending as the message is written: begin, update with its bytes in order (split
 * anywhere), then end writes its tag and moves the sequence number on; the same tag as
 * pf_wire_mac_sign over the same bytes (which is the three at once). */
void pf_wire_mac_sign_begin(pf_wire_mac *m);
void pf_wire_mac_sign_update(pf_wire_mac *m, const void *data, size_t n);
void pf_wire_mac_sign_end(pf_wire_mac *m, uint8_t tag[PF_WIRE_TAG_SIZE]);

/* Receiving a message as it arrives, in one pass while its bytes are in cache: begin, then
 * update with its bytes in order, split anywhere (the last PF_WIRE_TAG_SIZE bytes fed are
 * taken as its tag: the receiver need not know the message's length until it ends), then
 * verify once the last byte is in. pf_wire_mac_begin forgets a message begun and not
 * verified. pf_wire_mac_update without a message begun does nothing. */
void pf_wire_mac_begin(pf_wire_mac *m);
void pf_wire_mac_update(pf_wire_mac *m, const void *data, size_t n);

/* The bytes fed to the message begun (0 when none is): a receiver checks that they are the
 * whole message it was handed before it verifies. */
size_t pf_wire_mac_fed(const pf_wire_mac *m);

/* Ends the message begun: 1 when the bytes fed end in the right tag of the next message over
 * the bytes before it (the sequence number then moves on), else 0 (none begun, too short, or
 * a tag of another message, key, direction or position: nothing moves). Compared in constant
 * time. */
int pf_wire_mac_verify(pf_wire_mac *m);

/* Receiving a message that is whole in memory: begin, update with msg[0 .. len), verify (the
 * message is len - PF_WIRE_TAG_SIZE bytes, then its tag). */
int pf_wire_mac_check(pf_wire_mac *m, const uint8_t *msg, size_t len);

/* The sequence number of the next message (for tests and logs). */
uint64_t pf_wire_mac_seq(const pf_wire_mac *m);

/* Clears a key in a way the compiler does not drop (OPENSSL_cleanse). */
void pf_wire_key_clear(void *key, size_t len);

/* --- keys as text, and the key of a task TF_CONFIG names -------------------------------- */

#define PF_WIRE_KEY_HEX_SIZE (2 * PF_WIRE_KEY_SIZE + 1) /* 64 hex digits and a NUL */

/* The key as 64 lowercase hex digits (how the coordinator's assignment and a key file carry it). */
void pf_wire_key_hex(const uint8_t key[PF_WIRE_KEY_SIZE], char hex[PF_WIRE_KEY_HEX_SIZE]);

/* Parses text[0 .. len): exactly 64 hex digits, then only blanks or line ends. Errors:
 * PF_ERR_FORMAT (key untouched). */
pf_status pf_wire_key_parse_hex(const char *text, size_t len, uint8_t key[PF_WIRE_KEY_SIZE]);

/* The key of the training, evaluator or reader task that TF_CONFIG names type (chief, worker,
 * evaluator or reader: a psflow serve --ps) and index, in a job with or without a chief task: the
 * key of the role and task index its HELLO says (chief 0; the first worker of a job without a chief
 * is the chief; a worker's task index is index + 1 when the job has a chief). Errors:
 * PF_ERR_INVALID for a ps (it holds the job key), another type or a negative index. */
pf_status pf_wire_task_key_for(const uint8_t job_key[PF_WIRE_KEY_SIZE], const char *type, int index,
                               int has_chief, uint8_t key[PF_WIRE_KEY_SIZE]);

#endif
