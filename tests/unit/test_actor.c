/*
 * test_actor.c - actors on their own: identity and home loop, what a
 * message carries, mailbox order under concurrent producers, batch fairness
 * between busy actors on one loop, the bounded mailbox, and the ways an
 * actor ends (RT_DONE, failure, rt_actor_stop) as its sender sees them.
 */
#include "support_rt.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum {
    K_PING = RT_KIND_USER,
    K_BLOCK,
    K_DONE,
    K_FAIL,
    K_SEQ,
    K_BUSY,
    K_CONT,
};

/* ------------------------------------------------------ a plain recorder --- */

/* Logs "<name> init", "<name> <arg>" per message and "<name> stop", and
 * checks that it only ever runs on its home loop as itself. */
typedef struct rec {
    const char *name;
    rtt_gate *gate; /* K_BLOCK passes it */
    int init_rc;    /* what init returns */
    bool init_asserts;
    rt_actor *self; /* seen in init */
} rec;

static void check_home(rt_actor *self)
{
    TS_CHECK(rt_self() == self);
    TS_CHECK(rt_current_loop() == rt_actor_loop(self));
}

static int rec_init(rt_actor *self, void *arg, void **state)
{
    rec *r = arg;
    check_home(self);
    r->self = self;
    ts_log("%s init", r->name);
    RT_ASSERT(!r->init_asserts);
    *state = r;
    return r->init_rc;
}

static int rec_handle(rt_actor *self, void *state, rt_msg *m)
{
    rec *r = state;
    check_home(self);
    TS_CHECK_MSG(m->kind != RTT_PROBE, "%s handled a probe sent after it exited", r->name);
    switch (m->kind) {
    case K_BLOCK:
        ts_log("%s block", r->name);
        rtt_gate_pass(r->gate);
        return 0;
    case K_DONE:
        ts_log("%s done", r->name);
        return RT_DONE;
    case K_FAIL:
        ts_log("%s fail", r->name);
        return (int)(int64_t)m->arg;
    default:
        ts_log("%s %llu", r->name, (unsigned long long)m->arg);
        return 0;
    }
}

static void rec_stop(rt_actor *self, void *state)
{
    rec *r = state;
    check_home(self);
    ts_log("%s stop", r->name);
}

static const rt_behaviour rec_beh = {
    .name = "rec", .init = rec_init, .handle = rec_handle, .stop = rec_stop};

static bool wait_log(const char *entry)
{
    return ts_log_wait(entry, 1);
}

/* ------------------------------------------------------------ identity --- */

START_TEST(test_spawn_null_behaviour_is_einval)
{
    rt_runtime *rt = rtt_start(1, NULL);
    rt_spawn_opts o = {.beh = NULL};
    rt_actor *a = NULL;
    ck_assert_int_eq(rt_spawn(rt, &o, &a), RT_EINVAL);
    rtt_free(rt);
}
END_TEST

START_TEST(test_spawn_bad_loop_is_einval)
{
    rt_runtime *rt = rtt_start(2, NULL);
    rec r = {.name = "a"};
    rt_spawn_opts o = {.beh = &rec_beh, .arg = &r, .loop = 2};
    rt_actor *a = NULL;
    ck_assert_int_eq(rt_spawn(rt, &o, &a), RT_EINVAL);
    rtt_free(rt);
    ck_assert_uint_eq(ts_log_count("a init"), 0);
}
END_TEST

START_TEST(test_ids_unique_and_references)
{
    enum { N = 100 };
    rt_runtime *rt = rtt_start(2, NULL);
    static rec r[N];
    rt_actor *a[N];
    for (int i = 0; i < N; i++) {
        r[i].name = "x";
        a[i] = rtt_spawn(rt, &rec_beh, &r[i], RT_LOOP_ANY, RT_TEMPORARY, 0);
        ts_require(rt_actor_id(a[i]) != 0, "actor %d has id 0", i);
        ts_require(rt_actor_runtime(a[i]) == rt, "actor %d: wrong runtime", i);
        ts_require(rt_actor_loop(a[i]) >= 0 && rt_actor_loop(a[i]) < rt_runtime_loops(rt),
                   "actor %d: loop %d", i, rt_actor_loop(a[i]));
        for (int j = 0; j < i; j++)
            ts_require(rt_actor_id(a[i]) != rt_actor_id(a[j]), "actors %d and %d share id %llu", i,
                       j, (unsigned long long)rt_actor_id(a[i]));
    }
    ck_assert_ptr_eq(rt_actor_ref(a[0]), a[0]);
    rt_actor_unref(a[0]);
    rt_actor_unref(NULL);
    for (int i = 0; i < N; i++)
        rt_actor_unref(a[i]);
    rtt_free(rt);
}
END_TEST

