/* counting_alloc.c - the counting, failing test allocator (see counting_alloc.h). */
#include "tests/support/counting_alloc.h"

#include <stdlib.h>

#include "psflow/mem.h"

long alloc_count;
long alloc_refused;
long alloc_live;
size_t alloc_largest;
static long alloc_budget = -1; /* < 0: never fail */

/* Whether an allocation of n bytes is granted; counts it either way. */
static int grant(size_t n) {
    if (n > alloc_largest)
        alloc_largest = n;
    if (alloc_budget >= 0 && alloc_count >= alloc_budget) {
        alloc_refused++;
        return 0;
    }
    alloc_count++;
    return 1;
}

void *counting_malloc(size_t n) {
    void *p = grant(n) ? malloc(n) : NULL;
    if (p)
        alloc_live++;
    return p;
}

void *counting_realloc(void *p, size_t n) {
    void *q = grant(n) ? realloc(p, n) : NULL;
    if (q && !p)
        alloc_live++;
    return q;
}

void counting_free(void *p) {
    if (p)
        alloc_live--;
    free(p);
}

static const pf_allocator counting = {counting_malloc, counting_realloc, counting_free};

void counting_budget(long budget) {
    alloc_count = 0;
    alloc_refused = 0;
    alloc_budget = budget;
}

void use_counting(long budget) {
    counting_budget(budget);
    alloc_live = 0;
    alloc_largest = 0;
    pf_mem_set_allocator(&counting);
}

void use_libc(void) {
    pf_mem_set_allocator(NULL);
    alloc_budget = -1;
}
