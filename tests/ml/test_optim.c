/* test_optim.c - optim.h against TensorFlow's update formulas worked out by hand.
 *
 * Every expected number below was computed independently of psflow, in double precision
 * (python3), from the tf.compat.v1.train formulas quoted in backend.h; the comments show
 * the arithmetic. Each optimizer runs three updates on a 3-element vector with fixed
 * gradients, on both CPU backends, through pf_optim_apply (so the learning rate, the
 * decay and adam's bias correction are part of what is checked).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/backend.h"
#include "psflow/optim.h"

/* psflow computes in float32, the expectations are double: three steps, each rounding a
 * few times at magnitude ~1, stay within a few 1e-7. */
#define ATOL 1e-6
#define RTOL 1e-6

#define N     3
#define STEPS 3

static const float W0[N] = {1.0f, -2.0f, 0.5f};
static const float GRADS[STEPS][N] = {
    {0.5f, -0.25f, 1.0f},
    {0.25f, 0.0f, -0.5f},
    {-0.75f, 0.5f, 2.0f},
};

static const pf_backend *backend_at(int i) {
    return i == 0 ? pf_backend_reference() : pf_backend_openblas();
}
#define NUM_BACKENDS 2

/* An optimizer spec with docs/design.md's defaults and the given type and learning rate. */
static pf_optimizer_spec make_spec(pf_optimizer_type type, double learning_rate) {
    pf_optimizer_spec s;
    memset(&s, 0, sizeof s);
    s.type = type;
    s.learning_rate = learning_rate;
    s.momentum = 0.9;
    s.initial_accumulator_value = 0.1;
    s.beta1 = 0.9;
    s.beta2 = 0.999;
    s.epsilon = 1e-7;
    return s;
}

/* Largest |got - want| seen since the last report_error(). */
static double max_err;

static void report_error(const char *what) {
    print_message("  %-10s max |err| %.2e (bound %.0e + %.0e |want|)\n", what, max_err, ATOL, RTOL);
    max_err = 0.0;
}

static void expect_near(const char *what, const char *backend, int step, const float *got,
                        const double *want, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        if (err > max_err)
            max_err = err;
        if (!(err <= ATOL + RTOL * fabs(want[i])))
            fail_msg("%s [%s] after update %d, element %zu: got %.9g, want %.9g (|err| %.3g)", what,
                     backend, step + 1, i, (double)got[i], want[i], err);
    }
}

/* Runs the three updates on every backend, checking w and the slots after each one.
 * want_slot[s] may be NULL to skip checking slot s. */
static void run_three_updates(const pf_optimizer_spec *spec, const double want_w[STEPS][N],
                              const double (*want_slot0)[N], const double (*want_slot1)[N]) {
    const double(*want_slot[PF_OPTIM_MAX_SLOTS])[N] = {want_slot0, want_slot1};
    for (int b = 0; b < NUM_BACKENDS; b++) {
        const pf_backend *be = backend_at(b);
        int num_slots = pf_optim_num_slots(spec);
        float *w = be->alloc(N * sizeof(float));
        float *g = be->alloc(N * sizeof(float));
        float *slots[PF_OPTIM_MAX_SLOTS] = {NULL, NULL};
        assert_non_null(w);
        assert_non_null(g);
        be->upload(w, W0, N);
        for (int s = 0; s < num_slots; s++) {
            slots[s] = be->alloc(N * sizeof(float));
            assert_non_null(slots[s]);
            pf_optim_slot_init(spec, be, s, slots[s], N);
        }
        for (int step = 0; step < STEPS; step++) {
            float host[N];
            be->upload(g, GRADS[step], N);
            pf_optim_apply(spec, be, step, N, g, w, slots);
            be->download(host, w, N);
            expect_near("w", be->name, step, host, want_w[step], N);
            for (int s = 0; s < num_slots; s++) {
                if (!want_slot[s])
                    continue;
                be->download(host, slots[s], N);
                expect_near(pf_optim_slot_name(spec, s), be->name, step, host, want_slot[s][step],
                            N);
            }
        }
        for (int s = 0; s < num_slots; s++)
            be->free(slots[s]);
        be->free(g);
        be->free(w);
    }
}

