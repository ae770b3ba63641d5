/* mem.c - checked allocation behind a replaceable allocator (see mem.h). */
#include "psflow/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static pf_allocator current = {malloc, realloc, free};

void pf_mem_set_allocator(const pf_allocator *a) {
    if (a)
        current = *a;
    else
        current = (pf_allocator){malloc, realloc, free};
}

void *pf_malloc(size_t size) {
    return current.malloc_fn(size ? size : 1);
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
    return current.realloc_fn(ptr, size ? size : 1);
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
