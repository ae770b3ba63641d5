/* checkpoint.c - checkpoints on disk (see checkpoint.h).
 *
 * DESIGN: the manifest is the commit record. Every ps file is renamed into place by
 * pf_safetensors_write and its folder fsynced, so once the chief has every ps's
 * acknowledgement the files are durable; the manifest is then written to a .tmp, fsynced,
 * renamed and the folder fsynced, which makes the whole checkpoint appear at once. Readers
 * (restore, export, pruning) only ever trust a step folder through its manifest and check
 * the listed sizes (and checksums when asked) before using anything in it. Pruning removes
 * the manifest first for the same reason, so an interrupted prune leaves an incomplete,
 * invisible folder rather than a broken checkpoint.
 */
#include "psflow/checkpoint.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/optim.h"
#include "psflow/safetensors.h"
#include "psflow/text.h"

#define MANIFEST     "manifest.json"
#define MANIFEST_TMP "manifest.json.tmp"
#define CRC_CHUNK    (1u << 16) /* bytes read per crc32() call */

/* --- small helpers ------------------------------------------------------------------------ */

static pf_status join(char *out, size_t len, const char *dir, const char *name, pf_error *err) {
    int w = snprintf(out, len, "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= len)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%s/%s: path too long", dir, name);
    return PF_OK;
}

static void ps_file_name(int ps_task, char out[PF_CKPT_FILE_NAME_MAX]) {
    snprintf(out, PF_CKPT_FILE_NAME_MAX, "ps-%d.safetensors", ps_task);
}

/* Parses a non-empty string of decimal digits without sign into *out; -1 when it is not
 * one or overflows. Leading zeros are allowed only when `canonical` is false. */
static int parse_u64(const char *s, bool canonical, uint64_t *out) {
    if (!*s || (canonical && s[0] == '0' && s[1] != '\0'))
        return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* "step-<N>" with N canonical decimal and at most INT64_MAX; -1 for any other name. */
static int parse_step_name(const char *name, int64_t *step) {
    uint64_t v;
    if (strncmp(name, "step-", 5) != 0 || parse_u64(name + 5, true, &v) != 0 ||
        v > (uint64_t)INT64_MAX)
        return -1;
    *step = (int64_t)v;
    return 0;
}

/* True for the names this module writes into a step folder. */
static bool is_own_file(const char *name) {
    if (!strcmp(name, MANIFEST) || !strcmp(name, MANIFEST_TMP))
        return true;
    if (strncmp(name, "ps-", 3) != 0)
        return false;
    const char *p = name + 3, *digits = p;
    while (*p >= '0' && *p <= '9')
        p++;
    return p > digits && (!strcmp(p, ".safetensors") || !strcmp(p, ".safetensors.tmp"));
}

/* Last path component of `path` without trailing slashes, into out[len]. */
static void base_name(const char *path, char *out, size_t len) {
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t begin = end;
    while (begin > 0 && path[begin - 1] != '/')
        begin--;
    snprintf(out, len, "%.*s", (int)(end - begin), path + begin);
}

/* CRC-32 (zlib) and size of the file at path. */
static pf_status file_crc32(const char *path, uint32_t *crc, int64_t *bytes, pf_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return pf_error_set(err, errno == ENOENT ? PF_ERR_NOT_FOUND : PF_ERR_IO, NULL, "%s: %s",
                            path, strerror(errno));
    unsigned char *buf = pf_malloc(CRC_CHUNK);
    if (!buf) {
        fclose(f);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
    }
    uLong c = crc32(0L, Z_NULL, 0);
    int64_t total = 0;
    size_t got;
    while ((got = fread(buf, 1, CRC_CHUNK, f)) > 0) {
        c = crc32(c, buf, (uInt)got);
        total += (int64_t)got;
    }
    int failed = ferror(f);
    pf_free(buf);
    fclose(f);
    if (failed)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: read error", path);
    *crc = (uint32_t)c;
    *bytes = total;
    return PF_OK;
}

static int64_t view_count(const pf_tensor_view *v) {
    int64_t c = 1;
    for (int d = 0; d < v->rank; d++)
        c *= v->shape[d];
    return c;
}

#define SLOT_NAME_MAX (PF_SHARD_NAME_MAX + 32) /* "<shard>/Momentum" */

/* The tensor name of slot k of a shard: "<shard>/<the optimizer's slot variable suffix>". */
static pf_status slot_name(char out[SLOT_NAME_MAX], const char *shard, const pf_optim_slots *optim,
                           int k, pf_error *err) {
    int w = snprintf(out, SLOT_NAME_MAX, "%s/%s", shard, optim->variable[k]);
    if (w < 0 || w >= SLOT_NAME_MAX)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "slot variable name %s/%s too long", shard,
                            optim->variable[k]);
    return PF_OK;
}

/* --- paths -------------------------------------------------------------------------------- */

pf_status pf_checkpoint_job_dir(const char *root, const char *job, char *out, size_t len) {
    int w = snprintf(out, len, "%s/%s", root, job);
    return w < 0 || (size_t)w >= len ? PF_ERR_INVALID : PF_OK;
}

pf_status pf_checkpoint_step_dir(const char *root, const char *job, int64_t step, char *out,
                                 size_t len) {
    if (step < 0)
        return PF_ERR_INVALID;
    int w = snprintf(out, len, "%s/%s/step-%lld", root, job, (long long)step);
    return w < 0 || (size_t)w >= len ? PF_ERR_INVALID : PF_OK;
}

/* --- writing a ps file -------------------------------------------------------------------- */

static json_t *shape_json(int rank, int64_t rows, int64_t cols) {
    return rank == 2 ? json_pack("[I,I]", (json_int_t)rows, (json_int_t)cols)
                     : json_pack("[I]", (json_int_t)rows);
}

