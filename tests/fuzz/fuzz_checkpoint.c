/* fuzz_checkpoint.c - libFuzzer target for reading a ps checkpoint file: a restore under
 * another layout (pf_checkpoint_load_repartitioned), the restore of a ps's own file
 * (pf_checkpoint_load_ps) and the export merge (pf_checkpoint_merge).
 *
 * Input: the bytes of ps-0.safetensors of a one-ps checkpoint, written into a fresh step
 * folder with a manifest that lists it with its true size and CRC-32 (so the input reaches
 * the parsers, not only the checksum). The job is a small MLP with Adam, its variables in
 * two parts, as a 2-ps job would restore them.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "psflow/checkpoint.h"
#include "psflow/optim.h"
#include "psflow/placement.h"
#include "psflow/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char step_dir[128];
static pf_job_spec spec;
static pf_placement placement;

static void init_once(void) {
    static int done;
    if (done)
        return;
    done = 1;
    char root[] = "/tmp/psflow-fuzz-ckpt.XXXXXX";
    if (!mkdtemp(root))
        abort();
    const char *json =
        "{\"name\": \"fz\", \"replicas\": {\"ps\": 2, \"worker\": 1},"
        " \"model\": {\"type\": \"mlp\", \"inputs\": 5, \"hidden\": [4], \"outputs\": 3},"
        " \"data\": {\"format\": \"csv\", \"train\": [\"train.csv\"]},"
        " \"optimizer\": {\"type\": \"adam\"},"
        " \"placement\": {\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 2}}}";
    pf_error err;
    if (pf_job_spec_parse(json, strlen(json), &spec, &err) != PF_OK ||
        pf_placement_compute(&spec, &placement) != PF_OK ||
        pf_checkpoint_step_dir(root, "fz", 1, step_dir, sizeof step_dir) != PF_OK)
        abort();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", step_dir);
    if (system(cmd) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init_once();
    char path[256];
    snprintf(path, sizeof path, "%s/ps-0.safetensors", step_dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    pf_error err;
    if (pf_checkpoint_write_manifest(step_dir, "fz", 1, 1, NULL, &err) != PF_OK)
        abort();
    const pf_optim_slots *optim = pf_optim_slots_of(&spec.optimizer);
    for (int ps = 0; ps < placement.n_ps; ps++) {
        int idx[16];
        int n = pf_placement_shards_of(&placement, ps, idx, 16);
        pf_shard_info info[16];
        for (int i = 0; i < n; i++)
            info[i] = placement.shards[idx[i]];
        pf_checkpoint_ps *c = NULL;
        if (pf_checkpoint_load_repartitioned(step_dir, &spec, info, n, optim, &c, &err) == PF_OK)
            pf_checkpoint_ps_destroy(c);
        if (pf_checkpoint_load_ps(step_dir, 0, info, n, optim, &c, &err) == PF_OK)
            pf_checkpoint_ps_destroy(c);
    }
    pf_checkpoint_model *m = NULL;
    if (pf_checkpoint_merge(step_dir, &m, &err) == PF_OK)
        pf_checkpoint_model_destroy(m);
    return 0;
}
