/*
 * server_impl.h - what the listener (server.c) and the connections
 * (conn.c) share. Not for other modules.
 */
#ifndef NET_SERVER_IMPL_H
#define NET_SERVER_IMPL_H

#include "api.h"
#include "server.h"

#include <stdatomic.h>
#include <uv.h>

struct net_tls_config;

typedef struct net_loop net_loop;

/* The listener actors' messages (RT_KIND_RANGE(5) is net/server's). */
enum {
    NET_DRAIN = RT_KIND_RANGE(5), /* stop taking connections; report when none is left */
    NET_FORCE,                    /* the same, closing every connection at once */
    NET_FWD_SERVE,                /* buf: a request another node forwarded (api_forward.c) */
    NET_CONN_MOVE,                /* buf: a connection that moves to this loop (conn.c) */
};

struct net_server {
    rt_runtime *rt;
    net_server_opts o;
    net_api api;
    struct net_tls_config *tls;
    const char **keys; /* the API keys (the strings are the caller's) */
    char url[128];
    int nloops;
    int *fds;          /* one listening socket per loop */
    rt_actor **actors; /* one listener actor per loop */
    atomic_uint conns; /* open connections, all loops */
    /* stopping: loops report when they have no connection left */
    uv_mutex_t lock;
    uv_cond_t cond;
    int drained;
};

/* The state of a loop's listener actor: its socket and its connections. */
struct net_loop {
    net_server *srv;
    int index;
    uv_loop_t *uv;
    uv_tcp_t *listener; /* NULL once closed */
    struct net_conn *conns;
    unsigned nconns;
    net_fwd_in *fwds; /* forwarded requests being served here (api_forward.c) */
    unsigned nfwds;
    bool draining, reported;
};

/* conn.c */
void net_conn_accept(net_loop *nl);
/* Take in a connection that moved here (NET_CONN_MOVE's buf, borrowed):
 * what the buf holds is closed when it goes if it is not taken. */
void net_conn_adopt(net_loop *nl, rt_buf *b);
/* Close connections that are between requests now, the others once
 * answered (draining); or every one at once (force). */
void net_conns_close(net_loop *nl, bool force);
/* server.c: a connection of nl has closed; a forwarded request it served
 * is answered. */
void net_loop_conn_gone(net_loop *nl);
void net_loop_fwd_gone(net_loop *nl);

/* api_forward.c: serve a forwarded request (NET_FWD_SERVE's buf,
 * borrowed) on nl's loop; the listener is stopping: its requests in
 * flight no longer point at nl. */
void net_forward_start(net_loop *nl, rt_buf *b);
void net_forward_detach(net_loop *nl);

#endif
