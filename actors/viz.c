/*
 * viz.c - the visualizer actor. See viz.h.
 *
 * `known` is how many events exist as far as it knows (the subscribe
 * answer's count, then each published event's index + 1); `view_next` how
 * many it has folded. Whenever they differ, fold reads the log from
 * view_next in pages, a slice at a time, and posts itself VIZ_MORE to go
 * on; a published event that is the next one is folded straight from the
 * bytes the conversation hands out. Requests wait while they differ. A
 * page the store cannot give at once (a cluster's events older than the
 * node holds) is read in the thread pool and folded when VIZ_READ brings
 * it (conv_read.h), one at a time.
 */
#include "viz.h"

#include "actors/conv_impl.h"
#include "actors/conv_read.h"
#include "actors/event.h"
#include "actors/view.h"

#include "runtime/json.h"
#include "runtime/log.h"
#include "runtime/text.h"
#include "store/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    VIZ_MORE = RT_KIND_RANGE(7) + 20,
    VIZ_IDLE,
    VIZ_RETRY,
    VIZ_READ, /* a page read in the thread pool (conv_read_answer) */
    PAGE = 100,
    SLICE = 500,       /* events folded before the loop gets a turn: ~15 ms */
    WAITING_MAX = 1024 /* requests waiting for the fold */
};

_Atomic int64_t viz_running;

typedef struct watcher {
    rt_actor *a;
    uint64_t id;
    uint64_t told; /* events folded into its last answer */
    bool ticked;   /* a VIZ_TICK is on its way and not answered */
} watcher;

typedef struct waiting {
    rt_promise p;
    uint32_t kind;
    uint64_t arg, sender;
    rt_buf *buf;       /* VIZ_RANGE: the question (held) */
    rt_actor *watcher; /* VIZ_WATCH: the asker (held) */
} waiting;

typedef struct viz {
    conv_ctx *ctx;
    rt_actor *self, *conv;
    view *v;
    conv_reader rd;
    bool rd_open, subscribed, more_due, used;
    bool reading; /* a VIZ_READ is on its way */
    bool too_big; /* past viz_max_blocks: the view is dropped */
    uint64_t known;
    int retries;
    watcher *w;
    size_t nw, wcap;
    waiting *q;
    size_t nq, qcap;
} viz;

/* --------------------------------------------------------------- answers --- */

static void fail(rt_promise *p, int status, const char *why)
{
    rt_buf *b = rt_buf_copy(why, strlen(why));
    if (rt_promise_reply(p, VIZ_RESULT, status, 0, b) < 0)
        rt_buf_unref(b);
}

static watcher *find_watcher(viz *z, uint64_t id)
{
    for (size_t i = 0; i < z->nw; i++)
        if (z->w[i].id == id)
            return &z->w[i];
    return NULL;
}

static int add_watcher(viz *z, rt_actor *a, uint64_t id)
{
    if (find_watcher(z, id) != NULL)
        return 0;
    if (z->nw == z->ctx->svc->o.max_subscribers)
        return -EBUSY;
    if (z->nw == z->wcap) {
        size_t cap = z->wcap ? 2 * z->wcap : 4;
        watcher *w = realloc(z->w, cap * sizeof(*w));
        if (w == NULL)
            return -ENOMEM;
        z->w = w;
        z->wcap = cap;
    }
    z->w[z->nw++] = (watcher){rt_actor_ref(a), id, 0, false};
    return 0;
}

static void drop_watcher(viz *z, uint64_t id)
{
    watcher *w = find_watcher(z, id);
    if (w == NULL)
        return;
    rt_actor_unref(w->a);
    *w = z->w[--z->nw];
}

/* t's text as a buffer (an empty one for no text), t's memory the
 * buffer's or freed: NULL if t failed or out of memory. rt_buf_take frees
 * what it cannot take; freeing it again here was a double free. */
static rt_buf *text_buf(rt_text *t)
{
    if (t->failed || t->len == 0) {
        free(t->p);
        return t->failed ? NULL : rt_buf_copy("", 0);
    }
    return rt_buf_take(t->p, t->len);
}

/* A page of blocks, serialized; NULL with *status set if it cannot be. */
static rt_buf *range_of(viz *z, const rt_buf *q, int *status)
{
    viz_range r;
    if (q == NULL || rt_buf_len(q) != sizeof(r)) {
        *status = -EINVAL;
        return NULL;
    }
    memcpy(&r, rt_buf_data(q), sizeof(r));
    r.conv[sizeof(r.conv) - 1] = '\0';
    json_t *st = view_range(z->v, r.conv, r.from, r.limit, status);
    rt_text t = {0};
    if (st == NULL || ev_json_append(&t, st) != 0)
        t.failed = true;
    json_decref(st);
    rt_buf *b = text_buf(&t);
    if (b == NULL && *status == 0)
        *status = -ENOMEM;
    return b;
}

