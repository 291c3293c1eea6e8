/*
 * pool_carry.c - carrying live conversations forward, so that the segments
 * they keep can go (pool.c).
 *
 * Space comes back from the oldest end: a segment goes once no live
 * conversation was created in it or before it. So one old conversation
 * that lives keeps every segment written since, its deleted neighbours'
 * records included. A carry writes such a conversation again at the
 * active segment's end, in one group: a CREATE (its parent, its meta now),
 * its events in order, its files: the records its creation and later calls
 * would have written. An open already takes a CREATE of a known id as a
 * new incarnation that replaces the old one (pool_scan.c), so a carry needs
 * no record of its own, and after a crash at any point an open finds
 * either the old records or the whole copy (a group is cut whole), the
 * same conversation either way. Once the group is durable the catalog
 * names the copy (runs, meta, files; create_seq the active segment); the
 * next checkpoint starts after the segments it no longer needs, and they
 * go (pool_seg.c).
 *
 * When: after each checkpoint (the sealing thread), the conversations
 * created in the oldest segment still kept are carried together if their
 * bytes are at most half of what it frees (the segments from theirs up to
 * the next live conversation's), so every byte written again frees at
 * least two; then the next oldest, up to a quarter segment a round. The
 * first carry of a round may be larger, up to four segments (64 MiB by
 * default): a conversation that grew large still moves, once its
 * neighbours' deletions free twice its size, and the appends wait for
 * its write and sync then; of several together larger than that, those
 * that fit (the others in the next rounds). One larger than that moves
 * alone as a round's first carry, in several groups (pool_copy.c). Not
 * carried, and keeping their segments as before: one read-only after
 * corruption. A carry is read here, off the committer, and the committer
 * writes it only if nothing of the conversation changed since (its count,
 * its newest meta or file record). An open log of it gets a new view
 * (pool_log.c: its readers take one without a lock), unless the views it
 * superseded and reads still hold are already too much.
 */
#include "pool_impl.h"

#include "runtime/grow.h"
#include "runtime/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A round carries at most PINNERS_MAX conversations. */
enum { PINNERS_MAX = 1024 };

/* A round writes at most a quarter segment (the committer's other groups
 * wait for each carry's write and sync), or, as its first carry, the
 * conversations of one segment up to four segments' bytes: at most 256
 * MiB, so that a segment's 32-bit offsets hold it (pool.c). */
uint64_t stp_carry_round_bytes(const stp_store *s)
{
    return s->o.segment_bytes / 4;
}

static uint64_t first_bytes(const stp_store *s)
{
    uint64_t b = 4 * s->o.segment_bytes;
    return b < (256u << 20) ? b : 256u << 20;
}

/* ---- the committer's side ------------------------------------------------------ */

static uint64_t place(stp_loc at)
{
    return (uint64_t)at.seq << 32 | at.off;
}

uint64_t stp_carry_print(const stp_conv *c)
{
    /* records only append: a new meta or file is at a later place */
    uint64_t m = place(c->meta_at);
    for (const stp_file *f = c->files; f != NULL; f = f->next)
        if (place(f->at) > m)
            m = place(f->at);
    return m;
}

/* A carry's items: the CREATE, events [0, first), then the files. */
uint64_t stp_carry_index(const st_req *r, size_t i)
{
    return i == 0 ? STP_IDX_CREATE : i <= r->first ? i - 1 : STP_IDX_FILE;
}

void stp_carry_apply(stp_store *s, stp_conv *c, st_req *r, const stp_ent *e)
{
    stp_runs *nr = NULL;
    int err = 0;
    if (r->first > 0 && (nr = malloc(sizeof(*nr) + sizeof(nr->r[0]))) == NULL)
        err = -ENOMEM;
    if (nr != NULL) {
        nr->n = 1;
        nr->r[0] = (stp_run){s->act.seq, 0};
    }
    if (err == 0 && c->log != NULL) /* its readers: a new view */
        err = stp_log_move(c->log, e + 1, r->first, nr);
    if (err < 0) {
        /* written and not used: the old records stay, the copy is the same
         * conversation for the next open */
        free(nr);
        r->status = err;
        return;
    }
    /* a carry in one group writes under the id */
    stp_carry_take(s, c, nr, s->act.seq, &c->id, r, e, 0, 1 + r->first, r->n);
}

