/* spec.h - the job spec (docs/design.md section 2): parse, validate, normalise, serialise.
 *
 * A job spec is JSON with snake_case keys. Parsing is strict: unknown fields, wrong types,
 * out-of-range values and bad enum values are rejected with PF_ERR_SPEC and a pf_error
 * whose `pointer` names the field ("/training/batch_size") and whose `message` says what
 * is wrong in one line. Malformed JSON gives PF_ERR_FORMAT (pointer "", offset set to the
 * byte position jansson reports). Omitted fields take the defaults documented below, and
 * pf_job_spec_to_json() writes the normalised spec with every default filled in, so
 * parse(to_json(parse(x))) == parse(x).
 *
 * pf_job_spec is a plain value: the caller owns it, pf_job_spec_deinit() frees the strings
 * it holds. All functions are reentrant.
 */
#ifndef PSFLOW_SPEC_H
#define PSFLOW_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/status.h"

#define PF_NAME_MAX                   63 /* job names: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 chars */
#define PF_MAX_HIDDEN                 8         /* hidden layers an mlp may have */
#define PF_MAX_DATA_FILES             2         /* idx: images + labels; csv: one file */
#define PF_CRITEO_NUMERIC_COLUMNS     13        /* data.format criteo: I1..I13 */
#define PF_CRITEO_CATEGORICAL_COLUMNS 26        /* C1..C26 */
#define PF_MAX_UNITS                  (1 << 20) /* upper bound for inputs, outputs and each hidden width */
#define PF_MAX_REPLICAS               1024 /* upper bound for replicas.ps and replicas.worker */
#define PF_MAX_GPU_INDEX              255  /* the largest N of "device": "cuda:N" */
#define PF_MAX_REPLICAS_PER_WORKER    16   /* in-graph replicas one worker may run */
#define PF_MAX_EMBEDDINGS             32   /* categorical features a model may embed */
#define PF_EMBEDDING_NAME_MAX         20   /* "<name>/embeddings" fits a variable name */
#define PF_MAX_VOCAB                  (1 << 24) /* rows of a table: ids are exact in float32 */
#define PF_MAX_EMBEDDING_DIM          4096      /* columns of a table */
#define PF_MAX_IDS                    4096      /* ids of one feature in one example */
#define PF_MAX_DYNAMIC_ROWS           ((1LL << 31) - 1) /* a dynamic table's max_rows */
#define PF_MAX_MIN_COUNT              255  /* a dynamic table's min_count (8-bit counters) */
#define PF_EVAL_BATCH                 1000 /* examples psflow train evaluates at a time */

typedef enum { PF_MODEL_LINEAR, PF_MODEL_SOFTMAX, PF_MODEL_MLP, PF_MODEL_DLRM } pf_model_type;
typedef enum { PF_ACT_NONE, PF_ACT_RELU, PF_ACT_TANH, PF_ACT_SIGMOID } pf_activation;
typedef enum {
    PF_DATA_IDX,
    PF_DATA_CSV,
    PF_DATA_SYNTHETIC_LINEAR,
    PF_DATA_LIBSVM,
    PF_DATA_SYNTHETIC_CTR,
    PF_DATA_CRITEO
} pf_data_format;
typedef enum {
    PF_OPT_SGD,
    PF_OPT_MOMENTUM,
    PF_OPT_ADAGRAD,
    PF_OPT_ADAM,
    PF_OPT_LAZY_ADAM /* LazyAdamOptimizer: adam whose table rows move only when named */
} pf_optimizer_type;
typedef enum { PF_MODE_ASYNC, PF_MODE_SYNC } pf_training_mode;
/* What a job does when training produces a NaN or infinite loss, gradient or value. */
typedef enum { PF_NONFINITE_FAIL, PF_NONFINITE_ROLLBACK } pf_nonfinite_action;

/* data.on_error (criteo; csv and libsvm streamed): a bad line fails the task, or is skipped
 * and counted. */
