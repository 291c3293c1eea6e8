/*
 * test_call.c - request/reply: rt_ask/rt_reply between actors across loops,
 * promises, and rt_call from code that is not an actor. The guarantee under
 * test throughout: an accepted request gets exactly one answer, the reply or
 * an RT_KIND_ERROR saying why not; a refused one gets none.
 */
#include "support_rt.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>

enum {
    K_GO = RT_KIND_USER, /* to the client: ask the server, arg is the mode */
    K_REQ,               /* the request; arg is the mode */
    K_REP,               /* the reply */
    K_COMPLETE,          /* to the server: complete the held promise */
    K_FAIL_PROMISE,      /* to the server: fail the held promise with -EIO */
    K_ARM,               /* to an actor: start a uv timer that calls from outside actors */
};

/* What the server does with a request. */
enum {
    M_REPLY = 1,   /* rt_reply(K_REP, arg = mode) */
    M_SILENT,      /* return 0 without replying */
    M_FAIL,        /* return -ENOSPC */
    M_ASSERT,      /* RT_ASSERT(0) */
    M_DONE,        /* return RT_DONE without replying */
    M_GATE_REPLY,  /* pass the server's gate, then reply with a buffer */
    M_PROMISE,     /* keep a promise, answer later (K_COMPLETE / K_FAIL_PROMISE) */
    M_GATE_DONE,   /* pass the gate, then return RT_DONE (sent as a plain message) */
    M_ECHO = 1000, /* reply with the request's arg (which is >= M_ECHO) */
};

/* --------------------------------------------------------------- server --- */

typedef struct server {
    rtt_gate *gate;
    rt_promise promise;
} server;

static void check_request(const rt_msg *m)
{
    TS_CHECK(m->kind == K_REQ);
    TS_CHECK(m->reply_to != NULL);
    TS_CHECK(m->status == 0);
}

static int server_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    server *s = state;
    if (m->kind == K_COMPLETE) {
        int rc = rt_promise_reply(&s->promise, K_REP, 0, 77, NULL);
        s->promise = (rt_promise){0}; /* completed: stop must not complete it again */
        ts_log("s:late reply %s", rtt_code(rc));
        return 0;
    }
    if (m->kind == K_FAIL_PROMISE) {
        rt_promise_fail(&s->promise, -EIO);
        s->promise = (rt_promise){0};
        ts_log("s:promise failed");
        return 0;
    }
    if (m->kind == RTT_PROBE)
        return 0;
    if (m->arg >= M_ECHO) {
        TS_CHECK(rt_reply(m, K_REP, 0, m->arg, m->buf ? rt_buf_ref(m->buf) : NULL) == 0);
        return 0;
    }
    switch (m->arg) {
    case M_REPLY: {
        check_request(m);
        rt_buf *b = rtt_buf("rep");
        int rc = rt_reply(m, K_REP, 3, M_REPLY, b);
        TS_CHECK_MSG(rc == 0, "rt_reply: %s", rt_strerror(rc));
        if (rc != 0)
            rt_buf_unref(b);
        /* The reply address is consumed: a second reply is refused and the
         * buffer stays ours. */
        rt_buf *b2 = rtt_buf("again");
        TS_CHECK(rt_reply(m, K_REP, 0, 0, b2) == RT_EINVAL);
        rt_buf_unref(b2);
        return 0;
    }
    case M_SILENT:
        check_request(m);
        return 0;
    case M_FAIL:
        return -ENOSPC;
    case M_ASSERT:
        RT_ASSERT(m->arg == 0);
        return 0;
    case M_DONE:
        return RT_DONE;
    case M_GATE_REPLY: {
        rtt_gate_pass(s->gate);
        rt_buf *b = rtt_buf("to the gone");
        int rc = rt_reply(m, K_REP, 0, M_GATE_REPLY, b);
        if (rc != 0)
            rt_buf_unref(b);
        ts_log("s:reply %s", rtt_code(rc));
        return 0;
    }
    case M_PROMISE:
        s->promise = rt_msg_promise(m);
        TS_CHECK(s->promise.to != NULL);
        ts_log("s:promise kept");
        return 0;
    case M_GATE_DONE:
        rtt_gate_pass(s->gate);
        return RT_DONE;
    }
    TS_CHECK_MSG(0, "unexpected mode %llu", (unsigned long long)m->arg);
    return 0;
}

static void server_stop(rt_actor *self, void *state)
{
    (void)self;
    /* As the contract asks of state that holds promises. */
    server *s = state;
    rt_promise_fail(&s->promise, RT_ECLOSED);
    s->promise = (rt_promise){0};
}

static const rt_behaviour server_beh = {
    .name = "server", .handle = server_handle, .stop = server_stop};

/* --------------------------------------------------------------- client --- */

/* Asks the server on K_GO and logs "c:asked <result>", then every answer
 * as "c:reply <arg>" or "c:error <status>". */
typedef struct client {
    rt_actor *server;
    uint64_t server_id;
} client;

static int client_handle(rt_actor *self, void *state, rt_msg *m)
{
    client *c = state;
    switch (m->kind) {
    case K_GO: {
        int rc = rt_ask(c->server, K_REQ, m->arg, NULL, self);
        ts_log("c:asked %s", rtt_code(rc));
        return 0;
    }
    case K_REP:
        TS_CHECK(m->sender == c->server_id);
        TS_CHECK(m->reply_to == NULL);
        if (m->arg == M_REPLY) {
            TS_CHECK(m->status == 3);
            TS_CHECK(rtt_buf_is(m->buf, "rep"));
        }
        ts_log("c:reply %llu", (unsigned long long)m->arg);
        return 0;
    case RT_KIND_ERROR:
        TS_CHECK(m->reply_to == NULL);
        TS_CHECK(m->arg == K_REQ); /* the kind of the failed request */
        ts_log("c:error %s", rtt_code(m->status));
        return 0;
    }
    TS_CHECK_MSG(0, "client got kind %u", m->kind);
    return 0;
}

static const rt_behaviour client_beh = {.name = "client", .handle = client_handle};

typedef struct pair {
    rt_runtime *rt;
    server s;
    client c;
    rt_actor *server, *client;
    rtt_gate gate;
} pair;

/* A client on loop 0 and a server on loop 1, so every answer crosses. */
static void pair_start(pair *p, rt_restart server_restart, uint32_t server_cap)
{
    p->rt = rtt_start(2, NULL);
    rtt_gate_init(&p->gate);
    p->s.gate = &p->gate;
    p->server = rtt_spawn(p->rt, &server_beh, &p->s, 1, server_restart, server_cap);
    p->c.server = p->server;
    p->c.server_id = rt_actor_id(p->server);
    p->client = rtt_spawn(p->rt, &client_beh, &p->c, 0, RT_TEMPORARY, 0);
}

