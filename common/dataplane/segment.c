/* segment.c - the shared-memory segment of one host's workers and ps tasks (see segment.h). */
#define _GNU_SOURCE
#include "psflow/segment.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/magic.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "psflow/text.h"
#include "psflow/wire_auth.h"

size_t pf_segment_bytes(uint64_t n, size_t *grads_at) {
    size_t vec = ((size_t)n * sizeof(float) + 63) & ~(size_t)63;
    if (grads_at)
        *grads_at = PF_SEGMENT_HEAD + vec;
    return PF_SEGMENT_HEAD + 2 * vec;
}

int pf_segment_enabled(void) {
    return pf_text_bool(getenv("PSFLOW_SHM")) != 0; /* unset or unknown: on */
}

pf_status pf_segment_create(size_t size, pf_segment *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (size <= PF_WIRE_SEG_TOKEN_SIZE)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "a segment of %zu bytes is too small", size);
    const char *step = "memfd_create";
    int fd = memfd_create(PF_SEGMENT_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd >= 0 && ftruncate(fd, (off_t)size) != 0)
        step = "ftruncate";
    else if (fd >= 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        step = "sealing";
    else if (fd >= 0 && (out->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
                            MAP_FAILED)
        step = "mmap";
    else if (fd >= 0)
        step = NULL;
    if (step) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        out->base = NULL;
        return pf_error_set(err, PF_ERR_IO, NULL, "no shared segment of %zu bytes: %s: %s", size,
                            step, strerror(e));
    }
    pf_error e2;
    uint8_t nonce[PF_WIRE_NONCE_SIZE];
    if (pf_wire_nonce(nonce, &e2) != PF_OK) {
        munmap(out->base, size);
        close(fd);
        out->base = NULL;
        return pf_error_set(err, PF_ERR_IO, NULL, "no shared segment: %s", e2.message);
    }
    memcpy(out->token, nonce, sizeof out->token);
    memcpy(out->base, out->token, sizeof out->token);
    out->size = size;
    out->fd = fd;
    return PF_OK;
}

/* 1 (err set) when a segment of `size` bytes is not one a ps with this limit takes. */
static int size_refused(uint64_t size, uint64_t limit, pf_error *err) {
    if (size > PF_WIRE_SEG_TOKEN_SIZE && size <= limit && size <= (uint64_t)SIZE_MAX)
        return 0;
    pf_error_set(err, PF_ERR_INVALID, NULL, "a segment of %llu bytes (this ps takes %u to %llu)",
                 (unsigned long long)size, PF_WIRE_SEG_TOKEN_SIZE + 1, (unsigned long long)limit);
    return 1;
}

/* The checks on an open descriptor f of a would-be segment (stat'ed as *before) that need
 * it open - in tmpfs, unchanged, sealed against shrinking, starting with the token - and its
 * mapping into *out. `what` names it in the error. */
static pf_status map_checked(int f, const char *what, const struct stat *before, uint64_t size,
                             const uint8_t *token, pf_segment *out, pf_error *err) {
    const char *why = NULL;
    struct stat st;
    int seals = fcntl(f, F_GET_SEALS);
    struct statfs fs;
    if (fstatfs(f, &fs) != 0 || fs.f_type != TMPFS_MAGIC)
        why = "not in ordinary shared memory (a huge-page segment could fault)";
    else if (fstat(f, &st) != 0 || st.st_dev != before->st_dev || st.st_ino != before->st_ino ||
             (uint64_t)st.st_size != size)
        why = "changed while it was opened";
    else if (seals < 0 || !(seals & F_SEAL_SHRINK) || !(seals & F_SEAL_SEAL))
        why = "not sealed against shrinking";
    else if ((out->base = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0)) ==
             MAP_FAILED) {
        out->base = NULL;
        why = "cannot be mapped";
    } else if (memcmp(out->base, token, PF_WIRE_SEG_TOKEN_SIZE) != 0) {
        munmap(out->base, (size_t)size);
        out->base = NULL;
        why = "does not start with the token named";
    }
    if (why)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%s %s", what, why);
    out->size = (size_t)size;
    memcpy(out->token, token, sizeof out->token);
    return PF_OK;
}

