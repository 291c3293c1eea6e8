/*
 * runtime.c - creating the loops, and shutting them down cleanly.
 *
 * Shutdown happens in three steps:
 *  1. `stopping` is set: calls from outside the loops are refused from then
 *     on, and every root supervisor gets STOP.
 *  2. Each root stops its children in reverse start order, each handling
 *     what was queued before its STOP (sup.c), then exits. Actors keep
 *     talking to each other meanwhile; messages to ones already closed are
 *     dropped, with error replies to requests among them.
 *  3. When the last root has exited, no actor is left running anywhere: each
 *     loop drains what is still queued, closes its handles, and its thread
 *     returns. Nothing can wake a loop after this point, which is what makes
 *     closing the wake handles safe.
 */
#include "internal.h"

#include <stdlib.h>

rt_loop *rt__pick_loop(rt_runtime *rt, int index)
{
    if (index >= 0)
        return index < rt->nloops ? &rt->loops[index] : NULL;
    if (index != RT_LOOP_ANY)
        return NULL;
    if (!rt__outside(rt))
        return rt__tl_loop;
    uint32_t n = atomic_fetch_add_explicit(&rt->next_loop, 1, memory_order_relaxed);
    return &rt->loops[n % (uint32_t)rt->nloops];
}

void rt__loop_tree_done(rt_loop *l)
{
    rt_runtime *rt = l->rt;
    if (atomic_fetch_sub(&rt->trees_running, 1) == 1)
        rt__loop_close_all(rt);
}

int rt_runtime_new(const rt_opts *o, rt_runtime **out)
{
    rt_runtime *rt = calloc(1, sizeof(*rt));
    if (rt == NULL)
        return RT_ENOMEM;
    if (o != NULL)
        rt->opts = *o;
    int n = rt->opts.loops > 0 ? rt->opts.loops : (int)uv_available_parallelism();
    rt->loops = calloc((size_t)n, sizeof(rt_loop));
    if (rt->loops == NULL) {
        free(rt);
        return RT_ENOMEM;
    }
    rt->nloops = n;
    atomic_init(&rt->trees_running, n);
    for (int i = 0; i < n; i++) {
        rt_loop *l = &rt->loops[i];
        int r = rt__loop_init(l, rt, i);
        if (r == 0)
            r = rt__sup_new_root(l);
        if (r == 0 && (l->stop_msg = rt__msg_new(RT_SYS_STOP, 0, NULL)) == NULL)
            r = RT_ENOMEM;
        if (r == 0)
            r = rt__calls_start(l); /* the root's first child: stopped last */
        if (r < 0) {
            /* nothing runs yet: at this size a failure is fatal */
            rt_log(RT_LOG_ERROR, "runtime", "cannot create loop %d: %s", i, rt_strerror(r));
            abort();
        }
    }
    for (int i = 0; i < n; i++) {
        int r = rt__loop_start(&rt->loops[i]);
        if (r < 0) {
            rt_log(RT_LOG_ERROR, "runtime", "cannot start thread %d: %s", i, uv_strerror(r));
            abort();
        }
    }
    *out = rt;
    return 0;
}

void rt_runtime_shutdown(rt_runtime *rt)
{
    atomic_fetch_add(&rt->inflight, 1);
    if (!atomic_exchange(&rt->stopping, 1)) {
        for (int i = 0; i < rt->nloops; i++) {
            rt_loop *l = &rt->loops[i];
            /* allocated at start, so that stopping cannot fail; a root is
             * never closed before it handled this very message */
            rt_msg *m = l->stop_msg;
            l->stop_msg = NULL;
            if (rt_mpsc_push(&l->root->mbox, &m->node))
                rt__schedule(l->root);
        }
    }
    atomic_fetch_sub(&rt->inflight, 1);
}

void rt_runtime_wait(rt_runtime *rt)
{
    rt_runtime_shutdown(rt);
    if (atomic_exchange(&rt->joined, 1))
        return;
    for (int i = 0; i < rt->nloops; i++)
        uv_thread_join(&rt->loops[i].thread);
}

void rt_runtime_free(rt_runtime *rt)
{
    if (rt == NULL)
        return;
    rt_runtime_wait(rt);
    for (int i = 0; i < rt->nloops; i++) {
        rt_loop *l = &rt->loops[i];
        if (uv_loop_close(&l->uv) != 0)
            rt_log(RT_LOG_WARN, "runtime", "loop %d closed with handles still open", i);
        rt__calls_free(l);
        rt_actor_unref(l->root);
    }
    free(rt->loops);
    free(rt);
}

int rt_runtime_loops(const rt_runtime *rt)
{
    return rt->nloops;
}

uv_loop_t *rt_runtime_uv(rt_runtime *rt, int i)
{
    return i >= 0 && i < rt->nloops ? &rt->loops[i].uv : NULL;
}
