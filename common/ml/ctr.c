/* ctr.c - the synthetic_ctr generator: click-through data drawn from a known model (data.h),
 * the area under the ROC curve (pf_auc) and the calibration (pf_calibration).
 *
 * DESIGN: the true model is logistic: P(click) = sigmoid(bias + sum_f w_f(id_f)) over one id
 * per embedding feature. w_f(id) is signal * N(0, 1) drawn from its own rng stream keyed by
 * (seed, f, id), so the truth costs no memory for any vocabulary and every process computes
 * the same one. Ids follow Zipf's law over ranks 1..vocab (P(rank k) ~ k^-zipf, zipf.h);
 * rank k becomes id
 * (k * step) mod vocab with step coprime to vocab, so the hot ids are spread over the
 * table (and over the ps tasks of a partitioned one) as hashed ids are. A dynamic table's
 * ranks run over 1..data.distinct_ids and become ids of a 2^40 space by a bijection; a fixed
 * table with `hash` draws the same ids and hashes each into its vocab rows, so that ids share
 * rows (the collisions a dynamic table avoids; its Bayes-optimal AUC is then unknown from the
 * rows, NaN). The
 * Bayes-optimal AUC of a test set is the AUC of the true logits against its drawn labels: no model
 * can rank those examples better in expectation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/data.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/rng.h"
#include "zipf.h"

#define TRUTH_SEED 0x63747274727574ULL /* keys the true weights apart from other streams */

static int64_t gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* A step coprime to vocab near vocab / golden ratio: rank -> id is then a permutation. */
static int64_t spread_step(int64_t vocab) {
    int64_t step = (int64_t)(0.6180339887498949 * (double)vocab) | 1;
    while (gcd(step, vocab) != 1)
        step++;
    return step;
}

double pf_synthetic_ctr_weight(double signal, uint64_t seed, int feature, int64_t id) {
    pf_rng rng;
    pf_rng_init(&rng, seed ^ TRUTH_SEED, ((uint64_t)(feature + 1) << 40) ^ (uint64_t)id);
    return signal * pf_rng_normal(&rng);
}

#define ID_SPACE_BITS 40
#define ID_SPACE_MASK ((1ULL << ID_SPACE_BITS) - 1)

int64_t pf_synthetic_ctr_distinct_ids(const pf_data_spec *d) {
    return d->distinct_ids > 0 ? d->distinct_ids : 1000000;
}

/* A dynamic table's rank k (1 ..) as an id of 0 .. 2^40 - 1: multiplications by odd numbers
 * and shifted xors modulo 2^40, each a bijection, so distinct ranks are distinct ids, spread
 * over the whole space as hashed ids are. */
uint64_t pf_synthetic_ctr_dynamic_id(int64_t rank) {
    uint64_t z = (uint64_t)rank & ID_SPACE_MASK;
    z = (z * 0x9e3779b97f4a7c15ULL) & ID_SPACE_MASK;
    z ^= z >> 20;
    z = (z * 0xbf58476d1ce4e5b9ULL) & ID_SPACE_MASK;
    z ^= z >> 17;
    return z;
}

/* A hashed fixed table's row of a 2^40-space id: a 64-bit mix of it modulo the vocab. */
static int64_t hashed_row(uint64_t id, int64_t vocab) {
    uint64_t z = id + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (int64_t)(z % (uint64_t)vocab);
}

void pf_synthetic_ctr_shift(const pf_model_spec *m, float *x, int64_t count) {
    const size_t width = (size_t)pf_model_input_width(m);
    for (int f = 0, col = 0; f < m->n_embeddings;
         col += pf_model_feature_width(&m->embeddings[f++]))
        for (int64_t i = 0; m->embeddings[f].kind == PF_TABLE_DYNAMIC && i < count; i++)
            for (int k = 0; k < m->embeddings[f].max_ids; k++) {
                float *ids = x + (size_t)i * width + (size_t)col;
                uint64_t id;
                if (pf_model_get_id(ids, k, &id) > 0)
                    pf_model_put_id(ids, k, id | (1ULL << ID_SPACE_BITS));
            }
}

double pf_synthetic_ctr_logit(const pf_job_spec *spec, const float *row) {
    const pf_model_spec *m = &spec->model;
    double logit = spec->data.bias;
    for (int f = 0, col = 0; f < m->n_embeddings; f++) {
        const pf_embedding_spec *e = &m->embeddings[f];
        uint64_t dyn;
        if (e->kind == PF_TABLE_FIXED && e->hash)
            return NAN; /* the row of a hashed id does not say which id it was */
        if (e->kind == PF_TABLE_DYNAMIC && pf_model_get_id(row + col, 0, &dyn) > 0)
            logit += pf_synthetic_ctr_weight(spec->data.signal, spec->training.seed, f,
                                             (int64_t)(dyn & ID_SPACE_MASK)); /* shifted too */
        else if (e->kind != PF_TABLE_DYNAMIC && row[col] >= 0)
            logit += pf_synthetic_ctr_weight(spec->data.signal, spec->training.seed, f,
                                             (int64_t)row[col]);
        col += pf_model_feature_width(e);
    }
    return logit;
}

