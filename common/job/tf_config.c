/* tf_config.c - TF_CONFIG: read what TensorFlow reads, write what Kubeflow's operator writes.
 *
 * DESIGN: parsing goes through jansson (duplicate keys rejected) and follows TensorFlow's
 * TFConfigClusterResolver and ClusterSpec: a job is a list of addresses or a sparse object
 * {"<index>": "host:port"}, task.index may be a number or a decimal string, task.type may
 * be a number (TensorFlow casts it with str()), and keys it does not know are skipped.
 * Writing does not go through jansson: the string is built here in two passes (count, then
 * fill one allocation), so the bytes are exactly the operator's Go encoding/json output of
 * {cluster, task, environment} with job names sorted. Parts that a config does not have are
 * left out (no jobs: no "cluster"; no task: no "task"; an empty environment: no
 * "environment"), and a job with gaps is written in the sparse form, so that
 * format(parse(format(c))) == format(c) for every parsed c (the fuzz target checks this).
 */
#include "psflow/tf_config.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/address.h"
#include "psflow/mem.h"
#include "psflow/text.h"

#define PTR_MAX   ((size_t)sizeof(((pf_error *)0)->pointer))
#define SHOWN_MAX 48 /* bytes of a name or pointer quoted in a message */

/* The task types a psflow node can run as, sorted, as named in messages. TFJob's legacy name for
 * the chief, "master", is read as "chief" (a job and a task type; see parse_cluster). */
static const char *const known_types[] = {"chief", "evaluator", "ps", "worker"};
#define KNOWN_TYPES_TEXT "chief, evaluator, ps, worker"
#define LEGACY_CHIEF     "master"

/* --- messages and pointers -------------------------------------------------------------------- */

/* A one-line, bounded copy of s for a message: control bytes become '?', and a long s is cut
 * at a UTF-8 character boundary and ends in "...". */
static const char *shown(char buf[SHOWN_MAX + 4], const char *s) {
    size_t n = 0;
    for (; s[n] && n < SHOWN_MAX; n++)
        buf[n] = ((unsigned char)s[n] < 0x20 || s[n] == 0x7f) ? '?' : s[n];
    if (s[n]) {
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
        memcpy(buf + n, "...", 4);
    } else {
        buf[n] = '\0';
    }
    return buf;
}

/* jansson's message quotes the input near the error, raw: control bytes and non-ASCII bytes
 * (possibly a broken UTF-8 sequence) become '?' so the message stays one clean line. */
static void clean_jansson_text(char *text) {
    for (; *text; text++)
        if ((unsigned char)*text < 0x20 || (unsigned char)*text >= 0x7f)
            *text = '?';
}

static const char *kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        break;
    }
    return "null";
}

