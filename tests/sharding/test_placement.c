/* test_placement.c - partitioning and ps placement against TensorFlow's numbers.
 *
 * The acceptance vectors come from TensorFlow's partitioners (MinSizePartitioner,
 * MaxSizePartitioner, FixedShardsPartitioner and TF1's min_max_variable_partitioner),
 * its "div" slicing of partitioned variables, replica_device_setter's round robin and
 * GreedyLoadBalancingStrategy with byte_size_load_fn. Every placement computed here is
 * also checked for the structural invariants (check_invariants): the shards tile the flat
 * parameter vector, and the per-ps totals agree with the shards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/placement.h"
#include "psflow/spec.h"
#include "tests/support/counting_alloc.h"

#define EXAMPLE_MLP PSFLOW_TEST_DATA "/../../examples/fashion-mnist-mlp.json"

/* --- helpers ------------------------------------------------------------------------------ */

static pf_partitioner_spec part_none(void) {
    return (pf_partitioner_spec){.type = PF_PART_NONE};
}

static pf_partitioner_spec part_fixed(int num_shards) {
    return (pf_partitioner_spec){.type = PF_PART_FIXED_SHARDS, .num_shards = num_shards};
}

static pf_partitioner_spec part_min(int64_t min_shard_bytes, int max_shards) {
    return (pf_partitioner_spec){
        .type = PF_PART_MIN_SIZE, .min_shard_bytes = min_shard_bytes, .max_shards = max_shards};
}

static pf_partitioner_spec part_max(int64_t max_shard_bytes, int max_shards) {
    return (pf_partitioner_spec){
        .type = PF_PART_MAX_SIZE, .max_shard_bytes = max_shard_bytes, .max_shards = max_shards};
}

/* A job spec with only what placement reads: the model, replicas.ps and placement. */
static pf_job_spec job(pf_model_spec model, int ps, pf_placement_strategy strategy,
                       pf_partitioner_spec part) {
    pf_job_spec s;
    memset(&s, 0, sizeof s);
    s.replicas.ps = ps;
    s.replicas.worker = 1;
    s.model = model;
    s.placement = strategy;
    s.partitioner = part;
    return s;
}

/* linear: dense_0/kernel [inputs, 1], dense_0/bias [1]. */
static pf_model_spec linear(int inputs) {
    return (pf_model_spec){.type = PF_MODEL_LINEAR, .inputs = inputs, .outputs = 1};
}

/* softmax: dense_0/kernel [inputs, outputs], dense_0/bias [outputs]. */
static pf_model_spec softmax(int inputs, int outputs) {
    return (pf_model_spec){.type = PF_MODEL_SOFTMAX, .inputs = inputs, .outputs = outputs};
}

/* mlp inputs-h0[-h1]-outputs; h1 = 0 for one hidden layer. */
static pf_model_spec mlp(int inputs, int h0, int h1, int outputs) {
    pf_model_spec m = {.type = PF_MODEL_MLP,
                       .inputs = inputs,
                       .outputs = outputs,
                       .n_hidden = h1 ? 2 : 1,
                       .activation = PF_ACT_RELU};
    m.hidden[0] = h0;
    m.hidden[1] = h1;
    return m;
}

