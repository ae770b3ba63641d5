/* fuzz_spec.c - libFuzzer target for the job spec parser.
 *
 * Any input either fails with a message and leaves the spec empty, or parses; a parsed spec
 * must serialise, parse again, and serialise to the same text (the normalised form is a
 * fixed point). Seed corpus: tests/data/spec/valid/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const pf_job_spec zero;
    pf_job_spec spec, again;
    pf_error err;

    if (pf_job_spec_parse((const char *)data, size, &spec, &err) != PF_OK) {
        if (err.message[0] == '\0' || memcmp(&spec, &zero, sizeof spec) != 0)
            abort();
        return 0;
    }
    char *json = pf_job_spec_to_json(&spec);
    if (!json)
        abort();
    if (pf_job_spec_parse(json, strlen(json), &again, &err) != PF_OK)
        abort();
    char *json2 = pf_job_spec_to_json(&again);
    if (!json2 || strcmp(json, json2) != 0)
        abort();
    pf_free(json2);
    pf_free(json);
    pf_job_spec_deinit(&again);
    pf_job_spec_deinit(&spec);
    return 0;
}
