/* data.h - training data: IDX, CSV and LIBSVM readers, the synthetic_linear generator, and the
 * sampler that shuffles per epoch and shards batches across workers.
 *
 * A pf_dataset holds n examples of `features` floats each (pixels scaled to [0, 1]) and
 * one float target per example: the class index for classification data (IDX labels, CSV
 * first column when integral) or the regression target.
 *
 * Sharding (docs/design.md section 5, sync equivalence): the examples form an endless stream,
 * position p being example perm_e[p mod n] where e = p / n is the epoch and perm_e the
 * epoch's permutation drawn from the seed. At global step s with W workers of batch b,
 * worker i reads positions s*W*b + i*b .. s*W*b + i*b + b - 1. One process with batch W*b
 * therefore reads exactly the union of the W workers' examples at every step. A worker with
 * K in-graph replicas of batch b reads as a worker of batch K*b, and its replica r what task
 * i*K + r of W*K tasks with batch b would read (towers.h).
 */
#ifndef PSFLOW_DATA_H
#define PSFLOW_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/spec.h"
#include "psflow/status.h"

#define PF_IDX_MAX_EXAMPLES (1 << 26) /* refuse files claiming more examples than this */

typedef struct pf_dataset {
    int64_t n;       /* examples */
    int features;    /* floats per example */
    int num_classes; /* 1 + largest label for classification data; 0 for regression */
    float *x;        /* [n, features], owned */
    float *y;        /* [n], owned: class index (exact integer) or regression target */
    int64_t skipped; /* bad lines skipped while reading (criteo, data.on_error skip) */
} pf_dataset;

/* Allocates x [n, features] and y [n] for out (zeroed first); sets out->n and out->features.
 * PF_ERR_NOMEM when n or features is below 1 or the memory is not there. */
pf_status pf_dataset_alloc(pf_dataset *out, int64_t n, int features);

/* Frees what ds owns and zeroes it; safe on a zeroed dataset. */
void pf_dataset_deinit(pf_dataset *ds);

/* Reads an IDX image file (magic 0x00000803, uint8 [n, rows, cols]) and its IDX label file
 * (magic 0x00000801, uint8 [n]), each gzip-compressed or plain (detected by content).
 * Pixels are scaled by 1/255. Errors: PF_ERR_IO (cannot open/read; message names the
 * path), PF_ERR_FORMAT (wrong magic, truncated, counts disagree, label >= 256 etc.;
 * message names the path and err->offset the byte offset where known), PF_ERR_NOMEM. */
pf_status pf_idx_load(const char *images_path, const char *labels_path, pf_dataset *out,
                      pf_error *err);

/* Parses IDX from memory (already decompressed). Same validation as pf_idx_load; messages
 * call the inputs "images" and "labels". Used by the fuzz target and tests. */
pf_status pf_idx_parse(const uint8_t *images, size_t images_len, const uint8_t *labels,
                       size_t labels_len, pf_dataset *out, pf_error *err);

/* Reads a CSV file: one example per line, the target first, then exactly `features`
 * numbers, comma-separated; a first line that does not parse as numbers is a header and
 * skipped; blank lines skipped. `classification` requires integral targets in
 * [0, 1048576) and sets num_classes. Errors name the path and line: ragged rows, bad
 * numbers, no rows. */
pf_status pf_csv_load(const char *path, int features, bool classification, pf_dataset *out,
                      pf_error *err);

/* Same from memory; `what` names the input in messages. */
pf_status pf_csv_parse(const char *text, size_t len, const char *what, int features,
                       bool classification, pf_dataset *out, pf_error *err);

/* Reads a LIBSVM (svmlight) text file into dense rows of `features` floats: one example per
 * line, `label id:value id:value ...`, separated by blanks; ids are integers from
 * index_base (0 or 1; LIBSVM's own files count from 1) to features - 1 + index_base, strictly
 * increasing along a line; features not named are 0; `#` starts a comment that runs to the
 * end of the line; blank lines are skipped. Labels as for CSV (binary -1/+1 labels are
 * refused with a hint to write 0/1). Errors name the path, line and byte offset. */
pf_status pf_libsvm_load(const char *path, int features, int index_base, bool classification,
                         pf_dataset *out, pf_error *err);

/* Same from memory; `what` names the input in messages. */
pf_status pf_libsvm_parse(const char *text, size_t len, const char *what, int features,
                          int index_base, bool classification, pf_dataset *out, pf_error *err);

