/*
 * test_timer.c - actor timers: what a tick carries, the order of timers
 * started together, repeating and stopping, who may start one, and that a
 * restart cancels timers and discards ticks still queued for the previous
 * incarnation. Nothing here asserts on durations, only on order and counts.
 */
#include "support_rt.h"

#include <errno.h>

enum {
    K_START = RT_KIND_USER, /* arg selects the scenario */
    K_TICK,
    K_SENTINEL,
    K_BOOM,
    K_FRESH,
    K_T0,
    K_T10,
    K_T30,
    K_T50,
};

static void check_tick(const rt_msg *m)
{
    TS_CHECK(m->sender == 0);
    TS_CHECK(m->status == 0);
    TS_CHECK(m->reply_to == NULL);
    TS_CHECK(m->buf == NULL);
}

/* --------------------------------------------------------------- basics --- */

typedef struct once_state {
    rt_timer_id tick;
    int ticks;
} once_state;

static once_state once;

static int once_init(rt_actor *self, void *arg, void **state)
{
    (void)arg;
    once.tick = rt_timer_start(self, 10, 0, K_TICK, 42);
    TS_CHECK(once.tick != 0);
    /* Later than the tick, so when it fires a second tick would have had
     * its chance too. */
    rt_timer_id s = rt_timer_start(self, 60, 0, K_SENTINEL, 0);
    TS_CHECK(s != 0 && s != once.tick);
    *state = &once;
    return 0;
}

static int once_handle(rt_actor *self, void *state, rt_msg *m)
{
    once_state *o = state;
    check_tick(m);
    if (m->kind == K_TICK) {
        TS_CHECK(m->arg == 42);
        o->ticks++;
        /* It has fired, and it was a one-shot: the id is spent. */
        TS_CHECK(rt_timer_stop(self, o->tick) == RT_EINVAL);
        ts_log("tick");
    } else if (m->kind == K_SENTINEL) {
        ts_log("sentinel after %d tick(s)", o->ticks);
    }
    return 0;
}

START_TEST(test_one_shot_fires_once)
{
    static const rt_behaviour beh = {.name = "once", .init = once_init, .handle = once_handle};
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &beh, NULL, 0, RT_TEMPORARY, 0);
    ck_assert(ts_log_wait("sentinel after 1 tick(s)", 1));
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ts_assert_log(0, "tick, sentinel after 1 tick(s)");
}
END_TEST

static uint32_t order_kind(uint64_t ms)
{
    switch (ms) {
    case 0:
        return K_T0;
    case 10:
        return K_T10;
    case 30:
        return K_T30;
    default:
        return K_T50;
    }
}

static int order_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)state;
    if (m->kind == K_START) {
        /* Started in one turn, deliberately not in deadline order. */
        TS_CHECK(rt_timer_start(self, 50, 0, K_T50, 50) != 0);
        TS_CHECK(rt_timer_start(self, 10, 0, K_T10, 10) != 0);
        TS_CHECK(rt_timer_start(self, 30, 0, K_T30, 30) != 0);
        TS_CHECK(rt_timer_start(self, 0, 0, K_T0, 0) != 0);
        return 0;
    }
    check_tick(m);
    TS_CHECK(m->kind == order_kind(m->arg));
    ts_log("t%llu", (unsigned long long)m->arg);
    return 0;
}

START_TEST(test_timers_fire_in_deadline_order)
{
    static const rt_behaviour beh = {.name = "order", .handle = order_handle};
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &beh, NULL, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_START, 0, NULL), 0);
    ck_assert(ts_log_wait("t50", 1));
    ts_assert_log(0, "t0, t10, t30, t50");
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
}
END_TEST

/* A repeating timer stopped from its fifth tick never ticks again; a
 * later one-shot sentinel gives it ample occasion to. */
typedef struct repeat_state {
    rt_timer_id id;
    int ticks;
} repeat_state;

