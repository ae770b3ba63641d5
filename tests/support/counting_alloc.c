/* counting_alloc.c - the counting, failing test allocator (see counting_alloc.h). */
#include "tests/support/counting_alloc.h"

#include <stdlib.h>

#include "psflow/mem.h"

long alloc_count;
static long alloc_budget = -1; /* < 0: never fail */

static void *count_malloc(size_t n) {
    if (alloc_budget >= 0 && alloc_count >= alloc_budget)
        return NULL;
    alloc_count++;
    return malloc(n);
}

static void *count_realloc(void *p, size_t n) {
    if (alloc_budget >= 0 && alloc_count >= alloc_budget)
        return NULL;
    alloc_count++;
    return realloc(p, n);
}

static const pf_allocator counting = {count_malloc, count_realloc, free};

void use_counting(long budget) {
    alloc_count = 0;
    alloc_budget = budget;
    pf_mem_set_allocator(&counting);
}

void use_libc(void) {
    pf_mem_set_allocator(NULL);
    alloc_budget = -1;
}
