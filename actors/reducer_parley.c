/*
 * reducer_parley.c - see reducer_parley.h. One function per event kind,
 * each reading its event and appending what it makes; what a refused
 * event appended is taken back, and what the converter remembers (a
 * delegation's call id, a stuck rule, the count of generated ids) is
 * changed only once the whole event has converted.
 */
#include "actors/reducer_parley.h"

#include "actors/reducer.h"
#include "runtime/text.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RULE_MAX = 64 };

struct parley_conv {
    json_t *delegations;       /* tool_call_id -> true, for delegation calls only */
    char stuck_rule[RULE_MAX]; /* the last stuck finding's, for the status after it */
    unsigned long gen;         /* ids given to events without one */
};

parley_conv *parley_conv_new(void)
{
    parley_conv *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    if ((c->delegations = json_object()) == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

void parley_conv_free(parley_conv *c)
{
    if (c == NULL)
        return;
    json_decref(c->delegations);
    free(c);
}

/* ------------------------------------------------------------ helpers --- */

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static bool is(const char *s, const char *want)
{
    return s != NULL && strcmp(s, want) == 0;
}

static bool blank(const char *s)
{
    size_t a, n = 0;
    if (s != NULL)
        reducer_trim(s, strlen(s), &a, &n);
    return n == 0;
}

/* What one event makes, and what it asks the converter to remember. */
typedef struct emit {
    json_t *out;
    const char *id, *ts; /* the event's (id: or a generated one) */
    const char *why;     /* for -EINVAL */
    const char *delegation;
    enum { RULE_KEEP, RULE_SET, RULE_CLEAR } rule_op;
    char rule[RULE_MAX];
    int rc;
} emit;

static int fail(emit *e, const char *why)
{
    e->why = why;
    return -EINVAL;
}

static void push(emit *e, const char *type, json_t *payload)
{
    json_t *ctx = json_pack("{s:s, s:s}", "sessionId", "", "conversationId", "main");
    if (ctx != NULL && e->ts != NULL)
        json_object_set_new(ctx, "timestamp", json_string(e->ts));
    json_t *ev = json_pack("{s:s, s:o, s:o}", "type", type, "payload", payload, "context", ctx);
    if (ev == NULL || json_array_append_new(e->out, ev) != 0)
        e->rc = -ENOMEM;
}

/* block:upsert of block (taken). status NULL: the reducer's (pending when
 * new, kept otherwise). stamp: with the event's time. */
static void upsert(emit *e, json_t *block, const char *status, bool stamp)
{
    if (block == NULL) {
        e->rc = -ENOMEM;
        return;
    }
    if (status != NULL)
        json_object_set_new(block, "status", json_string(status));
    if (stamp && e->ts != NULL)
        json_object_set_new(block, "timestamp", json_string(e->ts));
    push(e, "block:upsert", json_pack("{s:o}", "block", block));
}

/* A complete block of the event's own. */
static void put(emit *e, json_t *block)
{
    upsert(e, block, "complete", true);
}

/* Sets key to a copy of the string o[from] when it is one. */
static void set_str(json_t *to, const char *key, const json_t *o, const char *from)
{
    json_t *v = json_object_get(o, from);
    if (json_is_string(v))
        json_object_set_new(to, key, json_copy(v));
}

/* The `key` strings of the list's parts of type `type` (or of no type),
 * joined with "\n"; *image set if a part is an image. NULL: no memory. */
static json_t *joined(const json_t *list, const char *key, const char *type, bool *image)
{
    rt_text t = {0};
    size_t i, taken = 0;
    json_t *p;
    json_array_foreach(list, i, p)
    {
        const char *pt = str(p, "type");
        json_t *s = json_object_get(p, key);
        if (image != NULL && is(pt, "image"))
            *image = true;
        if (!json_is_string(s) || (pt != NULL && strcmp(pt, type) != 0))
            continue;
        if (taken++ > 0)
            rt_text_putc(&t, '\n');
        rt_text_put(&t, json_string_value(s), json_string_length(s));
    }
    json_t *r = t.failed ? NULL : json_stringn(t.p != NULL ? t.p : "", t.len);
    free(t.p);
    return r;
}

/* Message content (a string, or a list of text and image parts) as text. */
static json_t *text_of(const json_t *content, bool *image)
{
    if (json_is_string(content))
        return json_copy((json_t *)content);
    return joined(content, "text", "text", image);
}

/* reasoning_content, else the thinking blocks' text. */
static json_t *reasoning_of(const json_t *o)
{
    const char *r = str(o, "reasoning_content");
    if (!blank(r))
        return json_string(r);
    return joined(json_object_get(o, "thinking_blocks"), "thinking", "thinking", NULL);
}

/* A text block <id><suffix> of text (taken); nothing if it is blank. */
static void text_block(emit *e, const char *type, const char *suffix, json_t *text)
{
    if (text == NULL) {
        e->rc = -ENOMEM;
        return;
    }
    if (blank(json_string_value(text))) {
        json_decref(text);
        return;
    }
    put(e, json_pack("{s:s+, s:s, s:o}", "id", e->id, suffix, "type", type, "content", text));
}

/* A system block <id> of message (taken) and metadata (taken, or NULL). */
static void system_block(emit *e, const char *subtype, json_t *message, json_t *meta)
{
    json_t *b = json_pack("{s:s, s:s, s:s, s:o}", "id", e->id, "type", "system", "subtype", subtype,
                          "message", message);
    if (b != NULL && meta != NULL)
        json_object_set(b, "metadata", meta);
    json_decref(meta);
    put(e, b);
}

/* ----------------------------------------------------------- messages --- */

/* An image URL as an image part: a data: URL as base64, else as url. */
static json_t *image_part(const char *url)
{
    const char *semi = strchr(url, ';'), *comma = strchr(url, ',');
    if (strncmp(url, "data:", 5) == 0 && semi != NULL && comma != NULL &&
        strncmp(semi, ";base64,", 8) == 0 && comma == semi + 7)
        return json_pack("{s:s, s:{s:s, s:s, s:s%}}", "type", "image", "source", "type", "base64",
                         "data", comma + 1, "mediaType", url + 5, (size_t)(semi - url - 5));
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "image", "source", "type", "url", "data", url);
}

static json_t *parts_of(const json_t *content)
{
    json_t *a = json_array(), *p, *url;
    size_t i, j;
    json_array_foreach(content, i, p)
    {
        const char *type = str(p, "type");
        if (is(type, "text") && str(p, "text") != NULL)
            json_array_append_new(a,
                                  json_pack("{s:s, s:s}", "type", "text", "text", str(p, "text")));
        json_array_foreach(is(type, "image") ? json_object_get(p, "image_urls") : NULL, j, url)
        {
            if (json_is_string(url))
                json_array_append_new(a, image_part(json_string_value(url)));
        }
    }
    return a;
}

static int message(parley_conv *c, const json_t *ev, emit *e)
{
    (void)c;
    json_t *m = json_object_get(ev, "llm_message");
    if (!json_is_object(m))
        return fail(e, "a MessageEvent without an llm_message");
    const char *src = str(ev, "source");
    if (src == NULL)
        src = is(str(m, "role"), "assistant") ? "agent" : "user";
    json_t *content = json_object_get(m, "content");
    bool image = false;
    json_t *text = text_of(content, &image);
    if (text == NULL)
        return -ENOMEM;
    if (is(src, "user") && image) {
        put(e, json_pack("{s:s, s:s, s:o}", "id", e->id, "type", "user_message", "content",
                         parts_of(content)));
    } else if (is(src, "user") && !blank(json_string_value(text))) {
        put(e, json_pack("{s:s, s:s, s:O}", "id", e->id, "type", "user_message", "content", text));
    } else if (is(src, "agent")) {
        text_block(e, "thinking", "-reasoning", reasoning_of(m));
        text_block(e, "assistant_text", "", json_incref(text));
    } else if (!is(src, "user") && !blank(json_string_value(text))) {
        system_block(e, is(src, "hook") ? "hook_response" : "log", json_incref(text),
                     json_pack("{s:s}", "source", src));
    }
    json_decref(text);
    return 0;
}

/* ------------------------------------------------------------ actions --- */

/* What the call was given: the action without its kind (an ACP call's
 * raw_input); with no action, the call's arguments. */
static json_t *input_of(const json_t *ev)
{
    json_t *a = json_object_get(ev, "action");
    json_t *raw = json_object_get(a, "raw_input");
    if (is(str(a, "kind"), "ACPToolCallAction") && json_is_object(raw))
        return json_deep_copy(raw);
    if (json_is_object(a)) {
        json_t *in = json_deep_copy(a);
        json_object_del(in, "kind");
        return in;
    }
    const char *args = str(json_object_get(ev, "tool_call"), "arguments");
    json_t *parsed = args != NULL ? json_loads(args, 0, NULL) : NULL;
    if (json_is_object(parsed))
        return parsed;
    json_decref(parsed);
    return args != NULL ? json_pack("{s:s}", "arguments", args) : json_object();
}

/* The delegate tool's "delegate" command: one sub-agent for its tasks. */
static json_t *delegate_spawn(const json_t *tasks)
{
    rt_text prompt = {0}, desc = {0};
    const char *id;
    json_t *task;
    size_t k = 0;
    rt_text_printf(&desc, "Delegating %zu task(s) to: ", json_object_size(tasks));
    json_object_foreach((json_t *)tasks, id, task)
    {
        rt_text_puts(&prompt, prompt.len > 0 ? "\n" : "");
        rt_text_puts(&prompt, id);
        rt_text_puts(&prompt, ": ");
        rt_text_puts(&prompt, json_is_string(task) ? json_string_value(task) : "");
        rt_text_puts(&desc, k++ > 0 ? ", " : "");
        rt_text_puts(&desc, id);
    }
    json_t *p = prompt.failed || desc.failed
                    ? NULL
                    : json_pack("{s:s%, s:s%}", "prompt", prompt.p ? prompt.p : "", prompt.len,
                                "description", desc.p, desc.len);
    free(prompt.p);
    free(desc.p);
    return p;
}

/* The subagent:spawned payload (without toolUseId) if the call starts a
 * sub-agent (reducer_parley.h says which do), else NULL. */
static json_t *delegation(const json_t *ev, const json_t *input)
{
    const char *ak = str(json_object_get(ev, "action"), "kind"), *tn = str(ev, "tool_name");
    bool acp_task = is(ak, "ACPToolCallAction") && str(input, "prompt") != NULL &&
                    str(input, "subagent_type") != NULL;
    json_t *tasks = json_object_get(input, "tasks");
    if (is(ak, "TaskAction") || is(tn, "task") || is(tn, "Task") || acp_task) {
        json_t *p = json_pack("{s:s}", "prompt", str(input, "prompt") ? str(input, "prompt") : "");
        set_str(p, "subagentType", input, "subagent_type");
        set_str(p, "description", input, "description");
        return p;
    }
    if ((is(ak, "DelegateAction") || is(tn, "delegate")) && is(str(input, "command"), "delegate") &&
        json_is_object(tasks))
        return delegate_spawn(tasks);
    return NULL;
}

/* Think and finish actions as upstream's ACP mapping shows them: as
 * text, with no tool call. */
static bool shown_as_text(emit *e, const json_t *a)
{
    const char *kind = str(a, "kind"), *thought = str(a, "thought"), *msg = str(a, "message");
    if (is(kind, "ThinkAction"))
        text_block(e, "thinking", "-think", json_string(thought ? thought : ""));
    else if (is(kind, "FinishAction"))
        text_block(e, "assistant_text", "-finish", json_string(msg ? msg : ""));
    return is(kind, "ThinkAction") || is(kind, "FinishAction");
}

/* The call's tool_use, input taken; no status (see the header). */
static void tool_use(emit *e, const json_t *ev, const char *tcid, json_t *input)
{
    json_t *a = json_object_get(ev, "action");
    const char *name =
        str(ev, "tool_name") ? str(ev, "tool_name") : str(json_object_get(ev, "tool_call"), "name");
    json_t *b = json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", tcid, "type", "tool_use", "toolName",
                          name ? name : "", "toolUseId", tcid, "input", input);
    if (b != NULL && !blank(str(ev, "summary")))
        set_str(b, "description", ev, "summary");
    if (b != NULL && is(str(a, "kind"), "ACPToolCallAction") && !blank(str(a, "title")))
        set_str(b, "displayName", a, "title");
    upsert(e, b, NULL, true);
}

