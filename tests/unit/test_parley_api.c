/*
 * test_parley_api.c - the public embedding API (parley.h), through its
 * header alone: open and close an instance; every verdict an append or a
 * control gets; reads; subscriptions (every event once, in order, across
 * a restart of the instance, and a slow callback that falls behind
 * without holding any conversation up); an embedder's actor attached to a
 * conversation, crashed and restarted by its supervisor; and bad input to
 * every function (a clear error, nothing written).
 */
#include "parley.h"
#include "actors/conversation.h"
#include "store/io.h"

#include <jansson.h>
#include <semaphore.h>

#include "support_sync.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void make_tmp(void)
{
    snprintf(dir, sizeof(dir), "/tmp/parley-api-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

START_TEST(test_open_close)
{
    make_tmp();
    char data[300];
    snprintf(data, sizeof(data), "%s/data", dir);
    pl_options o = {.workers = 2, .data_dir = data};
    pl_instance *p = NULL;
    ck_assert_int_eq(pl_open(&o, &p, NULL, 0), 0);
    ck_assert_int_eq(pl_workers(p), 2);
    ck_assert_uint_eq(pl_conversations(p), 0);
    /* one process, or instance, per data directory */
    pl_instance *q = NULL;
    char err[256];
    ck_assert_int_eq(pl_open(&o, &q, err, sizeof(err)), -EBUSY);
    ck_assert_ptr_null(q);
    ck_assert_msg(strstr(err, "in use by another process") != NULL, "%s", err);
    struct stat st;
    ck_assert_int_eq(stat(data, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    pl_close(p);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_errors)
{
    make_tmp();
    char file[300], bad[320];
    snprintf(file, sizeof(file), "%s/file", dir);
    snprintf(bad, sizeof(bad), "%s/sub", file);
    FILE *f = fopen(file, "w");
    fclose(f);
    pl_options o = {.workers = 1, .data_dir = bad};
    pl_instance *p = NULL;
    char err[256];
    int r = pl_open(&o, &p, err, sizeof(err));
    ck_assert_int_eq(r, -ENOTDIR);
    ck_assert_ptr_null(p);
    ck_assert_str_eq(pl_strerror(r), strerror(ENOTDIR));
    ck_assert_msg(strstr(err, bad) && strstr(err, strerror(ENOTDIR)), "%s", err);
    pl_options neg = {.workers = -1, .data_dir = dir};
    ck_assert_int_lt(pl_open(&neg, &p, NULL, 0), 0);
    ck_assert_str_eq(pl_strerror(pl_open(&o, NULL, NULL, 0)), "invalid argument");
    pl_options dur = {.data_dir = dir, .durability = "sometimes"};
    ck_assert_int_eq(pl_open(&dur, &p, err, sizeof(err)), pl_open(&o, NULL, NULL, 0));
    ck_assert_msg(strstr(err, "unknown durability 'sometimes'") != NULL, "%s", err);
    ck_assert_ptr_nonnull(pl_version());
    pl_close(NULL);
    unlink(file);
    rmdir(dir);
}
END_TEST

/* ------------------------------------------------------------- helpers --- */

typedef struct verdict_slot {
    ts_counter done;
    pl_outcome outcome;
    char detail[512], rule[64], first_id[128];
    uint64_t first_index;
    size_t nevents, npending;
    int duplicate;
} verdict_slot;

static void slot_init(verdict_slot *v)
{
    memset(v, 0, sizeof(*v));
    ts_counter_init(&v->done);
}

static void on_verdict(void *ctx, const pl_verdict *v)
{
    verdict_slot *s = ctx;
    s->outcome = v->outcome;
    snprintf(s->detail, sizeof(s->detail), "%s", v->detail);
    snprintf(s->rule, sizeof(s->rule), "%s", v->rule != NULL ? v->rule : "");
    s->nevents = v->nevents;
    s->npending = v->npending;
    if (v->nevents > 0) {
        snprintf(s->first_id, sizeof(s->first_id), "%s", v->events[0].id);
        s->first_index = v->events[0].index;
        s->duplicate = v->events[0].duplicate;
    }
    ts_counter_add(&s->done, 1);
}

/* Append and wait: the outcome (the slot keeps the rest). */
static pl_outcome append(pl_conv *c, const char *json, verdict_slot *s)
{
    slot_init(s);
    ck_assert_int_eq(pl_append(c, json, strlen(json), on_verdict, s), 0);
    ck_assert(ts_counter_wait(&s->done, 1));
    return s->outcome;
}

static pl_outcome control(pl_conv *c, pl_control_op what, verdict_slot *s)
{
    slot_init(s);
    ck_assert_int_eq(pl_control(c, what, on_verdict, s), 0);
    ck_assert(ts_counter_wait(&s->done, 1));
    return s->outcome;
}

static const char *msg(const char *id, const char *source)
{
    static char buf[4][512];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, 512,
             "{\"id\":\"%s\",\"source\":\"%s\",\"llm_message\":{\"role\":\"%s\",\"content\":"
             "[{\"type\":\"text\",\"text\":\"hi\"}]},\"kind\":\"MessageEvent\"}",
             id, source, strcmp(source, "agent") == 0 ? "assistant" : "user");
    return b;
}

static const char *action(const char *id, const char *call)
{
    static char buf[2][1024];
    static int k;
    char *b = buf[k++ % 2];
    snprintf(b, 1024,
             "{\"id\":\"%s\",\"source\":\"agent\",\"thought\":[],\"action\":{\"command\":\"ls\","
             "\"kind\":\"TerminalAction\"},\"tool_name\":\"terminal\",\"tool_call_id\":\"%s\","
             "\"tool_call\":{\"id\":\"%s\",\"name\":\"terminal\",\"arguments\":\"{}\","
             "\"origin\":\"completion\"},\"llm_response_id\":\"r1\",\"kind\":\"ActionEvent\"}",
             id, call, call);
    return b;
}

static const char *observation(const char *id, const char *call, const char *parent)
{
    static char buf[2][1024];
    static int k;
    char *b = buf[k++ % 2];
    int n = snprintf(b, 1024, "{\"id\":\"%s\",\"source\":\"environment\",", id);
    if (parent != NULL)
        n += snprintf(b + n, 1024 - (size_t)n, "\"parent_id\":\"%s\",", parent);
    snprintf(b + n, 1024 - (size_t)n,
             "\"tool_name\":\"terminal\",\"tool_call_id\":\"%s\",\"observation\":{\"content\":"
             "[],\"kind\":\"TerminalObservation\"},\"action_id\":\"a\",\"kind\":"
             "\"ObservationEvent\"}",
             call);
    return b;
}

static pl_instance *open_in(const char *data, const pl_options *base)
{
    pl_options o = base != NULL ? *base : (pl_options){0};
    o.workers = 2;
    o.data_dir = data;
    pl_instance *p = NULL;
    char err[256];
    ck_assert_msg(pl_open(&o, &p, err, sizeof(err)) == 0, "%s", err);
    return p;
}

/* A new temp dir, and an instance on data/ in it. */
static pl_instance *fresh(char *data, size_t cap, const pl_options *o)
{
    make_tmp();
    snprintf(data, cap, "%s/data", dir);
    return open_in(data, o);
}

static void rm_tmp(void)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* ------------------------------------------------------------ verdicts --- */

START_TEST(test_every_verdict)
{
    pl_options o = {.defer_max = 1, .hold_max = 1, .hold_timeout_ms = 600000};
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), &o);
    pl_conv *c;
    ck_assert_int_eq(pl_conv_create(p, NULL, &c), 0);
    verdict_slot v, held;
    /* COMMITTED, with its index */
    ck_assert_int_eq(append(c, msg("m1", "user"), &v), PL_COMMITTED);
    ck_assert_uint_eq(v.nevents, 1);
    ck_assert_str_eq(v.first_id, "m1");
    ck_assert_uint_eq(v.first_index, 0);
    /* DUPLICATE: the same event again */
    ck_assert_int_eq(append(c, msg("m1", "user"), &v), PL_DUPLICATE);
    ck_assert_uint_eq(v.first_index, 0);
    /* REJECTED: another event under a used id, with the rule */
    ck_assert_int_eq(append(c, msg("m1", "agent"), &v), PL_REJECTED);
    ck_assert_str_eq(v.rule, "duplicate_event_id");
    ck_assert_msg(strstr(v.detail, "duplicate_event_id: ") == v.detail, "%s", v.detail);
    /* INVALID: not an event */
    ck_assert_int_eq(append(c, "{\"kind\":\"Frobnicate\"}", &v), PL_INVALID);
    ck_assert_msg(strstr(v.detail, "unknown event kind") != NULL, "%s", v.detail);
    ck_assert_int_eq(append(c, "[]", &v), PL_INVALID);
    /* DEFERRED: a user message while a tool call is pending; then BUSY past
     * the bound of one deferral */
    ck_assert_int_eq(append(c, action("a1", "c1"), &v), PL_COMMITTED);
    ck_assert_int_eq(append(c, msg("u2", "user"), &v), PL_DEFERRED);
    ck_assert_str_eq(v.first_id, "u2");
    ck_assert_int_eq(append(c, msg("u3", "user"), &v), PL_BUSY);
    ck_assert_msg(strstr(v.detail, "too many deferred messages") != NULL, "%s", v.detail);
    /* REJECTED with the pending calls named: an agent message mid-call */
    ck_assert_int_eq(append(c, msg("m9", "agent"), &v), PL_REJECTED);
    ck_assert_str_eq(v.rule, "interleaved_message");
    ck_assert_uint_eq(v.npending, 1);
    /* HELD is never an answer: a result naming a parent still to come
     * waits, and is answered COMMITTED once the parent is in */
    slot_init(&held);
    const char *early = observation("o1", "c1", "x1");
    ck_assert_int_eq(pl_append(c, early, strlen(early), on_verdict, &held), 0);
    ck_assert_int_eq(append(c, observation("o2", "c1", "y1"), &v), PL_BUSY); /* hold_max 1 */
    ck_assert_int_eq(ts_counter_get(&held.done), 0);
    ck_assert_int_eq(append(c, "{\"id\":\"x1\",\"source\":\"user\",\"kind\":\"PauseEvent\"}", &v),
                     PL_COMMITTED);
    ck_assert(ts_counter_wait(&held.done, 1)); /* x1 is in: o1 was offered again */
    ck_assert_int_eq(held.outcome, PL_COMMITTED);
    ck_assert_str_eq(held.first_id, "o1");
    ck_assert_uint_eq(held.first_index, v.first_index + 1);
    /* no call is pending now: the deferred u2 went in after o1. It may be
     * stored in a later group than o1; units are durable in order, so
     * once an event posted after it is committed, u2 is in the log */
    ck_assert_int_eq(append(c, msg("m2", "agent"), &v), PL_COMMITTED);
    uint64_t at;
    ck_assert_int_eq(pl_find(c, "u2", &at), 0);
    ck_assert_uint_eq(at, held.first_index + 1);
    /* DONE and CONFLICT: controls */
    ck_assert_int_eq(control(c, PL_RUN, &v), PL_DONE);
    ck_assert_int_eq(control(c, PL_RUN, &v), PL_CONFLICT);
    ck_assert_str_eq(v.detail, "conversation is already running");
    ck_assert_int_eq(control(c, PL_PAUSE, &v), PL_DONE);
    /* INVALID: a status that cannot be reached */
    ck_assert_int_eq(append(c,
                            "{\"source\":\"environment\",\"key\":\"execution_status\",\"value\":"
                            "\"finished\",\"kind\":\"ConversationStateUpdateEvent\"}",
                            &v),
                     PL_INVALID);
    ck_assert_msg(strstr(v.detail, "cannot go from paused to finished") != NULL, "%s", v.detail);
    /* an array, all or nothing */
    char arr[2048];
    snprintf(arr, sizeof(arr), "[%s,%s]", msg("n1", "environment"), msg("n1", "agent"));
    ck_assert_int_eq(append(c, arr, &v), PL_REJECTED);
    uint64_t n;
    ck_assert_int_eq(pl_find(c, "n1", &n), PL_ENOENT);
    /* info */
    pl_info info;
    ck_assert_int_eq(pl_conv_info(c, &info), 0);
    ck_assert_int_eq(info.status, PL_PAUSED);
    ck_assert_str_eq(info.id, pl_conv_id(c));
    ck_assert_ptr_nonnull(strstr(info.meta_json, pl_conv_id(c)));
    pl_info_clear(&info);
    /* after delete: the conversation is not found (a request that reaches
     * it while it goes is answered NOT_FOUND; one made after is refused) */
    ck_assert_int_eq(pl_conv_delete(c), 0);
    const char *late = msg("m2", "user");
    ck_assert_int_eq(pl_append(c, late, strlen(late), on_verdict, &v), PL_ENOENT);
    ck_assert_int_eq(pl_conv_delete(c), PL_ENOENT);
    pl_conv_release(c);
    pl_close(p);
    rm_tmp();
}
END_TEST

/* FAILED: the store cannot keep a deferred message durably (its file's
 * fsync, or the pool's fdatasync, fails: an injected I/O error), so the deferral is answered
 * FAILED, not DEFERRED: its producer learns that it would not survive a restart. */
static int failing_fsync(int fd)
{
    (void)fd;
    errno = EIO;
    return -1;
}

START_TEST(test_failed_verdict)
{
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), NULL);
    pl_conv *c;
    ck_assert_int_eq(pl_conv_create(p, NULL, &c), 0);
    verdict_slot v;
    ck_assert_int_eq(append(c, action("a1", "c1"), &v), PL_COMMITTED);
    st_io io = {.pwritev = pwritev, .fdatasync = failing_fsync, .fsync = failing_fsync};
    st_io_set(&io);
    pl_outcome o = append(c, msg("u1", "user"), &v);
    st_io_set(NULL);
    ck_assert_int_eq(o, PL_FAILED);
    ck_assert_msg(strstr(v.detail, "cannot keep the deferred message") != NULL, "%s", v.detail);
    pl_conv_release(c);
    pl_close(p);
    rm_tmp();
}
END_TEST

