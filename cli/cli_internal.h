/* cli.h - the subcommands of the psflow executable (exit codes: psflow/exit_code.h). */
#ifndef PSFLOW_CLI_H
#define PSFLOW_CLI_H

#include "psflow/exit_code.h"

int cli_train(int argc, char **argv);
int cli_coordinator(int argc, char **argv);
int cli_up(int argc, char **argv);
int cli_ps(int argc, char **argv);
int cli_worker(int argc, char **argv);
int cli_evaluator(int argc, char **argv);
int cli_export(int argc, char **argv);
int cli_version(int argc, char **argv);

/* Clients of the coordinator's REST API (cmd_*.c over api.h). Exit codes: 0 done, 1 a 4xx answer
 * such as an unknown job (or, for submit --wait, the job failed), 64 usage, 65 spec rejected, 66
 * unreadable file, 69 coordinator unreachable or 5xx, 77 token missing or refused. */
int cli_submit(int argc, char **argv);
int cli_list(int argc, char **argv);
int cli_get_job(int argc, char **argv);
int cli_watch(int argc, char **argv);
int cli_cancel(int argc, char **argv);
int cli_tfconfig(int argc, char **argv);
int cli_health(int argc, char **argv);

#endif
