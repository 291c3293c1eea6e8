/*
 * test_http_parse.c - strict HTTP/1.1 request reading: whole requests out
 * of any split of the bytes, pipelining one request at a time, bodies by
 * length and chunked, 100-continue, and a 400/413/431/417 with nothing
 * handed out for each malformed, smuggling or oversized request.
 */
#include "net/http_parse.h"

#include "support_sync.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Feed all of s in pieces of `step` bytes (0: at once) until a request is
 * complete; returns the bytes consumed, or -1 (and then p says why). */
static ssize_t feed_req(hp_parser *p, const char *s, size_t step)
{
    size_t len = strlen(s), at = 0;
    while (at < len) {
        size_t n = step == 0 || len - at < step ? len - at : step;
        bool done;
        ssize_t used = hp_feed(p, (const uint8_t *)s + at, n, &done);
        if (used < 0)
            return -1;
        at += (size_t)used;
        if (done)
            return (ssize_t)at;
    }
    return (ssize_t)at;
}

static const char post[] = "POST /api/conversations/x/events/append?run=1 HTTP/1.1\r\n"
                           "Host: 127.0.0.1\r\n"
                           "Content-Type: application/json\r\n"
                           "X-Session-API-Key: k\r\n"
                           "Content-Length: 13\r\n"
                           "\r\n"
                           "{\"kind\":\"x\"}\n";

START_TEST(test_any_split)
{
    for (size_t step = 0; step <= 7; step++) {
        hp_parser *p = hp_new(NULL);
        ck_assert_int_eq(feed_req(p, post, step), (ssize_t)strlen(post));
        const hp_req *r = hp_request(p);
        ck_assert_ptr_nonnull(r);
        ck_assert_str_eq(r->method, "POST");
        ck_assert_str_eq(r->target, "/api/conversations/x/events/append?run=1");
        ck_assert_uint_eq(r->nheaders, 4);
        ck_assert_str_eq(hp_header_get(r, "x-session-api-key"), "k");
        ck_assert_str_eq(hp_header_get(r, "content-type"), "application/json");
        ck_assert_ptr_null(hp_header_get(r, "X-Session-API-Key")); /* names are lower case */
        ck_assert_uint_eq(r->body_len, 13);
        ck_assert(memcmp(r->body, "{\"kind\":\"x\"}\n", 13) == 0);
        ck_assert(r->keep_alive);
        ck_assert_int_eq(r->minor, 1);
        ck_assert_int_eq(hp_finish(p), 0);
        hp_free(p);
    }
}
END_TEST

START_TEST(test_pipelined)
{
    const char *two = "GET /alive HTTP/1.1\r\nHost: a\r\n\r\n"
                      "GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    hp_parser *p = hp_new(NULL);
    bool done;
    ssize_t n = hp_feed(p, (const uint8_t *)two, strlen(two), &done);
    ck_assert(done);
    ck_assert_int_eq(n, (ssize_t)strlen("GET /alive HTTP/1.1\r\nHost: a\r\n\r\n"));
    ck_assert_str_eq(hp_request(p)->target, "/alive");
    ck_assert_ptr_null(hp_request(p)->body);
    ssize_t m = hp_feed(p, (const uint8_t *)two + n, strlen(two) - (size_t)n, &done);
    ck_assert(done);
    ck_assert_int_eq(n + m, (ssize_t)strlen(two));
    ck_assert_str_eq(hp_request(p)->target, "/health");
    ck_assert(!hp_request(p)->keep_alive);
    hp_free(p);
}
END_TEST

START_TEST(test_chunked)
{
    const char *req = "POST /e HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "5\r\nhello\r\n1;ext=1\r\n,\r\n6\r\n world\r\n0\r\n\r\n";
    for (size_t step = 0; step <= 3; step++) {
        hp_parser *p = hp_new(NULL);
        ck_assert_int_eq(feed_req(p, req, step), (ssize_t)strlen(req));
        const hp_req *r = hp_request(p);
        ck_assert_uint_eq(r->body_len, 12);
        ck_assert(memcmp(r->body, "hello, world", 12) == 0);
        hp_free(p);
    }
    /* trailers are read, not kept: the headers stay as they were */
    const char *trailers = "POST /e HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                           "2\r\nhi\r\n0\r\nX-Checksum: 1\r\nX-More: 2\r\n\r\n";
    for (size_t step = 0; step <= 1; step++) {
        hp_parser *p = hp_new(NULL);
        ck_assert_int_eq(feed_req(p, trailers, step), (ssize_t)strlen(trailers));
        const hp_req *r = hp_request(p);
        ck_assert_uint_eq(r->nheaders, 2);
        ck_assert_str_eq(hp_header_get(r, "host"), "a");
        ck_assert_ptr_null(hp_header_get(r, "x-checksum"));
        ck_assert_uint_eq(r->body_len, 2);
        hp_free(p);
    }
}
END_TEST

