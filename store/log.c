/*
 * log.c - opening a log: lock, find the segments, rebuild the index from
 * checkpoints plus a scan of what they do not cover, repair a torn tail, and
 * closing it again.
 *
 * Recovery rule: records are taken in order while they are complete, pass
 * their CRC and carry the next index. At the first one that does not, the
 * rest of the segment is searched for any later valid record: if there is
 * one, the bad record is corruption in the middle (reported, log read-only);
 * if not, it is a torn tail from a crash, cut off and reported. Only the
 * active segment can legitimately be torn: a bad record in a sealed one is
 * always corruption.
 */
#include "log_impl.h"

#include "backend.h"
#include "io.h"
#include "runtime/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SCAN_BUF = 1 << 20, IDX_HDR = 32 };

void st_log_path(const st_log *l, uint64_t first, const char *ext, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%020" PRIu64 ".%s", l->dir, first, ext);
}

st_seg *st_log_active(const st_log *l)
{
    st_segs *s = atomic_load_explicit(&((st_log *)l)->segs, memory_order_relaxed);
    return s != NULL ? s->seg[s->n - 1] : NULL;
}

size_t st_segs_pos(const st_segs *s, uint64_t i)
{
    size_t lo = 0, hi = s->n; /* the answer is in [lo, hi) */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (s->seg[mid]->first <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

st_seg *st_segs_find(const st_segs *s, uint64_t i)
{
    return s->seg[st_segs_pos(s, i)];
}

static void note(st_open_report *rep, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(st_open_report *rep, const char *fmt, ...)
{
    size_t used = strlen(rep->detail);
    if (used > 0 && used + 2 < sizeof(rep->detail)) {
        memcpy(rep->detail + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->detail + used, sizeof(rep->detail) - used, fmt, ap);
    va_end(ap);
}

/* ----------------------------------------------------------------- lock --- */

static int lock_dir(st_log *l, st_open_report *rep)
{
    char pid[32];
    int r = st_lock_dir(l->dir, l->read_only, &l->lock_fd, pid, sizeof(pid));
    if (r == -EBUSY)
        note(rep, "%s is in use by another process%s%s%s", l->dir, *pid ? " (pid " : "", pid,
             *pid ? ")" : "");
    return r;
}

/* ------------------------------------------------------------- segments --- */

static int segs_push(st_log *l, st_seg *seg)
{
    st_segs *old = atomic_load_explicit(&l->segs, memory_order_relaxed);
    size_t n = old != NULL ? old->n : 0;
    st_segs *s = malloc(sizeof(*s) + (n + 1) * sizeof(s->seg[0]));
    if (s == NULL || (old != NULL && st_retire(&l->retired, old) < 0)) {
        free(s);
        return -ENOMEM;
    }
    if (n > 0)
        memcpy(s->seg, old->seg, n * sizeof(s->seg[0]));
    s->seg[n] = seg;
    s->n = n + 1;
    atomic_store_explicit(&l->segs, s, memory_order_release);
    return 0;
}

/* Create the segment that starts at `first`, durably (or journaled, see
 * st_log_opts), and publish it. */
int st_log_new_segment(st_log *l, uint64_t first)
{
    char path[4096];
    st_log_path(l, first, "seg", path, sizeof(path));
    st_seg *seg = malloc(sizeof(*seg));
    if (seg == NULL)
        return -ENOMEM;
    int fd;
    int r = st_log_file_make(l->dir, path, ST_SEG_MAGIC, first, false, !l->journaled, &fd);
    if (r == 0) {
        seg->first = first;
        seg->fd = fd;
        atomic_init(&seg->end, ST_FILE_HDR);
        if ((r = segs_push(l, seg)) < 0) {
            close(fd);
            unlink(path);
        }
    }
    if (r < 0)
        free(seg);
    return r;
}

/* ---------------------------------------------------- index while opening --- */

static int add_record(st_log *l, uint64_t index, uint32_t off, uint32_t hash_hi, uint32_t khash_hi,
                      bool active)
{
    int r = st_offsets_set(&l->offsets, index, off);
    if (r == 0)
        r = st_idtab_add(&l->ids, (uint64_t)hash_hi << 32, index);
    if (r == 0 && khash_hi != 0)
        r = st_idtab_add(&l->ids, (uint64_t)khash_hi << 32, index);
    if (r == 0 && active)
        r = st_log_note_hash(l, index, hash_hi, khash_hi);
    return r;
}

/* Take the segment's checkpoint if it is whole and agrees with the data:
 * its last record must be on disk, valid, where it says. Returns how many
 * records it gave (0 when unusable), and where they end. */
static uint64_t load_idx(st_log *l, st_seg *seg, uint64_t size, bool active, uint64_t *covered)
{
    char path[4096];
    char *buf;
    size_t len;
    st_log_path(l, seg->first, "idx", path, sizeof(path));
    if (st_read_file(path, (size_t)64 << 20, &buf, &len) != 0)
        return 0;
    const uint8_t *p = (const uint8_t *)buf;
    uint64_t first, n = 0, cov = 0;
    bool ok =
        len >= IDX_HDR + 4 && st_file_header_ok(p, ST_IDX_MAGIC, &first) && first == seg->first;
    if (ok) {
        n = st_get64(p + 16);
        cov = st_get64(p + 24);
        ok = n <= (len - IDX_HDR - 4) / 12 && len == IDX_HDR + 12 * n + 4 &&
             st_get32(p + len - 4) == st_crc32c(0, p, len - 4) && cov <= size &&
             cov >= ST_FILE_HDR && cov <= UINT32_MAX;
    }
    const uint8_t *offs = p + IDX_HDR, *hashes = offs + 4 * n, *khashes = hashes + 4 * n;
    for (uint64_t i = 0; ok && i < n; i++) {
        uint32_t o = st_get32(offs + 4 * i);
        ok = o < cov && (i == 0 ? o == ST_FILE_HDR : o > st_get32(offs + 4 * (i - 1)));
    }
    if (ok && n == 0)
        ok = cov == ST_FILE_HDR;
    if (ok && n > 0) { /* the last record must be really there */
        uint32_t o = st_get32(offs + 4 * (n - 1));
        size_t rs = (size_t)(cov - o);
        uint8_t *rb = malloc(rs);
        st_rec rec;
        ok = rb != NULL && st_read_at(seg->fd, rb, rs, o) == 0 &&
             st_rec_decode(rb, rs, false, 0, &rec) == ST_REC_OK && rec.size == rs &&
             rec.index == seg->first + n - 1 &&
             (uint32_t)(st_id_hash(rec.id, rec.idlen) >> 32) == st_get32(hashes + 4 * (n - 1));
        free(rb);
    }
    /* room for every id and key first, then the adds, prefetching ahead:
     * each is a cache miss in a table of millions of slots */
    uint64_t keys = 0;
    for (uint64_t i = 0; ok && i < n; i++)
        keys += st_get32(khashes + 4 * i) != 0;
    ok = ok && st_idtab_reserve(&l->ids, n + keys) == 0;
    enum { AHEAD = 16 };
    for (uint64_t i = 0; ok && i < n; i++) {
        if (i + AHEAD < n) {
            st_idtab_prefetch(&l->ids, (uint64_t)st_get32(hashes + 4 * (i + AHEAD)) << 32);
            st_idtab_prefetch(&l->ids, (uint64_t)st_get32(khashes + 4 * (i + AHEAD)) << 32);
        }
        ok = add_record(l, seg->first + i, st_get32(offs + 4 * i), st_get32(hashes + 4 * i),
                        st_get32(khashes + 4 * i), active) == 0;
    }
    free(buf);
    if (!ok)
        return 0;
    *covered = cov;
    return n;
}

/* After a bad record: is there any valid record further on? Candidates are
 * filtered by their index field first, so random bytes almost never get as
 * far as a CRC check. */
static bool later_record(int fd, uint64_t from, uint64_t size, uint64_t last_index)
{
    uint8_t *buf = malloc(SCAN_BUF);
    bool found = false;
    uint64_t lo = last_index + 1, hi = last_index + (1u << 20);
    for (uint64_t pos = from; buf != NULL && !found && pos + ST_REC_HDR <= size;) {
        size_t n = (size_t)(size - pos < SCAN_BUF ? size - pos : SCAN_BUF);
        if (st_read_at(fd, buf, n, pos) != 0)
            break;
        for (size_t at = 0; !found && at + ST_REC_HDR <= n; at++) {
            uint64_t idx = st_get64(buf + at + 8);
            size_t rs = idx >= lo && idx <= hi ? st_rec_size(buf + at, n - at, false) : 0;
            if (rs == 0 || rs == SIZE_MAX || pos + at + rs > size)
                continue;
            /* a candidate that runs past the chunk is read on its own */
            uint8_t *rb = rs > n - at ? malloc(rs) : NULL;
            const uint8_t *rp = rs > n - at ? rb : buf + at;
            st_rec rec;
            found = rp != NULL && (rb == NULL || st_read_at(fd, rb, rs, pos + at) == 0) &&
                    st_rec_decode(rp, rs, false, 0, &rec) == ST_REC_OK;
            free(rb);
        }
        if (n < SCAN_BUF)
            break;
        pos += n - ST_REC_HDR; /* overlap: a header may straddle the chunks */
    }
    free(buf);
    return found;
}

enum { SCAN_OK, SCAN_BAD };

/* Take the records of `seg` from `pos` on; *count is the next expected
 * index, *end becomes the end of the last good record. */
static int scan(st_log *l, st_seg *seg, uint64_t pos, uint64_t size, bool active, uint64_t *count,
                uint64_t *end, uint64_t *scanned)
{
    size_t cap = SCAN_BUF;
    uint8_t *buf = malloc(cap);
    int status = buf != NULL ? SCAN_OK : -ENOMEM;
    while (status == SCAN_OK && pos < size) {
        size_t n = (size_t)(size - pos < cap ? size - pos : cap);
        if ((status = st_read_at(seg->fd, buf, n, pos)) != 0)
            break;
        size_t at = 0, need = 0;
        while (at < n) {
            st_rec rec;
            int d = st_rec_decode(buf + at, n - at, false, 0, &rec);
            if (d != ST_REC_OK) {
                need = st_rec_size(buf + at, n - at, false);
                /* broken, or cut short by the end of the file */
                if (d == ST_REC_BAD || need == SIZE_MAX || pos + at + need > size ||
                    (need == 0 && pos + n == size))
                    status = SCAN_BAD;
                break; /* else: read on from this record */
            }
            if (rec.index != *count) {
                status = SCAN_BAD;
                break;
            }
            status = add_record(l, *count, (uint32_t)(pos + at),
                                (uint32_t)(st_id_hash(rec.id, rec.idlen) >> 32),
                                rec.keylen > 0 ? st_key_hash_hi(rec.key, rec.keylen) : 0, active);
            if (status != 0)
                break;
            (*count)++;
            (*scanned)++;
            at += rec.size;
        }
        pos += at;
        if (status == SCAN_OK && need > cap) { /* a record larger than the buffer */
            uint8_t *nb = realloc(buf, need);
            if (nb == NULL)
                status = -ENOMEM;
            else
                buf = nb, cap = need;
        }
    }
    free(buf);
    *end = pos;
    return status;
}

/* Segment seg ends at end from now on, on the disk too: 0 or -errno. */
static int cut_at(st_seg *seg, uint64_t end)
{
    if (ftruncate(seg->fd, (off_t)end) != 0)
        return -errno;
    return st_fsync(seg->fd);
}

/* Read one segment into the index. Returns SCAN_OK, SCAN_BAD (the log is
 * corrupt here: read-only from now on) or -errno. */
static int load_segment(st_log *l, st_seg *seg, bool last, uint64_t *count, st_open_report *rep)
{
    char path[4096];
    st_log_path(l, seg->first, "seg", path, sizeof(path));
    struct stat st;
    if (fstat(seg->fd, &st) != 0)
        return -errno;
    uint64_t size = (uint64_t)st.st_size, covered = ST_FILE_HDR, end = ST_FILE_HDR;
    uint8_t hdr[ST_FILE_HDR];
    uint64_t first;
    if (size < ST_FILE_HDR || st_read_at(seg->fd, hdr, sizeof(hdr), 0) != 0 ||
        !st_file_header_ok(hdr, ST_SEG_MAGIC, &first) || first != seg->first) {
        if (last && size < ST_FILE_HDR && !l->read_only) {
            /* a segment whose creation a crash interrupted: begin it again */
            st_file_header(hdr, ST_SEG_MAGIC, seg->first);
            struct iovec iov = {hdr, sizeof(hdr)};
            int r = st_write_all(seg->fd, &iov, 1, 0);
            if (r == 0 && ftruncate(seg->fd, ST_FILE_HDR) != 0)
                r = -errno;
            if (r == 0)
                r = st_fsync(seg->fd);
            if (r < 0)
                return r;
            note(rep, "rewrote the header of %s", path);
            atomic_store(&seg->end, ST_FILE_HDR);
            return SCAN_OK;
        }
        note(rep, "%s has a bad header", path);
        return SCAN_BAD;
    }
    if (seg->first != *count) {
        note(rep, "%s starts at event %" PRIu64 ", expected %" PRIu64, path, seg->first, *count);
        return SCAN_BAD;
    }
    uint64_t n = load_idx(l, seg, size, last, &covered);
    if (n == 0)
        covered = ST_FILE_HDR;
    *count += n;
    int r = scan(l, seg, covered, size, last, count, &end, &rep->scanned);
    if (r < 0)
        return r;
    atomic_store(&seg->end, end);
    if (r == SCAN_OK)
        return SCAN_OK;
    if (!last || later_record(seg->fd, end + 1, size, *count - 1)) {
        l->damaged = !l->read_only;
        rep->corrupt = true;
        note(rep,
             "corrupt record at %s offset %" PRIu64 " with valid records after it: "
             "event %" PRIu64 " on are unreadable and the log is read-only",
             path, end, *count);
        return SCAN_BAD;
    }
    rep->truncated_bytes = size - end;
    note(rep, "cut a torn tail of %" PRIu64 " bytes from %s at offset %" PRIu64, size - end, path,
         end);
    if (!l->read_only && (r = cut_at(seg, end)) < 0)
        return r;
    return SCAN_OK;
}

/* Sum of the counts in the checkpoints' headers, to size the tables once. */
static uint64_t expected_count(st_log *l, const uint64_t *firsts, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        uint8_t hdr[IDX_HDR];
        uint64_t first;
        st_log_path(l, firsts[i], "idx", path, sizeof(path));
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (st_read_at(fd, hdr, sizeof(hdr), 0) == 0 &&
            st_file_header_ok(hdr, ST_IDX_MAGIC, &first))
            sum += st_get64(hdr + 16);
        close(fd);
    }
    return sum;
}

static int open_segments(st_log *l, st_open_report *rep)
{
    uint64_t *firsts = NULL;
    size_t n = 0;
    int r = st_list_numbered(l->dir, "seg", &firsts, &n);
    if (r == -ENOENT && l->read_only)
        r = 0; /* a read-only look at a log nobody created */
    if (r < 0)
        return r;
    uint64_t expect = expected_count(l, firsts, n);
    if ((r = st_offsets_init(&l->offsets, expect)) < 0 ||
        (r = st_idtab_init(&l->ids, expect)) < 0) {
        free(firsts);
        return r;
    }
    uint64_t count = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        st_log_path(l, firsts[i], "seg", path, sizeof(path));
        st_seg *seg = malloc(sizeof(*seg));
        int fd = open(path, (l->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
        if (seg == NULL || fd < 0) {
            r = seg == NULL ? -ENOMEM : -errno;
            free(seg);
            break;
        }
        seg->first = firsts[i];
        seg->fd = fd;
        atomic_init(&seg->end, ST_FILE_HDR);
        if ((r = segs_push(l, seg)) < 0) {
            close(fd);
            free(seg);
            break;
        }
        r = load_segment(l, seg, i == n - 1, &count, rep);
        if (r != SCAN_OK) {
            if (r == SCAN_BAD) { /* keep the valid prefix, readable only */
                l->read_only = true;
                rep->corrupt = true;
                r = 0;
            }
            break;
        }
    }
    free(firsts);
    if (r < 0)
        return r;
    /* a read-only log that nobody created has no segment at all */
    if (atomic_load(&l->segs) == NULL && !l->read_only && (r = st_log_new_segment(l, 0)) < 0)
        return r;
    atomic_store_explicit(&l->count, count, memory_order_release);
    l->wcount = count;
    st_seg *act = st_log_active(l);
    l->wend = act != NULL ? atomic_load(&act->end) : ST_FILE_HDR;
    rep->count = count;
    return 0;
}

int st_log_open(const char *dir, const st_log_opts *o, st_log **out, st_open_report *rep)
{
    st_open_report scratch;
    if (rep == NULL)
        rep = &scratch;
    memset(rep, 0, sizeof(*rep));
    st_log *l = calloc(1, sizeof(*l));
    if (l == NULL || (l->dir = strdup(dir)) == NULL) {
        free(l);
        return -ENOMEM;
    }
    l->be = &st_local_backend;
    l->lock_fd = -1;
    l->read_only = o != NULL && o->read_only;
    l->journaled = o != NULL && o->journaled && !l->read_only;
    l->segment_bytes = o != NULL && o->segment_bytes != 0 ? o->segment_bytes : (uint64_t)64 << 20;
    if (l->segment_bytes > (uint64_t)1 << 31)
        l->segment_bytes = (uint64_t)1 << 31; /* offsets are 32-bit */
    int r = 0;
    if (!l->read_only && mkdir(dir, 0755) != 0 && errno != EEXIST)
        r = -errno;
    if (r == 0 && (o == NULL || !o->store_locked))
        r = lock_dir(l, rep);
    if (r == 0)
        r = open_segments(l, rep);
    if (r < 0) {
        if (rep->detail[0] == '\0')
            note(rep, "cannot open the log in %s: %s", dir, strerror(-r));
        st_log_close(l);
        return r;
    }
    *out = l;
    return 0;
}

int st_log_close(st_log *l)
{
    if (l == NULL)
        return 0;
    st_segs *s = atomic_load(&l->segs);
    int r = 0;
    if (!l->read_only && s != NULL) {
        st_log_rollback(l);
        /* journaled: the journal holds what was written until the store
         * syncs the file system; a short log is scanned faster than its
         * checkpoint is written */
        r = l->journaled ? 0 : st_log_sync(l);
        if (r == 0 && (!l->journaled || st_log_unchecked(l) >= 64))
            st_log_checkpoint(l);
    }
    for (size_t i = 0; s != NULL && i < s->n; i++) {
        close(s->seg[i]->fd);
        free(s->seg[i]);
    }
    free(s);
    st_retired_free(&l->retired);
    if (atomic_load(&l->offsets.dir) != NULL)
        st_offsets_free(&l->offsets);
    if (atomic_load(&l->ids.tab) != NULL)
        st_idtab_free(&l->ids);
    if (l->lock_fd >= 0)
        close(l->lock_fd);
    free(l->act_hash);
    free(l->act_khash);
    free(l->dir);
    free(l);
    return r;
}

bool stl_log_read_only(const st_log *l)
{
    return l->read_only;
}

int stl_log_cut_damage(st_log *l)
{
    st_seg *act = st_log_active(l); /* the damaged one: the open stopped there */
    if (!l->read_only || !l->damaged || act == NULL)
        return -EROFS;
    uint64_t *firsts = NULL;
    size_t n = 0, removed = 0;
    int r = st_list_numbered(l->dir, "seg", &firsts, &n);
    /* the last first: a crash meanwhile leaves a prefix, cut again next time */
    for (size_t i = n; r == 0 && i-- > 0 && firsts[i] > act->first; removed++) {
        char path[4096];
        st_log_path(l, firsts[i], "idx", path, sizeof(path));
        if (unlink(path) != 0 && errno != ENOENT)
            r = -errno;
        st_log_path(l, firsts[i], "seg", path, sizeof(path));
        if (r == 0 && unlink(path) != 0)
            r = -errno;
    }
    free(firsts);
    if (r == 0 && removed > 0)
        r = st_fsync_dir(l->dir);
    uint64_t end = atomic_load(&act->end);
    if (r == 0)
        r = cut_at(act, end);
    if (r < 0)
        return r;
    char path[4096];
    st_log_path(l, act->first, "seg", path, sizeof(path));
    rt_log(RT_LOG_WARN, "store",
           "the journal holds event %" PRIu64 " of %s on: cut the log at offset %" PRIu64
           "%s (not synced yet when a crash came) for the journal to write again",
           l->wcount, path, end, removed > 0 ? ", the segments after it removed" : "");
    l->damaged = false;
    return 0;
}

size_t stl_log_memory(const st_log *l)
{
    return sizeof(*l) + st_offsets_bytes(&l->offsets) + st_idtab_bytes(&l->ids) +
           2 * l->act_cap * sizeof(uint32_t);
}