/* PF_ERR_FORMAT with "TF_CONFIG: <pointer>: <what>" (no pointer part for the root). */
static pf_status fail(pf_error *err, const char *ptr, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static pf_status fail(pf_error *err, const char *ptr, const char *fmt, ...) {
    char what[192], where[SHOWN_MAX + 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!ptr[0])
        return pf_error_set(err, PF_ERR_FORMAT, ptr, "TF_CONFIG: %s", what);
    return pf_error_set(err, PF_ERR_FORMAT, ptr, "TF_CONFIG: %s: %s", shown(where, ptr), what);
}

static pf_status nomem(pf_error *err) {
    return pf_error_set(err, PF_ERR_NOMEM, NULL, "TF_CONFIG: out of memory");
}

/* --- jobs ------------------------------------------------------------------------------------- */

static int clamp_jobs(const pf_tf_config *cfg) {
    return cfg->n_jobs < 0 ? 0 : cfg->n_jobs > PF_TF_MAX_JOBS ? PF_TF_MAX_JOBS : cfg->n_jobs;
}

static pf_tf_job *find_job(const pf_tf_config *cfg, const char *name) {
    int n = clamp_jobs(cfg);
    for (int i = 0; i < n; i++)
        if (strncmp(cfg->jobs[i].name, name, PF_TF_NAME_MAX) == 0)
            return (pf_tf_job *)&cfg->jobs[i];
    return NULL;
}

/* A new, empty job named name (shorter than PF_TF_NAME_MAX) at its sorted place. The caller
 * has checked that there is room and that no job has that name. */
static pf_tf_job *insert_job(pf_tf_config *cfg, const char *name) {
    int at = 0;
    while (at < cfg->n_jobs && strcmp(cfg->jobs[at].name, name) < 0)
        at++;
    memmove(&cfg->jobs[at + 1], &cfg->jobs[at], (size_t)(cfg->n_jobs - at) * sizeof cfg->jobs[0]);
    cfg->n_jobs++;
    pf_tf_job *job = &cfg->jobs[at];
    memset(job, 0, sizeof *job);
    memcpy(job->name, name, strlen(name) + 1);
    return job;
}

static void free_addrs(char **addrs, int n) {
    if (!addrs)
        return;
    for (int i = 0; i < n; i++)
        pf_free(addrs[i]);
    pf_free(addrs);
}

/* --- parsing ---------------------------------------------------------------------------------- */

static pf_status parse_address(const json_t *v, const char *ptr, char **out, pf_error *err) {
    if (!json_is_string(v))
        return fail(err, ptr, "expected an address string \"host:port\", got %s", kind(v));
    /* jansson refuses "\u0000" in strings, so strlen agrees with the JSON length. */
    if (json_string_length(v) > PF_TF_ADDR_MAX - 1)
        return fail(err, ptr, "address is longer than %d bytes", PF_TF_ADDR_MAX - 1);
    if (!(*out = pf_strdup(json_string_value(v))))
        return nomem(err);
    return PF_OK;
}

/* Decimal digits as a task index: -1 when s is not all digits (or empty), PF_TF_MAX_TASKS when
 * the number is at least that. TensorFlow casts these with int(). */
static int digits_index(const char *s) {
    if (!*s)
        return -1;
    int x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (x < PF_TF_MAX_TASKS)
            x = x * 10 + (*s - '0');
    }
    return x < PF_TF_MAX_TASKS ? x : PF_TF_MAX_TASKS;
}

/* A job as a list: ["host:port", ...]. */
static pf_status parse_list(pf_tf_job *job, const json_t *v, const char *ptr, pf_error *err) {
    size_t n = json_array_size(v);
    if (n > PF_TF_MAX_TASKS)
        return fail(err, ptr, "more than %d tasks in one job", PF_TF_MAX_TASKS);
    if (n == 0)
        return PF_OK;
    if (!(job->addrs = pf_calloc(n, sizeof *job->addrs)))
        return nomem(err);
    job->n_tasks = (int)n;
    for (size_t i = 0; i < n; i++) {
        char item[PTR_MAX];
        memcpy(item, ptr, strlen(ptr) + 1);
        pf_text_pointer_add_index(item, PTR_MAX, i);
        pf_status st = parse_address(json_array_get(v, i), item, &job->addrs[i], err);
        if (st != PF_OK)
            return st;
    }
    return PF_OK;
}

/* A job as a sparse object: {"<index>": "host:port", ...}; tasks 0 .. max index, the ones not
 * named are gaps (NULL). This is what TFJob's dynamic-worker mode writes. */
static pf_status parse_sparse(pf_tf_job *job, const json_t *v, const char *ptr, pf_error *err) {
    const char *key;
    json_t *value;
    int max = -1;
    json_object_foreach((json_t *)v, key, value) {
        char item[PTR_MAX];
        memcpy(item, ptr, strlen(ptr) + 1);
        pf_text_pointer_add(item, PTR_MAX, key);
        int i = digits_index(key);
        if (i < 0)
            return fail(err, item, "expected a task index (decimal digits) as the key");
        if (i == PF_TF_MAX_TASKS)
            return fail(err, item, "task index is beyond the limit of %d tasks per job",
                        PF_TF_MAX_TASKS);
        if (i > max)
            max = i;
    }
    if (max < 0)
        return PF_OK;
    if (!(job->addrs = pf_calloc((size_t)max + 1, sizeof *job->addrs)))
        return nomem(err);
    job->n_tasks = max + 1;
    json_object_foreach((json_t *)v, key, value) {
        char item[PTR_MAX];
        memcpy(item, ptr, strlen(ptr) + 1);
        pf_text_pointer_add(item, PTR_MAX, key);
        int i = digits_index(key);
        if (job->addrs[i])
            return fail(err, item, "task index %d appears twice", i);
        pf_status st = parse_address(value, item, &job->addrs[i], err);
        if (st != PF_OK)
            return st;
    }
    return PF_OK;
}

