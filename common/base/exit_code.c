/* exit_code.c - process exit codes for failure statuses (see exit_code.h). */
#include "psflow/exit_code.h"

int pf_exit_code(pf_status st) {
    switch (st) {
    case PF_ERR_IO:
    case PF_ERR_NOT_FOUND:
        return PF_EX_NOINPUT;
    case PF_ERR_SPEC:
    case PF_ERR_FORMAT:
    case PF_ERR_RANGE:
    case PF_ERR_NONFINITE:
        return PF_EX_DATAERR;
    case PF_ERR_UNSUPPORTED:
    case PF_ERR_UNAVAILABLE:
        return PF_EX_UNAVAILABLE;
    case PF_ERR_NOMEM:
        return PF_EX_OSERR;
    case PF_ERR_CANCELLED:
        return 130; /* as a shell reports a process ended by SIGINT */
    default:
        return PF_EX_SOFTWARE;
    }
}
