/* cmd_data.c - `psflow data`: tools for training data. `gen criteo` writes Criteo-layout click
 * logs from a known model and prints the AUC no model can beat on them; `inspect FILE` reads
 * a Criteo-layout file (plain or gzip, any size, memory fixed) and prints its rows, label
 * rate and each column's fill, range and distinct ids, naming every bad line; `stats
 * FILE...` writes as JSON what the numeric transforms need (each column's log1p mean and
 * standard deviation, range, fill) and the categorical columns' distinct ids; `examples JOB`
 * prints a job's examples as its model reads them, one JSON line each, in the instance form
 * psflow serve takes. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/options.h"
#include "psflow/clock.h"
#include "psflow/criteo.h"
#include "psflow/data.h"
#include "psflow/fs.h"
#include "psflow/mem.h"

#define HLL_BITS      12 /* distinct ids: a HyperLogLog of 2^12 registers a column (~1.6%) */
#define HLL_M         (1 << HLL_BITS)
#define SHOWN_ERRORS  5
#define PROGRESS_ROWS 10000000

/* --- gen ----------------------------------------------------------------------------------- */

typedef struct gen_progress {
    int64_t rows;
    int files;
    double start;
} gen_progress;

static void gen_said(void *ctx, int file, int64_t done) {
    const gen_progress *g = ctx;
    fprintf(stderr,
            "psflow data: part-%05d written: %" PRId64 " of %" PRId64 " rows (%.0f%%), %.0f s\n",
            file, done, g->rows, 100.0 * (double)done / (double)g->rows, pf_clock_now() - g->start);
}

static int gen(const char *what, long rows, long files, long first, long seed, bool gzip,
               const char *out) {
    if (!what || strcmp(what, "criteo") != 0)
        return cli_usage_error("data", "gen: the one layout is 'criteo' (psflow data gen criteo "
                                       "--rows N --out DIR)");
    if (!out)
        return cli_usage_error("data", "gen: --out DIR is required");
    if (files > rows)
        return cli_usage_error("data", "gen: --files must not exceed --rows");
    if (first + files > 100000)
        return cli_usage_error("data", "gen: --first-file + --files must not exceed 100000");
    pf_error err;
    pf_error_clear(&err);
    if (pf_fs_make_dirs(out, &err) != PF_OK || access(out, W_OK) != 0) {
        fprintf(stderr, "psflow data: %s: cannot create or write the folder%s%s\n", out,
                err.message[0] ? ": " : "", err.message);
        return PF_EX_CANTCREAT;
    }
    gen_progress g = {rows, (int)files, pf_clock_now()};
    pf_criteo_gen_options o = {.dir = out,
                               .rows = rows,
                               .files = (int)files,
                               .seed = (uint64_t)seed,
                               .gzip = gzip,
                               .progress = gen_said,
                               .ctx = &g,
                               .first = (int)first};
    pf_criteo_gen_result r;
    pf_status st = pf_criteo_generate(&o, &r, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow data: %s\n", err.message);
        return st == PF_ERR_IO ? PF_EX_CANTCREAT : st == PF_ERR_INVALID ? PF_EX_USAGE : PF_EX_OSERR;
    }
    printf("wrote %" PRId64 " rows in %d file%s under %s (%.1f MB before compression), %.2f%% "
           "clicks\n",
           r.rows, (int)files, files == 1 ? "" : "s", out, (double)r.bytes / 1e6,
           100.0 * (double)r.positives / (double)r.rows);
    printf("bayes-optimal auc %.4f logloss %.4f (the true probabilities on these rows: no model "
           "does better; %s/truth.json)\n",
           r.bayes_auc, r.bayes_loss, out);
    printf("first-order auc %.4f (the true model without its interactions: a model above it "
           "has learned some)\n",
           r.first_order_auc);
    return 0;
}

/* --- inspect ------------------------------------------------------------------------------- */

typedef struct column_stats {
    int64_t present;
    int64_t min, max;
    double mean, m2; /* numeric: of log1p(max(value, 0)), Welford's running sums */
    uint8_t hll[HLL_M];
} column_stats;

typedef struct inspect_stats {
    int64_t rows, positives, bad;
    column_stats num[PF_CRITEO_NUMERIC];
    column_stats cat[PF_CRITEO_CATEGORICAL];
} inspect_stats;

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void hll_add(uint8_t *reg, uint32_t id) {
    uint64_t h = mix(id + 0x9e3779b97f4a7c15ULL);
    uint32_t j = (uint32_t)(h >> (64 - HLL_BITS));
    uint64_t rest = h << HLL_BITS;
    uint8_t rank = rest ? (uint8_t)(__builtin_clzll(rest) + 1) : (uint8_t)(64 - HLL_BITS + 1);
    if (rank > reg[j])
        reg[j] = rank;
}

