/* test_segment.c - the shared segment of a worker and a ps on one host (psflow/segment.h):
 * what the worker makes, what the ps maps, and everything the ps refuses to open or map -
 * a wrong token, size or limit, an unsealed memfd, another memfd, a huge-page one (where the
 * kernel has huge pages), a plain file, a FIFO (without blocking), a device, a descriptor or
 * process that does not exist - which hosts are this one's, and PSFLOW_SHM. The ps side opens this
 * process's own descriptors through /proc, as it opens a worker's. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "psflow/segment.h"

#define LIMIT (1u << 20)

static void test_create_and_open(void **state) {
    (void)state;
    pf_segment w, p;
    pf_error err;
    assert_int_equal(pf_segment_create(4096, &w, &err), PF_OK);
    assert_non_null(w.base);
    assert_true(w.fd >= 0);
    assert_memory_equal(w.base, w.token, PF_WIRE_SEG_TOKEN_SIZE);
    int seals = fcntl(w.fd, F_GET_SEALS);
    assert_true(seals & F_SEAL_SHRINK);
    assert_true(seals & F_SEAL_GROW);
    assert_true(seals & F_SEAL_SEAL);
    assert_int_not_equal(ftruncate(w.fd, 100), 0); /* nobody can shrink it */
    assert_int_equal(
        pf_segment_open((uint32_t)getpid(), (uint32_t)w.fd, 4096, w.token, LIMIT, &p, &err), PF_OK);
    /* one memory: what either side writes, the other reads */
    float *wv = (float *)(void *)(w.base + 64), *pv = (float *)(void *)(p.base + 64);
    wv[3] = 1.5f;
    assert_true(pv[3] == 1.5f);
    pv[7] = -2.0f;
    assert_true(wv[7] == -2.0f);
    assert_true(pf_segment_holds(&w, wv, 4096 - 64));
    assert_false(pf_segment_holds(&w, wv, 4096 - 63));
    assert_false(pf_segment_holds(&w, w.base - 4, 4));
    pf_segment_close(&p);
    assert_null(p.base);
    pf_segment_close(&p); /* twice is harmless */
    pf_segment_close(&w);
    pf_segment zero;
    memset(&zero, 0, sizeof zero);
    pf_segment_close(&zero); /* fd 0 is not closed */
    assert_int_not_equal(fcntl(0, F_GETFD), -1);
}

static void expect_refused(uint32_t pid, uint32_t fd, uint64_t size, const uint8_t *token,
                           uint64_t limit, const char *why) {
    pf_segment p;
    pf_error err;
    pf_error_clear(&err);
    assert_int_equal(pf_segment_open(pid, fd, size, token, limit, &p, &err), PF_ERR_INVALID);
    assert_null(p.base);
    if (!strstr(err.message, why))
        fail_msg("refusal '%s' does not say '%s'", err.message, why);
}

