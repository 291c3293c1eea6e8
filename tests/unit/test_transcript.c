/*
 * test_transcript.c - agent transcripts as parley events
 * (actors/transcript.h): the Claude and OpenCode inputs of
 * ../shared/vectors/reducer converted, and the events played through the
 * offline gate (actors/replay.h) the way `parley import` checks them
 * first: a well-formed transcript commits every event, in order, with no
 * violation; ids and times are the source's, and stable; bad lines are
 * refused alone, with nothing made.
 */
#include "actors/replay.h"
#include "actors/transcript.h"
#include "support_json.h"

#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *vector(const char *name)
{
    const char *base = getenv("PARLEY_SHARED_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/vectors/reducer/%s.json", base ? base : PARLEY_SHARED_DIR,
             name);
    json_error_t e;
    json_t *v = json_load_file(path, 0, &e);
    ck_assert_msg(v != NULL, "cannot read %s: %s", path, e.text);
    return v;
}

/* The records of a Claude transcript's lines (numbered from 1). */
static json_t *claude_records(const json_t *lines)
{
    tr_claude *c = tr_claude_new();
    json_t *out = json_array();
    size_t i;
    json_t *l;
    char why[256];
    json_array_foreach(lines, i, l)
    {
        int rc = tr_claude_line(c, l, (long)i + 1, out, why, sizeof(why));
        ck_assert_msg(rc == 0, "line %zu: %s", i + 1, why);
    }
    ck_assert_int_eq(tr_claude_end(c, out), 0);
    tr_claude_free(c);
    return out;
}

/* ------------------------------------------------------- the offline gate --- */

typedef struct judged {
    size_t offered, accepted, observed, refused; /* refused: rejected, deferred, held, invalid */
    char first[512];                             /* the first refusal: "line N: RULE" */
    const json_t *recs;
} judged;

static void decided(void *ctx, const ev *e, const seq_verdict *v, seq_was was, uint64_t index,
                    void *tag)
{
    (void)index;
    judged *j = ctx;
    if (was == SEQ_OWN || tag == NULL)
        return;
    size_t k = (size_t)(uintptr_t)tag - 1;
    if (v->kind == SEQ_ACCEPTED && v->rule == GATE_OK && was == SEQ_NEW) {
        j->accepted++;
        return;
    }
    if (v->kind == SEQ_ACCEPTED && v->rule != GATE_OK)
        j->observed++;
    else
        j->refused++;
    if (j->first[0] == '\0') {
        json_t *r = json_array_get(j->recs, k);
        snprintf(j->first, sizeof(j->first), "line %lld: %s %s (%s)",
                 (long long)json_integer_value(json_object_get(r, "line")), ev_kind_name(e->kind),
                 gate_rule_name(v->rule), v->detail ? v->detail : "");
    }
}

/* Play the main conversation's records through the gate. */
static judged play(const json_t *recs, int policy)
{
    judged j = {.recs = recs};
    replay_opts ro = {.seq = {.policy = policy}, .stuck_off = true};
    replay_hooks h = {.ctx = &j, .decided = decided};
    replay *rp = replay_new(&ro, &h);
    ck_assert_ptr_nonnull(rp);
    size_t i;
    json_t *r;
    json_array_foreach(recs, i, r)
    {
        if (json_object_get(r, "sub") != NULL)
            continue;
        json_t *e = json_deep_copy(json_object_get(r, "event"));
        ev x;
        char err[256];
        ck_assert_msg(seq_event(e, &x, err, sizeof(err)) == 0, "record %zu is not an event: %s", i,
                      err);
        json_decref(e);
        j.offered++;
        replay_offer(rp, &x, (void *)(uintptr_t)(i + 1));
    }
    replay_end(rp);
    replay_free(rp);
    return j;
}

static void clean(const char *name, const json_t *recs)
{
    judged j = play(recs, CONV_REJECT);
    ck_assert_msg(j.refused == 0 && j.observed == 0, "%s: %s", name, j.first);
    ck_assert_uint_eq(j.accepted, j.offered);
}

