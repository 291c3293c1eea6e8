/*
 * reducer.c - see reducer.h. The block store (conversations, deltas,
 * idle) is reducer_conv.c; this file reads the events and keeps the
 * subagents.
 *
 * Where the reference (agent-converters) loses data, the vectors' fixes
 * are followed: a repeated subagent:spawned fills what is missing (F3), a
 * completion without agentId keeps the known one (F13), the subagent block
 * keeps its description (F14), and only text takes deltas (F15).
 */
#include "actors/reducer_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void system_now(void *ctx, char out[32])
{
    (void)ctx;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ts.tv_nsec / 1000000));
}

reducer *reducer_new(reducer_now_fn now, void *ctx)
{
    reducer *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->now = now ? now : system_now;
    r->now_ctx = ctx;
    r->main.name = strdup("main");
    r->defaults = rd_defaults_new();
    if (r->main.name == NULL || r->defaults == NULL) {
        free(r->main.name);
        json_decref(r->defaults);
        free(r);
        return NULL;
    }
    return r;
}

void reducer_free(reducer *r)
{
    if (r == NULL)
        return;
    rd_conv_free(&r->main);
    for (size_t i = 0; i < r->nsub; i++) {
        rd_conv_free(&r->sub[i]->conv);
        json_decref(r->sub[i]->obj);
        free(r->sub[i]);
    }
    free(r->sub);
    idmap_free(&r->by_tool);
    idmap_free(&r->by_agent);
    idmap_free(&r->sub_blocks);
    json_decref(r->defaults);
    free(r);
}

/* ------------------------------------------------------------ subagents --- */

static const char *agent_of(const rd_sub *s)
{
    return json_string_value(json_object_get(s->obj, "agentId"));
}

rd_sub *rd_find_sub(reducer *r, const char *ref)
{
    rd_sub *s = idmap_get(&r->by_tool, ref);
    return s != NULL ? s : idmap_get(&r->by_agent, ref);
}

/* by_agent maps an agent id to the first entry that has it: kept exact
 * when an entry's agentId changes (rare: once or twice per subagent). */
static int set_agent(reducer *r, rd_sub *s, const char *agent)
{
    const char *old = agent_of(s);
    if (old != NULL && strcmp(old, agent) == 0)
        return 0;
    char *was = old ? strdup(old) : NULL;
    if (old != NULL && was == NULL)
        return -ENOMEM;
    if (json_object_set_new(s->obj, "agentId", json_string(agent)) != 0) {
        free(was);
        return -ENOMEM;
    }
    int rc = 0;
    if (was != NULL && idmap_get(&r->by_agent, was) == s) {
        idmap_del(&r->by_agent, was);
        for (size_t i = 0; i < r->nsub && rc == 0; i++) {
            const char *a = agent_of(r->sub[i]);
            if (a != NULL && strcmp(a, was) == 0)
                rc = idmap_put(&r->by_agent, was, r->sub[i]);
            if (a != NULL && strcmp(a, was) == 0)
                break;
        }
    }
    free(was);
    rd_sub *first = idmap_get(&r->by_agent, agent);
    if (rc == 0 && (first == NULL || first->index > s->index))
        rc = idmap_put(&r->by_agent, agent, s);
    return rc;
}

/* A new entry {toolUseId, status "running"}, appended to the flat list. */
static rd_sub *add_sub(reducer *r, const char *tool_use_id)
{
    if (rt_grow((void **)&r->sub, &r->subcap, r->nsub + 1, sizeof(*r->sub), 8) != 0)
        return NULL;
    rd_sub *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->obj = json_pack("{s:s, s:s}", "toolUseId", tool_use_id, "status", "running");
    s->conv.name = strdup(tool_use_id);
    if (s->obj == NULL || s->conv.name == NULL || idmap_put(&r->by_tool, tool_use_id, s) != 0) {
        json_decref(s->obj);
        free(s->conv.name);
        free(s);
        return NULL;
    }
    s->index = r->nsub;
    r->sub[r->nsub++] = s;
    return s;
}

