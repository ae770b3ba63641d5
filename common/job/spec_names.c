/* spec_names.c - the spellings of the job spec's enums (spec.h): the tables the parser reads
 * and writes them by (spec_internal.h), the pf_*_name functions and pf_device_parse. The lowest
 * file of common/job/'s spec: it calls nothing else here.
 */
#include <stdlib.h>
#include <string.h>

#include "spec_internal.h"

const char *const pf_spec_model_names[] = {[PF_MODEL_LINEAR] = "linear",
                                           [PF_MODEL_SOFTMAX] = "softmax",
                                           [PF_MODEL_MLP] = "mlp",
                                           [PF_MODEL_DLRM] = "dlrm"};
const char *const pf_spec_activation_names[] = {[PF_ACT_NONE] = "none",
                                                [PF_ACT_RELU] = "relu",
                                                [PF_ACT_TANH] = "tanh",
                                                [PF_ACT_SIGMOID] = "sigmoid"};
const char *const pf_spec_format_names[] = {[PF_DATA_IDX] = "idx",
                                            [PF_DATA_CSV] = "csv",
                                            [PF_DATA_SYNTHETIC_LINEAR] = "synthetic_linear",
                                            [PF_DATA_LIBSVM] = "libsvm",
                                            [PF_DATA_SYNTHETIC_CTR] = "synthetic_ctr",
                                            [PF_DATA_CRITEO] = "criteo"};
const char *const pf_spec_combiner_names[] = {
    [PF_COMBINE_SUM] = "sum", [PF_COMBINE_MEAN] = "mean", [PF_COMBINE_SQRTN] = "sqrtn"};
const char *const pf_spec_table_kind_names[] = {
    [PF_TABLE_FIXED] = "fixed", [PF_TABLE_DYNAMIC] = "dynamic"};
const char *const pf_spec_optimizer_names[] = {[PF_OPT_SGD] = "sgd",
                                               [PF_OPT_MOMENTUM] = "momentum",
                                               [PF_OPT_ADAGRAD] = "adagrad",
                                               [PF_OPT_ADAM] = "adam",
                                               [PF_OPT_LAZY_ADAM] = "lazy_adam"};
const char *const pf_spec_mode_names[] = {[PF_MODE_ASYNC] = "async", [PF_MODE_SYNC] = "sync"};
const char *const pf_spec_on_error_names[] = {
    [PF_ON_ERROR_FAIL] = "fail", [PF_ON_ERROR_SKIP] = "skip"};
const char *const pf_spec_split_names[] = {
    [PF_SPLITS_STATIC] = "static", [PF_SPLITS_DYNAMIC] = "dynamic"};
const char *const pf_spec_nonfinite_names[] = {
    [PF_NONFINITE_FAIL] = "fail", [PF_NONFINITE_ROLLBACK] = "rollback"};
const char *const pf_spec_strategy_names[] = {
    [PF_PLACE_ROUND_ROBIN] = "round_robin", [PF_PLACE_GREEDY] = "greedy"};
const char *const pf_spec_partitioner_names[] = {[PF_PART_NONE] = "none",
                                                 [PF_PART_FIXED_SHARDS] = "fixed_shards",
                                                 [PF_PART_MIN_SIZE] = "min_size",
                                                 [PF_PART_MAX_SIZE] = "max_size"};
const char *const pf_spec_restart_names[] = {[PF_RESTART_NEVER] = "Never",
                                             [PF_RESTART_ON_FAILURE] = "OnFailure",
                                             [PF_RESTART_ALWAYS] = "Always",
                                             [PF_RESTART_EXIT_CODE] = "ExitCode"};
const char *const pf_spec_device_names[] = {
    [PF_DEVICE_CPU] = "cpu", [PF_DEVICE_CUDA] = "cuda", [PF_DEVICE_AUTO] = "auto"};
const char *const pf_spec_decay_names[] = {"exponential"};

static const char *name_of(const char *const *names, size_t n, int v) {
    return v >= 0 && (size_t)v < n ? names[v] : "unknown";
}

const char *pf_model_type_name(pf_model_type t) {
    return name_of(pf_spec_model_names, COUNT(pf_spec_model_names), (int)t);
}

const char *pf_activation_name(pf_activation a) {
    return name_of(pf_spec_activation_names, COUNT(pf_spec_activation_names), (int)a);
}

const char *pf_optimizer_type_name(pf_optimizer_type t) {
    return name_of(pf_spec_optimizer_names, COUNT(pf_spec_optimizer_names), (int)t);
}

const char *pf_combiner_name(pf_combiner c) {
    return name_of(pf_spec_combiner_names, COUNT(pf_spec_combiner_names), (int)c);
}

const char *pf_device_name(pf_device d) {
    return name_of(pf_spec_device_names, COUNT(pf_spec_device_names), (int)d);
}

pf_status pf_device_parse(const char *text, pf_device *device, int *index) {
    *device = PF_DEVICE_CPU;
    *index = 0;
    if (!text)
        return PF_ERR_SPEC;
    for (size_t i = 0; i < COUNT(pf_spec_device_names); i++) {
        if (strcmp(text, pf_spec_device_names[i]) == 0) {
            *device = (pf_device)i;
            return PF_OK;
        }
    }
    /* "cuda:N": N is 1 to 3 digits, without a sign or leading zeros, at most
     * PF_MAX_GPU_INDEX. */
    if (strncmp(text, "cuda:", 5) != 0)
        return PF_ERR_SPEC;
    const char *digits = text + 5;
    size_t n = strlen(digits);
    if (n == 0 || n > 3 || strspn(digits, "0123456789") != n || (n > 1 && digits[0] == '0'))
        return PF_ERR_SPEC;
    int value = atoi(digits);
    if (value > PF_MAX_GPU_INDEX)
        return PF_ERR_SPEC;
    *device = PF_DEVICE_CUDA;
    *index = value;
    return PF_OK;
}
