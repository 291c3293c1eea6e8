/*
 * convs_call.c - a request to a conversation by its id, that survives the
 * conversation's tree retiring at rest.
 *
 * A tree at rest stops its actors (conv_idle.c), and the next lookup
 * starts a new one. A request that took the old actor just before, and
 * reached it after it closed, is answered RT_ECLOSED by the runtime: none
 * of it was handled. convs_call sends such a request again, to the actor
 * a lookup finds then, so that no caller (HTTP, the library, a WebSocket,
 * a fork) sees the retirement. One that reaches the old actor before it
 * closes is passed on by the actor itself (conv_pass_on). Past the bound
 * of open logs a quiet tree retires as soon as it is quiet, so the tree a
 * lookup finds may be retiring too: a request is sent up to CALL_TRIES
 * times (seen: 1 creation in about 40,000 of `parley bench conversations`
 * failed with one try more).
 */
#include "conv_impl.h"

#include <stdlib.h>

enum { CALL_TRIES = 8 };

typedef struct conv_call {
    convs *s;
    rt_uuid id;
    int loop;
    uint32_t kind;
    uint64_t arg;
    rt_buf *buf; /* a reference of our own, for the second send; or NULL */
    uint64_t timeout_ms;
    rt_reply_cb cb;
    void *ctx;
    int tries; /* sends so far */
} conv_call;

static void on_reply(void *ctx, rt_msg *m);

int (*convs_call_find)(convs *s, const rt_uuid *id, rt_actor **out);

static int find(convs *s, const rt_uuid *id, rt_actor **out)
{
    return (convs_call_find != NULL ? convs_call_find : convs_get)(s, id, out);
}

static int send_to(conv_call *k, rt_actor *a)
{
    k->tries++;
    rt_buf *b = k->buf != NULL ? rt_buf_ref(k->buf) : NULL;
    int e = rt_call(k->s->rt, k->loop, a, k->kind, k->arg, b, k->timeout_ms, on_reply, k);
    if (e < 0)
        rt_buf_unref(b); /* rt_call did not take it */
    return e;
}

static void on_reply(void *ctx, rt_msg *m)
{
    conv_call *k = ctx;
    if (m->kind == RT_KIND_ERROR && m->status == RT_ECLOSED && k->tries < CALL_TRIES) {
        rt_actor *a;
        if (find(k->s, &k->id, &a) == 0) {
            int e = send_to(k, a);
            rt_actor_unref(a);
            if (e == 0)
                return;
        }
        /* gone, or unreachable now: the first answer stands */
    }
    k->cb(k->ctx, m);
    rt_buf_unref(k->buf);
    free(k);
}

int convs_call(convs *s, const rt_uuid *id, int loop, uint32_t kind, uint64_t arg, rt_buf *buf,
               uint64_t timeout_ms, rt_reply_cb cb, void *ctx)
{
    rt_actor *a;
    int e = find(s, id, &a);
    if (e < 0)
        return e;
    conv_call *k = malloc(sizeof(*k));
    if (k == NULL) {
        rt_actor_unref(a);
        return RT_ENOMEM;
    }
    *k = (conv_call){s, *id, loop, kind, arg, buf, timeout_ms, cb, ctx, 0};
    e = send_to(k, a);
    rt_actor_unref(a);
    if (e < 0)
        free(k); /* buf stays the caller's, as with rt_call */
    return e;
}

void convs_refresh(convs *s, const rt_uuid *id, rt_actor **held)
{
    rt_actor *a;
    if (convs_get(s, id, &a) != 0)
        return;
    rt_actor_unref(*held);
    *held = a;
}
