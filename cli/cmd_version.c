/* cmd_version.c - `psflow version`. */
#include <stdio.h>

#include "cli/cli_internal.h"
#include "psflow/version.h"

int cli_version(const cli_command *cmd, int argc, char **argv) {
    (void)cmd;
    (void)argc;
    (void)argv;
    printf("psflow %s (%s)\n", PSFLOW_VERSION, PSFLOW_GIT);
    return 0;
}
