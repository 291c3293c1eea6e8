/*
 * test_mpsc.c - the mailbox queue on its own (runtime/mpsc.h): FIFO order,
 * node reuse, the idle mark, and several producer threads against one
 * consumer with no loss, no duplicates and per-producer order.
 */
#include "runtime/mpsc.h"
#include "support_sync.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct item {
    rt_mpsc_node node; /* first, so a node pointer is an item pointer */
    uint32_t producer;
    uint32_t seq;
} item;

static item *pop_item(rt_mpsc *q)
{
    return (item *)rt_mpsc_pop(q);
}

START_TEST(test_empty_queue_pops_null)
{
    rt_mpsc q;
    rt_mpsc_init(&q, false);
    ck_assert(rt_mpsc_empty(&q));
    ck_assert_ptr_null(rt_mpsc_pop(&q));
    ck_assert_ptr_null(rt_mpsc_pop(&q));
    ck_assert(rt_mpsc_empty(&q));
}
END_TEST

START_TEST(test_single_thread_fifo)
{
    enum { N = 1000 };
    static item it[N];
    rt_mpsc q;
    rt_mpsc_init(&q, false);
    for (uint32_t i = 0; i < N; i++) {
        it[i].seq = i;
        ts_require(!rt_mpsc_push(&q, &it[i].node), "push %u reported an idle queue", i);
    }
    ck_assert(!rt_mpsc_empty(&q));
    for (uint32_t i = 0; i < N; i++) {
        item *x = pop_item(&q);
        ts_require(x == &it[i], "pop %u: item %p, expected %p", i, (void *)x, (void *)&it[i]);
    }
    ck_assert_ptr_null(rt_mpsc_pop(&q));
    ck_assert(rt_mpsc_empty(&q));
}
END_TEST

/* The queue embeds its stub, so a popped node is free at once: pushing the
 * same node straight back (the pattern of a recycled message) must work,
 * including when it was the only node. */
START_TEST(test_popped_node_reused_at_once)
{
    item a = {.seq = 1}, b = {.seq = 2};
    rt_mpsc q;
    rt_mpsc_init(&q, false);
    for (int round = 0; round < 100; round++) {
        rt_mpsc_push(&q, &a.node);
        ck_assert_ptr_eq(pop_item(&q), &a);
        ck_assert_ptr_null(rt_mpsc_pop(&q));
        rt_mpsc_push(&q, &a.node);
        rt_mpsc_push(&q, &b.node);
        ck_assert_ptr_eq(pop_item(&q), &a);
        rt_mpsc_push(&q, &a.node);
        ck_assert_ptr_eq(pop_item(&q), &b);
        ck_assert_ptr_eq(pop_item(&q), &a);
        ck_assert(rt_mpsc_empty(&q));
    }
}
END_TEST

START_TEST(test_idle_mark_reported_once)
{
    item it[3];
    rt_mpsc q;
    rt_mpsc_init(&q, true);
    ck_assert(rt_mpsc_push(&q, &it[0].node));
    ck_assert(!rt_mpsc_push(&q, &it[1].node));

    /* Not empty: the consumer may not go idle. */
    ck_assert(!rt_mpsc_mark_idle(&q));
    ck_assert_ptr_eq(pop_item(&q), &it[0]);
    ck_assert(!rt_mpsc_mark_idle(&q));
    ck_assert_ptr_eq(pop_item(&q), &it[1]);
    ck_assert_ptr_null(rt_mpsc_pop(&q));

    ck_assert(rt_mpsc_mark_idle(&q));
    ck_assert(rt_mpsc_empty(&q));
    ck_assert(rt_mpsc_push(&q, &it[2].node));
    ck_assert(!rt_mpsc_empty(&q));
    ck_assert_ptr_eq(pop_item(&q), &it[2]);
    ck_assert(rt_mpsc_empty(&q));
}
END_TEST

START_TEST(test_not_idle_queue_push_reports_nothing)
{
    item it[2];
    rt_mpsc q;
    rt_mpsc_init(&q, false);
    ck_assert(!rt_mpsc_push(&q, &it[0].node));
    ck_assert_ptr_eq(pop_item(&q), &it[0]);
    ck_assert(!rt_mpsc_push(&q, &it[1].node));
}
END_TEST

/* ------------------------------------------------------ many producers --- */

enum { PRODUCERS = 4 };

typedef struct stress {
    rt_mpsc q;
    item *items[PRODUCERS];
    uint32_t per_producer;
    ts_counter ready;     /* producers waiting at the start line */
    ts_counter go;        /* opened once all are ready, so they really overlap */
    _Atomic long wakeups; /* pushes that found the idle mark */
    bool bursty;          /* pause between short bursts, so the queue often runs dry */
    uint32_t index[PRODUCERS];
} stress;

struct producer_arg {
    stress *s;
    uint32_t id;
};

/* A short, uneven pause: long enough for the consumer to drain the queue
 * and mark it idle now and then, short enough to keep pushes racing it. */
static void pause_a_little(uint32_t *rng)
{
    *rng ^= *rng << 13;
    *rng ^= *rng >> 17;
    *rng ^= *rng << 5;
    if ((*rng & 1) != 0)
        return;
    if ((*rng & 0x700) == 0) {
        sched_yield();
        return;
    }
    for (volatile uint32_t n = (*rng >> 12) & 4095; n > 0; n--) {
    }
}

