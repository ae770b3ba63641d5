/* test_model.c - model layout, initialisation, and gradient checks.
 *
 * Gradient checks: the analytic float32 gradients from pf_model_train_step (and from the
 * backend's activation and loss ops on their own) are compared with central finite
 * differences of a double-precision forward pass written independently here. The
 * relative error per variable is ||analytic - numeric|| / max(||numeric||, 1e-6) and must
 * stay below 1e-4.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/rng.h"
#include "tests/support/counting_alloc.h"

#define MAX_REL_ERR 1e-4
#define FD_STEP     1e-6

static double worst_model_err; /* largest relative error seen, printed per backend */

/* --- double-precision reference --------------------------------------------------------- */

static double act_d(pf_activation a, double x) {
    switch (a) {
    case PF_ACT_RELU:
        return x > 0 ? x : 0;
    case PF_ACT_TANH:
        return tanh(x);
    case PF_ACT_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    default:
        return x;
    }
}

/* Mean loss of the model with parameters p over a batch, all in double. */
static double ref_loss(const pf_model_spec *spec, const double *p, const double *x, const double *y,
                       int batch) {
    pf_var_info vars[PF_MAX_VARS];
    int nv = pf_model_layout(spec, vars);
    int layers = nv / 2;
    double total = 0;
    for (int r = 0; r < batch; r++) {
        double a[64] = {0}, z[64] = {0};
        int width = spec->inputs;
        for (int i = 0; i < width; i++)
            a[i] = x[r * spec->inputs + i];
        for (int l = 0; l < layers; l++) {
            const pf_var_info *k = &vars[2 * l], *b = &vars[2 * l + 1];
            int out = (int)k->shape[1];
            for (int j = 0; j < out; j++) {
                double s = p[b->offset + j];
                for (int i = 0; i < width; i++)
                    s += a[i] * p[k->offset + (size_t)i * out + j];
                z[j] = l + 1 < layers ? act_d(spec->activation, s) : s;
            }
            memcpy(a, z, sizeof(double) * out);
            width = out;
        }
        if (spec->type == PF_MODEL_LINEAR) {
            double d = a[0] - y[r];
            total += d * d;
        } else {
            double mx = a[0];
            for (int j = 1; j < width; j++)
                mx = a[j] > mx ? a[j] : mx;
            double se = 0;
            for (int j = 0; j < width; j++)
                se += exp(a[j] - mx);
            total += -(a[(int)y[r]] - mx - log(se));
        }
    }
    return total / batch;
}

static double rel_err(const float *analytic, const double *numeric, size_t n) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        diff += (analytic[i] - numeric[i]) * (analytic[i] - numeric[i]);
        norm += numeric[i] * numeric[i];
    }
    return sqrt(diff) / fmax(sqrt(norm), 1e-6);
}

/* --- model gradient checks ---------------------------------------------------------------- */

