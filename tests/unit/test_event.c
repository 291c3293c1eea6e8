/*
 * test_event.c - the event model (actors/event.h): every kind parsed from a
 * realistic example, every required field and type and enum refused the
 * way upstream refuses it, unknown members refused at the top and accepted
 * where upstream ignores them, the canonical bytes (order, nulls, kind
 * last, numbers, escapes), stamping and the timestamp format, the name
 * tables, every event of every published vector, and which events a
 * conversation counts as findings (conv_status.h).
 *
 * Examples are written with ' for " (see jq) so that they stay readable;
 * a literal apostrophe is written \u0027 inside the JSON.
 */
#include "actors/conv_status.h"
#include "actors/event.h"
#include "actors/stuck.h"

#include "support_sync.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------- helpers --- */

/* The example with ' turned into ", malloc'd. */
/* e's canonical bytes, NUL-terminated (the caller frees them). */
static char *ev_text(const ev *e)
{
    rt_text w = {0};
    ck_assert_int_eq(ev_write(&w, e, false), 0);
    rt_text_putc(&w, '\0');
    ck_assert(!w.failed);
    return w.p;
}

static char *jq(const char *s)
{
    char *out = strdup(s);
    ck_assert_ptr_nonnull(out);
    for (char *p = out; *p != '\0'; p++)
        if (*p == '\'')
            *p = '"';
    return out;
}

static json_t *jobj(const char *sq)
{
    char *text = jq(sq);
    json_error_t jerr;
    json_t *o = json_loads(text, JSON_ALLOW_NUL, &jerr);
    ck_assert_msg(o != NULL, "bad test JSON (%s): %s", jerr.text, text);
    free(text);
    return o;
}

/* Parses the object and returns the error ("" when it was accepted). */
static const char *verdict(json_t *o)
{
    static char err[512];
    err[0] = '\0';
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    ck_assert_ptr_nonnull(text);
    ev e;
    int rc = ev_parse(text, strlen(text), &e, err, sizeof(err));
    if (rc == 0) {
        ck_assert_str_eq(err, "");
        ev_free(&e);
    } else {
        ck_assert_int_eq(rc, -EINVAL);
        ck_assert_msg(err[0] != '\0', "refused without a message: %s", text);
        ck_assert_ptr_null(e.doc);
    }
    free(text);
    return err;
}

#define assert_ok(o)                                                                               \
    do {                                                                                           \
        const char *v_ = verdict(o);                                                               \
        ck_assert_msg(v_[0] == '\0', "refused: %s", v_);                                           \
    } while (0)

#define assert_refused(o, msg)                                                                     \
    do {                                                                                           \
        const char *v_ = verdict(o);                                                               \
        ck_assert_msg(strcmp(v_, (msg)) == 0, "got \"%s\", expected \"%s\"", v_, (msg));           \
    } while (0)

/* serialize(parse(text)) as a malloc'd string. */
static char *canon_text(const char *text)
{
    ev e;
    char err[256];
    ck_assert_msg(ev_parse(text, strlen(text), &e, err, sizeof(err)) == 0, "%s: %s", err, text);
    rt_buf *b = ev_serialize(&e);
    ck_assert_ptr_nonnull(b);
    char *s = strndup((const char *)rt_buf_data(b), rt_buf_len(b));
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(strlen(s), rt_buf_len(b)); /* never a raw NUL */
    rt_buf_unref(b);
    ev_free(&e);
    return s;
}

/* The serialization is a fixed point: serialize(parse(serialize(x))) is
 * serialize(x). Returns serialize(x). */
static char *assert_stable(const char *text)
{
    char *once = canon_text(text);
    char *twice = canon_text(once);
    ck_assert_msg(strcmp(once, twice) == 0, "not stable:\n%s\n%s", once, twice);
    free(twice);
    return once;
}

/* -------------------------------------------------------- the examples --- */

typedef struct example {
    ev_kind kind;
    ev_source source; /* as given or defaulted */
    const char *json;
    /* Upstream's fields without a default (source only where the class
     * does not give one). */
    const char *required[6];
} example;

static const example EXAMPLES[] = {
    {EV_MESSAGE,
     EV_SRC_USER,
     "{'id':'5b0f7c1e-2d4a-4c53-9a51-0d7f3b2e9c11','timestamp':'2026-08-22T10:15:02.118734',"
     "'source':'user','parent_id':'a3c1e0d2-77b4-4f0e-9d3e-1f2a6b8c4d55',"
     "'llm_message':{'role':'user','content':[{'cache_prompt':false,'type':'text',"
     "'text':'Add a unit test for parse_config()'}],'thinking_blocks':[]},"
     "'activated_skills':[],'extended_content':[],'kind':'MessageEvent'}",
     {"source", "llm_message"}},
    {EV_ACTION,
     EV_SRC_AGENT,
     "{'id':'7c4e9a10-3b5d-4e61-8f70-2a9b1c3d4e5f','timestamp':'2026-08-22T10:15:09.331207',"
     "'source':'agent','parent_id':'5b0f7c1e-2d4a-4c53-9a51-0d7f3b2e9c11',"
     "'thought':[{'cache_prompt':false,'type':'text','text':'Let me look at the tests folder.'}],"
     "'thinking_blocks':[],"
     "'action':{'command':'ls tests/','is_input':false,'reset':false,'kind':'TerminalAction'},"
     "'tool_name':'terminal','tool_call_id':'call_Qm2x91',"
     "'tool_call':{'id':'call_Qm2x91','name':'terminal',"
     "'arguments':'{\\'command\\':\\'ls tests/\\',\\'security_risk\\':\\'LOW\\',"
     "\\'summary\\':\\'list test files\\'}',"
     "'origin':'completion'},"
     "'llm_response_id':'chatcmpl-77ab01','security_risk':'LOW','summary':'list test files',"
     "'kind':'ActionEvent'}",
     {"thought", "tool_name", "tool_call_id", "tool_call", "llm_response_id"}},
    {EV_OBSERVATION,
     EV_SRC_ENVIRONMENT,
     "{'id':'0b8d6f2e-1c2d-4e5f-8a9b-0c1d2e3f4a5b','timestamp':'2026-08-22T10:15:09.802114',"
     "'source':'environment','parent_id':'7c4e9a10-3b5d-4e61-8f70-2a9b1c3d4e5f',"
     "'tool_name':'terminal','tool_call_id':'call_Qm2x91',"
     "'observation':{'content':[{'cache_prompt':false,'type':'text',"
     "'text':'test_cli.py\\ntest_io.py'}],"
     "'is_error':false,'command':'ls tests/','exit_code':0,'timeout':false,"
     "'metadata':{'exit_code':0,'pid':4121,'working_dir':'/workspace/project','prefix':'',"
     "'suffix':''},'kind':'TerminalObservation'},"
     "'action_id':'7c4e9a10-3b5d-4e61-8f70-2a9b1c3d4e5f','extended_content':[],"
     "'kind':'ObservationEvent'}",
     {"tool_name", "tool_call_id", "observation", "action_id"}},
    {EV_USER_REJECT,
     EV_SRC_ENVIRONMENT,
     "{'id':'r-1','timestamp':'2026-08-22T10:16:00.000001','source':'environment',"
     "'parent_id':'a-1','tool_name':'terminal','tool_call_id':'call_Zz01',"
     "'rejection_reason':'Not now','rejection_source':'user','action_id':'a-1',"
     "'kind':'UserRejectObservation'}",
     {"tool_name", "tool_call_id", "action_id"}},
    {EV_AGENT_ERROR,
     EV_SRC_AGENT,
     "{'id':'e-1','timestamp':'2026-08-22T10:16:01.5','source':'agent','parent_id':'a-2',"
     "'tool_name':'file_editor','tool_call_id':'call_Zz02',"
     "'error':'Tool \\u0027file_editor\\u0027 got invalid arguments: path is required',"
     "'classification':{'kind':'agent_action','retryable':true,'user_action':'retry'},"
     "'kind':'AgentErrorEvent'}",
     {"tool_name", "tool_call_id", "error"}},
    {EV_SYSTEM_PROMPT,
     EV_SRC_AGENT,
     "{'id':'a3c1e0d2-77b4-4f0e-9d3e-1f2a6b8c4d55','timestamp':'2026-08-22T10:15:01.990101',"
     "'source':'agent','system_prompt':{'cache_prompt':false,'type':'text',"
     "'text':'You are OpenHands agent...'},"
     "'tools':[{'description':'Execute a bash command...','action_type':'TerminalAction',"
     "'observation_type':'TerminalObservation','annotations':{'title':'terminal',"
     "'readOnlyHint':false},'kind':'TerminalTool','title':'terminal'}],"
     "'dynamic_context':{'cache_prompt':false,'type':'text','text':'Repository: acme/app'},"
     "'kind':'SystemPromptEvent'}",
     {"system_prompt", "tools"}},
    {EV_PAUSE,
     EV_SRC_USER,
     "{'id':'p-1','timestamp':'2026-08-22T10:17:00','source':'user','parent_id':'e-1',"
     "'kind':'PauseEvent'}",
     {NULL}},
    {EV_INTERRUPT,
     EV_SRC_USER,
     "{'id':'i-1','timestamp':'2026-08-22T10:17:01.000200','source':'user','parent_id':'p-1',"
     "'kind':'InterruptEvent'}",
     {NULL}},
    {EV_CONDENSATION,
     EV_SRC_ENVIRONMENT,
     "{'id':'c-1','timestamp':'2026-08-22T10:18:00.100000','source':'environment',"
     "'parent_id':'i-1','forgotten_event_ids':['a-1','e-1'],"
     "'summary':'User asked for X; agent edited a.py','summary_offset':2,"
     "'llm_response_id':'chatcmpl-91','kind':'Condensation'}",
     {"llm_response_id"}},
    {EV_CONDENSATION_REQUEST,
     EV_SRC_ENVIRONMENT,
     "{'id':'cr-1','timestamp':'2026-08-22T10:17:59.9','source':'environment',"
     "'parent_id':'i-1','kind':'CondensationRequest'}",
     {NULL}},
    {EV_CONDENSATION_SUMMARY,
     EV_SRC_ENVIRONMENT,
     "{'id':'c-1-summary','timestamp':'2026-08-22T10:18:00.100001','source':'environment',"
     "'summary':'User asked for X; agent edited a.py','kind':'CondensationSummaryEvent'}",
     {"summary"}},
    {EV_STATE_UPDATE,
     EV_SRC_ENVIRONMENT,
     "{'id':'s-1','timestamp':'2026-08-22T10:18:01.000001','source':'environment',"
     "'key':'full_state','value':{'id':'9f1c0000-0000-4000-8000-000000000000',"
     "'execution_status':'idle','max_iterations':500,'stuck_detection':true,"
     "'agent':{'llm':{'model':'claude-sonnet-4','usage_id':'agent'},'kind':'Agent'},"
     "'stats':{'usage_to_metrics':{}},'tags':{},'agent_state':{},'leaf_event_id':'c-1'},"
     "'kind':'ConversationStateUpdateEvent'}",
     {NULL}},
    {EV_CONVERSATION_ERROR,
     EV_SRC_ENVIRONMENT,
     "{'id':'ce-1','timestamp':'2026-08-22T10:19:00.000002','source':'environment',"
     "'parent_id':'c-1','code':'MaxIterationsReached',"
     "'detail':'Agent reached maximum iterations limit (500).',"
     "'classification':{'kind':'agent_action','retryable':false,'user_action':'none'},"
     "'kind':'ConversationErrorEvent'}",
     {"source", "code", "detail"}},
    {EV_HOOK_EXECUTION,
     EV_SRC_HOOK,
     "{'id':'h-1','timestamp':'2026-08-22T10:15:09.400000','source':'hook',"
     "'parent_id':'7c4e9a10-3b5d-4e61-8f70-2a9b1c3d4e5f','hook_event_type':'PreToolUse',"
     "'hook_command':'.openhands/hooks/check.sh','tool_name':'terminal','success':true,"
     "'blocked':true,'exit_code':2,'stdout':'','stderr':'rm -rf is not allowed',"
     "'reason':'dangerous command','action_id':'7c4e9a10-3b5d-4e61-8f70-2a9b1c3d4e5f',"
     "'hook_input':{'event_type':'PreToolUse','tool_name':'terminal',"
     "'tool_input':{'command':'rm -rf /'}},'kind':'HookExecutionEvent'}",
     {"hook_event_type", "hook_command", "success", "exit_code"}},
    {EV_LLM_COMPLETION_LOG,
     EV_SRC_ENVIRONMENT,
     "{'id':'l-1','timestamp':'2026-08-22T10:15:09.300000','source':'environment',"
     "'filename':'anthropic__claude-sonnet-4-1787393709.300.json',"
     "'log_data':'{\\'messages\\': [], \\'response\\': {\\'id\\': \\'chatcmpl-77ab01\\'}}',"
     "'model_name':'anthropic/claude-sonnet-4','usage_id':'agent',"
     "'kind':'LLMCompletionLogEvent'}",
     {"filename", "log_data"}},
    {EV_STREAMING_DELTA,
     EV_SRC_AGENT,
     "{'id':'d-1','timestamp':'2026-08-22T10:16:39.900000','source':'agent',"
     "'content':'Done - the te','kind':'StreamingDeltaEvent'}",
     {NULL}},
    {EV_TOKEN,
     EV_SRC_AGENT,
     "{'id':'t-1','timestamp':'2026-08-22T10:16:40.000000','source':'agent',"
     "'prompt_token_ids':[151644,8948,198],'response_token_ids':[40,1079,0],"
     "'kind':'TokenEvent'}",
     {"source", "prompt_token_ids", "response_token_ids"}},
    {EV_ACP_TOOL_CALL,
     EV_SRC_AGENT,
     "{'id':'acp-1','timestamp':'2026-08-22T10:20:00.000003','source':'agent',"
     "'tool_call_id':'toolu_01A','title':'Edit src/config.py','status':'completed',"
     "'tool_kind':'edit','raw_input':{'file_path':'src/config.py','old_string':'a',"
     "'new_string':'b'},'raw_output':'ok','content':[{'type':'diff','path':'src/config.py',"
     "'oldText':'a','newText':'b'}],'is_error':false,'kind':'ACPToolCallEvent'}",
     {"tool_call_id", "title"}},
    {EV_SERVER_ERROR,
     EV_SRC_ENVIRONMENT,
     "{'id':'se-1','timestamp':'2026-08-22T10:21:00.000004','source':'environment',"
     "'code':'MCPConnectionError','detail':'could not reach the fetch MCP server',"
     "'kind':'ServerErrorEvent'}",
     {"source", "code", "detail"}},
};
#define N_EXAMPLES (sizeof(EXAMPLES) / sizeof(EXAMPLES[0]))

