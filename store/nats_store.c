/*
 * nats_store.c - the JetStream backend (nats_store.h): opening and
 * closing, the catalog in the KV bucket parley_convs, meta, and the store's
 * own files. Every call here is blocking (requests to the cluster), as
 * store.h allows for all of them but st_conv_meta, st_conv_id and
 * st_conv_parent, which answer from the handle.
 */
#include "nats_store.h"

#include "runtime/log.h"
#include "dirfiles.h"

#include <ctype.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    return stn_kv_get_rev(st, bucket, key, data, len, NULL);
}

int stn_kv_get_rev(stn_store *st, const char *bucket, const char *key, char **data, size_t *len,
                   uint64_t *rev)
{
    char stream[64], subject[160];
    snprintf(stream, sizeof stream, "KV_%s", bucket);
    snprintf(subject, sizeof subject, "$KV.%s.%s", bucket, key);
    int64_t until = stn_now_ms() + st->n->deadline_ms;
    natsMsg *m = NULL;
    int r;
    for (int attempt = 0;; attempt++) {
        jsErrCode jerr = 0;
        stn_waits("a catalog read");
        natsStatus s = js_GetLastMsg(&m, st->n->js, stream, subject, NULL, &jerr);
        r = s == NATS_OK ? 0 : stn_errno(s, jerr);
        if (r == 0 || r == -ENOENT || !stn_retryable(r) || stn_now_ms() >= until)
            break;
        stn_backoff(attempt, until);
    }
    const char *op = NULL;
    if (r == 0 && natsMsgHeader_Get(m, "KV-Operation", &op) == NATS_OK && op != NULL)
        r = -ENOENT; /* DEL or PURGE */
    if (r == 0 && rev != NULL)
        *rev = natsMsg_GetSequence(m);
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

int stn_kv_put(kvStore *kv, const char *key, const void *data, size_t len, uint64_t *rev)
{
    uint64_t r;
    stn_waits("a catalog write");
    natsStatus s = kvStore_Put(rev != NULL ? rev : &r, kv, key, data, (int)len);
    return s == NATS_OK ? 0 : stn_errno(s, 0);
}

int stn_kv_delete(kvStore *kv, const char *key)
{
    stn_waits("a catalog delete");
    natsStatus s = kvStore_Delete(kv, key);
    return s == NATS_OK ? 0 : stn_errno(s, 0);
}

int stn_kv_purge(st_nats *n, const char *bucket, const char *filter)
{
    char stream[64], subject[160];
    snprintf(stream, sizeof stream, "KV_%s", bucket);
    snprintf(subject, sizeof subject, "$KV.%s.%s", bucket, filter);
    jsOptions o;
    jsOptions_Init(&o);
    o.Stream.Purge.Subject = subject;
    jsErrCode jerr = 0;
    stn_waits("a catalog purge");
    natsStatus s = js_PurgeStream(n->js, stream, &o, &jerr);
    return s == NATS_OK ? 0 : stn_errno(s, jerr);
}

/* Create key in the catalog, which must not have it: -EEXIST if it does. */
static int kv_create(stn_store *st, const char *key, const void *data, size_t len, uint64_t *rev)
{
    stn_waits("a catalog create");
    natsStatus s = kvStore_Create(rev, st->convs, key, data, (int)len);
    if (s == NATS_OK)
        return 0;
    int r = stn_kv_get(st, STN_CONVS, key, NULL, NULL);
    return r == 0 ? -EEXIST : stn_errno(s, 0);
}

/* ---- handles ------------------------------------------------------------- */

void stn_log_id(const rt_uuid *id, uint64_t gen, rt_uuid *out)
{
    *out = *id;
    for (int half = 0; gen != 0 && half < 2; half++) { /* splitmix64 of gen, then of that */
        uint64_t z = (gen += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        for (int b = 0; b < 8; b++)
            out->b[half * 8 + b] ^= (uint8_t)(z >> (8 * b));
    }
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
    stn_entry *e = stn_catalog_find(s, &c->id);
    if (e != NULL && e->open == c)
        e->open = NULL;
    conv_free(c); /* under s->mu: nobody can find it any more */
    pthread_mutex_unlock(&s->mu);
}

/* A held handle on the live incarnation of entry e (s->mu held): the one
 * open, or a new one. */
static stn_conv *hold(stn_store *s, stn_entry *e)
{
    stn_conv *c = e->open;
    if (c != NULL && c->gen == e->gen && !atomic_load(&c->gone)) {
        c->refs++;
        return c;
    }
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return NULL;
    c->be = &st_nats_backend;
    c->s = s;
    c->id = e->id;
    rt_uuid_hex(&e->id, c->hex);
    c->gen = e->gen;
    stn_log_id(&e->id, e->gen, &c->lid);
    rt_uuid_hex(&c->lid, c->lhex);
    c->has_parent = e->has_parent;
    c->parent = e->parent;
    c->meta = rt_buf_ref(e->meta);
    pthread_mutex_init(&c->mu, NULL);
    c->refs = 1;
    e->open = c; /* one that was gone stays with those who hold it */
    return c;
}

/* From the node's catalog: no request (loop threads call it). */
static int nats_conv_get(st_store *gs, const rt_uuid *id, st_conv **out)
{
    stn_store *s = S(gs);
    *out = NULL;
    pthread_mutex_lock(&s->mu);
    stn_entry *e = stn_catalog_find(s, id);
    stn_conv *c = e != NULL && e->live ? hold(s, e) : NULL;
    pthread_mutex_unlock(&s->mu);
    if (c == NULL)
        return e != NULL && e->live ? -ENOMEM : -ENOENT;
    *out = (st_conv *)(void *)c;
    return 0;
}

static void catalog_key(char *out, size_t cap, const char *hex, uint64_t gen)
{
    if (gen == 0)
        snprintf(out, cap, "c.%s", hex);
    else
        snprintf(out, cap, "c.%s.%llu", hex, (unsigned long long)gen);
}

/* The incarnation a creation makes: the one after the last deleted. */
static int next_gen(stn_store *s, const char *hex, uint64_t *gen)
{
    char key[40], *v;
    size_t len;
    snprintf(key, sizeof key, "d.%s", hex);
    int r = stn_kv_get(s, STN_CONVS, key, &v, &len);
    *gen = 0;
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    *gen = (len > 0 ? strtoull(v, NULL, 10) : 0) + 1;
    free(v);
    return 0;
}

/* The entry of an id created elsewhere that the watch has not brought yet:
 * read and applied (blocking; creation only). */
static void catalog_fetch(stn_store *s, const char *hex, uint64_t gen)
{
    char key[64], *v;
    size_t len;
    uint64_t rev = 0;
    catalog_key(key, sizeof key, hex, gen);
    if (stn_kv_get_rev(s, STN_CONVS, key, &v, &len, &rev) != 0)
        return;
    stn_catalog_apply(s, key, kvOp_Put, v, len, rev);
    free(v);
    snprintf(key, sizeof key, "m.%s", hex);
    if (stn_kv_get_rev(s, STN_CONVS, key, &v, &len, &rev) != 0)
        return;
    stn_catalog_apply(s, key, kvOp_Put, v, len, rev);
    free(v);
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
    if (parent != NULL) { /* from the catalog here, as st_conv_get answers */
        pthread_mutex_lock(&s->mu);
        stn_entry *p = stn_catalog_find(s, parent);
        bool known = p != NULL && p->live;
        pthread_mutex_unlock(&s->mu);
        if (!known)
            return -ENOENT;
    }
    char hex[33];
    rt_uuid_hex(id, hex);
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
    int r = 0;
    uint64_t gen = 0;
    /* a deletion racing this creation can end the incarnation just made:
     * then the next one (a few rounds at most: each needs a deletion) */
    for (int round = 0; round < 8; round++) {
        char key[64];
        uint64_t rev = 0, after;
        if ((r = next_gen(s, hex, &gen)) < 0)
            break;
        catalog_key(key, sizeof key, hex, gen);
        r = kv_create(s, key, v, len, &rev);
        if (r == -EEXIST) {
            catalog_fetch(s, hex, gen);
            break;
        }
        if (r < 0 || (r = next_gen(s, hex, &after)) < 0)
            break;
        if (after <= gen) {
            stn_catalog_apply(s, key, kvOp_Put, v, len, rev);
            break;
        }
        r = -EAGAIN;
    }
    free(v);
    if (r == 0 || r == -EEXIST) {
        int g = nats_conv_get(gs, id, out);
        if (g < 0)
            r = g == -ENOENT ? -EAGAIN : g; /* deleted meanwhile */
    }
    if (r == 0) /* made here: this node owns it (a failure: the first append tries again) */
        stn_claim(*out);
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
    uint64_t rev = 0;
    int r = stn_kv_put(c->s->convs, key, rt_buf_data(meta), rt_buf_len(meta), &rev);
    if (r == 0) /* the handle's too, through the catalog (as another node's) */
        stn_catalog_apply(c->s, key, kvOp_Put, rt_buf_data(meta), rt_buf_len(meta), rev);
    return r;
}

/* ---- listing: from the node's catalog --------------------------------------- */

static int nats_list(st_store *gs, rt_uuid **ids, size_t *n)
{
    return stn_catalog_list(S(gs), ids, n);
}

static size_t nats_count(st_store *gs)
{
    stn_store *s = S(gs);
    pthread_mutex_lock(&s->mu);
    size_t n = s->count;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static int nats_children(st_store *gs, const rt_uuid *id, rt_uuid **ids, size_t *n)
{
    return stn_catalog_children(S(gs), id, ids, n);
}

/* ---- the store's own files ------------------------------------------------- */

static int nats_put_file(st_store *gs, const char *name, const void *data, size_t len)
{
    if (!st_store_file_name_ok(name))
        return -EINVAL;
    char key[80];
    snprintf(key, sizeof key, "s.%s", name);
    return stn_kv_put(S(gs)->files, key, data, len, NULL);
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
    return st_dir_workspace(S(s)->workspaces, id, out, cap);
}

static size_t nats_open_logs(st_store *gs)
{
    return atomic_load(&S(gs)->nlogs);
}

static const char *nats_strerror(const st_store *gs, int err, char *buf, size_t cap)
{
    const stn_store *s = (const stn_store *)(const void *)gs;
    if (stn_retryable(err))
        snprintf(buf, cap, "%s (%s)", stn_what(err), s->n->servers);
    else
        snprintf(buf, cap, "%s", strerror(err < 0 ? -err : err));
    return buf;
}

static size_t nats_max_event(const st_store *gs)
{
    return st_nats_max_event(((const stn_store *)(const void *)gs)->n);
}

static size_t nats_max_open_logs(const st_store *gs)
{
    return (size_t)((const stn_store *)(const void *)gs)->o.max_open_logs;
}

/* ---- opening and closing ----------------------------------------------------- */

static void nats_close(st_store *gs)
{
    stn_store *s = S(gs);
    stn_owner_stop(s);
    stn_workers_stop(s);
    stn_catalog_stop(s);
    for (size_t i = 0; i < s->nbuckets; i++) /* none may be held: what a leak left */
        for (stn_entry *e = s->buckets[i]; e != NULL; e = e->next)
            if (e->open != NULL)
                conv_free(e->open);
    stn_catalog_free(s);
    kvStore_Destroy(s->convs);
    kvStore_Destroy(s->files);
    st_nats_close(s->n);
    stn_owner_free(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->wmu);
    pthread_cond_destroy(&s->wcv);
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
    pthread_mutex_init(&s->wmu, NULL);
    pthread_cond_init(&s->wcv, NULL);
    char node[80];
    if (o->node == NULL) { /* "<hostname>-<pid>", the hostname cut to what a node id allows */
        char host[64] = "parley";
        gethostname(host, sizeof host);
        host[sizeof host - 1] = '\0';
        size_t k = 0;
        for (const char *p = host; *p != '\0' && *p != '.' && k < 40; p++)
            if (isalnum((unsigned char)*p) || *p == '-' || *p == '_')
                node[k++] = *p;
        snprintf(node + k, sizeof node - k, "%s%ld", k > 0 ? "-" : "parley-", (long)getpid());
    } else {
        snprintf(node, sizeof node, "%.79s", o->node);
    }
    s->o.node = NULL; /* the caller's strings are not kept */
    snprintf(s->workspaces, sizeof s->workspaces, "%s",
             o->workspaces != NULL ? o->workspaces : "parley-data");
    st_nats_opts no = {.servers = o->dir,
                       .node = o->node != NULL ? o->node : node,
                       .creds = o->nats_creds,
                       .tls_ca = o->nats_tls_ca,
                       .tls_cert = o->nats_tls_cert,
                       .tls_key = o->nats_tls_key,
                       .shards = o->nats_shards};
    int r = st_nats_open(&no, &s->n, err, errlen);
    if (r == 0)
        r = stn_bind_bucket(s->n, STN_CONVS, "parley: the conversations and their meta", &s->convs,
                            err, errlen);
    if (r == 0)
        r = stn_bind_bucket(s->n, STN_FILES,
                            "parley: the small files of the store and of each "
                            "conversation",
                            &s->files, err, errlen);
    if (r == 0)
        r = stn_catalog_start(s, err, errlen);
    if (r == 0 && (r = stn_workers_start(s)) < 0)
        snprintf(err, errlen, "cannot start the NATS store's workers: %s", strerror(-r));
    if (r == 0)
        r = stn_owner_start(s, err, errlen);
    if (r < 0) {
        nats_close((st_store *)(void *)s);
        return r;
    }
    rt_log(RT_LOG_INFO, "store", "opened nats=%s node=%s replicas=%d shards=%u workspaces=%s",
           o->dir, no.node, st_nats_replicas(s->n), st_nats_shards(s->n), s->workspaces);
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
    .max_event = nats_max_event,
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
    .readers_wait = true,
    .strerror = nats_strerror,
    .conv_log = stn_conv_log,
    .conv_log_now = stn_conv_log_now,
    .append = stn_append,
    .append_at = stn_append_at,
    .conv_put_file = stn_conv_put_file,
    .conv_get_file = stn_conv_get_file,
    .conv_delete = stn_conv_delete,
    .log_count = stn_log_count,
    .log_read = stn_log_read,
    .log_find = stn_log_find,
    .log_find_key = stn_log_find_key,
    .log_read_now = stn_log_read_now,
    .log_find_now = stn_log_find_now,
    .log_find_key_now = stn_log_find_key_now,
    .log_check = stn_log_check,
    .log_memory = stn_log_memory,
    .log_read_only = stn_log_read_only,
    .writes_here = stn_writes_here,
    .route = stn_route,
    .forward = stn_forward,
    .serve = stn_serve,
    .follow = stn_follow,
    .follow_stop = stn_follow_stop,
    .note_summary = stn_note_summary,
    .summary = stn_summary,
};
