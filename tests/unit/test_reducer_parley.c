/*
 * test_reducer_parley.c - parley's own events as session events
 * (actors/reducer_parley.h): realistic event sequences, each converted
 * and reduced as a live conversation would be, and the reducer's final
 * state checked: messages, calls and their results (parallel, failed,
 * rejected), status changes, parley's own findings, delegations, events
 * fed twice, refused events, and a hosted ACP agent's turn as acp_map.c
 * makes it.
 */
#include "actors/acp_map.h"
#include "actors/reducer.h"
#include "actors/reducer_parley.h"

#include "support_sync.h"
#include "support_json.h"

#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ helpers --- */

static const char *const NOW = "2000-01-01T00:00:00.000Z";

static void fixed_now(void *ctx, char out[32])
{
    (void)ctx;
    snprintf(out, 32, "%s", NOW);
}

typedef struct run {
    parley_conv *c;
    reducer *r;
} run;

static run start(void)
{
    run x = {parley_conv_new(), reducer_new(fixed_now, NULL)};
    ck_assert_ptr_nonnull(x.c);
    ck_assert_ptr_nonnull(x.r);
    return x;
}

static void stop(run *x)
{
    parley_conv_free(x->c);
    reducer_free(x->r);
}

/* Converts one event and reduces what it made. */
static void feed_one(run *x, const json_t *ev)
{
    json_t *out = json_array();
    char why[200] = "";
    int rc = parley_conv_event(x->c, ev, out, why, sizeof(why));
    char *s = json_dumps(ev, JSON_COMPACT);
    ck_assert_msg(rc == 0, "event refused (%d: %s): %s", rc, why, s);
    free(s);
    size_t i;
    json_t *se;
    json_array_foreach(out, i, se)
    {
        ck_assert_int_eq(reducer_apply(x->r, se, NULL), 0);
    }
    json_decref(out);
}

/* Each event of a list, in order. */
static void feed(run *x, const json_t *events)
{
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) feed_one(x, ev);
}

static void feed_q(run *x, const char *events)
{
    json_t *v = tj_jsonq(events);
    feed(x, v);
    json_decref(v);
}

static const json_t *blk(run *x, const char *id)
{
    const json_t *b = reducer_block(x->r, "main", id);
    ck_assert_msg(b != NULL, "no block %s", id);
    return b;
}

static const char *field(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* Block id's string member key is want. */
static void has(run *x, const char *id, const char *key, const char *want)
{
    const char *got = field(blk(x, id), key);
    ck_assert_msg(got != NULL && strcmp(got, want) == 0, "%s.%s: got %s, want %s", id, key,
                  got ? got : "nothing", want);
}

/* The ids of the main blocks, in order, joined with spaces. */
static void expect_order(run *x, const char *want)
{
    json_t *st = reducer_state(x->r);
    char got[1024] = "";
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(st, "blocks"), i, b)
    {
        size_t n = strlen(got);
        snprintf(got + n, sizeof(got) - n, "%s%s", n ? " " : "", field(b, "id"));
    }
    json_decref(st);
    ck_assert_str_eq(got, want);
}

static void expect_json(const json_t *got, const char *want)
{
    tj_equal(got, tj_jsonq(want));
}

/* ------------------------------------------------------------- events --- */

#define TS(n) "'timestamp':'2026-08-22T10:15:0" #n ".000001'"

#define USER_MSG(id, text)                                                                         \
    "{'id':'" id "'," TS(1) ",'source':'user','llm_message':{'role':'user','content':"             \
                            "[{'cache_prompt':false,'type':'text','text':'" text                   \
                            "'}],'thinking_blocks':[]},"                                           \
                            "'activated_skills':[],'extended_content':[],'kind':'MessageEvent'}"

#define TERMINAL_ACTION(id, call, resp, thought, cmd)                                              \
    "{'id':'" id "'," TS(                                                                          \
        2) ",'source':'agent','thought':[" thought "],'thinking_blocks':[],"                       \
           "'action':{'command':'" cmd                                                             \
           "','is_input':false,'reset':false,'kind':'TerminalAction'},"                            \
           "'tool_name':'terminal','tool_call_id':'" call "','tool_call':{'id':'" call "',"        \
           "'name':'terminal','arguments':'{}','origin':'completion'},'llm_response_id':'" resp    \
           "',"                                                                                    \
           "'security_risk':'LOW','summary':'run " cmd "','kind':'ActionEvent'}"

