/* data_idx.c - the IDX reader (MNIST's format; see data.h): an image file and a label file,
 * each checked against the lengths its header claims before anything is allocated; and the
 * streamed reader of a range of records of such a pair (data.streaming, data_internal.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data_internal.h"
#include "psflow/mem.h"

#define IDX_IMAGES_MAGIC 0x00000803u /* uint8, 3 dims: n, rows, cols */
#define IDX_LABELS_MAGIC 0x00000801u /* uint8, 1 dim: n */
#define IDX_MAX_PIXELS   (1u << 20)  /* rows * cols */

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static const char *magic_hint(uint32_t magic, uint32_t wanted) {
    if (magic == IDX_LABELS_MAGIC && wanted == IDX_IMAGES_MAGIC)
        return " (this is an IDX label file; are images and labels swapped?)";
    if (magic == IDX_IMAGES_MAGIC && wanted == IDX_LABELS_MAGIC)
        return " (this is an IDX image file; are images and labels swapped?)";
    if ((magic >> 16) == 0x1f8b)
        return " (gzip-compressed data; decompress it first)";
    return "";
}

/* Checks one IDX file's header: `header` bytes of magic and big-endian uint32 dims (16 for
 * images: n, rows, cols; 8 for labels: n) at the start of data[0 .. len) (the file, or as much
 * of it as was read). Returns the example count in *n and the bytes per example in *item:
 * rows * cols (images) or 1 (labels). */
static pf_status check_idx_header(const uint8_t *data, size_t len, const char *name, uint32_t magic,
                                  size_t header, uint64_t *n, uint64_t *item, pf_error *err) {
    if (len == 0)
        return pf_error_set_offset(err, PF_ERR_FORMAT, 0, "%s: empty file", name);
    if (len >= 4 && be32(data) != magic)
        return pf_error_set_offset(err, PF_ERR_FORMAT, 0, "%s: bad magic 0x%08x, expected 0x%08x%s",
                                   name, (unsigned)be32(data), (unsigned)magic,
                                   magic_hint(be32(data), magic));
    if (len < header)
        return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)len,
                                   "%s: truncated header: expected %zu bytes, got %zu", name,
                                   header, len);
    static const char *const dims[3] = {"example count", "rows", "cols"};
    for (size_t off = 4; off < header; off += 4) {
        if (be32(data + off) == 0)
            return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)off,
                                       "%s: %s is zero in the header", name, dims[off / 4 - 1]);
    }
    *n = be32(data + 4);
    if (*n > PF_IDX_MAX_EXAMPLES)
        return pf_error_set_offset(err, PF_ERR_FORMAT, 4,
                                   "%s: claims %llu examples, more than the limit of %d", name,
                                   (unsigned long long)*n, PF_IDX_MAX_EXAMPLES);
    *item = 1;
    if (header == 16) {
        uint64_t rows = be32(data + 8), cols = be32(data + 12);
        *item = rows * cols; /* both < 2^32: no overflow in 64 bits */
        if (*item > IDX_MAX_PIXELS)
            return pf_error_set_offset(
                err, PF_ERR_FORMAT, 8, "%s: images of %llux%llu pixels exceed the limit of %u",
                name, (unsigned long long)rows, (unsigned long long)cols, IDX_MAX_PIXELS);
    }
    return PF_OK;
}

/* A file of len bytes against the length its header claims: header + n * item bytes. */
static pf_status check_idx_length(uint64_t len, const char *name, size_t header, uint64_t n,
                                  uint64_t item, pf_error *err) {
    uint64_t expected = header + n * item; /* <= 16 + 2^26 * 2^20 */
    if (len < expected)
        return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)len,
                                   "%s: truncated: expected %llu bytes, got %llu", name,
                                   (unsigned long long)expected, (unsigned long long)len);
    if (len > expected)
        return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)expected,
                                   "%s: trailing garbage: %llu bytes after the expected %llu", name,
                                   (unsigned long long)(len - expected),
                                   (unsigned long long)expected);
    return PF_OK;
}

/* Checks one IDX file's header and length: exactly rows * cols bytes (images) or 1 byte
 * (labels) per example after the header. Returns the example count in *n. */
static pf_status check_idx_file(const uint8_t *data, size_t len, const char *name, uint32_t magic,
                                size_t header, uint64_t *n, pf_error *err) {
    uint64_t item = 1;
    pf_status st = check_idx_header(data, len, name, magic, header, n, &item, err);
    return st != PF_OK ? st : check_idx_length(len, name, header, *n, item, err);
}

