/*
 * test_acp_map.c - the pure half of hosted agents: JSON-RPC lines
 * (acp_rpc.h) and ACP session updates as events (acp_map.h). Every event
 * the mapping makes is checked against the event schema and then judged by
 * the sequencer offline (replay.h), as a live conversation would judge it:
 * a well-behaved agent's turn is accepted whole, a rule-breaking one is
 * refused where the rule says.
 */
#include "actors/acp_map.h"
#include "actors/acp_registry.h"
#include "actors/acp_rpc.h"
#include "actors/replay.h"
#include "support_json.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ helpers --- */

static int next_id;

static void seq_ids(void *ctx, char out[37])
{
    (void)ctx;
    snprintf(out, 37, "00000000-0000-4000-8000-%012d", ++next_id);
}

static json_t *update(acp_turn *t, const char *u, json_t *out)
{
    json_t *v = tj_json(u);
    char why[200] = "";
    int r = acp_turn_update(t, v, out, why, sizeof(why));
    ck_assert_msg(r == 0, "update refused (%d: %s): %s", r, why, u);
    json_decref(v);
    return out;
}

static const char *kind_at(json_t *evs, size_t i)
{
    return json_string_value(json_object_get(json_array_get(evs, i), "kind"));
}

static const char *field(json_t *evs, size_t i, const char *k)
{
    return json_string_value(json_object_get(json_array_get(evs, i), k));
}

/* What the sequencer answered each event, offline. */
typedef struct judged {
    seq_kind kind[64];
    char rule[64][40];
    size_t n;
} judged;

static void on_answer(void *ctx, void *token, const seq_verdict *v)
{
    judged *j = ctx;
    size_t k = (size_t)(uintptr_t)token - 1;
    if (k < 64) {
        j->kind[k] = v->kind;
        snprintf(j->rule[k], sizeof(j->rule[k]), "%s", gate_rule_name(v->rule));
    }
}

/* A user message, then evs: each must be a valid event; the verdicts. */
static void judge(json_t *evs, judged *j)
{
    memset(j, 0, sizeof(*j));
    replay_opts ro = {.seq = {.hold_timeout_ms = 3600000, .defer_timeout_ms = 3600000},
                      .stuck_off = true};
    replay_hooks h = {.ctx = j, .answered = on_answer};
    replay *rp = replay_new(&ro, &h);
    json_t *user = tj_json("{\"kind\":\"MessageEvent\",\"id\":\"u1\",\"source\":\"user\","
                           "\"llm_message\":{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                           "\"text\":\"go\"}]}}");
    ev e;
    char err[256];
    ck_assert_int_eq(seq_event(user, &e, err, sizeof(err)), 0);
    replay_offer(rp, &e, (void *)(uintptr_t)64); /* not recorded */
    json_decref(user);
    size_t i;
    json_t *x;
    json_array_foreach(evs, i, x)
    {
        json_t *mine = json_deep_copy(x);
        int r = seq_event(mine, &e, err, sizeof(err));
        ck_assert_msg(r == 0, "event %zu is not valid: %s", i, err);
        replay_offer(rp, &e, (void *)(uintptr_t)(i + 1));
        json_decref(mine);
    }
    j->n = json_array_size(evs);
    replay_end(rp);
    replay_free(rp);
}

static void all_accepted(json_t *evs)
{
    judged j;
    judge(evs, &j);
    for (size_t i = 0; i < j.n; i++)
        ck_assert_msg(j.kind[i] == SEQ_ACCEPTED, "event %zu (%s) not accepted: %s", i,
                      kind_at(evs, i), j.rule[i]);
}

/* ------------------------------------------------------------ JSON-RPC --- */