#define OBSERVATION(id, call, text, err)                                                           \
    "{'id':'" id                                                                                   \
    "'," TS(3) ",'source':'environment','tool_name':'terminal','tool_call_id':'" call              \
               "','observation':{'content':[{'cache_prompt':false,'type':'text','text':'" text     \
               "'}],"                                                                              \
               "'is_error':" err ",'command':'x','exit_code':0,'timeout':false,"                   \
               "'kind':'TerminalObservation'},'action_id':'a','extended_content':[],"              \
               "'kind':'ObservationEvent'}"

#define STATUS(id, s)                                                                              \
    "{'id':'" id "'," TS(9) ",'source':'environment','key':'execution_status','value':'" s "',"    \
                            "'kind':'ConversationStateUpdateEvent'}"

/* -------------------------------------------------------------- tests --- */

START_TEST(test_user_message)
{
    run x = start();
    feed_q(
        &x,
        "[" USER_MSG(
            "u1",
            "Add a unit test") ","
                               "{'id':'u2'," TS(
                                   2) ",'source':'user','llm_message':{'role':'user','content':["
                                      "{'type':'text','text':'look'},{'type':'image','image_urls':["
                                      "'data:image/png;base64,AAAA','https://x.test/"
                                      "a.png']}]},'kind':'MessageEvent'}]");
    expect_order(&x, "u1 u2");
    expect_json(blk(&x, "u1"), "{'id':'u1','type':'user_message','content':'Add a unit test',"
                               "'status':'complete','timestamp':'2026-08-22T10:15:01.000001'}");
    expect_json(json_object_get(blk(&x, "u2"), "content"),
                "[{'type':'text','text':'look'},{'type':'image','source':{'type':'base64',"
                "'data':'AAAA','mediaType':'image/png'}},{'type':'image','source':{'type':'url',"
                "'data':'https://x.test/a.png'}}]");
    stop(&x);
}
END_TEST

/* Agent text with its reasoning; environment and hook messages. */
START_TEST(test_agent_and_other_messages)
{
    run x = start();
    feed_q(
        &x,
        "[{'id':'m1'," TS(
            1) ",'source':'agent','llm_message':{'role':'assistant',"
               "'content':[{'type':'text','text':'Done.'}],'reasoning_content':'User wants X'},"
               "'llm_response_id':'r1','kind':'MessageEvent'},"
               "{'id':'n1'," TS(
                   2) ",'source':'environment','llm_message':{'role':'user',"
                      "'content':[{'type':'text','text':'keep going'}]},'kind':'MessageEvent'},"
                      "{'id':'sp'," TS(
                          3) ",'source':'agent','system_prompt':{'type':'text',"
                             "'text':'You "
                             "are'},'tools':[{'title':'terminal','kind':'TerminalTool'}],"
                             "'kind':'SystemPromptEvent'},"
                             "{'id':'p'," TS(
                                 4) ",'source':'user','kind':'PauseEvent'},"
                                    "{'id':'cd'," TS(
                                        5) ",'source':'environment','forgotten_event_ids':['a','b']"
                                           ","
                                           "'summary_offset':1,'llm_response_id':'r','kind':'"
                                           "Condensation'},"
                                           "{'id':'h1'," TS(
                                               6) ",'source':'hook','hook_event_type':'PreToolUse',"
                                                  "'hook_command':'check.sh','success':true,'exit_"
                                                  "code':0,"
                                                  "'kind':'HookExecutionEvent'},"
                                                  "{'id':'h2'," TS(
                                                      7) ",'source':'hook','hook_event_type':'"
                                                         "PreToolUse',"
                                                         "'hook_command':'check.sh','success':"
                                                         "false,'blocked':true,'exit_code':2,"
                                                         "'reason':'no "
                                                         "rm','kind':'HookExecutionEvent'}]");
    expect_order(&x, "m1-reasoning m1 n1 sp cd h2");
    has(&x, "cd", "message", "condensed 2 events");
    has(&x, "h2", "subtype", "hook_response");
    has(&x, "h2", "message", "PreToolUse hook blocked: no rm");
    has(&x, "m1-reasoning", "type", "thinking");
    has(&x, "m1-reasoning", "content", "User wants X");
    has(&x, "m1", "content", "Done.");
    expect_json(blk(&x, "n1"), "{'id':'n1','type':'system','subtype':'log','message':'keep going',"
                               "'metadata':{'source':'environment'},'status':'complete',"
                               "'timestamp':'2026-08-22T10:15:02.000001'}");
    has(&x, "sp", "subtype", "session_start");
    expect_json(json_object_get(blk(&x, "sp"), "metadata"), "{'tools':['terminal']}");
    stop(&x);
}
END_TEST