static pf_status parse_idx(const uint8_t *images, size_t images_len, const char *images_name,
                           const uint8_t *labels, size_t labels_len, const char *labels_name,
                           pf_dataset *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    uint64_t n_images = 0, n_labels = 0;
    pf_status status =
        check_idx_file(images, images_len, images_name, IDX_IMAGES_MAGIC, 16, &n_images, err);
    if (status == PF_OK)
        status =
            check_idx_file(labels, labels_len, labels_name, IDX_LABELS_MAGIC, 8, &n_labels, err);
    if (status != PF_OK)
        return status;
    if (n_images != n_labels)
        return pf_error_set_offset(
            err, PF_ERR_FORMAT, 4, "%s has %llu images but %s has %llu labels", images_name,
            (unsigned long long)n_images, labels_name, (unsigned long long)n_labels);

    int features = (int)(be32(images + 8) * be32(images + 12)); /* <= 2^20, checked */
    if (pf_dataset_alloc(out, (int64_t)n_images, features) != PF_OK)
        return pf_error_set_offset(err, PF_ERR_NOMEM, -1, "%s: out of memory for %llu images",
                                   images_name, (unsigned long long)n_images);
    const uint8_t *pixels = images + 16;
    size_t count = (size_t)n_images * (size_t)features;
    for (size_t i = 0; i < count; i++)
        out->x[i] = (float)pixels[i] * (1.0f / 255.0f);
    int max_label = 0;
    for (size_t i = 0; i < (size_t)n_images; i++) {
        int label = labels[8 + i];
        out->y[i] = (float)label;
        if (label > max_label)
            max_label = label;
    }
    out->num_classes = max_label + 1;
    return PF_OK;
}

pf_status pf_idx_parse(const uint8_t *images, size_t images_len, const uint8_t *labels,
                       size_t labels_len, pf_dataset *out, pf_error *err) {
    return parse_idx(images, images_len, "images", labels, labels_len, "labels", out, err);
}

pf_status pf_idx_load(const char *images_path, const char *labels_path, pf_dataset *out,
                      pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    uint8_t *images = NULL, *labels = NULL;
    size_t images_len = 0, labels_len = 0;
    pf_status status = data_read_file(images_path, &images, &images_len, err);
    if (status == PF_OK)
        status = data_read_file(labels_path, &labels, &labels_len, err);
    if (status == PF_OK)
        status =
            parse_idx(images, images_len, images_path, labels, labels_len, labels_path, out, err);
    pf_free(images);
    pf_free(labels);
    return status;
}

/* --- a range of records, streamed ------------------------------------------------------------ */

/* DESIGN. Both files are opened with zlib's gzopen, which reads plain files as they are; the
 * headers are read and checked on every open (magic, dims, equal counts, a plain file's length),
 * then each file is positioned at the range's first record with gzseek: a plain file seeks, a
 * gzip one is decompressed and the bytes before the record are dropped. IDX files are small
 * (Fashion-MNIST's training images are 47 MB decompressed), so reading a gzip file from its
 * start for every range costs little, and no index of the compressed stream is needed. One
 * record's pixels are held at a time: memory does not depend on the files. */

struct data_idx_reader {
    char images[1024], labels[1024]; /* the paths, for messages */
    gzFile fi, fl;
    uint8_t *pixels; /* one record: features bytes */
    int features, classes;
    uint64_t n, at, end; /* records in the pair, the next read, the range's end */
    int done;
};

static void os_text(int errnum, char *buf, size_t size) {
    if (errnum == 0 || strerror_r(errnum, buf, size) != 0)
        snprintf(buf, size, "error %d", errnum);
}

static pf_status open_file(const char *path, gzFile *f, pf_error *err) {
    errno = 0;
    if ((*f = gzopen(path, "rb")) != NULL) {
        gzbuffer(*f, 128u << 10);
        return PF_OK;
    }
    char os[128];
    int e = errno;
    os_text(e, os, sizeof os);
    return e ? pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot open: %s", path, os)
             : pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: cannot open: out of memory", path);
}

/* Reads len bytes into buf; *got those read before the end of the data. A read error or
 * corrupt gzip data is an error naming the file; the end of the data is not. */
static pf_status read_bytes(gzFile f, const char *path, uint8_t *buf, size_t len, size_t *got,
                            pf_error *err) {
    *got = 0;
    while (*got < len) {
        int n = gzread(f, buf + *got, (unsigned)(len - *got));
        if (n > 0) {
            *got += (size_t)n;
            continue;
        }
        int zerr = Z_OK;
        const char *msg = gzerror(f, &zerr);
        if (zerr == Z_OK || zerr == Z_BUF_ERROR) /* the end, or gzip data cut short */
            return PF_OK;
        if (zerr == Z_ERRNO) {
            char os[128];
            os_text(errno, os, sizeof os);
            return pf_error_set(err, PF_ERR_IO, NULL, "%s: read failed: %s", path, os);
        }
        return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: corrupt gzip data: %s", path,
                            msg ? msg : "unknown error");
    }
    return PF_OK;
}

/* Reads and checks one file's header; a plain file's length too (a gzip file's shows as its
 * records are read). */
