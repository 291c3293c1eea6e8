/*
 * test_acp_agent.c - the protocol core of `parley acp` (tools/acp_agent.c,
 * compiled in here since tools/ is not in the library) driven with a fake
 * backend and no loop: lines in, events in, lines out. initialize's
 * negotiation; session/new, load, prompt and cancel; the permission round
 * trip; each JSON-RPC error (-32700, -32600, -32601, -32602, -32002); the
 * line bound (the core's answer, and the stdin reader's cut at exactly
 * ACPA_LINE_MAX, tools/acp_inbox.c); a stale stop of the last turn that
 * must not end the new one.
 *
 * Every test checks that what the core wrote is JSON-RPC 2.0, one compact
 * JSON object a line.
 */
#include "tools/acp_agent.c"
#include "tools/acp_inbox.c"
#include "support_json.h"

#include <check.h>

/* ---- the fake backend and the editor's side of the wire ------------------- */

typedef struct fake {
    json_t *calls; /* what the core asked of the backend, in order */
    json_t *out;   /* what the core wrote, in order, not yet taken */
    int create_rc, attach_rc, post_rc, pause_rc, confirm_rc;
    int made;                 /* conversations created */
    size_t attaches_at_write; /* attach calls made when the last line was written */
} fake;

static void record(fake *f, json_t *c)
{
    ck_assert_ptr_nonnull(c);
    json_array_append_new(f->calls, c);
}

static int f_create(void *ud, const char *cwd, char id[64], char *why, size_t n)
{
    fake *f = ud;
    record(f, json_pack("[s,s?]", "create", cwd));
    if (f->create_rc != 0) {
        snprintf(why, n, "the disk is full");
        return f->create_rc;
    }
    snprintf(id, 64, "c0ffee%02d", ++f->made);
    return 0;
}

static int f_attach(void *ud, const char *cid, char *why, size_t n)
{
    fake *f = ud;
    record(f, json_pack("[s,s]", "attach", cid));
    if (f->attach_rc != 0)
        snprintf(why, n, "no such conversation");
    return f->attach_rc;
}

static int f_post(void *ud, const char *cid, json_t *content, char *why, size_t n)
{
    fake *f = ud;
    record(f, json_pack("[s,s,O]", "post", cid, content));
    if (f->post_rc != 0)
        snprintf(why, n, "503 too busy");
    return f->post_rc;
}

static int f_pause(void *ud, const char *cid, char *why, size_t n)
{
    fake *f = ud;
    record(f, json_pack("[s,s]", "pause", cid));
    if (f->pause_rc != 0)
        snprintf(why, n, "409 not running");
    return f->pause_rc;
}

static int f_confirm(void *ud, const char *cid, bool accept, const char *reason, char *why,
                     size_t n)
{
    fake *f = ud;
    record(f, json_pack("[s,s,b,s]", "confirm", cid, accept, reason));
    if (f->confirm_rc != 0)
        snprintf(why, n, "no");
    return f->confirm_rc;
}

static size_t count_calls(fake *f, const char *what)
{
    size_t i, k = 0;
    json_t *c;
    json_array_foreach(f->calls, i, c) k +=
        strcmp(json_string_value(json_array_get(c, 0)), what) == 0;
    return k;
}

/* Each line must be one compact JSON-RPC 2.0 object ending in its newline. */
static void f_write(void *ctx, const char *line, size_t len)
{
    fake *f = ctx;
    ck_assert_uint_gt(len, 1);
    ck_assert_int_eq(line[len - 1], '\n');
    ck_assert_ptr_null(memchr(line, '\n', len - 1));
    json_error_t e;
    json_t *m = json_loadb(line, len - 1, 0, &e);
    ck_assert_msg(json_is_object(m), "not a JSON object: %.*s", (int)len, line);
    ck_assert_str_eq(json_string_value(json_object_get(m, "jsonrpc")), "2.0");
    json_array_append_new(f->out, m);
    f->attaches_at_write = count_calls(f, "attach");
}

static fake F;
static acpa *A;

static void setup(void)
{
    memset(&F, 0, sizeof(F));
    F.calls = json_array();
    F.out = json_array();
    acpa_backend b = {.ud = &F,
                      .create = f_create,
                      .attach = f_attach,
                      .post = f_post,
                      .pause = f_pause,
                      .confirm = f_confirm};
    A = acpa_new(&b, f_write, &F);
    ck_assert_ptr_nonnull(A);
}

static void teardown(void)
{
    acpa_free(A);
    json_decref(F.calls);
    json_decref(F.out);
}

/* A line of the editor, written with ' for " (texts without apostrophes). */
static void line(const char *text)
{
    char *s = strdup(text);
    ck_assert_ptr_nonnull(s);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    acpa_line(A, s, strlen(s));
    free(s);
}

/* A request of the editor's: id, method and params (written as line()). */
static void request(int id, const char *method, const char *params)
{
    char l[1000];
    snprintf(l, sizeof(l), "{'jsonrpc':'2.0','id':%d,'method':'%s','params':%s}", id, method,
             params);
    line(l);
}

/* An event of conversation cid, written as line() writes. */
static void event(const char *cid, const char *text)
{
    json_t *e = tj_jsonq(text);
    char *s = json_dumps(e, JSON_COMPACT);
    acpa_event(A, cid, s, strlen(s));
    free(s);
    json_decref(e);
}