pf_status pf_segment_open(uint32_t pid, uint32_t fd, uint64_t size, const uint8_t *token,
                          uint64_t limit, pf_segment *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (size_refused(size, limit, err))
        return PF_ERR_INVALID;
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%u", pid, fd);
    /* What the descriptor names is looked at before anything follows it: only a psflow
     * memfd (no file system is touched, so no hung mount can hold the ps), then only one of
     * this user of the announced size is opened at all (no FIFO, no device, no other file). */
    static const char memfd[] = "/memfd:" PF_SEGMENT_NAME " ";
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "%s names nothing this ps can see (not on this host?)", path);
    target[n] = '\0';
    if (strncmp(target, memfd, sizeof memfd - 1) != 0)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%s is not a psflow segment", path);
    struct stat before;
    if (stat(path, &before) != 0)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%s: %s", path, strerror(errno));
    if (!S_ISREG(before.st_mode) || before.st_uid != geteuid() || (uint64_t)before.st_size != size)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "%s is not a regular file of this user of %llu bytes", path,
                            (unsigned long long)size);
    int f = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (f < 0)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%s: %s", path, strerror(errno));
    pf_status st_map = map_checked(f, path, &before, size, token, out, err);
    close(f);
    return st_map;
}

pf_status pf_segment_open_fd(int fd, uint64_t size, const uint8_t *token, uint64_t limit,
                             pf_segment *out, pf_error *err) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (size_refused(size, limit, err))
        return PF_ERR_INVALID;
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    static const char memfd[] = "/memfd:" PF_SEGMENT_NAME " ";
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "the descriptor handed over: %s",
                            strerror(errno));
    target[n] = '\0';
    if (strncmp(target, memfd, sizeof memfd - 1) != 0)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "the descriptor handed over is not a psflow segment");
    struct stat before;
    if (fstat(fd, &before) != 0)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "the descriptor handed over: %s",
                            strerror(errno));
    if (!S_ISREG(before.st_mode) || before.st_uid != geteuid() || (uint64_t)before.st_size != size)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "the descriptor handed over is not a regular file of this user of "
                            "%llu bytes",
                            (unsigned long long)size);
    int mode = fcntl(fd, F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) != O_RDWR)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "the descriptor handed over is not open for reading and writing");
    return map_checked(fd, "the descriptor handed over", &before, size, token, out, err);
}

void pf_segment_close(pf_segment *s) {
    if (!s->base)
        return; /* never made, or closed: a zeroed struct's fd 0 is not ours */
    munmap(s->base, s->size);
    if (s->fd >= 0)
        close(s->fd);
    s->base = NULL;
    s->size = 0;
    s->fd = -1;
}

int pf_segment_host_is_local(const char *host) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (!host || getaddrinfo(host, NULL, &hints, &res) != 0)
        return 0;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        ifs = NULL; /* loopback addresses still count */
    int local = 0;
    for (struct addrinfo *a = res; a && !local; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            struct in_addr in = ((const struct sockaddr_in *)(const void *)a->ai_addr)->sin_addr;
            local = (ntohl(in.s_addr) >> 24) == 127;
            for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next)
                local = i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                        ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr ==
                            in.s_addr;
        } else if (a->ai_family == AF_INET6) {
            const struct in6_addr *in6 =
                &((const struct sockaddr_in6 *)(const void *)a->ai_addr)->sin6_addr;
            local = IN6_IS_ADDR_LOOPBACK(in6);
            for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next)
                local = i->ifa_addr && i->ifa_addr->sa_family == AF_INET6 &&
                        memcmp(&((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr,
                               in6, sizeof *in6) == 0;
        }
    }
    if (ifs)
        freeifaddrs(ifs);
    freeaddrinfo(res);
    return local;
}
