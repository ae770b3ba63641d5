/* spec.c - the job spec: strict parsing, defaults and the normalised JSON form (spec.h).
 *
 * DESIGN: every object of the spec is described by a table of fields: key, kind, where the
 * value lives in pf_job_spec, range, default, and which types it applies to. One walker
 * parses any object against its table and another writes it back, so the accepted keys,
 * the checks, the defaults and the output order (docs/design.md section 2) cannot drift apart.
 * Objects whose first field is an enum that selects the others (model.type, data.format,
 * optimizer.type, training.mode, partitioner.type) are "typed": that field is read first,
 * then each other field is either applicable to the chosen value or rejected by name.
 * Fields that do not apply stay zero in pf_job_spec (except replicas_to_aggregate, which
 * always holds the effective count). Rules that span fields (output counts, path counts,
 * replicas_to_aggregate) live in a per-object check that runs once the object's own fields
 * are in; objects are parsed in table order, so a check may read objects parsed before it.
 * The tables' types are in spec_internal.h, the enums' spellings in spec_names.c, the
 * cross-field checks in spec_checks.c; spec_json.c writes a spec back by the same tables.
 */
#include "psflow/spec.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/text.h"

#include "spec_internal.h"

#define SPEC_MAX_DEPTH      32        /* deeper input is refused before jansson sees it */
#define SPEC_MAX_FILE_BYTES (1 << 20) /* pf_job_spec_load refuses larger files */
#define SHOWN_MAX           40        /* bytes of a user's string quoted in a message */

