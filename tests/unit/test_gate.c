/*
 * test_gate.c - the compliance gate alone (gate.h), with no conversation
 * around it: each rule and its boundary, the order of the checks, what the
 * gate asks its lookup and what it makes of the answers, what it leaves
 * unchanged, the keys, and gate_clone / gate_write / gate_load.
 *
 * The lookup here is a toy log: the ids committed with their canonical
 * bytes, and the keys. It is exact (no stamps forgiven), because what
 * counts as "the same content" is the conversation's business; the gate
 * only acts on the answer.
 */
#include "actors/event.h"
#include "actors/gate.h"
#include "runtime/json.h"

#include "support_sync.h"

#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the log --- */

enum { LOG_MAX = 64 };

typedef struct toylog {
    char *id[LOG_MAX], *bytes[LOG_MAX], *key[LOG_MAX];
    size_t n;
    int asked_known, asked_id, asked_key; /* how often the gate asked */
} toylog;

static int toy_known(void *ctx, const ev *e)
{
    toylog *t = ctx;
    t->asked_known++;
    for (size_t i = 0; i < t->n; i++) {
        if (strcmp(t->id[i], e->id) != 0)
            continue;
        rt_buf *c = ev_serialize(e);
        int r = strcmp((const char *)rt_buf_data(c), t->bytes[i]) == 0 ? 1 : 2;
        rt_buf_unref(c);
        return r;
    }
    return 0;
}

static bool toy_has_id(void *ctx, const char *id)
{
    toylog *t = ctx;
    t->asked_id++;
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->id[i], id) == 0)
            return true;
    return false;
}

static bool toy_has_key(void *ctx, const char *key, size_t len)
{
    toylog *t = ctx;
    t->asked_key++;
    for (size_t i = 0; i < t->n; i++)
        if (t->key[i] != NULL && strlen(t->key[i]) == len && memcmp(t->key[i], key, len) == 0)
            return true;
    return false;
}

static gate_lookup lookup(toylog *t)
{
    return (gate_lookup){t, toy_known, toy_has_id, toy_has_key};
}

static void toy_free(toylog *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->id[i]);
        free(t->bytes[i]);
        free(t->key[i]);
    }
    memset(t, 0, sizeof(*t));
}

/* ------------------------------------------------------------- events --- */

static ev parse(json_t *o)
{
    ev e;
    char err[256];
    ck_assert_msg(o != NULL, "json_pack failed");
    int r = ev_from_json(o, &e, err, sizeof(err));
    ck_assert_msg(r == 0, "invalid test event: %s", err);
    json_decref(o);
    return e;
}

static ev msg(const char *id, const char *source)
{
    const char *role = strcmp(source, "agent") == 0 ? "assistant" : "user";
    return parse(json_pack("{s:s, s:s, s:{s:s, s:[{s:s, s:s}]}, s:s}", "id", id, "source", source,
                           "llm_message", "role", role, "content", "type", "text", "text", id,
                           "kind", "MessageEvent"));
}

static ev act(const char *id, const char *call, const char *resp)
{
    return parse(json_pack("{s:s, s:s, s:[], s:{s:s, s:s}, s:s, s:s, s:{s:s, s:s, s:s, s:s}, "
                           "s:s, s:s}",
                           "id", id, "source", "agent", "thought", "action", "command", "ls",
                           "kind", "TerminalAction", "tool_name", "terminal", "tool_call_id", call,
                           "tool_call", "id", call, "name", "terminal", "arguments", "{}", "origin",
                           "completion", "llm_response_id", resp, "kind", "ActionEvent"));
}

/* An observation-like event of the given kind answering call. */
static ev result(const char *kind, const char *id, const char *call)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "id", id, "tool_name", "terminal", "tool_call_id",
                          call, "kind", kind);
    if (strcmp(kind, "ObservationEvent") == 0)
        json_object_set_new(o, "observation",
                            json_pack("{s:[], s:s}", "content", "kind", "TerminalObservation"));
    if (strcmp(kind, "AgentErrorEvent") == 0)
        json_object_set_new(o, "error", json_string("boom"));
    if (strcmp(kind, "ObservationEvent") == 0 || strcmp(kind, "UserRejectObservation") == 0)
        json_object_set_new(o, "action_id", json_string("a?"));
    return parse(o);
}

