/*
 * log_write.c - the writer's side of a log: write records (invisible), make
 * them durable, publish them, or cut them back off; roll segments and save
 * checkpoints.
 *
 * A write goes entirely into the active segment, and a segment only rolls
 * when nothing is written but unpublished, so a rollback never spans
 * segments: it truncates the active one to its published end.
 */
#include "log_impl.h"

#include "io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t st_key_hash(const void *key, size_t len)
{
    return st_id_hash(key, len) ^ 0x9e3779b97f4a7c15ull;
}

uint32_t st_key_hash_hi(const void *key, size_t len)
{
    return (uint32_t)(st_key_hash(key, len) >> 32) | 1;
}

int st_log_note_hash(st_log *l, uint64_t index, uint32_t hash_hi, uint32_t khash_hi)
{
    uint64_t k = index - st_log_active(l)->first;
    if (k >= l->act_cap) {
        uint64_t cap = l->act_cap ? l->act_cap * 2 : 16;
        while (cap <= k)
            cap *= 2;
        uint32_t *h = realloc(l->act_hash, cap * sizeof(*h));
        if (h != NULL)
            l->act_hash = h;
        uint32_t *kh = h != NULL ? realloc(l->act_khash, cap * sizeof(*kh)) : NULL;
        if (kh == NULL)
            return -ENOMEM;
        l->act_khash = kh;
        l->act_cap = cap;
    }
    l->act_hash[k] = hash_hi;
    l->act_khash[k] = khash_hi;
    return 0;
}

/* The checkpoint file: magic, first index, count, covered bytes, then the
 * offsets, the id hashes and the key hashes of [first, upto), then a CRC
 * of all before. */
int st_log_write_idx(st_log *l, const st_seg *seg, uint64_t upto, uint64_t covered, bool durable)
{
    uint64_t n = upto - seg->first;
    size_t len = 32 + 12 * n + 4;
    uint8_t *p = malloc(len);
    if (p == NULL)
        return -ENOMEM;
    st_file_header(p, ST_IDX_MAGIC, seg->first);
    st_put64(p + 16, n);
    st_put64(p + 24, covered);
    for (uint64_t i = 0; i < n; i++) {
        st_put32(p + 32 + 4 * i, st_offsets_get(&l->offsets, seg->first + i));
        st_put32(p + 32 + 4 * n + 4 * i, l->act_hash[i]);
        st_put32(p + 32 + 8 * n + 4 * i, l->act_khash[i]);
    }
    st_put32(p + len - 4, st_crc32c(0, p, len - 4));
    char name[64];
    snprintf(name, sizeof(name), "%020llu.idx", (unsigned long long)seg->first);
    int r = durable ? st_write_file_atomic(l->dir, name, p, len)
                    : st_write_file_replace(l->dir, name, p, len);
    free(p);
    return r;
}

/* Seal the active segment (durable data, final checkpoint) and start the
 * next one at the current end. */
static int roll(st_log *l)
{
    st_seg *old = st_log_active(l);
    int r = st_datasync(old->fd);
    if (r == 0)
        r = st_log_write_idx(l, old, l->wcount, l->wend, true);
    if (r == 0)
        r = st_log_new_segment(l, l->wcount);
    if (r < 0)
        return r;
    l->wend = ST_FILE_HDR;
    l->ckpt_count = 0;
    l->dirty = false;
    return 0;
}

