/*
 * test_text.c - growing text and UTF-8: rt_text_printf, the streaming
 * UTF-8 check, and cleaning what a peer sent before it is echoed.
 */
#include "runtime/text.h"

#include "support_sync.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_printf_appends)
{
    rt_text t = {0};
    rt_text_puts(&t, "a=");
    rt_text_printf(&t, "%d,%s", 42, "b");
    ck_assert(!t.failed);
    ck_assert_uint_eq(t.len, 6);
    ck_assert(memcmp(t.p, "a=42,b", 6) == 0);
    free(t.p);
}
END_TEST

START_TEST(test_numbers_as_printf_writes_them)
{
    const int64_t is[] = {0, 7, -7, 10, -100, 123456789, INT64_MAX, INT64_MIN};
    const uint64_t us[] = {0, 9, 10, 18446744073709551615ull};
    for (size_t i = 0; i < sizeof(is) / sizeof(is[0]); i++) {
        rt_text t = {0};
        char want[32];
        rt_text_i64(&t, is[i]);
        rt_text_putc(&t, '\0');
        snprintf(want, sizeof(want), "%lld", (long long)is[i]);
        ck_assert_str_eq(t.p, want);
        free(t.p);
    }
    for (size_t i = 0; i < sizeof(us) / sizeof(us[0]); i++) {
        rt_text t = {0};
        char want[32];
        rt_text_u64(&t, us[i]);
        rt_text_putc(&t, '\0');
        snprintf(want, sizeof(want), "%llu", (unsigned long long)us[i]);
        ck_assert_str_eq(t.p, want);
        free(t.p);
    }
}
END_TEST

/* The word-at-a-time scan agrees with the plain rule byte by byte, for
 * every length and place of the first special byte (and none). */
START_TEST(test_json_plain_finds_the_first_special)
{
    static const char special[] = {'"', '\\', 0x00, 0x01, 0x1f, '\n'};
    static const char plain[] = {' ', 'x', 0x7f, (char)0x80, (char)0xc3, (char)0xff, '/'};
    char buf[80];
    uint64_t seed = 7;
    for (size_t n = 0; n < sizeof(buf); n++)
        for (size_t at = 0; at <= n; at++) {
            for (size_t i = 0; i < n; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                buf[i] = plain[(seed >> 33) % sizeof(plain)];
            }
            if (at < n)
                buf[at] = special[(seed >> 40) % sizeof(special)];
            ck_assert_uint_eq(rt_json_plain(buf, n), at);
        }
}
END_TEST

START_TEST(test_utf8_streaming)
{
    static const char ok[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z"; /* aé€😀z */
    ck_assert(rt_utf8_valid((const uint8_t *)ok, strlen(ok)));
    for (size_t cut = 0; cut <= strlen(ok); cut++) { /* any split */
        rt_utf8 u = RT_UTF8_START;
        ck_assert(rt_utf8_step(&u, (const uint8_t *)ok, cut));
        ck_assert(rt_utf8_step(&u, (const uint8_t *)ok + cut, strlen(ok) - cut));
        ck_assert_uint_eq(u.need, 0);
    }
    static const char *bad[] = {
        "\xff", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc3", "\x80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(!rt_utf8_valid((const uint8_t *)bad[i], strlen(bad[i])), "case %zu", i);
}
END_TEST

START_TEST(test_utf8_clean)
{
    char a[] = "ok \xc3\xa9 \xff\xfe end";
    rt_utf8_clean(a);
    ck_assert_str_eq(a, "ok \xc3\xa9 ?? end");
    char b[] = "cut \xe2\x82"; /* a character cut by the end */
    rt_utf8_clean(b);
    ck_assert_str_eq(b, "cut ??");
    char c[] = "\xed\xa0\x80x"; /* a surrogate: each byte of it */
    rt_utf8_clean(c);
    ck_assert_str_eq(c, "???x");
    char d[] = "";
    rt_utf8_clean(d);
    ck_assert_str_eq(d, "");
    char e[] = "two\r\nlines\tand \x1b[0m\x7f"; /* one line, no terminal escapes */
    rt_utf8_clean(e);
    ck_assert_str_eq(e, "two??lines?and ?[0m?");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("text");
    TCase *tc = tcase_create("text");
    tcase_add_test(tc, test_printf_appends);
    tcase_add_test(tc, test_numbers_as_printf_writes_them);
    tcase_add_test(tc, test_json_plain_finds_the_first_special);
    tcase_add_test(tc, test_utf8_streaming);
    tcase_add_test(tc, test_utf8_clean);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
