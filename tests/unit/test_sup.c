/*
 * test_sup.c - supervision: start order, each strategy's exact stop/start
 * sequence, restart types, the intensity limit and escalation, what a
 * restart keeps (identity, mailbox), RT_ASSERT as a failure, and children
 * added after start.
 *
 * Children log "init X", "stop X", "fail X", ... to the shared event log;
 * since a supervisor and its children share one loop, that log is the exact
 * order in which things happened there, and the tests compare it whole.
 */
#include "support_rt.h"

#include <errno.h>

enum {
    K_PING = RT_KIND_USER,
    K_FAIL,   /* return -EIO */
    K_DONE,   /* return RT_DONE */
    K_ASSERT, /* RT_ASSERT(0) */
    K_BLOCK,  /* pass the kid's gate, then fail */
    K_LIST,   /* log the supervisor's live children */
};

/* --------------------------------------------------------------- the kid --- */

enum { MAX_INC = 16 };

typedef struct kid {
    const char *name;
    rtt_gate *gate;
    rt_actor **sup;             /* for K_LIST */
    int fail_timer_incarnation; /* this incarnation's init starts a failing timer */
    uint64_t fail_timer_ms;
    /* written on the kid's loop, read by the test, under reg_mu */
    rt_actor *ref; /* the current actor (a new one if the supervisor restarted) */
    uint64_t ids[MAX_INC + 1];
    int incarnations;
} kid;

typedef struct kid_state {
    kid *k;
    int incarnation;
} kid_state;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static kid *all_kids[16];
static size_t nkids;

static int kid_init(rt_actor *self, void *arg, void **state)
{
    kid *k = arg;
    TS_CHECK(rt_self() == self);
    TS_CHECK(rt_current_loop() == rt_actor_loop(self));
    kid_state *s = malloc(sizeof *s);
    if (s == NULL)
        return RT_ENOMEM;
    s->k = k;
    rt_actor *old = NULL;
    pthread_mutex_lock(&reg_mu);
    s->incarnation = ++k->incarnations;
    if (s->incarnation <= MAX_INC)
        k->ids[s->incarnation] = rt_actor_id(self);
    if (k->ref != self) {
        old = k->ref;
        k->ref = rt_actor_ref(self);
    }
    pthread_mutex_unlock(&reg_mu);
    rt_actor_unref(old);
    if (k->fail_timer_incarnation == s->incarnation)
        TS_CHECK(rt_timer_start(self, k->fail_timer_ms, 0, K_FAIL, 0) != 0);
    ts_log("init %s", k->name);
    *state = s;
    return 0;
}

static void log_children(rt_actor *sup)
{
    for (size_t i = 0; i < 8; i++) {
        rt_actor *c = rt_sup_child(sup, i);
        if (c == NULL) {
            ts_log("listed %zu", i);
            return;
        }
        const char *name = "?";
        pthread_mutex_lock(&reg_mu);
        for (size_t j = 0; j < nkids; j++)
            if (all_kids[j]->ref == c)
                name = all_kids[j]->name;
        pthread_mutex_unlock(&reg_mu);
        ts_log("child %zu %s", i, name);
        rt_actor_unref(c);
    }
}

static int kid_handle(rt_actor *self, void *state, rt_msg *m)
{
    kid_state *s = state;
    kid *k = s->k;
    TS_CHECK(rt_self() == self);
    switch (m->kind) {
    case K_FAIL:
        ts_log("fail %s", k->name);
        return -EIO;
    case K_DONE:
        ts_log("done %s", k->name);
        return RT_DONE;
    case K_ASSERT:
        ts_log("assert %s", k->name);
        RT_ASSERT(m->kind != K_ASSERT);
        ts_log("survived assert %s", k->name);
        return 0;
    case K_BLOCK:
        rtt_gate_pass(k->gate);
        ts_log("fail %s", k->name);
        return -EIO;
    case K_LIST:
        log_children(*k->sup);
        return 0;
    case K_PING:
        ts_log("%s got %llu in %d", k->name, (unsigned long long)m->arg, s->incarnation);
        return 0;
    }
    TS_CHECK_MSG(0, "%s got kind %u", k->name, m->kind);
    return 0;
}

static void kid_stop(rt_actor *self, void *state)
{
    kid_state *s = state;
    TS_CHECK(rt_self() == self);
    ts_log("stop %s", s->k->name);
    free(s);
}

