/*
 * test_ws_client.c - the client's side of WebSocket against our own server
 * side, in memory: the handshake (request read by the server's parser and
 * answered by net_ws_handshake, the answer read by http_resp and checked),
 * frames both ways (a client masks, a server must not), ping and pong, the
 * close handshake, and refusals.
 */
#include "net/http_parse.h"
#include "net/ws.h"
#include "net/ws_client.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Move what `from` has to send into `to`. */
static void pass(net_ws *from, net_ws *to)
{
    rt_buf *b = NULL;
    ck_assert_int_eq(net_ws_take_output(from, &b), 0);
    if (b != NULL) {
        ck_assert_int_eq(net_ws_input(to, rt_buf_data(b), rt_buf_len(b)), 0);
        rt_buf_unref(b);
    }
}

/* The server's answer to our request, read back as a response. */
static hr_parser *handshake(const char *req, char *err, size_t errlen, const char *accept,
                            int *check)
{
    hp_parser *hp = hp_new(NULL);
    bool done;
    ck_assert_int_eq(hp_feed(hp, (const uint8_t *)req, strlen(req), &done), (ssize_t)strlen(req));
    ck_assert(done);
    char answer[NET_WS_HANDSHAKE_MAX], why[200];
    size_t alen;
    ck_assert_int_eq(
        net_ws_handshake(hp_request(hp), answer, sizeof(answer), &alen, why, sizeof(why)), 101);
    hp_free(hp);
    hr_parser *hr = hr_new(NULL);
    ck_assert_int_eq(hr_feed(hr, (const uint8_t *)answer, alen, &done), (ssize_t)alen);
    ck_assert(done);
    *check = net_ws_client_check(hr_response(hr), accept, err, errlen);
    return hr;
}

START_TEST(test_handshake)
{
    char req[512], accept[NET_WS_ACCEPT_LEN + 1], err[200];
    int n = net_ws_client_request(req, sizeof(req), "127.0.0.1:80", "/sockets/events/x?a=1",
                                  "X-Session-API-Key: k\r\n", accept);
    ck_assert_int_gt(n, 0);
    ck_assert_ptr_nonnull(strstr(req, "GET /sockets/events/x?a=1 HTTP/1.1\r\n"));
    ck_assert_ptr_nonnull(strstr(req, "X-Session-API-Key: k\r\n\r\n"));
    int check;
    hr_parser *hr = handshake(req, err, sizeof(err), accept, &check);
    ck_assert_msg(check == 0, "%s", err);
    hr_free(hr);
    /* another key's answer is not ours */
    char other[NET_WS_ACCEPT_LEN + 1];
    char req2[512];
    net_ws_client_request(req2, sizeof(req2), "h", "/", NULL, other);
    ck_assert_str_ne(other, accept);
    hr = handshake(req2, err, sizeof(err), accept, &check);
    ck_assert_int_eq(check, -1);
    ck_assert_ptr_nonnull(strstr(err, "Sec-WebSocket-Accept is"));
    hr_free(hr);
    /* a refusal says its status and detail */
    hr = hr_new(NULL);
    const char *no = "HTTP/1.1 422 Unprocessable Content\r\nContent-Length: 26\r\n\r\n"
                     "{\"detail\":\"bad envelope\"}\n";
    bool done;
    hr_feed(hr, (const uint8_t *)no, strlen(no), &done);
    ck_assert(done);
    ck_assert_int_eq(net_ws_client_check(hr_response(hr), accept, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "refused the upgrade: 422 {\"detail\":\"bad envelope\"}"));
    hr_free(hr);
    ck_assert_int_eq(net_ws_client_request(req, 20, "h", "/", NULL, accept), NET_WS_EINVAL);
}
END_TEST

START_TEST(test_frames_both_ways)
{
    net_ws *c = net_ws_new_client(NULL), *s = net_ws_new(NULL);
    net_ws_msg m;
    /* client -> server: masked, read by the server */
    ck_assert_int_eq(net_ws_write(c, NET_WS_TEXT, (const uint8_t *)"hello", 5), 0);
    rt_buf *b = NULL;
    net_ws_take_output(c, &b);
    ck_assert(rt_buf_data(b)[1] & 0x80); /* the mask bit */
    ck_assert(memmem(rt_buf_data(b), rt_buf_len(b), "hello", 5) == NULL);
    net_ws_input(s, rt_buf_data(b), rt_buf_len(b));
    rt_buf_unref(b);
    ck_assert_int_eq(net_ws_read(s, &m), 1);
    ck_assert_int_eq(m.opcode, NET_WS_TEXT);
    ck_assert_int_eq(memcmp(m.data, "hello", 5), 0);
    /* server -> client, big enough for a 16-bit length */
    char big[1000];
    memset(big, 'z', sizeof(big));
    ck_assert_int_eq(net_ws_write(s, NET_WS_BINARY, (const uint8_t *)big, sizeof(big)), 0);
    pass(s, c);
    ck_assert_int_eq(net_ws_read(c, &m), 1);
    ck_assert_int_eq(m.opcode, NET_WS_BINARY);
    ck_assert_uint_eq(m.len, sizeof(big));
    /* the server pings, the client's pong (masked) comes back */
    ck_assert_int_eq(net_ws_ping(s, (const uint8_t *)"p1", 2), 0);
    pass(s, c);
    ck_assert_int_eq(net_ws_read(c, &m), 0);
    pass(c, s);
    ck_assert_int_eq(net_ws_read(s, &m), 1);
    ck_assert_int_eq(m.opcode, NET_WS_PONG);
    /* the client closes, the server echoes, both are done */
    ck_assert_int_eq(net_ws_close(c, 1000, "bye"), 0);
    pass(c, s);
    ck_assert_int_eq(net_ws_read(s, &m), NET_WS_CLOSED);
    ck_assert_int_eq(net_ws_peer_close_code(s), 1000);
    pass(s, c);
    ck_assert_int_eq(net_ws_read(c, &m), NET_WS_CLOSED);
    ck_assert_int_eq(net_ws_peer_close_code(c), 1000);
    net_ws_free(c);
    net_ws_free(s);
}
END_TEST

START_TEST(test_masked_server_frame_refused)
{
    /* a client's (masked) frame sent to a client: a server must not mask */
    net_ws *c1 = net_ws_new_client(NULL), *c2 = net_ws_new_client(NULL);
    net_ws_write(c1, NET_WS_TEXT, (const uint8_t *)"x", 1);
    pass(c1, c2);
    net_ws_msg m;
    ck_assert_int_eq(net_ws_read(c2, &m), NET_WS_EPROTO);
    ck_assert_int_eq(net_ws_close_code(c2), 1002);
    ck_assert_ptr_nonnull(strstr(net_ws_error(c2), "must not be masked"));
    net_ws_free(c1);
    net_ws_free(c2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ws_client");
    TCase *t = tcase_create("client");
    tcase_add_test(t, test_handshake);
    tcase_add_test(t, test_frames_both_ways);
    tcase_add_test(t, test_masked_server_frame_refused);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
