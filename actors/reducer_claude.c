/*
 * reducer_claude.c - see reducer_claude.h. Each line is read whole
 * before anything is emitted or remembered, so a line that cannot be
 * converted leaves no trace (F2). Ids are taken from the source wherever
 * it has them (F8): "result-<tool_use_id>" for results, the line uuid for
 * user messages and skill loads, "<uuid>-<n>" without a message id.
 */
#include "actors/reducer_claude.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct claude_conv {
    json_t *msg_count;   /* message.id -> content blocks seen in its lines */
    json_t *line_base;   /* line uuid -> the index of its first block */
    json_t *streams;     /* conversation -> {"msg": id, "ids": {index: block id}} */
    json_t *task_prompt; /* Task tool use id -> its prompt, trimmed */
    json_t *prompts;     /* trimmed Task prompts, as keys */
    unsigned long gen;   /* ids the source has none for */
};

claude_conv *claude_conv_new(void)
{
    claude_conv *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->msg_count = json_object();
    c->line_base = json_object();
    c->streams = json_object();
    c->task_prompt = json_object();
    c->prompts = json_object();
    if (!c->msg_count || !c->line_base || !c->streams || !c->task_prompt || !c->prompts) {
        claude_conv_free(c);
        return NULL;
    }
    return c;
}

void claude_conv_free(claude_conv *c)
{
    if (c == NULL)
        return;
    json_decref(c->msg_count);
    json_decref(c->line_base);
    json_decref(c->streams);
    json_decref(c->task_prompt);
    json_decref(c->prompts);
    free(c);
}

/* ------------------------------------------------------------ helpers --- */

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static json_t *trimmed(const char *s)
{
    size_t a, n;
    reducer_trim(s, strlen(s), &a, &n);
    return json_stringn(s + a, n);
}

static json_t *fmt(const char *f, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof(buf), f, ap);
    va_end(ap);
    return json_string(buf);
}

/* What one line emits, with the line's context. */
typedef struct emit {
    json_t *out;
    const char *conv, *ts, *session;
    int rc;
} emit;

static void push(emit *e, const char *type, json_t *payload)
{
    json_t *ctx = json_pack("{s:s, s:s}", "sessionId", e->session, "conversationId", e->conv);
    if (ctx != NULL && e->ts != NULL)
        json_object_set_new(ctx, "timestamp", json_string(e->ts));
    json_t *ev = json_pack("{s:s, s:o, s:o}", "type", type, "payload", payload, "context", ctx);
    if (ev == NULL || json_array_append_new(e->out, ev) != 0)
        e->rc = -ENOMEM;
}

/* block:upsert of block (taken), stamped with the line's time (F7). */
static void upsert(emit *e, json_t *block, const char *status)
{
    if (block == NULL) {
        e->rc = -ENOMEM;
        return;
    }
    json_object_set_new(block, "status", json_string(status));
    if (e->ts != NULL)
        json_object_set_new(block, "timestamp", json_string(e->ts));
    push(e, "block:upsert", json_pack("{s:o}", "block", block));
}

/* Sets key to a copy of v when v is there. */
static void set_if(json_t *o, const char *key, json_t *v)
{
    if (v != NULL)
        json_object_set_new(o, key, json_deep_copy(v));
}

/* A tool_result's or Task result's content as text: a string as it is,
 * text parts joined with "\n"; NULL for anything else. */
static json_t *text_of(json_t *content, bool *has_image)
{
    if (json_is_string(content))
        return json_copy(content);
    if (!json_is_array(content))
        return NULL;
    size_t i, len = 0;
    json_t *p;
    json_array_foreach(content, i, p)
    {
        if (has_image && strcmp(str(p, "type") ? str(p, "type") : "", "image") == 0)
            *has_image = true;
        if (str(p, "type") && strcmp(str(p, "type"), "text") == 0 && str(p, "text"))
            len += strlen(str(p, "text")) + 1;
    }
    char *buf = malloc(len + 1), *w = buf;
    if (buf == NULL)
        return NULL;
    bool first = true;
    json_array_foreach(content, i, p)
    {
        if (!str(p, "type") || strcmp(str(p, "type"), "text") != 0 || !str(p, "text"))
            continue;
        if (!first)
            *w++ = '\n';
        first = false;
        size_t n = strlen(str(p, "text"));
        memcpy(w, str(p, "text"), n);
        w += n;
    }
    json_t *s = json_stringn(buf, (size_t)(w - buf));
    free(buf);
    return s;
}

/* -------------------------------------------------------------- Tasks --- */

