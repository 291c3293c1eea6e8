/*
 * commit.c - the committer: the one thread that writes logs.
 *
 * Appends from any thread queue up; the committer takes everything queued
 * at once (a group), puts each conversation's requests together, and writes
 * them as one write to the conversation's active segment. Under `full` it
 * also writes them, tagged with the conversation's id, to the journal, and
 * one fdatasync of the journal makes the whole group durable. Only then are
 * the logs published (readers see the events) and the requests completed.
 * If any I/O fails, every log the group touched is cut back and every
 * request of the group fails with the error: nothing half-written stays,
 * and the next group starts from the same place.
 *
 * A creation (under `full`) rides in a group too: its CREATE record goes
 * to the journal with the group's appends, and its files are written,
 * unsynced, while the journal syncs.
 *
 * A delete is a barrier: the group before it completes first; then, under
 * `full`, the journal is rotated and everything synced so that no journal
 * file still holds the conversation's records (a later replay must not
 * write them into a new conversation with the same id).
 */
#include "store_impl.h"

#include "backend.h"
#include "io.h"
#include "record.h"
#include "req.h"
#include "runtime/grow.h"
#include "runtime/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The committer's scratch for one group: the journal's iovecs and headers,
 * the conversations written to, and their requests' items put together. */
typedef struct group {
    st_item *items;
    size_t items_cap;
    struct iovec *iov;
    size_t niov, iov_cap;
    uint8_t *hdr;
    size_t hdr_used, hdr_cap;
    st_conv **convs;
    size_t nconvs, conv_cap;
    uint64_t gen;        /* marks the group's conversations; the two groups' never meet */
    st_req *head, *stop; /* the group's requests, [head, stop) */
    int gr;              /* the group's own failure, if any */
    bool journaled;      /* its records are in the journal, from jstart */
    uint64_t jstart;
} group;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    return rt_grow(p, cap, need, elem, 64);
}

/* Queue r (its items' payloads referenced) for c, holding c until done
 * has run; if it cannot be queued, give everything back. */
static int submit(st_req *r, st_conv *c, st_done_fn done, void *ctx)
{
    atomic_fetch_add(&c->refs, 1);
    r->conv = c;
    r->done = done;
    r->ctx = ctx;
    int e = st_reqq_push(&c->s->q, r);
    if (e < 0) {
        atomic_fetch_sub(&c->refs, 1);
        st_req_free(r);
    }
    return e;
}

int stl_append(st_conv *c, const st_item *items, size_t n, st_done_fn done, void *ctx)
{
    if (n == 0 || done == NULL)
        return -EINVAL;
    if (atomic_load(&c->gone))
        return -ENOENT;
    int e;
    st_req *r = st_req_append(items, n, &e);
    return r != NULL ? submit(r, c, done, ctx) : e;
}

int stl_conv_put_file(st_conv *c, const char *name, rt_buf *data, bool durable, st_done_fn done,
                      void *ctx)
{
    if (done == NULL || data == NULL || !st_conv_file_name_ok(name))
        return -EINVAL;
    if (atomic_load(&c->gone))
        return -ENOENT;
    int e;
    st_req *r = st_req_file(name, data, durable, &e);
    return r != NULL ? submit(r, c, done, ctx) : e;
}

int stl_conv_get_file(st_conv *c, const char *name, char **data, size_t *len)
{
    if (!st_conv_file_name_ok(name))
        return -EINVAL;
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", c->dir, name);
    return st_read_file(path, (size_t)64 << 20, data, len);
}

int st_commit_create(st_conv *c, st_done_fn done, void *ctx)
{
    char hex[33];
    if (c->has_parent)
        rt_uuid_hex(&c->parent, hex);
    st_req *r = st_req_one(REQ_CREATE, ST_CREATE_ID, hex, c->has_parent ? 32 : 0, c->meta);
    if (r == NULL)
        return -ENOMEM;
    r->first = ST_CREATE_INDEX;
    return submit(r, c, done, ctx);
}

int stl_conv_delete(st_conv *c, st_done_fn done, void *ctx)
{
    if (done == NULL)
        return -EINVAL;
    st_req *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->kind = REQ_DELETE;
    r->conv = c; /* takes over the caller's reference */
    r->done = done;
    r->ctx = ctx;
    int e = st_reqq_push(&c->s->q, r);
    if (e < 0)
        free(r);
    return e;
}

static void finish(st_req *r)
{
    r->done(r->ctx, r->status, r->first);
    st_conv *c = r->conv;
    st_req_free(r);
    stl_conv_release(c);
}

