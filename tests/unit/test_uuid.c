/*
 * test_uuid.c - reading ids (rt_uuid_parse) against the rule, letter by
 * letter: 32 hex digits, or 36 with dashes at 8, 13, 18 and 23; either
 * case; nothing else. Every request's path holds one, so the reader is
 * written for speed; this checks it against a plain one.
 */
#include "runtime/uuid.h"

#include "support_sync.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* The rule, written plainly. */
static bool plain_parse(const char *s, size_t len, rt_uuid *out)
{
    if (len != 32 && len != 36)
        return false;
    size_t k = 0;
    int half = -1;
    for (size_t i = 0; i < len; i++) {
        bool dash_here = len == 36 && (i == 8 || i == 13 || i == 18 || i == 23);
        if (dash_here != (s[i] == '-'))
            return false;
        if (dash_here)
            continue;
        const char *hex = "0123456789abcdef", *HEX = "0123456789ABCDEF";
        const char *p = s[i] != '\0' ? strchr(hex, s[i]) : NULL;
        const char *q = s[i] != '\0' ? strchr(HEX, s[i]) : NULL;
        if (p == NULL && q == NULL)
            return false;
        int v = p != NULL ? (int)(p - hex) : (int)(q - HEX);
        if (half < 0) {
            half = v;
        } else {
            out->b[k++] = (uint8_t)(half << 4 | v);
            half = -1;
        }
    }
    return k == 16;
}

static void agree(const char *s, size_t len)
{
    rt_uuid a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    bool fast = rt_uuid_parse(s, len, &a), slow = plain_parse(s, len, &b);
    ck_assert_msg(fast == slow, "%s: %.*s", fast ? "read" : "refused", (int)len, s);
    if (fast)
        ck_assert_msg(memcmp(&a, &b, sizeof(a)) == 0, "read another id: %.*s", (int)len, s);
}

START_TEST(test_forms)
{
    rt_uuid u;
    char dashed[37], hex[33];
    ck_assert(rt_uuid_parse("5ca1ab1e-0000-4000-8000-0000000000bb", 36, &u));
    rt_uuid_dashed(&u, dashed);
    ck_assert_str_eq(dashed, "5ca1ab1e-0000-4000-8000-0000000000bb");
    ck_assert(rt_uuid_parse("5CA1AB1E000040008000ABCDEF0000BB", 32, &u));
    rt_uuid_hex(&u, hex);
    ck_assert_str_eq(hex, "5ca1ab1e000040008000abcdef0000bb");
    ck_assert(!rt_uuid_parse("5ca1ab1e-0000-4000-8000-0000000000b", 35, &u));
    ck_assert(!rt_uuid_parse("5ca1ab1e00004000800000000000000bb", 33, &u));
    ck_assert(!rt_uuid_parse("5ca1ab1e000040008000-0000000000bb", 33, &u));
    ck_assert(!rt_uuid_parse("5ca1ab1e-0000-4000-80000000000000bb", 35, &u));
    ck_assert(!rt_uuid_parse("", 0, &u));
}
END_TEST

/* Every position of both forms, with every byte there. */
START_TEST(test_every_byte_everywhere)
{
    const char *forms[] = {"01234567-89ab-cdef-0123-456789abcdef",
                           "5ca1ab1e000040008000abcdef0000bb"};
    for (size_t f = 0; f < 2; f++) {
        size_t len = strlen(forms[f]);
        char s[40];
        for (size_t i = 0; i < len; i++)
            for (int c = 0; c < 256; c++) {
                memcpy(s, forms[f], len);
                s[i] = (char)c;
                agree(s, len);
            }
    }
}
END_TEST

/* Random texts of the two lengths, mostly hex, some dashes and others. */
START_TEST(test_random)
{
    const char pool[] = "0123456789abcdefABCDEF--gG/:@`{ \x80\xff";
    unsigned x = 12345;
    char s[40];
    for (int n = 0; n < 200000; n++) {
        size_t len = n % 2 ? 36 : 32;
        for (size_t i = 0; i < len; i++) {
            x = x * 1103515245u + 12345u;
            s[i] = pool[(x >> 16) % (sizeof(pool) - 1)];
        }
        if (len == 36 && n % 3 == 0) /* often well placed dashes */
            s[8] = s[13] = s[18] = s[23] = '-';
        agree(s, len);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("uuid");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_forms);
    tcase_add_test(tc, test_every_byte_everywhere);
    tcase_add_test(tc, test_random);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
