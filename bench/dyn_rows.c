/* dyn_rows.c - rows of an embedding table keyed by 64-bit ids (psflow/dyn_table.h) against
 * rows of a fixed [rows, dim] matrix, in the same run: what a ps's gather (a pull) and its
 * sgd update (a push) cost per row when an id first has to be found in the hash.
 *
 * Both tables hold --rows rows of D floats; the dynamic one's ids are drawn from a 2^40
 * space. Each round draws a batch of --batch distinct rows and, taking turns, gathers them
 * from each table into one contiguous buffer (the fixed table by row index, the dynamic one
 * by id, pf_dyn_gather) and applies an sgd update to them (row -= 0.01 * gradient; the
 * dynamic rows found CHUNK ids at a time by pf_dyn_update_batch). Rates are of each
 * side's median round; a ratio is dynamic over fixed, so 1 is as fast. No targets: a whole
 * pull or push also encodes, sends and checks what it moves (bench/sparse).
 *
 *   build/bench/dyn_rows [--rows N] [--batch N] [--rounds N] [--dim D]...
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/clock.h"
#include "psflow/dyn_table.h"
#include "psflow/rng.h"

#define CHUNK 256 /* ids an update batch names */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* `batch` distinct row indices below `rows` (a partial Fisher-Yates over perm). */
static void draw(pf_rng *rng, uint32_t *perm, int64_t rows, int batch, uint32_t *out) {
    for (int i = 0; i < batch; i++) {
        uint64_t j = (uint64_t)i + pf_rng_below(rng, (uint64_t)(rows - i));
        uint32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
        out[i] = perm[i];
    }
}

static int run(int64_t rows, int batch, int rounds, int dim) {
    size_t d = (size_t)dim;
    float *fixed = malloc((size_t)rows * d * sizeof *fixed);
    float *out = malloc((size_t)batch * d * sizeof *out);
    float *grad = malloc((size_t)batch * d * sizeof *grad);
    uint64_t *ids = malloc((size_t)rows * sizeof *ids),
             *want = malloc((size_t)batch * sizeof *want);
    float *rows_of[CHUNK];
    uint32_t *perm = malloc((size_t)rows * sizeof *perm),
             *pick = malloc((size_t)batch * sizeof *pick);
    double *t_fg = malloc((size_t)rounds * sizeof(double)),
           *t_dg = malloc((size_t)rounds * sizeof(double));
    double *t_fu = malloc((size_t)rounds * sizeof(double)),
           *t_du = malloc((size_t)rounds * sizeof(double));
    pf_dyn_config cfg = {.dim = dim,
                         .max_rows = rows,
                         .probability = 1,
                         .seed = 1,
                         .init_limit = 0.1f,
                         .init_width = dim};
    pf_dyn_table *t = NULL;
    if (!fixed || !out || !grad || !ids || !want || !perm || !pick || !t_fg || !t_dg || !t_fu ||
        !t_du || pf_dyn_create(&cfg, &t) != PF_OK) {
        fprintf(stderr, "dyn_rows: out of memory for %lld rows of %d floats\n", (long long)rows,
                dim);
        return 1;
    }
    pf_rng rng;
    pf_rng_init(&rng, 11, (uint64_t)dim);
    for (size_t i = 0; i < (size_t)rows * d; i++)
        fixed[i] = (float)(pf_rng_uniform(&rng) - 0.5) * 0.2f;
    for (size_t i = 0; i < (size_t)batch * d; i++)
        grad[i] = (float)(pf_rng_uniform(&rng) - 0.5);
    for (int64_t r = 0; r < rows; r++) {
        perm[r] = (uint32_t)r;
        ids[r] = pf_rng_below(&rng, 1ull << 40); /* a repeat merely leaves a row to the next */
        if (pf_dyn_insert(t, ids[r], 0, fixed + (size_t)r * d, NULL) != PF_OK) {
            fprintf(stderr, "dyn_rows: out of memory filling the table\n");
            return 1;
        }
    }
    double sink = 0;
    for (int round = 0; round < rounds; round++) {
        /* the gathers' batch, then another for the updates: rows one side just read would
         * be in cache for the other */
        draw(&rng, perm, rows, batch, pick);
        for (int i = 0; i < batch; i++)
            want[i] = ids[pick[i]]; /* as a pull's message brings them: in one buffer */
        double t0 = pf_clock_now();
        for (int i = 0; i < batch; i++)
            memcpy(out + (size_t)i * d, fixed + (size_t)pick[i] * d, d * sizeof *out);
        double t1 = pf_clock_now();
        pf_dyn_gather(t, want, (size_t)batch, out);
        double t2 = pf_clock_now();
        draw(&rng, perm, rows, batch, pick);
        for (int i = 0; i < batch; i++)
            want[i] = ids[pick[i]];
        double t2b = pf_clock_now();
        for (int i = 0; i < batch; i++) {
            float *row = fixed + (size_t)pick[i] * d;
            const float *g = grad + (size_t)i * d;
            for (size_t k = 0; k < d; k++)
                row[k] -= 0.01f * g[k];
        }
        double t3 = pf_clock_now();
        for (int at = 0; at < batch; at += CHUNK) { /* as a ps would: rows found, then updated */
            int n = batch - at < CHUNK ? batch - at : CHUNK;
            if (pf_dyn_update_batch(t, want + at, (size_t)n, round + 1, rows_of, NULL) != PF_OK)
                return 1;
            for (int i = 0; i < n; i++) {
                float *row = rows_of[i];
                const float *g = grad + (size_t)(at + i) * d;
                for (size_t k = 0; row && k < d; k++)
                    row[k] -= 0.01f * g[k];
            }
        }
        double t4 = pf_clock_now();
        sink += out[round % batch];
        t_fg[round] = t1 - t0;
        t_dg[round] = t2 - t1;
        t_fu[round] = t3 - t2b;
        t_du[round] = t4 - t3;
    }
    double fg = median(t_fg, rounds), dg = median(t_dg, rounds), fu = median(t_fu, rounds),
           du = median(t_du, rounds);
    pf_dyn_stats st = pf_dyn_stats_get(t);
    printf("D = %-3d gather: fixed %7.2f M rows/s, dynamic %7.2f M rows/s, x fixed %.2f\n", dim,
           batch / fg / 1e6, batch / dg / 1e6, fg / dg);
    printf("        update: fixed %7.2f M rows/s, dynamic %7.2f M rows/s, x fixed %.2f\n",
           batch / fu / 1e6, batch / du / 1e6, fu / du);
    printf("        table: %lld rows, %.1f MiB (fixed %.1f MiB); checksum %g\n", (long long)st.rows,
           (double)st.bytes / (1 << 20), (double)rows * (double)d * sizeof(float) / (1 << 20),
           sink);
    pf_dyn_destroy(t);
    free(fixed);
    free(out);
    free(grad);
    free(ids);
    free(want);
    free(perm);
    free(pick);
    free(t_fg);
    free(t_dg);
    free(t_fu);
    free(t_du);
    return 0;
}

