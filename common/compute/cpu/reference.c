/* reference.c - the "reference" backend: naive loops, the oracle for every other backend.
 *
 * DESIGN: each op is the textbook loop of its formula in backend.h, computed in double and
 * rounded to float once at the end, so its only error is that final rounding (and libm's).
 * Nothing here is tuned, and nothing is shared with the fast backends except the memory
 * ops and count_correct (cpu_internal.h; the tests check count_correct against literals).
 * tests/compute/test_compute.c compares openblas.c (and later cuda/) against these
 * results: when a fast op and this one disagree, this one should be obviously right.
 */
#include "psflow/backend.h"
#include "psflow/mem.h"

#include <math.h>

#include "cpu_internal.h"

/* --- dense algebra ------------------------------------------------------------------------ */

/* Element (i, j) of op(X), where X is row-major with row stride ld. */
static double op_at(const float *x, int ld, bool trans, int i, int j) {
    return trans ? x[(size_t)j * (size_t)ld + (size_t)i] : x[(size_t)i * (size_t)ld + (size_t)j];
}

static void ref_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                     int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double dot = 0.0;
            for (int p = 0; p < k; p++)
                dot += op_at(a, lda, trans_a, i, p) * op_at(b, ldb, trans_b, p, j);
            float *cij = &c[(size_t)i * (size_t)ldc + (size_t)j];
            /* beta == 0: C is not read, so NaN or garbage in C does not leak through. */
            double prior = beta == 0.0f ? 0.0 : (double)beta * *cij;
            *cij = (float)((double)alpha * dot + prior);
        }
    }
}

static void ref_axpy(size_t n, float a, const float *x, float *y) {
    for (size_t i = 0; i < n; i++)
        y[i] = (float)((double)y[i] + (double)a * x[i]);
}

static void ref_scale(size_t n, float a, float *x) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)a * x[i]);
}

/* --- layers ------------------------------------------------------------------------------- */

static void ref_bias_add(int rows, int cols, const float *bias, float *x) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            x[(size_t)r * (size_t)cols + (size_t)c] += bias[c];
}

static void ref_bias_grad(int rows, int cols, const float *dy, float *db) {
    for (int c = 0; c < cols; c++) {
        double sum = 0.0;
        for (int r = 0; r < rows; r++)
            sum += dy[(size_t)r * (size_t)cols + (size_t)c];
        db[c] = (float)sum;
    }
}

static double act_value(pf_activation act, double x) {
    switch (act) {
    case PF_ACT_RELU:
        return x > 0.0 ? x : 0.0;
    case PF_ACT_TANH:
        return tanh(x);
    case PF_ACT_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case PF_ACT_NONE:
        break;
    }
    return x;
}

/* d act / d x, in terms of the activation's output y. */
static double act_slope(pf_activation act, double y) {
    switch (act) {
    case PF_ACT_RELU:
        return y > 0.0 ? 1.0 : 0.0;
    case PF_ACT_TANH:
        return 1.0 - y * y;
    case PF_ACT_SIGMOID:
        return y * (1.0 - y);
    case PF_ACT_NONE:
        break;
    }
    return 1.0;
}

static void ref_activation(pf_activation act, size_t n, const float *x, float *y) {
    for (size_t i = 0; i < n; i++)
        y[i] = (float)act_value(act, x[i]);
}

static void ref_activation_grad(pf_activation act, size_t n, const float *y, const float *dy,
                                float *dx) {
    for (size_t i = 0; i < n; i++)
        dx[i] = (float)(dy[i] * act_slope(act, y[i]));
}

/* --- losses ------------------------------------------------------------------------------- */

/* The row's largest logit and sum_c exp(row[c] - max): softmax(row)[c] is
 * exp(row[c] - max) / sum and -log softmax(row)[c] is log(sum) - (row[c] - max). Working
 * relative to the max keeps both exact for logits of any size (even where max + log(sum)
 * would round to max). */
