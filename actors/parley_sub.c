/*
 * parley_sub.c - subscriptions of the public API (parley.h).
 *
 * Each subscription is an actor on the instance's callback loop, so an
 * embedder's callback never runs on a loop that hosts conversations. Like
 * a WebSocket stream (ws_stream.h), it keeps one number, `next`, the index
 * of the next event it owes, and learns how many exist from the
 * conversation (the subscribe answer's count, each live event's index). A
 * live event that is the next one is handed over from the bytes the
 * conversation published; anything else (the events before `from`...
 * after, a gap after it was dropped) is read from the log, a page per
 * turn (in the thread pool when the store cannot give it at once: SUB_READ,
 * conv_read.h; the log is opened once the conversation has answered, so
 * it is open already). So every event is delivered once, in order, whatever happens
 * between: a subscriber that does not keep up (its bounded mailbox is
 * full) is dropped by the conversation, is told, and goes on from the
 * log; a conversation that restarts is subscribed to again.
 *
 * Callbacks run with the subscription's lock held and check that it is
 * still wanted, so that once pl_unsubscribe has returned none runs.
 */
#include "actors/parley_impl.h"

#include "actors/conv_read.h"
#include "runtime/log.h"

#include <stdlib.h>
#include <string.h>

enum {
    SUB_MORE = RT_KIND_RANGE(6), /* to itself: read on from the log */
    SUB_RETRY,                   /* to itself: subscribe again */
    SUB_READ,                    /* a page read in the thread pool (conv_read_answer) */
    PAGE = 256,
    MAILBOX = 1024,
    RETRY_MS = 100,
};

struct pl_sub {
    _Atomic int refs; /* the caller's handle and the actor */
    pthread_mutex_t mu;
    bool cancelled; /* under mu: no more callbacks */
    bool ended;     /* under mu: ended was called */
    pl_sub_callbacks cb;
    void *ctx;
    rt_actor *actor;
};

typedef struct subscriber {
    pl_sub *s;
    pl_instance *p;
    rt_uuid id;
    rt_actor *self;
    rt_actor *conv; /* the conversation actor subscribed to */
    conv_reader rd;
    uint64_t next;  /* the next index owed */
    uint64_t known; /* events known to exist */
    bool live;      /* the subscription is answered */
    bool more;      /* a SUB_MORE is on its way */
    bool reading;   /* a SUB_READ is on its way */
} subscriber;

/* The subscription whose callback this thread runs, if any. */
static _Thread_local pl_sub *running;

static void sub_unref(pl_sub *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        pthread_mutex_destroy(&s->mu);
        free(s);
    }
}

static void deliver_one(subscriber *u, uint64_t index, const char *json, size_t len)
{
    pl_sub *s = u->s;
    pthread_mutex_lock(&s->mu);
    if (!s->cancelled && s->cb.event != NULL) {
        pl_event e = {index, json, len};
        running = s;
        s->cb.event(s->ctx, &e);
        running = NULL;
    }
    pthread_mutex_unlock(&s->mu);
}

/* No more calls: why (once). */
static void end(subscriber *u, int why)
{
    pl_sub *s = u->s;
    pthread_mutex_lock(&s->mu);
    if (!s->cancelled && !s->ended && s->cb.ended != NULL) {
        running = s;
        s->cb.ended(s->ctx, why);
        running = NULL;
    }
    s->ended = true;
    pthread_mutex_unlock(&s->mu);
}

/* Subscribe to the conversation's actor (found again: it may be a new
 * tree). 0, or the subscription is over (ended said why). */
static int subscribe(subscriber *u)
{
    rt_actor_unref(u->conv);
    u->conv = NULL;
    int r = convs_get(u->p->convs, &u->id, &u->conv);
    if (r == 0)
        r = rt_ask(u->conv, CONV_SUBSCRIBE, CONV_SUB_TOLD, NULL, u->self);
    if (r == RT_EFULL)
        return rt_timer_start(u->self, RETRY_MS, 0, SUB_RETRY, 0) != 0 ? 0 : RT_EFAIL;
    if (r < 0)
        end(u, r == -ENOENT ? -ENOENT : RT_ECLOSED);
    return r;
}

static int unreadable(subscriber *u, pl_outcome why, const char *detail)
{
    rt_log(RT_LOG_ERROR, "subscription", "%s", detail);
    end(u, why == PL_NOT_FOUND ? -ENOENT : -EIO);
    return RT_DONE;
}

/* Deliver a page's events from next on; more later if there is. */
static void deliver_page(subscriber *u, const st_page *pg)
{
    for (uint32_t i = 0; i < pg->n; i++)
        if (pg->ev[i].index >= u->next)
            deliver_one(u, pg->ev[i].index, (const char *)rt_buf_data(pg->bytes) + pg->ev[i].off,
                        pg->ev[i].len);
    if (pg->n > 0 && pg->ev[pg->n - 1].index + 1 > u->next)
        u->next = pg->ev[pg->n - 1].index + 1;
    if (u->next < u->known && !u->more) /* yield: other subscriptions get a turn */
        u->more = rt_notify(u->self, SUB_MORE, 0, NULL) == 0;
}

/* A page of what is owed, from the log; more later if there is. */
static int catch_up(subscriber *u)
{
    if (u->next >= u->known || !u->live || u->reading)
        return 0;
    uint64_t n = u->known - u->next;
    st_page *pg;
    pl_outcome why;
    char detail[256];
    if (u->rd.sc == NULL &&
        conv_read_open(u->p->store, &u->id, &u->rd, NULL, &why, detail, sizeof(detail)) < 0)
        return unreadable(u, why, detail);
    int e = conv_read_page_soon(&u->rd, u->self, SUB_READ, u->next, (uint32_t)(n < PAGE ? n : PAGE),
                                &pg, &why, detail, sizeof(detail));
    if (e < 0)
        return unreadable(u, why, detail);
    if (e == 1) {
        u->reading = true;
        return 0;
    }
    deliver_page(u, pg);
    st_page_free(pg);
    return 0;
}

