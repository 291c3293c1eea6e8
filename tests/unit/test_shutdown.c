/*
 * test_shutdown.c - the runtime's life cycle: creating and freeing it,
 * what shutdown refuses, the order in which roots stop their children, and
 * shutting down while messages, requests, timers and spawns are in flight,
 * which must terminate (within the deadline) and leak nothing (LSan).
 */
#include "support_rt.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

enum {
    K_MSG = RT_KIND_USER,
    K_BLOCK,
    K_TOKEN,
    K_REQ,
    K_REP,
    K_TICK,
    K_HOP,
    K_SHUTDOWN,
    K_BLOCK_DONE,
};

/* Logs "<name> <arg>" per message and "stop <name>"; K_BLOCK passes the
 * gate. */
typedef struct named {
    const char *name;
    rtt_gate *gate;
    rt_actor *peer;
} named;

static int named_handle(rt_actor *self, void *state, rt_msg *m)
{
    named *n = state;
    if (m->kind == K_BLOCK || m->kind == K_BLOCK_DONE) {
        rtt_gate_pass(n->gate);
        return m->kind == K_BLOCK_DONE ? RT_DONE : 0;
    }
    if (m->kind == K_SHUTDOWN) {
        rt_runtime_shutdown(rt_actor_runtime(self));
        ts_log("%s shut down", n->name);
        return 0;
    }
    ts_log("%s %llu", n->name, (unsigned long long)m->arg);
    return 0;
}

static void named_stop(rt_actor *self, void *state)
{
    (void)self;
    ts_log("stop %s", ((named *)state)->name);
}

static const rt_behaviour named_beh = {.name = "named", .handle = named_handle, .stop = named_stop};

/* -------------------------------------------------------------- life cycle --- */

START_TEST(test_new_and_free_empty)
{
    for (int loops = 0; loops <= 2; loops++) {
        rt_runtime *rt = rtt_start(loops, NULL);
        int n = rt_runtime_loops(rt);
        ck_assert_int_eq(n == loops || (loops == 0 && n >= 1), 1);
        for (int i = 0; i < n; i++) {
            ck_assert_ptr_nonnull(rt_runtime_uv(rt, i));
            for (int j = 0; j < i; j++)
                ck_assert_ptr_ne(rt_runtime_uv(rt, i), rt_runtime_uv(rt, j));
        }
        rtt_free(rt);
    }
}
END_TEST

START_TEST(test_shutdown_twice_then_free)
{
    rt_runtime *rt = rtt_start(2, NULL);
    named a = {.name = "a"};
    rt_actor *x = rtt_spawn(rt, &named_beh, &a, 1, RT_PERMANENT, 0);
    ck_assert_int_eq(rt_send(x, K_MSG, 1, NULL), 0);
    ck_assert(ts_log_wait("a 1", 1));
    rt_actor_unref(x);
    rt_runtime_shutdown(rt);
    rt_runtime_shutdown(rt);
    rtt_free(rt);
    ts_assert_log(0, "a 1, stop a"); /* stopped, not restarted, though permanent */
}
END_TEST

START_TEST(test_shutdown_from_a_handler)
{
    rt_runtime *rt = rtt_start(2, NULL);
    named a = {.name = "a"}, b = {.name = "b"};
    rt_actor *x = rtt_spawn(rt, &named_beh, &a, 0, RT_TEMPORARY, 0);
    rt_actor *y = rtt_spawn(rt, &named_beh, &b, 1, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(y, K_MSG, 1, NULL), 0);
    ck_assert(ts_log_wait("b 1", 1)); /* b has started (see the next test) */
    ck_assert_int_eq(rt_send(x, K_SHUTDOWN, 0, NULL), 0);
    ck_assert(ts_log_wait("a shut down", 1));
    ck_assert(ts_log_wait("stop a", 1));
    ck_assert(ts_log_wait("stop b", 1));
    rt_actor_unref(x);
    rt_actor_unref(y);
    rtt_free(rt);
}
END_TEST

/* Once shutdown has begun, sends, spawns and calls from outside the loops
 * are refused, and a refused payload stays the caller's. The loop is held
 * in a gate meanwhile, so the runtime is certainly still stopping. */
