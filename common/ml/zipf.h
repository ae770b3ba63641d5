/* zipf.h - Zipf-distributed ranks, P(rank k) ~ k^-s over 1..n, by Hoermann and Derflinger's
 * rejection-inversion: O(1) a draw, no table, so any vocabulary size costs nothing. Private
 * to common/ml/ (the synthetic_ctr and Criteo-layout generators).
 */
#ifndef PSFLOW_ML_ZIPF_H
#define PSFLOW_ML_ZIPF_H

#include <stdint.h>

#include "psflow/rng.h"

typedef struct data_zipf {
    double s;      /* exponent */
    int64_t n;     /* ranks 1..n */
    double h_x1;   /* H(1.5) - 1 */
    double h_n;    /* H(n + 0.5) */
    double accept; /* the squeeze: k - x <= accept is accepted at once */
} data_zipf;

/* Ranks 1..n with exponent s > 0. */
void data_zipf_init(data_zipf *z, int64_t n, double s);

/* One rank in [1, n] drawn from rng. */
int64_t data_zipf_rank(const data_zipf *z, pf_rng *rng);

#endif
