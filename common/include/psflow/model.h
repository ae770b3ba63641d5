/* model.h - the models a job spec names, as stacks of dense layers over one flat parameter
 * vector, optionally fed by embedding lookups.
 *
 * Every model is layers 0..L-1 of y = act(x . kernel + bias); the last layer has no
 * activation and feeds the loss (mean squared error for `linear`, softmax cross-entropy
 * for `softmax` and `mlp`). `linear` and `softmax` are one layer; `mlp` has one layer per
 * hidden width plus the output layer.
 *
 * Parameters live in one flat float32 vector, variables in creation order, each a named
 * view with TensorFlow's names and shapes: dense_0/kernel [in, out], dense_0/bias [out],
 * dense_1/kernel, ... A parameter server can therefore hold any range of the vector; the
 * layout is a pure function of the model spec (pf_model_layout), identical in every
 * process.
 *
 * A model with embeddings (spec.h, pf_embedding_spec) starts its vector with one table per
 * feature, "<name>/embeddings" [vocab, dim], and reads sparse examples: an example is
 * pf_model_input_width floats, for each feature in order max_ids id slots then max_ids
 * weight slots. Ids are whole numbers 0 .. vocab - 1 held exactly in float32; a slot with
 * id -1 (weight 0) is padding. Each feature's weighted rows are combined (sum, mean,
 * sqrtn) into dim inputs of dense_0, features side by side, and after the last feature's
 * slots come model.numeric_inputs numbers that go to dense_0 as they are, after the
 * features' inputs (numeric columns beside categorical ones); the gradient of a table is
 * zero except on the rows the batch named. Any other id (NaN, negative, a fraction, past
 * the table) makes that example's outputs NaN, so training's non-finite handling sees it.
 * Lookups read and write host memory: such a model needs a host-memory backend.
 *
 * A dynamic table (kind dynamic, dyn_table.h) is keyed by 64-bit ids and holds no part of
 * the vector: its variable has shape [0, width] and no elements. In an example each of its
 * ids takes PF_DYN_ID_SLOTS slots, whole numbers of PF_DYN_ID_BITS bits each, lowest first
 * (pf_model_put_id, pf_model_get_id; padding: -1 in every slot), then come its max_ids
 * weights. A model computes on fixed tables only: pf_model_create refuses a dynamic one, and
 * a trainer hands its model each batch's rows as a fixed table (dyn_batch.h).
 *
 * A `dlrm` model (DLRM-style, host memory as every model with embeddings) has besides its
 * tables a bottom MLP "bottom_<l>/kernel|bias" over the numeric inputs, whose last width is
 * the embeddings' shared dim; dense_0's inputs are the bottom output followed by the dot
 * product of every pair (i < j) among it and the features' vectors, and dense_<l> is the top
 * MLP. Every layer but the last is activated, the bottom's last included.
 *
 * A pf_model owns the activation and gradient scratch buffers for batches of up to
 * max_batch examples, in the memory of its backend. It is not thread-safe; use one per
 * thread.
 */
#ifndef PSFLOW_MODEL_H
#define PSFLOW_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/backend.h"
#include "psflow/spec.h"

#define PF_MAX_LAYERS   (PF_MAX_HIDDEN + 1)
#define PF_MAX_VARS     (2 * PF_MAX_LAYERS + 2 * PF_MAX_HIDDEN + PF_MAX_EMBEDDINGS)
#define PF_VAR_NAME_MAX 32

typedef struct pf_var_info {
    char name[PF_VAR_NAME_MAX]; /* "dense_0/kernel", "user_id/embeddings" */
    int rank;                   /* 2 for kernels and tables, 1 for biases */
    int64_t shape[2];           /* [in, out], [vocab, dim] or [out] (shape[1] = 1 for rank 1) */
    size_t offset;              /* first element in the flat vector */
    size_t count;               /* elements */
} pf_var_info;

#define PF_DYN_ID_SLOTS 3  /* float slots of one id of a dynamic table */
#define PF_DYN_ID_BITS  22 /* bits of the id in each (3 x 22 >= 64), exact in a float */

