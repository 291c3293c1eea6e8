/* json.c - a JSON reader that builds jansson values (json.h), on the lexer
 * it shares with jdoc.c (json_lex.h), and a writer of them. */
#include "json.h"

#include "json_lex.h"
#include "text.h"

#include <stdlib.h>
#include <string.h>

static json_t *value(rt__lex *r);

static json_t *object(rt__lex *r)
{
    json_t *o = json_object();
    if (o == NULL) {
        rt__lex_fail(r, "out of memory");
        return NULL;
    }
    if (rt__lex_open(r, '}'))
        return o;
    for (;;) {
        const char *k;
        size_t klen;
        if (!rt__lex_key(r, &k, &klen))
            break;
        /* the key must outlive the value's parse, which reuses tmp */
        char small[64], *key = klen < sizeof(small) ? small : malloc(klen + 1);
        if (key == NULL) {
            rt__lex_fail(r, "out of memory");
            break;
        }
        memcpy(key, k, klen);
        key[klen] = '\0';
        json_t *v = NULL;
        if ((r->flags & JSON_REJECT_DUPLICATES) && json_object_getn(o, key, klen) != NULL)
            rt__lex_fail(r, "duplicate object key");
        else if (rt__lex_colon(r))
            v = value(r);
        if (v != NULL && json_object_setn_new_nocheck(o, key, klen, v) != 0)
            rt__lex_fail(r, "out of memory");
        if (key != small)
            free(key);
        if (v == NULL || r->failed)
            break;
        int more = rt__lex_next(r, '}');
        if (more == 0)
            return o;
        if (more < 0)
            break;
    }
    json_decref(o);
    return NULL;
}

static json_t *array(rt__lex *r)
{
    json_t *a = json_array();
    if (a == NULL) {
        rt__lex_fail(r, "out of memory");
        return NULL;
    }
    if (rt__lex_open(r, ']'))
        return a;
    for (;;) {
        json_t *v = value(r);
        if (v == NULL)
            break;
        if (json_array_append_new(a, v) != 0) {
            rt__lex_fail(r, "out of memory");
            break;
        }
        int more = rt__lex_next(r, ']');
        if (more == 0)
            return a;
        if (more < 0)
            break;
    }
    json_decref(a);
    return NULL;
}

static json_t *scalar(rt__lex *r)
{
    json_int_t i;
    double d;
    json_t *v;
    switch (rt__lex_scalar(r, &i, &d)) {
    case JSON_INTEGER:
        v = json_integer(i);
        break;
    case JSON_REAL:
        v = json_real(d);
        break;
    case JSON_TRUE:
        return json_true();
    case JSON_FALSE:
        return json_false();
    case JSON_NULL:
        return json_null();
    default:
        return NULL;
    }
    if (v == NULL)
        rt__lex_fail(r, "out of memory");
    return v;
}

/* A value at r->p (spaces skipped). */
static json_t *value(rt__lex *r)
{
    if (!rt__lex_enter(r))
        return NULL;
    json_t *v = NULL;
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
        if (rt__lex_string(r, &s, &len) && (v = json_stringn_nocheck(s, len)) == NULL)
            rt__lex_fail(r, "out of memory");
        break;
    default:
        v = scalar(r);
    }
    r->depth--;
    return v;
}

json_t *rt_json_read(const char *text, size_t len, size_t flags, json_error_t *err)
{
    rt__lex r;
    rt__lex_start(&r, text, len, flags, err);
    json_t *v = rt__lex_top(&r) ? value(&r) : NULL;
    if (!rt__lex_end(&r, v != NULL)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

/* ---- writing ------------------------------------------------------------------ */

static const char upper_hex[] = "0123456789ABCDEF";

static void put(rt_text *w, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        rt_text_putc(w, '{');
        bool first = true;
        for (void *it = json_object_iter((json_t *)v); it != NULL;
             it = json_object_iter_next((json_t *)v, it)) {
            if (!first)
                rt_text_putc(w, ',');
            first = false;
            rt_text_json_string_hex(w, json_object_iter_key(it), json_object_iter_key_len(it),
                                    upper_hex);
            rt_text_putc(w, ':');
            put(w, json_object_iter_value(it));
        }
        rt_text_putc(w, '}');
        break;
    }
    case JSON_ARRAY: {
        rt_text_putc(w, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i > 0)
                rt_text_putc(w, ',');
            put(w, json_array_get(v, i));
        }
        rt_text_putc(w, ']');
        break;
    }
    case JSON_STRING:
        rt_text_json_string_hex(w, json_string_value(v), json_string_length(v), upper_hex);
        break;
    case JSON_INTEGER:
        rt_text_i64(w, json_integer_value(v));
        break;
    case JSON_REAL: { /* rare: jansson's own digits (%.17g, and its ".0") */
        char *s = json_dumps(v, JSON_ENCODE_ANY);
        if (s == NULL)
            w->failed = true;
        else
            rt_text_puts(w, s);
        free(s);
        break;
    }
    case JSON_TRUE:
        rt_text_puts(w, "true");
        break;
    case JSON_FALSE:
        rt_text_puts(w, "false");
        break;
    case JSON_NULL:
        rt_text_puts(w, "null");
        break;
    }
}

char *rt_json_dumps(const json_t *v, size_t *len)
{
    if (v == NULL)
        return NULL;
    rt_text w = {0};
    put(&w, v);
    rt_text_putc(&w, '\0');
    if (w.failed) {
        free(w.p);
        return NULL;
    }
    if (len != NULL)
        *len = w.len - 1;
    return w.p;
}

rt_buf *rt_json_buf(json_t *v)
{
    size_t len = 0;
    char *s = rt_json_dumps(v, &len);
    json_decref(v);
    return s != NULL ? rt_buf_take(s, len) : NULL;
}