static ev obs(const char *id, const char *call)
{
    return result("ObservationEvent", id, call);
}

static ev other(const char *id, const char *kind)
{
    json_t *o = json_pack("{s:s, s:s}", "id", id, "kind", kind);
    if (strcmp(kind, "SystemPromptEvent") == 0) {
        json_object_set_new(
            o, "system_prompt",
            json_pack("{s:s, s:s}", "type", "text", "text", "You are a helpful assistant."));
        json_object_set_new(o, "tools", json_array());
    }
    if (strcmp(kind, "ConversationStateUpdateEvent") == 0) {
        json_object_set_new(o, "key", json_string("execution_status"));
        json_object_set_new(o, "value", json_string("running"));
    }
    return parse(o);
}

static ev with_parent(ev e, const char *parent)
{
    json_t *o = ev_json(&e);
    ev_free(&e);
    json_object_set_new(o, "parent_id", json_string(parent));
    return parse(o);
}

/* ------------------------------------------------------------ helpers --- */

static gate_verdict check(const gate *g, toylog *t, const ev *e, gate_rule *rule)
{
    gate_lookup lk = lookup(t);
    return gate_check(g, e, &lk, rule);
}

/* Checked, expected to pass, then accepted and written to the log, as the
 * conversation does it. Frees e. */
static void commit(gate *g, toylog *t, ev e)
{
    gate_rule rule;
    gate_verdict v = check(g, t, &e, &rule);
    ck_assert_msg(v == GATE_ACCEPT, "%s was not accepted: verdict %d rule %s", e.id, v,
                  gate_rule_name(rule));
    gate_accept(g, &e);
    ck_assert_int_lt(t->n, LOG_MAX);
    char key[256];
    t->id[t->n] = strdup(e.id);
    rt_buf *b = ev_serialize(&e);
    t->bytes[t->n] = strdup((const char *)rt_buf_data(b));
    rt_buf_unref(b);
    t->key[t->n] = gate_key(&e, key, sizeof(key)) > 0 ? strdup(key) : NULL;
    t->n++;
    ev_free(&e);
}

/* The verdict and rule for e against g; frees e. */
static void expect(const gate *g, toylog *t, ev e, gate_verdict want, gate_rule want_rule)
{
    gate_rule rule = GATE_OK;
    gate_verdict v = check(g, t, &e, &rule);
    ck_assert_msg(v == want && rule == want_rule, "%s: verdict %d rule '%s', wanted %d '%s'", e.id,
                  v, gate_rule_name(rule), want, gate_rule_name(want_rule));
    ev_free(&e);
}

/* What a checkpoint holds of g, read back. */
static json_t *gate_save(const gate *g)
{
    rt_text w = {0};
    gate_write(&w, g);
    ck_assert(!w.failed);
    json_t *s = rt_json_read(w.p, w.len, 0, NULL);
    free(w.p);
    return s;
}

