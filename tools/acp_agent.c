/*
 * acp_agent.c - the protocol core of `parley acp` (acp_agent.h): the
 * editor's requests, the sessions, and the conversations' events as
 * session/update through the one mapping (actors/acp_map.h, acp_out).
 */
#include "acp_agent.h"

#include "actors/acp_map.h"
#include "actors/acp_rpc.h"
#include "runtime/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACPA_CALLS_MAX 256 /* pending tool calls remembered a session */

typedef struct call {
    char *id;
    char *title; /* as the editor was told, else the tool's name */
    bool closed; /* its turn was cancelled and answered: no updates after */
} call;

typedef struct session {
    char cid[64];
    acp_out *out;
    json_t *load_id;   /* a session/load waiting for the history */
    json_t *prompt_id; /* the prompt turn that runs */
    json_t *echo;      /* its content, until its message comes back */
    bool armed;        /* a stop now ends the turn */
    bool heard;        /* a user message came back since the prompt was posted */
    bool ended;        /* its events stopped coming */
    int64_t perm_id;   /* our session/request_permission waiting; 0: none */
    call calls[ACPA_CALLS_MAX];
    size_t ncalls;
} session;

struct acpa {
    acpa_backend b;
    acpa_write_fn write;
    void *ctx;
    session **s;
    size_t n, cap;
    int64_t next_id; /* of our requests to the editor */
};

/* ---- output ----------------------------------------------------------------------------- */

static void emit(acpa *a, rt_buf *line)
{
    if (line == NULL) {
        fprintf(stderr, "parley acp: out of memory for an answer\n");
        return;
    }
    a->write(a->ctx, (const char *)rt_buf_data(line), rt_buf_len(line));
    rt_buf_unref(line);
}

static void answer(acpa *a, json_t *id, json_t *result)
{
    emit(a, rpc_result(id, result));
}

static void fail(acpa *a, json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(acpa *a, json_t *id, int code, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    emit(a, rpc_error(id, code, msg));
}

static void update(acpa *a, session *s, json_t *u)
{
    emit(a, rpc_notification("session/update",
                             json_pack("{s:s, s:O}", "sessionId", s->cid, "update", u)));
}

/* ---- sessions ----------------------------------------------------------------------------- */

static session *find(acpa *a, const char *cid)
{
    for (size_t i = 0; cid != NULL && i < a->n; i++)
        if (strcmp(a->s[i]->cid, cid) == 0)
            return a->s[i];
    return NULL;
}

static session *add(acpa *a, const char *cid)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        session **t = realloc(a->s, cap * sizeof(*t));
        if (t == NULL)
            return NULL;
        a->s = t;
        a->cap = cap;
    }
    session *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->out = acp_out_new(NULL)) == NULL) {
        free(s);
        return NULL;
    }
    snprintf(s->cid, sizeof(s->cid), "%s", cid);
    a->s[a->n++] = s;
    return s;
}

static void forget_calls(session *s)
{
    for (size_t i = 0; i < s->ncalls; i++) {
        free(s->calls[i].id);
        free(s->calls[i].title);
    }
    s->ncalls = 0;
}

static void session_free(session *s)
{
    acp_out_free(s->out);
    json_decref(s->load_id);
    json_decref(s->prompt_id);
    json_decref(s->echo);
    forget_calls(s);
    free(s);
}

/* The turn is over: its answer, and nothing pending of it. */
static void end_turn(acpa *a, session *s, const char *stop)
{
    if (s->prompt_id == NULL)
        return;
    answer(a, s->prompt_id, json_pack("{s:s}", "stopReason", stop));
    /* ACP: a turn's updates come before its answer; what its calls still
     * bring once a cancelled turn is answered is not sent (a session/load
     * shows it) */
    for (size_t i = 0; strcmp(stop, "cancelled") == 0 && i < s->ncalls; i++)
        s->calls[i].closed = true;
    json_decref(s->prompt_id);
    json_decref(s->echo);
    s->prompt_id = s->echo = NULL;
    s->armed = s->heard = false;
}

/* ---- events -------------------------------------------------------------------------------- */

static const char *str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static bool is(const char *a, const char *b)
{
    return a != NULL && strcmp(a, b) == 0;
}

static bool same(json_t *a, json_t *b)
{
    return a == b || json_equal(a, b); /* both absent, or equal */
}

/* The prompt's content as the conversation stored it: the same blocks of
 * the same types with the same text or image URLs (a server may add keys
 * of its own, such as cache_prompt). */
