/* criteo_gen.c - Criteo-layout click logs drawn from a known model (see criteo.h).
 *
 * DESIGN: the true model is logistic, P(click) = sigmoid(logit), with
 *   logit = bias + sum_j a_j * x_j (+ m_j when I_j is missing)
 *         + sum_c w_c(id_c) + sum_{(c,d) in PAIRS} <v_c(id_c), v_d(id_d)>
 * where x_j = (log1p(max(I_j, 0)) - mu_j) / sigma_j is I_j's standardised log (the transform
 * the anchors' CTR pipelines apply), w_c and v_c (DIM numbers) are drawn from rng streams
 * keyed by (seed, column, id), so the truth costs no memory for any vocabulary and anyone
 * with the seed and a row computes its probability (pf_criteo_true_probability). PAIRS are
 * the interactions a model of pairwise dot products can learn and a sum of per-column
 * effects cannot. Numeric values are counts, exp(N(mu_j, sigma_j)) - 1 rounded down (I2
 * sometimes negative, as in the real set); ids follow Zipf's law over each column's
 * vocabulary (sizes from 3 to 10^6, as the real columns' range), the rank hashed to a 32-bit
 * id; some columns are often empty. Each file draws from its own stream (seed, file), so a
 * file's bytes depend only on the seed, its index and the row counts.
 *
 * The Bayes-optimal AUC is that of the true probabilities against the drawn labels: counted
 * in 2^16 bins of probability as rows are written (memory fixed; ties inside a bin count
 * half, an error below 1e-4). The first-order AUC is counted the same way from the logit
 * without the pairs: what a model that knows every numeric effect and id weight exactly,
 * and no interaction, reaches; a model above it has learned interactions.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "psflow/criteo.h"
#include "psflow/mem.h"
#include "psflow/rng.h"
#include "zipf.h"

#define DIM       4
#define AUC_BINS  65536
#define CLICKS    0.256 /* the click rate the bias is set for (the Kaggle set's) */
#define W_SCALE   0.2   /* per-id weights: N(0, W_SCALE^2) */
#define V_SCALE   0.6   /* interaction factors: N(0, V_SCALE^2) each */
#define A_SCALE   0.25  /* numeric coefficients: N(0, A_SCALE^2) */
#define CALIBRATE 20000 /* rows drawn to set the bias */
#define MAX_FILES 100000
#define OUT_CHUNK ((size_t)1 << 20)

static const int64_t vocab[PF_CRITEO_CATEGORICAL] = {
    1460, 583,   1000000, 200000, 305,  24,   12517, 633,   3,  93145, 5683,  300000, 3194,
    27,   14992, 500000,  10,     5652, 2173, 4,     80000, 18, 15,    28000, 105,    14000};
static const double cat_missing[PF_CRITEO_CATEGORICAL] = {
    0, 0, 0.03, 0.03, 0, 0.12, 0,    0,    0,    0, 0,    0.03, 0,
    0, 0, 0.03, 0,    0, 0.44, 0.44, 0.03, 0.44, 0, 0.03, 0.44, 0.44};
static const double num_missing[PF_CRITEO_NUMERIC] = {0.45, 0,    0.21, 0.22, 0.03, 0.22, 0.04,
                                                      0.01, 0.04, 0.45, 0.04, 0.77, 0.22};
static const double num_mu[PF_CRITEO_NUMERIC] = {0.8, 1.5, 2.3, 1.6, 7.5, 3.8, 1.3,
                                                 2.4, 3.9, 0.4, 0.9, 0.3, 1.6};
static const double num_sigma[PF_CRITEO_NUMERIC] = {0.9, 1.6, 1.1, 0.8, 2.0, 1.5, 1.1,
                                                    0.9, 1.3, 0.5, 0.7, 0.6, 0.9};
static const int pairs[][2] = {{0, 1}, {4, 7}, {10, 12}, {13, 16}, {17, 18}, {24, 5}};
#define N_PAIRS ((int)(sizeof pairs / sizeof pairs[0]))

/* --- the truth ----------------------------------------------------------------------------- */

static uint64_t key(uint64_t seed, int column, uint32_t id, int what) {
    return seed ^ 0x6372697465747275ULL ^ ((uint64_t)(column + 1) << 48) ^ ((uint64_t)what << 40) ^
           id;
}

static double id_weight(uint64_t seed, int c, uint32_t id) {
    pf_rng rng;
    pf_rng_init(&rng, key(seed, c, id, 1), 0);
    return W_SCALE * pf_rng_normal(&rng);
}

