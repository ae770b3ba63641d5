/* serve_request.c - predict request bodies and answers (see serve_request.h). */
#include "serve/serve_request.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/text.h"

#define PTR_MAX 128

typedef struct parse {
    const pf_model_spec *model;
    int width;
    pf_error *err;
    int status; /* the refusal's HTTP status once one is set */
} parse;

static int refuse(parse *p, int status, const char *ptr, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(parse *p, int status, const char *ptr, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof p->err->message];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pf_error_set(p->err, PF_ERR_FORMAT, ptr, "%s", msg);
    p->status = status;
    return -1;
}

static void child(char *out, const char *base, const char *key) {
    snprintf(out, PTR_MAX, "%s", base);
    pf_text_pointer_add(out, PTR_MAX, key);
}

static void child_index(char *out, const char *base, size_t i) {
    snprintf(out, PTR_MAX, "%s", base);
    pf_text_pointer_add_index(out, PTR_MAX, i);
}

/* Whether d rounds to a finite float32, tested before converting (a conversion out of range
 * is undefined behaviour): below FLT_MAX plus half its ulp, 2^103, which rounds to FLT_MAX
 * (float32's largest as nine digits print it, 3.40282347e+38, is above FLT_MAX as a double). */
static int fits_float(double d) {
    return isfinite(d) && fabs(d) < (double)FLT_MAX + 0x1p103;
}

/* A finite number that float32 holds (not rounded to infinity) into *out. */
static int number(parse *p, const json_t *v, const char *ptr, float *out) {
    if (!json_is_number(v))
        return refuse(p, 400, ptr, "must be a number");
    double d = json_number_value(v);
    if (!fits_float(d))
        return refuse(p, 400, ptr, "must be a finite float32 number");
    *out = (float)d;
    return 0;
}

/* An array of exactly n numbers into out[n]. The element's pointer is formatted only for a
 * refusal: this loop runs once per input number of every request. */
static int numbers(parse *p, const json_t *v, int n, const char *ptr, float *out) {
    if (!json_is_array(v))
        return refuse(p, 400, ptr, "must be an array of %d numbers", n);
    if ((int)json_array_size(v) != n)
        return refuse(p, 400, ptr, "holds %zu numbers, the model takes %d", json_array_size(v), n);
    for (int i = 0; i < n; i++) {
        const json_t *x = json_array_get(v, (size_t)i);
        if (json_is_number(x) && fits_float(json_number_value(x))) {
            out[i] = (float)json_number_value(x);
            continue;
        }
        char at[PTR_MAX];
        child_index(at, ptr, (size_t)i);
        return number(p, x, at, &out[i]); /* refuses, saying why */
    }
    return 0;
}

/* One id of table f: a whole number in [0, vocab). */
static int id_of(parse *p, int f, const json_t *v, const char *ptr, float *out) {
    int64_t vocab = p->model->embeddings[f].vocab;
    if (!json_is_integer(v))
        return refuse(p, 400, ptr, "must be an integer id");
    json_int_t id = json_integer_value(v);
    if (id < 0 || id >= vocab)
        return refuse(p, 400, ptr, "id %lld is not in table %s's [0, %lld)", (long long)id,
                      p->model->embeddings[f].name, (long long)vocab);
    *out = (float)id;
    return 0;
}