static void remember_task(claude_conv *c, const char *id, json_t *input)
{
    const char *prompt = str(input, "prompt");
    if (prompt == NULL)
        return;
    json_t *t = trimmed(prompt);
    json_object_set(c->prompts, json_string_value(t), json_true());
    json_object_set_new(c->task_prompt, id, t);
}

static void spawn(emit *e, const char *id, json_t *input)
{
    json_t *p = json_pack("{s:s, s:s}", "toolUseId", id, "prompt",
                          str(input, "prompt") ? str(input, "prompt") : "");
    if (p != NULL) {
        set_if(p, "subagentType", json_object_get(input, "subagent_type"));
        set_if(p, "description", json_object_get(input, "description"));
    }
    push(e, "subagent:spawned", p);
}

/* A tool_use content block b as a block (a Task also spawns its subagent). */
static void tool_use(emit *e, claude_conv *c, const char *sid, json_t *b, const char *status)
{
    json_t *input = json_object_get(b, "input");
    const char *name = str(b, "name") ? str(b, "name") : "";
    if (strcmp(name, "Task") == 0) {
        remember_task(c, sid, input);
        spawn(e, sid, input);
    }
    upsert(e,
           json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", sid, "type", "tool_use", "toolName", name,
                     "toolUseId", sid, "input", input ? json_deep_copy(input) : json_object()),
           status);
}

/* ---------------------------------------------------------- assistant --- */

/* Content block i of an assistant line: ids count the blocks of the
 * whole API message, which disk and the SDK spread over lines (F1). */
static int assistant(claude_conv *c, const json_t *line, emit *e)
{
    json_t *msg = json_object_get(line, "message");
    json_t *content = json_object_get(msg, "content");
    if (!json_is_array(content))
        return -EINVAL;
    const char *mid = str(msg, "id"), *uuid = str(line, "uuid");
    size_t n = json_array_size(content), base = 0;
    if (mid != NULL) {
        json_t *seen = uuid ? json_object_get(c->line_base, uuid) : NULL;
        if (seen != NULL) {
            base = (size_t)json_integer_value(seen); /* a line seen again */
        } else {
            base = (size_t)json_integer_value(json_object_get(c->msg_count, mid));
            json_object_set_new(c->msg_count, mid, json_integer((json_int_t)(base + n)));
            if (uuid != NULL)
                json_object_set_new(c->line_base, uuid, json_integer((json_int_t)base));
        }
    }
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        const char *type = str(b, "type") ? str(b, "type") : "";
        json_t *id = str(b, "id") ? json_string(str(b, "id"))
                     : mid        ? fmt("%s-%zu", mid, base + i)
                     : uuid       ? fmt("%s-%zu", uuid, i)
                                  : fmt("claude-%lu", ++c->gen);
        const char *sid = json_string_value(id);
        if (strcmp(type, "text") == 0) {
            const char *t = str(b, "text");
            json_t *blk = json_pack("{s:s, s:s, s:s}", "id", sid, "type", "assistant_text",
                                    "content", t ? t : "");
            if (blk != NULL)
                set_if(blk, "model", json_object_get(msg, "model"));
            upsert(e, blk, "complete");
        } else if (strcmp(type, "thinking") == 0) {
            const char *t = str(b, "thinking");
            upsert(
                e,
                json_pack("{s:s, s:s, s:s}", "id", sid, "type", "thinking", "content", t ? t : ""),
                "complete");
        } else if (strcmp(type, "tool_use") == 0) {
            tool_use(e, c, sid, b, "complete");
        }
        json_decref(id);
    }
    return 0;
}

/* --------------------------------------------------------------- user --- */

static bool has_word_end(const char *p)
{
    return !(isalnum((unsigned char)*p) || *p == '_');
}

/* The skill a skill-injection text names: the path segment after
 * "skills/", else the "# <Name> Skill" header lower-cased with spaces as
 * "-", else "unknown" (the reference's patterns). */
static json_t *skill_name(const char *t)
{
    for (const char *p = strstr(t, "skills/"); p; p = strstr(p + 1, "skills/")) {
        const char *q = p + 7, *end = q;
        while (*end && !isspace((unsigned char)*end) && *end != '/')
            end++;
        if (end > q)
            return json_stringn(q, (size_t)(end - q));
    }
    for (const char *l = t; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (l[0] != '#' || !isspace((unsigned char)l[1]))
            continue;
        const char *q = l + 1;
        while (isspace((unsigned char)*q))
            q++;
        for (const char *e = q + 1; e[-1] && e[-1] != '\n' && *e; e++) {
            const char *f = e;
            while (isspace((unsigned char)*f))
                f++;
            if (f > e && strncmp(f, "Skill", 5) == 0 && has_word_end(f + 5)) {
                char *name = strndup(q, (size_t)(e - q)), *w = name;
                if (name == NULL)
                    return NULL;
                for (char *r = name; *r; r++) {
                    if (isspace((unsigned char)*r)) {
                        while (isspace((unsigned char)r[1]))
                            r++;
                        *w++ = '-';
                    } else {
                        *w++ = (char)tolower((unsigned char)*r);
                    }
                }
                *w = '\0';
                json_t *s = json_string(name);
                free(name);
                return s;
            }
        }
    }
    return json_string("unknown");
}

