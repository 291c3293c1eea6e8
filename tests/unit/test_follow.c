/*
 * test_follow.c - the follower's copy against a simulated server log:
 * live frames in order, duplicates, holes repaired from REST pages, frames
 * held past a hole, divergence, servers without indexes, resumed copies
 * (fl_probe) and the count a last page gives, and the cost
 * property: repairing k missing events out of a 100k-event log takes at
 * most ceil(k/100) + 1 requests.
 */
#include "actors/follow.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BIG = 100000 };

static char ids[BIG + 10][16];
static rt_buf *body;

static void setup(void)
{
    for (int i = 0; i < BIG + 10; i++)
        snprintf(ids[i], sizeof(ids[i]), "e%d", i);
    body = rt_buf_copy("{}", 2);
}

static void teardown(void)
{
    rt_buf_unref(body);
}

/* The server: a log of `len` events ids[0..len-1], paged as the API pages
 * (inclusive cursor, next_page_id). Answers until the copy wants nothing;
 * the number of requests. */
static int serve(fl *f, uint64_t len, const char *const *log)
{
    int requests = 0;
    fl_fetch q;
    const char *page[FL_PAGE];
    rt_buf *bytes[FL_PAGE];
    for (int i = 0; i < FL_PAGE; i++)
        bytes[i] = body;
    while (fl_want(f, &q)) {
        ck_assert_int_lt(++requests, 2 * BIG);
        uint64_t at = 0;
        if (q.cursor[0] != '\0')
            while (at < len && strcmp(log[at], q.cursor) != 0)
                at++;
        size_t n = 0;
        for (; n < q.limit && at + n < len; n++)
            page[n] = log[at + n];
        const char *next = at + n < len ? log[at + n] : NULL;
        ck_assert_int_eq(fl_page(f, &q, page, bytes, n, next), FL_ADDED);
    }
    return requests;
}

static const char **plain_log(void)
{
    static const char *log[BIG + 10];
    for (int i = 0; i < BIG + 10; i++)
        log[i] = ids[i];
    return log;
}

static void expect_copy(fl *f, uint64_t len)
{
    ck_assert_uint_eq(fl_count(f), len);
    for (uint64_t i = 0; i < len; i++)
        ck_assert_str_eq(fl_id(f, i), ids[i]);
}

START_TEST(test_live_in_order)
{
    fl *f = fl_new();
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(fl_live(f, (uint64_t)i, ids[i], body), FL_ADDED);
    ck_assert_int_eq(fl_live(f, 3, ids[3], body), FL_DUPLICATE);
    ck_assert_int_eq(fl_live(f, 3, "other", body), FL_DIVERGED);
    ck_assert_int_eq(fl_live(f, 10, ids[2], body), FL_DIVERGED); /* an id twice */
    fl_fetch q;
    ck_assert(!fl_want(f, &q));
    expect_copy(f, 10);
    fl_free(f);
}
END_TEST

START_TEST(test_hole_repaired_and_held_frames_merged)
{
    fl *f = fl_new();
    const char **log = plain_log();
    for (int i = 0; i < 10; i++)
        fl_live(f, (uint64_t)i, ids[i], body);
    for (int i = 20; i < 30; i++) /* 10..19 were lost */
        ck_assert_int_eq(fl_live(f, (uint64_t)i, ids[i], body), FL_AHEAD);
    ck_assert_uint_eq(fl_count(f), 10);
    fl_fetch q;
    ck_assert(fl_want(f, &q));
    ck_assert_str_eq(q.cursor, "e9");
    ck_assert_uint_eq(q.first, 9);
    ck_assert_int_eq(serve(f, 30, log), 1);
    expect_copy(f, 30);
    ck_assert_int_eq(fl_live(f, 25, ids[25], body), FL_DUPLICATE);
    fl_free(f);
}
END_TEST

START_TEST(test_cost_of_a_missed_tail)
{
    const char **log = plain_log();
    static const int ks[] = {1, 50, 99, 100, 101, 250, 1000, 5000};
    for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++) {
        int k = ks[j];
        fl *f = fl_new();
        for (int i = 0; i < BIG - k; i++)
            fl_live(f, (uint64_t)i, ids[i], body);
        fl_server_count(f, BIG); /* e.g. GET .../events/count, or a live index */
        int requests = serve(f, BIG, log);
        ck_assert_msg(requests <= (k + 99) / 100 + 1, "k=%d: %d requests", k, requests);
        expect_copy(f, BIG);
        fl_free(f);
    }
}
END_TEST

START_TEST(test_cost_of_a_hole)
{
    const char **log = plain_log();
    static const int ks[] = {1, 100, 1000, 5000};
    for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++) {
        int k = ks[j];
        fl *f = fl_new();
        int hole = 50000, after = hole + k + 2000;
        for (int i = 0; i < after; i++) /* k lost, 2000 came after them before the repair */
            if (i < hole || i >= hole + k)
                fl_live(f, (uint64_t)i, ids[i], body);
        int requests = serve(f, (uint64_t)after, log);
        ck_assert_msg(requests <= (k + 99) / 100 + 1, "k=%d: %d requests", k, requests);
        for (int i = after; i < BIG; i++)
            ck_assert_int_eq(fl_live(f, (uint64_t)i, ids[i], body), FL_ADDED);
        expect_copy(f, BIG);
        fl_free(f);
    }
}
END_TEST

