/*
 * jdoc.h - a JSON text read once into a document: its values as nodes in
 * text order in one array, its strings decoded in place in the document's
 * own copy of the text. Reading one costs no allocation per value and
 * freeing it two frees, where a jansson tree costs a few allocations per
 * value and a walk to free them. For values read once and written once,
 * like the events an append brings.
 *
 * rt_jdoc_read accepts exactly what rt_json_read accepts with the same
 * flags and JSON_REJECT_DUPLICATES (a document never holds a key twice;
 * the flags that matter are JSON_DECODE_ANY and JSON_ALLOW_NUL), and reads
 * the same values: the two share one lexer (json_lex.h), and
 * rt_jdoc_tree(d, 0) is json_equal to rt_json_read's tree, members in the
 * same order.
 *
 * The nodes. The root is node 0. A container's members follow it: an
 * array's elements, an object's key and value, key and value... (a key is
 * a string node). Each value is followed by its own members; `end` is the
 * index just past a value's last node, so a value's next sibling is
 * node[v].end, and an object's member k (a key) has its value at k + 1.
 *
 * Strings are NUL-terminated in the document's text, so a string's value
 * is a C string (one holding U+0000, which only JSON_ALLOW_NUL lets in,
 * shows its whole length in len only).
 *
 * A document is reference-counted, not atomically: one thread at a time
 * (as a jansson value).
 */
#ifndef RT_JDOC_H
#define RT_JDOC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef enum rt_jtype {
    RT_JNULL = 0,
    RT_JFALSE,
    RT_JTRUE,
    RT_JINT,
    RT_JREAL,
    RT_JSTR,
    RT_JARR,
    RT_JOBJ,
} rt_jtype;

typedef struct rt_jnode {
    uint8_t type;   /* rt_jtype */
    uint8_t esc;    /* strings: the text had an escape (the value was decoded) */
    uint32_t end;   /* the index just past this value and its members */
    uint32_t len;   /* strings: bytes; arrays: elements; objects: members */
    union {
        uint32_t off; /* strings: where the value starts in text */
        int64_t i;    /* RT_JINT */
        double r;     /* RT_JREAL */
        struct {
            uint32_t from, to; /* containers: their text, brackets included */
        } span;
    } u;
} rt_jnode;

typedef struct rt_jdoc {
    unsigned refs;
    uint32_t n;     /* nodes */
    rt_jnode *node; /* n of them */
    char *text;     /* the copy the strings live in */
} rt_jdoc;

#define RT_JNONE UINT32_MAX /* no such node */

/* Read text (len bytes; at most UINT32_MAX - 1) into a new document with
 * one reference. NULL on failure, and *err (if given) says what and
 * where, as rt_json_read says it. */
rt_jdoc *rt_jdoc_read(const char *text, size_t len, size_t flags, json_error_t *err);
rt_jdoc *rt_jdoc_ref(rt_jdoc *d);
void rt_jdoc_unref(rt_jdoc *d); /* NULL is fine */

static inline rt_jtype rt_jdoc_type(const rt_jdoc *d, uint32_t v)
{
    return (rt_jtype)d->node[v].type;
}

/* A string node's value (NUL-terminated; d->node[v].len bytes), or NULL
 * if v is RT_JNONE or not a string. */
static inline const char *rt_jdoc_str(const rt_jdoc *d, uint32_t v)
{
    return v != RT_JNONE && d->node[v].type == RT_JSTR ? d->text + d->node[v].u.off : NULL;
}

/* The value of an object's member named key (klen bytes), or RT_JNONE
 * (also when obj is not an object, or RT_JNONE). Members are looked at in
 * order: objects are small where this is used. */
uint32_t rt_jdoc_getn(const rt_jdoc *d, uint32_t obj, const char *key, size_t klen);
uint32_t rt_jdoc_get(const rt_jdoc *d, uint32_t obj, const char *key);

/* A container's first member (an array's first element; an object's first
 * key), or RT_JNONE if it has none. c must be an array or an object. */
static inline uint32_t rt_jdoc_first(const rt_jdoc *d, uint32_t c)
{
    return d->node[c].len > 0 ? c + 1 : RT_JNONE;
}

/* The member after m in container c, or RT_JNONE after the last. */
static inline uint32_t rt_jdoc_next(const rt_jdoc *d, uint32_t c, uint32_t m)
{
    uint32_t n = d->node[c].type == RT_JOBJ ? d->node[m + 1].end : d->node[m].end;
    return n < d->node[c].end ? n : RT_JNONE;
}

/* The value v as a new jansson tree (NULL on allocation failure, or if v
 * is RT_JNONE). */
json_t *rt_jdoc_tree(const rt_jdoc *d, uint32_t v);

#endif