static void pair_free(pair *p)
{
    rt_actor_unref(p->server);
    rt_actor_unref(p->client);
    rtt_free(p->rt);
    rtt_gate_destroy(&p->gate);
    ts_assert_clean();
    ck_assert_int_eq(rtt_bufs_live(), 0);
}

static void go(pair *p, uint64_t mode)
{
    ck_assert_int_eq(rt_send(p->client, K_GO, mode, NULL), 0);
}

/* ---------------------------------------------------------- ask / reply --- */

START_TEST(test_ask_reply_across_loops)
{
    pair p = {0};
    pair_start(&p, RT_TEMPORARY, 0);
    go(&p, M_REPLY);
    ck_assert(ts_log_wait("c:reply 1", 1));
    pair_free(&p);
    ts_assert_log(0, "c:asked 0, c:reply 1");
}
END_TEST

/* Many requests in flight from two clients on two loops: every one gets
 * its reply, each client's in the order it asked. */
typedef struct bulk {
    rt_actor *server;
    uint64_t base, next, n;
    ts_counter *done;
} bulk;

static int bulk_handle(rt_actor *self, void *state, rt_msg *m)
{
    bulk *b = state;
    if (m->kind == K_GO) {
        for (uint64_t i = 0; i < b->n; i++)
            TS_CHECK(rt_ask(b->server, K_REQ, b->base + i, rtt_buf("req"), self) == 0);
        return 0;
    }
    TS_CHECK_MSG(m->kind == K_REP, "kind %u status %d", m->kind, m->status);
    TS_CHECK_MSG(m->arg == b->base + b->next, "reply %llu, expected %llu",
                 (unsigned long long)m->arg, (unsigned long long)(b->base + b->next));
    TS_CHECK(rtt_buf_is(m->buf, "req"));
    if (++b->next == b->n)
        ts_counter_add(b->done, 1);
    return 0;
}