typedef enum { PF_ON_ERROR_FAIL, PF_ON_ERROR_SKIP } pf_on_error;
/* data.splits (streamed input): each replica reads the splits its index names, or the
 * training tasks lease splits from the work queue ps task 0 keeps (async only). */
typedef enum { PF_SPLITS_STATIC, PF_SPLITS_DYNAMIC } pf_split_policy;
typedef enum { PF_PLACE_ROUND_ROBIN, PF_PLACE_GREEDY } pf_placement_strategy;
typedef enum {
    PF_PART_NONE,
    PF_PART_FIXED_SHARDS,
    PF_PART_MIN_SIZE,
    PF_PART_MAX_SIZE
} pf_partitioner_type;
typedef enum {
    PF_RESTART_NEVER,
    PF_RESTART_ON_FAILURE,
    PF_RESTART_ALWAYS,
    PF_RESTART_EXIT_CODE
} pf_restart_policy;
typedef enum { PF_DEVICE_CPU, PF_DEVICE_CUDA, PF_DEVICE_AUTO } pf_device;
/* How an example's embedding rows become one vector (tf.nn.embedding_lookup_sparse). */
typedef enum { PF_COMBINE_SUM, PF_COMBINE_MEAN, PF_COMBINE_SQRTN } pf_combiner;
/* An embedding table's kind: a [vocab, dim] variable, or rows keyed by 64-bit ids
 * (dyn_table.h) created as ids are admitted. */
typedef enum { PF_TABLE_FIXED, PF_TABLE_DYNAMIC } pf_table_kind;

/* One device as the spec spells it. */
typedef struct pf_device_spec {
    pf_device device; /* "cpu" | "cuda" | "cuda:N" | "auto" */
    int index;        /* cuda: the N of "cuda:N", 0..PF_MAX_GPU_INDEX ("cuda" is 0); else 0 */
} pf_device_spec;

typedef struct pf_replicas {
    int ps;        /* 1..PF_MAX_REPLICAS [1] */
    int worker;    /* 1..PF_MAX_REPLICAS [1] */
    int chief;     /* 0 or 1 [0] */
    int evaluator; /* 0 or 1 [0] */
} pf_replicas;

/* One categorical feature, "model.embeddings[i]": its ids index the rows of the variable
 * "<name>/embeddings" [vocab, dim]; an example's rows are combined into dim inputs of the
 * dense layers (sum: sum_k w_k row_k; mean: divided by sum_k w_k; sqrtn: divided by
 * sqrt(sum_k w_k^2); an example without ids gives zeros). */
typedef struct pf_embedding_spec {
    char name[PF_NAME_MAX + 1]; /* required: a name as the job's, at most
                                   PF_EMBEDDING_NAME_MAX characters, unique in the model */
    int64_t vocab;              /* fixed: required, 1..PF_MAX_VOCAB: ids 0 .. vocab - 1;
                                   dynamic: refused (0) */
    int dim;                    /* required, 1..PF_MAX_EMBEDDING_DIM */
    pf_combiner combiner;       /* "sum" | "mean" | "sqrtn" [sum] */
    int max_ids;                /* ids one example may have, 1..PF_MAX_IDS [1] */
    bool hash;                  /* [false] csv: a value is any string, hashed into the vocab
                                   rows (hash buckets), not an integer id; criteo: ids mixed
                                   before the modulo; synthetic_ctr: the ids of a dynamic
                                   table (data.distinct_ids), hashed into the vocab rows */
    /* dynamic only (dyn_table.h): ids are 64-bit, rows are created as ids are admitted */
    int64_t max_rows;      /* required, 1..PF_MAX_DYNAMIC_ROWS: the table's row cap */
    int min_count;         /* 1..255 [absent, 0]: an id gets a row on its min_count-th update */
    double probability;    /* (0, 1] [1]: an update that meets min_count admits its id so */
    int64_t steps_to_live; /* >= 1 [absent, 0: never]: rows idle that many steps are dropped */
    int64_t sketch_bytes;  /* 256..2^34 [absent, 0]: the admission sketch's size;
                              pf_embedding_sketch_bytes says what absent means */
    pf_table_kind kind;    /* "fixed" | "dynamic" [fixed] (last: positional initializers of
                              fixed tables leave it so) */
} pf_embedding_spec;

