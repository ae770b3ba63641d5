/* rng.h - small deterministic random numbers (xoshiro256** seeded with splitmix64).
 *
 * psflow's runs are reproducible from training.seed: initial weights, shuffling and
 * synthetic data all come from pf_rng streams. The same seed gives the same sequence on
 * every platform. pf_rng is a plain value; one per thread.
 */
#ifndef PSFLOW_RNG_H
#define PSFLOW_RNG_H

#include <stdint.h>

typedef struct pf_rng {
    uint64_t s[4];
} pf_rng;

/* Seeds from (seed, stream): different streams of one seed are independent. */
void pf_rng_init(pf_rng *rng, uint64_t seed, uint64_t stream);
uint64_t pf_rng_next(pf_rng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double pf_rng_uniform(pf_rng *rng);
/* Uniform integer in [0, bound), unbiased; bound >= 1. */
uint64_t pf_rng_below(pf_rng *rng, uint64_t bound);
/* Standard normal (Box-Muller). */
double pf_rng_normal(pf_rng *rng);

#endif