START_TEST(test_rpc_lines)
{
    rpc_msg m;
    const char *req = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"fs/read_text_file\","
                      "\"params\":{\"path\":\"/x\"}}";
    rpc_parse(req, strlen(req), &m);
    ck_assert_int_eq(m.type, RPC_REQUEST);
    ck_assert_str_eq(m.method, "fs/read_text_file");
    ck_assert_int_eq(json_integer_value(m.id), 7);
    rpc_clear(&m);
    const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{}}";
    rpc_parse(note, strlen(note), &m);
    ck_assert_int_eq(m.type, RPC_NOTIFY);
    rpc_clear(&m);
    const char *res = "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{\"stopReason\":\"end_turn\"}}";
    rpc_parse(res, strlen(res), &m);
    ck_assert_int_eq(m.type, RPC_RESULT);
    ck_assert_str_eq(json_string_value(m.id), "a");
    rpc_clear(&m);
    const char *err =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32601,\"message\":\"no\"}}";
    rpc_parse(err, strlen(err), &m);
    ck_assert_int_eq(m.type, RPC_ERROR);
    ck_assert_int_eq(m.code, -32601);
    rpc_clear(&m);
    static const char *const bad[] = {
        "this is not json",
        "[1,2]",
        "{\"id\":1,\"method\":\"x\"}",
        "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"x\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":99999}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}",
        "{\"jsonrpc\":\"2.0\",\"method\":7}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"x\",\"message\":\"m\"}}",
        "{\"hello\":1}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rpc_parse(bad[i], strlen(bad[i]), &m);
        ck_assert_msg(m.type == RPC_INVALID && m.why[0] != '\0', "accepted: %s", bad[i]);
        rpc_clear(&m);
    }
    /* written lines: compact, one newline, at the end only */
    rt_buf *b = rpc_request(3, "session/prompt", tj_json("{\"text\":\"two\\nlines\"}"));
    const char *s = (const char *)rt_buf_data(b);
    size_t n = rt_buf_len(b);
    ck_assert(n > 0 && s[n - 1] == '\n' && memchr(s, '\n', n - 1) == NULL);
    rpc_parse(s, n - 1, &m);
    ck_assert_int_eq(m.type, RPC_REQUEST);
    ck_assert_str_eq(json_string_value(json_object_get(m.params, "text")), "two\nlines");
    rpc_clear(&m);
    rt_buf_unref(b);
    json_t *id = json_string("x");
    b = rpc_error(id, RPC_METHOD_NOT_FOUND, "no such method");
    rpc_parse((const char *)rt_buf_data(b), rt_buf_len(b) - 1, &m);
    ck_assert_int_eq(m.type, RPC_ERROR);
    ck_assert_int_eq(m.code, -32601);
    rpc_clear(&m);
    rt_buf_unref(b);
    b = rpc_result(id, NULL);
    rpc_parse((const char *)rt_buf_data(b), rt_buf_len(b) - 1, &m);
    ck_assert_int_eq(m.type, RPC_RESULT);
    ck_assert(json_is_null(m.result));
    rpc_clear(&m);
    rt_buf_unref(b);
    json_decref(id);
}
END_TEST

/* -------------------------------------------------------------- a turn --- */

/* spec/acp-reducer.md A.13's turn, plus a parallel pair: every update in
 * its place, and the gate takes all of it. */
