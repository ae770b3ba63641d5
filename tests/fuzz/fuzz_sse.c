/* fuzz_sse.c - libFuzzer target for the Server-Sent Events parser.
 *
 * The input is a stream. It is fed whole, then again cut into chunks whose sizes come from
 * the input itself (so chunk boundaries fall anywhere, between CR and LF included); both
 * must dispatch the same messages, each with an event name under 64 bytes, an id under
 * PF_SSE_ID_MAX bytes and data that are NUL-terminated strings, and leave the same last id
 * for a reconnection after a reset. Any mismatch aborts. Seed corpus:
 * tests/data/sse/{valid,invalid}/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What a run dispatched: a count and a running FNV-1a over every field. */
typedef struct digest {
    size_t n;
    uint64_t h;
} digest;

static void mix(digest *d, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s;; p++) {
        d->h = (d->h ^ *p) * 1099511628211ull; /* the NUL too: fields stay apart */
        if (!*p)
            break;
    }
}

static void on_event(const char *event, const char *data, const char *id, void *ctx) {
    if (strlen(event) >= 64 || strlen(id) >= PF_SSE_ID_MAX || !data)
        abort();
    digest *d = ctx;
    d->n++;
    mix(d, event);
    mix(d, id);
    mix(d, data);
}

static digest run(const uint8_t *data, size_t size, int chunked, char *last_id, size_t cap) {
    digest d = {0, 1469598103934665603ull};
    pf_sse p;
    pf_sse_init(&p, on_event, &d);
    size_t pos = 0;
    for (size_t k = 0; pos < size; k++) {
        size_t n = chunked ? 1 + data[k % size] % 7 : size;
        if (n > size - pos)
            n = size - pos;
        pf_sse_feed(&p, (const char *)data + pos, n);
        pos += n;
    }
    pf_sse_reset(&p);
    strncpy(last_id, pf_sse_last_id(&p), cap - 1);
    last_id[cap - 1] = '\0';
    pf_sse_deinit(&p);
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char id_whole[PF_SSE_ID_MAX], id_chunked[PF_SSE_ID_MAX];
    digest whole = run(data, size, 0, id_whole, sizeof id_whole);
    digest chunked = run(data, size, 1, id_chunked, sizeof id_chunked);
    if (whole.n != chunked.n || whole.h != chunked.h || strcmp(id_whole, id_chunked) != 0)
        abort();
    return 0;
}
