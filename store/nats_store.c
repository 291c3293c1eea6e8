/*
 * nats_store.c - the JetStream backend (nats_store.h): opening and
 * closing, the catalog in the KV bucket parley_convs, meta, and the store's
 * own files. Every call here is blocking (requests to the cluster), as
 * store.h allows for all of them but st_conv_meta, st_conv_id and
 * st_conv_parent, which answer from the handle.
 */
#include "nats_store.h"

#include "runtime/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static stn_store *S(st_store *s)
{
    return (stn_store *)(void *)s;
}

static stn_conv *C(st_conv *c)
{
    return (stn_conv *)(void *)c;
}

/* ---- KV ------------------------------------------------------------------ */

/* kvStore_Get may be answered by a replica that has not applied the
 * latest writes (cnats makes buckets with AllowDirect): another node's
 * conversation just created would look unknown. The leader answers this. */
int stn_kv_get(stn_store *st, const char *bucket, const char *key, char **data, size_t *len)
{
    char stream[64], subject[160];
    snprintf(stream, sizeof stream, "KV_%s", bucket);
    snprintf(subject, sizeof subject, "$KV.%s.%s", bucket, key);
    int64_t until = stn_now_ms() + st->n->deadline_ms;
    natsMsg *m = NULL;
    int r;
    for (int attempt = 0;; attempt++) {
        jsErrCode jerr = 0;
        natsStatus s = js_GetLastMsg(&m, st->n->js, stream, subject, NULL, &jerr);
        r = s == NATS_OK ? 0 : stn_errno(s, jerr);
        if (r == 0 || r == -ENOENT || !stn_retryable(r) || stn_now_ms() >= until)
            break;
        stn_backoff(attempt, until);
    }
    const char *op = NULL;
    if (r == 0 && natsMsgHeader_Get(m, "KV-Operation", &op) == NATS_OK && op != NULL)
        r = -ENOENT; /* DEL or PURGE */
    if (r == 0 && data != NULL) {
        int n = natsMsg_GetDataLength(m);
        *data = malloc((size_t)n + 1);
        if (*data == NULL) {
            r = -ENOMEM;
        } else {
            if (n > 0) /* an empty value's data may be NULL */
                memcpy(*data, natsMsg_GetData(m), (size_t)n);
            (*data)[n] = '\0';
            *len = (size_t)n;
        }
    }
    natsMsg_Destroy(m);
    return r;
}

int stn_kv_put(kvStore *kv, const char *key, const void *data, size_t len)
{
    uint64_t rev;
    natsStatus s = kvStore_Put(&rev, kv, key, data, (int)len);
    return s == NATS_OK ? 0 : stn_errno(s, 0);
}

int stn_kv_delete(kvStore *kv, const char *key)
{
    natsStatus s = kvStore_Delete(kv, key);
    return s == NATS_OK ? 0 : stn_errno(s, 0);
}

int stn_kv_keys(kvStore *kv, const char *filter, int (*fn)(void *ctx, const char *key), void *ctx)
{
    kvWatchOptions wo;
    kvWatchOptions_Init(&wo);
    wo.MetaOnly = true;
    wo.IgnoreDeletes = true;
    kvWatcher *w = NULL;
    natsStatus s = kvStore_Watch(&w, kv, filter, &wo);
    int r = s == NATS_OK ? 0 : stn_errno(s, 0);
    while (r == 0) {
        kvEntry *e = NULL;
        s = kvWatcher_Next(&e, w, 5000);
        if (s != NATS_OK) {
            r = stn_errno(s, 0);
            break;
        }
        if (e == NULL) /* the values there were at the start: all seen */
            break;
        if (kvEntry_Operation(e) == kvOp_Put)
            r = fn(ctx, kvEntry_Key(e));
        kvEntry_Destroy(e);
    }
    kvWatcher_Destroy(w);
    return r;
}

/* Create key in the catalog, which must not have it: -EEXIST if it does. */
static int kv_create(stn_store *st, const char *key, const void *data, size_t len)
{
    uint64_t rev;
    natsStatus s = kvStore_Create(&rev, st->convs, key, data, (int)len);
    if (s == NATS_OK)
        return 0;
    int r = stn_kv_get(st, STN_CONVS, key, NULL, NULL);
    return r == 0 ? -EEXIST : stn_errno(s, 0);
}

static void key_of(char *out, size_t cap, const char *prefix, const rt_uuid *id)
{
    char hex[33];
    rt_uuid_hex(id, hex);
    snprintf(out, cap, "%s%s", prefix, hex);
}

/* ---- handles ------------------------------------------------------------- */