/* Checks everything a placement must satisfy whatever the partitioner and strategy. */
static void check_invariants(const pf_job_spec *spec, const pf_placement *p) {
    pf_var_info vars[PF_MAX_VARS];
    int n_vars = pf_model_layout(&spec->model, vars);
    assert_int_equal(p->n_ps, spec->replicas.ps);
    assert_true(p->n_shards >= n_vars);
    assert_non_null(p->shards);
    assert_non_null(p->bytes_per_ps);
    assert_non_null(p->shards_per_ps);

    /* The shards tile the flat vector: consecutive, each variable's shards in order, each
     * a whole number of the variable's rows. */
    size_t offset = 0;
    int k = 0;
    for (int v = 0; v < n_vars; v++) {
        const pf_var_info *var = &vars[v];
        int num = p->shards[k].num_shards;
        assert_int_equal(num,
                         pf_partition_count(&spec->partitioner, var->shape[0], 4 * var->shape[1]));
        int64_t row = 0;
        for (int s = 0; s < num; s++, k++) {
            const pf_shard_info *sh = &p->shards[k];
            assert_true(k < p->n_shards);
            assert_int_equal(sh->var, v);
            assert_int_equal(sh->shard, s);
            assert_int_equal(sh->num_shards, num);
            assert_int_equal(sh->rank, var->rank);
            assert_int_equal(sh->shape[0], pf_partition_rows(var->shape[0], num, s));
            assert_true(sh->shape[0] >= 1);
            assert_int_equal(sh->shape[1], var->shape[1]);
            assert_int_equal(sh->row_offset, row);
            assert_int_equal(sh->offset, offset);
            assert_int_equal(sh->offset, var->offset + (size_t)row * (size_t)var->shape[1]);
            assert_int_equal(sh->count, (size_t)(sh->shape[0] * sh->shape[1]));
            /* "<variable>" when whole, "<variable>/part_<s>" when partitioned. */
            size_t len = strlen(var->name);
            assert_memory_equal(sh->name, var->name, len);
            char suffix[24] = "";
            if (num > 1)
                snprintf(suffix, sizeof suffix, "/part_%d", s);
            assert_string_equal(sh->name + len, suffix);
            assert_true(sh->ps_task >= 0 && sh->ps_task < p->n_ps);
            row += sh->shape[0];
            offset += sh->count;
        }
        assert_int_equal(row, var->shape[0]);
    }
    assert_int_equal(k, p->n_shards);
    assert_int_equal(offset, pf_model_num_params(&spec->model));

    /* Per-ps totals agree with the shards and add up to the whole model. */
    int64_t bytes_total = 0;
    int shards_total = 0;
    for (int t = 0; t < p->n_ps; t++) {
        int64_t bytes = 0;
        int n = 0;
        for (int i = 0; i < p->n_shards; i++) {
            if (p->shards[i].ps_task == t) {
                bytes += 4 * (int64_t)p->shards[i].count;
                n++;
            }
        }
        assert_int_equal(p->bytes_per_ps[t], bytes);
        assert_int_equal(p->shards_per_ps[t], n);
        assert_int_equal(pf_placement_shards_of(p, t, NULL, 0), n);
        bytes_total += p->bytes_per_ps[t];
        shards_total += p->shards_per_ps[t];
    }
    assert_int_equal(bytes_total, 4 * (int64_t)pf_model_num_params(&spec->model));
    assert_int_equal(shards_total, p->n_shards);
}

/* Computes the placement of spec, checks the invariants, and leaves it in *p. */
static void compute(const pf_job_spec *spec, pf_placement *p) {
    assert_int_equal(pf_placement_compute(spec, p), PF_OK);
    check_invariants(spec, p);
}

/* --- partition counts --------------------------------------------------------------------- */