/* Feature f's value: an id, an array of ids, or {"ids": [...], "weights": [...]}. */
static int feature(parse *p, int f, const json_t *v, const char *ptr, float *x) {
    const pf_embedding_spec *e = &p->model->embeddings[f];
    float *ids = x + pf_model_id_col(p->model, f), *weights = ids + e->max_ids;
    char at[PTR_MAX];
    if (json_is_integer(v))
        return id_of(p, f, v, ptr, &ids[0]) ? -1 : (weights[0] = 1.0f, 0);
    const json_t *list = v, *wlist = NULL;
    char list_ptr[PTR_MAX], w_ptr[PTR_MAX];
    snprintf(list_ptr, sizeof list_ptr, "%s", ptr);
    if (json_is_object(v)) {
        const char *key;
        json_t *item;
        json_object_foreach((json_t *)v, key, item) {
            if (strcmp(key, "ids") != 0 && strcmp(key, "weights") != 0) {
                child(at, ptr, key);
                return refuse(p, 400, at, "unknown field (a feature's object has ids and weights)");
            }
        }
        list = json_object_get(v, "ids");
        wlist = json_object_get(v, "weights");
        child(list_ptr, ptr, "ids");
        child(w_ptr, ptr, "weights");
        if (!list)
            return refuse(p, 400, list_ptr, "missing");
    }
    if (!json_is_array(list))
        return refuse(p, 400, list_ptr, "must be an id, an array of ids or {\"ids\", \"weights\"}");
    size_t n = json_array_size(list);
    if (n > (size_t)e->max_ids)
        return refuse(p, 400, list_ptr, "holds %zu ids, table %s takes at most %d (max_ids)", n,
                      e->name, e->max_ids);
    if (wlist && (!json_is_array(wlist) || json_array_size(wlist) != n))
        return refuse(p, 400, w_ptr, "must be an array of %zu numbers, one per id", n);
    for (size_t k = 0; k < n; k++) {
        child_index(at, list_ptr, k);
        if (id_of(p, f, json_array_get(list, k), at, &ids[k]))
            return -1;
        weights[k] = 1.0f;
        if (wlist) {
            child_index(at, w_ptr, k);
            if (number(p, json_array_get(wlist, k), at, &weights[k]))
                return -1;
        }
    }
    return 0;
}

/* The names of the model's inputs, for an error message. */
static void input_names(const pf_model_spec *m, char *out, size_t cap) {
    if (m->n_embeddings == 0) {
        snprintf(out, cap, "x");
        return;
    }
    size_t at = 0;
    out[0] = '\0';
    for (int f = 0; f < m->n_embeddings && at < cap; f++)
        at += (size_t)snprintf(out + at, cap - at, "%s%s", f ? ", " : "", m->embeddings[f].name);
    if (m->numeric_inputs > 0 && at < cap)
        snprintf(out + at, cap - at, ", numeric");
}

static int is_input(const pf_model_spec *m, const char *key) {
    if (m->n_embeddings == 0)
        return strcmp(key, "x") == 0;
    if (m->numeric_inputs > 0 && strcmp(key, "numeric") == 0)
        return 1;
    for (int f = 0; f < m->n_embeddings; f++)
        if (strcmp(key, m->embeddings[f].name) == 0)
            return 1;
    return 0;
}

/* Input `name` of a named example: obj[name] (row form, idx < 0) or obj[name][idx]
 * (columnar). NULL after refusing when it is missing. */
static const json_t *named(parse *p, const json_t *obj, const char *name, int idx, const char *base,
                           char *ptr) {
    child(ptr, base, name);
    const json_t *v = json_object_get(obj, name);
    if (!v) {
        refuse(p, 400, ptr, "missing (every input of the model is required)");
        return NULL;
    }
    if (idx >= 0) {
        v = json_array_get(v, (size_t)idx);
        pf_text_pointer_add_index(ptr, PTR_MAX, (size_t)idx);
    }
    return v;
}

/* An example given by named inputs (see serve_request.h) into x[width]. */
static int named_example(parse *p, const json_t *obj, int idx, const char *base, float *x) {
    const pf_model_spec *m = p->model;
    char ptr[PTR_MAX];
    const char *key;
    json_t *item;
    json_object_foreach((json_t *)obj, key, item) {
        if (!is_input(m, key)) {
            char names[256];
            input_names(m, names, sizeof names);
            child(ptr, base, key);
            return refuse(p, 400, ptr, "unknown input; the model's inputs are %s", names);
        }
    }
    if (m->n_embeddings == 0) {
        const json_t *v = named(p, obj, "x", idx, base, ptr);
        return v ? numbers(p, v, m->inputs, ptr, x) : -1;
    }
    pf_model_pad_example(m, x);
    for (int f = 0; f < m->n_embeddings; f++) {
        const json_t *v = named(p, obj, m->embeddings[f].name, idx, base, ptr);
        if (!v || feature(p, f, v, ptr, x))
            return -1;
    }
    if (m->numeric_inputs > 0) {
        const json_t *v = named(p, obj, "numeric", idx, base, ptr);
        if (!v || numbers(p, v, m->numeric_inputs, ptr, x + p->width - m->numeric_inputs))
            return -1;
    }
    return 0;
}

