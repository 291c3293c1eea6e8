/*
 * tail_blocks.c - see tail_blocks.h.
 */
#include "tail_blocks.h"

#include "actors/idmap.h"
#include "actors/view.h"
#include "runtime/json.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tail_blocks {
    view *v;
    visual_opts o;
    idmap printed; /* "<conversation>\n<id>" */
};

tail_blocks *tail_blocks_new(const visual_opts *o)
{
    tail_blocks *t = calloc(1, sizeof(*t));
    if (t == NULL || (t->v = view_new(NULL, NULL)) == NULL) {
        free(t);
        return NULL;
    }
    t->o = *o;
    return t;
}

void tail_blocks_free(tail_blocks *t)
{
    if (t == NULL)
        return;
    view_free(t->v);
    idmap_free(&t->printed);
    free(t);
}

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* Was conv/id printed; mark it so (when mark). */
static bool printed(tail_blocks *t, const char *conv, const char *id, bool mark)
{
    char key[600];
    snprintf(key, sizeof(key), "%s\n%s", conv, id != NULL ? id : "");
    if (idmap_get(&t->printed, key) != NULL)
        return true;
    if (mark)
        idmap_put(&t->printed, key, t);
    return false;
}

/* Print b if it is settled (or force), once; a tool call with its result. */
static void consider(tail_blocks *t, const char *conv, const json_t *b, bool force, rt_text *out)
{
    const char *id = str(b, "id"), *type = str(b, "type") ? str(b, "type") : "";
    bool pending = strcmp(str(b, "status") ? str(b, "status") : "complete", "pending") == 0;
    int depth = strcmp(conv, "main") == 0 ? 0 : 1;
    if (id == NULL || printed(t, conv, id, false))
        return;
    if (strcmp(type, "tool_result") == 0) {
        const char *use = str(b, "toolUseId");
        const json_t *call = use != NULL ? view_block(t->v, conv, use) : NULL;
        if (call != NULL && !printed(t, conv, use, false)) {
            consider(t, conv, call, true, out); /* the result settles its call */
            return;
        }
    } else if (strcmp(type, "tool_use") == 0) {
        char rid[300];
        snprintf(rid, sizeof(rid), "result-%s", id);
        const json_t *result = view_block(t->v, conv, rid);
        if (pending && result == NULL && !force)
            return;
        printed(t, conv, id, true);
        if (result != NULL)
            printed(t, conv, rid, true);
        visual_block(out, b, result, depth, &t->o);
        return;
    }
    if (pending && !force)
        return;
    printed(t, conv, id, true);
    visual_block(out, b, NULL, depth, &t->o);
}

static void consider_all(tail_blocks *t, json_t *st, bool force, rt_text *out)
{
    size_t i, j;
    json_t *b, *e;
    json_array_foreach(json_object_get(st, "blocks"), i, b) consider(t, "main", b, force, out);
    json_array_foreach(json_object_get(st, "subagents"), i, e)
    {
        const char *conv = str(e, "toolUseId");
        json_array_foreach(json_object_get(e, "blocks"), j, b) consider(t, conv, b, force, out);
    }
}

void tail_blocks_event(tail_blocks *t, uint64_t index, const rt_buf *bytes, rt_text *out)
{
    if (index != view_next(t->v))
        return;
    json_t *e = rt_json_read((const char *)rt_buf_data(bytes), rt_buf_len(bytes), 0, NULL);
    int r = view_apply(t->v, index, e != NULL ? e : json_null());
    json_decref(e);
    json_t *st = r == 0 ? view_since(t->v, (int64_t)index - 1) : NULL;
    if (st != NULL)
        consider_all(t, st, false, out);
    json_decref(st);
}

void tail_blocks_flush(tail_blocks *t, rt_text *out)
{
    json_t *st = view_since(t->v, -1);
    if (st != NULL)
        consider_all(t, st, true, out);
    json_decref(st);
}