START_TEST(test_http10_and_close)
{
    hp_parser *p = hp_new(NULL);
    ck_assert_int_gt(feed_req(p, "GET / HTTP/1.0\r\n\r\n", 0), 0);
    ck_assert(!hp_request(p)->keep_alive);
    ck_assert_int_eq(hp_request(p)->minor, 0);
    hp_free(p);
    p = hp_new(NULL);
    ck_assert_int_gt(feed_req(p, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 0), 0);
    ck_assert(hp_request(p)->keep_alive);
    hp_free(p);
}
END_TEST

START_TEST(test_continue)
{
    const char *head = "POST /e HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\n"
                       "Content-Length: 2\r\n\r\n";
    hp_parser *p = hp_new(NULL);
    bool done;
    ck_assert_int_eq(hp_feed(p, (const uint8_t *)head, strlen(head), &done), (ssize_t)strlen(head));
    ck_assert(!done);
    ck_assert(hp_wants_continue(p));
    ck_assert(!hp_wants_continue(p)); /* once */
    ck_assert_int_eq(hp_feed(p, (const uint8_t *)"{}", 2, &done), 2);
    ck_assert(done);
    ck_assert_uint_eq(hp_request(p)->body_len, 2);
    hp_free(p);
    p = hp_new(NULL);
    ck_assert_int_eq(
        feed_req(p, "POST /e HTTP/1.1\r\nHost: t\r\nExpect: 200-ok\r\nContent-Length: 0\r\n\r\n",
                 0),
        -1);
    ck_assert_int_eq(hp_status(p), 417);
    hp_free(p);
}
END_TEST

