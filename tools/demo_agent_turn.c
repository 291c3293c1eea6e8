/*
 * demo_agent_turn.c - the demo agent's session/prompt, a scripted turn:
 *
 *   agent_thought_chunk  "Reading your message"
 *   tool_call            call-<n> "Writing notes.md", kind edit, pending
 *                        fs/read_text_file <cwd>/notes.md, if the client can
 *                        read (an error, such as no such file, is no text);
 *                        fs/write_text_file with the prompt's text appended
 *   tool_call_update     completed with the diff, or failed saying why
 *   agent_message_chunk  --chunks of them: "You said: <text>", " — noted in
 *                        notes.md.", " Anything else?"
 *   answer               {"stopReason":"end_turn"}
 *
 * With --tool-calls other than 1, --no-fs, or a client that cannot write
 * files, the tool calls are `execute` calls that need nothing of the client
 * (they count the prompt's words). A session/cancel stops the turn where
 * it is: no more updates (the client marks open tool calls cancelled
 * itself), and the answer is "cancelled". With --stamp each message chunk's
 * text ends with " [t=NS]", the CLOCK_REALTIME nanoseconds of its sending.
 */
#include "demo_agent.h"

#include "runtime/log.h"
#include "runtime/text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DASH "\xe2\x80\x94" /* an em dash */

typedef struct span {
    const char *p;
    size_t len;
} span;

/* Keep an update in the turn's session history (for session/load). */
static void record(da_agent *a, json_t *update)
{
    if (a->history == NULL || update == NULL)
        return;
    if (json_dumpf(update, a->history, JSON_COMPACT) != 0 || fputc('\n', a->history) == EOF) {
        rt_log(RT_LOG_WARN, "demo-agent", "session %s: cannot write its history: %s", a->turn->id,
               strerror(errno));
        fclose(a->history);
        a->history = NULL;
    }
}

/* --stamp: " [t=NS]" onto the text of a message chunk, NS the time now. */
static void stamp(json_t *update)
{
    const char *kind = json_string_value(json_object_get(update, "sessionUpdate"));
    json_t *content = json_object_get(update, "content"), *text = json_object_get(content, "text");
    if (kind == NULL || strcmp(kind, "agent_message_chunk") != 0 || !json_is_string(text))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    rt_text t = {0};
    rt_text_put(&t, json_string_value(text), json_string_length(text));
    rt_text_printf(&t, " [t=%lld%09ld]", (long long)ts.tv_sec, ts.tv_nsec);
    if (!t.failed) /* else unstamped */
        json_object_set_new(content, "text", json_stringn(t.p, t.len));
    free(t.p);
}

/* One update of the turn (stolen): after the pause between updates, taking
 * what comes meanwhile, it is sent and recorded, unless the turn stopped.
 * False if the turn stopped. */
static bool step(da_agent *a, json_t *update)
{
    da_pump(a, a->sent > 0 ? a->delay_ms : 0);
    if (a->cancelled || a->out_failed || update == NULL) {
        json_decref(update);
        return false;
    }
    a->sent++;
    if (a->stamp)
        stamp(update);
    record(a, update);
    da_send_update(a, a->turn->id, update);
    return !a->out_failed;
}

static json_t *chunk(const char *kind, const char *text, size_t len)
{
    return json_pack("{s:s,s:{s:s,s:s%}}", "sessionUpdate", kind, "content", "type", "text", "text",
                     text, len);
}

/* A tool call's end, with a text as its content. */
static json_t *call_end(const char *call, const char *status, const char *text, json_t *raw)
{
    return json_pack("{s:s,s:s,s:s,s:[{s:s,s:{s:s,s:s}}],s:o*}", "sessionUpdate",
                     "tool_call_update", "toolCallId", call, "status", status, "content", "type",
                     "content", "content", "type", "text", "text", text, "rawOutput", raw);
}

/* The one edit call: the prompt's text appended to <cwd>/notes.md by the
 * client. *done says in the reply how it went. False if the turn stopped. */
