/* sparse.c - embedding rows over the data plane: a real ps server and worker link on
 * 127.0.0.1, in row mode (worker/rows.h, api/wire.md ROW_PULL and ROW_PUSH_PULL).
 *
 * One ps task holds one embedding table of VOCAB (1,000,000) rows of D float32 (D = 16 and
 * 64: 64 MB and 256 MB), plus a softmax layer [D, 2] and its bias (async sgd, so every push
 * is applied). A batch names BATCH (10,000) distinct ids drawn uniformly over the table
 * (N_PLANS batches planned before timing, used in turn). The worker link measures
 *   pull   worker_link_pull with the batch's plan: 10,000 rows of D floats come back
 *   push   worker_link_push: 10,000 gradient rows go (a ROW_PUSH_PULL pulling nothing), the
 *          ps applies sgd to those rows
 *   step   push one batch's rows, then pull the next batch's, as a training step does: two
 *          round trips, 20,000 rows moved
 *   fused  the same rows in one round trip (worker_link_push_pull_rows: a ROW_PUSH_PULL that
 *          pushes this batch's gradients and pulls the next batch's rows)
 * The dense layer (2D + 2 floats) goes along with every message, as in training; it is not
 * counted. S = 10,000 x D x 4 bytes is a batch's row payload; a row costs D x 4 bytes.
 *
 * The same four operations then run on a dynamic table (docs/embeddings.md "Dynamic tables")
 * on a second ps of the same process: 1,000,000 rows keyed by 64-bit ids (row i of the fixed
 * table is id i x 0x9E3779B97F4A7C15, a bijection of 64-bit numbers), every one created
 * before timing by pushes of all of them, and batches of the same 10,000 draws, pulled and
 * pushed by id (the ps finds each id's row in its hash). "x fixed" is its MB/s over the fixed
 * table's in the same run.
 *
 * Two baselines, measured in the same run, the three sides taking turns ROUNDS times per D
 * so that a stretch of heavy load on a shared machine falls on all of them:
 *   TCP     bench/tcp_baseline (run as a child) on S: its push (S up, 8 bytes back) against
 *           push, its pull (8 bytes up, S back) against pull, and a TCP push round trip
 *           followed by a pull round trip (the sum of their median times) against step and
 *           fused (its push-pull pattern, S up and S back in one round trip, is printed
 *           beside fused as "TCP pp us").
 *   gather  memcpy of the same rows: the batch's 10,000 rows gathered from a table of the
 *           same size into a contiguous buffer, which is what the ps does for a pull (a push
 *           reads and writes the same scattered rows). It bounds what the ps's memory work
 *           alone can reach.
 *
 * How to read the table: Mrows/s (millions of rows moved per second) and MB/s (their
 * payload, 1 MB = 1e6 bytes) come from the median round of each side; "x TCP" is psflow's
 * MB/s over TCP's (above 1 is faster than plain TCP moving the same payload), "mean x" the
 * same with the mean rounds (total bytes over total time), "x gath" psflow's MB/s over the
 * memcpy gather's. rtt us is the median time of one round (step: both round trips), "TCP us"
 * TCP's. "rounds" counts psflow's rounds over all turns: every one is kept and counted.
 * "apply us" and "copy us" are the ps's own account (its profile, docs/profile.md) of its
 * service thread's time per round (the mean): updating rows with their finite check, and
 * copying rows into replies; the rest of a round is the wire, both sides' framing and waits
 * ("nan" with PSFLOW_PROFILE=off, when the ps counts nothing). On a
 * loopback between two busy cores single rounds swing widely: read the medians, and compare runs.
 * There is no target and nothing is asserted on timings; the program only checks once, before
 * timing, that a push moves the pushed rows by -learning_rate x gradient, that a pull returns them,
 * and that other rows stay unchanged.
 *
 * usage: sparse [--seconds T] [--dim D]   (T: seconds per measurement and D, default 1.5; D:
 * only the table of dimension D, 1 .. 256). The defaults take about 25 s.
 */
#include <libgen.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "psflow/clock.h"
#include "psflow/model.h"
#include "psflow/placement.h"
#include "psflow/rng.h"
#include "psflow/wire.h"
#include "ps/server.h"
#include "worker/link.h"
#include "worker/rows.h"
#include "bench/samples.h"

enum {
    VOCAB = 1000000, /* rows of the table */
    BATCH = 10000,   /* distinct ids of one batch */
    N_PLANS = 16,    /* batches planned before timing, used in turn */
    ROUNDS = 3,      /* turns each side takes per D */
    MAX_ROUNDS = 100000,
    MAX_DIM = 256,
};

