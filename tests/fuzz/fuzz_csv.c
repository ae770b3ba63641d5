/* fuzz_csv.c - libFuzzer target for pf_csv_parse (3 features, classification) and
 * pf_csv_parse_ids (categorical cells: "a" integer ids 0..2, up to 2 a cell; "b" hashed
 * into 5 rows, 1 a cell; then "a" a dynamic table of 64-bit ids beside a third, dynamic and
 * hashed, "c"). The input is not NUL-terminated, which the parser must cope
 * with. */
#include <stddef.h>
#include <stdint.h>

#include "psflow/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pf_dataset ds;
    pf_error err;
    if (pf_csv_parse((const char *)data, size, "fuzz", 3, true, &ds, &err) == PF_OK)
        pf_dataset_deinit(&ds);
    pf_model_spec m = {.type = PF_MODEL_SOFTMAX, .outputs = 2, .n_embeddings = 2};
    m.embeddings[0] = (pf_embedding_spec){
        .name = "a", .vocab = 3, .dim = 2, .combiner = PF_COMBINE_SUM, .max_ids = 2, .hash = false};
    m.embeddings[1] = (pf_embedding_spec){
        .name = "b", .vocab = 5, .dim = 2, .combiner = PF_COMBINE_SUM, .max_ids = 1, .hash = true};
    if (pf_csv_parse_ids((const char *)data, size, "fuzz", &m, true, &ds, &err) == PF_OK)
        pf_dataset_deinit(&ds);
    /* the same cells with "a" a dynamic table (64-bit ids) and a third, hashed, one */
    m.n_embeddings = 3;
    m.embeddings[0] = (pf_embedding_spec){
        .name = "a", .dim = 2, .max_ids = 2, .max_rows = 4, .kind = PF_TABLE_DYNAMIC};
    m.embeddings[2] = (pf_embedding_spec){
        .name = "c", .dim = 2, .max_ids = 3, .max_rows = 4, .hash = true, .kind = PF_TABLE_DYNAMIC};
    if (pf_csv_parse_ids((const char *)data, size, "fuzz", &m, true, &ds, &err) == PF_OK)
        pf_dataset_deinit(&ds);
    return 0;
}
