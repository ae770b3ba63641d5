/* towers.c - a worker's in-graph replicas (see towers.h).
 *
 * DESIGN: every replica owns a model and its backend buffers (parameters, gradient, one
 * slice of the batch), allocated once on the thread that drives the replica. A step is a
 * round: the calling thread publishes the step's host inputs under the lock, bumps `round`
 * and wakes the replica threads; each uploads the parameters and its slice, runs forward and
 * backward and downloads its gradient into its own host buffer, then counts itself done.
 * Replica 0 does the same on the calling thread meanwhile, straight into the caller's
 * gradient buffer. When every replica is done, the calling thread adds the others' gradients
 * to replica 0's in replica order and scales by 1/K, the way a ps averages the gradients of
 * its workers in task order: the result does not depend on which replica finished first.
 * Nothing is allocated per step. With one replica no thread is started and a step is just
 * replica 0's upload, forward/backward and download. On a backend whose buffers are host
 * memory (the CPU backends) a replica reads the caller's parameters and writes its gradient
 * in place, with no backend copy of either: a worker holds the model's values once and its
 * gradient once (plus one gradient per further replica).
 */
#include "psflow/towers.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "psflow/mem.h"
#include "psflow/model.h"

typedef struct tower {
    struct pf_towers *set;
    int r;
    pf_device_spec device;
    bool started; /* a thread runs it (r >= 1) */
    pthread_t thread;
    /* set up on the replica's thread */
    const pf_backend *be;
    pf_model *model;
    float *d_params, *d_grads, *d_x, *d_y; /* backend memory */
    int32_t *d_labels;
    float *grads; /* host [n_params]: this replica's gradient (r >= 1) */
    pf_status setup_status;
    pf_error setup_err;
    float loss; /* of the latest step */
} tower;

struct pf_towers {
    int k, batch, inputs;
    bool classifier;
    size_t n_params;
    pf_model_spec model;
    const pf_backend *backend; /* every replica's, or NULL for the spec's devices */
    bool shares_blas;          /* pf_backend_openblas_share(k) is in effect */

    pthread_mutex_t lock;
    pthread_cond_t go;   /* round changed or quit set */
    pthread_cond_t done; /* busy reached 0 */
    uint64_t round;      /* steps handed to the replica threads */
    int busy;            /* replica threads setting up or working on the round */
    bool quit;
    /* The round's inputs (host), read by the replica threads while busy. */
    const float *params, *x, *targets;
    const int32_t *labels;
    float *grads; /* replica 0's output */

    tower towers[PF_MAX_REPLICAS_PER_WORKER];
};

/* Runs on the replica's thread: its backend (on a GPU, making the GPU this thread's), model
 * and buffers. */
static pf_status tower_setup(tower *w) {
    pf_towers *t = w->set;
    pf_status st;
    const pf_backend *be = t->backend;
    if (!be && (st = pf_backend_for_device(w->device.device, w->device.index, &be,
                                           &w->setup_err)) != PF_OK)
        return st;
    pf_error_clear(&w->setup_err);
    w->be = be;
    size_t b = (size_t)t->batch;
    if (pf_model_create(&t->model, be, t->batch, &w->model) == PF_OK) {
        if (!be->host_memory) { /* a host backend reads and writes the host vectors */
            w->d_params = be->alloc(t->n_params * sizeof(float));
            w->d_grads = be->alloc(t->n_params * sizeof(float));
        }
        w->d_x = be->alloc(b * (size_t)t->inputs * sizeof(float));
        w->d_y = be->alloc(b * sizeof(float));
        w->d_labels = be->alloc(b * sizeof(int32_t));
        if (w->r > 0)
            w->grads = pf_mallocarray(t->n_params, sizeof(float));
    }
    if (!w->model || (!be->host_memory && (!w->d_params || !w->d_grads)) || !w->d_x || !w->d_y ||
        !w->d_labels || (w->r > 0 && !w->grads))
        return pf_error_set(&w->setup_err, PF_ERR_NOMEM, NULL,
                            "replica %d: out of memory for the model on %s", w->r, be->name);
    return PF_OK;
}

/* Runs on the replica's thread, which allocated what it frees. */
static void tower_teardown(tower *w) {
    if (w->be) {
        void *bufs[] = {w->d_params, w->d_grads, w->d_x, w->d_y, w->d_labels};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i])
                w->be->free(bufs[i]);
    }
    pf_model_destroy(w->model);
    pf_free(w->grads);
}

/* One replica's part of a round: the gradient of its slice at the round's parameters. */
static void tower_step(tower *w) {
    pf_towers *t = w->set;
    const pf_backend *be = w->be;
    const size_t b = (size_t)t->batch, first = (size_t)w->r * b;
    float *grads = w->r == 0 ? t->grads : w->grads;
    be->upload(w->d_x, t->x + first * (size_t)t->inputs, b * (size_t)t->inputs);
    if (t->classifier)
        be->upload_i32(w->d_labels, t->labels + first, b);
    else
        be->upload(w->d_y, t->targets + first, b);
    if (be->host_memory) { /* no copies of the parameters or the gradient */
        w->loss =
            pf_model_train_step(w->model, t->params, w->d_x, w->d_y, w->d_labels, t->batch, grads);
        return;
    }
    be->upload(w->d_params, t->params, t->n_params);
    w->loss = pf_model_train_step(w->model, w->d_params, w->d_x, w->d_y, w->d_labels, t->batch,
                                  w->d_grads);
    be->download(grads, w->d_grads, t->n_params);
}

