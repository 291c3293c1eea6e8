/*
 * gate.c - the compliance gate's rules (gate.h).
 *
 * Order of the checks, first failure wins:
 *   1. the id: already in the log with the same content is an idempotent
 *      retry; with other content, duplicate_event_id;
 *   2. the parent: a parent_id other than the head is stale_parent if that
 *      event exists, else the event is held until it does;
 *   3. the tool-call rules, for messages, actions and results only:
 *      an action's tool_call_id must be new (duplicate_tool_call_id) and, if
 *      calls are pending, the action must belong to their assistant turn
 *      (same llm_response_id, else interleaved_action); a result must answer
 *      a pending call (duplicate_tool_result if it was answered already,
 *      unmatched_tool_result if no action had it); a message while calls
 *      are pending is interleaved_message if the agent sent it, and is
 *      deferred if a user, the environment or a hook did.
 * Every other event (system prompt, pause, state updates, errors, hooks,
 * condensation...) passes the tool-call rules unchanged.
 */
#include "gate.h"

#include <errno.h>
#include <sys/types.h>
#include <stdlib.h>
#include <string.h>

typedef struct pending_call {
    char *call;   /* tool_call_id */
    char *action; /* the action's event id */
    char *tool;   /* its tool_name */
} pending_call;

struct gate {
    pending_call *pending; /* in the order the actions came */
    size_t npending, cap;
    char *batch; /* llm_response_id of the pending calls' turn */
    char *head;
};

static const char *const rule_names[] = {
    [GATE_OK] = "",
    [GATE_INTERLEAVED_MESSAGE] = "interleaved_message",
    [GATE_INTERLEAVED_ACTION] = "interleaved_action",
    [GATE_DUPLICATE_TOOL_CALL_ID] = "duplicate_tool_call_id",
    [GATE_UNMATCHED_TOOL_RESULT] = "unmatched_tool_result",
    [GATE_DUPLICATE_TOOL_RESULT] = "duplicate_tool_result",
    [GATE_UNKNOWN_PARENT] = "unknown_parent",
    [GATE_STALE_PARENT] = "stale_parent",
    [GATE_DUPLICATE_EVENT_ID] = "duplicate_event_id",
    [GATE_INVALID_EVENT] = "invalid_event",
};

const char *gate_rule_name(gate_rule r)
{
    return r <= GATE_INVALID_EVENT ? rule_names[r] : "";
}

gate *gate_new(void)
{
    return calloc(1, sizeof(gate));
}

static void clear(gate *g)
{
    for (size_t i = 0; i < g->npending; i++) {
        free(g->pending[i].call);
        free(g->pending[i].action);
        free(g->pending[i].tool);
    }
    g->npending = 0;
    free(g->batch);
    free(g->head);
    g->batch = g->head = NULL;
}

