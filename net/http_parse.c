/*
 * http_parse.c - strict HTTP/1.1 request reading on llhttp. See
 * http_parse.h.
 *
 * The request line and header strings go, NUL-terminated, into one buffer
 * bounded by the header limit (offsets while it grows, pointers once the
 * headers are complete); the body into another, bounded by the body limit.
 * llhttp pauses at the end of every message, so one hp_feed hands out at
 * most one request.
 */
#include "net/http_parse.h"
#include "runtime/grow.h"

#include <llhttp.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { DEF_HEADER_BYTES = 16 << 10, DEF_HEADERS = 100, DEF_BODY_BYTES = 16 << 20 };

typedef struct span { /* a body's bytes inside the buffer being fed */
    const uint8_t *at;
    size_t len;
    bool chunked; /* chunk data: CRLF must follow */
} span;

struct hp_parser {
    llhttp_t ll;
    llhttp_settings_t cb;
    hp_limits lim;
    /* the request being read */
    char *hb; /* target\0 (name\0 value\0)* */
    size_t hlen, hcap, counted;
    size_t *offs; /* per header: name offset, value offset */
    size_t noffs, offs_cap;
    bool any, url;   /* a string was put (the first is the target, from on_url) */
    bool in_value;   /* the last string appended was a value */
    bool headers_in; /* headers complete */
    bool expect_continue, continued;
    uint8_t *body;
    size_t blen, bcap;
    bool done;
    hp_req req;
    /* the feed in progress: where its bodies are (for the CRLF check) */
    span *spans;
    size_t nspans, spans_cap;
    uint8_t prev;    /* the last byte outside a body */
    int need_crlf;   /* bytes of the CRLF that must follow chunk data */
    bool value_done; /* a header value ended: the next line needs a name */
    int status;
    char reason[160];
};

static int fail(hp_parser *p, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(hp_parser *p, int status, const char *fmt, ...)
{
    if (p->status == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->reason, sizeof(p->reason), fmt, ap);
        va_end(ap);
        p->status = status;
    }
    return -1;
}

static hp_parser *of(llhttp_t *ll)
{
    return ll->data;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    return rt_grow(p, cap, need, elem, 16);
}

/* Append to the string being read (a new one when `fresh`). */
static int put(hp_parser *p, const char *at, size_t len, bool fresh)
{
    p->counted += len;
    if (p->counted > p->lim.header_bytes)
        return fail(p, 431, "the request line and headers exceed %zu bytes", p->lim.header_bytes);
    if (fresh && p->any)
        p->hlen++; /* past the previous string's NUL */
    p->any = true;
    if (grow((void **)&p->hb, &p->hcap, p->hlen + len + 1, 1) < 0)
        return fail(p, 500, "out of memory");
    memcpy(p->hb + p->hlen, at, len);
    p->hlen += len;
    p->hb[p->hlen] = '\0';
    return 0;
}

static int on_begin(llhttp_t *ll)
{
    hp_parser *p = of(ll);
    p->hlen = p->counted = p->noffs = p->blen = 0;
    p->in_value = p->headers_in = p->expect_continue = p->continued = false;
    p->any = p->url = false;
    p->done = false;
    return 0;
}

static int on_url(llhttp_t *ll, const char *at, size_t len)
{
    hp_parser *p = of(ll);
    if (p->noffs > 0)
        return fail(p, 400, "malformed request: no request target");
    p->url = true;
    return put(p, at, len, false);
}

/* Where the next fresh string will start. */
static size_t next_start(const hp_parser *p)
{
    return p->any ? p->hlen + 1 : 0;
}

/* RFC 9110 token characters: what a header name is made of (no space
 * before the colon, a classic smuggling vector). */
static bool tchar(unsigned char c)
{
    /* bit c of these: ALPHA, DIGIT and !#$%&'*+-.^_`|~ (one test a byte:
     * every header name goes through here) */
    static const uint64_t below64 = 0x03ff6cfa00000000ULL, from64 = 0x57ffffffc7fffffeULL;
    return c < 128 && ((c < 64 ? below64 >> c : from64 >> (c - 64)) & 1) != 0;
}

