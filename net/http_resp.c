/*
 * http_resp.c - HTTP/1.1 responses on llhttp. See http_resp.h.
 *
 * Header strings go, NUL-terminated and names lower-cased, into one buffer
 * bounded by the header limit (offsets while it grows, pointers once the
 * headers are complete); the body into another, bounded by the body limit.
 */
#include "net/http_resp.h"
#include "runtime/grow.h"

#include <llhttp.h>

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DEF_HEADER_BYTES = 64 << 10, DEF_BODY_BYTES = 64 << 20 };

struct hr_parser {
    llhttp_t ll;
    llhttp_settings_t cb;
    hr_limits lim;
    bool head; /* the next response answers a HEAD */
    char *hb;  /* (name\0 value\0)* */
    size_t hlen, hcap;
    size_t *offs; /* name, value offsets per header */
    size_t noffs, offs_cap;
    const char **ptrs; /* names then values, once the headers are in */
    size_t ptrs_cap;
    uint8_t *body;
    size_t blen, bcap;
    bool started, done, failed;
    hr_resp resp;
    char err[160];
};

static int fail(hr_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(hr_parser *p, const char *fmt, ...)
{
    if (!p->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err, sizeof(p->err), fmt, ap);
        va_end(ap);
        p->failed = true;
    }
    return -1;
}

static hr_parser *of(llhttp_t *ll)
{
    return ll->data;
}

static int put(hr_parser *p, const char *at, size_t len, bool lower)
{
    if (p->hlen + len + 1 > p->lim.header_bytes)
        return fail(p, "response headers over %zu bytes", p->lim.header_bytes);
    if (rt_grow((void **)&p->hb, &p->hcap, p->hlen + len + 1, 1, 1024) != 0)
        return fail(p, "out of memory");
    for (size_t i = 0; i < len; i++)
        p->hb[p->hlen + i] = lower ? (char)tolower((unsigned char)at[i]) : at[i];
    p->hlen += len;
    return 0;
}

static int mark(hr_parser *p)
{
    if (rt_grow((void **)&p->offs, &p->offs_cap, p->noffs + 1, sizeof(size_t), 32) != 0)
        return fail(p, "out of memory");
    p->offs[p->noffs++] = p->hlen;
    return 0;
}

static int on_begin(llhttp_t *ll)
{
    hr_parser *p = of(ll);
    p->started = true;
    return 0;
}

/* noffs even: between headers; odd: in a name (its value not started). */
static int on_field(llhttp_t *ll, const char *at, size_t len)
{
    hr_parser *p = of(ll);
    if (p->noffs % 2 == 0 && mark(p) < 0) /* a name starts */
        return -1;
    return put(p, at, len, true);
}

/* The name ends (NUL) and its value starts. */
static int value_start(hr_parser *p)
{
    return put(p, "", 1, false) < 0 || mark(p) < 0 ? -1 : 0;
}

static int on_value(llhttp_t *ll, const char *at, size_t len)
{
    hr_parser *p = of(ll);
    if (p->noffs % 2 == 1 && value_start(p) < 0)
        return -1;
    return put(p, at, len, false);
}

static int on_value_done(llhttp_t *ll)
{
    hr_parser *p = of(ll);
    if (p->noffs % 2 == 1 && value_start(p) < 0) /* an empty value */
        return -1;
    return put(p, "", 1, false);
}

static int on_headers(llhttp_t *ll)
{
    hr_parser *p = of(ll);
    size_t n = p->noffs / 2;
    if (rt_grow((void **)&p->ptrs, &p->ptrs_cap, 2 * n + 1, sizeof(char *), 16) != 0)
        return fail(p, "out of memory");
    for (size_t i = 0; i < n; i++) {
        p->ptrs[i] = p->hb + p->offs[2 * i];
        p->ptrs[n + i] = p->hb + p->offs[2 * i + 1];
    }
    p->resp.status = ll->status_code;
    p->resp.names = p->ptrs;
    p->resp.values = p->ptrs + n;
    p->resp.nheaders = n;
    return p->head ? 1 : 0; /* 1: no body, whatever the headers say */
}

