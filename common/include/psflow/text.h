/* text.h - small text formats every layer shows or reads: RFC 3339 times, RFC 6901 JSON
 * pointers, and UTF-8 text cut to fit a buffer.
 *
 * No psflow concepts. Reentrant; any thread.
 */
#ifndef PSFLOW_TEXT_H
#define PSFLOW_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#define PF_RFC3339_MAX 32 /* bytes a formatted time needs, NUL included */

/* --- RFC 3339 times -------------------------------------------------------------------- */

/* Unix time t (seconds) as RFC 3339 UTC into buf[cap] (cap >= PF_RFC3339_MAX):
 * "2026-11-22T10:00:00.123Z" with `millis` (rounded to the millisecond, so the text read
 * back with pf_text_parse_rfc3339 prints the same text again), "2026-11-22T10:00:00Z"
 * without (truncated to the second). Returns buf. */
char *pf_text_format_rfc3339(double t, bool millis, char *buf, size_t cap);

/* Parses an RFC 3339 time - "2026-11-22T10:00:00Z", with 't' or ' ' for 'T', a fraction
 * of a second, and 'Z', 'z' or a +hh:mm / -hh:mm offset - into Unix seconds. False (and
 * *out untouched) for anything else, trailing characters included. */
bool pf_text_parse_rfc3339(const char *s, double *out);

/* --- JSON pointers --------------------------------------------------------------------- */

/* Appends "/" + token to the JSON pointer in ptr[cap] (NUL-terminated), escaping '~' as
 * "~0" and '/' as "~1" (RFC 6901). A token that does not fit is cut at a UTF-8 character
 * boundary; a pointer with no room for the "/" is left as it is. */
void pf_text_pointer_add(char *ptr, size_t cap, const char *token);

/* pf_text_pointer_add with an array index as the token. */
void pf_text_pointer_add_index(char *ptr, size_t cap, size_t index);

/* --- UTF-8 ---------------------------------------------------------------------------- */

/* Drops a character left incomplete at the end of s (NUL-terminated), as snprintf leaves
 * one when it cuts UTF-8 text to fit a buffer: the text stays UTF-8 if it was (a decoder
 * refuses a string with half a character). A complete last character, and bytes that are
 * not UTF-8 at all, are left as they are. Returns s. */
char *pf_text_cut_utf8(char *s);

/* A yes/no word, as options and environment variables take them: 1 for 1, true, yes, on;
 * 0 for 0, false, no, off (any case); -1 for anything else or NULL. */
int pf_text_bool(const char *s);

#endif