/* ApplyGradientDescent: w -= lr g, lr = 0.1. */
static void test_sgd(void **state) {
    (void)state;
    pf_optimizer_spec spec = make_spec(PF_OPT_SGD, 0.1);
    static const double want_w[STEPS][N] = {
        /* w0 - 0.1 g1 = (1 - 0.05, -2 + 0.025, 0.5 - 0.1) */
        {0.95, -1.975, 0.4},
        /* w1 - 0.1 g2 = (0.95 - 0.025, -1.975 - 0, 0.4 + 0.05) */
        {0.925, -1.975, 0.45},
        /* w2 - 0.1 g3 = (0.925 + 0.075, -1.975 - 0.05, 0.45 - 0.2) */
        {1.0, -2.025, 0.25},
    };
    assert_int_equal(pf_optim_num_slots(&spec), 0);
    run_three_updates(&spec, want_w, NULL, NULL);
    report_error("sgd");
}

/* ApplyMomentum: a = 0.9 a + g; w -= 0.1 a; a starts at 0. */
static void test_momentum(void **state) {
    (void)state;
    pf_optimizer_spec spec = make_spec(PF_OPT_MOMENTUM, 0.1);
    static const double want_a[STEPS][N] = {
        /* a1 = g1 */
        {0.5, -0.25, 1.0},
        /* a2 = 0.9 a1 + g2 = (0.45 + 0.25, -0.225 + 0, 0.9 - 0.5) */
        {0.7, -0.225, 0.4},
        /* a3 = 0.9 a2 + g3 = (0.63 - 0.75, -0.2025 + 0.5, 0.36 + 2) */
        {-0.12, 0.2975, 2.36},
    };
    static const double want_w[STEPS][N] = {
        /* w0 - 0.1 a1 = (1 - 0.05, -2 + 0.025, 0.5 - 0.1) */
        {0.95, -1.975, 0.4},
        /* w1 - 0.1 a2 = (0.95 - 0.07, -1.975 + 0.0225, 0.4 - 0.04) */
        {0.88, -1.9525, 0.36},
        /* w2 - 0.1 a3 = (0.88 + 0.012, -1.9525 - 0.02975, 0.36 - 0.236) */
        {0.892, -1.98225, 0.124},
    };
    run_three_updates(&spec, want_w, want_a, NULL);
    report_error("momentum");
}

/* ApplyAdagrad: acc += g^2; w -= 0.1 g / sqrt(acc); acc starts at 0.1. */
static void test_adagrad(void **state) {
    (void)state;
    pf_optimizer_spec spec = make_spec(PF_OPT_ADAGRAD, 0.1);
    static const double want_acc[STEPS][N] = {
        /* 0.1 + g1^2 = (0.1 + 0.25, 0.1 + 0.0625, 0.1 + 1) */
        {0.35, 0.1625, 1.1},
        /* acc1 + g2^2 = (0.35 + 0.0625, 0.1625 + 0, 1.1 + 0.25) */
        {0.4125, 0.1625, 1.35},
        /* acc2 + g3^2 = (0.4125 + 0.5625, 0.1625 + 0.25, 1.35 + 4) */
        {0.975, 0.4125, 5.35},
    };
    static const double want_w[STEPS][N] = {
        /* sqrt(acc1) = (0.5916079783, 0.4031128874, 1.0488088482);
         * w0 - 0.1 g1 / sqrt(acc1) = (1 - 0.05/0.59161, -2 + 0.025/0.40311, 0.5 - 0.1/1.04881) */
        {0.91548457452714838, -1.9379826327053957, 0.40465374107544078},
        /* sqrt(acc2) = (0.6422616289, 0.4031128874, 1.1618950039);
         * w1 - 0.1 g2 / sqrt(acc2) = (w1 - 0.025/0.64226, w1 - 0, w1 + 0.05/1.16190) */
        {0.87655962731907222, -1.9379826327053957, 0.44768688936663431},
        /* sqrt(acc3) = (0.9874208829, 0.6422616289, 2.3130067012);
         * w2 - 0.1 g3 / sqrt(acc3) = (w2 + 0.075/0.98742, w2 - 0.05/0.64226, w2 - 0.2/2.31301) */
        {0.95251507985034722, -2.0158325271215478, 0.36121934913321091},
    };
    run_three_updates(&spec, want_w, want_acc, NULL);
    report_error("adagrad");
}