/* Trailers (header lines after a chunked body) are checked and counted,
 * not kept: the request's headers already point into the buffer. */
static int trailer(hp_parser *p, size_t len)
{
    p->counted += len;
    if (p->counted > p->lim.header_bytes)
        return fail(p, 431, "the request line, headers and trailers exceed %zu bytes",
                    p->lim.header_bytes);
    return 0;
}

static int on_field(llhttp_t *ll, const char *at, size_t len)
{
    hp_parser *p = of(ll);
    p->value_done = false;
    for (size_t i = 0; i < len; i++)
        if (!tchar((unsigned char)at[i]))
            return fail(p, 400, "malformed request: invalid character in a header name");
    if (p->headers_in)
        return trailer(p, len);
    bool fresh = p->noffs == 0 || p->in_value;
    if (fresh) {
        if (p->noffs / 2 >= p->lim.headers)
            return fail(p, 431, "more than %zu header lines", p->lim.headers);
        if (grow((void **)&p->offs, &p->offs_cap, p->noffs + 2, sizeof(size_t)) < 0)
            return fail(p, 500, "out of memory");
        p->offs[p->noffs++] = next_start(p);
        p->offs[p->noffs++] = 0;
        p->in_value = false;
        p->counted += 4; /* ": " and CRLF */
    }
    return put(p, at, len, fresh);
}

static int on_value(llhttp_t *ll, const char *at, size_t len)
{
    hp_parser *p = of(ll);
    if (p->headers_in)
        return trailer(p, len);
    if (p->noffs == 0 || p->value_done)
        return fail(p, 400, "malformed request: a header line without a name");
    bool fresh = !p->in_value;
    if (fresh) {
        p->offs[p->noffs - 1] = next_start(p);
        p->in_value = true;
    }
    return put(p, at, len, fresh);
}

static int on_value_done(llhttp_t *ll)
{
    of(ll)->value_done = true;
    return 0;
}

/* A Host header's value: no spaces, controls or URI delimiters. */
static bool host_ok(const char *h)
{
    for (; *h; h++) {
        unsigned char c = (unsigned char)*h;
        if (c <= ' ' || c >= 0x7f || c == '/' || c == '?' || c == '#' || c == '@' || c == '\\')
            return false;
    }
    return true;
}

/* RFC 9112: an HTTP/1.1 request has exactly one valid Host; the only
 * transfer coding understood is chunked, alone (the body is unreadable
 * otherwise, and reading it as plain would desynchronize the stream). */
static int check_framing(hp_parser *p, const hp_req *r)
{
    size_t hosts = 0, tes = 0;
    for (size_t i = 0; i < r->nheaders; i++) {
        if (strcmp(r->headers[i].name, "host") == 0) {
            hosts++;
            if (!host_ok(r->headers[i].value))
                return fail(p, 400, "malformed request: an invalid Host header");
        } else if (strcmp(r->headers[i].name, "transfer-encoding") == 0) {
            if (++tes > 1 || strcasecmp(r->headers[i].value, "chunked") != 0)
                return fail(p, 400,
                            "malformed request: only the chunked transfer coding is understood");
        }
    }
    if (r->minor >= 1 && hosts != 1)
        return fail(p, 400, "malformed request: HTTP/1.1 wants exactly one Host header");
    return 0;
}