static pf_status parse_cluster(pf_tf_config *cfg, const json_t *cluster, pf_error *err) {
    if (!json_is_object(cluster))
        return fail(err, "/cluster", "expected an object of jobs, got %s", kind(cluster));
    if (json_object_size(cluster) > PF_TF_MAX_JOBS)
        return fail(err, "/cluster", "more than %d jobs", PF_TF_MAX_JOBS);
    const char *name;
    json_t *value;
    json_object_foreach((json_t *)cluster, name, value) {
        char ptr[PTR_MAX] = "/cluster";
        pf_text_pointer_add(ptr, PTR_MAX, name);
        size_t len = strlen(name); /* jansson refuses NUL bytes in keys */
        if (len == 0)
            return fail(err, ptr, "job name is empty");
        if (len > PF_TF_NAME_MAX - 1)
            return fail(err, ptr, "job name is longer than %d bytes", PF_TF_NAME_MAX - 1);
        /* TFJob's legacy "master" is the chief (TensorFlow's RunConfig treats them alike and
         * refuses a cluster with both); it is kept under one name so every role decision
         * looks at "chief" only. */
        const char *job_name = name; /* name itself drives json_object_foreach */
        if (strcmp(name, LEGACY_CHIEF) == 0) {
            if (json_object_get(cluster, "chief"))
                return fail(err, ptr,
                            "the cluster has both a 'chief' and a 'master' job: 'master' is "
                            "TFJob's legacy name for the chief, use one of them");
            job_name = "chief";
        }
        /* Keys are unique (JSON_REJECT_DUPLICATES), so this is a new job. */
        pf_tf_job *job = insert_job(cfg, job_name);
        pf_status st;
        if (json_is_array(value))
            st = parse_list(job, value, ptr, err);
        else if (json_is_object(value))
            st = parse_sparse(job, value, ptr, err);
        else
            st = fail(err, ptr,
                      "expected a list of addresses or an object of index: address, got %s",
                      kind(value));
        if (st != PF_OK)
            return st;
    }
    return PF_OK;
}

static pf_status parse_index(pf_tf_config *cfg, const json_t *v, pf_error *err) {
    static const char ptr[] = "/task/index";
    char buf[SHOWN_MAX + 4];
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < 0)
            return fail(err, ptr, "expected a non-negative integer, got %" JSON_INTEGER_FORMAT, x);
        if (x >= PF_TF_MAX_TASKS)
            return fail(err, ptr,
                        "task index %" JSON_INTEGER_FORMAT
                        " is beyond the limit of %d tasks per job",
                        x, PF_TF_MAX_TASKS);
        cfg->task_index = (int)x;
    } else if (json_is_real(v)) {
        /* int(1.0) is 1 in TensorFlow; 1.5 is refused rather than truncated. */
        double x = json_real_value(v);
        if (!(x >= 0 && x < PF_TF_MAX_TASKS) || x != (double)(int)x) {
            if (x >= PF_TF_MAX_TASKS && x < 1e15 && x == (double)(long long)x)
                return fail(err, ptr, "task index %.0f is beyond the limit of %d tasks per job", x,
                            PF_TF_MAX_TASKS);
            return fail(err, ptr, "expected a non-negative integer, got %g", x);
        }
        cfg->task_index = (int)x;
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        int x = digits_index(s);
        if (x < 0)
            return fail(err, ptr, "expected a non-negative integer, got \"%s\"", shown(buf, s));
        if (x == PF_TF_MAX_TASKS)
            return fail(err, ptr, "task index \"%s\" is beyond the limit of %d tasks per job",
                        shown(buf, s), PF_TF_MAX_TASKS);
        cfg->task_index = x;
    } else {
        return fail(err, ptr, "expected a non-negative integer, got %s", kind(v));
    }
    return PF_OK;
}

static pf_status parse_task(pf_tf_config *cfg, const json_t *task, pf_error *err) {
    if (!json_is_object(task))
        return fail(err, "/task", "expected an object with \"type\" and \"index\", got %s",
                    kind(task));
    cfg->has_task = true;
    cfg->task_index = -1;
    const json_t *type = json_object_get(task, "type");
    if (json_is_string(type)) {
        size_t len = json_string_length(type);
        if (len > PF_TF_NAME_MAX - 1)
            return fail(err, "/task/type", "task type is longer than %d bytes", PF_TF_NAME_MAX - 1);
        memcpy(cfg->task_type, json_string_value(type), len + 1);
        if (strcmp(cfg->task_type, LEGACY_CHIEF) == 0)
            snprintf(cfg->task_type, sizeof cfg->task_type, "chief");
    } else if (json_is_integer(type)) {
        snprintf(cfg->task_type, sizeof cfg->task_type, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(type));
    } else if (type) {
        return fail(err, "/task/type", "expected a string, got %s", kind(type));
    }
    const json_t *index = json_object_get(task, "index");
    return index ? parse_index(cfg, index, err) : PF_OK;
}

