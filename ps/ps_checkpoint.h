/* ps_checkpoint.h - a ps task's side of checkpoints: its shards (values, optimizer slots and
 * version) written into its file of a step folder when the chief asks, and restored from the
 * newest complete checkpoint of the job when the task starts. The files themselves are
 * psflow/checkpoint.h's.
 *
 * Called on the ps's service thread (write) or before it serves (restore): nothing else
 * touches the shards meanwhile.
 */
#ifndef PSFLOW_PS_PS_CHECKPOINT_H
#define PSFLOW_PS_PS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/spec.h"
#include "psflow/status.h"
#include "ps/shard.h"

/* Writes the shards of ps task `task` into <checkpoint_dir>/<job>/step-<step>/
 * ps-<task>.safetensors, with the input queue's state (ps 0 of a job with dynamic splits;
 * NULL: none) as its metadata; path[len] receives the file's path. Errors: PF_ERR_INVALID
 * (a path too long), PF_ERR_NOMEM, and those of pf_checkpoint_write_ps. */
pf_status ps_checkpoint_write(const ps_shards *shards, const pf_job_spec *spec, int task,
                              const char *checkpoint_dir, uint64_t step, const char *input_queue,
                              char *path, size_t len, pf_error *err);

/* Restores the shards from the newest complete checkpoint of the job under checkpoint_dir
 * that verifies (every file the manifest lists has its size and CRC-32, and this task's
 * file loads), when there is one, and says in note[len] what it did (a line for the task's
 * log: where it restored from, the step and version, and a CRC-32 of the values it will
 * now serve; or that it starts from the initial values). A checkpoint that does not verify
 * is set aside (pf_checkpoint_set_aside: renamed step-<N>.corrupt-<time>, never deleted),
 * a line on stderr names it, the bad file and the new name, and the next older one is
 * tried. Errors: PF_ERR_INVALID (a path too long), PF_ERR_NOMEM, a bad checkpoint that
 * cannot be renamed, and those of pf_checkpoint_find_latest (but PF_ERR_NOT_FOUND, which
 * means no checkpoint yet); the shards are unchanged on error. *input_queue receives a copy
 * (free with pf_free) of the input queue's state the file holds, or NULL (none, no
 * checkpoint, a repartitioned restore, an error). */
pf_status ps_checkpoint_restore(ps_shards *shards, const pf_job_spec *spec, int task,
                                const char *checkpoint_dir, char **input_queue, char *note,
                                size_t len, pf_error *err);

/* Restores the shards from the complete checkpoint `step` (a rollback the chief asks for:
 * every ps of the job restores the same one), verified as above, and says in note[len]
 * what it did. Errors: PF_ERR_NOT_FOUND (no complete checkpoint `step`), PF_ERR_INVALID,
 * PF_ERR_NOMEM, and those of verifying and loading; the shards are unchanged on error.
 * *input_queue as for ps_checkpoint_restore. */
pf_status ps_checkpoint_restore_step(ps_shards *shards, const pf_job_spec *spec, int task,
                                     const char *checkpoint_dir, uint64_t step, char **input_queue,
                                     char *note, size_t len, pf_error *err);

#endif