/* Enums are read and written through int (see get_enum/put_enum). */
_Static_assert(sizeof(pf_model_type) == sizeof(int), "enum size");
_Static_assert(sizeof(pf_activation) == sizeof(int), "enum size");
_Static_assert(sizeof(pf_data_format) == sizeof(int), "enum size");
_Static_assert(sizeof(pf_optimizer_type) == sizeof(int), "enum size");
_Static_assert(sizeof(pf_training_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(pf_placement_strategy) == sizeof(int), "enum size");
_Static_assert(sizeof(pf_partitioner_type) == sizeof(int), "enum size");
_Static_assert(sizeof(pf_restart_policy) == sizeof(int), "enum size");
_Static_assert(sizeof(pf_device) == sizeof(int), "enum size");
_Static_assert(sizeof(pf_combiner) == sizeof(int), "enum size");
_Static_assert(sizeof(pf_table_kind) == sizeof(int), "enum size");

/* --- the tables ------------------------------------------------------------------------------- */

static const field replicas_fields[] = {
    {"ps", K_INT, AT(replicas.ps), .min = 1, .max = PF_MAX_REPLICAS, .def = 1},
    {"worker", K_INT, AT(replicas.worker), .min = 1, .max = PF_MAX_REPLICAS, .def = 1},
    {"chief", K_INT, AT(replicas.chief), .min = 0, .max = 1},
    {"evaluator", K_INT, AT(replicas.evaluator), .min = 0, .max = 1},
};

#define EMBEDDING(member) AT(model.embeddings[0].member)
static const field embedding_fields[] = {
    {"name", K_NAME, EMBEDDING(name), .need = ALWAYS},
    /* written only when dynamic, so that a fixed table's form is as it was */
    {"kind", K_ENUM, EMBEDDING(kind), .names = pf_spec_table_kind_names, .max = PF_TABLE_DYNAMIC,
     .def = PF_TABLE_FIXED, .quiet_default = true},
    /* Required for fixed tables and refused for dynamic ones (pf_spec_check_model); default 0
     * stands for "absent". */
    {"vocab", K_INT64, EMBEDDING(vocab), .min = 1, .max = PF_MAX_VOCAB},
    {"dim", K_INT, EMBEDDING(dim), .min = 1, .max = PF_MAX_EMBEDDING_DIM, .need = ALWAYS},
    {"combiner", K_ENUM, EMBEDDING(combiner), .names = pf_spec_combiner_names,
     .max = PF_COMBINE_SQRTN},
    {"max_ids", K_INT, EMBEDDING(max_ids), .min = 1, .max = PF_MAX_IDS, .def = 1},
    {"hash", K_BOOL, EMBEDDING(hash), .def = false},
    /* Dynamic tables only (pf_spec_check_model); default 0 stands for "absent", and
     * probability's default 1 is written only when another value is given. */
    {"max_rows", K_INT64, EMBEDDING(max_rows), .min = 1, .max = PF_MAX_DYNAMIC_ROWS},
    {"min_count", K_INT, EMBEDDING(min_count), .min = 1, .max = PF_MAX_MIN_COUNT},
    {"probability", K_DOUBLE, EMBEDDING(probability), .real = R_SCALE, .def = 1,
     .quiet_default = true},
    {"steps_to_live", K_INT64, EMBEDDING(steps_to_live), .min = 1, .max = INT64_MAX},
    {"sketch_bytes", K_INT64, EMBEDDING(sketch_bytes), .min = 256, .max = 1LL << 34},
};
static const object_desc embedding_desc = {embedding_fields, COUNT(embedding_fields), false, NULL};

#define MLP         BIT(PF_MODEL_MLP)
#define DLRM        BIT(PF_MODEL_DLRM)
#define CLASSIFIERS (BIT(PF_MODEL_SOFTMAX) | BIT(PF_MODEL_MLP) | BIT(PF_MODEL_DLRM))
static const field model_fields[] = {
    {"type", K_ENUM, AT(model.type), .names = pf_spec_model_names, .max = PF_MODEL_DLRM,
     .need = ALWAYS},
    /* Required unless there are embeddings (pf_spec_check_model): default 0 stands for "absent". */
    {"inputs", K_INT, AT(model.inputs), .min = 1, .max = PF_MAX_UNITS},
    {"hidden", K_WIDTHS, AT(model.hidden), .count_at = AT(model.n_hidden), .min = 1,
     .max = PF_MAX_HIDDEN, .only = MLP | DLRM, .need = MLP | DLRM},
    {"bottom", K_WIDTHS, AT(model.bottom), .count_at = AT(model.n_bottom), .min = 1,
     .max = PF_MAX_HIDDEN, .only = DLRM, .need = DLRM},
    /* Linear's single output and the classifiers' >= 2 are checked in pf_spec_check_model. */
    {"outputs", K_INT, AT(model.outputs), .min = 1, .max = PF_MAX_UNITS, .def = 1,
     .need = CLASSIFIERS},
    {"activation", K_ENUM, AT(model.activation), .names = pf_spec_activation_names,
     .min = PF_ACT_RELU, .max = PF_ACT_SIGMOID, .def = PF_ACT_RELU, .only = MLP | DLRM},
    {"embeddings", K_LIST, AT(model.embeddings), .min = 1, .max = PF_MAX_EMBEDDINGS,
     .sub = &embedding_desc, .count_at = AT(model.n_embeddings),
     .stride = sizeof(pf_embedding_spec)},
    /* Only with embeddings (pf_spec_check_model); default 0 stands for "absent" (none). */
    {"numeric_inputs", K_INT, AT(model.numeric_inputs), .min = 1, .max = PF_MAX_UNITS},
    /* Only with embeddings (pf_spec_check_model); written only when on (min 1). */
    {"wide", K_BOOL, AT(model.wide), .min = 1, .def = false, .only = MLP},
};

#define FILES     (BIT(PF_DATA_IDX) | BIT(PF_DATA_CSV) | BIT(PF_DATA_LIBSVM) | BIT(PF_DATA_CRITEO))
#define SYNTHETIC BIT(PF_DATA_SYNTHETIC_LINEAR)
#define CTR       BIT(PF_DATA_SYNTHETIC_CTR)
#define STREAMED  (BIT(PF_DATA_CSV) | BIT(PF_DATA_LIBSVM) | BIT(PF_DATA_CRITEO))
/* An IDX pair streams as record ranges; it has no lines, so no bad lines to skip (on_error). */
#define SPLIT (STREAMED | BIT(PF_DATA_IDX))
static const field data_fields[] = {
    {"format", K_ENUM, AT(data.format), .names = pf_spec_format_names, .max = PF_DATA_CRITEO,
     .need = ALWAYS},
    /* Exact path counts per format are checked in pf_spec_check_data. */
    {"train", K_PATHS, AT(data.train), .count_at = AT(data.n_train), .min = 1,
     .max = PF_MAX_DATA_FILES, .only = FILES, .need = FILES},
    {"test", K_PATHS, AT(data.test), .count_at = AT(data.n_test), .min = 1,
     .max = PF_MAX_DATA_FILES, .only = FILES},
    {"w", K_DOUBLE, AT(data.w), .def = 2, .only = SYNTHETIC},
    {"b", K_DOUBLE, AT(data.b), .def = 10, .only = SYNTHETIC},
    {"noise", K_DOUBLE, AT(data.noise), .real = R_NONNEGATIVE, .def = 0.1, .only = SYNTHETIC},
    {"n", K_INT64, AT(data.n), .min = 1, .max = INT64_MAX, .def = 10000, .only = SYNTHETIC | CTR},
    /* Only with dynamic tables (pf_spec_check_data); default 0 stands for "absent". */
    {"distinct_ids", K_INT64, AT(data.distinct_ids), .min = 1, .max = 1LL << 40, .only = CTR},
    {"shift_step", K_INT64, AT(data.shift_step), .min = 1, .max = INT64_MAX, .only = CTR},
    {"zipf", K_DOUBLE, AT(data.zipf), .real = R_POSITIVE, .def = 1.1, .only = CTR},
    {"signal", K_DOUBLE, AT(data.signal), .real = R_NONNEGATIVE, .def = 1, .only = CTR},
    {"bias", K_DOUBLE, AT(data.bias), .def = -1.5, .only = CTR},
    {"index_base", K_INT, AT(data.index_base), .min = 0, .max = 1, .def = 1,
     .only = BIT(PF_DATA_LIBSVM)},
    {"streaming", K_BOOL, AT(data.streaming), .def = false, .only = SPLIT},
    {"split_mb", K_INT, AT(data.split_mb), .min = 1, .max = 1048576, .def = 64, .only = SPLIT},
    {"splits", K_ENUM, AT(data.splits), .names = pf_spec_split_names, .max = PF_SPLITS_DYNAMIC,
     .def = PF_SPLITS_STATIC, .only = SPLIT},
    {"on_error", K_ENUM, AT(data.on_error), .names = pf_spec_on_error_names,
     .max = PF_ON_ERROR_SKIP, .def = PF_ON_ERROR_FAIL, .only = STREAMED},
    {"max_bad_lines", K_INT64, AT(data.max_bad_lines), .min = 1, .max = 1LL << 40, .def = 1000,
     .only = STREAMED},
    {"stats", K_PATHS, AT(data.stats), .count_at = AT(data.n_stats), .min = 1, .max = 1,
     .only = BIT(PF_DATA_CRITEO)},
};

static const field decay_fields[] = {
    {"type", K_ENUM, NO_SLOT, .names = pf_spec_decay_names, .max = 0},
    {"decay_steps", K_INT64, AT(optimizer.decay.decay_steps), .min = 1, .max = INT64_MAX,
     .need = ALWAYS},
    {"decay_rate", K_DOUBLE, AT(optimizer.decay.decay_rate), .real = R_POSITIVE, .need = ALWAYS},
    {"staircase", K_BOOL, AT(optimizer.decay.staircase), .def = false},
};
static const object_desc decay_desc = {decay_fields, COUNT(decay_fields), false, NULL};

static const field optimizer_fields[] = {
    {"type", K_ENUM, AT(optimizer.type), .names = pf_spec_optimizer_names, .max = PF_OPT_LAZY_ADAM},
    {"learning_rate", K_DOUBLE, AT(optimizer.learning_rate), .real = R_POSITIVE, .def = 0.01},
    {"momentum", K_DOUBLE, AT(optimizer.momentum), .real = R_UNIT, .def = 0.9,
     .only = BIT(PF_OPT_MOMENTUM)},
    {"initial_accumulator_value", K_DOUBLE, AT(optimizer.initial_accumulator_value),
     .real = R_POSITIVE, .def = 0.1, .only = BIT(PF_OPT_ADAGRAD)},
    {"beta1", K_DOUBLE, AT(optimizer.beta1), .real = R_UNIT, .def = 0.9,
     .only = BIT(PF_OPT_ADAM) | BIT(PF_OPT_LAZY_ADAM)},
    {"beta2", K_DOUBLE, AT(optimizer.beta2), .real = R_UNIT, .def = 0.999,
     .only = BIT(PF_OPT_ADAM) | BIT(PF_OPT_LAZY_ADAM)},
    {"epsilon", K_DOUBLE, AT(optimizer.epsilon), .real = R_POSITIVE, .def = 1e-7,
     .only = BIT(PF_OPT_ADAM) | BIT(PF_OPT_LAZY_ADAM)},
    {"decay", K_OBJECT, NO_SLOT, .sub = &decay_desc, .present_at = AT(optimizer.decay.enabled)},
};

static const field training_fields[] = {
    {"mode", K_ENUM, AT(training.mode), .names = pf_spec_mode_names, .max = PF_MODE_SYNC},
    {"batch_size", K_INT, AT(training.batch_size), .min = 1, .max = 1048576, .def = 100},
    {"max_steps", K_INT64, AT(training.max_steps), .min = 1, .max = INT64_MAX, .def = 1000},
    /* Default 0 stands for "absent": pf_spec_check_training turns it into replicas.worker. */
    {"replicas_to_aggregate", K_INT, AT(training.replicas_to_aggregate), .min = 1, .max = INT_MAX,
     .only = BIT(PF_MODE_SYNC)},
    {"seed", K_UINT64, AT(training.seed), .min = 0, .max = INT64_MAX, .def = 1},
    {"eval_every_steps", K_INT64, AT(training.eval_every_steps), .min = 0, .max = INT64_MAX},
    {"on_nonfinite", K_ENUM, AT(training.on_nonfinite), .names = pf_spec_nonfinite_names,
     .max = PF_NONFINITE_ROLLBACK, .def = PF_NONFINITE_ROLLBACK},
    {"stall_timeout_secs", K_INT64, AT(training.stall_timeout_secs), .min = 1, .max = 604800,
     .def = 300},
    {"nonfinite_max_rollbacks", K_INT, AT(training.nonfinite_max_rollbacks), .min = 0, .max = 1000,
     .def = 3},
    {"nonfinite_lr_scale", K_DOUBLE, AT(training.nonfinite_lr_scale), .real = R_SCALE, .def = 1},
    {"prefetch", K_BOOL, AT(training.prefetch), .def = false, .only = BIT(PF_MODE_ASYNC)},
    /* Default -1 stands for "absent" (unbounded) and is not written back. */
    {"max_staleness", K_INT64, AT(training.max_staleness), .min = 0, .max = 1000000, .def = -1,
     .only = BIT(PF_MODE_ASYNC)},
    /* Default 0 stands for "absent" (steps only) and is not written back. */
    {"epochs", K_INT64, AT(training.epochs), .min = 1, .max = 1000000, .def = 0,
     .only = BIT(PF_MODE_ASYNC)},
};

#define FIXED    BIT(PF_PART_FIXED_SHARDS)
#define MIN_SIZE BIT(PF_PART_MIN_SIZE)
#define MAX_SIZE BIT(PF_PART_MAX_SIZE)
static const field partitioner_fields[] = {
    {"type", K_ENUM, AT(partitioner.type), .names = pf_spec_partitioner_names,
     .max = PF_PART_MAX_SIZE},
    {"num_shards", K_INT, AT(partitioner.num_shards), .min = 1, .max = INT_MAX, .only = FIXED,
     .need = FIXED},
    {"min_shard_bytes", K_INT64, AT(partitioner.min_shard_bytes), .min = 1, .max = INT64_MAX,
     .def = 262144, .only = MIN_SIZE},
    {"max_shard_bytes", K_INT64, AT(partitioner.max_shard_bytes), .min = 1, .max = INT64_MAX,
     .only = MAX_SIZE, .need = MAX_SIZE},
    /* Default -1 stands for "absent": pf_spec_check_partitioner applies the per-type default. */
    {"max_shards", K_INT, AT(partitioner.max_shards), .min = 0, .max = INT_MAX, .def = -1,
     .only = MIN_SIZE | MAX_SIZE},
};
static const object_desc partitioner_desc = {partitioner_fields, COUNT(partitioner_fields), true,
                                             pf_spec_check_partitioner};

static const field placement_fields[] = {
    {"strategy", K_ENUM, AT(placement), .names = pf_spec_strategy_names, .max = PF_PLACE_GREEDY},
    {"partitioner", K_OBJECT, NO_SLOT, .sub = &partitioner_desc},
};

static const field checkpoint_fields[] = {
    {"every_steps", K_INT64, AT(checkpoint.every_steps), .min = 0, .max = INT64_MAX},
    {"every_secs", K_INT64, AT(checkpoint.every_secs), .min = 0, .max = INT64_MAX, .def = 600},
    {"keep", K_INT, AT(checkpoint.keep), .min = 1, .max = INT_MAX, .def = 5},
};

static const field run_policy_fields[] = {
    {"restart_policy", K_ENUM, AT(run_policy.restart_policy), .names = pf_spec_restart_names,
     .max = PF_RESTART_EXIT_CODE, .def = PF_RESTART_ON_FAILURE},
    {"backoff_limit", K_INT, AT(run_policy.backoff_limit), .min = 0, .max = INT_MAX, .def = 3},
    {"active_deadline_seconds", K_INT64, AT(run_policy.active_deadline_seconds), .min = 0,
     .max = INT64_MAX},
    {"priority", K_INT, AT(run_policy.priority), .min = -1000, .max = 1000},
    {"preemptible", K_BOOL, AT(run_policy.preemptible), .def = true},
    /* Absent: "default" (pf_spec_check_run_policy). */
    {"queue", K_NAME, AT(run_policy.queue), .min = 0},
    {"priority_class", K_NAME, AT(run_policy.priority_class), .min = 0},
};

static const field serving_fields[] = {
    {"replicas", K_INT, AT(serving.replicas), .min = 1, .max = PF_MAX_SERVING_REPLICAS, .def = 1},
    {"port", K_INT, AT(serving.port), .min = 0, .max = 65535, .def = 0},
};

static const object_desc replicas_desc = {replicas_fields, COUNT(replicas_fields), false, NULL};
static const object_desc model_desc = {model_fields, COUNT(model_fields), true,
                                       pf_spec_check_model};
static const object_desc data_desc = {data_fields, COUNT(data_fields), true, pf_spec_check_data};
static const object_desc optimizer_desc = {optimizer_fields, COUNT(optimizer_fields), true, NULL};
static const object_desc training_desc = {training_fields, COUNT(training_fields), true,
                                          pf_spec_check_training};
static const object_desc placement_desc = {placement_fields, COUNT(placement_fields), false, NULL};
static const object_desc checkpoint_desc = {checkpoint_fields, COUNT(checkpoint_fields), false,
                                            NULL};
static const object_desc serving_desc = {serving_fields, COUNT(serving_fields), false, NULL};
static const object_desc run_policy_desc = {run_policy_fields, COUNT(run_policy_fields), false,
                                            pf_spec_check_run_policy};

/* Top level, in docs/design.md order. replicas comes before training: pf_spec_check_training
 * reads it. */
static const field spec_fields[] = {
    {"name", K_NAME, AT(name), .need = ALWAYS},
    {"replicas", K_OBJECT, NO_SLOT, .sub = &replicas_desc},
    {"model", K_OBJECT, NO_SLOT, .sub = &model_desc, .need = ALWAYS},
    {"data", K_OBJECT, NO_SLOT, .sub = &data_desc, .need = ALWAYS},
    {"optimizer", K_OBJECT, NO_SLOT, .sub = &optimizer_desc},
    {"training", K_OBJECT, NO_SLOT, .sub = &training_desc},
    {"placement", K_OBJECT, NO_SLOT, .sub = &placement_desc},
    {"checkpoint", K_OBJECT, NO_SLOT, .sub = &checkpoint_desc},
    {"run_policy", K_OBJECT, NO_SLOT, .sub = &run_policy_desc},
    {"serving", K_OBJECT, NO_SLOT, .sub = &serving_desc, .present_at = AT(serving.enabled)},
    /* Default 0 stands for "absent": "device", parsed next, settles the count. */
    {"replicas_per_worker", K_INT, AT(replicas_per_worker), .min = 1,
     .max = PF_MAX_REPLICAS_PER_WORKER},
    {"device", K_DEVICE, AT(devices), .names = pf_spec_device_names, .max = PF_DEVICE_AUTO,
     .count_at = AT(replicas_per_worker)},
};
const object_desc pf_spec_desc = {spec_fields, COUNT(spec_fields), false, pf_spec_check_devices};

/* --- small helpers ---------------------------------------------------------------------------- */

/* Length of the longest prefix of s[0..n) that does not split a UTF-8 sequence. */
static size_t utf8_cut(const char *s, size_t n) {
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* Copies a user's string for a one-line message: at most SHOWN_MAX bytes, cut on a UTF-8
 * boundary, control characters shown as '?'. Returns buf. */
static const char *shown(char buf[SHOWN_MAX + 4], const char *s) {
    size_t n = strlen(s);
    bool cut = n > SHOWN_MAX;
    if (cut)
        n = utf8_cut(s, SHOWN_MAX);
    for (size_t i = 0; i < n; i++)
        buf[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    strcpy(buf + n, cut ? "..." : "");
    return buf;
}

/* out = parent + "/" + key, the key escaped as RFC 6901 says (pf_text_pointer_add). */
static void child_ptr(char out[PTR_SIZE], const char *parent, const char *key) {
    snprintf(out, PTR_SIZE, "%s", parent);
    pf_text_pointer_add(out, PTR_SIZE, key);
}

static void index_ptr(char out[PTR_SIZE], const char *parent, size_t i) {
    snprintf(out, PTR_SIZE, "%s", parent);
    pf_text_pointer_add_index(out, PTR_SIZE, i);
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "real";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "unknown";
}

static pf_status type_error(pf_error *err, const char *ptr, const char *want, const json_t *v) {
    return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: expected %s, got %s", ptr, want, json_kind(v));
}

/* Appends sep (unless buf is empty) and text to buf, truncating within size. */
static void append(char *buf, size_t size, const char *sep, const char *text) {
    size_t n = strlen(buf);
    if (n + 1 < size)
        snprintf(buf + n, size - n, "%s%s", n ? sep : "", text);
}

/* "mlp", "min_size or max_size": the spellings of the type values in `mask`. */
static void type_list(char *buf, size_t size, const field *type_field, unsigned mask) {
    buf[0] = '\0';
    for (long long v = type_field->min; v <= type_field->max; v++)
        if (mask & BIT(v))
            append(buf, size, " or ", type_field->names[v]);
}

/* --- parsing ---------------------------------------------------------------------------------- */

/* Where a field is being parsed: its object's table, pointer and type value. */
typedef struct scope {
    const object_desc *desc;
    const char *ptr;
    int type; /* value of fields[0] for typed objects, else 0 */
} scope;

static pf_status parse_object(const object_desc *d, const json_t *obj, const char *ptr,
                              pf_job_spec *s, pf_error *err);

static pf_status missing(const scope *sc, const field *f, const char *fptr, pf_error *err) {
    if (f->need == ALWAYS)
        return pf_error_set(err, PF_ERR_SPEC, fptr, "missing required field '%s' in %s", f->key,
                            sc->ptr[0] ? sc->ptr : "the spec");
    char tptr[PTR_SIZE];
    child_ptr(tptr, sc->ptr, sc->desc->fields[0].key);
    return pf_error_set(err, PF_ERR_SPEC, fptr, "missing field '%s' (required when %s is %s)",
                        f->key, tptr, sc->desc->fields[0].names[sc->type]);
}

static void set_default(const field *f, pf_job_spec *s) {
    switch (f->kind) {
    case K_INT:
        *(int *)slot(s, f->at) = (int)f->def;
        break;
    case K_INT64:
        *(int64_t *)slot(s, f->at) = (int64_t)f->def;
        break;
    case K_UINT64:
        *(uint64_t *)slot(s, f->at) = (uint64_t)f->def;
        break;
    case K_DOUBLE:
        *(double *)slot(s, f->at) = f->def;
        break;
    case K_BOOL:
        *(bool *)slot(s, f->at) = f->def != 0;
        break;
    case K_ENUM:
        put_enum(s, f->at, (int)f->def);
        break;
    case K_DEVICE: {
        /* Every replica on the default device. */
        pf_device_spec *devices = slot(s, f->at);
        int *replicas = slot(s, f->count_at);
        if (*replicas == 0)
            *replicas = 1;
        for (int r = 0; r < *replicas; r++)
            devices[r] = (pf_device_spec){(pf_device)f->def, 0};
        break;
    }
    case K_NAME:
    case K_WIDTHS:
    case K_PATHS:
    case K_OBJECT:
    case K_LIST:
        break; /* none has a default: absent means empty (handled by the caller) */
    }
}

static pf_status get_integer(const field *f, const json_t *v, const char *ptr, long long *out,
                             pf_error *err) {
    if (!json_is_integer(v))
        return type_error(err, ptr, "an integer", v);
    long long x = json_integer_value(v);
    if (x >= f->min && x <= f->max) {
        *out = x;
        return PF_OK;
    }
    bool open_ended = f->max == INT_MAX || f->max == INT64_MAX;
    if (!open_ended)
        return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: must be between %lld and %lld, got %lld",
                            ptr, f->min, f->max, x);
    if (x < f->min)
        return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: must be >= %lld, got %lld", ptr, f->min, x);
    return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: must be at most %lld, got %lld", ptr, f->max,
                        x);
}

static pf_status get_double(const field *f, const json_t *v, const char *ptr, double *out,
                            pf_error *err) {
    if (!json_is_number(v))
        return type_error(err, ptr, "a number", v);
    double x = json_number_value(v);
    const char *rule = NULL;
    if (f->real == R_POSITIVE && !(x > 0))
        rule = "> 0";
    else if (f->real == R_NONNEGATIVE && !(x >= 0))
        rule = ">= 0";
    else if (f->real == R_UNIT && !(x >= 0 && x < 1))
        rule = "in [0, 1)";
    else if (f->real == R_SCALE && !(x > 0 && x <= 1))
        rule = "in (0, 1]";
    if (rule)
        return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: must be %s, got %g", ptr, rule, x);
    *out = x;
    return PF_OK;
}

static pf_status get_enum_value(const field *f, const json_t *v, const char *ptr, int *out,
                                pf_error *err) {
    if (!json_is_string(v))
        return type_error(err, ptr, "a string", v);
    const char *text = json_string_value(v);
    char allowed[160] = "";
    for (long long i = f->min; i <= f->max; i++) {
        if (strcmp(text, f->names[i]) == 0) {
            *out = (int)i;
            return PF_OK;
        }
        append(allowed, sizeof allowed, ", ", f->names[i]);
    }
    char buf[SHOWN_MAX + 4];
    return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: unknown value '%s'; expected one of %s", ptr,
                        shown(buf, text), allowed);
}

