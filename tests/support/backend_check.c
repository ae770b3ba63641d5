/* backend_check.c - tolerances, buffers, gemm cases and the checks of one backend on its own
 * of the backend tests (see backend_check.h). */
#include "tests/support/backend_check.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "psflow/mem.h"

/* --- tolerances ----------------------------------------------------------------------- */

tol make_tol(const char *op, double atol, double rtol) {
    return (tol){.op = op, .atol = atol, .rtol = rtol};
}

void check_value(tol *t, const char *backend, const char *ctx, size_t i, double ref, double got) {
    t->checked++;
    if (isnan(ref) || isinf(ref)) {
        bool same = isnan(ref) ? isnan(got) : ref == got;
        if (!same)
            fail_msg("%s [%s] %s, element %zu: reference %.9g, got %.9g", t->op, backend, ctx, i,
                     ref, got);
        return;
    }
    double err = fabs(ref - got);
    double bound = t->atol + t->rtol * fabs(ref);
    /* Written so that NaN in `got` fails. */
    if (!(err <= bound))
        fail_msg("%s [%s] %s, element %zu: reference %.9g, got %.9g (|err| %.3g > bound %.3g)",
                 t->op, backend, ctx, i, ref, got, err, bound);
    if (err > t->max_err)
        t->max_err = err;
    if (err / bound > t->max_ratio) {
        t->max_ratio = err / bound;
        snprintf(t->worst, sizeof t->worst, "%s, element %zu: %.9g vs %.9g", ctx, i, ref, got);
    }
}

void check_close(tol *t, const char *backend, const char *ctx, const float *ref, const float *got,
                 size_t n) {
    for (size_t i = 0; i < n; i++)
        check_value(t, backend, ctx, i, ref[i], got[i]);
}

void report(const tol *t) {
    char atol[64];
    if (t->atol_text)
        snprintf(atol, sizeof atol, "%s", t->atol_text);
    else
        snprintf(atol, sizeof atol, "%.0e", t->atol);
    print_message("  %-20s atol %s rtol %.0e: %zu values, max |err| %.2e, "
                  "worst %.1f%% of the bound%s%s\n",
                  t->op, atol, t->rtol, t->checked, t->max_err, 100.0 * t->max_ratio,
                  t->max_ratio > 0 ? "\n      at " : "", t->max_ratio > 0 ? t->worst : "");
}

/* --- buffers -------------------------------------------------------------------------- */

float *put(const pf_backend *be, const float *host, size_t n) {
    float *d = be->alloc((n ? n : 1) * sizeof(float));
    assert_non_null(d);
    be->upload(d, host, n);
    return d;
}

int32_t *put_i32(const pf_backend *be, const int32_t *host, size_t n) {
    int32_t *d = be->alloc((n ? n : 1) * sizeof(int32_t));
    assert_non_null(d);
    be->upload_i32(d, host, n);
    return d;
}

void take(const pf_backend *be, float *host, float *d, size_t n) {
    be->download(host, d, n);
    be->free(d);
}

float *host_new(size_t n) {
    float *p = pf_malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

/* --- random inputs -------------------------------------------------------------------- */

float uniform(pf_rng *rng, float lo, float hi) {
    return lo + (hi - lo) * (float)pf_rng_uniform(rng);
}

void fill_uniform(pf_rng *rng, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++)
        x[i] = uniform(rng, lo, hi);
}

int rand_int(pf_rng *rng, int lo, int hi) {
    return lo + (int)pf_rng_below(rng, (uint64_t)(hi - lo + 1));
}

void edge_labels(pf_rng *rng, int32_t *labels, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        labels[r] = (int32_t)pf_rng_below(rng, (uint64_t)cols);
    labels[0] = 0;
    labels[rows - 1] = cols - 1;
}

/* --- op arguments --------------------------------------------------------------------- */

const pf_activation ACTS[4] = {PF_ACT_NONE, PF_ACT_RELU, PF_ACT_TANH, PF_ACT_SIGMOID};
const char *const ACT_NAMES[4] = {"none", "relu", "tanh", "sigmoid"};
const char *const OPT_NAMES[NUM_OPTS] = {"sgd_step", "momentum_step", "adagrad_step", "adam_step"};

