/* status.h - one status enum for all of psflow, plus a detail record for parsers.
 *
 * Every fallible function returns pf_status: PF_OK (0) on success, a negative code
 * otherwise. Parsers additionally fill a pf_error so a user sees what was wrong and
 * where (a JSON pointer such as "/training/batch_size", or a byte offset in a file).
 */
#ifndef PSFLOW_STATUS_H
#define PSFLOW_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#define PF_STATUS_LIST(X)                                                                          \
    X(PF_OK, 0, "ok")                                                                              \
    X(PF_ERR_NOMEM, -1, "out of memory")                                                           \
    X(PF_ERR_INVALID, -2, "invalid argument")                                                      \
    X(PF_ERR_IO, -3, "input/output error")                                                         \
    X(PF_ERR_FORMAT, -4, "malformed input")                                                        \
    X(PF_ERR_SPEC, -5, "invalid job spec")                                                         \
    X(PF_ERR_NOT_FOUND, -6, "not found")                                                           \
    X(PF_ERR_UNSUPPORTED, -7, "unsupported")                                                       \
    X(PF_ERR_RANGE, -8, "value out of range")                                                      \
    X(PF_ERR_UNAVAILABLE, -9, "peer unavailable")                                                  \
    X(PF_ERR_CANCELLED, -10, "cancelled")                                                          \
    X(PF_ERR_NONFINITE, -11, "non-finite value")

typedef enum {
#define PF_STATUS_ENUM(name, value, text) name = value,
    PF_STATUS_LIST(PF_STATUS_ENUM)
#undef PF_STATUS_ENUM
} pf_status;

/* Static English text for a status; never NULL (unknown codes give "unknown status"). */
const char *pf_strerror(pf_status status);

/* Where and what went wrong, filled by parsers and loaders. All fields are
 * NUL-terminated; pointer is "" and offset is -1 when they do not apply. */
typedef struct pf_error {
    char message[256]; /* one line, no trailing newline, names the problem; a longer one is
                          cut at a UTF-8 character boundary */
    char pointer[128]; /* JSON pointer into the input document, e.g. "/model/hidden/1" */
    long long offset;  /* byte offset into a file, or -1 */
} pf_error;

/* Resets err to "no error". err may be NULL (then nothing happens). */
void pf_error_clear(pf_error *err);

/* Formats message into err (printf-style) and records pointer (may be NULL). Returns
 * `status` so callers can write `return pf_error_set(err, PF_ERR_SPEC, "/name", "...")`.
 * err may be NULL. */
pf_status pf_error_set(pf_error *err, pf_status status, const char *pointer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* pf_error_set for a problem located by a byte offset into a file or a message (-1: none)
 * rather than by a JSON pointer: fills message and offset, and pointer becomes "". Returns
 * `status`; err may be NULL. */
pf_status pf_error_set_offset(pf_error *err, pf_status status, long long offset, const char *fmt,
                              ...) __attribute__((format(printf, 4, 5)));

/* The va_list form of pf_error_set_offset, for wrappers that record more (a wire code)
 * before they fill err. */
pf_status pf_error_vset_offset(pf_error *err, pf_status status, long long offset, const char *fmt,
                               va_list ap) __attribute__((format(printf, 4, 0)));

#endif
