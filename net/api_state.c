/*
 * api_state.c - GET /api/conversations/{id}/state: the conversation as
 * blocks, from its visualizer (actors/viz.h), which starts on first use.
 *
 * {"index", "blocks", "subagents", "removed"} (actors/view.h): the whole
 * state, or with ?after_index=N only what changed after event N, so a
 * client polls at the cost of what changed. With ?from=K (&limit=N, at
 * most 1,000, default 100; &conversation=C for a subagent's blocks) a
 * page of blocks, {"index", "conversation", "total", "from", "blocks"},
 * so a long conversation is shown a screenful at a time. A visualizer
 * that stopped between the lookup and the question (idle) is asked again.
 */
#include "api.h"

#include "actors/viz.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { TRIES = 3 };

enum { RANGE_DEFAULT = 100, RANGE_MAX = 1000 };

typedef struct asking {
    net_req *r;
    uint64_t arg;
    int tries;
    bool range;
    viz_range q;
} asking;

static void ask(asking *a);

static void answered(void *ctx, rt_msg *m)
{
    asking *a = ctx;
    net_req *r = a->r;
    bool again = (m->kind == RT_KIND_ERROR && m->status == RT_ECLOSED) ||
                 (m->kind == VIZ_RESULT && m->status == -ECONNRESET);
    if (again && ++a->tries < TRIES) {
        ask(a);
        return;
    }
    free(a);
    if (m->kind == VIZ_RESULT && m->status == 0 && m->buf != NULL) {
        net_reply(r, 200, rt_buf_ref(m->buf), NULL, NULL);
        return;
    }
    const char *why = m->kind == VIZ_RESULT && m->buf != NULL ? (const char *)rt_buf_data(m->buf)
                                                              : rt_strerror(m->status);
    int len = m->kind == VIZ_RESULT && m->buf != NULL ? (int)rt_buf_len(m->buf) : (int)strlen(why);
    int st = m->kind == VIZ_RESULT && m->status == -ENOENT           ? 404
             : m->kind == VIZ_RESULT && m->status == -EINVAL         ? 422
             : m->kind == VIZ_RESULT && m->status == -E2BIG          ? 507
             : m->kind == VIZ_RESULT && m->status == -EIO            ? 500
             : m->kind == RT_KIND_ERROR && m->status == RT_ETIMEDOUT ? 504
                                                                     : 503;
    net_reply_error(r, st, "the conversation's state: %.*s", len, why);
}

static void ask(asking *a)
{
    net_req *r = a->r;
    rt_actor *viz;
    int e = convs_viz(r->api->convs, &r->route.conv, &viz);
    if (e == 0) {
        rt_buf *q = a->range ? rt_buf_copy(&a->q, sizeof(a->q)) : NULL;
        e = a->range && q == NULL
                ? RT_ENOMEM
                : rt_call(r->api->rt, RT_LOOP_ANY, viz, a->range ? VIZ_RANGE : VIZ_STATE, a->arg, q,
                          r->api->call_timeout_ms, answered, a);
        if (e != 0)
            rt_buf_unref(q);
        rt_actor_unref(viz);
        if (e == 0)
            return;
    }
    free(a);
    if (e == -ENOENT) {
        char id[37];
        rt_uuid_dashed(&r->route.conv, id);
        net_reply_error(r, 404, "Conversation not found: %s", id);
    } else {
        net_reply_error(r, 503, "cannot reach the conversation's visualizer: %s", rt_strerror(e));
    }
}

void net_api_state(net_req *r)
{
    uint64_t after = 0, from = 0, limit = RANGE_DEFAULT;
    int ha = net_query_uint(&r->query, "after_index", (1ull << 53) - 1, &after);
    int hf = net_query_uint(&r->query, "from", (1ull << 53) - 1, &from);
    int hl = net_query_uint(&r->query, "limit", RANGE_MAX, &limit);
    const char *conv = net_query_get(&r->query, "conversation");
    const char *bad = ha < 0   ? "after_index must be an event index (a whole number >= 0)"
                      : hf < 0 ? "from must be a block's position (a whole number >= 0)"
                      : hl < 0 || (hl > 0 && limit == 0) ? "limit must be from 1 to 1000"
                      : ha > 0 && (hf > 0 || hl > 0 || conv != NULL)
                          ? "after_index asks what changed; from, limit and conversation ask "
                            "for a page: one or the other"
                      : hf == 0 && (hl > 0 || conv != NULL) ? "a page starts somewhere: from=K"
                      : conv != NULL && (conv[0] == '\0' || strlen(conv) > 255)
                          ? "conversation must be main or a subagent's tool use id"
                          : NULL;
    if (bad != NULL) {
        net_reply_error(r, 422, "%s", bad);
        return;
    }
    asking *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        net_reply_error(r, 500, "out of memory");
        return;
    }
    a->r = r;
    a->arg = ha > 0 ? after + 1 : 0;
    a->range = hf > 0;
    a->q.from = from;
    a->q.limit = limit;
    snprintf(a->q.conv, sizeof(a->q.conv), "%s", conv != NULL ? conv : "main");
    ask(a);
}