START_TEST(test_many_asks_in_flight)
{
    static const rt_behaviour beh = {.name = "bulk", .handle = bulk_handle};
    const uint64_t n = TS_SCALE(20000, 2000);
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    rt_actor *srv = rtt_spawn(rt, &server_beh, &s, 1, RT_TEMPORARY, 0);
    ts_counter done;
    ts_counter_init(&done);
    bulk b[2] = {{srv, M_ECHO, 0, n, &done}, {srv, M_ECHO + n, 0, n, &done}};
    rt_actor *c0 = rtt_spawn(rt, &beh, &b[0], 0, RT_TEMPORARY, 0);
    rt_actor *c1 = rtt_spawn(rt, &beh, &b[1], 1, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(c0, K_GO, 0, NULL), 0);
    ck_assert_int_eq(rt_send(c1, K_GO, 0, NULL), 0);
    ck_assert(ts_counter_wait(&done, 2));
    rt_actor_unref(c0);
    rt_actor_unref(c1);
    rt_actor_unref(srv);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_uint_eq(b[0].next, n);
    ck_assert_uint_eq(b[1].next, n);
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

/* An unanswered request gets RT_ENOREPLY, once: the reply to a second
 * request, which comes after it from the same loop, is the next answer. */
START_TEST(test_no_reply_is_enoreply)
{
    pair p = {0};
    pair_start(&p, RT_TEMPORARY, 0);
    go(&p, M_SILENT);
    ck_assert(ts_log_wait("c:error ENOREPLY", 1));
    go(&p, M_REPLY);
    ck_assert(ts_log_wait("c:reply 1", 1));
    pair_free(&p);
    ts_assert_log(0, "c:asked 0, c:error ENOREPLY, c:asked 0, c:reply 1");
}
END_TEST

/* The server handles one request in each of these and exits or fails. */
static void one_error(uint64_t mode, const char *entry)
{
    pair p = {0};
    pair_start(&p, RT_TEMPORARY, 0);
    go(&p, mode);
    ck_assert_msg(ts_log_wait(entry, 1), "no \"%s\"", entry);
    pair_free(&p);
    char want[128];
    snprintf(want, sizeof want, "c:asked 0, %s", entry);
    ts_assert_log(0, want);
}

START_TEST(test_failed_handler_answers_with_its_reason)
{
    one_error(M_FAIL, "c:error ENOSPC");
}
END_TEST

START_TEST(test_assert_in_handler_answers_eassert)
{
    one_error(M_ASSERT, "c:error EASSERT");
}
END_TEST

START_TEST(test_exit_without_reply_is_enoreply)
{
    one_error(M_DONE, "c:error ENOREPLY");
}
END_TEST

/* A request still queued when its receiver exits is dropped with an
 * RT_ECLOSED answer. The receiver is inside a handler (so certainly not
 * closed) when the request is posted. */
START_TEST(test_request_queued_behind_exit_is_eclosed)
{
    pair p = {0};
    pair_start(&p, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(p.server, K_REQ, M_GATE_DONE, NULL), 0);
    rtt_gate_wait_entered(&p.gate, 1);
    go(&p, M_REPLY);
    ck_assert(ts_log_wait("c:asked 0", 1));
    rtt_gate_open(&p.gate);
    ck_assert(ts_log_wait("c:error ECLOSED", 1));
    pair_free(&p);
    ts_assert_log(0, "c:asked 0, c:error ECLOSED");
}
END_TEST

/* A refused request (closed receiver) is not answered at all. */
START_TEST(test_ask_to_closed_actor_refused_without_answer)
{
    pair p = {0};
    pair_start(&p, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(p.server, K_REQ, M_DONE, NULL), 0);
    ck_assert(rtt_wait_closed(p.server));
    go(&p, M_REPLY);
    ck_assert(ts_log_wait("c:asked ECLOSED", 1));
    pair_free(&p);
    ts_assert_log(0, "c:asked ECLOSED");
}
END_TEST

/* A bounded receiver that is full refuses the request: RT_EFULL, the
 * buffer stays the asker's, and no answer follows. */
static int full_asker_handle(rt_actor *self, void *state, rt_msg *m)
{
    if (m->kind == K_GO) {
        rt_buf *b = rtt_buf("req");
        int rc = rt_ask(state, K_REQ, M_REPLY, b, self);
        TS_CHECK(rc == RT_EFULL);
        TS_CHECK(rtt_buf_is(b, "req"));
        rt_buf_unref(b);
        ts_log("c:asked %s", rtt_code(rc));
    } else {
        ts_log("c:answer %u %s", m->kind, rtt_code(m->status));
    }
    return 0;
}

START_TEST(test_ask_to_full_mailbox_refused_without_answer)
{
    static const rt_behaviour beh = {.name = "asker", .handle = full_asker_handle};
    rt_runtime *rt = rtt_start(2, NULL);
    rtt_gate g;
    rtt_gate_init(&g);
    server s = {.gate = &g};
    rt_actor *srv = rtt_spawn(rt, &server_beh, &s, 1, RT_TEMPORARY, 1);
    ck_assert_int_eq(rt_send(srv, K_REQ, M_GATE_DONE, NULL), 0);
    rtt_gate_wait_entered(&g, 1);
    ck_assert_int_eq(rt_send(srv, RTT_PROBE, 0, NULL), 0); /* the one free slot */
    ck_assert_int_eq(rt_send(srv, RTT_PROBE, 0, NULL), RT_EFULL);
    rt_actor *a = rtt_spawn(rt, &beh, srv, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_GO, 0, NULL), 0);
    ck_assert(ts_log_wait("c:asked EFULL", 1));
    rtt_gate_open(&g);
    rt_actor_unref(a);
    rt_actor_unref(srv);
    rtt_free(rt);
    rtt_gate_destroy(&g);
    ts_assert_clean();
    ts_assert_log(0, "c:asked EFULL");
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

/* The asker's own mailbox is bounded and full when the answer comes: the
 * answer still gets through (an asker gets exactly one answer, and its
 * replies are not what its bound is for), and nothing else is lost. */
typedef struct busy_asker {
    rt_actor *server;
    rtt_gate gate;
} busy_asker;

static int busy_asker_handle(rt_actor *self, void *state, rt_msg *m)
{
    busy_asker *b = state;
    switch (m->kind) {
    case K_GO:
        ts_log("c:asked %s", rtt_code(rt_ask(b->server, K_REQ, M_GATE_REPLY, NULL, self)));
        rtt_gate_pass(&b->gate);
        return 0;
    case K_REP:
        ts_log("c:reply %llu", (unsigned long long)m->arg);
        return 0;
    case RT_KIND_ERROR:
        ts_log("c:error %s", rtt_code(m->status));
        return 0;
    default:
        ts_log("c:fill %llu", (unsigned long long)m->arg);
        return 0;
    }
}

START_TEST(test_answer_reaches_full_bounded_asker)
{
    static const rt_behaviour beh = {.name = "busy-asker", .handle = busy_asker_handle};
    rt_runtime *rt = rtt_start(2, NULL);
    rtt_gate g;
    rtt_gate_init(&g);
    server s = {.gate = &g};
    busy_asker b;
    rtt_gate_init(&b.gate);
    b.server = rtt_spawn(rt, &server_beh, &s, 1, RT_TEMPORARY, 0);
    rt_actor *a = rtt_spawn(rt, &beh, &b, 0, RT_TEMPORARY, 1);
    ck_assert_int_eq(rt_send(a, K_GO, 0, NULL), 0);
    rtt_gate_wait_entered(&b.gate, 1);
    ck_assert_int_eq(rt_send(a, RT_KIND_USER + 100, 1, NULL), 0);
    ck_assert_int_eq(rt_send(a, RT_KIND_USER + 100, 2, NULL), RT_EFULL);
    rtt_gate_open(&g); /* the server replies to the full asker */
    ck_assert(ts_log_wait_len(2));
    rtt_gate_open(&b.gate);
    ck_assert(ts_log_wait("c:fill 1", 1));
    ck_assert_msg(ts_log_wait_len(4), "no answer: %s", ts_log_join(0));
    rt_actor_unref(a);
    rt_actor_unref(b.server);
    rtt_free(rt);
    rtt_gate_destroy(&g);
    rtt_gate_destroy(&b.gate);
    ts_assert_clean();
    /* The reply and the filler come from different senders: either order. */
    ck_assert_uint_eq(ts_log_count("c:asked 0"), 1);
    ck_assert_uint_eq(ts_log_count("c:fill 1"), 1);
    ck_assert_uint_eq(ts_log_count("c:reply 6"), 1);
    ck_assert_uint_eq(ts_log_len(), 4);
    ts_assert_log_prefix("s:", "s:reply 0");
}
END_TEST

/* The asker is gone when the reply is made: RT_ECLOSED, and the reply's
 * buffer stays with the replier (who releases it). */
START_TEST(test_reply_to_gone_asker_is_eclosed)
{
    pair p = {0};
    pair_start(&p, RT_TEMPORARY, 0);
    go(&p, M_GATE_REPLY);
    rtt_gate_wait_entered(&p.gate, 1);
    ck_assert_int_eq(rt_actor_stop(p.client), 0);
    ck_assert(rtt_wait_closed(p.client));
    rtt_gate_open(&p.gate);
    ck_assert(ts_log_wait("s:reply ECLOSED", 1));
    pair_free(&p);
    ts_assert_log(0, "c:asked 0, s:reply ECLOSED");
}
END_TEST

START_TEST(test_reply_to_plain_message_is_einval)
{
    pair p = {0};
    pair_start(&p, RT_TEMPORARY, 0);
    /* M_GATE_REPLY replies to whatever it got; from rt_send there is no
     * reply address. */
    ck_assert_int_eq(rt_send(p.server, K_REQ, M_GATE_REPLY, NULL), 0);
    rtt_gate_open(&p.gate);
    ck_assert(ts_log_wait("s:reply EINVAL", 1));
    pair_free(&p);
    ts_assert_log(0, "s:reply EINVAL");
}
END_TEST

/* --------------------------------------------------------------- promises --- */

START_TEST(test_promise_answers_later_exactly_once)
{
    pair p = {0};
    pair_start(&p, RT_TEMPORARY, 0);
    go(&p, M_PROMISE);
    ck_assert(ts_log_wait("s:promise kept", 1));
    ck_assert_int_eq(rt_send(p.server, K_COMPLETE, 0, NULL), 0);
    ck_assert(ts_log_wait("c:reply 77", 1));
    /* Nothing else may arrive: in particular no RT_ENOREPLY for the handler
     * that returned without replying but kept a promise. The next request's
     * reply follows on the same path, so it comes after any such error. */
    go(&p, M_REPLY);
    ck_assert(ts_log_wait("c:reply 1", 1));
    pair_free(&p);
    ts_assert_log_prefix("c:", "c:asked 0, c:reply 77, c:asked 0, c:reply 1");
    ts_assert_log_prefix("s:", "s:promise kept, s:late reply 0");
}
END_TEST

START_TEST(test_promise_fail_is_error_answer)
{
    pair p = {0};
    pair_start(&p, RT_TEMPORARY, 0);
    go(&p, M_PROMISE);
    ck_assert(ts_log_wait("s:promise kept", 1));
    ck_assert_int_eq(rt_send(p.server, K_FAIL_PROMISE, 0, NULL), 0);
    ck_assert(ts_log_wait("c:error EIO", 1));
    pair_free(&p);
    ts_assert_log_prefix("c:", "c:asked 0, c:error EIO");
}
END_TEST

static int zero_promise_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)state;
    rt_promise pr = rt_msg_promise(m);
    TS_CHECK(pr.to == NULL);
    rt_promise_reply(&pr, K_REP, 0, 0, NULL);
    rt_promise zero = {0};
    rt_promise_fail(&zero, -EIO);
    ts_log("no-op");
    return 0;
}

