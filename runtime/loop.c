/*
 * loop.c - a worker thread, its libuv loop and its run queue.
 *
 * Actors with work wait in the loop's run list (a plain FIFO, touched only by
 * the loop's thread). Actors scheduled from other threads go through the
 * `inject` MPSC queue first; the scheduling thread wakes the loop with
 * uv_async_send only if no wake is already pending, so a burst of cross-loop
 * sends costs one wake-up, not one per message.
 *
 * The run list is served from the prepare callback, just before the loop
 * would poll: turns of at most RT_BATCH messages each, in FIFO order, until
 * the list is empty or LOOP_TURNS turns have run, so network callbacks get
 * their turn at least every LOOP_TURNS * RT_BATCH messages. Running more than
 * one round matters: a chain of actors passing one message along would
 * otherwise pay a whole loop iteration (a poll system call) per hop. While
 * work remains, an idle handle keeps the poll from blocking.
 */
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>

_Thread_local rt_loop *rt__tl_loop;
_Thread_local rt_actor *rt__tl_actor;
_Thread_local jmp_buf *rt__tl_jmp;

void rt__loop_run_push(rt_loop *l, rt_actor *a)
{
    atomic_store_explicit(&a->sched.next, NULL, memory_order_relaxed);
    if (l->run_tail != NULL)
        atomic_store_explicit(&l->run_tail->next, &a->sched, memory_order_relaxed);
    else
        l->run_head = &a->sched;
    l->run_tail = &a->sched;
    l->run_len++;
}

static rt_actor *run_pop(rt_loop *l)
{
    rt_mpsc_node *n = l->run_head;
    if (n == NULL)
        return NULL;
    l->run_head = atomic_load_explicit(&n->next, memory_order_relaxed);
    if (l->run_head == NULL)
        l->run_tail = NULL;
    l->run_len--;
    return rt__container_of(n, rt_actor, sched);
}

/* The caller's push found a's mailbox idle: a needs a turn. The run queue
 * holds a reference until that turn is over. */
void rt__schedule(rt_actor *a)
{
    rt_loop *l = a->loop;
    rt_actor_ref(a);
    if (rt__tl_loop == l) {
        rt__loop_run_push(l, a);
        return;
    }
    rt_mpsc_push(&l->inject, &a->sched);
    if (!atomic_exchange(&l->wake_pending, 1))
        uv_async_send(&l->wake);
}

static void drain_inject(rt_loop *l)
{
    rt_mpsc_node *n;
    while ((n = rt_mpsc_pop(&l->inject)) != NULL)
        rt__loop_run_push(l, rt__container_of(n, rt_actor, sched));
}

enum { LOOP_TURNS = 256 };

static void run_turns(rt_loop *l)
{
    rt_actor *a;
    for (int n = 0; n < LOOP_TURNS && (a = run_pop(l)) != NULL; n++)
        rt__actor_turn(l, a);
}

static void on_idle(uv_idle_t *h)
{
    (void)h; /* only there to keep the poll from blocking */
}

static void on_prepare(uv_prepare_t *h)
{
    rt_loop *l = h->data;
    run_turns(l);
    if (l->run_len > 0)
        uv_idle_start(&l->idle, on_idle);
    else
        uv_idle_stop(&l->idle);
}

static void on_closed(uv_handle_t *h)
{
    (void)h;
}

/* Shutdown's last step on this loop: every actor is closed by now, so what
 * is left to run only drains mailboxes. Then the loop's own handles close
 * and uv_run returns. */
static void loop_close(rt_loop *l)
{
    do {
        drain_inject(l);
        run_turns(l);
    } while (l->run_len > 0 || !rt_mpsc_empty(&l->inject));
    uv_close((uv_handle_t *)&l->wake, on_closed);
    uv_close((uv_handle_t *)&l->prepare, on_closed);
    uv_close((uv_handle_t *)&l->idle, on_closed);
    rt__calls_close(l);
}

static void on_wake(uv_async_t *h)
{
    rt_loop *l = h->data;
    /* Clear before draining: a push that lands after the drain then sends a
     * new wake instead of relying on this one. */
    atomic_store(&l->wake_pending, 0);
    drain_inject(l);
    if (atomic_load(&l->closing))
        loop_close(l);
    else if (l->run_len > 0)
        uv_idle_start(&l->idle, on_idle);
}

void rt__loop_close_all(rt_runtime *rt)
{
    /* Callers from outside may still be between their check of `stopping`
     * and their uv_async_send; they finish in a few instructions. */
    while (atomic_load(&rt->inflight) != 0)
        sched_yield();
    for (int i = 0; i < rt->nloops; i++) {
        atomic_store(&rt->loops[i].closing, 1);
        uv_async_send(&rt->loops[i].wake);
    }
}

int rt__loop_init(rt_loop *l, rt_runtime *rt, int index)
{
    l->rt = rt;
    l->index = index;
    int r = uv_loop_init(&l->uv);
    if (r < 0)
        return r;
    uv_async_init(&l->uv, &l->wake, on_wake);
    uv_prepare_init(&l->uv, &l->prepare);
    uv_idle_init(&l->uv, &l->idle);
    l->wake.data = l->prepare.data = l->idle.data = l;
    uv_prepare_start(&l->prepare, on_prepare);
    /* The prepare handle must not keep the loop alive by itself: the wake
     * handle does that until shutdown closes it. */
    uv_unref((uv_handle_t *)&l->prepare);
    rt_mpsc_init(&l->inject, false);
    atomic_init(&l->wake_pending, 0);
    atomic_init(&l->closing, 0);
    return 0;
}

static void loop_main(void *arg)
{
    rt_loop *l = arg;
    char name[16]; /* for top -H, perf, gdb */
    snprintf(name, sizeof(name), "parley-loop%d", l->index);
    pthread_setname_np(pthread_self(), name);
    rt__tl_loop = l;
    uv_run(&l->uv, UV_RUN_DEFAULT);
    rt__tl_loop = NULL;
}

int rt__loop_start(rt_loop *l)
{
    return uv_thread_create(&l->thread, loop_main, l);
}

int rt_current_loop(void)
{
    return rt__tl_loop != NULL ? rt__tl_loop->index : -1;
}
