/*
 * call.c - rt_call: request/reply for code that is not an actor.
 *
 * The reply address is a one-shot actor on the caller's loop: its handler
 * runs the callback with the first message it gets (the reply, an error
 * reply, or its own timeout tick) and exits. If it is closed before that
 * (runtime shutdown), its stop runs the callback with RT_ECLOSED, so the
 * callback runs exactly once whatever happens. A late reply finds the actor
 * closed and is dropped. Even a request that cannot be sent (the target is
 * closed or full) is reported through the callback.
 */
#include "internal.h"

#include <stdlib.h>

typedef struct call_state {
    rt_reply_cb cb;
    void *ctx;
    uint64_t timeout_ms;
    uint32_t req_kind;
    bool done;
} call_state;

static void call_finish(call_state *st, rt_msg *m)
{
    if (st->done)
        return;
    st->done = true;
    st->cb(st->ctx, m);
}

static void call_fail(call_state *st, int32_t status)
{
    rt_msg m = {.kind = RT_KIND_ERROR, .status = status, .arg = st->req_kind};
    call_finish(st, &m);
}

static int call_init(rt_actor *self, void *arg, void **state)
{
    call_state *st = arg;
    *state = st;
    if (st->timeout_ms > 0 && rt_timer_start(self, st->timeout_ms, 0, RT_KIND_USER, 0) == 0)
        return RT_ENOMEM;
    return 0;
}

static int call_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    call_state *st = state;
    if (m->flags & RT_MSGF_TIMER)
        call_fail(st, RT_ETIMEDOUT);
    else
        call_finish(st, m);
    return RT_DONE;
}

static void call_stop(rt_actor *self, void *state)
{
    (void)self;
    call_fail(state, RT_ECLOSED);
}

static const rt_behaviour call_behaviour = {
    .name = "call",
    .init = call_init,
    .handle = call_handle,
    .stop = call_stop,
};

int rt_call(rt_runtime *rt, int loop, rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf,
            uint64_t timeout_ms, rt_reply_cb cb, void *ctx)
{
    if (rt == NULL || to == NULL || cb == NULL || kind < RT_KIND_USER)
        return RT_EINVAL;
    call_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return RT_ENOMEM;
    st->cb = cb;
    st->ctx = ctx;
    st->timeout_ms = timeout_ms;
    st->req_kind = kind;
    rt_actor *replier;
    rt_spawn_opts o = {.beh = &call_behaviour, .arg = st, .arg_free = free, .loop = loop};
    int r = rt_spawn(rt, &o, &replier);
    if (r < 0) {
        free(st);
        return r;
    }
    /* From here on every outcome reaches cb through the replier, so that cb
     * runs once and on its loop, whichever of reply, error or timeout wins. */
    r = rt_ask(to, kind, arg, buf, replier);
    if (r < 0) {
        rt_buf_unref(buf);
        rt__error_reply(replier, kind, r);
    }
    rt_actor_unref(replier);
    return 0;
}