static void status(const char *cid, const char *value)
{
    char e[200];
    snprintf(e, sizeof(e),
             "{'kind':'ConversationStateUpdateEvent','key':'execution_status','value':'%s'}",
             value);
    event(cid, e);
}

/* The next line the core wrote (a new reference). */
static json_t *take(void)
{
    ck_assert_msg(json_array_size(F.out) > 0, "the core wrote nothing more");
    json_t *m = json_incref(json_array_get(F.out, 0));
    json_array_remove(F.out, 0);
    return m;
}

static void nothing_written(void)
{
    char *s = json_dumps(F.out, JSON_COMPACT);
    ck_assert_msg(json_array_size(F.out) == 0, "unexpected lines: %s", s);
    free(s);
}

static void equal_json(json_t *got, const char *want)
{
    tj_equal(got, tj_jsonq(want));
}

/* The next line is the answer to id (an integer) with this result. */
static void answered(json_int_t id, const char *result)
{
    json_t *m = take();
    ck_assert_int_eq(json_integer_value(json_object_get(m, "id")), id);
    ck_assert_ptr_null(json_object_get(m, "error"));
    equal_json(json_object_get(m, "result"), result);
    json_decref(m);
}

/* The next line is error `code` for id (-1: id null), its message
 * containing `says`. */
static void refused(json_int_t id, int code, const char *says)
{
    json_t *m = take();
    json_t *mid = json_object_get(m, "id");
    if (id < 0)
        ck_assert_msg(json_is_null(mid), "an error for no request has id null");
    else
        ck_assert_int_eq(json_integer_value(mid), id);
    json_t *e = json_object_get(m, "error");
    ck_assert_ptr_null(json_object_get(m, "result"));
    ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), code);
    const char *msg = json_string_value(json_object_get(e, "message"));
    ck_assert_msg(msg != NULL && strstr(msg, says) != NULL, "message '%s' should say '%s'", msg,
                  says);
    json_decref(m);
}

/* The next line is a session/update of sid; its update (borrowed from the
 * returned message, which the caller frees). */
static json_t *updated(const char *sid, json_t **msg)
{
    json_t *m = take();
    ck_assert_str_eq(json_string_value(json_object_get(m, "method")), "session/update");
    ck_assert_ptr_null(json_object_get(m, "id"));
    json_t *p = json_object_get(m, "params");
    ck_assert_str_eq(json_string_value(json_object_get(p, "sessionId")), sid);
    *msg = m;
    return json_object_get(p, "update");
}

/* The next line is an update of this kind whose text (a chunk's) is text. */
static void chunk(const char *sid, const char *kind, const char *text)
{
    json_t *m, *u = updated(sid, &m);
    ck_assert_str_eq(json_string_value(json_object_get(u, "sessionUpdate")), kind);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(u, "content"), "text")),
                     text);
    json_decref(m);
}

/* The last backend call, as JSON. */
static void last_call(const char *want)
{
    size_t n = json_array_size(F.calls);
    ck_assert_uint_gt(n, 0);
    equal_json(json_array_get(F.calls, n - 1), want);
}

#define USER(text)                                                                                 \
    "{'kind':'MessageEvent','id':'u-" text "','source':'user','llm_message':{'role':'user',"       \
    "'content':[{'type':'text','text':'" text "'}]}}"
#define AGENT(text)                                                                                \
    "{'kind':'MessageEvent','id':'m-" text "','source':'agent','llm_message':{'role':"             \
    "'assistant','content':[{'type':'text','text':'" text "'}]}}"
#define LS_ACTION                                                                                  \
    "{'kind':'ActionEvent','id':'a1','source':'agent','tool_name':'terminal','tool_call_id':"      \
    "'c1','thought':[],'action':{'kind':'TerminalAction','command':'ls'}}"

/* session/new as id 1: the conversation made (c0ffee01 for the first). */
static const char *new_session(void)
{
    static char sid[64];
    request(1, "session/new", "{'cwd':'/w','mcpServers':[]}");
    json_t *m = take();
    const char *s = json_string_value(json_object_get(json_object_get(m, "result"), "sessionId"));
    ck_assert_ptr_nonnull(s);
    snprintf(sid, sizeof(sid), "%s", s);
    json_decref(m);
    return sid;
}

/* session/prompt (id) of one text in the first session. */
static void prompt(int id, const char *text)
{
    char p[300];
    snprintf(p, sizeof(p), "{'sessionId':'c0ffee01','prompt':[{'type':'text','text':'%s'}]}", text);
    request(id, "session/prompt", p);
}

static void cancel(const char *sid)
{
    char l[200];
    snprintf(l, sizeof(l),
             "{'jsonrpc':'2.0','method':'session/cancel','params':{'sessionId':'%s'}}", sid);
    line(l);
}

/* A prompt (id) of text posted in sid (the first session), its echo and
 * running come back. */
static void prompt_runs(const char *sid, int id, const char *text)
{
    prompt(id, text);
    char e[300];
    snprintf(e, sizeof(e),
             "{'kind':'MessageEvent','id':'u%d','source':'user','llm_message':{'role':'user',"
             "'content':[{'type':'text','text':'%s'}]}}",
             id, text);
    event(sid, e);
    status(sid, "running");
}

/* ---- initialize ----------------------------------------------------------- */

