/*
 * ws_stream.c - a WebSocket subscriber of one conversation. See ws_stream.h.
 *
 * States: waiting for the auth frame (when the key did not come with the
 * upgrade), subscribing (CONV_SUBSCRIBE asked), live. The first subscribe
 * answer fixes where the stream starts (the replay mode) and sends the
 * full_state; a later one (after CONV_DROPPED) only says how many events
 * exist. From then on one routine, catch_up, sends what the socket is
 * owed from the log, and live events go straight out when they are next.
 * Reads the store cannot answer at once (a cluster's events older than
 * what the node holds) are made in the thread pool (conv_read.h): one at a
 * time, and the stream goes on when its answer (WS_READ, WS_FOUND) comes.
 *
 * Coalescing: frames made while handling messages wait in `pend`; the first
 * one posts WS_FLUSH to ourselves, which comes after the messages already
 * queued, so a burst of events leaves in one sink->send (one writev).
 */
#include "ws_stream.h"

#include "actors/conv_read.h"
#include "actors/viz.h"

#include "actors/event.h"
#include "runtime/json.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"
#include "runtime/text.h"
#include "store/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    WS_FLUSH = RT_KIND_RANGE(3) + 20,
    WS_AUTH_TIMEOUT,
    WS_STALL,
    WS_POSTED, /* arg: 0 the client message is in, 1 refused; buf: the reply */
    WS_RETRY,
    WS_READ,        /* a page read in the thread pool (conv_read_answer) */
    WS_FOUND,       /* after_id found in the thread pool (conv_read_answer) */
    WS_FWD_REFUSED, /* buf: "code\0detail": the owner node did not take the message */
    RETRY_MS = 20,  /* and as much again, at random */
    RETRIES = 250,  /* 5 to 10 s: a restart takes far less; a storm of 10,000 subscribers
                       is let in within it */
    PAGE = 100,
    PEND_MAX = WS_SEND_MAX, /* frames waiting for a flush before one is forced */
    WAIT_MAX = 64,          /* client messages waiting behind the one being posted */
};

typedef enum { S_AUTH, S_SUBSCRIBING, S_LIVE, S_DONE } wss_state;

typedef struct wss {
    ws_stream_opts o; /* o.after_id is ours */
    rt_actor *self;
    rt_actor *conv; /* while subscribed or subscribing */
    wss_state state;
    bool started;       /* the first subscription was answered */
    uint64_t next;      /* the next index the socket gets */
    uint64_t known;     /* events known to exist */
    uint64_t since_end; /* SINCE filters indexes below this */
    bool blocked;       /* waiting for WS_DRAINED */
    int retries;        /* subscriptions refused: the actor was stopping, or busy */
    unsigned seed;      /* for the retries' jitter */
    rt_timer_id auth_timer, stall_timer;
    conv_reader rd;     /* the log, once the first subscription answered */
    bool reading;       /* a WS_READ is on its way */
    bool finding;       /* a WS_FOUND is on its way */
    bool after_found;   /* view=blocks: blocks_from is after after_id */
    const char *status; /* the first subscription's, for full_state after a find */
    /* view=blocks */
    rt_actor *viz; /* watched */
    uint64_t sent; /* events folded into what the socket got */
    bool pulling;  /* a VIZ_PULL is out */
    bool tick_due; /* the view moved on: pull when the socket has room */
    ws_out *pend;
    size_t npend, pend_cap;
    bool flush_due;
    /* client messages: one posted at a time, so that they are in the log
     * in the order sent (a forward to the owner node takes a while) */
    bool posting;
    json_t *waiting; /* array: those behind it, at most WAIT_MAX */
} wss;

size_t ws_envelope_prefix(uint64_t index, char pre[40])
{
    /* by hand: every frame of an envelope stream has one */
    static const char head[] = "{\"index\":", tail[] = ",\"event\":";
    char digits[20];
    size_t n = 0, len = sizeof(head) - 1;
    do
        digits[n++] = (char)('0' + index % 10);
    while ((index /= 10) != 0);
    memcpy(pre, head, len);
    while (n > 0)
        pre[len++] = digits[--n];
    memcpy(pre + len, tail, sizeof(tail) - 1);
    return len + sizeof(tail) - 1;
}

bool ws_auth_frame(json_t *j, const char **key)
{
    json_t *type = json_object_get(j, "type");
    json_t *k = json_object_get(j, "session_api_key");
    size_t n = json_object_size(j);
    if (!json_is_object(j) || !json_is_string(type) ||
        strcmp(json_string_value(type), "auth") != 0 || n != 1 + (k != NULL))
        return false;
    *key = json_is_string(k) ? json_string_value(k) : "";
    return true;
}

/* ---- sending ------------------------------------------------------------- */

static void close_with(wss *w, int code, const char *reason, ws_close_reason why);

