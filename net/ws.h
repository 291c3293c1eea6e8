/*
 * ws.h - the server side of WebSocket (RFC 6455) over memory buffers.
 *
 * Pure: bytes in, messages out, no sockets. net_ws_handshake checks an
 * upgrade request and writes the 101 answer (no subprotocols, no
 * extensions: a permessage-deflate offer is simply not echoed). Then a
 * net_ws session reads the client's frames: the connection feeds what it
 * reads (after TLS, if any) to net_ws_input and calls net_ws_read until it
 * returns 0, getting whole messages (fragments joined, text checked to be
 * UTF-8) and pongs. Pings are answered and a close is echoed by the
 * session itself; a peer that breaks the protocol gets a close frame with
 * the RFC's code (1002 framing, 1007 bad UTF-8, 1009 too big) and that
 * session is over.
 *
 * Sending: server frames are not masked, so a frame is a 2-, 4- or 10-byte
 * header and the payload as it is. net_ws_frame_header writes the header,
 * and the connection sends (header, shared payload) in one writev, the
 * payload an rt_buf serialized once for every subscriber. The frames the
 * session makes (pongs, closes, net_ws_ping, net_ws_write) wait in its
 * output, taken like net_tls_take_output.
 *
 * The write-ordering rule: the output only ever holds whole frames. After
 * every call on a session, take its output and queue it for the socket
 * before queueing any frame of your own, never between one of your
 * headers and its payload. Once net_ws_closing is true the close frame is
 * in the output: queue no frame of your own after it.
 *
 * Keep-alive is the caller's: net_ws_ping on a timer, and any NET_WS_PONG
 * from net_ws_read counts as the answer. Errors are sticky: every later
 * call returns the same code; net_ws_error says what happened in one line.
 */
#ifndef NET_WS_H
#define NET_WS_H

#include "net/http_parse.h"
#include "runtime/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Our codes: the -3000 range of runtime/err.h, described by rt_strerror. */
enum {
    NET_WS_CLOSED = -3001, /* the close handshake is over: send the output, close the socket */
    NET_WS_EPROTO = -3002, /* the peer broke the protocol: the close frame is in the output */
    NET_WS_EFULL = -3003,  /* more than NET_WS_INPUT_MAX bytes of input not read yet */
    NET_WS_ESTATE = -3004, /* a frame queued after our close frame */
    NET_WS_ENOMEM = -3005, /* from net_ws_read: over, with a 1011 close if it fit; else retry */
    NET_WS_EINVAL = -3006,
};

/* Opcodes (RFC 6455 5.2). */
enum {
    NET_WS_TEXT = 0x1,
    NET_WS_BINARY = 0x2,
    NET_WS_CLOSE = 0x8,
    NET_WS_PING = 0x9,
    NET_WS_PONG = 0xa,
};

#define NET_WS_INPUT_MAX     (128u << 10) /* as NET_TLS_INPUT_MAX */
#define NET_WS_MESSAGE_MAX   (1u << 20)   /* the default message limit */
#define NET_WS_HANDSHAKE_MAX 256          /* room for net_ws_handshake's answer */
#define NET_WS_HEADER_MAX    10

/* Check an upgrade request: GET, HTTP/1.1, Upgrade: websocket, Connection:
 * upgrade, Sec-WebSocket-Version: 13, a Sec-WebSocket-Key of 16 bytes.
 * Returns 101 with the whole "HTTP/1.1 101 Switching Protocols" answer in
 * out, to send as it is; or the status to refuse with (400, or 426 for
 * another version), a one-line reason in err and in out the header lines
 * the refusal must carry ("" or "Sec-WebSocket-Version: 13\r\n"). out is
 * NUL-terminated, *outlen bytes long; NET_WS_EINVAL when cap is under
 * NET_WS_HANDSHAKE_MAX or an argument is NULL. */
int net_ws_handshake(const hp_req *r, char *out, size_t cap, size_t *outlen, char *err,
                     size_t errlen);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key (at most 64 bytes): the
 * base64 SHA-1 of the key and the RFC's GUID, NUL-terminated. 0, or
 * NET_WS_EINVAL for an empty or longer key. Clients check the answer with it. */
#define NET_WS_ACCEPT_LEN 28
int net_ws_accept_key(const char *key, char out[NET_WS_ACCEPT_LEN + 1]);

typedef struct net_ws_limits {
    size_t message_bytes; /* one message, its fragments together; default 1 MiB (1009 beyond) */
} net_ws_limits;

/* One per connection, used by one thread at a time. NULL limits: the
 * defaults. NULL on allocation failure. */
typedef struct net_ws net_ws;
net_ws *net_ws_new(const net_ws_limits *l);
/* The client's side of a session (after net_ws_client_check): its frames
 * are masked, the server's must not be (1002 otherwise); the rest as for
 * the server's side. Not for net_ws_frame_header, whose frames are a
 * server's. */
net_ws *net_ws_new_client(const net_ws_limits *l);
void net_ws_free(net_ws *s);

/* Bytes read from the socket (copied). NET_WS_EFULL past NET_WS_INPUT_MAX;
 * NET_WS_CLOSED once nothing more is read. */
int net_ws_input(net_ws *s, const uint8_t *data, size_t len);

typedef struct net_ws_msg {
    int opcode;          /* NET_WS_TEXT (valid UTF-8), NET_WS_BINARY or NET_WS_PONG */
    const uint8_t *data; /* the session's, valid until the next call on it */
    size_t len;
} net_ws_msg;

/* The next message: 1 with *m (call again: more may be ready), 0 when more
 * input is needed, NET_WS_CLOSED once the peer's close has come and ours
 * is queued, or an error. Messages still come after net_ws_close, until
 * the peer's close. */
int net_ws_read(net_ws *s, net_ws_msg *m);

/* The header of an unfragmented, unmasked frame (NET_WS_TEXT, NET_WS_BINARY,
 * or a control frame of at most 125 bytes) with payload_len bytes: returns
 * its length (2, 4 or 10), 0 for a frame that cannot be. */
size_t net_ws_frame_header(uint8_t out[NET_WS_HEADER_MAX], int opcode, size_t payload_len);

/* Queue a frame in the output, copying data: a text (UTF-8, unchecked) or
 * binary message, or a ping of at most 125 bytes. NET_WS_ESTATE once
 * net_ws_closing. */
int net_ws_write(net_ws *s, int opcode, const uint8_t *data, size_t len);
int net_ws_ping(net_ws *s, const uint8_t *data, size_t len);
/* Queue our close frame: code 1000-1003, 1007-1014 or 3000-4999 with a
 * UTF-8 reason (NULL: none) of at most 123 bytes, or code 0 and no reason
 * for an empty close. Then read on until NET_WS_CLOSED (with a deadline:
 * the peer may never answer). Again once closing: 0, nothing queued. */
int net_ws_close(net_ws *s, int code, const char *reason);

/* The frames waiting to be sent, as one buffer whose reference the caller
 * owns (rt_buf_unref once written), or *out = NULL when there are none.
 * NET_WS_ENOMEM leaves them queued. */
int net_ws_take_output(net_ws *s, rt_buf **out);
size_t net_ws_pending_output(const net_ws *s);

/* Our close frame is queued (net_ws_close, an echo, a protocol error). */
bool net_ws_closing(const net_ws *s);
/* The code of the close we queued and of the peer's: 0 before there is
 * one, 1005 for a close without a code. For logs and metrics. */
int net_ws_close_code(const net_ws *s);
int net_ws_peer_close_code(const net_ws *s);
/* The last error in one line ("" when none). */
const char *net_ws_error(const net_ws *s);

#endif