START_TEST(test_initialize)
{
    request(0, "initialize",
            "{'protocolVersion':1,'clientCapabilities':{'fs':{'readTextFile':true}}}");
    json_t *m = take();
    json_t *r = json_object_get(m, "result");
    ck_assert_int_eq(json_integer_value(json_object_get(m, "id")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "protocolVersion")), 1);
    json_t *caps = json_object_get(r, "agentCapabilities");
    ck_assert(json_is_true(json_object_get(caps, "loadSession")));
    equal_json(json_object_get(caps, "promptCapabilities"),
               "{'image':true,'audio':false,'embeddedContext':true}");
    ck_assert_uint_eq(json_array_size(json_object_get(r, "authMethods")), 0);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(r, "agentInfo"), "name")),
                     "parley");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(r, "agentInfo"), "version")),
                     PARLEY_VERSION);
    json_decref(m);

    /* a later version asked: 1, ours; the client decides; a string id echoed */
    line("{'jsonrpc':'2.0','id':'x','method':'initialize','params':{'protocolVersion':7}}");
    m = take();
    ck_assert_str_eq(json_string_value(json_object_get(m, "id")), "x");
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(m, "result"), "protocolVersion")), 1);
    json_decref(m);

    request(2, "initialize", "{}");
    refused(2, RPC_INVALID_PARAMS, "protocolVersion");
    request(3, "initialize", "{'protocolVersion':'1'}");
    refused(3, RPC_INVALID_PARAMS, "protocolVersion");
    request(4, "authenticate", "{'methodId':'x'}");
    answered(4, "{}");
    nothing_written();
    ck_assert_uint_eq(json_array_size(F.calls), 0); /* no conversation touched */
}
END_TEST

/* ---- session/new ------------------------------------------------------------ */

START_TEST(test_session_new)
{
    const char *sid = new_session();
    ck_assert_str_eq(sid, "c0ffee01");
    equal_json(F.calls, "[['create','/w'],['attach','c0ffee01']]");
    /* answered before attach: the events that follow are of a known session */
    ck_assert_uint_eq(F.attaches_at_write, 0);
    ck_assert_uint_eq(acpa_sessions(A), 1);
    nothing_written();

    F.create_rc = -EIO;
    request(2, "session/new", "{'cwd':'/w','mcpServers':[]}");
    refused(2, RPC_INTERNAL_ERROR, "the disk is full");
    ck_assert_uint_eq(acpa_sessions(A), 1);

    request(3, "session/new", "{'cwd':5,'mcpServers':[]}");
    refused(3, RPC_INVALID_PARAMS, "cwd");
    request(4, "session/new", "{'cwd':'/w','mcpServers':{}}");
    refused(4, RPC_INVALID_PARAMS, "mcpServers");
    ck_assert_uint_eq(count_calls(&F, "create"), 2);
    nothing_written();
}
END_TEST

/* A conversation made whose events cannot be followed: the session is
 * known but ended, and a prompt in it is refused as of no session. */
START_TEST(test_session_new_attach_fails)
{
    F.attach_rc = -EIO;
    const char *sid = new_session();
    prompt(2, "hi");
    refused(2, RPC_RESOURCE_NOT_FOUND, "session/load");
    ck_assert_uint_eq(count_calls(&F, "post"), 0);
    /* once it can be followed again, loading it goes on */
    F.attach_rc = 0;
    request(3, "session/load", "{'sessionId':'c0ffee01','cwd':'/w','mcpServers':[]}");
    acpa_synced(A, sid);
    answered(3, "{}");
    ck_assert_uint_eq(acpa_sessions(A), 1);
}
END_TEST

/* ---- session/load ------------------------------------------------------------ */

START_TEST(test_session_load_replays)
{
    request(5, "session/load", "{'sessionId':'abc123','cwd':'/w','mcpServers':[]}");
    equal_json(F.calls, "[['attach','abc123']]");
    nothing_written(); /* the answer waits for the history */
    event("abc123", USER("first"));
    chunk("abc123", "user_message_chunk", "first"); /* the replay says what users said */
    event("abc123", LS_ACTION);
    json_t *m, *u = updated("abc123", &m);
    ck_assert_str_eq(json_string_value(json_object_get(u, "sessionUpdate")), "tool_call");
    ck_assert_str_eq(json_string_value(json_object_get(u, "toolCallId")), "c1");
    json_decref(m);
    status("abc123", "running");
    /* a confirmation waited for in the history is not asked again */
    status("abc123", "waiting_for_confirmation");
    event("abc123", AGENT("done"));
    chunk("abc123", "agent_message_chunk", "done");
    status("abc123", "finished"); /* no turn to end: no answer */
    nothing_written();
    acpa_synced(A, "abc123");
    answered(5, "{}");
    acpa_synced(A, "abc123"); /* said once */
    nothing_written();

    /* then live */
    event("abc123", USER("from the web"));
    chunk("abc123", "user_message_chunk", "from the web");

    /* loading a session open here: what it had is the editor's already */
    request(6, "session/load", "{'sessionId':'abc123','cwd':'/w','mcpServers':[]}");
    answered(6, "{}");
    ck_assert_uint_eq(count_calls(&F, "attach"), 1);
    ck_assert_uint_eq(acpa_sessions(A), 1);

    /* events of a conversation no session has are nobody's */
    event("def456", AGENT("stray"));
    nothing_written();
}
END_TEST

