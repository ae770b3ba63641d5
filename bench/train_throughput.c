/* train_throughput.c - how close training gets to the machine's matrix-multiply speed.
 *
 * Trains a job (default: examples/fashion-mnist-mlp.json) for a fixed number of steps in
 * one process and prints the examples/s it reaches next to the ideal for this machine,
 * measured in the same run: the sgemm rate the backend reaches on the model's own layer
 * shapes (forward x.W, weight gradient x^T.dy and input gradient dy.W^T of every layer at
 * the job's batch size) divided by the model's FLOPs per example, 6 * sum(in * out).
 * Short rounds of baseline and training alternate many times. Noise from other tenants
 * of a shared machine only ever slows a round down, so the headline ratio compares the
 * best round of each side; the ratio of the medians is printed too. Absolute numbers vary
 * by machine; the ratio is the figure to compare.
 *
 * --device cuda (or cuda:N) runs both sides on the GPU: the training steps on the "cuda"
 * backend, the baseline with cuBLAS's sgemm on the same shapes. A GPU needs larger layers
 * than the CPU to be busy, so on one the MLP defaults to 784-4096-4096-10 with batch 1024;
 * --hidden and --batch set the widths and the batch on either device. Without a usable GPU
 * it prints why and exits 69, having measured nothing.
 *
 * usage: train_throughput [--spec FILE] [--steps N] [--rounds R] [--device cpu|cuda|cuda:N]
 *                         [--hidden W1,W2,...] [--batch B]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/clock.h"
#include "psflow/model.h"
#include "psflow/rng.h"
#include "psflow/session.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double max_of(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct gemm_shape {
    bool ta, tb;
    int m, n, k;
} gemm_shape;

/* The three products of every layer at batch b. Returns the number of shapes. */
static int layer_shapes(const pf_model_spec *spec, int b, gemm_shape *out) {
    pf_var_info vars[PF_MAX_VARS];
    int nv = pf_model_layout(spec, vars), n = 0;
    for (int v = 0; v < nv; v += 2) {
        int in = (int)vars[v].shape[0], o = (int)vars[v].shape[1];
        out[n++] = (gemm_shape){false, false, b, o, in}; /* y = x . W      */
        out[n++] = (gemm_shape){true, false, in, o, b};  /* dW = x^T . dy  */
        out[n++] = (gemm_shape){false, true, b, in, o};  /* dx = dy . W^T  */
    }
    return n;
}

/* sgemm FLOP/s over the shapes, repeated for about `seconds`. */
static double sgemm_rate(const pf_backend *be, const gemm_shape *shapes, int n_shapes,
                         double seconds) {
    size_t max_elems = 0;
    for (int i = 0; i < n_shapes; i++) {
        size_t sizes[] = {(size_t)shapes[i].m * shapes[i].k, (size_t)shapes[i].k * shapes[i].n,
                          (size_t)shapes[i].m * shapes[i].n};
        for (int j = 0; j < 3; j++)
            max_elems = sizes[j] > max_elems ? sizes[j] : max_elems;
    }
    float *host = malloc(max_elems * sizeof(float));
    float *a = be->alloc(max_elems * sizeof(float)), *b = be->alloc(max_elems * sizeof(float));
    float *c = be->alloc(max_elems * sizeof(float));
    if (!host || !a || !b || !c) {
        fprintf(stderr, "train_throughput: out of memory\n");
        exit(1);
    }
    pf_rng rng;
    pf_rng_init(&rng, 1, 1);
    for (size_t i = 0; i < max_elems; i++)
        host[i] = (float)pf_rng_uniform(&rng) - 0.5f;
    be->upload(a, host, max_elems);
    be->upload(b, host, max_elems);
    double flops = 0, t0 = pf_clock_now(), t;
    float out;
    do {
        for (int i = 0; i < n_shapes; i++) {
            const gemm_shape *s = &shapes[i];
            be->gemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, s->ta ? s->m : s->k, b,
                     s->tb ? s->k : s->n, 0.0f, c, s->n);
            flops += 2.0 * s->m * s->n * s->k;
        }
        be->download(&out, c, 1); /* waits for queued work on a device backend */
        t = pf_clock_now() - t0;
    } while (t < seconds);
    be->free(a);
    be->free(b);
    be->free(c);
    free(host);
    return flops / t;
}

/* "4096,4096" into widths[]; returns the count, or -1 unless 1..PF_MAX_HIDDEN widths of
 * 1..PF_MAX_UNITS. */
static int parse_widths(const char *text, int widths[PF_MAX_HIDDEN]) {
    int n = 0;
    const char *p = text;
    for (;;) {
        char *end;
        long w = strtol(p, &end, 10);
        if (end == p || w < 1 || w > PF_MAX_UNITS || n == PF_MAX_HIDDEN)
            return -1;
        widths[n++] = (int)w;
        if (*end == '\0')
            return n;
        if (*end != ',')
            return -1;
        p = end + 1;
    }
}