/* An example as an array of width numbers; a model with embeddings checks each id slot. */
static int flat_example(parse *p, const json_t *v, const char *ptr, float *x) {
    if (numbers(p, v, p->width, ptr, x))
        return -1;
    const pf_model_spec *m = p->model;
    char at[PTR_MAX];
    for (int f = 0; f < m->n_embeddings; f++) {
        int col = pf_model_id_col(m, f);
        for (int k = 0; k < m->embeddings[f].max_ids; k++)
            if (pf_model_row_of(x[col + k], m->embeddings[f].vocab) == -2) {
                child_index(at, ptr, (size_t)(col + k));
                return refuse(p, 400, at,
                              "id slot of table %s holds %g: an id must be a whole number in "
                              "[0, %lld), or -1 for none",
                              m->embeddings[f].name, (double)x[col + k],
                              (long long)m->embeddings[f].vocab);
            }
    }
    return 0;
}

static int example(parse *p, const json_t *v, const char *ptr, float *x) {
    if (json_is_object(v))
        return named_example(p, v, -1, ptr, x);
    if (json_is_array(v))
        return flat_example(p, v, ptr, x);
    return refuse(p, 400, ptr, "must be an array of %d numbers or an object of named inputs",
                  p->width);
}

static int alloc_examples(parse *p, size_t n, int max_instances, const char *ptr,
                          serve_request *out) {
    if (n == 0)
        return refuse(p, 400, ptr, "holds no example");
    if (n > (size_t)max_instances)
        return refuse(p, 413, ptr, "holds %zu examples, at most %d are taken per request", n,
                      max_instances);
    out->n = (int)n;
    out->x = pf_mallocarray(n * (size_t)p->width, sizeof(float));
    if (!out->x)
        return refuse(p, 500, "", "out of memory");
    return 0;
}

/* "instances": [...] or "inputs": [...] */
static int example_list(parse *p, const json_t *list, const char *ptr, int max_instances,
                        serve_request *out) {
    if (alloc_examples(p, json_array_size(list), max_instances, ptr, out))
        return -1;
    char at[PTR_MAX];
    for (int i = 0; i < out->n; i++) {
        child_index(at, ptr, (size_t)i);
        if (example(p, json_array_get(list, (size_t)i), at, out->x + (size_t)i * (size_t)p->width))
            return -1;
    }
    return 0;
}

/* "inputs": {NAME: [one value per example], ...} */
static int columns(parse *p, const json_t *obj, int max_instances, serve_request *out) {
    size_t n = 0;
    int first = 1;
    const char *key;
    json_t *col;
    char ptr[PTR_MAX];
    json_object_foreach((json_t *)obj, key, col) {
        child(ptr, "/inputs", key);
        if (!json_is_array(col))
            return refuse(p, 400, ptr, "must be an array with one value per example");
        if (!first && json_array_size(col) != n)
            return refuse(p, 400, ptr, "holds %zu values, the other inputs %zu",
                          json_array_size(col), n);
        n = json_array_size(col), first = 0;
    }
    if (alloc_examples(p, n, max_instances, "/inputs", out))
        return -1;
    for (int i = 0; i < out->n; i++)
        if (named_example(p, obj, i, "/inputs", out->x + (size_t)i * (size_t)p->width))
            return -1;
    return 0;
}