static const rt_behaviour kid_beh = {
    .name = "kid", .init = kid_init, .handle = kid_handle, .stop = kid_stop};

static void kid_add(kid *k, const char *name)
{
    *k = (kid){.name = name};
    pthread_mutex_lock(&reg_mu);
    all_kids[nkids++] = k;
    pthread_mutex_unlock(&reg_mu);
}

/* A reference to the kid's current actor (the caller unrefs), once its
 * init has run. */
static rt_actor *kid_ref(kid *k)
{
    char e[64];
    snprintf(e, sizeof e, "init %s", k->name);
    ck_assert_msg(ts_log_wait(e, 1), "%s never started", k->name);
    pthread_mutex_lock(&reg_mu);
    rt_actor *a = rt_actor_ref(k->ref);
    pthread_mutex_unlock(&reg_mu);
    return a;
}

static void kid_send(kid *k, uint32_t kind, uint64_t arg)
{
    rt_actor *a = kid_ref(k);
    ck_assert_int_eq(rt_send(a, kind, arg, NULL), 0);
    rt_actor_unref(a);
}

static int kid_incarnations(kid *k)
{
    pthread_mutex_lock(&reg_mu);
    int n = k->incarnations;
    pthread_mutex_unlock(&reg_mu);
    return n;
}

/* Gives back the registry's references; before rtt_free. */
static void kids_release(void)
{
    pthread_mutex_lock(&reg_mu);
    for (size_t i = 0; i < nkids; i++) {
        rt_actor_unref(all_kids[i]->ref);
        all_kids[i]->ref = NULL;
    }
    nkids = 0;
    pthread_mutex_unlock(&reg_mu);
}

static void wait_init(kid *k, size_t n)
{
    char e[64];
    snprintf(e, sizeof e, "init %s", k->name);
    ck_assert_msg(ts_log_wait(e, n), "\"%s\" logged %zu times, expected %zu", e, ts_log_count(e),
                  n);
}

static rt_actor *sup_spawn(rt_runtime *rt, rt_strategy strategy, uint32_t intensity,
                           uint64_t period_ms, const rt_child_spec *children, size_t n,
                           rt_actor *parent, rt_restart restart)
{
    rt_sup_opts o = {.strategy = strategy,
                     .intensity = intensity,
                     .period_ms = period_ms,
                     .children = children,
                     .nchildren = n};
    rt_actor *sup = NULL;
    int rc = rt_sup_spawn(rt, &o, 0, parent, restart, &sup);
    ck_assert_msg(rc == 0, "rt_sup_spawn: %s", rt_strerror(rc));
    ck_assert_ptr_nonnull(sup);
    return sup;
}

static void finish(rt_runtime *rt, rt_actor *sup)
{
    rt_actor_unref(sup);
    kids_release();
    rtt_free(rt);
    ts_assert_clean();
}

/* Three permanent kids A, B, C under a supervisor with room for restarts. */
typedef struct abc {
    rt_runtime *rt;
    kid k[4];
    rt_child_spec spec[4];
    rt_actor *sup;
} abc;

static void abc_start(abc *t, rt_strategy strategy, size_t n,
                      void (*on_failure)(void *, rt_actor *, int))
{
    static const char *names[] = {"A", "B", "C", "D"};
    t->rt = rtt_start(1, on_failure);
    for (size_t i = 0; i < n; i++) {
        kid_add(&t->k[i], names[i]);
        t->spec[i] = (rt_child_spec){&kid_beh, &t->k[i], RT_PERMANENT, 0};
    }
    t->sup = sup_spawn(t->rt, strategy, 10, 60000, t->spec, n, NULL, RT_TEMPORARY);
    wait_init(&t->k[n - 1], 1);
}

/* ------------------------------------------------------------ strategies --- */

START_TEST(test_children_start_in_order_and_stop_in_reverse)
{
    abc t;
    abc_start(&t, RT_ONE_FOR_ONE, 3, NULL);
    ts_assert_log(0, "init A, init B, init C");
    finish(t.rt, t.sup);
    ts_assert_log(0, "init A, init B, init C, stop C, stop B, stop A");
}
END_TEST

