/*
 * test_ws.c - the WebSocket engine, all in memory: the handshake (RFC 6455
 * 1.3's example and every refusal), client frames fed whole, a byte at a
 * time and in random pieces, fragments with control frames between them,
 * every protocol error with its close code, the size limit, both close
 * handshakes, frame headers for each length form, and a round trip with
 * wslay's own framing on the client side (it masks, and it parses what the
 * server sends).
 */
#include "net/ws.h"
#include "runtime/err.h"

#include "support_sync.h"

#include <wslay/wslay.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- bytes --- */

typedef struct bytes {
    uint8_t *p;
    size_t len, off, cap;
} bytes;

static void put(bytes *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        ck_assert_ptr_nonnull(b->p);
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void clear(bytes *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static uint32_t seed = 1;

static uint32_t rnd(void)
{
    seed = seed * 1103515245u + 12345u;
    return seed >> 16;
}

/* -------------------------------------------------------- client frames --- */

enum { FIN = 0x80, RSV1 = 0x40, RSV2 = 0x20, RSV3 = 0x10, CONT = 0x0 };

/* A frame as a client would send it: b0 is FIN, RSV and opcode as they go
 * on the wire; form 0 writes the length in its shortest form, 126 or 127
 * in that form whatever the length. Masked with a random key unless
 * `masked` is false. */
static void frame_ex(bytes *b, uint8_t b0, bool masked, int form, const void *payload, size_t n)
{
    uint8_t h[14], key[4];
    size_t hl = 0;
    uint8_t m = masked ? 0x80 : 0;
    if (form == 0)
        form = n < 126 ? 0 : n <= 0xffff ? 126 : 127;
    h[hl++] = b0;
    if (form == 0) {
        h[hl++] = (uint8_t)(m | n);
    } else if (form == 126) {
        h[hl++] = m | 126;
        h[hl++] = (uint8_t)(n >> 8);
        h[hl++] = (uint8_t)n;
    } else {
        h[hl++] = m | 127;
        for (int i = 0; i < 8; i++)
            h[hl++] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
    }
    for (int i = 0; i < 4; i++)
        key[i] = (uint8_t)rnd();
    if (masked) {
        memcpy(h + hl, key, 4);
        hl += 4;
    }
    put(b, h, hl);
    const uint8_t *p = payload;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = masked ? p[i] ^ key[i % 4] : p[i];
        put(b, &c, 1);
    }
}

static void frame(bytes *b, bool fin, int opcode, const void *payload, size_t n)
{
    frame_ex(b, (uint8_t)((fin ? FIN : 0) | opcode), true, 0, payload, n);
}

static void text(bytes *b, const char *s)
{
    frame(b, true, NET_WS_TEXT, s, strlen(s));
}

static void close_frame(bytes *b, int code, const char *reason)
{
    uint8_t p[200] = {(uint8_t)(code >> 8), (uint8_t)code};
    size_t n = strlen(reason);
    memcpy(p + 2, reason, n);
    frame(b, true, NET_WS_CLOSE, p, 2 + n);
}

/* ------------------------------------------------------- feeding a session --- */

enum { WHOLE = 0, RANDOM = 0xffff, MSGS = 64 };

typedef struct got {
    int op[MSGS];
    bytes data[MSGS];
    size_t n;
} got;

static void got_free(got *g)
{
    for (size_t i = 0; i < g->n; i++)
        clear(&g->data[i]);
    g->n = 0;
}

/* Read every message there is; the last result (0 or negative). */
static int drain(net_ws *s, got *g)
{
    for (;;) {
        net_ws_msg m;
        int r = net_ws_read(s, &m);
        if (r != 1) {
            ck_assert_int_le(r, 0);
            return r;
        }
        ck_assert_uint_lt(g->n, MSGS);
        ck_assert(m.opcode == NET_WS_TEXT || m.opcode == NET_WS_BINARY || m.opcode == NET_WS_PONG);
        ck_assert_ptr_nonnull(m.data);
        g->op[g->n] = m.opcode;
        memset(&g->data[g->n], 0, sizeof(bytes));
        put(&g->data[g->n], m.data, m.len);
        g->n++;
    }
}

/* Feed in pieces of `step` bytes (WHOLE: as much as input takes, RANDOM: 1 to 300),
 * reading after each. 0, or the first negative result. */
static int feed(net_ws *s, const bytes *in, size_t step, got *g)
{
    size_t at = 0;
    do {
        size_t n = in->len - at;
        size_t k = step == RANDOM ? 1 + rnd() % 300 : step == WHOLE ? NET_WS_INPUT_MAX : step;
        if (n > k)
            n = k;
        int r = net_ws_input(s, in->p + at, n);
        if (r != 0)
            return r;
        at += n;
        if ((r = drain(s, g)) != 0)
            return r;
    } while (at < in->len);
    return 0;
}

/* ------------------------------------------- wslay's framing, client side --- */

typedef struct wclient {
    wslay_frame_context_ptr ctx;
    bytes to_server;
    const uint8_t *from;
    size_t from_len, from_off;
} wclient;

static ssize_t wc_send(const uint8_t *data, size_t len, int flags, void *ud)
{
    (void)flags;
    put(&((wclient *)ud)->to_server, data, len);
    return (ssize_t)len;
}

static ssize_t wc_recv(uint8_t *buf, size_t len, int flags, void *ud)
{
    (void)flags;
    wclient *c = ud;
    size_t n = c->from_len - c->from_off;
    if (n > len)
        n = len;
    memcpy(buf, c->from + c->from_off, n);
    c->from_off += n;
    return n > 0 ? (ssize_t)n : -1;
}

static int wc_mask(uint8_t *buf, size_t len, void *ud)
{
    (void)ud;
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)rnd();
    return 0;
}

static void wc_init(wclient *c)
{
    memset(c, 0, sizeof(*c));
    struct wslay_frame_callbacks cb = {wc_send, wc_recv, wc_mask};
    ck_assert_int_eq(wslay_frame_context_init(&c->ctx, &cb, c), 0);
}

static void wc_free(wclient *c)
{
    wslay_frame_context_free(c->ctx);
    clear(&c->to_server);
}

/* A masked frame made by wslay_frame_send. */
static void wc_frame(wclient *c, bool fin, int opcode, const void *p, size_t n)
{
    struct wslay_frame_iocb io = {.fin = fin,
                                  .opcode = (uint8_t)opcode,
                                  .mask = 1,
                                  .payload_length = n,
                                  .data = p,
                                  .data_length = n};
    ck_assert_int_eq(wslay_frame_send(c->ctx, &io), (ssize_t)n);
}

typedef struct sframe {
    int op;
    bytes payload;
} sframe;

/* Parse server frames with wslay_frame_recv: they must be whole, final
 * and unmasked. Returns how many (at most max). */
static size_t wc_parse(const uint8_t *p, size_t len, sframe *f, size_t max)
{
    wclient c;
    wc_init(&c);
    c.from = p;
    c.from_len = len;
    size_t n = 0;
    bool in_frame = false;
    for (;;) {
        struct wslay_frame_iocb io;
        memset(&io, 0, sizeof(io));
        ssize_t r = wslay_frame_recv(c.ctx, &io);
        if (r == WSLAY_ERR_WANT_READ)
            break;
        ck_assert_int_ge(r, 0);
        ck_assert_int_eq(io.mask, 0);
        ck_assert_int_eq(io.fin, 1);
        ck_assert_int_eq(io.rsv, 0);
        if (!in_frame) {
            ck_assert_uint_lt(n, max);
            f[n].op = io.opcode;
            memset(&f[n].payload, 0, sizeof(bytes));
            n++;
            in_frame = true;
        }
        put(&f[n - 1].payload, io.data, io.data_length);
        if (f[n - 1].payload.len == io.payload_length)
            in_frame = false;
    }
    ck_assert(!in_frame);
    ck_assert_uint_eq(c.from_off, len);
    wc_free(&c);
    return n;
}