static void test_min_size_partitioner(void **state) {
    (void)state;
    /* MinSizePartitioner(min_shard_bytes=256 << 10, max_shards=2) on [1024, 1024] float32. */
    pf_partitioner_spec p = part_min(256 << 10, 2);
    assert_int_equal(pf_partition_count(&p, 1024, 4 * 1024), 2);
    pf_job_spec spec = job(softmax(1024, 1024), 1, PF_PLACE_ROUND_ROBIN, p);
    pf_placement pl;
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 3); /* kernel in 2, bias (4 KiB) whole */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pl.shards[i].shape[0], 512);
        assert_int_equal(pl.shards[i].shape[1], 1024);
        assert_int_equal(pl.shards[i].row_offset, 512 * i);
        assert_int_equal(pl.shards[i].count, 512 * 1024);
    }
    assert_string_equal(pl.shards[0].name, "dense_0/kernel/part_0");
    assert_string_equal(pl.shards[1].name, "dense_0/kernel/part_1");
    assert_string_equal(pl.shards[2].name, "dense_0/bias");
    assert_int_equal(pf_placement_max_shard_bytes(&pl), 2 << 20);
    pf_placement_deinit(&pl);

    /* TF1 min_max_variable_partitioner (min_slice_size 256 KiB) with max_partitions >= 16:
     * 4 MiB / 256 KiB = 16. */
    p = part_min(256 << 10, 16);
    assert_int_equal(pf_partition_count(&p, 1024, 4 * 1024), 16);
    p = part_min(256 << 10, 1000);
    assert_int_equal(pf_partition_count(&p, 1024, 4 * 1024), 16);
    spec = job(softmax(1024, 1024), 1, PF_PLACE_ROUND_ROBIN, p);
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 17);
    for (int i = 0; i < 16; i++)
        assert_int_equal(pl.shards[i].shape[0], 64);
    assert_string_equal(pl.shards[15].name, "dense_0/kernel/part_15");
    pf_placement_deinit(&pl);

    /* MinSizePartitioner(min_shard_bytes=4, max_shards=2 | 10) on [6, 1] float32. */
    p = part_min(4, 2);
    assert_int_equal(pf_partition_count(&p, 6, 4), 2);
    p = part_min(4, 10);
    assert_int_equal(pf_partition_count(&p, 6, 4), 6);
    spec = job(linear(6), 1, PF_PLACE_ROUND_ROBIN, p);
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 7); /* kernel [6, 1] in 6, bias [1] whole */
    assert_int_equal(pl.shards[0].num_shards, 6);
    assert_int_equal(pl.shards[6].num_shards, 1);
    pf_placement_deinit(&pl);

    /* The default max_shards of 1 never partitions; a bound below 1 acts as 1. */
    p = part_min(1, 1);
    assert_int_equal(pf_partition_count(&p, 1024, 4096), 1);
    p = part_min(1, 0);
    assert_int_equal(pf_partition_count(&p, 1024, 4096), 1);
    /* Shards never outnumber rows; a variable smaller than min_shard_bytes stays whole. */
    p = part_min(1, 100);
    assert_int_equal(pf_partition_count(&p, 3, 4096), 3);
    p = part_min(256 << 10, 100);
    assert_int_equal(pf_partition_count(&p, 10, 4), 1);
    /* ceil: 40 bytes over 12-byte minimums is 4 shards, not 3. */
    p = part_min(12, 100);
    assert_int_equal(pf_partition_count(&p, 10, 4), 4);
    /* A byte count past int64 saturates instead of overflowing. */
    p = part_min(1, 3);
    assert_int_equal(pf_partition_count(&p, INT64_MAX / 2, 8), 3);
}

static void test_max_size_partitioner(void **state) {
    (void)state;
    /* MaxSizePartitioner on [6, 1] float32. */
    pf_partitioner_spec p = part_max(4, 0);
    assert_int_equal(pf_partition_count(&p, 6, 4), 6);
    p = part_max(4, 2);
    assert_int_equal(pf_partition_count(&p, 6, 4), 2);
    p = part_max(1024, 0);
    assert_int_equal(pf_partition_count(&p, 6, 4), 1);
    /* floor(10 / 4) = 2 rows a shard, ceil(6 / 2) = 3 shards. */
    p = part_max(10, 0);
    assert_int_equal(pf_partition_count(&p, 6, 4), 3);
    /* A row larger than max_shard_bytes still makes one row a shard. */
    p = part_max(1, 0);
    assert_int_equal(pf_partition_count(&p, 6, 4096), 6);

    pf_job_spec spec = job(linear(6), 1, PF_PLACE_ROUND_ROBIN, part_max(4, 0));
    pf_placement pl;
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 7);
    for (int i = 0; i < 6; i++)
        assert_int_equal(pl.shards[i].shape[0], 1);
    pf_placement_deinit(&pl);

    spec.partitioner = part_max(4, 2);
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 3);
    assert_int_equal(pl.shards[0].shape[0], 3);
    assert_int_equal(pl.shards[1].shape[0], 3);
    pf_placement_deinit(&pl);

    spec.partitioner = part_max(1024, 0);
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 2);
    assert_string_equal(pl.shards[0].name, "dense_0/kernel");
    pf_placement_deinit(&pl);
}