static int on_headers(llhttp_t *ll)
{
    hp_parser *p = of(ll);
    if (ll->http_major != 1)
        return fail(p, 505, "only HTTP/1.x is spoken here");
    if (!p->url)
        return fail(p, 400, "malformed request: no request target");
    if (p->noffs > 0 && !p->in_value) { /* a name with an empty value */
        if (put(p, "", 0, true) < 0)
            return -1;
        p->offs[p->noffs - 1] = p->hlen;
    }
    hp_req *r = &p->req;
    free(r->headers);
    r->nheaders = p->noffs / 2;
    r->headers = calloc(r->nheaders ? r->nheaders : 1, sizeof(hp_header));
    if (r->headers == NULL)
        return fail(p, 500, "out of memory");
    for (size_t i = 0; i < r->nheaders; i++) {
        char *name = p->hb + p->offs[2 * i];
        if (name[0] == '\0')
            return fail(p, 400, "malformed request: a header line without a name");
        for (char *c = name; *c != '\0'; c++) /* tokens are ASCII (tchar) */
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c | 0x20);
        r->headers[i] = (hp_header){name, p->hb + p->offs[2 * i + 1]};
    }
    r->target = p->hb;
    r->method = llhttp_method_name((llhttp_method_t)ll->method);
    r->minor = ll->http_minor;
    r->body = NULL;
    r->body_len = 0;
    r->upgrade = ll->upgrade != 0;
    if ((ll->flags & F_CONTENT_LENGTH) && ll->content_length > p->lim.body_bytes)
        return fail(p, 413, "the body (%llu bytes) exceeds %zu bytes",
                    (unsigned long long)ll->content_length, p->lim.body_bytes);
    const char *expect = hp_header_get(r, "expect");
    if (expect != NULL) {
        if (strcasecmp(expect, "100-continue") != 0)
            return fail(p, 417, "Expect: only 100-continue is understood");
        p->expect_continue = true;
    }
    if (check_framing(p, r) < 0)
        return -1;
    p->headers_in = true;
    return 0;
}

static int on_body(llhttp_t *ll, const char *at, size_t len)
{
    hp_parser *p = of(ll);
    if (p->blen + len > p->lim.body_bytes)
        return fail(p, 413, "the body exceeds %zu bytes", p->lim.body_bytes);
    if (grow((void **)&p->body, &p->bcap, p->blen + len, 1) < 0 ||
        grow((void **)&p->spans, &p->spans_cap, p->nspans + 1, sizeof(span)) < 0)
        return fail(p, 500, "out of memory");
    memcpy(p->body + p->blen, at, len);
    p->blen += len;
    p->spans[p->nspans++] = (span){(const uint8_t *)at, len, (ll->flags & F_CHUNKED) != 0};
    return 0;
}

static int on_complete(llhttp_t *ll)
{
    hp_parser *p = of(ll);
    p->req.body = p->blen > 0 ? p->body : NULL;
    p->req.body_len = p->blen;
    p->req.keep_alive = llhttp_should_keep_alive(ll) != 0;
    p->done = true;
    return HPE_PAUSED;
}

hp_parser *hp_new(const hp_limits *l)
{
    hp_parser *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->lim = l != NULL ? *l : (hp_limits){0};
    if (p->lim.header_bytes == 0)
        p->lim.header_bytes = DEF_HEADER_BYTES;
    if (p->lim.headers == 0)
        p->lim.headers = DEF_HEADERS;
    if (p->lim.body_bytes == 0)
        p->lim.body_bytes = DEF_BODY_BYTES;
    llhttp_settings_init(&p->cb);
    p->cb.on_message_begin = on_begin;
    p->cb.on_url = on_url;
    p->cb.on_header_field = on_field;
    p->cb.on_header_value = on_value;
    p->cb.on_header_value_complete = on_value_done;
    p->cb.on_headers_complete = on_headers;
    p->cb.on_body = on_body;
    p->cb.on_message_complete = on_complete;
    llhttp_init(&p->ll, HTTP_REQUEST, &p->cb);
    p->ll.data = p;
    p->prev = '\n'; /* the stream starts as after a line */
    return p;
}

void hp_free(hp_parser *p)
{
    if (p == NULL)
        return;
    free(p->hb);
    free(p->offs);
    free(p->body);
    free(p->spans);
    free(p->req.headers);
    free(p);
}

/* Outside bodies, every LF must follow a CR, no line may start with
 * whitespace (obs-fold, a smuggling vector), and a chunk's data must be
 * followed by exactly CRLF (llhttp 8 skips those two bytes unread). */