START_TEST(test_full_turn)
{
    next_id = 0;
    acp_turn *t = acp_turn_new("turn-1", NULL, seq_ids, NULL);
    json_t *out = json_array();
    update(t,
           "{\"sessionUpdate\":\"agent_thought_chunk\",\"content\":{\"type\":\"text\","
           "\"text\":\"Looking at \"}}",
           out);
    update(t,
           "{\"sessionUpdate\":\"agent_thought_chunk\",\"content\":{\"type\":\"text\","
           "\"text\":\"main.c\"}}",
           out);
    ck_assert_uint_eq(json_array_size(out), 0); /* thoughts wait for what comes */
    ck_assert(acp_turn_started(t));
    update(t,
           "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"call_1\",\"title\":\"Reading "
           "main.c\",\"kind\":\"read\",\"status\":\"pending\",\"locations\":[{\"path\":"
           "\"/w/main.c\",\"line\":1}],\"rawInput\":{\"path\":\"/w/main.c\"}}",
           out);
    ck_assert_uint_eq(json_array_size(out), 1);
    ck_assert_uint_eq(acp_turn_open_calls(t), 1);
    json_t *a = json_array_get(out, 0);
    ck_assert_str_eq(kind_at(out, 0), "ActionEvent");
    ck_assert_str_eq(field(out, 0, "tool_call_id"), "call_1");
    ck_assert_str_eq(field(out, 0, "tool_name"), "read");
    ck_assert_str_eq(field(out, 0, "llm_response_id"), "turn-1");
    ck_assert_str_eq(field(out, 0, "summary"), "Reading main.c");
    ck_assert_str_eq(json_string_value(
                         json_object_get(json_array_get(json_object_get(a, "thought"), 0), "text")),
                     "Looking at main.c");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(a, "tool_call"), "arguments")),
        "{\"path\":\"/w/main.c\"}");
    update(t,
           "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"call_1\",\"status\":"
           "\"in_progress\"}",
           out);
    ck_assert_uint_eq(json_array_size(out), 1); /* progress makes nothing */
    update(t,
           "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"call_1\",\"status\":"
           "\"completed\",\"content\":[{\"type\":\"content\",\"content\":{\"type\":\"text\","
           "\"text\":\"int main(){}\"}}],\"rawOutput\":{\"ok\":true}}",
           out);
    ck_assert_uint_eq(json_array_size(out), 2);
    ck_assert_str_eq(kind_at(out, 1), "ObservationEvent");
    ck_assert_str_eq(field(out, 1, "action_id"), field(out, 0, "id"));
    json_t *obs = json_object_get(json_array_get(out, 1), "observation");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(obs, "content"), 0), "text")),
                     "int main(){}");
    ck_assert(json_is_true(json_object_get(json_object_get(obs, "raw_output"), "ok")));
    /* later frames of a closed call change nothing */
    update(t,
           "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"call_1\",\"status\":"
           "\"failed\"}",
           out);
    ck_assert_uint_eq(json_array_size(out), 2);
    /* done at once: the action and its result together */
    update(t,
           "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"call_2\",\"title\":\"Editing "
           "main.c\",\"kind\":\"edit\",\"status\":\"completed\",\"content\":[{\"type\":\"diff\","
           "\"path\":\"/w/main.c\",\"oldText\":\"a\",\"newText\":\"b\"}]}",
           out);
    ck_assert_uint_eq(json_array_size(out), 4);
    ck_assert_str_eq(kind_at(out, 3), "ObservationEvent");
    /* two calls in parallel, the second done first */
    update(t,
           "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"p1\",\"title\":\"$ ls\","
           "\"kind\":\"execute\"}",
           out);
    update(t,
           "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"p2\",\"title\":\"$ pwd\","
           "\"kind\":\"execute\"}",
           out);
    update(t,
           "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"p2\",\"status\":"
           "\"completed\"}",
           out);
    update(t,
           "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"p1\",\"status\":\"failed\","
           "\"content\":[{\"type\":\"content\",\"content\":{\"type\":\"text\",\"text\":\"no "
           "such dir\"}}]}",
           out);
    ck_assert_uint_eq(json_array_size(out), 8);
    ck_assert_str_eq(kind_at(out, 7), "AgentErrorEvent");
    ck_assert_str_eq(field(out, 7, "error"), "no such dir");
    update(t,
           "{\"sessionUpdate\":\"plan\",\"entries\":[{\"content\":\"Fix bug\",\"priority\":"
           "\"high\",\"status\":\"completed\"},{\"content\":\"Test\",\"priority\":\"low\","
           "\"status\":\"pending\"}]}",
           out);
    ck_assert_uint_eq(json_array_size(out), 10);
    ck_assert_str_eq(field(out, 8, "tool_name"), "plan");
    /* commands, modes, usage: no events */
    update(t, "{\"sessionUpdate\":\"available_commands_update\",\"availableCommands\":[]}", out);
    update(t, "{\"sessionUpdate\":\"current_mode_update\",\"currentModeId\":\"code\"}", out);
    update(t, "{\"sessionUpdate\":\"usage_update\",\"used\":1,\"size\":2}", out);
    update(t, "{\"sessionUpdate\":\"something_new\",\"x\":1}", out);
    ck_assert_uint_eq(json_array_size(out), 10);
    /* the reply, in three chunks, is one message at the end */
    update(t,
           "{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\","
           "\"text\":\"Do\"}}",
           out);
    update(t,
           "{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\","
           "\"text\":\"ne\"}}",
           out);
    update(t,
           "{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\","
           "\"text\":\".\"}}",
           out);
    ck_assert_uint_eq(json_array_size(out), 10);
    acp_turn_end(t, NULL, out);
    ck_assert_uint_eq(json_array_size(out), 11);
    ck_assert_str_eq(kind_at(out, 10), "MessageEvent");
    json_t *m = json_object_get(json_array_get(out, 10), "llm_message");
    ck_assert_str_eq(json_string_value(json_object_get(m, "role")), "assistant");
    ck_assert_str_eq(json_string_value(
                         json_object_get(json_array_get(json_object_get(m, "content"), 0), "text")),
                     "Done.");
    ck_assert_uint_eq(acp_turn_open_calls(t), 0);
    all_accepted(out);
    json_decref(out);
    acp_turn_free(t);
}
END_TEST

