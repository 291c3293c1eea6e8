/*
 * jdoc.c - JSON read into a document (jdoc.h), on the lexer json.c uses
 * (json_lex.h).
 *
 * The document and its copy of the text are one allocation, the nodes a
 * second that doubles as it fills. The lexer reads the caller's text,
 * which stays as it was (a failure's line and column are counted on it),
 * while strings are written into the copy at the offset their raw text
 * starts: decoded text is never longer than its raw text, so a string and
 * its NUL end at or before its closing quote and never reach the next one.
 *
 * Duplicate keys are looked for as each key is read, so the refusal comes
 * at the same place as rt_json_read's: among an object's first members by
 * comparing with each, past KEYS_SCANNED members in a hash set of the
 * object's keys made then (an object that big is rare, and one of a
 * hundred thousand members must not take 10^10 comparisons).
 */
#include "jdoc.h"

#include "grow.h"
#include "json_lex.h"
#include "uuid.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define KEYS_SCANNED 16               /* members compared one by one before a set is made */
#define TEXT_MAX     (UINT32_MAX - 1) /* offsets and counts are uint32_t; RT_JNONE is none */

typedef struct keyset {
    uint32_t *slot; /* key nodes, 0 for empty (node 0 is never a key) */
    uint32_t mask, n;
    uint64_t seed;
} keyset;

typedef struct jreader {
    rt__lex r;
    rt_jdoc *d;
    size_t cap; /* room in d->node */
} jreader;

/* Keys' hashes are seeded per process, so that a peer cannot choose keys
 * that all land in one slot. */
static uint64_t key_seed(void)
{
    static _Atomic uint64_t seed;
    uint64_t s = atomic_load_explicit(&seed, memory_order_relaxed);
    if (s == 0) {
        rt_uuid u;
        if (rt_uuid_v4(&u) == 0)
            memcpy(&s, u.b, sizeof(s));
        s |= 1;
        atomic_store_explicit(&seed, s, memory_order_relaxed);
    }
    return s;
}

/* 8 bytes a step, then murmur3's finalizer, so that every byte of the key
 * (and the seed) moves every bit of the slot. */
static uint64_t key_hash(uint64_t h, const char *s, size_t n)
{
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h ^= w ^ (uint64_t)n << 56; /* w has at most 7 bytes */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ h >> 33;
}

static bool same_key(const rt_jdoc *d, uint32_t a, uint32_t b)
{
    return d->node[a].len == d->node[b].len &&
           memcmp(d->text + d->node[a].u.off, d->text + d->node[b].u.off, d->node[a].len) == 0;
}

/* Key node k into the set: 1 if it holds the same key already, 0 if it
 * did not, -1 out of memory. */
static int keyset_add(keyset *s, const rt_jdoc *d, uint32_t k)
{
    if (s->n >= s->mask / 2) {
        uint32_t cap = s->mask ? (s->mask + 1) * 2 : 4 * KEYS_SCANNED;
        uint32_t *slot = calloc(cap, sizeof(*slot));
        if (slot == NULL)
            return -1;
        keyset old = *s;
        *s = (keyset){.slot = slot, .mask = cap - 1, .seed = old.seed};
        for (uint32_t i = 0; old.mask && i <= old.mask; i++)
            if (old.slot[i] != 0)
                keyset_add(s, d, old.slot[i]);
        free(old.slot);
    }
    const rt_jnode *n = &d->node[k];
    uint32_t i = (uint32_t)key_hash(s->seed, d->text + n->u.off, n->len) & s->mask;
    for (; s->slot[i] != 0; i = (i + 1) & s->mask)
        if (same_key(d, s->slot[i], k))
            return 1;
    s->slot[i] = k;
    s->n++;
    return 0;
}

/* Does key node k repeat one of object o's first `count` keys? 1 if it
 * does, 0 if not, -1 out of memory. */
static int repeats(jreader *j, uint32_t o, uint32_t count, uint32_t k, keyset *set)
{
    const rt_jdoc *d = j->d;
    if (count > KEYS_SCANNED)
        return keyset_add(set, d, k);
    if (count < KEYS_SCANNED) {
        for (uint32_t m = o + 1; m < k; m = d->node[m + 1].end)
            if (same_key(d, m, k))
                return 1;
        return 0;
    }
    set->seed = key_seed();
    for (uint32_t m = o + 1; m < k; m = d->node[m + 1].end)
        if (keyset_add(set, d, m) < 0)
            return -1;
    return keyset_add(set, d, k);
}

