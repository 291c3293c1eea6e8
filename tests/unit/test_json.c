/*
 * test_json.c - the JSON reader (rt_json_read) against jansson's json_loadb
 * on the cases that matter most (the fuzz target fuzz_json compares them on
 * anything), the writer (rt_json_dumps) against json_dumps on every value
 * read here and on trees made by hand, and the string writer's
 * 8-bytes-at-a-time scan against the plain byte-by-byte rule.
 */
#include "runtime/json.h"
#include "runtime/text.h"

#include "support_json.h"
#include "support_sync.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The writer writes v as json_dumps does, byte for byte. */
static void same_text(const json_t *v)
{
    size_t len = 0;
    char *ours = rt_json_dumps(v, &len);
    char *theirs = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    ck_assert_ptr_nonnull(ours);
    ck_assert_ptr_nonnull(theirs);
    ck_assert_uint_eq(len, strlen(theirs));
    ck_assert_str_eq(ours, theirs);
    free(ours);
    free(theirs);
}

/* Both read it alike: both refuse, or both build the same value. */
static void same_as_jansson(const char *text, size_t len, size_t flags, int expect_ok)
{
    (void)tj_jdoc_agrees(text, len, flags); /* and the document reader reads it alike */
    json_error_t e;
    json_t *ours = rt_json_read(text, len, flags, &e);
    json_t *theirs = json_loadb(text, len, flags, NULL);
    ck_assert_msg((ours != NULL) == (theirs != NULL), "disagree on %.*s", (int)len, text);
    ck_assert_msg((ours != NULL) == expect_ok, "%s %.*s", ours ? "read" : "refused", (int)len,
                  text);
    if (ours != NULL) {
        char *a = json_dumps(ours, JSON_COMPACT | JSON_ENCODE_ANY);
        char *b = json_dumps(theirs, JSON_COMPACT | JSON_ENCODE_ANY);
        ck_assert_str_eq(a, b);
        same_text(ours);
        free(a);
        free(b);
    } else {
        ck_assert_msg(e.text[0] != '\0', "a refusal names its reason");
    }
    json_decref(ours);
    json_decref(theirs);
}

static void check(const char *text, size_t flags, int expect_ok)
{
    same_as_jansson(text, strlen(text), flags, expect_ok);
}

START_TEST(test_values)
{
    check("{\"a\":1,\"b\":[true,false,null],\"c\":{\"d\":\"e\"}}", 0, 1);
    check(" [ 1 , -0 , 0.5 , -1.25e-3 , 1E10 , 9223372036854775807 ] ", 0, 1);
    check("[-9223372036854775808]", 0, 1);
    check("[9223372036854775808]", 0, 0);  /* too big an integer */
    check("[-9223372036854775809]", 0, 0); /* too big a negative one */
    check("[1e400]", 0, 0);                /* real overflow */
    check("[1e-400]", 0, 1);               /* underflow reads as 0 */
    check("[01]", 0, 0);
    check("[1.]", 0, 0);
    check("[.5]", 0, 0);
    check("[1e]", 0, 0);
    check("[-]", 0, 0);
    check("[tru]", 0, 0);
    check("[truex]", 0, 0);
    check("[1,]", 0, 0);
    check("{\"a\":1,}", 0, 0);
    check("{\"a\" 1}", 0, 0);
    check("{1:2}", 0, 0);
    check("[1] x", 0, 0);
    check("", 0, 0);
    check("   ", 0, 0);
    check("\"top\"", 0, 0); /* a scalar at the top needs JSON_DECODE_ANY */
    check("\"top\"", JSON_DECODE_ANY, 1);
    check("3", JSON_DECODE_ANY, 1);
}
END_TEST

START_TEST(test_strings)
{
    check("[\"caf\xc3\xa9 \\u00e9 \\ud83d\\ude00 \\/\\b\\f\\n\\r\\t\\\"\\\\\"]", 0, 1);
    check("[\"\\ud800\"]", 0, 0);         /* a high surrogate alone */
    check("[\"\\udc00\"]", 0, 0);         /* a low one alone */
    check("[\"\\ud800\\u0041\"]", 0, 0);  /* a high one with no low one after it */
    check("[\"\\u0000\"]", 0, 0);         /* NUL only when allowed */
    check("[\"\\u0000\"]", JSON_ALLOW_NUL, 1);
    check("{\"k\\u0000\":1}", JSON_ALLOW_NUL, 0); /* never in a key */
    check("[\"\\x\"]", 0, 0);
    check("[\"\\u12\"]", 0, 0);
    check("[\"tab\there\"]", 0, 0); /* a raw control character */
    check("[\"\xc3\"]", 0, 0);       /* a cut character */
    check("[\"\xed\xa0\x80\"]", 0, 0); /* an encoded surrogate */
    check("[\"\xf4\x90\x80\x80\"]", 0, 0);
    check("[\"\xc0\xaf\"]", 0, 0);
    check("[\"unterminated]", 0, 0);
    /* long strings cross the 8-byte scan at every alignment */
    for (size_t n = 0; n < 40; n++) {
        char t[64] = "[\"";
        memset(t + 2, 'x', n);
        strcpy(t + 2 + n, "\\n\"]");
        check(t, 0, 1);
        t[2 + n / 2] = '\x01';
        check(t, 0, 0);
    }
}
END_TEST

