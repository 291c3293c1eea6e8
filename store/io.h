/*
 * io.h - the store's few write-side system calls, behind a table that tests
 * replace to inject ENOSPC and EIO (st_io_set). Production code never
 * changes it. Every function returns 0 or -errno.
 */
#ifndef ST_IO_H
#define ST_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct st_io {
    ssize_t (*pwritev)(int fd, const struct iovec *iov, int n, off_t off);
    int (*fdatasync)(int fd);
    int (*fsync)(int fd);
    int (*syncfs)(int fd);
} st_io;

/* Test only: use `io` (NULL: the real system calls) from now on. */
void st_io_set(const st_io *io);

/* Write all of iov at off, looping over short writes and IOV_MAX. */
int st_write_all(int fd, const struct iovec *iov, int n, off_t off);
int st_datasync(int fd);
/* Cut a file back to `len` bytes (dropping a failed or rolled-back write). */
int st_truncate(int fd, uint64_t len);
int st_fsync(int fd);
/* Flush the whole file system fd is on: what journaled logs wrote, and the
 * files and names made without syncs, all at once. */
int st_syncfs(int fd);
/* fsync the directory at `path` (after creating, renaming or removing in it). */
int st_fsync_dir(const char *path);
/* Write `len` bytes as `dir/name` atomically: temp file, fsync, rename,
 * directory fsync. */
int st_write_file_atomic(const char *dir, const char *name, const void *data, size_t len);
/* The same without the syncs: whole or absent (or the old one) after a
 * crash of the process; after a power cut it may be empty or stale, so
 * only for what can be rebuilt (checkpoints, which are checked on load). */
int st_write_file_replace(const char *dir, const char *name, const void *data, size_t len);
/* A log file of its own kind (a segment, a journal) begun with its header
 * (magic, v): made at path (O_EXCL), or, if `reuse`, opened as it is (a
 * spare of the right size: an fdatasync then suffices). If `durable`, the
 * file and then its directory `dir` are synced. *fd, or -errno and nothing
 * left at path. */
int st_log_file_make(const char *dir, const char *path, const char magic[8], uint64_t v, bool reuse,
                     bool durable, int *fd);
/* Read exactly n bytes at off (-EIO if the file ends first). */
int st_read_at(int fd, void *buf, size_t n, uint64_t off);
/* Read a whole small file (at most `max` bytes) into a malloc'd buffer. */
int st_read_file(const char *path, size_t max, char **data, size_t *len);

/* The numbers N of the files named `<N as 20 digits>.<ext>` in dir,
 * ascending, in a malloc'd array. */
int st_list_numbered(const char *dir, const char *ext, uint64_t **out, size_t *n);

/* Lock `<dir>/lock` (flock: exclusive, or shared when read-only) and, when
 * exclusive, write our pid into it. On -EBUSY, `holder` gets the holder's
 * pid as text ("" if unknown). *fd is -1 when a read-only lock finds no lock
 * file (nobody ever wrote there). */
int st_lock_dir(const char *dir, bool shared, int *fd, char *holder, size_t holder_cap);

#endif
