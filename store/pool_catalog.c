/*
 * pool_catalog.c - the pool's conversations in memory (pool.c): a hash
 * table by id and one by parent id (children cost what they are), and the
 * calls of store.h on a conversation that are not the committer's.
 *
 * Locks: cat_mu guards the tables (and `creating`); a conversation's lock
 * (one of 64, by its id: a mutex each would cost 40 bytes a conversation)
 * guards its count, meta, files and log. A creation, like a set_meta, is a
 * catalog record in the committer's next group: the caller waits for it.
 */
#include "pool_impl.h"

#include "backend.h"
#include "io.h"
#include "runtime/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A conversation id's place among the locks and the buckets: its two
 * halves mixed by multiplies (a few instructions where FNV-1a took one
 * multiply a byte, several times an append: every release takes the
 * lock). Memory only: nothing stored depends on it. */
static uint64_t mix(const rt_uuid *id)
{
    uint64_t a, b;
    memcpy(&a, id->b, 8);
    memcpy(&b, id->b + 8, 8);
    uint64_t x = (a ^ (b * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 31);
}

pthread_mutex_t *stp_lock(stp_conv *c)
{
    return &c->s->locks[mix(&c->id) >> 58]; /* 64 locks */
}

static size_t bucket(size_t nbuckets, const rt_uuid *id)
{
    return (size_t)(mix(id) % nbuckets);
}

stp_conv *stp_lookup(stp_store *s, const rt_uuid *id)
{
    for (stp_conv *c = s->buckets[bucket(s->nbuckets, id)]; c != NULL; c = c->next)
        if (rt_uuid_eq(&c->id, id))
            return c;
    return NULL;
}

static void link_in(stp_conv **b, stp_conv **kids, size_t n, stp_conv *c)
{
    size_t k = bucket(n, &c->id);
    c->next = b[k];
    b[k] = c;
    if (c->has_parent) {
        k = bucket(n, &c->parent);
        c->knext = kids[k];
        kids[k] = c;
    }
}

int stp_insert(stp_store *s, stp_conv *c)
{
    if (s->count + 1 > s->nbuckets) { /* chains stay short: grow at load 1 */
        size_t n = s->nbuckets * 2;
        stp_conv **b = calloc(n, sizeof(*b)), **kb = calloc(n, sizeof(*kb));
        if (b == NULL || kb == NULL) {
            free(b);
            free(kb);
            return -ENOMEM;
        }
        for (size_t i = 0; i < s->nbuckets; i++)
            for (stp_conv *x = s->buckets[i], *next; x != NULL; x = next) {
                next = x->next;
                link_in(b, kb, n, x);
            }
        free(s->buckets);
        free(s->kids);
        s->buckets = b;
        s->kids = kb;
        s->nbuckets = n;
    }
    link_in(s->buckets, s->kids, s->nbuckets, c);
    s->count++;
    return 0;
}

void stp_unlink(stp_store *s, stp_conv *c)
{
    if (c->has_parent)
        for (stp_conv **pp = &s->kids[bucket(s->nbuckets, &c->parent)]; *pp; pp = &(*pp)->knext)
            if (*pp == c) {
                *pp = c->knext;
                break;
            }
    for (stp_conv **pp = &s->buckets[bucket(s->nbuckets, &c->id)]; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            s->count--;
            return;
        }
}

stp_conv *stp_conv_new(stp_store *s, const rt_uuid *id)
{
    stp_conv *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->be = &st_pool_backend;
    c->s = s;
    c->id = c->tag = *id;
    atomic_init(&c->refs, 1); /* the catalog's, once in it: stp_remove drops it */
    atomic_init(&c->runs, NULL);
    atomic_init(&c->used, st_coarse_ms());
    c->act_last = STP_NONE;
    return c;
}

void stp_conv_free(stp_conv *c)
{
    if (c->log != NULL)
        stp_log_free(c->log);
    free(atomic_load(&c->runs));
    for (stp_file *f = c->files, *next; f != NULL; f = next) {
        next = f->next;
        free(f);
    }
    rt_buf_unref(c->meta);
    free(c);
}

void stp_catalog_free(stp_store *s)
{
    for (size_t i = 0; s->buckets != NULL && i < s->nbuckets; i++)
        for (stp_conv *c = s->buckets[i], *next; c != NULL; c = next) {
            next = c->next;
            stp_conv_free(c);
        }
    free(s->buckets);
    free(s->kids);
    s->buckets = s->kids = NULL;
}

int stp_set_file(stp_conv *c, const char *name, size_t len, stp_loc at)
{
    for (stp_file *f = c->files; f != NULL; f = f->next)
        if (strlen(f->name) == len && memcmp(f->name, name, len) == 0) {
            f->at = at;
            return 0;
        }
    stp_file *f = malloc(sizeof(*f) + len + 1);
    if (f == NULL)
        return -ENOMEM;
    memcpy(f->name, name, len);
    f->name[len] = '\0';
    f->at = at;
    f->next = c->files;
    c->files = f;
    return 0;
}

int stp_note_run(stp_conv *c, uint32_t seq, uint32_t index)
{
    stp_runs *old = atomic_load_explicit(&c->runs, memory_order_relaxed);
    uint32_t n = old != NULL ? old->n : 0;
    if (n > 0 && old->r[n - 1].seq == seq)
        return 0;
    stp_runs *nr = malloc(sizeof(*nr) + (n + 1) * sizeof(nr->r[0]));
    if (nr == NULL || (old != NULL && c->log != NULL && st_retire(&c->log->retired, old) < 0)) {
        free(nr);
        return -ENOMEM;
    }
    if (n > 0)
        memcpy(nr->r, old->r, n * sizeof(nr->r[0]));
    nr->r[n] = (stp_run){seq, index};
    nr->n = n + 1;
    atomic_store_explicit(&c->runs, nr, memory_order_release);
    if (c->log != NULL) { /* its readers take the runs from its view */
        atomic_store(&atomic_load_explicit(&c->log->view, memory_order_relaxed)->runs, nr);
        stp_log_release(c->log);
    }
    if (old != NULL && c->log == NULL) /* no log: nobody reads them */
        free(old);
    return 0;
}

void stp_unref(stp_conv *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        stp_conv_free(c);
}

void stp_remove(stp_store *s, stp_conv *c)
{
    pthread_mutex_lock(&s->cat_mu);
    stp_unlink(s, c);
    pthread_mutex_unlock(&s->cat_mu);
    pthread_mutex_lock(stp_lock(c));
    atomic_store(&c->gone, true);
    if (c->log != NULL) {
        stp_log_free(c->log);
        c->log = NULL;
    }
    pthread_mutex_unlock(stp_lock(c));
    stp_unref(c); /* the catalog's: its last holder frees it */
}

/* ---- store.h: conversations ---------------------------------------------- */

static stp_conv *hold(stp_conv *c)
{
    if (c != NULL)
        atomic_fetch_add(&c->refs, 1);
    return c;
}

int stp_get(st_store *st, const rt_uuid *id, st_conv **out)
{
    stp_store *s = (stp_store *)st;
    pthread_mutex_lock(&s->cat_mu);
    stp_conv *c = stp_lookup(s, id);
    c = hold(c != NULL && !c->creating ? c : NULL);
    pthread_mutex_unlock(&s->cat_mu);
    *out = (st_conv *)c;
    return c != NULL ? 0 : -ENOENT;
}

void stp_release(st_conv *sc)
{
    stp_conv *c = (stp_conv *)sc;
    if (c == NULL)
        return;
    /* twice an append: the coarse clock, to the committer's st_now_ms */
    atomic_store(&c->used, st_coarse_ms());
    /* the meta stays in memory while held or its log is open; looked at
     * while this reference still keeps c, never after */
    pthread_mutex_lock(stp_lock(c));
    if (c->log == NULL && atomic_load(&c->refs) == 2 && !c->creating) {
        rt_buf_unref(c->meta);
        c->meta = NULL;
    }
    pthread_mutex_unlock(stp_lock(c));
    stp_unref(c);
}

const rt_uuid *stp_id(const st_conv *c)
{
    return &((const stp_conv *)c)->id;
}

bool stp_parent(const st_conv *sc, rt_uuid *parent)
{
    const stp_conv *c = (const stp_conv *)sc;
    if (c->has_parent)
        *parent = c->parent;
    return c->has_parent;
}

/* Queue a catalog record for c and wait until it is durable. */
static int commit_wait(stp_conv *c, st_req *r)
{
    if (r == NULL)
        return -ENOMEM;
    st_waiter w;
    st_waiter_init(&w);
    int e = stp_submit(c, r, st_waiter_done, &w);
    if (e < 0) /* never queued: nothing else answers */
        st_waiter_done(&w, e, 0);
    return st_waiter_wait(&w);
}

int stp_create(st_store *st, const rt_uuid *id, const rt_uuid *parent, rt_buf *meta, st_conv **out)
{
    stp_store *s = (stp_store *)st;
    *out = NULL;
    pthread_mutex_lock(&s->cat_mu);
    stp_conv *c, *p;
    while ((c = stp_lookup(s, id)) != NULL && c->creating) /* its outcome decides */
        pthread_cond_wait(&s->created_cv, &s->cat_mu);
    int r = c != NULL                                            ? -EEXIST
            : parent == NULL                                     ? 0
            : rt_uuid_eq(parent, id)                             ? -ELOOP
            : (p = stp_lookup(s, parent)) == NULL || p->creating ? -ENOENT
                                                                 : 0;
    if (r < 0) {
        *out = (st_conv *)hold(c);
        pthread_mutex_unlock(&s->cat_mu);
        return r;
    }
    c = stp_conv_new(s, id);
    r = c != NULL ? 0 : -ENOMEM;
    if (r == 0) {
        c->meta = rt_buf_ref(meta);
        c->has_parent = parent != NULL;
        if (parent != NULL)
            c->parent = *parent;
        r = stp_insert(s, c);
    }
    if (r == 0) { /* the id is taken at once, but invisible until durable */
        c->creating = true;
        s->ncreating++;
        hold(c);
    }
    pthread_mutex_unlock(&s->cat_mu);
    if (r < 0) {
        if (c != NULL)
            stp_conv_free(c);
        return r;
    }
    char hex[33];
    if (parent != NULL)
        rt_uuid_hex(parent, hex);
    r = commit_wait(c, st_req_one(REQ_CREATE, "create", hex, parent != NULL ? 32 : 0, meta));
    pthread_mutex_lock(&s->cat_mu);
    c->creating = false;
    s->ncreating--;
    if (r < 0)
        stp_unlink(s, c);
    pthread_cond_broadcast(&s->created_cv);
    pthread_mutex_unlock(&s->cat_mu);
    if (r < 0) {
        atomic_store(&c->gone, true);
        stp_unref(c); /* the catalog's, then the creation's */
        stp_release((st_conv *)c);
        return r;
    }
    *out = (st_conv *)c;
    return 0;
}

int stp_read_at(stp_store *s, stp_loc at, char **data)
{
    char *b = malloc((size_t)at.len + 1);
    if (b == NULL)
        return -ENOMEM;
    int r = stp_pread(s, at.seq, b, at.len, at.off);
    if (r < 0) {
        free(b);
        return r;
    }
    b[at.len] = '\0';
    *data = b;
    return 0;
}

/* Where c's meta is (name NULL) or its file `name` is, {0} if it has none
 * (lock held). */
static stp_loc where(const stp_conv *c, const char *name)
{
    if (name == NULL)
        return c->meta_at;
    const stp_file *f = c->files;
    while (f != NULL && strcmp(f->name, name) != 0)
        f = f->next;
    return f != NULL ? f->at : (stp_loc){0, 0, 0};
}

/* Read c's meta or file back (see where): a malloc'd copy, NUL-terminated,
 * or *cached if the meta is in memory. Read outside the lock; if that
 * fails and it moved meanwhile (a carry, pool_carry.c, whose old segment
 * went), once more where it is now. */
static int read_back(stp_conv *c, const char *name, rt_buf **cached, char **data, uint32_t *len)
{
    pthread_mutex_lock(stp_lock(c));
    *cached = name == NULL && c->meta != NULL ? rt_buf_ref(c->meta) : NULL;
    stp_loc at = where(c, name);
    pthread_mutex_unlock(stp_lock(c));
    if (*cached != NULL)
        return 0;
    for (int tries = 0;; tries++) {
        if (at.seq == 0)
            return -ENOENT;
        int r = stp_read_at(c->s, at, data);
        if (r == 0) {
            *len = at.len;
            return 0;
        }
        pthread_mutex_lock(stp_lock(c));
        stp_loc now = where(c, name);
        pthread_mutex_unlock(stp_lock(c));
        if (tries > 0 || memcmp(&now, &at, sizeof(at)) == 0)
            return r;
        at = now;
    }
}

rt_buf *stp_meta(st_conv *sc)
{
    stp_conv *c = (stp_conv *)sc;
    rt_buf *m = NULL;
    char *data = NULL;
    uint32_t len = 0;
    int r = read_back(c, NULL, &m, &data, &len);
    if (m != NULL)
        return m;
    if (r == 0)
        m = rt_buf_take(data, len);
    if (m == NULL) { /* the interface has no error here: say it, answer an empty meta */
        rt_log(RT_LOG_ERROR, "store", "cannot read a conversation's meta: %s",
               strerror(r < 0 ? -r : ENOMEM));
        return rt_buf_copy("{}", 2);
    }
    pthread_mutex_lock(stp_lock(c));
    if (c->meta == NULL)
        c->meta = rt_buf_ref(m);
    pthread_mutex_unlock(stp_lock(c));
    return m;
}

int stp_set_meta(st_conv *sc, rt_buf *meta)
{
    stp_conv *c = (stp_conv *)sc;
    if (atomic_load(&c->gone))
        return -ENOENT;
    return commit_wait(c, st_req_one(REQ_META, "meta", NULL, 0, meta));
}

int stp_get_file(st_conv *sc, const char *name, char **data, size_t *len)
{
    stp_conv *c = (stp_conv *)sc;
    if (!st_conv_file_name_ok(name))
        return -EINVAL;
    if (atomic_load(&c->gone))
        return -ENOENT;
    rt_buf *none;
    uint32_t n = 0;
    int r = read_back(c, name, &none, data, &n);
    if (r == 0)
        *len = n;
    return r;
}

/* ---- store.h: the catalog -------------------------------------------------- */

size_t stp_count(st_store *st)
{
    stp_store *s = (stp_store *)st;
    pthread_mutex_lock(&s->cat_mu);
    size_t n = s->count - s->ncreating;
    pthread_mutex_unlock(&s->cat_mu);
    return n;
}

int stp_list(st_store *st, rt_uuid **ids, size_t *n)
{
    stp_store *s = (stp_store *)st;
    pthread_mutex_lock(&s->cat_mu);
    rt_uuid *v = malloc((s->count ? s->count : 1) * sizeof(*v));
    size_t k = 0;
    for (size_t i = 0; v != NULL && i < s->nbuckets; i++)
        for (stp_conv *c = s->buckets[i]; c != NULL; c = c->next)
            if (!c->creating)
                v[k++] = c->id;
    pthread_mutex_unlock(&s->cat_mu);
    if (v == NULL)
        return -ENOMEM;
    *ids = v;
    *n = k;
    return 0;
}

int stp_children(st_store *st, const rt_uuid *id, rt_uuid **ids, size_t *n)
{
    stp_store *s = (stp_store *)st;
    pthread_mutex_lock(&s->cat_mu);
    size_t k = 0;
    for (stp_conv *c = s->kids[bucket(s->nbuckets, id)]; c != NULL; c = c->knext)
        k += rt_uuid_eq(&c->parent, id) && !c->creating;
    rt_uuid *v = malloc((k ? k : 1) * sizeof(*v));
    k = 0;
    for (stp_conv *c = s->kids[bucket(s->nbuckets, id)]; v != NULL && c != NULL; c = c->knext)
        if (rt_uuid_eq(&c->parent, id) && !c->creating)
            v[k++] = c->id;
    pthread_mutex_unlock(&s->cat_mu);
    if (v == NULL)
        return -ENOMEM;
    qsort(v, k, sizeof(*v), rt_uuid_cmp);
    *ids = v;
    *n = k;
    return 0;
}