/* One device, "cpu", "cuda", "cuda:N" or "auto", at ptr. */
static pf_status get_one_device(const field *f, const json_t *v, const char *ptr,
                                pf_device_spec *out, pf_error *err) {
    if (!json_is_string(v))
        return type_error(err, ptr, "a string", v);
    const char *text = json_string_value(v);
    char buf[SHOWN_MAX + 4];
    if (pf_device_parse(text, &out->device, &out->index) != PF_OK) {
        if (strncmp(text, "cuda:", 5) == 0)
            return pf_error_set(err, PF_ERR_SPEC, ptr,
                                "%s: '%s' is not a device: cuda:N takes a GPU number N from 0 "
                                "to %d",
                                ptr, shown(buf, text), PF_MAX_GPU_INDEX);
        char allowed[160] = "";
        for (long long i = f->min; i <= f->max; i++)
            append(allowed, sizeof allowed, ", ", f->names[i]);
        return pf_error_set(err, PF_ERR_SPEC, ptr,
                            "%s: unknown value '%s'; expected one of %s, or cuda:N for GPU N", ptr,
                            shown(buf, text), allowed);
    }
    return PF_OK;
}

/* "device": one device for every replica, or a list of one device per replica. Runs after
 * "replicas_per_worker" (0 when absent) and settles it: a list's length, else 1. */