START_TEST(test_zero_promise_completes_as_noop)
{
    static const rt_behaviour beh = {.name = "zero", .handle = zero_promise_handle};
    rt_runtime *rt = rtt_start(1, NULL);
    rt_actor *a = rtt_spawn(rt, &beh, NULL, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(a, K_REQ, 0, NULL), 0);
    ck_assert(ts_log_wait("no-op", 1));
    rt_actor_unref(a);
    rtt_free(rt);
    ts_assert_clean();
}
END_TEST

/* ---------------------------------------- every request answered, once --- */

/* A permanent server that, depending on the request, replies, stays
 * silent or fails (and is restarted, keeping its mailbox). Two clients on
 * two loops count their answers by kind; each must add up exactly. */
enum { MIX_CLIENTS = 2 };

static int mix_server_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)state;
    uint64_t i = m->arg & 0xffffffff;
    if (i % 13 == 5)
        return -EIO;
    if (i % 7 == 3)
        return 0;
    TS_CHECK(rt_reply(m, K_REP, 0, m->arg, NULL) == 0);
    return 0;
}

typedef struct mix_client {
    rt_actor *server;
    uint32_t idx, n;
    uint8_t *replied; /* per request: replies seen */
    uint32_t answers, enoreply, eio, other;
    ts_counter *done;
} mix_client;

static int mix_client_handle(rt_actor *self, void *state, rt_msg *m)
{
    mix_client *c = state;
    if (m->kind == K_GO) {
        for (uint32_t i = 0; i < c->n; i++)
            TS_CHECK(rt_ask(c->server, K_REQ, (uint64_t)c->idx << 32 | i, NULL, self) == 0);
        return 0;
    }
    if (m->kind == K_REP) {
        TS_CHECK(m->arg >> 32 == c->idx);
        uint32_t i = (uint32_t)m->arg;
        TS_CHECK(i < c->n);
        if (i < c->n)
            c->replied[i]++;
    } else if (m->kind == RT_KIND_ERROR && m->status == RT_ENOREPLY) {
        c->enoreply++;
    } else if (m->kind == RT_KIND_ERROR && m->status == -EIO) {
        c->eio++;
    } else {
        c->other++;
    }
    if (++c->answers == c->n)
        ts_counter_add(c->done, 1);
    return 0;
}

static void quiet_log(void)
{
    /* Hundreds of intended failures would each log a warning. */
    rt_log_set_level(RT_LOG_ERROR);
}

START_TEST(test_every_request_answered_exactly_once)
{
    static const rt_behaviour sb = {.name = "mix-server", .handle = mix_server_handle};
    static const rt_behaviour cb = {.name = "mix-client", .handle = mix_client_handle};
    const uint32_t n = TS_SCALE(5000, 1000);
    quiet_log();
    rt_runtime *rt = rtt_start(2, NULL);
    rt_actor *srv = rtt_spawn(rt, &sb, NULL, 1, RT_PERMANENT, 0);
    ts_counter done;
    ts_counter_init(&done);
    mix_client c[MIX_CLIENTS];
    rt_actor *ca[MIX_CLIENTS];
    for (uint32_t k = 0; k < MIX_CLIENTS; k++) {
        c[k] = (mix_client){.server = srv, .idx = k, .n = n, .done = &done};
        c[k].replied = calloc(n, 1);
        ca[k] = rtt_spawn(rt, &cb, &c[k], (int)k, RT_TEMPORARY, 0);
    }
    for (int k = 0; k < MIX_CLIENTS; k++)
        ck_assert_int_eq(rt_send(ca[k], K_GO, 0, NULL), 0);
    ck_assert(ts_counter_wait(&done, MIX_CLIENTS));
    for (int k = 0; k < MIX_CLIENTS; k++)
        rt_actor_unref(ca[k]);
    rt_actor_unref(srv);
    rtt_free(rt);
    ts_assert_clean();

    for (int k = 0; k < MIX_CLIENTS; k++) {
        uint32_t want_eio = 0, want_silent = 0;
        for (uint32_t i = 0; i < n; i++) {
            bool eio = i % 13 == 5, silent = !eio && i % 7 == 3;
            want_eio += eio;
            want_silent += silent;
            ts_require(c[k].replied[i] == (eio || silent ? 0 : 1),
                       "client %d request %u: %u replies", k, i, c[k].replied[i]);
        }
        ck_assert_uint_eq(c[k].answers, n); /* nothing arrived after the count was reached */
        ck_assert_uint_eq(c[k].eio, want_eio);
        ck_assert_uint_eq(c[k].enoreply, want_silent);
        ck_assert_uint_eq(c[k].other, 0);
        free(c[k].replied);
    }
}
END_TEST

/* ---------------------------------------------------------------- rt_call --- */

typedef struct call_rec {
    atomic_int calls;
    atomic_int loop;
    atomic_int kind, status;
    _Atomic uint64_t arg;
    atomic_bool buf_ok;
    ts_counter done;
} call_rec;

static void call_rec_init(call_rec *r)
{
    atomic_init(&r->calls, 0);
    atomic_init(&r->loop, -2);
    ts_counter_init(&r->done);
}

static void record_cb(void *ctx, rt_msg *reply)
{
    call_rec *r = ctx;
    atomic_store(&r->loop, rt_current_loop());
    atomic_store(&r->kind, (int)reply->kind);
    atomic_store(&r->status, reply->status);
    atomic_store(&r->arg, reply->arg);
    atomic_store(&r->buf_ok, reply->kind != K_REP || rtt_buf_is(reply->buf, "rep"));
    atomic_fetch_add(&r->calls, 1);
    ts_counter_add(&r->done, 1);
}

