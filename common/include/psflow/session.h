/* session.h - one process training a whole job: the engine behind `psflow train` and the
 * training benchmark, and the reference that distributed runs are compared with.
 *
 * A session owns the model, the parameters and optimizer slots (in backend memory), the
 * train and test sets and the sampler. Each pf_session_step() reads the next batch of
 * training.batch_size examples from the shuffled stream (data.h), computes the gradient of
 * the mean loss and applies the optimizer, exactly what a parameter server does with the
 * averaged gradients of its workers. With replicas_per_worker K > 1 the batch is K *
 * training.batch_size examples, split over K in-graph replicas whose gradients are averaged
 * (towers.h), as one worker with K replicas computes it. Not thread-safe: one thread creates,
 * steps and destroys a session.
 */
#ifndef PSFLOW_SESSION_H
#define PSFLOW_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "psflow/backend.h"
#include "psflow/data.h"
#include "psflow/dyn_table.h"
#include "psflow/model.h"
#include "psflow/spec.h"
#include "psflow/tensor.h"

typedef struct pf_session_options {
    const pf_backend *backend; /* NULL: each replica's device of the spec (devices[r]) */
    bool load_test;            /* also load the test set (when the spec names one) */
} pf_session_options;

typedef struct pf_session pf_session;

/* Loads data, builds the model and initialises the parameters from training.seed. The
 * spec is copied; with data.streaming the training files are read as streams (stream.h), one
 * per replica. Errors: those of pf_backend_for_device, pf_dataset_load or pf_stream_open
 * (PF_ERR_IO for
 * unreadable data, PF_ERR_FORMAT / PF_ERR_SPEC for bad data) and PF_ERR_NOMEM, each with
 * a one-line message in err. */
pf_status pf_session_create(const pf_job_spec *spec, const pf_session_options *options,
                            pf_session **out, pf_error *err);
void pf_session_destroy(pf_session *s);

/* One global step; returns the batch's mean loss, or NaN without a step when the streamed
 * input could not give the batch (pf_session_input_error). */
float pf_session_step(pf_session *s);

/* PF_OK, or why the last step's streamed batch could not be read (a bad line named by file,
 * line and column, or too many with data.on_error skip; err filled). */
pf_status pf_session_input_error(const pf_session *s, pf_error *err);

struct pf_stream_source;
/* The streamed training files (data.streaming: one stream per replica), or NULL. */
const struct pf_stream_source *pf_session_input(const pf_session *s);

/* With streamed input and data.on_error skip: the bad lines skipped since the last call,
 * *total those so far and last[len] the last one's message (pf_stream_take_bad); 0 (and
 * *total 0) without streamed input. */
int64_t pf_session_take_bad(pf_session *s, int64_t *total, char *last, size_t len);

/* Steps applied so far. */
int64_t pf_session_global_step(const pf_session *s);

/* Evaluates the current parameters on the test set (or, when there is none, on the train
 * set) in batches; fills *out, out->auc too for a two-class model (else NaN). */
void pf_session_evaluate(pf_session *s, pf_eval *out);

/* Whether evaluation uses a separate test set. */
bool pf_session_has_test_set(const pf_session *s);

/* Copies the current parameters into host memory params[pf_model_num_params]: of the job's
 * model, or with dynamic tables of its compact model (dyn_batch.h; the dynamic tables' part
 * then holds the rows of the last batch the session computed on). */
void pf_session_read_params(const pf_session *s, float *params);

/* Writes the variables under their TensorFlow names as safetensors (metadata: job name,
 * global step, model type), a dynamic table's in place of it the tensors extra[0 .. n_extra)
 * (dyn_checkpoint.h: the caller takes them from pf_session_table), which must stay valid
 * during the call. */
pf_status pf_session_save(const pf_session *s, const char *path, const pf_tensor_view *extra,
                          int n_extra, pf_error *err);

/* The model the session computes on: the job's, or with dynamic tables its compact model
 * (pf_model_num_params of it is the length of pf_session_read_params). */
const pf_model_spec *pf_session_model(const pf_session *s);

/* Dynamic table f of the model (NULL: table f is fixed), the session's own. */
pf_dyn_table *pf_session_table(const pf_session *s, int f);

const pf_dataset *pf_session_train_set(const pf_session *s);
/* The set pf_session_evaluate uses: the test set, or the train set when there is none. */
const pf_dataset *pf_session_eval_set(const pf_session *s);
const pf_backend *pf_session_backend(const pf_session *s);
const pf_job_spec *pf_session_spec(const pf_session *s);

#endif
