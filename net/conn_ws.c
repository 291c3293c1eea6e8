/*
 * conn_ws.c - a connection after its WebSocket upgrade: the RFC 6455 side
 * (net/ws.h's engine: frames in, pongs and closes out, keep-alive pings,
 * the close handshake's deadline) and the sink its ws_stream actor sends
 * through (actors/ws_stream.h). Both run on the connection's loop, which is
 * the actor's home.
 *
 * Sending: a batch of frames from the actor becomes one write of
 * [header + envelope prefix][shared event bytes][suffix]... pieces; the
 * event bytes are the conversation's, referenced, not copied. Whatever the
 * engine has queued (a pong, a close) goes first, so frames never
 * interleave.
 *
 * Closing: our close frame (the actor's, a protocol error's, a missing
 * pong's) waits CLOSE_WAIT_MS for the peer's answer, then the socket is
 * cut; the peer's close is echoed and the socket closed once it is out.
 * The actor hears WS_GONE when the socket closes.
 */
#include "conn.h"

#include "actors/ws_stream.h"
#include "http_metrics.h"
#include "net/ws.h"
#include "runtime/metrics.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { CLOSE_WAIT_MS = 5000 };

struct conn_ws {
    net_ws *ws;
    rt_actor *stream;   /* held until it is told WS_GONE */
    uint64_t ping_ms;   /* 0: no pings */
    size_t drain_below; /* SIZE_MAX: nobody waits for the queue to drain */
    bool ping_out;      /* a ping is unanswered */
    bool counted;       /* the close is in the metrics already (the actor's) */
    ws_close_reason why;
    uint64_t close_at; /* our close frame is out: cut the socket then */
};

static void ws_tick(uv_timer_t *t);

static void arm(net_conn *c)
{
    conn_ws *w = c->ws;
    uint64_t now = uv_now(c->tcp.loop), due = UINT64_MAX;
    if (w->close_at != 0)
        due = w->close_at;
    else if (w->ping_ms > 0)
        due = now + w->ping_ms;
    if (due == UINT64_MAX)
        uv_timer_stop(&c->timer);
    else
        uv_timer_start(&c->timer, ws_tick, due > now ? due - now : 0, 0);
}

/* Whatever the engine has queued goes out now, before anything else. */
static void flush_engine(net_conn *c)
{
    rt_buf *b = NULL;
    if (net_ws_take_output(c->ws->ws, &b) < 0 || b == NULL)
        return;
    uv_buf_t ub = uv_buf_init((char *)rt_buf_data(b), (unsigned)rt_buf_len(b));
    net_conn_write(c, &ub, 1, NULL, &b, 1);
}

/* Our close frame is queued: send it, and give the peer CLOSE_WAIT_MS. */
static void closing(net_conn *c, ws_close_reason why)
{
    conn_ws *w = c->ws;
    if (!w->counted)
        w->why = why;
    flush_engine(c);
    if (w->close_at == 0 && !c->closed) {
        w->close_at = uv_now(c->tcp.loop) + CLOSE_WAIT_MS;
        arm(c);
    }
}

/* The exchange is over: close once what is queued is out. */
static void finish(net_conn *c)
{
    flush_engine(c);
    c->closing = true;
    if (c->writes == 0)
        net_conn_close(c);
}

static void ws_tick(uv_timer_t *t)
{
    net_conn *c = t->data;
    conn_ws *w = c->ws;
    if (c->closed)
        return;
    if (w->close_at != 0) {
        if (uv_now(c->tcp.loop) >= w->close_at)
            net_conn_close(c); /* the peer never answered our close */
        else
            arm(c);
        return;
    }
    if (w->ping_out) {
        net_ws_close(w->ws, 1001, "no pong to the last ping");
        closing(c, WS_CLOSED_PING);
        return;
    }
    if (net_ws_ping(w->ws, NULL, 0) == 0) {
        w->ping_out = true;
        flush_engine(c);
    }
    arm(c);
}

void net_conn_ws_timer(net_conn *c)
{
    ws_tick(&c->timer);
}

void net_conn_ws_input(net_conn *c, const uint8_t *data, size_t len)
{
    conn_ws *w = c->ws;
    if (c->closed)
        return;
    int r = net_ws_input(w->ws, data, len);
    net_ws_msg m;
    while (r == 0 && (r = net_ws_read(w->ws, &m)) == 1) {
        r = 0;
        if (m.opcode == NET_WS_PONG) {
            w->ping_out = false;
            continue;
        }
        rt_buf *b = rt_buf_copy(m.data, m.len);
        if (b == NULL || w->stream == NULL ||
            rt_send(w->stream, WS_IN, m.opcode == NET_WS_TEXT ? 1 : 2, b) < 0) {
            rt_buf_unref(b);
            net_ws_close(w->ws, 1008, "too many messages: slow down");
            closing(c, WS_CLOSED_PROTOCOL);
            return;
        }
    }
    if (r == 0) {
        flush_engine(c); /* pongs */
    } else if (r == NET_WS_CLOSED) {
        finish(c);
    } else if (r == NET_WS_EFULL) {
        net_ws_close(w->ws, 1009, "too much input at once");
        closing(c, WS_CLOSED_PROTOCOL);
    } else { /* a protocol error: its close frame is queued */
        if (!w->counted)
            w->why = WS_CLOSED_PROTOCOL;
        finish(c);
    }
}

void net_conn_ws_written(net_conn *c)
{
    conn_ws *w = c->ws;
    if (w->drain_below != SIZE_MAX && c->tcp.write_queue_size <= w->drain_below) {
        w->drain_below = SIZE_MAX;
        if (w->stream != NULL)
            rt_notify(w->stream, WS_DRAINED, 0, NULL);
    }
}

