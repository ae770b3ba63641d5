/* manifest.c - the manifest that makes a checkpoint exist: writing it once every ps file is
 * in place, reading and verifying it, finding the complete checkpoints of a job and
 * pruning old ones (see checkpoint.h).
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

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint_internal.h"
#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/text.h"

#define CRC_CHUNK (1u << 16) /* bytes read per crc32() call */

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
        ckpt_ps_file_name(i, f->name);
        if ((st = ckpt_join(path, sizeof path, step_dir, f->name, err)) != PF_OK)
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
    if (st == PF_OK && (st = ckpt_join(path, sizeof path, step_dir, MANIFEST, err)) != PF_OK)
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
    pf_status st = ckpt_join(path, sizeof path, step_dir, MANIFEST, err);
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
        !json_is_array(files) || ckpt_get_int(root, "step", 0, INT64_MAX, &step) != 0 ||
        ckpt_get_int(root, "num_ps", 1, PF_MAX_REPLICAS, &num_ps) != 0 ||
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
        ckpt_ps_file_name(i, cf->name);
        if (!json_is_string(name) || strcmp(json_string_value(name), cf->name) != 0 ||
            ckpt_get_int(f, "bytes", 0, INT64_MAX, &cf->bytes) != 0 || !json_is_string(crc) ||
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
        pf_status st = ckpt_join(path, sizeof path, step_dir, f->name, err);
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
        if (ckpt_parse_step_name(e->d_name, &step) != 0)
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
    if (ckpt_join(dir, len, job_dir, name, &local) != PF_OK)
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

pf_status pf_checkpoint_set_aside(const char *step_dir, char *new_path, size_t len, pf_error *err) {
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32], path[PF_CKPT_PATH_MAX];
    if (!gmtime_r(&now, &tm) || !strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm))
        snprintf(stamp, sizeof stamp, "%lld", (long long)now);
    for (int k = 0; k < 100; k++) {
        int n = k ? snprintf(path, sizeof path, "%s.corrupt-%s-%d", step_dir, stamp, k)
                  : snprintf(path, sizeof path, "%s.corrupt-%s", step_dir, stamp);
        if (n < 0 || n >= (int)sizeof path)
            return pf_error_set(err, PF_ERR_INVALID, NULL, "%s: path too long", step_dir);
        struct stat sb;
        if (lstat(path, &sb) == 0)
            continue; /* set aside at the same second already */
        if (rename(step_dir, path) != 0)
            return pf_error_set(err, errno == ENOENT ? PF_ERR_NOT_FOUND : PF_ERR_IO, NULL,
                                "cannot rename %s to %s: %s", step_dir, path, strerror(errno));
        char parent[PF_CKPT_PATH_MAX];
        snprintf(parent, sizeof parent, "%s", step_dir);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
            *slash = '\0';
            pf_fs_fsync_dir(parent);
        }
        if (new_path && snprintf(new_path, len, "%s", path) >= (int)len)
            return pf_error_set(err, PF_ERR_INVALID, NULL, "%s: path too long for the caller",
                                path);
        return PF_OK;
    }
    return pf_error_set(err, PF_ERR_IO, NULL, "%s: too many checkpoints set aside this second",
                        step_dir);
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
    pf_status st = ckpt_join(path, sizeof path, dir, MANIFEST, err);
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
        if (ckpt_join(path, sizeof path, dir, e->d_name, err) != PF_OK)
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

/* True when job_dir/step-<step> holds no manifest, not even one the chief moved aside to
 * write the step again: an attempt that was never committed. */
static bool never_committed(const char *job_dir, int64_t step) {
    char path[PF_CKPT_PATH_MAX];
    struct stat sb;
    int w = snprintf(path, sizeof path, "%s/step-%lld/%s", job_dir, (long long)step, MANIFEST);
    if (w < 0 || (size_t)w + sizeof ".replaced" > sizeof path || lstat(path, &sb) == 0 ||
        errno != ENOENT)
        return false;
    strcat(path, ".replaced");
    return lstat(path, &sb) != 0 && errno == ENOENT;
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
    /* Newest first: the newest complete checkpoint, the keep-th newest (the oldest kept), and
     * the folders older than the newest complete one that were never committed: abandoned
     * attempts, as nothing older than the newest complete checkpoint is being written. */
    char dir[PF_CKPT_PATH_MAX];
    int complete = 0, newest = -1, oldest_kept = -1;
    unsigned char *abandoned = pf_calloc((size_t)(n > 0 ? n : 1), 1);
    if (!abandoned) {
        pf_free(steps);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", job_dir);
    }
    for (int i = n - 1; i >= 0; i--) {
        pf_status c = check_complete(job_dir, steps[i], 0, dir, sizeof dir, err);
        if (c == PF_ERR_NOMEM) {
            pf_free(abandoned);
            pf_free(steps);
            return c;
        }
        if (c == PF_OK && complete < keep && ++complete == keep)
            oldest_kept = i;
        if (c == PF_OK && newest < 0)
            newest = i;
        else if (c != PF_OK && newest >= 0)
            abandoned[i] = never_committed(job_dir, steps[i]);
    }
    pf_status first = PF_OK;
    pf_error local;
    int any = 0;
    for (int i = 0; i < newest; i++) {
        if (i >= oldest_kept && !abandoned[i])
            continue;
        any = 1;
        char name[32];
        snprintf(name, sizeof name, "step-%lld", (long long)steps[i]);
        pf_error_clear(&local);
        pf_status r = ckpt_join(dir, sizeof dir, job_dir, name, &local);
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
    pf_free(abandoned);
    pf_free(steps);
    if (any)
        pf_fs_fsync_dir(job_dir); /* best effort: the removals are done either way */
    return first;
}
