/* criteo.h - click logs in the Criteo layout: a streaming reader of any size, and a generator
 * of such logs from a known model.
 *
 * The layout (the Criteo Kaggle and Terabyte sets): one example per line, 40 fields separated
 * by tabs: the label (0 or 1), 13 integer columns I1..I13 (decimal, optionally signed), 26
 * categorical columns C1..C26 (32-bit ids written as up to 8 hex digits). Any field but the
 * label may be empty: a missing value. A line ends with "\n" (a "\r" before it is dropped).
 *
 * The reader streams: it holds one buffer of PF_CRITEO_BUFFER bytes (plus the longest line
 * it allows) whatever the file's size, and reads plain or gzip files (detected by content).
 * Every error names the file, the line (from 1) and the column ("I3", "C17") where there is
 * one.
 */
#ifndef PSFLOW_CRITEO_H
#define PSFLOW_CRITEO_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/status.h"

#define PF_CRITEO_NUMERIC     13
#define PF_CRITEO_CATEGORICAL 26
#define PF_CRITEO_FIELDS      (1 + PF_CRITEO_NUMERIC + PF_CRITEO_CATEGORICAL)
#define PF_CRITEO_BUFFER      ((size_t)1 << 19) /* bytes read at a time */
#define PF_CRITEO_MAX_LINE    ((size_t)1 << 16) /* default longest line: real ones are < 1 KiB */

/* One example. Bit j of num_present / cat_present is set when column j has a value. */
typedef struct pf_criteo_row {
    int label; /* 0 or 1 */
    uint32_t num_present, cat_present;
    int64_t num[PF_CRITEO_NUMERIC];
    uint32_t cat[PF_CRITEO_CATEGORICAL];
} pf_criteo_row;

/* Parses one line (without its "\n"; a trailing "\r" is allowed) into *row. Returns PF_OK, or
 * PF_ERR_FORMAT with *column the field at fault (0 the label, 1..13 I1..I13, 14..39
 * C1..C26; with too few fields the first one missing, with too many 40, "after C26") and
 * why[len] saying what is wrong with it. Pure: the fuzz target and the reader call it
 * alike. */
pf_status pf_criteo_parse_line(const char *line, size_t len, pf_criteo_row *row, int *column,
                               char *why, size_t why_len);

/* Whether lines are parsed eight fields per instruction (x86-64 with AVX-512 VBMI2; the
 * reader and pf_criteo_parse_line give the same rows either way): asks for it on or off and
 * returns whether it is now on (0 on a processor without the instructions). Without a call
 * it is on where the processor has them, unless PSFLOW_CRITEO_VECTOR=0. For every thread of
 * the process; tests and benchmarks use it to compare the two. */
int pf_criteo_use_vector(int on);

/* The name of field `column` as pf_criteo_parse_line numbers them: "label", "I1".."I13",
 * "C1".."C26", "after C26" for 40; "line" for -1 (and anything else). */
const char *pf_criteo_column_name(int column);

typedef struct pf_criteo_reader pf_criteo_reader;

/* Opens `path` (plain, or gzip by its magic bytes) for reading rows. max_line: the longest
 * line accepted (0: PF_CRITEO_MAX_LINE); a longer one is an error rather than a buffer that
 * grows. Errors: PF_ERR_IO (cannot open, naming the path and why), PF_ERR_NOMEM. */
pf_status pf_criteo_open(const char *path, size_t max_line, pf_criteo_reader **out, pf_error *err);

/* Opens the lines of plain file `path` that start at byte offsets in [start, end) (end 0: to
 * the end of the file): a line that starts before `end` is read whole, the line that `start`
 * falls inside is left to the range before. Ranges cut anywhere thus read every line of a
 * file exactly once. With start > 0, messages name a line by its byte offset
 * ("PATH:byte N") instead of its number. Errors: those of pf_criteo_open, PF_ERR_INVALID (a
 * gzip file from start > 0: its bytes are not addressable). */
pf_status pf_criteo_open_range(const char *path, uint64_t start, uint64_t end, size_t max_line,
                               pf_criteo_reader **out, pf_error *err);

/* The next row into *row: PF_OK; PF_ERR_NOT_FOUND at the end of the file (err untouched);
 * PF_ERR_FORMAT for a bad line, a line longer than max_line or truncated or corrupt gzip
 * data, the message "PATH:LINE: column NAME: why"; PF_ERR_IO for a read that failed. After
 * a PF_ERR_FORMAT for a bad line the reader goes on with the next line, so a caller may skip
 * it; after any other error it stays at the end. Blank lines are skipped. */
pf_status pf_criteo_next(pf_criteo_reader *r, pf_criteo_row *row, pf_error *err);

/* 1 once the reader has nothing more to give: the end of the file, or an error it cannot
 * go on from (a truncated or corrupt gzip file, a failed read); 0 while it can. */
int pf_criteo_ended(const pf_criteo_reader *r);

/* The line number of the row last returned (or of the last error). */
uint64_t pf_criteo_line(const pf_criteo_reader *r);

/* Bytes of the file consumed so far (decompressed bytes for gzip). */
uint64_t pf_criteo_bytes(const pf_criteo_reader *r);

void pf_criteo_close(pf_criteo_reader *r);

/* --- the generator --------------------------------------------------------------------- */

/* What psflow data gen criteo writes: `rows` examples over `files` files part-NNNNN.tsv
 * (.tsv.gz with gzip) in `dir`, drawn from the model of criteo_gen.c seeded by `seed`:
 * numeric effects, one weight per categorical id, and pairwise interactions of some
 * categorical columns. */
typedef struct pf_criteo_gen_options {
    const char *dir;
    int64_t rows;
    int files;
    uint64_t seed;
    int gzip;
    /* called after each file with the rows written so far (may be NULL) */
    void (*progress)(void *ctx, int file, int64_t rows_done);
    void *ctx;
    /* the index of the first file (0: part-00000): files first..first+files-1, each drawn
     * from its own stream, so a later call with first = an earlier call's files adds rows
     * of the same model that no earlier file holds (a test set beside a training set) */
    int first;
} pf_criteo_gen_options;

typedef struct pf_criteo_gen_result {
    int64_t rows, positives;
    uint64_t bytes;    /* written, before compression */
    double bayes_auc;  /* the AUC of the true click probabilities against the drawn labels */
    double bayes_loss; /* the mean logloss of the true probabilities */
    /* the AUC of the true model without its pairwise interactions (numeric effects and id
     * weights only): what no model of per-column effects can pass */
    double first_order_auc;
} pf_criteo_gen_result;

/* Writes the files (dir must exist) and a truth.json beside them saying how they were drawn
 * and the figures in *out. Errors: PF_ERR_INVALID (rows < 1, files < 1 or > rows, first < 0,
 * or a file index past 99999), PF_ERR_IO (naming the file), PF_ERR_NOMEM. */
pf_status pf_criteo_generate(const pf_criteo_gen_options *o, pf_criteo_gen_result *out,
                             pf_error *err);

/* The generator's true click probability of a row drawn with `seed`. */
double pf_criteo_true_probability(uint64_t seed, const pf_criteo_row *row);

#endif
