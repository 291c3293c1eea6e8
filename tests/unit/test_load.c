/*
 * test_load.c - the pure parts of `parley load` (tools/load_stats.c,
 * net/url.c), load_stats.c compiled in here since tools/ is not in the library:
 * percentiles against a sorted list, the order check, acked-index sets,
 * errors by kind, the send-time marker, index and ack scanning, /proc
 * parsing, server URLs, and --trace's records (tools/load_trace.c, compiled
 * in too).
 */
#include "tools/load_stats.c"
#include "tools/load_trace.c"
#include "net/url.h"

#include <check.h>
#include <stdlib.h>
#include <unistd.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

START_TEST(test_hist_percentiles)
{
    static load_hist h;
    memset(&h, 0, sizeof(h));
    ck_assert_uint_eq(load_hist_pct(&h, .5), 0);
    /* exact below 128 ns */
    for (uint64_t v = 1; v <= 100; v++)
        load_hist_add(&h, v);
    ck_assert_uint_eq(load_hist_pct(&h, .5), 50);
    ck_assert_uint_eq(load_hist_pct(&h, .99), 99);
    ck_assert_uint_eq(load_hist_pct(&h, 1), 100);
    ck_assert_uint_eq(load_hist_pct(&h, 0), 1);
    /* within 1.6 % of the true percentile over a wide spread */
    enum { N = 100000 };
    static uint64_t v[N];
    memset(&h, 0, sizeof(h));
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v[i] = x % 1000000000ull >> (x % 20); /* ns to 1 s, many magnitudes */
        load_hist_add(&h, v[i]);
    }
    qsort(v, N, sizeof(v[0]), cmp_u64);
    const double ps[] = {.5, .9, .99, .999};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        double want = (double)v[(size_t)(ps[i] * N) - 1], got = (double)load_hist_pct(&h, ps[i]);
        ck_assert_msg(got >= want * 0.984 && got <= want * 1.016, "p%g: %g, not %g", ps[i], got,
                      want);
    }
    ck_assert_uint_eq(load_hist_pct(&h, 1), v[N - 1]);
    /* merged halves are the whole */
    static load_hist a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    for (int i = 0; i < N; i++)
        load_hist_add(i % 2 ? &a : &b, v[i]);
    load_hist_merge(&a, &b);
    ck_assert_uint_eq(a.n, N);
    ck_assert_uint_eq(load_hist_pct(&a, .99), load_hist_pct(&h, .99));
    /* huge values are kept in the last bucket, and max is exact */
    load_hist_add(&a, UINT64_MAX);
    ck_assert_uint_eq(a.max, UINT64_MAX);
}
END_TEST

START_TEST(test_seq)
{
    load_seq s = LOAD_SEQ_INIT;
    ck_assert_int_eq(load_seq_see(&s, 7), LOAD_SEQ_OK);
    ck_assert_int_eq(load_seq_see(&s, 8), LOAD_SEQ_OK);
    ck_assert_int_eq(load_seq_see(&s, 10), LOAD_SEQ_GAP);
    ck_assert_int_eq(load_seq_see(&s, 11), LOAD_SEQ_OK);
    ck_assert_int_eq(load_seq_see(&s, 11), LOAD_SEQ_REPEAT);
    ck_assert_int_eq(load_seq_see(&s, 3), LOAD_SEQ_REPEAT);
    ck_assert_int_eq(load_seq_see(&s, 12), LOAD_SEQ_OK);
    ck_assert_int_eq(s.first, 7);
    ck_assert_int_eq(s.next, 13);
    ck_assert_uint_eq(s.gaps, 1);
    ck_assert_uint_eq(s.repeats, 2);
}
END_TEST

START_TEST(test_bits)
{
    load_bits a = {0}, b = {0};
    ck_assert_int_eq(load_bits_add(&a, 0), 0);
    ck_assert_int_eq(load_bits_add(&a, 100000), 0);
    ck_assert_int_eq(load_bits_add(&a, 100000), 1);
    ck_assert_int_eq(load_bits_add(&a, -1), -1);
    ck_assert_int_eq(load_bits_add(&a, LOAD_BITS_MAX), -1);
    for (int i = 1; i < 200; i++)
        ck_assert_int_eq(load_bits_add(&b, i), 0);
    ck_assert_int_eq(load_bits_add(&b, 100000), 0);
    ck_assert_int_eq(load_bits_merge(&a, &b), 1); /* 100000 is in both */
    ck_assert_int_eq(load_bits_add(&a, 150), 1);
    load_bits empty = {0};
    ck_assert_int_eq(load_bits_merge(&empty, &a), 0);
    ck_assert_int_eq(load_bits_add(&empty, 0), 1);
    load_bits_free(&a);
    load_bits_free(&b);
    load_bits_free(&empty);
}
END_TEST