static int emit_sub(json_t *changed, rd_sub *s)
{
    if (changed == NULL)
        return 0;
    return json_array_append_new(changed, json_pack("{s:O}", "subagent", s->obj)) ? -ENOMEM : 0;
}

/* The conversation an event names; NULL for a subagent nobody knows. */
static rd_conv *conv_of(reducer *r, const char *cid)
{
    if (strcmp(cid, "main") == 0)
        return &r->main;
    rd_sub *s = rd_find_sub(r, cid);
    return s ? &s->conv : NULL;
}

/* -------------------------------------------------------------- events --- */

static int on_upsert(reducer *r, const char *cid, json_t *payload, json_t *changed, bool owned)
{
    json_t *block = json_object_get(payload, "block");
    if (!json_is_object(block) || !json_is_string(json_object_get(block, "id")))
        return -EINVAL;
    rd_conv *c = conv_of(r, cid);
    if (c == NULL) {
        /* The reference's robustness rule: an upsert may come before its
         * spawn; the entry it makes has no subagent block anywhere. */
        rd_sub *s = add_sub(r, cid);
        if (s == NULL || emit_sub(changed, s) != 0)
            return -ENOMEM;
        c = &s->conv;
    }
    /* the state keeps the block's members: copied, unless the caller
     * drops the event after (nothing else can change them then) */
    json_t *copy = owned ? json_incref(block) : json_deep_copy(block);
    if (copy == NULL)
        return -ENOMEM;
    int rc = rd_upsert(r, c, copy, changed);
    json_decref(copy);
    return rc;
}

static int on_delta(reducer *r, const char *cid, json_t *payload, json_t *changed)
{
    const char *id = json_string_value(json_object_get(payload, "blockId"));
    json_t *delta = json_object_get(payload, "delta");
    if (id == NULL || !json_is_string(delta))
        return -EINVAL;
    rd_conv *c = conv_of(r, cid);
    if (c == NULL || json_string_length(delta) == 0)
        return 0;
    return rd_delta(c, id, json_string_value(delta), json_string_length(delta), changed);
}

/* Sets key on obj to a copy of v; 1 if it did, 0 if v is NULL. */
static int copy_member(json_t *obj, const char *key, json_t *v)
{
    if (v == NULL)
        return 0;
    return json_object_set_new(obj, key, json_deep_copy(v)) ? -ENOMEM : 1;
}

static bool empty_or_absent(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v == NULL || (json_is_string(v) && json_string_length(v) == 0);
}

/* A repeated spawn (F3): only what is missing is filled in, so a Task
 * announced early with input {} gets its prompt, name and description
 * from the later, complete announcement, and nothing is overwritten. */
static int fill_spawned(reducer *r, rd_sub *s, json_t *p, json_t *changed)
{
    const char *agent = json_string_value(json_object_get(p, "agentId"));
    json_t *prompt = json_object_get(p, "prompt");
    int n = 0, rc;
    if (agent != NULL && agent_of(s) == NULL) {
        if (set_agent(r, s, agent) != 0)
            return -ENOMEM;
        n++;
    }
    if (prompt != NULL && empty_or_absent(s->obj, "prompt") &&
        !json_equal(prompt, json_object_get(s->obj, "prompt"))) {
        if ((rc = copy_member(s->obj, "prompt", prompt)) < 0)
            return rc;
        n++;
    }
    if (n > 0 && emit_sub(changed, s) != 0)
        return -ENOMEM;
    rd_block *b =
        rd_find_subagent_block(r, json_string_value(json_object_get(s->obj, "toolUseId")));
    if (b == NULL)
        return 0;
    n = 0;
    if (prompt != NULL && empty_or_absent(b->obj, "input") &&
        !json_equal(prompt, json_object_get(b->obj, "input")))
        n += copy_member(b->obj, "input", prompt);
    if (json_object_get(b->obj, "name") == NULL)
        n += copy_member(b->obj, "name", json_object_get(p, "subagentType"));
    if (json_object_get(b->obj, "description") == NULL)
        n += copy_member(b->obj, "description", json_object_get(p, "description"));
    if (n < 0)
        return -ENOMEM;
    return n > 0 ? rd_emit_block(b, changed) : 0;
}

