/* fuzz_csv.c - libFuzzer target for pf_csv_parse (3 features, classification). The input
 * is not NUL-terminated, which the parser must cope with. */
#include <stddef.h>
#include <stdint.h>

#include "psflow/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pf_dataset ds;
    pf_error err;
    if (pf_csv_parse((const char *)data, size, "fuzz", 3, true, &ds, &err) == PF_OK)
        pf_dataset_deinit(&ds);
    return 0;
}
