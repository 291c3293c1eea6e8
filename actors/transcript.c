/*
 * transcript.c - the events both transcript converters make, their ids,
 * the calls they track, and telling the formats apart (transcript.h).
 */
#include "actors/transcript_impl.h"
#include "runtime/json.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Claude Code record types; the OpenCode export is told by its shape. */
static const char *const claude_types[] = {
    "user",        "assistant",     "system",          "summary",
    "result",      "stream_event",  "queue-operation", "file-history-snapshot",
    "auth_status", "tool_progress", "progress",        "custom-title",
    NULL};

tr_format tr_detect(const json_t *first)
{
    if (!json_is_object(first) || json_object_get(first, "kind") != NULL)
        return TR_NONE;
    if (json_is_object(json_object_get(first, "info")) &&
        json_is_array(json_object_get(first, "messages")))
        return TR_OPENCODE;
    const char *type = json_string_value(json_object_get(first, "type"));
    if (type == NULL)
        return TR_NONE;
    for (const char *const *t = claude_types; *t != NULL; t++)
        if (strcmp(type, *t) == 0)
            return TR_CLAUDE;
    /* an unknown record type is still Claude's if the line says whose */
    return json_object_get(first, "sessionId") != NULL || json_object_get(first, "uuid") != NULL
               ? TR_CLAUDE
               : TR_NONE;
}

void tr_iso_ms(long long ms, char out[32])
{
    time_t s = (time_t)(ms / 1000);
    int frac = (int)(ms % 1000);
    if (frac < 0) {
        frac += 1000;
        s--;
    }
    struct tm tm;
    gmtime_r(&s, &tm);
    snprintf(out, 32, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", (tm.tm_year + 1900) % 10000,
             (tm.tm_mon + 1) % 100, tm.tm_mday % 100, tm.tm_hour % 100, tm.tm_min % 100,
             tm.tm_sec % 100, frac % 1000);
}

int tr_bad(char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (why != NULL && whylen > 0)
        vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* ---- events ------------------------------------------------------------------ */

json_t *tr_text_part(const char *text)
{
    return json_pack("{s:s, s:s}", "type", "text", "text", text);
}

json_t *tr_image_part(const char *url)
{
    return json_pack("{s:s, s:[s]}", "type", "image", "image_urls", url);
}

json_t *tr_user_message(json_t *content)
{
    return json_pack("{s:s, s:s, s:{s:s, s:o}}", "kind", "MessageEvent", "source", "user",
                     "llm_message", "role", "user", "content", content);
}

json_t *tr_agent_text(const char *text, const char *resp)
{
    return json_pack("{s:s, s:s, s:{s:s, s:[o]}, s:s}", "kind", "MessageEvent", "source", "agent",
                     "llm_message", "role", "assistant", "content", tr_text_part(text),
                     "llm_response_id", resp);
}

json_t *tr_agent_thinking(const char *thinking, const char *signature, bool redacted,
                          const char *resp)
{
    json_t *block = redacted
                        ? json_pack("{s:s, s:s}", "type", "redacted_thinking", "data", thinking)
                        : json_pack("{s:s, s:s, s:s*}", "type", "thinking", "thinking", thinking,
                                    "signature", signature);
    json_t *m =
        json_pack("{s:s, s:[], s:[o]}", "role", "assistant", "content", "thinking_blocks", block);
    if (m != NULL && !redacted)
        json_object_set_new(m, "reasoning_content", json_string(thinking));
    return json_pack("{s:s, s:s, s:o, s:s}", "kind", "MessageEvent", "source", "agent",
                     "llm_message", m, "llm_response_id", resp);
}

/* "bash" -> "BashObservation" */
static json_t *kind_of(const char *tool, const char *suffix)
{
    char k[160];
    snprintf(k, sizeof(k), "%.120s%s", tool[0] != '\0' ? tool : "Tool", suffix);
    k[0] = (char)toupper((unsigned char)k[0]);
    return json_string(k);
}

json_t *tr_action(const char *call, const char *tool, const json_t *input, const char *summary,
                  const char *resp)
{
    json_t *in = json_is_object(input) ? json_deep_copy(input) : json_object();
    char *args = in != NULL ? rt_json_dumps(in, NULL) : NULL;
    json_t *action = NULL;
    if (in != NULL && json_object_get(in, "kind") == NULL) {
        action = in;
        json_object_set_new(action, "kind", kind_of(tool, "Action"));
    } else {
        json_decref(in);
    }
    json_t *e =
        json_pack("{s:s, s:s, s:[], s:s, s:s, s:{s:s, s:s, s:s, s:s}, s:s}", "kind", "ActionEvent",
                  "source", "agent", "thought", "tool_name", tool, "tool_call_id", call,
                  "tool_call", "id", call, "name", tool, "arguments", args != NULL ? args : "{}",
                  "origin", "completion", "llm_response_id", resp);
    free(args);
    if (e != NULL && action != NULL)
        json_object_set(e, "action", action);
    json_decref(action);
    if (e != NULL && summary != NULL)
        json_object_set_new(e, "summary", json_string(summary));
    return e;
}

json_t *tr_result(const char *call, const char *tool, const char *action, const char *kind,
                  const char *text, bool is_error)
{
    json_t *obs = json_pack("{s:o, s:[o], s:b}", "kind",
                            kind != NULL ? json_string(kind) : kind_of(tool, "Observation"),
                            "content", tr_text_part(text), "is_error", is_error);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "kind", "ObservationEvent", "source",
                     "environment", "tool_name", tool, "tool_call_id", call, "action_id", action,
                     "observation", obs);
}

