/* safetensors.c - the safetensors layout (see safetensors.h).
 *
 * psflow runs on little-endian hosts only (x86-64, arm64), so tensor data is written and
 * read as the host's floats; the header's 8-byte length is encoded explicitly.
 */
#include "psflow/safetensors.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "psflow/fs.h"
#include "psflow/mem.h"

_Static_assert(sizeof(float) == 4, "safetensors F32 needs 4-byte floats");

struct pf_safetensors {
    int n;
    char **names;
    int *ranks;
    int64_t (*shapes)[PF_TENSOR_MAX_RANK];
    void **data;
    pf_dtype *dtypes;
    json_t *meta; /* the "__metadata__" object, or NULL */
};

static int64_t element_count(int rank, const int64_t *shape) {
    int64_t c = 1;
    for (int i = 0; i < rank; i++)
        c *= shape[i];
    return c;
}

static const char *const dtype_names[] = {"F32", "I64", "U64", "U8"};

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static char *build_header(const pf_tensor_view *tensors, int n, const char *const *meta_keys,
                          const char *const *meta_values, int n_meta) {
    json_t *root = json_object();
    if (!root)
        return NULL;
    if (n_meta > 0) {
        json_t *meta = json_object();
        for (int i = 0; meta && i < n_meta; i++)
            json_object_set_new(meta, meta_keys[i], json_string(meta_values[i]));
        json_object_set_new(root, "__metadata__", meta);
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const pf_tensor_view *t = &tensors[i];
        json_t *shape = json_array();
        for (int d = 0; d < t->rank; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        uint64_t bytes =
            (uint64_t)element_count(t->rank, t->shape) * (uint64_t)pf_dtype_size(t->dtype);
        json_t *entry =
            json_pack("{s:s, s:o, s:[I,I]}", "dtype", dtype_names[t->dtype], "shape", shape,
                      "data_offsets", (json_int_t)offset, (json_int_t)(offset + bytes));
        json_object_set_new(root, t->name, entry);
        offset += bytes;
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return text;
}

pf_status pf_safetensors_write(const char *path, const pf_tensor_view *tensors, int n,
                               const char *const *meta_keys, const char *const *meta_values,
                               int n_meta, pf_error *err) {
    for (int i = 0; i < n; i++) {
        if (tensors[i].rank < 0 || tensors[i].rank > PF_TENSOR_MAX_RANK)
            return pf_error_set(err, PF_ERR_INVALID, NULL, "tensor '%s': rank %d unsupported",
                                tensors[i].name, tensors[i].rank);
        if ((unsigned)tensors[i].dtype > PF_DTYPE_U8)
            return pf_error_set(err, PF_ERR_INVALID, NULL, "tensor '%s': dtype %d unsupported",
                                tensors[i].name, (int)tensors[i].dtype);
        for (int j = 0; j < i; j++)
            if (!strcmp(tensors[i].name, tensors[j].name))
                return pf_error_set(err, PF_ERR_INVALID, NULL, "duplicate tensor name '%s'",
                                    tensors[i].name);
    }
    char *header = build_header(tensors, n, meta_keys, meta_values, n_meta);
    if (!header)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory building the header");
    size_t len = strlen(header);
    size_t padded = (len + 7) & ~(size_t)7; /* tensor data starts 8-byte aligned */

    /* The file as pieces: length, header, padding, then each tensor's data where it lies. */
    static const char spaces[8] = "       ";
    unsigned char lenbuf[8];
    put_le64(lenbuf, padded);
    struct iovec *parts = pf_mallocarray((size_t)n + 3, sizeof *parts);
    if (!parts) {
        free(header);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
    }
    parts[0] = (struct iovec){lenbuf, 8};
    parts[1] = (struct iovec){header, len};
    parts[2] = (struct iovec){(void *)spaces, padded - len};
    for (int i = 0; i < n; i++)
        parts[3 + i] = (struct iovec){(void *)tensors[i].raw,
                                      (size_t)element_count(tensors[i].rank, tensors[i].shape) *
                                          (size_t)pf_dtype_size(tensors[i].dtype)};
    pf_status st = pf_fs_write_atomic(path, parts, n + 3, err);
    pf_free(parts);
    free(header); /* from jansson's allocator */
    return st;
}

void pf_safetensors_destroy(pf_safetensors *st) {
    if (!st)
        return;
    for (int i = 0; i < st->n; i++) {
        pf_free(st->names ? st->names[i] : NULL);
        pf_free(st->data ? st->data[i] : NULL);
    }
    pf_free(st->names);
    pf_free(st->ranks);
    pf_free(st->shapes);
    pf_free(st->data);
    pf_free(st->dtypes);
    json_decref(st->meta);
    pf_free(st);
}

/* Validates one header entry and fills rank/shape/offsets. */
static pf_status parse_entry(const char *name, json_t *entry, uint64_t data_len, bool any,
                             pf_dtype *type, int *rank, int64_t *shape, uint64_t *begin,
                             uint64_t *end, pf_error *err) {
    json_t *dtype = json_object_get(entry, "dtype");
    json_t *jshape = json_object_get(entry, "shape");
    json_t *offs = json_object_get(entry, "data_offsets");
    if (!json_is_object(entry) || !json_is_string(dtype) || !json_is_array(jshape) ||
        !json_is_array(offs) || json_array_size(offs) != 2)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "tensor '%s': needs dtype, shape and data_offsets", name);
    int t = 0;
    while (t <= (any ? PF_DTYPE_U8 : PF_DTYPE_F32) &&
           strcmp(json_string_value(dtype), dtype_names[t]) != 0)
        t++;
    if (t > (any ? PF_DTYPE_U8 : PF_DTYPE_F32))
        return pf_error_set(err, PF_ERR_UNSUPPORTED, NULL,
                            "tensor '%s': dtype %s unsupported (psflow reads %s)", name,
                            json_string_value(dtype), any ? "F32, I64, U64 and U8" : "F32");
    *type = (pf_dtype)t;
    size_t r = json_array_size(jshape);
    if (r > PF_TENSOR_MAX_RANK)
        return pf_error_set(err, PF_ERR_UNSUPPORTED, NULL, "tensor '%s': rank %zu unsupported",
                            name, r);
    uint64_t count = 1;
    for (size_t d = 0; d < r; d++) {
        json_t *dim = json_array_get(jshape, d);
        if (!json_is_integer(dim) || json_integer_value(dim) < 0 ||
            (uint64_t)json_integer_value(dim) > data_len)
            return pf_error_set(err, PF_ERR_FORMAT, NULL, "tensor '%s': bad shape", name);
        shape[d] = json_integer_value(dim);
        count *= (uint64_t)shape[d];
        if (count > data_len)
            return pf_error_set(err, PF_ERR_FORMAT, NULL, "tensor '%s': shape larger than the file",
                                name);
    }
    json_t *jb = json_array_get(offs, 0), *je = json_array_get(offs, 1);
    if (!json_is_integer(jb) || !json_is_integer(je) || json_integer_value(jb) < 0 ||
        json_integer_value(je) < json_integer_value(jb) ||
        (uint64_t)json_integer_value(je) > data_len)
        return pf_error_set(err, PF_ERR_FORMAT, NULL, "tensor '%s': data_offsets outside the data",
                            name);
    *begin = (uint64_t)json_integer_value(jb);
    *end = (uint64_t)json_integer_value(je);
    if (*end - *begin != count * (uint64_t)pf_dtype_size(*type))
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "tensor '%s': %llu data bytes for a shape of %llu %s elements", name,
                            (unsigned long long)(*end - *begin), (unsigned long long)count,
                            dtype_names[*type]);
    *rank = (int)r;
    return PF_OK;
}