pf_status pf_synthetic_ctr(const pf_job_spec *spec, int64_t n, uint64_t stream, pf_dataset *out) {
    memset(out, 0, sizeof *out);
    const pf_model_spec *m = &spec->model;
    const pf_data_spec *d = &spec->data;
    if (n < 1 || !pf_model_embeddings_valid(m) || !(d->zipf > 0) || !(d->signal >= 0) ||
        !isfinite(d->bias))
        return PF_ERR_INVALID;
    int width = pf_model_input_width(m);
    if (pf_dataset_alloc(out, n, width) != PF_OK)
        return PF_ERR_NOMEM;
    out->num_classes = 2;
    data_zipf z[PF_MAX_EMBEDDINGS];
    int64_t step[PF_MAX_EMBEDDINGS];
    for (int f = 0; f < m->n_embeddings; f++) {
        bool dynamic = m->embeddings[f].kind == PF_TABLE_DYNAMIC || m->embeddings[f].hash;
        data_zipf_init(&z[f], dynamic ? pf_synthetic_ctr_distinct_ids(d) : m->embeddings[f].vocab,
                       d->zipf);
        step[f] = dynamic ? 0 : spread_step(m->embeddings[f].vocab);
    }
    pf_rng rng;
    pf_rng_init(&rng, spec->training.seed, stream);
    for (int64_t i = 0; i < n; i++) {
        float *row = out->x + (size_t)i * (size_t)width;
        pf_model_pad_example(m, row);
        double logit = d->bias;
        for (int f = 0, col = 0; f < m->n_embeddings; f++) {
            const pf_embedding_spec *e = &m->embeddings[f];
            int64_t rank = data_zipf_rank(&z[f], &rng);
            int64_t id;
            if (e->kind == PF_TABLE_DYNAMIC) { /* one id of weight 1 from a 2^40 space */
                id = (int64_t)pf_synthetic_ctr_dynamic_id(rank);
                pf_model_put_id(row + col, 0, (uint64_t)id);
                row[col + e->max_ids * PF_DYN_ID_SLOTS] = 1;
            } else if (e->hash) { /* the same ids, hashed into the vocab's rows */
                id = (int64_t)pf_synthetic_ctr_dynamic_id(rank);
                row[col] = (float)hashed_row((uint64_t)id, e->vocab);
                row[col + e->max_ids] = 1;
            } else { /* one id of weight 1: rank * step mod vocab, no overflow (both <= 2^24) */
                id = (rank * step[f]) % e->vocab;
                row[col] = (float)id;
                row[col + e->max_ids] = 1;
            }
            logit += pf_synthetic_ctr_weight(d->signal, spec->training.seed, f, id);
            col += pf_model_feature_width(e);
        }
        double p = 1 / (1 + exp(-logit));
        out->y[i] = pf_rng_uniform(&rng) < p ? 1.0f : 0.0f;
    }
    return PF_OK;
}

/* --- AUC ----------------------------------------------------------------------------------------
 */

typedef struct scored {
    float score;
    float label;
} scored;

static int by_score(const void *a, const void *b) {
    float x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return (x > y) - (x < y);
}

double pf_auc(const float *scores, const float *labels, int64_t n) {
    scored *v = n > 0 ? pf_mallocarray((size_t)n, sizeof *v) : NULL;
    if (!v)
        return NAN;
    for (int64_t i = 0; i < n; i++) {
        v[i].score = scores[i];
        v[i].label = labels[i];
        if (isnan(scores[i])) {
            pf_free(v);
            return NAN;
        }
    }
    qsort(v, (size_t)n, sizeof *v, by_score);
    /* Mann-Whitney: the positives' ranks (ties share the mean rank of their run). */
    double rank_sum = 0, pos = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        double run_pos = 0;
        while (j < n && v[j].score == v[i].score)
            run_pos += v[j++].label > 0.5f;
        rank_sum += run_pos * ((double)(i + 1) + (double)j) / 2;
        pos += run_pos;
        i = j;
    }
    pf_free(v);
    double neg = (double)n - pos;
    if (pos == 0 || neg == 0)
        return NAN;
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

double pf_calibration(const float *scores, const float *labels, int64_t n) {
    double predicted = 0, positives = 0;
    if (!scores || !labels)
        return NAN;
    for (int64_t i = 0; i < n; i++) {
        predicted += 1.0 / (1.0 + exp(-(double)scores[i]));
        positives += labels[i] > 0.5f;
    }
    if (n <= 0 || positives == 0)
        return NAN; /* a NaN score makes the sum NaN too */
    return predicted / positives;
}

double pf_synthetic_ctr_bayes_auc(const pf_job_spec *spec, const pf_dataset *test) {
    float *logits = test->n > 0 ? pf_mallocarray((size_t)test->n, sizeof *logits) : NULL;
    if (!logits)
        return NAN;
    for (int64_t i = 0; i < test->n; i++)
        logits[i] =
            (float)pf_synthetic_ctr_logit(spec, test->x + (size_t)i * (size_t)test->features);
    double auc = pf_auc(logits, test->y, test->n);
    pf_free(logits);
    return auc;
}