START_TEST(test_call_runs_cb_on_requested_loop)
{
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    rt_actor *srv = rtt_spawn(rt, &server_beh, &s, 0, RT_TEMPORARY, 0);
    call_rec r[2];
    for (int loop = 0; loop < 2; loop++) {
        call_rec_init(&r[loop]);
        int rc = rt_call(rt, loop, srv, K_REQ, M_REPLY, NULL, 0, record_cb, &r[loop]);
        ck_assert_int_eq(rc, 0);
        ck_assert(ts_counter_wait(&r[loop].done, 1));
        ck_assert_int_eq(atomic_load(&r[loop].loop), loop);
        ck_assert_int_eq(atomic_load(&r[loop].kind), K_REP);
        ck_assert_int_eq(atomic_load(&r[loop].status), 3);
        ck_assert_uint_eq(atomic_load(&r[loop].arg), M_REPLY);
        ck_assert(atomic_load(&r[loop].buf_ok));
    }
    rt_actor_unref(srv);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_int_eq(atomic_load(&r[0].calls), 1);
    ck_assert_int_eq(atomic_load(&r[1].calls), 1);
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

START_TEST(test_call_loop_any_from_outside)
{
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    rt_actor *srv = rtt_spawn(rt, &server_beh, &s, 0, RT_TEMPORARY, 0);
    call_rec r;
    call_rec_init(&r);
    ck_assert_int_eq(rt_call(rt, RT_LOOP_ANY, srv, K_REQ, M_REPLY, NULL, 0, record_cb, &r), 0);
    ck_assert(ts_counter_wait(&r.done, 1));
    ck_assert_int_ge(atomic_load(&r.loop), 0);
    ck_assert_int_lt(atomic_load(&r.loop), 2);
    rt_actor_unref(srv);
    rtt_free(rt);
    ck_assert_int_eq(atomic_load(&r.calls), 1);
}
END_TEST

/* The use rt_call is made for: a plain libuv callback on a loop (as an
 * HTTP handler would be), not inside any actor, asks an actor on another
 * loop and gets the answer back on its own loop. The callback is set up by
 * an actor on loop 1, which is the only safe way to touch that loop. */
typedef struct uv_caller {
    uv_timer_t timer;
    rt_runtime *rt;
    rt_actor *server;
    call_rec rec;
    ts_counter closed;
} uv_caller;

static void caller_closed(uv_handle_t *h)
{
    uv_caller *c = h->data;
    ts_counter_add(&c->closed, 1);
}

static void caller_fire(uv_timer_t *t)
{
    uv_caller *c = t->data;
    TS_CHECK(rt_self() == NULL);
    TS_CHECK(rt_current_loop() == 1);
    int rc = rt_call(c->rt, RT_LOOP_ANY, c->server, K_REQ, M_REPLY, NULL, 0, record_cb, &c->rec);
    TS_CHECK_MSG(rc == 0, "rt_call: %s", rt_strerror(rc));
    uv_close((uv_handle_t *)t, caller_closed);
}

static int arm_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    (void)m;
    uv_caller *c = state;
    uv_loop_t *loop = rt_runtime_uv(c->rt, rt_current_loop());
    TS_CHECK(uv_timer_init(loop, &c->timer) == 0);
    c->timer.data = c;
    TS_CHECK(uv_timer_start(&c->timer, caller_fire, 0, 0) == 0);
    return 0;
}

START_TEST(test_call_from_uv_callback_answers_on_its_loop)
{
    static const rt_behaviour beh = {.name = "arm", .handle = arm_handle};
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    static uv_caller c;
    c.rt = rt;
    c.server = rtt_spawn(rt, &server_beh, &s, 0, RT_TEMPORARY, 0);
    call_rec_init(&c.rec);
    ts_counter_init(&c.closed);
    rt_actor *arm = rtt_spawn(rt, &beh, &c, 1, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(arm, K_ARM, 0, NULL), 0);
    ck_assert(ts_counter_wait(&c.rec.done, 1));
    ck_assert(ts_counter_wait(&c.closed, 1));
    ck_assert_int_eq(atomic_load(&c.rec.loop), 1);
    ck_assert_int_eq(atomic_load(&c.rec.kind), K_REP);
    rt_actor_unref(arm);
    rt_actor_unref(c.server);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_int_eq(atomic_load(&c.rec.calls), 1);
}
END_TEST

/* The server keeps the request's promise and answers only after the call
 * has timed out: the callback has run once, with RT_ETIMEDOUT, and the
 * late reply is dropped. */
START_TEST(test_call_timeout_then_late_reply_dropped)
{
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    rt_actor *srv = rtt_spawn(rt, &server_beh, &s, 0, RT_TEMPORARY, 0);
    call_rec r;
    call_rec_init(&r);
    ck_assert_int_eq(rt_call(rt, 1, srv, K_REQ, M_PROMISE, NULL, 20, record_cb, &r), 0);
    ck_assert(ts_counter_wait(&r.done, 1));
    ck_assert_int_eq(atomic_load(&r.kind), RT_KIND_ERROR);
    ck_assert_int_eq(atomic_load(&r.status), RT_ETIMEDOUT);
    ck_assert_uint_eq(atomic_load(&r.arg), K_REQ);
    ck_assert_int_eq(atomic_load(&r.loop), 1);
    /* The timeout (loop 1) does not wait for the server (loop 0) to take
     * the request: on a busy machine, as under TSan, it fires first. */
    ck_assert(ts_log_wait("s:promise kept", 1));
    ck_assert_int_eq(rt_send(srv, K_COMPLETE, 0, NULL), 0);
    ck_assert(ts_log_wait_len(2));
    /* Dropped (accepted, then discarded) or refused as to a gone asker:
     * either way the callback does not run again. */
    ck_assert_msg(ts_log_count("s:late reply 0") + ts_log_count("s:late reply ECLOSED") == 1,
                  "late reply: %s", ts_log_join(0));
    rt_actor_unref(srv);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_int_eq(atomic_load(&r.calls), 1);
}
END_TEST

/* Deadlines in any order: the loop's one timer is set again for a call
 * made later with a shorter timeout, which then times out first while
 * the other still waits (and is answered later, once). */
START_TEST(test_call_shorter_timeout_made_later_fires_first)
{
    rt_runtime *rt = rtt_start(2, NULL);
    server s[2] = {{0}, {0}};
    rt_actor *srv[2];
    call_rec r[2];
    for (int i = 0; i < 2; i++) {
        srv[i] = rtt_spawn(rt, &server_beh, &s[i], 0, RT_TEMPORARY, 0);
        call_rec_init(&r[i]);
    }
    ck_assert_int_eq(rt_call(rt, 1, srv[0], K_REQ, M_PROMISE, NULL, 600000, record_cb, &r[0]), 0);
    ck_assert(ts_log_wait("s:promise kept", 1));
    ck_assert_int_eq(rt_call(rt, 1, srv[1], K_REQ, M_PROMISE, NULL, 20, record_cb, &r[1]), 0);
    ck_assert(ts_counter_wait(&r[1].done, 1));
    ck_assert_int_eq(atomic_load(&r[1].kind), RT_KIND_ERROR);
    ck_assert_int_eq(atomic_load(&r[1].status), RT_ETIMEDOUT);
    ck_assert_int_eq(atomic_load(&r[0].calls), 0);
    ck_assert_int_eq(rt_send(srv[0], K_COMPLETE, 0, NULL), 0);
    ck_assert(ts_counter_wait(&r[0].done, 1));
    ck_assert_int_eq(atomic_load(&r[0].kind), K_REP);
    ck_assert_uint_eq(atomic_load(&r[0].arg), 77);
    ck_assert_int_eq(atomic_load(&r[0].loop), 1);
    for (int i = 0; i < 2; i++)
        rt_actor_unref(srv[i]);
    rtt_free(rt);
    ck_assert_int_eq(atomic_load(&r[0].calls), 1);
    ck_assert_int_eq(atomic_load(&r[1].calls), 1);
}
END_TEST