/* Each of these is refused with the status, and nothing is handed out. */
static void refused(const char *req, int status, const hp_limits *l, size_t step)
{
    hp_parser *p = hp_new(l);
    ssize_t n = feed_req(p, req, step);
    ck_assert_msg(n == -1, "accepted (%zd): %s", n, req);
    ck_assert_ptr_null(hp_request(p));
    ck_assert_msg(hp_status(p) == status, "%d (%s), not %d: %s", hp_status(p), hp_reason(p), status,
                  req);
    ck_assert(strlen(hp_reason(p)) > 0 && strchr(hp_reason(p), '\n') == NULL);
    bool done;
    ck_assert_int_eq(hp_feed(p, (const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18, &done), -1);
    hp_free(p);
}

START_TEST(test_smuggling)
{
    for (size_t step = 0; step <= 1; step++) {
        refused(
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
            "0\r\n\r\n",
            400, NULL, step);
        refused("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
                400, NULL, step);
        refused("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
                400, NULL, step);
        refused("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400, NULL, step);
        refused("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
                "chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
                400, NULL, step);
        refused("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked, identity\r\n\r\n",
                400, NULL, step);
        refused("GET / HTTP/1.1\nHost: a\r\n\r\n", 400, NULL, step);
        refused("GET / HTTP/1.1\r\nHost: a\n\r\n", 400, NULL, step);
        refused("GET / HTTP/1.1\r\nHost: a\r\n\n", 400, NULL, step);
        refused("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400, NULL, step);
        refused("GET / HTTP/1.1\r\nHost: t\r\n folded: a\r\n\r\n", 400, NULL, step);
        refused("GET\x01 / HTTP/1.1\r\nHost: t\r\n\r\n", 400, NULL, step);
        /* found by the fuzzer (a value with no name after a request line
         * with no version): refused, and nothing read out of bounds */
        refused("CONNECT \r\n:    \r0\nCont::\x97    t:    h - e  d/.\r\n\r\n", 505, NULL, step);
    }
}
END_TEST

START_TEST(test_limits)
{
    hp_limits l = {.header_bytes = 200, .headers = 4, .body_bytes = 10};
    char big[400];
    snprintf(big, sizeof(big), "GET /%0250d HTTP/1.1\r\nHost: t\r\n\r\n", 0);
    refused(big, 431, &l, 0);
    refused(big, 431, &l, 7);
    refused("GET / HTTP/1.1\r\nHost: t\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\ne: 5\r\n\r\n", 431, &l,
            0);
    refused("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n", 413, &l, 0);
    refused("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
            "chunked\r\n\r\n6\r\nhello,\r\n5\r\nworld\r\n",
            413, &l, 0);
    /* at the limits exactly: accepted */
    hp_parser *p = hp_new(&l);
    ck_assert_int_gt(
        feed_req(
            p, "POST / HTTP/1.1\r\nHost: t\r\na: 1\r\nb: 2\r\nContent-Length: 10\r\n\r\n0123456789",
            0),
        0);
    ck_assert_uint_eq(hp_request(p)->body_len, 10);
    hp_free(p);
}
END_TEST

START_TEST(test_framing)
{
    for (size_t step = 0; step <= 1; step++) {
        /* chunk data must end with CRLF, not any two bytes */
        refused("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                "2\r\n{}XX0\r\n\r\n",
                400, NULL, step);
        refused("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 400, NULL, step);
        refused("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                "0\r\n\r\n",
                400, NULL, step);
        refused("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                400, NULL, step);
        refused("GET / HTTP/1.1\r\nHost: t\r\n: v\r\n\r\n", 400, NULL, step);
        refused("GET / HTTP/1.1\r\nHost: t\r\nA: 1\r\n\tfolded\r\n\r\n", 400, NULL, step);
        refused("GET / HTTP/1.1\r\n\r\n", 400, NULL, step);
        refused("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, NULL, step);
        refused("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, NULL, step);
        refused("GET / HTTP/3.0\r\nHost: t\r\n\r\n", 505, NULL, step);
    }
    /* HTTP/1.0 needs no Host; chunk data split anywhere still checks CRLF */
    hp_parser *p = hp_new(NULL);
    ck_assert_int_gt(feed_req(p, "GET / HTTP/1.0\r\n\r\n", 0), 0);
    hp_free(p);
    p = hp_new(NULL);
    const char *ok = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "5\r\nhello\r\n1;x=y\r\n!\r\n0\r\n\r\n";
    ck_assert_int_eq(feed_req(p, ok, 1), (ssize_t)strlen(ok));
    ck_assert_uint_eq(hp_request(p)->body_len, 6);
    hp_free(p);
    /* an Upgrade nobody takes leaves the connection speaking HTTP/1.1 */
    p = hp_new(NULL);
    const char *up = "GET / HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: foo\r\n\r\n";
    ck_assert_int_eq(feed_req(p, up, 0), (ssize_t)strlen(up));
    ck_assert(hp_request(p)->upgrade);
    const char *next = "GET /b HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert_int_eq(feed_req(p, next, 0), (ssize_t)strlen(next));
    ck_assert_str_eq(hp_request(p)->target, "/b");
    ck_assert(!hp_request(p)->upgrade);
    hp_free(p);
}
END_TEST

/* req is read whole if ok, else refused with 400 (byte b, in `where`). */
static void read_iff(const char *req, bool ok, int b, const char *where)
{
    if (!ok) {
        refused(req, 400, NULL, 0);
        return;
    }
    hp_parser *p = hp_new(NULL);
    ck_assert_msg(feed_req(p, req, 0) > 0, "byte 0x%02x refused in %s", b, where);
    hp_free(p);
}

/* Every byte in a header name, and in a Host value: a name is RFC 9110
 * token characters only (ALPHA, DIGIT, !#$%&'*+-.^_`|~), and a Host has
 * no space, control, non-ASCII or URI delimiter (/?#@\\). */
START_TEST(test_each_byte)
{
    for (int b = 1; b < 256; b++) {
        if (b == ':' || b == '\r' || b == '\n')
            continue; /* they end the name or the line */
        bool token = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
                     strchr("!#$%&'*+-.^_`|~", b) != NULL;
        char req[80];
        snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: t\r\nX%cY: v\r\n\r\n", b);
        read_iff(req, token, b, "a name");
        snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: a%cb\r\n\r\n", b);
        read_iff(req, b > ' ' && b < 0x7f && strchr("/?#@\\", b) == NULL, b, "a Host");
    }
}
END_TEST

START_TEST(test_cut_short)
{
    hp_parser *p = hp_new(NULL);
    const char *cut = "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nab";
    ck_assert_int_eq(feed_req(p, cut, 0), (ssize_t)strlen(cut));
    ck_assert_ptr_null(hp_request(p));
    ck_assert_int_eq(hp_finish(p), -1);
    ck_assert_int_eq(hp_status(p), 400);
    hp_free(p);
    p = hp_new(NULL); /* between requests, a close is no error */
    ck_assert_int_eq(hp_finish(p), 0);
    hp_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http_parse");
    TCase *tc = tcase_create("requests");
    tcase_add_test(tc, test_any_split);
    tcase_add_test(tc, test_pipelined);
    tcase_add_test(tc, test_chunked);
    tcase_add_test(tc, test_http10_and_close);
    tcase_add_test(tc, test_continue);
    tcase_add_test(tc, test_smuggling);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_framing);
    tcase_add_test(tc, test_cut_short);
    tcase_add_test(tc, test_each_byte);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
