/* http_reply.c - what the coordinator's route handlers share to read a request and answer
 * it: JSON and problem+json replies (RFC 9457), the JSON object body, its allowed keys and
 * the query arguments. Calls nothing else of the coordinator.
 */
#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/coordinator_internal.h"
#include "psflow/http_guard.h"

/* --- replies --- */

void coord_reply_json(coord_reply *r, int status, json_t *json) {
    if (!json) {
        coord_reply_problem(r, 500, NULL, "out of memory");
        return;
    }
    r->status = status;
    json_decref(r->json);
    r->json = json;
}

void coord_reply_problem(coord_reply *r, int status, json_t *errors, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    json_t *p = json_pack("{s:s, s:s, s:i, s:s}", "type", "about:blank", "title",
                          pf_http_status_title(status), "status", status, "detail", detail);
    if (p && errors)
        json_object_set_new(p, "errors", errors);
    else
        json_decref(errors);
    json_decref(r->json);
    r->json = p;
    r->status = status;
    r->content_type = "application/problem+json";
}

/* --- helpers for handlers --- */

json_t *coord_parse_object(const coord_request *rq, coord_reply *rp) {
    if (!rq->body || rq->body_len == 0) {
        coord_reply_problem(rp, 400, NULL, "the request body is empty: expected a JSON object");
        return NULL;
    }
    json_error_t e;
    json_t *v = json_loadb(rq->body, rq->body_len, JSON_REJECT_DUPLICATES, &e);
    if (!v) {
        coord_reply_problem(rp, 400, NULL, "malformed JSON at line %d, column %d: %s", e.line,
                            e.column, e.text);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        coord_reply_problem(rp, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return v;
}

int coord_check_keys(json_t *obj, const char *const *allowed, const char *where, coord_reply *rp) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int ok = 0;
        for (int i = 0; allowed[i] && !ok; i++)
            ok = !strcmp(key, allowed[i]);
        if (!ok) {
            char ptr[200];
            snprintf(ptr, sizeof ptr, "%s/%.120s", where, key);
            coord_reply_problem(
                rp, 400, json_pack("[{s:s, s:s}]", "pointer", ptr, "message", "unknown field"),
                "%s: unknown field", ptr);
            return -1;
        }
    }
    return 0;
}

const char *coord_query(const coord_request *rq, const char *name) {
    return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, name);
}

int coord_query_long(const coord_request *rq, coord_reply *rp, const char *name, long long min,
                     long long max, long long fallback, long long *out) {
    const char *v = coord_query(rq, name);
    *out = fallback;
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < min || x > max) {
        coord_reply_problem(
            rp, 400, NULL, "query parameter %s: expected an integer from %lld to %lld, got '%.40s'",
            name, min, max, v);
        return -1;
    }
    *out = x;
    return 0;
}