/* More timeouts at once than the loop has lanes (call.c: a list per
 * timeout): three long calls take three lanes, and three short ones share
 * the last, made shortest last. Each short one times out (the timer finds
 * the earliest across the lanes, and within the shared one), the long ones
 * still wait, and a lane emptied takes a new timeout. */
START_TEST(test_call_more_timeouts_than_lanes)
{
    enum { N = 7 };
    static const uint64_t ms[N] = {600000, 500000, 400000, 40, 30, 20, 10};
    rt_runtime *rt = rtt_start(2, NULL);
    server s[N] = {{0}};
    rt_actor *srv[N];
    call_rec r[N];
    for (int i = 0; i < N; i++) {
        srv[i] = rtt_spawn(rt, &server_beh, &s[i], 0, RT_TEMPORARY, 0);
        call_rec_init(&r[i]);
    }
    for (int i = 0; i < N - 1; i++)
        ck_assert_int_eq(rt_call(rt, 1, srv[i], K_REQ, M_PROMISE, NULL, ms[i], record_cb, &r[i]),
                         0);
    for (int i = 3; i < N - 1; i++) {
        ck_assert(ts_counter_wait(&r[i].done, 1));
        ck_assert_int_eq(atomic_load(&r[i].status), RT_ETIMEDOUT);
    }
    /* the shared lane is empty now: the next timeout has it */
    ck_assert_int_eq(
        rt_call(rt, 1, srv[N - 1], K_REQ, M_PROMISE, NULL, ms[N - 1], record_cb, &r[N - 1]), 0);
    ck_assert(ts_counter_wait(&r[N - 1].done, 1));
    ck_assert_int_eq(atomic_load(&r[N - 1].status), RT_ETIMEDOUT);
    ck_assert(ts_log_wait("s:promise kept", N));
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(atomic_load(&r[i].calls), 0);
        ck_assert_int_eq(rt_send(srv[i], K_COMPLETE, 0, NULL), 0);
        ck_assert(ts_counter_wait(&r[i].done, 1));
        ck_assert_int_eq(atomic_load(&r[i].kind), K_REP);
    }
    for (int i = 0; i < N; i++)
        rt_actor_unref(srv[i]);
    rtt_free(rt);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(atomic_load(&r[i].calls), 1);
}
END_TEST

/* A callback that calls again (as convs_call's retry does): the new call
 * is made inside the turn that answers the first, on the same loop, and
 * gets its own answer. */
typedef struct chain {
    rt_runtime *rt;
    rt_actor *server;
    int left;
    call_rec rec;
} chain;

static void chain_cb(void *ctx, rt_msg *reply)
{
    chain *c = ctx;
    TS_CHECK(reply->kind == K_REP);
    if (--c->left > 0) {
        int rc = rt_call(c->rt, RT_LOOP_ANY, c->server, K_REQ, M_REPLY, NULL, 1000, chain_cb, c);
        TS_CHECK_MSG(rc == 0, "rt_call: %s", rt_strerror(rc));
        return;
    }
    record_cb(&c->rec, reply);
}

START_TEST(test_call_from_its_callback)
{
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    static chain c;
    c.rt = rt;
    c.server = rtt_spawn(rt, &server_beh, &s, 0, RT_TEMPORARY, 0);
    c.left = 5;
    call_rec_init(&c.rec);
    ck_assert_int_eq(rt_call(rt, 1, c.server, K_REQ, M_REPLY, NULL, 1000, chain_cb, &c), 0);
    ck_assert(ts_counter_wait(&c.rec.done, 1));
    ck_assert_int_eq(atomic_load(&c.rec.loop), 1);
    ck_assert_int_eq(atomic_load(&c.rec.kind), K_REP);
    rt_actor_unref(c.server);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_int_eq(atomic_load(&c.rec.calls), 1);
    ck_assert_int_eq(c.left, 0);
}
END_TEST

/* A request passed on (rt_promise_forward, as a retiring conversation
 * does): the second actor's answer reaches the call's callback. */
static int forward_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    rt_promise p = rt_msg_promise(m);
    int rc = rt_promise_forward(&p, state, K_REQ, M_REPLY, NULL);
    TS_CHECK_MSG(rc == 0, "rt_promise_forward: %s", rt_strerror(rc));
    TS_CHECK(p.to == NULL); /* completed */
    return 0;
}

START_TEST(test_call_answered_by_the_actor_it_was_passed_to)
{
    static const rt_behaviour fwd_beh = {.name = "forwarder", .handle = forward_handle};
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    rt_actor *srv = rtt_spawn(rt, &server_beh, &s, 1, RT_TEMPORARY, 0);
    rt_actor *fwd = rtt_spawn(rt, &fwd_beh, srv, 0, RT_TEMPORARY, 0);
    call_rec r;
    call_rec_init(&r);
    ck_assert_int_eq(rt_call(rt, 1, fwd, K_REQ, 0, NULL, 60000, record_cb, &r), 0);
    ck_assert(ts_counter_wait(&r.done, 1));
    ck_assert_int_eq(atomic_load(&r.kind), K_REP);
    ck_assert_int_eq(atomic_load(&r.status), 3);
    ck_assert(atomic_load(&r.buf_ok));
    rt_actor_unref(fwd);
    rt_actor_unref(srv);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_int_eq(atomic_load(&r.calls), 1);
}
END_TEST

/* Many calls waiting on one loop, answered in a scrambled order: each
 * reply finds its own call in the loop's table, whatever left it before
 * (the table's deletions move calls around). */
enum { KEPT = 500 };

typedef struct keeper {
    rt_promise p[KEPT];
    uint64_t arg[KEPT];
    int n;
} keeper;