void run_step(const pf_backend *be, int opt, size_t n, const float *g, float *w, float *s0,
              float *s1) {
    switch (opt) {
    case OPT_SGD:
        be->sgd_step(n, 0.05f, g, w);
        break;
    case OPT_MOMENTUM:
        be->momentum_step(n, 0.05f, 0.9f, g, w, s0);
        break;
    case OPT_ADAGRAD:
        be->adagrad_step(n, 0.05f, g, w, s0);
        break;
    case OPT_ADAM:
        be->adam_step(n, 0.01f, 0.9f, 0.999f, 1e-7f, g, w, s0, s1);
        break;
    }
}

/* --- gemm ----------------------------------------------------------------------------- */

const float GEMM_ALPHA_BETA[5][2] = {
    {1.0f, 0.0f}, {1.0f, 1.0f}, {-1.5f, 0.25f}, {0.5f, 0.0f}, {0.0f, 2.0f},
};

void check_gemm_known(const pf_backend *be) {
    static const float a[6] = {1, 2, 3, 4, 5, 6};      /* [2,3] */
    static const float a_t[6] = {1, 4, 2, 5, 3, 6};    /* [3,2], A^T stored */
    static const float b[6] = {7, 8, 9, 10, 11, 12};   /* [3,2] */
    static const float b_t[6] = {7, 9, 11, 8, 10, 12}; /* [2,3], B^T stored */
    static const float want[4] = {115, 127, 277, 307};
    static const float ones[4] = {1, 1, 1, 1};
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        float *da = put(be, ta ? a_t : a, 6);
        float *db = put(be, tb ? b_t : b, 6);
        float *dc = put(be, ones, 4);
        be->gemm(ta, tb, 2, 2, 3, 2.0f, da, ta ? 2 : 3, db, tb ? 3 : 2, -1.0f, dc, 2);
        float c[4];
        take(be, c, dc, 4);
        be->free(db);
        be->free(da);
        for (int i = 0; i < 4; i++)
            if (c[i] != want[i])
                fail_msg("%s gemm(trans_a %d, trans_b %d): c[%d] = %g, want %g", be->name, ta, tb,
                         i, (double)c[i], (double)want[i]);
    }
}

void check_gemm_case(tol *t, pf_rng *rng, const gemm_case *g, const pf_backend *be) {
    const int a_rows = g->ta ? g->k : g->m, a_cols = g->ta ? g->m : g->k;
    const int b_rows = g->tb ? g->n : g->k, b_cols = g->tb ? g->k : g->n;
    const int lda = a_cols + g->pad, ldb = b_cols + g->pad, ldc = g->n + g->pad;
    const size_t a_len = (size_t)a_rows * (size_t)lda, b_len = (size_t)b_rows * (size_t)ldb;
    const size_t c_len = (size_t)g->m * (size_t)ldc;
    const float sentinel = 12345.5f;

    float *a = host_new(a_len), *b = host_new(b_len), *c0 = host_new(c_len);
    float *want = host_new(c_len), *got = host_new(c_len);
    for (size_t i = 0; i < a_len; i++)
        a[i] = (int)(i % (size_t)lda) < a_cols ? uniform(rng, -1.0f, 1.0f) : NAN;
    for (size_t i = 0; i < b_len; i++)
        b[i] = (int)(i % (size_t)ldb) < b_cols ? uniform(rng, -1.0f, 1.0f) : NAN;
    for (size_t i = 0; i < c_len; i++) {
        bool inside = (int)(i % (size_t)ldc) < g->n;
        c0[i] = !inside ? sentinel : g->beta == 0.0f ? NAN : uniform(rng, -1.0f, 1.0f);
    }

    const pf_backend *ref = pf_backend_reference();
    float *da = put(ref, a, a_len), *db = put(ref, b, b_len), *dc = put(ref, c0, c_len);
    ref->gemm(g->ta, g->tb, g->m, g->n, g->k, g->alpha, da, lda, db, ldb, g->beta, dc, ldc);
    take(ref, want, dc, c_len);
    ref->free(db);
    ref->free(da);

    t->atol = GEMM_ATOL_BASE + GEMM_ATOL_PER_K * g->k * fmax(1.0, fabs((double)g->alpha));
    char ctx[128];
    snprintf(ctx, sizeof ctx, "m=%d n=%d k=%d trans_a=%d trans_b=%d alpha=%g beta=%g pad=%d", g->m,
             g->n, g->k, g->ta, g->tb, (double)g->alpha, (double)g->beta, g->pad);
    da = put(be, a, a_len);
    db = put(be, b, b_len);
    dc = put(be, c0, c_len);
    be->gemm(g->ta, g->tb, g->m, g->n, g->k, g->alpha, da, lda, db, ldb, g->beta, dc, ldc);
    take(be, got, dc, c_len);
    be->free(db);
    be->free(da);
    for (int i = 0; i < g->m; i++) {
        const float *w = want + (size_t)i * (size_t)ldc, *x = got + (size_t)i * (size_t)ldc;
        check_close(t, be->name, ctx, w, x, (size_t)g->n);
        for (int j = g->n; j < ldc; j++)
            if (x[j] != sentinel)
                fail_msg("gemm [%s] %s: wrote C's padding at row %d column %d", be->name, ctx, i,
                         j);
    }
    pf_free(got);
    pf_free(want);
    pf_free(c0);
    pf_free(b);
    pf_free(a);
}