static bool is_skill(const char *t)
{
    return strncmp(t, "Base directory for this skill:", 30) == 0 ||
           (strstr(t, "\n# ") != NULL && strstr(t, "Skill") != NULL) ||
           strstr(t, "Use `read_skill_file` with skill=") != NULL;
}

/* A message with an image keeps its parts, in order (F9). */
static json_t *parts_of(json_t *content)
{
    json_t *a = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p)
    {
        const char *type = str(p, "type") ? str(p, "type") : "";
        json_t *src = json_object_get(p, "source");
        json_t *part = NULL;
        if (strcmp(type, "text") == 0) {
            part = json_pack("{s:s, s:s}", "type", "text", "text",
                             str(p, "text") ? str(p, "text") : "");
        } else if (strcmp(type, "image") == 0 && str(src, "url") != NULL) {
            part = json_pack("{s:s, s:{s:s, s:s}}", "type", "image", "source", "type", "url",
                             "data", str(src, "url"));
        } else if (strcmp(type, "image") == 0) {
            json_t *s = json_pack("{s:s}", "type", "base64");
            set_if(s, "data", json_object_get(src, "data"));
            set_if(s, "mediaType", json_object_get(src, "media_type"));
            part = json_pack("{s:s, s:o}", "type", "image", "source", s);
        }
        if (part != NULL)
            json_array_append_new(a, part);
    }
    return a;
}

/* A Task result (toolUseResult on disk, tool_use_result live) completes
 * the subagent of one tool_result only: the one whose Task had the
 * result's prompt, else the line's first (F5). */
static json_t *task_result_target(claude_conv *c, json_t *content, json_t *tur)
{
    json_t *first = NULL, *p;
    json_t *want = str(tur, "prompt") ? trimmed(str(tur, "prompt")) : NULL;
    size_t i;
    json_array_foreach(content, i, p)
    {
        if (!str(p, "type") || strcmp(str(p, "type"), "tool_result") != 0)
            continue;
        if (first == NULL)
            first = p;
        const char *tu = str(p, "tool_use_id");
        json_t *tp = tu ? json_object_get(c->task_prompt, tu) : NULL;
        if (want != NULL && tp != NULL && json_equal(tp, want)) {
            json_decref(want);
            return p;
        }
    }
    json_decref(want);
    return first;
}

static int tool_results(claude_conv *c, const json_t *line, json_t *content, emit *e)
{
    json_t *tur = json_object_get(line, "toolUseResult");
    if (!json_is_object(tur))
        tur = json_object_get(line, "tool_use_result");
    json_t *task = str(tur, "agentId") ? task_result_target(c, content, tur) : NULL;
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p)
    {
        if (!str(p, "type") || strcmp(str(p, "type"), "tool_result") != 0)
            continue;
        const char *tu = str(p, "tool_use_id") ? str(p, "tool_use_id") : "";
        if (p == task) {
            json_t *pl = json_pack(
                "{s:s, s:s, s:s}", "toolUseId", tu, "agentId", str(tur, "agentId"), "status",
                str(tur, "status") && !strcmp(str(tur, "status"), "completed") ? "completed"
                                                                               : "failed");
            json_t *out = text_of(json_object_get(tur, "content"), NULL);
            if (pl != NULL && out != NULL)
                json_object_set_new(pl, "output", out);
            else
                json_decref(out);
            if (pl != NULL)
                set_if(pl, "durationMs", json_object_get(tur, "totalDurationMs"));
            push(e, "subagent:completed", pl);
            continue;
        }
        json_t *out = json_object_get(p, "content");
        json_t *res = json_pack("{s:s+, s:s, s:s, s:O, s:b}", "id", "result-", tu, "type",
                                "tool_result", "toolUseId", tu, "output", out ? out : json_null(),
                                "isError", json_is_true(json_object_get(p, "is_error")));
        upsert(e, res, "complete");
    }
    return 0;
}

