/*
 * api.c - from a routed request to its handler: route errors, the API key,
 * the query string, and reading JSON bodies.
 */
#include "api.h"
#include "verdict.h"

#include "actors/event.h"
#include "runtime/json.h"
#include "runtime/text.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool key_ok(const net_api *a, const char *given)
{
    return rt_keys_match(a->api_keys, a->napi_keys, given);
}

void net_api_handle(net_req *r)
{
    net_route *rt = &r->route;
    net_route_match(r->http->method, r->http->target, rt);
    if ((rt->id == NET_R_WS_EVENTS || rt->id == NET_R_WEB_CONV) && rt->status == 422) {
        /* no such stream, no such page */
        net_reply_error(r, 404, "%s", rt->detail);
        return;
    }
    if (rt->status != 0 && rt->status != 422) {
        net_reply_error(r, rt->status, "%s", rt->detail);
        return;
    }
    /* a forwarded request was authorized by the node that received it */
    bool api = strncmp(r->http->target, "/api/", 5) == 0 && r->fwd == NULL;
    if (api && r->api->napi_keys > 0 &&
        !key_ok(r->api, hp_header_get(r->http, "x-session-api-key"))) {
        net_reply_error(r, 401, "Unauthorized"); /* as upstream words it */
        return;
    }
    if (rt->status != 0) {
        net_reply_error(r, rt->status, "%s", rt->detail);
        return;
    }
    if (!net_forward_route_ok(r)) {
        net_reply_error(r, 400, "a forwarded request that names another conversation");
        return;
    }
    char err[128];
    if (net_query_parse(rt->query, rt->query_len, &r->query, err, sizeof(err)) != 0) {
        net_reply_error(r, 400, "%s", err);
        return;
    }
    if (!net_forward(r))
        net_api_dispatch(r);
}

void net_api_dispatch(net_req *r)
{
    switch (r->route.id) {
    case NET_R_ALIVE:
    case NET_R_HEALTH:
    case NET_R_READY:
    case NET_R_SERVER_INFO:
    case NET_R_METRICS:
    case NET_R_OPENAPI:
        net_api_info(r);
        break;
    case NET_R_EV_SEARCH:
    case NET_R_EV_COUNT:
    case NET_R_EV_GET:
    case NET_R_EV_BATCH:
    case NET_R_EV_POST:
    case NET_R_EV_APPEND:
    case NET_R_EV_CONFIRM:
        net_api_events(r);
        break;
    case NET_R_WEB_LIST:
    case NET_R_WEB_CONV:
    case NET_R_WEB_ASSET:
        net_api_web(r);
        break;
    case NET_R_WS_EVENTS:
        net_api_ws(r);
        break;
    case NET_R_CONV_STATE:
        net_api_state(r);
        break;
    case NET_R_CONV_SECRETS:
    case NET_R_CONV_CONFIRM_POLICY:
    case NET_R_CONV_SECURITY:
    case NET_R_CONV_FINAL:
    case NET_R_CONV_TITLE:
    case NET_R_CONV_FORK:
    case NET_R_CONV_NAVIGATE:
    case NET_R_CONV_ASK:
    case NET_R_CONV_CONDENSE:
    case NET_R_CONV_GOAL:
    case NET_R_CONV_GOAL_STOP:
    case NET_R_CONV_GOAL_RESUME:
    case NET_R_CONV_SWITCH_LLM:
    case NET_R_CONV_SWITCH_PROFILE:
    case NET_R_CONV_LOAD_PLUGIN:
    case NET_R_CONV_SWITCH_ACP:
        net_api_agent(r);
        break;
    default:
        net_api_conversations(r);
        break;
    }
}

json_t *net_req_json(net_req *r, const char *what)
{
    if (r->http->body == NULL || r->http->body_len == 0) {
        net_reply_error(r, 422, "the request needs a JSON body: %s", what);
        return NULL;
    }
    json_error_t e;
    json_t *j = rt_json_read((const char *)r->http->body, r->http->body_len, JSON_DECODE_ANY, &e);
    if (j == NULL)
        net_reply_error(r, 400, "the body is not valid UTF-8 JSON: %s (line %d, column %d)", e.text,
                        e.line, e.column);
    return j;
}

typedef struct work {
    uv_work_t w;
    net_req *r;
    net_work_fn fn, then;
    void (*arg_free)(void *);
    net_outcome out;
} work;

static void work_run(uv_work_t *w)
{
    work *k = w->data;
    k->fn(k->r, &k->out);
}

static void work_done(uv_work_t *w, int status)
{
    work *k = w->data;
    net_req *r = k->r;
    if (status < 0)
        net_fail(&k->out, 503, "the server is stopping");
    if (k->then != NULL && status == 0) {
        k->then(r, &k->out);
        if (k->arg_free != NULL)
            k->arg_free(k->out.arg);
        rt_buf_unref(k->out.body);
        free(k);
        return;
    }
    if (k->arg_free != NULL)
        k->arg_free(k->out.arg);
    if (k->out.body != NULL)
        net_reply(r, k->out.status, k->out.body, NULL, NULL);
    else
        net_reply_error(r, k->out.status != 0 ? k->out.status : 500, "%s",
                        k->out.detail[0] != '\0' ? k->out.detail : "internal error");
    free(k);
}

void net_api_work(net_req *r, net_work_fn fn, void *arg, void (*arg_free)(void *))
{
    net_api_work_then(r, fn, arg, arg_free, NULL);
}