START_TEST(test_action_and_observation)
{
    run x = start();
    feed_q(&x,
           "[" USER_MSG("u1", "list tests") "," TERMINAL_ACTION(
               "a1", "call_1", "resp-1", "{'type':'text','text':'Let me look.'}", "ls tests/") "]");
    expect_json(blk(&x, "call_1"),
                "{'id':'call_1','type':'tool_use','toolName':'terminal','toolUseId':'call_1',"
                "'input':{'command':'ls tests/','is_input':false,'reset':false},"
                "'description':'run ls tests/','status':'pending',"
                "'timestamp':'2026-08-22T10:15:02.000001'}");
    feed_q(&x, "[" OBSERVATION("o1", "call_1", "test_a.py", "false") "]");
    expect_order(&x, "u1 a1-thought call_1 result-call_1");
    has(&x, "a1-thought", "type", "assistant_text");
    has(&x, "a1-thought", "content", "Let me look.");
    has(&x, "call_1", "status", "complete");
    /* the result does not move the call's time */
    has(&x, "call_1", "timestamp", "2026-08-22T10:15:02.000001");
    expect_json(blk(&x, "result-call_1"),
                "{'id':'result-call_1','type':'tool_result','toolUseId':'call_1',"
                "'output':'test_a.py','isError':false,'status':'complete',"
                "'timestamp':'2026-08-22T10:15:03.000001'}");
    stop(&x);
}
END_TEST

/* Two calls of one LLM response, answered in the other order. */
START_TEST(test_parallel_calls)
{
    run x = start();
    feed_q(
        &x,
        "[" TERMINAL_ACTION(
            "a1", "c1", "resp", "{'type':'text','text':'Both.'}",
            "ls") "," TERMINAL_ACTION("a2", "c2", "resp", "",
                                      "pwd") "," OBSERVATION("o2", "c2", "/w",
                                                             "false") "," OBSERVATION("o1", "c1",
                                                                                      "a b",
                                                                                      "false") "]");
    expect_order(&x, "a1-thought c1 c2 result-c2 result-c1");
    has(&x, "c1", "status", "complete");
    has(&x, "c2", "status", "complete");
    has(&x, "result-c1", "output", "a b");
    has(&x, "result-c2", "output", "/w");
    has(&x, "result-c2", "toolUseId", "c2");
    stop(&x);
}
END_TEST

/* A failed call, a call that could not run, an error of no call. */
START_TEST(test_errors)
{
    run x = start();
    feed_q(
        &x,
        "[" TERMINAL_ACTION("a1", "c1", "r", "", "false") "," OBSERVATION(
            "o1", "c1", "exit 1",
            "true") ",{'id':'a2'," TS(4) ",'source':'agent','thought':[],"
                                         "'tool_name':'file_editor','tool_call_id':'c2','tool_call'"
                                         ":{'id':'c2',"
                                         "'name':'file_editor','arguments':'{\\'path\\':\\'a.c\\'}'"
                                         ","
                                         "'origin':'completion'},'llm_response_id':'r2','kind':'"
                                         "ActionEvent'},"
                                         "{'id':'e2'," TS(
                                             5) ",'source':'agent','tool_name':'file_editor',"
                                                "'tool_call_id':'c2','error':'invalid arguments',"
                                                "'kind':'AgentErrorEvent'},"
                                                "{'id':'e3'," TS(
                                                    6) ",'source':'agent','tool_name':'',"
                                                       "'tool_call_id':'','error':'LLM "
                                                       "quota','classification':{"
                                                       "'kind':'quota','retryable':false},'kind':'"
                                                       "AgentErrorEvent'}]");
    expect_order(&x, "c1 result-c1 c2 result-c2 e3");
    has(&x, "c1", "status", "complete");
    ck_assert(json_is_true(json_object_get(blk(&x, "result-c1"), "isError")));
    has(&x, "result-c1", "output", "exit 1");
    /* no action: the call's arguments are its input */
    expect_json(json_object_get(blk(&x, "c2"), "input"), "{'path':'a.c'}");
    has(&x, "c2", "status", "complete");
    has(&x, "result-c2", "output", "invalid arguments");
    ck_assert(json_is_true(json_object_get(blk(&x, "result-c2"), "isError")));
    expect_json(blk(&x, "e3"), "{'id':'e3','type':'error','message':'LLM quota','code':'quota',"
                               "'status':'complete','timestamp':'2026-08-22T10:15:06.000001'}");
    stop(&x);
}
END_TEST

