/*
 * event_json.c - the canonical bytes of an event (ev_serialize) or of any
 * JSON value (ev_canonical_json).
 *
 * The rules (event.h): compact, object members whose value is null left
 * out at every depth (array elements are kept: dropping one would shift
 * the others), the top-level object's id, timestamp, source and parent_id
 * first, every other member in the order given, and `kind` last in every
 * object that has one, as upstream's computed discriminator comes out.
 *
 * The writer is our own rather than json_dumps with flags: jansson cannot
 * move a member or skip nulls without building a second tree, and its
 * reals come out with 17 significant digits ("0.10000000000000001").
 * Reals are written as Python's repr writes them (the shortest digits that
 * read back to the same double; positional between 1e-4 and 1e16, else
 * "1e+100"), so a producer's 0.1 is stored as 0.1. Strings are escaped as
 * Python's json.dumps(ensure_ascii=False) does: quote, backslash and
 * control characters only; UTF-8 (jansson has validated it) and "/" go out
 * as they are.
 */
#include "actors/event.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wbuf {
    char *p;
    size_t len, cap;
    bool failed;
} wbuf;

static void put(wbuf *w, const char *s, size_t n)
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

static void putc_(wbuf *w, char c)
{
    put(w, &c, 1);
}

static void put_string(wbuf *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    putc_(w, '"');
    size_t run = 0; /* bytes copied as they are, flushed in one put */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(w, s + run, i - run);
        run = i + 1;
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
        put(w, esc, elen);
    }
    put(w, s + run, n - run);
    putc_(w, '"');
}

/* Python's float repr. The digit search goes through printf/strtod, which
 * agree with each other in any locale; the radix character printf used is
 * skipped rather than assumed to be '.'. */
static int put_real(wbuf *w, double x)
{
    if (!isfinite(x))
        return -EINVAL; /* JSON has no spelling for them; jansson never makes one */
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x || prec == 17)
            break;
    }
    /* tmp is [-]d[<radix>ddd]e(+|-)dd */
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg)
        p++;
    char digits[20];
    size_t nd = 0;
    for (; *p != 'e' && *p != '\0'; p++)
        if (*p >= '0' && *p <= '9' && nd < sizeof(digits))
            digits[nd++] = *p;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;

    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = -1; i > exp10; i--)
                out[o++] = '0';
            memcpy(out + o, digits, nd);
            o += nd;
        } else {
            size_t ip = (size_t)exp10 + 1; /* digits before the point */
            for (size_t i = 0; i < ip; i++)
                out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > ip) {
                memcpy(out + o, digits + ip, nd - ip);
                o += nd - ip;
            } else {
                out[o++] = '0';
            }
        }
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof(out) - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                              abs(exp10));
    }
    put(w, out, o);
    return 0;
}

static const char *const base_keys[] = {"id", "timestamp", "source", "parent_id"};
#define N_BASE (sizeof(base_keys) / sizeof(base_keys[0]))

static bool is_base_key(const char *k, size_t klen)
{
    for (size_t i = 0; i < N_BASE; i++)
        if (strlen(base_keys[i]) == klen && memcmp(base_keys[i], k, klen) == 0)
            return true;
    return false;
}

static int put_value(wbuf *w, json_t *v, bool top);

static int put_member(wbuf *w, bool *first, const char *k, size_t klen, json_t *v)
{
    if (!*first)
        putc_(w, ',');
    *first = false;
    put_string(w, k, klen);
    putc_(w, ':');
    return put_value(w, v, false);
}

static int put_object(wbuf *w, json_t *o, bool top)
{
    bool first = true;
    int rc = 0;
    putc_(w, '{');
    if (top) {
        for (size_t i = 0; i < N_BASE && rc == 0; i++) {
            json_t *v = json_object_get(o, base_keys[i]);
            if (v != NULL && !json_is_null(v))
                rc = put_member(w, &first, base_keys[i], strlen(base_keys[i]), v);
        }
    }
    for (void *it = json_object_iter(o); it != NULL && rc == 0; it = json_object_iter_next(o, it)) {
        const char *k = json_object_iter_key(it);
        size_t klen = json_object_iter_key_len(it);
        json_t *v = json_object_iter_value(it);
        if (json_is_null(v) || (top && is_base_key(k, klen)))
            continue;
        if (klen == 4 && memcmp(k, "kind", 4) == 0)
            continue;
        rc = put_member(w, &first, k, klen, v);
    }
    json_t *kind = json_object_get(o, "kind");
    if (rc == 0 && kind != NULL && !json_is_null(kind))
        rc = put_member(w, &first, "kind", 4, kind);
    putc_(w, '}');
    return rc;
}

static int put_value(wbuf *w, json_t *v, bool top)
{
    char num[32];
    int rc = 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return put_object(w, v, top);
    case JSON_ARRAY:
        putc_(w, '[');
        for (size_t i = 0; i < json_array_size(v) && rc == 0; i++) {
            if (i > 0)
                putc_(w, ',');
            rc = put_value(w, json_array_get(v, i), false);
        }
        putc_(w, ']');
        return rc;
    case JSON_STRING:
        put_string(w, json_string_value(v), json_string_length(v));
        return 0;
    case JSON_INTEGER:
        put(w, num,
            (size_t)snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v)));
        return 0;
    case JSON_REAL:
        return put_real(w, json_real_value(v));
    case JSON_TRUE:
        put(w, "true", 4);
        return 0;
    case JSON_FALSE:
        put(w, "false", 5);
        return 0;
    case JSON_NULL:
        put(w, "null", 4);
        return 0;
    }
    return -EINVAL;
}

/* The canonical text in a malloc'd, NUL-terminated buffer; *len excludes
 * the NUL. The text never holds a raw NUL (U+0000 is written \u0000). */
static char *canonical(json_t *v, size_t *len)
{
    if (v == NULL)
        return NULL;
    wbuf w = {0};
    int rc = put_value(&w, v, true);
    putc_(&w, '\0');
    if (rc != 0 || w.failed) {
        free(w.p);
        return NULL;
    }
    *len = w.len - 1;
    return w.p;
}

char *ev_canonical_json(json_t *v)
{
    size_t len;
    return canonical(v, &len);
}

static void free_bytes(void *data, void *ctx)
{
    (void)ctx;
    free(data);
}

rt_buf *ev_serialize(const ev *e)
{
    if (e == NULL)
        return NULL;
    size_t len;
    char *p = canonical(e->obj, &len);
    if (p == NULL)
        return NULL;
    rt_buf *b = rt_buf_wrap(p, len, free_bytes, NULL);
    if (b == NULL)
        free(p);
    return b;
}