START_TEST(test_duplicates_and_depth)
{
    check("{\"a\":1,\"a\":2}", 0, 1); /* the last one wins, as in jansson */
    check("{\"a\":1,\"a\":2}", JSON_REJECT_DUPLICATES, 0);
    check("{\"a\\u0062\":1,\"ab\":2}", JSON_REJECT_DUPLICATES, 0);
    /* every value counts towards jansson's depth limit, scalars included */
    for (int depth = JSON_PARSER_MAX_DEPTH - 1; depth <= JSON_PARSER_MAX_DEPTH + 1; depth++) {
        char *t = malloc((size_t)depth * 2 + 2);
        memset(t, '[', (size_t)depth);
        t[depth] = '1';
        memset(t + depth + 1, ']', (size_t)depth);
        same_as_jansson(t, (size_t)depth * 2 + 1, 0, depth < JSON_PARSER_MAX_DEPTH);
        free(t);
    }
}
END_TEST

START_TEST(test_nul_byte_refused)
{
    json_error_t e;
    ck_assert_ptr_null(rt_json_read("3\0", 2, JSON_DECODE_ANY, &e));
    ck_assert_ptr_null(rt_json_read("[\"a\0b\"]", 7, 0, &e));
    ck_assert_ptr_null(rt_json_read("[1]\0", 4, 0, &e));
    ck_assert(!tj_jdoc_agrees("3\0", 2, JSON_DECODE_ANY));
    ck_assert(!tj_jdoc_agrees("[\"a\0b\"]", 7, 0));
    ck_assert(!tj_jdoc_agrees("[1]\0", 4, 0));
    ck_assert(!tj_jdoc_agrees(NULL, 0, 0));
}
END_TEST

START_TEST(test_error_place)
{
    json_error_t e;
    ck_assert_ptr_null(rt_json_read("{\n  \"a\": 1,\n  \"b\" x\n}", 21, 0, &e));
    ck_assert_int_eq(e.line, 3);
    ck_assert_int_eq(e.column, 6);
    ck_assert_int_eq(e.position, 18);
    ck_assert(!tj_jdoc_agrees("{\n  \"a\": 1,\n  \"b\" x\n}", 21, 0)); /* same place */
}
END_TEST

/* rt_json_plain says how many bytes need no escape; compare with the rule. */
/* Trees the reader does not make: keys with a NUL or escapes, members in
 * the order they were set (not sorted), every kind of scalar, nesting. */
START_TEST(test_writer)
{
    json_t *o = json_object();
    json_object_set_new(o, "z", json_integer(INT64_MIN));
    json_object_set_new(o, "a", json_integer(INT64_MAX));
    json_object_setn_new(o, "n\0ul", 4, json_stringn("x\0y\x01\x1f\x7f/\"\\\b\f\n\r\t", 14));
    json_object_set_new(o, "\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80", json_string("\xe2\x82\xac"));
    json_object_set_new(o, "reals", json_pack("[f,f,f,f,f]", 0.0, -0.5, 1e300, 1.0 / 3, 100.0));
    json_object_set_new(o, "empty", json_pack("{s:{},s:[],s:s}", "o", "a", "s", ""));
    json_object_set_new(o, "deep", json_pack("[[[{s:[b,b,n]}]]]", "k", 1, 0));
    same_text(o);
    same_text(json_object_get(o, "reals"));
    json_t *scalars[] = {json_true(),     json_false(),   json_null(),
                         json_integer(0), json_real(2.5), json_string("s")};
    for (size_t i = 0; i < sizeof(scalars) / sizeof(scalars[0]); i++) {
        same_text(scalars[i]); /* at the top too, as JSON_ENCODE_ANY */
        json_decref(scalars[i]);
    }
    ck_assert_ptr_null(rt_json_dumps(NULL, NULL));
    json_decref(o);
}
END_TEST

START_TEST(test_plain_runs)
{
    char s[40];
    for (int special = 0; special < 256; special++) {
        for (size_t at = 0; at < sizeof(s); at += 3) {
            for (size_t i = 0; i < sizeof(s); i++)
                s[i] = (char)(0x80 + i); /* bytes above 0x7f are plain too */
            s[at] = (char)special;
            unsigned char c = (unsigned char)special;
            size_t want = c < 0x20 || c == '"' || c == '\\' ? at : sizeof(s);
            ck_assert_uint_eq(rt_json_plain(s, sizeof(s)), want);
        }
    }
    rt_text t = {0};
    const char *in = "ab\"c\\d\n\x01\xc3\xa9-long enough to take the fast path";
    rt_text_json_string(&t, in, strlen(in));
    rt_text_putc(&t, '\0');
    ck_assert_str_eq(t.p,
                     "\"ab\\\"c\\\\d\\n\\u0001\xc3\xa9-long enough to take the fast path\"");
    free(t.p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("json");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_strings);
    tcase_add_test(tc, test_duplicates_and_depth);
    tcase_add_test(tc, test_nul_byte_refused);
    tcase_add_test(tc, test_error_place);
    tcase_add_test(tc, test_writer);
    tcase_add_test(tc, test_plain_runs);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
