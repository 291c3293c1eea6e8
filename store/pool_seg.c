/*
 * pool_seg.c - the pool's segment files (pool.c): making and rolling them,
 * their record indexes, and the small cache of descriptors every reader
 * shares.
 *
 * The active segment's index grows in write order as the committer
 * publishes groups; rolling sorts it by (id, offset) and keeps it as the
 * sealed segment's until its file is written and mapped (pool_idx.c,
 * pool_seal.c), and asks for a checkpoint of the catalog (pool_ckpt.c).
 * A log opens from the indexes of its runs' segments.
 *
 * Readers get descriptors from a cache of STP_FDS read-only descriptors
 * (least recently used goes; one in use is never closed under its reader):
 * however many conversations and segments there are, the store holds at
 * most that many plus the active segment's.
 */
#include "pool_impl.h"

#include "io.h"
#include "runtime/grow.h"
#include "runtime/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Make segment seq's file: its header, and its name; from the spare if
 * there is one (*alloc: the file's size, zeros after the header).
 * prev_end: where a lazily sealed predecessor ends (0: it is durable, and
 * so is the new file). After a lazy roll the new file is not synced (the
 * next sync of anything syncs its name, stp_sync_names); the one made
 * before it is, first, so that a crash never leaves a gap in the numbers. */
static int seg_make(stp_store *s, uint32_t seq, uint32_t prev_end, int *out, uint64_t *alloc)
{
    if (prev_end == 0 && stp_spare_take(s, seq, out) == 0) {
        *alloc = s->o.segment_bytes;
        return 0;
    }
    bool durable = prev_end == 0;
    int r = durable ? 0 : stp_sync_names(s); /* mostly done: the sealing thread's */
    if (r < 0)
        return r;
    char path[4096];
    stp_path(s, seq, "seg", path, sizeof(path));
    uint64_t v = (uint64_t)prev_end << 32 | seq;
    r = st_log_file_make(s->pool_dir, path, STP_SEG_MAGIC, v, false, durable, out);
    if (r == 0)
        *alloc = ST_FILE_HDR;
    if (r == 0 && !durable) {
        pthread_mutex_lock(&s->lazy_mu);
        s->names_made++;
        pthread_mutex_unlock(&s->lazy_mu);
    }
    return r;
}

/* The new active segment (seg_mu held). */
static void install(stp_store *s, uint32_t seq, int fd, uint64_t alloc)
{
    if (s->act_fd >= 0)
        close(s->act_fd);
    s->act_fd = fd;
    s->act_size = s->act_synced = ST_FILE_HDR;
    s->act_alloc = alloc;
    s->act = (stp_segidx){.seq = seq};
    stp_ents_free(s->act_prev, s->act_prev_cap, sizeof(*s->act_prev)); /* the last one's links */
    s->act_prev = NULL;
    s->act_prev_cap = 0;
}

int stp_seg_create(stp_store *s, uint32_t seq)
{
    int fd;
    uint64_t alloc;
    int r = seg_make(s, seq, s->open_prev_end, &fd, &alloc);
    if (r < 0)
        return r;
    pthread_mutex_lock(&s->seg_mu);
    install(s, seq, fd, alloc);
    pthread_mutex_unlock(&s->seg_mu);
    return 0;
}

static size_t map_bytes(size_t cap, size_t elem)
{
    size_t page = 4096;
    return (cap * elem + page - 1) / page * page;
}

int stp_ents_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 4096 / elem;
    while (c < need)
        c *= 2;
    size_t from = *p != NULL ? map_bytes(*cap, elem) : 0, to = map_bytes(c, elem);
    void *n = *p == NULL
                  ? mmap(NULL, to, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                  : mremap(*p, from, to, MREMAP_MAYMOVE);
    if (n == MAP_FAILED)
        return -ENOMEM;
    *p = n;
    *cap = c;
    return 0;
}

void stp_ents_free(void *p, size_t cap, size_t elem)
{
    if (p != NULL)
        munmap(p, map_bytes(cap, elem));
}

int stp_idx_push(stp_segidx *x, const stp_ent *e)
{
    if (stp_ents_grow((void **)&x->e, &x->cap, x->n + 1, sizeof(*x->e)) < 0)
        return -ENOMEM;
    x->e[x->n++] = *e;
    return 0;
}

static int by_id_off(const void *a, const void *b)
{
    const stp_ent *x = a, *y = b;
    int c = memcmp(x->id.b, y->id.b, sizeof(x->id.b));
    return c != 0 ? c : (x->off > y->off) - (x->off < y->off);
}

void stp_idx_sort(stp_segidx *x)
{
    if (!x->sorted && x->n > 1)
        qsort(x->e, x->n, sizeof(x->e[0]), by_id_off);
    x->sorted = true;
}

stp_segidx *stp_sealed_add(stp_store *s, uint32_t seq)
{
    if (s->nsealed == s->sealed_cap) {
        size_t cap = s->sealed_cap ? 2 * s->sealed_cap : 16;
        stp_segidx *n = realloc(s->sealed, cap * sizeof(*n));
        if (n == NULL)
            return NULL;
        s->sealed = n;
        s->sealed_cap = cap;
    }
    stp_segidx *x = &s->sealed[s->nsealed++];
    *x = (stp_segidx){.seq = seq};
    return x;
}

/* The active segment's index among the sealed ones, with its end, in
 * write order: the sealing thread sorts it (pool_seal.c); seg_mu held;
 * false if out of memory. */
static bool seal(stp_store *s)
{
    stp_segidx *x = stp_sealed_add(s, s->act.seq);
    if (x == NULL)
        return false;
    *x = s->act;
    x->end = s->act_size;
    return true;
}

void stp_lazy_add(stp_store *s, uint32_t lo, uint32_t hi)
{
    pthread_mutex_lock(&s->lazy_mu);
    if (s->lazy_lo == 0)
        s->lazy_lo = lo;
    s->lazy_hi = hi;
    pthread_mutex_unlock(&s->lazy_mu);
}

bool stp_names_synced(stp_store *s)
{
    pthread_mutex_lock(&s->lazy_mu);
    bool synced = s->names_synced == s->names_made;
    pthread_mutex_unlock(&s->lazy_mu);
    return synced;
}

int stp_sync_names(stp_store *s)
{
    pthread_mutex_lock(&s->lazy_mu);
    uint64_t made = s->names_made;
    bool need = s->names_synced < made;
    pthread_mutex_unlock(&s->lazy_mu);
    int r = need ? st_fsync_dir(s->pool_dir) : 0;
    if (r == 0 && need) {
        pthread_mutex_lock(&s->lazy_mu);
        if (s->names_synced < made)
            s->names_synced = made;
        pthread_mutex_unlock(&s->lazy_mu);
    }
    return r;
}

int stp_sync_sealed(stp_store *s, uint32_t upto)
{
    /* the names first: every segment made so far, those sealed here among
     * them; and again at the end, for one the committer made meanwhile
     * (its next lazy roll waits for it) */
    int named = stp_sync_names(s);
    if (named < 0)
        return named;
    for (;;) {
        pthread_mutex_lock(&s->lazy_mu);
        uint32_t seq = s->lazy_lo;
        pthread_mutex_unlock(&s->lazy_mu);
        if (seq == 0 || seq > upto)
            return stp_sync_names(s);
        char path[4096];
        stp_path(s, seq, "seg", path, sizeof(path));
        int fd = open(path, O_RDONLY | O_CLOEXEC), r = fd < 0 ? -errno : st_datasync(fd);
        if (fd >= 0)
            close(fd);
        if (r < 0 && r != -ENOENT) /* not there (a gap an older version left): nothing to sync */
            return r;
        pthread_mutex_lock(&s->lazy_mu);
        if (s->lazy_lo == seq) /* else another thread synced it meanwhile */
            s->lazy_lo = seq < s->lazy_hi ? seq + 1 : 0;
        pthread_mutex_unlock(&s->lazy_mu);
    }
}

int stp_seg_roll(stp_store *s)
{
    /* A segment written under `none` or `interval` is sealed lazily: its
     * sync (ms to tens of ms) happens beside the next one's writes,
     * and the next one's header says where it ends. Either way an open
     * keeps a prefix of what was written: a lazy segment found short ends
     * the log there (pool_scan.c). */
    bool lazy = stp_act_dirty(s);
    uint32_t prev_end = lazy ? (uint32_t)s->act_size : 0; /* < 2^32: offsets are 32-bit */
    int fd;
    uint64_t alloc;
    int r = seg_make(s, s->act.seq + 1, prev_end, &fd, &alloc);
    if (r < 0)
        return r;
    pthread_mutex_lock(&s->seg_mu);
    uint32_t seq = s->act.seq;
    bool sealed = seal(s);
    if (sealed)
        install(s, seq + 1, fd, alloc);
    pthread_mutex_unlock(&s->seg_mu);
    if (!sealed) {
        char path[4096];
        stp_path(s, seq + 1, "seg", path, sizeof(path));
        close(fd);
        unlink(path);
        return -ENOMEM;
    }
    if (lazy)
        stp_lazy_add(s, seq, seq);
    stp_seal_idx(s, seq);
    stp_seal_roll_ckpt(s, seq);
    return 0;
}

void stp_seal_active(stp_store *s)
{
    pthread_mutex_lock(&s->seg_mu);
    uint32_t seq = s->act.seq;
    bool sealed = seal(s);
    if (sealed)
        s->act = (stp_segidx){.seq = 0};
    pthread_mutex_unlock(&s->seg_mu);
    if (sealed)
        stp_seal_idx(s, seq);
}

uint32_t stp_created_in(const stp_conv *c)
{
    if (c->meta_at.seq == 0)
        return 0;                                 /* not durable yet */
    return c->create_seq > 0 ? c->create_seq : 1; /* 0: not known, keep all */
}

uint32_t stp_keep_from(stp_store *s, uint32_t seq)
{
    uint32_t keep = seq;
    for (size_t i = 0; i < s->nbuckets; i++)
        for (stp_conv *c = s->buckets[i]; c != NULL; c = c->next) {
            uint32_t q = stp_created_in(c);
            if (q != 0 && q < keep)
                keep = q;
        }
    return keep;
}

uint64_t stp_seg_remove(stp_store *s, uint32_t seq)
{
    char path[4096];
    struct stat st;
    uint64_t bytes = 0;
    stp_path(s, seq, "seg", path, sizeof(path));
    if (stat(path, &st) == 0)
        bytes = (uint64_t)st.st_size;
    if (unlink(path) < 0 && errno != ENOENT)
        rt_log(RT_LOG_WARN, "store", "pool: cannot remove %s: %s", path, strerror(errno));
    stp_path(s, seq, "idx", path, sizeof(path));
    unlink(path);
    return bytes;
}

void stp_seg_drop_before(stp_store *s, uint32_t first)
{
    pthread_mutex_lock(&s->idx_mu); /* no lazy index load meanwhile (stp_idx_ensure) */
    pthread_mutex_lock(&s->seg_mu);
    size_t k = 0;
    while (k < s->nsealed && s->sealed[k].seq < first)
        k++;
    uint32_t lo = k > 0 ? s->sealed[0].seq : 0, hi = k > 0 ? s->sealed[k - 1].seq : 0;
    for (size_t i = 0; i < k; i++)
        stp_idx_unmap(&s->sealed[i]);
    memmove(s->sealed, s->sealed + k, (s->nsealed - k) * sizeof(s->sealed[0]));
    s->nsealed -= k;
    pthread_mutex_unlock(&s->seg_mu);
    pthread_mutex_unlock(&s->idx_mu);
    if (k == 0)
        return;
    pthread_mutex_lock(&s->fd_mu); /* a descriptor keeps the blocks: close those unused now */
    s->fd_floor = first;
    for (size_t i = 0; i < STP_FDS; i++)
        if (s->fds[i].seq != 0 && s->fds[i].seq < first && s->fds[i].refs == 0) {
            close(s->fds[i].fd);
            s->fds[i].seq = 0;
        }
    pthread_mutex_unlock(&s->fd_mu);
    uint64_t bytes = 0;
    for (uint32_t q = lo; q <= hi; q++)
        bytes += stp_seg_remove(s, q);
    atomic_fetch_add_explicit(&st_pool_removed_bytes, bytes, memory_order_relaxed);
    rt_log(RT_LOG_INFO, "store",
           "pool: segments %" PRIu32 "-%" PRIu32
           " held only deleted conversations: removed (%" PRIu64 " MiB)",
           lo, hi, bytes >> 20);
}

stp_segidx *stp_sealed_of(stp_store *s, uint32_t seq)
{
    size_t lo = 0, hi = s->nsealed;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->sealed[mid].seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->nsealed && s->sealed[lo].seq == seq ? &s->sealed[lo] : NULL;
}

int stp_idx_each(stp_store *s, uint32_t seq, const rt_uuid *id,
                 int (*fn)(void *ctx, const stp_ent *e), void *ctx)
{
    const stp_segidx *x = seq == s->act.seq ? &s->act : stp_sealed_of(s, seq);
    if (x == NULL)
        return -ENOENT;
    if (x->state == STP_IDX_LAZY) /* stp_idx_ensure first */
        return -EAGAIN;
    size_t i = 0;
    if (x->sorted) { /* the first of id's */
        size_t hi = x->n;
        while (i < hi) {
            size_t mid = (i + hi) / 2;
            if (memcmp(x->e[mid].id.b, id->b, sizeof(id->b)) < 0)
                i = mid + 1;
            else
                hi = mid;
        }
    }
    for (; i < x->n; i++) {
        bool same = rt_uuid_eq(&x->e[i].id, id);
        if (!same && x->sorted)
            break;
        int r = same ? fn(ctx, &x->e[i]) : 0;
        if (r != 0)
            return r;
    }
    return 0;
}

int stp_act_each(stp_store *s, const stp_conv *c, int (*fn)(void *ctx, const stp_ent *e), void *ctx)
{
    if (c->act_seq != s->act.seq || c->act_last == STP_NONE)
        return 0;
    size_t n = 0, cap = 0;
    uint32_t *v = NULL; /* newest first */
    for (uint32_t i = c->act_last; i != STP_NONE; i = s->act_prev[i]) {
        if (rt_grow((void **)&v, &cap, n + 1, sizeof(*v), 64) < 0) {
            free(v);
            return -ENOMEM;
        }
        v[n++] = i;
    }
    int r = 0;
    while (r == 0 && n > 0)
        r = fn(ctx, &s->act.e[v[--n]]);
    free(v);
    return r;
}

void stp_segs_free(stp_store *s)
{
    for (size_t i = 0; i < s->nsealed; i++)
        stp_idx_unmap(&s->sealed[i]);
    free(s->sealed);
    stp_ents_free(s->act.e, s->act.cap, sizeof(*s->act.e));
    stp_ents_free(s->act_prev, s->act_prev_cap, sizeof(*s->act_prev));
    s->act_prev = NULL;
    s->act_prev_cap = 0;
    s->sealed = NULL;
    s->act.e = NULL;
    s->nsealed = 0;
}

/* ---- descriptors ------------------------------------------------------------ */

/* A slot holding seq's descriptor, referenced; NULL if every slot is in use
 * (then the caller opens one of its own). */
static stp_fdslot *fd_get(stp_store *s, uint32_t seq, int *err)
{
    pthread_mutex_lock(&s->fd_mu);
    stp_fdslot *hit = NULL, *victim = NULL;
    for (size_t i = 0; i < STP_FDS && hit == NULL; i++) {
        stp_fdslot *f = &s->fds[i];
        if (f->seq == seq && f->seq != 0)
            hit = f;
        else if (f->refs == 0 && (victim == NULL || f->tick < victim->tick))
            victim = f;
    }
    if (hit == NULL && victim != NULL) {
        char path[4096];
        stp_path(s, seq, "seg", path, sizeof(path));
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            *err = -errno;
            victim = NULL;
        } else {
            if (victim->seq != 0)
                close(victim->fd);
            victim->seq = seq;
            victim->fd = fd;
            hit = victim;
        }
    }
    if (hit != NULL) {
        hit->refs++;
        hit->tick = ++s->fd_tick;
    }
    pthread_mutex_unlock(&s->fd_mu);
    return hit;
}

int stp_pread(stp_store *s, uint32_t seq, void *buf, size_t n, uint64_t off)
{
    int err = 0, r;
    stp_fdslot *f = fd_get(s, seq, &err);
    if (f != NULL) {
        r = st_read_at(f->fd, buf, n, off);
        pthread_mutex_lock(&s->fd_mu);
        if (--f->refs == 0 && f->seq < s->fd_floor) { /* its segment was dropped meanwhile */
            close(f->fd);
            f->seq = 0;
        }
        pthread_mutex_unlock(&s->fd_mu);
        return r;
    }
    if (err < 0)
        return err;
    char path[4096]; /* every cached one is in use: one of our own, for now */
    stp_path(s, seq, "seg", path, sizeof(path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    r = st_read_at(fd, buf, n, off);
    close(fd);
    return r;
}

void stp_fds_close(stp_store *s)
{
    for (size_t i = 0; i < STP_FDS; i++)
        if (s->fds[i].seq != 0) {
            close(s->fds[i].fd);
            s->fds[i].seq = 0;
        }
}
