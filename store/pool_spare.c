/*
 * pool_spare.c - the pool's next segment, made ahead (pool.c): a file of
 * zeros as long as a segment, ready to become the active one at the next
 * roll or open.
 *
 * Why: an fdatasync of a file that grew since the last one also commits
 * the file's new size and blocks (ext4: a journal commit on top of the
 * data); over blocks already written it flushes the data alone. Measured
 * on this project's 2-core VM (ext4, 64 KiB groups + fdatasync): 415-534
 * groups/s appending to a new file against 1,191-1,497 overwriting zeros.
 * The local store gets the same by recycling its journal files; the
 * pool's segments are its data and are never recycled, so the zeros are
 * written ahead, off the committer's path, by a thread of their own.
 *
 * The spare is made as DIR/pool/spare.tmp (zeros, synced), then renamed to
 * DIR/pool/spare: a spare is whole or absent. Taking it writes the
 * segment's header, syncs it, renames it to <seq>.seg and syncs the
 * directory: a crash in between leaves a spare (its header rewritten when
 * taken) or a segment of zeros after its header (an empty one). A
 * segment's zeros after its last group are no record: recovery skips them
 * at once and cuts them off the last segment (pool_scan.c).
 *
 * Only under `full`, once the active segment is a quarter full, is a
 * spare made: a store that writes little never pays a segment of zeros,
 * and one that syncs seldom has no use for them (under `none` their
 * writes cost ~20% of the append rate).
 *
 * The zeros go out in step with the appends, a chunk at a time, each
 * pushed to the disk (sync_file_range) before the next: chunk by chunk as
 * the active segment fills from a quarter to 7/8 (stp_spare_due), so that
 * each of the committer's syncs carries a little of them. Written at once
 * and synced whole, the 16 MiB reached the disk inside one or two of the
 * committer's fdatasyncs, which then took 25-35 ms instead of 0.3, twice
 * a segment: every append in flight waited for them (measured on this
 * project's 2-core VM, 64 appenders: the ack latency's maximum 39-215 ms
 * and p99 10.0-11.5 ms; paced, 16-24 and 8.4-10.2 ms). A chunk is 512
 * KiB. A chunk's write still slows the syncs it overlaps: in 2 MiB
 * chunks (1.3 ms p50, up to 6 ms to push each) two thirds of the
 * committer's syncs over 2.5 ms overlapped one, and with 64 appenders
 * (side_by_side's append load, 2026-11-29) the p99 of an append was
 * 7.5-8.4 ms; in 512 KiB chunks 5.3-6.8 ms, and the single appender's
 * rate the same within noise (bench store, medians of five sets: 5.9k
 * events/s against 6.1k in 2 MiB). Smaller is not better: 128 KiB gave
 * 6.4-7.1 ms, and in 256 KiB chunks an earlier version lost a third of
 * the single appender's rate.
 * Once a roll has found no spare ready (the disk is slower than the
 * appends) the rest is written at once. A spare left by an
 * earlier run is taken at open. Every call here is a plain system call,
 * not the I/O table's (io.h): a spare is an optimisation whose timing is
 * the thread's, and a failure to make or take one only means the next
 * segment grows as it is written, as before; the fault tests' shim keeps
 * seeing the same calls whatever the thread did.
 */
#include "pool_impl.h"

#include "io.h"
#include "runtime/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CHUNK = 512 << 10 };

static void spare_path(const stp_store *s, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", s->pool_dir, name);
}

static int sync_dir(const stp_store *s)
{
    int fd = open(s->pool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return r;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, (const uint8_t *)buf + done, n - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        done += (size_t)w;
    }
    return 0;
}

int stp_zero(int fd, uint64_t from, uint64_t to)
{
    static const uint8_t zeros[64 << 10];
    int r = 0;
    for (uint64_t at = from; r == 0 && at < to;) {
        size_t n = to - at < sizeof(zeros) ? (size_t)(to - at) : sizeof(zeros);
        r = pwrite_all(fd, zeros, n, at);
        at += n;
    }
    return r;
}

