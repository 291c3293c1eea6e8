/* support_conv.c - see support_conv.h. */
#include "support_conv.h"

#include "net/verdict.h"

#include "support_store.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slot_cv = PTHREAD_COND_INITIALIZER;

void tc_start(tc_env *e, const char *dir, const conv_opts *o, st_durability d)
{
    if (dir != NULL) {
        free(e->dir);
        e->dir = strdup(dir);
    } else if (e->dir == NULL) {
        e->dir = tst_mkdtemp();
    }
    e->durability = d;
    if (o != NULL)
        e->o = *o;
    /* the local store: these suites look at a conversation's files (state.json,
     * deferred.json) in its directory; the pool runs them through the
     * integration suites and test_parley_api */
    char where[4200];
    snprintf(where, sizeof(where), "local:%s", e->dir);
    st_opts so = {.dir = where, .durability = d};
    char err[512];
    ck_assert_msg(st_store_open(&so, &e->store, err, sizeof(err)) == 0, "store: %s", err);
    rt_opts ro = {.loops = 2};
    ck_assert_int_eq(rt_runtime_new(&ro, &e->rt), 0);
    ck_assert_int_eq(convs_new(e->rt, e->store, &e->o, &e->svc), 0);
    if (!rt_uuid_parse(TC_CONV_ID, 32, &e->id))
        ck_abort();
    const char *m = e->meta != NULL ? e->meta : "{}";
    rt_buf *meta = rt_buf_copy(m, strlen(m));
    bool created;
    ck_assert_int_eq(convs_create(e->svc, &e->id, NULL, meta, NULL, &e->conv, &created), 0);
    rt_buf_unref(meta);
}

void tc_stop(tc_env *e)
{
    rt_actor_unref(e->conv);
    e->conv = NULL;
    /* the order a server closes in: loops stopped, then the store (whose
     * late answers the stopped runtime refuses), then the rest */
    rt_runtime_wait(e->rt);
    st_store_close(e->store);
    convs_free(e->svc);
    rt_runtime_free(e->rt);
    e->rt = NULL;
    e->svc = NULL;
    e->store = NULL;
}

void tc_restart(tc_env *e)
{
    tc_stop(e);
    tc_start(e, NULL, NULL, e->durability);
}

void tc_finish(tc_env *e)
{
    tc_stop(e);
    tst_rmdir(e->dir);
    free(e->dir);
    e->dir = NULL;
}

static void on_reply(void *ctx, rt_msg *m)
{
    tc_slot *s = ctx;
    pthread_mutex_lock(&slot_mu);
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    if (cr == NULL) {
        s->code = m->kind == RT_KIND_ERROR ? m->status : RT_EFAIL;
    } else if (cr->v.outcome == PL_DONE) { /* the verdict and what it knows */
        s->code = 200;
        json_t *j =
            json_pack("{s:b, s:s, s:I, s:I, s:i, s:I, s:I, s:I}", "success", 1, "status",
                      conv_status_name(cr->status), "events", (json_int_t)cr->count, "count",
                      (json_int_t)cr->count, "pending_tool_calls", (int)cr->pending, "gate_ns",
                      (json_int_t)cr->gate_ns, "violations", (json_int_t)cr->findings.violations,
                      "stuck_findings", (json_int_t)cr->findings.stuck);
        if (cr->updated[0] != '\0')
            json_object_set_new(j, "updated_at", json_string(cr->updated));
        s->body = json_dumps(j, JSON_COMPACT);
        json_decref(j);
    } else { /* as HTTP would say it: the mapping net/ uses */
        rt_buf *body;
        unsigned retry;
        s->code = net_verdict_http(&cr->v, &body, &retry);
        if (body != NULL)
            s->body = strndup((const char *)rt_buf_data(body), rt_buf_len(body));
        rt_buf_unref(body);
    }
    s->done = true;
    pthread_cond_broadcast(&slot_cv);
    pthread_mutex_unlock(&slot_mu);
}

