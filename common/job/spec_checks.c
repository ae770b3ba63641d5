/* spec_checks.c - the rules of the job spec that span fields (spec.h): the checks each typed
 * object's table names (spec_internal.h), run once the object's own fields are in; objects are
 * parsed in table order, so a check may read the objects parsed before it (check_data reads
 * the model). A check may also fill in what the fields leave open (replicas_to_aggregate,
 * max_shards, the device of a model with embeddings).
 */
#include <stdio.h>
#include <string.h>

#include "spec_internal.h"

int64_t pf_embedding_sketch_bytes(const pf_embedding_spec *e) {
    if (e->sketch_bytes > 0)
        return e->sketch_bytes;
    if (e->min_count <= 1 && e->probability >= 1)
        return 0;
    int64_t bytes = e->max_rows <= (1LL << 28) ? 4 * e->max_rows : 1LL << 30;
    return bytes < 256 ? 256 : bytes;
}

/* A fixed table has a vocab and none of a dynamic table's fields; a dynamic one a row cap
 * and no vocab (its ids are any 64-bit numbers). */
static pf_status check_table_kind(const pf_model_spec *m, int i, pf_error *err) {
    const pf_embedding_spec *e = &m->embeddings[i];
    char ptr[PTR_SIZE];
    if (e->kind == PF_TABLE_FIXED) {
        const char *dynamic_only = e->max_rows           ? "max_rows"
                                   : e->min_count        ? "min_count"
                                   : e->probability != 1 ? "probability"
                                   : e->steps_to_live    ? "steps_to_live"
                                   : e->sketch_bytes     ? "sketch_bytes"
                                                         : NULL;
        if (dynamic_only) {
            snprintf(ptr, sizeof ptr, "/model/embeddings/%d/%s", i, dynamic_only);
            return pf_error_set(err, PF_ERR_SPEC, ptr,
                                "%s: applies to a dynamic table (\"kind\": \"dynamic\"); this "
                                "one is fixed",
                                ptr);
        }
        if (e->vocab == 0) {
            snprintf(ptr, sizeof ptr, "/model/embeddings/%d/vocab", i);
            return pf_error_set(err, PF_ERR_SPEC, ptr,
                                "missing required field 'vocab' in /model/embeddings/%d (or make "
                                "the table \"kind\": \"dynamic\" with a max_rows)",
                                i);
        }
        return PF_OK;
    }
    if (e->vocab != 0) {
        snprintf(ptr, sizeof ptr, "/model/embeddings/%d/vocab", i);
        return pf_error_set(err, PF_ERR_SPEC, ptr,
                            "%s: a dynamic table has no vocab (its ids are any 64-bit numbers, "
                            "each its own row): cap its rows with max_rows",
                            ptr);
    }
    if (e->max_rows == 0) {
        snprintf(ptr, sizeof ptr, "/model/embeddings/%d/max_rows", i);
        return pf_error_set(err, PF_ERR_SPEC, ptr,
                            "missing required field 'max_rows' in /model/embeddings/%d (a "
                            "dynamic table's row cap)",
                            i);
    }
    if (e->sketch_bytes && e->min_count <= 1 && e->probability >= 1) {
        snprintf(ptr, sizeof ptr, "/model/embeddings/%d/sketch_bytes", i);
        return pf_error_set(err, PF_ERR_SPEC, ptr,
                            "%s: the sketch counts ids for min_count above 1 or probability "
                            "below 1; this table admits every id at once",
                            ptr);
    }
    return PF_OK;
}

/* Names unique and short enough for "<name>/embeddings"; inputs given exactly when there
 * are no embeddings. */
static pf_status check_embeddings(const pf_model_spec *m, pf_error *err) {
    char ptr[PTR_SIZE];
    for (int i = 0; i < m->n_embeddings; i++) {
        const char *name = m->embeddings[i].name;
        snprintf(ptr, sizeof ptr, "/model/embeddings/%d/name", i);
        if (strlen(name) > PF_EMBEDDING_NAME_MAX)
            return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: '%s' is longer than %d characters", ptr,
                                name, PF_EMBEDDING_NAME_MAX);
        for (int j = 0; j < i; j++)
            if (strcmp(name, m->embeddings[j].name) == 0)
                return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: '%s' is also embedding %d", ptr,
                                    name, j);
        pf_status st = check_table_kind(m, i, err);
        if (st != PF_OK)
            return st;
    }
    if (m->n_embeddings > 0 && m->inputs != 0)
        return pf_error_set(err, PF_ERR_SPEC, "/model/inputs",
                            "/model/inputs: a model with embeddings takes its inputs from them "
                            "(the dense layers get the sum of their dims); remove inputs");
    if (m->n_embeddings == 0 && m->inputs == 0)
        return pf_error_set(err, PF_ERR_SPEC, "/model/inputs",
                            "missing required field 'inputs' in /model (or give embeddings)");
    if (m->n_embeddings == 0 && m->numeric_inputs != 0)
        return pf_error_set(err, PF_ERR_SPEC, "/model/numeric_inputs",
                            "/model/numeric_inputs: numeric columns go beside embeddings; a model "
                            "without embeddings takes `inputs` numbers");
    if (m->n_embeddings == 0 && m->wide)
        return pf_error_set(err, PF_ERR_SPEC, "/model/wide",
                            "/model/wide: the wide part is a linear model of the embeddings' ids: "
                            "give embeddings");
    return PF_OK;
}