static void flush(wss *w)
{
    w->flush_due = false;
    if (w->npend == 0 || w->state == S_DONE)
        return;
    w->o.sink->send(w->o.sink_ctx, w->pend, w->npend);
    rt_count(&ws_metrics_g.frames, w->npend);
    w->npend = 0;
    free(w->pend); /* an idle stream holds no frame array */
    w->pend = NULL;
    w->pend_cap = 0;
    if (!w->blocked && w->o.sink->queued(w->o.sink_ctx) >= w->o.queue_bytes) {
        w->blocked = true;
        w->o.sink->notify_below(w->o.sink_ctx, w->o.queue_bytes / 2);
        if (w->o.stall_timeout_ms > 0)
            w->stall_timer = rt_timer_start(w->self, w->o.stall_timeout_ms, 0, WS_STALL, 0);
    }
}

/* Queue a frame: body[off, off+len) (a new reference is taken), as an
 * envelope when index is not UINT64_MAX and envelopes were asked for. */
static void put(wss *w, rt_buf *body, uint32_t off, uint32_t len, uint64_t index)
{
    if (w->state == S_DONE)
        return;
    if (w->npend == w->pend_cap) {
        size_t cap = w->pend_cap ? 2 * w->pend_cap : 8;
        ws_out *p = realloc(w->pend, cap * sizeof(*p));
        if (p == NULL) { /* a frame left out would be a gap */
            close_with(w, 1011, "out of memory", WS_CLOSED_OTHER);
            return;
        }
        w->pend = p;
        w->pend_cap = cap;
    }
    ws_out *f = &w->pend[w->npend++];
    f->body = rt_buf_ref(body);
    f->off = off;
    f->len = len;
    f->pre_len = f->post_len = 0;
    if (w->o.envelope) {
        if (index != UINT64_MAX) {
            f->pre_len = (uint8_t)ws_envelope_prefix(index, f->pre);
        } else {
            memcpy(f->pre, "{\"event\":", 9);
            f->pre_len = 9;
        }
        f->post[0] = '}';
        f->post_len = 1;
    }
    if (w->npend >= PEND_MAX)
        flush(w);
    else if (!w->flush_due)
        w->flush_due = rt_notify(w->self, WS_FLUSH, 0, NULL) == 0;
}

/* A frame that is not a log event (full_state, ServerErrorEvent). */
static void put_json(wss *w, json_t *e)
{
    char *s = ev_canonical_json(e);
    json_decref(e);
    rt_buf *b = s != NULL ? rt_buf_take(s, strlen(s)) : NULL; /* frees s if it fails */
    if (b == NULL)
        return;
    put(w, b, 0, (uint32_t)rt_buf_len(b), UINT64_MAX);
    rt_buf_unref(b);
}

/* An environment event of our own, not stored: id, timestamp, source. */
static json_t *transient(const char *kind)
{
    rt_uuid u;
    char id[37], ts[32];
    rt_uuid_v4(&u);
    rt_uuid_dashed(&u, id);
    ev_now_timestamp(ts);
    return json_pack("{s:s, s:s, s:s, s:s}", "id", id, "timestamp", ts, "source", "environment",
                     "kind", kind);
}

static void server_error(wss *w, const char *code, const char *detail)
{
    json_t *e = transient("ServerErrorEvent");
    json_object_set_new(e, "code", json_string(code));
    json_object_set_new(e, "detail", json_string(detail));
    put_json(w, e);
}

/* ---- closing ------------------------------------------------------------- */

static void close_with(wss *w, int code, const char *reason, ws_close_reason why)
{
    if (w->state == S_DONE)
        return;
    flush(w);
    w->state = S_DONE;
    rt_count(&ws_metrics_g.closed[why], 1);
    w->o.sink->close(w->o.sink_ctx, code, reason);
}

/* ---- the log -------------------------------------------------------------- */

/* Does a stored event's timestamp come before ts? Stored events are
 * canonical: the timestamp is a string member near the start. */
static bool before(const char *json, size_t len, const char *ts)
{
    static const char key[] = "\"timestamp\":\"";
    const char *p = memmem(json, len, key, sizeof(key) - 1);
    if (p == NULL)
        return false;
    p += sizeof(key) - 1;
    const char *end = memchr(p, '"', len - (size_t)(p - json));
    size_t n = end != NULL ? (size_t)(end - p) : 0;
    int c = strncmp(p, ts, n < strlen(ts) ? n : strlen(ts));
    return c < 0 || (c == 0 && n < strlen(ts));
}

/* Queue a page's events from w->next on. */
static void send_page(wss *w, const st_page *p)
{
    for (uint32_t i = 0; i < p->n; i++) {
        const st_event_ref *r = &p->ev[i];
        const char *json = (const char *)rt_buf_data(p->bytes) + r->off;
        if (r->index < w->next ||
            (w->o.replay == WS_REPLAY_SINCE && r->index < w->since_end &&
             (w->o.after_ts[0] == '\0' || before(json, r->len, w->o.after_ts))))
            continue;
        put(w, p->bytes, r->off, r->len, r->index);
    }
    if (p->ev[p->n - 1].index + 1 > w->next)
        w->next = p->ev[p->n - 1].index + 1;
    flush(w);
}

static void unreadable(wss *w, int e, pl_outcome why, const char *detail)
{
    rt_log(RT_LOG_ERROR, "ws", "cannot read the log at %" PRIu64 ": %s", w->next,
           e < 0 ? detail : "past its end");
    close_with(w, e < 0 && why == PL_BUSY ? 1013 : 1011, "cannot read the conversation's log",
               WS_CLOSED_OTHER);
}

