/* test_shard.c - the parameter server's aggregation semantics, driven in-process exactly as
 * workers drive it: sync equivalence with one process using the combined batch (and
 * independence from arrival order), backup workers and stale gradients, async updates and
 * at-most-once pushes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/data.h"
#include "psflow/dyn_batch.h"
#include "psflow/dyn_table.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/optim.h"
#include "psflow/placement.h"
#include "psflow/rng.h"
#include "ps/shard.h"

enum { FEATURES = 8, CLASSES = 3, EXAMPLES = 37 };

static pf_job_spec make_spec(pf_training_mode mode, int workers, int aggregate, int ps) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"name\": \"t\", \"replicas\": {\"ps\": %d, \"worker\": %d},"
             " \"model\": {\"type\": \"mlp\", \"inputs\": %d, \"hidden\": [16], \"outputs\": %d},"
             " \"data\": {\"format\": \"csv\", \"train\": [\"unused.csv\"]},"
             " \"optimizer\": {\"type\": \"adam\", \"learning_rate\": 0.01},"
             " \"training\": {\"mode\": \"%s\", \"batch_size\": 5, \"seed\": 3 %s},"
             " \"placement\": {\"partitioner\": {\"type\": \"fixed_shards\", \"num_shards\": 2}}}",
             ps, workers, FEATURES, CLASSES, mode == PF_MODE_SYNC ? "sync" : "async",
             mode == PF_MODE_SYNC ? (aggregate == 2 ? ", \"replicas_to_aggregate\": 2" : "") : "");
    pf_job_spec spec;
    pf_error err;
    if (pf_job_spec_parse(json, strlen(json), &spec, &err) != PF_OK)
        fail_msg("spec: %s", err.message);
    return spec;
}

static pf_dataset make_data(void) {
    pf_dataset ds = {.n = EXAMPLES, .features = FEATURES, .num_classes = CLASSES};
    ds.x = malloc(sizeof(float) * EXAMPLES * FEATURES);
    ds.y = malloc(sizeof(float) * EXAMPLES);
    pf_rng rng;
    pf_rng_init(&rng, 11, 0);
    for (int i = 0; i < EXAMPLES * FEATURES; i++)
        ds.x[i] = (float)pf_rng_uniform(&rng);
    for (int i = 0; i < EXAMPLES; i++)
        ds.y[i] = (float)pf_rng_below(&rng, CLASSES);
    return ds;
}

/* One gradient of the mean loss over `count` examples at stream position `start`. */
static void gradient(pf_model *m, const pf_dataset *ds, pf_sampler *sampler, int64_t start,
                     int count, const float *params, float *grads) {
    float x[64 * FEATURES], y[64];
    int32_t labels[64];
    pf_batch_gather(ds, sampler, start, count, x, y, labels);
    pf_model_train_step(m, params, x, y, labels, count, grads);
}

/* Assembles the full parameter vector from the ps stores. */
static void pull_all(ps_shards **stores, int n_ps, float *params) {
    for (int p = 0; p < n_ps; p++)
        for (int i = 0; i < ps_shards_count(stores[p]); i++) {
            const pf_shard_info *info = ps_shards_info(stores[p], i);
            memcpy(params + info->offset, ps_shards_values(stores[p], i),
                   info->count * sizeof(float));
        }
}

/* Pushes a full gradient vector to every ps (each gets its shards). */
static ps_push_result push_all_inc(ps_shards **stores, int n_ps, int task, uint64_t incarnation,
                                   uint64_t seq, uint64_t step, const float *grads) {
    ps_push_result last = PS_PUSH_APPLIED;
    for (int p = 0; p < n_ps; p++) {
        const float *g[64];
        for (int i = 0; i < ps_shards_count(stores[p]); i++)
            g[i] = grads + ps_shards_info(stores[p], i)->offset;
        last = ps_shards_push(stores[p], task, incarnation, seq, step, g);
    }
    return last;
}

static ps_push_result push_all(ps_shards **stores, int n_ps, int task, uint64_t seq, uint64_t step,
                               const float *grads) {
    return push_all_inc(stores, n_ps, task, 1, seq, step, grads);
}

static ps_push_result push_inc(ps_shards **stores, int task, uint64_t incarnation, uint64_t seq,
                               uint64_t step, const float *grads) {
    return push_all_inc(stores, 1, task, incarnation, seq, step, grads);
}

/* Runs `steps` sync steps with W workers of batch b pushing in the given task order; leaves
 * the final parameters in params. */