START_TEST(test_stopping_a_supervisor_stops_children_in_reverse)
{
    abc t;
    abc_start(&t, RT_ONE_FOR_ONE, 3, rtt_on_failure);
    ck_assert_int_eq(rt_actor_stop(t.sup), 0);
    ck_assert(ts_log_wait("stop A", 1));
    ts_assert_log(0, "init A, init B, init C, stop C, stop B, stop A");
    finish(t.rt, t.sup);
    ts_assert_log(0, "init A, init B, init C, stop C, stop B, stop A");
}
END_TEST

START_TEST(test_one_for_one_restarts_only_the_failed_child)
{
    abc t;
    abc_start(&t, RT_ONE_FOR_ONE, 3, NULL);
    kid_send(&t.k[1], K_FAIL, 0);
    wait_init(&t.k[1], 2);
    ts_assert_log(3, "fail B, stop B, init B");
    finish(t.rt, t.sup);
    ts_assert_log(3, "fail B, stop B, init B, stop C, stop B, stop A");
}
END_TEST

START_TEST(test_one_for_all_restarts_every_child)
{
    abc t;
    abc_start(&t, RT_ONE_FOR_ALL, 3, NULL);
    kid_send(&t.k[1], K_FAIL, 0);
    wait_init(&t.k[2], 2);
    ts_assert_log(3, "fail B, stop B, stop C, stop A, init A, init B, init C");
    finish(t.rt, t.sup);
    ts_assert_log(10, "stop C, stop B, stop A");
}
END_TEST

START_TEST(test_rest_for_one_restarts_the_younger_children)
{
    abc t;
    abc_start(&t, RT_REST_FOR_ONE, 4, NULL);
    kid_send(&t.k[1], K_FAIL, 0);
    wait_init(&t.k[3], 2);
    ts_assert_log(4, "fail B, stop B, stop D, stop C, init B, init C, init D");
    finish(t.rt, t.sup);
    ts_assert_log(11, "stop D, stop C, stop B, stop A");
}
END_TEST

START_TEST(test_rest_for_one_last_child_alone)
{
    abc t;
    abc_start(&t, RT_REST_FOR_ONE, 4, NULL);
    kid_send(&t.k[3], K_FAIL, 0);
    wait_init(&t.k[3], 2);
    ts_assert_log(4, "fail D, stop D, init D");
    finish(t.rt, t.sup);
}
END_TEST

START_TEST(test_one_for_all_first_child)
{
    abc t;
    abc_start(&t, RT_ONE_FOR_ALL, 3, NULL);
    kid_send(&t.k[0], K_FAIL, 0);
    wait_init(&t.k[2], 2);
    ts_assert_log(3, "fail A, stop A, stop C, stop B, init A, init B, init C");
    finish(t.rt, t.sup);
}
END_TEST

/* --------------------------------------------------------- restart types --- */

/* One kid X of the given restart type next to a permanent sibling S; X
 * ends with `how`. */
static void restart_type(rt_restart type, uint32_t how, bool restarted)
{
    rt_runtime *rt = rtt_start(1, NULL);
    kid x, s;
    kid_add(&x, "X");
    kid_add(&s, "S");
    rt_child_spec spec[] = {{&kid_beh, &x, type, 0}, {&kid_beh, &s, RT_PERMANENT, 0}};
    rt_actor *sup = sup_spawn(rt, RT_ONE_FOR_ONE, 10, 60000, spec, 2, NULL, RT_TEMPORARY);
    wait_init(&s, 1);
    rt_actor *a = kid_ref(&x);
    ck_assert_int_eq(rt_send(a, how, 0, NULL), 0);
    const char *end = how == K_FAIL ? "fail X" : "done X";
    if (restarted) {
        wait_init(&x, 2);
        ts_assert_log(2, how == K_FAIL ? "fail X, stop X, init X" : "done X, stop X, init X");
        /* Same actor, still taking messages. */
        ck_assert_int_eq(rt_send(a, K_PING, 1, NULL), 0);
        ck_assert(ts_log_wait("X got 1 in 2", 1));
    } else {
        ck_assert(ts_log_wait(end, 1));
        ck_assert(rtt_wait_closed(a));
    }
    rt_actor_unref(a);
    finish(rt, sup);
    ck_assert_int_eq(kid_incarnations(&x), restarted ? 2 : 1);
    ck_assert_int_eq(kid_incarnations(&s), 1);
}

START_TEST(test_temporary_failed_not_restarted)
{
    restart_type(RT_TEMPORARY, K_FAIL, false);
}
END_TEST