static pf_status read_file(const char *path, bool any, pf_safetensors **out, pf_error *err) {
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    pf_status st = pf_fs_read_file(path, PF_ST_MAX_FILE, &text, &len, err);
    if (st != PF_OK)
        return st == PF_ERR_NOT_FOUND ? PF_ERR_IO : st;
    const unsigned char *buf = (const unsigned char *)text;
    json_t *root = NULL;
    pf_safetensors *s = NULL;
    uint64_t hlen = len >= 8 ? get_le64(buf) : 0;
    if (len < 8 || hlen > PF_ST_MAX_HEADER || hlen > len - 8) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: bad header length", path);
        goto done;
    }
    json_error_t jerr;
    root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(root)) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: header is not a JSON object: %s", path,
                          root ? "wrong type" : jerr.text);
        goto done;
    }
    const unsigned char *data = buf + 8 + hlen;
    uint64_t data_len = len - 8 - hlen;
    size_t n = json_object_size(root);
    s = pf_calloc(1, sizeof *s);
    if (!s || !(s->names = pf_calloc(n, sizeof *s->names)) ||
        !(s->ranks = pf_calloc(n, sizeof *s->ranks)) ||
        !(s->shapes = pf_calloc(n, sizeof *s->shapes)) ||
        !(s->data = pf_calloc(n, sizeof *s->data)) ||
        !(s->dtypes = pf_calloc(n, sizeof *s->dtypes))) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
        goto done;
    }
    /* Tensors must tile the data region exactly: sum of sizes == data_len and no overlap. */
    uint64_t covered = 0;
    uint64_t(*ranges)[2] = pf_calloc(n, sizeof *ranges);
    if (!ranges) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
        goto done;
    }
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(value)) {
                st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: __metadata__ not an object", path);
                break;
            }
            s->meta = json_incref(value);
            continue;
        }
        int i = s->n;
        uint64_t b = 0, e = 0;
        st = parse_entry(key, value, data_len, any, &s->dtypes[i], &s->ranks[i], s->shapes[i], &b,
                         &e, err);
        if (st != PF_OK)
            break;
        for (int j = 0; j < i && st == PF_OK; j++)
            if (b < ranges[j][1] && ranges[j][0] < e)
                st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: tensors '%s' and '%s' overlap",
                                  path, key, s->names[j]);
        if (st != PF_OK)
            break;
        ranges[i][0] = b;
        ranges[i][1] = e;
        covered += e - b;
        s->names[i] = pf_strdup(key);
        s->data[i] = pf_malloc((size_t)(e - b));
        s->n++;
        if (!s->names[i] || !s->data[i]) {
            st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
            break;
        }
        memcpy(s->data[i], data + b, (size_t)(e - b));
    }
    pf_free(ranges);
    if (st == PF_OK && covered != data_len)
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: %llu data bytes not covered by tensors",
                          path, (unsigned long long)(data_len - covered));
done:
    json_decref(root);
    pf_free(text);
    if (st != PF_OK) {
        pf_safetensors_destroy(s);
        return st;
    }
    *out = s;
    return PF_OK;
}

pf_status pf_safetensors_read(const char *path, pf_safetensors **out, pf_error *err) {
    return read_file(path, false, out, err);
}

pf_status pf_safetensors_read_any(const char *path, pf_safetensors **out, pf_error *err) {
    return read_file(path, true, out, err);
}

int pf_safetensors_count(const pf_safetensors *st) {
    return st->n;
}

pf_tensor_view pf_safetensors_get(const pf_safetensors *st, int i) {
    pf_tensor_view v = {st->names[i], st->ranks[i], {0}, {.raw = st->data[i]}, st->dtypes[i]};
    memcpy(v.shape, st->shapes[i], sizeof v.shape);
    return v;
}

int pf_safetensors_find(const pf_safetensors *st, const char *name, pf_tensor_view *out) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->names[i], name)) {
            *out = pf_safetensors_get(st, i);
            return 0;
        }
    return -1;
}

const char *pf_safetensors_meta(const pf_safetensors *st, const char *key) {
    return st->meta ? json_string_value(json_object_get(st->meta, key)) : NULL;
}