void net_conn_ws_closed(net_conn *c)
{
    conn_ws *w = c->ws;
    if (w->stream == NULL)
        return;
    if (!w->counted)
        rt_count(&ws_metrics_g.closed[w->why], 1);
    rt_notify(w->stream, WS_GONE, 0, NULL);
    rt_actor_unref(w->stream);
    w->stream = NULL;
}

void net_conn_ws_free(net_conn *c)
{
    net_ws_free(c->ws->ws);
    rt_actor_unref(c->ws->stream);
    free(c->ws);
    c->ws = NULL;
}

void net_conn_ws_shutdown(net_conn *c)
{
    if (c->closed)
        return;
    net_ws_close(c->ws->ws, 1001, "the server is stopping");
    if (!c->ws->counted)
        c->ws->why = WS_CLOSED_OTHER;
    flush_engine(c);
    net_conn_close(c);
}

/* ---- the actor's sink ---------------------------------------------------------- */

enum { BATCH = 256 };

static void sink_send(void *ctx, ws_out *f, size_t n)
{
    net_conn *c = ctx;
    /* libuv copies the buffer list, and the write keeps its own copy of
     * the references */
    uv_buf_t scratch_b[3 * BATCH];
    rt_buf *scratch_keep[BATCH];
    enum { PIECE = NET_WS_HEADER_MAX + sizeof(f->pre) };
    if (n > BATCH) { /* ws_stream sends at most WS_SEND_MAX; in parts all the same */
        sink_send(ctx, f, BATCH);
        sink_send(ctx, f + BATCH, n - BATCH);
        return;
    }
    bool open = !c->closed && !net_ws_closing(c->ws->ws);
    char *head = open ? malloc(n * PIECE) : NULL;
    if (head == NULL) {
        for (size_t i = 0; i < n; i++)
            rt_buf_unref(f[i].body);
        if (open) /* a frame left out would be a gap */
            net_conn_close(c);
        return;
    }
    flush_engine(c);
    size_t nkeep = 0;
    int nb = 0;
    for (size_t i = 0; i < n; i++) {
        char *h = head + i * PIECE;
        size_t hl = net_ws_frame_header((uint8_t *)h, NET_WS_TEXT,
                                        (size_t)f[i].pre_len + f[i].len + f[i].post_len);
        memcpy(h + hl, f[i].pre, f[i].pre_len);
        scratch_b[nb++] = uv_buf_init(h, (unsigned)(hl + f[i].pre_len));
        if (f[i].len > 0)
            scratch_b[nb++] = uv_buf_init((char *)rt_buf_data(f[i].body) + f[i].off, f[i].len);
        if (f[i].post_len > 0) /* "}": the only suffix there is */
            scratch_b[nb++] = uv_buf_init((char *)"}", 1);
        if (f[i].body != NULL)
            scratch_keep[nkeep++] = f[i].body;
    }
    net_conn_write(c, scratch_b, nb, head, scratch_keep, (int)nkeep);
}

static size_t sink_queued(void *ctx)
{
    net_conn *c = ctx;
    return c->tcp.write_queue_size;
}

static void sink_notify_below(void *ctx, size_t bytes)
{
    net_conn *c = ctx;
    if (c->closed || c->ws->stream == NULL)
        return; /* WS_GONE is on its way */
    if (c->tcp.write_queue_size <= bytes)
        rt_notify(c->ws->stream, WS_DRAINED, 0, NULL);
    else
        c->ws->drain_below = bytes;
}

static void sink_close(void *ctx, int code, const char *reason)
{
    net_conn *c = ctx;
    c->ws->counted = true;
    if (c->closed)
        return;
    if (net_ws_close(c->ws->ws, code, reason) < 0) { /* no close frame can say it: cut */
        net_conn_close(c);
        return;
    }
    closing(c, WS_CLOSED_OTHER);
}

static void sink_release(void *ctx)
{
    net_conn_unref(ctx);
}

static const ws_sink conn_sink = {
    .send = sink_send,
    .queued = sink_queued,
    .notify_below = sink_notify_below,
    .close = sink_close,
    .release = sink_release,
};

/* ---- the upgrade ------------------------------------------------------------------ */

void net_ws_upgrade(net_req *r, const char *answer, size_t len, ws_stream_opts *o)
{
    net_conn *c = r->conn;
    const net_server_opts *so = &c->nl->srv->o;
    net_ws_limits lim = {.message_bytes = so->ws_message_bytes};
    conn_ws *w = calloc(1, sizeof(*w));
    char *head = malloc(len);
    if (w == NULL || head == NULL || (w->ws = net_ws_new(&lim)) == NULL) {
        free(w);
        free(head);
        net_reply_error(r, 503, "out of memory");
        return;
    }
    w->ping_ms = so->ws_ping_ms; /* 0: off */
    w->drain_below = SIZE_MAX;
    o->sink = &conn_sink;
    o->sink_ctx = c;
    c->refs++; /* the stream's, given back by sink_release */
    int e = ws_stream_start(r->api->rt, o, &w->stream);
    if (e < 0) {
        c->refs--;
        net_ws_free(w->ws);
        free(w);
        free(head);
        net_reply_error(r, 503, "cannot start the stream: %s", rt_strerror(e));
        return;
    }
    rt_log(RT_LOG_DEBUG, "http", "method=GET route=%s status=101", r->route.name);
    net_metrics_request(r->route.id, 101);
    net_query_free(&r->query);
    c->ws = w;
    memcpy(head, answer, len);
    uv_buf_t b = uv_buf_init(head, (unsigned)len);
    net_conn_write(c, &b, 1, head, NULL, 0);
    c->busy = false;
    if (!c->closed)
        arm(c);
    net_conn_unref(c); /* the request's */
}