/* pl_reject: what waits for confirmation refused, as respond_to_confirmation
 * with accept false refuses it: each pending call answered by the user's
 * rejection saying why, and the conversation idle; nothing pending is DONE. */
START_TEST(test_reject)
{
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), NULL);
    pl_conv *c;
    ck_assert_int_eq(pl_conv_create(p, NULL, &c), 0);
    verdict_slot v;
    slot_init(&v);
    ck_assert_int_eq(pl_reject(c, NULL, on_verdict, &v), 0);
    ck_assert(ts_counter_wait(&v.done, 1));
    ck_assert_int_eq(v.outcome, PL_DONE);
    ck_assert_int_eq(control(c, PL_RUN, &v), PL_DONE);
    ck_assert_int_eq(append(c, action("a1", "c1"), &v), PL_COMMITTED);
    ck_assert_int_eq(
        append(c,
               "{\"source\":\"environment\",\"key\":\"execution_status\",\"value\":"
               "\"waiting_for_confirmation\",\"kind\":\"ConversationStateUpdateEvent\"}",
               &v),
        PL_COMMITTED);
    uint64_t before;
    ck_assert_int_eq(pl_count(c, &before), 0);
    slot_init(&v);
    ck_assert_int_eq(pl_reject(c, "not now", on_verdict, &v), 0);
    ck_assert(ts_counter_wait(&v.done, 1));
    ck_assert_int_eq(v.outcome, PL_DONE);
    pl_page *pg;
    ck_assert_int_eq(pl_read(c, before, 10, &pg), 0);
    ck_assert_uint_eq(pl_page_len(pg), 2);
    pl_event r = pl_page_event(pg, 0), st = pl_page_event(pg, 1);
    const char *says[] = {"\"kind\":\"UserRejectObservation\"", "\"tool_call_id\":\"c1\"",
                          "\"rejection_reason\":\"not now\""};
    for (size_t k = 0; k < 3; k++)
        ck_assert_msg(memmem(r.json, r.len, says[k], strlen(says[k])) != NULL, "%s in %.*s",
                      says[k], (int)r.len, r.json);
    ck_assert_ptr_nonnull(memmem(st.json, st.len, "\"value\":\"idle\"", 14));
    pl_page_free(pg);
    ck_assert_int_eq(pl_reject(NULL, NULL, on_verdict, &v), PL_EINVAL);
    ck_assert_int_eq(pl_reject(c, NULL, NULL, &v), PL_EINVAL);
    pl_conv_release(c);
    pl_close(p);
    rm_tmp();
}
END_TEST

