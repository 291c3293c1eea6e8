/*
 * ws_client.c - the client's side of the WebSocket handshake. See
 * ws_client.h.
 */
#include "net/ws_client.h"
#include "runtime/err.h"
#include "runtime/uuid.h"

#include <mbedtls/base64.h>

#include <stdio.h>
#include <string.h>
#include <strings.h>

int net_ws_client_request(char *out, size_t cap, const char *host, const char *path,
                          const char *extra, char accept[NET_WS_ACCEPT_LEN + 1])
{
    rt_uuid u; /* 16 random bytes, as the RFC wants */
    uint8_t key[32];
    size_t klen;
    if (rt_uuid_v4(&u) != 0 ||
        mbedtls_base64_encode(key, sizeof(key), &klen, u.b, sizeof(u.b)) != 0 ||
        net_ws_accept_key((const char *)key, accept) != 0)
        return NET_WS_EINVAL;
    int n = snprintf(out, cap,
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
                     path, host, (const char *)key, extra != NULL ? extra : "");
    return n < 0 || (size_t)n >= cap ? NET_WS_EINVAL : n;
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