int st_log_write(st_log *l, const st_item *items, size_t n, uint64_t *first)
{
    if (l->read_only)
        return -EROFS;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].idlen == 0 || items[i].idlen > ST_ID_MAX || items[i].keylen > ST_KEY_MAX ||
            rt_buf_len(items[i].payload) > ST_PAYLOAD_MAX)
            return -EINVAL;
        total += ST_REC_HDR + items[i].idlen + 1 + items[i].keylen + rt_buf_len(items[i].payload);
    }
    *first = l->wcount;
    if (n == 0)
        return 0;
    st_seg *s = st_log_active(l);
    bool empty_seg = l->wcount == s->first;
    if (l->wcount == stl_log_count(l) && !empty_seg &&
        (l->wend >= l->segment_bytes || l->wend + total > UINT32_MAX)) {
        int r = roll(l);
        if (r < 0)
            return r;
        s = st_log_active(l);
    }
    if (l->wend + total > UINT32_MAX || l->wcount + n >= 0xffffffffull)
        return -EFBIG;
    int r = st_idtab_reserve(&l->ids, 2 * ((l->wcount - stl_log_count(l)) + n));
    if (r < 0)
        return r;
    /* the iovecs and the records' headers, for this write only: kept per
     * log, they cost every open log its largest batch's worth */
    struct iovec *iov = malloc(2 * n * sizeof(*iov) + n * ST_REC_HDR_MAX);
    if (iov == NULL)
        return -ENOMEM;
    uint8_t *scratch = (uint8_t *)(iov + 2 * n);
    uint64_t off = l->wend;
    for (size_t i = 0; i < n && r == 0; i++) {
        const st_item *it = &items[i];
        uint8_t *h = scratch + i * ST_REC_HDR_MAX;
        size_t hl = st_rec_encode(h, NULL, 0, l->wcount + i, it->id, it->idlen, it->key, it->keylen,
                                  rt_buf_data(it->payload), (uint32_t)rt_buf_len(it->payload));
        iov[2 * i] = (struct iovec){h, hl};
        iov[2 * i + 1] = (struct iovec){(void *)rt_buf_data(it->payload), rt_buf_len(it->payload)};
        r = st_offsets_set(&l->offsets, l->wcount + i, (uint32_t)off);
        if (r == 0)
            r = st_log_note_hash(l, l->wcount + i, (uint32_t)(st_id_hash(it->id, it->idlen) >> 32),
                                 it->keylen > 0 ? st_key_hash_hi(it->key, it->keylen) : 0);
        off += hl + rt_buf_len(it->payload);
    }
    if (r == 0)
        r = st_write_all(s->fd, iov, (int)(2 * n), (off_t)l->wend);
    free(iov);
    if (r < 0) {
        /* leave nothing of this write behind; if even that fails, the bytes
         * past the published end are a tail that the next open cuts off */
        st_truncate(s->fd, l->wend);
        return r;
    }
    l->wcount += n;
    l->wend = off;
    l->dirty = true;
    return 0;
}

uint64_t st_log_next(const st_log *l)
{
    return l->wcount;
}

int st_log_sync(st_log *l)
{
    if (!l->dirty)
        return 0;
    int r = st_datasync(st_log_active(l)->fd);
    if (r == 0)
        l->dirty = false;
    return r;
}

void st_log_publish(st_log *l)
{
    st_seg *s = st_log_active(l);
    for (uint64_t i = stl_log_count(l); i < l->wcount; i++) { /* room was reserved */
        st_idtab_add(&l->ids, (uint64_t)l->act_hash[i - s->first] << 32, i);
        if (l->act_khash[i - s->first] != 0)
            st_idtab_add(&l->ids, (uint64_t)l->act_khash[i - s->first] << 32, i);
    }
    atomic_store_explicit(&s->end, l->wend, memory_order_release);
    atomic_store_explicit(&l->count, l->wcount, memory_order_release);
}

int st_log_rollback(st_log *l)
{
    uint64_t count = stl_log_count(l);
    if (l->wcount == count)
        return 0;
    st_seg *s = st_log_active(l);
    l->wcount = count;
    if (s == NULL) /* no segment: nothing was written to take back */
        return 0;
    uint64_t end = atomic_load_explicit(&s->end, memory_order_relaxed);
    l->wend = end;
    return st_truncate(s->fd, end);
}

uint64_t st_log_unchecked(const st_log *l)
{
    st_seg *s = st_log_active(l);
    return s == NULL ? 0 : stl_log_count(l) - s->first - l->ckpt_count;
}

int st_log_checkpoint(st_log *l)
{
    st_seg *s = st_log_active(l);
    if (l->read_only || s == NULL || st_log_unchecked(l) == 0)
        return 0;
    uint64_t count = stl_log_count(l);
    int r = st_log_write_idx(l, s, count, atomic_load_explicit(&s->end, memory_order_relaxed),
                             !l->journaled);
    if (r == 0)
        l->ckpt_count = count - s->first;
    return r;
}
