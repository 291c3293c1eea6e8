/*
 * test_ws_client.c - the client's side of WebSocket against our own server
 * side, in memory: the handshake (RFC 6455's example key, the request read
 * by the server's parser and answered by net_ws_handshake, the answer read
 * by http_resp and checked, bad answers refused), a whole conversation
 * between a client session and a server session (text, binary, fragments
 * both ways, pings both ways, a close from either side), masked server
 * frames refused, the server's stream split at every byte, and the
 * stateless helpers (net_ws_client_scan, net_ws_client_frame).
 */
#include "net/http_parse.h"
#include "net/ws.h"
#include "net/ws_client.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Move what `from` has to send into `to`. */
static void pass(net_ws *from, net_ws *to)
{
    rt_buf *b = NULL;
    ck_assert_int_eq(net_ws_take_output(from, &b), 0);
    if (b != NULL) {
        ck_assert_int_eq(net_ws_input(to, rt_buf_data(b), rt_buf_len(b)), 0);
        rt_buf_unref(b);
    }
}

/* The server's answer to a request, written into answer (NUL-terminated). */
static size_t answer_for(const char *req, char answer[NET_WS_HANDSHAKE_MAX])
{
    hp_parser *hp = hp_new(NULL);
    bool done;
    ck_assert_int_eq(hp_feed(hp, (const uint8_t *)req, strlen(req), &done), (ssize_t)strlen(req));
    ck_assert(done);
    char why[200];
    size_t alen;
    ck_assert_int_eq(
        net_ws_handshake(hp_request(hp), answer, NET_WS_HANDSHAKE_MAX, &alen, why, sizeof(why)),
        101);
    hp_free(hp);
    return alen;
}

/* net_ws_client_check on a whole response given as text. */
static int check_text(const char *resp, const char *accept, char *err, size_t errlen)
{
    hr_parser *hr = hr_new(NULL);
    bool done;
    ck_assert_int_eq(hr_feed(hr, (const uint8_t *)resp, strlen(resp), &done),
                     (ssize_t)strlen(resp));
    ck_assert(done);
    int r = net_ws_client_check(hr_response(hr), accept, err, errlen);
    hr_free(hr);
    return r;
}

