/* spec_internal.h - private to common/job: the field tables that describe the job spec, shared
 * by the parser (spec.c) and the writer (spec_json.c), with the enums' spellings
 * (spec_names.c) and the cross-field checks (spec_checks.c) the tables name. See spec.c's
 * DESIGN note.
 */
#ifndef PSFLOW_JOB_SPEC_INTERNAL_H
#define PSFLOW_JOB_SPEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "psflow/spec.h"

#define COUNT(a)   (sizeof(a) / sizeof((a)[0]))
#define AT(member) offsetof(pf_job_spec, member)
#define BIT(v)     (1u << (v))
#define ALWAYS     (~0u)
#define NO_SLOT    SIZE_MAX /* a field that is validated and written back but not stored */
#define PTR_SIZE   sizeof(((pf_error *)0)->pointer) /* a JSON pointer's buffer */

typedef enum {
    K_NAME,   /* char[PF_NAME_MAX + 1]: the job name */
    K_INT,    /* int */
    K_INT64,  /* int64_t */
    K_UINT64, /* uint64_t, limited to the JSON integer range [0, INT64_MAX] */
    K_DOUBLE, /* double, range given by `real` */
    K_BOOL,   /* bool */
    K_ENUM,   /* an int-sized enum spelled names[min..max] */
    K_WIDTHS, /* int[] at `at`, entry count at `count_at`; each width 1..PF_MAX_UNITS */
    K_PATHS,  /* char *[] at `at`, entry count at `count_at`; each a non-empty string */
    K_OBJECT, /* a nested object described by `sub` */
    K_LIST,   /* objects described by `sub`, entry count at `count_at`: entry i lives `stride`
                 bytes after entry 0 at `at`, whose fields' offsets the sub table holds */
    K_DEVICE, /* "device": pf_device_spec[] at `at`, one per replica, the replica count at
                 `count_at`; each an enum spelled names[min..max], or "cuda:N" */
} kind;

/* R_UNIT: [0, 1); R_SCALE: (0, 1] */
typedef enum { R_ANY, R_POSITIVE, R_NONNEGATIVE, R_UNIT, R_SCALE } real_range;

typedef struct object_desc object_desc;

typedef struct field {
    const char *key;
    kind kind;
    size_t at;                /* offset of the value in pf_job_spec, or NO_SLOT */
    long long min, max;       /* integers: value range; enums: accepted values; arrays: count;
                                 K_BOOL: min 1 writes it in the JSON form only when true */
    double def;               /* default when absent (every integer default is exact) */
    real_range real;          /* K_DOUBLE */
    const char *const *names; /* K_ENUM: spelling of each value */
    size_t count_at;          /* K_WIDTHS, K_PATHS: offset of the int entry count;
                                 K_DEVICE: offset of the int replica count */
    const object_desc *sub;   /* K_OBJECT, K_LIST */
    size_t stride;            /* K_LIST */
    size_t present_at;        /* K_OBJECT absent unless given: its bool flag; 0 = always there
                                 (offset 0 is the name, never a flag) */
    unsigned only;            /* typed objects: type values it applies to; 0 = all */
    unsigned need;            /* type values for which it must be given; 0 = optional */
    bool quiet_default;       /* K_ENUM, K_DOUBLE: written in the JSON form only when not def */
} field;

struct object_desc {
    const field *fields;
    size_t n;
    bool typed; /* fields[0] is an enum whose value selects which other fields apply */
    pf_status (*check)(pf_job_spec *s, pf_error *err); /* cross-field rules, or NULL */
};

/* The top-level table (spec.c). */
extern const object_desc pf_spec_desc;

/* The spellings of each enum, indexed by its values (spec_names.c). */
extern const char *const pf_spec_model_names[];
extern const char *const pf_spec_activation_names[];
extern const char *const pf_spec_format_names[];
extern const char *const pf_spec_combiner_names[];
extern const char *const pf_spec_table_kind_names[];
extern const char *const pf_spec_optimizer_names[];
extern const char *const pf_spec_mode_names[];
extern const char *const pf_spec_nonfinite_names[];
extern const char *const pf_spec_on_error_names[];
extern const char *const pf_spec_split_names[];
extern const char *const pf_spec_strategy_names[];
extern const char *const pf_spec_partitioner_names[];
extern const char *const pf_spec_restart_names[];
extern const char *const pf_spec_device_names[];
extern const char *const pf_spec_decay_names[];

/* The cross-field checks of the typed objects and of the top level (spec_checks.c), run once
 * the object's own fields are in. Errors: PF_ERR_SPEC with err's pointer at the field. */
pf_status pf_spec_check_model(pf_job_spec *s, pf_error *err);
pf_status pf_spec_check_data(pf_job_spec *s, pf_error *err); /* after the model */
pf_status pf_spec_check_training(pf_job_spec *s, pf_error *err);
pf_status pf_spec_check_partitioner(pf_job_spec *s, pf_error *err);
pf_status pf_spec_check_devices(pf_job_spec *s, pf_error *err);
/* run_policy: the default queue named explicitly is written as absent. */
pf_status pf_spec_check_run_policy(pf_job_spec *s, pf_error *err);

static inline void *slot(pf_job_spec *s, size_t at) {
    return (char *)s + at;
}

static inline const void *cslot(const pf_job_spec *s, size_t at) {
    return (const char *)s + at;
}

static inline int get_enum(const pf_job_spec *s, size_t at) {
    int v;
    memcpy(&v, cslot(s, at), sizeof v);
    return v;
}

static inline void put_enum(pf_job_spec *s, size_t at, int v) {
    if (at != NO_SLOT)
        memcpy(slot(s, at), &v, sizeof v);
}

static inline bool applies(const field *f, int type) {
    return f->only == 0 || (f->only & BIT(type)) != 0;
}

#endif