static int keeper_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    keeper *k = state;
    if (m->kind == K_REQ && k->n < KEPT) {
        k->arg[k->n] = m->arg;
        k->p[k->n++] = rt_msg_promise(m);
        return 0;
    }
    if (m->kind == K_COMPLETE) {
        uint32_t x = 12345;
        for (int i = k->n - 1; i > 0; i--) { /* Fisher-Yates, a fixed LCG */
            x = x * 1103515245u + 12345u;
            int j = (int)((x >> 8) % (uint32_t)(i + 1));
            rt_promise tp = k->p[i];
            uint64_t ta = k->arg[i];
            k->p[i] = k->p[j], k->arg[i] = k->arg[j];
            k->p[j] = tp, k->arg[j] = ta;
        }
        for (int i = 0; i < k->n; i++)
            TS_CHECK(rt_promise_reply(&k->p[i], K_REP, 0, k->arg[i], NULL) == 0);
        k->n = 0;
    }
    return 0;
}

typedef struct kept_call {
    uint64_t arg;
    call_rec *rec;
    atomic_int *wrong;
} kept_call;

static void kept_cb(void *ctx, rt_msg *reply)
{
    kept_call *c = ctx;
    if (reply->kind != K_REP || reply->arg != c->arg)
        atomic_fetch_add(c->wrong, 1);
    record_cb(c->rec, reply);
}

START_TEST(test_calls_answered_in_any_order)
{
    static const rt_behaviour keeper_beh = {.name = "keeper", .handle = keeper_handle};
    rt_runtime *rt = rtt_start(2, NULL);
    static keeper k;
    static kept_call c[KEPT];
    atomic_int wrong;
    atomic_init(&wrong, 0);
    call_rec r;
    call_rec_init(&r);
    rt_actor *srv = rtt_spawn(rt, &keeper_beh, &k, 0, RT_TEMPORARY, 0);
    for (int i = 0; i < KEPT; i++) {
        c[i] = (kept_call){M_ECHO + (uint64_t)i, &r, &wrong};
        /* half with a deadline, half without: both kinds leave the table */
        ck_assert_int_eq(
            rt_call(rt, 1, srv, K_REQ, c[i].arg, NULL, i % 2 ? 600000 : 0, kept_cb, &c[i]), 0);
    }
    ck_assert_int_eq(rt_send(srv, K_COMPLETE, 0, NULL), 0);
    ck_assert(ts_counter_wait(&r.done, KEPT));
    rt_actor_unref(srv);
    rtt_free(rt);
    ck_assert_int_eq(atomic_load(&r.calls), KEPT);
    ck_assert_int_eq(atomic_load(&wrong), 0);
}
END_TEST

/* A callback that fails an RT_ASSERT ends alone: a call waiting on the
 * same loop is still answered with its own reply (not RT_ECLOSED), and
 * the loop takes new calls. */
static void asserting_cb(void *ctx, rt_msg *reply)
{
    record_cb(ctx, reply);
    RT_ASSERT(reply->kind == RT_KIND_ERROR); /* it is a K_REP */
}

START_TEST(test_call_failed_callback_ends_alone)
{
    rt_runtime *rt = rtt_start(2, NULL);
    server s[2] = {{0}, {0}};
    rt_actor *holder = rtt_spawn(rt, &server_beh, &s[0], 0, RT_TEMPORARY, 0);
    rt_actor *srv = rtt_spawn(rt, &server_beh, &s[1], 0, RT_TEMPORARY, 0);
    call_rec r[3];
    for (int i = 0; i < 3; i++)
        call_rec_init(&r[i]);
    ck_assert_int_eq(rt_call(rt, 1, holder, K_REQ, M_PROMISE, NULL, 600000, record_cb, &r[0]), 0);
    ck_assert(ts_log_wait("s:promise kept", 1));
    ck_assert_int_eq(rt_call(rt, 1, srv, K_REQ, M_REPLY, NULL, 0, asserting_cb, &r[1]), 0);
    ck_assert(ts_counter_wait(&r[1].done, 1));
    ck_assert_int_eq(rt_call(rt, 1, srv, K_REQ, M_REPLY, NULL, 0, record_cb, &r[2]), 0);
    ck_assert(ts_counter_wait(&r[2].done, 1));
    ck_assert_int_eq(atomic_load(&r[2].kind), K_REP);
    ck_assert_int_eq(atomic_load(&r[0].calls), 0); /* still waiting */
    ck_assert_int_eq(rt_send(holder, K_COMPLETE, 0, NULL), 0);
    ck_assert(ts_counter_wait(&r[0].done, 1));
    ck_assert_int_eq(atomic_load(&r[0].kind), K_REP);
    ck_assert_uint_eq(atomic_load(&r[0].arg), 77);
    rt_actor_unref(holder);
    rt_actor_unref(srv);
    rtt_free(rt);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(atomic_load(&r[i].calls), 1);
}
END_TEST

START_TEST(test_call_no_reply_is_enoreply)
{
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    rt_actor *srv = rtt_spawn(rt, &server_beh, &s, 0, RT_TEMPORARY, 0);
    call_rec r;
    call_rec_init(&r);
    ck_assert_int_eq(rt_call(rt, 1, srv, K_REQ, M_SILENT, NULL, 0, record_cb, &r), 0);
    ck_assert(ts_counter_wait(&r.done, 1));
    ck_assert_int_eq(atomic_load(&r.kind), RT_KIND_ERROR);
    ck_assert_int_eq(atomic_load(&r.status), RT_ENOREPLY);
    ck_assert_uint_eq(atomic_load(&r.arg), K_REQ);
    rt_actor_unref(srv);
    rtt_free(rt);
    ck_assert_int_eq(atomic_load(&r.calls), 1);
}
END_TEST

/* Either refused at once (and the callback never runs) or accepted and
 * answered with RT_ECLOSED; both keep "exactly once if it returned 0". */