START_TEST(test_outside_thread_is_no_actor_and_no_loop)
{
    rt_runtime *rt = rtt_start(1, NULL);
    ck_assert_ptr_null(rt_self());
    ck_assert_int_eq(rt_current_loop(), -1);
    rtt_free(rt);
}
END_TEST

START_TEST(test_init_runs_first_on_home_loop)
{
    rt_runtime *rt = rtt_start(2, NULL);
    rec r = {.name = "a"};
    rt_actor *a = rtt_spawn(rt, &rec_beh, &r, 1, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_actor_loop(a), 1);
    /* Sent right after the spawn: START is still the first message. */
    ck_assert_int_eq(rt_send(a, K_PING, 7, NULL), 0);
    ck_assert(wait_log("a 7"));
    ck_assert_ptr_eq(r.self, a);
    ts_assert_log(0, "a init, a 7");
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ts_assert_log(2, "a stop");
}
END_TEST

static int null_init_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)m;
    ts_log("state %s", (const char *)state);
    return 0;
}

START_TEST(test_null_init_state_is_arg)
{
    static const rt_behaviour beh = {.name = "noinit", .handle = null_init_handle};
    rt_runtime *rt = rtt_start(1, NULL);
    static char arg[] = "the-arg";
    rt_actor *a = rtt_spawn(rt, &beh, arg, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_PING, 0, NULL), 0);
    ck_assert(wait_log("state the-arg"));
    rt_actor_unref(a);
    rtt_free(rt);
}
END_TEST

START_TEST(test_loop_any_from_outside_spreads)
{
    rt_runtime *rt = rtt_start(2, NULL);
    rec r[4] = {{.name = "a"}, {.name = "b"}, {.name = "c"}, {.name = "d"}};
    int used[2] = {0, 0};
    for (int i = 0; i < 4; i++) {
        rt_actor *a = rtt_spawn(rt, &rec_beh, &r[i], RT_LOOP_ANY, RT_TEMPORARY, 0);
        used[rt_actor_loop(a)]++;
        rt_actor_unref(a);
    }
    ck_assert_int_gt(used[0], 0);
    ck_assert_int_gt(used[1], 0);
    rtt_free(rt);
    ts_assert_clean();
}
END_TEST

/* A parent on loop 1 spawns with RT_LOOP_ANY: the child lives on loop 1. */
static rec child_rec = {.name = "child"};
static atomic_int child_loop = -2;

static int spawner_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)state;
    (void)m;
    rt_spawn_opts o = {.beh = &rec_beh, .arg = &child_rec, .loop = RT_LOOP_ANY};
    rt_actor *c = NULL;
    int rc = rt_spawn(rt_actor_runtime(self), &o, &c);
    TS_CHECK(rc == 0);
    if (rc == 0) {
        atomic_store(&child_loop, rt_actor_loop(c));
        rt_send(c, K_PING, 1, NULL);
        rt_actor_unref(c);
    }
    return 0;
}

START_TEST(test_loop_any_from_handler_is_calling_loop)
{
    static const rt_behaviour beh = {.name = "spawner", .handle = spawner_handle};
    rt_runtime *rt = rtt_start(2, NULL);
    rt_actor *p = rtt_spawn(rt, &beh, NULL, 1, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(p, K_PING, 0, NULL), 0);
    ck_assert(wait_log("child 1"));
    ck_assert_int_eq(atomic_load(&child_loop), 1);
    rt_actor_unref(p);
    rtt_free(rt);
    ts_assert_clean(); /* the child's init and handler ran on loop 1 */
}
END_TEST

/* ------------------------------------------------------------ messages --- */

static struct {
    _Atomic uint64_t seen_sender;
} fields;

static int fields_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)state;
    if (m->kind == K_PING) {
        TS_CHECK(m->arg == 0x1122334455667788ull);
        TS_CHECK(m->status == 0);
        TS_CHECK(m->sender == 0);
        TS_CHECK(m->reply_to == NULL);
        TS_CHECK(rtt_buf_is(m->buf, "payload"));
        ts_log("ping");
    } else if (m->kind == K_SEQ) {
        TS_CHECK(m->buf == NULL);
        atomic_store(&fields.seen_sender, m->sender);
        ts_log("from actor");
    }
    return 0;
}

