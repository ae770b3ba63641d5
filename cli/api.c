/* api.c - what the REST API clients share (see api.h). */
#include "cli/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli_internal.h"
#include "cli/options.h"
#include "psflow/clock.h"
#include "psflow/mem.h"

int api_client_init(api_client *c, const char *cmd, const cli_option *opts, int n_opts,
                    bool need_token) {
    memset(c, 0, sizeof *c);
    c->cmd = cmd;
    const char *url = cli_get(opts, n_opts, "coordinator");
    if (!url)
        url = API_DEFAULT_COORDINATOR;
    int rc = cli_use_ca_file(cmd, opts, n_opts);
    if (rc)
        return rc;
    /* "host:port" alone is taken as plain HTTP; https:// must be said. */
    int n = snprintf(c->base, sizeof c->base, "%s%s", strstr(url, "://") ? "" : "http://", url);
    if (n < 0 || (size_t)n >= sizeof c->base) {
        fprintf(stderr, "psflow %s: --coordinator URL is too long\n", cmd);
        return PF_EX_USAGE;
    }
    while (n > 0 && c->base[n - 1] == '/')
        c->base[--n] = '\0';
    return need_token ? cli_token(cmd, c->token, sizeof c->token) : 0;
}

char *api_url_escape(const char *s, char *dst, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' || *p == '~';
        if (o + (plain ? 1 : 3) >= cap)
            return NULL;
        if (plain) {
            dst[o++] = (char)*p;
        } else {
            dst[o++] = '%';
            dst[o++] = hex[*p >> 4];
            dst[o++] = hex[*p & 15];
        }
    }
    dst[o] = '\0';
    return dst;
}

int api_job_ref_init(api_job_ref *j, const char *cmd, const char *name, const char *suffix) {
    j->name = name;
    if (!api_url_escape(name, j->escaped, sizeof j->escaped))
        return cli_usage_error(cmd, "job NAME too long");
    snprintf(j->path, sizeof j->path, "/api/v1/jobs/%s%s", j->escaped, suffix);
    snprintf(j->not_found, sizeof j->not_found, "no job named '%s'", name);
    return 0;
}

int api_url(const api_client *c, const char *path, char *url, size_t cap) {
    int n = snprintf(url, cap, "%s%s", c->base, path);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "psflow %s: URL too long\n", c->cmd);
        return PF_EX_USAGE;
    }
    return 0;
}

pf_status api_try(const api_client *c, const char *method, const char *path, const char *body,
                  size_t len, double timeout, pf_http_response *out, pf_error *why) {
    char url[2048];
    pf_error_clear(why);
    memset(out, 0, sizeof *out);
    if (snprintf(url, sizeof url, "%s%s", c->base, path) >= (int)sizeof url)
        return pf_error_set(why, PF_ERR_INVALID, NULL, "URL too long");
    return pf_http_request(method, url, c->token, body, len, timeout, out, why);
}

int api_call(const api_client *c, const char *method, const char *path, const char *body,
             size_t len, double timeout, pf_http_response *out) {
    pf_error why;
    pf_status st = api_try(c, method, path, body, len, timeout, out, &why);
    if (st == PF_OK)
        return 0;
    fprintf(stderr, "psflow %s: %s%s\n", c->cmd,
            st == PF_ERR_UNAVAILABLE ? "coordinator unreachable: " : "", why.message);
    return pf_exit_code(st);
}

int api_call_job(const api_client *c, const char *method, const api_job_ref *j,
                 pf_http_response *out) {
    return api_send_job(c, method, j, NULL, out);
}

int api_send_job(const api_client *c, const char *method, const api_job_ref *j, const char *body,
                 pf_http_response *out) {
    int rc = api_call(c, method, j->path, body, body ? strlen(body) : 0, API_REQUEST_TIMEOUT, out);
    if (rc || (out->status >= 200 && out->status < 300))
        return rc;
    rc = api_report_error(c, out, j->not_found);
    pf_http_response_deinit(out);
    return rc;
}

