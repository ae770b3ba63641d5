/* dyn_checkpoint.h - a dynamic embedding table (dyn_table.h) in a ps task's checkpoint file.
 *
 * A ps file (ps-<i>.safetensors, checkpoint.h) holds each dynamic table "<var>" it owns as
 * the tensors below, beside the fixed shards, so that the manifest's sizes and CRC-32s verify
 * them like every other byte of the file:
 *
 *   <var>/ids        U64 [n]       the rows' ids, least recently updated first
 *   <var>/steps      I64 [n]       the step of each row's latest update (non-decreasing)
 *   <var>            F32 [n, dim]  the rows' values
 *   <var>/<slot>     F32 [n, dim]  each optimizer slot, by the optimizer's slot variable
 *                                  suffix ("Adam", "Adam_1"; pf_optim_slots.variable)
 *   <var>/sketch     U8  [bytes]   the admission sketch's counters (absent when admission
 *                                  does not count)
 *   <var>/admission  U64 [3]       the sketch's counts since it last halved, draws made, and
 *                                  the table's seed (a restore refuses another seed: the
 *                                  sketch's cells and the draws depend on it)
 *   <var>/stats      I64 [3]       rows admitted, updates refused, rows evicted so far
 *
 * A restore into the same number of ps tasks puts every row back in its order, with the
 * sketch and the counters as they were: the table then decides as the one saved would have.
 * A restore into another number merges the rows every old file holds for the new task
 * (pf_dyn_owner) in step order, and sums the old sketches (no id counts below what its own
 * ps had counted; counters of other ids may read higher, as in any count-min sketch); its
 * counters start from zero. An export lists every row of a table across the files, by id.
 */
#ifndef PSFLOW_DYN_CHECKPOINT_H
#define PSFLOW_DYN_CHECKPOINT_H

#include <stdint.h>

#include "psflow/dyn_table.h"
#include "psflow/model.h"
#include "psflow/safetensors.h"
#include "psflow/status.h"
#include "psflow/tensor.h"

#define PF_DYN_CKPT_TENSORS  (6 + PF_DYN_MAX_SLOTS) /* tensors of one table at most */
#define PF_DYN_CKPT_NAME_MAX (PF_VAR_NAME_MAX + 32)

/* The tensors of one table, ready for pf_safetensors_write (beside the ps's other tensors).
 * It owns copies of the rows (a table's rows are scattered in memory), so the table may
 * change once it is taken. Its views point into the struct itself (names, admission,
 * stats): use it where pf_dyn_snapshot_take filled it, never a copy of it. */
typedef struct pf_dyn_snapshot {
    int n; /* tensors in views */
    pf_tensor_view views[PF_DYN_CKPT_TENSORS];
    char names[PF_DYN_CKPT_TENSORS][PF_DYN_CKPT_NAME_MAX];
    void *owned[PF_DYN_CKPT_TENSORS]; /* what views point at: pf_dyn_snapshot_free */
    uint64_t admission[3];
    int64_t stats[3];
    int64_t rows;
} pf_dyn_snapshot;

/* Takes table t as the tensors of variable `var` (at most PF_VAR_NAME_MAX characters), its
 * slots named by slot_suffix[0 .. the table's slots). PF_ERR_INVALID (a name too long, a
 * missing slot suffix), PF_ERR_NONFINITE (a value or slot is NaN or infinite: a checkpoint
 * keeps finite tables only; the message names the id), PF_ERR_NOMEM; *out is then empty. */
pf_status pf_dyn_snapshot_take(const pf_dyn_table *t, const char *var,
                               const char *const *slot_suffix, pf_dyn_snapshot *out, pf_error *err);
void pf_dyn_snapshot_free(pf_dyn_snapshot *s);

/* Restores `var` into t, an empty table of the configuration it was saved with, from the
 * files of the ps tasks of one checkpoint: files[0 .. n_files), file i ps task i's, read with
 * pf_safetensors_read_any. t becomes ps task `ps` of `n_ps`: when n_ps == n_files, from file
 * `ps` alone, whose every row must be that task's (pf_dyn_owner), with its sketch and
 * counters; otherwise the rows every file holds for it, merged in step order (ties: lower
 * file first, then file order), with the sum of every file's sketch. PF_ERR_FORMAT names the
 * file, the tensor and what is wrong: a tensor missing, of another dtype or shape (its dim,
 * a slot, the sketch's size), steps that decrease or are out of range, an id twice, a row of
 * another task, a value or slot not finite, another seed; PF_ERR_NOMEM. t is then to be
 * destroyed. When t would hold more than its max_rows rows (fewer ps tasks, ids that spread
 * unevenly, a lower max_rows): with `dropped` NULL, PF_ERR_RANGE (no row is dropped unsaid);
 * otherwise the least recently updated rows make room, as at max_rows in training, and
 * *dropped says how many (counted as evicted too). */
pf_status pf_dyn_restore(pf_dyn_table *t, const pf_safetensors *const *files, int n_files,
                         const char *var, const char *const *slot_suffix, int ps, int n_ps,
                         int64_t *dropped, pf_error *err);

/* Every row of `var` across the files of one checkpoint (each read with
 * pf_safetensors_read_any), sorted by id: *ids [*n] and *values [*n x dim] (pf_free both),
 * dim read from the files. PF_ERR_NOT_FOUND (the first file has no table `var`),
 * PF_ERR_FORMAT (as pf_dyn_restore; a file without the table, an id in two files, files that
 * disagree on dim), PF_ERR_NOMEM. */
pf_status pf_dyn_export_rows(const pf_safetensors *const *files, int n_files, const char *var,
                             uint64_t **ids, float **values, int64_t *n, int *dim, pf_error *err);

#endif
