/* json_lex.c - the JSON lexer json.c and jdoc.c share (json_lex.h). */
#include "json_lex.h"

#include "uuid.h"

#include <errno.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rt__lex_fail(rt__lex *r, const char *fmt, ...)
{
    if (r->failed)
        return;
    r->failed = true;
    if (r->err == NULL)
        return;
    int line = 1, column = 0;
    for (const uint8_t *q = r->start; q < r->p; q++) {
        if (*q == '\n') {
            line++;
            column = 0;
        } else if ((*q & 0xc0) != 0x80) { /* characters, not bytes */
            column++;
        }
    }
    r->err->line = line;
    r->err->column = column;
    r->err->position = (int)(r->p - r->start);
    snprintf(r->err->source, sizeof(r->err->source), "<string>");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err->text, sizeof(r->err->text), fmt, ap);
    va_end(ap);
}

void rt__lex_start(rt__lex *r, const char *text, size_t len, size_t flags, json_error_t *err)
{
    *r = (rt__lex){.start = (const uint8_t *)text,
                   .p = (const uint8_t *)text,
                   .end = (const uint8_t *)text,
                   .flags = flags,
                   .err = err};
    if (text == NULL)
        rt__lex_fail(r, "no text");
    else
        r->end += len; /* not on NULL, where even + 0 is undefined */
}

bool rt__lex_top(rt__lex *r)
{
    if (r->failed)
        return false;
    rt__lex_space(r);
    if (!(r->flags & JSON_DECODE_ANY) && (r->p == r->end || (*r->p != '[' && *r->p != '{'))) {
        rt__lex_fail(r, "'[' or '{' expected");
        return false;
    }
    return true;
}

bool rt__lex_end(rt__lex *r, bool read)
{
    if (read) {
        rt__lex_space(r);
        if (r->p != r->end) {
            rt__lex_fail(r, "end of file expected");
            read = false;
        }
    }
    free(r->tmp.p);
    r->tmp = (rt_text){0};
    return read;
}

static bool tmp_put(rt__lex *r, const void *s, size_t n)
{
    rt_text_put(&r->tmp, s, n);
    if (r->tmp.failed)
        rt__lex_fail(r, "out of memory");
    return !r->tmp.failed;
}

static int hex4(const uint8_t *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int d = rt_hex_digit(p[i]);
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

/* One \u escape (r->p at the 'u'), or a surrogate pair, into tmp. */
static bool unicode_escape(rt__lex *r)
{
    int v = r->end - r->p >= 5 ? hex4(r->p + 1) : -1;
    if (v < 0) {
        rt__lex_fail(r, "invalid \\u escape in string");
        return false;
    }
    uint32_t cp = (uint32_t)v;
    r->p += 5;
    if (cp >= 0xdc00 && cp <= 0xdfff) {
        rt__lex_fail(r, "invalid Unicode '\\u%04X' (a low surrogate alone)", (unsigned)cp);
        return false;
    }
    if (cp >= 0xd800 && cp <= 0xdbff) {
        int lo = r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u' ? hex4(r->p + 2) : -1;
        if (lo < 0xdc00 || lo > 0xdfff) {
            rt__lex_fail(r, "invalid Unicode '\\u%04X' (a high surrogate alone)", (unsigned)cp);
            return false;
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
        r->p += 6;
    }
    if (cp == 0 && !(r->flags & JSON_ALLOW_NUL)) {
        rt__lex_fail(r, "\\u0000 is not allowed in strings");
        return false;
    }
    uint8_t u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (uint8_t)(0xc0 | cp >> 6);
        u[1] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (uint8_t)(0xe0 | cp >> 12);
        u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        u[2] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (uint8_t)(0xf0 | cp >> 18);
        u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
        u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        u[3] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return tmp_put(r, u, n);
}

/* One escape (r->p at the backslash) into tmp. */
static bool escape(rt__lex *r)
{
    if (r->end - r->p < 2) {
        rt__lex_fail(r, "premature end of input in a string");
        return false;
    }
    r->p++;
    char c;
    switch (*r->p) {
    case '"':
        c = '"';
        break;
    case '\\':
        c = '\\';
        break;
    case '/':
        c = '/';
        break;
    case 'b':
        c = '\b';
        break;
    case 'f':
        c = '\f';
        break;
    case 'n':
        c = '\n';
        break;
    case 'r':
        c = '\r';
        break;
    case 't':
        c = '\t';
        break;
    case 'u':
        return unicode_escape(r);
    default:
        rt__lex_fail(r, "invalid escape '\\%c' in string",
                     *r->p >= 0x20 && *r->p < 0x7f ? *r->p : '?');
        return false;
    }
    r->p++;
    return tmp_put(r, &c, 1);
}

/* Runs without escapes are found 8 bytes at a time and their UTF-8
 * checked as they go. */
/* The run at p of printable ASCII other than quote and backslash: bytes
 * that need neither an escape nor a UTF-8 check, found 16 at a time, so
 * that most text is looked at once rather than twice. */
static size_t ascii_run(const uint8_t *p, size_t n)
{
    size_t i = 0;
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                  ctl = _mm_set1_epi8(0x1f);
    for (; n - i >= 16; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
        __m128i low = _mm_cmpeq_epi8(_mm_max_epu8(v, ctl), ctl); /* v <= 0x1f */
        int m = _mm_movemask_epi8(_mm_or_si128(
                    low, _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)))) |
                _mm_movemask_epi8(v); /* v >= 0x80 */
        if (m != 0)
            return i + (size_t)__builtin_ctz((unsigned)m);
    }
#endif
    while (i < n && p[i] >= 0x20 && p[i] < 0x80 && p[i] != '"' && p[i] != '\\')
        i++;
    return i;
}