/* messageId splits messages; a thought alone at the end is a message of its
 * own; calls still open when the turn ends get errors the gate accepts. */
START_TEST(test_messages_and_turn_end)
{
    acp_turn *t = acp_turn_new("turn-2", NULL, NULL, NULL); /* random ids */
    json_t *out = json_array();
    update(t,
           "{\"sessionUpdate\":\"agent_message_chunk\",\"messageId\":\"m1\",\"content\":{"
           "\"type\":\"text\",\"text\":\"one\"}}",
           out);
    update(t,
           "{\"sessionUpdate\":\"agent_message_chunk\",\"messageId\":\"m2\",\"content\":{"
           "\"type\":\"text\",\"text\":\"two\"}}",
           out);
    ck_assert_uint_eq(json_array_size(out), 1);
    update(t, "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"c\",\"title\":\"t\"}", out);
    ck_assert_uint_eq(json_array_size(out), 3); /* "two", then the action */
    ck_assert_str_eq(field(out, 2, "tool_name"), "other");
    update(t,
           "{\"sessionUpdate\":\"agent_thought_chunk\",\"content\":{\"type\":\"text\","
           "\"text\":\"hmm\"}}",
           out);
    acp_turn_end(t, "the agent process exited", out);
    ck_assert_uint_eq(json_array_size(out), 5);
    ck_assert_str_eq(kind_at(out, 3), "MessageEvent");
    ck_assert_str_eq(kind_at(out, 4), "AgentErrorEvent");
    ck_assert_str_eq(field(out, 4, "error"), "the agent process exited");
    json_t *m = json_object_get(json_array_get(out, 3), "llm_message");
    ck_assert_str_eq(json_string_value(json_object_get(m, "reasoning_content")), "hmm");
    /* the message was sent while a call was pending: the gate says so */
    judged j;
    judge(out, &j);
    ck_assert_int_eq(j.kind[0], SEQ_ACCEPTED);
    ck_assert_int_eq(j.kind[1], SEQ_ACCEPTED);
    ck_assert_int_eq(j.kind[2], SEQ_ACCEPTED);
    ck_assert_int_eq(j.kind[3], SEQ_REJECTED);
    ck_assert_str_eq(j.rule[3], "interleaved_message");
    ck_assert_int_eq(j.kind[4], SEQ_ACCEPTED);
    json_decref(out);
    acp_turn_free(t);
}
END_TEST

/* Rule breakers reach the gate as they are, and it refuses them. */
START_TEST(test_rule_breakers)
{
    acp_turn *t = acp_turn_new("turn-3", NULL, NULL, NULL);
    json_t *out = json_array();
    update(t,
           "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"nope\",\"status\":"
           "\"in_progress\"}",
           out);
    ck_assert_uint_eq(json_array_size(out), 0);
    update(t,
           "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"nope\",\"status\":"
           "\"completed\"}",
           out);
    update(t,
           "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"c\",\"title\":\"x\","
           "\"status\":\"completed\"}",
           out);
    update(t, "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"c\",\"title\":\"x\"}", out);
    judged j;
    judge(out, &j);
    ck_assert_uint_eq(j.n, 4);
    ck_assert_str_eq(j.rule[0], "unmatched_tool_result");
    ck_assert_int_eq(j.kind[1], SEQ_ACCEPTED);
    ck_assert_int_eq(j.kind[2], SEQ_ACCEPTED);
    ck_assert_str_eq(j.rule[3], "duplicate_tool_call_id");
    json_decref(out);
    acp_turn_free(t);
}
END_TEST