static bool is_required(const example *x, const char *key)
{
    for (size_t i = 0; i < 6 && x->required[i] != NULL; i++)
        if (strcmp(x->required[i], key) == 0)
            return true;
    return false;
}

static json_t *example_obj(ev_kind k)
{
    for (size_t i = 0; i < N_EXAMPLES; i++)
        if (EXAMPLES[i].kind == k)
            return jobj(EXAMPLES[i].json);
    ck_abort_msg("no example for kind %d", (int)k);
    return NULL;
}

/* The example of kind k with member `key` set to the value `val` (', as
 * everywhere). */
static json_t *with(ev_kind k, const char *key, const char *val)
{
    json_t *o = example_obj(k);
    char *text = jq(val);
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    ck_assert_msg(v != NULL, "bad test value %s", text);
    free(text);
    json_object_set_new(o, key, v);
    return o;
}

/* --------------------------------------------------------- every kind --- */

START_TEST(test_every_kind_parses)
{
    bool seen[EV_KIND_COUNT] = {false};
    for (size_t i = 0; i < N_EXAMPLES; i++) {
        const example *x = &EXAMPLES[i];
        char *text = jq(x->json);
        ev e;
        char err[256] = "";
        ck_assert_msg(ev_parse(text, strlen(text), &e, err, sizeof(err)) == 0, "%s", err);
        ck_assert_int_eq(e.kind, x->kind);
        ck_assert_int_eq(e.source, x->source);
        ck_assert_ptr_nonnull(e.id);
        ck_assert_ptr_nonnull(e.timestamp);
        ck_assert_str_eq(ev_string(&e, "id"), e.id);
        seen[x->kind] = true;
        ev_free(&e);
        ck_assert_ptr_null(e.doc);
        free(text);
    }
    for (int k = EV_INVALID + 1; k < EV_KIND_COUNT; k++)
        ck_assert_msg(seen[k], "no example of %s", ev_kind_name((ev_kind)k));
}
END_TEST

START_TEST(test_exposed_fields)
{
    ev e;
    char *t = jq(EXAMPLES[1].json); /* the action */
    ck_assert_int_eq(ev_parse(t, strlen(t), &e, NULL, 0), 0);
    ck_assert_str_eq(e.id, "7c4e9a10-3b5d-4e61-8f70-2a9b1c3d4e5f");
    ck_assert_str_eq(e.timestamp, "2026-08-22T10:15:09.331207");
    ck_assert_str_eq(e.parent_id, "5b0f7c1e-2d4a-4c53-9a51-0d7f3b2e9c11");
    ck_assert_str_eq(e.tool_call_id, "call_Qm2x91");
    ck_assert_str_eq(e.tool_name, "terminal");
    ck_assert_str_eq(e.llm_response_id, "chatcmpl-77ab01");
    ck_assert_ptr_null(e.state_key);
    ev_free(&e);
    free(t);

    static const ev_kind obs[] = {EV_OBSERVATION, EV_USER_REJECT, EV_AGENT_ERROR};
    for (size_t i = 0; i < 3; i++) {
        json_t *o = example_obj(obs[i]);
        ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
        ck_assert_ptr_nonnull(e.tool_call_id);
        ck_assert_ptr_nonnull(e.tool_name);
        ck_assert_ptr_null(e.llm_response_id);
        ev_free(&e);
        json_decref(o);
    }

    json_t *o = with(EV_MESSAGE, "llm_response_id", "'chatcmpl-1'");
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    ck_assert_str_eq(e.llm_response_id, "chatcmpl-1");
    ck_assert_ptr_null(e.tool_call_id);
    ev_free(&e);
    json_object_set_new(o, "llm_response_id", json_null()); /* null is "none" */
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    ck_assert_ptr_null(e.llm_response_id);
    ev_free(&e);
    json_decref(o);

    o = example_obj(EV_STATE_UPDATE);
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    ck_assert_str_eq(e.state_key, "full_state");
    ck_assert_ptr_null(e.parent_id);
    ck_assert_ptr_null(e.tool_call_id);
    ev_free(&e);
    json_decref(o);

    /* Condensation and ACP events carry these names too, but they are
     * not what the tool-call rules look at. */
    o = example_obj(EV_CONDENSATION);
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    ck_assert_ptr_null(e.llm_response_id);
    ev_free(&e);
    json_decref(o);
    o = example_obj(EV_ACP_TOOL_CALL);
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    ck_assert_ptr_null(e.tool_call_id);
    ev_free(&e);
    json_decref(o);
}
END_TEST

/* A slim ev keeps every field, as its own copies, and no tree. */
START_TEST(test_slim_keeps_the_fields)
{
    static const ev_kind kinds[] = {EV_ACTION, EV_OBSERVATION, EV_MESSAGE, EV_STATE_UPDATE};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        json_t *o = example_obj(kinds[i]);
        ev whole, slim;
        ck_assert_int_eq(ev_from_json(o, &whole, NULL, 0), 0);
        ck_assert_int_eq(ev_from_json(o, &slim, NULL, 0), 0);
        ck_assert_int_eq(ev_slim(&slim), 0);
        ck_assert_ptr_null(slim.doc);
        ck_assert_int_eq(slim.kind, whole.kind);
        ck_assert_int_eq(slim.source, whole.source);
        const char *w[] = {whole.id,        whole.timestamp,       whole.parent_id,
                           whole.tool_call_id, whole.llm_response_id, whole.tool_name,
                           whole.state_key};
        const char *s[] = {slim.id,        slim.timestamp,       slim.parent_id,
                           slim.tool_call_id, slim.llm_response_id, slim.tool_name,
                           slim.state_key};
        size_t len[sizeof(w) / sizeof(w[0])];
        for (size_t k = 0; k < sizeof(w) / sizeof(w[0]); k++) {
            ck_assert_int_eq(w[k] == NULL, s[k] == NULL);
            if (w[k] != NULL)
                ck_assert_str_eq(s[k], w[k]);
            len[k] = w[k] != NULL ? strlen(w[k]) : 0;
        }
        json_decref(o); /* the slim ev needs nothing of the tree (ASan) */
        ev_free(&whole);
        for (size_t k = 0; k < sizeof(w) / sizeof(w[0]); k++)
            ck_assert_uint_eq(s[k] != NULL ? strlen(s[k]) : 0, len[k]);
        ev_free(&slim);
    }
    /* slim twice: the second copies from the first's own block */
    json_t *o = example_obj(EV_ACTION);
    ev e;
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    json_decref(o);
    ck_assert_int_eq(ev_slim(&e), 0);
    ck_assert_int_eq(ev_slim(&e), 0);
    ck_assert_str_eq(e.tool_call_id, "call_Qm2x91");
    ev_free(&e);
}
END_TEST

START_TEST(test_default_sources)
{
    static const struct {
        ev_kind k;
        ev_source src;
    } defaults[] = {
        {EV_ACTION, EV_SRC_AGENT},
        {EV_OBSERVATION, EV_SRC_ENVIRONMENT},
        {EV_USER_REJECT, EV_SRC_ENVIRONMENT},
        {EV_AGENT_ERROR, EV_SRC_AGENT},
        {EV_SYSTEM_PROMPT, EV_SRC_AGENT},
        {EV_PAUSE, EV_SRC_USER},
        {EV_INTERRUPT, EV_SRC_USER},
        {EV_CONDENSATION, EV_SRC_ENVIRONMENT},
        {EV_CONDENSATION_REQUEST, EV_SRC_ENVIRONMENT},
        {EV_CONDENSATION_SUMMARY, EV_SRC_ENVIRONMENT},
        {EV_STATE_UPDATE, EV_SRC_ENVIRONMENT},
        {EV_HOOK_EXECUTION, EV_SRC_HOOK},
        {EV_LLM_COMPLETION_LOG, EV_SRC_ENVIRONMENT},
        {EV_STREAMING_DELTA, EV_SRC_AGENT},
        {EV_ACP_TOOL_CALL, EV_SRC_AGENT},
    };
    for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
        json_t *o = example_obj(defaults[i].k);
        json_object_del(o, "source");
        ev e;
        char err[256];
        ck_assert_msg(ev_from_json(o, &e, err, sizeof(err)) == 0, "%s", err);
        ck_assert_int_eq(e.source, defaults[i].src);
        /* the default is known, not written: the bytes stay as given */
        char *s = ev_text(&e);
        ck_assert_ptr_null(strstr(s, "\"source\""));
        free(s);
        ev_free(&e);
        json_decref(o);
    }
    /* and a given source wins over the default */
    json_t *o = with(EV_PAUSE, "source", "'environment'");
    ev e;
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    ck_assert_int_eq(e.source, EV_SRC_ENVIRONMENT);
    ev_free(&e);
    json_decref(o);
}
END_TEST