START_TEST(test_rejection)
{
    run x = start();
    feed_q(&x, "[" TERMINAL_ACTION(
                   "a1", "c1", "r", "",
                   "rm -rf x") ","
                               "{'id':'rj'," TS(
                                   5) ",'source':'environment','tool_name':'terminal',"
                                      "'tool_call_id':'c1','rejection_reason':'Not "
                                      "now','rejection_source':'user',"
                                      "'action_id':'a1','kind':'UserRejectObservation'}," STATUS(
                                          "s1", "idle") "]");
    has(&x, "c1", "status", "complete");
    expect_json(blk(&x, "result-c1"),
                "{'id':'result-c1','type':'tool_result','toolUseId':'c1','output':'Not now',"
                "'isError':true,'metadata':{'rejectionSource':'user'},'status':'complete',"
                "'timestamp':'2026-08-22T10:15:05.000001'}");
    stop(&x);
}
END_TEST

/* Think and finish calls show as text, as upstream's ACP mapping has it. */
START_TEST(test_think_and_finish)
{
    run x = start();
    feed_q(&x,
           "[{'id':'a1'," TS(
               1) ",'source':'agent','thought':[],'action':{'thought':"
                  "'weigh it','kind':'ThinkAction'},'tool_name':'think','tool_call_id':'k1',"
                  "'tool_call':{'id':'k1','name':'think','arguments':'{}','origin':'completion'},"
                  "'llm_response_id':'r','kind':'ActionEvent'},"
                  "{'id':'o1'," TS(
                      2) ",'source':'environment','tool_name':'think',"
                         "'tool_call_id':'k1','observation':{'content':[{'type':'text','text':"
                         "'Your thought has been "
                         "logged.'}],'kind':'ThinkObservation'},'action_id':'a1',"
                         "'kind':'ObservationEvent'},"
                         "{'id':'a2'," TS(
                             3) ",'source':'agent','thought':[],'action':{'message':"
                                "'All "
                                "done.','kind':'FinishAction'},'tool_name':'finish','tool_call_id':"
                                "'k2',"
                                "'tool_call':{'id':'k2','name':'finish','arguments':'{}','origin':'"
                                "completion'},"
                                "'llm_response_id':'r2','kind':'ActionEvent'},"
                                "{'id':'o2'," TS(
                                    4) ",'source':'environment','tool_name':'finish',"
                                       "'tool_call_id':'k2','observation':{'content':[{'type':'"
                                       "text','text':"
                                       "'All done.'}],'kind':'FinishObservation'},'action_id':'a2',"
                                       "'kind':'ObservationEvent'}]");
    expect_order(&x, "a1-think a2-finish");
    has(&x, "a1-think", "type", "thinking");
    has(&x, "a1-think", "content", "weigh it");
    has(&x, "a2-finish", "type", "assistant_text");
    has(&x, "a2-finish", "content", "All done.");
    stop(&x);
}
END_TEST

/* A finished run completes what is pending; a paused one does not. */
START_TEST(test_status_changes)
{
    run x = start();
    feed_q(&x, "[" STATUS("s0", "running") "," TERMINAL_ACTION(
                   "a1", "c1", "r", "", "sleep 9") "," STATUS("s1", "paused") "]");
    has(&x, "c1", "status", "pending");
    expect_json(blk(&x, "s1"), "{'id':'s1','type':'system','subtype':'status',"
                               "'message':'status: paused','metadata':{'executionStatus':"
                               "'paused'},'status':'complete',"
                               "'timestamp':'2026-08-22T10:15:09.000001'}");
    feed_q(&x, "[" STATUS("s2", "waiting_for_confirmation") "]");
    has(&x, "c1", "status", "pending");
    feed_q(&x, "[" STATUS("s3", "finished") "]");
    has(&x, "c1", "status", "complete");
    has(&x, "s3", "message", "status: finished");
    expect_order(&x, "s0 c1 s1 s2 s3");
    /* other keys of the state make nothing */
    feed_q(&x, "[{'id':'k'," TS(9) ",'source':'environment','key':'stats','value':{},"
                                   "'kind':'ConversationStateUpdateEvent'}]");
    ck_assert_uint_eq(reducer_block_count(x.r), 5);
    stop(&x);
}
END_TEST