static int on_spawned(reducer *r, const char *cid, json_t *ctx, json_t *p, json_t *changed)
{
    const char *tool = json_string_value(json_object_get(p, "toolUseId"));
    if (tool == NULL)
        return -EINVAL;
    rd_sub *known = rd_find_sub(r, tool);
    if (known != NULL)
        return fill_spawned(r, known, p, changed);

    /* The block goes where the Task was called: main, or the parent
     * subagent (how nesting is stored), or main if the parent is unknown. */
    rd_conv *c = conv_of(r, cid);
    if (c == NULL)
        c = &r->main;
    char now[32];
    const char *ts = json_string_value(json_object_get(ctx, "timestamp"));
    if (ts == NULL) {
        r->now(r->now_ctx, now);
        ts = now;
    }
    size_t idlen = strlen(tool) + sizeof("subagent-block-");
    char *id = malloc(idlen);
    if (id == NULL)
        return -ENOMEM;
    snprintf(id, idlen, "subagent-block-%s", tool);
    json_t *b = json_pack("{s:s, s:s, s:s, s:s, s:s}", "id", id, "type", "subagent", "timestamp",
                          ts, "status", "pending", "toolUseId", tool);
    free(id);
    if (b == NULL || copy_member(b, "name", json_object_get(p, "subagentType")) < 0 ||
        copy_member(b, "input", json_object_get(p, "prompt")) < 0 ||
        copy_member(b, "description", json_object_get(p, "description")) < 0) {
        json_decref(b);
        return -ENOMEM;
    }
    int rc = rd_upsert(r, c, b, changed);
    json_decref(b);
    if (rc != 0)
        return rc;

    rd_sub *s = add_sub(r, tool);
    const char *agent = json_string_value(json_object_get(p, "agentId"));
    if (s == NULL || (agent != NULL && set_agent(r, s, agent) != 0) ||
        copy_member(s->obj, "prompt", json_object_get(p, "prompt")) < 0)
        return -ENOMEM;
    return emit_sub(changed, s);
}

static int on_completed(reducer *r, json_t *p, json_t *changed)
{
    const char *tool = json_string_value(json_object_get(p, "toolUseId"));
    if (tool == NULL)
        return -EINVAL;
    const char *status = json_string_value(json_object_get(p, "status"));
    bool ok = status != NULL && strcmp(status, "completed") == 0;
    const char *agent = json_string_value(json_object_get(p, "agentId"));
    json_t *output = json_object_get(p, "output"), *ms = json_object_get(p, "durationMs");

    rd_block *b = rd_find_subagent_block(r, tool);
    if (b != NULL) {
        if (rd_sync(b) != 0 ||
            json_object_set_new(b->obj, "status", json_string(ok ? "complete" : "error")) != 0 ||
            copy_member(b->obj, "output", output) < 0 || copy_member(b->obj, "durationMs", ms) < 0)
            return -ENOMEM;
        if (agent != NULL) {
            json_t *sid = json_sprintf("agent-%s", agent);
            if (sid == NULL || json_object_set_new(b->obj, "subagentId", sid) != 0)
                return -ENOMEM;
        }
        if (rd_emit_block(b, changed) != 0)
            return -ENOMEM;
    }
    rd_sub *s = rd_find_sub(r, tool);
    if (s == NULL)
        return 0;
    if (json_object_set_new(s->obj, "status", json_string(ok ? "success" : "error")) != 0 ||
        copy_member(s->obj, "output", output) < 0 || copy_member(s->obj, "durationMs", ms) < 0 ||
        (agent != NULL && set_agent(r, s, agent) != 0))
        return -ENOMEM;
    return emit_sub(changed, s);
}

