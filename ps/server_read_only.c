/* server_read_only.c - what a read-only ps does differently (psflow ps --read-only, the values
 * psflow serve --ps reads; docs/serving.md section 7): its start, the messages it refuses,
 * and the one reader it serves. */
#include <inttypes.h>
#include <stdio.h>

#include "psflow/checkpoint.h"
#include "psflow/mem.h"
#include "psflow/wire.h"
#include "ps/ps_checkpoint.h"
#include "ps/server_internal.h"

/* A read-only ps's start: the newest complete checkpoint that verifies, older ones when it
 * does not (each refusal logged; nothing is renamed or written), and none is an error: a
 * read-only ps serves a checkpoint, never the initial values. */
pf_status ps_server_restore_read_only(ps_server *s, char *note, size_t len, pf_error *err) {
    char job_dir[2048];
    if (pf_checkpoint_job_dir(s->checkpoint_dir, s->spec.name, job_dir, sizeof job_dir) != PF_OK)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "checkpoint path too long");
    int64_t *steps = NULL;
    int n = 0;
    pf_status st = pf_checkpoint_list(job_dir, 0, &steps, &n, err);
    if (st == PF_OK && n == 0)
        st = PF_ERR_NOT_FOUND;
    for (int i = n - 1; st == PF_OK && i >= 0; i--) {
        char *queue = NULL;
        pf_error bad;
        pf_error_clear(&bad);
        st = ps_checkpoint_restore_step(s->shards, &s->spec, s->task, s->checkpoint_dir,
                                        (uint64_t)steps[i], &queue, note, len, &bad);
        pf_free(queue);
        if (st == PF_OK || st == PF_ERR_NOMEM) {
            if (st != PF_OK)
                pf_error_set(err, st, NULL, "%s", bad.message);
            break;
        }
        ps_server_log(s, "read-only: checkpoint step %" PRId64 " refused: %s", steps[i],
                      bad.message);
        st = i ? PF_OK : PF_ERR_NOT_FOUND;
    }
    pf_free(steps);
    if (st == PF_ERR_NOT_FOUND)
        return pf_error_set(err, PF_ERR_IO, NULL,
                            "read-only: no complete checkpoint of job %s under %s that verifies: "
                            "a read-only ps serves a checkpoint, never the initial values",
                            s->spec.name, job_dir);
    return st;
}

/* The messages a read-only ps refuses: those that change its values, write a checkpoint or
 * hand out input. */
int ps_server_read_only_refuses(uint16_t type) {
    return type == PF_WIRE_PUSH || type == PF_WIRE_PUSH_PULL || type == PF_WIRE_ROW_PUSH_PULL ||
           type == PF_WIRE_SEG_ATTACH || type == PF_WIRE_SEG_PUSH_PULL ||
           type == PF_WIRE_CHECKPOINT || type == PF_WIRE_LEASE;
}

/* A reader older than the newest that said HELLO to this read-only ps (a replaced server):
 * refused with STALE_INCARNATION. Returns 1 when it was. */
int ps_server_stale_reader(ps_server *s, peer *p, uint32_t request_id) {
    if (!s->read_only || p->role != PF_WIRE_ROLE_READER || p->incarnation >= s->reader_incarnation)
        return 0;
    ps_server_error(s, p->conn, request_id, PF_WIRE_STALE_INCARNATION,
                    "reader %d incarnation %" PRIu64 " was replaced by a newer server "
                    "(incarnation %" PRIu64 ") on this read-only ps",
                    p->task, p->incarnation, s->reader_incarnation);
    return 1;
}