/* Float slots one id of table e takes in an example: 1, or PF_DYN_ID_SLOTS when dynamic. */
static inline int pf_model_id_slots(const pf_embedding_spec *e) {
    return e->kind == PF_TABLE_DYNAMIC ? PF_DYN_ID_SLOTS : 1;
}

/* Floats of table e's part of an example: its id slots, then its max_ids weights. */
static inline int pf_model_feature_width(const pf_embedding_spec *e) {
    return (pf_model_id_slots(e) + 1) * e->max_ids;
}

/* Writes id k of a dynamic table's feature whose first slot is ids[0]. */
void pf_model_put_id(float *ids, int k, uint64_t id);

/* Reads id k of a dynamic table's feature whose first slot is ids[0] into *id: 1 for an id,
 * 0 for padding, -1 for slots that hold no id (not whole numbers of PF_DYN_ID_BITS bits, or
 * past 64 bits). */
int pf_model_get_id(const float *ids, int k, uint64_t *id);

/* Fills vars[0..n) with the model's variables in creation order and returns n (at most
 * PF_MAX_VARS). */
int pf_model_layout(const pf_model_spec *spec, pf_var_info vars[PF_MAX_VARS]);

/* The index of the first element of x[0..n) that is NaN or infinite, or n when every one
 * is finite (x is host memory). */
size_t pf_first_nonfinite(const float *x, size_t n);

/* The variable holding element i of the flat vector into *out; -1 when i is past the end. */
int pf_model_var_at(const pf_model_spec *spec, size_t i, pf_var_info *out);

/* Floats of one example as the model reads it: model.inputs for a dense model, the sum of
 * 2 * max_ids over the features plus numeric_inputs for a model with embeddings. */
int pf_model_input_width(const pf_model_spec *spec);

/* Whether the embeddings are within the spec's limits (1..PF_MAX_EMBEDDINGS of them, each
 * vocab 1..PF_MAX_VOCAB (a dynamic table: max_rows 1..PF_DYN_MAX_ROWS - 1),
 * dim 1..PF_MAX_EMBEDDING_DIM, max_ids 1..PF_MAX_IDS): what code
 * given a pf_model_spec by hand checks before trusting it. */
bool pf_model_embeddings_valid(const pf_model_spec *spec);

/* Fills an example of a model with embeddings (pf_model_input_width floats) with padding:
 * every id slot -1 (each slot of a dynamic table's ids too), every weight 0, every numeric
 * input 0. */
void pf_model_pad_example(const pf_model_spec *spec, float *row);

/* The row an id slot names in a table of `vocab` rows: -1 for padding (id -1), -2 for an id
 * that names no row (NaN, negative, a fraction, past the table), else the row. */
int64_t pf_model_row_of(float id, int64_t vocab);

/* The rows of fixed table f that `count` examples x (pf_model_input_width slots each) name,
 * once each and ascending, into rows (room for count x max_ids); returns how many. Padding
 * and ids the table does not have name no row. */
uint32_t pf_model_batch_rows(const pf_model_spec *spec, int f, const float *x, int count,
                             uint32_t *rows);

/* The slot of example 0's first id of table f (its ids, then as many weights, follow). */
int pf_model_id_col(const pf_model_spec *spec, int f);

/* A classifier of two classes: its evaluations have scores and an AUC (pf_eval). */
static inline bool pf_model_two_class(const pf_model_spec *spec) {
    return spec->type != PF_MODEL_LINEAR && spec->outputs == 2;
}

/* Floats in a row of table f: its dim, plus one wide weight per output with model.wide. */
static inline int pf_model_row_width(const pf_model_spec *spec, int f) {
    return spec->embeddings[f].dim + (spec->wide ? spec->outputs : 0);
}

/* Inputs of dense_0: model.inputs, or the sum of the embedding dims plus numeric_inputs. */
int pf_model_dense_inputs(const pf_model_spec *spec);

/* Total parameters (floats) of the model. */
size_t pf_model_num_params(const pf_model_spec *spec);

