/*
 * nats_rlog.c - the log that st_conv_log hands out in the JetStream backend
 * (nats_store.h): log.h's readers on a st_nats_log of the conversation's
 * own, one call at a time (its mutex), any thread; blocking, as log.h's
 * reads are, unless memory answers (nats_tail.c: the tail, and finds in
 * the log as this node loaded or writes it); the _now readers never
 * block. The count is this node's writer's while it is the writer (no
 * request), else read from the stream leader.
 */
#include "nats_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static stn_log *L(st_log *l)
{
    return (stn_log *)(void *)l;
}

int stn_conv_log(st_conv *gc, st_log **log, st_open_report *rep)
{
    stn_conv *c = (stn_conv *)(void *)gc;
    if (atomic_load(&c->gone))
        return -ENOENT;
    int r = 0;
    pthread_mutex_lock(&c->mu);
    if (c->log == NULL) {
        stn_log *l = calloc(1, sizeof(*l));
        if (l == NULL)
            r = -ENOMEM;
        if (r == 0 && (r = st_nats_log_open(c->s->n, &c->lid, &l->nl)) == 0) {
            l->be = &st_nats_backend;
            l->c = c;
            pthread_mutex_init(&l->mu, NULL);
            pthread_mutex_init(&l->tmu, NULL);
            c->log = l;
            atomic_fetch_add(&c->s->nlogs, 1);
        } else {
            free(l);
        }
    }
    pthread_mutex_unlock(&c->mu);
    /* the first opening loads memory (blocking); once loaded, this and the
     * count cost no request, so loop code may call it as it may the local
     * store's for a log that is open */
    if (r == 0 && (r = stn_tail_load(c->log)) < 0 && rep != NULL)
        snprintf(rep->detail, sizeof(rep->detail), "cannot load its log: %s",
                 st_nats_log_error(c->log->nl));
    if (r < 0)
        return r;
    if (rep != NULL) {
        memset(rep, 0, sizeof(*rep));
        rep->count = stn_tail_count(c->log);
    }
    *log = (st_log *)(void *)c->log;
    return 0;
}

int stn_conv_log_now(st_conv *gc, st_log **log)
{
    stn_conv *c = (stn_conv *)(void *)gc;
    if (atomic_load(&c->gone))
        return -ENOENT;
    pthread_mutex_lock(&c->mu);
    stn_log *l = c->log; /* stays until c is freed */
    pthread_mutex_unlock(&c->mu);
    if (l == NULL || !stn_tail_loaded(l))
        return -EWOULDBLOCK; /* opening it reads the cluster */
    *log = (st_log *)(void *)l;
    return 0;
}

void stn_log_free(stn_log *l)
{
    st_nats_log_close(l->nl);
    stn_tail_free(l);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->tmu);
    free(l);
}

uint64_t stn_log_count(const st_log *gl)
{
    stn_log *l = (stn_log *)(void *)gl; /* its cache changes, not what it reads */
    if (stn_writes(l->c))
        return atomic_load(&l->c->written);
    uint64_t n = 0;
    pthread_mutex_lock(&l->mu);
    int r = st_nats_log_count(l->nl, &n);
    pthread_mutex_unlock(&l->mu);
    if (r < 0)
        return atomic_load(&l->known); /* what is reachable: the last known */
    /* raised only: a notice of more (nats_owner.c) may have come meanwhile,
     * and memory past a lower count would read as the whole log */
    for (uint64_t k = atomic_load(&l->known); k < n;)
        if (atomic_compare_exchange_weak(&l->known, &k, n))
            break;
    /* so that what the conversation then decides is checked from memory
     * (st_log_check), on its loop; if this fails, checks say they would
     * wait, and are asked in the thread pool */
    stn_tail_catch_up(l, n);
    return n;
}