static int user(claude_conv *c, const json_t *line, const char *forced, emit *e)
{
    json_t *msg = json_object_get(line, "message");
    if (!json_is_object(msg))
        return -EINVAL;
    json_t *content = json_object_get(msg, "content");
    size_t i;
    json_t *p;
    json_array_foreach(
        content, i, p) if (str(p, "type") &&
                           !strcmp(str(p, "type"), "tool_result")) return tool_results(c, line,
                                                                                       content, e);

    bool image = false;
    json_t *text = text_of(content, &image);
    if (text == NULL)
        text = json_string("");
    const char *t = json_string_value(text);
    const char *uuid = str(line, "uuid");
    json_t *id = uuid ? json_string(uuid) : fmt("claude-%lu", ++c->gen);
    /* The SDK echoes a Task's prompt as the subagent's first user line;
     * only there is it dropped (F6): in main it is the user's own text. */
    bool in_sub = forced != NULL || str(line, "parent_tool_use_id") != NULL ||
                  json_is_true(json_object_get(line, "isSidechain"));
    json_t *tt = trimmed(t);
    bool echo = !image && in_sub && json_object_get(c->prompts, json_string_value(tt));
    json_decref(tt);
    if (image) {
        upsert(e,
               json_pack("{s:O, s:s, s:o}", "id", id, "type", "user_message", "content",
                         parts_of(content)),
               "complete");
    } else if (!echo && is_skill(t)) {
        upsert(e,
               json_pack("{s:O, s:s, s:o, s:O}", "id", id, "type", "skill_load", "skillName",
                         skill_name(t), "content", text),
               "complete");
    } else if (!echo) {
        upsert(e, json_pack("{s:O, s:s, s:O}", "id", id, "type", "user_message", "content", text),
               "complete");
    }
    json_decref(id);
    json_decref(text);
    return 0;
}

/* ------------------------------------------------------------- stream --- */

static int stream(claude_conv *c, const json_t *line, emit *e)
{
    json_t *ev = json_object_get(line, "event");
    const char *type = str(ev, "type") ? str(ev, "type") : "";
    json_t *st = json_object_get(c->streams, e->conv);
    if (strcmp(type, "message_start") == 0) {
        json_t *m = json_object_get(json_object_get(ev, "message"), "id");
        json_object_set_new(c->streams, e->conv,
                            json_pack("{s:O?, s:{}}", "msg", json_is_string(m) ? m : NULL, "ids"));
        return 0;
    }
    char idx[32];
    snprintf(idx, sizeof(idx), "%lld", (long long)json_integer_value(json_object_get(ev, "index")));
    if (strcmp(type, "content_block_delta") == 0) {
        const char *id = str(json_object_get(st, "ids"), idx);
        json_t *d = json_object_get(ev, "delta");
        const char *dt = str(d, "type") ? str(d, "type") : "";
        const char *text = !strcmp(dt, "text_delta")       ? str(d, "text")
                           : !strcmp(dt, "thinking_delta") ? str(d, "thinking")
                                                           : NULL;
        if (id != NULL && text != NULL && *text)
            push(e, "block:delta", json_pack("{s:s, s:s}", "blockId", id, "delta", text));
        return 0;
    }
    if (strcmp(type, "content_block_start") != 0)
        return 0;
    if (st == NULL) {
        st = json_pack("{s:{}}", "ids");
        json_object_set_new(c->streams, e->conv, st);
    }
    json_t *cb = json_object_get(ev, "content_block");
    const char *cbt = str(cb, "type") ? str(cb, "type") : "";
    json_t *id = str(cb, "id")    ? json_string(str(cb, "id"))
                 : str(st, "msg") ? fmt("%s-%s", str(st, "msg"), idx)
                                  : fmt("claude-%lu", ++c->gen);
    json_t *ids = json_object_get(st, "ids");
    bool again = json_equal(json_object_get(ids, idx), id);
    json_object_set(ids, idx, id);
    const char *sid = json_string_value(id);
    if (again) {
        /* a block announced twice makes it once */
    } else if (strcmp(cbt, "text") == 0) {
        upsert(e,
               json_pack("{s:s, s:s, s:s}", "id", sid, "type", "assistant_text", "content",
                         str(cb, "text") ? str(cb, "text") : ""),
               "pending");
    } else if (strcmp(cbt, "thinking") == 0) {
        upsert(e, json_pack("{s:s, s:s, s:s}", "id", sid, "type", "thinking", "content", ""),
               "pending");
    } else if (strcmp(cbt, "tool_use") == 0) {
        tool_use(e, c, sid, cb, "pending");
    }
    json_decref(id);
    return 0;
}

/* ---------------------------------------------------------------- API --- */