START_TEST(test_call_to_closed_actor)
{
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    rt_actor *srv = rtt_spawn(rt, &server_beh, &s, 0, RT_TEMPORARY, 0);
    ck_assert_int_eq(rt_send(srv, K_REQ, M_DONE, NULL), 0);
    ck_assert(rtt_wait_closed(srv));
    call_rec r;
    call_rec_init(&r);
    rt_buf *b = rtt_buf("req");
    int rc = rt_call(rt, 1, srv, K_REQ, M_REPLY, b, 0, record_cb, &r);
    if (rc == 0) {
        ck_assert(ts_counter_wait(&r.done, 1));
        ck_assert_int_eq(atomic_load(&r.kind), RT_KIND_ERROR);
        ck_assert_int_eq(atomic_load(&r.status), RT_ECLOSED);
    } else {
        ck_assert_int_eq(rc, RT_ECLOSED);
        ck_assert(rtt_buf_is(b, "req")); /* refused: still ours */
        rt_buf_unref(b);
    }
    rt_actor_unref(srv);
    rtt_free(rt);
    ck_assert_int_eq(atomic_load(&r.calls), rc == 0 ? 1 : 0);
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

START_TEST(test_call_bad_arguments)
{
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    rt_actor *srv = rtt_spawn(rt, &server_beh, &s, 0, RT_TEMPORARY, 0);
    call_rec r;
    call_rec_init(&r);
    rt_buf *b = rtt_buf("req");
    ck_assert_int_eq(rt_call(rt, 0, srv, K_REQ, M_REPLY, b, 0, NULL, &r), RT_EINVAL);
    ck_assert_int_eq(rt_call(rt, 2, srv, K_REQ, M_REPLY, b, 0, record_cb, &r), RT_EINVAL);
    ck_assert(rtt_buf_is(b, "req"));
    rt_buf_unref(b);
    rt_actor_unref(srv);
    rtt_free(rt);
    ck_assert_int_eq(atomic_load(&r.calls), 0);
    ck_assert_int_eq(rtt_bufs_live(), 0);
}
END_TEST

/* Calls from several threads at once, answered on both loops: every
 * callback runs exactly once, on its loop, with its own answer. */
enum { CALL_THREADS = 4 };

typedef struct call_storm {
    rt_runtime *rt;
    rt_actor *server;
    uint32_t per;
    atomic_uchar *seen; /* CALL_THREADS * per */
    atomic_long wrong;
    ts_counter done;
    ts_counter go;
} call_storm;

typedef struct storm_call {
    call_storm *cs;
    uint64_t arg;
} storm_call;

static void storm_cb(void *ctx, rt_msg *reply)
{
    storm_call *sc = ctx;
    call_storm *cs = sc->cs;
    uint64_t i = sc->arg - M_ECHO;
    if (reply->kind != K_REP || reply->arg != sc->arg || rt_current_loop() != (int)(i % 2))
        atomic_fetch_add(&cs->wrong, 1);
    if (i < (uint64_t)CALL_THREADS * cs->per)
        atomic_fetch_add(&cs->seen[i], 1);
    free(sc);
    ts_counter_add(&cs->done, 1);
}

struct storm_thread {
    call_storm *cs;
    uint32_t t;
};

static void *storm_thread(void *p)
{
    struct storm_thread *st = p;
    call_storm *cs = st->cs;
    if (!ts_counter_wait(&cs->go, 1))
        return NULL;
    for (uint32_t k = 0; k < cs->per; k++) {
        uint64_t i = (uint64_t)st->t * cs->per + k;
        storm_call *sc = malloc(sizeof *sc);
        sc->cs = cs;
        sc->arg = M_ECHO + i;
        int rc = rt_call(cs->rt, (int)(i % 2), cs->server, K_REQ, sc->arg, NULL, 0, storm_cb, sc);
        if (rc != 0) {
            TS_CHECK_MSG(0, "rt_call: %s", rt_strerror(rc));
            free(sc);
        }
    }
    return NULL;
}

START_TEST(test_call_from_many_threads)
{
    rt_runtime *rt = rtt_start(2, NULL);
    server s = {0};
    static call_storm cs;
    cs.rt = rt;
    cs.server = rtt_spawn(rt, &server_beh, &s, 0, RT_TEMPORARY, 0);
    cs.per = TS_SCALE(2000, 300);
    cs.seen = calloc((size_t)CALL_THREADS * cs.per, sizeof *cs.seen);
    ts_counter_init(&cs.done);
    ts_counter_init(&cs.go);
    pthread_t t[CALL_THREADS];
    struct storm_thread st[CALL_THREADS];
    for (uint32_t i = 0; i < CALL_THREADS; i++) {
        st[i] = (struct storm_thread){&cs, i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, storm_thread, &st[i]), 0);
    }
    ts_counter_add(&cs.go, 1);
    for (int i = 0; i < CALL_THREADS; i++)
        pthread_join(t[i], NULL);
    long total = (long)CALL_THREADS * cs.per;
    ck_assert_msg(ts_counter_wait(&cs.done, total), "%ld of %ld callbacks ran",
                  ts_counter_get(&cs.done), total);
    rt_actor_unref(cs.server);
    rtt_free(rt);
    ts_assert_clean();
    ck_assert_int_eq(ts_counter_get(&cs.done), total);
    ck_assert_int_eq(atomic_load(&cs.wrong), 0);
    for (long i = 0; i < total; i++)
        ts_require(atomic_load(&cs.seen[i]) == 1, "call %ld: callback ran %d times", i,
                   atomic_load(&cs.seen[i]));
    free(cs.seen);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("call");
    TCase *tc = tcase_create("ask");
    tcase_add_test(tc, test_ask_reply_across_loops);
    tcase_add_test(tc, test_many_asks_in_flight);
    tcase_add_test(tc, test_no_reply_is_enoreply);
    tcase_add_test(tc, test_failed_handler_answers_with_its_reason);
    tcase_add_test(tc, test_assert_in_handler_answers_eassert);
    tcase_add_test(tc, test_exit_without_reply_is_enoreply);
    tcase_add_test(tc, test_request_queued_behind_exit_is_eclosed);
    tcase_add_test(tc, test_ask_to_closed_actor_refused_without_answer);
    tcase_add_test(tc, test_ask_to_full_mailbox_refused_without_answer);
    tcase_add_test(tc, test_answer_reaches_full_bounded_asker);
    tcase_add_test(tc, test_reply_to_gone_asker_is_eclosed);
    tcase_add_test(tc, test_reply_to_plain_message_is_einval);
    tcase_add_test(tc, test_promise_answers_later_exactly_once);
    tcase_add_test(tc, test_promise_fail_is_error_answer);
    tcase_add_test(tc, test_zero_promise_completes_as_noop);
    tcase_add_test(tc, test_every_request_answered_exactly_once);
    suite_add_tcase(s, tc);

    tc = tcase_create("call");
    tcase_add_test(tc, test_call_runs_cb_on_requested_loop);
    tcase_add_test(tc, test_call_loop_any_from_outside);
    tcase_add_test(tc, test_call_from_uv_callback_answers_on_its_loop);
    tcase_add_test(tc, test_call_timeout_then_late_reply_dropped);
    tcase_add_test(tc, test_call_shorter_timeout_made_later_fires_first);
    tcase_add_test(tc, test_call_more_timeouts_than_lanes);
    tcase_add_test(tc, test_call_from_its_callback);
    tcase_add_test(tc, test_call_answered_by_the_actor_it_was_passed_to);
    tcase_add_test(tc, test_calls_answered_in_any_order);
    tcase_add_test(tc, test_call_failed_callback_ends_alone);
    tcase_add_test(tc, test_call_no_reply_is_enoreply);
    tcase_add_test(tc, test_call_to_closed_actor);
    tcase_add_test(tc, test_call_bad_arguments);
    tcase_add_test(tc, test_call_from_many_threads);
    suite_add_tcase(s, tc);

    return ts_run_suite(s);
}
