/*
 * client.c - a client connection on libuv. See client.h.
 *
 * The socket lives in its own small struct (sock), so a connection can be
 * dropped and a new one made while the old handle is still closing. The
 * client itself is freed from its timer's close callback, and not while
 * one of its callbacks runs (refs counts those): a callback may free it.
 */
#include "net/client.h"
#include "net/ws.h"
#include "net/ws_client.h"
#include "runtime/buf.h"
#include "runtime/tbuf.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    TIMEOUT_DEFAULT_MS = 30000,
    MESSAGE_DEFAULT = 64 << 20,
    PLAIN_CHUNK = 64 << 10,
    HEAD_MAX = 2048,
};

typedef enum { C_NONE, C_RESOLVING, C_CONNECTING, C_HANDSHAKE, C_READY } phase;

typedef struct sock {
    uv_tcp_t tcp;
    net_client *c; /* NULL once dropped */
} sock;

typedef struct resolve {
    uv_getaddrinfo_t req;
    net_client *c; /* NULL once abandoned */
} resolve;

typedef struct wreq {
    uv_write_t req;
    rt_buf *b;
} wreq;

struct net_client {
    uv_loop_t *loop;
    net_client_opts o;
    net_url url;
    char *api_key;
    uv_timer_t timer;
    phase ph;
    sock *s;
    resolve *res;
    net_tls *tls;
    hr_parser *hp;
    net_ws *ws;  /* after a 101 */
    rt_buf *out; /* the request, until the connection is ready */
    bool busy;   /* a request is unanswered */
    bool upgrading;
    char accept[NET_WS_ACCEPT_LEN + 1];
    uint64_t last_rx, requests;
    int refs;  /* callbacks running */
    bool dead; /* freed by the caller: goes when refs is 0 */
};

static void drop(net_client *c);

/* ------------------------------------------------------------- lifetime --- */

static void on_timer_closed(uv_handle_t *h)
{
    net_client *c = h->data;
    free(c->api_key);
    free(c);
}