void net_api_work_then(net_req *r, net_work_fn fn, void *arg, void (*arg_free)(void *),
                       net_work_fn then)
{
    work *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        if (arg_free != NULL)
            arg_free(arg);
        net_reply_error(r, 503, "out of memory");
        return;
    }
    k->w.data = k;
    k->r = r;
    k->fn = fn;
    k->then = then;
    k->arg_free = arg_free;
    k->out.arg = arg;
    if (uv_queue_work(r->loop, &k->w, work_run, work_done) < 0) {
        if (arg_free != NULL)
            arg_free(arg);
        free(k);
        net_reply_error(r, 503, "the server is stopping");
    }
}

void net_fail(net_outcome *out, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->detail, sizeof(out->detail), fmt, ap);
    va_end(ap);
    out->status = status;
}

void net_reply_actor(net_req *r, rt_msg *m)
{
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    if (cr == NULL) {
        int st = m->kind == RT_KIND_ERROR ? m->status : RT_EFAIL;
        if (st == RT_EFULL)
            net_reply(r, 503,
                      rt_buf_wrap((void *)"{\"detail\":\"the conversation is busy; retry\"}", 44,
                                  NULL, NULL),
                      NULL, NULL);
        else
            net_reply_error(r, st == RT_ETIMEDOUT ? 504 : 503,
                            "the conversation did not answer: %s", rt_strerror(st));
        return;
    }
    rt_buf *body;
    unsigned retry;
    int status = net_verdict_http(&cr->v, &body, &retry);
    if (body == NULL) {
        net_reply_error(r, 500, "out of memory");
        return;
    }
    char extra[64] = "";
    if (retry > 0)
        snprintf(extra, sizeof(extra), "Retry-After: %u\r\n", retry);
    net_reply(r, status, body, NULL, extra[0] != '\0' ? extra : NULL);
}

rt_actor *net_conv_actor(net_req *r)
{
    rt_actor *a = NULL;
    int e = convs_get(r->api->convs, &r->route.conv, &a);
    if (e == -ENOENT) {
        char id[37];
        rt_uuid_dashed(&r->route.conv, id);
        net_reply_error(r, 404, "Conversation not found: %s", id);
    } else if (e < 0) {
        net_reply_error(r, 503, "cannot start the conversation: %s", rt_strerror(e));
    }
    return e == 0 ? a : NULL;
}

void net_json_free(void *j)
{
    json_decref(j);
}

int net_conv_call(net_req *r, const rt_uuid *id, uint32_t kind, uint64_t arg, rt_buf *buf,
                  rt_reply_cb cb, void *ctx)
{
    r->asked = convs_home(r->api->convs, id);
    int e = convs_call(r->api->convs, id, RT_LOOP_ANY, kind, arg, buf, net_call_ms(r), cb, ctx);
    if (e == 0)
        return 0;
    rt_buf_unref(buf);
    net_reply_unreachable(r, id, e);
    return e;
}

void net_reply_unreachable(net_req *r, const rt_uuid *id, int e)
{
    char dashed[37];
    rt_uuid_dashed(id, dashed);
    if (e == -ENOENT)
        net_reply_error(r, 404, "Conversation not found: %s", dashed);
    else
        net_reply_error(r, 503, "cannot reach conversation %s: %s", dashed, rt_strerror(e));
}

static void on_answer(void *ctx, rt_msg *m)
{
    net_reply_actor(ctx, m);
}

void net_ask_conv(net_req *r, uint32_t kind, uint64_t arg, rt_buf *buf)
{
    net_conv_call(r, &r->route.conv, kind, arg, buf, on_answer, r);
}

typedef struct posting {
    net_req *r;
    rt_uuid id;
    bool run;
    net_posted_fn done;
} posting;

static void posting_end(posting *p, rt_msg *refusal)
{
    net_req *r = p->r;
    net_posted_fn done = p->done;
    free(p);
    done(r, refusal);
}

static void on_run(void *ctx, rt_msg *m)
{
    (void)m; /* already running, or not allowed now: the message is in either way */
    posting_end(ctx, NULL);
}

static void on_posted(void *ctx, rt_msg *m)
{
    posting *p = ctx;
    if (m->kind != CONV_RESULT ||
        (m->arg != PL_COMMITTED && m->arg != PL_DUPLICATE && m->arg != PL_DEFERRED)) {
        posting_end(p, m);
        return;
    }
    if (!p->run || convs_call(p->r->api->convs, &p->id, RT_LOOP_ANY, CONV_CONTROL, CONV_RUN, NULL,
                              net_call_ms(p->r), on_run, p) < 0)
        posting_end(p, NULL);
}

int net_post_message(net_req *r, const rt_uuid *id, const char *role, json_t *content, bool run,
                     net_posted_fn done)
{
    rt_buf *buf = rt_json_buf(ev_user_message(role, content));
    return buf != NULL ? net_post_event(r, id, buf, run, done) : RT_ENOMEM;
}

int net_post_event(net_req *r, const rt_uuid *id, rt_buf *buf, bool run, net_posted_fn done)
{
    posting *p = buf != NULL ? malloc(sizeof(*p)) : NULL;
    if (p == NULL) {
        rt_buf_unref(buf);
        return RT_ENOMEM;
    }
    *p = (posting){r, *id, run, done};
    int e = convs_call(r->api->convs, id, RT_LOOP_ANY, CONV_APPEND, 0, buf, net_call_ms(r),
                       on_posted, p);
    if (e < 0) {
        rt_buf_unref(buf);
        free(p);
    }
    return e;
}
