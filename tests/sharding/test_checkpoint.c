/* test_checkpoint.c - checkpoints of a partitioned MLP over 2 ps tasks: writing the ps files
 * and the manifest, restoring each ps byte for byte (also under another partitioning), and
 * allocation failures. test_checkpoint_manifest.c has what counts as complete and pruning,
 * test_checkpoint_export.c the merged model file; the fixture is
 * tests/support/checkpoint_fixture.c. */
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
#include "tests/support/checkpoint_fixture.h"
#include "tests/support/counting_alloc.h"
#include "tests/support/data_files.h"

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
        pf_checkpoint_shards sh = {l.n, l.info, l.values, l.slots, NULL, 0, NULL};
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
        pf_checkpoint_shards sh = {l.n, l.info, l.values, l.slots, NULL, 0, NULL};
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

/* --- restoring under another partitioning ------------------------------------------------ */

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
    snprintf(out, sizeof out, "%s/model.safetensors", fixture_root);
    state_vectors s;
    make_state(&spec, 10, &s);
    local_shards l;
    local_of(&pl, 1, &s, &l);
    pf_checkpoint_shards sh = {l.n, l.info, l.values, l.slots, NULL, 0, NULL};
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
                st = pf_checkpoint_merge(fixture_job_dir, &m, &err);
                break;
            case 2:
                st = pf_checkpoint_write_ps(dir, 1, 101, &spec, pf_optim_slots_of(&spec.optimizer),
                                            &sh, NULL, 0, NULL, &err);
                break;
            case 3:
                st = pf_checkpoint_list(fixture_job_dir, PF_CKPT_VERIFY_CRC, &steps, &n, &err);
                break;
            default:
                st = pf_checkpoint_prune(fixture_job_dir, 1, &removed, &err);
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
        cmocka_unit_test_setup_teardown(test_round_trip, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_slot_names, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_fake_optimizer_round_trip, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_load_errors, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_nonfinite_refused, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_manifest_needs_every_file, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_repartitioned_restore, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_allocation_failures, fixture_setup, fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