/* Checks one shard entry against the model layout. */
static pf_status check_shard(const pf_shard_info *s, const pf_var_info *vars, int nv,
                             pf_error *err) {
    if (s->var < 0 || s->var >= nv)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "shard '%s': variable index %d out of range",
                            s->name, s->var);
    const pf_var_info *v = &vars[s->var];
    int64_t cols = v->rank == 2 ? v->shape[1] : 1;
    if (s->rank != v->rank || s->shape[0] < 1 || s->shape[1] != cols || s->row_offset < 0 ||
        s->row_offset + s->shape[0] > v->shape[0] || s->num_shards < 1 || s->shard < 0 ||
        s->shard >= s->num_shards || s->count != (size_t)(s->shape[0] * cols))
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "shard '%s' does not fit variable '%s' of the model", s->name, v->name);
    return PF_OK;
}

/* The "psflow_shards" metadata: one object per shard, as compact JSON (free with free()). */
static char *shards_json(const pf_checkpoint_shards *sh, const pf_var_info *vars) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < sh->n; i++) {
        const pf_shard_info *s = &sh->info[i];
        const pf_var_info *v = &vars[s->var];
        json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:I, s:o, s:o}", "name", s->name, "variable",
                              v->name, "shard", s->shard, "num_shards", s->num_shards, "row_offset",
                              (json_int_t)s->row_offset, "shape",
                              shape_json(s->rank, s->shape[0], s->shape[1]), "variable_shape",
                              shape_json(v->rank, v->shape[0], v->shape[1]));
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    char *text = arr ? json_dumps(arr, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(arr);
    return text;
}

pf_status pf_checkpoint_write_ps(const char *step_dir, int ps_task, uint64_t version,
                                 const pf_job_spec *spec, const pf_optim_slots *optim,
                                 const pf_checkpoint_shards *shards, char *path_out,
                                 size_t path_len, int64_t *bytes_out, pf_error *err) {
    pf_var_info vars[PF_MAX_VARS];
    int nv = pf_model_layout(&spec->model, vars);
    int n = shards->n, n_slots = optim->n;
    if (ps_task < 0 || n < 0 || n_slots < 0 || n_slots > PF_OPTIM_MAX_SLOTS ||
        (n > 0 && (!shards->info || !shards->values)) || (n > 0 && n_slots > 0 && !shards->slots))
        return pf_error_set(err, PF_ERR_INVALID, NULL, "ps %d: invalid checkpoint arguments",
                            ps_task);
    for (int i = 0; i < n; i++) {
        pf_status st = check_shard(&shards->info[i], vars, nv, err);
        if (st != PF_OK)
            return st;
        int missing = !shards->values[i];
        for (int k = 0; k < n_slots; k++)
            missing |= !shards->slots[i] || !shards->slots[i][k];
        if (missing)
            return pf_error_set(err, PF_ERR_INVALID, NULL, "shard '%s': no data given",
                                shards->info[i].name);
    }
    char name[PF_CKPT_FILE_NAME_MAX], path[PF_CKPT_PATH_MAX];
    ps_file_name(ps_task, name);
    pf_status st = join(path, sizeof path, step_dir, name, err);
    if (st != PF_OK)
        return st;

    size_t n_tensors = (size_t)n * (size_t)(1 + n_slots);
    pf_tensor_view *t = pf_mallocarray(n_tensors, sizeof *t);
    char(*names)[SLOT_NAME_MAX] = pf_mallocarray((size_t)n * (size_t)n_slots, sizeof *names);
    char *shards_meta = shards_json(shards, vars);
    if (!t || !names || !shards_meta) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const pf_shard_info *s = &shards->info[i];
        pf_tensor_view v = {s->name, s->rank, {s->shape[0], s->shape[1]}, shards->values[i]};
        t[(size_t)i * (size_t)(1 + n_slots)] = v;
        for (int k = 0; k < n_slots; k++) {
            char *sn = names[(size_t)i * (size_t)n_slots + (size_t)k];
            if ((st = slot_name(sn, s->name, optim, k, err)) != PF_OK)
                goto done;
            v.name = sn;
            v.data = shards->slots[i][k];
            t[(size_t)i * (size_t)(1 + n_slots) + 1 + (size_t)k] = v;
        }
    }
    char task_text[24], version_text[24];
    snprintf(task_text, sizeof task_text, "%d", ps_task);
    snprintf(version_text, sizeof version_text, "%llu", (unsigned long long)version);
    const char *keys[] = {"psflow_job", "ps_task", "version", "optimizer", "psflow_shards"};
    const char *values[] = {spec->name, task_text, version_text, optim->optimizer, shards_meta};
    if ((st = pf_fs_make_dirs(step_dir, err)) != PF_OK)
        goto done;
    if ((st = pf_safetensors_write(path, t, (int)n_tensors, keys, values, 5, err)) != PF_OK)
        goto done;
    struct stat sb; /* pf_safetensors_write has fsynced step_dir after the rename */
    if (stat(path, &sb) != 0) {
        st = pf_error_set(err, PF_ERR_IO, NULL, "%s: %s", path, strerror(errno));
        goto done;
    }
    if (path_out && snprintf(path_out, path_len, "%s", path) >= (int)path_len) {
        st = pf_error_set(err, PF_ERR_INVALID, NULL, "%s: path too long for the caller", path);
        goto done;
    }
    if (bytes_out)
        *bytes_out = (int64_t)sb.st_size;
done:
    pf_free(t);
    pf_free(names);
    free(shards_meta); /* from jansson's allocator */
    return st;
}

/* --- the manifest ------------------------------------------------------------------------- */

void pf_checkpoint_manifest_deinit(pf_checkpoint_manifest *m) {
    if (!m)
        return;
    pf_free(m->files);
    memset(m, 0, sizeof *m);
}