int main(int argc, char **argv) {
    const char *spec_path = "examples/fashion-mnist-mlp.json";
    const char *device = NULL, *hidden = NULL;
    long steps = 200, rounds = 15, batch_arg = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--spec") && i + 1 < argc)
            spec_path = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atol(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc)
            hidden = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch_arg = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: train_throughput [--spec FILE] [--steps N] [--rounds R] "
                            "[--device cpu|cuda|cuda:N] [--hidden W1,W2,...] [--batch B]\n");
            return 64;
        }
    }
    if (steps < 1 || rounds < 1 || rounds > 50) {
        fprintf(stderr, "train_throughput: --steps >= 1 and 1 <= --rounds <= 50\n");
        return 64;
    }
    int widths[PF_MAX_HIDDEN], n_widths = 0;
    if (hidden && (n_widths = parse_widths(hidden, widths)) < 0) {
        fprintf(stderr,
                "train_throughput: --hidden takes 1 to %d widths of 1 to %d, such as "
                "4096,4096\n",
                PF_MAX_HIDDEN, PF_MAX_UNITS);
        return 64;
    }
    if (batch_arg < 0 || batch_arg > 1048576) {
        fprintf(stderr, "train_throughput: --batch takes 1 to 1048576\n");
        return 64;
    }
    pf_job_spec spec;
    pf_error err;
    pf_error_clear(&err);
    if (pf_job_spec_load(spec_path, &spec, &err) != PF_OK) {
        fprintf(stderr, "train_throughput: %s: %s %s\n", spec_path, err.pointer, err.message);
        return 65;
    }
    /* One model replica on one device: the ideal below is one device's sgemm rate. */
    spec.replicas_per_worker = 1;
    pf_device_spec *dev = &spec.devices[0];
    if (device && (pf_device_parse(device, &dev->device, &dev->index) != PF_OK ||
                   dev->device == PF_DEVICE_AUTO)) {
        fprintf(stderr, "train_throughput: --device must be cpu, cuda or cuda:N\n");
        pf_job_spec_deinit(&spec);
        return 64;
    }
    pf_session_options opts = {0};
    pf_status st = pf_backend_for_device(dev->device, dev->index, &opts.backend, &err);
    if (st != PF_OK) {
        fprintf(stderr, "train_throughput: %s\n", err.message);
        fprintf(stderr, "train_throughput: no usable GPU: nothing measured\n");
        pf_job_spec_deinit(&spec);
        return 69;
    }
    if (err.message[0])
        fprintf(stderr, "train_throughput: %s\n", err.message);
    const bool gpu = !strcmp(opts.backend->name, "cuda");
    if (gpu && !hidden && spec.model.type == PF_MODEL_MLP) { /* the GPU's default shape */
        n_widths = 2;
        widths[0] = widths[1] = 4096;
    }
    if (gpu && batch_arg == 0)
        batch_arg = 1024;
    if (spec.model.n_embeddings > 0) { /* its ideal is sgemm's rate over dense layers */
        fprintf(stderr, "train_throughput: a model with embeddings is not a dense stack: not "
                        "measured here\n");
        pf_job_spec_deinit(&spec);
        return 64;
    }
    if (n_widths > 0) {
        if (spec.model.type != PF_MODEL_MLP) {
            fprintf(stderr, "train_throughput: --hidden needs an mlp job\n");
            pf_job_spec_deinit(&spec);
            return 64;
        }
        spec.model.n_hidden = n_widths;
        memcpy(spec.model.hidden, widths, sizeof(int) * (size_t)n_widths);
    }
    if (batch_arg > 0)
        spec.training.batch_size = (int)batch_arg;
    pf_session *s;
    if (pf_session_create(&spec, &opts, &s, &err) != PF_OK) {
        fprintf(stderr, "train_throughput: %s\n", err.message);
        return 66;
    }
    const pf_backend *be = pf_session_backend(s);
    int batch = spec.training.batch_size;
    double flops_per_example = pf_model_flops_per_example(&spec.model);
    gemm_shape shapes[3 * PF_MAX_LAYERS];
    int n_shapes = layer_shapes(&spec.model, batch, shapes);

    for (int i = 0; i < 20; i++) /* warm-up: caches, thread pool, page faults */
        pf_session_step(s);
    double base[50], train[50];
    for (long r = 0; r < rounds; r++) {
        double t0 = pf_clock_now();
        /* Each step returns its loss, which waits for the step's work on any backend. */
        for (long i = 0; i < steps; i++)
            pf_session_step(s);
        double t = pf_clock_now() - t0;
        train[r] = (double)steps * batch / t;
        base[r] = sgemm_rate(be, shapes, n_shapes, t);
    }
    double rate = max_of(base, (int)rounds), measured = max_of(train, (int)rounds);
    double rate_median = median(base, (int)rounds), measured_median = median(train, (int)rounds);
    double ideal = rate / flops_per_example;

    printf("train_throughput: job %s, %s, batch %d, backend %s, %ld rounds of %ld steps\n",
           spec.name, pf_model_type_name(spec.model.type), batch, be->name, rounds, steps);
    printf("  model FLOPs per example (6 * sum in*out)  %.3f MFLOP\n", flops_per_example / 1e6);
    printf("  baseline: %-31s%.2f GFLOP/s (best round)\n",
           gpu ? "cuBLAS sgemm, layer shapes" : "sgemm on the layer shapes", rate / 1e9);
    printf("  ideal training rate (baseline / FLOPs)   %.0f examples/s\n", ideal);
    printf(
        "  measured training rate                   %.0f examples/s (%.2f GFLOP/s, best round)\n",
        measured, measured * flops_per_example / 1e9);
    printf("  ratio measured / ideal                   %.2f   (target >= %.2f)\n", measured / ideal,
           gpu ? 0.70 : 0.80);
    printf("  ratio of the medians                     %.2f   (%.0f / %.0f examples/s)\n",
           measured_median / (rate_median / flops_per_example), measured_median,
           rate_median / flops_per_example);
    pf_session_destroy(s);
    pf_job_spec_deinit(&spec);
    return 0;
}