START_TEST(test_bounds_and_bad_updates)
{
    acp_limits l = {.text_max = 10, .updates_max = 5, .value_max = 64};
    acp_turn *t = acp_turn_new("t", &l, NULL, NULL);
    json_t *out = json_array();
    char why[200];
    json_t *u = tj_json("{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\","
                        "\"text\":\"123456\"}}");
    ck_assert_int_eq(acp_turn_update(t, u, out, why, sizeof(why)), 0);
    ck_assert_int_eq(acp_turn_update(t, u, out, why, sizeof(why)), -E2BIG);
    ck_assert(strstr(why, "10 bytes") != NULL);
    json_decref(u);
    static const char *const bad[] = {
        "{\"content\":{}}",
        "{\"sessionUpdate\":\"tool_call\",\"title\":\"x\"}",
        "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"x\"}",
        "{\"sessionUpdate\":\"tool_call_update\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        u = tj_json(bad[i]);
        ck_assert_int_eq(acp_turn_update(t, u, out, why, sizeof(why)), -EINVAL);
        json_decref(u);
    }
    ck_assert_uint_eq(json_array_size(out), 0); /* nothing half-made */
    u = tj_json("{\"sessionUpdate\":\"usage_update\",\"used\":1,\"size\":2}");
    ck_assert_int_eq(acp_turn_update(t, u, out, why, sizeof(why)), -E2BIG); /* the 6th */
    ck_assert(strstr(why, "5 session updates") != NULL);
    json_decref(u);
    acp_turn_free(t);
    /* a big rawInput is kept as a note of its size */
    t = acp_turn_new("t", &l, NULL, NULL);
    update(t,
           "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"c\",\"title\":\"x\",\"rawInput\":{"
           "\"data\":\"0123456789012345678901234567890123456789012345678901234567890123456789\"}}",
           out);
    json_t *ri = json_object_get(json_object_get(json_array_get(out, 0), "action"), "raw_input");
    ck_assert(json_is_true(json_object_get(ri, "truncated")));
    json_decref(out);
    acp_turn_free(t);
}
END_TEST

START_TEST(test_stop_reasons)
{
    const char *why;
    ck_assert_str_eq(acp_stop_status("end_turn", &why), "finished");
    ck_assert_ptr_null(acp_stop_status("cancelled", &why));
    ck_assert_str_eq(acp_stop_status("refusal", &why), "error");
    ck_assert(strstr(why, "refusal") != NULL);
    ck_assert_str_eq(acp_stop_status("max_tokens", &why), "error");
    ck_assert_str_eq(acp_stop_status("max_turn_requests", &why), "error");
    ck_assert_str_eq(acp_stop_status("bogus", &why), "error");
    ck_assert_str_eq(acp_stop_status(NULL, &why), "error");
}
END_TEST

START_TEST(test_prompts)
{
    json_t *e =
        tj_json("{\"kind\":\"MessageEvent\",\"source\":\"user\",\"llm_message\":{\"role\":"
                "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"},{\"type\":\"image\","
                "\"image_urls\":[\"https://x/y.png\"]}]},\"extended_content\":[{\"type\":"
                "\"text\",\"text\":\"ctx\"}]}");
    json_t *p = acp_prompt_of(e);
    ck_assert_uint_eq(json_array_size(p), 3);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(p, 0), "text")), "hi");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(p, 1), "type")),
                     "resource_link");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(p, 2), "text")), "ctx");
    json_decref(p);
    json_decref(e);
    e = tj_json("{\"kind\":\"MessageEvent\",\"source\":\"agent\",\"llm_message\":{\"role\":"
                "\"assistant\",\"content\":[]}}");
    ck_assert_ptr_null(acp_prompt_of(e));
    json_decref(e);
    e = tj_json("{\"kind\":\"MessageEvent\",\"source\":\"environment\",\"llm_message\":{\"role\":"
                "\"user\",\"content\":[]}}"); /* a nudge, even empty */
    p = acp_prompt_of(e);
    ck_assert_uint_eq(json_array_size(p), 1);
    json_decref(p);
    json_decref(e);
    e = tj_json("{\"kind\":\"PauseEvent\",\"source\":\"user\"}");
    ck_assert_ptr_null(acp_prompt_of(e));
    json_decref(e);
}
END_TEST