static int read_answered(subscriber *u, const rt_msg *m)
{
    u->reading = false;
    const conv_read_answer *a = conv_read_answer_of(m);
    if (a == NULL || a->err < 0)
        return unreadable(u, a != NULL ? a->why : PL_FAILED,
                          a != NULL ? a->detail : "out of memory");
    deliver_page(u, a->page);
    return 0;
}

static int sub_init(rt_actor *self, void *arg, void **state)
{
    subscriber *u = arg; /* made by pl_subscribe, freed by sub_stop */
    u->self = self;
    *state = u;
    return subscribe(u) < 0 ? RT_EFAIL : 0;
}

static int sub_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    subscriber *u = state;
    switch (m->kind) {
    case CONV_RESULT: {
        const conv_reply *cr = conv_reply_of(m);
        if (cr == NULL || cr->v.outcome != PL_DONE) {
            end(u, cr != NULL && cr->v.outcome == PL_NOT_FOUND ? -ENOENT : RT_EFULL);
            return RT_DONE;
        }
        convs_refresh(u->p->convs, &u->id, &u->conv);
        if (cr->count > u->known)
            u->known = cr->count;
        u->live = true;
        return catch_up(u);
    }
    case CONV_EVENT:
        if (m->arg + 1 > u->known)
            u->known = m->arg + 1;
        if (u->live && !u->reading && m->arg == u->next && m->buf != NULL) {
            deliver_one(u, m->arg, (const char *)rt_buf_data(m->buf), rt_buf_len(m->buf));
            u->next++;
            return 0;
        }
        return catch_up(u);
    case SUB_MORE:
        u->more = false;
        return catch_up(u);
    case SUB_READ:
        return read_answered(u, m);
    case CONV_DROPPED: /* arg 0: it did not keep up; 1: the conversation stopped */
        u->live = false;
        if (m->arg == 0 && u->s->cb.lagging != NULL) {
            pl_sub *s = u->s;
            pthread_mutex_lock(&s->mu);
            if (!s->cancelled) {
                running = s;
                s->cb.lagging(s->ctx, u->next);
                running = NULL;
            }
            pthread_mutex_unlock(&s->mu);
        }
        return subscribe(u) < 0 ? RT_DONE : 0;
    case SUB_RETRY:
        return subscribe(u) < 0 ? RT_DONE : 0;
    case CONV_SYNC: /* what was published before is handled */
        rt_reply(m, CONV_SYNC_DONE, 0, m->arg, NULL);
        return 0;
    case RT_KIND_ERROR: /* the subscribe could not reach the conversation */
        if (m->arg == CONV_SUBSCRIBE) {
            u->live = false;
            return subscribe(u) < 0 ? RT_DONE : 0;
        }
        return 0;
    default:
        return 0;
    }
}

static void sub_stop(rt_actor *self, void *state)
{
    subscriber *u = state;
    if (u->conv != NULL)
        rt_ask(u->conv, CONV_UNSUBSCRIBE, 0, NULL, self);
    end(u, RT_ECLOSED); /* the instance is closing (or it was ended already) */
    rt_actor_unref(u->conv);
    conv_read_close(&u->rd);
    u->conv = NULL;
    u->live = false;
}

static void sub_free(void *arg)
{
    subscriber *u = arg;
    sub_unref(u->s);
    free(u);
}

static const rt_behaviour sub_behaviour = {
    .name = "subscription",
    .init = sub_init,
    .handle = sub_handle,
    .stop = sub_stop,
};

int pl_subscribe(pl_conv *c, uint64_t from, const pl_sub_callbacks *cb, void *ctx, pl_sub **out)
{
    if (c == NULL || cb == NULL || cb->event == NULL || out == NULL)
        return RT_EINVAL;
    st_conv *sc;
    int r = st_conv_get(c->p->store, &c->id, &sc);
    if (r < 0)
        return r;
    st_conv_release(sc);
    pl_sub *s = calloc(1, sizeof(*s));
    subscriber *u = calloc(1, sizeof(*u));
    if (s == NULL || u == NULL) {
        free(s);
        free(u);
        return RT_ENOMEM;
    }
    atomic_init(&s->refs, 2);
    pthread_mutex_init(&s->mu, NULL);
    s->cb = *cb;
    s->ctx = ctx;
    *u = (subscriber){.s = s, .p = c->p, .id = c->id, .next = from, .known = from};
    rt_spawn_opts so = {.beh = &sub_behaviour,
                        .arg = u,
                        .arg_free = sub_free,
                        .loop = c->p->cb_loop,
                        .mailbox_cap = MAILBOX};
    r = rt_spawn(c->p->rt, &so, &s->actor);
    if (r < 0) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        free(u);
        return r;
    }
    *out = s;
    return 0;
}

void pl_unsubscribe(pl_sub *s)
{
    if (s == NULL)
        return;
    if (running == s) { /* from its own callback: the lock is ours already */
        s->cancelled = true;
    } else {
        pthread_mutex_lock(&s->mu);
        s->cancelled = true;
        pthread_mutex_unlock(&s->mu);
    }
    if (!rt_actor_closed(s->actor)) /* after pl_close, there is nothing to stop */
        rt_actor_stop(s->actor);
    rt_actor_unref(s->actor);
    sub_unref(s);
}