/* --------------------------------------------------------------- reads --- */

START_TEST(test_reads)
{
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), NULL);
    pl_conv *c;
    pl_conv_options co = {
        .id = "5ca1ab1e-0000-4000-8000-0000000000aa",
        .meta_json = "{\"title\":\"t\",\"agent\":{\"kind\":\"Agent\",\"llm\":{\"model\":\"m\","
                     "\"api_key\":\"sk-not-kept\"}}}"};
    ck_assert_int_eq(pl_conv_create(p, &co, &c), 0);
    ck_assert_str_eq(pl_conv_id(c), "5ca1ab1e-0000-4000-8000-0000000000aa");
    verdict_slot v;
    char id[32];
    for (int i = 0; i < 250; i++) {
        snprintf(id, sizeof(id), "m%d", i);
        ck_assert_int_eq(append(c, msg(id, i % 2 ? "environment" : "user"), &v), PL_COMMITTED);
    }
    uint64_t n;
    ck_assert_int_eq(pl_count(c, &n), 0);
    ck_assert_uint_eq(n, 250);
    pl_page *pg;
    ck_assert_int_eq(pl_read(c, 200, 100, &pg), 0);
    ck_assert_uint_eq(pl_page_len(pg), 50);
    pl_event e = pl_page_event(pg, 0);
    ck_assert_uint_eq(e.index, 200);
    ck_assert_ptr_nonnull(memmem(e.json, e.len, "\"m200\"", 6));
    ck_assert_ptr_null(pl_page_event(pg, 50).json);
    pl_page_free(pg);
    ck_assert_int_eq(pl_find(c, "m123", &n), 0);
    ck_assert_uint_eq(n, 123);
    pl_info info;
    ck_assert_int_eq(pl_conv_info(c, &info), 0); /* a secret is never kept */
    ck_assert_ptr_null(strstr(info.meta_json, "sk-not-kept"));
    ck_assert_ptr_nonnull(strstr(info.meta_json, "\"api_key\":\"**********\""));
    pl_info_clear(&info);
    pl_id *ids;
    size_t k;
    ck_assert_int_eq(pl_conv_list(p, &ids, &k), 0);
    ck_assert_uint_eq(k, 1);
    ck_assert_str_eq(ids[0].s, pl_conv_id(c));
    free(ids);
    pl_conv *again;
    ck_assert_int_eq(pl_conv_create(p, &co, &again), PL_EEXIST);
    ck_assert_int_eq(pl_conv_open(p, "5ca1ab1e00004000800000000000aa00", &again), PL_ENOENT);
    ck_assert_int_eq(pl_conv_open(p, co.id, &again), 0);
    ck_assert_int_eq(pl_count(again, &n), 0);
    ck_assert_uint_eq(n, 250);
    pl_conv_release(again);
    pl_conv_release(c);
    pl_close(p);
    rm_tmp();
}
END_TEST

