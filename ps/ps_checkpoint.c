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
#include "psflow/dyn_batch.h"
#include "psflow/dyn_checkpoint.h"
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

/* The dynamic tables' tensors of the shards (dyn_checkpoint.h) into snaps[0 .. n) (an entry
 * per local shard, empty for the others) and their views into extra, *n_extra of them. */
static pf_status take_dynamic(const ps_shards *shards, const pf_job_spec *spec,
                              pf_dyn_snapshot *snaps, pf_tensor_view *extra, int *n_extra,
                              pf_error *err) {
    pf_var_info vars[PF_MAX_VARS];
    pf_model_layout(&spec->model, vars);
    const pf_optim_slots *optim = pf_optim_slots_of(&spec->optimizer);
    *n_extra = 0;
    for (int i = 0; i < ps_shards_count(shards); i++) {
        if (!ps_shards_is_dynamic(shards, i))
            continue;
        const char *var = vars[ps_shards_info(shards, i)->var].name;
        pf_status st = pf_dyn_snapshot_take(ps_shards_dyn_table(shards, i), var, optim->variable,
                                            &snaps[i], err);
        if (st != PF_OK)
            return st;
        for (int k = 0; k < snaps[i].n; k++)
            extra[(*n_extra)++] = snaps[i].views[k];
    }
    return PF_OK;
}

pf_status ps_checkpoint_write(const ps_shards *shards, const pf_job_spec *spec, int task,
                              const char *checkpoint_dir, uint64_t step, const char *input_queue,
                              char *path, size_t len, pf_error *err) {
    char dir[2048];
    pf_status st =
        pf_checkpoint_step_dir(checkpoint_dir, spec->name, (int64_t)step, dir, sizeof dir);
    if (st != PF_OK)
        return pf_error_set(err, st, NULL, "checkpoint path too long");
    /* The arguments pf_checkpoint_write_ps takes: pointers into the shards, local order; a
     * dynamic table's shard as the tensors of its rows. */
    int n = ps_shards_count(shards);
    size_t nn = (size_t)(n ? n : 1);
    const pf_optim_slots *optim = pf_optim_slots_of(&spec->optimizer);
    const float **values = pf_calloc(nn, sizeof *values);
    const float **slot_ptrs = pf_calloc(nn * PF_OPTIM_MAX_SLOTS, sizeof *slot_ptrs);
    const float *const **slots = pf_calloc(nn, sizeof *slots);
    pf_shard_info *info = pf_calloc(nn, sizeof *info);
    pf_dyn_snapshot *snaps = pf_calloc(nn, sizeof *snaps);
    pf_tensor_view *extra = pf_calloc(nn * PF_DYN_CKPT_TENSORS, sizeof *extra);
    int m = 0, n_extra = 0;
    if (!values || !slot_ptrs || !slots || !info || !snaps || !extra) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        if (ps_shards_is_dynamic(shards, i))
            continue;
        info[m] = *ps_shards_info(shards, i);
        values[m] = ps_shards_values(shards, i);
        for (int k = 0; k < optim->n; k++)
            slot_ptrs[m * PF_OPTIM_MAX_SLOTS + k] = ps_shards_slot(shards, i, k);
        slots[m] = slot_ptrs + m * PF_OPTIM_MAX_SLOTS;
        m++;
    }
    if ((st = take_dynamic(shards, spec, snaps, extra, &n_extra, err)) != PF_OK) {
        if (st == PF_ERR_NONFINITE) { /* as the writer says of a shard */
            char why[sizeof err->message];
            snprintf(why, sizeof why, "%s", err->message);
            pf_error_set(err, st, NULL, "ps %d: not writing a checkpoint of version %llu: %s", task,
                         (unsigned long long)ps_shards_stats(shards).version, why);
        }
        goto done;
    }
    pf_checkpoint_shards sh = {m,           info,    values, optim->n ? slots : NULL,
                               input_queue, n_extra, extra};
    test_pause(dir, task, step);
    st = pf_checkpoint_write_ps(dir, task, ps_shards_stats(shards).version, spec, optim, &sh, path,
                                len, NULL, err);
done:
    for (int i = 0; snaps && i < n; i++)
        pf_dyn_snapshot_free(&snaps[i]);
    pf_free(snaps);
    pf_free(extra);
    pf_free(values);
    pf_free(slot_ptrs);
    pf_free(slots);
    pf_free(info);
    return st;
}

/* What a restore puts in place: the fixed shards' values and slots (local order, NULL for a
 * dynamic table's shard) and each dynamic shard's new table. */
