/*
 * ws.c - WebSocket server engine: our handshake, wslay's frame layer for
 * reading frames, RFC 6455's rules on top. See ws.h.
 *
 * Why wslay_frame and not wslay_event. The event layer (1.1.1, Debian's)
 * does messages, pings and closes itself, but it answers a bad frame
 * header (a fragmented or oversized control frame, a length not in its
 * shortest form) with a close frame without a code, takes a one-byte close
 * payload for "no code", checks a close reason's UTF-8 from byte 2 of each
 * piece of the frame as it arrives rather than of the frame, and sends
 * through a queue of its own that would have to be drained into ours. The
 * frame layer does the fiddly part: the header (length forms, the
 * shortest-form rule, the control frame limits) and unmasking, reading
 * through a callback that, as in tls.c, takes from the bytes given to
 * net_ws_input. Here: the order of frames (continuations, control frames
 * between fragments), masking and reserved bits, the size limit, UTF-8,
 * close codes, and the answers.
 *
 * Writing needs no library: a server's header is 2, 4 or 10 bytes, and
 * writing it apart from the payload is what lets one serialized event go
 * to thousands of sockets uncopied.
 *
 * Bounds: input not read is at most NET_WS_INPUT_MAX; a message buffer
 * grows with the bytes that arrive, never with what a header announces,
 * up to the limit, and one grown past MSG_KEEP is given back once its
 * message is handed out; pings are answered by one pong for the latest
 * (RFC 6455 5.5.3 allows it), made when the output is taken, so whatever
 * the peer sends, at most one pong waits between two net_ws_take_output.
 */
#include "net/ws.h"
#include "runtime/err.h"
#include "runtime/grow.h"
#include "runtime/text.h"
#include "runtime/uuid.h"

#include <mbedtls/base64.h>
#include <mbedtls/sha1.h>
#include <wslay/wslay.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    IN_FIRST = 4096,
    MSG_FIRST = 1024,
    MSG_KEEP = 64 << 10,
    CTL_MAX = 125,    /* a control frame's payload */
    REASON_MAX = 123, /* a close reason, after the 2-byte code */
    KEY_LEN = 24,     /* 16 bytes in base64 */
};

static const char GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

struct net_ws {
    wslay_frame_context_ptr frames; /* NULL between frames: see net_ws_read */
    size_t limit;
    uint8_t *in; /* [in_off, in_len) not taken by wslay yet */
    size_t in_off, in_len, in_cap;
    rt_outbox out; /* whole frames to send */
    /* the frame being read */
    bool in_frame, fin;
    uint8_t op;
    uint64_t left; /* its payload bytes still to come */
    /* the data message being put together; msg_op 0: none */
    uint8_t msg_op;
    uint8_t *msg;
    size_t msg_len, msg_cap;
    rt_utf8 u8;
    uint8_t ctl[CTL_MAX]; /* a control frame's payload */
    size_t ctl_len;
    int handed; /* what the last net_ws_read handed out: 0, 'm' (msg) or 'c' (ctl) */
    bool pong_due;
    uint8_t pong[CTL_MAX];
    size_t pong_len;
    bool closing;     /* our close frame is queued */
    bool peer_closed; /* nothing more is read: the peer's close came, or we failed */
    bool client;      /* our frames are masked, the peer's must not be */
    /* Headers are also checked as they are handed to wslay, which reports a
     * frame only with its first payload byte: a bad header that comes
     * alone is then refused at once, once the frames before it are read. */
    uint8_t sh_hdr[14];
    size_t sh_len;      /* its bytes so far */
    uint64_t sh_skip;   /* payload bytes of the last header still to pass */
    uint8_t sh_msg_op;  /* the message those headers are in (0: none) */
    uint64_t sh_msg_len;
    int sh_code; /* a bad header was seen: its close code, and why */
    char sh_why[120];
    int code_sent, code_recv;
    int err;
    char why[200];
};

/* -------------------------------------------------------------- handshake --- */