/* Send what the socket is owed, from the log, until it is up to date or
 * its queue is full, or until a read in the thread pool answers. */
static void catch_up(wss *w)
{
    while (w->state == S_LIVE && !w->blocked && !w->reading && w->next < w->known) {
        uint64_t n = w->known - w->next;
        st_page *p;
        pl_outcome why;
        char detail[200];
        int e =
            conv_read_page_soon(&w->rd, w->self, WS_READ, w->next, (uint32_t)(n < PAGE ? n : PAGE),
                                &p, &why, detail, sizeof(detail));
        if (e == 1) {
            w->reading = true;
            return;
        }
        if (e < 0 || p->n == 0) {
            if (e == 0)
                st_page_free(p);
            unreadable(w, e, why, detail);
            return;
        }
        send_page(w, p);
        st_page_free(p);
    }
}

static void read_answered(wss *w, const rt_msg *m)
{
    w->reading = false;
    const conv_read_answer *a = conv_read_answer_of(m);
    if (w->state == S_DONE)
        return;
    if (a == NULL || a->err < 0 || a->page->n == 0) {
        unreadable(w, a == NULL || a->err < 0 ? -1 : 0, a != NULL ? a->why : PL_FAILED,
                   a != NULL ? a->detail : "out of memory");
        return;
    }
    send_page(w, a->page);
    catch_up(w);
}

/* ---- subscribing ------------------------------------------------------------ */

static void retry(wss *w);

static void subscribe(wss *w)
{
    rt_actor_unref(w->conv);
    w->conv = NULL;
    int e = convs_get(w->o.convs, &w->o.conv, &w->conv);
    if (e == -ENOENT) {
        close_with(w, 4004, "Conversation not found", WS_CLOSED_NOT_FOUND);
        return;
    }
    if (e == 0)
        e = rt_ask(w->conv, CONV_SUBSCRIBE, CONV_SUB_TOLD, NULL, w->self);
    w->state = S_SUBSCRIBING;
    if (e == RT_ECLOSED || e == RT_EFULL)
        retry(w);
    else if (e < 0)
        close_with(w, 1011, "cannot subscribe to the conversation", WS_CLOSED_OTHER);
}

/* The conversation's actor was stopping (deleted, or restarting), or its
 * mailbox was full (a storm of subscribers): ask again in a moment, at a
 * random one, so that a storm spreads out. */
static void retry(wss *w)
{
    uint64_t ms = RETRY_MS + (uint64_t)rand_r(&w->seed) % RETRY_MS;
    if (w->retries++ < RETRIES && rt_timer_start(w->self, ms, 0, WS_RETRY, 0) != 0)
        return;
    close_with(w, 1013, "the conversation is busy: reconnect later", WS_CLOSED_OTHER);
}

/* The state as upstream's full_state carries it: the conversation's stored
 * fields that belong to ConversationState, its id and status. */
static void full_state(wss *w, const char *status)
{
    static const char *const fields[] = {
        "agent",           "workspace",           "persistence_dir",   "max_iterations",
        "stuck_detection", "confirmation_policy", "security_analyzer", "tags",
        "agent_state",     "hook_config",         "secret_registry"};
    json_t *value = json_object();
    rt_buf *m = st_conv_meta(w->rd.sc);
    json_t *meta =
        m != NULL ? rt_json_read((const char *)rt_buf_data(m), rt_buf_len(m), 0, NULL) : NULL;
    rt_buf_unref(m);
    char id[37];
    rt_uuid_dashed(&w->o.conv, id);
    json_object_set_new(value, "id", json_string(id));
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        json_t *v = json_object_get(meta, fields[i]);
        if (v != NULL)
            json_object_set(value, fields[i], v);
    }
    json_decref(meta);
    json_object_set_new(value, "execution_status", json_string(status));
    json_t *e = transient("ConversationStateUpdateEvent");
    json_object_set_new(e, "key", json_string("full_state"));
    json_object_set_new(e, "value", value);
    put_json(w, e);
}

static void not_an_event(wss *w)
{
    char detail[200];
    snprintf(detail, sizeof(detail), "after_id %.60s is not an event of this conversation",
             w->o.after_id);
    close_with(w, 1008, detail, WS_CLOSED_OTHER);
}

/* The first subscription's answer: where the stream starts. 0, 1 once
 * after_id is found (WS_FOUND), or -1 (closed). */
