/*
 * test_acp_map_out.c - a conversation's events as the session updates an
 * editor gets (acp_map.h, acp_out). The round trip is the point: a hosted
 * agent's updates, made events by acp_turn_*, made updates again, give the
 * editor what the agent sent. Upstream's events map as the OpenHands CLI
 * maps them (spec/acp-reducer.md A'), and statuses end turns with the
 * right stop reason.
 */
#include "actors/acp_map.h"
#include "support_json.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The updates for one event (given as JSON text), appended to out. */
static const char *feed(acp_out *o, const char *event, json_t *out)
{
    json_t *e = tj_json(event);
    const char *stop = NULL;
    ck_assert_int_eq(acp_out_event(o, e, out, &stop), 0);
    json_decref(e);
    return stop;
}

static json_t *at(json_t *out, size_t i)
{
    json_t *u = json_array_get(out, i);
    ck_assert_msg(u != NULL, "no update %zu (of %zu)", i, json_array_size(out));
    return u;
}

static const char *S(json_t *out, size_t i, const char *k)
{
    return json_string_value(json_object_get(at(out, i), k));
}

/* The text of a ToolCallContent list's first item, or of a chunk. */
static const char *content_text(json_t *u)
{
    json_t *c = json_object_get(u, "content");
    if (json_is_array(c))
        c = json_object_get(json_array_get(c, 0), "content");
    return json_string_value(json_object_get(c, "text"));
}

static void equal_json(json_t *got, const char *want)
{
    tj_equal(got, tj_json(want));
}

/* ---------------------------------------------------------- round trip --- */

static const char *const agent_turn[] = {
    "{\"sessionUpdate\":\"agent_thought_chunk\",\"content\":{\"type\":\"text\",\"text\":"
    "\"Looking at \"}}",
    "{\"sessionUpdate\":\"agent_thought_chunk\",\"content\":{\"type\":\"text\",\"text\":"
    "\"main.c\"}}",
    "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"call_1\",\"title\":\"Reading main.c\","
    "\"kind\":\"read\",\"status\":\"pending\",\"locations\":[{\"path\":\"/w/main.c\",\"line\":1}],"
    "\"rawInput\":{\"path\":\"/w/main.c\"}}",
    "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"call_1\",\"status\":"
    "\"in_progress\"}",
    "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"call_1\",\"status\":\"completed\","
    "\"content\":[{\"type\":\"content\",\"content\":{\"type\":\"text\",\"text\":\"int main(){}\"}}"
    "],\"rawOutput\":{\"ok\":true,\"bytes\":12}}",
    "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"call_2\",\"title\":\"Editing main.c\","
    "\"kind\":\"edit\",\"status\":\"completed\",\"content\":[{\"type\":\"diff\",\"path\":"
    "\"/w/main.c\",\"oldText\":\"a\",\"newText\":\"b\"}]}",
    "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"call_3\",\"title\":\"$ make\","
    "\"kind\":\"execute\",\"rawInput\":{\"command\":\"make\"}}",
    "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"call_3\",\"status\":\"failed\","
    "\"content\":[{\"type\":\"content\",\"content\":{\"type\":\"text\",\"text\":\"no rule\"}}]}",
    "{\"sessionUpdate\":\"plan\",\"entries\":[{\"content\":\"Fix bug\",\"priority\":\"high\","
    "\"status\":\"completed\"},{\"content\":\"Test\",\"priority\":\"low\",\"status\":"
    "\"pending\"}]}",
    "{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"Do\"}}",
    "{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"ne.\"}}",
};

/* The updates the editor gets for the agent's turn, after the user's
 * message and the run, as the log has them. */