static void really_free(net_client *c)
{
    drop(c);
    uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

/* Around a callback: false when the client was freed by it. */
static void hold(net_client *c)
{
    c->refs++;
}

static bool release(net_client *c)
{
    if (--c->refs == 0 && c->dead) {
        really_free(c);
        return false;
    }
    return !c->dead;
}

net_client *net_client_new(uv_loop_t *loop, const net_client_opts *o)
{
    if (loop == NULL || o == NULL || o->url == NULL)
        return NULL;
    net_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->loop = loop;
    c->o = *o;
    c->url = *o->url;
    c->o.url = &c->url;
    if (c->o.timeout_ms == 0)
        c->o.timeout_ms = TIMEOUT_DEFAULT_MS;
    if (c->o.message_bytes == 0)
        c->o.message_bytes = MESSAGE_DEFAULT;
    if (o->api_key != NULL && (c->api_key = strdup(o->api_key)) == NULL) {
        free(c);
        return NULL;
    }
    c->o.api_key = c->api_key;
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    return c;
}

void net_client_free(net_client *c)
{
    if (c == NULL || c->dead)
        return;
    c->dead = true;
    if (c->refs == 0)
        really_free(c);
}

/* ----------------------------------------------------------- connection --- */

static void on_sock_closed(uv_handle_t *h)
{
    free(h->data);
}

/* Close the connection and forget its state; no callback. */
static void drop(net_client *c)
{
    if (c->res != NULL) {
        c->res->c = NULL; /* freed when it completes */
        uv_cancel((uv_req_t *)&c->res->req);
        c->res = NULL;
    }
    if (c->s != NULL) {
        c->s->c = NULL;
        uv_close((uv_handle_t *)&c->s->tcp, on_sock_closed);
        c->s = NULL;
    }
    net_tls_free(c->tls);
    c->tls = NULL;
    hr_free(c->hp);
    c->hp = NULL;
    net_ws_free(c->ws);
    c->ws = NULL;
    rt_buf_unref(c->out);
    c->out = NULL;
    c->ph = C_NONE;
    c->upgrading = false;
    uv_timer_stop(&c->timer);
}

/* The connection failed: drop it and tell whoever waited. */
static void fail(net_client *c, const char *reason)
{
    char why[300]; /* reason may be the TLS or WebSocket engine's, which drop frees */
    snprintf(why, sizeof(why), "%s", reason);
    bool was_ws = c->ws != NULL, was_busy = c->busy;
    drop(c);
    c->busy = false;
    hold(c);
    if (was_ws && c->o.cb.ws_closed != NULL)
        c->o.cb.ws_closed(c->o.ud, 0, why);
    else if (was_busy && c->o.cb.response != NULL)
        c->o.cb.response(c->o.ud, NULL, why);
    release(c);
}

void net_client_reset(net_client *c, const char *why)
{
    if (c != NULL && !c->dead)
        fail(c, why != NULL ? why : "connection reset by the client");
}

static void on_written(uv_write_t *w, int status)
{
    wreq *r = (wreq *)w;
    (void)status; /* a failed write shows as a read error or EOF */
    rt_buf_unref(r->b);
    free(r);
}

/* Write b (the reference is taken) as it is. */
static int write_raw(net_client *c, rt_buf *b)
{
    wreq *w = malloc(sizeof(*w));
    if (w == NULL) {
        rt_buf_unref(b);
        return -1;
    }
    w->b = b;
    uv_buf_t ub = uv_buf_init((char *)rt_buf_data(b), (unsigned)rt_buf_len(b));
    if (uv_write(&w->req, (uv_stream_t *)&c->s->tcp, &ub, 1, on_written) != 0) {
        rt_buf_unref(b);
        free(w);
        return -1;
    }
    return 0;
}

/* The TLS engine's output (records, handshake messages, alerts). */
static int tls_flush(net_client *c)
{
    rt_buf *b = NULL;
    if (net_tls_take_output(c->tls, &b) < 0)
        return -1;
    return b != NULL ? write_raw(c, b) : 0;
}

/* Write b (taken) on the socket, encrypted when TLS. */
static int send_buf(net_client *c, rt_buf *b)
{
    if (c->tls == NULL)
        return write_raw(c, b);
    int r = net_tls_write(c->tls, rt_buf_data(b), rt_buf_len(b));
    rt_buf_unref(b);
    return r < 0 ? -1 : tls_flush(c);
}

static void ready(net_client *c)
{
    c->ph = C_READY;
    if (c->out != NULL) {
        rt_buf *b = c->out;
        c->out = NULL;
        if (send_buf(c, b) != 0)
            fail(c, "cannot write to the server");
    }
}

/* ---------------------------------------------------------------- input --- */

static void ws_flush(net_client *c)
{
    rt_buf *b = NULL;
    if (c->ws != NULL && net_ws_take_output(c->ws, &b) == 0 && b != NULL && send_buf(c, b) != 0)
        fail(c, "cannot write to the server");
}

static void ws_end(net_client *c, int code, const char *why)
{
    drop(c);
    hold(c);
    if (c->o.cb.ws_closed != NULL)
        c->o.cb.ws_closed(c->o.ud, code, why);
    release(c);
}

/* WebSocket bytes. False when the connection is gone (or the client). */
static bool ws_in(net_client *c, const uint8_t *p, size_t n)
{
    sock *s = c->s;
    while (n > 0 || p != NULL) {
        size_t k = n < PLAIN_CHUNK ? n : PLAIN_CHUNK;
        if (k > 0 && net_ws_input(c->ws, p, k) < 0) {
            fail(c, "the server sent too much WebSocket input at once");
            return false;
        }
        p += k, n -= k;
        for (;;) {
            net_ws_msg m;
            int r = net_ws_read(c->ws, &m);
            if (r == 0)
                break;
            if (r < 0) {
                int code = r == NET_WS_CLOSED ? net_ws_peer_close_code(c->ws) : 0;
                char why[160];
                snprintf(why, sizeof(why), "%s",
                         r == NET_WS_CLOSED ? "the server closed the WebSocket"
                                            : net_ws_error(c->ws));
                ws_flush(c);
                if (c->s == s)
                    ws_end(c, code, why);
                return false;
            }
            if ((m.opcode == NET_WS_TEXT || m.opcode == NET_WS_BINARY) && c->o.cb.message) {
                hold(c);
                c->o.cb.message(c->o.ud, m.data, m.len);
                if (!release(c) || c->s != s)
                    return false;
            }
        }
        ws_flush(c);
        if (c->s != s)
            return false;
        if (n == 0)
            break;
    }
    return true;
}

/* The response is whole: the 101 of an upgrade, or an answer. */
static bool answered(net_client *c, const uint8_t *rest, size_t n)
{
    sock *s = c->s;
    const hr_resp *r = hr_response(c->hp);
    uv_timer_stop(&c->timer);
    c->busy = false;
    if (c->upgrading) {
        char err[200];
        c->upgrading = false;
        if (net_ws_client_check(r, c->accept, err, sizeof(err)) != 0) {
            hold(c);
            if (c->o.cb.response != NULL)
                c->o.cb.response(c->o.ud, r, err);
            if (release(c) && c->s == s)
                drop(c);
            return false;
        }
        net_ws_limits l = {.message_bytes = c->o.message_bytes};
        if ((c->ws = net_ws_new_client(&l)) == NULL) {
            c->busy = true;
            fail(c, "out of memory");
            return false;
        }
        c->last_rx = uv_now(c->loop);
        hold(c);
        if (c->o.cb.response != NULL)
            c->o.cb.response(c->o.ud, r, NULL);
        if (!release(c) || c->s != s)
            return false;
        return n == 0 || ws_in(c, rest, n);
    }
    bool keep = r->keep_alive;
    hold(c);
    if (c->o.cb.response != NULL)
        c->o.cb.response(c->o.ud, r, NULL);
    if (!release(c) || c->s != s)
        return false;
    if (!keep || n > 0) { /* bytes nobody asked for: the connection is not to be trusted */
        drop(c);
        return false;
    }
    return true;
}

/* Plaintext from the server. False when the connection is gone. */
static bool plain_in(net_client *c, const uint8_t *p, size_t n)
{
    if (c->ws != NULL)
        return ws_in(c, p, n);
    while (n > 0) {
        if (!c->busy) {
            drop(c); /* an answer nobody asked for */
            return false;
        }
        bool done = false;
        ssize_t k = hr_feed(c->hp, p, n, &done);
        if (k < 0) {
            char why[200];
            snprintf(why, sizeof(why), "a malformed answer: %s", hr_error(c->hp));
            fail(c, why);
            return false;
        }
        p += k, n -= (size_t)k;
        if (done)
            return answered(c, p, n);
    }
    return true;
}

/* A loop's scratch: what a read brings, then (TLS) its plaintext. */
static rt_tbuf scratch = RT_TBUF_INIT(2 * PLAIN_CHUNK);

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    char *buf = rt_tbuf_get(&scratch); /* NULL: UV_ENOBUFS, a failed read */
    (void)h, (void)hint;
    *b = uv_buf_init(buf, buf != NULL ? PLAIN_CHUNK : 0);
}

