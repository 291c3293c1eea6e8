/*
 * nats_tail.c - what a node's reads of a conversation answer from memory,
 * so that the conversation actor (and the WebSocket streams on its loop)
 * make no request to the cluster on a loop thread: store.h lets loop code
 * call the readers of a log that is open, as the local store's cost
 * nothing, and a slow cluster must never block a parley loop (issue 22).
 *
 * Kept in memory, in the reader's handle (stn_log), not moved off the loop:
 * the sequencer asks "is this id in the log?" synchronously, in the middle
 * of a verdict, and the local store answers that from its in-memory index;
 * an index of the same kind here keeps the actor as it is.
 *   - the tail: the last STN_TAIL_MAX events (STN_TAIL_BYTES), loaded when
 *     the log is first opened (on a worker of the pool) and then fed by
 *     this node's writer with each append it stored. A log's events never
 *     change once visible, so [lo, hi) serves any reader, writer or not.
 *   - an index of the hashes of every id and key (16 bytes a slot, at most
 *     half full), loaded at the same time from the page entries and fed
 *     by the writer. While it covers the log as this node writes it, or,
 *     before this node writes, as it was loaded (no count read since says
 *     more), find and find_key look it up without a request; a hash that
 *     matches is confirmed from the tail, or, older than the tail, by
 *     reading that event (a true duplicate of an old event, or a 32-bit
 *     collision: rare), which the _now readers leave to the thread pool.
 *   - the events older than the tail that such a read confirmed (up to
 *     STN_OLD_MAX, STN_OLD_BYTES): the conversation actor asks its checks
 *     in the thread pool first when one would wait (actors/conv_confirm.c),
 *     then makes its verdict on the loop with the answers in memory.
 * Trusting what was loaded before writing is safe because the writer's
 * take-over checks it (stn_tail_claim): a log that grew meanwhile on
 * another node refuses that append and is loaded again; and an append
 * decided at index n is stored only at n (st_append_at). A count read at
 * the leader brings memory up to it (stn_tail_catch_up), so that a node
 * that does not write the log checks what its conversation decides from
 * memory too. Anything else (reads before the tail, a log known to have
 * grown) goes to the cluster. "This node writes" is stn_writes: a writer
 * whose lease may have lapsed since its take-over reads as any other node
 * does (nats_owner.c).
 */
#include "nats_store.h"

#include "runtime/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void drop_oldest(stn_log *l)
{
    stn_tail_ev *e = &l->ring[l->lo % STN_TAIL_MAX];
    l->bytes -= rt_buf_len(e->payload);
    rt_buf_unref(e->payload);
    free(e->id);
    *e = (stn_tail_ev){0};
    l->lo++;
}

/* Event `index` (the next one, hi) into the ring and the index (tmu). */
static int keep(stn_log *l, uint64_t index, rt_buf *payload, const char *id, uint32_t idlen,
                const char *key, uint32_t keylen)
{
    if (index != l->hi) { /* not contiguous: start again from here */
        while (l->lo < l->hi)
            drop_oldest(l);
        l->lo = l->hi = index;
    }
    if (l->ring == NULL && (l->ring = calloc(STN_TAIL_MAX, sizeof(*l->ring))) == NULL)
        return -ENOMEM;
    char *ik = malloc((size_t)idlen + keylen + 1);
    if (ik == NULL)
        return -ENOMEM;
    memcpy(ik, id, idlen);
    if (keylen > 0)
        memcpy(ik + idlen, key, keylen);
    if (l->hi - l->lo == STN_TAIL_MAX)
        drop_oldest(l);
    l->ring[index % STN_TAIL_MAX] =
        (stn_tail_ev){.payload = rt_buf_ref(payload), .id = ik, .idlen = idlen, .keylen = keylen};
    l->hi++;
    l->bytes += rt_buf_len(payload);
    while (l->bytes > STN_TAIL_BYTES && l->hi - l->lo > 1)
        drop_oldest(l);
    if (index == l->covered) {
        uint32_t kh = keylen > 0 ? stn_hash(key, keylen) : 0;
        if (stn_table_put(&l->ids, stn_hash(id, idlen), index) < 0 ||
            (kh != 0 && stn_table_put(&l->keys, kh, index) < 0)) {
            stn_table_free(&l->ids); /* out of memory: the cluster answers */
            stn_table_free(&l->keys);
            l->covered = 0;
        } else {
            l->covered++;
        }
    }
    return 0;
}

_Atomic stn_loading_fn stn_tail_loading;

static bool loaded(stn_log *l)
{
    pthread_mutex_lock(&l->tmu);
    bool r = l->loaded;
    pthread_mutex_unlock(&l->tmu);
    return r;
}

bool stn_tail_loaded(stn_log *l)
{
    return loaded(l);
}

/* ---- confirmed events older than the tail (tmu) ---------------------------- */

