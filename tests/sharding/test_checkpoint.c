/* test_checkpoint.c - checkpoints of a partitioned MLP over 2 ps tasks: writing, the
 * manifest, finding the newest complete one (incomplete, resized and corrupted ones are
 * not), restoring each ps byte for byte, pruning and exporting one merged model that
 * equals the flat parameter vector the shards were cut from. */
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
#include "tests/support/counting_alloc.h"
#include "tests/support/data_files.h"

#define JOB    "ckpt-mlp"
#define MAX_PS 2

static char root[64];     /* temp checkpoint_dir */
static char job_dir[128]; /* root/JOB */

/* --- fixture ------------------------------------------------------------------------------- */

static int setup(void **state) {
    (void)state;
    snprintf(root, sizeof root, "/tmp/psflow-ckpt-XXXXXX");
    if (!mkdtemp(root))
        return -1;
    snprintf(job_dir, sizeof job_dir, "%s/%s", root, JOB);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd);
}

/* A 5-4-3 MLP, every variable split in 2 (fixed_shards), placed on 2 ps tasks. */
static void make_spec(const char *optimizer, pf_job_spec *spec, pf_placement *pl) {
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

/* The "training state" at a step: a flat parameter vector and slot vectors that differ per
 * step, element and slot. */
typedef struct state_vectors {
    size_t n;
    float *params;
    float *slots[PF_OPTIM_MAX_SLOTS];
} state_vectors;

static void make_state(const pf_job_spec *spec, int64_t step, state_vectors *s) {
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

static void free_state(state_vectors *s) {
    free(s->params);
    for (int k = 0; k < PF_OPTIM_MAX_SLOTS; k++)
        free(s->slots[k]);
}

/* Local shards of ps task `ps`, in local order, with pointers into the state vectors. */
typedef struct local_shards {
    int n;
    pf_shard_info info[8];
    const float *values[8];
    const float *slot_rows[8][PF_OPTIM_MAX_SLOTS];
    const float *const *slots[8];
} local_shards;

static void local_of(const pf_placement *pl, int ps, const state_vectors *s, local_shards *l) {
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

static void step_dir_of(int64_t step, char *dir, size_t len) {
    assert_int_equal(pf_checkpoint_step_dir(root, JOB, step, dir, len), PF_OK);
}

/* Every ps writes its file for `step`; with `manifest` the chief then commits it. */
static void write_checkpoint(const pf_job_spec *spec, const pf_placement *pl, int64_t step,
                             bool manifest) {
    state_vectors s;
    make_state(spec, step, &s);
    char dir[PF_CKPT_PATH_MAX];
    step_dir_of(step, dir, sizeof dir);
    for (int ps = 0; ps < pl->n_ps; ps++) {
        local_shards l;
        local_of(pl, ps, &s, &l);
        pf_checkpoint_shards sh = {l.n, l.info, l.values, l.slots};
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

static void file_path(int64_t step, const char *name, char *path, size_t len) {
    char dir[PF_CKPT_PATH_MAX];
    step_dir_of(step, dir, sizeof dir);
    assert_true(snprintf(path, len, "%s/%s", dir, name) < (int)len);
}

static bool exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* The whole file at path, NUL-terminated (pf_free it). */
static unsigned char *slurp(const char *path, size_t *len) {
    return (unsigned char *)data_read(path, 64u << 20, len);
}

static void spill(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static int64_t latest(unsigned flags) {
    int64_t step = -1;
    char dir[PF_CKPT_PATH_MAX];
    pf_error err;
    pf_status st = pf_checkpoint_find_latest(job_dir, flags, &step, dir, sizeof dir, &err);
    if (st == PF_ERR_NOT_FOUND)
        return -1;
    assert_int_equal(st, PF_OK);
    char want[PF_CKPT_PATH_MAX];
    step_dir_of(step, want, sizeof want);
    assert_string_equal(dir, want);
    return step;
}

/* --- writing, the manifest, restoring ---------------------------------------------------- */

static void test_round_trip(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("adam", &spec, &pl);
    write_checkpoint(&spec, &pl, 10, true);

    /* The manifest lists both files with their sizes and zlib CRC-32s. */
    char dir[PF_CKPT_PATH_MAX], path[PF_CKPT_PATH_MAX];
    step_dir_of(10, dir, sizeof dir);
    pf_checkpoint_manifest m;
    pf_error err;
    assert_int_equal(pf_checkpoint_manifest_read(dir, &m, &err), PF_OK);
    assert_string_equal(m.job, JOB);
    assert_int_equal(m.step, 10);
    assert_int_equal(m.num_ps, 2);
    assert_int_equal(strlen(m.created), 20); /* 2024-05-01T12:00:00Z */
    assert_int_equal(m.created[10], 'T');
    assert_int_equal(m.created[19], 'Z');
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "ps-%d.safetensors", i);
        assert_string_equal(m.files[i].name, name);
        file_path(10, name, path, sizeof path);
        size_t len;
        unsigned char *bytes = slurp(path, &len);
        assert_int_equal(m.files[i].bytes, (int64_t)len);
        char crc[9];
        snprintf(crc, sizeof crc, "%08x", (unsigned)m.files[i].crc32);
        pf_free(bytes);
        /* The text on disk has the same 8 hex digits. */
        file_path(10, "manifest.json", path, sizeof path);
        unsigned char *text = slurp(path, &len);
        assert_non_null(strstr((char *)text, crc));
        pf_free(text);
    }
    assert_int_equal(pf_checkpoint_verify(dir, &m, PF_CKPT_VERIFY_CRC, &err), PF_OK);
    pf_checkpoint_manifest_deinit(&m);
    file_path(10, "manifest.json.tmp", path, sizeof path);
    assert_false(exists(path));

    assert_int_equal(latest(0), 10);
    assert_int_equal(latest(PF_CKPT_VERIFY_CRC), 10);

    /* Each ps gets back exactly what it wrote. */
    state_vectors s;
    make_state(&spec, 10, &s);
    for (int ps = 0; ps < 2; ps++) {
        local_shards l;
        local_of(&pl, ps, &s, &l);
        assert_int_equal(l.n, 4);
        pf_checkpoint_ps *c;
        assert_int_equal(pf_checkpoint_load_ps(dir, ps, l.info, l.n,
                                               pf_optim_slots_of(&spec.optimizer), &c, &err),
                         PF_OK);
        assert_int_equal(pf_checkpoint_ps_version(c), 100 + ps);
        const float *const *values = pf_checkpoint_ps_values(c);
        const float *const *const *slots = pf_checkpoint_ps_slots(c);
        for (int i = 0; i < l.n; i++) {
            size_t bytes = l.info[i].count * sizeof(float);
            assert_memory_equal(values[i], l.values[i], bytes);
            assert_memory_equal(slots[i][0], l.slot_rows[i][0], bytes);
            assert_memory_equal(slots[i][1], l.slot_rows[i][1], bytes);
        }
        pf_checkpoint_ps_destroy(c);
    }
    free_state(&s);

    /* The file is plain safetensors with TensorFlow's slot names and the documented metadata. */
    file_path(10, "ps-1.safetensors", path, sizeof path);
    pf_safetensors *st;
    assert_int_equal(pf_safetensors_read(path, &st, &err), PF_OK);
    assert_int_equal(pf_safetensors_count(st), 12); /* 4 shards x (value, m, v) */
    pf_tensor_view v;
    assert_int_equal(pf_safetensors_find(st, "dense_0/kernel/part_1", &v), 0);
    assert_int_equal(v.rank, 2);
    assert_int_equal(v.shape[0], 2); /* 5 rows split 3, 2 */
    assert_int_equal(v.shape[1], 4);
    assert_int_equal(pf_safetensors_find(st, "dense_0/kernel/part_1/Adam", &v), 0);
    assert_int_equal(pf_safetensors_find(st, "dense_0/kernel/part_1/Adam_1", &v), 0);
    assert_int_equal(pf_safetensors_find(st, "dense_1/bias/part_1", &v), 0);
    assert_int_equal(v.rank, 1);
    assert_int_equal(v.shape[0], 1); /* 3 rows split 2, 1 */
    assert_string_equal(pf_safetensors_meta(st, "psflow_job"), JOB);
    assert_string_equal(pf_safetensors_meta(st, "ps_task"), "1");
    assert_string_equal(pf_safetensors_meta(st, "version"), "101");
    assert_string_equal(pf_safetensors_meta(st, "optimizer"), "adam");
    json_t *shards = json_loads(pf_safetensors_meta(st, "psflow_shards"), 0, NULL);
    assert_true(json_is_array(shards));
    assert_int_equal(json_array_size(shards), 4);
    json_t *k = json_array_get(shards, 0);
    assert_string_equal(json_string_value(json_object_get(k, "name")), "dense_0/kernel/part_1");
    assert_string_equal(json_string_value(json_object_get(k, "variable")), "dense_0/kernel");
    assert_int_equal(json_integer_value(json_object_get(k, "shard")), 1);
    assert_int_equal(json_integer_value(json_object_get(k, "num_shards")), 2);
    assert_int_equal(json_integer_value(json_object_get(k, "row_offset")), 3);
    json_t *vs = json_object_get(k, "variable_shape");
    assert_int_equal(json_array_size(vs), 2);
    assert_int_equal(json_integer_value(json_array_get(vs, 0)), 5);
    assert_int_equal(json_integer_value(json_array_get(vs, 1)), 4);
    json_t *b = json_array_get(shards, 1); /* dense_0/bias/part_1: rank 1, one dimension */
    assert_int_equal(json_array_size(json_object_get(b, "shape")), 1);
    json_decref(shards);
    pf_safetensors_destroy(st);

    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* Each optimizer's slots get TensorFlow's slot variable names. */
static void test_slot_names(void **state) {
    (void)state;
    static const struct {
        const char *optimizer;
        int n_tensors; /* in ps-0: 4 shards x (1 + slots) */
        const char *slot0, *slot1;
    } cases[] = {
        {"sgd", 4, NULL, NULL},
        {"momentum", 8, "dense_0/kernel/part_0/Momentum", NULL},
        {"adagrad", 8, "dense_0/kernel/part_0/Adagrad", NULL},
        {"adam", 12, "dense_0/kernel/part_0/Adam", "dense_0/kernel/part_0/Adam_1"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pf_job_spec spec;
        pf_placement pl;
        make_spec(cases[c].optimizer, &spec, &pl);
        write_checkpoint(&spec, &pl, (int64_t)c, true);
        char path[PF_CKPT_PATH_MAX];
        file_path((int64_t)c, "ps-0.safetensors", path, sizeof path);
        pf_safetensors *st;
        pf_error err;
        assert_int_equal(pf_safetensors_read(path, &st, &err), PF_OK);
        assert_int_equal(pf_safetensors_count(st), cases[c].n_tensors);
        pf_tensor_view v;
        if (cases[c].slot0)
            assert_int_equal(pf_safetensors_find(st, cases[c].slot0, &v), 0);
        if (cases[c].slot1)
            assert_int_equal(pf_safetensors_find(st, cases[c].slot1, &v), 0);
        assert_string_equal(pf_safetensors_meta(st, "optimizer"), cases[c].optimizer);
        pf_safetensors_destroy(st);

        /* And a ps of that job restores from it. */
        char dir[PF_CKPT_PATH_MAX];
        step_dir_of((int64_t)c, dir, sizeof dir);
        state_vectors s;
        make_state(&spec, (int64_t)c, &s);
        local_shards l;
        local_of(&pl, 0, &s, &l);
        pf_checkpoint_ps *ck;
        assert_int_equal(pf_checkpoint_load_ps(dir, 0, l.info, l.n,
                                               pf_optim_slots_of(&spec.optimizer), &ck, &err),
                         PF_OK);
        int n_slots = pf_optim_num_slots(&spec.optimizer);
        for (int i = 0; i < l.n; i++)
            for (int k = 0; k < n_slots; k++)
                assert_memory_equal(pf_checkpoint_ps_slots(ck)[i][k], l.slot_rows[i][k],
                                    l.info[i].count * sizeof(float));
        pf_checkpoint_ps_destroy(ck);
        free_state(&s);
        pf_placement_deinit(&pl);
        pf_job_spec_deinit(&spec);
    }
}

/* An optimizer psflow does not have, with slot names of its own: the checkpoint writes its
 * slots under those names and restores them from there, so an optimizer added to optim.c's
 * table needs nothing from this module. */
static void test_fake_optimizer_round_trip(void **state) {
    (void)state;
    static const pf_optim_slots ftrl = {"ftrl", 2, {"accumulator", "linear"}, {"Ftrl", "Ftrl_1"}};
    pf_job_spec spec;
    pf_placement pl;
    make_spec("sgd", &spec, &pl); /* the job's own optimizer plays no part below */
    state_vectors s;
    make_state(&spec, 7, &s);
    char dir[PF_CKPT_PATH_MAX], path[PF_CKPT_PATH_MAX];
    step_dir_of(7, dir, sizeof dir);
    pf_error err;
    for (int ps = 0; ps < pl.n_ps; ps++) {
        local_shards l;
        local_of(&pl, ps, &s, &l);
        pf_checkpoint_shards sh = {l.n, l.info, l.values, l.slots};
        assert_int_equal(pf_checkpoint_write_ps(dir, ps, 70 + (uint64_t)ps, &spec, &ftrl, &sh, path,
                                                sizeof path, NULL, &err),
                         PF_OK);
        /* In the file: each shard's values and its two slots under the fake names. */
        pf_safetensors *st;
        assert_int_equal(pf_safetensors_read(path, &st, &err), PF_OK);
        assert_int_equal(pf_safetensors_count(st), l.n * 3);
        assert_string_equal(pf_safetensors_meta(st, "optimizer"), "ftrl");
        for (int i = 0; i < l.n; i++) {
            char name[PF_SHARD_NAME_MAX + 16];
            pf_tensor_view v;
            for (int k = 0; k < 2; k++) {
                snprintf(name, sizeof name, "%s/%s", l.info[i].name, ftrl.variable[k]);
                assert_int_equal(pf_safetensors_find(st, name, &v), 0);
                assert_memory_equal(v.data, l.slot_rows[i][k], l.info[i].count * sizeof(float));
            }
        }
        pf_safetensors_destroy(st);

        /* Restored: version, values and both slots, exactly. */
        pf_checkpoint_ps *c;
        assert_int_equal(pf_checkpoint_load_ps(dir, ps, l.info, l.n, &ftrl, &c, &err), PF_OK);
        assert_int_equal(pf_checkpoint_ps_version(c), 70 + (uint64_t)ps);
        for (int i = 0; i < l.n; i++) {
            size_t bytes = l.info[i].count * sizeof(float);
            assert_memory_equal(pf_checkpoint_ps_values(c)[i], l.values[i], bytes);
            for (int k = 0; k < 2; k++)
                assert_memory_equal(pf_checkpoint_ps_slots(c)[i][k], l.slot_rows[i][k], bytes);
        }
        pf_checkpoint_ps_destroy(c);

        /* A job with another optimizer refuses the file, naming both. */
        assert_int_equal(pf_checkpoint_load_ps(dir, ps, l.info, l.n,
                                               pf_optim_slots_of(&spec.optimizer), &c, &err),
                         PF_ERR_FORMAT);
        assert_non_null(strstr(err.message, "written with optimizer ftrl, the job uses sgd"));
    }
    /* The merged model holds the values only, whatever the slots were called. */
    assert_int_equal(pf_checkpoint_write_manifest(dir, JOB, 7, pl.n_ps, NULL, &err), PF_OK);
    pf_checkpoint_model *m;
    assert_int_equal(pf_checkpoint_merge(dir, &m, &err), PF_OK);
    assert_int_equal(pf_checkpoint_model_count(m), 4);
    pf_checkpoint_model_destroy(m);
    free_state(&s);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* A checkpoint is a restore target: a NaN or infinite value, or slot, is never written. */
static void test_nonfinite_refused(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("adam", &spec, &pl);
    state_vectors s;
    make_state(&spec, 3, &s);
    char dir[PF_CKPT_PATH_MAX], path[PF_CKPT_PATH_MAX];
    step_dir_of(3, dir, sizeof dir);
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int which = 0; which < 2 * 3; which++) {
        local_shards l;
        local_of(&pl, 1, &s, &l);
        float *target = which < 3 ? (float *)l.values[1] : (float *)l.slots[2][1];
        float saved = target[0];
        target[0] = bad[which % 3];
        pf_checkpoint_shards sh = {l.n, l.info, l.values, l.slots};
        pf_error err;
        pf_error_clear(&err);
        assert_int_equal(pf_checkpoint_write_ps(dir, 1, 30, &spec,
                                                pf_optim_slots_of(&spec.optimizer), &sh, path,
                                                sizeof path, NULL, &err),
                         PF_ERR_NONFINITE);
        assert_non_null(strstr(err.message, which < 3 ? l.info[1].name : l.info[2].name));
        assert_non_null(strstr(err.message, "version 30"));
        target[0] = saved;
        char file[PF_CKPT_PATH_MAX];
        file_path(3, "ps-1.safetensors", file, sizeof file);
        assert_false(exists(file));
    }
    free_state(&s);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

static void test_load_errors(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("adam", &spec, &pl);
    write_checkpoint(&spec, &pl, 7, true);
    char dir[PF_CKPT_PATH_MAX];
    step_dir_of(7, dir, sizeof dir);
    state_vectors s;
    make_state(&spec, 7, &s);
    local_shards l;
    local_of(&pl, 0, &s, &l);
    pf_checkpoint_ps *c = NULL;
    pf_error err;

    /* A shard the file does not hold is named. */
    local_shards bad = l;
    snprintf(bad.info[2].name, sizeof bad.info[2].name, "dense_9/kernel");
    assert_int_equal(pf_checkpoint_load_ps(dir, 0, bad.info, bad.n,
                                           pf_optim_slots_of(&spec.optimizer), &c, &err),
                     PF_ERR_FORMAT);
    assert_null(c);
    assert_non_null(strstr(err.message, "'dense_9/kernel' missing"));

    /* A shard of another size. */
    bad = l;
    bad.info[1].count += 1;
    assert_int_equal(pf_checkpoint_load_ps(dir, 0, bad.info, bad.n,
                                           pf_optim_slots_of(&spec.optimizer), &c, &err),
                     PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, bad.info[1].name));

    /* Another optimizer: adam's slots are not momentum's. */
    pf_optimizer_spec mom = spec.optimizer;
    mom.type = PF_OPT_MOMENTUM;
    assert_int_equal(pf_checkpoint_load_ps(dir, 0, l.info, l.n, pf_optim_slots_of(&mom), &c, &err),
                     PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "optimizer"));

    /* ps-1's file copied over as ps-0's is refused. */
    char p0[PF_CKPT_PATH_MAX], p1[PF_CKPT_PATH_MAX];
    file_path(7, "ps-0.safetensors", p0, sizeof p0);
    file_path(7, "ps-1.safetensors", p1, sizeof p1);
    size_t len;
    unsigned char *bytes = slurp(p1, &len);
    spill(p0, bytes, len);
    pf_free(bytes);
    assert_int_equal(
        pf_checkpoint_load_ps(dir, 0, l.info, l.n, pf_optim_slots_of(&spec.optimizer), &c, &err),
        PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "ps task 1"));

    /* No file. */
    unlink(p0);
    assert_int_equal(
        pf_checkpoint_load_ps(dir, 0, l.info, l.n, pf_optim_slots_of(&spec.optimizer), &c, &err),
        PF_ERR_NOT_FOUND);
    assert_null(c);

    free_state(&s);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* The chief cannot commit a checkpoint a ps has not written, and leaves nothing behind. */
static void test_manifest_needs_every_file(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("sgd", &spec, &pl);
    write_checkpoint(&spec, &pl, 3, false);
    char dir[PF_CKPT_PATH_MAX], path[PF_CKPT_PATH_MAX];
    step_dir_of(3, dir, sizeof dir);
    file_path(3, "ps-1.safetensors", path, sizeof path);
    assert_int_equal(unlink(path), 0);
    pf_error err;
    assert_int_equal(pf_checkpoint_write_manifest(dir, JOB, 3, 2, NULL, &err), PF_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "ps-1.safetensors"));
    assert_non_null(strstr(err.message, "ps task 1"));
    file_path(3, "manifest.json", path, sizeof path);
    assert_false(exists(path));
    file_path(3, "manifest.json.tmp", path, sizeof path);
    assert_false(exists(path));
    assert_int_equal(latest(0), -1);
    pf_checkpoint_manifest m;
    assert_int_equal(pf_checkpoint_manifest_read(dir, &m, &err), PF_ERR_NOT_FOUND);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* --- what counts as complete ---------------------------------------------------------------- */

static void test_incomplete_and_junk_ignored(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("momentum", &spec, &pl);
    assert_int_equal(latest(0), -1); /* no job folder yet */
    write_checkpoint(&spec, &pl, 10, true);
    write_checkpoint(&spec, &pl, 20, false); /* every ps wrote, the chief did not commit */
    assert_int_equal(latest(0), 10);

    /* Names that are not step-<N>, and step-<N> that is not a folder. */
    const char *junk_dirs[] = {"step-abc", "step-007", "step-", "step--5", "step-+9", "tmp"};
    char path[PF_CKPT_PATH_MAX];
    for (size_t i = 0; i < sizeof junk_dirs / sizeof junk_dirs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", job_dir, junk_dirs[i]);
        assert_int_equal(mkdir(path, 0755), 0);
    }
    snprintf(path, sizeof path, "%s/step-99", job_dir);
    spill(path, "x", 1);
    /* A manifest that names another step does not make step-30 complete. */
    snprintf(path, sizeof path, "%s/step-30", job_dir);
    assert_int_equal(mkdir(path, 0755), 0);
    char from[PF_CKPT_PATH_MAX], to[PF_CKPT_PATH_MAX];
    const char *names[] = {"ps-0.safetensors", "ps-1.safetensors", "manifest.json"};
    for (int i = 0; i < 3; i++) {
        size_t len;
        file_path(10, names[i], from, sizeof from);
        file_path(30, names[i], to, sizeof to);
        unsigned char *bytes = slurp(from, &len);
        spill(to, bytes, len);
        pf_free(bytes);
    }
    /* A manifest that is not JSON. */
    file_path(20, "manifest.json", path, sizeof path);
    spill(path, "{\"job\": ", 8);
    assert_int_equal(latest(0), 10);

    int64_t *steps;
    int n;
    pf_error err;
    assert_int_equal(pf_checkpoint_list(job_dir, 0, &steps, &n, &err), PF_OK);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 10);
    pf_free(steps);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

static void test_wrong_size_is_incomplete(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("adagrad", &spec, &pl);
    write_checkpoint(&spec, &pl, 10, true);
    write_checkpoint(&spec, &pl, 20, true);
    assert_int_equal(latest(0), 20);

    /* The manifest says one byte more than ps-1 holds. */
    char path[PF_CKPT_PATH_MAX], dir[PF_CKPT_PATH_MAX];
    step_dir_of(20, dir, sizeof dir);
    pf_checkpoint_manifest m;
    pf_error err;
    assert_int_equal(pf_checkpoint_manifest_read(dir, &m, &err), PF_OK);
    file_path(20, "manifest.json", path, sizeof path);
    json_t *doc = json_load_file(path, 0, NULL);
    assert_non_null(doc);
    json_t *f1 = json_array_get(json_object_get(doc, "files"), 1);
    json_object_set_new(f1, "bytes", json_integer(m.files[1].bytes + 1));
    assert_int_equal(json_dump_file(doc, path, JSON_PRESERVE_ORDER), 0);
    json_decref(doc);
    assert_int_equal(latest(0), 10);
    pf_checkpoint_manifest m2;
    assert_int_equal(pf_checkpoint_manifest_read(dir, &m2, &err), PF_OK);
    assert_int_equal(pf_checkpoint_verify(dir, &m2, 0, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "ps-1.safetensors"));
    pf_checkpoint_manifest_deinit(&m2);

    /* Restoring the manifest but growing the file is just as incomplete. */
    assert_int_equal(pf_checkpoint_write_manifest(dir, JOB, 20, 2, NULL, &err), PF_OK);
    assert_int_equal(latest(0), 20);
    file_path(20, "ps-0.safetensors", path, sizeof path);
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    fputc(' ', f);
    fclose(f);
    assert_int_equal(latest(0), 10);
    /* A file listed but gone. */
    unlink(path);
    assert_int_equal(latest(0), 10);
    assert_int_equal(pf_checkpoint_verify(dir, &m, 0, &err), PF_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "missing"));
    pf_checkpoint_manifest_deinit(&m);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

static void test_corrupt_crc_detected(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("adam", &spec, &pl);
    write_checkpoint(&spec, &pl, 10, true);
    write_checkpoint(&spec, &pl, 20, true);
    /* Flip one bit of the last float of ps-1: same size, other checksum. */
    char path[PF_CKPT_PATH_MAX], dir[PF_CKPT_PATH_MAX];
    file_path(20, "ps-1.safetensors", path, sizeof path);
    size_t len;
    unsigned char *bytes = slurp(path, &len);
    bytes[len - 1] ^= 0x01;
    spill(path, bytes, len);
    pf_free(bytes);
    assert_int_equal(latest(0), 20); /* sizes only: looks complete */
    assert_int_equal(latest(PF_CKPT_VERIFY_CRC), 10);
    step_dir_of(20, dir, sizeof dir);
    pf_checkpoint_manifest m;
    pf_error err;
    assert_int_equal(pf_checkpoint_manifest_read(dir, &m, &err), PF_OK);
    assert_int_equal(pf_checkpoint_verify(dir, &m, PF_CKPT_VERIFY_CRC, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "crc32"));
    assert_non_null(strstr(err.message, "ps-1.safetensors"));
    pf_checkpoint_manifest_deinit(&m);

    int64_t *steps;
    int n;
    assert_int_equal(pf_checkpoint_list(job_dir, PF_CKPT_VERIFY_CRC, &steps, &n, &err), PF_OK);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 10);
    pf_free(steps);
    assert_int_equal(pf_checkpoint_list(job_dir, 0, &steps, &n, &err), PF_OK);
    assert_int_equal(n, 2);
    assert_int_equal(steps[0], 10);
    assert_int_equal(steps[1], 20);
    pf_free(steps);

    /* Export verifies checksums and refuses the step. */
    char out[PF_CKPT_PATH_MAX];
    snprintf(out, sizeof out, "%s/model.safetensors", root);
    assert_int_equal(pf_checkpoint_export(dir, out, NULL, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "not a complete checkpoint"));
    assert_false(exists(out));

    /* Set aside: renamed step-20.corrupt-<time> with its files, then invisible to finding,
     * listing and pruning; a second attempt finds it gone. */
    char aside[PF_CKPT_PATH_MAX + 64];
    assert_int_equal(pf_checkpoint_set_aside(dir, aside, sizeof aside, &err), PF_OK);
    assert_non_null(strstr(aside, "/step-20.corrupt-"));
    assert_false(exists(dir));
    char moved[PF_CKPT_PATH_MAX + 128];
    snprintf(moved, sizeof moved, "%s/ps-1.safetensors", aside);
    assert_true(exists(moved));
    assert_int_equal(latest(0), 10);
    assert_int_equal(pf_checkpoint_prune(job_dir, 1, NULL, &err), PF_OK);
    assert_true(exists(moved));
    assert_int_equal(pf_checkpoint_set_aside(dir, NULL, 0, &err), PF_ERR_NOT_FOUND);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* A manifest whose file entries are not exactly ps-<i>.safetensors is malformed (a listed
 * name is never used as a path without this check). */
static void test_manifest_validation(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("sgd", &spec, &pl);
    write_checkpoint(&spec, &pl, 4, true);
    char path[PF_CKPT_PATH_MAX], dir[PF_CKPT_PATH_MAX];
    step_dir_of(4, dir, sizeof dir);
    file_path(4, "manifest.json", path, sizeof path);
    size_t len;
    char *good = (char *)slurp(path, &len);
    static const char *const bad[] = {
        "[]",
        "{\"job\": \"ckpt-mlp\", \"step\": 4, \"created\": \"x\", \"num_ps\": 1, \"files\": "
        "[{\"name\": \"../../x\", \"bytes\": 1, \"crc32\": \"00000000\"}]}",
        "{\"job\": \"ckpt-mlp\", \"step\": 4, \"created\": \"x\", \"num_ps\": 1, \"files\": "
        "[{\"name\": \"ps-0.safetensors\", \"bytes\": 1, \"crc32\": \"0000000g\"}]}",
        "{\"job\": \"ckpt-mlp\", \"step\": 4, \"created\": \"x\", \"num_ps\": 2, \"files\": "
        "[{\"name\": \"ps-0.safetensors\", \"bytes\": 1, \"crc32\": \"00000000\"}]}",
        "{\"job\": \"ckpt-mlp\", \"step\": -4, \"created\": \"x\", \"num_ps\": 1, \"files\": "
        "[{\"name\": \"ps-0.safetensors\", \"bytes\": 1, \"crc32\": \"00000000\"}]}",
        "{\"job\": \"ckpt-mlp\", \"step\": 4, \"created\": \"x\", \"num_ps\": 0, \"files\": []}",
    };
    pf_error err;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spill(path, bad[i], strlen(bad[i]));
        pf_checkpoint_manifest m;
        assert_int_equal(pf_checkpoint_manifest_read(dir, &m, &err), PF_ERR_FORMAT);
        assert_null(m.files);
        assert_int_equal(latest(0), -1);
    }
    spill(path, good, len);
    assert_int_equal(latest(PF_CKPT_VERIFY_CRC), 4);
    pf_free(good);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* --- pruning ------------------------------------------------------------------------------- */

static void test_prune(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("adam", &spec, &pl);
    write_checkpoint(&spec, &pl, 5, false); /* an old attempt that never completed */
    for (int64_t step = 10; step <= 50; step += 10)
        write_checkpoint(&spec, &pl, step, true);
    write_checkpoint(&spec, &pl, 60, false); /* being written right now */
    char path[PF_CKPT_PATH_MAX];
    file_path(10, "ps-0.safetensors.tmp", path, sizeof path); /* a crashed write's leftover */
    spill(path, "x", 1);

    int removed = -1;
    pf_error err;
    assert_int_equal(pf_checkpoint_prune(job_dir, 0, &removed, &err), PF_ERR_INVALID);
    assert_int_equal(pf_checkpoint_prune(job_dir, 3, &removed, &err), PF_OK);
    assert_int_equal(removed, 3); /* step-5, step-10, step-20 */
    int64_t *steps;
    int n;
    assert_int_equal(pf_checkpoint_list(job_dir, 0, &steps, &n, &err), PF_OK);
    assert_int_equal(n, 3);
    assert_int_equal(steps[0], 30);
    assert_int_equal(steps[1], 40);
    assert_int_equal(steps[2], 50);
    pf_free(steps);
    const int64_t gone[] = {5, 10, 20}, kept[] = {30, 40, 50, 60};
    for (int i = 0; i < 3; i++) {
        step_dir_of(gone[i], path, sizeof path);
        assert_false(exists(path));
    }
    for (int i = 0; i < 4; i++) {
        step_dir_of(kept[i], path, sizeof path);
        assert_true(exists(path));
    }
    /* Again: nothing more to do. */
    assert_int_equal(pf_checkpoint_prune(job_dir, 3, &removed, &err), PF_OK);
    assert_int_equal(removed, 0);
    assert_int_equal(pf_checkpoint_prune(job_dir, 10, &removed, &err), PF_OK);
    assert_int_equal(removed, 0);

    /* A file psflow did not write keeps its folder, which is reported; the checkpoint in it
     * is gone all the same (its manifest was removed first). */
    file_path(30, "notes.txt", path, sizeof path);
    spill(path, "mine", 4);
    assert_int_equal(pf_checkpoint_prune(job_dir, 1, &removed, &err), PF_ERR_IO);
    assert_int_equal(removed, 1); /* step-40 */
    assert_non_null(strstr(err.message, "step-30"));
    assert_non_null(strstr(err.message, "left in place"));
    assert_true(exists(path));
    file_path(30, "ps-0.safetensors", path, sizeof path);
    assert_false(exists(path));
    assert_int_equal(pf_checkpoint_list(job_dir, 0, &steps, &n, &err), PF_OK);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 50);
    pf_free(steps);
    step_dir_of(60, path, sizeof path);
    assert_true(exists(path));
    assert_int_equal(latest(PF_CKPT_VERIFY_CRC), 50);

    assert_int_equal(pf_checkpoint_prune("/nonexistent/psflow", 1, &removed, &err),
                     PF_ERR_NOT_FOUND);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* --- export -------------------------------------------------------------------------------- */

/* The exported file holds every variable whole, under its TensorFlow name, sorted, with
 * exactly the values of the flat vector at `step`. */
static void check_export(const pf_job_spec *spec, const char *path, int64_t step) {
    pf_safetensors *st;
    pf_error err;
    assert_int_equal(pf_safetensors_read(path, &st, &err), PF_OK);
    pf_var_info vars[PF_MAX_VARS];
    int nv = pf_model_layout(&spec->model, vars);
    assert_int_equal(pf_safetensors_count(st), nv);
    state_vectors s;
    make_state(spec, step, &s);
    const char *sorted[] = {"dense_0/bias", "dense_0/kernel", "dense_1/bias", "dense_1/kernel"};
    for (int i = 0; i < nv; i++) {
        pf_tensor_view t = pf_safetensors_get(st, i);
        assert_string_equal(t.name, sorted[i]);
        pf_tensor_view v;
        assert_int_equal(pf_safetensors_find(st, vars[i].name, &v), 0);
        assert_int_equal(v.rank, vars[i].rank);
        assert_int_equal(v.shape[0], vars[i].shape[0]);
        if (v.rank == 2)
            assert_int_equal(v.shape[1], vars[i].shape[1]);
        assert_memory_equal(v.data, s.params + vars[i].offset, vars[i].count * sizeof(float));
    }
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)step);
    assert_string_equal(pf_safetensors_meta(st, "global_step"), text);
    assert_string_equal(pf_safetensors_meta(st, "psflow_job"), JOB);
    free_state(&s);
    pf_safetensors_destroy(st);
}

static void test_export(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("adam", &spec, &pl);
    write_checkpoint(&spec, &pl, 10, true);
    write_checkpoint(&spec, &pl, 20, true);
    write_checkpoint(&spec, &pl, 30, false);
    char out[PF_CKPT_PATH_MAX], dir[PF_CKPT_PATH_MAX], slash[PF_CKPT_PATH_MAX];
    snprintf(out, sizeof out, "%s/model.safetensors", root);
    pf_error err;

    /* A job folder means its newest complete checkpoint. */
    int64_t step = -1;
    assert_int_equal(pf_checkpoint_export(job_dir, out, &step, &err), PF_OK);
    assert_int_equal(step, 20);
    check_export(&spec, out, 20);

    /* A step folder means that one, also with a trailing slash. */
    step_dir_of(10, dir, sizeof dir);
    assert_true(snprintf(slash, sizeof slash, "%s/", dir) < (int)sizeof slash);
    assert_int_equal(pf_checkpoint_export(slash, out, &step, &err), PF_OK);
    assert_int_equal(step, 10);
    check_export(&spec, out, 10);

    /* The merged model is also available in memory. */
    pf_checkpoint_model *m;
    assert_int_equal(pf_checkpoint_merge(dir, &m, &err), PF_OK);
    assert_string_equal(pf_checkpoint_model_job(m), JOB);
    assert_int_equal(pf_checkpoint_model_step(m), 10);
    assert_int_equal(pf_checkpoint_model_count(m), 4);
    pf_tensor_view v = pf_checkpoint_model_get(m, 1);
    assert_string_equal(v.name, "dense_0/kernel");
    assert_int_equal(v.shape[0], 5);
    assert_int_equal(v.shape[1], 4);
    pf_checkpoint_model_destroy(m);

    /* Without a complete manifest there is nothing to export, and the message says so. */
    step_dir_of(30, dir, sizeof dir);
    assert_int_equal(pf_checkpoint_export(dir, out, NULL, &err), PF_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "no complete checkpoint"));
    assert_non_null(strstr(err.message, "manifest.json"));
    char empty[PF_CKPT_PATH_MAX];
    snprintf(empty, sizeof empty, "%s/empty-job", root);
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(pf_checkpoint_export(empty, out, NULL, &err), PF_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "no complete checkpoint"));
    snprintf(empty, sizeof empty, "%s/no-such-dir", root);
    assert_int_equal(pf_checkpoint_export(empty, out, NULL, &err), PF_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "no-such-dir"));
    /* A step folder whose manifest lists a file of another size. */
    file_path(20, "ps-1.safetensors", dir, sizeof dir);
    FILE *f = fopen(dir, "ab");
    assert_non_null(f);
    fputc(0, f);
    fclose(f);
    step_dir_of(20, dir, sizeof dir);
    assert_int_equal(pf_checkpoint_export(dir, out, NULL, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "not a complete checkpoint"));
    /* The job folder falls back to step 10. */
    assert_int_equal(pf_checkpoint_export(job_dir, out, &step, &err), PF_OK);
    assert_int_equal(step, 10);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* Hand-made one-ps checkpoints whose shard metadata does not tile the variable. */
static pf_status export_handmade(const char *shards_meta, int n_tensors, pf_error *err) {
    char dir[PF_CKPT_PATH_MAX], path[PF_CKPT_PATH_MAX], out[PF_CKPT_PATH_MAX];
    step_dir_of(1, dir, sizeof dir);
    char cmd[PF_CKPT_PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(system(cmd), 0);
    assert_true(snprintf(path, sizeof path, "%s/ps-0.safetensors", dir) < (int)sizeof path);
    float data[4] = {1, 2, 3, 4};
    pf_tensor_view t[] = {{"v/part_0", 1, {2}, data}, {"v/part_1", 1, {2}, data + 2}};
    const char *keys[] = {"psflow_job", "psflow_shards"};
    const char *values[] = {JOB, shards_meta};
    assert_int_equal(pf_safetensors_write(path, t, n_tensors, keys, values, 2, err), PF_OK);
    assert_int_equal(pf_checkpoint_write_manifest(dir, JOB, 1, 1, NULL, err), PF_OK);
    snprintf(out, sizeof out, "%s/model.safetensors", root);
    return pf_checkpoint_export(dir, out, NULL, err);
}

static void test_export_tiling(void **state) {
    (void)state;
    pf_error err;
#define SHARD(name, s, n, off, rows, vrows)                                                        \
    "{\"name\": \"" name "\", \"variable\": \"v\", \"shard\": " #s ", \"num_shards\": " #n         \
    ", \"row_offset\": " #off ", \"shape\": [" #rows "], \"variable_shape\": [" #vrows "]}"
    /* Good: [4] from two [2] parts. */
    assert_int_equal(export_handmade("[" SHARD("v/part_0", 0, 2, 0, 2,
                                               4) ", " SHARD("v/part_1", 1, 2, 2, 2, 4) "]",
                                     2, &err),
                     PF_OK);
    /* Overlap: part_1 starts at row 1. */
    assert_int_equal(export_handmade("[" SHARD("v/part_0", 0, 2, 0, 2,
                                               3) ", " SHARD("v/part_1", 1, 2, 1, 2, 3) "]",
                                     2, &err),
                     PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "overlap"));
    /* Gap: part_1 starts at row 3 of 5. */
    assert_int_equal(export_handmade("[" SHARD("v/part_0", 0, 2, 0, 2,
                                               5) ", " SHARD("v/part_1", 1, 2, 3, 2, 5) "]",
                                     2, &err),
                     PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "gap"));
    /* Short: the parts cover 4 of 6 rows. */
    assert_int_equal(export_handmade("[" SHARD("v/part_0", 0, 2, 0, 2,
                                               6) ", " SHARD("v/part_1", 1, 2, 2, 2, 6) "]",
                                     2, &err),
                     PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "4 of its 6 rows"));
    /* A shard missing: num_shards says 3. */
    assert_int_equal(export_handmade("[" SHARD("v/part_0", 0, 3, 0, 2,
                                               4) ", " SHARD("v/part_1", 1, 3, 2, 2, 4) "]",
                                     2, &err),
                     PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "'v'"));
    /* Metadata naming a tensor the file does not hold. */
    assert_int_equal(export_handmade("[" SHARD("v/part_0", 0, 2, 0, 2,
                                               4) ", " SHARD("v/part_1", 1, 2, 2, 2, 4) "]",
                                     1, &err),
                     PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "'v/part_1' missing"));
    /* A shape that disagrees with the tensor. */
    assert_int_equal(export_handmade("[" SHARD("v/part_0", 0, 2, 0, 3,
                                               4) ", " SHARD("v/part_1", 1, 2, 3, 1, 4) "]",
                                     2, &err),
                     PF_ERR_FORMAT);
    /* Not JSON at all. */
    assert_int_equal(export_handmade("[{", 2, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "psflow_shards"));
