/*
 * test_units.c - the duration and size parsers behind command-line flags:
 * every suffix, the bare-number unit, and refusal of anything else.
 */
#include "runtime/err.h"
#include "runtime/units.h"

#include "support_sync.h"

#include <check.h>
#include <stdlib.h>

START_TEST(test_durations)
{
    static const struct {
        const char *in;
        uint64_t ms;
    } ok[] = {{"0", 0},       {"10", 10000},   {"250ms", 250}, {"10s", 10000},
              {"5m", 300000}, {"2h", 7200000}, {"0ms", 0},     {"600000ms", 600000}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        ck_assert_int_eq(rt_parse_duration_ms(ok[i].in, 1000, &v), 0);
        ck_assert_msg(v == ok[i].ms, "%s -> %llu", ok[i].in, (unsigned long long)v);
    }
    uint64_t v;
    ck_assert_int_eq(rt_parse_duration_ms("7", 1, &v), 0);
    ck_assert_uint_eq(v, 7);
}
END_TEST

START_TEST(test_sizes)
{
    static const struct {
        const char *in;
        uint64_t bytes;
    } ok[] = {{"512", 512},         {"64KiB", 65536}, {"16MiB", 16777216},
              {"1GiB", 1073741824}, {"10kB", 10000},  {"1MB", 1000000},
              {"4K", 4096},         {"2M", 2097152},  {"7B", 7}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        ck_assert_int_eq(rt_parse_bytes(ok[i].in, &v), 0);
        ck_assert_msg(v == ok[i].bytes, "%s -> %llu", ok[i].in, (unsigned long long)v);
    }
}
END_TEST

START_TEST(test_refusals)
{
    static const char *bad[] = {"",
                                "ms",
                                "-1",
                                " 5s",
                                "5 s",
                                "5S",
                                "5sec",
                                "1.5s",
                                "0x10",
                                "10y",
                                "5s ",
                                "1e3",
                                "+3",
                                "3m3",
                                "kb",
                                "18446744073709551616",
                                "18446744073709551615h"};
    uint64_t v = 42;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(rt_parse_duration_ms(bad[i], 1000, &v) == RT_EINVAL, "accepted '%s'", bad[i]);
        ck_assert_msg(rt_parse_bytes(bad[i], &v) == RT_EINVAL, "size accepted '%s'", bad[i]);
    }
    ck_assert_uint_eq(v, 42); /* nothing written on refusal */
    ck_assert_int_eq(rt_parse_bytes("5 B", &v), RT_EINVAL);
    ck_assert_int_eq(rt_parse_bytes("1TiB", &v), RT_EINVAL);
    ck_assert_int_eq(rt_parse_bytes(NULL, &v), RT_EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("units");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_durations);
    tcase_add_test(tc, test_sizes);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