static char *manifest_text(const pf_checkpoint_manifest *m) {
    json_t *files = json_array();
    for (int i = 0; files && i < m->num_ps; i++) {
        char crc[9];
        snprintf(crc, sizeof crc, "%08x", (unsigned)m->files[i].crc32);
        json_t *o = json_pack("{s:s, s:I, s:s}", "name", m->files[i].name, "bytes",
                              (json_int_t)m->files[i].bytes, "crc32", crc);
        if (!o || json_array_append_new(files, o) != 0) {
            json_decref(files);
            return NULL;
        }
    }
    json_t *root =
        json_pack("{s:s, s:I, s:s, s:i, s:o}", "job", m->job, "step", (json_int_t)m->step,
                  "created", m->created, "num_ps", m->num_ps, "files", files);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return text;
}

pf_status pf_checkpoint_write_manifest(const char *step_dir, const char *job, int64_t step,
                                       int num_ps, pf_checkpoint_manifest *out, pf_error *err) {
    if (out)
        memset(out, 0, sizeof *out);
    if (num_ps < 1 || num_ps > PF_MAX_REPLICAS || step < 0 || strlen(job) > PF_NAME_MAX)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "%s: invalid manifest (job '%s', step %lld, %d ps)", step_dir, job,
                            (long long)step, num_ps);
    pf_checkpoint_manifest m = {.step = step, .num_ps = num_ps};
    snprintf(m.job, sizeof m.job, "%s", job);
    pf_text_format_rfc3339((double)time(NULL), false, m.created, sizeof m.created);
    if (!(m.files = pf_calloc((size_t)num_ps, sizeof *m.files)))
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);

    char path[PF_CKPT_PATH_MAX];
    pf_status st = PF_OK;
    char *text = NULL;
    for (int i = 0; i < num_ps && st == PF_OK; i++) {
        pf_checkpoint_file *f = &m.files[i];
        ps_file_name(i, f->name);
        if ((st = join(path, sizeof path, step_dir, f->name, err)) != PF_OK)
            break;
        struct stat sb;
        if (stat(path, &sb) != 0) {
            if (errno == ENOENT)
                st = pf_error_set(err, PF_ERR_NOT_FOUND, NULL,
                                  "%s: missing (ps task %d has not written its checkpoint)", path,
                                  i);
            else
                st = pf_error_set(err, PF_ERR_IO, NULL, "%s: %s", path, strerror(errno));
        } else if (!S_ISREG(sb.st_mode)) {
            st = pf_error_set(err, PF_ERR_IO, NULL, "%s: not a regular file", path);
        } else {
            st = file_crc32(path, &f->crc32, &f->bytes, err);
        }
    }
    if (st == PF_OK && (st = join(path, sizeof path, step_dir, MANIFEST, err)) != PF_OK)
        goto done;
    if (st == PF_OK && !(text = manifest_text(&m)))
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);
    if (st == PF_OK) {
        /* jansson's text has no final newline; the file gets one. The .tmp it goes through
         * is MANIFEST_TMP. */
        struct iovec parts[] = {{text, strlen(text)}, {(void *)"\n", 1}};
        st = pf_fs_write_atomic(path, parts, 2, err);
    }
done:
    free(text); /* from jansson's allocator */
    if (st == PF_OK && out)
        *out = m;
    else
        pf_checkpoint_manifest_deinit(&m);
    return st;
}

/* Reads an integer member in [min, max]; -1 when missing, mistyped or out of range. */
static int get_int(json_t *o, const char *key, int64_t min, int64_t max, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return -1;
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int parse_crc(const char *s, uint32_t *out) {
    if (strlen(s) != 8)
        return -1;
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
        if (d == 16u)
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

pf_status pf_checkpoint_manifest_read(const char *step_dir, pf_checkpoint_manifest *out,
                                      pf_error *err) {
    memset(out, 0, sizeof *out);
    char path[PF_CKPT_PATH_MAX];
    pf_status st = join(path, sizeof path, step_dir, MANIFEST, err);
    if (st != PF_OK)
        return st;
    char *text = NULL;
    size_t len = 0;
    st = pf_fs_read_file(path, PF_CKPT_MANIFEST_MAX, &text, &len, err);
    if (st == PF_ERR_NOT_FOUND)
        return pf_error_set(err, st, NULL, "%s: no %s (not a complete checkpoint)", step_dir,
                            MANIFEST);
    if (st == PF_ERR_RANGE)
        return PF_ERR_FORMAT; /* larger than any manifest this module writes */
    if (st != PF_OK)
        return st;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    pf_free(text);
    pf_checkpoint_manifest m = {0};
    json_t *job = json_object_get(root, "job"), *created = json_object_get(root, "created");
    json_t *files = json_object_get(root, "files");
    int64_t step = 0, num_ps = 0;
    if (!root) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: not JSON: %s", path, jerr.text);
        goto done;
    }
    if (!json_is_object(root) || !json_is_string(job) || !json_is_string(created) ||
        !json_is_array(files) || get_int(root, "step", 0, INT64_MAX, &step) != 0 ||
        get_int(root, "num_ps", 1, PF_MAX_REPLICAS, &num_ps) != 0 ||
        strlen(json_string_value(job)) > PF_NAME_MAX ||
        strlen(json_string_value(created)) >= sizeof m.created ||
        json_array_size(files) != (size_t)num_ps) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                          "%s: needs job, step, created, num_ps (1..%d) and num_ps files", path,
                          PF_MAX_REPLICAS);
        goto done;
    }
    snprintf(m.job, sizeof m.job, "%s", json_string_value(job));
    snprintf(m.created, sizeof m.created, "%s", json_string_value(created));
    m.step = step;
    m.num_ps = (int)num_ps;
    if (!(m.files = pf_calloc((size_t)num_ps, sizeof *m.files))) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < m.num_ps; i++) {
        json_t *f = json_array_get(files, (size_t)i);
        json_t *name = json_object_get(f, "name"), *crc = json_object_get(f, "crc32");
        pf_checkpoint_file *cf = &m.files[i];
        ps_file_name(i, cf->name);
        if (!json_is_string(name) || strcmp(json_string_value(name), cf->name) != 0 ||
            get_int(f, "bytes", 0, INT64_MAX, &cf->bytes) != 0 || !json_is_string(crc) ||
            parse_crc(json_string_value(crc), &cf->crc32) != 0) {
            st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                              "%s: files[%d] must be {\"name\": \"%s\", \"bytes\": N, "
                              "\"crc32\": 8 hex digits}",
                              path, i, cf->name);
            goto done;
        }
    }
