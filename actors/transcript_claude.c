/*
 * transcript_claude.c - a Claude Code session's JSONL lines as parley
 * events (transcript.h). A line is checked whole before anything is made
 * or remembered, so a bad line leaves no trace. State: the calls seen
 * (for their results' tool name and action id) and those still open per
 * conversation (main, or a subagent's).
 */
#include "actors/transcript_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tr_claude {
    tr_calls calls;
    json_t *held; /* conversation -> records of meta lines that wait */
};

/* Lines that change no conversation. */
static const char *const quiet_types[] = {"system",
                                          "summary",
                                          "result",
                                          "stream_event",
                                          "queue-operation",
                                          "file-history-snapshot",
                                          "auth_status",
                                          "tool_progress",
                                          "progress",
                                          "custom-title",
                                          NULL};

/* How Claude Code words a tool call the user refused. */
static const char *const refusals[] = {"The user doesn't want to proceed with this tool use",
                                       "The user doesn't want to take this action", NULL};

tr_claude *tr_claude_new(void)
{
    tr_claude *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    if (tr_calls_init(&c->calls) != 0 || (c->held = json_object()) == NULL) {
        tr_claude_free(c);
        return NULL;
    }
    return c;
}

void tr_claude_free(tr_claude *c)
{
    if (c == NULL)
        return;
    tr_calls_clear(&c->calls);
    json_decref(c->held);
    free(c);
}

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* A tool result's content as text: a string, or its text parts joined
 * with "\n" (other parts named in brackets). */
static char *result_text(const json_t *content)
{
    if (json_is_string(content))
        return strdup(json_string_value(content));
    size_t cap = 1, len = 0, i;
    json_t *p;
    json_array_foreach(content, i, p) cap += json_string_length(json_object_get(p, "text")) + 16;
    char *s = malloc(cap);
    if (s == NULL)
        return NULL;
    s[0] = '\0';
    json_array_foreach(content, i, p)
    {
        const char *t = str(p, "text");
        const char *type = str(p, "type");
        len += (size_t)snprintf(s + len, cap - len, "%s%s", len > 0 ? "\n" : "",
                                t != NULL                                    ? t
                                : type != NULL && strcmp(type, "image") == 0 ? "[image]"
                                                                             : "[content]");
    }
    return s;
}

/* An image block's URL: data:<type>;base64,<data>, or its url. */
static char *image_url(const json_t *block)
{
    json_t *src = json_object_get(block, "source");
    const char *type = str(src, "type");
    if (type != NULL && strcmp(type, "url") == 0 && str(src, "url") != NULL)
        return strdup(str(src, "url"));
    const char *data = str(src, "data");
    const char *mt = str(src, "media_type") != NULL ? str(src, "media_type") : "image/png";
    if (data == NULL)
        return NULL;
    size_t n = strlen(data) + strlen(mt) + 16;
    char *u = malloc(n);
    if (u != NULL)
        snprintf(u, n, "data:%s;base64,%s", mt, data);
    return u;
}

/* The conversation a line belongs to: "main", or a subagent's. */
static const char *conv_of(const json_t *line)
{
    if (str(line, "parent_tool_use_id") != NULL)
        return str(line, "parent_tool_use_id");
    if (json_is_true(json_object_get(line, "isSidechain")))
        return str(line, "agentId") != NULL ? str(line, "agentId") : "sidechain";
    return "main";
}

/* Every content block checked before anything is made. */
static int check_blocks(const json_t *content, bool user, char *why, size_t whylen)
{
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        const char *type = str(b, "type");
        if (!json_is_object(b) || type == NULL)
            return tr_bad(why, whylen, "content block %zu has no type", i);
        if (!user && strcmp(type, "tool_use") == 0 &&
            (str(b, "id") == NULL || str(b, "name") == NULL))
            return tr_bad(why, whylen, "tool_use block %zu has no id or name", i);
        if (user && strcmp(type, "tool_result") == 0 && str(b, "tool_use_id") == NULL)
            return tr_bad(why, whylen, "tool_result block %zu has no tool_use_id", i);
    }
    return 0;
}

static bool refused(const char *text, bool is_error)
{
    for (const char *const *r = refusals; is_error && *r != NULL; r++)
        if (strncmp(text, *r, strlen(*r)) == 0)
            return true;
    return false;
}