static json_t *through_parley(acp_out *o, const char **stop)
{
    acp_turn *t = acp_turn_new("turn-1", NULL, NULL, NULL);
    json_t *events = json_array();
    for (size_t i = 0; i < sizeof(agent_turn) / sizeof(agent_turn[0]); i++) {
        json_t *u = tj_json(agent_turn[i]);
        char why[200] = "";
        ck_assert_msg(acp_turn_update(t, u, events, why, sizeof(why)) == 0, "%s", why);
        json_decref(u);
    }
    acp_turn_end(t, NULL, events);
    acp_turn_free(t);
    json_t *out = json_array();
    feed(o,
         "{\"kind\":\"MessageEvent\",\"id\":\"u1\",\"source\":\"user\",\"llm_message\":{\"role\":"
         "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"fix the bug\"}]}}",
         out);
    feed(o,
         "{\"kind\":\"ConversationStateUpdateEvent\",\"key\":\"execution_status\",\"value\":"
         "\"running\"}",
         out);
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e)
    {
        const char *s = NULL;
        ck_assert_int_eq(acp_out_event(o, e, out, &s), 0);
        ck_assert_ptr_null(s);
    }
    json_decref(events);
    *stop = feed(o,
                 "{\"kind\":\"ConversationStateUpdateEvent\",\"key\":\"execution_status\","
                 "\"value\":\"finished\"}",
                 out);
    return out;
}

START_TEST(test_round_trip)
{
    acp_out *o = acp_out_new(NULL);
    const char *stop = NULL;
    json_t *out = through_parley(o, &stop);
    ck_assert_str_eq(stop, "end_turn");
    size_t n = 0;
    /* the user's message, which upstream leaves out */
    ck_assert_str_eq(S(out, n, "sessionUpdate"), "user_message_chunk");
    ck_assert_str_eq(content_text(at(out, n)), "fix the bug");
    ck_assert_str_eq(S(out, n++, "messageId"), "u1");
    /* the thought, whole, then the call as announced */
    ck_assert_str_eq(S(out, n, "sessionUpdate"), "agent_thought_chunk");
    ck_assert_str_eq(content_text(at(out, n++)), "Looking at main.c");
    equal_json(at(out, n++),
               "{\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"call_1\",\"title\":\"Reading "
               "main.c\",\"kind\":\"read\",\"status\":\"in_progress\",\"locations\":[{\"path\":"
               "\"/w/main.c\",\"line\":1}],\"rawInput\":{\"path\":\"/w/main.c\"}}");
    equal_json(at(out, n++), "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"call_1\","
                             "\"title\":\"Reading main.c\",\"status\":\"completed\",\"content\":[{"
                             "\"type\":\"content\",\"content\":{\"type\":\"text\",\"text\":\"int "
                             "main(){}\"}}],\"rawOutput\":{\"ok\":true,\"bytes\":12}}");
    /* done at once: announced, then its result, the diff both times */
    const char *diff = "[{\"type\":\"diff\",\"path\":\"/w/main.c\",\"oldText\":\"a\",\"newText\":"
                       "\"b\"}]";
    ck_assert_str_eq(S(out, n, "sessionUpdate"), "tool_call");
    ck_assert_str_eq(S(out, n, "toolCallId"), "call_2");
    ck_assert_str_eq(S(out, n, "kind"), "edit");
    equal_json(json_object_get(at(out, n++), "content"), diff);
    ck_assert_str_eq(S(out, n, "sessionUpdate"), "tool_call_update");
    ck_assert_str_eq(S(out, n, "status"), "completed");
    equal_json(json_object_get(at(out, n++), "content"), diff);
    /* the failed call */
    ck_assert_str_eq(S(out, n, "toolCallId"), "call_3");
    ck_assert_str_eq(S(out, n, "title"), "$ make");
    ck_assert_str_eq(S(out, n, "kind"), "execute");
    equal_json(json_object_get(at(out, n++), "rawInput"), "{\"command\":\"make\"}");
    equal_json(at(out, n++), "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"call_3\","
                             "\"status\":\"failed\",\"content\":[{\"type\":\"content\","
                             "\"content\":{\"type\":\"text\",\"text\":\"no rule\"}}]}");
    /* the plan, as sent */
    equal_json(at(out, n++),
               "{\"sessionUpdate\":\"plan\",\"entries\":[{\"content\":\"Fix bug\",\"priority\":"
               "\"high\",\"status\":\"completed\"},{\"content\":\"Test\",\"priority\":\"low\","
               "\"status\":\"pending\"}]}");
    /* the reply, whole */
    ck_assert_str_eq(S(out, n, "sessionUpdate"), "agent_message_chunk");
    ck_assert_str_eq(content_text(at(out, n++)), "Done.");
    ck_assert_uint_eq(json_array_size(out), n);
    json_decref(out);
    acp_out_free(o);
}
END_TEST