static void run_sync(const pf_job_spec *spec, const pf_dataset *ds, int steps, const int *order,
                     float *params) {
    const pf_backend *be = pf_backend_openblas();
    pf_placement pl;
    assert_int_equal(pf_placement_compute(spec, &pl), PF_OK);
    ps_shards *stores[4];
    for (int p = 0; p < pl.n_ps; p++)
        assert_int_equal(ps_shards_create(spec, &pl, p, be, &stores[p]), PF_OK);
    size_t np = pf_model_num_params(&spec->model);
    int w = spec->replicas.worker, b = spec->training.batch_size;
    float *local = malloc(np * sizeof(float)), *grads = malloc(np * sizeof(float) * 4);
    pf_model *m;
    assert_int_equal(pf_model_create(&spec->model, be, b, &m), PF_OK);
    pf_sampler *sampler = pf_sampler_create(ds->n, spec->training.seed, true);
    for (int step = 0; step < steps; step++) {
        pull_all(stores, pl.n_ps, local);
        for (int t = 0; t < w; t++)
            gradient(m, ds, sampler, pf_shard_position(step, w, t, b), b, local, grads + t * np);
        for (int k = 0; k < w; k++) {
            int t = order[k];
            ps_push_result r =
                push_all(stores, pl.n_ps, t, (uint64_t)step + 1, (uint64_t)step, grads + t * np);
            assert_int_equal(r, k == w - 1 ? PS_PUSH_APPLIED : PS_PUSH_ACCEPTED);
        }
    }
    pull_all(stores, pl.n_ps, params);
    for (int p = 0; p < pl.n_ps; p++) {
        assert_int_equal(ps_shards_stats(stores[p]).version, steps);
        ps_shards_destroy(stores[p]);
    }
    pf_sampler_destroy(sampler);
    pf_model_destroy(m);
    pf_placement_deinit(&pl);
    free(local);
    free(grads);
}

/* One process with batch W*b, as psflow train runs it. */
static void run_single(const pf_job_spec *spec, const pf_dataset *ds, int steps, float *params) {
    const pf_backend *be = pf_backend_openblas();
    size_t np = pf_model_num_params(&spec->model);
    int big = spec->replicas.worker * spec->training.batch_size;
    float *grads = malloc(np * sizeof(float));
    float *slots[PF_OPTIM_MAX_SLOTS] = {0};
    for (int k = 0; k < pf_optim_num_slots(&spec->optimizer); k++) {
        slots[k] = malloc(np * sizeof(float));
        pf_optim_slot_init(&spec->optimizer, be, k, slots[k], np);
    }
    pf_model_init_params(&spec->model, spec->training.seed, params);
    pf_model *m;
    assert_int_equal(pf_model_create(&spec->model, be, big, &m), PF_OK);
    pf_sampler *sampler = pf_sampler_create(ds->n, spec->training.seed, true);
    for (int step = 0; step < steps; step++) {
        gradient(m, ds, sampler, pf_shard_position(step, 1, 0, big), big, params, grads);
        pf_optim_apply(&spec->optimizer, be, step, np, grads, params, slots);
    }
    pf_sampler_destroy(sampler);
    pf_model_destroy(m);
    for (int k = 0; k < PF_OPTIM_MAX_SLOTS; k++)
        free(slots[k]);
    free(grads);
}

static void test_sync_equivalence(void **state) {
    (void)state;
    pf_job_spec spec = make_spec(PF_MODE_SYNC, 2, 0, 2);
    pf_dataset ds = make_data();
    size_t np = pf_model_num_params(&spec.model);
    float *single = malloc(np * sizeof(float)), *forward = malloc(np * sizeof(float));
    float *backward = malloc(np * sizeof(float));
    const int steps = 40, in_order[] = {0, 1}, reversed[] = {1, 0};
    run_single(&spec, &ds, steps, single);
    run_sync(&spec, &ds, steps, in_order, forward);
    run_sync(&spec, &ds, steps, reversed, backward);
    double max_diff = 0;
    for (size_t i = 0; i < np; i++)
        max_diff = fmax(max_diff, fabs((double)single[i] - forward[i]));
    print_message("sync equivalence: max |single - distributed| = %.3g over %zu params\n", max_diff,
                  np);
    assert_true(max_diff <= 1e-5);
    /* Arrival order does not matter at all: averaging happens in task-index order. */
    assert_memory_equal(forward, backward, np * sizeof(float));
    free(single);
    free(forward);
    free(backward);
    free(ds.x);
    free(ds.y);
    pf_job_spec_deinit(&spec);
}

static void test_backup_workers_and_stale(void **state) {
    (void)state;
    pf_job_spec spec = make_spec(PF_MODE_SYNC, 3, 2, 1);
    pf_placement pl;
    assert_int_equal(pf_placement_compute(&spec, &pl), PF_OK);
    ps_shards *s;
    assert_int_equal(ps_shards_create(&spec, &pl, 0, pf_backend_openblas(), &s), PF_OK);
    size_t np = pf_model_num_params(&spec.model);
    float *g = calloc(np, sizeof(float));
    ps_shards *stores[] = {s};
    /* Step 0: workers 0 and 2 complete the step; worker 1 (the slow one) is late. */
    assert_int_equal(push_all(stores, 1, 0, 1, 0, g), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(stores, 1, 2, 1, 0, g), PS_PUSH_APPLIED);
    assert_int_equal(ps_shards_stats(s).version, 1);
    assert_int_equal(push_all(stores, 1, 1, 1, 0, g), PS_PUSH_STALE);
    /* Step 1 goes on without it. */
    assert_int_equal(push_all(stores, 1, 1, 2, 1, g), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(stores, 1, 0, 2, 1, g), PS_PUSH_APPLIED);
    ps_stats st = ps_shards_stats(s);
    assert_int_equal(st.version, 2);
    assert_int_equal(st.pushes_stale, 1);
    assert_int_equal(st.pushes_applied, 4);
    ps_shards_destroy(s);
    pf_placement_deinit(&pl);
    free(g);
    pf_job_spec_deinit(&spec);
}