static bool tls_in(net_client *c, const uint8_t *p, size_t n)
{
    uint8_t *plain = (uint8_t *)rt_tbuf_get(&scratch) + PLAIN_CHUNK; /* on_alloc made it */
    sock *s = c->s;
    if (net_tls_input(c->tls, p, n) < 0) {
        fail(c, net_tls_error(c->tls));
        return false;
    }
    for (;;) {
        ssize_t k = net_tls_read(c->tls, plain, PLAIN_CHUNK);
        if (tls_flush(c) != 0) {
            fail(c, "cannot write to the server");
            return false;
        }
        if (k == NET_TLS_CLOSED) {
            fail(c, "the server closed the TLS session");
            return false;
        }
        if (k < 0) {
            fail(c, net_tls_error(c->tls));
            return false;
        }
        if (c->ph == C_HANDSHAKE && net_tls_handshake_done(c->tls)) {
            ready(c);
            if (c->s != s)
                return false;
        }
        if (k == 0)
            return true;
        if (!plain_in(c, plain, (size_t)k) || c->s != s)
            return false;
    }
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    sock *s = st->data;
    net_client *c = s->c;
    if (c == NULL)
        return;
    if (n > 0) {
        c->last_rx = uv_now(c->loop);
        if (c->tls != NULL)
            tls_in(c, (const uint8_t *)b->base, (size_t)n);
        else
            plain_in(c, (const uint8_t *)b->base, (size_t)n);
        return;
    }
    if (n == 0)
        return;
    if (n == UV_EOF && c->busy && c->ws == NULL && c->hp != NULL && hr_finish(c->hp) == 1) {
        answered(c, NULL, 0); /* a body read to the end of the connection */
        if (c->s == s)
            drop(c);
        return;
    }
    if (n == UV_EOF && !c->busy && c->ws == NULL) {
        drop(c); /* an idle kept-alive connection the server closed: made again when needed */
        return;
    }
    char why[160];
    snprintf(why, sizeof(why), "%s",
             n == UV_EOF ? "the server closed the connection" : uv_strerror((int)n));
    fail(c, why);
}