bool rt__lex_string(rt__lex *r, const char **s, size_t *len)
{
    const uint8_t *first = ++r->p;
    bool copied = false;
    rt_utf8 u = RT_UTF8_START;
    r->tmp.len = 0;
    for (;;) {
        /* no character is cut short here (u.need is 0) */
        size_t ascii = ascii_run(r->p, (size_t)(r->end - r->p));
        if (copied && !tmp_put(r, r->p, ascii))
            return false;
        r->p += ascii;
        if (r->p < r->end && *r->p == '"') /* most strings: ASCII to the end */
            break;
        size_t run = rt_json_plain((const char *)r->p, (size_t)(r->end - r->p));
        if (!rt_utf8_step(&u, r->p, run)) {
            rt__lex_fail(r, "invalid UTF-8 in string");
            return false;
        }
        if (copied && !tmp_put(r, r->p, run))
            return false;
        r->p += run;
        if (r->p == r->end) {
            rt__lex_fail(r, "premature end of input in a string");
            return false;
        }
        if (u.need != 0) {
            rt__lex_fail(r, "invalid UTF-8 in string (a character cut short)");
            return false;
        }
        if (*r->p == '"')
            break;
        if (*r->p != '\\') {
            rt__lex_fail(r, "control character 0x%x in string", *r->p);
            return false;
        }
        if (!copied && !tmp_put(r, first, (size_t)(r->p - first)))
            return false;
        copied = true;
        if (!escape(r))
            return false;
    }
    *s = copied ? r->tmp.p : (const char *)first;
    *len = copied ? r->tmp.len : (size_t)(r->p - first);
    r->p++;
    return true;
}

bool rt__lex_key(rt__lex *r, const char **k, size_t *klen)
{
    if (r->p == r->end || *r->p != '"') {
        rt__lex_fail(r, "string or '}' expected");
        return false;
    }
    if (!rt__lex_string(r, k, klen))
        return false;
    /* only an escape can put U+0000 in, and only when it is allowed */
    if ((r->flags & JSON_ALLOW_NUL) && memchr(*k, '\0', *klen) != NULL) {
        rt__lex_fail(r, "NUL byte in object key not supported");
        return false;
    }
    return true;
}

static bool is_digit(const uint8_t *p, const uint8_t *end)
{
    return p < end && *p >= '0' && *p <= '9';
}

static int number(rt__lex *r, json_int_t *i, double *d)
{
    const uint8_t *q = r->p;
    bool real = false;
    if (*q == '-')
        q++;
    if (!is_digit(q, r->end))
        goto bad;
    if (*q == '0') {
        q++;
        if (is_digit(q, r->end))
            goto bad; /* no leading zeros */
    } else {
        while (is_digit(q, r->end))
            q++;
    }
    if (q < r->end && *q == '.') {
        real = true;
        if (!is_digit(++q, r->end))
            goto bad;
        while (is_digit(q, r->end))
            q++;
    }
    if (q < r->end && (*q == 'e' || *q == 'E')) {
        real = true;
        q++;
        if (q < r->end && (*q == '+' || *q == '-'))
            q++;
        if (!is_digit(q, r->end))
            goto bad;
        while (is_digit(q, r->end))
            q++;
    }
    char small[64];
    const char *s = small;
    size_t n = (size_t)(q - r->p);
    if (n < sizeof(small)) {
        memcpy(small, r->p, n);
        small[n] = '\0';
    } else {
        r->tmp.len = 0;
        if (!tmp_put(r, r->p, n))
            return -1;
        r->tmp.p[r->tmp.len] = '\0'; /* rt_text keeps room for it */
        s = r->tmp.p;
    }
    errno = 0;
    if (!real) {
        long long v = strtoll(s, NULL, 10);
        if (errno == ERANGE) {
            rt__lex_fail(r, "too big %sinteger", *s == '-' ? "negative " : "");
            return -1;
        }
        *i = (json_int_t)v;
    } else {
        *d = strtod(s, NULL);
        if (errno == ERANGE && (*d > 1.0 || *d < -1.0)) {
            rt__lex_fail(r, "real number overflow");
            return -1;
        }
    }
    r->p = q;
    return real ? JSON_REAL : JSON_INTEGER;
bad:
    r->p = q;
    rt__lex_fail(r, "invalid number");
    return -1;
}

/* true, false, null: jansson reads a run of letters and then names it. */
static int word(rt__lex *r)
{
    const uint8_t *q = r->p;
    while (q < r->end && ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')))
        q++;
    size_t n = (size_t)(q - r->p);
    int t;
    if (n == 4 && memcmp(r->p, "true", 4) == 0)
        t = JSON_TRUE;
    else if (n == 5 && memcmp(r->p, "false", 5) == 0)
        t = JSON_FALSE;
    else if (n == 4 && memcmp(r->p, "null", 4) == 0)
        t = JSON_NULL;
    else {
        rt__lex_fail(r, "invalid token");
        return -1;
    }
    r->p = q;
    return t;
}

int rt__lex_scalar(rt__lex *r, json_int_t *i, double *d)
{
    return *r->p == '-' || (*r->p >= '0' && *r->p <= '9') ? number(r, i, d) : word(r);
}