static bool same_content(json_t *got, json_t *sent)
{
    if (json_equal(got, sent))
        return true;
    if (!json_is_array(got) || json_array_size(got) != json_array_size(sent))
        return false;
    size_t i;
    json_t *g;
    json_array_foreach(got, i, g)
    {
        json_t *w = json_array_get(sent, i);
        const char *type = str(w, "type");
        if (!is(str(g, "type"), type) ||
            !same(json_object_get(g, "text"), json_object_get(w, "text")) ||
            !same(json_object_get(g, "image_urls"), json_object_get(w, "image_urls")))
            return false;
    }
    return true;
}

/* Is u an update of a call of a cancelled turn (call.closed)? */
static bool of_closed_call(const session *s, json_t *u)
{
    const char *tc = str(u, "toolCallId");
    for (size_t i = 0; tc != NULL && i < s->ncalls; i++)
        if (s->calls[i].closed && strcmp(s->calls[i].id, tc) == 0)
            return true;
    return false;
}

/* Pending tool calls, for a permission's toolCall; out: the event's
 * updates (a tool_call's title). */
static void track_calls(session *s, json_t *e, json_t *out)
{
    const char *kind = str(e, "kind"), *tc = str(e, "tool_call_id");
    if (tc == NULL)
        return;
    if (is(kind, "ActionEvent")) {
        if (s->ncalls == ACPA_CALLS_MAX)
            return;
        const char *title = str(e, "tool_name");
        size_t i;
        json_t *u;
        json_array_foreach(out, i, u)
        {
            if (is(str(u, "sessionUpdate"), "tool_call") && str(u, "title") != NULL) {
                title = str(u, "title");
                break;
            }
        }
        call *c = &s->calls[s->ncalls];
        c->id = strdup(tc);
        c->title = strdup(title != NULL ? title : "unknown");
        if (c->id == NULL || c->title == NULL) {
            free(c->id);
            free(c->title);
            return;
        }
        s->ncalls++;
        return;
    }
    for (size_t i = 0; i < s->ncalls; i++)
        if (strcmp(s->calls[i].id, tc) == 0) {
            free(s->calls[i].id);
            free(s->calls[i].title);
            s->calls[i] = s->calls[--s->ncalls];
            s->calls[s->ncalls] = (call){0};
            return;
        }
}

static void ask_permission(acpa *a, session *s)
{
    if (s->perm_id != 0 || s->ncalls == 0)
        return;
    call *c = &s->calls[s->ncalls - 1];
    s->perm_id = ++a->next_id;
    json_t *p =
        json_pack("{s:s, s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:s}, {s:s, s:s, s:s}]}", "sessionId",
                  s->cid, "toolCall", "toolCallId", c->id, "title", c->title, "status", "pending",
                  "options", "optionId", "allow", "name", "Allow", "kind", "allow_once", "optionId",
                  "reject", "name", "Reject", "kind", "reject_once");
    emit(a, rpc_request(s->perm_id, "session/request_permission", p));
}

void acpa_event(acpa *a, const char *cid, const char *json, size_t len)
{
    session *s = find(a, cid);
    json_error_t err;
    json_t *e = s != NULL ? rt_json_read(json, len, 0, &err) : NULL;
    if (e == NULL)
        return;
    json_t *out = json_array();
    const char *stop = NULL;
    if (out == NULL || acp_out_event(s->out, e, out, &stop) != 0) {
        json_decref(out);
        json_decref(e);
        return;
    }
    const char *kind = str(e, "kind");
    bool echo = false, said = is(kind, "MessageEvent") && is(str(e, "source"), "user");
    if (said && s->echo != NULL &&
        same_content(json_object_get(json_object_get(e, "llm_message"), "content"), s->echo)) {
        echo = true; /* the editor's own prompt: it shows it already */
        json_decref(s->echo);
        s->echo = NULL;
        s->armed = true;
    } else if (said && s->prompt_id != NULL) {
        s->heard = true;
    }
    /* A run arms the stop only after a user message came back: one
     * before it is the last turn's (the log orders the prompt's message
     * before its run), and its stop would end this turn at once. The
     * message may come back unrecognised (a server that rewrites content),
     * hence any user message. */
    bool status = is(kind, "ConversationStateUpdateEvent") && is(str(e, "key"), "execution_status");
    if (status && is(str(e, "value"), "running") && s->prompt_id != NULL && s->heard)
        s->armed = true;
    size_t i;
    json_t *u;
    if (!echo || s->load_id != NULL)
        json_array_foreach(out, i, u)
        {
            if (s->load_id != NULL || !of_closed_call(s, u))
                update(a, s, u);
        }
    track_calls(s, e, out);
    if (status && is(str(e, "value"), "waiting_for_confirmation") && s->load_id == NULL)
        ask_permission(a, s);
    if (stop != NULL && s->armed)
        end_turn(a, s, stop);
    json_decref(out); /* before e: the updates may hold its values */
    json_decref(e);
}