/* Make DIR/pool/spare; false if stopped or failed (then none is made). */
static bool make_spare(stp_store *s)
{
    char tmp[4096], dst[4096];
    spare_path(s, "spare.tmp", tmp, sizeof(tmp));
    spare_path(s, "spare", dst, sizeof(dst));
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return false;
    int r = 0;
    for (uint64_t at = 0; r == 0 && at < s->o.segment_bytes; at += CHUNK) {
        uint64_t due = stp_spare_due(s->o.segment_bytes, at);
        pthread_mutex_lock(&s->sp_mu);
        s->sp_due = due;
        while (!s->sp_stop && !s->sp_late && s->sp_fill < due)
            pthread_cond_wait(&s->sp_cv, &s->sp_mu);
        s->sp_due = 0;
        bool stop = s->sp_stop;
        pthread_mutex_unlock(&s->sp_mu);
        uint64_t to = at + CHUNK < s->o.segment_bytes ? at + CHUNK : s->o.segment_bytes;
        r = stop ? -ECANCELED : stp_zero(fd, at, to);
        /* to the disk now, a chunk, not all of it in one of the
         * committer's syncs; only an optimisation (the fdatasync below
         * reports any write's failure), so its own failure is ignored */
        if (r == 0)
            (void)sync_file_range(fd, (off_t)at, (off_t)(to - at),
                                  SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                      SYNC_FILE_RANGE_WAIT_AFTER);
    }
    if (r == 0 && fdatasync(fd) != 0)
        r = -errno;
    close(fd);
    if (r == 0 && rename(tmp, dst) != 0)
        r = -errno;
    if (r == 0)
        r = sync_dir(s);
    if (r < 0) {
        unlink(tmp);
        if (r != -ECANCELED)
            rt_log(RT_LOG_WARN, "store",
                   "pool: cannot make a spare segment (%s): the next one "
                   "grows as it is written",
                   strerror(-r));
    }
    return r == 0;
}

static void *spare_main(void *arg)
{
    stp_store *s = arg;
    pthread_setname_np(pthread_self(), "parley-spare");
    pthread_mutex_lock(&s->sp_mu);
    for (;;) {
        while (!s->sp_stop && !(s->sp_want && !s->sp_ready))
            pthread_cond_wait(&s->sp_cv, &s->sp_mu);
        if (s->sp_stop)
            break;
        pthread_mutex_unlock(&s->sp_mu);
        bool made = make_spare(s);
        pthread_mutex_lock(&s->sp_mu);
        s->sp_ready = made;
        s->sp_want = false;
        s->sp_late = false;
    }
    pthread_mutex_unlock(&s->sp_mu);
    return NULL;
}

int stp_spare_start(stp_store *s)
{
    char tmp[4096], dst[4096];
    spare_path(s, "spare.tmp", tmp, sizeof(tmp));
    spare_path(s, "spare", dst, sizeof(dst));
    unlink(tmp); /* a crash while it was made */
    struct stat st;
    s->sp_ready = stat(dst, &st) == 0 && (uint64_t)st.st_size == s->o.segment_bytes;
    if (!s->sp_ready)
        unlink(dst); /* made for another segment size */
    int r = -pthread_create(&s->sp_thread, NULL, spare_main, s);
    s->sp_started = r == 0;
    return r;
}

void stp_spare_stop(stp_store *s)
{
    if (!s->sp_started)
        return;
    pthread_mutex_lock(&s->sp_mu);
    s->sp_stop = true;
    pthread_cond_signal(&s->sp_cv);
    pthread_mutex_unlock(&s->sp_mu);
    pthread_join(s->sp_thread, NULL);
    s->sp_started = false;
}

uint64_t stp_spare_due(uint64_t segment_bytes, uint64_t at)
{
    return segment_bytes / 4 + at / 8 * 5;
}

void stp_spare_want(stp_store *s, uint64_t fill)
{
    pthread_mutex_lock(&s->sp_mu);
    s->sp_fill = fill;
    if (!s->sp_ready && !s->sp_want) {
        s->sp_want = true;
        pthread_cond_signal(&s->sp_cv);
    } else if (s->sp_due != 0 && fill >= s->sp_due) {
        pthread_cond_signal(&s->sp_cv); /* its next chunk is due */
    }
    pthread_mutex_unlock(&s->sp_mu);
}

int stp_spare_take(stp_store *s, uint32_t seq, int *out)
{
    pthread_mutex_lock(&s->sp_mu);
    bool ready = s->sp_ready;
    s->sp_ready = false;
    if (!ready && s->sp_want) { /* late: the rest at once */
        s->sp_late = true;
        pthread_cond_signal(&s->sp_cv);
    }
    pthread_mutex_unlock(&s->sp_mu);
    if (!ready)
        return -ENOENT;
    char src[4096], dst[4096];
    spare_path(s, "spare", src, sizeof(src));
    stp_path(s, seq, "seg", dst, sizeof(dst));
    int fd = open(src, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint8_t hdr[ST_FILE_HDR];
    st_file_header(hdr, STP_SEG_MAGIC, seq);
    int r = pwrite_all(fd, hdr, sizeof(hdr), 0);
    if (r == 0 && fdatasync(fd) != 0)
        r = -errno;
    bool renamed = r == 0 && rename(src, dst) == 0;
    if (r == 0 && !renamed)
        r = -errno;
    if (r == 0)
        r = sync_dir(s);
    if (r < 0) { /* the caller makes the segment as it did without spares */
        close(fd);
        unlink(renamed ? dst : src);
        return r;
    }
    *out = fd;
    return 0;
}