static void id_factor(uint64_t seed, int c, uint32_t id, double *v) {
    pf_rng rng;
    pf_rng_init(&rng, key(seed, c, id, 2), 0);
    for (int k = 0; k < DIM; k++)
        v[k] = V_SCALE * pf_rng_normal(&rng);
}

/* What the seed fixes besides the per-id draws: the numeric columns' coefficients and
 * missing-value effects, and the bias that makes CLICKS the mean click probability. */
typedef struct truth {
    uint64_t seed;
    double a[PF_CRITEO_NUMERIC], m[PF_CRITEO_NUMERIC];
    double bias;
} truth;

/* The true logit of r; *first_order (may be NULL) gets its part without the pairs'
 * interactions: the bias, the numeric effects and the per-id weights. */
static double logit_parts(const truth *t, const pf_criteo_row *r, double *first_order) {
    double logit = t->bias;
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
        if (r->num_present >> j & 1) {
            double v = r->num[j] > 0 ? (double)r->num[j] : 0;
            logit += t->a[j] * (log1p(v) - num_mu[j]) / num_sigma[j];
        } else {
            logit += t->m[j];
        }
    }
    for (int c = 0; c < PF_CRITEO_CATEGORICAL; c++)
        if (r->cat_present >> c & 1)
            logit += id_weight(t->seed, c, r->cat[c]);
    if (first_order)
        *first_order = logit;
    for (int p = 0; p < N_PAIRS; p++) {
        int c = pairs[p][0], d = pairs[p][1];
        if (!(r->cat_present >> c & 1) || !(r->cat_present >> d & 1))
            continue;
        double u[DIM], v[DIM];
        id_factor(t->seed, c, r->cat[c], u);
        id_factor(t->seed, d, r->cat[d], v);
        for (int k = 0; k < DIM; k++)
            logit += u[k] * v[k];
    }
    return logit;
}

static double logit_of(const truth *t, const pf_criteo_row *r) {
    return logit_parts(t, r, NULL);
}

static void draw_row(pf_rng *rng, const data_zipf *z, pf_criteo_row *r);
static void init_zipf(data_zipf *z);

/* The truth of `seed`: the coefficients from their stream, then the bias by bisection over
 * the logits of CALIBRATE rows of a stream of their own (the hot ids' weights move the mean
 * click rate far from what a fixed bias would give). */
static void truth_of(uint64_t seed, truth *t) {
    t->seed = seed;
    t->bias = 0;
    pf_rng rng;
    pf_rng_init(&rng, seed ^ 0x6e756d6572696373ULL, 0);
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
        t->a[j] = A_SCALE * pf_rng_normal(&rng);
        t->m[j] = 0.2 * pf_rng_normal(&rng);
    }
    data_zipf z[PF_CRITEO_CATEGORICAL];
    init_zipf(z);
    double *l = pf_mallocarray(CALIBRATE, sizeof *l);
    if (!l)
        return; /* bias 0: the click rate is then not CLICKS, nothing worse */
    pf_rng_init(&rng, seed, 0x63616c6962ULL);
    pf_criteo_row r;
    for (int i = 0; i < CALIBRATE; i++) {
        draw_row(&rng, z, &r);
        l[i] = logit_of(t, &r);
    }
    double lo = -20, hi = 20;
    for (int it = 0; it < 60; it++) {
        double mid = 0.5 * (lo + hi), mean = 0;
        for (int i = 0; i < CALIBRATE; i++)
            mean += 1 / (1 + exp(-(l[i] + mid)));
        if (mean / CALIBRATE < CLICKS)
            lo = mid;
        else
            hi = mid;
    }
    t->bias = 0.5 * (lo + hi);
    pf_free(l);
}

double pf_criteo_true_probability(uint64_t seed, const pf_criteo_row *row) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static truth cached;
    static int have;
    pthread_mutex_lock(&mu);
    if (!have || cached.seed != seed) {
        truth_of(seed, &cached);
        have = 1;
    }
    truth t = cached;
    pthread_mutex_unlock(&mu);
    return 1 / (1 + exp(-logit_of(&t, row)));
}

/* --- drawing rows -------------------------------------------------------------------------- */

/* A rank's 32-bit id in column c: a mix of (column, rank), the same for every seed so the
 * id space looks like hashed values. */
static uint32_t id_of(int c, int64_t rank) {
    uint64_t z = ((uint64_t)(c + 1) << 32) ^ (uint64_t)rank;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (uint32_t)(z ^ (z >> 31));
}

