/* sse.c - incremental Server-Sent Events parser (see sse.h).
 *
 * DESIGN: the bytes of the current line collect in a growing buffer (bounded by
 * PF_SSE_MAX_LINE) until its end arrives, whatever the chunks; each complete line then goes
 * through the WHATWG "interpret an event stream" steps in handle_line(), and the data lines
 * of the message collect in a second buffer until the blank line that dispatches it.
 */
#include "psflow/sse.h"

#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"

void pf_sse_init(pf_sse *p, pf_sse_handler on_event, void *ctx) {
    memset(p, 0, sizeof *p);
    p->on_event = on_event;
    p->ctx = ctx;
}

void pf_sse_deinit(pf_sse *p) {
    pf_free(p->line);
    pf_free(p->data);
    memset(p, 0, sizeof *p);
}

/* Appends n bytes to a growing buffer. Returns false when out of memory. */
static bool grow_append(char **buf, size_t *len, size_t *cap, const char *src, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *g = pf_realloc(*buf, c);
        if (!g)
            return false;
        *buf = g;
        *cap = c;
    }
    memcpy(*buf + *len, src, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

/* Handles one complete line (the WHATWG "interpret an event stream" steps). */
static void handle_line(pf_sse *p, const char *line, size_t n) {
    if (n == 0) {
        /* A blank line dispatches the message; one without data lines is discarded. The
         * id counts as seen either way, as in the WHATWG "dispatch the event" steps. */
        memcpy(p->last_id, p->id, sizeof p->last_id);
        if (p->data_len && !p->oom) {
            p->data[--p->data_len] = '\0'; /* the last data line's '\n' */
            p->on_event(p->event[0] ? p->event : "message", p->data, p->last_id, p->ctx);
        }
        p->data_len = 0;
        p->oom = false;
        p->event[0] = '\0';
        return;
    }
    if (line[0] == ':')
        return; /* a comment, e.g. the keepalive */
    const char *colon = memchr(line, ':', n);
    size_t name_len = colon ? (size_t)(colon - line) : n;
    const char *value = colon ? colon + 1 : line + n;
    size_t value_len = colon ? n - name_len - 1 : 0;
    if (value_len && *value == ' ')
        value++, value_len--;
    if (name_len == 4 && !memcmp(line, "data", 4)) {
        if (!grow_append(&p->data, &p->data_len, &p->data_cap, value, value_len) ||
            !grow_append(&p->data, &p->data_len, &p->data_cap, "\n", 1))
            p->oom = true;
    } else if (name_len == 5 && !memcmp(line, "event", 5)) {
        snprintf(p->event, sizeof p->event, "%.*s", (int)value_len, value);
    } else if (name_len == 2 && !memcmp(line, "id", 2)) {
        if (!memchr(value, '\0', value_len) && value_len < sizeof p->id)
            snprintf(p->id, sizeof p->id, "%.*s", (int)value_len, value);
    }
    /* "retry" and unknown fields are ignored: reconnection timing is ours. */
}

void pf_sse_reset(pf_sse *p) {
    p->line_len = 0;
    p->overlong = false;
    p->after_cr = false;
    p->data_len = 0;
    p->oom = false;
    p->event[0] = '\0';
    memcpy(p->id, p->last_id, sizeof p->id);
}

void pf_sse_feed(pf_sse *p, const char *buf, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char ch = buf[i];
        if (ch == '\n' && p->after_cr) {
            p->after_cr = false;
            continue;
        }
        p->after_cr = ch == '\r';
        if (ch == '\r' || ch == '\n') {
            if (!p->overlong)
                handle_line(p, p->line ? p->line : "", p->line_len);
            p->line_len = 0;
            p->overlong = false;
            continue;
        }
        if (p->overlong)
            continue;
        /* Copy the run of ordinary bytes up to the next line end in one go. */
        size_t j = i;
        while (j < n && buf[j] != '\r' && buf[j] != '\n')
            j++;
        if (p->line_len + (j - i) > PF_SSE_MAX_LINE ||
            !grow_append(&p->line, &p->line_len, &p->line_cap, buf + i, j - i)) {
            p->overlong = true;
            p->line_len = 0;
        }
        i = j - 1;
    }
}

void pf_sse_resume_after(pf_sse *p, const char *id) {
    snprintf(p->last_id, sizeof p->last_id, "%s", id);
    memcpy(p->id, p->last_id, sizeof p->id);
}

const char *pf_sse_last_id(const pf_sse *p) {
    return p->last_id;
}
