/*
 * catalog.c - the conversations of a store: a hash table from id to
 * st_conv, loaded at open from the meta.json files alone.
 *
 * A conversation directory appears atomically: it is built as `.<hex>.tmp`
 * (meta.json written inside) and renamed into place; leftovers are removed
 * at load. Under `full` durability a creation is a CREATE record in the
 * journal's group commit (so creations cost no fsync of their own) and the
 * files are written unsynced meanwhile: after a crash the directory may
 * be missing or its meta.json unfinished, and the journal's replay makes
 * it again; one whose creation was never acknowledged (no record) goes.
 * Otherwise the files are synced before the creation returns.
 * Logs open lazily under the conversation's own lock, and close again when
 * unused for the idle TTL (the flusher calls st_catalog_close_idle).
 *
 * A conversation made with a parent has a file `parent` (its 32 hex
 * digits), written with meta.json before the rename. Children are found
 * through a second table hashed by the parent's id, so listing them costs
 * what they are, and a deleted parent's children keep its id (orphans, as
 * upstream: nothing cascades).
 */
#include "store_impl.h"

#include "backend.h"
#include "dirfiles.h"
#include "io.h"
#include "record.h"
#include "req.h"
#include "runtime/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { META_MAX = 16 << 20 };

static size_t bucket(const st_store *s, const rt_uuid *id)
{
    uint64_t h;
    memcpy(&h, id->b, sizeof(h)); /* random UUIDs: their bytes are the hash */
    return (size_t)((h ^ (h >> 29)) % s->nbuckets);
}

static st_conv *lookup(st_store *s, const rt_uuid *id)
{
    for (st_conv *c = s->buckets[bucket(s, id)]; c != NULL; c = c->next)
        if (rt_uuid_eq(&c->id, id))
            return c;
    return NULL;
}

static void link_kid(st_store *s, st_conv *c)
{
    size_t k = bucket(s, &c->parent);
    c->knext = s->kids[k];
    s->kids[k] = c;
}

static int insert(st_store *s, st_conv *c)
{
    if (s->count + 1 > s->nbuckets) { /* keep chains short: grow at load 1 */
        size_t n = s->nbuckets * 2;
        st_conv **b = calloc(n, sizeof(*b)), **kb = calloc(n, sizeof(*kb));
        if (b == NULL || kb == NULL) {
            free(b);
            free(kb);
            return -ENOMEM;
        }
        st_conv **old = s->buckets;
        size_t oldn = s->nbuckets;
        free(s->kids);
        s->buckets = b;
        s->kids = kb;
        s->nbuckets = n;
        for (size_t i = 0; i < oldn; i++) {
            for (st_conv *x = old[i], *next; x != NULL; x = next) {
                next = x->next;
                size_t k = bucket(s, &x->id);
                x->next = b[k];
                b[k] = x;
                if (x->has_parent)
                    link_kid(s, x);
            }
        }
        free(old);
    }
    size_t k = bucket(s, &c->id);
    c->next = s->buckets[k];
    s->buckets[k] = c;
    if (c->has_parent)
        link_kid(s, c);
    s->count++;
    return 0;
}

static void unlink_conv(st_store *s, st_conv *c)
{
    if (c->has_parent)
        for (st_conv **pp = &s->kids[bucket(s, &c->parent)]; *pp != NULL; pp = &(*pp)->knext)
            if (*pp == c) {
                *pp = c->knext;
                break;
            }
    for (st_conv **pp = &s->buckets[bucket(s, &c->id)]; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            s->count--;
            return;
        }
    }
}

static st_conv *conv_new(st_store *s, const rt_uuid *id, rt_buf *meta)
{
    st_conv *c = calloc(1, sizeof(*c));
    char hex[33];
    rt_uuid_hex(id, hex);
    size_t len = strlen(s->conv_dir) + 34;
    if (c == NULL || (c->dir = malloc(len)) == NULL) {
        free(c);
        return NULL;
    }
    snprintf(c->dir, len, "%s/%s", s->conv_dir, hex);
    c->be = &st_local_backend;
    c->s = s;
    c->id = *id;
    c->meta = meta;
    pthread_mutex_init(&c->mu, NULL);
    atomic_init(&c->refs, 0);
    atomic_init(&c->used, st_now_ms());
    return c;
}

