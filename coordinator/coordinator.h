/* coordinator.h - `psflow coordinator`: the REST API (api/rest.md), the event stream and
 * the dashboard's files over libmicrohttpd, with the cluster state machine (cluster.h)
 * persisted in SQLite (store.h).
 *
 * Lifecycle: coord_server_start() opens and migrates the database, loads the state, starts
 * the HTTP daemon and the ticker (leases, deadlines, admission); coord_server_wait() blocks
 * until coord_server_stop() (async-signal-safe) is called; coord_server_destroy() stops
 * everything and frees it.
 */
#ifndef PSFLOW_COORDINATOR_H
#define PSFLOW_COORDINATOR_H

#include "coordinator/admission.h"
#include "psflow/status.h"

typedef struct coord_options {
    const char *listen_host; /* NULL or "0.0.0.0": every interface */
    int port;                /* 0: ephemeral (see coord_server_port) */
    const char *db_path;
    const char *web_dir;      /* dashboard files; NULL: none */
    const char *openapi_path; /* api/openapi.yaml to serve; NULL: none */
    const char *token;        /* bearer token; NULL or "": no authentication */
    /* The agents' bearer token: the agent routes (registration, heartbeat, deregistration,
     * metric and checkpoint reports) take it or the API token, and nothing else, even where
     * the API is open; it grants nothing else. NULL or "": those routes are authenticated
     * like the rest (`psflow coordinator` always sets one). */
    const char *agent_token;
    double lease_seconds; /* agents lost after this long without a heartbeat */
    /* how long a preempted job may take its final checkpoint before its agents are freed
     * (coord_cluster.preempt_grace); 0: freed at once, no final checkpoint */
    double preempt_grace_seconds;
    int max_connections;    /* concurrent HTTP connections */
    int connection_timeout; /* seconds an idle connection is kept */
    int max_streams;        /* event streams open at once (<= max_connections / 2) */
    int max_per_address;    /* connections from one client address; 0: 32 */
    int header_timeout;     /* seconds a request's headers may take; 0: 10 */
    int body_timeout;       /* seconds its body may take after the headers; 0: 30 */
    int evict_after_ms;     /* a request this late may be evicted for a newcomer; 0: 500 */
    /* Host names the API answers to besides its own (http_guard.h); "*": any */
    const char *const *allowed_hosts;
    int n_allowed_hosts;
    /* CORS: origins ("https://host:port") whose pages may call the API; none by default */
    const char *const *cors_origins;
    int n_cors_origins;
    /* TLS: PEM text of the certificate (chain) and its private key; both NULL: plain HTTP */
    const char *tls_cert_pem;
    const char *tls_key_pem;
    coord_limits limits; /* admission: data roots, size limits (admission.h) */
} coord_options;

typedef struct coord_server coord_server;

/* Errors: PF_ERR_IO (database, listening socket) with a message; PF_ERR_NOMEM. */
pf_status coord_server_start(const coord_options *o, coord_server **out, pf_error *err);
int coord_server_port(const coord_server *s);
void coord_server_wait(coord_server *s);
void coord_server_stop(coord_server *s);
void coord_server_destroy(coord_server *s);

#endif