static void test_fixed_and_none(void **state) {
    (void)state;
    for (int n = 1; n <= 12; n++) {
        pf_partitioner_spec p = part_fixed(n);
        assert_int_equal(pf_partition_count(&p, 6, 4), n < 6 ? n : 6);
        assert_int_equal(pf_partition_count(&p, 1, 4), 1);
    }
    pf_partitioner_spec p = part_fixed(3);
    assert_int_equal(pf_partition_count(&p, 1000, 1 << 20), 3);
    p = part_none();
    assert_int_equal(pf_partition_count(&p, 1 << 20, 1 << 20), 1);

    /* fixed_shards(4) on mlp 5-7-3: kernels [5,7] [7,3] in 4, biases [7] in 4, [3] in 3. */
    pf_job_spec spec = job(mlp(5, 7, 0, 3), 2, PF_PLACE_ROUND_ROBIN, part_fixed(4));
    pf_placement pl;
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 4 + 4 + 4 + 3);
    pf_placement_deinit(&pl);

    spec.partitioner = part_none();
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pl.shards[i].num_shards, 1);
    pf_placement_deinit(&pl);
}

static void test_div_split(void **state) {
    (void)state;
    /* 13 rows over 5 shards: 3, 3, 3, 2, 2 at rows 0, 3, 6, 9, 11. */
    const int64_t want_rows[5] = {3, 3, 3, 2, 2}, want_off[5] = {0, 3, 6, 9, 11};
    for (int i = 0; i < 5; i++)
        assert_int_equal(pf_partition_rows(13, 5, i), want_rows[i]);
    assert_int_equal(pf_partition_rows(12, 4, 3), 3);
    assert_int_equal(pf_partition_rows(7, 1, 0), 7);
    assert_int_equal(pf_partition_rows(13, 5, 5), 0);
    assert_int_equal(pf_partition_rows(13, 0, 0), 0);

    /* The same split in a placement: softmax 13 -> 2, fixed_shards(5). */
    pf_job_spec spec = job(softmax(13, 2), 1, PF_PLACE_ROUND_ROBIN, part_fixed(5));
    pf_placement pl;
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 5 + 2);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(pl.shards[i].shape[0], want_rows[i]);
        assert_int_equal(pl.shards[i].shape[1], 2);
        assert_int_equal(pl.shards[i].row_offset, want_off[i]);
        assert_int_equal(pl.shards[i].offset, (size_t)want_off[i] * 2);
        assert_int_equal(pl.shards[i].count, (size_t)want_rows[i] * 2);
    }
    pf_placement_deinit(&pl);
}

/* Rank-1 variables partition along their only axis with 4-byte rows. */
static void test_bias_partitions(void **state) {
    (void)state;
    /* max_size 8 bytes: the [10] bias has 2 rows a shard -> 5 shards of [2]; the [2, 10]
     * kernel's 40-byte rows exceed it -> 2 shards of one row. */
    pf_job_spec spec = job(softmax(2, 10), 1, PF_PLACE_ROUND_ROBIN, part_max(8, 0));
    pf_placement pl;
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 2 + 5);
    for (int i = 2; i < 7; i++) {
        const pf_shard_info *sh = &pl.shards[i];
        assert_int_equal(sh->rank, 1);
        assert_int_equal(sh->shape[0], 2);
        assert_int_equal(sh->shape[1], 1);
        assert_int_equal(sh->count, 2);
        assert_int_equal(sh->offset, 20 + 2 * (size_t)(i - 2));
    }
    assert_string_equal(pl.shards[2].name, "dense_0/bias/part_0");
    assert_string_equal(pl.shards[6].name, "dense_0/bias/part_4");
    pf_placement_deinit(&pl);

    /* fixed_shards(4) on a [10] bias: 3, 3, 2, 2. */
    spec = job(mlp(3, 4, 0, 10), 1, PF_PLACE_ROUND_ROBIN, part_fixed(4));
    compute(&spec, &pl);
    const pf_shard_info *b1 = &pl.shards[pl.n_shards - 4];
    assert_string_equal(b1[0].name, "dense_1/bias/part_0");
    const int64_t want[4] = {3, 3, 2, 2};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(b1[i].shape[0], want[i]);
        assert_int_equal(b1[i].shape[1], 1);
    }
    pf_placement_deinit(&pl);
}

