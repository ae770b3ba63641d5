/* placement.c - which ps task holds which part of which variable (see placement.h).
 *
 * DESIGN: three passes over the model's variables in pf_model_layout order. The first asks
 * the partitioner how many shards each variable gets and sums them, so that everything is
 * allocated up front (three arrays; any failure frees all and leaves *out zeroed). The
 * second cuts each variable into "div" row ranges, which are contiguous ranges of the flat
 * parameter vector because variables are stored row-major. The third walks the shards in
 * creation order and hands each to a ps task: round_robin by counter, greedy by taking the
 * least-loaded task from a binary min-heap ordered by (bytes, task index), which is
 * np.argmin's answer (lowest index on ties) in O(log n_ps) per shard instead of O(n_ps).
 *
 * The partition arithmetic is integer arithmetic that gives the same numbers as
 * TensorFlow's float expressions (ceil(bytes / min_slice_size), floor(max_shard_bytes /
 * bytes_per_slice), ceil(rows / slices_per_shard)) for every size a valid spec can name,
 * and it saturates instead of overflowing on arbitrary arguments.
 */
#include "psflow/placement.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "psflow/mem.h"

/* Parameters are float32. */
#define ELEM_BYTES ((int64_t)sizeof(float))

/* "<variable>/part_<i>": the variable's name, "/part_", and at most 10 digits of an int. */
_Static_assert(PF_VAR_NAME_MAX - 1 + 6 + 10 < PF_SHARD_NAME_MAX,
               "shard names must fit PF_SHARD_NAME_MAX");

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

/* ceil(a / b) for a >= 0, b >= 1, without the overflow of (a + b - 1) / b. */
static int64_t ceil_div(int64_t a, int64_t b) {
    return a / b + (a % b != 0);
}

int pf_partition_count(const pf_partitioner_spec *p, int64_t rows, int64_t row_bytes) {
    if (rows < 1)
        return 1;
    row_bytes = max64(row_bytes, 1);
    int64_t n = 1;
    switch (p->type) {
    case PF_PART_NONE:
        n = 1;
        break;
    case PF_PART_FIXED_SHARDS:
        /* FixedShardsPartitioner: min(num_shards, shape[axis]). */
        n = min64(p->num_shards, rows);
        break;
    case PF_PART_MIN_SIZE: {
        /* min_max_variable_partitioner: max(1, min(shape[axis], max_partitions,
         * ceil(total_bytes / min_slice_size))). */
        int64_t bytes = rows > INT64_MAX / row_bytes ? INT64_MAX : rows * row_bytes;
        int64_t wanted = ceil_div(bytes, max64(p->min_shard_bytes, 1));
        n = min64(min64(rows, p->max_shards), wanted);
        break;
    }
    case PF_PART_MAX_SIZE: {
        /* variable_axis_size_partitioner: slices_per_shard = max(1, floor(max_shard_bytes /
         * bytes_per_slice)); shards = ceil(shape[axis] / slices_per_shard), capped at
         * max_shards when that is set. */
        int64_t per_shard = max64(max64(p->max_shard_bytes, 0) / row_bytes, 1);
        n = ceil_div(rows, per_shard);
        if (p->max_shards > 0)
            n = min64(n, p->max_shards);
        break;
    }
    }
    return (int)min64(max64(n, 1), INT_MAX);
}

int64_t pf_partition_rows(int64_t rows, int n, int i) {
    if (rows < 0 || n < 1 || i < 0 || i >= n)
        return 0;
    return rows / n + (i < rows % n);
}

/* Heap order for greedy placement: fewer bytes first, then the lower task index. */
static int lighter(const int64_t *bytes, int a, int b) {
    return bytes[a] < bytes[b] || (bytes[a] == bytes[b] && a < b);
}