int claude_conv_line(claude_conv *c, const json_t *line, const char *conv, json_t *out, char *why,
                     size_t whylen)
{
    const char *type = str(line, "type");
    const char *parent = str(line, "parent_tool_use_id");
    emit e = {.out = out,
              .conv = conv ? conv : (parent && *parent ? parent : "main"),
              .ts = str(line, "timestamp"),
              .session = str(line, "sessionId")    ? str(line, "sessionId")
                         : str(line, "session_id") ? str(line, "session_id")
                                                   : ""};
    size_t had = json_array_size(out);
    int rc = 0;
    if (!json_is_object(line) || type == NULL)
        rc = -EINVAL;
    else if (strcmp(type, "assistant") == 0)
        rc = assistant(c, line, &e);
    else if (strcmp(type, "user") == 0)
        rc = user(c, line, conv, &e);
    else if (strcmp(type, "stream_event") == 0)
        rc = stream(c, line, &e);
    if (rc == 0)
        rc = e.rc;
    if (rc == -EINVAL && why != NULL)
        snprintf(why, whylen, "a %s line without %s", type ? type : "typeless",
                 type ? "a message with content" : "a type");
    if (rc != 0)
        while (json_array_size(out) > had)
            json_array_remove(out, had);
    return rc;
}

/* The text of a transcript's first user line that has text. */
static json_t *first_user_text(const json_t *lines)
{
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l)
    {
        if (!str(l, "type") || strcmp(str(l, "type"), "user") != 0)
            continue;
        json_t *t = text_of(json_object_get(json_object_get(l, "message"), "content"), NULL);
        if (t != NULL && json_string_length(t) > 0)
            return t;
        json_decref(t);
    }
    return NULL;
}

int claude_subagent_begin(reducer *r, const char *id, const json_t *lines, json_t *out)
{
    if (reducer_subagent(r, id) != NULL)
        return 0;
    json_t *t = first_user_text(lines);
    if (t == NULL)
        return 0;
    json_t *want = trimmed(json_string_value(t));
    json_decref(t);
    int rc = 0;
    for (size_t i = 0; i < reducer_subagent_count(r); i++) {
        const json_t *s = reducer_subagent_at(r, i);
        const char *prompt = str(s, "prompt");
        if (json_object_get(s, "agentId") != NULL || prompt == NULL || *prompt == '\0')
            continue;
        json_t *have = trimmed(prompt);
        bool match = json_equal(have, want);
        json_decref(have);
        if (!match)
            continue;
        emit e = {.out = out, .conv = "main", .session = ""};
        push(&e, "subagent:spawned",
             json_pack("{s:s, s:s}", "toolUseId", str(s, "toolUseId"), "agentId", id));
        rc = e.rc;
        break;
    }
    json_decref(want);
    return rc;
}

/* Reduces lines of one conversation (conv NULL: each line's own). */
static int feed(claude_conv *c, reducer *r, const json_t *lines, const char *conv, json_t *evs,
                size_t *skipped)
{
    size_t i, k;
    json_t *l, *ev;
    json_array_foreach(lines, i, l)
    {
        json_array_clear(evs);
        int rc = claude_conv_line(c, l, conv, evs, NULL, 0);
        if (rc == -EINVAL) {
            (*skipped)++;
            continue;
        }
        if (rc != 0)
            return rc;
        json_array_foreach(evs, k, ev) if (reducer_apply(r, ev, NULL) == -ENOMEM) return -ENOMEM;
    }
    return 0;
}

int claude_reduce(reducer *r, const json_t *session, size_t *skipped)
{
    size_t none = 0;
    if (skipped == NULL)
        skipped = &none;
    claude_conv *c = claude_conv_new();
    json_t *evs = json_array();
    int rc = c && evs ? 0 : -ENOMEM;
    if (rc == 0)
        rc = feed(c, r, json_object_get(session, "main"), NULL, evs, skipped);
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(session, "subagents"), i, s)
    {
        const char *id = str(s, "id");
        json_t *lines = json_object_get(s, "transcript");
        /* Claude Code creates an empty transcript for every agent at
         * startup: one line or none says nothing. */
        if (rc != 0 || id == NULL || json_array_size(lines) <= 1)
            continue;
        json_array_clear(evs);
        rc = claude_subagent_begin(r, id, lines, evs);
        size_t k;
        json_t *ev;
        json_array_foreach(evs, k, ev) if (rc == 0 && reducer_apply(r, ev, NULL) == -ENOMEM) rc =
            -ENOMEM;
        if (rc == 0)
            rc = feed(c, r, lines, id, evs, skipped);
    }
    json_decref(evs);
    claude_conv_free(c);
    return rc;
}