START_TEST(test_message_fields_from_outside)
{
    static const rt_behaviour beh = {.name = "fields", .handle = fields_handle};
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &beh, NULL, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_PING, 0x1122334455667788ull, rtt_buf("payload")), 0);
    ck_assert(wait_log("ping"));
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

static int relay_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)m;
    TS_CHECK(rt_send(state, K_SEQ, 0, NULL) == 0);
    return 0;
}

START_TEST(test_sender_is_the_sending_actor)
{
    static const rt_behaviour fb = {.name = "fields", .handle = fields_handle};
    static const rt_behaviour rb = {.name = "relay", .handle = relay_handle};
    rt_runtime *rt = rtt_start(2, NULL);
    rt_actor *to = rtt_spawn(rt, &fb, NULL, 1, RT_TEMPORARY, 0);
    rt_actor *from = rtt_spawn(rt, &rb, to, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(from, K_PING, 0, NULL), 0);
    ck_assert(wait_log("from actor"));
    ck_assert_uint_eq(atomic_load(&fields.seen_sender), rt_actor_id(from));
    rt_actor_unref(from);
    rt_actor_unref(to);
    rtt_free(rt);
    ts_assert_clean();
}
END_TEST

/* A handler borrows its message; a payload it keeps with rt_buf_ref
 * outlives the message, and one it does not keep is released with it. */
static rt_buf *kept;

static int keeper_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)state;
    if (m->arg == 0)
        kept = rt_buf_ref(m->buf);
    ts_log("kept %llu", (unsigned long long)m->arg);
    return 0;
}

START_TEST(test_handler_borrows_message_payload)
{
    static const rt_behaviour beh = {.name = "keeper", .handle = keeper_handle};
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &beh, NULL, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_PING, 0, rtt_buf("keep")), 0);
    ck_assert_int_eq(rt_send(a, K_PING, 1, rtt_buf("drop")), 0);
    ck_assert(wait_log("kept 1"));
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    /* Both messages are gone with the runtime; only the kept payload is
     * left, intact, and ours to release. */
    ck_assert_int_eq(rtt_bufs_live(), 1);
    ck_assert(rtt_buf_is(kept, "keep"));
    rt_buf_unref(kept);
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

/* ---------------------------------------------------- mailbox ordering --- */

enum { PRODUCERS = 4 };

typedef struct sink {
    uint64_t ids[PRODUCERS]; /* sender ids, for producers that are actors */
    uint32_t next[PRODUCERS];
    uint64_t total, expected;
    ts_counter done;
} sink;

static int sink_index(const sink *s, const rt_msg *m)
{
    if (m->sender == 0)
        return (int)(m->arg >> 32);
    for (int i = 0; i < PRODUCERS; i++)
        if (s->ids[i] == m->sender)
            return i;
    return -1;
}

static int sink_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    sink *s = state;
    int p = sink_index(s, m);
    uint32_t seq = (uint32_t)m->arg;
    if (p < 0 || p >= PRODUCERS) {
        TS_CHECK_MSG(0, "message from unknown sender %llu", (unsigned long long)m->sender);
        return 0;
    }
    TS_CHECK_MSG(seq == s->next[p], "producer %d: seq %u, expected %u", p, seq, s->next[p]);
    s->next[p] = seq + 1;
    if (++s->total == s->expected)
        ts_counter_add(&s->done, 1);
    return 0;
}

static const rt_behaviour sink_beh = {.name = "sink", .handle = sink_handle};

START_TEST(test_fifo_from_one_sender)
{
    rt_runtime *rt = rtt_start(1, NULL);
    sink s = {.expected = 10000};
    ts_counter_init(&s.done);
    rt_actor *a = rtt_spawn(rt, &sink_beh, &s, 0, RT_TEMPORARY, 0);
    for (uint32_t i = 0; i < s.expected; i++)
        ts_require(rt_send(a, K_SEQ, i, NULL) == 0, "send %u refused", i);
    ck_assert(ts_counter_wait(&s.done, 1));
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
}
END_TEST

struct thread_producer {
    rt_actor *to;
    uint32_t id, count;
    ts_counter *go;
};

static void *send_thread(void *p)
{
    struct thread_producer *tp = p;
    if (!ts_counter_wait(tp->go, 1))
        return NULL;
    for (uint32_t i = 0; i < tp->count; i++) {
        int rc = rt_send(tp->to, K_SEQ, (uint64_t)tp->id << 32 | i, NULL);
        if (rc != 0) {
            TS_CHECK_MSG(0, "rt_send: %s", rt_strerror(rc));
            break;
        }
    }
    return NULL;
}

