/*
 * view.c - see view.h.
 *
 * Marks. Every block (keyed "<conversation>\n<id>") and every subagent
 * entry (keyed "\n<toolUseId>": no conversation name is empty) has a mark:
 * the index of the event that last changed it and the order it was made
 * in. Marks sit on a list in the order of their last change, so the marks
 * changed after event N are the list's tail, found by walking back from
 * its end; sorting them by when they were made gives the order of the
 * blocks (new blocks come last, and a block never moves).
 */
#include "actors/view.h"

#include "actors/event.h"
#include "actors/idmap.h"
#include "actors/reducer_parley.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct mark {
    struct mark *prev, *next; /* by last change, oldest first */
    char *conv;               /* NULL for a subagent entry */
    char *id;                 /* block id, or the entry's toolUseId */
    uint64_t index;           /* of the last event that changed it */
    uint64_t made;            /* order of creation (again after a removal) */
    bool removed;
} mark;

struct view {
    reducer *r;
    parley_conv *conv;
    idmap marks;
    mark *head, *tail;
    uint64_t next, skipped, made;
    json_t *out, *changed; /* scratch, reused */
};

view *view_new(reducer_now_fn now, void *ctx)
{
    view *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return NULL;
    v->r = reducer_new(now, ctx);
    v->conv = parley_conv_new();
    v->out = json_array();
    v->changed = json_array();
    if (v->r == NULL || v->conv == NULL || v->out == NULL || v->changed == NULL) {
        view_free(v);
        return NULL;
    }
    return v;
}

void view_free(view *v)
{
    if (v == NULL)
        return;
    for (mark *m = v->head, *n; m != NULL; m = n) {
        n = m->next;
        free(m->conv);
        free(m->id);
        free(m);
    }
    idmap_free(&v->marks);
    reducer_free(v->r);
    parley_conv_free(v->conv);
    json_decref(v->out);
    json_decref(v->changed);
    free(v);
}

uint64_t view_next(const view *v)
{
    return v->next;
}

uint64_t view_skipped(const view *v)
{
    return v->skipped;
}

size_t view_blocks(const view *v)
{
    return reducer_block_count(v->r);
}

const json_t *view_block(view *v, const char *conv, const char *id)
{
    return reducer_block(v->r, conv, id);
}

/* ---------------------------------------------------------------- marks --- */

static void unlink_mark(view *v, mark *m)
{
    *(m->prev ? &m->prev->next : &v->head) = m->next;
    *(m->next ? &m->next->prev : &v->tail) = m->prev;
    m->prev = m->next = NULL;
}

static void append_mark(view *v, mark *m)
{
    m->prev = v->tail;
    *(v->tail ? &v->tail->next : &v->head) = m;
    v->tail = m;
}

/* Marks what conv/id (conv NULL: the entry id) became at index. */
static int touch(view *v, const char *conv, const char *id, uint64_t index, bool removed)
{
    size_t cl = conv ? strlen(conv) : 0, il = strlen(id);
    char *key = malloc(cl + il + 2);
    if (key == NULL)
        return -ENOMEM;
    memcpy(key, conv ? conv : "", cl);
    key[cl] = '\n';
    memcpy(key + cl + 1, id, il + 1);
    mark *m = idmap_get(&v->marks, key);
    if (m == NULL) {
        m = calloc(1, sizeof(*m));
        if (m == NULL || (conv && (m->conv = strdup(conv)) == NULL) ||
            (m->id = strdup(id)) == NULL || idmap_put(&v->marks, key, m) != 0) {
            if (m != NULL) {
                free(m->conv);
                free(m->id);
            }
            free(m);
            free(key);
            return -ENOMEM;
        }
        m->made = v->made++;
    } else {
        if (m->removed && !removed) /* made again: appended anew */
            m->made = v->made++;
        unlink_mark(v, m);
    }
    free(key);
    m->index = index;
    m->removed = removed;
    append_mark(v, m);
    return 0;
}