/* Events as a page of log.h: their bytes and ids copied into one buffer. */
int stn_page_of(const stn_ref *v, uint32_t n, st_page **out)
{
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += v[i].len + v[i].idlen;
    if (total > UINT32_MAX)
        return -EMSGSIZE;
    st_page *p = malloc(sizeof(*p) + n * sizeof(st_event_ref));
    rt_buf *b = rt_buf_new(total > 0 ? total : 1);
    if (p == NULL || b == NULL) {
        free(p);
        rt_buf_unref(b);
        return -ENOMEM;
    }
    uint8_t *d = rt_buf_wdata(b);
    uint32_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        p->ev[i] = (st_event_ref){.index = v[i].index,
                                  .off = at,
                                  .len = (uint32_t)v[i].len,
                                  .id_off = at + (uint32_t)v[i].len,
                                  .id_len = v[i].idlen};
        if (v[i].len > 0)
            memcpy(d + at, v[i].data, v[i].len);
        memcpy(d + at + v[i].len, v[i].id, v[i].idlen);
        at += (uint32_t)v[i].len + v[i].idlen;
    }
    p->bytes = b;
    p->n = n;
    *out = p;
    return 0;
}

static int convert(const st_nats_page *np, st_page **out)
{
    stn_ref *v = malloc((np->n ? np->n : 1) * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < np->n; i++) {
        const st_nats_event *e = &np->ev[i];
        v[i] = (stn_ref){e->index, e->data, e->len, e->id, e->idlen};
    }
    int r = stn_page_of(v, np->n, out);
    free(v);
    return r;
}

int stn_log_read(st_log *gl, uint64_t first, uint32_t max, st_page **out)
{
    stn_log *l = L(gl);
    *out = NULL;
    if (max > ST_NATS_READ_MAX)
        max = ST_NATS_READ_MAX;
    int r = stn_tail_read(l, first, max, out);
    if (r != 0)
        return r < 0 ? r : 0;
    st_nats_page *np = NULL;
    pthread_mutex_lock(&l->mu);
    r = st_nats_log_read(l->nl, first, max, &np);
    pthread_mutex_unlock(&l->mu);
    if (r == 0)
        r = convert(np, out);
    st_nats_page_free(np);
    return r;
}

/* From memory when it holds the whole log, or holds a match (which is
 * then kept: the loop's checks find it there); else from the cluster. */
static int find(st_log *gl, bool key, const void *v, size_t len, uint64_t *index)
{
    stn_log *l = L(gl);
    int r = stn_tail_find(l, key, v, len, true, STN_WHOLE, index);
    if (r == -EAGAIN && stn_tail_find(l, key, v, len, true, 0, index) == 0)
        r = 0;
    if (r != -EAGAIN)
        return r;
    pthread_mutex_lock(&l->mu);
    r = key ? st_nats_log_find_key(l->nl, v, len, index) : st_nats_log_find(l->nl, v, len, index);
    pthread_mutex_unlock(&l->mu);
    return r;
}

int stn_log_find(st_log *gl, const void *id, size_t idlen, uint64_t *index)
{
    return find(gl, false, id, idlen, index);
}

int stn_log_find_key(st_log *gl, const void *key, size_t keylen, uint64_t *index)
{
    return find(gl, true, key, keylen, index);
}

int stn_log_read_now(st_log *gl, uint64_t first, uint32_t max, st_page **out)
{
    *out = NULL;
    if (max > ST_NATS_READ_MAX)
        max = ST_NATS_READ_MAX;
    int r = stn_tail_read(L(gl), first, max, out);
    return r < 0 ? r : r == 1 ? 0 : -EWOULDBLOCK;
}

int stn_log_find_now(st_log *gl, const void *id, size_t idlen, uint64_t *index)
{
    int r = stn_tail_find(L(gl), false, id, idlen, false, STN_WHOLE, index);
    return r == -EAGAIN ? -EWOULDBLOCK : r;
}

int stn_log_find_key_now(st_log *gl, const void *key, size_t keylen, uint64_t *index)
{
    int r = stn_tail_find(L(gl), true, key, keylen, false, STN_WHOLE, index);
    return r == -EAGAIN ? -EWOULDBLOCK : r;
}

int stn_log_check(st_log *gl, bool key, const void *v, size_t len, uint64_t upto, uint64_t *index)
{
    int r = stn_tail_find(L(gl), key, v, len, false, upto, index);
    return r == -EAGAIN ? -EWOULDBLOCK : r;
}

size_t stn_log_memory(const st_log *gl)
{
    stn_log *l = (stn_log *)(void *)gl;
    pthread_mutex_lock(&l->mu);
    size_t n = sizeof(*l) + st_nats_log_memory(l->nl);
    pthread_mutex_unlock(&l->mu);
    return n + stn_tail_memory(l);
}

bool stn_log_read_only(const st_log *gl)
{
    (void)gl;
    return false; /* appends go through the writer, wherever it is */
}