static void test_names(void **state) {
    (void)state;
    /* min_size(8, 100) on mlp 4-3-1: dense_0/kernel [4,3] 48 B -> 4 shards, dense_0/bias
     * [3] 12 B -> 2, dense_1/kernel [3,1] 12 B -> 2, dense_1/bias [1] -> 1 (unpartitioned,
     * so it keeps its name). */
    pf_job_spec spec = job(mlp(4, 3, 0, 1), 1, PF_PLACE_ROUND_ROBIN, part_min(8, 100));
    pf_placement pl;
    compute(&spec, &pl);
    const char *want[] = {"dense_0/kernel/part_0", "dense_0/kernel/part_1", "dense_0/kernel/part_2",
                          "dense_0/kernel/part_3", "dense_0/bias/part_0",   "dense_0/bias/part_1",
                          "dense_1/kernel/part_0", "dense_1/kernel/part_1", "dense_1/bias"};
    assert_int_equal(pl.n_shards, 9);
    for (int i = 0; i < 9; i++)
        assert_string_equal(pl.shards[i].name, want[i]);
    pf_placement_deinit(&pl);

    /* No partitioner: the variables' own names. */
    spec.partitioner = part_none();
    compute(&spec, &pl);
    assert_string_equal(pl.shards[0].name, "dense_0/kernel");
    assert_string_equal(pl.shards[3].name, "dense_1/bias");
    pf_placement_deinit(&pl);
}

/* --- strategies ----------------------------------------------------------------------------- */

static void test_round_robin(void **state) {
    (void)state;
    pf_placement pl;
    /* 2 ps, mlp 3-4-2 (4 variables): v1 -> 0, v2 -> 1, v3 -> 0, v4 -> 1. */
    pf_job_spec spec = job(mlp(3, 4, 0, 2), 2, PF_PLACE_ROUND_ROBIN, part_none());
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 4);
    assert_int_equal(pl.shards[0].ps_task, 0);
    assert_int_equal(pl.shards[1].ps_task, 1);
    assert_int_equal(pl.shards[2].ps_task, 0);
    assert_int_equal(pl.shards[3].ps_task, 1);
    pf_placement_deinit(&pl);

    /* 3 ps, mlp 3-4-4-2 (6 variables): the 2nd..5th land on 1, 2, 0, 1. */
    spec = job(mlp(3, 4, 4, 2), 3, PF_PLACE_ROUND_ROBIN, part_none());
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 6);
    const int want3[6] = {0, 1, 2, 0, 1, 2};
    for (int i = 0; i < 6; i++)
        assert_int_equal(pl.shards[i].ps_task, want3[i]);
    assert_int_equal(pl.shards_per_ps[0], 2);
    pf_placement_deinit(&pl);

    /* Shards count as separate variables: linear [6,1] in 2 parts + bias, 2 ps. */
    spec = job(linear(6), 2, PF_PLACE_ROUND_ROBIN, part_fixed(2));
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 3);
    assert_string_equal(pl.shards[1].name, "dense_0/kernel/part_1");
    assert_int_equal(pl.shards[0].ps_task, 0);
    assert_int_equal(pl.shards[1].ps_task, 1);
    assert_int_equal(pl.shards[2].ps_task, 0);
    assert_int_equal(pl.shards_per_ps[0], 2);
    assert_int_equal(pl.shards_per_ps[1], 1);
    assert_int_equal(pl.bytes_per_ps[0], 12 + 4);
    assert_int_equal(pl.bytes_per_ps[1], 12);
    pf_placement_deinit(&pl);

    /* Any size: shard k on ps k mod n_ps. */
    spec = job(mlp(50, 30, 20, 10), 7, PF_PLACE_ROUND_ROBIN, part_max(64, 0));
    compute(&spec, &pl);
    for (int k = 0; k < pl.n_shards; k++)
        assert_int_equal(pl.shards[k].ps_task, k % 7);
    pf_placement_deinit(&pl);
}