static int start(wss *w, uint64_t count, const char *status)
{
    pl_outcome why;
    char detail[200];
    if (conv_read_open(w->o.store, &w->o.conv, &w->rd, NULL, &why, detail, sizeof(detail)) < 0) {
        if (why == PL_NOT_FOUND)
            close_with(w, 4004, "Conversation not found", WS_CLOSED_NOT_FOUND);
        else
            close_with(w, why == PL_BUSY ? 1013 : 1011, detail, WS_CLOSED_OTHER);
        return -1;
    }
    uint64_t at;
    switch (w->o.replay) {
    case WS_REPLAY_NONE:
        w->next = count;
        break;
    case WS_REPLAY_ALL:
        w->next = 0;
        break;
    case WS_REPLAY_SINCE:
        w->next = w->o.after_ts[0] != '\0' ? 0 : count;
        w->since_end = count;
        break;
    case WS_REPLAY_AFTER_ID:
        switch (conv_read_find_soon(&w->rd, w->self, WS_FOUND, w->o.after_id, strlen(w->o.after_id),
                                    &at)) {
        case 0:
            w->next = at + 1;
            break;
        case 1:
            w->finding = true;
            w->status = status;
            return 1;
        case -ENOENT:
            not_an_event(w);
            return -1;
        default:
            close_with(w, 1011, "cannot look the event up now", WS_CLOSED_OTHER);
            return -1;
        }
        break;
    }
    full_state(w, status);
    return 0;
}

static void subscribed(wss *w, rt_msg *m)
{
    const conv_reply *cr = m->kind == CONV_RESULT ? conv_reply_of(m) : NULL;
    if (cr == NULL || cr->v.outcome != PL_DONE) {
        if (cr != NULL && cr->v.outcome == PL_NOT_FOUND)
            close_with(w, 4004, "Conversation not found", WS_CLOSED_NOT_FOUND);
        else if (cr != NULL && cr->v.outcome == PL_BUSY)
            close_with(w, 1013, "Too many connections for this conversation", WS_CLOSED_CAP);
        else if (m->kind == RT_KIND_ERROR && (m->status == RT_ECLOSED || m->status == RT_EFULL))
            retry(w);
        else
            close_with(w, 1011, "cannot subscribe to the conversation", WS_CLOSED_OTHER);
        return;
    }
    convs_refresh(w->o.convs, &w->o.conv, &w->conv);
    uint64_t n = cr->count;
    int s = 0;
    if (!w->started) {
        w->started = true;
        s = start(w, n, conv_status_name(cr->status));
    }
    if (s < 0)
        return;
    if (n > w->known)
        w->known = n;
    w->retries = 0;
    if (s == 0 && !w->finding) {
        w->state = S_LIVE;
        catch_up(w);
    }
}

static void watch(wss *w);

/* after_id's index, from the thread pool: the stream starts after it. */
static void found(wss *w, const rt_msg *m)
{
    w->finding = false;
    const conv_read_answer *a = conv_read_answer_of(m);
    if (w->state == S_DONE)
        return;
    if (a == NULL || (a->err < 0 && a->err != -ENOENT)) {
        close_with(w, 1011, "cannot look the event up now", WS_CLOSED_OTHER);
        return;
    }
    if (a->err == -ENOENT) {
        not_an_event(w);
        return;
    }
    if (w->o.blocks) { /* view=blocks: the visualizer folds from there */
        w->after_found = true;
        w->o.blocks_from = a->index + 1;
        watch(w);
        return;
    }
    w->next = a->index + 1;
    full_state(w, w->status);
    if (w->state == S_SUBSCRIBING) {
        w->state = S_LIVE;
        catch_up(w);
    }
}

static void live_event(wss *w, uint64_t index, rt_buf *b)
{
    if (index + 1 > w->known)
        w->known = index + 1;
    if (index == w->next && !w->blocked && !w->reading && b != NULL &&
        !(w->o.replay == WS_REPLAY_SINCE && index < w->since_end)) {
        put(w, b, 0, (uint32_t)rt_buf_len(b), index);
        w->next++;
    } else if (index >= w->next) {
        catch_up(w);
    }
}

/* ---- view=blocks ------------------------------------------------------------- */

/* Watch the visualizer: from blocks_from the first time, then from what
 * the socket has (a visualizer that stopped is replaced by a new one). */
static void watch(wss *w)
{
    rt_actor_unref(w->viz);
    w->viz = NULL;
    w->pulling = false;
    w->state = S_SUBSCRIBING;
    if (w->conv == NULL) { /* for the client's messages */
        int e = convs_get(w->o.convs, &w->o.conv, &w->conv);
        if (e == -ENOENT) {
            close_with(w, 4004, "Conversation not found", WS_CLOSED_NOT_FOUND);
            return;
        }
    }
    if (!w->started && w->o.after_id != NULL && !w->after_found) {
        /* the log is opened on the loop only if that costs nothing (a
         * cluster node's that is open and loaded); else in the pool */
        pl_outcome why;
        char detail[200];
        uint64_t at;
        int o = conv_read_open_now(w->o.store, &w->o.conv, &w->rd, &why, detail, sizeof(detail));
        if (o < 0) {
            if (why == PL_NOT_FOUND)
                close_with(w, 4004, "Conversation not found", WS_CLOSED_NOT_FOUND);
            else
                close_with(w, why == PL_BUSY ? 1013 : 1011, detail, WS_CLOSED_OTHER);
            return;
        }
        int f = o == 1 ? conv_read_find_pool(w->o.store, &w->o.conv, w->self, WS_FOUND,
                                             w->o.after_id, strlen(w->o.after_id))
                       : conv_read_find_soon(&w->rd, w->self, WS_FOUND, w->o.after_id,
                                             strlen(w->o.after_id), &at);
        switch (f) {
        case 0:
            w->after_found = true;
            w->o.blocks_from = at + 1;
            break;
        case 1:
            w->finding = true; /* found() watches */
            return;
        case -ENOENT:
            not_an_event(w);
            return;
        default:
            close_with(w, 1011, "cannot look the event up now", WS_CLOSED_OTHER);
            return;
        }
    }
    int e = convs_viz(w->o.convs, &w->o.conv, &w->viz);
    if (e == -ENOENT) {
        close_with(w, 4004, "Conversation not found", WS_CLOSED_NOT_FOUND);
        return;
    }
    if (e == 0)
        e = rt_ask(w->viz, VIZ_WATCH, w->started ? w->sent : w->o.blocks_from, NULL, w->self);
    if (e == RT_ECLOSED || e == RT_EFULL)
        retry(w);
    else if (e < 0)
        close_with(w, 1011, "cannot watch the conversation", WS_CLOSED_OTHER);
}

