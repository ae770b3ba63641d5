/* ps_checkpoint.c - a ps task's shards into its checkpoint file and back (see ps_checkpoint.h). */
#include "ps/ps_checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "psflow/checkpoint.h"
#include "psflow/clock.h"
#include "psflow/mem.h"
#include "psflow/optim.h"

/* Testing aid: with PSFLOW_TEST_PAUSE_CHECKPOINT=<step> in its environment, a ps about to
 * write its file of checkpoint <step> leaves a marker `.paused-ps-<task>` in the step's
 * folder and stops there for good, so a test can kill it in the middle of a checkpoint
 * without guessing a moment. Never set outside tests. */
static void test_pause(const char *dir, int task, uint64_t step) {
    const char *e = getenv("PSFLOW_TEST_PAUSE_CHECKPOINT");
    char *end;
    if (!e || !*e || strtoull(e, &end, 10) != step || *end)
        return;
    char marker[2100];
    snprintf(marker, sizeof marker, "%s/.paused-ps-%d", dir, task);
    mkdir(dir, 0755);
    FILE *f = fopen(marker, "w");
    if (f)
        fclose(f);
    fprintf(stderr, "psflow ps %d: PSFLOW_TEST_PAUSE_CHECKPOINT: paused writing step %" PRIu64 "\n",
            task, step);
    for (;;)
        pf_clock_sleep(3600); /* until killed */
}

pf_status ps_checkpoint_write(const ps_shards *shards, const pf_job_spec *spec, int task,
                              const char *checkpoint_dir, uint64_t step, const char *input_queue,
                              char *path, size_t len, pf_error *err) {
    char dir[2048];
    pf_status st =
        pf_checkpoint_step_dir(checkpoint_dir, spec->name, (int64_t)step, dir, sizeof dir);
    if (st != PF_OK)
        return pf_error_set(err, st, NULL, "checkpoint path too long");
    /* The arguments pf_checkpoint_write_ps takes: pointers into the shards, local order. */
    int n = ps_shards_count(shards);
    const pf_optim_slots *optim = pf_optim_slots_of(&spec->optimizer);
    const float **values = pf_calloc((size_t)(n ? n : 1), sizeof *values);
    const float **slot_ptrs =
        pf_calloc((size_t)(n ? n : 1) * PF_OPTIM_MAX_SLOTS, sizeof *slot_ptrs);
    const float *const **slots = pf_calloc((size_t)(n ? n : 1), sizeof *slots);
    pf_shard_info *info = pf_calloc((size_t)(n ? n : 1), sizeof *info);
    if (!values || !slot_ptrs || !slots || !info) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        info[i] = *ps_shards_info(shards, i);
        values[i] = ps_shards_values(shards, i);
        for (int k = 0; k < optim->n; k++)
            slot_ptrs[i * PF_OPTIM_MAX_SLOTS + k] = ps_shards_slot(shards, i, k);
        slots[i] = slot_ptrs + i * PF_OPTIM_MAX_SLOTS;
    }
    pf_checkpoint_shards sh = {n, info, values, optim->n ? slots : NULL, input_queue};
    test_pause(dir, task, step);
    st = pf_checkpoint_write_ps(dir, task, ps_shards_stats(shards).version, spec, optim, &sh, path,
                                len, NULL, err);
done:
    pf_free(values);
    pf_free(slot_ptrs);
    pf_free(slots);
    pf_free(info);
    return st;
}

/* A copy of the shards' descriptions, local order (what loading a file checks against);
 * NULL when out of memory. */
static pf_shard_info *shard_infos(const ps_shards *shards) {
    int n = ps_shards_count(shards);
    pf_shard_info *info = pf_calloc((size_t)(n ? n : 1), sizeof *info);
    for (int i = 0; info && i < n; i++)
        info[i] = *ps_shards_info(shards, i);
    return info;
}

/* Loads ps `task`'s shards from the checkpoint in step_dir once the whole checkpoint checks
 * out: every file the manifest lists has its size and CRC-32. A checkpoint written by
 * another number of ps tasks or another partitioning is reassembled from the slices its
 * files hold; *from_ps is then the number of ps tasks that wrote it, else 0. */
static pf_status load_verified(const char *step_dir, const pf_job_spec *spec, int task,
                               const ps_shards *shards, pf_checkpoint_ps **out, int *from_ps,
                               pf_error *err) {
    *from_ps = 0;
    pf_checkpoint_manifest m;
    pf_status st = pf_checkpoint_manifest_read(step_dir, &m, err);
    if (st != PF_OK)
        return st;
    int num_ps = m.num_ps;
    st = pf_checkpoint_verify(step_dir, &m, PF_CKPT_VERIFY_CRC, err);
    pf_checkpoint_manifest_deinit(&m);
    if (st != PF_OK)
        return st;
    int n = ps_shards_count(shards);
    pf_shard_info *info = shard_infos(shards);
    if (!info)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    const pf_optim_slots *optim = pf_optim_slots_of(&spec->optimizer);
    st = PF_ERR_FORMAT;
    if (num_ps == spec->replicas.ps) {
        pf_error same;
        pf_error_clear(&same);
        st = pf_checkpoint_load_ps(step_dir, task, info, n, optim, out, &same);
        if (st != PF_OK && st != PF_ERR_FORMAT && st != PF_ERR_NOT_FOUND)
            pf_error_set(err, st, NULL, "%s", same.message);
    }
    /* Another number of ps tasks, or the same under another partitioning: reassembled
     * from the slices the files hold. */
    if (st == PF_ERR_FORMAT || st == PF_ERR_NOT_FOUND) {
        st = pf_checkpoint_load_repartitioned(step_dir, spec, info, n, optim, out, err);
        if (st == PF_OK)
            *from_ps = num_ps;
    }
    pf_free(info);
    return st;
}

