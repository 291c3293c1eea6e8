/*
 * client.h - a client connection to a server of the API, on a libuv loop:
 * HTTP/1.1 requests one at a time over a kept-alive connection, and the
 * upgrade of that connection to a WebSocket. http:// or https:// (TLS with
 * the certificate verified unless the config says not, tls.h).
 *
 * The connection is made when a request needs it, and made again after
 * the server closes it, so a caller just asks. Each request gets exactly
 * one answer through cb.response: the response, or NULL and one line
 * saying why there is none (connect refused, TLS refused, cut, timed out,
 * a malformed answer; the connection is then closed). After
 * net_client_upgrade's 101 (checked: accept key, tokens), cb.response gets
 * the 101 and the connection carries WebSocket messages to cb.message,
 * until cb.ws_closed says how it ended (the server's close code, or 0 and
 * why). Pings are answered by the session; net_client_ws_idle_ms says how
 * long nothing came, for the caller's own keep-alive.
 *
 * Everything runs on the loop's thread: callbacks come from it, and the
 * calls must be made on it. A callback may call any function here, free
 * included.
 */
#ifndef NET_CLIENT_H
#define NET_CLIENT_H

#include "net/http_resp.h"
#include "net/tls.h"
#include "net/url.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct net_client_cb {
    void (*response)(void *ud, const hr_resp *r, const char *err);
    void (*message)(void *ud, const uint8_t *data, size_t len);
    void (*ws_closed)(void *ud, int code, const char *why);
} net_client_cb;

typedef struct net_client_opts {
    const net_url *url;
    net_tls_config *tls;  /* a client config (net_tls_client_config_new); needed for https */
    const char *api_key;  /* NULL: none; else X-Session-API-Key on every request */
    uint64_t timeout_ms;  /* connect + one request's answer; default 30 s */
    size_t message_bytes; /* a WebSocket message's limit; default 64 MiB */
    net_client_cb cb;
    void *ud;
} net_client_opts;

typedef struct net_client net_client;

/* NULL on allocation failure. The options are copied (url too). */
net_client *net_client_new(uv_loop_t *loop, const net_client_opts *o);
/* Close and free; no callback comes after. */
void net_client_free(net_client *c);

/* Send method path (the URL's prefix is put before it) with an optional
 * JSON body. One request at a time: -1 while one is unanswered or the
 * connection is a WebSocket. */
int net_client_request(net_client *c, const char *method, const char *path, const void *body,
                       size_t len);
/* Upgrade to a WebSocket on path (prefix put before it). */
int net_client_upgrade(net_client *c, const char *path);
/* A text message on the WebSocket. */
int net_client_ws_send(net_client *c, const void *text, size_t len);
int net_client_ws_ping(net_client *c);
/* Ms since the WebSocket last received anything (a pong included). */
uint64_t net_client_ws_idle_ms(const net_client *c);
/* Drop the connection now (a request in flight gets its error answer,
 * a WebSocket its ws_closed with code 0). */
void net_client_reset(net_client *c, const char *why);

/* REST requests made (each connection's reuse counted once per request). */
uint64_t net_client_requests(const net_client *c);

#endif
