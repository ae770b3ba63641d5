/* test_recovery.c - how a training task recovers (worker/recovery.h): the pure decisions
 * (what a ps's answer leads to, the non-finite rollback's course, the learning-rate factor,
 * resync and realignment), and the actions against a fake link: what the chief restores,
 * what a worker waits for, what data is skipped and what the data-skips file says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "psflow/fs.h"
#include "worker/recovery.h"

enum { N_PS = 2, MAX_SCRIPT = 8 };

/* --- the fake link: scripted pulls, recorded restores --- */

typedef struct fake_pull {
    pf_status st;
    uint64_t versions[N_PS];
} fake_pull;

static struct {
    fake_pull script[MAX_SCRIPT]; /* what the next pulls answer, in order */
    int n_script, next, pulls;    /* next: the script's next entry; pulls: every pull */
    int restores;
    uint64_t restore_step;
    float restore_factor;
    int restarted, restart_ps; /* take_restart answers 1 once when restarted */
    uint64_t restart_version;
    pf_status newest;    /* PF_OK or PF_ERR_NOT_FOUND */
    int64_t newest_step; /* the newest complete checkpoint */
    int reports;
    worker_report last_report;
    char last_message[1024];
} fake;

static pf_status fake_pull_fn(trainer *t, pf_error *err) {
    fake.pulls++;
    if (fake.next >= fake.n_script)
        return PF_OK; /* past the script: the versions stay */
    const fake_pull *p = &fake.script[fake.next++];
    memcpy(t->versions, p->versions, sizeof p->versions);
    if (p->st != PF_OK)
        return pf_error_set(err, p->st, NULL, "scripted pull failure");
    return PF_OK;
}

static pf_status fake_restore(trainer *t, uint64_t step, float lr_factor, pf_error *err) {
    (void)err;
    fake.restores++;
    fake.restore_step = step;
    fake.restore_factor = lr_factor;
    for (int p = 0; p < t->n_ps; p++) /* the next pull sees every ps at the restored step */
        fake.script[fake.n_script].versions[p] = step;
    fake.script[fake.n_script++].st = PF_OK;
    return PF_OK;
}

static int fake_take_restart(trainer *t, int *ps, uint64_t *version) {
    (void)t;
    if (!fake.restarted)
        return 0;
    fake.restarted = 0;
    *ps = fake.restart_ps;
    *version = fake.restart_version;
    return 1;
}

static pf_status fake_newest(const trainer *t, int64_t *step, pf_error *err) {
    (void)t;
    if (fake.newest != PF_OK)
        return pf_error_set(err, fake.newest, NULL, "no complete checkpoint");
    *step = fake.newest_step;
    return PF_OK;
}

static const worker_ps_io fake_io = {fake_pull_fn, fake_restore, fake_take_restart, fake_newest};

static void on_report(void *ctx, const worker_report *r) {
    (void)ctx;
    fake.reports++;
    fake.last_report = *r;
    if (r->message) {
        snprintf(fake.last_message, sizeof fake.last_message, "%s", r->message);
        fake.last_report.message = fake.last_message;
    }
}

/* --- a trainer with nothing but what recovery reads --- */

