/*
 * parley_actor.c - the embedder's actors (parley.h): pl_ behaviours run as
 * runtime actors, on the worker loops, under parley's supervisors.
 *
 * A pl_actor is the runtime actor itself, seen through an opaque type.
 * The embedder's message kinds are a range of the runtime's of their own
 * (RT_KIND_RANGE(100) up), so nothing of parley's is ever taken for one
 * of theirs; data is copied into the message.
 */
#include "actors/parley_impl.h"

#include <stdlib.h>
#include <string.h>

#define KIND_BASE RT_KIND_RANGE(100)

typedef struct pl_spec { /* what every (re)start of the actor is made from */
    pl_behaviour beh;
    void *arg;
} pl_spec;

typedef struct wrap {
    const pl_spec *spec;
    void *state;
} wrap;

static rt_actor *rt_of(pl_actor *a)
{
    return (rt_actor *)(void *)a;
}

static pl_actor *pl_of(rt_actor *a)
{
    return (pl_actor *)(void *)a;
}

static int w_init(rt_actor *self, void *arg, void **state)
{
    const pl_spec *spec = arg;
    wrap *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return RT_ENOMEM;
    w->spec = spec;
    w->state = spec->arg;
    int r = spec->beh.init != NULL ? spec->beh.init(pl_of(self), spec->arg, &w->state) : 0;
    if (r != 0) {
        free(w);
        return r < 0 ? r : RT_EFAIL;
    }
    *state = w;
    return 0;
}

static int w_handle(rt_actor *self, void *state, rt_msg *m)
{
    wrap *w = state;
    pl_msg pm = {.arg = m->arg, .status = m->status, .req_ = m};
    if (m->kind == RT_KIND_ERROR) {
        pm.kind = PL_KIND_ERROR;
        if (m->arg >= KIND_BASE && m->arg <= (uint64_t)KIND_BASE + PL_KIND_MAX)
            pm.arg = m->arg - KIND_BASE; /* the request's kind, as it was sent */
    } else if (m->kind >= KIND_BASE && m->kind <= (uint32_t)KIND_BASE + PL_KIND_MAX) {
        pm.kind = (int)(m->kind - KIND_BASE);
    } else {
        return 0; /* nothing of the embedder's */
    }
    if (m->buf != NULL) {
        pm.data = rt_buf_data(m->buf);
        pm.len = rt_buf_len(m->buf);
    }
    int r = w->spec->beh.handle(pl_of(self), w->state, &pm);
    return r == PL_EXIT ? RT_DONE : r > 0 ? 0 : r;
}

static void w_stop(rt_actor *self, void *state)
{
    wrap *w = state;
    if (w->spec->beh.stop != NULL)
        w->spec->beh.stop(pl_of(self), w->state);
    free(w);
}

static const rt_behaviour wrapped = {
    .name = "embedded",
    .init = w_init,
    .handle = w_handle,
    .stop = w_stop,
};

static int spawn(pl_instance *p, const pl_spawn_options *o, rt_actor *parent, pl_actor **out)
{
    if (p == NULL || o == NULL || o->beh == NULL || o->beh->handle == NULL ||
        (unsigned)o->restart > PL_PERMANENT)
        return RT_EINVAL;
    pl_spec *spec = malloc(sizeof(*spec));
    if (spec == NULL)
        return RT_ENOMEM;
    *spec = (pl_spec){*o->beh, o->arg};
    rt_spawn_opts so = {.beh = &wrapped,
                        .arg = spec,
                        .arg_free = free,
                        .loop = pl__loop(p),
                        .parent = parent,
                        .restart = (rt_restart)o->restart,
                        .mailbox_cap = o->mailbox_cap};
    rt_actor *a = NULL;
    int r = rt_spawn(p->rt, &so, out != NULL ? &a : NULL);
    if (r < 0) {
        free(spec);
        return r;
    }
    if (out != NULL)
        *out = pl_of(a);
    return 0;
}

