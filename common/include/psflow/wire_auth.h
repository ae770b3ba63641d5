/* wire_auth.h - the data plane's proof of the job key (api/wire.md, "Authentication").
 *
 * Keys: a job key (PF_WIRE_KEY_SIZE bytes) is derived from a secret and the job's name;
 * each task's key from the job key, its role and its index. A ps holds the job key and
 * derives the key of whichever task says HELLO; a task holds its own key only. Proofs
 * are HMAC-SHA256 (OpenSSL libcrypto) under the task's key over a transcript: a label,
 * the task's whole HELLO message as sent, the ps's nonce and the task's nonce. The task
 * proves first (AUTH_PROOF); the ps answers with its own proof (AUTH_OK) under another
 * label, so each side knows the other holds the key; keys never cross the wire, and fresh
 * nonces on both sides make an old transcript worthless.
 *
 * Threads: every function is reentrant.
 */
#ifndef PSFLOW_WIRE_AUTH_H
#define PSFLOW_WIRE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/status.h"

#define PF_WIRE_KEY_SIZE   32u /* job and task keys */
#define PF_WIRE_NONCE_SIZE 32u
#define PF_WIRE_MAC_SIZE   32u /* HMAC-SHA256 */

/* Which side a proof is from: the label it is computed under. */
typedef enum { PF_WIRE_PROOF_TASK = 0, PF_WIRE_PROOF_PS = 1 } pf_wire_proof_side;

/* The job key: HMAC-SHA256(key = secret, "psflow data plane v1 job key" 0x00 job).
 * The secret is PSFLOW_TOKEN (or the first line of PSFLOW_TOKEN_FILE) as bytes. */
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

/* Clears a key in a way the compiler does not drop (OPENSSL_cleanse). */
void pf_wire_key_clear(void *key, size_t len);

#endif