/* Several threads send to one actor at once: every message arrives exactly
 * once and each thread's messages arrive in the order it sent them. */
START_TEST(test_mailbox_concurrent_thread_producers)
{
    const uint32_t per = TS_SCALE(200000, 50000);
    rt_runtime *rt = rtt_start(2, NULL);
    sink s = {.expected = (uint64_t)PRODUCERS * per};
    ts_counter_init(&s.done);
    rt_actor *a = rtt_spawn(rt, &sink_beh, &s, 0, RT_TEMPORARY, 0);

    ts_counter go;
    ts_counter_init(&go);
    pthread_t t[PRODUCERS];
    struct thread_producer tp[PRODUCERS];
    for (uint32_t i = 0; i < PRODUCERS; i++) {
        tp[i] = (struct thread_producer){a, i, per, &go};
        ck_assert_int_eq(pthread_create(&t[i], NULL, send_thread, &tp[i]), 0);
    }
    ts_counter_add(&go, 1);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(t[i], NULL);
    ck_assert_msg(ts_counter_wait(&s.done, 1), "received %llu of %llu", (unsigned long long)s.total,
                  (unsigned long long)s.expected);
    ts_assert_clean();
    for (int i = 0; i < PRODUCERS; i++)
        ck_assert_uint_eq(s.next[i], per);
    rt_actor_unref(a);
    rtt_free(rt);
    ck_assert_uint_eq(s.total, s.expected); /* nothing more arrived late */
}
END_TEST

/* Producers that are actors on both loops, sending in chunks between which
 * they yield (a self-sent K_CONT), so that their sends interleave. */
typedef struct actor_producer {
    rt_actor *to;
    uint32_t sent, count;
} actor_producer;

static int producer_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)m;
    actor_producer *p = state;
    for (int i = 0; i < 500 && p->sent < p->count; i++) {
        int rc = rt_send(p->to, K_SEQ, p->sent++, NULL);
        TS_CHECK_MSG(rc == 0, "rt_send: %s", rt_strerror(rc));
    }
    if (p->sent < p->count)
        TS_CHECK(rt_send(self, K_CONT, 0, NULL) == 0);
    return 0;
}

START_TEST(test_mailbox_concurrent_actor_producers)
{
    static const rt_behaviour pb = {.name = "producer", .handle = producer_handle};
    const uint32_t per = TS_SCALE(100000, 10000);
    rt_runtime *rt = rtt_start(2, NULL);
    sink s = {.expected = (uint64_t)PRODUCERS * per};
    ts_counter_init(&s.done);
    rt_actor *a = rtt_spawn(rt, &sink_beh, &s, 0, RT_TEMPORARY, 0);

    actor_producer ap[PRODUCERS];
    rt_actor *p[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        ap[i] = (actor_producer){.to = a, .count = per};
        p[i] = rtt_spawn(rt, &pb, &ap[i], i % 2, RT_TEMPORARY, 0);
        s.ids[i] = rt_actor_id(p[i]);
    }
    for (int i = 0; i < PRODUCERS; i++)
        ck_assert_int_eq(rt_send(p[i], K_CONT, 0, NULL), 0);
    ck_assert_msg(ts_counter_wait(&s.done, 1), "received %llu of %llu", (unsigned long long)s.total,
                  (unsigned long long)s.expected);
    ts_assert_clean();
    for (int i = 0; i < PRODUCERS; i++) {
        ck_assert_uint_eq(s.next[i], per);
        rt_actor_unref(p[i]);
    }
    rt_actor_unref(a);
    rtt_free(rt);
}
END_TEST

/* ------------------------------------------------------------- fairness --- */

/* Two actors on one loop with many messages queued each: neither handles
 * more than RT_BATCH in a row while the other has work. The loop is held in
 * a gate while the messages are queued, so both are runnable at once. */
typedef struct fair {
    char order[2 * 1000];
    size_t len, expected;
    uint32_t next[2];
    ts_counter done;
} fair;

typedef struct fair_actor {
    fair *f;
    int idx;
} fair_actor;

static int fair_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    fair_actor *fa = state;
    fair *f = fa->f;
    TS_CHECK(m->arg == f->next[fa->idx]);
    f->next[fa->idx]++;
    f->order[f->len++] = (char)('A' + fa->idx);
    if (f->len == f->expected)
        ts_counter_add(&f->done, 1);
    return 0;
}