/* Close c's log (c->mu held, or c unreachable), counting it. */
static int close_log(st_conv *c)
{
    if (c->log == NULL)
        return 0;
    int r = st_log_close(c->log);
    c->log = NULL;
    atomic_fetch_sub(&c->s->open_logs, 1);
    return r;
}

static int conv_free(st_conv *c)
{
    int r = close_log(c);
    rt_buf_unref(c->meta);
    pthread_mutex_destroy(&c->mu);
    free(c->dir);
    free(c);
    return r;
}

/* A meta.json a crash did not cut short: a JSON object, whole. */
static bool meta_whole(const char *d, size_t n)
{
    size_t a = 0;
    while (a < n && (d[a] == ' ' || d[a] == '\n' || d[a] == '\t' || d[a] == '\r'))
        a++;
    while (n > a && (d[n - 1] == ' ' || d[n - 1] == '\n' || d[n - 1] == '\t' || d[n - 1] == '\r'))
        n--;
    return n - a >= 2 && d[a] == '{' && d[n - 1] == '}' && memchr(d + a, '\0', n - a) == NULL;
}

static void free_data(void *data, void *ctx)
{
    (void)ctx;
    free(data);
}

/* The file `parent` is written before the directory appears, so it is
 * whole or absent; anything else is said and ignored (top-level). */
static void read_parent(st_conv *c)
{
    char path[4096], *data;
    size_t n;
    snprintf(path, sizeof(path), "%s/parent", c->dir);
    int r = st_read_file(path, 64, &data, &n);
    if (r == -ENOENT)
        return;
    c->has_parent = r == 0 && n == 32 && rt_uuid_parse(data, n, &c->parent);
    if (!c->has_parent)
        rt_log(RT_LOG_WARN, "store", "%s: ignoring an unreadable parent file", c->dir);
    if (r == 0)
        free(data);
}

int st_catalog_load(st_store *s, char *err, size_t errlen)
{
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    s->kids = calloc(s->nbuckets, sizeof(*s->kids));
    if (s->buckets == NULL || s->kids == NULL)
        return -ENOMEM;
    DIR *d = opendir(s->conv_dir);
    if (d == NULL) {
        snprintf(err, errlen, "cannot read %s: %s", s->conv_dir, strerror(errno));
        return -errno;
    }
    struct dirent *e;
    int r = 0;
    while (r == 0 && (e = readdir(d)) != NULL) {
        rt_uuid id;
        char path[4096];
        const char *name = e->d_name;
        size_t len = strlen(name);
        if ((name[0] == '.' && len > 5 && strcmp(name + len - 4, ".tmp") == 0) ||
            (len > 8 && strcmp(name + len - 8, ".deleted") == 0)) {
            snprintf(path, sizeof(path), "%s/%s", s->conv_dir, name);
            st_rm_tree(path); /* a creation or a deletion that a crash interrupted */
            continue;
        }
        if (len != 32 || !rt_uuid_parse(name, len, &id))
            continue;
        snprintf(path, sizeof(path), "%s/%s/meta.json", s->conv_dir, name);
        char *data;
        size_t n;
        int mr = st_read_file(path, META_MAX, &data, &n);
        if (mr == 0 && !meta_whole(data, n)) {
            free(data);
            mr = -EBADMSG;
        }
        if (mr == -EBADMSG || mr == -ENOENT) { /* the journal may make it again */
            snprintf(path, sizeof(path), "%s/%s", s->conv_dir, name);
            char **u = realloc(s->unfinished, (s->nunfinished + 1) * sizeof(*u));
            if (u == NULL || (u[s->nunfinished] = strdup(path)) == NULL) {
                if (u != NULL)
                    s->unfinished = u;
                r = -ENOMEM;
                break;
            }
            s->unfinished = u;
            s->nunfinished++;
            continue;
        }
        if (mr < 0) {
            rt_log(RT_LOG_WARN, "store", "skipping conversation %s: cannot read meta.json: %s",
                   name, strerror(-mr));
            continue;
        }
        rt_buf *meta = rt_buf_wrap(data, n, free_data, NULL);
        st_conv *c = meta != NULL ? conv_new(s, &id, meta) : NULL;
        if (c != NULL)
            read_parent(c);
        if (c == NULL || (r = insert(s, c)) < 0) {
            if (c != NULL)
                conv_free(c);
            else if (meta != NULL)
                rt_buf_unref(meta);
            else
                free(data);
            r = -ENOMEM;
        }
    }
    closedir(d);
    if (r < 0)
        snprintf(err, errlen, "cannot load the catalog: %s", strerror(-r));
    return r;
}

