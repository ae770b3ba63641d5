/* fuzz_libsvm.c - libFuzzer target for pf_libsvm_parse (3 features, ids from 1,
 * classification). The input is not NUL-terminated, which the parser must cope with. */
#include <stddef.h>
#include <stdint.h>

#include "psflow/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pf_dataset ds;
    pf_error err;
    if (pf_libsvm_parse((const char *)data, size, "fuzz", 3, 1, true, &ds, &err) == PF_OK)
        pf_dataset_deinit(&ds);
    return 0;
}
