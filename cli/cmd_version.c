/* cmd_version.c - `psflow version`. */
#include <stdio.h>

#include "cli/cli.h"
#include "psflow/version.h"

int cli_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("psflow %s (%s)\n", PSFLOW_VERSION, PSFLOW_GIT);
    return 0;
}