int st_catalog_free(st_store *s)
{
    int r = 0;
    for (size_t i = 0; s->buckets != NULL && i < s->nbuckets; i++) {
        for (st_conv *c = s->buckets[i], *next; c != NULL; c = next) {
            next = c->next;
            int cr = conv_free(c);
            if (cr < 0 && r == 0)
                r = cr;
        }
    }
    s->idle_head = s->idle_tail = NULL;
    free(s->buckets);
    free(s->kids);
    for (size_t i = 0; i < s->nunfinished; i++)
        free(s->unfinished[i]);
    free(s->unfinished);
    s->unfinished = NULL;
    s->nunfinished = 0;
    s->buckets = NULL;
    s->kids = NULL;
    return r;
}

static void idle_unlink(st_store *s, st_conv *c)
{
    if (!c->in_idle)
        return;
    *(c->iprev ? &c->iprev->inext : &s->idle_head) = c->inext;
    *(c->inext ? &c->inext->iprev : &s->idle_tail) = c->iprev;
    c->inext = c->iprev = NULL;
    c->in_idle = false;
}

/* Too many logs open: the flusher closes unheld ones now (asked once
 * until it has). */
static void crowded(st_store *s)
{
    if (atomic_exchange(&s->f_pressure, true))
        return;
    pthread_mutex_lock(&s->f_mu);
    pthread_cond_signal(&s->f_cv);
    pthread_mutex_unlock(&s->f_mu);
}

/* c was just let go by its last holder: to the idle list's end (idle_mu
 * held). */
static void idle_link(st_store *s, st_conv *c)
{
    idle_unlink(s, c);
    c->iprev = s->idle_tail;
    *(s->idle_tail ? &s->idle_tail->inext : &s->idle_head) = c;
    s->idle_tail = c;
    c->in_idle = true;
}

/* Drop a reference. The last one goes under idle_mu, so that a deletion's
 * free cannot come between letting c go and listing it idle: a deleted c
 * (out of the catalog: nobody new gets it) is freed, any other listed idle
 * if `idle`. */
static void unhold(st_store *s, st_conv *c, bool idle)
{
    pthread_mutex_lock(&s->idle_mu);
    if (atomic_fetch_sub(&c->refs, 1) != 1) {
        pthread_mutex_unlock(&s->idle_mu);
        return;
    }
    bool gone = atomic_load(&c->gone);
    if (gone || !idle)
        idle_unlink(s, c);
    else
        idle_link(s, c);
    pthread_mutex_unlock(&s->idle_mu);
    if (gone)
        conv_free(c);
}

void st_catalog_close_idle(st_store *s, uint64_t now, uint64_t ttl, bool crowded)
{
    size_t closed = 0, low = (size_t)(s->o.max_open_logs / 4 * 3);
    for (;;) {
        pthread_mutex_lock(&s->idle_mu);
        st_conv *c = s->idle_head;
        if (c == NULL ||
            (crowded ? atomic_load(&s->open_logs) <= low : now - atomic_load(&c->used) < ttl)) {
            pthread_mutex_unlock(&s->idle_mu);
            break;
        }
        idle_unlink(s, c);
        atomic_fetch_add(&c->refs, 1); /* under idle_mu: a deletion's free waits for it */
        pthread_mutex_unlock(&s->idle_mu);
        pthread_mutex_lock(&c->mu);
        /* ours the only hold: whoever gets it now opens the log again */
        if (atomic_load(&c->refs) == 1 && c->log != NULL) {
            int r = close_log(c);
            closed++;
            if (r < 0) /* its journal records stay until a flush succeeds */
                rt_log(RT_LOG_ERROR, "store", "closing idle log %s: %s", c->dir, strerror(-r));
        }
        pthread_mutex_unlock(&c->mu);
        unhold(s, c, false);
    }
    /* the indexes freed are scattered through the heap: give their pages
     * back, or the process keeps the memory of its busiest hour (not when
     * crowded: that comes often, and the heap is in use then) */
    if (closed > 0 && !crowded)
        malloc_trim(0);
}

static void hold(st_conv *c)
{
    atomic_fetch_add(&c->refs, 1);
}