pf_status pf_tf_config_parse(const char *json, size_t len, pf_tf_config *out, pf_error *err) {
    pf_error_clear(err);
    if (!out || (!json && len))
        return pf_error_set(err, PF_ERR_INVALID, NULL, "TF_CONFIG: nothing to parse");
    memset(out, 0, sizeof *out);

    json_error_t jerr;
    json_t *root =
        json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_out_of_memory)
            return nomem(err);
        clean_jansson_text(jerr.text);
        pf_error_set(err, PF_ERR_FORMAT, NULL, "TF_CONFIG: not valid JSON: %s (line %d, column %d)",
                     jerr.text, jerr.line, jerr.column);
        if (err)
            err->offset = (long long)jerr.position;
        return PF_ERR_FORMAT;
    }

    pf_status st = PF_OK;
    const json_t *v;
    if (!json_is_object(root)) {
        st = fail(err, "", "expected a JSON object, got %s", kind(root));
    } else {
        if ((v = json_object_get(root, "cluster")))
            st = parse_cluster(out, v, err);
        if (st == PF_OK && (v = json_object_get(root, "task")))
            st = parse_task(out, v, err);
        /* TensorFlow reads "environment" only to compare it with "google"; one that is not a
         * short string is ignored like any other key. */
        v = json_object_get(root, "environment");
        if (st == PF_OK && json_is_string(v) && json_string_length(v) < sizeof out->environment)
            memcpy(out->environment, json_string_value(v), json_string_length(v) + 1);
    }
    json_decref(root);
    if (st != PF_OK)
        pf_tf_config_deinit(out);
    return st;
}

/* --- validation ------------------------------------------------------------------------------- */

static pf_status invalid(pf_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static pf_status invalid(pf_error *err, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pf_error_set(err, PF_ERR_INVALID, NULL, "%s", what);
}

pf_status pf_tf_config_validate(const pf_tf_config *cfg, pf_error *err) {
    pf_error_clear(err);
    if (!cfg)
        return invalid(err, "TF_CONFIG: no config to validate");
    if (!cfg->has_task)
        return invalid(err, "TF_CONFIG: task is missing: expected \"task\": "
                            "{\"type\": \"worker\", \"index\": 0} or similar");

    char type[PF_TF_NAME_MAX + 1], buf[SHOWN_MAX + 4];
    size_t tlen = strnlen(cfg->task_type, PF_TF_NAME_MAX);
    memcpy(type, cfg->task_type, tlen);
    type[tlen] = '\0';
    if (!type[0])
        return invalid(err, "TF_CONFIG: task type is missing: must be one of " KNOWN_TYPES_TEXT);
    bool known = false;
    for (size_t i = 0; i < sizeof known_types / sizeof known_types[0]; i++)
        known = known || strcmp(type, known_types[i]) == 0;
    if (!known)
        return invalid(
            err, "TF_CONFIG: task type '%s' is not supported: must be one of " KNOWN_TYPES_TEXT,
            shown(buf, type));
    if (cfg->task_index < 0)
        return invalid(err, "TF_CONFIG: task index is missing for task type '%s'", type);

    const pf_tf_job *job = find_job(cfg, type);
    if (!job)
        return invalid(err, "TF_CONFIG: the cluster has no '%s' job, but the task is %s %d", type,
                       type, cfg->task_index);
    if (cfg->task_index >= job->n_tasks)
        return invalid(err, "TF_CONFIG: task index %d is out of range: cluster has %d %s task%s",
                       cfg->task_index, job->n_tasks, type, job->n_tasks == 1 ? "" : "s");
    if (!job->addrs || !job->addrs[cfg->task_index])
        return invalid(err,
                       "TF_CONFIG: the cluster has no address for task %s %d "
                       "(a gap in the sparse '%s' job)",
                       type, cfg->task_index, type);

    if (pf_tf_config_count(cfg, "ps") == 0)
        return invalid(err, "TF_CONFIG: the cluster has no ps tasks: psflow needs at least one "
                            "parameter server");
    /* An empty worker job counts: under TFJob's dynamic workers a ps is shown "worker": {}. */
    if (!find_job(cfg, "worker") && !find_job(cfg, "chief"))
        return invalid(err, "TF_CONFIG: the cluster has no worker or chief job");
    return PF_OK;
}

/* --- formatting ------------------------------------------------------------------------------- */

/* Output that counts bytes while buf is NULL, then fills buf on the second pass. */
typedef struct writer {
    char *buf;
    size_t len;
} writer;

static void put(writer *w, const char *s, size_t n) {
    if (w->buf)
        memcpy(w->buf + w->len, s, n);
    w->len += n;
}

static void put_text(writer *w, const char *s) {
    put(w, s, strlen(s));
}

static void put_int(writer *w, int x) {
    char buf[16];
    int n = snprintf(buf, sizeof buf, "%d", x);
    put(w, buf, (size_t)n);
}

/* s[0..n) as a JSON string: quote, backslash and control bytes escaped, the rest as is (the
 * way Go and jansson write ASCII host names). */
static void put_string(writer *w, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    put(w, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            put(w, esc, 2);
        } else if (c < 0x20) {
            const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
            if (named) {
                put(w, named, 2);
            } else {
                char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                put(w, esc, 6);
            }
        } else {
            put(w, s + i, 1);
        }
    }
    put(w, "\"", 1);
}

