/* optim.h - TensorFlow's optimizers as pure functions over (params, grads, slots) ranges.
 *
 * A parameter server owns a range of the flat parameter vector and applies updates to just
 * that range, so every function here works on any contiguous slice: the caller passes
 * pointers to the slice's params, grads and slot variables (all in backend memory) and the
 * slice length. The update rules are those of tf.compat.v1.train's optimizers (see
 * backend.h for the exact formulas); the learning rate may decay by global step like
 * tf.compat.v1.train.exponential_decay.
 *
 * Slots: sgd has none; momentum has "momentum" (init 0); adagrad "accumulator" (init
 * initial_accumulator_value); adam "m" and "v" (init 0). Slot buffers are owned by the
 * caller; pf_optim_slot_init fills them. One table (pf_optim_slots_of) names the slots for
 * everything: the functions below, the ps, and the checkpoints that store the slots under
 * TensorFlow's slot variable names - so an optimizer added to it is checkpointed too.
 */
#ifndef PSFLOW_OPTIM_H
#define PSFLOW_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/backend.h"
#include "psflow/spec.h"

#define PF_OPTIM_MAX_SLOTS 2

/* An optimizer's slots as stored and restored: plain constant data. */
typedef struct pf_optim_slots {
    const char *optimizer;                /* the spec's name for it, "adam": checkpoint metadata */
    int n;                                /* slot vectors per parameter, 0..PF_OPTIM_MAX_SLOTS */
    const char *name[PF_OPTIM_MAX_SLOTS]; /* TensorFlow's slot names: "m", "v" */
    const char *variable[PF_OPTIM_MAX_SLOTS]; /* slot variable suffixes, "<var>/Adam" and
                                                 "<var>/Adam_1": checkpoint tensor names */
} pf_optim_slots;

/* The slots of spec's optimizer (static, never NULL). */
const pf_optim_slots *pf_optim_slots_of(const pf_optimizer_spec *spec);

/* Number of slot vectors (each as long as the params) the optimizer keeps: 0, 1 or 2. */
int pf_optim_num_slots(const pf_optimizer_spec *spec);

/* Slot name as TensorFlow calls it ("momentum", "accumulator", "m", "v"); NULL if
 * i >= pf_optim_num_slots(spec). */
const char *pf_optim_slot_name(const pf_optimizer_spec *spec, int i);

/* Fills slot i (n floats, backend memory) with its initial value. */
void pf_optim_slot_init(const pf_optimizer_spec *spec, const pf_backend *be, int i, float *slot,
                        size_t n);

/* Learning rate in force at `global_step` (0-based count of updates applied so far):
 * lr * decay_rate ^ (global_step / decay_steps), the exponent floored when staircase. */
double pf_optim_learning_rate(const pf_optimizer_spec *spec, int64_t global_step);

/* One update's constants: the rule and its learning rate at a global step (decay and adam's
 * bias correction worked out in double once), for applying the same update to many ranges,
 * such as the rows of a table, without working them out again for each. */
typedef struct pf_optim_step {
    pf_optimizer_type type;
    float lr; /* adam: the bias-corrected lr_t */
    float momentum, beta1, beta2, epsilon;
} pf_optim_step;

/* The update that pf_optim_apply makes at `global_step`. */
pf_optim_step pf_optim_prepare(const pf_optimizer_spec *spec, int64_t global_step);

/* Applies a prepared update to n params w from grads g (backend memory, as pf_optim_apply). */
void pf_optim_step_apply(const pf_optim_step *o, const pf_backend *be, size_t n, const float *g,
                         float *w, float *const *slots);

/* Applies one update to n params w from grads g, with slots[0..num_slots) for this range.
 * `global_step` is the number of updates applied before this one (adam's t = step + 1).
 * All pointers are backend memory. */
void pf_optim_apply(const pf_optimizer_spec *spec, const pf_backend *be, int64_t global_step,
                    size_t n, const float *g, float *w, float *const *slots);

/* Whether an update from a gradient that names some rows of a table (an embedding lookup's
 * IndexedSlices) changes those rows only, as in TensorFlow: sgd, momentum
 * (SparseApplyMomentum), adagrad (SparseApplyAdagrad) and lazy_adam (LazyAdamOptimizer) do;
 * adam does not (AdamOptimizer decays m and v of every row and moves every row by them),
 * so an adam step updates the whole table with a zero gradient on the rows not named. */
bool pf_optim_rows_only(const pf_optimizer_spec *spec);

/* A row just updated is read back for the finite check this many rows later: read at once,
 * its values would still be in the store buffer, written wider than they are read, and the
 * read would wait for them to reach the cache (about 10 ns a row; a second pass over rows
 * still in cache costs about 4, this about 3: bench/RESULTS.md). */
#define PF_OPTIM_CHECK_LAG 4

/* One update of some rows only (IndexedSlices), as TensorFlow's sparse kernels apply it:
 * row rows[j] of a row-major [?, width] block w (and of each slot) is updated from the
 * gradient row g[j * width .. (j + 1) * width) by the rule of pf_optim_apply; rows not
 * named keep their values and slots (SparseApplyMomentum, SparseApplyAdagrad, SGD's
 * scatter_sub, and LazyAdamOptimizer: m and v move only where the gradient names a row,
 * with the bias correction of global step t). rows must not repeat. Host or backend
 * memory, as pf_optim_apply.
 *
 * With `check` (host memory only), each row is tested for a NaN or infinite value soon after
 * its update, while it is still in cache (PF_OPTIM_CHECK_LAG rows later), and the index j of
 * the first row that came out non-finite is returned; n_rows when none did, and always
 * without `check`. */
size_t pf_optim_apply_rows(const pf_optimizer_spec *spec, const pf_backend *be, int64_t global_step,
                           size_t width, size_t n_rows, const uint32_t *rows, const float *g,
                           float *w, float *const *slots, bool check);

#endif
