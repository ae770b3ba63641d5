/* dyn_table.h - an embedding table that grows with the data: rows keyed by a 64-bit id (an
 * integer id as it is, or a 64-bit hash of a string; no modulo, so two ids never share a
 * row), created when an id is admitted and dropped when evicted, each with its optimizer
 * slot rows beside it.
 *
 *   admission  an id without a row gets one on an update once it has been updated min_count
 *              times (counted in a count-min sketch of a stated size, so ids seen once cost
 *              no row; its counters halve now and then, so that old counts fade), each such
 *              update admitting it with `probability`; until then it reads as zeros and its
 *              gradient is dropped (counted as refused);
 *   eviction   rows not updated for steps_to_live global steps are dropped on request
 *              (pf_dyn_evict_stale); at max_rows the least recently updated row makes room
 *              for a new one; an evicted row frees its values and its slots;
 *   order      every decision depends only on the configuration, the ids and the steps
 *              given, never on addresses or timing: two tables fed the same updates hold the
 *              same rows with the same values (a new row's values come from (seed, id)).
 *
 * Memory: rows live in arrays that double up to max_rows; ids in an open-addressing hash
 * (linear probing, at most 3/4 full) that doubles likewise; the least-recently-updated order
 * is a doubly linked list of row indices. pf_dyn_bytes_bound says what a table can reach.
 * Speed: the batch calls (pf_dyn_gather, pf_dyn_update_batch) work on many ids at once,
 * asking for the hash slot and the row of ids ahead of the one they work on, so that the
 * cache misses of a batch overlap instead of following one another.
 * Steps: the steps given to updates and restores never decrease (the order is by step) and
 * are above INT64_MIN. Not thread-safe: the caller serialises calls. A row pointer it returns stays
 * valid until the next call that may create or drop a row (pf_dyn_update_row, pf_dyn_update_batch,
 * pf_dyn_insert, pf_dyn_evict_stale).
 */
#ifndef PSFLOW_DYN_TABLE_H
#define PSFLOW_DYN_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "psflow/status.h"

#define PF_DYN_MAX_SLOTS     2           /* optimizer slot rows per row (adam: m and v) */
#define PF_DYN_MAX_ROWS      (1ll << 31) /* rows are indexed by 32 bits */
#define PF_DYN_MAX_MIN_COUNT 255         /* the sketch's counters are 8 bits */

typedef struct pf_dyn_config {
    int dim;               /* floats per row, >= 1 */
    int slots;             /* optimizer slot rows per row, 0 .. PF_DYN_MAX_SLOTS (slot_init) */
    int64_t max_rows;      /* 1 .. PF_DYN_MAX_ROWS - 1 */
    int min_count;         /* an id is admitted on its min_count-th update; 0 or 1: its first */
    double probability;    /* (0, 1]: an update that meets min_count admits with it */
    int64_t steps_to_live; /* > 0: pf_dyn_evict_stale drops rows idle that long; 0: never */
    /* the count-min sketch that counts the updates of ids without a row, for min_count > 1
     * or probability < 1 (a draw per update): 4 rows of 8-bit counters in this many bytes
     * (rounded down to 4 times a power of two, at least 256); unused otherwise */
    size_t sketch_bytes;
    uint64_t seed; /* new rows' values and the probability draws */
    /* a new row: uniform in [-init_limit, init_limit] for its first init_width floats
     * (0 .. dim), 0 after */
    float init_limit;
    int init_width;
    /* a new row's slot rows hold this value each (adagrad's initial accumulator) [0] */
    float slot_init[PF_DYN_MAX_SLOTS];
} pf_dyn_config;

typedef struct pf_dyn_stats {
    int64_t rows;     /* rows now */
    int64_t admitted; /* rows created by an update (pf_dyn_insert's not counted) */
    int64_t refused;  /* updates of an id without a row that did not admit it */
    int64_t evicted;  /* rows dropped: idle too long, or to make room */
    int64_t lookups;  /* pf_dyn_find calls */
    int64_t misses;   /* of those, ids without a row */
    int64_t bytes;    /* memory the table holds now */
} pf_dyn_stats;

typedef struct pf_dyn_table pf_dyn_table;

/* A row as pf_dyn_next shows it (borrowed pointers). */
typedef struct pf_dyn_row {
    uint64_t id;
    int64_t last_step; /* the step of its latest update */
    const float *values;
    const float *slots[PF_DYN_MAX_SLOTS];
} pf_dyn_row;

/* --- create / destroy --- */

/* Checks cfg: PF_ERR_INVALID with why[cap] saying which field is out of range. */
pf_status pf_dyn_config_check(const pf_dyn_config *cfg, char *why, size_t cap);

/* The most memory a table of cfg holds: its rows and slots at max_rows, the hash and the
 * order at their largest, and the sketch (what an admission check counts). */
int64_t pf_dyn_bytes_bound(const pf_dyn_config *cfg);

/* A new, empty table (*out new). PF_ERR_INVALID for a cfg pf_dyn_config_check refuses,
 * PF_ERR_NOMEM. */
pf_status pf_dyn_create(const pf_dyn_config *cfg, pf_dyn_table **out);
void pf_dyn_destroy(pf_dyn_table *t);

/* --- use --- */

