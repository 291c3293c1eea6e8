/*
 * sup.c - supervisors: restart strategies, restart types, intensity.
 *
 * A supervisor's children are linked in start order through the actors'
 * prev/next fields; the list belongs to the supervisor's current state, so a
 * restarted supervisor starts from its specs with a fresh list. Children live
 * on the supervisor's loop, so every decision below runs synchronously on
 * one thread: stopping a running sibling is a direct call of its stop, a
 * restart a direct call of its init.
 *
 * Shutdown (a STOP message) is the one asynchronous path: the supervisor
 * sends STOP to its last child and waits for its exit before the next, so
 * each child handles what was queued before it and children stop in reverse
 * start order, as in OTP.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct sup_cfg {
    rt_strategy strategy;
    uint32_t intensity; /* 0: unlimited (roots) */
    uint64_t period_ms;
    size_t nspecs;
    rt_child_spec specs[];
} sup_cfg;

typedef struct sup_state {
    const sup_cfg *cfg;
    rt_actor *first, *last;   /* children in start order */
    rt_actor *stopping_child; /* during shutdown: the child told to stop */
    bool stopping;
    size_t nstamps; /* recent restart times, oldest first */
    uint64_t stamps[];
} sup_state;

static const sup_cfg root_cfg = {RT_ONE_FOR_ONE, 0, 0, 0};

static void close_all(sup_state *s)
{
    while (s->last != NULL)
        rt__actor_close(s->last); /* unlinks it */
}

static void kick(rt_actor *sup)
{
    rt_msg *m = rt__msg_new(RT_SYS_KICK, 0, NULL);
    if (m != NULL && rt__deliver(sup, m) < 0)
        free(m);
}

/* A child's START: one pending start less, and the child joins the list if
 * it belongs to this incarnation. A stopping supervisor still adopts it, so
 * that what was queued for the child is handled, and is kicked to go on: it
 * may have been waiting for this very start. */
bool rt__sup_adopt(rt_actor *sup, rt_actor *child)
{
    atomic_fetch_sub(&sup->pending, 1);
    if (sup->status != RT_A_RUNNING)
        return false;
    sup_state *s = sup->state;
    uint32_t epoch = atomic_load_explicit(&sup->epoch, memory_order_relaxed);
    if (s->stopping)
        kick(sup);
    if (child->parent_epoch != 0 && child->parent_epoch != epoch)
        return false;
    child->prev = s->last;
    child->next = NULL;
    if (s->last != NULL)
        s->last->next = child;
    else
        s->first = child;
    s->last = child;
    child->linked = 1;
    return true;
}

void rt__sup_unlink(rt_actor *sup, rt_actor *child)
{
    sup_state *s = sup->state;
    if (child->prev != NULL)
        child->prev->next = child->next;
    else
        s->first = child->next;
    if (child->next != NULL)
        child->next->prev = child->prev;
    else
        s->last = child->prev;
    child->prev = child->next = NULL;
    child->linked = 0;
    if (s->stopping_child == child)
        s->stopping_child = NULL;
    rt_actor_unref(child);
}

rt_actor *rt_sup_child(rt_actor *sup, size_t i)
{
    if (sup->beh != &rt__sup_behaviour || sup->status != RT_A_RUNNING || rt__tl_loop != sup->loop)
        return NULL;
    sup_state *s = sup->state;
    rt_actor *c = s->first;
    while (c != NULL && i-- > 0)
        c = c->next;
    return c != NULL ? rt_actor_ref(c) : NULL;
}

/* Room for one more restart within the period? Records it if so. */
static bool intensity_ok(sup_state *s)
{
    const sup_cfg *cfg = s->cfg;
    if (cfg->intensity == 0)
        return true;
    uint64_t now = uv_hrtime() / 1000000;
    size_t keep = 0;
    while (keep < s->nstamps && now - s->stamps[keep] >= cfg->period_ms)
        keep++;
    memmove(s->stamps, s->stamps + keep, (s->nstamps - keep) * sizeof(s->stamps[0]));
    s->nstamps -= keep;
    if (s->nstamps >= cfg->intensity)
        return false;
    s->stamps[s->nstamps++] = now;
    return true;
}

static void restart(rt_actor *c)
{
    rt__actor_teardown(c);
    int r = rt__actor_init(c);
    if (r < 0)
        rt__actor_notify_exit(c, r); /* comes back as an EXIT, counted again */
    else
        rt__actor_resume(c);
}

/* Restart c and, per strategy, its siblings: first stop the ones that go
 * down with it (reverse start order), then start them all in start order.
 * Temporary siblings are not restarted but closed, as in OTP. */
static void apply_strategy(sup_state *s, rt_actor *c)
{
    rt_actor *from = c;
    switch (s->cfg->strategy) {
    case RT_ONE_FOR_ONE:
        restart(c);
        return;
    case RT_ONE_FOR_ALL:
        from = s->first;
        break;
    case RT_REST_FOR_ONE:
        break;
    }
    for (rt_actor *x = s->last; x != NULL; x = x == from ? NULL : x->prev)
        rt__actor_teardown(x);
    for (rt_actor *x = from, *next; x != NULL; x = next) {
        next = x->next;
        if (x != c && x->restart == RT_TEMPORARY)
            rt__actor_close(x);
        else
            restart(x);
    }
}

/* Shutdown: stop the last child and wait for its exit; RT_DONE when none is
 * left, which makes the supervisor itself exit. Children spawned but not yet
 * started are waited for first: their START adopts them and calls us again,
 * so that they too stop in reverse start order. */
