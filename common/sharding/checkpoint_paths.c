/* checkpoint_paths.c - the names and paths of a checkpoint's folders and files, and the reading
 * back of the numbers in them: the lowest file of the checkpoint module (see
 * checkpoint_internal.h), calling nothing else in common/sharding/.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint_internal.h"

/* --- paths ---------------------------------------------------------------------------------- */

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

pf_status ckpt_join(char *out, size_t len, const char *dir, const char *name, pf_error *err) {
    int w = snprintf(out, len, "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= len)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%s/%s: path too long", dir, name);
    return PF_OK;
}

void ckpt_ps_file_name(int ps_task, char out[PF_CKPT_FILE_NAME_MAX]) {
    snprintf(out, PF_CKPT_FILE_NAME_MAX, "ps-%d.safetensors", ps_task);
}

/* --- reading numbers back ------------------------------------------------------------------ */

int ckpt_parse_u64(const char *s, bool canonical, uint64_t *out) {
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

int ckpt_parse_step_name(const char *name, int64_t *step) {
    uint64_t v;
    if (strncmp(name, "step-", 5) != 0 || ckpt_parse_u64(name + 5, true, &v) != 0 ||
        v > (uint64_t)INT64_MAX)
        return -1;
    *step = (int64_t)v;
    return 0;
}

int ckpt_get_int(json_t *o, const char *key, int64_t min, int64_t max, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return -1;
    *out = (int64_t)json_integer_value(v);
    return 0;
}