static void init_zipf(data_zipf *z) {
    for (int c = 0; c < PF_CRITEO_CATEGORICAL; c++)
        data_zipf_init(&z[c], vocab[c], 1.1);
}

static void draw_row(pf_rng *rng, const data_zipf *z, pf_criteo_row *r) {
    r->num_present = r->cat_present = 0;
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
        if (pf_rng_uniform(rng) < num_missing[j])
            continue;
        double v = floor(exp(num_mu[j] + num_sigma[j] * pf_rng_normal(rng))) - 1;
        if (j == 1 && pf_rng_uniform(rng) < 0.05)
            v = -1 - (double)pf_rng_below(rng, 3);
        r->num[j] = (int64_t)(v < 1e12 ? v : 1e12);
        r->num_present |= 1u << j;
    }
    for (int c = 0; c < PF_CRITEO_CATEGORICAL; c++) {
        if (pf_rng_uniform(rng) < cat_missing[c])
            continue;
        r->cat[c] = id_of(c, data_zipf_rank(&z[c], rng));
        r->cat_present |= 1u << c;
    }
}

/* --- writing ------------------------------------------------------------------------------- */

static char *put_int(char *p, int64_t v) {
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *p++ = '-';
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put_hex(char *p, uint32_t v) {
    static const char digits[] = "0123456789abcdef";
    for (int s = 28; s >= 0; s -= 4)
        *p++ = digits[v >> s & 15];
    return p;
}

/* One line of r at p (at most 40 * 21 bytes); returns its end. */
static char *put_row(char *p, const pf_criteo_row *r) {
    *p++ = (char)('0' + r->label);
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
        *p++ = '\t';
        if (r->num_present >> j & 1)
            p = put_int(p, r->num[j]);
    }
    for (int c = 0; c < PF_CRITEO_CATEGORICAL; c++) {
        *p++ = '\t';
        if (r->cat_present >> c & 1)
            p = put_hex(p, r->cat[c]);
    }
    *p++ = '\n';
    return p;
}

typedef struct sink {
    FILE *plain;
    gzFile gz;
    char path[1100];
} sink;

static pf_status sink_write(sink *s, const char *data, size_t n, pf_error *err) {
    int ok =
        s->gz ? gzwrite(s->gz, data, (unsigned)n) == (int)n : fwrite(data, 1, n, s->plain) == n;
    return ok ? PF_OK
              : pf_error_set(err, PF_ERR_IO, NULL, "%s: write failed: %s", s->path,
                             errno ? strerror(errno) : "error");
}

static pf_status sink_close(sink *s, pf_error *err) {
    int bad = s->gz ? gzclose_w(s->gz) != Z_OK : fclose(s->plain) != 0;
    s->gz = NULL;
    s->plain = NULL;
    return bad ? pf_error_set(err, PF_ERR_IO, NULL, "%s: write failed: %s", s->path,
                              errno ? strerror(errno) : "error")
               : PF_OK;
}

typedef struct tally {
    uint64_t pos[AUC_BINS], neg[AUC_BINS];
    uint64_t pos1[AUC_BINS], neg1[AUC_BINS]; /* the same by the first-order probability */
    double loss;
} tally;

static int bin_of(double p) {
    int bin = (int)(p * AUC_BINS);
    return bin < 0 ? 0 : bin >= AUC_BINS ? AUC_BINS - 1 : bin;
}

/* Writes file k: its n rows, counted into t and res. */
static pf_status write_file(const pf_criteo_gen_options *o, int k, int64_t n, const data_zipf *z,
                            const truth *tr, tally *t, char *out, pf_criteo_gen_result *res,
                            pf_error *err) {
    sink s = {0};
    snprintf(s.path, sizeof s.path, "%s/part-%05d.tsv%s", o->dir, k, o->gzip ? ".gz" : "");
    errno = 0;
    if (o->gzip)
        s.gz = gzopen(s.path, "wb6");
    else
        s.plain = fopen(s.path, "wb");
    if (!s.gz && !s.plain)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot create: %s", s.path,
                            errno ? strerror(errno) : "out of memory");
    pf_rng rng;
    pf_rng_init(&rng, o->seed, 0x6669000000ULL + (uint64_t)k);
    size_t used = 0;
    pf_status st = PF_OK;
    pf_criteo_row r;
    for (int64_t i = 0; i < n && st == PF_OK; i++) {
        draw_row(&rng, z, &r);
        double first;
        double p = 1 / (1 + exp(-logit_parts(tr, &r, &first)));
        r.label = pf_rng_uniform(&rng) < p;
        int bin = bin_of(p), bin1 = bin_of(1 / (1 + exp(-first)));
        if (r.label) {
            t->pos1[bin1]++;
            t->pos[bin]++;
            res->positives++;
            t->loss -= log(p > 1e-300 ? p : 1e-300);
        } else {
            t->neg1[bin1]++;
            t->neg[bin]++;
            t->loss -= log1p(-p < -1 + 1e-16 ? -1 + 1e-16 : -p);
        }
        used = (size_t)(put_row(out + used, &r) - out);
        if (used > OUT_CHUNK - 1024) {
            st = sink_write(&s, out, used, err);
            res->bytes += used;
            used = 0;
        }
    }
    if (st == PF_OK && used) {
        st = sink_write(&s, out, used, err);
        res->bytes += used;
    }
    pf_status cs = sink_close(&s, st == PF_OK ? err : &(pf_error){0});
    return st != PF_OK ? st : cs;
}