/* A tool_result block: its event, and the call closed. */
static json_t *result_event(tr_claude *c, const json_t *line, const json_t *b)
{
    const char *call = str(b, "tool_use_id"), *tool, *action;
    tr_calls_find(&c->calls, call, &tool, &action);
    char *text = result_text(json_object_get(b, "content"));
    if (text == NULL)
        return NULL;
    bool is_error = json_is_true(json_object_get(b, "is_error"));
    json_t *tur = json_object_get(line, "toolUseResult");
    const char *agent = str(tur, "agentId");
    json_t *e;
    if (tool == NULL) /* no such call: the gate says unmatched_tool_result */
        e = tr_result(call, "unknown", "", NULL, text, is_error);
    else if (refused(text, is_error))
        e = tr_rejection(call, tool, action, text);
    else
        e = tr_result(call, tool, action, agent != NULL ? "TaskObservation" : NULL, text, is_error);
    if (e != NULL && agent != NULL && tool != NULL && !refused(text, is_error))
        json_object_set_new(json_object_get(e, "observation"), "task_id", json_string(agent));
    free(text);
    return e;
}

/* Text the harness adds (a skill's instructions after its tool ran,
 * command output): not the user speaking, so it interrupts nothing. */
static bool meta_line(const json_t *line)
{
    return json_is_true(json_object_get(line, "isMeta")) ||
           json_is_true(json_object_get(line, "isSynthetic"));
}

static int user_line(tr_claude *c, const json_t *line, const char *conv, json_t *evs,
                     size_t *primary, json_t *closed)
{
    json_t *content = json_object_get(json_object_get(line, "message"), "content");
    json_t *parts = json_array();
    if (parts == NULL)
        return -ENOMEM;
    if (json_is_string(content) && json_string_length(content) > 0)
        json_array_append_new(parts, tr_text_part(json_string_value(content)));
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        const char *type = str(b, "type");
        if (strcmp(type, "tool_result") == 0) {
            json_array_append_new(evs, result_event(c, line, b));
            json_array_append_new(closed, json_string(str(b, "tool_use_id")));
        } else if (strcmp(type, "text") == 0 && str(b, "text") != NULL) {
            json_array_append_new(parts, tr_text_part(str(b, "text")));
        } else if (strcmp(type, "image") == 0) {
            char *u = image_url(b);
            if (u != NULL)
                json_array_append_new(parts, tr_image_part(u));
            free(u);
        }
    }
    if (json_array_size(parts) == 0) {
        json_decref(parts);
        return 0;
    }
    /* the user spoke again: calls still open were interrupted */
    json_t *open = meta_line(line) ? NULL : tr_calls_open(&c->calls, conv);
    const char *call;
    json_t *v;
    json_object_foreach(open, call, v)
    {
        bool answered = false;
        json_array_foreach(closed, i, b) answered |= strcmp(json_string_value(b), call) == 0;
        if (answered)
            continue;
        const char *tool, *action;
        tr_calls_find(&c->calls, call, &tool, &action);
        json_array_append_new(evs, tr_interrupted(call, tool));
        json_array_append_new(closed, json_string(call));
    }
    *primary = json_array_size(evs);
    json_array_append_new(evs, tr_user_message(parts));
    return 0;
}

static int assistant_line(const json_t *line, const char *base, json_t *evs, json_t *calls)
{
    json_t *msg = json_object_get(line, "message");
    json_t *content = json_object_get(msg, "content");
    const char *resp = str(msg, "id") != NULL ? str(msg, "id") : base;
    if (json_is_string(content) && json_string_length(content) > 0)
        json_array_append_new(evs, tr_agent_text(json_string_value(content), resp));
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        const char *type = str(b, "type");
        if (strcmp(type, "text") == 0 && str(b, "text") != NULL && str(b, "text")[0] != '\0') {
            json_array_append_new(evs, tr_agent_text(str(b, "text"), resp));
        } else if (strcmp(type, "thinking") == 0 && str(b, "thinking") != NULL) {
            json_array_append_new(
                evs, tr_agent_thinking(str(b, "thinking"), str(b, "signature"), false, resp));
        } else if (strcmp(type, "redacted_thinking") == 0 && str(b, "data") != NULL) {
            json_array_append_new(evs, tr_agent_thinking(str(b, "data"), NULL, true, resp));
        } else if (strcmp(type, "tool_use") == 0) {
            json_t *input = json_object_get(b, "input");
            const char *summary = str(input, "description");
            json_array_append_new(calls, json_pack("{s:s, s:s, s:I}", "id", str(b, "id"), "name",
                                                   str(b, "name"), "at",
                                                   (json_int_t)json_array_size(evs)));
            json_array_append_new(evs,
                                  tr_action(str(b, "id"), str(b, "name"), input, summary, resp));
        }
    }
    return 0;
}