static void check_model(const pf_backend *be, pf_model_spec spec, int batch, uint64_t seed) {
    size_t np = pf_model_num_params(&spec);
    float *pf = pf_calloc(np, sizeof(float)), *gf = pf_calloc(np, sizeof(float));
    double *pd = pf_calloc(np, sizeof(double)), *gd = pf_calloc(np, sizeof(double));
    float *xf = pf_calloc((size_t)batch * spec.inputs, sizeof(float));
    double *xd = pf_calloc((size_t)batch * spec.inputs, sizeof(double));
    float *yf = pf_calloc((size_t)batch, sizeof(float));
    double *yd = pf_calloc((size_t)batch, sizeof(double));
    int32_t *labels = pf_calloc((size_t)batch, sizeof(int32_t));
    assert_non_null(labels);

    pf_rng rng;
    pf_rng_init(&rng, seed, 7);
    pf_model_init_params(&spec, seed, pf);
    /* Non-zero biases so every bias path is exercised. */
    pf_var_info vars[PF_MAX_VARS];
    int nv = pf_model_layout(&spec, vars);
    for (int v = 1; v < nv; v += 2)
        for (size_t j = 0; j < vars[v].count; j++)
            pf[vars[v].offset + j] = (float)(pf_rng_uniform(&rng) - 0.5);
    for (size_t i = 0; i < np; i++)
        pd[i] = pf[i];
    for (int i = 0; i < batch * spec.inputs; i++)
        xd[i] = xf[i] = (float)(2 * pf_rng_uniform(&rng) - 1);
    for (int r = 0; r < batch; r++) {
        if (spec.type == PF_MODEL_LINEAR)
            yd[r] = yf[r] = (float)(3 * pf_rng_uniform(&rng));
        else
            yd[r] = yf[r] = (float)(labels[r] = (int32_t)pf_rng_below(&rng, spec.outputs));
    }

    /* Analytic gradients through the backend. */
    pf_model *m;
    assert_int_equal(pf_model_create(&spec, be, batch, &m), PF_OK);
    float *bp = be->alloc(np * sizeof(float)), *bg = be->alloc(np * sizeof(float));
    float *bx = be->alloc((size_t)batch * spec.inputs * sizeof(float));
    float *by = be->alloc((size_t)batch * sizeof(float));
    int32_t *bl = be->alloc((size_t)batch * sizeof(int32_t));
    be->upload(bp, pf, np);
    be->upload(bx, xf, (size_t)batch * spec.inputs);
    be->upload(by, yf, (size_t)batch);
    be->upload_i32(bl, labels, (size_t)batch);
    float loss = pf_model_train_step(m, bp, bx, by, bl, batch, bg);
    be->download(gf, bg, np);

    double ref = ref_loss(&spec, pd, xd, yd, batch);
    assert_true(fabs(loss - ref) <= 1e-5 * fmax(1.0, fabs(ref)));

    /* Numeric gradients by central differences in double precision. */
    for (size_t i = 0; i < np; i++) {
        double keep = pd[i];
        pd[i] = keep + FD_STEP;
        double up = ref_loss(&spec, pd, xd, yd, batch);
        pd[i] = keep - FD_STEP;
        double down = ref_loss(&spec, pd, xd, yd, batch);
        pd[i] = keep;
        gd[i] = (up - down) / (2 * FD_STEP);
    }
    for (int v = 0; v < nv; v++) {
        double e = rel_err(gf + vars[v].offset, gd + vars[v].offset, vars[v].count);
        worst_model_err = fmax(worst_model_err, e);
        if (e >= MAX_REL_ERR)
            print_error("%s %s %s: relative error %.3g\n", be->name, pf_model_type_name(spec.type),
                        vars[v].name, e);
        assert_true(e < MAX_REL_ERR);
    }

    /* Evaluation agrees with the training loss on the same batch. */
    pf_eval ev = {0};
    pf_model_eval_batch(m, bp, bx, by, bl, batch, &ev);
    assert_int_equal(ev.examples, batch);
    assert_true(fabs(ev.loss_sum / batch - ref) <= 1e-5 * fmax(1.0, fabs(ref)));

    be->free(bp);
    be->free(bg);
    be->free(bx);
    be->free(by);
    be->free(bl);
    pf_model_destroy(m);
    pf_free(pf);
    pf_free(gf);
    pf_free(pd);
    pf_free(gd);
    pf_free(xf);
    pf_free(xd);
    pf_free(yf);
    pf_free(yd);
    pf_free(labels);
}

static const pf_model_spec linear_spec = {.type = PF_MODEL_LINEAR, .inputs = 3, .outputs = 1};
static const pf_model_spec softmax_spec = {.type = PF_MODEL_SOFTMAX, .inputs = 7, .outputs = 5};

static pf_model_spec mlp_spec(pf_activation act) {
    pf_model_spec s = {.type = PF_MODEL_MLP,
                       .inputs = 6,
                       .outputs = 4,
                       .n_hidden = 2,
                       .hidden = {5, 3},
                       .activation = act};
    return s;
}

static void test_gradcheck(const pf_backend *be) {
    check_model(be, linear_spec, 9, 1);
    check_model(be, softmax_spec, 11, 2);
    check_model(be, mlp_spec(PF_ACT_RELU), 8, 3);
    check_model(be, mlp_spec(PF_ACT_TANH), 8, 4);
    check_model(be, mlp_spec(PF_ACT_SIGMOID), 8, 5);
    pf_model_spec one = {.type = PF_MODEL_MLP,
                         .inputs = 4,
                         .outputs = 3,
                         .n_hidden = 1,
                         .hidden = {13},
                         .activation = PF_ACT_TANH};
    check_model(be, one, 1, 6); /* batch of one */
    print_message("%s: largest relative gradient error %.2e (limit %.0e)\n", be->name,
                  worst_model_err, MAX_REL_ERR);
    worst_model_err = 0;
}

static void test_gradcheck_reference(void **state) {
    (void)state;
    test_gradcheck(pf_backend_reference());
}

static void test_gradcheck_openblas(void **state) {
    (void)state;
    test_gradcheck(pf_backend_openblas());
}

/* --- op-level checks: each activation and loss on its own ---------------------------------- */