/* session/load in a fresh process: the same log, the same updates. */
START_TEST(test_replay_is_the_same)
{
    acp_out *a = acp_out_new(NULL), *b = acp_out_new(NULL);
    const char *s1, *s2;
    json_t *x = through_parley(a, &s1), *y = through_parley(b, &s2);
    /* the message ids are the events' (random here): compare the rest */
    ck_assert_uint_eq(json_array_size(x), json_array_size(y));
    size_t i;
    json_t *u;
    json_array_foreach(x, i, u)
    {
        json_object_del(u, "messageId");
        json_object_del(json_array_get(y, i), "messageId");
        ck_assert(json_equal(u, json_array_get(y, i)));
    }
    json_decref(x);
    json_decref(y);
    acp_out_free(a);
    acp_out_free(b);
}
END_TEST

/* ------------------------------------------------------------ upstream --- */

START_TEST(test_upstream_events)
{
    acp_out *o = acp_out_new(NULL);
    json_t *out = json_array();
    /* a terminal call: reasoning and thought first, the command as title */
    feed(o,
         "{\"kind\":\"ActionEvent\",\"id\":\"a1\",\"source\":\"agent\",\"reasoning_content\":"
         "\"think hard\",\"thought\":[{\"type\":\"text\",\"text\":\"Let me look.\"}],\"action\":{"
         "\"command\":\"ls\\ntests/\",\"is_input\":false,\"kind\":\"TerminalAction\"},"
         "\"tool_name\":\"terminal\",\"tool_call_id\":\"t1\",\"tool_call\":{\"id\":\"t1\","
         "\"name\":\"terminal\",\"arguments\":\"{}\",\"origin\":\"completion\"},"
         "\"llm_response_id\":\"r1\",\"summary\":\" list\\nfiles \"}",
         out);
    ck_assert_uint_eq(json_array_size(out), 3);
    ck_assert_str_eq(content_text(at(out, 0)), "think hard");
    ck_assert_str_eq(content_text(at(out, 1)), "Let me look.");
    ck_assert_str_eq(S(out, 2, "sessionUpdate"), "tool_call");
    ck_assert_str_eq(S(out, 2, "title"), "list files: $ ls tests/");
    ck_assert_str_eq(S(out, 2, "kind"), "execute");
    ck_assert_str_eq(S(out, 2, "status"), "in_progress");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(at(out, 2), "rawInput"), "command")),
        "ls\ntests/");
    ck_assert_ptr_null(json_object_get(at(out, 2), "locations"));
    feed(o,
         "{\"kind\":\"ObservationEvent\",\"id\":\"o1\",\"tool_name\":\"terminal\","
         "\"tool_call_id\":\"t1\",\"action_id\":\"a1\",\"observation\":{\"content\":[{\"type\":"
         "\"text\",\"text\":\"test_a.c\"}],\"is_error\":false,\"exit_code\":0,\"kind\":"
         "\"TerminalObservation\"}}",
         out);
    ck_assert_str_eq(S(out, 3, "sessionUpdate"), "tool_call_update");
    ck_assert_str_eq(S(out, 3, "status"), "completed");
    ck_assert_str_eq(content_text(at(out, 3)), "test_a.c");
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(at(out, 3), "rawOutput"), "exit_code")),
        0);
    /* a file view: read, with its location; an edit: a diff */
    feed(o,
         "{\"kind\":\"ActionEvent\",\"id\":\"a2\",\"thought\":[],\"action\":{\"command\":\"view\","
         "\"path\":\"/w/a.c\",\"view_range\":[10,20],\"kind\":\"FileEditorAction\"},"
         "\"tool_name\":\"file_editor\",\"tool_call_id\":\"f1\",\"tool_call\":{\"id\":\"f1\","
         "\"name\":\"file_editor\",\"arguments\":\"{}\",\"origin\":\"completion\"},"
         "\"llm_response_id\":\"r2\"}",
         out);
    ck_assert_str_eq(S(out, 4, "title"), "Reading /w/a.c");
    ck_assert_str_eq(S(out, 4, "kind"), "read");
    equal_json(json_object_get(at(out, 4), "locations"), "[{\"path\":\"/w/a.c\",\"line\":10}]");
    feed(o,
         "{\"kind\":\"ActionEvent\",\"id\":\"a3\",\"thought\":[],\"action\":{\"command\":"
         "\"str_replace\",\"path\":\"/w/a.c\",\"old_str\":\"x\",\"new_str\":\"y\",\"insert_line\":"
         "3,\"kind\":\"FileEditorAction\"},\"tool_name\":\"file_editor\",\"tool_call_id\":\"f2\","
         "\"tool_call\":{\"id\":\"f2\",\"name\":\"file_editor\",\"arguments\":\"{}\",\"origin\":"
         "\"completion\"},\"llm_response_id\":\"r2\",\"summary\":\"fix\"}",
         out);
    ck_assert_str_eq(S(out, 5, "title"), "fix: Editing /w/a.c");
    ck_assert_str_eq(S(out, 5, "kind"), "edit");
    equal_json(json_object_get(at(out, 5), "locations"), "[{\"path\":\"/w/a.c\",\"line\":3}]");
    equal_json(json_object_get(at(out, 5), "content"),
               "[{\"type\":\"diff\",\"path\":\"/w/a.c\",\"oldText\":\"x\",\"newText\":\"y\"}]");
    /* an error result, and a rejection */
    feed(o,
         "{\"kind\":\"AgentErrorEvent\",\"tool_name\":\"file_editor\",\"tool_call_id\":\"f1\","
         "\"error\":\"no such file\"}",
         out);
    equal_json(at(out, 6), "{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"f1\","
                           "\"status\":\"failed\",\"content\":[{\"type\":\"content\",\"content\":{"
                           "\"type\":\"text\",\"text\":\"no such file\"}}]}");
    feed(o,
         "{\"kind\":\"UserRejectObservation\",\"tool_name\":\"file_editor\",\"tool_call_id\":"
         "\"f2\",\"action_id\":\"a3\",\"rejection_reason\":\"Not now\"}",
         out);
    ck_assert_str_eq(S(out, 7, "status"), "failed");
    ck_assert_str_eq(content_text(at(out, 7)), "Not now");
    ck_assert_uint_eq(json_array_size(out), 8);
    json_decref(out);
    acp_out_free(o);
}
END_TEST

