/*
 * api_state.c - GET /api/conversations/{id}/state: the conversation as
 * blocks, from its visualizer (actors/viz.h), which starts on first use.
 *
 * {"index", "blocks", "subagents", "removed"} (actors/view.h): the whole
 * state, or with ?after_index=N only what changed after event N, so a
 * client polls at the cost of what changed. A visualizer that stopped
 * between the lookup and the question (idle) is asked again once.
 */
#include "api.h"

#include "actors/viz.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { TRIES = 3 };

typedef struct asking {
    net_req *r;
    uint64_t arg;
    int tries;
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
        e = rt_call(r->api->rt, RT_LOOP_ANY, viz, VIZ_STATE, a->arg, NULL, r->api->call_timeout_ms,
                    answered, a);
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
    const char *s = net_query_get(&r->query, "after_index");
    uint64_t arg = 0;
    if (s != NULL) {
        char *end;
        unsigned long long n = strtoull(s, &end, 10);
        if (s[0] < '0' || s[0] > '9' || *end != '\0' || n >= (1ull << 53)) {
            net_reply_error(r, 422, "after_index must be an event index (a whole number >= 0)");
            return;
        }
        arg = n + 1;
    }
    asking *a = malloc(sizeof(*a));
    if (a == NULL) {
        net_reply_error(r, 500, "out of memory");
        return;
    }
    *a = (asking){r, arg, 0};
    ask(a);
}
