/* test_checkpoint_export.c - exporting a checkpoint of a partitioned MLP over 2 ps tasks as one
 * merged model that equals the flat parameter vector the shards were cut from, and the
 * tiling checks on hand-made shard lists. */
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
    snprintf(out, sizeof out, "%s/model.safetensors", fixture_root);
    pf_error err;

    /* A job folder means its newest complete checkpoint. */
    int64_t step = -1;
    assert_int_equal(pf_checkpoint_export(fixture_job_dir, out, &step, &err), PF_OK);
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
    snprintf(empty, sizeof empty, "%s/empty-job", fixture_root);
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(pf_checkpoint_export(empty, out, NULL, &err), PF_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "no complete checkpoint"));
    snprintf(empty, sizeof empty, "%s/no-such-dir", fixture_root);
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
    assert_int_equal(pf_checkpoint_export(fixture_job_dir, out, &step, &err), PF_OK);
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
    pf_tensor_view t[] = {{.name = "v/part_0", .rank = 1, .shape = {2}, .data = data},
                          {.name = "v/part_1", .rank = 1, .shape = {2}, .data = data + 2}};
    const char *keys[] = {"psflow_job", "psflow_shards"};
    const char *values[] = {JOB, shards_meta};
    assert_int_equal(pf_safetensors_write(path, t, n_tensors, keys, values, 2, err), PF_OK);
    assert_int_equal(pf_checkpoint_write_manifest(dir, JOB, 1, 1, NULL, err), PF_OK);
    snprintf(out, sizeof out, "%s/model.safetensors", fixture_root);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_export, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_export_tiling, fixture_setup, fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