typedef struct fixture {
    char root[64];
    pf_job_spec spec;
    worker_options o;
    trainer t;
    uint64_t versions[N_PS], min_version[N_PS], skipped[4];
    float params[4];
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->root, sizeof f->root, "/tmp/psflow-test-recovery-XXXXXX");
    if (!mkdtemp(f->root))
        return -1;
    snprintf(f->spec.name, sizeof f->spec.name, "job");
    char job_dir[128];
    snprintf(job_dir, sizeof job_dir, "%s/job", f->root);
    if (mkdir(job_dir, 0755) != 0)
        return -1;
    f->spec.replicas.ps = N_PS;
    f->spec.replicas.worker = 2;
    f->spec.replicas.chief = 0;
    f->spec.replicas_per_worker = 1;
    pf_training_spec *tr = &f->spec.training;
    tr->mode = PF_MODE_SYNC;
    tr->batch_size = 10;
    tr->max_steps = 100;
    tr->replicas_to_aggregate = 2;
    tr->on_nonfinite = PF_NONFINITE_ROLLBACK;
    tr->stall_timeout_secs = 5;
    tr->nonfinite_max_rollbacks = 3;
    tr->nonfinite_lr_scale = 0.5;
    f->o = (worker_options){
        .spec = &f->spec, .task = 0, .is_chief = 1, .checkpoint_dir = f->root, .report = on_report};
    f->t = (trainer){.o = &f->o,
                     .spec = &f->spec,
                     .io = &fake_io,
                     .n_ps = N_PS,
                     .n_tasks = 2,
                     .params = f->params,
                     .versions = f->versions,
                     .min_version = f->min_version,
                     .skipped = f->skipped};
    worker_plan_init(&f->t.plan, 2, 10, f->skipped, 4);
    memset(&fake, 0, sizeof fake);
    fake.newest = PF_OK;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    char path[160];
    snprintf(path, sizeof path, "%s/job/data-skips.json", f->root);
    unlink(path);
    snprintf(path, sizeof path, "%s/job", f->root);
    rmdir(path);
    rmdir(f->root);
    free(f);
    return 0;
}

static void script_pull(pf_status st, uint64_t v0, uint64_t v1) {
    fake.script[fake.n_script++] = (fake_pull){st, {v0, v1}};
}

/* The data-skips file the chief wrote, as text ("" without one). */
static void read_skips_file(const fixture *f, char *out, size_t len) {
    char path[160], *text = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/job/data-skips.json", f->root);
    out[0] = '\0';
    if (pf_fs_read_file(path, 1 << 16, &text, &n, NULL) == PF_OK)
        snprintf(out, len, "%.*s", (int)n, text);
    free(text);
}

/* --- decisions --- */

static void test_after_a_request(void **state) {
    (void)state;
    assert_int_equal(worker_recovery_after(PF_OK, 1, 0), WORKER_RECOVERY_NONE);
    assert_int_equal(worker_recovery_after(PF_ERR_NONFINITE, 1, 0), WORKER_RECOVERY_NONFINITE);
    assert_int_equal(worker_recovery_after(PF_ERR_NONFINITE, 1, 1), WORKER_RECOVERY_NONFINITE);
    /* on_nonfinite "fail": a non-finite ps fails the task */
    assert_int_equal(worker_recovery_after(PF_ERR_NONFINITE, 0, 0), WORKER_RECOVERY_FAIL);
    /* a ps that restarted during a periodic checkpoint: the chief rolls back */
    assert_int_equal(worker_recovery_after(PF_ERR_UNAVAILABLE, 1, 1), WORKER_RECOVERY_ROLL_BACK);
    assert_int_equal(worker_recovery_after(PF_ERR_UNAVAILABLE, 0, 1), WORKER_RECOVERY_ROLL_BACK);
    /* ... but not during a pull, a push or the final checkpoint */
    assert_int_equal(worker_recovery_after(PF_ERR_UNAVAILABLE, 1, 0), WORKER_RECOVERY_FAIL);
    assert_int_equal(worker_recovery_after(PF_ERR_IO, 1, 1), WORKER_RECOVERY_FAIL);
}

static void test_nonfinite_course(void **state) {
    (void)state;
    assert_int_equal(worker_recovery_nonfinite_action(0, 1, 0, 3), WORKER_NONFINITE_RESTORE);
    assert_int_equal(worker_recovery_nonfinite_action(0, 0, 2, 3), WORKER_NONFINITE_WAIT);
    assert_int_equal(worker_recovery_nonfinite_action(0, 1, 3, 3), WORKER_NONFINITE_GIVE_UP);
    assert_int_equal(worker_recovery_nonfinite_action(0, 0, 3, 3), WORKER_NONFINITE_GIVE_UP);
    assert_int_equal(worker_recovery_nonfinite_action(0, 1, 0, 0), WORKER_NONFINITE_GIVE_UP);
    /* started mid-rollback: finished (chief) or awaited (worker), even at the limit */
    assert_int_equal(worker_recovery_nonfinite_action(1, 1, 3, 3), WORKER_NONFINITE_FINISH);
    assert_int_equal(worker_recovery_nonfinite_action(1, 0, 3, 3), WORKER_NONFINITE_AWAIT);
}

