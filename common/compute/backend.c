/* backend.c - which backend serves a device (see backend.h).
 *
 * A build with PSFLOW_HAVE_CUDA asks cuda/cuda_backend.c, which probes the GPU; a build
 * without it answers that it has no CUDA backend. "auto" takes the GPU when the probe
 * succeeds and otherwise the CPU, saying why in the log line it hands back.
 */
#include "psflow/backend.h"

#include <stddef.h>
#include <stdio.h>

/* The cuda table on GPU `index`, or NULL with the reason in why. */
static const pf_backend *cuda_table(int index, char *why, size_t len) {
#ifdef PSFLOW_HAVE_CUDA
    return pf_backend_cuda(index, why, len);
#else
    (void)index;
    snprintf(why, len, "this psflow was built without CUDA");
    return NULL;
#endif
}

pf_status pf_backend_for_device(pf_device device, int index, const pf_backend **out,
                                pf_error *err) {
    char text[200], name[24];
    pf_error_clear(err);
    *out = NULL;
    switch (device) {
    case PF_DEVICE_CPU:
        *out = pf_backend_openblas();
        return pf_backend_openblas_check_room(err);
    case PF_DEVICE_CUDA:
        /* Spelled as the job spec spells it: "cuda" is cuda:0. */
        if (index == 0)
            snprintf(name, sizeof name, "cuda");
        else
            snprintf(name, sizeof name, "cuda:%d", index);
        if (index < 0)
            return pf_error_set(err, PF_ERR_INVALID, NULL, "device \"%s\": no such GPU", name);
        if ((*out = cuda_table(index, text, sizeof text)) != NULL)
            return pf_error_set(err, PF_OK, NULL, "device cuda:%d: %s", index, text);
        return pf_error_set(err, PF_ERR_UNSUPPORTED, NULL,
                            "device \"%s\" is not usable: %s; use \"cpu\", or \"auto\" to "
                            "fall back to the CPU",
                            name, text);
    case PF_DEVICE_AUTO:
        if ((*out = cuda_table(0, text, sizeof text)) != NULL)
            return pf_error_set(err, PF_OK, NULL, "device cuda:0: %s", text);
        *out = pf_backend_openblas();
        if (pf_backend_openblas_check_room(err) != PF_OK)
            return PF_ERR_NOMEM;
        return pf_error_set(err, PF_OK, NULL,
                            "device \"auto\": no usable GPU (%s); training on the CPU", text);
    }
    return pf_error_set(err, PF_ERR_INVALID, NULL, "unknown device %d", (int)device);
}