static pf_status get_device(const field *f, const json_t *v, const char *ptr, pf_job_spec *s,
                            pf_error *err) {
    pf_device_spec *devices = slot(s, f->at);
    int *replicas = slot(s, f->count_at);
    char buf[SHOWN_MAX + 4];
    pf_status st;
    if (json_is_string(v)) {
        if ((st = get_one_device(f, v, ptr, &devices[0], err)) != PF_OK)
            return st;
        int k = *replicas ? *replicas : 1;
        if (k > 1 && devices[0].device != PF_DEVICE_CPU)
            return pf_error_set(err, PF_ERR_SPEC, ptr,
                                "%s: one device '%s' for %d replicas (replicas_per_worker): "
                                "list one GPU per replica, e.g. [\"cuda:0\", \"cuda:1\"]",
                                ptr, shown(buf, json_string_value(v)), k);
        for (int r = 1; r < k; r++)
            devices[r] = devices[0];
        *replicas = k;
        return PF_OK;
    }
    if (!json_is_array(v))
        return type_error(err, ptr, "a string or an array of strings", v);
    size_t n = json_array_size(v);
    if (n < 1 || n > PF_MAX_REPLICAS_PER_WORKER)
        return pf_error_set(err, PF_ERR_SPEC, ptr,
                            "%s: expected 1 to %d devices, one per replica, got %zu", ptr,
                            PF_MAX_REPLICAS_PER_WORKER, n);
    for (size_t i = 0; i < n; i++) {
        char iptr[PTR_SIZE];
        index_ptr(iptr, ptr, i);
        pf_device_spec *d = &devices[i];
        if ((st = get_one_device(f, json_array_get(v, i), iptr, d, err)) != PF_OK)
            return st;
        if (d->device == PF_DEVICE_AUTO)
            return pf_error_set(err, PF_ERR_SPEC, iptr,
                                "%s: auto is not allowed in a device list: name each replica's "
                                "device (cpu, cuda or cuda:N)",
                                iptr);
        if (d->device != devices[0].device)
            return pf_error_set(
                err, PF_ERR_SPEC, iptr, "%s: %s after %s: a device list is all cpu or all GPUs",
                iptr, pf_spec_device_names[d->device], pf_spec_device_names[devices[0].device]);
        for (size_t j = 0; j < i; j++)
            if (d->device == PF_DEVICE_CUDA && devices[j].index == d->index)
                return pf_error_set(err, PF_ERR_SPEC, iptr,
                                    "%s: cuda:%d is listed twice (also at %s/%zu): one GPU per "
                                    "replica",
                                    iptr, d->index, ptr, j);
    }
    if (*replicas && *replicas != (int)n)
        return pf_error_set(err, PF_ERR_SPEC, "/replicas_per_worker",
                            "/replicas_per_worker: %d, but %s lists %zu devices (one per "
                            "replica)",
                            *replicas, ptr, n);
    *replicas = (int)n;
    return PF_OK;
}

