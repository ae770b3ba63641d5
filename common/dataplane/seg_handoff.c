/* seg_handoff.c - a worker's segment handed to a ps over a Unix socket (see seg_handoff.h).
 *
 * DESIGN: the ps's thread serves one connection at a time: accept, check the peer's user,
 * wait up to a second for one message of one byte carrying exactly one descriptor, answer a
 * random 4-byte handle, close. A peer cannot hold the thread longer than that second, nor
 * make the ps keep more than PF_SEG_HANDOFF_SLOTS descriptors: when every slot is taken the
 * oldest descriptor is closed. Nothing the peer sends is trusted beyond "a descriptor": the
 * ps checks what it is (pf_segment_open_fd) when a SEG_ATTACH on an authenticated connection
 * claims it, with the token only that worker knows.
 */
#define _GNU_SOURCE
#include "psflow/seg_handoff.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "psflow/clock.h"
#include "psflow/mem.h"
#include "psflow/wire_auth.h"

#define RECV_WAIT_MS    1000 /* a connected peer's time to send its descriptor */
#define MAX_FDS_IN_MSG  4    /* room to see (and close) descriptors beyond the one expected */
#define REFUSALS_LOGGED 20   /* refusals logged one by one; after that every 1000th */

typedef struct slot {
    uint32_t handle; /* 0: free */
    int fd;
    double at;
} slot;

struct pf_seg_handoff {
    int lfd;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char who[64];
    dev_t dev; /* the socket file bound, so that closing removes it only while it is ours */
    ino_t ino;
    pthread_t thread;
    int stopping; /* __atomic */
    pthread_mutex_t mu;
    slot slots[PF_SEG_HANDOFF_SLOTS];
    uint64_t refused; /* __atomic */
};

const char *pf_seg_handoff_dir(void) {
    const char *d = getenv("PSFLOW_SHM_DIR");
    return d && *d ? d : NULL;
}

int pf_seg_handoff_path(const char *dir, const char *job, int task, char *buf, size_t len) {
    size_t room = sizeof(((struct sockaddr_un *)0)->sun_path);
    int n = snprintf(buf, len, "%s/%s-ps-%d.sock", dir, job, task);
    return n < 0 || (size_t)n >= len || (size_t)n >= room ? -1 : 0;
}

const char *pf_seg_handoff_socket(const pf_seg_handoff *h) {
    return h->path;
}

uint64_t pf_seg_handoff_refused(const pf_seg_handoff *h) {
    return __atomic_load_n(&h->refused, __ATOMIC_RELAXED);
}

static void refuse(pf_seg_handoff *h, const char *why) {
    uint64_t n = __atomic_add_fetch(&h->refused, 1, __ATOMIC_RELAXED);
    if (n <= REFUSALS_LOGGED || n % 1000 == 0)
        fprintf(stderr, "%s: segment handoff refused (%llu so far): %s\n", h->who,
                (unsigned long long)n, why);
}

/* 1 when the peer on socket fd runs as this process's user. */
static int same_user(int fd) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == geteuid();
}

/* Keeps fd under a fresh handle (the oldest descriptor closed when every slot is taken, the
 * expired ones on the way). 0 when no handle could be made (fd closed). */
static uint32_t keep(pf_seg_handoff *h, int fd) {
    uint32_t handle = 0;
    uint8_t nonce[PF_WIRE_NONCE_SIZE];
    pf_error err;
    while (handle == 0) {
        if (pf_wire_nonce(nonce, &err) != PF_OK) {
            close(fd);
            return 0;
        }
        memcpy(&handle, nonce, sizeof handle);
    }
    double now = pf_clock_now();
    pthread_mutex_lock(&h->mu);
    int pick = -1, oldest = 0;
    for (int i = 0; i < PF_SEG_HANDOFF_SLOTS; i++) {
        slot *s = &h->slots[i];
        if (s->handle && now - s->at > PF_SEG_HANDOFF_TTL) {
            close(s->fd);
            s->handle = 0;
        }
        if (!s->handle && pick < 0)
            pick = i;
        if (s->handle && s->at < h->slots[oldest].at)
            oldest = i;
    }
    for (int i = 0; i < PF_SEG_HANDOFF_SLOTS; i++) /* unique among those kept, never 0 */
        if (h->slots[i].handle == handle) {
            handle = handle + 1 ? handle + 1 : 1;
            i = -1;
        }
    if (pick < 0) { /* full: the oldest unclaimed descriptor goes */
        close(h->slots[oldest].fd);
        pick = oldest;
    }
    h->slots[pick] = (slot){handle, fd, now};
    pthread_mutex_unlock(&h->mu);
    return handle;
}