static double shifted_sum_exp(int cols, const float *row, double *max_out) {
    double max = row[0];
    for (int c = 1; c < cols; c++)
        if (row[c] > max)
            max = row[c];
    double sum = 0.0;
    for (int c = 0; c < cols; c++)
        sum += exp(row[c] - max);
    *max_out = max;
    return sum;
}

static float ref_softmax_xent(int rows, int cols, const float *logits, const int32_t *labels,
                              float *dlogits) {
    double loss = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *row = logits + (size_t)r * (size_t)cols;
        float *drow = dlogits + (size_t)r * (size_t)cols;
        double max;
        double sum = shifted_sum_exp(cols, row, &max);
        int label = labels[r];
        loss += log(sum) - (row[label] - max);
        /* Element c of drow depends only on row[c], max and sum, so drow may alias row. */
        for (int c = 0; c < cols; c++) {
            double p = exp(row[c] - max) / sum;
            drow[c] = (float)((p - (c == label ? 1.0 : 0.0)) / rows);
        }
    }
    return rows > 0 ? (float)(loss / rows) : 0.0f;
}

static float ref_mse(size_t n, const float *pred, const float *target, float *dpred) {
    double loss = 0.0;
    for (size_t i = 0; i < n; i++) {
        double diff = (double)pred[i] - target[i];
        loss += diff * diff;
        dpred[i] = (float)(2.0 * diff / (double)n);
    }
    return n > 0 ? (float)(loss / (double)n) : 0.0f;
}

static double ref_xent_sum(int rows, int cols, const float *logits, const int32_t *labels) {
    double sum = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *row = logits + (size_t)r * (size_t)cols;
        double max;
        double row_sum = shifted_sum_exp(cols, row, &max);
        sum += log(row_sum) - (row[labels[r]] - max);
    }
    return sum;
}

/* --- optimizer steps ---------------------------------------------------------------------- */

static void ref_sgd_step(size_t n, float lr, const float *g, float *w) {
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(w[i] - (double)lr * g[i]);
}

static void ref_momentum_step(size_t n, float lr, float momentum, const float *g, float *w,
                              float *accum) {
    for (size_t i = 0; i < n; i++) {
        double acc = (double)momentum * accum[i] + g[i];
        accum[i] = (float)acc;
        w[i] = (float)(w[i] - (double)lr * acc);
    }
}

static void ref_adagrad_step(size_t n, float lr, const float *g, float *w, float *accum) {
    for (size_t i = 0; i < n; i++) {
        double acc = accum[i] + (double)g[i] * g[i];
        accum[i] = (float)acc;
        w[i] = (float)(w[i] - (double)lr * g[i] / sqrt(acc));
    }
}

static void ref_adam_step(size_t n, float lr_t, float beta1, float beta2, float epsilon,
                          const float *g, float *w, float *m, float *v) {
    for (size_t i = 0; i < n; i++) {
        double mi = (double)beta1 * m[i] + (1.0 - beta1) * g[i];
        double vi = (double)beta2 * v[i] + (1.0 - beta2) * ((double)g[i] * g[i]);
        m[i] = (float)mi;
        v[i] = (float)vi;
        w[i] = (float)(w[i] - (double)lr_t * mi / (sqrt(vi) + epsilon));
    }
}

static const pf_backend reference_backend = {
    .name = "reference",
    .host_memory = true,
    .alloc = cpu_alloc,
    .alloc_zeroed = true,
    .free = pf_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .upload_i32 = cpu_copy_i32,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .gemm = ref_gemm,
    .axpy = ref_axpy,
    .scale = ref_scale,
    .bias_add = ref_bias_add,
    .bias_grad = ref_bias_grad,
    .activation = ref_activation,
    .activation_grad = ref_activation_grad,
    .softmax_xent = ref_softmax_xent,
    .mse = ref_mse,
    .count_correct = cpu_count_correct,
    .xent_sum = ref_xent_sum,
    .sgd_step = ref_sgd_step,
    .momentum_step = ref_momentum_step,
    .adagrad_step = ref_adagrad_step,
    .adam_step = ref_adam_step,
};

const pf_backend *pf_backend_reference(void) {
    return &reference_backend;
}
