/* dataplane_keys.h - the coordinator's data-plane secret and the keys it hands out by role
 * (docs/security.md "The data plane", api/wire.md "Authentication").
 *
 * The coordinator keeps a secret of its own, 32 random bytes made once and kept in a file
 * beside its database (DB.data-plane-secret, mode 0600, 64 hex digits); it never leaves the
 * coordinator. Each job's key is derived from it and the job's name (pf_wire_job_key), and
 * each assignment carries only what its task needs: a ps the job key (it verifies every
 * task of the job), a chief, worker or evaluator only its own task key. So a worker's host
 * holds nothing that proves another role, and keys stay the same across restarts of the
 * coordinator and of the tasks.
 *
 * Threads: coord_dataplane_secret_load at start; coord_assignment_add_key under the
 * coordinator's lock (it reads the cluster).
 */
#ifndef PSFLOW_COORDINATOR_DATAPLANE_KEYS_H
#define PSFLOW_COORDINATOR_DATAPLANE_KEYS_H

#include <jansson.h>
#include <stdint.h>

#include "coordinator/cluster.h"
#include "psflow/status.h"
#include "psflow/wire_auth.h"

/* Reads the secret from db_path + ".data-plane-secret", or makes it there (atomically: a
 * 0600 temporary file linked into place, so two starts never see a partial one); for the
 * database ":memory:" a fresh secret that lives as long as the process. Logs once when it
 * makes the file, and warns when the file is readable by others. Errors: PF_ERR_IO (cannot
 * read or make it, or the system's generator failed), PF_ERR_FORMAT (the file is not 64 hex
 * digits: the coordinator refuses to start rather than change every job's keys). */
pf_status coord_dataplane_secret_load(const char *db_path, uint8_t secret[PF_WIRE_KEY_SIZE],
                                      pf_error *err);

/* Adds "key" (64 hex digits) to the assignment object of node n (coord_node_assignment's
 * answer; json_null() is left alone): the job key for a ps, the task's own key for a chief,
 * worker or evaluator. Returns 0, or -1 when it could not (out of memory): the caller must
 * not hand out the assignment without its key. */
int coord_assignment_add_key(json_t *assignment, const coord_cluster *c, const coord_node *n,
                             const uint8_t secret[PF_WIRE_KEY_SIZE]);

#endif
