/*
 * pool_log.c - a pool conversation's log (pool.c): opened from the record
 * indexes of the segments its runs name, then kept up to date by the
 * committer, and read on any thread.
 *
 * In memory per event: its record's offset and size in its segment (two
 * st_offsets, 8 bytes, in the log's view) and its id and key in the id
 * table; which segment comes from the view's runs. Readers take the
 * published count (acquire) first, then the view: the committer fills
 * everything below the count before it publishes (release), runs included
 * (a new runs array is published before the events in it, and the old one
 * stays while a read may hold it). A carry (pool_carry.c) moves every event:
 * it publishes a new view before any later count, so a reader's view
 * always holds what its count covers; a reader that still used the old
 * one and found its segment gone reads again from the new one. Reads are
 * counted while they hold a view, so that superseded views and runs go
 * as soon as none does.
 */
#include "pool_impl.h"

#include "log_impl.h"
#include "runtime/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes between two records of one page that are read rather than paid
 * for with another pread; and the most one pread takes. */
enum { GAP = 16 << 10, SPAN_MAX = 4 << 20 };
/* Events past which a log's open gives back the index pages it read. */
enum { BIG = 4096 };

static void log_unlist(stp_store *s, stp_log *l)
{
    pthread_mutex_lock(&s->logs_mu);
    if (l->lprev != NULL)
        l->lprev->lnext = l->lnext;
    else if (s->logs == l)
        s->logs = l->lnext;
    if (l->lnext != NULL)
        l->lnext->lprev = l->lprev;
    pthread_mutex_unlock(&s->logs_mu);
}

static void view_free(stp_view *v)
{
    if (v == NULL)
        return;
    st_offsets_free(&v->off);
    st_offsets_free(&v->size);
    free(v);
}

/* A view for n events (runs: the conversation's; tag: their records'). */
static stp_view *view_new(uint64_t n, stp_runs *runs, const rt_uuid *tag)
{
    stp_view *v = calloc(1, sizeof(*v));
    if (v != NULL && (st_offsets_init(&v->off, n) < 0 || st_offsets_init(&v->size, n) < 0)) {
        view_free(v);
        return NULL;
    }
    if (v != NULL) {
        atomic_init(&v->runs, runs);
        v->tag = *tag;
    }
    return v;
}

static int view_set(stp_view *v, const stp_ent *e)
{
    int r = st_offsets_set(&v->off, e->index, e->off);
    return r == 0 ? st_offsets_set(&v->size, e->index, e->size) : r;
}

/* A read's view, counted until view_drop. Sequentially consistent, as
 * the committer's store of a new view and its look at the count
 * (stp_log_release): either the committer sees this read, or this read
 * takes the new view. */
static const stp_view *view_take(stp_log *l)
{
    atomic_fetch_add(&l->readers, 1);
    return atomic_load(&l->view);
}

static void view_drop(stp_log *l)
{
    atomic_fetch_sub_explicit(&l->readers, 1, memory_order_release);
}

static void free_superseded(stp_log *l)
{
    for (stp_view *v = l->old, *next; v != NULL; v = next) {
        next = v->next;
        view_free(v);
    }
    l->old = NULL;
    atomic_store_explicit(&l->old_bytes, 0, memory_order_relaxed);
    st_retired_free(&l->retired);
}

void stp_log_release(stp_log *l)
{
    if ((l->old != NULL || l->retired != NULL) && atomic_load(&l->readers) == 0)
        free_superseded(l);
}

void stp_log_free(stp_log *l)
{
    if (l == NULL)
        return;
    stp_store *s = l->c->s;
    log_unlist(s, l);
    atomic_fetch_sub(&s->open_logs, 1);
    view_free(atomic_load_explicit(&l->view, memory_order_relaxed));
    free_superseded(l);
    st_idtab_free(&l->ids);
    free(l);
}

int stp_log_add(stp_log *l, const stp_ent *e, size_t n)
{
    stp_view *v = atomic_load_explicit(&l->view, memory_order_relaxed);
    int r = st_idtab_reserve(&l->ids, 2 * n);
    for (size_t i = 0; r == 0 && i < n; i++) {
        r = view_set(v, &e[i]);
        if (r == 0)
            r = st_idtab_add(&l->ids, (uint64_t)e[i].hash << 32, e[i].index);
        if (r == 0 && e[i].khash != 0)
            r = st_idtab_add(&l->ids, (uint64_t)e[i].khash << 32, e[i].index);
    }
    return r;
}