/* The task tracker: its call, then its result and the plan (upstream
 * leaves the call in progress). */
START_TEST(test_task_tracker)
{
    acp_out *o = acp_out_new(NULL);
    json_t *out = json_array();
    feed(o,
         "{\"kind\":\"ActionEvent\",\"id\":\"a1\",\"thought\":[],\"action\":{\"command\":\"plan\","
         "\"task_list\":[],\"kind\":\"TaskTrackerAction\"},\"tool_name\":\"task_tracker\","
         "\"tool_call_id\":\"k1\",\"tool_call\":{\"id\":\"k1\",\"name\":\"task_tracker\","
         "\"arguments\":\"{}\",\"origin\":\"completion\"},\"llm_response_id\":\"r1\"}",
         out);
    ck_assert_str_eq(S(out, 0, "sessionUpdate"), "tool_call");
    ck_assert_str_eq(S(out, 0, "title"), "task_tracker");
    ck_assert_str_eq(S(out, 0, "kind"), "other");
    feed(o,
         "{\"kind\":\"ObservationEvent\",\"tool_name\":\"task_tracker\",\"tool_call_id\":\"k1\","
         "\"action_id\":\"a1\",\"observation\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}],"
         "\"command\":\"plan\",\"task_list\":[{\"title\":\"A\",\"status\":\"done\"},{\"title\":"
         "\"B\",\"status\":\"in_progress\"},{\"title\":\"C\",\"status\":\"todo\"},{\"title\":"
         "\"D\",\"status\":\"weird\"}],\"kind\":\"TaskTrackerObservation\"}}",
         out);
    ck_assert_uint_eq(json_array_size(out), 3);
    ck_assert_str_eq(S(out, 1, "sessionUpdate"), "tool_call_update");
    ck_assert_str_eq(S(out, 1, "status"), "completed");
    equal_json(at(out, 2),
               "{\"sessionUpdate\":\"plan\",\"entries\":[{\"content\":\"A\",\"priority\":"
               "\"medium\",\"status\":\"completed\"},{\"content\":\"B\",\"priority\":\"medium\","
               "\"status\":\"in_progress\"},{\"content\":\"C\",\"priority\":\"medium\",\"status\":"
               "\"pending\"},{\"content\":\"D\",\"priority\":\"medium\",\"status\":\"pending\"}]}");
    json_decref(out);
    acp_out_free(o);
}
END_TEST

