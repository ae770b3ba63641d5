/* cli.h - the subcommands of the psflow executable, and its exit codes (sysexits.h). */
#ifndef PSFLOW_CLI_H
#define PSFLOW_CLI_H

#include "psflow/status.h"

#define CLI_EX_USAGE       64 /* bad command line */
#define CLI_EX_DATAERR     65 /* invalid job spec or data */
#define CLI_EX_NOINPUT     66 /* input file missing or unreadable */
#define CLI_EX_SOFTWARE    70 /* internal error */
#define CLI_EX_OSERR       71 /* out of memory and other system errors */
#define CLI_EX_CANTCREAT   73 /* output file cannot be written */
#define CLI_EX_UNAVAILABLE 69 /* a required device or service is unavailable */
#define CLI_EX_NOPERM      77 /* the coordinator refused the API token (HTTP 401/403) */

/* The exit code for a failure status: 66 unreadable input, 65 invalid spec or data, 69 a
 * device or peer unavailable, 71 out of memory, 70 anything else. */
int cli_exit_code(pf_status st);

int cli_train(int argc, char **argv);
int cli_coordinator(int argc, char **argv);
int cli_up(int argc, char **argv);
int cli_ps(int argc, char **argv);
int cli_worker(int argc, char **argv);
int cli_export(int argc, char **argv);
int cli_version(int argc, char **argv);

/* Clients of the coordinator's REST API (client.c). Exit codes: 0 done, 1 a 4xx answer such
 * as an unknown job (or, for submit --wait, the job failed), 64 usage, 65 spec rejected,
 * 66 unreadable file, 69 coordinator unreachable or 5xx, 77 token missing or refused. */
int cli_submit(int argc, char **argv);
int cli_list(int argc, char **argv);
int cli_get_job(int argc, char **argv);
int cli_watch(int argc, char **argv);
int cli_cancel(int argc, char **argv);
int cli_tfconfig(int argc, char **argv);
int cli_health(int argc, char **argv);

#endif
