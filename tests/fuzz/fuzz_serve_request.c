/* fuzz_serve_request.c - libFuzzer target for predict request bodies (serve/serve_request.h).
 *
 * The first byte picks the model (even: an mlp of 4 dense inputs; odd: two embedding tables
 * and 2 numeric inputs), the rest is the body. A body is either refused (400, 413 or 500 with
 * a message and a JSON pointer, nothing held) or parses into 1..MAX_INSTANCES examples of
 * finite floats whose id slots name a row or are padding; the answer written from them is
 * JSON that reads back. Seed corpus: tests/data/serve_request/, each file's first character
 * ("0" or "1") picking the model.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/buf.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "serve/serve_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_INSTANCES = 8 };

static pf_model_spec dense, embedded;

static void models(void) {
    dense.type = PF_MODEL_MLP;
    dense.inputs = 4;
    dense.outputs = 3;
    dense.n_hidden = 1;
    dense.hidden[0] = 5;
    embedded.type = PF_MODEL_MLP;
    embedded.outputs = 2;
    embedded.n_hidden = 1;
    embedded.hidden[0] = 4;
    embedded.n_embeddings = 2;
    strcpy(embedded.embeddings[0].name, "user");
    embedded.embeddings[0].vocab = 10;
    embedded.embeddings[0].dim = 2;
    embedded.embeddings[0].max_ids = 2;
    strcpy(embedded.embeddings[1].name, "item");
    embedded.embeddings[1].vocab = 5;
    embedded.embeddings[1].dim = 2;
    embedded.embeddings[1].max_ids = 3;
    embedded.numeric_inputs = 2;
}

static void check_parsed(const pf_model_spec *m, const serve_request *r) {
    if (r->n < 1 || r->n > MAX_INSTANCES || r->width != pf_model_input_width(m) || !r->x)
        abort();
    for (int i = 0; i < r->n * r->width; i++)
        if (!isfinite(r->x[i]))
            abort();
    for (int i = 0; i < r->n; i++)
        for (int f = 0; f < m->n_embeddings; f++) {
            const float *ids = r->x + (size_t)i * (size_t)r->width + pf_model_id_col(m, f);
            for (int k = 0; k < m->embeddings[f].max_ids; k++)
                if (pf_model_row_of(ids[k], m->embeddings[f].vocab) < -1)
                    abort();
        }
}

/* The answer to r, its outputs taken from its inputs, must be JSON of n rows. */
static void check_answer(const pf_model_spec *m, const serve_request *r) {
    int outputs = m->outputs;
    float *y = pf_mallocarray((size_t)r->n * (size_t)outputs, sizeof(float));
    if (!y)
        abort();
    for (int i = 0; i < r->n * outputs; i++)
        y[i] = r->x[i % (r->n * r->width)];
    pf_buf b;
    pf_buf_init(&b, 1 << 20);
    if (serve_answer_write(&b, 12, r->columnar, y, r->n, outputs) != PF_OK)
        abort();
    json_error_t je;
    json_t *root = json_loadb((const char *)b.data, b.len, 0, &je);
    json_t *rows = json_object_get(root, r->columnar ? "outputs" : "predictions");
    const char *version = json_string_value(json_object_get(root, "model_version"));
    if (!root || json_array_size(rows) != (size_t)r->n || !version || strcmp(version, "12") != 0)
        abort();
    json_decref(root);
    pf_buf_deinit(&b);
    pf_free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready)
        models(), ready = 1;
    if (size == 0)
        return 0;
    const pf_model_spec *m = (data[0] & 1) ? &embedded : &dense;
    serve_request r;
    pf_error err;
    int rc = serve_request_parse(m, (const char *)data + 1, size - 1, MAX_INSTANCES, &r, &err);
    if (rc != 0) {
        if ((rc != 400 && rc != 413 && rc != 500) || err.message[0] == '\0' ||
            (err.pointer[0] != '\0' && err.pointer[0] != '/') || r.x || r.n != 0)
            abort();
        return 0;
    }
    check_parsed(m, &r);
    check_answer(m, &r);
    serve_request_deinit(&r);
    return 0;
}