/* Every Claude vector of a well-formed session goes through the gate. */
START_TEST(test_claude_vectors_clean)
{
    static const char *const names[] = {
        "claude_empty_text",           "claude_fixture_stream_finalized",
        "claude_fixture_transcript",   "claude_images",
        "claude_interrupted",          "claude_long_session",
        "claude_parallel_tools",       "claude_skill_load",
        "claude_stream_basic",         "claude_subagent",
        "claude_subagent_unfinished",  "claude_system_lines",
        "claude_text_turns",           "claude_thinking",
        "claude_thinking_split_lines", "claude_tool_error",
        "claude_tool_use_result",      NULL};
    for (const char *const *n = names; *n != NULL; n++) {
        json_t *v = vector(*n);
        json_t *in = json_object_get(v, "input");
        json_t *recs = claude_records(json_object_get(in, "main"));
        clean(*n, recs);
        json_decref(recs);
        /* a subagent's own transcript is a conversation of its own */
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(in, "subagents"), i, s)
        {
            recs = claude_records(json_object_get(s, "transcript"));
            json_t *main_only = json_array();
            size_t k;
            json_t *r;
            json_array_foreach(recs, k, r)
            {
                json_t *copy = json_deep_copy(r);
                json_object_del(copy, "sub");
                json_array_append_new(main_only, copy);
            }
            clean(*n, main_only);
            json_decref(main_only);
            json_decref(recs);
        }
        json_decref(v);
    }
}
END_TEST

/* A result for a call never made is refused, at its line; under observe
 * it is recorded. */
START_TEST(test_claude_unknown_result)
{
    json_t *v = vector("claude_unknown_tool_result");
    json_t *recs = claude_records(json_object_get(json_object_get(v, "input"), "main"));
    judged j = play(recs, CONV_REJECT);
    ck_assert_uint_gt(j.refused, 0);
    ck_assert_msg(strstr(j.first, "line 2: ObservationEvent unmatched_tool_result") == j.first,
                  "%s", j.first);
    j = play(recs, CONV_OBSERVE);
    ck_assert_uint_eq(j.refused, 0);
    ck_assert_uint_gt(j.observed, 0);
    json_decref(recs);
    json_decref(v);
}
END_TEST

static json_t *ev_at(const json_t *recs, size_t i)
{
    return json_object_get(json_array_get(recs, i), "event");
}

static const char *s_at(const json_t *recs, size_t i, const char *key)
{
    return json_string_value(json_object_get(ev_at(recs, i), key));
}

/* Ids, times and call ids are the source's; one API message is one turn. */
START_TEST(test_claude_ids_kept)
{
    json_t *v = vector("claude_parallel_tools");
    json_t *lines = json_object_get(json_object_get(v, "input"), "main");
    json_t *recs = claude_records(lines);
    ck_assert_uint_eq(json_array_size(recs), 7);
    for (size_t i = 0; i < 7; i++) {
        json_t *l = json_array_get(lines, i);
        ck_assert_str_eq(s_at(recs, i, "id"), json_string_value(json_object_get(l, "uuid")));
        ck_assert_str_eq(s_at(recs, i, "timestamp"),
                         json_string_value(json_object_get(l, "timestamp")));
        ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(recs, i), "line")),
                         (json_int_t)i + 1);
    }
    ck_assert_str_eq(s_at(recs, 2, "kind"), "ActionEvent");
    ck_assert_str_eq(s_at(recs, 3, "kind"), "ActionEvent");
    ck_assert_str_eq(s_at(recs, 2, "llm_response_id"), "msg_pt_01");
    ck_assert_str_eq(s_at(recs, 3, "llm_response_id"), "msg_pt_01");
    ck_assert_str_eq(s_at(recs, 4, "kind"), "ObservationEvent");
    /* the result names its call and the action that made it */
    const char *call = s_at(recs, 4, "tool_call_id");
    size_t a = strcmp(call, s_at(recs, 2, "tool_call_id")) == 0 ? 2 : 3;
    ck_assert_str_eq(s_at(recs, 4, "action_id"), s_at(recs, a, "id"));
    ck_assert_str_eq(s_at(recs, 4, "tool_name"), s_at(recs, a, "tool_name"));
    /* the same transcript again: the same events */
    json_t *again = claude_records(lines);
    ck_assert(json_equal(recs, again));
    json_decref(again);
    json_decref(recs);
    json_decref(v);
}
END_TEST

/* A line that makes several events: the line's id for the main one,
 * "<uuid>-<k>" for the others. */
