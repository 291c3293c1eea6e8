/*
 * pool_ckpt.c - the catalog's checkpoint (pool.c): the conversations as
 * they are at the end of a sealed segment, DIR/pool/<seq>.ckpt, so that an
 * open loads it and scans only the segments after it.
 *
 * Written at each roll from the committer's catalog (the snapshot is the
 * committer's, between groups; the file is written by pool_seal.c's
 * thread: temp file, fsync, rename, directory fsync), after an open that
 * had to scan, and at close. The newest two are kept. A checkpoint holds,
 * per durable conversation: its id, parent, its records' tag if not its
 * id (pool_carry.c), event count, the segment of its CREATE, whether it
 * is read-only (corruption found), where its meta and files are and its
 * runs;
 * and for the pool: the segments it covers and where each one's last
 * group ends, and what corruption was found. Deleted conversations are
 * simply absent (a DELETE after it is applied by the scan, as is a
 * CREATE of the same id again).
 *
 * It is used only if it is whole (CRC-32C over everything) and the
 * segments it covers are all there, each at least as long as it says:
 * else the next older one is tried, then a scan of every segment. A crash
 * between a roll and its checkpoint leaves the older one: the open scans
 * one segment more. Corruption inside a segment a checkpoint covers is not
 * looked for at open, as the local store's checkpoints do not: a reader
 * that reaches the record gets -EBADMSG.
 *
 * It covers the segments from the oldest CREATE of a conversation still
 * there (stp_keep_from): once it is written, the ones before are removed
 * (pool_seg.c), which is how deleted conversations give their space back.
 * A checkpoint written before create_seq was kept (magic version 1) is
 * read with every conversation's taken as its first segment: nothing is
 * dropped until they are deleted.
 *
 * A checkpoint is as of the end of a sealed segment, and sealed segments
 * are synced before the next begins (and at close before the last one's
 * checkpoint): it never names a record a power cut could take back.
 */
#include "pool_impl.h"

#include "crc32c.h"
#include "io.h"
#include "runtime/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { HDR = 28, F_PARENT = 1, F_BROKEN = 2, F_TAG = 4 };

/* ---- encoding (pure) ---------------------------------------------------------- */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    bool fail;
} wbuf;

static uint8_t *room(wbuf *w, size_t n)
{
    if (w->fail)
        return NULL;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *np = realloc(w->p, cap);
        if (np == NULL) {
            w->fail = true;
            return NULL;
        }
        w->p = np;
        w->cap = cap;
    }
    uint8_t *at = w->p + w->len;
    w->len += n;
    return at;
}

static void put_bytes(wbuf *w, const void *b, size_t n)
{
    uint8_t *at = room(w, n);
    if (at != NULL && n > 0)
        memcpy(at, b, n);
}

static void put32(wbuf *w, uint32_t v)
{
    uint8_t *at = room(w, 4);
    if (at != NULL)
        st_put32(at, v);
}

static void put64(wbuf *w, uint64_t v)
{
    uint8_t *at = room(w, 8);
    if (at != NULL)
        st_put64(at, v);
}

static void put_loc(wbuf *w, stp_loc l)
{
    put32(w, l.seq);
    put32(w, l.off);
    put32(w, l.len);
}

