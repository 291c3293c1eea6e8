/*
 * load_sub.c - the subscribers of `parley load`: WebSockets on
 * /sockets/events/{id}?envelope=index that read every frame, check that
 * their indexes come dense, in order and once, and time each event from
 * the send time in its text (load_mark_find) to its arrival; and the
 * stalled ones, which upgrade with a small receive buffer and never read
 * until the run is over, when they read what they hold to learn how the
 * server ended them. With --faults each reading subscriber cuts its own
 * connection now and then during the run (every 100 to 1,000 frames) and
 * connects again with after_id=<the last event it got>: the server must
 * resume it exactly where it was (the index check goes on across the cut).
 *
 * A read lands in the shard's buffer, after the bytes a previous read cut
 * short (the socket's carry-over, copied in front); frames are parsed in
 * place, and only the cut frame at the end is copied back to the carry.
 * A frame bigger than half the buffer is read into the carry itself.
 */
#include "load.h"

#include "net/http_resp.h"
#include "net/ws_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S_NEW, S_CONNECTING, S_UPGRADING, S_WAITING, S_OPEN, S_CUT, S_CLOSED };

enum { CUT_MIN = 100, CUT_SPAN = 900 }; /* --faults: frames between cuts, [100, 1000) */

struct load_sub {
    uv_tcp_t tcp;
    load_shard *sh;
    int conv;
    uint8_t state;
    bool stalled, awaited, opened;
    load_seq seq;
    hr_parser *hr; /* while upgrading */
    char accept[NET_WS_ACCEPT_LEN + 1];
    uint8_t *carry; /* the bytes of a frame cut by the end of a read */
    size_t carry_len, carry_cap;
    uint8_t *msg; /* a fragmented message, being joined */
    size_t msg_len;
    int msg_op;
    load_fate *fate;  /* the stalled ones' */
    char last_id[64]; /* the last event's id, to resume after a cut (--faults) */
    int cut_in;       /* frames until this subscriber cuts its connection */
};

static void connect_next(load_shard *sh);

static double since_run(const load_shard *sh)
{
    uint64_t t0 = sh->run->t_run;
    return t0 != 0 ? (double)(uv_hrtime() - t0) / 1e9 : 0;
}

/* What the phase waited for of this subscriber has happened. */
static void settle(load_sub *s)
{
    if (s->awaited) {
        s->awaited = false;
        load_done(s->sh);
    }
}

static void send_frame(load_sub *s, int opcode, const uint8_t *p, size_t n)
{
    uint8_t f[NET_WS_HEADER_MAX + 4 + 125 + 256];
    size_t len = net_ws_client_frame(f, sizeof(f), opcode, p, n);
    if (len > 0)
        load_write((uv_stream_t *)&s->tcp, f, len);
}

/* Do this connection's bytes still count? Not once it is over or cut. */
static bool reading(const load_sub *s)
{
    return s->state != S_CLOSED && s->state != S_CUT;
}

/* What was read and not yet used: gone with the connection. */
static void forget_input(load_sub *s)
{
    hr_free(s->hr);
    s->hr = NULL;
    free(s->carry);
    free(s->msg);
    s->carry = s->msg = NULL;
    s->carry_len = s->carry_cap = s->msg_len = 0;
    s->msg_op = 0;
}

/* The subscriber is over: uverr is the socket's error (0: a close frame or
 * our own decision); kind, when not NULL, the error to count. */