/* The stuck detector's finding and an observe-mode violation, as
 * seq_own.c records them, are marked where they happened. */
START_TEST(test_findings)
{
    run x = start();
    feed_q(&x,
           "[{'id':'v1'," TS(
               1) ",'source':'environment','code':'ComplianceViolation',"
                  "'detail':'observed interleaved_action: an action while call c1 is pending',"
                  "'kind':'ConversationErrorEvent'},"
                  "{'id':'f1'," TS(
                      2) ",'source':'environment','code':'StuckPatternDetected',"
                         "'detail':'stuck: monologue: the agent repeats itself without progress',"
                         "'kind':'ConversationErrorEvent'}," STATUS("s1", "stuck") "]");
    expect_json(json_object_get(blk(&x, "v1"), "metadata"),
                "{'gateRule':'interleaved_action','policy':'observe'}");
    has(&x, "v1", "type", "error");
    has(&x, "v1", "code", "ComplianceViolation");
    expect_json(json_object_get(blk(&x, "f1"), "metadata"), "{'stuckRule':'monologue'}");
    has(&x, "s1", "message", "status: stuck (rule: monologue)");
    expect_json(json_object_get(blk(&x, "s1"), "metadata"),
                "{'executionStatus':'stuck','stuckRule':'monologue'}");
    /* a later stuck status without a finding of its own names no rule */
    feed_q(&x, "[" STATUS("s2", "idle") "," STATUS("s3", "stuck") "]");
    has(&x, "s3", "message", "status: stuck");
    stop(&x);
}
END_TEST

START_TEST(test_delegation)
{
    run x = start();
    feed_q(
        &x,
        "[{'id':'a1'," TS(
            1) ",'source':'agent','thought':[],'action':{"
               "'description':'find tests','prompt':'List the tests','subagent_type':'explore',"
               "'kind':'TaskAction'},'tool_name':'task','tool_call_id':'t1','tool_call':{"
               "'id':'t1','name':'task','arguments':'{}','origin':'completion'},"
               "'llm_response_id':'r','kind':'ActionEvent'},"
               "{'id':'a2'," TS(
                   2) ",'source':'agent','thought':[],'action':{"
                      "'command':'delegate','tasks':{'lodging':'Find a hotel','food':'Find food'},"
                      "'kind':'DelegateAction'},'tool_name':'delegate','tool_call_id':'t2',"
                      "'tool_call':{'id':'t2','name':'delegate','arguments':'{}','origin':"
                      "'completion'},'llm_response_id':'r','kind':'ActionEvent'},"
                      "{'id':'o1'," TS(
                          3) ",'source':'environment','tool_name':'task',"
                             "'tool_call_id':'t1','observation':{'content':[{'type':'text','text':"
                             "'3 tests'}],'is_error':false,'task_id':'task-9','subagent':'explore',"
                             "'status':'completed','kind':'TaskObservation'},'action_id':'a1',"
                             "'kind':'ObservationEvent'},"
                             "{'id':'e2'," TS(4) ",'source':'agent','tool_name':'delegate',"
                                                 "'tool_call_id':'t2','error':'sub-agent "
                                                 "crashed','kind':'AgentErrorEvent'}]");
    expect_order(&x, "subagent-block-t1 t1 subagent-block-t2 t2");
    has(&x, "t1", "status", "complete");
    has(&x, "t2", "status", "complete");
    expect_json(blk(&x, "subagent-block-t1"),
                "{'id':'subagent-block-t1','type':'subagent','toolUseId':'t1','name':'explore',"
                "'input':'List the tests','description':'find tests','status':'complete',"
                "'subagentId':'agent-task-9','output':'3 tests',"
                "'timestamp':'2026-08-22T10:15:01.000001'}");
    ck_assert_uint_eq(reducer_subagent_count(x.r), 2);
    expect_json(reducer_subagent(x.r, "t1"),
                "{'toolUseId':'t1','agentId':'task-9','status':'success','prompt':"
                "'List the tests','output':'3 tests'}");
    const json_t *s2 = reducer_subagent(x.r, "t2");
    ck_assert_str_eq(field(s2, "status"), "error");
    ck_assert_str_eq(field(s2, "output"), "sub-agent crashed");
    const char *prompt = field(s2, "prompt");
    ck_assert(strstr(prompt, "lodging: Find a hotel") != NULL);
    ck_assert(strstr(prompt, "food: Find food") != NULL);
    has(&x, "subagent-block-t2", "description", "Delegating 2 task(s) to: lodging, food");
    stop(&x);
}
END_TEST