/* ---------------------------------------------------------- refusals --- */

START_TEST(test_required_fields)
{
    char want[256];
    for (size_t i = 0; i < N_EXAMPLES; i++) {
        const example *x = &EXAMPLES[i];
        const char *name = ev_kind_name(x->kind);
        for (size_t r = 0; r < 6 && x->required[r] != NULL; r++) {
            json_t *o = jobj(x->json);
            ck_assert_int_eq(json_object_del(o, x->required[r]), 0);
            snprintf(want, sizeof(want), "%s: missing required field '%s'", name, x->required[r]);
            assert_refused(o, want);
            json_decref(o);
        }
        /* everything else has a default upstream, and may be left out */
        json_t *all = jobj(x->json);
        const char *key;
        json_t *v;
        json_object_foreach(all, key, v)
        {
            if (strcmp(key, "kind") == 0 || is_required(x, key))
                continue;
            json_t *o = jobj(x->json);
            json_object_del(o, key);
            const char *got = verdict(o);
            ck_assert_msg(got[0] == '\0', "%s without %s: %s", name, key, got);
            json_decref(o);
        }
        json_decref(all);
        /* and the kind itself */
        json_t *o = jobj(x->json);
        json_object_del(o, "kind");
        assert_refused(o, "event: missing required field 'kind'");
        json_decref(o);
    }
}
END_TEST

START_TEST(test_unknown_top_level_field)
{
    char want[256];
    for (size_t i = 0; i < N_EXAMPLES; i++) {
        /* the fields a server is tempted to add */
        static const char *const extra[] = {"seq", "conversation_id", "index"};
        for (size_t j = 0; j < 3; j++) {
            json_t *o = jobj(EXAMPLES[i].json);
            json_object_set_new(o, extra[j], json_integer(7));
            snprintf(want, sizeof(want), "%s: unknown field '%s'", ev_kind_name(EXAMPLES[i].kind),
                     extra[j]);
            assert_refused(o, want);
            json_decref(o);
        }
    }
    /* a member of one kind is unknown to another */
    json_t *o = with(EV_PAUSE, "tool_call_id", "'c1'");
    assert_refused(o, "PauseEvent: unknown field 'tool_call_id'");
    json_decref(o);
    o = with(EV_AGENT_ERROR, "action_id", "'a-1'"); /* AgentErrorEvent has none */
    assert_refused(o, "AgentErrorEvent: unknown field 'action_id'");
    json_decref(o);
    /* even when null */
    o = with(EV_OBSERVATION, "seq", "null");
    assert_refused(o, "ObservationEvent: unknown field 'seq'");
    json_decref(o);
}
END_TEST