static int parse_root(parse *p, const json_t *root, int max_instances, serve_request *out) {
    if (!json_is_object(root))
        return refuse(p, 400, "", "the body must be a JSON object with instances or inputs");
    const char *key;
    json_t *v;
    char ptr[PTR_MAX];
    json_object_foreach((json_t *)root, key, v) {
        child(ptr, "", key);
        if (strcmp(key, "instances") && strcmp(key, "inputs") && strcmp(key, "signature_name"))
            return refuse(p, 400, ptr,
                          "unknown field (a request has instances or inputs, and "
                          "signature_name)");
    }
    const json_t *sig = json_object_get(root, "signature_name");
    if (sig && (!json_is_string(sig) || strcmp(json_string_value(sig), "serving_default")))
        return refuse(p, 400, "/signature_name", "the only signature is \"serving_default\"");
    const json_t *inst = json_object_get(root, "instances"), *inp = json_object_get(root, "inputs");
    if (inst && inp)
        return refuse(p, 400, "/inputs", "a request has instances or inputs, not both");
    if (!inst && !inp)
        return refuse(p, 400, "/instances", "missing (a request has instances or inputs)");
    if (inst) {
        if (!json_is_array(inst))
            return refuse(p, 400, "/instances", "must be an array of examples");
        return example_list(p, inst, "/instances", max_instances, out);
    }
    out->columnar = 1;
    if (json_is_array(inp))
        return example_list(p, inp, "/inputs", max_instances, out);
    if (json_is_object(inp))
        return columns(p, inp, max_instances, out);
    return refuse(p, 400, "/inputs", "must be an array of examples or an object of named inputs");
}

/* --- the fast path: {"instances": [[numbers], ...]} without a tree ------------------------ */

