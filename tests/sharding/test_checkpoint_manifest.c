/* test_checkpoint_manifest.c - which checkpoints of a partitioned MLP over 2 ps tasks count as
 * complete (incomplete, resized and corrupted ones do not; the newest complete one is found)
 * and pruning old ones. */
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
        snprintf(path, sizeof path, "%s/%s", fixture_job_dir, junk_dirs[i]);
        assert_int_equal(mkdir(path, 0755), 0);
    }
    snprintf(path, sizeof path, "%s/step-99", fixture_job_dir);
    spill(path, "x", 1);
    /* A manifest that names another step does not make step-30 complete. */
    snprintf(path, sizeof path, "%s/step-30", fixture_job_dir);
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
    assert_int_equal(pf_checkpoint_list(fixture_job_dir, 0, &steps, &n, &err), PF_OK);
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
    assert_int_equal(pf_checkpoint_list(fixture_job_dir, PF_CKPT_VERIFY_CRC, &steps, &n, &err),
                     PF_OK);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 10);
    pf_free(steps);
    assert_int_equal(pf_checkpoint_list(fixture_job_dir, 0, &steps, &n, &err), PF_OK);
    assert_int_equal(n, 2);
    assert_int_equal(steps[0], 10);
    assert_int_equal(steps[1], 20);
    pf_free(steps);

    /* Export verifies checksums and refuses the step. */
    char out[PF_CKPT_PATH_MAX];
    snprintf(out, sizeof out, "%s/model.safetensors", fixture_root);
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
    assert_int_equal(pf_checkpoint_prune(fixture_job_dir, 1, NULL, &err), PF_OK);
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
    write_checkpoint(&spec, &pl, 35, false); /* abandoned: a ps had passed step 35 */
    write_checkpoint(&spec, &pl, 45, true);  /* being written again: its manifest aside */
    write_checkpoint(&spec, &pl, 60, false); /* being written right now */
    char path[PF_CKPT_PATH_MAX], aside[PF_CKPT_PATH_MAX + 16];
    file_path(10, "ps-0.safetensors.tmp", path, sizeof path); /* a crashed write's leftover */
    spill(path, "x", 1);
    file_path(45, "manifest.json", path, sizeof path);
    snprintf(aside, sizeof aside, "%s.replaced", path);
    assert_int_equal(rename(path, aside), 0);

    int removed = -1;
    pf_error err;
    assert_int_equal(pf_checkpoint_prune(fixture_job_dir, 0, &removed, &err), PF_ERR_INVALID);
    assert_int_equal(pf_checkpoint_prune(fixture_job_dir, 3, &removed, &err), PF_OK);
    assert_int_equal(removed, 4); /* step-5, step-10, step-20, step-35 */
    int64_t *steps;
    int n;
    assert_int_equal(pf_checkpoint_list(fixture_job_dir, 0, &steps, &n, &err), PF_OK);
    assert_int_equal(n, 3);
    assert_int_equal(steps[0], 30);
    assert_int_equal(steps[1], 40);
    assert_int_equal(steps[2], 50);
    pf_free(steps);
    const int64_t gone[] = {5, 10, 20, 35}, kept[] = {30, 40, 45, 50, 60};
    for (int i = 0; i < 4; i++) {
        step_dir_of(gone[i], path, sizeof path);
        assert_false(exists(path));
    }
    for (int i = 0; i < 5; i++) {
        step_dir_of(kept[i], path, sizeof path);
        assert_true(exists(path));
    }
    /* Again: nothing more to do. */
    assert_int_equal(pf_checkpoint_prune(fixture_job_dir, 3, &removed, &err), PF_OK);
    assert_int_equal(removed, 0);
    assert_int_equal(pf_checkpoint_prune(fixture_job_dir, 10, &removed, &err), PF_OK);
    assert_int_equal(removed, 0);

    file_path(45, "manifest.json", path, sizeof path); /* written again: complete once more */
    assert_int_equal(rename(aside, path), 0);
    /* A file psflow did not write keeps its folder, which is reported; the checkpoint in it
     * is gone all the same (its manifest was removed first). */
    file_path(30, "notes.txt", path, sizeof path);
    spill(path, "mine", 4);
    assert_int_equal(pf_checkpoint_prune(fixture_job_dir, 1, &removed, &err), PF_ERR_IO);
    assert_int_equal(removed, 2); /* step-40, step-45 */
    assert_non_null(strstr(err.message, "step-30"));
    assert_non_null(strstr(err.message, "left in place"));
    assert_true(exists(path));
    file_path(30, "ps-0.safetensors", path, sizeof path);
    assert_false(exists(path));
    assert_int_equal(pf_checkpoint_list(fixture_job_dir, 0, &steps, &n, &err), PF_OK);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_incomplete_and_junk_ignored, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_wrong_size_is_incomplete, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_crc_detected, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_manifest_validation, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_prune, fixture_setup, fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