bool pf_job_name_valid(const char *name) {
    size_t len = strlen(name);
    bool ok = len > 0 && len <= PF_NAME_MAX && name[0] != '-' && name[len - 1] != '-';
    for (size_t i = 0; ok && i < len; i++)
        ok = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
             name[i] == '-';
    return ok;
}

static pf_status get_name(const json_t *v, const char *ptr, char *out, pf_error *err) {
    if (!json_is_string(v))
        return type_error(err, ptr, "a string", v);
    const char *name = json_string_value(v);
    size_t len = strlen(name);
    if (len == 0)
        return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: must not be empty", ptr);
    if (len > PF_NAME_MAX)
        return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: %zu characters long, at most %d allowed",
                            ptr, len, PF_NAME_MAX);
    if (!pf_job_name_valid(name)) {
        char buf[SHOWN_MAX + 4];
        return pf_error_set(err, PF_ERR_SPEC, ptr,
                            "%s: '%s' is not a valid name: use lowercase letters, digits and '-', "
                            "starting and ending with a letter or digit",
                            ptr, shown(buf, name));
    }
    memcpy(out, name, len + 1);
    return PF_OK;
}

static pf_status get_array(const field *f, const json_t *v, const char *ptr, const char *what,
                           pf_error *err) {
    if (!json_is_array(v))
        return type_error(err, ptr, "an array", v);
    size_t n = json_array_size(v);
    if (n < (size_t)f->min || n > (size_t)f->max)
        return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: expected %lld to %lld %s, got %zu", ptr,
                            f->min, f->max, what, n);
    return PF_OK;
}

