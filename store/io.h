/*
 * io.h - the store's few write-side system calls, behind a table that tests
 * replace to inject ENOSPC and EIO (st_io_set). Production code never
 * changes it. Every function returns 0 or -errno.
 */
#ifndef ST_IO_H
#define ST_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct st_io {
    ssize_t (*pwritev)(int fd, const struct iovec *iov, int n, off_t off);
    int (*fdatasync)(int fd);
    int (*fsync)(int fd);
} st_io;

/* Test only: use `io` (NULL: the real system calls) from now on. */
void st_io_set(const st_io *io);

/* Write all of iov at off, looping over short writes and IOV_MAX. */
int st_write_all(int fd, const struct iovec *iov, int n, off_t off);
int st_datasync(int fd);
/* Cut a file back to `len` bytes (dropping a failed or rolled-back write). */
int st_truncate(int fd, uint64_t len);
int st_fsync(int fd);
/* fsync the directory at `path` (after creating, renaming or removing in it). */
int st_fsync_dir(const char *path);
/* Write `len` bytes as `dir/name` atomically: temp file, fsync, rename,
 * directory fsync. */
int st_write_file_atomic(const char *dir, const char *name, const void *data, size_t len);
/* Read a whole small file (at most `max` bytes) into a malloc'd buffer. */
int st_read_file(const char *path, size_t max, char **data, size_t *len);

#endif
