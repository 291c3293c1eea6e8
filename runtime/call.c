/*
 * call.c - rt_call: request/reply for code that is not an actor.
 *
 * Each loop has one reply address for all the calls answered on it: its
 * calls actor, the first child of the loop's root (so the last stopped).
 * A call is a record in the loop's table (rt_calls), found again by the tag
 * its request carries and every reply to it copies (rt_msg.tag). Tags are
 * never handed out twice, so a late reply, to a call that timed out, finds
 * nothing and is dropped. Calls with a timeout wait in order of deadline
 * (one list per timeout), and one libuv timer per loop, set for the
 * earliest, wakes the actor to fail those that are due. The callback runs
 * in the actor's turn with whatever comes first: the reply, an error
 * reply, RT_ETIMEDOUT, or RT_ECLOSED when the actor stops (runtime
 * shutdown): exactly once.
 *
 * A call made on its loop's own thread goes into the table at once; one
 * made elsewhere (another loop, a thread that is no loop) travels to the
 * actor first (RT__CALL_BEGIN), its record wrapped in the message's
 * buffer, whose release fails the call if the actor never took it. Either
 * way the request itself goes from the caller's thread, after the record:
 * one caller's requests keep their order, and a reply never reaches the
 * actor before the record it belongs to.
 *
 * Before, every call spawned a one-shot actor with a timer of its own:
 * about 1,800 of the 39,000 instructions of an HTTP append (callgrind),
 * in allocations, a START, an exit and its supervisor's turn.
 */
#include "internal.h"

#include <stdlib.h>

struct rt_call_rec {
    rt_reply_cb cb;
    void *ctx;
    uint64_t tag;
    uint32_t kind;
    bool taken; /* in the table (RT__CALL_BEGIN: else the release answers) */
    uint64_t timeout_ms;
    uint64_t due;             /* uv_now ms; 0: waits for ever */
    uint8_t lane;             /* its deadline list, when due != 0 */
    rt_call_rec *prev, *next; /* in that list */
};

/* ------------------------------------------------------------ the table --- */

static uint32_t home(const rt_calls *k, uint64_t tag)
{
    return (uint32_t)((tag * 0x9e3779b97f4a7c15ULL) >> 32) & (k->cap - 1);
}

static rt_call_rec *find(const rt_calls *k, uint64_t tag)
{
    if (k->cap == 0)
        return NULL;
    for (uint32_t i = home(k, tag);; i = (i + 1) & (k->cap - 1)) {
        rt_call_rec *c = k->tab[i];
        if (c == NULL || c->tag == tag)
            return c;
    }
}

static void put(rt_calls *k, rt_call_rec *c)
{
    uint32_t i = home(k, c->tag);
    while (k->tab[i] != NULL)
        i = (i + 1) & (k->cap - 1);
    k->tab[i] = c;
}

static int add(rt_calls *k, rt_call_rec *c)
{
    if (2 * (k->n + 1) > k->cap) { /* at most half full */
        uint32_t cap = k->cap ? 2 * k->cap : 64, old = k->cap;
        rt_call_rec **t = calloc(cap, sizeof(*t)), **was = k->tab;
        if (t == NULL)
            return RT_ENOMEM;
        k->tab = t;
        k->cap = cap;
        for (uint32_t i = 0; i < old; i++)
            if (was[i] != NULL)
                put(k, was[i]);
        free(was);
    }
    put(k, c);
    k->n++;
    c->taken = true;
    return 0;
}

/* Linear probing's deletion: the calls after it in its run move back into
 * the hole when their home allows, so that no search stops short. */
static void drop(rt_calls *k, const rt_call_rec *c)
{
    uint32_t m = k->cap - 1, i = home(k, c->tag);
    while (k->tab[i] != c)
        i = (i + 1) & m;
    k->tab[i] = NULL;
    k->n--;
    for (uint32_t j = (i + 1) & m; k->tab[j] != NULL; j = (j + 1) & m) {
        uint32_t h = home(k, k->tab[j]->tag);
        if (((j - h) & m) >= ((j - i) & m)) { /* its home is at or before the hole */
            k->tab[i] = k->tab[j];
            k->tab[j] = NULL;
            i = j;
        }
    }
}

static void on_timer(uv_timer_t *t);

/* ------------------------------------------------------- the deadlines --- */

/* A deadline is the loop's clock, which never goes back, plus the call's
 * timeout, so the calls of one timeout come in order of deadline: each
 * timeout has a list of its own (a lane), and a call joins its lane at the
 * tail. One list for all made a call with a shorter timeout than those in
 * flight (a listing's asks among appends) walk back past every one of
 * them. A timeout that finds every lane taken by others shares the last,
 * put in its place from the tail. The earliest deadline is the earliest of
 * the lanes' heads. */
static struct rt_call_lane *lane_of(rt_calls *k, const rt_call_rec *c)
{
    return &k->lane[c->lane];
}