/* The AUC of the rows counted by probability bin in pos and neg. */
static double auc_of(const uint64_t *pos_bins, const uint64_t *neg_bins) {
    double below = 0, sum = 0, pos = 0, neg = 0;
    for (int b = 0; b < AUC_BINS; b++) {
        sum += (double)pos_bins[b] * (below + 0.5 * (double)neg_bins[b]);
        below += (double)neg_bins[b];
        pos += (double)pos_bins[b];
    }
    neg = below;
    return pos > 0 && neg > 0 ? sum / (pos * neg) : NAN;
}

static pf_status write_truth(const pf_criteo_gen_options *o, const pf_criteo_gen_result *r,
                             pf_error *err) {
    char path[1100];
    snprintf(path, sizeof path, "%s/truth.json", o->dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot create: %s", path, strerror(errno));
    fprintf(f,
            "{\"layout\": \"criteo\", \"seed\": %" PRIu64 ", \"rows\": %" PRId64
            ", \"files\": %d, \"first_file\": %d, \"gzip\": %s, \"positives\": %" PRId64
            ", \"bytes\": %" PRIu64
            ", \"bayes_auc\": %.6f, \"bayes_logloss\": %.6f, \"first_order_auc\": %.6f, "
            "\"model\": \"logistic: "
            "standardised log1p numeric effects, one weight per id, dot products of %d-d id "
            "factors for %d column pairs (criteo_gen.c)\"}\n",
            o->seed, r->rows, o->files, o->first, o->gzip ? "true" : "false", r->positives,
            r->bytes, r->bayes_auc, r->bayes_loss, r->first_order_auc, DIM, N_PAIRS);
    return fclose(f) == 0 ? PF_OK : pf_error_set(err, PF_ERR_IO, NULL, "%s: write failed", path);
}

pf_status pf_criteo_generate(const pf_criteo_gen_options *o, pf_criteo_gen_result *out,
                             pf_error *err) {
    memset(out, 0, sizeof *out);
    if (o->rows < 1 || o->files < 1 || o->files > o->rows || o->first < 0 ||
        o->files > MAX_FILES - o->first)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "rows must be >= 1, files between 1 and rows, and file indices "
                            "below %d; got rows %" PRId64 ", files %d from index %d",
                            MAX_FILES, o->rows, o->files, o->first);
    tally *t = pf_calloc(1, sizeof *t);
    char *buf = pf_malloc(OUT_CHUNK);
    if (!t || !buf) {
        pf_free(t);
        pf_free(buf);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    }
    data_zipf z[PF_CRITEO_CATEGORICAL];
    init_zipf(z);
    truth tr;
    truth_of(o->seed, &tr);
    pf_status st = PF_OK;
    int64_t done = 0;
    for (int k = 0; k < o->files && st == PF_OK; k++) {
        /* file k ends at rows * (k + 1) / files, without overflow */
        int64_t end = o->rows / o->files * (k + 1) + o->rows % o->files * (k + 1) / o->files;
        st = write_file(o, o->first + k, end - done, z, &tr, t, buf, out, err);
        done = end;
        out->rows = done;
        if (st == PF_OK && o->progress)
            o->progress(o->ctx, o->first + k, done);
    }
    if (st == PF_OK) {
        out->bayes_auc = auc_of(t->pos, t->neg);
        out->first_order_auc = auc_of(t->pos1, t->neg1);
        out->bayes_loss = t->loss / (double)out->rows;
        st = write_truth(o, out, err);
    }
    pf_free(t);
    pf_free(buf);
    return st;
}
