/*
 * api.h - the REST API: what a routed request does, and how it answers.
 *
 * The connection hands each complete request to net_api_handle on its
 * loop. A handler answers exactly once, at once or later (after an
 * rt_call to a conversation actor, or a store read in the thread pool),
 * with net_reply*; the request (its headers, body and query) stays valid
 * until then. Errors are {"detail": "<one line>"} with the right status.
 */
#ifndef NET_API_H
#define NET_API_H

#include "actors/conversation.h"
#include "actors/ws_stream.h"
#include "http_parse.h"
#include "query.h"
#include "route.h"
#include "runtime/rt.h"
#include "store/store.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct net_fwd_in net_fwd_in;

typedef struct net_api {
    rt_runtime *rt;
    st_store *store;
    convs *convs;
    const char *const *api_keys; /* any of them is the key; none: no auth */
    size_t napi_keys;
    uint64_t call_timeout_ms;
    uint64_t started_ms; /* uv_hrtime at start, in ms */
    bool tls;
    const struct net_server_opts *opts;
    rt_actor **loops; /* the listener actor of each loop: they serve forwarded requests */
    int nloops;
} net_api;

typedef struct net_req {
    net_api *api;
    struct net_conn *conn;
    uv_loop_t *loop;
    const hp_req *http;
    net_route route;
    net_query query;
    uint64_t t0_ns;
    void *data;      /* the handler's own state while it waits */
    int asked;       /* the loop of the conversation it asked (net_conv_call), or -1 */
    net_fwd_in *fwd; /* another node forwarded it (api_forward.c): no connection; the
                        answer goes back to that node, and it is never forwarded again */
} net_req;

/* Route, authorize, forward a write to the conversation's owner node
 * (net_forward) or run the request's handler (net_api_dispatch). */
void net_api_handle(net_req *r);
/* Run the handler of a routed, authorized request. */
void net_api_dispatch(net_req *r);

/* Answer: status, body bytes (taken; NULL for none) as application/json
 * unless ctype says otherwise, extra header lines ("Name: v\r\n", or NULL). */
void net_reply(net_req *r, int status, rt_buf *body, const char *ctype, const char *extra);
/* Answer with the 101 of a WebSocket upgrade (answer: its bytes) and make
 * the connection a stream of the conversation, served by a ws_stream actor
 * started with o (the sink is filled in here). If that cannot be done, the
 * request is answered with an HTTP error instead. */
