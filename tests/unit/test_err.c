/*
 * test_err.c - rt_strerror and the ranges other modules register for their
 * codes: the runtime's own codes and -errno, a describer's words for its
 * range (and "unknown error" for a code it does not know), refusals (bad
 * and overlapping ranges, a full table), the same registration twice, and
 * registrations from several threads while others describe codes.
 *
 * The ranges here are made up, from -10000 down, so that they never meet
 * the real modules' (runtime/err.h). A range is never given back, so every
 * test takes its own, and the one that fills the table runs last.
 */
#include "runtime/err.h"

#include "support_sync.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

static const char *describe_a(int err)
{
    return err == -10001 ? "a one" : err == -10002 ? "a two" : NULL;
}

static const char *describe_b(int err)
{
    (void)err;
    return "b";
}

START_TEST(test_runtime_codes)
{
    const int codes[] = {RT_EINVAL,   RT_ENOMEM, RT_ECLOSED, RT_EFULL,  RT_ETIMEDOUT,
                         RT_ENOREPLY, RT_EFAIL,  RT_EASSERT, RT_ETHREAD};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        ck_assert_str_ne(rt_strerror(codes[i]), "unknown error");
    ck_assert_str_eq(rt_strerror(RT_OK), "ok");
    ck_assert_str_eq(rt_strerror(-ENOSPC), strerror(ENOSPC));
    /* in no range, or in the runtime's but not one of its codes */
    ck_assert_str_eq(rt_strerror(-1999), "unknown error");
    ck_assert_str_eq(rt_strerror(-9999999), "unknown error");
    ck_assert_str_eq(rt_strerror(7), "unknown error");
}
END_TEST

START_TEST(test_register_describes_the_range)
{
    ck_assert_str_eq(rt_strerror(-10001), "unknown error");
    ck_assert_int_eq(rt_err_register(-10999, -10000, describe_a), 0);
    ck_assert_str_eq(rt_strerror(-10001), "a one");
    ck_assert_str_eq(rt_strerror(-10002), "a two");
    ck_assert_str_eq(rt_strerror(-10500), "unknown error"); /* the describer's NULL */
    ck_assert_str_eq(rt_strerror(-11000), "unknown error"); /* just outside */
    ck_assert_str_eq(rt_strerror(RT_EINVAL), "invalid argument");
    /* a module whose start-up runs twice */
    ck_assert_int_eq(rt_err_register(-10999, -10000, describe_a), 0);
    ck_assert_str_eq(rt_strerror(-10001), "a one");
    /* a range of one code */
    ck_assert_int_eq(rt_err_register(-11000, -11000, describe_b), 0);
    ck_assert_str_eq(rt_strerror(-11000), "b");
    ck_assert_str_eq(rt_strerror(-10001), "a one");
}
END_TEST

START_TEST(test_register_refusals)
{
    ck_assert_int_eq(rt_err_register(-12999, -12000, NULL), RT_EINVAL);
    ck_assert_int_eq(rt_err_register(-12000, -12999, describe_b), RT_EINVAL); /* lo > hi */
    /* the runtime's codes and -errno stay the runtime's */
    ck_assert_int_eq(rt_err_register(-1999, -1000, describe_b), RT_EINVAL);
    ck_assert_int_eq(rt_err_register(-2500, -1999, describe_b), RT_EINVAL);
    ck_assert_int_eq(rt_err_register(-999, -1, describe_b), RT_EINVAL);
    ck_assert_str_eq(rt_strerror(RT_EINVAL), "invalid argument");

    ck_assert_int_eq(rt_err_register(-12999, -12000, describe_a), 0);
    /* the same range with another describer, and every kind of overlap */
    ck_assert_int_eq(rt_err_register(-12999, -12000, describe_b), RT_EINVAL);
    ck_assert_int_eq(rt_err_register(-13500, -12999, describe_b), RT_EINVAL);
    ck_assert_int_eq(rt_err_register(-12000, -11500, describe_b), RT_EINVAL);
    ck_assert_int_eq(rt_err_register(-12600, -12400, describe_b), RT_EINVAL);
    ck_assert_int_eq(rt_err_register(-14000, -11000, describe_b), RT_EINVAL);
    ck_assert_str_eq(rt_strerror(-12500), "unknown error"); /* still describe_a's */
    /* next to it is free */
    ck_assert_int_eq(rt_err_register(-13999, -13000, describe_b), 0);
    ck_assert_str_eq(rt_strerror(-13000), "b");
}
END_TEST

/* Modules register on their own threads while codes are being described:
 * thread i takes the range whose highest code is -20000 - 1000 i. */
enum { THREADS = 6, LOOKUPS = 2000 };

static ts_counter go;

static int thread_code(int i)
{
    return -20001 - 1000 * i;
}

static const char *describe_thread(int err)
{
    (void)err;
    return "a thread's";
}

typedef struct worker {
    int i;
    const char *why; /* what went wrong; NULL: nothing */
} worker;

static const char *register_and_describe(int i)
{
    if (!ts_counter_wait(&go, 1))
        return "no start";
    if (rt_err_register(thread_code(i) - 998, thread_code(i) + 1, describe_thread) != 0)
        return "refused";
    for (int k = 0; k < LOOKUPS; k++) {
        if (strcmp(rt_strerror(thread_code(i)), "a thread's") != 0)
            return "its own code not described";
        const char *d = rt_strerror(thread_code(k % THREADS)); /* registered or not yet */
        if (strcmp(d, "a thread's") != 0 && strcmp(d, "unknown error") != 0)
            return "another's code described wrongly";
    }
    return NULL;
}

static void *work(void *arg)
{
    worker *w = arg;
    w->why = register_and_describe(w->i);
    return NULL;
}

START_TEST(test_register_from_threads)
{
    ts_counter_init(&go);
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){i, NULL};
        ck_assert_int_eq(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    ts_counter_add(&go, 1);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(w[i].why == NULL, "thread %d: %s", i, w[i].why);
    }
    for (int i = 0; i < THREADS; i++)
        ck_assert_str_eq(rt_strerror(thread_code(i)), "a thread's");
}
END_TEST

START_TEST(test_table_full)
{
    int r = 0, taken = 0;
    for (int i = 0; i <= RT_ERR_RANGES_MAX && r == 0; i++) {
        r = rt_err_register(-100999 - 1000 * i, -100000 - 1000 * i, describe_b);
        taken += r == 0;
    }
    ck_assert_int_eq(r, RT_EFULL);
    ck_assert_int_ge(taken, 1);
    ck_assert_int_le(taken, RT_ERR_RANGES_MAX);
    for (int i = 0; i < taken; i++)
        ck_assert_str_eq(rt_strerror(-100000 - 1000 * i), "b");
    ck_assert_str_eq(rt_strerror(-100000 - 1000 * taken), "unknown error");
    /* what is registered already is still 0 */
    ck_assert_int_eq(rt_err_register(-100999, -100000, describe_b), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("err");
    TCase *tc = tcase_create("err");
    tcase_add_test(tc, test_runtime_codes);
    tcase_add_test(tc, test_register_describes_the_range);
    tcase_add_test(tc, test_register_refusals);
    tcase_add_test(tc, test_register_from_threads);
    tcase_add_test(tc, test_table_full);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