tc_slot *tc_request(tc_env *e, uint32_t kind, uint64_t arg, const char *body)
{
    tc_slot *s = calloc(1, sizeof(*s));
    rt_buf *b = body != NULL ? rt_buf_copy(body, strlen(body)) : NULL;
    if (rt_actor_closed(e->conv)) { /* retired at rest: its new tree */
        rt_actor_unref(e->conv);
        ck_assert_int_eq(convs_get(e->svc, &e->id, &e->conv), 0);
    }
    int r = convs_call(e->svc, &e->id, 0, kind, arg, b, 0, on_reply, s);
    ck_assert_int_eq(r, 0);
    return s;
}

bool tc_wait(tc_slot *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += TS_DEADLINE_MS / 1000;
    pthread_mutex_lock(&slot_mu);
    int r = 0;
    while (!s->done && r == 0)
        r = pthread_cond_timedwait(&slot_cv, &slot_mu, &ts);
    bool done = s->done;
    pthread_mutex_unlock(&slot_mu);
    return done;
}

bool tc_done(tc_slot *s)
{
    pthread_mutex_lock(&slot_mu);
    bool done = s->done;
    pthread_mutex_unlock(&slot_mu);
    return done;
}

void tc_slot_free(tc_slot *s)
{
    if (s != NULL)
        free(s->body);
    free(s);
}

int tc_call(tc_env *e, uint32_t kind, uint64_t arg, const char *body, char **out)
{
    tc_slot *s = tc_request(e, kind, arg, body);
    ck_assert_msg(tc_wait(s), "no answer to a request of kind %u", kind);
    int code = s->code;
    if (out != NULL) {
        *out = s->body;
        s->body = NULL;
    }
    tc_slot_free(s);
    return code;
}

json_t *tc_log(tc_env *e)
{
    st_conv *sc;
    st_log *l;
    ck_assert_int_eq(st_conv_get(e->store, &e->id, &sc), 0);
    ck_assert_int_eq(st_conv_log(sc, &l, NULL), 0);
    json_t *all = json_array();
    uint64_t n = st_log_count(l);
    for (uint64_t at = 0; at < n; at += 100) {
        st_page *p;
        ck_assert_int_eq(st_log_read(l, at, 100, &p), 0);
        for (uint32_t i = 0; i < p->n; i++)
            json_array_append_new(all,
                                  json_loadb((const char *)rt_buf_data(p->bytes) + p->ev[i].off,
                                             p->ev[i].len, 0, NULL));
        st_page_free(p);
    }
    st_conv_release(sc);
    return all;
}

/* ------------------------------------------------------------- answers --- */

json_t *tc_json(const char *text)
{
    json_error_t je;
    json_t *j = text != NULL ? json_loads(text, JSON_DECODE_ANY, &je) : NULL;
    ck_assert_msg(j != NULL, "not JSON: %s", text != NULL ? text : "(no body)");
    return j;
}

int tc_append(tc_env *e, const char *body, json_t **out)
{
    char *text = NULL;
    int code = tc_call(e, CONV_APPEND, 0, body, &text);
    if (out != NULL)
        *out = tc_json(text);
    free(text);
    return code;
}

void tc_sync(tc_env *e)
{
    char *text = NULL;
    int code = tc_call(e, CONV_SYNC, 0, NULL, &text);
    ck_assert_msg(code == 200, "CONV_SYNC answered %d %s", code, text != NULL ? text : "");
    free(text);
}

void tc_status(tc_env *e, char *status, size_t cap, int *pending)
{
    char *text = NULL;
    ck_assert_int_eq(tc_call(e, CONV_STATUS, 0, NULL, &text), 200);
    json_t *j = tc_json(text);
    free(text);
    if (status != NULL)
        snprintf(status, cap, "%s", json_string_value(json_object_get(j, "status")));
    if (pending != NULL)
        *pending = (int)json_integer_value(json_object_get(j, "pending_tool_calls"));
    json_decref(j);
}