static bool edit_notes(da_agent *a, da_session *s, span text, const char **done)
{
    char call[32];
    snprintf(call, sizeof(call), "call-%u", ++s->calls);
    char *path = da_path(s->cwd, "notes.md");
    if (path == NULL)
        return false;
    bool go =
        step(a, json_pack("{s:s,s:s,s:s,s:s,s:s,s:[{s:s}],s:{s:s}}", "sessionUpdate", "tool_call",
                          "toolCallId", call, "title", "Writing notes.md", "kind", "edit", "status",
                          "pending", "locations", "path", path, "rawInput", "path", path));
    json_t *old = NULL, *res = NULL, *err = NULL;
    if (go && a->can_read) {
        res = da_call(a, "fs/read_text_file",
                      json_pack("{s:s,s:s}", "sessionId", s->id, "path", path), &err);
        if (json_is_string(json_object_get(res, "content")))
            old = json_incref(json_object_get(res, "content"));
        json_decref(res); /* an error is no text: no such file yet, say */
        json_decref(err);
        res = err = NULL;
        go = !a->cancelled && !a->out_failed;
    }
    rt_text notes = {0};
    if (old != NULL)
        rt_text_put(&notes, json_string_value(old), json_string_length(old));
    rt_text_put(&notes, text.p, text.len);
    rt_text_putc(&notes, '\n');
    if (go && !notes.failed) {
        res = da_call(a, "fs/write_text_file",
                      json_pack("{s:s,s:s,s:s%}", "sessionId", s->id, "path", path, "content",
                                notes.p, notes.len),
                      &err);
        go = !a->cancelled && !a->out_failed;
    }
    if (go && res != NULL) {
        *done = " " DASH " noted in notes.md.";
        go = step(a, json_pack("{s:s,s:s,s:s,s:[{s:s,s:s,s:O,s:s%}]}", "sessionUpdate",
                               "tool_call_update", "toolCallId", call, "status", "completed",
                               "content", "type", "diff", "path", path, "oldText",
                               old != NULL ? old : json_null(), "newText", notes.p, notes.len));
    } else if (go) {
        const char *why = json_string_value(json_object_get(err, "message"));
        char msg[600];
        snprintf(msg, sizeof(msg), "notes.md was not written: %s",
                 notes.failed  ? "out of memory"
                 : why != NULL ? why
                               : "the client gave no answer");
        rt_utf8_clean(msg);
        *done = " " DASH " but notes.md could not be written.";
        go = step(a, call_end(call, "failed", msg, NULL));
    }
    json_decref(old);
    json_decref(res);
    json_decref(err);
    free(notes.p);
    free(path);
    return go;
}

static size_t count_words(span text)
{
    size_t n = 0;
    for (size_t i = 0; i < text.len; i++) {
        bool space = strchr(" \t\r\n", text.p[i]) != NULL;
        bool was = i == 0 || strchr(" \t\r\n", text.p[i - 1]) != NULL;
        n += !space && was;
    }
    return n;
}

/* The i-th of n `execute` calls, which need nothing of the client. */
static bool execute(da_agent *a, da_session *s, int i, int n, size_t words)
{
    char call[32], title[64], out[64];
    snprintf(call, sizeof(call), "call-%u", ++s->calls);
    if (n == 1)
        snprintf(title, sizeof(title), "Counting your words");
    else
        snprintf(title, sizeof(title), "Counting your words (%d/%d)", i, n);
    snprintf(out, sizeof(out), "%zu word%s", words, words == 1 ? "" : "s");
    return step(a, json_pack("{s:s,s:s,s:s,s:s,s:s,s:{s:s,s:i}}", "sessionUpdate", "tool_call",
                             "toolCallId", call, "title", title, "kind", "execute", "status",
                             "pending", "rawInput", "command", "wc -w", "step", i)) &&
           step(a,
                call_end(call, "completed", out, json_pack("{s:I}", "words", (json_int_t)words)));
}

/* The reply, in --chunks parts: what was said, how it went, a question;
 * past three, numbered parts in between. */