static stn_conv *find_open(stn_store *s, const rt_uuid *id)
{
    for (stn_conv *c = s->open; c != NULL; c = c->next)
        if (rt_uuid_eq(&c->id, id))
            return c;
    return NULL;
}

static void conv_free(stn_conv *c)
{
    if (c->log != NULL) {
        stn_log_free(c->log);
        atomic_fetch_sub(&c->s->nlogs, 1);
    }
    st_nats_log_close(c->writer);
    rt_buf_unref(c->meta);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void stn_conv_release(st_conv *gc)
{
    stn_conv *c = C(gc);
    stn_store *s = c->s;
    pthread_mutex_lock(&s->mu);
    if (--c->refs > 0) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    for (stn_conv **pp = &s->open; *pp != NULL; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    conv_free(c); /* under s->mu: nobody can find it any more */
    pthread_mutex_unlock(&s->mu);
}

/* A catalog entry "<parent or ->\n<meta>" into a handle, held once. If
 * another thread opened the same one meanwhile, that one, held. */
static int conv_open(stn_store *s, const rt_uuid *id, const char *v, size_t len, st_conv **out)
{
    const char *nl = memchr(v, '\n', len);
    rt_uuid parent;
    bool has_parent = nl != NULL && nl - v == 32 && rt_uuid_parse(v, 32, &parent);
    if (nl == NULL || (!has_parent && !(nl - v == 1 && v[0] == '-')))
        return -EBADMSG;
    stn_conv *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->meta = rt_buf_copy(nl + 1, len - (size_t)(nl + 1 - v))) == NULL) {
        free(c);
        return -ENOMEM;
    }
    c->be = &st_nats_backend;
    c->s = s;
    c->id = *id;
    rt_uuid_hex(id, c->hex);
    c->has_parent = has_parent;
    if (has_parent)
        c->parent = parent;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_lock(&s->mu);
    stn_conv *o = find_open(s, id);
    if (o != NULL && !atomic_load(&o->gone)) {
        o->refs++;
        pthread_mutex_unlock(&s->mu);
        rt_buf_unref(c->meta);
        pthread_mutex_destroy(&c->mu);
        free(c);
        *out = (st_conv *)(void *)o;
        return 0;
    }
    c->refs = 1;
    c->next = s->open;
    s->open = c;
    pthread_mutex_unlock(&s->mu);
    *out = (st_conv *)(void *)c;
    return 0;
}

/* The meta replaced since the creation, if it was. */
static int load_meta(stn_conv *c)
{
    char key[40], *d;
    size_t n;
    snprintf(key, sizeof key, "m.%s", c->hex);
    int r = stn_kv_get(c->s, STN_CONVS, key, &d, &n);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    rt_buf *m = rt_buf_take(d, n);
    if (m == NULL) {
        free(d);
        return -ENOMEM;
    }
    rt_buf_unref(c->meta);
    c->meta = m;
    return 0;
}

static int nats_conv_get(st_store *gs, const rt_uuid *id, st_conv **out)
{
    stn_store *s = S(gs);
    *out = NULL;
    pthread_mutex_lock(&s->mu);
    stn_conv *o = find_open(s, id);
    if (o != NULL) {
        bool gone = atomic_load(&o->gone);
        if (!gone)
            o->refs++;
        pthread_mutex_unlock(&s->mu);
        if (gone)
            return -ENOENT;
        *out = (st_conv *)(void *)o;
        return 0;
    }
    pthread_mutex_unlock(&s->mu);
    char key[40], *v;
    size_t len;
    key_of(key, sizeof key, "c.", id);
    int r = stn_kv_get(s, STN_CONVS, key, &v, &len);
    if (r < 0)
        return r;
    r = conv_open(s, id, v, len, out);
    free(v);
    if (r == 0 && (r = load_meta(C(*out))) < 0) {
        stn_conv_release(*out);
        *out = NULL;
    }
    return r;
}

