/*
 * test_buf.c - rt_buf: construction, ownership of wrapped memory, and
 * reference counting when many threads hold and drop references at once;
 * rt_tbuf, a buffer per thread.
 */
#include "runtime/buf.h"
#include "runtime/tbuf.h"
#include "support_sync.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct dtor_rec {
    atomic_int calls;
    void *data;
    void *ctx;
    atomic_int *active; /* threads still using the buffer when dtor ran */
    int active_at_dtor;
} dtor_rec;

static void record_dtor(void *data, void *ctx)
{
    dtor_rec *r = ctx;
    r->data = data;
    r->ctx = ctx;
    r->active_at_dtor = r->active ? atomic_load(r->active) : 0;
    atomic_fetch_add(&r->calls, 1);
}

static void free_dtor(void *data, void *ctx)
{
    record_dtor(data, ctx);
    free(data);
}

START_TEST(test_new_has_len_and_writable_bytes)
{
    rt_buf *b = rt_buf_new(100);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(rt_buf_len(b), 100);
    ck_assert_ptr_eq(rt_buf_data(b), rt_buf_wdata(b));
    memset(rt_buf_wdata(b), 0xab, 100);
    for (size_t i = 0; i < 100; i++)
        ck_assert_uint_eq(rt_buf_data(b)[i], 0xab);
    rt_buf_unref(b);
}
END_TEST

START_TEST(test_new_empty)
{
    rt_buf *b = rt_buf_new(0);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(rt_buf_len(b), 0);
    rt_buf_unref(b);
}
END_TEST

START_TEST(test_copy_is_independent_of_source)
{
    char src[] = "hello, parley";
    rt_buf *b = rt_buf_copy(src, sizeof src - 1);
    ck_assert_ptr_nonnull(b);
    src[0] = 'J';
    ck_assert_uint_eq(rt_buf_len(b), sizeof src - 1);
    ck_assert_mem_eq(rt_buf_data(b), "hello, parley", sizeof src - 1);
    rt_buf_unref(b);

    b = rt_buf_copy("", 0);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(rt_buf_len(b), 0);
    rt_buf_unref(b);
}
END_TEST

START_TEST(test_wrap_dtor_runs_once_on_last_unref)
{
    dtor_rec r = {0};
    char *mem = strdup("wrapped");
    rt_buf *b = rt_buf_wrap(mem, 7, free_dtor, &r);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_eq(rt_buf_data(b), (uint8_t *)mem);
    ck_assert_uint_eq(rt_buf_len(b), 7);

    ck_assert_ptr_eq(rt_buf_ref(b), b);
    ck_assert_ptr_eq(rt_buf_ref(b), b);
    rt_buf_unref(b);
    rt_buf_unref(b);
    ck_assert_int_eq(atomic_load(&r.calls), 0);
    rt_buf_unref(b);
    ck_assert_int_eq(atomic_load(&r.calls), 1);
    ck_assert_ptr_eq(r.data, mem);
    ck_assert_ptr_eq(r.ctx, &r);
}
END_TEST

START_TEST(test_wrap_static_memory_without_dtor)
{
    static const char text[] = "static";
    rt_buf *b = rt_buf_wrap((void *)text, 6, NULL, NULL);
    ck_assert_ptr_nonnull(b);
    ck_assert_mem_eq(rt_buf_data(b), "static", 6);
    rt_buf_ref(b);
    rt_buf_unref(b);
    rt_buf_unref(b); /* must not free `text` (ASan would tell) */
}
END_TEST

START_TEST(test_unref_null_ignored)
{
    rt_buf_unref(NULL);
}
END_TEST

/* ------------------------------------------------------ across threads --- */

enum { THREADS = 8, BYTES = 4096 };

typedef struct shared {
    rt_buf *b;
    ts_counter ready, go;
    atomic_int active;
    long rounds;
} shared;

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 31 + 7);
}

/* Each thread owns one reference from the start; meanwhile it takes and
 * drops many more, and reads the bytes (which ASan reports if they were
 * freed early, TSan if the creator's writes were not published). */
static void *holder(void *p)
{
    shared *s = p;
    rt_buf *mine = s->b;
    ts_counter_add(&s->ready, 1);
    if (!ts_counter_wait(&s->go, 1))
        abort();
    unsigned sum = 0;
    for (long i = 0; i < s->rounds; i++) {
        rt_buf *r = rt_buf_ref(mine);
        sum += rt_buf_data(r)[(size_t)i % BYTES];
        rt_buf_unref(r);
    }
    for (size_t i = 0; i < BYTES; i++)
        if (rt_buf_data(mine)[i] != pattern(i))
            abort();
    (void)sum;
    atomic_fetch_sub(&s->active, 1);
    rt_buf_unref(mine);
    return NULL;
}