/* Answer a request now (everything known is folded). */
static void answer(viz *z, rt_promise *p, uint32_t kind, uint64_t arg, uint64_t sender,
                   rt_actor *asker, const rt_buf *q)
{
    if (z->too_big) {
        char why[160];
        snprintf(why, sizeof(why),
                 "the conversation folds into more than %llu blocks, the visualizer's limit "
                 "(--viz-max-blocks)",
                 (unsigned long long)z->ctx->svc->o.viz_max_blocks);
        fail(p, -E2BIG, why);
        return;
    }
    uint64_t next = view_next(z->v);
    /* a later index than the last answers as the last: nothing changed
     * (with nothing folded, that is the whole, empty, state) */
    int64_t after = arg == 0 ? -1 : (int64_t)(arg - 1 < next ? arg - 1 : next - 1);
    if (kind == VIZ_WATCH) {
        int e = add_watcher(z, asker, sender);
        if (e < 0) {
            fail(p, e, e == -EBUSY ? "too many watchers of this conversation" : "out of memory");
            return;
        }
    }
    rt_buf *b = NULL;
    if (kind == VIZ_RANGE) {
        int status = 0;
        b = range_of(z, q, &status);
        if (b == NULL) {
            fail(p, status,
                 status == -ENOENT ? "no such subagent in this conversation" : "bad question");
            return;
        }
    } else if (kind == VIZ_STATE) {
        json_t *st = view_since(z->v, after);
        rt_text t = {0};
        if (st == NULL || ev_json_append(&t, st) != 0)
            t.failed = true;
        json_decref(st);
        b = text_buf(&t);
    } else {
        rt_text t = {0};
        if (next > 0 && after == (int64_t)next - 1) {
            /* nothing changed since */
        } else if (view_frames(z->v, after, &t) != 0) {
            t.failed = true;
        }
        b = text_buf(&t);
        watcher *w = find_watcher(z, sender);
        if (w != NULL && b != NULL) {
            w->told = next;
            w->ticked = false;
        }
    }
    if (b == NULL) {
        fail(p, -ENOMEM, "out of memory");
        return;
    }
    if (rt_promise_reply(p, VIZ_RESULT, 0, next, b) < 0)
        rt_buf_unref(b);
}

static bool caught_up(const viz *z)
{
    return z->too_big || (z->subscribed && view_next(z->v) >= z->known);
}

/* Everything known is folded: answer who waits, tell watchers. */
static void settle(viz *z)
{
    if (!caught_up(z))
        return;
    for (size_t i = 0; i < z->nq; i++) {
        waiting *q = &z->q[i];
        answer(z, &q->p, q->kind, q->arg, q->sender, q->watcher, q->buf);
        rt_actor_unref(q->watcher);
        rt_buf_unref(q->buf);
    }
    z->nq = 0;
    if (z->too_big)
        return;
    uint64_t next = view_next(z->v);
    for (size_t i = 0; i < z->nw; i++) {
        watcher *w = &z->w[i];
        if (w->told >= next || w->ticked)
            continue;
        int e = rt_notify(w->a, VIZ_TICK, next, NULL);
        if (e == RT_ECLOSED) /* gone without a word */
            drop_watcher(z, w->id), i--;
        else
            w->ticked = e == 0;
    }
}

static void request(viz *z, rt_msg *m)
{
    z->used = true;
    rt_actor *asker = m->reply_to;
    rt_promise p = rt_msg_promise(m);
    if (caught_up(z)) {
        answer(z, &p, m->kind, m->arg, m->sender, asker, m->buf);
        return;
    }
    if (z->nq == WAITING_MAX) {
        fail(&p, -EBUSY, "the visualizer is busy: retry");
        return;
    }
    if (z->nq == z->qcap) {
        size_t cap = z->qcap ? 2 * z->qcap : 8;
        waiting *q = realloc(z->q, cap * sizeof(*q));
        if (q == NULL) {
            fail(&p, -ENOMEM, "out of memory");
            return;
        }
        z->q = q;
        z->qcap = cap;
    }
    z->q[z->nq++] = (waiting){p,
                              m->kind,
                              m->arg,
                              m->sender,
                              m->buf != NULL ? rt_buf_ref(m->buf) : NULL,
                              m->kind == VIZ_WATCH ? rt_actor_ref(asker) : NULL};
}