/* The session's output, parsed. */
static size_t out_frames(net_ws *s, sframe *f, size_t max)
{
    rt_buf *b = (rt_buf *)1;
    ck_assert_int_eq(net_ws_take_output(s, &b), 0);
    if (b == NULL)
        return 0;
    ck_assert_uint_gt(rt_buf_len(b), 0);
    size_t n = wc_parse(rt_buf_data(b), rt_buf_len(b), f, max);
    rt_buf_unref(b);
    return n;
}

static void frames_free(sframe *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        clear(&f[i].payload);
}

static int close_code_of(const sframe *f)
{
    ck_assert_int_eq(f->op, NET_WS_CLOSE);
    if (f->payload.len == 0)
        return 1005;
    ck_assert_uint_ge(f->payload.len, 2);
    return f->payload.p[0] << 8 | f->payload.p[1];
}

static bool same(const bytes *b, const void *p, size_t n)
{
    return b->len == n && (n == 0 || memcmp(b->p, p, n) == 0);
}

/* ------------------------------------------------------------- handshake --- */

static const char *KEY = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";

static int shake(const char *req, char *out, char *err)
{
    hp_parser *p = hp_new(NULL);
    ck_assert_ptr_nonnull(p);
    bool done = false;
    ssize_t n = hp_feed(p, (const uint8_t *)req, strlen(req), &done);
    ck_assert_msg(n == (ssize_t)strlen(req) && done, "%s: %s", req, hp_reason(p));
    size_t outlen = 12345;
    strcpy(err, "untouched");
    int st = net_ws_handshake(hp_request(p), out, NET_WS_HANDSHAKE_MAX, &outlen, err, 200);
    ck_assert_uint_eq(outlen, strlen(out));
    hp_free(p);
    return st;
}

/* RFC 6455 1.3 gives s3pPLMBiTxaQ9kYGzzhZRbK+xOo= for its example key
 * (as does base64(sha1(key + GUID)) computed with any other tool). */
START_TEST(test_handshake_rfc_example)
{
    char req[1024], out[NET_WS_HANDSHAKE_MAX], err[200];
    snprintf(req, sizeof(req),
             "GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\n"
             "Connection: Upgrade\r\n%sOrigin: http://example.com\r\n"
             "Sec-WebSocket-Protocol: chat, superchat\r\n"
             "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
             "Sec-WebSocket-Version: 13\r\n\r\n",
             KEY);
    ck_assert_int_eq(shake(req, out, err), 101);
    ck_assert_str_eq(out, "HTTP/1.1 101 Switching Protocols\r\n"
                          "Upgrade: websocket\r\n"
                          "Connection: Upgrade\r\n"
                          "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n");
    ck_assert_str_eq(err, "");

    /* tokens in any case, in lists, over several header lines, with blanks */
    snprintf(req, sizeof(req),
             "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: WebSocket\r\nConnection: keep-alive\r\n"
             "connection: foo,  UPGRADE \r\nSec-WebSocket-Version:  13 \r\n"
             "Sec-WebSocket-Key:  dGhlIHNhbXBsZSBub25jZQ== \r\n\r\n");
    ck_assert_int_eq(shake(req, out, err), 101);
    ck_assert(strstr(out, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n") != NULL);

    /* another key, another answer (computed independently with Python's
     * base64.b64encode(hashlib.sha1(key + GUID).digest())) */
    snprintf(req, sizeof(req),
             "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: h2c, websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n");
    ck_assert_int_eq(shake(req, out, err), 101);
    ck_assert(strstr(out, "Sec-WebSocket-Accept: ICX+Yqv66kxgM0FcWaLWlFLwTAI=\r\n") != NULL);
}
END_TEST

START_TEST(test_handshake_refusals)
{
    static const struct {
        const char *req; /* %s: the key line */
        int status;
        const char *why; /* in err */
    } cases[] = {
        {"POST / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n%s"
         "Sec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n",
         400, "is a GET, not a POST"},
        {"GET / HTTP/1.0\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n%s"
         "Sec-WebSocket-Version: 13\r\n\r\n",
         400, "needs HTTP/1.1"},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n%sSec-WebSocket-Version: 13\r\n\r\n",
         400, "Upgrade: websocket is missing"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websockets\r\nConnection: Upgrade\r\n%s"
         "Sec-WebSocket-Version: 13\r\n\r\n",
         400, "Upgrade: websocket is missing"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n%sSec-WebSocket-Version: 13\r\n\r\n",
         400, "Connection: Upgrade is missing"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: keep-alive, upgrades\r\n"
         "%sSec-WebSocket-Version: 13\r\n\r\n",
         400, "Connection: Upgrade is missing"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n%s\r\n", 426,
         "version 13"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n%s"
         "Sec-WebSocket-Version: 8\r\n\r\n",
         426, "version 13"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n%s"
         "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Version: 13\r\n\r\n",
         426, "version 13"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Version: 13\r\n\r\n",
         400, "Sec-WebSocket-Key"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: abc\r\n\r\n",
         400, "Sec-WebSocket-Key"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=x\r\n\r\n",
         400, "Sec-WebSocket-Key"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZ*==\r\n\r\n",
         400, "Sec-WebSocket-Key"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ\r\n\r\n",
         400, "Sec-WebSocket-Key"},
        /* 20 bytes, not 16 */
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQABAgM=\r\n\r\n",
         400, "Sec-WebSocket-Key"},
        {"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Version: 13\r\n%sSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n",
         400, "one header"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char req[1024], out[NET_WS_HANDSHAKE_MAX], err[200];
        snprintf(req, sizeof(req), cases[i].req, KEY);
        int st = shake(req, out, err);
        ck_assert_msg(st == cases[i].status, "case %zu: %d %s", i, st, err);
        ck_assert_msg(strstr(err, cases[i].why) != NULL, "case %zu: %s", i, err);
        ck_assert(strchr(err, '\n') == NULL);
        ck_assert_str_eq(out, st == 426 ? "Sec-WebSocket-Version: 13\r\n" : "");
    }

    /* bad arguments */
    char out[NET_WS_HANDSHAKE_MAX], err[200];
    size_t outlen;
    hp_header h[1] = {{"host", "h"}};
    hp_req r = {.method = "GET", .target = "/", .headers = h, .nheaders = 1, .minor = 1};
    ck_assert_int_eq(net_ws_handshake(NULL, out, sizeof(out), &outlen, err, sizeof(err)),
                     NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_handshake(&r, out, sizeof(out) - 1, &outlen, err, sizeof(err)),
                     NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_handshake(&r, NULL, sizeof(out), &outlen, err, sizeof(err)),
                     NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_handshake(&r, out, sizeof(out), NULL, err, sizeof(err)), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_handshake(&r, out, sizeof(out), &outlen, NULL, 0), 400);
}
END_TEST

/* -------------------------------------------------------------- messages --- */

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 131 + (i >> 8));
}