done:
    json_decref(root);
    if (st == PF_OK)
        *out = m;
    else
        pf_checkpoint_manifest_deinit(&m);
    return st;
}

pf_status pf_checkpoint_verify(const char *step_dir, const pf_checkpoint_manifest *m,
                               unsigned flags, pf_error *err) {
    char path[PF_CKPT_PATH_MAX];
    for (int i = 0; i < m->num_ps; i++) {
        const pf_checkpoint_file *f = &m->files[i];
        pf_status st = join(path, sizeof path, step_dir, f->name, err);
        if (st != PF_OK)
            return st;
        struct stat sb;
        if (stat(path, &sb) != 0)
            return pf_error_set(err, errno == ENOENT ? PF_ERR_NOT_FOUND : PF_ERR_IO, NULL,
                                "%s: listed in %s but %s", path, MANIFEST,
                                errno == ENOENT ? "missing" : strerror(errno));
        if (!S_ISREG(sb.st_mode))
            return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: not a regular file", path);
        if ((int64_t)sb.st_size != f->bytes)
            return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: %lld bytes, %s says %lld", path,
                                (long long)sb.st_size, MANIFEST, (long long)f->bytes);
        if (!(flags & PF_CKPT_VERIFY_CRC))
            continue;
        uint32_t crc;
        int64_t bytes;
        if ((st = file_crc32(path, &crc, &bytes, err)) != PF_OK)
            return st;
        if (crc != f->crc32 || bytes != f->bytes)
            return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: crc32 %08x, %s says %08x", path,
                                (unsigned)crc, MANIFEST, (unsigned)f->crc32);
    }
    return PF_OK;
}

/* --- finding checkpoints ------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Steps of every folder entry named step-<N> under job_dir, ascending (complete or not). */
static pf_status scan_steps(const char *job_dir, int64_t **steps, int *n, pf_error *err) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(job_dir);
    if (!d)
        return pf_error_set(err, errno == ENOENT || errno == ENOTDIR ? PF_ERR_NOT_FOUND : PF_ERR_IO,
                            NULL, "%s: %s", job_dir, strerror(errno));
    int64_t *v = NULL;
    int cap = 0, count = 0;
    pf_status st = PF_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step;
        if (parse_step_name(e->d_name, &step) != 0)
            continue;
        if (count == cap) {
            if (cap > (1 << 26)) {
                st = pf_error_set(err, PF_ERR_RANGE, NULL, "%s: too many step folders", job_dir);
                break;
            }
            int ncap = cap ? 2 * cap : 16;
            int64_t *nv = pf_realloc(v, (size_t)ncap * sizeof *v);
            if (!nv) {
                st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", job_dir);
                break;
            }
            v = nv;
            cap = ncap;
        }
        v[count++] = step;
    }
    closedir(d);
    if (st != PF_OK) {
        pf_free(v);
        return st;
    }
    if (count > 0)
        qsort(v, (size_t)count, sizeof *v, cmp_i64);
    *steps = v;
    *n = count;
    return PF_OK;
}

/* PF_OK when job_dir/step-<step> is a complete checkpoint; PF_ERR_NOMEM is the only error
 * that is not simply "incomplete" (PF_ERR_NOT_FOUND is returned for all of those). */
static pf_status check_complete(const char *job_dir, int64_t step, unsigned flags, char *dir,
                                size_t len, pf_error *err) {
    char name[32];
    snprintf(name, sizeof name, "step-%lld", (long long)step);
    pf_error local;
    pf_error_clear(&local);
    if (join(dir, len, job_dir, name, &local) != PF_OK)
        return PF_ERR_NOT_FOUND;
    pf_checkpoint_manifest m;
    pf_status st = pf_checkpoint_manifest_read(dir, &m, &local);
    if (st == PF_OK && m.step != step)
        st = PF_ERR_FORMAT;
    if (st == PF_OK)
        st = pf_checkpoint_verify(dir, &m, flags, &local);
    pf_checkpoint_manifest_deinit(&m);
    if (st == PF_ERR_NOMEM)
        return pf_error_set(err, st, NULL, "%s", local.message);
    return st == PF_OK ? PF_OK : PF_ERR_NOT_FOUND;
}

pf_status pf_checkpoint_list(const char *job_dir, unsigned flags, int64_t **steps, int *n,
                             pf_error *err) {
    pf_status st = scan_steps(job_dir, steps, n, err);
    char dir[PF_CKPT_PATH_MAX];
    int kept = 0;
    for (int i = 0; st == PF_OK && i < *n; i++) {
        pf_status c = check_complete(job_dir, (*steps)[i], flags, dir, sizeof dir, err);
        if (c == PF_OK)
            (*steps)[kept++] = (*steps)[i];
        else if (c != PF_ERR_NOT_FOUND)
            st = c;
    }
    if (st != PF_OK || kept == 0) {
        pf_free(*steps);
        *steps = NULL;
        *n = 0;
        return st;
    }
    *n = kept;
    return PF_OK;
}

