/*
 * reducer_opencode.c - see reducer_opencode.h. The export and the live
 * stream share the part conversions (tools, tasks, images); they differ
 * where their sources do: an export's parts are finished, so text and
 * reasoning are complete blocks at once, while live parts grow by deltas
 * and complete at the session's idle. Input is checked whole before
 * anything is emitted or remembered, so what cannot be converted leaves
 * no trace.
 */
#include "actors/reducer_opencode.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ helpers --- */

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static bool is(const json_t *o, const char *key, const char *want)
{
    const char *s = str(o, key);
    return s != NULL && strcmp(s, want) == 0;
}

static int bad(char *why, size_t whylen, const char *f, ...)
{
    if (why != NULL && whylen > 0) {
        va_list ap;
        va_start(ap, f);
        vsnprintf(why, whylen, f, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* Milliseconds since the epoch as ISO 8601 UTC with three fraction
 * digits; NULL if ms is not a usable number (no time then). */
static const char *iso(const json_t *ms, char out[32])
{
    if (!json_is_number(ms))
        return NULL;
    double v = json_number_value(ms);
    if (!isfinite(v) || fabs(v) > 8.64e15) /* the range of a JavaScript Date */
        return NULL;
    long long t = (long long)floor(v), sec = t / 1000, rem = t % 1000;
    if (rem < 0) {
        rem += 1000;
        sec--;
    }
    time_t s = (time_t)sec;
    struct tm tm;
    if (gmtime_r(&s, &tm) == NULL)
        return NULL;
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03lldZ", rem);
    return out;
}

/* The time of a part: its own (ms), else its message's creation (F7). */
static const char *when(const json_t *ms, const json_t *created, char out[32])
{
    const char *t = iso(ms, out);
    return t != NULL ? t : iso(created, out);
}

/* end - start when the state has both times, else NULL. */
static json_t *duration(const json_t *state)
{
    json_t *t = json_object_get(state, "time");
    json_t *a = json_object_get(t, "start"), *b = json_object_get(t, "end");
    if (!json_is_number(a) || !json_is_number(b))
        return NULL;
    double d = json_number_value(b) - json_number_value(a);
    return d == floor(d) && fabs(d) < 9e15 ? json_integer((json_int_t)d) : json_real(d);
}

static bool blank(const char *s)
{
    size_t a, n;
    reducer_trim(s, strlen(s), &a, &n);
    return n == 0;
}

/* Sets key to v (taken) when v is not NULL. */
static void set_new(json_t *o, const char *key, json_t *v)
{
    if (o != NULL && v != NULL)
        json_object_set_new(o, key, v);
}

static void set_copy(json_t *o, const char *key, const json_t *v)
{
    if (v != NULL)
        set_new(o, key, json_deep_copy(v));
}

/* The events of one message or server event, with their context. */
typedef struct emit {
    json_t *out;
    const char *conv, *session;
    const char *msg_id; /* live: blocks carry metadata.opencodeMessageId */
    int rc;
} emit;

static void push(emit *e, const char *type, json_t *payload, const char *ts)
{
    json_t *ctx = json_pack("{s:s, s:s}", "sessionId", e->session, "conversationId", e->conv);
    if (ctx != NULL && ts != NULL)
        json_object_set_new(ctx, "timestamp", json_string(ts));
    json_t *ev = json_pack("{s:s, s:o, s:o}", "type", type, "payload", payload, "context", ctx);
    if (ev == NULL || json_array_append_new(e->out, ev) != 0)
        e->rc = -ENOMEM;
}

/* block:upsert of block (taken), at time ts, with status when not NULL
 * (a new block without one starts pending). */
static void upsert(emit *e, json_t *block, const char *ts, const char *status)
{
    if (block == NULL) {
        e->rc = -ENOMEM;
        return;
    }
    if (ts != NULL)
        json_object_set_new(block, "timestamp", json_string(ts));
    if (status != NULL)
        json_object_set_new(block, "status", json_string(status));
    push(e, "block:upsert", json_pack("{s:o}", "block", block), NULL);
}

/* A block of part p (id and type) with the live message tag. */
static json_t *block_of(emit *e, const json_t *p, const char *type)
{
    json_t *b = json_pack("{s:s, s:s}", "id", str(p, "id"), "type", type);
    if (b != NULL && e->msg_id != NULL)
        set_new(b, "metadata", json_pack("{s:s}", "opencodeMessageId", e->msg_id));
    return b;
}

/* A part checked before anything is made of it: an object with its id,
 * and a tool with its call id and state. */
static int check_part(const json_t *p, char *why, size_t whylen)
{
    if (!json_is_object(p))
        return bad(why, whylen, "a part that is not an object");
    if (str(p, "id") == NULL)
        return bad(why, whylen, "a part without id");
    if (is(p, "type", "tool") &&
        (str(p, "callID") == NULL || !json_is_object(json_object_get(p, "state"))))
        return bad(why, whylen, "tool part %s without callID or state", str(p, "id"));
    return 0;
}

/* ------------------------------------------------------ tools, tasks --- */

/* tool_use on every update; when the tool finished, its tool_result. */
static void tool_blocks(emit *e, const json_t *p, const json_t *created)
{
    json_t *st = json_object_get(p, "state"), *input = json_object_get(st, "input");
    json_t *t = json_object_get(st, "time");
    bool done = is(st, "status", "completed"), err = is(st, "status", "error");
    char ts[32];
    json_t *use = block_of(e, p, "tool_use");
    if (use != NULL) {
        set_new(use, "toolName", json_string(str(p, "tool") ? str(p, "tool") : ""));
        set_new(use, "toolUseId", json_string(str(p, "callID")));
        set_new(use, "input", json_is_object(input) ? json_deep_copy(input) : json_object());
        if (str(st, "title") != NULL)
            set_copy(use, "displayName", json_object_get(st, "title"));
    }
    upsert(e, use, when(json_object_get(t, "start"), created, ts),
           done || err ? "complete" : "pending");
    if (!done && !err)
        return;
    const json_t *out = json_object_get(st, err ? "error" : "output");
    json_t *res = json_pack("{s:s+, s:s, s:s, s:O, s:b}", "id", "result-", str(p, "id"), "type",
                            "tool_result", "toolUseId", str(p, "callID"), "output",
                            out ? (json_t *)out : json_null(), "isError", err);
    set_new(res, "durationMs", duration(st));
    upsert(e, res, when(json_object_get(t, "end"), created, ts), "complete");
}

/* A task announces its subagent, keyed by its call id; the child session
 * it names is the agent id from the start (F11). */
static void task_spawned(emit *e, const json_t *p, const json_t *created)
{
    json_t *st = json_object_get(p, "state"), *input = json_object_get(st, "input");
    const char *prompt = str(input, "prompt");
    if (prompt == NULL || *prompt == '\0')
        prompt = str(input, "description") ? str(input, "description") : "";
    json_t *pl = json_pack("{s:s, s:s}", "toolUseId", str(p, "callID"), "prompt", prompt);
    if (pl != NULL) {
        set_copy(pl, "agentId", json_object_get(json_object_get(st, "metadata"), "sessionId"));
        if (str(input, "subagent_type") != NULL)
            set_copy(pl, "subagentType", json_object_get(input, "subagent_type"));
        if (str(input, "description") != NULL)
            set_copy(pl, "description", json_object_get(input, "description"));
    }
    char ts[32];
    push(e, "subagent:spawned", pl,
         when(json_object_get(json_object_get(st, "time"), "start"), created, ts));
}

/* Only a finished task completes its subagent. */
static void task_completed(emit *e, const json_t *p)
{
    json_t *st = json_object_get(p, "state");
    bool done = is(st, "status", "completed");
    if (!done && !is(st, "status", "error"))
        return;
    json_t *pl = json_pack("{s:s, s:s}", "toolUseId", str(p, "callID"), "status",
                           done ? "completed" : "failed");
    if (pl != NULL) {
        set_copy(pl, "agentId", json_object_get(json_object_get(st, "metadata"), "sessionId"));
        set_copy(pl, "output", json_object_get(st, done ? "output" : "error"));
        set_new(pl, "durationMs", duration(st));
    }
    push(e, "subagent:completed", pl, NULL);
}

/* A `file` part that is an image (an image MIME type) with its URL. */
static bool is_image(const json_t *p)
{
    const char *mime = str(p, "mime");
    return is(p, "type", "file") && mime && strncmp(mime, "image/", 6) == 0 && str(p, "url");
}

/* An image part as user content: a data: URL gives its base64 data. */
static json_t *image_part(const json_t *p)
{
    const char *url = str(p, "url"), *b64 = strstr(url, ";base64,");
    bool data = strncmp(url, "data:", 5) == 0 && b64 != NULL;
    return json_pack("{s:s, s:{s:s, s:s, s:s}}", "type", "image", "source", "type",
                     data ? "base64" : "url", "data", data ? b64 + 8 : url, "mediaType",
                     str(p, "mime"));
}

/* ------------------------------------------------------------ export --- */

/* A user message is one block: its text parts joined with "\n", or, with
 * an image, its text and image parts in order (F9). */
static void user_message(emit *e, const json_t *info, const json_t *parts, const json_t *created)
{
    size_t i, len = 0;
    json_t *p;
    bool image = false;
    json_array_foreach(parts, i, p)
    {
        image |= is_image(p);
        if (is(p, "type", "text") && str(p, "text"))
            len += strlen(str(p, "text")) + 1;
    }
    char *buf = malloc(len + 1), *w = buf;
    json_t *list = json_array();
    if (buf == NULL || list == NULL) {
        free(buf);
        json_decref(list);
        e->rc = -ENOMEM;
        return;
    }
    json_array_foreach(parts, i, p)
    {
        const char *t = is(p, "type", "text") ? str(p, "text") : NULL;
        if (t != NULL) {
            if (w != buf)
                *w++ = '\n';
            memcpy(w, t, strlen(t));
            w += strlen(t);
            json_array_append_new(list, json_pack("{s:s, s:s}", "type", "text", "text", t));
        } else if (is_image(p)) {
            json_array_append_new(list, image_part(p));
        }
    }
    json_t *content = image ? json_incref(list) : json_stringn(buf, (size_t)(w - buf));
    if (image || w != buf) {
        char ts[32];
        upsert(e,
               json_pack("{s:s, s:s, s:o}", "id", str(info, "id"), "type", "user_message",
                         "content", content),
               iso(created, ts), "complete");
    } else {
        json_decref(content);
    }
    json_decref(list);
    free(buf);
}

static void assistant_part(emit *e, const json_t *p, const char *model, const json_t *created,
                           const json_t *children);

/* The summary a task carries of its child's parts, converted into the
 * child's conversation; entries without a type say too little. */
static void task_summary(emit *e, const json_t *p, const json_t *created)
{
    json_t *meta = json_object_get(json_object_get(p, "state"), "metadata");
    emit child = *e;
    child.conv = str(meta, "sessionId");
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(meta, "summary"), i, s)
    {
        if (str(s, "type") != NULL && check_part(s, NULL, 0) == 0)
            assistant_part(&child, s, NULL, created, NULL);
    }
    e->rc = e->rc ? e->rc : child.rc;
}

static void assistant_part(emit *e, const json_t *p, const char *model, const json_t *created,
                           const json_t *children)
{
    const char *type = str(p, "type") ? str(p, "type") : "", *text = str(p, "text");
    const char *sid = str(json_object_get(json_object_get(p, "state"), "metadata"), "sessionId");
    char ts[32];
    if (!strcmp(type, "text") || !strcmp(type, "reasoning")) {
        if (text == NULL || blank(text))
            return;
        json_t *b = block_of(e, p, *type == 't' ? "assistant_text" : "thinking");
        set_new(b, "content", json_string(text));
        if (model != NULL && *type == 't')
            set_new(b, "model", json_string(model));
        upsert(e, b, when(json_object_get(json_object_get(p, "time"), "start"), created, ts),
               "complete");
    } else if (!strcmp(type, "tool") && is(p, "tool", "task") && sid != NULL &&
               !strcmp(e->conv, "main")) {
        task_spawned(e, p, created);
        /* The child's own export is the full record: the summary would
         * only repeat part of it. */
        if (json_object_get(children, sid) == NULL)
            task_summary(e, p, created);
        task_completed(e, p);
    } else if (!strcmp(type, "tool")) {
        tool_blocks(e, p, created);
    } else if (!strcmp(type, "agent") || !strcmp(type, "subtask")) {
        /* No agent id to take: the part id stands for it. */
        bool agent = *type == 'a';
        const char *name = str(p, agent ? "name" : "agent");
        const char *input = agent ? str(json_object_get(p, "source"), "value") : str(p, "prompt");
        json_t *b = block_of(e, p, "subagent");
        set_new(b, "subagentId", json_string(agent && name ? name : str(p, "id")));
        set_new(b, "input", json_string(input ? input : ""));
        if (name != NULL)
            set_new(b, "name", json_string(name));
        upsert(e, b, iso(created, ts), agent ? "complete" : "pending");
    }
}

static int message_events(emit *e, const json_t *msg, const json_t *children, char *why,
                          size_t whylen)
{
    json_t *info = json_object_get(msg, "info"), *parts = json_object_get(msg, "parts");
    if (!json_is_object(info) || str(info, "id") == NULL)
        return bad(why, whylen, "a message without info.id");
    if (parts != NULL && !json_is_array(parts))
        return bad(why, whylen, "message %s: parts is not a list", str(info, "id"));
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p)
    {
        int rc = check_part(p, why, whylen);
        if (rc != 0)
            return rc;
    }
    const json_t *created = json_object_get(json_object_get(info, "time"), "created");
    if (is(info, "role", "user"))
        user_message(e, info, parts, created);
    else if (is(info, "role", "assistant"))
        json_array_foreach(parts, i, p)
        {
            assistant_part(e, p, str(info, "modelID"), created, children);
        }
    return e->rc;
}

static const char *session_of(const json_t *export)
{
    const char *id = str(json_object_get(export, "info"), "id");
    return id ? id : "";
}

int opencode_export_events(const json_t *export, const char *conv, const json_t *children,
                           json_t *out, char *why, size_t whylen)
{
    json_t *msgs = json_object_get(export, "messages");
    if (!json_is_array(msgs))
        return bad(why, whylen, "not an opencode export: no messages list");
    emit e = {.out = out, .conv = conv ? conv : "main", .session = session_of(export)};
    size_t had = json_array_size(out), i;
    json_t *m;
    int rc = 0;
    json_array_foreach(msgs, i, m)
    {
        if ((rc = message_events(&e, m, children, why, whylen)) != 0)
            break;
    }
    if (rc != 0)
        while (json_array_size(out) > had)
            json_array_remove(out, had);
    return rc;
}

/* -------------------------------------------------------------- live --- */

struct opencode_live {
    char *main;
    json_t *msgs; /* message id -> {"role", "created"} */
    json_t *seen; /* session id -> {part id: true}: parts with a block, until its idle */
};

opencode_live *opencode_live_new(const char *main_session_id)
{
    opencode_live *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->main = strdup(main_session_id ? main_session_id : "");
    l->msgs = json_object();
    l->seen = json_object();
    if (l->main == NULL || l->msgs == NULL || l->seen == NULL) {
        opencode_live_free(l);
        return NULL;
    }
    return l;
}

void opencode_live_free(opencode_live *l)
{
    if (l == NULL)
        return;
    free(l->main);
    json_decref(l->msgs);
    json_decref(l->seen);
    free(l);
}

static const char *conv_of(opencode_live *l, const char *session)
{
    return session == NULL || strcmp(session, l->main) == 0 ? "main" : session;
}

static int message_updated(opencode_live *l, const json_t *info, char *why, size_t whylen)
{
    if (!json_is_object(info) || str(info, "id") == NULL)
        return bad(why, whylen, "message.updated without info.id");
    json_t *m = json_object();
    if (m == NULL)
        return -ENOMEM;
    set_copy(m, "role", json_object_get(info, "role"));
    set_copy(m, "created", json_object_get(json_object_get(info, "time"), "created"));
    return json_object_set_new(l->msgs, str(info, "id"), m) ? -ENOMEM : 0;
}

/* Marks part p of session s as having its block; false if it had. */
static bool first_sight(opencode_live *l, emit *e, const char *s, const char *p)
{
    json_t *set = json_object_get(l->seen, s);
    if (json_object_get(set, p) != NULL)
        return false;
    if (set == NULL && json_object_set_new(l->seen, s, set = json_object()) != 0)
        e->rc = -ENOMEM;
    else if (json_object_set_new(set, p, json_true()) != 0)
        e->rc = -ENOMEM;
    return true;
}

/* An assistant text or reasoning part: its block from the first update
 * (pending, content ""), every delta as it is (F12), and the finished
 * part's text, which an update without delta carries, as the content. */
static void live_text(opencode_live *l, emit *e, const json_t *p, const json_t *delta,
                      const json_t *created)
{
    bool first = first_sight(l, e, e->session, str(p, "id"));
    json_t *b = block_of(e, p, is(p, "type", "text") ? "assistant_text" : "thinking");
    char ts[32];
    const char *t = when(json_object_get(json_object_get(p, "time"), "start"), created, ts);
    if (json_is_string(delta)) {
        if (first)
            upsert(e, b, t, NULL);
        else
            json_decref(b);
        if (json_string_length(delta) > 0)
            push(e, "block:delta", json_pack("{s:s, s:O}", "blockId", str(p, "id"), "delta", delta),
                 NULL);
        return;
    }
    set_new(b, "content", json_string(str(p, "text") ? str(p, "text") : ""));
    upsert(e, b, t, NULL);
}

static void live_user(opencode_live *l, emit *e, const json_t *p, const json_t *created)
{
    char ts[32];
    const char *t = when(json_object_get(json_object_get(p, "time"), "start"), created, ts);
    if (is_image(p)) {
        json_t *b = block_of(e, p, "user_message");
        set_new(b, "content", json_pack("[o]", image_part(p)));
        upsert(e, b, t, "complete");
    } else if (is(p, "type", "text") && first_sight(l, e, e->session, str(p, "id"))) {
        /* The part is sent again as it is: the first is the message. */
        json_t *b = block_of(e, p, "user_message");
        set_new(b, "content", json_string(str(p, "text") ? str(p, "text") : ""));
        upsert(e, b, t, "complete");
    }
}

static int part_updated(opencode_live *l, emit *e, const json_t *props, char *why, size_t whylen)
{
    json_t *p = json_object_get(props, "part");
    int rc = check_part(p, why, whylen);
    if (rc != 0)
        return rc;
    if (str(p, "sessionID") == NULL || str(p, "messageID") == NULL)
        return bad(why, whylen, "part %s without sessionID or messageID", str(p, "id"));
    e->session = str(p, "sessionID");
    e->conv = conv_of(l, e->session);
    e->msg_id = str(p, "messageID");
    json_t *m = json_object_get(l->msgs, e->msg_id);
    const json_t *created = json_object_get(m, "created");
    const char *type = str(p, "type") ? str(p, "type") : "";
    /* A part may come before its message: a role not known yet counts as
     * assistant. */
    if (is(m, "role", "user") && (!strcmp(type, "text") || !strcmp(type, "file")))
        live_user(l, e, p, created);
    else if (!strcmp(type, "text") || !strcmp(type, "reasoning"))
        live_text(l, e, p, json_object_get(props, "delta"), created);
    else if (!strcmp(type, "tool") && is(p, "tool", "task")) {
        task_spawned(e, p, created);
        task_completed(e, p);
    } else if (!strcmp(type, "tool")) {
        tool_blocks(e, p, created);
    }
    return e->rc;
}

int opencode_live_event(opencode_live *l, const json_t *event, json_t *out, char *why,
                        size_t whylen)
{
    const char *type = str(event, "type");
    json_t *props = json_object_get(event, "properties");
    if (type == NULL)
        return bad(why, whylen, "an event without type");
    const char *sid = str(props, "sessionID");
    emit e = {.out = out, .conv = conv_of(l, sid), .session = sid ? sid : l->main};
    size_t had = json_array_size(out);
    int rc = 0;
    if (!strcmp(type, "message.updated")) {
        rc = message_updated(l, json_object_get(props, "info"), why, whylen);
    } else if (!strcmp(type, "message.part.updated")) {
        rc = part_updated(l, &e, props, why, whylen);
    } else if (!strcmp(type, "session.idle")) {
        if (sid == NULL)
            return bad(why, whylen, "session.idle without sessionID");
        push(&e, "session:idle", json_pack("{s:s}", "sessionId", sid), NULL);
        json_object_del(l->seen, sid);
        rc = e.rc;
    } else if (!strcmp(type, "session.error")) {
        const char *msg = str(json_object_get(json_object_get(props, "error"), "data"), "message");
        push(&e, "error", json_pack("{s:s}", "message", msg ? msg : "Session error"), NULL);
        rc = e.rc;
    }
    if (rc != 0)
        while (json_array_size(out) > had)
            json_array_remove(out, had);
    return rc;
}

/* ------------------------------------------------------------ reduce --- */

static int apply_all(reducer *r, json_t *evs)
{
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev)
    {
        /* an event the reducer refuses changes nothing: only memory stops us */
        if (reducer_apply(r, ev, NULL) == -ENOMEM)
            return -ENOMEM;
    }
    json_array_clear(evs);
    return 0;
}

