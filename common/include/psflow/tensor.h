/* tensor.h - a borrowed view of one tensor in host memory: its name, its shape and
 * where its values lie. The currency of the modules that read, write or move whole tensors
 * (safetensors files, checkpoints, training sessions); it owns nothing.
 */
#ifndef PSFLOW_TENSOR_H
#define PSFLOW_TENSOR_H

#include <stdint.h>

#define PF_TENSOR_MAX_RANK 4

/* The element type of a tensor. Model variables are always F32; the integer types hold
 * what a dynamic embedding table keeps beside its rows (ids, steps, admission counts). */
typedef enum pf_dtype {
    PF_DTYPE_F32 = 0, /* the default: a view that names no dtype is float32 */
    PF_DTYPE_I64,
    PF_DTYPE_U64,
    PF_DTYPE_U8,
} pf_dtype;

typedef struct pf_tensor_view {
    const char *name;
    int rank; /* 0..PF_TENSOR_MAX_RANK */
    int64_t shape[PF_TENSOR_MAX_RANK];
    union {
        const float *data; /* product(shape) floats, host memory (F32) */
        const void *raw;   /* product(shape) elements of dtype (any dtype) */
    };
    pf_dtype dtype;
} pf_tensor_view;

/* Bytes of one element of dtype t. */
static inline int pf_dtype_size(pf_dtype t) {
    return t == PF_DTYPE_U8 ? 1 : t == PF_DTYPE_F32 ? 4 : 8;
}

#endif