static atomic_int late_calls;

static void late_cb(void *ctx, rt_msg *reply)
{
    (void)ctx;
    (void)reply;
    atomic_fetch_add(&late_calls, 1);
}

START_TEST(test_shutdown_refuses_outside_work)
{
    rt_runtime *rt = rtt_start(1, NULL);
    rtt_gate g;
    rtt_gate_init(&g);
    named a = {.name = "a"};
    rt_actor *x = rtt_spawn(rt, &named_beh, &a, 0, RT_TEMPORARY, 0);
    rt_actor *blocker = rtt_block_loop(rt, 0, &g);
    rt_runtime_shutdown(rt);

    rt_buf *b = rtt_buf("late");
    ck_assert_int_eq(rt_send(x, K_MSG, 1, b), RT_ECLOSED);
    ck_assert_int_eq(rt_ask(x, K_MSG, 2, b, x), RT_ECLOSED);
    ck_assert(rtt_buf_is(b, "late"));
    rt_spawn_opts o = {.beh = &named_beh, .arg = &a, .loop = 0};
    rt_actor *y = NULL;
    ck_assert_int_eq(rt_spawn(rt, &o, &y), RT_ECLOSED);
    int rc = rt_call(rt, 0, x, K_MSG, 3, b, 0, late_cb, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_int_eq(rtt_bufs_freed(), 0);
    rt_buf_unref(b);

    rtt_gate_open(&g);
    rt_actor_unref(x);
    rt_actor_unref(blocker);
    rtt_free(rt);
    rtt_gate_destroy(&g);
    ck_assert_int_eq(atomic_load(&late_calls), 0);
    ts_assert_log(0, "stop a");
}
END_TEST

/* The root stops its children in reverse start order, each after handling
 * what was queued for it before shutdown. Everything is queued while the
 * loop is held by the first child (Z), so the order is not a race. */
START_TEST(test_shutdown_stops_in_reverse_after_queued_messages)
{
    rt_runtime *rt = rtt_start(1, NULL);
    rtt_gate g;
    rtt_gate_init(&g);
    named n[4] = {{.name = "Z", .gate = &g}, {.name = "A"}, {.name = "B"}, {.name = "C"}};
    rt_actor *a[4];
    /* one started (its first message handled) before the next is spawned:
     * the root adopts them in this order (spawns from outside a loop are
     * not ordered among themselves) */
    for (int i = 0; i < 4; i++) {
        a[i] = rtt_spawn(rt, &named_beh, &n[i], 0, RT_TEMPORARY, 0);
        ck_assert_int_eq(rt_send(a[i], K_MSG, 0, NULL), 0);
        char started[16];
        snprintf(started, sizeof(started), "%s 0", n[i].name);
        ck_assert(ts_log_wait(started, 1));
    }
    ck_assert_int_eq(rt_send(a[0], K_BLOCK, 0, NULL), 0);
    rtt_gate_wait_entered(&g, 1);
    for (int i = 1; i < 4; i++)
        for (uint64_t k = 1; k <= 5; k++)
            ck_assert_int_eq(rt_send(a[i], K_MSG, k, NULL), 0);
    rt_runtime_shutdown(rt);
    rtt_gate_open(&g);
    for (int i = 0; i < 4; i++)
        rt_actor_unref(a[i]);
    rtt_free(rt);
    rtt_gate_destroy(&g);
    ts_assert_clean();

    ts_assert_log_prefix("stop", "stop C, stop B, stop A, stop Z");
    ts_assert_log_prefix("A", "A 0, A 1, A 2, A 3, A 4, A 5");
    ts_assert_log_prefix("B", "B 0, B 1, B 2, B 3, B 4, B 5");
    ts_assert_log_prefix("C", "C 0, C 1, C 2, C 3, C 4, C 5");
    char e[16];
    for (int i = 1; i < 4; i++) {
        snprintf(e, sizeof e, "%s 5", n[i].name);
        long last = ts_log_index(e, 1);
        snprintf(e, sizeof e, "stop %s", n[i].name);
        ck_assert_int_lt(last, ts_log_index(e, 1));
    }
}
END_TEST

/* An actor spawned (and sent a message) before shutdown begins is a child
 * like any other: it starts, handles what was queued for it, and stops,
 * even when its root gets to the shutdown before the new actor's START.
 * That is arranged on the loop itself: Y wakes X and exits, so the root
 * (to handle Y's exit) is scheduled right behind X; X then spawns A, sends
 * it a message and begins the shutdown, all in one turn. */
static named spawned_a = {.name = "A"};

static int starter_handle(rt_actor *self, void *state, rt_msg *m)
{
    named *n = state;
    if (m->kind == K_BLOCK_DONE) { /* Y */
        TS_CHECK(rt_send(n->peer, K_MSG, 0, NULL) == 0);
        return RT_DONE;
    }
    rt_spawn_opts o = {.beh = &named_beh, .arg = &spawned_a, .loop = RT_LOOP_ANY};
    rt_actor *a = NULL;
    int rc = rt_spawn(rt_actor_runtime(self), &o, &a);
    TS_CHECK_MSG(rc == 0, "rt_spawn: %s", rt_strerror(rc));
    if (rc == 0) {
        TS_CHECK(rt_send(a, K_MSG, 1, NULL) == 0);
        rt_actor_unref(a);
    }
    rt_runtime_shutdown(rt_actor_runtime(self));
    ts_log("X shut down");
    return 0;
}

START_TEST(test_shutdown_handles_actor_spawned_just_before)
{
    static const rt_behaviour beh = {
        .name = "starter", .handle = starter_handle, .stop = named_stop};
    rt_runtime *rt = rtt_start(1, NULL);
    named x = {.name = "X"}, y = {.name = "Y"};
    rt_actor *rx = rtt_spawn(rt, &beh, &x, 0, RT_TEMPORARY, 0);
    y.peer = rx;
    rt_actor *ry = rtt_spawn(rt, &beh, &y, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(ry, K_BLOCK_DONE, 0, NULL), 0);
    ck_assert(ts_log_wait("X shut down", 1));
    rt_actor_unref(ry);
    rt_actor_unref(rx);
    rtt_free(rt);
    ts_assert_clean();
    ts_assert_log_prefix("A", "A 1");
    ts_assert_log_prefix("stop", "stop Y, stop A, stop X");
}
END_TEST

/* The same from outside the loops: spawn, send, shut down at once. Racy by
 * nature, so repeated; every round must handle the message. */
START_TEST(test_shutdown_right_after_outside_spawn)
{
    for (int round = 0; round < 200; round++) {
        rt_runtime *rt = rtt_start(1, NULL);
        named a = {.name = "a"};
        rt_actor *ra = rtt_spawn(rt, &named_beh, &a, 0, RT_TEMPORARY, 0);
        ck_assert_int_eq(rt_send(ra, K_MSG, 1, NULL), 0);
        rt_runtime_shutdown(rt);
        rt_actor_unref(ra);
        rtt_free(rt);
        char *log = ts_log_join(0);
        ck_assert_msg(strcmp(log, "a 1, stop a") == 0, "round %d: log is \"%s\"", round, log);
        free(log);
    }
}
END_TEST

/* A bounded mailbox that is full when shutdown comes: the stop request
 * must still get through, after the queued messages. */
START_TEST(test_shutdown_with_full_bounded_mailbox)
{
    rt_runtime *rt = rtt_start(1, NULL);
    rtt_gate g;
    rtt_gate_init(&g);
    named n = {.name = "A", .gate = &g};
    rt_actor *a = rtt_spawn(rt, &named_beh, &n, 0, RT_TEMPORARY, 2);
    ck_assert_int_eq(rt_send(a, K_BLOCK, 0, NULL), 0);
    rtt_gate_wait_entered(&g, 1);
    ck_assert_int_eq(rt_send(a, K_MSG, 1, NULL), 0);
    ck_assert_int_eq(rt_send(a, K_MSG, 2, NULL), 0);
    ck_assert_int_eq(rt_send(a, K_MSG, 3, NULL), RT_EFULL);
    rt_runtime_shutdown(rt);
    rtt_gate_open(&g);
    rt_actor_unref(a);
    rtt_free(rt);
    rtt_gate_destroy(&g);
    ts_assert_log(0, "A 1, A 2, stop A");
}
END_TEST

/* ------------------------------------------------------ work in flight --- */

/* Actors that never stop sending: a ping-pong pair across loops, and one
 * that keeps its own mailbox non-empty. */
typedef struct player {
    rt_actor *peer; /* NULL: play against itself */
    bool started;   /* its loop only */
} player;

static int pingpong_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)m;
    player *p = state;
    if (!p->started) {
        p->started = true;
        ts_log("started");
    }
    rt_buf *ball = rtt_buf("ball");
    int rc = rt_send(p->peer != NULL ? p->peer : self, K_MSG, 0, ball);
    TS_CHECK(rc == 0 || rc == RT_ECLOSED);
    if (rc != 0)
        rt_buf_unref(ball);
    return 0;
}