int tr_claude_line(tr_claude *c, const json_t *line, long lineno, json_t *out, char *why,
                   size_t whylen)
{
    if (!json_is_object(line))
        return tr_bad(why, whylen, "not a JSON object: a Claude Code record is one");
    const char *type = str(line, "type");
    if (type == NULL)
        return tr_bad(why, whylen, "a record without a type");
    for (const char *const *t = quiet_types; *t != NULL; t++)
        if (strcmp(type, *t) == 0)
            return 0;
    bool user = strcmp(type, "user") == 0;
    if (!user && strcmp(type, "assistant") != 0)
        return tr_bad(why, whylen, "unknown record type '%.64s'", type);
    json_t *msg = json_object_get(line, "message");
    json_t *content = json_object_get(msg, "content");
    if (!json_is_object(msg))
        return tr_bad(why, whylen, "a %s record without a message", type);
    if (!json_is_string(content) && !json_is_array(content))
        return tr_bad(why, whylen, "a %s message without content (a string or a list)", type);
    int rc = check_blocks(content, user, why, whylen);
    if (rc != 0)
        return rc;

    const char *conv = conv_of(line);
    json_t *evs = json_array(), *closed = json_array(), *calls = json_array();
    size_t primary = 0;
    char gen[64];
    const char *base = str(line, "uuid");
    if (base == NULL) { /* live SDK messages have none: the line number is stable */
        snprintf(gen, sizeof(gen), "claude-line-%ld", lineno);
        base = gen;
    }
    rc = evs != NULL && closed != NULL && calls != NULL ? 0 : -ENOMEM;
    if (rc == 0)
        rc = user ? user_line(c, line, conv, evs, &primary, closed)
                  : assistant_line(line, base, evs, calls);
    json_t *where = json_pack("{s:I}", "line", (json_int_t)lineno);
    if (where != NULL && strcmp(conv, "main") != 0)
        json_object_set_new(where, "sub", json_string(conv));
    /* a meta line while calls are open waits until they are answered, as
     * a live conversation defers a message; the rest goes out now */
    json_t *held = json_object_get(c->held, conv);
    bool wait = user && meta_line(line) && tr_calls_open(&c->calls, conv) != NULL;
    if (rc == 0 && wait && held == NULL) {
        held = json_array();
        rc = held != NULL ? json_object_set_new(c->held, conv, held) : -ENOMEM;
    }
    json_t *dest = wait ? held : out;
    size_t first = json_array_size(dest);
    if (rc == 0)
        rc = where != NULL ? tr_emit(evs, primary, base, str(line, "timestamp"), where, dest)
                           : -ENOMEM;
    /* the line is in: remember its calls */
    size_t i;
    json_t *v;
    json_array_foreach(calls, i, v)
    {
        if (rc != 0)
            break;
        json_t *rec =
            json_array_get(dest, first + (size_t)json_integer_value(json_object_get(v, "at")));
        rc = tr_calls_add(&c->calls, conv, str(v, "id"), str(v, "name"),
                          str(json_object_get(rec, "event"), "id"));
    }
    json_array_foreach(closed, i, v)
    {
        if (rc != 0)
            break;
        tr_calls_close(&c->calls, conv, json_string_value(v));
    }
    if (rc == 0 && held != NULL && !wait && tr_calls_open(&c->calls, conv) == NULL) {
        /* the calls are answered: what waited comes */
        rc = json_array_extend(out, held) == 0 ? 0 : -ENOMEM;
        json_array_clear(held);
    }
    if (rc != 0) /* out of memory: what this line appended goes */
        while (json_array_size(dest) > first)
            json_array_remove(dest, json_array_size(dest) - 1);
    json_decref(where);
    json_decref(evs);
    json_decref(closed);
    json_decref(calls);
    return rc;
}

int tr_claude_end(tr_claude *c, json_t *out)
{
    const char *conv;
    json_t *held;
    json_object_foreach(c->held, conv, held)
    {
        if (json_array_extend(out, held) != 0)
            return -ENOMEM;
        json_array_clear(held);
    }
    return 0;
}
