/*
 * test_http_resp.c - reading HTTP/1.1 responses: lengths, chunks, bodies
 * to the end of the connection, pipelined answers, HEAD, 101 and what
 * follows it, limits and malformed responses, and every split of the input.
 */
#include "net/http_resp.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Feed all of s in pieces of `step` bytes; the responses read, at most max.
 * The bytes left over after the last complete response go to *rest. */
static int feed_all(hr_parser *p, const char *s, size_t step, int *statuses, char bodies[][64],
                    int max, size_t *rest)
{
    size_t len = strlen(s), at = 0;
    int n = 0;
    *rest = len;
    while (at < len) {
        size_t piece = len - at < step ? len - at : step;
        bool done;
        ssize_t used = hr_feed(p, (const uint8_t *)s + at, piece, &done);
        if (used < 0)
            return -1;
        at += (size_t)used;
        if (done) {
            const hr_resp *r = hr_response(p);
            ck_assert_int_lt(n, max);
            statuses[n] = r->status;
            snprintf(bodies[n], 64, "%.*s", (int)r->body_len, r->body ? (const char *)r->body : "");
            n++;
            *rest = len - at;
            if (r->status == 101)
                break;
        } else {
            ck_assert_msg(used > 0, "no progress at byte %zu", at);
        }
    }
    return n;
}

START_TEST(test_lengths_and_chunks)
{
    const char *in =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n"
        "HTTP/1.1 204 No Content\r\n\r\n"
        "HTTP/1.1 404 Not Found\r\ncontent-length: 5\r\nX-Empty:\r\n\r\nnope!";
    for (size_t step = 1; step <= strlen(in); step++) {
        hr_parser *p = hr_new(NULL);
        int st[8];
        char b[8][64];
        size_t rest;
        ck_assert_int_eq(feed_all(p, in, step, st, b, 8, &rest), 4);
        ck_assert_int_eq(st[0], 200);
        ck_assert_str_eq(b[0], "{}");
        ck_assert_int_eq(st[1], 201);
        ck_assert_str_eq(b[1], "abcde");
        ck_assert_int_eq(st[2], 204);
        ck_assert_str_eq(b[2], "");
        ck_assert_int_eq(st[3], 404);
        ck_assert_str_eq(b[3], "nope!");
        const hr_resp *r = hr_response(p);
        ck_assert_str_eq(hr_header(r, "content-length"), "5");
        ck_assert_str_eq(hr_header(r, "x-empty"), "");
        ck_assert_ptr_null(hr_header(r, "content-type"));
        ck_assert(r->keep_alive);
        ck_assert_int_eq(hr_finish(p), 0);
        hr_free(p);
    }
}
END_TEST

START_TEST(test_to_the_end_and_cut)
{
    hr_parser *p = hr_new(NULL);
    const char *in = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it";
    bool done;
    ck_assert_int_eq(hr_feed(p, (const uint8_t *)in, strlen(in), &done), (ssize_t)strlen(in));
    ck_assert(!done);
    ck_assert_int_eq(hr_finish(p), 1);
    const hr_resp *r = hr_response(p);
    ck_assert_int_eq(r->body_len, 9);
    ck_assert(!r->keep_alive);
    hr_free(p);

    p = hr_new(NULL);
    in = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort";
    ck_assert_int_eq(hr_feed(p, (const uint8_t *)in, strlen(in), &done), (ssize_t)strlen(in));
    ck_assert_int_eq(hr_finish(p), -1);
    ck_assert_ptr_nonnull(strstr(hr_error(p), "ended in the middle"));
    hr_free(p);
}
END_TEST

START_TEST(test_head_and_upgrade)
{
    hr_parser *p = hr_new(NULL);
    hr_expect_head(p);
    const char *in = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nHTTP/1.1 200 OK\r\n"
                     "Content-Length: 1\r\n\r\nx";
    int st[4];
    char b[4][64];
    size_t rest;
    ck_assert_int_eq(feed_all(p, in, strlen(in), st, b, 4, &rest), 2);
    ck_assert_str_eq(b[0], "");
    ck_assert_str_eq(b[1], "x");
    hr_free(p);

    p = hr_new(NULL);
    in = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x02hi";
    ck_assert_int_eq(feed_all(p, in, strlen(in), st, b, 4, &rest), 1);
    ck_assert_int_eq(st[0], 101);
    ck_assert_uint_eq(rest, 4); /* the first frame: the new protocol's */
    ck_assert_str_eq(hr_header(hr_response(p), "sec-websocket-accept"),
                     "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    bool done;
    ck_assert_int_eq(hr_feed(p, (const uint8_t *)"x", 1, &done), -1);
    hr_free(p);
}
END_TEST

START_TEST(test_limits_and_malformed)
{
    hr_limits l = {.header_bytes = 64, .body_bytes = 8};
    hr_parser *p = hr_new(&l);
    const char *in =
        "HTTP/1.1 200 OK\r\nX-Long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaa\r\n\r\n";
    bool done;
    ck_assert_int_eq(hr_feed(p, (const uint8_t *)in, strlen(in), &done), -1);
    ck_assert_ptr_nonnull(strstr(hr_error(p), "headers over 64 bytes"));
    hr_free(p);
    p = hr_new(&l);
    in = "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n123456789";
    ck_assert_int_eq(hr_feed(p, (const uint8_t *)in, strlen(in), &done), -1);
    ck_assert_ptr_nonnull(strstr(hr_error(p), "body over 8 bytes"));
    hr_free(p);
    const char *bad[] = {"HTTP/1.1 2x0 OK\r\n\r\n", "NOPE\r\n\r\n",
                         "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = hr_new(NULL);
        ck_assert_msg(hr_feed(p, (const uint8_t *)bad[i], strlen(bad[i]), &done) == -1,
                      "accepted: %s", bad[i]);
        ck_assert_ptr_nonnull(strstr(hr_error(p), "malformed response"));
        hr_free(p);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http_resp");
    TCase *t = tcase_create("read");
    tcase_add_test(t, test_lengths_and_chunks);
    tcase_add_test(t, test_to_the_end_and_cut);
    tcase_add_test(t, test_head_and_upgrade);
    tcase_add_test(t, test_limits_and_malformed);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
