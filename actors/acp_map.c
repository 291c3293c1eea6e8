/*
 * acp_map.c - ACP session updates to OpenHands events, user messages to
 * ACP prompts (acp_map.h).
 */
#include "acp_map.h"
#include "acp_map_impl.h"

#include "runtime/uuid.h"
#include "runtime/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct call {
    char *id;        /* toolCallId */
    char action[37]; /* its ActionEvent's id */
    json_t *st;      /* what the agent said of it so far: title, kind, status, ... */
    bool closed;
} call;

struct acp_turn {
    char *resp;
    acp_limits l;
    acp_id_fn ids;
    void *ctx;
    acp_text msg, thought;
    bool msg_open;
    char *msg_id; /* the open message's messageId, if it had one */
    call *calls;
    size_t ncalls, cap, open;
    size_t updates;
    bool started;
};

/* ---- small things ---------------------------------------------------------- */

int acp__text_add(acp_text *t, const char *s, size_t n, size_t max)
{
    /* no wrap, whatever n and max are: the text and its NUL fit */
    if (n > max || t->len > max - n || t->len + n == SIZE_MAX)
        return -E2BIG;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *ns = realloc(t->s, cap);
        if (ns == NULL)
            return -ENOMEM;
        t->s = ns;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
    return 0;
}

void acp__text_put(acp_text *t, const char *s, size_t n, size_t max)
{
    if (t->len >= max)
        return;
    if (n > max - t->len) {
        n = max - t->len;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--; /* s[n] continues a character: cut before that character */
    }
    acp__text_add(t, s, n, max);
}

void acp__text_reset(acp_text *t)
{
    t->len = 0;
    if (t->s != NULL)
        t->s[0] = '\0';
}

