/*
 * api_forward.c - the writes of a conversation on a store shared by
 * several nodes (store.h, "several nodes"): a write this node receives
 * for a conversation that another live node owns is forwarded to that
 * node as the HTTP request it is (method, target, body), and answered
 * with the owner's answer (status, Content-Type, header lines, body), as
 * if the client had asked the owner; a write whose owner is gone, or that
 * has none, is served here (the store takes the log over at its first
 * append). And the other way round: the requests other nodes forward here
 * are served by this node's own routes, as a client's would be, and never
 * forwarded again.
 *
 * Which routes are writes is one table (WRITES): every route that changes
 * a conversation's log, its info or what its owner holds for it (secrets,
 * the hosted agent's run). Reads are served by any node; so are the
 * routes every node answers alike without changing anything (those a
 * hosted agent cannot honour), and fork, which reads its source and
 * creates a conversation of this node's.
 *
 * Routing reads the log's last record and the owner's lease, and a
 * forward waits for the owner: both in the thread pool, never on a loop.
 * The writes of a conversation this node writes (it wrote the log's last
 * record) skip routing. Bounds: NET_FORWARDS_MAX forwards in flight from this
 * node, the store's bound on forwarded bodies, and the owner's bound on
 * what it serves at once. A served request runs on a listener's loop
 * (server.c hands it over), and a stopping server waits for it as for a
 * connection's.
 */
#include "api.h"
#include "http_metrics.h"
#include "server_impl.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    FWD_WAIT_MS = 25000,       /* how long a forward waits for the owner's answer */
    FWD_SERVE_CALL_MS = 20000, /* the owner's own wait for its conversation: shorter */
};

/* The routes that write a conversation: forwarded to its owner. */
static const bool WRITES[NET_R_COUNT] = {
    [NET_R_CONV_DELETE] = true,         [NET_R_CONV_PATCH] = true,     [NET_R_CONV_RUN] = true,
    [NET_R_CONV_PAUSE] = true,          [NET_R_CONV_INTERRUPT] = true, [NET_R_CONV_SECRETS] = true,
    [NET_R_CONV_CONFIRM_POLICY] = true, [NET_R_CONV_SECURITY] = true,  [NET_R_EV_POST] = true,
    [NET_R_EV_APPEND] = true,           [NET_R_EV_CONFIRM] = true,
};

static _Atomic int fwd_out;

int net_forwards_out(void)
{
    return atomic_load(&fwd_out);
}

/* ---- forwarding a write to its owner ------------------------------------------- */

/* In the pool: route, and forward if the owner is another live node.
 * out->status 0: serve it here. */
static void route_work(net_req *r, net_outcome *out)
{
    st_store *s = r->api->store;
    st_fwd_answer *a = out->arg;
    st_route to;
    char err[256] = "";
    char dashed[37];
    rt_uuid_dashed(&r->route.conv, dashed);
    int e = st_route_of(s, &r->route.conv, &to, err, sizeof(err));
    if (e == -ENOENT) {
        net_fail(out, 404, "Conversation not found: %s", dashed);
        return;
    }
    if (e < 0) { /* the cluster's words first, naming it */
        char says[200];
        net_fail(out, 503, "cannot tell which node owns conversation %s: %s; %s", dashed,
                 st_store_strerror(s, e, says, sizeof(says)), err);
        return;
    }
    if (!to.forward) {
        out->status = 0;
        return;
    }
    if (atomic_fetch_add(&fwd_out, 1) >= NET_FORWARDS_MAX) {
        atomic_fetch_sub(&fwd_out, 1);
        net_fail(out, 503,
                 "cannot forward to the owner of conversation %s: %d requests are "
                 "being forwarded already; retry",
                 dashed, NET_FORWARDS_MAX);
        return;
    }
    st_fwd_req req = {.method = r->http->method,
                      .target = r->http->target,
                      .body = r->http->body,
                      .len = r->http->body_len};
    e = st_forward(s, &to, &r->route.conv, &req, FWD_WAIT_MS, a, err, sizeof(err));
    atomic_fetch_sub(&fwd_out, 1);
    if (e == -EMSGSIZE) {
        net_fail(out, 413, "%s", err);
        return;
    }
    if (e < 0) {
        net_fail(out, 503, "cannot %s %s of conversation %s: %s", r->http->method, r->route.name,
                 dashed, err);
        return;
    }
    out->status = a->status;
    out->body = a->body;
    a->body = NULL;
}