START_TEST(test_errs)
{
    load_errs e;
    memset(&e, 0, sizeof(e));
    ck_assert_uint_eq(load_errs_add(&e, "http_503", 1), 0);
    ck_assert_uint_eq(load_errs_add(&e, "http_503", 2), 1);
    ck_assert_uint_eq(load_errs_add(&e, "connect", 1), 0);
    ck_assert_uint_eq(load_errs_get(&e, "http_503"), 3);
    ck_assert_uint_eq(load_errs_get(&e, "missing"), 0);
    ck_assert_uint_eq(load_errs_total(&e), 4);
    char kind[16];
    for (int i = 0; i < 100; i++) { /* more kinds than slots: the rest is "other" */
        snprintf(kind, sizeof(kind), "k%d", i);
        load_errs_add(&e, kind, 1);
    }
    ck_assert_int_eq(e.n, LOAD_ERR_KINDS);
    ck_assert_uint_eq(load_errs_total(&e), 104);
    ck_assert_uint_eq(load_errs_get(&e, "other"), 100 - (LOAD_ERR_KINDS - 3));
    load_errs m;
    memset(&m, 0, sizeof(m));
    load_errs_merge(&m, &e);
    load_errs_merge(&m, &e);
    ck_assert_uint_eq(load_errs_get(&m, "http_503"), 6);
    ck_assert_uint_eq(load_errs_total(&m), 208);
}
END_TEST

START_TEST(test_mark)
{
    char text[64];
    memset(text, 'x', sizeof(text));
    load_mark_put(text + 10, 1234567890123ull);
    ck_assert_int_eq(memcmp(text + 10, "@t=0000001234567890123", LOAD_MARK_LEN), 0);
    ck_assert_int_eq(text[10 + LOAD_MARK_LEN], 'x');
    /* as a frame carries it: other '@' before and after do not count */
    char frame[256];
    int n = snprintf(frame, sizeof(frame),
                     "{\"index\":3,\"event\":{\"id\":\"a@b\",\"llm_message\":{\"content\":[{"
                     "\"text\":\"@t=1 xx%.*s\"}]},\"note\":\"@\",\"kind\":\"MessageEvent\"}}",
                     LOAD_MARK_LEN, text + 10);
    ck_assert_uint_eq(load_mark_find((const uint8_t *)frame, (size_t)n), 1234567890123ull);
    ck_assert_uint_eq(load_mark_find((const uint8_t *)"no mark", 7), 0);
    ck_assert_uint_eq(load_mark_find((const uint8_t *)"@t=123", 6), 0); /* cut short */
    load_mark_put(text, UINT64_MAX / 10);
    ck_assert_uint_eq(load_mark_find((const uint8_t *)text, LOAD_MARK_LEN), UINT64_MAX / 10);
}
END_TEST

START_TEST(test_frame_index)
{
    const char *ok[] = {"{\"index\":0,\"event\":{}}", "{\"index\": 42, \"event\": {}}",
                        "{ \"index\" : 123456789012}"};
    const int64_t want[] = {0, 42, 123456789012};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(load_frame_index((const uint8_t *)ok[i], strlen(ok[i])), want[i]);
    const char *bad[] = {"{\"event\":{\"index\":1}}",
                         "{\"index\":}",
                         "{\"index\":-1}",
                         "[\"index\",1]",
                         "{\"index\":1234567890123456789012}",
                         "",
                         "{\"ind"};
    for (int i = 0; i < 7; i++)
        ck_assert_msg(load_frame_index((const uint8_t *)bad[i], strlen(bad[i])) == -1, "%s",
                      bad[i]);
    /* cut after the digits: the number may go on */
    ck_assert_int_eq(load_frame_index((const uint8_t *)"{\"index\":12", 11), 12);
}
END_TEST

START_TEST(test_ack)
{
    const char *body = "{\"events\": [{\"id\": \"e1\", \"index\": 5}, {\"id\":\"e2\",\"index\":6,"
                       "\"duplicate\":true}, {\"id\": \"index\", \"index\": 7}]}";
    const char *p = body, *end = body + strlen(body);
    int64_t got[4], n = 0, ix;
    while (load_ack_next(&p, end, &ix))
        got[n++] = ix;
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(got[0], 5);
    ck_assert_int_eq(got[1], 6);
    ck_assert_int_eq(got[2], 7);
    p = "{}";
    ck_assert(!load_ack_next(&p, p + 2, &ix));
}
END_TEST

