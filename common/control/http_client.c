/* http_client.c - blocking libcurl calls for the control plane (see http_client.h). */
#include "psflow/http_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "psflow/buf.h"
#include "psflow/mem.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

/* pf_http_set_ca_file's file, "" for the system's trust store. Written before requests
 * start (the main thread), only read afterwards. */
static char ca_file[PATH_MAX];

pf_status pf_http_set_ca_file(const char *path, pf_error *err) {
    if (!path || !*path) {
        ca_file[0] = '\0';
        return PF_OK;
    }
    if (strlen(path) >= sizeof ca_file)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "CA file path too long: %.100s...", path);
    FILE *f = fopen(path, "r");
    if (!f)
        return pf_error_set(err, PF_ERR_IO, NULL, "CA file %s: %s", path, strerror(errno));
    fclose(f);
    snprintf(ca_file, sizeof ca_file, "%s", path);
    return PF_OK;
}

/* The TLS settings every request shares: verification on (libcurl's default, said here so
 * it cannot be lost), and the CA file in place of the system's store when one is set. */
static void set_tls(CURL *c) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    if (ca_file[0]) {
        curl_easy_setopt(c, CURLOPT_CAINFO, ca_file);
        curl_easy_setopt(c, CURLOPT_CAPATH, NULL);
    }
}

/* A hint after curl's own words when the failure is the server's certificate. */
static const char *tls_hint(CURLcode rc) {
    if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE)
        return ca_file[0] ? " (the certificate is not signed by the CA of the CA file given, or "
                            "does not name this host)"
                          : " (the certificate is not trusted here: give its CA with --ca-file "
                            "or PSFLOW_CA_FILE)";
    if (rc == CURLE_SSL_CONNECT_ERROR)
        return " (TLS handshake failed: is it an https:// server?)";
    return "";
}

static void curl_init(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

#define REPLY_MAX (64u << 20) /* bytes of one reply body: far above any the API sends */

/* The reply body being received; the first failed append sticks. */
typedef struct sink {
    pf_buf body; /* NUL-terminated */
    pf_status st;
} sink;

static size_t on_body(char *ptr, size_t size, size_t n, void *ud) {
    sink *s = ud;
    size_t add = size * n;
    if ((s->st = pf_buf_append(&s->body, ptr, add)) == PF_OK)
        s->st = pf_buf_terminate(&s->body);
    return s->st == PF_OK ? add : 0; /* 0 makes curl fail the transfer */
}

static void copy_header_value(const char *line, size_t n, size_t name_len, char *dst, size_t cap) {
    const char *v = line + name_len;
    size_t left = n - name_len;
    while (left && (*v == ' ' || *v == '\t'))
        v++, left--;
    while (left && (v[left - 1] == '\r' || v[left - 1] == '\n' || v[left - 1] == ' '))
        left--;
    if (left >= cap)
        left = cap - 1;
    memcpy(dst, v, left);
    dst[left] = '\0';
}

static size_t on_header(char *line, size_t size, size_t n, void *ud) {
    pf_http_response *r = ud;
    size_t len = size * n;
    if (len > 13 && !strncasecmp(line, "content-type:", 13))
        copy_header_value(line, len, 13, r->content_type, sizeof r->content_type);
    else if (len > 9 && !strncasecmp(line, "location:", 9))
        copy_header_value(line, len, 9, r->location, sizeof r->location);
    return len;
}

static struct curl_slist *base_headers(const char *token, int json_body, const char *last_id) {
    struct curl_slist *h = NULL;
    char line[1024];
    if (token && *token) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", token);
        h = curl_slist_append(h, line);
    }
    if (json_body)
        h = curl_slist_append(h, "Content-Type: application/json");
    if (last_id && *last_id) {
        snprintf(line, sizeof line, "Last-Event-ID: %s", last_id);
        h = curl_slist_append(h, line);
    }
    h = curl_slist_append(h, "Expect:"); /* no 100-continue round trip on POST */
    return h;
}