START_TEST(test_batch_fairness_between_two_busy_actors)
{
    static const rt_behaviour beh = {.name = "fair", .handle = fair_handle};
    const uint32_t n = 5 * RT_BATCH + 7;
    rt_runtime *rt = rtt_start(1, NULL);
    static fair f;
    f.expected = 2 * n;
    ts_counter_init(&f.done);
    fair_actor fa[2] = {{&f, 0}, {&f, 1}};
    rt_actor *a = rtt_spawn(rt, &beh, &fa[0], 0, RT_TEMPORARY, 0);
    rt_actor *b = rtt_spawn(rt, &beh, &fa[1], 0, RT_TEMPORARY, 0);

    rtt_gate g;
    rtt_gate_init(&g);
    rt_actor *blocker = rtt_block_loop(rt, 0, &g);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_int_eq(rt_send(a, K_SEQ, i, NULL), 0);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_int_eq(rt_send(b, K_SEQ, i, NULL), 0);
    rtt_gate_open(&g);
    ck_assert(ts_counter_wait(&f.done, 1));
    ts_assert_clean();

    /* Up to the point where one of them ran out of messages, runs of the
     * same actor are at most one batch long. */
    size_t last[2] = {0, 0};
    for (size_t i = 0; i < f.len; i++)
        last[f.order[i] - 'A'] = i;
    size_t both_busy = last[0] < last[1] ? last[0] : last[1];
    size_t run = 0, longest = 0;
    for (size_t i = 0; i <= both_busy; i++) {
        run = i > 0 && f.order[i] == f.order[i - 1] ? run + 1 : 1;
        if (run > longest)
            longest = run;
    }
    ck_assert_msg(longest <= RT_BATCH, "an actor handled %zu messages in a row", longest);
    ck_assert_uint_gt(longest, 0);

    rt_actor_unref(a);
    rt_actor_unref(b);
    rt_actor_unref(blocker);
    rtt_free(rt);
    rtt_gate_destroy(&g);
}
END_TEST

/* Actors that always have work (each message sends the next one to
 * itself) must still let each other and a newcomer on the same loop run. */
static struct {
    atomic_bool stop;
    long count[2];
    int last, run, longest; /* loop 0 only */
    ts_counter reached;
} busy;

enum { BUSY_TARGET = 50 * RT_BATCH };

static int busy_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)m;
    int idx = (int)(intptr_t)state;
    busy.run = busy.last == idx ? busy.run + 1 : 1;
    busy.last = idx;
    if (busy.run > busy.longest)
        busy.longest = busy.run;
    if (++busy.count[idx] == BUSY_TARGET)
        ts_counter_add(&busy.reached, 1);
    if (atomic_load(&busy.stop))
        return RT_DONE;
    TS_CHECK(rt_send(self, K_BUSY, 0, NULL) == 0);
    return 0;
}

static void busy_stop(rt_actor *self, void *state)
{
    (void)self;
    ts_log("busy %d stop", (int)(intptr_t)state);
}

START_TEST(test_busy_actors_do_not_starve_others)
{
    static const rt_behaviour beh = {.name = "busy", .handle = busy_handle, .stop = busy_stop};
    rt_runtime *rt = rtt_start(1, NULL);
    ts_counter_init(&busy.reached);
    busy.last = -1;
    rt_actor *a = rtt_spawn(rt, &beh, (void *)(intptr_t)0, 0, RT_TEMPORARY, 0);
    rt_actor *b = rtt_spawn(rt, &beh, (void *)(intptr_t)1, 0, RT_TEMPORARY, 0);
    rec r = {.name = "newcomer"};

    rtt_gate g;
    rtt_gate_init(&g);
    rt_actor *blocker = rtt_block_loop(rt, 0, &g);
    ck_assert_int_eq(rt_send(a, K_BUSY, 0, NULL), 0);
    ck_assert_int_eq(rt_send(b, K_BUSY, 0, NULL), 0);
    rtt_gate_open(&g);

    ck_assert_msg(ts_counter_wait(&busy.reached, 2), "one busy actor starved the other");
    rt_actor *c = rtt_spawn(rt, &rec_beh, &r, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(c, K_PING, 5, NULL), 0);
    ck_assert_msg(wait_log("newcomer 5"), "busy actors starved a newcomer");

    atomic_store(&busy.stop, true);
    ck_assert(wait_log("busy 0 stop"));
    ck_assert(wait_log("busy 1 stop"));
    ts_assert_clean();
    ck_assert_msg(busy.longest <= RT_BATCH, "%d messages in one turn", busy.longest);

    rt_actor_unref(a);
    rt_actor_unref(b);
    rt_actor_unref(c);
    rt_actor_unref(blocker);
    rtt_free(rt);
    rtt_gate_destroy(&g);
}
END_TEST