START_TEST(test_session_load_unknown)
{
    F.attach_rc = -ENOENT;
    request(1, "session/load", "{'sessionId':'0123abcd','cwd':'/w','mcpServers':[]}");
    refused(1, RPC_RESOURCE_NOT_FOUND, "no conversation 0123abcd");
    /* not an id at all: said without asking the backend */
    request(2, "session/load", "{'sessionId':'../etc','cwd':'/w','mcpServers':[]}");
    refused(2, RPC_RESOURCE_NOT_FOUND, "not a conversation id");
    request(3, "session/load", "{'sessionId':'','cwd':'/w','mcpServers':[]}");
    refused(3, RPC_RESOURCE_NOT_FOUND, "not a conversation id");
    ck_assert_uint_eq(count_calls(&F, "attach"), 1);
    F.attach_rc = -EIO;
    request(4, "session/load", "{'sessionId':'0123abcd','cwd':'/w','mcpServers':[]}");
    refused(4, RPC_INTERNAL_ERROR, "cannot load");
    request(5, "session/load", "{'cwd':'/w','mcpServers':[]}");
    refused(5, RPC_INVALID_PARAMS, "sessionId");
    request(6, "session/load", "{'sessionId':'0123abcd','mcpServers':[]}");
    refused(6, RPC_INVALID_PARAMS, "cwd");
    ck_assert_uint_eq(acpa_sessions(A), 0);
    nothing_written();
}
END_TEST

/* ---- session/prompt ------------------------------------------------------------ */

START_TEST(test_prompt_turn)
{
    const char *sid = new_session();
    prompt(2, "fix it");
    last_call("['post','c0ffee01',[{'type':'text','text':'fix it'}]]");
    nothing_written();
    event(sid, USER("fix it")); /* the editor's own prompt: not echoed */
    status(sid, "running");
    nothing_written();
    event(sid, LS_ACTION);
    json_t *m, *u = updated(sid, &m);
    equal_json(json_object_get(u, "toolCallId"), "'c1'");
    equal_json(json_object_get(u, "title"), "'$ ls'");
    equal_json(json_object_get(u, "kind"), "'execute'");
    json_decref(m);
    event(sid, "{'kind':'ObservationEvent','id':'o1','source':'environment','tool_name':"
               "'terminal','tool_call_id':'c1','action_id':'a1','observation':{'kind':"
               "'TerminalObservation','content':[{'type':'text','text':'a.c'}]}}");
    u = updated(sid, &m);
    equal_json(json_object_get(u, "sessionUpdate"), "'tool_call_update'");
    equal_json(json_object_get(u, "status"), "'completed'");
    json_decref(m);
    event(sid, AGENT("fixed"));
    chunk(sid, "agent_message_chunk", "fixed");
    status(sid, "finished");
    answered(2, "{'stopReason':'end_turn'}"); /* after all of its updates */
    nothing_written();

    /* a second turn; the same text again is this turn's echo, not the last */
    prompt_runs(sid, 3, "fix it");
    nothing_written();
    status(sid, "idle"); /* a rejection left it idle after running: over */
    answered(3, "{'stopReason':'end_turn'}");

    /* after the turn, a message someone else posts shows */
    event(sid, USER("fix it"));
    chunk(sid, "user_message_chunk", "fix it");
    ck_assert_uint_eq(count_calls(&F, "post"), 2);
}
END_TEST

/* An error of the hosted agent's: its own stop reason when it gave one,
 * else refusal (ACP has no error stop reason), the error said first. */
START_TEST(test_prompt_error)
{
    const char *sid = new_session();
    prompt_runs(sid, 2, "write it");
    event(sid, "{'kind':'ConversationErrorEvent','id':'e1','source':'environment','code':'x',"
               "'detail':'the model broke'}");
    chunk(sid, "agent_message_chunk", "Error: the model broke");
    status(sid, "error");
    answered(2, "{'stopReason':'refusal'}");

    const char *why = NULL;
    acp_stop_status("max_tokens", &why);
    ck_assert_ptr_nonnull(why);
    prompt_runs(sid, 3, "write more");
    char e[400];
    snprintf(e, sizeof(e),
             "{'kind':'ConversationErrorEvent','id':'e2','source':'environment','code':'x',"
             "'detail':'%s'}",
             why);
    event(sid, e);
    status(sid, "error");
    answered(3, "{'stopReason':'max_tokens'}");
    nothing_written();
}
END_TEST

START_TEST(test_prompt_busy_and_bad)
{
    const char *sid = new_session();
    prompt_runs(sid, 2, "one");
    prompt(3, "two");
    refused(3, RPC_INVALID_REQUEST, "busy");
    status(sid, "finished");
    answered(2, "{'stopReason':'end_turn'}");

    request(4, "session/prompt", "{'sessionId':'c0ffee01','prompt':'hi'}");
    refused(4, RPC_INVALID_PARAMS, "prompt must be a non-empty list");
    request(5, "session/prompt", "{'sessionId':'c0ffee01','prompt':[]}");
    refused(5, RPC_INVALID_PARAMS, "prompt must be a non-empty list");
    request(6, "session/prompt", "{'prompt':[{'type':'text','text':'x'}]}");
    refused(6, RPC_INVALID_PARAMS, "sessionId");
    request(7, "session/prompt", "{'sessionId':'beef','prompt':[{'type':'text','text':'x'}]}");
    refused(7, RPC_RESOURCE_NOT_FOUND, "no session beef");

    /* a post that fails fails the prompt, and the session takes the next */
    F.post_rc = -EIO;
    prompt(8, "x");
    refused(8, RPC_INTERNAL_ERROR, "503 too busy");
    F.post_rc = 0;
    prompt_runs(sid, 9, "y");
    nothing_written();
    status(sid, "finished");
    answered(9, "{'stopReason':'end_turn'}");
}
END_TEST