#define LEARNING_RATE 0.01f

static void die(const char *what, const char *detail) {
    fprintf(stderr, "sparse: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

/* The median of s's times (sorts them). */
static double median(samples *s) {
    samples_sort(s);
    return samples_quantile(s, 0.5);
}

/* --- one D: the ps, the link, the plans ------------------------------------------------ */

typedef struct bench {
    int dim;
    int dynamic; /* the table is a dynamic one: ids are 64-bit numbers, rows by id */
    pf_job_spec spec;
    pf_placement placement;
    worker_rows rows;
    worker_row_plan plans[N_PLANS];
    int next;                /* the plan the next round uses */
    float *params, *grads;   /* compact vectors (rows.n_params) */
    float *table, *gathered; /* the gather baseline: VOCAB x dim, and BATCH x dim */
    ps_server *server;
    worker_link *link;
    uint64_t version;
    char dir[64];
} bench;

/* The dynamic table's id of row `row` of the fixed one: a bijection of 64-bit numbers. */
static uint64_t dynamic_id(uint32_t row) {
    return (uint64_t)row * 0x9E3779B97F4A7C15ull;
}

/* Writes example i of x naming row `row` (its id slots, then its weight 1). */
static void put_row(const bench *b, float *x, int i, uint32_t row) {
    const pf_model_spec *m = &b->spec.model;
    const int width = pf_model_input_width(m), col = pf_model_id_col(m, 0);
    float *ex = x + (size_t)i * (size_t)width;
    pf_model_pad_example(m, ex);
    if (b->dynamic) {
        pf_model_put_id(ex + col, 0, dynamic_id(row));
        ex[col + PF_DYN_ID_SLOTS] = 1.f;
    } else {
        ex[col] = (float)row;                     /* the id slot */
        ex[col + m->embeddings[0].max_ids] = 1.f; /* its weight */
    }
}

/* Plans batch `k`: BATCH distinct rows, uniform over the table (seen: VOCAB zero bytes, left
 * zeroed), into plan k. */
static void plan_batch(bench *b, int k, pf_rng *rng, float *x, uint8_t *seen) {
    uint32_t *drawn = malloc(BATCH * sizeof *drawn);
    if (!drawn)
        die("out of memory", NULL);
    for (int i = 0; i < BATCH;) {
        uint32_t row = (uint32_t)pf_rng_below(rng, VOCAB);
        if (seen[row])
            continue;
        seen[row] = 1;
        drawn[i] = row;
        put_row(b, x, i, row);
        i++;
    }
    for (int i = 0; i < BATCH; i++)
        seen[drawn[i]] = 0;
    free(drawn);
    worker_rows_plan(&b->rows, &b->placement, x, BATCH, &b->plans[k]);
    if (b->plans[k].n[0] != BATCH)
        die("a plan lost ids", NULL);
}

static void push(bench *b, const worker_row_plan *plan);

/* The dynamic table: a row for every one of its VOCAB ids, pushed BATCH at a time through
 * plans[0] (planned again for timing afterwards). */
static void fill_dynamic(bench *b, float *x) {
    for (uint32_t first = 0; first < VOCAB; first += BATCH) {
        for (int i = 0; i < BATCH; i++)
            put_row(b, x, i, first + (uint32_t)i);
        worker_rows_plan(&b->rows, &b->placement, x, BATCH, &b->plans[0]);
        push(b, &b->plans[0]);
    }
    ps_server_table_stats st;
    if (ps_server_tables(b->server, &st, 1) != 1 || st.st.rows != VOCAB)
        die("the dynamic table does not hold a row for every id", NULL);
}

static void bench_start(bench *b, int dim, int dynamic) {
    memset(b, 0, sizeof *b);
    b->dim = dim;
    b->dynamic = dynamic;
    char json[1024], table[128];
    if (dynamic)
        snprintf(table, sizeof table, "\"kind\": \"dynamic\", \"max_rows\": %d", 2 * VOCAB);
    else
        snprintf(table, sizeof table, "\"vocab\": %d", VOCAB);
    snprintf(json, sizeof json,
             "{\"name\": \"bench-sparse\", \"replicas\": {\"ps\": 1, \"worker\": 1},"
             " \"model\": {\"type\": \"softmax\", \"outputs\": 2, \"embeddings\":"
             " [{\"name\": \"ids\", %s, \"dim\": %d}]},"
             " \"data\": {\"format\": \"synthetic_ctr\"},"
             " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": %g},"
             " \"training\": {\"mode\": \"async\", \"batch_size\": %d, \"max_steps\": 100000000}}",
             table, dim, (double)LEARNING_RATE, BATCH);
    pf_error err;
    snprintf(b->dir, sizeof b->dir, "/tmp/psflow-bench-sparse-XXXXXX");
    if (pf_job_spec_parse(json, strlen(json), &b->spec, &err) != PF_OK)
        die("job spec", err.message);
    if (!mkdtemp(b->dir))
        die("cannot create a directory", b->dir);
    if (pf_placement_compute(&b->spec, &b->placement) != PF_OK ||
        worker_rows_init(&b->rows, &b->spec.model, BATCH) != PF_OK)
        die("cannot plan the rows", NULL);
    for (int k = 0; k < N_PLANS; k++)
        if (worker_row_plan_init(&b->plans[k], &b->rows, &b->placement) != PF_OK)
            die("out of memory", NULL);

    ps_server_options so = {.spec = &b->spec,
                            .ps_task = 0,
                            .listen_host = "127.0.0.1",
                            .port = 0,
                            .checkpoint_dir = b->dir,
                            .incarnation = 1};
    if (ps_server_start(&so, &b->server, &err) != PF_OK)
        die("ps", err.message);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ps_server_port(b->server));
    const char *addrs[] = {addr};
    worker_link_options co = {.spec = &b->spec,
                              .ps_addrs = addrs,
                              .task = 0,
                              .role = PF_WIRE_ROLE_CHIEF,
                              .incarnation = 1,
                              .retry_seconds = 10,
                              .rows = &b->rows};
    if (worker_link_create(&co, &b->link, &err) != PF_OK)
        die("worker link", err.message);

    size_t n = b->rows.n_params, w = (size_t)pf_model_input_width(&b->spec.model);
    b->params = calloc(n, sizeof(float));
    b->grads = malloc(n * sizeof(float));
    b->table = malloc((size_t)VOCAB * (size_t)dim * sizeof(float));
    b->gathered = malloc((size_t)BATCH * (size_t)dim * sizeof(float));
    float *x = malloc((size_t)BATCH * w * sizeof(float));
    uint8_t *seen = calloc(VOCAB, 1);
    if (!b->params || !b->grads || !b->table || !b->gathered || !x || !seen)
        die("out of memory", NULL);
    pf_rng rng;
    pf_rng_init(&rng, 20261127, (uint64_t)dim);
    for (size_t i = 0; i < n; i++)
        b->grads[i] = (float)(1e-3 * pf_rng_normal(&rng));
    for (size_t i = 0; i < (size_t)VOCAB * (size_t)dim; i++) /* every page touched */
        b->table[i] = (float)i;
    if (dynamic)
        fill_dynamic(b, x);
    for (int k = 0; k < N_PLANS; k++)
        plan_batch(b, k, &rng, x, seen);
    free(x);
    free(seen);
}

