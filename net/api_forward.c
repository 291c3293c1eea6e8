/*
 * api_forward.c - appends on a store shared by several nodes (store.h,
 * "several nodes"): an append this node receives for a conversation that
 * another live node owns is forwarded to that node, and answered with its
 * verdict (status, Retry-After, body), as if the client had asked it; an
 * append whose owner is gone, or that has none, is made here (the store
 * takes the log over). And the other way round: the appends other nodes
 * forward here go to the conversation actor, as a client's would.
 *
 * Routing reads the log's last record and the owner's lease, and a
 * forward waits for the owner: both in the thread pool, never on a loop.
 * The appends this node writes (it wrote the log's last record) skip
 * routing. Bounds: FWD_OUT_MAX forwards in flight from this node, the
 * store's bound on forwarded bodies, and the owner's bound on what it
 * serves at once.
 */
#include "api.h"
#include "verdict.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    FWD_OUT_MAX = 64,          /* forwards in flight from this node (each holds a pool thread) */
    FWD_WAIT_MS = 25000,       /* how long a forward waits for the owner's answer */
    FWD_SERVE_CALL_MS = 20000, /* the owner's own wait for its conversation: shorter */
};

static _Atomic int fwd_out;

/* A request on its way to the owner (the pool's arg). */
typedef struct fwd_job {
    rt_buf *event;        /* a user message as its event (POST .../events); NULL: the raw body */
    bool run;             /* then ask for a run */
    net_posted_fn posted; /* the POST route's answer, when it is made here */
    unsigned retry_after;
} fwd_job;

static void fwd_job_free(void *arg)
{
    fwd_job *j = arg;
    rt_buf_unref(j->event);
    free(j);
}

/* In the pool: route, and forward if the owner is another live node.
 * out->status 0: make it here. */
static void route_work(net_req *r, net_outcome *out)
{
    st_store *s = r->api->store;
    fwd_job *j = out->arg;
    st_route to;
    char err[256] = "";
    char dashed[37];
    rt_uuid_dashed(&r->route.conv, dashed);
    int e = st_route_of(s, &r->route.conv, &to, err, sizeof(err));
    if (e == -ENOENT) {
        net_fail(out, 404, "Conversation not found: %s", dashed);
        return;
    }
    if (e < 0) {
        net_fail(out, 503, "cannot append: cannot tell which node owns conversation %s: %s", dashed,
                 err);
        return;
    }
    if (!to.forward) {
        out->status = 0;
        return;
    }
    if (atomic_fetch_add(&fwd_out, 1) >= FWD_OUT_MAX) {
        atomic_fetch_sub(&fwd_out, 1);
        net_fail(out, 503, "cannot append: %d appends are being forwarded already; retry",
                 FWD_OUT_MAX);
        return;
    }
    st_fwd_answer a;
    const void *body = j->event != NULL ? rt_buf_data(j->event) : r->http->body;
    size_t len = j->event != NULL ? rt_buf_len(j->event) : r->http->body_len;
    e = st_forward(s, &to, &r->route.conv, ST_FWD_APPEND, 0, body, len, FWD_WAIT_MS, &a, err,
                   sizeof(err));
    /* a message that is in (or deferred) is followed by its run, if asked
     * (already running, or not allowed now: the message is in either way) */
    bool in = e == 0 && (a.status == 201 || a.status == 202);
    if (in && j->event != NULL && j->run) {
        st_fwd_answer ra;
        char rerr[256];
        if (st_forward(s, &to, &r->route.conv, ST_FWD_CONTROL, CONV_RUN, NULL, 0, FWD_WAIT_MS, &ra,
                       rerr, sizeof(rerr)) == 0)
            rt_buf_unref(ra.body);
    }
    atomic_fetch_sub(&fwd_out, 1);
    if (e == -EMSGSIZE) {
        net_fail(out, 413, "%s", err);
        return;
    }
    if (e < 0) {
        net_fail(out, 503, "cannot append to conversation %s: %s", dashed, err);
        return;
    }
    if (in && j->event != NULL) { /* the POST route's own answer */
        rt_buf_unref(a.body);
        out->status = 200;
        out->body = rt_buf_copy("{\"success\":true}", 16);
        if (out->body == NULL)
            net_fail(out, 503, "out of memory");
        return;
    }
    out->status = a.status;
    out->body = a.body;
    j->retry_after = a.retry_after;
}

