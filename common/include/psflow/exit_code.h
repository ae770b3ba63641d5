/* exit_code.h - the exit codes of psflow processes (sysexits.h values), shared by the CLI
 * and the agents that report a task's exit code to the coordinator.
 */
#ifndef PSFLOW_EXIT_CODE_H
#define PSFLOW_EXIT_CODE_H

#include "psflow/status.h"

#define PF_EX_USAGE       64 /* bad command line */
#define PF_EX_DATAERR     65 /* invalid job spec or data; training produced NaN or Inf */
#define PF_EX_NOINPUT     66 /* input file missing or unreadable */
#define PF_EX_SOFTWARE    70 /* internal error */
#define PF_EX_OSERR       71 /* out of memory and other system errors */
#define PF_EX_CANTCREAT   73 /* output file cannot be written */
#define PF_EX_UNAVAILABLE 69 /* a required device or service is unavailable */
#define PF_EX_NOPERM      77 /* the coordinator refused the API token (HTTP 401/403) */

/* The exit code for a failure status: 66 unreadable input, 65 invalid spec or data or a
 * non-finite loss, gradient or value (PF_ERR_NONFINITE), 69 a
 * device or peer unavailable, 71 out of memory, 130 cancelled (as a shell reports SIGINT),
 * 70 anything else. */
int pf_exit_code(pf_status st);

#endif
