/*
 * conn.h - a connection, as conn.c (HTTP/1.1) and conn_ws.c (the same
 * connection after a WebSocket upgrade) share it. Not for other modules.
 */
#ifndef NET_CONN_H
#define NET_CONN_H

#include "server_impl.h"
#include "tls.h"

#include <stdbool.h>
#include <stdint.h>

enum {
    IN_MAX = 1 << 20,  /* unparsed input held while a request is handled */
    OUT_MAX = 8 << 20, /* answers queued and not yet taken by the peer */
    READ_CHUNK = 64 << 10,
};

typedef struct conn_ws conn_ws;
typedef struct net_conn net_conn;
struct net_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    net_loop *nl; /* NULL once the listener state is gone */
    net_conn *next, *prev;
    int refs;
    unsigned writes; /* uv_writes not completed */
    hp_parser *hp;   /* NULL after an upgrade */
    net_tls *tls;
    conn_ws *ws; /* after an upgrade: the connection speaks WebSocket */
    uint8_t *in;
    size_t in_off, in_len, in_cap;
    bool in_borrowed; /* in is the loop's read buffer, during one on_read */
    net_req *req;     /* the request being handled; kept between requests */
    bool busy;        /* req is being handled */
    bool started;     /* bytes of the next request have come */
    bool closing;     /* no more requests: close once the answers are out */
    bool closed;      /* uv_close was called */
    bool eof;         /* the peer shut its side */
    bool reading;
    bool in_process;
    bool abandoned; /* answered 503 at a forced stop: the API's answer is dropped */
    uint64_t t0;    /* when the current request's first byte came (ms) */
    uint64_t quiet_since; /* when it was last armed not busy (ms): idleness, a body's silence */
    /* the loop of the conversations its last requests asked, when another
     * (home_n requests in a row): it moves there (conn.c) */
    int home;
    unsigned home_n;
    int moving;       /* handles still closing before it moves */
    int moved_fd;     /* the socket, while it moves */
    rt_buf *move_buf; /* NET_CONN_MOVE's, and its destination */
    rt_actor *move_to;
};

/* conn.c */
void net_conn_close(net_conn *c);
void net_conn_unref(net_conn *c);
/* Send the n buffers in order: at once what the socket takes, the rest
 * queued. head (malloc'd, or NULL) and the nkeep references of keep are
 * the buffers' memory, given up once sent (or at once on failure). b is
 * used as scratch. A failure closes the connection. */
void net_conn_write(net_conn *c, uv_buf_t *b, int n, char *head, rt_buf **keep, int nkeep);
/* The loop's read buffer (conn.c reads into it). */
uint8_t *net_conn_read_buf(void);

/* conn_ws.c: after the 101 has been queued. */
void net_conn_ws_input(net_conn *c, const uint8_t *data, size_t len);
void net_conn_ws_timer(net_conn *c);
void net_conn_ws_written(net_conn *c);  /* a write completed */
void net_conn_ws_closed(net_conn *c);   /* the socket is closing */
void net_conn_ws_free(net_conn *c);     /* the last reference is gone */
void net_conn_ws_shutdown(net_conn *c); /* the server stops: 1001, then close */

#endif
