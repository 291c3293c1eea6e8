/*
 * pool_seal.c - the thread that makes a sealed segment's files (pool.c):
 * its index file (pool_idx.c), then the catalog's checkpoint (pool_ckpt.c),
 * off the committer's path: a roll only hands over the segment's index,
 * in write order, and takes the checkpoint's snapshot.
 *
 * Until its file is written, fsynced and mapped, a sealed index stays in
 * the heap where the committer left it; this thread sorts a copy, writes
 * the file from it, and swaps the mapping in under seg_mu (readers hold
 * seg_mu while they use an index, and walk an unsorted one in order) and
 * the heap copy goes. If the file cannot be written the sorted copy takes
 * the heap index's place (said in the log): the next open scans that
 * segment again.
 *
 * Both wait for the segments they describe to be durable: a lazy roll
 * (pool_seg.c) leaves that sync to this thread.
 *
 * Once a checkpoint is written, the segments before what it covers go,
 * and a round of carrying (pool_carry.c) may let the next one cover less.
 *
 * A checkpoint not written yet is replaced by a newer one; a roll while
 * one is being written takes none (the next roll's or the close's covers
 * it). The writes go through the I/O table (io.h), so the fault tests
 * reach them; the thread finishes what is queued before the store closes.
 */
#include "pool_impl.h"

#include "io.h"
#include "runtime/grow.h"
#include "runtime/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Write seq's index and put its mapping in place of the heap copy. */
static void write_idx(stp_store *s, uint32_t seq)
{
    pthread_mutex_lock(&s->seg_mu);
    stp_segidx *x = stp_sealed_of(s, seq);
    stp_segidx t = x != NULL ? *x : (stp_segidx){0};
    pthread_mutex_unlock(&s->seg_mu);
    if (x == NULL || t.state != STP_IDX_HEAP)
        return;
    /* t.e stays valid: only this thread frees a sealed heap index (or the
     * close, after this thread stopped) */
    stp_segidx sorted = {.seq = seq, .end = t.end};
    if (!t.sorted && t.n > 1) {
        /* a roll leaves it in write order: it is sorted here, a copy, so
         * that neither the committer (2-4 ms a 16 MiB segment, during which
         * no group was written) nor a reader waits; until the swap below,
         * readers walk it in order */
        if (stp_ents_grow((void **)&sorted.e, &sorted.cap, t.n, sizeof(*t.e)) < 0) {
            rt_log(RT_LOG_ERROR, "store",
                   "pool: cannot sort the index of segment %" PRIu32 " (no memory): it stays "
                   "in memory",
                   seq);
            return;
        }
        memcpy(sorted.e, t.e, t.n * sizeof(*t.e));
        sorted.n = t.n;
        stp_idx_sort(&sorted);
    }
    const stp_ent *e = sorted.e != NULL ? sorted.e : t.e;
    int r = stp_idx_write(s, seq, t.end, e, t.n);
    char why[128] = "";
    stp_segidx m = {.seq = seq, .end = t.end};
    if (r == 0)
        r = stp_idx_map(s, &m, why, sizeof(why));
    if (r < 0) {
        rt_log(RT_LOG_ERROR, "store",
               "pool: cannot write the index of segment %" PRIu32 " (%s): it stays in memory", seq,
               why[0] ? why : strerror(-r));
        m = sorted; /* in the heap, sorted at least */
        if (m.e == NULL)
            return;
    } else {
        stp_ents_free(sorted.e, sorted.cap, sizeof(*sorted.e));
    }
    pthread_mutex_lock(&s->seg_mu);
    x = stp_sealed_of(s, seq);
    bool same = x != NULL && x->state == STP_IDX_HEAP && x->e == t.e;
    if (same)
        *x = m;
    pthread_mutex_unlock(&s->seg_mu);
    if (same)
        stp_ents_free(t.e, t.cap, sizeof(*t.e));
    else
        stp_idx_unmap(&m);
}

static void write_ckpt(stp_store *s, uint32_t seq, uint8_t *b, size_t len)
{
    char name[32];
    snprintf(name, sizeof(name), "%020" PRIu32 ".ckpt", seq);
    int r = st_write_file_atomic(s->pool_dir, name, b, len);
    uint32_t first = st_get32(b + 16); /* what it covers starts there */
    free(b);
    if (r < 0) {
        rt_log(RT_LOG_ERROR, "store",
               "pool: cannot write the checkpoint of segment %" PRIu32
               " (%s): the next open scans from the one before",
               seq, strerror(-r));
        return;
    }
    stp_ckpt_prune(s);
    stp_seg_drop_before(s, first);
    if (!atomic_load(&s->carry_paused)) /* what keeps the oldest segments, */
        stp_carry(s);                   /* for the next checkpoint to drop */
}