START_TEST(test_messages_in_any_split)
{
    static const size_t sizes[] = {0, 1, 125, 126, 127, 65535, 65536, 70000};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    uint8_t *big = malloc(70000);
    char *txt = malloc(70001);
    for (size_t i = 0; i < 70000; i++) {
        big[i] = pattern(i);
        txt[i] = (char)('a' + i % 26);
    }
    bytes in = {0};
    for (size_t i = 0; i < N; i++) {
        frame(&in, true, NET_WS_BINARY, big, sizes[i]);
        frame(&in, true, NET_WS_TEXT, txt, sizes[i]);
    }
    text(&in, "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"); /* 2-, 3- and 4-byte UTF-8 */
    size_t steps[] = {WHOLE, 1, 2, 3, 7, 1000, RANDOM, RANDOM, RANDOM};
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
        net_ws *s = net_ws_new(NULL);
        ck_assert_ptr_nonnull(s);
        got g = {0};
        ck_assert_int_eq(feed(s, &in, steps[k], &g), 0);
        ck_assert_uint_eq(g.n, 2 * N + 1);
        for (size_t i = 0; i < N; i++) {
            ck_assert_int_eq(g.op[2 * i], NET_WS_BINARY);
            ck_assert(same(&g.data[2 * i], big, sizes[i]));
            ck_assert_int_eq(g.op[2 * i + 1], NET_WS_TEXT);
            ck_assert(same(&g.data[2 * i + 1], txt, sizes[i]));
        }
        ck_assert(same(&g.data[2 * N], "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15));
        ck_assert_uint_eq(net_ws_pending_output(s), 0);
        ck_assert_str_eq(net_ws_error(s), "");
        ck_assert(!net_ws_closing(s));
        got_free(&g);
        net_ws_free(s);
    }
    clear(&in);
    free(big);
    free(txt);
}
END_TEST

START_TEST(test_fragments_and_control_frames)
{
    bytes in = {0};
    /* a text message in four frames (one empty), a 3-byte character cut
     * across two of them, a ping and a pong between the fragments */
    frame(&in, false, NET_WS_TEXT, "one \xe2", 5);
    frame(&in, true, NET_WS_PING, "are you there", 13);
    frame(&in, false, CONT, "\x82\xac two ", 7);
    frame(&in, false, CONT, "", 0);
    frame(&in, true, NET_WS_PONG, "beat 1", 6);
    frame(&in, true, CONT, "three", 5);
    /* a binary message in 100 one-byte frames */
    for (int i = 0; i < 100; i++) {
        uint8_t c = pattern((size_t)i);
        frame(&in, i == 99, i == 0 ? NET_WS_BINARY : CONT, &c, 1);
    }
    /* an empty message of empty fragments, an empty ping */
    frame(&in, false, NET_WS_BINARY, "", 0);
    frame(&in, true, NET_WS_PING, "", 0);
    frame(&in, true, CONT, "", 0);
    uint8_t bin[100];
    for (size_t i = 0; i < 100; i++)
        bin[i] = pattern(i);
    size_t steps[] = {WHOLE, 1, 5, RANDOM, RANDOM};
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
        net_ws *s = net_ws_new(NULL);
        got g = {0};
        ck_assert_int_eq(feed(s, &in, steps[k], &g), 0);
        ck_assert_uint_eq(g.n, 4);
        ck_assert_int_eq(g.op[0], NET_WS_PONG);
        ck_assert(same(&g.data[0], "beat 1", 6));
        ck_assert_int_eq(g.op[1], NET_WS_TEXT);
        ck_assert(same(&g.data[1], "one \xe2\x82\xac two three", 17));
        ck_assert_int_eq(g.op[2], NET_WS_BINARY);
        ck_assert(same(&g.data[2], bin, 100));
        ck_assert_int_eq(g.op[3], NET_WS_BINARY);
        ck_assert_uint_eq(g.data[3].len, 0);
        /* two pings: one pong, for the latest */
        sframe f[4];
        ck_assert_uint_eq(out_frames(s, f, 4), 1);
        ck_assert_int_eq(f[0].op, NET_WS_PONG);
        ck_assert_uint_eq(f[0].payload.len, 0);
        frames_free(f, 1);
        got_free(&g);
        net_ws_free(s);
    }
    clear(&in);
}
END_TEST

START_TEST(test_ping_answered)
{
    net_ws *s = net_ws_new(NULL);
    bytes in = {0};
    frame(&in, true, NET_WS_PING, "abc", 3);
    got g = {0};
    ck_assert_int_eq(feed(s, &in, WHOLE, &g), 0);
    ck_assert_uint_eq(g.n, 0);
    ck_assert_uint_eq(net_ws_pending_output(s), 5);
    rt_buf *b;
    ck_assert_int_eq(net_ws_take_output(s, &b), 0);
    ck_assert_uint_eq(rt_buf_len(b), 5);
    static const uint8_t pong[] = {0x8a, 0x03, 'a', 'b', 'c'};
    ck_assert(memcmp(rt_buf_data(b), pong, 5) == 0);
    rt_buf_unref(b);
    ck_assert_uint_eq(net_ws_pending_output(s), 0);
    ck_assert_int_eq(net_ws_take_output(s, &b), 0);
    ck_assert_ptr_null(b);

    /* the pong for a ping read before a write goes first */
    clear(&in);
    uint8_t p125[125];
    memset(p125, 'p', sizeof(p125));
    frame(&in, true, NET_WS_PING, p125, 125);
    ck_assert_int_eq(feed(s, &in, 1, &g), 0);
    ck_assert_int_eq(net_ws_write(s, NET_WS_TEXT, (const uint8_t *)"after", 5), 0);
    ck_assert_int_eq(net_ws_ping(s, (const uint8_t *)"mine", 4), 0);
    sframe f[4];
    ck_assert_uint_eq(out_frames(s, f, 4), 3);
    ck_assert_int_eq(f[0].op, NET_WS_PONG);
    ck_assert(same(&f[0].payload, p125, 125));
    ck_assert_int_eq(f[1].op, NET_WS_TEXT);
    ck_assert(same(&f[1].payload, "after", 5));
    ck_assert_int_eq(f[2].op, NET_WS_PING);
    ck_assert(same(&f[2].payload, "mine", 4));
    frames_free(f, 3);
    clear(&in);
    net_ws_free(s);
}
END_TEST

/* ------------------------------------------------------- protocol errors --- */

/* in makes the session fail with `code`, fed whole, a byte at a time and
 * at random; the messages before the bad frame come out first. */