/* A DLRM-style model: embeddings of one dim d, numeric inputs for its bottom MLP, whose last
 * width is d (its output meets the embeddings' vectors in dot products). */
static pf_status check_dlrm(const pf_model_spec *m, pf_error *err) {
    if (m->n_embeddings == 0)
        return pf_error_set(err, PF_ERR_SPEC, "/model/embeddings",
                            "/model/embeddings: a dlrm model crosses embeddings: give them");
    if (m->numeric_inputs == 0)
        return pf_error_set(err, PF_ERR_SPEC, "/model/numeric_inputs",
                            "/model/numeric_inputs: a dlrm model's bottom MLP reads numeric "
                            "inputs: give numeric_inputs (criteo data: 13)");
    int d = m->embeddings[0].dim;
    for (int i = 1; i < m->n_embeddings; i++)
        if (m->embeddings[i].dim != d) {
            char ptr[PTR_SIZE];
            snprintf(ptr, sizeof ptr, "/model/embeddings/%d/dim", i);
            return pf_error_set(err, PF_ERR_SPEC, ptr,
                                "%s: a dlrm model's embeddings share one dim (their dot products "
                                "are its interactions): embedding 0 has %d, this one %d",
                                ptr, d, m->embeddings[i].dim);
        }
    if (m->bottom[m->n_bottom - 1] != d)
        return pf_error_set(err, PF_ERR_SPEC, "/model/bottom",
                            "/model/bottom: the bottom MLP's last width must be the embeddings' "
                            "dim %d (its output is crossed with them), got %d",
                            d, m->bottom[m->n_bottom - 1]);
    return PF_OK;
}

pf_status pf_spec_check_model(pf_job_spec *s, pf_error *err) {
    const pf_model_spec *m = &s->model;
    pf_status st = check_embeddings(m, err);
    if (st != PF_OK)
        return st;
    if (m->type == PF_MODEL_DLRM && (st = check_dlrm(m, err)) != PF_OK)
        return st;
    if (m->type == PF_MODEL_LINEAR && m->outputs != 1)
        return pf_error_set(err, PF_ERR_SPEC, "/model/outputs",
                            "/model/outputs: a linear model has exactly 1 output, got %d",
                            m->outputs);
    if (m->type != PF_MODEL_LINEAR && m->outputs < 2)
        return pf_error_set(
            err, PF_ERR_SPEC, "/model/outputs",
            "/model/outputs: model type %s needs at least 2 outputs (classes), got %d",
            pf_spec_model_names[m->type], m->outputs);
    return PF_OK;
}

/* streamed: the training entries expand to any number of files (stream.h), but for an IDX
 * pair, which is split by record ranges */
static pf_status check_paths(const char *ptr, int format, int count, bool streamed, pf_error *err) {
    int want = format == PF_DATA_IDX ? 2 : 1;
    if (count == 0 || count == want || format == PF_DATA_CRITEO ||
        (streamed && format != PF_DATA_IDX)) /* any files */
        return PF_OK;
    return pf_error_set(err, PF_ERR_SPEC, ptr, "%s: format %s needs exactly %d %s, got %d%s", ptr,
                        pf_spec_format_names[format], want,
                        format == PF_DATA_IDX ? "paths (images, labels)" : "path", count,
                        streamed ? " (streamed idx data is split by record ranges of the one "
                                   "pair: no folders or patterns)"
                                 : "");
}

/* A Criteo-layout log feeds a two-class model its 26 categorical columns as embeddings (one
 * id each) or none of them, and its 13 integer columns as numeric inputs or not: numeric
 * only (inputs 13, no embeddings), categorical only, or both (numeric_inputs 13). */
