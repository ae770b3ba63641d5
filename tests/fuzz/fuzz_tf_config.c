/* fuzz_tf_config.c - libFuzzer target for the TF_CONFIG parser and writer.
 *
 * Any input either fails with a one-line message and leaves the config zeroed, or parses; a
 * parsed config must validate without crashing, format, parse again, and format to the same
 * text (the written form is a fixed point). Seed corpus: tests/data/tf_config/{valid,invalid}/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/tf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const pf_tf_config zero;
    pf_tf_config cfg, again;
    pf_error err;

    if (pf_tf_config_parse((const char *)data, size, &cfg, &err) != PF_OK) {
        if (err.message[0] == '\0' || strchr(err.message, '\n') ||
            memcmp(&cfg, &zero, sizeof cfg) != 0)
            abort();
        return 0;
    }
    if (pf_tf_config_validate(&cfg, &err) != PF_OK) {
        if (err.message[0] == '\0' || strchr(err.message, '\n'))
            abort();
    } else if (!pf_tf_config_address(&cfg, cfg.task_type, cfg.task_index)) {
        abort();
    }
    char *first = pf_tf_config_format(&cfg);
    if (!first)
        abort();
    if (pf_tf_config_parse(first, strlen(first), &again, &err) != PF_OK)
        abort();
    char *second = pf_tf_config_format(&again);
    if (!second || strcmp(first, second) != 0)
        abort();
    pf_free(second);
    pf_free(first);
    pf_tf_config_deinit(&again);
    pf_tf_config_deinit(&cfg);
    return 0;
}
