/* http_client.h - a small blocking HTTP client (libcurl) for the control plane: the CLI's
 * API commands and the agents' registration, heartbeats and metric reports.
 *
 * Every call is independent (one easy handle per call; connections are not reused across
 * calls) and safe to make from any thread. Bodies are JSON. The bearer token, when given,
 * is sent as "Authorization: Bearer <token>". https:// URLs are verified (certificate and
 * host name) against the system's CA certificates, or only against those of the file
 * pf_http_set_ca_file() names.
 */
#ifndef PSFLOW_HTTP_CLIENT_H
#define PSFLOW_HTTP_CLIENT_H

#include <stddef.h>

#include "psflow/status.h"

typedef struct pf_http_response {
    long status;            /* HTTP status code; 0 when no response arrived */
    char *body;             /* new, NUL-terminated (free with pf_http_response_deinit) */
    size_t len;             /* bytes in body, without the NUL */
    char content_type[128]; /* "" when absent */
    char location[512];     /* the Location header, "" when absent */
} pf_http_response;

/* Sends METHOD url with body (NULL: none; else len bytes sent as application/json) and
 * waits at most timeout_seconds. Returns PF_OK whenever a response arrived, whatever its
 * status; PF_ERR_UNAVAILABLE when the server could not be reached or timed out (message
 * names the URL and the reason); PF_ERR_RANGE when the reply body is over 64 MiB;
 * PF_ERR_NOMEM. *out is always initialised. */
pf_status pf_http_request(const char *method, const char *url, const char *token, const char *body,
                          size_t len, double timeout_seconds, pf_http_response *out, pf_error *err);

/* Streams GET url (e.g. Server-Sent Events): calls on_data for every chunk received until
 * it returns non-zero or the connection ends. PF_OK when the server ended the response or
 * on_data stopped it; PF_ERR_UNAVAILABLE on connection errors; PF_ERR_FORMAT when the
 * status is not 2xx (message holds the status). */
pf_status pf_http_stream(const char *url, const char *token, const char *last_event_id,
                         int (*on_data)(const char *data, size_t len, void *ctx), void *ctx,
                         pf_error *err);

void pf_http_response_deinit(pf_http_response *r);

/* Trusts only the CA certificates of the PEM file at path for every https:// request this
 * process makes from now on (a private CA, a self-signed coordinator); NULL or "" goes back
 * to the system's trust store. Call from the main thread before any request is made.
 * PF_ERR_IO (message naming the path) when the file cannot be read, PF_ERR_INVALID when
 * the path is too long; the setting is then unchanged. */
pf_status pf_http_set_ca_file(const char *path, pf_error *err);

/* The API token from PSFLOW_TOKEN, else the first line of the file PSFLOW_TOKEN_FILE
 * names; "" when neither is set. Returns buf, or NULL when PSFLOW_TOKEN_FILE is set but
 * unreadable (err says why). */
const char *pf_http_token_from_env(char *buf, size_t size, pf_error *err);

/* The same for another pair of variables: the token in the environment variable `var`,
 * else the first line of the file `file_var` names (pf_http_token_from_env is
 * ("PSFLOW_TOKEN", "PSFLOW_TOKEN_FILE")). */
const char *pf_http_token_load(const char *var, const char *file_var, char *buf, size_t size,
                               pf_error *err);

#endif
