/* input.c - how fast the Criteo-layout reader parses a click log, against the fastest a
 * reader of lines could go on this machine.
 *
 * Writes a file of about 200 MB (800,000 rows; --rows N to change it) with pf_criteo_generate
 * into a temp dir, reads it once so that both sides run from the page cache, then alternates
 * rounds of the baseline - read() in 1 MiB chunks, counting lines with memchr - and the
 * pf_criteo reader parsing every row. Both run on one thread, so each MB/s is per core. The
 * figure to compare is the median over the rounds of parse / baseline; the absolute MB/s vary
 * by machine and by load. The temp dir is removed at the end.
 *
 * usage: input [--rows N] [--rounds R]
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "psflow/clock.h"
#include "psflow/criteo.h"

#define CHUNK      ((size_t)1 << 20)
#define MAX_ROUNDS 15

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double s[MAX_ROUNDS];
    memcpy(s, v, (size_t)n * sizeof *v);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* The baseline: the lines of path, counted with read() and memchr; the bytes in *bytes. */
static int64_t count_lines(const char *path, char *buf, uint64_t *bytes) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    int64_t lines = 0;
    uint64_t total = 0;
    ssize_t n;
    while ((n = read(fd, buf, CHUNK)) > 0) {
        total += (uint64_t)n;
        for (const char *p = buf, *end = buf + n; (p = memchr(p, '\n', (size_t)(end - p)));)
            p++, lines++;
    }
    if (n < 0) {
        perror(path);
        exit(1);
    }
    close(fd);
    *bytes = total;
    return lines;
}

/* Every row of path through the reader; the bytes in *bytes. A checksum of the rows keeps
 * the parse from being optimised away. */
static int64_t parse_rows(const char *path, uint64_t *bytes, uint64_t *checksum) {
    pf_criteo_reader *r;
    pf_error err;
    if (pf_criteo_open(path, 0, &r, &err) != PF_OK) {
        fprintf(stderr, "input: %s\n", err.message);
        exit(1);
    }
    pf_criteo_row row;
    pf_status st;
    int64_t rows = 0;
    uint64_t sum = 0;
    while ((st = pf_criteo_next(r, &row, &err)) == PF_OK) {
        sum += (uint64_t)row.label + row.cat[0] + (uint64_t)row.num[0] + row.cat_present;
        rows++;
    }
    if (st != PF_ERR_NOT_FOUND) {
        fprintf(stderr, "input: %s\n", err.message);
        exit(1);
    }
    *bytes = pf_criteo_bytes(r);
    *checksum = sum;
    pf_criteo_close(r);
    return rows;
}

/* Removes dir and the files in it (the generator makes no subfolders). */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[1400];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* The one part file the generator wrote into dir, into path. */
static void find_part(const char *dir, char *path, size_t size) {
    DIR *d = opendir(dir);
    struct dirent *e;
    path[0] = '\0';
    while (d && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "part-", 5) == 0)
            snprintf(path, size, "%s/%s", dir, e->d_name);
    if (d)
        closedir(d);
    if (!path[0]) {
        fprintf(stderr, "input: the generator wrote no part file in %s\n", dir);
        exit(1);
    }
}

int main(int argc, char **argv) {
    int64_t rows = 800000;
    int rounds = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc)
            rows = strtoll(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--rows N] [--rounds R (1..%d)]\n", argv[0], MAX_ROUNDS);
            return 2;
        }
    }
    if (rows < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "input: --rows must be >= 1 and --rounds 1..%d\n", MAX_ROUNDS);
        return 2;
    }

    const char *tmp = getenv("TMPDIR");
    char dir[1024], path[1400];
    snprintf(dir, sizeof dir, "%s/psflow_bench_input_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror(dir);
        return 1;
    }
    double t0 = pf_clock_now();
    pf_criteo_gen_options o = {.dir = dir, .rows = rows, .files = 1, .seed = 1};
    pf_criteo_gen_result gen;
    pf_error err;
    if (pf_criteo_generate(&o, &gen, &err) != PF_OK) {
        fprintf(stderr, "input: %s\n", err.message);
        remove_dir(dir);
        return 1;
    }
    find_part(dir, path, sizeof path);
    printf("criteo input: %" PRId64 " rows, %.1f MB, generated in %.1f s\n", gen.rows,
           (double)gen.bytes / 1e6, pf_clock_now() - t0);

    char *buf = malloc(CHUNK);
    if (!buf) {
        fprintf(stderr, "input: out of memory\n");
        remove_dir(dir);
        return 1;
    }
    uint64_t bytes;
    count_lines(path, buf, &bytes); /* into the page cache */

    double base[MAX_ROUNDS], parse[MAX_ROUNDS], ratio[MAX_ROUNDS];
    uint64_t checksum = 0;
    for (int k = 0; k < rounds; k++) {
        uint64_t base_bytes, parse_bytes, sum;
        double t = pf_clock_now();
        int64_t lines = count_lines(path, buf, &base_bytes);
        base[k] = (double)base_bytes / 1e6 / (pf_clock_now() - t);
        t = pf_clock_now();
        int64_t parsed = parse_rows(path, &parse_bytes, &sum);
        parse[k] = (double)parse_bytes / 1e6 / (pf_clock_now() - t);
        checksum ^= sum;
        if (lines != gen.rows || parsed != gen.rows || parse_bytes != base_bytes) {
            fprintf(stderr,
                    "input: the file has %" PRId64 " lines and %" PRId64 " parsed rows, the "
                    "generator wrote %" PRId64 "\n",
                    lines, parsed, gen.rows);
            remove_dir(dir);
            return 1;
        }
        ratio[k] = parse[k] / base[k];
        printf("round %d: read+memchr %7.0f MB/s, criteo parse %6.0f MB/s, ratio %.3f\n", k + 1,
               base[k], parse[k], ratio[k]);
    }
    printf("criteo parse / read+memchr: %.3f (median of %d; per core: parse %.0f MB/s, "
           "%.2f M rows/s)  [checksum %" PRIx64 "]\n",
           median(ratio, rounds), rounds, median(parse, rounds),
           median(parse, rounds) * 1e6 / ((double)gen.bytes / (double)gen.rows) / 1e6, checksum);
    free(buf);
    remove_dir(dir);
    return 0;
}