static void expect_close(const char *what, const bytes *in, const net_ws_limits *l, int code,
                         size_t msgs_before)
{
    size_t steps[] = {WHOLE, 1, RANDOM};
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
        net_ws *s = net_ws_new(l);
        got g = {0};
        int r = feed(s, in, steps[k], &g);
        ck_assert_msg(r == NET_WS_EPROTO, "%s (step %zu): %d %s", what, steps[k], r,
                      net_ws_error(s));
        ck_assert_msg(g.n == msgs_before, "%s: %zu messages", what, g.n);
        char want[32];
        snprintf(want, sizeof(want), "closed with %d: ", code);
        ck_assert_msg(strstr(net_ws_error(s), want) != NULL, "%s: %s", what, net_ws_error(s));
        ck_assert(strchr(net_ws_error(s), '\n') == NULL);
        ck_assert(net_ws_closing(s));
        ck_assert_int_eq(net_ws_close_code(s), code);
        ck_assert_int_eq(net_ws_peer_close_code(s), 0);
        sframe f[4];
        size_t n = out_frames(s, f, 4);
        ck_assert_uint_ge(n, 1);
        ck_assert_msg(close_code_of(&f[n - 1]) == code, "%s: closed with %d", what,
                      close_code_of(&f[n - 1]));
        ck_assert_uint_le(f[n - 1].payload.len, 125);
        frames_free(f, n);
        /* sticky, and nothing more is queued */
        net_ws_msg m;
        ck_assert_int_eq(net_ws_read(s, &m), NET_WS_EPROTO);
        ck_assert_int_eq(net_ws_input(s, (const uint8_t *)"x", 1), NET_WS_EPROTO);
        ck_assert_int_eq(net_ws_write(s, NET_WS_TEXT, (const uint8_t *)"x", 1), NET_WS_EPROTO);
        ck_assert_int_eq(net_ws_ping(s, NULL, 0), NET_WS_EPROTO);
        ck_assert_int_eq(net_ws_close(s, 1000, NULL), NET_WS_EPROTO);
        ck_assert_uint_eq(net_ws_pending_output(s), 0);
        got_free(&g);
        net_ws_free(s);
    }
}

START_TEST(test_framing_errors)
{
    bytes b = {0};
    const char *h = "hello";

    frame_ex(&b, FIN | NET_WS_TEXT, false, 0, h, 5);
    expect_close("unmasked", &b, NULL, 1002, 0);
    clear(&b);
    text(&b, "fine");
    frame_ex(&b, FIN | NET_WS_PING, false, 0, "", 0);
    expect_close("unmasked ping after a message", &b, NULL, 1002, 1);
    clear(&b);

    uint8_t rsv[] = {RSV1, RSV2, RSV3};
    for (int i = 0; i < 3; i++) {
        frame_ex(&b, FIN | rsv[i] | NET_WS_TEXT, true, 0, h, 5);
        expect_close("reserved bit", &b, NULL, 1002, 0);
        clear(&b);
        frame_ex(&b, FIN | rsv[i] | NET_WS_PING, true, 0, "", 0);
        expect_close("reserved bit on a ping", &b, NULL, 1002, 0);
        clear(&b);
    }
    for (int op = 3; op <= 0xf; op++) {
        if (op >= NET_WS_CLOSE && op <= NET_WS_PONG)
            continue;
        frame_ex(&b, (uint8_t)(FIN | op), true, 0, h, 5);
        expect_close("unknown opcode", &b, NULL, 1002, 0);
        clear(&b);
    }
    uint8_t p126[126] = {0x03, 0xe8};
    int ctl[] = {NET_WS_PING, NET_WS_PONG, NET_WS_CLOSE};
    for (int i = 0; i < 3; i++) {
        frame(&b, true, ctl[i], p126, 126);
        expect_close("control frame over 125 bytes", &b, NULL, 1002, 0);
        clear(&b);
        frame(&b, false, ctl[i], p126, 2);
        expect_close("fragmented control frame", &b, NULL, 1002, 0);
        clear(&b);
    }
    frame(&b, true, CONT, h, 5);
    expect_close("continuation first", &b, NULL, 1002, 0);
    clear(&b);
    frame(&b, false, NET_WS_TEXT, h, 5);
    frame(&b, true, NET_WS_BINARY, h, 5);
    expect_close("new message inside one", &b, NULL, 1002, 0);
    clear(&b);
    text(&b, "done");
    frame(&b, true, CONT, h, 5);
    expect_close("continuation after the final frame", &b, NULL, 1002, 1);
    clear(&b);

    /* lengths not in their shortest form, and one with the top bit set */
    frame_ex(&b, FIN | NET_WS_TEXT, true, 126, h, 5);
    expect_close("16-bit length under 126", &b, NULL, 1002, 0);
    clear(&b);
    frame_ex(&b, FIN | NET_WS_BINARY, true, 127, p126, 126);
    expect_close("64-bit length under 65536", &b, NULL, 1002, 0);
    clear(&b);
    put(&b, "\x82\xff\x80\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00", 14);
    expect_close("64-bit length over 2^63", &b, NULL, 1002, 0);
    clear(&b);
    free(b.p);
}
END_TEST

START_TEST(test_utf8_errors)
{
    static const struct {
        const char *s;
        size_t n;
    } bad[] = {
        {"\xff", 1},
        {"\xfe", 1},
        {"\x80", 1},                 /* a continuation byte first */
        {"\xc0\x80", 2},             /* overlong NUL */
        {"\xc1\xbf", 2},             /* overlong */
        {"\xe0\x9f\xbf", 3},         /* overlong */
        {"\xed\xa0\x80", 3},         /* a surrogate */
        {"\xed\xbf\xbf", 3},         /* a surrogate */
        {"\xf0\x8f\xbf\xbf", 4},     /* overlong */
        {"\xf4\x90\x80\x80", 4},     /* past U+10FFFF */
        {"\xf5\x80\x80\x80", 4},     /* past U+10FFFF */
        {"a\xe2\x82", 3},            /* cut short */
        {"\xc3", 1},                 /* cut short */
        {"abcdefgh\xc3(", 10},       /* a non-continuation after the lead byte */
        {"abcdefghijklmno\x80", 16}, /* after an ASCII run */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        bytes b = {0};
        frame(&b, true, NET_WS_TEXT, bad[i].s, bad[i].n);
        expect_close("bad UTF-8", &b, NULL, 1007, 0);
        clear(&b);
        /* the same bytes as the fragments of one message */
        for (size_t k = 0; k < bad[i].n; k++)
            frame(&b, k == bad[i].n - 1, k == 0 ? NET_WS_TEXT : CONT, bad[i].s + k, 1);
        expect_close("bad UTF-8 in fragments", &b, NULL, 1007, 0);
        clear(&b);
    }
    /* fail fast: a bad first fragment fails before the message ends */
    bytes b = {0};
    frame(&b, false, NET_WS_TEXT, "ok \xff", 4);
    expect_close("bad UTF-8, message unfinished", &b, NULL, 1007, 0);
    clear(&b);
    /* valid edge cases pass; binary is not checked */
    static const char good[] = "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80"
                               "\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf";
    text(&b, good);
    frame(&b, true, NET_WS_BINARY, "\xff\xc0\x80", 3);
    net_ws *s = net_ws_new(NULL);
    got g = {0};
    ck_assert_int_eq(feed(s, &b, 1, &g), 0);
    ck_assert_uint_eq(g.n, 2);
    ck_assert(same(&g.data[0], good, sizeof(good) - 1));
    got_free(&g);
    net_ws_free(s);
    clear(&b);
}
END_TEST

START_TEST(test_close_errors)
{
    bytes b = {0};
    frame(&b, true, NET_WS_CLOSE, "\x03", 1);
    expect_close("1-byte close", &b, NULL, 1002, 0);
    clear(&b);
    static const int bad[] = {0,    999,  1004, 1005, 1006, 1015,
                              1016, 1100, 2000, 2999, 5000, 65535};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        close_frame(&b, bad[i], "");
        expect_close("close code", &b, NULL, 1002, 0);
        clear(&b);
    }
    close_frame(&b, 1000, "bad \xc3\x28");
    expect_close("close reason not UTF-8", &b, NULL, 1007, 0);
    clear(&b);
    close_frame(&b, 1000, "cut \xe2\x82");
    expect_close("close reason cut short", &b, NULL, 1007, 0);
    clear(&b);
}
END_TEST