/* Every event fed again, and an action again after its result: the same
 * state. */
START_TEST(test_refeed)
{
    json_t *evs = tj_jsonq("[" USER_MSG("u1", "go") "," TERMINAL_ACTION(
        "a1", "c1", "r", "{'type':'text','text':'ok'}",
        "ls") "," OBSERVATION("o1", "c1", "x",
                              "false") ",{'id':'f1'," TS(5) ","
                                                            "'source':'environment','code':"
                                                            "'StuckPatternDetected','detail':"
                                                            "'stuck: monologue: x','kind':"
                                                            "'ConversationErrorEvent'}," STATUS(
                                                                "s1", "stuck") "]");
    run x = start();
    feed(&x, evs);
    json_t *once = reducer_state(x.r);
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev)
    {
        feed_one(&x, ev);
        feed_one(&x, ev);
    }
    feed_one(&x, json_array_get(evs, 1)); /* the action, after its result */
    json_t *again = reducer_state(x.r);
    char *a = json_dumps(once, JSON_COMPACT), *b = json_dumps(again, JSON_COMPACT);
    ck_assert_msg(json_equal(once, again), "once %s\nagain %s", a, b);
    free(a);
    free(b);
    json_decref(once);
    json_decref(again);
    json_decref(evs);
    stop(&x);
}
END_TEST

START_TEST(test_malformed)
{
    static const char *const bad[] = {
        "['not an object']",
        "{'id':'x','source':'user'}",
        "{'id':'x','source':'user','kind':'MessageEvent'}",
        "{'id':'x','thought':[],'tool_name':'terminal','kind':'ActionEvent'}",
        "{'id':'x','tool_name':'terminal','observation':{},'kind':'ObservationEvent'}",
        "{'id':'x','tool_name':'t','kind':'UserRejectObservation'}",
        "{'id':'x','key':'execution_status','value':3,'kind':'ConversationStateUpdateEvent'}",
    };
    parley_conv *c = parley_conv_new();
    json_t *out = tj_jsonq("[{'type':'earlier'}]");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *ev = tj_jsonq(bad[i]);
        char why[200] = "";
        ck_assert_int_eq(parley_conv_event(c, ev, out, why, sizeof(why)), -EINVAL);
        ck_assert_msg(why[0] != '\0', "no reason for %s", bad[i]);
        ck_assert_uint_eq(json_array_size(out), 1);
        json_decref(ev);
    }
    /* kinds that make nothing are not refused */
    json_t *ev = tj_jsonq("{'id':'x','kind':'SomeFutureEvent'}");
    ck_assert_int_eq(parley_conv_event(c, ev, out, NULL, 0), 0);
    json_decref(ev);
    ev = tj_jsonq("{'id':'t','prompt_token_ids':[],'response_token_ids':[],'kind':'TokenEvent'}");
    ck_assert_int_eq(parley_conv_event(c, ev, out, NULL, 0), 0);
    ck_assert_uint_eq(json_array_size(out), 1);
    json_decref(ev);
    json_decref(out);
    parley_conv_free(c);
}
END_TEST

/* ---------------------------------------------------- a hosted agent --- */

static int next_id;

static void seq_ids(void *ctx, char out[37])
{
    (void)ctx;
    snprintf(out, 37, "00000000-0000-4000-8000-%012d", ++next_id);
}

static void update(acp_turn *t, const char *u, json_t *out)
{
    json_t *v = tj_jsonq(u);
    char why[200] = "";
    int r = acp_turn_update(t, v, out, why, sizeof(why));
    ck_assert_msg(r == 0, "update refused (%d: %s): %s", r, why, u);
    json_decref(v);
}

static const char *id_at(json_t *evs, size_t i)
{
    return field(json_array_get(evs, i), "id");
}