static bool reply(da_agent *a, span text, const char *done)
{
    static const char ask[] = " Anything else?";
    int n = a->chunks;
    bool go = true;
    for (int i = 0; go && i < n; i++) {
        rt_text c = {0};
        if (i == 0) {
            rt_text_puts(&c, "You said: ");
            if (text.len > 0)
                rt_text_put(&c, text.p, text.len);
            else
                rt_text_puts(&c, "(nothing)");
        }
        if (i == (n == 1 ? 0 : 1))
            rt_text_puts(&c, done);
        if (i == n - 1)
            rt_text_puts(&c, ask);
        else if (i >= 2)
            rt_text_printf(&c, " (%d/%d)", i + 1, n);
        go = !c.failed && step(a, chunk("agent_message_chunk", c.p, c.len));
        free(c.p);
    }
    return go;
}

static void script(da_agent *a, da_session *s, span text)
{
    static const char thought[] = "Reading your message";
    if (!step(a, chunk("agent_thought_chunk", thought, sizeof(thought) - 1)))
        return;
    const char *done = " " DASH " nothing else to do.";
    char counted[64];
    if (a->tool_calls == 1 && a->can_write && !a->no_fs) {
        if (!edit_notes(a, s, text, &done))
            return;
    } else if (a->tool_calls > 0) {
        size_t words = count_words(text);
        for (int i = 1; i <= a->tool_calls; i++)
            if (!execute(a, s, i, a->tool_calls, words))
                return;
        snprintf(counted, sizeof(counted), " " DASH " %zu word%s, counted.", words,
                 words == 1 ? "" : "s");
        done = counted;
    }
    reply(a, text, done);
}

/* The prompt as text: its text blocks, and the uri of its resource links,
 * a line each. */
static void prompt_text(json_t *prompt, rt_text *t)
{
    size_t i;
    json_t *b;
    json_array_foreach(prompt, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        json_t *v = NULL;
        if (type != NULL && strcmp(type, "text") == 0)
            v = json_object_get(b, "text");
        else if (type != NULL && strcmp(type, "resource_link") == 0)
            v = json_object_get(b, "uri");
        if (!json_is_string(v))
            continue;
        if (t->len > 0)
            rt_text_putc(t, '\n');
        rt_text_put(t, json_string_value(v), json_string_length(v));
    }
    rt_text_put(t, "", 0); /* never NULL */
}

void da_prompt(da_agent *a, json_t *id, json_t *params)
{
    const char *sid = json_string_value(json_object_get(params, "sessionId"));
    json_t *prompt = json_object_get(params, "prompt");
    da_session *s = da_find(a, sid);
    if (sid == NULL || !json_is_array(prompt)) {
        da_error(a, id, DA_INVALID_PARAMS,
                 "Invalid params: sessionId must be a string, prompt an array of content blocks");
        return;
    }
    if (s == NULL) {
        da_error(a, id, DA_NOT_FOUND, "Resource not found: no session '%s'", sid);
        return;
    }
    rt_text text = {0};
    prompt_text(prompt, &text);
    if (text.failed) {
        free(text.p);
        da_error(a, id, DA_INTERNAL, "Internal error: out of memory");
        return;
    }
    a->turn = s;
    a->sent = 0;
    a->cancelled = s->cancel; /* cancelled while it waited in the queue */
    s->cancel = false;
    char *path = da_history_path(s);
    if (path == NULL || (a->history = fopen(path, "a")) == NULL)
        rt_log(RT_LOG_WARN, "demo-agent", "session %s: no history kept: %s: %s", s->id,
               path ? path : "?", strerror(errno));
    /* the user's part, for a later session/load: the client has it now */
    size_t i;
    json_t *b;
    json_array_foreach(prompt, i, b)
    {
        if (!json_is_object(b))
            continue;
        json_t *u = json_pack("{s:s,s:O}", "sessionUpdate", "user_message_chunk", "content", b);
        record(a, u);
        json_decref(u);
    }
    if (!a->cancelled)
        script(a, s, (span){text.p, text.len});
    if (a->history != NULL && fclose(a->history) != 0)
        rt_log(RT_LOG_WARN, "demo-agent", "session %s: its history is cut: %s", s->id,
               strerror(errno));
    a->history = NULL;
    a->turn = NULL;
    bool cancelled = a->cancelled;
    a->cancelled = false;
    free(path);
    free(text.p);
    da_result(a, id, json_pack("{s:s}", "stopReason", cancelled ? "cancelled" : "end_turn"));
}
