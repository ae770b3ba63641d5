/* data_idx.c - the IDX reader (MNIST's format; see data.h): an image file and a label file,
 * each checked against the lengths its header claims before anything is allocated.
 */
#include <stdint.h>
#include <string.h>

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

/* Checks one IDX file's header and length: `header` bytes of magic and big-endian uint32
 * dims (16 for images: n, rows, cols; 8 for labels: n), then exactly rows * cols bytes
 * (images) or 1 byte (labels) per example. Returns the example count in *n. */
static pf_status check_idx_file(const uint8_t *data, size_t len, const char *name, uint32_t magic,
                                size_t header, uint64_t *n, pf_error *err) {
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
    uint64_t item_bytes = 1;
    if (header == 16) {
        uint64_t rows = be32(data + 8), cols = be32(data + 12);
        item_bytes = rows * cols; /* both < 2^32: no overflow in 64 bits */
        if (item_bytes > IDX_MAX_PIXELS)
            return pf_error_set_offset(
                err, PF_ERR_FORMAT, 8, "%s: images of %llux%llu pixels exceed the limit of %u",
                name, (unsigned long long)rows, (unsigned long long)cols, IDX_MAX_PIXELS);
    }
    uint64_t expected = header + *n * item_bytes; /* <= 16 + 2^26 * 2^20 */
    if (len < expected)
        return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)len,
                                   "%s: truncated: expected %llu bytes, got %zu", name,
                                   (unsigned long long)expected, len);
    if (len > expected)
        return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)expected,
                                   "%s: trailing garbage: %llu bytes after the expected %llu", name,
                                   (unsigned long long)(len - expected),
                                   (unsigned long long)expected);
    return PF_OK;
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
