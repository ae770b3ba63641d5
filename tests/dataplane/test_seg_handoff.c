/* test_seg_handoff.c - a segment handed to a ps as a descriptor over a Unix socket
 * (psflow/seg_handoff.h), and what the ps maps from it (pf_segment_open_fd): the memory is
 * shared; a handle is claimed once; the ps refuses a descriptor that is no psflow segment, a
 * message with two descriptors or none, and a peer that sends nothing (and goes on serving
 * the next); it keeps at most PF_SEG_HANDOFF_SLOTS descriptors and leaks none; a missing socket,
 * a path too long and another file at the socket's place each get their error. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "psflow/seg_handoff.h"
#include "psflow/segment.h"

#define LIMIT (1u << 20)

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/psflow-handoff-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return rmdir(dir);
}

static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void test_hand_over_and_map(void **state) {
    (void)state;
    pf_seg_handoff *h;
    pf_error err;
    assert_int_equal(pf_seg_handoff_listen(dir, "job-a", 1, "test", &h, &err), PF_OK);
    char path[128];
    assert_int_equal(pf_seg_handoff_path(dir, "job-a", 1, path, sizeof path), 0);
    assert_string_equal(pf_seg_handoff_socket(h), path);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 077, 0); /* only this user may connect */

    pf_segment w, p;
    assert_int_equal(pf_segment_create(4096, &w, &err), PF_OK);
    uint32_t handle = 0;
    assert_int_equal(pf_seg_handoff_send(dir, "job-a", 1, w.fd, 2.0, &handle, &err), PF_OK);
    assert_int_not_equal(handle, 0);
    assert_int_equal(pf_seg_handoff_take(h, handle + 1), -1); /* not a handle it gave */
    int fd = pf_seg_handoff_take(h, handle);
    assert_true(fd >= 0);
    assert_int_equal(pf_seg_handoff_take(h, handle), -1); /* claimed once */
    assert_int_equal(pf_seg_handoff_take(h, 0), -1);

    uint8_t wrong[PF_WIRE_SEG_TOKEN_SIZE];
    memcpy(wrong, w.token, sizeof wrong);
    wrong[0] ^= 1;
    assert_int_equal(pf_segment_open_fd(fd, 4096, wrong, LIMIT, &p, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "token"));
    assert_int_equal(pf_segment_open_fd(fd, 8192, w.token, LIMIT, &p, &err), PF_ERR_INVALID);
    assert_int_equal(pf_segment_open_fd(fd, 4096, w.token, 1024, &p, &err), PF_ERR_INVALID);
    assert_int_equal(pf_segment_open_fd(fd, 4096, w.token, LIMIT, &p, &err), PF_OK);
    close(fd); /* the mapping does not need it */
    float *wv = (float *)(void *)(w.base + 64), *pv = (float *)(void *)(p.base + 64);
    wv[5] = 2.5f;
    assert_true(pv[5] == 2.5f);
    pv[9] = -1.0f;
    assert_true(wv[9] == -1.0f);
    pf_segment_close(&p);
    pf_segment_close(&w);
    assert_int_equal(pf_seg_handoff_refused(h), 0);
    pf_seg_handoff_close(h);
    assert_int_not_equal(lstat(path, &st), 0); /* the socket is gone */
}

/* A descriptor that is no psflow segment goes across (the socket does not look), but the ps
 * maps none of them. */
static void test_other_descriptors_refused(void **state) {
    (void)state;
    pf_seg_handoff *h;
    pf_error err;
    assert_int_equal(pf_seg_handoff_listen(dir, "job-b", 0, "test", &h, &err), PF_OK);
    char file[128];
    snprintf(file, sizeof file, "%s/plain", dir);
    int f = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(f >= 0);
    assert_int_equal(ftruncate(f, 4096), 0);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    int sends[] = {f, pipefd[0]};
    for (int i = 0; i < 2; i++) {
        uint32_t handle;
        assert_int_equal(pf_seg_handoff_send(dir, "job-b", 0, sends[i], 2.0, &handle, &err), PF_OK);
        int fd = pf_seg_handoff_take(h, handle);
        assert_true(fd >= 0);
        pf_segment p;
        uint8_t token[PF_WIRE_SEG_TOKEN_SIZE] = {0};
        assert_int_equal(pf_segment_open_fd(fd, 4096, token, LIMIT, &p, &err), PF_ERR_INVALID);
        assert_non_null(strstr(err.message, "not a psflow segment"));
        assert_null(p.base);
        close(fd);
    }
    close(f);
    close(pipefd[0]);
    close(pipefd[1]);
    unlink(file);
    pf_seg_handoff_close(h);
}

static int connect_to(const char *path) {
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof a), 0);
    return c;
}