/* ApplyAdam with lr 0.1, beta1 0.9, beta2 0.999, epsilon 1e-7:
 * m = 0.9 m + 0.1 g; v = 0.999 v + 0.001 g^2; w -= lr_t m / (sqrt(v) + 1e-7),
 * lr_t = 0.1 sqrt(1 - 0.999^t) / (1 - 0.9^t). */
static void test_adam(void **state) {
    (void)state;
    pf_optimizer_spec spec = make_spec(PF_OPT_ADAM, 0.1);
    static const double want_m[STEPS][N] = {
        /* 0.1 g1 */
        {0.05, -0.025, 0.1},
        /* 0.9 m1 + 0.1 g2 = (0.045 + 0.025, -0.0225 + 0, 0.09 - 0.05) */
        {0.07, -0.0225, 0.04},
        /* 0.9 m2 + 0.1 g3 = (0.063 - 0.075, -0.02025 + 0.05, 0.036 + 0.2) */
        {-0.012, 0.02975, 0.236},
    };
    static const double want_v[STEPS][N] = {
        /* 0.001 g1^2 = 0.001 (0.25, 0.0625, 1) */
        {0.00025, 0.0000625, 0.001},
        /* 0.999 v1 + 0.001 g2^2 = (0.00024975 + 0.0000625, 0.0000624375 + 0, 0.000999 + 0.00025) */
        {0.00031225, 0.0000624375, 0.001249},
        /* 0.999 v2 + 0.001 g3^2 = (0.00031193775 + 0.0005625, 0.0000623750625 + 0.00025,
         *                          0.001247751 + 0.004) */
        {0.00087443775, 0.0003123750625, 0.005247751},
    };
    static const double want_w[STEPS][N] = {
        /* t=1: lr_t = 0.1 sqrt(0.001) / 0.1 = 0.0316227766; m1 / sqrt(v1) = sign(g1) * 3.16228,
         * so w0 moves by 0.1 against the gradient's sign (a little less, for epsilon) */
        {0.90000063245153206, -1.9000012648950642, 0.40000031622676602},
        /* t=2: lr_t = 0.1 sqrt(1 - 0.998001) / (1 - 0.81) = 0.0235316725;
         * w1 - lr_t m2 / (sqrt(v2) + 1e-7) = (w1 - lr_t 0.07/0.0176706, w1 + lr_t 0.0225/0.0079018,
         *                                     w1 - lr_t 0.04/0.0353412) */
        {0.80678319609889637, -1.8329962874588781, 0.37336668762215414},
        /* t=3: lr_t = 0.1 sqrt(1 - 0.997002999) / (1 - 0.729) = 0.0202010597;
         * w2 - lr_t m3 / (sqrt(v3) + 1e-7) = (w2 + lr_t 0.012/0.0295709, w2 - lr_t
         * 0.02975/0.0176741, w2 - lr_t 0.236/0.0724414) */
        {0.81498084816194616, -1.8669995421078602, 0.30755561844407603},
    };
    run_three_updates(&spec, want_w, want_m, want_v);
    report_error("adam");
}

