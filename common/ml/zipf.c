/* zipf.c - Zipf-distributed ranks by rejection-inversion (see zipf.h). */
#include "zipf.h"

#include <math.h>

/* log1p(x) / x and expm1(x) / x, with their series near 0. */
static double helper1(double x) {
    return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - x * 0.25));
}

static double helper2(double x) {
    return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x * 0.5 * (1 + x / 3 * (1 + x * 0.25));
}

static double zipf_h(const data_zipf *z, double x) {
    return exp(-z->s * log(x));
}

/* H(x), an integral of h, and its inverse. */
static double zipf_hi(const data_zipf *z, double x) {
    double lx = log(x);
    return helper2((1 - z->s) * lx) * lx;
}

static double zipf_hi_inverse(const data_zipf *z, double x) {
    double t = x * (1 - z->s);
    if (t < -1)
        t = -1; /* rounding only */
    return exp(helper1(t) * x);
}

void data_zipf_init(data_zipf *z, int64_t n, double s) {
    z->s = s;
    z->n = n;
    z->h_x1 = zipf_hi(z, 1.5) - 1;
    z->h_n = zipf_hi(z, (double)n + 0.5);
    z->accept = 2 - zipf_hi_inverse(z, zipf_hi(z, 2.5) - zipf_h(z, 2));
}

int64_t data_zipf_rank(const data_zipf *z, pf_rng *rng) {
    for (;;) {
        double u = z->h_n + pf_rng_uniform(rng) * (z->h_x1 - z->h_n);
        double x = zipf_hi_inverse(z, u);
        int64_t k = (int64_t)(x + 0.5);
        k = k < 1 ? 1 : k > z->n ? z->n : k;
        if ((double)k - x <= z->accept || u >= zipf_hi(z, (double)k + 0.5) - zipf_h(z, (double)k))
            return k;
    }
}
