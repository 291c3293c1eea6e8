/*
 * pool_idx.c - a sealed segment's record index in a file of its own,
 * DIR/pool/<seq>.idx (pool.c): written once the segment is sealed
 * (pool_seal.c), then mapped read-only, so that the indexes of the whole
 * history cost page cache, not heap, and an open reads none of them.
 *
 * The file is a header (magic, seq, the entry count, where the segment's
 * last group ends), the entries sorted by (id, offset) exactly as stp_ent
 * lays them out (little-endian; the mapping is used as it is) and a
 * CRC-32C of everything before it. A file that is missing, short, of
 * another segment or another end, or whose CRC is wrong is never used:
 * the segment is scanned again (reported), and the index written anew.
 * The check reads the whole file once, at its first use; then its pages
 * are dropped from the process (MADV_DONTNEED: they stay in the page
 * cache) so that what a log open touches is what it costs.
 */
#include "pool_impl.h"

#include "crc32c.h"
#include "io.h"
#include "log_impl.h"
#include "runtime/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "index files are mapped as stp_ent arrays: a big-endian host must decode them");
_Static_assert(sizeof(stp_ent) == STP_ENT_BYTES && offsetof(stp_ent, index) == 16 &&
                   offsetof(stp_ent, off) == 24 && offsetof(stp_ent, size) == 28 &&
                   offsetof(stp_ent, hash) == 32 && offsetof(stp_ent, khash) == 36,
               "stp_ent is the index file's entry layout");

size_t stp_idx_file_size(size_t n)
{
    return STP_IDX_HDR + n * STP_ENT_BYTES + 4;
}

void stp_idx_encode(uint8_t *out, uint32_t seq, uint64_t end, const stp_ent *e, size_t n)
{
    st_file_header(out, STP_IDX_MAGIC, seq);
    st_put64(out + 16, n);
    st_put64(out + 24, end);
    if (n > 0)
        memcpy(out + STP_IDX_HDR, e, n * STP_ENT_BYTES);
    size_t body = STP_IDX_HDR + n * STP_ENT_BYTES;
    st_put32(out + body, st_crc32c(0, out, body));
}

int stp_idx_check(const uint8_t *p, size_t len, uint32_t seq, uint64_t end, size_t *n,
                  const char **why)
{
    uint64_t got, count;
    *why = NULL;
    if (len < stp_idx_file_size(0) || !st_file_header_ok(p, STP_IDX_MAGIC, &got))
        *why = "not an index file (short, or a bad header)";
    else if (got != seq)
        *why = "the index of another segment";
    else if ((count = st_get64(p + 16)) > (len - stp_idx_file_size(0)) / STP_ENT_BYTES ||
             stp_idx_file_size((size_t)count) != len)
        *why = "its length does not match its entry count";
    else if (st_get64(p + 24) != end)
        *why = "it covers another end of the segment";
    else if (st_crc32c(0, p, len - 4) != st_get32(p + len - 4))
        *why = "its CRC is wrong";
    if (*why != NULL)
        return -EBADMSG;
    *n = (size_t)count;
    return 0;
}

int stp_idx_write(stp_store *s, uint32_t seq, uint64_t end, const stp_ent *e, size_t n)
{
    size_t len = stp_idx_file_size(n);
    uint8_t *b = malloc(len);
    if (b == NULL)
        return -ENOMEM;
    stp_idx_encode(b, seq, end, e, n);
    char name[32];
    snprintf(name, sizeof(name), "%020" PRIu32 ".idx", seq);
    int r = st_write_file_atomic(s->pool_dir, name, b, len);
    free(b);
    return r;
}