static double hll_estimate(const uint8_t *reg) {
    double sum = 0;
    int zeros = 0;
    for (int j = 0; j < HLL_M; j++) {
        sum += ldexp(1.0, -reg[j]);
        zeros += reg[j] == 0;
    }
    double m = HLL_M, e = 0.7213 / (1 + 1.079 / m) * m * m / sum;
    return e <= 2.5 * m && zeros ? m * log(m / zeros) : e;
}

static void take_row(inspect_stats *s, const pf_criteo_row *r) {
    s->rows++;
    s->positives += r->label;
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
        if (!(r->num_present >> j & 1))
            continue;
        column_stats *c = &s->num[j];
        if (!c->present++ || r->num[j] < c->min)
            c->min = r->num[j];
        if (c->present == 1 || r->num[j] > c->max)
            c->max = r->num[j];
        double x = log1p(r->num[j] > 0 ? (double)r->num[j] : 0), d = x - c->mean;
        c->mean += d / (double)c->present;
        c->m2 += d * (x - c->mean);
    }
    for (int j = 0; j < PF_CRITEO_CATEGORICAL; j++)
        if (r->cat_present >> j & 1) {
            s->cat[j].present++;
            hll_add(s->cat[j].hll, r->cat[j]);
        }
}

static void print_stats(const char *path, const inspect_stats *s, uint64_t bytes) {
    printf("%s: Criteo layout (label, I1..I13, C1..C26, tab-separated), %.1f MB of text\n", path,
           (double)bytes / 1e6);
    printf("rows %" PRId64 ", clicks %.2f%%, bad lines %" PRId64 "\n", s->rows,
           s->rows ? 100.0 * (double)s->positives / (double)s->rows : 0.0, s->bad);
    printf("%-6s %8s %14s %14s\n", "column", "filled", "min", "max");
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
        const column_stats *c = &s->num[j];
        double fill = s->rows ? 100.0 * (double)c->present / (double)s->rows : 0;
        if (c->present)
            printf("%-6s %7.1f%% %14" PRId64 " %14" PRId64 "\n", pf_criteo_column_name(1 + j), fill,
                   c->min, c->max);
        else
            printf("%-6s %7.1f%% %14s %14s\n", pf_criteo_column_name(1 + j), fill, "-", "-");
    }
    printf("%-6s %8s %14s\n", "column", "filled", "distinct ids");
    for (int j = 0; j < PF_CRITEO_CATEGORICAL; j++) {
        const column_stats *c = &s->cat[j];
        printf("%-6s %7.1f%% %14.0f%s\n", pf_criteo_column_name(1 + PF_CRITEO_NUMERIC + j),
               s->rows ? 100.0 * (double)c->present / (double)s->rows : 0,
               c->present ? hll_estimate(c->hll) : 0, c->present ? " (estimate, ~2%)" : "");
    }
}

/* Reads every row of path into s, naming bad lines (the first few). Returns 0, PF_EX_DATAERR
 * (bad lines, or a file cut short), PF_EX_NOINPUT or PF_EX_OSERR; *bytes the text read. */
static int scan(const char *path, long max_line, inspect_stats *s, uint64_t *bytes) {
    pf_criteo_reader *r;
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_criteo_open(path, (size_t)max_line, &r, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow data: %s\n", err.message);
        return st == PF_ERR_IO ? PF_EX_NOINPUT : PF_EX_OSERR;
    }
    pf_criteo_row row;
    int rc = 0;
    while ((st = pf_criteo_next(r, &row, &err)) != PF_ERR_NOT_FOUND) {
        if (st == PF_OK) {
            take_row(s, &row);
            if (s->rows % PROGRESS_ROWS == 0)
                fprintf(stderr, "psflow data: %" PRId64 " rows read (%.1f GB of %s)\n", s->rows,
                        (double)pf_criteo_bytes(r) / 1e9, path);
            continue;
        }
        if (pf_criteo_ended(r)) { /* the file ends here: cut short, corrupt, unreadable */
            fprintf(stderr, "psflow data: %s\n", err.message);
            rc = st == PF_ERR_IO ? PF_EX_NOINPUT : PF_EX_DATAERR;
            break;
        }
        if (++s->bad <= SHOWN_ERRORS)
            fprintf(stderr, "psflow data: %s\n", err.message);
        rc = PF_EX_DATAERR;
    }
    *bytes += pf_criteo_bytes(r);
    pf_criteo_close(r);
    return rc;
}

