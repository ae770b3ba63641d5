/* checkpoint.h - checkpoints on disk (docs/design.md section 6): per-ps shard files, the
 * manifest that makes a checkpoint exist, finding the newest complete one, restoring a ps
 * from it, pruning old ones and exporting one merged model file.
 *
 * Layout (contract):
 *
 *   <root>/<job>/step-<N>/ps-<i>.safetensors   one per ps task, i = 0..num_ps-1
 *   <root>/<job>/step-<N>/manifest.json        written last
 *
 * Each ps writes its own file (pf_checkpoint_write_ps); when every ps has acknowledged,
 * the chief writes the manifest (pf_checkpoint_write_manifest) to manifest.json.tmp,
 * fsyncs it, renames it into place and fsyncs the directory. A checkpoint is *complete*
 * when its manifest parses, names step N, and every file it lists exists with the listed
 * size (and, when asked, the listed CRC-32). Anything else under <job>/ (step folders
 * without a manifest, half-written .tmp files, other names) does not exist as far as
 * finding, restoring and exporting are concerned.
 *
 * manifest.json:
 *   {"job": "mnist", "step": 500, "created": "2024-05-01T12:00:00Z", "num_ps": 2,
 *    "files": [{"name": "ps-0.safetensors", "bytes": 123, "crc32": "0a1b2c3d"}, ...]}
 * files[i] is always ps-<i>.safetensors; crc32 is zlib's crc32() as 8 lowercase hex digits.
 *
 * A ps file holds, for each local shard, the values under the shard's name
 * ("dense_0/kernel", "dense_0/kernel/part_1") and the optimizer slots under TensorFlow's
 * slot variable names appended to it, as the optimizer's pf_optim_slots gives them
 * (optim.h): momentum "<shard>/Momentum"; adagrad "<shard>/Adagrad"; adam "<shard>/Adam"
 * (m) and "<shard>/Adam_1" (v). This module knows no optimizer by name. Shapes are the shard's:
 * [rows, cols] for kernels, [rows] for biases. String metadata: "psflow_job", "ps_task", "version"
 * (updates applied), "optimizer" (pf_optim_slots.optimizer), "psflow_shards", a JSON array with
 * one object per shard, {"name", "variable", "shard", "num_shards", "row_offset", "shape",
 * "variable_shape"}, so that export can merge the shards without the job spec, and
 * "psflow_spec", the job spec (pf_job_spec_to_json), so that the checkpoint names its model;
 * ps 0's file of a job with dynamic splits also "psflow_input_queue", the input's work queue
 * (ps/split_queue.h's bytes, as hex).
 *
 * The module is four files by job, in common/sharding/: checkpoint_paths.c (paths and names),
 * manifest.c (the manifest, finding complete checkpoints, pruning), shard_files.c (the ps
 * files: writing and restoring) and export.c (merging into one model file).
 *
 * All functions are reentrant and may be called from any thread; none keeps global state.
 * Paths longer than PF_CKPT_PATH_MAX - 1 are refused with PF_ERR_INVALID. Every file read
 * here is validated (sizes, names, shapes) and a bad one gives PF_ERR_FORMAT with a
 * message naming the file and the problem, never a crash.
 */
#ifndef PSFLOW_CHECKPOINT_H
#define PSFLOW_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/optim.h"
#include "psflow/placement.h"
#include "psflow/spec.h"
#include "psflow/status.h"
#include "psflow/tensor.h"

#define PF_CKPT_PATH_MAX      4096
#define PF_CKPT_FILE_NAME_MAX 32         /* "ps-1023.safetensors" */
#define PF_CKPT_MANIFEST_MAX  (4u << 20) /* refuse manifests larger than 4 MiB */

/* Flags for finding and listing checkpoints. */
#define PF_CKPT_VERIFY_CRC 1u /* also read every listed file and compare its CRC-32 */

/* --- paths ----------------------------------------------------------------------------- */

/* "<root>/<job>" and "<root>/<job>/step-<step>" into out[len]. PF_ERR_INVALID when the
 * result does not fit or step < 0. */
pf_status pf_checkpoint_job_dir(const char *root, const char *job, char *out, size_t len);
pf_status pf_checkpoint_step_dir(const char *root, const char *job, int64_t step, char *out,
                                 size_t len);

/* --- writing (ps tasks, then the chief) --------------------------------------------------- */

/* One ps task's local shards, as the ps holds them (a dynamic table's shards are no part of
 * them: their rows are extra tensors). All pointers are borrowed host memory. */
