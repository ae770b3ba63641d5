/* counting_alloc.h - a pf_allocator for unit tests that counts allocations and can fail
 * after a budget, to check that a module allocates nothing once warm and turns every failed
 * allocation into PF_ERR_NOMEM. Install it with use_counting(), restore libc with
 * use_libc(). Not thread-safe, like pf_mem_set_allocator.
 */
#ifndef PSFLOW_TESTS_COUNTING_ALLOC_H
#define PSFLOW_TESTS_COUNTING_ALLOC_H

/* Allocations (malloc and realloc) made since use_counting(). */
extern long alloc_count;

/* Installs the counting allocator with alloc_count 0; with budget >= 0 every allocation
 * after the first `budget` ones fails (returns NULL). */
void use_counting(long budget);

/* Restores the libc allocator. */
void use_libc(void);

#endif