void tc_findings(tc_env *e, uint64_t *violations, uint64_t *stuck)
{
    char *text = NULL;
    ck_assert_int_eq(tc_call(e, CONV_STATUS, 0, NULL, &text), 200);
    json_t *j = tc_json(text);
    free(text);
    *violations = (uint64_t)json_integer_value(json_object_get(j, "violations"));
    *stuck = (uint64_t)json_integer_value(json_object_get(j, "stuck_findings"));
    json_decref(j);
}

/* -------------------------------------------------------------- events --- */

char *tc_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    ck_assert_int_ge(n, 0);
    return s;
}

static char *dump(json_t *j)
{
    ck_assert_ptr_nonnull(j);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    ck_assert_ptr_nonnull(s);
    return s;
}

char *tc_ev_msg(const char *id, const char *source, const char *text)
{
    const char *role = strcmp(source, "agent") == 0 ? "assistant" : "user";
    return dump(json_pack("{s:s, s:s, s:{s:s, s:[{s:s, s:s}]}, s:s}", "id", id, "source", source,
                          "llm_message", "role", role, "content", "type", "text", "text", text,
                          "kind", "MessageEvent"));
}

char *tc_ev_action(const char *id, const char *call, const char *response, const char *command)
{
    char args[256];
    snprintf(args, sizeof(args), "{\"command\": \"%s\"}", command);
    return dump(json_pack("{s:s, s:s, s:[], s:{s:s, s:b, s:b, s:s}, s:s, s:s, "
                          "s:{s:s, s:s, s:s, s:s}, s:s, s:s}",
                          "id", id, "source", "agent", "thought", "action", "command", command,
                          "is_input", 0, "reset", 0, "kind", "TerminalAction", "tool_name",
                          "terminal", "tool_call_id", call, "tool_call", "id", call, "name",
                          "terminal", "arguments", args, "origin", "completion", "llm_response_id",
                          response, "kind", "ActionEvent"));
}

char *tc_ev_obs(const char *id, const char *call, const char *action_id, const char *output)
{
    return dump(json_pack("{s:s, s:s, s:s, s:s, s:{s:[{s:s, s:s}], s:b, s:s}, s:s, s:s}", "id", id,
                          "source", "environment", "tool_name", "terminal", "tool_call_id", call,
                          "observation", "content", "type", "text", "text", output, "is_error", 0,
                          "kind", "TerminalObservation", "action_id", action_id, "kind",
                          "ObservationEvent"));
}

char *tc_ev_agent_error(const char *id, const char *call, const char *error)
{
    return dump(json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", id, "source", "agent",
                          "tool_name", "terminal", "tool_call_id", call, "error", error, "kind",
                          "AgentErrorEvent"));
}

char *tc_ev_reject(const char *id, const char *call, const char *action_id)
{
    return dump(json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", id, "source", "environment",
                          "tool_name", "terminal", "tool_call_id", call, "action_id", action_id,
                          "kind", "UserRejectObservation"));
}

char *tc_ev_state(const char *id, const char *key, const char *value_json)
{
    json_t *v = tc_json(value_json);
    return dump(json_pack("{s:s, s:s, s:s, s:o, s:s}", "id", id, "source", "agent", "key", key,
                          "value", v, "kind", "ConversationStateUpdateEvent"));
}

char *tc_ev_with(char *body, const char *key, const char *value_json)
{
    json_t *j = tc_json(body);
    free(body);
    json_object_set_new(j, key, tc_json(value_json));
    return dump(j);
}

char *tc_ev_array(const char *first, ...)
{
    json_t *a = json_array();
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s != NULL; s = va_arg(ap, const char *))
        json_array_append_new(a, tc_json(s));
    va_end(ap);
    return dump(a);
}

/* --------------------------------------------------------- subscribers --- */