static int repeat_handle(rt_actor *self, void *state, rt_msg *m)
{
    repeat_state *r = state;
    switch (m->kind) {
    case K_START:
        r->id = rt_timer_start(self, 1, 1, K_TICK, 7);
        TS_CHECK(r->id != 0);
        break;
    case K_TICK:
        check_tick(m);
        TS_CHECK(m->arg == 7);
        if (++r->ticks == 5) {
            TS_CHECK(rt_timer_stop(self, r->id) == 0);
            TS_CHECK(rt_timer_stop(self, r->id) == RT_EINVAL);
            TS_CHECK(rt_timer_start(self, 40, 0, K_SENTINEL, 0) != 0);
        }
        TS_CHECK_MSG(r->ticks <= 5, "tick %d after the timer was stopped", r->ticks);
        break;
    case K_SENTINEL:
        ts_log("sentinel after %d ticks", r->ticks);
        break;
    }
    return 0;
}

START_TEST(test_repeat_until_stopped)
{
    static const rt_behaviour beh = {.name = "repeat", .handle = repeat_handle};
    rt_runtime *rt = rtt_start(1, NULL);
    static repeat_state r;
    rt_actor *a = rtt_spawn(rt, &beh, &r, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_START, 0, NULL), 0);
    ck_assert(ts_log_wait("sentinel after 5 ticks", 1));
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
}
END_TEST

static int stop_early_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)state;
    if (m->kind == K_START) {
        rt_timer_id id = rt_timer_start(self, 30, 0, K_TICK, 0);
        TS_CHECK(id != 0);
        TS_CHECK(rt_timer_stop(self, id) == 0);
        TS_CHECK(rt_timer_stop(self, id) == RT_EINVAL);
        TS_CHECK(rt_timer_stop(self, id + 1000) == RT_EINVAL);
        TS_CHECK(rt_timer_start(self, 60, 0, K_SENTINEL, 0) != 0);
    } else if (m->kind == K_TICK) {
        ts_log("stopped timer ticked");
    } else if (m->kind == K_SENTINEL) {
        ts_log("sentinel");
    }
    return 0;
}

START_TEST(test_stopped_before_firing_never_fires)
{
    static const rt_behaviour beh = {.name = "early", .handle = stop_early_handle};
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &beh, NULL, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_START, 0, NULL), 0);
    ck_assert(ts_log_wait("sentinel", 1));
    ts_assert_log(0, "sentinel");
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
}
END_TEST

/* --------------------------------------------------------- who may start --- */

static int other_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)m;
    /* Another actor's handler is not `self`'s handler. */
    TS_CHECK(rt_timer_start(state, 1, 0, K_TICK, 0) == 0);
    ts_log("tried");
    return 0;
}

static int victim_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)state;
    if (m->kind == K_TICK)
        ts_log("victim ticked");
    else if (m->kind == K_SENTINEL)
        ts_log("victim sentinel");
    else if (m->kind == K_START)
        TS_CHECK(rt_timer_start(self, 50, 0, K_SENTINEL, 0) != 0);
    return 0;
}

START_TEST(test_only_the_actor_itself_starts_timers)
{
    static const rt_behaviour vb = {.name = "victim", .handle = victim_handle};
    static const rt_behaviour ob = {.name = "other", .handle = other_handle};
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *v = rtt_spawn(rt, &vb, NULL, 0, RT_TEMPORARY, 0);
    rt_actor *o = rtt_spawn(rt, &ob, v, 0, RT_TEMPORARY, 0);
    ck_assert_uint_eq(rt_timer_start(v, 1, 0, K_TICK, 0), 0); /* from the test thread */
    ck_assert_int_eq(rt_send(o, K_START, 0, NULL), 0);
    ck_assert(ts_log_wait("tried", 1));
    ck_assert_int_eq(rt_send(v, K_START, 0, NULL), 0);
    ck_assert(ts_log_wait("victim sentinel", 1));
    ck_assert_uint_eq(ts_log_count("victim ticked"), 0);
    rt_actor_unref(v);
    rt_actor_unref(o);
    rtt_free(rt);
    ts_assert_clean();
}
END_TEST

/* ------------------------------------------------------------- restarts --- */

/* Incarnation 1 starts a BOOM and then TICKs with the same deadline, so
 * they fire together, BOOM first, and are all queued before it runs: BOOM
 * fails the actor and the TICKs are left in the mailbox, which the new
 * incarnation inherits. It must never see them. (Should the loop fire them
 * apart, the TICKs are cancelled instead; the assertion holds either way.) */
typedef struct inc_state {
    int incarnation;
} inc_state;

static int incarnations; /* the actor's loop only */

