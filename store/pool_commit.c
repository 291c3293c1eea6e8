/*
 * pool_commit.c - the pool's committer (pool.c): the one thread that
 * writes. It takes everything queued at once (a group), plans each
 * request's records (an append's indexes follow what its conversation has,
 * in queue order), writes them and the group's COMMIT record to the active
 * segment in one pwritev, and syncs once when the policy or a catalog
 * record asks. Only then is anything published: the segment's index, the
 * conversations' counts, runs, metas and files, the open logs; then every
 * request is answered. A failure fails the whole group and cuts it off the
 * file: nothing of it is visible or replayable, and the next group starts
 * at the same place.
 *
 * Between groups it rolls the segment past its size bound, syncs under
 * `interval`, and closes logs left idle (or too many).
 */
#include "pool_impl.h"

#include "backend.h"
#include "dirfiles.h"
#include "io.h"
#include "log_impl.h"
#include "runtime/grow.h"
#include "runtime/log.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

typedef struct grp {
    struct iovec *iov;
    size_t niov, iov_cap;
    uint8_t *hdr;
    size_t hdr_used, hdr_cap;
    stp_ent *ents;
    size_t nents, ents_cap;
    stp_conv **econv; /* per entry: its conversation (NULL: COMMIT) */
    size_t econv_cap;
    uint32_t gen;
    uint64_t start, end; /* the group's bytes in the active segment */
    bool sync;           /* a catalog record that must be durable */
    uint8_t commit[8], synced[8]; /* the COMMIT's payload and key */
} grp;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    return rt_grow(p, cap, need, elem, 64);
}

/* ---- queueing ---------------------------------------------------------------- */

int stp_submit(stp_conv *c, st_req *r, st_done_fn done, void *ctx)
{
    if (r->kind != REQ_DELETE) /* a delete takes over the caller's reference */
        atomic_fetch_add(&c->refs, 1);
    r->conv = (st_conv *)c;
    r->done = done;
    r->ctx = ctx;
    /* a carry goes in a group of its own, so that its bytes never fail
     * the others' group (a disk nearly full) */
    bool alone = r->alone || r->kind == REQ_CARRY || r->kind == REQ_ADOPT;
    int e = alone ? st_reqq_put_aside(&c->s->q, r) : st_reqq_push(&c->s->q, r);
    if (e < 0) {
        if (r->kind != REQ_DELETE)
            atomic_fetch_sub(&c->refs, 1);
        st_req_free(r);
    }
    return e;
}

int stp_append(st_conv *sc, const st_item *items, size_t n, st_done_fn done, void *ctx)
{
    stp_conv *c = (stp_conv *)sc;
    if (n == 0 || done == NULL)
        return -EINVAL;
    if (atomic_load(&c->gone))
        return -ENOENT;
    int e;
    st_req *r = st_req_append(items, n, &e);
    return r != NULL ? stp_submit(c, r, done, ctx) : e;
}

int stp_put_file(st_conv *sc, const char *name, rt_buf *data, bool durable, st_done_fn done,
                 void *ctx)
{
    stp_conv *c = (stp_conv *)sc;
    if (done == NULL)
        return -EINVAL;
    if (atomic_load(&c->gone))
        return -ENOENT;
    int e;
    st_req *r = st_req_file(name, data, durable, &e);
    return r != NULL ? stp_submit(c, r, done, ctx) : e;
}

int stp_delete(st_conv *sc, st_done_fn done, void *ctx)
{
    stp_conv *c = (stp_conv *)sc;
    if (done == NULL)
        return -EINVAL;
    st_req *r = st_req_one(REQ_DELETE, "delete", NULL, 0, NULL);
    if (r == NULL)
        return -ENOMEM;
    return stp_submit(c, r, done, ctx);
}

/* ---- a group ------------------------------------------------------------------- */

/* One record of the group under c's tag: its header into g->hdr, its
 * iovecs, its entry. c NULL: the COMMIT. */