static void drop_old(stn_log *l)
{
    stn_old_ev *o = &l->old[l->old_lo % STN_OLD_MAX];
    l->old_bytes -= rt_buf_len(o->e.payload);
    rt_buf_unref(o->e.payload);
    free(o->e.id);
    *o = (stn_old_ev){0};
    l->old_lo++;
}

static const stn_tail_ev *old_of(const stn_log *l, uint64_t index)
{
    for (uint64_t k = l->old_lo; k < l->old_hi; k++)
        if (l->old[k % STN_OLD_MAX].index == index)
            return &l->old[k % STN_OLD_MAX].e;
    return NULL;
}

/* Keep event e, read from the cluster: events never change once visible,
 * so what it says of its id and key holds for good. */
static void keep_old(stn_log *l, const st_nats_event *e)
{
    if (old_of(l, e->index) != NULL)
        return;
    if (l->old == NULL && (l->old = calloc(STN_OLD_MAX, sizeof(*l->old))) == NULL)
        return; /* out of memory: the next check reads it again */
    char *ik = malloc((size_t)e->idlen + e->keylen + 1);
    rt_buf *b = rt_buf_copy(e->data, e->len);
    if (ik == NULL || b == NULL) {
        free(ik);
        rt_buf_unref(b);
        return;
    }
    memcpy(ik, e->id, e->idlen);
    if (e->keylen > 0)
        memcpy(ik + e->idlen, e->key, e->keylen);
    if (l->old_hi - l->old_lo == STN_OLD_MAX)
        drop_old(l);
    l->old[l->old_hi % STN_OLD_MAX] = (stn_old_ev){
        .index = e->index,
        .e = {.payload = b, .id = ik, .idlen = e->idlen, .keylen = e->keylen},
    };
    l->old_hi++;
    l->old_bytes += rt_buf_len(b);
    while (l->old_bytes > STN_OLD_BYTES && l->old_hi - l->old_lo > 1)
        drop_old(l);
}

static void forget_old(stn_log *l)
{
    while (l->old_lo < l->old_hi)
        drop_old(l);
}

/* The events of np into the ring (those it lacks), and into the index
 * from covered on (tmu). */
