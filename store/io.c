/*
 * io.c - system calls of the store, and the indirection tests use to make
 * them fail. Reads are not shimmed: the faults worth simulating are the ones
 * that leave data half-written.
 */
#include "io.h"

#include "record.h"

#include "runtime/metrics.h"
#include "store.h"

#include <time.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static ssize_t sys_pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    return pwritev(fd, iov, n, off);
}
static int sys_fdatasync(int fd)
{
    return fdatasync(fd);
}
static int sys_fsync(int fd)
{
    return fsync(fd);
}

static int sys_syncfs(int fd)
{
    return syncfs(fd);
}

static const st_io sys_io = {sys_pwritev, sys_fdatasync, sys_fsync, sys_syncfs};
static const st_io *_Atomic cur = &sys_io;

void st_io_set(const st_io *io)
{
    atomic_store(&cur, io != NULL ? io : &sys_io);
}

static const st_io *io(void)
{
    return atomic_load_explicit(&cur, memory_order_acquire);
}

int st_write_all(int fd, const struct iovec *iov, int n, off_t off)
{
    /* a private copy, so that a short write resumes in place */
    struct iovec stack[64], *v = n <= 64 ? stack : malloc((size_t)n * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    memcpy(v, iov, (size_t)n * sizeof(*v));
    int i = 0, r = 0;
    while (i < n) {
        ssize_t w = io()->pwritev(fd, v + i, n - i < IOV_MAX ? n - i : IOV_MAX, off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            r = w < 0 ? -errno : -EIO;
            break;
        }
        off += w;
        while (i < n && (size_t)w >= v[i].iov_len) {
            w -= (ssize_t)v[i].iov_len;
            i++;
        }
        if (w > 0) {
            v[i].iov_base = (char *)v[i].iov_base + w;
            v[i].iov_len -= (size_t)w;
        }
    }
    if (v != stack)
        free(v);
    return r;
}

rt_hist st_fsync_seconds;
rt_hist st_nats_append_seconds;
_Atomic uint64_t st_pool_carried_bytes, st_pool_removed_bytes;

void st_metrics_render(rt_text *t)
{
    rt_metric_hist(t, "parley_fsync_seconds", "Latency of the store's fdatasync calls.",
                   &st_fsync_seconds);
    rt_metric_counter(t, "parley_pool_carried_bytes_total",
                      "Bytes of live conversations the pool wrote again so that the segments "
                      "before them could be removed.",
                      rt_metric_get(&st_pool_carried_bytes));
    rt_metric_counter(t, "parley_pool_removed_bytes_total",
                      "Bytes of pool segments removed: they held deleted conversations' records "
                      "only.",
                      rt_metric_get(&st_pool_removed_bytes));
#ifdef PARLEY_HAVE_NATS
    rt_metric_hist(t, "parley_nats_append_seconds",
                   "Latency of appending a record to a JetStream log, until acknowledged.",
                   &st_nats_append_seconds);
    rt_metric_counter(t, "parley_nats_loop_requests_total",
                      "Requests to the JetStream cluster made on a loop thread (0 unless a loop "
                      "waited for the cluster).",
                      rt_metric_get(&st_nats_loop_requests));
#endif
}

int st_log_file_make(const char *dir, const char *path, const char magic[8], uint64_t v, bool reuse,
                     bool durable, int *out)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | (reuse ? 0 : O_CREAT | O_EXCL), 0644);
    if (fd < 0)
        return -errno;
    uint8_t hdr[ST_FILE_HDR];
    st_file_header(hdr, magic, v);
    struct iovec iov = {hdr, sizeof(hdr)};
    int r = st_write_all(fd, &iov, 1, 0);
    if (r == 0 && durable)
        r = reuse ? st_datasync(fd) : st_fsync(fd);
    if (r == 0 && durable)
        r = st_fsync_dir(dir);
    if (r < 0) {
        close(fd);
        unlink(path);
        return r;
    }
    *out = fd;
    return 0;
}

int st_datasync(int fd)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int r = io()->fdatasync(fd) < 0 ? -errno : 0;
    clock_gettime(CLOCK_MONOTONIC, &b);
    rt_hist_observe(&st_fsync_seconds,
                    (uint64_t)((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec)));
    return r;
}

int st_truncate(int fd, uint64_t len)
{
    return ftruncate(fd, (off_t)len) != 0 ? -errno : 0;
}

int st_fsync(int fd)
{
    return io()->fsync(fd) < 0 ? -errno : 0;
}

int st_syncfs(int fd)
{
    const st_io *o = io(); /* a test's table may leave it out */
    return (o->syncfs != NULL ? o->syncfs(fd) : syncfs(fd)) < 0 ? -errno : 0;
}

int st_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = st_fsync(fd);
    close(fd);
    return r;
}

static int write_file(const char *dir, const char *name, const void *data, size_t len, bool sync)
{
    char tmp[4096], dst[4096];
    if (snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name) >= (int)sizeof(tmp) ||
        snprintf(dst, sizeof(dst), "%s/%s", dir, name) >= (int)sizeof(dst))
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    struct iovec iov = {(void *)data, len};
    int r = st_write_all(fd, &iov, 1, 0);
    if (r == 0 && sync)
        r = st_fsync(fd);
    close(fd);
    if (r == 0 && rename(tmp, dst) != 0)
        r = -errno;
    if (r == 0 && sync)
        r = st_fsync_dir(dir);
    if (r < 0)
        unlink(tmp);
    return r;
}

int st_write_file_atomic(const char *dir, const char *name, const void *data, size_t len)
{
    return write_file(dir, name, data, len, true);
}

int st_write_file_replace(const char *dir, const char *name, const void *data, size_t len)
{
    return write_file(dir, name, data, len, false);
}

int st_read_at(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        got += (size_t)r;
    }
    return 0;
}

int st_read_file(const char *path, size_t max, char **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size > max) {
        int e = errno;
        close(fd);
        return (size_t)st.st_size > max ? -EFBIG : -e;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf != NULL && got < (size_t)st.st_size) {
        ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    if (buf == NULL)
        return -ENOMEM;
    if (got != (size_t)st.st_size) {
        free(buf);
        return -EIO;
    }
    buf[got] = '\0';
    *data = buf;
    *len = got;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int st_list_numbered(const char *dir, const char *ext, uint64_t **out, size_t *n)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -errno;
    size_t el = strlen(ext);
    uint64_t *v = NULL;
    size_t len = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        if (strlen(name) != 21 + el || name[20] != '.' || strcmp(name + 21, ext) != 0 ||
            strspn(name, "0123456789") != 20)
            continue;
        if (len == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *nv = realloc(v, cap * sizeof(*v));
            if (nv == NULL) {
                free(v);
                closedir(d);
                return -ENOMEM;
            }
            v = nv;
        }
        v[len++] = strtoull(name, NULL, 10);
    }
    closedir(d);
    if (len > 1)
        qsort(v, len, sizeof(*v), cmp_u64);
    *out = v;
    *n = len;
    return 0;
}

int st_lock_dir(const char *dir, bool shared, int *out, char *holder, size_t holder_cap)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/lock", dir);
    *out = -1;
    holder[0] = '\0';
    int fd = open(path, (shared ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, 0644);
    if (fd < 0)
        return shared && errno == ENOENT ? 0 : -errno;
    if (flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
        int e = errno;
        ssize_t n = pread(fd, holder, holder_cap - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(fd);
        return e == EWOULDBLOCK ? -EBUSY : -e;
    }
    if (!shared) {
        char pid[32];
        int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
            int e = errno;
            close(fd);
            return -e;
        }
    }
    *out = fd;
    return 0;
}