static void bench_stop(bench *b) {
    worker_link_destroy(b->link);
    ps_server_stop(b->server);
    ps_server_destroy(b->server);
    for (int k = 0; k < N_PLANS; k++)
        worker_row_plan_deinit(&b->plans[k]);
    pf_placement_deinit(&b->placement);
    pf_job_spec_deinit(&b->spec);
    free(b->params);
    free(b->grads);
    free(b->table);
    free(b->gathered);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", b->dir);
    if (system(cmd) != 0)
        die("cannot remove", b->dir);
}

/* --- the operations -------------------------------------------------------------------- */

static void pull(bench *b, const worker_row_plan *plan) {
    pf_error err;
    worker_link_set_plan(b->link, plan);
    if (worker_link_pull(b->link, NULL, b->params, &b->version, &err) != PF_OK)
        die("pull", err.message);
}

static void push(bench *b, const worker_row_plan *plan) {
    pf_error err;
    uint32_t result;
    worker_link_set_plan(b->link, plan);
    if (worker_link_push(b->link, b->grads, &b->version, &b->version, &result, &err) != PF_OK)
        die("push", err.message);
    if (result != PF_WIRE_PUSH_APPLIED)
        die("push", "not applied");
}

static volatile float sink; /* keeps the gathered rows alive */