/* ------------------------------------------------------- subscriptions --- */

typedef struct collect {
    pthread_mutex_t mu;
    uint64_t *idx;
    size_t n, cap;
    ts_counter got, ended, lagging;
    int why;
    sem_t *gate; /* a slow subscriber waits here at its first event */
    bool waited;
} collect;

static void collect_init(collect *k)
{
    memset(k, 0, sizeof(*k));
    pthread_mutex_init(&k->mu, NULL);
    ts_counter_init(&k->got);
    ts_counter_init(&k->ended);
    ts_counter_init(&k->lagging);
}

static void on_event(void *ctx, const pl_event *e)
{
    collect *k = ctx;
    if (k->gate != NULL && !k->waited) {
        k->waited = true;
        sem_wait(k->gate); /* the test lets it go on */
    }
    pthread_mutex_lock(&k->mu);
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 256;
        k->idx = realloc(k->idx, k->cap * sizeof(*k->idx));
    }
    k->idx[k->n++] = e->index;
    pthread_mutex_unlock(&k->mu);
    ts_counter_add(&k->got, 1);
}

static void on_lagging(void *ctx, uint64_t next)
{
    (void)next;
    ts_counter_add(&((collect *)ctx)->lagging, 1);
}

static void on_ended(void *ctx, int why)
{
    collect *k = ctx;
    k->why = why;
    ts_counter_add(&k->ended, 1);
}

static const pl_sub_callbacks collecting = {on_event, on_lagging, on_ended};

/* Indexes from..from+n-1, each once, in order. */
static void assert_in_order(collect *k, uint64_t from, size_t n)
{
    pthread_mutex_lock(&k->mu);
    ck_assert_uint_eq(k->n, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(k->idx[i], from + i);
    pthread_mutex_unlock(&k->mu);
}

START_TEST(test_subscribe_across_restart)
{
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), NULL);
    pl_conv *c;
    ck_assert_int_eq(pl_conv_create(p, NULL, &c), 0);
    char cid[37];
    snprintf(cid, sizeof(cid), "%s", pl_conv_id(c));
    verdict_slot v;
    char id[32];
    for (int i = 0; i < 30; i++) { /* before the subscription */
        snprintf(id, sizeof(id), "a%d", i);
        ck_assert_int_eq(append(c, msg(id, "environment"), &v), PL_COMMITTED);
    }
    collect k;
    collect_init(&k);
    pl_sub *s;
    ck_assert_int_eq(pl_subscribe(c, 10, &collecting, &k, &s), 0);
    for (int i = 0; i < 30; i++) { /* while it catches up */
        snprintf(id, sizeof(id), "b%d", i);
        ck_assert_int_eq(append(c, msg(id, "environment"), &v), PL_COMMITTED);
    }
    ck_assert(ts_counter_wait(&k.got, 50));
    pl_conv_release(c);
    pl_close(p); /* the subscription ends: the instance closes */
    ck_assert(ts_counter_wait(&k.ended, 1));
    ck_assert_int_eq(k.why, PL_ECLOSED);
    pl_unsubscribe(s);
    assert_in_order(&k, 10, 50);
    /* the same data, a new instance: subscribe from where it stopped */
    p = open_in(data, NULL);
    ck_assert_int_eq(pl_conv_open(p, cid, &c), 0);
    ck_assert_int_eq(pl_subscribe(c, 60, &collecting, &k, &s), 0);
    for (int i = 0; i < 40; i++) {
        snprintf(id, sizeof(id), "c%d", i);
        ck_assert_int_eq(append(c, msg(id, "environment"), &v), PL_COMMITTED);
    }
    ck_assert(ts_counter_wait(&k.got, 90));
    pl_unsubscribe(s);
    assert_in_order(&k, 10, 90);
    /* the events are the log's */
    pl_page *pg;
    ck_assert_int_eq(pl_read(c, 60, 1, &pg), 0);
    ck_assert_ptr_nonnull(memmem(pl_page_event(pg, 0).json, pl_page_event(pg, 0).len, "\"c0\"", 4));
    pl_page_free(pg);
    /* deleting the conversation ends a subscription */
    collect d;
    collect_init(&d);
    ck_assert_int_eq(pl_subscribe(c, 0, &collecting, &d, &s), 0);
    ck_assert(ts_counter_wait(&d.got, 100));
    ck_assert_int_eq(pl_conv_delete(c), 0);
    ck_assert(ts_counter_wait(&d.ended, 1));
    ck_assert_int_eq(d.why, PL_ENOENT);
    pl_unsubscribe(s);
    pl_conv_release(c);
    pl_close(p);
    free(k.idx);
    free(d.idx);
    rm_tmp();
}
END_TEST

