/*
 * pool_copy.c - carrying a conversation too large for one group (pool_carry.c
 * says when: one larger than a round's first carry may be, four segments).
 *
 * It moves in several groups, each of its own and at most a quarter
 * segment, so that other appends wait for one of them at a time. They are
 * written under a tag of their own, as a copy: a conversation outside the
 * catalog (an stp_conv, so that the committer writes and indexes it as
 * any other). COPY begins it (the conversation's id and parent, its meta),
 * its events follow a group at a time, those appended meanwhile too, and
 * the last group holds the rest of them, the meta and the files now, and
 * ADOPT. The committer writes that one only if the conversation did not
 * change since it was read (else it is read again, a few times), with
 * everything it will change made ready before it writes; once it is
 * durable the conversation takes the copy's runs, places and tag, and its
 * open log (opened by the carry, held open by its reference) a new view.
 * So that one appended to all the time still moves, its requests are held
 * back (st_reqq_hold) for the last two reads, and queued again once the
 * ADOPT is written or the copy gives up: the first of the two reads may
 * still miss requests queued before the hold, but its groups, set aside,
 * run after them, so the second reads what no request can change. Its
 * appends wait for those few groups, once a copy; before, a conversation
 * appended to between each read and its ADOPT's group eight times over
 * was copied again whole at the next round.
 * An open takes ADOPT as a CREATE of the conversation with the copy's
 * records (pool_scan.c); a copy without its ADOPT (a crash, a close) is
 * passed over, and the segments it is in go as a deleted conversation's.
 * No checkpoint is written while a copy is under way (stp_store.copying):
 * it would name neither the copy nor, after the ADOPT, the new tag.
 */
#include "pool_impl.h"

#include "runtime/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void (*stp_carry_hook)(stp_store *s, int where);

static void hook(stp_store *s, int where)
{
    if (stp_carry_hook != NULL)
        stp_carry_hook(s, where);
}

uint64_t stp_adopt_index(const st_req *r, size_t i)
{
    const stp_adopt *a = r->adopt;
    if (i < a->nev)
        return r->first + i;
    if (i == a->nev)
        return STP_IDX_META;
    return i + 1 < r->n ? STP_IDX_FILE : STP_IDX_ADOPT;
}

typedef struct viewfill {
    stp_view *v;
    uint64_t n;
} viewfill;

static int view_one(void *ctx, uint32_t seq, const stp_ent *e)
{
    (void)seq;
    viewfill *f = ctx;
    if (e->index != f->n++)
        return -EBADMSG;
    return stp_log_view_set(f->v, e);
}

int stp_adopt_prepare(stp_store *s, stp_conv *x, st_req *r, const stp_ent *e)
{
    stp_adopt *a = r->adopt;
    stp_conv *h = a->h;
    const stp_runs *hr = atomic_load_explicit(&h->runs, memory_order_relaxed);
    uint32_t n = hr != NULL ? hr->n : 0;
    uint32_t more = a->nev > 0 && (n == 0 || hr->r[n - 1].seq != s->act.seq) ? 1 : 0;
    stp_runs *runs = NULL;
    if (n + more > 0 && (runs = malloc(sizeof(*runs) + (n + more) * sizeof(runs->r[0]))) == NULL)
        return -ENOMEM;
    if (runs != NULL) {
        if (n > 0)
            memcpy(runs->r, hr->r, n * sizeof(runs->r[0]));
        if (more)
            runs->r[n] = (stp_run){s->act.seq, (uint32_t)r->first};
        runs->n = n + more;
    }
    /* its log, opened by the carry and kept open by its reference */
    pthread_mutex_lock(stp_lock(x));
    stp_log *l = x->log;
    pthread_mutex_unlock(stp_lock(x));
    viewfill f = {NULL, 0};
    int err = l != NULL ? stp_log_view_new(l, r->first + a->nev, runs, &h->tag, &f.v) : -EAGAIN;
    if (err == 0) {
        pthread_mutex_lock(&s->seg_mu);
        err = stp_conv_each(s, h, hr, r->first, view_one, &f);
        pthread_mutex_unlock(&s->seg_mu);
    }
    if (err == 0 && f.n != r->first)
        err = -EBADMSG;
    for (uint32_t i = 0; err == 0 && i < a->nev; i++)
        err = stp_log_view_set(f.v, &e[i]);
    if (err < 0) {
        stp_log_view_free(f.v);
        free(runs);
        return err;
    }
    a->runs = runs;
    a->view = f.v;
    return 0;
}