static int encode_as(stp_store *s, grp *g, stp_conv *c, const rt_uuid *as, uint64_t index,
                     const st_item *it)
{
    static const uint8_t zero[ST_TAG_LEN];
    const uint8_t *tag = as != NULL ? as->b : zero;
    const void *payload = it->payload != NULL ? rt_buf_data(it->payload) : g->commit;
    uint32_t len = it->payload != NULL ? (uint32_t)rt_buf_len(it->payload) : 0;
    if (index == STP_IDX_COMMIT)
        len = sizeof(g->commit);
    if (grow((void **)&g->iov, &g->iov_cap, g->niov + 2, sizeof(*g->iov)) < 0 ||
        grow((void **)&g->hdr, &g->hdr_cap, g->hdr_used + ST_REC_HDR_MAX, 1) < 0 ||
        grow((void **)&g->ents, &g->ents_cap, g->nents + 1, sizeof(*g->ents)) < 0 ||
        grow((void **)&g->econv, &g->econv_cap, g->nents + 1, sizeof(*g->econv)) < 0)
        return -ENOMEM;
    g->econv[g->nents] = c;
    uint8_t *h = g->hdr + g->hdr_used;
    size_t hl = st_rec_encode(h, tag, st_journal_seed(s->act.seq), index, it->id, it->idlen,
                              it->key, it->keylen, payload, len);
    /* headers move if hdr grows: offsets now, pointers once all are in */
    g->iov[g->niov++] = (struct iovec){(void *)(uintptr_t)g->hdr_used, hl};
    g->iov[g->niov++] = (struct iovec){(void *)payload, len};
    g->hdr_used += hl;
    stp_ent *e = &g->ents[g->nents++];
    memcpy(e->id.b, tag, sizeof(e->id.b));
    e->index = index;
    e->off = (uint32_t)g->end;
    e->size = (uint32_t)(hl + len);
    e->hash = (uint32_t)(st_id_hash(it->id, it->idlen) >> 32);
    e->khash = it->keylen > 0 ? st_key_hash_hi(it->key, it->keylen) : 0;
    g->end += hl + len;
    return g->end > UINT32_MAX ? -EFBIG : 0;
}

static int encode(stp_store *s, grp *g, stp_conv *c, uint64_t index, const st_item *it)
{
    return encode_as(s, g, c, c != NULL ? &c->tag : NULL, index, it);
}

static const uint64_t index_of[] = {
    [REQ_CREATE] = STP_IDX_CREATE, [REQ_META] = STP_IDX_META, [REQ_FILE] = STP_IDX_FILE,
    [REQ_DELETE] = STP_IDX_DELETE, [REQ_COPY] = STP_IDX_COPY,
};

/* Plan r: its status if it cannot be, else its records. A negative return
 * fails the whole group. */
static int plan(stp_store *s, grp *g, st_req *r)
{
    stp_conv *c = (stp_conv *)r->conv;
    bool c_first = c->ggen != g->gen; /* c's first request in the group */
    if (c_first) {
        c->ggen = g->gen;
        c->gpend = 0;
        c->gdel = false;
    }
    r->rec0 = g->nents;
    bool gone = atomic_load(&c->gone) || c->gdel;
    if (r->kind != REQ_CREATE && gone) {
        r->status = -ENOENT;
        return 0;
    }
    if (r->kind == REQ_CARRY || r->kind == REQ_ADOPT) {
        /* as read, and nothing of it before in the group */
        stp_adopt *a = r->adopt;
        uint64_t count = r->kind == REQ_CARRY ? r->first : r->first + a->nev;
        if (!c_first || c->broken || c->count != count || stp_carry_print(c) != r->expect ||
            (a != NULL && a->h->count != r->first)) {
            r->status = -EAGAIN;
            return 0;
        }
        for (size_t i = 0; i < r->n; i++) {
            /* a carry in one group writes under the conversation's id, one
             * in several under the copy's tag, which its chain follows */
            int e = a == NULL ? encode_as(s, g, c, &c->id, stp_carry_index(r, i), &r->items[i])
                              : encode(s, g, a->h, stp_adopt_index(r, i), &r->items[i]);
            if (e < 0)
                return e;
        }
        return a == NULL ? 0 : stp_adopt_prepare(s, c, r, &g->ents[r->rec0]);
    }
    if (r->kind != REQ_APPEND) {
        g->sync |= r->kind != REQ_FILE || r->durable;
        c->gdel = r->kind == REQ_DELETE;
        return encode(s, g, c, index_of[r->kind], &r->items[0]);
    }
    uint64_t first = (uint64_t)c->count + c->gpend;
    if (c->broken || first + r->n > STP_EVENT_MAX) {
        r->status = c->broken ? -EROFS : -EFBIG;
        return 0;
    }
    r->first = first;
    for (size_t i = 0; i < r->n; i++) {
        int e = encode(s, g, c, first + i, &r->items[i]);
        if (e < 0)
            return e;
    }
    c->gpend += (uint32_t)r->n;
    return 0;
}