/* ---------------------------------------------------------------- folding --- */

/* Stop, telling everyone why. */
static int give_up(viz *z, int status, const char *why)
{
    for (size_t i = 0; i < z->nq; i++) {
        fail(&z->q[i].p, status, why);
        rt_actor_unref(z->q[i].watcher);
        rt_buf_unref(z->q[i].buf);
    }
    z->nq = 0;
    return RT_DONE;
}

static int fold_one(viz *z, uint64_t index, const char *json, size_t len)
{
    json_t *e = rt_json_read(json, len, 0, NULL);
    int r = view_apply(z->v, index, e != NULL ? e : json_null());
    json_decref(e);
    if (r == 0 && view_blocks(z->v) > z->ctx->svc->o.viz_max_blocks) {
        /* a bound on what the view holds: it goes, and every question is
         * told why until the visualizer stops (idle) */
        rt_log(RT_LOG_WARN, "viz", "a conversation folds into more than %llu blocks: no view",
               (unsigned long long)z->ctx->svc->o.viz_max_blocks);
        z->too_big = true;
        view_free(z->v);
        z->v = NULL;
        for (size_t i = 0; i < z->nw; i++)
            rt_notify(z->w[i].a, VIZ_TICK, 0, NULL); /* their pull gets the answer */
    }
    return r;
}

/* Fold a page's events from view_next on. 0, or RT_DONE. */
static int fold_page(viz *z, const st_page *p)
{
    if (p->n == 0)
        return give_up(z, -EIO, "the log ends before its count");
    for (uint32_t i = 0; i < p->n && !z->too_big; i++) {
        const st_event_ref *r = &p->ev[i];
        if (r->index >= view_next(z->v) &&
            fold_one(z, r->index, (const char *)rt_buf_data(p->bytes) + r->off, r->len) != 0)
            return give_up(z, -ENOMEM, "out of memory");
    }
    return 0;
}

/* Fold from the log, a slice at a time. 0, or RT_DONE. */
static int fold(viz *z)
{
    z->more_due = false;
    uint64_t end = z->too_big ? 0 : view_next(z->v) + SLICE;
    while (!z->too_big && !z->reading && view_next(z->v) < z->known && view_next(z->v) < end) {
        uint64_t next = view_next(z->v), n = z->known - next;
        st_page *p;
        pl_outcome why;
        char detail[200];
        int e =
            conv_read_page_soon(&z->rd, z->self, VIZ_READ, next, (uint32_t)(n < PAGE ? n : PAGE),
                                &p, &why, detail, sizeof(detail));
        if (e < 0)
            return give_up(z, why == PL_BUSY ? -EBUSY : -EIO, detail);
        if (e == 1) {
            z->reading = true;
            return 0;
        }
        e = fold_page(z, p);
        st_page_free(p);
        if (e != 0)
            return e;
    }
    if (!z->too_big && !z->reading && view_next(z->v) < z->known)
        z->more_due = rt_notify(z->self, VIZ_MORE, 0, NULL) == 0;
    settle(z);
    return 0;
}

/* A page read in the thread pool: fold it, and go on. */
static int read_answered(viz *z, const rt_msg *m)
{
    z->reading = false;
    const conv_read_answer *a = conv_read_answer_of(m);
    if (a == NULL)
        return give_up(z, -ENOMEM, "out of memory");
    if (a->err < 0)
        return give_up(z, a->why == PL_BUSY ? -EBUSY : -EIO, a->detail);
    int e = z->too_big ? 0 : fold_page(z, a->page);
    return e != 0 ? e : fold(z);
}

static void subscribe(viz *z)
{
    rt_actor_unref(z->conv);
    z->conv = NULL;
    z->subscribed = false;
    int e = convs_get(z->ctx->svc, &z->ctx->id, &z->conv);
    if (e == 0)
        e = rt_ask(z->conv, CONV_SUBSCRIBE, CONV_SUB_TOLD, NULL, z->self);
    if (e < 0 && e != -ENOENT && z->retries++ < 250)
        rt_timer_start(z->self, 20, 0, VIZ_RETRY, 0);
    else if (e < 0)
        rt_notify(z->self, VIZ_RETRY, 1, NULL); /* give up on the next turn */
}

