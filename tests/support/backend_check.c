/* backend_check.c - tolerances, buffers and gemm cases of the backend tests (see
 * backend_check.h). */
#include "tests/support/backend_check.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>

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