static pf_status get_widths(const field *f, const json_t *v, const char *ptr, pf_job_spec *s,
                            pf_error *err) {
    pf_status st = get_array(f, v, ptr, "layer widths", err);
    if (st != PF_OK)
        return st;
    static const field width = {"", K_INT, NO_SLOT, .min = 1, .max = PF_MAX_UNITS};
    int *widths = slot(s, f->at);
    for (size_t i = 0; i < json_array_size(v); i++) {
        char iptr[PTR_SIZE];
        long long x = 0;
        index_ptr(iptr, ptr, i);
        if ((st = get_integer(&width, json_array_get(v, i), iptr, &x, err)) != PF_OK)
            return st;
        widths[i] = (int)x;
    }
    *(int *)slot(s, f->count_at) = (int)json_array_size(v);
    return PF_OK;
}

static pf_status get_paths(const field *f, const json_t *v, const char *ptr, pf_job_spec *s,
                           pf_error *err) {
    pf_status st = get_array(f, v, ptr, "paths", err);
    if (st != PF_OK)
        return st;
    char **paths = slot(s, f->at);
    int *count = slot(s, f->count_at);
    for (size_t i = 0; i < json_array_size(v); i++) {
        char iptr[PTR_SIZE];
        const json_t *item = json_array_get(v, i);
        index_ptr(iptr, ptr, i);
        if (!json_is_string(item))
            return type_error(err, iptr, "a string", item);
        if (json_string_length(item) == 0)
            return pf_error_set(err, PF_ERR_SPEC, iptr, "%s: must be a non-empty path", iptr);
        if (!(paths[i] = pf_strdup(json_string_value(item))))
            return pf_error_set(err, PF_ERR_NOMEM, iptr, "out of memory");
        *count = (int)i + 1;
    }
    return PF_OK;
}