int pl_spawn(pl_instance *p, const pl_spawn_options *o, pl_actor **out)
{
    return spawn(p, o, o != NULL ? rt_of(o->parent) : NULL, out);
}

void pl_actor_release(pl_actor *a)
{
    rt_actor_unref(rt_of(a));
}

int pl_sup_spawn(pl_instance *p, const pl_sup_options *o, pl_actor **out)
{
    if (p == NULL || o == NULL || (unsigned)o->strategy > PL_REST_FOR_ONE ||
        (unsigned)o->restart > PL_PERMANENT)
        return RT_EINVAL;
    rt_sup_opts so = {
        .strategy = (rt_strategy)o->strategy, .intensity = o->intensity, .period_ms = o->period_ms};
    rt_actor *a = NULL;
    int r = rt_sup_spawn(p->rt, &so, pl__loop(p), rt_of(o->parent), (rt_restart)o->restart,
                         out != NULL ? &a : NULL);
    if (r == 0 && out != NULL)
        *out = pl_of(a);
    return r;
}

int pl_conv_attach(pl_conv *c, const pl_spawn_options *o, pl_actor **out)
{
    if (c == NULL)
        return RT_EINVAL;
    rt_actor *sup;
    int r = convs_sup(c->p->convs, &c->id, &sup);
    if (r < 0)
        return r;
    r = spawn(c->p, o, sup, out);
    rt_actor_unref(sup);
    return r;
}

/* A copy of data as a message body (NULL for none); *err on failure. */
static rt_buf *body(const void *data, size_t len, int *err)
{
    *err = 0;
    if (data == NULL || len == 0)
        return NULL;
    rt_buf *b = rt_buf_copy(data, len);
    if (b == NULL)
        *err = RT_ENOMEM;
    return b;
}

static bool kind_ok(int kind)
{
    return kind >= 0 && kind <= PL_KIND_MAX;
}

int pl_send(pl_actor *to, int kind, uint64_t arg, const void *data, size_t len)
{
    if (to == NULL || !kind_ok(kind))
        return RT_EINVAL;
    int err;
    rt_buf *b = body(data, len, &err);
    int r = err < 0 ? err : rt_send(rt_of(to), KIND_BASE + (uint32_t)kind, arg, b);
    if (r < 0)
        rt_buf_unref(b);
    return r;
}

int pl_ask(pl_actor *to, int kind, uint64_t arg, const void *data, size_t len, pl_actor *reply_to)
{
    if (to == NULL || reply_to == NULL || !kind_ok(kind))
        return RT_EINVAL;
    int err;
    rt_buf *b = body(data, len, &err);
    int r = err < 0 ? err : rt_ask(rt_of(to), KIND_BASE + (uint32_t)kind, arg, b, rt_of(reply_to));
    if (r < 0)
        rt_buf_unref(b);
    return r;
}

int pl_reply(const pl_msg *req, int kind, uint64_t arg, const void *data, size_t len)
{
    if (req == NULL || req->req_ == NULL || !kind_ok(kind))
        return RT_EINVAL;
    int err;
    rt_buf *b = body(data, len, &err);
    int r = err < 0 ? err : rt_reply(req->req_, KIND_BASE + (uint32_t)kind, 0, arg, b);
    if (r < 0)
        rt_buf_unref(b);
    return r;
}

uint64_t pl_timer_start(pl_actor *self, uint64_t after_ms, uint64_t repeat_ms, int kind,
                        uint64_t arg)
{
    if (self == NULL || !kind_ok(kind) || rt_self() != rt_of(self))
        return 0;
    return rt_timer_start(rt_of(self), after_ms, repeat_ms, KIND_BASE + (uint32_t)kind, arg);
}

int pl_timer_stop(pl_actor *self, uint64_t id)
{
    if (self == NULL || rt_self() != rt_of(self))
        return RT_EINVAL;
    return rt_timer_stop(rt_of(self), id);
}
