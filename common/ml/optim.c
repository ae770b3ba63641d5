/* optim.c - TensorFlow's optimizers over one contiguous range of parameters (optim.h).
 *
 * The arithmetic lives in the backend's *_step ops; this file picks the op, works out the
 * learning rate for the global step (exponential decay, adam's bias correction) in double,
 * and names and initialises the slots.
 */
#include "psflow/optim.h"

#include <assert.h>
#include <math.h>

#include "psflow/mem.h"
#include "psflow/model.h" /* pf_first_nonfinite */

/* Every optimizer's slots: TensorFlow's slot names (tf.compat.v1.train's get_slot_names())
 * and the suffixes of its slot variables, which name them in checkpoints. */
static const pf_optim_slots slot_table[] = {
    [PF_OPT_SGD] = {"sgd", 0, {NULL, NULL}, {NULL, NULL}},
    [PF_OPT_MOMENTUM] = {"momentum", 1, {"momentum", NULL}, {"Momentum", NULL}},
    [PF_OPT_ADAGRAD] = {"adagrad", 1, {"accumulator", NULL}, {"Adagrad", NULL}},
    [PF_OPT_ADAM] = {"adam", 2, {"m", "v"}, {"Adam", "Adam_1"}},
    /* LazyAdamOptimizer is an AdamOptimizer: the same slots under the same names */
    [PF_OPT_LAZY_ADAM] = {"lazy_adam", 2, {"m", "v"}, {"Adam", "Adam_1"}},
};

const pf_optim_slots *pf_optim_slots_of(const pf_optimizer_spec *spec) {
    size_t t = (size_t)spec->type;
    return t < sizeof slot_table / sizeof slot_table[0] ? &slot_table[t] : &slot_table[PF_OPT_SGD];
}

int pf_optim_num_slots(const pf_optimizer_spec *spec) {
    return pf_optim_slots_of(spec)->n;
}

const char *pf_optim_slot_name(const pf_optimizer_spec *spec, int i) {
    const pf_optim_slots *s = pf_optim_slots_of(spec);
    return i >= 0 && i < s->n ? s->name[i] : NULL;
}

void pf_optim_slot_init(const pf_optimizer_spec *spec, const pf_backend *be, int i, float *slot,
                        size_t n) {
    if (i < 0 || i >= pf_optim_num_slots(spec) || n == 0)
        return;
    float value = spec->type == PF_OPT_ADAGRAD ? (float)spec->initial_accumulator_value : 0.0f;
    be->fill(slot, value, n);
}

/* floor(a / b) for b >= 1; C's division truncates toward zero instead. */
static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

double pf_optim_learning_rate(const pf_optimizer_spec *spec, int64_t global_step) {
    const pf_decay_spec *d = &spec->decay;
    if (!d->enabled)
        return spec->learning_rate;
    assert(d->decay_steps >= 1);
    double p = d->staircase ? (double)floor_div(global_step, d->decay_steps)
                            : (double)global_step / (double)d->decay_steps;
    return spec->learning_rate * pow(d->decay_rate, p);
}

pf_optim_step pf_optim_prepare(const pf_optimizer_spec *spec, int64_t global_step) {
    double lr = pf_optim_learning_rate(spec, global_step);
    pf_optim_step o = {.type = spec->type, .lr = (float)lr};
    switch (spec->type) {
    case PF_OPT_SGD:
    case PF_OPT_ADAGRAD:
        break;
    case PF_OPT_MOMENTUM:
        o.momentum = (float)spec->momentum;
        break;
    case PF_OPT_ADAM:
    case PF_OPT_LAZY_ADAM: {
        /* Bias correction for update t = global_step + 1 (TF's beta powers after t steps).
         * The powers use the float betas the kernel uses, so that 1 - beta2 in v and
         * 1 - beta2^t here agree (0.999f is 1.3e-5 off 0.999 relative to 1 - 0.999). */
        o.beta1 = (float)spec->beta1;
        o.beta2 = (float)spec->beta2;
        o.epsilon = (float)spec->epsilon;
        double t = (double)global_step + 1.0;
        o.lr = (float)(lr * sqrt(1.0 - pow(o.beta2, t)) / (1.0 - pow(o.beta1, t)));
        break;
    }
    }
    return o;
}

void pf_optim_step_apply(const pf_optim_step *o, const pf_backend *be, size_t n, const float *g,
                         float *w, float *const *slots) {
    if (n == 0)
        return;
    switch (o->type) {
    case PF_OPT_SGD:
        be->sgd_step(n, o->lr, g, w);
        return;
    case PF_OPT_MOMENTUM:
        be->momentum_step(n, o->lr, o->momentum, g, w, slots[0]);
        return;
    case PF_OPT_ADAGRAD:
        be->adagrad_step(n, o->lr, g, w, slots[0]);
        return;
    case PF_OPT_ADAM:
    case PF_OPT_LAZY_ADAM:
        be->adam_step(n, o->lr, o->beta1, o->beta2, o->epsilon, g, w, slots[0], slots[1]);
        return;
    }
}

void pf_optim_apply(const pf_optimizer_spec *spec, const pf_backend *be, int64_t global_step,
                    size_t n, const float *g, float *w, float *const *slots) {
    if (n == 0)
        return;
    pf_optim_step o = pf_optim_prepare(spec, global_step);
    pf_optim_step_apply(&o, be, n, g, w, slots);
}

bool pf_optim_rows_only(const pf_optimizer_spec *spec) {
    return spec->type != PF_OPT_ADAM;
}

size_t pf_optim_apply_rows(const pf_optimizer_spec *spec, const pf_backend *be, int64_t global_step,
                           size_t width, size_t n_rows, const uint32_t *rows, const float *g,
                           float *w, float *const *slots, bool check) {
    assert(!check || be->host_memory);
    pf_optim_step o = pf_optim_prepare(spec, global_step); /* once, not per row */
    int n_slots = pf_optim_num_slots(spec);
    size_t bad = n_rows;
    for (size_t j = 0; j < n_rows; j++) {
        if (be->host_memory && j + PF_PREFETCH_ROWS < n_rows) {
            size_t ahead = (size_t)rows[j + PF_PREFETCH_ROWS] * width;
            pf_prefetch_write(w + ahead, width * sizeof *w);
            for (int k = 0; k < n_slots; k++)
                pf_prefetch_write(slots[k] + ahead, width * sizeof *w);
        }
        size_t at = (size_t)rows[j] * width;
        float *row_slots[PF_OPTIM_MAX_SLOTS] = {NULL, NULL};
        for (int k = 0; k < n_slots; k++)
            row_slots[k] = slots[k] + at;
        pf_optim_step_apply(&o, be, width, g + j * width, w + at, row_slots);
        size_t back = j - PF_OPTIM_CHECK_LAG; /* updated a few rows ago, still in cache */
        if (check && bad == n_rows && j >= PF_OPTIM_CHECK_LAG &&
            pf_first_nonfinite(w + (size_t)rows[back] * width, width) < width)
            bad = back;
    }
    size_t j = n_rows > PF_OPTIM_CHECK_LAG ? n_rows - PF_OPTIM_CHECK_LAG : 0;
    for (; check && bad == n_rows && j < n_rows; j++) /* the last few */
        if (pf_first_nonfinite(w + (size_t)rows[j] * width, width) < width)
            bad = j;
    return bad;
}