static int keep_page(stn_log *l, const st_nats_page *np)
{
    for (uint32_t i = 0; np != NULL && i < np->n; i++) {
        const st_nats_event *e = &np->ev[i];
        if (l->lo < l->hi && e->index < l->hi)
            continue; /* there already (the writer's own, or read before) */
        rt_buf *b = rt_buf_copy(e->data, e->len);
        int r = b == NULL ? -ENOMEM : keep(l, e->index, b, e->id, e->idlen, e->key, e->keylen);
        rt_buf_unref(b);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Index every event from the page entries, keep the last page (l->mu).
 * Keeps nothing if memory was forgotten meanwhile (loaded stays false). */
static int load(stn_log *l)
{
    pthread_mutex_lock(&l->tmu);
    uint64_t forgets = l->forgets;
    pthread_mutex_unlock(&l->tmu);
    int r = stn_index_load(l->nl);
    uint64_t count = l->nl->covered;
    st_nats_page *np = NULL;
    if (r == 0 && count > 0)
        r = st_nats_log_read(l->nl, count > ST_NATS_PAGE ? count - ST_NATS_PAGE : 0, ST_NATS_PAGE,
                             &np);
    stn_loading_fn hook = atomic_load(&stn_tail_loading);
    if (hook != NULL)
        hook(l);
    pthread_mutex_lock(&l->tmu);
    bool current = l->forgets == forgets;
    /* the writer may have stored events meanwhile: keep what covers more
     * (the index moves here; the cluster's finds make theirs again) */
    if (r == 0 && current && count > l->covered) {
        stn_table_free(&l->ids);
        stn_table_free(&l->keys);
        l->ids = l->nl->ids;
        l->keys = l->nl->keys;
        l->covered = count;
        memset(&l->nl->ids, 0, sizeof l->nl->ids);
        memset(&l->nl->keys, 0, sizeof l->nl->keys);
        l->nl->covered = 0;
    }
    if (r == 0 && current)
        r = keep_page(l, np);
    if (r == 0 && current) {
        l->loaded = true;
        if (atomic_load(&l->known) < l->covered)
            atomic_store(&l->known, l->covered);
    }
    pthread_mutex_unlock(&l->tmu);
    st_nats_page_free(np);
    return r;
}

int stn_tail_load(stn_log *l)
{
    /* l->mu is held across requests: a loaded log is seen without it */
    if (loaded(l))
        return 0;
    pthread_mutex_lock(&l->mu);
    int r = 0; /* another thread may have loaded it meanwhile */
    for (int tries = 0; r == 0 && !loaded(l) && tries < 3; tries++)
        r = load(l); /* again if it was forgotten while loading */
    pthread_mutex_unlock(&l->mu);
    return r;
}

/* The events [covered, count) into memory: read when few, else the index
 * loaded again from the page entries (l->mu). */
static int catch_up(stn_log *l, uint64_t count)
{
    pthread_mutex_lock(&l->tmu);
    uint64_t from = l->covered;
    bool skip = stn_writes(l->c) || from >= count;
    pthread_mutex_unlock(&l->tmu);
    if (skip)
        return 0;
    if (count - from > STN_CATCH_UP_MAX)
        return load(l);
    int r = 0;
    while (r == 0 && from < count) {
        st_nats_page *np = NULL;
        uint64_t n = count - from;
        r = st_nats_log_read(l->nl, from, n < ST_NATS_READ_MAX ? (uint32_t)n : ST_NATS_READ_MAX,
                             &np);
        bool moved = false;
        if (r == 0) {
            pthread_mutex_lock(&l->tmu);
            if (l->covered == from) /* else another thread did */
                r = keep_page(l, np);
            moved = l->covered > from;
            from = l->covered;
            pthread_mutex_unlock(&l->tmu);
        }
        st_nats_page_free(np);
        if (!moved)
            break;
    }
    return r;
}

int stn_tail_catch_up(stn_log *l, uint64_t count)
{
    pthread_mutex_lock(&l->mu);
    int r = loaded(l) ? catch_up(l, count) : load(l);
    pthread_mutex_unlock(&l->mu);
    return r;
}

/* Forget what memory holds: it no longer is the log's start (tmu). */
static void forget(stn_log *l)
{
    while (l->lo < l->hi)
        drop_oldest(l);
    l->lo = l->hi = 0;
    stn_table_free(&l->ids);
    stn_table_free(&l->keys);
    l->covered = 0;
    l->loaded = false;
    l->forgets++;
    forget_old(l);
}

static stn_log *log_of(stn_conv *c)
{
    pthread_mutex_lock(&c->mu);
    stn_log *l = c->log; /* stays until c is freed: the worker holds c */
    pthread_mutex_unlock(&c->mu);
    return l;
}

void stn_tail_forget(stn_conv *c)
{
    stn_log *l = log_of(c);
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->tmu);
    forget(l);
    pthread_mutex_unlock(&l->tmu);
}

int stn_tail_claim(stn_conv *c, uint64_t next)
{
    stn_log *l = log_of(c);
    if (l == NULL)
        return 0;
    pthread_mutex_lock(&l->tmu);
    bool stale = l->loaded && l->covered != next;
    if (stale)
        forget(l);
    pthread_mutex_unlock(&l->tmu);
    if (!stale)
        return 0;
    int r = stn_tail_load(l);
    if (r < 0)
        rt_log(RT_LOG_WARN, "store", "nats: conversation %s: cannot load its log again: %s", c->hex,
               strerror(-r));
    return -ESTALE;
}

void stn_tail_push(stn_conv *c, uint64_t first, const stn_job *j)
{
    stn_log *l = log_of(c);
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->tmu);
    for (size_t i = 0; i < j->n; i++) {
        const st_nats_item *it = &j->items[i];
        if (keep(l, first + i, j->payloads[i], it->id, it->idlen, it->key, it->keylen) < 0) {
            while (l->lo < l->hi) /* out of memory: nothing kept */
                drop_oldest(l);
            break;
        }
    }
    pthread_mutex_unlock(&l->tmu);
}

/* Does memory hold the whole log, as this node writes it or, before it
 * writes, as it was loaded? (tmu) */
static bool whole(stn_log *l)
{
    if (stn_writes(l->c))
        return l->covered >= atomic_load(&l->c->written);
    return l->loaded && l->covered >= atomic_load(&l->known);
}

static uint64_t count_of(stn_log *l)
{
    return stn_writes(l->c) ? atomic_load(&l->c->written) : l->covered;
}

uint64_t stn_tail_count(stn_log *l)
{
    pthread_mutex_lock(&l->tmu);
    uint64_t n = whole(l) ? count_of(l) : atomic_load(&l->known);
    pthread_mutex_unlock(&l->tmu);
    return n;
}