static pf_status open_header(gzFile f, const char *path, uint32_t magic, size_t header, uint64_t *n,
                             uint64_t *item, pf_error *err) {
    uint8_t h[16];
    size_t got = 0;
    pf_status st = read_bytes(f, path, h, header, &got, err);
    if (st == PF_OK)
        st = check_idx_header(h, got, path, magic, header, n, item, err);
    if (st != PF_OK || !gzdirect(f))
        return st;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot tell its size: %s", path,
                            strerror(errno));
    uint64_t len = (uint64_t)sb.st_size, expected = header + *n * *item;
    if (len < expected)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: truncated: expected %llu bytes, got %llu (record %llu of %llu "
                            "is cut)",
                            path, (unsigned long long)expected, (unsigned long long)len,
                            (unsigned long long)((len - header) / *item), (unsigned long long)*n);
    return check_idx_length(len, path, header, *n, *item, err);
}

pf_status data_idx_open_range(const char *images, const char *labels, uint64_t first, uint64_t end,
                              int features, int classes, data_idx_reader **out, pf_error *err) {
    *out = NULL;
    data_idx_reader *r = pf_calloc(1, sizeof *r);
    if (!r)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", images);
    snprintf(r->images, sizeof r->images, "%s", images);
    snprintf(r->labels, sizeof r->labels, "%s", labels);
    r->classes = classes;
    uint64_t n_labels = 0, item = 0, one = 0;
    pf_status st = open_file(images, &r->fi, err);
    if (st == PF_OK)
        st = open_file(labels, &r->fl, err);
    if (st == PF_OK)
        st = open_header(r->fi, images, IDX_IMAGES_MAGIC, 16, &r->n, &item, err);
    if (st == PF_OK)
        st = open_header(r->fl, labels, IDX_LABELS_MAGIC, 8, &n_labels, &one, err);
    if (st == PF_OK && r->n != n_labels)
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s has %llu images but %s has %llu labels",
                          images, (unsigned long long)r->n, labels, (unsigned long long)n_labels);
    if (st == PF_OK && features > 0 && item != (uint64_t)features)
        st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                          "%s: images of %llu pixels, but the model reads %d inputs", images,
                          (unsigned long long)item, features);
    if (st == PF_OK && (first > r->n || (end != 0 && (end < first || end > r->n))))
        st = pf_error_set(
            err, PF_ERR_INVALID, NULL, "%s: records %llu .. %llu asked for, the file has %llu",
            images, (unsigned long long)first, (unsigned long long)end, (unsigned long long)r->n);
    if (st == PF_OK && !(r->pixels = pf_malloc((size_t)item)))
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", images);
    if (st == PF_OK && first > 0 &&
        (gzseek(r->fi, (z_off_t)(16 + first * item), SEEK_SET) < 0 ||
         gzseek(r->fl, (z_off_t)(8 + first), SEEK_SET) < 0))
        st = pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot move to record %llu", images,
                          (unsigned long long)first);
    if (st != PF_OK) {
        data_idx_close(r);
        return st;
    }
    r->features = (int)item; /* <= IDX_MAX_PIXELS */
    r->at = first;
    r->end = end ? end : r->n;
    *out = r;
    return PF_OK;
}

pf_status data_idx_next(data_idx_reader *r, float *x, float *y, pf_error *err) {
    if (r->done || r->at >= r->end) {
        r->done = 1;
        return PF_ERR_NOT_FOUND;
    }
    size_t got = 0;
    uint8_t label = 0;
    pf_status st = read_bytes(r->fi, r->images, r->pixels, (size_t)r->features, &got, err);
    if (st == PF_OK && got < (size_t)r->features)
        st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                          "%s: truncated: record %llu of %llu ends past the end of the data",
                          r->images, (unsigned long long)r->at, (unsigned long long)r->n);
    if (st == PF_OK)
        st = read_bytes(r->fl, r->labels, &label, 1, &got, err);
    if (st == PF_OK && got < 1)
        st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                          "%s: truncated: record %llu of %llu ends past the end of the data",
                          r->labels, (unsigned long long)r->at, (unsigned long long)r->n);
    if (st == PF_OK && r->classes > 0 && label >= r->classes)
        st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                          "%s: record %llu: label %d is not a class of the model's %d outputs",
                          r->labels, (unsigned long long)r->at, label, r->classes);
    if (st != PF_OK) {
        r->done = 1;
        return st;
    }
    for (int i = 0; i < r->features; i++)
        x[i] = (float)r->pixels[i] * (1.0f / 255.0f);
    *y = (float)label;
    r->at++;
    return PF_OK;
}

int data_idx_ended(const data_idx_reader *r) {
    return r->done;
}

void data_idx_close(data_idx_reader *r) {
    if (!r)
        return;
    if (r->fi)
        gzclose_r(r->fi);
    if (r->fl)
        gzclose_r(r->fl);
    pf_free(r->pixels);
    pf_free(r);
}

pf_status data_idx_probe(const char *images, const char *labels, uint64_t *n, int *features,
                         pf_error *err) {
    data_idx_reader *r = NULL;
    pf_status st = data_idx_open_range(images, labels, 0, 0, 0, 0, &r, err);
    if (st == PF_OK) {
        *n = r->n;
        *features = r->features;
    }
    data_idx_close(r);
    return st;
}