static int apply(reducer *r, const json_t *event, json_t *changed, bool owned)
{
    if (r == NULL || !json_is_object(event))
        return -EINVAL;
    const char *type = json_string_value(json_object_get(event, "type"));
    json_t *p = json_object_get(event, "payload"), *ctx = json_object_get(event, "context");
    const char *cid = json_string_value(json_object_get(ctx, "conversationId"));
    if (cid == NULL)
        cid = "main";
    if (type == NULL)
        return -EINVAL;
    if (strcmp(type, "session:idle") == 0) {
        rd_conv *c = conv_of(r, cid);
        return c ? rd_idle(r, c, changed) : 0;
    }
    bool handled = strcmp(type, "block:upsert") == 0 || strcmp(type, "block:delta") == 0 ||
                   strcmp(type, "subagent:spawned") == 0 || strcmp(type, "subagent:completed") == 0;
    if (!handled)
        return 0;
    if (!json_is_object(p))
        return -EINVAL;
    if (strcmp(type, "block:upsert") == 0)
        return on_upsert(r, cid, p, changed, owned);
    if (strcmp(type, "block:delta") == 0)
        return on_delta(r, cid, p, changed);
    if (strcmp(type, "subagent:spawned") == 0)
        return on_spawned(r, cid, ctx, p, changed);
    return on_completed(r, p, changed);
}

int reducer_apply(reducer *r, const json_t *event, json_t *changed)
{
    return apply(r, event, changed, false);
}

int reducer_apply_owned(reducer *r, json_t *event, json_t *changed)
{
    return apply(r, event, changed, true);
}

/* --------------------------------------------------------------- reads --- */

static json_t *state(reducer *r, bool shared)
{
    json_t *subs = json_array(),
           *st = json_pack("{s:o, s:o}", "blocks", rd_conv_blocks(&r->main, shared), "subagents",
                           subs);
    if (st == NULL)
        return NULL;
    for (size_t i = 0; i < r->nsub; i++) {
        json_t *e = shared ? json_copy(r->sub[i]->obj) : json_deep_copy(r->sub[i]->obj);
        if (e == NULL ||
            json_object_set_new(e, "blocks", rd_conv_blocks(&r->sub[i]->conv, shared)) != 0 ||
            json_array_append_new(subs, e) != 0) {
            json_decref(st);
            return NULL;
        }
    }
    return st;
}

json_t *reducer_state(reducer *r)
{
    return state(r, false);
}

json_t *reducer_state_shared(reducer *r)
{
    return state(r, true);
}

int reducer_range(reducer *r, const char *conv, size_t from, size_t limit, json_t *out,
                  size_t *total)
{
    rd_conv *c = conv_of(r, conv);
    if (c == NULL)
        return -ENOENT;
    *total = c->live;
    size_t seen = 0;
    for (size_t i = 0; i < c->n && limit > 0; i++) {
        rd_block *b = c->slot[i];
        if (b == NULL || seen++ < from)
            continue;
        if (rd_sync(b) != 0 || json_array_append(out, b->obj) != 0)
            return -ENOMEM;
        limit--;
    }
    return 0;
}

long long reducer_position(reducer *r, const char *conv, const char *id)
{
    rd_conv *c = conv_of(r, conv);
    rd_block *b = c ? idmap_get(&c->ids, id) : NULL;
    return b != NULL ? (long long)rd_position(c, b) : -1;
}

const json_t *reducer_block(reducer *r, const char *conv, const char *id)
{
    rd_conv *c = conv_of(r, conv);
    rd_block *b = c ? idmap_get(&c->ids, id) : NULL;
    return b != NULL && rd_sync(b) == 0 ? b->obj : NULL;
}

const json_t *reducer_subagent(reducer *r, const char *ref)
{
    rd_sub *s = rd_find_sub(r, ref);
    return s ? s->obj : NULL;
}

size_t reducer_subagent_count(const reducer *r)
{
    return r->nsub;
}

const json_t *reducer_subagent_at(const reducer *r, size_t i)
{
    return i < r->nsub ? r->sub[i]->obj : NULL;
}

size_t reducer_block_count(const reducer *r)
{
    size_t n = r->main.live;
    for (size_t i = 0; i < r->nsub; i++)
        n += r->sub[i]->conv.live;
    return n;
}