/* The group is durable: make r's effect visible. */
static void apply(stp_store *s, grp *g, st_req *r)
{
    stp_conv *c = (stp_conv *)r->conv;
    const stp_ent *e = &g->ents[r->rec0];
    if (r->kind == REQ_DELETE) {
        stp_remove(s, c);
        st_dir_remove_workspace(s->dir, &c->id);
        atomic_fetch_add_explicit(&s->deletes, 1, memory_order_relaxed); /* pool_carry.c */
        return;
    }
    pthread_mutex_lock(stp_lock(c));
    int err = 0;
    if (r->kind == REQ_CARRY) {
        stp_carry_apply(s, c, r, e);
    } else if (r->kind == REQ_ADOPT) {
        stp_adopt_apply(s, c, r, e);
    } else if (r->kind == REQ_APPEND) {
        err = stp_note_run(c, s->act.seq, (uint32_t)r->first);
        if (err == 0 && c->log != NULL && stp_log_add(c->log, e, r->n) < 0) {
            stp_log_free(c->log); /* out of memory: it opens again from the indexes */
            c->log = NULL;
        }
        c->count = (uint32_t)(r->first + r->n);
        if (c->log != NULL)
            stp_log_publish(c->log, c->count);
    } else if (r->kind == REQ_FILE) {
        err = stp_set_file(c, r->name, strlen(r->name), stp_payload_at(s, e, &r->items[0]));
    } else {
        if (r->kind == REQ_CREATE || r->kind == REQ_COPY)
            c->create_seq = s->act.seq;
        c->meta_at = stp_payload_at(s, e, &r->items[0]);
        rt_buf_unref(c->meta);
        c->meta = rt_buf_ref(r->items[0].payload);
    }
    if (err < 0) { /* on disk, but not in memory: say so, and keep it from getting worse */
        c->broken = true;
        s->no_ckpt = true; /* a checkpoint would keep what memory says */
        rt_log(RT_LOG_ERROR, "store",
               "pool: out of memory recording a committed group: "
               "a conversation is read-only until the store is reopened");
    }
    pthread_mutex_unlock(stp_lock(c));
}

/* Cut a failed group off the file; if that fails, appends stop. Over a
 * spare's zeros, zeros again: the file keeps its size and its blocks. */
static void cut_back(stp_store *s, grp *g, int why)
{
    uint64_t keep = s->act_alloc > g->start ? s->act_alloc : g->start;
    int r = st_truncate(s->act_fd, keep);
    if (r == 0 && keep > g->start)
        r = stp_zero(s->act_fd, g->start, g->end < keep ? g->end : keep);
    if (r == 0)
        r = st_datasync(s->act_fd);
    if (r < 0 && !s->broken) {
        s->broken = true;
        rt_log(RT_LOG_ERROR, "store",
               "cannot take back a failed group commit (%s): refusing appends until the store "
               "is reopened",
               strerror(-r));
    }
    rt_log(RT_LOG_ERROR, "store", "group commit failed, rolled back: %s", strerror(-why));
}

/* Whether the active segment rolls before the next group: once past its
 * bound; but a lazy roll waits until the segment before is named durably
 * (stp_sync_names: the sealing thread's next sync does it, off this path,
 * while this one grows), up to twice the bound, where the roll syncs the
 * name itself. */
static bool roll_due(stp_store *s)
{
    if (s->act_size < s->o.segment_bytes || s->act_size <= ST_FILE_HDR)
        return false;
    return !stp_act_dirty(s) || s->act_size >= 2 * s->o.segment_bytes || stp_names_synced(s);
}