const char *api_jstr(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

bool api_jnum(const json_t *o, const char *key, double *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return true;
}

long long api_jint(const json_t *o, const char *key, long long fallback) {
    double v;
    return api_jnum(o, key, &v) ? (long long)v : fallback;
}

json_t *api_body_json(const pf_http_response *r) {
    if (!r->body || !r->len)
        return NULL;
    return json_loadb(r->body, r->len, 0, NULL);
}

void api_print_problem(const api_client *c, const char *prefix, const pf_http_response *r) {
    json_t *doc = api_body_json(r);
    const char *detail = api_jstr(doc, "detail");
    if (!detail || !*detail)
        detail = api_jstr(doc, "title");
    char line[512] = "";
    if (!detail && r->body && r->len) {
        size_t n = strcspn(r->body, "\r\n");
        snprintf(line, sizeof line, "%.*s", (int)(n < 300 ? n : 300), r->body);
        detail = line;
    }
    fprintf(stderr, "psflow %s: %s%s%s (HTTP %ld)\n", c->cmd, prefix ? prefix : "",
            prefix && detail && *detail ? ": " : "", detail ? detail : "", r->status);
    json_t *errors = json_object_get(doc, "errors");
    size_t i;
    json_t *e;
    json_array_foreach(errors, i, e) {
        const char *ptr = api_jstr(e, "pointer");
        const char *msg = api_jstr(e, "message");
        /* A message that already starts with its pointer is shown without the repeat. */
        size_t plen = ptr ? strlen(ptr) : 0;
        if (msg && plen && !strncmp(msg, ptr, plen) && !strncmp(msg + plen, ": ", 2))
            msg += plen + 2;
        fprintf(stderr, "  %s: %s\n", ptr && *ptr ? ptr : "/", msg ? msg : "invalid");
    }
    json_decref(doc);
}

/* The exit code for an error status: 77 not allowed, 69 server trouble, 1 the rest. */
static int status_exit(long status) {
    if (status == 401 || status == 403)
        return PF_EX_NOPERM;
    if (status >= 500 || status == 0)
        return PF_EX_UNAVAILABLE;
    return 1;
}

int api_report_error(const api_client *c, const pf_http_response *r, const char *not_found) {
    if (r->status == 401) {
        if (c->token[0])
            fprintf(stderr, "psflow %s: the coordinator rejected the token from %s\n", c->cmd,
                    getenv("PSFLOW_TOKEN") && *getenv("PSFLOW_TOKEN") ? "PSFLOW_TOKEN"
                                                                      : "PSFLOW_TOKEN_FILE");
        else
            fprintf(stderr,
                    "psflow %s: the coordinator requires a token: set PSFLOW_TOKEN or "
                    "PSFLOW_TOKEN_FILE\n",
                    c->cmd);
    } else if (r->status == 404 && not_found) {
        fprintf(stderr, "psflow %s: %s\n", c->cmd, not_found);
    } else {
        api_print_problem(c, r->status >= 500 ? "coordinator error" : NULL, r);
    }
    return status_exit(r->status);
}

void api_format_age(double seconds, char *buf, size_t cap) {
    long long s = seconds < 0 ? 0 : (long long)seconds;
    if (s < 120)
        snprintf(buf, cap, "%llds", s);
    else if (s < 7200)
        snprintf(buf, cap, "%lldm", s / 60);
    else if (s < 172800)
        snprintf(buf, cap, "%lldh", s / 3600);
    else
        snprintf(buf, cap, "%lldd", s / 86400);
}

void api_view_update(api_job_view *v, const json_t *o) {
    const char *s;
    if ((s = api_jstr(o, "phase")))
        snprintf(v->phase, sizeof v->phase, "%s", s);
    if ((s = api_jstr(o, "message")))
        snprintf(v->message, sizeof v->message, "%s", s);
    if ((s = api_jstr(o, "reason"))) {
        snprintf(v->reason, sizeof v->reason, "%s", s);
    } else {
        /* A full status names the reason in the condition of its current phase. */
        size_t i;
        json_t *cond;
        json_array_foreach(json_object_get(o, "conditions"), i, cond) {
            if ((s = api_jstr(cond, "type")) && !strcmp(s, v->phase) && api_jstr(cond, "reason"))
                snprintf(v->reason, sizeof v->reason, "%s", api_jstr(cond, "reason"));
        }
    }
    v->step = api_jint(o, "global_step", v->step);
    v->max_steps = api_jint(o, "max_steps", v->max_steps);
    if (json_object_get(o, "loss"))
        v->has_loss = api_jnum(o, "loss", &v->loss);
    if (json_object_get(o, "accuracy"))
        v->has_accuracy = api_jnum(o, "accuracy", &v->accuracy);
    if (json_object_get(o, "test_loss"))
        v->has_test_loss = api_jnum(o, "test_loss", &v->test_loss);
    if (json_object_get(o, "test_auc"))
        v->has_test_auc = api_jnum(o, "test_auc", &v->test_auc);
    if (json_object_get(o, "test_calibration"))
        v->has_test_calibration = api_jnum(o, "test_calibration", &v->test_calibration);
    if (json_object_get(o, "steps_per_sec"))
        v->has_rate = api_jnum(o, "steps_per_sec", &v->steps_per_sec) && v->steps_per_sec > 0;
    if (json_object_get(o, "eta_seconds"))
        v->has_eta = api_jnum(o, "eta_seconds", &v->eta_seconds) && v->eta_seconds >= 0;
}

void api_format_steps(const api_job_view *v, char *buf, size_t cap) {
    if (v->step < 0)
        snprintf(buf, cap, "-");
    else if (v->max_steps > 0)
        snprintf(buf, cap, "%lld/%lld", v->step, v->max_steps);
    else
        snprintf(buf, cap, "%lld", v->step);
}

/* ---- waiting for a change of a job --------------------------------------------------------- */

static bool phase_is_final(const char *phase) {
    return phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
}

/* GETs path into *out. Returns false while the coordinator is unreachable or answers 5xx,
 * having said so once per outage. */
static bool poll_get(const api_client *c, const char *path, bool *outage, pf_http_response *out) {
    pf_error why;
    char msg[sizeof why.message];
    if (api_try(c, "GET", path, NULL, 0, API_REQUEST_TIMEOUT, out, &why) != PF_OK) {
        snprintf(msg, sizeof msg, "%s", why.message);
    } else if (out->status >= 500) {
        snprintf(msg, sizeof msg, "HTTP %ld", out->status);
        pf_http_response_deinit(out);
    } else {
        *outage = false;
        return true;
    }
    if (!*outage)
        fprintf(stderr, "psflow %s: coordinator unreachable, retrying (%s)\n", c->cmd, msg);
    *outage = true;
    return false;
}

/* The exit code of an answer other than 200 while waiting (the job gone: 1). */
static int wait_error(const api_client *c, const api_job_ref *j, pf_http_response *r) {
    char gone[600];
    snprintf(gone, sizeof gone, "job %s no longer exists", j->name);
    int rc = api_report_error(c, r, gone);
    pf_http_response_deinit(r);
    return rc;
}

int api_wait_job(const api_client *c, const api_job_ref *j, bool tasks, api_wait_test test,
                 void *ctx, json_t **last) {
    char tasks_path[sizeof j->path + 8], shown[400] = "";
    snprintf(tasks_path, sizeof tasks_path, "%s/tasks", j->path);
    bool outage = false;
    *last = NULL;
    for (bool first = true;; first = false) {
        if (!first)
            pf_clock_sleep(1.0);
        pf_http_response r;
        if (!poll_get(c, j->path, &outage, &r))
            continue;
        if (r.status == 404 && !test) {
            pf_http_response_deinit(&r);
            json_decref(*last);
            *last = NULL;
            return 0;
        }
        if (r.status != 200)
            return wait_error(c, j, &r);
        json_t *job = api_body_json(&r);
        pf_http_response_deinit(&r);
        if (!json_is_object(job)) {
            json_decref(job);
            fprintf(stderr, "psflow %s: the coordinator's answer is not a job\n", c->cmd);
            return PF_EX_UNAVAILABLE;
        }
        json_decref(*last);
        *last = job;
        json_t *task_doc = NULL;
        if (tasks && test) {
            if (!poll_get(c, tasks_path, &outage, &r))
                continue;
            if (r.status != 200)
                return wait_error(c, j, &r);
            task_doc = api_body_json(&r);
            pf_http_response_deinit(&r);
        }
        char line[256] = "";
        bool done = test && test(job, json_object_get(task_doc, "items"), ctx, line, sizeof line);
        json_decref(task_doc);
        const char *phase = api_jstr(json_object_get(job, "status"), "phase");
        if (done)
            return 0;
        if (test && phase_is_final(phase))
            return strcmp(phase, "Succeeded") ? 1 : 0;
        char now[sizeof shown];
        snprintf(now, sizeof now, "%s (%s)", line[0] ? line : "waiting", phase ? phase : "?");
        if (strcmp(now, shown) != 0) {
            fprintf(stderr, "psflow %s: job %s: %s\n", c->cmd, j->name, now);
            snprintf(shown, sizeof shown, "%s", now);
        }
    }
}

void api_print_job_line(const char *name, const json_t *job, const char *what) {
    api_job_view v = {.step = -1, .max_steps = -1};
    api_view_update(&v, json_object_get(job, "status"));
    if (!strcmp(v.phase, "Succeeded")) {
        printf("job %s: Succeeded\n", name);
    } else if (!strcmp(v.phase, "Failed")) {
        bool why = v.reason[0] || v.message[0];
        printf("job %s: Failed%s%s%s%s%s\n", name, why ? " (" : "", v.reason,
               v.reason[0] && v.message[0] ? ": " : "", v.message, why ? ")" : "");
    } else {
        printf("job %s: %s (%s)\n", name, what, v.phase[0] ? v.phase : "?");
    }
}

void api_print_waited(const char *name, const json_t *last, int rc, bool json, const char *what) {
    if (!last || (rc != 0 && !phase_is_final(api_jstr(json_object_get(last, "status"), "phase"))))
        return;
    if (json) {
        json_dumpf(last, stdout, JSON_COMPACT);
        putchar('\n');
    } else {
        api_print_job_line(name, last, what);
    }
}

void api_print_body(const pf_http_response *r) {
    fwrite(r->body, 1, r->len, stdout);
    if (!r->len || r->body[r->len - 1] != '\n')
        fputc('\n', stdout);
}