static int nats_conv_create(st_store *gs, const rt_uuid *id, const rt_uuid *parent, rt_buf *meta,
                            st_conv **out)
{
    stn_store *s = S(gs);
    *out = NULL;
    if (meta == NULL)
        return -EINVAL;
    if (parent != NULL && rt_uuid_eq(parent, id))
        return -ELOOP;
    char key[80], hex[33];
    rt_uuid_hex(id, hex);
    if (parent != NULL) {
        char phex[33];
        rt_uuid_hex(parent, phex);
        snprintf(key, sizeof key, "c.%s", phex);
        int r = stn_kv_get(s, STN_CONVS, key, NULL, NULL);
        if (r < 0)
            return r;
        /* before the creation, so that no child is ever missing from
         * st_store_children (a stray one is checked out when listed) */
        snprintf(key, sizeof key, "p.%s.%s", phex, hex);
        if ((r = stn_kv_put(s->convs, key, "", 0)) < 0)
            return r;
    }
    size_t len = 33 + rt_buf_len(meta);
    char *v = malloc(len);
    if (v == NULL)
        return -ENOMEM;
    if (parent != NULL)
        rt_uuid_hex(parent, v);
    else
        v[0] = '-';
    size_t at = parent != NULL ? 32 : 1;
    v[at++] = '\n';
    memcpy(v + at, rt_buf_data(meta), rt_buf_len(meta));
    len = at + rt_buf_len(meta);
    snprintf(key, sizeof key, "c.%s", hex);
    int r = kv_create(s, key, v, len);
    char dkey[40];
    snprintf(dkey, sizeof dkey, "d.%s", hex);
    int d = r == 0 || r == -EEXIST ? stn_kv_get(s, STN_CONVS, dkey, NULL, NULL) : -ENOENT;
    if (d == 0) { /* deleted once: its log is still there */
        if (r == 0)
            stn_kv_delete(s->convs, key);
        r = -EIDRM;
    } else if (r == 0) {
        r = conv_open(s, id, v, len, out);
    } else if (r == -EEXIST) {
        int g = nats_conv_get(gs, id, out);
        r = g == 0 ? -EEXIST : g;
    }
    free(v);
    return r;
}

static const rt_uuid *nats_conv_id(const st_conv *c)
{
    return &((const stn_conv *)(const void *)c)->id;
}

static bool nats_conv_parent(const st_conv *gc, rt_uuid *parent)
{
    const stn_conv *c = (const stn_conv *)(const void *)gc;
    if (c->has_parent)
        *parent = c->parent;
    return c->has_parent;
}

static rt_buf *nats_conv_meta(st_conv *gc)
{
    stn_conv *c = C(gc);
    pthread_mutex_lock(&c->mu);
    rt_buf *m = rt_buf_ref(c->meta);
    pthread_mutex_unlock(&c->mu);
    return m;
}

static int nats_conv_set_meta(st_conv *gc, rt_buf *meta)
{
    stn_conv *c = C(gc);
    if (atomic_load(&c->gone))
        return -ENOENT;
    char key[40];
    snprintf(key, sizeof key, "m.%s", c->hex);
    int r = stn_kv_put(c->s->convs, key, rt_buf_data(meta), rt_buf_len(meta));
    if (r == 0) {
        pthread_mutex_lock(&c->mu);
        rt_buf_unref(c->meta);
        c->meta = rt_buf_ref(meta);
        pthread_mutex_unlock(&c->mu);
    }
    return r;
}

/* ---- listing --------------------------------------------------------------- */

typedef struct idlist {
    rt_uuid *v;
    size_t n, cap;
    size_t skip; /* key prefix length before the id */
} idlist;

static int add_id(void *ctx, const char *key)
{
    idlist *l = ctx;
    rt_uuid id;
    if (strlen(key) != l->skip + 32 || !rt_uuid_parse(key + l->skip, 32, &id))
        return 0; /* not one of ours */
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        rt_uuid *v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = id;
    return 0;
}

static int nats_list(st_store *gs, rt_uuid **ids, size_t *n)
{
    idlist l = {.skip = 2};
    int r = stn_kv_keys(S(gs)->convs, "c.*", add_id, &l);
    if (r < 0) {
        free(l.v);
        return r;
    }
    *ids = l.v;
    *n = l.n;
    return 0;
}

static size_t nats_count(st_store *gs)
{
    rt_uuid *ids = NULL;
    size_t n = 0;
    if (nats_list(gs, &ids, &n) < 0)
        rt_log(RT_LOG_WARN, "store", "nats: cannot count the conversations");
    free(ids);
    return n;
}

static int nats_children(st_store *gs, const rt_uuid *id, rt_uuid **ids, size_t *n)
{
    stn_store *s = S(gs);
    char filter[80];
    key_of(filter, sizeof filter, "p.", id);
    strcat(filter, ".*");
    idlist l = {.skip = 35};
    int r = stn_kv_keys(s->convs, filter, add_id, &l);
    size_t k = 0;
    for (size_t i = 0; r == 0 && i < l.n; i++) { /* only those created, and not deleted */
        char key[40], *v = NULL;
        size_t len;
        key_of(key, sizeof key, "c.", &l.v[i]);
        int g = stn_kv_get(s, STN_CONVS, key, &v, &len);
        rt_uuid p;
        if (g == 0 && len > 32 && rt_uuid_parse(v, 32, &p) && rt_uuid_eq(&p, id))
            l.v[k++] = l.v[i];
        else if (g < 0 && g != -ENOENT)
            r = g;
        free(v);
    }
    if (r < 0) {
        free(l.v);
        return r;
    }
    if (k > 1) /* l.v is NULL when none was found */
        qsort(l.v, k, sizeof(rt_uuid), rt_uuid_cmp);
    *ids = l.v;
    *n = k;
    return 0;
}

