/* versions.h - the model versions a serving process holds: the newest verified checkpoint of a
 * job, loaded beside the one that serves and switched in atomically.
 *
 * A version is a checkpoint's step and the model's whole parameter vector (host memory).
 * serve_versions_refresh looks under the job's checkpoint folder for complete checkpoints
 * newer than the serving one, newest first, and loads the first that passes: its manifest,
 * every file's size and CRC-32 (pf_checkpoint_merge), every variable of the model with its
 * shape, every value finite. One that fails is refused once (logged with the reason and
 * never tried again) and the serving version keeps answering. The switch is a pointer swap
 * under a mutex; a batch that acquired the old version finishes on it, and the old one is
 * freed when its last user releases it.
 *
 * Thread-safe.
 */
#ifndef PSFLOW_SERVE_VERSIONS_H
#define PSFLOW_SERVE_VERSIONS_H

#include <stdint.h>

#include "psflow/spec.h"
#include "psflow/status.h"

typedef struct serve_version {
    int64_t step;
    const float *params; /* [pf_model_num_params] */
} serve_version;

typedef struct serve_versions serve_versions;

/* job_dir: "<checkpoint root>/<job>"; it may not exist yet. log: prefix of the lines written
 * to stderr ("psflow serve"). PF_ERR_NOMEM. */
pf_status serve_versions_create(const pf_model_spec *model, const char *job_dir, const char *log,
                                serve_versions **out);
void serve_versions_destroy(serve_versions *v);

/* Loads and switches to a newer verified checkpoint when there is one. Returns 1 when it
 * switched, 0 when nothing newer passed (or there is none), -1 when memory ran out. */
int serve_versions_refresh(serve_versions *v);

/* The serving version, or NULL before the first load; release it after use. */
const serve_version *serve_versions_acquire(serve_versions *v);
void serve_versions_release(serve_versions *v, const serve_version *version);

/* The serving step (-1 before the first load), the loads that switched and the checkpoints
 * refused so far. */
void serve_versions_counts(serve_versions *v, int64_t *step, int64_t *loaded, int64_t *refused);

#endif