static void test_greedy_hand_worked(void **state) {
    (void)state;
    pf_placement pl;
    /* mlp 3-2-2: dense_0/kernel 24 B, dense_0/bias 8 B, dense_1/kernel 16 B,
     * dense_1/bias 8 B. Loads (ps0, ps1): kernel0 -> 0 on the 0/0 tie (24, 0);
     * bias0 -> 1 (24, 8); kernel1 -> 1 (24, 24); bias1 -> 0 on the 24/24 tie (32, 24). */
    pf_job_spec spec = job(mlp(3, 2, 0, 2), 2, PF_PLACE_GREEDY, part_none());
    compute(&spec, &pl);
    const int want2[4] = {0, 1, 1, 0};
    for (int i = 0; i < 4; i++)
        assert_int_equal(pl.shards[i].ps_task, want2[i]);
    assert_int_equal(pl.bytes_per_ps[0], 32);
    assert_int_equal(pl.bytes_per_ps[1], 24);
    pf_placement_deinit(&pl);

    /* The same with 3 ps: kernel0 -> 0 (24,0,0); bias0 -> 1 (24,8,0); kernel1 -> 2
     * (24,8,16); bias1 -> 1 (24,16,16). */
    spec.replicas.ps = 3;
    compute(&spec, &pl);
    const int want3[4] = {0, 1, 2, 1};
    for (int i = 0; i < 4; i++)
        assert_int_equal(pl.shards[i].ps_task, want3[i]);
    assert_int_equal(pl.bytes_per_ps[2], 16);
    pf_placement_deinit(&pl);

    /* Ties all the way: fixed_shards(4) on linear [8,1] gives four 8-byte shards, then the
     * 4-byte bias. With 3 ps: 0, 1, 2, then 0 (all at 8), then the bias to 1 (16,8,8). */
    spec = job(linear(8), 3, PF_PLACE_GREEDY, part_fixed(4));
    compute(&spec, &pl);
    const int want_ties[5] = {0, 1, 2, 0, 1};
    for (int i = 0; i < 5; i++)
        assert_int_equal(pl.shards[i].ps_task, want_ties[i]);
    pf_placement_deinit(&pl);
}

/* A straightforward O(n_ps) argmin reference for greedy placement. */
static void check_greedy_reference(const pf_placement *p) {
    int64_t load[64] = {0};
    assert_true(p->n_ps <= 64);
    for (int k = 0; k < p->n_shards; k++) {
        int best = 0;
        for (int t = 1; t < p->n_ps; t++)
            if (load[t] < load[best])
                best = t;
        assert_int_equal(p->shards[k].ps_task, best);
        load[best] += 4 * (int64_t)p->shards[k].count;
    }
}

static void test_greedy_mlp(void **state) {
    (void)state;
    pf_job_spec spec;
    pf_error err;
    assert_int_equal(pf_job_spec_load(EXAMPLE_MLP, &spec, &err), PF_OK);
    assert_int_equal(spec.model.inputs, 784);
    assert_int_equal(spec.model.n_hidden, 2);
    assert_int_equal(spec.replicas.ps, 2);
    spec.placement = PF_PLACE_GREEDY;

    const pf_partitioner_spec parts[] = {part_none(),           part_min(256 << 10, 16),
                                         part_max(64 << 10, 0), part_fixed(3),
                                         part_max(4096, 0),     part_min(1024, 1000)};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        for (int ps = 1; ps <= 5; ps++) {
            spec.partitioner = parts[i];
            spec.replicas.ps = ps;
            pf_placement pl;
            compute(&spec, &pl);
            check_greedy_reference(&pl);
            int64_t lo = INT64_MAX, hi = 0;
            for (int t = 0; t < ps; t++) {
                lo = pl.bytes_per_ps[t] < lo ? pl.bytes_per_ps[t] : lo;
                hi = pl.bytes_per_ps[t] > hi ? pl.bytes_per_ps[t] : hi;
            }
            assert_true(hi - lo <= pf_placement_max_shard_bytes(&pl));
            pf_placement_deinit(&pl);
        }
    }

    /* Unpartitioned with 2 ps, worked by hand: dense_0/kernel (802816 B) alone on ps 0,
     * the other five variables (1024 + 262144 + 1024 + 10240 + 40 B) on ps 1. */
    spec.partitioner = part_none();
    spec.replicas.ps = 2;
    pf_placement pl;
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 6);
    assert_int_equal(pl.bytes_per_ps[0], 784 * 256 * 4);
    assert_int_equal(pl.bytes_per_ps[1], (256 + 256 * 256 + 256 + 256 * 10 + 10) * 4);
    assert_int_equal(pl.shards_per_ps[0], 1);
    assert_int_equal(pl.shards_per_ps[1], 5);
    assert_int_equal(pf_placement_max_shard_bytes(&pl), 784 * 256 * 4);
    pf_placement_deinit(&pl);

    /* min_size(256 KiB, 16): dense_0/kernel is 802816 B -> ceil(3.06) = 4 shards of 196
     * rows (200704 B); dense_1/kernel is exactly 256 KiB -> 1 shard. */
    spec.partitioner = part_min(256 << 10, 16);
    compute(&spec, &pl);
    assert_int_equal(pl.n_shards, 4 + 5);
    assert_int_equal(pl.shards[0].shape[0], 196);
    assert_string_equal(pl.shards[5].name, "dense_1/kernel");
    assert_int_equal(pf_placement_max_shard_bytes(&pl), 256 * 256 * 4);
    pf_placement_deinit(&pl);
    pf_job_spec_deinit(&spec);
}