/* Sends one byte carrying n copies of fd; returns what the ps answered (bytes read). */
static ssize_t send_fds(const char *path, int fd, int n) {
    int c = connect_to(path);
    int fds[4] = {fd, fd, fd, fd};
    char byte = 'S';
    struct iovec iov = {&byte, 1};
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n > 0) {
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, (size_t)n * sizeof(int));
    }
    assert_int_equal(sendmsg(c, &m, 0), 1);
    char in[8];
    ssize_t got = recv(c, in, sizeof in, 0);
    close(c);
    return got;
}

static void test_bad_peers(void **state) {
    (void)state;
    pf_seg_handoff *h;
    pf_error err;
    int before = open_fds();
    assert_int_equal(pf_seg_handoff_listen(dir, "job-c", 2, "test", &h, &err), PF_OK);
    pf_segment w;
    assert_int_equal(pf_segment_create(4096, &w, &err), PF_OK);
    const char *path = pf_seg_handoff_socket(h);
    assert_int_equal(send_fds(path, w.fd, 0), 0); /* no descriptor: closed without a handle */
    assert_int_equal(send_fds(path, w.fd, 2), 0); /* two: the same */
    assert_int_equal(pf_seg_handoff_refused(h), 2);
    /* a peer that sends nothing holds the ps a second at most; the next one is served */
    int silent = connect_to(path);
    uint32_t handle;
    assert_int_equal(pf_seg_handoff_send(dir, "job-c", 2, w.fd, 5.0, &handle, &err), PF_OK);
    assert_int_equal(pf_seg_handoff_refused(h), 3);
    close(silent);
    int fd = pf_seg_handoff_take(h, handle);
    assert_true(fd >= 0);
    close(fd);
    /* more descriptors than slots: the oldest go, none leaks */
    uint32_t first = 0, last = 0;
    for (int i = 0; i < PF_SEG_HANDOFF_SLOTS + 10; i++) {
        assert_int_equal(pf_seg_handoff_send(dir, "job-c", 2, w.fd, 2.0, &last, &err), PF_OK);
        if (i == 0)
            first = last;
    }
    assert_int_equal(pf_seg_handoff_take(h, first), -1);
    fd = pf_seg_handoff_take(h, last);
    assert_true(fd >= 0);
    close(fd);
    pf_seg_handoff_close(h);
    pf_segment_close(&w);
    assert_int_equal(open_fds(), before);
}

static void test_errors(void **state) {
    (void)state;
    pf_error err;
    uint32_t handle;
    assert_int_equal(pf_seg_handoff_send(dir, "nobody", 0, 0, 1.0, &handle, &err),
                     PF_ERR_NOT_FOUND);
    char long_job[120];
    memset(long_job, 'j', sizeof long_job - 1);
    long_job[sizeof long_job - 1] = '\0';
    pf_seg_handoff *h;
    assert_int_equal(pf_seg_handoff_listen(dir, long_job, 0, "test", &h, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "too long"));
    assert_int_equal(pf_seg_handoff_send(dir, long_job, 0, 0, 1.0, &handle, &err), PF_ERR_INVALID);
    /* a file that is not a socket is never replaced */
    char path[128];
    assert_int_equal(pf_seg_handoff_path(dir, "job-d", 0, path, sizeof path), 0);
    int f = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(f >= 0);
    close(f);
    assert_int_equal(pf_seg_handoff_listen(dir, "job-d", 0, "test", &h, &err), PF_ERR_IO);
    assert_int_equal(pf_seg_handoff_send(dir, "job-d", 0, 0, 1.0, &handle, &err), PF_ERR_NOT_FOUND);
    unlink(path);
    /* a socket left by an earlier ps is replaced */
    assert_int_equal(pf_seg_handoff_listen(dir, "job-d", 0, "test", &h, &err), PF_OK);
    pf_seg_handoff *again;
    assert_int_equal(pf_seg_handoff_listen(dir, "job-d", 0, "test", &again, &err), PF_OK);
    pf_seg_handoff_close(h); /* the older one leaves the newer one's socket in place */
    pf_segment w;
    assert_int_equal(pf_segment_create(4096, &w, &err), PF_OK);
    assert_int_equal(pf_seg_handoff_send(dir, "job-d", 0, w.fd, 2.0, &handle, &err), PF_OK);
    int fd = pf_seg_handoff_take(again, handle);
    assert_true(fd >= 0);
    close(fd);
    pf_segment_close(&w);
    pf_seg_handoff_close(again);
    struct stat st;
    assert_int_not_equal(lstat(path, &st), 0);
    unsetenv("PSFLOW_SHM_DIR");
    assert_null(pf_seg_handoff_dir());
    setenv("PSFLOW_SHM_DIR", "", 1);
    assert_null(pf_seg_handoff_dir());
    setenv("PSFLOW_SHM_DIR", "/run/psflow/segments", 1);
    assert_string_equal(pf_seg_handoff_dir(), "/run/psflow/segments");
    unsetenv("PSFLOW_SHM_DIR");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_over_and_map),
        cmocka_unit_test(test_other_descriptors_refused),
        cmocka_unit_test(test_bad_peers),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