static int on_body(llhttp_t *ll, const char *at, size_t len)
{
    hr_parser *p = of(ll);
    if (p->blen + len > p->lim.body_bytes)
        return fail(p, "response body over %zu bytes", p->lim.body_bytes);
    if (rt_grow((void **)&p->body, &p->bcap, p->blen + len, 1, 4096) != 0)
        return fail(p, "out of memory");
    memcpy(p->body + p->blen, at, len);
    p->blen += len;
    return 0;
}

static int on_complete(llhttp_t *ll)
{
    hr_parser *p = of(ll);
    p->resp.body = p->blen > 0 ? p->body : NULL;
    p->resp.body_len = p->blen;
    p->resp.keep_alive = llhttp_should_keep_alive(ll) != 0 && ll->upgrade == 0;
    p->done = true;
    return HPE_PAUSED; /* one response per hr_feed */
}

hr_parser *hr_new(const hr_limits *l)
{
    hr_parser *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->lim.header_bytes = l != NULL && l->header_bytes ? l->header_bytes : DEF_HEADER_BYTES;
    p->lim.body_bytes = l != NULL && l->body_bytes ? l->body_bytes : DEF_BODY_BYTES;
    llhttp_settings_init(&p->cb);
    p->cb.on_message_begin = on_begin;
    p->cb.on_header_field = on_field;
    p->cb.on_header_value = on_value;
    p->cb.on_header_value_complete = on_value_done;
    p->cb.on_headers_complete = on_headers;
    p->cb.on_body = on_body;
    p->cb.on_message_complete = on_complete;
    llhttp_init(&p->ll, HTTP_RESPONSE, &p->cb);
    p->ll.data = p;
    return p;
}

void hr_free(hr_parser *p)
{
    if (p == NULL)
        return;
    free(p->hb);
    free(p->offs);
    free(p->ptrs);
    free(p->body);
    free(p);
}

void hr_expect_head(hr_parser *p)
{
    p->head = true;
}

/* Forget the response handed out: the next one starts. */
static void next(hr_parser *p)
{
    p->done = p->started = p->head = false;
    p->hlen = p->noffs = p->blen = 0;
    memset(&p->resp, 0, sizeof(p->resp));
    llhttp_resume(&p->ll);
}

ssize_t hr_feed(hr_parser *p, const uint8_t *data, size_t len, bool *done)
{
    *done = false;
    if (p->failed)
        return -1;
    if (p->done) {
        if (p->ll.upgrade)
            return fail(p, "the connection switched protocols: no more HTTP on it");
        next(p);
    }
    llhttp_errno_t e = llhttp_execute(&p->ll, (const char *)data, len);
    size_t used = len;
    if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE)
        used = (size_t)((const uint8_t *)llhttp_get_error_pos(&p->ll) - data);
    else if (e != HPE_OK)
        return p->failed ? -1 : fail(p, "malformed response: %s", llhttp_get_error_reason(&p->ll));
    *done = p->done;
    return (ssize_t)used;
}

int hr_finish(hr_parser *p)
{
    if (p->failed)
        return -1;
    if (p->done || !p->started)
        return 0;
    llhttp_errno_t e = llhttp_finish(&p->ll);
    if ((e == HPE_OK || e == HPE_PAUSED) && p->done)
        return 1;
    return fail(p, "the connection ended in the middle of a response");
}

const hr_resp *hr_response(const hr_parser *p)
{
    return p->done ? &p->resp : NULL;
}

const char *hr_header(const hr_resp *r, const char *name)
{
    for (size_t i = 0; r != NULL && i < r->nheaders; i++)
        if (strcmp(r->names[i], name) == 0)
            return r->values[i];
    return NULL;
}

const char *hr_error(const hr_parser *p)
{
    return p->err;
}