static int write_group(stp_store *s, grp *g, st_req *head)
{
    if (s->broken)
        return -EIO;
    if (s->act_fd < 0) { /* the open left it to the first group */
        int e = stp_seg_create(s, s->act.seq);
        if (e < 0)
            return e;
    }
    if (roll_due(s)) {
        int e = stp_seg_roll(s);
        if (e < 0)
            return e;
    }
    g->niov = g->hdr_used = g->nents = 0;
    g->sync = s->o.durability == ST_FULL;
    g->start = g->end = s->act_size;
    int e = 0;
    for (st_req *r = head; e == 0 && r != NULL; r = r->next)
        e = plan(s, g, r);
    if (e < 0 || g->nents == 0)
        return e;
    st_put64(g->commit, g->start);
    st_put64(g->synced, g->sync ? g->start : s->act_synced);
    st_item commit = {.id = "commit", .idlen = 6, .key = g->synced, .keylen = sizeof(g->synced)};
    if ((e = encode(s, g, NULL, STP_IDX_COMMIT, &commit)) < 0)
        return e;
    for (size_t i = 0; i < g->niov; i += 2)
        g->iov[i].iov_base = g->hdr + (uintptr_t)g->iov[i].iov_base;
    /* room in the segment's index first: once durable, publishing cannot fail */
    pthread_mutex_lock(&s->seg_mu);
    e = stp_ents_grow((void **)&s->act.e, &s->act.cap, s->act.n + g->nents, sizeof(*s->act.e));
    if (e == 0)
        e = stp_ents_grow((void **)&s->act_prev, &s->act_prev_cap, s->act.n + g->nents,
                          sizeof(*s->act_prev));
    pthread_mutex_unlock(&s->seg_mu);
    if (e < 0)
        return e;
    e = st_write_all(s->act_fd, g->iov, (int)g->niov, (off_t)g->start);
    if (e == 0) {
        s->act_size = g->end;
        if (g->sync)
            e = stp_sync_written(s); /* act_synced = g->end */
    }
    if (e < 0) {
        s->act_size = g->start;
        cut_back(s, g, e);
        return e;
    }
    if (s->act_alloc < s->act_size)
        s->act_alloc = s->act_size;
    /* the next segment, made ahead: only where every group syncs (else
     * its zeros are writes for nothing) */
    if (s->o.durability == ST_FULL && s->act_size > s->o.segment_bytes / 4)
        stp_spare_want(s, s->act_size);
    pthread_mutex_lock(&s->seg_mu);
    for (size_t i = 0; i < g->nents; i++) {
        stp_conv *c = g->econv[i];
        if (c == NULL)
            continue; /* the COMMIT */
        uint32_t at = (uint32_t)s->act.n++;
        s->act.e[at] = g->ents[i];
        /* a CREATE begins a chain: what comes before is another
         * incarnation's, or what a carry copied (pool_carry.c) */
        bool chained = c->act_seq == s->act.seq && g->ents[i].index != STP_IDX_CREATE;
        s->act_prev[at] = chained ? c->act_last : STP_NONE;
        c->act_seq = s->act.seq;
        c->act_last = at;
    }
    pthread_mutex_unlock(&s->seg_mu);
    return 0;
}

/* r's done with its status; r goes, and its hold on its conversation. */
static void answer(st_req *r)
{
    r->done(r->ctx, r->status, r->first);
    st_conv *c = r->conv;
    st_req_free(r);
    stp_release(c);
}

static void run_group(stp_store *s, grp *g, st_req *head)
{
    g->gen++;
    for (st_req *r = head; r != NULL; r = r->next)
        r->status = 0;
    int e = write_group(s, g, head);
    for (st_req *r = head; e == 0 && r != NULL; r = r->next)
        if (r->status == 0)
            apply(s, g, r);
    for (st_req *r = head, *next; r != NULL; r = next) {
        next = r->next;
        if (e < 0 && r->status == 0)
            r->status = e;
        answer(r);
    }
}

void stp_release_held(stp_store *s)
{
    /* what comes back was accepted before the store began to close */
    for (st_req *r = st_reqq_release(&s->q), *next; r != NULL; r = next) {
        next = r->next;
        r->status = -ESHUTDOWN;
        answer(r);
    }
}

/* ---- idle logs ---------------------------------------------------------------- */