static void put_file(st_req *r)
{
    const rt_buf *b = r->items[0].payload;
    r->status = atomic_load(&r->conv->gone) ? -ENOENT
                : r->durable
                    ? st_write_file_atomic(r->conv->dir, r->name, rt_buf_data(b), rt_buf_len(b))
                    : st_write_file_replace(r->conv->dir, r->name, rt_buf_data(b), rt_buf_len(b));
    finish(r);
}

/* Journal iovecs for the records of r, which were written at r->first. */
static int journal_records(st_store *s, group *g, const st_req *r)
{
    if (grow((void **)&g->iov, &g->iov_cap, g->niov + 2 * r->n, sizeof(*g->iov)) < 0 ||
        grow((void **)&g->hdr, &g->hdr_cap, g->hdr_used + r->n * ST_REC_HDR_MAX, 1) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < r->n; i++) {
        const st_item *it = &r->items[i];
        uint8_t *h = g->hdr + g->hdr_used;
        size_t hl =
            st_rec_encode(h, r->conv->id.b, s->j.seed, r->first + i, it->id, it->idlen, it->key,
                          it->keylen, rt_buf_data(it->payload), (uint32_t)rt_buf_len(it->payload));
        g->hdr_used += hl;
        /* headers move if hdr grows: store offsets now, pointers later */
        g->iov[g->niov++] = (struct iovec){(void *)(uintptr_t)(h - g->hdr), hl};
        g->iov[g->niov++] =
            (struct iovec){(void *)rt_buf_data(it->payload), rt_buf_len(it->payload)};
    }
    return 0;
}

/* Sort the group's requests by conversation, keeping their order. */
static int gather(group *g, st_req *head, st_req *stop)
{
    g->nconvs = 0;
    g->gen += 2;
    for (st_req *r = head; r != stop; r = r->next) {
        st_conv *c = r->conv;
        r->gnext = NULL;
        if (c->batch == g->gen) {
            c->glast->gnext = r;
            c->glast = r;
            continue;
        }
        if (grow((void **)&g->convs, &g->conv_cap, g->nconvs + 1, sizeof(*g->convs)) < 0)
            return -ENOMEM;
        c->batch = g->gen;
        c->gfirst = c->glast = r;
        g->convs[g->nconvs++] = c;
    }
    return 0;
}

/* The index each request's events will get: consecutive after what the
 * log has, in queue order. Under `full`, also their journal records. */
static int plan_conv(st_store *s, group *g, st_conv *c)
{
    if (c->gfirst->kind == REQ_CREATE) /* alone: nobody appends before it is made */
        return journal_records(s, g, c->gfirst) < 0 ? -ENOMEM : 0;
    st_log *l;
    int e = stl_conv_log(c, &l, NULL);
    uint64_t first = e == 0 ? st_log_next(l) : 0;
    for (st_req *r = c->gfirst; r != NULL; r = r->gnext) {
        r->status = e;
        r->first = first;
        first += r->n;
        if (e == 0 && s->o.durability == ST_FULL && journal_records(s, g, r) < 0)
            return -ENOMEM; /* the group fails */
    }
    return 0;
}

/* All of one conversation's requests in the group, as one write. */
static int write_conv(group *g, st_conv *c)
{
    if (c->gfirst->kind == REQ_CREATE)
        return st_conv_make_files(c, false);
    if (c->gfirst->status != 0)
        return 0; /* its log could not be opened: only its requests fail */
    size_t n = 0;
    for (st_req *r = c->gfirst; r != NULL; r = r->gnext)
        n += r->n;
    int e = grow((void **)&g->items, &g->items_cap, n, sizeof(*g->items));
    size_t k = 0;
    for (st_req *r = c->gfirst; e == 0 && r != NULL; r = r->gnext) {
        memcpy(g->items + k, r->items, r->n * sizeof(*g->items));
        k += r->n;
    }
    uint64_t first;
    if (e == 0)
        e = st_log_write(c->log, g->items, n, &first);
    return e == 0 && first != c->gfirst->first ? -EIO : e;
}

/* A group of appends, [head, stop), goes through three steps. begin: the
 * indexes are planned, the journal records written and their fdatasync
 * begun on the syncer thread. write: the segments are written meanwhile.
 * end: once that fdatasync returns, the logs are published and the
 * requests answered; any I/O failure fails the whole group instead, and
 * the segments are cut back and so is the journal (synced again, so that
 * no replay brings back what was reported as failed).
 *
 * The committer overlaps two groups: once a group's fdatasync has
 * returned, the next group begins (its fdatasync starts at once) before
 * the first is published and answered, so the disk does not wait on the
 * answers. The next group's indexes follow what is written, published or
 * not; it begins only after the previous fdatasync succeeded, and a
 * failed group is cut back before anything is planned after it. */