/* ------------------------------------------------------ bounded mailbox --- */

START_TEST(test_bounded_mailbox_refuses_beyond_cap)
{
    enum { CAP = 4 };
    rt_runtime *rt = rtt_start(1, NULL);
    rtt_gate g;
    rtt_gate_init(&g);
    rec r = {.name = "b", .gate = &g};
    rt_actor *a = rtt_spawn(rt, &rec_beh, &r, 0, RT_TEMPORARY, CAP);

    /* Once the handler is inside the gate, K_BLOCK has left the mailbox,
     * which is now empty and holds exactly CAP more. */
    ck_assert_int_eq(rt_send(a, K_BLOCK, 0, NULL), 0);
    rtt_gate_wait_entered(&g, 1);
    for (uint64_t i = 1; i <= CAP; i++)
        ck_assert_int_eq(rt_send(a, K_SEQ, i, rtt_buf("queued")), 0);

    rt_buf *extra = rtt_buf("refused");
    ck_assert_int_eq(rt_send(a, K_SEQ, 99, extra), RT_EFULL);
    ck_assert_int_eq(rt_send(a, K_SEQ, 98, NULL), RT_EFULL);
    /* Refused: the caller still owns the buffer, untouched. */
    ck_assert(rtt_buf_is(extra, "refused"));
    ck_assert_int_eq(rtt_bufs_freed(), 0);
    rt_buf_unref(extra);
    ck_assert_int_eq(rtt_bufs_freed(), 1);

    rtt_gate_open(&g);
    ck_assert(wait_log("b 4"));
    ts_assert_log(0, "b init, b block, b 1, b 2, b 3, b 4");

    /* The bound counts what is queued now, not what was ever sent. */
    for (uint64_t i = 5; i < 5 + CAP; i++)
        ck_assert_int_eq(rt_send(a, K_SEQ, i, NULL), 0);
    ck_assert(wait_log("b 8"));
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_uint_eq(ts_log_count("b 99") + ts_log_count("b 98"), 0);
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

START_TEST(test_unbounded_mailbox_takes_many_while_busy)
{
    enum { N = 10000 };
    rt_runtime *rt = rtt_start(1, NULL);
    rtt_gate g;
    rtt_gate_init(&g);
    sink s = {.expected = N};
    ts_counter_init(&s.done);
    rt_actor *a = rtt_spawn(rt, &sink_beh, &s, 0, RT_TEMPORARY, 0);
    rt_actor *blocker = rtt_block_loop(rt, 0, &g);
    for (uint32_t i = 0; i < N; i++)
        ts_require(rt_send(a, K_SEQ, i, NULL) == 0, "send %u refused", i);
    rtt_gate_open(&g);
    ck_assert(ts_counter_wait(&s.done, 1));
    rt_actor_unref(a);
    rt_actor_unref(blocker);
    rtt_free(rt);
    rtt_gate_destroy(&g);
    ts_assert_clean();
}
END_TEST

/* ------------------------------------------------------------- endings --- */

START_TEST(test_done_stops_and_closes)
{
    rt_runtime *rt = rtt_start(1, rtt_on_failure);
    rec r = {.name = "a"};
    rt_actor *a = rtt_spawn(rt, &rec_beh, &r, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_DONE, 0, NULL), 0);
    ck_assert(wait_log("a stop"));
    ck_assert(rtt_wait_closed(a));
    rt_buf *b = rtt_buf("late");
    ck_assert_int_eq(rt_send(a, K_PING, 1, b), RT_ECLOSED);
    ck_assert_int_eq(rtt_bufs_freed(), 0); /* still the caller's */
    rt_buf_unref(b);
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ts_assert_log(0, "a init, a done, a stop"); /* and no failure reported */
}
END_TEST