static void test_slots(void **state) {
    (void)state;
    static const struct {
        pf_optimizer_type type;
        int num_slots;
        const char *names[PF_OPTIM_MAX_SLOTS];
    } cases[] = {
        {PF_OPT_SGD, 0, {NULL, NULL}},
        {PF_OPT_MOMENTUM, 1, {"momentum", NULL}},
        {PF_OPT_ADAGRAD, 1, {"accumulator", NULL}},
        {PF_OPT_ADAM, 2, {"m", "v"}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pf_optimizer_spec spec = make_spec(cases[c].type, 0.01);
        spec.initial_accumulator_value = 0.25;
        assert_int_equal(pf_optim_num_slots(&spec), cases[c].num_slots);
        assert_null(pf_optim_slot_name(&spec, -1));
        assert_null(pf_optim_slot_name(&spec, cases[c].num_slots));
        for (int s = 0; s < cases[c].num_slots; s++) {
            assert_string_equal(pf_optim_slot_name(&spec, s), cases[c].names[s]);
            /* Initial values, written over NaN so nothing is left from before. */
            float want = cases[c].type == PF_OPT_ADAGRAD ? 0.25f : 0.0f;
            for (int b = 0; b < NUM_BACKENDS; b++) {
                const pf_backend *be = backend_at(b);
                enum { LEN = 37 };
                float host[LEN];
                float *slot = be->alloc(LEN * sizeof(float));
                assert_non_null(slot);
                be->fill(slot, NAN, LEN);
                pf_optim_slot_init(&spec, be, s, slot, LEN);
                be->download(host, slot, LEN);
                for (int i = 0; i < LEN; i++)
                    assert_true(host[i] == want);
                be->free(slot);
            }
        }
    }
}

/* The one slot table: what pf_optim_slot_name says is what checkpoints get, each optimizer is
 * named as the spec spells it, and every slot has a variable suffix of its own. */
static void test_slot_table(void **state) {
    (void)state;
    const pf_optimizer_type types[] = {PF_OPT_SGD, PF_OPT_MOMENTUM, PF_OPT_ADAGRAD, PF_OPT_ADAM};
    for (size_t c = 0; c < sizeof types / sizeof types[0]; c++) {
        pf_optimizer_spec spec = make_spec(types[c], 0.01);
        const pf_optim_slots *t = pf_optim_slots_of(&spec);
        assert_non_null(t);
        assert_string_equal(t->optimizer, pf_optimizer_type_name(types[c]));
        assert_int_equal(t->n, pf_optim_num_slots(&spec));
        for (int k = 0; k < t->n; k++) {
            assert_string_equal(t->name[k], pf_optim_slot_name(&spec, k));
            assert_non_null(t->variable[k]);
            assert_true(strchr(t->variable[k], '/') == NULL); /* one path component */
            for (int j = 0; j < k; j++)
                assert_string_not_equal(t->variable[k], t->variable[j]);
        }
    }
}

static void expect_lr(const pf_optimizer_spec *spec, int64_t step, double want) {
    double got = pf_optim_learning_rate(spec, step);
    if (!(fabs(got - want) <= 1e-15 + 1e-12 * want))
        fail_msg("lr at step %lld (staircase %d): got %.17g, want %.17g", (long long)step,
                 (int)spec->decay.staircase, got, want);
}

/* tf.compat.v1.train.exponential_decay: lr * rate ^ (step / decay_steps), floored when
 * staircase. */
static void test_decay(void **state) {
    (void)state;
    pf_optimizer_spec spec = make_spec(PF_OPT_SGD, 0.1);
    /* No decay: the same rate at every step. */
    expect_lr(&spec, 0, 0.1);
    expect_lr(&spec, 123456, 0.1);

    spec.decay = (pf_decay_spec){.enabled = true, .decay_steps = 10, .decay_rate = 0.5};
    expect_lr(&spec, 0, 0.1);                   /* 0.1 * 0.5^0 */
    expect_lr(&spec, 5, 0.070710678118654766);  /* 0.1 * 0.5^0.5 = 0.1 / sqrt(2) */
    expect_lr(&spec, 10, 0.05);                 /* 0.1 * 0.5^1 */
    expect_lr(&spec, 25, 0.017677669529663691); /* 0.1 * 0.5^2.5 */
    expect_lr(&spec, 100, 9.765625e-05);        /* 0.1 * 0.5^10 = 0.1 / 1024 */
    spec.decay.staircase = true;
    expect_lr(&spec, 0, 0.1);    /* 0.1 * 0.5^floor(0) */
    expect_lr(&spec, 5, 0.1);    /* 0.1 * 0.5^floor(0.5) */
    expect_lr(&spec, 9, 0.1);    /* 0.1 * 0.5^floor(0.9) */
    expect_lr(&spec, 10, 0.05);  /* 0.1 * 0.5^1 */
    expect_lr(&spec, 25, 0.025); /* 0.1 * 0.5^floor(2.5) */
    expect_lr(&spec, 100, 9.765625e-05);

    /* docs/design.md's example: lr 0.01, decay_steps 600, rate 0.7. */
    spec = make_spec(PF_OPT_ADAGRAD, 0.01);
    spec.decay = (pf_decay_spec){.enabled = true, .decay_steps = 600, .decay_rate = 0.7};
    expect_lr(&spec, 599, 0.0070041624447565003);  /* 0.01 * 0.7^(599/600) */
    expect_lr(&spec, 600, 0.007);                  /* 0.01 * 0.7 */
    expect_lr(&spec, 1000, 0.0055186146141736692); /* 0.01 * 0.7^(5/3) */
    expect_lr(&spec, 1800, 0.00343);               /* 0.01 * 0.7^3 */
    spec.decay.staircase = true;
    expect_lr(&spec, 599, 0.01);
    expect_lr(&spec, 600, 0.007);
    expect_lr(&spec, 1000, 0.007);
    expect_lr(&spec, 1800, 0.00343);
}

/* The decayed rate is the one pf_optim_apply uses, and adam's t is global_step + 1. */
static void test_decay_in_apply(void **state) {
    (void)state;
    static const struct {
        const char *what;
        pf_optimizer_type type;
        int64_t global_step;
        double want[N];
    } cases[] = {
        /* lr = 0.1 * 0.5^floor(25/10) = 0.025; w0 - 0.025 g1 */
        {"sgd", PF_OPT_SGD, 25, {0.98750000000000004, -1.9937499999999999, 0.47499999999999998}},
        /* lr = 0.1 * 0.5^floor(10/10) = 0.05, t = 11: lr_t = 0.05 sqrt(1 - 0.999^11) /
         * (1 - 0.9^11) = 0.0076231971; m = 0.1 g1, v = 0.001 g1^2, so w0 moves by
         * lr_t * 3.16228 = 0.0241065 against the gradient's sign (less a little for epsilon) */
        {"adam", PF_OPT_ADAM, 10, {0.9758934866773209, -1.9758936391383695, 0.47589341044607336}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pf_optimizer_spec spec = make_spec(cases[c].type, 0.1);
        spec.decay = (pf_decay_spec){
            .enabled = true, .decay_steps = 10, .decay_rate = 0.5, .staircase = true};
        for (int b = 0; b < NUM_BACKENDS; b++) {
            const pf_backend *be = backend_at(b);
            float host[N];
            float *w = be->alloc(N * sizeof(float));
            float *g = be->alloc(N * sizeof(float));
            float *slots[PF_OPTIM_MAX_SLOTS] = {NULL, NULL};
            assert_non_null(w);
            assert_non_null(g);
            be->upload(w, W0, N);
            be->upload(g, GRADS[0], N);
            for (int s = 0; s < pf_optim_num_slots(&spec); s++) {
                slots[s] = be->alloc(N * sizeof(float));
                assert_non_null(slots[s]);
                pf_optim_slot_init(&spec, be, s, slots[s], N);
            }
            pf_optim_apply(&spec, be, cases[c].global_step, N, g, w, slots);
            be->download(host, w, N);
            expect_near(cases[c].what, be->name, 0, host, cases[c].want, N);
            for (int s = 0; s < pf_optim_num_slots(&spec); s++)
                be->free(slots[s]);
            be->free(g);
            be->free(w);
        }
    }
}

/* A parameter server applies updates to its slice of the flat vector: pf_optim_apply on
 * [OFF, OFF + N) of longer buffers must change exactly that range, in params and slots. */
static void test_subrange(void **state) {
    (void)state;
    enum { OFF = 5, LEN = 13 };
    static const pf_optimizer_type types[] = {PF_OPT_SGD, PF_OPT_MOMENTUM, PF_OPT_ADAGRAD,
                                              PF_OPT_ADAM};
    const float sentinel = -777.25f;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        pf_optimizer_spec spec = make_spec(types[t], 0.1);
        for (int b = 0; b < NUM_BACKENDS; b++) {
            const pf_backend *be = backend_at(b);
            float host_w[LEN], host_g[LEN], host[LEN];
            for (int i = 0; i < LEN; i++) {
                host_w[i] = sentinel;
                host_g[i] = 1000.0f; /* would visibly move w if read outside the range */
            }
            memcpy(host_w + OFF, W0, sizeof W0);
            memcpy(host_g + OFF, GRADS[0], sizeof GRADS[0]);
            float *w = be->alloc(LEN * sizeof(float));
            float *g = be->alloc(LEN * sizeof(float));
            float *full[PF_OPTIM_MAX_SLOTS] = {NULL, NULL};
            float *slots[PF_OPTIM_MAX_SLOTS] = {NULL, NULL};
            assert_non_null(w);
            assert_non_null(g);
            be->upload(w, host_w, LEN);
            be->upload(g, host_g, LEN);
            for (int s = 0; s < pf_optim_num_slots(&spec); s++) {
                full[s] = be->alloc(LEN * sizeof(float));
                assert_non_null(full[s]);
                be->fill(full[s], sentinel, LEN);
                slots[s] = full[s] + OFF;
                pf_optim_slot_init(&spec, be, s, slots[s], N);
            }
            pf_optim_apply(&spec, be, 0, N, g + OFF, w + OFF, slots);

            /* Inside: what the same update gives on a vector of just those N elements
             * (test_sgd etc. check that against TensorFlow). Outside: untouched. */
            float alone_w[N], alone_slot[PF_OPTIM_MAX_SLOTS][N];
            float *alone_slots[PF_OPTIM_MAX_SLOTS] = {alone_slot[0], alone_slot[1]};
            memcpy(alone_w, W0, sizeof alone_w);
            for (int s = 0; s < pf_optim_num_slots(&spec); s++)
                pf_optim_slot_init(&spec, pf_backend_reference(), s, alone_slots[s], N);
            pf_optim_apply(&spec, pf_backend_reference(), 0, N, GRADS[0], alone_w, alone_slots);

            be->download(host, w, LEN);
            for (int i = 0; i < LEN; i++) {
                if (i < OFF || i >= OFF + N)
                    assert_true(host[i] == sentinel);
            }
            double want[N];
            for (int i = 0; i < N; i++)
                want[i] = alone_w[i];
            expect_near("w slice", be->name, 0, host + OFF, want, N);
            for (int s = 0; s < pf_optim_num_slots(&spec); s++) {
                be->download(host, full[s], LEN);
                for (int i = 0; i < LEN; i++) {
                    if (i < OFF || i >= OFF + N)
                        assert_true(host[i] == sentinel);
                }
                for (int i = 0; i < N; i++)
                    want[i] = alone_slot[s][i];
                expect_near("slot slice", be->name, 0, host + OFF, want, N);
                be->free(full[s]);
            }
            be->free(g);
            be->free(w);
        }
    }
}

/* An empty range is a no-op and may come with NULL pointers (backend.h's convention). */
static void test_empty_range(void **state) {
    (void)state;
    static const pf_optimizer_type types[] = {PF_OPT_SGD, PF_OPT_MOMENTUM, PF_OPT_ADAGRAD,
                                              PF_OPT_ADAM};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        pf_optimizer_spec spec = make_spec(types[t], 0.1);
        float *slots[PF_OPTIM_MAX_SLOTS] = {NULL, NULL};
        for (int b = 0; b < NUM_BACKENDS; b++) {
            pf_optim_apply(&spec, backend_at(b), 7, 0, NULL, NULL, slots);
            for (int s = 0; s < pf_optim_num_slots(&spec); s++)
                pf_optim_slot_init(&spec, backend_at(b), s, NULL, 0);
        }
    }
}

