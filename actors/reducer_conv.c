/*
 * reducer_conv.c - the blocks of one conversation: upsert (shallow merge
 * in place, or defaults + partial appended), delta (text appended to
 * string or null content only, F15), idle (empty assistant text and
 * thinking removed, pending made complete), and the index of subagent
 * blocks by toolUseId that subagent events look them up in.
 *
 * Blocks keep their slot for life; an idle's removal leaves a hole that
 * is squeezed out once holes are half the slots, so removal is O(1)
 * amortized and ids keep pointing at their blocks. The holes are kept in
 * order, so a block's position (its slot less the holes before it) costs
 * a binary search.
 */
#include "actors/reducer_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Every block starts pending, at the time of its event (set by the
 * caller); a type adds the members the reference's block types require. */
json_t *rd_defaults_new(void)
{
    return json_loads(
        "{\"assistant_text\": {\"content\": \"\"},"
        " \"thinking\": {\"content\": \"\"},"
        " \"user_message\": {\"content\": \"\"},"
        " \"tool_use\": {\"toolName\": \"\", \"toolUseId\": \"\", \"input\": {}},"
        " \"tool_result\": {\"toolUseId\": \"\", \"output\": null, \"isError\": false},"
        " \"system\": {\"subtype\": \"status\", \"message\": \"\"},"
        " \"subagent\": {\"input\": \"\"},"
        " \"error\": {\"message\": \"\"},"
        " \"skill_load\": {\"skillName\": \"\", \"content\": \"\"}}",
        0, NULL);
}

static const char *str_of(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static bool is(const json_t *o, const char *key, const char *want)
{
    const char *v = str_of(o, key);
    return v != NULL && strcmp(v, want) == 0;
}

/* The delta buffer goes with its capacity: a later delta must allocate
 * anew, not write into a buffer it believes is still there. */
static void drop_text(rd_block *b)
{
    free(b->text);
    b->text = NULL;
    b->len = b->cap = 0;
}

int rd_sync(rd_block *b)
{
    if (b->text == NULL)
        return 0;
    if (json_object_set_new(b->obj, "content", json_stringn(b->text, b->len)) != 0)
        return -ENOMEM;
    drop_text(b);
    return 0;
}

int rd_emit_block(rd_block *b, json_t *changed)
{
    if (changed == NULL)
        return 0;
    if (rd_sync(b) != 0)
        return -ENOMEM;
    json_t *rec = json_pack("{s:s, s:O}", "conversation", b->conv->name, "block", b->obj);
    return json_array_append_new(changed, rec) ? -ENOMEM : 0;
}

/* ------------------------------------------------ subagent block index --- */

static bool is_subagent_block(const rd_block *b, const char *tool)
{
    return is(b->obj, "type", "subagent") && is(b->obj, "toolUseId", tool);
}

static rd_block *scan_conv(rd_conv *c, const char *tool)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->slot[i] != NULL && is_subagent_block(c->slot[i], tool))
            return c->slot[i];
    return NULL;
}

/* Points tool at the first block that has it, in state order. Only when
 * an indexed block stops being one (a retype, a removal): rare. */
static int reindex(reducer *r, const char *tool)
{
    rd_block *b = scan_conv(&r->main, tool);
    for (size_t i = 0; b == NULL && i < r->nsub; i++)
        b = scan_conv(&r->sub[i]->conv, tool);
    if (b == NULL) {
        idmap_del(&r->sub_blocks, tool);
        return 0;
    }
    if (b->sub_key == NULL && (b->sub_key = strdup(tool)) == NULL)
        return -ENOMEM;
    return idmap_put(&r->sub_blocks, tool, b);
}

/* Drops b from the index (it changed or goes away). */
static int unindex(reducer *r, rd_block *b)
{
    char *key = b->sub_key;
    if (key == NULL)
        return 0;
    b->sub_key = NULL;
    int rc = idmap_get(&r->sub_blocks, key) == b ? reindex(r, key) : 0;
    free(key);
    return rc;
}

/* Invariant: every toolUseId some subagent block has is in the index,
 * pointing at a block that has it. The first such block in state order is
 * the one subagent events update; the index holds the first registered,
 * which is the same unless blocks of one Task are made out of order. */