pf_status pf_http_request(const char *method, const char *url, const char *token, const char *body,
                          size_t len, double timeout_seconds, pf_http_response *out,
                          pf_error *err) {
    memset(out, 0, sizeof *out);
    pthread_once(&curl_once, curl_init);
    CURL *c = curl_easy_init();
    if (!c)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "cannot create an HTTP handle");
    sink s = {.st = PF_OK};
    pf_buf_init(&s.body, REPLY_MAX);
    struct curl_slist *h = base_headers(token, body != NULL, NULL);
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout_seconds * 1000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout_seconds * 1000));
    set_tls(c);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    } else if (!strcmp(method, "HEAD")) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    }
    CURLcode rc = curl_easy_perform(c);
    pf_status st = PF_OK;
    if (s.st == PF_ERR_NOMEM) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory reading the reply of %s", url);
    } else if (s.st != PF_OK) {
        st = pf_error_set(err, PF_ERR_RANGE, NULL, "%s %s: the reply is larger than %u bytes",
                          method, url, REPLY_MAX);
    } else if (rc != CURLE_OK) {
        st = pf_error_set(err, PF_ERR_UNAVAILABLE, NULL, "%s %s: %s%s", method, url,
                          curl_err[0] ? curl_err : curl_easy_strerror(rc), tls_hint(rc));
    } else {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (st == PF_OK && pf_buf_terminate(&s.body) != PF_OK) /* an empty reply: "" */
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    if (st != PF_OK) {
        pf_buf_deinit(&s.body);
        out->status = 0;
        return st;
    }
    out->len = s.body.len;
    out->body = pf_buf_detach(&s.body);
    return PF_OK;
}

typedef struct stream_ctx {
    int (*on_data)(const char *data, size_t len, void *ctx);
    void *ctx;
    int stopped;
    long status;
    CURL *c;
} stream_ctx;

static size_t on_stream(char *ptr, size_t size, size_t n, void *ud) {
    stream_ctx *s = ud;
    if (!s->status)
        curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &s->status);
    if (s->status < 200 || s->status > 299)
        return size * n; /* error body: drained, reported after the transfer */
    if (s->on_data(ptr, size * n, s->ctx)) {
        s->stopped = 1;
        return 0;
    }
    return size * n;
}

pf_status pf_http_stream(const char *url, const char *token, const char *last_event_id,
                         int (*on_data)(const char *data, size_t len, void *ctx), void *ctx,
                         pf_error *err) {
    pthread_once(&curl_once, curl_init);
    CURL *c = curl_easy_init();
    if (!c)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "cannot create an HTTP handle");
    stream_ctx s = {on_data, ctx, 0, 0, c};
    struct curl_slist *h = base_headers(token, 0, last_event_id);
    h = curl_slist_append(h, "Accept: text/event-stream");
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    /* The stream sends a keepalive every 10 s: 30 s without a byte means it is gone. */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 30L);
    set_tls(c);
    CURLcode rc = curl_easy_perform(c);
    if (!s.status)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &s.status);
    pf_status st = PF_OK;
    if (s.stopped)
        st = PF_OK;
    else if (s.status && (s.status < 200 || s.status > 299))
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "GET %s: HTTP %ld", url, s.status);
    else if (rc != CURLE_OK)
        st = pf_error_set(err, PF_ERR_UNAVAILABLE, NULL, "GET %s: %s%s", url,
                          curl_err[0] ? curl_err : curl_easy_strerror(rc), tls_hint(rc));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return st;
}

void pf_http_response_deinit(pf_http_response *r) {
    pf_free(r->body);
    memset(r, 0, sizeof *r);
}

const char *pf_http_token_from_env(char *buf, size_t size, pf_error *err) {
    return pf_http_token_load("PSFLOW_TOKEN", "PSFLOW_TOKEN_FILE", buf, size, err);
}

const char *pf_http_token_load(const char *var, const char *file_var, char *buf, size_t size,
                               pf_error *err) {
    buf[0] = '\0';
    const char *t = getenv(var);
    if (t && *t) {
        if (strlen(t) >= size) {
            pf_error_set(err, PF_ERR_INVALID, NULL, "%s is longer than %zu bytes", var, size - 1);
            return NULL;
        }
        snprintf(buf, size, "%s", t);
        return buf;
    }
    const char *path = getenv(file_var);
    if (!path || !*path)
        return buf;
    FILE *f = fopen(path, "r");
    if (!f) {
        pf_error_set(err, PF_ERR_IO, NULL, "%s %s: cannot read it", file_var, path);
        return NULL;
    }
    if (!fgets(buf, (int)size, f))
        buf[0] = '\0';
    size_t n = strcspn(buf, "\r\n");
    int whole = buf[n] != '\0' || feof(f) || fgetc(f) == EOF;
    fclose(f);
    buf[n] = '\0';
    if (!whole) {
        pf_error_set(err, PF_ERR_INVALID, NULL, "%s %s: the token is longer than %zu bytes",
                     file_var, path, size - 1);
        buf[0] = '\0';
        return NULL;
    }
    return buf;
}