static void sub_end(load_sub *s, int uverr, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void sub_end(load_sub *s, int uverr, const char *kind, const char *fmt, ...)
{
    load_shard *sh = s->sh;
    if (s->state == S_CLOSED || s->state == S_NEW)
        return;
    if (s->state == S_CUT) { /* its handle is closing: on_cut_closed connects no more */
        s->state = S_CLOSED;
        settle(s);
        return;
    }
    bool upgrading = s->state == S_CONNECTING || s->state == S_UPGRADING;
    s->state = S_CLOSED;
    load_close((uv_handle_t *)&s->tcp);
    forget_input(s);
    if (s->fate != NULL && s->opened) {
        load_fate *f = s->fate;
        if (sh->run->phase != LOAD_CLOSE) { /* else still open: we end it */
            f->end = f->close_code != 0 ? "closed" : uverr == UV_EOF ? "eof" : "reset";
            if (f->at_s < 0)
                f->at_s = since_run(sh);
        }
    } else if (kind != NULL && sh->run->phase != LOAD_CLOSE) {
        char line[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        load_err(sh, kind, "a subscriber of conversation %s: %s", sh->run->convs[s->conv].id, line);
    }
    settle(s);
    if (upgrading) {
        sh->upgrading--;
        connect_next(sh);
    }
}

static void remember_id(load_sub *s, const uint8_t *p, size_t n);
static void cut(load_sub *s);

/* ---- frames ------------------------------------------------------------------------ */

static void message(load_sub *s, const uint8_t *p, size_t n, uint64_t now)
{
    load_shard *sh = s->sh;
    if (s->state == S_WAITING) { /* the first frame: the full_state */
        s->state = S_OPEN;
        if (!s->opened) {
            s->opened = true;
            sh->opened++;
            settle(s);
        }
    }
    int64_t index = load_frame_index(p, n);
    if (index < 0) {
        sh->others += !s->stalled;
        return;
    }
    int64_t last = s->seq.next - 1;
    int r = load_seq_see(&s->seq, index);
    if (s->stalled) {
        s->fate->frames++;
        s->fate->gapless &= r == LOAD_SEQ_OK;
        return;
    }
    if (r != LOAD_SEQ_OK)
        load_err(sh, r == LOAD_SEQ_GAP ? "order_gap" : "order_repeat",
                 "a subscriber of conversation %s got index %lld after %lld",
                 sh->run->convs[s->conv].id, (long long)index, (long long)last);
    sh->frames++;
    sh->t_last_frame = now;
    uint64_t sent = load_mark_find(p, n);
    if (sent != 0 && sent <= now)
        load_hist_add(&sh->delivery, now - sent);
    if (s->awaited && index >= sh->run->convs[s->conv].acked_max)
        settle(s); /* drained */
    if (sh->run->cfg.faults && !s->stalled) {
        remember_id(s, p, n);
        if (--s->cut_in <= 0 && sh->run->phase == LOAD_RUN)
            cut(s);
    }
}

/* Add a fragment to the message being joined; false if it is too big. */
static bool join(load_sub *s, const net_ws_frame *f)
{
    if (f->len > LOAD_MESSAGE_MAX - s->msg_len) {
        send_frame(s, NET_WS_CLOSE, (const uint8_t *)"\x03\xf1", 2); /* 1009 */
        sub_end(s, 0, "ws_protocol", "a fragmented message over %d bytes", LOAD_MESSAGE_MAX);
        return false;
    }
    uint8_t *m = realloc(s->msg, s->msg_len + f->len + 1);
    if (m == NULL) {
        sub_end(s, 0, "no_memory", "out of memory");
        return false;
    }
    memcpy(m + s->msg_len, f->data, f->len);
    s->msg = m;
    s->msg_len += f->len;
    return true;
}

/* One frame; false when the subscriber is over. */
static bool frame(load_sub *s, const net_ws_frame *f, uint64_t now)
{
    switch (f->opcode) {
    case NET_WS_TEXT:
    case NET_WS_BINARY:
        if (s->msg_op != 0)
            break;
        if (f->fin) {
            message(s, f->data, f->len, now);
            return reading(s);
        }
        s->msg_op = f->opcode;
        return join(s, f);
    case 0:
        if (s->msg_op == 0 || !join(s, f))
            break;
        if (f->fin) {
            s->msg_op = 0;
            message(s, s->msg, s->msg_len, now);
            s->msg_len = 0;
        }
        return reading(s);
    case NET_WS_PING:
        send_frame(s, NET_WS_PONG, f->data, f->len);
        return true;
    case NET_WS_PONG:
        return true;
    default: { /* close: echo its code, and end */
        int code = f->len >= 2 ? f->data[0] << 8 | f->data[1] : 1005;
        int rl = f->len > 2 ? (int)(f->len - 2) : 0;
        send_frame(s, NET_WS_CLOSE, f->data, f->len >= 2 ? 2 : 0);
        if (s->fate != NULL) {
            s->fate->close_code = code;
            snprintf(s->fate->reason, sizeof(s->fate->reason), "%.*s", rl, f->data + 2);
        }
        char kind[32];
        snprintf(kind, sizeof(kind), "ws_close_%d", code);
        sub_end(s, 0, kind, "closed by the server: %d %.*s", code, rl > 120 ? 120 : rl,
                f->data + 2);
        return false;
    }
    }
    if (s->state != S_CLOSED) {
        send_frame(s, NET_WS_CLOSE, (const uint8_t *)"\x03\xea", 2); /* 1002 */
        sub_end(s, 0, "ws_protocol", "%s", "fragments out of order");
    }
    return false;
}

/* ---- faults ------------------------------------------------------------------------ */

static void on_connect(uv_connect_t *c, int status);

/* The event's id: the first "id" after the envelope's "event" (parley
 * writes it first). */
static void remember_id(load_sub *s, const uint8_t *p, size_t n)
{
    static const char key[] = "\"id\":\"";
    const uint8_t *e = memmem(p, n, "\"event\":", 8);
    const uint8_t *k = e != NULL ? memmem(e, n - (size_t)(e - p), key, sizeof(key) - 1) : NULL;
    if (k == NULL)
        return;
    k += sizeof(key) - 1;
    const uint8_t *q = memchr(k, '"', n - (size_t)(k - p));
    if (q != NULL && (size_t)(q - k) < sizeof(s->last_id)) {
        memcpy(s->last_id, k, (size_t)(q - k));
        s->last_id[q - k] = '\0';
    }
}

static void on_cut_closed(uv_handle_t *h)
{
    load_sub *s = h->data;
    load_shard *sh = s->sh;
    if (s->state != S_CUT)
        return; /* ended meanwhile */
    s->state = S_CONNECTING;
    sh->upgrading++; /* as connect_next counts, undone by upgraded() */
    sh->cuts++;
    int r = load_connect(sh, &s->tcp, 0, on_connect);
    s->tcp.data = s;
    if (r != 0)
        sub_end(s, r, "connect", "cannot connect again after a cut: %s", uv_strerror(r));
}

/* Drop the connection as a network would, and connect again. */
static void cut(load_sub *s)
{
    s->cut_in = CUT_MIN + (int)(uv_hrtime() % CUT_SPAN);
    s->state = S_CUT;
    forget_input(s);
    uv_close((uv_handle_t *)&s->tcp, on_cut_closed);
}

/* ---- reading --------------------------------------------------------------------- */

static void upgraded(load_sub *s)
{
    load_shard *sh = s->sh;
    const char *key = sh->run->cfg.api_key;
    hr_free(s->hr);
    s->hr = NULL;
    sh->upgrading--;
    connect_next(sh);
    if (key != NULL) {
        char auth[300];
        int n = snprintf(auth, sizeof(auth), "{\"type\":\"auth\",\"session_api_key\":\"%s\"}", key);
        send_frame(s, NET_WS_TEXT, (const uint8_t *)auth, (size_t)n);
    }
    if (!s->stalled) {
        s->state = S_WAITING;
        return;
    }
    uv_read_stop((uv_stream_t *)&s->tcp); /* and never again, until the run is over */
    s->state = S_OPEN;
    s->opened = true;
    sh->opened++;
    settle(s);
}

/* The 101, then frames: how many bytes were used (all, once the
 * subscriber is over); the rest is a frame cut short. */
static size_t take(load_sub *s, const uint8_t *p, size_t n, uint64_t now)
{
    size_t at = 0;
    if (s->state == S_UPGRADING) {
        bool done;
        char err[300];
        ssize_t used = hr_feed(s->hr, p, n, &done);
        if (used < 0) {
            sub_end(s, 0, "upgrade", "a bad answer to the upgrade: %s", hr_error(s->hr));
            return n;
        }
        if (!done)
            return n;
        if (net_ws_client_check(hr_response(s->hr), s->accept, err, sizeof(err)) != 0) {
            sub_end(s, 0, "upgrade", "%s", err);
            return n;
        }
        upgraded(s);
        if (s->stalled)
            return (size_t)used; /* its frames are read after the run */
        at = (size_t)used;
    }
    while (at < n) {
        net_ws_frame f;
        ssize_t r = net_ws_client_scan(p + at, n - at, LOAD_MESSAGE_MAX, &f);
        if (r == 0)
            break;
        if (r < 0) {
            uint8_t code[2] = {(uint8_t)(-r >> 8), (uint8_t)-r};
            send_frame(s, NET_WS_CLOSE, code, 2);
            sub_end(s, 0, "ws_protocol", "a bad frame from the server (close %d)", (int)-r);
            return n;
        }
        at += (size_t)r;
        if (!frame(s, &f, now))
            return n;
    }
    return at;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)hint;
    load_sub *s = h->data;
    if (s->carry_len <= LOAD_RBUF / 2) {
        if (s->carry_len > 0)
            memcpy(s->sh->rbuf, s->carry, s->carry_len);
        *b = uv_buf_init((char *)s->sh->rbuf + s->carry_len, LOAD_RBUF - (unsigned)s->carry_len);
        return;
    }
    if (s->carry_cap - s->carry_len < 65536) { /* a big frame: read on into the carry */
        size_t cap = s->carry_cap * 2;
        uint8_t *c = realloc(s->carry, cap);
        if (c == NULL) {
            *b = uv_buf_init(NULL, 0); /* libuv says UV_ENOBUFS */
            return;
        }
        s->carry = c;
        s->carry_cap = cap;
    }
    *b = uv_buf_init((char *)s->carry + s->carry_len, (unsigned)(s->carry_cap - s->carry_len));
}

/* Parse p[0, n) (the shard's buffer, or the carry itself) and keep the
 * frame it cuts short as the carry. */
static void consume(load_sub *s, uint8_t *p, size_t n)
{
    size_t used = take(s, p, n, uv_hrtime()), left = n - used;
    if (!reading(s)) /* over, or cut: its bytes go with its connection */
        return;
    if (left > s->carry_cap) {
        size_t cap = left < 4096 ? 4096 : left;
        uint8_t *c = realloc(s->carry, cap);
        if (c == NULL) {
            sub_end(s, 0, "no_memory", "out of memory");
            return;
        }
        s->carry = c;
        s->carry_cap = cap;
    }
    if (left > 0)
        memmove(s->carry, p + used, left);
    s->carry_len = left;
    if (left == 0 && s->carry_cap > 65536) { /* a big frame's room is given back */
        free(s->carry);
        s->carry = NULL;
        s->carry_cap = 0;
    }
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    load_sub *s = st->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        sub_end(s, (int)nread, "disconnected", "the connection ended: %s", uv_strerror((int)nread));
        return;
    }
    bool own = (uint8_t *)b->base != s->sh->rbuf + s->carry_len;
    consume(s, own ? s->carry : s->sh->rbuf, s->carry_len + (size_t)nread);
}