static void group_begin(st_store *s, group *g, st_req *head, st_req *stop)
{
    bool full = s->o.durability == ST_FULL;
    g->head = head;
    g->stop = stop;
    g->niov = g->hdr_used = 0;
    g->jstart = s->j.size;
    g->journaled = false;
    g->gr = gather(g, head, stop);
    if (g->gr == 0 && full && s->j.broken)
        g->gr = -EIO;
    for (size_t i = 0; g->gr == 0 && i < g->nconvs; i++)
        g->gr = plan_conv(s, g, g->convs[i]);
    if (g->gr == 0 && full && g->niov > 0) {
        for (size_t i = 0; i < g->niov; i += 2) /* offsets into hdr become pointers */
            g->iov[i].iov_base = g->hdr + (uintptr_t)g->iov[i].iov_base;
        g->gr = st_journal_append(s, g->iov, (int)g->niov);
        g->journaled = g->gr == 0;
        if (g->journaled)
            st_journal_sync_begin(s);
    }
}

static void group_write(group *g)
{
    for (size_t i = 0; g->gr == 0 && i < g->nconvs; i++)
        g->gr = write_conv(g, g->convs[i]);
}

/* Wait for the group's fdatasync; if anything failed, cut it all back. */
static void group_settle(st_store *s, group *g)
{
    if (g->journaled) {
        int sr = st_journal_sync_end(s);
        if (g->gr == 0)
            g->gr = sr;
        g->journaled = false;
        if (g->gr < 0)
            st_journal_undo(s, g->jstart);
    }
    if (g->gr == 0)
        return;
    for (size_t i = 0; i < g->nconvs; i++) {
        if (g->convs[i]->gfirst->kind == REQ_CREATE)
            st_conv_unmake_files(g->convs[i]);
        else if (g->convs[i]->log != NULL)
            st_log_rollback(g->convs[i]->log);
    }
    rt_log(RT_LOG_ERROR, "store", "group commit failed, %zu conversations rolled back: %s",
           g->nconvs, strerror(-g->gr));
}

/* Publish a settled group and answer its requests. */
static void group_finish(st_store *s, group *g)
{
    for (size_t i = 0; g->gr == 0 && i < g->nconvs; i++) {
        st_conv *c = g->convs[i];
        if (c->log == NULL) /* it could not be opened: its requests failed */
            continue;
        st_log_publish(c->log);
        if (st_log_unchecked(c->log) >= s->o.checkpoint_records)
            st_log_checkpoint(c->log);
        if (s->o.durability == ST_INTERVAL && !c->dirty) {
            c->dirty = true; /* held until the next interval sync */
            atomic_fetch_add(&c->refs, 1);
        }
    }
    for (st_req *r = g->head, *next; r != g->stop; r = next) {
        next = r->next;
        if (g->gr < 0 && r->status == 0)
            r->status = g->gr;
        finish(r);
    }
}

/* Under `interval`: fdatasync what was written since the last time. */
static void sync_dirty(st_store *s)
{
    st_conv **held = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->cat_mu);
    for (size_t i = 0; i < s->nbuckets; i++)
        for (st_conv *c = s->buckets[i]; c != NULL; c = c->next)
            if (c->dirty && grow((void **)&held, &cap, n + 1, sizeof(*held)) == 0)
                held[n++] = c;
    pthread_mutex_unlock(&s->cat_mu);
    for (size_t i = 0; i < n; i++) {
        int r = st_log_sync(held[i]->log);
        if (r < 0) { /* stays dirty and held: tried again next interval */
            rt_log(RT_LOG_ERROR, "store", "interval sync of %s failed: %s", held[i]->dir,
                   strerror(-r));
            continue;
        }
        held[i]->dirty = false;
        stl_conv_release(held[i]);
    }
    free(held);
}

/* Under `full`: make every segment durable and drop the journal files, so
 * that none still holds what a delete is about to remove (rotated files the
 * flusher has not removed yet included). */
static int flush_all(st_store *s)
{
    if (s->o.durability != ST_FULL)
        return 0;
    int r = s->j.size > ST_FILE_HDR ? st_journal_open_next(s) : 0;
    if (r == 0)
        r = st_syncfs(s->dir_fd);
    if (r == 0)
        r = st_journal_retire(s, s->j.seq);
    return r;
}

static void delete_conv(st_store *s, st_req *r)
{
    r->status = flush_all(s);
    if (r->status == 0)
        r->status = st_conv_remove_files(r->conv);
    if (r->conv->dirty) { /* the interval sync's hold */
        r->conv->dirty = false;
        atomic_fetch_sub(&r->conv->refs, 1);
    }
    finish(r);
}