/* A lookup (a pull): id's row of dim floats (borrowed), or NULL when id has none (it reads
 * as zeros). Counts a lookup, and a miss. */
const float *pf_dyn_find(pf_dyn_table *t, uint64_t id);

/* Whether id has a row, counting nothing (a restore's check). */
bool pf_dyn_has(const pf_dyn_table *t, uint64_t id);

/* A pull's gather: row i of out (n rows of dim floats) gets ids[i]'s row, or zeros when it
 * has none. Counts n lookups and the misses. */
void pf_dyn_gather(pf_dyn_table *t, const uint64_t *ids, size_t n, float *out);

/* pf_dyn_gather counting nothing (an evaluation's lookups, which are not training's). */
void pf_dyn_gather_uncounted(pf_dyn_table *t, const uint64_t *ids, size_t n, float *out);

/* An update of id at global step `step` (an apply): *row the row to update and slots[k] its
 * slot rows (borrowed), creating the row when this update admits id (at max_rows the least
 * recently updated row is evicted first, unless it too was updated at `step` or later: then
 * every row is of this step and the id is refused, so that no row a step is updating is
 * dropped under it); *row NULL when id has no row and this update does not admit it (its
 * gradient is to be dropped). The row becomes the most recently updated, at `step`.
 * PF_ERR_NOMEM (the table unchanged, *row NULL). */
pf_status pf_dyn_update_row(pf_dyn_table *t, uint64_t id, int64_t step, float **row, float **slots);

/* pf_dyn_update_row for ids[0..n) in turn: rows[i] (NULL: not admitted) and, with slots,
 * slots[i * PF_DYN_MAX_SLOTS + k]; all of them valid together, until the next call that may
 * create or drop a row. Room for n new rows is made first: PF_ERR_NOMEM then, the table
 * unchanged. An id named twice gets the same row twice once it has one (with min_count,
 * its first occurrences may be refused and a later one admit it). */
pf_status pf_dyn_update_batch(pf_dyn_table *t, const uint64_t *ids, size_t n, int64_t step,
                              float **rows, float **slots);

/* Drops the rows whose latest update is older than step - steps_to_live (none when
 * steps_to_live is 0); returns how many. O(rows dropped), and when that leaves the row
 * arrays at most a quarter full, O(rows) once to give their memory back (the rows move:
 * a memory use that falls with the rows). */
int64_t pf_dyn_evict_stale(pf_dyn_table *t, int64_t step);

/* Puts a row as it was (a restore, in pf_dyn_next's order): id's values (dim floats), slots[k]
 * (NULL: slot_init[k]) and the step of its latest update, replacing a row id has; no admission. At
 * max_rows the least recently updated row makes room. PF_ERR_INVALID for a step below the
 * newest row's (out of order), PF_ERR_NOMEM (the table unchanged either way). */
pf_status pf_dyn_insert(pf_dyn_table *t, uint64_t id, int64_t last_step, const float *values,
                        const float *const *slots);

/* Calls fn(row, slots, ctx) for every row whose latest update is before `step` (the rows an
 * update at `step` did not name), in row-array order: a dense optimizer's move of the rows a
 * batch did not name (adam, whose every row moves each step). Changes no row's step or place
 * in the order, so the rows it moves are evicted as if it had not. O(rows handed out). */
void pf_dyn_for_each_idle(pf_dyn_table *t, int64_t step,
                          void (*fn)(float *row, float *const *slots, void *ctx), void *ctx);

/* --- query --- */

/* The next row after *cursor (start at 0), least recently updated first; false after the
 * last. The table must not change during a walk. */
bool pf_dyn_next(const pf_dyn_table *t, int64_t *cursor, pf_dyn_row *out);

pf_dyn_stats pf_dyn_stats_get(const pf_dyn_table *t);

/* Which of n_ps ps tasks (n_ps >= 1) holds id's row: a stable hash of the id alone, the same
 * in every process and every run, spread evenly, and unrelated to the table's own hash. */
int pf_dyn_owner(uint64_t id, int n_ps);

/* --- admission state (what a checkpoint keeps beside the rows) --- */

/* The sketch's counters as they are (borrowed, *bytes of them; NULL and 0 when admission
 * does not count), the counts since they last halved and the probability draws made. */
typedef struct pf_dyn_admission {
    const uint8_t *sketch;
    size_t bytes;
    uint64_t counted;
    uint64_t draws;
} pf_dyn_admission;

pf_dyn_admission pf_dyn_admission_get(const pf_dyn_table *t);

/* Adds a's counters to the table's, each saturating at 255, and takes the larger of the two
 * `counted` and `draws`: into an empty table this restores a's state exactly; the sum of
 * several tables' sketches (the ps tasks a restore repartitions) never counts an id below
 * what its own ps had counted. PF_ERR_INVALID when a.bytes differs from the table's. */
pf_status pf_dyn_admission_add(pf_dyn_table *t, const pf_dyn_admission *a);

/* Sets the cumulative counters admitted, refused and evicted (a restore: rows, lookups,
 * misses and bytes are the table's own). */
void pf_dyn_stats_restore(pf_dyn_table *t, const pf_dyn_stats *s);

const pf_dyn_config *pf_dyn_config_get(const pf_dyn_table *t);

#endif