static int action(parley_conv *c, const json_t *ev, emit *e)
{
    (void)c; /* what it remembers goes through e */
    const char *tcid = str(ev, "tool_call_id");
    if (blank(tcid))
        return fail(e, "an ActionEvent without a tool_call_id");
    json_t *a = json_object_get(ev, "action");
    /* a hosted agent's thought is its agent_thought_chunks (acp_map.c) */
    bool acp = str(a, "kind") != NULL && strncmp(str(a, "kind"), "ACP", 3) == 0;
    text_block(e, "thinking", "-reasoning", reasoning_of(ev));
    text_block(e, acp ? "thinking" : "assistant_text", "-thought",
               text_of(json_object_get(ev, "thought"), NULL));
    if (shown_as_text(e, a))
        return 0;
    json_t *input = input_of(ev);
    json_t *spawn = input != NULL ? delegation(ev, input) : NULL;
    if (spawn != NULL) {
        json_object_set_new(spawn, "toolUseId", json_string(tcid));
        push(e, "subagent:spawned", spawn);
        e->delegation = tcid;
    }
    tool_use(e, ev, tcid, input);
    return 0;
}

/* ------------------------------------------------------------ results --- */

/* The call tcid is answered with output (taken): its tool_use gets its
 * status, and a tool_result (metadata meta, taken) or, for a delegation,
 * subagent:completed says what came of it. */
