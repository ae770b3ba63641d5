/* fuzz_idx.c - libFuzzer target for pf_idx_parse.
 *
 * Input layout: a big-endian uint32 split length s, then the image file bytes and the
 * label file bytes; the images get min(s, remaining) bytes and the labels the rest.
 */
#include <stddef.h>
#include <stdint.h>

#include "psflow/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4)
        return 0;
    size_t split =
        (size_t)data[0] << 24 | (size_t)data[1] << 16 | (size_t)data[2] << 8 | (size_t)data[3];
    data += 4;
    size -= 4;
    if (split > size)
        split = size;
    pf_dataset ds;
    pf_error err;
    if (pf_idx_parse(data, split, data + split, size - split, &ds, &err) == PF_OK)
        pf_dataset_deinit(&ds);
    return 0;
}