/* A copy of the input queue's state c holds (NULL: none, or out of memory, said). */
static char *input_queue_of(const pf_checkpoint_ps *c, int task) {
    const char *q = pf_checkpoint_ps_input_queue(c);
    char *copy = q ? pf_strdup(q) : NULL;
    if (q && !copy)
        fprintf(stderr, "psflow ps %d: out of memory for the input queue's state\n", task);
    return copy;
}

pf_status ps_checkpoint_restore(ps_shards *shards, const pf_job_spec *spec, int task,
                                const char *checkpoint_dir, char **input_queue, char *note,
                                size_t len, pf_error *err) {
    char job_dir[2048], step_dir[2048];
    *input_queue = NULL;
    int64_t step;
    if (pf_checkpoint_job_dir(checkpoint_dir, spec->name, job_dir, sizeof job_dir) != PF_OK)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    int n = ps_shards_count(shards);
    /* The newest complete checkpoint that verifies; each bad one is set aside (renamed,
     * never deleted), so every round looks at an older one. */
    pf_checkpoint_ps *c = NULL;
    int set_aside = 0, from_ps = 0;
    pf_status st;
    for (;;) {
        st = pf_checkpoint_find_latest(job_dir, 0, &step, step_dir, sizeof step_dir, err);
        if (st != PF_OK)
            break;
        pf_error bad;
        pf_error_clear(&bad);
        st = load_verified(step_dir, spec, task, shards, &c, &from_ps, &bad);
        if (st == PF_OK || st == PF_ERR_NOMEM) {
            if (st != PF_OK)
                pf_error_set(err, st, NULL, "%s", bad.message);
            break;
        }
        char aside[2048 + 64];
        pf_error e2;
        pf_error_clear(&e2);
        pf_status sa = pf_checkpoint_set_aside(step_dir, aside, sizeof aside, &e2);
        if (sa == PF_ERR_NOT_FOUND) { /* another ps set it aside first */
            fprintf(stderr, "psflow ps %d: checkpoint %s is bad (%s); already set aside\n", task,
                    step_dir, bad.message);
        } else if (sa != PF_OK) {
            st =
                pf_error_set(err, sa, NULL, "checkpoint %s is bad (%s) and cannot be set aside: %s",
                             step_dir, bad.message, e2.message);
            break;
        } else {
            fprintf(stderr,
                    "psflow ps %d: checkpoint %s is bad (%s); set aside as %s, trying the next "
                    "older one\n",
                    task, step_dir, bad.message, aside);
        }
        set_aside++;
    }
    if (st == PF_ERR_NOT_FOUND) {
        snprintf(note, len, "no %scheckpoint under %s%s: starting from the initial values",
                 set_aside ? "good " : "", job_dir, set_aside ? " (bad ones set aside)" : "");
        return PF_OK;
    }
    if (st != PF_OK)
        return st;
    ps_shards_restore(shards, pf_checkpoint_ps_version(c), pf_checkpoint_ps_values(c),
                      pf_checkpoint_ps_slots(c));
    /* The checksum is over the values this ps will now serve, in local shard order, so an
     * operator (or a test) can compare them with the checkpoint file. */
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < n; i++)
        crc = crc32(crc, (const Bytef *)ps_shards_values(shards, i),
                    (uInt)(ps_shards_info(shards, i)->count * sizeof(float)));
    char from[96] = "";
    if (from_ps)
        snprintf(from, sizeof from, "; repartitioned from a checkpoint of %d ps task%s", from_ps,
                 from_ps == 1 ? "" : "s");
    snprintf(note, len,
             "restored from %s (step %lld, version %" PRIu64
             ", values crc32 %08lx; every file's size and CRC-32 verified%s%s)",
             step_dir, (long long)step, pf_checkpoint_ps_version(c), (unsigned long)crc,
             set_aside ? ", after setting bad ones aside" : "", from);
    *input_queue = input_queue_of(c, task);
    pf_checkpoint_ps_destroy(c);
    return PF_OK;
}

pf_status ps_checkpoint_restore_step(ps_shards *shards, const pf_job_spec *spec, int task,
                                     const char *checkpoint_dir, uint64_t step, char **input_queue,
                                     char *note, size_t len, pf_error *err) {
    char step_dir[2048];
    *input_queue = NULL;
    if (pf_checkpoint_step_dir(checkpoint_dir, spec->name, (int64_t)step, step_dir,
                               sizeof step_dir) != PF_OK)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    pf_checkpoint_ps *c = NULL;
    int from_ps = 0;
    pf_status st = load_verified(step_dir, spec, task, shards, &c, &from_ps, err);
    if (st != PF_OK)
        return st;
    ps_shards_restore(shards, pf_checkpoint_ps_version(c), pf_checkpoint_ps_values(c),
                      pf_checkpoint_ps_slots(c));
    snprintf(note, len, "restored %s (step %" PRIu64 ", version %" PRIu64 ", verified%s)", step_dir,
             step, pf_checkpoint_ps_version(c), from_ps ? ", repartitioned" : "");
    *input_queue = input_queue_of(c, task);
    pf_checkpoint_ps_destroy(c);
    return PF_OK;
}