static void settle(parley_conv *c, emit *e, const char *tcid, json_t *output, bool error,
                   const char *agent, json_t *meta)
{
    upsert(e, json_pack("{s:s, s:s, s:s}", "id", tcid, "type", "tool_use", "toolUseId", tcid),
           error ? "error" : "complete", false);
    if (json_object_get(c->delegations, tcid) != NULL) {
        json_t *p =
            json_pack("{s:s, s:s}", "toolUseId", tcid, "status", error ? "failed" : "completed");
        if (p != NULL && json_is_string(output))
            json_object_set(p, "output", output);
        if (p != NULL && agent != NULL)
            json_object_set_new(p, "agentId", json_string(agent));
        push(e, "subagent:completed", p);
    } else {
        json_t *b =
            json_pack("{s:s+, s:s, s:s, s:O, s:b}", "id", "result-", tcid, "type", "tool_result",
                      "toolUseId", tcid, "output", output ? output : json_null(), "isError", error);
        if (b != NULL && meta != NULL)
            json_object_set(b, "metadata", meta);
        put(e, b);
    }
    json_decref(output);
    json_decref(meta);
}

static int observation(parley_conv *c, const json_t *ev, emit *e)
{
    const char *tcid = str(ev, "tool_call_id");
    if (blank(tcid))
        return fail(e, "an ObservationEvent without a tool_call_id");
    json_t *obs = json_object_get(ev, "observation");
    const char *kind = str(obs, "kind");
    if (is(kind, "ThinkObservation") || is(kind, "FinishObservation"))
        return 0; /* their actions made no tool call */
    json_t *out = text_of(json_object_get(obs, "content"), NULL);
    if (out == NULL)
        return -ENOMEM;
    if (json_string_length(out) == 0 && obs != NULL) {
        json_decref(out);
        out = json_deep_copy(obs);
    }
    settle(c, e, tcid, out, json_is_true(json_object_get(obs, "is_error")), str(obs, "task_id"),
           NULL);
    return 0;
}

