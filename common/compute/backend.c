/* backend.c - which backend serves a device (see backend.h).
 *
 * psflow has no CUDA backend yet, and no build file defines PSFLOW_HAVE_CUDA: cuda_backend()
 * below always answers PF_ERR_UNSUPPORTED. The CUDA backend, when it lands, defines the
 * macro and supplies a cuda_backend() that probes for a usable GPU.
 */
#include "psflow/backend.h"

#include <stddef.h>

#ifndef PSFLOW_HAVE_CUDA
static pf_status cuda_backend(const pf_backend **out, pf_error *err) {
    *out = NULL;
    pf_error_clear(err);
    return pf_error_set(err, PF_ERR_UNSUPPORTED, NULL,
                        "device \"cuda\" requested but this psflow has no CUDA backend: "
                        "use \"cpu\", or \"auto\" to take a GPU when there is one");
}
#endif

pf_status pf_backend_for_device(pf_device device, const pf_backend **out, pf_error *err) {
    switch (device) {
    case PF_DEVICE_CPU:
        *out = pf_backend_openblas();
        return PF_OK;
    case PF_DEVICE_CUDA:
        return cuda_backend(out, err);
    case PF_DEVICE_AUTO:
        if (cuda_backend(out, NULL) == PF_OK)
            return PF_OK;
        *out = pf_backend_openblas();
        return PF_OK;
    }
    *out = NULL;
    pf_error_clear(err);
    return pf_error_set(err, PF_ERR_INVALID, NULL, "unknown device %d", (int)device);
}