void acpa_synced(acpa *a, const char *cid)
{
    session *s = find(a, cid);
    if (s == NULL || s->load_id == NULL)
        return;
    answer(a, s->load_id, json_object());
    json_decref(s->load_id);
    s->load_id = NULL;
}

void acpa_ended(acpa *a, const char *cid, const char *why)
{
    session *s = find(a, cid);
    if (s == NULL)
        return;
    s->ended = true;
    fprintf(stderr, "parley acp: conversation %s: %s\n", cid, why);
    if (s->load_id != NULL) {
        fail(a, s->load_id, RPC_INTERNAL_ERROR, "cannot load the conversation %s: %s", cid, why);
        json_decref(s->load_id);
        s->load_id = NULL;
    }
    if (s->prompt_id != NULL) {
        fail(a, s->prompt_id, RPC_INTERNAL_ERROR, "lost the conversation %s: %s", cid, why);
        json_decref(s->prompt_id);
        s->prompt_id = NULL;
    }
}

/* ---- the editor's requests ------------------------------------------------------------------ */

static void initialize(acpa *a, json_t *id, json_t *params)
{
    if (!json_is_integer(json_object_get(params, "protocolVersion"))) {
        fail(a, id, RPC_INVALID_PARAMS, "Invalid params: protocolVersion must be a number");
        return;
    }
    /* version 1 whatever was asked: the client decides if it can speak it */
    answer(a, id,
           json_pack("{s:i, s:{s:b, s:{s:b, s:b, s:b}, s:{s:b, s:b}}, s:[], s:{s:s, s:s, s:s}}",
                     "protocolVersion", 1, "agentCapabilities", "loadSession", 1,
                     "promptCapabilities", "image", 1, "audio", 0, "embeddedContext", 1,
                     "mcpCapabilities", "http", 0, "sse", 0, "authMethods", "agentInfo", "name",
                     "parley", "title", "parley", "version", PARLEY_VERSION));
}

static const char *session_param(acpa *a, json_t *id, json_t *params)
{
    const char *sid = str(params, "sessionId");
    if (sid == NULL && id != NULL)
        fail(a, id, RPC_INVALID_PARAMS, "Invalid params: sessionId must be a string");
    return sid;
}

static void session_new(acpa *a, json_t *id, json_t *params)
{
    json_t *cwd = json_object_get(params, "cwd");
    json_t *mcp = json_object_get(params, "mcpServers");
    if (!json_is_string(cwd) || (mcp != NULL && !json_is_array(mcp))) {
        fail(a, id, RPC_INVALID_PARAMS,
             "Invalid params: cwd must be a string and mcpServers a list");
        return;
    }
    char cid[64], why[400] = "";
    int e = a->b.create(a->b.ud, json_string_value(cwd), cid, why, sizeof(why));
    if (e != 0) {
        fail(a, id, RPC_INTERNAL_ERROR, "cannot create a conversation: %s", why);
        return;
    }
    session *s = add(a, cid);
    if (s == NULL) {
        fail(a, id, RPC_INTERNAL_ERROR, "out of memory");
        return;
    }
    /* answered first: the events that follow are of a session it knows */
    answer(a, id, json_pack("{s:s}", "sessionId", cid));
    if ((e = a->b.attach(a->b.ud, cid, why, sizeof(why))) != 0)
        acpa_ended(a, cid, why);
}

static void session_load(acpa *a, json_t *id, json_t *params)
{
    const char *sid = session_param(a, id, params);
    if (sid == NULL)
        return;
    if (!json_is_string(json_object_get(params, "cwd"))) {
        fail(a, id, RPC_INVALID_PARAMS, "Invalid params: cwd must be a string");
        return;
    }
    session *s = find(a, sid);
    if (s != NULL && !s->ended) { /* open here already: what it had is the editor's */
        answer(a, id, json_object());
        return;
    }
    if (strlen(sid) == 0 || strlen(sid) >= sizeof(s->cid) ||
        strspn(sid, "0123456789abcdefABCDEF-") != strlen(sid)) {
        fail(a, id, RPC_RESOURCE_NOT_FOUND, "no conversation %.80s: not a conversation id", sid);
        return;
    }
    char why[400] = "";
    if (s != NULL) { /* ended: start afresh */
        size_t k = 0;
        while (a->s[k] != s)
            k++;
        a->s[k] = a->s[--a->n];
        session_free(s);
    }
    if ((s = add(a, sid)) == NULL) {
        fail(a, id, RPC_INTERNAL_ERROR, "out of memory");
        return;
    }
    s->load_id = json_incref(id);
    int e = a->b.attach(a->b.ud, sid, why, sizeof(why));
    if (e == 0)
        return;
    json_decref(s->load_id);
    s->load_id = NULL;
    a->s[--a->n] = NULL;
    session_free(s);
    if (e == -ENOENT)
        fail(a, id, RPC_RESOURCE_NOT_FOUND, "no conversation %s on this parley: %s", sid, why);
    else
        fail(a, id, RPC_INTERNAL_ERROR, "cannot load the conversation %s: %s", sid, why);
}

