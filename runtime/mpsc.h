/*
 * mpsc.h - intrusive multi-producer single-consumer queue (Vyukov), the
 * mailbox of every actor and the cross-thread run queue of every loop.
 *
 * Producers on any thread push with one atomic exchange; the single consumer
 * (the owning loop's thread) pops without atomics beyond acquire loads. The
 * queue embeds its own stub node, so a popped node is no longer referenced by
 * the queue and may be freed or reused at once.
 *
 * The low bit of `head` is the "empty and idle" mark used by mailboxes: the
 * consumer sets it (rt_mpsc_mark_idle) when it has drained the queue and
 * stops caring; the next push sees the bit in the value it exchanged out and
 * so learns, for free, that it must schedule the consumer. Exactly one push
 * observes the mark, which is what makes "a push that finds the mailbox empty
 * schedules the actor" race-free.
 *
 * Memory ordering: the exchange in push is acq_rel (it publishes the node's
 * cleared `next` and orders against the previous pusher); the link store is a
 * release that pairs with the consumer's acquire load of `next`.
 */
#ifndef RT_MPSC_H
#define RT_MPSC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_mpsc_node {
    struct rt_mpsc_node *_Atomic next;
} rt_mpsc_node;

typedef struct rt_mpsc {
    _Atomic uintptr_t head; /* last pushed node; low bit = idle mark */
    rt_mpsc_node *tail;     /* consumer-owned: next node to pop */
    rt_mpsc_node stub;
} rt_mpsc;

#define RT_MPSC_IDLE ((uintptr_t)1)

/* A fresh queue is empty; `idle` sets the mark so the first push reports it. */
static inline void rt_mpsc_init(rt_mpsc *q, bool idle)
{
    atomic_store_explicit(&q->stub.next, NULL, memory_order_relaxed);
    q->tail = &q->stub;
    atomic_store_explicit(&q->head, (uintptr_t)&q->stub | (idle ? RT_MPSC_IDLE : 0),
                          memory_order_release);
}

/* Any thread. Returns true when the queue was marked idle: the caller has
 * just taken over the duty of scheduling the consumer. */
static inline bool rt_mpsc_push(rt_mpsc *q, rt_mpsc_node *n)
{
    atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
    uintptr_t prev = atomic_exchange_explicit(&q->head, (uintptr_t)n, memory_order_acq_rel);
    rt_mpsc_node *p = (rt_mpsc_node *)(prev & ~RT_MPSC_IDLE);
    atomic_store_explicit(&p->next, n, memory_order_release);
    return (prev & RT_MPSC_IDLE) != 0;
}

/* Consumer only. Returns the oldest node, or NULL when the queue is empty or
 * a producer is between its exchange and its link (then the node appears
 * shortly; rt_mpsc_mark_idle fails meanwhile, so nothing is lost). */
static inline rt_mpsc_node *rt_mpsc_pop(rt_mpsc *q)
{
    rt_mpsc_node *tail = q->tail;
    rt_mpsc_node *next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (tail == &q->stub) {
        if (next == NULL)
            return NULL;
        q->tail = next;
        tail = next;
        next = atomic_load_explicit(&next->next, memory_order_acquire);
    }
    if (next != NULL) {
        q->tail = next;
        return tail;
    }
    /* tail is the last linked node: hand it out only if nobody pushed after
     * it, re-inserting the stub so the queue never becomes node-less. */
    if ((uintptr_t)tail != atomic_load_explicit(&q->head, memory_order_acquire))
        return NULL;
    rt_mpsc_push(q, &q->stub);
    next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (next != NULL) {
        q->tail = next;
        return tail;
    }
    return NULL;
}

/* Consumer only: set the idle mark if the queue is empty. Returns false when
 * something was pushed meanwhile; the consumer must then keep running. */
static inline bool rt_mpsc_mark_idle(rt_mpsc *q)
{
    if (q->tail != &q->stub || atomic_load_explicit(&q->stub.next, memory_order_acquire))
        return false;
    uintptr_t expect = (uintptr_t)&q->stub;
    return atomic_compare_exchange_strong_explicit(&q->head, &expect, expect | RT_MPSC_IDLE,
                                                   memory_order_acq_rel, memory_order_acquire);
}

/* Consumer only, or with no producers left: is anything (possibly still
 * being linked) in the queue? */
static inline bool rt_mpsc_empty(rt_mpsc *q)
{
    uintptr_t h = atomic_load_explicit(&q->head, memory_order_acquire) & ~RT_MPSC_IDLE;
    return q->tail == &q->stub && h == (uintptr_t)&q->stub;
}

#endif