static void pingpong_stop(rt_actor *self, void *state)
{
    (void)self;
    (void)state;
    ts_log("stop");
}

START_TEST(test_free_while_actors_keep_sending)
{
    static const rt_behaviour beh = {
        .name = "pingpong", .handle = pingpong_handle, .stop = pingpong_stop};
    rt_runtime *rt = rtt_start(2, NULL);
    static player p[3];
    rt_actor *a = rtt_spawn(rt, &beh, &p[0], 0, RT_TEMPORARY, 0);
    rt_actor *b = rtt_spawn(rt, &beh, &p[1], 1, RT_TEMPORARY, 0);
    rt_actor *c = rtt_spawn(rt, &beh, &p[2], 0, RT_TEMPORARY, 0);
    /* Read only by handlers, which the first K_MSG (sent after) starts. */
    p[0].peer = rt_actor_ref(b);
    p[1].peer = rt_actor_ref(a);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(rt_send(a, K_MSG, 0, NULL), 0);
    ck_assert_int_eq(rt_send(c, K_MSG, 0, NULL), 0);
    ck_assert(ts_log_wait("started", 3));
    rt_actor_unref(a);
    rt_actor_unref(b);
    rt_actor_unref(c);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_uint_eq(ts_log_count("stop"), 3);
    rt_actor_unref(p[0].peer);
    rt_actor_unref(p[1].peer);
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

/* A ring of actors on two loops passing tokens (with payloads), asking
 * each other, ticking timers, spawning short-lived helpers and, in one
 * case, refusing with a full mailbox, while a thread outside keeps adding
 * tokens until it is refused. Then shutdown. */
enum { RING = 6 };

typedef struct ring_node {
    rt_actor *next;
    long handled;
    atomic_int stops;
} ring_node;

static ring_node ring[RING];
static _Atomic long ring_work;
static atomic_bool stop_injecting;

static int helper_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)state;
    (void)m;
    return RT_DONE;
}