void stp_close_idle(stp_store *s, uint64_t now, uint64_t ttl, bool crowded)
{
    size_t n = 0, cap = 0, closed = 0;
    stp_conv **v = NULL;
    pthread_mutex_lock(&s->logs_mu);
    for (stp_log *l = s->logs; l != NULL; l = l->lnext) {
        stp_conv *c = l->c;
        if (atomic_load(&c->refs) == 1 && (crowded || now - atomic_load(&c->used) >= ttl) &&
            grow((void **)&v, &cap, n + 1, sizeof(*v)) == 0)
            v[n++] = c;
    }
    pthread_mutex_unlock(&s->logs_mu);
    /* on the committer thread: nothing deletes these meanwhile */
    for (size_t i = 0; i < n; i++) {
        stp_conv *c = v[i];
        pthread_mutex_lock(stp_lock(c));
        if (atomic_load(&c->refs) == 1 && c->log != NULL) { /* the catalog's only */
            stp_log_free(c->log);
            c->log = NULL;
            rt_buf_unref(c->meta);
            c->meta = NULL;
            closed++;
        }
        pthread_mutex_unlock(stp_lock(c));
        if (crowded && atomic_load(&s->open_logs) <= s->o.max_open_logs / 4 * 3)
            break;
    }
    free(v);
    if (closed > 0 && !crowded)
        malloc_trim(0);
}

int stp_sync_written(stp_store *s)
{
    /* before the active one: a prefix; and every segment's name, the
     * active one's too (only this thread makes segments) */
    int r = stp_sync_sealed(s, UINT32_MAX);
    if (r == 0 && stp_act_dirty(s))
        r = st_datasync(s->act_fd);
    if (r == 0)
        s->act_synced = s->act_size;
    return r;
}

static bool unsynced(stp_store *s)
{
    pthread_mutex_lock(&s->lazy_mu);
    bool lazy = s->lazy_lo != 0;
    pthread_mutex_unlock(&s->lazy_mu);
    return lazy || stp_act_dirty(s);
}

/* ---- the thread ------------------------------------------------------------------ */

static void *committer_main(void *arg)
{
    stp_store *s = arg;
    pthread_setname_np(pthread_self(), "parley-commit");
    grp g = {.gen = 0};
    uint64_t next_sync = st_now_ms() + s->o.interval_ms, next_sweep = st_now_ms() + 1000;
    uint64_t next_crowd = 0; /* too many logs open: when to look for idle ones again */
    for (;;) {
        pthread_mutex_lock(&s->q.mu);
        while (s->q.head == NULL && s->q.aside == NULL && !s->q.stop) {
            uint64_t now = st_now_ms(), until = next_sweep;
            if (s->o.durability == ST_INTERVAL && next_sync < until && unsynced(s))
                until = next_sync;
            if (now >= until)
                break;
            st_reqq_wait(&s->q, until - now);
        }
        st_req *batch = s->q.head, *aside = s->q.aside;
        s->q.head = s->q.tail = s->q.aside = NULL;
        bool stop = s->q.stop;
        pthread_mutex_unlock(&s->q.mu);
        if (batch != NULL)
            run_group(s, &g, batch);
        if (aside != NULL)
            run_group(s, &g, aside);
        uint64_t now = st_now_ms();
        if (s->o.durability == ST_INTERVAL && now >= next_sync) {
            int r = stp_sync_written(s);
            if (r < 0)
                rt_log(RT_LOG_ERROR, "store", "interval sync failed: %s", strerror(-r));
            next_sync = now + s->o.interval_ms;
        }
        if (atomic_load(&s->open_logs) > s->o.max_open_logs) {
            /* a walk of every open log, which finds few to close while
             * most are in use: not after every group */
            if (now >= next_crowd) {
                stp_close_idle(s, now, 0, true);
                next_crowd = now + 100;
            }
        } else if (now >= next_sweep) {
            stp_close_idle(s, now, s->o.idle_ttl_ms, false);
            next_sweep = now + 1000;
        }
        if (stop && batch == NULL && aside == NULL)
            break;
    }
    free(g.iov);
    free(g.hdr);
    free(g.ents);
    free(g.econv);
    return NULL;
}

int stp_committer_start(stp_store *s)
{
    return -pthread_create(&s->committer, NULL, committer_main, s);
}

void stp_committer_stop(stp_store *s)
{
    st_reqq_stop(&s->q);
    pthread_join(s->committer, NULL);
    pthread_mutex_lock(&s->logs_mu);
    while (s->logs != NULL) {
        stp_conv *c = s->logs->c;
        pthread_mutex_unlock(&s->logs_mu);
        pthread_mutex_lock(stp_lock(c)); /* a carry may be looking (pool_carry.c) */
        stp_log_free(c->log);
        c->log = NULL;
        pthread_mutex_unlock(stp_lock(c));
        pthread_mutex_lock(&s->logs_mu);
    }
    pthread_mutex_unlock(&s->logs_mu);
}