static int inspect(const char *path, long max_line) {
    inspect_stats *s = pf_calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "psflow data: out of memory\n");
        return PF_EX_OSERR;
    }
    uint64_t bytes = 0;
    int rc = scan(path, max_line, s, &bytes);
    if (s->bad > SHOWN_ERRORS)
        fprintf(stderr, "psflow data: ... %" PRId64 " bad lines in all\n", s->bad);
    if (rc != PF_EX_NOINPUT && rc != PF_EX_OSERR) {
        print_stats(path, s, bytes);
        if (s->rows == 0 && rc == 0) {
            fprintf(stderr, "psflow data: %s holds no rows\n", path);
            rc = PF_EX_DATAERR;
        }
    }
    pf_free(s);
    return rc;
}

/* --- stats --------------------------------------------------------------------------------- */

/* The JSON of what the numeric transforms need (docs/training.md), on f. */
static void write_stats(FILE *f, const inspect_stats *s, char *const *paths, int n) {
    fprintf(f,
            "{\n  \"layout\": \"criteo\",\n  \"rows\": %" PRId64 ",\n  \"positives\": %" PRId64
            ",\n  \"files\": [",
            s->rows, s->positives);
    for (int i = 0; i < n; i++) {
        fputc('"', f);
        for (const char *p = paths[i]; *p; p++)
            if (*p == '"' || *p == '\\')
                fprintf(f, "\\%c", *p);
            else if ((unsigned char)*p < 0x20)
                fprintf(f, "\\u%04x", (unsigned char)*p);
            else
                fputc(*p, f);
        fprintf(f, "\"%s", i + 1 < n ? ", " : "");
    }
    fprintf(f, "],\n  \"numeric\": {");
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
        const column_stats *c = &s->num[j];
        double sd = c->present > 1 ? sqrt(c->m2 / (double)(c->present - 1)) : 0;
        fprintf(f, "%s\n    \"%s\": {\"present\": %" PRId64, j ? "," : "",
                pf_criteo_column_name(1 + j), c->present);
        if (c->present)
            fprintf(f,
                    ", \"min\": %" PRId64 ", \"max\": %" PRId64
                    ", \"log1p_mean\": %.9g, \"log1p_std\": %.9g",
                    c->min, c->max, c->mean, sd);
        fputc('}', f);
    }
    fprintf(f, "\n  },\n  \"categorical\": {");
    for (int j = 0; j < PF_CRITEO_CATEGORICAL; j++) {
        const column_stats *c = &s->cat[j];
        fprintf(f, "%s\n    \"%s\": {\"present\": %" PRId64 ", \"distinct_estimate\": %.0f}",
                j ? "," : "", pf_criteo_column_name(1 + PF_CRITEO_NUMERIC + j), c->present,
                c->present ? hll_estimate(c->hll) : 0);
    }
    fprintf(f, "\n  }\n}\n");
}

static int stats(char *const *paths, int n, long max_line, const char *out) {
    inspect_stats *s = pf_calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "psflow data: out of memory\n");
        return PF_EX_OSERR;
    }
    uint64_t bytes = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = scan(paths[i], max_line, s, &bytes);
    if (rc == 0 && s->rows == 0) {
        fprintf(stderr, "psflow data: no rows in the files given\n");
        rc = PF_EX_DATAERR;
    }
    if (rc == 0) {
        FILE *f = out ? fopen(out, "w") : stdout;
        if (!f) {
            fprintf(stderr, "psflow data: %s: cannot create\n", out);
            rc = PF_EX_CANTCREAT;
        } else {
            write_stats(f, s, paths, n);
            if (out && fclose(f) != 0) {
                fprintf(stderr, "psflow data: %s: write failed\n", out);
                rc = PF_EX_CANTCREAT;
            }
            if (out && rc == 0)
                fprintf(stderr, "psflow data: %" PRId64 " rows of %d file%s (%.1f MB): %s\n",
                        s->rows, n, n == 1 ? "" : "s", (double)bytes / 1e6, out);
        }
    }
    pf_free(s);
    return rc;
}

/* --- examples ------------------------------------------------------------------------------ */

/* Prints up to `limit` examples (0: all) of the job's test (or train) set as its model reads
 * them, {"label": L, "instance": [...]} a line: what a psflow serve client sends. */