/* pf_optim_apply_rows: TensorFlow's sparse kernels on a [4, 2] block, two updates naming
 * rows {1, 3} (global step 0) then {0, 1} (step 1), lr 0.1. Rows a gradient does not name
 * keep their values and slots: row 2 never moves, and row 3 keeps its step-1 values in
 * step 2 although its momentum (and adam's m) is not zero - the lazy update
 * (SparseApplyMomentum, LazyAdamOptimizer), where a dense one would move it again. */
static void test_apply_rows(void **state) {
    (void)state;
    static const float w0[8] = {1, -1, 0.5f, 2, -0.5f, 0.25f, 3, -2};
    static const uint32_t rows1[2] = {1, 3}, rows2[2] = {0, 1};
    static const float g1[4] = {0.5f, -0.25f, 1.0f, 0.5f}, g2[4] = {0.25f, -0.5f, -0.75f, 1.0f};
    static const struct {
        pf_optimizer_type type;
        double w[8], s0[8], s1[8];
    } cases[] = {
        /* sgd: row 1 = (0.5 - 0.05 + 0.075, 2 + 0.025 - 0.1), row 3 = (3 - 0.1, -2 - 0.05),
         * row 0 = (1 - 0.025, -1 + 0.05) */
        {PF_OPT_SGD, {0.975, -0.95, 0.525, 1.925, -0.5, 0.25, 2.9, -2.05}, {0}, {0}},
        /* momentum 0.9: row 1 a = 0.9 (0.5, -0.25) + (-0.75, 1) = (-0.3, 0.775),
         * w = (0.45 + 0.03, 2.025 - 0.0775); row 3 keeps a = (1, 0.5) and w = (2.9, -2.05) */
        {PF_OPT_MOMENTUM,
         {0.975, -0.95, 0.48, 1.9475, -0.5, 0.25, 2.9, -2.05},
         {0.25, -0.5, -0.3, 0.775, 0, 0, 1, 0.5},
         {0}},
        /* adagrad from 0.1: row 1 acc = 0.1 + (0.25 + 0.5625, 0.0625 + 1), w as in test_adagrad;
         * row 2 keeps its accumulator 0.1 */
        {PF_OPT_ADAGRAD,
         {0.9379826327053957, -0.9154845745271484, 0.4939981629156804, 1.9692695881425704, -0.5,
          0.25, 2.9046537410754407, -2.0845154254728517},
         {0.1625, 0.35, 0.9125, 1.1625, 0.1, 0.1, 1.1, 0.35},
         {0}},
        /* lazy adam: t = 1 then 2 (the global step), m and v of row 3 unchanged at t = 2 */
        {PF_OPT_ADAM,
         {0.925587258898297, -0.9255867882737758, 0.42477072715233505, 2.0440485573535074, -0.5,
          0.25, 2.900000316226766, -2.099999367548468},
         {0.025, -0.05, -0.03, 0.0775, 0, 0, 0.1, 0.05},
         {6.25e-05, 0.00025, 0.00081225, 0.0010624375, 0, 0, 0.001, 0.00025}},
    };
    for (int b = 0; b < NUM_BACKENDS; b++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            pf_optimizer_spec spec = make_spec(cases[c].type, 0.1);
            const pf_backend *be = backend_at(b);
            float w[8], s0[8], s1[8];
            memcpy(w, w0, sizeof w);
            float *slots[PF_OPTIM_MAX_SLOTS] = {s0, s1};
            for (int k = 0; k < pf_optim_num_slots(&spec); k++)
                pf_optim_slot_init(&spec, be, k, slots[k], 8);
            assert_int_equal(pf_optim_apply_rows(&spec, be, 0, 2, 2, rows1, g1, w, slots, 1), 2);
            assert_int_equal(pf_optim_apply_rows(&spec, be, 1, 2, 2, rows2, g2, w, slots, 0), 2);
            expect_near("w", be->name, 1, w, cases[c].w, 8);
            if (pf_optim_num_slots(&spec) > 0)
                expect_near("slot 0", be->name, 1, s0, cases[c].s0, 8);
            if (pf_optim_num_slots(&spec) > 1)
                expect_near("slot 1", be->name, 1, s1, cases[c].s1, 8);
        }
    report_error("rows");
}