static int rejection(parley_conv *c, const json_t *ev, emit *e)
{
    const char *tcid = str(ev, "tool_call_id"), *why = str(ev, "rejection_reason");
    if (blank(tcid))
        return fail(e, "a UserRejectObservation without a tool_call_id");
    json_t *meta = str(ev, "rejection_source") != NULL ? json_object() : NULL;
    set_str(meta, "rejectionSource", ev, "rejection_source");
    settle(c, e, tcid, json_string(why ? why : "User rejected the action"), true, NULL, meta);
    return 0;
}

static int agent_error(parley_conv *c, const json_t *ev, emit *e)
{
    const char *tcid = str(ev, "tool_call_id"), *err = str(ev, "error");
    if (!blank(tcid)) {
        settle(c, e, tcid, json_string(err ? err : ""), true, NULL, NULL);
        return 0;
    }
    json_t *b =
        json_pack("{s:s, s:s, s:s}", "id", e->id, "type", "error", "message", err ? err : "");
    if (b != NULL)
        set_str(b, "code", json_object_get(ev, "classification"), "kind");
    put(e, b);
    return 0;
}

/* ------------------------------------------------- errors and statuses --- */

/* The length of the rule name s starts with ("monologue: ..."), or 0. */
static size_t rule_len(const char *s)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyz_");
    return n > 0 && n < RULE_MAX && s[n] == ':' ? n : 0;
}

