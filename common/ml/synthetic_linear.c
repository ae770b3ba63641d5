/* synthetic_linear.c - the synthetic_linear generator (see data.h): y = w x + b + noise. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "psflow/data.h"
#include "psflow/rng.h"

pf_status pf_synthetic_linear(double w, double b, double noise, int64_t n, uint64_t seed,
                              uint64_t stream, pf_dataset *out) {
    memset(out, 0, sizeof *out);
    if (n < 1 || !isfinite(w) || !isfinite(b) || !isfinite(noise) || noise < 0)
        return PF_ERR_INVALID;
    if (pf_dataset_alloc(out, n, 1) != PF_OK)
        return PF_ERR_NOMEM;
    pf_rng rng;
    pf_rng_init(&rng, seed, stream);
    for (int64_t i = 0; i < n; i++) {
        /* Always draw the normal, so x does not depend on whether noise is zero. */
        double x = pf_rng_uniform(&rng);
        double e = pf_rng_normal(&rng);
        double y = w * x + b + noise * e;
        if (!(fabs(y) <= FLT_MAX)) {
            pf_dataset_deinit(out);
            return PF_ERR_RANGE;
        }
        out->x[i] = (float)x;
        out->y[i] = (float)y;
    }
    out->num_classes = 0;
    return PF_OK;
}
