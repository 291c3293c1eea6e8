/*
 * ws_client.h - the client's side of WebSocket (RFC 6455) over memory
 * buffers. Pure: bytes in, bytes out, no sockets.
 *
 * The handshake (4.1): net_ws_client_request writes the upgrade request
 * with a Sec-WebSocket-Key of 16 random bytes (the caller's, or fresh ones
 * from runtime/uuid's source). The answer, read with http_resp.h, is
 * checked by net_ws_client_check: 101, the Upgrade and Connection tokens,
 * the accept value (net_ws_accept_key), no extension or subprotocol that
 * was not asked for; a refusal's status and body go into the error.
 *
 * The session after it is ws.h's engine with the roles swapped,
 * net_ws_new_client: one engine for both sides, because the rules are the
 * same. It reads the server's frames (masked ones are a 1002), joins
 * fragments, checks that text is UTF-8 (1007), answers pings, echoes a
 * close, bounds the input and a message's size as the server's side does
 * (1009), and masks each of our frames with a fresh random key
 * (net_ws_write for text and binary, net_ws_ping, net_ws_close).
 *
 * For clients that read many sockets at line rate (`parley load`), two
 * helpers with no state and no copies: net_ws_client_scan finds the next
 * whole server frame in a buffer and points at its payload where it lies;
 * net_ws_client_frame writes one masked frame into the caller's memory.
 * They apply the framing rules, but join no fragments and check no UTF-8.
 */
#ifndef NET_WS_CLIENT_H
#define NET_WS_CLIENT_H

#include "net/http_resp.h"
#include "net/ws.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define NET_WS_KEY_BYTES 16

/* The request for `path` ("/sockets/events/ID?...") on `host` ("127.0.0.1:
 * 8000"), with extra header lines ("Name: v\r\n", or NULL), and a fresh
 * random key, whose accept value goes to accept (for the check). The
 * length written (NUL-terminated), or NET_WS_EINVAL when cap is too small. */
int net_ws_client_request(char *out, size_t cap, const char *host, const char *path,
                          const char *extra, char accept[NET_WS_ACCEPT_LEN + 1]);
/* The same with the caller's 16 random bytes as the key. */
int net_ws_client_request_key(char *out, size_t cap, const char *host, const char *path,
                              const char *extra, const uint8_t key[NET_WS_KEY_BYTES],
                              char accept[NET_WS_ACCEPT_LEN + 1]);

/* Is r the server's yes: 101, Upgrade: websocket, Connection: upgrade, the
 * accept value for our key, no extension or subprotocol we did not ask
 * for? 0, or -1 with one line in err (a refusal's status and detail). */
int net_ws_client_check(const hr_resp *r, const char *accept, char *err, size_t errlen);

typedef struct net_ws_frame {
    int opcode;          /* 0 (continuation), NET_WS_TEXT, NET_WS_BINARY, or a control frame */
    bool fin;            /* the last frame of its message */
    const uint8_t *data; /* the payload, inside the scanned buffer */
    size_t len;          /* the payload's length */
    size_t size;         /* the whole frame, header and payload; 0 until the header is in */
} net_ws_frame;

/* The server's frame at the front of p[0, n) whose payload is at most max
 * bytes: its size with *f; 0 when more bytes are needed (f->size says how
 * many the frame has, once its header is in); or minus the close code it
 * deserves: -1002 (masked, reserved bits, an unknown opcode, a control
 * frame fragmented or over 125 bytes, a length not in its shortest form),
 * -1009 (a payload over max). */
ssize_t net_ws_client_scan(const uint8_t *p, size_t n, size_t max, net_ws_frame *f);

/* One whole masked frame (NET_WS_TEXT, NET_WS_BINARY, or a control frame
 * of at most 125 bytes: a close's payload is the 2-byte code and the
 * reason) into out, with a fresh random mask. Its length (at most len +
 * 14), or 0 when it does not fit in cap or cannot be. */
size_t net_ws_client_frame(uint8_t *out, size_t cap, int opcode, const uint8_t *data, size_t len);

#endif