int stn_tail_read(stn_log *l, uint64_t first, uint32_t max, st_page **out)
{
    int r = 0;
    pthread_mutex_lock(&l->tmu);
    /* fewer than max only at the end of the log, as log.h promises */
    bool at_end = whole(l) && l->hi == count_of(l);
    if (first >= l->lo && first < l->hi && (at_end || l->hi - first >= max)) {
        uint64_t end = l->hi - first < max ? l->hi : first + max;
        stn_ref v[STN_TAIL_MAX];
        for (uint64_t i = first; i < end; i++) {
            const stn_tail_ev *e = &l->ring[i % STN_TAIL_MAX];
            v[i - first] =
                (stn_ref){i, rt_buf_data(e->payload), rt_buf_len(e->payload), e->id, e->idlen};
        }
        r = stn_page_of(v, (uint32_t)(end - first), out);
        r = r < 0 ? r : 1;
    } else if (max == 1 && (first < l->lo || first >= l->hi) && old_of(l, first) != NULL) {
        const stn_tail_ev *e = old_of(l, first); /* a find confirmed it */
        stn_ref v = {first, rt_buf_data(e->payload), rt_buf_len(e->payload), e->id, e->idlen};
        r = stn_page_of(&v, 1, out);
        r = r < 0 ? r : 1;
    } else if (first >= l->hi && at_end) {
        r = stn_page_of(NULL, 0, out); /* past the end */
        r = r < 0 ? r : 1;
    }
    pthread_mutex_unlock(&l->tmu);
    return r;
}

typedef struct candidates {
    uint64_t at[8];
    int n;
} candidates;

static int candidate(void *ctx, uint64_t index)
{
    candidates *k = ctx;
    if (k->n == 8)
        return -EAGAIN; /* a flood of collisions: let the cluster answer */
    int i = k->n++;
    for (; i > 0 && k->at[i - 1] > index; i--) /* in order: the first match wins */
        k->at[i] = k->at[i - 1];
    k->at[i] = index;
    return 0;
}

/* 1 if event at (in the tail, or kept by an earlier check) has this id
 * or key, 0 if not; -EAGAIN if memory does not hold it. tmu held. */
static int in_tail(const stn_log *l, uint64_t at, bool key, const void *v, size_t len)
{
    const stn_tail_ev *e = at >= l->lo && at < l->hi ? &l->ring[at % STN_TAIL_MAX] : old_of(l, at);
    if (e == NULL)
        return -EAGAIN;
    const char *got = key ? e->id + e->idlen : e->id;
    return (key ? e->keylen : e->idlen) == len && memcmp(got, v, len) == 0;
}

/* Read event at from the cluster: 1 if it has this id or key, 0 if not.
 * It is kept, for the loop's next checks and one-event reads of it. */
static int in_log(stn_log *l, uint64_t at, bool key, const void *v, size_t len)
{
    st_nats_page *p = NULL;
    pthread_mutex_lock(&l->mu);
    int r = st_nats_log_read(l->nl, at, 1, &p);
    pthread_mutex_unlock(&l->mu);
    if (r < 0)
        return r;
    const st_nats_event *e = p->n ? &p->ev[0] : NULL;
    if (e != NULL && e->index == at) {
        pthread_mutex_lock(&l->tmu);
        keep_old(l, e);
        pthread_mutex_unlock(&l->tmu);
    }
    const char *got = e ? (key ? e->key : e->id) : NULL;
    r = got && (key ? e->keylen : e->idlen) == len && memcmp(got, v, len) == 0;
    st_nats_page_free(p);
    return r;
}

int stn_tail_find(stn_log *l, bool key, const void *v, size_t len, bool wait, uint64_t upto,
                  uint64_t *index)
{
    if (len == 0 || len > 255)
        return -ENOENT;
    candidates k = {.n = 0};
    int r[8];
    pthread_mutex_lock(&l->tmu);
    bool covers = upto == STN_WHOLE ? whole(l) : l->covered >= upto;
    int e = covers ? stn_table_each(key ? &l->keys : &l->ids, stn_hash(v, len), candidate, &k)
                   : -EAGAIN;
    for (int i = 0; e == 0 && i < k.n; i++)
        r[i] = in_tail(l, k.at[i], key, v, len);
    pthread_mutex_unlock(&l->tmu);
    if (e < 0)
        return e;
    for (int i = 0; i < k.n; i++) {
        if (r[i] == -EAGAIN && wait)
            r[i] = in_log(l, k.at[i], key, v, len);
        if (r[i] < 0)
            return -EAGAIN;
        if (r[i] == 1) {
            *index = k.at[i];
            return 0;
        }
    }
    return -ENOENT;
}

size_t stn_tail_memory(stn_log *l)
{
    pthread_mutex_lock(&l->tmu);
    size_t n = l->bytes + (l->ring != NULL ? STN_TAIL_MAX * sizeof(*l->ring) : 0) +
               (l->ids.cap + l->keys.cap) * sizeof(struct stn_slot) + l->old_bytes +
               (l->old != NULL ? STN_OLD_MAX * sizeof(*l->old) : 0);
    pthread_mutex_unlock(&l->tmu);
    return n;
}

void stn_tail_free(stn_log *l)
{
    while (l->lo < l->hi)
        drop_oldest(l);
    free(l->ring);
    l->ring = NULL;
    forget_old(l);
    free(l->old);
    l->old = NULL;
    stn_table_free(&l->ids);
    stn_table_free(&l->keys);
}