static void test_lr_factor(void **state) {
    (void)state;
    assert_true(worker_recovery_lr_factor(0.5, 0) == 1.0f);
    assert_true(worker_recovery_lr_factor(0.5, 2) == 0.25f);
    assert_true(worker_recovery_lr_factor(1.0, 7) == 1.0f);
    assert_true(worker_recovery_lr_factor(1e-30, 5) == FLT_MIN); /* never 0 */
}

static void test_versions(void **state) {
    (void)state;
    uint64_t v[N_PS] = {7, 9}, min[N_PS] = {8, 10};
    /* sync: a ps below the version its pull waited for went back */
    assert_true(worker_recovery_went_back(1, N_PS, v, min, 100));
    assert_false(worker_recovery_went_back(0, N_PS, v, min, 100)); /* async: never */
    assert_false(worker_recovery_went_back(1, N_PS, v, min, 7));   /* at the end: done */
    uint64_t ahead[N_PS] = {8, 10};
    assert_false(worker_recovery_went_back(1, N_PS, ahead, min, 100));

    uint64_t apart[N_PS] = {10, 13}, next[N_PS] = {10, 11};
    assert_true(worker_recovery_needs_realign(1, 1, N_PS, apart));
    assert_false(worker_recovery_needs_realign(0, 1, N_PS, apart)); /* only the chief */
    assert_false(worker_recovery_needs_realign(1, 0, N_PS, apart)); /* only sync */
    assert_false(worker_recovery_needs_realign(1, 1, N_PS, next));  /* a step apart: fine */

    assert_true(worker_recovery_settled(N_PS, next, 1));
    assert_false(worker_recovery_settled(N_PS, next, 0));
    assert_false(worker_recovery_settled(N_PS, apart, 1));

    int workers = 3, none = 0, too_many = PF_MAX_REPLICAS + 1;
    assert_int_equal(worker_recovery_tasks(2, NULL, 1), 2);
    assert_int_equal(worker_recovery_tasks(2, &workers, 1), 4);
    assert_int_equal(worker_recovery_tasks(2, &none, 0), 2);     /* no task: kept */
    assert_int_equal(worker_recovery_tasks(2, &too_many, 1), 2); /* out of range: kept */
}

/* --- actions against the fake link --- */

/* Non-finite loss at step 57 on the chief: every ps goes back to the newest checkpoint (40)
 * with the learning rate halved, the failing step's data is skipped, and the data-skips file
 * says so for tasks that start later. */
