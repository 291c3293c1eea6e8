/*
 * api_agent.c - the conversation routes about its agent (spec §2.3):
 * secrets, confirmation_policy, security_analyzer, agent_final_response,
 * generate_title, fork and navigate, answered as upstream answers them;
 * and those a hosted ACP agent cannot honour (ask_agent, condense, goal,
 * the LLM switches), answered 422 saying why, never 404.
 *
 * Secrets stay in memory (convs_set_secrets). A policy or an analyzer
 * changes the stored info and is then announced in the log as upstream
 * does, with a ConversationStateUpdateEvent of that key, which is how the
 * hosted agent's adapter learns of it. Reads scan the log in the thread
 * pool, from the end (the final response) or the start (the title).
 */
#include "api.h"

#include "actors/conversation.h"
#include "actors/event.h"
#include "runtime/json.h"
#include "runtime/text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TITLE_MAX = 200 };

static void reply_success(net_req *r)
{
    net_reply_json(r, 200, json_pack("{s:b}", "success", 1));
}

/* ---- secrets -------------------------------------------------------------------------- */

static void secrets_work(net_req *r, net_outcome *out)
{
    int e = convs_set_secrets(r->api->convs, &r->route.conv, out->arg);
    char id[37];
    rt_uuid_dashed(&r->route.conv, id);
    if (e == -ENOENT)
        net_fail(out, 404, "Conversation not found: %s", id);
    else if (e < 0)
        net_fail(out, 503, "cannot keep the secrets: %s", strerror(-e));
    else
        out->body = rt_json_buf(json_pack("{s:b}", "success", 1));
    if (e == 0 && out->body != NULL)
        out->status = 200;
}

static void secrets(net_req *r)
{
    json_t *b = net_req_json(r, "{\"secrets\": {NAME: value}}");
    if (b == NULL)
        return;
    char why[300];
    json_t *s = conv_secrets_parse(json_object_get(b, "secrets"), why, sizeof(why));
    json_decref(b);
    if (s == NULL) {
        net_reply_error(r, 422, "%s", why);
        return;
    }
    net_api_work(r, secrets_work, s, net_json_free);
}

/* ---- a setting: the stored info, then the log ---------------------------------------- */

typedef struct setting {
    net_req *r;
    char key[40]; /* the info's member, and the state update's key */
    json_t *value;
} setting;

static void setting_free(setting *s)
{
    json_decref(s->value);
    free(s);
}

static void on_announced(void *ctx, rt_msg *m)
{
    setting *s = ctx;
    net_req *r = s->r;
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    setting_free(s);
    if (cr != NULL && (cr->v.outcome == PL_COMMITTED || cr->v.outcome == PL_DUPLICATE))
        reply_success(r);
    else
        net_reply_actor(r, m);
}

static void on_stored(void *ctx, rt_msg *m)
{
    setting *s = ctx;
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    if (cr == NULL || cr->v.outcome != PL_DONE) {
        net_req *r = s->r;
        setting_free(s);
        net_reply_actor(r, m);
        return;
    }
    json_t *e = json_pack("{s:s, s:s, s:s, s:O}", "kind", "ConversationStateUpdateEvent", "source",
                          "environment", "key", s->key, "value", s->value);
    rt_buf *b = rt_json_buf(e);
    net_req *q = s->r;
    if (b == NULL) {
        setting_free(s);
        net_reply_error(q, 500, "out of memory");
    } else if (net_conv_call(q, &q->route.conv, CONV_APPEND, 0, b, on_announced, s) < 0) {
        setting_free(s); /* answered */
    }
}

/* Store {key: value} (taken) in the info, then announce it in the log. */
static void set(net_req *r, const char *key, json_t *value)
{
    setting *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        net_reply_error(r, 503, "out of memory");
        json_decref(value);
        return;
    }
    *s = (setting){.r = r, .value = value};
    snprintf(s->key, sizeof(s->key), "%s", key);
    char now[32];
    ev_now_timestamp(now);
    rt_buf *b = rt_json_buf(json_pack("{s:O, s:s}", key, value, "updated_at", now));
    if (b == NULL) {
        setting_free(s);
        net_reply_error(r, 500, "out of memory");
    } else if (net_conv_call(r, &r->route.conv, CONV_SET_META, 0, b, on_stored, s) < 0) {
        setting_free(s); /* answered */
    }
}