void stp_carry_take(stp_store *s, stp_conv *c, stp_runs *runs, uint32_t create_seq,
                    const rt_uuid *tag, const st_req *r, const stp_ent *e, size_t meta,
                    size_t files, size_t files_end)
{
    stp_runs *old = atomic_exchange_explicit(&c->runs, runs, memory_order_acq_rel);
    if (c->log == NULL)
        free(old);
    else if (old != NULL && st_retire(&c->log->retired, old) < 0)
        rt_log(RT_LOG_WARN, "store", "pool: out of memory: a carried log's old runs are left");
    if (c->log != NULL)
        stp_log_release(c->log); /* the view and runs it superseded, unless read now */
    c->create_seq = create_seq;
    c->tag = *tag;
    c->meta_at = stp_payload_at(s, &e[meta], &r->items[meta]);
    for (size_t i = files; i < files_end; i++) /* names it has: nothing allocated */
        stp_set_file(c, (const char *)r->items[i].id, r->items[i].idlen,
                     stp_payload_at(s, &e[i], &r->items[i]));
}

/* ---- reading a conversation ---------------------------------------------------- */

int stp_found_one(void *ctx, uint32_t seq, const stp_ent *e)
{
    stp_found *f = ctx;
    if (e->index < f->base)
        return 0;
    if (e->index != f->base + f->n) /* a hole: not ours to mend */
        return -EBADMSG;
    if (f->n > 0 && f->bytes + e->size > f->most)
        return 1; /* enough for one group */
    f->bytes += e->size;
    if (rt_grow((void **)&f->e, &f->cap, f->n + 1, sizeof(*f->e), 64) < 0 ||
        rt_grow((void **)&f->seq, &f->scap, f->n + 1, sizeof(*f->seq), 64) < 0)
        return -ENOMEM;
    f->e[f->n] = *e;
    f->seq[f->n++] = seq;
    return 0;
}

int stp_found_walk(stp_store *s, stp_conv *c, const stp_runs *runs, uint64_t count, stp_found *f)
{
    int r = 0;
    for (uint32_t k = 0; r == 0 && runs != NULL && k < runs->n; k++)
        r = stp_idx_ensure(s, runs->r[k].seq, NULL, 0);
    if (r == 0) {
        pthread_mutex_lock(&s->seg_mu);
        r = stp_conv_each(s, c, runs, count, stp_found_one, f);
        pthread_mutex_unlock(&s->seg_mu);
    }
    return r;
}

void stp_snap_free(stp_snap *p)
{
    free(p->runs);
    for (size_t i = 0; i < p->nfiles; i++)
        free(p->files[i]);
    free(p->files);
}

/* 1 if c is not to be carried now. */
int stp_snap_take(stp_conv *c, stp_snap *p)
{
    int r = 0;
    pthread_mutex_lock(stp_lock(c));
    if (c->broken || atomic_load(&c->gone) || c->meta_at.seq == 0) {
        pthread_mutex_unlock(stp_lock(c));
        return 1;
    }
    const stp_runs *runs = atomic_load_explicit(&c->runs, memory_order_relaxed);
    size_t rl = runs != NULL ? sizeof(*runs) + runs->n * sizeof(runs->r[0]) : 0;
    if (runs != NULL && (p->runs = malloc(rl)) != NULL)
        memcpy(p->runs, runs, rl);
    r = runs != NULL && p->runs == NULL ? -ENOMEM : 0;
    p->tag = c->tag;
    p->count = c->count;
    p->meta_at = c->meta_at;
    p->has_parent = c->has_parent;
    p->parent = c->parent;
    p->mark = stp_carry_print(c);
    size_t cap = 0;
    for (const stp_file *f = c->files; r == 0 && f != NULL; f = f->next) {
        size_t len = sizeof(*f) + strlen(f->name) + 1;
        if (rt_grow((void **)&p->files, &cap, p->nfiles + 1, sizeof(*p->files), 8) < 0 ||
            (p->files[p->nfiles] = malloc(len)) == NULL)
            r = -ENOMEM;
        else
            memcpy(p->files[p->nfiles++], f, len);
    }
    pthread_mutex_unlock(stp_lock(c));
    return r;
}