static void test_chief_rolls_back_nonfinite(void **state) {
    fixture *f = *state;
    fake.newest_step = 40;
    f->versions[0] = f->versions[1] = 57;
    pf_error err;
    pf_error_set(&err, PF_ERR_NONFINITE, NULL, "non-finite loss (nan) at step 57");
    assert_int_equal(worker_recover_nonfinite(&f->t, 57, 1, &err), PF_OK);
    assert_int_equal(fake.restores, 1);
    assert_int_equal(fake.restore_step, 40);
    assert_true(fake.restore_factor == 0.5f);
    assert_int_equal(f->versions[0], 40); /* pulled after the restore */
    assert_int_equal(f->t.n_rollbacks, 1);
    assert_int_equal(f->t.plan.n_skipped, 1);
    assert_int_equal(f->t.plan.skipped[0], 57);
    assert_int_equal(fake.reports, 1);
    assert_int_equal(fake.last_report.kind, WORKER_REPORT_ROLLBACK);
    assert_int_equal(fake.last_report.step, 40);
    assert_int_equal(fake.last_report.from_step, 57);
    assert_string_equal(fake.last_report.reason, "NonFiniteLoss");
    assert_non_null(strstr(fake.last_report.message, "data step 57 skipped"));
    char skips[256];
    read_skips_file(f, skips, sizeof skips);
    assert_string_equal(skips, "{\"rollbacks\":1,\"skipped\":[57],\"pending\":false}");

    /* A task that starts later reads the same rollback and skip. */
    trainer later = f->t;
    uint64_t later_skipped[4];
    later.n_rollbacks = 0;
    later.skipped = later_skipped;
    worker_plan_init(&later.plan, 2, 10, later_skipped, 4);
    worker_read_skips(&later);
    assert_int_equal(later.n_rollbacks, 1);
    assert_int_equal(later.pending, 0);
    assert_int_equal(later.plan.n_skipped, 1);
    assert_int_equal(later.plan.skipped[0], 57);
}

/* A pull (nothing fed) that found a ps non-finite skips no data. */
static void test_unfed_nonfinite_skips_nothing(void **state) {
    fixture *f = *state;
    fake.newest_step = 20;
    pf_error err;
    pf_error_set(&err, PF_ERR_NONFINITE, NULL, "ps 1: non-finite value");
    assert_int_equal(worker_recover_nonfinite(&f->t, 33, 0, &err), PF_OK);
    assert_int_equal(fake.restore_step, 20);
    assert_int_equal(f->t.plan.n_skipped, 0);
    assert_non_null(strstr(fake.last_report.message, "no data skipped"));
}

/* At nonfinite_max_rollbacks, or without a checkpoint, the chief fails NONFINITE and
 * restores nothing. */
static void test_nonfinite_gives_up(void **state) {
    fixture *f = *state;
    f->t.n_rollbacks = 3;
    pf_error err;
    pf_error_set(&err, PF_ERR_NONFINITE, NULL, "non-finite loss (nan) at step 9");
    assert_int_equal(worker_recover_nonfinite(&f->t, 9, 1, &err), PF_ERR_NONFINITE);
    assert_non_null(strstr(err.message, "3 rollbacks already"));
    assert_int_equal(fake.restores, 0);

    f->t.n_rollbacks = 0;
    fake.newest = PF_ERR_NOT_FOUND;
    pf_error_set(&err, PF_ERR_NONFINITE, NULL, "non-finite loss (nan) at step 9");
    assert_int_equal(worker_recover_nonfinite(&f->t, 9, 1, &err), PF_ERR_NONFINITE);
    assert_non_null(strstr(err.message, "no complete checkpoint to roll back to"));
    assert_int_equal(fake.restores, 0);
}

/* A worker restores nothing: it polls until the ps tasks serve again (the chief's RESTORE),
 * and fails on any other error. */
static void test_worker_waits_for_chief(void **state) {
    fixture *f = *state;
    f->o.is_chief = 0;
    f->o.task = 1;
    script_pull(PF_ERR_NONFINITE, 12, 12);
    script_pull(PF_ERR_NONFINITE, 12, 12);
    script_pull(PF_OK, 10, 10);
    pf_error err;
    pf_error_set(&err, PF_ERR_NONFINITE, NULL, "non-finite loss (nan) at step 12");
    assert_int_equal(worker_recover_nonfinite(&f->t, 12, 1, &err), PF_OK);
    assert_int_equal(fake.pulls, 3);
    assert_int_equal(fake.restores, 0);
    assert_int_equal(fake.reports, 0);
    assert_int_equal(f->versions[0], 10);
    assert_int_equal(f->t.n_rollbacks, 1);
    assert_int_equal(f->t.plan.n_skipped, 1); /* its own batch of step 12 */

    script_pull(PF_ERR_UNAVAILABLE, 10, 10);
    pf_error_set(&err, PF_ERR_NONFINITE, NULL, "non-finite loss (nan) at step 10");
    assert_int_equal(worker_recover_nonfinite(&f->t, 10, 0, &err), PF_ERR_UNAVAILABLE);
}

