/*
 * json_lex.h - the JSON lexer that json.c (jansson trees) and jdoc.c
 * (documents) share, so that the two accept the same texts, read the same
 * values, and refuse with the same words at the same places. Private to
 * runtime/.
 *
 * The pieces move r->p over the text; the first failure is recorded in
 * *r->err (line, column and position as jansson gives them) and makes the
 * piece return false or -1; later failures are ignored. The small pieces
 * are inline: a reader calls them for every member.
 */
#ifndef RT_JSON_LEX_H
#define RT_JSON_LEX_H

#include "text.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt__lex {
    const uint8_t *start, *p, *end;
    size_t flags;
    int depth; /* values open, scalars included, as jansson counts them */
    json_error_t *err;
    bool failed;
    rt_text tmp; /* unescaped strings, long numbers */
} rt__lex;

void rt__lex_fail(rt__lex *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Start reading len bytes of text (NULL fails: "no text"). */
void rt__lex_start(rt__lex *r, const char *text, size_t len, size_t flags, json_error_t *err);
/* Past the space before the value at the top: false if it cannot start
 * there (an object or an array unless JSON_DECODE_ANY), or r has failed. */
bool rt__lex_top(rt__lex *r);
/* After the value at the top, read (read) or not: true if it was and only
 * space follows. Frees what r holds either way. */
bool rt__lex_end(rt__lex *r, bool read);

static inline void rt__lex_space(rt__lex *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

/* Before a value: false at the end of the text or past the depth limit.
 * The caller takes r->depth back down when the value is read. */
static inline bool rt__lex_enter(rt__lex *r)
{
    if (r->p == r->end) {
        rt__lex_fail(r, "premature end of input");
        return false;
    }
    if (++r->depth > JSON_PARSER_MAX_DEPTH) {
        rt__lex_fail(r, "maximum parsing depth reached");
        return false;
    }
    return true;
}

/* A string (r->p at its opening quote): its bytes, either in the text
 * itself (no escapes: *s points into it) or decoded in r->tmp (valid until
 * the next string or number). */
bool rt__lex_string(rt__lex *r, const char **s, size_t *len);
/* An object's key (r->p where it should start), as rt__lex_string; false
 * if there is none or it holds U+0000. */
bool rt__lex_key(rt__lex *r, const char **k, size_t *klen);
/* A number, true, false or null (r->p at its first byte): JSON_INTEGER
 * (*i), JSON_REAL (*d), JSON_TRUE, JSON_FALSE, JSON_NULL, or -1. */
int rt__lex_scalar(rt__lex *r, json_int_t *i, double *d);

/* Past a container's opening bracket and the space after it: true if it
 * closes at once (and then past the close too). */
static inline bool rt__lex_open(rt__lex *r, char close)
{
    r->p++;
    rt__lex_space(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        return true;
    }
    return false;
}

/* Past the ':' after a key and the space around it. */
static inline bool rt__lex_colon(rt__lex *r)
{
    rt__lex_space(r);
    if (r->p == r->end || *r->p != ':') {
        rt__lex_fail(r, "':' expected");
        return false;
    }
    r->p++;
    rt__lex_space(r);
    return true;
}

/* After a member: 1 past a ',' and the space after it (another member
 * follows), 0 past the container's close, -1 on anything else. */
static inline int rt__lex_next(rt__lex *r, char close)
{
    rt__lex_space(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        return 0;
    }
    if (r->p == r->end || *r->p != ',') {
        rt__lex_fail(r, "'%c' expected", close);
        return -1;
    }
    r->p++;
    rt__lex_space(r);
    return 1;
}

#endif