typedef struct restored {
    pf_checkpoint_ps *c; /* the fixed shards, in the order of their descriptions */
    int n;               /* local shards */
    const float **values;
    const float **slot_ptrs;
    const float *const **slots;
    pf_dyn_table **tables; /* [n]: a dynamic shard's, else NULL */
} restored;

static void restored_free(restored *r) {
    pf_checkpoint_ps_destroy(r->c);
    for (int i = 0; r->tables && i < r->n; i++)
        pf_dyn_destroy(r->tables[i]);
    pf_free(r->tables);
    pf_free(r->values);
    pf_free(r->slot_ptrs);
    pf_free(r->slots);
    memset(r, 0, sizeof *r);
}

/* Puts r in place (the tables handed over) and frees it. */
static void restored_apply(ps_shards *shards, restored *r) {
    ps_shards_restore(shards, pf_checkpoint_ps_version(r->c), r->values, r->slots);
    for (int i = 0; i < r->n; i++)
        if (r->tables[i]) {
            ps_shards_dyn_replace(shards, i, r->tables[i]);
            r->tables[i] = NULL;
        }
    restored_free(r);
}

/* The descriptions of the shards that are no dynamic table's, local order (what loading a
 * file checks against); NULL when out of memory. *m receives their number. */
static pf_shard_info *shard_infos(const ps_shards *shards, int *m) {
    int n = ps_shards_count(shards);
    pf_shard_info *info = pf_calloc((size_t)(n ? n : 1), sizeof *info);
    *m = 0;
    for (int i = 0; info && i < n; i++)
        if (!ps_shards_is_dynamic(shards, i))
            info[(*m)++] = *ps_shards_info(shards, i);
    return info;
}

/* Restores each dynamic table of the shards from the checkpoint in step_dir, written by
 * num_ps tasks, into r->tables: from this task's file alone when the number of ps tasks is
 * the same, else from every file (dyn_checkpoint.h repartitions). */
static pf_status load_dynamic(const char *step_dir, const pf_job_spec *spec, int task, int num_ps,
                              const ps_shards *shards, restored *r, pf_error *err) {
    int n_ps = spec->replicas.ps, same = num_ps == n_ps;
    pf_safetensors **files = pf_calloc((size_t)num_ps, sizeof *files);
    if (!files)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    pf_var_info vars[PF_MAX_VARS];
    pf_model_layout(&spec->model, vars);
    const pf_optim_slots *optim = pf_optim_slots_of(&spec->optimizer);
    pf_status st = PF_OK;
    for (int i = 0; st == PF_OK && i < r->n; i++) {
        if (!ps_shards_is_dynamic(shards, i))
            continue;
        for (int f = same ? task : 0; st == PF_OK && f < (same ? task + 1 : num_ps); f++) {
            char path[2304];
            snprintf(path, sizeof path, "%s/ps-%d.safetensors", step_dir, f);
            if (!files[f])
                st = pf_safetensors_read_any(path, &files[f], err);
        }
        const pf_shard_info *info = ps_shards_info(shards, i);
        pf_dyn_config cfg;
        pf_dyn_table_config(spec, info->var, info->max_rows, &cfg);
        if (st == PF_OK && pf_dyn_create(&cfg, &r->tables[i]) != PF_OK)
            st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        int64_t dropped = 0;
        if (st == PF_OK)
            st = pf_dyn_restore(r->tables[i], (const pf_safetensors *const *)files, num_ps,
                                vars[info->var].name, optim->variable, task, n_ps, &dropped, err);
        if (st == PF_OK && dropped > 0) /* fewer ps tasks, a lower max_rows: as at the cap */
            fprintf(stderr,
                    "psflow ps %d: dynamic table %s: %lld of the checkpoint's rows over this "
                    "task's share of max_rows (%lld) dropped, the least recently updated first\n",
                    task, spec->model.embeddings[info->var].name, (long long)dropped,
                    (long long)info->max_rows);
    }
    for (int f = 0; f < num_ps; f++)
        pf_safetensors_destroy(files[f]);
    pf_free(files);
    return st;
}

/* r's arrays for the shards: values and slots by local index from r->c (the fixed shards in
 * order), none for a dynamic table's. */