static const rt_behaviour helper_beh = {.name = "helper", .handle = helper_handle};

static int ring_init(rt_actor *self, void *arg, void **state)
{
    TS_CHECK(rt_timer_start(self, 1, 1, K_TICK, 0) != 0);
    *state = arg;
    return 0;
}

static void forward(rt_actor *to, uint32_t kind, rt_msg *m, rt_actor *reply_to)
{
    rt_buf *b = m->buf != NULL ? rt_buf_ref(m->buf) : NULL;
    int rc =
        reply_to != NULL ? rt_ask(to, kind, m->arg, b, reply_to) : rt_send(to, kind, m->arg, b);
    TS_CHECK_MSG(rc == 0 || rc == RT_ECLOSED || rc == RT_EFULL, "%s", rt_strerror(rc));
    if (rc != 0)
        rt_buf_unref(b);
}

static int ring_handle(rt_actor *self, void *state, rt_msg *m)
{
    ring_node *n = state;
    n->handled++;
    atomic_fetch_add(&ring_work, 1);
    switch (m->kind) {
    case K_TOKEN:
        forward(n->next, K_TOKEN, m, NULL);
        if (m->arg % 5 == 0)
            forward(n->next, K_REQ, m, self);
        if (m->arg % 50 == 0) {
            rt_spawn_opts o = {.beh = &helper_beh, .loop = RT_LOOP_ANY};
            rt_actor *h = NULL;
            int rc = rt_spawn(rt_actor_runtime(self), &o, &h);
            TS_CHECK(rc == 0 || rc == RT_ECLOSED);
            if (rc == 0) {
                rt_send(h, K_MSG, 0, NULL);
                rt_actor_unref(h);
            }
        }
        break;
    case K_REQ: {
        rt_buf *b = rtt_buf("rep");
        int rc = rt_reply(m, K_REP, 0, m->arg, b);
        TS_CHECK(rc == 0 || rc == RT_ECLOSED);
        if (rc != 0)
            rt_buf_unref(b);
        break;
    }
    default: /* replies, errors (the asker is restarting nothing here) and ticks */
        break;
    }
    return 0;
}