/* The metadata of one of parley's own findings (seq_own.c), or NULL. */
static json_t *finding(emit *e, const char *code, const char *detail)
{
    size_t n;
    if (detail == NULL)
        return NULL;
    if (is(code, "StuckPatternDetected") && strncmp(detail, "stuck: ", 7) == 0 &&
        (n = rule_len(detail + 7)) > 0) {
        snprintf(e->rule, sizeof(e->rule), "%.*s", (int)n, detail + 7);
        e->rule_op = RULE_SET;
        return json_pack("{s:s}", "stuckRule", e->rule);
    }
    if (is(code, "ComplianceViolation") && strncmp(detail, "observed ", 9) == 0 &&
        (n = rule_len(detail + 9)) > 0)
        return json_pack("{s:s%, s:s}", "gateRule", detail + 9, n, "policy", "observe");
    if (is(code, "DeferredMessageExpired") && (n = rule_len(detail)) > 0)
        return json_pack("{s:s%}", "gateRule", detail, n);
    return NULL;
}

static int conv_error(parley_conv *c, const json_t *ev, emit *e)
{
    (void)c;
    const char *code = str(ev, "code"), *detail = str(ev, "detail");
    json_t *b =
        json_pack("{s:s, s:s, s:s}", "id", e->id, "type", "error", "message", detail ? detail : "");
    json_t *meta = finding(e, code, detail);
    if (b != NULL && code != NULL)
        json_object_set_new(b, "code", json_string(code));
    if (b != NULL && meta != NULL)
        json_object_set(b, "metadata", meta);
    json_decref(meta);
    put(e, b);
    return 0;
}

/* The run is over: nothing more comes until a message or a run. */
static bool ends_run(const char *status)
{
    return is(status, "finished") || is(status, "idle") || is(status, "error") ||
           is(status, "stuck");
}

static int state_update(parley_conv *c, const json_t *ev, emit *e)
{
    if (!is(str(ev, "key"), "execution_status"))
        return 0;
    const char *s = str(ev, "value");
    if (s == NULL)
        return fail(e, "an execution_status update whose value is not a string");
    const char *rule = is(s, "stuck") && c->stuck_rule[0] ? c->stuck_rule : NULL;
    json_t *meta = json_pack("{s:s}", "executionStatus", s);
    if (meta != NULL && rule != NULL)
        json_object_set_new(meta, "stuckRule", json_string(rule));
    system_block(e, "status",
                 rule ? json_sprintf("status: %s (rule: %s)", s, rule)
                      : json_sprintf("status: %s", s),
                 meta);
    if (ends_run(s))
        push(e, "session:idle", json_pack("{s:s}", "sessionId", ""));
    if (!is(s, "stuck"))
        e->rule_op = RULE_CLEAR;
    return 0;
}

/* ---------------------------------------------------------- the rest --- */

static int system_prompt(parley_conv *c, const json_t *ev, emit *e)
{
    (void)c;
    json_t *tools = json_array(), *t;
    size_t i;
    json_array_foreach(json_object_get(ev, "tools"), i, t)
    {
        const char *name = str(t, "title") ? str(t, "title") : str(t, "kind");
        json_array_append_new(tools, json_string(name ? name : "?"));
    }
    const char *p = str(json_object_get(ev, "system_prompt"), "text");
    system_block(e, "session_start", json_string(p ? p : ""), json_pack("{s:o}", "tools", tools));
    return 0;
}

static int condensation(parley_conv *c, const json_t *ev, emit *e)
{
    (void)c;
    size_t n = json_array_size(json_object_get(ev, "forgotten_event_ids"));
    const char *summary = str(ev, "summary");
    system_block(e, "log",
                 !blank(summary) ? json_string(summary) : json_sprintf("condensed %zu events", n),
                 json_pack("{s:I}", "condensedEvents", (json_int_t)n));
    return 0;
}