/* After an update the ps finds a value that became NaN or infinite: the shard holding it
 * and the element within it; none while every value is finite. */
static void test_find_nonfinite(void **state) {
    (void)state;
    pf_job_spec spec = make_spec(PF_MODE_ASYNC, 2, 0, 1);
    pf_placement pl;
    assert_int_equal(pf_placement_compute(&spec, &pl), PF_OK);
    ps_shards *s;
    assert_int_equal(ps_shards_create(&spec, &pl, 0, pf_backend_openblas(), &s), PF_OK);
    size_t np = pf_model_num_params(&spec.model), elem = 99;
    float *g = malloc(np * sizeof(float));
    for (size_t i = 0; i < np; i++)
        g[i] = 0.5f;
    ps_shards *stores[] = {s};
    assert_int_equal(push_inc(stores, 0, 1, 1, 0, g), PS_PUSH_APPLIED);
    assert_int_equal(ps_shards_find_nonfinite(s, &elem), -1);
    int local = 1; /* the second shard, one element in */
    const pf_shard_info *info = ps_shards_info(s, local);
    assert_true(info->count > 1);
    g[info->offset + 1] = NAN;
    assert_int_equal(push_inc(stores, 0, 1, 2, 1, g), PS_PUSH_APPLIED);
    assert_int_equal(ps_shards_find_nonfinite(s, &elem), local);
    assert_int_equal(elem, 1);
    free(g);
    ps_shards_destroy(s);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* A live membership change in a sync job: an added worker joins the step it first pushes
 * for (never blocking the step in flight), a removed worker's waiting gradient is not
 * counted, a step that waited only for removed workers is applied at once; values and
 * version are kept. Checked against a store that never saw the removed worker's push. */
static void test_membership_change(void **state) {
    (void)state;
    pf_job_spec spec = make_spec(PF_MODE_SYNC, 2, 0, 1);
    pf_placement pl;
    assert_int_equal(pf_placement_compute(&spec, &pl), PF_OK);
    ps_shards *s, *ref;
    assert_int_equal(ps_shards_create(&spec, &pl, 0, pf_backend_openblas(), &s), PF_OK);
    assert_int_equal(ps_shards_create(&spec, &pl, 0, pf_backend_openblas(), &ref), PF_OK);
    size_t np = pf_model_num_params(&spec.model);
    float *g[3];
    for (int t = 0; t < 3; t++) {
        g[t] = malloc(np * sizeof(float));
        for (size_t i = 0; i < np; i++)
            g[t][i] = (float)(t + 1) * 0.01f * (float)((i % 7) + 1);
    }
    ps_shards *one[] = {s}, *other[] = {ref};
    int applied = -1;
    assert_int_equal(ps_shards_tasks(s), 2);
    assert_int_equal(ps_shards_set_tasks(s, 0, 1, &applied), PF_ERR_INVALID);
    assert_int_equal(ps_shards_set_tasks(s, 3, 4, &applied), PF_ERR_INVALID);
    assert_int_equal(ps_shards_tasks(s), 2);
    /* Step 0: worker 0 pushed, then the job grows to 3; worker 2 has not pushed yet, so the
     * step completes with workers 0 and 1. */
    assert_int_equal(push_all(one, 1, 0, 1, 0, g[0]), PS_PUSH_ACCEPTED);
    assert_int_equal(ps_shards_set_tasks(s, 3, 3, &applied), PF_OK);
    assert_int_equal(applied, 0);
    assert_int_equal(ps_shards_tasks(s), 3);
    assert_int_equal(push_all(one, 1, 1, 1, 0, g[1]), PS_PUSH_APPLIED);
    assert_int_equal(ps_shards_stats(s).version, 1);
    /* Step 1: worker 2's first push joins it: the step needs all three. */
    assert_int_equal(push_all(one, 1, 2, 1, 1, g[2]), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(one, 1, 0, 2, 1, g[0]), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(one, 1, 1, 2, 1, g[1]), PS_PUSH_APPLIED);
    assert_int_equal(ps_shards_stats(s).version, 2);
    /* The reference store: the same steps without any change of membership... */
    int rapplied;
    assert_int_equal(push_all(other, 1, 0, 1, 0, g[0]), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(other, 1, 1, 1, 0, g[1]), PS_PUSH_APPLIED);
    assert_int_equal(ps_shards_set_tasks(ref, 3, 3, &rapplied), PF_OK);
    assert_int_equal(push_all(other, 1, 2, 1, 1, g[2]), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(other, 1, 0, 2, 1, g[0]), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(other, 1, 1, 2, 1, g[1]), PS_PUSH_APPLIED);
    /* Step 2: workers 0 and 2 pushed, then worker 2 is removed: its gradient is dropped and
     * the step waits for worker 1. */
    assert_int_equal(push_all(one, 1, 0, 3, 2, g[0]), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(one, 1, 2, 2, 2, g[2]), PS_PUSH_ACCEPTED);
    assert_int_equal(ps_shards_set_tasks(s, 2, 2, &applied), PF_OK);
    assert_int_equal(applied, 0);
    assert_int_equal(push_all(one, 1, 1, 3, 2, g[1]), PS_PUSH_APPLIED);
    /* ... and step 2 of two workers only. */
    assert_int_equal(ps_shards_set_tasks(ref, 2, 2, &rapplied), PF_OK);
    assert_int_equal(push_all(other, 1, 0, 3, 2, g[0]), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(other, 1, 1, 3, 2, g[1]), PS_PUSH_APPLIED);
    for (int i = 0; i < ps_shards_count(s); i++)
        assert_memory_equal(ps_shards_values(s, i), ps_shards_values(ref, i),
                            ps_shards_info(s, i)->count * sizeof(float));
    /* Step 3: three workers again, all joined; workers 0 and 1 pushed when worker 2 is
     * removed: the step is applied at once. */
    assert_int_equal(ps_shards_set_tasks(s, 3, 3, &applied), PF_OK);
    assert_int_equal(push_all(one, 1, 2, 3, 3, g[2]), PS_PUSH_ACCEPTED); /* joins */
    assert_int_equal(ps_shards_stats(s).version, 3);
    assert_int_equal(push_all(one, 1, 0, 4, 3, g[0]), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(one, 1, 1, 4, 3, g[1]), PS_PUSH_APPLIED);
    assert_int_equal(push_all(one, 1, 0, 5, 4, g[0]), PS_PUSH_ACCEPTED);
    assert_int_equal(push_all(one, 1, 1, 5, 4, g[1]), PS_PUSH_ACCEPTED);
    assert_int_equal(ps_shards_set_tasks(s, 2, 2, &applied), PF_OK);
    assert_int_equal(applied, 1);
    assert_int_equal(ps_shards_stats(s).version, 5);
    for (int t = 0; t < 3; t++)
        free(g[t]);
    ps_shards_destroy(s);
    ps_shards_destroy(ref);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

static void test_async_and_at_most_once(void **state) {
    (void)state;
    pf_job_spec spec = make_spec(PF_MODE_ASYNC, 2, 0, 1);
    pf_placement pl;
    assert_int_equal(pf_placement_compute(&spec, &pl), PF_OK);
    ps_shards *s;
    assert_int_equal(ps_shards_create(&spec, &pl, 0, pf_backend_openblas(), &s), PF_OK);
    size_t np = pf_model_num_params(&spec.model);
    float *g = malloc(np * sizeof(float)), *before = malloc(np * sizeof(float));
    float *after = malloc(np * sizeof(float));
    for (size_t i = 0; i < np; i++)
        g[i] = 0.5f;
    ps_shards *stores[] = {s};
    assert_int_equal(push_inc(stores, 0, 1, 1, 0, g), PS_PUSH_APPLIED);
    assert_int_equal(push_inc(stores, 1, 1, 1, 0, g), PS_PUSH_APPLIED);
    assert_int_equal(ps_shards_stats(s).version, 2);

    /* A retried push (same incarnation and seq) is acknowledged, not applied. */
    pull_all(stores, 1, before);
    assert_int_equal(push_inc(stores, 0, 1, 1, 5, g), PS_PUSH_DUPLICATE);
    pull_all(stores, 1, after);
    assert_memory_equal(before, after, np * sizeof(float));
    /* A restarted task (new incarnation) starts its numbering again... */
    assert_int_equal(push_inc(stores, 0, 2, 1, 5, g), PS_PUSH_APPLIED);
    /* ...and its old incarnation is refused from then on. */
    pull_all(stores, 1, before);
    assert_int_equal(push_inc(stores, 0, 1, 9, 5, g), PS_PUSH_REFUSED);
    pull_all(stores, 1, after);
    assert_memory_equal(before, after, np * sizeof(float));
    ps_stats st = ps_shards_stats(s);
    assert_int_equal(st.version, 3);
    assert_int_equal(st.pushes_duplicate, 1);
    assert_int_equal(st.pushes_refused, 1);
    ps_shards_destroy(s);
    pf_placement_deinit(&pl);
    free(g);
    free(before);
    free(after);
    pf_job_spec_deinit(&spec);
}

static void test_initial_values(void **state) {
    (void)state;
    /* Every ps starts from exactly the values one process starts from. */
    pf_job_spec spec = make_spec(PF_MODE_SYNC, 2, 0, 3);
    pf_placement pl;
    assert_int_equal(pf_placement_compute(&spec, &pl), PF_OK);
    size_t np = pf_model_num_params(&spec.model);
    float *expect = malloc(np * sizeof(float)), *got = calloc(np, sizeof(float));
    pf_model_init_params(&spec.model, spec.training.seed, expect);
    ps_shards *stores[3];
    for (int p = 0; p < 3; p++)
        assert_int_equal(ps_shards_create(&spec, &pl, p, pf_backend_openblas(), &stores[p]), PF_OK);
    pull_all(stores, 3, got);
    assert_memory_equal(expect, got, np * sizeof(float));
    for (int p = 0; p < 3; p++)
        ps_shards_destroy(stores[p]);
    ps_shards *none;
    assert_int_equal(ps_shards_create(&spec, &pl, 3, pf_backend_openblas(), &none), PF_ERR_INVALID);
    pf_placement_deinit(&pl);
    free(expect);
    free(got);
    pf_job_spec_deinit(&spec);
}

/* One ps's shards of a softmax model over a table of `vocab` rows of 2 (local shard 0) and
 * its dense variables, the optimizer at learning rate 0.5. */
static ps_shards *table_shards(int vocab, const char *optimizer, const char *mode, int workers,
                               pf_job_spec *spec, pf_placement *pl) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"name\": \"rows\", \"replicas\": {\"ps\": 1, \"worker\": %d},"
             " \"model\": {\"type\": \"softmax\", \"outputs\": 2, \"embeddings\":"
             " [{\"name\": \"ids\", \"vocab\": %d, \"dim\": 2}]},"
             " \"data\": {\"format\": \"libsvm\", \"train\": [\"unused\"]},"
             " \"optimizer\": {\"type\": \"%s\", \"learning_rate\": 0.5},"
             " \"training\": {\"mode\": \"%s\"}}",
             workers, vocab, optimizer, mode);
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), spec, &err), PF_OK);
    assert_int_equal(pf_placement_compute(spec, pl), PF_OK);
    ps_shards *s;
    assert_int_equal(ps_shards_create(spec, pl, 0, pf_backend_openblas(), &s), PF_OK);
    assert_true(ps_shards_is_table(s, 0) && !ps_shards_is_table(s, 1));
    return s;
}