#undef SHARD
}

/* A spec of the same model and optimizer under another layout: `ps` ps tasks and
 * `partitioner` (a "placement" object's text). */
static void make_spec_as(const char *optimizer, int ps, const char *partitioner, pf_job_spec *spec,
                         pf_placement *pl) {
    char json[640];
    snprintf(json, sizeof json,
             "{\"name\": \"%s\", \"replicas\": {\"ps\": %d, \"worker\": 2},"
             " \"model\": {\"type\": \"mlp\", \"inputs\": 5, \"hidden\": [4], \"outputs\": 3},"
             " \"data\": {\"format\": \"csv\", \"train\": [\"train.csv\"]},"
             " \"optimizer\": {\"type\": \"%s\"}, \"placement\": %s}",
             JOB, ps, optimizer, partitioner);
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), spec, &err), PF_OK);
    assert_int_equal(pf_placement_compute(spec, pl), PF_OK);
}

/* A checkpoint of 2 ps tasks (every variable in 2 parts) restores into 1 and 3 ps tasks
 * and under other partitionings: every shard gets exactly the rows, values and slots it
 * covers; rows held twice or missing are refused. */
static void test_repartitioned_restore(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("adam", &spec, &pl);
    write_checkpoint(&spec, &pl, 20, true);
    char dir[PF_CKPT_PATH_MAX];
    step_dir_of(20, dir, sizeof dir);
    state_vectors s;
    make_state(&spec, 20, &s);
    static const struct {
        int ps;
        const char *placement;
    } layouts[] = {
        {1, "{\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 1}}"},
        {3, "{\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 3}}"},
        {3, "{\"strategy\": \"greedy\"}"},
        {2, "{\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 3}}"},
        {2, "{\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 2}}"},
    };
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        pf_job_spec to;
        pf_placement tp;
        make_spec_as("adam", layouts[k].ps, layouts[k].placement, &to, &tp);
        const pf_optim_slots *optim = pf_optim_slots_of(&to.optimizer);
        size_t covered = 0;
        for (int ps = 0; ps < tp.n_ps; ps++) {
            int idx[16];
            int n = pf_placement_shards_of(&tp, ps, idx, 16);
            pf_shard_info info[16];
            for (int i = 0; i < n; i++)
                info[i] = tp.shards[idx[i]];
            pf_checkpoint_ps *c = NULL;
            pf_error err;
            pf_status st = pf_checkpoint_load_repartitioned(dir, &to, info, n, optim, &c, &err);
            if (st != PF_OK)
                fail_msg("layout %zu ps %d: %s", k, ps, err.message);
            assert_int_equal(pf_checkpoint_ps_version(c), 200); /* the lowest: ps 0's */
            for (int i = 0; i < n; i++) {
                assert_memory_equal(pf_checkpoint_ps_values(c)[i], s.params + info[i].offset,
                                    info[i].count * sizeof(float));
                for (int q = 0; q < optim->n; q++)
                    assert_memory_equal(pf_checkpoint_ps_slots(c)[i][q],
                                        s.slots[q] + info[i].offset, info[i].count * sizeof(float));
                covered += info[i].count;
            }
            pf_checkpoint_ps_destroy(c);
        }
        assert_int_equal(covered, s.n);
        pf_placement_deinit(&tp);
        pf_job_spec_deinit(&to);
    }

    /* Rows missing: a shard beyond what the checkpoint holds, as a model of another shape
     * would ask for; and another optimizer's slots. */
    pf_job_spec other;
    pf_placement op;
    make_spec_as("momentum", 1, "{}", &other, &op);
    int idx[16];
    int n = pf_placement_shards_of(&op, 0, idx, 16);
    pf_shard_info info[16];
    for (int i = 0; i < n; i++)
        info[i] = op.shards[idx[i]];
    pf_checkpoint_ps *c = NULL;
    pf_error err;
    assert_int_equal(pf_checkpoint_load_repartitioned(
                         dir, &other, info, n, pf_optim_slots_of(&other.optimizer), &c, &err),
                     PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "optimizer"));
    assert_null(c);
    pf_placement_deinit(&op);
    pf_job_spec_deinit(&other);

    /* Rows held twice: ps 1's file copied over ps 0's (the manifest rewritten to match)
     * holds the second halves twice and the first halves never. */
    char from[PF_CKPT_PATH_MAX], to_path[PF_CKPT_PATH_MAX];
    file_path(20, "ps-1.safetensors", from, sizeof from);
    file_path(20, "ps-0.safetensors", to_path, sizeof to_path);
    size_t len;
    unsigned char *bytes = slurp(from, &len);
    spill(to_path, bytes, len);
    pf_free(bytes);
    assert_int_equal(pf_checkpoint_write_manifest(dir, JOB, 20, 2, NULL, &err), PF_OK);
    pf_job_spec one;
    pf_placement onep;
    make_spec_as("adam", 1, "{}", &one, &onep);
    n = pf_placement_shards_of(&onep, 0, idx, 16);
    for (int i = 0; i < n; i++)
        info[i] = onep.shards[idx[i]];
    assert_int_equal(pf_checkpoint_load_repartitioned(dir, &one, info, n,
                                                      pf_optim_slots_of(&one.optimizer), &c, &err),
                     PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "exactly once"));
    pf_placement_deinit(&onep);
    pf_job_spec_deinit(&one);
    free_state(&s);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* --- allocation failures ------------------------------------------------------------------- */

