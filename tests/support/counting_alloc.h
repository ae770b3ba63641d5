/* counting_alloc.h - the unit tests' allocator: it counts allocations and live blocks, can
 * fail every allocation after a budget, and records what was refused, to check that a module
 * allocates nothing once warm, turns every failed allocation into PF_ERR_NOMEM and leaks
 * nothing on the way out. Install it with use_counting(), restore libc with use_libc(). Not
 * thread-safe, like pf_mem_set_allocator.
 */
#ifndef PSFLOW_TESTS_COUNTING_ALLOC_H
#define PSFLOW_TESTS_COUNTING_ALLOC_H

#include <stddef.h>

/* Since the last use_counting() (alloc_count and alloc_refused: or counting_budget()): */
extern long alloc_count;     /* allocations (malloc and realloc) granted */
extern long alloc_refused;   /* allocations refused because the budget was spent */
extern long alloc_live;      /* blocks granted and not yet freed through counting_free */
extern size_t alloc_largest; /* the largest size asked for, granted or not */

/* Installs the counting allocator as psflow's (mem.h) with every counter at 0 and the
 * budget: with budget >= 0 every allocation after the first `budget` ones fails (returns
 * NULL); with budget < 0 none does. */
void use_counting(long budget);

/* A new budget counted from now (alloc_count and alloc_refused restart at 0; alloc_live and
 * alloc_largest go on), e.g. to let a test set up freely and then fail its k-th allocation.
 * Installs nothing. */
void counting_budget(long budget);

/* Restores the libc allocator and lifts the budget. */
void use_libc(void);

/* The allocator's functions, for a library with its own hook (jansson's
 * json_set_alloc_funcs); they share the budget and the counters. */
void *counting_malloc(size_t n);
void *counting_realloc(void *p, size_t n);
void counting_free(void *p);

#endif