static void rotate_journal(st_store *s, uint64_t *retry)
{
    int r = st_journal_open_next(s);
    /* after a failure, try again once the journal has grown a bit */
    *retry = r == 0 ? 0 : s->j.size + s->o.journal_bytes / 16;
    if (r == 0) {
        pthread_mutex_lock(&s->f_mu);
        s->f_rotated = s->j.seq;
        pthread_cond_signal(&s->f_cv);
        pthread_mutex_unlock(&s->f_mu);
    } else {
        rt_log(RT_LOG_ERROR, "store", "cannot rotate the journal: %s", strerror(-r));
    }
}

/* Settle and answer the group in flight, if any; returns NULL. */
static group *drain(st_store *s, group *g, bool settled)
{
    if (g != NULL) {
        if (!settled)
            group_settle(s, g);
        group_finish(s, g);
    }
    return NULL;
}

static void *committer_main(void *arg)
{
    st_store *s = arg;
    pthread_setname_np(pthread_self(), "parley-commit");
    group gs[2] = {{.gen = 0}, {.gen = 1}};
    group *inflight = NULL; /* begun and written, not answered yet */
    uint64_t next_sync = st_now_ms() + s->o.interval_ms, rotate_retry = 0;
    for (;;) {
        if (inflight != NULL) /* what comes meanwhile makes the next group */
            group_settle(s, inflight);
        pthread_mutex_lock(&s->q.mu);
        while (s->q.head == NULL && !s->q.stop && inflight == NULL) {
            if (s->o.durability != ST_INTERVAL) {
                pthread_cond_wait(&s->q.cv, &s->q.mu);
                continue;
            }
            uint64_t now = st_now_ms();
            if (now >= next_sync)
                break;
            st_reqq_wait(&s->q, next_sync - now);
        }
        st_req *batch = s->q.head;
        s->q.head = s->q.tail = NULL;
        bool stop = s->q.stop;
        pthread_mutex_unlock(&s->q.mu);
        if (batch == NULL)
            inflight = drain(s, inflight, true);

        while (batch != NULL) { /* groups of appends, split at the other requests */
            st_req *cut = batch;
            while (cut != NULL && (cut->kind == REQ_APPEND || cut->kind == REQ_CREATE))
                cut = cut->next;
            if (cut != batch) {
                group *g = inflight == &gs[0] ? &gs[1] : &gs[0];
                group_begin(s, g, batch, cut);
                inflight = drain(s, inflight, true); /* settled above */
                group_write(g);
                inflight = g;
            }
            if (cut != NULL) { /* a barrier: what came before it is done first */
                inflight = drain(s, inflight, false);
                batch = cut->next;
                if (cut->kind == REQ_DELETE)
                    delete_conv(s, cut);
                else
                    put_file(cut);
            } else {
                batch = NULL;
            }
        }
        if (s->o.durability == ST_INTERVAL && st_now_ms() >= next_sync) {
            sync_dirty(s);
            next_sync = st_now_ms() + s->o.interval_ms;
        }
        if (s->o.durability == ST_FULL && s->j.size >= s->o.journal_bytes &&
            s->j.size >= rotate_retry) {
            inflight = drain(s, inflight, false); /* its records are in this file */
            rotate_journal(s, &rotate_retry);
        }
        if (stop) {
            pthread_mutex_lock(&s->q.mu);
            bool more = s->q.head != NULL;
            pthread_mutex_unlock(&s->q.mu);
            if (!more) {
                inflight = drain(s, inflight, false);
                break;
            }
        }
    }
    if (s->o.durability == ST_INTERVAL)
        sync_dirty(s);
    for (int i = 0; i < 2; i++) {
        free(gs[i].iov);
        free(gs[i].hdr);
        free(gs[i].convs);
        free(gs[i].items);
    }
    return NULL;
}

int st_committer_start(st_store *s)
{
    if (s->o.durability == ST_FULL) {
        int r = st_journal_open_next(s);
        if (r == 0)
            r = st_journal_syncer_start(s);
        if (r < 0)
            return r;
    }
    int r = -pthread_create(&s->committer, NULL, committer_main, s);
    if (r < 0 && s->o.durability == ST_FULL)
        st_journal_syncer_stop(s);
    return r;
}

void st_committer_stop(st_store *s)
{
    st_reqq_stop(&s->q);
    pthread_join(s->committer, NULL);
    if (s->o.durability == ST_FULL)
        st_journal_syncer_stop(s);
    if (s->j.fd >= 0)
        close(s->j.fd);
    s->j.fd = -1;
}