/* ---- connecting ------------------------------------------------------------------ */

static void on_connect(uv_connect_t *c, int status)
{
    load_sub *s = c->handle->data;
    load_shard *sh = s->sh;
    free(c);
    if (s->state != S_CONNECTING)
        return;
    if (status < 0) {
        sub_end(s, status, "connect", "cannot connect: %s", uv_strerror(status));
        return;
    }
    char path[512], req[1024];
    snprintf(path, sizeof(path), "%s/sockets/events/%s?envelope=index%s%s", sh->run->cfg.url.prefix,
             sh->run->convs[s->conv].id, s->last_id[0] ? "&after_id=" : "", s->last_id);
    int n =
        net_ws_client_request(req, sizeof(req), sh->run->cfg.url.authority, path, NULL, s->accept);
    s->hr = hr_new(NULL);
    if (n < 0 || s->hr == NULL) {
        sub_end(s, 0, "no_memory", "cannot make the upgrade request");
        return;
    }
    s->state = S_UPGRADING;
    if (load_write((uv_stream_t *)&s->tcp, req, (size_t)n) != 0 ||
        uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read) != 0)
        sub_end(s, 0, "connect", "cannot write the upgrade request");
}

static void connect_next(load_shard *sh)
{
    while (sh->run->phase == LOAD_CONNECT && sh->upgrading < LOAD_WINDOW &&
           sh->next_sub < sh->nsubs) {
        load_sub *s = &sh->subs[sh->next_sub++];
        s->state = S_CONNECTING;
        sh->upgrading++;
        int r = load_connect(sh, &s->tcp, s->stalled ? 4096 : 0, on_connect);
        s->tcp.data = s;
        if (r != 0)
            sub_end(s, r, "connect", "cannot connect: %s", uv_strerror(r));
    }
}