typedef struct pf_checkpoint_shards {
    int n;                            /* local shards */
    const pf_shard_info *info;        /* [n], local (creation) order */
    const float *const *values;       /* [n]: values[i] holds info[i].count floats */
    const float *const *const *slots; /* [n][num_slots]: slots[i][k] holds info[i].count
                                         floats; may be NULL when the optimizer has no slots */
    const char *input_queue;          /* ps 0 of a job with dynamic splits: the state of the
                                         input's work queue (hex), written as the metadata
                                         "psflow_input_queue"; NULL: none */
    int n_extra;                      /* tensors written beside the shards: a dynamic table's */
    const pf_tensor_view *extra;      /* [n_extra] (dyn_checkpoint.h), any dtype; the caller
                                         has checked them (finite), their names unique */
} pf_checkpoint_shards;

/* Writes step_dir/ps-<ps_task>.safetensors (creating step_dir and its parents as needed,
 * then fsyncing step_dir after the rename). `version` is the number of updates the ps has
 * applied; `spec` gives the job name and the model layout (variable names and shapes for
 * "psflow_shards"); `optim` the slots shards carries and their names (the job's:
 * pf_optim_slots_of(&spec->optimizer)). On success *path_out (when not
 * NULL, path_len bytes) receives the file's path and *bytes_out (when not NULL) its size.
 * Errors: PF_ERR_INVALID (a shard whose var index, shape or count disagrees with the
 * model, or missing slot data), PF_ERR_NONFINITE (a value or slot is NaN or infinite:
 * nothing is written), PF_ERR_IO (names the path and OS error), PF_ERR_NOMEM.
 * Rewriting the file of a committed checkpoint makes that checkpoint incomplete until its
 * manifest is written again. */
pf_status pf_checkpoint_write_ps(const char *step_dir, int ps_task, uint64_t version,
                                 const pf_job_spec *spec, const pf_optim_slots *optim,
                                 const pf_checkpoint_shards *shards, char *path_out,
                                 size_t path_len, int64_t *bytes_out, pf_error *err);

/* One file a manifest lists. */
typedef struct pf_checkpoint_file {
    char name[PF_CKPT_FILE_NAME_MAX]; /* "ps-<i>.safetensors" */
    int64_t bytes;
    uint32_t crc32;
} pf_checkpoint_file;

/* A parsed manifest.json. Plain value: pf_checkpoint_manifest_deinit frees `files`. */
typedef struct pf_checkpoint_manifest {
    char job[PF_NAME_MAX + 1];
    int64_t step;
    char created[32]; /* RFC 3339 UTC, "2024-05-01T12:00:00Z" */
    int num_ps;
    pf_checkpoint_file *files; /* [num_ps], files[i].name == "ps-<i>.safetensors"; owned */
} pf_checkpoint_manifest;

/* Makes the checkpoint in step_dir exist: stats and checksums ps-0 .. ps-<num_ps-1>
 * .safetensors and writes manifest.json as described above. Call it after every ps
 * acknowledged its file. If out is not NULL it receives the manifest written (caller
 * deinits it). Errors: PF_ERR_NOT_FOUND (a ps file is missing; the message names it and
 * the ps task), PF_ERR_INVALID (num_ps out of 1..PF_MAX_REPLICAS, step < 0, a job name
 * longer than PF_NAME_MAX), PF_ERR_IO, PF_ERR_NOMEM. A failure leaves no manifest.json.tmp
 * and no new manifest.json, except when only the final fsync of step_dir fails (the
 * manifest is then in place but may not survive a crash). */
pf_status pf_checkpoint_write_manifest(const char *step_dir, const char *job, int64_t step,
                                       int num_ps, pf_checkpoint_manifest *out, pf_error *err);

/* --- reading manifests, finding checkpoints ------------------------------------------------ */

/* Parses step_dir/manifest.json into *out (no prior init; nothing to free on failure).
 * Extra keys are ignored. Errors: PF_ERR_NOT_FOUND (no manifest.json), PF_ERR_FORMAT
 * (not JSON, a missing or mistyped field, num_ps outside 1..PF_MAX_REPLICAS, files[i] not
 * named ps-<i>.safetensors, a crc32 that is not 8 hex digits, larger than
 * PF_CKPT_MANIFEST_MAX), PF_ERR_IO, PF_ERR_NOMEM. */
pf_status pf_checkpoint_manifest_read(const char *step_dir, pf_checkpoint_manifest *out,
                                      pf_error *err);

/* Frees what m owns and zeroes it; safe on a zeroed manifest. */
void pf_checkpoint_manifest_deinit(pf_checkpoint_manifest *m);

/* Checks that every file m lists exists in step_dir as a regular file of the listed size
 * and, with PF_CKPT_VERIFY_CRC in flags, has the listed CRC-32. Errors: PF_ERR_NOT_FOUND
 * (a file is missing), PF_ERR_FORMAT (size or checksum differs), PF_ERR_IO, PF_ERR_NOMEM;
 * the message names the file. */