/* Reads Criteo-layout files (criteo.h; plain or gzip, streamed) as examples of a two-class
 * model: with embeddings (one per categorical column, max_ids 1) each example is an id slot
 * and a weight slot per column, the id modulo the table's vocab (mixed first with the
 * embedding's `hash`), -1 and weight 0 for an empty field, then the model's numeric_inputs
 * (0 or 13); without embeddings the model's 13 inputs. A numeric input is log1p(max(value,
 * 0)), 0 when empty. Errors name the file, line and column (PF_ERR_FORMAT), PF_ERR_IO,
 * PF_ERR_NOMEM. */
pf_status pf_criteo_load(char *const *paths, int n_paths, const pf_model_spec *model,
                         pf_dataset *out, pf_error *err);

/* Same, skipping up to max_bad bad lines (and the corrupt rest of a gzip file) instead of
 * failing: out->skipped counts them, and one more is PF_ERR_FORMAT naming the limit and the
 * last line (data.on_error skip, data.max_bad_lines). */
pf_status pf_criteo_load_skipping(char *const *paths, int n_paths, const pf_model_spec *model,
                                  int64_t max_bad, pf_dataset *out, pf_error *err);

/* The standardisation of a Criteo-layout log's 13 numeric columns (data.stats): column j's
 * input is (log1p(max(v, 0)) - mean[j]) * inv_std[j] (inv_std 1 for a column of one value),
 * an empty field 0. */
typedef struct pf_criteo_scaling {
    float mean[13], inv_std[13];
} pf_criteo_scaling;

/* Reads what `psflow data stats` wrote ("numeric": {"I1": {"log1p_mean", "log1p_std", ...},
 * ...}); a column without values (no log1p_mean) is left as it is (mean 0, inv_std 1).
 * Errors: PF_ERR_IO (unreadable), PF_ERR_FORMAT (not that JSON, a value not finite or a
 * negative std; the path and the column named), PF_ERR_NOMEM. */
pf_status pf_criteo_scaling_load(const char *path, pf_criteo_scaling *out, pf_error *err);

/* pf_criteo_load_skipping with the numeric inputs standardised by sc (NULL: log1p only). */
pf_status pf_criteo_load_scaled(char *const *paths, int n_paths, const pf_model_spec *model,
                                const pf_criteo_scaling *sc, int64_t max_bad, pf_dataset *out,
                                pf_error *err);

/* Reads a LIBSVM file as sparse examples of a model with embeddings (model.h): the ids of
 * the line name feature f's rows when they fall in f's range (feature 0 owns the first
 * vocab ids from index_base, feature 1 the next, ...), each pair's value is its weight, and
 * each example becomes pf_model_input_width floats of id and weight slots, padded with id
 * -1 and weight 0. A feature with more than max_ids ids on a line is refused with the line
 * and the feature named; everything else as pf_libsvm_load. */
pf_status pf_libsvm_load_ids(const char *path, const pf_model_spec *model, int index_base,
                             bool classification, pf_dataset *out, pf_error *err);

/* Same from memory; `what` names the input in messages. */
pf_status pf_libsvm_parse_ids(const char *text, size_t len, const char *what,
                              const pf_model_spec *model, int index_base, bool classification,
                              pf_dataset *out, pf_error *err);

/* n examples of y = w x + b + noise * N(0,1), x ~ U(0,1), deterministic in (seed, stream). */
pf_status pf_synthetic_linear(double w, double b, double noise, int64_t n, uint64_t seed,
                              uint64_t stream, pf_dataset *out);

/* Reads a CSV file of categorical values as sparse examples of a model with embeddings:
 * one example per line, `label,cell_1,...,cell_F`, one cell per embedding in order; a cell
 * holds up to max_ids values separated by '|' (an empty cell: no ids), each an integer id
 * 0 .. vocab - 1, or, for an embedding with `hash`, any string, whose FNV-1a 64-bit hash
 * modulo vocab is its row. Each value has weight 1. A first line whose first field is not a
 * number is a header. Errors name the path, line, field and byte offset. */
pf_status pf_csv_load_ids(const char *path, const pf_model_spec *model, bool classification,
                          pf_dataset *out, pf_error *err);

/* Same from memory; `what` names the input in messages. */
pf_status pf_csv_parse_ids(const char *text, size_t len, const char *what,
                           const pf_model_spec *model, bool classification, pf_dataset *out,
                           pf_error *err);

