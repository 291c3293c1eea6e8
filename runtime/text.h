/*
 * text.h - text that grows as it is written (JSON bodies, serialized
 * events). Out of memory is sticky: `failed` says so at the end, and the
 * writes in between do nothing, so writers check once.
 */
#ifndef RT_TEXT_H
#define RT_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct rt_text {
    char *p; /* malloc'd; the writer owns it */
    size_t len, cap;
    bool failed;
} rt_text;

void rt_text_puts(rt_text *w, const char *s);
/* put and putc are inline where there is room: a serialized event is
 * written in dozens of small pieces, each a call otherwise. */
void rt_text_put_grow(rt_text *w, const char *s, size_t n);
static inline void rt_text_put(rt_text *w, const char *s, size_t n)
{
    if (w->cap - w->len > n && !w->failed) { /* room for the final NUL too */
        memcpy(w->p + w->len, s, n);
        w->len += n;
    } else {
        rt_text_put_grow(w, s, n);
    }
}
static inline void rt_text_putc(rt_text *w, char c)
{
    if (w->cap - w->len > 1 && !w->failed)
        w->p[w->len++] = c;
    else
        rt_text_put_grow(w, &c, 1);
}
/* A number in decimal (what printf's %lld and %llu write, without its cost:
 * events and answers are full of them). */
void rt_text_i64(rt_text *w, int64_t v);
void rt_text_u64(rt_text *w, uint64_t v);
/* printf onto the end (a line of at most 511 bytes; longer is cut). */
void rt_text_printf(rt_text *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a quoted JSON string: quote, backslash and control characters
 * escaped, everything else (UTF-8 included) as it is, as Python's
 * json.dumps(ensure_ascii=False) writes it. */
void rt_text_json_string(rt_text *w, const char *s, size_t n);
/* The same with the hex digits of \u escapes given (jansson writes them
 * upper case: json.c's writer). */
void rt_text_json_string_hex(rt_text *w, const char *s, size_t n, const char *hex);
/* How many of s's first n bytes a JSON string holds as they are: the
 * length of the run before the first quote, backslash or control
 * character (8 bytes at a time). */
size_t rt_json_plain(const char *s, size_t n);

/* UTF-8 as RFC 3629 has it (no overlong forms, no surrogates, nothing past
 * U+10FFFF), checked as the bytes come: need is the continuation bytes
 * still to come, [lo, hi] the range of the next one (narrower than 80..BF
 * only right after E0, ED, F0 or F4). Start from RT_UTF8_START. */
typedef struct rt_utf8 {
    uint8_t need, lo, hi;
} rt_utf8;
#define RT_UTF8_START                                                                              \
    {                                                                                              \
        0, 0x80, 0xbf                                                                              \
    }
/* Go on with n more bytes: false at the first invalid one (u is then
 * stale). The text so far is whole UTF-8 when it returns true with
 * u->need == 0. */
bool rt_utf8_step(rt_utf8 *u, const uint8_t *p, size_t n);
bool rt_utf8_valid(const uint8_t *p, size_t n);

/* Make a NUL-terminated string one line of valid UTF-8 in place: every
 * byte of an invalid or cut sequence, and every ASCII control character
 * (a line break a decoded query value carried, say), becomes '?'. For
 * echoing what a peer sent. */
void rt_utf8_clean(char *s);
/* Is given (NUL-terminated, or NULL: no) the secret key? Constant time in
 * the key's length: a peer learns nothing from how long a guess took. */
bool rt_key_eq(const char *key, size_t keylen, const char *given);
/* Is given one of the n keys? Every key is compared, whatever matched, so
 * the time says nothing of which. n == 0: no key is needed (true). */
bool rt_keys_match(const char *const *keys, size_t n, const char *given);

#endif