pf_status pf_checkpoint_find_latest(const char *job_dir, unsigned flags, int64_t *step, char *dir,
                                    size_t len, pf_error *err) {
    int64_t *steps;
    int n;
    pf_status st = scan_steps(job_dir, &steps, &n, err);
    if (st != PF_OK)
        return st;
    char buf[PF_CKPT_PATH_MAX];
    st = PF_ERR_NOT_FOUND;
    for (int i = n - 1; i >= 0 && st == PF_ERR_NOT_FOUND; i--) {
        st = check_complete(job_dir, steps[i], flags, buf, sizeof buf, err);
        if (st == PF_OK)
            *step = steps[i];
    }
    pf_free(steps);
    if (st == PF_ERR_NOT_FOUND)
        return pf_error_set(err, st, NULL,
                            "%s: no complete checkpoint (no step-<N> folder with a complete %s)",
                            job_dir, MANIFEST);
    if (st == PF_OK && snprintf(dir, len, "%s", buf) >= (int)len)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%s: path too long for the caller", buf);
    return st;
}

/* --- restoring a ps ----------------------------------------------------------------------- */

struct pf_checkpoint_ps {
    pf_safetensors *st;
    uint64_t version;
    const float **values;       /* [n] */
    const float **slot_ptrs;    /* [n * PF_OPTIM_MAX_SLOTS] */
    const float *const **slots; /* [n]: slots[i] = slot_ptrs + i * PF_OPTIM_MAX_SLOTS */
};

void pf_checkpoint_ps_destroy(pf_checkpoint_ps *c) {
    if (!c)
        return;
    pf_safetensors_destroy(c->st);
    pf_free(c->values);
    pf_free(c->slot_ptrs);
    pf_free(c->slots);
    pf_free(c);
}

uint64_t pf_checkpoint_ps_version(const pf_checkpoint_ps *c) {
    return c->version;
}

const float *const *pf_checkpoint_ps_values(const pf_checkpoint_ps *c) {
    return c->values;
}

const float *const *const *pf_checkpoint_ps_slots(const pf_checkpoint_ps *c) {
    return c->slots;
}

/* Finds tensor `name` with `count` elements in st. */
static pf_status expect_tensor(const pf_safetensors *st, const char *path, const char *name,
                               size_t count, const float **data, pf_error *err) {
    pf_tensor_view v;
    if (pf_safetensors_find(st, name, &v) != 0)
        return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: tensor '%s' missing", path, name);
    if (view_count(&v) != (int64_t)count)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: tensor '%s' has %lld elements, expected %zu", path, name,
                            (long long)view_count(&v), count);
    *data = v.data;
    return PF_OK;
}

pf_status pf_checkpoint_load_ps(const char *step_dir, int ps_task, const pf_shard_info *info, int n,
                                const pf_optim_slots *optim, pf_checkpoint_ps **out,
                                pf_error *err) {
    *out = NULL;
    if (ps_task < 0 || n < 0 || (n > 0 && !info) || optim->n < 0 || optim->n > PF_OPTIM_MAX_SLOTS)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "ps %d: invalid restore arguments", ps_task);
    char name[PF_CKPT_FILE_NAME_MAX], path[PF_CKPT_PATH_MAX];
    ps_file_name(ps_task, name);
    pf_status st = join(path, sizeof path, step_dir, name, err);
    if (st != PF_OK)
        return st;
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return pf_error_set(err, PF_ERR_NOT_FOUND, NULL, "%s: missing", path);
    pf_checkpoint_ps *c = pf_calloc(1, sizeof *c);
    if (!c)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
    if ((st = pf_safetensors_read(path, &c->st, err)) != PF_OK)
        goto fail;
    const char *version = pf_safetensors_meta(c->st, "version");
    const char *task = pf_safetensors_meta(c->st, "ps_task");
    const char *optimizer = pf_safetensors_meta(c->st, "optimizer");
    uint64_t task_v = 0;
    if (!version || parse_u64(version, false, &c->version) != 0) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL,
                          "%s: metadata 'version' missing or not a number", path);
        goto fail;
    }
    if (task && (parse_u64(task, false, &task_v) != 0 || task_v != (uint64_t)ps_task)) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: written by ps task %s, not %d", path, task,
                          ps_task);
        goto fail;
    }
    if (optimizer && strcmp(optimizer, optim->optimizer) != 0) {
        st =
            pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: written with optimizer %s, the job uses %s",
                         path, optimizer, optim->optimizer);
        goto fail;
    }
    c->values = pf_calloc((size_t)n, sizeof *c->values);
    c->slot_ptrs = pf_calloc((size_t)n * PF_OPTIM_MAX_SLOTS, sizeof *c->slot_ptrs);
    c->slots = pf_calloc((size_t)n, sizeof *c->slots);
    if (!c->values || !c->slot_ptrs || !c->slots) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        st = expect_tensor(c->st, path, info[i].name, info[i].count, &c->values[i], err);
        for (int k = 0; st == PF_OK && k < optim->n; k++) {
            char sn[SLOT_NAME_MAX];
            if ((st = slot_name(sn, info[i].name, optim, k, err)) == PF_OK)
                st = expect_tensor(c->st, path, sn, info[i].count,
                                   &c->slot_ptrs[(size_t)i * PF_OPTIM_MAX_SLOTS + (size_t)k], err);
        }
        if (st != PF_OK)
            goto fail;
        c->slots[i] = c->slot_ptrs + (size_t)i * PF_OPTIM_MAX_SLOTS;
    }
    *out = c;
    return PF_OK;
fail:
    pf_checkpoint_ps_destroy(c);
    return st;
}