/* More frames past a hole than are held: the newest are fetched instead */
START_TEST(test_bounded_hold)
{
    fl *f = fl_new();
    int hole = 1000, end = hole + 10 + FL_AHEAD_MAX + 5000;
    for (int i = 0; i < end; i++)
        if (i < hole || i >= hole + 10)
            fl_live(f, (uint64_t)i, ids[i], body);
    int requests = serve(f, (uint64_t)end, plain_log());
    ck_assert_int_le(requests, (10 + 5000 + 99) / 100 + 2);
    expect_copy(f, (uint64_t)end);
    fl_free(f);
}
END_TEST

START_TEST(test_from_scratch)
{
    fl *f = fl_new();
    fl_server_count(f, BIG);
    ck_assert_int_eq(serve(f, BIG, plain_log()), BIG / 100);
    expect_copy(f, BIG);
    fl_free(f);
}
END_TEST

START_TEST(test_diverged)
{
    fl *f = fl_new();
    for (int i = 0; i < 10; i++)
        fl_live(f, (uint64_t)i, ids[i], body);
    fl_server_count(f, 20);
    fl_fetch q;
    ck_assert(fl_want(f, &q));
    const char *page[] = {"not-e9", "e10"};
    rt_buf *bytes[] = {body, body};
    ck_assert_int_eq(fl_page(f, &q, page, bytes, 2, NULL), FL_DIVERGED);
    ck_assert_int_eq(fl_page(f, &q, page, bytes, 0, NULL), FL_DIVERGED);
    fl_free(f);
}
END_TEST

START_TEST(test_unindexed)
{
    fl *f = fl_new();
    const char **log = plain_log();
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(fl_live_unindexed(f, ids[i], body), FL_ADDED);
    ck_assert_int_eq(fl_live_unindexed(f, ids[4], body), FL_DUPLICATE);
    fl_server_count(f, 15); /* the count says 5 more than came */
    ck_assert_int_eq(serve(f, 15, log), 1);
    expect_copy(f, 15);
    fl_free(f);
}
END_TEST

/* A resumed copy asks once from its last event: 1 request when nothing is
 * new, ceil(k/100)+1 for k new; a copy that thought the server had more
 * than its last page says learns the true count (no endless asking). */
START_TEST(test_probe_and_last_page)
{
    const char **log = plain_log();
    fl *f = fl_new();
    for (int i = 0; i < 1000; i++)
        fl_live_unindexed(f, ids[i], body);
    ck_assert(fl_has(f, ids[999]));
    ck_assert(!fl_has(f, ids[1000]));
    fl_fetch q;
    ck_assert(!fl_want(f, &q));
    fl_probe(f);
    ck_assert_int_eq(serve(f, 1000, log), 1); /* nothing new: the cursor's page */
    fl_probe(f);
    ck_assert_int_eq(serve(f, 1250, log), 3); /* 99 + 100 + 51 */
    expect_copy(f, 1250);
    fl_server_count(f, 1252); /* a hint of two more, of which the server has one */
    ck_assert_int_eq(serve(f, 1251, log), 1);
    expect_copy(f, 1251);
    ck_assert(!fl_want(f, &q));
    fl_free(f);
}
END_TEST

/* A copy of the tail (tail --last N): it begins at base, older frames are
 * ignored, and what comes after is fetched from its last event as usual. */
START_TEST(test_tail_copy)
{
    const char **log = plain_log();
    fl *f = fl_new_at(1000);
    ck_assert_uint_eq(fl_count(f), 1000);
    ck_assert_uint_eq(fl_first(f), 1000);
    for (int i = 1000; i < 1010; i++)
        ck_assert_int_eq(fl_live(f, (uint64_t)i, ids[i], body), FL_ADDED);
    ck_assert_int_eq(fl_live(f, 5, ids[5], body), FL_DUPLICATE); /* before the copy */
    ck_assert_ptr_null(fl_id(f, 999));
    ck_assert_str_eq(fl_id(f, 1000), "e1000");
    fl_probe(f);
    ck_assert_int_eq(serve(f, 1250, log), 3); /* 1010..1249: 99 + 100 + 41 */
    ck_assert_uint_eq(fl_count(f), 1250);
    for (uint64_t i = 1000; i < 1250; i++)
        ck_assert_str_eq(fl_id(f, i), ids[i]);
    ck_assert_int_eq(fl_live(f, 1251, ids[1251], body), FL_AHEAD); /* a hole, as anywhere */
    ck_assert_int_eq(serve(f, 1252, log), 1);
    ck_assert_uint_eq(fl_count(f), 1252);
    fl_free(f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("follow");
    TCase *t = tcase_create("copy");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_live_in_order);
    tcase_add_test(t, test_hole_repaired_and_held_frames_merged);
    tcase_add_test(t, test_cost_of_a_missed_tail);
    tcase_add_test(t, test_cost_of_a_hole);
    tcase_add_test(t, test_bounded_hold);
    tcase_add_test(t, test_from_scratch);
    tcase_add_test(t, test_diverged);
    tcase_add_test(t, test_unindexed);
    tcase_add_test(t, test_probe_and_last_page);
    tcase_add_test(t, test_tail_copy);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
