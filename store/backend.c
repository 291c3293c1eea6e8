/*
 * backend.c - the calls of store.h and log.h: the backend chosen by the
 * location at st_store_open, then one indirect call through the table of
 * the handle given (backend.h).
 */
#include "backend.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define NATS_SCHEME  "nats://"
#define POOL_SCHEME  "pool:"  /* shared segments (pool.c) */
#define LOCAL_SCHEME "local:" /* a directory per conversation (store.c) */

static bool has_dir(const char *dir, const char *sub)
{
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof(path), "%s/%s", dir, sub);
    return n > 0 && (size_t)n < sizeof(path) && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A plain directory: the store already there, else (a new one) the pool.
 * One holding both asks to be named. */
static const st_backend *dir_backend(const char *dir, char *err, size_t errlen)
{
    bool local = has_dir(dir, "conversations"), pool = has_dir(dir, "pool");
    if (local && pool) {
        if (err != NULL)
            snprintf(err, errlen,
                     "%s holds both a local store (conversations/) and a pool (pool/): "
                     "name one, local:%s or pool:%s",
                     dir, dir, dir);
        return NULL;
    }
    return local ? &st_local_backend : &st_pool_backend;
}

int st_store_open(const st_opts *o, st_store **out, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (o == NULL || o->dir == NULL)
        return -EINVAL;
    if (strncmp(o->dir, NATS_SCHEME, strlen(NATS_SCHEME)) == 0) {
#ifdef PARLEY_HAVE_NATS
        return st_nats_backend.open(o, out, err, errlen);
#else
        if (err != NULL)
            snprintf(err, errlen, "the NATS store is not built (parley was built without libnats)");
        return -ENOTSUP;
#endif
    }
    /* the backends of a directory get it without its scheme */
    st_opts d = *o;
    const st_backend *be;
    if (strncmp(o->dir, POOL_SCHEME, strlen(POOL_SCHEME)) == 0) {
        d.dir += strlen(POOL_SCHEME);
        be = &st_pool_backend;
    } else if (strncmp(o->dir, LOCAL_SCHEME, strlen(LOCAL_SCHEME)) == 0) {
        d.dir += strlen(LOCAL_SCHEME);
        be = &st_local_backend;
    } else if ((be = dir_backend(o->dir, err, errlen)) == NULL) {
        return -EEXIST;
    }
    if (d.dir[0] == '\0') {
        if (err != NULL)
            snprintf(err, errlen, "%s needs a directory (%sDIR)", be->name, o->dir);
        return -EINVAL;
    }
    return be->open(&d, out, err, errlen);
}

const char *st_store_kind(const st_store *s)
{
    return ST_BACKEND(s)->name;
}

void st_store_close(st_store *s)
{
    if (s != NULL)
        ST_BACKEND(s)->close(s);
}

int st_workspace(st_store *s, const rt_uuid *id, char *out, size_t cap)
{
    return ST_BACKEND(s)->workspace(s, id, out, cap);
}

size_t st_store_count(st_store *s)
{
    return ST_BACKEND(s)->count(s);
}

size_t st_store_open_logs(st_store *s)
{
    return ST_BACKEND(s)->open_logs(s);
}

size_t st_store_max_open_logs(const st_store *s)
{
    return ST_BACKEND(s)->max_open_logs(s);
}

size_t st_store_max_event(const st_store *s)
{
    return ST_BACKEND(s)->max_event(s);
}

int st_store_list(st_store *s, rt_uuid **ids, size_t *n)
{
    return ST_BACKEND(s)->list(s, ids, n);
}

int st_store_children(st_store *s, const rt_uuid *id, rt_uuid **ids, size_t *n)
{
    return ST_BACKEND(s)->children(s, id, ids, n);
}

int st_store_put_file(st_store *s, const char *name, const void *data, size_t len)
{
    return ST_BACKEND(s)->put_file(s, name, data, len);
}

int st_store_take_file(st_store *s, const char *name, char **data, size_t *len)
{
    return ST_BACKEND(s)->take_file(s, name, data, len);
}

static bool plain_name(const char *name, size_t n)
{
    return n < 64 && name[0] != '.' && strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-.") == n;
}

