/*
 * test_jdoc.c - JSON documents (rt_jdoc_read) against the reader they share
 * a lexer with (rt_json_read, duplicates refused): on a few thousand random
 * texts (some corrupted, some repeating a key) and on an object too big to
 * look for duplicates one by one (test_json.c runs its cases through both
 * readers too). The two must both read the same value or both refuse with
 * the same words at the same place. And the nodes themselves: ends, counts, iteration, lookup, and
 * strings decoded in place.
 */
#include "runtime/jdoc.h"
#include "runtime/json.h"
#include "runtime/text.h"

#include "support_json.h"
#include "support_sync.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>




START_TEST(test_nodes)
{
    const char *t = "{\"a\":1,\"b\":[true,false,null,\"x\\ny\"],\"c\":{\"d\":-2.5},"
                    "\"e\":\"\\u00e9\\\"\",\"f\":\"\"}";
    rt_jdoc *d = rt_jdoc_read(t, strlen(t), 0, NULL);
    ck_assert_ptr_nonnull(d);
    tj_jdoc_nodes(d, strlen(t) + 1);
    /* node: 0 {  1 a 2 1  3 b 4 [ 5 6 7 8  9 c 10 { 11 d 12  13 e 14  15 f 16 */
    static const struct {
        rt_jtype type;
        uint32_t end, len;
    } want[] = {
        {RT_JOBJ, 17, 5}, {RT_JSTR, 2, 1},   {RT_JINT, 3, 0},   {RT_JSTR, 4, 1},  {RT_JARR, 9, 4},
        {RT_JTRUE, 6, 0}, {RT_JFALSE, 7, 0}, {RT_JNULL, 8, 0},  {RT_JSTR, 9, 3},  {RT_JSTR, 10, 1},
        {RT_JOBJ, 13, 1}, {RT_JSTR, 12, 1},  {RT_JREAL, 13, 0}, {RT_JSTR, 14, 1}, {RT_JSTR, 15, 3},
        {RT_JSTR, 16, 1}, {RT_JSTR, 17, 0},
    };
    ck_assert_uint_eq(d->n, sizeof(want) / sizeof(want[0]));
    for (uint32_t v = 0; v < d->n; v++) {
        ck_assert_int_eq(rt_jdoc_type(d, v), want[v].type);
        ck_assert_uint_eq(d->node[v].end, want[v].end);
        ck_assert_uint_eq(d->node[v].len, want[v].len);
    }
    ck_assert_int_eq(d->node[2].u.i, 1);
    ck_assert(d->node[12].u.r == -2.5);

    /* the root's keys, then the array's elements, in order */
    uint32_t keys[8], n = 0;
    for (uint32_t m = rt_jdoc_first(d, 0); m != RT_JNONE; m = rt_jdoc_next(d, 0, m))
        keys[n++] = m;
    ck_assert_uint_eq(n, 5);
    ck_assert(keys[0] == 1 && keys[1] == 3 && keys[2] == 9 && keys[3] == 13 && keys[4] == 15);
    n = 0;
    for (uint32_t m = rt_jdoc_first(d, 4); m != RT_JNONE; m = rt_jdoc_next(d, 4, m))
        keys[n++] = m;
    ck_assert(n == 4 && keys[0] == 5 && keys[3] == 8);
    ck_assert_uint_eq(rt_jdoc_first(d, 10), 11);
    ck_assert_uint_eq(rt_jdoc_next(d, 10, 11), RT_JNONE);

    ck_assert_uint_eq(rt_jdoc_get(d, 0, "b"), 4);
    ck_assert_uint_eq(rt_jdoc_get(d, 0, "f"), 16);
    ck_assert_uint_eq(rt_jdoc_get(d, rt_jdoc_get(d, 0, "c"), "d"), 12);
    ck_assert_uint_eq(rt_jdoc_get(d, 0, "d"), RT_JNONE); /* a grandchild's key */
    ck_assert_uint_eq(rt_jdoc_get(d, 0, ""), RT_JNONE);
    ck_assert_uint_eq(rt_jdoc_getn(d, 0, "ab", 1), 2);
    ck_assert_uint_eq(rt_jdoc_get(d, 4, "a"), RT_JNONE); /* an array */
    ck_assert_uint_eq(rt_jdoc_get(d, RT_JNONE, "a"), RT_JNONE);

    /* strings: NUL-terminated C strings, escapes decoded in place, and the
     * neighbours' bytes left alone */
    ck_assert_str_eq(rt_jdoc_str(d, 1), "a");
    ck_assert_int_eq(d->node[1].esc, 0);
    ck_assert_str_eq(rt_jdoc_str(d, 8), "x\ny");
    ck_assert_int_eq(d->node[8].esc, 1);
    ck_assert_str_eq(rt_jdoc_str(d, 14), "\xc3\xa9\"");
    ck_assert_int_eq(d->node[14].esc, 1);
    ck_assert_str_eq(rt_jdoc_str(d, 15), "f");
    ck_assert_str_eq(rt_jdoc_str(d, 16), "");
    ck_assert_ptr_null(rt_jdoc_str(d, 2));
    ck_assert_ptr_null(rt_jdoc_str(d, RT_JNONE));

    json_t *sub = rt_jdoc_tree(d, 4);
    json_t *want_sub = json_loads("[true,false,null,\"x\\ny\"]", 0, NULL);
    ck_assert(json_equal(sub, want_sub));
    json_decref(sub);
    json_decref(want_sub);
    ck_assert_ptr_null(rt_jdoc_tree(d, RT_JNONE));

    ck_assert_ptr_eq(rt_jdoc_ref(d), d);
    ck_assert_uint_eq(d->refs, 2);
    rt_jdoc_unref(d);
    ck_assert_uint_eq(d->refs, 1);
    rt_jdoc_unref(d);
    rt_jdoc_unref(NULL);
}
END_TEST