/* --- pruning ------------------------------------------------------------------------------ */

/* Removes one step folder if it only holds files this module writes. */
static pf_status remove_step_dir(const char *dir, pf_error *err) {
    struct stat sb;
    if (lstat(dir, &sb) != 0)
        return errno == ENOENT ? PF_OK
                               : pf_error_set(err, PF_ERR_IO, NULL, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: not a folder psflow wrote; left in place",
                            dir);
    char path[PF_CKPT_PATH_MAX];
    pf_status st = join(path, sizeof path, dir, MANIFEST, err);
    if (st != PF_OK)
        return st;
    if (unlink(path) != 0 && errno != ENOENT)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: %s", path, strerror(errno));
    DIR *d = opendir(dir);
    if (!d)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_own_file(e->d_name))
            continue;
        if (join(path, sizeof path, dir, e->d_name, err) != PF_OK)
            continue;
        if (unlink(path) != 0 && errno != ENOENT && st == PF_OK)
            st = pf_error_set(err, PF_ERR_IO, NULL, "%s: %s", path, strerror(errno));
    }
    closedir(d);
    if (st != PF_OK)
        return st;
    if (rmdir(dir) != 0) {
        if (errno == ENOTEMPTY || errno == EEXIST)
            return pf_error_set(err, PF_ERR_IO, NULL,
                                "%s: holds files psflow did not write; left in place", dir);
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: %s", dir, strerror(errno));
    }
    return PF_OK;
}

pf_status pf_checkpoint_prune(const char *job_dir, int keep, int *removed, pf_error *err) {
    if (removed)
        *removed = 0;
    if (keep < 1)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "keep must be at least 1, got %d", keep);
    int64_t *steps;
    int n;
    pf_status st = scan_steps(job_dir, &steps, &n, err);
    if (st != PF_OK)
        return st;
    /* The oldest step kept: the keep-th newest complete checkpoint. */
    char dir[PF_CKPT_PATH_MAX];
    int complete = 0, oldest_kept = -1;
    for (int i = n - 1; i >= 0 && complete < keep; i--) {
        pf_status c = check_complete(job_dir, steps[i], 0, dir, sizeof dir, err);
        if (c == PF_ERR_NOMEM) {
            pf_free(steps);
            return c;
        }
        if (c == PF_OK && ++complete == keep)
            oldest_kept = i;
    }
    pf_status first = PF_OK;
    pf_error local;
    for (int i = 0; i < oldest_kept; i++) {
        char name[32];
        snprintf(name, sizeof name, "step-%lld", (long long)steps[i]);
        pf_error_clear(&local);
        pf_status r = join(dir, sizeof dir, job_dir, name, &local);
        if (r == PF_OK)
            r = remove_step_dir(dir, &local);
        if (r == PF_OK && removed)
            (*removed)++;
        if (r != PF_OK && first == PF_OK) {
            first = r; /* report the first failure, carry on with the rest */
            if (err)
                *err = local;
        }
    }
    pf_free(steps);
    if (oldest_kept > 0)
        pf_fs_fsync_dir(job_dir); /* best effort: the removals are done either way */
    return first;
}

/* --- export ------------------------------------------------------------------------------- */

struct pf_checkpoint_model {
    char job[PF_NAME_MAX + 1];
    int64_t step;
    int n;
    char **names;
    int *ranks;
    int64_t (*shapes)[2];
    float **data;
};

void pf_checkpoint_model_destroy(pf_checkpoint_model *m) {
    if (!m)
        return;
    for (int i = 0; i < m->n; i++) {
        pf_free(m->names ? m->names[i] : NULL);
        pf_free(m->data ? m->data[i] : NULL);
    }
    pf_free(m->names);
    pf_free(m->ranks);
    pf_free(m->shapes);
    pf_free(m->data);
    pf_free(m);
}

const char *pf_checkpoint_model_job(const pf_checkpoint_model *m) {
    return m->job;
}

int64_t pf_checkpoint_model_step(const pf_checkpoint_model *m) {
    return m->step;
}

int pf_checkpoint_model_count(const pf_checkpoint_model *m) {
    return m->n;
}

pf_tensor_view pf_checkpoint_model_get(const pf_checkpoint_model *m, int i) {
    pf_tensor_view v = {m->names[i], m->ranks[i], {m->shapes[i][0], m->shapes[i][1]}, m->data[i]};
    return v;
}

/* One value shard found in a ps file's "psflow_shards". */
typedef struct shard_entry {
    const char *variable; /* borrowed from the parsed metadata (kept alive in `metas`) */
    const char *name;
    int shard, num_shards, rank;
    int64_t row_offset, rows, cols, var_rows, var_cols;
    const float *data; /* rows * cols floats, borrowed from the ps file */
} shard_entry;

static int cmp_entry(const void *a, const void *b) {
    const shard_entry *x = a, *y = b;
    int c = strcmp(x->variable, y->variable);
    if (c)
        return c;
    return (x->row_offset > y->row_offset) - (x->row_offset < y->row_offset);
}

/* Reads a shape array of rank 1 or 2 with dimensions >= 1; -1 when it is not one. */
static int get_shape(json_t *o, const char *key, int *rank, int64_t *rows, int64_t *cols) {
    json_t *a = json_object_get(o, key);
    size_t r = json_array_size(a);
    if (!json_is_array(a) || r < 1 || r > 2)
        return -1;
    int64_t dims[2] = {1, 1};
    for (size_t d = 0; d < r; d++) {
        json_t *v = json_array_get(a, d);
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return -1;
        dims[d] = (int64_t)json_integer_value(v);
    }
    *rank = (int)r;
    *rows = dims[0];
    *cols = dims[1];
    return 0;
}