/* An image as OpenHands carries one (ImageContent): a data: URL of its
 * bytes (base64), or its uri when it comes without them. */
static json_t *image_of(const char *data, const char *mime, const char *uri)
{
    size_t n = strlen(mime) + strlen(data) + 16;
    char *url = malloc(n);
    if (url == NULL)
        return NULL;
    if (data[0] != '\0' || uri == NULL)
        snprintf(url, n, "data:%s;base64,%s", mime, data);
    else
        snprintf(url, n, "%s", uri);
    json_t *c = json_pack("{s:s, s:[s]}", "type", "image", "image_urls", url);
    free(url);
    return c;
}

/* One ACP ContentBlock as OpenHands content, or NULL with why. */
static json_t *content_of(json_t *b, const char **why)
{
    const char *type = str(b, "type");
    if (is(type, "text") && str(b, "text") != NULL)
        return json_pack("{s:s, s:O}", "type", "text", "text", json_object_get(b, "text"));
    if (is(type, "image")) {
        const char *data = str(b, "data"), *mime = str(b, "mimeType");
        if (data == NULL || mime == NULL) {
            *why = "an image needs data and mimeType";
            return NULL;
        }
        return image_of(data, mime, str(b, "uri"));
    }
    if (is(type, "resource_link") && str(b, "uri") != NULL)
        return json_pack("{s:s, s:s++}", "type", "text", "text", "@", str(b, "uri"), "");
    if (is(type, "resource")) {
        json_t *r = json_object_get(b, "resource");
        const char *uri = str(r, "uri"), *text = str(r, "text");
        if (uri == NULL) {
            *why = "a resource needs a uri";
            return NULL;
        }
        const char *blob = str(r, "blob"), *mime = str(r, "mimeType");
        if (text == NULL && blob != NULL && mime != NULL && strncmp(mime, "image/", 6) == 0)
            return image_of(blob, mime, NULL);
        if (text == NULL) /* another blob: named, not inlined (the agent may read it) */
            return json_pack("{s:s, s:s++}", "type", "text", "text", "@", uri, "");
        return json_pack("{s:s, s:s+++++}", "type", "text", "text", "<context ref=\"", uri, "\">\n",
                         text, "\n</context>", "");
    }
    *why = is(type, "audio") ? "audio prompts are not supported (promptCapabilities.audio)"
                             : "a content block must be text, image, resource_link or resource";
    return NULL;
}

static void session_prompt(acpa *a, json_t *id, json_t *params)
{
    const char *sid = session_param(a, id, params);
    if (sid == NULL)
        return;
    json_t *prompt = json_object_get(params, "prompt");
    session *s = find(a, sid);
    if (!json_is_array(prompt) || json_array_size(prompt) == 0) {
        fail(a, id, RPC_INVALID_PARAMS, "Invalid params: prompt must be a non-empty list");
        return;
    }
    if (s == NULL || s->ended) {
        fail(a, id, RPC_RESOURCE_NOT_FOUND,
             "no session %.80s here: session/new or session/load it first", sid);
        return;
    }
    if (s->prompt_id != NULL || s->load_id != NULL) {
        fail(a, id, RPC_INVALID_REQUEST, "session %s is busy: one prompt turn at a time", sid);
        return;
    }
    json_t *content = json_array(), *b;
    size_t i;
    json_array_foreach(prompt, i, b)
    {
        const char *why = "out of memory";
        json_t *c = content_of(b, &why);
        if (c == NULL) {
            json_decref(content);
            fail(a, id, RPC_INVALID_PARAMS, "Invalid params: prompt[%zu]: %s", i, why);
            return;
        }
        json_array_append_new(content, c);
    }
    s->prompt_id = json_incref(id);
    s->echo = content;
    s->armed = s->heard = false;
    char why[400] = "";
    if (a->b.post(a->b.ud, sid, content, why, sizeof(why)) != 0) {
        json_decref(s->prompt_id);
        json_decref(s->echo);
        s->prompt_id = s->echo = NULL;
        fail(a, id, RPC_INTERNAL_ERROR, "cannot post the prompt: %s", why);
    }
}