static void route_then(net_req *r, net_outcome *out)
{
    st_fwd_answer *a = out->arg;
    if (out->status == 0) { /* here */
        net_api_dispatch(r);
        return;
    }
    if (out->body == NULL && out->detail[0] != '\0') { /* this node's own refusal */
        net_reply_error(r, out->status, "%s", out->detail);
        return;
    }
    rt_buf *b = out->body;
    out->body = NULL;
    net_reply(r, out->status, b, a->ctype[0] != '\0' ? a->ctype : NULL,
              a->headers[0] != '\0' ? a->headers : NULL);
}

static void answer_free(void *arg)
{
    st_fwd_answer *a = arg;
    rt_buf_unref(a->body);
    free(a);
}

bool net_forward(net_req *r)
{
    st_store *s = r->api->store;
    if (r->fwd != NULL || !r->route.has_conv || !WRITES[r->route.id] || !st_store_shared(s) ||
        st_conv_writes_here(s, &r->route.conv))
        return false;
    st_fwd_answer *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return false; /* here, then */
    net_api_work_then(r, route_work, a, answer_free, route_then);
    return true;
}

/* ---- serving what other nodes forward ----------------------------------------- */

/* A forwarded request on its way to a loop, then being served there. */
struct net_fwd_in {
    st_fwd *f;        /* answered once, then gone */
    rt_uuid conv;     /* what the forwarding node routed */
    net_loop *nl;     /* the loop serving it (NULL: not yet, or its listener is gone) */
    bool started;     /* a loop took it (else dropping its message answers it) */
    rt_buf *self;     /* the buffer whose memory this is, held while served */
    net_fwd_in *next; /* on nl's list while served */
    net_fwd_in *prev;
    net_req req;
    hp_req http;
    rt_buf *body; /* NULL: none */
    char *method, *target;
};

static void fwd_in_free(net_fwd_in *fi)
{
    rt_buf_unref(fi->body);
    free(fi->method);
    free(fi->target);
    free(fi);
}

static void refuse(st_fwd *f, int status, const char *why)
{
    char body[200];
    int n = snprintf(body, sizeof(body), "{\"detail\":\"%s\"}", why);
    st_fwd_reply(f, status, body, (size_t)n, NULL, NULL);
}

/* The last reference to the request's buffer (its memory) went: one that
 * no loop took is answered now. */
static void fwd_in_dropped(void *data, void *ctx)
{
    (void)ctx;
    net_fwd_in *fi = data;
    if (!fi->started)
        refuse(fi->f, 503, "the owner node is stopping; retry");
    fwd_in_free(fi);
}

/* On a store thread: to a listener's loop, round robin. */
static void serve(void *ctx, st_fwd *f, const rt_uuid *id, const st_fwd_req *req)
{
    net_api *a = ctx;
    static _Atomic unsigned next;
    net_fwd_in *fi = calloc(1, sizeof(*fi));
    if (fi == NULL) {
        refuse(f, 503, "the owner node is out of memory");
        return;
    }
    fi->f = f;
    fi->conv = *id;
    fi->method = strdup(req->method);
    fi->target = strdup(req->target);
    fi->body = req->body != NULL ? rt_buf_copy(req->body, req->len) : NULL;
    rt_buf *b = NULL;
    if (fi->method == NULL || fi->target == NULL || (req->body != NULL && fi->body == NULL) ||
        (b = rt_buf_wrap(fi, sizeof(*fi), fwd_in_dropped, NULL)) == NULL) {
        refuse(f, 503, "the owner node is out of memory");
        fwd_in_free(fi);
        return;
    }
    int n = a->nloops > 0 ? a->nloops : 1;
    rt_actor *to = a->loops != NULL ? a->loops[atomic_fetch_add(&next, 1) % (unsigned)n] : NULL;
    if (to == NULL || rt_send(to, NET_FWD_SERVE, 0, b) < 0)
        rt_buf_unref(b); /* answered by fwd_in_dropped */
}