static void say(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void say(char *why, size_t len, const char *fmt, ...)
{
    if (why == NULL || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

static void random_id(void *ctx, char out[37])
{
    (void)ctx;
    rt_uuid u;
    if (rt_uuid_v4(&u) != 0)
        memset(&u, 0, sizeof(u));
    rt_uuid_dashed(&u, out);
}

const char *acp__str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* A rough upper bound of v's JSON size, stopping once past max. */
static size_t est_size(json_t *v, size_t max)
{
    size_t n = 0;
    if (json_is_string(v))
        return json_string_length(v) * 2 + 2; /* escapes, at worst about doubled */
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            n += est_size(x, max) + 1;
            if (n > max)
                break;
        }
        return n + 2;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
        {
            n += strlen(k) * 2 + 4 + est_size(x, max);
            if (n > max)
                break;
        }
        return n + 2;
    }
    return 24;
}

/* v (a new reference), or a note of its size if it is too big. */
json_t *acp__bounded(json_t *v, size_t max)
{
    if (v == NULL)
        return NULL;
    size_t n = est_size(v, max);
    if (n <= max)
        return json_incref(v);
    return json_pack("{s:b, s:s}", "truncated", 1, "note",
                     "the agent's value was larger than parley keeps");
}

void acp__set_bounded(json_t *o, const char *k, json_t *v, size_t max)
{
    json_t *b = acp__bounded(v, max);
    if (b != NULL && !json_is_null(b))
        json_object_set_new(o, k, b);
    else
        json_decref(b);
}

/* ---- rendering the agent's content as text ------------------------------- */

static void block_text(acp_text *t, json_t *b, size_t max)
{
    const char *type = acp__str(b, "type");
    char tmp[600];
    const char *s = NULL;
    size_t n = 0;
    if (type != NULL && strcmp(type, "text") == 0 && json_is_string(json_object_get(b, "text"))) {
        s = json_string_value(json_object_get(b, "text"));
        n = json_string_length(json_object_get(b, "text"));
    } else if (type != NULL && strcmp(type, "resource_link") == 0) {
        snprintf(tmp, sizeof(tmp), "[%.200s](%.300s)",
                 acp__str(b, "name") ? acp__str(b, "name") : "",
                 acp__str(b, "uri") ? acp__str(b, "uri") : "");
        s = tmp;
    } else if (type != NULL && strcmp(type, "resource") == 0) {
        json_t *r = json_object_get(b, "resource");
        if (json_is_string(json_object_get(r, "text"))) {
            s = json_string_value(json_object_get(r, "text"));
            n = json_string_length(json_object_get(r, "text"));
        } else {
            snprintf(tmp, sizeof(tmp), "[resource %.300s]",
                     acp__str(r, "uri") ? acp__str(r, "uri") : "");
            s = tmp;
        }
    } else {
        snprintf(tmp, sizeof(tmp), "[%.40s]", type != NULL ? type : "content");
        s = tmp;
    }
    if (s == tmp)
        n = strlen(tmp);
    acp__text_put(t, s, n, max);
}

/* ToolCallContent[] as one text. */
static void render_content(acp_text *t, json_t *content, size_t max)
{
    size_t i;
    json_t *c;
    json_array_foreach(content, i, c)
    {
        if (t->len > 0)
            acp__text_add(t, "\n", 1, max);
        const char *type = acp__str(c, "type");
        char tmp[512];
        if (type != NULL && strcmp(type, "content") == 0) {
            block_text(t, json_object_get(c, "content"), max);
            continue;
        }
        if (type != NULL && strcmp(type, "diff") == 0)
            snprintf(tmp, sizeof(tmp), "%s %.400s",
                     json_is_string(json_object_get(c, "oldText")) ? "edited" : "created",
                     acp__str(c, "path") ? acp__str(c, "path") : "?");
        else if (type != NULL && strcmp(type, "terminal") == 0)
            snprintf(tmp, sizeof(tmp), "terminal %.200s",
                     acp__str(c, "terminalId") ? acp__str(c, "terminalId") : "?");
        else
            snprintf(tmp, sizeof(tmp), "[%.40s]", type != NULL ? type : "content");
        acp__text_add(t, tmp, strlen(tmp), max);
    }
}

/* ---- the events ------------------------------------------------------------ */

static void new_id(acp_turn *t, char out[37])
{
    t->ids(t->ctx, out);
}

static json_t *text_part(const char *s, size_t n)
{
    return json_pack("{s:s, s:s%}", "type", "text", "text", s != NULL ? s : "", s != NULL ? n : 0);
}

/* The gathered thought as an ActionEvent's `thought`, and forget it. */
static json_t *take_thought(acp_turn *t)
{
    json_t *a = json_array();
    if (t->thought.len > 0)
        json_array_append_new(a, text_part(t->thought.s, t->thought.len));
    acp__text_reset(&t->thought);
    return a;
}

/* The open message (and the thought gathered), as a MessageEvent. With
 * `always`, a thought alone makes one too. */
static void flush_message(acp_turn *t, json_t *out, bool always)
{
    if (!t->msg_open && !(always && t->thought.len > 0))
        return;
    char id[37];
    new_id(t, id);
    json_t *content = json_array();
    if (t->msg.len > 0)
        json_array_append_new(content, text_part(t->msg.s, t->msg.len));
    json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content", content);
    if (t->thought.len > 0)
        json_object_set_new(m, "reasoning_content", json_stringn(t->thought.s, t->thought.len));
    json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:o, s:s}", "kind", "MessageEvent", "id",
                                         id, "source", "agent", "llm_message", m, "llm_response_id",
                                         t->resp));
    acp__text_reset(&t->msg);
    acp__text_reset(&t->thought);
    t->msg_open = false;
    free(t->msg_id);
    t->msg_id = NULL;
}

static const char *tool_name_of(json_t *st)
{
    const char *k = acp__str(st, "kind");
    return k != NULL && k[0] != '\0' ? k : "other";
}

