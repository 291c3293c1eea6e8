/*
 * msg.h - what travels through a mailbox.
 *
 * A message is a small fixed header plus an optional rt_buf payload. The
 * runtime allocates it in rt_send/rt_ask and frees it after the receiver's
 * handler returns; the handler borrows it and keeps the payload by taking its
 * own reference (rt_buf_ref). A message that carries a reply address is a
 * request: it is answered exactly once, by the receiver (rt_reply, or later
 * through an rt_promise) or, failing that, by the runtime with an error
 * (RT_KIND_ERROR). Messages to an actor that has stopped are dropped the same
 * way: requests among them still get their error reply.
 */
#ifndef RT_MSG_H
#define RT_MSG_H

#include "buf.h"
#include "mpsc.h"

#include <stdint.h>

struct rt_actor;

/* Kinds below RT_KIND_USER belong to the runtime. */
enum {
    RT_SYS_START = 1, /* run the behaviour's init: first message of every actor */
    RT_SYS_STOP = 2,  /* exit normally once what is queued before it is handled */
    RT_SYS_EXIT = 3,  /* to a supervisor: a child exited (runtime use) */
    RT_SYS_KICK = 4,  /* to a supervisor: a child it waited for has started */
    /* Delivered to handlers: a request of yours could not be answered.
     * status says why (RT_ECLOSED, RT_ENOREPLY, RT_ETIMEDOUT, a handler's
     * failure code...), arg holds the kind of the request. */
    RT_KIND_ERROR = 16,
    RT_KIND_USER = 256,
};

/* Kinds from RT_KIND_USER up are the modules', each in a range of 100 of
 * its own, so that an actor that hears from several modules can always
 * tell their messages apart. The ranges are handed out here, and nowhere
 * else:
 *   RT_KIND_RANGE(1)    conversations (actors/conversation.h, conv_impl.h)
 *   RT_KIND_RANGE(3)    WebSocket streams (actors/ws_stream.h, ws_stream.c)
 *   RT_KIND_RANGE(4)    the client follower (net/follower.h, follower.c)
 *   RT_KIND_RANGE(5)    the HTTP server (net/server.c)
 *   RT_KIND_RANGE(6)    the public API's own actors (actors/parley_*.c)
 *   RT_KIND_RANGE(7)    the visualizer (actors/viz.h, viz.c)
 *   RT_KIND_RANGE(9)    tools, benchmarks and tests, among their own actors
 *   RT_KIND_RANGE(100)  and up: embedders' own actors (parley.h) */
#define RT_KIND_RANGE(n) (RT_KIND_USER + 100 * (n))

typedef struct rt_msg {
    rt_mpsc_node node;         /* mailbox link, runtime-owned */
    uint32_t kind;             /* RT_KIND_USER and up, or RT_KIND_ERROR */
    int32_t status;            /* 0, or a negative error code in replies */
    uint64_t sender;           /* id of the sending actor; 0 from outside any actor */
    struct rt_actor *reply_to; /* set on requests; holds a reference */
    uint64_t arg;              /* a small inline value */
    rt_buf *buf;               /* payload or NULL; the message holds one reference */
    uint32_t epoch;            /* runtime use: the incarnation a timer message belongs to */
    uint32_t flags;            /* runtime use */
    uint64_t tag;              /* runtime use: which rt_call a request is, copied into its reply */
} rt_msg;

#endif