bool st_store_file_name_ok(const char *name)
{
    size_t n = strlen(name);
    bool json = (n > 5 && strcmp(name + n - 5, ".json") == 0) ||
                (n > 6 && strcmp(name + n - 6, ".jsonl") == 0);
    return json && plain_name(name, n);
}

bool st_conv_file_name_ok(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && strcmp(name + n - 5, ".json") == 0 && strcmp(name, "meta.json") != 0 &&
           plain_name(name, n);
}

/* ---- conversations ------------------------------------------------------- */

int st_conv_create(st_store *s, const rt_uuid *id, const rt_uuid *parent, rt_buf *meta,
                   st_conv **out)
{
    return ST_BACKEND(s)->conv_create(s, id, parent, meta, out);
}

int st_conv_get(st_store *s, const rt_uuid *id, st_conv **out)
{
    return ST_BACKEND(s)->conv_get(s, id, out);
}

void st_conv_release(st_conv *c)
{
    if (c != NULL)
        ST_BACKEND(c)->conv_release(c);
}

const rt_uuid *st_conv_id(const st_conv *c)
{
    return ST_BACKEND(c)->conv_id(c);
}

bool st_conv_parent(const st_conv *c, rt_uuid *parent)
{
    return ST_BACKEND(c)->conv_parent(c, parent);
}

rt_buf *st_conv_meta(st_conv *c)
{
    return ST_BACKEND(c)->conv_meta(c);
}

int st_conv_set_meta(st_conv *c, rt_buf *meta)
{
    return ST_BACKEND(c)->conv_set_meta(c, meta);
}

int st_conv_log(st_conv *c, st_log **log, st_open_report *rep)
{
    return ST_BACKEND(c)->conv_log(c, log, rep);
}

bool st_store_shared(const st_store *s)
{
    return ST_BACKEND(s)->route != NULL;
}

bool st_conv_writes_here(st_store *s, const rt_uuid *id)
{
    const st_backend *b = ST_BACKEND(s);
    return b->writes_here == NULL || b->writes_here(s, id);
}

void st_conv_note_summary(st_conv *c, const st_summary *sum)
{
    const st_backend *b = ST_BACKEND(c);
    if (b->note_summary != NULL)
        b->note_summary(c, sum);
}

int st_conv_summary(st_store *s, const rt_uuid *id, st_summary *out)
{
    const st_backend *b = ST_BACKEND(s);
    return b->summary != NULL ? b->summary(s, id, out) : -ENOENT;
}

int st_route_of(st_store *s, const rt_uuid *id, st_route *out, char *err, size_t errlen)
{
    const st_backend *b = ST_BACKEND(s);
    memset(out, 0, sizeof(*out));
    if (b->route == NULL)
        return 0;
    return b->route(s, id, out, err, errlen);
}

int st_forward(st_store *s, const st_route *to, const rt_uuid *id, const st_fwd_req *req,
               uint64_t timeout_ms, st_fwd_answer *out, char *err, size_t errlen)
{
    const st_backend *b = ST_BACKEND(s);
    memset(out, 0, sizeof(*out));
    if (b->forward == NULL) {
        snprintf(err, errlen, "this store has one node: nothing to forward to");
        return -ENOTSUP;
    }
    return b->forward(s, to, id, req, timeout_ms, out, err, errlen);
}

int st_store_serve(st_store *s, st_fwd_fn fn, void *ctx)
{
    const st_backend *b = ST_BACKEND(s);
    return b->serve != NULL ? b->serve(s, fn, ctx) : 0;
}

#ifndef PARLEY_HAVE_NATS
/* Only the store shared by nodes (nats_owner.c) makes forwarded requests;
 * built without it, there is never one to answer. */
void st_fwd_reply(st_fwd *f, int status, const void *body, size_t len, const char *ctype,
                  const char *headers)
{
    (void)f;
    (void)status;
    (void)body;
    (void)len;
    (void)ctype;
    (void)headers;
}
#endif

/* A follow's first member is its backend's table, as a handle's. */
int st_conv_follow(st_conv *c, st_follow_fn fn, void *ctx, st_follow **out)
{
    const st_backend *b = ST_BACKEND(c);
    *out = NULL;
    return b->follow != NULL ? b->follow(c, fn, ctx, out) : -ENOTSUP;
}

