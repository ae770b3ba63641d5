/* safetensors.h - read and write the safetensors file layout (float32 tensors, and the
 * integer tensors a dynamic embedding table keeps beside its rows).
 *
 * Layout: an 8-byte little-endian header length N, then N bytes of JSON
 * {"name": {"dtype": "F32" (or "I64", "U64", "U8"), "shape": [...], "data_offsets": [begin, end]},
 * ...,
 *  "__metadata__": {"key": "value", ...}}, padded with spaces to a multiple of 8, then the
 * raw little-endian tensor data, offsets relative to the end of the header. This is the
 * format the `safetensors` Python library (PyTorch, NumPy) loads.
 *
 * Writes go to "<path>.tmp" first and are renamed into place after fsync, and the folder is
 * fsynced (pf_fs_write_atomic), so a reader never sees a half-written file.
 */
#ifndef PSFLOW_SAFETENSORS_H
#define PSFLOW_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/status.h"
#include "psflow/tensor.h"

#define PF_ST_MAX_HEADER (100u << 20)       /* refuse headers larger than 100 MiB */
#define PF_ST_MAX_FILE   ((size_t)16 << 30) /* refuse files larger than 16 GiB */

/* Writes n tensors (names unique, in the given order, each of its view's dtype) and optional string
 * metadata (meta_keys/meta_values, n_meta pairs). PF_ERR_IO names the path and OS error. */
pf_status pf_safetensors_write(const char *path, const pf_tensor_view *tensors, int n,
                               const char *const *meta_keys, const char *const *meta_values,
                               int n_meta, pf_error *err);

typedef struct pf_safetensors pf_safetensors;

/* Reads and validates a whole file (only F32 tensors are accepted). Errors: PF_ERR_IO,
 * PF_ERR_RANGE (over PF_ST_MAX_FILE bytes), PF_ERR_NOMEM, PF_ERR_FORMAT (bad header length, bad
 * JSON, offsets outside the data or overlapping, size that disagrees with the shape),
 * PF_ERR_UNSUPPORTED (dtype other than F32). */
pf_status pf_safetensors_read(const char *path, pf_safetensors **out, pf_error *err);
/* pf_safetensors_read that also takes I64, U64 and U8 tensors (a view's dtype says which):
 * for readers that check each tensor's dtype, such as a dynamic table's restore. */
pf_status pf_safetensors_read_any(const char *path, pf_safetensors **out, pf_error *err);
void pf_safetensors_destroy(pf_safetensors *st);

/* Number of tensors, and tensor i as a view borrowed from st (file order). */
int pf_safetensors_count(const pf_safetensors *st);
pf_tensor_view pf_safetensors_get(const pf_safetensors *st, int i);
/* Tensor by name; returns 0 and fills *out, or -1 when absent. */
int pf_safetensors_find(const pf_safetensors *st, const char *name, pf_tensor_view *out);
/* Metadata value by key (borrowed), or NULL. */
const char *pf_safetensors_meta(const pf_safetensors *st, const char *key);

#endif