void stp_adopt_apply(stp_store *s, stp_conv *x, st_req *r, const stp_ent *e)
{
    stp_adopt *a = r->adopt;
    stp_conv *h = a->h;
    if (x->log != NULL) { /* its readers: the new view (the carry keeps the log open) */
        stp_log_release(x->log);
        stp_log_view_put(x->log, a->view);
        a->view = NULL;
    }
    stp_carry_take(s, x, a->runs, h->create_seq, &h->tag, r, e, a->nev, a->nev + 1, r->n - 1);
    a->runs = NULL;
    pthread_mutex_lock(&s->seg_mu); /* its records in the active segment: the copy's */
    x->act_seq = h->act_seq;
    x->act_last = h->act_last;
    pthread_mutex_unlock(&s->seg_mu);
}

/* A request submitted in a group of its own, and waited for. */
static int submit_wait(stp_conv *c, st_req *r)
{
    st_waiter w;
    st_waiter_init(&w);
    r->alone = true;
    int e = stp_submit(c, r, st_waiter_done, &w); /* takes r */
    return e == 0 ? st_waiter_wait(&w) : e;
}

/* The runs from the one that holds event `from` on. */
static stp_runs *runs_from(const stp_runs *runs, uint64_t from)
{
    uint32_t k = 0;
    while (runs != NULL && k + 1 < runs->n && runs->r[k + 1].first <= from)
        k++;
    uint32_t n = runs != NULL ? runs->n - k : 0;
    stp_runs *t = malloc(sizeof(*t) + (n ? n : 1) * sizeof(t->r[0]));
    if (t != NULL) {
        t->n = n;
        if (n > 0)
            memcpy(t->r, runs->r + k, n * sizeof(t->r[0]));
    }
    return t;
}

/* x's events from `from` on (snapshot p), at most `most` bytes of records
 * (at least one): their entries in *f, from the indexes. */
static int events_from(stp_store *s, stp_conv *x, const stp_snap *p, uint64_t from, uint64_t most,
                       stp_found *f)
{
    *f = (stp_found){.base = from, .most = most};
    stp_runs *runs = runs_from(p->runs, from);
    if (runs == NULL)
        return -ENOMEM;
    int r = from < p->count ? stp_found_walk(s, x, runs, p->count, f) : 0;
    free(runs);
    if (r == 1)
        r = 0; /* enough for one group */
    if (r == -EBADMSG || r == -ENOENT)
        r = -EAGAIN; /* a hole, or a segment gone meanwhile */
    return r;
}

static void found_free(stp_found *f)
{
    free(f->e);
    free(f->seq);
}

static void items_free(st_item *it, size_t n)
{
    for (size_t i = 0; it != NULL && i < n; i++)
        rt_buf_unref(it[i].payload);
    free(it);
}

/* COPY: x's id and parent, its meta now. */
static int copy_begin(stp_store *s, stp_conv *x, stp_conv *h)
{
    stp_snap p = {0};
    int r = stp_snap_take(x, &p);
    char key[65];
    rt_uuid_hex(&x->id, key);
    if (p.has_parent)
        rt_uuid_hex(&p.parent, key + 32);
    rt_buf *meta = NULL;
    if (r == 0)
        r = stp_read_payload(s, p.meta_at, &meta);
    st_req *q = r == 0 ? st_req_one(REQ_COPY, "copy", key, p.has_parent ? 64 : 32, meta) : NULL;
    if (r == 0 && q == NULL)
        r = -ENOMEM;
    rt_buf_unref(meta);
    stp_snap_free(&p);
    return r != 0 ? r : submit_wait(h, q);
}

/* The copy's events, a group at a time, until what is left of x's fits in
 * one group with its meta and files (0). */
static int copy_events(stp_store *s, stp_conv *x, stp_conv *h)
{
    for (;;) {
        stp_snap p = {0};
        stp_found f = {0};
        int r = stp_snap_take(x, &p);
        if (r == 0 && h->count > p.count)
            r = -EAGAIN; /* not the same conversation */
        if (r == 0)
            r = events_from(s, x, &p, h->count, stp_carry_round_bytes(s), &f);
        bool last = r == 0 && h->count + f.n == p.count;
        if (r == 0 && !last && f.n == 0)
            r = -EAGAIN; /* its events are not where its runs say */
        st_item *it = r == 0 && !last ? calloc(f.n, sizeof(*it)) : NULL;
        if (r == 0 && !last && it == NULL)
            r = -ENOMEM;
        if (it != NULL)
            r = stp_read_found(s, &p, &f, it);
        st_req *q = it != NULL && r == 0 ? st_req_append(it, f.n, &r) : NULL;
        items_free(it, f.n);
        found_free(&f);
        stp_snap_free(&p);
        if (r == 0 && q != NULL && (r = submit_wait(h, q)) == 0)
            hook(s, 0);
        if (r != 0 || last)
            return r == 1 ? -ENOENT : r; /* 1: x is gone, or read-only */
    }
}