enum { SUB_RELEASE = RT_KIND_RANGE(9), SUB_LEAVE };

struct tc_sub {
    pthread_mutex_t mu; /* what the test thread reads */
    pthread_cond_t cv;
    rt_actor *conv, *self;
    uint64_t tail;
    bool slow, subscribed, left;
    int failed; /* an error answer to one of its requests */
    uint64_t count_at;
    size_t n, cap, syncs;
    uint64_t *index;
    char **bytes;
    /* the actor's own: syncs a slow subscriber has not answered yet */
    bool released;
    rt_promise *held;
    uint64_t *held_arg;
    size_t nheld, held_cap;
};

/* Wakes the test thread's waits, and lets go of s->mu (taken by the caller). */
static void sub_unlock_signal(tc_sub *s)
{
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static int sub_init(rt_actor *self, void *arg, void **state)
{
    tc_sub *s = arg;
    *state = s;
    return rt_ask(s->conv, CONV_SUBSCRIBE, s->tail, NULL, self);
}

static void sub_answer_held(tc_sub *s)
{
    for (size_t i = 0; i < s->nheld; i++)
        rt_promise_reply(&s->held[i], CONV_SYNC_DONE, 0, s->held_arg[i], NULL);
    s->nheld = 0;
}

static int sub_handle(rt_actor *self, void *state, rt_msg *m)
{
    tc_sub *s = state;
    switch (m->kind) {
    case CONV_RESULT:
        pthread_mutex_lock(&s->mu);
        if (!s->subscribed) {
            const conv_reply *cr = conv_reply_of(m);
            s->count_at = cr != NULL ? cr->count : 0;
            s->subscribed = true;
        } else {
            s->left = true;
        }
        sub_unlock_signal(s);
        break;
    case CONV_EVENT:
        pthread_mutex_lock(&s->mu);
        if (s->n == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 64;
            s->index = realloc(s->index, s->cap * sizeof(*s->index));
            s->bytes = realloc(s->bytes, s->cap * sizeof(*s->bytes));
        }
        s->index[s->n] = m->arg;
        s->bytes[s->n++] = m->buf != NULL
                               ? strndup((const char *)rt_buf_data(m->buf), rt_buf_len(m->buf))
                               : strdup("null");
        sub_unlock_signal(s);
        break;
    case CONV_SYNC:
        pthread_mutex_lock(&s->mu);
        s->syncs++;
        sub_unlock_signal(s);
        if (!s->slow || s->released) {
            rt_reply(m, CONV_SYNC_DONE, 0, m->arg, NULL);
            break;
        }
        if (s->nheld == s->held_cap) {
            s->held_cap = s->held_cap ? 2 * s->held_cap : 8;
            s->held = realloc(s->held, s->held_cap * sizeof(*s->held));
            s->held_arg = realloc(s->held_arg, s->held_cap * sizeof(*s->held_arg));
        }
        s->held_arg[s->nheld] = m->arg;
        s->held[s->nheld++] = rt_msg_promise(m);
        break;
    case SUB_RELEASE:
        s->released = true;
        sub_answer_held(s);
        break;
    case SUB_LEAVE:
        if (rt_ask(s->conv, CONV_UNSUBSCRIBE, 0, NULL, self) < 0) {
            pthread_mutex_lock(&s->mu);
            s->failed = -1;
            s->left = true;
            sub_unlock_signal(s);
        }
        break;
    case RT_KIND_ERROR:
        pthread_mutex_lock(&s->mu);
        s->failed = m->status;
        s->subscribed = s->left = true; /* nobody waits for ever */
        sub_unlock_signal(s);
        break;
    default:
        break;
    }
    return 0;
}

static void sub_stop(rt_actor *self, void *state)
{
    (void)self;
    tc_sub *s = state;
    for (size_t i = 0; i < s->nheld; i++)
        rt_promise_fail(&s->held[i], RT_ECLOSED);
    s->nheld = 0;
}

static const rt_behaviour sub_behaviour = {
    .name = "test-subscriber",
    .init = sub_init,
    .handle = sub_handle,
    .stop = sub_stop,
};

/* Waits under s->mu until *flag, or the deadline. */
static bool sub_wait_flag(tc_sub *s, const bool *flag)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += TS_DEADLINE_MS / 1000;
    pthread_mutex_lock(&s->mu);
    int r = 0;
    while (!*flag && r == 0)
        r = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    bool ok = *flag;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static int sub_failed(tc_sub *s)
{
    pthread_mutex_lock(&s->mu);
    int f = s->failed;
    pthread_mutex_unlock(&s->mu);
    return f;
}

tc_sub *tc_subscribe(tc_env *e, uint64_t tail, bool slow)
{
    tc_sub *s = calloc(1, sizeof(*s));
    ck_assert_ptr_nonnull(s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->conv = rt_actor_ref(e->conv);
    s->tail = tail;
    s->slow = slow;
    /* on the other loop than the conversation's, so that the two really
     * run concurrently */
    rt_spawn_opts o = {.beh = &sub_behaviour,
                       .arg = s,
                       .loop = rt_actor_loop(e->conv) == 0 ? 1 : 0,
                       .restart = RT_TEMPORARY};
    ck_assert_int_eq(rt_spawn(e->rt, &o, &s->self), 0);
    ck_assert_msg(sub_wait_flag(s, &s->subscribed), "the subscription was not answered");
    ck_assert_int_eq(sub_failed(s), 0);
    return s;
}

uint64_t tc_sub_count_at_subscribe(tc_sub *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t n = s->count_at;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Waits under s->mu until *count >= n, or the deadline. */
static bool sub_wait_count(tc_sub *s, const size_t *count, size_t n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += TS_DEADLINE_MS / 1000;
    pthread_mutex_lock(&s->mu);
    int r = 0;
    while (*count < n && r == 0)
        r = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    bool ok = *count >= n;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

bool tc_sub_wait(tc_sub *s, size_t n)
{
    return sub_wait_count(s, &s->n, n);
}

size_t tc_sub_len(tc_sub *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

uint64_t tc_sub_index(tc_sub *s, size_t i)
{
    pthread_mutex_lock(&s->mu);
    ck_assert_uint_lt(i, s->n);
    uint64_t x = s->index[i];
    pthread_mutex_unlock(&s->mu);
    return x;
}

json_t *tc_sub_event(tc_sub *s, size_t i)
{
    pthread_mutex_lock(&s->mu);
    ck_assert_uint_lt(i, s->n);
    char *b = strdup(s->bytes[i]);
    pthread_mutex_unlock(&s->mu);
    json_t *j = tc_json(b);
    free(b);
    return j;
}

size_t tc_sub_syncs(tc_sub *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->syncs;
    pthread_mutex_unlock(&s->mu);
    return n;
}

bool tc_sub_wait_syncs(tc_sub *s, size_t n)
{
    return sub_wait_count(s, &s->syncs, n);
}

void tc_sub_release(tc_sub *s)
{
    ck_assert_int_eq(rt_send(s->self, SUB_RELEASE, 0, NULL), 0);
}

void tc_sub_leave(tc_sub *s)
{
    ck_assert_int_eq(rt_send(s->self, SUB_LEAVE, 0, NULL), 0);
    ck_assert_msg(sub_wait_flag(s, &s->left), "the unsubscription was not answered");
    ck_assert_int_eq(sub_failed(s), 0);
}

void tc_sub_free(tc_sub *s)
{
    if (s == NULL)
        return;
    rt_actor_unref(s->self);
    rt_actor_unref(s->conv);
    for (size_t i = 0; i < s->n; i++)
        free(s->bytes[i]);
    free(s->bytes);
    free(s->index);
    free(s->held);
    free(s->held_arg);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
