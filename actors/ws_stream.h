/*
 * ws_stream.h - one actor per WebSocket subscriber of a conversation
 * (/sockets/events/{id}): auth, the initial full_state, the replay, live
 * events, and the client's messages.
 *
 * The log is the buffer. The stream keeps one number, `next`, the index of
 * the next event its socket gets, and learns how many events exist from the
 * conversation (the subscribe answer's count, then each live event's
 * index). A live event is framed from the bytes the conversation hands out
 * (shared by every subscriber, never encoded again) when it is the next one
 * and the socket keeps up; anything else (the replay, events that came while
 * the socket was behind, a resubscription after the conversation dropped
 * it) is read from the log in pages from `next`. So the replay hands over to
 * live delivery at the exact index the subscription began at: no gap, no
 * duplicate, log order; and a slow socket costs its bounded send queue,
 * never memory per event it is behind.
 *
 * A socket whose queue stays full for stall_timeout_ms is closed with 1013
 * and counted (ws_metrics_g.closed[WS_CLOSED_STALLED]); producers and other sockets never
 * wait for it.
 *
 * The socket side (net/) is reached through a ws_sink, called only on the
 * actor's home loop, which must be the connection's loop. It sends the
 * actor WS_IN (a client message), WS_DRAINED (the queue fell to the level
 * asked with notify_below) and WS_GONE (the socket closed); after WS_GONE,
 * or after the actor called sink->close, the actor exits and calls
 * sink->release once.
 */
#ifndef WS_STREAM_H
#define WS_STREAM_H

#include "actors/conversation.h"
#include "runtime/metrics.h"
#include "runtime/rt.h"
#include "store/store.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    WS_IN = RT_KIND_RANGE(3), /* arg: 1 text, 2 binary; buf: the message */
    WS_DRAINED,
    WS_GONE,
};

/* One frame for the socket: a text message made of pre, body[off, off+len)
 * and post. The sink takes the reference to body. */
typedef struct ws_out {
    rt_buf *body; /* NULL: pre and post only */
    uint32_t off, len;
    uint8_t pre_len, post_len;
    char pre[40]; /* {"index":N,"event": */
    char post[2]; /* } */
} ws_out;

enum { WS_SEND_MAX = 256 }; /* frames per send */

typedef struct ws_sink {
    /* Queue frames (taking their bodies); nothing after close. n is at
     * most WS_SEND_MAX. */
    void (*send)(void *ctx, ws_out *f, size_t n);
    /* Bytes queued for the socket and not taken by the kernel yet. */
    size_t (*queued)(void *ctx);
    /* Send WS_DRAINED once queued() <= bytes (at once if it is). */
    void (*notify_below)(void *ctx, size_t bytes);
    /* Close with this code and one-line reason. */
    void (*close)(void *ctx, int code, const char *reason);
    /* The actor is done with ctx. */
    void (*release)(void *ctx);
} ws_sink;

typedef enum ws_replay {
    WS_REPLAY_NONE = 0, /* live events only */
    WS_REPLAY_ALL,      /* resend_mode=all, resend_all=true */
    WS_REPLAY_SINCE,    /* resend_mode=since: timestamp >= after_ts */
    WS_REPLAY_AFTER_ID, /* after_id: strictly after that event */
} ws_replay;

/* Why a WebSocket stream was closed (parley_ws_closed_total{reason}). */
typedef enum ws_close_reason {
    WS_CLOSED_CLIENT = 0, /* the client closed or left */
    WS_CLOSED_STALLED,    /* its queue stayed full past the deadline (1013) */
    WS_CLOSED_AUTH,       /* 4001 */
    WS_CLOSED_NOT_FOUND,  /* 4004 */
    WS_CLOSED_CAP,        /* the subscriber cap (1013) */
    WS_CLOSED_PROTOCOL,   /* the client broke RFC 6455, or sent too much */
    WS_CLOSED_PING,       /* no pong */
    WS_CLOSED_OTHER,      /* server errors, shutdown */
    WS_CLOSE_REASONS
} ws_close_reason;

/* The streams' figures (process-wide), as /metrics shows them. */
typedef struct ws_metrics {
    _Atomic int64_t open;    /* streams */
    _Atomic uint64_t frames; /* frames queued to subscribers */
    _Atomic uint64_t closed[WS_CLOSE_REASONS];
} ws_metrics;
extern ws_metrics ws_metrics_g;
void ws_metrics_render(rt_text *t);

typedef struct ws_stream_opts {
    convs *convs;
    st_store *store;
    rt_uuid conv;
    const char *const *api_keys; /* any of them; none: no key needed */
    size_t napi_keys;            /* (borrowed: the server's) */
    bool authed;                 /* the key came with the upgrade (query or header) */
    ws_replay replay;
    char after_ts[40];    /* server-local naive time; "" with SINCE: nothing */
    const char *after_id; /* with AFTER_ID (copied) */
    bool envelope;        /* {"index": N, "event": ...} */
    /* view=blocks: the conversation as blocks from its visualizer (viz.h,
     * view.h's frames) instead of its events: a state frame, then the
     * changes. blocks_from = N + 1 (or after_id, which names event N):
     * only the changes after event N; 0: from the whole state. The replay
     * modes do not apply. */
    bool blocks;
    uint64_t blocks_from;
    uint64_t auth_timeout_ms;
    uint64_t stall_timeout_ms;
    size_t queue_bytes;
    uint64_t call_timeout_ms;
    const ws_sink *sink;
    void *sink_ctx;
} ws_stream_opts;

/* Spawn the stream on the calling loop (o and its strings are copied,
 * but for api_keys). On failure the sink is not used: the caller still owns
 * sink_ctx. */
int ws_stream_start(rt_runtime *rt, const ws_stream_opts *o, rt_actor **out);

/* {"index":N,"event": for envelope frames, into pre; returns its length. */
size_t ws_envelope_prefix(uint64_t index, char pre[40]);
/* Is this client text an auth frame: an object whose only keys are "type"
 * ("auth") and "session_api_key"? Then *key is its key (borrowed from j). */
bool ws_auth_frame(json_t *j, const char **key);

#endif