START_TEST(test_failure_reason_reaches_on_failure)
{
    rt_runtime *rt = rtt_start(2, rtt_on_failure);
    rec r = {.name = "a"};
    rt_actor *a = rtt_spawn(rt, &rec_beh, &r, 1, RT_TEMPORARY, 0);
    char want[64];
    rtt_failure_entry(a, -ENOSPC, want, sizeof want);
    ck_assert_int_eq(rt_send(a, K_FAIL, (uint64_t)(int64_t)-ENOSPC, NULL), 0);
    ck_assert(wait_log(want));
    ck_assert(rtt_wait_closed(a)); /* temporary: not restarted */
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_uint_eq(ts_log_count("a init"), 1);
    ck_assert_uint_eq(ts_log_count("a stop"), 1);
    ck_assert_int_lt(ts_log_index("a stop", 1), ts_log_index(want, 1));
}
END_TEST

START_TEST(test_init_failure_is_a_failure)
{
    rt_runtime *rt = rtt_start(1, rtt_on_failure);
    rec r = {.name = "a", .init_rc = -EIO};
    rt_actor *a = rtt_spawn(rt, &rec_beh, &r, 0, RT_TEMPORARY, 0);
    rt_send(a, K_PING, 1, NULL); /* may be accepted; must never be handled */
    char want[64];
    ck_assert(wait_log(rtt_failure_entry(a, -EIO, want, sizeof want)));
    ck_assert(rtt_wait_closed(a));
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_uint_eq(ts_log_count("a 1"), 0);
    ck_assert_uint_eq(ts_log_count("a init"), 1);
}
END_TEST

START_TEST(test_assert_in_init_is_a_failure)
{
    rt_runtime *rt = rtt_start(1, rtt_on_failure);
    rec r = {.name = "a", .init_asserts = true};
    rt_actor *a = rtt_spawn(rt, &rec_beh, &r, 0, RT_TEMPORARY, 0);
    rt_send(a, K_PING, 1, NULL); /* may be accepted; must never be handled */
    char want[64];
    ck_assert(wait_log(rtt_failure_entry(a, RT_EASSERT, want, sizeof want)));
    ck_assert(rtt_wait_closed(a));
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_uint_eq(ts_log_count("a 1"), 0);
}
END_TEST

/* rt_actor_stop: what was queued before it is handled, what came after is
 * not, and the payloads of the dropped messages are released. */
START_TEST(test_stop_after_queued_messages)
{
    rt_runtime *rt = rtt_start(1, rtt_on_failure);
    rtt_gate g;
    rtt_gate_init(&g);
    rec r = {.name = "a", .gate = &g};
    rt_actor *a = rtt_spawn(rt, &rec_beh, &r, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_BLOCK, 0, NULL), 0);
    rtt_gate_wait_entered(&g, 1);
    for (uint64_t i = 1; i <= 9; i++)
        ck_assert_int_eq(rt_send(a, K_SEQ, i, rtt_buf("before")), 0);
    ck_assert_int_eq(rt_actor_stop(a), 0);
    for (uint64_t i = 10; i < 15; i++) {
        rt_buf *b = rtt_buf("after");
        if (rt_send(a, K_SEQ, i, b) != 0)
            rt_buf_unref(b);
    }
    rtt_gate_open(&g);
    ck_assert(wait_log("a stop"));
    ck_assert(rtt_wait_closed(a));
    rt_actor_unref(a);
    rtt_free(rt);
    rtt_gate_destroy(&g);
    ts_assert_clean();
    ts_assert_log(0, "a init, a block, a 1, a 2, a 3, a 4, a 5, a 6, a 7, a 8, a 9, a stop");
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

/* A stop request is not a message the bound is for: it gets through a full
 * mailbox, after what is queued (actor.h: only rt_send/rt_ask count). */
START_TEST(test_stop_accepted_when_mailbox_full)
{
    rt_runtime *rt = rtt_start(1, NULL);
    rtt_gate g;
    rtt_gate_init(&g);
    rec r = {.name = "a", .gate = &g};
    rt_actor *a = rtt_spawn(rt, &rec_beh, &r, 0, RT_TEMPORARY, 1);
    ck_assert_int_eq(rt_send(a, K_BLOCK, 0, NULL), 0);
    rtt_gate_wait_entered(&g, 1);
    ck_assert_int_eq(rt_send(a, K_SEQ, 1, NULL), 0);
    ck_assert_int_eq(rt_send(a, K_SEQ, 2, NULL), RT_EFULL);
    ck_assert_int_eq(rt_actor_stop(a), 0);
    rtt_gate_open(&g);
    ck_assert(wait_log("a stop"));
    ck_assert(rtt_wait_closed(a));
    rt_actor_unref(a);
    rtt_free(rt);
    rtt_gate_destroy(&g);
    ts_assert_clean();
    ts_assert_log(0, "a init, a block, a 1, a stop");
}
END_TEST