/* --- one backend on its own ----------------------------------------------------------- */

void check_ops_present(const pf_backend *be) {
    const bool present[] = {
        be->alloc != NULL,         be->free != NULL,
        be->upload != NULL,        be->download != NULL,
        be->upload_i32 != NULL,    be->fill != NULL,
        be->copy != NULL,          be->gemm != NULL,
        be->axpy != NULL,          be->scale != NULL,
        be->bias_add != NULL,      be->bias_grad != NULL,
        be->activation != NULL,    be->activation_grad != NULL,
        be->softmax_xent != NULL,  be->mse != NULL,
        be->count_correct != NULL, be->xent_sum != NULL,
        be->sgd_step != NULL,      be->momentum_step != NULL,
        be->adagrad_step != NULL,  be->adam_step != NULL,
    };
    for (size_t i = 0; i < ARRAY_LEN(present); i++)
        if (!present[i])
            fail_msg("op %zu of the %s table (in backend.h order) is NULL", i, be->name);
}

void check_memory(const pf_backend *be) {
    enum { LEN = 1031, ROWS = 9 };
    pf_rng rng;
    pf_rng_init(&rng, 7, 0);
    float src[LEN], back[LEN];
    fill_uniform(&rng, src, LEN, -5.0f, 5.0f);
    float *x = put(be, src, LEN);
    float *y = be->alloc(LEN * sizeof(float));
    assert_non_null(y);
    /* upload/download round-trip is exact */
    be->download(back, x, LEN);
    assert_memory_equal(back, src, sizeof src);
    /* fill, then copy part of x over it */
    be->fill(y, -3.5f, LEN);
    be->copy(y + 10, x + 20, 500);
    be->download(back, y, LEN);
    for (int i = 0; i < LEN; i++) {
        float want = (i >= 10 && i < 510) ? src[i + 10] : -3.5f;
        assert_true(back[i] == want);
    }
    be->free(y);
    be->free(x);
    /* upload_i32 is exact too: seen through count_correct, the only op reading labels whose
     * answer is an exact integer. Row r has its maximum at column r % 3. */
    float logits[ROWS * 3] = {0};
    int32_t labels[ROWS];
    for (int r = 0; r < ROWS; r++) {
        logits[r * 3 + r % 3] = 1.0f;
        labels[r] = r < 5 ? r % 3 : (r + 1) % 3; /* 5 right, 4 wrong */
    }
    float *dl = put(be, logits, ROWS * 3);
    int32_t *dlab = put_i32(be, labels, ROWS);
    assert_int_equal(be->count_correct(ROWS, 3, dl, dlab), 5);
    be->free(dlab);
    be->free(dl);
}