START_TEST(test_nul_empty_and_scalars)
{
    const char *t = "[\"a\\u0000b\",\"\\u0000\"]";
    ck_assert_ptr_null(rt_jdoc_read(t, strlen(t), 0, NULL));
    rt_jdoc *d = rt_jdoc_read(t, strlen(t), JSON_ALLOW_NUL, NULL);
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(d->node[1].len, 3); /* U+0000 counts */
    ck_assert_int_eq(memcmp(rt_jdoc_str(d, 1), "a\0b", 4), 0);
    ck_assert_uint_eq(d->node[2].len, 1);
    ck_assert_int_eq(memcmp(rt_jdoc_str(d, 2), "\0", 2), 0);
    rt_jdoc_unref(d);

    d = rt_jdoc_read("{\"a\":{},\"b\":[]}", 15, 0, NULL);
    ck_assert_ptr_nonnull(d);
    ck_assert(d->n == 5 && d->node[2].end == 3 && d->node[4].end == 5);
    ck_assert(rt_jdoc_first(d, 2) == RT_JNONE && rt_jdoc_first(d, 4) == RT_JNONE);
    ck_assert(rt_jdoc_next(d, 0, 1) == 3 && rt_jdoc_next(d, 0, 3) == RT_JNONE);
    rt_jdoc_unref(d);

    d = rt_jdoc_read(" -42 ", 5, JSON_DECODE_ANY, NULL);
    ck_assert_ptr_nonnull(d);
    ck_assert(d->n == 1 && rt_jdoc_type(d, 0) == RT_JINT && d->node[0].u.i == -42);
    rt_jdoc_unref(d);
    d = rt_jdoc_read("\"top\"", 5, JSON_DECODE_ANY, NULL);
    ck_assert_ptr_nonnull(d);
    ck_assert_str_eq(rt_jdoc_str(d, 0), "top");
    rt_jdoc_unref(d);
}
END_TEST

/* A text whose offsets would not fit is refused before a byte is read
 * (the pages are reserved, never touched). */
START_TEST(test_too_long)
{
    size_t len = (size_t)UINT32_MAX;
    char *t = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert_ptr_ne(t, MAP_FAILED);
    json_error_t e;
    ck_assert_ptr_null(rt_jdoc_read(t, len, 0, &e));
    ck_assert_msg(strstr(e.text, "too long") != NULL, "%s", e.text);
    ck_assert_int_eq(e.position, 0);
    munmap(t, len);
}
END_TEST

/* ---------------------------------------------------- random texts --- */

typedef struct gen {
    uint64_t s; /* xorshift64 */
    rt_text t;
} gen;

static unsigned below(gen *g, unsigned n)
{
    g->s ^= g->s << 13;
    g->s ^= g->s >> 7;
    g->s ^= g->s << 17;
    return (unsigned)(g->s % n);
}