static int subscribed(viz *z, rt_msg *m)
{
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    if (cr == NULL || cr->v.outcome != PL_DONE) {
        if (cr != NULL && cr->v.outcome == PL_NOT_FOUND)
            return give_up(z, -ENOENT, "no such conversation");
        if (cr != NULL && cr->v.outcome == PL_BUSY)
            return give_up(z, -EBUSY, "too many subscribers of this conversation");
        if (z->retries++ < 250)
            rt_timer_start(z->self, 20, 0, VIZ_RETRY, 0);
        else
            return give_up(z, -EBUSY, "the conversation is not answering");
        return 0;
    }
    if (!z->rd_open) {
        pl_outcome why;
        char detail[200];
        if (conv_read_open(z->ctx->svc->store, &z->ctx->id, &z->rd, NULL, &why, detail,
                           sizeof(detail)) < 0)
            return give_up(z,
                           why == PL_NOT_FOUND ? -ENOENT
                           : why == PL_BUSY    ? -EBUSY
                                               : -EIO,
                           detail);
        z->rd_open = true;
    }
    z->retries = 0;
    z->subscribed = true;
    if (cr->count > z->known)
        z->known = cr->count;
    return fold(z);
}

static int published(viz *z, uint64_t index, const rt_buf *b)
{
    if (z->too_big)
        return 0;
    if (index + 1 > z->known)
        z->known = index + 1;
    if (index == view_next(z->v) && b != NULL && !z->reading) {
        if (fold_one(z, index, (const char *)rt_buf_data(b), rt_buf_len(b)) != 0)
            return give_up(z, -ENOMEM, "out of memory");
        settle(z);
        return 0;
    }
    return index > view_next(z->v) && !z->more_due ? fold(z) : 0;
}

/* ---------------------------------------------------------------- the actor --- */

static int viz_init(rt_actor *self, void *arg, void **state)
{
    viz *z = calloc(1, sizeof(*z));
    if (z == NULL || (z->v = view_new(NULL, NULL)) == NULL) {
        free(z);
        return RT_ENOMEM;
    }
    z->ctx = arg;
    z->self = self;
    uint64_t idle = z->ctx->svc->o.viz_idle_ms;
    rt_timer_start(self, idle, idle, VIZ_IDLE, 0);
    atomic_fetch_add_explicit(&viz_running, 1, memory_order_relaxed);
    *state = z;
    subscribe(z);
    return 0;
}

static int viz_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    viz *z = state;
    switch (m->kind) {
    case CONV_RESULT:
        return z->subscribed ? 0 : subscribed(z, m);
    case RT_KIND_ERROR:
        return m->arg == CONV_SUBSCRIBE ? subscribed(z, m) : 0;
    case CONV_EVENT:
        return z->subscribed ? published(z, m->arg, m->buf) : 0;
    case CONV_DROPPED:
        subscribe(z);
        return 0;
    case CONV_SYNC:
        rt_reply(m, CONV_SYNC_DONE, 0, m->arg, NULL);
        return 0;
    case VIZ_MORE:
        return z->more_due ? fold(z) : 0;
    case VIZ_READ:
        return read_answered(z, m);
    case VIZ_RETRY:
        if (m->arg == 1)
            return give_up(z, -ENOENT, "no such conversation");
        subscribe(z);
        return 0;
    case VIZ_STATE:
    case VIZ_RANGE:
    case VIZ_WATCH:
    case VIZ_PULL:
        request(z, m);
        return 0;
    case VIZ_UNWATCH:
        drop_watcher(z, m->sender);
        return 0;
    case VIZ_IDLE:
        for (size_t i = 0; i < z->nw; i++)
            if (rt_actor_closed(z->w[i].a))
                drop_watcher(z, z->w[i].id), i--;
        if (z->nw == 0 && z->nq == 0 && !z->used)
            return RT_DONE;
        z->used = false;
        return 0;
    default:
        return 0;
    }
}

static void viz_stop(rt_actor *self, void *state)
{
    viz *z = state;
    give_up(z, -ECONNRESET, "the visualizer stopped: retry");
    for (size_t i = 0; i < z->nw; i++) {
        rt_notify(z->w[i].a, VIZ_GONE, 0, NULL);
        rt_actor_unref(z->w[i].a);
    }
    if (z->conv != NULL) {
        rt_ask(z->conv, CONV_UNSUBSCRIBE, 0, NULL, self);
        rt_actor_unref(z->conv);
    }
    if (z->rd_open)
        conv_read_close(&z->rd);
    view_free(z->v);
    free(z->w);
    free(z->q);
    free(z);
    atomic_fetch_sub_explicit(&viz_running, 1, memory_order_relaxed);
}

const rt_behaviour viz_behaviour = {
    .name = "visualizer",
    .init = viz_init,
    .handle = viz_handle,
    .stop = viz_stop,
};