/* ---- the phases ------------------------------------------------------------------- */

int load_subs_init(load_shard *sh)
{
    const load_cfg *c = &sh->run->cfg;
    int per = c->subscribers + c->stalled, total = c->conversations * per, t = c->threads;
    int mine = total / t + (sh->id < total % t), stalled = 0;
    sh->subs = calloc((size_t)mine + 1, sizeof(*sh->subs));
    sh->fates = calloc((size_t)mine + 1, sizeof(*sh->fates));
    if (sh->subs == NULL || sh->fates == NULL)
        return -1;
    for (int g = sh->id; g < total; g += t) {
        load_sub *s = &sh->subs[sh->nsubs++];
        *s = (load_sub){.sh = sh, .conv = g / per, .seq = LOAD_SEQ_INIT};
        s->cut_in = CUT_MIN + (int)((uint64_t)(g * 7919 + 13) % CUT_SPAN);
        s->stalled = g % per >= c->subscribers;
        if (s->stalled) {
            s->fate = &sh->fates[stalled++];
            *s->fate = (load_fate){.end = "open", .at_s = -1, .gapless = true};
        }
    }
    sh->nfates = stalled;
    return 0;
}

/* After the run: did a reading subscriber get every acked event once, in
 * order? */
static void verdict(load_sub *s)
{
    const load_conv *cv = &s->sh->run->convs[s->conv];
    if (s->stalled || !s->opened || cv->acked_max < 0)
        return;
    if (s->seq.first < 0 || s->seq.first > cv->acked_min || s->seq.next - 1 < cv->acked_max)
        load_err(s->sh, "missing",
                 "a subscriber of conversation %s got indexes %lld to %lld; the acked ones "
                 "are %lld to %lld",
                 cv->id, (long long)s->seq.first, (long long)s->seq.next - 1,
                 (long long)cv->acked_min, (long long)cv->acked_max);
}