/* Think and finish make no call; what is not a step of the talk makes
 * nothing; a result of a call never seen comes whole. */
START_TEST(test_think_finish_and_the_rest)
{
    acp_out *o = acp_out_new(NULL);
    json_t *out = json_array();
    feed(o,
         "{\"kind\":\"ActionEvent\",\"id\":\"a1\",\"thought\":[],\"action\":{\"thought\":\"hmm\","
         "\"kind\":\"ThinkAction\"},\"tool_name\":\"think\",\"tool_call_id\":\"k1\",\"tool_call\":"
         "{\"id\":\"k1\",\"name\":\"think\",\"arguments\":\"{}\",\"origin\":\"completion\"},"
         "\"llm_response_id\":\"r1\"}",
         out);
    feed(o,
         "{\"kind\":\"ObservationEvent\",\"tool_name\":\"think\",\"tool_call_id\":\"k1\","
         "\"action_id\":\"a1\",\"observation\":{\"content\":[],\"kind\":\"ThinkObservation\"}}",
         out);
    feed(o,
         "{\"kind\":\"ActionEvent\",\"id\":\"a2\",\"thought\":[],\"action\":{\"message\":\"All "
         "done\",\"kind\":\"FinishAction\"},\"tool_name\":\"finish\",\"tool_call_id\":\"k2\","
         "\"tool_call\":{\"id\":\"k2\",\"name\":\"finish\",\"arguments\":\"{}\",\"origin\":"
         "\"completion\"},\"llm_response_id\":\"r2\"}",
         out);
    feed(o,
         "{\"kind\":\"ObservationEvent\",\"tool_name\":\"finish\",\"tool_call_id\":\"k2\","
         "\"action_id\":\"a2\",\"observation\":{\"content\":[],\"kind\":\"FinishObservation\"}}",
         out);
    ck_assert_uint_eq(json_array_size(out), 2);
    ck_assert_str_eq(S(out, 0, "sessionUpdate"), "agent_thought_chunk");
    ck_assert_str_eq(content_text(at(out, 0)), "hmm");
    ck_assert_str_eq(S(out, 1, "sessionUpdate"), "agent_message_chunk");
    ck_assert_str_eq(content_text(at(out, 1)), "All done");
    const char *nothing[] = {
        "{\"kind\":\"SystemPromptEvent\",\"system_prompt\":{\"type\":\"text\",\"text\":\"You "
        "are\"},\"tools\":[]}",
        "{\"kind\":\"PauseEvent\",\"source\":\"user\"}",
        "{\"kind\":\"ConversationStateUpdateEvent\",\"key\":\"stats\",\"value\":{}}",
        "{\"kind\":\"Condensation\",\"forgotten_event_ids\":[],\"llm_response_id\":\"x\"}",
        "{\"kind\":\"SomethingNew\",\"x\":1}",
        "{\"kind\":\"MessageEvent\",\"llm_message\":{\"role\":\"user\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"  \"}]}}",
        "{\"kind\":\"MessageEvent\",\"llm_message\":{\"role\":\"system\",\"content\":\"x\"}}",
        "{\"kind\":\"AgentErrorEvent\",\"tool_name\":\"x\",\"tool_call_id\":\"\",\"error\":\"x\"}",
        "{\"no\":\"kind\"}",
    };
    for (size_t i = 0; i < sizeof(nothing) / sizeof(nothing[0]); i++)
        ck_assert_ptr_null(feed(o, nothing[i], out));
    ck_assert_uint_eq(json_array_size(out), 2);
    /* an error for a call never announced: a whole tool_call, titled */
    feed(o,
         "{\"kind\":\"AgentErrorEvent\",\"tool_name\":\"terminal\",\"tool_call_id\":\"z\","
         "\"error\":\"Tool 'terminal' got invalid arguments\"}",
         out);
    ck_assert_str_eq(S(out, 2, "sessionUpdate"), "tool_call");
    ck_assert_str_eq(S(out, 2, "title"), "terminal");
    ck_assert_str_eq(S(out, 2, "kind"), "execute");
    ck_assert_str_eq(S(out, 2, "status"), "failed");
    /* upstream's own ACP agent's events: the call, then its updates */
    feed(o,
         "{\"kind\":\"ACPToolCallEvent\",\"tool_call_id\":\"q\",\"title\":\"Read\",\"status\":"
         "\"in_progress\",\"tool_kind\":\"read\",\"raw_input\":{\"p\":1}}",
         out);
    feed(o,
         "{\"kind\":\"ACPToolCallEvent\",\"tool_call_id\":\"q\",\"title\":\"Read\",\"status\":"
         "\"completed\",\"tool_kind\":\"read\",\"raw_output\":\"ok\"}",
         out);
    ck_assert_str_eq(S(out, 3, "sessionUpdate"), "tool_call");
    ck_assert_str_eq(S(out, 4, "sessionUpdate"), "tool_call_update");
    ck_assert_str_eq(S(out, 4, "status"), "completed");
    ck_assert_str_eq(S(out, 4, "rawOutput"), "ok");
    /* an image a user sent */
    feed(o,
         "{\"kind\":\"MessageEvent\",\"id\":\"m\",\"llm_message\":{\"role\":\"user\",\"content\":"
         "[{\"type\":\"image\",\"image_urls\":[\"data:image/png;base64,iVBO\",\"https://x/y.png\""
         "]}]}}",
         out);
    equal_json(json_object_get(at(out, 5), "content"),
               "{\"type\":\"image\",\"data\":\"iVBO\",\"mimeType\":\"image/png\"}");
    equal_json(json_object_get(at(out, 6), "content"),
               "{\"type\":\"resource_link\",\"name\":\"image\",\"uri\":\"https://x/y.png\"}");
    ck_assert_uint_eq(json_array_size(out), 7);
    ck_assert_int_eq(acp_out_event(o, out, out, NULL), -EINVAL); /* an array is no event */
    json_decref(out);
    acp_out_free(o);
}
END_TEST