static const struct {
    ev_kind k;
    const char *key, *val, *err; /* err NULL: accepted */
} TYPE_CASES[] = {
    /* base fields */
    {EV_ACTION, "id", "''", "ActionEvent: field 'id' must be a non-empty string"},
    {EV_ACTION, "id", "7", "ActionEvent: field 'id' must be a non-empty string"},
    {EV_ACTION, "id", "null", "ActionEvent: field 'id' must be a non-empty string"},
    {EV_ACTION, "id", "'__root__'",
     "ActionEvent: field 'id' may not be the reserved id '__root__'"},
    {EV_ACTION, "id", "'x\\u0000y'", "ActionEvent: field 'id' must not contain U+0000"},
    {EV_ACTION, "id", "'__root__x'", NULL},
    {EV_PAUSE, "timestamp", "1787393702", "PauseEvent: field 'timestamp' must be a string"},
    {EV_PAUSE, "timestamp", "null", "PauseEvent: field 'timestamp' must be a string"},
    {EV_PAUSE, "timestamp", "'yesterday'", NULL}, /* str upstream, no format */
    {EV_PAUSE, "parent_id", "5", "PauseEvent: field 'parent_id' must be a string"},
    {EV_PAUSE, "parent_id", "null", NULL},
    {EV_PAUSE, "parent_id", "'__root__'", NULL},
    {EV_PAUSE, "source", "'admin'",
     "PauseEvent: field 'source' must be one of agent, user, environment, hook"},
    {EV_MESSAGE, "source", "null",
     "MessageEvent: field 'source' must be one of agent, user, environment, hook"},
    {EV_MESSAGE, "source", "'hook'", NULL},
    {EV_PAUSE, "kind", "5", "event: field 'kind' must be a string"},
    {EV_PAUSE, "kind", "'FooEvent'", "unknown event kind 'FooEvent'"},
    {EV_PAUSE, "kind", "'openhands.sdk.event.user_action.PauseEvent'",
     "unknown event kind 'openhands.sdk.event.user_action.PauseEvent'"},
    {EV_PAUSE, "kind", "'pauseevent'", "unknown event kind 'pauseevent'"},
    /* MessageEvent and its Message */
    {EV_MESSAGE, "llm_message", "'hi'", "MessageEvent: field 'llm_message' must be an object"},
    {EV_MESSAGE, "llm_message", "null", "MessageEvent: field 'llm_message' must be an object"},
    {EV_MESSAGE, "llm_message", "{'content':[]}",
     "MessageEvent: missing required field 'llm_message.role'"},
    {EV_MESSAGE, "llm_message", "{'role':'robot'}",
     "MessageEvent: field 'llm_message.role' must be one of user, system, assistant, tool"},
    {EV_MESSAGE, "llm_message", "{'role':'user','content':'plain text'}", NULL},
    {EV_MESSAGE, "llm_message", "{'role':'user','content':null}", NULL},
    {EV_MESSAGE, "llm_message", "{'role':'user','content':{}}",
     "MessageEvent: field 'llm_message.content' must be a list of content"},
    {EV_MESSAGE, "llm_message", "{'role':'user','content':[{'type':'text','text':'x','foo':1}]}",
     "MessageEvent: unknown field 'llm_message.content[0].foo'"},
    {EV_MESSAGE, "llm_message", "{'role':'user','content':[{'type':'text','text':5}]}",
     "MessageEvent: field 'llm_message.content[0].text' must be a string"},
    {EV_MESSAGE, "llm_message", "{'role':'user','content':[{'type':'text'}]}",
     "MessageEvent: missing required field 'llm_message.content[0].text'"},
    {EV_MESSAGE, "llm_message",
     "{'role':'user','content':[{'type':'text','text':'x','cache_prompt':'no'}]}",
     "MessageEvent: field 'llm_message.content[0].cache_prompt' must be a boolean"},
    {EV_MESSAGE, "llm_message", "{'role':'user','content':[{'type':'video','url':'x'}]}",
     "MessageEvent: field 'llm_message.content[0].type' must be one of text, image"},
    {EV_MESSAGE, "llm_message", "{'role':'user','content':[null]}",
     "MessageEvent: field 'llm_message.content[0]' must be an object"},
    {EV_MESSAGE, "llm_message",
     "{'role':'user','content':[{'type':'image','image_urls':'data:x'}]}",
     "MessageEvent: field 'llm_message.content[0].image_urls' must be a list of strings"},
    {EV_MESSAGE, "llm_message",
     "{'role':'user','content':[{'cache_prompt':false,'type':'image',"
     "'image_urls':['data:image/png;base64,iVBORw0K','https://x.test/a.png']},"
     "{'text':'no type: a TextContent'},{'image_urls':[]}]}",
     NULL},
    /* upstream drops this retired member of TextContent when loading */
    {EV_MESSAGE, "llm_message",
     "{'role':'user','content':[{'type':'text','text':'x','enable_truncation':true}]}", NULL},
    /* Message and ImageContent ignore what they do not know */
    {EV_MESSAGE, "llm_message",
     "{'role':'user','content':[{'type':'image','image_urls':[],'detail':'high'}],"
     "'cache_enabled':true,'vision_enabled':false,'future_member':{'a':1}}",
     NULL},
    {EV_MESSAGE, "llm_message",
     "{'role':'assistant','content':[],'tool_calls':[{'id':'c1','name':'t','arguments':'{}',"
     "'origin':'responses','responses_item_id':'fc_1'}],'reasoning_content':'r',"
     "'thinking_blocks':[{'type':'thinking','thinking':'hm','signature':'sig'},"
     "{'type':'redacted_thinking','data':'xx'}],'responses_reasoning_item':{'id':'rs_1',"
     "'summary':['a'],'content':null,'encrypted_content':'enc','status':'completed'}}",
     NULL},
    {EV_MESSAGE, "llm_message", "{'role':'tool','tool_call_id':'c1','name':'terminal'}", NULL},
    {EV_MESSAGE, "llm_message", "{'role':'assistant','tool_calls':[{'id':'c1','name':'t'}]}",
     "MessageEvent: missing required field 'llm_message.tool_calls[0].arguments'"},
    {EV_MESSAGE, "llm_message", "{'role':'user','thinking_blocks':null}",
     "MessageEvent: field 'llm_message.thinking_blocks' must be a list"},
    {EV_MESSAGE, "llm_message", "{'role':'user','name':7}",
     "MessageEvent: field 'llm_message.name' must be a string"},
    {EV_MESSAGE, "llm_message", "{'role':'user','responses_reasoning_item':{'summary':[1]}}",
     "MessageEvent: field 'llm_message.responses_reasoning_item.summary[0]' must be a string"},
    {EV_MESSAGE, "activated_skills", "[1]",
     "MessageEvent: field 'activated_skills[0]' must be a string"},
    {EV_MESSAGE, "activated_skills", "null",
     "MessageEvent: field 'activated_skills' must be a list of strings"},
    {EV_MESSAGE, "activated_skills", "['github','docker']", NULL},
    {EV_MESSAGE, "extended_content", "[{'type':'image','image_urls':[]}]",
     "MessageEvent: field 'extended_content[0].type' must be one of text"},
    {EV_MESSAGE, "extended_content", "[{'type':'text','text':'ctx'}]", NULL},
    {EV_MESSAGE, "sender", "'agent-2'", NULL},
    {EV_MESSAGE, "sender", "5", "MessageEvent: field 'sender' must be a string"},
    {EV_MESSAGE, "critic_result", "{'score':0.83,'message':'looks done','metadata':{'x':1}}", NULL},
    {EV_MESSAGE, "critic_result", "{'score':1,'future':true}", NULL},
    {EV_MESSAGE, "critic_result", "{'score':1.5}",
     "MessageEvent: field 'critic_result.score' must be a number between 0 and 1"},
    {EV_MESSAGE, "critic_result", "{'message':'x'}",
     "MessageEvent: missing required field 'critic_result.score'"},
    /* ActionEvent */
    {EV_ACTION, "tool_call_id", "5", "ActionEvent: field 'tool_call_id' must be a string"},
    {EV_ACTION, "tool_name", "['terminal']", "ActionEvent: field 'tool_name' must be a string"},
    {EV_ACTION, "llm_response_id", "null", "ActionEvent: field 'llm_response_id' must be a string"},
    {EV_ACTION, "thought", "'thinking'", "ActionEvent: field 'thought' must be a list"},
    {EV_ACTION, "thought", "null", "ActionEvent: field 'thought' must be a list"},
    {EV_ACTION, "thought", "[]", NULL},
    {EV_ACTION, "thought", "[{'text':5}]", "ActionEvent: field 'thought[0].text' must be a string"},
    {EV_ACTION, "thought", "[{'text':'a','image_urls':[]}]",
     "ActionEvent: unknown field 'thought[0].image_urls'"},
    {EV_ACTION, "security_risk", "'EXTREME'",
     "ActionEvent: field 'security_risk' must be one of UNKNOWN, LOW, MEDIUM, HIGH"},
    {EV_ACTION, "security_risk", "'low'",
     "ActionEvent: field 'security_risk' must be one of UNKNOWN, LOW, MEDIUM, HIGH"},
    {EV_ACTION, "security_risk", "null",
     "ActionEvent: field 'security_risk' must be one of UNKNOWN, LOW, MEDIUM, HIGH"},
    {EV_ACTION, "security_risk", "'HIGH'", NULL},
    {EV_ACTION, "action", "'ls'", "ActionEvent: field 'action' must be an object"},
    {EV_ACTION, "action", "{'command':'ls'}",
     "ActionEvent: field 'action' must have a string 'kind'"},
    {EV_ACTION, "action", "{'command':'ls','kind':3}",
     "ActionEvent: field 'action' must have a string 'kind'"},
    {EV_ACTION, "action", "null", NULL}, /* a call that was not executable */
    {EV_ACTION, "action", "{'query':'x','kind':'MyCustomSearchAction'}", NULL},
    {EV_ACTION, "tool_call", "{'id':'c','name':'t','arguments':{},'origin':'completion'}",
     "ActionEvent: field 'tool_call.arguments' must be a string"},
    {EV_ACTION, "tool_call", "{'id':'c','name':'t','arguments':'{}','origin':'chat'}",
     "ActionEvent: field 'tool_call.origin' must be one of completion, responses"},
    {EV_ACTION, "tool_call", "{'id':'c','name':'t','arguments':'{}'}",
     "ActionEvent: missing required field 'tool_call.origin'"},
    {EV_ACTION, "tool_call",
     "{'id':'c','name':'t','arguments':'{}','origin':'responses',"
     "'responses_item_id':null,'type':'function'}",
     NULL},
    {EV_ACTION, "thinking_blocks", "[{'type':'thinking'}]",
     "ActionEvent: missing required field 'thinking_blocks[0].thinking'"},
    {EV_ACTION, "thinking_blocks", "[{'type':'redacted_thinking'}]",
     "ActionEvent: missing required field 'thinking_blocks[0].data'"},
    {EV_ACTION, "thinking_blocks", "[{'type':'scratch','thinking':'x'}]",
     "ActionEvent: field 'thinking_blocks[0].type' must be one of thinking, redacted_thinking"},
    {EV_ACTION, "thinking_blocks",
     "[{'thinking':'a','signature':null},{'data':'b'},{'type':'thinking','thinking':'c'}]", NULL},
    {EV_ACTION, "responses_reasoning_item", "[]",
     "ActionEvent: field 'responses_reasoning_item' must be an object"},
    {EV_ACTION, "summary", "['x']", "ActionEvent: field 'summary' must be a string"},
    /* ObservationEvent */
    {EV_OBSERVATION, "tool_name", "null", "ObservationEvent: field 'tool_name' must be a string"},
    {EV_OBSERVATION, "observation", "null",
     "ObservationEvent: field 'observation' must be an object"},
    {EV_OBSERVATION, "observation", "{'content':[]}",
     "ObservationEvent: field 'observation' must have a string 'kind'"},
    {EV_OBSERVATION, "observation",
     "{'content':[{'type':'text','text':'x'}],'is_error':true,'kind':'WeirdToolObservation'}",
     NULL},
    {EV_OBSERVATION, "action_id", "7", "ObservationEvent: field 'action_id' must be a string"},
    {EV_OBSERVATION, "extended_content", "[5]",
     "ObservationEvent: field 'extended_content[0]' must be an object"},
    /* UserRejectObservation */
    {EV_USER_REJECT, "rejection_source", "'admin'",
     "UserRejectObservation: field 'rejection_source' must be one of user, hook"},
    {EV_USER_REJECT, "rejection_source", "'hook'", NULL},
    {EV_USER_REJECT, "rejection_reason", "null",
     "UserRejectObservation: field 'rejection_reason' must be a string"},
    /* AgentErrorEvent and ErrorClassification */
    {EV_AGENT_ERROR, "error", "{'msg':'x'}", "AgentErrorEvent: field 'error' must be a string"},
    {EV_AGENT_ERROR, "classification", "{'kind':'oops','retryable':true}",
     "AgentErrorEvent: field 'classification.kind' must be one of auth, quota, rate_limit, "
     "config, transient, agent_action, internal, unknown"},
    {EV_AGENT_ERROR, "classification", "{'kind':'unknown'}",
     "AgentErrorEvent: missing required field 'classification.retryable'"},
    {EV_AGENT_ERROR, "classification", "{'kind':'unknown','retryable':false,'extra':1}",
     "AgentErrorEvent: unknown field 'classification.extra'"},
    {EV_AGENT_ERROR, "classification", "{'kind':'auth','retryable':false,'user_action':'call'}",
     "AgentErrorEvent: field 'classification.user_action' must be one of none, retry, settings"},
    {EV_AGENT_ERROR, "classification",
     "{'kind':'rate_limit','retryable':true,'user_action':'retry','error_id':'e1'}", NULL},
    {EV_AGENT_ERROR, "classification", "null", NULL},
    /* SystemPromptEvent */
    {EV_SYSTEM_PROMPT, "system_prompt", "'You are...'",
     "SystemPromptEvent: field 'system_prompt' must be an object"},
    {EV_SYSTEM_PROMPT, "system_prompt", "{'type':'text','text':'x','cache_prompt':true}", NULL},
    {EV_SYSTEM_PROMPT, "tools", "{}", "SystemPromptEvent: field 'tools' must be a list"},
    {EV_SYSTEM_PROMPT, "tools", "[]", NULL},
    {EV_SYSTEM_PROMPT, "tools", "[{'description':'x'}]",
     "SystemPromptEvent: field 'tools[0]' must have a string 'kind'"},
    {EV_SYSTEM_PROMPT, "dynamic_context", "{'type':'text'}",
     "SystemPromptEvent: missing required field 'dynamic_context.text'"},
    /* Condensation */
    {EV_CONDENSATION, "summary_offset", "-1",
     "Condensation: field 'summary_offset' must be a non-negative integer"},
    {EV_CONDENSATION, "summary_offset", "1.0",
     "Condensation: field 'summary_offset' must be a non-negative integer"},
    {EV_CONDENSATION, "summary_offset", "0", NULL},
    {EV_CONDENSATION, "forgotten_event_ids", "'a-1'",
     "Condensation: field 'forgotten_event_ids' must be a list of strings"},
    {EV_CONDENSATION, "forgotten_event_ids", "[]", NULL},
    {EV_CONDENSATION, "llm_response_id", "null",
     "Condensation: field 'llm_response_id' must be a string"},
    {EV_CONDENSATION_SUMMARY, "summary", "null",
     "CondensationSummaryEvent: field 'summary' must be a string"},
    /* ConversationStateUpdateEvent: value is anything */
    {EV_STATE_UPDATE, "key", "1", "ConversationStateUpdateEvent: field 'key' must be a string"},
    {EV_STATE_UPDATE, "value", "'running'", NULL},
    {EV_STATE_UPDATE, "value", "[1,'a',null,{'b':false}]", NULL},
    {EV_STATE_UPDATE, "value", "null", NULL},
    /* ConversationErrorEvent */
    {EV_CONVERSATION_ERROR, "detail", "[]",
     "ConversationErrorEvent: field 'detail' must be a string"},
    {EV_CONVERSATION_ERROR, "classification", "{'kind':'internal','retryable':'no'}",
     "ConversationErrorEvent: field 'classification.retryable' must be a boolean"},
    /* HookExecutionEvent */
    {EV_HOOK_EXECUTION, "hook_event_type", "'PreCommit'",
     "HookExecutionEvent: field 'hook_event_type' must be one of PreToolUse, PostToolUse, "
     "UserPromptSubmit, SessionStart, SessionEnd, Stop"},
    {EV_HOOK_EXECUTION, "hook_event_type", "'Stop'", NULL},
    {EV_HOOK_EXECUTION, "success", "'yes'",
     "HookExecutionEvent: field 'success' must be a boolean"},
    {EV_HOOK_EXECUTION, "success", "1", "HookExecutionEvent: field 'success' must be a boolean"},
    {EV_HOOK_EXECUTION, "exit_code", "1.5",
     "HookExecutionEvent: field 'exit_code' must be an integer"},
    {EV_HOOK_EXECUTION, "exit_code", "true",
     "HookExecutionEvent: field 'exit_code' must be an integer"},
    {EV_HOOK_EXECUTION, "exit_code", "-1", NULL},
    {EV_HOOK_EXECUTION, "hook_input", "[]",
     "HookExecutionEvent: field 'hook_input' must be an object"},
    {EV_HOOK_EXECUTION, "stdout", "null", "HookExecutionEvent: field 'stdout' must be a string"},
    {EV_HOOK_EXECUTION, "message_id", "'m-1'", NULL},
    /* LLMCompletionLogEvent */
    {EV_LLM_COMPLETION_LOG, "log_data", "{}",
     "LLMCompletionLogEvent: field 'log_data' must be a string"},
    {EV_LLM_COMPLETION_LOG, "model_name", "null",
     "LLMCompletionLogEvent: field 'model_name' must be a string"},
    /* StreamingDeltaEvent */
    {EV_STREAMING_DELTA, "content", "1", "StreamingDeltaEvent: field 'content' must be a string"},
    {EV_STREAMING_DELTA, "reasoning_content", "'Let me think'", NULL},
    /* TokenEvent */
    {EV_TOKEN, "prompt_token_ids", "[1,'2']",
     "TokenEvent: field 'prompt_token_ids[1]' must be an integer"},
    {EV_TOKEN, "response_token_ids", "[1.5]",
     "TokenEvent: field 'response_token_ids[0]' must be an integer"},
    {EV_TOKEN, "response_token_ids", "null",
     "TokenEvent: field 'response_token_ids' must be a list of integers"},
    {EV_TOKEN, "response_token_ids", "[]", NULL},
    /* ACPToolCallEvent */
    {EV_ACP_TOOL_CALL, "content", "{}", "ACPToolCallEvent: field 'content' must be a list"},
    {EV_ACP_TOOL_CALL, "content", "[1,'x',null]", NULL},
    {EV_ACP_TOOL_CALL, "is_error", "0", "ACPToolCallEvent: field 'is_error' must be a boolean"},
    {EV_ACP_TOOL_CALL, "raw_input", "'cat a.txt'", NULL},
    {EV_ACP_TOOL_CALL, "title", "null", "ACPToolCallEvent: field 'title' must be a string"},
    /* ServerErrorEvent */
    {EV_SERVER_ERROR, "code", "500", "ServerErrorEvent: field 'code' must be a string"},
};