static void pull(wss *w)
{
    w->tick_due = false;
    w->pulling = rt_ask(w->viz, VIZ_PULL, w->sent, NULL, w->self) == 0;
    if (!w->pulling)
        watch(w);
}

/* The visualizer's answer: frames, one per line. */
static void viewed(wss *w, rt_msg *m)
{
    w->pulling = false;
    if (m->kind == RT_KIND_ERROR || m->status == -ECONNRESET) {
        w->state = S_SUBSCRIBING;
        if (m->kind == VIZ_RESULT || m->status == RT_ECLOSED || m->status == RT_EFULL)
            retry(w);
        else
            close_with(w, 1011, "the conversation's visualizer did not answer", WS_CLOSED_OTHER);
        return;
    }
    if (m->status != 0) {
        if (m->status == -ENOENT)
            close_with(w, 4004, "Conversation not found", WS_CLOSED_NOT_FOUND);
        else if (m->status == -EBUSY)
            close_with(w, 1013, "Too many connections for this conversation", WS_CLOSED_CAP);
        else if (m->status == -E2BIG)
            close_with(w, 1011, "the conversation has more blocks than the visualizer holds",
                       WS_CLOSED_OTHER);
        else
            close_with(w, 1011, "cannot read the conversation's state", WS_CLOSED_OTHER);
        return;
    }
    w->started = true;
    w->retries = 0;
    w->state = S_LIVE;
    w->sent = m->arg;
    const char *p = m->buf != NULL ? (const char *)rt_buf_data(m->buf) : "";
    size_t n = m->buf != NULL ? rt_buf_len(m->buf) : 0, off = 0;
    while (off < n) {
        const char *nl = memchr(p + off, '\n', n - off);
        size_t len = nl != NULL ? (size_t)(nl - (p + off)) : n - off;
        put(w, m->buf, (uint32_t)off, (uint32_t)len, UINT64_MAX);
        off += len + 1;
    }
    flush(w);
    if (w->tick_due && !w->blocked)
        pull(w);
}

static void ticked(wss *w)
{
    w->tick_due = true;
    if (w->state == S_LIVE && !w->pulling && !w->blocked)
        pull(w);
}

/* Where a stream starts once authenticated, and starts again. */
static void begin(wss *w)
{
    if (w->o.blocks)
        watch(w);
    else
        subscribe(w);
}

/* ---- the client's frames ------------------------------------------------------ */

typedef struct posting {
    rt_actor *self; /* held */
    convs *convs;
    rt_uuid conv;
    uint64_t timeout_ms;
} posting;

static void posting_end(posting *p, uint64_t status, rt_buf *body)
{
    if (rt_notify(p->self, WS_POSTED, status, body) < 0)
        rt_buf_unref(body);
    rt_actor_unref(p->self);
    free(p);
}

static void on_run(void *ctx, rt_msg *m)
{
    (void)m; /* already running, or not allowed now: the message is in either way */
    posting_end(ctx, 0, NULL);
}

static void on_posted(void *ctx, rt_msg *m)
{
    posting *p = ctx;
    if (m->kind != CONV_RESULT ||
        (m->arg != PL_COMMITTED && m->arg != PL_DUPLICATE && m->arg != PL_DEFERRED)) {
        posting_end(p, 1, m->kind == CONV_RESULT && m->buf != NULL ? rt_buf_ref(m->buf) : NULL);
        return;
    }
    if (convs_call(p->convs, &p->conv, RT_LOOP_ANY, CONV_CONTROL, CONV_RUN, NULL, p->timeout_ms,
                   on_run, p) < 0)
        posting_end(p, 0, NULL);
}

/* The posting ends refused, before it reached a conversation: the stream
 * gets WS_FWD_REFUSED with "code\0detail". */
static void posting_refused(posting *p, const char *code, const char *detail)
{
    char b[400];
    size_t n = (size_t)snprintf(b, sizeof(b), "%s%c%s", code, 0, detail);
    rt_buf *r = rt_buf_copy(b, (n < sizeof(b) ? n : sizeof(b) - 1) + 1);
    if (rt_notify(p->self, WS_FWD_REFUSED, 0, r) < 0)
        rt_buf_unref(r);
    rt_actor_unref(p->self);
    free(p);
}