/* Superseded views past this, kept by reads in progress at every carry,
 * wait for a carry that finds none: the carry waits. */
enum { OLD_VIEWS_MAX = 1 << 20 };

int stp_log_view_new(stp_log *l, uint64_t n, stp_runs *runs, const rt_uuid *tag, stp_view **out)
{
    const stp_view *old = atomic_load_explicit(&l->view, memory_order_relaxed);
    size_t bytes = st_offsets_bytes(&old->off) + st_offsets_bytes(&old->size);
    size_t held = atomic_load_explicit(&l->old_bytes, memory_order_relaxed);
    if (held + bytes > OLD_VIEWS_MAX)
        return -EBUSY;
    *out = view_new(n, runs, tag);
    return *out != NULL ? 0 : -ENOMEM;
}

int stp_log_view_set(stp_view *v, const stp_ent *e)
{
    return view_set(v, e);
}

void stp_log_view_free(stp_view *v)
{
    view_free(v);
}

void stp_log_view_put(stp_log *l, stp_view *v)
{
    stp_view *old = atomic_load_explicit(&l->view, memory_order_relaxed);
    size_t bytes = st_offsets_bytes(&old->off) + st_offsets_bytes(&old->size);
    old->next = l->old;
    l->old = old;
    size_t held = atomic_load_explicit(&l->old_bytes, memory_order_relaxed);
    atomic_store_explicit(&l->old_bytes, held + bytes, memory_order_relaxed); /* for reports */
    atomic_store(&l->view, v); /* sequentially consistent: stp_log_release */
}

int stp_log_move(stp_log *l, const stp_ent *e, size_t n, stp_runs *runs)
{
    stp_log_release(l);
    stp_view *v = NULL;
    int r = stp_log_view_new(l, n, runs, &l->c->id, &v); /* a carry writes under its id */
    for (size_t i = 0; r == 0 && i < n; i++)
        r = view_set(v, &e[i]);
    if (r < 0) {
        view_free(v);
        return r;
    }
    stp_log_view_put(l, v);
    return 0;
}

void stp_log_publish(stp_log *l, uint64_t count)
{
    atomic_store_explicit(&l->count, count, memory_order_release);
}

/* ---- opening ---------------------------------------------------------------- */

/* Entries wait AHEAD places in a ring while the id table's slots for
 * them are prefetched: each add is a cache miss in a table of millions of
 * slots, and waiting for them one at a time made most of a large log's
 * open. */
enum { AHEAD = 16 };

typedef struct fill {
    stp_log *l;
    uint64_t got;
    stp_ent q[AHEAD];
    size_t head, nq;
    uint8_t *seen; /* instead of adding: a bit per index found */
} fill;

static int add_oldest(fill *f)
{
    int r = stp_log_add(f->l, &f->q[f->head], 1);
    f->head = (f->head + 1) % AHEAD;
    f->nq--;
    return r;
}

static int take(void *ctx, uint32_t seq, const stp_ent *e)
{
    (void)seq;
    fill *f = ctx;
    if (f->seen != NULL) {
        f->seen[e->index / 8] |= (uint8_t)(1u << (e->index % 8));
        return 0;
    }
    st_idtab_prefetch(&f->l->ids, (uint64_t)e->hash << 32);
    if (e->khash != 0)
        st_idtab_prefetch(&f->l->ids, (uint64_t)e->khash << 32);
    int r = f->nq == AHEAD ? add_oldest(f) : 0;
    f->q[(f->head + f->nq++) % AHEAD] = *e;
    f->got++;
    return r;
}

/* One run of stp_conv_each: its events [lo, hi), after its segment's last
 * CREATE of the conversation (an earlier incarnation's, or the records a
 * carry copied, pool_carry.c, are before it). */
typedef struct run_each {
    uint32_t seq;
    uint64_t after, lo, hi;
    int (*fn)(void *ctx, uint32_t seq, const stp_ent *e);
    void *ctx;
} run_each;

static int last_create(void *ctx, const stp_ent *e)
{
    run_each *f = ctx;
    if (e->index == STP_IDX_CREATE)
        f->after = e->off;
    return 0;
}