START_TEST(test_claude_derived_ids)
{
    json_t *lines = tj_json("["
                            "{\"type\":\"assistant\",\"uuid\":\"u1\",\"timestamp\":\"T1\","
                            " \"message\":{\"id\":\"m1\",\"content\":["
                            "  {\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"s\"},"
                            "  {\"type\":\"text\",\"text\":\"hi\"},"
                            "  {\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"Bash\","
                            "   \"input\":{\"command\":\"ls\",\"description\":\"List\"}}]}},"
                            "{\"type\":\"user\",\"uuid\":\"u2\",\"timestamp\":\"T2\","
                            " \"message\":{\"content\":\"stop\"}}"
                            "]");
    json_t *recs = claude_records(lines);
    ck_assert_uint_eq(json_array_size(recs), 5);
    ck_assert_str_eq(s_at(recs, 0, "id"), "u1");
    ck_assert_str_eq(s_at(recs, 1, "id"), "u1-2");
    ck_assert_str_eq(s_at(recs, 2, "id"), "u1-3");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(ev_at(recs, 0), "llm_message"), "reasoning_content")),
                     "hmm");
    json_t *action = json_object_get(ev_at(recs, 2), "action");
    ck_assert_str_eq(json_string_value(json_object_get(action, "kind")), "BashAction");
    ck_assert_str_eq(json_string_value(json_object_get(action, "command")), "ls");
    ck_assert_str_eq(s_at(recs, 2, "summary"), "List");
    /* the user spoke while t1 had no result: it is closed first */
    ck_assert_str_eq(s_at(recs, 3, "kind"), "AgentErrorEvent");
    ck_assert_str_eq(s_at(recs, 3, "tool_call_id"), "t1");
    ck_assert_str_eq(s_at(recs, 3, "id"), "u2-1");
    ck_assert_str_eq(s_at(recs, 4, "id"), "u2");
    ck_assert_str_eq(s_at(recs, 4, "timestamp"), "T2");
    clean("derived", recs);
    json_decref(recs);
    json_decref(lines);
}
END_TEST

/* A bad line is refused alone: nothing appended, nothing remembered. */
START_TEST(test_claude_bad_lines)
{
    tr_claude *c = tr_claude_new();
    json_t *out = json_array();
    char why[256];
    static const char *const bad[] = {
        "[1]",
        "{\"uuid\":\"x\"}",
        "{\"type\":\"mystery\",\"uuid\":\"x\"}",
        "{\"type\":\"user\",\"uuid\":\"x\"}",
        "{\"type\":\"user\",\"uuid\":\"x\",\"message\":{\"content\":7}}",
        "{\"type\":\"assistant\",\"uuid\":\"x\",\"message\":{\"content\":[{\"type\":\"tool_use\","
        "\"name\":\"Bash\"}]}}",
        "{\"type\":\"user\",\"uuid\":\"x\",\"message\":{\"content\":[{\"type\":\"tool_result\"}]}}",
        NULL};
    static const char *const says[] = {
        "not a JSON object", "without a type",  "unknown record type 'mystery'",
        "without a message", "without content", "has no id",
        "has no tool_use_id"};
    for (size_t i = 0; bad[i] != NULL; i++) {
        json_t *l = tj_json(bad[i]);
        ck_assert_int_eq(tr_claude_line(c, l, 1, out, why, sizeof(why)), -EINVAL);
        ck_assert_msg(strstr(why, says[i]) != NULL, "%s: %s", bad[i], why);
        ck_assert_uint_eq(json_array_size(out), 0);
        json_decref(l);
    }
    /* lines that say nothing make nothing, and are fine */
    json_t *quiet = tj_json("{\"type\":\"summary\",\"summary\":\"x\"}");
    ck_assert_int_eq(tr_claude_line(c, quiet, 2, out, why, sizeof(why)), 0);
    ck_assert_uint_eq(json_array_size(out), 0);
    json_decref(quiet);
    json_decref(out);
    tr_claude_free(c);
}
END_TEST

START_TEST(test_detect)
{
    json_t *a = tj_json("{\"type\":\"user\",\"message\":{}}");
    json_t *b = tj_json("{\"info\":{},\"messages\":[]}");
    json_t *c = tj_json("{\"kind\":\"MessageEvent\",\"type\":\"user\"}");
    json_t *d = tj_json("{\"steps\":[]}");
    json_t *e = tj_json("{\"type\":\"brand-new\",\"sessionId\":\"s\"}");
    ck_assert_int_eq(tr_detect(a), TR_CLAUDE);
    ck_assert_int_eq(tr_detect(b), TR_OPENCODE);
    ck_assert_int_eq(tr_detect(c), TR_NONE);
    ck_assert_int_eq(tr_detect(d), TR_NONE);
    ck_assert_int_eq(tr_detect(e), TR_CLAUDE);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(d);
    json_decref(e);
}
END_TEST