/* Parses each entry into entry 0 of a zeroed scratch spec, where the sub table's offsets
 * point, and moves it to its place. */
static pf_status get_list(const field *f, const json_t *v, const char *ptr, pf_job_spec *s,
                          pf_error *err) {
    pf_status st = get_array(f, v, ptr, "entries", err);
    pf_job_spec *scratch = st == PF_OK ? pf_malloc(sizeof *scratch) : NULL;
    if (st == PF_OK && !scratch)
        st = pf_error_set(err, PF_ERR_NOMEM, ptr, "out of memory");
    for (size_t i = 0; st == PF_OK && i < json_array_size(v); i++) {
        char iptr[PTR_SIZE];
        const json_t *item = json_array_get(v, i);
        index_ptr(iptr, ptr, i);
        memset(scratch, 0, sizeof *scratch);
        if (!json_is_object(item))
            st = type_error(err, iptr, "an object", item);
        else if ((st = parse_object(f->sub, item, iptr, scratch, err)) == PF_OK)
            memcpy(slot(s, f->at + i * f->stride), cslot(scratch, f->at), f->stride);
        *(int *)slot(s, f->count_at) = (int)i + (st == PF_OK);
    }
    pf_free(scratch);
    return st;
}

/* Parses one field whose value is v, or applies its default when v is NULL. For enums,
 * *enum_out receives the value (the type of a typed object). */
static pf_status parse_field(const scope *sc, const field *f, const json_t *v, pf_job_spec *s,
                             int *enum_out, pf_error *err) {
    char fptr[PTR_SIZE];
    child_ptr(fptr, sc->ptr, f->key);
    if (!v) {
        if (f->need & BIT(sc->type))
            return missing(sc, f, fptr, err);
        set_default(f, s);
        if (f->kind == K_ENUM && enum_out)
            *enum_out = (int)f->def;
        if (f->kind == K_OBJECT && !f->present_at)
            return parse_object(f->sub, NULL, fptr, s, err);
        return PF_OK;
    }

    long long x = 0;
    double d = 0;
    int e = 0;
    pf_status st = PF_OK;
    switch (f->kind) {
    case K_NAME:
        return get_name(v, fptr, slot(s, f->at), err);
    case K_INT:
        if ((st = get_integer(f, v, fptr, &x, err)) == PF_OK)
            *(int *)slot(s, f->at) = (int)x;
        return st;
    case K_INT64:
        if ((st = get_integer(f, v, fptr, &x, err)) == PF_OK)
            *(int64_t *)slot(s, f->at) = (int64_t)x;
        return st;
    case K_UINT64:
        if ((st = get_integer(f, v, fptr, &x, err)) == PF_OK)
            *(uint64_t *)slot(s, f->at) = (uint64_t)x;
        return st;
    case K_DOUBLE:
        if ((st = get_double(f, v, fptr, &d, err)) == PF_OK)
            *(double *)slot(s, f->at) = d;
        return st;
    case K_BOOL:
        if (!json_is_boolean(v))
            return type_error(err, fptr, "a boolean", v);
        *(bool *)slot(s, f->at) = json_is_true(v);
        return PF_OK;
    case K_ENUM:
        if ((st = get_enum_value(f, v, fptr, &e, err)) == PF_OK) {
            put_enum(s, f->at, e);
            if (enum_out)
                *enum_out = e;
        }
        return st;
    case K_WIDTHS:
        return get_widths(f, v, fptr, s, err);
    case K_PATHS:
        return get_paths(f, v, fptr, s, err);
    case K_DEVICE:
        return get_device(f, v, fptr, s, err);
    case K_LIST:
        return get_list(f, v, fptr, s, err);
    case K_OBJECT:
        if (!json_is_object(v))
            return type_error(err, fptr, "an object", v);
        if (f->present_at)
            *(bool *)slot(s, f->present_at) = true;
        return parse_object(f->sub, v, fptr, s, err);
    }
    return PF_OK;
}

static const field *find_field(const object_desc *d, const char *key) {
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->fields[i].key, key) == 0)
            return &d->fields[i];
    return NULL;
}

/* Parses obj (NULL: the object is absent, every field takes its default) against d. Unknown
 * keys are reported first, in document order; then the type; then keys that do not apply to
 * the type; then each field in table order; then the object's cross-field check. */