static int in_run(void *ctx, const stp_ent *e)
{
    run_each *f = ctx;
    if (e->index < f->lo || e->index >= f->hi || e->off < f->after)
        return 0;
    return f->fn(f->ctx, f->seq, e);
}

int stp_conv_each(stp_store *s, const stp_conv *c, const stp_runs *runs, uint64_t count,
                  int (*fn)(void *ctx, uint32_t seq, const stp_ent *e), void *ctx)
{
    int r = 0;
    for (uint32_t k = 0; r == 0 && runs != NULL && k < runs->n; k++) {
        run_each f = {.seq = runs->r[k].seq,
                      .lo = runs->r[k].first,
                      .hi = k + 1 < runs->n ? runs->r[k + 1].first : count,
                      .fn = fn,
                      .ctx = ctx};
        if (f.seq == s->act.seq) { /* linked from the last CREATE on */
            r = stp_act_each(s, c, in_run, &f);
        } else {
            r = stp_idx_each(s, f.seq, &c->tag, last_create, &f);
            if (r == 0)
                r = stp_idx_each(s, f.seq, &c->tag, in_run, &f);
        }
    }
    return r;
}

/* Every record of c the indexes of its runs hold (seg_mu held): added to
 * l, or (seen) marked. */
static int walk(stp_store *s, stp_conv *c, const stp_runs *runs, stp_log *l, uint8_t *seen,
                uint64_t *got)
{
    fill f = {.l = l, .seen = seen};
    int r = stp_conv_each(s, c, runs, c->count, take, &f);
    while (r == 0 && f.nq > 0)
        r = add_oldest(&f);
    *got = f.got;
    return r;
}

/* How many of c's first events are all there (seg_mu held). */
static int valid_prefix(stp_store *s, stp_conv *c, const stp_runs *runs, uint64_t *valid)
{
    uint8_t *seen = calloc((size_t)c->count / 8 + 1, 1);
    if (seen == NULL)
        return -ENOMEM;
    uint64_t got;
    int r = walk(s, c, runs, NULL, seen, &got);
    uint64_t i = 0;
    while (i < c->count && (seen[i / 8] & (1u << (i % 8))) != 0)
        i++;
    free(seen);
    *valid = i;
    return r;
}

int stp_conv_log(st_conv *sc, st_log **out, st_open_report *rep)
{
    stp_conv *c = (stp_conv *)sc;
    stp_store *s = c->s;
    st_open_report local;
    if (rep == NULL)
        rep = &local;
    memset(rep, 0, sizeof(*rep));
    pthread_mutex_lock(stp_lock(c));
    int r = 0;
    stp_log *l = c->log;
    if (atomic_load(&c->gone)) {
        r = -ENOENT;
    } else if (l == NULL && (l = calloc(1, sizeof(*l))) == NULL) {
        r = -ENOMEM;
    } else if (c->log == NULL) {
        l->be = &st_pool_backend;
        l->c = c;
        atomic_init(&l->count, 0);
        stp_runs *runs = atomic_load_explicit(&c->runs, memory_order_relaxed);
        stp_view *v = view_new(c->count, runs, &c->tag);
        atomic_init(&l->view, v);
        r = v != NULL ? st_idtab_init(&l->ids, c->count) : -ENOMEM;
        uint64_t got = 0, valid = c->count;
        /* sealed indexes not used since the open: mapped (or rebuilt) first */
        for (uint32_t k = 0; r == 0 && runs != NULL && k < runs->n; k++)
            r = stp_idx_ensure(s, runs->r[k].seq, rep->detail, sizeof(rep->detail));
        pthread_mutex_lock(&s->seg_mu);
        if (r == 0)
            r = walk(s, c, runs, l, NULL, &got);
        if (r == 0 && got != c->count) /* records lost to corruption: where the first is */
            r = valid_prefix(s, c, runs, &valid);
        pthread_mutex_unlock(&s->seg_mu);
        /* what a long log walked of the mapped indexes stays in the page
         * cache, not in this process */
        for (uint32_t k = 0; r == 0 && runs != NULL && c->count > BIG && k < runs->n; k++)
            stp_idx_dontneed(s, runs->r[k].seq);
        if (r == 0 && got != c->count) { /* read-only, its valid prefix readable */
            snprintf(rep->detail, sizeof(rep->detail),
                     "the pool's segments hold %llu of the %u events of a conversation "
                     "(corrupt records): read-only, its first %llu readable",
                     (unsigned long long)got, c->count, (unsigned long long)valid);
            rt_log(RT_LOG_ERROR, "store", "%s", rep->detail);
            c->broken = true;
        }
        atomic_fetch_add(&s->open_logs, 1); /* stp_log_free counts it down */
        if (r < 0) {
            stp_log_free(l);
            l = NULL;
        } else {
            stp_log_publish(l, valid);
            pthread_mutex_lock(&s->logs_mu);
            l->lnext = s->logs;
            if (s->logs != NULL)
                s->logs->lprev = l;
            s->logs = l;
            pthread_mutex_unlock(&s->logs_mu);
            c->log = l;
            rep->scanned = 0;
        }
    }
    if (r == 0) {
        rep->count = stp_log_count((st_log *)l);
        rep->corrupt = c->broken;
        if (c->broken && rep->detail[0] == '\0')
            snprintf(rep->detail, sizeof(rep->detail), "%s", s->corrupt);
    }
    pthread_mutex_unlock(stp_lock(c));
    *out = (st_log *)l;
    return r;
}