/* What each ACP content block becomes in the conversation (OpenHands
 * content): images as image URLs (their bytes as a data: URL), a
 * resource's text inlined, links and other blobs named. */
#define CARRIED                                                                                    \
    "[{'type':'text','text':'look'},"                                                              \
    "{'type':'image','image_urls':['data:image/png;base64,iVBORw0K']},"                            \
    "{'type':'image','image_urls':['https://x/y.png']},"                                           \
    "{'type':'text','text':'@file:///w/main.c'},"                                                  \
    "{'type':'text','text':'<context ref=\\'file:///w/a.h\\'>\\nint a;\\n</context>'},"            \
    "{'type':'image','image_urls':['data:image/gif;base64,R0lGOD']},"                              \
    "{'type':'text','text':'@file:///w/a.bin'}]"

START_TEST(test_prompt_blocks)
{
    new_session();
    request(2, "session/prompt",
            "{'sessionId':'c0ffee01','prompt':["
            "{'type':'text','text':'look'},"
            "{'type':'image','data':'iVBORw0K','mimeType':'image/png'},"
            "{'type':'image','data':'','mimeType':'image/png','uri':'https://x/y.png'},"
            "{'type':'resource_link','name':'main.c','uri':'file:///w/main.c'},"
            "{'type':'resource','resource':{'uri':'file:///w/a.h','text':'int a;'}},"
            "{'type':'resource','resource':{'uri':'file:///w/b.gif','blob':'R0lGOD',"
            "'mimeType':'image/gif'}},"
            "{'type':'resource','resource':{'uri':'file:///w/a.bin','blob':'AAEC',"
            "'mimeType':'application/octet-stream'}}]}");
    last_call("['post','c0ffee01'," CARRIED "]");
    nothing_written();
    status("c0ffee01", "finished"); /* stale: neither echo nor run yet */
    nothing_written();
    event("c0ffee01", "{'kind':'MessageEvent','id':'u2','source':'user','llm_message':{'role':"
                      "'user','content':" CARRIED "}}");
    nothing_written(); /* recognised as the editor's own */
    status("c0ffee01", "finished");
    answered(2, "{'stopReason':'end_turn'}");

    request(3, "session/prompt",
            "{'sessionId':'c0ffee01','prompt':[{'type':'audio','data':'AAAA','mimeType':'audio/"
            "wav'}]}");
    refused(3, RPC_INVALID_PARAMS, "audio");
    request(4, "session/prompt",
            "{'sessionId':'c0ffee01','prompt':[{'type':'text','text':'x'},{'type':'video'}]}");
    refused(4, RPC_INVALID_PARAMS, "prompt[1]");
    request(5, "session/prompt",
            "{'sessionId':'c0ffee01','prompt':[{'type':'image','mimeType':'image/png'}]}");
    refused(5, RPC_INVALID_PARAMS, "data and mimeType");
    request(6, "session/prompt",
            "{'sessionId':'c0ffee01','prompt':[{'type':'resource','resource':{'text':'x'}}]}");
    refused(6, RPC_INVALID_PARAMS, "uri");
    ck_assert_uint_eq(count_calls(&F, "post"), 1);
}
END_TEST

/* The last turn's stop, committed before this prompt's message, reaches
 * the core after the prompt was posted: it must not end the new turn. */
START_TEST(test_stale_stop)
{
    const char *sid = new_session();
    prompt_runs(sid, 2, "first");
    cancel("c0ffee01");
    /* the editor gives up on the turn before the pause comes back */
    status(sid, "paused");
    answered(2, "{'stopReason':'cancelled'}");

    prompt(3, "second");
    /* what the last turn left behind arrives late: none ends this turn */
    status(sid, "running");
    status(sid, "finished");
    status(sid, "paused");
    status(sid, "idle");
    nothing_written();
    event(sid, USER("second"));
    nothing_written();
    event(sid, AGENT("on it"));
    chunk(sid, "agent_message_chunk", "on it");
    status(sid, "running");
    status(sid, "finished");
    answered(3, "{'stopReason':'end_turn'}");
}
END_TEST

/* The prompt's message may come back with keys a server adds (still the
 * editor's own), or changed beyond recognition: then it shows, and a run
 * after it arms the stop all the same. */
START_TEST(test_echo_changed)
{
    const char *sid = new_session();
    prompt(2, "go");
    event(sid, "{'kind':'MessageEvent','id':'u2','source':'user','llm_message':{'role':'user',"
               "'content':[{'type':'text','text':'go','cache_prompt':false}]}}");
    nothing_written();
    status(sid, "running");
    status(sid, "finished");
    answered(2, "{'stopReason':'end_turn'}");

    prompt(3, "go on");
    status(sid, "running"); /* before any message: the last turn's */
    status(sid, "finished");
    nothing_written();
    event(sid, USER("GO ON"));
    chunk(sid, "user_message_chunk", "GO ON");
    status(sid, "running");
    status(sid, "finished");
    answered(3, "{'stopReason':'end_turn'}");
}
END_TEST

/* ---- session/cancel ------------------------------------------------------------- */