static void check_zero_ops(const pf_backend *be) {
    be->upload(NULL, NULL, 0);
    be->download(NULL, NULL, 0);
    be->upload_i32(NULL, NULL, 0);
    be->fill(NULL, 1.0f, 0);
    be->copy(NULL, NULL, 0);
    be->gemm(false, false, 0, 0, 0, 1.0f, NULL, 1, NULL, 1, 0.0f, NULL, 1);
    be->gemm(true, true, 0, 5, 3, 1.0f, NULL, 1, NULL, 3, 0.0f, NULL, 5);
    be->gemm(false, false, 4, 0, 3, 1.0f, NULL, 3, NULL, 1, 0.0f, NULL, 1);
    be->axpy(0, 2.0f, NULL, NULL);
    be->scale(0, 2.0f, NULL);
    be->bias_add(0, 3, NULL, NULL);
    be->bias_add(3, 0, NULL, NULL);
    be->bias_grad(3, 0, NULL, NULL);
    for (size_t a = 0; a < ARRAY_LEN(ACTS); a++) {
        be->activation(ACTS[a], 0, NULL, NULL);
        be->activation_grad(ACTS[a], 0, NULL, NULL, NULL);
    }
    assert_true(be->softmax_xent(0, 10, NULL, NULL, NULL) == 0.0f);
    assert_true(be->mse(0, NULL, NULL, NULL) == 0.0f);
    assert_int_equal(be->count_correct(0, 10, NULL, NULL), 0);
    assert_true(be->xent_sum(0, 10, NULL, NULL) == 0.0);
    be->sgd_step(0, 0.1f, NULL, NULL);
    be->momentum_step(0, 0.1f, 0.9f, NULL, NULL, NULL);
    be->adagrad_step(0, 0.1f, NULL, NULL, NULL);
    be->adam_step(0, 0.1f, 0.9f, 0.999f, 1e-7f, NULL, NULL, NULL, NULL);
}