START_TEST(test_mask)
{
    json_t *v =
        tj_json("{\"a\":\"the key is s3cr3t-v4lue, s3cr3t-v4lue!\",\"b\":[\"xs3cr3t-v4luex\","
                "{\"s3cr3t-v4lue\":\"t0k\"}],\"c\":7}");
    const char *const secrets[] = {"s3cr3t-v4lue", "t0k", ""};
    acp_mask(v, secrets, 3);
    ck_assert_str_eq(json_string_value(json_object_get(v, "a")),
                     "the key is <secret-hidden>, <secret-hidden>!");
    json_t *b = json_object_get(v, "b");
    ck_assert_str_eq(json_string_value(json_array_get(b, 0)), "x<secret-hidden>x");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(b, 1), "s3cr3t-v4lue")),
                     "<secret-hidden>");
    json_decref(v);
}
END_TEST

/* ------------------------------------------------------------ registry --- */

START_TEST(test_split_words)
{
    static const struct {
        const char *line;
        const char *words[6];
    } ok[] = {
        {"node agent.mjs echo", {"node", "agent.mjs", "echo"}},
        {"  a\tb  ", {"a", "b"}},
        {"'a b' \"c d\"", {"a b", "c d"}},
        {"a\\ b", {"a b"}},
        {"\"x\\\"y\\$z\"", {"x\"y$z"}},
        {"'$HOME' \"$HOME\"", {"$HOME", "$HOME"}}, /* no expansion */
        {"pre'mid'\"post\"", {"premidpost"}},
        {"''", {""}},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char **v, err[100];
        ck_assert_msg(acp_split_words(ok[i].line, &v, err, sizeof(err)) == 0, "%s: %s", ok[i].line,
                      err);
        size_t n = 0;
        for (; v[n] != NULL; n++)
            ck_assert_str_eq(v[n], ok[i].words[n]);
        ck_assert_ptr_null(ok[i].words[n]);
        acp_free_strv(v);
    }
    static const char *const bad[] = {"", "   ", "'open", "\"open", "a 'b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char **v, err[100] = "";
        ck_assert_int_eq(acp_split_words(bad[i], &v, err, sizeof(err)), -1);
        ck_assert(err[0] != '\0');
    }
}
END_TEST