/* The last group: x's events left, its meta and files now, ADOPT. */
static int copy_adopt(stp_store *s, stp_conv *x, stp_conv *h)
{
    stp_snap p = {0};
    stp_found f = {0};
    int r = stp_snap_take(x, &p);
    if (r == 0)
        r = events_from(s, x, &p, h->count, UINT64_MAX, &f);
    stp_adopt a = {.h = h, .nev = (uint32_t)f.n, .nfiles = (uint32_t)p.nfiles};
    size_t n = f.n + p.nfiles + 2;
    st_item *it = r == 0 ? calloc(n, sizeof(*it)) : NULL;
    if (r == 0 && it == NULL)
        r = -ENOMEM;
    char hex[33];
    rt_uuid_hex(&x->id, hex);
    if (r == 0)
        r = stp_read_found(s, &p, &f, it);
    if (r == 0) {
        it[f.n] = (st_item){.id = "meta", .idlen = 4};
        r = stp_read_payload(s, p.meta_at, &it[f.n].payload);
    }
    for (size_t i = 0; r == 0 && i < p.nfiles; i++) {
        st_item *y = &it[f.n + 1 + i];
        y->id = p.files[i]->name;
        y->idlen = (uint32_t)strlen(p.files[i]->name);
        r = stp_read_payload(s, p.files[i]->at, &y->payload);
    }
    if (r == 0) {
        it[n - 1] = (st_item){.id = "adopt", .idlen = 5, .payload = rt_buf_copy(hex, 32)};
        r = it[n - 1].payload != NULL ? 0 : -ENOMEM;
    }
    st_req *q = r == 0 ? st_req_append(it, n, &r) : NULL;
    if (q != NULL) {
        q->kind = REQ_ADOPT;
        q->first = h->count;
        q->expect = p.mark;
        q->adopt = &a;
    }
    items_free(it, n);
    found_free(&f);
    stp_snap_free(&p);
    if (q != NULL) {
        hook(s, 1);
        r = submit_wait(x, q);
    }
    /* what the committer made ready and did not use: a failed group */
    free(a.runs);
    stp_log_view_free(a.view);
    return r == 1 ? -ENOENT : r;
}

int stp_carry_big(stp_store *s, stp_conv *x)
{
    st_log *l;
    int r = stp_conv_log((st_conv *)x, &l, NULL); /* open while held: see stp_adopt_prepare */
    rt_uuid tag;
    stp_conv *h = NULL;
    for (int i = 0; r == 0 && h == NULL && i < 4; i++) { /* a tag no conversation has */
        if ((r = rt_uuid_v4(&tag)) < 0)
            break;
        pthread_mutex_lock(&s->cat_mu);
        bool taken = stp_lookup(s, &tag) != NULL;
        pthread_mutex_unlock(&s->cat_mu);
        if (!taken && (h = stp_conv_new(s, &tag)) == NULL)
            r = -ENOMEM;
    }
    if (r == 0 && h == NULL)
        r = -EEXIST;
    if (r == 0) {
        atomic_store(&s->copying, true);
        r = copy_begin(s, x, h);
    }
    bool held = false;
    for (int tries = 0; r == 0; tries++) {
        if (tries == STP_ADOPT_TRIES - STP_HELD_TRIES)
            held = st_reqq_hold(&s->q, (st_conv *)x) == 0;
        r = copy_events(s, x, h);
        if (r == 0)
            r = copy_adopt(s, x, h);
        if (r != -EAGAIN || tries + 1 == STP_ADOPT_TRIES)
            break;
        r = 0; /* appended to meanwhile: copy what is new, and try again */
    }
    if (held)
        stp_release_held(s);
    atomic_store(&s->copying, false);
    if (h != NULL)
        stp_unref(h);
    if (r == 1 || r == -EAGAIN || r == -EBUSY || r == -ENOENT || r == -EROFS)
        r = 2;
    return r;
}
