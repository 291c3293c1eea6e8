/*
 * actor.c - an actor's life: spawn, turns, exit, close, free.
 *
 * A turn runs on the home loop and handles at most RT_BATCH messages. When
 * the mailbox runs dry the turn marks it idle, handing the duty of
 * scheduling to the next sender; if that fails (a message raced in) or the
 * batch was used up, the actor goes to the back of the run list.
 *
 * An actor that exits or fails is "parked": its state is freed, its timers
 * cancelled, and its supervisor, told by an EXIT message, restarts it (init
 * again) or closes it. A parked actor does not handle messages; if one of
 * its turns comes up meanwhile, the turn keeps the mailbox (and the run
 * reference) and returns, and resuming the actor puts it back to work. All
 * of this happens on the home loop, which supervisor and children share.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

static _Atomic uint64_t next_actor_id = 1;

rt_actor *rt_actor_ref(rt_actor *a)
{
    atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
    return a;
}

/* The last reference: nobody can push any more, so whatever is still in the
 * mailbox is answered and freed here. */
static void actor_free(rt_actor *a)
{
    rt_mpsc_node *n;
    while ((n = rt_mpsc_pop(&a->mbox)) != NULL)
        rt__msg_finish(rt__container_of(n, rt_msg, node), RT_ECLOSED);
    if (a->arg_free != NULL)
        a->arg_free(a->arg);
    free(a);
}

void rt_actor_unref(rt_actor *a)
{
    if (a != NULL && atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1)
        actor_free(a);
}

uint64_t rt_actor_id(const rt_actor *a)
{
    return a->id;
}

bool rt_actor_closed(const rt_actor *a)
{
    return atomic_load_explicit(&((rt_actor *)a)->closed, memory_order_acquire) != 0;
}

int rt_actor_loop(const rt_actor *a)
{
    return a->loop->index;
}

rt_runtime *rt_actor_runtime(const rt_actor *a)
{
    return a->loop->rt;
}

rt_actor *rt_self(void)
{
    return rt__tl_actor;
}

/* Refs at birth: one for the parent's child list (given back when the child
 * is closed), one for the caller if it asked, one taken by the scheduling of
 * START. The child holds a reference to its parent until it is closed. */
rt_actor *rt__actor_new(rt_loop *l, const rt_spawn_opts *o, rt_actor *parent)
{
    rt_actor *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    rt_mpsc_init(&a->mbox, true);
    a->loop = l;
    a->beh = o->beh;
    a->arg = o->arg;
    a->arg_free = o->arg_free;
    a->id = atomic_fetch_add_explicit(&next_actor_id, 1, memory_order_relaxed);
    atomic_init(&a->refs, 1);
    a->restart = (uint8_t)o->restart;
    a->qcap = o->mailbox_cap;
    if (parent != NULL) {
        a->parent = rt_actor_ref(parent);
        /* Spawned on the parent's loop, the child belongs to the parent's
         * current incarnation; from elsewhere that is not knowable, and the
         * child joins whichever incarnation runs when it starts (0). */
        if (rt__tl_loop == l)
            a->parent_epoch = atomic_load_explicit(&parent->epoch, memory_order_relaxed);
    }
    return a;
}

int rt_spawn(rt_runtime *rt, const rt_spawn_opts *o, rt_actor **out)
{
    if (rt == NULL || o == NULL || o->beh == NULL || o->beh->handle == NULL ||
        o->restart > RT_PERMANENT)
        return RT_EINVAL;
    rt_actor *parent = o->parent;
    if (parent != NULL && (parent->beh != &rt__sup_behaviour || parent->loop->rt != rt))
        return RT_EINVAL;
    rt_loop *l = parent != NULL ? parent->loop : rt__pick_loop(rt, o->loop);
    if (l == NULL)
        return RT_EINVAL;
    if (parent == NULL)
        parent = l->root;
    rt_actor *a = rt__actor_new(l, o, parent);
    rt_msg *start = a != NULL ? rt__msg_new(RT_SYS_START, 0, NULL) : NULL;
    if (start == NULL) {
        if (a != NULL) {
            rt_actor_unref(a->parent);
            free(a);
        }
        return RT_ENOMEM;
    }
    /* From outside, the check of `stopping` and the wake-up that follows
     * happen under the in-flight guard, so the loops are still there. Past
     * the check the spawn cannot fail: START always runs, if only to find
     * the parent gone (then the actor is started and stopped at once). */
    bool outside = rt__outside(rt);
    if (outside) {
        atomic_fetch_add(&rt->inflight, 1);
        if (atomic_load(&rt->stopping)) {
            atomic_fetch_sub(&rt->inflight, 1);
            free(start);
            rt_actor_unref(a->parent);
            free(a);
            return RT_ECLOSED;
        }
    }
    /* the parent does not finish a shutdown while this START is pending */
    atomic_fetch_add(&parent->pending, 1);
    if (out != NULL)
        *out = rt_actor_ref(a);
    if (rt_mpsc_push(&a->mbox, &start->node))
        rt__schedule(a);
    if (outside)
        atomic_fetch_sub(&rt->inflight, 1);
    return 0;
}