START_TEST(test_cancel)
{
    const char *sid = new_session();
    /* nothing to cancel: no pause, no answer (a notification) */
    cancel("c0ffee01");
    cancel("nope");
    line("{'jsonrpc':'2.0','method':'session/cancel','params':{}}");
    ck_assert_uint_eq(count_calls(&F, "pause"), 0);
    nothing_written();

    prompt_runs(sid, 2, "slowly");
    cancel("c0ffee01");
    last_call("['pause','c0ffee01']");
    nothing_written();            /* the answer waits for the pause to land */
    event(sid, AGENT("partial")); /* updates before the pause still go */
    chunk(sid, "agent_message_chunk", "partial");
    event(sid, LS_ACTION); /* a call under way when the pause lands */
    json_t *m, *u = updated(sid, &m);
    equal_json(json_object_get(u, "sessionUpdate"), "'tool_call'");
    json_decref(m);
    status(sid, "paused");
    answered(2, "{'stopReason':'cancelled'}");
    /* its result after the answer is not the editor's any more (ACP: a
     * turn's updates come before its answer) */
    event(sid, "{'kind':'ObservationEvent','id':'o1','source':'environment','tool_name':"
               "'terminal','tool_call_id':'c1','action_id':'a1','observation':{'kind':"
               "'TerminalObservation','content':[{'type':'text','text':'a.c'}]}}");
    nothing_written();

    /* a pause that cannot land (nothing runs yet, or any more) ends the turn */
    prompt(3, "again");
    F.pause_rc = -EBUSY;
    cancel("c0ffee01");
    answered(3, "{'stopReason':'cancelled'}");
    /* and its late events end nothing, answer nothing twice */
    event(sid, USER("again"));
    chunk(sid, "user_message_chunk", "again");
    status(sid, "running");
    status(sid, "finished");
    nothing_written();
    ck_assert_uint_eq(count_calls(&F, "pause"), 2);
}
END_TEST

/* ---- session/request_permission ------------------------------------------------- */

static json_int_t asked(const char *sid, const char *call_id, const char *title)
{
    json_t *m = take();
    ck_assert_str_eq(json_string_value(json_object_get(m, "method")), "session/request_permission");
    json_int_t id = json_integer_value(json_object_get(m, "id"));
    ck_assert_int_gt(id, 0);
    json_t *p = json_object_get(m, "params");
    ck_assert_str_eq(json_string_value(json_object_get(p, "sessionId")), sid);
    json_t *tc = json_object_get(p, "toolCall");
    ck_assert_str_eq(json_string_value(json_object_get(tc, "toolCallId")), call_id);
    ck_assert_str_eq(json_string_value(json_object_get(tc, "title")), title);
    equal_json(json_object_get(p, "options"),
               "[{'optionId':'allow','name':'Allow','kind':'allow_once'},"
               "{'optionId':'reject','name':'Reject','kind':'reject_once'}]");
    json_decref(m);
    return id;
}

static void reply(json_int_t id, const char *body)
{
    char l[400];
    snprintf(l, sizeof(l), "{'jsonrpc':'2.0','id':%lld,%s}", (long long)id, body);
    line(l);
}

START_TEST(test_permission)
{
    const char *sid = new_session();
    prompt_runs(sid, 2, "clean up");
    event(sid, LS_ACTION);
    json_t *m;
    updated(sid, &m);
    json_decref(m);
    status(sid, "waiting_for_confirmation");
    json_int_t p = asked(sid, "c1", "$ ls");
    nothing_written();
    status(sid, "waiting_for_confirmation"); /* asked once while the answer is out */
    nothing_written();
    reply(p, "'result':{'outcome':{'outcome':'selected','optionId':'allow'}}");
    last_call("['confirm','c0ffee01',true,'The user rejected it in the editor.']");
    nothing_written();
    /* the same answer again is to nothing */
    reply(p, "'result':{'outcome':{'outcome':'selected','optionId':'allow'}}");
    ck_assert_uint_eq(count_calls(&F, "confirm"), 1);

    /* asked again: rejected, the pending calls named */
    status(sid, "running");
    status(sid, "waiting_for_confirmation");
    json_int_t q = asked(sid, "c1", "$ ls");
    ck_assert_int_ne(p, q);
    reply(q, "'result':{'outcome':{'outcome':'selected','optionId':'reject'}}");
    last_call("['confirm','c0ffee01',false,'The user rejected it in the editor.']");

    /* cancelled by the editor, or an error answer: rejected too */
    status(sid, "waiting_for_confirmation");
    q = asked(sid, "c1", "$ ls");
    reply(q, "'result':{'outcome':{'outcome':'cancelled'}}");
    last_call("['confirm','c0ffee01',false,'The user rejected it in the editor.']");
    status(sid, "waiting_for_confirmation");
    q = asked(sid, "c1", "$ ls");
    F.confirm_rc = -EIO; /* a confirm that fails is said on stderr, not to the editor */
    reply(q, "'error':{'code':-32603,'message':'the editor broke'}");
    last_call("['confirm','c0ffee01',false,'The user rejected it in the editor.']");
    nothing_written();

    /* the call's result: not pending any more, nothing to ask about */
    event(sid, "{'kind':'UserRejectObservation','id':'r1','source':'user','tool_name':"
               "'terminal','tool_call_id':'c1','action_id':'a1','rejection_reason':'no'}");
    json_t *u = updated(sid, &m);
    equal_json(json_object_get(u, "status"), "'failed'");
    json_decref(m);
    status(sid, "waiting_for_confirmation");
    nothing_written();
    status(sid, "idle");
    answered(2, "{'stopReason':'end_turn'}");
    /* answers to requests never made, or with ids not ours, are dropped */
    reply(999, "'result':{}");
    line("{'jsonrpc':'2.0','id':'s','result':{}}");
    nothing_written();
    ck_assert_uint_eq(count_calls(&F, "confirm"), 4);
}
END_TEST

