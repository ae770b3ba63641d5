/* fuzz_checkpoint.c - libFuzzer target for reading a ps checkpoint file: a restore under
 * another layout (pf_checkpoint_load_repartitioned), the restore of a ps's own file
 * (pf_checkpoint_load_ps), the export merge (pf_checkpoint_merge), and a dynamic table
 * "user/embeddings" in it (dyn_checkpoint.h: restored as the only ps, as either of 2 from
 * one file and from the file twice, and exported).
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
#include "psflow/dyn_checkpoint.h"
#include "psflow/mem.h"
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

/* The dynamic table of the seeds (tests/data/checkpoint/valid/dynamic.safetensors). */
static void fuzz_dynamic(const char *path) {
    static const char *const suffix[2] = {"Adam", "Adam_1"};
    const pf_dyn_config cfg = {.dim = 4,
                               .slots = 2,
                               .max_rows = 64,
                               .min_count = 2,
                               .probability = 1,
                               .sketch_bytes = 1024,
                               .seed = 3};
    pf_safetensors *st = NULL;
    pf_error err;
    if (pf_safetensors_read_any(path, &st, &err) != PF_OK)
        return;
    const pf_safetensors *files[2] = {st, st};
    for (int n_files = 1; n_files <= 2; n_files++)
        for (int n_ps = 1; n_ps <= 2; n_ps++)
            for (int ps = 0; ps < n_ps; ps++) {
                pf_dyn_table *t = NULL;
                if (pf_dyn_create(&cfg, &t) != PF_OK)
                    abort();
                (void)pf_dyn_restore(t, files, n_files, "user/embeddings", suffix, ps, n_ps, NULL,
                                     &err);
                pf_dyn_destroy(t);
            }
    uint64_t *ids = NULL;
    float *values = NULL;
    int64_t n = 0;
    int dim = 0;
    if (pf_dyn_export_rows(files, 1, "user/embeddings", &ids, &values, &n, &dim, &err) == PF_OK) {
        pf_free(ids);
        pf_free(values);
    }
    pf_safetensors_destroy(st);
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
    fuzz_dynamic(path);
    return 0;
}