/* The gather baseline: plan's rows of b->table into b->gathered, one memcpy each. */
static void gather(bench *b, const worker_row_plan *plan) {
    const size_t row = (size_t)b->dim;
    const uint32_t *ids = plan->ids[0];
    for (uint32_t j = 0; j < plan->n[0]; j++)
        memcpy(b->gathered + j * row, b->table + ids[j] * row, row * sizeof(float));
    sink = b->gathered[(plan->n[0] - 1) * row];
}

/* One fused step: push plan's rows and pull next's in one round trip. */
static void fused(bench *b, const worker_row_plan *plan, const worker_row_plan *next) {
    pf_error err;
    uint32_t result;
    worker_link_set_plan(b->link, plan);
    if (worker_link_push_pull_rows(b->link, b->grads, &b->version, next, NULL, b->params,
                                   &b->version, &result, &err) != PF_OK)
        die("fused step", err.message);
    if (result != PF_WIRE_PUSH_APPLIED)
        die("fused step", "not applied");
}

enum { OP_PULL, OP_PUSH, OP_STEP, OP_FUSED, OP_GATHER, N_OPS };

static const char *const op_names[N_OPS] = {"pull", "push", "step", "fused", "gather"};

/* One round of op on the next plan. */
static void one_round(bench *b, int op) {
    const worker_row_plan *plan = &b->plans[b->next];
    b->next = (b->next + 1) % N_PLANS;
    switch (op) {
    case OP_PULL:
        pull(b, plan);
        break;
    case OP_PUSH:
        push(b, plan);
        break;
    case OP_STEP: /* this batch's gradients go, the next batch's rows come */
        push(b, plan);
        pull(b, &b->plans[b->next]);
        break;
    case OP_FUSED: /* the same in one round trip */
        fused(b, plan, &b->plans[b->next]);
        break;
    default:
        gather(b, plan);
    }
}

/* The ps's apply and copy seconds so far (its profile: service thread time); NAN when it
 * counts nothing (PSFLOW_PROFILE=off). */
static void ps_time(bench *b, double *apply, double *copy) {
    double sec[PF_PHASE_COUNT];
    uint64_t count;
    double wall;
    int off = pf_profile_read(ps_server_profile(b->server), sec, &count, &wall) != 0;
    *apply = off ? NAN : sec[PF_PHASE_APPLY];
    *copy = off ? NAN : sec[PF_PHASE_COPY];
}

/* Times op for about `seconds` (at least 3 rounds) into out, adding the ps's apply and copy
 * seconds to ps[0] and ps[1]. */
static void time_rounds(bench *b, int op, double seconds, samples *out, double *ps) {
    double apply0, copy0, apply1, copy1;
    ps_time(b, &apply0, &copy0);
    double start = pf_clock_now();
    int rounds = 0;
    while (rounds < 3 || (pf_clock_now() - start < seconds && rounds < MAX_ROUNDS)) {
        double t0 = pf_clock_now();
        one_round(b, op);
        samples_add(out, pf_clock_now() - t0);
        rounds++;
    }
    ps_time(b, &apply1, &copy1);
    ps[0] += apply1 - apply0;
    ps[1] += copy1 - copy0;
}

/* The id of plan's j-th row: its row of the fixed table, its 64-bit id of the dynamic one. */
static uint64_t id_at(const worker_row_plan *plan, uint32_t j) {
    return plan->x ? plan->dyn.ids[0][j] : plan->ids[0][j];
}

