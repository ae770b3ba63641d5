/* status.c - pf_strerror and the pf_error helpers. */
#include "psflow/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "psflow/text.h"

const char *pf_strerror(pf_status status) {
    switch (status) {
#define PF_STATUS_CASE(name, value, text)                                                          \
    case name:                                                                                     \
        return text;
        PF_STATUS_LIST(PF_STATUS_CASE)
#undef PF_STATUS_CASE
    }
    return "unknown status";
}

void pf_error_clear(pf_error *err) {
    if (!err)
        return;
    err->message[0] = '\0';
    err->pointer[0] = '\0';
    err->offset = -1;
}

pf_status pf_error_set(pf_error *err, pf_status status, const char *pointer, const char *fmt, ...) {
    if (!err)
        return status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    pf_text_cut_utf8(err->message); /* a message cut to fit stays UTF-8 (wire.h strings) */
    snprintf(err->pointer, sizeof err->pointer, "%s", pointer ? pointer : "");
    return status;
}

pf_status pf_error_vset_offset(pf_error *err, pf_status status, long long offset, const char *fmt,
                               va_list ap) {
    if (!err)
        return status;
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    pf_text_cut_utf8(err->message);
    err->pointer[0] = '\0';
    err->offset = offset;
    return status;
}

pf_status pf_error_set_offset(pf_error *err, pf_status status, long long offset, const char *fmt,
                              ...) {
    va_list ap;
    va_start(ap, fmt);
    pf_status st = pf_error_vset_offset(err, status, offset, fmt, ap);
    va_end(ap);
    return st;
}
