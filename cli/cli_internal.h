/* cli_internal.h - the subcommands of the psflow executable (exit codes: psflow/exit_code.h). */
#ifndef PSFLOW_CLI_INTERNAL_H
#define PSFLOW_CLI_INTERNAL_H

#include "psflow/exit_code.h"

typedef struct cli_command cli_command; /* command.h */

/* Each runs the subcommand cmd (main.c's row) on argv[0..argc) (argv[0] its name) and
 * returns the exit code. */
int cli_train(const cli_command *cmd, int argc, char **argv);
int cli_coordinator(const cli_command *cmd, int argc, char **argv);
int cli_up(const cli_command *cmd, int argc, char **argv);
int cli_ps(const cli_command *cmd, int argc, char **argv);
int cli_worker(const cli_command *cmd, int argc, char **argv);
int cli_evaluator(const cli_command *cmd, int argc, char **argv);
int cli_key(const cli_command *cmd, int argc, char **argv);
int cli_export(const cli_command *cmd, int argc, char **argv);
int cli_serve(const cli_command *cmd, int argc, char **argv);
int cli_data(const cli_command *cmd, int argc, char **argv);
int cli_plan(const cli_command *cmd, int argc, char **argv);
int cli_version(const cli_command *cmd, int argc, char **argv);

/* Clients of the coordinator's REST API (cmd_*.c over api.h). Exit codes: 0 done, 1 a 4xx answer
 * such as an unknown job (or, for submit --wait, the job failed), 64 usage, 65 spec rejected, 66
 * unreadable file, 69 coordinator unreachable or 5xx, 77 token missing or refused. */
int cli_submit(const cli_command *cmd, int argc, char **argv);
int cli_list(const cli_command *cmd, int argc, char **argv);
int cli_get_job(const cli_command *cmd, int argc, char **argv);
int cli_watch(const cli_command *cmd, int argc, char **argv);
int cli_cancel(const cli_command *cmd, int argc, char **argv);
int cli_scale(const cli_command *cmd, int argc, char **argv);
int cli_suspend(const cli_command *cmd, int argc, char **argv);
int cli_resume(const cli_command *cmd, int argc, char **argv);
int cli_delete(const cli_command *cmd, int argc, char **argv);
int cli_tfconfig(const cli_command *cmd, int argc, char **argv);
int cli_health(const cli_command *cmd, int argc, char **argv);

#endif
