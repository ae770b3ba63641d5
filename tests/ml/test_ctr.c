/* test_ctr.c - the synthetic_ctr generator, pf_auc and pf_calibration (data.h): Zipf
 * frequencies against k^-s, the rank-to-id permutation, determinism per (seed, stream), the
 * click rate against the true model's, the Bayes-optimal AUC, and AUC and calibration on
 * cases computed by hand.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/data.h"
#include "psflow/mem.h"
#include "psflow/model.h"

/* Two features: "a" with 1000 ids (1 slot), "b" with 50 ids (2 slots, one padded). */
static pf_job_spec ctr_spec(double zipf) {
    pf_job_spec s;
    memset(&s, 0, sizeof s);
    s.model.type = PF_MODEL_SOFTMAX;
    s.model.outputs = 2;
    s.model.n_embeddings = 2;
    s.model.embeddings[0] = (pf_embedding_spec){.name = "a",
                                                .vocab = 1000,
                                                .dim = 4,
                                                .combiner = PF_COMBINE_SUM,
                                                .max_ids = 1,
                                                .hash = false};
    s.model.embeddings[1] = (pf_embedding_spec){.name = "b",
                                                .vocab = 50,
                                                .dim = 4,
                                                .combiner = PF_COMBINE_SUM,
                                                .max_ids = 2,
                                                .hash = false};
    s.data.format = PF_DATA_SYNTHETIC_CTR;
    s.data.zipf = zipf;
    s.data.signal = 1;
    s.data.bias = -1;
    s.training.seed = 7;
    return s;
}

static void test_examples(void **state) {
    (void)state;
    pf_job_spec spec = ctr_spec(1.2);
    enum { N = 200000 };
    pf_dataset ds;
    assert_int_equal(pf_synthetic_ctr(&spec, N, 1, &ds), PF_OK);
    assert_int_equal(ds.n, N);
    assert_int_equal(ds.features, pf_model_input_width(&spec.model));
    assert_int_equal(ds.features, 2 + 4);
    assert_int_equal(ds.num_classes, 2);
    int64_t *count = pf_calloc(1000, sizeof *count);
    assert_non_null(count);
    double clicks = 0, expected = 0;
    for (int64_t i = 0; i < N; i++) {
        const float *row = ds.x + i * 6;
        assert_true(row[0] >= 0 && row[0] < 1000 && row[0] == floorf(row[0]) && row[1] == 1);
        assert_true(row[2] >= 0 && row[2] < 50 && row[3] == -1 && row[4] == 1 && row[5] == 0);
        count[(int)row[0]]++;
        assert_true(ds.y[i] == 0 || ds.y[i] == 1);
        clicks += ds.y[i];
        expected += 1 / (1 + exp(-pf_synthetic_ctr_logit(&spec, row)));
    }
    /* The click rate is the true model's (binomial sd ~ 0.001). */
    assert_true(fabs(clicks / N - expected / N) < 0.005);
    /* Sorted counts fall as k^-1.2: the top id is 2^1.2 times the second, 4^1.2 times the
     * 4th, within sampling error; the hottest id is not id 0 (ranks are spread). */
    int64_t top[4] = {0};
    int hottest = 0;
    for (int id = 0; id < 1000; id++) {
        int64_t c = count[id];
        hottest = c > count[hottest] ? id : hottest;
        for (int k = 0; k < 4; k++)
            if (c > top[k]) {
                memmove(top + k + 1, top + k, (size_t)(3 - k) * sizeof *top);
                top[k] = c;
                break;
            }
    }
    assert_true(hottest != 0);
    double r2 = (double)top[0] / (double)top[1], r4 = (double)top[0] / (double)top[3];
    print_message("top id %d: %lld draws; ratios to the 2nd %.3f (k^s %.3f), to the 4th %.3f "
                  "(%.3f)\n",
                  hottest, (long long)top[0], r2, pow(2, 1.2), r4, pow(4, 1.2));
    assert_true(fabs(r2 - pow(2, 1.2)) < 0.08);
    assert_true(fabs(r4 - pow(4, 1.2)) < 0.2);

    /* The same (seed, stream) gives the same examples; another stream others. */
    pf_dataset again, other;
    assert_int_equal(pf_synthetic_ctr(&spec, N, 1, &again), PF_OK);
    assert_memory_equal(ds.x, again.x, (size_t)N * 6 * sizeof(float));
    assert_memory_equal(ds.y, again.y, (size_t)N * sizeof(float));
    assert_int_equal(pf_synthetic_ctr(&spec, 100, 2, &other), PF_OK);
    assert_true(memcmp(ds.x, other.x, 100 * 6 * sizeof(float)) != 0);

    /* Bayes-optimal AUC: the truth ranks the clicks well above chance. */
    double bayes = pf_synthetic_ctr_bayes_auc(&spec, &ds);
    print_message("Bayes-optimal AUC %.4f, click rate %.4f\n", bayes, clicks / N);
    assert_true(bayes > 0.7 && bayes < 0.95);
    pf_dataset_deinit(&ds);
    pf_dataset_deinit(&again);
    pf_dataset_deinit(&other);
    pf_free(count);

    /* The true weights: fixed per (seed, feature, id), scaled by signal. */
    assert_true(pf_synthetic_ctr_weight(1, 7, 0, 5) == pf_synthetic_ctr_weight(1, 7, 0, 5));
    assert_true(pf_synthetic_ctr_weight(1, 7, 0, 5) != pf_synthetic_ctr_weight(1, 7, 1, 5));
    assert_true(fabs(pf_synthetic_ctr_weight(2, 7, 0, 5) -
                     2 * pf_synthetic_ctr_weight(1, 7, 0, 5)) < 1e-12);
}