static int hook(parley_conv *c, const json_t *ev, emit *e)
{
    (void)c;
    bool blocked = json_is_true(json_object_get(ev, "blocked"));
    if (json_is_true(json_object_get(ev, "success")) && !blocked)
        return 0;
    const char *type = str(ev, "hook_event_type") ? str(ev, "hook_event_type") : "?";
    const char *why = !blank(str(ev, "reason"))   ? str(ev, "reason")
                      : !blank(str(ev, "error"))  ? str(ev, "error")
                      : !blank(str(ev, "stderr")) ? str(ev, "stderr")
                                                  : str(ev, "hook_command");
    json_t *meta = json_pack("{s:s, s:b}", "hookEventType", type, "blocked", blocked);
    if (meta != NULL)
        json_object_set(meta, "exitCode", json_object_get(ev, "exit_code"));
    system_block(
        e, "hook_response",
        json_sprintf("%s hook %s: %s", type, blocked ? "blocked" : "failed", why ? why : ""), meta);
    return 0;
}

/* Upstream's own ACP agent: each event the call's whole state so far. */
static int acp_tool_call(parley_conv *c, const json_t *ev, emit *e)
{
    (void)c;
    const char *tcid = str(ev, "tool_call_id"), *st = str(ev, "status");
    if (blank(tcid))
        return fail(e, "an ACPToolCallEvent without a tool_call_id");
    bool failed = is(st, "failed"), done = failed || is(st, "completed");
    json_t *raw = json_object_get(ev, "raw_input");
    json_t *b = json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", tcid, "type", "tool_use", "toolName",
                          str(ev, "tool_kind") ? str(ev, "tool_kind") : "other", "toolUseId", tcid,
                          "input", json_is_object(raw) ? json_deep_copy(raw) : json_object());
    if (b != NULL && !blank(str(ev, "title")))
        set_str(b, "displayName", ev, "title");
    upsert(e, b, done ? (failed ? "error" : "complete") : NULL, true);
    if (!done)
        return 0;
    json_t *out = json_object_get(ev, "raw_output");
    if (out == NULL)
        out = json_object_get(ev, "content");
    bool err = failed || json_is_true(json_object_get(ev, "is_error"));
    put(e, json_pack("{s:s+, s:s, s:s, s:O, s:b}", "id", "result-", tcid, "type", "tool_result",
                     "toolUseId", tcid, "output", out ? out : json_null(), "isError", err));
    return 0;
}

/* ---------------------------------------------------------------- API --- */

typedef int (*conv_fn)(parley_conv *c, const json_t *ev, emit *e);

static const struct {
    const char *kind;
    conv_fn fn;
} kinds[] = {
    {"MessageEvent", message},
    {"ActionEvent", action},
    {"ObservationEvent", observation},
    {"UserRejectObservation", rejection},
    {"AgentErrorEvent", agent_error},
    {"ConversationErrorEvent", conv_error},
    {"ConversationStateUpdateEvent", state_update},
    {"SystemPromptEvent", system_prompt},
    {"Condensation", condensation},
    {"HookExecutionEvent", hook},
    {"ACPToolCallEvent", acp_tool_call},
};

/* What the event asked to remember, now that it converted. */
static void remember(parley_conv *c, const emit *e)
{
    if (e->delegation != NULL)
        json_object_set_new(c->delegations, e->delegation, json_true());
    if (e->rule_op == RULE_SET)
        memcpy(c->stuck_rule, e->rule, sizeof(c->stuck_rule));
    else if (e->rule_op == RULE_CLEAR)
        c->stuck_rule[0] = '\0';
}

int parley_conv_event(parley_conv *c, const json_t *event, json_t *out, char *why, size_t whylen)
{
    const char *kind = str(event, "kind");
    char gen[32];
    emit e = {.out = out, .id = str(event, "id"), .ts = str(event, "timestamp")};
    if (e.id == NULL) {
        snprintf(gen, sizeof(gen), "parley-%lu", c->gen + 1);
        e.id = gen;
    }
    size_t had = json_array_size(out);
    int rc = !json_is_object(event) ? fail(&e, "an event that is not an object")
             : kind == NULL         ? fail(&e, "an event without a kind")
                                    : 0;
    for (size_t i = 0; kind != NULL && i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strcmp(kind, kinds[i].kind) == 0)
            rc = kinds[i].fn(c, event, &e);
    if (rc == 0)
        rc = e.rc;
    if (rc == -EINVAL && why != NULL && whylen > 0)
        snprintf(why, whylen, "%s", e.why);
    if (rc != 0) {
        while (json_array_size(out) > had)
            json_array_remove(out, had);
        return rc;
    }
    if (e.id == gen && json_array_size(out) > had)
        c->gen++;
    remember(c, &e);
    return 0;
}
