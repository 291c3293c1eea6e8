/*
 * ws_client.c - the client's side of WebSocket: the handshake, and the
 * stateless frame helpers for clients that read at line rate. See
 * ws_client.h; the session engine is ws.c's.
 */
#include "net/ws_client.h"
#include "runtime/err.h"
#include "runtime/uuid.h"

#include <mbedtls/base64.h>

#include <stdio.h>
#include <string.h>
#include <strings.h>

int net_ws_client_request_key(char *out, size_t cap, const char *host, const char *path,
                              const char *extra, const uint8_t key[NET_WS_KEY_BYTES],
                              char accept[NET_WS_ACCEPT_LEN + 1])
{
    uint8_t k64[32];
    size_t klen;
    if (out == NULL || host == NULL || path == NULL || key == NULL || accept == NULL ||
        mbedtls_base64_encode(k64, sizeof(k64), &klen, key, NET_WS_KEY_BYTES) != 0 ||
        net_ws_accept_key((const char *)k64, accept) != 0)
        return NET_WS_EINVAL;
    int n = snprintf(out, cap,
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
                     path, host, (const char *)k64, extra != NULL ? extra : "");
    return n < 0 || (size_t)n >= cap ? NET_WS_EINVAL : n;
}

int net_ws_client_request(char *out, size_t cap, const char *host, const char *path,
                          const char *extra, char accept[NET_WS_ACCEPT_LEN + 1])
{
    rt_uuid u; /* random bytes, as the RFC wants (but for the version's 6 bits) */
    if (rt_uuid_v4(&u) != 0)
        return NET_WS_EINVAL;
    return net_ws_client_request_key(out, cap, host, path, extra, u.b, accept);
}

/* Does the comma-separated header value hold token (any case)? */
static bool has_token(const char *v, const char *token)
{
    size_t tl = strlen(token);
    while (v != NULL && *v != '\0') {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        size_t n = strcspn(v, ",");
        size_t e = n;
        while (e > 0 && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e == tl && strncasecmp(v, token, tl) == 0)
            return true;
        v += n;
    }
    return false;
}

int net_ws_client_check(const hr_resp *r, const char *accept, char *err, size_t errlen)
{
    const char *got = hr_header(r, "sec-websocket-accept");
    if (r->status != 101) {
        rt_say(err, errlen, "the server refused the upgrade: %d %.*s", r->status,
               (int)(r->body_len > 160 ? 160 : r->body_len),
               r->body != NULL ? (const char *)r->body : "");
        return -1;
    }
    if (!has_token(hr_header(r, "upgrade"), "websocket") ||
        !has_token(hr_header(r, "connection"), "upgrade")) {
        rt_say(err, errlen, "a 101 without Upgrade: websocket and Connection: Upgrade");
        return -1;
    }
    if (got == NULL || strcmp(got, accept) != 0) {
        rt_say(err, errlen, "Sec-WebSocket-Accept is %s, not %s", got != NULL ? got : "missing",
               accept);
        return -1;
    }
    if (hr_header(r, "sec-websocket-extensions") != NULL ||
        hr_header(r, "sec-websocket-protocol") != NULL) {
        rt_say(err, errlen, "the server chose an extension or subprotocol nobody asked for");
        return -1;
    }
    return 0;
}

ssize_t net_ws_client_scan(const uint8_t *p, size_t n, size_t max, net_ws_frame *f)
{
    *f = (net_ws_frame){0};
    if (n < 2)
        return 0;
    int op = p[0] & 0x0f;
    bool control = op >= NET_WS_CLOSE;
    uint64_t len = p[1] & 0x7f;
    size_t hl = 2;
    if ((p[0] & 0x70) != 0 || (p[1] & 0x80) != 0 || (op > NET_WS_BINARY && !control) ||
        op > NET_WS_PONG)
        return -1002; /* reserved bits, a mask, an unknown opcode */
    if (len == 126) {
        if (n < 4)
            return 0;
        len = (uint64_t)p[2] << 8 | p[3];
        hl = 4;
        if (len < 126)
            return -1002;
    } else if (len == 127) {
        if (n < 10)
            return 0;
        len = 0;
        for (int i = 2; i < 10; i++)
            len = len << 8 | p[i];
        hl = 10;
        if (len <= 0xffff || len >> 63 != 0)
            return -1002;
    }
    bool fin = (p[0] & 0x80) != 0;
    if (control && (!fin || len > 125))
        return -1002;
    if (len > max)
        return -1009;
    *f = (net_ws_frame){op, fin, p + hl, (size_t)len, hl + (size_t)len};
    return n < f->size ? 0 : (ssize_t)f->size;
}

size_t net_ws_client_frame(uint8_t *out, size_t cap, int opcode, const uint8_t *data, size_t len)
{
    uint8_t h[NET_WS_HEADER_MAX];
    size_t hl = net_ws_frame_header(h, opcode, len);
    rt_uuid u;
    if (hl == 0 || out == NULL || (data == NULL && len > 0) || cap < hl + 4 || cap - hl - 4 < len ||
        rt_uuid_v4(&u) != 0)
        return 0;
    memcpy(out, h, hl);
    out[1] |= 0x80;
    memcpy(out + hl, u.b, 4); /* the mask: bytes 0-3, all random */
    for (size_t i = 0; i < len; i++)
        out[hl + 4 + i] = (uint8_t)(data[i] ^ u.b[i % 4]);
    return hl + 4 + len;
}