/* A new node, its type and the rest for the caller to fill in. */
static uint32_t node(jreader *j)
{
    rt_jdoc *d = j->d;
    if (d->n == j->cap &&
        rt_grow((void **)&d->node, &j->cap, (size_t)d->n + 1, sizeof(rt_jnode), 16) != 0) {
        rt__lex_fail(&j->r, "out of memory");
        return RT_JNONE;
    }
    d->node[d->n] = (rt_jnode){.end = d->n + 1};
    return d->n++;
}

/* A string at r->p (its opening quote) or an object's key into node v. */
static bool string(jreader *j, uint32_t v, bool key)
{
    rt__lex *r = &j->r;
    uint32_t off = (uint32_t)(r->p - r->start) + 1;
    const char *s;
    size_t len;
    if (!(key ? rt__lex_key(r, &s, &len) : rt__lex_string(r, &s, &len)))
        return false;
    char *t = j->d->text + off;
    bool esc = s != (const char *)r->start + off;
    if (esc)
        memcpy(t, s, len);
    t[len] = '\0';
    rt_jnode *n = &j->d->node[v];
    n->type = RT_JSTR;
    n->esc = esc;
    n->len = (uint32_t)len;
    n->u.off = off;
    return true;
}

static bool value(jreader *j);

/* Member `count` of object o: its key, and its value after the ':'. */
static bool member(jreader *j, uint32_t o, uint32_t count, keyset *set)
{
    uint32_t k = node(j);
    if (k == RT_JNONE || !string(j, k, true))
        return false;
    int dup = repeats(j, o, count, k, set);
    if (dup != 0) {
        rt__lex_fail(&j->r, dup > 0 ? "duplicate object key" : "out of memory");
        return false;
    }
    return rt__lex_colon(&j->r) && value(j);
}

static bool object(jreader *j, uint32_t o)
{
    j->d->node[o].u.span.from = (uint32_t)(j->r.p - j->r.start);
    keyset set = {0};
    uint32_t count = 0;
    int more = rt__lex_open(&j->r, '}') ? 0 : 1;
    while (more > 0 && member(j, o, count, &set)) {
        count++;
        more = rt__lex_next(&j->r, '}');
    }
    free(set.slot);
    j->d->node[o].type = RT_JOBJ;
    j->d->node[o].len = count;
    j->d->node[o].u.span.to = (uint32_t)(j->r.p - j->r.start);
    return more == 0;
}

static bool array(jreader *j, uint32_t a)
{
    j->d->node[a].u.span.from = (uint32_t)(j->r.p - j->r.start);
    uint32_t count = 0;
    int more = rt__lex_open(&j->r, ']') ? 0 : 1;
    while (more > 0 && value(j)) {
        count++;
        more = rt__lex_next(&j->r, ']');
    }
    j->d->node[a].type = RT_JARR;
    j->d->node[a].len = count;
    j->d->node[a].u.span.to = (uint32_t)(j->r.p - j->r.start);
    return more == 0;
}

static bool scalar(jreader *j, uint32_t v)
{
    json_int_t i;
    double d;
    rt_jnode *n = &j->d->node[v];
    switch (rt__lex_scalar(&j->r, &i, &d)) {
    case JSON_INTEGER:
        n->type = RT_JINT;
        n->u.i = i;
        return true;
    case JSON_REAL:
        n->type = RT_JREAL;
        n->u.r = d;
        return true;
    case JSON_TRUE:
        n->type = RT_JTRUE;
        return true;
    case JSON_FALSE:
        n->type = RT_JFALSE;
        return true;
    case JSON_NULL:
        n->type = RT_JNULL;
        return true;
    default:
        return false;
    }
}