START_TEST(test_temporary_done_not_restarted)
{
    restart_type(RT_TEMPORARY, K_DONE, false);
}
END_TEST

START_TEST(test_transient_failed_restarted)
{
    restart_type(RT_TRANSIENT, K_FAIL, true);
}
END_TEST

START_TEST(test_transient_done_not_restarted)
{
    restart_type(RT_TRANSIENT, K_DONE, false);
}
END_TEST

START_TEST(test_permanent_failed_restarted)
{
    restart_type(RT_PERMANENT, K_FAIL, true);
}
END_TEST

START_TEST(test_permanent_done_restarted)
{
    restart_type(RT_PERMANENT, K_DONE, true);
}
END_TEST

/* ------------------------------------------------------ what restart keeps --- */

/* Messages queued while the child is busy with the one that fails it are
 * handled by the next incarnation, which is the same actor. */
START_TEST(test_restart_keeps_identity_and_mailbox)
{
    rt_runtime *rt = rtt_start(1, NULL);
    rtt_gate g;
    rtt_gate_init(&g);
    kid p;
    kid_add(&p, "P");
    p.gate = &g;
    rt_child_spec spec[] = {{&kid_beh, &p, RT_PERMANENT, 0}};
    rt_actor *sup = sup_spawn(rt, RT_ONE_FOR_ONE, 10, 60000, spec, 1, NULL, RT_TEMPORARY);
    rt_actor *a = kid_ref(&p);
    uint64_t id = rt_actor_id(a);

    ck_assert_int_eq(rt_send(a, K_BLOCK, 0, NULL), 0);
    rtt_gate_wait_entered(&g, 1);
    for (uint64_t i = 1; i <= 5; i++)
        ck_assert_int_eq(rt_send(a, K_PING, i, NULL), 0);
    rtt_gate_open(&g);
    ck_assert(ts_log_wait("P got 5 in 2", 1));
    ck_assert_int_eq(rt_send(a, K_PING, 6, NULL), 0);
    ck_assert(ts_log_wait("P got 6 in 2", 1));
    ts_assert_log(0, "init P, fail P, stop P, init P, P got 1 in 2, P got 2 in 2, P got 3 in 2, "
                     "P got 4 in 2, P got 5 in 2, P got 6 in 2");
    pthread_mutex_lock(&reg_mu);
    ck_assert_uint_eq(p.ids[1], id);
    ck_assert_uint_eq(p.ids[2], id);
    ck_assert_ptr_eq(p.ref, a);
    pthread_mutex_unlock(&reg_mu);
    rt_actor_unref(a);
    finish(rt, sup);
    rtt_gate_destroy(&g);
}
END_TEST

/* RT_ASSERT abandons the handler and fails the actor with RT_EASSERT: a
 * temporary root child is reported with that reason; its stop still ran. */
START_TEST(test_assert_fails_with_eassert)
{
    rt_runtime *rt = rtt_start(2, rtt_on_failure);
    kid x;
    kid_add(&x, "X");
    rt_actor *a = rtt_spawn(rt, &kid_beh, &x, 1, RT_TEMPORARY, 0);
    wait_init(&x, 1);
    ck_assert_int_eq(rt_send(a, K_ASSERT, 0, NULL), 0);
    char e[64];
    ck_assert(ts_log_wait(rtt_failure_entry(a, RT_EASSERT, e, sizeof e), 1));
    char want[128];
    snprintf(want, sizeof want, "init X, assert X, stop X, %s", e);
    ts_assert_log(0, want);
    rt_actor_unref(a);
    kids_release();
    rtt_free(rt);
    ts_assert_clean();
}
END_TEST

/* ... and a permanent one is restarted, same actor, fresh state. */
START_TEST(test_assert_restarts_permanent_actor)
{
    rt_runtime *rt = rtt_start(2, NULL);
    kid x;
    kid_add(&x, "X");
    rt_actor *a = rtt_spawn(rt, &kid_beh, &x, 1, RT_PERMANENT, 0);
    wait_init(&x, 1);
    ck_assert_int_eq(rt_send(a, K_ASSERT, 0, NULL), 0);
    wait_init(&x, 2);
    ck_assert_int_eq(rt_send(a, K_PING, 1, NULL), 0);
    ck_assert(ts_log_wait("X got 1 in 2", 1));
    ts_assert_log(0, "init X, assert X, stop X, init X, X got 1 in 2");
    rt_actor_unref(a);
    kids_release();
    rtt_free(rt);
    ts_assert_clean();
}
END_TEST