static const char *policy_bad(json_t *p)
{
    const char *kind = json_string_value(json_object_get(p, "kind"));
    json_t *th = json_object_get(p, "threshold"), *cu = json_object_get(p, "confirm_unknown");
    if (!json_is_object(p) || kind == NULL)
        return "policy must be an object with a kind: AlwaysConfirm, NeverConfirm or "
               "ConfirmRisky";
    if (strcmp(kind, "AlwaysConfirm") != 0 && strcmp(kind, "NeverConfirm") != 0 &&
        strcmp(kind, "ConfirmRisky") != 0)
        return "policy kind must be AlwaysConfirm, NeverConfirm or ConfirmRisky";
    if (th != NULL && !json_is_null(th) &&
        !(json_is_string(th) && (strcmp(json_string_value(th), "LOW") == 0 ||
                                 strcmp(json_string_value(th), "MEDIUM") == 0 ||
                                 strcmp(json_string_value(th), "HIGH") == 0)))
        return "threshold must be LOW, MEDIUM or HIGH";
    if (cu != NULL && !json_is_boolean(cu))
        return "confirm_unknown must be true or false";
    return NULL;
}

static void confirmation_policy(net_req *r)
{
    json_t *b = net_req_json(r, "{\"policy\": {\"kind\": ...}}");
    if (b == NULL)
        return;
    json_t *p = json_object_get(b, "policy");
    const char *bad = policy_bad(p);
    json_t *v = bad == NULL ? json_incref(p) : NULL;
    json_decref(b);
    if (bad != NULL) {
        net_reply_error(r, 422, "%s", bad);
        return;
    }
    set(r, "confirmation_policy", v);
}

static void security_analyzer(net_req *r)
{
    json_t *b = net_req_json(r, "{\"security_analyzer\": {\"kind\": ...} or null}");
    if (b == NULL)
        return;
    json_t *a = json_object_get(b, "security_analyzer");
    bool ok = json_is_null(a) || (json_is_object(a) && json_is_string(json_object_get(a, "kind")));
    json_t *v = ok ? json_incref(a) : NULL;
    json_decref(b);
    if (!ok) {
        net_reply_error(r, 422, "security_analyzer must be an object with a kind, or null");
        return;
    }
    /* recorded as upstream records it; parley rates no risk itself, so
     * under ConfirmRisky every call is of unknown risk */
    set(r, "security_analyzer", v);
}

/* ---- reading the log ------------------------------------------------------------------- */

static bool is(json_t *e, const char *kind, const char *source)
{
    const char *k = json_string_value(json_object_get(e, "kind"));
    const char *s = json_string_value(json_object_get(e, "source"));
    return k != NULL && strcmp(k, kind) == 0 && s != NULL && strcmp(s, source) == 0;
}

/* A message's text parts, joined (a new string). */
static char *message_text(json_t *e)
{
    rt_text t = {0};
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(e, "llm_message"), "content"), i, c)
    {
        const char *s = json_string_value(json_object_get(c, "text"));
        if (s != NULL)
            rt_text_put(&t, s, strlen(s));
    }
    rt_text_putc(&t, '\0');
    if (t.failed) {
        free(t.p);
        return NULL;
    }
    return t.p;
}

/* As upstream: the last finish call's message, or the last agent
 * message's text, whichever comes last; "" if neither. */
static bool final_of(json_t *e, void *ctx)
{
    char **out = ctx;
    const char *tool = json_string_value(json_object_get(e, "tool_name"));
    if (is(e, "ActionEvent", "agent") && tool != NULL && strcmp(tool, "finish") == 0) {
        const char *m = json_string_value(json_object_get(json_object_get(e, "action"), "message"));
        *out = strdup(m != NULL ? m : "");
        return true;
    }
    if (is(e, "MessageEvent", "agent")) {
        *out = message_text(e);
        return true;
    }
    return false;
}

static void final_response(net_req *r, net_outcome *out)
{
    char *text = NULL;
    if (net_walk_events(r, out, true, final_of, &text) != 0)
        return;
    out->body = rt_json_buf(json_pack("{s:s}", "response", text != NULL ? text : ""));
    free(text);
    out->status = out->body != NULL ? 200 : 500;
}

static bool first_user(json_t *e, void *ctx)
{
    char **out = ctx;
    if (!is(e, "MessageEvent", "user"))
        return false;
    char *t = message_text(e);
    if (t != NULL && t[0] != '\0') {
        *out = t;
        return true;
    }
    free(t);
    return false;
}

/* Upstream's title without an LLM (an ACP agent's is never called): the
 * first user message, stripped, cut to max characters with "...". */