static int stop_next(rt_actor *self, sup_state *s)
{
    if (atomic_load(&self->pending) > 0)
        return 0;
    while (s->last != NULL) {
        rt_actor *c = s->last;
        if (c->status == RT_A_RUNNING) {
            if (s->stopping_child == c)
                return 0;
            rt_msg *m = rt__msg_new(RT_SYS_STOP, 0, NULL);
            if (m != NULL && rt__deliver(c, m) == 0) {
                s->stopping_child = c;
                return 0;
            }
            free(m);
        }
        rt__actor_close(c);
    }
    return RT_DONE;
}

static void report_failure(rt_actor *c, int reason)
{
    rt_runtime *rt = c->loop->rt;
    if (rt->opts.on_failure != NULL)
        rt->opts.on_failure(rt->opts.ctx, c, reason);
}

static int on_child_exit(rt_actor *self, sup_state *s, rt_actor *c, int reason, uint32_t epoch)
{
    /* An exit from an incarnation that a restart has replaced since, or of a
     * child that is gone: nothing to decide. */
    if (!c->linked || c->parent != self || c->status != RT_A_PARKED ||
        atomic_load_explicit(&c->epoch, memory_order_relaxed) != epoch)
        return 0;
    if (s->stopping) {
        rt__actor_close(c);
        return stop_next(self, s);
    }
    if (reason < 0 && s->cfg->intensity == 0)
        report_failure(c, reason); /* a root: tell the embedder */
    bool again = c->restart == RT_PERMANENT || (c->restart == RT_TRANSIENT && reason < 0);
    if (!again) {
        rt__actor_close(c);
        return 0;
    }
    if (!intensity_ok(s)) {
        rt_log(RT_LOG_WARN, "runtime",
               "supervisor gives up id=%llu restarts=%u period_ms=%llu: closing its children",
               (unsigned long long)self->id, s->cfg->intensity,
               (unsigned long long)s->cfg->period_ms);
        close_all(s);
        return RT_EFAIL;
    }
    apply_strategy(s, c);
    return 0;
}

static int sup_init(rt_actor *self, void *arg, void **state)
{
    const sup_cfg *cfg = arg;
    sup_state *s = calloc(1, sizeof(*s) + cfg->intensity * sizeof(s->stamps[0]));
    if (s == NULL)
        return RT_ENOMEM;
    s->cfg = cfg;
    *state = s;
    for (size_t i = 0; i < cfg->nspecs; i++) {
        const rt_child_spec *cs = &cfg->specs[i];
        rt_spawn_opts o = {.beh = cs->beh,
                           .arg = cs->arg,
                           .parent = self,
                           .restart = cs->restart,
                           .mailbox_cap = cs->mailbox_cap};
        int r = rt_spawn(self->loop->rt, &o, NULL);
        if (r < 0) {
            /* children spawned so far find no running parent at START and
             * close themselves */
            free(s);
            return r;
        }
    }
    return 0;
}

static int sup_handle(rt_actor *self, void *state, rt_msg *m)
{
    sup_state *s = state;
    switch (m->kind) {
    case RT_SYS_STOP:
        s->stopping = true;
        return stop_next(self, s);
    case RT_SYS_EXIT:
        return on_child_exit(self, s, (rt_actor *)rt_buf_wdata(m->buf), m->status, m->epoch);
    case RT_SYS_KICK:
        return s->stopping ? stop_next(self, s) : 0;
    default:
        return 0; /* a supervisor has no protocol of its own */
    }
}

static void sup_stop(rt_actor *self, void *state)
{
    (void)self;
    sup_state *s = state;
    if (s == NULL)
        return;
    close_all(s);
    free(s);
}

const rt_behaviour rt__sup_behaviour = {
    .name = "supervisor",
    .init = sup_init,
    .handle = sup_handle,
    .stop = sup_stop,
    .flags = RT_BEH_SYSMSG,
};

int rt_sup_spawn(rt_runtime *rt, const rt_sup_opts *o, int loop, rt_actor *parent,
                 rt_restart restart, rt_actor **out)
{
    if (o == NULL || o->strategy > RT_REST_FOR_ONE || (o->nchildren > 0 && o->children == NULL))
        return RT_EINVAL;
    for (size_t i = 0; i < o->nchildren; i++)
        if (o->children[i].beh == NULL || o->children[i].beh->handle == NULL)
            return RT_EINVAL;
    sup_cfg *cfg = malloc(sizeof(*cfg) + o->nchildren * sizeof(cfg->specs[0]));
    if (cfg == NULL)
        return RT_ENOMEM;
    cfg->strategy = o->strategy;
    cfg->intensity = o->intensity != 0 ? o->intensity : 1;
    cfg->period_ms = o->period_ms != 0 ? o->period_ms : 5000;
    cfg->nspecs = o->nchildren;
    if (o->nchildren > 0)
        memcpy(cfg->specs, o->children, o->nchildren * sizeof(cfg->specs[0]));
    rt_spawn_opts so = {.beh = &rt__sup_behaviour,
                        .arg = cfg,
                        .arg_free = free,
                        .loop = loop,
                        .parent = parent,
                        .restart = restart};
    int r = rt_spawn(rt, &so, out);
    if (r < 0)
        free(cfg);
    return r;
}

int rt__sup_new_root(rt_loop *l)
{
    rt_spawn_opts o = {.beh = &rt__sup_behaviour, .arg = (void *)&root_cfg};
    rt_actor *a = rt__actor_new(l, &o, NULL);
    rt_msg *start = rt__msg_new(RT_SYS_START, 0, NULL);
    if (a == NULL || start == NULL) {
        free(a);
        free(start);
        return RT_ENOMEM;
    }
    l->root = a; /* the loop holds the reference it was born with */
    return rt__deliver(a, start);
}
