/* signals.c - the stop signals of long-running processes (see signals.h). */
#include "psflow/signals.h"

#include <signal.h>
#include <string.h>

void pf_signals_on_stop(void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}