/* --- queries and lifecycle ------------------------------------------------------------------ */

static void test_shards_of(void **state) {
    (void)state;
    pf_job_spec spec = job(mlp(3, 4, 4, 2), 3, PF_PLACE_ROUND_ROBIN, part_none());
    pf_placement pl;
    compute(&spec, &pl);
    int idx[8];
    for (int t = 0; t < 3; t++) {
        memset(idx, 0xff, sizeof idx);
        assert_int_equal(pf_placement_shards_of(&pl, t, idx, 8), 2);
        assert_int_equal(idx[0], t);
        assert_int_equal(idx[1], t + 3);
        assert_int_equal(idx[2], -1); /* nothing written past the answer */
    }
    /* A short buffer gets the first max entries; the return value is still the total. */
    memset(idx, 0xff, sizeof idx);
    assert_int_equal(pf_placement_shards_of(&pl, 1, idx, 1), 2);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], -1);
    /* Unknown tasks hold nothing. */
    assert_int_equal(pf_placement_shards_of(&pl, 3, idx, 8), 0);
    assert_int_equal(pf_placement_shards_of(&pl, -1, idx, 8), 0);
    pf_placement_deinit(&pl);

    /* More ps than shards: the extra tasks hold nothing and carry zero bytes. */
    spec = job(linear(4), 5, PF_PLACE_GREEDY, part_none());
    compute(&spec, &pl);
    assert_int_equal(pl.n_ps, 5);
    assert_int_equal(pl.shards[0].ps_task, 0);
    assert_int_equal(pl.shards[1].ps_task, 1);
    for (int t = 2; t < 5; t++) {
        assert_int_equal(pf_placement_shards_of(&pl, t, idx, 8), 0);
        assert_int_equal(pl.bytes_per_ps[t], 0);
        assert_int_equal(pl.shards_per_ps[t], 0);
    }
    pf_placement_deinit(&pl);
}

static void test_max_shard_bytes(void **state) {
    (void)state;
    pf_placement pl;
    memset(&pl, 0, sizeof pl);
    assert_int_equal(pf_placement_max_shard_bytes(&pl), 0);

    pf_job_spec spec = job(mlp(5, 7, 0, 3), 2, PF_PLACE_GREEDY, part_none());
    compute(&spec, &pl);
    assert_int_equal(pf_placement_max_shard_bytes(&pl), 5 * 7 * 4);
    pf_placement_deinit(&pl);

    spec.partitioner = part_fixed(2); /* [5,7] -> 3 + 2 rows */
    compute(&spec, &pl);
    assert_int_equal(pf_placement_max_shard_bytes(&pl), 3 * 7 * 4);
    pf_placement_deinit(&pl);
}