START_TEST(test_types_and_enums)
{
    for (size_t i = 0; i < sizeof(TYPE_CASES) / sizeof(TYPE_CASES[0]); i++) {
        json_t *o = with(TYPE_CASES[i].k, TYPE_CASES[i].key, TYPE_CASES[i].val);
        const char *got = verdict(o);
        const char *want = TYPE_CASES[i].err ? TYPE_CASES[i].err : "";
        ck_assert_msg(strcmp(got, want) == 0, "%s.%s = %s: got \"%s\", expected \"%s\"",
                      ev_kind_name(TYPE_CASES[i].k), TYPE_CASES[i].key, TYPE_CASES[i].val, got,
                      want);
        json_decref(o);
    }
}
END_TEST

START_TEST(test_not_an_event)
{
    static const struct {
        const char *text, *err;
    } cases[] = {
        {"[]", "event: must be a JSON object"},
        {"\"MessageEvent\"", "event: must be a JSON object"},
        {"null", "event: must be a JSON object"},
        {"{}", "event: missing required field 'kind'"},
        {"{\"kind\":null}", "event: field 'kind' must be a string"},
        {"{\"kind\":\"FooEvent\",\"id\":\"x\"}", "unknown event kind 'FooEvent'"},
        {"{\"kind\":\"Event\"}", "unknown event kind 'Event'"},
        {"{\"kind\":\"LLMConvertibleEvent\"}", "unknown event kind 'LLMConvertibleEvent'"},
        {"{\"kind\":\"PauseEvent\\u0000x\"}", "unknown event kind 'PauseEvent?x'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ev e;
        char err[256] = "";
        ck_assert_int_eq(ev_parse(cases[i].text, strlen(cases[i].text), &e, err, sizeof(err)),
                         -EINVAL);
        ck_assert_msg(strcmp(err, cases[i].err) == 0, "%s: got \"%s\"", cases[i].text, err);
        ck_assert_ptr_null(e.doc);
    }
    /* not JSON at all: the parser's reason, on one line */
    static const char *const bad[] = {
        "",
        "{",
        "{\"kind\":\"PauseEvent\"} trailing",
        "{\"kind\":\"PauseEvent\",}",
        "{'kind':'PauseEvent'}",
        "{\"kind\":\"PauseEvent\",\"source\":\"us\xffr\"}", /* not UTF-8 */
        "{\"kind\":\"PauseEvent\",\"id\":\"\\ud800\"}",     /* a lone surrogate */
        "{\"kind\":\"PauseEvent\",\"n\":NaN}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ev e;
        char err[256] = "";
        ck_assert_int_eq(ev_parse(bad[i], strlen(bad[i]), &e, err, sizeof(err)), -EINVAL);
        ck_assert_msg(strncmp(err, "invalid JSON: ", 14) == 0, "%s: got \"%s\"", bad[i], err);
        ck_assert_ptr_null(strchr(err, '\n'));
    }
    /* the length is honoured: the same bytes cut short are not an event */
    const char *ok = "{\"kind\":\"PauseEvent\"}";
    ev e;
    ck_assert_int_eq(ev_parse(ok, strlen(ok), &e, NULL, 0), 0);
    ev_free(&e);
    ck_assert_int_eq(ev_parse(ok, strlen(ok) - 1, &e, NULL, 0), -EINVAL);
    ck_assert_int_eq(ev_parse(NULL, 0, &e, NULL, 0), -EINVAL);
    ck_assert_int_eq(ev_parse(ok, strlen(ok), NULL, NULL, 0), -EINVAL);
    ck_assert_int_eq(ev_from_json(NULL, &e, NULL, 0), -EINVAL);
    ev_free(&e); /* a zeroed ev */
    ev_free(NULL);
}
END_TEST

START_TEST(test_messages_are_one_line)
{
    /* names from the input are cut and cleaned */
    json_t *o = with(EV_MESSAGE, "se\nq\x01", "1");
    assert_refused(o, "MessageEvent: unknown field 'se?q?'");
    json_decref(o);

    char longkey[300];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    o = example_obj(EV_PAUSE);
    json_object_set_new(o, longkey, json_true());
    const char *got = verdict(o);
    ck_assert_msg(strlen(got) < 120, "%s", got);
    ck_assert_ptr_nonnull(strstr(got, "kkk..."));
    json_decref(o);

    /* a multi-byte name cut at a character boundary */
    char wide[200] = "";
    for (int i = 0; i < 40; i++)
        strcat(wide, "\xc3\xa9"); /* é */
    o = example_obj(EV_PAUSE);
    json_object_set_new(o, wide, json_true());
    got = verdict(o);
    json_t *as_json = json_string(got); /* NULL if the message is not UTF-8 */
    ck_assert_msg(as_json != NULL, "message is not UTF-8: %s", got);
    json_decref(as_json);
    json_decref(o);

    /* a short buffer gets what fits, terminated, never half a character */
    o = with(EV_MESSAGE, "\xc3\xa9\xc3\xa9\xc3\xa9", "1");
    char *text = json_dumps(o, JSON_COMPACT);
    for (size_t len = 1; len < 48; len++) {
        char small[48];
        memset(small, 'Z', sizeof(small));
        ev e;
        ck_assert_int_eq(ev_parse(text, strlen(text), &e, small, len), -EINVAL);
        ck_assert_uint_lt(strlen(small), len);
        json_t *s = json_string(small);
        ck_assert_msg(s != NULL, "len %zu: not UTF-8", len);
        json_decref(s);
    }
    ev e;
    ck_assert_int_eq(ev_parse(text, strlen(text), &e, NULL, 0), -EINVAL);
    free(text);
    json_decref(o);

    const char *kind = "{\"kind\":\"\u00e9\u00e9\u00e9Event\"}";
    for (size_t len = 1; len < 32; len++) {
        char small[32];
        ck_assert_int_eq(ev_parse(kind, strlen(kind), &e, small, len), -EINVAL);
        json_t *s = json_string(small);
        ck_assert_msg(s != NULL, "len %zu: not UTF-8", len);
        json_decref(s);
    }
}
END_TEST

/* ------------------------------------------------------ serialization --- */

START_TEST(test_order_and_kind_last)
{
    const char *in = "{'kind':'ActionEvent','tool_name':'t','action':{'kind':'X','b':1,'c':null},"
                     "'source':'agent','thought':[],'parent_id':'p','id':'a','timestamp':'ts',"
                     "'tool_call_id':'c','tool_call':{'origin':'completion','id':'c','name':'t',"
                     "'arguments':'{}','responses_item_id':null},'llm_response_id':'r',"
                     "'summary':null,'critic_result':{'score':0.5,'metadata':{'kind':'k','z':1}}}";
    const char *want =
        "{'id':'a','timestamp':'ts','source':'agent','parent_id':'p','tool_name':'t',"
        "'action':{'b':1,'kind':'X'},'thought':[],'tool_call_id':'c','tool_call':{"
        "'origin':'completion','id':'c','name':'t','arguments':'{}'},'llm_response_id':'r',"
        "'critic_result':{'score':0.5,'metadata':{'z':1,'kind':'k'}},'kind':'ActionEvent'}";
    char *text = jq(in), *exp = jq(want);
    char *got = assert_stable(text);
    ck_assert_str_eq(got, exp);
    free(got);
    free(exp);
    free(text);

    /* only the top level puts the base fields first; nested objects keep
     * the order given, `kind` aside */
    text = jq("{'value':{'z':1,'id':'n','source':'s','kind':'K','a':[{'kind':'L','id':1}]},"
              "'key':'k','kind':'ConversationStateUpdateEvent','id':'e'}");
    got = assert_stable(text);
    exp = jq("{'id':'e','value':{'z':1,'id':'n','source':'s','a':[{'id':1,'kind':'L'}],"
             "'kind':'K'},'key':'k','kind':'ConversationStateUpdateEvent'}");
    ck_assert_str_eq(got, exp);
    free(got);
    free(exp);
    free(text);
}
END_TEST

START_TEST(test_nulls_dropped)
{
    char *text = jq("{'id':'s-2','source':'environment','parent_id':null,"
                    "'key':'agent_state','value':{'a':null,'b':{'c':null,'d':[null,1,{'e':null}]},"
                    "'f':[]},'kind':'ConversationStateUpdateEvent'}");
    char *got = assert_stable(text);
    /* members that are null go; array elements stay (they hold places);
     * empty lists and objects stay */
    char *exp = jq("{'id':'s-2','source':'environment','key':'agent_state','value':{'b':{'d':"
                   "[null,1,{}]},'f':[]},'kind':'ConversationStateUpdateEvent'}");
    ck_assert_str_eq(got, exp);
    free(got);
    free(exp);
    free(text);

    /* falsy values are not nulls */
    text = jq("{'kind':'HookExecutionEvent','hook_event_type':'Stop','hook_command':'',"
              "'success':false,'blocked':false,'exit_code':0,'stdout':'','tool_name':null}");
    got = assert_stable(text);
    exp = jq("{'hook_event_type':'Stop','hook_command':'','success':false,'blocked':false,"
             "'exit_code':0,'stdout':'','kind':'HookExecutionEvent'}");
    ck_assert_str_eq(got, exp);
    free(got);
    free(exp);
    free(text);

    /* ev_canonical_json on values that are not objects */
    json_t *v = json_null();
    char *s = ev_canonical_json(v);
    ck_assert_str_eq(s, "null");
    free(s);
    v = json_pack("[n, {s:n}, s]", "k", "x");
    s = ev_canonical_json(v);
    ck_assert_str_eq(s, "[null,{},\"x\"]");
    free(s);
    json_decref(v);
    ck_assert_ptr_null(ev_canonical_json(NULL));
    ck_assert_ptr_null(ev_serialize(NULL));
}
END_TEST

/* Upstream's own dumps (spec §1.5) are already canonical. */
START_TEST(test_upstream_dumps_are_canonical)
{
    for (size_t i = 0; i < N_EXAMPLES; i++) {
        ev_kind k = EXAMPLES[i].kind;
        /* Two objects where upstream does not put `kind` last: the
         * ErrorClassification's `kind` is a plain field, dumped first, and
         * a tool definition's computed `title` comes after its `kind`. The
         * kind-last rule moves them (see below). */
        if (k == EV_AGENT_ERROR || k == EV_CONVERSATION_ERROR || k == EV_SYSTEM_PROMPT)
            continue;
        char *text = jq(EXAMPLES[i].json);
        char *got = assert_stable(text);
        ck_assert_msg(strcmp(got, text) == 0, "%s:\n%s\n%s", ev_kind_name(k), got, text);
        free(got);
        free(text);
    }
    char *text = jq(EXAMPLES[4].json);
    char *got = assert_stable(text);
    ck_assert_ptr_nonnull(strstr(got,
                                 "\"classification\":{\"retryable\":true,\"user_action\":\"retry\","
                                 "\"kind\":\"agent_action\"}"));
    free(got);
    free(text);
    text = jq(EXAMPLES[5].json);
    got = assert_stable(text);
    ck_assert_ptr_nonnull(strstr(got, "\"title\":\"terminal\",\"kind\":\"TerminalTool\"}]"));
    free(got);
    free(text);
}
END_TEST

START_TEST(test_utf8_and_escapes)
{
    /* non-ASCII goes out as UTF-8, escaped or not on the way in */
    char *text = jq("{'kind':'StreamingDeltaEvent','content':'h\xc3\xa9llo \xe2\x80\x94 "
                    "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89 \\u00e9\\u2028\\ud83c\\udf89'}");
    char *got = assert_stable(text);
    ck_assert_str_eq(got, "{\"content\":\"h\xc3\xa9llo \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac "
                          "\xf0\x9f\x8e\x89 \xc3\xa9\xe2\x80\xa8\xf0\x9f\x8e\x89\","
                          "\"kind\":\"StreamingDeltaEvent\"}");
    free(got);
    free(text);

    /* quote, backslash and controls escaped (short forms where JSON has
     * them), slash and DEL not, U+0000 kept */
    const char *in = "{\"kind\":\"StreamingDeltaEvent\",\"content\":"
                     "\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u0001\\u001f\\u007f\\u0000e\"}";
    got = assert_stable(in);
    ck_assert_str_eq(got, "{\"content\":\"a\\\"b\\\\c/d\\b\\f\\n\\r\\t\\u0001\\u001f\x7f"
                          "\\u0000e\",\"kind\":\"StreamingDeltaEvent\"}");
    ev e;
    ck_assert_int_eq(ev_parse(in, strlen(in), &e, NULL, 0), 0);
    ck_assert_uint_eq(e.doc->node[rt_jdoc_get(e.doc, e.at, "content")].len, 17);
    ev_free(&e);
    free(got);

    /* keys are escaped the same way */
    in = "{\"kind\":\"ConversationStateUpdateEvent\",\"value\":{\"a\\\"\\n\\u00e9\":1}}";
    got = assert_stable(in);
    ck_assert_str_eq(got, "{\"value\":{\"a\\\"\\n\xc3\xa9\":1},"
                          "\"kind\":\"ConversationStateUpdateEvent\"}");
    free(got);
}
END_TEST

START_TEST(test_numbers)
{
    const char *in = "{\"kind\":\"ConversationStateUpdateEvent\",\"value\":[0.1,1e100,-0.0,1e-7,"
                     "123456789012345678,-9223372036854775808,1.5,1e16,100.0,0.0001,1e22,5e-324,"
                     "1.7976931348623157e308,2.5E-3,0.30000000000000004,1234567.125,0,-7,1E+2,"
                     "9007199254740993.0,0.00001234]}";
    char *got = assert_stable(in);
    ck_assert_str_eq(got, "{\"value\":[0.1,1e+100,-0.0,1e-07,123456789012345678,"
                          "-9223372036854775808,1.5,1e+16,100.0,0.0001,1e+22,5e-324,"
                          "1.7976931348623157e+308,0.0025,0.30000000000000004,1234567.125,0,-7,"
                          "100.0,9007199254740992.0,1.234e-05],"
                          "\"kind\":\"ConversationStateUpdateEvent\"}");
    free(got);

    /* every double survives, bit for bit */
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 20000; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        double d;
        memcpy(&d, &state, sizeof(d));
        if (!isfinite(d))
            continue;
        json_t *r = json_real(d);
        char *s = ev_canonical_json(r);
        ck_assert_ptr_nonnull(s);
        json_t *back = json_loads(s, JSON_DECODE_ANY, NULL);
        ck_assert_msg(json_is_real(back), "%s is not read back as a real", s);
        double b = json_real_value(back);
        ck_assert_msg(memcmp(&b, &d, sizeof(d)) == 0, "%.17g became %s", d, s);
        json_decref(back);
        json_decref(r);
        free(s);
    }
    /* out of range for jansson's integers: refused, not wrapped */
    const char *big = "{\"kind\":\"TokenEvent\",\"source\":\"agent\",\"prompt_token_ids\":"
                      "[99999999999999999999],\"response_token_ids\":[]}";
    ev e;
    ck_assert_int_eq(ev_parse(big, strlen(big), &e, NULL, 0), -EINVAL);
}
END_TEST