/* Parses one ps file's "psflow_shards" into entries appended to *v. */
static pf_status collect_entries(const pf_safetensors *st, const char *path, json_t *meta,
                                 shard_entry **v, size_t *n, size_t *cap, pf_error *err) {
    if (!json_is_array(meta))
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: metadata 'psflow_shards' is not a JSON array", path);
    for (size_t i = 0; i < json_array_size(meta); i++) {
        json_t *o = json_array_get(meta, i);
        json_t *name = json_object_get(o, "name"), *var = json_object_get(o, "variable");
        int64_t shard, num_shards, row_offset;
        shard_entry e = {0};
        int vrank;
        if (!json_is_string(name) || !json_is_string(var) || !*json_string_value(var) ||
            get_int(o, "shard", 0, INT32_MAX, &shard) != 0 ||
            get_int(o, "num_shards", 1, INT32_MAX, &num_shards) != 0 ||
            get_int(o, "row_offset", 0, INT64_MAX, &row_offset) != 0 ||
            get_shape(o, "shape", &e.rank, &e.rows, &e.cols) != 0 ||
            get_shape(o, "variable_shape", &vrank, &e.var_rows, &e.var_cols) != 0 ||
            vrank != e.rank || e.cols != e.var_cols || shard >= num_shards)
            return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                "%s: psflow_shards[%zu] is not a valid shard description", path, i);
        e.name = json_string_value(name);
        e.variable = json_string_value(var);
        e.shard = (int)shard;
        e.num_shards = (int)num_shards;
        e.row_offset = row_offset;
        pf_tensor_view t;
        if (pf_safetensors_find(st, e.name, &t) != 0)
            return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: tensor '%s' missing", path, e.name);
        if (t.rank != e.rank || t.shape[0] != e.rows || (e.rank == 2 && t.shape[1] != e.cols))
            return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                "%s: tensor '%s' has another shape than psflow_shards says", path,
                                e.name);
        e.data = t.data;
        if (*n == *cap) {
            size_t ncap = *cap ? 2 * *cap : 16;
            shard_entry *nv = pf_mallocarray(ncap, sizeof *nv);
            if (!nv)
                return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
            if (*n)
                memcpy(nv, *v, *n * sizeof *nv);
            pf_free(*v);
            *v = nv;
            *cap = ncap;
        }
        (*v)[(*n)++] = e;
    }
    return PF_OK;
}

/* Checks that entries e[0..k) (one variable, sorted by row offset) tile it exactly. */
static pf_status check_tiling(const shard_entry *e, size_t k, const char *step_dir, pf_error *err) {
    const char *var = e[0].variable;
    if (k != (size_t)e[0].num_shards)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: variable '%s' has %zu shards, its metadata says %d", step_dir, var,
                            k, e[0].num_shards);
    int64_t next = 0;
    for (size_t j = 0; j < k; j++) {
        if (e[j].num_shards != e[0].num_shards || e[j].var_rows != e[0].var_rows ||
            e[j].var_cols != e[0].var_cols || e[j].rank != e[0].rank)
            return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                "%s: shards of variable '%s' disagree on its shape", step_dir, var);
        if (e[j].row_offset != next || e[j].shard != (int)j)
            return pf_error_set(
                err, PF_ERR_FORMAT, NULL, "%s: shards of variable '%s' %s at row %lld (shard '%s')",
                step_dir, var, e[j].row_offset < next ? "overlap" : "leave a gap",
                (long long)(e[j].row_offset < next ? e[j].row_offset : next), e[j].name);
        next += e[j].rows;
    }
    if (next != e[0].var_rows)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: shards of variable '%s' cover %lld of its %lld rows", step_dir,
                            var, (long long)next, (long long)e[0].var_rows);
    return PF_OK;
}

/* Resolves dir to a complete step folder and its manifest. */
static pf_status resolve_checkpoint(const char *dir, char *step_dir, size_t len,
                                    pf_checkpoint_manifest *m, pf_error *err) {
    char path[PF_CKPT_PATH_MAX], base[256];
    pf_status st = join(path, sizeof path, dir, MANIFEST, err);
    if (st != PF_OK)
        return st;
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return pf_error_set(err, errno == ENOENT ? PF_ERR_NOT_FOUND : PF_ERR_IO, NULL, "%s: %s",
                            dir, strerror(errno));
    base_name(dir, base, sizeof base);
    int64_t named_step = -1;
    bool is_step = stat(path, &sb) == 0;
    if (is_step) {
        if (snprintf(step_dir, len, "%s", dir) >= (int)len)
            return pf_error_set(err, PF_ERR_INVALID, NULL, "%s: path too long", dir);
        if (parse_step_name(base, &named_step) != 0)
            named_step = -1;
    } else {
        /* find_latest has verified the sizes and checksums already. */
        int64_t step;
        st = pf_checkpoint_find_latest(dir, PF_CKPT_VERIFY_CRC, &step, step_dir, len, err);
        if (st == PF_ERR_NOT_FOUND)
            return pf_error_set(err, st, NULL, "%s: no complete checkpoint here (%s)", dir,
                                parse_step_name(base, &step) == 0
                                    ? "this step folder has no manifest.json"
                                    : "neither a step-<N> folder with a manifest.json nor a job "
                                      "folder holding one");
        if (st != PF_OK)
            return st;
        named_step = step;
    }
    if ((st = pf_checkpoint_manifest_read(step_dir, m, err)) != PF_OK)
        return st;
    pf_error local;
    pf_error_clear(&local);
    if (named_step >= 0 && m->step != named_step)
        st = pf_error_set(&local, PF_ERR_FORMAT, NULL, "%s says step %lld", MANIFEST,
                          (long long)m->step);
    else if (is_step)
        st = pf_checkpoint_verify(step_dir, m, PF_CKPT_VERIFY_CRC, &local);
    if (st != PF_OK) {
        pf_checkpoint_manifest_deinit(m);
        return pf_error_set(err, st, NULL, "%s: not a complete checkpoint: %s", step_dir,
                            local.message);
    }
    return PF_OK;
}