void check_zero_sizes(const pf_backend *be) {
    check_zero_ops(be);

    /* bias_grad over zero rows: db = 0. */
    float db_host[3] = {NAN, NAN, NAN};
    float *db = put(be, db_host, 3);
    be->bias_grad(0, 3, NULL, db);
    take(be, db_host, db, 3);
    for (int i = 0; i < 3; i++)
        assert_true(db_host[i] == 0.0f);

    /* k = 0: the product is empty, C = beta C; lda = ldb = 0 is allowed. */
    static const float c_init[6] = {1, 2, 3, 4, 5, 6};
    float c[6];
    float *dc = put(be, c_init, 6);
    be->gemm(false, false, 2, 3, 0, 1.0f, NULL, 0, NULL, 3, 0.5f, dc, 3);
    take(be, c, dc, 6);
    for (int i = 0; i < 6; i++)
        assert_true(c[i] == 0.5f * c_init[i]);
    float nan6[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
    dc = put(be, nan6, 6);
    be->gemm(true, false, 2, 3, 0, 1.0f, NULL, 2, NULL, 3, 0.0f, dc, 3);
    take(be, c, dc, 6);
    for (int i = 0; i < 6; i++)
        assert_true(c[i] == 0.0f);
}

/* --- values worked out by hand -------------------------------------------------------- */

/* ACTS[a] over x on `be`, in place, against want (n at most 8); then the gradient from y and
 * dy, in place over dy, against want_grad. */
static void check_act_by_hand(tol *t, const pf_backend *be, int a, size_t n, const float *x,
                              const double *want, const float *y, const float *dy,
                              const double *want_grad) {
    const pf_activation act = ACTS[a];
    const char *name = ACT_NAMES[a];
    float got[8];
    assert_true(n <= ARRAY_LEN(got));
    float *d = put(be, x, n);
    be->activation(act, n, d, d);
    take(be, got, d, n);
    for (size_t i = 0; i < n; i++)
        check_value(t, be->name, name, i, want[i], got[i]);
    float *dyv = put(be, y, n), *ddy = put(be, dy, n);
    be->activation_grad(act, n, dyv, ddy, ddy);
    take(be, got, ddy, n);
    be->free(dyv);
    for (size_t i = 0; i < n; i++)
        check_value(t, be->name, name, i, want_grad[i], got[i]);
}

/* Closed forms; gradients in terms of y: relu 1[y > 0], tanh 1 - y^2, sigmoid y (1 - y),
 * with dy = 3 everywhere. */
void check_activation_known(const pf_backend *be) {
    static const float x[] = {-2.0f, -0.5f, 0.0f, 0.5f, 2.0f, -100.0f, 100.0f};
    static const double want[4][7] = {
        {-2.0, -0.5, 0.0, 0.5, 2.0, -100.0, 100.0},
        {0.0, 0.0, 0.0, 0.5, 2.0, 0.0, 100.0},
        /* tanh(0.5) = 0.46211715726, tanh(2) = 0.96402758008, tanh(100) = 1 in float */
        {-0.9640275800758169, -0.46211715726000974, 0.0, 0.46211715726000974, 0.9640275800758169,
         -1.0, 1.0},
        /* 1 / (1 + e^-0.5) = 0.62245933120, 1 / (1 + e^-2) = 0.88079707798 */
        {0.11920292202211755, 0.3775406687981454, 0.5, 0.6224593312018546, 0.8807970779778823,
         3.7200759760208356e-44, 1.0},
    };
    /* The gradient's inputs, padded to x's length with a y = 0.5 column. */
    static const float y[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 0.5f, 0.5f};
    static const float dy[] = {3.0f, 3.0f, 3.0f, 3.0f, 3.0f, 3.0f, 3.0f};
    static const double want_grad[4][7] = {
        {3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0},
        {0.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0},
        {3.0, 2.8125, 2.25, 1.3125, 0.0, 2.25, 2.25}, /* 3 (1 - y^2) */
        {0.0, 0.5625, 0.75, 0.5625, 0.0, 0.75, 0.75}, /* 3 y (1 - y) */
    };
    tol t = make_tol("activation known", 1e-7, 1e-6);
    for (int a = 0; a < 4; a++)
        check_act_by_hand(&t, be, a, ARRAY_LEN(x), x, want[a], y, dy, want_grad[a]);
}

/* relu(NaN) = 0; a relu gradient is dy * 0 where y <= 0 (NaN where dy is NaN or infinite,
 * and where y is NaN: NaN > 0 is false), dy where y > 0; tanh and sigmoid pass NaN through
 * and saturate at the infinities; 0 times an infinity is NaN. */
void check_activation_nan(const pf_backend *be) {
    static const float x[] = {NAN, -NAN, 1.0f, -1.0f, INFINITY, -INFINITY};
    static const double want[4][6] = {
        {NAN, NAN, 1.0, -1.0, INFINITY, -INFINITY},
        {0.0, 0.0, 1.0, 0.0, INFINITY, 0.0},
        {NAN, NAN, 0.7615941559557649, -0.7615941559557649, 1.0, -1.0},
        {NAN, NAN, 0.7310585786300049, 0.2689414213699951, 1.0, 0.0},
    };
    static const float y[] = {0.0f, -1.0f, 2.0f, 0.0f, 2.0f, NAN};
    static const float dy[] = {NAN, INFINITY, NAN, -INFINITY, 1.0f, 1.0f};
    static const double want_grad[4][6] = {
        {NAN, INFINITY, NAN, -INFINITY, 1.0, 1.0},
        {NAN, NAN, NAN, NAN, 1.0, 0.0},
        {NAN, NAN, NAN, -INFINITY, -3.0, NAN}, /* dy (1 - y^2) */
        {NAN, -INFINITY, NAN, NAN, -2.0, NAN}, /* dy y (1 - y) */
    };
    tol t = make_tol("NaN rules", 1e-6, 1e-6); /* NaN and infinities must match exactly */
    for (int a = 0; a < 4; a++)
        check_act_by_hand(&t, be, a, ARRAY_LEN(x), x, want[a], y, dy, want_grad[a]);
    report(&t);
}

/* Closed forms: equal logits give loss log(cols) and dlogits (1/cols - onehot) / rows;
 * [1000, 1000, -1000] (exp overflows unshifted) gives softmax [0.5, 0.5, 0]. */
void check_softmax_xent_known(const pf_backend *be) {
    tol t = make_tol("softmax known", 1e-7, 1e-6);
    /* 2 rows x 4 equal logits, labels 1 and 3: loss log 4; grad (0.25 - onehot) / 2 */
    static const float eq[8] = {2, 2, 2, 2, -7, -7, -7, -7};
    static const int32_t eq_labels[2] = {1, 3};
    static const float eq_grad[8] = {0.125f, -0.375f, 0.125f, 0.125f,
                                     0.125f, 0.125f,  0.125f, -0.375f};
    float *dl = put(be, eq, 8);
    int32_t *dlab = put_i32(be, eq_labels, 2);
    double sum = be->xent_sum(2, 4, dl, dlab);
    float loss = be->softmax_xent(2, 4, dl, dlab, dl);
    float got[8];
    take(be, got, dl, 8);
    be->free(dlab);
    check_value(&t, be->name, "equal logits loss", 0, log(4.0), loss);
    check_value(&t, be->name, "equal logits xent_sum", 0, 2.0 * log(4.0), sum);
    check_close(&t, be->name, "equal logits grad", eq_grad, got, 8);

    /* 1 row [1000, 1000, -1000], label 0: loss log 2; grad [-0.5, 0.5, 0] */
    static const float big[3] = {1000, 1000, -1000};
    static const int32_t big_label[1] = {0};
    static const float big_grad[3] = {-0.5f, 0.5f, 0.0f};
    dl = put(be, big, 3);
    dlab = put_i32(be, big_label, 1);
    sum = be->xent_sum(1, 3, dl, dlab);
    loss = be->softmax_xent(1, 3, dl, dlab, dl);
    take(be, got, dl, 3);
    be->free(dlab);
    check_value(&t, be->name, "big logits loss", 0, log(2.0), loss);
    check_value(&t, be->name, "big logits xent_sum", 0, log(2.0), sum);
    check_close(&t, be->name, "big logits grad", big_grad, got, 3);

    /* A single class: softmax is 1, loss 0, gradient 0. */
    static const float one[2] = {5, -3};
    static const int32_t zeros[2] = {0, 0};
    dl = put(be, one, 2);
    dlab = put_i32(be, zeros, 2);
    loss = be->softmax_xent(2, 1, dl, dlab, dl);
    take(be, got, dl, 2);
    be->free(dlab);
    check_value(&t, be->name, "one class loss", 0, 0.0, loss);
    check_value(&t, be->name, "one class grad", 0, 0.0, got[0]);
    check_value(&t, be->name, "one class grad", 1, 0.0, got[1]);
}

/* pred [1 2 3], target [0 0 0] gives loss (1 + 4 + 9) / 3 = 14/3 and
 * dpred = 2 (pred - target) / 3 = [2/3 4/3 2]. */
void check_mse_known(const pf_backend *be) {
    static const float p[3] = {1, 2, 3}, z[3] = {0, 0, 0};
    static const float want_grad[3] = {2.0f / 3.0f, 4.0f / 3.0f, 2.0f};
    tol t = make_tol("mse known", 1e-7, 1e-6);
    float got[3];
    float *dp = put(be, p, 3), *dz = put(be, z, 3);
    float loss = be->mse(3, dp, dz, dp);
    take(be, got, dp, 3);
    be->free(dz);
    check_value(&t, be->name, "loss", 0, 14.0 / 3.0, loss);
    check_close(&t, be->name, "grad", want_grad, got, 3);
}

/* Ties go to the first largest column (like argmax). */
void check_count_correct_known(const pf_backend *be) {
    static const float logits[7 * 4] = {
        1,  3,  3,     0,  /* label 1: first of the tied maxima -> correct */
        1,  3,  3,     0,  /* label 2: second of the tied maxima -> wrong */
        5,  5,  5,     5,  /* label 0 -> correct */
        5,  5,  5,     5,  /* label 3 -> wrong */
        -1, -2, -0.5f, -3, /* label 2 -> correct */
        2,  1,  0,     9,  /* label 3 -> correct */
        2,  1,  0,     9,  /* label 0 -> wrong */
    };
    static const int32_t labels[7] = {1, 2, 0, 3, 2, 3, 0};
    float *dl = put(be, logits, 28);
    int32_t *dlab = put_i32(be, labels, 7);
    assert_int_equal(be->count_correct(7, 4, dl, dlab), 4);
    be->free(dlab);
    be->free(dl);
}

/* One step of opt on one element on `be`: w, then the slots, as it leaves them. */
static void step_one(const pf_backend *be, int opt, float g, float out[3]) {
    float *dg = put(be, &g, 1), *dw = put(be, &out[0], 1);
    float *d0 = put(be, &out[1], 1), *d1 = put(be, &out[2], 1);
    switch (opt) {
    case OPT_SGD:
        be->sgd_step(1, 0.1f, dg, dw);
        break;
    case OPT_MOMENTUM:
        be->momentum_step(1, 0.1f, 0.9f, dg, dw, d0);
        break;
    case OPT_ADAGRAD:
        be->adagrad_step(1, 0.1f, dg, dw, d0);
        break;
    case OPT_ADAM:
        be->adam_step(1, 0.1f, 0.5f, 0.75f, 0.0f, dg, dw, d0, d1);
        break;
    }
    take(be, &out[2], d1, 1);
    take(be, &out[1], d0, 1);
    take(be, &out[0], dw, 1);
    be->free(dg);
}

/* TensorFlow's formulas by hand, one element each: w = 1, g = 0.5, lr = 0.1 (adam: lr_t =
 * 0.1), momentum 0.9 over accum 0.2, adagrad over accum 0.75, adam over m = 0.2, v = 0.04. */
void check_optimizer_steps_known(const pf_backend *be) {
    tol t = make_tol("steps known", 1e-7, 1e-6);
    float s[3] = {1.0f, 0.0f, 0.0f};
    step_one(be, OPT_SGD, 0.5f, s);
    check_value(&t, be->name, "sgd w", 0, 0.95, s[0]); /* 1 - 0.1 * 0.5 */
    s[0] = 1.0f, s[1] = 0.2f;
    step_one(be, OPT_MOMENTUM, 0.5f, s);
    check_value(&t, be->name, "momentum accum", 0, 0.68, s[1]); /* 0.9 * 0.2 + 0.5 */
    check_value(&t, be->name, "momentum w", 0, 0.932, s[0]);    /* 1 - 0.1 * 0.68 */
    s[0] = 1.0f, s[1] = 0.75f;
    step_one(be, OPT_ADAGRAD, 0.5f, s);
    check_value(&t, be->name, "adagrad accum", 0, 1.0, s[1]); /* 0.75 + 0.25 */
    check_value(&t, be->name, "adagrad w", 0, 0.95, s[0]);    /* 1 - 0.1 * 0.5 / sqrt(1) */
    s[0] = 1.0f, s[1] = 0.2f, s[2] = 0.04f;
    step_one(be, OPT_ADAM, 0.5f, s);
    check_value(&t, be->name, "adam m", 0, 0.35, s[1]);   /* 0.5 * 0.2 + 0.5 * 0.5 */
    check_value(&t, be->name, "adam v", 0, 0.0925, s[2]); /* 0.75 * 0.04 + 0.25 * 0.25 */
    /* 1 - 0.1 * 0.35 / sqrt(0.0925) = 1 - 0.035 / 0.30413813 */
    check_value(&t, be->name, "adam w", 0, 0.88492055134710973, s[0]);
}