/* --------------------------------------------------------- stop reasons --- */

static const char *status(acp_out *o, const char *value, json_t *out)
{
    char ev[200];
    snprintf(ev, sizeof(ev),
             "{\"kind\":\"ConversationStateUpdateEvent\",\"key\":\"execution_status\","
             "\"value\":\"%s\"}",
             value);
    return feed(o, ev, out);
}

START_TEST(test_stop_reasons)
{
    acp_out *o = acp_out_new(NULL);
    json_t *out = json_array();
    /* a message brings a finished conversation back to idle: no stop yet */
    ck_assert_ptr_null(status(o, "idle", out));
    ck_assert_ptr_null(status(o, "running", out));
    ck_assert_ptr_null(status(o, "waiting_for_confirmation", out));
    ck_assert_str_eq(status(o, "idle", out), "end_turn"); /* rejected */
    ck_assert_ptr_null(status(o, "idle", out));
    ck_assert_ptr_null(status(o, "running", out));
    ck_assert_str_eq(status(o, "paused", out), "cancelled");
    ck_assert_ptr_null(status(o, "running", out));
    ck_assert_str_eq(status(o, "finished", out), "end_turn");
    /* a hosted agent's own stop reason comes back as it sent it */
    const char *reasons[] = {"refusal", "max_tokens", "max_turn_requests"};
    for (size_t i = 0; i < 3; i++) {
        const char *why = NULL;
        ck_assert_str_eq(acp_stop_status(reasons[i], &why), "error");
        json_t *e = json_pack("{s:s, s:s, s:s, s:s}", "kind", "ConversationErrorEvent", "code",
                              "AgentStopped", "detail", why, "id", "e1");
        ck_assert_int_eq(acp_out_event(o, e, out, NULL), 0);
        json_decref(e);
        ck_assert_str_eq(status(o, "error", out), reasons[i]);
    }
    ck_assert_uint_eq(json_array_size(out), 0); /* the stop reason says it */
    /* any other error is said, and refused */
    feed(o,
         "{\"kind\":\"ConversationErrorEvent\",\"id\":\"e2\",\"code\":\"AgentCrashed\","
         "\"detail\":\"the agent exited\"}",
         out);
    ck_assert_str_eq(content_text(at(out, 0)), "Error: the agent exited");
    ck_assert_str_eq(S(out, 0, "sessionUpdate"), "agent_message_chunk");
    ck_assert_str_eq(status(o, "error", out), "refusal");
    ck_assert_str_eq(status(o, "stuck", out), "refusal");
    json_decref(out);
    acp_out_free(o);
}
END_TEST