/* ---- readers ------------------------------------------------------------------ */

uint64_t stp_log_count(const st_log *sl)
{
    return atomic_load_explicit(&((stp_log *)sl)->count, memory_order_acquire);
}

static uint32_t run_at(const stp_runs *runs, uint64_t i, uint32_t *k)
{
    uint32_t lo = *k, hi = runs->n; /* the last run starting at or before i */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (runs->r[mid].first <= i)
            lo = mid;
        else
            hi = mid;
    }
    *k = lo;
    return runs->r[lo].seq;
}

typedef struct span {
    uint32_t seq;
    uint64_t from, to, at; /* bytes in the segment; where they go in the page */
} span;

/* Events [first, first + max) of those counted, as view v places them. */
static int read_view(stp_log *l, const stp_view *v, uint64_t count, uint64_t first, uint32_t max,
                     st_page **out)
{
    uint32_t n = first < count ? (uint32_t)(count - first < max ? count - first : max) : 0;
    st_page *p = malloc(sizeof(*p) + n * sizeof(p->ev[0]));
    span *sp = malloc((n ? n : 1) * sizeof(*sp));
    uint32_t *which = malloc((n ? n : 1) * sizeof(*which));
    int r = p != NULL && sp != NULL && which != NULL ? 0 : -ENOMEM;
    if (r == 0) {
        p->n = 0;
        p->bytes = NULL;
    }
    const stp_runs *runs = atomic_load(&v->runs); /* as view_take's */
    size_t nsp = 0;
    uint64_t total = 0;
    uint32_t k = 0;
    for (uint32_t j = 0; r == 0 && j < n; j++) {
        uint64_t i = first + j, off = st_offsets_get(&v->off, i);
        uint64_t end = off + st_offsets_get(&v->size, i);
        uint32_t seq = run_at(runs, i, &k);
        span *last = nsp > 0 ? &sp[nsp - 1] : NULL;
        if (last != NULL && last->seq == seq && off >= last->to && off - last->to <= GAP &&
            end - last->from <= SPAN_MAX) {
            total += end - last->to;
            last->to = end;
        } else {
            sp[nsp++] = (span){seq, off, end, total};
            total += end - off;
        }
        which[j] = (uint32_t)(nsp - 1);
    }
    if (r == 0 && n > 0 && (p->bytes = rt_buf_new((size_t)total)) == NULL)
        r = -ENOMEM;
    uint8_t *base = r == 0 && n > 0 ? rt_buf_wdata(p->bytes) : NULL;
    for (size_t i = 0; r == 0 && i < nsp; i++)
        r = stp_pread(l->c->s, sp[i].seq, base + sp[i].at, (size_t)(sp[i].to - sp[i].from),
                      sp[i].from);
    for (uint32_t j = 0; r == 0 && j < n; j++) {
        uint64_t i = first + j, size = st_offsets_get(&v->size, i);
        const span *s = &sp[which[j]];
        const uint8_t *rp = base + s->at + (st_offsets_get(&v->off, i) - s->from);
        st_rec rec;
        if (st_rec_decode(rp, (size_t)size, true, st_journal_seed(s->seq), &rec) != ST_REC_OK ||
            rec.size != size || rec.index != i || memcmp(rec.tag, v->tag.b, ST_TAG_LEN) != 0) {
            r = -EBADMSG;
            break;
        }
        st_event_ref *e = &p->ev[p->n++];
        e->index = i;
        e->off = (uint32_t)(rec.payload - base);
        e->len = rec.len;
        e->id_off = (uint32_t)(rec.id - base);
        e->id_len = rec.idlen;
    }
    free(sp);
    free(which);
    if (r < 0) {
        if (p != NULL)
            st_page_free(p);
        return r;
    }
    *out = p;
    return 0;
}