typedef struct pf_model_spec {
    pf_model_type type;        /* required: "linear" | "softmax" | "mlp" | "dlrm" */
    int inputs;                /* 1..PF_MAX_UNITS, required without embeddings and refused
                                  with them (the dense layers' inputs are then the sum of
                                  the embedding dims); 0 when absent */
    int outputs;               /* linear: [1], must be 1; softmax/mlp: required, >= 2 */
    int n_hidden;              /* mlp, dlrm: 1..PF_MAX_HIDDEN entries of "hidden"; others: 0 */
    int hidden[PF_MAX_HIDDEN]; /* widths, each 1..PF_MAX_UNITS */
    /* dlrm: the bottom MLP over the numeric inputs, 1..PF_MAX_HIDDEN widths ("bottom"), the
     * last one every embedding's dim: its output and the embeddings' vectors meet in
     * pairwise dot products, which with the bottom output feed the top MLP ("hidden") */
    int n_bottom;
    int bottom[PF_MAX_HIDDEN];
    pf_activation activation; /* mlp: relu | tanh | sigmoid [relu]; others: PF_ACT_NONE */
    /* Categorical features ("embeddings", 0..PF_MAX_EMBEDDINGS entries): the model reads
     * sparse examples (data.format libsvm, where feature i owns the ids after those of
     * features 0..i-1), and its variables start with each feature's table. */
    int n_embeddings;
    pf_embedding_spec embeddings[PF_MAX_EMBEDDINGS];
    /* With embeddings: numeric columns that follow the id slots of an example and go to
     * dense_0 as they are, beside the embeddings' outputs (data.format criteo: its 13
     * integer columns), 0..PF_MAX_UNITS [0]. Without embeddings the inputs are `inputs`. */
    int numeric_inputs;
    /* mlp with embeddings: wide & deep. Each table row also holds one linear weight per
     * output after its `dim` numbers; the weights of the ids an example names (combined as
     * the vectors are) add to the logits beside the MLP's [false] */
    bool wide;
} pf_model_spec;

/* Whether any table of the model is dynamic. */
static inline bool pf_model_has_dynamic(const pf_model_spec *m) {
    for (int f = 0; f < m->n_embeddings; f++)
        if (m->embeddings[f].kind == PF_TABLE_DYNAMIC)
            return true;
    return false;
}

/* The admission sketch of a dynamic table e, in bytes: e->sketch_bytes when given; else,
 * when admission counts (min_count > 1 or probability < 1), 4 bytes per row of max_rows
 * within 256 B .. 1 GiB; else 0 (no sketch). */
int64_t pf_embedding_sketch_bytes(const pf_embedding_spec *e);