int stl_conv_get(st_store *s, const rt_uuid *id, st_conv **out)
{
    pthread_mutex_lock(&s->cat_mu);
    st_conv *c = lookup(s, id);
    if (c != NULL && c->creating)
        c = NULL;
    if (c != NULL)
        hold(c);
    pthread_mutex_unlock(&s->cat_mu);
    *out = c;
    return c != NULL ? 0 : -ENOENT;
}

void stl_conv_release(st_conv *c)
{
    if (c == NULL)
        return;
    atomic_store(&c->used, st_now_ms());
    st_store *s = c->s;
    unhold(s, c, true);
    if (atomic_load(&s->open_logs) > s->o.max_open_logs)
        crowded(s);
}

const rt_uuid *stl_conv_id(const st_conv *c)
{
    return &c->id;
}

bool stl_conv_parent(const st_conv *c, rt_uuid *parent)
{
    if (c->has_parent)
        *parent = c->parent;
    return c->has_parent;
}

/* Write a small file plainly: the directory it is in is renamed into
 * place afterwards, which is what makes it appear whole. */
static int write_plain(const char *dir, const char *name, const void *data, size_t len,
                       bool durable)
{
    if (durable)
        return st_write_file_atomic(dir, name, data, len);
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    struct iovec iov = {(void *)data, len};
    int r = st_write_all(fd, &iov, 1, 0);
    close(fd);
    return r;
}

int st_conv_make_files(st_conv *c, bool durable)
{
    st_store *s = c->s;
    char hex[33], tmp[4096];
    rt_uuid_hex(&c->id, hex);
    struct stat st;
    bool there = stat(c->dir, &st) == 0; /* replay: a creation a crash cut short */
    if (!there)
        snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", s->conv_dir, hex);
    else
        snprintf(tmp, sizeof(tmp), "%s", c->dir);
    int r = there || mkdir(tmp, 0755) == 0 ? 0 : -errno;
    if (r == 0 && c->has_parent) {
        char phex[33];
        rt_uuid_hex(&c->parent, phex);
        r = write_plain(tmp, "parent", phex, 32, durable);
    }
    if (r == 0)
        r = write_plain(tmp, "meta.json", rt_buf_data(c->meta), rt_buf_len(c->meta), durable);
    if (r == 0 && !there && rename(tmp, c->dir) != 0)
        r = -errno;
    if (r == 0 && durable)
        r = st_fsync(s->conv_dir_fd);
    if (r < 0 && !there)
        st_rm_tree(tmp);
    return r;
}

/* Under `full`: the committer writes its CREATE record and files. */
static int create_journaled(st_conv *c)
{
    st_waiter w;
    st_waiter_init(&w);
    int r = st_commit_create(c, st_waiter_done, &w);
    if (r < 0) /* never queued: nothing else answers */
        st_waiter_done(&w, r, 0);
    return st_waiter_wait(&w);
}

int stl_conv_create(st_store *s, const rt_uuid *id, const rt_uuid *parent, rt_buf *meta,
                    st_conv **out)
{
    *out = NULL;
    pthread_mutex_lock(&s->cat_mu);
    st_conv *c;
    /* the same id being created: its outcome decides (taken, or free again) */
    while ((c = lookup(s, id)) != NULL && c->creating)
        pthread_cond_wait(&s->created_cv, &s->cat_mu);
    if (c != NULL)
        hold(c);
    int r = c != NULL                                                  ? -EEXIST
            : parent == NULL                                           ? 0
            : rt_uuid_eq(parent, id)                                   ? -ELOOP
            : lookup(s, parent) == NULL || lookup(s, parent)->creating ? -ENOENT
                                                                       : 0;
    if (r < 0) { /* the parent stays in the catalog while the lock is held */
        pthread_mutex_unlock(&s->cat_mu);
        *out = c;
        return r;
    }
    /* in the catalog at once, so that the id is taken, but invisible
     * until its creation is durable */
    c = conv_new(s, id, rt_buf_ref(meta));
    r = c != NULL ? 0 : -ENOMEM;
    if (r == 0 && parent != NULL) {
        c->has_parent = true;
        c->parent = *parent;
    }
    if (r == 0 && (r = insert(s, c)) == 0) {
        c->creating = true;
        s->ncreating++;
        hold(c);
    }
    pthread_mutex_unlock(&s->cat_mu);
    if (r < 0) {
        if (c != NULL)
            conv_free(c);
        return r;
    }
    r = s->o.durability == ST_FULL ? create_journaled(c) : st_conv_make_files(c, true);
    pthread_mutex_lock(&s->cat_mu);
    c->creating = false;
    s->ncreating--;
    if (r < 0)
        unlink_conv(s, c);
    pthread_cond_broadcast(&s->created_cv);
    pthread_mutex_unlock(&s->cat_mu);
    if (r < 0) { /* a create of the same id meanwhile may hold it: the last frees it */
        atomic_store(&c->gone, true);
        stl_conv_release(c);
        return r;
    }
    *out = c;
    return 0;
}