START_TEST(test_assert_in_supervised_child_restarts_it)
{
    abc t;
    abc_start(&t, RT_ONE_FOR_ONE, 2, NULL);
    kid_send(&t.k[0], K_ASSERT, 0);
    wait_init(&t.k[0], 2);
    ts_assert_log(2, "assert A, stop A, init A");
    finish(t.rt, t.sup);
}
END_TEST

/* -------------------------------------------------------------- intensity --- */

/* intensity 2: the first two failures are restarted, the third makes the
 * supervisor close its remaining children and fail with RT_EFAIL, which its
 * (root) supervisor reports. */
START_TEST(test_intensity_exceeded_closes_children_and_escalates)
{
    rt_runtime *rt = rtt_start(1, rtt_on_failure);
    kid a, b;
    kid_add(&a, "A");
    kid_add(&b, "B");
    rt_child_spec spec[] = {{&kid_beh, &a, RT_PERMANENT, 0}, {&kid_beh, &b, RT_PERMANENT, 0}};
    rt_actor *sup = sup_spawn(rt, RT_ONE_FOR_ONE, 2, 60000, spec, 2, NULL, RT_TEMPORARY);
    wait_init(&b, 1);
    rt_actor *ra = kid_ref(&a), *rb = kid_ref(&b);
    for (size_t n = 2; n <= 3; n++) {
        ck_assert_int_eq(rt_send(ra, K_FAIL, 0, NULL), 0);
        wait_init(&a, n);
    }
    ck_assert_int_eq(rt_send(ra, K_FAIL, 0, NULL), 0);
    char e[64];
    rtt_failure_entry(sup, RT_EFAIL, e, sizeof e);
    ck_assert(ts_log_wait(e, 1));
    char want[256];
    snprintf(want, sizeof want,
             "init A, init B, fail A, stop A, init A, fail A, stop A, init A, fail A, stop A, "
             "stop B, %s",
             e);
    ts_assert_log(0, want);
    ck_assert(rtt_wait_closed(ra));
    ck_assert(rtt_wait_closed(rb));
    rt_actor_unref(ra);
    rt_actor_unref(rb);
    finish(rt, sup);
    ts_assert_log(0, want); /* nothing was restarted afterwards */
}
END_TEST

START_TEST(test_default_intensity_is_one)
{
    rt_runtime *rt = rtt_start(1, rtt_on_failure);
    kid a;
    kid_add(&a, "A");
    rt_child_spec spec[] = {{&kid_beh, &a, RT_PERMANENT, 0}};
    rt_actor *sup = sup_spawn(rt, RT_ONE_FOR_ONE, 0, 0, spec, 1, NULL, RT_TEMPORARY);
    rt_actor *ra = kid_ref(&a);
    ck_assert_int_eq(rt_send(ra, K_FAIL, 0, NULL), 0);
    wait_init(&a, 2);
    ck_assert_int_eq(rt_send(ra, K_FAIL, 0, NULL), 0);
    char e[64];
    ck_assert(ts_log_wait(rtt_failure_entry(sup, RT_EFAIL, e, sizeof e), 1));
    ck_assert_int_eq(kid_incarnations(&a), 2);
    rt_actor_unref(ra);
    finish(rt, sup);
}
END_TEST

/* Restarts further apart than the period do not add up: intensity 1 in
 * 30 ms, and the second failure comes from a 150 ms timer started by the
 * restarted incarnation, so it is always outside the window. */
START_TEST(test_restarts_outside_period_do_not_escalate)
{
    rt_runtime *rt = rtt_start(1, rtt_on_failure);
    kid a;
    kid_add(&a, "A");
    a.fail_timer_incarnation = 2;
    a.fail_timer_ms = 150;
    rt_child_spec spec[] = {{&kid_beh, &a, RT_PERMANENT, 0}};
    rt_actor *sup = sup_spawn(rt, RT_ONE_FOR_ONE, 1, 30, spec, 1, NULL, RT_TEMPORARY);
    kid_send(&a, K_FAIL, 0);
    wait_init(&a, 3);
    ts_assert_log(0, "init A, fail A, stop A, init A, fail A, stop A, init A");
    finish(rt, sup);
    ts_assert_log_prefix("failure", "");
}
END_TEST