static int check_crlf(hp_parser *p, const uint8_t *data, size_t n)
{
    size_t s = 0;
    for (size_t i = 0; i < n; i++) {
        while (s < p->nspans && data + i >= p->spans[s].at + p->spans[s].len)
            s++;
        if (s < p->nspans && data + i >= p->spans[s].at) {
            i = (size_t)(p->spans[s].at + p->spans[s].len - data) - 1;
            if (p->spans[s].chunked)
                p->need_crlf = 2;
            continue;
        }
        if (p->need_crlf == 0 && p->prev != '\n' && data[i] != '\n') {
            /* only LFs and what follows them matter: skip to the next LF */
            size_t end = s < p->nspans ? (size_t)(p->spans[s].at - data) : n;
            const uint8_t *lf = memchr(data + i, '\n', end - i);
            size_t j = lf != NULL ? (size_t)(lf - data) : end;
            p->prev = data[j - 1];
            i = j - 1;
            continue;
        }
        if (p->need_crlf > 0 && data[i] != (p->need_crlf == 2 ? '\r' : '\n'))
            return fail(p, 400, "malformed request: chunk data not followed by CRLF");
        if (p->need_crlf > 0)
            p->need_crlf--;
        if (data[i] == '\n' && p->prev != '\r')
            return fail(p, 400, "a bare LF where HTTP wants CRLF");
        if ((data[i] == ' ' || data[i] == '\t') && p->prev == '\n')
            return fail(p, 400, "malformed request: a line starts with whitespace (obs-fold)");
        p->prev = data[i];
    }
    return 0;
}

ssize_t hp_feed(hp_parser *p, const uint8_t *data, size_t len, bool *done)
{
    *done = false;
    if (p->status != 0)
        return -1;
    if (p->done) { /* the previous request was handed out: on to the next */
        p->done = false;
        llhttp_resume(&p->ll);
    }
    p->nspans = 0;
    llhttp_errno_t e = llhttp_execute(&p->ll, (const char *)data, len);
    if (e == HPE_PAUSED_UPGRADE) {
        /* an Upgrade the route did not take: the connection stays HTTP/1.1
         * (the protocol switch itself is the WebSocket layer's) */
        const char *at = llhttp_get_error_pos(&p->ll);
        llhttp_resume_after_upgrade(&p->ll);
        e = llhttp_execute(&p->ll, at, len - (size_t)((const uint8_t *)at - data));
    }
    size_t used = len;
    if (e == HPE_PAUSED) {
        used = (size_t)((const uint8_t *)llhttp_get_error_pos(&p->ll) - data);
    } else if (e == HPE_INVALID_VERSION) {
        if (p->status == 0)
            fail(p, 505, "only HTTP/1.x is spoken here");
        return -1;
    } else if (e != HPE_OK) {
        if (p->status == 0)
            fail(p, 400, "malformed request: %s", llhttp_get_error_reason(&p->ll));
        return -1;
    }
    if (check_crlf(p, data, used) < 0)
        return -1;
    *done = p->done;
    return (ssize_t)used;
}

const hp_req *hp_request(const hp_parser *p)
{
    return p->done && p->status == 0 ? &p->req : NULL;
}

bool hp_wants_continue(hp_parser *p)
{
    if (!p->headers_in || !p->expect_continue || p->continued || p->blen > 0 || p->done)
        return false;
    p->continued = true;
    return true;
}

bool hp_headers_in(const hp_parser *p)
{
    return p->headers_in && !p->done;
}

int hp_finish(hp_parser *p)
{
    if (p->status != 0)
        return -1;
    if (p->done)
        return 0;
    if (llhttp_finish(&p->ll) != HPE_OK || llhttp_message_needs_eof(&p->ll))
        return fail(p, 400, "the connection closed in the middle of a request");
    return 0;
}

int hp_status(const hp_parser *p)
{
    return p->status;
}

const char *hp_reason(const hp_parser *p)
{
    return p->reason;
}

const char *hp_header_get(const hp_req *r, const char *name)
{
    for (size_t i = 0; i < r->nheaders; i++)
        if (strcmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}