int stp_ckpt_encode(const stp_ckpt *h, stp_conv *const *v, size_t n, uint8_t **out, size_t *len)
{
    wbuf w = {0};
    /* about what it takes (a conversation of a few runs, no file): one
     * allocation rather than a dozen copies as it doubles */
    size_t guess = HDR + 8 * (size_t)(h->seq - h->first + 1) + 600 + 80 * n;
    if ((w.p = malloc(guess)) != NULL)
        w.cap = guess;
    uint8_t *hdr = room(&w, HDR);
    if (hdr != NULL) {
        st_file_header(hdr, STP_CKPT_MAGIC, h->seq);
        st_put32(hdr + 16, h->first);
        st_put64(hdr + 20, n);
    }
    for (uint32_t k = 0; h->seq >= h->first && k <= h->seq - h->first; k++)
        put64(&w, h->ends[k]);
    size_t cl = strnlen(h->corrupt, sizeof(h->corrupt) - 1);
    put32(&w, (uint32_t)cl);
    put_bytes(&w, h->corrupt, cl);
    for (size_t i = 0; i < n; i++) {
        const stp_conv *c = v[i];
        put_bytes(&w, c->id.b, sizeof(c->id.b));
        bool tagged = !rt_uuid_eq(&c->tag, &c->id);
        uint8_t flags = (uint8_t)((c->has_parent ? F_PARENT : 0) | (c->broken ? F_BROKEN : 0) |
                                  (tagged ? F_TAG : 0));
        put_bytes(&w, &flags, 1);
        if (c->has_parent)
            put_bytes(&w, c->parent.b, sizeof(c->parent.b));
        if (tagged)
            put_bytes(&w, c->tag.b, sizeof(c->tag.b));
        put32(&w, c->count);
        put32(&w, c->create_seq);
        put_loc(&w, c->meta_at);
        const stp_runs *runs = atomic_load_explicit(&c->runs, memory_order_relaxed);
        put32(&w, runs != NULL ? runs->n : 0);
        for (uint32_t k = 0; runs != NULL && k < runs->n; k++) {
            put32(&w, runs->r[k].seq);
            put32(&w, runs->r[k].first);
        }
        uint32_t nf = 0;
        for (const stp_file *f = c->files; f != NULL; f = f->next)
            nf++;
        put32(&w, nf);
        /* last first: decoding prepends, so the list comes back as it was */
        for (uint32_t k = nf; k-- > 0;) {
            const stp_file *f = c->files;
            for (uint32_t j = 0; j < k; j++)
                f = f->next;
            uint32_t fl = (uint32_t)strlen(f->name);
            put32(&w, fl);
            put_bytes(&w, f->name, fl);
            put_loc(&w, f->at);
        }
    }
    if (!w.fail)
        put32(&w, st_crc32c(0, w.p, w.len));
    if (w.fail) {
        free(w.p);
        return -ENOMEM;
    }
    *out = w.p;
    *len = w.len;
    return 0;
}

/* ---- decoding (pure) ---------------------------------------------------------- */

typedef struct rbuf {
    const uint8_t *p;
    size_t len, at;
    bool bad;
    uint32_t v1_first; /* a checkpoint without create_seq: its first segment (else 0) */
} rbuf;