int stp_idx_map(stp_store *s, stp_segidx *x, char *why, size_t whylen)
{
    char path[4096];
    stp_path(s, x->seq, "idx", path, sizeof(path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        snprintf(why, whylen, "%s", e == ENOENT ? "no index file" : strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    size_t len = (size_t)st.st_size;
    void *m = len > 0 ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(why, whylen, "%s", len == 0 ? "an empty index file" : strerror(e));
        return len == 0 ? -EBADMSG : -e;
    }
    const char *bad;
    size_t n;
    int r = stp_idx_check(m, len, x->seq, x->end, &n, &bad);
    if (r < 0) {
        snprintf(why, whylen, "%s", bad);
        munmap(m, len);
        return r;
    }
    madvise(m, len, MADV_DONTNEED);
    x->map = m;
    x->maplen = len;
    x->e = (stp_ent *)((uint8_t *)m + STP_IDX_HDR);
    x->n = n;
    x->cap = 0;
    x->sorted = true;
    x->state = STP_IDX_MAPPED;
    return 0;
}

void stp_idx_unmap(stp_segidx *x)
{
    if (x->state == STP_IDX_MAPPED)
        munmap(x->map, x->maplen);
    else
        stp_ents_free(x->e, x->cap, sizeof(*x->e));
    x->e = NULL;
    x->map = NULL;
    x->n = x->cap = x->maplen = 0;
}

static int push(void *ctx, const st_rec *r, uint64_t off)
{
    stp_ent e = stp_ent_of(r, off);
    return r->index == STP_IDX_COMMIT ? 0 : stp_idx_push(ctx, &e);
}

int stp_idx_rebuild(stp_store *s, stp_segidx *x)
{
    char *data;
    size_t len;
    int r = stp_seg_read(s, x->seq, &data, &len);
    if (r < 0)
        return r;
    stp_scan_cb cb = {x, push, NULL, false, false};
    stp_scan_res res;
    x->state = STP_IDX_HEAP;
    r = stp_scan_buf((const uint8_t *)data, len, st_journal_seed(x->seq), &cb, &res);
    free(data);
    if (r < 0) {
        stp_ents_free(x->e, x->cap, sizeof(*x->e));
        x->e = NULL;
        x->n = x->cap = 0;
        return r;
    }
    x->end = res.end;
    x->sorted = false;
    stp_idx_sort(x);
    return 0;
}

int stp_idx_ensure(stp_store *s, uint32_t seq, char *detail, size_t cap)
{
    pthread_mutex_lock(&s->idx_mu);
    pthread_mutex_lock(&s->seg_mu);
    stp_segidx *x = stp_sealed_of(s, seq);
    stp_segidx t = x != NULL ? *x : (stp_segidx){0};
    pthread_mutex_unlock(&s->seg_mu);
    int r = 0;
    if (x != NULL && t.state == STP_IDX_LAZY) {
        char why[128];
        uint64_t end = t.end;
        r = stp_idx_map(s, &t, why, sizeof(why));
        bool rebuilt = r < 0;
        if (rebuilt) {
            r = stp_idx_rebuild(s, &t);
            char msg[512];
            snprintf(msg, sizeof(msg),
                     "pool/%020" PRIu32 ".idx not used (%s): segment rescanned%s%s", seq, why,
                     r < 0 ? ", which failed: " : "", r < 0 ? strerror(-r) : "");
            rt_log(r < 0 ? RT_LOG_ERROR : RT_LOG_WARN, "store", "%s", msg);
            if (detail != NULL && detail[0] == '\0')
                snprintf(detail, cap, "%s", msg);
            t.end = end; /* the checkpoint's: the file written now is taken next time */
        }
        if (r == 0) {
            pthread_mutex_lock(&s->seg_mu);
            x = stp_sealed_of(s, seq);
            *x = t;
            pthread_mutex_unlock(&s->seg_mu);
            if (rebuilt)
                stp_seal_idx(s, seq);
        }
    }
    pthread_mutex_unlock(&s->idx_mu);
    return r;
}

void stp_idx_dontneed(stp_store *s, uint32_t seq)
{
    pthread_mutex_lock(&s->seg_mu);
    stp_segidx *x = stp_sealed_of(s, seq);
    if (x != NULL && x->state == STP_IDX_MAPPED)
        madvise(x->map, x->maplen, MADV_DONTNEED);
    pthread_mutex_unlock(&s->seg_mu);
}