/* Post event b (taken) here: appended, then a run. */
static void post_here(posting *p, rt_buf *b)
{
    if (convs_call(p->convs, &p->conv, RT_LOOP_ANY, CONV_APPEND, 0, b, p->timeout_ms, on_posted,
                   p) < 0) {
        rt_buf_unref(b);
        posting_refused(p, "ServiceUnavailable", "cannot post the message now; retry");
    }
}

/* ---- several nodes: the owner posts it ---------------------------------------- */

/* On a store shared by nodes, a message for a conversation that another
 * live node owns goes to that node, as the `POST .../events` (with its
 * run) a client would send it: there it is appended as the owner's, and
 * this node's stream shows it when it comes back from the log, as every
 * other event. Routing and forwarding wait for the cluster: in the thread
 * pool. */
typedef struct fwd_job {
    uv_work_t req;
    posting *p;
    st_store *store;
    rt_buf *event; /* to post here if the owner is this node, or none */
    char *body;    /* the request's body, for the owner */
    bool here;
    char code[32], detail[300]; /* refused: why */
} fwd_job;

static void refused_by(fwd_job *j, int status, const rt_buf *body, const char *err)
{
    snprintf(j->code, sizeof(j->code), "%s",
             status == 503 || status == 0 ? "ServiceUnavailable" : "Refused");
    json_error_t e;
    json_t *v = body != NULL
                    ? rt_json_read((const char *)rt_buf_data(body), rt_buf_len(body), 0, &e)
                    : NULL;
    const char *d = json_string_value(json_object_get(v, "detail"));
    snprintf(j->detail, sizeof(j->detail), "%.*s", (int)sizeof(j->detail) - 1, d != NULL ? d : err);
    json_decref(v);
}

static void fwd_work(uv_work_t *req)
{
    fwd_job *j = req->data;
    st_route to;
    char err[256] = "";
    int e = st_route_of(j->store, &j->p->conv, &to, err, sizeof(err));
    if (e == 0 && !to.forward) {
        j->here = true;
        return;
    }
    char target[96], dashed[37];
    rt_uuid_dashed(&j->p->conv, dashed);
    snprintf(target, sizeof(target), "/api/conversations/%s/events", dashed);
    st_fwd_req fr = {.method = "POST", .target = target, .body = j->body, .len = strlen(j->body)};
    st_fwd_answer a = {0};
    if (e == 0)
        e = st_forward(j->store, &to, &j->p->conv, &fr, j->p->timeout_ms, &a, err, sizeof(err));
    if (e < 0) {
        char why[sizeof(err) + 64];
        snprintf(why, sizeof(why), "cannot post the message to the owner of the conversation: %s",
                 err);
        refused_by(j, 503, NULL, why);
    } else if (a.status / 100 != 2) {
        refused_by(j, a.status, a.body, "the owner node refused the message");
    }
    rt_buf_unref(a.body);
}

static void fwd_done(uv_work_t *req, int status)
{
    fwd_job *j = req->data;
    posting *p = j->p;
    if (status == 0 && j->here) {
        post_here(p, j->event);
    } else {
        rt_buf_unref(j->event);
        if (status < 0)
            posting_refused(p, "ServiceUnavailable", "the server is stopping");
        else if (j->code[0] != '\0')
            posting_refused(p, j->code, j->detail);
        else
            posting_end(p, 0, NULL); /* the owner took it */
    }
    free(j->body);
    free(j);
}

/* Post b (taken): to the owner node if another one owns the conversation,
 * else here. */
static void post(wss *w, posting *p, rt_buf *b, json_t *role, json_t *parts)
{
    st_store *s = w->o.store;
    if (s == NULL || !st_store_shared(s) || st_conv_writes_here(s, &p->conv)) {
        post_here(p, b);
        return;
    }
    json_t *req =
        json_pack("{s:s, s:O, s:b}", "role", role != NULL ? json_string_value(role) : "user",
                  "content", parts, "run", 1);
    fwd_job *j = req != NULL ? calloc(1, sizeof(*j)) : NULL;
    char *body = j != NULL ? rt_json_dumps(req, NULL) : NULL;
    json_decref(req);
    if (body == NULL) {
        free(j);
        post_here(p, b); /* out of memory: here, as one node would */
        return;
    }
    *j = (fwd_job){.p = p, .store = s, .event = b, .body = body};
    j->req.data = j;
    rt_runtime *rt = rt_actor_runtime(w->self);
    if (uv_queue_work(rt_runtime_uv(rt, rt_actor_loop(w->self)), &j->req, fwd_work, fwd_done) !=
        0) {
        free(body);
        free(j);
        post_here(p, b);
    }
}

