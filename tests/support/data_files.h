/* data_files.h - the unit tests' access to their cases under tests/data/ and to the files
 * they write: listing a folder's files, reading one whole, writing one (plain or gzip). A failure
 * fails the test (cmocka).
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

/* out[size] = a "/" b (it must fit). */
void data_path_join(char *out, size_t size, const char *a, const char *b);

/* Writes data[0 .. len) to path, plain or gzip-compressed. */
void data_write(const char *path, const void *data, size_t len);
void data_write_gz(const char *path, const void *data, size_t len);

#endif
