/*
 * event_json.c - the canonical bytes of an event, from its document
 * (ev_serialize, ev_write), or of any jansson value (ev_canonical_json, for
 * the answers and views made as trees). Two writers of one set of rules:
 * test_event writes random events both ways and wants the same bytes.
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
 * control characters only; UTF-8 (the reader has validated it) and "/" go out
 * as they are.
 */
#include "actors/event.h"
#include "runtime/text.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Python's float repr. The digit search goes through printf/strtod, which
 * agree with each other in any locale; the radix character printf used is
 * skipped rather than assumed to be '.'. */
static int put_real(rt_text *w, double x)
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
    rt_text_put(w, out, o);
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

static int put_value(rt_text *w, json_t *v, bool top);

/* The comma before every member but an object's first. */
static void put_sep(rt_text *w, bool *first)
{
    if (!*first)
        rt_text_putc(w, ',');
    *first = false;
}

static int put_member(rt_text *w, bool *first, const char *k, size_t klen, json_t *v)
{
    put_sep(w, first);
    rt_text_json_string(w, k, klen);
    rt_text_putc(w, ':');
    return put_value(w, v, false);
}

static int put_object(rt_text *w, json_t *o, bool top)
{
    bool first = true;
    int rc = 0;
    rt_text_putc(w, '{');
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
    rt_text_putc(w, '}');
    return rc;
}

static int put_value(rt_text *w, json_t *v, bool top)
{
    int rc = 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return put_object(w, v, top);
    case JSON_ARRAY:
        rt_text_putc(w, '[');
        for (size_t i = 0; i < json_array_size(v) && rc == 0; i++) {
            if (i > 0)
                rt_text_putc(w, ',');
            rc = put_value(w, json_array_get(v, i), false);
        }
        rt_text_putc(w, ']');
        return rc;
    case JSON_STRING:
        rt_text_json_string(w, json_string_value(v), json_string_length(v));
        return 0;
    case JSON_INTEGER:
        rt_text_i64(w, (int64_t)json_integer_value(v));
        return 0;
    case JSON_REAL:
        return put_real(w, json_real_value(v));
    case JSON_TRUE:
        rt_text_put(w, "true", 4);
        return 0;
    case JSON_FALSE:
        rt_text_put(w, "false", 5);
        return 0;
    case JSON_NULL:
        rt_text_put(w, "null", 4);
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
    rt_text w = {0};
    int rc = put_value(&w, v, true);
    rt_text_putc(&w, '\0');
    if (rc != 0 || w.failed) {
        free(w.p);
        return NULL;
    }
    *len = w.len - 1;
    return w.p;
}

int ev_json_append(rt_text *w, json_t *v)
{
    return v == NULL ? -EINVAL : put_value(w, v, false);
}

char *ev_canonical_json(json_t *v)
{
    size_t len;
    return canonical(v, &len);
}

/* ---- an event, from its document ------------------------------------------ */

/* A string node. One without escapes in its text has no byte that needs
 * one (a raw control character is not JSON): copied as it is. */
static void put_doc_string(rt_text *w, const rt_jdoc *d, uint32_t v)
{
    const rt_jnode *n = &d->node[v];
    if (n->esc) {
        rt_text_json_string(w, d->text + n->u.off, n->len);
        return;
    }
    rt_text_putc(w, '"');
    rt_text_put(w, d->text + n->u.off, n->len);
    rt_text_putc(w, '"');
}

static int put_doc_value(rt_text *w, const rt_jdoc *d, uint32_t v);

static void put_doc_key(rt_text *w, bool *first, const rt_jdoc *d, uint32_t k)
{
    put_sep(w, first);
    put_doc_string(w, d, k);
    rt_text_putc(w, ':');
}

/* An object's members by the rules above: nulls left out, `kind` last;
 * at the top, the base members too (the caller wrote them first). */