static void test_allocation_failures(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    make_spec("adam", &spec, &pl);
    write_checkpoint(&spec, &pl, 10, true);
    char dir[PF_CKPT_PATH_MAX], out[PF_CKPT_PATH_MAX];
    step_dir_of(10, dir, sizeof dir);
    snprintf(out, sizeof out, "%s/model.safetensors", root);
    state_vectors s;
    make_state(&spec, 10, &s);
    local_shards l;
    local_of(&pl, 1, &s, &l);
    pf_checkpoint_shards sh = {l.n, l.info, l.values, l.slots};
    pf_error err;
    /* Every allocation of each operation fails in turn: each gives PF_ERR_NOMEM (or
     * succeeds once enough are allowed) and never crashes or leaks. */
    for (int op = 0; op < 5; op++) {
        pf_status st = PF_ERR_NOMEM;
        int limit;
        for (limit = 0; st == PF_ERR_NOMEM && limit < 10000; limit++) {
            use_counting(limit);
            pf_checkpoint_ps *c = NULL;
            pf_checkpoint_model *m = NULL;
            int64_t *steps = NULL;
            int n, removed;
            switch (op) {
            case 0:
                st = pf_checkpoint_load_ps(dir, 1, l.info, l.n, pf_optim_slots_of(&spec.optimizer),
                                           &c, &err);
                break;
            case 1:
                st = pf_checkpoint_merge(job_dir, &m, &err);
                break;
            case 2:
                st = pf_checkpoint_write_ps(dir, 1, 101, &spec, pf_optim_slots_of(&spec.optimizer),
                                            &sh, NULL, 0, NULL, &err);
                break;
            case 3:
                st = pf_checkpoint_list(job_dir, PF_CKPT_VERIFY_CRC, &steps, &n, &err);
                break;
            default:
                st = pf_checkpoint_prune(job_dir, 1, &removed, &err);
                break;
            }
            use_libc();
            pf_checkpoint_ps_destroy(c);
            pf_checkpoint_model_destroy(m);
            pf_free(steps);
        }
        assert_int_equal(st, PF_OK);
        assert_true(limit > 1); /* the operation does allocate, so failures were exercised */
    }
    /* The rewritten ps-1 is what was there: the checkpoint is still complete. */
    assert_int_equal(latest(PF_CKPT_VERIFY_CRC), 10);
    free_state(&s);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slot_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_optimizer_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nonfinite_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_needs_every_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_incomplete_and_junk_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_size_is_incomplete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_crc_detected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_validation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_tiling, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repartitioned_restore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocation_failures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
