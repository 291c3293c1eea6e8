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
    bool draining, reported;
};

/* conn.c */
void net_conn_accept(net_loop *nl);
/* Close connections that are between requests now, the others once
 * answered (draining); or every one at once (force). */
void net_conns_close(net_loop *nl, bool force);
/* server.c: a connection of nl has closed. */
void net_loop_conn_gone(net_loop *nl);

#endif
