/* tf_config_cases.c - the TF_CONFIG tests' shared helpers (see tf_config_cases.h). */
#include "tests/support/tf_config_cases.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "psflow/mem.h"
#include "tests/support/counting_alloc.h"

pf_status parse_text(const char *text, pf_tf_config *cfg, pf_error *err) {
    return pf_tf_config_parse(text, strlen(text), cfg, err);
}

bool is_zeroed(const pf_tf_config *cfg) {
    static const pf_tf_config zero;
    return memcmp(cfg, &zero, sizeof zero) == 0;
}

/* Parses text, which must succeed, into *cfg. */
void must_parse(const char *text, pf_tf_config *cfg) {
    pf_error err;
    pf_status st = parse_text(text, cfg, &err);
    if (st != PF_OK)
        fail_msg("%s: %s: %s", text, pf_strerror(st), err.message);
}

/* Validates text, which must parse; returns the status, message in *err. */
pf_status validate_text(const char *text, pf_error *err) {
    pf_tf_config cfg;
    must_parse(text, &cfg);
    pf_status st = pf_tf_config_validate(&cfg, err);
    pf_tf_config_deinit(&cfg);
    if (st != PF_OK) {
        assert_int_equal(st, PF_ERR_INVALID);
        assert_null(strchr(err->message, '\n'));
        assert_non_null(strstr(err->message, "TF_CONFIG: "));
    }
    return st;
}

/* format(cfg); then parse that and format again: the same bytes. Returns the first text. */
char *format_fixed_point(const pf_tf_config *cfg, const char *what) {
    pf_tf_config again;
    pf_error err;
    char *first = pf_tf_config_format(cfg);
    if (!first)
        fail_msg("%s: format failed", what);
    pf_status st = parse_text(first, &again, &err);
    if (st != PF_OK)
        fail_msg("%s: the written form does not parse: %s\n%s", what, err.message, first);
    char *second = pf_tf_config_format(&again);
    assert_non_null(second);
    if (strcmp(first, second) != 0)
        fail_msg("%s: format is not a fixed point:\n%s\n%s", what, first, second);
    pf_free(second);
    pf_tf_config_deinit(&again);
    return first;
}

pf_status add_one(pf_tf_config *cfg, const char *job, const char *addr) {
    const char *addrs[1] = {addr};
    return pf_tf_config_add_job(cfg, job, addrs, 1);
}

int restore_allocator(void **state) {
    (void)state;
    use_libc();
    return 0;
}
