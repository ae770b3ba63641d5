/* tf_config_cases.h - what the TF_CONFIG tests share: parsing and validating text with the
 * expected outcome, the format fixed point, and building jobs. Failures are cmocka failures.
 */
#ifndef PSFLOW_TESTS_TF_CONFIG_CASES_H
#define PSFLOW_TESTS_TF_CONFIG_CASES_H

#include <stdbool.h>

#include "psflow/tf_config.h"

pf_status parse_text(const char *text, pf_tf_config *cfg, pf_error *err);

/* Whether cfg is all zero bytes (what a failed parse leaves). */
bool is_zeroed(const pf_tf_config *cfg);

/* Parses text, which must succeed, into *cfg. */
void must_parse(const char *text, pf_tf_config *cfg);

/* Validates text, which must parse; returns the status, message in *err. */
pf_status validate_text(const char *text, pf_error *err);

/* format(cfg); then parse that and format again: the same bytes. Returns the first text
 * (pf_free it). */
char *format_fixed_point(const pf_tf_config *cfg, const char *what);

/* Adds a job of one task at addr. */
pf_status add_one(pf_tf_config *cfg, const char *job, const char *addr);

/* A cmocka teardown that gives psflow back the libc allocator. */
int restore_allocator(void **state);

#endif
