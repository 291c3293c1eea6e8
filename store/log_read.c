/*
 * log_read.c - readers of a log, on any thread, without locks.
 *
 * A reader takes the published count first (acquire); everything the writer
 * did before publishing it (records on disk, offsets, id slots, segments) is
 * then visible. A page of consecutive events costs one pread per segment it
 * touches, wherever it is in the log, and every record is checked against
 * its CRC before it is handed out.
 */
#include "log_impl.h"

#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t stl_log_count(const st_log *l)
{
    return atomic_load_explicit(&((st_log *)l)->count, memory_order_acquire);
}

typedef struct span {
    const st_seg *seg;
    uint64_t from, to; /* bytes */
} span;

/* Where [first, first + n) lies: one span per segment touched. */
static size_t plan(const st_log *l, const st_segs *segs, uint64_t first, uint64_t n, uint64_t count,
                   span *out)
{
    size_t k = 0;
    uint64_t i = first;
    for (size_t si = st_segs_pos(segs, first); i < first + n; si++, k++) {
        const st_seg *s = segs->seg[si];
        uint64_t next = si + 1 < segs->n ? segs->seg[si + 1]->first : UINT64_MAX;
        uint64_t j = first + n < next ? first + n : next; /* this span: [i, j) */
        out[k].seg = s;
        out[k].from = st_offsets_get(&l->offsets, i);
        /* a record's end is the next one's start, or its segment's end (for
         * the active segment that may already count newer records, which
         * the decoding below simply does not reach) */
        out[k].to = j < next && j < count ? st_offsets_get(&l->offsets, j)
                                          : atomic_load_explicit(&s->end, memory_order_acquire);
        i = j;
    }
    return k;
}

int stl_log_read(st_log *l, uint64_t first, uint32_t max, st_page **out)
{
    uint64_t count = stl_log_count(l);
    uint32_t n = first < count ? (uint32_t)(count - first < max ? count - first : max) : 0;
    st_page *p = malloc(sizeof(*p) + n * sizeof(p->ev[0]));
    if (p == NULL)
        return -ENOMEM;
    p->n = 0;
    p->bytes = NULL;
    if (n == 0) {
        *out = p;
        return 0;
    }
    const st_segs *segs = atomic_load_explicit(&l->segs, memory_order_acquire);
    span stack[8], *spans = stack;
    size_t touched = st_segs_pos(segs, first + n - 1) - st_segs_pos(segs, first) + 1;
    if (touched > 8 && (spans = malloc(touched * sizeof(*spans))) == NULL) {
        free(p);
        return -ENOMEM;
    }
    size_t k = plan(l, segs, first, n, count, spans);
    uint64_t total = 0;
    for (size_t i = 0; i < k; i++)
        total += spans[i].to - spans[i].from;
    int r = (p->bytes = rt_buf_new((size_t)total)) == NULL ? -ENOMEM : 0;
    uint8_t *base = r == 0 ? rt_buf_wdata(p->bytes) : NULL;
    uint64_t at = 0;
    for (size_t i = 0; r == 0 && i < k; i++) {
        r = st_read_at(spans[i].seg->fd, base + at, (size_t)(spans[i].to - spans[i].from),
                       spans[i].from);
        at += spans[i].to - spans[i].from;
    }
    /* decode span by span: a span may end with bytes of newer records */
    at = 0;
    for (size_t i = 0; r == 0 && i < k; i++) {
        uint64_t pos = at, stop = at + (spans[i].to - spans[i].from);
        while (r == 0 && p->n < n && pos < stop) {
            st_rec rec;
            if (st_rec_decode(base + pos, (size_t)(stop - pos), false, 0, &rec) != ST_REC_OK ||
                rec.index != first + p->n) {
                r = -EBADMSG;
                break;
            }
            st_event_ref *e = &p->ev[p->n++];
            e->index = rec.index;
            e->off = (uint32_t)(rec.payload - base);
            e->len = rec.len;
            e->id_off = (uint32_t)(rec.id - base);
            e->id_len = rec.idlen;
            pos += rec.size;
        }
        at = stop;
    }
    if (spans != stack)
        free(spans);
    if (r == 0 && p->n != n)
        r = -EBADMSG;
    if (r < 0) {
        st_page_free(p);
        return r;
    }
    *out = p;
    return 0;
}

void st_page_free(st_page *p)
{
    if (p == NULL)
        return;
    rt_buf_unref(p->bytes);
    free(p);
}

typedef struct find_ctx {
    const st_log *l;
    const st_segs *segs;
    const void *want;
    size_t len;
    bool key; /* compare the record's key, not its id */
} find_ctx;

/* Does the record at `index` carry this id (or key)? Reads its header only. */
static bool matches(void *arg, uint64_t index)
{
    find_ctx *c = arg;
    const st_seg *s = st_segs_find(c->segs, index);
    uint64_t off = st_offsets_get(&c->l->offsets, index);
    uint64_t end = atomic_load_explicit(&((st_seg *)s)->end, memory_order_acquire);
    uint8_t hdr[ST_REC_HDR + ST_ID_MAX + 1 + ST_KEY_MAX];
    size_t want = end - off < sizeof(hdr) ? (size_t)(end - off) : sizeof(hdr);
    if (st_read_at(s->fd, hdr, want, off) != 0 || want < ST_REC_HDR)
        return false;
    size_t idlen = hdr[ST_REC_HDR - 1];
    if (!c->key)
        return idlen == c->len && ST_REC_HDR + idlen <= want &&
               memcmp(hdr + ST_REC_HDR, c->want, c->len) == 0;
    size_t at = ST_REC_HDR + idlen;
    return at < want && hdr[at] == c->len && at + 1 + c->len <= want &&
           memcmp(hdr + at + 1, c->want, c->len) == 0;
}

static int find(st_log *l, const void *what, size_t len, bool key, uint64_t *index)
{
    if (len == 0 || len > 255)
        return -ENOENT;
    uint64_t count = stl_log_count(l);
    if (count == 0)
        return -ENOENT;
    find_ctx c = {l, atomic_load_explicit(&l->segs, memory_order_acquire), what, len, key};
    uint64_t hash = key ? st_key_hash(what, len) : st_id_hash(what, len);
    uint64_t i = st_idtab_find(&l->ids, hash | (key ? (uint64_t)1 << 32 : 0), count, matches, &c);
    if (i == UINT64_MAX)
        return -ENOENT;
    *index = i;
    return 0;
}

int stl_log_find(st_log *l, const void *id, size_t idlen, uint64_t *index)
{
    return find(l, id, idlen, false, index);
}

int stl_log_find_key(st_log *l, const void *key, size_t keylen, uint64_t *index)
{
    return find(l, key, keylen, true, index);
}