void st_conv_unmake_files(st_conv *c)
{
    st_rm_tree(c->dir);
}

int st_catalog_replay_create(st_store *s, const rt_uuid *id, const uint8_t *parent_hex,
                             size_t parent_len, const uint8_t *meta, size_t len, bool *made)
{
    *made = false;
    pthread_mutex_lock(&s->cat_mu);
    bool have = lookup(s, id) != NULL;
    pthread_mutex_unlock(&s->cat_mu);
    if (have)
        return 0;
    char *copy = malloc(len ? len : 1);
    rt_buf *m = copy != NULL ? rt_buf_wrap(copy, len, free_data, NULL) : NULL;
    if (m == NULL) {
        free(copy);
        return -ENOMEM;
    }
    memcpy(copy, meta, len);
    st_conv *c = conv_new(s, id, m);
    if (c == NULL) {
        rt_buf_unref(m);
        return -ENOMEM;
    }
    if (parent_len == 32)
        c->has_parent = rt_uuid_parse((const char *)parent_hex, 32, &c->parent);
    int r = st_conv_make_files(c, true);
    if (r == 0) {
        pthread_mutex_lock(&s->cat_mu);
        r = insert(s, c);
        pthread_mutex_unlock(&s->cat_mu);
    }
    if (r < 0) {
        conv_free(c);
        return r;
    }
    *made = true;
    return 0;
}

/* Whether a conversation directory's log has any record: a segment
 * longer than its header. */
static bool holds_events(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno != ENOENT; /* when unsure, keep it */
    bool any = false;
    struct dirent *e;
    while (!any && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        struct stat st;
        char path[4400];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        any = n > 4 && strcmp(e->d_name + n - 4, ".seg") == 0 &&
              (stat(path, &st) != 0 || st.st_size > ST_FILE_HDR);
    }
    closedir(d);
    return any;
}

void st_catalog_sweep(st_store *s)
{
    for (size_t i = 0; i < s->nunfinished; i++) {
        const char *dir = s->unfinished[i];
        rt_uuid id;
        const char *hex = strrchr(dir, '/') + 1;
        pthread_mutex_lock(&s->cat_mu);
        bool made = rt_uuid_parse(hex, strlen(hex), &id) && lookup(s, &id) != NULL;
        pthread_mutex_unlock(&s->cat_mu);
        if (!made && holds_events(dir)) { /* not a creation cut short: keep what it has */
            rt_log(RT_LOG_ERROR, "store",
                   "%s has events but no readable meta.json: kept, not loaded (restore its "
                   "meta.json to see it again)",
                   dir);
        } else if (!made) { /* never acknowledged: no record made it again */
            rt_log(RT_LOG_WARN, "store", "removing %s: a creation a crash interrupted", dir);
            st_rm_tree(dir);
        }
        free(s->unfinished[i]);
    }
    free(s->unfinished);
    s->unfinished = NULL;
    s->nunfinished = 0;
}

rt_buf *stl_conv_meta(st_conv *c)
{
    pthread_mutex_lock(&c->mu);
    rt_buf *m = rt_buf_ref(c->meta);
    pthread_mutex_unlock(&c->mu);
    return m;
}

