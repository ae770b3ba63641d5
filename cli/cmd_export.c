/* cmd_export.c - `psflow export DIR --out model.safetensors`: merges a checkpoint's shards into
 * one safetensors file with the variables under their TensorFlow names (docs/design.md section
 * 6), loadable with the `safetensors` library from PyTorch or NumPy.
 *
 * DIR is a step-<N> folder (it must have a complete manifest.json) or a job's checkpoint
 * folder (<checkpoint_dir>/<job>, meaning its newest complete checkpoint). The summary goes
 * to stdout; errors are one line on stderr.
 */
#include <stdio.h>

#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/options.h"
#include "psflow/checkpoint.h"

static int exit_code_for(pf_status st) {
    switch (st) {
    case PF_ERR_IO:
    case PF_ERR_NOT_FOUND:
        return PF_EX_NOINPUT;
    case PF_ERR_FORMAT:
    case PF_ERR_UNSUPPORTED:
    case PF_ERR_RANGE:
        return PF_EX_DATAERR;
    case PF_ERR_NOMEM:
        return PF_EX_OSERR;
    default:
        return PF_EX_SOFTWARE;
    }
}

int cli_export(const cli_command *cmd, int argc, char **argv) {
    const char *out;
    cli_option opts[] = {
        CLI_TEXT("out", "FILE", "write the merged variables to FILE (safetensors); required", NULL,
                 &out),
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    if (!out || !*out)
        return cli_usage_error("export", "--out FILE is required");
    pf_error err;
    pf_error_clear(&err);
    pf_checkpoint_model *m;
    pf_status st = pf_checkpoint_merge(run.args.positional[0], &m, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow export: %s\n", err.message);
        return exit_code_for(st);
    }
    st = pf_checkpoint_model_write(m, out, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow export: cannot write: %s\n", err.message);
        pf_checkpoint_model_destroy(m);
        return st == PF_ERR_NOMEM ? PF_EX_OSERR : PF_EX_CANTCREAT;
    }
    long long params = 0;
    int n = pf_checkpoint_model_count(m);
    for (int i = 0; i < n; i++) {
        pf_tensor_view v = pf_checkpoint_model_get(m, i);
        if (v.dtype != PF_DTYPE_F32)
            continue; /* a dynamic table's ids: not parameters */
        long long c = 1;
        for (int d = 0; d < v.rank; d++)
            c *= v.shape[d];
        params += c;
    }
    printf("%s: job %s, step %lld, %d variables, %lld parameters\n", out,
           pf_checkpoint_model_job(m), (long long)pf_checkpoint_model_step(m), n, params);
    pf_checkpoint_model_destroy(m);
    return 0;
}