static void on_connect(uv_connect_t *req, int status)
{
    sock *s = req->data;
    free(req);
    net_client *c = s->c;
    if (c == NULL)
        return;
    if (status < 0) {
        char why[300];
        snprintf(why, sizeof(why), "cannot connect to %s: %s", c->url.authority,
                 uv_strerror(status));
        fail(c, why);
        return;
    }
    if (uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read) != 0) {
        fail(c, "cannot read from the server");
        return;
    }
    if (!c->url.tls) {
        ready(c);
        return;
    }
    c->ph = C_HANDSHAKE;
    if ((c->tls = net_tls_new_client(c->o.tls, c->url.host)) == NULL) {
        fail(c, c->o.tls == NULL ? "https needs a TLS configuration" : "cannot start TLS");
        return;
    }
    if (net_tls_read(c->tls, NULL, 0) < 0 || tls_flush(c) != 0) /* the ClientHello */
        fail(c, net_tls_error(c->tls));
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *ai)
{
    resolve *r = (resolve *)req;
    net_client *c = r->c;
    free(r);
    if (c == NULL) {
        uv_freeaddrinfo(ai);
        return;
    }
    c->res = NULL;
    if (status < 0 || ai == NULL) {
        char why[300];
        snprintf(why, sizeof(why), "cannot resolve %s: %s", c->url.host, uv_strerror(status));
        uv_freeaddrinfo(ai);
        fail(c, why);
        return;
    }
    sock *s = calloc(1, sizeof(*s));
    uv_connect_t *creq = malloc(sizeof(*creq));
    if (s == NULL || creq == NULL) {
        free(s);
        free(creq);
        uv_freeaddrinfo(ai);
        fail(c, "out of memory");
        return;
    }
    uv_tcp_init(c->loop, &s->tcp);
    s->tcp.data = s;
    s->c = c;
    c->s = s;
    c->ph = C_CONNECTING;
    uv_tcp_nodelay(&s->tcp, 1);
    creq->data = s;
    int e = uv_tcp_connect(creq, &s->tcp, ai->ai_addr, on_connect);
    uv_freeaddrinfo(ai);
    if (e != 0) {
        free(creq);
        char why[300];
        snprintf(why, sizeof(why), "cannot connect to %s: %s", c->url.authority, uv_strerror(e));
        fail(c, why);
        return;
    }
    if ((c->hp = hr_new(NULL)) == NULL)
        fail(c, "out of memory");
}

static void on_timeout(uv_timer_t *t)
{
    net_client *c = t->data;
    char why[400];
    snprintf(why, sizeof(why), "no answer from %s in %.1f s", c->url.authority,
             (double)c->o.timeout_ms / 1000);
    fail(c, why);
}