/* With the check, the first row an update made non-finite is named (the one updated first,
 * not the lowest), one that overflowed to infinity as well as one fed a NaN; none when every
 * row stays finite; without the check nothing is named. */
static void test_apply_rows_check(void **state) {
    (void)state;
    static const uint32_t rows[3] = {3, 0, 2};
    pf_optimizer_spec spec = make_spec(PF_OPT_SGD, 10.0);
    for (int b = 0; b < NUM_BACKENDS; b++) {
        const pf_backend *be = backend_at(b);
        float w[8] = {1, 1, 1, 1, 3e38f, 1, 1, 1};
        float g[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
        assert_int_equal(pf_optim_apply_rows(&spec, be, 0, 2, 3, rows, g, w, NULL, 1), 3);
        g[4] = -1e38f; /* row 2: 3e38 + 10 x 1e38 overflows */
        assert_int_equal(pf_optim_apply_rows(&spec, be, 0, 2, 3, rows, g, w, NULL, 1), 2);
        g[3] = NAN; /* row 0 too, updated before row 2 */
        assert_int_equal(pf_optim_apply_rows(&spec, be, 0, 2, 3, rows, g, w, NULL, 1), 1);
        assert_true(isnan(w[1]) && isinf(w[4]));
        assert_int_equal(pf_optim_apply_rows(&spec, be, 0, 2, 3, rows, g, w, NULL, 0), 3);
    }
    /* more rows than the check lags behind: each position found, the earlier of two first */
    enum { MANY = 40 }; /* more than the prefetch reaches ahead */
    uint32_t many[MANY];
    for (int j = 0; j < MANY; j++)
        many[j] = (uint32_t)(2 * j + 1);
    for (int b = 0; b < NUM_BACKENDS; b++)
        for (int first = 0; first < MANY; first++) {
            float w[2 * 2 * MANY], g[2 * MANY];
            for (int k = 0; k < 2 * 2 * MANY; k++)
                w[k] = 1;
            for (int k = 0; k < 2 * MANY; k++)
                g[k] = 0.5f;
            g[2 * first + 1] = INFINITY;
            if (first + 3 < MANY)
                g[2 * (first + 3)] = NAN;
            assert_int_equal(
                pf_optim_apply_rows(&spec, backend_at(b), 0, 2, MANY, many, g, w, NULL, 1), first);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd),        cmocka_unit_test(test_momentum),
        cmocka_unit_test(test_adagrad),    cmocka_unit_test(test_adam),
        cmocka_unit_test(test_slots),      cmocka_unit_test(test_slot_table),
        cmocka_unit_test(test_decay),      cmocka_unit_test(test_decay_in_apply),
        cmocka_unit_test(test_subrange),   cmocka_unit_test(test_empty_range),
        cmocka_unit_test(test_apply_rows), cmocka_unit_test(test_apply_rows_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