/* An allocator whose realloc fails while `failing` is set (malloc and free as libc's). */
static int failing;
static void *fail_realloc(void *p, size_t n) {
    return failing ? NULL : realloc(p, n);
}

/* Sync row pushes of two tasks on a table: a push the ps has no memory to keep is answered
 * NOMEM and changes nothing - not its sequence number, not the step - so the same push taken
 * later completes the step; rows named by one task only get half its gradient (sgd 0.5). */
static void test_rows_without_memory(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    ps_shards *s = table_shards(6, "sgd", "sync", 2, &spec, &pl);
    float before[12];
    memcpy(before, ps_shards_values(s, 0), sizeof before);
    static const float zeros[8] = {0};
    static const uint32_t r0[1] = {1}, r1[2] = {1, 4};
    static const float g0[2] = {1, 2}, g1[4] = {3, 4, 8, -8};
    ps_grad a[3] = {{g0, r0, 1, NULL}, {zeros, NULL, 0, NULL}, {zeros, NULL, 0, NULL}};
    ps_grad b[3] = {{g1, r1, 2, NULL}, {zeros, NULL, 0, NULL}, {zeros, NULL, 0, NULL}};
    assert_int_equal(ps_shards_push_grads(s, 0, 1, 1, 0, a), PS_PUSH_ACCEPTED);
    pf_allocator fails = {malloc, fail_realloc, free};
    pf_mem_set_allocator(&fails);
    failing = 1;
    assert_int_equal(ps_shards_push_grads(s, 1, 1, 1, 0, b), PS_PUSH_NOMEM);
    failing = 0;
    pf_mem_set_allocator(NULL);
    assert_int_equal(ps_shards_stats(s).version, 0);
    /* the same push (same seq) is taken now and completes the step */
    assert_int_equal(ps_shards_push_grads(s, 1, 1, 1, 0, b), PS_PUSH_APPLIED);
    assert_int_equal(ps_shards_stats(s).version, 1);
    const float *after = ps_shards_values(s, 0);
    for (int i = 0; i < 12; i++) {
        int row = i / 2, j = i % 2;
        float sum = row == 1 ? g0[j] + g1[j] : row == 4 ? g1[2 + j] : 0;
        assert_true(after[i] == before[i] - 0.5f * (sum * 0.5f));
    }
    ps_shards_destroy(s);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* A table's rows are checked as they are updated (async and sync, one update and a merged
 * step): the first row the update made non-finite is named by its element, in the order the
 * rows were updated (increasing); a dense shard is still read whole; after a restore every row is
 * read. */