static void free_ctx(void *data, void *ctx)
{
    (void)data;
    free(ctx);
}

/* The bytes at `at` (a payload) as a buffer. */
int stp_read_payload(stp_store *s, stp_loc at, rt_buf **out)
{
    char *b;
    int r = stp_read_at(s, at, &b);
    if (r == 0 && (*out = rt_buf_take(b, at.len)) == NULL)
        r = -ENOMEM;
    return r;
}

/* An event record of c (its records' tag), checked, as an item whose id
 * and key point into its payload's buffer. */
static int read_event(stp_store *s, const rt_uuid *tag, uint32_t seq, const stp_ent *e, st_item *it)
{
    uint8_t *b = malloc(e->size);
    if (b == NULL)
        return -ENOMEM;
    st_rec rec;
    int r = stp_pread(s, seq, b, e->size, e->off);
    if (r == 0 && (st_rec_decode(b, e->size, true, st_journal_seed(seq), &rec) != ST_REC_OK ||
                   rec.index != e->index || memcmp(rec.tag, tag->b, ST_TAG_LEN) != 0))
        r = -EBADMSG;
    rt_buf *pl = NULL;
    if (r == 0 && (pl = rt_buf_wrap((void *)rec.payload, rec.len, free_ctx, b)) == NULL)
        r = -ENOMEM;
    if (r < 0) {
        free(b);
        return r;
    }
    *it = (st_item){
        .id = rec.id, .idlen = rec.idlen, .key = rec.key, .keylen = rec.keylen, .payload = pl};
    return 0;
}

/* The events f found as items it[0..f->n) (their payloads held). */
int stp_read_found(stp_store *s, const stp_snap *p, const stp_found *f, st_item *it)
{
    int r = 0;
    for (size_t i = 0; r == 0 && i < f->n; i++)
        r = read_event(s, &p->tag, f->seq[i], &f->e[i], &it[i]);
    return r;
}

/* Items of the carry: 1 + count + files. */
static int read_items(stp_store *s, const stp_snap *p, const stp_found *f, st_item *it,
                      char hex[33])
{
    int r = stp_read_payload(s, p->meta_at, &it[0].payload);
    it[0].id = "create";
    it[0].idlen = 6;
    if (p->has_parent) {
        rt_uuid_hex(&p->parent, hex);
        it[0].key = hex;
        it[0].keylen = 32;
    }
    if (r == 0)
        r = stp_read_found(s, p, f, it + 1);
    for (size_t i = 0; r == 0 && i < p->nfiles; i++) {
        st_item *x = &it[1 + f->n + i];
        x->id = p->files[i]->name;
        x->idlen = (uint32_t)strlen(p->files[i]->name);
        r = stp_read_payload(s, p->files[i]->at, &x->payload);
    }
    return r;
}

/* c's carry, read: 0 and *out (its bytes in *bytes), 1 if c is not to be
 * carried now (or is larger than `most`), or -errno. out NULL: only its
 * bytes, from the indexes (nothing read). */