/* Counts the calling replica thread out of the current round (or of the setup). */
static void finish(pf_towers *t) {
    if (--t->busy == 0)
        pthread_cond_signal(&t->done);
}

static void *tower_main(void *arg) {
    tower *w = arg;
    pf_towers *t = w->set;
    w->setup_status = tower_setup(w);
    pthread_mutex_lock(&t->lock);
    uint64_t seen = t->round;
    finish(t);
    for (;;) {
        while (!t->quit && t->round == seen)
            pthread_cond_wait(&t->go, &t->lock);
        if (t->quit)
            break;
        seen = t->round;
        pthread_mutex_unlock(&t->lock);
        tower_step(w);
        pthread_mutex_lock(&t->lock);
        finish(t);
    }
    pthread_mutex_unlock(&t->lock);
    tower_teardown(w);
    return NULL;
}

/* Waits until no replica thread is busy. */
static void wait_idle(pf_towers *t) {
    pthread_mutex_lock(&t->lock);
    while (t->busy > 0)
        pthread_cond_wait(&t->done, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

pf_status pf_towers_create(const pf_job_spec *spec, const pf_backend *backend, pf_towers **out,
                           pf_error *err) {
    *out = NULL;
    pf_error_clear(err);
    const int k = spec->replicas_per_worker;
    if (k < 1 || k > PF_MAX_REPLICAS_PER_WORKER)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%d in-graph replicas: 1 to %d allowed", k,
                            PF_MAX_REPLICAS_PER_WORKER);
    pf_towers *t = pf_calloc(1, sizeof *t);
    if (!t)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    t->k = k;
    t->batch = spec->training.batch_size;
    t->inputs = pf_model_input_width(&spec->model);
    t->classifier = spec->model.type != PF_MODEL_LINEAR;
    t->n_params = pf_model_num_params(&spec->model);
    t->model = spec->model;
    t->backend = backend;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->go, NULL);
    pthread_cond_init(&t->done, NULL);

    bool cpu = true;
    for (int r = 0; r < k; r++) {
        t->towers[r] = (tower){.set = t, .r = r, .device = spec->devices[r]};
        cpu = cpu && spec->devices[r].device == PF_DEVICE_CPU;
    }
    if (k > 1 && (cpu || backend)) { /* K CPU replicas at once: share the cores */
        pf_backend_openblas_share(k);
        t->shares_blas = true;
    }

    pf_status st = PF_OK;
    for (int r = 1; r < k && st == PF_OK; r++) {
        tower *w = &t->towers[r];
        pthread_mutex_lock(&t->lock);
        t->busy++;
        pthread_mutex_unlock(&t->lock);
        if (pthread_create(&w->thread, NULL, tower_main, w) != 0) {
            pthread_mutex_lock(&t->lock);
            t->busy--;
            pthread_mutex_unlock(&t->lock);
            st = pf_error_set(err, PF_ERR_NOMEM, NULL, "replica %d: cannot start its thread", r);
        } else {
            w->started = true;
        }
    }
    t->towers[0].setup_status = tower_setup(&t->towers[0]);
    wait_idle(t);
    for (int r = 0; r < k && st == PF_OK; r++) {
        if (t->towers[r].setup_status != PF_OK) {
            st = t->towers[r].setup_status;
            if (err)
                *err = t->towers[r].setup_err;
        }
    }
    if (st != PF_OK) {
        pf_towers_destroy(t);
        return st;
    }
    *out = t;
    return PF_OK;
}

void pf_towers_destroy(pf_towers *t) {
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->quit = true;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->lock);
    for (int r = 1; r < t->k; r++)
        if (t->towers[r].started)
            pthread_join(t->towers[r].thread, NULL);
    tower_teardown(&t->towers[0]);
    if (t->shares_blas)
        pf_backend_openblas_share(1);
    pthread_cond_destroy(&t->done);
    pthread_cond_destroy(&t->go);
    pthread_mutex_destroy(&t->lock);
    pf_free(t);
}

float pf_towers_gradient(pf_towers *t, const float *params, const float *x, const float *targets,
                         const int32_t *labels, float *grads) {
    pthread_mutex_lock(&t->lock);
    t->params = params;
    t->x = x;
    t->targets = targets;
    t->labels = labels;
    t->grads = grads;
    if (t->k > 1) {
        t->busy = t->k - 1;
        t->round++;
        pthread_cond_broadcast(&t->go);
    }
    pthread_mutex_unlock(&t->lock);
    tower_step(&t->towers[0]);
    if (t->k == 1)
        return t->towers[0].loss;
    wait_idle(t);

    /* Replica order, then 1/K: as a ps averages its workers' gradients. */
    double loss = t->towers[0].loss;
    for (int r = 1; r < t->k; r++) {
        const float *g = t->towers[r].grads;
        for (size_t i = 0; i < t->n_params; i++)
            grads[i] += g[i];
        loss += t->towers[r].loss;
    }
    const float inv = 1.0f / (float)t->k;
    for (size_t i = 0; i < t->n_params; i++)
        grads[i] *= inv;
    return (float)(loss / t->k);
}

int pf_towers_count(const pf_towers *t) {
    return t->k;
}

const pf_backend *pf_towers_backend(const pf_towers *t, int r) {
    return r >= 0 && r < t->k ? t->towers[r].be : NULL;
}