static void action_event(acp_turn *t, call *c, json_t *out)
{
    json_t *st = c->st, *raw = json_object_get(st, "rawInput");
    const char *title = acp__str(st, "title") ? acp__str(st, "title") : "";
    json_t *action = json_pack("{s:s, s:s, s:s}", "kind", "ACPToolCallAction", "title", title,
                               "tool_kind", tool_name_of(st));
    acp__set_bounded(action, "raw_input", raw, t->l.value_max);
    acp__set_bounded(action, "locations", json_object_get(st, "locations"), t->l.value_max);
    acp__set_bounded(action, "content", json_object_get(st, "content"), t->l.value_max);
    json_t *shown = json_object_get(action, "raw_input");
    char *args = shown != NULL ? rt_json_dumps(shown, NULL) : NULL;
    json_t *tc = json_pack("{s:s, s:s, s:s, s:s}", "id", c->id, "name", tool_name_of(st),
                           "arguments", args != NULL ? args : "{}", "origin", "completion");
    free(args);
    json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:s, s:o, s:s, s:s}",
                                         "kind", "ActionEvent", "id", c->action, "source", "agent",
                                         "thought", take_thought(t), "action", action, "tool_name",
                                         tool_name_of(st), "tool_call_id", c->id, "tool_call", tc,
                                         "llm_response_id", t->resp, "summary", title));
}

/* The call's result: completed, failed, or closed by `why` (turn over). */
static void result_event(acp_turn *t, const char *call_id, const char *action_id, json_t *st,
                         const char *why, json_t *out)
{
    char id[37];
    new_id(t, id);
    const char *status = acp__str(st, "status");
    acp_text r = {0};
    render_content(&r, json_object_get(st, "content"), t->l.text_max);
    if (why != NULL || (status != NULL && strcmp(status, "failed") == 0)) {
        const char *err = why != NULL ? why : r.len > 0 ? r.s : "the tool call failed";
        json_array_append_new(out,
                              json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "kind", "AgentErrorEvent",
                                        "id", id, "source", "agent", "tool_name", tool_name_of(st),
                                        "tool_call_id", call_id, "error", err));
        free(r.s);
        return;
    }
    json_t *obs = json_pack("{s:s, s:s, s:s, s:[o]}", "kind", "ACPToolCallObservation", "title",
                            acp__str(st, "title") ? acp__str(st, "title") : "", "status",
                            "completed", "content", text_part(r.s, r.len));
    acp__set_bounded(obs, "acp_content", json_object_get(st, "content"), t->l.value_max);
    acp__set_bounded(obs, "raw_output", json_object_get(st, "rawOutput"), t->l.value_max);
    json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o}", "kind",
                                         "ObservationEvent", "id", id, "source", "environment",
                                         "tool_name", tool_name_of(st), "tool_call_id", call_id,
                                         "action_id", action_id, "observation", obs));
    free(r.s);
}

static bool terminal(json_t *st)
{
    const char *s = acp__str(st, "status");
    return s != NULL && (strcmp(s, "completed") == 0 || strcmp(s, "failed") == 0);
}

static call *find_call(acp_turn *t, const char *id)
{
    for (size_t i = 0; i < t->ncalls; i++)
        if (strcmp(t->calls[i].id, id) == 0)
            return &t->calls[i];
    return NULL;
}

/* The fields of an update that say something of the call. */
static void merge(json_t *st, json_t *u)
{
    static const char *const keys[] = {"title",     "kind",     "status",   "content",
                                       "locations", "rawInput", "rawOutput"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        json_t *v = json_object_get(u, keys[i]);
        if (v != NULL && !json_is_null(v))
            json_object_set(st, keys[i], v);
    }
}

static int on_tool_call(acp_turn *t, json_t *u, json_t *out, char *why, size_t wl)
{
    const char *id = acp__str(u, "toolCallId");
    if (id == NULL || !json_is_string(json_object_get(u, "title"))) {
        say(why, wl, "a tool_call needs a string toolCallId and title");
        return -EINVAL;
    }
    flush_message(t, out, false);
    if (find_call(t, id) != NULL) { /* announced again: the gate refuses the second */
        call dup = {.id = (char *)id, .st = json_object()};
        merge(dup.st, u);
        new_id(t, dup.action);
        action_event(t, &dup, out);
        json_decref(dup.st);
        return 0;
    }
    if (t->ncalls == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        call *nc = realloc(t->calls, cap * sizeof(*nc));
        if (nc == NULL)
            return -ENOMEM;
        t->calls = nc;
        t->cap = cap;
    }
    call *c = &t->calls[t->ncalls];
    memset(c, 0, sizeof(*c));
    if ((c->id = strdup(id)) == NULL || (c->st = json_object()) == NULL) {
        free(c->id);
        return -ENOMEM;
    }
    t->ncalls++;
    t->open++;
    new_id(t, c->action);
    merge(c->st, u);
    action_event(t, c, out);
    if (terminal(c->st)) { /* done at once: its result comes with it */
        result_event(t, c->id, c->action, c->st, NULL, out);
        c->closed = true;
        t->open--;
    }
    return 0;
}