typedef struct pf_data_spec {
    pf_data_format format;          /* required: "idx" | "csv" | "synthetic_linear" | "libsvm" |
                                       "synthetic_ctr" | "criteo" */
    int n_train;                    /* number of paths in train[] */
    char *train[PF_MAX_DATA_FILES]; /* idx: [images, labels]; csv, libsvm: [file], streamed
                                       1..2 entries; criteo: 1..PF_MAX_DATA_FILES; an entry
                                       of criteo or streamed data is a file, a folder or a
                                       glob pattern (pf_input_expand) */
    int n_test;                     /* 0 when there is no test set */
    char *test[PF_MAX_DATA_FILES];
    /* synthetic_linear only: y = w * x + b + noise * N(0, 1), x ~ U(0, 1) */
    double w;       /* [2] */
    double b;       /* [10] */
    double noise;   /* >= 0 [0.1] */
    int index_base; /* libsvm only, 0 or 1 [1]: the feature id of the first input */
    int64_t n;      /* synthetic: training examples, >= 1 [10000]; test set n/5 */
    /* synthetic_ctr with dynamic tables: each dynamic feature's ids are drawn (Zipf over
     * ranks 1..distinct_ids) from this many distinct ids, spread over 0 .. 2^40 - 1,
     * 1..2^40 [absent, 0: 1,000,000] */
    int64_t distinct_ids;
    /* synthetic_ctr with dynamic tables: from this global step on, every id of a training
     * batch is another one (pf_synthetic_ctr_shift: bit 40 set, the same true weight), and so
     * is every id of the test set: a distribution whose ids the steps before never saw,
     * >= 1 [absent, 0: no shift] */
    int64_t shift_step;
    /* synthetic_ctr only (data.h): one Zipf-distributed id per embedding feature, a click
     * with probability sigmoid(bias + sum of the ids' true weights, each signal * N(0,1)) */
    double zipf;   /* > 0 [1.1]: P(the k-th most frequent id) ~ k^-zipf */
    double signal; /* >= 0 [1] */
    double bias;   /* [-1.5] */
    /* criteo, csv, libsvm: read the training files as streams while training (stream.h)
     * instead of loading them whole; each replica that trains reads its own files [false] */
    bool streaming;
    int split_mb;           /* with streaming: plain files are cut into ranges of about this many
                               MiB, 1..1048576 [64] */
    pf_split_policy splits; /* with streaming [static]; dynamic: leased (async only) */
    /* criteo, and csv or libsvm streamed: a bad line (or the corrupt rest of a gzip file)
     * fails the task [fail], or is skipped and counted, at most max_bad_lines of them
     * (1..2^40) [1000] */
    pf_on_error on_error;
    int64_t max_bad_lines;
    /* criteo: `psflow data stats` output; with it each numeric input is standardised,
     * (log1p(max(v, 0)) - mean) / std of its column, and an empty field is 0 (the mean) */
    int n_stats;
    char *stats[1];
} pf_data_spec;

/* Data a generator draws (synthetic_linear, synthetic_ctr) rather than files. */
static inline bool pf_data_is_synthetic(const pf_data_spec *d) {
    return d->format == PF_DATA_SYNTHETIC_LINEAR || d->format == PF_DATA_SYNTHETIC_CTR;
}

/* Whether the job evaluates on a test set: generated ones always have one. */
static inline bool pf_data_has_test(const pf_data_spec *d) {
    return pf_data_is_synthetic(d) || d->n_test > 0;
}

typedef struct pf_decay_spec {
    bool enabled;        /* true when "decay" is present */
    int64_t decay_steps; /* >= 1, required when present */
    double decay_rate;   /* > 0, required when present */
    bool staircase;      /* [false] */
} pf_decay_spec;

typedef struct pf_optimizer_spec {
    pf_optimizer_type type;           /* [sgd] */
    double learning_rate;             /* > 0 [0.01] */
    double momentum;                  /* momentum: [0.9], 0 <= m < 1 */
    double initial_accumulator_value; /* adagrad: [0.1], > 0 */
    double beta1;                     /* adam: [0.9], 0 <= b < 1 */
    double beta2;                     /* adam: [0.999], 0 <= b < 1 */
    double epsilon;                   /* adam: [1e-7], > 0 */
    pf_decay_spec decay;
} pf_optimizer_spec;