static bool ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Whether any `name` header's comma-separated list has `token` (any case). */
static bool has_token(const hp_req *r, const char *name, const char *token)
{
    size_t tl = strlen(token);
    for (size_t i = 0; i < r->nheaders; i++) {
        if (strcmp(r->headers[i].name, name) != 0)
            continue;
        for (const char *v = r->headers[i].value; *v != '\0';) {
            while (*v == ',' || ows(*v))
                v++;
            const char *start = v;
            while (*v != '\0' && *v != ',')
                v++;
            const char *end = v;
            while (end > start && ows(end[-1]))
                end--;
            if ((size_t)(end - start) == tl && strncasecmp(start, token, tl) == 0)
                return true;
        }
    }
    return false;
}

/* The value of the one `name` header, without surrounding blanks, in buf;
 * false when it is missing, repeated or longer than cap - 1. */
static bool only_value(const hp_req *r, const char *name, char *buf, size_t cap)
{
    const char *v = NULL;
    for (size_t i = 0; i < r->nheaders; i++) {
        if (strcmp(r->headers[i].name, name) != 0)
            continue;
        if (v != NULL)
            return false;
        v = r->headers[i].value;
    }
    if (v == NULL)
        return false;
    while (ows(*v))
        v++;
    size_t n = strlen(v);
    while (n > 0 && ows(v[n - 1]))
        n--;
    if (n >= cap)
        return false;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return true;
}

/* 22 base64 characters and "==": exactly 16 bytes. */
static bool key_ok(const char *k)
{
    if (strlen(k) != KEY_LEN || strcmp(k + 22, "==") != 0)
        return false;
    for (int i = 0; i < 22; i++)
        if (strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", k[i]) ==
            NULL)
            return false;
    uint8_t raw[18];
    size_t n;
    return mbedtls_base64_decode(raw, sizeof(raw), &n, (const uint8_t *)k, KEY_LEN) == 0 && n == 16;
}

int net_ws_accept_key(const char *key, char out[NET_WS_ACCEPT_LEN + 1])
{
    size_t klen = key != NULL ? strlen(key) : 0;
    uint8_t in[64 + sizeof(GUID) - 1], sha[20];
    size_t n;
    if (klen == 0 || klen > 64)
        return NET_WS_EINVAL;
    memcpy(in, key, klen);
    memcpy(in + klen, GUID, sizeof(GUID) - 1);
    if (mbedtls_sha1_ret(in, klen + sizeof(GUID) - 1, sha) != 0 ||
        mbedtls_base64_encode((uint8_t *)out, NET_WS_ACCEPT_LEN + 1, &n, sha, sizeof(sha)) != 0)
        return NET_WS_EINVAL;
    return 0;
}

static int refuse(int status, char *out, size_t *outlen, const char *extra)
{
    snprintf(out, NET_WS_HANDSHAKE_MAX, "%s", extra);
    *outlen = strlen(out);
    return status;
}

int net_ws_handshake(const hp_req *r, char *out, size_t cap, size_t *outlen, char *err,
                     size_t errlen)
{
    if (r == NULL || out == NULL || outlen == NULL || cap < NET_WS_HANDSHAKE_MAX ||
        r->method == NULL)
        return NET_WS_EINVAL;
    rt_say(err, errlen, "%s", "");
    char key[KEY_LEN + 1], version[8];
    if (strcmp(r->method, "GET") != 0) {
        rt_say(err, errlen, "a WebSocket upgrade is a GET, not a %.20s", r->method);
    } else if (r->minor < 1) {
        rt_say(err, errlen, "a WebSocket upgrade needs HTTP/1.1");
    } else if (!has_token(r, "upgrade", "websocket")) {
        rt_say(err, errlen, "not a WebSocket upgrade: Upgrade: websocket is missing");
    } else if (!has_token(r, "connection", "upgrade")) {
        rt_say(err, errlen, "not a WebSocket upgrade: Connection: Upgrade is missing");
    } else if (!only_value(r, "sec-websocket-version", version, sizeof(version)) ||
               strcmp(version, "13") != 0) {
        rt_say(err, errlen, "only WebSocket version 13 is spoken: send Sec-WebSocket-Version: 13");
        return refuse(426, out, outlen, "Sec-WebSocket-Version: 13\r\n");
    } else if (!only_value(r, "sec-websocket-key", key, sizeof(key)) || !key_ok(key)) {
        rt_say(err, errlen, "Sec-WebSocket-Key must be one header with 16 random bytes in base64");
    } else {
        char accept[NET_WS_ACCEPT_LEN + 1];
        if (net_ws_accept_key(key, accept) != 0)
            return NET_WS_EINVAL; /* cannot fail with a checked key */
        int len = snprintf(out, cap,
                           "HTTP/1.1 101 Switching Protocols\r\n"
                           "Upgrade: websocket\r\n"
                           "Connection: Upgrade\r\n"
                           "Sec-WebSocket-Accept: %s\r\n\r\n",
                           (const char *)accept);
        *outlen = (size_t)len;
        return 101;
    }
    return refuse(400, out, outlen, "");
}

