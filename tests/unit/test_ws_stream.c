/*
 * test_ws_stream.c - the WebSocket stream actor against real conversations,
 * with a sink in memory in place of a socket: replay modes, the exact
 * handover from replay to live events under concurrent appends,
 * resubscription after the conversation restarts, the stalled-socket
 * close, auth, the subscriber cap and client messages.
 */
#include "actors/ws_stream.h"
#include "runtime/json.h"
#include "runtime/metrics.h"
#include "support_conv.h"

#include <stdio.h>

/* ---- a sink in memory --------------------------------------------------------- */

typedef struct msink {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    json_t *frames; /* every frame, parsed */
    size_t queued;  /* what sink_queued says */
    int drained_at; /* notify_below's level, -1: none asked */
    int close_code;
    char reason[128];
    bool released;
    rt_actor *a;
} msink;

static void m_send(void *ctx, ws_out *f, size_t n)
{
    msink *s = ctx;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        char buf[1 << 16];
        size_t len = 0;
        memcpy(buf, f[i].pre, f[i].pre_len);
        len += f[i].pre_len;
        TS_CHECK(len + f[i].len + f[i].post_len < sizeof(buf));
        if (f[i].len > 0)
            memcpy(buf + len, rt_buf_data(f[i].body) + f[i].off, f[i].len);
        len += f[i].len;
        memcpy(buf + len, f[i].post, f[i].post_len);
        len += f[i].post_len;
        json_t *j = rt_json_read(buf, len, 0, NULL);
        TS_CHECK_MSG(j != NULL, "a frame is not JSON: %.*s", (int)(len > 200 ? 200 : len), buf);
        json_array_append_new(s->frames, j != NULL ? j : json_null());
        rt_buf_unref(f[i].body);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static size_t m_queued(void *ctx)
{
    msink *s = ctx;
    pthread_mutex_lock(&s->mu);
    size_t q = s->queued;
    pthread_mutex_unlock(&s->mu);
    return q;
}

static void m_notify_below(void *ctx, size_t bytes)
{
    msink *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->drained_at = (int)bytes;
    pthread_mutex_unlock(&s->mu);
}

static void m_close(void *ctx, int code, const char *reason)
{
    msink *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->close_code = code;
    snprintf(s->reason, sizeof(s->reason), "%s", reason);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    rt_notify(s->a, WS_GONE, 0, NULL); /* as the socket's side does once closed */
}

static void m_release(void *ctx)
{
    msink *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->released = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static const ws_sink msink_ops = {m_send, m_queued, m_notify_below, m_close, m_release};

/* Waits under s->mu until cond holds or the deadline passes. */
#define MS_WAIT(s, cond)                                                                           \
    ({                                                                                             \
        struct timespec ts_;                                                                       \
        clock_gettime(CLOCK_REALTIME, &ts_);                                                       \
        ts_.tv_sec += TS_DEADLINE_MS / 1000;                                                       \
        pthread_mutex_lock(&(s)->mu);                                                              \
        int r_ = 0;                                                                                \
        while (!(cond) && r_ == 0)                                                                 \
            r_ = pthread_cond_timedwait(&(s)->cv, &(s)->mu, &ts_);                                 \
        bool ok_ = (cond);                                                                         \
        pthread_mutex_unlock(&(s)->mu);                                                            \
        ok_;                                                                                       \
    })

static msink *stream(tc_env *e, ws_stream_opts o)
{
    msink *s = calloc(1, sizeof(*s));
    ck_assert_ptr_nonnull(s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->frames = json_array();
    s->drained_at = -1;
    o.convs = e->svc;
    o.store = e->store;
    o.conv = e->id;
    o.sink = &msink_ops;
    o.sink_ctx = s;
    if (o.queue_bytes == 0)
        o.queue_bytes = 1 << 20;
    if (o.stall_timeout_ms == 0)
        o.stall_timeout_ms = 30000;
    if (o.auth_timeout_ms == 0)
        o.auth_timeout_ms = 10000;
    o.call_timeout_ms = 10000;
    /* the sink needs the actor before the actor can use the sink: hold
     * the lock over the spawn */
    pthread_mutex_lock(&s->mu);
    ck_assert_int_eq(ws_stream_start(e->rt, &o, &s->a), 0);
    pthread_mutex_unlock(&s->mu);
    return s;
}

static size_t nframes(msink *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = json_array_size(s->frames);
    pthread_mutex_unlock(&s->mu);
    return n;
}

static json_t *frame(msink *s, size_t i)
{
    pthread_mutex_lock(&s->mu);
    json_t *j = json_incref(json_array_get(s->frames, i));
    pthread_mutex_unlock(&s->mu);
    return j;
}

/* Ends the stream (as a socket that left) and frees the sink. */
static void end(msink *s)
{
    rt_notify(s->a, WS_GONE, 0, NULL);
    ck_assert_msg(MS_WAIT(s, s->released), "the stream never released its sink");
    rt_actor_unref(s->a);
    json_decref(s->frames);
    free(s);
}

/* Waits for the stream to close the socket, and checks the code. */
static void expect_close(msink *s, int code)
{
    ck_assert_msg(MS_WAIT(s, s->close_code != 0), "the stream did not close (wanted %d)", code);
    ck_assert_int_eq(s->close_code, code);
}

static void append_n(tc_env *e, int n, int from)
{
    for (int i = 0; i < n; i++) {
        char id[40], text[32];
        snprintf(id, sizeof(id), "ev-%d", from + i);
        snprintf(text, sizeof(text), "message %d", from + i);
        char *b = tc_ev_msg(id, "agent", text);
        ck_assert_int_eq(tc_append(e, b, NULL), 201);
        free(b);
    }
}

/* Frames 1.. are {"index", "event"}: their indexes are first..first+n-1 and
 * their events are the log's. */
static void assert_run(msink *s, json_t *log, size_t first_frame, uint64_t first, size_t n)
{
    ck_assert_uint_ge(nframes(s), first_frame + n);
    for (size_t i = 0; i < n; i++) {
        json_t *f = frame(s, first_frame + i);
        json_t *ix = json_object_get(f, "index");
        ck_assert_msg(json_is_integer(ix) && (uint64_t)json_integer_value(ix) == first + i,
                      "frame %zu has index %lld, wanted %llu", first_frame + i,
                      (long long)json_integer_value(ix), (unsigned long long)(first + i));
        ck_assert_msg(json_equal(json_object_get(f, "event"), json_array_get(log, first + i)),
                      "frame %zu is not the log's event %llu", first_frame + i,
                      (unsigned long long)(first + i));
        json_decref(f);
    }
}

/* status NULL: any */
static void assert_full_state(msink *s, const char *status)
{
    ck_assert(MS_WAIT(s, json_array_size(s->frames) >= 1));
    json_t *f = frame(s, 0);
    json_t *ev = json_object_get(f, "event") != NULL ? json_object_get(f, "event") : f;
    ck_assert_str_eq(json_string_value(json_object_get(ev, "kind")),
                     "ConversationStateUpdateEvent");
    ck_assert_str_eq(json_string_value(json_object_get(ev, "key")), "full_state");
    ck_assert_ptr_null(json_object_get(f, "index"));
    json_t *v = json_object_get(ev, "value");
    ck_assert(json_is_string(json_object_get(v, "execution_status")));
    if (status != NULL)
        ck_assert_str_eq(json_string_value(json_object_get(v, "execution_status")), status);
    ck_assert_str_eq(json_string_value(json_object_get(v, "id")),
                     "5ca1ab1e-0000-4000-8000-0000000000aa");
    json_decref(f);
}

/* ---- tests ---------------------------------------------------------------------- */

START_TEST(replay_all_hands_over_exactly)
{
    tc_env e = {0};
    tc_start(&e, NULL, NULL, ST_NONE);
    append_n(&e, 150, 0);
    msink *s = stream(&e, (ws_stream_opts){.replay = WS_REPLAY_ALL, .envelope = true});
    append_n(&e, 150, 150); /* while it replays */
    tc_sync(&e);
    json_t *log = tc_log(&e);
    size_t n = json_array_size(log);
    ck_assert_msg(MS_WAIT(s, json_array_size(s->frames) >= n + 1), "got %zu frames of %zu",
                  nframes(s), n + 1);
    assert_full_state(s, NULL);
    assert_run(s, log, 1, 0, n);
    ck_assert_uint_eq(nframes(s), n + 1); /* and nothing twice */
    json_decref(log);
    end(s);
    tc_finish(&e);
    ck_assert_ptr_null(ts_first_failure());
}
END_TEST

START_TEST(live_only_and_after_id)
{
    tc_env e = {0};
    tc_start(&e, NULL, NULL, ST_NONE);
    append_n(&e, 5, 0);
    tc_sync(&e);
    json_t *log = tc_log(&e);
    size_t n0 = json_array_size(log);
    json_decref(log);
    msink *live = stream(&e, (ws_stream_opts){.envelope = true});
    ws_stream_opts o = {.replay = WS_REPLAY_AFTER_ID, .envelope = true};
    o.after_id = "ev-2";
    msink *resume = stream(&e, o);
    assert_full_state(live, NULL);
    assert_full_state(resume, NULL);
    append_n(&e, 3, 5);
    tc_sync(&e);
    log = tc_log(&e);
    size_t n = json_array_size(log), k = 0;
    while (k < n &&
           strcmp(json_string_value(json_object_get(json_array_get(log, k), "id")), "ev-2") != 0)
        k++;
    ck_assert_uint_lt(k, n);
    ck_assert(MS_WAIT(live, json_array_size(live->frames) >= 1 + n - n0));
    ck_assert(MS_WAIT(resume, json_array_size(resume->frames) >= 1 + n - (k + 1)));
    assert_run(live, log, 1, n0, n - n0);
    assert_run(resume, log, 1, k + 1, n - (k + 1));
    json_decref(log);
    end(live);
    end(resume);

    o.after_id = "no-such-event";
    msink *bad = stream(&e, o);
    expect_close(bad, 1008);
    end(bad);
    tc_finish(&e);
}
END_TEST

START_TEST(since_timestamp)
{
    tc_env e = {0};
    tc_start(&e, NULL, NULL, ST_NONE);
    append_n(&e, 10, 0);
    tc_sync(&e);
    json_t *log = tc_log(&e);
    size_t n = json_array_size(log);
    const char *ts = json_string_value(json_object_get(json_array_get(log, 4), "timestamp"));
    ws_stream_opts o = {.replay = WS_REPLAY_SINCE, .envelope = true};
    snprintf(o.after_ts, sizeof(o.after_ts), "%s", ts);
    msink *s = stream(&e, o);
    /* the events at or after ts, compared as strings (as upstream) */
    size_t want = 0;
    for (size_t i = 0; i < n; i++)
        want += strcmp(json_string_value(json_object_get(json_array_get(log, i), "timestamp")),
                       ts) >= 0;
    ck_assert(MS_WAIT(s, json_array_size(s->frames) >= 1 + want));
    ck_assert_uint_eq(nframes(s), 1 + want);
    for (size_t i = 1, at = 0; i <= want; i++, at++) {
        json_t *f = frame(s, i);
        at = (size_t)json_integer_value(json_object_get(f, "index"));
        ck_assert(json_equal(json_object_get(f, "event"), json_array_get(log, at)));
        ck_assert_int_ge(
            strcmp(json_string_value(json_object_get(json_object_get(f, "event"), "timestamp")),
                   ts),
            0);
        json_decref(f);
    }
    ws_stream_opts none = {.replay = WS_REPLAY_SINCE}; /* since without a time: nothing */
    msink *s2 = stream(&e, none);
    assert_full_state(s2, NULL);
    append_n(&e, 1, 10);
    tc_sync(&e);
    ck_assert(MS_WAIT(s2, json_array_size(s2->frames) >= 2));
    json_t *f = frame(s2, 1);
    ck_assert_str_eq(json_string_value(json_object_get(f, "id")), "ev-10"); /* no envelope */
    json_decref(f);
    json_decref(log);
    end(s);
    end(s2);
    tc_finish(&e);
}
END_TEST

START_TEST(resubscribes_when_the_conversation_restarts)
{
    tc_env e = {0};
    tc_start(&e, NULL, NULL, ST_NONE);
    append_n(&e, 3, 0);
    msink *s = stream(&e, (ws_stream_opts){.replay = WS_REPLAY_ALL, .envelope = true});
    tc_sync(&e);
    convs_stop(e.svc, &e.id); /* its subscribers are told CONV_DROPPED */
    for (long spins = 0; !rt_actor_closed(e.conv); spins++)
        ck_assert_msg(spins < 100000000, "the conversation did not stop");
    rt_actor_unref(e.conv);
    ck_assert_int_eq(convs_get(e.svc, &e.id, &e.conv), 0);
    append_n(&e, 4, 3);
    tc_sync(&e);
    json_t *log = tc_log(&e);
    size_t n = json_array_size(log);
    ck_assert_msg(MS_WAIT(s, json_array_size(s->frames) >= 1 + n), "got %zu of %zu", nframes(s),
                  n + 1);
    assert_run(s, log, 1, 0, n);
    ck_assert_uint_eq(nframes(s), n + 1);
    json_decref(log);
    end(s);
    tc_finish(&e);
}
END_TEST

START_TEST(a_stalled_socket_is_closed)
{
    tc_env e = {0};
    tc_start(&e, NULL, NULL, ST_NONE);
    ws_stream_opts o = {.envelope = true, .queue_bytes = 1024, .stall_timeout_ms = 50};
    msink *s = stream(&e, o);
    assert_full_state(s, "idle");
    pthread_mutex_lock(&s->mu);
    s->queued = 4096; /* the client takes nothing */
    pthread_mutex_unlock(&s->mu);
    uint64_t before = ws_metrics_g.closed[WS_CLOSED_STALLED];
    append_n(&e, 2, 0);
    expect_close(s, 1013);
    ck_assert_int_eq(s->drained_at, 512);
    ck_assert_uint_eq(ws_metrics_g.closed[WS_CLOSED_STALLED], before + 1);
    end(s);
    tc_finish(&e);
}
END_TEST

START_TEST(a_slow_socket_catches_up_from_the_log)
{
    tc_env e = {0};
    tc_start(&e, NULL, NULL, ST_NONE);
    ws_stream_opts o = {.envelope = true, .queue_bytes = 1024};
    msink *s = stream(&e, o);
    assert_full_state(s, "idle");
    pthread_mutex_lock(&s->mu);
    s->queued = 4096;
    pthread_mutex_unlock(&s->mu);
    append_n(&e, 1, 0); /* queued, then the socket is full */
    ck_assert(MS_WAIT(s, s->drained_at >= 0));
    append_n(&e, 20, 1); /* these wait in the log */
    tc_sync(&e);
    ck_assert_uint_le(nframes(s), 3);
    pthread_mutex_lock(&s->mu);
    s->queued = 0;
    pthread_mutex_unlock(&s->mu);
    rt_notify(s->a, WS_DRAINED, 0, NULL);
    json_t *log = tc_log(&e);
    size_t n = json_array_size(log);
    ck_assert(MS_WAIT(s, json_array_size(s->frames) >= 1 + n));
    assert_run(s, log, 1, 0, n);
    json_decref(log);
    end(s);
    tc_finish(&e);
}
END_TEST

START_TEST(auth_first_frame)
{
    tc_env e = {0};
    tc_start(&e, NULL, NULL, ST_NONE);
    static const char *const keys[] = {"sekret"};
    ws_stream_opts o = {.api_keys = keys, .napi_keys = 1};
    msink *good = stream(&e, o);
    const char *auth = "{\"type\":\"auth\",\"session_api_key\":\"sekret\"}";
    rt_send(good->a, WS_IN, 1, rt_buf_copy(auth, strlen(auth)));
    assert_full_state(good, "idle");
    rt_send(good->a, WS_IN, 1, rt_buf_copy(auth, strlen(auth))); /* redundant: ignored */
    append_n(&e, 1, 0);
    ck_assert(MS_WAIT(good, json_array_size(good->frames) >= 2));
    json_t *f = frame(good, 1);
    ck_assert_str_eq(json_string_value(json_object_get(f, "id")), "ev-0");
    json_decref(f);
    end(good);

    msink *bad = stream(&e, o);
    const char *wrong = "{\"type\":\"auth\",\"session_api_key\":\"nope\"}";
    rt_send(bad->a, WS_IN, 1, rt_buf_copy(wrong, strlen(wrong)));
    expect_close(bad, 4001);
    ck_assert_uint_eq(nframes(bad), 0);
    end(bad);

    o.auth_timeout_ms = 30;
    msink *late = stream(&e, o);
    expect_close(late, 4001);
    end(late);

    /* a wrong key in the URL never gets this far: 403 before the upgrade */
    tc_finish(&e);
}
END_TEST

START_TEST(subscriber_cap)
{
    tc_env e = {0};
    conv_opts co = {.max_subscribers = 1};
    tc_start(&e, NULL, &co, ST_NONE);
    msink *a = stream(&e, (ws_stream_opts){0});
    assert_full_state(a, "idle");
    msink *b = stream(&e, (ws_stream_opts){0});
    expect_close(b, 1013);
    end(b);
    end(a);
    msink *c = stream(&e, (ws_stream_opts){0}); /* a left: room again */
    assert_full_state(c, "idle");
    end(c);
    tc_finish(&e);
}
END_TEST

START_TEST(client_messages)
{
    tc_env e = {0};
    tc_start(&e, NULL, NULL, ST_NONE);
    msink *s = stream(&e, (ws_stream_opts){0});
    assert_full_state(s, "idle");
    const char *msg = "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hello\"}]}";
    rt_send(s->a, WS_IN, 1, rt_buf_copy(msg, strlen(msg)));
    /* the message, then the run's status change */
    ck_assert(MS_WAIT(s, json_array_size(s->frames) >= 3));
    json_t *f = frame(s, 1);
    ck_assert_str_eq(json_string_value(json_object_get(f, "kind")), "MessageEvent");
    ck_assert_str_eq(json_string_value(json_object_get(f, "source")), "user");
    json_decref(f);
    char status[32];
    int pending;
    tc_status(&e, status, sizeof(status), &pending);
    ck_assert_str_eq(status, "running");
    size_t n = nframes(s);
    rt_send(s->a, WS_IN, 1, rt_buf_copy("nope", 4));
    rt_send(s->a, WS_IN, 1, rt_buf_copy("[1]", 3));
    rt_send(s->a, WS_IN, 2, rt_buf_copy("\x01", 1));
    ck_assert(MS_WAIT(s, json_array_size(s->frames) >= n + 3));
    const char *codes[] = {"JSONDecodeError", "ValidationError", "ValidationError"};
    for (int i = 0; i < 3; i++) {
        f = frame(s, n + (size_t)i);
        ck_assert_str_eq(json_string_value(json_object_get(f, "kind")), "ServerErrorEvent");
        ck_assert_str_eq(json_string_value(json_object_get(f, "code")), codes[i]);
        json_decref(f);
    }
    ck_assert_int_eq(s->close_code, 0); /* still open */
    end(s);
    tc_finish(&e);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ws_stream");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, replay_all_hands_over_exactly);
    tcase_add_test(t, live_only_and_after_id);
    tcase_add_test(t, since_timestamp);
    tcase_add_test(t, resubscribes_when_the_conversation_restarts);
    tcase_add_test(t, a_stalled_socket_is_closed);
    tcase_add_test(t, a_slow_socket_catches_up_from_the_log);
    tcase_add_test(t, auth_first_frame);
    tcase_add_test(t, subscriber_cap);
    tcase_add_test(t, client_messages);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
