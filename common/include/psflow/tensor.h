/* tensor.h - a borrowed view of one float32 tensor in host memory: its name, its shape and
 * where its values lie. The currency of the modules that read, write or move whole tensors
 * (safetensors files, checkpoints, training sessions); it owns nothing.
 */
#ifndef PSFLOW_TENSOR_H
#define PSFLOW_TENSOR_H

#include <stdint.h>

#define PF_TENSOR_MAX_RANK 4

typedef struct pf_tensor_view {
    const char *name;
    int rank; /* 0..PF_TENSOR_MAX_RANK */
    int64_t shape[PF_TENSOR_MAX_RANK];
    const float *data; /* product(shape) floats, host memory */
} pf_tensor_view;

#endif