/* ---- JSON-RPC errors and the line bound ------------------------------------------ */

START_TEST(test_rpc_errors)
{
    line("this is not json");
    refused(-1, RPC_PARSE_ERROR, "not JSON");
    line("{'jsonrpc':'2.0','id':1,'method':'initialize'");
    refused(-1, RPC_PARSE_ERROR, "not JSON");
    line("{'jsonrpc':'1.0','id':1,'method':'initialize'}");
    refused(-1, RPC_INVALID_REQUEST, "2.0");
    line("[{'jsonrpc':'2.0','id':1,'method':'initialize'}]");
    refused(-1, RPC_INVALID_REQUEST, "object");
    line("{'jsonrpc':'2.0','id':1,'method':7}");
    refused(-1, RPC_INVALID_REQUEST, "method");
    line("{'jsonrpc':'2.0','id':{},'method':'initialize'}");
    refused(-1, RPC_INVALID_REQUEST, "id");
    request(2, "no/such", "{}");
    refused(2, RPC_METHOD_NOT_FOUND, "no/such");
    line("{'jsonrpc':'2.0','id':3,'method':'_parley/custom'}");
    refused(3, RPC_METHOD_NOT_FOUND, "_parley/custom");
    request(4, "session/new", "[1]");
    refused(4, RPC_INVALID_PARAMS, "params must be an object");
    request(5, "session/prompt", "{'sessionId':'0123','prompt':[{'type':'text','text':'x'}]}");
    refused(5, RPC_RESOURCE_NOT_FOUND, "no session 0123");
    /* notifications are never answered, even unknown or malformed ones */
    line("{'jsonrpc':'2.0','method':'no/such','params':{}}");
    line("{'jsonrpc':'2.0','method':'session/new','params':[1]}");
    line("{'jsonrpc':'2.0','method':'initialize','params':{'protocolVersion':1}}");
    /* nor blank lines; CR LF is a newline */
    line("");
    line("   \t\r");
    nothing_written();
    line("{'jsonrpc':'2.0','id':6,'method':'initialize','params':{'protocolVersion':1}}\r");
    json_t *m = take();
    ck_assert_int_eq(json_integer_value(json_object_get(m, "id")), 6);
    json_decref(m);
    /* a line with a NUL inside is not JSON */
    acpa_line(A, "{\"a\"\0:1}", 8);
    refused(-1, RPC_PARSE_ERROR, "not JSON");
    ck_assert_uint_eq(json_array_size(F.calls), 0);
}
END_TEST

START_TEST(test_line_too_long)
{
    acpa_line_too_long(A);
    refused(-1, RPC_INVALID_REQUEST, "longer than 16777216 bytes");
    request(1, "initialize", "{'protocolVersion':1}");
    answered(1, "{'protocolVersion':1,'agentCapabilities':{'loadSession':true,"
                "'promptCapabilities':{'image':true,'audio':false,'embeddedContext':true},"
                "'mcpCapabilities':{'http':false,'sse':false}},'authMethods':[],"
                "'agentInfo':{'name':'parley','title':'parley','version':'" PARLEY_VERSION "'}}");
}
END_TEST

/* The reader of stdin (acp_inbox.c) holds at most the bound: a line of
 * exactly ACPA_LINE_MAX bytes passes, one byte more is dropped as it comes
 * and said once, and the lines after it are read as ever. */
static void *feed_pipe(void *arg)
{
    int fd = *(int *)arg;
    size_t n = ACPA_LINE_MAX + 1;
    char *big = malloc(3 * ACPA_LINE_MAX); /* one newline, at big[n] */
    ck_assert_ptr_nonnull(big);
    memset(big, 'a', 3 * ACPA_LINE_MAX);
    big[n] = '\n';
    struct {
        const char *p;
        size_t n;
    } parts[] = {{"{}\n", 3},
                 {big, ACPA_LINE_MAX},
                 {"\n", 1},
                 {big, n + 1},
                 {big + n + 1, 3 * ACPA_LINE_MAX / 2},
                 {"\n{\"x\":1}\n", 9},
                 {"last", 4}};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        for (size_t k = 0; k < parts[i].n;) {
            ssize_t w = write(fd, parts[i].p + k, parts[i].n - k);
            ck_assert_msg(w > 0, "write: %s", strerror(errno));
            k += (size_t)w;
        }
    close(fd);
    free(big);
    return NULL;
}

START_TEST(test_reader_bound)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    acp_inbox *in = acp_inbox_new(ACP_PENDING_DEFAULT);
    ck_assert_int_eq(acp_inbox_read(in, p[0]), 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, feed_pipe, &p[1]), 0);
    struct {
        acp_item_kind kind;
        size_t len;
    } want[] = {{ACPI_LINE, 2},     {ACPI_LINE, ACPA_LINE_MAX},
                {ACPI_TOO_LONG, 0}, {ACPI_TOO_LONG, 0},
                {ACPI_LINE, 7},     {ACPI_LINE, 4},
                {ACPI_EOF, 0}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        acp_item *it = acp_inbox_pop(in);
        ck_assert_msg(it->kind == want[i].kind && it->len == want[i].len,
                      "item %zu: kind %d len %zu, want kind %d len %zu", i, it->kind, it->len,
                      want[i].kind, want[i].len);
        free(it);
    }
    pthread_join(t, NULL);
    pthread_join(in->reader, NULL);
    in->reading = false;
    close(p[0]);
    acp_inbox_free(in);
}
END_TEST

