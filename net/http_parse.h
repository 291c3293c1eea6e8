/*
 * http_parse.h - reading HTTP/1.1 requests off a byte stream, strictly.
 *
 * Pure: bytes in, whole requests out, no I/O. llhttp does the parsing (in
 * its strict mode: Content-Length with Transfer-Encoding, a repeated
 * Content-Length, bad chunk sizes are errors); on top of it this module
 * bounds what a peer controls (header bytes, header count, body bytes),
 * refuses a bare LF wherever HTTP wants CRLF (outside bodies), and stops
 * after each request, so that pipelined requests are handled one at a
 * time and a bad one never takes the good ones before it along.
 *
 * A request is handed out only once it is complete and valid: an error
 * anywhere in it (status 400, 413 or 431, with a one-line reason) means
 * nothing of it was. After an error the stream cannot be resynchronized:
 * the connection answers and closes.
 */
#ifndef NET_HTTP_PARSE_H
#define NET_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct hp_limits {
    size_t header_bytes; /* request line + headers; default 16 KiB (431 beyond) */
    size_t headers;      /* header lines; default 100 (431 beyond) */
    size_t body_bytes;   /* default 16 MiB (413 beyond) */
} hp_limits;

typedef struct hp_header {
    const char *name; /* lower case */
    const char *value;
} hp_header;

typedef struct hp_req {
    const char *method; /* "GET", ... */
    const char *target; /* as sent: "/api/x?y=1" */
    hp_header *headers;
    size_t nheaders;
    const uint8_t *body; /* NULL when there is none */
    size_t body_len;
    bool keep_alive; /* the connection stays open after the answer */
    bool upgrade;    /* it asked for another protocol (Upgrade) */
    int minor;       /* HTTP/1.<minor> */
} hp_req;

typedef struct hp_parser hp_parser;

/* NULL limits: the defaults. NULL on allocation failure. */
hp_parser *hp_new(const hp_limits *l);
void hp_free(hp_parser *p);

/* Parse up to len bytes. Returns how many were consumed; *done says that a
 * request is complete (hp_request gives it, valid until the next hp_feed),
 * and the bytes after it are for the next request. -1 on an error:
 * hp_status and hp_reason say what to answer before closing. */
ssize_t hp_feed(hp_parser *p, const uint8_t *data, size_t len, bool *done);
const hp_req *hp_request(const hp_parser *p);

/* The headers of a request are in, it asked "Expect: 100-continue" and its
 * body has not come yet: the server answers 100 Continue (once). */
bool hp_wants_continue(hp_parser *p);

/* The headers of the request being read are in (its body may not be). */
bool hp_headers_in(const hp_parser *p);

/* The peer closed its side: -1 if that cut a request short. */
int hp_finish(hp_parser *p);

int hp_status(const hp_parser *p);
const char *hp_reason(const hp_parser *p);

/* A header's value (name in lower case), or NULL. */
const char *hp_header_get(const hp_req *r, const char *name);

#endif