/* A dense job as a list; a job with gaps as {"<index>":"host:port",...} in index order. */
static void put_job(writer *w, const pf_tf_job *job) {
    int n = job->n_tasks > 0 ? job->n_tasks : 0;
    bool sparse = n > 0 && !job->addrs;
    for (int i = 0; i < n && !sparse; i++)
        sparse = !job->addrs[i];
    put(w, sparse ? "{" : "[", 1);
    bool first = true;
    for (int i = 0; i < n; i++) {
        const char *a = job->addrs ? job->addrs[i] : NULL;
        if (sparse && !a)
            continue;
        if (!first)
            put(w, ",", 1);
        first = false;
        if (sparse) {
            put(w, "\"", 1);
            put_int(w, i);
            put(w, "\":", 2);
        }
        put_string(w, a, strlen(a));
    }
    put(w, sparse ? "}" : "]", 1);
}

static void put_config(writer *w, const pf_tf_config *cfg) {
    bool first = true;
    put(w, "{", 1);

    /* Jobs in name order whatever order the caller left them in (parse and add_job keep them
     * sorted already). */
    int n = clamp_jobs(cfg), order[PF_TF_MAX_JOBS];
    for (int i = 0; i < n; i++) {
        int j = i;
        for (;
             j > 0 && strncmp(cfg->jobs[order[j - 1]].name, cfg->jobs[i].name, PF_TF_NAME_MAX) > 0;
             j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
    if (n > 0) {
        put_text(w, "\"cluster\":{");
        for (int k = 0; k < n; k++) {
            const pf_tf_job *job = &cfg->jobs[order[k]];
            if (k > 0)
                put(w, ",", 1);
            put_string(w, job->name, strnlen(job->name, PF_TF_NAME_MAX));
            put(w, ":", 1);
            put_job(w, job);
        }
        put(w, "}", 1);
        first = false;
    }

    if (cfg->has_task) {
        size_t tlen = strnlen(cfg->task_type, PF_TF_NAME_MAX);
        put_text(w, first ? "\"task\":{" : ",\"task\":{");
        if (tlen > 0) {
            put_text(w, "\"type\":");
            put_string(w, cfg->task_type, tlen);
        }
        if (cfg->task_index >= 0) {
            put_text(w, tlen > 0 ? ",\"index\":" : "\"index\":");
            put_int(w, cfg->task_index);
        }
        put(w, "}", 1);
        first = false;
    }

    size_t elen = strnlen(cfg->environment, sizeof cfg->environment);
    if (elen > 0) {
        put_text(w, first ? "\"environment\":" : ",\"environment\":");
        put_string(w, cfg->environment, elen);
    }
    put(w, "}", 1);
}

char *pf_tf_config_format(const pf_tf_config *cfg) {
    if (!cfg)
        return NULL;
    writer w = {NULL, 0};
    put_config(&w, cfg);
    if (!(w.buf = pf_malloc(w.len + 1)))
        return NULL;
    size_t want = w.len;
    w.len = 0;
    put_config(&w, cfg);
    w.buf[want] = '\0';
    return w.buf;
}

/* --- queries ---------------------------------------------------------------------------------- */

int pf_tf_config_count(const pf_tf_config *cfg, const char *job) {
    const pf_tf_job *j = cfg && job ? find_job(cfg, job) : NULL;
    return j && j->n_tasks > 0 ? j->n_tasks : 0;
}

const char *pf_tf_config_address(const pf_tf_config *cfg, const char *job, int index) {
    const pf_tf_job *j = cfg && job ? find_job(cfg, job) : NULL;
    if (!j || !j->addrs || index < 0 || index >= j->n_tasks)
        return NULL;
    return j->addrs[index];
}

/* addr's host into host[cap], loopback names as "localhost"; 0 when addr is not host:port. */
static int host_of(const char *addr, char *host, size_t cap) {
    int port;
    if (!addr || pf_split_host_port(addr, host, cap, &port) != 0)
        return 0;
    if (!strcmp(host, "::1") || !strcmp(host, "[::1]") || !strncmp(host, "127.", 4))
        snprintf(host, cap, "localhost");
    return 1;
}

/* A ps is left out: its receive and apply take a fraction of a core, and a worker that
 * overlaps them with its compute (async prefetch) gains more from every core than it loses
 * to sharing them (bench/RESULTS.md, "Async prefetch and the thread policy"). */
int pf_tf_config_trainers_on_host(const pf_tf_config *cfg) {
    char mine[256], other[256];
    if (!cfg || !cfg->has_task ||
        !host_of(pf_tf_config_address(cfg, cfg->task_type, cfg->task_index), mine, sizeof mine))
        return 1;
    int n = 0;
    for (int j = 0; j < clamp_jobs(cfg); j++) {
        if (!strcmp(cfg->jobs[j].name, "ps"))
            continue;
        for (int t = 0; t < cfg->jobs[j].n_tasks && cfg->jobs[j].addrs; t++)
            if (host_of(cfg->jobs[j].addrs[t], other, sizeof other) && !strcmp(mine, other))
                n++;
    }
    return n > 0 ? n : 1;
}

/* --- building ----------------------------------------------------------------------------------
 */

void pf_tf_config_deinit(pf_tf_config *cfg) {
    if (!cfg)
        return;
    int n = clamp_jobs(cfg);
    for (int i = 0; i < n; i++)
        free_addrs(cfg->jobs[i].addrs, cfg->jobs[i].n_tasks);
    memset(cfg, 0, sizeof *cfg);
}

void pf_tf_config_init(pf_tf_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    /* What the operator writes, and so what psflow writes. */
    memcpy(cfg->environment, "cloud", sizeof "cloud");
}

pf_status pf_tf_config_add_job(pf_tf_config *cfg, const char *name, const char *const *addrs,
                               int n) {
    /* A gap may not come last: the sparse form cannot say how many tasks follow the last
     * address, so it would not read back the same. */
    if (!cfg || !name || !name[0] || n < 0 || (n > 0 && (!addrs || !addrs[n - 1])))
        return PF_ERR_INVALID;
    if (strlen(name) > PF_TF_NAME_MAX - 1 || n > PF_TF_MAX_TASKS)
        return PF_ERR_RANGE;
    for (int i = 0; i < n; i++)
        if (addrs[i] && strlen(addrs[i]) > PF_TF_ADDR_MAX - 1)
            return PF_ERR_RANGE;
    pf_tf_job *job = find_job(cfg, name);
    if (!job && cfg->n_jobs >= PF_TF_MAX_JOBS)
        return PF_ERR_RANGE;

    /* Copy everything first so that a failure leaves cfg as it was. */
    char **copy = NULL;
    if (n > 0) {
        if (!(copy = pf_calloc((size_t)n, sizeof *copy)))
            return PF_ERR_NOMEM;
        for (int i = 0; i < n; i++) {
            if (addrs[i] && !(copy[i] = pf_strdup(addrs[i]))) {
                free_addrs(copy, n);
                return PF_ERR_NOMEM;
            }
        }
    }
    if (job)
        free_addrs(job->addrs, job->n_tasks);
    else
        job = insert_job(cfg, name);
    job->addrs = copy;
    job->n_tasks = n;
    return PF_OK;
}