/* Builds the merged model from entries sorted by (variable, row offset). */
static pf_status assemble(shard_entry *e, size_t n, const char *step_dir, pf_checkpoint_model *m,
                          pf_error *err) {
    size_t vars = 0;
    for (size_t i = 0; i < n; i++)
        vars += i == 0 || strcmp(e[i].variable, e[i - 1].variable) != 0;
    if (vars > INT32_MAX)
        return pf_error_set(err, PF_ERR_RANGE, NULL, "%s: too many variables", step_dir);
    m->names = pf_calloc(vars, sizeof *m->names);
    m->ranks = pf_calloc(vars, sizeof *m->ranks);
    m->shapes = pf_calloc(vars, sizeof *m->shapes);
    m->data = pf_calloc(vars, sizeof *m->data);
    if (!m->names || !m->ranks || !m->shapes || !m->data)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        while (i + k < n && !strcmp(e[i + k].variable, e[i].variable))
            k++;
        pf_status st = check_tiling(e + i, k, step_dir, err);
        if (st != PF_OK)
            return st;
        /* Tiling bounds the size by the shard data actually present in the files. */
        size_t count = (size_t)e[i].var_rows * (size_t)e[i].var_cols;
        int v = m->n;
        m->names[v] = pf_strdup(e[i].variable);
        m->data[v] = pf_mallocarray(count, sizeof(float));
        m->n++;
        if (!m->names[v] || !m->data[v])
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);
        m->ranks[v] = e[i].rank;
        m->shapes[v][0] = e[i].var_rows;
        m->shapes[v][1] = e[i].rank == 2 ? e[i].var_cols : 0;
        for (size_t j = i; j < i + k; j++)
            memcpy(m->data[v] + (size_t)e[j].row_offset * (size_t)e[j].cols, e[j].data,
                   (size_t)(e[j].rows * e[j].cols) * sizeof(float));
        i += k;
    }
    return PF_OK;
}

pf_status pf_checkpoint_merge(const char *dir, pf_checkpoint_model **out, pf_error *err) {
    *out = NULL;
    char step_dir[PF_CKPT_PATH_MAX], path[PF_CKPT_PATH_MAX];
    pf_checkpoint_manifest man;
    pf_status st = resolve_checkpoint(dir, step_dir, sizeof step_dir, &man, err);
    if (st != PF_OK)
        return st;
    pf_safetensors **files = pf_calloc((size_t)man.num_ps, sizeof *files);
    json_t **metas = pf_calloc((size_t)man.num_ps, sizeof *metas);
    pf_checkpoint_model *m = pf_calloc(1, sizeof *m);
    shard_entry *entries = NULL;
    size_t n_entries = 0, cap = 0;
    if (!files || !metas || !m) {
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", step_dir);
        goto done;
    }
    snprintf(m->job, sizeof m->job, "%s", man.job);
    m->step = man.step;
    for (int i = 0; i < man.num_ps && st == PF_OK; i++) {
        if ((st = join(path, sizeof path, step_dir, man.files[i].name, err)) != PF_OK ||
            (st = pf_safetensors_read(path, &files[i], err)) != PF_OK)
            break;
        const char *job = pf_safetensors_meta(files[i], "psflow_job");
        const char *text = pf_safetensors_meta(files[i], "psflow_shards");
        if (job && strcmp(job, man.job) != 0) {
            st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: belongs to job '%s', not '%s'", path,
                              job, man.job);
            break;
        }
        if (!text) {
            st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: no 'psflow_shards' metadata", path);
            break;
        }
        json_error_t jerr;
        metas[i] = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
        st = collect_entries(files[i], path, metas[i], &entries, &n_entries, &cap, err);
    }
    if (st != PF_OK)
        goto done;
    if (n_entries == 0) {
        st = pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: the checkpoint holds no variables",
                          step_dir);
        goto done;
    }
    qsort(entries, n_entries, sizeof *entries, cmp_entry);
    st = assemble(entries, n_entries, step_dir, m, err);
done:
    for (int i = 0; files && metas && i < man.num_ps; i++) {
        pf_safetensors_destroy(files[i]);
        json_decref(metas[i]);
    }
    pf_free(files);
    pf_free(metas);
    pf_free(entries);
    pf_checkpoint_manifest_deinit(&man);
    if (st != PF_OK) {
        pf_checkpoint_model_destroy(m);
        return st;
    }
    *out = m;
    return PF_OK;
}

pf_status pf_checkpoint_model_write(const pf_checkpoint_model *m, const char *path, pf_error *err) {
    pf_tensor_view *t = pf_mallocarray((size_t)m->n, sizeof *t);
    if (!t)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
    for (int i = 0; i < m->n; i++)
        t[i] = pf_checkpoint_model_get(m, i);
    char step[24];
    snprintf(step, sizeof step, "%lld", (long long)m->step);
    const char *keys[] = {"psflow_job", "global_step"};
    const char *values[] = {m->job, step};
    pf_status st = pf_safetensors_write(path, t, m->n, keys, values, 2, err);
    pf_free(t);
    return st;
}

pf_status pf_checkpoint_export(const char *dir, const char *out_path, int64_t *step,
                               pf_error *err) {
    pf_checkpoint_model *m;
    pf_status st = pf_checkpoint_merge(dir, &m, err);
    if (st != PF_OK)
        return st;
    st = pf_checkpoint_model_write(m, out_path, err);
    if (st == PF_OK && step)
        *step = m->step;
    pf_checkpoint_model_destroy(m);
    return st;
}
