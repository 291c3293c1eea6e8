/*
 * test_nats_api.c - the embedding API (parley.h) on a NATS JetStream
 * store (the 3-node cluster nats_cluster.py starts: PARLEY_NATS_URLS):
 * appends whose checks match events older than what the node keeps of a
 * log in memory are checked in the thread pool first (conv_confirm.c),
 * with the local store's verdicts, in the order the appends were made,
 * and no loop thread ever waits for the cluster (issue 22).
 */
#include "parley.h"
#include "store/store.h"

#include "support_sync.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ANSWERS 4

typedef struct answer {
    pl_outcome outcome;
    size_t nevents;
    uint64_t index[4];
    int duplicate[4];
    char detail[200];
} answer;

typedef struct answers {
    pthread_mutex_t mu;
    answer a[MAX_ANSWERS];
    int n;
    ts_counter done;
} answers;

typedef struct slot {
    answers *all;
    int which;
} slot;

static void on_verdict(void *ctx, const pl_verdict *v)
{
    slot *s = ctx;
    answers *all = s->all;
    pthread_mutex_lock(&all->mu);
    answer *a = &all->a[s->which];
    a->outcome = v->outcome;
    a->nevents = v->nevents;
    for (size_t i = 0; i < v->nevents && i < 4; i++) {
        a->index[i] = v->events[i].index;
        a->duplicate[i] = v->events[i].duplicate;
    }
    snprintf(a->detail, sizeof a->detail, "%s", v->detail ? v->detail : "");
    all->n++;
    pthread_mutex_unlock(&all->mu);
    ts_counter_add(&all->done, 1);
}

static char *user(const char *id, const char *say)
{
    char *j = malloc(512);
    snprintf(j, 512,
             "{\"id\":\"%s\",\"kind\":\"MessageEvent\",\"source\":\"user\",\"timestamp\":"
             "\"2026-08-22T10:15:00.001731\",\"llm_message\":{\"role\":\"user\",\"content\":"
             "[{\"type\":\"text\",\"text\":\"%s\"}]}}",
             id, say);
    return j;
}

/* Append json and wait for its verdict. */
static answer append_wait(pl_conv *c, const char *json)
{
    answers all = {.n = 0};
    pthread_mutex_init(&all.mu, NULL);
    ts_counter_init(&all.done);
    slot s = {&all, 0};
    ck_assert_int_eq(pl_append(c, json, strlen(json), on_verdict, &s), 0);
    ck_assert(ts_counter_wait(&all.done, 1));
    answer a = all.a[0];
    ts_counter_destroy(&all.done);
    pthread_mutex_destroy(&all.mu);
    return a;
}

START_TEST(test_old_retries_in_order)
{
    const char *urls = getenv("PARLEY_NATS_URLS");
    ck_assert_msg(urls && *urls, "PARLEY_NATS_URLS is not set: run this suite through "
                                 "tests/integration/nats_cluster.py run --");
    char dir[] = "/tmp/parley-nats-api-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    pl_options o = {.workers = 2, .data_dir = dir, .store = urls};
    pl_instance *p = NULL;
    char err[256] = "";
    ck_assert_msg(pl_open(&o, &p, err, sizeof err) == 0, "%s", err);
    pl_conv *c = NULL;
    ck_assert_int_eq(pl_conv_create(p, NULL, &c), 0);

    char *first = user("u0", "the first");
    answer a = append_wait(c, first);
    ck_assert_int_eq(a.outcome, PL_COMMITTED);
    ck_assert_uint_eq(a.index[0], 0);
    /* 300 more: event 0 is older than the 256 the node keeps in memory */
    for (int b = 0; b < 3; b++) {
        size_t cap = 100 * 600, len = 0;
        char *arr = malloc(cap);
        arr[len++] = '[';
        for (int i = 0; i < 100; i++) {
            char id[32];
            snprintf(id, sizeof id, "f%d", b * 100 + i);
            char *e = user(id, "filler");
            len += (size_t)snprintf(arr + len, cap - len, "%s%s", i ? "," : "", e);
            free(e);
        }
        arr[len++] = ']';
        arr[len] = '\0';
        a = append_wait(c, arr);
        free(arr);
        ck_assert_int_eq(a.outcome, PL_COMMITTED);
    }
    uint64_t n = 0;
    ck_assert_int_eq(pl_count(c, &n), 0);
    ck_assert_uint_eq(n, 301);

    /* made one after the other from this thread: a retry of event 0 with a
     * new event (its check goes to the thread pool), then two new events
     * and the retry alone, which must not overtake it */
    answers all = {.n = 0};
    pthread_mutex_init(&all.mu, NULL);
    ts_counter_init(&all.done);
    slot s[4] = {{&all, 0}, {&all, 1}, {&all, 2}, {&all, 3}};
    char *n1 = user("n1", "new one"), *n2 = user("n2", "new two"), *n3 = user("n3", "new three");
    char mixed[2048];
    snprintf(mixed, sizeof mixed, "[%s,%s]", first, n1);
    const char *jsons[4] = {mixed, n2, first, n3};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pl_append(c, jsons[i], strlen(jsons[i]), on_verdict, &s[i]), 0);
    ck_assert(ts_counter_wait(&all.done, 4));
    /* the new events are in the log in the order their appends were made */
    ck_assert_msg(all.a[0].outcome == PL_COMMITTED, "%s", all.a[0].detail);
    ck_assert_uint_eq(all.a[0].nevents, 2);
    ck_assert_uint_eq(all.a[0].index[0], 0);
    ck_assert(all.a[0].duplicate[0]);
    ck_assert_uint_eq(all.a[0].index[1], 301);
    ck_assert_int_eq(all.a[1].outcome, PL_COMMITTED);
    ck_assert_uint_eq(all.a[1].index[0], 302);
    ck_assert_int_eq(all.a[2].outcome, PL_DUPLICATE);
    ck_assert_uint_eq(all.a[2].index[0], 0);
    ck_assert_int_eq(all.a[3].outcome, PL_COMMITTED);
    ck_assert_uint_eq(all.a[3].index[0], 303);
    /* the same id with other words: refused, as the local store does */
    char *other = user("u0", "other words");
    a = append_wait(c, other);
    ck_assert_int_eq(a.outcome, PL_REJECTED);
    ck_assert_int_eq(pl_count(c, &n), 0);
    ck_assert_uint_eq(n, 304);
    uint64_t waits = atomic_load(&st_nats_loop_requests);
    ck_assert_uint_eq(waits, 0); /* no loop thread waited for the cluster */

    free(first);
    free(n1);
    free(n2);
    free(n3);
    free(other);
    ts_counter_destroy(&all.done);
    pthread_mutex_destroy(&all.mu);
    pl_conv_release(c);
    pl_close(p);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nats_api");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_old_retries_in_order);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
