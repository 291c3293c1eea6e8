/* support_json.c - see support_json.h. */
#include "support_json.h"

#include "runtime/json.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

json_t *tj_json(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &e);
    ck_assert_msg(v != NULL, "bad test JSON: %s: %s", e.text, text);
    return v;
}

json_t *tj_jsonq(const char *text)
{
    char *s = strdup(text);
    ck_assert_ptr_nonnull(s);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    json_t *v = tj_json(s);
    free(s);
    return v;
}

void tj_equal(const json_t *got, json_t *want)
{
    char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    char *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    ck_assert_msg(json_equal((json_t *)got, want), "got %s, want %s", g, w);
    free(g);
    free(w);
    json_decref(want);
}

#define DUMP_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY)

/* ck_assert without a mark point per pass (thousands per test) */
#define require(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

/* The nodes hang together: every value ends after itself and within its
 * container, a container's members are as many as it says, keys are
 * strings, and every string ends in a NUL inside the text. */
void tj_jdoc_nodes(const rt_jdoc *d, size_t text_len)
{
    require(d->n > 0 && d->node[0].end == d->n, "the root spans every node");
    for (uint32_t v = 0; v < d->n; v++) {
        const rt_jnode *n = &d->node[v];
        require(n->end > v && n->end <= d->n, "node %u ends at %u of %u", v, n->end, d->n);
        if (n->type == RT_JSTR) {
            require((size_t)n->u.off + n->len < text_len && d->text[n->u.off + n->len] == '\0',
                       "string node %u is NUL-terminated inside the text", v);
        } else if (n->type == RT_JARR || n->type == RT_JOBJ) {
            char open = n->type == RT_JARR ? '[' : '{', close = n->type == RT_JARR ? ']' : '}';
            require(n->u.span.from < n->u.span.to && n->u.span.to < text_len &&
                        d->text[n->u.span.from] == open && d->text[n->u.span.to - 1] == close,
                    "container %u spans its brackets", v);
            uint32_t count = 0;
            for (uint32_t m = rt_jdoc_first(d, v); m != RT_JNONE; m = rt_jdoc_next(d, v, m)) {
                require(n->type == RT_JARR || d->node[m].type == RT_JSTR, "a key is a string");
                count++;
            }
            require(count == n->len, "node %u has %u members, says %u", v, count, n->len);
        } else {
            require(n->end == v + 1, "a scalar has no members");
        }
    }
}

/* Both readers refuse text with the same words at the same place, or both
 * read the same value, members in the same order. True if they read it. */
bool tj_jdoc_agrees(const char *text, size_t len, size_t flags)
{
    json_error_t je, de;
    memset(&je, 0, sizeof(je));
    memset(&de, 0x55, sizeof(de)); /* a field left unset shows */
    json_t *want = rt_json_read(text, len, flags | JSON_REJECT_DUPLICATES, &je);
    rt_jdoc *d = rt_jdoc_read(text, len, flags, &de);
    require((want != NULL) == (d != NULL), "%s (flags %#zx): %.*s",
               d ? "only the document reads" : "only rt_json_read reads", flags, (int)len, text);
    if (want == NULL) {
        require(strcmp(je.text, de.text) == 0 && je.line == de.line && je.column == de.column &&
                       je.position == de.position,
                   "refused as '%s' %d:%d@%d, not '%s' %d:%d@%d: %.*s", de.text, de.line, de.column,
                   de.position, je.text, je.line, je.column, je.position, (int)len, text);
        return false;
    }
    tj_jdoc_nodes(d, len + 1);
    json_t *got = rt_jdoc_tree(d, 0);
    char *a = json_dumps(got, DUMP_FLAGS), *b = json_dumps(want, DUMP_FLAGS);
    require(got != NULL && a != NULL && b != NULL, "out of memory");
    require(json_equal(got, want) && strcmp(a, b) == 0, "read %s, not %s", a, b);
    free(a);
    free(b);
    json_decref(got);
    json_decref(want);
    rt_jdoc_unref(d);
    return true;
}

