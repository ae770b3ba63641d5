/* sse.h - an incremental parser of Server-Sent Events (the WHATWG "event stream"), as the
 * coordinator's GET /api/v1/events sends them.
 *
 * Bytes arrive in arbitrary chunks: lines end with CRLF, LF or CR and may be split
 * anywhere, even between CR and LF. A message ends at a blank line; it is then handed to
 * the handler with its event name ("message" when it has none), its data lines joined with
 * '\n', and the id in force. Comments (":keepalive") and "retry" are ignored. A line longer
 * than PF_SSE_MAX_LINE is dropped, not buffered, and a message whose data could not be
 * stored (out of memory, or more than PF_SSE_MAX_DATA bytes) is dropped whole.
 *
 * The parser remembers the id of the last dispatched message, so that a client that
 * reconnects can send it as Last-Event-ID and miss nothing. A pf_sse is caller storage
 * (pf_sse_init/pf_sse_deinit); its fields are private. Not thread-safe: one stream, one
 * thread.
 */
#ifndef PSFLOW_SSE_H
#define PSFLOW_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "psflow/buf.h"

#define PF_SSE_MAX_LINE (1 << 20)  /* bytes; longer lines are dropped */
#define PF_SSE_MAX_DATA (16 << 20) /* bytes of one message's data; more drops the message */
#define PF_SSE_ID_MAX   128        /* an id field this long or longer is ignored */

/* Called for every dispatched message; the strings are borrowed for the call. */
typedef void (*pf_sse_handler)(const char *event, const char *data, const char *id, void *ctx);

typedef struct pf_sse {
    pf_buf line;   /* the line being received, without its terminator */
    bool overlong; /* the current line exceeded PF_SSE_MAX_LINE: drop it */
    bool after_cr; /* the previous byte ended a line with CR: a following LF belongs to it */
    pf_buf data;   /* the message's data lines, each followed by '\n' */
    bool oom;      /* a data line could not be stored: the message is dropped */
    char event[64];
    char id[PF_SSE_ID_MAX];      /* the id field of the message being received */
    char last_id[PF_SSE_ID_MAX]; /* the id of the last dispatched message */
    pf_sse_handler on_event;
    void *ctx;
} pf_sse;

/* --- lifecycle ------------------------------------------------------------------------- */

/* An empty parser that calls on_event(..., ctx) for each message. Allocates nothing. */
void pf_sse_init(pf_sse *p, pf_sse_handler on_event, void *ctx);

/* Frees the buffers and zeroes p; safe on a zeroed or deinit'ed parser. */
void pf_sse_deinit(pf_sse *p);

/* --- use ------------------------------------------------------------------------------- */

/* Feeds n received bytes; dispatches every message they complete, in order. */
void pf_sse_feed(pf_sse *p, const char *buf, size_t n);

/* Forgets a half-received message: it belonged to a connection that is gone, and the next
 * one resumes after the last dispatched id. */
void pf_sse_reset(pf_sse *p);

/* Starts as if the message with this id had just been dispatched: a stream opened with
 * pf_sse_last_id() as Last-Event-ID then begins after it. An id of PF_SSE_ID_MAX bytes or
 * more is cut to fit. */
void pf_sse_resume_after(pf_sse *p, const char *id);

/* --- query ----------------------------------------------------------------------------- */

/* The id of the last dispatched message ("" before any), borrowed: the Last-Event-ID of a
 * reconnection. */
const char *pf_sse_last_id(const pf_sse *p);

#endif