/* A client's Message: appended as a user MessageEvent, then a run. */
static void post_message(wss *w, json_t *msg)
{
    json_t *content = json_object_get(msg, "content");
    json_t *role = json_object_get(msg, "role");
    const char *bad = !json_is_object(msg) ? "a frame must be a JSON object"
                      : content != NULL && !json_is_array(content) && !json_is_string(content)
                          ? "content must be a list, or a string"
                      : role != NULL && !json_is_string(role) ? "role must be a string"
                                                              : NULL;
    if (bad != NULL) {
        server_error(w, "ValidationError", bad);
        return;
    }
    /* as upstream reads a socket's message: a string is one text part, no
     * content none */
    json_t *parts = json_is_array(content) ? json_incref(content)
                    : json_is_string(content)
                        ? json_pack("[{s:s, s:O}]", "type", "text", "text", content)
                        : json_array();
    json_t *e = ev_user_message(role != NULL ? json_string_value(role) : "user", parts);
    rt_buf *b = rt_json_buf(e);
    posting *p = b != NULL && w->conv != NULL ? malloc(sizeof(*p)) : NULL;
    if (p == NULL) {
        rt_buf_unref(b);
        json_decref(parts);
        server_error(w, "ServiceUnavailable", "cannot post the message now; retry");
        return;
    }
    *p = (posting){rt_actor_ref(w->self), w->o.convs, w->o.conv, w->o.call_timeout_ms};
    w->posting = true; /* until WS_POSTED or WS_FWD_REFUSED */
    post(w, p, b, role, parts);
    json_decref(parts);
}

/* A client's message: posted now, or behind the one being posted. */
static void offer(wss *w, json_t *msg)
{
    if (!w->posting) {
        post_message(w, msg);
    } else if (json_array_size(w->waiting) >= WAIT_MAX ||
               (w->waiting == NULL && (w->waiting = json_array()) == NULL) ||
               json_array_append(w->waiting, msg) != 0) {
        server_error(w, "ServiceUnavailable", "too many messages waiting to be posted; retry");
    }
}

/* The message being posted is in or refused: the next one. */
static void post_next(wss *w)
{
    w->posting = false;
    while (!w->posting && json_array_size(w->waiting) > 0) {
        json_t *msg = json_incref(json_array_get(w->waiting, 0));
        json_array_remove(w->waiting, 0);
        post_message(w, msg);
        json_decref(msg);
    }
}

static void client_frame(wss *w, int opcode, const rt_buf *b)
{
    json_error_t err;
    json_t *j = opcode == 1 && b != NULL
                    ? rt_json_read((const char *)rt_buf_data(b), rt_buf_len(b), 0, &err)
                    : NULL;
    const char *key;
    bool auth = j != NULL && ws_auth_frame(j, &key);
    if (w->state == S_AUTH) {
        if (auth && rt_keys_match(w->o.api_keys, w->o.napi_keys, key)) {
            rt_timer_stop(w->self, w->auth_timer);
            begin(w);
        } else {
            close_with(w, 4001, "Authentication failed", WS_CLOSED_AUTH);
        }
    } else if (opcode != 1) {
        server_error(w, "ValidationError", "frames must be text: JSON Message objects");
    } else if (j == NULL) {
        char detail[200];
        snprintf(detail, sizeof(detail), "not JSON: %s", err.text);
        server_error(w, "JSONDecodeError", detail);
    } else if (!auth) {
        offer(w, j);
    }
    json_decref(j);
}

/* The message is in (refused 0), or the conversation refused it: its
 * reply (a conv_reply, or NULL) says why. */
static void posted(wss *w, uint64_t refused, const rt_buf *body)
{
    if (refused == 0)
        return;
    const conv_reply *cr = body != NULL && rt_buf_len(body) >= sizeof(conv_reply)
                               ? (const conv_reply *)(const void *)rt_buf_data(body)
                               : NULL;
    char code[48];
    snprintf(code, sizeof(code), "%s", cr != NULL && cr->v.rule != NULL ? cr->v.rule : "Refused");
    server_error(w, code,
                 cr != NULL && cr->v.detail[0] != '\0' ? cr->v.detail
                                                       : "the conversation refused the message");
}

/* ---- figures ------------------------------------------------------------------- */

ws_metrics ws_metrics_g;

void ws_metrics_render(rt_text *t)
{
    static const char *const why[WS_CLOSE_REASONS] = {"client", "stalled",  "auth", "not_found",
                                                      "cap",    "protocol", "ping", "other"};
    rt_metric_gauge(t, "parley_ws_streams", "WebSocket event streams open.",
                    atomic_load_explicit(&ws_metrics_g.open, memory_order_relaxed));
    rt_metric_counter(t, "parley_ws_frames_total", "Event frames queued to WebSocket subscribers.",
                      rt_metric_get(&ws_metrics_g.frames));
    rt_metric_family(t, "parley_ws_closed_total", "WebSocket streams closed, by reason.", "reason",
                     why, ws_metrics_g.closed, WS_CLOSE_REASONS);
}

/* ---- the actor ---------------------------------------------------------------- */

static int wss_init(rt_actor *self, void *arg, void **state)
{
    wss *w = arg; /* made by ws_stream_start, freed by wss_stop */
    const ws_stream_opts *o = &w->o;
    w->self = self;
    w->seed = (unsigned)rt_actor_id(self);
    *state = w;
    atomic_fetch_add_explicit(&ws_metrics_g.open, 1, memory_order_relaxed);
    if (o->napi_keys == 0 || o->authed) {
        begin(w);
    } else {
        w->state = S_AUTH;
        w->auth_timer = rt_timer_start(self, o->auth_timeout_ms, 0, WS_AUTH_TIMEOUT, 0);
    }
    return 0;
}