/* A bad header is refused as soon as it is in, without waiting for the
 * payload it announces (which may never come), and after the messages
 * before it. */
START_TEST(test_header_alone)
{
    static uint8_t payload[5000];
    bytes b = {0};
    text(&b, "before");
    size_t keep = b.len;
    frame_ex(&b, FIN | NET_WS_TEXT, false, 0, payload, 10);
    b.len = keep + 2;
    expect_close("an unmasked header alone", &b, NULL, 1002, 1);
    clear(&b);
    text(&b, "before");
    keep = b.len;
    frame_ex(&b, FIN | RSV1 | NET_WS_TEXT, true, 0, payload, 10);
    b.len = keep + 6;
    expect_close("a reserved bit in a header alone", &b, NULL, 1002, 1);
    clear(&b);
    frame_ex(&b, FIN | CONT, true, 0, payload, 10);
    b.len = 6;
    expect_close("a continuation header alone", &b, NULL, 1002, 0);
    clear(&b);
    net_ws_limits l = {.message_bytes = 4096};
    frame_ex(&b, FIN | NET_WS_TEXT, true, 0, payload, sizeof(payload));
    b.len = 8; /* 2 + 2-byte length + mask */
    expect_close("an oversized header alone", &b, &l, 1009, 0);
    clear(&b);
    frame(&b, false, NET_WS_TEXT, payload, 4000); /* the fragments add up past the limit */
    keep = b.len;
    frame_ex(&b, FIN | CONT, true, 0, payload, 200);
    b.len = keep + 8; /* 2 + 2-byte length + mask */
    expect_close("a continuation header past the limit", &b, &l, 1009, 0);
    clear(&b);
}
END_TEST

START_TEST(test_size_limit)
{
    /* the default, 1 MiB: a message of exactly that passes, in one frame or
     * in 16, and one byte more fails before it is all read */
    enum { MIB = 1 << 20 };
    uint8_t *big = malloc(MIB + 1);
    for (size_t i = 0; i <= MIB; i++)
        big[i] = pattern(i);
    bytes b = {0};
    frame(&b, true, NET_WS_BINARY, big, MIB);
    for (int i = 0; i < 16; i++)
        frame(&b, i == 15, i == 0 ? NET_WS_BINARY : CONT, big + i * (MIB / 16), MIB / 16);
    net_ws *s = net_ws_new(NULL);
    got g = {0};
    ck_assert_int_eq(feed(s, &b, 60000, &g), 0);
    ck_assert_uint_eq(g.n, 2);
    ck_assert(same(&g.data[0], big, MIB));
    ck_assert(same(&g.data[1], big, MIB));
    got_free(&g);
    net_ws_free(s);
    clear(&b);

    frame(&b, true, NET_WS_BINARY, big, MIB + 1);
    b.len = 100; /* the header and a few bytes: enough to refuse it */
    expect_close("over 1 MiB", &b, NULL, 1009, 0);
    clear(&b);
    frame(&b, false, NET_WS_BINARY, big, MIB);
    frame(&b, true, CONT, big, 1);
    expect_close("over 1 MiB in fragments", &b, NULL, 1009, 0);
    clear(&b);
    /* a header announcing 2^62 bytes is refused, not believed */
    put(&b, "\x82\xff\x40\x00\x00\x00\x00\x00\x00\x00\x01\x02\x03\x04\x05", 15);
    expect_close("2^62 bytes", &b, NULL, 1009, 0);
    clear(&b);

    /* a configured limit; control frames do not count */
    net_ws_limits l = {.message_bytes = 1000};
    frame(&b, false, NET_WS_TEXT, big, 0);
    memset(big, 'x', 1001);
    frame(&b, false, CONT, big, 600);
    frame(&b, true, NET_WS_PING, big, 125);
    frame(&b, true, CONT, big, 400);
    s = net_ws_new(&l);
    ck_assert_int_eq(feed(s, &b, RANDOM, &g), 0);
    ck_assert_uint_eq(g.n, 1);
    ck_assert_uint_eq(g.data[0].len, 1000);
    got_free(&g);
    net_ws_free(s);
    clear(&b);
    frame(&b, false, NET_WS_TEXT, big, 600);
    frame(&b, true, CONT, big, 401);
    expect_close("over 1000 bytes", &b, &l, 1009, 0);
    clear(&b);
    free(big);
}
END_TEST

/* ------------------------------------------------------------------ close --- */

START_TEST(test_peer_closes)
{
    /* a message, then the close, in one read: the message first, then
     * the echo of the code (without the reason) */
    bytes b = {0};
    text(&b, "last words");
    close_frame(&b, 1001, "going \xe2\x82\xac");
    text(&b, "never read");
    size_t steps[] = {WHOLE, 1, RANDOM};
    for (size_t k = 0; k < 3; k++) {
        net_ws *s = net_ws_new(NULL);
        got g = {0};
        ck_assert_int_eq(feed(s, &b, steps[k], &g), NET_WS_CLOSED);
        ck_assert_uint_eq(g.n, 1);
        ck_assert(same(&g.data[0], "last words", 10));
        ck_assert(net_ws_closing(s));
        ck_assert_int_eq(net_ws_peer_close_code(s), 1001);
        ck_assert_int_eq(net_ws_close_code(s), 1001);
        ck_assert_str_eq(net_ws_error(s), "");
        rt_buf *o;
        ck_assert_int_eq(net_ws_take_output(s, &o), 0);
        ck_assert_uint_eq(rt_buf_len(o), 4);
        ck_assert(memcmp(rt_buf_data(o), "\x88\x02\x03\xe9", 4) == 0);
        rt_buf_unref(o);
        net_ws_msg m;
        ck_assert_int_eq(net_ws_read(s, &m), NET_WS_CLOSED);
        ck_assert_int_eq(net_ws_input(s, (const uint8_t *)"x", 1), NET_WS_CLOSED);
        ck_assert_int_eq(net_ws_write(s, NET_WS_TEXT, (const uint8_t *)"x", 1), NET_WS_ESTATE);
        ck_assert_int_eq(net_ws_ping(s, NULL, 0), NET_WS_ESTATE);
        ck_assert_int_eq(net_ws_close(s, 1000, NULL), 0);
        ck_assert_uint_eq(net_ws_pending_output(s), 0);
        got_free(&g);
        net_ws_free(s);
    }
    clear(&b);

    /* every code a peer may send is echoed; an empty close gets one back */
    static const int ok[] = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010,
                             1011, 1012, 1013, 1014, 3000, 4999};
    for (size_t i = 0; i <= sizeof(ok) / sizeof(ok[0]); i++) {
        bool empty = i == sizeof(ok) / sizeof(ok[0]);
        if (empty)
            frame(&b, true, NET_WS_CLOSE, "", 0);
        else
            close_frame(&b, ok[i], "");
        net_ws *s = net_ws_new(NULL);
        got g = {0};
        ck_assert_int_eq(feed(s, &b, WHOLE, &g), NET_WS_CLOSED);
        int code = empty ? 1005 : ok[i];
        ck_assert_int_eq(net_ws_peer_close_code(s), code);
        sframe f[2];
        ck_assert_uint_eq(out_frames(s, f, 2), 1);
        ck_assert_int_eq(close_code_of(&f[0]), code);
        ck_assert_uint_eq(f[0].payload.len, empty ? 0 : 2);
        frames_free(f, 1);
        net_ws_free(s);
        clear(&b);
    }
}
END_TEST