static pf_status parse_object(const object_desc *d, const json_t *obj, const char *ptr,
                              pf_job_spec *s, pf_error *err) {
    scope sc = {d, ptr, 0};
    const char *key;
    const json_t *value;
    char fptr[PTR_SIZE];
    char buf[SHOWN_MAX + 4];
    pf_status st;

    json_object_foreach((json_t *)obj, key, value) {
        if (!find_field(d, key)) {
            child_ptr(fptr, ptr, key);
            return pf_error_set(err, PF_ERR_SPEC, fptr, "unknown field '%s' in %s", shown(buf, key),
                                ptr[0] ? ptr : "the spec");
        }
    }

    size_t first = 0;
    if (d->typed) {
        const field *t = &d->fields[0];
        if ((st = parse_field(&sc, t, json_object_get(obj, t->key), s, &sc.type, err)) != PF_OK)
            return st;
        first = 1;
        json_object_foreach((json_t *)obj, key, value) {
            const field *f = find_field(d, key);
            if (applies(f, sc.type))
                continue;
            char list[96];
            char tptr[PTR_SIZE];
            type_list(list, sizeof list, t, f->only);
            child_ptr(fptr, ptr, key);
            child_ptr(tptr, ptr, t->key);
            return pf_error_set(err, PF_ERR_SPEC, fptr, "%s: only applies when %s is %s (it is %s)",
                                fptr, tptr, list, t->names[sc.type]);
        }
    }

    for (size_t i = first; i < d->n; i++) {
        const field *f = &d->fields[i];
        if (!applies(f, sc.type))
            continue;
        if ((st = parse_field(&sc, f, json_object_get(obj, f->key), s, NULL, err)) != PF_OK)
            return st;
    }
    return d->check ? d->check(s, err) : PF_OK;
}

/* --- parse entry points ----------------------------------------------------------------------- */

/* Byte offset of the bracket that opens level SPEC_MAX_DEPTH + 1, or -1. Brackets inside
 * strings do not count; malformed input is left for jansson to describe. */
static long long too_deep(const char *s, size_t len) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > SPEC_MAX_DEPTH)
                return (long long)i;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return -1;
}

pf_status pf_job_spec_parse(const char *json, size_t len, pf_job_spec *out, pf_error *err) {
    pf_error_clear(err);
    if (!out || (!json && len))
        return pf_error_set(err, PF_ERR_INVALID, NULL, "no spec to parse");
    memset(out, 0, sizeof *out);
    if (!json)
        json = "";

    long long deep = too_deep(json, len);
    if (deep >= 0) {
        pf_error_set(err, PF_ERR_FORMAT, NULL, "nested deeper than %d levels at byte %lld",
                     SPEC_MAX_DEPTH, deep);
        if (err)
            err->offset = deep;
        return PF_ERR_FORMAT;
    }

    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_out_of_memory)
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        pf_error_set(err, PF_ERR_FORMAT, NULL, "%s (line %d, column %d)", jerr.text, jerr.line,
                     jerr.column);
        if (err)
            err->offset = (long long)jerr.position;
        return PF_ERR_FORMAT;
    }

    pf_status st;
    if (!json_is_object(root)) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "a job spec is a JSON object, got %s",
                          json_kind(root));
        if (err)
            err->offset = 0;
    } else {
        st = parse_object(&pf_spec_desc, root, "", out, err);
    }
    json_decref(root);
    if (st != PF_OK)
        pf_job_spec_deinit(out);
    return st;
}

pf_status pf_job_spec_load(const char *path, pf_job_spec *out, pf_error *err) {
    pf_error_clear(err);
    if (!path || !out)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "no spec file to load");
    memset(out, 0, sizeof *out);
    char *text;
    size_t n;
    pf_status st = pf_fs_read_file(path, SPEC_MAX_FILE_BYTES, &text, &n, err);
    if (st == PF_ERR_NOT_FOUND)
        return PF_ERR_IO; /* this function's contract: a file that cannot be read */
    if (st == PF_ERR_RANGE)
        return PF_ERR_FORMAT;
    if (st != PF_OK)
        return st;
    st = pf_job_spec_parse(text, n, out, err);
    pf_free(text);
    return st;
}

/* --- lifecycle ---------------------------------------------------------------------- */

void pf_job_spec_deinit(pf_job_spec *spec) {
    if (!spec)
        return;
    for (int i = 0; i < PF_MAX_DATA_FILES; i++) {
        pf_free(spec->data.train[i]);
        pf_free(spec->data.test[i]);
    }
    pf_free(spec->data.stats[0]);
    memset(spec, 0, sizeof *spec);
}

pf_status pf_job_spec_copy(pf_job_spec *dst, const pf_job_spec *src) {
    if (dst == src)
        return PF_OK;
    *dst = *src;
    memset(dst->data.train, 0, sizeof dst->data.train);
    memset(dst->data.test, 0, sizeof dst->data.test);
    dst->data.stats[0] = NULL;
    if (src->data.stats[0] && !(dst->data.stats[0] = pf_strdup(src->data.stats[0]))) {
        pf_job_spec_deinit(dst);
        return PF_ERR_NOMEM;
    }
    for (int i = 0; i < PF_MAX_DATA_FILES; i++) {
        if ((src->data.train[i] && !(dst->data.train[i] = pf_strdup(src->data.train[i]))) ||
            (src->data.test[i] && !(dst->data.test[i] = pf_strdup(src->data.test[i])))) {
            pf_job_spec_deinit(dst);
            return PF_ERR_NOMEM;
        }
    }
    return PF_OK;
}