static int inc_init(rt_actor *self, void *arg, void **state)
{
    (void)arg;
    inc_state *s = malloc(sizeof *s);
    if (s == NULL)
        return RT_ENOMEM;
    s->incarnation = ++incarnations;
    if (s->incarnation > 1)
        TS_CHECK(rt_timer_start(self, 1, 0, K_FRESH, (uint64_t)s->incarnation) != 0);
    ts_log("init %d", s->incarnation);
    *state = s;
    return 0;
}

static int inc_handle(rt_actor *self, void *state, rt_msg *m)
{
    inc_state *s = state;
    switch (m->kind) {
    case K_START:
        TS_CHECK(rt_timer_start(self, 5, 0, K_BOOM, 0) != 0);
        for (int i = 0; i < 3; i++)
            TS_CHECK(rt_timer_start(self, 5, 0, K_TICK, (uint64_t)s->incarnation) != 0);
        TS_CHECK(rt_timer_start(self, 5, 5, K_TICK, (uint64_t)s->incarnation) != 0);
        return 0;
    case K_BOOM:
        ts_log("boom %d", s->incarnation);
        return -EIO;
    case K_TICK:
        TS_CHECK_MSG(m->arg == (uint64_t)s->incarnation,
                     "incarnation %d got a tick of incarnation %llu", s->incarnation,
                     (unsigned long long)m->arg);
        ts_log("tick %llu in %d", (unsigned long long)m->arg, s->incarnation);
        return 0;
    case K_FRESH:
        TS_CHECK(m->arg == (uint64_t)s->incarnation);
        ts_log("fresh %d", s->incarnation);
        return 0;
    case K_SENTINEL:
        ts_log("sentinel %d", s->incarnation);
        return 0;
    }
    return 0;
}

static void inc_stop(rt_actor *self, void *state)
{
    (void)self;
    free(state);
}

START_TEST(test_restart_discards_stale_ticks)
{
    static const rt_behaviour beh = {
        .name = "inc", .init = inc_init, .handle = inc_handle, .stop = inc_stop};
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &beh, NULL, 0, RT_PERMANENT, 0);
    ck_assert_int_eq(rt_send(a, K_START, 0, NULL), 0);
    ck_assert(ts_log_wait("init 2", 1));
    /* Queued behind anything left from incarnation 1. */
    ck_assert_int_eq(rt_send(a, K_SENTINEL, 0, NULL), 0);
    ck_assert(ts_log_wait("sentinel 2", 1));
    ck_assert(ts_log_wait("fresh 2", 1)); /* timers work in the new incarnation */
    ts_assert_clean();
    ck_assert_uint_eq(ts_log_count("boom 1"), 1);
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_uint_eq(ts_log_count("init 3"), 0);
}
END_TEST

/* An actor that exits with timers running: they are cancelled (nothing to
 * observe but that nothing crashes or leaks, and no further handling). */
static int exit_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)state;
    if (m->kind == K_START) {
        TS_CHECK(rt_timer_start(self, 1, 1, K_TICK, 0) != 0);
        TS_CHECK(rt_timer_start(self, 1000, 0, K_TICK, 0) != 0);
        return 0;
    }
    TS_CHECK(m->kind == K_TICK);
    ts_log("tick");
    return RT_DONE;
}

START_TEST(test_timers_cancelled_on_exit)
{
    static const rt_behaviour beh = {.name = "exit", .handle = exit_handle};
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &beh, NULL, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_START, 0, NULL), 0);
    ck_assert(ts_log_wait("tick", 1));
    ck_assert(rtt_wait_closed(a));
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_uint_eq(ts_log_count("tick"), 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("timer");
    TCase *tc = tcase_create("timer");
    tcase_add_test(tc, test_one_shot_fires_once);
    tcase_add_test(tc, test_timers_fire_in_deadline_order);
    tcase_add_test(tc, test_repeat_until_stopped);
    tcase_add_test(tc, test_stopped_before_firing_never_fires);
    tcase_add_test(tc, test_only_the_actor_itself_starts_timers);
    tcase_add_test(tc, test_restart_discards_stale_ticks);
    tcase_add_test(tc, test_timers_cancelled_on_exit);
    suite_add_tcase(s, tc);

    return ts_run_suite(s);
}