/* arg_free runs once, when the actor is freed, never at a restart (the
 * next init needs the arg). */
static atomic_int arg_frees;

static void count_arg_free(void *arg)
{
    TS_CHECK(strcmp(((rec *)arg)->name, "a") == 0);
    atomic_fetch_add(&arg_frees, 1);
}

START_TEST(test_arg_free_once_when_freed)
{
    rt_runtime *rt = rtt_start(1, NULL);
    static rec r = {.name = "a"};
    rt_spawn_opts o = {
        .beh = &rec_beh, .arg = &r, .arg_free = count_arg_free, .loop = 0, .restart = RT_PERMANENT};
    rt_actor *a = NULL;
    ck_assert_int_eq(rt_spawn(rt, &o, &a), 0);
    ck_assert_int_eq(rt_send(a, K_FAIL, (uint64_t)(int64_t)-EIO, NULL), 0);
    ck_assert(ts_log_wait("a init", 2));
    ck_assert_int_eq(rt_send(a, K_PING, 3, NULL), 0);
    ck_assert(wait_log("a 3"));
    ck_assert_int_eq(atomic_load(&arg_frees), 0);
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_int_eq(atomic_load(&arg_frees), 1);
}
END_TEST

START_TEST(test_strerror)
{
    const int codes[] = {RT_EINVAL,   RT_ENOMEM, RT_ECLOSED, RT_EFULL,  RT_ETIMEDOUT,
                         RT_ENOREPLY, RT_EFAIL,  RT_EASSERT, RT_ETHREAD};
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        ck_assert_ptr_nonnull(rt_strerror(codes[i]));
        ck_assert_uint_gt(strlen(rt_strerror(codes[i])), 0);
    }
    /* A handler's own -errno is described too. */
    ck_assert_ptr_nonnull(rt_strerror(-ENOSPC));
    ck_assert_uint_gt(strlen(rt_strerror(-ENOSPC)), 0);
}
END_TEST

START_TEST(test_assert_outside_handler_aborts)
{
    volatile int zero = 0;
    RT_ASSERT(zero == 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("actor");
    TCase *tc = tcase_create("identity");
    tcase_add_test(tc, test_spawn_null_behaviour_is_einval);
    tcase_add_test(tc, test_spawn_bad_loop_is_einval);
    tcase_add_test(tc, test_ids_unique_and_references);
    tcase_add_test(tc, test_outside_thread_is_no_actor_and_no_loop);
    tcase_add_test(tc, test_init_runs_first_on_home_loop);
    tcase_add_test(tc, test_null_init_state_is_arg);
    tcase_add_test(tc, test_loop_any_from_outside_spreads);
    tcase_add_test(tc, test_loop_any_from_handler_is_calling_loop);
    suite_add_tcase(s, tc);

    tc = tcase_create("messages");
    tcase_add_test(tc, test_message_fields_from_outside);
    tcase_add_test(tc, test_sender_is_the_sending_actor);
    tcase_add_test(tc, test_handler_borrows_message_payload);
    tcase_add_test(tc, test_fifo_from_one_sender);
    tcase_add_test(tc, test_mailbox_concurrent_thread_producers);
    tcase_add_test(tc, test_mailbox_concurrent_actor_producers);
    suite_add_tcase(s, tc);

    tc = tcase_create("scheduling");
    tcase_add_test(tc, test_batch_fairness_between_two_busy_actors);
    tcase_add_test(tc, test_busy_actors_do_not_starve_others);
    tcase_add_test(tc, test_bounded_mailbox_refuses_beyond_cap);
    tcase_add_test(tc, test_unbounded_mailbox_takes_many_while_busy);
    suite_add_tcase(s, tc);

    tc = tcase_create("endings");
    tcase_add_test(tc, test_done_stops_and_closes);
    tcase_add_test(tc, test_failure_reason_reaches_on_failure);
    tcase_add_test(tc, test_init_failure_is_a_failure);
    tcase_add_test(tc, test_assert_in_init_is_a_failure);
    tcase_add_test(tc, test_stop_after_queued_messages);
    tcase_add_test(tc, test_stop_accepted_when_mailbox_full);
    tcase_add_test(tc, test_arg_free_once_when_freed);
    tcase_add_test(tc, test_strerror);
    tcase_add_test_raise_signal(tc, test_assert_outside_handler_aborts, SIGABRT);
    suite_add_tcase(s, tc);

    return ts_run_suite(s);
}