enum { SEAL_BACKLOG = 8 };

static void *seal_main(void *arg)
{
    stp_store *s = arg;
    pthread_setname_np(pthread_self(), "parley-seal");
    pthread_mutex_lock(&s->sl_mu);
    for (;;) {
        while (!s->sl_stop && s->sl_n == 0 && s->sl_ckpt == NULL)
            pthread_cond_wait(&s->sl_cv, &s->sl_mu);
        if (s->sl_n == 0 && s->sl_ckpt == NULL)
            break; /* stopped, and nothing is left */
        /* indexes first: they are what the memory waits for, and a
         * checkpoint written before the index of a segment it covers
         * makes an open after a crash scan that segment again. But when
         * segments roll faster than their indexes are written the queue
         * never empties, and a checkpoint behind it would wait for the
         * load to ease, with every removal and carry: past SEAL_BACKLOG
         * indexes waiting, a waiting checkpoint goes next. */
        bool idx = s->sl_n > 0 && (s->sl_ckpt == NULL || s->sl_n <= SEAL_BACKLOG);
        uint32_t seq = idx ? s->sl_seqs[0] : s->sl_ckpt_seq;
        uint8_t *b = idx ? NULL : s->sl_ckpt;
        size_t len = s->sl_ckpt_len;
        if (idx)
            memmove(s->sl_seqs, s->sl_seqs + 1, --s->sl_n * sizeof(s->sl_seqs[0]));
        else
            s->sl_ckpt = NULL;
        s->sl_ckpt_busy = !idx;
        pthread_mutex_unlock(&s->sl_mu);
        /* what they describe is durable first (a lazy roll's segment) */
        int r = stp_sync_sealed(s, seq);
        if (r < 0)
            rt_log(RT_LOG_ERROR, "store",
                   "pool: cannot sync segment %" PRIu32 " (%s): its %s is not written", seq,
                   strerror(-r), idx ? "index" : "checkpoint");
        else if (idx)
            write_idx(s, seq);
        else
            write_ckpt(s, seq, b, len);
        if (r < 0 && !idx)
            free(b);
        pthread_mutex_lock(&s->sl_mu);
        s->sl_ckpt_busy = false;
    }
    pthread_mutex_unlock(&s->sl_mu);
    return NULL;
}

int stp_seal_start(stp_store *s)
{
    int r = -pthread_create(&s->sl_thread, NULL, seal_main, s);
    s->sl_started = r == 0;
    return r;
}

void stp_seal_stop(stp_store *s)
{
    if (s->sl_started) {
        pthread_mutex_lock(&s->sl_mu);
        s->sl_stop = true;
        pthread_cond_broadcast(&s->sl_cv);
        pthread_mutex_unlock(&s->sl_mu);
        pthread_join(s->sl_thread, NULL);
        s->sl_started = false;
    }
    free(s->sl_seqs);
    free(s->sl_ckpt);
    s->sl_seqs = NULL;
    s->sl_ckpt = NULL;
    s->sl_n = s->sl_cap = 0;
}

void stp_seal_idx(stp_store *s, uint32_t seq)
{
    pthread_mutex_lock(&s->sl_mu);
    if (rt_grow((void **)&s->sl_seqs, &s->sl_cap, s->sl_n + 1, sizeof(*s->sl_seqs), 16) == 0) {
        s->sl_seqs[s->sl_n++] = seq;
        pthread_cond_broadcast(&s->sl_cv);
    } /* else it stays in memory, and the next open scans it */
    pthread_mutex_unlock(&s->sl_mu);
}

void stp_seal_ckpt(stp_store *s, uint32_t seq, uint8_t *buf, size_t len)
{
    pthread_mutex_lock(&s->sl_mu);
    free(s->sl_ckpt);
    s->sl_ckpt = buf;
    s->sl_ckpt_len = len;
    s->sl_ckpt_seq = seq;
    pthread_cond_broadcast(&s->sl_cv);
    pthread_mutex_unlock(&s->sl_mu);
}

void stp_seal_roll_ckpt(stp_store *s, uint32_t seq)
{
    pthread_mutex_lock(&s->sl_mu);
    bool writing = s->sl_ckpt_busy;
    pthread_mutex_unlock(&s->sl_mu);
    uint8_t *b;
    size_t len;
    s->ckpt_since += s->o.segment_bytes; /* about what a roll wrote */
    if (writing || s->no_ckpt || s->ckpt_since < s->ckpt_every || atomic_load(&s->copying) ||
        stp_ckpt_snapshot(s, seq, &b, &len) < 0)
        return;
    s->ckpt_since = 0;
    s->ckpt_every = 8 * (uint64_t)len;
    stp_seal_ckpt(s, seq, b, len);
}