START_TEST(test_large_event)
{
    const size_t n = 1u << 20;
    /* a 1 MiB observation, with some of everything that gets escaped */
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        static const char pat[] = "line of output \"quoted\" \\ tab\t\n";
        s[i] = pat[i % (sizeof(pat) - 1)];
    }
    s[n] = '\0';
    json_t *o = example_obj(EV_OBSERVATION);
    json_t *content = json_object_get(json_object_get(o, "observation"), "content");
    json_object_set_new(json_array_get(content, 0), "text", json_string(s));
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    ck_assert_uint_gt(strlen(text), n);
    char *got = assert_stable(text);
    ev e;
    ck_assert_int_eq(ev_parse(got, strlen(got), &e, NULL, 0), 0);
    json_t *tree = ev_json(&e);
    json_t *t = json_object_get(
        json_array_get(json_object_get(json_object_get(tree, "observation"), "content"), 0),
        "text");
    ck_assert_uint_eq(json_string_length(t), n);
    ck_assert_int_eq(memcmp(json_string_value(t), s, n), 0);
    json_decref(tree);
    ev_free(&e);
    free(got);
    free(text);

    /* 1 MiB of multi-byte text in a message, and 1 MiB ids */
    for (size_t i = 0; i + 3 <= n; i += 3)
        memcpy(s + i, "\xe2\x82\xac", 3); /* € */
    s[n - n % 3] = '\0';
    json_t *m = example_obj(EV_MESSAGE);
    json_object_set_new(m, "id", json_string(s));
    json_object_set_new(m, "parent_id", json_string(s));
    text = json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER);
    got = assert_stable(text);
    ck_assert_int_eq(ev_parse(got, strlen(got), &e, NULL, 0), 0);
    ck_assert_str_eq(e.id, s);
    ev_free(&e);
    free(got);
    free(text);
    json_decref(m);
    json_decref(o);
    free(s);
}
END_TEST

START_TEST(test_serialize_buffer)
{
    ev e;
    char *text = jq(EXAMPLES[0].json);
    ck_assert_int_eq(ev_parse(text, strlen(text), &e, NULL, 0), 0);
    rt_buf *b = ev_serialize(&e);
    char *c = ev_text(&e);
    ck_assert_uint_eq(rt_buf_len(b), strlen(c));
    ck_assert_int_eq(memcmp(rt_buf_data(b), c, strlen(c)), 0);
    /* the buffer outlives the event */
    ev_free(&e);
    rt_buf *b2 = rt_buf_ref(b);
    rt_buf_unref(b);
    ck_assert_int_eq(memcmp(rt_buf_data(b2), c, strlen(c)), 0);
    rt_buf_unref(b2);
    free(c);
    free(text);
}
END_TEST

START_TEST(test_from_json_reference)
{
    json_t *o = example_obj(EV_ACTION);
    ev e;
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    ck_assert_int_eq((int)o->refcount, 1); /* read from its text: o is not kept */
    ev_free(&e);
    json_object_set_new(o, "seq", json_integer(1));
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), -EINVAL);
    ck_assert_int_eq((int)o->refcount, 1); /* nothing kept on refusal */
    json_decref(o);
}
END_TEST

/* ------------------------------------- the document against the tree --- */

/* A deterministic generator of JSON values: nested objects (with null
 * members and `kind` members, the two the canonical rules move or drop),
 * arrays, strings with escapes and characters of every UTF-8 length, and
 * numbers at the edges. */
static uint64_t rnd_state;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static json_t *rnd_string(void)
{
    static const char *const bits[] = {"a", "kind", "\"", "\\", "/", "\n", "\t", "\x01", "\x1f",
                                       "\x7f", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                       "id", " ", "0"};
    char buf[96];
    size_t n = 0, parts = rnd() % 8;
    for (size_t i = 0; i < parts; i++) {
        const char *b = bits[rnd() % (sizeof(bits) / sizeof(bits[0]))];
        memcpy(buf + n, b, strlen(b));
        n += strlen(b);
    }
    if (rnd() % 16 == 0)
        buf[n++] = '\0'; /* U+0000 inside: legal JSON, kept by length */
    return json_stringn(buf, n);
}

static json_t *rnd_value(int depth)
{
    static const double reals[] = {0.1, -2.5e-7, 1e300, 123456.789, 1e16, 1e-5, 0.5, -0.0};
    static const json_int_t ints[] = {0, -1, 42, INT64_MAX, INT64_MIN, 1000000007};
    switch (depth > 3 ? rnd() % 5 : rnd() % 7) {
    case 0:
        return rnd_string();
    case 1:
        return json_integer(ints[rnd() % (sizeof(ints) / sizeof(ints[0]))]);
    case 2:
        return json_real(reals[rnd() % (sizeof(reals) / sizeof(reals[0]))]);
    case 3:
        return rnd() % 2 ? json_true() : json_false();
    case 4:
        return json_null();
    case 5: {
        json_t *a = json_array();
        for (size_t i = 0, n = rnd() % 4; i < n; i++)
            json_array_append_new(a, rnd_value(depth + 1));
        return a;
    }
    default: {
        static const char *const keys[] = {"kind", "id", "timestamp", "b", "a", "\xc3\xa9", "x y"};
        json_t *o = json_object();
        for (size_t i = 0, n = rnd() % 5; i < n; i++)
            json_object_set_new(o, keys[rnd() % (sizeof(keys) / sizeof(keys[0]))],
                                rnd_value(depth + 1));
        return o;
    }
    }
}

/* The same value, its objects' members inserted in reverse order. */
static json_t *reversed(json_t *v)
{
    if (json_is_array(v)) {
        json_t *a = json_array();
        for (size_t i = 0; i < json_array_size(v); i++)
            json_array_append_new(a, reversed(json_array_get(v, i)));
        return a;
    }
    if (!json_is_object(v))
        return json_incref(v);
    size_t n = json_object_size(v), i = 0;
    const char **keys = calloc(n ? n : 1, sizeof(*keys));
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) keys[i++] = k;
    json_t *o = json_object();
    while (i-- > 0)
        json_object_set_new(o, keys[i], reversed(json_object_get(v, keys[i])));
    free(keys);
    return o;
}

static uint64_t stuck_hash_of(json_t *event)
{
    ev e;
    ck_assert_int_eq(ev_from_json(event, &e, NULL, 0), 0);
    stuck_note n;
    stuck_note_of(&e, &n);
    ev_free(&e);
    ck_assert(!n.solo);
    return n.hash;
}

/* The bytes an event is stored as come from its document; the canonical
 * rules are also written for jansson values (ev_canonical_json, for the
 * answers and views made as trees). Both must give the same bytes for the
 * same value, and the stuck detector's structural hash must not depend on
 * the order members came in. */