static void test_activation_grads(void **state) {
    (void)state;
    const pf_backend *bes[] = {pf_backend_reference(), pf_backend_openblas()};
    const pf_activation acts[] = {PF_ACT_RELU, PF_ACT_TANH, PF_ACT_SIGMOID};
    enum { N = 33 };
    for (int b = 0; b < 2; b++)
        for (int a = 0; a < 3; a++) {
            pf_rng rng;
            pf_rng_init(&rng, 42, (uint64_t)a);
            float x[N], y[N], dy[N], dx[N];
            double num[N];
            for (int i = 0; i < N; i++) {
                x[i] = (float)(4 * pf_rng_uniform(&rng) - 2);
                if (fabsf(x[i]) < 1e-3f)
                    x[i] = 0.5f; /* keep relu away from its kink */
                dy[i] = (float)(pf_rng_uniform(&rng) - 0.5);
            }
            bes[b]->activation(acts[a], N, x, y);
            bes[b]->activation_grad(acts[a], N, y, dy, dx);
            for (int i = 0; i < N; i++) {
                /* d/dx of sum_i dy_i act(x_i) */
                double up = act_d(acts[a], (double)x[i] + FD_STEP);
                double down = act_d(acts[a], (double)x[i] - FD_STEP);
                num[i] = dy[i] * (up - down) / (2 * FD_STEP);
                assert_true(fabs(y[i] - act_d(acts[a], x[i])) < 1e-6);
            }
            double e = rel_err(dx, num, N);
            if (e >= MAX_REL_ERR)
                print_error("%s %s: relative error %.3g\n", bes[b]->name,
                            pf_activation_name(acts[a]), e);
            assert_true(e < MAX_REL_ERR);
        }
}

static void test_loss_grads(void **state) {
    (void)state;
    enum { R = 6, C = 5 };
    const pf_backend *bes[] = {pf_backend_reference(), pf_backend_openblas()};
    for (int b = 0; b < 2; b++) {
        pf_rng rng;
        pf_rng_init(&rng, 9, (uint64_t)b);
        float logits[R * C], dl[R * C], pred[R], target[R], dp[R];
        int32_t labels[R];
        double num[R * C];
        for (int i = 0; i < R * C; i++)
            logits[i] = (float)(6 * pf_rng_uniform(&rng) - 3);
        for (int r = 0; r < R; r++) {
            labels[r] = (int32_t)pf_rng_below(&rng, C);
            pred[r] = (float)pf_rng_uniform(&rng);
            target[r] = (float)(2 * pf_rng_uniform(&rng));
        }
        bes[b]->softmax_xent(R, C, logits, labels, dl);
        for (int i = 0; i < R * C; i++) {
            double v[R * C];
            for (int j = 0; j < R * C; j++)
                v[j] = logits[j];
            double f[2];
            for (int s = 0; s < 2; s++) {
                v[i] = (double)logits[i] + (s ? -FD_STEP : FD_STEP);
                double total = 0;
                for (int r = 0; r < R; r++) {
                    double mx = v[r * C], se = 0;
                    for (int c = 1; c < C; c++)
                        mx = fmax(mx, v[r * C + c]);
                    for (int c = 0; c < C; c++)
                        se += exp(v[r * C + c] - mx);
                    total += -(v[r * C + labels[r]] - mx - log(se));
                }
                f[s] = total / R;
            }
            num[i] = (f[0] - f[1]) / (2 * FD_STEP);
        }
        assert_true(rel_err(dl, num, R * C) < MAX_REL_ERR);

        bes[b]->mse(R, pred, target, dp);
        double numm[R];
        for (int r = 0; r < R; r++)
            numm[r] = 2.0 * ((double)pred[r] - target[r]) / R; /* exact derivative of the mean */
        assert_true(rel_err(dp, numm, R) < MAX_REL_ERR);
    }
}

/* --- layout and initialisation ------------------------------------------------------------- */

static void test_layout(void **state) {
    (void)state;
    pf_model_spec s = {.type = PF_MODEL_MLP,
                       .inputs = 784,
                       .outputs = 10,
                       .n_hidden = 2,
                       .hidden = {256, 256},
                       .activation = PF_ACT_RELU};
    pf_var_info v[PF_MAX_VARS];
    int n = pf_model_layout(&s, v);
    assert_int_equal(n, 6);
    const char *names[] = {"dense_0/kernel", "dense_0/bias",   "dense_1/kernel",
                           "dense_1/bias",   "dense_2/kernel", "dense_2/bias"};
    const int64_t rows[] = {784, 256, 256, 256, 256, 10};
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        assert_string_equal(v[i].name, names[i]);
        assert_int_equal(v[i].shape[0], rows[i]);
        assert_int_equal(v[i].offset, offset);
        offset += v[i].count;
    }
    assert_int_equal(v[0].shape[1], 256);
    assert_int_equal(v[4].shape[1], 10);
    assert_int_equal(pf_model_num_params(&s), 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
    assert_true(pf_model_flops_per_example(&s) == 6.0 * (784 * 256 + 256 * 256 + 256 * 10));
}