/* -------------------------------------------------------------- bounds --- */

START_TEST(test_bounds)
{
    acp_limits l = {.text_max = 8, .value_max = 64};
    acp_out *o = acp_out_new(&l);
    json_t *out = json_array();
    /* "é" is two bytes: the cut never splits it */
    feed(o,
         "{\"kind\":\"MessageEvent\",\"id\":\"m\",\"llm_message\":{\"role\":\"assistant\","
         "\"content\":[{\"type\":\"text\",\"text\":\"abcdefg\\u00e9hij\"}]}}",
         out);
    ck_assert_str_eq(content_text(at(out, 0)), "abcdefg");
    char big[400];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    json_t *e = json_pack("{s:s, s:s, s:[], s:{s:s, s:s, s:s, s:s}, s:s, s:s, s:s}", "kind",
                          "ActionEvent", "id", "a", "thought", "action", "kind", "FileEditorAction",
                          "command", "create", "path", "/w/f", "file_text", big, "tool_name",
                          "file_editor", "tool_call_id", "c1", "summary", big);
    ck_assert_int_eq(acp_out_event(o, e, out, NULL), 0);
    json_decref(e);
    json_t *u = at(out, 1);
    ck_assert_ptr_null(json_object_get(u, "content")); /* the diff is too big */
    ck_assert(json_is_true(json_object_get(json_object_get(u, "rawInput"), "truncated")));
    ck_assert_uint_le(strlen(S(out, 1, "title")), ACP_TITLE_MAX);
    ck_assert_uint_eq(json_array_size(out), 2);
    /* more calls than it remembers: the oldest results come whole */
    for (int i = 0; i < ACP_OUT_CALLS_MAX + 1; i++) {
        char id[16];
        snprintf(id, sizeof(id), "k%d", i);
        e = json_pack("{s:s, s:[], s:{s:s}, s:s, s:s}", "kind", "ActionEvent", "thought", "action",
                      "kind", "X", "tool_name", "x", "tool_call_id", id);
        ck_assert_int_eq(acp_out_event(o, e, out, NULL), 0);
        json_decref(e);
    }
    json_array_clear(out);
    feed(o,
         "{\"kind\":\"AgentErrorEvent\",\"tool_name\":\"x\",\"tool_call_id\":\"k0\",\"error\":"
         "\"e\"}",
         out);
    feed(o,
         "{\"kind\":\"AgentErrorEvent\",\"tool_name\":\"x\",\"tool_call_id\":\"k1\",\"error\":"
         "\"e\"}",
         out);
    ck_assert_str_eq(S(out, 0, "sessionUpdate"), "tool_call"); /* forgotten */
    ck_assert_str_eq(S(out, 1, "sessionUpdate"), "tool_call_update");
    json_decref(out);
    acp_out_free(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("acp_map_out");
    TCase *tc = tcase_create("acp_map_out");
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_replay_is_the_same);
    tcase_add_test(tc, test_upstream_events);
    tcase_add_test(tc, test_task_tracker);
    tcase_add_test(tc, test_think_finish_and_the_rest);
    tcase_add_test(tc, test_stop_reasons);
    tcase_add_test(tc, test_bounds);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
