/* ws_tls.c - TLS for a data-plane client endpoint (ws_internal.h): OpenSSL over memory BIOs.
 *
 * libwebsockets 4.1 cannot start TLS on a raw client connection (it begins the TLS
 * handshake before the socket exists), so a client dials plain TCP through libwebsockets
 * and runs TLS itself: the bytes libwebsockets reads are the ciphertext, fed to OpenSSL
 * through a memory BIO, and what OpenSSL writes (handshake records, encrypted messages)
 * is collected in the connection's tls_out and written by the loop with lws_write. The
 * server's certificate chain is verified against the CA file and its name (or IP address)
 * against the host dialled; a connection that fails either is closed and logged.
 *
 * Below ws.c and ws_send.c, it calls nothing of theirs (only ws_log.c's log): it hands
 * plaintext up when asked (ws_tls_read) and says when the handshake is done (c->tls_ready);
 * ws.c parses the one and sends the WebSocket upgrade on the other. pf_ws_probe_tls, on a
 * socket of its own, tells a plain client that could not connect whether the server speaks TLS.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "ws_internal.h"

pf_status ws_tls_client_init(pf_ws *ws, const char *ca_file, pf_error *err) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "cannot create a TLS context");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
        SSL_CTX_free(ctx);
        return pf_error_set(err, PF_ERR_IO, NULL, "cannot load the CA file %s", ca_file);
    }
    ws->ssl_ctx = ctx;
    return PF_OK;
}

void ws_tls_client_deinit(pf_ws *ws) {
    SSL_CTX_free(ws->ssl_ctx);
    ws->ssl_ctx = NULL;
}

void ws_tls_conn_free(conn *c) {
    SSL_free(c->ssl); /* frees its BIOs */
    c->ssl = NULL;
    pf_buf_deinit(&c->tls_out);
}

/* Moves what OpenSSL wrote into c->tls_out (behind LWS_PRE bytes of headroom) and asks
 * for WRITEABLE. Returns -1 when memory is short. */
static int collect(conn *c) {
    BIO *w = SSL_get_wbio(c->ssl);
    int pending = (int)BIO_ctrl_pending(w);
    if (pending <= 0)
        return 0;
    if (c->tls_out.len == 0 && pf_buf_reserve(&c->tls_out, LWS_PRE) == PF_OK)
        c->tls_out.len = LWS_PRE;
    void *dst;
    if (c->tls_out.len < LWS_PRE || pf_buf_extend(&c->tls_out, (size_t)pending, &dst) != PF_OK)
        return -1;
    if (BIO_read(w, dst, pending) != pending)
        return -1;
    lws_callback_on_writable(c->wsi);
    return 0;
}

/* Logs (rate-limited) why the TLS connection failed: the certificate check's verdict when it
 * failed. */
static void log_failure(pf_ws *ws, conn *c) {
    long v = SSL_get_verify_result(c->ssl);
    unsigned long e = ERR_get_error();
    char why[256];
    if (v != X509_V_OK)
        snprintf(why, sizeof why, "the ps's certificate is not trusted: %s",
                 X509_verify_cert_error_string(v));
    else if (e)
        ERR_error_string_n(e, why, sizeof why);
    else
        snprintf(why, sizeof why, "the connection closed during the handshake");
    ERR_clear_error();
    ws_refused(ws, REF_TLS, "TLS to %s:%d failed: %s", c->host, c->port, why);
}

int ws_tls_start(pf_ws *ws, conn *c) {
    BIO *r = BIO_new(BIO_s_mem()), *w = BIO_new(BIO_s_mem());
    c->ssl = SSL_new(ws->ssl_ctx);
    if (!r || !w || !c->ssl) {
        BIO_free(r);
        BIO_free(w);
        return -1;
    }
    SSL_set_bio(c->ssl, r, w);
    SSL_set_connect_state(c->ssl);
    pf_buf_init(&c->tls_out, SIZE_MAX);
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, c->host, ip) == 1 || inet_pton(AF_INET6, c->host, ip) == 1;
    if (is_ip) {
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), c->host) != 1)
            return -1;
    } else if (SSL_set1_host(c->ssl, c->host) != 1 ||
               SSL_set_tlsext_host_name(c->ssl, c->host) != 1) {
        return -1;
    }
    int n = SSL_do_handshake(c->ssl); /* writes the ClientHello */
    if (n <= 0 && SSL_get_error(c->ssl, n) != SSL_ERROR_WANT_READ) {
        log_failure(ws, c);
        return -1;
    }
    return collect(c);
}

int ws_tls_rx(pf_ws *ws, conn *c, const uint8_t *in, size_t len) {
    if (len > INT32_MAX || BIO_write(SSL_get_rbio(c->ssl), in, (int)len) != (int)len)
        return -1;
    if (c->tls_ready)
        return 0;
    int n = SSL_do_handshake(c->ssl);
    if (n <= 0) {
        int e = SSL_get_error(c->ssl, n);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
            log_failure(ws, c);
            return -1;
        }
        return collect(c);
    }
    c->tls_ready = 1;
    return collect(c);
}

int ws_tls_read(pf_ws *ws, conn *c, uint8_t *buf, int cap) {
    int n = SSL_read(c->ssl, buf, cap);
    if (n > 0)
        return n;
    int e = SSL_get_error(c->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return collect(c);
    if (e != SSL_ERROR_ZERO_RETURN)
        log_failure(ws, c);
    return -1; /* the peer's close_notify, or an error */
}

int ws_tls_write(conn *c, const uint8_t *p, size_t n) {
    while (n > 0) {
        int k = SSL_write(c->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return collect(c);
}

int ws_tls_flush(struct lws *wsi, conn *c) {
    if (c->tls_out.len <= LWS_PRE)
        return 0;
    size_t n = c->tls_out.len - LWS_PRE;
    if (lws_write(wsi, c->tls_out.data + LWS_PRE, n, LWS_WRITE_RAW) < (int)n)
        return -1;
    pf_buf_reset(&c->tls_out);
    return 0;
}

/* --- probing a server that a plain client could not reach --------------------------------- */

int pf_ws_probe_tls(const char *host, int port, double timeout_s) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (port < 1 || port > 65535 || getaddrinfo(host, service, &hints, &res) != 0)
        return 0;
    struct timeval tv = {(time_t)timeout_s,
                         (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        /* Bounded: on Linux SO_SNDTIMEO bounds connect too. */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return 0;
    /* Any certificate will do: this only asks whether the server answers a ClientHello. */
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = ctx ? SSL_new(ctx) : NULL;
    int tls = ssl && SSL_set_fd(ssl, fd) == 1 && SSL_connect(ssl) == 1;
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    ERR_clear_error();
    close(fd);
    return tls;
}