void net_forward_start(net_loop *nl, rt_buf *b)
{
    net_fwd_in *fi = (net_fwd_in *)(void *)rt_buf_wdata(b);
    if (nl->draining)
        return; /* answered when the message's buffer goes */
    fi->started = true;
    fi->self = rt_buf_ref(b); /* until answered */
    fi->nl = nl;
    nl->nfwds++;
    fi->next = nl->fwds;
    if (nl->fwds != NULL)
        nl->fwds->prev = fi;
    nl->fwds = fi;
    fi->http = (hp_req){.method = fi->method,
                        .target = fi->target,
                        .body = fi->body != NULL ? rt_buf_data(fi->body) : NULL,
                        .body_len = fi->body != NULL ? rt_buf_len(fi->body) : 0,
                        .keep_alive = true,
                        .minor = 1};
    net_req *r = &fi->req;
    *r = (net_req){.api = &nl->srv->api,
                   .loop = nl->uv,
                   .http = &fi->http,
                   .t0_ns = uv_hrtime(),
                   .fwd = fi,
                   .asked = -1};
    net_api_handle(r);
}

void net_forward_detach(net_loop *nl)
{
    for (net_fwd_in *fi = nl->fwds; fi != NULL; fi = fi->next)
        fi->nl = NULL;
    nl->fwds = NULL;
    nl->nfwds = 0;
}

bool net_forward_route_ok(net_req *r)
{
    return r->fwd == NULL || (r->route.has_conv && rt_uuid_eq(&r->route.conv, &r->fwd->conv));
}

uint64_t net_call_ms(const net_req *r)
{
    uint64_t ms = r->api->call_timeout_ms;
    return r->fwd != NULL && (ms == 0 || ms > FWD_SERVE_CALL_MS) ? FWD_SERVE_CALL_MS : ms;
}

void net_forward_answer(net_req *r, int status, rt_buf *body, const char *ctype, const char *extra)
{
    net_fwd_in *fi = r->fwd;
    uint64_t us = (uv_hrtime() - r->t0_ns) / 1000;
    rt_log(status >= 500 ? RT_LOG_WARN : RT_LOG_DEBUG, "http",
           "method=%s route=%s status=%d us=%llu forwarded", r->http->method,
           r->route.name != NULL && r->route.name[0] != '\0' ? r->route.name : "-", status,
           (unsigned long long)us);
    net_query_free(&r->query);
    net_metrics_request(r->route.id, status);
    st_fwd_reply(fi->f, status, body != NULL ? rt_buf_data(body) : NULL,
                 body != NULL ? rt_buf_len(body) : 0, ctype, extra);
    rt_buf_unref(body);
    net_loop *nl = fi->nl;
    if (nl != NULL) {
        if (fi->prev != NULL)
            fi->prev->next = fi->next;
        else
            nl->fwds = fi->next;
        if (fi->next != NULL)
            fi->next->prev = fi->prev;
        net_loop_fwd_gone(nl);
    }
    rt_buf_unref(fi->self); /* frees it, or the message does when its handler returns */
}

int net_forward_serve(net_api *a)
{
    return st_store_serve(a->store, serve, a);
}

void net_forward_unserve(net_api *a)
{
    st_store_serve(a->store, NULL, NULL);
}