void st_follow_stop(st_follow *f)
{
    if (f != NULL)
        ST_BACKEND(f)->follow_stop(f);
}

const char *st_store_strerror(const st_store *s, int err, char *buf, size_t cap)
{
    const st_backend *b = ST_BACKEND(s);
    if (b->strerror != NULL)
        return b->strerror(s, err, buf, cap);
    snprintf(buf, cap, "%s", strerror(err < 0 ? -err : err));
    return buf;
}

int st_conv_log_now(st_conv *c, st_log **log)
{
    const st_backend *b = ST_BACKEND(c);
    return b->conv_log_now != NULL ? b->conv_log_now(c, log) : b->conv_log(c, log, NULL);
}

int st_append(st_conv *c, const st_item *items, size_t n, st_done_fn done, void *ctx)
{
    return ST_BACKEND(c)->append(c, items, n, done, ctx);
}

int st_append_at(st_conv *c, uint64_t first, const st_item *items, size_t n, st_done_fn done,
                 void *ctx)
{
    const st_backend *b = ST_BACKEND(c);
    return b->append_at != NULL ? b->append_at(c, first, items, n, done, ctx)
                                : b->append(c, items, n, done, ctx);
}

int st_conv_put_file(st_conv *c, const char *name, rt_buf *data, bool durable, st_done_fn done,
                     void *ctx)
{
    return ST_BACKEND(c)->conv_put_file(c, name, data, durable, done, ctx);
}

int st_conv_get_file(st_conv *c, const char *name, char **data, size_t *len)
{
    return ST_BACKEND(c)->conv_get_file(c, name, data, len);
}

int st_conv_delete(st_conv *c, st_done_fn done, void *ctx)
{
    return ST_BACKEND(c)->conv_delete(c, done, ctx);
}

/* ---- logs: readers ------------------------------------------------------- */

uint64_t st_log_count(const st_log *l)
{
    return ST_BACKEND(l)->log_count(l);
}

int st_log_read(st_log *l, uint64_t first, uint32_t max, st_page **out)
{
    return ST_BACKEND(l)->log_read(l, first, max, out);
}

int st_log_find(st_log *l, const void *id, size_t idlen, uint64_t *index)
{
    return ST_BACKEND(l)->log_find(l, id, idlen, index);
}

int st_log_find_key(st_log *l, const void *key, size_t keylen, uint64_t *index)
{
    return ST_BACKEND(l)->log_find_key(l, key, keylen, index);
}

int st_log_read_now(st_log *l, uint64_t first, uint32_t max, st_page **out)
{
    return ST_BACKEND(l)->log_read_now(l, first, max, out);
}

int st_log_find_now(st_log *l, const void *id, size_t idlen, uint64_t *index)
{
    return ST_BACKEND(l)->log_find_now(l, id, idlen, index);
}

bool st_log_may_wait(const st_log *l)
{
    return ST_BACKEND(l)->readers_wait;
}

int st_log_find_key_now(st_log *l, const void *key, size_t keylen, uint64_t *index)
{
    const st_backend *b = ST_BACKEND(l);
    return b->log_find_key_now != NULL ? b->log_find_key_now(l, key, keylen, index)
                                       : b->log_find_key(l, key, keylen, index);
}

static int check(st_log *l, bool key, const void *v, size_t len, uint64_t upto, uint64_t *index)
{
    const st_backend *b = ST_BACKEND(l);
    if (b->log_check != NULL)
        return b->log_check(l, key, v, len, upto, index);
    return key ? st_log_find_key_now(l, v, len, index) : b->log_find_now(l, v, len, index);
}

int st_log_check(st_log *l, const void *id, size_t idlen, uint64_t upto, uint64_t *index)
{
    return check(l, false, id, idlen, upto, index);
}

int st_log_check_key(st_log *l, const void *key, size_t keylen, uint64_t upto, uint64_t *index)
{
    return check(l, true, key, keylen, upto, index);
}

size_t st_log_memory(const st_log *l)
{
    return ST_BACKEND(l)->log_memory(l);
}

bool st_log_read_only(const st_log *l)
{
    return ST_BACKEND(l)->log_read_only(l);
}