/* Events past the inbox's bound: the conversation's next one becomes its
 * end, its later ones are dropped; another conversation's go on. */
START_TEST(test_inbox_cut)
{
    acp_inbox *in = acp_inbox_new(4096);
    char ev[1000];
    memset(ev, 'e', sizeof(ev));
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(acp_inbox_push(in, ACPI_EVENT, "a", ev, sizeof(ev)), 0);
    ck_assert_int_eq(acp_inbox_push(in, ACPI_LINE, NULL, "{}", 2), 0); /* lines always */
    for (int k = 0; k < 4; k++) {
        acp_item *it = acp_inbox_pop(in);
        ck_assert_int_eq(it->kind, ACPI_EVENT);
        free(it);
    }
    acp_item *it = acp_inbox_pop(in);
    ck_assert_int_eq(it->kind, ACPI_ENDED);
    ck_assert_str_eq(it->cid, "a");
    ck_assert_ptr_nonnull(strstr(it->data, "not reading"));
    free(it);
    it = acp_inbox_pop(in);
    ck_assert_int_eq(it->kind, ACPI_LINE);
    free(it);
    /* room again: a's events stay dropped, b's come */
    ck_assert_int_eq(acp_inbox_push(in, ACPI_EVENT, "a", ev, 10), 0);
    ck_assert_int_eq(acp_inbox_push(in, ACPI_EVENT, "b", ev, 10), 0);
    it = acp_inbox_pop(in);
    ck_assert_int_eq(it->kind, ACPI_EVENT);
    ck_assert_str_eq(it->cid, "b");
    free(it);
    acp_inbox_free(in);
}
END_TEST

/* ---- the editor's end ------------------------------------------------------------ */

/* At stdin's end the turns still running are paused and answered
 * cancelled; sessions only watched are left alone, and a pause that
 * fails still ends its turn (said on stderr). */
START_TEST(test_eof)
{
    const char *sid = new_session(); /* c0ffee01: a turn runs */
    prompt_runs(sid, 2, "slowly");
    request(3, "session/new", "{'cwd':'/w','mcpServers':[]}"); /* c0ffee02: idle */
    json_decref(take());
    request(4, "session/load", "{'sessionId':'abc123','cwd':'/w','mcpServers':[]}");
    acpa_synced(A, "abc123"); /* watched */
    answered(4, "{}");
    acpa_eof(A);
    last_call("['pause','c0ffee01']");
    ck_assert_uint_eq(count_calls(&F, "pause"), 1);
    answered(2, "{'stopReason':'cancelled'}");
    nothing_written();
    acpa_eof(A); /* nothing runs any more */
    ck_assert_uint_eq(count_calls(&F, "pause"), 1);

    prompt(5, "again");
    F.pause_rc = -EIO;
    acpa_eof(A);
    answered(5, "{'stopReason':'cancelled'}");
    ck_assert_uint_eq(count_calls(&F, "pause"), 2);
}
END_TEST

/* ---- a conversation that stops coming --------------------------------------------- */

START_TEST(test_ended)
{
    const char *sid = new_session();
    prompt_runs(sid, 2, "x");
    acpa_ended(A, sid, "the editor is not reading");
    refused(2, RPC_INTERNAL_ERROR, "lost the conversation c0ffee01");
    prompt(3, "y");
    refused(3, RPC_RESOURCE_NOT_FOUND, "session/load");
    /* loading it again starts afresh: replayed whole, then live */
    request(4, "session/load", "{'sessionId':'c0ffee01','cwd':'/w','mcpServers':[]}");
    ck_assert_uint_eq(count_calls(&F, "attach"), 2);
    event(sid, USER("x"));
    chunk(sid, "user_message_chunk", "x");
    acpa_ended(A, sid, "the server went away");
    refused(4, RPC_INTERNAL_ERROR, "cannot load the conversation c0ffee01");
    nothing_written();
    ck_assert_uint_eq(acpa_sessions(A), 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("acp_agent");
    TCase *tc = tcase_create("acp_agent");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_initialize);
    tcase_add_test(tc, test_session_new);
    tcase_add_test(tc, test_session_new_attach_fails);
    tcase_add_test(tc, test_session_load_replays);
    tcase_add_test(tc, test_session_load_unknown);
    tcase_add_test(tc, test_prompt_turn);
    tcase_add_test(tc, test_prompt_error);
    tcase_add_test(tc, test_prompt_busy_and_bad);
    tcase_add_test(tc, test_prompt_blocks);
    tcase_add_test(tc, test_stale_stop);
    tcase_add_test(tc, test_echo_changed);
    tcase_add_test(tc, test_cancel);
    tcase_add_test(tc, test_permission);
    tcase_add_test(tc, test_rpc_errors);
    tcase_add_test(tc, test_line_too_long);
    tcase_add_test(tc, test_reader_bound);
    tcase_add_test(tc, test_inbox_cut);
    tcase_add_test(tc, test_ended);
    tcase_add_test(tc, test_eof);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
