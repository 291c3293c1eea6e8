/*
 * timer.c - actor timers on the home loop's libuv timers.
 *
 * Each timer is a uv_timer_t in a small per-actor list; firing builds an
 * ordinary message tagged with the incarnation (epoch) that started it, so a
 * tick queued before a restart is dropped instead of reaching fresh state.
 * Ids come from one counter; a one-shot timer leaves the list when it fires.
 */
#include "internal.h"

#include <stdlib.h>

struct rt_timer_rec {
    uv_timer_t uv;
    rt_actor *actor;
    rt_timer_rec *next;
    rt_timer_id id;
    uint64_t arg;
    uint32_t kind;
    uint32_t epoch;
    bool repeat;
};

static _Atomic uint64_t next_timer_id = 1;

static void on_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

static void timer_unlink_close(rt_timer_rec *t)
{
    rt_timer_rec **pp = &t->actor->timers;
    while (*pp != t)
        pp = &(*pp)->next;
    *pp = t->next;
    uv_timer_stop(&t->uv);
    uv_close((uv_handle_t *)&t->uv, on_timer_closed);
}

static void on_timer(uv_timer_t *h)
{
    rt_timer_rec *t = h->data;
    rt_actor *a = t->actor;
    rt_msg *m = rt__msg_new(t->kind, t->arg, NULL);
    if (m != NULL) {
        m->sender = 0;
        m->epoch = t->epoch;
        m->flags = RT_MSGF_TIMER;
        if (rt__deliver(a, m) < 0)
            free(m);
    }
    if (!t->repeat)
        timer_unlink_close(t);
}

rt_timer_id rt_timer_start(rt_actor *self, uint64_t after_ms, uint64_t repeat_ms, uint32_t kind,
                           uint64_t arg)
{
    if (self == NULL || rt__tl_actor != self || rt__tl_loop != self->loop)
        return 0;
    rt_timer_rec *t = malloc(sizeof(*t));
    if (t == NULL)
        return 0;
    uv_timer_init(&self->loop->uv, &t->uv);
    t->uv.data = t;
    t->actor = self;
    t->id = atomic_fetch_add_explicit(&next_timer_id, 1, memory_order_relaxed);
    t->arg = arg;
    t->kind = kind;
    t->epoch = atomic_load_explicit(&self->epoch, memory_order_relaxed);
    t->repeat = repeat_ms != 0;
    t->next = self->timers;
    self->timers = t;
    /* the loop caches its clock per iteration; a long round of turns must
     * not make a timeout fire early */
    uv_update_time(&self->loop->uv);
    uv_timer_start(&t->uv, on_timer, after_ms, repeat_ms);
    return t->id;
}

int rt_timer_stop(rt_actor *self, rt_timer_id id)
{
    if (self == NULL || rt__tl_loop != self->loop)
        return RT_ETHREAD;
    for (rt_timer_rec *t = self->timers; t != NULL; t = t->next) {
        if (t->id == id) {
            timer_unlink_close(t);
            return 0;
        }
    }
    return RT_EINVAL;
}

void rt__timers_cancel(rt_actor *a)
{
    while (a->timers != NULL)
        timer_unlink_close(a->timers);
}
