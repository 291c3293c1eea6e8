/*
 * http_resp.h - reading HTTP/1.1 responses, for parley's clients (the
 * follower, `parley tail`, the load tools). Pure: bytes in, responses out.
 *
 * One hr_feed hands out at most one response (llhttp pauses at the end of
 * each), so pipelined answers are read in order. Bodies by Content-Length,
 * chunked, or (no length, HTTP/1.0 or Connection: close) up to the end of
 * the connection: call hr_finish at EOF to complete that one. A 101 ends
 * the response at its headers: what follows belongs to the new protocol
 * (the bytes hr_feed did not consume). Header and body sizes are bounded:
 * a server cannot make a client allocate without limit.
 */
#ifndef NET_HTTP_RESP_H
#define NET_HTTP_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct hr_limits {
    size_t header_bytes; /* status line and headers; default 64 KiB */
    size_t body_bytes;   /* default 64 MiB */
} hr_limits;

typedef struct hr_resp {
    int status;
    const char *const *names; /* lower-cased */
    const char *const *values;
    size_t nheaders;
    const uint8_t *body; /* NULL when empty */
    size_t body_len;
    bool keep_alive; /* the connection can carry the next request */
} hr_resp;

typedef struct hr_parser hr_parser;

hr_parser *hr_new(const hr_limits *l); /* NULL limits: the defaults */
void hr_free(hr_parser *p);

/* The next response answers a HEAD request (no body, whatever it says). */
void hr_expect_head(hr_parser *p);

/* Read up to len bytes: how many were consumed (the rest is the next
 * response's, or the new protocol's after a 101); *done when a response
 * is complete (hr_response gives it, valid until the next hr_feed). -1 on
 * a malformed or oversized response: hr_error says why; the connection is
 * not to be used again. */
ssize_t hr_feed(hr_parser *p, const uint8_t *data, size_t len, bool *done);
/* The connection ended: 1 if that completed a response read to its end,
 * 0 if nothing was in progress, -1 if a response was cut short. */
int hr_finish(hr_parser *p);
const hr_resp *hr_response(const hr_parser *p);
/* A header's value (name lower-case), or NULL. */
const char *hr_header(const hr_resp *r, const char *name);
const char *hr_error(const hr_parser *p);

#endif