/* Whether id is one of plan's rows (its ids are ascending: one ps owns them all). */
static int names(const worker_row_plan *plan, uint64_t id) {
    uint32_t lo = 0, hi = plan->n[0];
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (id_at(plan, mid) < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < plan->n[0] && id_at(plan, lo) == id;
}

/* Before timing: a push of plan 0 moves its rows by -learning_rate x gradient and a pull
 * returns them, and the rows of plan 1 that plan 0 does not name stay as they were. */
static void check(bench *b) {
    const worker_row_plan *p0 = &b->plans[0], *p1 = &b->plans[1];
    const size_t dim = (size_t)b->dim, n = (size_t)BATCH * dim, off = b->rows.table_off[0];
    const float *got = b->params + off;
    float *before0 = malloc(n * sizeof(float)), *before1 = malloc(n * sizeof(float));
    if (!before0 || !before1)
        die("out of memory", NULL);
    pull(b, p1);
    memcpy(before1, got, n * sizeof(float));
    pull(b, p0);
    memcpy(before0, got, n * sizeof(float));
    uint64_t applied0, applied1, v;
    ps_server_stats(b->server, &v, &applied0, &v);
    push(b, p0);
    ps_server_stats(b->server, &v, &applied1, &v);
    if (applied1 != applied0 + 1)
        die("check", "the ps did not count the push");
    pull(b, p0);
    for (size_t i = 0; i < n; i++) {
        float want = before0[i] - LEARNING_RATE * b->grads[off + i];
        if (fabsf(got[i] - want) > 1e-6f * (1.f + fabsf(want)))
            die("check", "a pushed row did not change by -learning_rate x gradient");
    }
    pull(b, p1);
    for (uint32_t j = 0; j < p1->n[0]; j++)
        if (!names(p0, id_at(p1, j)) &&
            memcmp(got + j * dim, before1 + j * dim, dim * sizeof(float)) != 0)
            die("check", "a row the push did not name changed");
    /* a fused step applies plan 0's push and brings plan 1's rows as a pull after it would */
    pull(b, p0);
    memcpy(before0, got, n * sizeof(float));
    fused(b, p0, p1);
    memcpy(before1, got, n * sizeof(float)); /* plan 1's rows as the fused step pulled them */
    pull(b, p1);
    if (memcmp(before1, got, n * sizeof(float)) != 0)
        die("check", "a fused step's rows differ from those of a pull after it");
    pull(b, p0);
    for (size_t i = 0; i < n; i++) {
        float want = before0[i] - LEARNING_RATE * b->grads[off + i];
        if (fabsf(got[i] - want) > 1e-6f * (1.f + fabsf(want)))
            die("check",
                "a fused step's push did not change its rows by -learning_rate x gradient");
    }
    free(before0);
    free(before1);
    b->next = 2;
}

/* --- main ------------------------------------------------------------------------------ */

/* The figures of one table's operations (n_ops of them; the fixed table's include gather),
 * each against TCP's, and against `fixed` (the fixed table's medians) when given. */
static void print_ops(int dim, int dynamic, int n_ops, samples *mine, double ps[][2],
                      const double *tcp_t, const double *tcp_m, double tcp_pp, double gather_mb,
                      const double *fixed) {
    for (int op = 0; op < n_ops; op++) {
        double rows = op == OP_STEP || op == OP_FUSED ? 2 * BATCH : BATCH; /* moved per round */
        double t = median(&mine[op]), mb = rows * dim * 4 / t / 1e6;
        char name[16];
        snprintf(name, sizeof name, "%s%s", dynamic ? "d-" : "", op_names[op]);
        printf("%-3d %-8s %8.2f %8.0f %8.0f", dim, name, rows / t / 1e6, mb, t * 1e6);
        if (op == OP_GATHER) {
            printf(" | %8s %7s %6s %6s | %9.0f %6.2f %6zu |\n", "", "", "", "", gather_mb, 1.0,
                   mine[op].n);
            continue;
        }
        double tcp_mb = rows * dim * 4 / tcp_t[op] / 1e6, n = (double)mine[op].n;
        printf(" | %8.0f %7.0f %6.2f %6.2f | %9.0f %6.2f %6zu | %8.0f %7.0f", tcp_mb,
               tcp_t[op] * 1e6, mb / tcp_mb, tcp_m[op] / samples_mean(&mine[op]), gather_mb,
               mb / gather_mb, mine[op].n, ps[op][0] / n * 1e6, ps[op][1] / n * 1e6);
        if (op == OP_FUSED)
            printf(" | %9.0f %6.2f", tcp_pp * 1e6, tcp_pp / t);
        else if (fixed)
            printf(" | %9s %6s", "", "");
        if (fixed)
            printf(" | %7.2f", fixed[op] / t);
        printf("\n");
    }
}

static void run_dim(const char *self, int dim, double seconds) {
    bench b, d; /* the fixed table, the dynamic one */
    double t0 = pf_clock_now();
    bench_start(&b, dim, 0);
    check(&b);
    bench_start(&d, dim, 1);
    check(&d);
    const size_t S = (size_t)BATCH * (size_t)dim * sizeof(float);
    printf("D=%d: table %d x %d (%.0f MB), and a dynamic table of as many ids; batch %d ids, S "
           "= %zu bytes; ready in %.1f s\n",
           dim, VOCAB, dim, (double)VOCAB * dim * 4 / 1e6, BATCH, S, pf_clock_now() - t0);
    fflush(stdout);
    samples mine[N_OPS] = {{0}}, dyn[OP_GATHER] = {{0}}, tcp[3] = {{0}};
    double ps[N_OPS][2] = {{0}}, dps[OP_GATHER][2] = {{0}}; /* ps apply and copy seconds */
    for (int r = 0; r < ROUNDS; r++) {
        bench_tcp_baseline(self, seconds / ROUNDS, S, tcp);
        for (int op = 0; op < N_OPS; op++) {
            time_rounds(&b, op, seconds / ROUNDS, &mine[op], ps[op]);
            if (op < OP_GATHER) /* the dynamic table right after the fixed one */
                time_rounds(&d, op, seconds / ROUNDS, &dyn[op], dps[op]);
        }
    }
    /* TCP's round trips for each psflow operation: step and fused are a push then a pull */
    double tcp_t[OP_FUSED + 1], tcp_m[OP_FUSED + 1], fixed[OP_GATHER];
    tcp_t[OP_PULL] = median(&tcp[TCP_PULL]);
    tcp_t[OP_PUSH] = median(&tcp[TCP_PUSH]);
    tcp_t[OP_STEP] = tcp_t[OP_FUSED] = tcp_t[OP_PULL] + tcp_t[OP_PUSH];
    tcp_m[OP_PULL] = samples_mean(&tcp[TCP_PULL]);
    tcp_m[OP_PUSH] = samples_mean(&tcp[TCP_PUSH]);
    tcp_m[OP_STEP] = tcp_m[OP_FUSED] = tcp_m[OP_PULL] + tcp_m[OP_PUSH];
    const double tcp_pp = median(&tcp[TCP_PUSH_PULL]);
    const double gather_mb = (double)S / median(&mine[OP_GATHER]) / 1e6;
    for (int op = 0; op < OP_GATHER; op++)
        fixed[op] = median(&mine[op]);
    print_ops(dim, 0, N_OPS, mine, ps, tcp_t, tcp_m, tcp_pp, gather_mb, NULL);
    print_ops(dim, 1, OP_GATHER, dyn, dps, tcp_t, tcp_m, tcp_pp, gather_mb, fixed);
    fflush(stdout);
    for (int op = 0; op < N_OPS; op++)
        free(mine[op].t);
    for (int op = 0; op < OP_GATHER; op++)
        free(dyn[op].t);
    for (int p = 0; p < 3; p++)
        free(tcp[p].t);
    bench_stop(&d);
    bench_stop(&b);
}

static int usage(void) {
    fprintf(stderr, "usage: sparse [--seconds T] [--dim D]   (D: 1 .. %d)\n", MAX_DIM);
    return 64;
}

int main(int argc, char **argv) {
    double seconds = 1.5;
    int only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc && (seconds = atof(argv[++i])) > 0)
            continue;
        else if (!strcmp(argv[i], "--dim") && i + 1 < argc && (only = atoi(argv[++i])) >= 1 &&
                 only <= MAX_DIM)
            continue;
        else
            return usage();
    }
    printf("sparse: 1 ps + 1 worker on 127.0.0.1, row mode; a round moves the rows of %d distinct "
           "ids (step: pushes them, then pulls the next batch's; fused: both in one round "
           "trip)\n",
           BATCH);
    printf("rows/s, MB/s (row payload, 1 MB = 1e6 bytes) and rtt at each side's median round; TCP "
           "= plain socket (step: a push then a pull round trip), gath = memcpy gather of the "
           "same rows; all in this run\n");
    printf("%-3s %-8s %8s %8s %8s | %8s %7s %6s %6s | %9s %6s %6s | %8s %7s | %9s %6s | %7s\n", "D",
           "op", "Mrows/s", "MB/s", "rtt us", "TCP MB/s", "TCP us", "x TCP", "mean x", "gath MB/s",
           "x gath", "rounds", "apply us", "copy us", "TCP pp us", "x pp", "x fixed");
    const int dims[] = {16, 64};
    for (int d = 0; d < 2; d++)
        if (!only || only == dims[d])
            run_dim(argv[0], dims[d], seconds);
    if (only && only != 16 && only != 64)
        run_dim(argv[0], only, seconds);
    printf("x TCP, x gath: psflow's MB/s over the baseline's (above 1: faster); mean x: x TCP of "
           "the mean rounds; apply us, copy us: the ps's service thread updating values (and "
           "checking them) and copying them into replies, per round (mean); TCP pp us, x pp: "
           "TCP's one-round-trip push-pull of S each way, and its time over fused's; d-: the "
           "dynamic table, x fixed: its rows/s over the fixed table's\n");
    return 0;
}