static void test_find_nonfinite_rows(void **state) {
    (void)state;
    for (int sync = 0; sync <= 1; sync++) {
        pf_job_spec spec;
        pf_placement pl;
        ps_shards *s =
            table_shards(6, "adagrad", sync ? "sync" : "async", sync ? 2 : 1, &spec, &pl);
        static const float zeros[8] = {0};
        static const uint32_t r0[2] = {1, 4}, r1[1] = {2}; /* increasing, as on the wire */
        float g0[4] = {1, 2, 3, 4}, g1[2] = {1, 1}, dense[8] = {0};
        ps_grad a[3] = {{g0, r0, 2, NULL}, {zeros, NULL, 0, NULL}, {zeros, NULL, 0, NULL}};
        ps_grad b[3] = {{g1, r1, 1, NULL}, {zeros, NULL, 0, NULL}, {zeros, NULL, 0, NULL}};
        uint64_t seq = 1, step = 0;
        size_t elem = 99;
        /* every value finite */
        assert_int_equal(ps_shards_push_grads(s, 0, 1, seq, step, a),
                         sync ? PS_PUSH_ACCEPTED : PS_PUSH_APPLIED);
        if (sync)
            assert_int_equal(ps_shards_push_grads(s, 1, 1, seq, step, b), PS_PUSH_APPLIED);
        assert_int_equal(ps_shards_find_nonfinite(s, &elem), -1);
        /* rows 1 and 4 go bad: the first updated is named */
        g0[1] = NAN;
        g0[2] = INFINITY;
        seq++, step++;
        assert_int_equal(ps_shards_push_grads(s, 0, 1, seq, step, a),
                         sync ? PS_PUSH_ACCEPTED : PS_PUSH_APPLIED);
        if (sync)
            assert_int_equal(ps_shards_push_grads(s, 1, 1, seq, step, b), PS_PUSH_APPLIED);
        assert_int_equal(ps_shards_find_nonfinite(s, &elem), 0);
        assert_int_equal(elem, 1 * 2 + 1);
        /* restored values that are not finite are found without an update */
        int n = ps_shards_count(s);
        assert_true(n >= 2 && n <= 4);
        float *values[4], *slot[4];
        const float *restore_values[4];
        const float *slot_of[4][1];
        const float *const *restore_slots[4];
        for (int i = 0; i < n; i++) {
            values[i] = calloc(ps_shards_info(s, i)->count, sizeof(float));
            slot[i] = calloc(ps_shards_info(s, i)->count, sizeof(float));
            for (size_t k = 0; k < ps_shards_info(s, i)->count; k++)
                slot[i][k] = 1; /* adagrad's accumulators: 0 / sqrt(0) would be NaN */
            restore_values[i] = values[i];
            slot_of[i][0] = slot[i];
            restore_slots[i] = slot_of[i];
        }
        values[0][5] = NAN;
        ps_shards_restore(s, 7, restore_values, restore_slots);
        assert_int_equal(ps_shards_find_nonfinite(s, &elem), 0);
        assert_int_equal(elem, 5);
        /* a dense shard is read whole after a row update */
        values[0][5] = 0;
        ps_shards_restore(s, 7, restore_values, restore_slots);
        g0[1] = 1;
        g0[2] = 1;
        dense[1] = NAN;
        a[1].data = dense;
        seq++, step = 7;
        assert_int_equal(ps_shards_push_grads(s, 0, 1, seq, step, a),
                         sync ? PS_PUSH_ACCEPTED : PS_PUSH_APPLIED);
        if (sync)
            assert_int_equal(ps_shards_push_grads(s, 1, 1, seq, step, b), PS_PUSH_APPLIED);
        assert_int_equal(ps_shards_find_nonfinite(s, &elem), 1);
        assert_int_equal(elem, 1);
        for (int i = 0; i < n; i++) {
            free(values[i]);
            free(slot[i]);
        }
        ps_shards_destroy(s);
        pf_placement_deinit(&pl);
        pf_job_spec_deinit(&spec);
    }
}

