/*
 * nats_catalog.c - this node's copy of the catalog (the bucket parley_convs,
 * nats_store.h), so that st_conv_get, counting and listing answer from
 * memory: they are called on loop threads, where no request to the cluster
 * may be made. A watch of the whole bucket, on a thread of its own, keeps
 * it current: conversations created or deleted on another node appear and
 * go, and another node's meta replaces this one's. This node's own
 * creations, meta and deletions are applied at once too (the watch brings
 * them again later: applying is idempotent), so that a client reads its
 * own writes here.
 *
 * One rule applies an entry, whoever saw it (stn_catalog_apply):
 *   c.<hex>[.<gen>]  put: incarnation gen lives, unless one as new was
 *                    deleted; delete: it is gone
 *   m.<hex>          put: the meta, if newer (by revision) than what was
 *                    applied, the creation's included, so that a meta left
 *                    by an older incarnation never applies to a newer one
 *   d.<hex>          put "<gen>": incarnations up to gen are deleted, for
 *                    good (their handles are gone here too)
 *   s.<hex>          what lists show of it, as its writer published it
 *                    (nats_summary.c), if newer (by revision); it applies
 *                    to the incarnation it names only
 */
#include "nats_store.h"

#include "runtime/grow.h"
#include "runtime/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table ------------------------------------------------------------ */

static size_t slot_of(const rt_uuid *id, size_t nbuckets)
{
    uint64_t a, b;
    memcpy(&a, id->b, 8);
    memcpy(&b, id->b + 8, 8);
    uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
    return (size_t)(h ^ (h >> 32)) & (nbuckets - 1);
}

stn_entry *stn_catalog_find(stn_store *s, const rt_uuid *id)
{
    if (s->nbuckets == 0)
        return NULL;
    for (stn_entry *e = s->buckets[slot_of(id, s->nbuckets)]; e != NULL; e = e->next)
        if (rt_uuid_eq(&e->id, id))
            return e;
    return NULL;
}