START_TEST(test_request_rfc_key)
{
    /* RFC 6455 1.3: the nonce "the sample nonce" and its accept value */
    char req[512], accept[NET_WS_ACCEPT_LEN + 1];
    int n = net_ws_client_request_key(req, sizeof(req), "server.example.com", "/chat", NULL,
                                      (const uint8_t *)"the sample nonce", accept);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq((int)strlen(req), n);
    ck_assert_str_eq(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    ck_assert_str_eq(req, "GET /chat HTTP/1.1\r\nHost: server.example.com\r\n"
                          "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                          "Sec-WebSocket-Version: 13\r\n\r\n");
    /* random keys differ */
    char a1[NET_WS_ACCEPT_LEN + 1], a2[NET_WS_ACCEPT_LEN + 1];
    ck_assert_int_gt(net_ws_client_request(req, sizeof(req), "h", "/", NULL, a1), 0);
    ck_assert_int_gt(net_ws_client_request(req, sizeof(req), "h", "/", NULL, a2), 0);
    ck_assert_str_ne(a1, a2);
    ck_assert_int_eq(net_ws_client_request(req, 20, "h", "/", NULL, accept), NET_WS_EINVAL);
    ck_assert_int_eq(net_ws_client_request_key(req, sizeof(req), "h", "/", NULL, NULL, accept),
                     NET_WS_EINVAL);
}
END_TEST

START_TEST(test_handshake)
{
    char req[512], accept[NET_WS_ACCEPT_LEN + 1], err[200], answer[NET_WS_HANDSHAKE_MAX];
    int n = net_ws_client_request(req, sizeof(req), "127.0.0.1:80", "/sockets/events/x?a=1",
                                  "X-Session-API-Key: k\r\n", accept);
    ck_assert_int_gt(n, 0);
    ck_assert_ptr_nonnull(strstr(req, "GET /sockets/events/x?a=1 HTTP/1.1\r\n"));
    ck_assert_ptr_nonnull(strstr(req, "X-Session-API-Key: k\r\n\r\n"));
    answer_for(req, answer);
    ck_assert_msg(check_text(answer, accept, err, sizeof(err)) == 0, "%s", err);
    /* another key's answer is not ours */
    char other[NET_WS_ACCEPT_LEN + 1];
    net_ws_client_request(req, sizeof(req), "h", "/", NULL, other);
    ck_assert_str_ne(other, accept);
    answer_for(req, answer);
    ck_assert_int_eq(check_text(answer, accept, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "Sec-WebSocket-Accept is"));
    /* a refusal says its status and detail */
    const char *no = "HTTP/1.1 422 Unprocessable Content\r\nContent-Length: 26\r\n\r\n"
                     "{\"detail\":\"bad envelope\"}\n";
    ck_assert_int_eq(check_text(no, accept, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "refused the upgrade: 422 {\"detail\":\"bad envelope\"}"));
}
END_TEST

START_TEST(test_bad_answers)
{
    char req[512], accept[NET_WS_ACCEPT_LEN + 1], err[200], resp[512];
    net_ws_client_request_key(req, sizeof(req), "h", "/", NULL, (const uint8_t *)"the sample nonce",
                              accept);
    const char *head = "HTTP/1.1 101 Switching Protocols\r\n";
    const char *acc = "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n";
    /* token lists, any case */
    snprintf(resp, sizeof(resp),
             "%sUpgrade: WebSocket\r\nConnection: keep-alive, upgrade\r\n%s\r\n", head, acc);
    ck_assert_msg(check_text(resp, accept, err, sizeof(err)) == 0, "%s", err);
    snprintf(resp, sizeof(resp), "%sConnection: Upgrade\r\n%s\r\n", head, acc);
    ck_assert_int_eq(check_text(resp, accept, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "Upgrade: websocket"));
    snprintf(resp, sizeof(resp), "%sUpgrade: websocket\r\nConnection: keep-alive\r\n%s\r\n", head,
             acc);
    ck_assert_int_eq(check_text(resp, accept, err, sizeof(err)), -1);
    snprintf(resp, sizeof(resp), "%sUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", head);
    ck_assert_int_eq(check_text(resp, accept, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "Sec-WebSocket-Accept is missing"));
    snprintf(resp, sizeof(resp),
             "%sUpgrade: websocket\r\nConnection: Upgrade\r\n%s"
             "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
             head, acc);
    ck_assert_int_eq(check_text(resp, accept, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "extension"));
    /* a 200 is a refusal too */
    ck_assert_int_eq(
        check_text("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", accept, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "200 ok"));
}
END_TEST

/* A server frame made by hand (unmasked): first byte b0 (FIN | opcode). */
static size_t sframe(uint8_t *out, int b0, const void *p, size_t n)
{
    ck_assert_uint_le(n, 0xffff);
    size_t hl = 2;
    out[0] = (uint8_t)b0;
    if (n < 126) {
        out[1] = (uint8_t)n;
    } else {
        out[1] = 126;
        out[2] = (uint8_t)(n >> 8);
        out[3] = (uint8_t)n;
        hl = 4;
    }
    memcpy(out + hl, p, n);
    return hl + n;
}

static void expect_msg(net_ws *s, int opcode, const char *data, size_t len)
{
    net_ws_msg m;
    ck_assert_int_eq(net_ws_read(s, &m), 1);
    ck_assert_int_eq(m.opcode, opcode);
    ck_assert_uint_eq(m.len, len);
    ck_assert_int_eq(memcmp(m.data, data, len), 0);
}

/* `from` closes with code (if it has not yet), `to` echoes: both are done. */
static void close_handshake(net_ws *from, net_ws *to, int code)
{
    net_ws_msg m;
    ck_assert_int_eq(net_ws_close(from, code, "bye"), 0);
    pass(from, to);
    ck_assert_int_eq(net_ws_read(to, &m), NET_WS_CLOSED);
    ck_assert_int_eq(net_ws_peer_close_code(to), code);
    ck_assert(net_ws_closing(to));
    pass(to, from);
    ck_assert_int_eq(net_ws_read(from, &m), NET_WS_CLOSED);
    ck_assert_int_eq(net_ws_peer_close_code(from), code);
}

START_TEST(test_conversation)
{
    /* the handshake, through both sides' code */
    char req[512], accept[NET_WS_ACCEPT_LEN + 1], err[200], answer[NET_WS_HANDSHAKE_MAX];
    net_ws_client_request(req, sizeof(req), "127.0.0.1:1", "/sockets/events/x", NULL, accept);
    answer_for(req, answer);
    ck_assert_int_eq(check_text(answer, accept, err, sizeof(err)), 0);
    net_ws *c = net_ws_new_client(NULL), *s = net_ws_new(NULL);
    net_ws_msg m;
    /* client -> server: masked text and binary, read by the server */
    ck_assert_int_eq(net_ws_write(c, NET_WS_TEXT, (const uint8_t *)"hello", 5), 0);
    rt_buf *b = NULL;
    net_ws_take_output(c, &b);
    ck_assert(rt_buf_data(b)[1] & 0x80); /* the mask bit */
    ck_assert(memmem(rt_buf_data(b), rt_buf_len(b), "hello", 5) == NULL);
    net_ws_input(s, rt_buf_data(b), rt_buf_len(b));
    rt_buf_unref(b);
    expect_msg(s, NET_WS_TEXT, "hello", 5);
    ck_assert_int_eq(net_ws_write(c, NET_WS_BINARY, (const uint8_t *)"\0\1\2", 3), 0);
    pass(c, s);
    expect_msg(s, NET_WS_BINARY, "\0\1\2", 3);
    /* server -> client, big enough for a 16-bit length */
    char big[1000];
    memset(big, 'z', sizeof(big));
    ck_assert_int_eq(net_ws_write(s, NET_WS_BINARY, (const uint8_t *)big, sizeof(big)), 0);
    ck_assert_int_eq(net_ws_write(s, NET_WS_TEXT, (const uint8_t *)"{}", 2), 0);
    pass(s, c);
    expect_msg(c, NET_WS_BINARY, big, sizeof(big));
    expect_msg(c, NET_WS_TEXT, "{}", 2);
    /* server -> client fragments, a ping between them, UTF-8 cut across them */
    uint8_t f[64];
    size_t n = sframe(f, NET_WS_TEXT, "caf\xc3", 4);
    n += sframe(f + n, 0x80 | NET_WS_PING, "p1", 2);
    n += sframe(f + n, 0x80, "\xa9!", 2);
    ck_assert_int_eq(net_ws_input(c, f, n), 0);
    expect_msg(c, NET_WS_TEXT, "caf\xc3\xa9!", 6);
    ck_assert_int_eq(net_ws_read(c, &m), 0);
    /* the client's pong (masked) reaches the server */
    pass(c, s);
    expect_msg(s, NET_WS_PONG, "p1", 2);
    /* client -> server fragments: masked frames with FIN cleared by hand */
    n = net_ws_client_frame(f, sizeof(f), NET_WS_BINARY, (const uint8_t *)"ab", 2);
    f[0] = NET_WS_BINARY; /* not final */
    size_t n2 = net_ws_client_frame(f + n, sizeof(f) - n, NET_WS_BINARY, (const uint8_t *)"cd", 2);
    f[n] = 0x80; /* a final continuation */
    ck_assert_int_eq(net_ws_input(s, f, n + n2), 0);
    expect_msg(s, NET_WS_BINARY, "abcd", 4);
    /* the client pings, the server's pong comes back */
    ck_assert_int_eq(net_ws_ping(c, (const uint8_t *)"c1", 2), 0);
    pass(c, s);
    ck_assert_int_eq(net_ws_read(s, &m), 0);
    pass(s, c);
    expect_msg(c, NET_WS_PONG, "c1", 2);
    /* the server closes, the client echoes, both are done */
    close_handshake(s, c, 1001);
    net_ws_free(c);
    net_ws_free(s);
}
END_TEST

START_TEST(test_client_closes)
{
    net_ws *c = net_ws_new_client(NULL), *s = net_ws_new(NULL);
    ck_assert_int_eq(net_ws_close(c, 1000, "bye"), 0);
    ck_assert_int_eq(net_ws_write(c, NET_WS_TEXT, (const uint8_t *)"x", 1), NET_WS_ESTATE);
    close_handshake(c, s, 1000);
    net_ws_free(c);
    net_ws_free(s);
}
END_TEST

START_TEST(test_masked_server_frame_refused)
{
    /* a client's (masked) frame sent to a client: a server must not mask */
    net_ws *c1 = net_ws_new_client(NULL), *c2 = net_ws_new_client(NULL);
    net_ws_write(c1, NET_WS_TEXT, (const uint8_t *)"x", 1);
    pass(c1, c2);
    net_ws_msg m;
    ck_assert_int_eq(net_ws_read(c2, &m), NET_WS_EPROTO);
    ck_assert_int_eq(net_ws_close_code(c2), 1002);
    ck_assert_ptr_nonnull(strstr(net_ws_error(c2), "must not be masked"));
    net_ws_free(c1);
    net_ws_free(c2);
    /* the scanner says the same */
    uint8_t f[32];
    net_ws_frame fr;
    size_t n = net_ws_client_frame(f, sizeof(f), NET_WS_TEXT, (const uint8_t *)"x", 1);
    ck_assert_int_eq(net_ws_client_scan(f, n, 100, &fr), -1002);
}
END_TEST

START_TEST(test_limits)
{
    /* a message over the limit, in two fragments: 1009 */
    net_ws_limits l = {.message_bytes = 8};
    net_ws *c = net_ws_new_client(&l);
    uint8_t f[64];
    size_t n = sframe(f, NET_WS_BINARY, "12345", 5);
    n += sframe(f + n, 0x80, "6789", 4);
    net_ws_input(c, f, n);
    net_ws_msg m;
    ck_assert_int_eq(net_ws_read(c, &m), NET_WS_EPROTO);
    ck_assert_int_eq(net_ws_close_code(c), 1009);
    net_ws_free(c);
    /* invalid UTF-8 from the server: 1007 */
    c = net_ws_new_client(NULL);
    n = sframe(f, 0x80 | NET_WS_TEXT, "\xff", 1);
    net_ws_input(c, f, n);
    ck_assert_int_eq(net_ws_read(c, &m), NET_WS_EPROTO);
    ck_assert_int_eq(net_ws_close_code(c), 1007);
    net_ws_free(c);
    /* input is bounded */
    c = net_ws_new_client(NULL);
    uint8_t *big = calloc(1, NET_WS_INPUT_MAX + 1);
    ck_assert_int_eq(net_ws_input(c, big, NET_WS_INPUT_MAX + 1), NET_WS_EFULL);
    free(big);
    net_ws_free(c);
}
END_TEST

/* ------------------------------------------------ the stream, split anywhere --- */

typedef struct stream {
    uint8_t p[2048];
    size_t len, frames_at; /* where the frames start, after the 101 */
} stream;

/* What a server sends: its 101, then text, a fragmented text with a ping
 * between the pieces, a 300-byte binary (16-bit length), a close. */
static void make_stream(stream *st, char accept[NET_WS_ACCEPT_LEN + 1])
{
    char req[512], answer[NET_WS_HANDSHAKE_MAX];
    net_ws_client_request(req, sizeof(req), "h", "/sockets/events/x", NULL, accept);
    st->len = answer_for(req, answer);
    memcpy(st->p, answer, st->len);
    st->frames_at = st->len;
    net_ws *s = net_ws_new(NULL);
    uint8_t bin[300];
    for (size_t i = 0; i < sizeof(bin); i++)
        bin[i] = (uint8_t)i;
    net_ws_write(s, NET_WS_TEXT, (const uint8_t *)"{\"index\":0}", 11);
    rt_buf *b = NULL;
    net_ws_take_output(s, &b);
    memcpy(st->p + st->len, rt_buf_data(b), rt_buf_len(b));
    st->len += rt_buf_len(b);
    rt_buf_unref(b);
    st->len += sframe(st->p + st->len, NET_WS_TEXT, "frag", 4);
    st->len += sframe(st->p + st->len, 0x80 | NET_WS_PING, "", 0);
    st->len += sframe(st->p + st->len, 0x80, "ment \xc3\xa9", 7);
    st->len += sframe(st->p + st->len, 0x80 | NET_WS_BINARY, bin, sizeof(bin));
    net_ws_close(s, 1000, "done");
    net_ws_take_output(s, &b);
    memcpy(st->p + st->len, rt_buf_data(b), rt_buf_len(b));
    st->len += rt_buf_len(b);
    rt_buf_unref(b);
    net_ws_free(s);
}

typedef struct reader {
    hr_parser *hr;
    net_ws *ws;
    const char *accept;
    char log[256];
} reader;

/* Feed bytes as a client's socket would: the answer first, then frames;
 * what comes out is logged ("T11 T11 B300 C1000"). */
static void feed(reader *r, const uint8_t *p, size_t n)
{
    if (r->hr != NULL) {
        bool done;
        ssize_t used = hr_feed(r->hr, p, n, &done);
        ck_assert_int_ge(used, 0);
        if (!done) {
            ck_assert_int_eq(used, (ssize_t)n);
            return;
        }
        char err[200];
        ck_assert_int_eq(net_ws_client_check(hr_response(r->hr), r->accept, err, sizeof(err)), 0);
        hr_free(r->hr);
        r->hr = NULL;
        p += used;
        n -= (size_t)used;
    }
    if (n == 0)
        return;
    ck_assert_int_eq(net_ws_input(r->ws, p, n), 0);
    net_ws_msg m;
    int got;
    while ((got = net_ws_read(r->ws, &m)) == 1) {
        size_t at = strlen(r->log);
        snprintf(r->log + at, sizeof(r->log) - at, "%c%zu ", m.opcode == NET_WS_TEXT ? 'T' : 'B',
                 m.len);
    }
    if (got == NET_WS_CLOSED) {
        size_t at = strlen(r->log);
        snprintf(r->log + at, sizeof(r->log) - at, "C%d", net_ws_peer_close_code(r->ws));
    }
    ck_assert_int_ge(got, NET_WS_CLOSED);
}

/* A reader with net_ws_client_scan: frames as they lie in the buffer. */
static void scan_all(uint8_t *buf, size_t *len, char *log, size_t cap)
{
    size_t at = 0;
    net_ws_frame f;
    ssize_t n;
    while ((n = net_ws_client_scan(buf + at, *len - at, 1 << 20, &f)) > 0) {
        size_t l = strlen(log);
        snprintf(log + l, cap - l, "%d%s%zu ", f.opcode, f.fin ? "." : "+", f.len);
        at += (size_t)n;
    }
    ck_assert_int_eq(n, 0);
    memmove(buf, buf + at, *len - at);
    *len -= at;
}

START_TEST(test_split_everywhere)
{
    stream st;
    char accept[NET_WS_ACCEPT_LEN + 1];
    make_stream(&st, accept);
    const char *want = "T11 T11 B300 C1000";
    const char *want_scan = "1.11 1+4 9.0 0.7 2.300 8.6 ";
    for (size_t k = 0; k <= st.len; k++) {
        reader r = {hr_new(NULL), net_ws_new_client(NULL), accept, ""};
        feed(&r, st.p, k);
        feed(&r, st.p + k, st.len - k);
        ck_assert_msg(strcmp(r.log, want) == 0, "split at %zu: %s", k, r.log);
        /* the ping was answered and the close echoed, in that order, masked */
        net_ws *s = net_ws_new(NULL);
        pass(r.ws, s);
        net_ws_msg m;
        expect_msg(s, NET_WS_PONG, "", 0);
        ck_assert_int_eq(net_ws_read(s, &m), NET_WS_CLOSED);
        ck_assert_int_eq(net_ws_peer_close_code(s), 1000);
        net_ws_free(s);
        net_ws_free(r.ws);
        ck_assert_ptr_null(r.hr);
        /* the scanner, over the frames */
        if (k < st.frames_at)
            continue;
        uint8_t buf[sizeof(st.p)];
        size_t len = k - st.frames_at;
        char log[256] = "";
        memcpy(buf, st.p + st.frames_at, len);
        scan_all(buf, &len, log, sizeof(log));
        memcpy(buf + len, st.p + k, st.len - k);
        len += st.len - k;
        scan_all(buf, &len, log, sizeof(log));
        ck_assert_msg(strcmp(log, want_scan) == 0, "scan split at %zu: %s", k, log);
        ck_assert_uint_eq(len, 0);
    }
    /* a byte at a time */
    reader r = {hr_new(NULL), net_ws_new_client(NULL), accept, ""};
    for (size_t i = 0; i < st.len; i++)
        feed(&r, st.p + i, 1);
    ck_assert_str_eq(r.log, want);
    net_ws_free(r.ws);
}
END_TEST

START_TEST(test_scan_rules)
{
    uint8_t f[80000];
    net_ws_frame fr;
    /* incomplete: 0, with the size once the header is in */
    size_t n = sframe(f, 0x80 | NET_WS_TEXT, "hello", 5);
    ck_assert_int_eq(net_ws_client_scan(f, 1, 100, &fr), 0);
    ck_assert_uint_eq(fr.size, 0);
    ck_assert_int_eq(net_ws_client_scan(f, n - 1, 100, &fr), 0);
    ck_assert_uint_eq(fr.size, n);
    ck_assert_int_eq(net_ws_client_scan(f, n, 100, &fr), (ssize_t)n);
    ck_assert(fr.fin && fr.opcode == NET_WS_TEXT && fr.len == 5 && fr.data == f + 2);
    /* the 64-bit length form */
    memset(f, 'a', sizeof(f));
    uint8_t h[NET_WS_HEADER_MAX];
    size_t hl = net_ws_frame_header(h, NET_WS_BINARY, 70000);
    memcpy(f, h, hl);
    ck_assert_int_eq(net_ws_client_scan(f, 9, 1 << 20, &fr), 0);
    ck_assert_int_eq(net_ws_client_scan(f, 100, 1 << 20, &fr), 0);
    ck_assert_uint_eq(fr.size, 70010);
    ck_assert_int_eq(net_ws_client_scan(f, 70010, 1 << 20, &fr), 70010);
    ck_assert_int_eq(net_ws_client_scan(f, 70010, 69999, &fr), -1009);
    /* refusals */
    const struct {
        uint8_t b[4];
        size_t n;
    } bad[] = {
        {{0xc1, 0x00}, 2},             /* RSV1 */
        {{0x93, 0x00}, 2},             /* opcode 3 */
        {{0x8b, 0x00}, 2},             /* opcode 0xb */
        {{0x09, 0x00}, 2},             /* a fragmented ping */
        {{0x89, 0x7e, 0x00, 0x7e}, 4}, /* a ping over 125 bytes */
        {{0x81, 0x7e, 0x00, 0x05}, 4}, /* 5 in the 16-bit form */
        {{0x81, 0x85}, 2},             /* masked */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(net_ws_client_scan(bad[i].b, bad[i].n, 1 << 20, &fr) == -1002, "case %zu", i);
    uint8_t l64[10] = {0x82, 0x7f, 0, 0, 0, 0, 0, 0, 0x01, 0x00}; /* 256 in the 64-bit form */
    ck_assert_int_eq(net_ws_client_scan(l64, 10, 1 << 20, &fr), -1002);
}
END_TEST

START_TEST(test_frame_writer)
{
    uint8_t f[200];
    /* what net_ws_client_frame writes, the server's engine reads */
    net_ws *s = net_ws_new(NULL);
    size_t n = net_ws_client_frame(f, sizeof(f), NET_WS_TEXT, (const uint8_t *)"{\"type\":1}", 10);
    ck_assert_uint_eq(n, 2 + 4 + 10);
    ck_assert_int_eq(net_ws_input(s, f, n), 0);
    expect_msg(s, NET_WS_TEXT, "{\"type\":1}", 10);
    uint8_t code[2] = {0x03, 0xe8}; /* 1000 */
    n = net_ws_client_frame(f, sizeof(f), NET_WS_CLOSE, code, 2);
    ck_assert_int_eq(net_ws_input(s, f, n), 0);
    net_ws_msg m;
    ck_assert_int_eq(net_ws_read(s, &m), NET_WS_CLOSED);
    ck_assert_int_eq(net_ws_peer_close_code(s), 1000);
    net_ws_free(s);
    /* too small a buffer, a control frame too long, no such opcode */
    ck_assert_uint_eq(net_ws_client_frame(f, 15, NET_WS_TEXT, (const uint8_t *)"0123456789", 10),
                      0);
    ck_assert_uint_eq(net_ws_client_frame(f, 16, NET_WS_TEXT, (const uint8_t *)"0123456789", 10),
                      16);
    ck_assert_uint_eq(net_ws_client_frame(f, sizeof(f), NET_WS_PING, f, 126), 0);
    ck_assert_uint_eq(net_ws_client_frame(f, sizeof(f), 3, f, 1), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ws_client");
    TCase *t = tcase_create("client");
    tcase_add_test(t, test_request_rfc_key);
    tcase_add_test(t, test_handshake);
    tcase_add_test(t, test_bad_answers);
    tcase_add_test(t, test_conversation);
    tcase_add_test(t, test_client_closes);
    tcase_add_test(t, test_masked_server_frame_refused);
    tcase_add_test(t, test_limits);
    tcase_add_test(t, test_split_everywhere);
    tcase_add_test(t, test_scan_rules);
    tcase_add_test(t, test_frame_writer);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
