/* fuzz_wire.c - libFuzzer target for the data-plane codec.
 *
 * The input is one whole frame of any type. It must decode or be refused with a wire
 * code; a frame that decodes must re-encode to exactly the same bytes (decoding is
 * canonical), and the pieces the transport would send (pf_wire_out_parts) must be those
 * bytes in order. Any mismatch aborts. The seeds (tests/data/wire/) hold frames of every
 * type, the row messages (ROW_PULL, ROW_PUSH_PULL) with selections and row records and the
 * segment messages (SEG_ATTACH .. SEG_PUSH_PULL) with segment records among them.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static pf_wire_in in;
    static pf_wire_out out;
    /* A piece of head, then one of data per tensor and per row record, and a last head. */
    static struct iovec parts[2 * (2 * PF_WIRE_MAX_TENSORS) + 1];
    static int ready;
    if (!ready) {
        pf_wire_in_init(&in, 0, 0);
        pf_wire_out_init(&out);
        ready = 1;
    }
    /* libFuzzer's buffer is a fresh exact-size allocation, so reads past its end are
     * caught; the decoder needs it 4-byte aligned, which malloc'd memory is. */
    const uint8_t *msg = data;
    uint8_t *copy = NULL;
    if ((uintptr_t)data % 4 != 0) {
        copy = malloc(size ? size : 1);
        if (!copy)
            return 0;
        if (size)
            memcpy(copy, data, size);
        msg = copy;
    }
    pf_wire_msg m;
    pf_error err;
    pf_status st = pf_wire_decode(&in, msg, size, &m, &err);
    if (st != PF_OK) {
        /* A refusal always names a wire code and a problem. */
        if (pf_wire_in_code(&in) == PF_WIRE_OK || err.message[0] == '\0')
            abort();
        free(copy);
        return 0;
    }
    if (pf_wire_encode(&out, &m, &err) != PF_OK || pf_wire_out_len(&out) != size)
        abort();
    /* The pieces the transport sends, in order, are the message again byte for byte. */
    size_t n_parts = pf_wire_out_parts(&out, parts, sizeof parts / sizeof parts[0]);
    if (n_parts > sizeof parts / sizeof parts[0])
        abort(); /* at most 2 * (tensors + row records) + 1 */
    size_t pos = 0;
    for (size_t i = 0; i < n_parts; i++) {
        if (parts[i].iov_len == 0 || parts[i].iov_len > size - pos ||
            memcmp(parts[i].iov_base, msg + pos, parts[i].iov_len) != 0)
            abort();
        pos += parts[i].iov_len;
    }
    if (pos != size)
        abort();
    free(copy);
    return 0;
}
