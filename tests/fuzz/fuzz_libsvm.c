/* fuzz_libsvm.c - libFuzzer target for pf_libsvm_parse (3 features, ids from 1,
 * classification) and pf_libsvm_parse_ids (two embeddings: ids 1..3 for "a", 2 ids an
 * example; 4..8 for "b", 1 id). The input is not NUL-terminated, which the parser must cope
 * with. */
#include <stddef.h>
#include <stdint.h>

#include "psflow/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pf_dataset ds;
    pf_error err;
    if (pf_libsvm_parse((const char *)data, size, "fuzz", 3, 1, true, &ds, &err) == PF_OK)
        pf_dataset_deinit(&ds);
    pf_model_spec m = {.type = PF_MODEL_SOFTMAX, .outputs = 2, .n_embeddings = 2};
    m.embeddings[0] = (pf_embedding_spec){
        .name = "a", .vocab = 3, .dim = 2, .combiner = PF_COMBINE_SUM, .max_ids = 2, .hash = false};
    m.embeddings[1] = (pf_embedding_spec){
        .name = "b", .vocab = 5, .dim = 2, .combiner = PF_COMBINE_SUM, .max_ids = 1, .hash = false};
    if (pf_libsvm_parse_ids((const char *)data, size, "fuzz", &m, 1, true, &ds, &err) == PF_OK)
        pf_dataset_deinit(&ds);
    return 0;
}