START_TEST(test_server_closes)
{
    net_ws *s = net_ws_new(NULL);
    ck_assert_int_eq(net_ws_close(s, 1005, NULL), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_close(s, 999, NULL), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_close(s, 0, "why"), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_close(s, 1000, "\xff"), NET_WS_EINVAL);
    char r124[125];
    memset(r124, 'r', 124);
    r124[124] = '\0';
    ck_assert_int_eq(net_ws_close(s, 1000, r124), NET_WS_EINVAL);
    ck_assert(!net_ws_closing(s));
    r124[123] = '\0';

    /* a ping read but not yet answered goes before the close */
    bytes b = {0};
    frame(&b, true, NET_WS_PING, "hi", 2);
    got g = {0};
    ck_assert_int_eq(feed(s, &b, WHOLE, &g), 0);
    clear(&b);
    ck_assert_int_eq(net_ws_close(s, 4000, r124), 0);
    ck_assert(net_ws_closing(s));
    ck_assert_int_eq(net_ws_close_code(s), 4000);
    ck_assert_int_eq(net_ws_close(s, 1000, NULL), 0); /* once */
    ck_assert_int_eq(net_ws_write(s, NET_WS_TEXT, (const uint8_t *)"x", 1), NET_WS_ESTATE);
    ck_assert_int_eq(net_ws_ping(s, NULL, 0), NET_WS_ESTATE);
    sframe f[4];
    ck_assert_uint_eq(out_frames(s, f, 4), 2);
    ck_assert_int_eq(f[0].op, NET_WS_PONG);
    ck_assert_int_eq(close_code_of(&f[1]), 4000);
    ck_assert_uint_eq(f[1].payload.len, 125);
    ck_assert(memcmp(f[1].payload.p + 2, r124, 123) == 0);
    frames_free(f, 2);

    /* the peer may still send: messages and pongs come, pings are not
     * answered; then its close ends it, and no second close goes */
    text(&b, "still here");
    frame(&b, true, NET_WS_PING, "x", 1);
    frame(&b, true, NET_WS_PONG, "y", 1);
    close_frame(&b, 1000, "");
    ck_assert_int_eq(feed(s, &b, 1, &g), NET_WS_CLOSED);
    ck_assert_uint_eq(g.n, 2);
    ck_assert_int_eq(g.op[0], NET_WS_TEXT);
    ck_assert_int_eq(g.op[1], NET_WS_PONG);
    ck_assert_uint_eq(net_ws_pending_output(s), 0);
    ck_assert_int_eq(net_ws_close_code(s), 4000);
    ck_assert_int_eq(net_ws_peer_close_code(s), 1000);
    got_free(&g);
    clear(&b);
    net_ws_free(s);

    /* an empty close; a protocol error after our close sends nothing more */
    s = net_ws_new(NULL);
    ck_assert_int_eq(net_ws_close(s, 0, NULL), 0);
    ck_assert_int_eq(net_ws_close_code(s), 1005);
    ck_assert_uint_eq(out_frames(s, f, 4), 1);
    ck_assert_uint_eq(f[0].payload.len, 0);
    frames_free(f, 1);
    frame_ex(&b, FIN | NET_WS_TEXT, false, 0, "x", 1);
    ck_assert_int_eq(feed(s, &b, WHOLE, &g), NET_WS_EPROTO);
    ck_assert_msg(strstr(net_ws_error(s), "after our close: client frames must be masked") != NULL,
                  "%s", net_ws_error(s));
    ck_assert_uint_eq(net_ws_pending_output(s), 0);
    ck_assert_int_eq(net_ws_close_code(s), 1005);
    clear(&b);
    net_ws_free(s);
}
END_TEST

/* ------------------------------------------------------------- sending --- */

START_TEST(test_frame_header)
{
    static const struct {
        int op;
        uint64_t len;
        size_t hl;
        const char *h;
    } cases[] = {
        {NET_WS_TEXT, 0, 2, "\x81\x00"},
        {NET_WS_BINARY, 125, 2, "\x82\x7d"},
        {NET_WS_TEXT, 126, 4, "\x81\x7e\x00\x7e"},
        {NET_WS_TEXT, 65535, 4, "\x81\x7e\xff\xff"},
        {NET_WS_BINARY, 65536, 10, "\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00"},
        {NET_WS_TEXT, (1ull << 32) + 7, 10, "\x81\x7f\x00\x00\x00\x01\x00\x00\x00\x07"},
        {NET_WS_BINARY, (1ull << 63) - 1, 10, "\x82\x7f\x7f\xff\xff\xff\xff\xff\xff\xff"},
        {NET_WS_CLOSE, 2, 2, "\x88\x02"},
        {NET_WS_PING, 125, 2, "\x89\x7d"},
        {NET_WS_PONG, 0, 2, "\x8a\x00"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].len > SIZE_MAX)
            continue;
        uint8_t h[NET_WS_HEADER_MAX];
        size_t hl = net_ws_frame_header(h, cases[i].op, (size_t)cases[i].len);
        ck_assert_uint_eq(hl, cases[i].hl);
        ck_assert_msg(memcmp(h, cases[i].h, hl) == 0, "case %zu", i);
    }
    uint8_t h[NET_WS_HEADER_MAX];
    ck_assert_uint_eq(net_ws_frame_header(h, 0, 1), 0); /* no continuation: no fragments */
    ck_assert_uint_eq(net_ws_frame_header(h, 3, 1), 0);
    ck_assert_uint_eq(net_ws_frame_header(h, NET_WS_PING, 126), 0);
    ck_assert_uint_eq(net_ws_frame_header(h, NET_WS_CLOSE, 126), 0);
    ck_assert_uint_eq(net_ws_frame_header(NULL, NET_WS_TEXT, 1), 0);
#if SIZE_MAX > UINT32_MAX
    ck_assert_uint_eq(net_ws_frame_header(h, NET_WS_TEXT, (size_t)1 << 63), 0);
#endif

    /* header + payload, as the connection will writev them, parsed by wslay */
    static const size_t sizes[] = {0, 125, 126, 65535, 65536, 200000};
    uint8_t *p = malloc(200000);
    for (size_t i = 0; i < 200000; i++)
        p[i] = pattern(i);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        bytes w = {0};
        size_t hl = net_ws_frame_header(h, NET_WS_BINARY, sizes[i]);
        put(&w, h, hl);
        put(&w, p, sizes[i]);
        sframe f[1];
        ck_assert_uint_eq(wc_parse(w.p, w.len, f, 1), 1);
        ck_assert_int_eq(f[0].op, NET_WS_BINARY);
        ck_assert(same(&f[0].payload, p, sizes[i]));
        frames_free(f, 1);
        clear(&w);
    }
    free(p);
}
END_TEST