static void grow(stn_store *s)
{
    size_t n = s->nbuckets ? 2 * s->nbuckets : 1024;
    stn_entry **b = calloc(n, sizeof(*b));
    if (b == NULL)
        return; /* longer chains, still right */
    for (size_t i = 0; i < s->nbuckets; i++)
        for (stn_entry *e = s->buckets[i], *next; e != NULL; e = next) {
            next = e->next;
            size_t k = slot_of(&e->id, n);
            e->next = b[k];
            b[k] = e;
        }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

static stn_entry *find_or_add(stn_store *s, const rt_uuid *id)
{
    stn_entry *e = stn_catalog_find(s, id);
    if (e != NULL)
        return e;
    if (s->nentries >= s->nbuckets)
        grow(s);
    if (s->nbuckets == 0 || (e = calloc(1, sizeof(*e))) == NULL)
        return NULL;
    e->id = *id;
    size_t k = slot_of(id, s->nbuckets);
    e->next = s->buckets[k];
    s->buckets[k] = e;
    s->nentries++;
    return e;
}

/* ---- children -------------------------------------------------------------- */

static void kid_add(stn_store *s, const rt_uuid *parent, const rt_uuid *kid)
{
    stn_entry *p = find_or_add(s, parent);
    size_t cap = p != NULL ? p->kcap : 0;
    if (p == NULL || rt_grow((void **)&p->kids, &cap, p->nkids + 1, sizeof(rt_uuid), 4) < 0) {
        rt_log(RT_LOG_ERROR, "store", "nats: out of memory: a child missing from the catalog");
        return;
    }
    p->kcap = (uint32_t)cap;
    p->kids[p->nkids++] = *kid;
}

static void kid_remove(stn_store *s, const rt_uuid *parent, const rt_uuid *kid)
{
    stn_entry *p = stn_catalog_find(s, parent);
    for (uint32_t i = 0; p != NULL && i < p->nkids; i++)
        if (rt_uuid_eq(&p->kids[i], kid)) {
            p->kids[i] = p->kids[--p->nkids];
            return;
        }
}

/* ---- applying an entry --------------------------------------------------------- */

static void set_meta(stn_entry *e, rt_buf *m, uint64_t rev)
{
    rt_buf_unref(e->meta);
    e->meta = m;
    e->mrev = rev;
    stn_conv *c = e->open;
    if (c != NULL && c->gen == e->gen && m != NULL) { /* s->mu, then c->mu */
        pthread_mutex_lock(&c->mu);
        rt_buf_unref(c->meta);
        c->meta = rt_buf_ref(m);
        pthread_mutex_unlock(&c->mu);
    }
}

static void unlive(stn_store *s, stn_entry *e)
{
    if (!e->live)
        return;
    e->live = false;
    s->count--;
    if (e->has_parent)
        kid_remove(s, &e->parent, &e->id);
    rt_buf_unref(e->meta);
    e->meta = NULL;
    if (e->open != NULL && e->open->gen == e->gen)
        atomic_store(&e->open->gone, true);
}

static void created(stn_store *s, stn_entry *e, uint64_t gen, const char *v, size_t len,
                    uint64_t rev)
{
    if (e->del1 > gen || (e->live && e->gen >= gen))
        return; /* deleted, or known */
    const char *nl = memchr(v, '\n', len);
    rt_uuid parent;
    bool has_parent = nl != NULL && nl - v == 32 && rt_uuid_parse(v, 32, &parent);
    if (nl == NULL || (!has_parent && !(nl - v == 1 && v[0] == '-'))) {
        char hex[33];
        rt_uuid_hex(&e->id, hex);
        rt_log(RT_LOG_WARN, "store", "nats: the catalog entry of %s is malformed: ignored", hex);
        return;
    }
    rt_buf *m = rt_buf_copy(nl + 1, len - (size_t)(nl + 1 - v));
    if (m == NULL) {
        rt_log(RT_LOG_ERROR, "store",
               "nats: out of memory: a conversation missing from the catalog");
        return;
    }
    unlive(s, e); /* an older incarnation still shown: this one follows it */
    e->live = true;
    e->gen = gen;
    e->crev = rev;
    e->has_parent = has_parent;
    if (has_parent) {
        e->parent = parent;
        kid_add(s, &parent, &e->id);
    }
    s->count++;
    if (rev >= e->mrev || e->meta == NULL)
        set_meta(e, m, rev);
    else
        rt_buf_unref(m); /* a newer m. came first: it stays */
}

/* "<32 hex>" or "<32 hex>.<gen>" after the key's prefix. */
static bool parse_id(const char *p, rt_uuid *id, uint64_t *gen)
{
    size_t len = strlen(p);
    *gen = 0;
    if (len < 32 || !rt_uuid_parse(p, 32, id))
        return false;
    if (len == 32)
        return true;
    if (p[32] != '.' || p[33] < '1' || p[33] > '9')
        return false;
    char *end;
    *gen = strtoull(p + 33, &end, 10);
    return *end == '\0';
}

void stn_catalog_apply(stn_store *s, const char *key, kvOperation op, const void *v, size_t len,
                       uint64_t rev)
{
    rt_uuid id;
    uint64_t gen;
    char kind = key[0];
    if ((kind != 'c' && kind != 'm' && kind != 'd' && kind != 's') || key[1] != '.' ||
        !parse_id(key + 2, &id, &gen) || (kind != 'c' && gen != 0))
        return; /* not one of these (old p. entries) */
    pthread_mutex_lock(&s->mu);
    stn_entry *e = find_or_add(s, &id);
    if (e == NULL) {
        rt_log(RT_LOG_ERROR, "store", "nats: out of memory: the catalog misses %s", key);
    } else if (kind == 'c' && op == kvOp_Put) {
        created(s, e, gen, v, len, rev);
    } else if (kind == 'c') {
        if (e->del1 < gen + 1)
            e->del1 = gen + 1;
        if (e->live && e->gen <= gen)
            unlive(s, e);
    } else if (kind == 'm' && op == kvOp_Put && rev > e->mrev && e->live) {
        rt_buf *m = rt_buf_copy(v, len);
        if (m != NULL)
            set_meta(e, m, rev);
    } else if (kind == 's') {
        stn_summary_apply(e, op, v, len, rev); /* one this node cannot read: ignored */
    } else if (kind == 'd' && op == kvOp_Put) {
        char num[24];
        snprintf(num, sizeof num, "%.*s", (int)(len < 23 ? len : 23), (const char *)v);
        uint64_t g = len == 0 ? 0 : strtoull(num, NULL, 10); /* "": incarnation 0 */
        if (e->del1 < g + 1)
            e->del1 = g + 1;
        if (e->live && e->gen <= g)
            unlive(s, e);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- what is asked of it ------------------------------------------------------------ */

int stn_catalog_list(stn_store *s, rt_uuid **ids, size_t *n)
{
    pthread_mutex_lock(&s->mu);
    size_t k = 0, want = s->count;
    rt_uuid *v = malloc((want ? want : 1) * sizeof(*v));
    for (size_t i = 0; v != NULL && i < s->nbuckets; i++)
        for (stn_entry *e = s->buckets[i]; e != NULL; e = e->next)
            if (e->live && k < want)
                v[k++] = e->id;
    pthread_mutex_unlock(&s->mu);
    if (v == NULL)
        return -ENOMEM;
    *ids = v;
    *n = k;
    return 0;
}

int stn_catalog_children(stn_store *s, const rt_uuid *id, rt_uuid **ids, size_t *n)
{
    pthread_mutex_lock(&s->mu);
    stn_entry *e = stn_catalog_find(s, id);
    size_t k = e != NULL ? e->nkids : 0;
    rt_uuid *v = malloc((k ? k : 1) * sizeof(*v));
    if (v != NULL && k > 0)
        memcpy(v, e->kids, k * sizeof(*v));
    pthread_mutex_unlock(&s->mu);
    if (v == NULL)
        return -ENOMEM;
    if (k > 1)
        qsort(v, k, sizeof(*v), rt_uuid_cmp);
    *ids = v;
    *n = k;
    return 0;
}

/* ---- the watch ------------------------------------------------------------------ */

/* Wait up to ms on s->wcv (s->wmu held): a pause before watching again,
 * which closing cuts short. */
static void pause_ms(stn_store *s, int64_t ms)
{
    if (!s->wstop)
        stn_timedwait(&s->wcv, &s->wmu, ms);
}

static bool stopping(stn_store *s)
{
    pthread_mutex_lock(&s->wmu);
    bool stop = s->wstop;
    pthread_mutex_unlock(&s->wmu);
    return stop;
}

/* The watch stops itself, between two kvWatcher_Next (polling for
 * closing): cnats 3.4.1 leaks the message that a kvWatcher_Stop made
 * meanwhile catches inside kvWatcher_Next (fixed in later versions). */
static void *watch_main(void *arg)
{
    stn_store *s = arg;
    pthread_setname_np(pthread_self(), "parley-nats-cat");
    for (int attempt = 0;; attempt++) {
        pthread_mutex_lock(&s->wmu);
        if (s->wstop) {
            pthread_mutex_unlock(&s->wmu);
            break;
        }
        kvWatcher *w = NULL;
        natsStatus st = kvStore_WatchAll(&w, s->convs, NULL);
        if (st != NATS_OK) {
            snprintf(s->werr, sizeof s->werr, "cannot watch %s: %s", STN_CONVS, stn_last_error(st));
            if (attempt == 0 || attempt % 20 == 0)
                rt_log(RT_LOG_WARN, "store", "nats: %s (trying again)", s->werr);
            pause_ms(s, attempt < 8 ? 50ll << attempt : 5000);
            pthread_mutex_unlock(&s->wmu);
            continue;
        }
        pthread_mutex_unlock(&s->wmu);
        for (;;) {
            kvEntry *e = NULL;
            st = kvWatcher_Next(&e, w, STN_WATCH_POLL_MS);
            if (stopping(s)) {
                kvEntry_Destroy(e);
                break;
            }
            if (st == NATS_TIMEOUT)
                continue; /* nothing changed */
            if (st != NATS_OK)
                break; /* stopped, or lost: watch again */
            attempt = 0;
            if (e == NULL) { /* the values there were at the start: all applied */
                pthread_mutex_lock(&s->wmu);
                s->synced = true;
                pthread_cond_broadcast(&s->wcv);
                pthread_mutex_unlock(&s->wmu);
                continue;
            }
            stn_catalog_apply(s, kvEntry_Key(e), kvEntry_Operation(e), kvEntry_Value(e),
                              (size_t)kvEntry_ValueLen(e), kvEntry_Revision(e));
            kvEntry_Destroy(e);
        }
        if (stopping(s)) { /* not before the connection is closed: stn_catalog_stop says why */
            pthread_mutex_lock(&s->wmu);
            while (!s->wclosed)
                pthread_cond_wait(&s->wcv, &s->wmu);
            pthread_mutex_unlock(&s->wmu);
            kvWatcher_Destroy(w);
            continue; /* the loop's top sees wstop */
        }
        stn_watch_retire(s->n, w); /* messages may still be coming to it */
        rt_log(RT_LOG_WARN, "store", "nats: the watch of %s ended (%s): watching again", STN_CONVS,
               stn_last_error(st));
    }
    return NULL;
}

int stn_catalog_start(stn_store *s, char *err, size_t errlen)
{
    pthread_mutex_lock(&s->mu);
    grow(s);
    pthread_mutex_unlock(&s->mu);
    if (s->nbuckets == 0)
        return -ENOMEM;
    int r = -pthread_create(&s->wthread, NULL, watch_main, s);
    if (r < 0) {
        snprintf(err, errlen, "cannot start the catalog's watch: %s", strerror(-r));
        return r;
    }
    s->wstarted = true;
    /* what exists must be known before the first count or get */
    int64_t until = stn_now_ms() + STN_CATALOG_LOAD_MS;
    pthread_mutex_lock(&s->wmu);
    while (!s->synced && stn_now_ms() < until)
        pause_ms(s, 100);
    bool ok = s->synced;
    pthread_mutex_unlock(&s->wmu);
    if (!ok) {
        snprintf(err, errlen, "NATS timed out: loading the catalog (%s) took more than %d s%s%s",
                 STN_CONVS, STN_CATALOG_LOAD_MS / 1000, s->werr[0] ? ": " : "", s->werr);
        return -ETIMEDOUT;
    }
    return 0;
}

void stn_catalog_stop(stn_store *s)
{
    if (!s->wstarted)
        return;
    pthread_mutex_lock(&s->wmu);
    s->wstop = true;
    pthread_cond_broadcast(&s->wcv);
    pthread_mutex_unlock(&s->wmu);
    /* The watcher goes only once the connection is closed (the watch waits
     * for wclosed), for two races in cnats 3.4.1 (and later, as of 2026)
     * that ASan caught at shutdown:
     * - to delete an ordered consumer, unsubscribing reads its name
     *   unlocked, while the thread that recreates the consumer after missed
     *   heartbeats (as when the cluster comes back) may free that name;
     * - the read loop takes a subscription from its table without holding
     *   a reference, so one destroyed meanwhile is used after it is freed.
     * Closed, the connection has no read loop left and unsubscribing
     * returns before the delete. The cluster deletes an idle ordered
     * consumer by itself. */
    st_nats_disconnect(s->n);
    pthread_mutex_lock(&s->wmu);
    s->wclosed = true;
    pthread_cond_broadcast(&s->wcv);
    pthread_mutex_unlock(&s->wmu);
    pthread_join(s->wthread, NULL);
    s->wstarted = false;
}

void stn_catalog_free(stn_store *s)
{
    for (size_t i = 0; i < s->nbuckets; i++)
        for (stn_entry *e = s->buckets[i], *next; e != NULL; e = next) {
            next = e->next;
            rt_buf_unref(e->meta);
            free(e->kids);
            free(e);
        }
    free(s->buckets);
    s->buckets = NULL;
    s->nbuckets = s->nentries = 0;
}