static int put_doc_members(rt_text *w, bool first, const rt_jdoc *d, uint32_t o, bool top)
{
    int rc = 0;
    uint32_t kind = RT_JNONE;
    for (uint32_t k = rt_jdoc_first(d, o); k != RT_JNONE && rc == 0; k = rt_jdoc_next(d, o, k)) {
        if (rt_jdoc_type(d, k + 1) == RT_JNULL)
            continue;
        const char *key = d->text + d->node[k].u.off;
        size_t klen = d->node[k].len;
        if (klen == 4 && memcmp(key, "kind", 4) == 0) {
            kind = k;
            continue;
        }
        if (top && is_base_key(key, klen))
            continue;
        put_doc_key(w, &first, d, k);
        rc = put_doc_value(w, d, k + 1);
    }
    if (rc == 0 && kind != RT_JNONE) {
        put_doc_key(w, &first, d, kind);
        rc = put_doc_value(w, d, kind + 1);
    }
    rt_text_putc(w, '}');
    return rc;
}

static int put_doc_value(rt_text *w, const rt_jdoc *d, uint32_t v)
{
    const rt_jnode *n = &d->node[v];
    int rc = 0;
    switch ((rt_jtype)n->type) {
    case RT_JOBJ:
        rt_text_putc(w, '{');
        return put_doc_members(w, true, d, v, false);
    case RT_JARR:
        rt_text_putc(w, '[');
        for (uint32_t x = rt_jdoc_first(d, v); x != RT_JNONE && rc == 0; x = rt_jdoc_next(d, v, x)) {
            if (x != v + 1)
                rt_text_putc(w, ',');
            rc = put_doc_value(w, d, x);
        }
        rt_text_putc(w, ']');
        return rc;
    case RT_JSTR:
        put_doc_string(w, d, v);
        return 0;
    case RT_JINT:
        rt_text_i64(w, n->u.i);
        return 0;
    case RT_JREAL:
        return put_real(w, n->u.r);
    case RT_JTRUE:
        rt_text_put(w, "true", 4);
        return 0;
    case RT_JFALSE:
        rt_text_put(w, "false", 5);
        return 0;
    case RT_JNULL:
        rt_text_put(w, "null", 4);
        return 0;
    }
    return -EINVAL;
}

static void put_base(rt_text *w, bool *first, const char *key, const char *s)
{
    if (s == NULL)
        return;
    put_sep(w, first);
    rt_text_putc(w, '"');
    rt_text_puts(w, key);
    rt_text_put(w, "\":", 2);
    rt_text_json_string(w, s, strlen(s));
}

int ev_write(rt_text *w, const ev *e, bool unparented)
{
    if (e == NULL || e->doc == NULL)
        return -EINVAL;
    const rt_jdoc *d = e->doc;
    uint32_t src = rt_jdoc_get(d, e->at, "source");
    bool first = true;
    rt_text_putc(w, '{');
    put_base(w, &first, "id", e->id);
    if (!unparented)
        put_base(w, &first, "timestamp", e->timestamp);
    if (src != RT_JNONE && rt_jdoc_type(d, src) != RT_JNULL) {
        put_doc_key(w, &first, d, src - 1); /* a member's key is the node before its value */
        int rc = put_doc_value(w, d, src);
        if (rc != 0)
            return rc;
    }
    if (!unparented)
        put_base(w, &first, "parent_id", e->parent_id);
    return put_doc_members(w, first, d, e->at, true);
}

static void free_bytes(void *data, void *ctx)
{
    (void)ctx;
    free(data);
}

/* What an event's bytes take, about: its text as given (the canonical
 * form drops space and nulls and decodes escapes, and a real may grow)
 * and room for the stamps, so that they are written without a realloc
 * and kept without slack until durable. */
static size_t room_for(const ev *e)
{
    const rt_jnode *n = e != NULL && e->doc != NULL ? &e->doc->node[e->at] : NULL;
    return n != NULL ? (size_t)(n->u.span.to - n->u.span.from) + 160 : 0;
}

rt_buf *ev_serialize(const ev *e)
{
    rt_text w = {0};
    if ((w.cap = room_for(e)) > 0 && (w.p = malloc(w.cap)) == NULL)
        return NULL;
    if (ev_write(&w, e, false) != 0 || w.failed) {
        free(w.p);
        return NULL;
    }
    w.p[w.len] = '\0'; /* rt_text keeps room for it; readers of the bytes may want it */
    rt_buf *b = rt_buf_wrap(w.p, w.len, free_bytes, NULL);
    if (b == NULL)
        free(w.p);
    return b;
}