static void test_refusals(void **state) {
    (void)state;
    pf_segment w;
    pf_error err;
    assert_int_equal(pf_segment_create(8192, &w, &err), PF_OK);
    uint32_t me = (uint32_t)getpid();
    uint8_t wrong[PF_WIRE_SEG_TOKEN_SIZE];
    memcpy(wrong, w.token, sizeof wrong);
    wrong[5] ^= 1;
    expect_refused(me, (uint32_t)w.fd, 8192, wrong, LIMIT, "token");
    expect_refused(me, (uint32_t)w.fd, 4096, w.token, LIMIT, "of 4096 bytes"); /* not its size */
    expect_refused(me, (uint32_t)w.fd, 8192, w.token, 4096, "this ps takes");  /* over the limit */
    expect_refused(me, (uint32_t)w.fd, 8, w.token, LIMIT,
                   "this ps takes");                            /* no room for the token */
    expect_refused(me, 987654, 8192, w.token, LIMIT, "/proc/"); /* no such descriptor */
    expect_refused(4000000000u, (uint32_t)w.fd, 8192, w.token, LIMIT, "/proc/"); /* no process */

    /* a psflow memfd nobody sealed: a peer could shrink it under the ps's mapping */
    int loose = memfd_create(PF_SEGMENT_NAME, MFD_CLOEXEC);
    assert_true(loose >= 0);
    assert_int_equal(ftruncate(loose, 8192), 0);
    uint8_t *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, loose, 0);
    assert_true(m != MAP_FAILED);
    memcpy(m, w.token, PF_WIRE_SEG_TOKEN_SIZE);
    expect_refused(me, (uint32_t)loose, 8192, w.token, LIMIT, "not sealed");
    munmap(m, 8192);
    close(loose);

    /* another memfd, sealed, of the right size and token: not a psflow segment */
    int other = memfd_create("other", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(other >= 0);
    assert_int_equal(ftruncate(other, 8192), 0);
    assert_int_equal(pwrite(other, w.token, PF_WIRE_SEG_TOKEN_SIZE, 0), PF_WIRE_SEG_TOKEN_SIZE);
    assert_int_equal(fcntl(other, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    expect_refused(me, (uint32_t)other, 8192, w.token, LIMIT, "not a psflow segment");
    close(other);

    /* a huge-page memfd of the right name: a hole punched in it could fault the ps */
    int huge = memfd_create(PF_SEGMENT_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
    if (huge >= 0) { /* only where the kernel has huge pages to give */
        if (ftruncate(huge, 2u << 20) == 0) {
            uint8_t *hm = mmap(NULL, 2u << 20, PROT_READ | PROT_WRITE, MAP_SHARED, huge, 0);
            if (hm != MAP_FAILED) {
                memcpy(hm, w.token, PF_WIRE_SEG_TOKEN_SIZE);
                fcntl(huge, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
                expect_refused(me, (uint32_t)huge, 2u << 20, w.token, 4u << 20, "huge-page");
                munmap(hm, 2u << 20);
            }
        }
        close(huge);
    }

    /* a plain file of the right size and token */
    char path[] = "/tmp/psflow-segment-XXXXXX";
    int plain = mkstemp(path);
    assert_true(plain >= 0);
    unlink(path);
    uint8_t page[8192] = {0};
    memcpy(page, w.token, PF_WIRE_SEG_TOKEN_SIZE);
    assert_int_equal(write(plain, page, sizeof page), (ssize_t)sizeof page);
    expect_refused(me, (uint32_t)plain, 8192, w.token, LIMIT, "not a psflow segment");
    close(plain);

    /* a FIFO: refused by what its link names, never opened (opening one would block) */
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    expect_refused(me, (uint32_t)pipefd[0], 8192, w.token, LIMIT, "not a psflow segment");
    close(pipefd[0]);
    close(pipefd[1]);
    /* a device */
    int null = open("/dev/null", O_RDONLY);
    assert_true(null >= 0);
    expect_refused(me, (uint32_t)null, 8192, w.token, LIMIT, "not a psflow segment");
    close(null);
    pf_segment_close(&w);
}

static void test_layout(void **state) {
    (void)state;
    size_t grads;
    /* 15 floats: 60 bytes, rounded up to 64, after the 64-byte head */
    assert_int_equal(pf_segment_bytes(15, &grads), 64 + 2 * 64);
    assert_int_equal(grads, 128);
    assert_int_equal(pf_segment_bytes(16, NULL), 64 + 2 * 64);
    assert_int_equal(pf_segment_bytes(17, &grads), 64 + 2 * 128);
    assert_int_equal(grads, 64 + 128);
    assert_int_equal(pf_segment_bytes(0, &grads), 64);
}

static void test_create_too_small(void **state) {
    (void)state;
    pf_segment w;
    pf_error err;
    assert_int_equal(pf_segment_create(PF_WIRE_SEG_TOKEN_SIZE, &w, &err), PF_ERR_INVALID);
    assert_null(w.base);
}

static void test_enabled(void **state) {
    (void)state;
    const char *off[] = {"off", "OFF", "0", "false", "no"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        setenv("PSFLOW_SHM", off[i], 1);
        assert_int_equal(pf_segment_enabled(), 0);
    }
    setenv("PSFLOW_SHM", "on", 1);
    assert_int_equal(pf_segment_enabled(), 1);
    unsetenv("PSFLOW_SHM");
    assert_int_equal(pf_segment_enabled(), 1);
}

static void test_host_is_local(void **state) {
    (void)state;
    assert_true(pf_segment_host_is_local("127.0.0.1"));
    assert_true(pf_segment_host_is_local("127.3.4.5"));
    assert_true(pf_segment_host_is_local("localhost"));
    assert_true(pf_segment_host_is_local("::1"));
    assert_false(pf_segment_host_is_local("192.0.2.1"));   /* TEST-NET-1: nobody's */
    assert_false(pf_segment_host_is_local("2001:db8::1")); /* documentation prefix */
    assert_false(pf_segment_host_is_local("no-such-host.invalid"));
    assert_false(pf_segment_host_is_local(NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_open), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_layout),          cmocka_unit_test(test_create_too_small),
        cmocka_unit_test(test_enabled),         cmocka_unit_test(test_host_is_local),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
