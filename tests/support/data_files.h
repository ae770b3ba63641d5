/* data_files.h - the unit tests' access to their cases under tests/data/: listing a folder's
 * files and reading one whole. A failure fails the test (cmocka).
 */
#ifndef PSFLOW_TESTS_DATA_FILES_H
#define PSFLOW_TESTS_DATA_FILES_H

#include <stdbool.h>
#include <stddef.h>

/* The names of the files in dir ending in suffix, sorted, into names[0 .. max) - without the
 * suffix when strip is set - each a malloc'd string (free them); returns how many. */
size_t data_files(const char *dir, const char *suffix, bool strip, char **names, size_t max);

/* The whole file at path (at most max bytes) in a new block, NUL-terminated (the NUL not
 * counted in *len) and aligned for any type; pf_free it. */
char *data_read(const char *path, size_t max, size_t *len);

#endif