/* A merged sync step over more rows than the check lags behind (and the prefetch reaches):
 * the first row (in merged, increasing order) that came out non-finite is named, wherever
 * it is. */
static void test_find_nonfinite_merged(void **state) {
    (void)state;
    enum { ROWS = 40 };
    static const float zeros[8] = {0};
    static const uint32_t one[1] = {3};
    uint32_t all[ROWS];
    for (int j = 0; j < ROWS; j++)
        all[j] = (uint32_t)j;
    for (int bad = 0; bad < ROWS; bad++) {
        pf_job_spec spec;
        pf_placement pl;
        ps_shards *s = table_shards(ROWS, "sgd", "sync", 2, &spec, &pl);
        float g0[2 * ROWS], g1[2] = {1, 1};
        for (int k = 0; k < 2 * ROWS; k++)
            g0[k] = 0.25f;
        g0[2 * bad + 1] = NAN;
        if (bad < ROWS - 1)
            g0[2 * (ROWS - 1)] = INFINITY; /* a later row too */
        ps_grad a[3] = {{g0, all, ROWS, NULL}, {zeros, NULL, 0, NULL}, {zeros, NULL, 0, NULL}};
        ps_grad b[3] = {{g1, one, 1, NULL}, {zeros, NULL, 0, NULL}, {zeros, NULL, 0, NULL}};
        assert_int_equal(ps_shards_push_grads(s, 0, 1, 1, 0, a), PS_PUSH_ACCEPTED);
        assert_int_equal(ps_shards_push_grads(s, 1, 1, 1, 0, b), PS_PUSH_APPLIED);
        size_t elem = 99;
        assert_int_equal(ps_shards_find_nonfinite(s, &elem), 0);
        assert_int_equal(elem, 2 * bad + 1);
        ps_shards_destroy(s);
        pf_placement_deinit(&pl);
        pf_job_spec_deinit(&spec);
    }
}

