/*
 * server.h - the HTTP/1.1 server of `parley serve` (and of programs that
 * embed parley), on the runtime's worker loops.
 *
 * Each worker loop listens on its own socket bound to the same address
 * (SO_REUSEPORT), so the kernel spreads connections over the loops and a
 * connection lives on one loop for its whole life. Requests are read
 * strictly (http_parse.h), one at a time per connection (pipelined ones
 * wait their turn, and answers go out in order), routed (route.h) and
 * handled by the API (api.h), which talks to the conversation actors with
 * rt_call and reads the store in the thread pool: a loop never waits.
 *
 * Everything a peer controls is bounded: header bytes and lines, body
 * bytes, connections, time to send the headers (slowloris), silence in the
 * middle of a body, silence between keep-alive requests, unread answers.
 */
#ifndef NET_SERVER_H
#define NET_SERVER_H

#include "actors/conversation.h"
#include "runtime/rt.h"
#include "store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { NET_MAX_CONNS = 10000 }; /* open connections, by default */

typedef struct net_server_opts {
    const char *host;     /* default "127.0.0.1" */
    int port;             /* 0: any free port */
    const char *api_key;  /* NULL or "": the API needs no key */
    const char *const *api_keys; /* more keys, any of which will do (NULL- */
    size_t napi_keys;            /* or "" ones are skipped) */
    const char *tls_cert; /* both set: HTTPS */
    const char *tls_key;
    size_t header_bytes;        /* default 16 KiB */
    size_t body_bytes;          /* default 16 MiB */
    unsigned max_conns;         /* default NET_MAX_CONNS */
    uint64_t header_timeout_ms; /* first byte to end of headers; default 10 s */
    uint64_t idle_timeout_ms;   /* keep-alive and body silence; default 60 s */
    uint64_t call_timeout_ms;   /* a request's wait for an actor; default 60 s */
    /* WebSocket streams (/sockets/events/{id}) */
    uint64_t ws_ping_ms;         /* server pings; default 30 s */
    bool ws_ping_off;            /* no pings at all */
    uint64_t ws_auth_timeout_ms; /* for the first-frame auth; default 10 s */
    uint64_t ws_stall_ms;        /* a full send queue this long: 1013; default 30 s */
    size_t ws_queue_bytes;       /* send queue bound per socket; default 1 MiB */
    size_t ws_message_bytes;     /* a client message; default 1 MiB */
    int loops;                   /* serve on loops 0..loops-1; 0: every loop */
} net_server_opts;

typedef struct net_server net_server;

/* Bind, listen on every worker loop, serve. On failure err says why in one
 * line (address in use, bad certificate, ...). Not on a loop thread. */
int net_server_start(rt_runtime *rt, st_store *store, convs *cv, const net_server_opts *o,
                     net_server **out, char *err, size_t errlen);
/* "http://127.0.0.1:8000" (https with TLS), with the port actually bound. */
const char *net_server_url(const net_server *s);
/* Stop accepting, let requests in flight finish and be answered (at most
 * grace_ms), then close every connection. Blocks; not on a loop thread.
 * The runtime and store must still be running. */
void net_server_stop(net_server *s, uint64_t grace_ms);
/* After net_server_stop and once the runtime has stopped. */
void net_server_free(net_server *s);

#endif