static void *producer(void *p)
{
    struct producer_arg *pa = p;
    stress *s = pa->s;
    uint32_t rng = 2463534242u + pa->id * 7919u;
    ts_counter_add(&s->ready, 1);
    if (!ts_counter_wait(&s->go, 1))
        abort();
    for (uint32_t i = 0; i < s->per_producer; i++) {
        item *it = &s->items[pa->id][i];
        it->producer = pa->id;
        it->seq = i;
        if (rt_mpsc_push(&s->q, &it->node))
            atomic_fetch_add(&s->wakeups, 1);
        if (s->bursty)
            pause_a_little(&rng);
    }
    return NULL;
}

static void stress_init(stress *s, uint32_t per_producer, bool bursty)
{
    rt_mpsc_init(&s->q, false);
    s->per_producer = per_producer;
    s->bursty = bursty;
    atomic_init(&s->wakeups, 0);
    for (int p = 0; p < PRODUCERS; p++) {
        s->items[p] = calloc(per_producer, sizeof(item));
        ck_assert_ptr_nonnull(s->items[p]);
        s->index[p] = 0;
    }
    ts_counter_init(&s->ready);
    ts_counter_init(&s->go);
}

static void stress_free(stress *s)
{
    for (int p = 0; p < PRODUCERS; p++)
        free(s->items[p]);
    ts_counter_destroy(&s->ready);
    ts_counter_destroy(&s->go);
}

static void start_producers(stress *s, pthread_t *t, struct producer_arg *pa)
{
    for (uint32_t p = 0; p < PRODUCERS; p++) {
        pa[p] = (struct producer_arg){s, p};
        ck_assert_int_eq(pthread_create(&t[p], NULL, producer, &pa[p]), 0);
    }
    ck_assert(ts_counter_wait(&s->ready, PRODUCERS));
    ts_counter_add(&s->go, 1);
}

/* Each producer's items must come out in the order it pushed them, with no
 * gap (a loss) and no repeat (a duplicate). */
static void consume(stress *s, item *it)
{
    ts_require(it->producer < PRODUCERS, "item from producer %u", it->producer);
    ts_require(it->seq == s->index[it->producer],
               "producer %u: got seq %u, expected %u (lost, duplicated or reordered)", it->producer,
               it->seq, s->index[it->producer]);
    s->index[it->producer]++;
}

static void check_all_consumed(stress *s)
{
    for (int p = 0; p < PRODUCERS; p++)
        ck_assert_uint_eq(s->index[p], s->per_producer);
    ck_assert_ptr_null(rt_mpsc_pop(&s->q));
    ck_assert(rt_mpsc_empty(&s->q));
}

START_TEST(test_concurrent_producers_fifo_no_loss)
{
    stress s;
    stress_init(&s, TS_SCALE(200000, 50000), false);
    pthread_t t[PRODUCERS];
    struct producer_arg pa[PRODUCERS];
    start_producers(&s, t, pa);

    /* pop may return NULL while a producer is between its exchange and its
     * link; the consumer just tries again. */
    uint64_t total = (uint64_t)PRODUCERS * s.per_producer;
    for (uint64_t got = 0; got < total;) {
        item *it = pop_item(&s.q);
        if (it == NULL) {
            sched_yield();
            continue;
        }
        consume(&s, it);
        got++;
    }
    for (int p = 0; p < PRODUCERS; p++)
        pthread_join(t[p], NULL);
    check_all_consumed(&s);
    ck_assert_int_eq(atomic_load(&s.wakeups), 0);
    stress_free(&s);
}
END_TEST

/* The mailbox protocol: the consumer drains, marks the queue idle and
 * waits until a producer reports that its push found the mark. If a mark
 * could be lost or seen twice, the consumer would wait forever (the deadline
 * fails the test) or the counts would differ; a push racing the mark and
 * lost would show as a gap in its producer's sequence. Producers pause
 * between bursts so that this happens thousands of times per run. */
START_TEST(test_idle_mark_handoff_under_contention)
{
    stress s;
    stress_init(&s, TS_SCALE(200000, 50000), true);
    pthread_t t[PRODUCERS];
    struct producer_arg pa[PRODUCERS];
    start_producers(&s, t, pa);

    uint64_t total = (uint64_t)PRODUCERS * s.per_producer;
    long marks = 0;
    for (uint64_t got = 0; got < total;) {
        item *it = pop_item(&s.q);
        if (it != NULL) {
            consume(&s, it);
            got++;
            continue;
        }
        if (!rt_mpsc_mark_idle(&s.q)) {
            sched_yield(); /* a push is being linked */
            continue;
        }
        marks++;
        ck_assert_msg(ts_wait_atomic(&s.wakeups, marks),
                      "idle mark %ld was never reported by a push", marks);
    }
    for (int p = 0; p < PRODUCERS; p++)
        pthread_join(t[p], NULL);
    check_all_consumed(&s);
    /* Exactly one push observed each mark. */
    ck_assert_int_eq(atomic_load(&s.wakeups), marks);
    stress_free(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mpsc");
    TCase *tc = tcase_create("single thread");
    tcase_add_test(tc, test_empty_queue_pops_null);
    tcase_add_test(tc, test_single_thread_fifo);
    tcase_add_test(tc, test_popped_node_reused_at_once);
    tcase_add_test(tc, test_idle_mark_reported_once);
    tcase_add_test(tc, test_not_idle_queue_push_reports_nothing);
    suite_add_tcase(s, tc);

    tc = tcase_create("concurrent");
    tcase_add_test(tc, test_concurrent_producers_fifo_no_loss);
    tcase_add_test(tc, test_idle_mark_handoff_under_contention);
    suite_add_tcase(s, tc);

    return ts_run_suite(s);
}