/* A store with a dynamic table ("ids", dim 2, max_rows 100) beside a dense softmax. */
static const char *dyn_optimizer = "adagrad";
static ps_shards *dynamic_shards(const char *mode, int n_ps, int ps, pf_job_spec *spec,
                                 pf_placement *pl) {
    char json[640];
    snprintf(json, sizeof json,
             "{\"name\": \"dyn\", \"replicas\": {\"ps\": %d, \"worker\": 2},"
             " \"model\": {\"type\": \"softmax\", \"outputs\": 2, \"embeddings\":"
             " [{\"name\": \"ids\", \"kind\": \"dynamic\", \"max_rows\": 100, \"dim\": 2}]},"
             " \"data\": {\"format\": \"synthetic_ctr\", \"n\": 100},"
             " \"optimizer\": {\"type\": \"%s\", \"learning_rate\": 0.5},"
             " \"training\": {\"mode\": \"%s\"}}",
             n_ps, dyn_optimizer, mode);
    pf_error err;
    assert_int_equal(pf_job_spec_parse(json, strlen(json), spec, &err), PF_OK);
    assert_int_equal(pf_placement_compute(spec, pl), PF_OK);
    ps_shards *s;
    assert_int_equal(ps_shards_create(spec, pl, ps, pf_backend_openblas(), &s), PF_OK);
    return s;
}

/* Updates reference table t by the rows g of ids, as one process applies a step (adam: and
 * every other row with a zero gradient). */
static void reference_update(pf_dyn_table *t, const pf_job_spec *spec, int64_t step,
                             const uint64_t *ids, uint32_t n, const float *g) {
    float *rows[8], *slots[8 * PF_DYN_MAX_SLOTS];
    assert_int_equal(pf_dyn_update_batch(t, ids, n, step, rows, slots), PF_OK);
    pf_optim_step o = pf_optim_prepare(&spec->optimizer, step);
    for (uint32_t j = 0; j < n; j++)
        pf_optim_step_apply(&o, pf_backend_openblas(), 2, g + 2 * j, rows[j],
                            slots + j * PF_DYN_MAX_SLOTS);
    assert_int_equal(pf_dyn_dense_step(t, &spec->optimizer, &o, pf_backend_openblas(), step),
                     PF_OK);
}

/* A dynamic table's shards: one per ps task, each with its share of max_rows. A sync step
 * sums each id's gradients over the tasks (in task order) and halves them, then updates the
 * rows exactly as one process's table of the same configuration updates the same ids with
 * those gradients; async pushes update at once. Ids without a row read as zeros; new rows
 * come from (seed, id) alone. */
