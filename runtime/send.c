/*
 * send.c - putting messages into mailboxes: send, ask, reply, promises.
 *
 * Delivery is one atomic exchange on the receiver's mailbox; the push that
 * finds the mailbox idle schedules the receiver (loop.c). Bounded mailboxes
 * add one counter: only ordinary sends count against the bound, while the
 * runtime's own messages (START, STOP, exits), replies and timer ticks pass,
 * because refusing those would lose an answer someone is owed.
 *
 * Every request is answered exactly once: if the handler neither replied nor
 * took a promise, or the message is dropped because the receiver closed, the
 * runtime replies RT_KIND_ERROR with the reason.
 *
 * Calls from threads that are not loops of the runtime (an embedder's thread,
 * a test) register in rt->inflight so that shutdown never closes a loop's
 * wake handle under them.
 */
#include "internal.h"

#include <stdlib.h>

rt_msg *rt__msg_new(uint32_t kind, uint64_t arg, rt_buf *buf)
{
    rt_msg *m = malloc(sizeof(*m));
    if (m == NULL)
        return NULL;
    m->kind = kind;
    m->status = 0;
    m->sender = rt__tl_actor != NULL ? rt__tl_actor->id : 0;
    m->reply_to = NULL;
    m->arg = arg;
    m->buf = buf;
    m->epoch = 0;
    m->flags = 0;
    m->tag = 0;
    return m;
}

bool rt__outside(const rt_runtime *rt)
{
    return rt__tl_loop == NULL || rt__tl_loop->rt != rt;
}

static int deliver_local(rt_actor *to, rt_msg *m, bool bounded)
{
    if (atomic_load_explicit(&to->closed, memory_order_acquire))
        return RT_ECLOSED;
    if (bounded && to->qcap != 0) {
        if (atomic_fetch_add_explicit(&to->qlen, 1, memory_order_relaxed) >= to->qcap) {
            atomic_fetch_sub_explicit(&to->qlen, 1, memory_order_relaxed);
            return RT_EFULL;
        }
        m->flags |= RT_MSGF_COUNTED;
    }
    if (rt_mpsc_push(&to->mbox, &m->node))
        rt__schedule(to);
    return RT_OK;
}

static int deliver(rt_actor *to, rt_msg *m, bool bounded)
{
    rt_runtime *rt = to->loop->rt;
    if (!rt__outside(rt))
        return deliver_local(to, m, bounded);
    /* seq_cst pairs with shutdown: either we see `stopping`, or shutdown
     * sees us in flight and waits before closing any loop's handles. */
    atomic_fetch_add(&rt->inflight, 1);
    int r = atomic_load(&rt->stopping) ? RT_ECLOSED : deliver_local(to, m, bounded);
    atomic_fetch_sub(&rt->inflight, 1);
    return r;
}

int rt__deliver(rt_actor *to, rt_msg *m)
{
    return deliver(to, m, false);
}

/* Free a message the receiver is done with (or will never handle), first
 * answering it if it is a request nobody answered. */
void rt__msg_finish(rt_msg *m, int32_t status)
{
    if (m->reply_to != NULL) {
        rt__error_reply(m->reply_to, m->kind, status, m->tag);
        rt_actor_unref(m->reply_to);
    }
    rt_buf_unref(m->buf);
    free(m);
}

void rt__error_reply(rt_actor *to, uint32_t req_kind, int32_t status, uint64_t tag)
{
    rt_msg *m = rt__msg_new(RT_KIND_ERROR, req_kind, NULL);
    if (m == NULL)
        return;
    m->status = status;
    m->tag = tag;
    if (deliver(to, m, false) < 0)
        free(m);
}

static int post(rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf, rt_actor *reply_to,
                bool bounded, int32_t status, uint64_t tag)
{
    if (to == NULL)
        return RT_EINVAL;
    rt_msg *m = rt__msg_new(kind, arg, buf);
    if (m == NULL)
        return RT_ENOMEM;
    m->status = status;
    m->tag = tag;
    m->reply_to = reply_to != NULL ? rt_actor_ref(reply_to) : NULL;
    int r = deliver(to, m, bounded);
    if (r < 0) {
        if (m->reply_to != NULL)
            rt_actor_unref(m->reply_to);
        free(m); /* buf stays the caller's */
    }
    return r;
}

int rt_send(rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf)
{
    if (kind < RT_KIND_USER)
        return RT_EINVAL;
    return post(to, kind, arg, buf, NULL, true, 0, 0);
}

int rt_notify(rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf)
{
    if (kind < RT_KIND_USER)
        return RT_EINVAL;
    return post(to, kind, arg, buf, NULL, false, 0, 0);
}

int rt_ask(rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf, rt_actor *reply_to)
{
    if (kind < RT_KIND_USER || reply_to == NULL)
        return RT_EINVAL;
    return post(to, kind, arg, buf, reply_to, true, 0, 0);
}

int rt__ask_tagged(rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf, rt_actor *reply_to,
                   uint64_t tag)
{
    return post(to, kind, arg, buf, reply_to, true, 0, tag);
}

int rt_actor_stop(rt_actor *a)
{
    return post(a, RT_SYS_STOP, 0, NULL, NULL, false, 0, 0);
}

rt_promise rt_msg_promise(rt_msg *req)
{
    rt_promise p = {req->reply_to, req->kind, req->tag};
    req->reply_to = NULL;
    return p;
}

int rt_promise_reply(rt_promise *p, uint32_t kind, int32_t status, uint64_t arg, rt_buf *buf)
{
    if (p->to == NULL)
        return RT_EINVAL;
    int r = post(p->to, kind, arg, buf, NULL, false, status, p->tag);
    rt_actor_unref(p->to);
    p->to = NULL;
    return r;
}

int rt_promise_forward(rt_promise *p, rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf)
{
    if (p->to == NULL || kind < RT_KIND_USER)
        return RT_EINVAL;
    int r = post(to, kind, arg, buf, p->to, true, 0, p->tag);
    if (r == 0) {
        rt_actor_unref(p->to); /* the new request holds its own */
        *p = (rt_promise){0};
    }
    return r;
}

void rt_promise_fail(rt_promise *p, int32_t status)
{
    if (p->to == NULL)
        return;
    rt__error_reply(p->to, p->req_kind, status < 0 ? status : RT_EFAIL, p->tag);
    rt_actor_unref(p->to);
    p->to = NULL;
}

int rt_reply(rt_msg *req, uint32_t kind, int32_t status, uint64_t arg, rt_buf *buf)
{
    if (req->reply_to == NULL)
        return RT_EINVAL;
    rt_promise p = rt_msg_promise(req);
    return rt_promise_reply(&p, kind, status, arg, buf);
}