static int on_tool_call_update(acp_turn *t, json_t *u, json_t *out, char *why, size_t wl)
{
    const char *id = acp__str(u, "toolCallId");
    if (id == NULL) {
        say(why, wl, "a tool_call_update needs a string toolCallId");
        return -EINVAL;
    }
    call *c = find_call(t, id);
    if (c == NULL) {
        if (!terminal(u))
            return 0; /* progress of a call never announced: nothing to say */
        flush_message(t, out, false);
        result_event(t, id, "", u, NULL, out); /* the gate: unmatched_tool_result */
        return 0;
    }
    if (c->closed)
        return 0; /* one result per call; later frames change nothing */
    merge(c->st, u);
    if (terminal(c->st)) {
        flush_message(t, out, false);
        result_event(t, c->id, c->action, c->st, NULL, out);
        c->closed = true;
        t->open--;
    }
    return 0;
}

static void on_plan(acp_turn *t, json_t *entries, json_t *out)
{
    flush_message(t, out, false);
    char aid[37], oid[37];
    new_id(t, aid);
    new_id(t, oid);
    acp_text r = {0};
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e)
    {
        const char *st = acp__str(e, "status"), *c = acp__str(e, "content");
        const char *mark = st != NULL && strcmp(st, "completed") == 0     ? "[x] "
                           : st != NULL && strcmp(st, "in_progress") == 0 ? "[~] "
                                                                          : "[ ] ";
        if (r.len > 0)
            acp__text_add(&r, "\n", 1, t->l.text_max);
        acp__text_add(&r, mark, 4, t->l.text_max);
        if (c != NULL)
            acp__text_add(&r, c, strlen(c), t->l.text_max);
    }
    json_t *kept = acp__bounded(entries, t->l.value_max);
    json_t *tc = json_pack("{s:s, s:s, s:s, s:s}", "id", aid, "name", "plan", "arguments", "{}",
                           "origin", "completion");
    json_array_append_new(
        out, json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:O}, s:s, s:s, s:o, s:s}", "kind",
                       "ActionEvent", "id", aid, "source", "agent", "thought", take_thought(t),
                       "action", "kind", "ACPPlanAction", "entries", kept, "tool_name", "plan",
                       "tool_call_id", aid, "tool_call", tc, "llm_response_id", t->resp));
    json_array_append_new(
        out, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:{s:s, s:o, s:[o]}}", "kind",
                       "ObservationEvent", "id", oid, "source", "environment", "tool_name", "plan",
                       "tool_call_id", aid, "action_id", aid, "observation", "kind",
                       "ACPPlanObservation", "entries", kept, "content", text_part(r.s, r.len)));
    free(r.s);
}

/* A chunk's text into `into`: -E2BIG past the bound. */
static int add_chunk(acp_turn *t, acp_text *into, json_t *u, const char *what, char *why, size_t wl)
{
    json_t *b = json_object_get(u, "content");
    if (!json_is_object(b)) {
        say(why, wl, "an %s needs a content block", what);
        return -EINVAL;
    }
    acp_text scratch = {0};
    block_text(&scratch, b, SIZE_MAX);
    int r = acp__text_add(into, scratch.s != NULL ? scratch.s : "", scratch.len, t->l.text_max);
    free(scratch.s);
    if (r == -E2BIG)
        say(why, wl, "the agent's %s grew past %zu bytes", what, t->l.text_max);
    return r;
}