static pf_status map_restored(const ps_shards *shards, restored *r) {
    size_t nn = (size_t)(r->n ? r->n : 1);
    r->values = pf_calloc(nn, sizeof *r->values);
    r->slot_ptrs = pf_calloc(nn * PF_OPTIM_MAX_SLOTS, sizeof *r->slot_ptrs);
    r->slots = pf_calloc(nn, sizeof *r->slots);
    r->tables = pf_calloc(nn, sizeof *r->tables);
    if (!r->values || !r->slot_ptrs || !r->slots || !r->tables)
        return PF_ERR_NOMEM;
    const float *const *values = pf_checkpoint_ps_values(r->c);
    const float *const *const *slots = pf_checkpoint_ps_slots(r->c);
    for (int i = 0, m = 0; i < r->n; i++) {
        r->slots[i] = r->slot_ptrs + (size_t)i * PF_OPTIM_MAX_SLOTS;
        if (ps_shards_is_dynamic(shards, i))
            continue;
        r->values[i] = values[m];
        for (int k = 0; k < PF_OPTIM_MAX_SLOTS; k++)
            r->slot_ptrs[(size_t)i * PF_OPTIM_MAX_SLOTS + (size_t)k] =
                slots[m] ? slots[m][k] : NULL;
        m++;
    }
    return PF_OK;
}

/* Loads ps `task`'s shards from the checkpoint in step_dir into *r once the whole checkpoint
 * checks out: every file the manifest lists has its size and CRC-32. A checkpoint written by
 * another number of ps tasks or another partitioning is reassembled from the slices its
 * files hold; *from_ps is then the number of ps tasks that wrote it, else 0. */
static pf_status load_verified(const char *step_dir, const pf_job_spec *spec, int task,
                               const ps_shards *shards, restored *r, int *from_ps, pf_error *err) {
    *from_ps = 0;
    memset(r, 0, sizeof *r);
    r->n = ps_shards_count(shards);
    pf_checkpoint_manifest m;
    pf_status st = pf_checkpoint_manifest_read(step_dir, &m, err);
    if (st != PF_OK)
        return st;
    int num_ps = m.num_ps;
    st = pf_checkpoint_verify(step_dir, &m, PF_CKPT_VERIFY_CRC, err);
    pf_checkpoint_manifest_deinit(&m);
    if (st != PF_OK)
        return st;
    int n;
    pf_shard_info *info = shard_infos(shards, &n);
    if (!info)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    const pf_optim_slots *optim = pf_optim_slots_of(&spec->optimizer);
    st = PF_ERR_FORMAT;
    if (num_ps == spec->replicas.ps) {
        pf_error same;
        pf_error_clear(&same);
        st = pf_checkpoint_load_ps(step_dir, task, info, n, optim, &r->c, &same);
        if (st != PF_OK && st != PF_ERR_FORMAT && st != PF_ERR_NOT_FOUND)
            pf_error_set(err, st, NULL, "%s", same.message);
    }
    /* Another number of ps tasks, or the same under another partitioning: reassembled
     * from the slices the files hold. */
    if (st == PF_ERR_FORMAT || st == PF_ERR_NOT_FOUND) {
        st = pf_checkpoint_load_repartitioned(step_dir, spec, info, n, optim, &r->c, err);
        if (st == PF_OK)
            *from_ps = num_ps;
    }
    pf_free(info);
    if (st == PF_OK && map_restored(shards, r) != PF_OK)
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    if (st == PF_OK)
        st = load_dynamic(step_dir, spec, task, num_ps, shards, r, err);
    if (st != PF_OK)
        restored_free(r);
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
    restored r = {0};
    int set_aside = 0, from_ps = 0;
    pf_status st;
    for (;;) {
        st = pf_checkpoint_find_latest(job_dir, 0, &step, step_dir, sizeof step_dir, err);
        if (st != PF_OK)
            break;
        pf_error bad;
        pf_error_clear(&bad);
        st = load_verified(step_dir, spec, task, shards, &r, &from_ps, &bad);
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
    uint64_t version = pf_checkpoint_ps_version(r.c);
    *input_queue = input_queue_of(r.c, task);
    restored_apply(shards, &r);
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
             step_dir, (long long)step, version, (unsigned long)crc,
             set_aside ? ", after setting bad ones aside" : "", from);
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
    restored r;
    int from_ps = 0;
    pf_status st = load_verified(step_dir, spec, task, shards, &r, &from_ps, err);
    if (st != PF_OK)
        return st;
    snprintf(note, len, "restored %s (step %" PRIu64 ", version %" PRIu64 ", verified%s)", step_dir,
             step, pf_checkpoint_ps_version(r.c), from_ps ? ", repartitioned" : "");
    *input_queue = input_queue_of(r.c, task);
    restored_apply(shards, &r);
    return PF_OK;
}