/* One export message by message: a message that cannot be converted is
 * skipped alone. */
static int reduce_export(reducer *r, const json_t *export, const char *conv, const json_t *children,
                         json_t *evs, size_t *skipped)
{
    json_t *msgs = json_object_get(export, "messages");
    if (!json_is_array(msgs)) {
        (*skipped)++;
        return 0;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        emit e = {.out = evs, .conv = conv, .session = session_of(export)};
        int rc = message_events(&e, m, children, NULL, 0);
        if (rc == -EINVAL) {
            json_array_clear(evs);
            (*skipped)++;
            continue;
        }
        if (rc == 0)
            rc = apply_all(r, evs);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int opencode_reduce(reducer *r, const json_t *session, size_t *skipped)
{
    size_t none = 0, i;
    if (skipped == NULL)
        skipped = &none;
    json_t *subs = json_object_get(session, "subagents"), *s;
    json_t *children = json_object(), *evs = json_array();
    int rc = children && evs ? 0 : -ENOMEM;
    json_array_foreach(subs, i, s)
    {
        if (rc == 0 && str(s, "id") && json_object_set_new(children, str(s, "id"), json_true()))
            rc = -ENOMEM;
    }
    if (rc == 0)
        rc = reduce_export(r, json_object_get(session, "main"), "main", children, evs, skipped);
    json_array_foreach(subs, i, s)
    {
        if (rc != 0)
            break;
        if (str(s, "id") == NULL) {
            (*skipped)++;
            continue;
        }
        rc = reduce_export(r, json_object_get(s, "transcript"), str(s, "id"), NULL, evs, skipped);
    }
    json_decref(children);
    json_decref(evs);
    return rc;
}

int opencode_live_reduce(reducer *r, const json_t *input, size_t *skipped)
{
    size_t none = 0, i;
    if (skipped == NULL)
        skipped = &none;
    const char *main_id = str(input, "mainSessionId");
    if (main_id == NULL)
        return -EINVAL;
    opencode_live *l = opencode_live_new(main_id);
    json_t *evs = json_array(), *ev;
    int rc = l && evs ? 0 : -ENOMEM;
    json_array_foreach(json_object_get(input, "events"), i, ev)
    {
        if (rc != 0)
            break;
        rc = opencode_live_event(l, ev, evs, NULL, 0);
        if (rc == -EINVAL) {
            (*skipped)++;
            rc = 0;
        } else if (rc == 0) {
            rc = apply_all(r, evs);
        }
    }
    json_decref(evs);
    opencode_live_free(l);
    return rc;
}