static pf_status check_criteo(const pf_model_spec *m, pf_error *err) {
    if (m->type == PF_MODEL_LINEAR || m->outputs != 2)
        return pf_error_set(err, PF_ERR_SPEC, "/model/outputs",
                            "/model/outputs: criteo data gives clicks: it needs a softmax or mlp "
                            "model with outputs 2");
    if (m->n_embeddings == 0 && m->inputs != PF_CRITEO_NUMERIC_COLUMNS)
        return pf_error_set(err, PF_ERR_SPEC, "/model/inputs",
                            "/model/inputs: a model of criteo data without embeddings reads its "
                            "%d integer columns: inputs must be %d, got %d",
                            PF_CRITEO_NUMERIC_COLUMNS, PF_CRITEO_NUMERIC_COLUMNS, m->inputs);
    if (m->n_embeddings != 0 && m->n_embeddings != PF_CRITEO_CATEGORICAL_COLUMNS)
        return pf_error_set(err, PF_ERR_SPEC, "/model/embeddings",
                            "/model/embeddings: criteo data has %d categorical columns, one "
                            "embedding each (C1..C26 in order), or none; got %d embeddings",
                            PF_CRITEO_CATEGORICAL_COLUMNS, m->n_embeddings);
    if (m->n_embeddings != 0 && m->numeric_inputs != 0 &&
        m->numeric_inputs != PF_CRITEO_NUMERIC_COLUMNS)
        return pf_error_set(err, PF_ERR_SPEC, "/model/numeric_inputs",
                            "/model/numeric_inputs: criteo data has %d integer columns: "
                            "numeric_inputs must be %d (use them) or 0 (leave them out), got %d",
                            PF_CRITEO_NUMERIC_COLUMNS, PF_CRITEO_NUMERIC_COLUMNS,
                            m->numeric_inputs);
    for (int i = 0; i < m->n_embeddings; i++)
        if (m->embeddings[i].max_ids != 1) {
            char ptr[PTR_SIZE];
            snprintf(ptr, sizeof ptr, "/model/embeddings/%d/max_ids", i);
            return pf_error_set(err, PF_ERR_SPEC, ptr,
                                "%s: a criteo column holds one id: max_ids must be 1, got %d", ptr,
                                m->embeddings[i].max_ids);
        }
    return PF_OK;
}

