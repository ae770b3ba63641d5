/* spec_json.c - the normalised JSON form of a job spec (pf_job_spec_to_json), written by the
 * same field tables the parser reads (spec_internal.h): every field that applies, defaults
 * filled in, in table order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "psflow/mem.h"
#include "psflow/spec.h"

#include "spec_internal.h"

/* The fewest significant digits (1..17) with which "%.*g" reads back as exactly v, raised so
 * that values >= 1 print without an exponent (10 as "10.0", not "1e+01"). Printing with more
 * digits than this also reads back exactly: the shorter decimal is among the candidates. */
static int digits_for(double v) {
    char buf[40];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    int int_digits = 1;
    for (double a = fabs(v); a >= 10 && int_digits < 17; a /= 10)
        int_digits++;
    return fabs(v) < 1e17 && int_digits > p ? int_digits : p;
}

static json_t *object_to_json(const object_desc *d, const pf_job_spec *s, int *digits);

json_t *pf_json_number(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *enum_to_json(const field *f, int v) {
    if (v < f->min || v > f->max)
        return NULL;
    return json_string(f->names[v]);
}

/* "cpu", "cuda", "cuda:N" or "auto"; NULL for an index the device cannot have. */
static json_t *device_to_json(const field *f, const pf_device_spec *d) {
    if (d->index < 0 || d->index > PF_MAX_GPU_INDEX ||
        (d->index > 0 && d->device != PF_DEVICE_CUDA))
        return NULL;
    if (d->index == 0)
        return enum_to_json(f, (int)d->device);
    char text[16];
    snprintf(text, sizeof text, "cuda:%d", d->index);
    return json_string(text);
}

/* New JSON value for one field, or NULL on allocation failure or a value the JSON form cannot
 * hold (only possible for a spec that did not come from pf_job_spec_parse). */
static json_t *field_to_json(const field *f, const pf_job_spec *s, int *digits) {
    const void *p = f->at == NO_SLOT ? NULL : cslot(s, f->at);
    switch (f->kind) {
    case K_NAME:
        return json_stringn(p, strnlen(p, sizeof s->name));
    case K_INT:
        return json_integer(*(const int *)p);
    case K_INT64:
        return json_integer(*(const int64_t *)p);
    case K_UINT64: {
        uint64_t v = *(const uint64_t *)p;
        return v > INT64_MAX ? NULL : json_integer((json_int_t)v);
    }
    case K_DOUBLE: {
        double v = *(const double *)p;
        int need = digits_for(v);
        *digits = need > *digits ? need : *digits;
        return json_real(v);
    }
    case K_BOOL:
        return json_boolean(*(const bool *)p);
    case K_ENUM:
        return enum_to_json(f, p ? get_enum(s, f->at) : (int)f->def);
    case K_DEVICE: {
        /* One string when every replica has the same device (one GPU cannot hold two), else
         * the list. */
        const pf_device_spec *d = p;
        int k = *(const int *)cslot(s, f->count_at);
        if (k < 1 || k > PF_MAX_REPLICAS_PER_WORKER)
            return NULL;
        bool same = true;
        for (int r = 1; r < k; r++)
            same = same && d[r].device == d[0].device && d[r].index == d[0].index;
        if (same)
            return k == 1 || d[0].device == PF_DEVICE_CPU ? device_to_json(f, &d[0]) : NULL;
        json_t *a = json_array();
        for (int r = 0; a && r < k; r++) {
            if (json_array_append_new(a, device_to_json(f, &d[r])) != 0) {
                json_decref(a);
                a = NULL;
            }
        }
        return a;
    }
    case K_WIDTHS:
    case K_PATHS: {
        int n = *(const int *)cslot(s, f->count_at);
        json_t *a = n >= 0 && n <= f->max ? json_array() : NULL;
        for (int i = 0; a && i < n; i++) {
            json_t *item = f->kind == K_WIDTHS ? json_integer(((const int *)p)[i])
                                               : json_string(((char *const *)p)[i]);
            if (json_array_append_new(a, item) != 0) {
                json_decref(a);
                a = NULL;
            }
        }
        return a;
    }
    case K_OBJECT:
        return object_to_json(f->sub, s, digits);
    case K_LIST: {
        int n = *(const int *)cslot(s, f->count_at);
        json_t *a = n >= 0 && n <= f->max ? json_array() : NULL;
        pf_job_spec *scratch = a ? pf_calloc(1, sizeof *scratch) : NULL;
        for (int i = 0; scratch && i < n; i++) {
            memcpy(slot(scratch, f->at), cslot(s, f->at + (size_t)i * f->stride), f->stride);
            if (json_array_append_new(a, object_to_json(f->sub, scratch, digits)) != 0)
                break;
        }
        if (!scratch || json_array_size(a) != (size_t)n) {
            json_decref(a);
            a = NULL;
        }
        pf_free(scratch);
        return a;
    }
    }
    return NULL;
}

/* Whether a field that applies is written: optional objects and path lists only when given. */
static bool written(const field *f, const pf_job_spec *s) {
    if (f->def < (double)f->min &&
        ((f->kind == K_INT64 && *(const int64_t *)cslot(s, f->at) == (int64_t)f->def) ||
         (f->kind == K_INT && *(const int *)cslot(s, f->at) == (int)f->def)))
        return false; /* a default outside the range stands for "absent" */
    if (f->kind == K_BOOL && f->min == 1 && !*(const bool *)cslot(s, f->at))
        return false; /* a switch written only when on (min 1) */
    if (f->quiet_default && ((f->kind == K_ENUM && get_enum(s, f->at) == (int)f->def) ||
                             (f->kind == K_DOUBLE && *(const double *)cslot(s, f->at) == f->def)))
        return false; /* a value written only when it is not the default */
    if (f->kind == K_OBJECT && f->present_at)
        return *(const bool *)cslot(s, f->present_at);
    if (f->kind == K_NAME && !*(const char *)cslot(s, f->at))
        return false; /* an optional name left empty (run_policy.queue) */
    if (f->kind == K_PATHS || f->kind == K_LIST)
        return *(const int *)cslot(s, f->count_at) > 0;
    return true;
}

static json_t *object_to_json(const object_desc *d, const pf_job_spec *s, int *digits) {
    json_t *obj = json_object();
    int type = d->typed ? get_enum(s, d->fields[0].at) : 0;
    if (type < 0 || type > 31) /* applies() shifts by it */
        type = 0;
    for (size_t i = 0; obj && i < d->n; i++) {
        const field *f = &d->fields[i];
        if (!applies(f, type) || !written(f, s))
            continue;
        if (json_object_set_new(obj, f->key, field_to_json(f, s, digits)) != 0) {
            json_decref(obj);
            obj = NULL;
        }
    }
    return obj;
}

char *pf_job_spec_to_json(const pf_job_spec *spec) {
    int digits = 1;
    json_t *root = object_to_json(&pf_spec_desc, spec, &digits);
    if (!root)
        return NULL;
    size_t flags = JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(digits);
    size_t n = json_dumpb(root, NULL, 0, flags);
    char *out = n ? pf_malloc(n + 1) : NULL;
    if (out && json_dumpb(root, out, n, flags) == n) {
        out[n] = '\0';
    } else {
        pf_free(out);
        out = NULL;
    }
    json_decref(root);
    return out;
}
