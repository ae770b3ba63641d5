/* mem.h - checked allocation with a replaceable allocator, and the memory a process may use.
 *
 * Anything sized by the network or by data is allocated through these functions, which
 * return NULL on failure instead of aborting. Tests install a failing allocator with
 * pf_mem_set_allocator() to check that every caller turns NULL into PF_ERR_NOMEM.
 * pf_mem_set_allocator is not thread-safe: call it before starting threads.
 */
#ifndef PSFLOW_MEM_H
#define PSFLOW_MEM_H

#include <stddef.h>
#include <stdint.h>

typedef struct pf_allocator {
    void *(*malloc_fn)(size_t size);
    void *(*realloc_fn)(void *ptr, size_t size);
    void (*free_fn)(void *ptr);
} pf_allocator;

/* Installs `a` (copied), or restores the libc allocator when a is NULL. */
void pf_mem_set_allocator(const pf_allocator *a);

/* Returns NULL on failure or when count * size overflows. Zero sizes allocate 1 byte so a
 * successful call never returns NULL. */
void *pf_malloc(size_t size);
void *pf_calloc(size_t count, size_t size);
void *pf_mallocarray(size_t count, size_t size);
/* Like realloc; on failure the old block is left untouched and NULL is returned. */
void *pf_realloc(void *ptr, size_t size);
void pf_free(void *ptr);
/* Copy of a NUL-terminated string, or NULL on failure. */
char *pf_strdup(const char *s);

/* Gives the whole pages within [p, p + bytes) of a block the caller keeps back to the kernel
 * (madvise MADV_DONTNEED): their contents are lost (private anonymous memory, as malloc's,
 * reads as zeros when touched again). For memory a block no longer needs the contents of,
 * such as rows evicted from a table. A hint: failure changes nothing. */
void pf_mem_release(void *p, size_t bytes);

/* Scattered rows, such as an embedding table's: a loop over them asks for the cache lines of
 * the row PF_PREFETCH_ROWS ahead of the one it works on. The rows lie over far more memory
 * than the caches hold, and without the hint each row waits for memory before the next one
 * can start (bench/RESULTS.md: a row push's update of 10,000 rows). */
#define PF_PREFETCH_ROWS 16

/* Asks for every cache line (64 bytes) that the `bytes` at p touch, to be read. */
static inline void pf_prefetch_read(const void *p, size_t bytes) {
    const char *end = (const char *)p + bytes;
    for (const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63); c < end; c += 64)
        __builtin_prefetch(c, 0, 3);
}

/* Asks for every cache line (64 bytes) that the `bytes` at p touch, to be written. */
static inline void pf_prefetch_write(const void *p, size_t bytes) {
    const char *end = (const char *)p + bytes;
    for (const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63); c < end; c += 64)
        __builtin_prefetch(c, 1, 3);
}

/* The memory this process may use, in bytes: MemTotal of /proc/meminfo, lowered to the limit
 * of its cgroup when there is one (v2 memory.max, v1 memory.limit_in_bytes). 0 when none of
 * them can be read. */
int64_t pf_mem_system_bytes(void);

#endif