START_TEST(test_wslay_round_trip)
{
    wclient c;
    wc_init(&c);
    uint8_t *big = malloc(100000);
    for (size_t i = 0; i < 100000; i++)
        big[i] = pattern(i);
    wc_frame(&c, true, NET_WS_TEXT, "{\"op\":\"subscribe\"}", 18);
    wc_frame(&c, false, NET_WS_BINARY, big, 70000);
    wc_frame(&c, true, NET_WS_PING, "tick", 4);
    wc_frame(&c, true, CONT, big + 70000, 30000);
    wc_frame(&c, true, NET_WS_PONG, "tock", 4);

    net_ws *s = net_ws_new(NULL);
    got g = {0};
    ck_assert_int_eq(feed(s, &c.to_server, RANDOM, &g), 0);
    ck_assert_uint_eq(g.n, 3);
    ck_assert_int_eq(g.op[0], NET_WS_TEXT);
    ck_assert(same(&g.data[0], "{\"op\":\"subscribe\"}", 18));
    ck_assert_int_eq(g.op[1], NET_WS_BINARY);
    ck_assert(same(&g.data[1], big, 100000));
    ck_assert_int_eq(g.op[2], NET_WS_PONG);
    ck_assert(same(&g.data[2], "tock", 4));

    /* server to client: the engine's output (the pong, a message), then a
     * frame the connection writes itself, header and shared payload */
    ck_assert_int_eq(net_ws_write(s, NET_WS_TEXT, (const uint8_t *)"{\"ok\":true}", 11), 0);
    rt_buf *o;
    ck_assert_int_eq(net_ws_take_output(s, &o), 0);
    rt_buf *event = rt_buf_copy(big, 100000);
    uint8_t h[NET_WS_HEADER_MAX];
    size_t hl = net_ws_frame_header(h, NET_WS_BINARY, rt_buf_len(event));
    bytes wire = {0};
    put(&wire, rt_buf_data(o), rt_buf_len(o));
    put(&wire, h, hl);
    put(&wire, rt_buf_data(event), rt_buf_len(event));
    rt_buf_unref(o);
    rt_buf_unref(event);
    sframe f[4];
    ck_assert_uint_eq(wc_parse(wire.p, wire.len, f, 4), 3);
    ck_assert_int_eq(f[0].op, NET_WS_PONG);
    ck_assert(same(&f[0].payload, "tick", 4));
    ck_assert_int_eq(f[1].op, NET_WS_TEXT);
    ck_assert(same(&f[1].payload, "{\"ok\":true}", 11));
    ck_assert_int_eq(f[2].op, NET_WS_BINARY);
    ck_assert(same(&f[2].payload, big, 100000));
    frames_free(f, 3);
    clear(&wire);
    got_free(&g);
    net_ws_free(s);
    wc_free(&c);
    free(big);
}
END_TEST

/* ------------------------------------------------------------- bounds --- */

START_TEST(test_input_bound)
{
    net_ws *s = net_ws_new(NULL);
    uint8_t *chunk = calloc(1, NET_WS_INPUT_MAX);
    ck_assert_int_eq(net_ws_input(s, chunk, NET_WS_INPUT_MAX), 0);
    ck_assert_int_eq(net_ws_input(s, chunk, 1), NET_WS_EFULL);
    ck_assert_str_eq(net_ws_error(s), "WebSocket input over 128 KiB not read");
    net_ws_msg m;
    ck_assert_int_eq(net_ws_read(s, &m), NET_WS_EFULL);
    net_ws_free(s);

    /* read in between, and any amount goes through */
    s = net_ws_new(NULL);
    bytes b = {0};
    for (int i = 0; i < 5000; i++)
        frame(&b, true, NET_WS_BINARY, chunk, 100);
    got g = {0};
    size_t msgs = 0;
    for (size_t at = 0; at < b.len;) {
        size_t n = b.len - at < 50000 ? b.len - at : 50000;
        ck_assert_int_eq(net_ws_input(s, b.p + at, n), 0);
        at += n;
        for (;;) {
            int r = net_ws_read(s, &m);
            if (r == 0)
                break;
            ck_assert_int_eq(r, 1);
            msgs++;
        }
    }
    ck_assert_uint_eq(msgs, 5000);
    got_free(&g);
    clear(&b);
    free(chunk);
    net_ws_free(s);
}
END_TEST

START_TEST(test_ping_flood)
{
    /* 20000 pings before the output is taken: one pong */
    net_ws *s = net_ws_new(NULL);
    bytes b = {0};
    for (int i = 0; i < 20000; i++) {
        char p[16];
        int n = snprintf(p, sizeof(p), "%d", i);
        frame(&b, true, NET_WS_PING, p, (size_t)n);
    }
    got g = {0};
    ck_assert_int_eq(feed(s, &b, 60000, &g), 0);
    ck_assert_uint_eq(net_ws_pending_output(s), 7);
    sframe f[2];
    ck_assert_uint_eq(out_frames(s, f, 2), 1);
    ck_assert(same(&f[0].payload, "19999", 5));
    frames_free(f, 1);
    clear(&b);
    net_ws_free(s);
}
END_TEST

START_TEST(test_garbage)
{
    /* random bytes, and random frames with a valid mask bit: never a crash,
     * only the documented outcomes, and a close frame with a code that fits */
    uint8_t p[400];
    for (int i = 0; i < TS_SCALE(20000, 4000); i++) {
        size_t n = 1 + (size_t)i % sizeof(p);
        for (size_t k = 0; k < n; k++)
            p[k] = (uint8_t)rnd();
        if (i % 2 == 1)
            p[1] |= 0x80;
        net_ws_limits l = {.message_bytes = 1 + rnd() % 300};
        net_ws *s = net_ws_new(&l);
        size_t step = 1 + (size_t)i % 17, at = 0;
        int r = 0;
        while (r >= 0 && at < n) {
            size_t k = n - at < step ? n - at : step;
            r = net_ws_input(s, p + at, k);
            at += k;
            net_ws_msg m;
            while (r == 0 && (r = net_ws_read(s, &m)) == 1)
                ts_require(m.len <= (m.opcode == NET_WS_PONG ? 125 : l.message_bytes),
                           "garbage %d: a message of %zu bytes", i, m.len);
            if (r == 1 || r == 0)
                r = 0;
        }
        ts_require(r == 0 || r == NET_WS_EPROTO || r == NET_WS_CLOSED, "garbage %d: %d", i, r);
        rt_buf *o = NULL;
        ts_require(net_ws_take_output(s, &o) == 0, "garbage %d: output", i);
        if (r == NET_WS_EPROTO) {
            int code = net_ws_close_code(s);
            ts_require(code == 1002 || code == 1007 || code == 1009, "garbage %d: %d", i, code);
            /* the output: a pong perhaps, then the close, last */
            const uint8_t *q = o != NULL ? rt_buf_data(o) : NULL;
            size_t len = o != NULL ? rt_buf_len(o) : 0, pos = 0, last = 0;
            while (pos + 2 <= len) {
                last = pos;
                pos += 2 + (q[pos + 1] & 0x7f);
            }
            ts_require(pos == len && len >= 4 && q[last] == 0x88 &&
                           (q[last + 2] << 8 | q[last + 3]) == code,
                       "garbage %d: no close frame with %d", i, code);
        }
        rt_buf_unref(o);
        net_ws_free(s);
    }
}
END_TEST

/* Out of memory: with alloc_left = n, the n-th allocation from then on
 * fails. malloc, calloc and realloc are replaced, because wslay allocates
 * too and takes no allocator. Each hands on to the allocator beneath, a
 * sanitizer's when there is one (its runtime defines malloc weakly, over a
 * strong __interceptor_malloc, in gcc's shared runtimes and clang's static
 * ones), so that the free that is called frees what its own malloc made
 * (a runtime without it crashes this program at start-up); else glibc's.
 * Not instrumented: ld.so calls malloc while TSan is starting up, before it
 * can follow a call. */