static int wss_handle(rt_actor *self, void *state, rt_msg *m)
{
    (void)self;
    wss *w = state;
    switch (m->kind) {
    case CONV_RESULT:
    case RT_KIND_ERROR:
        if (m->kind == RT_KIND_ERROR && (m->arg == VIZ_WATCH || m->arg == VIZ_PULL)) {
            if (w->state == S_SUBSCRIBING || w->state == S_LIVE)
                viewed(w, m);
        } else if (w->state == S_SUBSCRIBING &&
                   (m->kind == CONV_RESULT || m->arg == CONV_SUBSCRIBE)) {
            subscribed(w, m);
        }
        break;
    case VIZ_RESULT:
        if (w->state == S_SUBSCRIBING || w->state == S_LIVE)
            viewed(w, m);
        break;
    case VIZ_TICK:
        ticked(w);
        break;
    case VIZ_GONE:
        if (w->state == S_LIVE || w->state == S_SUBSCRIBING)
            watch(w);
        break;
    case CONV_EVENT:
        if (w->state == S_LIVE)
            live_event(w, m->arg, m->buf);
        else if (w->finding && m->arg + 1 > w->known) /* read once after_id is found */
            w->known = m->arg + 1;
        break;
    case CONV_DROPPED:
        if (w->state == S_LIVE || w->state == S_SUBSCRIBING)
            subscribe(w);
        break;
    case CONV_SYNC:
        rt_reply(m, CONV_SYNC_DONE, 0, m->arg, NULL);
        break;
    case WS_IN:
        if (w->state != S_DONE)
            client_frame(w, (int)m->arg, m->buf);
        break;
    case WS_POSTED:
        posted(w, m->arg, m->buf);
        post_next(w);
        break;
    case WS_FWD_REFUSED: /* "code\0detail" */
        if (m->buf != NULL && rt_buf_len(m->buf) > 0) {
            const char *code = (const char *)rt_buf_data(m->buf);
            server_error(w, code, code + strlen(code) + 1);
        }
        post_next(w);
        break;
    case WS_FLUSH:
        flush(w);
        break;
    case WS_RETRY:
        if (w->state == S_SUBSCRIBING && !w->finding)
            begin(w);
        break;
    case WS_READ:
        read_answered(w, m);
        break;
    case WS_FOUND:
        found(w, m);
        break;
    case WS_DRAINED:
        w->blocked = false;
        if (w->stall_timer != 0)
            rt_timer_stop(w->self, w->stall_timer);
        w->stall_timer = 0;
        catch_up(w);
        if (w->tick_due && w->state == S_LIVE && !w->pulling)
            pull(w);
        break;
    case WS_STALL:
        w->stall_timer = 0;
        if (w->blocked)
            close_with(w, 1013, "the client is not reading", WS_CLOSED_STALLED);
        break;
    case WS_AUTH_TIMEOUT:
        if (w->state == S_AUTH)
            close_with(w, 4001, "Authentication failed: no auth frame in time", WS_CLOSED_AUTH);
        break;
    case WS_GONE: /* counted by the socket's side */
        w->state = S_DONE;
        return RT_DONE;
    default:
        break;
    }
    return 0;
}

static void wss_stop(rt_actor *self, void *state)
{
    wss *w = state;
    if (w->conv != NULL && !w->o.blocks)
        rt_ask(w->conv, CONV_UNSUBSCRIBE, 0, NULL, self);
    rt_actor_unref(w->conv);
    if (w->viz != NULL) {
        rt_send(w->viz, VIZ_UNWATCH, 0, NULL);
        rt_actor_unref(w->viz);
    }
    for (size_t i = 0; i < w->npend; i++)
        rt_buf_unref(w->pend[i].body);
    free(w->pend);
    conv_read_close(&w->rd);
    json_decref(w->waiting);
    w->o.sink->release(w->o.sink_ctx);
    free((char *)w->o.after_id);
    free(w);
    atomic_fetch_sub_explicit(&ws_metrics_g.open, 1, memory_order_relaxed);
}

static const rt_behaviour wss_behaviour = {
    .name = "ws_stream",
    .init = wss_init,
    .handle = wss_handle,
    .stop = wss_stop,
};

int ws_stream_start(rt_runtime *rt, const ws_stream_opts *o, rt_actor **out)
{
    wss *w = calloc(1, sizeof(*w));
    char *after = w != NULL && o->after_id != NULL ? strdup(o->after_id) : NULL;
    if (w == NULL || (o->after_id != NULL && after == NULL)) {
        free(w);
        return RT_ENOMEM;
    }
    w->o = *o;
    w->o.after_id = after;
    if (w->o.blocks)
        w->o.envelope = false; /* view frames carry their index */
    rt_spawn_opts so = {.beh = &wss_behaviour, .arg = w, .loop = RT_LOOP_ANY, .mailbox_cap = 1024};
    int e = rt_spawn(rt, &so, out);
    if (e < 0) {
        free(after);
        free(w);
    }
    return e;
}