void gate_free(gate *g)
{
    if (g == NULL)
        return;
    clear(g);
    free(g->pending);
    free(g);
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

static int push_pending(gate *g, const char *call, const char *action, const char *tool)
{
    if (g->npending == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        pending_call *p = realloc(g->pending, cap * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        g->pending = p;
        g->cap = cap;
    }
    pending_call *p = &g->pending[g->npending];
    p->call = strdup(call);
    p->action = dup_or_null(action);
    p->tool = dup_or_null(tool);
    if (p->call == NULL) {
        free(p->action);
        free(p->tool);
        return -ENOMEM;
    }
    g->npending++;
    return 0;
}

gate *gate_clone(const gate *g)
{
    gate *c = gate_new();
    if (c == NULL)
        return NULL;
    for (size_t i = 0; i < g->npending; i++) {
        if (push_pending(c, g->pending[i].call, g->pending[i].action, g->pending[i].tool) < 0) {
            gate_free(c);
            return NULL;
        }
    }
    c->batch = dup_or_null(g->batch);
    c->head = dup_or_null(g->head);
    return c;
}

static ssize_t find_pending(const gate *g, const char *call)
{
    for (size_t i = 0; i < g->npending; i++)
        if (strcmp(g->pending[i].call, call) == 0)
            return (ssize_t)i;
    return -1;
}

size_t gate_key(const ev *e, char *out, size_t cap)
{
    char tag = e->kind == EV_ACTION ? 'a' : ev_observation_like(e) ? 'o' : 0;
    if (tag == 0 || e->tool_call_id == NULL)
        return 0;
    size_t n = strlen(e->tool_call_id);
    if (n + 2 >= cap || n + 2 > 255)
        return 0;
    out[0] = tag;
    out[1] = ':';
    memcpy(out + 2, e->tool_call_id, n + 1);
    return n + 2;
}

static bool has_key(const gate_lookup *lk, char tag, const char *call)
{
    char key[256];
    size_t n = strlen(call);
    if (n + 2 >= sizeof(key))
        return false;
    key[0] = tag;
    key[1] = ':';
    memcpy(key + 2, call, n);
    return lk->has_key(lk->ctx, key, n + 2);
}

static gate_verdict reject(gate_rule *rule, gate_rule r)
{
    *rule = r;
    return GATE_REJECT;
}

gate_verdict gate_check(const gate *g, const ev *e, const gate_lookup *lk, gate_rule *rule)
{
    *rule = GATE_OK;
    if (e->id != NULL) {
        int k = lk->known(lk->ctx, e);
        if (k == 1)
            return GATE_ALREADY;
        if (k == 2)
            return reject(rule, GATE_DUPLICATE_EVENT_ID);
    }
    const char *p = e->parent_id;
    if (p != NULL && (g->head == NULL || strcmp(p, g->head) != 0)) {
        if (strcmp(p, "__root__") == 0) {
            if (g->head != NULL)
                return reject(rule, GATE_STALE_PARENT);
        } else if (lk->has_id(lk->ctx, p)) {
            return reject(rule, GATE_STALE_PARENT);
        } else {
            *rule = GATE_UNKNOWN_PARENT;
            return GATE_HOLD;
        }
    }
    if (e->kind == EV_ACTION) {
        if (find_pending(g, e->tool_call_id) >= 0 || has_key(lk, 'a', e->tool_call_id))
            return reject(rule, GATE_DUPLICATE_TOOL_CALL_ID);
        if (g->npending > 0 && strcmp(g->batch, e->llm_response_id) != 0)
            return reject(rule, GATE_INTERLEAVED_ACTION);
        return GATE_ACCEPT;
    }
    if (ev_observation_like(e)) {
        if (find_pending(g, e->tool_call_id) >= 0)
            return GATE_ACCEPT;
        return reject(rule, has_key(lk, 'o', e->tool_call_id) ? GATE_DUPLICATE_TOOL_RESULT
                                                              : GATE_UNMATCHED_TOOL_RESULT);
    }
    if (e->kind == EV_MESSAGE && g->npending > 0) {
        if (e->source == EV_SRC_AGENT)
            return reject(rule, GATE_INTERLEAVED_MESSAGE);
        *rule = GATE_INTERLEAVED_MESSAGE; /* what expiry would say */
        return GATE_DEFER;
    }
    return GATE_ACCEPT;
}

void gate_accept(gate *g, const ev *e)
{
    if (e->kind == EV_ACTION && e->tool_call_id != NULL) {
        if (g->npending == 0) {
            free(g->batch);
            g->batch = dup_or_null(e->llm_response_id);
        }
        push_pending(g, e->tool_call_id, e->id, e->tool_name);
    } else if (ev_observation_like(e) && e->tool_call_id != NULL) {
        ssize_t i = find_pending(g, e->tool_call_id);
        if (i >= 0) {
            free(g->pending[i].call);
            free(g->pending[i].action);
            free(g->pending[i].tool);
            memmove(&g->pending[i], &g->pending[i + 1],
                    (g->npending - (size_t)i - 1) * sizeof(g->pending[0]));
            g->npending--;
        }
        if (g->npending == 0) {
            free(g->batch);
            g->batch = NULL;
        }
    }
    /* state updates get a parent but are not nodes of the tree */
    if (e->kind != EV_STATE_UPDATE && e->id != NULL) {
        free(g->head);
        g->head = strdup(e->id);
    }
}

size_t gate_pending_count(const gate *g)
{
    return g->npending;
}

const char *gate_pending_call(const gate *g, size_t i, const char **action_id,
                              const char **tool_name)
{
    const pending_call *p = i < g->npending ? &g->pending[i] : NULL;
    if (action_id != NULL) /* written either way */
        *action_id = p != NULL ? p->action : NULL;
    if (tool_name != NULL)
        *tool_name = p != NULL ? p->tool : NULL;
    return p != NULL ? p->call : NULL;
}

const char *gate_head(const gate *g)
{
    return g->head;
}

static void put_str_or_null(rt_text *w, const char *s)
{
    if (s != NULL)
        rt_text_json_string(w, s, strlen(s));
    else
        rt_text_puts(w, "null");
}

void gate_write(rt_text *w, const gate *g)
{
    rt_text_puts(w, "{\"head\":");
    put_str_or_null(w, g->head);
    rt_text_puts(w, ",\"batch\":");
    put_str_or_null(w, g->batch);
    rt_text_puts(w, ",\"pending\":[");
    for (size_t i = 0; i < g->npending; i++) {
        rt_text_puts(w, i > 0 ? ",[" : "[");
        put_str_or_null(w, g->pending[i].call);
        rt_text_putc(w, ',');
        put_str_or_null(w, g->pending[i].action);
        rt_text_putc(w, ',');
        put_str_or_null(w, g->pending[i].tool);
        rt_text_putc(w, ']');
    }
    rt_text_puts(w, "]}");
}

int gate_load(gate *g, json_t *saved)
{
    json_t *head, *batch, *pending;
    if (!json_is_object(saved) || !(head = json_object_get(saved, "head")) ||
        !(batch = json_object_get(saved, "batch")) ||
        !json_is_array(pending = json_object_get(saved, "pending")) ||
        !(json_is_string(head) || json_is_null(head)) ||
        !(json_is_string(batch) || json_is_null(batch)) ||
        /* pending calls belong to one LLM response, which gate_check needs */
        (json_array_size(pending) > 0) != json_is_string(batch))
        return -EINVAL;
    gate *n = gate_new();
    if (n == NULL)
        return -ENOMEM;
    size_t i;
    json_t *item;
    json_array_foreach(pending, i, item)
    {
        json_t *call = json_array_get(item, 0), *action = json_array_get(item, 1),
               *tool = json_array_get(item, 2);
        int r = json_is_string(call) && (json_is_string(action) || json_is_null(action)) &&
                        (json_is_string(tool) || json_is_null(tool))
                    ? push_pending(n, json_string_value(call), json_string_value(action),
                                   json_string_value(tool))
                    : -EINVAL;
        if (r < 0) {
            gate_free(n);
            return r;
        }
    }
    n->head = dup_or_null(json_string_value(head));
    n->batch = dup_or_null(json_string_value(batch));
    if ((json_is_string(head) && n->head == NULL) || (json_is_string(batch) && n->batch == NULL)) {
        gate_free(n);
        return -ENOMEM;
    }
    /* all or nothing: g changes only now */
    gate tmp = *g;
    *g = *n;
    *n = tmp;
    gate_free(n);
    return 0;
}
