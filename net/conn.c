/*
 * conn.c - one HTTP/1.1 connection: read, parse, hand over, answer, repeat.
 *
 * A connection lives on the loop that accepted it, or on the loop of the
 * conversations it asks, once it has moved there (below). Bytes read (decrypted
 * first, with TLS) go to the strict parser one request at a time; a
 * complete request goes to the API, and the next one is parsed only once
 * this one is answered, so answers leave in request order (pipelining)
 * and a bad request never takes the good ones before it along. A parse
 * error is answered with its status and closes the connection: the
 * stream cannot be trusted after it.
 *
 * Bounds: unparsed input is capped (reading pauses while a request is
 * being handled and the next ones pile up), answers not yet taken by the
 * peer are capped (parsing pauses), and one timer per connection enforces
 * the header deadline (first byte to end of headers), body silence and
 * keep-alive idleness.
 *
 * Lifetime: references count the open handles and the request in flight,
 * so an answer that comes after the peer left finds its connection still
 * there, and is dropped.
 */
#include "conn.h"

#include "http_metrics.h"
#include "runtime/json.h"
#include "runtime/tbuf.h"
#include "runtime/text.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct out_req {
    uv_write_t w;
    net_conn *c;
    char *head;
    int nkeep;
    rt_buf *keep[];
} out_req;

static void conn_process(net_conn *c);
static void conn_close(net_conn *c);
static void arm_timer(net_conn *c);
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);

static uint64_t now_ms(const net_conn *c)
{
    return uv_now(c->tcp.loop);
}

static void conn_unref(net_conn *c)
{
    if (--c->refs > 0)
        return;
    if (c->ws != NULL)
        net_conn_ws_free(c);
    hp_free(c->hp);
    net_tls_free(c->tls);
    if (!c->in_borrowed)
        free(c->in);
    free(c->req);
    free(c);
}

void net_conn_unref(net_conn *c)
{
    conn_unref(c);
}

static void on_handle_closed(uv_handle_t *h)
{
    conn_unref(h->data);
}

static void tls_flush(net_conn *c);

/* Join nl's connections (accepted, or moved in): how many the server has. */
static unsigned conn_attach(net_conn *c, net_loop *nl)
{
    c->nl = nl;
    c->prev = NULL;
    c->next = nl->conns;
    if (nl->conns != NULL)
        nl->conns->prev = c;
    nl->conns = c;
    nl->nconns++;
    return atomic_fetch_add(&nl->srv->conns, 1) + 1;
}

/* Leave them (closing, or moving out). */
static void conn_detach(net_conn *c)
{
    net_loop *nl = c->nl;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        nl->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->nl = NULL;
    net_loop_conn_gone(nl);
}