int stl_conv_set_meta(st_conv *c, rt_buf *meta)
{
    pthread_mutex_lock(&c->mu);
    int r = atomic_load(&c->gone)
                ? -ENOENT
                : st_write_file_atomic(c->dir, "meta.json", rt_buf_data(meta), rt_buf_len(meta));
    if (r == 0) {
        rt_buf_unref(c->meta);
        c->meta = rt_buf_ref(meta);
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

int stl_conv_log(st_conv *c, st_log **log, st_open_report *rep)
{
    st_store *s = c->s;
    if (atomic_load(&s->open_logs) >= s->hard_open_logs)
        st_catalog_close_idle(s, st_now_ms(), 0, true); /* before giving up: unheld ones */
    pthread_mutex_lock(&c->mu);
    int r = 0;
    if (atomic_load(&c->gone)) {
        r = -ENOENT; /* never recreate the directory of a deleted conversation */
    } else if (c->log == NULL && atomic_load(&c->s->open_logs) >= c->s->hard_open_logs) {
        r = -EMFILE; /* the rest of the descriptors are for the store and the sockets */
        crowded(c->s);
    } else if (c->log == NULL) {
        st_log_opts o = {.segment_bytes = c->s->o.segment_bytes,
                         .store_locked = true,
                         .journaled = c->s->o.durability == ST_FULL};
        st_open_report local;
        st_open_report *rp = rep != NULL ? rep : &local;
        r = st_log_open(c->dir, &o, &c->log, rp);
        if (r == 0)
            atomic_fetch_add(&c->s->open_logs, 1);
        if (rp->detail[0] != '\0')
            rt_log(r == 0 && !rp->corrupt ? RT_LOG_INFO : RT_LOG_ERROR, "store", "%s", rp->detail);
    } else if (rep != NULL) {
        memset(rep, 0, sizeof(*rep));
        rep->count = st_log_count(c->log);
    }
    *log = c->log;
    pthread_mutex_unlock(&c->mu);
    return r;
}

int stl_conv_reopen_log(st_conv *c, st_log **log)
{
    pthread_mutex_lock(&c->mu);
    int r = close_log(c);
    pthread_mutex_unlock(&c->mu);
    return r < 0 ? r : stl_conv_log(c, log, NULL);
}

size_t stl_store_count(st_store *s)
{
    pthread_mutex_lock(&s->cat_mu);
    size_t n = s->count - s->ncreating;
    pthread_mutex_unlock(&s->cat_mu);
    return n;
}

int stl_store_list(st_store *s, rt_uuid **ids, size_t *n)
{
    pthread_mutex_lock(&s->cat_mu);
    rt_uuid *v = malloc((s->count ? s->count : 1) * sizeof(*v));
    size_t k = 0;
    for (size_t i = 0; v != NULL && i < s->nbuckets; i++)
        for (st_conv *c = s->buckets[i]; c != NULL; c = c->next)
            if (!c->creating)
                v[k++] = c->id;
    pthread_mutex_unlock(&s->cat_mu);
    if (v == NULL)
        return -ENOMEM;
    *ids = v;
    *n = k;
    return 0;
}

int stl_store_children(st_store *s, const rt_uuid *id, rt_uuid **ids, size_t *n)
{
    size_t k = 0, cap = 0;
    rt_uuid *v = NULL;
    int r = 0;
    pthread_mutex_lock(&s->cat_mu);
    for (st_conv *c = s->kids[bucket(s, id)]; c != NULL && r == 0; c = c->knext) {
        if (!rt_uuid_eq(&c->parent, id) || c->creating)
            continue;
        if (k == cap) {
            rt_uuid *nv = realloc(v, (cap = cap ? cap * 2 : 4) * sizeof(*v));
            if (nv == NULL)
                r = -ENOMEM;
            else
                v = nv;
        }
        if (r == 0)
            v[k++] = c->id;
    }
    pthread_mutex_unlock(&s->cat_mu);
    if (r < 0) {
        free(v);
        return r;
    }
    if (k > 1)
        qsort(v, k, sizeof(*v), rt_uuid_cmp);
    *ids = v;
    *n = k;
    return 0;
}

/* Out of the catalog (so nobody new gets it), then off the disk. Runs on
 * the committer thread after the journal no longer holds the conversation's
 * records. */
int st_conv_remove_files(st_conv *c)
{
    st_store *s = c->s;
    pthread_mutex_lock(&s->cat_mu);
    unlink_conv(s, c);
    pthread_mutex_unlock(&s->cat_mu);
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->gone, true);
    close_log(c);
    pthread_mutex_unlock(&c->mu);
    char tomb[4096];
    snprintf(tomb, sizeof(tomb), "%s.deleted", c->dir);
    /* one rename makes it gone for a reopen, however the removal ends */
    int r = rename(c->dir, tomb) != 0 ? -errno : st_fsync(s->conv_dir_fd);
    if (r == 0)
        st_rm_tree(tomb);
    st_dir_remove_workspace(s->dir, &c->id);
    return r;
}