/* A nested supervisor S (under P) gives up: P restarts it, S's init starts
 * its specs anew, and the child added to S at run time (D) is closed with
 * S's old incarnation and not restarted. */
START_TEST(test_escalation_restarts_subtree_from_specs)
{
    rt_runtime *rt = rtt_start(2, rtt_on_failure);
    kid a, d;
    kid_add(&a, "A");
    kid_add(&d, "D");
    rt_actor *p = sup_spawn(rt, RT_ONE_FOR_ONE, 5, 60000, NULL, 0, NULL, RT_TEMPORARY);
    rt_child_spec spec[] = {{&kid_beh, &a, RT_PERMANENT, 0}};
    rt_actor *s = sup_spawn(rt, RT_ONE_FOR_ONE, 1, 60000, spec, 1, p, RT_PERMANENT);
    ck_assert_int_eq(rt_actor_loop(s), rt_actor_loop(p));
    wait_init(&a, 1);
    rt_spawn_opts o = {
        .beh = &kid_beh, .arg = &d, .parent = s, .restart = RT_PERMANENT, .loop = RT_LOOP_ANY};
    rt_actor *rd = NULL;
    ck_assert_int_eq(rt_spawn(rt, &o, &rd), 0);
    wait_init(&d, 1);

    kid_send(&a, K_FAIL, 0);
    wait_init(&a, 2);
    kid_send(&a, K_FAIL, 0);
    wait_init(&a, 3);
    ts_assert_log(0, "init A, init D, fail A, stop A, init A, fail A, stop A, stop D, init A");
    ck_assert(rtt_wait_closed(rd));
    /* A is a fresh actor now, S the same one. */
    pthread_mutex_lock(&reg_mu);
    ck_assert_uint_ne(a.ids[3], a.ids[1]);
    pthread_mutex_unlock(&reg_mu);
    rt_actor_unref(rd);
    rt_actor_unref(s);
    finish(rt, p);
    ck_assert_int_eq(kid_incarnations(&d), 1);
    ck_assert_int_eq(kid_incarnations(&a), 3);
    ts_assert_log_prefix("failure", ""); /* P absorbed it: nothing reached the root */
}
END_TEST

/* A permanent supervisor under a root is restarted by the root when it
 * gives up (the root has no intensity limit) and starts its specs anew.
 * (runtime.h leaves open whether on_failure hears of it, so that is not
 * checked.) */
START_TEST(test_root_restarts_a_permanent_supervisor)
{
    rt_runtime *rt = rtt_start(1, rtt_on_failure);
    kid a;
    kid_add(&a, "A");
    rt_child_spec spec[] = {{&kid_beh, &a, RT_PERMANENT, 0}};
    rt_actor *sup = sup_spawn(rt, RT_ONE_FOR_ONE, 1, 60000, spec, 1, NULL, RT_PERMANENT);
    kid_send(&a, K_FAIL, 0);
    wait_init(&a, 2);
    kid_send(&a, K_FAIL, 0);
    wait_init(&a, 3);
    ts_assert_log_prefix("init", "init A, init A, init A");
    ts_assert_log_prefix("stop", "stop A, stop A");
    pthread_mutex_lock(&reg_mu);
    ck_assert_uint_ne(a.ids[3], a.ids[1]); /* a new child of the new incarnation */
    pthread_mutex_unlock(&reg_mu);
    kid_send(&a, K_PING, 1);
    ck_assert(ts_log_wait("A got 1 in 3", 1));
    finish(rt, sup);
    ck_assert_int_eq(kid_incarnations(&a), 3);
}
END_TEST

/* ---------------------------------------------------------------- children --- */