START_TEST(test_document_agrees_with_tree)
{
    rnd_state = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 3000; i++) {
        json_t *payload = rnd_value(0);
        json_t *o = json_pack("{s:s, s:s, s:s, s:O, s:o, s:s}", "source", "agent",
                              "tool_call_id", "t1", "title", "random", "raw_input", payload,
                              "raw_output", rnd_value(1), "kind", "ACPToolCallEvent");
        ev e;
        char err[256] = "";
        ck_assert_msg(ev_from_json(o, &e, err, sizeof(err)) == 0, "%s", err);
        rt_buf *b = ev_serialize(&e);
        char *want = ev_canonical_json(o);
        ck_assert_ptr_nonnull(b);
        ck_assert_msg(rt_buf_len(b) == strlen(want) &&
                          memcmp(rt_buf_data(b), want, strlen(want)) == 0,
                      "document: %.*s\ntree:     %s", (int)rt_buf_len(b),
                      (const char *)rt_buf_data(b), want);
        free(assert_stable(want)); /* and read back, it is written the same */
        free(want);
        rt_buf_unref(b);
        ev_free(&e);
        json_decref(o);

        /* an observation of this payload, its members in either order */
        if (!json_is_object(payload)) {
            json_decref(payload);
            continue;
        }
        json_object_set_new(payload, "kind", json_string("RandomObservation"));
        json_t *obs = json_pack("{s:s, s:s, s:s, s:O, s:s}", "tool_name", "t", "tool_call_id",
                                "c", "action_id", "a", "observation", payload, "kind",
                                "ObservationEvent");
        json_t *rev = reversed(obs);
        ck_assert_uint_eq(stuck_hash_of(obs), stuck_hash_of(rev));
        /* and another payload is another hash */
        json_t *changed = json_deep_copy(payload);
        json_object_set_new(changed, "kind", json_string("OtherObservation"));
        json_t *other = json_pack("{s:s, s:s, s:s, s:o, s:s}", "tool_name", "t", "tool_call_id",
                                  "c", "action_id", "a", "observation", changed, "kind",
                                  "ObservationEvent");
        ck_assert_uint_ne(stuck_hash_of(obs), stuck_hash_of(other));
        json_decref(other);
        json_decref(rev);
        json_decref(obs);
        json_decref(payload);
    }
}
END_TEST

/* ----------------------------------------------------------- stamping --- */

static bool is_uuid4(const char *s)
{
    if (strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !strchr("0123456789abcdef", s[i]))
            return false;
    }
    return s[14] == '4' && strchr("89ab", s[19]) != NULL;
}

static bool is_timestamp(const char *s)
{
    /* YYYY-MM-DDTHH:MM:SS with an optional .ffffff */
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddddd";
    size_t n = strlen(s);
    if (n != 19 && n != 26)
        return false;
    for (size_t i = 0; i < n; i++)
        if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
            return false;
    return n == 19 || strcmp(s + 20, "000000") != 0;
}

START_TEST(test_stamp_fills_what_is_missing)
{
    json_t *o = jobj("{'source':'user','kind':'PauseEvent'}");
    ev e;
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    json_decref(o);
    ck_assert_ptr_null(e.id);
    ck_assert_ptr_null(e.timestamp);
    ck_assert_ptr_null(e.parent_id);
    ck_assert_int_eq(ev_stamp(&e, "head-1"), 0);
    ck_assert_msg(is_uuid4(e.id), "%s", e.id);
    ck_assert_msg(is_timestamp(e.timestamp), "%s", e.timestamp);
    ck_assert_str_eq(e.parent_id, "head-1");
    /* the stamps are the ev's: its document is as it was read */
    ck_assert_ptr_null(ev_string(&e, "id"));
    ck_assert_ptr_null(ev_string(&e, "timestamp"));
    ck_assert_ptr_null(ev_string(&e, "parent_id"));
    /* the stamped event is canonical and valid */
    char *s = ev_text(&e);
    char want[256];
    snprintf(want, sizeof(want),
             "{\"id\":\"%s\",\"timestamp\":\"%s\",\"source\":\"user\",\"parent_id\":\"head-1\","
             "\"kind\":\"PauseEvent\"}",
             e.id, e.timestamp);
    ck_assert_str_eq(s, want);
    free(assert_stable(s));
    free(s);

    /* stamping again changes nothing */
    const char *id = e.id, *ts = e.timestamp;
    ck_assert_int_eq(ev_stamp(&e, "head-2"), 0);
    ck_assert_ptr_eq(e.id, id);
    ck_assert_ptr_eq(e.timestamp, ts);
    ck_assert_str_eq(e.parent_id, "head-1");
    ev_free(&e);

    /* what is given is kept */
    o = example_obj(EV_ACTION);
    char *before = ev_canonical_json(o);
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    ck_assert_int_eq(ev_stamp(&e, "someone-else"), 0);
    char *after = ev_text(&e);
    ck_assert_str_eq(after, before);
    free(before);
    free(after);
    ev_free(&e);
    json_decref(o);

    /* no head: no parent; a null parent is "none" */
    o = jobj("{'kind':'PauseEvent','parent_id':null}");
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    ck_assert_int_eq(ev_stamp(&e, NULL), 0);
    ck_assert_ptr_null(e.parent_id);
    ck_assert_ptr_nonnull(e.id);
    ck_assert_int_eq(ev_stamp(&e, "h"), 0);
    ck_assert_str_eq(e.parent_id, "h");
    char *text = ev_text(&e);
    ck_assert_ptr_nonnull(strstr(text, "\"parent_id\":\"h\""));
    free(text);
    ev_free(&e);
    json_decref(o);

    /* an explicit new root is a parent like any other */
    o = jobj("{'kind':'PauseEvent','parent_id':'__root__'}");
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    ck_assert_int_eq(ev_stamp(&e, "h"), 0);
    ck_assert_str_eq(e.parent_id, "__root__");
    ev_free(&e);
    json_decref(o);

    /* ids differ */
    char seen[64][37];
    for (int i = 0; i < 64; i++) {
        o = jobj("{'kind':'PauseEvent'}");
        ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
        ck_assert_int_eq(ev_stamp(&e, NULL), 0);
        ck_assert(is_uuid4(e.id));
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(seen[j], e.id);
        strcpy(seen[i], e.id);
        ev_free(&e);
        json_decref(o);
    }
    ck_assert_int_eq(ev_stamp(NULL, NULL), -EINVAL);
    ev zero = {0};
    ck_assert_int_eq(ev_stamp(&zero, NULL), -EINVAL);
}
END_TEST

START_TEST(test_stamp_uses_local_time)
{
    setenv("TZ", "UTC", 1);
    tzset();
    json_t *o = jobj("{'kind':'PauseEvent'}");
    ev e;
    ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
    /* The bounds come from the clock ev_stamp reads: time() uses the
     * coarse clock on Linux and can lag CLOCK_REALTIME past a second edge. */
    struct timespec before, after;
    clock_gettime(CLOCK_REALTIME, &before);
    ck_assert_int_eq(ev_stamp(&e, NULL), 0);
    clock_gettime(CLOCK_REALTIME, &after);
    char lo[32], hi[32];
    ev_format_timestamp((long long)before.tv_sec, 0, lo);
    ev_format_timestamp((long long)after.tv_sec + 1, 0, hi);
    ck_assert_msg(strcmp(e.timestamp, lo) >= 0 && strcmp(e.timestamp, hi) < 0, "%s not in [%s, %s)",
                  e.timestamp, lo, hi);
    ev_free(&e);
    json_decref(o);
}
END_TEST

START_TEST(test_timestamp_format)
{
    setenv("TZ", "UTC", 1);
    tzset();
    char out[32];
    ev_format_timestamp(1787393702LL, 118734, out);
    ck_assert_str_eq(out, "2026-08-22T10:15:02.118734");
    ev_format_timestamp(1787393702LL, 0, out); /* Python omits a zero fraction */
    ck_assert_str_eq(out, "2026-08-22T10:15:02");
    ev_format_timestamp(1787393702LL, 5, out);
    ck_assert_str_eq(out, "2026-08-22T10:15:02.000005");
    ev_format_timestamp(1787393702LL, 100000, out);
    ck_assert_str_eq(out, "2026-08-22T10:15:02.100000");
    ev_format_timestamp(1787393702LL, 999999, out);
    ck_assert_str_eq(out, "2026-08-22T10:15:02.999999");
    ev_format_timestamp(1787393702LL, 1000000, out); /* carried */
    ck_assert_str_eq(out, "2026-08-22T10:15:03");
    ev_format_timestamp(1787393702LL, -1, out);
    ck_assert_str_eq(out, "2026-08-22T10:15:01.999999");
    ev_format_timestamp(0, 0, out);
    ck_assert_str_eq(out, "1970-01-01T00:00:00");
    ev_format_timestamp(951782400LL, 7, out); /* a leap day */
    ck_assert_str_eq(out, "2000-02-29T00:00:00.000007");

    /* naive local time: the zone shifts the clock reading, and no offset
     * is written */
    setenv("TZ", "IST-5:30", 1);
    tzset();
    ev_format_timestamp(1787393702LL, 118734, out);
    ck_assert_str_eq(out, "2026-08-22T15:45:02.118734");
    setenv("TZ", "PST8", 1);
    tzset();
    ev_format_timestamp(1787393702LL, 0, out);
    ck_assert_str_eq(out, "2026-08-22T02:15:02");
}
END_TEST

/* ------------------------------------------------------------- tables --- */