#if defined(__clang__)
#define NOT_INSTRUMENTED __attribute__((disable_sanitizer_instrumentation))
#else
#define NOT_INSTRUMENTED __attribute__((no_sanitize("address", "thread")))
#endif
extern void *__interceptor_malloc(size_t n) __attribute__((weak));
extern void *__interceptor_calloc(size_t k, size_t n) __attribute__((weak));
extern void *__interceptor_realloc(void *p, size_t n) __attribute__((weak));
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t k, size_t n);
extern void *__libc_realloc(void *p, size_t n);

static long alloc_left = -1; /* allocations before the one that fails; -1: none fails */

NOT_INSTRUMENTED static bool alloc_fails(void)
{
    return alloc_left >= 0 && alloc_left-- == 0;
}

NOT_INSTRUMENTED void *malloc(size_t n)
{
    if (alloc_fails())
        return NULL;
    return __interceptor_malloc != NULL ? __interceptor_malloc(n) : __libc_malloc(n);
}

NOT_INSTRUMENTED void *calloc(size_t k, size_t n)
{
    if (alloc_fails())
        return NULL;
    return __interceptor_calloc != NULL ? __interceptor_calloc(k, n) : __libc_calloc(k, n);
}

NOT_INSTRUMENTED void *realloc(void *p, size_t n)
{
    if (alloc_fails())
        return NULL;
    return __interceptor_realloc != NULL ? __interceptor_realloc(p, n) : __libc_realloc(p, n);
}

START_TEST(test_out_of_memory)
{
    /* a fragmented message around a ping, a message, the peer's close */
    char a[3000], z[20000];
    memset(a, 'a', sizeof(a));
    memset(z, 'z', sizeof(z));
    bytes in = {0};
    frame(&in, false, NET_WS_TEXT, a, sizeof(a));
    frame(&in, true, NET_WS_PING, "p", 1);
    frame(&in, true, CONT, z, sizeof(z));
    text(&in, "x");
    close_frame(&in, 1000, "");
    bool all = false;
    long n = 0;
    for (; !all; n++) {
        ck_assert_int_lt(n, 1000);
        int r = NET_WS_ENOMEM;
        size_t msgs = 0, lens[4] = {0};
        rt_buf *o = NULL;
        alloc_left = n;
        net_ws *s = net_ws_new(NULL);
        if (s != NULL) {
            r = net_ws_input(s, in.p, in.len);
            net_ws_msg m;
            while (r == 0 && (r = net_ws_read(s, &m)) == 1) {
                lens[msgs++ % 4] = m.len;
                r = 0;
            }
        }
        int taken = s != NULL ? net_ws_take_output(s, &o) : 0;
        all = alloc_left >= 0; /* the failure never came */
        alloc_left = -1;
        if (taken != 0) { /* the frames stay queued: taken on a retry */
            ck_assert_int_eq(taken, NET_WS_ENOMEM);
            ck_assert_int_eq(net_ws_take_output(s, &o), 0);
        }
        sframe f[4];
        size_t nf = o != NULL ? wc_parse(rt_buf_data(o), rt_buf_len(o), f, 4) : 0;
        rt_buf_unref(o);
        if (r == NET_WS_CLOSED) { /* every allocation that failed was retried or not needed */
            ck_assert_uint_eq(msgs, 2);
            ck_assert_uint_eq(lens[0], sizeof(a) + sizeof(z));
            ck_assert_uint_eq(lens[1], 1);
            ck_assert_uint_eq(nf, 2);
            ck_assert_int_eq(f[0].op, NET_WS_PONG);
            ck_assert_int_eq(close_code_of(&f[1]), 1000);
        } else {
            ck_assert_msg(r == NET_WS_ENOMEM, "allocation %ld: %d %s", n, r, net_ws_error(s));
            ck_assert(!all);
            if (s != NULL && net_ws_closing(s)) {
                ck_assert_uint_ge(nf, 1);
                ck_assert_int_eq(close_code_of(&f[nf - 1]), 1011);
                ck_assert_str_eq(net_ws_error(s), "WebSocket closed with 1011: out of memory");
            }
        }
        frames_free(f, nf);
        net_ws_free(s);
    }
    /* The session, its input, wslay's context, the message and the output
     * at least: fewer passes would mean the failures were never injected. */
    ck_assert_int_ge(n, 5);
    clear(&in);
}
END_TEST

START_TEST(test_bad_arguments)
{
    net_ws_msg m;
    rt_buf *o;
    ck_assert_int_eq(net_ws_input(NULL, NULL, 0), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_read(NULL, &m), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_write(NULL, NET_WS_TEXT, NULL, 0), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_ping(NULL, NULL, 0), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_close(NULL, 1000, NULL), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_take_output(NULL, &o), NET_WS_EINVAL);
    ck_assert_uint_eq(net_ws_pending_output(NULL), 0);
    ck_assert(!net_ws_closing(NULL));
    ck_assert_str_eq(net_ws_error(NULL), "");
    net_ws_free(NULL);

    net_ws *s = net_ws_new(NULL);
    ck_assert_int_eq(net_ws_input(s, NULL, 1), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_input(s, NULL, 0), 0);
    ck_assert_int_eq(net_ws_read(s, NULL), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_read(s, &m), 0);
    ck_assert_int_eq(net_ws_write(s, NET_WS_PING, (const uint8_t *)"x", 1), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_write(s, NET_WS_TEXT, NULL, 1), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_write(s, NET_WS_BINARY, NULL, 0), 0);
    uint8_t p[126] = {0};
    ck_assert_int_eq(net_ws_ping(s, p, 126), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_ping(s, p, 125), 0);
    ck_assert_int_eq(net_ws_take_output(s, NULL), NET_WS_EINVAL);
    ck_assert_uint_eq(net_ws_pending_output(s), 2 + 2 + 125);
    ck_assert_str_eq(net_ws_error(s), "");
    net_ws_free(s);
}
END_TEST

/* rt_strerror describes our codes: ws.c registered them at start-up. */
START_TEST(test_codes_described)
{
    const int codes[] = {NET_WS_CLOSED, NET_WS_EPROTO, NET_WS_EFULL,
                         NET_WS_ESTATE, NET_WS_ENOMEM, NET_WS_EINVAL};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        ck_assert_str_ne(rt_strerror(codes[i]), "unknown error");
    ck_assert_str_eq(rt_strerror(NET_WS_EPROTO), "WebSocket peer broke the protocol");
    ck_assert_str_eq(rt_strerror(-3999), "unknown error"); /* ours, but no code */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ws");
    TCase *tc = tcase_create("ws");
    tcase_add_test(tc, test_handshake_rfc_example);
    tcase_add_test(tc, test_handshake_refusals);
    tcase_add_test(tc, test_messages_in_any_split);
    tcase_add_test(tc, test_fragments_and_control_frames);
    tcase_add_test(tc, test_ping_answered);
    tcase_add_test(tc, test_framing_errors);
    tcase_add_test(tc, test_utf8_errors);
    tcase_add_test(tc, test_close_errors);
    tcase_add_test(tc, test_size_limit);
    tcase_add_test(tc, test_header_alone);
    tcase_add_test(tc, test_peer_closes);
    tcase_add_test(tc, test_server_closes);
    tcase_add_test(tc, test_frame_header);
    tcase_add_test(tc, test_wslay_round_trip);
    tcase_add_test(tc, test_input_bound);
    tcase_add_test(tc, test_ping_flood);
    tcase_add_test(tc, test_garbage);
    tcase_add_test(tc, test_out_of_memory);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_codes_described);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
