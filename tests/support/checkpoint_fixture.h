/* checkpoint_fixture.h - what the checkpoint tests share (tests/sharding/test_checkpoint*.c): a
 * temp checkpoint_dir per test, a partitioned MLP over 2 ps tasks, the training state of a
 * step and checkpoints written from it, and file helpers. Failures are cmocka failures.
 */
#ifndef PSFLOW_TESTS_CHECKPOINT_FIXTURE_H
#define PSFLOW_TESTS_CHECKPOINT_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/checkpoint.h"
#include "psflow/optim.h"
#include "psflow/placement.h"
#include "psflow/spec.h"

#define JOB    "ckpt-mlp"
#define MAX_PS 2

extern char fixture_root[64];     /* the test's temp checkpoint_dir */
extern char fixture_job_dir[128]; /* fixture_root/JOB */

/* cmocka setup and teardown: make fixture_root, and remove it with everything in it. */
int fixture_setup(void **state);
int fixture_teardown(void **state);

/* A 5-4-3 MLP, every variable split in 2 (fixed_shards), placed on 2 ps tasks. */
void make_spec(const char *optimizer, pf_job_spec *spec, pf_placement *pl);

/* The "training state" at a step: a flat parameter vector and slot vectors that differ per
 * step, element and slot. */
typedef struct state_vectors {
    size_t n;
    float *params;
    float *slots[PF_OPTIM_MAX_SLOTS];
} state_vectors;

/* Local shards of ps task `ps`, in local order, with pointers into the state vectors. */
typedef struct local_shards {
    int n;
    pf_shard_info info[8];
    const float *values[8];
    const float *slot_rows[8][PF_OPTIM_MAX_SLOTS];
    const float *const *slots[8];
} local_shards;

/* The state at `step` (free_state frees it). */
void make_state(const pf_job_spec *spec, int64_t step, state_vectors *s);
void free_state(state_vectors *s);

void local_of(const pf_placement *pl, int ps, const state_vectors *s, local_shards *l);

/* The folder of `step` under fixture_root. */
void step_dir_of(int64_t step, char *dir, size_t len);

/* Every ps writes its file for `step`; with `manifest` the chief then commits it. */
void write_checkpoint(const pf_job_spec *spec, const pf_placement *pl, int64_t step, bool manifest);

/* The path of file `name` in the folder of `step`. */
void file_path(int64_t step, const char *name, char *path, size_t len);

bool exists(const char *path);

/* The whole file at path, NUL-terminated (pf_free it). */
unsigned char *slurp(const char *path, size_t *len);

/* Writes len bytes of data to path, replacing it. */
void spill(const char *path, const void *data, size_t len);

/* The newest complete step pf_checkpoint_find_latest finds with flags (checking the folder it
 * names), or -1 when there is none. */
int64_t latest(unsigned flags);

#endif
