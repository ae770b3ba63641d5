/* signals.h - how a long-running psflow process (the coordinator, an agent) hears that it
 * should stop.
 *
 * No psflow concepts. Call from the main thread before starting others.
 */
#ifndef PSFLOW_SIGNALS_H
#define PSFLOW_SIGNALS_H

/* Calls handler on SIGINT and SIGTERM - installed without SA_RESTART, so a blocking call
 * the signal interrupts returns EINTR and a loop sees the handler's flag at once - and
 * ignores SIGPIPE, so writing to a peer that went away is an error to handle rather than
 * the end of the process. The handler must only do async-signal-safe things. */
void pf_signals_on_stop(void (*handler)(int));

#endif