int main(int argc, char **argv) {
    int64_t rows = 1000000;
    int batch = 10000, rounds = 21, dims[8], n_dims = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: dyn_rows [--rows N] [--batch N] [--rounds N] [--dim D]...\n"
                   "Rows of an embedding table keyed by 64-bit ids against rows of a fixed "
                   "matrix: gather and sgd update of a batch of distinct rows, in the same run.\n"
                   "Defaults: --rows 1000000 --batch 10000 --rounds 21 --dim 16 --dim 64\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "dyn_rows: %s needs a value (--help)\n", a);
            return 2;
        }
        long long x = atoll(v);
        i++;
        if (!strcmp(a, "--rows") && x >= 1000 && x < PF_DYN_MAX_ROWS)
            rows = x;
        else if (!strcmp(a, "--batch") && x >= 1 && x <= 1000000)
            batch = (int)x;
        else if (!strcmp(a, "--rounds") && x >= 1 && x <= 10000)
            rounds = (int)x;
        else if (!strcmp(a, "--dim") && x >= 1 && x <= 4096 && n_dims < 8)
            dims[n_dims++] = (int)x;
        else {
            fprintf(stderr, "dyn_rows: %s %s: not understood (--help)\n", a, v);
            return 2;
        }
    }
    if (batch > rows) {
        fprintf(stderr, "dyn_rows: --batch %d is more than --rows %lld\n", batch, (long long)rows);
        return 2;
    }
    if (!n_dims) {
        dims[n_dims++] = 16;
        dims[n_dims++] = 64;
    }
    printf("%lld rows, batches of %d distinct rows, %d rounds (medians)\n", (long long)rows, batch,
           rounds);
    for (int i = 0; i < n_dims; i++)
        if (run(rows, batch, rounds, dims[i]))
            return 1;
    return 0;
}