pf_status pf_checkpoint_verify(const char *step_dir, const pf_checkpoint_manifest *m,
                               unsigned flags, pf_error *err);

/* Steps of the complete checkpoints under job_dir ("<root>/<job>"), ascending, as a new
 * array *steps (caller frees with pf_free; NULL when *n is 0). Folders not named
 * step-<N> (N decimal, no sign, no leading zeros) are ignored, as are incomplete ones.
 * Errors: PF_ERR_NOT_FOUND (job_dir does not exist), PF_ERR_RANGE (more than 2^26 step
 * folders), PF_ERR_IO, PF_ERR_NOMEM. */
pf_status pf_checkpoint_list(const char *job_dir, unsigned flags, int64_t **steps, int *n,
                             pf_error *err);

/* Finds the newest complete checkpoint under job_dir: *step receives its N and dir[len]
 * its step folder "<job_dir>/step-<N>". Errors: PF_ERR_NOT_FOUND (no complete checkpoint,
 * or no job_dir), PF_ERR_INVALID (dir too small), PF_ERR_RANGE, PF_ERR_IO, PF_ERR_NOMEM. */
pf_status pf_checkpoint_find_latest(const char *job_dir, unsigned flags, int64_t *step, char *dir,
                                    size_t len, pf_error *err);

/* Sets a bad checkpoint aside, never deleting it: renames step_dir to
 * "<step_dir>.corrupt-<YYYYMMDDTHHMMSSZ>" (UTC now; a "-<k>" suffix when that name is taken)
 * and fsyncs its parent, so that finding, listing and pruning no longer see it.
 * new_path[len] (may be NULL) receives the new name. Errors: PF_ERR_NOT_FOUND (step_dir is
 * gone: another process set it aside first), PF_ERR_INVALID (path too long), PF_ERR_IO. */
pf_status pf_checkpoint_set_aside(const char *step_dir, char *new_path, size_t len, pf_error *err);

/* --- restoring a ps ------------------------------------------------------------------------ */

/* One ps file loaded for restore. Opaque: owns the file's tensors. */
typedef struct pf_checkpoint_ps pf_checkpoint_ps;

/* Reads step_dir/ps-<ps_task>.safetensors and checks it holds every expected local shard
 * (info[0..n), the ps's placement entries in local order) with info[i].count elements, and
 * each of optim's slots for it. Errors: PF_ERR_NOT_FOUND (no such file),
 * PF_ERR_FORMAT (a tensor missing or of the wrong size, named in the message; a bad
 * "version", a "ps_task" other than ps_task or an "optimizer" other than optim's),
 * PF_ERR_UNSUPPORTED, PF_ERR_IO, PF_ERR_NOMEM. Tensors the ps does not expect are ignored.
 * The manifest is not consulted: pass a step_dir that pf_checkpoint_find_latest returned. */
pf_status pf_checkpoint_load_ps(const char *step_dir, int ps_task, const pf_shard_info *info, int n,
                                const pf_optim_slots *optim, pf_checkpoint_ps **out, pf_error *err);

/* Assembles shards info[0..n) (a ps's placement entries in local order, under the job's
 * model and partitioning) and optim's slots for them from the checkpoint in step_dir,
 * whatever number of ps tasks and partitioning wrote it: each file's "psflow_shards" says
 * which rows of which variable it holds, and every row of every shard must come from
 * exactly one of them (TensorFlow's save_slice_info). Reads one file at a time, so memory
 * is the shards' own size plus the largest file. The version is the lowest of the files'.
 * Errors: PF_ERR_FORMAT (a variable of another shape, rows missing or given twice, a bad
 * file, an optimizer other than optim's; the message names the file or the shard),
 * PF_ERR_NOT_FOUND (no manifest), PF_ERR_INVALID (a shard that does not fit spec's model),
 * PF_ERR_UNSUPPORTED, PF_ERR_IO, PF_ERR_NOMEM. Verify the files first
 * (pf_checkpoint_verify). */
pf_status pf_checkpoint_load_repartitioned(const char *step_dir, const pf_job_spec *spec,
                                           const pf_shard_info *info, int n,
                                           const pf_optim_slots *optim, pf_checkpoint_ps **out,
                                           pf_error *err);
void pf_checkpoint_ps_destroy(pf_checkpoint_ps *c);

/* The loaded version (updates applied when the file was written). */
uint64_t pf_checkpoint_ps_version(const pf_checkpoint_ps *c);

/* The "psflow_input_queue" metadata of a file loaded by pf_checkpoint_load_ps (borrowed,
 * valid until pf_checkpoint_ps_destroy), or NULL: none, or a repartitioned load. */