/* ---- the store's own files ------------------------------------------------- */

static int nats_put_file(st_store *gs, const char *name, const void *data, size_t len)
{
    if (!st_store_file_name_ok(name))
        return -EINVAL;
    char key[80];
    snprintf(key, sizeof key, "s.%s", name);
    return stn_kv_put(S(gs)->files, key, data, len);
}

static int nats_take_file(st_store *gs, const char *name, char **data, size_t *len)
{
    if (!st_store_file_name_ok(name))
        return -EINVAL;
    char key[80];
    snprintf(key, sizeof key, "s.%s", name);
    int r = stn_kv_get(S(gs), STN_FILES, key, data, len);
    if (r == 0 && (r = stn_kv_delete(S(gs)->files, key)) < 0) {
        free(*data);
        *data = NULL;
    }
    return r;
}

static int nats_workspace(st_store *s, const rt_uuid *id, char *out, size_t cap)
{
    (void)s, (void)id, (void)out, (void)cap;
    return -ENOTSUP; /* a hosted agent's directory is a node's: not decided yet */
}

static size_t nats_open_logs(st_store *gs)
{
    return atomic_load(&S(gs)->nlogs);
}

static size_t nats_max_open_logs(const st_store *gs)
{
    return (size_t)((const stn_store *)(const void *)gs)->o.max_open_logs;
}

/* ---- opening and closing ----------------------------------------------------- */

static void nats_close(st_store *gs)
{
    stn_store *s = S(gs);
    stn_workers_stop(s);
    while (s->open != NULL) { /* none may be held: what a leak left */
        stn_conv *c = s->open;
        s->open = c->next;
        conv_free(c);
    }
    kvStore_Destroy(s->convs);
    kvStore_Destroy(s->files);
    st_nats_close(s->n);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static int nats_open(const st_opts *o, st_store **out, char *err, size_t errlen)
{
    char scratch[256];
    if (err == NULL) {
        err = scratch;
        errlen = sizeof(scratch);
    }
    *out = NULL;
    stn_store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->be = &st_nats_backend;
    s->o = *o;
    if (s->o.max_open_logs == 0)
        s->o.max_open_logs = 1024;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    st_nats_opts no = {.servers = o->dir};
    int r = st_nats_open(&no, &s->n, err, errlen);
    if (r == 0)
        r = stn_bind_bucket(s->n, STN_CONVS, "parley: the conversations and their meta", &s->convs,
                            err, errlen);
    if (r == 0)
        r = stn_bind_bucket(s->n, STN_FILES,
                            "parley: the small files of the store and of each "
                            "conversation",
                            &s->files, err, errlen);
    if (r == 0 && (r = stn_workers_start(s)) < 0)
        snprintf(err, errlen, "cannot start the NATS store's workers: %s", strerror(-r));
    if (r < 0) {
        nats_close((st_store *)(void *)s);
        return r;
    }
    rt_log(RT_LOG_INFO, "store", "opened nats=%s replicas=%d", o->dir, st_nats_replicas(s->n));
    *out = (st_store *)(void *)s;
    return 0;
}

const st_backend st_nats_backend = {
    .name = "nats",
    .open = nats_open,
    .close = nats_close,
    .workspace = nats_workspace,
    .count = nats_count,
    .open_logs = nats_open_logs,
    .max_open_logs = nats_max_open_logs,
    .list = nats_list,
    .children = nats_children,
    .put_file = nats_put_file,
    .take_file = nats_take_file,
    .conv_create = nats_conv_create,
    .conv_get = nats_conv_get,
    .conv_release = stn_conv_release,
    .conv_id = nats_conv_id,
    .conv_parent = nats_conv_parent,
    .conv_meta = nats_conv_meta,
    .conv_set_meta = nats_conv_set_meta,
    .conv_log = stn_conv_log,
    .append = stn_append,
    .conv_put_file = stn_conv_put_file,
    .conv_get_file = stn_conv_get_file,
    .conv_delete = stn_conv_delete,
    .log_count = stn_log_count,
    .log_read = stn_log_read,
    .log_find = stn_log_find,
    .log_find_key = stn_log_find_key,
    .log_memory = stn_log_memory,
    .log_read_only = stn_log_read_only,
};