int acp_turn_update(acp_turn *t, json_t *u, json_t *out, char *why, size_t wl)
{
    const char *kind = acp__str(u, "sessionUpdate");
    if (!json_is_object(u) || kind == NULL) {
        say(why, wl, "a session/update needs an update object with a sessionUpdate");
        return -EINVAL;
    }
    if (++t->updates > t->l.updates_max) {
        say(why, wl, "more than %zu session updates in one turn", t->l.updates_max);
        return -E2BIG;
    }
    json_t *made = json_array();
    int r = 0;
    if (strcmp(kind, "agent_message_chunk") == 0) {
        const char *mid = acp__str(u, "messageId");
        if (t->msg_open && mid != NULL && (t->msg_id == NULL || strcmp(mid, t->msg_id) != 0))
            flush_message(t, made, false); /* a new message */
        r = add_chunk(t, &t->msg, u, "agent_message_chunk", why, wl);
        if (r == 0 && !t->msg_open) {
            t->msg_open = true;
            t->msg_id = mid != NULL ? strdup(mid) : NULL;
        }
    } else if (strcmp(kind, "agent_thought_chunk") == 0) {
        r = add_chunk(t, &t->thought, u, "agent_thought_chunk", why, wl);
    } else if (strcmp(kind, "tool_call") == 0) {
        r = on_tool_call(t, u, made, why, wl);
    } else if (strcmp(kind, "tool_call_update") == 0) {
        r = on_tool_call_update(t, u, made, why, wl);
    } else if (strcmp(kind, "plan") == 0) {
        json_t *entries = json_object_get(u, "entries");
        if (!json_is_array(entries)) {
            say(why, wl, "a plan needs an entries array");
            r = -EINVAL;
        } else {
            on_plan(t, entries, made);
        }
    } /* the rest (user chunks, commands, modes, usage, session info): nothing */
    if (r == 0) {
        json_array_extend(out, made);
        t->started = t->started || json_array_size(made) > 0 || t->msg_open || t->thought.len > 0;
    }
    json_decref(made);
    return r;
}

void acp_turn_end(acp_turn *t, const char *why, json_t *out)
{
    flush_message(t, out, true);
    for (size_t i = 0; i < t->ncalls; i++) {
        call *c = &t->calls[i];
        if (!c->closed) {
            result_event(t, c->id, c->action, c->st, why != NULL ? why : "the turn ended", out);
            c->closed = true;
            t->open--;
        }
    }
}

void acp_turn_close_call(acp_turn *t, const char *call_id)
{
    call *c = find_call(t, call_id);
    if (c != NULL && !c->closed) {
        c->closed = true;
        t->open--;
    }
}

size_t acp_turn_open_calls(const acp_turn *t)
{
    return t->open;
}

bool acp_turn_started(const acp_turn *t)
{
    return t->started;
}

acp_limits acp__limits(const acp_limits *l)
{
    acp_limits d = {.text_max = 1u << 20, .value_max = 1u << 20, .updates_max = 100000};
    if (l != NULL && l->text_max)
        d.text_max = l->text_max;
    if (l != NULL && l->value_max)
        d.value_max = l->value_max;
    if (l != NULL && l->updates_max)
        d.updates_max = l->updates_max;
    return d;
}

acp_turn *acp_turn_new(const char *response_id, const acp_limits *l, acp_id_fn ids, void *ctx)
{
    acp_turn *t = calloc(1, sizeof(*t));
    if (t == NULL || (t->resp = strdup(response_id != NULL ? response_id : "")) == NULL) {
        free(t);
        return NULL;
    }
    t->l = acp__limits(l);
    t->ids = ids != NULL ? ids : random_id;
    t->ctx = ctx;
    return t;
}

void acp_turn_free(acp_turn *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->ncalls; i++) {
        free(t->calls[i].id);
        json_decref(t->calls[i].st);
    }
    free(t->calls);
    free(t->msg.s);
    free(t->thought.s);
    free(t->msg_id);
    free(t->resp);
    free(t);
}

/* ---- stop reasons, prompts, secrets ----------------------------------------------- */

/* Each stop reason, the status it leaves, and the error that says why. */
static const struct {
    const char *reason, *status, *why;
} stops[] = {
    {"end_turn", "finished", NULL},
    {"cancelled", NULL, NULL},
    {"refusal", "error", "the agent refused to go on (stop reason: refusal)"},
    {"max_tokens", "error", "the agent reached its token limit (stop reason: max_tokens)"},
    {"max_turn_requests", "error",
     "the agent reached its limit of requests in one turn (stop reason: max_turn_requests)"},
};
#define NSTOPS (sizeof(stops) / sizeof(stops[0]))