typedef struct pf_training_spec {
    pf_training_mode mode;            /* [async] */
    int batch_size;                   /* per in-graph replica, 1..1048576 [100]: a worker with K
                                         replicas reads K * batch_size examples a step */
    int64_t max_steps;                /* global steps, >= 1 [1000] */
    int replicas_to_aggregate;        /* 1..replicas.worker [= replicas.worker] */
    uint64_t seed;                    /* [1] */
    int64_t eval_every_steps;         /* >= 0, 0 = only at the end [0] */
    pf_nonfinite_action on_nonfinite; /* "rollback" or "fail" ["rollback"] */
    int64_t stall_timeout_secs;       /* 1..604800 [300]: a task fails (exit 69) when a ps
                                         request goes unanswered this long */
    int nonfinite_max_rollbacks;      /* rollback: 0..1000 [3]; one more non-finite value fails */
    double nonfinite_lr_scale;        /* rollback: (0, 1] [1]: learning rate factor per rollback */
    bool prefetch;                    /* async only [false]: a worker computes its next step
                                         while the push-pull of this one is in flight */
    int64_t max_staleness;            /* async only, 0..1000000; -1 when absent (unbounded):
                                         a worker waits while it is more than this many
                                         pushes ahead of the slowest live one */
    int64_t epochs;                   /* with data.splits dynamic, >= 1; 0 when absent: the
                                         run ends once every split was trained on this many
                                         times (or at max_steps, whichever comes first) */
} pf_training_spec;

typedef struct pf_partitioner_spec {
    pf_partitioner_type type; /* [none] */
    int num_shards;           /* fixed_shards: required, >= 1 */
    int64_t min_shard_bytes;  /* min_size: [262144], >= 1 */
    int64_t max_shard_bytes;  /* max_size: required, >= 1 */
    int max_shards;           /* min_size: [1] (>= 1); max_size: [0 = unlimited] (>= 0) */
} pf_partitioner_spec;

typedef struct pf_checkpoint_spec {
    int64_t every_steps; /* >= 0, 0 = off [0] */
    int64_t every_secs;  /* >= 0, 0 = off [600] */
    int keep;            /* >= 1 [5] */
} pf_checkpoint_spec;

typedef struct pf_run_policy_spec {
    pf_restart_policy
        restart_policy;              /* "Never" | "OnFailure" | "Always" | "ExitCode" [OnFailure] */
    int backoff_limit;               /* >= 0 [3] */
    int64_t active_deadline_seconds; /* >= 0, 0 = none [0] */
    int priority; /* -1000..1000 [0]: a waiting job of higher priority is admitted first */
    /* [true]: a waiting job of higher priority that cannot start otherwise may stop it and
     * take its agents; it resumes from its newest checkpoint when agents free up */
    bool preemptible;
    /* the queue it is admitted through (coordinator: /api/v1/queues; its quota, weight and
     * borrowing); "" for the default queue, which the normalised spec leaves out (a spec
     * naming "default" reads as one naming none): pf_job_spec_queue */
    char queue[PF_NAME_MAX + 1];
    /* a priority class of its queue (coordinator: the queue's priority_classes), whose value
     * the coordinator writes into priority at submit; "" for none, left out of the
     * normalised spec */
    char priority_class[PF_NAME_MAX + 1];
} pf_run_policy_spec;

#define PF_DEFAULT_QUEUE "default" /* the queue of a job whose spec names none */

/* "serving": prediction servers the coordinator runs on worker agents from the job's start
 * until it is deleted or fails (docs/serving.md, "Managed"). Absent: none. */
#define PF_MAX_SERVING_REPLICAS 8
typedef struct pf_serving_spec {
    bool enabled; /* the section was given */
    int replicas; /* 1..PF_MAX_SERVING_REPLICAS [1] */
    int port;     /* 0..65535 [0: any free port, the job's status says which] */
} pf_serving_spec;

/* The reader task indices of a job (HELLO role reader, psflow serve --ps): one per serving
 * replica, at least one. */
static inline int pf_serving_readers(const pf_serving_spec *s) {
    return s->enabled && s->replicas > 1 ? s->replicas : 1;
}

