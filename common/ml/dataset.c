/* dataset.c - the data set container and the sampler that shards its examples across workers
 * (see data.h). Every reader and generator fills a pf_dataset through pf_dataset_alloc (or grows
 * its rows itself, data_read.c); this file calls nothing else in common/ml/.
 *
 * DESIGN. The sampler realises the endless stream of data.h: position p is example
 * perm_e[p mod n] with e = p / n, perm_e a Fisher-Yates shuffle of 0..n-1 drawn from
 * pf_rng(seed, 1000 + e). It keeps the permutation of the last epoch asked for, so a
 * reader that walks the stream forwards shuffles once per epoch. A sampler is not
 * thread-safe (pf_sampler_index updates that cache); use one per thread.
 */
#include "psflow/data.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "psflow/mem.h"
#include "psflow/rng.h"

#define SAMPLER_STREAM_BASE 1000u /* epoch e shuffles with pf_rng(seed, 1000 + e) */

void pf_dataset_deinit(pf_dataset *ds) {
    pf_free(ds->x);
    pf_free(ds->y);
    memset(ds, 0, sizeof *ds);
}

pf_status pf_dataset_alloc(pf_dataset *out, int64_t n, int features) {
    memset(out, 0, sizeof *out);
    if (n < 1 || features < 1 || (uint64_t)n > SIZE_MAX / (size_t)features)
        return PF_ERR_NOMEM;
    out->x = pf_mallocarray((size_t)n * (size_t)features, sizeof(float));
    out->y = pf_mallocarray((size_t)n, sizeof(float));
    if (!out->x || !out->y) {
        pf_dataset_deinit(out);
        return PF_ERR_NOMEM;
    }
    out->n = n;
    out->features = features;
    return PF_OK;
}

/* --- sampler ------------------------------------------------------------------------------ */

struct pf_sampler {
    int64_t n;
    uint64_t seed;
    bool shuffle;
    int64_t epoch; /* epoch whose permutation perm holds, -1 for none yet */
    int64_t *perm; /* [n] when shuffling, else NULL */
};

pf_sampler *pf_sampler_create(int64_t n, uint64_t seed, bool shuffle) {
    if (n < 1)
        return NULL;
    pf_sampler *s = pf_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n = n;
    s->seed = seed;
    s->shuffle = shuffle;
    s->epoch = -1;
    if (shuffle) {
        s->perm = pf_mallocarray((size_t)n, sizeof *s->perm);
        if (!s->perm) {
            pf_free(s);
            return NULL;
        }
    }
    return s;
}

void pf_sampler_destroy(pf_sampler *s) {
    if (!s)
        return;
    pf_free(s->perm);
    pf_free(s);
}

/* Fisher-Yates from the top: slot i takes a uniform pick among slots 0..i. */
static void shuffle_epoch(pf_sampler *s, int64_t epoch) {
    pf_rng rng;
    pf_rng_init(&rng, s->seed, SAMPLER_STREAM_BASE + (uint64_t)epoch);
    for (int64_t i = 0; i < s->n; i++)
        s->perm[i] = i;
    for (int64_t i = s->n - 1; i > 0; i--) {
        int64_t j = (int64_t)pf_rng_below(&rng, (uint64_t)i + 1);
        int64_t t = s->perm[i];
        s->perm[i] = s->perm[j];
        s->perm[j] = t;
    }
    s->epoch = epoch;
}

int64_t pf_sampler_index(pf_sampler *s, int64_t position) {
    assert(position >= 0);
    if (!s->shuffle)
        return position % s->n;
    int64_t epoch = position / s->n;
    if (epoch != s->epoch)
        shuffle_epoch(s, epoch);
    return s->perm[position % s->n];
}

/* Class index of a target; -1 for values no int32 holds (regression targets). */
static int32_t label_of(float y) {
    if (!(y >= (float)INT32_MIN && y < 2147483648.0f))
        return -1;
    return (int32_t)y;
}

void pf_batch_gather(const pf_dataset *ds, pf_sampler *s, int64_t start, int count, float *x,
                     float *y, int32_t *labels) {
    assert(s->n == ds->n);
    size_t row = (size_t)ds->features;
    for (int k = 0; k < count; k++) {
        int64_t i = pf_sampler_index(s, start + k);
        memcpy(x + (size_t)k * row, ds->x + (size_t)i * row, row * sizeof(float));
        y[k] = ds->y[i];
        if (labels)
            labels[k] = label_of(ds->y[i]);
    }
}

void pf_batch_copy(const pf_dataset *ds, int64_t start, int count, float *x, float *y,
                   int32_t *labels) {
    size_t in = (size_t)ds->features;
    memcpy(x, ds->x + (size_t)start * in, (size_t)count * in * sizeof(float));
    memcpy(y, ds->y + start, (size_t)count * sizeof(float));
    for (int i = 0; labels && i < count; i++)
        labels[i] = (int32_t)ds->y[start + i];
}