/* Restores the heap below position i after heap[i]'s load grew. */
static void sift_down(int *heap, int n, const int64_t *bytes, int i) {
    for (;;) {
        int best = i, l = 2 * i + 1, r = 2 * i + 2;
        if (l < n && lighter(bytes, heap[l], heap[best]))
            best = l;
        if (r < n && lighter(bytes, heap[r], heap[best]))
            best = r;
        if (best == i)
            return;
        int t = heap[i];
        heap[i] = heap[best];
        heap[best] = t;
        i = best;
    }
}

/* Cuts variable v into its shards, written to shards[0..num_shards). */
static void cut_variable(const pf_var_info *v, int var, int num_shards, pf_shard_info *shards) {
    int64_t row = 0;
    for (int s = 0; s < num_shards; s++) {
        pf_shard_info *sh = &shards[s];
        memset(sh, 0, sizeof *sh);
        /* The precision bounds the copy by the source's size (the static assert above). */
        if (num_shards > 1)
            snprintf(sh->name, sizeof sh->name, "%.*s/part_%d", PF_VAR_NAME_MAX - 1, v->name, s);
        else
            snprintf(sh->name, sizeof sh->name, "%.*s", PF_VAR_NAME_MAX - 1, v->name);
        sh->var = var;
        sh->shard = s;
        sh->num_shards = num_shards;
        sh->rank = v->rank;
        sh->shape[0] = pf_partition_rows(v->shape[0], num_shards, s);
        sh->shape[1] = v->shape[1];
        sh->row_offset = row;
        sh->offset = v->offset + (size_t)row * (size_t)v->shape[1];
        sh->count = (size_t)sh->shape[0] * (size_t)v->shape[1];
        sh->ps_task = -1;
        row += sh->shape[0];
    }
}

pf_status pf_placement_compute(const pf_job_spec *spec, pf_placement *out) {
    memset(out, 0, sizeof *out);
    int n_ps = spec->replicas.ps;
    if (n_ps < 1)
        return PF_ERR_INVALID;

    pf_var_info vars[PF_MAX_VARS];
    int n_vars = pf_model_layout(&spec->model, vars);
    int counts[PF_MAX_VARS];
    int64_t total = 0;
    for (int v = 0; v < n_vars; v++) {
        bool dynamic =
            v < spec->model.n_embeddings && spec->model.embeddings[v].kind == PF_TABLE_DYNAMIC;
        if ((vars[v].shape[0] < 1 && !dynamic) || vars[v].shape[1] < 1)
            return PF_ERR_INVALID;
        counts[v] = dynamic ? n_ps
                            : pf_partition_count(&spec->partitioner, vars[v].shape[0],
                                                 ELEM_BYTES * vars[v].shape[1]);
        total += counts[v];
    }
    if (total > INT_MAX)
        return PF_ERR_NOMEM; /* more shards than an int can count */

    pf_placement p = {.n_ps = n_ps, .n_shards = (int)total};
    p.shards = pf_mallocarray((size_t)total, sizeof *p.shards);
    p.bytes_per_ps = pf_calloc((size_t)n_ps, sizeof *p.bytes_per_ps);
    p.shards_per_ps = pf_calloc((size_t)n_ps, sizeof *p.shards_per_ps);
    int *heap =
        spec->placement == PF_PLACE_GREEDY ? pf_mallocarray((size_t)n_ps, sizeof *heap) : NULL;
    if (!p.shards || !p.bytes_per_ps || !p.shards_per_ps ||
        (spec->placement == PF_PLACE_GREEDY && !heap)) {
        pf_free(heap);
        pf_placement_deinit(&p);
        return PF_ERR_NOMEM;
    }

    int k = 0;
    for (int v = 0; v < n_vars; v++) {
        cut_variable(&vars[v], v, counts[v], &p.shards[k]);
        for (int i = 0; v < spec->model.n_embeddings &&
                        spec->model.embeddings[v].kind == PF_TABLE_DYNAMIC && i < counts[v];
             i++) {
            p.shards[k + i].dynamic = 1;
            p.shards[k + i].max_rows = (spec->model.embeddings[v].max_rows + n_ps - 1) / n_ps;
            p.shards[k + i].ps_task = i; /* fixed: the owner hash names the task */
        }
        k += counts[v];
    }

    /* Every load is 0 at first, so tasks in index order already form a heap. */
    if (heap)
        for (int t = 0; t < n_ps; t++)
            heap[t] = t;
    for (k = 0; k < p.n_shards; k++) {
        int64_t bytes = ELEM_BYTES * (int64_t)p.shards[k].count;
        int task;
        if (p.shards[k].dynamic) {
            p.shards_per_ps[p.shards[k].ps_task]++;
            continue;
        }
        if (heap) {
            task = heap[0];
            p.bytes_per_ps[task] += bytes;
            sift_down(heap, n_ps, p.bytes_per_ps, 0);
        } else {
            task = k % n_ps;
            p.bytes_per_ps[task] += bytes;
        }
        p.shards[k].ps_task = task;
        p.shards_per_ps[task]++;
    }
    pf_free(heap);
    *out = p;
    return PF_OK;
}