/* A callback that does not return for a while: its subscription falls
 * behind (the conversation drops it rather than wait), the conversations
 * go on answering meanwhile, and once the callback returns it gets every
 * event, once, in order, told it was lagging. */
START_TEST(test_slow_subscriber)
{
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), NULL);
    pl_conv *c, *other;
    ck_assert_int_eq(pl_conv_create(p, NULL, &c), 0);
    ck_assert_int_eq(pl_conv_create(p, NULL, &other), 0);
    sem_t gate;
    sem_init(&gate, 0, 0);
    collect k;
    collect_init(&k);
    k.gate = &gate;
    pl_sub *s;
    ck_assert_int_eq(pl_subscribe(c, 0, &collecting, &k, &s), 0);
    int n = TS_SCALE(3000, 1500); /* past the subscriber's bounded mailbox */
    char arr[64 * 1024];
    for (int i = 0; i < n; i += 50) {
        size_t len = 1;
        arr[0] = '[';
        for (int j = i; j < i + 50; j++) {
            char id[32];
            snprintf(id, sizeof(id), "s%d", j);
            len += (size_t)snprintf(arr + len, sizeof(arr) - len, "%s%s", j > i ? "," : "",
                                    msg(id, "environment"));
        }
        arr[len++] = ']';
        arr[len] = '\0';
        verdict_slot v;
        ck_assert_int_eq(append(c, arr, &v), PL_COMMITTED);
    }
    /* the conversations still answer while the callback is stuck */
    verdict_slot v;
    ck_assert_int_eq(append(other, msg("o1", "user"), &v), PL_COMMITTED);
    ck_assert_int_eq(ts_counter_get(&k.got), 0);
    sem_post(&gate);
    ck_assert(ts_counter_wait(&k.got, n));
    ck_assert_int_ge(ts_counter_get(&k.lagging), 1);
    pl_unsubscribe(s);
    assert_in_order(&k, 0, (size_t)n);
    pl_conv_release(c);
    pl_conv_release(other);
    pl_close(p);
    sem_destroy(&gate);
    free(k.idx);
    rm_tmp();
}
END_TEST

/* ------------------------------------------------- an embedder's actor --- */

enum { K_CRASH = 1, K_PING = 2 };

static ts_counter inits, pings;

static int agent_init(pl_actor *self, void *arg, void **state)
{
    (void)self;
    *state = arg;
    ts_counter_add(&inits, 1);
    return 0;
}

static int agent_handle(pl_actor *self, void *state, const pl_msg *m)
{
    (void)self;
    (void)state;
    if (m->kind == K_CRASH)
        return PL_EFAIL; /* on purpose */
    if (m->kind == K_PING) {
        ck_assert_uint_eq(m->len, 4);
        ck_assert_int_eq(memcmp(m->data, "ping", 4), 0);
        ts_counter_add(&pings, 1);
        if (m->req_ != NULL)
            pl_reply(m, K_PING, m->arg + 1, "pong", 4);
    }
    return 0;
}

static const pl_behaviour agent = {.name = "agent", .init = agent_init, .handle = agent_handle};

static ts_counter replies;
static uint64_t reply_arg;

static int asker_handle(pl_actor *self, void *state, const pl_msg *m)
{
    (void)self;
    (void)state;
    if (m->kind == K_PING) {
        reply_arg = m->arg;
        ts_counter_add(&replies, 1);
    }
    return 0;
}

static const pl_behaviour asker = {.name = "asker", .handle = asker_handle};

/* A new conversation of p with `agent` attached to its tree, started. */
static pl_actor *attached_agent(pl_instance *p, pl_conv **c)
{
    ck_assert_int_eq(pl_conv_create(p, NULL, c), 0);
    ts_counter_init(&inits);
    ts_counter_init(&pings);
    ts_counter_init(&replies);
    pl_actor *a;
    pl_spawn_options so = {.beh = &agent, .restart = PL_PERMANENT};
    ck_assert_int_eq(pl_conv_attach(*c, &so, &a), 0);
    ck_assert(ts_counter_wait(&inits, 1));
    return a;
}

START_TEST(test_attached_actor_restarts)
{
    pl_options o = {.sup_intensity = 3};
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), &o);
    pl_conv *c;
    pl_actor *a = attached_agent(p, &c), *q;
    ck_assert_int_eq(pl_send(a, K_CRASH, 0, NULL, 0), 0);
    ck_assert(ts_counter_wait(&inits, 2)); /* restarted by the conversation's supervisor */
    ck_assert_int_eq(pl_send(a, K_PING, 0, "ping", 4), 0);
    ck_assert(ts_counter_wait(&pings, 1)); /* the same actor, a new state */
    /* request and reply between two actors */
    pl_spawn_options ao = {.beh = &asker};
    ck_assert_int_eq(pl_spawn(p, &ao, &q), 0);
    ck_assert_int_eq(pl_ask(a, K_PING, 41, "ping", 4, q), 0);
    ck_assert(ts_counter_wait(&replies, 1));
    ck_assert_uint_eq(reply_arg, 42);
    /* the conversation was not restarted by its child's crash */
    verdict_slot v;
    ck_assert_int_eq(append(c, msg("m1", "user"), &v), PL_COMMITTED);
    ck_assert_uint_eq(v.first_index, 0);
    pl_actor_release(a);
    pl_actor_release(q);
    pl_conv_release(c);
    pl_close(p);
    rm_tmp();
}
END_TEST

/* A conversation at rest stops its actors (issue 21), but never one an
 * embedder attached actors to: once its log is let go (the moment it
 * would retire), the attached actor still answers and its tree runs. */