void net_ws_upgrade(net_req *r, const char *answer, size_t len, ws_stream_opts *o);
/* Answer with a JSON value (its reference is taken), compact. */
void net_reply_json(net_req *r, int status, json_t *body);
/* Answer {"detail": "<printf>"}. */
void net_reply_error(net_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Blocking work (store reads, meta writes) runs in the loop's thread pool:
 * fn fills the outcome there, and the request is answered with it back on
 * the loop. fn must not call net_reply. */
typedef struct net_outcome {
    int status;
    rt_buf *body;     /* taken; or NULL with detail set */
    char detail[256]; /* answered as {"detail"} when body is NULL */
    void *arg;        /* the caller's */
} net_outcome;
typedef void (*net_work_fn)(net_req *r, net_outcome *out);
/* arg is handed to fn in out->arg; freed with arg_free (may be NULL) after. */
void net_api_work(net_req *r, net_work_fn fn, void *arg, void (*arg_free)(void *));
/* The same, but `then` runs on the loop with the outcome instead of the
 * answer, and answers itself (a body it does not take is freed after). */
void net_api_work_then(net_req *r, net_work_fn fn, void *arg, void (*arg_free)(void *),
                       net_work_fn then);
/* Sets out->status and out->detail. */
void net_fail(net_outcome *out, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The answer to an actor's CONV_RESULT or error reply, passed through. */
void net_reply_actor(net_req *r, rt_msg *m);
/* The conversation's actor, or an answer (404 unknown, 503) and NULL. */
rt_actor *net_conv_actor(net_req *r);
/* convs_call to conversation id (buf taken) with the server's call
 * timeout: 0 (cb runs once), or the request is answered (404 unknown,
 * 503) and the error returned. */
int net_conv_call(net_req *r, const rt_uuid *id, uint32_t kind, uint64_t arg, rt_buf *buf,
                  rt_reply_cb cb, void *ctx);
/* The answer to a request convs_call could not send (e): 404 for an
 * unknown conversation, else 503 naming it. */
void net_reply_unreachable(net_req *r, const rt_uuid *id, int e);

/* json_decref for a void * (an arg_free of net_api_work). */
void net_json_free(void *j);
/* Send the conversation's actor a request (kind, arg, buf taken) and answer
 * as it answers; 404 for an unknown conversation, 503 if it cannot be
 * reached. */
void net_ask_conv(net_req *r, uint32_t kind, uint64_t arg, rt_buf *buf);
/* Post a user MessageEvent (role, content) to conversation id, then ask for a run
 * if run is set (a run that cannot start leaves the message in). done runs
 * once: with NULL when the message is in (durable or deferred), or with the
 * actor's refusal (borrowed), which done answers. If the message cannot be
 * sent at all, done never runs and the error returns. */
typedef void (*net_posted_fn)(net_req *r, rt_msg *refusal);
int net_post_message(net_req *r, const rt_uuid *id, const char *role, json_t *content, bool run,
                     net_posted_fn done);
/* The same with the message's event made already (buf taken: on an error
 * too, then done never runs). */
int net_post_event(net_req *r, const rt_uuid *id, rt_buf *buf, bool run, net_posted_fn done);
/* In the thread pool: call fn on each event of the request's conversation
 * (parsed), from the newest if desc, until it returns true; 0, or -1 with
 * the outcome set (404, 503, 500 as every reader maps them). */
int net_walk_events(net_req *r, net_outcome *out, bool desc, bool (*fn)(json_t *e, void *ctx),
                    void *ctx);

/* Several nodes (api_forward.c): a write (a table of routes says which)
 * of a conversation that another live node owns is forwarded there and
 * answered with its answer: true, the request is taken care of; false,
 * serve it here (net_api_dispatch). Routing and forwarding run in the
 * thread pool. */
bool net_forward(net_req *r);
/* Forwards in flight from this node at most (more are refused with 503):
 * each holds a thread of the thread pool while it waits for the owner, so
 * a server on a shared store gives the pool this many threads more than
 * its other work needs (cmd_serve.c). */
#define NET_FORWARDS_MAX 64
/* The forwards in flight now (/metrics: parley_http_forwards). */
int net_forwards_out(void);
/* Whether a forwarded request's route names the conversation it was
 * forwarded for (always true for a client's request). */
bool net_forward_route_ok(net_req *r);
/* The answer to a forwarded request (net_reply's, for a request without a
 * connection): sent to the node that forwarded it; the request is gone. */
void net_forward_answer(net_req *r, int status, rt_buf *body, const char *ctype, const char *extra);
/* How long a request waits for a conversation actor: the server's call
 * timeout, shorter for a forwarded request (its sender stops waiting). */
uint64_t net_call_ms(const net_req *r);
/* Serve the requests other nodes forward here (0 or an error), and stop
 * (no call of the store's is made after it returns). */
int net_forward_serve(net_api *a);
void net_forward_unserve(net_api *a);

/* The OpenAPI description of the routes (openapi.c). */
json_t *net_openapi(void);

/* The handlers, by area (api_*.c). */
void net_api_info(net_req *r);          /* /alive /health /ready /server_info /metrics */
void net_api_conversations(net_req *r); /* /api/conversations... */
void net_api_events(net_req *r);        /* /api/conversations/{id}/events... */
void net_api_ws(net_req *r);            /* /sockets/events/{id} */
void net_api_state(net_req *r);         /* .../{id}/state */
void net_api_agent(net_req *r);         /* .../{id}/secrets, fork, navigate... */
void net_api_web(net_req *r);           /* / /conversations/{id} /assets/{name} */

/* Answer with a conversation's ConversationInfo (include_skills as the
 * request asks), status 200 or 201; 404 if there is no such conversation. */
void net_reply_conv_info(net_req *r, const rt_uuid *id, int status);

/* The request's body as a JSON value (valid UTF-8, one value, no trailing
 * bytes); NULL after answering 400/415/422 saying why. `what` names the
 * expected shape in errors ("an event object or an array"). */
json_t *net_req_json(net_req *r, const char *what);

#endif
