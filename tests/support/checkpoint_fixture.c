/* checkpoint_fixture.c - what the checkpoint tests share (see checkpoint_fixture.h). */
#include "tests/support/checkpoint_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "psflow/checkpoint.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/optim.h"
#include "psflow/placement.h"
#include "psflow/safetensors.h"
#include "psflow/spec.h"
#include "tests/support/data_files.h"

char fixture_root[64];     /* temp checkpoint_dir */
char fixture_job_dir[128]; /* root/JOB */

/* --- fixture ------------------------------------------------------------------------------- */

int fixture_setup(void **state) {
    (void)state;
    snprintf(fixture_root, sizeof fixture_root, "/tmp/psflow-ckpt-XXXXXX");
    if (!mkdtemp(fixture_root))
        return -1;
    snprintf(fixture_job_dir, sizeof fixture_job_dir, "%s/%s", fixture_root, JOB);
    return 0;
}

int fixture_teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fixture_root);
    return system(cmd);
}

/* A 5-4-3 MLP, every variable split in 2 (fixed_shards), placed on 2 ps tasks. */
void make_spec(const char *optimizer, pf_job_spec *spec, pf_placement *pl) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"name\": \"%s\", \"replicas\": {\"ps\": 2, \"worker\": 2},"
             " \"model\": {\"type\": \"mlp\", \"inputs\": 5, \"hidden\": [4], \"outputs\": 3},"
             " \"data\": {\"format\": \"csv\", \"train\": [\"train.csv\"]},"
             " \"optimizer\": {\"type\": \"%s\"},"
             " \"placement\": {\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 2}}}",
             JOB, optimizer);
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), spec, &err), PF_OK);
    assert_int_equal(pf_placement_compute(spec, pl), PF_OK);
    assert_int_equal(pl->n_ps, 2);
    assert_int_equal(pl->n_shards, 8); /* 4 variables x 2 parts */
}

void make_state(const pf_job_spec *spec, int64_t step, state_vectors *s) {
    s->n = pf_model_num_params(&spec->model);
    s->params = malloc(s->n * sizeof(float));
    assert_non_null(s->params);
    for (size_t j = 0; j < s->n; j++)
        s->params[j] = (float)step * 1000.0f + (float)j * 0.5f + 0.125f;
    for (int k = 0; k < PF_OPTIM_MAX_SLOTS; k++) {
        s->slots[k] = malloc(s->n * sizeof(float));
        assert_non_null(s->slots[k]);
        for (size_t j = 0; j < s->n; j++)
            s->slots[k][j] = -(float)step - (float)j * 0.25f - (float)k * 0.0625f;
    }
}

void free_state(state_vectors *s) {
    free(s->params);
    for (int k = 0; k < PF_OPTIM_MAX_SLOTS; k++)
        free(s->slots[k]);
}

/* Local shards of ps task `ps`, in local order, with pointers into the state vectors. */

void local_of(const pf_placement *pl, int ps, const state_vectors *s, local_shards *l) {
    int idx[8];
    l->n = pf_placement_shards_of(pl, ps, idx, 8);
    for (int i = 0; i < l->n; i++) {
        l->info[i] = pl->shards[idx[i]];
        l->values[i] = s->params + l->info[i].offset;
        for (int k = 0; k < PF_OPTIM_MAX_SLOTS; k++)
            l->slot_rows[i][k] = s->slots[k] + l->info[i].offset;
        l->slots[i] = l->slot_rows[i];
    }
}

void step_dir_of(int64_t step, char *dir, size_t len) {
    assert_int_equal(pf_checkpoint_step_dir(fixture_root, JOB, step, dir, len), PF_OK);
}

/* Every ps writes its file for `step`; with `manifest` the chief then commits it. */
void write_checkpoint(const pf_job_spec *spec, const pf_placement *pl, int64_t step,
                      bool manifest) {
    state_vectors s;
    make_state(spec, step, &s);
    char dir[PF_CKPT_PATH_MAX];
    step_dir_of(step, dir, sizeof dir);
    for (int ps = 0; ps < pl->n_ps; ps++) {
        local_shards l;
        local_of(pl, ps, &s, &l);
        pf_checkpoint_shards sh = {l.n, l.info, l.values, l.slots, NULL, 0, NULL};
        char path[PF_CKPT_PATH_MAX];
        int64_t bytes = -1;
        pf_error err;
        assert_int_equal(pf_checkpoint_write_ps(dir, ps, (uint64_t)step * 10 + (uint64_t)ps, spec,
                                                pf_optim_slots_of(&spec->optimizer), &sh, path,
                                                sizeof path, &bytes, &err),
                         PF_OK);
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal(sb.st_size, bytes);
    }
    if (manifest) {
        pf_error err;
        assert_int_equal(pf_checkpoint_write_manifest(dir, JOB, step, pl->n_ps, NULL, &err), PF_OK);
    }
    free_state(&s);
}

void file_path(int64_t step, const char *name, char *path, size_t len) {
    char dir[PF_CKPT_PATH_MAX];
    step_dir_of(step, dir, sizeof dir);
    assert_true(snprintf(path, len, "%s/%s", dir, name) < (int)len);
}

bool exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* The whole file at path, NUL-terminated (pf_free it). */
unsigned char *slurp(const char *path, size_t *len) {
    return (unsigned char *)data_read(path, 64u << 20, len);
}

void spill(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

int64_t latest(unsigned flags) {
    int64_t step = -1;
    char dir[PF_CKPT_PATH_MAX];
    pf_error err;
    pf_status st = pf_checkpoint_find_latest(fixture_job_dir, flags, &step, dir, sizeof dir, &err);
    if (st == PF_ERR_NOT_FOUND)
        return -1;
    assert_int_equal(st, PF_OK);
    char want[PF_CKPT_PATH_MAX];
    step_dir_of(step, want, sizeof want);
    assert_string_equal(dir, want);
    return step;
}
