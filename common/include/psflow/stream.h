/* stream.h - training examples read from their files as training needs them (data.streaming),
 * in memory bounded whatever the files' size, and the expansion of data file entries (files,
 * folders, glob patterns).
 *
 * The input is cut into *splits*: a gzip file is one, a plain file is cut into byte ranges of
 * about data.split_mb (smaller when there would be fewer splits than streams), each holding the
 * lines that start in it (pf_criteo_open_range; csv and libsvm alike). A csv file's header line
 * is looked for in its first split only. An IDX pair (exactly its 2 entries, images and labels)
 * is cut into ranges of records of about data.split_mb of images (data_idx.c reads them: a plain
 * file seeked, a gzip one decompressed from its start). Split i (files in the order the entries
 * expand to, ranges in file order) goes to stream i mod streams. A stream is its splits read one
 * after another, in an order drawn anew each epoch from (training.seed, stream, epoch)
 * (pf_stream_split_order), each split's lines in file order; at its end the stream's next epoch
 * begins. Streams are as many as the replicas that train on the data (training tasks x
 * replicas_per_worker), so each replica reads its own splits and no line is read by two.
 *
 * The stream positions of data.h map onto the streams in blocks of `block` examples (the
 * per-replica batch): block k of the global stream is block k / streams of stream k mod
 * streams. Task i of W tasks at a step reads exactly its own stream's next block, one
 * process with W replicas reads the same W blocks, and a position is a pure function of the
 * global step: a restore, a rollback or a replaced worker reads from where the restored step
 * left off, so a sync run with faults reads the examples of a run without.
 *
 * A background thread reads ahead for every stream a process has asked for, into a bounded
 * ring, so that parsing overlaps training. A position behind what was read (a rollback) or
 * far ahead (a membership change) is reached by reading the stream again from the start of
 * the epoch that holds it, skipping whole splits whose example count it already knows.
 *
 * Leased input (data.splits dynamic) has no fixed assignment: the training task leases splits
 * one at a time from the work queue ps task 0 keeps (api/wire.md, LEASE) and adds each to the
 * source (pf_stream_lease_add); the reader thread reads the leased splits in that order, and
 * pf_stream_take gives their examples in order and names each split whose examples were all
 * taken, so that the task can report it done once the step that used them was applied.
 */
#ifndef PSFLOW_STREAM_H
#define PSFLOW_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/spec.h"
#include "psflow/status.h"

#define PF_INPUT_MAX_FILES 100000 /* paths one job's entries may expand to */

/* Expands data file entries: a folder stands for the regular files in it whose names do not
 * begin with '.' and do not end in ".json" (metadata such as the generator's truth.json), a
 * path holding '*', '?' or '[' for the paths glob(3) matches, anything else for itself; the
 * paths of each entry sorted by name. *out is an array of n_out strings (pf_input_free).
 * Errors: PF_ERR_NOT_FOUND (a folder without files, a pattern matching nothing; the entry
 * named), PF_ERR_IO (a folder that cannot be read), PF_ERR_INVALID (more than
 * PF_INPUT_MAX_FILES paths), PF_ERR_NOMEM. */
pf_status pf_input_expand(char *const *entries, int n, char ***out, int *n_out, pf_error *err);

void pf_input_free(char **paths, int n);

/* The order in which a stream of n splits reads them in epoch `epoch`: order[0..n) a
 * permutation of 0..n-1 drawn from (seed, stream, epoch), the same in every process. */
void pf_stream_split_order(uint64_t seed, int stream, int64_t epoch, int n, int *order);

typedef struct pf_stream_source pf_stream_source;

/* Opens the streaming source of spec's training files (data.format criteo, csv, libsvm, idx)
 * with `streams` streams (1 for leased input, whatever `streams` says) and blocks of `block`
 * examples; nothing but the files' sizes and
 * first bytes is read until asked for. A csv or libsvm line gives the example the whole-file
 * reader (data.h) gives, parsed by the same code, a class label not below model.outputs being
 * a bad line. Errors: PF_ERR_INVALID (streams or block below 1), PF_ERR_SPEC (another format;
 * fewer splits than streams: only gzip files, fewer than the streams; idx: not 2 entries,
 * fewer records than streams, images of other than model.inputs pixels), those of
 * pf_input_expand, PF_ERR_FORMAT (an IDX header: the file named), PF_ERR_IO (a file that
 * cannot be opened), PF_ERR_NOMEM. */
pf_status pf_stream_open(const pf_job_spec *spec, int streams, int block, pf_stream_source **out,
                         pf_error *err);

/* Copies the examples at global stream positions start .. start+count-1 into x [count,
 * features] and y [count] (labels, when not NULL, receives y as int32), waiting for the
 * reader as needed. Errors: PF_ERR_FORMAT (a bad line: file, line and column named, or with
 * data.on_error skip more than data.max_bad_lines of them; a stream whose files hold no
 * example), PF_ERR_IO; the example at fault and those after it in its stream are not
 * given. */
pf_status pf_stream_gather(pf_stream_source *s, int64_t start, int count, float *x, float *y,
                           int32_t *labels, pf_error *err);

/* --- leased input (data.splits dynamic; pf_stream_open then makes one stream) --- */

/* A leased split all of whose examples were taken. */
typedef struct pf_stream_split_done {
    uint32_t split;
    uint64_t epoch;
} pf_stream_split_done;

/* Whether the source is leased (the spec's data.splits is dynamic). */
int pf_stream_leased(const pf_stream_source *s);

/* Adds split `split` (< pf_stream_splits), leased for `epoch`, after the splits added before;
 * a split may be added again (read again). Errors: PF_ERR_INVALID (a split out of range, a
 * source that is not leased), PF_ERR_NOMEM. */
pf_status pf_stream_lease_add(pf_stream_source *s, uint32_t split, uint64_t epoch, pf_error *err);

/* The splits added whose examples were not all taken yet. */
int64_t pf_stream_leased_open(pf_stream_source *s);

/* Takes up to `count` examples, in the order of the splits added, into x [count, features],
 * y and labels (when not NULL), waiting for the reader; fewer (*got) only when every split
 * added was taken through, or when max_done splits were completed. done[0 .. *n_done) are the
 * splits all of whose examples have now been taken (an empty split too), in the order they
 * were added. Errors: PF_ERR_FORMAT, PF_ERR_IO (as pf_stream_gather; the examples before
 * the fault are given), PF_ERR_INVALID (a source that is not leased). */
pf_status pf_stream_take(pf_stream_source *s, int count, float *x, float *y, int32_t *labels,
                         int *got, pf_stream_split_done *done, int max_done, int *n_done,
                         pf_error *err);

/* Floats per example (pf_model_input_width of the spec's model). */
int pf_stream_features(const pf_stream_source *s);

/* The files the training entries expanded to. */
int pf_stream_files(const pf_stream_source *s);

/* With data.on_error skip: the bad lines skipped since the last call (each line counted once,
 * however often a rollback reads it), *total those so far, last[len] the last one's message
 * (file, line and column). Any thread. */
int64_t pf_stream_take_bad(pf_stream_source *s, int64_t *total, char *last, size_t len);

/* The splits they were cut into. */
int pf_stream_splits(const pf_stream_source *s);

/* Stops the reader and frees everything; NULL is fine. */
void pf_stream_close(pf_stream_source *s);

#endif