static const char *blank(const char *at, const char *end) {
    while (at < end && (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r'))
        at++;
    return at;
}

/* A JSON number at *at (RFC 8259's grammar, which strtod alone does not keep: no "inf",
 * "nan", hex or leading '+') that rounds to a finite float32 into *out. */
static int fast_number(const char **at, const char *end, float *out) {
    const char *p = *at;
    char buf[64];
    size_t n = 0;
    if (p < end && *p == '-')
        buf[n++] = *p++;
    if (p >= end || *p < '0' || *p > '9' ||
        (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9'))
        return -1;
    while (
        p < end && n < sizeof buf - 1 &&
        ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' || *p == '-'))
        buf[n++] = *p++;
    if (n >= sizeof buf - 1)
        return -1;
    buf[n] = '\0';
    for (size_t i = 1; i < n; i++) /* '.' needs a digit on each side, an exponent digits */
        if ((buf[i] == '.' && (buf[i - 1] < '0' || buf[i - 1] > '9')) ||
            ((buf[i] == 'e' || buf[i] == 'E') && (buf[i - 1] < '0' || buf[i - 1] > '9')))
            return -1;
    char *stop;
    double d = strtod(buf, &stop);
    if (*stop || (buf[n - 1] < '0' || buf[n - 1] > '9') || !fits_float(d))
        return -1;
    *out = (float)d;
    *at = p;
    return 0;
}

/* Parses a body that is exactly {"instances": [[w numbers], ...]} (blanks anywhere) of a
 * model without embeddings straight into out. Returns 0 done, 1 when the body is anything
 * else (the caller parses it whole, which also explains what is wrong), or 413 for more
 * than max_instances examples. */
static int fast_instances(const parse *p, const char *body, size_t len, int max_instances,
                          serve_request *out) {
    static const char key[] = "\"instances\"";
    const char *at = blank(body, body + len), *end = body + len;
    if (p->model->n_embeddings || at >= end || *at++ != '{')
        return 1;
    at = blank(at, end);
    if ((size_t)(end - at) < sizeof key - 1 || memcmp(at, key, sizeof key - 1))
        return 1;
    at = blank(at + sizeof key - 1, end);
    if (at >= end || *at++ != ':')
        return 1;
    at = blank(at, end);
    if (at >= end || *at++ != '[')
        return 1;
    size_t cap = 0;
    int w = p->width;
    for (;;) {
        at = blank(at, end);
        if (at >= end || *at++ != '[')
            return 1;
        if (out->n == max_instances)
            return 413;
        if ((size_t)out->n == cap) {
            size_t more = cap ? cap * 2 : 16;
            if (more > (size_t)max_instances)
                more = (size_t)max_instances;
            float *x = pf_realloc(out->x, more * (size_t)w * sizeof(float));
            if (!x)
                return 1; /* the whole parse reports it */
            out->x = x, cap = more;
        }
        float *row = out->x + (size_t)out->n * (size_t)w;
        for (int i = 0; i < w; i++) {
            at = blank(at, end);
            if (fast_number(&at, end, &row[i]))
                return 1;
            at = blank(at, end);
            if (at >= end || *at++ != (i + 1 < w ? ',' : ']'))
                return 1;
        }
        out->n++;
        at = blank(at, end);
        if (at >= end)
            return 1;
        if (*at == ',') {
            at++;
            continue;
        }
        if (*at++ != ']')
            return 1;
        break;
    }
    at = blank(at, end);
    if (at >= end || *at++ != '}')
        return 1;
    return blank(at, end) == end ? 0 : 1;
}

/* More values than a request of max_instances examples can need: a body of small values
 * ("[{},{},...]") would cost its tree far more than its bytes. */
static int too_many_values(const char *body, size_t len, int64_t most) {
    int64_t values = 1;
    for (size_t i = 0; i < len; i++)
        values += body[i] == ',' || body[i] == '[' || body[i] == '{';
    return values > most;
}

int serve_request_parse(const pf_model_spec *model, const char *body, size_t len, int max_instances,
                        serve_request *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    parse p = {.model = model, .width = pf_model_input_width(model), .err = err};
    out->width = p.width;
    int fast = fast_instances(&p, body, len, max_instances, out);
    if (fast == 0)
        return 0;
    serve_request_deinit(out);
    out->width = p.width;
    int64_t per_example = 2 * (int64_t)p.width + 8 * (int64_t)model->n_embeddings + 16;
    if (fast == 413 || too_many_values(body, len, (int64_t)max_instances * per_example + 64)) {
        refuse(&p, 413, "/instances",
               "the body holds more values than %d examples of %d inputs (at most %d examples a "
               "request)",
               max_instances, p.width, max_instances);
        return p.status;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        refuse(&p, 400, "", "malformed JSON at line %d, column %d: %s", je.line, je.column,
               je.text);
        return p.status;
    }
    int rc = parse_root(&p, root, max_instances, out);
    json_decref(root);
    if (rc) {
        serve_request_deinit(out);
        return p.status;
    }
    return 0;
}

void serve_request_deinit(serve_request *r) {
    if (!r)
        return;
    pf_free(r->x);
    memset(r, 0, sizeof *r);
}

pf_status serve_answer_write(pf_buf *out, int64_t version, int columnar, const float *y, int n,
                             int outputs) {
    pf_status st = pf_buf_printf(out, "{\"model_version\":\"%lld\",\"%s\":[", (long long)version,
                                 columnar ? "outputs" : "predictions");
    for (int i = 0; i < n && st == PF_OK; i++) {
        st = pf_buf_append(out, i ? ",[" : "[", i ? 2 : 1);
        for (int c = 0; c < outputs && st == PF_OK; c++) {
            float v = y[(size_t)i * (size_t)outputs + (size_t)c];
            if (isfinite(v))
                st = pf_buf_printf(out, c ? ",%.9g" : "%.9g", (double)v);
            else
                st = pf_buf_printf(out, c ? ",null" : "null");
        }
        if (st == PF_OK)
            st = pf_buf_append(out, "]", 1);
    }
    return st == PF_OK ? pf_buf_append(out, "]}", 2) : st;
}