static void conn_close(net_conn *c)
{
    if (c->closed)
        return;
    c->closed = true; /* first: a failing flush below must not come back here */
    if (c->tls != NULL && net_tls_handshake_done(c->tls) && net_tls_close(c->tls) == 0)
        tls_flush(c); /* close_notify: the peer can tell an end from a cut */
    if (c->ws != NULL)
        net_conn_ws_closed(c);
    if (c->nl != NULL) {
        conn_detach(c);
        net_metrics_conn(-1);
    }
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

void net_conn_close(net_conn *c)
{
    conn_close(c);
}

/* ---- writing ------------------------------------------------------------- */

static void on_written(uv_write_t *w, int status)
{
    out_req *o = (out_req *)w;
    net_conn *c = o->c;
    c->writes--;
    for (int i = 0; i < o->nkeep; i++)
        rt_buf_unref(o->keep[i]);
    free(o->head);
    free(o);
    if (status < 0 && !c->closed) {
        conn_close(c);
    } else if (!c->closed) {
        if (c->closing && c->writes == 0)
            conn_close(c);
        else if (c->ws != NULL)
            net_conn_ws_written(c);
        else
            conn_process(c); /* answers drained: parsing may go on */
    }
    conn_unref(c);
}

/* Write what the socket takes now, without a write request: most answers
 * go out whole this way, and a uv_write that completes at once still costs
 * an epoll_ctl. Returns the bytes written (b is advanced past them), or <0. */
static ssize_t write_now(net_conn *c, uv_buf_t *b, int *n)
{
    if (c->tcp.write_queue_size != 0) /* answers stay in order */
        return 0;
    int w = uv_try_write((uv_stream_t *)&c->tcp, b, (unsigned)*n);
    if (w == UV_EAGAIN)
        return 0;
    if (w < 0)
        return w;
    size_t left = (size_t)w;
    int i = 0;
    while (i < *n && left >= b[i].len)
        left -= b[i++].len;
    if (i < *n) { /* what is left starts in b[i] */
        b[i].base += left;
        b[i].len -= left;
        memmove(b, b + i, (size_t)(*n - i) * sizeof(*b));
    }
    *n -= i;
    return w;
}

static void give_up(char *head, rt_buf **keep, int nkeep)
{
    free(head);
    for (int i = 0; i < nkeep; i++)
        rt_buf_unref(keep[i]);
}

/* The bytes as they are (after TLS, if any): at once where the socket
 * takes them, the rest queued. */
static void raw_write(net_conn *c, uv_buf_t *b, int n, char *head, rt_buf **keep, int nkeep)
{
    out_req *o = NULL;
    ssize_t w = write_now(c, b, &n);
    if (w >= 0 && n > 0 && (o = malloc(sizeof(*o) + (size_t)nkeep * sizeof(rt_buf *))) != NULL) {
        o->c = c;
        o->head = head;
        o->nkeep = nkeep;
        memcpy(o->keep, keep, (size_t)nkeep * sizeof(rt_buf *));
        c->refs++;
        c->writes++;
        if (uv_write(&o->w, (uv_stream_t *)&c->tcp, b, (unsigned)n, on_written) == 0)
            return;
        c->refs--;
        c->writes--;
        free(o);
        w = -1;
    }
    give_up(head, keep, nkeep);
    if (w < 0 || n > 0)
        conn_close(c); /* a write error, or no memory to queue the rest */
    else if (c->closing && c->writes == 0)
        conn_close(c); /* the last answer before closing went out */
}

void net_conn_write(net_conn *c, uv_buf_t *b, int n, char *head, rt_buf **keep, int nkeep)
{
    if (c->closed) {
        give_up(head, keep, nkeep);
        return;
    }
    if (c->tls == NULL) {
        raw_write(c, b, n, head, keep, nkeep);
        return;
    }
    /* one record for the lot: pieces are often a few bytes (frame headers) */
    rt_text t = {0};
    for (int i = 0; i < n; i++)
        rt_text_put(&t, b[i].base, b[i].len);
    give_up(head, keep, nkeep);
    rt_buf *out = NULL;
    int r = t.failed ? -1 : net_tls_write(c->tls, (const uint8_t *)t.p, t.len);
    free(t.p);
    if (r == 0)
        r = net_tls_take_output(c->tls, &out);
    if (r < 0 || out == NULL) {
        rt_buf_unref(out);
        conn_close(c);
        return;
    }
    uv_buf_t ob = uv_buf_init((char *)rt_buf_data(out), (unsigned)rt_buf_len(out));
    raw_write(c, &ob, 1, NULL, &out, 1);
}

/* Send head (malloc'd, taken) then body (taken) to the peer. */
static void conn_send(net_conn *c, char *head, size_t hlen, rt_buf *body)
{
    uv_buf_t b[2];
    int n = 0;
    b[n++] = uv_buf_init(head, (unsigned)hlen);
    if (body != NULL && rt_buf_len(body) > 0)
        b[n++] = uv_buf_init((char *)rt_buf_data(body), (unsigned)rt_buf_len(body));
    net_conn_write(c, b, n, head, &body, body != NULL);
}

/* What the TLS engine has to send (handshake records, alerts). */
static void tls_flush(net_conn *c)
{
    rt_buf *b = NULL;
    if (net_tls_take_output(c->tls, &b) < 0) {
        conn_close(c);
        return;
    }
    if (b == NULL)
        return;
    uv_buf_t ub = uv_buf_init((char *)rt_buf_data(b), (unsigned)rt_buf_len(b));
    raw_write(c, &ub, 1, NULL, &b, 1);
}

static const char *status_text(int s)
{
    switch (s) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 417:
        return "Expectation Failed";
    case 422:
        return "Unprocessable Content";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

static char *put_str(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return p + n;
}

static char *put_uint(char *p, uint64_t v)
{
    char t[20];
    int n = 0;
    do
        t[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n > 0)
        *p++ = t[--n];
    return p;
}

/* head_only: an answer to HEAD, which says what the body would be and
 * sends none. */
static void send_answer(net_conn *c, int status, rt_buf *body, const char *ctype, const char *extra,
                        bool close_after, bool head_only)
{
    char *head = malloc(512 + (extra != NULL ? strlen(extra) : 0));
    if (head == NULL) {
        rt_buf_unref(body);
        conn_close(c);
        return;
    }
    /* by hand, not sprintf: every answer makes one */
    char *p = put_str(head, "HTTP/1.1 ");
    p = put_uint(p, (uint64_t)status);
    *p++ = ' ';
    p = put_str(p, status_text(status));
    p = put_str(p, "\r\nContent-Type: ");
    p = put_str(p, ctype != NULL ? ctype : "application/json");
    if (status != 304) { /* a 304's length would be the representation's */
        p = put_str(p, "\r\nContent-Length: ");
        p = put_uint(p, body != NULL ? rt_buf_len(body) : 0);
    }
    p = put_str(p, close_after ? "\r\nConnection: close\r\n" : "\r\n");
    p = put_str(p, extra != NULL ? extra : "");
    /* every 503 says when to come back (a body may have said longer) */
    if (status == 503 && (extra == NULL || strstr(extra, "Retry-After:") == NULL))
        p = put_str(p, "Retry-After: 1\r\n");
    p = put_str(p, "\r\n");
    size_t n = (size_t)(p - head);
    if (close_after)
        c->closing = true;
    if (head_only) {
        rt_buf_unref(body);
        body = NULL;
    }
    conn_send(c, head, n, body);
}

static rt_buf *detail_json(const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    rt_utf8_clean(line); /* it may quote what the peer sent */
    return rt_json_buf(json_pack("{s:s}", "detail", line));
}

/* An answer to a request that never reached the API (it could not be read). */
static void conn_fail(net_conn *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void conn_fail(net_conn *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rt_buf *b = detail_json(fmt, ap);
    va_end(ap);
    net_metrics_request(NET_R_NONE, status);
    rt_log(RT_LOG_INFO, "http", "status=%d closing: %s", status,
           b != NULL ? (const char *)rt_buf_data(b) : "");
    send_answer(c, status, b, NULL, NULL, true, false);
    if (c->writes == 0)
        conn_close(c);
}

/* ---- moving to the conversations' loop -------------------------------------- */

/* A request that asks a conversation (net_conv_call: appends, posts,
 * changes) that lives on another loop than its connection's is a message
 * there and its answer one back: a wake-up of each loop, and a share of the
 * answer's wait. Reads of its log are served where the connection is
 * (conv_read.h), with no message: they do not count, so that the readers
 * of one conversation stay spread over the loops. A plain keep-alive
 * connection whose last MOVE_AFTER requests all asked conversations of the
 * same other loop moves there, between two requests (nothing read and not
 * answered, nothing to write): its socket is handed over (a dup, as the
 * handles close here), and that loop's listener takes it in. A TLS session
 * goes with it when it holds nothing between two records (net_tls_idle);
 * after an upgrade a connection stays where it is. A producer of one
 * conversation thus costs no hop after its first requests; a client of
 * many conversations on every loop seldom moves. */
enum { MOVE_AFTER = 4 };

typedef struct conn_moving {
    net_conn *c; /* NULL once taken in */
} conn_moving;

static void note_home(net_conn *c, const net_req *r)
{
    net_loop *nl = c->nl;
    int home = nl != NULL ? r->asked : -1;
    if (home < 0 || home == nl->index || home >= nl->srv->nloops || nl->srv->actors[home] == NULL) {
        c->home_n = 0;
        return;
    }
    c->home_n = home == c->home ? c->home_n + 1 : 1;
    c->home = home;
}

static bool may_move(const net_conn *c)
{
    return c->home_n >= MOVE_AFTER && c->nl != NULL && !c->nl->draining && !c->closed &&
           !c->closing && !c->busy && !c->started && !c->eof && !c->in_process && !c->in_borrowed &&
           c->in_off == c->in_len && c->ws == NULL && (c->tls == NULL || net_tls_idle(c->tls)) &&
           c->writes == 0 && c->tcp.write_queue_size == 0;
}

/* Dropped on the way (the loop stopped): the connection ends. */
static void moving_dropped(void *data, void *ctx)
{
    (void)ctx;
    conn_moving *m = data;
    if (m->c != NULL) {
        close(m->c->moved_fd);
        net_metrics_conn(-1);
        conn_unref(m->c); /* the move's, the last */
    }
    free(m);
}

/* Both handles are closed: the other loop may take the connection. */
static void on_moved_out(uv_handle_t *h)
{
    net_conn *c = h->data;
    conn_unref(c); /* the handle's (the move's keeps it) */
    if (--c->moving > 0)
        return;
    rt_buf *b = c->move_buf;
    rt_actor *to = c->move_to;
    c->move_buf = NULL;
    c->move_to = NULL;
    if (rt_send(to, NET_CONN_MOVE, 0, b) < 0)
        rt_buf_unref(b); /* it ends: moving_dropped */
    rt_actor_unref(to);
}

static void conn_move(net_conn *c)
{
    uv_os_fd_t fd;
    conn_moving *m = malloc(sizeof(*m));
    rt_buf *b = m != NULL ? rt_buf_wrap(m, sizeof(*m), moving_dropped, NULL) : NULL;
    if (b == NULL || uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0 ||
        (c->moved_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        if (b != NULL) {
            m->c = NULL;
            rt_buf_unref(b);
        } else {
            free(m);
        }
        c->home_n = 0; /* it stays, until MOVE_AFTER more */
        return;
    }
    m->c = c;
    c->move_buf = b;
    c->move_to = rt_actor_ref(c->nl->srv->actors[c->home]);
    c->home_n = 0;
    c->reading = false;
    conn_detach(c);
    net_metrics_conn_moved();
    c->refs++; /* the move's, until taken in or dropped */
    c->moving = 2;
    uv_close((uv_handle_t *)&c->timer, on_moved_out);
    uv_close((uv_handle_t *)&c->tcp, on_moved_out);
}

void net_conn_adopt(net_loop *nl, rt_buf *b)
{
    conn_moving *m = (conn_moving *)(void *)rt_buf_wdata(b);
    if (nl->draining || m->c == NULL)
        return; /* it ends when the message goes */
    net_conn *c = m->c;
    m->c = NULL;
    uv_tcp_init(nl->uv, &c->tcp);
    uv_timer_init(nl->uv, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->refs += 2; /* the handles' */
    conn_attach(c, nl);
    if (uv_tcp_open(&c->tcp, c->moved_fd) != 0) {
        close(c->moved_fd);
        conn_close(c);
    } else {
        c->reading = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0;
        arm_timer(c);
    }
    conn_unref(c); /* the move's */
}

/* ---- answering the API's requests ------------------------------------------ */

void net_reply(net_req *r, int status, rt_buf *body, const char *ctype, const char *extra)
{
    if (r->fwd != NULL) { /* another node's: no connection here */
        net_forward_answer(r, status, body, ctype, extra);
        return;
    }
    net_conn *c = r->conn;
    bool keep = r->http->keep_alive && !c->closing;
    uint64_t us = (uv_hrtime() - r->t0_ns) / 1000;
    rt_log(status >= 500 ? RT_LOG_WARN : RT_LOG_DEBUG, "http",
           "method=%s route=%s status=%d us=%llu", r->http->method,
           r->route.name[0] != '\0' ? r->route.name : "-", status, (unsigned long long)us);
    net_query_free(&r->query);
    net_metrics_request(r->route.id, status);
    if (c->abandoned) {
        rt_buf_unref(body);
        c->abandoned = false;
    } else if (!c->closed)
        send_answer(c, status, body, ctype, extra, !keep, strcmp(r->http->method, "HEAD") == 0);
    else
        rt_buf_unref(body);
    c->busy = false;
    note_home(c, r);
    if (!c->in_process && !c->closed)
        conn_process(c);
    if (may_move(c))
        conn_move(c);
    conn_unref(c);
}

void net_reply_json(net_req *r, int status, json_t *body)
{
    rt_buf *b = rt_json_buf(body);
    if (b == NULL)
        net_reply_error(r, 500, "out of memory");
    else
        net_reply(r, status, b, NULL, NULL);
}

void net_reply_error(net_req *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rt_buf *b = detail_json(fmt, ap);
    va_end(ap);
    char allow[96] = "";
    if (status == 405 && r->route.allow != NULL)
        snprintf(allow, sizeof(allow), "Allow: %s\r\n", r->route.allow);
    net_reply(r, status, b, NULL, allow[0] != '\0' ? allow : NULL);
}

/* ---- reading ---------------------------------------------------------------- */

static void dispatch(net_conn *c)
{
    if (c->req == NULL && (c->req = malloc(sizeof(*c->req))) == NULL) {
        conn_fail(c, 503, "out of memory");
        return;
    }
    net_req *r = c->req;
    memset(r, 0, sizeof(*r));
    r->asked = -1;
    r->api = &c->nl->srv->api;
    r->conn = c;
    r->loop = c->tcp.loop;
    r->http = hp_request(c->hp);
    r->t0_ns = uv_hrtime();
    c->busy = true;
    c->refs++;
    net_api_handle(r);
}

static void conn_process(net_conn *c)
{
    if (c->in_process || c->closed || c->ws != NULL)
        return;
    c->in_process = true;
    while (!c->busy && !c->closing && c->ws == NULL && c->in_off < c->in_len && c->nl != NULL &&
           c->tcp.write_queue_size < OUT_MAX) {
        bool done;
        ssize_t n = hp_feed(c->hp, c->in + c->in_off, c->in_len - c->in_off, &done);
        if (n < 0) {
            conn_fail(c, hp_status(c->hp), "%s", hp_reason(c->hp));
            break;
        }
        if (n > 0 && !c->started) {
            c->started = true;
            c->t0 = now_ms(c);
        }
        c->in_off += (size_t)n;
        if (hp_wants_continue(c->hp)) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            char *h = malloc(sizeof(cont));
            if (h != NULL) {
                memcpy(h, cont, sizeof(cont));
                conn_send(c, h, sizeof(cont) - 1, NULL);
            }
        }
        if (!done)
            break;
        c->started = false;
        dispatch(c);
        if (c->ws != NULL) { /* upgraded: what follows the request is WebSocket input */
            size_t off = c->in_off;
            c->in_off = c->in_len;
            hp_free(c->hp);
            c->hp = NULL;
            free(c->req);
            c->req = NULL;
            net_conn_ws_input(c, c->in + off, c->in_len - off);
            break;
        }
    }
    if (c->in_off == c->in_len) {
        c->in_off = c->in_len = 0;
        if (!c->busy && !c->in_borrowed) { /* an idle keep-alive connection holds no buffer */
            free(c->in);
            c->in = NULL;
            c->in_cap = 0;
        }
    }
    if (!c->closed && !c->busy && !c->closing && c->eof && c->ws == NULL) {
        if (hp_finish(c->hp) < 0 && c->started)
            conn_fail(c, 400, "%s", hp_reason(c->hp));
        else if (c->writes == 0)
            conn_close(c);
        else
            c->closing = true;
    }
    if (!c->closed) {
        bool want = !c->eof && !c->closing && c->in_len < IN_MAX;
        if (want && !c->reading)
            c->reading = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0;
        arm_timer(c);
    }
    c->in_process = false;
}

/* Each loop reads into one buffer: TLS records (decrypted into the
 * connection's input), and plain input of a connection that holds none,
 * which is parsed where it lies; only what is left unparsed is copied out
 * (give_back). A keep-alive request costs no buffer of its own. */
static rt_tbuf read_buf = RT_TBUF_INIT(READ_CHUNK);

uint8_t *net_conn_read_buf(void)
{
    return rt_tbuf_get(&read_buf);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)hint;
    net_conn *c = h->data;
    if (c->tls != NULL || c->in == NULL || c->ws != NULL) {
        char *buf = (char *)net_conn_read_buf(); /* NULL: UV_ENOBUFS, which closes */
        *b = uv_buf_init(buf, buf != NULL ? READ_CHUNK : 0);
        return;
    }
    size_t need = c->in_len + READ_CHUNK;
    if (need > c->in_cap) {
        uint8_t *n = realloc(c->in, need);
        if (n != NULL) {
            c->in = n;
            c->in_cap = need;
        }
    }
    *b = c->in_cap > c->in_len
             ? uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len))
             : uv_buf_init(NULL, 0);
}

/* After an on_read that parsed in the loop's buffer: keep what is left
 * in a buffer of the connection's own. */
static void give_back(net_conn *c)
{
    size_t off = c->in_off, rest = c->in_len - c->in_off;
    const uint8_t *from = c->in;
    c->in_borrowed = false;
    c->in = NULL;
    c->in_off = c->in_len = c->in_cap = 0;
    if (rest == 0)
        return;
    uint8_t *keep = malloc(rest + READ_CHUNK);
    if (keep == NULL) {
        conn_close(c);
        return;
    }
    memcpy(keep, from + off, rest);
    c->in = keep;
    c->in_cap = rest + READ_CHUNK;
    c->in_len = rest;
}

/* Decrypt what came: the plaintext joins the input. */
static int tls_in(net_conn *c, const uint8_t *data, size_t len)
{
    if (net_tls_input(c->tls, data, len) < 0)
        return -1;
    for (;;) {
        if (c->in_cap - c->in_len < 16384) {
            size_t cap = c->in_cap ? c->in_cap * 2 : READ_CHUNK;
            uint8_t *n = realloc(c->in, cap);
            if (n == NULL)
                return -1;
            c->in = n;
            c->in_cap = cap;
        }
        ssize_t n = net_tls_read(c->tls, c->in + c->in_len, c->in_cap - c->in_len);
        tls_flush(c);
        if (n == 0)
            return 0;
        if (n == NET_TLS_CLOSED) {
            c->eof = true;
            return 0;
        }
        if (n < 0) {
            rt_log(RT_LOG_INFO, "http", "TLS: %s", net_tls_error(c->tls));
            return -1;
        }
        c->in_len += (size_t)n;
    }
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    net_conn *c = s->data;
    if (n == UV_EOF && c->ws != NULL) {
        conn_close(c); /* without a close frame: a cut */
        return;
    }
    if (n == UV_EOF) {
        c->eof = true;
        uv_read_stop(s);
        c->reading = false;
    } else if (n < 0) {
        conn_close(c);
        return;
    } else if (n > 0) {
        if (!c->started && !c->busy) { /* a TLS handshake counts as the request's start */
            c->started = true;
            c->t0 = now_ms(c);
        }
        if (c->tls != NULL) {
            if (tls_in(c, (const uint8_t *)b->base, (size_t)n) < 0) {
                conn_close(c);
                return;
            }
            if (c->ws != NULL) { /* the plaintext is WebSocket input, which the
                                    session copies: an idle stream holds no buffer */
                uint8_t *in = c->in;
                size_t len = c->in_len;
                c->in = NULL;
                c->in_len = c->in_cap = 0;
                net_conn_ws_input(c, in, len);
                free(in);
                return;
            }
        } else if (c->ws != NULL) {
            net_conn_ws_input(c, (const uint8_t *)b->base, (size_t)n);
            return;
        } else if (b->base == (char *)net_conn_read_buf()) { /* it held nothing: parse in place */
            c->in = (uint8_t *)b->base;
            c->in_cap = READ_CHUNK;
            c->in_len = (size_t)n;
            c->in_off = 0;
            c->in_borrowed = true;
        } else {
            c->in_len += (size_t)n;
        }
        if (c->in_len >= IN_MAX || c->closing) {
            uv_read_stop(s);
            c->reading = false;
        }
    }
    conn_process(c);
    if (c->in_borrowed)
        give_back(c);
}

/* ---- time limits -------------------------------------------------------------- */

/* When the connection's time limit falls: the header deadline while a
 * request's head comes in, else idleness (or a body's silence) counted
 * from quiet. */
static uint64_t limit_ms(const net_conn *c, uint64_t quiet)
{
    const net_server_opts *o = &c->nl->srv->o;
    if (c->started && !hp_headers_in(c->hp))
        return c->t0 + o->header_timeout_ms;
    return quiet + o->idle_timeout_ms;
}

static void on_timer(uv_timer_t *t)
{
    net_conn *c = t->data;
    if (c->ws != NULL) {
        net_conn_ws_timer(c);
        return;
    }
    const net_server_opts *o = &c->nl->srv->o;
    if (c->busy || c->closing)
        return; /* armed again once the request is answered */
    uint64_t now = now_ms(c), due = limit_ms(c, c->quiet_since);
    if (due > now) { /* fired early, as armed for a request before (arm_timer) */
        uv_timer_start(&c->timer, on_timer, due - now, 0);
        return;
    }
    if (!c->started) {
        conn_close(c); /* idle keep-alive */
    } else if (!hp_headers_in(c->hp)) {
        conn_fail(c, 408, "the request headers took longer than %llums",
                  (unsigned long long)o->header_timeout_ms);
    } else {
        conn_fail(c, 408, "the request body stalled for %llums",
                  (unsigned long long)o->idle_timeout_ms);
    }
}

/* The timer fires no later than the limit; it may fire earlier, when it
 * was armed for an earlier one, and then arms itself again (on_timer).
 * A keep-alive connection's requests thus cost no stop and start of the
 * loop's timer heap each: only its quiet_since moves. While a request is
 * answered there is no limit: a firing then does nothing, and the answer
 * arms it again. */
static void arm_timer(net_conn *c)
{
    if (c->ws != NULL)
        return; /* conn_ws.c's */
    if (c->nl == NULL || c->closing) {
        uv_timer_stop(&c->timer);
        return;
    }
    if (c->busy)
        return;
    uint64_t now = now_ms(c), due = limit_ms(c, now);
    c->quiet_since = now;
    if (uv_is_active((const uv_handle_t *)&c->timer) &&
        now + uv_timer_get_due_in(&c->timer) <= due)
        return;
    uv_timer_start(&c->timer, on_timer, due > now ? due - now : 0, 0);
}

/* ---- accepting and closing ------------------------------------------------------ */

void net_conn_accept(net_loop *nl)
{
    net_server *s = nl->srv;
    net_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    uv_tcp_init(nl->uv, &c->tcp);
    uv_timer_init(nl->uv, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->refs = 2;
    unsigned n = conn_attach(c, nl);
    net_metrics_conn(1);
    if (uv_accept((uv_stream_t *)nl->listener, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    hp_limits lim = {.header_bytes = s->o.header_bytes, .body_bytes = s->o.body_bytes};
    c->hp = hp_new(&lim);
    if (s->tls != NULL)
        c->tls = net_tls_new(s->tls);
    if (c->hp == NULL || (s->tls != NULL && c->tls == NULL)) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (n > s->o.max_conns && s->tls == NULL) {
        conn_fail(c, 503, "too many connections (the limit is %u); try again later",
                  s->o.max_conns);
        return;
    }
    if (n > s->o.max_conns) {
        conn_close(c);
        return;
    }
    c->reading = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0;
    arm_timer(c);
}

void net_conns_close(net_loop *nl, bool force)
{
    net_conn *c = nl->conns;
    while (c != NULL) {
        net_conn *next = c->next;
        if (c->ws != NULL) { /* streams end with the server */
            net_conn_ws_shutdown(c);
            c = next;
            continue;
        }
        if (force && c->busy && !c->abandoned) {
            /* the grace period is over: the client learns it may retry */
            c->abandoned = true;
            conn_fail(c, 503, "the server is stopping; retry elsewhere or later");
        }
        if (force || (!c->busy && c->writes == 0)) {
            conn_close(c);
        } else {
            c->closing = true; /* after this answer */
        }
        c = next;
    }
}
