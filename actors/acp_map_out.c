/*
 * acp_map_out.c - a conversation's events as ACP session updates for an
 * editor, and the stop reason a status gives its prompt turn (the table
 * is in acp_map.h, at acp_out). The reverse of acp_map.c: what parley's
 * hosted-agent adapter stored (ACPToolCallAction, ACPPlanAction and their
 * observations) is given back as the agent sent it; upstream's events
 * are mapped as the OpenHands CLI maps them (spec/acp-reducer.md A'),
 * without its gaps.
 *
 * The state is small: the calls the editor was told of and not yet given
 * a result (a result for any other comes as a whole tool_call), whether
 * the conversation ran since the last stop, and what the last
 * conversation error means for the stop reason.
 */
#include "acp_map.h"
#include "acp_map_impl.h"

#include <errno.h>
#include <sys/types.h>
#include <stdlib.h>
#include <string.h>

struct acp_out {
    acp_limits l;
    char **calls; /* announced, no result yet; oldest first */
    size_t ncalls;
    bool ran;                 /* execution_status running since the last stop */
    const char *error_reason; /* the stop reason the last error gives */
};

static bool is(const char *s, const char *want)
{
    return s != NULL && strcmp(s, want) == 0;
}

static bool blank(const char *s)
{
    for (; s != NULL && *s != '\0'; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r')
            return false;
    return true;
}

static bool one_of(const char *s, const char *const *names)
{
    for (; s != NULL && *names != NULL; names++)
        if (strcmp(s, *names) == 0)
            return true;
    return false;
}

static const char *const tool_kinds[] = {"read",        "edit",    "delete", "move",
                                         "search",      "execute", "think",  "fetch",
                                         "switch_mode", "other",   NULL};

/* ---- the calls the editor knows --------------------------------------------- */

static ssize_t call_at(const acp_out *o, const char *id)
{
    for (size_t i = 0; i < o->ncalls; i++)
        if (strcmp(o->calls[i], id) == 0)
            return (ssize_t)i;
    return -1;
}

static void call_forget(acp_out *o, const char *id)
{
    ssize_t i = call_at(o, id);
    if (i < 0)
        return;
    free(o->calls[i]);
    memmove(&o->calls[i], &o->calls[i + 1], (o->ncalls - (size_t)i - 1) * sizeof(*o->calls));
    o->ncalls--;
}

/* Out of room, the oldest is forgotten: its result then comes as a
 * tool_call, which an editor takes as well. */
static void call_remember(acp_out *o, const char *id)
{
    if (call_at(o, id) >= 0)
        return;
    if (o->ncalls == ACP_OUT_CALLS_MAX)
        call_forget(o, o->calls[0]);
    char *c = strdup(id);
    if (c != NULL)
        o->calls[o->ncalls++] = c;
}

/* ---- building updates ------------------------------------------------------- */

static json_t *text_block(const char *s, size_t n, size_t max)
{
    acp_text t = {0};
    acp__text_put(&t, s, n, max);
    json_t *b = json_pack("{s:s, s:s%}", "type", "text", "text", t.s != NULL ? t.s : "", t.len);
    free(t.s);
    return b;
}

/* An agent's title, cut at ACP_TITLE_MAX. */
static json_t *title_str(const char *s)
{
    acp_text t = {0};
    acp__text_put(&t, s != NULL ? s : "", s != NULL ? strlen(s) : 0, ACP_TITLE_MAX);
    json_t *title = json_stringn(t.s != NULL ? t.s : "", t.len);
    free(t.s);
    return title;
}

static void push(json_t *out, json_t *update)
{
    if (update != NULL)
        json_array_append_new(out, update);
}

/* A chunk of `kind` holding block (stolen). */
static void chunk(json_t *out, const char *kind, json_t *block, const char *mid)
{
    if (block == NULL)
        return;
    json_t *u = json_pack("{s:s, s:o}", "sessionUpdate", kind, "content", block);
    if (u != NULL && mid != NULL)
        json_object_set_new(u, "messageId", json_string(mid));
    push(out, u);
}

static void text_chunk(acp_out *o, json_t *out, const char *kind, json_t *s, const char *mid)
{
    if (!json_is_string(s) || blank(json_string_value(s)))
        return;
    chunk(out, kind, text_block(json_string_value(s), json_string_length(s), o->l.text_max), mid);
}

/* "Error: " and the text, as one block. */
static json_t *prefixed_block(const char *prefix, const char *s, size_t max)
{
    acp_text t = {0};
    acp__text_put(&t, prefix, strlen(prefix), max);
    acp__text_put(&t, s, strlen(s), max);
    json_t *b = text_block(t.s != NULL ? t.s : "", t.len, max);
    free(t.s);
    return b;
}

/* An image URL: a data: URL as an image block, any other as a link. */
static json_t *image_block(const char *url, size_t max)
{
    size_t n = strlen(url);
    if (n > max)
        return NULL;
    const char *comma = strchr(url, ',');
    if (strncmp(url, "data:", 5) == 0 && comma != NULL && comma - url >= 12 &&
        strncmp(comma - 7, ";base64", 7) == 0 && comma - 7 > url + 5)
        return json_pack("{s:s, s:s, s:s#}", "type", "image", "data", comma + 1, "mimeType",
                         url + 5, (int)(comma - 7 - (url + 5)));
    return json_pack("{s:s, s:s, s:s}", "type", "resource_link", "name", "image", "uri", url);
}

/* A message's content (a string, or text and image parts) as chunks. */
static void content_chunks(acp_out *o, json_t *out, const char *kind, json_t *content,
                           const char *mid)
{
    if (json_is_string(content)) {
        text_chunk(o, out, kind, content, mid);
        return;
    }
    size_t i, j;
    json_t *c, *url;
    json_array_foreach(content, i, c)
    {
        const char *type = acp__str(c, "type");
        if (type == NULL || is(type, "text")) {
            text_chunk(o, out, kind, json_object_get(c, "text"), mid);
        } else if (is(type, "image")) {
            json_array_foreach(json_object_get(c, "image_urls"), j, url)
            {
                if (json_is_string(url))
                    chunk(out, kind, image_block(json_string_value(url), o->l.value_max), mid);
            }
        }
    }
}

/* ---- titles, kinds and locations of upstream's actions (A') ---------------- */

/* s with newlines as spaces, trimmed, appended. */
static void put_flat(acp_text *t, const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    size_t start = t->len;
    acp__text_put(t, s, n, ACP_TITLE_MAX);
    for (size_t i = start; i < t->len; i++)
        if (t->s[i] == '\n' || t->s[i] == '\r')
            t->s[i] = ' ';
}

static const char *tool_kind_of(const char *tool, json_t *action)
{
    const char *ak = acp__str(action, "kind");
    if (is(tool, "think"))
        return "think";
    if (tool != NULL && strncmp(tool, "browser", 7) == 0)
        return "fetch";
    if (is(ak, "FileEditorAction"))
        return is(acp__str(action, "command"), "view") ? "read" : "edit";
    if (is(tool, "terminal") && !is(ak, "DelegateAction"))
        return "execute";
    return "other";
}

/* "{summary}: {what}", or either alone; an untitled call has its tool's
 * name (upstream: ""). */
static json_t *title_of(json_t *e, const char *tool, json_t *action)
{
    acp_text t = {0};
    const char *summary = acp__str(e, "summary"), *ak = acp__str(action, "kind");
    const char *cmd = acp__str(action, "command"), *path = acp__str(action, "path");
    if (!blank(summary))
        put_flat(&t, summary);
    bool editor = is(ak, "FileEditorAction") && !blank(path);
    bool terminal = is(ak, "TerminalAction");
    if ((editor || terminal) && t.len > 0)
        acp__text_put(&t, ": ", 2, ACP_TITLE_MAX);
    if (editor) {
        const char *verb = is(cmd, "view") ? "Reading " : "Editing ";
        acp__text_put(&t, verb, strlen(verb), ACP_TITLE_MAX);
        put_flat(&t, path);
    } else if (terminal && !blank(cmd)) {
        acp__text_put(&t, "$ ", 2, ACP_TITLE_MAX);
        put_flat(&t, cmd);
    } else if (terminal || t.len == 0) {
        put_flat(&t, tool != NULL ? tool : "");
    }
    json_t *title = title_str(t.s);
    free(t.s);
    return title;
}

/* A FileEditorAction's file, at the line it looks at. */
static json_t *locations_of(json_t *action, size_t max)
{
    const char *path = acp__str(action, "path");
    if (!is(acp__str(action, "kind"), "FileEditorAction") || blank(path) || strlen(path) > max)
        return NULL;
    json_t *loc = json_pack("{s:s}", "path", path);
    json_t *line = json_array_get(json_object_get(action, "view_range"), 0);
    if (!json_is_integer(line))
        line = json_object_get(action, "insert_line");
    if (json_is_integer(line) && json_integer_value(line) >= 0)
        json_object_set(loc, "line", line);
    return json_pack("[o]", loc);
}

/* What a FileEditorAction writes, as a diff an editor shows. */
static json_t *diff_of(json_t *action, size_t max)
{
    const char *cmd = acp__str(action, "command"), *path = acp__str(action, "path");
    if (!is(acp__str(action, "kind"), "FileEditorAction") || blank(path))
        return NULL;
    json_t *old = NULL, *new = NULL;
    if (is(cmd, "create")) {
        old = json_null();
        new = json_object_get(action, "file_text");
    } else if (is(cmd, "str_replace")) {
        old = json_object_get(action, "old_str");
        new = json_object_get(action, "new_str");
    }
    if (old == NULL || !json_is_string(new) ||
        json_string_length(new) + (json_is_string(old) ? json_string_length(old) : 0) > max)
        return NULL;
    return json_pack("[{s:s, s:s, s:O, s:O}]", "type", "diff", "path", path, "oldText", old,
                     "newText", new);
}

/* ---- the events ------------------------------------------------------------- */

static json_t *tool_call(const char *id, json_t *title, const char *kind, const char *status)
{
    return json_pack("{s:s, s:s, s:o, s:s, s:s}", "sessionUpdate", "tool_call", "toolCallId", id,
                     "title", title != NULL ? title : json_string(""), "kind",
                     one_of(kind, tool_kinds) ? kind : "other", "status", status);
}

/* v, if an array that fits. */
static void set_array(json_t *u, const char *k, json_t *v, size_t max)
{
    json_t *b = json_is_array(v) ? acp__bounded(v, max) : NULL;
    if (json_is_array(b))
        json_object_set_new(u, k, b);
    else
        json_decref(b);
}

/* A hosted agent's call, as it announced it. */
static json_t *acp_call(acp_out *o, json_t *e, json_t *a)
{
    json_t *u = tool_call(acp__str(e, "tool_call_id"), title_str(acp__str(a, "title")),
                          acp__str(a, "tool_kind"), "in_progress");
    set_array(u, "content", json_object_get(a, "content"), o->l.value_max);
    set_array(u, "locations", json_object_get(a, "locations"), o->l.value_max);
    acp__set_bounded(u, "rawInput", json_object_get(a, "raw_input"), o->l.value_max);
    return u;
}

static json_t *upstream_call(acp_out *o, json_t *e, json_t *a)
{
    const char *tool = acp__str(e, "tool_name");
    json_t *u = tool_call(acp__str(e, "tool_call_id"), title_of(e, tool, a), tool_kind_of(tool, a),
                          "in_progress");
    json_t *v = diff_of(a, o->l.value_max);
    if (v != NULL)
        json_object_set_new(u, "content", v);
    if ((v = locations_of(a, o->l.value_max)) != NULL)
        json_object_set_new(u, "locations", v);
    acp__set_bounded(u, "rawInput", a, o->l.value_max);
    return u;
}

/* A plan entry as the schema wants it: the agent's own if it is one. */
static json_t *plan_entry(json_t *x)
{
    static const char *const prio[] = {"high", "medium", "low", NULL};
    static const char *const st[] = {"pending", "in_progress", "completed", NULL};
    const char *p = acp__str(x, "priority"), *s = acp__str(x, "status");
    if (acp__str(x, "content") == NULL)
        return NULL;
    if (one_of(p, prio) && one_of(s, st))
        return json_incref(x);
    return json_pack("{s:O, s:s, s:s}", "content", json_object_get(x, "content"), "priority",
                     one_of(p, prio) ? p : "medium", "status", one_of(s, st) ? s : "pending");
}

static void acp_plan(acp_out *o, json_t *entries, json_t *out)
{
    json_t *kept = acp__bounded(entries, o->l.value_max);
    if (!json_is_array(kept)) {
        json_decref(kept);
        return;
    }
    json_t *list = json_array();
    size_t i;
    json_t *x;
    json_array_foreach(kept, i, x)
    {
        json_t *y = plan_entry(x);
        if (y != NULL)
            json_array_append_new(list, y);
    }
    json_decref(kept);
    push(out, json_pack("{s:s, s:o}", "sessionUpdate", "plan", "entries", list));
}

/* A task tracker's tasks as a plan (A'), no more of them than fit. */
static void task_plan(acp_out *o, json_t *tasks, json_t *out)
{
    json_t *list = json_array();
    size_t i, size = 0;
    json_t *x;
    json_array_foreach(tasks, i, x)
    {
        const char *title = acp__str(x, "title"), *s = acp__str(x, "status");
        size += (title != NULL ? strlen(title) : 0) + 64;
        if (size > o->l.value_max)
            break;
        json_array_append_new(list,
                              json_pack("{s:s, s:s, s:s}", "content", title != NULL ? title : "",
                                        "priority", "medium", "status",
                                        is(s, "done")          ? "completed"
                                        : is(s, "in_progress") ? "in_progress"
                                                               : "pending"));
    }
    push(out, json_pack("{s:s, s:o}", "sessionUpdate", "plan", "entries", list));
}

static void on_message(acp_out *o, json_t *e, json_t *out)
{
    json_t *m = json_object_get(e, "llm_message");
    const char *role = acp__str(m, "role"), *id = acp__str(e, "id");
    if (is(role, "user")) {
        content_chunks(o, out, "user_message_chunk", json_object_get(m, "content"), id);
    } else if (is(role, "assistant")) {
        text_chunk(o, out, "agent_thought_chunk", json_object_get(m, "reasoning_content"), id);
        content_chunks(o, out, "agent_message_chunk", json_object_get(m, "content"), id);
    }
}

static void on_action(acp_out *o, json_t *e, json_t *out)
{
    const char *id = acp__str(e, "id"), *call = acp__str(e, "tool_call_id");
    json_t *a = json_object_get(e, "action"), *x;
    const char *ak = acp__str(a, "kind");
    size_t i;
    text_chunk(o, out, "agent_thought_chunk", json_object_get(e, "reasoning_content"), id);
    json_array_foreach(json_object_get(e, "thought"), i, x)
    {
        text_chunk(o, out, "agent_thought_chunk", json_object_get(x, "text"), id);
    }
    if (is(ak, "ThinkAction")) {
        text_chunk(o, out, "agent_thought_chunk", json_object_get(a, "thought"), id);
    } else if (is(ak, "FinishAction")) {
        text_chunk(o, out, "agent_message_chunk", json_object_get(a, "message"), id);
    } else if (is(ak, "ACPPlanAction")) {
        acp_plan(o, json_object_get(a, "entries"), out);
    } else if (!blank(call)) {
        push(out, is(ak, "ACPToolCallAction") ? acp_call(o, e, a) : upstream_call(o, e, a));
        call_remember(o, call);
    }
}

/* A call's result: an update if the editor knows the call, else the whole
 * call. u has the result's fields; title (stolen) and kind for the latter. */
static void result(acp_out *o, json_t *e, json_t *u, json_t *title, const char *kind, json_t *out)
{
    const char *call = acp__str(e, "tool_call_id"), *tool = acp__str(e, "tool_name");
    if (call_at(o, call) >= 0) {
        json_object_set_new(u, "sessionUpdate", json_string("tool_call_update"));
        if (title != NULL)
            json_object_set_new(u, "title", title);
    } else {
        json_t *c = tool_call(call, title != NULL ? title : json_string(tool != NULL ? tool : ""),
                              kind != NULL ? kind : tool_kind_of(tool, NULL), "in_progress");
        json_object_update(c, u);
        json_decref(u);
        u = c;
    }
    json_object_set_new(u, "toolCallId", json_string(call));
    call_forget(o, call);
    push(out, u);
}

/* Text parts joined, as ToolCallContent; NULL if blank. */
static json_t *text_content(json_t *parts, const char *alone, size_t max)
{
    acp_text t = {0};
    size_t i;
    json_t *p;
    if (alone != NULL)
        acp__text_put(&t, alone, strlen(alone), max);
    json_array_foreach(parts, i, p)
    {
        const char *s = is(acp__str(p, "type"), "image") ? "[image]" : acp__str(p, "text");
        if (s == NULL)
            continue;
        if (t.len > 0)
            acp__text_put(&t, "\n", 1, max);
        acp__text_put(&t, s, strlen(s), max);
    }
    json_t *c = NULL;
    if (!blank(t.s))
        c = json_pack("[{s:s, s:o}]", "type", "content", "content", text_block(t.s, t.len, max));
    free(t.s);
    return c;
}

static void on_observation(acp_out *o, json_t *e, json_t *out)
{
    json_t *obs = json_object_get(e, "observation");
    const char *ok = acp__str(obs, "kind");
    static const char *const silent[] = {"ThinkObservation", "FinishObservation",
                                         "ACPPlanObservation", NULL};
    if (blank(acp__str(e, "tool_call_id")))
        return;
    if (one_of(ok, silent)) {
        call_forget(o, acp__str(e, "tool_call_id"));
        return;
    }
    bool failed = json_is_true(json_object_get(obs, "is_error"));
    json_t *u = json_pack("{s:s}", "status", failed ? "failed" : "completed");
    json_t *title = NULL;
    const char *kind = NULL;
    if (is(ok, "ACPToolCallObservation")) {
        set_array(u, "content", json_object_get(obs, "acp_content"), o->l.value_max);
        acp__set_bounded(u, "rawOutput", json_object_get(obs, "raw_output"), o->l.value_max);
        if (!blank(acp__str(obs, "title")))
            title = title_str(acp__str(obs, "title"));
        kind = acp__str(e, "tool_name");
    } else {
        json_t *c = text_content(json_object_get(obs, "content"), NULL, o->l.text_max);
        if (c != NULL)
            json_object_set_new(u, "content", c);
        acp__set_bounded(u, "rawOutput", obs, o->l.value_max);
    }
    result(o, e, u, title, kind, out);
    if (is(ok, "TaskTrackerObservation"))
        task_plan(o, json_object_get(obs, "task_list"), out);
}

static void on_failure(acp_out *o, json_t *e, const char *why, json_t *out)
{
    if (blank(acp__str(e, "tool_call_id")))
        return;
    json_t *u = json_pack("{s:s}", "status", "failed");
    json_t *c = text_content(NULL, why != NULL ? why : "", o->l.text_max);
    if (c != NULL)
        json_object_set_new(u, "content", c);
    result(o, e, u, NULL, NULL, out);
}

/* Upstream's own ACP agent: each event the call's whole state so far. */
static void on_acp_tool_call(acp_out *o, json_t *e, json_t *out)
{
    const char *call = acp__str(e, "tool_call_id"), *st = acp__str(e, "status");
    static const char *const statuses[] = {"pending", "in_progress", "completed", "failed", NULL};
    if (blank(call))
        return;
    bool known = call_at(o, call) >= 0;
    json_t *u = tool_call(call, title_str(acp__str(e, "title")), acp__str(e, "tool_kind"),
                          one_of(st, statuses) ? st : "in_progress");
    if (known)
        json_object_set_new(u, "sessionUpdate", json_string("tool_call_update"));
    set_array(u, "content", json_object_get(e, "content"), o->l.value_max);
    acp__set_bounded(u, "rawInput", json_object_get(e, "raw_input"), o->l.value_max);
    acp__set_bounded(u, "rawOutput", json_object_get(e, "raw_output"), o->l.value_max);
    push(out, u);
    if (is(st, "completed") || is(st, "failed"))
        call_forget(o, call);
    else
        call_remember(o, call);
}

static void on_conversation_error(acp_out *o, json_t *e, json_t *out)
{
    const char *detail = acp__str(e, "detail");
    o->error_reason = acp__stop_reason_of_why(detail);
    if (o->error_reason == NULL && !blank(detail))
        chunk(out, "agent_message_chunk", prefixed_block("Error: ", detail, o->l.text_max),
              acp__str(e, "id"));
}

/* The stop reason the execution status `s` gives the turn, or NULL. */
static const char *on_status(acp_out *o, const char *s)
{
    const char *stop = NULL;
    if (is(s, "running"))
        o->ran = true;
    else if (is(s, "finished") || (is(s, "idle") && o->ran))
        stop = "end_turn";
    else if (is(s, "paused"))
        stop = "cancelled";
    else if (is(s, "error"))
        stop = o->error_reason != NULL ? o->error_reason : "refusal";
    else if (is(s, "stuck"))
        stop = "refusal";
    if (stop != NULL) {
        o->ran = false;
        o->error_reason = NULL;
    }
    return stop;
}

int acp_out_event(acp_out *o, json_t *e, json_t *out, const char **stop)
{
    if (stop != NULL)
        *stop = NULL;
    if (o == NULL || !json_is_object(e) || !json_is_array(out))
        return -EINVAL;
    const char *kind = acp__str(e, "kind");
    if (is(kind, "MessageEvent"))
        on_message(o, e, out);
    else if (is(kind, "ActionEvent"))
        on_action(o, e, out);
    else if (is(kind, "ObservationEvent"))
        on_observation(o, e, out);
    else if (is(kind, "AgentErrorEvent"))
        on_failure(o, e, acp__str(e, "error"), out);
    else if (is(kind, "UserRejectObservation"))
        on_failure(o, e,
                   acp__str(e, "rejection_reason") != NULL ? acp__str(e, "rejection_reason")
                                                           : "User rejected the action",
                   out);
    else if (is(kind, "ACPToolCallEvent"))
        on_acp_tool_call(o, e, out);
    else if (is(kind, "ConversationErrorEvent"))
        on_conversation_error(o, e, out);
    else if (is(kind, "ConversationStateUpdateEvent") &&
             is(acp__str(e, "key"), "execution_status")) {
        const char *s = on_status(o, acp__str(e, "value"));
        if (stop != NULL)
            *stop = s;
    }
    return 0;
}

acp_out *acp_out_new(const acp_limits *l)
{
    acp_out *o = calloc(1, sizeof(*o));
    if (o == NULL || (o->calls = calloc(ACP_OUT_CALLS_MAX, sizeof(*o->calls))) == NULL) {
        free(o);
        return NULL;
    }
    o->l = acp__limits(l);
    return o;
}

void acp_out_free(acp_out *o)
{
    if (o == NULL)
        return;
    for (size_t i = 0; i < o->ncalls; i++)
        free(o->calls[i]);
    free(o->calls);
    free(o);
}
