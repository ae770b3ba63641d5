/* data.c - the data set a job spec names (pf_dataset_load, see data.h): dispatched by
 * data.format to a reader (data_idx.c, data_csv.c, data_libsvm.c) or a generator
 * (synthetic_linear.c, ctr.c), then checked against the model it feeds.
 *
 * The files below it: dataset.c (the container and the sampler, calling nothing else here),
 * data_read.c (what the readers share), one file per format family, the generators.
 */
#include <stdio.h>
#include <string.h>

#include "psflow/data.h"
#include "psflow/model.h"
#include "psflow/stream.h"

static void set_pointer(pf_error *err, const char *pointer) {
    if (err)
        snprintf(err->pointer, sizeof err->pointer, "%s", pointer);
}

/* --- from a job spec ---------------------------------------------------------------------- */

static pf_status load_from_spec(const pf_job_spec *spec, bool test, pf_dataset *out,
                                pf_error *err) {
    const pf_data_spec *d = &spec->data;
    int n_files = test ? d->n_test : d->n_train;
    char *const *files = test ? d->test : d->train;
    const char *pointer = test ? "/data/test" : "/data/train";
    bool classification = spec->model.type != PF_MODEL_LINEAR;
    pf_status status;

    if (d->format == PF_DATA_SYNTHETIC_LINEAR) {
        int64_t n = test ? (d->n / 5 > 1 ? d->n / 5 : 1) : d->n;
        status =
            pf_synthetic_linear(d->w, d->b, d->noise, n, spec->training.seed, test ? 2 : 1, out);
        if (status == PF_ERR_NOMEM)
            return pf_error_set_offset(err, status, -1, "out of memory for %lld synthetic examples",
                                       (long long)n);
        if (status != PF_OK) {
            pf_error_set_offset(err, status, -1,
                                "synthetic_linear: %s (n %lld, w %g, b %g, noise %g)",
                                pf_strerror(status), (long long)n, d->w, d->b, d->noise);
            set_pointer(err, "/data");
        }
        return status;
    }
    if (d->format == PF_DATA_SYNTHETIC_CTR) {
        int64_t n = test ? (d->n / 5 > 1 ? d->n / 5 : 1) : d->n;
        status = pf_synthetic_ctr(spec, n, test ? 2 : 1, out);
        if (status == PF_OK && test && d->shift_step > 0) /* the test set: after the shift */
            pf_synthetic_ctr_shift(&spec->model, out->x, out->n);
        if (status != PF_OK) {
            pf_error_set_offset(err, status, -1, "synthetic_ctr: %s (n %lld)", pf_strerror(status),
                                (long long)n);
            set_pointer(err, "/data");
        }
        return status;
    }
    if (d->format == PF_DATA_CRITEO) {
        if (test && n_files == 0)
            return pf_error_set_offset(err, PF_ERR_NOT_FOUND, -1,
                                       "the job names no test set (data.test is empty)");
        char **paths = NULL;
        int n_paths = 0;
        pf_criteo_scaling sc;
        status = pf_input_expand(files, n_files, &paths, &n_paths, err);
        if (status == PF_OK && d->n_stats)
            status = pf_criteo_scaling_load(d->stats[0], &sc, err);
        if (status == PF_OK)
            status = pf_criteo_load_scaled(paths, n_paths, &spec->model, d->n_stats ? &sc : NULL,
                                           d->on_error == PF_ON_ERROR_SKIP ? d->max_bad_lines : -1,
                                           out, err);
        pf_input_free(paths, n_paths);
        if (status != PF_OK)
            set_pointer(err, pointer);
        return status;
    }
    if (d->format != PF_DATA_IDX && d->format != PF_DATA_CSV && d->format != PF_DATA_LIBSVM) {
        pf_error_set_offset(err, PF_ERR_UNSUPPORTED, -1, "unknown data format %d", (int)d->format);
        set_pointer(err, "/data/format");
        return PF_ERR_UNSUPPORTED;
    }

    int wanted = d->format == PF_DATA_IDX ? 2 : 1;
    if (test && n_files == 0)
        return pf_error_set_offset(err, PF_ERR_NOT_FOUND, -1,
                                   "the job names no test set (data.test is empty)");
    if (n_files != wanted) {
        pf_error_set_offset(err, PF_ERR_SPEC, -1, "data.%s needs %d file%s for %s, got %d",
                            test ? "test" : "train", wanted, wanted > 1 ? "s" : "",
                            d->format == PF_DATA_IDX   ? "idx (images, labels)"
                            : d->format == PF_DATA_CSV ? "csv"
                                                       : "libsvm",
                            n_files);
        set_pointer(err, pointer);
        return PF_ERR_SPEC;
    }
    if (d->format == PF_DATA_IDX)
        status = pf_idx_load(files[0], files[1], out, err);
    else if (d->format == PF_DATA_CSV && spec->model.n_embeddings > 0)
        status = pf_csv_load_ids(files[0], &spec->model, classification, out, err);
    else if (d->format == PF_DATA_CSV)
        status = pf_csv_load(files[0], spec->model.inputs, classification, out, err);
    else if (spec->model.n_embeddings > 0)
        status =
            pf_libsvm_load_ids(files[0], &spec->model, d->index_base, classification, out, err);
    else
        status =
            pf_libsvm_load(files[0], spec->model.inputs, d->index_base, classification, out, err);
    if (status != PF_OK)
        set_pointer(err, pointer);
    return status;
}

pf_status pf_dataset_load(const pf_job_spec *spec, bool test, pf_dataset *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    pf_error_clear(err);
    pf_status status = load_from_spec(spec, test, out, err);
    if (status != PF_OK)
        return status;

    const pf_model_spec *m = &spec->model;
    if (m->n_embeddings > 0 && out->features != pf_model_input_width(m)) {
        status = pf_error_set_offset(err, PF_ERR_SPEC, -1,
                                     "data has %d id and weight slots but the model's embeddings "
                                     "read %d",
                                     out->features, pf_model_input_width(m));
        set_pointer(err, "/model/embeddings");
    } else if (m->n_embeddings == 0 && out->features != m->inputs) {
        status =
            pf_error_set_offset(err, PF_ERR_SPEC, -1, "data has %d features but model.inputs is %d",
                                out->features, m->inputs);
        set_pointer(err, "/model/inputs");
    } else if (m->type != PF_MODEL_LINEAR && out->num_classes == 0) {
        /* Regression targets would be cast to class indices: refuse rather than read out of
         * bounds in the loss. */
        status =
            pf_error_set_offset(err, PF_ERR_SPEC, -1,
                                "data has regression targets but model.type %s needs class labels",
                                m->type == PF_MODEL_MLP ? "mlp" : "softmax");
        set_pointer(err, "/model/type");
    } else if (m->type != PF_MODEL_LINEAR && out->num_classes > m->outputs) {
        status = pf_error_set_offset(err, PF_ERR_SPEC, -1,
                                     "data has %d classes (labels 0..%d) but model.outputs is %d",
                                     out->num_classes, out->num_classes - 1, m->outputs);
        set_pointer(err, "/model/outputs");
    }
    if (status != PF_OK)
        pf_dataset_deinit(out);
    return status;
}
