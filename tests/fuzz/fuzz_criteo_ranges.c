/* fuzz_criteo_ranges.c - libFuzzer target for the Criteo reader's byte ranges
 * (pf_criteo_open_range): the input, past its first 4 bytes, is written to a file, and those
 * bytes choose two cuts; reading [0, c1), [c1, c2) and [c2, end) must give exactly the rows
 * and bad lines that reading the file whole gives, in order (a line belongs to the range its
 * first byte is in). Inputs that start as gzip are skipped: a gzip file is read whole. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "psflow/criteo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ITEMS 4096

typedef struct item {
    int ok; /* 1 a row, 0 a bad line */
    pf_criteo_row row;
} item;

/* The outcomes of reading path's range [start, end) into out from *n; -1 if too many. */
static int read_range(const char *path, uint64_t start, uint64_t end, item *out, int *n) {
    pf_criteo_reader *r;
    pf_error err;
    if (pf_criteo_open_range(path, start, end, 256, &r, &err) != PF_OK)
        abort(); /* a plain file exists and is readable */
    for (;;) {
        if (*n >= MAX_ITEMS) {
            pf_criteo_close(r);
            return -1;
        }
        item *it = &out[*n];
        memset(it, 0, sizeof *it);
        pf_status st = pf_criteo_next(r, &it->row, &err);
        if (st == PF_ERR_NOT_FOUND)
            break;
        if (st != PF_OK && st != PF_ERR_FORMAT)
            abort();
        it->ok = st == PF_OK;
        if (!it->ok)
            memset(&it->row, 0, sizeof it->row);
        (*n)++;
        if (!it->ok && pf_criteo_ended(r))
            break;
    }
    pf_criteo_close(r);
    return 0;
}

static int same(const item *a, const item *b) {
    if (a->ok != b->ok)
        return 0;
    if (!a->ok)
        return 1;
    const pf_criteo_row *x = &a->row, *y = &b->row;
    if (x->label != y->label || x->num_present != y->num_present ||
        x->cat_present != y->cat_present)
        return 0;
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++)
        if ((x->num_present >> j & 1) && x->num[j] != y->num[j])
            return 0;
    for (int j = 0; j < PF_CRITEO_CATEGORICAL; j++)
        if ((x->cat_present >> j & 1) && x->cat[j] != y->cat[j])
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    static item whole[MAX_ITEMS], parts[MAX_ITEMS];
    if (size < 4 || size > 65536)
        return 0;
    const uint8_t *text = data + 4;
    size_t len = size - 4;
    if (len >= 2 && text[0] == 0x1f && text[1] == 0x8b)
        return 0;
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/fuzz_criteo_ranges.%d", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0)
        abort();
    uint64_t c1 = len ? ((uint64_t)data[0] << 8 | data[1]) % (len + 1) : 0;
    uint64_t c2 = len ? ((uint64_t)data[2] << 8 | data[3]) % (len + 1) : 0;
    if (c1 > c2) {
        uint64_t t = c1;
        c1 = c2;
        c2 = t;
    }
    int nw = 0, np = 0;
    if (read_range(path, 0, 0, whole, &nw) != 0)
        return 0;
    /* end 0 means the end of the file: a cut at 0 is an empty first range, skipped */
    if ((c1 > 0 && read_range(path, 0, c1, parts, &np) != 0) ||
        (c2 > c1 && read_range(path, c1, c2, parts, &np) != 0) ||
        read_range(path, c2, 0, parts, &np) != 0)
        return 0;
    if (np != nw)
        abort();
    for (int i = 0; i < nw; i++)
        if (!same(&whole[i], &parts[i]))
            abort();
    return 0;
}