START_TEST(test_attached_actor_survives_rest)
{
    pl_options o = {.idle_close_ms = 20};
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), &o);
    pl_conv *c;
    pl_actor *a = attached_agent(p, &c);
    verdict_slot v;
    ck_assert_int_eq(append(c, msg("m1", "user"), &v), PL_COMMITTED);
    /* its log closes after 20 ms without a request */
    for (int i = 0; i < 30000 && atomic_load(&conv_metrics_g.open) > 0; i++)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&conv_metrics_g.open), 0);
    ck_assert_int_eq(atomic_load(&conv_metrics_g.active), 1);
    ck_assert_int_eq(pl_send(a, K_PING, 0, "ping", 4), 0);
    ck_assert(ts_counter_wait(&pings, 1));
    ck_assert_int_eq(append(c, msg("m2", "user"), &v), PL_COMMITTED);
    ck_assert_uint_eq(v.first_index, 1);
    pl_actor_release(a);
    pl_conv_release(c);
    pl_close(p);
    rm_tmp();
}
END_TEST

/* ----------------------------------------------------------- bad input --- */

static int blocking_result;
static ts_counter blocked;

static void call_blocking(void *ctx, const pl_verdict *v)
{
    (void)v;
    pl_info info;
    blocking_result = pl_conv_info(ctx, &info); /* on a parley thread: refused */
    ts_counter_add(&blocked, 1);
}

/* ------------------------------------------------------------ hosting --- */

typedef struct watch {
    pthread_mutex_t mu;
    ts_counter finished; /* the agent said something, then finished */
    bool said, masked, leaked;
} watch;

static void on_watched(void *ctx, const pl_event *e)
{
    watch *w = ctx;
    pthread_mutex_lock(&w->mu);
    bool agent_msg = memmem(e->json, e->len, "\"MessageEvent\"", 14) != NULL &&
                     memmem(e->json, e->len, "\"source\":\"agent\"", 16) != NULL;
    if (agent_msg) {
        w->said = true;
        w->masked |= memmem(e->json, e->len, "<secret-hidden>", 15) != NULL;
        w->leaked |= memmem(e->json, e->len, "tok-5521-zz", 11) != NULL;
    }
    bool done = w->said && memmem(e->json, e->len, "\"finished\"", 10) != NULL;
    pthread_mutex_unlock(&w->mu);
    if (done)
        ts_counter_add(&w->finished, 1);
}

/* An embedder hosts an agent as the server does: registered in the
 * options, named by a conversation, answering a user message once it runs,
 * its secret masked in what it says. */
START_TEST(test_hosted_agent)
{
    const char *argv[] = {PARLEY_BINARY_DIR "/parley", "demo-agent", "--no-fs", NULL};
    pl_agent demo = {.name = "demo", .argv = argv};
    pl_options o = {.agents = &demo, .nagents = 1};
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), &o);
    pl_conv_options bad = {.agent = "nope"};
    pl_conv *c;
    ck_assert_int_eq(pl_conv_create(p, &bad, &c), PL_EINVAL); /* not registered */
    pl_conv_options co = {.agent = "demo", .secrets_json = "{\"DEMO_TOKEN\": \"tok-5521-zz\"}"};
    ck_assert_int_eq(pl_conv_create(p, &co, &c), 0);
    watch w = {0};
    pthread_mutex_init(&w.mu, NULL);
    ts_counter_init(&w.finished);
    pl_sub_callbacks cb = {.event = on_watched};
    pl_sub *s;
    ck_assert_int_eq(pl_subscribe(c, 0, &cb, &w, &s), 0);
    verdict_slot v;
    const char *m = "{\"id\":\"u1\",\"source\":\"user\",\"kind\":\"MessageEvent\","
                    "\"llm_message\":{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                    "\"text\":\"my token is tok-5521-zz\"}]}}";
    ck_assert_int_eq(append(c, m, &v), PL_COMMITTED);
    ck_assert_int_eq(control(c, PL_RUN, &v), PL_DONE);
    ck_assert(ts_counter_wait(&w.finished, 1));
    pl_unsubscribe(s);
    ck_assert(w.masked && !w.leaked);
    pl_info info;
    ck_assert_int_eq(pl_conv_info(c, &info), 0);
    ck_assert_ptr_nonnull(strstr(info.meta_json, "\"acp_command\":[\"demo\"]"));
    ck_assert_ptr_null(strstr(info.meta_json, "tok-5521-zz"));
    pl_info_clear(&info);
    pl_conv_release(c);
    pl_close(p);
    pthread_mutex_destroy(&w.mu);
    rm_tmp();
}
END_TEST