/* One connection: its descriptor kept and its handle answered, or refused. */
static void serve_one(pf_seg_handoff *h, int c) {
    if (!same_user(c)) {
        refuse(h, "the peer runs as another user");
        return;
    }
    struct pollfd p = {.fd = c, .events = POLLIN};
    if (poll(&p, 1, RECV_WAIT_MS) <= 0) {
        refuse(h, "the peer sent nothing within a second");
        return;
    }
    char byte;
    struct iovec iov = {&byte, 1};
    union {
        char buf[CMSG_SPACE(MAX_FDS_IN_MSG * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(c, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    int fds[MAX_FDS_IN_MSG], n_fds = 0;
    for (struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&m) : NULL; cm; cm = CMSG_NXTHDR(&m, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (n_fds < MAX_FDS_IN_MSG)
                fds[n_fds++] = fd;
            else
                close(fd);
        }
    }
    if (n != 1 || n_fds != 1 || (m.msg_flags & MSG_CTRUNC)) {
        for (int i = 0; i < n_fds; i++)
            close(fds[i]);
        refuse(h, n <= 0       ? "the peer closed or failed before sending"
                  : n_fds != 1 ? "a message without exactly one descriptor"
                               : "a message of the wrong shape");
        return;
    }
    uint32_t handle = keep(h, fds[0]);
    if (!handle) {
        refuse(h, "no random handle could be made");
        return;
    }
    uint8_t out[4] = {(uint8_t)(handle >> 24), (uint8_t)(handle >> 16), (uint8_t)(handle >> 8),
                      (uint8_t)handle};
    if (send(c, out, sizeof out, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof out)
        close(pf_seg_handoff_take(h, handle)); /* nobody learns the handle: not kept */
}

static void *listener(void *arg) {
    pf_seg_handoff *h = arg;
    while (!__atomic_load_n(&h->stopping, __ATOMIC_ACQUIRE)) {
        struct pollfd p = {.fd = h->lfd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EMFILE || errno == ENFILE)
                pf_clock_sleep(0.1); /* out of descriptors: let the ps close some first */
            continue;
        }
        serve_one(h, c);
        close(c);
    }
    return NULL;
}

pf_status pf_seg_handoff_listen(const char *dir, const char *job, int task, const char *who,
                                pf_seg_handoff **out, pf_error *err) {
    *out = NULL;
    pf_seg_handoff *h = pf_calloc(1, sizeof *h);
    if (!h)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    if (pf_seg_handoff_path(dir, job, task, h->path, sizeof h->path) != 0) {
        pf_free(h);
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "PSFLOW_SHM_DIR: %s/%s-ps-%d.sock is too long for a Unix socket", dir,
                            job, task);
    }
    snprintf(h->who, sizeof h->who, "%s", who);
    pthread_mutex_init(&h->mu, NULL);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, h->path, strlen(h->path) + 1);
    h->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const char *step = h->lfd < 0 ? "socket" : NULL;
    struct stat st;
    /* A socket left by an earlier incarnation of this ps is replaced; any other file is not. */
    if (!step && lstat(h->path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(h->path);
    if (!step && bind(h->lfd, (struct sockaddr *)&a, sizeof a) != 0)
        step = "bind";
    else if (!step && chmod(h->path, 0600) != 0) /* only this user may connect */
        step = "chmod";
    else if (!step && lstat(h->path, &st) != 0)
        step = "lstat";
    if (!step) {
        h->dev = st.st_dev;
        h->ino = st.st_ino;
    }
    if (!step && listen(h->lfd, 64) != 0)
        step = "listen";
    if (!step && pthread_create(&h->thread, NULL, listener, h) != 0) {
        errno = EAGAIN;
        step = "thread";
    }
    if (step) {
        int e = errno;
        if (h->lfd >= 0) {
            close(h->lfd);
            if (strcmp(step, "bind") != 0)
                unlink(h->path);
        }
        pthread_mutex_destroy(&h->mu);
        pf_error_set(err, PF_ERR_IO, NULL, "segment handoff socket %s: %s: %s", h->path, step,
                     strerror(e));
        pf_free(h);
        return PF_ERR_IO;
    }
    *out = h;
    return PF_OK;
}

int pf_seg_handoff_take(pf_seg_handoff *h, uint32_t handle) {
    if (!h || handle == 0)
        return -1;
    int fd = -1;
    double now = pf_clock_now();
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < PF_SEG_HANDOFF_SLOTS && fd < 0; i++)
        if (h->slots[i].handle == handle) {
            if (now - h->slots[i].at <= PF_SEG_HANDOFF_TTL)
                fd = h->slots[i].fd;
            else
                close(h->slots[i].fd);
            h->slots[i].handle = 0;
        }
    pthread_mutex_unlock(&h->mu);
    return fd;
}

void pf_seg_handoff_close(pf_seg_handoff *h) {
    if (!h)
        return;
    __atomic_store_n(&h->stopping, 1, __ATOMIC_RELEASE);
    pthread_join(h->thread, NULL);
    close(h->lfd);
    /* A newer ps of the same job and task (a replacement) may have bound the path since. */
    struct stat st;
    if (lstat(h->path, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino)
        unlink(h->path);
    for (int i = 0; i < PF_SEG_HANDOFF_SLOTS; i++)
        if (h->slots[i].handle)
            close(h->slots[i].fd);
    pthread_mutex_destroy(&h->mu);
    pf_free(h);
}

pf_status pf_seg_handoff_send(const char *dir, const char *job, int task, int fd, double timeout,
                              uint32_t *handle, pf_error *err) {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (pf_seg_handoff_path(dir, job, task, path, sizeof path) != 0)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "PSFLOW_SHM_DIR: %s/%s-ps-%d.sock is too long for a Unix socket", dir,
                            job, task);
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
        return pf_error_set(err, PF_ERR_NOT_FOUND, NULL, "no socket %s (no such ps on this host)",
                            path);
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        return pf_error_set(err, PF_ERR_UNAVAILABLE, NULL, "socket: %s", strerror(errno));
    struct timeval tv = {(time_t)timeout, (suseconds_t)((timeout - (double)(time_t)timeout) * 1e6)};
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    pf_status result = PF_OK;
    if (connect(c, (struct sockaddr *)&a, sizeof a) != 0) {
        result = pf_error_set(
            err, errno == ENOENT || errno == ECONNREFUSED ? PF_ERR_NOT_FOUND : PF_ERR_UNAVAILABLE,
            NULL, "%s: %s", path, strerror(errno));
        close(c);
        return result;
    }
    if (!same_user(c)) {
        close(c);
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "%s is another user's socket: the segment is not handed over", path);
    }
    char byte = 'S';
    struct iovec iov = {&byte, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    uint8_t in[4];
    size_t got = 0;
    if (sendmsg(c, &m, MSG_NOSIGNAL) != 1)
        result = pf_error_set(err, PF_ERR_UNAVAILABLE, NULL, "%s: sending the descriptor: %s", path,
                              strerror(errno));
    while (result == PF_OK && got < sizeof in) {
        ssize_t n = recv(c, in + got, sizeof in - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else
            result = pf_error_set(err, PF_ERR_UNAVAILABLE, NULL, "%s: no handle in answer: %s",
                                  path, n == 0 ? "the ps closed the connection" : strerror(errno));
    }
    close(c);
    if (result != PF_OK)
        return result;
    *handle = (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
    if (*handle == 0)
        return pf_error_set(err, PF_ERR_UNAVAILABLE, NULL, "%s answered handle 0", path);
    return PF_OK;
}