static void test_init(void **state) {
    (void)state;
    pf_model_spec s = mlp_spec(PF_ACT_RELU);
    size_t np = pf_model_num_params(&s);
    float a[128], b[128], c[128];
    assert_true(np <= 128);
    pf_model_init_params(&s, 5, a);
    pf_model_init_params(&s, 5, b);
    pf_model_init_params(&s, 6, c);
    assert_memory_equal(a, b, np * sizeof(float));
    assert_true(memcmp(a, c, np * sizeof(float)) != 0);
    pf_var_info v[PF_MAX_VARS];
    int n = pf_model_layout(&s, v);
    for (int i = 0; i < n; i++) {
        double limit = sqrt(6.0 / (double)(v[i].shape[0] + v[i].shape[1]));
        for (size_t j = 0; j < v[i].count; j++) {
            float x = a[v[i].offset + j];
            if (v[i].rank == 1)
                assert_true(x == 0.0f);
            else
                assert_true(fabs(x) <= limit && x != 0.0f);
        }
    }
}

/* Ranges of the initial vector (a ps task's shards) are exactly its elements, whichever
 * variables they start and end in, biases included, with gaps between them untouched. */
static void test_init_ranges(void **state) {
    (void)state;
    pf_model_spec s = mlp_spec(PF_ACT_RELU);
    size_t np = pf_model_num_params(&s);
    float whole[128], part[128];
    assert_true(np <= 128);
    pf_model_init_params(&s, 7, whole);
    /* every split into up to three ranges with gaps: [a, b) [c, d) [e, np) */
    for (size_t a = 0; a < np; a += 3)
        for (size_t b = a; b <= np; b += 5)
            for (size_t c = b; c <= np; c += 7) {
                size_t offsets[3] = {a, c, c + (np - c) / 2};
                size_t counts[3] = {b - a, (np - c) / 2 - (np - c) / 4, np - offsets[2]};
                for (size_t k = 0; k < np; k++)
                    part[k] = -99.0f;
                float *outs[3] = {part + offsets[0], part + offsets[1], part + offsets[2]};
                pf_model_init_ranges(&s, 7, 3, offsets, counts, outs);
                for (size_t k = 0; k < np; k++) {
                    int inside = 0;
                    for (int r = 0; r < 3; r++)
                        inside |= k >= offsets[r] && k < offsets[r] + counts[r];
                    if (inside)
                        assert_true(part[k] == whole[k]);
                    else
                        assert_true(part[k] == -99.0f);
                }
            }
}

/* Every allocation failure in pf_model_create is reported, never a crash or a leak. */
static void test_create_nomem(void **state) {
    (void)state;
    pf_model_spec s = mlp_spec(PF_ACT_TANH);
    for (int k = 0; k < 12; k++) {
        use_counting(k);
        pf_model *m = NULL;
        pf_status st = pf_model_create(&s, pf_backend_openblas(), 4, &m);
        use_libc();
        assert_true(st == PF_OK || st == PF_ERR_NOMEM);
        if (st == PF_OK)
            pf_model_destroy(m);
        else
            assert_null(m);
    }
}

/* pf_first_nonfinite finds the first NaN or infinity wherever it lies: inside, first and
 * last in a block of its scan, at either end, and none in a finite vector (denormals, the
 * largest float and -0 are finite). */
static void test_first_nonfinite(void **state) {
    (void)state;
    const size_t n = 5000;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)i * 0.5f - 100.0f;
    x[7] = FLT_MAX;
    x[8] = -FLT_MAX;
    x[9] = FLT_MIN / 4;
    x[10] = -0.0f;
    assert_int_equal(pf_first_nonfinite(x, n), n);
    assert_int_equal(pf_first_nonfinite(x, 0), 0);
    const size_t at[] = {0, 1, 1023, 1024, 1025, 2047, 3000, 4999};
    const float bad[] = {NAN, INFINITY, -INFINITY, -NAN};
    for (size_t a = 0; a < sizeof at / sizeof at[0]; a++)
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            float keep = x[at[a]];
            x[at[a]] = bad[k];
            assert_int_equal(pf_first_nonfinite(x, n), at[a]);
            assert_int_equal(pf_first_nonfinite(x, at[a]), at[a]); /* not in range: none */
            if (at[a] + 100 < n) {
                x[at[a] + 100] = NAN; /* the first of two */
                assert_int_equal(pf_first_nonfinite(x, n), at[a]);
                x[at[a] + 100] = (float)(at[a] + 100) * 0.5f - 100.0f;
            }
            x[at[a]] = keep;
        }
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_nonfinite),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_activation_grads),
        cmocka_unit_test(test_loss_grads),
        cmocka_unit_test(test_gradcheck_reference),
        cmocka_unit_test(test_gradcheck_openblas),
        cmocka_unit_test(test_init_ranges),
        cmocka_unit_test(test_create_nomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