static void test_dynamic_rows(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    ps_shards *s = dynamic_shards("sync", 2, 1, &spec, &pl);
    assert_int_equal(pl.n_shards, 4); /* ids/part_0, ids/part_1, kernel, bias */
    assert_true(pl.shards[0].dynamic && pl.shards[1].dynamic && !pl.shards[2].dynamic);
    assert_int_equal(pl.shards[1].ps_task, 1);
    assert_int_equal(pl.shards[1].max_rows, 50);
    assert_true(ps_shards_is_dynamic(s, 0) && ps_shards_is_table(s, 0));
    ps_shards_destroy(s);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);

    for (int run = 0; run < 4; run++) { /* sync and async, adagrad and adam */
        int sync = run % 2;
        dyn_optimizer = run < 2 ? "adagrad" : "adam";
        s = dynamic_shards(sync ? "sync" : "async", 1, 0, &spec, &pl);
        int n_local = ps_shards_count(s);
        assert_int_equal(n_local, 3);
        pf_dyn_config cfg;
        pf_dyn_table_config(&spec, 0, 100, &cfg);
        pf_dyn_table *ref;
        assert_int_equal(pf_dyn_create(&cfg, &ref), PF_OK);
        static const uint64_t a_ids[2] = {5, 1ull << 40}, b_ids[2] = {7, 1ull << 40};
        static const float ga[4] = {1, 2, 3, 4}, gb[4] = {-1, 0.5f, 8, -8};
        float zeros[64] = {0};
        ps_grad a[3] = {{ga, NULL, 2, a_ids}, {zeros, NULL, 0, NULL}, {zeros, NULL, 0, NULL}};
        ps_grad b[3] = {{gb, NULL, 2, b_ids}, {zeros, NULL, 0, NULL}, {zeros, NULL, 0, NULL}};
        float got[6], want[6];
        static const uint64_t all[3] = {5, 7, 1ull << 40};
        ps_shards_dyn_gather(s, 0, all, 3, got);
        for (int i = 0; i < 6; i++)
            assert_true(got[i] == 0); /* no row yet */
        assert_int_equal(ps_shards_push_grads(s, 0, 1, 1, 0, a),
                         sync ? PS_PUSH_ACCEPTED : PS_PUSH_APPLIED);
        assert_int_equal(ps_shards_push_grads(s, 1, 1, 1, sync ? 0 : 1, b), PS_PUSH_APPLIED);
        if (sync) { /* one step: the merged ids, each id's gradients summed and halved */
            float merged[6] = {ga[0] / 2, ga[1] / 2, gb[0] / 2, gb[1] / 2, 0, 0};
            merged[4] = (ga[2] + gb[2]) * 0.5f;
            merged[5] = (ga[3] + gb[3]) * 0.5f;
            reference_update(ref, &spec, 0, all, 3, merged);
            assert_int_equal(ps_shards_stats(s).version, 1);
        } else {
            reference_update(ref, &spec, 0, a_ids, 2, ga);
            reference_update(ref, &spec, 1, b_ids, 2, gb);
            assert_int_equal(ps_shards_stats(s).version, 2);
        }
        ps_shards_dyn_gather(s, 0, all, 3, got);
        pf_dyn_gather(ref, all, 3, want);
        for (int i = 0; i < 6; i++) {
            assert_true(got[i] == want[i]);
            assert_true(got[i] != 0);
        }
        pf_dyn_stats st = pf_dyn_stats_get(ps_shards_dyn_table(s, 0));
        assert_int_equal(st.rows, 3);
        assert_int_equal(st.admitted, 3);
        size_t elem;
        assert_int_equal(ps_shards_find_nonfinite(s, &elem), -1);
        assert_int_equal(ps_shards_dyn_dropped(s), 0);
        pf_dyn_destroy(ref);
        ps_shards_destroy(s);
        pf_placement_deinit(&pl);
        pf_job_spec_deinit(&spec);
    }
    dyn_optimizer = "adagrad";
}

/* A dynamic row updated to infinity is named by the update (its element among the update's
 * rows); after the table is replaced (a restore) the new table is read whole. */
static void test_dynamic_nonfinite(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_placement pl;
    ps_shards *s = dynamic_shards("async", 1, 0, &spec, &pl);
    float zeros[64] = {0};
    static const uint64_t ids[2] = {3, 9};
    const float g[4] = {0, 0, INFINITY, 0};
    ps_grad p[3] = {{g, NULL, 2, ids}, {zeros, NULL, 0, NULL}, {zeros, NULL, 0, NULL}};
    assert_int_equal(ps_shards_push_grads(s, 0, 1, 1, 0, p), PS_PUSH_APPLIED);
    size_t elem = 0;
    assert_int_equal(ps_shards_find_nonfinite(s, &elem), 0);
    assert_int_equal(elem, 2);
    pf_dyn_config cfg;
    pf_dyn_table_config(&spec, 0, 100, &cfg);
    pf_dyn_table *t;
    assert_int_equal(pf_dyn_create(&cfg, &t), PF_OK);
    const float bad[2] = {1, NAN};
    assert_int_equal(pf_dyn_insert(t, 4, 0, bad, NULL), PF_OK);
    ps_shards_dyn_replace(s, 0, t);
    assert_int_equal(ps_shards_find_nonfinite(s, &elem), 0);
    assert_int_equal(elem, 1);
    ps_shards_destroy(s);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_initial_values),           cmocka_unit_test(test_sync_equivalence),
        cmocka_unit_test(test_backup_workers_and_stale), cmocka_unit_test(test_membership_change),
        cmocka_unit_test(test_async_and_at_most_once),   cmocka_unit_test(test_find_nonfinite),
        cmocka_unit_test(test_rows_without_memory),      cmocka_unit_test(test_find_nonfinite_rows),
        cmocka_unit_test(test_find_nonfinite_merged),    cmocka_unit_test(test_dynamic_rows),
        cmocka_unit_test(test_dynamic_nonfinite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