/* A ps restarted: the chief rolls every ps back to the newest checkpoint; a worker leaves
 * it to the chief; without a checkpoint nothing is rolled back. */
static void test_roll_back_after_restart(void **state) {
    fixture *f = *state;
    int rolled = 1;
    pf_error err;
    pf_error_clear(&err);
    assert_int_equal(worker_roll_back(&f->t, &rolled, &err), PF_OK);
    assert_int_equal(rolled, 0); /* no restart */

    f->versions[0] = 52;
    f->versions[1] = 53;
    fake.restarted = 1;
    fake.restart_ps = 1;
    fake.restart_version = 50;
    fake.newest_step = 50;
    assert_int_equal(worker_roll_back(&f->t, &rolled, &err), PF_OK);
    assert_int_equal(rolled, 1);
    assert_int_equal(fake.restores, 1);
    assert_int_equal(fake.restore_step, 50);
    assert_true(fake.restore_factor == 1.0f); /* no non-finite rollback yet */
    assert_int_equal(fake.last_report.kind, WORKER_REPORT_ROLLBACK);
    assert_int_equal(fake.last_report.from_step, 53);
    assert_int_equal(fake.last_report.step, 50);

    f->o.is_chief = 0;
    fake.restarted = 1;
    assert_int_equal(worker_roll_back(&f->t, &rolled, &err), PF_OK);
    assert_int_equal(rolled, 0);
    assert_int_equal(fake.restores, 1);
    assert_int_equal(fake.restarted, 1); /* not taken: the worker leaves it alone */

    f->o.is_chief = 1;
    fake.newest = PF_ERR_NOT_FOUND;
    assert_int_equal(worker_roll_back(&f->t, &rolled, &err), PF_OK);
    assert_int_equal(rolled, 0);
    assert_int_equal(fake.restores, 1);
}

/* A replacement chief finding the ps tasks 3 steps apart realigns them to the newest
 * checkpoint; without one it goes on. */
static void test_realign(void **state) {
    fixture *f = *state;
    f->versions[0] = 30;
    f->versions[1] = 33;
    fake.newest_step = 30;
    pf_error err;
    pf_error_clear(&err);
    assert_int_equal(worker_realign(&f->t, &err), PF_OK);
    assert_int_equal(fake.restores, 1);
    assert_int_equal(fake.restore_step, 30);
    assert_int_equal(f->versions[1], 30);
    assert_int_equal(fake.last_report.from_step, 33);

    fake.newest = PF_ERR_NOT_FOUND;
    assert_int_equal(worker_realign(&f->t, &err), PF_OK);
    assert_int_equal(fake.restores, 1);
    assert_string_equal(err.message, "");
}

/* Resync pulls until every ps serves one version. */
static void test_resync(void **state) {
    fixture *f = *state;
    f->o.is_chief = 0;
    f->versions[0] = 5;
    f->versions[1] = 7;
    script_pull(PF_OK, 6, 7);
    script_pull(PF_OK, 7, 7);
    pf_error err;
    pf_error_clear(&err);
    assert_int_equal(worker_resync(&f->t, &err), PF_OK);
    assert_int_equal(fake.pulls, 2);

    script_pull(PF_ERR_NONFINITE, 7, 7);
    assert_int_equal(worker_resync(&f->t, &err), PF_ERR_NONFINITE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_after_a_request),
        cmocka_unit_test(test_nonfinite_course),
        cmocka_unit_test(test_lr_factor),
        cmocka_unit_test(test_versions),
        cmocka_unit_test_setup_teardown(test_chief_rolls_back_nonfinite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unfed_nonfinite_skips_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nonfinite_gives_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_worker_waits_for_chief, setup, teardown),
        cmocka_unit_test_setup_teardown(test_roll_back_after_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_realign, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resync, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