static int examples(const char *job, bool train, long limit) {
    pf_job_spec spec;
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_job_spec_load(job, &spec, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow data: %s: %s\n", job, err.message);
        return pf_exit_code(st);
    }
    bool test = !train;
    if (test && !pf_data_has_test(&spec.data)) {
        fprintf(stderr,
                "psflow data: job %s has no test set (data.test); --split train reads its "
                "training set\n",
                spec.name);
        pf_job_spec_deinit(&spec);
        return PF_EX_USAGE;
    }
    pf_dataset ds;
    st = pf_dataset_load(&spec, test, &ds, &err);
    pf_job_spec_deinit(&spec);
    if (st != PF_OK) {
        fprintf(stderr, "psflow data: %s\n", err.message);
        return pf_exit_code(st);
    }
    int64_t n = limit > 0 && limit < ds.n ? limit : ds.n;
    for (int64_t i = 0; i < n; i++) {
        const float *x = ds.x + (size_t)i * (size_t)ds.features;
        printf("{\"label\":%.9g,\"instance\":[", (double)ds.y[i]);
        for (int f = 0; f < ds.features; f++)
            printf(f ? ",%.9g" : "%.9g", (double)x[f]);
        fputs("]}\n", stdout);
    }
    pf_dataset_deinit(&ds);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "psflow data: cannot write the examples\n");
        return PF_EX_CANTCREAT;
    }
    return 0;
}

int cli_data(const cli_command *cmd, int argc, char **argv) {
    cli_run run;
    long rows = 0, files = 1, first = 0, seed = 1, max_line = (long)PF_CRITEO_MAX_LINE, limit = 0;
    int split = 0;
    bool gzip = false;
    const char *out = NULL;
    cli_option opts[] = {
        CLI_LONG("rows", "N", "gen: rows to write", 1, 100000000000L, 0, &rows),
        CLI_TEXT("out", "PATH",
                 "gen: the folder to write into (created if missing); stats: the JSON file "
                 "[stdout]",
                 NULL, &out),
        CLI_LONG("files", "K", "gen: split the rows over K files part-00000.tsv ...", 1, 100000, 1,
                 &files),
        CLI_LONG("first-file", "I",
                 "gen: number the files from I (the same model, rows no file below I holds: a "
                 "test set beside a training set of I files)",
                 0, 99999, 0, &first),
        CLI_LONG("seed", "S", "gen: the seed of the generating model and of the rows", 0,
                 (long)INT64_MAX, 1, &seed),
        CLI_FLAG("gzip", "gen: write part-NNNNN.tsv.gz", &gzip),
        CLI_LONG("max-line", "BYTES", "inspect, stats: the longest line read", 64, 1 << 26,
                 (long)PF_CRITEO_MAX_LINE, &max_line),
        CLI_CHOICE("split", "SET", "examples: the job's test (default) or train set", "test|train",
                   &split),
        CLI_LONG("limit", "N", "examples: print the first N only [all]", 0, (long)INT64_MAX, 0,
                 &limit),
    };
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    const char *sub = run.args.positional[0];
    if (!strcmp(sub, "gen")) {
        if (run.args.n_positional != 2)
            return cli_usage_error("data", "gen takes one layout: psflow data gen criteo --rows N "
                                           "--out DIR");
        if (rows < 1)
            return cli_usage_error("data", "gen: --rows N is required");
        return gen(run.args.positional[1], rows, files, first, seed, gzip, out);
    }
    if (!strcmp(sub, "inspect")) {
        if (run.args.n_positional != 2)
            return cli_usage_error("data", "inspect takes one file: psflow data inspect FILE");
        return inspect(run.args.positional[1], max_line);
    }
    if (!strcmp(sub, "stats")) {
        if (run.args.n_positional < 2)
            return cli_usage_error("data", "stats takes the files to read: psflow data stats "
                                           "FILE... [--out FILE]");
        return stats((char *const *)run.args.positional + 1, run.args.n_positional - 1, max_line,
                     out);
    }
    if (!strcmp(sub, "examples")) {
        if (run.args.n_positional != 2)
            return cli_usage_error("data", "examples takes one job spec: psflow data examples "
                                           "JOB.json [--split test|train] [--limit N]");
        return examples(run.args.positional[1], split == 1, limit);
    }
    return cli_usage_error("data", "the subcommands are 'gen criteo', 'inspect FILE', 'stats "
                                   "FILE...' and 'examples JOB.json'");
}