static void title_work(net_req *r, net_outcome *out)
{
    long max = (long)(intptr_t)out->arg;
    char *text = NULL;
    if (net_walk_events(r, out, false, first_user, &text) != 0)
        return;
    if (text == NULL) {
        net_fail(out, 409, "the conversation has no user message to make a title of");
        return;
    }
    char *s = text, *end = s + strlen(s);
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r'))
        end--;
    *end = '\0';
    long chars = 0, keep = -1;
    for (char *p = s; *p != '\0'; p++)
        if (((unsigned char)*p & 0xC0) != 0x80) {
            if (chars == max - 3)
                keep = p - s;
            chars++;
        }
    json_t *t;
    if (chars > max && keep >= 0) {
        s[keep] = '\0';
        t = json_sprintf("%s...", s);
    } else {
        t = json_string(s);
    }
    out->body = rt_json_buf(json_pack("{s:o?}", "title", t));
    free(text);
    out->status = out->body != NULL ? 200 : 500;
}

static void generate_title(net_req *r)
{
    long max = 50;
    if (r->http->body_len > 0) {
        json_t *b = net_req_json(r, "{\"max_length\"?: integer}");
        if (b == NULL)
            return;
        json_t *m = json_object_get(b, "max_length");
        bool ok = m == NULL || (json_is_integer(m) && json_integer_value(m) >= 4 &&
                                json_integer_value(m) <= TITLE_MAX);
        if (ok && m != NULL)
            max = (long)json_integer_value(m);
        json_decref(b);
        if (!ok) {
            net_reply_error(r, 422, "max_length must be an integer from 4 to %d", TITLE_MAX);
            return;
        }
    }
    net_api_work(r, title_work, (void *)(intptr_t)max, NULL);
}

/* ---- fork and navigate ------------------------------------------------------------------ */

typedef struct forking {
    rt_uuid id;
    json_t *changes;
    char *from; /* NULL: the whole log */
} forking;

static void forking_free(void *p)
{
    forking *f = p;
    json_decref(f->changes);
    free(f->from);
    free(f);
}

static void fork_work(net_req *r, net_outcome *out)
{
    forking *f = out->arg;
    char detail[300];
    int e = convs_fork(r->api->convs, &r->route.conv, &f->id, f->changes, f->from, detail,
                       sizeof(detail));
    if (e == -ENOENT)
        net_fail(out, 404, "Source conversation not found");
    else if (e < 0)
        net_fail(out,
                 e == -ESRCH    ? 404
                 : e == -EEXIST ? 409
                 : e == -EPROTO ? 422
                 : e == -EAGAIN ? 503
                                : 500,
                 "%s", detail);
}

static void forked(net_req *r, net_outcome *out)
{
    forking *f = out->arg;
    if (out->status != 0) {
        net_reply_error(r, out->status, "%s", out->detail);
        return;
    }
    net_reply_conv_info(r, &f->id, 201);
}

static void fork_conv(net_req *r)
{
    json_t *b = r->http->body_len > 0 ? net_req_json(r, "{\"id\"?, \"title\"?, \"tags\"?, "
                                                        "\"from_event_id\"?, \"reset_metrics\"?}")
                                      : json_object();
    if (b == NULL)
        return;
    forking *f = calloc(1, sizeof(*f));
    json_t *id = json_object_get(b, "id"), *title = json_object_get(b, "title");
    json_t *tags = json_object_get(b, "tags"), *from = json_object_get(b, "from_event_id");
    const char *bad = f == NULL            ? "out of memory"
                      : !json_is_object(b) ? "the body must be an object"
                                           : NULL;
    if (bad == NULL && id != NULL && !json_is_null(id) &&
        !(json_is_string(id) &&
          rt_uuid_parse(json_string_value(id), json_string_length(id), &f->id)))
        bad = "id must be a UUID (dashed or 32 hex digits)";
    else if (bad == NULL && (id == NULL || json_is_null(id)) && rt_uuid_v4(&f->id) != 0)
        bad = "cannot make an id";
    else if (bad == NULL && title != NULL && !json_is_null(title) &&
             (!json_is_string(title) || json_string_length(title) == 0 ||
              json_string_length(title) > 4 * TITLE_MAX))
        bad = "title must be a string of 1 to 200 characters";
    else if (bad == NULL && tags != NULL && !json_is_null(tags) && !json_is_object(tags))
        bad = "tags must be an object of strings";
    else if (bad == NULL && from != NULL && !json_is_null(from) && !json_is_string(from))
        bad = "from_event_id must be an event id";
    if (bad != NULL) {
        free(f);
        json_decref(b);
        net_reply_error(r, 422, "%s", bad);
        return;
    }
    char src[37];
    rt_uuid_dashed(&r->route.conv, src);
    f->changes = json_pack("{s:s}", "forked_from_conversation_id", src);
    if (json_is_string(title))
        json_object_set(f->changes, "title", title);
    if (json_is_object(tags))
        json_object_set(f->changes, "tags", tags);
    if (json_is_string(from)) {
        f->from = strdup(json_string_value(from));
        json_object_set(f->changes, "forked_from_event_id", from);
    }
    json_decref(b);
    net_api_work_then(r, fork_work, f, forking_free, forked);
}