START_TEST(test_trace)
{
    /* a shard keeps its first `limit` answers and counts the rest */
    load_trace a = {.limit = 5000};
    for (int i = 0; i < 6000; i++)
        load_trace_add(&a, 1000000000ull * 7 + 2 * (uint64_t)i, 1500000, 201, i % 3);
    ck_assert_uint_eq(a.n, 5000);
    ck_assert_uint_eq(a.cap, 5000);
    ck_assert_uint_eq(a.dropped, 1000);
    ck_assert_uint_eq(a.r[4999].lat_us, 1500);
    /* two shards' answers come out merged in send order */
    load_run run = {.cfg = {.threads = 2}};
    load_shard sh[2] = {{.trace = a}, {.trace = {.limit = 10}}};
    load_trace_add(&sh[1].trace, 1000000000ull * 7 + 1, 250000, 503, 70000);
    run.shards = sh;
    char path[] = "/tmp/parley-test-trace-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(load_trace_write(&run, path), 0);
    FILE *f = fopen(path, "r");
    char line[128];
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    ck_assert_str_eq(line, "sent_s,ack_ms,status,conversation\n");
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    ck_assert_str_eq(line, "7.000000000,1.500,201,0\n");
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    ck_assert_str_eq(line, "7.000000001,0.250,503,70000\n");
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    ck_assert_str_eq(line, "7.000000002,1.500,201,1\n");
    int n = 3;
    while (fgets(line, sizeof(line), f) != NULL)
        n++;
    ck_assert_int_eq(n, 5001);
    fclose(f);
    unlink(path);
    load_trace_free(&sh[0].trace);
    load_trace_free(&sh[1].trace);
}
END_TEST

START_TEST(test_proc)
{
    uint64_t t;
    const char *stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 2154 0 0 0 "
                       "731 129 0 0 20 0 3 0 12345 471888 1529 18446744073709551615";
    ck_assert_int_eq(load_proc_ticks(stat, &t), 0);
    ck_assert_uint_eq(t, 731 + 129);
    ck_assert_int_eq(load_proc_ticks("4242 (x", &t), -1);
    ck_assert_int_eq(load_proc_ticks("4242 (x) S 1 2", &t), -1);
    const char *status = "Name:\tparley\nVmPeak:\t  471888 kB\nVmHWM:\t    7000 kB\n"
                         "VmRSS:\t    6116 kB\nThreads:\t3\n";
    ck_assert_int_eq(load_proc_kib(status, "VmRSS"), 6116);
    ck_assert_int_eq(load_proc_kib(status, "VmHWM"), 7000);
    ck_assert_int_eq(load_proc_kib(status, "VmSwap"), -1);
    ck_assert_int_eq(load_proc_kib(status, "Vm"), -1);
}
END_TEST

START_TEST(test_url)
{
    net_url u;
    char err[200];
    ck_assert_int_eq(net_url_parse("http://127.0.0.1:8000", &u, err, sizeof(err)), 0);
    ck_assert(!u.tls);
    ck_assert_str_eq(u.host, "127.0.0.1");
    ck_assert_int_eq(u.port, 8000);
    ck_assert_str_eq(u.authority, "127.0.0.1:8000");
    ck_assert_str_eq(u.prefix, "");
    ck_assert(net_url_local(&u));
    ck_assert_int_eq(net_url_parse("HTTPS://[::1]:9/base/", &u, err, sizeof(err)), 0);
    ck_assert(u.tls);
    ck_assert_str_eq(u.host, "::1");
    ck_assert_str_eq(u.authority, "[::1]:9");
    ck_assert_str_eq(u.prefix, "/base");
    ck_assert(net_url_local(&u));
    ck_assert_int_eq(net_url_parse("http://localhost", &u, err, sizeof(err)), 0);
    ck_assert_int_eq(u.port, 80);
    ck_assert(net_url_local(&u));
    ck_assert_int_eq(net_url_parse("https://example.com/", &u, err, sizeof(err)), 0);
    ck_assert_int_eq(u.port, 443);
    ck_assert(!net_url_local(&u));
    ck_assert_int_eq(net_url_parse("http://127.evil.example", &u, err, sizeof(err)), 0);
    ck_assert(!net_url_local(&u));
    ck_assert_int_eq(net_url_parse("http://10.0.0.1:1", &u, err, sizeof(err)), 0);
    ck_assert(!net_url_local(&u));
    const char *bad[] = {"127.0.0.1:8000", "ftp://h",           "http://",      "http://:80",
                         "http://h:0",     "http://h:70000",    "http://h:80x", "http://[::1",
                         "http://h/?q=1",  "http://user@h:80/", "http://h#frag"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(net_url_parse(bad[i], &u, err, sizeof(err)) == -1, "%s", bad[i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("load");
    TCase *t = tcase_create("pure");
    tcase_add_test(t, test_hist_percentiles);
    tcase_add_test(t, test_seq);
    tcase_add_test(t, test_bits);
    tcase_add_test(t, test_errs);
    tcase_add_test(t, test_mark);
    tcase_add_test(t, test_frame_index);
    tcase_add_test(t, test_ack);
    tcase_add_test(t, test_trace);
    tcase_add_test(t, test_proc);
    tcase_add_test(t, test_url);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