static void put(gen *g, const char *s)
{
    rt_text_puts(&g->t, s);
}

static void space(gen *g)
{
    static const char *const sp[] = {"", "", "", "", " ", "\n", "\t", "\r\n  "};
    put(g, sp[below(g, 8)]);
}

/* A string's inside: letters, every escape, \u escapes (surrogate pairs
 * too), raw UTF-8, now and then U+0000. */
static void chars(gen *g, unsigned most)
{
    static const char *const esc[] = {"\\n", "\\t", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\r"};
    static const char *const raw[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                      "\xe4\xb8\xad"};
    for (unsigned i = below(g, most + 1); i > 0; i--) {
        switch (below(g, 12)) {
        case 0:
            put(g, esc[below(g, 8)]);
            break;
        case 1: /* anything of the BMP but a surrogate */
            rt_text_printf(&g->t, "\\u%04x",
                           below(g, 2) ? below(g, 0xd800) : 0xe000 + below(g, 0x2000));
            break;
        case 2:
            rt_text_printf(&g->t, "\\u%04X\\u%04x", 0xd800 + below(g, 0x400),
                           0xdc00 + below(g, 0x400));
            break;
        case 3:
            put(g, raw[below(g, 4)]);
            break;
        case 4:
            put(g, below(g, 32) ? "\\u0041" : "\\u0000");
            break;
        default:
            rt_text_putc(&g->t, (char)('a' + below(g, 26)));
        }
    }
}

/* An object's key (member i): mostly its own, now and then one that an
 * earlier member may have had (also written another way). */
static void key(gen *g, unsigned i)
{
    switch (below(g, 24 * (i + 1))) { /* a big object should not always repeat a key */
    case 0:
        put(g, "\"a\"");
        break;
    case 1:
        put(g, "\"\\u0061\"");
        break;
    case 2:
        rt_text_printf(&g->t, "\"k%u\"", below(g, i + 1));
        break;
    default:
        rt_text_printf(&g->t, "\"k%u", i);
        if (below(g, 2))
            chars(g, 3);
        put(g, "\"");
    }
}

/* A number: now and then one at the edge of what is read, or past it. */
static void number(gen *g)
{
    static const char *const edge[] = {
        "-0",       "9223372036854775807",   "-9223372036854775808", "1e-400",
        "4.9e-324", "1.7976931348623157e308"};
    static const char *const past[] = {
        "9223372036854775808", "-9223372036854775809", "1e400", "-1E400", "01", "1.", "-"};
    switch (below(g, 8)) {
    case 0:
        put(g, below(g, 8) ? edge[below(g, 6)] : past[below(g, 7)]);
        break;
    case 1: /* any int64_t */
        rt_text_i64(&g->t, (int64_t)((uint64_t)below(g, UINT32_MAX) << 32 | below(g, UINT32_MAX)));
        break;
    case 2:
    case 3:
    case 4:
        rt_text_printf(&g->t, "%d", (int)below(g, 2000) - 1000);
        break;
    default:
        rt_text_printf(&g->t, "%d.%u", (int)below(g, 200) - 100, below(g, 100000));
        if (below(g, 2))
            rt_text_printf(&g->t, "%c%d", below(g, 2) ? 'e' : 'E', (int)below(g, 80) - 40);
    }
}

static void value(gen *g, int depth);

static void array(gen *g, int depth)
{
    put(g, "[");
    for (unsigned i = 0, n = below(g, 6); i < n; i++) {
        put(g, i > 0 ? "," : "");
        value(g, depth + 1);
    }
    space(g);
    put(g, "]");
}

static void object(gen *g, int depth)
{
    /* now and then big enough for the set of keys */
    unsigned n = below(g, 8) == 0 ? 17 + below(g, 30) : below(g, 5);
    put(g, "{");
    for (unsigned i = 0; i < n; i++) {
        put(g, i > 0 ? "," : "");
        space(g);
        key(g, i);
        space(g);
        put(g, ":");
        value(g, depth + 1);
    }
    space(g);
    put(g, "}");
}

/* Containers nest up to 6 deep, most of them near the top (always at the
 * top but now and then, as the flags but JSON_DECODE_ANY want). */
static void value(gen *g, int depth)
{
    static const char *const word[] = {"true", "false", "null"};
    space(g);
    unsigned kind = depth == 0 ? (below(g, 8) ? 7 : below(g, 9))
                               : below(g, depth < 3   ? 10
                                          : depth < 6 ? 8
                                                      : 6);
    if (kind >= 6) {
        if (kind % 2)
            object(g, depth);
        else
            array(g, depth);
    } else if (kind >= 3) {
        put(g, "\"");
        chars(g, 12);
        put(g, "\"");
    } else if (kind >= 1) {
        number(g);
    } else {
        put(g, word[below(g, 3)]);
    }
    space(g);
}

/* One byte changed, dropped or added, or the text cut short. */
static void corrupt(gen *g)
{
    static const char bad[] = "\"\\,:{}[]x0 -.eu\x01\x80\xff\xc3";
    rt_text *t = &g->t;
    if (t->len == 0)
        return;
    size_t at = below(g, (unsigned)t->len);
    char c = bad[below(g, sizeof(bad) - 1)];
    switch (below(g, 4)) {
    case 0:
        t->p[at] = c;
        break;
    case 1:
        memmove(t->p + at, t->p + at + 1, t->len - at - 1);
        t->len--;
        break;
    case 2:
        rt_text_putc(t, c);
        memmove(t->p + at + 1, t->p + at, t->len - at - 1);
        t->p[at] = c;
        break;
    default:
        t->len = at;
    }
}

START_TEST(test_random_texts)
{
    static const size_t flag_sets[] = {JSON_ALLOW_NUL | JSON_DECODE_ANY, 0, JSON_DECODE_ANY};
    gen g = {.s = 0x9e3779b97f4a7c15ull};
    unsigned read = 0, total = TS_SCALE(6000, 1500);
    for (unsigned i = 0; i < total; i++) {
        g.t.len = 0;
        value(&g, 0);
        if (below(&g, 6) == 0)
            corrupt(&g);
        ck_assert(!g.t.failed);
        read += tj_jdoc_agrees(g.t.p, g.t.len, flag_sets[i % 3]);
    }
    free(g.t.p);
    /* both sides of the comparison were exercised */
    ck_assert_msg(read > total / 4 && read < total * 9 / 10, "%u of %u read", read, total);
}
END_TEST

/* ------------------------------------------------------ big objects --- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

START_TEST(test_big_object)
{
    enum { MEMBERS = 100000 };
    rt_text t = {0};
    rt_text_putc(&t, '{');
    for (int i = 0; i < MEMBERS; i++)
        rt_text_printf(&t, "%s\"key %d\":%d", i > 0 ? "," : "", i, i);
    size_t open = t.len;
    rt_text_putc(&t, '}');
    ck_assert(!t.failed);

    double t0 = now();
    rt_jdoc *d = rt_jdoc_read(t.p, t.len, 0, NULL);
    double took = now() - t0;
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(d->node[0].len, MEMBERS);
    ck_assert_uint_eq(d->n, 1 + 2 * MEMBERS);
    uint32_t v = rt_jdoc_get(d, 0, "key 99999");
    ck_assert(v != RT_JNONE && d->node[v].u.i == 99999);
    rt_jdoc_unref(d);
    /* comparing each key with every other would take a minute */
    ck_assert_msg(took < TS_SCALE(2.0, 20.0), "%.3f s for %d members", took, MEMBERS);

    /* a repeat at the end, of the first key, of one past the point where
     * the set is made, and of the last: refused where rt_json_read does */
    static const char *const again[] = {"key 0", "key 16", "key 17", "key 99999"};
    for (size_t i = 0; i < sizeof(again) / sizeof(again[0]); i++) {
        t.len = open;
        rt_text_printf(&t, ",\"%s\":true}", again[i]);
        json_error_t e;
        ck_assert_ptr_null(rt_jdoc_read(t.p, t.len, 0, &e));
        ck_assert_str_eq(e.text, "duplicate object key");
        ck_assert(!tj_jdoc_agrees(t.p, t.len, 0));
    }
    free(t.p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jdoc");
    TCase *tc = tcase_create("jdoc");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_nodes);
    tcase_add_test(tc, test_nul_empty_and_scalars);
    tcase_add_test(tc, test_too_long);
    tcase_add_test(tc, test_random_texts);
    tcase_add_test(tc, test_big_object);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