const char *pf_checkpoint_ps_input_queue(const pf_checkpoint_ps *c);

/* values[i] (info[i].count floats) and slots[i][k] (k < optim->n) for local shard
 * i, host memory borrowed from c and valid until pf_checkpoint_ps_destroy: exactly the
 * arguments ps_shards_restore() takes. slots is never NULL (its rows are empty when the
 * optimizer has no slots). */
const float *const *pf_checkpoint_ps_values(const pf_checkpoint_ps *c);
const float *const *const *pf_checkpoint_ps_slots(const pf_checkpoint_ps *c);

/* --- pruning ------------------------------------------------------------------------------- */

/* Keeps the newest `keep` (>= 1) complete checkpoints under job_dir and deletes every step
 * folder older than the oldest one kept, complete or not, and every abandoned attempt: a
 * folder older than the newest complete checkpoint that holds no manifest (one whose
 * manifest the chief moved aside to write it again is not abandoned). The caller writes
 * nothing older than its newest complete checkpoint (the chief prunes right after a commit,
 * when every ps has acknowledged it); folders newer than that checkpoint are left alone, so
 * a checkpoint being written is never touched. Only files this module writes
 * are removed (manifest.json first, so a half-deleted checkpoint is never complete, then
 * ps-<i>.safetensors and the .tmp of either); a folder that still holds anything else is
 * left in place and reported. *removed (may be NULL) receives the number of folders
 * deleted. Errors: PF_ERR_INVALID (keep < 1), PF_ERR_NOT_FOUND (no job_dir), PF_ERR_IO
 * (the first folder or file that could not be removed; pruning carries on with the rest),
 * PF_ERR_NOMEM. */
pf_status pf_checkpoint_prune(const char *job_dir, int keep, int *removed, pf_error *err);

/* --- export -------------------------------------------------------------------------------- */

/* A checkpoint merged into whole variables. Opaque: owns names and data. */
typedef struct pf_checkpoint_model pf_checkpoint_model;

/* Merges the value shards (never the slots) of a checkpoint into whole variables. `dir` is
 * either a step folder (it holds manifest.json, which must be complete) or a job folder
 * ("<root>/<job>", meaning its newest complete checkpoint). Files are verified against the
 * manifest including CRC-32. Each ps file's "psflow_shards" says where its shards go: the
 * shards of a variable are placed at their row offsets along axis 0 and must tile it
 * exactly (every row once, num_shards shards, the same variable_shape everywhere).
 * Errors: PF_ERR_NOT_FOUND (no complete checkpoint in dir; the message says so),
 * PF_ERR_FORMAT (bad manifest, file or shard metadata, shards that overlap or leave a
 * gap), PF_ERR_UNSUPPORTED, PF_ERR_RANGE, PF_ERR_IO, PF_ERR_NOMEM. Every ps file is held in
 * memory while merging, so the peak is about twice the model's size. */
pf_status pf_checkpoint_merge(const char *dir, pf_checkpoint_model **out, pf_error *err);
void pf_checkpoint_model_destroy(pf_checkpoint_model *m);

/* The job and step of the merged checkpoint (borrowed). */
const char *pf_checkpoint_model_job(const pf_checkpoint_model *m);
/* The job spec ps 0's file records (JSON, borrowed), or NULL for a checkpoint without one. */
const char *pf_checkpoint_model_spec(const pf_checkpoint_model *m);
int64_t pf_checkpoint_model_step(const pf_checkpoint_model *m);

/* Variables, sorted by name (strcmp), as views borrowed from m: "dense_0/kernel" [in, out],
 * "dense_0/bias" [out], ... */
int pf_checkpoint_model_count(const pf_checkpoint_model *m);
pf_tensor_view pf_checkpoint_model_get(const pf_checkpoint_model *m, int i);

/* Writes m as one safetensors file (variables sorted by name, metadata "psflow_job",
 * "global_step" and, when m has it, "psflow_spec") through pf_safetensors_write. Errors: PF_ERR_IO,
 * PF_ERR_NOMEM. */
pf_status pf_checkpoint_model_write(const pf_checkpoint_model *m, const char *path, pf_error *err);

/* Copies m's variables into params[pf_model_num_params(model)] (host memory) at the model's
 * layout (model.h), by name: every variable of the model must be in m with its number of
 * values. Errors: PF_ERR_FORMAT (the message names the variable). */
pf_status pf_checkpoint_model_params(const pf_checkpoint_model *m, const pf_model_spec *model,
                                     float *params, pf_error *err);

/* pf_checkpoint_merge(dir) then pf_checkpoint_model_write(out_path); *step (may be NULL)
 * receives the step exported. */
pf_status pf_checkpoint_export(const char *dir, const char *out_path, int64_t *step, pf_error *err);

#endif