int stp_log_read(st_log *sl, uint64_t first, uint32_t max, st_page **out)
{
    stp_log *l = (stp_log *)sl;
    uint64_t count = stp_log_count(sl);
    /* after the count: a view at least as new as the events it counts */
    const stp_view *v = view_take(l);
    int r = read_view(l, v, count, first, max, out);
    const stp_view *now = atomic_load(&l->view);
    if (r < 0 && now != v) /* a carry moved them, and the old segments went meanwhile */
        r = read_view(l, now, count, first, max, out);
    view_drop(l);
    return r;
}

typedef struct find_ctx {
    stp_log *l;
    const stp_view *v;
    const stp_runs *runs;
    const void *want;
    size_t len;
    bool key;
} find_ctx;

/* Does event `index` carry this id (or key)? Reads its record's header. */
static bool matches(void *arg, uint64_t index)
{
    find_ctx *f = arg;
    uint32_t k = 0, seq = run_at(f->runs, index, &k);
    uint8_t hdr[ST_REC_HDR_MAX];
    uint64_t size = st_offsets_get(&f->v->size, index);
    size_t want = size < sizeof(hdr) ? (size_t)size : sizeof(hdr);
    if (stp_pread(f->l->c->s, seq, hdr, want, st_offsets_get(&f->v->off, index)) != 0 ||
        want < ST_JREC_HDR)
        return false;
    size_t idlen = hdr[ST_JREC_HDR - 1];
    if (!f->key)
        return idlen == f->len && ST_JREC_HDR + idlen <= want &&
               memcmp(hdr + ST_JREC_HDR, f->want, f->len) == 0;
    size_t at = ST_JREC_HDR + idlen;
    return at < want && hdr[at] == f->len && at + 1 + f->len <= want &&
           memcmp(hdr + at + 1, f->want, f->len) == 0;
}

static int find(stp_log *l, const void *what, size_t len, bool key, uint64_t *index)
{
    if (len == 0 || len > 255)
        return -ENOENT;
    uint64_t count = stp_log_count((st_log *)l);
    if (count == 0)
        return -ENOENT;
    uint64_t hash = key ? (uint64_t)st_key_hash_hi(what, len) << 32 : st_id_hash(what, len);
    const stp_view *v = view_take(l), *before = NULL;
    uint64_t i = UINT64_MAX;
    while (i == UINT64_MAX && v != before) { /* again if a carry moved them meanwhile */
        find_ctx f = {l, v, atomic_load(&v->runs), what, len, key};
        i = st_idtab_find(&l->ids, hash, count, matches, &f);
        before = v;
        v = atomic_load(&l->view);
    }
    view_drop(l);
    if (i == UINT64_MAX)
        return -ENOENT;
    *index = i;
    return 0;
}

int stp_log_find(st_log *l, const void *id, size_t idlen, uint64_t *index)
{
    return find((stp_log *)l, id, idlen, false, index);
}

int stp_log_find_key(st_log *l, const void *key, size_t keylen, uint64_t *index)
{
    return find((stp_log *)l, key, keylen, true, index);
}

size_t stp_log_memory(const st_log *sl)
{
    stp_log *l = (stp_log *)sl;
    const stp_view *v = view_take(l);
    size_t b = sizeof(*l) + sizeof(*v) + st_offsets_bytes(&v->off) + st_offsets_bytes(&v->size) +
               atomic_load_explicit(&l->old_bytes, memory_order_relaxed) + st_idtab_bytes(&l->ids);
    view_drop(l);
    return b;
}

bool stp_log_read_only(const st_log *sl)
{
    return ((const stp_log *)sl)->c->broken;
}
