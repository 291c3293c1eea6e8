/* json.c - a JSON reader that builds jansson values (json.h). */
#include "json.h"

#include "text.h"
#include "uuid.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
    const uint8_t *start, *p, *end;
    size_t flags;
    int depth;
    json_error_t *err;
    bool failed;
    rt_text tmp; /* unescaped strings, long numbers */
} reader;

static void fail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(reader *r, const char *fmt, ...)
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

static void skip_space(reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static bool tmp_put(reader *r, const void *s, size_t n)
{
    rt_text_put(&r->tmp, s, n);
    if (r->tmp.failed)
        fail(r, "out of memory");
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
static bool unicode_escape(reader *r)
{
    int v = r->end - r->p >= 5 ? hex4(r->p + 1) : -1;
    if (v < 0) {
        fail(r, "invalid \\u escape in string");
        return false;
    }
    uint32_t cp = (uint32_t)v;
    r->p += 5;
    if (cp >= 0xdc00 && cp <= 0xdfff) {
        fail(r, "invalid Unicode '\\u%04X' (a low surrogate alone)", (unsigned)cp);
        return false;
    }
    if (cp >= 0xd800 && cp <= 0xdbff) {
        int lo = r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u' ? hex4(r->p + 2) : -1;
        if (lo < 0xdc00 || lo > 0xdfff) {
            fail(r, "invalid Unicode '\\u%04X' (a high surrogate alone)", (unsigned)cp);
            return false;
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
        r->p += 6;
    }
    if (cp == 0 && !(r->flags & JSON_ALLOW_NUL)) {
        fail(r, "\\u0000 is not allowed in strings");
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
static bool escape(reader *r)
{
    if (r->end - r->p < 2) {
        fail(r, "premature end of input in a string");
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
        fail(r, "invalid escape '\\%c' in string", *r->p >= 0x20 && *r->p < 0x7f ? *r->p : '?');
        return false;
    }
    r->p++;
    return tmp_put(r, &c, 1);
}

/* A string (r->p just past its opening quote): its bytes, either in the
 * text itself (no escapes) or in tmp. Runs without escapes are found 8
 * bytes at a time and their UTF-8 checked as they go. */
static bool string(reader *r, const char **s, size_t *len)
{
    const uint8_t *first = r->p;
    bool copied = false;
    rt_utf8 u = RT_UTF8_START;
    r->tmp.len = 0;
    for (;;) {
        size_t run = rt_json_plain((const char *)r->p, (size_t)(r->end - r->p));
        if (!rt_utf8_step(&u, r->p, run)) {
            fail(r, "invalid UTF-8 in string");
            return false;
        }
        if (copied && !tmp_put(r, r->p, run))
            return false;
        r->p += run;
        if (r->p == r->end) {
            fail(r, "premature end of input in a string");
            return false;
        }
        if (u.need != 0) {
            fail(r, "invalid UTF-8 in string (a character cut short)");
            return false;
        }
        if (*r->p == '"') {
            *s = copied ? r->tmp.p : (const char *)first;
            *len = copied ? r->tmp.len : (size_t)(r->p - first);
            r->p++;
            return true;
        }
        if (*r->p != '\\') {
            fail(r, "control character 0x%x in string", *r->p);
            return false;
        }
        if (!copied && !tmp_put(r, first, (size_t)(r->p - first)))
            return false;
        copied = true;
        if (!escape(r))
            return false;
    }
}

static bool is_digit(const uint8_t *p, const uint8_t *end)
{
    return p < end && *p >= '0' && *p <= '9';
}

static json_t *number(reader *r)
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
            return NULL;
        r->tmp.p[r->tmp.len] = '\0'; /* rt_text keeps room for it */
        s = r->tmp.p;
    }
    errno = 0;
    json_t *v;
    if (!real) {
        long long i = strtoll(s, NULL, 10);
        if (errno == ERANGE) {
            fail(r, "too big %sinteger", *s == '-' ? "negative " : "");
            return NULL;
        }
        v = json_integer((json_int_t)i);
    } else {
        double d = strtod(s, NULL);
        if (errno == ERANGE && (d > 1.0 || d < -1.0)) {
            fail(r, "real number overflow");
            return NULL;
        }
        v = json_real(d);
    }
    if (v == NULL)
        fail(r, "out of memory");
    r->p = q;
    return v;
bad:
    r->p = q;
    fail(r, "invalid number");
    return NULL;
}

/* true, false, null: jansson reads a run of letters and then names it. */
static json_t *word(reader *r)
{
    const uint8_t *q = r->p;
    while (q < r->end && ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')))
        q++;
    size_t n = (size_t)(q - r->p);
    json_t *v = NULL;
    if (n == 4 && memcmp(r->p, "true", 4) == 0)
        v = json_true();
    else if (n == 5 && memcmp(r->p, "false", 5) == 0)
        v = json_false();
    else if (n == 4 && memcmp(r->p, "null", 4) == 0)
        v = json_null();
    else
        fail(r, "invalid token");
    if (v != NULL)
        r->p = q;
    return v;
}

static json_t *value(reader *r);

static json_t *object(reader *r)
{
    json_t *o = json_object();
    if (o == NULL) {
        fail(r, "out of memory");
        return NULL;
    }
    r->p++;
    skip_space(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return o;
    }
    for (;;) {
        if (r->p == r->end || *r->p != '"') {
            fail(r, "string or '}' expected");
            break;
        }
        r->p++;
        const char *k;
        size_t klen;
        if (!string(r, &k, &klen))
            break;
        if (memchr(k, '\0', klen) != NULL) {
            fail(r, "NUL byte in object key not supported");
            break;
        }
        /* the key must outlive the value's parse, which reuses tmp */
        char small[64], *key = klen < sizeof(small) ? small : malloc(klen + 1);
        if (key == NULL) {
            fail(r, "out of memory");
            break;
        }
        memcpy(key, k, klen);
        key[klen] = '\0';
        json_t *v = NULL;
        if ((r->flags & JSON_REJECT_DUPLICATES) && json_object_getn(o, key, klen) != NULL) {
            fail(r, "duplicate object key");
        } else {
            skip_space(r);
            if (r->p == r->end || *r->p != ':') {
                fail(r, "':' expected");
            } else {
                r->p++;
                skip_space(r);
                v = value(r);
            }
        }
        if (v != NULL && json_object_setn_new_nocheck(o, key, klen, v) != 0)
            fail(r, "out of memory");
        if (key != small)
            free(key);
        if (v == NULL || r->failed)
            break;
        skip_space(r);
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            return o;
        }
        if (r->p == r->end || *r->p != ',') {
            fail(r, "'}' expected");
            break;
        }
        r->p++;
        skip_space(r);
    }
    json_decref(o);
    return NULL;
}

static json_t *array(reader *r)
{
    json_t *a = json_array();
    if (a == NULL) {
        fail(r, "out of memory");
        return NULL;
    }
    r->p++;
    skip_space(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return a;
    }
    for (;;) {
        json_t *v = value(r);
        if (v == NULL)
            break;
        if (json_array_append_new(a, v) != 0) {
            fail(r, "out of memory");
            break;
        }
        skip_space(r);
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return a;
        }
        if (r->p == r->end || *r->p != ',') {
            fail(r, "']' expected");
            break;
        }
        r->p++;
        skip_space(r);
    }
    json_decref(a);
    return NULL;
}

/* A value at r->p (spaces skipped). Every value counts towards the depth,
 * scalars included, as in jansson. */
static json_t *value(reader *r)
{
    if (r->p == r->end) {
        fail(r, "premature end of input");
        return NULL;
    }
    if (++r->depth > JSON_PARSER_MAX_DEPTH) {
        fail(r, "maximum parsing depth reached");
        return NULL;
    }
    json_t *v;
    const char *s;
    size_t len;
    switch (*r->p) {
    case '{':
        v = object(r);
        break;
    case '[':
        v = array(r);
        break;
    case '"':
        r->p++;
        v = NULL;
        if (string(r, &s, &len) && (v = json_stringn_nocheck(s, len)) == NULL)
            fail(r, "out of memory");
        break;
    default:
        v = *r->p == '-' || (*r->p >= '0' && *r->p <= '9') ? number(r) : word(r);
    }
    r->depth--;
    return v;
}

json_t *rt_json_read(const char *text, size_t len, size_t flags, json_error_t *err)
{
    reader r = {.start = (const uint8_t *)text,
                .p = (const uint8_t *)text,
                .end = (const uint8_t *)text + len,
                .flags = flags,
                .err = err};
    if (text == NULL) {
        r.end = r.p;
        fail(&r, "no text");
        return NULL;
    }
    skip_space(&r);
    json_t *v = NULL;
    if (!(flags & JSON_DECODE_ANY) && (r.p == r.end || (*r.p != '[' && *r.p != '{')))
        fail(&r, "'[' or '{' expected");
    else
        v = value(&r);
    if (v != NULL) {
        skip_space(&r);
        if (r.p != r.end) {
            fail(&r, "end of file expected");
            json_decref(v);
            v = NULL;
        }
    }
    free(r.tmp.p);
    return v;
}