/* A turn of a hosted ACP agent, as acp_map.c turns it into events. */
START_TEST(test_acp_turn)
{
    next_id = 0;
    acp_turn *t = acp_turn_new("turn-1", NULL, seq_ids, NULL);
    json_t *evs = json_array();
    update(t,
           "{'sessionUpdate':'agent_thought_chunk','content':{'type':'text','text':'I will "
           "read it'}}",
           evs);
    update(t,
           "{'sessionUpdate':'tool_call','toolCallId':'tc1','title':'Read a.c','kind':"
           "'read','status':'pending','rawInput':{'path':'a.c'}}",
           evs);
    update(t,
           "{'sessionUpdate':'tool_call_update','toolCallId':'tc1','status':'completed',"
           "'content':[{'type':'content','content':{'type':'text','text':'int x;'}}]}",
           evs);
    update(t,
           "{'sessionUpdate':'tool_call','toolCallId':'tc2','title':'Task','kind':'think',"
           "'rawInput':{'description':'scan','prompt':'Scan the repo','subagent_type':"
           "'Explore'}}",
           evs);
    update(t,
           "{'sessionUpdate':'tool_call_update','toolCallId':'tc2','status':'completed',"
           "'content':[{'type':'content','content':{'type':'text','text':'found 3'}}]}",
           evs);
    update(t,
           "{'sessionUpdate':'plan','entries':[{'content':'fix','priority':'high',"
           "'status':'in_progress'}]}",
           evs);
    update(t,
           "{'sessionUpdate':'agent_message_chunk','content':{'type':'text','text':"
           "'All read.'}}",
           evs);
    update(t,
           "{'sessionUpdate':'tool_call','toolCallId':'tc3','title':'Run make','kind':"
           "'execute','rawInput':{'command':'make'}}",
           evs);
    acp_turn_end(t, "the turn was cancelled", evs);
    acp_turn_free(t);

    run x = start();
    feed(&x, evs);
    /* ids: tc1's action 1, its result 2; tc2's 3, 4; plan 5 and 6; the
     * message 7; tc3's action 8, its error 9 */
    ck_assert_str_eq(id_at(evs, 0), "00000000-0000-4000-8000-000000000001");
    const json_t *read = blk(&x, "tc1");
    expect_json(read, "{'id':'tc1','type':'tool_use','toolName':'read','toolUseId':'tc1',"
                      "'input':{'path':'a.c'},'description':'Read a.c','displayName':'Read a.c',"
                      "'status':'complete','timestamp':'2000-01-01T00:00:00.000Z'}");
    has(&x, "result-tc1", "output", "int x;");
    has(&x, "00000000-0000-4000-8000-000000000001-thought", "type", "thinking");
    has(&x, "00000000-0000-4000-8000-000000000001-thought", "content", "I will read it");
    /* Claude Code's Task through ACP: a sub-agent */
    const json_t *sub = reducer_subagent(x.r, "tc2");
    ck_assert_ptr_nonnull(sub);
    ck_assert_str_eq(field(sub, "status"), "success");
    ck_assert_str_eq(field(sub, "output"), "found 3");
    ck_assert_ptr_null(reducer_block(x.r, "main", "result-tc2"));
    /* the plan: an action and its observation, paired */
    const char *plan = id_at(evs, 4);
    has(&x, plan, "toolName", "plan");
    has(&x, plan, "status", "complete");
    char rid[80];
    snprintf(rid, sizeof(rid), "result-%s", plan);
    has(&x, rid, "output", "[~] fix");
    ck_assert_str_eq(field(blk(&x, id_at(evs, 6)), "content"), "All read.");
    /* the call the turn's end closed */
    has(&x, "tc3", "status", "complete");
    has(&x, "result-tc3", "output", "the turn was cancelled");
    expect_order(&x, "00000000-0000-4000-8000-000000000001-thought tc1 result-tc1 "
                     "subagent-block-tc2 tc2 00000000-0000-4000-8000-000000000005 "
                     "result-00000000-0000-4000-8000-000000000005 "
                     "00000000-0000-4000-8000-000000000007 tc3 result-tc3");
    json_decref(evs);
    stop(&x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reducer_parley");
    TCase *tc = tcase_create("events");
    tcase_add_test(tc, test_user_message);
    tcase_add_test(tc, test_agent_and_other_messages);
    tcase_add_test(tc, test_action_and_observation);
    tcase_add_test(tc, test_parallel_calls);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_rejection);
    tcase_add_test(tc, test_think_and_finish);
    tcase_add_test(tc, test_status_changes);
    tcase_add_test(tc, test_findings);
    tcase_add_test(tc, test_delegation);
    tcase_add_test(tc, test_refeed);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_acp_turn);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