static int index_block(reducer *r, rd_block *b)
{
    const char *tool = str_of(b->obj, "toolUseId");
    bool fits = tool != NULL && is(b->obj, "type", "subagent");
    if (b->sub_key != NULL && (!fits || strcmp(b->sub_key, tool) != 0) && unindex(r, b) != 0)
        return -ENOMEM;
    if (!fits || b->sub_key != NULL || idmap_get(&r->sub_blocks, tool) != NULL)
        return 0;
    if ((b->sub_key = strdup(tool)) == NULL)
        return -ENOMEM;
    return idmap_put(&r->sub_blocks, tool, b);
}

rd_block *rd_find_subagent_block(reducer *r, const char *tool)
{
    if (tool == NULL)
        return NULL;
    return idmap_get(&r->sub_blocks, tool);
}

/* --------------------------------------------------------------- store --- */

static int watch(rd_conv *c, rd_block *b)
{
    if (b->watched)
        return 0;
    if (rt_grow((void **)&c->watch, &c->wcap, c->nwatch + 1, sizeof(*c->watch), 16) != 0)
        return -ENOMEM;
    c->watch[c->nwatch++] = b;
    b->watched = true;
    return 0;
}

static rd_block *add_block(reducer *r, rd_conv *c, json_t *partial)
{
    const char *type = str_of(partial, "type");
    json_t *d = type ? json_object_get(r->defaults, type) : NULL;
    char now[32];
    r->now(r->now_ctx, now);
    json_t *obj = d ? json_deep_copy(d) : json_object();
    rd_block *b = calloc(1, sizeof(*b));
    if (b == NULL || obj == NULL || json_object_set_new(obj, "timestamp", json_string(now)) ||
        json_object_set_new(obj, "status", json_string("pending")) ||
        json_object_update(obj, partial) ||
        rt_grow((void **)&c->slot, &c->cap, c->n + 1, sizeof(*c->slot), 16) ||
        idmap_put(&c->ids, str_of(partial, "id"), b)) {
        json_decref(obj);
        free(b);
        return NULL;
    }
    b->obj = obj;
    b->conv = c;
    b->pos = c->n;
    c->slot[c->n++] = b;
    c->live++;
    return b;
}

int rd_upsert(reducer *r, rd_conv *c, json_t *partial, json_t *changed)
{
    rd_block *b = idmap_get(&c->ids, str_of(partial, "id"));
    if (b != NULL) {
        if (json_object_get(partial, "content") != NULL)
            drop_text(b); /* the partial's content replaces what deltas made */
        if (rd_sync(b) != 0 || json_object_update(b->obj, partial) != 0)
            return -ENOMEM;
    } else if ((b = add_block(r, c, partial)) == NULL) {
        return -ENOMEM;
    }
    if (watch(c, b) != 0 || index_block(r, b) != 0)
        return -ENOMEM;
    return rd_emit_block(b, changed);
}

int rd_delta(rd_conv *c, const char *id, const char *text, size_t len, json_t *changed)
{
    rd_block *b = idmap_get(&c->ids, id);
    if (b == NULL)
        return 0;
    if (b->text == NULL) {
        json_t *content = json_object_get(b->obj, "content");
        if (!json_is_string(content) && !json_is_null(content))
            return 0; /* no content (tool_use...), or parts: not text (F15) */
        size_t have = json_string_length(content); /* 0 for null */
        if (rt_grow((void **)&b->text, &b->cap, have + len + 1, 1, 64) != 0)
            return -ENOMEM;
        memcpy(b->text, json_string_value(content) ? json_string_value(content) : "", have);
        b->len = have;
    } else if (rt_grow((void **)&b->text, &b->cap, b->len + len + 1, 1, 64) != 0) {
        return -ENOMEM;
    }
    memcpy(b->text + b->len, text, len);
    b->len += len;
    if (changed == NULL)
        return 0;
    json_t *rec =
        json_pack("{s:s, s:s, s:s%}", "conversation", c->name, "id", id, "delta", text, len);
    return json_array_append_new(changed, rec) ? -ENOMEM : 0;
}

/* --------------------------------------------------------------- idle --- */

/* Length of the JavaScript whitespace character at s (String.trim's
 * set: the reference decides what is blank), 0 if s is not one. */
static size_t space_len(const unsigned char *s, size_t n)
{
    if (n >= 1 && (s[0] == ' ' || (s[0] >= '\t' && s[0] <= '\r')))
        return 1;
    if (n >= 2 && s[0] == 0xC2 && s[1] == 0xA0)
        return 2;
    if (n < 3)
        return 0;
    unsigned cp = (unsigned)(s[0] & 0x0F) << 12 | (unsigned)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    if ((s[0] & 0xF0) != 0xE0)
        return 0;
    bool sp = cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
              cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
    return sp ? 3 : 0;
}