START_TEST(test_refcount_across_threads)
{
    dtor_rec r = {0};
    shared s = {.rounds = TS_SCALE(200000, 20000)};
    atomic_init(&s.active, THREADS);
    r.active = &s.active;
    ts_counter_init(&s.ready);
    ts_counter_init(&s.go);

    uint8_t *mem = malloc(BYTES);
    for (size_t i = 0; i < BYTES; i++)
        mem[i] = pattern(i);
    s.b = rt_buf_wrap(mem, BYTES, free_dtor, &r);
    ck_assert_ptr_nonnull(s.b);

    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        rt_buf_ref(s.b); /* the thread's own reference */
        ck_assert_int_eq(pthread_create(&t[i], NULL, holder, &s), 0);
    }
    ck_assert(ts_counter_wait(&s.ready, THREADS));
    ts_counter_add(&s.go, 1);
    /* Drop the creator's reference while the threads still work, so the
     * last drop happens on whichever thread finishes last. */
    rt_buf_unref(s.b);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);

    ck_assert_int_eq(atomic_load(&r.calls), 1);
    ck_assert_int_eq(r.active_at_dtor, 0);
    ts_counter_destroy(&s.ready);
    ts_counter_destroy(&s.go);
}
END_TEST

START_TEST(test_outbox_gathers_and_hands_over)
{
    rt_outbox o = {0};
    rt_buf *b = (rt_buf *)1;
    ck_assert_int_eq(rt_outbox_take(&o, &b), 0);
    ck_assert_ptr_null(b); /* nothing gathered: nothing handed over */
    memcpy(rt_outbox_reserve(&o, 3), "abc", 3);
    uint8_t *big = rt_outbox_reserve(&o, 10000);
    ck_assert_ptr_nonnull(big);
    memset(big, 'x', 10000);
    ck_assert_ptr_null(rt_outbox_reserve(&o, SIZE_MAX)); /* refused, nothing changed */
    ck_assert_uint_eq(o.len, 10003);
    ck_assert_int_eq(rt_outbox_take(&o, &b), 0);
    ck_assert_uint_eq(rt_buf_len(b), 10003);
    ck_assert(memcmp(rt_buf_data(b), "abcx", 4) == 0);
    ck_assert_uint_eq(o.len, 0); /* empty again, the bytes are the buffer's */
    memcpy(rt_outbox_reserve(&o, 1), "z", 1);
    rt_buf_unref(b);
    rt_outbox_free(&o);
    ck_assert_ptr_null(o.p);
}
END_TEST

/* ---- rt_tbuf ------------------------------------------------------------ */

static rt_tbuf tb = RT_TBUF_INIT(1 << 16);

static void *tbuf_thread(void *arg)
{
    uint8_t *p = rt_tbuf_get(&tb);
    memset(p, 0xab, 1 << 16); /* all of it is this thread's */
    *(void **)arg = p;
    return rt_tbuf_get(&tb) == p ? p : NULL; /* freed as the thread ends (ASan: no leak) */
}

START_TEST(test_tbuf_one_per_thread)
{
    uint8_t *mine = rt_tbuf_get(&tb);
    ck_assert_ptr_nonnull(mine);
    memset(mine, 0x11, 1 << 16);
    ck_assert_ptr_eq(rt_tbuf_get(&tb), mine);
    for (int i = 0; i < 4; i++) {
        pthread_t t;
        void *theirs = NULL, *ok = NULL;
        ck_assert_int_eq(pthread_create(&t, NULL, tbuf_thread, &theirs), 0);
        ck_assert_int_eq(pthread_join(t, &ok), 0);
        ck_assert_ptr_nonnull(ok);
        ck_assert_ptr_ne(theirs, mine);
    }
    ck_assert_uint_eq(mine[0], 0x11);
    ck_assert_uint_eq(mine[(1 << 16) - 1], 0x11);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("buf");
    TCase *tt = tcase_create("tbuf");
    tcase_add_test(tt, test_tbuf_one_per_thread);
    suite_add_tcase(s, tt);
    TCase *tc = tcase_create("buf");
    tcase_add_test(tc, test_new_has_len_and_writable_bytes);
    tcase_add_test(tc, test_new_empty);
    tcase_add_test(tc, test_copy_is_independent_of_source);
    tcase_add_test(tc, test_wrap_dtor_runs_once_on_last_unref);
    tcase_add_test(tc, test_wrap_static_memory_without_dtor);
    tcase_add_test(tc, test_unref_null_ignored);
    tcase_add_test(tc, test_refcount_across_threads);
    tcase_add_test(tc, test_outbox_gathers_and_hands_over);
    suite_add_tcase(s, tc);

    return ts_run_suite(s);
}