/* A vocabulary of 2^24 ids and a steep exponent: every id in range, no overflow. */
static void test_large_vocab(void **state) {
    (void)state;
    pf_job_spec spec = ctr_spec(1.05);
    spec.model.n_embeddings = 1;
    spec.model.embeddings[0].vocab = PF_MAX_VOCAB;
    pf_dataset ds;
    assert_int_equal(pf_synthetic_ctr(&spec, 20000, 1, &ds), PF_OK);
    float lo = ds.x[0], hi = ds.x[0];
    for (int64_t i = 0; i < ds.n; i++) {
        float id = ds.x[i * 2];
        assert_true(id >= 0 && id < (float)PF_MAX_VOCAB && id == floorf(id));
        lo = fminf(lo, id);
        hi = fmaxf(hi, id);
    }
    assert_true(hi - lo > PF_MAX_VOCAB / 4); /* spread over the table */
    pf_dataset_deinit(&ds);
    spec.model.n_embeddings = 0;
    assert_int_equal(pf_synthetic_ctr(&spec, 10, 1, &ds), PF_ERR_INVALID);
    spec = ctr_spec(0);
    assert_int_equal(pf_synthetic_ctr(&spec, 10, 1, &ds), PF_ERR_INVALID);
}

static void test_auc(void **state) {
    (void)state;
    const float labels[] = {1, 0, 1, 0};
    const float perfect[] = {4, 1, 3, 2}, reversed[] = {1, 4, 2, 3}, tied[] = {1, 1, 1, 1};
    assert_true(pf_auc(perfect, labels, 4) == 1);
    assert_true(pf_auc(reversed, labels, 4) == 0);
    assert_true(pf_auc(tied, labels, 4) == 0.5);
    /* Positives at 0.9, 0.4, 0.4; negatives at 0.4, 0.1: of 6 pairs, 0.9 beats both, each
     * 0.4 beats 0.1 and ties 0.4 -> (2 + 1.5 + 1.5) / 6. */
    const float s[] = {0.9f, 0.4f, 0.4f, 0.4f, 0.1f}, y[] = {1, 1, 1, 0, 0};
    assert_true(fabs(pf_auc(s, y, 5) - 5.0 / 6) < 1e-12);
    const float one_class[] = {1, 1, 1, 1};
    assert_true(isnan(pf_auc(perfect, one_class, 4)));
    const float with_nan[] = {1, NAN, 2, 3};
    assert_true(isnan(pf_auc(with_nan, labels, 4)));
    assert_true(isnan(pf_auc(perfect, labels, 0)));
}

static void test_calibration(void **state) {
    (void)state;
    /* Scores 0 predict 0.5 each against a click rate of 0.5: calibrated. */
    const float zeros[] = {0, 0, 0, 0}, labels[] = {1, 0, 1, 0};
    assert_true(fabs(pf_calibration(zeros, labels, 4) - 1) < 1e-12);
    /* sigmoid(+-ln 3) = 0.75, 0.25: a mean prediction of 0.5 against one click in four. */
    const float s[] = {0, 0, logf(3), -logf(3)}, one_click[] = {1, 0, 0, 0};
    assert_true(fabs(pf_calibration(s, one_click, 4) - 2) < 1e-6);
    const float none[] = {0, 0, 0, 0}, with_nan[] = {0, NAN, 0, 0};
    assert_true(isnan(pf_calibration(zeros, none, 4)));
    assert_true(isnan(pf_calibration(with_nan, labels, 4)));
    assert_true(isnan(pf_calibration(zeros, labels, 0)));
    assert_true(isnan(pf_calibration(NULL, labels, 4)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_large_vocab),
        cmocka_unit_test(test_auc),
        cmocka_unit_test(test_calibration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