START_TEST(test_registry)
{
    acp_registry r = {0};
    char err[300];
    ck_assert_int_eq(
        acp_registry_add_arg(&r, "demo=parley demo-agent --chunks 2", err, sizeof(err)), 0);
    ck_assert_int_eq(acp_registry_add_arg(&r, "demo=other", err, sizeof(err)), -1); /* twice */
    ck_assert_int_eq(acp_registry_add_arg(&r, "bad name=x", err, sizeof(err)), -1);
    ck_assert_int_eq(acp_registry_add_arg(&r, "noequals", err, sizeof(err)), -1);
    ck_assert_int_eq(acp_registry_add_arg(&r, "empty=", err, sizeof(err)), -1);
    const char *file = "{\"claude\":{\"command\":[\"npx\",\"claude-code-acp\"],\"env\":{"
                       "\"A\":\"1\"},\"cwd\":\"/srv\"}}";
    ck_assert_int_eq(acp_registry_add_json(&r, file, strlen(file), err, sizeof(err)), 0);
    static const char *const bad[] = {"[]",
                                      "{\"x\":{}}",
                                      "{\"x\":{\"command\":\"ls\"}}",
                                      "{\"x\":{\"command\":[\"ls\"],\"env\":{\"A=B\":\"1\"}}}",
                                      "{\"x\":{\"command\":[\"ls\"],\"cwd\":\"rel\"}}",
                                      "{\"x\":{\"command\":[\"ls\"],\"colour\":1}}",
                                      "not json"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(acp_registry_add_json(&r, bad[i], strlen(bad[i]), err, sizeof(err)) == -1,
                      "accepted %s", bad[i]);
    const acp_agent_spec *a = acp_registry_find(&r, "demo");
    ck_assert_str_eq(a->argv[0], "parley");
    ck_assert_str_eq(a->argv[3], "2");
    ck_assert_ptr_null(a->argv[4]);
    a = acp_registry_find(&r, "claude");
    ck_assert_str_eq(a->env[0], "A=1");
    ck_assert_str_eq(a->cwd, "/srv");
    ck_assert_int_eq(acp_registry_set_default(&r, "nope", err, sizeof(err)), -1);
    /* a conversation's agent */
    json_t *m = tj_json("{}");
    ck_assert_int_eq(acp_registry_meta(&r, m, NULL, err, sizeof(err)), 0);
    ck_assert_ptr_null(json_object_get(m, "agent")); /* no default: no agent */
    ck_assert_int_eq(acp_registry_set_default(&r, "demo", err, sizeof(err)), 0);
    ck_assert_int_eq(acp_registry_meta(&r, m, NULL, err, sizeof(err)), 0);
    ck_assert_str_eq(json_string_value(json_array_get(
                         json_object_get(json_object_get(m, "agent"), "acp_command"), 0)),
                     "demo");
    json_decref(m);
    static const char *const good[] = {
        "{\"agent\":{\"kind\":\"ACPAgent\",\"acp_command\":[\"claude\"]}}",
        "{\"agent\":{\"kind\":\"Agent\",\"llm\":{\"model\":\"m\"},\"tools\":[]}}",
        "{\"agent\":{\"kind\":\"Agent\"}}",
        "{\"agent_settings\":{\"agent_kind\":\"acp\"}}",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        m = tj_json(good[i]);
        ck_assert_msg(acp_registry_meta(&r, m, NULL, err, sizeof(err)) == 0, "%s: %s", good[i],
                      err);
        json_decref(m);
    }
    static const char *const refused[] = {
        "{\"agent\":{\"acp_command\":[\"demo\"]}}", /* no kind */
        "{\"agent\":\"demo\"}",
        "{\"agent\":{\"kind\":\"Agent\",\"llm\":{}}}", /* no model */
        "{\"agent\":{\"kind\":\"Agent\",\"tools\":{}}}",
        "{\"agent\":{\"kind\":\"Nope\"}}",
        "{\"agent\":{\"kind\":\"ACPAgent\",\"acp_command\":[\"rm\",\"-rf\"]}}",
        "{\"agent\":{\"kind\":\"ACPAgent\",\"acp_command\":[\"unknown\"]}}",
        "{\"agent\":{\"kind\":\"ACPAgent\"}}",
        "{\"agent_settings\":{\"agent_kind\":\"invalid\"}}",
        "{\"agent_settings\":\"not-a-settings-object\"}",
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        m = tj_json(refused[i]);
        err[0] = '\0';
        ck_assert_msg(acp_registry_meta(&r, m, NULL, err, sizeof(err)) == -1, "accepted %s",
                      refused[i]);
        ck_assert(err[0] != '\0');
        json_decref(m);
    }
    m = tj_json("{}");
    ck_assert_int_eq(acp_registry_meta(&r, m, "nope", err, sizeof(err)), -1);
    ck_assert(strstr(err, "demo, claude") != NULL); /* the message lists what there is */
    json_decref(m);
    acp_registry_clear(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("acp_map");
    TCase *tc = tcase_create("acp_map");
    tcase_add_test(tc, test_rpc_lines);
    tcase_add_test(tc, test_full_turn);
    tcase_add_test(tc, test_messages_and_turn_end);
    tcase_add_test(tc, test_rule_breakers);
    tcase_add_test(tc, test_bounds_and_bad_updates);
    tcase_add_test(tc, test_stop_reasons);
    tcase_add_test(tc, test_prompts);
    tcase_add_test(tc, test_mask);
    tcase_add_test(tc, test_split_words);
    tcase_add_test(tc, test_registry);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