static int mark_changes(view *v, uint64_t index)
{
    size_t i;
    json_t *c;
    json_array_foreach(v->changed, i, c)
    {
        const char *conv = json_string_value(json_object_get(c, "conversation"));
        json_t *b = json_object_get(c, "block"), *s = json_object_get(c, "subagent");
        const char *removed = json_string_value(json_object_get(c, "removed"));
        const char *id = b         ? json_string_value(json_object_get(b, "id"))
                         : s       ? json_string_value(json_object_get(s, "toolUseId"))
                         : removed ? removed
                                   : json_string_value(json_object_get(c, "id"));
        if (id == NULL || (s == NULL && conv == NULL))
            continue;
        if (touch(v, s ? NULL : conv, id, index, removed != NULL) != 0)
            return -ENOMEM;
    }
    return 0;
}

int view_apply(view *v, uint64_t index, const json_t *event)
{
    char why[160];
    json_array_clear(v->out);
    int rc = parley_conv_event(v->conv, event, v->out, why, sizeof(why));
    if (rc == -ENOMEM)
        return rc;
    bool skipped = rc < 0;
    size_t i;
    json_t *se;
    json_array_foreach(v->out, i, se)
    {
        json_array_clear(v->changed);
        rc = reducer_apply_owned(v->r, se, v->changed);
        if (rc == -ENOMEM || mark_changes(v, index) != 0)
            return -ENOMEM;
        skipped |= rc < 0;
    }
    json_array_clear(v->out); /* the state took what it keeps */
    v->skipped += skipped;
    v->next = index + 1;
    return 0;
}

/* ---------------------------------------------------------------- since --- */

static int by_made(const void *a, const void *b)
{
    const mark *x = *(mark *const *)a, *y = *(mark *const *)b;
    return x->made < y->made ? -1 : x->made > y->made;
}

/* The marks changed after `after`, in the order their blocks were made
 * (*n of them; NULL with *n 0 when none; -ENOMEM). */
static int changed_after(view *v, uint64_t after, mark ***out, size_t *n)
{
    size_t k = 0;
    for (mark *m = v->tail; m != NULL && m->index > after; m = m->prev)
        k++;
    *out = NULL;
    *n = k;
    if (k == 0)
        return 0;
    mark **a = malloc(k * sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    size_t i = 0;
    for (mark *m = v->tail; i < k; m = m->prev)
        a[i++] = m;
    qsort(a, k, sizeof(*a), by_made);
    *out = a;
    return 0;
}

/* The entry of subagent ref in subs (made from the reducer's, with an
 * empty "blocks") - found or appended; NULL if out of memory or unknown. */
static json_t *entry_in(view *v, json_t *subs, json_t *index_of, const char *ref)
{
    json_t *e = json_object_get(index_of, ref);
    if (e != NULL)
        return e;
    const json_t *s = reducer_subagent(v->r, ref);
    e = s ? json_copy((json_t *)s) : NULL;
    if (e == NULL || json_object_set_new(e, "blocks", json_array()) != 0 ||
        json_array_append(subs, e) != 0 || json_object_set(index_of, ref, e) != 0) {
        json_decref(e);
        return NULL;
    }
    json_decref(e);
    return e;
}

static json_t *index_value(const view *v)
{
    return json_integer(v->next == 0 ? -1 : (json_int_t)(v->next - 1));
}

json_t *view_since(view *v, int64_t after)
{
    if (after < 0) {
        json_t *st = reducer_state_shared(v->r);
        if (st == NULL || json_object_set_new(st, "index", index_value(v)) != 0 ||
            json_object_set_new(st, "removed", json_array()) != 0) {
            json_decref(st);
            return NULL;
        }
        return st;
    }
    mark **a;
    size_t n;
    if (changed_after(v, (uint64_t)after, &a, &n) != 0)
        return NULL;
    json_t *blocks = json_array(), *subs = json_array(), *removed = json_array();
    json_t *index_of = json_object();
    json_t *st = json_pack("{s:o, s:o, s:o, s:o}", "index", index_value(v), "blocks", blocks,
                           "subagents", subs, "removed", removed);
    bool ok = st != NULL && index_of != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        mark *m = a[i];
        if (m->conv == NULL) {
            ok = entry_in(v, subs, index_of, m->id) != NULL;
        } else if (m->removed) {
            ok = json_array_append_new(
                     removed, json_pack("{s:s, s:s}", "conversation", m->conv, "id", m->id)) == 0;
        } else {
            const json_t *b = reducer_block(v->r, m->conv, m->id);
            json_t *in = strcmp(m->conv, "main") == 0
                             ? blocks
                             : json_object_get(entry_in(v, subs, index_of, m->conv), "blocks");
            ok = b == NULL || (in != NULL && json_array_append(in, (json_t *)b) == 0);
        }
    }
    free(a);
    json_decref(index_of);
    if (!ok) {
        json_decref(st);
        return NULL;
    }
    return st;
}