/* Deterministic initial values into host memory params[num_params]: Glorot-uniform
 * kernels (limit sqrt(6 / (in + out))), zero biases, embedding tables uniform with the
 * standard deviation 1/sqrt(dim) of TensorFlow's embedding_column (limit sqrt(3 / dim)),
 * drawn from `seed`. */
void pf_model_init_params(const pf_model_spec *spec, uint64_t seed, float *params);

/* Ranges of the vector pf_model_init_params fills, without the rest of it (what a ps
 * task needs for its shards): elements [offsets[r], offsets[r] + counts[r]) into
 * outs[r][counts[r]], for ranges in increasing, non-overlapping order. The random stream
 * is drawn up to the last range's end (time proportional to it, no memory beyond outs). */
void pf_model_init_ranges(const pf_model_spec *spec, uint64_t seed, int n_ranges,
                          const size_t *offsets, const size_t *counts, float *const *outs);

/* Forward + backward FLOPs per example counted the usual way, 6 * sum(in * out). */
double pf_model_flops_per_example(const pf_model_spec *spec);

typedef struct pf_model pf_model;

/* New model with scratch space for up to max_batch (>= 1) examples. Errors: PF_ERR_NOMEM,
 * PF_ERR_INVALID (max_batch < 1, a dynamic table: dyn_batch.h runs those), PF_ERR_UNSUPPORTED
 * (embeddings on a backend whose memory is not the host's). */
pf_status pf_model_create(const pf_model_spec *spec, const pf_backend *be, int max_batch,
                          pf_model **out);
void pf_model_destroy(pf_model *m);

/* For a caller that leaves the tables' part of its gradient buffer as pf_model_train_step
 * wrote it (it only reads it) from one step to the next: each step then zeroes only the rows
 * the previous step wrote, not the whole tables, so that a step costs O(batch) whatever the
 * vocabulary. `zeroed`: a gradient buffer that holds zeros now (a fresh buffer of a backend
 * with alloc_zeroed), or NULL; the first step on any other buffer zeroes it whole. No-op
 * without embeddings. PF_ERR_NOMEM. */
pf_status pf_model_keep_grads_sparse(pf_model *m, const float *zeroed);

const pf_backend *pf_model_backend(const pf_model *m);

/* One forward and backward pass over `batch` (1..max_batch) examples.
 * params, grads: [num_params] in backend memory; grads is overwritten with the gradient of
 * the mean loss over the batch. x: [batch, pf_model_input_width] backend memory. Targets, backend
 * memory: `labels` [batch] int32 for classification models (softmax, mlp), `targets`
 * [batch] float for linear; the other may be NULL. Returns the mean loss. */
float pf_model_train_step(pf_model *m, const float *params, const float *x, const float *targets,
                          const int32_t *labels, int batch, float *grads);

/* Running evaluation totals. */
typedef struct pf_eval {
    int64_t examples;
    int64_t correct; /* classification only */
    double loss_sum; /* sum of per-example losses */
    /* Two-class models: when not NULL, pf_model_eval_batch writes each example's score
     * (logit 1 - logit 0, which orders examples as P(class 1) does) at
     * scores[examples], so the caller gives room for the whole set. */
    float *scores;
    double auc; /* area under the ROC curve of those scores, set by the caller (NaN: none) */
    double calibration; /* mean sigmoid(score) / mean label, set by the caller (NaN: none) */
} pf_eval;

/* Forward pass only, adding this batch's totals to *acc. Same arguments as train_step. */
void pf_model_eval_batch(pf_model *m, const float *params, const float *x, const float *targets,
                         const int32_t *labels, int batch, pf_eval *acc);

/* Forward pass only: the model's answer for `batch` (1..max_batch) examples x (backend
 * memory, as train_step) into host memory out[batch * outputs]: the class probabilities
 * (softmax of the logits, computed in double) for a classifier, the prediction for linear.
 * Non-finite inputs or ids the tables lack give NaN outputs, as in training. */
void pf_model_predict(pf_model *m, const float *params, const float *x, int batch, float *out);

#endif