static void ring_stop(rt_actor *self, void *state)
{
    (void)self;
    atomic_fetch_add(&((ring_node *)state)->stops, 1);
}

struct injector {
    rt_actor *to[RING];
    long sent;
};

static void *inject(void *p)
{
    struct injector *in = p;
    for (uint64_t i = 0; !atomic_load(&stop_injecting); i++) {
        /* Keep the ring busy without letting the mailboxes grow without
         * bound: stay within reach of what the ring has handled. */
        while (in->sent > atomic_load(&ring_work) / 2 + 1000)
            if (atomic_load(&stop_injecting))
                return NULL;
            else
                sched_yield();
        rt_buf *b = rtt_buf("token");
        int rc = rt_send(in->to[i % RING], K_TOKEN, i, b);
        if (rc != 0) {
            rt_buf_unref(b);
            TS_CHECK_MSG(rc == RT_ECLOSED || rc == RT_EFULL, "%s", rt_strerror(rc));
            if (rc == RT_ECLOSED)
                return NULL;
            continue;
        }
        in->sent++;
    }
    return NULL;
}

START_TEST(test_shutdown_with_work_in_flight)
{
    static const rt_behaviour beh = {
        .name = "ring", .init = ring_init, .handle = ring_handle, .stop = ring_stop};
    rt_runtime *rt = rtt_start(2, NULL);
    rt_actor *a[RING];
    for (int i = 0; i < RING; i++)
        a[i] = rtt_spawn(rt, &beh, &ring[i], i % 2, RT_TEMPORARY, i == 3 ? 8 : 0);
    for (int i = 0; i < RING; i++)
        ring[i].next = rt_actor_ref(a[(i + 1) % RING]);

    struct injector in = {.sent = 0};
    for (int i = 0; i < RING; i++)
        in.to[i] = a[i];
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, inject, &in), 0);
    /* Let the ring get going for real before pulling the plug. */
    ck_assert(ts_wait_atomic(&ring_work, TS_SCALE(50000, 5000)));
    rt_runtime_shutdown(rt);
    /* The injector races the shutdown until refused, or until told. */
    ck_assert(ts_wait_atomic(&ring_work, atomic_load(&ring_work) + 10));
    atomic_store(&stop_injecting, true);
    pthread_join(t, NULL);
    for (int i = 0; i < RING; i++)
        rt_actor_unref(a[i]);
    rtt_free(rt);
    ts_assert_clean();
    for (int i = 0; i < RING; i++) {
        ck_assert_int_eq(atomic_load(&ring[i].stops), 1);
        rt_actor_unref(ring[i].next);
    }
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

/* A call still waiting for its answer when the runtime stops: the server's
 * stop fails the promise it holds (as the contract asks), and rt_call
 * having returned 0, the callback runs exactly once, with an error, even
 * if the loop it answers on stops before the server's. */
typedef struct holder {
    rt_promise p[2];
    int n;
} holder;

static int holder_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    holder *h = state;
    TS_CHECK(h->n < 2);
    if (h->n < 2)
        h->p[h->n++] = rt_msg_promise(m);
    ts_log("held");
    return 0;
}

static void holder_stop(rt_actor *self, void *state)
{
    (void)self;
    holder *h = state;
    for (int i = 0; i < h->n; i++)
        rt_promise_fail(&h->p[i], RT_ECLOSED);
    h->n = 0;
}

