/*
 * ws_client.h - the client's side of the WebSocket handshake (RFC 6455
 * 4.1): the upgrade request, and the check of the server's answer read
 * with http_resp.h. Pure. After the check, a net_ws_new_client session
 * (ws.h) reads the server's frames and masks ours.
 */
#ifndef NET_WS_CLIENT_H
#define NET_WS_CLIENT_H

#include "net/http_resp.h"
#include "net/ws.h"

#include <stddef.h>
#include <stdint.h>

/* The request for `path` ("/sockets/events/ID?...") on `host` ("127.0.0.1:
 * 8000"), with extra header lines ("Name: v\r\n", or NULL), and a fresh
 * random key, whose accept value goes to accept (for the check). The
 * length written (NUL-terminated), or NET_WS_EINVAL when cap is too small. */
int net_ws_client_request(char *out, size_t cap, const char *host, const char *path,
                          const char *extra, char accept[NET_WS_ACCEPT_LEN + 1]);

/* Is r the server's yes: 101, Upgrade: websocket, Connection: upgrade, the
 * accept value for our key, no extension or subprotocol we did not ask
 * for? 0, or -1 with one line in err (a refusal's status and detail). */
int net_ws_client_check(const hr_resp *r, const char *accept, char *err, size_t errlen);

#endif