typedef struct pf_job_spec {
    char name[PF_NAME_MAX + 1]; /* required */
    pf_replicas replicas;
    pf_model_spec model; /* required */
    pf_data_spec data;   /* required */
    pf_optimizer_spec optimizer;
    pf_training_spec training;
    pf_placement_strategy placement; /* "placement.strategy" [round_robin] */
    pf_partitioner_spec partitioner; /* "placement.partitioner" */
    pf_checkpoint_spec checkpoint;
    pf_run_policy_spec run_policy;
    pf_serving_spec serving;
    /* In-graph replicas: each worker (and psflow train) runs replicas_per_worker copies of
     * the model, replica r on devices[r], each on batch_size examples, and averages their
     * gradients in replica order. "replicas_per_worker": 1..PF_MAX_REPLICAS_PER_WORKER [1,
     * or the length of a "device" list]. "device": one device for every replica ("cpu"
     * [default], "cuda", "cuda:N", "auto"; with more than one replica only "cpu"), or a
     * list of one device per replica: all "cpu", or distinct GPUs ("cuda", "cuda:N").
     * devices[r] is set for every r < replicas_per_worker. */
    int replicas_per_worker;
    pf_device_spec devices[PF_MAX_REPLICAS_PER_WORKER];
} pf_job_spec;

/* Parses and validates `len` bytes of JSON into *out (which needs no prior init and holds
 * nothing to free on failure). Errors: PF_ERR_FORMAT (not JSON, or not an object),
 * PF_ERR_SPEC (invalid field; err->pointer names it), PF_ERR_NOMEM. Inputs nested deeper
 * than 32 levels are rejected as PF_ERR_FORMAT. */
pf_status pf_job_spec_parse(const char *json, size_t len, pf_job_spec *out, pf_error *err);

/* Whether name is a valid job or table name: 1..PF_NAME_MAX lowercase letters, digits and
 * '-', starting and ending with a letter or digit (so it is safe as a path component). */
bool pf_job_name_valid(const char *name);

/* The queue a job is admitted through: run_policy.queue, or PF_DEFAULT_QUEUE. */
const char *pf_job_spec_queue(const pf_job_spec *s);

/* Reads `path` and parses it. Unreadable file: PF_ERR_IO with err->message naming the path
 * and the OS error; a file over 1 MiB: PF_ERR_FORMAT. */
pf_status pf_job_spec_load(const char *path, pf_job_spec *out, pf_error *err);

/* A new JSON number for v, or JSON null when v is NaN or infinite (JSON has no such numbers,
 * and jansson's json_real refuses them); NULL only on allocation failure. */
struct json_t *pf_json_number(double v);

/* New string (caller frees with pf_free) holding the normalised spec as compact JSON, keys
 * in the order of docs/design.md section 2; NULL on allocation failure. */
char *pf_job_spec_to_json(const pf_job_spec *spec);

/* Frees the strings held by spec and zeroes it. Safe on a zeroed spec. */
void pf_job_spec_deinit(pf_job_spec *spec);

/* Deep copy; PF_ERR_NOMEM on failure (dst then holds nothing). */
pf_status pf_job_spec_copy(pf_job_spec *dst, const pf_job_spec *src);

/* Enum <-> text, as the spec spells them ("relu", "adagrad", "OnFailure", ...). */
const char *pf_model_type_name(pf_model_type t);
const char *pf_activation_name(pf_activation a);
const char *pf_optimizer_type_name(pf_optimizer_type t);
const char *pf_device_name(pf_device d);
const char *pf_combiner_name(pf_combiner c);

/* A device as the spec spells it: "cpu", "cuda", "cuda:N" (N in 0..PF_MAX_GPU_INDEX, without
 * sign or leading zeros; "cuda:0" is "cuda") or "auto". Fills *device and *index (0 unless
 * "cuda:N"); PF_ERR_SPEC for anything else (then CPU and 0). */
pf_status pf_device_parse(const char *text, pf_device *device, int *index);

#endif