/* ---------------------------------------------------------------- output --- */

size_t net_ws_frame_header(uint8_t out[NET_WS_HEADER_MAX], int opcode, size_t payload_len)
{
    bool control = opcode == NET_WS_CLOSE || opcode == NET_WS_PING || opcode == NET_WS_PONG;
    uint64_t len = payload_len;
    if (out == NULL || (!control && opcode != NET_WS_TEXT && opcode != NET_WS_BINARY) ||
        (control && len > CTL_MAX) || len >> 63 != 0)
        return 0;
    out[0] = (uint8_t)(0x80 | opcode); /* FIN, no RSV */
    if (len < 126) {
        out[1] = (uint8_t)len;
        return 2;
    }
    if (len <= 0xffff) {
        out[1] = 126;
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        return 4;
    }
    out[1] = 127;
    for (int i = 0; i < 8; i++)
        out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
    return 10;
}

static int queue(net_ws *s, int opcode, const uint8_t *p, size_t n);

/* The pong waits for the output to be taken, so that a flood of pings gets
 * one answer; anything queued before then goes after it. */
static int flush_pong(net_ws *s)
{
    if (!s->pong_due)
        return 0;
    int r = queue(s, NET_WS_PONG, s->pong, s->pong_len);
    if (r == 0)
        s->pong_due = false;
    return r;
}

static int queue(net_ws *s, int opcode, const uint8_t *p, size_t n)
{
    if (opcode != NET_WS_PONG && flush_pong(s) != 0)
        return NET_WS_ENOMEM;
    uint8_t h[NET_WS_HEADER_MAX + 4];
    size_t hl = net_ws_frame_header(h, opcode, n);
    if (s->client) { /* a client masks every frame with a fresh random key */
        rt_uuid u;
        rt_uuid_v4(&u);
        h[1] |= 0x80;
        memcpy(h + hl, u.b, 4);
        hl += 4;
    }
    uint8_t *at = n <= SIZE_MAX - hl ? rt_outbox_reserve(&s->out, hl + n) : NULL;
    if (at == NULL)
        return NET_WS_ENOMEM;
    memcpy(at, h, hl);
    for (size_t i = 0; i < n; i++)
        at[hl + i] = s->client ? (uint8_t)(p[i] ^ h[hl - 4 + i % 4]) : p[i];
    return 0;
}

/* code 0: an empty close, which is what 1005 ("no code") means. */
static int queue_close(net_ws *s, int code, const char *reason, size_t rlen)
{
    uint8_t p[2 + REASON_MAX] = {0};
    size_t n = 0;
    if (code != 0) {
        p[0] = (uint8_t)(code >> 8);
        p[1] = (uint8_t)code;
        if (rlen > 0)
            memcpy(p + 2, reason, rlen);
        n = 2 + rlen;
    }
    int r = queue(s, NET_WS_CLOSE, p, n); /* after a pong due, if any */
    if (r == 0) {
        s->closing = true;
        s->code_sent = code != 0 ? code : 1005;
    }
    return r;
}

/* ---------------------------------------------------------------- errors --- */

/* rt_strerror's words for our codes, registered for the range runtime/err.h
 * gives us when the program starts (one that does not link this file never
 * gets these codes). */