/* The largest ps task's bytes over the mean, as GET .../placement reports it. */
static void test_imbalance(void **state) {
    (void)state;
    pf_placement pl;
    memset(&pl, 0, sizeof pl);
    assert_true(pf_placement_imbalance(&pl) == 1.0); /* no ps tasks */
    int64_t bytes[3] = {300, 100, 200};
    pl.n_ps = 3;
    pl.bytes_per_ps = bytes;
    assert_true(pf_placement_imbalance(&pl) == 1.5); /* 300 over a mean of 200 */
    bytes[0] = bytes[1] = bytes[2] = 0;
    assert_true(pf_placement_imbalance(&pl) == 1.0); /* nothing placed */
    pl.n_ps = 1;
    bytes[0] = 7;
    assert_true(pf_placement_imbalance(&pl) == 1.0);
}

static void test_deterministic_and_deinit(void **state) {
    (void)state;
    pf_job_spec spec = job(mlp(30, 20, 10, 4), 3, PF_PLACE_GREEDY, part_max(100, 0));
    pf_placement a, b;
    compute(&spec, &a);
    compute(&spec, &b);
    assert_int_equal(a.n_shards, b.n_shards);
    assert_memory_equal(a.shards, b.shards, sizeof *a.shards * (size_t)a.n_shards);
    assert_memory_equal(a.bytes_per_ps, b.bytes_per_ps, sizeof *a.bytes_per_ps * 3);
    pf_placement_deinit(&a);
    pf_placement_deinit(&b);
    assert_int_equal(a.n_shards, 0);
    assert_null(a.shards);
    assert_null(a.bytes_per_ps);
    assert_null(a.shards_per_ps);
    pf_placement_deinit(&a); /* safe on a zeroed placement */

    /* replicas.ps below 1 cannot be placed on. */
    spec.replicas.ps = 0;
    assert_int_equal(pf_placement_compute(&spec, &a), PF_ERR_INVALID);
    assert_null(a.shards);
}

/* --- failing allocator ---------------------------------------------------------------------- */

static void test_failing_allocator(void **state) {
    (void)state;
    const pf_placement_strategy strategies[] = {PF_PLACE_ROUND_ROBIN, PF_PLACE_GREEDY};
    for (int s = 0; s < 2; s++) {
        pf_job_spec spec = job(mlp(30, 20, 10, 4), 3, strategies[s], part_fixed(3));
        long k = 0;
        for (;; k++) {
            pf_placement pl;
            memset(&pl, 0xab, sizeof pl); /* compute needs no prior init */
            use_counting(k);
            pf_status st = pf_placement_compute(&spec, &pl);
            counting_budget(-1);
            if (st == PF_OK) {
                check_invariants(&spec, &pl);
                pf_placement_deinit(&pl);
                assert_int_equal(alloc_live, 0);
                break;
            }
            assert_int_equal(st, PF_ERR_NOMEM);
            assert_int_equal(alloc_live, 0); /* nothing leaked */
            assert_int_equal(pl.n_shards, 0);
            assert_null(pl.shards);
            assert_null(pl.bytes_per_ps);
            assert_null(pl.shards_per_ps);
            pf_placement_deinit(&pl); /* and nothing to free */
            assert_true(k < 100);
        }
        use_libc();
        /* The three owned arrays (and greedy's heap) are allocated, so k counts them all. */
        assert_true(k >= 3);
        print_message("%s: failed each of the first %ld allocations\n",
                      s ? "greedy" : "round_robin", k);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_min_size_partitioner),
        cmocka_unit_test(test_max_size_partitioner),
        cmocka_unit_test(test_fixed_and_none),
        cmocka_unit_test(test_div_split),
        cmocka_unit_test(test_bias_partitions),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_round_robin),
        cmocka_unit_test(test_greedy_hand_worked),
        cmocka_unit_test(test_greedy_mlp),
        cmocka_unit_test(test_shards_of),
        cmocka_unit_test(test_max_shard_bytes),
        cmocka_unit_test(test_imbalance),
        cmocka_unit_test(test_deterministic_and_deinit),
        cmocka_unit_test(test_failing_allocator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
