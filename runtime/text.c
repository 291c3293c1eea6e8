/* text.c - growing text, and JSON strings written as Python writes them. */
#include "text.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rt_text_put(rt_text *w, const char *s, size_t n)
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

void rt_text_putc(rt_text *w, char c)
{
    rt_text_put(w, &c, 1);
}

void rt_text_json_string(rt_text *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    rt_text_putc(w, '"');
    size_t run = 0; /* bytes copied as they are, flushed in one put */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        rt_text_put(w, s + run, i - run);
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
        rt_text_put(w, esc, elen);
    }
    rt_text_put(w, s + run, n - run);
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

/* The length of the valid UTF-8 sequence at s, or 0 (RFC 3629: no
 * overlongs, no surrogates, nothing above U+10FFFF). */
static size_t utf8_seq(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, min = 0x10000;
    else
        return 0;
    unsigned cp = c & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

void rt_utf8_clean(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p != '\0') {
        size_t n = utf8_seq(p);
        if (n == 0)
            *p++ = '?';
        else
            p += n;
    }
}