static const char *ws_strerror(int err)
{
    switch (err) {
    case NET_WS_CLOSED:
        return "WebSocket closed: the close handshake is over";
    case NET_WS_EPROTO:
        return "WebSocket peer broke the protocol";
    case NET_WS_EFULL:
        return "WebSocket input over its limit not read";
    case NET_WS_ESTATE:
        return "WebSocket frame after our close frame";
    case NET_WS_ENOMEM:
        return "out of memory in WebSocket";
    case NET_WS_EINVAL:
        return "invalid argument to WebSocket";
    }
    return NULL;
}

__attribute__((constructor)) static void ws_register_errors(void)
{
    rt_err_register(-3999, -3000, ws_strerror);
}

/* The peer broke the rules: close with `code` (the reason goes in the close
 * frame too) and read no more. */
static int fail(net_ws *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(net_ws *s, int code, const char *fmt, ...)
{
    if (s->err != 0)
        return s->err;
    char reason[REASON_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    s->peer_closed = true;
    s->err = NET_WS_EPROTO;
    if (s->closing) {
        snprintf(s->why, sizeof(s->why), "WebSocket failed after our close: %s", reason);
    } else if (queue_close(s, code, reason, strlen(reason)) == 0) {
        snprintf(s->why, sizeof(s->why), "WebSocket closed with %d: %s", code, reason);
    } else {
        snprintf(s->why, sizeof(s->why), "WebSocket failed (no memory to close): %s", reason);
        s->err = NET_WS_ENOMEM;
    }
    return s->err;
}

/* Reading cannot go on: close with 1011 if that still fits. */
static int out_of_memory(net_ws *s)
{
    if (s->err == 0) {
        s->err = NET_WS_ENOMEM;
        s->peer_closed = true;
        bool sent = !s->closing && queue_close(s, 1011, "out of memory", 13) == 0;
        snprintf(s->why, sizeof(s->why), "WebSocket %s: out of memory",
                 sent ? "closed with 1011" : "failed");
    }
    return s->err;
}

/* ---------------------------------------------------------------- session --- */

static void shadow(net_ws *s, const uint8_t *p, size_t n);

static ssize_t take_input(uint8_t *buf, size_t len, int flags, void *ctx)
{
    (void)flags;
    net_ws *s = ctx;
    size_t n = s->in_len - s->in_off;
    if (n > len)
        n = len;
    if (n > 0)
        memcpy(buf, s->in + s->in_off, n);
    shadow(s, s->in + s->in_off, n);
    s->in_off += n;
    return (ssize_t)n; /* 0: wslay_frame_recv answers WSLAY_ERR_WANT_READ */
}

net_ws *net_ws_new(const net_ws_limits *l)
{
    net_ws *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->limit = l != NULL && l->message_bytes > 0 ? l->message_bytes : NET_WS_MESSAGE_MAX;
    return s;
}

net_ws *net_ws_new_client(const net_ws_limits *l)
{
    net_ws *s = net_ws_new(l);
    if (s != NULL)
        s->client = true;
    return s;
}

void net_ws_free(net_ws *s)
{
    if (s == NULL)
        return;
    if (s->frames != NULL)
        wslay_frame_context_free(s->frames);
    free(s->in);
    rt_outbox_free(&s->out);
    free(s->msg);
    free(s);
}

int net_ws_input(net_ws *s, const uint8_t *data, size_t len)
{
    if (s == NULL || (data == NULL && len > 0))
        return NET_WS_EINVAL;
    if (s->err != 0)
        return s->err;
    if (s->peer_closed)
        return NET_WS_CLOSED;
    if (s->in_off > 0) { /* what wslay took is gone: keep the rest at the front */
        memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
        s->in_len -= s->in_off;
        s->in_off = 0;
    }
    if (len > NET_WS_INPUT_MAX - s->in_len) {
        snprintf(s->why, sizeof(s->why), "WebSocket input over %u KiB not read",
                 NET_WS_INPUT_MAX >> 10);
        return s->err = NET_WS_EFULL;
    }
    if (rt_grow((void **)&s->in, &s->in_cap, s->in_len + len, 1, IN_FIRST) != 0)
        return NET_WS_ENOMEM;
    if (len > 0)
        memcpy(s->in + s->in_len, data, len);
    s->in_len += len;
    return 0;
}

/* What is wrong with a frame header (0: nothing), for a session in a
 * message of msg_op (0: none) holding msg_len bytes so far; why in one line. */
static int header_problem(const net_ws *s, uint8_t msg_op, uint64_t msg_len, int rsv, int opcode,
                          bool mask, uint64_t len, char *why, size_t cap)
{
    if (mask == s->client) /* a client masks, a server must not */
        return snprintf(why, cap, "%s", s->client ? "server frames must not be masked"
                                                  : "client frames must be masked"),
               1002;
    if (rsv != 0)
        return snprintf(why, cap, "reserved bits set, and no extension was negotiated"), 1002;
    switch (opcode) {
    case WSLAY_CONTINUATION_FRAME:
        if (msg_op == 0)
            return snprintf(why, cap, "a continuation frame without a message to continue"),
                   1002;
        break;
    case WSLAY_TEXT_FRAME:
    case WSLAY_BINARY_FRAME:
        if (msg_op != 0)
            return snprintf(why, cap, "a new message before the final frame of the last one"),
                   1002;
        msg_len = 0;
        break;
    case WSLAY_CONNECTION_CLOSE:
    case WSLAY_PING:
    case WSLAY_PONG:
        return 0;
    default:
        return snprintf(why, cap, "unknown opcode 0x%x", (unsigned)opcode), 1002;
    }
    if (len > s->limit - msg_len)
        return snprintf(why, cap, "a message over the limit of %zu bytes", s->limit), 1009;
    return 0;
}

/* The bytes handed to wslay, header by header (see sh_code). */
static void shadow(net_ws *s, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n && s->sh_code == 0;) {
        if (s->sh_skip > 0) {
            size_t k = n - i < s->sh_skip ? n - i : (size_t)s->sh_skip;
            i += k;
            s->sh_skip -= k;
            continue;
        }
        s->sh_hdr[s->sh_len++] = p[i++];
        size_t need = 2;
        if (s->sh_len >= 2) {
            uint8_t l = s->sh_hdr[1] & 0x7f;
            need += (l == 126 ? 2 : l == 127 ? 8 : 0) + ((s->sh_hdr[1] & 0x80) ? 4 : 0);
        }
        if (s->sh_len < need)
            continue;
        uint64_t len = s->sh_hdr[1] & 0x7f;
        if (len >= 126) {
            size_t k = len == 126 ? 2 : 8;
            len = 0;
            for (size_t j = 0; j < k; j++)
                len = len << 8 | s->sh_hdr[2 + j];
        }
        bool fin = (s->sh_hdr[0] & 0x80) != 0;
        int op = s->sh_hdr[0] & 0x0f;
        s->sh_code = header_problem(s, s->sh_msg_op, s->sh_msg_len, (s->sh_hdr[0] >> 4) & 7, op,
                                    (s->sh_hdr[1] & 0x80) != 0, len, s->sh_why, sizeof(s->sh_why));
        s->sh_len = 0;
        s->sh_skip = len;
        if (!wslay_is_ctrl_frame((uint8_t)op)) {
            if (op != WSLAY_CONTINUATION_FRAME) {
                s->sh_msg_op = (uint8_t)op;
                s->sh_msg_len = 0;
            }
            s->sh_msg_len += len;
            if (fin)
                s->sh_msg_op = 0;
        }
    }
}

/* A frame's header, seen with its first payload bytes (or alone, when it
 * has none). wslay_frame_recv has refused fragmented control frames,
 * control frames over 125 bytes and lengths not in their shortest form. */
static int frame_start(net_ws *s, const struct wslay_frame_iocb *io)
{
    char why[120];
    int code = header_problem(s, s->msg_op, s->msg_len, io->rsv, io->opcode, io->mask != 0,
                              io->payload_length, why, sizeof(why));
    if (code != 0)
        return fail(s, code, "%s", why);
    if (io->opcode == WSLAY_TEXT_FRAME || io->opcode == WSLAY_BINARY_FRAME) {
        s->msg_op = io->opcode;
        s->u8 = (rt_utf8)RT_UTF8_START;
    } else if (wslay_is_ctrl_frame(io->opcode)) {
        s->ctl_len = 0;
    }

    s->in_frame = true;
    s->op = io->opcode;
    s->fin = io->fin != 0;
    s->left = io->payload_length;
    return 0;
}

static int frame_data(net_ws *s, const uint8_t *p, size_t n)
{
    s->left -= n;
    if (wslay_is_ctrl_frame(s->op)) {
        if (n > CTL_MAX - s->ctl_len) /* wslay_frame_recv's bound, relied on for memory */
            return fail(s, 1002, "a control frame over 125 bytes");
        if (n > 0)
            memcpy(s->ctl + s->ctl_len, p, n);
        s->ctl_len += n;
        return 0;
    }
    if (s->msg_op == WSLAY_TEXT_FRAME && !rt_utf8_step(&s->u8, p, n))
        return fail(s, 1007, "a text message that is not UTF-8");
    if (n == 0)
        return 0;
    if (rt_grow((void **)&s->msg, &s->msg_cap, s->msg_len + n, 1, MSG_FIRST) != 0)
        return out_of_memory(s);
    memcpy(s->msg + s->msg_len, p, n);
    s->msg_len += n;
    return 0;
}

/* RFC 6455 7.4.1's codes and the three IANA registered since (1012
 * service restart, 1013 try again later, 1014 bad gateway: the server's
 * subscriber cap and slow-client closes use 1013), and the ranges for
 * libraries and applications. */
static bool code_ok(int c)
{
    return (c >= 1000 && c <= 1003) || (c >= 1007 && c <= 1014) || (c >= 3000 && c <= 4999);
}

static int peer_close(net_ws *s)
{
    const uint8_t *p = s->ctl;
    size_t n = s->ctl_len;
    int code = 0;
    if (n == 1)
        return fail(s, 1002, "a close frame with a 1-byte payload");
    if (n >= 2) {
        code = p[0] << 8 | p[1];
        if (!code_ok(code))
            return fail(s, 1002, "close code %d is not one a peer may send", code);
        if (!rt_utf8_valid(p + 2, n - 2))
            return fail(s, 1007, "a close reason that is not UTF-8");
    }
    s->code_recv = code != 0 ? code : 1005;
    s->peer_closed = true;
    if (!s->closing && queue_close(s, code, NULL, 0) != 0)
        return out_of_memory(s);
    return NET_WS_CLOSED;
}

/* The frame is all in: 1 with a message for the caller, 0 to read on. */
static int frame_end(net_ws *s, net_ws_msg *m)
{
    s->in_frame = false;
    switch (s->op) {
    case WSLAY_PING:
        if (!s->closing) {
            memcpy(s->pong, s->ctl, s->ctl_len);
            s->pong_len = s->ctl_len;
            s->pong_due = true;
        }
        return 0;
    case WSLAY_PONG:
        *m = (net_ws_msg){NET_WS_PONG, s->ctl, s->ctl_len};
        s->handed = 'c';
        return 1;
    case WSLAY_CONNECTION_CLOSE:
        return peer_close(s);
    default:
        if (!s->fin)
            return 0;
        if (s->msg_op == WSLAY_TEXT_FRAME && s->u8.need != 0)
            return fail(s, 1007, "a text message that ends inside a UTF-8 sequence");
        *m = (net_ws_msg){s->msg_op, s->msg_len > 0 ? s->msg : (const uint8_t *)"", s->msg_len};
        s->msg_op = 0;
        s->handed = 'm';
        return 1;
    }
}

int net_ws_read(net_ws *s, net_ws_msg *m)
{
    if (s == NULL || m == NULL)
        return NET_WS_EINVAL;
    *m = (net_ws_msg){0, NULL, 0};
    if (s->err != 0)
        return s->err;
    if (s->handed == 'm') {
        s->msg_len = 0;
        if (s->msg_cap > MSG_KEEP) {
            free(s->msg);
            s->msg = NULL;
            s->msg_cap = 0;
        }
    }
    s->handed = 0;
    while (!s->peer_closed) {
        /* wslay's frame context carries a 4 KiB input buffer: it is made
         * when input comes, and freed again whenever what it was handed is
         * read as whole frames (the shadow's header and payload counts say
         * so), so that an idle session (a subscriber that only listens)
         * holds none */
        struct wslay_frame_callbacks cb = {.recv_callback = take_input};
        if (s->frames == NULL && s->in_off < s->in_len &&
            wslay_frame_context_init(&s->frames, &cb, s) != 0)
            return NET_WS_ENOMEM;
        struct wslay_frame_iocb io;
        memset(&io, 0, sizeof(io));
        ssize_t r = s->frames != NULL ? wslay_frame_recv(s->frames, &io) : WSLAY_ERR_WANT_READ;
        if (r == WSLAY_ERR_WANT_READ) {
            if (s->sh_code != 0) /* every frame before the bad header is read */
                return fail(s, s->sh_code, "%s", s->sh_why);
            if (s->in_off == s->in_len) { /* an idle session holds no input buffer */
                free(s->in);
                s->in = NULL;
                s->in_off = s->in_len = s->in_cap = 0;
                if (s->frames != NULL && !s->in_frame && s->sh_len == 0 && s->sh_skip == 0) {
                    wslay_frame_context_free(s->frames);
                    s->frames = NULL;
                }
            }
            return 0;
        }
        if (r < 0)
            return fail(s, 1002,
                        "a bad frame header: a control frame fragmented or over 125 bytes, or "
                        "a length not in its shortest form");
        if (!s->in_frame && (r = frame_start(s, &io)) != 0)
            return (int)r;
        if ((r = frame_data(s, io.data, io.data_length)) != 0)
            return (int)r;
        if (s->left == 0 && (r = frame_end(s, m)) != 0)
            return (int)r;
    }
    return NET_WS_CLOSED;
}

int net_ws_write(net_ws *s, int opcode, const uint8_t *data, size_t len)
{
    if (s == NULL || (data == NULL && len > 0) ||
        (opcode != NET_WS_TEXT && opcode != NET_WS_BINARY))
        return NET_WS_EINVAL;
    if (s->err != 0)
        return s->err;
    if (s->closing)
        return NET_WS_ESTATE;
    return queue(s, opcode, data, len);
}

int net_ws_ping(net_ws *s, const uint8_t *data, size_t len)
{
    if (s == NULL || (data == NULL && len > 0) || len > CTL_MAX)
        return NET_WS_EINVAL;
    if (s->err != 0)
        return s->err;
    if (s->closing)
        return NET_WS_ESTATE;
    return queue(s, NET_WS_PING, data, len);
}

int net_ws_close(net_ws *s, int code, const char *reason)
{
    size_t rlen = reason != NULL ? strlen(reason) : 0;
    if (s == NULL || (code == 0 && rlen > 0) || (code != 0 && !code_ok(code)) ||
        rlen > REASON_MAX || !rt_utf8_valid((const uint8_t *)reason, rlen))
        return NET_WS_EINVAL;
    if (s->err != 0)
        return s->err;
    if (s->closing)
        return 0;
    return queue_close(s, code, reason, rlen);
}

int net_ws_take_output(net_ws *s, rt_buf **out)
{
    if (s == NULL || out == NULL)
        return NET_WS_EINVAL;
    *out = NULL;
    if (flush_pong(s) != 0 || rt_outbox_take(&s->out, out) != 0)
        return NET_WS_ENOMEM;
    return 0;
}

size_t net_ws_pending_output(const net_ws *s)
{
    if (s == NULL)
        return 0;
    return s->out.len + (s->pong_due ? 2 + s->pong_len : 0);
}

bool net_ws_closing(const net_ws *s)
{
    return s != NULL && s->closing;
}

int net_ws_close_code(const net_ws *s)
{
    return s != NULL ? s->code_sent : 0;
}

int net_ws_peer_close_code(const net_ws *s)
{
    return s != NULL ? s->code_recv : 0;
}

const char *net_ws_error(const net_ws *s)
{
    return s != NULL ? s->why : "";
}
