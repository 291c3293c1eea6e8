/* text.c - growing text, and JSON strings written as Python writes them. */
#include "text.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

void rt_text_put_grow(rt_text *w, const char *s, size_t n)
{
    if (w->failed)
        return;
    if (w->cap - w->len <= n) { /* keep room for the final NUL */
        size_t cap = w->cap ? w->cap : 256;
        while (cap - w->len <= n) {
            if (cap > SIZE_MAX / 2) {
                w->failed = true;
                return;
            }
            cap *= 2;
        }
        char *p = realloc(w->p, cap);
        if (p == NULL) {
            w->failed = true;
            return;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->len, s, n);
    w->len += n;
}

void rt_text_u64(rt_text *w, uint64_t v)
{
    char d[20];
    size_t n = sizeof(d);
    do
        d[--n] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    rt_text_put(w, d + n, sizeof(d) - n);
}

void rt_text_i64(rt_text *w, int64_t v)
{
    if (v < 0)
        rt_text_putc(w, '-');
    rt_text_u64(w, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v); /* INT64_MIN too */
}

size_t rt_json_plain(const char *s, size_t n)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    size_t i = 0;
#ifdef __SSE2__ /* every x86-64: 16 bytes a step, where the text is long */
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                  ctl = _mm_set1_epi8(0x1f);
    for (; n - i >= 16; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i low = _mm_cmpeq_epi8(_mm_max_epu8(v, ctl), ctl); /* v <= 0x1f */
        int m = _mm_movemask_epi8(
            _mm_or_si128(low, _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash))));
        if (m != 0)
            return i + (size_t)__builtin_ctz((unsigned)m);
    }
#endif
    for (uint64_t w; n - i >= 8; i += 8) { /* 8 bytes at a time while none is special */
        memcpy(&w, s + i, 8);
        uint64_t q = w ^ ('"' * ones), b = w ^ ('\\' * ones);
        /* the high bit of each byte below 0x20, each quote, each backslash
         * (a borrow only ever runs on from a byte that is one of them) */
        uint64_t special = ((w - 0x20 * ones) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b);
        if ((special & highs) != 0)
            break;
    }
    while (i < n && (unsigned char)s[i] >= 0x20 && s[i] != '"' && s[i] != '\\')
        i++;
    return i;
}

void rt_text_json_string(rt_text *w, const char *s, size_t n)
{
    rt_text_json_string_hex(w, s, n, "0123456789abcdef");
}

void rt_text_json_string_hex(rt_text *w, const char *s, size_t n, const char *hex)
{
    rt_text_putc(w, '"');
    for (size_t i = 0;; i++) {
        size_t run = rt_json_plain(s + i, n - i); /* copied as it is, in one put */
        rt_text_put(w, s + i, run);
        i += run;
        if (i == n)
            break;
        unsigned char c = (unsigned char)s[i];
        char esc[7] = {'\\', 0};
        size_t elen = 2;
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            elen = 6;
        }
        rt_text_put(w, esc, elen);
    }
    rt_text_putc(w, '"');
}

void rt_text_printf(rt_text *w, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n > 0)
        rt_text_put(w, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

void rt_text_puts(rt_text *w, const char *s)
{
    rt_text_put(w, s, strlen(s));
}

bool rt_utf8_step(rt_utf8 *u, const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (u->need == 0) { /* ASCII runs, 16 or 8 bytes at a time */
#ifdef __SSE2__
            while (n - i >= 16 &&
                   _mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(const void *)(p + i))) == 0)
                i += 16;
#endif
            for (uint64_t w; n - i >= 8; i += 8) {
                memcpy(&w, p + i, 8);
                if ((w & 0x8080808080808080ull) != 0)
                    break;
            }
            if (i == n)
                break;
        }
        uint8_t c = p[i++];
        if (u->need > 0) {
            if (c < u->lo || c > u->hi)
                return false;
            u->need--;
            u->lo = 0x80;
            u->hi = 0xbf;
            continue;
        }
        if (c < 0x80)
            continue;
        u->lo = 0x80;
        u->hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) {
            u->need = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            u->need = 2;
            if (c == 0xe0)
                u->lo = 0xa0; /* overlong */
            else if (c == 0xed)
                u->hi = 0x9f; /* surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            u->need = 3;
            if (c == 0xf0)
                u->lo = 0x90; /* overlong */
            else if (c == 0xf4)
                u->hi = 0x8f; /* past U+10FFFF */
        } else {
            return false;
        }
    }
    return true;
}

bool rt_utf8_valid(const uint8_t *p, size_t n)
{
    rt_utf8 u = RT_UTF8_START;
    return rt_utf8_step(&u, p, n) && u.need == 0;
}

void rt_utf8_clean(char *s)
{
    uint8_t *p = (uint8_t *)s;
    while (*p != '\0') {
        /* one character: its first byte, then what it needs (a NUL fails) */
        rt_utf8 u = RT_UTF8_START;
        size_t k = 0;
        bool ok;
        do
            ok = rt_utf8_step(&u, p + k++, 1);
        while (ok && u.need > 0);
        if (ok && (k > 1 || (*p >= 0x20 && *p != 0x7f)))
            p += k;
        else
            *p++ = '?';
    }
}

bool rt_keys_match(const char *const *keys, size_t n, const char *given)
{
    bool ok = n == 0;
    for (size_t i = 0; i < n; i++)
        ok |= rt_key_eq(keys[i], strlen(keys[i]), given);
    return ok;
}

bool rt_key_eq(const char *key, size_t keylen, const char *given)
{
    if (given == NULL)
        return false;
    size_t n = strlen(given);
    unsigned char diff = n != keylen;
    for (size_t i = 0; i < keylen; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < n ? given[i] : 0);
    return diff == 0;
}