static void session_cancel(acpa *a, json_t *params)
{
    session *s = find(a, str(params, "sessionId"));
    if (s == NULL || s->prompt_id == NULL)
        return;
    char why[400] = "";
    if (a->b.pause(a->b.ud, s->cid, why, sizeof(why)) != 0) {
        /* nothing runs to pause (not started, or over): the turn ends here */
        fprintf(stderr, "parley acp: pause %s: %s\n", s->cid, why);
        end_turn(a, s, "cancelled");
    }
}

/* The editor's answer to session/request_permission. */
static void permission(acpa *a, rpc_msg *m)
{
    if (!json_is_integer(m->id))
        return;
    session *s = NULL;
    for (size_t i = 0; i < a->n && s == NULL; i++)
        if (a->s[i]->perm_id == json_integer_value(m->id))
            s = a->s[i];
    if (s == NULL)
        return;
    s->perm_id = 0;
    json_t *o = json_object_get(m->result, "outcome");
    bool yes = m->type == RPC_RESULT && is(str(o, "outcome"), "selected") &&
               is(str(o, "optionId"), "allow");
    char why[400] = "";
    if (a->b.confirm(a->b.ud, s->cid, yes, "The user rejected it in the editor.", why,
                     sizeof(why)) != 0)
        fprintf(stderr, "parley acp: confirm %s: %s\n", s->cid, why);
}

void acpa_line(acpa *a, const char *line, size_t len)
{
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    if (len == 0)
        return; /* blank lines are skipped, as the SDKs do */
    rpc_msg m;
    rpc_parse(line, len, &m);
    json_t *id = m.type == RPC_REQUEST ? m.id : NULL;
    switch (m.type) {
    case RPC_INVALID:
        fail(a, NULL, m.root == NULL ? RPC_PARSE_ERROR : RPC_INVALID_REQUEST, "%s", m.why);
        break;
    case RPC_RESULT:
    case RPC_ERROR:
        permission(a, &m);
        break;
    case RPC_NOTIFY:
    case RPC_REQUEST: {
        const char *meth = m.method;
        json_t *params = m.params != NULL ? m.params : json_object();
        if (m.params == NULL)
            json_object_set_new(m.root, "params", params); /* owned by root */
        if (!json_is_object(params)) {
            if (id != NULL)
                fail(a, id, RPC_INVALID_PARAMS, "Invalid params: params must be an object");
        } else if (is(meth, "session/cancel")) {
            session_cancel(a, params);
        } else if (id == NULL) {
            ; /* other notifications: nothing to do */
        } else if (is(meth, "initialize")) {
            initialize(a, id, params);
        } else if (is(meth, "authenticate")) {
            answer(a, id, json_object());
        } else if (is(meth, "session/new")) {
            session_new(a, id, params);
        } else if (is(meth, "session/load")) {
            session_load(a, id, params);
        } else if (is(meth, "session/prompt")) {
            session_prompt(a, id, params);
        } else {
            fail(a, id, RPC_METHOD_NOT_FOUND, "Method not found: %s", meth);
        }
        break;
    }
    }
    rpc_clear(&m);
}

void acpa_eof(acpa *a)
{
    for (size_t i = 0; i < a->n; i++) {
        session *s = a->s[i];
        if (s->prompt_id == NULL)
            continue;
        char why[400] = "";
        if (a->b.pause(a->b.ud, s->cid, why, sizeof(why)) != 0)
            fprintf(stderr, "parley acp: pause %s: %s\n", s->cid, why);
        else
            fprintf(stderr, "parley acp: conversation %s paused: the editor left\n", s->cid);
        end_turn(a, s, "cancelled");
    }
}

void acpa_line_too_long(acpa *a)
{
    fail(a, NULL, RPC_INVALID_REQUEST, "a message longer than %u bytes: dropped", ACPA_LINE_MAX);
}

acpa *acpa_new(const acpa_backend *b, acpa_write_fn write, void *ctx)
{
    acpa *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->b = *b;
    a->write = write;
    a->ctx = ctx;
    return a;
}

void acpa_free(acpa *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->n; i++)
        session_free(a->s[i]);
    free(a->s);
    free(a);
}

size_t acpa_sessions(const acpa *a)
{
    return a->n;
}