START_TEST(test_bad_input)
{
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), NULL);
    pl_conv *c = NULL;
    pl_conv_options bad_id = {.id = "not-a-uuid"}, bad_meta = {.meta_json = "[1]"},
                    bad_th = {.stuck_monologue = 5000},
                    bad_secret = {.secrets_json = "{\"9x\": \"v\"}"},
                    not_secrets = {.secrets_json = "[\"v\"]"};
    ck_assert_int_eq(pl_conv_create(NULL, NULL, &c), PL_EINVAL);
    ck_assert_int_eq(pl_conv_create(p, NULL, NULL), PL_EINVAL);
    ck_assert_int_eq(pl_conv_create(p, &bad_id, &c), PL_EINVAL);
    ck_assert_int_eq(pl_conv_create(p, &bad_meta, &c), PL_EINVAL);
    ck_assert_int_eq(pl_conv_create(p, &bad_th, &c), PL_EINVAL);
    ck_assert_int_eq(pl_conv_create(p, &bad_secret, &c), PL_EINVAL);
    ck_assert_int_eq(pl_conv_create(p, &not_secrets, &c), PL_EINVAL);
    ck_assert_uint_eq(pl_conversations(p), 0); /* nothing was written */
    ck_assert_int_eq(pl_conv_open(p, NULL, &c), PL_EINVAL);
    ck_assert_int_eq(pl_conv_open(p, "zz", &c), PL_EINVAL);
    ck_assert_int_eq(pl_conv_create(p, NULL, &c), 0);
    verdict_slot v;
    ck_assert_int_eq(pl_append(NULL, "{}", 2, on_verdict, &v), PL_EINVAL);
    ck_assert_int_eq(pl_append(c, NULL, 2, on_verdict, &v), PL_EINVAL);
    ck_assert_int_eq(pl_append(c, "{}", 0, on_verdict, &v), PL_EINVAL);
    ck_assert_int_eq(pl_append(c, "{}", 2, NULL, &v), PL_EINVAL);
    ck_assert_int_eq(pl_control(c, (pl_control_op)9, on_verdict, &v), PL_EINVAL);
    ck_assert_int_eq(pl_control(c, PL_RUN, NULL, &v), PL_EINVAL);
    ck_assert_int_eq(append(c, "{not json", &v), PL_INVALID);
    uint64_t n;
    pl_page *pg;
    ck_assert_int_eq(pl_count(NULL, &n), PL_EINVAL);
    ck_assert_int_eq(pl_count(c, NULL), PL_EINVAL);
    ck_assert_int_eq(pl_read(c, 0, 0, &pg), PL_EINVAL);
    ck_assert_int_eq(pl_read(c, 0, 1001, &pg), PL_EINVAL);
    ck_assert_int_eq(pl_read(c, 0, 10, NULL), PL_EINVAL);
    ck_assert_int_eq(pl_find(c, "", &n), PL_EINVAL);
    ck_assert_int_eq(pl_find(c, "nope", &n), PL_ENOENT);
    ck_assert_int_eq(pl_count(c, &n), 0);
    ck_assert_uint_eq(n, 0); /* nothing was appended by any of it */
    pl_sub *s;
    pl_sub_callbacks none = {0};
    ck_assert_int_eq(pl_subscribe(c, 0, &none, NULL, &s), PL_EINVAL);
    ck_assert_int_eq(pl_subscribe(c, 0, NULL, NULL, &s), PL_EINVAL);
    ck_assert_int_eq(pl_conv_info(NULL, NULL), PL_EINVAL);
    ck_assert_int_eq(pl_conv_delete(NULL), PL_EINVAL);
    ck_assert_int_eq(pl_conv_set_secrets(c, NULL), PL_EINVAL);
    ck_assert_int_eq(pl_conv_set_secrets(c, "{\"A\": 1}"), PL_EINVAL);
    ck_assert_int_eq(pl_conv_set_secrets(c, "{\"A\": {\"kind\": \"LookupSecret\"}}"), PL_EINVAL);
    ck_assert_int_eq(pl_conv_set_secrets(c, "{\"API_TOKEN\": {\"value\": \"v\"}}"), 0);
    pl_spawn_options nobeh = {0}, badrestart = {.beh = &agent, .restart = (pl_restart)7};
    pl_actor *a;
    ck_assert_int_eq(pl_spawn(p, NULL, &a), PL_EINVAL);
    ck_assert_int_eq(pl_spawn(p, &nobeh, &a), PL_EINVAL);
    ck_assert_int_eq(pl_spawn(p, &badrestart, &a), PL_EINVAL);
    ck_assert_int_eq(pl_conv_attach(NULL, &nobeh, &a), PL_EINVAL);
    pl_sup_options badsup = {.strategy = (pl_strategy)5};
    ck_assert_int_eq(pl_sup_spawn(p, &badsup, &a), PL_EINVAL);
    ck_assert_int_eq(pl_send(NULL, 1, 0, NULL, 0), PL_EINVAL);
    pl_spawn_options ok = {.beh = &asker};
    ck_assert_int_eq(pl_spawn(p, &ok, &a), 0);
    ck_assert_int_eq(pl_send(a, -5, 0, NULL, 0), PL_EINVAL);
    ck_assert_int_eq(pl_send(a, PL_KIND_MAX + 1, 0, NULL, 0), PL_EINVAL);
    ck_assert_int_eq(pl_ask(a, 1, 0, NULL, 0, NULL), PL_EINVAL);
    ck_assert_int_eq(pl_reply(NULL, 1, 0, NULL, 0), PL_EINVAL);
    ck_assert_uint_eq(pl_timer_start(a, 10, 0, 1, 0), 0); /* not from its own handler */
    ck_assert_int_eq(pl_timer_stop(a, 1), PL_EINVAL);
    pl_actor_release(a);
    /* a blocking call from a parley thread is refused, not a deadlock */
    ts_counter_init(&blocked);
    ck_assert_int_eq(pl_control(c, PL_RUN, call_blocking, c), 0);
    ck_assert(ts_counter_wait(&blocked, 1));
    ck_assert_int_eq(blocking_result, PL_ETHREAD);
    pl_http *h;
    char err[256];
    ck_assert_int_eq(pl_http_start(p, NULL, &h, err, sizeof(err)), PL_EINVAL);
    ck_assert_ptr_null(pl_http_url(NULL));
    pl_unsubscribe(NULL);
    pl_conv_release(NULL);
    pl_actor_release(NULL);
    pl_info_clear(NULL);
    ck_assert_str_eq(pl_strerror(PL_ETHREAD), "not allowed from this thread");
    ck_assert_str_eq(pl_status_name(PL_WAITING_FOR_CONFIRMATION), "waiting_for_confirmation");
    ck_assert_str_eq(pl_outcome_name(PL_DEFERRED), "deferred");
    ck_assert_str_eq(pl_outcome_name(PL_NO_SPACE), "no_space");
    ck_assert_str_eq(pl_outcome_name(PL_TOO_LARGE), "too_large");
    pl_conv_release(c);
    pl_close(p);
    rm_tmp();
}
END_TEST

/* A child names its parent for life; the parent lists it; the rules
 * (exists, not itself, same workspace) hold; a reopen keeps all of it. */