static uint8_t lane_for(const rt_calls *k, uint64_t timeout_ms)
{
    uint8_t empty = RT__CALL_LANES - 1;
    for (uint8_t i = RT__CALL_LANES; i-- > 0;) {
        if (k->lane[i].first == NULL)
            empty = i; /* the first empty one, when the loop is done */
        else if (k->lane[i].timeout_ms == timeout_ms)
            return i;
    }
    return empty;
}

static rt_call_rec *earliest(const rt_calls *k)
{
    rt_call_rec *e = NULL;
    for (int i = 0; i < RT__CALL_LANES; i++) {
        rt_call_rec *c = k->lane[i].first;
        if (c != NULL && (e == NULL || c->due < e->due))
            e = c;
    }
    return e;
}

/* The timer is set for the earliest deadline, or for an earlier one that
 * is gone (it then finds nothing due and is set again). */
static void arm(rt_loop *l)
{
    rt_calls *k = &l->calls;
    rt_call_rec *e = earliest(k);
    if (e == NULL || (k->armed != 0 && k->armed <= e->due))
        return;
    uint64_t now = uv_now(&l->uv);
    uv_timer_start(&k->timer, on_timer, e->due > now ? e->due - now : 0, 0);
    k->armed = e->due;
}

static void list_add(rt_calls *k, rt_call_rec *c)
{
    c->lane = lane_for(k, c->timeout_ms);
    struct rt_call_lane *q = lane_of(k, c);
    if (q->first == NULL)
        q->timeout_ms = c->timeout_ms;
    rt_call_rec *p = q->last; /* at the tail, unless the lane is shared */
    while (p != NULL && p->due > c->due)
        p = p->prev;
    c->prev = p;
    c->next = p != NULL ? p->next : q->first;
    if (c->next != NULL)
        c->next->prev = c;
    else
        q->last = c;
    if (p != NULL)
        p->next = c;
    else
        q->first = c;
}

static void remove_rec(rt_calls *k, rt_call_rec *c)
{
    drop(k, c);
    if (c->due == 0)
        return;
    struct rt_call_lane *q = lane_of(k, c);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        q->first = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        q->last = c->prev;
}

/* A callback that fails an RT_ASSERT ends there (logged by the assertion):
 * that call only, as when each call had an actor of its own, not the
 * loop's calls actor and every call waiting on it. */
static void run_cb(const rt_call_rec *c, rt_msg *m)
{
    jmp_buf *saved = rt__tl_jmp;
    jmp_buf jb;
    rt__tl_jmp = &jb;
    if (setjmp(jb) == 0)
        c->cb(c->ctx, m);
    rt__tl_jmp = saved;
}

/* Out of the table, then the callback: it may make calls of its own. */
static void finish(rt_loop *l, rt_call_rec *c, rt_msg *m)
{
    remove_rec(&l->calls, c);
    run_cb(c, m);
    free(c);
}

/* The answer a call gets when it gets none from its actor. */
static rt_msg error_of(const rt_call_rec *c, int32_t status)
{
    return (rt_msg){.kind = RT_KIND_ERROR, .status = status, .arg = c->kind, .tag = c->tag};
}

static void fail(rt_loop *l, rt_call_rec *c, int32_t status)
{
    rt_msg m = error_of(c, status);
    finish(l, c, &m);
}

/* On the loop's thread: into the table, with its deadline. */
static int begin(rt_loop *l, rt_call_rec *c)
{
    rt_calls *k = &l->calls;
    int r = add(k, c);
    if (r < 0 || c->timeout_ms == 0)
        return r;
    /* the loop caches its clock per iteration; a long round of turns must
     * not make a timeout fire early */
    uv_update_time(&l->uv);
    c->due = uv_now(&l->uv) + c->timeout_ms;
    list_add(k, c);
    arm(l);
    return 0;
}

/* ------------------------------------------------------------ the actor --- */

static void on_timer(uv_timer_t *t)
{
    rt_loop *l = t->data;
    l->calls.armed = 0;
    rt_msg *m = rt__msg_new(RT__CALL_DUE, 0, NULL);
    if (m != NULL && rt__deliver(l->calls.actor, m) < 0)
        free(m);
}

static void expire(rt_loop *l)
{
    rt_calls *k = &l->calls;
    uv_update_time(&l->uv);
    uint64_t now = uv_now(&l->uv);
    for (rt_call_rec *c; (c = earliest(k)) != NULL && c->due <= now;)
        fail(l, c, RT_ETIMEDOUT);
    arm(l);
}

static int calls_init(rt_actor *self, void *arg, void **state)
{
    (void)self;
    rt_loop *l = arg;
    l->calls.stopping = false;
    *state = l;
    return 0;
}

static int calls_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    rt_loop *l = state;
    if (m->kind == RT__CALL_BEGIN) {
        /* not taken (no memory): the message's release answers it */
        (void)begin(l, *(rt_call_rec **)rt_buf_data(m->buf));
    } else if (m->kind == RT__CALL_DUE) {
        expire(l);
    } else {
        rt_call_rec *c = find(&l->calls, m->tag);
        if (c != NULL) /* else late: its call timed out */
            finish(l, c, m);
    }
    return 0;
}

