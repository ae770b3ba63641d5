/* dataplane_keys.c - the coordinator's data-plane secret and the keys of assignments (see
 * dataplane_keys.h). */
#include "coordinator/dataplane_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "psflow/fs.h"
#include "psflow/mem.h"

#define SECRET_SUFFIX ".data-plane-secret"

/* The folder of path (for fsync), "." when it names none. */
static void folder_of(const char *path, char *dir, size_t cap) {
    snprintf(dir, cap, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, cap, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
}

/* Makes a new secret at path: written to a 0600 temporary file, then linked into place,
 * which fails with EEXIST when another start made one first. Returns 0, 1 when the file
 * exists already (read it), or -1 (err set). */
static int make_secret(const char *path, uint8_t secret[PF_WIRE_KEY_SIZE], pf_error *err) {
    char tmp[PATH_MAX + 64], hex[PF_WIRE_KEY_HEX_SIZE + 1];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    if (pf_wire_nonce(secret, err) != PF_OK)
        return -1;
    pf_wire_key_hex(secret, hex);
    hex[PF_WIRE_KEY_HEX_SIZE - 1] = '\n';
    unlink(tmp); /* left by a start that died with this pid */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int ok = fd >= 0 && write(fd, hex, PF_WIRE_KEY_HEX_SIZE) == (ssize_t)PF_WIRE_KEY_HEX_SIZE &&
             fsync(fd) == 0;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    pf_wire_key_clear(hex, sizeof hex);
    int linked = ok ? link(tmp, path) : -1;
    saved = ok ? errno : saved;
    unlink(tmp);
    if (linked != 0 && ok && saved == EEXIST)
        return 1;
    if (linked != 0) {
        pf_error_set(err, PF_ERR_IO, NULL, "data-plane secret %s: cannot make it: %s", path,
                     strerror(saved));
        return -1;
    }
    char dir[PATH_MAX];
    folder_of(path, dir, sizeof dir);
    pf_fs_fsync_dir(dir);
    fprintf(stderr,
            "psflow coordinator: made the data-plane secret %s (keep it with the database: "
            "every managed job's keys derive from it)\n",
            path);
    return 0;
}

static pf_status read_secret(const char *path, uint8_t secret[PF_WIRE_KEY_SIZE], pf_error *err) {
    char *text = NULL;
    size_t len = 0;
    pf_status st = pf_fs_read_file(path, 256, &text, &len, err);
    if (st != PF_OK)
        return st;
    st = pf_wire_key_parse_hex(text, len, secret);
    pf_wire_key_clear(text, len);
    pf_free(text);
    if (st != PF_OK)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "data-plane secret %s: not 64 hex digits; restore it from the "
                            "database's backup, or remove it to make a new one (every managed "
                            "job's tasks then need a restart)",
                            path);
    struct stat sb;
    if (stat(path, &sb) == 0 && (sb.st_mode & 077))
        fprintf(stderr,
                "psflow coordinator: warning: the data-plane secret %s is readable by other "
                "users (mode %03o); chmod 600 it\n",
                path, (unsigned)(sb.st_mode & 0777));
    return PF_OK;
}

pf_status coord_dataplane_secret_load(const char *db_path, uint8_t secret[PF_WIRE_KEY_SIZE],
                                      pf_error *err) {
    if (!db_path || !*db_path || !strcmp(db_path, ":memory:"))
        return pf_wire_nonce(secret, err);
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s" SECRET_SUFFIX, db_path) >= sizeof path)
        return pf_error_set(err, PF_ERR_IO, NULL, "database path too long: %s", db_path);
    if (access(path, F_OK) != 0) {
        int made = make_secret(path, secret, err);
        if (made < 0)
            return PF_ERR_IO;
        if (made == 0)
            return PF_OK;
    }
    return read_secret(path, secret, err);
}

int coord_assignment_add_key(json_t *assignment, const coord_cluster *c, const coord_node *n,
                             const uint8_t secret[PF_WIRE_KEY_SIZE]) {
    coord_job *j;
    coord_task *t;
    coord_node_assigned(c, n, &j, &t);
    if (!j || !json_is_object(assignment) || !strcmp(n->type, "serve"))
        return 0; /* a serving task never joins the data plane */
    uint8_t job_key[PF_WIRE_KEY_SIZE], key[PF_WIRE_KEY_SIZE];
    char hex[PF_WIRE_KEY_HEX_SIZE];
    pf_wire_job_key(secret, PF_WIRE_KEY_SIZE, j->name, job_key);
    int rc = 0;
    if (!strcmp(n->type, "ps"))
        memcpy(key, job_key, sizeof key);
    else if (pf_wire_task_key_for(job_key, n->type, n->index, j->spec.replicas.chief > 0, key) !=
             PF_OK)
        rc = -1; /* a type the coordinator never assigns */
    if (rc == 0) {
        pf_wire_key_hex(key, hex);
        rc = json_object_set_new(assignment, "key", json_string(hex));
        pf_wire_key_clear(hex, sizeof hex);
    }
    pf_wire_key_clear(job_key, sizeof job_key);
    pf_wire_key_clear(key, sizeof key);
    return rc;
}