START_TEST(test_kind_tables)
{
    static const struct {
        ev_kind k;
        const char *name, *qualified;
        bool transient, obs_like, convertible;
    } kinds[] = {
        {EV_MESSAGE, "MessageEvent", "openhands.sdk.event.llm_convertible.message.MessageEvent",
         false, false, true},
        {EV_ACTION, "ActionEvent", "openhands.sdk.event.llm_convertible.action.ActionEvent", false,
         false, true},
        {EV_OBSERVATION, "ObservationEvent",
         "openhands.sdk.event.llm_convertible.observation.ObservationEvent", false, true, true},
        {EV_USER_REJECT, "UserRejectObservation",
         "openhands.sdk.event.llm_convertible.observation.UserRejectObservation", false, true,
         true},
        {EV_AGENT_ERROR, "AgentErrorEvent",
         "openhands.sdk.event.llm_convertible.observation.AgentErrorEvent", false, true, true},
        {EV_SYSTEM_PROMPT, "SystemPromptEvent",
         "openhands.sdk.event.llm_convertible.system.SystemPromptEvent", false, false, false},
        {EV_PAUSE, "PauseEvent", "openhands.sdk.event.user_action.PauseEvent", false, false, false},
        {EV_INTERRUPT, "InterruptEvent", "openhands.sdk.event.user_action.InterruptEvent", false,
         false, false},
        {EV_CONDENSATION, "Condensation", "openhands.sdk.event.condenser.Condensation", false,
         false, false},
        {EV_CONDENSATION_REQUEST, "CondensationRequest",
         "openhands.sdk.event.condenser.CondensationRequest", false, false, false},
        {EV_CONDENSATION_SUMMARY, "CondensationSummaryEvent",
         "openhands.sdk.event.condenser.CondensationSummaryEvent", true, false, false},
        {EV_STATE_UPDATE, "ConversationStateUpdateEvent",
         "openhands.sdk.event.conversation_state.ConversationStateUpdateEvent", false, false,
         false},
        {EV_CONVERSATION_ERROR, "ConversationErrorEvent",
         "openhands.sdk.event.conversation_error.ConversationErrorEvent", false, false, false},
        {EV_HOOK_EXECUTION, "HookExecutionEvent",
         "openhands.sdk.event.hook_execution.HookExecutionEvent", false, false, false},
        {EV_LLM_COMPLETION_LOG, "LLMCompletionLogEvent",
         "openhands.sdk.event.llm_completion_log.LLMCompletionLogEvent", false, false, false},
        {EV_STREAMING_DELTA, "StreamingDeltaEvent",
         "openhands.sdk.event.streaming_delta.StreamingDeltaEvent", true, false, false},
        {EV_TOKEN, "TokenEvent", "openhands.sdk.event.token.TokenEvent", false, false, false},
        {EV_ACP_TOOL_CALL, "ACPToolCallEvent", "openhands.sdk.event.acp_tool_call.ACPToolCallEvent",
         false, false, false},
        {EV_SERVER_ERROR, "ServerErrorEvent", "openhands.agent_server.models.ServerErrorEvent",
         true, false, false},
    };
    ck_assert_uint_eq(sizeof(kinds) / sizeof(kinds[0]), EV_KIND_COUNT - 1);
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        ev_kind k = kinds[i].k;
        ck_assert_str_eq(ev_kind_name(k), kinds[i].name);
        ck_assert_int_eq(ev_kind_from_name(kinds[i].name), k);
        ck_assert_str_eq(ev_kind_qualified(k), kinds[i].qualified);
        /* the qualified name ends with the bare one */
        const char *q = ev_kind_qualified(k);
        size_t ql = strlen(q), nl = strlen(kinds[i].name);
        ck_assert(ql > nl && q[ql - nl - 1] == '.' && strcmp(q + ql - nl, kinds[i].name) == 0);
        ck_assert_int_eq(ev_kind_from_name(q), EV_INVALID); /* bare names only */
        ck_assert_int_eq(ev_kind_transient(k), kinds[i].transient);
        ev e = {.kind = k};
        ck_assert_int_eq(ev_observation_like(&e), kinds[i].obs_like);
        ck_assert_int_eq(ev_llm_convertible(&e), kinds[i].convertible);
    }
    ck_assert_ptr_null(ev_kind_name(EV_INVALID));
    ck_assert_ptr_null(ev_kind_name(EV_KIND_COUNT));
    ck_assert_ptr_null(ev_kind_qualified(EV_INVALID));
    ck_assert_ptr_null(ev_kind_qualified(EV_KIND_COUNT));
    ck_assert_int_eq(ev_kind_from_name(NULL), EV_INVALID);
    ck_assert_int_eq(ev_kind_from_name(""), EV_INVALID);
    ck_assert_int_eq(ev_kind_from_name("actionevent"), EV_INVALID);
    ck_assert_int_eq(ev_kind_from_name("ActionEvent "), EV_INVALID);
    ck_assert_int_eq(ev_kind_transient(EV_INVALID), false);
    ck_assert_int_eq(ev_observation_like(NULL), false);
    ck_assert_int_eq(ev_llm_convertible(NULL), false);

    ck_assert_str_eq(ev_source_name(EV_SRC_AGENT), "agent");
    ck_assert_str_eq(ev_source_name(EV_SRC_USER), "user");
    ck_assert_str_eq(ev_source_name(EV_SRC_ENVIRONMENT), "environment");
    ck_assert_str_eq(ev_source_name(EV_SRC_HOOK), "hook");
    ck_assert_ptr_null(ev_source_name(EV_SRC_NONE));
    ck_assert_ptr_null(ev_source_name((ev_source)99));
}
END_TEST

START_TEST(test_parsed_families)
{
    /* the predicates on parsed events agree with the kinds */
    for (size_t i = 0; i < N_EXAMPLES; i++) {
        json_t *o = jobj(EXAMPLES[i].json);
        ev e;
        ck_assert_int_eq(ev_from_json(o, &e, NULL, 0), 0);
        bool obs = e.kind == EV_OBSERVATION || e.kind == EV_AGENT_ERROR || e.kind == EV_USER_REJECT;
        ck_assert_int_eq(ev_observation_like(&e), obs);
        ck_assert_int_eq(ev_llm_convertible(&e),
                         obs || e.kind == EV_MESSAGE || e.kind == EV_ACTION);
        if (ev_observation_like(&e) || e.kind == EV_ACTION)
            ck_assert_ptr_nonnull(e.tool_call_id);
        ev_free(&e);
        json_decref(o);
    }
}
END_TEST

/* ------------------------------------------------------------ vectors --- */

static const char *shared_dir(void)
{
    const char *d = getenv("PARLEY_SHARED_DIR");
    if (d == NULL || d[0] == '\0')
        d = PARLEY_SHARED_DIR;
    return d;
}

/* Checks one vector event: it parses unless the vector expects it to be
 * refused as invalid_event, and its canonical form is stable. */
static void check_vector_event(const char *file, json_t *event, json_t *rejected, json_t *seen)
{
    json_t *idv = json_object_get(event, "id");
    char key[256] = "";
    if (json_is_string(idv)) {
        /* the second occurrence of an id is "<id>#2" in expect */
        const char *id = json_string_value(idv);
        json_int_t n = json_integer_value(json_object_get(seen, id)) + 1;
        json_object_set_new(seen, id, json_integer(n));
        if (n == 1)
            snprintf(key, sizeof(key), "%s", id);
        else
            snprintf(key, sizeof(key), "%s#%lld", id, (long long)n);
    }
    const char *rule = json_string_value(json_object_get(rejected, key));
    bool invalid = rule != NULL && strcmp(rule, "invalid_event") == 0;

    char *text = json_dumps(event, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    ck_assert_ptr_nonnull(text);
    ev e;
    char err[256] = "";
    int rc = ev_parse(text, strlen(text), &e, err, sizeof(err));
    if (invalid) {
        ck_assert_msg(rc == -EINVAL, "%s: %s was accepted, expected invalid_event", file, key);
    } else {
        ck_assert_msg(rc == 0, "%s: %s refused: %s", file, key, err);
        ev_free(&e);
        free(assert_stable(text));
    }
    free(text);
}

static size_t check_vector_dir(const char *sub)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/vectors/%s", shared_dir(), sub);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "vectors folder %s is missing (PARLEY_SHARED_DIR=%s): %s", dir,
                  shared_dir(), strerror(errno));
    size_t events = 0, files = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        json_error_t jerr;
        json_t *v = json_load_file(path, JSON_ALLOW_NUL, &jerr);
        ck_assert_msg(v != NULL, "%s: %s", path, jerr.text);
        json_t *rejected = json_object_get(json_object_get(v, "expect"), "rejected");
        json_t *seen = json_object();
        size_t i;
        json_t *step;
        json_array_foreach(json_object_get(v, "steps"), i, step)
        {
            json_t *ev_ = json_object_get(step, "append");
            if (ev_ != NULL) {
                check_vector_event(de->d_name, ev_, rejected, seen);
                events++;
            }
        }
        json_t *ev2;
        json_array_foreach(json_object_get(v, "events"), i, ev2)
        {
            check_vector_event(de->d_name, ev2, rejected, seen);
            events++;
        }
        json_decref(seen);
        json_decref(v);
        files++;
    }
    closedir(d);
    ck_assert_msg(files > 0, "no vector files in %s", dir);
    ck_assert_msg(events > 0, "no events in the vectors of %s", dir);
    return events;
}

START_TEST(test_vectors_parse)
{
    size_t n = check_vector_dir("compliance") + check_vector_dir("stuck");
    ck_assert_uint_gt(n, 100);
}
END_TEST

/* What counts: a ConversationErrorEvent by its code, whoever appended it. */
START_TEST(test_findings_of_events)
{
    static const struct {
        const char *json;
        conv_findings want;
    } cases[] = {
        {"{\"source\":\"environment\",\"code\":\"ComplianceViolation\",\"detail\":\"x\","
         "\"kind\":\"ConversationErrorEvent\"}",
         {1, 0}},
        {"{\"source\":\"environment\",\"code\":\"StuckPatternDetected\",\"detail\":\"x\","
         "\"kind\":\"ConversationErrorEvent\"}",
         {0, 1}},
        {"{\"source\":\"agent\",\"code\":\"ComplianceViolation\",\"detail\":\"x\","
         "\"kind\":\"ConversationErrorEvent\"}",
         {1, 0}},
        {"{\"source\":\"environment\",\"code\":\"DeferredMessageExpired\",\"detail\":\"x\","
         "\"kind\":\"ConversationErrorEvent\"}",
         {0, 0}},
        {"{\"source\":\"agent\",\"llm_message\":{\"role\":\"assistant\",\"content\":[{\"type\":"
         "\"text\",\"text\":\"ComplianceViolation StuckPatternDetected\"}]},"
         "\"kind\":\"MessageEvent\"}",
         {0, 0}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ev e;
        char err[256];
        ck_assert_msg(ev_parse(cases[i].json, strlen(cases[i].json), &e, err, sizeof(err)) == 0,
                      "case %zu: %s", i, err);
        conv_findings f = {10, 20};
        conv_findings_add(&f, conv_finding_of(&e));
        ev_free(&e);
        ck_assert_msg(f.violations == 10 + cases[i].want.violations &&
                          f.stuck == 20 + cases[i].want.stuck,
                      "case %zu: %llu, %llu", i, (unsigned long long)f.violations,
                      (unsigned long long)f.stuck);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("event");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_every_kind_parses);
    tcase_add_test(tc, test_exposed_fields);
    tcase_add_test(tc, test_slim_keeps_the_fields);
    tcase_add_test(tc, test_default_sources);
    tcase_add_test(tc, test_required_fields);
    tcase_add_test(tc, test_unknown_top_level_field);
    tcase_add_test(tc, test_types_and_enums);
    tcase_add_test(tc, test_not_an_event);
    tcase_add_test(tc, test_messages_are_one_line);
    tcase_add_test(tc, test_from_json_reference);
    suite_add_tcase(s, tc);

    tc = tcase_create("serialize");
    tcase_add_test(tc, test_order_and_kind_last);
    tcase_add_test(tc, test_nulls_dropped);
    tcase_add_test(tc, test_upstream_dumps_are_canonical);
    tcase_add_test(tc, test_utf8_and_escapes);
    tcase_add_test(tc, test_numbers);
    tcase_add_test(tc, test_large_event);
    tcase_add_test(tc, test_serialize_buffer);
    tcase_add_test(tc, test_document_agrees_with_tree);
    suite_add_tcase(s, tc);

    tc = tcase_create("stamp");
    tcase_add_test(tc, test_stamp_fills_what_is_missing);
    tcase_add_test(tc, test_stamp_uses_local_time);
    tcase_add_test(tc, test_timestamp_format);
    suite_add_tcase(s, tc);

    tc = tcase_create("tables");
    tcase_add_test(tc, test_kind_tables);
    tcase_add_test(tc, test_findings_of_events);
    tcase_add_test(tc, test_parsed_families);
    suite_add_tcase(s, tc);

    tc = tcase_create("vectors");
    tcase_add_test(tc, test_vectors_parse);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