/* Runs after check_model: the model is known here. */
pf_status pf_spec_check_data(pf_job_spec *s, pf_error *err) {
    const pf_data_spec *d = &s->data;
    const pf_model_spec *m = &s->model;
    if (d->format == PF_DATA_SYNTHETIC_LINEAR) {
        /* Its examples are one x and a real-valued y: only a linear model can fit them. */
        if (m->n_embeddings > 0)
            return pf_error_set(err, PF_ERR_SPEC, "/data/format",
                                "/data/format: synthetic_linear gives one number per example; a "
                                "model with embeddings reads ids: use libsvm, csv or "
                                "synthetic_ctr");
        if (m->type != PF_MODEL_LINEAR)
            return pf_error_set(err, PF_ERR_SPEC, "/data/format",
                                "/data/format: synthetic_linear gives regression targets; model "
                                "type %s needs class labels",
                                pf_spec_model_names[m->type]);
        if (m->inputs != 1)
            return pf_error_set(err, PF_ERR_SPEC, "/model/inputs",
                                "/model/inputs: synthetic_linear data has 1 feature, got %d",
                                m->inputs);
        return PF_OK;
    }
    /* One id per embedding feature and a click or not: a two-class model of embeddings. */
    if (d->format == PF_DATA_SYNTHETIC_CTR &&
        (m->n_embeddings == 0 || m->type == PF_MODEL_LINEAR || m->outputs != 2))
        return pf_error_set(err, PF_ERR_SPEC, "/data/format",
                            "/data/format: synthetic_ctr gives clicks (2 classes) over the ids of "
                            "model.embeddings: it needs a softmax or mlp model with embeddings "
                            "and outputs 2");
    if (d->format == PF_DATA_CRITEO) {
        pf_status st = check_criteo(m, err);
        if (st != PF_OK)
            return st;
    }
    if (d->streaming && d->n_test == 0)
        return pf_error_set(err, PF_ERR_SPEC, "/data/test",
                            "/data/test: streamed training files are never held whole, so "
                            "evaluation needs a test set: name its files in data.test");
    if (!d->streaming && d->on_error == PF_ON_ERROR_SKIP && d->format != PF_DATA_CRITEO)
        return pf_error_set(err, PF_ERR_SPEC, "/data/on_error",
                            "/data/on_error: skipping bad lines applies to criteo data and to "
                            "streamed (data.streaming) %s data",
                            pf_spec_format_names[d->format]);
    if (m->n_embeddings > 0 && d->format == PF_DATA_IDX)
        return pf_error_set(err, PF_ERR_SPEC, "/data/format",
                            "/data/format: a model with embeddings reads sparse examples (ids "
                            "and weights): use libsvm, csv or synthetic_ctr, got idx");
    bool hashed = false;
    for (int i = 0; i < m->n_embeddings; i++) {
        const pf_embedding_spec *e = &m->embeddings[i];
        char ptr[PTR_SIZE];
        snprintf(ptr, sizeof ptr, "/model/embeddings/%d/hash", i);
        if (e->hash && e->kind == PF_TABLE_DYNAMIC && d->format != PF_DATA_CSV)
            return pf_error_set(err, PF_ERR_SPEC, ptr,
                                "%s: a dynamic table keys its rows by the ids themselves: "
                                "%s ids need no hash (csv strings do)",
                                ptr, pf_spec_format_names[d->format]);
        if (e->hash && d->format != PF_DATA_CSV && d->format != PF_DATA_CRITEO &&
            d->format != PF_DATA_SYNTHETIC_CTR)
            return pf_error_set(err, PF_ERR_SPEC, ptr,
                                "%s: hash applies to csv, criteo and synthetic_ctr data; %s ids "
                                "index the table directly",
                                ptr, pf_spec_format_names[d->format]);
        hashed = hashed || (e->hash && d->format == PF_DATA_SYNTHETIC_CTR);
    }
    if (pf_model_has_dynamic(m) && d->format == PF_DATA_LIBSVM)
        return pf_error_set(err, PF_ERR_SPEC, "/data/format",
                            "/data/format: libsvm ids are positions in one id space the "
                            "tables share by their vocabs; a dynamic table reads its own ids "
                            "from csv, criteo or synthetic_ctr data");
    if (d->shift_step != 0 && !pf_model_has_dynamic(m))
        return pf_error_set(err, PF_ERR_SPEC, "/data/shift_step",
                            "/data/shift_step: shifts the ids of dynamic tables; this model has "
                            "none");
    if (d->distinct_ids != 0 && !pf_model_has_dynamic(m) && !hashed)
        return pf_error_set(err, PF_ERR_SPEC, "/data/distinct_ids",
                            "/data/distinct_ids: the ids of dynamic tables (and of fixed ones "
                            "with hash); this model's tables take ids 0 .. vocab - 1");
    if (m->numeric_inputs != 0 && d->format != PF_DATA_CRITEO)
        return pf_error_set(err, PF_ERR_SPEC, "/model/numeric_inputs",
                            "/model/numeric_inputs: numeric columns beside embeddings come from "
                            "criteo data; %s examples hold ids only",
                            pf_spec_format_names[d->format]);
    if (d->format == PF_DATA_SYNTHETIC_CTR)
        return PF_OK;
    pf_status st = check_paths("/data/train", d->format, d->n_train, d->streaming, err);
    return st != PF_OK ? st : check_paths("/data/test", d->format, d->n_test, false, err);
}