static int build(stp_store *s, stp_conv *c, uint64_t most, st_req **out, uint64_t *bytes)
{
    stp_snap p = {0};
    stp_found f = {.most = UINT64_MAX};
    int r = stp_snap_take(c, &p);
    if (r == 0) {
        r = stp_found_walk(s, c, p.runs, p.count, &f);
        if (r == -EBADMSG || r == -ENOENT || (r == 0 && f.n != p.count))
            r = 1; /* a hole, or a segment gone meanwhile */
    }
    uint64_t total = p.meta_at.len;
    for (size_t i = 0; r == 0 && i < f.n; i++)
        total += f.e[i].size;
    for (size_t i = 0; r == 0 && i < p.nfiles; i++)
        total += p.files[i]->at.len;
    *bytes = total;
    size_t n = 1 + f.n + p.nfiles;
    st_item *it = NULL;
    if (r == 0 && total > most)
        r = 1;
    if (r == 0 && out != NULL && (it = calloc(n, sizeof(*it))) == NULL)
        r = -ENOMEM;
    char hex[33];
    if (r == 0 && out != NULL)
        r = read_items(s, &p, &f, it, hex);
    if (r == 0 && out != NULL && (*out = st_req_append(it, n, &r)) != NULL) {
        (*out)->kind = REQ_CARRY;
        (*out)->first = p.count;
        (*out)->expect = p.mark;
    }
    for (size_t i = 0; it != NULL && i < n; i++)
        rt_buf_unref(it[i].payload); /* the request holds its own */
    free(it);
    free(f.e);
    free(f.seq);
    stp_snap_free(&p);
    return r;
}

/* ---- a round ------------------------------------------------------------------- */

/* stp_created_in off the committer. */
static uint32_t created_in(stp_conv *c)
{
    pthread_mutex_lock(stp_lock(c));
    uint32_t seq = stp_created_in(c);
    pthread_mutex_unlock(stp_lock(c));
    return seq;
}

/* The live conversations created in the oldest segment kept (held), that
 * segment (*k) and the next one a live conversation was created in (*k2,
 * at most the active one). None if they are too many for a round. */
static size_t pinners(stp_store *s, uint32_t act, stp_conv **v, uint32_t *k, uint32_t *k2)
{
    size_t n = 0;
    *k = *k2 = act;
    pthread_mutex_lock(&s->cat_mu);
    for (size_t i = 0; i < s->nbuckets; i++)
        for (stp_conv *c = s->buckets[i]; c != NULL; c = c->next) {
            uint32_t q = created_in(c);
            if (q != 0 && q < *k) {
                *k2 = *k;
                *k = q;
            } else if (q != 0 && q > *k && q < *k2) {
                *k2 = q;
            }
        }
    for (size_t i = 0; i < s->nbuckets && *k < act; i++)
        for (stp_conv *c = s->buckets[i]; c != NULL; c = c->next) {
            if (created_in(c) != *k)
                continue;
            if (n == PINNERS_MAX) {
                *k2 = *k; /* too many */
                continue;
            }
            atomic_fetch_add(&c->refs, 1);
            v[n++] = c;
        }
    pthread_mutex_unlock(&s->cat_mu);
    return n;
}

/* The bytes of sealed segments [k, k2). */
static uint64_t freed(stp_store *s, uint32_t k, uint32_t k2)
{
    uint64_t b = 0;
    pthread_mutex_lock(&s->seg_mu);
    for (size_t i = 0; i < s->nsealed; i++)
        if (s->sealed[i].seq >= k && s->sealed[i].seq < k2)
            b += s->sealed[i].end > 0 ? s->sealed[i].end : s->o.segment_bytes;
    pthread_mutex_unlock(&s->seg_mu);
    return b;
}

/* Carry the oldest segment's live conversations: 0 if done, 1 if there is
 * nothing worth it, 2 if one changed meanwhile, -errno. */