json_t *view_range(view *v, const char *conv, size_t from, size_t limit, int *err)
{
    size_t total = 0;
    json_t *blocks = json_array();
    *err = blocks != NULL ? reducer_range(v->r, conv, from, limit, blocks, &total) : -ENOMEM;
    json_t *st = *err == 0 ? json_pack("{s:o, s:s, s:I, s:I, s:o}", "index", index_value(v),
                                       "conversation", conv, "total", (json_int_t)total, "from",
                                       (json_int_t)from, "blocks", blocks)
                           : (json_decref(blocks), NULL);
    if (st == NULL && *err == 0)
        *err = -ENOMEM;
    return st;
}

/* ---------------------------------------------------------------- frames --- */

/* The frames of an answer before they are written: conversation (NULL
 * for none), key, value (borrowed from the answer). */
typedef struct pending_frame {
    const char *conv, *key;
    json_t *val;
} pending_frame;

typedef struct frames {
    pending_frame *f;
    size_t n, cap;
    bool failed;
} frames;

static void add(frames *fs, const char *conv, const char *key, json_t *val)
{
    if (fs->n == fs->cap) {
        size_t cap = fs->cap ? 2 * fs->cap : 16;
        pending_frame *f = realloc(fs->f, cap * sizeof(*f));
        if (f == NULL) {
            fs->failed = true;
            return;
        }
        fs->f = f;
        fs->cap = cap;
    }
    fs->f[fs->n++] = (pending_frame){conv, key, val};
}

static void add_blocks(frames *fs, const char *conv, json_t *blocks)
{
    size_t i;
    json_t *b;
    json_array_foreach(blocks, i, b) add(fs, conv, "upsert", b);
}

static void write_frame(view *v, rt_text *out, long long index, const pending_frame *f)
{
    rt_text_printf(out, "{\"index\":%lld", index);
    if (f->conv != NULL) {
        rt_text_puts(out, ",\"conversation\":");
        rt_text_json_string(out, f->conv, strlen(f->conv));
    }
    if (strcmp(f->key, "upsert") == 0) {
        const char *id = json_string_value(json_object_get(f->val, "id"));
        rt_text_printf(out, ",\"at\":%lld", id ? reducer_position(v->r, f->conv, id) : -1);
    }
    rt_text_printf(out, ",\"%s\":", f->key);
    if (ev_json_append(out, f->val) != 0)
        out->failed = true;
    rt_text_puts(out, "}\n");
}

int view_frames(view *v, int64_t after, rt_text *out)
{
    json_t *st = view_since(v, after);
    if (st == NULL)
        return -ENOMEM;
    long long index = (long long)json_integer_value(json_object_get(st, "index"));
    frames fs = {0};
    if (after < 0) {
        json_object_del(st, "index");
        json_object_del(st, "removed");
        add(&fs, NULL, "state", st);
    } else {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(st, "subagents"), i, e)
        {
            json_t *blocks = json_object_get(e, "blocks");
            add(&fs, NULL, "subagent", e);
            add_blocks(&fs, json_string_value(json_object_get(e, "toolUseId")), blocks);
        }
        add_blocks(&fs, "main", json_object_get(st, "blocks"));
        json_array_foreach(json_object_get(st, "removed"), i, e)
        {
            add(&fs, json_string_value(json_object_get(e, "conversation")), "removed",
                json_object_get(e, "id"));
        }
    }
    /* each frame's index is where a client holding it resumes from: the
     * state is whole at `index` only once the last frame is in */
    for (size_t i = 0; !fs.failed && i < fs.n; i++) {
        const pending_frame *f = &fs.f[i];
        json_t *blocks = NULL;
        if (strcmp(f->key, "subagent") == 0) { /* the entry without its blocks */
            blocks = json_incref(json_object_get(f->val, "blocks"));
            json_object_del(f->val, "blocks");
        }
        write_frame(v, out, i + 1 == fs.n ? index : (long long)after, f);
        if (blocks != NULL) {
            json_object_set_new(f->val, "blocks", blocks);
        }
    }
    free(fs.f);
    json_decref(st);
    return fs.failed || out->failed ? -ENOMEM : 0;
}