const char *acp__stop_reason_of_why(const char *why)
{
    for (size_t i = 0; why != NULL && i < NSTOPS; i++)
        if (stops[i].why != NULL && strcmp(why, stops[i].why) == 0)
            return stops[i].reason;
    return NULL;
}

const char *acp_stop_status(const char *stop_reason, const char **why)
{
    for (size_t i = 0; stop_reason != NULL && i < NSTOPS; i++)
        if (strcmp(stop_reason, stops[i].reason) == 0) {
            if (why != NULL)
                *why = stops[i].why;
            return stops[i].status;
        }
    if (why != NULL)
        *why = "the agent ended its turn with an unknown stop reason";
    return "error";
}

json_t *acp_prompt_of(json_t *e)
{
    const char *kind = acp__str(e, "kind"), *src = acp__str(e, "source");
    if (kind == NULL || strcmp(kind, "MessageEvent") != 0 || src == NULL ||
        (strcmp(src, "user") != 0 && strcmp(src, "environment") != 0))
        return NULL;
    json_t *m = json_object_get(e, "llm_message"), *content = json_object_get(m, "content");
    const char *role = acp__str(m, "role");
    if (role != NULL && strcmp(role, "user") != 0)
        return NULL;
    json_t *blocks = json_array();
    if (json_is_string(content))
        json_array_append_new(blocks, json_pack("{s:s, s:O}", "type", "text", "text", content));
    size_t i, j;
    json_t *c, *url;
    json_array_foreach(content, i, c)
    {
        const char *type = acp__str(c, "type");
        if (type == NULL || strcmp(type, "text") == 0) {
            if (json_is_string(json_object_get(c, "text")))
                json_array_append_new(blocks, json_pack("{s:s, s:O}", "type", "text", "text",
                                                        json_object_get(c, "text")));
        } else if (strcmp(type, "image") == 0) {
            json_array_foreach(json_object_get(c, "image_urls"), j, url)
            {
                if (json_is_string(url))
                    json_array_append_new(blocks,
                                          json_pack("{s:s, s:s, s:O}", "type", "resource_link",
                                                    "name", "image", "uri", url));
            }
        }
    }
    json_array_foreach(json_object_get(e, "extended_content"), i, c)
    {
        if (json_is_string(json_object_get(c, "text")))
            json_array_append_new(blocks, json_pack("{s:s, s:O}", "type", "text", "text",
                                                    json_object_get(c, "text")));
    }
    if (json_array_size(blocks) == 0)
        json_array_append_new(blocks, json_pack("{s:s, s:s}", "type", "text", "text", ""));
    return blocks;
}

static void mask_string(json_t *s, const char *const *secrets, size_t n)
{
    const char *v = json_string_value(s);
    size_t len = json_string_length(s);
    bool any = false;
    for (size_t k = 0; k < n && !any; k++)
        any = secrets[k] != NULL && secrets[k][0] != '\0' &&
              memmem(v, len, secrets[k], strlen(secrets[k])) != NULL;
    if (!any)
        return;
    acp_text out = {0};
    bool changed = false;
    size_t i = 0;
    while (i < len) {
        size_t hit = 0;
        for (size_t k = 0; k < n && hit == 0; k++) {
            size_t sl = secrets[k] != NULL ? strlen(secrets[k]) : 0;
            if (sl > 0 && sl <= len - i && memcmp(v + i, secrets[k], sl) == 0)
                hit = sl;
        }
        if (hit > 0) {
            acp__text_add(&out, ACP_SECRET_MASK, sizeof(ACP_SECRET_MASK) - 1, SIZE_MAX);
            i += hit;
            changed = true;
        } else {
            acp__text_add(&out, v + i, 1, SIZE_MAX);
            i++;
        }
    }
    if (changed)
        json_string_setn(s, out.s != NULL ? out.s : "", out.len);
    free(out.s);
}

void acp_mask(json_t *v, const char *const *secrets, size_t n)
{
    if (n == 0 || v == NULL)
        return;
    if (json_is_string(v)) {
        mask_string(v, secrets, n);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            acp_mask(x, secrets, n);
        }
    } else if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
        {
            acp_mask(x, secrets, n);
        }
    }
}