static bool blank(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t k; n > 0; p += k, n -= k)
        if ((k = space_len(p, n)) == 0)
            return false;
    return true;
}

void reducer_trim(const char *s, size_t n, size_t *start, size_t *len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t a = 0, b = n, k;
    while (a < b && (k = space_len(p + a, b - a)) > 0)
        a += k;
    /* From the end: the last space character that ends exactly at b. */
    for (bool more = true; more && a < b;) {
        more = false;
        for (k = 1; k <= 3 && k <= b - a; k++)
            if (space_len(p + b - k, k) == k) {
                b -= k;
                more = true;
                break;
            }
    }
    *start = a;
    *len = b - a;
}

/* An empty text or thinking block, left behind by streaming. */
static bool ghost(const rd_block *b)
{
    if (!is(b->obj, "type", "assistant_text") && !is(b->obj, "type", "thinking"))
        return false;
    if (b->text != NULL)
        return blank(b->text, b->len);
    json_t *content = json_object_get(b->obj, "content");
    if (content == NULL || json_is_null(content))
        return true;
    return json_is_string(content) &&
           blank(json_string_value(content), json_string_length(content));
}

static void free_block(rd_block *b)
{
    free(b->text);
    free(b->sub_key);
    json_decref(b->obj);
    free(b);
}

/* How many holes are before slot pos. */
static size_t holes_before(const rd_conv *c, size_t pos)
{
    size_t lo = 0, hi = c->nholes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->holes[mid] < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t rd_position(const rd_conv *c, const rd_block *b)
{
    return b->pos - holes_before(c, b->pos);
}

static int remove_block(reducer *r, rd_conv *c, rd_block *b, json_t *changed)
{
    const char *id = str_of(b->obj, "id");
    if (rt_grow((void **)&c->holes, &c->hcap, c->nholes + 1, sizeof(*c->holes), 16) != 0 ||
        (changed != NULL && json_array_append_new(changed, json_pack("{s:s, s:s}", "conversation",
                                                                     c->name, "removed", id)) != 0))
        return -ENOMEM;
    size_t at = holes_before(c, b->pos);
    memmove(c->holes + at + 1, c->holes + at, (c->nholes - at) * sizeof(*c->holes));
    c->holes[at] = b->pos;
    c->nholes++;
    c->slot[b->pos] = NULL;
    c->live--;
    idmap_del(&c->ids, id);
    int rc = unindex(r, b);
    free_block(b);
    return rc;
}

static void squeeze(rd_conv *c)
{
    size_t holes = c->n - c->live;
    if (holes < 16 || holes * 2 < c->n)
        return;
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->slot[i] != NULL) {
            c->slot[i]->pos = k;
            c->slot[k++] = c->slot[i];
        }
    c->n = k;
    c->nholes = 0;
}

int rd_idle(reducer *r, rd_conv *c, json_t *changed)
{
    int rc = 0;
    size_t i;
    for (i = 0; i < c->nwatch && rc == 0; i++) {
        rd_block *b = c->watch[i];
        b->watched = false;
        if (ghost(b)) {
            rc = remove_block(r, c, b, changed);
        } else if (is(b->obj, "status", "pending")) {
            rc = json_object_set_new(b->obj, "status", json_string("complete")) ? -ENOMEM : 0;
            if (rc == 0)
                rc = rd_emit_block(b, changed);
        }
    }
    /* On failure the blocks not reached stay watched for the next idle. */
    memmove(c->watch, c->watch + i, (c->nwatch - i) * sizeof(*c->watch));
    c->nwatch -= i;
    squeeze(c);
    return rc;
}

/* --------------------------------------------------------------- reads --- */

json_t *rd_conv_blocks(rd_conv *c, bool shared)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < c->n; i++) {
        rd_block *b = c->slot[i];
        if (b != NULL &&
            (rd_sync(b) != 0 ||
             json_array_append_new(a, shared ? json_incref(b->obj) : json_deep_copy(b->obj)))) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

void rd_conv_free(rd_conv *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->slot[i] != NULL)
            free_block(c->slot[i]);
    free(c->slot);
    free(c->holes);
    free(c->watch);
    idmap_free(&c->ids);
    free(c->name);
}