void pf_placement_deinit(pf_placement *p) {
    pf_free(p->shards);
    pf_free(p->bytes_per_ps);
    pf_free(p->shards_per_ps);
    memset(p, 0, sizeof *p);
}

int pf_placement_shards_of(const pf_placement *p, int ps, int *out, int max) {
    int n = 0;
    for (int i = 0; i < p->n_shards; i++) {
        if (p->shards[i].ps_task != ps)
            continue;
        if (n < max)
            out[n] = i;
        n++;
    }
    return n;
}

int64_t pf_placement_max_shard_bytes(const pf_placement *p) {
    int64_t best = 0;
    for (int i = 0; i < p->n_shards; i++)
        best = max64(best, ELEM_BYTES * (int64_t)p->shards[i].count);
    return best;
}

struct json_t *pf_placement_shards_json(const pf_placement *p, int n_tables) {
    json_t *out = json_array();
    for (int i = 0; out && i < p->n_shards; i++) {
        const pf_shard_info *sh = &p->shards[i];
        char variable[PF_SHARD_NAME_MAX];
        snprintf(variable, sizeof variable, "%s", sh->name);
        char *part = sh->num_shards > 1 ? strstr(variable, "/part_") : NULL;
        if (part)
            *part = '\0'; /* the shard's variable: "dense_0/kernel/part_1" -> "dense_0/kernel" */
        json_t *shape = json_array();
        for (int d = 0; shape && d < sh->rank; d++)
            json_array_append_new(shape, json_integer(sh->shape[d]));
        json_t *item =
            json_pack("{s:s, s:s, s:s, s:o, s:i, s:I, s:I, s:i, s:I}", "variable", variable, "name",
                      sh->name, "kind",
                      sh->dynamic          ? "dynamic"
                      : sh->var < n_tables ? "table"
                                           : "dense",
                      "shape", shape, "shard", sh->shard, "offset", (json_int_t)sh->row_offset,
                      "rows", (json_int_t)sh->shape[0], "ps_task", sh->ps_task, "bytes",
                      (json_int_t)(ELEM_BYTES * (int64_t)sh->count));
        if (item && sh->dynamic &&
            json_object_set_new(item, "max_rows", json_integer(sh->max_rows)) != 0) {
            json_decref(item);
            item = NULL;
        }
        if (!item || json_array_append_new(out, item) != 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

double pf_placement_imbalance(const pf_placement *p) {
    int64_t total = 0, largest = 0;
    for (int t = 0; t < p->n_ps; t++) {
        total += p->bytes_per_ps[t];
        largest = max64(largest, p->bytes_per_ps[t]);
    }
    double mean = p->n_ps > 0 ? (double)total / p->n_ps : 0;
    return mean > 0 ? (double)largest / mean : 1.0;
}