static char *saved_text(const gate *g)
{
    json_t *s = gate_save(g);
    ck_assert_ptr_nonnull(s);
    char *text = json_dumps(s, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(s);
    return text;
}

/* -------------------------------------------------------------- rules --- */

START_TEST(test_full_turn)
{
    gate *g = gate_new();
    toylog t = {0};
    ck_assert_ptr_null(gate_head(g));
    commit(g, &t, other("s1", "SystemPromptEvent"));
    commit(g, &t, msg("u1", "user"));
    commit(g, &t, act("a1", "c1", "r1"));
    ck_assert_uint_eq(gate_pending_count(g), 1);
    const char *action, *tool;
    ck_assert_str_eq(gate_pending_call(g, 0, &action, &tool), "c1");
    ck_assert_str_eq(action, "a1");
    ck_assert_str_eq(tool, "terminal");
    ck_assert_ptr_null(gate_pending_call(g, 1, NULL, NULL));
    commit(g, &t, obs("t1", "c1"));
    ck_assert_uint_eq(gate_pending_count(g), 0);
    commit(g, &t, act("a2", "c2", "r2")); /* a new turn: any response id */
    commit(g, &t, obs("t2", "c2"));
    commit(g, &t, msg("m1", "agent"));
    ck_assert_str_eq(gate_head(g), "m1");
    toy_free(&t);
    gate_free(g);
}
END_TEST

START_TEST(test_interleaved_message)
{
    gate *g = gate_new();
    toylog t = {0};
    commit(g, &t, msg("u1", "user"));
    commit(g, &t, act("a1", "c1", "r1"));
    /* an agent message is refused; the others wait, expiry would say the rule */
    expect(g, &t, msg("m1", "agent"), GATE_REJECT, GATE_INTERLEAVED_MESSAGE);
    expect(g, &t, msg("u2", "user"), GATE_DEFER, GATE_INTERLEAVED_MESSAGE);
    expect(g, &t, msg("e1", "environment"), GATE_DEFER, GATE_INTERLEAVED_MESSAGE);
    expect(g, &t, msg("h1", "hook"), GATE_DEFER, GATE_INTERLEAVED_MESSAGE);
    commit(g, &t, obs("t1", "c1"));
    commit(g, &t, msg("u2", "user"));
    commit(g, &t, msg("m1", "agent"));
    toy_free(&t);
    gate_free(g);
}
END_TEST

START_TEST(test_parallel_batch)
{
    gate *g = gate_new();
    toylog t = {0};
    commit(g, &t, act("a1", "c1", "r1"));
    commit(g, &t, act("a2", "c2", "r1"));
    expect(g, &t, act("a3", "c3", "r2"), GATE_REJECT, GATE_INTERLEAVED_ACTION);
    ck_assert_uint_eq(gate_pending_count(g), 2);
    ck_assert_str_eq(gate_pending_call(g, 1, NULL, NULL), "c2");
    /* results in any order; the batch stays open until the last one */
    commit(g, &t, obs("t2", "c2"));
    ck_assert_str_eq(gate_pending_call(g, 0, NULL, NULL), "c1");
    expect(g, &t, act("a3", "c3", "r2"), GATE_REJECT, GATE_INTERLEAVED_ACTION);
    commit(g, &t, act("a3", "c3", "r1")); /* the same turn may still add a call */
    commit(g, &t, obs("t1", "c1"));
    commit(g, &t, obs("t3", "c3"));
    commit(g, &t, act("a4", "c4", "r2"));
    toy_free(&t);
    gate_free(g);
}
END_TEST

START_TEST(test_duplicate_tool_call_id)
{
    gate *g = gate_new();
    toylog t = {0};
    commit(g, &t, act("a1", "c1", "r1"));
    expect(g, &t, act("a2", "c1", "r1"), GATE_REJECT, GATE_DUPLICATE_TOOL_CALL_ID); /* pending */
    commit(g, &t, obs("t1", "c1"));
    expect(g, &t, act("a2", "c1", "r2"), GATE_REJECT, GATE_DUPLICATE_TOOL_CALL_ID); /* done */
    ck_assert_int_gt(t.asked_key, 0);
    toy_free(&t);
    gate_free(g);
}
END_TEST

START_TEST(test_results)
{
    static const char *const kinds[] = {"ObservationEvent", "AgentErrorEvent",
                                        "UserRejectObservation"};
    for (int k = 0; k < 3; k++) {
        gate *g = gate_new();
        toylog t = {0};
        expect(g, &t, result(kinds[k], "t0", "c1"), GATE_REJECT, GATE_UNMATCHED_TOOL_RESULT);
        commit(g, &t, act("a1", "c1", "r1"));
        expect(g, &t, result(kinds[k], "t0", "c9"), GATE_REJECT, GATE_UNMATCHED_TOOL_RESULT);
        commit(g, &t, result(kinds[k], "t1", "c1"));
        for (int j = 0; j < 3; j++)
            expect(g, &t, result(kinds[j], "t2", "c1"), GATE_REJECT, GATE_DUPLICATE_TOOL_RESULT);
        toy_free(&t);
        gate_free(g);
    }
}
END_TEST

START_TEST(test_parents)
{
    gate *g = gate_new();
    toylog t = {0};
    /* an explicit new root only while the conversation is empty */
    commit(g, &t, with_parent(msg("u1", "user"), "__root__"));
    expect(g, &t, with_parent(msg("u2", "user"), "__root__"), GATE_REJECT, GATE_STALE_PARENT);
    commit(g, &t, with_parent(act("a1", "c1", "r1"), "u1"));
    /* unknown parents wait (the rule is what expiry would say) */
    expect(g, &t, with_parent(obs("t1", "c1"), "nowhere"), GATE_HOLD, GATE_UNKNOWN_PARENT);
    expect(g, &t, with_parent(msg("m1", "agent"), "nowhere"), GATE_HOLD, GATE_UNKNOWN_PARENT);
    /* a known parent that is not the head: a fork is refused */
    expect(g, &t, with_parent(obs("t1", "c1"), "u1"), GATE_REJECT, GATE_STALE_PARENT);
    commit(g, &t, with_parent(obs("t1", "c1"), "a1"));
    /* the parent check comes before the tool-call rules */
    expect(g, &t, with_parent(obs("t2", "c1"), "nowhere"), GATE_HOLD, GATE_UNKNOWN_PARENT);
    expect(g, &t, with_parent(obs("t2", "c1"), "u1"), GATE_REJECT, GATE_STALE_PARENT);
    toy_free(&t);
    gate_free(g);
}
END_TEST

START_TEST(test_event_ids)
{
    gate *g = gate_new();
    toylog t = {0};
    commit(g, &t, msg("u1", "user"));
    commit(g, &t, act("a1", "c1", "r1"));
    /* the same content again is a retry; other content under the id is refused */
    expect(g, &t, msg("u1", "user"), GATE_ALREADY, GATE_OK);
    expect(g, &t, msg("u1", "hook"), GATE_REJECT, GATE_DUPLICATE_EVENT_ID);
    /* the id comes first: a retry of a committed action is no duplicate call */
    expect(g, &t, act("a1", "c1", "r1"), GATE_ALREADY, GATE_OK);
    expect(g, &t, act("a1", "c2", "r1"), GATE_REJECT, GATE_DUPLICATE_EVENT_ID);
    expect(g, &t, with_parent(msg("u1", "user"), "nowhere"), GATE_REJECT, GATE_DUPLICATE_EVENT_ID);
    /* without an id the log is not asked */
    int asked = t.asked_known;
    ev e = parse(json_pack("{s:s, s:s}", "kind", "PauseEvent", "source", "user"));
    gate_rule rule;
    ck_assert_int_eq(check(g, &t, &e, &rule), GATE_ACCEPT);
    ck_assert_int_eq(t.asked_known, asked);
    ev_free(&e);
    toy_free(&t);
    gate_free(g);
}
END_TEST

START_TEST(test_other_events_pass)
{
    static const char *const kinds[] = {"SystemPromptEvent", "PauseEvent", "InterruptEvent",
                                        "CondensationRequest", "ConversationStateUpdateEvent"};
    gate *g = gate_new();
    toylog t = {0};
    commit(g, &t, act("a1", "c1", "r1"));
    char id[16];
    for (int k = 0; k < 5; k++) {
        snprintf(id, sizeof(id), "x%d", k);
        commit(g, &t, other(id, kinds[k]));
    }
    ck_assert_uint_eq(gate_pending_count(g), 1);
    /* state updates are not nodes of the tree: the head stays */
    ck_assert_str_eq(gate_head(g), "x3");
    toy_free(&t);
    gate_free(g);
}
END_TEST

START_TEST(test_check_changes_nothing)
{
    gate *g = gate_new();
    toylog t = {0};
    commit(g, &t, act("a1", "c1", "r1"));
    char *before = saved_text(g);
    expect(g, &t, msg("m1", "agent"), GATE_REJECT, GATE_INTERLEAVED_MESSAGE);
    expect(g, &t, msg("u1", "user"), GATE_DEFER, GATE_INTERLEAVED_MESSAGE);
    expect(g, &t, obs("t9", "c9"), GATE_REJECT, GATE_UNMATCHED_TOOL_RESULT);
    ev e = obs("t1", "c1");
    gate_rule rule;
    ck_assert_int_eq(check(g, &t, &e, &rule), GATE_ACCEPT);
    ck_assert_int_eq(check(g, &t, &e, &rule), GATE_ACCEPT);
    ev_free(&e);
    char *after = saved_text(g);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    toy_free(&t);
    gate_free(g);
}
END_TEST

START_TEST(test_keys_and_names)
{
    char key[256];
    ev e = act("a1", "call_1", "r1");
    ck_assert_uint_eq(gate_key(&e, key, sizeof(key)), 8);
    ck_assert_str_eq(key, "a:call_1");
    ev_free(&e);
    static const char *const kinds[] = {"ObservationEvent", "AgentErrorEvent",
                                        "UserRejectObservation"};
    for (int k = 0; k < 3; k++) {
        e = result(kinds[k], "t1", "call_1");
        ck_assert_uint_eq(gate_key(&e, key, sizeof(key)), 8);
        ck_assert_str_eq(key, "o:call_1");
        ev_free(&e);
    }
    e = msg("u1", "user");
    ck_assert_uint_eq(gate_key(&e, key, sizeof(key)), 0);
    ev_free(&e);
    e = act("a1", "call_1", "r1");
    ck_assert_uint_eq(gate_key(&e, key, 8), 0); /* no room */
    ev_free(&e);
    char longcall[300];
    memset(longcall, 'c', sizeof(longcall) - 1);
    longcall[sizeof(longcall) - 1] = '\0';
    e = act("a1", longcall, "r1");
    ck_assert_uint_eq(gate_key(&e, key, sizeof(key)), 0); /* beyond the store's key size */
    ev_free(&e);

    static const char *const names[] = {"",
                                        "interleaved_message",
                                        "interleaved_action",
                                        "duplicate_tool_call_id",
                                        "unmatched_tool_result",
                                        "duplicate_tool_result",
                                        "unknown_parent",
                                        "stale_parent",
                                        "duplicate_event_id",
                                        "invalid_event"};
    for (int r = GATE_OK; r <= GATE_INVALID_EVENT; r++)
        ck_assert_str_eq(gate_rule_name((gate_rule)r), names[r]);
    ck_assert_str_eq(gate_rule_name((gate_rule)(GATE_INVALID_EVENT + 1)), "");
}
END_TEST

/* ------------------------------------------------- clone, save, load --- */

START_TEST(test_clone_is_independent)
{
    gate *g = gate_new();
    toylog t = {0};
    commit(g, &t, msg("u1", "user"));
    commit(g, &t, act("a1", "c1", "r1"));
    gate *c = gate_clone(g);
    ck_assert_ptr_nonnull(c);
    char *a = saved_text(g), *b = saved_text(c);
    ck_assert_str_eq(a, b);
    free(b);
    ev e = obs("t1", "c1");
    gate_accept(c, &e);
    ev_free(&e);
    ck_assert_uint_eq(gate_pending_count(c), 0);
    ck_assert_uint_eq(gate_pending_count(g), 1);
    ck_assert_str_eq(gate_head(c), "t1");
    ck_assert_str_eq(gate_head(g), "a1");
    b = saved_text(g);
    ck_assert_str_eq(a, b); /* the original did not move */
    free(a);
    free(b);
    gate_free(c);
    gate *empty = gate_new(), *ec = gate_clone(empty);
    ck_assert_ptr_null(gate_head(ec));
    ck_assert_uint_eq(gate_pending_count(ec), 0);
    gate_free(ec);
    gate_free(empty);
    toy_free(&t);
    gate_free(g);
}
END_TEST

START_TEST(test_save_load_round_trip)
{
    gate *g = gate_new();
    toylog t = {0};
    /* empty */
    gate *h = gate_new();
    json_t *s = gate_save(g);
    ck_assert_int_eq(gate_load(h, s), 0);
    json_decref(s);
    ck_assert_ptr_null(gate_head(h));
    /* a batch of three, one answered */
    commit(g, &t, msg("u1", "user"));
    commit(g, &t, act("a1", "c1", "r1"));
    commit(g, &t, act("a2", "c2", "r1"));
    commit(g, &t, act("a3", "c3", "r1"));
    commit(g, &t, obs("t2", "c2"));
    s = gate_save(g);
    ck_assert_int_eq(gate_load(h, s), 0);
    json_decref(s);
    char *a = saved_text(g), *b = saved_text(h);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    const char *action, *tool;
    ck_assert_str_eq(gate_pending_call(h, 1, &action, &tool), "c3");
    ck_assert_str_eq(action, "a3");
    ck_assert_str_eq(tool, "terminal");
    /* the loaded gate judges as the original: same batch, same head */
    expect(h, &t, act("a4", "c4", "r2"), GATE_REJECT, GATE_INTERLEAVED_ACTION);
    expect(h, &t, msg("u2", "user"), GATE_DEFER, GATE_INTERLEAVED_MESSAGE);
    expect(h, &t, with_parent(obs("t1", "c1"), "t2"), GATE_ACCEPT, GATE_OK);
    commit(h, &t, act("a4", "c4", "r1"));
    /* loading replaces what was there */
    gate *fresh = gate_new();
    s = gate_save(fresh);
    ck_assert_int_eq(gate_load(h, s), 0);
    json_decref(s);
    ck_assert_uint_eq(gate_pending_count(h), 0);
    ck_assert_ptr_null(gate_head(h));
    gate_free(fresh);
    /* pending calls without an action id or tool name (older checkpoints) */
    s = json_loads("{\"head\":\"x\",\"batch\":\"r\",\"pending\":[[\"c1\",null,null]]}", 0, NULL);
    ck_assert_int_eq(gate_load(h, s), 0);
    json_decref(s);
    ck_assert_str_eq(gate_pending_call(h, 0, &action, &tool), "c1");
    ck_assert_ptr_null(action);
    ck_assert_ptr_null(tool);
    char *back = saved_text(h);
    ck_assert_str_eq(back, "{\"batch\":\"r\",\"head\":\"x\",\"pending\":[[\"c1\",null,null]]}");
    free(back);
    gate_free(h);
    toy_free(&t);
    gate_free(g);
}
END_TEST

START_TEST(test_load_refuses_garbage)
{
    static const char *const bad[] = {
        "[]",
        "{\"batch\":null,\"pending\":[]}",
        "{\"head\":null,\"pending\":[]}",
        "{\"head\":null,\"batch\":null}",
        "{\"head\":1,\"batch\":null,\"pending\":[]}",
        "{\"head\":null,\"batch\":[],\"pending\":[]}",
        "{\"head\":null,\"batch\":null,\"pending\":{}}",
        "{\"head\":null,\"batch\":null,\"pending\":[[1,null,null]]}",
        "{\"head\":null,\"batch\":null,\"pending\":[[\"c1\",1,null]]}",
        "{\"head\":null,\"batch\":null,\"pending\":[[\"c1\",null,{}]]}",
        "{\"head\":null,\"batch\":null,\"pending\":[\"c1\"]}",
        /* pending calls without their LLM response, and the reverse */
        "{\"head\":null,\"batch\":null,\"pending\":[[\"c1\",\"a1\",\"t\"]]}",
        "{\"head\":null,\"batch\":\"r1\",\"pending\":[]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        gate *g = gate_new();
        json_t *s = json_loads(bad[i], 0, NULL);
        ck_assert_ptr_nonnull(s);
        ck_assert_msg(gate_load(g, s) == -EINVAL, "loaded %s", bad[i]);
        json_decref(s);
        /* whatever happened, the gate is still usable */
        toylog t = {0};
        commit(g, &t, act("a1", "c1", "r1"));
        toy_free(&t);
        gate_free(g);
    }
    gate *g = gate_new();
    ck_assert_int_eq(gate_load(g, NULL), -EINVAL);
    /* a refused checkpoint leaves the gate as it was, whatever is wrong */
    json_t *good =
        json_loads("{\"head\":\"h\",\"batch\":\"r\",\"pending\":[[\"c1\",null,null]]}", 0, NULL);
    ck_assert_int_eq(gate_load(g, good), 0);
    json_decref(good);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *s = json_loads(bad[i], 0, NULL);
        ck_assert_int_eq(gate_load(g, s), -EINVAL);
        json_decref(s);
        char *now = saved_text(g);
        ck_assert_str_eq(now, "{\"batch\":\"r\",\"head\":\"h\",\"pending\":[[\"c1\",null,null]]}");
        free(now);
    }
    gate_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gate");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, test_full_turn);
    tcase_add_test(tc, test_interleaved_message);
    tcase_add_test(tc, test_parallel_batch);
    tcase_add_test(tc, test_duplicate_tool_call_id);
    tcase_add_test(tc, test_results);
    tcase_add_test(tc, test_parents);
    tcase_add_test(tc, test_event_ids);
    tcase_add_test(tc, test_other_events_pass);
    tcase_add_test(tc, test_check_changes_nothing);
    tcase_add_test(tc, test_keys_and_names);
    suite_add_tcase(s, tc);

    tc = tcase_create("state");
    tcase_add_test(tc, test_clone_is_independent);
    tcase_add_test(tc, test_save_load_round_trip);
    tcase_add_test(tc, test_load_refuses_garbage);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
