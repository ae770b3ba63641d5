/* serve_request.h - the body of a predict request and of its answer, in TensorFlow Serving's REST
 * shape (docs/serving.md).
 *
 * A request is a JSON object with either
 *   "instances": [EXAMPLE, ...]               the row form, answered with "predictions", or
 *   "inputs": [EXAMPLE, ...] | {NAME: [...]}  the columnar form, answered with "outputs",
 * and optionally "signature_name": "serving_default". An EXAMPLE is what the model reads:
 *   - an array of pf_model_input_width numbers, the example exactly as the model takes it
 *     (for a model with embeddings: each feature's max_ids id slots then as many weights,
 *     then the numeric inputs; pf_model_pad_example's layout), or
 *   - an object of named inputs: "x" (the dense inputs) for a model without embeddings; for
 *     a model with embeddings one key per feature (its name) whose value is an id, an array
 *     of at most max_ids ids, or {"ids": [...], "weights": [...]}, and "numeric" (an array of
 *     model.numeric_inputs numbers) when the model has numeric inputs. Every input is
 *     required (an empty id array means the feature has no id); no other key is allowed.
 * In the columnar object form each NAME holds one value per example, all of one length.
 * Numbers must be finite; ids whole numbers in [0, vocab).
 *
 * Pure functions of their arguments: no I/O, no globals; safe from any thread.
 */
#ifndef PSFLOW_SERVE_SERVE_REQUEST_H
#define PSFLOW_SERVE_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/buf.h"
#include "psflow/spec.h"
#include "psflow/status.h"

typedef struct serve_request {
    int n;        /* examples */
    int width;    /* floats per example: pf_model_input_width */
    float *x;     /* [n * width], owned (pf_free) */
    int columnar; /* the "inputs" form: the answer's key is "outputs" */
} serve_request;

/* Parses body[len] for a model. Returns 0 and fills *out, or the HTTP status of the refusal
 * with err->pointer the JSON pointer of the field at fault ("" for the whole body) and
 * err->message why: 400 for malformed JSON, a missing, unknown or ill-typed field, a wrong
 * shape, a non-finite number or an id the table lacks; 413 for more than max_instances
 * examples; 500 when memory runs out. *out holds nothing on a refusal. */
int serve_request_parse(const pf_model_spec *model, const char *body, size_t len, int max_instances,
                        serve_request *out, pf_error *err);
void serve_request_deinit(serve_request *r);

/* Appends the answer to out: {"model_version": "STEP", "predictions"|"outputs": [...]} with
 * one entry per example, `outputs` floats each (an array; every float printed so that it
 * reads back to the same float32). PF_ERR_NOMEM or PF_ERR_RANGE (out's cap). */
pf_status serve_answer_write(pf_buf *out, int64_t version, int columnar, const float *y, int n,
                             int outputs);

#endif