/* Send the request in b (taken), connecting first when needed. */
static int start(net_client *c, rt_buf *b)
{
    c->busy = true;
    uv_timer_start(&c->timer, on_timeout, c->o.timeout_ms, 0);
    if (c->ph == C_READY) {
        if (send_buf(c, b) != 0)
            fail(c, "cannot write to the server"); /* answered, with the error */
        return 0;
    }
    c->out = b;
    if (c->ph != C_NONE)
        return 0;
    resolve *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        c->busy = false;
        uv_timer_stop(&c->timer);
        rt_buf_unref(c->out);
        c->out = NULL;
        return -1;
    }
    r->c = c;
    c->res = r;
    c->ph = C_RESOLVING;
    char port[8];
    snprintf(port, sizeof(port), "%d", c->url.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int e = uv_getaddrinfo(c->loop, &r->req, on_resolved, c->url.host, port, &hints);
    if (e != 0) {
        free(r);
        c->res = NULL;
        char why[300];
        snprintf(why, sizeof(why), "cannot resolve %s: %s", c->url.host, uv_strerror(e));
        fail(c, why);
    }
    return 0;
}

/* ------------------------------------------------------------- requests --- */

int net_client_request(net_client *c, const char *method, const char *path, const void *body,
                       size_t len)
{
    if (c == NULL || c->dead || c->busy || c->ws != NULL || method == NULL || path == NULL ||
        (body == NULL && len > 0))
        return -1;
    char head[HEAD_MAX];
    int h = snprintf(head, sizeof(head),
                     "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: parley\r\n"
                     "Accept: application/json\r\n%s%s%s",
                     method, c->url.prefix, path, c->url.authority,
                     c->api_key ? "X-Session-API-Key: " : "", c->api_key ? c->api_key : "",
                     c->api_key ? "\r\n" : "");
    if (h < 0 || (size_t)h >= sizeof(head))
        return -1;
    int t = body != NULL
                ? snprintf(head + h, sizeof(head) - (size_t)h,
                           "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", len)
                : snprintf(head + h, sizeof(head) - (size_t)h, "\r\n");
    if (t < 0 || (size_t)(h + t) >= sizeof(head))
        return -1;
    size_t hl = (size_t)(h + t);
    rt_buf *b = rt_buf_new(hl + len);
    if (b == NULL)
        return -1;
    memcpy(rt_buf_wdata(b), head, hl);
    if (len > 0)
        memcpy(rt_buf_wdata(b) + hl, body, len);
    c->requests++;
    return start(c, b);
}

int net_client_upgrade(net_client *c, const char *path)
{
    if (c == NULL || c->dead || c->busy || c->ws != NULL || path == NULL)
        return -1;
    char full[1024], req[HEAD_MAX];
    int n = snprintf(full, sizeof(full), "%s%s", c->url.prefix, path);
    if (n < 0 || (size_t)n >= sizeof(full))
        return -1;
    n = net_ws_client_request(req, sizeof(req), c->url.authority, full, "User-Agent: parley\r\n",
                              c->accept);
    if (n < 0)
        return -1;
    rt_buf *b = rt_buf_copy(req, (size_t)n);
    if (b == NULL)
        return -1;
    c->upgrading = true;
    return start(c, b);
}

int net_client_ws_send(net_client *c, const void *text, size_t len)
{
    if (c == NULL || c->ws == NULL || net_ws_write(c->ws, NET_WS_TEXT, text, len) != 0)
        return -1;
    ws_flush(c);
    return 0;
}

int net_client_ws_ping(net_client *c)
{
    if (c == NULL || c->ws == NULL || net_ws_ping(c->ws, (const uint8_t *)"parley", 6) != 0)
        return -1;
    ws_flush(c);
    return 0;
}

uint64_t net_client_ws_idle_ms(const net_client *c)
{
    return c != NULL && c->ws != NULL ? uv_now(c->loop) - c->last_rx : 0;
}

uint64_t net_client_requests(const net_client *c)
{
    return c != NULL ? c->requests : 0;
}