START_TEST(test_parent_and_children)
{
    char data[300];
    pl_instance *p = fresh(data, sizeof(data), NULL);
    const char *ws = "{\"workspace\":{\"working_dir\":\"/w\"}}";
    pl_conv_options po = {.meta_json = ws};
    pl_conv *parent, *kid, *x;
    ck_assert_int_eq(pl_conv_create(p, &po, &parent), 0);
    pl_conv_options ko = {.meta_json = ws, .parent_id = pl_conv_id(parent)};
    ck_assert_int_eq(pl_conv_create(p, &ko, &kid), 0);
    pl_conv_options missing = {.meta_json = ws,
                               .parent_id = "5e1f0c2a-9b8d-4c7e-a6f5-4d3c2b1a0f9e"},
                    self = {.id = missing.parent_id,
                            .meta_json = ws,
                            .parent_id = missing.parent_id},
                    elsewhere = {.parent_id = pl_conv_id(parent)}, bad = {.parent_id = "zz"};
    ck_assert_int_eq(pl_conv_create(p, &missing, &x), PL_ENOENT);
    ck_assert_int_eq(pl_conv_create(p, &self, &x), PL_EINVAL);
    ck_assert_int_eq(pl_conv_create(p, &elsewhere, &x), PL_EINVAL);
    ck_assert_int_eq(pl_conv_create(p, &bad, &x), PL_EINVAL);
    ck_assert_uint_eq(pl_conversations(p), 2);
    char pid[37], kid_id[37];
    snprintf(pid, sizeof(pid), "%s", pl_conv_id(parent));
    snprintf(kid_id, sizeof(kid_id), "%s", pl_conv_id(kid));
    pl_conv_release(parent);
    pl_conv_release(kid);
    pl_close(p);

    p = open_in(data, NULL);
    ck_assert_int_eq(pl_conv_open(p, pid, &parent), 0);
    ck_assert_int_eq(pl_conv_open(p, kid_id, &kid), 0);
    pl_id *ids;
    size_t n;
    ck_assert_int_eq(pl_conv_children(parent, &ids, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(ids[0].s, kid_id);
    free(ids);
    pl_info info;
    ck_assert_int_eq(pl_conv_info(kid, &info), 0);
    ck_assert_str_eq(info.parent_id, pid);
    pl_info_clear(&info);
    ck_assert_int_eq(pl_conv_info(parent, &info), 0);
    ck_assert_str_eq(info.parent_id, "");
    pl_info_clear(&info);
    ck_assert_int_eq(pl_conv_delete(parent), 0); /* the child stays, naming it */
    ck_assert_int_eq(pl_conv_info(kid, &info), 0);
    ck_assert_str_eq(info.parent_id, pid);
    pl_info_clear(&info);
    pl_conv_release(parent);
    pl_conv_release(kid);
    pl_close(p);
    rm_tmp();
}
END_TEST

/* ------------------------------------------------------------ crowding --- */

enum { CROWD = 600, CROWD_THREADS = 8 };

typedef struct crowd {
    pl_instance *p;
    _Atomic int next;
    char ids[CROWD][40];
    pl_outcome outcome[CROWD];
    char detail[CROWD][512];
} crowd;

static void *crowd_creator(void *arg)
{
    crowd *w = arg;
    static const char body[] = "[{\"source\":\"user\",\"kind\":\"MessageEvent\",\"llm_message\":"
                               "{\"role\":\"user\",\"content\":[]}},{\"source\":\"agent\","
                               "\"kind\":\"MessageEvent\",\"llm_message\":{\"role\":\"assistant\","
                               "\"content\":[]}}]";
    for (int i; (i = atomic_fetch_add(&w->next, 1)) < CROWD;) {
        pl_conv *c;
        if (pl_conv_create(w->p, NULL, &c) != 0) {
            w->outcome[i] = PL_FAILED;
            continue;
        }
        snprintf(w->ids[i], sizeof(w->ids[i]), "%s", pl_conv_id(c));
        verdict_slot v; /* no ck_assert off the test's thread */
        slot_init(&v);
        int r = pl_append(c, body, strlen(body), on_verdict, &v);
        w->outcome[i] = r == 0 && ts_counter_wait(&v.done, 1) ? v.outcome : PL_FAILED;
        snprintf(w->detail[i], sizeof(w->detail[i]), "%s", r == 0 ? v.detail : pl_strerror(r));
        pl_conv_release(c);
    }
    return NULL;
}

/* Far more conversations touched than the store keeps logs open (a
 * quarter of the open-files limit): trees retire at rest as soon as they
 * are quiet, and every append made just then still reaches one (issue 21:
 * "the conversation did not answer: actor or runtime is stopped"). On both
 * directory backends: the local store (0) and the pool (1). */
START_TEST(test_many_conversations_crowded)
{
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = 512; /* 128 open logs */
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    make_tmp();
    char data[300];
    snprintf(data, sizeof(data), "%s%s/data", _i ? "pool:" : "local:", dir);
    crowd *w = calloc(1, sizeof(*w));
    ck_assert_ptr_nonnull(w);
    w->p = open_in(data, NULL);
    pthread_t t[CROWD_THREADS];
    for (int i = 0; i < CROWD_THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, crowd_creator, w), 0);
    for (int i = 0; i < CROWD_THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < CROWD; i++) {
        ck_assert_msg(w->outcome[i] == PL_COMMITTED, "conversation %d: %s: %s", i,
                      pl_outcome_name(w->outcome[i]), w->detail[i]);
        pl_conv *c;
        uint64_t n = 0;
        ck_assert_int_eq(pl_conv_open(w->p, w->ids[i], &c), 0);
        ck_assert_int_eq(pl_count(c, &n), 0);
        ck_assert_uint_eq(n, 2);
        pl_conv_release(c);
    }
    pl_close(w->p);
    free(w);
    rm_tmp();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("parley_api");
    TCase *tc = tcase_create("api");
    tcase_add_test(tc, test_open_close);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_every_verdict);
    tcase_add_test(tc, test_failed_verdict);
    tcase_add_test(tc, test_reject);
    tcase_add_test(tc, test_reads);
    tcase_add_test(tc, test_subscribe_across_restart);
    tcase_add_test(tc, test_slow_subscriber);
    tcase_add_test(tc, test_attached_actor_restarts);
    tcase_add_test(tc, test_attached_actor_survives_rest);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_hosted_agent);
    tcase_add_test(tc, test_parent_and_children);
    tcase_add_loop_test(tc, test_many_conversations_crowded, 0, 2);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
