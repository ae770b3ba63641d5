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

void pf_sse_init(pf_sse *p, pf_sse_handler on_event, void *ctx) {
    memset(p, 0, sizeof *p);
    pf_buf_init(&p->line, PF_SSE_MAX_LINE);
    pf_buf_init(&p->data, PF_SSE_MAX_DATA);
    p->on_event = on_event;
    p->ctx = ctx;
}

void pf_sse_deinit(pf_sse *p) {
    pf_buf_deinit(&p->line);
    pf_buf_deinit(&p->data);
    memset(p, 0, sizeof *p);
}

/* Handles one complete line (the WHATWG "interpret an event stream" steps). */
static void handle_line(pf_sse *p, const char *line, size_t n) {
    if (n == 0) {
        /* A blank line dispatches the message; one without data lines is discarded. The
         * id counts as seen either way, as in the WHATWG "dispatch the event" steps. */
        memcpy(p->last_id, p->id, sizeof p->last_id);
        if (p->data.len && !p->oom) {
            char *data = (char *)p->data.data;
            data[--p->data.len] = '\0'; /* the last data line's '\n' */
            p->on_event(p->event[0] ? p->event : "message", data, p->last_id, p->ctx);
        }
        pf_buf_reset(&p->data);
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
        if (pf_buf_append(&p->data, value, value_len) != PF_OK ||
            pf_buf_append(&p->data, "\n", 1) != PF_OK || pf_buf_terminate(&p->data) != PF_OK)
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
    pf_buf_reset(&p->line);
    p->overlong = false;
    p->after_cr = false;
    pf_buf_reset(&p->data);
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
                handle_line(p, p->line.len ? (const char *)p->line.data : "", p->line.len);
            pf_buf_reset(&p->line);
            p->overlong = false;
            continue;
        }
        if (p->overlong)
            continue;
        /* Copy the run of ordinary bytes up to the next line end in one go. */
        size_t j = i;
        while (j < n && buf[j] != '\r' && buf[j] != '\n')
            j++;
        if (pf_buf_append(&p->line, buf + i, j - i) != PF_OK) {
            p->overlong = true; /* over PF_SSE_MAX_LINE, or out of memory: drop the line */
            pf_buf_reset(&p->line);
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
