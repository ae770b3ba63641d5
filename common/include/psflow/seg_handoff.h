/* seg_handoff.h - a worker's shared segment handed to a ps as a descriptor (SCM_RIGHTS) over
 * a Unix socket in a folder both can reach (api/wire.md, "Shared segment").
 *
 * SEG_ATTACH names the segment by process id and descriptor number, which a ps can open
 * through /proc only when it sees the worker's processes: the same PID namespace. Tasks in
 * separate containers or pods on one host do not. When PSFLOW_SHM_DIR names a folder both
 * sides have (a Compose volume, a host path), each ps listens there on a Unix socket named
 * after its job and task; a worker connects, sends the segment's descriptor, and gets back a
 * random handle, which its SEG_ATTACH then names with process id 0. The ps takes the
 * descriptor by that handle and checks it as it checks one opened through /proc.
 *
 * Both sides refuse a peer of another user (SO_PEERCRED). A ps keeps at most
 * PF_SEG_HANDOFF_SLOTS descriptors not yet claimed, each for PF_SEG_HANDOFF_TTL seconds; a
 * peer that connects and sends nothing is dropped after a second.
 */
#ifndef PSFLOW_SEG_HANDOFF_H
#define PSFLOW_SEG_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

#include "psflow/status.h"

#define PF_SEG_HANDOFF_SLOTS 64   /* descriptors a ps holds unclaimed, at most */
#define PF_SEG_HANDOFF_TTL   30.0 /* seconds an unclaimed descriptor is kept */

typedef struct pf_seg_handoff pf_seg_handoff;

/* PSFLOW_SHM_DIR when it is set and not empty, else NULL (no handoff). */
const char *pf_seg_handoff_dir(void);

/* The socket of ps `task` of `job` under dir into buf. 0, or -1 when it does not fit a Unix
 * socket's path (108 bytes with the terminator). */
int pf_seg_handoff_path(const char *dir, const char *job, int task, char *buf, size_t len);

/* ps: listens on the socket of (job, task) under dir (a stale socket there is replaced),
 * from a thread of its own. `who` prefixes its log lines ("psflow ps 1"). Errors:
 * PF_ERR_INVALID (path too long), PF_ERR_IO (the socket or its thread), with the reason. */
pf_status pf_seg_handoff_listen(const char *dir, const char *job, int task, const char *who,
                                pf_seg_handoff **out, pf_error *err);

/* ps: the descriptor handed over with `handle`, now the caller's to close; -1 when no
 * descriptor has that handle (never handed, taken already, or expired). Any thread. */
int pf_seg_handoff_take(pf_seg_handoff *h, uint32_t handle);

/* ps: the socket's path. */
const char *pf_seg_handoff_socket(const pf_seg_handoff *h);

/* ps: descriptors refused so far (another user, no descriptor, several, a silent peer). */
uint64_t pf_seg_handoff_refused(const pf_seg_handoff *h);

/* ps: stops the thread, closes the descriptors not claimed and removes the socket; NULL is
 * ignored. */
void pf_seg_handoff_close(pf_seg_handoff *h);

/* Worker: hands descriptor fd to ps `task` of `job` through its socket under dir, waiting at
 * most `timeout` seconds, and returns the handle to name in SEG_ATTACH in *handle. Errors:
 * PF_ERR_NOT_FOUND (no socket there: no such ps on this host), PF_ERR_UNAVAILABLE (it did not
 * answer, or answered wrongly), PF_ERR_INVALID (the path is too long, or the listener is
 * another user's), with the reason. */
pf_status pf_seg_handoff_send(const char *dir, const char *job, int task, int fd, double timeout,
                              uint32_t *handle, pf_error *err);

#endif