START_TEST(test_children_live_on_the_supervisor_loop)
{
    rt_runtime *rt = rtt_start(2, NULL);
    kid a, d;
    kid_add(&a, "A");
    kid_add(&d, "D");
    rt_child_spec spec[] = {{&kid_beh, &a, RT_PERMANENT, 0}};
    rt_sup_opts so = {.children = spec, .nchildren = 1};
    rt_actor *sup = NULL;
    ck_assert_int_eq(rt_sup_spawn(rt, &so, 1, NULL, RT_TEMPORARY, &sup), 0);
    ck_assert_int_eq(rt_actor_loop(sup), 1);
    rt_actor *ra = kid_ref(&a);
    ck_assert_int_eq(rt_actor_loop(ra), 1);
    /* The parent decides the loop; the requested one is ignored. */
    rt_spawn_opts o = {.beh = &kid_beh, .arg = &d, .parent = sup, .loop = 0};
    rt_actor *rd = NULL;
    ck_assert_int_eq(rt_spawn(rt, &o, &rd), 0);
    ck_assert_int_eq(rt_actor_loop(rd), 1);
    wait_init(&d, 1);
    rt_actor_unref(ra);
    rt_actor_unref(rd);
    finish(rt, sup); /* kid_init checked the loop it ran on */
    ts_assert_log(0, "init A, init D, stop D, stop A");
}
END_TEST

static rt_actor *listed_sup;

START_TEST(test_sup_child_lists_live_children_in_start_order)
{
    rt_runtime *rt = rtt_start(1, NULL);
    kid a, b, c;
    kid_add(&a, "A");
    kid_add(&b, "B");
    kid_add(&c, "C");
    a.sup = &listed_sup;
    rt_child_spec spec[] = {{&kid_beh, &a, RT_PERMANENT, 0},
                            {&kid_beh, &b, RT_TEMPORARY, 0},
                            {&kid_beh, &c, RT_PERMANENT, 0}};
    listed_sup = sup_spawn(rt, RT_ONE_FOR_ONE, 10, 60000, spec, 3, NULL, RT_TEMPORARY);
    wait_init(&c, 1);
    kid_send(&a, K_LIST, 0);
    ck_assert(ts_log_wait("listed 3", 1));
    ts_assert_log(3, "child 0 A, child 1 B, child 2 C, listed 3");

    rt_actor *rb = kid_ref(&b);
    ck_assert_int_eq(rt_send(rb, K_DONE, 0, NULL), 0);
    ck_assert(rtt_wait_closed(rb));
    rt_actor_unref(rb);
    size_t from = ts_log_len();
    kid_send(&a, K_LIST, 0);
    ck_assert(ts_log_wait("listed 2", 1));
    ts_assert_log(from, "child 0 A, child 1 C, listed 2");
    finish(rt, listed_sup);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sup");
    TCase *tc = tcase_create("strategies");
    tcase_add_test(tc, test_children_start_in_order_and_stop_in_reverse);
    tcase_add_test(tc, test_stopping_a_supervisor_stops_children_in_reverse);
    tcase_add_test(tc, test_one_for_one_restarts_only_the_failed_child);
    tcase_add_test(tc, test_one_for_all_restarts_every_child);
    tcase_add_test(tc, test_one_for_all_first_child);
    tcase_add_test(tc, test_rest_for_one_restarts_the_younger_children);
    tcase_add_test(tc, test_rest_for_one_last_child_alone);
    suite_add_tcase(s, tc);

    tc = tcase_create("restart types");
    tcase_add_test(tc, test_temporary_failed_not_restarted);
    tcase_add_test(tc, test_temporary_done_not_restarted);
    tcase_add_test(tc, test_transient_failed_restarted);
    tcase_add_test(tc, test_transient_done_not_restarted);
    tcase_add_test(tc, test_permanent_failed_restarted);
    tcase_add_test(tc, test_permanent_done_restarted);
    tcase_add_test(tc, test_restart_keeps_identity_and_mailbox);
    tcase_add_test(tc, test_assert_fails_with_eassert);
    tcase_add_test(tc, test_assert_restarts_permanent_actor);
    tcase_add_test(tc, test_assert_in_supervised_child_restarts_it);
    suite_add_tcase(s, tc);

    tc = tcase_create("intensity");
    tcase_add_test(tc, test_intensity_exceeded_closes_children_and_escalates);
    tcase_add_test(tc, test_default_intensity_is_one);
    tcase_add_test(tc, test_restarts_outside_period_do_not_escalate);
    tcase_add_test(tc, test_escalation_restarts_subtree_from_specs);
    tcase_add_test(tc, test_root_restarts_a_permanent_supervisor);
    suite_add_tcase(s, tc);

    tc = tcase_create("children");
    tcase_add_test(tc, test_children_live_on_the_supervisor_loop);
    tcase_add_test(tc, test_sup_child_lists_live_children_in_start_order);
    suite_add_tcase(s, tc);

    return ts_run_suite(s);
}