static atomic_int pending_calls, pending_errors;

static void pending_cb(void *ctx, rt_msg *reply)
{
    (void)ctx;
    if (reply->kind == RT_KIND_ERROR && reply->status < 0)
        atomic_fetch_add(&pending_errors, 1);
    atomic_fetch_add(&pending_calls, 1);
}

START_TEST(test_pending_call_answered_at_shutdown)
{
    static const rt_behaviour beh = {
        .name = "holder", .handle = holder_handle, .stop = holder_stop};
    rt_runtime *rt = rtt_start(2, NULL);
    static holder h[2];
    rt_actor *srv[2];
    for (int i = 0; i < 2; i++) {
        srv[i] = rtt_spawn(rt, &beh, &h[i], i, RT_TEMPORARY, 0);
        /* one answered on the server's own loop, one across */
        ck_assert_int_eq(rt_call(rt, i, srv[i], K_REQ, 0, NULL, 0, pending_cb, NULL), 0);
        ck_assert_int_eq(rt_call(rt, 1 - i, srv[i], K_REQ, 0, NULL, 0, pending_cb, NULL), 0);
    }
    ck_assert(ts_log_wait("held", 4));
    for (int i = 0; i < 2; i++)
        rt_actor_unref(srv[i]);
    rtt_free(rt);
    ck_assert_int_eq(atomic_load(&pending_calls), 4);
    ck_assert_int_eq(atomic_load(&pending_errors), 4);
}
END_TEST

/* The same guarantee when the call is made just before shutdown, from
 * outside the loops: racy by nature, so repeated. */
static int echo_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)state;
    if (m->reply_to != NULL)
        rt_reply(m, K_REP, 0, m->arg, NULL); /* the caller may be gone: fine */
    else
        ts_log("echo started");
    return 0;
}

static atomic_int round_calls;

static void round_cb(void *ctx, rt_msg *reply)
{
    (void)ctx;
    (void)reply;
    atomic_fetch_add(&round_calls, 1);
}

START_TEST(test_call_right_before_shutdown_answered_once)
{
    static const rt_behaviour beh = {.name = "echo", .handle = echo_handle};
    for (int round = 0; round < 200; round++) {
        rt_runtime *rt = rtt_start(1, NULL);
        rt_actor *srv = rtt_spawn(rt, &beh, NULL, 0, RT_TEMPORARY, 0);
        ck_assert_int_eq(rt_send(srv, K_MSG, 0, NULL), 0);
        ck_assert(ts_log_wait("echo started", 1));
        atomic_store(&round_calls, 0);
        int rc = rt_call(rt, 0, srv, K_REQ, 1, NULL, 0, round_cb, NULL);
        rt_runtime_shutdown(rt);
        rt_actor_unref(srv);
        rtt_free(rt);
        ck_assert_msg(atomic_load(&round_calls) == (rc == 0 ? 1 : 0),
                      "round %d: rt_call returned %s, callback ran %d times", round, rtt_code(rc),
                      atomic_load(&round_calls));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shutdown");
    TCase *tc = tcase_create("life cycle");
    tcase_add_test(tc, test_new_and_free_empty);
    tcase_add_test(tc, test_shutdown_twice_then_free);
    tcase_add_test(tc, test_shutdown_from_a_handler);
    tcase_add_test(tc, test_shutdown_refuses_outside_work);
    tcase_add_test(tc, test_shutdown_stops_in_reverse_after_queued_messages);
    tcase_add_test(tc, test_shutdown_with_full_bounded_mailbox);
    tcase_add_test(tc, test_shutdown_handles_actor_spawned_just_before);
    tcase_add_test(tc, test_shutdown_right_after_outside_spawn);
    suite_add_tcase(s, tc);

    tc = tcase_create("in flight");
    tcase_add_test(tc, test_free_while_actors_keep_sending);
    tcase_add_test(tc, test_shutdown_with_work_in_flight);
    tcase_add_test(tc, test_pending_call_answered_at_shutdown);
    tcase_add_test(tc, test_call_right_before_shutdown_answered_once);
    suite_add_tcase(s, tc);

    return ts_run_suite(s);
}