json_t *tr_rejection(const char *call, const char *tool, const char *action, const char *reason)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "kind", "UserRejectObservation",
                     "source", "environment", "tool_name", tool, "tool_call_id", call, "action_id",
                     action, "rejection_reason", reason, "rejection_source", "user");
}

json_t *tr_interrupted(const char *call, const char *tool)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "AgentErrorEvent", "source", "agent",
                     "tool_name", tool, "tool_call_id", call, "error",
                     "interrupted: the user spoke again before this tool call had a result");
}

int tr_emit(json_t *evs, size_t primary, const char *base, const char *ts, const json_t *where,
            json_t *out)
{
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e)
    {
        if (e == NULL || !json_is_object(e))
            return -ENOMEM;
        char id[300];
        if (i == primary)
            snprintf(id, sizeof(id), "%s", base);
        else
            snprintf(id, sizeof(id), "%s-%zu", base, i + 1);
        json_t *rec = json_deep_copy(where);
        if (rec == NULL || json_object_set_new(e, "id", json_string(id)) != 0 ||
            (ts != NULL && json_object_set_new(e, "timestamp", json_string(ts)) != 0) ||
            json_object_set(rec, "event", e) != 0 || json_array_append_new(out, rec) != 0)
            return -ENOMEM;
    }
    return 0;
}

/* ---- calls ------------------------------------------------------------------- */

int tr_calls_init(tr_calls *c)
{
    c->known = json_object();
    c->open = json_object();
    if (c->known == NULL || c->open == NULL) {
        tr_calls_clear(c);
        return -ENOMEM;
    }
    return 0;
}

void tr_calls_clear(tr_calls *c)
{
    json_decref(c->known);
    json_decref(c->open);
    c->known = c->open = NULL;
}

void tr_calls_find(const tr_calls *c, const char *call, const char **tool, const char **action)
{
    json_t *k = json_object_get(c->known, call);
    *tool = json_string_value(json_object_get(k, "tool"));
    *action = json_string_value(json_object_get(k, "action"));
}

int tr_calls_add(tr_calls *c, const char *conv, const char *call, const char *tool,
                 const char *action)
{
    json_t *open = json_object_get(c->open, conv);
    if (open == NULL) {
        open = json_object();
        if (open == NULL || json_object_set_new(c->open, conv, open) != 0)
            return -ENOMEM;
    }
    if (json_object_set_new(c->known, call,
                            json_pack("{s:s, s:s}", "tool", tool, "action", action)) != 0 ||
        json_object_set_new(open, call, json_true()) != 0)
        return -ENOMEM;
    return 0;
}

void tr_calls_close(tr_calls *c, const char *conv, const char *call)
{
    json_object_del(json_object_get(c->open, conv), call);
}

json_t *tr_calls_open(const tr_calls *c, const char *conv)
{
    json_t *o = json_object_get(c->open, conv);
    return json_object_size(o) > 0 ? o : NULL;
}