pf_status pf_spec_check_training(pf_job_spec *s, pf_error *err) {
    pf_training_spec *t = &s->training;
    int workers = s->replicas.worker;
    if (t->mode != PF_MODE_ASYNC)
        t->max_staleness = -1; /* not parsed: absent */
    if (t->replicas_to_aggregate == 0)
        t->replicas_to_aggregate = workers;
    else if (t->replicas_to_aggregate > workers)
        return pf_error_set(err, PF_ERR_SPEC, "/training/replicas_to_aggregate",
                            "/training/replicas_to_aggregate: must be at most replicas.worker "
                            "(%d), got %d",
                            workers, t->replicas_to_aggregate);
    if (s->data.splits == PF_SPLITS_DYNAMIC && !s->data.streaming)
        return pf_error_set(err, PF_ERR_SPEC, "/data/splits",
                            "/data/splits: dynamic splits are leased to the readers of streamed "
                            "input: set data.streaming");
    if (s->data.splits == PF_SPLITS_DYNAMIC && t->mode != PF_MODE_ASYNC)
        return pf_error_set(err, PF_ERR_SPEC, "/data/splits",
                            "/data/splits: dynamic splits go to whichever worker asks first, "
                            "and a sync step needs every worker's batch fixed in advance (so "
                            "that it equals one process): use static splits, or "
                            "training.mode async");
    if (s->data.splits == PF_SPLITS_DYNAMIC && t->prefetch)
        return pf_error_set(err, PF_ERR_SPEC, "/training/prefetch",
                            "/training/prefetch: cannot be combined with dynamic splits (a "
                            "batch is kept until its push was applied, so that a leased split "
                            "is recorded done only once it was trained on; a prefetched batch "
                            "would take its place)");
    if (s->data.splits == PF_SPLITS_DYNAMIC && t->max_staleness >= 0)
        return pf_error_set(err, PF_ERR_SPEC, "/training/max_staleness",
                            "/training/max_staleness: cannot be combined with dynamic splits (a "
                            "task that waits for the next epoch pushes nothing, and the bound "
                            "would hold back the tasks that read the epoch's last splits)");
    if (t->epochs > 0 && s->data.splits != PF_SPLITS_DYNAMIC)
        return pf_error_set(err, PF_ERR_SPEC, "/training/epochs",
                            "/training/epochs: epochs are counted by the work queue of "
                            "dynamic splits: set data.streaming and data.splits dynamic, or "
                            "count training in max_steps");
    if (t->prefetch && t->max_staleness >= 0)
        return pf_error_set(err, PF_ERR_SPEC, "/training/prefetch",
                            "/training/prefetch: cannot be combined with max_staleness (a "
                            "prefetched step is computed on values one push older than the "
                            "bound allows)");
    return PF_OK;
}

pf_status pf_spec_check_partitioner(pf_job_spec *s, pf_error *err) {
    pf_partitioner_spec *p = &s->partitioner;
    if (p->type == PF_PART_MIN_SIZE && p->max_shards == 0)
        return pf_error_set(err, PF_ERR_SPEC, "/placement/partitioner/max_shards",
                            "/placement/partitioner/max_shards: must be >= 1 for min_size, got 0");
    if (p->max_shards == -1)
        p->max_shards = p->type == PF_PART_MIN_SIZE ? 1 : 0;
    return PF_OK;
}

pf_status pf_spec_check_run_policy(pf_job_spec *s, pf_error *err) {
    (void)err;
    if (!strcmp(s->run_policy.queue, PF_DEFAULT_QUEUE))
        s->run_policy.queue[0] = '\0'; /* one form for the default queue: absent */
    return PF_OK;
}

const char *pf_job_spec_queue(const pf_job_spec *s) {
    return s->run_policy.queue[0] ? s->run_policy.queue : PF_DEFAULT_QUEUE;
}

/* Embedding lookups run on the host: a model with embeddings trains on the CPU, and "auto"
 * is written back as "cpu". */
pf_status pf_spec_check_devices(pf_job_spec *s, pf_error *err) {
    int64_t batch = s->training.batch_size > PF_EVAL_BATCH ? s->training.batch_size : PF_EVAL_BATCH;
    for (int f = 0; f < s->model.n_embeddings; f++) { /* a batch's rows: a fixed table */
        const pf_embedding_spec *e = &s->model.embeddings[f];
        if (e->kind == PF_TABLE_DYNAMIC && batch * e->max_ids > PF_MAX_VOCAB) {
            char ptr[PTR_SIZE];
            snprintf(ptr, sizeof ptr, "/model/embeddings/%d/max_ids", f);
            return pf_error_set(err, PF_ERR_SPEC, ptr,
                                "%s: a batch of %lld examples (training.batch_size, at least "
                                "%d for evaluation) names up to %lld ids of this dynamic table, "
                                "more than the %d one step can hold: lower max_ids or the batch",
                                ptr, (long long)batch, PF_EVAL_BATCH,
                                (long long)(batch * e->max_ids), PF_MAX_VOCAB);
        }
    }
    if (pf_model_has_dynamic(&s->model) && s->replicas_per_worker > 1)
        return pf_error_set(err, PF_ERR_SPEC, "/replicas_per_worker",
                            "/replicas_per_worker: in-graph replicas of a model with dynamic "
                            "tables are not built yet: use 1");
    for (int r = 0; s->model.n_embeddings > 0 && r < s->replicas_per_worker; r++) {
        if (s->devices[r].device == PF_DEVICE_AUTO)
            s->devices[r].device = PF_DEVICE_CPU;
        if (s->devices[r].device == PF_DEVICE_CUDA)
            return pf_error_set(err, PF_ERR_SPEC, "/device",
                                "/device: a model with embeddings trains on the CPU (\"cpu\" or "
                                "\"auto\", which then means the CPU), got a CUDA device");
    }
    return PF_OK;
}