/* n examples of data.format synthetic_ctr for the model's embeddings (see ctr.c's DESIGN):
 * each example names one id per feature (weight 1, the other slots padded), its label is
 * a click (1) with probability sigmoid(pf_synthetic_ctr_logit) or not (0); deterministic in
 * (training.seed, stream). Errors: PF_ERR_INVALID (no embeddings, zipf <= 0, signal < 0, a
 * non-finite bias), PF_ERR_NOMEM. */
pf_status pf_synthetic_ctr(const pf_job_spec *spec, int64_t n, uint64_t stream, pf_dataset *out);

/* The true weight of id `id` of embedding `feature`: signal * N(0, 1), the same in every
 * process for one seed. */
double pf_synthetic_ctr_weight(double signal, uint64_t seed, int feature, int64_t id);

/* The true logit of one example row of pf_synthetic_ctr: data.bias + the sum of its ids'
 * true weights. */
double pf_synthetic_ctr_logit(const pf_job_spec *spec, const float *row);

/* synthetic_ctr: how many distinct ids a dynamic table's feature draws from (data.distinct_ids,
 * or its default), and the id of rank k (1 ..) among them, in 0 .. 2^40 - 1. */
int64_t pf_synthetic_ctr_distinct_ids(const pf_data_spec *d);
uint64_t pf_synthetic_ctr_dynamic_id(int64_t rank);

/* data.shift_step: every id of a dynamic table among `count` examples x of model m becomes
 * its shifted one (bit 40 set: an id no unshifted example has), whose true weight is its
 * unshifted one's. */
void pf_synthetic_ctr_shift(const pf_model_spec *m, float *x, int64_t count);

/* The Bayes-optimal AUC on a synthetic_ctr test set: the AUC of the true logits against its
 * labels (no model ranks those examples better in expectation). NaN when the set has only
 * one class or memory runs out. */
double pf_synthetic_ctr_bayes_auc(const pf_job_spec *spec, const pf_dataset *test);

/* Area under the ROC curve of scores for labels (1 positive, 0 negative) over n examples,
 * exact (Mann-Whitney, ties counted half); NaN when a class is missing, a score is NaN or
 * memory runs out. */
double pf_auc(const float *scores, const float *labels, int64_t n);

/* Calibration of a two-class model's scores (logit 1 - logit 0) for labels (1 positive, 0
 * negative) over n examples: the mean predicted probability sigmoid(score) over the mean
 * label (1: calibrated, above 1: it predicts too many clicks). NaN when scores is NULL, n is
 * 0, no label is positive or a score is NaN. */
double pf_calibration(const float *scores, const float *labels, int64_t n);

/* Loads the train (test == false) or test set a job spec names, checking that its feature
 * count matches the model's input width (pf_model_input_width) and its labels fit model.outputs.
 * For synthetic_linear the test set is n/5 (at least 1) fresh examples. A spec with no test files
 * gives PF_ERR_NOT_FOUND for test == true. */
pf_status pf_dataset_load(const pf_job_spec *spec, bool test, pf_dataset *out, pf_error *err);

/* --- sampler ------------------------------------------------------------------------------ */

typedef struct pf_sampler pf_sampler;

/* New sampler over n >= 1 examples; shuffle == false gives the identity order every epoch
 * (used for evaluation). Returns NULL on allocation failure. */
pf_sampler *pf_sampler_create(int64_t n, uint64_t seed, bool shuffle);
void pf_sampler_destroy(pf_sampler *s);

/* Dataset index of stream position p >= 0 (see the header comment). Positions should be
 * requested in non-decreasing epoch order for speed; any order is correct. */
int64_t pf_sampler_index(pf_sampler *s, int64_t position);

/* Copies `count` examples at stream positions start .. start+count-1 into host buffers
 * x [count, features] and y [count]; labels (may be NULL) receives y as int32. */
void pf_batch_gather(const pf_dataset *ds, pf_sampler *s, int64_t start, int count, float *x,
                     float *y, int32_t *labels);

/* Copies `count` consecutive examples start .. start+count-1 (dataset order, no shuffling:
 * evaluation) into x [count, features], y [count] and labels [count] (labels may be NULL). */
void pf_batch_copy(const pf_dataset *ds, int64_t start, int count, float *x, float *y,
                   int32_t *labels);

/* Stream position where worker `task` of `workers` starts its batch of `batch` examples at
 * global step `step`. */
static inline int64_t pf_shard_position(int64_t step, int workers, int task, int batch) {
    return step * (int64_t)workers * batch + (int64_t)task * batch;
}

#endif