static int carry_oldest(stp_store *s, uint64_t *budget, stp_conv **v, st_req **q)
{
    pthread_mutex_lock(&s->seg_mu);
    uint32_t act = s->act.seq;
    pthread_mutex_unlock(&s->seg_mu);
    uint32_t k, k2;
    size_t n = pinners(s, act, v, &k, &k2);
    uint64_t gain = k < k2 ? freed(s, k, k2) : 0, total = 0;
    /* a round's whole budget: nothing carried yet in it */
    uint64_t most = *budget == stp_carry_round_bytes(s) ? first_bytes(s) : *budget;
    int r = n > 0 && k < k2 ? 0 : 1;
    /* measured first, from their indexes: nothing is read unless it pays */
    stp_conv *big = NULL; /* one too large for one group */
    uint64_t big_bytes = 0, fit = 0;
    size_t m = 0; /* the first m fit in `most` (fit bytes) */
    for (size_t i = 0; r == 0 && i < n; i++) {
        uint64_t bytes = 0;
        r = build(s, v[i], UINT64_MAX, NULL, &bytes);
        total += bytes;
        if (r == 0 && bytes > first_bytes(s) && big == NULL) {
            big = v[i];
            big_bytes = bytes;
        }
        if (r == 0 && m == i && fit + bytes <= most) {
            fit += bytes;
            m++;
        }
    }
    /* not worth it (1); one in several groups, as a round's first carry,
     * or the next round's (2); more than this round may write: the next
     * round's first carry (2); else all, or as a round's first carry those
     * that fit, the others in the next rounds */
    if (r == 0 && total > gain / 2)
        r = 1;
    else if (r == 0 && big != NULL)
        r = most == first_bytes(s) ? stp_carry_big(s, big) : 2;
    else if (r == 0 && total > most && most < first_bytes(s))
        r = 2;
    bool alone = r == 0 && big != NULL;
    size_t moved = alone ? 1 : m;
    if (alone)
        *budget = big_bytes;
    total = alone ? big_bytes : fit;
    for (size_t i = 0; r == 0 && !alone && i < m; i++) {
        uint64_t bytes;
        if ((r = build(s, v[i], most, &q[i], &bytes)) == 1)
            r = 2; /* it changed since */
    }
    for (size_t i = 0; i < n; i++) {
        if (q[i] != NULL && r == 0) {
            st_waiter w;
            st_waiter_init(&w);
            r = stp_submit(v[i], q[i], st_waiter_done, &w); /* takes q[i] */
            if (r == 0)
                r = st_waiter_wait(&w);
            if (r == -EAGAIN || r == -EBUSY || r == -ENOENT)
                r = 2; /* it changed, or is in use: the next round */
        } else if (q[i] != NULL) {
            st_req_free(q[i]);
        }
        q[i] = NULL;
    }
    for (size_t i = 0; i < n; i++)
        stp_unref(v[i]); /* not a use: an idle log still closes */
    if (r == 0) {
        *budget = total < *budget ? *budget - total : 0;
        atomic_fetch_add_explicit(&st_pool_carried_bytes, total, memory_order_relaxed);
        rt_log(RT_LOG_INFO, "store",
               "pool: carried %zu of the %zu conversation(s) that keep segments %u-%u forward "
               "(%llu KiB%s)%s",
               moved, n, (unsigned)k, (unsigned)(k2 - 1), (unsigned long long)(total >> 10),
               alone ? ", in several groups" : "", moved == n ? ": they can go" : "");
    }
    return r;
}

void stp_carry(stp_store *s)
{
    pthread_mutex_lock(&s->q.mu);
    bool closing = s->q.stop; /* the committer takes no more */
    pthread_mutex_unlock(&s->q.mu);
    if (closing)
        return;
    stp_conv **v = malloc(PINNERS_MAX * sizeof(*v));
    st_req **q = calloc(PINNERS_MAX, sizeof(*q));
    if (v == NULL || q == NULL) {
        free(v);
        free(q);
        return;
    }
    pthread_mutex_lock(&s->carry_mu);
    /* only a deletion makes space worth carrying for: after a round that
     * found nothing, the catalog is not looked at again until one */
    uint64_t deletes = atomic_load_explicit(&s->deletes, memory_order_relaxed);
    uint64_t budget = stp_carry_round_bytes(s);
    int r = deletes != s->carry_seen ? 0 : 1;
    while (r == 0)
        r = carry_oldest(s, &budget, v, q);
    if (r == 1)
        s->carry_seen = deletes;
    pthread_mutex_unlock(&s->carry_mu);
    if (r < 0 && r != -ESHUTDOWN)
        rt_log(RT_LOG_WARN, "store", "pool: carrying conversations forward stopped: %s",
               strerror(-r));
    free(v);
    free(q);
}
