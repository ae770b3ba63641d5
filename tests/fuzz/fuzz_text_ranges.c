/* fuzz_text_ranges.c - libFuzzer target for the streamed csv and libsvm reader
 * (data_text_open_range): the input, past its first 5 bytes, is written to a file, and those
 * bytes choose the format (csv of 3 numbers, csv of ids, libsvm) and two cuts. Reading
 * [0, c1), [c1, c2) and [c2, end) must give exactly the examples and bad lines that reading the
 * file as one range gives, in order; and when that finds no bad line, the whole-file parser
 * (pf_csv_parse, pf_csv_parse_ids, pf_libsvm_parse) must give the same examples, or refuse a
 * file without any. Inputs that start as gzip are skipped: a gzip file is read whole. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ml/data_internal.h"
#include "psflow/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ITEMS 4096
#define MAX_WIDTH 8

typedef struct item {
    int ok; /* 1 an example, 0 a bad line */
    float x[MAX_WIDTH], y;
} item;

static pf_model_spec model_of(int kind) {
    pf_model_spec m = {.type = PF_MODEL_SOFTMAX, .outputs = 1 << 20, .inputs = 3};
    if (kind == 1) {
        m.n_embeddings = 2;
        m.embeddings[0] = (pf_embedding_spec){.name = "a",
                                              .vocab = 3,
                                              .dim = 2,
                                              .combiner = PF_COMBINE_SUM,
                                              .max_ids = 2,
                                              .hash = false};
        m.embeddings[1] = (pf_embedding_spec){.name = "b",
                                              .vocab = 5,
                                              .dim = 2,
                                              .combiner = PF_COMBINE_SUM,
                                              .max_ids = 1,
                                              .hash = true};
    }
    return m;
}

/* The outcomes of reading path's range [start, end) into out from *n; -1 if too many. */
static int read_range(int kind, const pf_model_spec *m, const char *path, uint64_t start,
                      uint64_t end, item *out, int *n) {
    data_text_reader *r;
    pf_error err;
    if (data_text_open_range(kind == 2 ? PF_DATA_LIBSVM : PF_DATA_CSV, m, 1, path, start, end,
                             1 << 17, &r, &err) != PF_OK)
        abort(); /* a plain file exists and is readable */
    for (;;) {
        if (*n >= MAX_ITEMS) {
            data_text_close(r);
            return -1;
        }
        item *it = &out[*n];
        memset(it, 0, sizeof *it);
        pf_status st = data_text_next(r, it->x, &it->y, &err);
        if (st == PF_ERR_NOT_FOUND)
            break;
        if (st != PF_OK && st != PF_ERR_FORMAT)
            abort();
        it->ok = st == PF_OK;
        if (!it->ok)
            memset(it, 0, sizeof *it);
        (*n)++;
        if (!it->ok && data_text_ended(r))
            break;
    }
    data_text_close(r);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    static item whole[MAX_ITEMS], parts[MAX_ITEMS];
    if (size < 5 || size > 65536)
        return 0;
    int kind = data[4] % 3;
    const uint8_t *text = data + 5;
    size_t len = size - 5;
    if (len >= 2 && text[0] == 0x1f && text[1] == 0x8b)
        return 0;
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/fuzz_text_ranges_%d", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0)
        abort();
    pf_model_spec m = model_of(kind);
    int width = pf_model_input_width(&m);
    uint64_t c1 = len ? (uint64_t)(data[0] | data[1] << 8) % (len + 1) : 0;
    uint64_t c2 = len ? (uint64_t)(data[2] | data[3] << 8) % (len + 1) : 0;
    if (c1 > c2) {
        uint64_t t = c1;
        c1 = c2;
        c2 = t;
    }
    int n_whole = 0, n_parts = 0;
    if (read_range(kind, &m, path, 0, 0, whole, &n_whole) != 0)
        return 0;
    /* [0, c1) with c1 0 would be the whole file: skip an empty first range */
    if ((c1 == 0 ? 0 : read_range(kind, &m, path, 0, c1, parts, &n_parts)) != 0 ||
        (c2 > c1 && read_range(kind, &m, path, c1, c2, parts, &n_parts) != 0) ||
        (c2 < len && read_range(kind, &m, path, c2, 0, parts, &n_parts) != 0))
        return 0;
    if (n_whole != n_parts)
        abort();
    int bad = 0;
    for (int i = 0; i < n_whole; i++) {
        bad += !whole[i].ok;
        if (memcmp(&whole[i], &parts[i], sizeof whole[i]) != 0)
            abort();
    }
    if (bad)
        return 0;
    pf_dataset ds;
    pf_error err;
    pf_status st = kind == 0 ? pf_csv_parse((const char *)text, len, "f", 3, true, &ds, &err)
                   : kind == 1
                       ? pf_csv_parse_ids((const char *)text, len, "f", &m, true, &ds, &err)
                       : pf_libsvm_parse((const char *)text, len, "f", 3, 1, true, &ds, &err);
    if (st != PF_OK) {
        if (n_whole != 0) /* only a file without examples is refused */
            abort();
        return 0;
    }
    if (ds.n != n_whole || ds.features != width)
        abort();
    for (int i = 0; i < n_whole; i++)
        if (memcmp(ds.x + (size_t)i * (size_t)width, whole[i].x, (size_t)width * sizeof(float)) !=
                0 ||
            ds.y[i] != whole[i].y)
            abort();
    pf_dataset_deinit(&ds);
    return 0;
}