/* Build fresh state: a new incarnation. Runs on the home loop with the actor
 * as rt_self, so that its sends and timers are attributed to it. */
int rt__actor_init(rt_actor *a)
{
    rt_actor *saved = rt__tl_actor;
    jmp_buf *saved_jmp = rt__tl_jmp;
    jmp_buf jb;
    void *state = a->arg;
    int r = 0;
    atomic_store_explicit(&a->epoch, atomic_load_explicit(&a->epoch, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    rt__tl_actor = a;
    rt__tl_jmp = &jb;
    if (a->beh->init != NULL) {
        if (setjmp(jb) == 0)
            r = a->beh->init(a, a->arg, &state);
        else
            r = RT_EASSERT;
    }
    rt__tl_actor = saved;
    rt__tl_jmp = saved_jmp;
    if (r < 0) {
        a->status = RT_A_PARKED;
        return r;
    }
    a->state = state;
    a->status = RT_A_RUNNING;
    return 0;
}

/* Free the state and the timers of a running actor; it is parked after. */
void rt__actor_teardown(rt_actor *a)
{
    if (a->status != RT_A_RUNNING)
        return;
    rt__timers_cancel(a);
    if (a->beh->stop != NULL) {
        rt_actor *saved = rt__tl_actor;
        jmp_buf *saved_jmp = rt__tl_jmp;
        rt__tl_actor = a;
        rt__tl_jmp = NULL; /* an assertion in stop cannot be undone: abort */
        a->beh->stop(a, a->state);
        rt__tl_actor = saved;
        rt__tl_jmp = saved_jmp;
    }
    a->state = NULL;
    a->status = RT_A_PARKED;
}

/* A parked actor whose turn kept its mailbox goes back to the run list. */
void rt__actor_resume(rt_actor *a)
{
    if (a->claimed) {
        a->claimed = 0;
        rt__loop_run_push(a->loop, a);
    }
}

/* For good: no state (teardown first), sends refused, out of the parent's
 * list; a kept mailbox is resumed so that a turn drains it. */
void rt__actor_close(rt_actor *a)
{
    rt__actor_teardown(a);
    a->status = RT_A_CLOSED;
    atomic_store_explicit(&a->closed, 1, memory_order_release);
    rt_actor *p = a->parent;
    a->parent = NULL;
    if (p != NULL) {
        if (a->linked)
            rt__sup_unlink(p, a); /* gives back the list's reference */
        else
            rt_actor_unref(a); /* the list never took it */
        rt_actor_unref(p);
    } else {
        rt__loop_tree_done(a->loop); /* only a root has no parent; the loop holds it */
    }
    rt__actor_resume(a);
}

static void unref_exited(void *data, void *ctx)
{
    (void)ctx;
    rt_actor_unref(data);
}

/* Tell the supervisor; it decides in its own turn (same loop). The message
 * holds a reference to the child (as its payload, so that it is given back
 * even if the message is dropped): the child may be closed and unlinked
 * before its supervisor reads the news. */
void rt__actor_notify_exit(rt_actor *a, int reason)
{
    if (reason < 0)
        rt_log(RT_LOG_WARN, "runtime", "actor failed name=%s id=%llu reason=\"%s\"",
               a->beh->name != NULL ? a->beh->name : "?", (unsigned long long)a->id,
               rt_strerror(reason));
    if (a->parent == NULL) {
        rt__actor_close(a);
        return;
    }
    rt_buf *who = rt_buf_wrap(rt_actor_ref(a), 0, unref_exited, NULL);
    rt_msg *m = who != NULL ? rt__msg_new(RT_SYS_EXIT, 0, who) : NULL;
    if (m != NULL) {
        m->status = reason;
        m->epoch = atomic_load_explicit(&a->epoch, memory_order_relaxed);
        if (rt__deliver(a->parent, m) == 0)
            return;
        free(m);
    }
    if (who != NULL)
        rt_buf_unref(who);
    else
        rt_actor_unref(a);
    rt__actor_close(a);
}

static void actor_exit(rt_actor *a, int reason)
{
    rt__actor_teardown(a);
    rt__actor_notify_exit(a, reason);
}

/* START: join the parent's current incarnation, then init. A parent whose
 * own START has not run yet (it can trail its child in the run list when a
 * concurrent push makes its first pop come back empty) is waited for. A
 * parent that is gone, or restarted since, refuses the child, which is then
 * started and stopped at once: every actor that rt_spawn accepted sees init
 * and stop, whatever happens around it. */
static void actor_start(rt_actor *a)
{
    rt_actor *p = a->parent;
    if (p != NULL && p->status == RT_A_NEW) {
        a->status = RT_A_WAITING;
        return;
    }
    bool adopted = p == NULL || rt__sup_adopt(p, a);
    int r = rt__actor_init(a);
    if (!adopted)
        rt__actor_close(a);
    else if (r < 0)
        rt__actor_notify_exit(a, r);
}

static int call_handler(rt_actor *a, rt_msg *m)
{
    jmp_buf *saved = rt__tl_jmp;
    jmp_buf jb;
    int r;
    rt__tl_jmp = &jb;
    if (setjmp(jb) == 0)
        r = a->beh->handle(a, a->state, m);
    else
        r = RT_EASSERT;
    rt__tl_jmp = saved;
    return r;
}

static void dispatch(rt_actor *a, rt_msg *m)
{
    int32_t unanswered = RT_ENOREPLY;
    if (m->kind == RT_SYS_START) {
        actor_start(a);
    } else if (a->status != RT_A_RUNNING) {
        unanswered = RT_ECLOSED;
    } else if (m->kind < RT_KIND_ERROR && !(a->beh->flags & RT_BEH_SYSMSG)) {
        if (m->kind == RT_SYS_STOP) /* the rest concern supervisors only */
            actor_exit(a, RT_OK);
    } else if (!(m->flags & RT_MSGF_TIMER) ||
               m->epoch == atomic_load_explicit(&a->epoch, memory_order_relaxed)) {
        int r = call_handler(a, m);
        if (r == RT_DONE)
            actor_exit(a, RT_OK);
        else if (r < 0) {
            unanswered = r;
            actor_exit(a, r);
        }
    }
    rt__msg_finish(m, unanswered);
}

void rt__actor_turn(rt_loop *l, rt_actor *a)
{
    rt_actor *saved = rt__tl_actor;
    rt__tl_actor = a;
    if (a->status == RT_A_WAITING)
        actor_start(a);
    int n = 0;
    for (; n < RT_BATCH && a->status != RT_A_PARKED && a->status != RT_A_WAITING; n++) {
        rt_mpsc_node *node = rt_mpsc_pop(&a->mbox);
        if (node == NULL)
            break;
        rt_msg *m = rt__container_of(node, rt_msg, node);
        if (m->flags & RT_MSGF_COUNTED)
            atomic_fetch_sub_explicit(&a->qlen, 1, memory_order_relaxed);
        if (a->status == RT_A_CLOSED)
            rt__msg_finish(m, RT_ECLOSED);
        else
            dispatch(a, m);
    }
    rt__tl_actor = saved;
    if (a->status == RT_A_PARKED)
        a->claimed = 1; /* keep the mailbox and the run ref until resumed */
    else if (a->status == RT_A_WAITING || n == RT_BATCH || !rt_mpsc_mark_idle(&a->mbox))
        rt__loop_run_push(l, a); /* a waiting child retries behind its parent */
    else
        rt_actor_unref(a);
}

_Noreturn void rt__assert_fail(const char *file, int line, const char *expr)
{
    rt_actor *a = rt__tl_actor;
    if (rt__tl_jmp != NULL && a != NULL) {
        rt_log(RT_LOG_ERROR, "runtime", "assertion failed name=%s id=%llu at=%s:%d expr=\"%s\"",
               a->beh->name != NULL ? a->beh->name : "?", (unsigned long long)a->id, file, line,
               expr);
        longjmp(*rt__tl_jmp, 1);
    }
    fprintf(stderr, "parley: assertion failed outside any handler at %s:%d: %s\n", file, line,
            expr);
    abort();
}
