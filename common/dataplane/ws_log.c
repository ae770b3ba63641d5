/* ws_log.c - the data plane endpoint's log of refused connections (ws_internal.h): one line
 * per cause at once, then at most one every REFUSAL_LOG_EVERY seconds, so a peer that keeps
 * sending garbage cannot flood the log.
 *
 * It sits at the bottom, below ws_tls.c: ws.c (receiving, limits) and ws_tls.c (failed
 * handshakes) log their refusals here, and it calls nothing of theirs.
 */
#include <stdarg.h>
#include <stdio.h>

#include "psflow/clock.h"
#include "ws_internal.h"

void ws_refused(pf_ws *ws, int cause, const char *fmt, ...) {
    struct refusal *r = &ws->refusals[cause];
    double now = pf_clock_now();
    if (r->last != 0 && now - r->last < REFUSAL_LOG_EVERY) {
        r->since++;
        return;
    }
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char where[32] = "";
    if (ws->port)
        snprintf(where, sizeof where, " (port %d)", ws->port);
    if (r->since)
        fprintf(stderr, "psflow: data plane%s: %s (and %lu more like it since the last report)\n",
                where, line, r->since);
    else
        fprintf(stderr, "psflow: data plane%s: %s\n", where, line);
    r->last = now;
    r->since = 0;
}