/* A value at r->p (spaces skipped), with its members after it. */
static bool value(jreader *j)
{
    rt__lex *r = &j->r;
    if (!rt__lex_enter(r))
        return false;
    uint32_t v = node(j);
    if (v == RT_JNONE)
        return false;
    bool ok;
    switch (*r->p) {
    case '{':
        ok = object(j, v);
        break;
    case '[':
        ok = array(j, v);
        break;
    case '"':
        ok = string(j, v, false);
        break;
    default:
        ok = scalar(j, v);
    }
    j->d->node[v].end = j->d->n;
    r->depth--;
    return ok;
}

rt_jdoc *rt_jdoc_read(const char *text, size_t len, size_t flags, json_error_t *err)
{
    jreader j = {0};
    rt__lex_start(&j.r, text, len, flags | JSON_REJECT_DUPLICATES, err);
    if (len > TEXT_MAX)
        rt__lex_fail(&j.r, "text too long: %zu bytes (at most %u)", len, (unsigned)TEXT_MAX);
    if (!j.r.failed && (j.d = malloc(sizeof(rt_jdoc) + len + 1)) == NULL)
        rt__lex_fail(&j.r, "out of memory");
    if (j.d != NULL) {
        *j.d = (rt_jdoc){.refs = 1, .text = (char *)(j.d + 1)};
        memcpy(j.d->text, text, len);
        j.d->text[len] = '\0';
        /* most texts are mostly strings: seldom a node for fewer than 32
         * bytes; a big text's nodes grow from a guess that is not too big */
        j.cap = 16 + (len < 32 * 1024 ? len / 32 : 1024);
        if ((j.d->node = malloc(j.cap * sizeof(rt_jnode))) == NULL)
            rt__lex_fail(&j.r, "out of memory");
    }
    bool ok = rt__lex_top(&j.r) && value(&j);
    if (rt__lex_end(&j.r, ok))
        return j.d;
    if (j.d != NULL)
        free(j.d->node);
    free(j.d);
    return NULL;
}

rt_jdoc *rt_jdoc_ref(rt_jdoc *d)
{
    if (d != NULL)
        d->refs++;
    return d;
}

void rt_jdoc_unref(rt_jdoc *d)
{
    if (d != NULL && --d->refs == 0) {
        free(d->node);
        free(d);
    }
}

uint32_t rt_jdoc_getn(const rt_jdoc *d, uint32_t obj, const char *key, size_t klen)
{
    if (obj == RT_JNONE || d->node[obj].type != RT_JOBJ)
        return RT_JNONE;
    for (uint32_t k = rt_jdoc_first(d, obj); k != RT_JNONE; k = rt_jdoc_next(d, obj, k))
        if (d->node[k].len == klen && memcmp(d->text + d->node[k].u.off, key, klen) == 0)
            return k + 1;
    return RT_JNONE;
}

uint32_t rt_jdoc_get(const rt_jdoc *d, uint32_t obj, const char *key)
{
    return rt_jdoc_getn(d, obj, key, strlen(key));
}

/* An array's or an object's tree. */
static json_t *container(const rt_jdoc *d, uint32_t c)
{
    bool obj = d->node[c].type == RT_JOBJ;
    json_t *t = obj ? json_object() : json_array();
    for (uint32_t m = rt_jdoc_first(d, c); t != NULL && m != RT_JNONE; m = rt_jdoc_next(d, c, m)) {
        const rt_jnode *k = &d->node[m];
        int bad = obj ? json_object_setn_new_nocheck(t, d->text + k->u.off, k->len,
                                                     rt_jdoc_tree(d, m + 1))
                      : json_array_append_new(t, rt_jdoc_tree(d, m));
        if (bad != 0) {
            json_decref(t);
            t = NULL;
        }
    }
    return t;
}

json_t *rt_jdoc_tree(const rt_jdoc *d, uint32_t v)
{
    if (v >= d->n)
        return NULL;
    const rt_jnode *n = &d->node[v];
    switch ((rt_jtype)n->type) {
    case RT_JNULL:
        return json_null();
    case RT_JFALSE:
        return json_false();
    case RT_JTRUE:
        return json_true();
    case RT_JINT:
        return json_integer(n->u.i);
    case RT_JREAL:
        return json_real(n->u.r);
    case RT_JSTR: /* the reader checked its UTF-8 */
        return json_stringn_nocheck(d->text + n->u.off, n->len);
    case RT_JARR:
    case RT_JOBJ:
        return container(d, v);
    }
    return NULL;
}
