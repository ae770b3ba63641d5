/* fs.c - bounded whole-file reads and atomic writes (see fs.h). */
#include "psflow/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "psflow/mem.h"

#define READ_CHUNK (64u << 10) /* bytes asked of read() at a time when the size is unknown */

static pf_status os_error(pf_error *err, const char *path, int e) {
    return pf_error_set(err, e == ENOENT ? PF_ERR_NOT_FOUND : PF_ERR_IO, NULL, "%s: %s", path,
                        strerror(e));
}

pf_status pf_fs_read_file(const char *path, size_t max, char **out, size_t *len, pf_error *err) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return os_error(err, path, errno);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return os_error(err, path, e);
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: a folder, not a file", path);
    }
    if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max) {
        close(fd);
        return pf_error_set(err, PF_ERR_RANGE, NULL, "%s: %lld bytes, more than the %zu allowed",
                            path, (long long)sb.st_size, max);
    }
    /* Room for max bytes, one more that tells a stream is too long, and the NUL. A regular
     * file gets its size at once, so reading it takes one allocation. */
    size_t limit = max < SIZE_MAX - 2 ? max + 2 : SIZE_MAX;
    size_t cap = S_ISREG(sb.st_mode) && sb.st_size > 0 ? (size_t)sb.st_size + 2 : READ_CHUNK;
    cap = cap < limit ? cap : limit;
    char *buf = pf_malloc(cap);
    size_t n = 0;
    pf_status st = buf ? PF_OK : PF_ERR_NOMEM;
    while (st == PF_OK) {
        if (n + 1 == cap) { /* only the NUL's byte left: grow, geometrically */
            size_t next = cap < limit / 2 ? cap * 2 : limit;
            char *grown = pf_realloc(buf, next);
            if (!grown) {
                st = PF_ERR_NOMEM;
                break;
            }
            buf = grown;
            cap = next;
        }
        size_t want = cap - 1 - n < (size_t)SSIZE_MAX ? cap - 1 - n : (size_t)SSIZE_MAX;
        ssize_t got = read(fd, buf + n, want);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            st = os_error(err, path, errno);
        } else if (got == 0) {
            break;
        } else if ((n += (size_t)got) > max) {
            st = pf_error_set(err, PF_ERR_RANGE, NULL, "%s: larger than the %zu bytes allowed",
                              path, max);
        }
    }
    close(fd);
    if (st == PF_ERR_NOMEM)
        pf_error_set(err, st, NULL, "%s: out of memory reading it", path);
    if (st != PF_OK) {
        pf_free(buf);
        return st;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return PF_OK;
}

/* Writes all of p[0 .. n) to fd; 0, or -1 with errno set. */
static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The folder of path into dir[len]: "." for a bare name, "/" for a file in the root. */
static void parent_of(const char *path, char *dir, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, len, ".");
    else if (slash == path)
        snprintf(dir, len, "/");
    else
        snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

pf_status pf_fs_write_atomic(const char *path, const struct iovec *parts, int n, pf_error *err) {
    char tmp[PATH_MAX], dir[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%s: path too long", path);
    parent_of(path, dir, sizeof dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: %s", tmp, strerror(errno));
    int ok = 1;
    for (int i = 0; ok && i < n; i++)
        ok = write_all(fd, parts[i].iov_base, parts[i].iov_len) == 0;
    ok = ok && fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: %s", path, strerror(e));
    }
    if (pf_fs_fsync_dir(dir) != 0)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: fsync: %s", dir, strerror(errno));
    return PF_OK;
}

int pf_fs_fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

pf_status pf_fs_make_dirs(const char *path, pf_error *err) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%s: path too long", path);
    size_t n = strlen(buf);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) == 0) {
            char *slash = strrchr(buf, '/');
            if (slash && slash != buf) {
                *slash = '\0';
                pf_fs_fsync_dir(buf); /* best effort: the folder exists either way */
                *slash = '/';
            } else {
                pf_fs_fsync_dir(slash ? "/" : ".");
            }
        } else if (errno != EEXIST) {
            return pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot create: %s", buf,
                                strerror(errno));
        }
        buf[i] = saved;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: not a folder", path);
    return PF_OK;
}