/* ---------------------------------------------------------------- OpenCode --- */

static json_t *opencode_records(const json_t *x)
{
    json_t *out = json_array();
    char why[256];
    int rc = tr_opencode(x, out, why, sizeof(why));
    ck_assert_msg(rc == 0, "%s", why);
    return out;
}

START_TEST(test_opencode_vectors_clean)
{
    static const char *const names[] = {"opencode_fixture_transcript",
                                        "opencode_subagent_transcript", "opencode_text_turns",
                                        "opencode_tools", NULL};
    for (const char *const *n = names; *n != NULL; n++) {
        json_t *v = vector(*n);
        json_t *in = json_object_get(v, "input");
        json_t *recs = opencode_records(json_object_get(in, "main"));
        ck_assert_uint_gt(json_array_size(recs), 0);
        clean(*n, recs);
        json_decref(recs);
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(in, "subagents"), i, s)
        {
            recs = opencode_records(json_object_get(s, "transcript"));
            clean(*n, recs);
            json_decref(recs);
        }
        json_decref(v);
    }
}
END_TEST

START_TEST(test_opencode_ids_kept)
{
    json_t *v = vector("opencode_tools");
    json_t *recs = opencode_records(json_object_get(json_object_get(v, "input"), "main"));
    ck_assert_str_eq(s_at(recs, 0, "id"), "msg_2a1b2c3d0001");
    ck_assert_str_eq(s_at(recs, 0, "timestamp"), "2025-06-03T14:00:00.700Z");
    ck_assert_str_eq(s_at(recs, 1, "id"), "prt_2a1b2c3d0005");
    ck_assert_str_eq(s_at(recs, 2, "kind"), "ActionEvent");
    ck_assert_str_eq(s_at(recs, 2, "tool_call_id"), "toolu_oc_read_01");
    ck_assert_str_eq(s_at(recs, 2, "llm_response_id"), "msg_2a1b2c3d0003");
    ck_assert_str_eq(s_at(recs, 3, "id"), "prt_2a1b2c3d0006-result");
    ck_assert_str_eq(s_at(recs, 3, "action_id"), "prt_2a1b2c3d0006");
    ck_assert_str_eq(s_at(recs, 3, "timestamp"), "2025-06-03T14:00:03.104Z");
    json_t *r3 = json_array_get(recs, 3);
    ck_assert_int_eq(json_integer_value(json_object_get(r3, "message")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(r3, "part")), 3);
    json_decref(recs);
    json_decref(v);
}
END_TEST

START_TEST(test_opencode_bad)
{
    static const char *const bad[] = {
        "{\"info\":{}}",
        "{\"info\":{},\"messages\":[{\"info\":{\"id\":\"m\",\"role\":\"robot\"},\"parts\":[]}]}",
        "{\"info\":{},\"messages\":[{\"info\":{\"id\":\"m\",\"role\":\"assistant\"},\"parts\":"
        "[{\"id\":\"p\",\"type\":\"tool\",\"tool\":\"bash\"}]}]}",
        NULL};
    for (size_t i = 0; bad[i] != NULL; i++) {
        json_t *x = tj_json(bad[i]), *out = json_array();
        char why[256];
        ck_assert_int_eq(tr_opencode(x, out, why, sizeof(why)), -EINVAL);
        ck_assert_uint_eq(json_array_size(out), 0);
        json_decref(out);
        json_decref(x);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("transcript");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_claude_vectors_clean);
    tcase_add_test(tc, test_claude_unknown_result);
    tcase_add_test(tc, test_claude_ids_kept);
    tcase_add_test(tc, test_claude_derived_ids);
    tcase_add_test(tc, test_claude_bad_lines);
    tcase_add_test(tc, test_detect);
    tcase_add_test(tc, test_opencode_vectors_clean);
    tcase_add_test(tc, test_opencode_ids_kept);
    tcase_add_test(tc, test_opencode_bad);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