void load_subs_phase(load_shard *sh)
{
    load_phase ph = sh->run->phase;
    if (ph == LOAD_CONNECT) {
        for (int i = 0; i < sh->nsubs; i++)
            sh->subs[i].awaited = true;
        sh->waiting += sh->nsubs;
        connect_next(sh);
        return;
    }
    for (int i = 0; i < sh->nsubs; i++) {
        load_sub *s = &sh->subs[i];
        s->awaited = false;
        if (ph == LOAD_RUN && s->state != S_OPEN && s->state != S_CLOSED)
            load_err(sh, "open_timeout", "a subscriber of conversation %s did not open in time",
                     sh->run->convs[s->conv].id);
        if (ph == LOAD_DRAIN && s->state != S_CLOSED && s->opened && !s->stalled &&
            s->seq.next - 1 < sh->run->convs[s->conv].acked_max)
            s->awaited = true;
        if (ph == LOAD_FATE && s->state == S_OPEN && s->stalled) {
            if (s->carry_len > 0) { /* what came with its 101 */
                memcpy(sh->rbuf, s->carry, s->carry_len);
                consume(s, sh->rbuf, s->carry_len);
            }
            s->awaited =
                s->state == S_OPEN && uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read) == 0;
        }
        sh->waiting += s->awaited;
        if (ph == LOAD_CLOSE) {
            verdict(s);
            if (s->state == S_OPEN && !s->stalled)
                send_frame(s, NET_WS_CLOSE, (const uint8_t *)"\x03\xe8", 2); /* 1000 */
            sub_end(s, 0, NULL, NULL);
        }
    }
}

/* A stalled subscriber's socket says when the server ended it, if its
 * FIN or reset got through the full window. */
void load_subs_tick(load_shard *sh, uint64_t now)
{
    (void)now;
    for (int i = 0; i < sh->nsubs; i++) {
        load_sub *s = &sh->subs[i];
        struct tcp_info ti;
        socklen_t len = sizeof(ti);
        uv_os_fd_t fd;
        if (!s->stalled || s->state != S_OPEN || s->fate->at_s >= 0 ||
            uv_fileno((uv_handle_t *)&s->tcp, &fd) != 0 ||
            getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
            continue;
        if (ti.tcpi_state == 1) /* TCP_ESTABLISHED */
            continue;
        s->fate->at_s = since_run(sh);
        s->fate->end = ti.tcpi_state == 8 /* TCP_CLOSE_WAIT: a FIN */ ? "eof" : "reset";
    }
}

void load_subs_free(load_shard *sh)
{
    for (int i = 0; sh->subs != NULL && i < sh->nsubs; i++) {
        hr_free(sh->subs[i].hr);
        free(sh->subs[i].carry);
        free(sh->subs[i].msg);
    }
    free(sh->subs);
    free(sh->fates);
}