static const uint8_t *take(rbuf *r, size_t n)
{
    if (r->bad || r->len - r->at < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->at;
    r->at += n;
    return p;
}

static uint32_t get32(rbuf *r)
{
    const uint8_t *p = take(r, 4);
    return p != NULL ? st_get32(p) : 0;
}

static uint64_t get64(rbuf *r)
{
    const uint8_t *p = take(r, 8);
    return p != NULL ? st_get64(p) : 0;
}

static stp_loc get_loc(rbuf *r)
{
    stp_loc l;
    l.seq = get32(r);
    l.off = get32(r);
    l.len = get32(r);
    return l;
}

/* One conversation, or NULL (r->bad, or out of memory: *err). */
static stp_conv *get_conv(rbuf *r, stp_store *s, int *err)
{
    const uint8_t *id = take(r, 16), *flags = take(r, 1);
    if (r->bad)
        return NULL;
    rt_uuid u;
    memcpy(u.b, id, sizeof(u.b));
    stp_conv *c = stp_conv_new(s, &u);
    if (c == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    c->has_parent = (*flags & F_PARENT) != 0;
    c->broken = (*flags & F_BROKEN) != 0;
    const uint8_t *pa = c->has_parent ? take(r, 16) : NULL;
    if (pa != NULL)
        memcpy(c->parent.b, pa, sizeof(c->parent.b));
    const uint8_t *tag = (*flags & F_TAG) != 0 ? take(r, 16) : NULL;
    if (tag != NULL)
        memcpy(c->tag.b, tag, sizeof(c->tag.b));
    c->count = get32(r);
    c->create_seq = r->v1_first != 0 ? r->v1_first : get32(r);
    c->meta_at = get_loc(r);
    uint32_t nr = get32(r);
    if (!r->bad && (uint64_t)nr * 8 > r->len - r->at)
        r->bad = true;
    if (!r->bad && nr > 0) {
        stp_runs *runs = malloc(sizeof(*runs) + nr * sizeof(runs->r[0]));
        if (runs == NULL) {
            *err = -ENOMEM;
            stp_conv_free(c);
            return NULL;
        }
        runs->n = nr;
        for (uint32_t k = 0; k < nr; k++) {
            runs->r[k].seq = get32(r);
            runs->r[k].first = get32(r);
        }
        atomic_store_explicit(&c->runs, runs, memory_order_relaxed);
    }
    uint32_t nf = get32(r);
    for (uint32_t k = 0; !r->bad && k < nf; k++) {
        uint32_t fl = get32(r);
        const uint8_t *name = fl <= 255 ? take(r, fl) : (r->bad = true, NULL);
        stp_loc at = get_loc(r);
        if (!r->bad && stp_set_file(c, (const char *)name, fl, at) < 0) {
            *err = -ENOMEM;
            break;
        }
    }
    if (r->bad || *err < 0) {
        stp_conv_free(c);
        return NULL;
    }
    return c;
}

int stp_ckpt_decode(const uint8_t *p, size_t len, stp_ckpt *h, stp_store *s,
                    int (*add)(void *ctx, stp_conv *c), void *ctx)
{
    memset(h, 0, sizeof(*h));
    uint64_t seq;
    bool v1 = len >= HDR + 8 && st_file_header_ok(p, STP_CKPT_MAGIC_V1, &seq);
    if (len < HDR + 8 ||
        !(v1 || st_file_header_ok(p, STP_CKPT_MAGIC, &seq) ||
          st_file_header_ok(p, STP_CKPT_MAGIC_V2, &seq)) ||
        seq >= UINT32_MAX || st_crc32c(0, p, len - 4) != st_get32(p + len - 4))
        return -EBADMSG;
    rbuf r = {p, len - 4, HDR, false, 0};
    h->seq = (uint32_t)seq;
    h->first = st_get32(p + 16);
    r.v1_first = v1 ? h->first : 0;
    uint64_t n = st_get64(p + 20);
    if (h->first == 0 || h->first > h->seq)
        return -EBADMSG;
    size_t nseg = (size_t)(h->seq - h->first) + 1;
    if (nseg > (len - HDR) / 8)
        return -EBADMSG;
    if ((h->ends = malloc(nseg * sizeof(h->ends[0]))) == NULL)
        return -ENOMEM;
    for (size_t k = 0; k < nseg; k++)
        h->ends[k] = get64(&r);
    uint32_t cl = get32(&r);
    const uint8_t *cs = cl < sizeof(h->corrupt) ? take(&r, cl) : (r.bad = true, NULL);
    if (cs != NULL) {
        memcpy(h->corrupt, cs, cl);
        h->corrupt[cl] = '\0';
    }
    int err = 0;
    for (uint64_t i = 0; !r.bad && err == 0 && i < n; i++) {
        stp_conv *c = get_conv(&r, s, &err);
        if (c != NULL && (c->create_seq < h->first || c->create_seq > h->seq)) {
            stp_conv_free(c); /* created in a segment it does not cover: not ours */
            r.bad = true;
        } else if (c != NULL) {
            err = add(ctx, c);
        }
    }
    if (err == 0 && (r.bad || r.at != r.len))
        err = -EBADMSG;
    if (err < 0) {
        free(h->ends);
        h->ends = NULL;
    }
    return err;
}

/* ---- the store's --------------------------------------------------------------- */

int stp_ckpt_snapshot(stp_store *s, uint32_t seq, uint8_t **out, size_t *len)
{
    stp_ckpt h = {.seq = seq};
    pthread_mutex_lock(&s->cat_mu);
    uint32_t keep = stp_keep_from(s, seq); /* before it: deleted conversations' only */
    pthread_mutex_unlock(&s->cat_mu);
    pthread_mutex_lock(&s->seg_mu);
    size_t ns = s->nsealed;
    bool dense = ns > 0 && s->sealed[ns - 1].seq == seq &&
                 (uint64_t)s->sealed[ns - 1].seq - s->sealed[0].seq + 1 == ns;
    size_t skip = dense && keep > s->sealed[0].seq ? keep - s->sealed[0].seq : 0;
    h.first = dense ? s->sealed[skip].seq : 0;
    h.ends = dense ? malloc((ns - skip) * sizeof(h.ends[0])) : NULL;
    for (size_t k = 0; h.ends != NULL && k < ns - skip; k++)
        h.ends[k] = s->sealed[skip + k].end;
    pthread_mutex_unlock(&s->seg_mu);
    if (h.ends == NULL)
        return dense ? -ENOMEM : -EINVAL;
    snprintf(h.corrupt, sizeof(h.corrupt), "%s", s->corrupt);
    pthread_mutex_lock(&s->cat_mu);
    stp_conv **v = malloc((s->count ? s->count : 1) * sizeof(*v));
    size_t n = 0;
    /* a creation not applied yet has no meta: it is in a later group */
    for (size_t i = 0; v != NULL && i < s->nbuckets; i++)
        for (stp_conv *c = s->buckets[i]; c != NULL; c = c->next)
            if (c->meta_at.seq != 0)
                v[n++] = c;
    int r = v != NULL ? stp_ckpt_encode(&h, v, n, out, len) : -ENOMEM;
    pthread_mutex_unlock(&s->cat_mu);
    free(v);
    free(h.ends);
    return r;
}

static int add_conv(void *ctx, stp_conv *c)
{
    stp_store *s = ctx;
    int r = stp_lookup(s, &c->id) == NULL ? stp_insert(s, c) : -EBADMSG;
    if (r < 0)
        stp_conv_free(c);
    return r;
}

static void catalog_clear(stp_store *s)
{
    for (size_t i = 0; i < s->nbuckets; i++) {
        for (stp_conv *c = s->buckets[i], *next; c != NULL; c = next) {
            next = c->next;
            stp_conv_free(c);
        }
        s->buckets[i] = s->kids[i] = NULL;
    }
    s->count = 0;
}

/* Are the segments h covers all there, each as long as it says? Those
 * before them (*older of them) are not its business. */
static bool segments_ok(stp_store *s, const stp_ckpt *h, const uint64_t *seqs, size_t n,
                        size_t *older, char *why, size_t cap)
{
    size_t i = 0;
    while (i < n && seqs[i] < h->first)
        i++;
    *older = i;
    for (uint32_t q = h->first; q <= h->seq; q++, i++) {
        char path[4096];
        struct stat st;
        stp_path(s, q, "seg", path, sizeof(path));
        if (i >= n || seqs[i] != q || stat(path, &st) != 0) {
            snprintf(why, cap, "segment %" PRIu32 " it covers is gone", q);
            return false;
        }
        if ((uint64_t)st.st_size < h->ends[q - h->first]) {
            snprintf(why, cap, "segment %" PRIu32 " is shorter than it says", q);
            return false;
        }
    }
    return true;
}

/* Segments before a checkpoint's first hold only deleted conversations'
 * records: once it was written they were being removed, in ascending
 * order (pool_seg.c), when the store stopped. The open finishes that,
 * rather than scan them (and, under `none`, every later segment, as
 * neither checkpoint could be used). */
static void drop_older(stp_store *s, const uint64_t *seqs, size_t older)
{
    for (size_t i = 0; i < older; i++)
        stp_seg_remove(s, (uint32_t)seqs[i]);
    if (older > 0) {
        st_fsync_dir(s->pool_dir);
        rt_log(RT_LOG_INFO, "store",
               "pool: segments %" PRIu64 "-%" PRIu64
               " held only deleted conversations (their removal was cut short): removed",
               seqs[0], seqs[older - 1]);
    }
}

int stp_ckpt_load(stp_store *s, const uint64_t *seqs, size_t n, uint32_t *covered)
{
    uint64_t *ck;
    size_t nck;
    *covered = 0;
    int r = st_list_numbered(s->pool_dir, "ckpt", &ck, &nck);
    if (r < 0)
        return r;
    for (size_t i = nck; r == 0 && i-- > 0 && *covered == 0;) {
        char path[4096], why[128] = "";
        stp_path(s, (uint32_t)ck[i], "ckpt", path, sizeof(path));
        char *data;
        size_t len;
        stp_ckpt h = {.seq = 0};
        int e = ck[i] < UINT32_MAX ? st_read_file(path, SIZE_MAX / 2, &data, &len) : -EBADMSG;
        if (e == 0) {
            e = stp_ckpt_decode((const uint8_t *)data, len, &h, s, add_conv, s);
            free(data);
        }
        size_t older = 0;
        if (e == 0 && (h.seq != ck[i] || !segments_ok(s, &h, seqs, n, &older, why, sizeof(why))))
            e = -EBADMSG;
        for (uint32_t q = h.first; e == 0 && q <= h.seq; q++) {
            stp_segidx *x = stp_sealed_add(s, q);
            if (x == NULL)
                e = -ENOMEM;
            else {
                x->state = STP_IDX_LAZY;
                x->end = h.ends[q - h.first];
            }
        }
        if (e == 0) {
            snprintf(s->corrupt, sizeof(s->corrupt), "%s", h.corrupt);
            *covered = h.seq;
            drop_older(s, seqs, older);
        } else {
            if (e == -ENOMEM)
                r = e;
            rt_log(RT_LOG_WARN, "store", "pool: checkpoint %s not used (%s): %s", path,
                   why[0] ? why : strerror(-e),
                   i > 0 ? "trying the one before" : "scanning every segment");
            catalog_clear(s);
            for (size_t k = 0; k < s->nsealed; k++)
                stp_idx_unmap(&s->sealed[k]);
            s->nsealed = 0;
        }
        free(h.ends);
    }
    free(ck);
    return r;
}

void stp_ckpt_prune(stp_store *s)
{
    uint64_t *ck;
    size_t n;
    if (st_list_numbered(s->pool_dir, "ckpt", &ck, &n) < 0)
        return;
    for (size_t i = 0; i + 2 < n; i++) {
        char path[4096];
        stp_path(s, (uint32_t)ck[i], "ckpt", path, sizeof(path));
        unlink(path);
    }
    free(ck);
}