/* Shutdown (or a restart, were the actor itself to fail: a callback's
 * failure stays in run_cb): every call still waiting is answered
 * RT_ECLOSED. */
static void calls_stop(rt_actor *self, void *state)
{
    (void)self;
    rt_loop *l = state;
    rt_calls *k = &l->calls;
    k->stopping = true;
    /* a removal may move a call back into the slot just freed, or (past
     * the end of the table) into one this pass has left behind */
    while (k->n > 0)
        for (uint32_t i = 0; i < k->cap;)
            if (k->tab[i] != NULL)
                fail(l, k->tab[i], RT_ECLOSED);
            else
                i++;
    uv_timer_stop(&k->timer);
    k->armed = 0;
}

static const rt_behaviour calls_behaviour = {
    .name = "calls",
    .init = calls_init,
    .handle = calls_handle,
    .stop = calls_stop,
};

int rt__calls_start(rt_loop *l)
{
    uv_timer_init(&l->uv, &l->calls.timer);
    l->calls.timer.data = l;
    uv_unref((uv_handle_t *)&l->calls.timer); /* the wake handle keeps the loop */
    rt_spawn_opts o = {
        .beh = &calls_behaviour, .arg = l, .parent = l->root, .restart = RT_PERMANENT};
    return rt_spawn(l->rt, &o, &l->calls.actor);
}

void rt__calls_close(rt_loop *l)
{
    uv_close((uv_handle_t *)&l->calls.timer, NULL);
}

void rt__calls_free(rt_loop *l)
{
    rt_actor_unref(l->calls.actor);
    free(l->calls.tab);
}

/* ------------------------------------------------------------- rt_call --- */

/* The RT__CALL_BEGIN message's buffer, released after the actor's turn or
 * when the message is dropped: a record the actor did not take (it had
 * stopped, or had no memory) is answered here, on the loop that drops it. */
static void begin_released(void *data, void *ctx)
{
    (void)ctx;
    rt_call_rec *c = *(rt_call_rec **)data;
    if (c != NULL && !c->taken) {
        rt_msg m = error_of(c, RT_ECLOSED);
        run_cb(c, &m);
        free(c);
    }
    free(data);
}

/* A call made on another thread than its loop's: its record goes to the
 * loop's actor, ahead of the request, so ahead of any reply to it. */
static int begin_from_afar(rt_loop *l, rt_call_rec *c)
{
    rt_call_rec **box = malloc(sizeof(*box));
    if (box != NULL)
        *box = NULL;
    rt_buf *b = box != NULL ? rt_buf_wrap(box, sizeof(*box), begin_released, NULL) : NULL;
    rt_msg *m = b != NULL ? rt__msg_new(RT__CALL_BEGIN, 0, b) : NULL;
    if (m == NULL) {
        if (b != NULL)
            rt_buf_unref(b);
        else
            free(box);
        return RT_ENOMEM;
    }
    *box = c; /* from here on the record is the actor's, or the release's */
    int r = rt__deliver(l->calls.actor, m);
    if (r < 0) {
        *box = NULL;
        free(m);
        rt_buf_unref(b);
    }
    return r;
}

int rt_call(rt_runtime *rt, int loop, rt_actor *to, uint32_t kind, uint64_t arg, rt_buf *buf,
            uint64_t timeout_ms, rt_reply_cb cb, void *ctx)
{
    if (rt == NULL || to == NULL || cb == NULL || kind < RT_KIND_USER)
        return RT_EINVAL;
    rt_loop *l = rt__pick_loop(rt, loop);
    if (l == NULL)
        return RT_EINVAL;
    if (rt__tl_loop == l && (l->calls.stopping || rt_actor_closed(l->calls.actor)))
        return RT_ECLOSED;
    rt_call_rec *c = malloc(sizeof(*c));
    if (c == NULL)
        return RT_ENOMEM;
    rt_calls *k = &l->calls;
    *c = (rt_call_rec){.cb = cb,
                       .ctx = ctx,
                       .tag = atomic_fetch_add_explicit(&k->last_tag, 1, memory_order_relaxed) + 1,
                       .kind = kind,
                       .timeout_ms = timeout_ms};
    uint64_t tag = c->tag; /* c may be answered and freed once the request is out */
    int r = rt__tl_loop == l ? begin(l, c) : begin_from_afar(l, c);
    if (r < 0) {
        free(c);
        return r;
    }
    /* From here on every outcome reaches cb through the actor, so that cb
     * runs once and on its loop, whichever of reply, error or timeout wins;
     * the request goes from this thread, so one caller's requests keep
     * their order. */
    r = rt__ask_tagged(to, kind, arg, buf, k->actor, tag);
    if (r < 0) {
        rt_buf_unref(buf);
        rt__error_reply(k->actor, kind, r, tag);
    }
    return 0;
}
