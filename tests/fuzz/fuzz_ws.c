/*
 * fuzz_ws.c - libFuzzer target for the WebSocket engine. The first byte
 * picks the mode: with its top bit set, the rest is an HTTP request for
 * net_ws_handshake (101 with a whole answer, or 400/426 with a one-line
 * reason); without, the rest is client frames, fed in pieces the byte
 * chooses, with a message limit it chooses. Frames must never crash or
 * overrun; messages stay within the limit, text is UTF-8 (checked here
 * independently), and what the session sends is whole unmasked frames,
 * ending with a close of the documented code once it fails or closes.
 */
#include "net/http_parse.h"
#include "net/ws.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decode code points: the slow, obvious way. */
static bool utf8_ok(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t c = p[i], min;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, c &= 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, c &= 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, c &= 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xc0) != 0x80)
                return false;
            c = c << 6 | (p[i + j] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

static void handshake(const uint8_t *data, size_t size)
{
    hp_parser *p = hp_new(NULL);
    bool done = false;
    if (p == NULL || hp_feed(p, data, size, &done) < 0 || !done) {
        hp_free(p);
        return;
    }
    char out[NET_WS_HANDSHAKE_MAX], err[200];
    size_t outlen = 0;
    int st = net_ws_handshake(hp_request(p), out, sizeof(out), &outlen, err, sizeof(err));
    if (outlen != strlen(out) || strchr(err, '\n') != NULL)
        abort();
    if (st == 101) {
        if (err[0] != '\0' || strncmp(out, "HTTP/1.1 101 Switching Protocols\r\n", 34) != 0 ||
            strstr(out, "\r\n\r\n") != out + outlen - 4)
            abort();
    } else if (st == 400 || st == 426) {
        if (err[0] == '\0' || strcmp(out, st == 426 ? "Sec-WebSocket-Version: 13\r\n" : "") != 0)
            abort();
    } else {
        abort();
    }
    hp_free(p);
}

/* What the session sent: whole, final, unmasked frames, control frames of
 * at most 125 bytes. Returns the last frame's close code (0 if the last is
 * not a close, 1005 for an empty one). */
static int check_output(net_ws *s)
{
    rt_buf *b = NULL;
    if (net_ws_take_output(s, &b) != 0)
        abort();
    if (b == NULL)
        return 0;
    const uint8_t *p = rt_buf_data(b);
    size_t n = rt_buf_len(b), at = 0;
    int code = 0;
    while (at < n) {
        if (n - at < 2 || (p[at] & 0xf0) != 0x80 || (p[at + 1] & 0x80) != 0)
            abort();
        int op = p[at] & 0x0f;
        size_t len = p[at + 1] & 0x7f, hl = 2;
        if (len == 126) {
            if (n - at < 4)
                abort();
            len = (size_t)p[at + 2] << 8 | p[at + 3];
            hl = 4;
        } else if (len == 127) {
            abort(); /* nothing here is that long */
        }
        if ((op >= 0x8 && len > 125) || n - at - hl < len)
            abort();
        code = op != 0x8 ? 0 : len == 0 ? 1005 : len >= 2 ? p[at + 2] << 8 | p[at + 3] : -1;
        at += hl + len;
    }
    rt_buf_unref(b);
    return code;
}

static void frames(const uint8_t *data, size_t size, uint8_t mode)
{
    size_t step = (size_t)(mode & 0x0f) * 13 + 1;
    net_ws_limits l = {.message_bytes = (mode & 0x70) != 0 ? (size_t)(mode & 0x70) * 8 : 0};
    net_ws *s = net_ws_new(&l);
    if (s == NULL)
        return;
    size_t limit = l.message_bytes != 0 ? l.message_bytes : NET_WS_MESSAGE_MAX;
    int r = 0;
    for (size_t at = 0; r == 0 && at < size;) {
        size_t n = size - at < step ? size - at : step;
        if ((r = net_ws_input(s, data + at, n)) != 0)
            break;
        at += n;
        net_ws_msg m;
        while ((r = net_ws_read(s, &m)) == 1) {
            if ((m.opcode == NET_WS_PONG && m.len > 125) || m.len > limit ||
                (m.opcode == NET_WS_TEXT && !utf8_ok(m.data, m.len)))
                abort();
            if (m.opcode != NET_WS_TEXT && m.opcode != NET_WS_BINARY && m.opcode != NET_WS_PONG)
                abort();
        }
        if (r == 0 && check_output(s) != 0) /* a close only comes with an error or the end */
            abort();
    }
    int code = check_output(s);
    if (r == NET_WS_EPROTO) {
        if ((code != 1002 && code != 1007 && code != 1009) || code != net_ws_close_code(s) ||
            strchr(net_ws_error(s), '\n') != NULL)
            abort();
    } else if (r == NET_WS_CLOSED) {
        if (code != net_ws_peer_close_code(s) || code != net_ws_close_code(s))
            abort();
    } else if (r != 0) {
        abort();
    }
    net_ws_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 0x80)
        handshake(data + 1, size - 1);
    else
        frames(data + 1, size - 1, data[0]);
    return 0;
}
