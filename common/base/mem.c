/* mem.c - checked allocation behind a replaceable allocator (see mem.h). */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE, MADV_DONTNEED */
#include "psflow/mem.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Blocks from this size up (a ps's tables and optimizer slots, a model's values) ask for
 * transparent huge pages: an embedding table of a GB is touched at random rows, and with 4 KiB
 * pages its first touch costs a page fault per 4 KiB and every row lookup a TLB miss
 * (bench/RESULTS.md, "Huge pages for tables"). Smaller blocks keep the default, so a
 * buffer touched in part does not hold 2 MiB pages. A no-op where the kernel's THP setting is
 * "never". */
#define HUGE_PAGE_MIN (32u << 20)
#define HUGE_PAGE     ((uintptr_t)2 << 20)

static void advise_huge_pages(void *p, size_t size) {
#ifdef MADV_HUGEPAGE
    uintptr_t start = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t end = ((uintptr_t)p + size) & ~(HUGE_PAGE - 1);
    if (end > start)
        (void)madvise((void *)start, end - start, MADV_HUGEPAGE); /* a hint: failure is fine */
#else
    (void)p;
    (void)size;
#endif
}

void pf_mem_release(void *p, size_t bytes) {
    long size = sysconf(_SC_PAGESIZE);
    if (size <= 0)
        return;
    uintptr_t page = (uintptr_t)size;
    uintptr_t start = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)p + bytes) & ~(page - 1);
    if (end > start)
        (void)madvise((void *)start, end - start, MADV_DONTNEED); /* a hint: failure is fine */
}

static pf_allocator current = {malloc, realloc, free};

void pf_mem_set_allocator(const pf_allocator *a) {
    if (a)
        current = *a;
    else
        current = (pf_allocator){malloc, realloc, free};
}

void *pf_malloc(size_t size) {
    void *p = current.malloc_fn(size ? size : 1);
    if (p && size >= HUGE_PAGE_MIN)
        advise_huge_pages(p, size);
    return p;
}

void *pf_mallocarray(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size)
        return NULL;
    return pf_malloc(count * size);
}

void *pf_calloc(size_t count, size_t size) {
    void *p = pf_mallocarray(count, size);
    if (p && count && size)
        memset(p, 0, count * size);
    return p;
}

void *pf_realloc(void *ptr, size_t size) {
    void *p = current.realloc_fn(ptr, size ? size : 1);
    if (p && size >= HUGE_PAGE_MIN) /* a table's row arrays grow by realloc */
        advise_huge_pages(p, size);
    return p;
}

void pf_free(void *ptr) {
    if (ptr)
        current.free_fn(ptr);
}

char *pf_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = pf_malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* The first number in the file at path (the whole file is one line for the cgroup files),
 * or -1 when it cannot be read or holds no number ("max"). */
static int64_t read_number(const char *path, const char *prefix) {
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    int64_t v = -1;
    while (fgets(line, sizeof line, f)) {
        if (prefix && strncmp(line, prefix, strlen(prefix)) != 0)
            continue;
        const char *p = line + (prefix ? strlen(prefix) : 0);
        while (*p == ' ' || *p == '\t')
            p++;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end != p && !errno && x >= 0)
            v = (int64_t)x;
        break;
    }
    fclose(f);
    return v;
}

int64_t pf_mem_system_bytes(void) {
    int64_t total = read_number("/proc/meminfo", "MemTotal:");
    if (total > 0) /* the file says kB */
        total = total > INT64_MAX / 1024 ? INT64_MAX : total * 1024;
    static const char *const limits[] = {"/sys/fs/cgroup/memory.max",
                                         "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        int64_t limit = read_number(limits[i], NULL);
        if (limit > 0 && (total <= 0 || limit < total))
            total = limit;
    }
    return total > 0 ? total : 0;
}
