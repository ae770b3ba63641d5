/* fs.h - whole files: bounded reads, atomic replacement, folders made durable.
 *
 * No psflow concepts: the job spec, checkpoints, safetensors files, the coordinator's
 * API description and the CLI all read and write files through these. Every error fills
 * the pf_error with a one-line message that names the path and the reason.
 *
 * Reentrant; any thread.
 */
#ifndef PSFLOW_FS_H
#define PSFLOW_FS_H

#include <stddef.h>
#include <sys/uio.h>

#include "psflow/status.h"

/* Reads the whole file at path into a new block *out (pf_free it) of *len bytes, followed
 * by a NUL byte not counted in *len so that text reads as a C string. A file of more than
 * max bytes is refused (a regular file before anything is read). Pipes and other streams
 * are read to their end, within the same bound.
 * Errors: PF_ERR_NOT_FOUND (no such file), PF_ERR_IO (cannot open or read it, or it is a
 * folder), PF_ERR_RANGE (more than max bytes), PF_ERR_NOMEM. On error *out is NULL and
 * *len 0. */
pf_status pf_fs_read_file(const char *path, size_t max, char **out, size_t *len, pf_error *err);

/* Replaces the file at path with the bytes of parts[0 .. n), atomically: they are written
 * to "<path>.tmp", fsynced, renamed over path, and the folder holding path is fsynced, so
 * a reader sees the old file or the whole new one, and after a crash the new one survives
 * once this returned PF_OK. Errors: PF_ERR_INVALID (path too long), PF_ERR_IO (names the
 * file and the OS error; no .tmp is left behind). */
pf_status pf_fs_write_atomic(const char *path, const struct iovec *parts, int n, pf_error *err);

/* fsyncs the folder at path, so entries created, renamed or removed in it are durable.
 * Returns 0, or -1 with errno set. */
int pf_fs_fsync_dir(const char *path);

/* mkdir -p: creates path and its missing parents (mode 0755), fsyncing the parent of each
 * folder it creates. Errors: PF_ERR_INVALID (path too long), PF_ERR_IO (a folder cannot be
 * created, or path exists and is not a folder). */
pf_status pf_fs_make_dirs(const char *path, pf_error *err);

#endif