static void route_then(net_req *r, net_outcome *out)
{
    fwd_job *j = out->arg;
    if (out->status == 0) { /* here */
        if (j->event != NULL) {
            int e = net_post_event(r, &r->route.conv, rt_buf_ref(j->event), j->run, j->posted);
            if (e < 0)
                net_reply_unreachable(r, &r->route.conv, e);
            return;
        }
        net_append_here(r);
        return;
    }
    char extra[64] = "";
    if (j->retry_after > 0)
        snprintf(extra, sizeof(extra), "Retry-After: %u\r\n", j->retry_after);
    if (out->body != NULL) {
        rt_buf *b = out->body;
        out->body = NULL;
        net_reply(r, out->status, b, NULL, extra[0] != '\0' ? extra : NULL);
    } else {
        net_reply_error(r, out->status, "%s", out->detail[0] ? out->detail : "internal error");
    }
}

static bool forward(net_req *r, rt_buf *event, bool run, net_posted_fn posted)
{
    st_store *s = r->api->store;
    if (!st_store_shared(s) || st_conv_writes_here(s, &r->route.conv))
        return false;
    fwd_job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return false; /* here, then */
    j->event = event != NULL ? rt_buf_ref(event) : NULL;
    j->run = run;
    j->posted = posted;
    net_api_work_then(r, route_work, j, fwd_job_free, route_then);
    return true;
}

bool net_forward_append(net_req *r)
{
    return forward(r, NULL, false, NULL);
}

bool net_forward_message(net_req *r, rt_buf *event, bool run, net_posted_fn posted)
{
    return forward(r, event, run, posted);
}

/* ---- serving what other nodes forward ----------------------------------------- */

static void served(void *ctx, rt_msg *m)
{
    st_fwd *f = ctx;
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    if (cr == NULL) {
        int st = m->kind == RT_KIND_ERROR ? m->status : RT_EFAIL;
        char body[160];
        int n = snprintf(body, sizeof(body), "{\"detail\":\"the conversation did not answer: %s\"}",
                         rt_strerror(st));
        st_fwd_reply(f, st == RT_ETIMEDOUT ? 504 : 503, body, (size_t)n, 0);
        return;
    }
    rt_buf *body;
    unsigned retry;
    int status = net_verdict_http(&cr->v, &body, &retry);
    if (body == NULL) {
        static const char oom[] = "{\"detail\":\"out of memory\"}";
        st_fwd_reply(f, 500, oom, sizeof(oom) - 1, 0);
        return;
    }
    st_fwd_reply(f, status, rt_buf_data(body), rt_buf_len(body), retry);
    rt_buf_unref(body);
}

/* On a store thread: to the conversation actor, answered on a loop. */
static void serve(void *ctx, st_fwd *f, const rt_uuid *id, uint32_t what, uint64_t arg,
                  rt_buf *body)
{
    net_api *a = ctx;
    if (what == ST_FWD_CONTROL && arg != CONV_RUN) { /* nothing else is forwarded yet */
        static const char no[] = "{\"detail\":\"a forwarded control this node does not serve\"}";
        rt_buf_unref(body);
        st_fwd_reply(f, 400, no, sizeof(no) - 1, 0);
        return;
    }
    if (what == ST_FWD_APPEND && body == NULL) {
        static const char no[] = "{\"detail\":\"the request needs a JSON body\"}";
        st_fwd_reply(f, 422, no, sizeof(no) - 1, 0);
        return;
    }
    int e = what == ST_FWD_APPEND ? convs_call(a->convs, id, RT_LOOP_ANY, CONV_APPEND, 0, body,
                                               FWD_SERVE_CALL_MS, served, f)
                                  : convs_call(a->convs, id, RT_LOOP_ANY, CONV_CONTROL, CONV_RUN,
                                               body, FWD_SERVE_CALL_MS, served, f);
    if (e == 0)
        return;
    rt_buf_unref(body);
    char dashed[37], detail[200];
    rt_uuid_dashed(id, dashed);
    int n = e == -ENOENT
                ? snprintf(detail, sizeof(detail), "{\"detail\":\"Conversation not found: %s\"}",
                           dashed)
                : snprintf(detail, sizeof(detail),
                           "{\"detail\":\"cannot reach conversation %s on its owner: %s\"}", dashed,
                           rt_strerror(e));
    st_fwd_reply(f, e == -ENOENT ? 404 : 503, detail, (size_t)n, 0);
}

int net_forward_serve(net_api *a)
{
    return st_store_serve(a->store, serve, a);
}

void net_forward_unserve(net_api *a)
{
    st_store_serve(a->store, NULL, NULL);
}
