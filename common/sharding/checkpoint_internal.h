/* checkpoint_internal.h - what the files of the checkpoint module share (private to
 * common/sharding/; the public API is psflow/checkpoint.h). Internal functions are ckpt_,
 * public ones pf_checkpoint_.
 *
 * The files are layered, each calling only those below it: checkpoint_paths.c (paths, names,
 * reading numbers back), manifest.c (the manifest, finding and pruning checkpoints),
 * shard_files.c (the ps files: writing, restoring, reading their shard lists), export.c
 * (merging a checkpoint into one model file).
 */
#ifndef PSFLOW_SHARDING_CHECKPOINT_INTERNAL_H
#define PSFLOW_SHARDING_CHECKPOINT_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/checkpoint.h"
#include "psflow/safetensors.h"

#define MANIFEST     "manifest.json"
#define MANIFEST_TMP "manifest.json.tmp"

/* --- checkpoint_paths.c ---------------------------------------------------------------------- */

/* out = dir + "/" + name; PF_ERR_INVALID (message names the path) when it does not fit. */
pf_status ckpt_join(char *out, size_t len, const char *dir, const char *name, pf_error *err);

/* "ps-<ps_task>.safetensors", the name of ps task ps_task's file in a step folder. */
void ckpt_ps_file_name(int ps_task, char out[PF_CKPT_FILE_NAME_MAX]);

/* Parses a non-empty string of decimal digits without sign into *out; -1 when it is not
 * one or overflows. Leading zeros are allowed only when `canonical` is false. */
int ckpt_parse_u64(const char *s, bool canonical, uint64_t *out);

/* "step-<N>" with N canonical decimal and at most INT64_MAX; -1 for any other name. */
int ckpt_parse_step_name(const char *name, int64_t *step);

/* Reads the integer member key of o in [min, max]; -1 when missing, mistyped or out of
 * range. */
int ckpt_get_int(json_t *o, const char *key, int64_t min, int64_t max, int64_t *out);

/* --- shard_files.c ---------------------------------------------------------------------------- */

/* One value shard found in a ps file's "psflow_shards" metadata. */
typedef struct shard_entry {
    const char *variable; /* borrowed from the parsed metadata (the caller keeps it alive) */
    const char *name;
    int shard, num_shards, rank;
    int64_t row_offset, rows, cols, var_rows, var_cols;
    const float *data; /* rows * cols floats, borrowed from the ps file */
} shard_entry;

/* Parses one ps file's "psflow_shards" (meta, parsed JSON) into entries appended to *v (*n
 * used of *cap; grown with pf_mallocarray, the caller frees *v), checking each against the
 * tensor of its name in st. Errors: PF_ERR_FORMAT (names path), PF_ERR_NOMEM. */
pf_status ckpt_collect_entries(const pf_safetensors *st, const char *path, json_t *meta,
                               shard_entry **v, size_t *n, size_t *cap, pf_error *err);

#endif