typedef struct heading {
    const char *want; /* the event asked for */
    bool found, is_head;
    bool seen_node; /* a tree node after it (newer) was met */
} heading;

/* From the end: is the event asked for the head (the newest event that is
 * a node of the tree: not a state update)? */
static bool head_of(json_t *e, void *ctx)
{
    heading *h = ctx;
    const char *id = json_string_value(json_object_get(e, "id"));
    const char *k = json_string_value(json_object_get(e, "kind"));
    if (id != NULL && strcmp(id, h->want) == 0) {
        h->found = true;
        h->is_head = !h->seen_node;
        return true;
    }
    if (k == NULL || strcmp(k, "ConversationStateUpdateEvent") != 0)
        h->seen_node = true;
    return false;
}

static void navigate_work(net_req *r, net_outcome *out)
{
    heading *h = out->arg;
    if (net_walk_events(r, out, true, head_of, h) != 0)
        return;
    if (!h->found)
        net_fail(out, 404, "event_id %.80s is not an event of the conversation", h->want);
    else if (!h->is_head)
        net_fail(out, 422,
                 "parley's logs are linear: the head is always the newest event, so it cannot "
                 "move back to %.80s; fork from it instead (POST .../fork with from_event_id)",
                 h->want);
}

static void navigated(net_req *r, net_outcome *out)
{
    if (out->status != 0) {
        net_reply_error(r, out->status, "%s", out->detail);
        return;
    }
    net_reply_conv_info(r, &r->route.conv, 200);
}

static void navigate(net_req *r)
{
    json_t *b = net_req_json(r, "{\"event_id\": id or null}");
    if (b == NULL)
        return;
    json_t *e = json_object_get(b, "event_id");
    heading *h = json_is_string(e) ? calloc(1, sizeof(*h) + json_string_length(e) + 1) : NULL;
    if (h != NULL) {
        char *w = (char *)(h + 1);
        memcpy(w, json_string_value(e), json_string_length(e) + 1);
        h->want = w;
    }
    bool null = json_is_object(b) && (e == NULL || json_is_null(e));
    json_decref(b);
    if (h == NULL) {
        net_reply_error(r, 422, "%s",
                        null ? "parley's logs are linear: the head cannot move to the empty tree; "
                               "start a new conversation instead"
                             : "event_id must be an event id or null");
        return;
    }
    net_api_work_then(r, navigate_work, h, free, navigated);
}

/* ---- what a hosted ACP agent cannot do ------------------------------------------------- */

static void cannot(net_req *r, const char *why)
{
    rt_actor *a = net_conv_actor(r); /* 404 first, as upstream */
    if (a == NULL)
        return;
    rt_actor_unref(a);
    net_reply_error(r, 422, "%s", why);
}

void net_api_agent(net_req *r)
{
    switch (r->route.id) {
    case NET_R_CONV_SECRETS:
        secrets(r);
        break;
    case NET_R_CONV_CONFIRM_POLICY:
        confirmation_policy(r);
        break;
    case NET_R_CONV_SECURITY:
        security_analyzer(r);
        break;
    case NET_R_CONV_FINAL:
        net_api_work(r, final_response, NULL, NULL);
        break;
    case NET_R_CONV_TITLE:
        generate_title(r);
        break;
    case NET_R_CONV_FORK:
        fork_conv(r);
        break;
    case NET_R_CONV_NAVIGATE:
        navigate(r);
        break;
    case NET_R_CONV_ASK:
        cannot(r, "parley's agents cannot answer a side question: the Agent Client Protocol has "
                  "no question outside a turn; post a message instead");
        break;
    case NET_R_CONV_CONDENSE:
        cannot(r, "parley runs no condenser: a hosted ACP agent manages its own context");
        break;
    case NET_R_CONV_GOAL:
    case NET_R_CONV_GOAL_STOP:
    case NET_R_CONV_GOAL_RESUME:
        cannot(r, "goal loops need an LLM to audit each round, and parley runs none: a hosted "
                  "ACP agent runs its own loop");
        break;
    default: /* switch_llm, switch_profile, load_plugin, switch_acp_model */
        cannot(r, "parley runs no LLM, profile or plugin of its own: the hosted ACP agent "
                  "chooses its model");
        break;
    }
}
